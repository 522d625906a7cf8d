//! Custom resource types of the `gpucloud.io` API group, version `v1alpha1`.
//!
//! The Rust types are the source of truth: the CRD YAML in `crds/` is generated from them
//! (`gpucloud-operator crds`) and a test fails when the two differ.

// Several `printcolumn(..)` entries in one `#[kube(..)]` repeat keys such as `type_`, which
// clippy mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod common;
pub mod deletion_protection;
pub mod firewall;
pub mod gpu_instance;
pub mod image;
pub mod reference;
pub mod snapshot;
pub mod ssh_key;
pub mod volume;

pub use common::*;
pub use firewall::{Firewall, FirewallSpec, FirewallStatus};
pub use gpu_instance::{
    FinalSnapshotSpec, FinalSnapshotStatus, GpuInstance, GpuInstanceSpec, GpuInstanceStatus,
    MAX_STARTUP_SCRIPT_BYTES, PowerState, SecurityRule,
};
pub use image::{Image, ImageSpec, ImageStatus};
pub use snapshot::{Snapshot, SnapshotSpec, SnapshotStatus};
pub use ssh_key::{SshKey, SshKeySpec, SshKeyStatus};
pub use volume::{Volume, VolumeSpec, VolumeStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every kind.
pub const GROUP: &str = "gpucloud.io";

/// A kind as the reference and the CRDs see it: its CRD, and how a change of each of its own
/// spec fields is carried out (the shared ones are in [`MANAGED_ON_CHANGE`]).
pub struct KindReference {
    pub crd: CustomResourceDefinition,
    pub on_change: &'static [(&'static str, OnChange)],
}

/// Every kind, in a stable order.
pub fn kinds() -> Vec<KindReference> {
    fn kind<K: CustomResourceExt>(on_change: &'static [(&'static str, OnChange)]) -> KindReference {
        KindReference {
            crd: K::crd(),
            on_change,
        }
    }
    vec![
        kind::<Firewall>(Firewall::ON_CHANGE),
        kind::<GpuInstance>(GpuInstance::ON_CHANGE),
        kind::<Image>(Image::ON_CHANGE),
        kind::<Snapshot>(Snapshot::ON_CHANGE),
        kind::<SshKey>(SshKey::ON_CHANGE),
        kind::<Volume>(Volume::ON_CHANGE),
    ]
}

/// The CRDs of every kind, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    kinds().into_iter().map(|k| k.crd).collect()
}

/// The CRDs as one multi-document YAML stream, as written to `crds/`.
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

/// Access to what every managed kind shares, whatever the kind.
pub trait Managed {
    /// The policies and credentials at the top of the spec.
    fn managed(&self) -> &ManagedFields;
    /// The common part of the status (default when there is no status yet).
    fn cloud_status(&self) -> CloudStatus;
    /// The common part of the status, borrowed; `None` when there is no status yet.
    fn cloud_status_ref(&self) -> Option<&CloudStatus>;
}

macro_rules! impl_managed {
    ($($kind:ty),*) => {$(
        impl Managed for $kind {
            fn managed(&self) -> &ManagedFields {
                &self.spec.managed
            }
            fn cloud_status(&self) -> CloudStatus {
                self.cloud_status_ref().cloned().unwrap_or_default()
            }
            fn cloud_status_ref(&self) -> Option<&CloudStatus> {
                self.status.as_ref().map(|s| &s.cloud)
            }
        }
    )*};
}

impl_managed!(Firewall, GpuInstance, Image, Snapshot, SshKey, Volume);
