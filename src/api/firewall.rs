//! `Firewall`: network rules applied to a set of GpuInstances.

use crate::common::{CloudStatus, Column, LocalRef, ManagedFields, OnChange};
use crate::gpu_instance::SecurityRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A firewall in the Cloud GPU Compute Service.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gpucloud.io",
    version = "v1alpha1",
    kind = "Firewall",
    namespaced,
    status = "FirewallStatus",
    shortname = "gpufw",
    category = "gpucloud"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.region == oldSelf.region").message("region is immutable").field_path(".region"),
    validation = Rule::new("self.description == oldSelf.description").message("description is immutable: the cloud sets it when it creates the firewall; delete and recreate the Firewall to change it").field_path(".description"),
    validation = crate::common::credentials_secret_ref_is_immutable(),
    validation = crate::common::deletion_policy_is_not_snapshot(),
)]
pub struct FirewallSpec {
    #[serde(flatten)]
    pub managed: ManagedFields,
    /// Region code. Immutable; only instances of this region can be attached.
    #[schemars(length(min = 1, max = 64))]
    pub region: String,
    /// Description stored with the firewall. Immutable: the cloud sets it at creation only.
    #[serde(default)]
    #[schemars(length(max = 1024))]
    pub description: String,
    /// The rules, reconciled as a set: missing ones are added, extra ones removed.
    #[serde(default)]
    #[schemars(length(max = 128))]
    pub rules: Vec<SecurityRule>,
    /// `GpuInstance` objects in this namespace to attach the firewall to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub instance_refs: Vec<LocalRef>,
    /// Also attach every `GpuInstance` in this namespace whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_selector: Option<LabelSelector>,
}

/// What the operator observed of a firewall.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FirewallStatus {
    #[serde(flatten)]
    pub cloud: CloudStatus,
    /// Rules the cloud holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_count: Option<i32>,
    /// Instances the firewall is attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached_count: Option<i32>,
    /// Cloud ids of the attached instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attached_instance_ids: Vec<String>,
}

impl Firewall {
    /// The `kubectl get` columns of this kind's own (see [`crate::Column`]).
    pub const COLUMNS: &[Column] = &[
        Column::new("Rules", "integer", ".status.ruleCount"),
        Column::new("Attached", "integer", ".status.attachedCount"),
        Column::new("Region", "string", ".spec.region"),
    ];

    /// How a change of each spec field is carried out (with [`crate::MANAGED_ON_CHANGE`]).
    pub const ON_CHANGE: &[(&str, OnChange)] = &[
        ("region", OnChange::Immutable),
        ("description", OnChange::Immutable),
        (
            "rules",
            OnChange::Applied("missing rules added, then extra ones removed"),
        ),
        (
            "instanceRefs",
            OnChange::Applied("attached to exactly the named and selected machines"),
        ),
        (
            "instanceSelector",
            OnChange::Applied("attached to exactly the named and selected machines"),
        ),
    ];
}

impl_managed!(Firewall);
