//! Instances: records, power actions, security-rule bodies and instance billing.

use serde::{Deserialize, Serialize};

use super::common::Tier;
use super::rules::SecurityRule;
use super::string_enum::string_enum;

string_enum! {
    /// Lifecycle status of an instance.
    InstanceStatus {
        Creating = "CREATING",
        Active = "ACTIVE",
        Stopping = "STOPPING",
        Shutoff = "SHUTOFF",
        Starting = "STARTING",
        Rebooting = "REBOOTING",
        Hibernating = "HIBERNATING",
        Hibernated = "HIBERNATED",
        Deleting = "DELETING",
        Error = "ERROR",
    }
}

string_enum! {
    /// Power status of an instance (`vm_status`), as volume listings and firewall
    /// attachments show it.
    VmStatus {
        Pending = "PENDING",
        Booting = "BOOTING",
        Running = "RUNNING",
        Stopped = "STOPPED",
        Hibernated = "HIBERNATED",
        Transitioning = "TRANSITIONING",
    }
}

string_enum! {
    /// Whether an instance has a public IP.
    IpStatus {
        Assigned = "assigned",
        Unassigned = "unassigned",
    }
}

string_enum! {
    /// What an instance booted from.
    BootSource {
        /// An OS image from the catalog.
        Image = "image",
        /// A custom image made from a snapshot.
        CustomImage = "custom_image",
        /// A snapshot, through restore.
        Snapshot = "snapshot",
    }
}

/// Hourly price of a billed resource.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Billing {
    pub hourly_rate: f64,
    pub currency: String,
}

/// Hardware of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct InstanceSpecs {
    pub gpu_type: String,
    pub gpu_count: u32,
    pub ram_gb: u32,
    pub vcpus: u32,
    pub storage_gb: u32,
}

/// A compute instance.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Instance {
    pub instance_id: String,
    pub vm_name: String,
    /// Public address; `None` while no public IP is assigned.
    pub ip_address: Option<String>,
    pub ip_status: IpStatus,
    pub billing: Billing,
    pub specs: InstanceSpecs,
    pub status: InstanceStatus,
    pub boot_source: BootSource,
    pub created_at: String,
    pub region: String,
    pub tier: Tier,
    pub vm_status: VmStatus,
    pub image_id: Option<String>,
    pub public_ip_enabled: bool,
    pub security_rules: Vec<SecurityRule>,
    pub ssh_key_ids: Vec<String>,
    pub startup_script_id: Option<String>,
    pub volume_ids: Vec<String>,
    /// The snapshot this instance was restored from.
    pub snapshot_id: Option<String>,
}

/// Body of `CreateInstance`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CreateInstanceRequest {
    pub name: String,
    pub region: String,
    pub gpu_type: String,
    pub gpu_count: u32,
    /// OS image id or custom image id.
    pub image_id: String,
    /// Defaults to `advanced`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    #[serde(default)]
    pub ssh_key_ids: Vec<String>,
    /// Inline startup script text; exclusive with `startup_script_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_script: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_script_id: Option<String>,
    /// Defaults to `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_ip: Option<bool>,
    #[serde(default)]
    pub volume_ids: Vec<String>,
}

impl CreateInstanceRequest {
    /// `gpu_count` GPUs of `gpu_type` in `region`, booting `image_id`; tier and public IP are
    /// left to the cloud's defaults, and no keys, script or volumes are attached.
    pub fn new(
        name: impl Into<String>,
        region: impl Into<String>,
        gpu_type: impl Into<String>,
        gpu_count: u32,
        image_id: impl Into<String>,
    ) -> Self {
        CreateInstanceRequest {
            name: name.into(),
            region: region.into(),
            gpu_type: gpu_type.into(),
            gpu_count,
            image_id: image_id.into(),
            tier: None,
            ssh_key_ids: Vec::new(),
            startup_script: None,
            startup_script_id: None,
            public_ip: None,
            volume_ids: Vec::new(),
        }
    }
}

/// Body of a response carrying one instance under `instance`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct InstanceBody {
    pub instance: Instance,
}

/// Body of a list of instances.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct InstanceList {
    pub instances: Vec<Instance>,
    pub total_count: u64,
}

/// Body of a power action (start, stop, reboot, hibernate, restore-hibernated): the
/// shape the interface document shows for restore-hibernated.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct PowerActionBody {
    pub vm_id: String,
    /// Status right after the action was accepted (an intermediate state, or `ACTIVE` for
    /// restore-hibernated).
    pub status: InstanceStatus,
}

/// Body of `DeleteInstance`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct DeleteInstanceBody {
    pub instance_id: String,
    /// `DELETING` while the deletion runs.
    pub status: InstanceStatus,
}

/// Body of `TogglePublicIp`: sets public IP to exactly this value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct PublicIpRequest {
    pub enabled: bool,
}

/// Body of `AddSecurityRule`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AddSecurityRuleBody {
    pub instance_id: String,
    pub rule: SecurityRule,
}

/// Body of `RemoveSecurityRule` (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct RemoveSecurityRuleBody {
    pub instance_id: String,
    pub rule_id: String,
}

/// Query of `GetInstanceBilling`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct InstanceBillingQuery {
    /// Only this instance's record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
}

/// Billing of one instance, from creation to deletion (or now).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct InstanceBillingRecord {
    pub instance_id: String,
    pub vm_name: String,
    pub gpu_type: String,
    pub gpu_count: u32,
    pub tier: Tier,
    pub hourly_rate: f64,
    pub start_time: String,
    /// `None` while the instance is still billed.
    pub end_time: Option<String>,
    pub total_duration_minutes: u64,
    pub total_cost: f64,
    pub currency: String,
    pub status: InstanceStatus,
}

/// Body of `GetInstanceBilling`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct InstanceBillingBody {
    pub records: Vec<InstanceBillingRecord>,
    pub total_count: u64,
    pub total_cost: f64,
    pub currency: String,
}
