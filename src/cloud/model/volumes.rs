//! Block-storage volumes: records, attachment, types and volume billing.

use serde::{Deserialize, Serialize};

use super::common::Tier;
use super::instances::VmStatus;
use super::string_enum::string_enum;

string_enum! {
    /// Status of a volume.
    VolumeStatus {
        Creating = "creating",
        Available = "available",
        Attached = "attached",
        Error = "error",
    }
}

/// A block-storage volume.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Volume {
    pub id: String,
    pub name: String,
    /// Size in GB.
    pub size: u64,
    pub region: String,
    pub tier: Tier,
    /// E.g. `NVMe`, `SSD`.
    pub volume_type: String,
    pub status: VolumeStatus,
    pub bootable: bool,
    pub created_at: String,
    /// Instance the volume is attached to.
    pub instance_id: Option<String>,
    /// Power status of that instance.
    pub vm_status: Option<VmStatus>,
}

/// Query of `ListVolumes`; every filter is optional.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeListQuery {
    /// Only bootable (`true`) or non-bootable (`false`) volumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootable: Option<bool>,
    /// Leave out the boot volumes of instances.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude_os_volumes: Option<bool>,
    /// Region code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Only volumes of this tier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
}

/// Filters a volume list applied; each is `None` (null) when not applied.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AppliedVolumeFilters {
    pub region: Option<String>,
    pub tier: Option<String>,
    pub bootable: Option<bool>,
}

/// `metadata` of a volume list.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeListMetadata {
    pub regions_available: Vec<String>,
    pub tiers_used: Vec<String>,
}

/// Body of `ListVolumes` (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeList {
    pub volumes: Vec<Volume>,
    /// A suggested name not used by any volume.
    pub next_volume_name: String,
    pub total_count: u64,
    pub bootable_count: u64,
    pub non_bootable_count: u64,
    pub applied_filters: AppliedVolumeFilters,
    pub metadata: VolumeListMetadata,
}

/// Body of `CreateVolume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CreateVolumeRequest {
    pub name: String,
    /// Size in GB.
    pub size: u64,
    pub region: String,
    /// E.g. `NVMe`; the service picks its default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    /// Defaults to `advanced`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// Defaults to `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootable: Option<bool>,
}

impl CreateVolumeRequest {
    /// `size` GB in `region`; type, tier and bootable are left to the cloud's defaults.
    pub fn new(name: impl Into<String>, size: u64, region: impl Into<String>) -> Self {
        CreateVolumeRequest {
            name: name.into(),
            size,
            region: region.into(),
            volume_type: None,
            tier: None,
            bootable: None,
        }
    }
}

/// Body of a response carrying one volume under `volume`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeBody {
    pub volume: Volume,
}

/// Body of `ResizeVolume`: the new size in GB (grow only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ResizeVolumeRequest {
    pub size: u64,
}

/// Body of `CloneVolume`: the clone's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CloneVolumeRequest {
    pub name: String,
}

/// Body of `AttachVolumes` and `DetachVolumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct VolumeIdsRequest {
    pub volume_ids: Vec<String>,
}

/// Body of `AttachVolumes` and `DetachVolumes` responses: the volumes after the change.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeAttachmentBody {
    pub instance_id: String,
    pub volumes: Vec<Volume>,
}

/// A volume type of the catalog.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeType {
    /// E.g. `NVMe`, `SSD`; the value of [`Volume::volume_type`].
    pub id: String,
    pub name: String,
    pub description: String,
    pub price_per_gb_hour: f64,
    pub currency: String,
    pub min_size_gb: u64,
    pub max_size_gb: u64,
}

/// Body of `ListVolumeTypes`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeTypeList {
    pub volume_types: Vec<VolumeType>,
    pub total_count: u64,
}

/// Query of `GetVolumeBilling`; every filter is optional.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeBillingQuery {
    /// `YYYY-MM-DD`; records that end on or after this day.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_date: Option<String>,
    /// `YYYY-MM-DD`; records that start on or before this day.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_date: Option<String>,
    /// Exact size in GB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Volume status: `creating`, `available`, `attached` or `deleted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Tier, in any case.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Fewest billed minutes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_minutes: Option<u64>,
    /// Most billed minutes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_minutes: Option<u64>,
    /// Least total cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_cost: Option<f64>,
    /// Most total cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
    /// 1-based.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page: Option<u64>,
    /// Page size; default 20, at most 100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// Billing of one volume (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeBillingRecord {
    pub billing_id: String,
    pub volume_id: String,
    pub volume_name: String,
    pub size_gb: u64,
    /// Capitalised on this record, e.g. `Advanced`.
    pub tier: String,
    /// ISO 8601 without zone suffix.
    pub start_time: String,
    /// ISO 8601 without zone suffix.
    pub end_time: String,
    pub total_duration_minutes: u64,
    pub per_minute_rate: f64,
    pub total_cost: f64,
    pub currency: String,
    pub status: String,
    pub description: String,
}

/// Summary over all filtered volume billing records (as shown, camelCase).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeBillingSummary {
    #[serde(rename = "totalMinutes")]
    pub total_minutes: u64,
    #[serde(rename = "activeCount")]
    pub active_count: u64,
    #[serde(rename = "averageUsage")]
    pub average_usage: f64,
    #[serde(rename = "totalSizeGB")]
    pub total_size_gb: u64,
    #[serde(rename = "totalCost")]
    pub total_cost: f64,
}

/// Body of `GetVolumeBilling` (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VolumeBillingPage {
    pub records: Vec<VolumeBillingRecord>,
    pub summary: VolumeBillingSummary,
    pub total: u64,
    pub page: u64,
    pub limit: u64,
    pub total_pages: u64,
    pub currency: String,
}
