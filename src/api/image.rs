//! `Image`: a custom image made from a snapshot, bootable by a GpuInstance.

use crate::common::{CloudStatus, Column, LocalRef, ManagedFields, OnChange};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A custom image in the Cloud GPU Compute Service.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gpucloud.io",
    version = "v1alpha1",
    kind = "Image",
    namespaced,
    status = "ImageStatus",
    shortname = "gpuimg",
    category = "gpucloud"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.snapshotRef == oldSelf.snapshotRef").message("snapshotRef is immutable").field_path(".snapshotRef"),
    validation = crate::common::credentials_secret_ref_is_immutable(),
    validation = crate::common::deletion_policy_is_not_snapshot(),
)]
pub struct ImageSpec {
    #[serde(flatten)]
    pub managed: ManagedFields,
    /// The `Snapshot` in this namespace the image is made from.
    pub snapshot_ref: LocalRef,
}

/// What the operator observed of an image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageStatus {
    #[serde(flatten)]
    pub cloud: CloudStatus,
    /// Cloud id of the snapshot the image was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// Region of the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Size as the cloud reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// What the image costs per hour, in `currency`: its size times the image price per
    /// GB-hour in the account's price list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub hourly_rate: Option<f64>,
    /// Currency of `hourlyRate`, e.g. `USD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

impl Image {
    /// The `kubectl get` columns of this kind's own (see [`crate::Column`]).
    pub const COLUMNS: &[Column] = &[
        Column::new("Snapshot", "string", ".spec.snapshotRef.name"),
        Column::new("Rate/h", "number", ".status.hourlyRate").wide(),
    ];

    /// How a change of each spec field is carried out (with [`crate::MANAGED_ON_CHANGE`]).
    pub const ON_CHANGE: &[(&str, OnChange)] = &[("snapshotRef", OnChange::Immutable)];
}

impl_managed!(Image);
