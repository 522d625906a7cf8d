//! Serde models of every record, request body and response body of the Cloud GPU Compute
//! Service API, as `docs/cloud-api.md` fixes them.
//!
//! The client decodes responses with these types and the simulator encodes its responses with
//! them, so the two cannot disagree on the wire. Decoding is lenient on purpose: unknown fields
//! are ignored, missing response fields take their defaults, and the string enums keep values
//! they do not know in an `Other` variant, so a new state in the cloud never breaks decoding.
//! Request bodies keep their required fields required, so a server decoding them can name the
//! field that is missing.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

// === String enums ===

/// Defines a string enum whose known values are variants and whose unknown values are kept
/// verbatim in `Other`, so decoding never fails on a value the cloud adds later.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know, kept as sent.
            Other(String),
        }

        impl $name {
            /// Every known value.
            pub const KNOWN: &'static [$name] = &[ $( $name::$variant, )+ ];

            /// The wire spelling.
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $wire, )+
                    $name::Other(value) => value,
                }
            }

            /// Maps a wire spelling to its variant (exact, case-sensitive match).
            pub fn from_wire(value: &str) -> Self {
                match value {
                    $( $wire => $name::$variant, )+
                    other => $name::Other(other.to_owned()),
                }
            }

            /// Whether this is one of the values this version knows.
            pub fn is_known(&self) -> bool {
                !matches!(self, $name::Other(_))
            }
        }

        /// An empty `Other`, used only when a response omits the field altogether.
        impl Default for $name {
            fn default() -> Self {
                $name::Other(String::new())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                $name::from_wire(value)
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::convert::Infallible;
            fn from_str(value: &str) -> Result<Self, Self::Err> {
                Ok($name::from_wire(value))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = String::deserialize(deserializer)?;
                Ok($name::from_wire(&value))
            }
        }
    };
}

string_enum! {
    /// Resource tier. Some operations apply to `legacy` only.
    Tier {
        Legacy = "legacy",
        Advanced = "advanced",
    }
}

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

string_enum! {
    /// Status of a snapshot.
    SnapshotStatus {
        Creating = "creating",
        Available = "available",
        Error = "error",
    }
}

string_enum! {
    /// Status of a custom image.
    ImageStatus {
        Creating = "creating",
        Available = "available",
        Error = "error",
    }
}

string_enum! {
    /// Status of a volume.
    VolumeStatus {
        Creating = "creating",
        Available = "available",
        Attached = "attached",
        Error = "error",
    }
}

string_enum! {
    /// Direction of a security or firewall rule.
    Direction {
        Ingress = "ingress",
        Egress = "egress",
    }
}

string_enum! {
    /// IP version of a security or firewall rule.
    Ethertype {
        Ipv4 = "IPv4",
        Ipv6 = "IPv6",
    }
}

string_enum! {
    /// Protocol of a security or firewall rule.
    Protocol {
        Tcp = "tcp",
        Udp = "udp",
        Icmp = "icmp",
        Any = "any",
    }
}

// === Envelope and errors ===

/// A response: the envelope fields every response carries plus the operation's own body,
/// flattened into the same JSON object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiResponse<T> {
    #[serde(default)]
    pub success: bool,
    #[serde(default)]
    pub message: String,
    /// `req_` followed by 24 hex characters.
    #[serde(default)]
    pub request_id: String,
    /// Tier of the record the response is about, where it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// ISO 8601 UTC; present on restore responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Result code, e.g. `SSH_KEY_IMPORTED` on SSH-key create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(flatten)]
    pub body: T,
}

impl<T> ApiResponse<T> {
    /// A successful response with the given message, request id and body.
    pub fn ok(message: impl Into<String>, request_id: impl Into<String>, body: T) -> Self {
        ApiResponse {
            success: true,
            message: message.into(),
            request_id: request_id.into(),
            tier: None,
            timestamp: None,
            code: None,
            body,
        }
    }

    pub fn with_tier(mut self, tier: Tier) -> Self {
        self.tier = Some(tier);
        self
    }

    pub fn with_timestamp(mut self, timestamp: impl Into<String>) -> Self {
        self.timestamp = Some(timestamp.into());
        self
    }

    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }
}

impl<T: serde::de::DeserializeOwned> ApiResponse<T> {
    /// Decodes a response as its `Deserialize` does, without the copy of the whole document
    /// that `flatten` builds first: the envelope and the body are each read from the bytes,
    /// each skipping the other's fields. Through `flatten`, a list of ten thousand instances
    /// is held two or three times over while it is decoded.
    pub fn from_json(bytes: &[u8]) -> serde_json::Result<Self> {
        let Envelope {
            success,
            message,
            request_id,
            tier,
            timestamp,
            code,
        } = serde_json::from_slice(bytes)?;
        let body = serde_json::from_slice(bytes)?;
        Ok(ApiResponse {
            success,
            message,
            request_id,
            tier,
            timestamp,
            code,
            body,
        })
    }
}

/// `ApiResponse`'s own fields, for `from_json` (a test checks both decode alike).
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    success: bool,
    #[serde(default)]
    message: String,
    #[serde(default)]
    request_id: String,
    #[serde(default)]
    tier: Option<Tier>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    code: Option<String>,
}

/// Body of every error response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    pub success: bool,
    pub message: String,
    /// Machine-readable code, one of [`error_code`].
    pub code: String,
    pub request_id: String,
}

/// Machine-readable error codes of [`ErrorBody::code`].
pub mod error_code {
    pub const INVALID_API_KEY: &str = "INVALID_API_KEY";
    pub const TIER_NOT_SUPPORTED: &str = "TIER_NOT_SUPPORTED";
    pub const NOT_FOUND: &str = "NOT_FOUND";
    pub const ROUTE_NOT_FOUND: &str = "ROUTE_NOT_FOUND";
    pub const METHOD_NOT_ALLOWED: &str = "METHOD_NOT_ALLOWED";
    pub const INVALID_STATE: &str = "INVALID_STATE";
    pub const DUPLICATE_NAME: &str = "DUPLICATE_NAME";
    pub const CONFLICT: &str = "CONFLICT";
    pub const INSUFFICIENT_CREDIT: &str = "INSUFFICIENT_CREDIT";
    pub const RATE_LIMITED: &str = "RATE_LIMITED";
    pub const VALIDATION_ERROR: &str = "VALIDATION_ERROR";
    pub const PAYLOAD_TOO_LARGE: &str = "PAYLOAD_TOO_LARGE";
    pub const INTERNAL_ERROR: &str = "INTERNAL_ERROR";
}

/// Success codes of [`ApiResponse::code`].
pub mod success_code {
    pub const SSH_KEY_IMPORTED: &str = "SSH_KEY_IMPORTED";
    pub const SSH_KEY_GENERATED: &str = "SSH_KEY_GENERATED";
}

/// Body of a response that carries nothing beyond the envelope.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Empty {}

// === Instances ===

/// Hourly price of a billed resource.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Billing {
    pub hourly_rate: f64,
    pub currency: String,
}

/// Hardware of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceSpecs {
    pub gpu_type: String,
    pub gpu_count: u32,
    pub ram_gb: u32,
    pub vcpus: u32,
    pub storage_gb: u32,
}

/// A security rule of an instance, or a rule of a firewall (same shape).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SecurityRule {
    pub id: String,
    pub direction: Direction,
    pub protocol: Protocol,
    pub ethertype: Ethertype,
    /// CIDR, e.g. `0.0.0.0/0`.
    pub remote_ip_prefix: String,
    pub port_range_min: Option<u32>,
    pub port_range_max: Option<u32>,
}

/// A firewall rule has the same fields as an instance security rule.
pub type FirewallRule = SecurityRule;

/// A compute instance.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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

/// Body of a response carrying one instance under `instance`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceBody {
    pub instance: Instance,
}

/// Body of a list of instances.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceList {
    pub instances: Vec<Instance>,
    pub total_count: u64,
}

/// Body of a power action (start, stop, reboot, hibernate, restore-hibernated): the
/// shape the interface document shows for restore-hibernated.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PowerActionBody {
    pub vm_id: String,
    /// Status right after the action was accepted (an intermediate state, or `ACTIVE` for
    /// restore-hibernated).
    pub status: InstanceStatus,
}

/// Body of `DeleteInstance`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DeleteInstanceBody {
    pub instance_id: String,
    /// `DELETING` while the deletion runs.
    pub status: InstanceStatus,
}

/// Body of `TogglePublicIp`: sets public IP to exactly this value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicIpRequest {
    pub enabled: bool,
}

/// A new security or firewall rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewRule {
    pub direction: Direction,
    pub protocol: Protocol,
    pub ethertype: Ethertype,
    pub remote_ip_prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_range_min: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_range_max: Option<u32>,
}

/// Body of `AddSecurityRule`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AddSecurityRuleBody {
    pub instance_id: String,
    pub rule: SecurityRule,
}

/// Body of `RemoveSecurityRule` (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoveSecurityRuleBody {
    pub instance_id: String,
    pub rule_id: String,
}

/// Query of `GetInstanceBilling`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceBillingQuery {
    /// Only this instance's record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
}

/// Billing of one instance, from creation to deletion (or now).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
#[serde(default)]
pub struct InstanceBillingBody {
    pub records: Vec<InstanceBillingRecord>,
    pub total_count: u64,
    pub total_cost: f64,
    pub currency: String,
}

// === Volumes ===

/// A block-storage volume.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
#[serde(default)]
pub struct VolumeListQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootable: Option<bool>,
    /// Leave out the boot volumes of instances.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude_os_volumes: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
}

/// Filters a volume list applied; each is `None` (null) when not applied.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AppliedVolumeFilters {
    pub region: Option<String>,
    pub tier: Option<String>,
    pub bootable: Option<bool>,
}

/// `metadata` of a volume list.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeListMetadata {
    pub regions_available: Vec<String>,
    pub tiers_used: Vec<String>,
}

/// Body of `ListVolumes` (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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

/// Body of a response carrying one volume under `volume`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeBody {
    pub volume: Volume,
}

/// Body of `ResizeVolume`: the new size in GB (grow only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeVolumeRequest {
    pub size: u64,
}

/// Body of `CloneVolume`: the clone's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloneVolumeRequest {
    pub name: String,
}

/// Body of `AttachVolumes` and `DetachVolumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeIdsRequest {
    pub volume_ids: Vec<String>,
}

/// Body of `AttachVolumes` and `DetachVolumes` responses: the volumes after the change.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeAttachmentBody {
    pub instance_id: String,
    pub volumes: Vec<Volume>,
}

/// A volume type of the catalog.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
#[serde(default)]
pub struct VolumeTypeList {
    pub volume_types: Vec<VolumeType>,
    pub total_count: u64,
}

/// Query of `GetVolumeBilling`; every filter is optional.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_minutes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_minutes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_cost: Option<f64>,
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

// === Snapshots ===

/// A snapshot of an instance.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
#[serde(default)]
pub struct SnapshotRef {
    pub id: String,
    pub name: String,
}

/// Body of `CreateSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateSnapshotRequest {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub labels: Vec<String>,
}

/// Body of a response carrying one snapshot under `snapshot`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SnapshotBody {
    pub snapshot: Snapshot,
}

/// Body of `ListSnapshots`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SnapshotList {
    pub snapshots: Vec<Snapshot>,
    pub total_count: u64,
}

/// Body of `RestoreSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreSnapshotRequest {
    pub new_vm_name: String,
}

/// Body of a `RestoreSnapshot` response (as shown): the new instance under `data`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RestoreSnapshotBody {
    pub data: Instance,
    pub snapshot: SnapshotRef,
}

/// Body of a `DeleteSnapshot` response (as shown).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DeleteSnapshotBody {
    pub snapshot_name: String,
}

/// Query of `GetSnapshotBilling`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SnapshotBillingQuery {
    /// Only this snapshot's record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
}

/// Billing of one snapshot, from creation to deletion (or now).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
#[serde(default)]
pub struct SnapshotBillingBody {
    pub records: Vec<SnapshotBillingRecord>,
    pub total_count: u64,
    pub total_cost: f64,
    pub currency: String,
}

// === Custom images ===

/// A custom image made from a snapshot.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub snapshot_id: String,
    pub region: String,
    /// Size in GB.
    pub size: u64,
    pub status: ImageStatus,
    pub created_at: String,
}

/// Body of `CreateImage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateImageRequest {
    pub snapshot_id: String,
    pub name: String,
}

/// Body of a response carrying one image under `image`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ImageBody {
    pub image: Image,
}

/// Body of `ListImages`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ImageList {
    pub images: Vec<Image>,
    pub total_count: u64,
}

/// Which custom images were made from a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SnapshotImageRelation {
    pub snapshot_id: String,
    pub snapshot_name: String,
    pub image_ids: Vec<String>,
}

/// Body of `GetSnapshotImageRelation`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RelationBody {
    pub relation: SnapshotImageRelation,
}

/// Body of `ListSnapshotImageRelations`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RelationList {
    pub relations: Vec<SnapshotImageRelation>,
    pub total_count: u64,
}

// === Firewalls ===

/// The instance of a firewall attachment.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AttachedVm {
    pub id: String,
    pub name: String,
    /// Power status of the instance.
    pub status: VmStatus,
}

/// One instance a firewall is attached to.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FirewallAttachment {
    pub vm: AttachedVm,
}

/// A firewall (as shown).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Firewall {
    pub id: String,
    pub name: String,
    pub description: String,
    pub region: String,
    pub rules: Vec<FirewallRule>,
    pub attachments: Vec<FirewallAttachment>,
    pub created_at: String,
}

/// Body of `CreateFirewall`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateFirewallRequest {
    pub name: String,
    pub region: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub rules: Vec<NewRule>,
}

/// Body of a response carrying one firewall under `firewall`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FirewallBody {
    pub firewall: Firewall,
}

/// Body of `ListFirewalls` and `ListInstanceFirewalls`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FirewallList {
    pub firewalls: Vec<Firewall>,
    pub total_count: u64,
}

/// Body of `AddFirewallRule`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AddFirewallRuleBody {
    pub firewall_id: String,
    pub rule: FirewallRule,
}

/// Body of `RemoveFirewallRule`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoveFirewallRuleBody {
    pub firewall_id: String,
    pub rule_id: String,
}

/// Body of `AttachFirewall`: the complete set of attached instances after the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachFirewallRequest {
    pub vm_ids: Vec<String>,
}

/// Body of `ListFirewallProtocols`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ProtocolList {
    pub protocols: Vec<Protocol>,
    pub total_count: u64,
}

// === SSH keys ===

/// Private key text (OpenSSH PEM). Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PrivateKeyPem(String);

impl PrivateKeyPem {
    pub fn new(pem: impl Into<String>) -> Self {
        PrivateKeyPem(pem.into())
    }

    /// The key text; handle with care.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PrivateKeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKeyPem(***)")
    }
}

/// An SSH key (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SshKey {
    pub id: String,
    pub name: String,
    pub public_key: String,
    pub created_at: String,
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// Body of `CreateSshKey`: import when `public_key` is given, generate a pair otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateSshKeyRequest {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
}

/// Body of a `CreateSshKey` response: the key's fields at the top level, plus the private
/// key of a generated pair (returned once, never stored).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SshKeyCreatedBody {
    #[serde(flatten)]
    pub key: SshKey,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<PrivateKeyPem>,
}

/// Body of `GetSshKey`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SshKeyBody {
    pub ssh_key: SshKey,
}

/// Body of `ListSshKeys`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SshKeyList {
    pub ssh_keys: Vec<SshKey>,
    pub total_count: u64,
}

// === Startup scripts ===

/// A startup script.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StartupScript {
    pub id: String,
    pub name: String,
    pub description: String,
    /// The script text.
    pub content: String,
    pub created_at: String,
    pub updated_at: String,
}

/// Body of `CreateStartupScript`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateStartupScriptRequest {
    pub name: String,
    pub content: String,
    #[serde(default)]
    pub description: String,
}

/// Body of `UpdateStartupScript`: the fields to change.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UpdateStartupScriptRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Body of a response carrying one script under `script`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StartupScriptBody {
    pub script: StartupScript,
}

/// Body of `ListStartupScripts`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StartupScriptList {
    pub scripts: Vec<StartupScript>,
    pub total_count: u64,
}

/// Body of `DeleteStartupScripts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteStartupScriptsRequest {
    pub script_ids: Vec<String>,
}

/// Body of a `DeleteStartupScripts` response. Ids that did not exist are reported, not
/// refused, so a repeated call succeeds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DeleteStartupScriptsBody {
    pub deleted_ids: Vec<String>,
    pub not_found_ids: Vec<String>,
}

/// Body of a delete of a resource identified by `id` (volume, image, firewall, SSH key,
/// startup script).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DeletedBody {
    pub id: String,
}

// === Catalogs, pricing, balance ===

/// Stock of one GPU type in one region.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuStock {
    pub gpu_type: String,
    pub region: String,
    /// GPUs that can be rented now.
    pub available: u32,
}

/// Body of `GetGpuStock`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuStockList {
    pub gpus: Vec<GpuStock>,
    pub total_count: u64,
}

/// Specification and price of one GPU type; an instance's specs are these per-GPU values
/// times its GPU count.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuSpec {
    pub gpu_type: String,
    pub name: String,
    pub gpu_memory_gb: u32,
    pub ram_gb_per_gpu: u32,
    pub vcpus_per_gpu: u32,
    pub storage_gb_per_gpu: u32,
    /// GPU counts an instance may have, e.g. `[1, 2, 4, 8]`.
    pub gpu_counts: Vec<u32>,
    pub price_per_gpu_hour: f64,
    pub currency: String,
}

/// Body of `GetGpuSpecs`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuSpecList {
    pub gpus: Vec<GpuSpec>,
    pub total_count: u64,
}

/// A region.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Region {
    /// E.g. `us-east-1`.
    pub id: String,
    pub name: String,
    pub available: bool,
}

/// Body of `ListRegions`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RegionList {
    pub regions: Vec<Region>,
    pub total_count: u64,
}

/// An OS image of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OsImage {
    /// E.g. `ubuntu-22.04-cuda-12`.
    pub id: String,
    pub name: String,
    pub os: String,
    pub version: String,
    pub description: String,
}

/// Body of `ListOsImages`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OsImageList {
    pub os_images: Vec<OsImage>,
    pub total_count: u64,
}

/// Price of one GPU type.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuPrice {
    pub gpu_type: String,
    pub price_per_gpu_hour: f64,
}

/// Price of one volume type.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoragePrice {
    pub volume_type: String,
    pub price_per_gb_hour: f64,
}

/// Body of `GetPricing`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PricingBody {
    pub currency: String,
    pub gpus: Vec<GpuPrice>,
    pub storage: Vec<StoragePrice>,
    pub snapshot_price_per_gb_hour: f64,
    pub image_price_per_gb_hour: f64,
}

/// Body of `QuotePricing`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriceQuoteRequest {
    pub gpu_type: String,
    pub gpu_count: u32,
    /// Hours to price; defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hours: Option<f64>,
}

/// Body of a `QuotePricing` response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PriceQuoteBody {
    pub gpu_type: String,
    pub gpu_count: u32,
    pub hours: f64,
    pub hourly_rate: f64,
    pub total_cost: f64,
    pub currency: String,
}

/// Body of `GetBalance`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BalanceBody {
    pub balance: f64,
    pub currency: String,
}

// === AI chat ===

/// An AI model and its price (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AiModel {
    pub id: String,
    pub name: String,
    #[serde(rename = "price_per_1M_tokens")]
    pub price_per_million_tokens: f64,
    pub currency: String,
}

/// One chat parameter of the models listing (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AiParameter {
    pub description: String,
    /// `integer` or `float`.
    #[serde(rename = "type")]
    pub value_type: String,
    pub default: Option<f64>,
    /// Minimum, then maximum (inclusive).
    pub range: [f64; 2],
}

/// Body of `ListAiModels` (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AiModelsBody {
    pub models: Vec<AiModel>,
    pub currency: String,
    pub minimum_balance: f64,
    /// Parameter name (e.g. `max_tokens`) to its description and range.
    pub parameters: BTreeMap<String, AiParameter>,
    /// Observed `api_key`.
    pub authentication_type: String,
    pub authenticated_user: String,
}

/// One message of a chat.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

/// Body of `ChatWithAi`. Unset parameters take the defaults of the models listing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
}

/// Tokens a chat used.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// Body of a `ChatWithAi` response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatBody {
    pub model: String,
    pub reply: ChatMessage,
    pub usage: TokenUsage,
    pub cost: f64,
    pub currency: String,
}

/// AI usage of one model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AiModelUsage {
    pub model: String,
    pub requests: u64,
    pub total_tokens: u64,
    pub total_cost: f64,
}

/// Totals of AI usage.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AiUsageSummary {
    pub total_requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub total_cost: f64,
    pub currency: String,
    pub by_model: Vec<AiModelUsage>,
}

/// Body of `GetAiUsageSummary`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AiUsageSummaryBody {
    pub summary: AiUsageSummary,
}

/// One chat call as the usage history records it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AiUsageRecord {
    pub id: String,
    pub model: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub cost: f64,
    pub currency: String,
    pub created_at: String,
}

/// Body of `GetAiUsageHistory`, newest first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AiUsageHistoryBody {
    pub records: Vec<AiUsageRecord>,
    pub total_count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_enums_keep_unknown_values() {
        let status: InstanceStatus = serde_json::from_value(json!("MIGRATING")).unwrap();
        assert_eq!(status, InstanceStatus::Other("MIGRATING".into()));
        assert_eq!(serde_json::to_value(&status).unwrap(), json!("MIGRATING"));
        let known: VmStatus = serde_json::from_value(json!("RUNNING")).unwrap();
        assert_eq!(known, VmStatus::Running);
        assert!(known.is_known());
        for tier in Tier::KNOWN {
            assert_eq!(Tier::from_wire(tier.as_str()), *tier);
        }
    }

    #[test]
    fn envelope_flattens_the_body_and_tolerates_unknown_and_missing_fields() {
        let wire = json!({
            "success": true,
            "message": "restored",
            "request_id": "req_0123456789abcdef01234567",
            "timestamp": "2025-01-01T00:00:00Z",
            "tier": "legacy",
            "future_field": {"x": 1},
            "data": {
                "instance_id": "vm-1", "vm_name": "a", "ip_address": "203.0.113.7",
                "ip_status": "assigned",
                "billing": {"hourly_rate": 2.5, "currency": "USD"},
                "specs": {"gpu_type": "A100-80G", "gpu_count": 1, "ram_gb": 64, "vcpus": 8,
                          "storage_gb": 500},
                "status": "ACTIVE", "boot_source": "snapshot",
                "created_at": "2025-01-01T00:00:00Z"
            },
            "snapshot": {"id": "snap-1", "name": "s"}
        });
        let decoded: ApiResponse<RestoreSnapshotBody> =
            serde_json::from_value(wire.clone()).unwrap();
        let bytes = serde_json::to_vec(&wire).unwrap();
        assert_eq!(ApiResponse::from_json(&bytes).unwrap(), decoded);
        assert!(decoded.success);
        assert_eq!(decoded.tier, Some(Tier::Legacy));
        assert_eq!(decoded.body.data.status, InstanceStatus::Active);
        assert_eq!(decoded.body.data.boot_source, BootSource::Snapshot);
        assert_eq!(decoded.body.data.specs.gpu_type, "A100-80G");
        assert!(decoded.body.data.security_rules.is_empty());
        assert_eq!(decoded.body.snapshot.id, "snap-1");

        let encoded = serde_json::to_value(&decoded).unwrap();
        assert_eq!(encoded["data"]["instance_id"], "vm-1");
        assert_eq!(encoded["snapshot"]["name"], "s");
        assert!(encoded.get("code").is_none());
    }

    #[test]
    fn ssh_key_create_has_key_fields_at_top_level_and_hides_private_key() {
        let body = SshKeyCreatedBody {
            key: SshKey {
                id: "key-1".into(),
                name: "k".into(),
                public_key: "ssh-ed25519 AAAA".into(),
                ..SshKey::default()
            },
            private_key: Some(PrivateKeyPem::new("-----BEGIN OPENSSH PRIVATE KEY-----")),
        };
        let response =
            ApiResponse::ok("generated", "req_1", body).with_code(success_code::SSH_KEY_GENERATED);
        let encoded = serde_json::to_value(&response).unwrap();
        assert_eq!(encoded["id"], "key-1");
        assert_eq!(encoded["code"], "SSH_KEY_GENERATED");
        assert_eq!(
            encoded["private_key"],
            "-----BEGIN OPENSSH PRIVATE KEY-----"
        );
        assert!(!format!("{response:?}").contains("BEGIN OPENSSH"));
        let decoded: ApiResponse<SshKeyCreatedBody> = serde_json::from_value(encoded).unwrap();
        assert_eq!(decoded.body.key.name, "k");
        assert!(decoded.body.private_key.is_some());
    }

    #[test]
    fn volume_billing_summary_uses_the_documented_camel_case() {
        let encoded = serde_json::to_value(VolumeBillingSummary::default()).unwrap();
        for key in [
            "totalMinutes",
            "activeCount",
            "averageUsage",
            "totalSizeGB",
            "totalCost",
        ] {
            assert!(encoded.get(key).is_some(), "{key}");
        }
        let model = serde_json::to_value(AiModel::default()).unwrap();
        assert!(model.get("price_per_1M_tokens").is_some());
    }

    /// Every response body decodes from an envelope that carries nothing else, and from one
    /// with fields this version does not know.
    #[test]
    fn every_response_body_tolerates_missing_and_unknown_fields() {
        fn check<T: serde::de::DeserializeOwned>(name: &str) {
            for wire in [
                json!({}),
                json!({"success": true, "message": "ok", "request_id": "req_1",
                       "added_in_a_later_version": [1, 2, 3]}),
            ] {
                if let Err(err) = serde_json::from_value::<ApiResponse<T>>(wire.clone()) {
                    panic!("{name}: {err}");
                }
                let bytes = serde_json::to_vec(&wire).unwrap();
                if let Err(err) = ApiResponse::<T>::from_json(&bytes) {
                    panic!("{name} through from_json: {err}");
                }
            }
        }
        macro_rules! check_all {
            ($($body:ty),+ $(,)?) => { $( check::<$body>(stringify!($body)); )+ };
        }
        check_all!(
            Empty,
            InstanceBody,
            InstanceList,
            PowerActionBody,
            DeleteInstanceBody,
            AddSecurityRuleBody,
            RemoveSecurityRuleBody,
            InstanceBillingBody,
            VolumeList,
            VolumeBody,
            VolumeAttachmentBody,
            VolumeTypeList,
            VolumeBillingPage,
            SnapshotBody,
            SnapshotList,
            RestoreSnapshotBody,
            DeleteSnapshotBody,
            SnapshotBillingBody,
            ImageBody,
            ImageList,
            RelationBody,
            RelationList,
            FirewallBody,
            FirewallList,
            AddFirewallRuleBody,
            RemoveFirewallRuleBody,
            ProtocolList,
            SshKeyCreatedBody,
            SshKeyBody,
            SshKeyList,
            StartupScriptBody,
            StartupScriptList,
            DeleteStartupScriptsBody,
            DeletedBody,
            GpuStockList,
            GpuSpecList,
            RegionList,
            OsImageList,
            PricingBody,
            PriceQuoteBody,
            BalanceBody,
            AiModelsBody,
            ChatBody,
            AiUsageSummaryBody,
            AiUsageHistoryBody,
        );
        let error: ErrorBody = serde_json::from_value(json!({"detail": "x"})).unwrap();
        assert_eq!(error, ErrorBody::default());
    }

    #[test]
    fn request_bodies_keep_required_fields_required() {
        let missing = serde_json::from_value::<RestoreSnapshotRequest>(json!({}));
        assert!(missing.unwrap_err().to_string().contains("new_vm_name"));
        let optional_left_out = serde_json::to_value(CreateSshKeyRequest {
            name: "k".into(),
            public_key: None,
        })
        .unwrap();
        assert_eq!(optional_left_out, json!({"name": "k"}));
    }
}
