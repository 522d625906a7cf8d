//! Snapshots of instances: records, restore and snapshot billing.

use serde::{Deserialize, Serialize};

use super::common::Tier;
use super::instances::{Instance, InstanceSpecs};
use super::string_enum::string_enum;

string_enum! {
    /// Status of a snapshot.
    SnapshotStatus {
        Creating = "creating",
        Available = "available",
        Error = "error",
    }
}

/// A snapshot of an instance.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Snapshot {
    pub snapshot_id: String,
    pub name: String,
    pub description: String,
    /// Size in GB.
    pub size: u64,
    pub status: SnapshotStatus,
    /// Source instance.
    pub instance_id: String,
    pub region: String,
    pub created_at: String,
    pub labels: Vec<String>,
    pub tier: Option<Tier>,
    /// Hardware of the source instance, inherited by a restore.
    pub specs: Option<InstanceSpecs>,
}

/// A snapshot as a restore response names it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SnapshotRef {
    pub id: String,
    pub name: String,
}

/// Body of `CreateSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CreateSnapshotRequest {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub labels: Vec<String>,
}

/// Body of a response carrying one snapshot under `snapshot`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SnapshotBody {
    pub snapshot: Snapshot,
}

/// Body of `ListSnapshots`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SnapshotList {
    pub snapshots: Vec<Snapshot>,
    pub total_count: u64,
}

/// Body of `RestoreSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct RestoreSnapshotRequest {
    pub new_vm_name: String,
}

/// Body of a `RestoreSnapshot` response (as shown): the new instance under `data`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct RestoreSnapshotBody {
    pub data: Instance,
    pub snapshot: SnapshotRef,
}

/// Body of a `DeleteSnapshot` response (as shown).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct DeleteSnapshotBody {
    pub snapshot_name: String,
}

/// Query of `GetSnapshotBilling`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SnapshotBillingQuery {
    /// Only this snapshot's record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
}

/// Billing of one snapshot, from creation to deletion (or now).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SnapshotBillingRecord {
    pub snapshot_id: String,
    pub snapshot_name: String,
    pub size_gb: u64,
    pub hourly_rate: f64,
    pub start_time: String,
    /// `None` while the snapshot is still billed.
    pub end_time: Option<String>,
    pub total_duration_minutes: u64,
    pub total_cost: f64,
    pub currency: String,
    /// `active` while billed, `ended` after deletion.
    pub status: String,
}

/// Body of `GetSnapshotBilling`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SnapshotBillingBody {
    pub records: Vec<SnapshotBillingRecord>,
    pub total_count: u64,
    pub total_cost: f64,
    pub currency: String,
}
