//! `Volume`: block storage, attachable to a GpuInstance.

use crate::common::{CloudStatus, Column, LocalRef, ManagedFields, OnChange, Tier};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A block-storage volume in the Cloud GPU Compute Service.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gpucloud.io",
    version = "v1alpha1",
    kind = "Volume",
    namespaced,
    status = "VolumeStatus",
    shortname = "gpuv",
    category = "gpucloud"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.region == oldSelf.region").message("region is immutable").field_path(".region"),
    validation = Rule::new("self.volumeType == oldSelf.volumeType").message("volumeType is immutable").field_path(".volumeType"),
    validation = Rule::new("self.tier == oldSelf.tier").message("tier is immutable").field_path(".tier"),
    validation = Rule::new("self.bootable == oldSelf.bootable").message("bootable is immutable").field_path(".bootable"),
    validation = Rule::new("has(self.source) == has(oldSelf.source) && (!has(self.source) || self.source == oldSelf.source)").message("source is immutable").field_path(".source"),
    validation = crate::common::credentials_secret_ref_is_immutable(),
    validation = Rule::new("!has(self.lifetime) || self.lifetime.onExpiry == 'Delete'").message("a Volume's lifetime can only end in its deletion: write onExpiry: Delete").field_path(".lifetime.onExpiry"),
    validation = crate::common::deletion_policy_is_not_snapshot(),
    validation = crate::lifetime::deleting_expiry_is_not_orphan(),
)]
// Parts most objects leave out and that take many bytes are boxed: the stores hold every
// object (`tests::a_stored_object_fits_its_size_class` in lib.rs).
pub struct VolumeSpec {
    #[serde(flatten)]
    pub managed: ManagedFields,
    /// Region code. Immutable; an attached instance must be in the same region.
    #[schemars(length(min = 1, max = 64))]
    pub region: String,
    /// Size in GB. May grow (the volume is resized), never shrink.
    #[schemars(range(min = 1, max = 65536))]
    #[x_kube(validation = Rule::new("self >= oldSelf").message("sizeGb cannot shrink; volumes can only grow"))]
    pub size_gb: i32,
    /// Volume type from the cloud's catalog, e.g. `NVMe`. Immutable.
    #[serde(default = "default_volume_type")]
    #[schemars(length(min = 1, max = 32))]
    pub volume_type: String,
    /// Service tier. Immutable.
    #[serde(default)]
    pub tier: Tier,
    /// Whether the volume can boot an instance. Immutable.
    #[serde(default)]
    pub bootable: bool,
    /// A `GpuInstance` in this namespace to attach to. Removing it detaches; changing it moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_ref: Option<LocalRef>,
    /// Create the volume as a clone of another. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<VolumeSource>,
    /// When the Volume expires: at `ttl` after the object's creation or at `expiresAt`, the
    /// object is deleted and with it, under `deletionPolicy: Delete`, the volume (`onExpiry`
    /// must say `Delete`). Editing it extends or brings forward the expiry; `status.expiresAt`
    /// shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<Box<crate::lifetime::Lifetime>>,
}

fn default_volume_type() -> String {
    "NVMe".to_string()
}

/// Where a cloned volume comes from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSource {
    /// A `Volume` in this namespace to clone.
    pub volume_ref: LocalRef,
}

/// What the operator observed of a volume.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStatus {
    #[serde(flatten)]
    pub cloud: CloudStatus,
    /// Cloud id of the instance the volume is attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached_instance_id: Option<String>,
    /// Size in GB as the cloud reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_gb: Option<i32>,
    /// Volume type as the cloud reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    /// Whether the cloud reports the volume bootable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootable: Option<bool>,
    /// What the volume costs per hour, in `currency`: its size times the price per GB-hour of
    /// its volume type in the account's price list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub hourly_rate: Option<f64>,
    /// Currency of `hourlyRate`, e.g. `USD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

impl Volume {
    /// The `kubectl get` columns of this kind's own (see [`crate::Column`]).
    pub const COLUMNS: &[Column] = &[
        Column::new("Size(GB)", "integer", ".status.sizeGb"),
        Column::new("Instance", "string", ".spec.instanceRef.name"),
        Column::new("Region", "string", ".spec.region"),
        Column::new("Rate/h", "number", ".status.hourlyRate").wide(),
    ];

    /// How a change of each spec field is carried out (with [`crate::MANAGED_ON_CHANGE`]).
    pub const ON_CHANGE: &[(&str, OnChange)] = &[
        ("region", OnChange::Immutable),
        ("volumeType", OnChange::Immutable),
        ("tier", OnChange::Immutable),
        ("bootable", OnChange::Immutable),
        ("source", OnChange::Immutable),
        (
            "lifetime",
            OnChange::Applied("the expiry is computed again: extended or brought forward"),
        ),
        (
            "sizeGb",
            OnChange::Applied("the volume is resized (it can only grow)"),
        ),
        (
            "instanceRef",
            OnChange::Applied("the volume is attached, detached or moved"),
        ),
    ];
}

impl_managed!(with_lifetime Volume);
