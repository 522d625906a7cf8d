//! Custom resource types of the `gpucloud.io` API group, version `v1alpha1`.
//!
//! The Rust types are the source of truth: the CRD YAML in `crds/` is generated from them
//! (`gpucloud-operator crds`, through the operator's kind registry) and a test fails when
//! the two differ.

/// Implements [`Managed`] for a kind whose spec holds `managed: ManagedFields` and whose status
/// holds `cloud: CloudStatus`; each kind's module invokes it for its type.
/// `impl_managed!(with_lifetime Kind)` also reads `spec.lifetime`.
macro_rules! impl_managed {
    (with_lifetime $kind:ty) => {
        impl_managed!(@impl $kind {
            fn lifetime(&self) -> Option<&$crate::lifetime::Lifetime> {
                self.spec.lifetime.as_deref()
            }
        });
    };
    (@impl $kind:ty { $($extra:tt)* }) => {
        impl $crate::Managed for $kind {
            const ON_CHANGE: &'static [(&'static str, $crate::OnChange)] = <$kind>::ON_CHANGE;
            const COLUMNS: &'static [$crate::Column] = <$kind>::COLUMNS;
            fn managed(&self) -> &$crate::ManagedFields {
                &self.spec.managed
            }
            fn cloud_status(&self) -> $crate::CloudStatus {
                self.cloud_status_ref().cloned().unwrap_or_default()
            }
            fn cloud_status_ref(&self) -> Option<&$crate::CloudStatus> {
                self.status.as_ref().map(|s| &s.cloud)
            }
            $($extra)*
        }
    };
    ($kind:ty) => {
        impl_managed!(@impl $kind {});
    };
}

pub mod budget;
pub mod common;
pub mod deletion_protection;
pub mod firewall;
pub mod gpu_instance;
pub mod gpu_instance_pool;
pub mod gpu_offering;
pub mod gpu_policy;
pub mod image;
pub mod lifetime;
pub mod money;
pub mod reference;
pub mod schedule;
pub mod snapshot;
pub mod ssh_key;
pub mod volume;

pub use budget::{Budget, BudgetSpec, BudgetStatus, OnExceeded, PoweredOff, Reservation};
pub use common::*;
pub use firewall::{Firewall, FirewallSpec, FirewallStatus};
pub use gpu_instance::{
    ChosenPlacement, FinalSnapshotSpec, FinalSnapshotStatus, GpuInstance, GpuInstanceSpec,
    GpuInstanceStatus, MAX_STARTUP_SCRIPT_BYTES, Placement, PlacementAlternative, PlacementPolicy,
    PlacementStatus, PowerState, SecurityRule, SkippedPlacement,
};
pub use gpu_instance_pool::{
    GpuInstancePool, GpuInstancePoolSpec, GpuInstancePoolStatus, MachineTemplate, PoolStrategy,
    RollingReplace, StrategyType, TemplateMetadata,
};
pub use gpu_offering::{GpuOffering, GpuOfferingSpec, GpuOfferingStatus};
pub use gpu_policy::{
    GpuPolicy, GpuPolicySpec, GpuPolicyStatus, NamespaceCount, NamespaceLimits, PolicyReservation,
};
pub use image::{Image, ImageSpec, ImageStatus};
pub use snapshot::{Snapshot, SnapshotSpec, SnapshotStatus};
pub use ssh_key::{SshKey, SshKeySpec, SshKeyStatus};
pub use volume::{Volume, VolumeSpec, VolumeStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The API group of every kind.
pub const GROUP: &str = "gpucloud.io";

/// The category of a team's own kinds (`kubectl get gpucloud`): what a namespace's users make
/// and may read.
pub const CATEGORY: &str = "gpucloud";
/// The category of the catalog's cluster-scoped kinds (GpuOffering), kept by the operator and
/// the same for every team: out of [`CATEGORY`], so that `kubectl get gpucloud -A` lists only
/// what teams made (`kubectl get gpucloud-catalog` lists these).
pub const CATALOG_CATEGORY: &str = "gpucloud-catalog";
/// The category of the platform team's cluster-scoped policies (GpuPolicy), which a
/// namespace's users may not read: in [`CATEGORY`], they would make `kubectl get gpucloud`
/// fail as Forbidden for them.
pub const POLICY_CATEGORY: &str = "gpucloud-policy";

/// A kind as the reference and the CRDs see it: its CRD, and how a change of each of its own
/// spec fields is carried out (the shared ones are in [`MANAGED_ON_CHANGE`]). The list of
/// kinds is the operator's kind registry (`gpucloud_controller::kinds::registry`).
pub struct KindReference {
    pub crd: CustomResourceDefinition,
    pub on_change: &'static [(&'static str, OnChange)],
}

/// Access to what every managed kind shares, whatever the kind.
pub trait Managed {
    /// The policies and credentials at the top of the spec.
    fn managed(&self) -> &ManagedFields;
    /// The common part of the status (default when there is no status yet).
    fn cloud_status(&self) -> CloudStatus;
    /// The common part of the status, borrowed; `None` when there is no status yet.
    fn cloud_status_ref(&self) -> Option<&CloudStatus>;
    /// How a change of each of the kind's own spec fields is carried out.
    const ON_CHANGE: &'static [(&'static str, OnChange)];
    /// The kind's own `kubectl get` columns, between the shared ones (see [`crd`]).
    const COLUMNS: &'static [Column];
    /// When the resource expires and what then happens (`spec.lifetime`, on the billed
    /// kinds that have one).
    fn lifetime(&self) -> Option<&lifetime::Lifetime> {
        None
    }
}

/// `Ready`'s status, as every kind's table shows it.
pub const READY_COLUMN: Column = Column::new(
    "Ready",
    "string",
    ".status.conditions[?(@.type==\"Ready\")].status",
);
/// Why it is or is not Ready (`Available`, `Creating`, `InsufficientCredit`, ...): a Stalled
/// object says why without `kubectl describe`.
pub const REASON_COLUMN: Column = Column::new(
    "Reason",
    "string",
    ".status.conditions[?(@.type==\"Ready\")].reason",
);
pub const AGE_COLUMN: Column = Column::new("Age", "date", ".metadata.creationTimestamp");

/// The kind's CRD as `kubectl get` and `kubectl explain` show it. Its table: State, Ready and
/// Ready's reason, the kind's own columns, then ID (with `-o wide`) and Age, so every kind reads the same way.
/// Its descriptions: the kind's is its spec's (the derive writes a placeholder there), and the
/// doc comments they come from are unwrapped, since `kubectl explain` wraps text itself.
pub fn crd<K: kube::CustomResourceExt + Managed>() -> CustomResourceDefinition {
    let shared_first = [
        Column::new("State", "string", ".status.state"),
        READY_COLUMN,
        REASON_COLUMN,
    ];
    let shared_last = [
        Column::new("ID", "string", ".status.externalId").wide(),
        AGE_COLUMN,
    ];
    let columns: Vec<Column> = shared_first
        .iter()
        .chain(K::COLUMNS)
        .chain(&shared_last)
        .cloned()
        .collect();
    crd_with_columns::<K>(&columns)
}

/// The CRD of a kind with the given `kubectl get` columns, its descriptions as [`crd`] says.
pub fn crd_with_columns<K: kube::CustomResourceExt>(
    columns: &[Column],
) -> CustomResourceDefinition {
    let columns: Vec<_> = columns.iter().map(Column::definition).collect();
    let mut crd = K::crd();
    for version in &mut crd.spec.versions {
        version.additional_printer_columns = Some(columns.clone());
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            let spec = schema.properties.as_ref().and_then(|p| p.get("spec"));
            schema.description = spec.and_then(|spec| spec.description.clone());
        }
    }
    unwrapped(crd)
}

/// `crd` with every description's lines joined (paragraphs, split by a blank line, kept).
fn unwrapped(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn walk(node: &mut serde_json::Value) {
        match node {
            serde_json::Value::Object(map) => {
                for (key, value) in map.iter_mut() {
                    match value {
                        serde_json::Value::String(text) if key == "description" => {
                            *text = join_lines(text);
                        }
                        _ => walk(value),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let Ok(mut value) = serde_json::to_value(&crd) else {
        return crd;
    };
    walk(&mut value["spec"]["versions"]);
    serde_json::from_value(value).unwrap_or(crd)
}

/// A doc comment's lines joined with spaces, its paragraphs kept apart.
fn join_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| paragraph.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::{GpuInstance, Snapshot, Volume};

    /// The operator's stores hold every object, behind an `Arc` (two counts, 16 bytes), for as
    /// long as it exists, and the allocator rounds each up to its size class (jemalloc's run
    /// 896, 1,024, 1,280, 1,536, 1,792): one byte over a class costs up to 256 bytes a machine,
    /// 25 MB at 100,000 objects. Parts most objects leave out and that take many bytes
    /// (`lifetime`, `schedule`, `startupScript`, `placement`, `source`, a final snapshot's
    /// status) are boxed to keep each kind in these classes, and strings most machines leave
    /// out are `Box<str>` (16 bytes, not 24); a new field that does not fit belongs in a box
    /// too.
    #[test]
    fn a_stored_object_fits_its_size_class() {
        const ARC_COUNTS: usize = 16;
        for (kind, size, class) in [
            ("GpuInstance", size_of::<GpuInstance>(), 1280),
            ("Volume", size_of::<Volume>(), 896),
            ("Snapshot", size_of::<Snapshot>(), 896),
        ] {
            assert!(
                size + ARC_COUNTS <= class,
                "{kind}: {size} bytes and the Arc's counts exceed the {class}-byte class"
            );
        }
    }
}
