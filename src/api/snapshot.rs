//! `Snapshot`: a saved copy of an instance, restorable as a new instance.

use crate::common::{CloudStatus, Column, LocalRef, ManagedFields, OnChange};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A snapshot in the Cloud GPU Compute Service.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gpucloud.io",
    version = "v1alpha1",
    kind = "Snapshot",
    namespaced,
    status = "SnapshotStatus",
    shortname = "gpusnap",
    category = "gpucloud"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.instanceRef) != has(self.instanceId)").message("set exactly one of instanceRef and instanceId"),
    validation = Rule::new("has(self.instanceRef) == has(oldSelf.instanceRef) && (!has(self.instanceRef) || self.instanceRef == oldSelf.instanceRef) && has(self.instanceId) == has(oldSelf.instanceId) && (!has(self.instanceId) || self.instanceId == oldSelf.instanceId)").message("the source instance is immutable"),
    validation = Rule::new("self.description == oldSelf.description && self.labels == oldSelf.labels").message("description and labels are immutable; the cloud sets them at creation"),
    validation = crate::common::credentials_secret_ref_is_immutable(),
    validation = Rule::new("!has(self.lifetime) || self.lifetime.onExpiry == 'Delete'").message("a Snapshot's lifetime can only end in its deletion: write onExpiry: Delete").field_path(".lifetime.onExpiry"),
    validation = crate::common::deletion_policy_is_not_snapshot(),
    validation = crate::lifetime::deleting_expiry_is_not_orphan(),
)]
// Parts most objects leave out and that take many bytes are boxed: the stores hold every
// object (`tests::a_stored_object_fits_its_size_class` in lib.rs).
pub struct SnapshotSpec {
    #[serde(flatten)]
    pub managed: ManagedFields,
    /// The `GpuInstance` in this namespace to snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_ref: Option<LocalRef>,
    /// The cloud id of an instance not managed by this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub instance_id: Option<String>,
    /// Description stored with the snapshot. Immutable.
    #[serde(default)]
    #[schemars(length(max = 1024))]
    pub description: String,
    /// Labels stored with the snapshot in the cloud. Immutable.
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub labels: Vec<SnapshotLabel>,
    /// When the Snapshot expires: at `ttl` after the object's creation or at `expiresAt`, the
    /// object is deleted and with it, under `deletionPolicy: Delete`, the snapshot (`onExpiry`
    /// must say `Delete`). Editing it extends or brings forward the expiry; `status.expiresAt`
    /// shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<Box<crate::lifetime::Lifetime>>,
}

/// A label string attached to the snapshot in the cloud.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct SnapshotLabel(#[schemars(length(min = 1, max = 63))] pub String);

/// What the operator observed of a snapshot.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotStatus {
    #[serde(flatten)]
    pub cloud: CloudStatus,
    /// Size as the cloud reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// Region of the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Cloud id of the snapshotted instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_instance_id: Option<String>,
    /// What the snapshot costs per hour, in `currency`: its size times the snapshot price per
    /// GB-hour in the account's price list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub hourly_rate: Option<f64>,
    /// Currency of `hourlyRate`, e.g. `USD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

impl Snapshot {
    /// The `kubectl get` columns of this kind's own (see [`crate::Column`]).
    pub const COLUMNS: &[Column] = &[
        Column::new("Instance", "string", ".spec.instanceRef.name"),
        Column::new("Size(GB)", "integer", ".status.size"),
        Column::new("Rate/h", "number", ".status.hourlyRate").wide(),
    ];

    /// How a change of each spec field is carried out (with [`crate::MANAGED_ON_CHANGE`]).
    pub const ON_CHANGE: &[(&str, OnChange)] = &[
        ("instanceRef", OnChange::Immutable),
        ("instanceId", OnChange::Immutable),
        ("description", OnChange::Immutable),
        ("labels", OnChange::Immutable),
        (
            "lifetime",
            OnChange::Applied("the expiry is computed again: extended or brought forward"),
        ),
    ];
}

impl_managed!(with_lifetime Snapshot);
