//! `GpuInstance`: a rented GPU machine.

use crate::common::{
    CloudStatus, Column, ConfigMapKeyRef, LocalRef, ManagedFields, OnChange, Tier,
};
use crate::lifetime::Lifetime;
use crate::schedule::Schedule;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A GPU machine in the Cloud GPU Compute Service.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gpucloud.io",
    version = "v1alpha1",
    kind = "GpuInstance",
    namespaced,
    status = "GpuInstanceStatus",
    shortname = "gpui",
    category = "gpucloud",
    validation = Rule::new("self.metadata.name.size() <= 63").message("metadata.name must be at most 63 characters for a GpuInstance"),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("(has(self.osImage) ? 1 : 0) + (has(self.imageRef) ? 1 : 0) + (has(self.source) ? 1 : 0) == 1").message("exactly one of osImage, imageRef and source must be set"),
    validation = Rule::new("!has(self.source) || (!has(self.gpuType) && !has(self.gpuCount))").message("gpuType and gpuCount are inherited from the snapshot when source is set; leave them out"),
    validation = Rule::new("has(self.source) || has(self.gpuType) || has(self.placement)").message("gpuType is required unless the instance is restored from a snapshot or placed by spec.placement"),
    validation = Rule::new("has(self.region) != has(self.placement)").message("set exactly one of spec.region and spec.placement (a region and gpuType are a placement of one alternative)"),
    validation = Rule::new("!has(self.placement) || (!has(self.gpuType) && !has(self.gpuCount))").message("gpuType and gpuCount are given by each alternative of spec.placement; leave them out").field_path(".placement"),
    validation = Rule::new("!has(self.placement) || has(self.osImage)").message("spec.placement needs osImage: a custom image (imageRef) and a snapshot (source) are in one region only").field_path(".placement"),
    validation = Rule::new("has(self.placement) == has(oldSelf.placement) && (!has(self.placement) || self.placement == oldSelf.placement)").message("placement is immutable: the machine stays where it was created").field_path(".placement"),
    validation = Rule::new("!has(self.securityRules) || size(self.securityRules) == 0 || self.tier == 'Legacy'").message("securityRules are supported on the Legacy tier only").field_path(".securityRules"),
    validation = Rule::new("self.powerState != 'Hibernated' || self.tier == 'Legacy'").message("powerState Hibernated needs tier Legacy: the cloud wakes a hibernated machine on the Legacy tier only, so on Advanced it could never run again (and keeps billing); use Stopped").field_path(".powerState"),
    validation = Rule::new("has(self.region) == has(oldSelf.region) && (!has(self.region) || self.region == oldSelf.region)").message("region is immutable").field_path(".region"),
    validation = Rule::new("self.tier == oldSelf.tier").message("tier is immutable").field_path(".tier"),
    validation = Rule::new("has(self.gpuType) == has(oldSelf.gpuType) && (!has(self.gpuType) || self.gpuType == oldSelf.gpuType)").message("gpuType is immutable").field_path(".gpuType"),
    validation = Rule::new("has(self.gpuCount) == has(oldSelf.gpuCount) && (!has(self.gpuCount) || self.gpuCount == oldSelf.gpuCount)").message("gpuCount is immutable").field_path(".gpuCount"),
    validation = Rule::new("has(self.osImage) == has(oldSelf.osImage) && (!has(self.osImage) || self.osImage == oldSelf.osImage)").message("osImage is immutable").field_path(".osImage"),
    validation = Rule::new("has(self.imageRef) == has(oldSelf.imageRef) && (!has(self.imageRef) || self.imageRef == oldSelf.imageRef)").message("imageRef is immutable").field_path(".imageRef"),
    validation = Rule::new("has(self.source) == has(oldSelf.source) && (!has(self.source) || self.source == oldSelf.source)").message("source is immutable").field_path(".source"),
    validation = Rule::new("has(self.connectionSecret) == has(oldSelf.connectionSecret) && (!has(self.connectionSecret) || self.connectionSecret == oldSelf.connectionSecret)").message("connectionSecret is immutable: delete and recreate the GpuInstance to write the connection details to another Secret").field_path(".connectionSecret"),
    validation = Rule::new("has(self.sshKeyRefs) == has(oldSelf.sshKeyRefs) && (!has(self.sshKeyRefs) || self.sshKeyRefs == oldSelf.sshKeyRefs)").message("sshKeyRefs is immutable: the cloud installs SSH keys only when it creates a machine; delete and recreate the GpuInstance to change them").field_path(".sshKeyRefs"),
    validation = Rule::new("has(self.startupScript) == has(oldSelf.startupScript) && (!has(self.startupScript) || self.startupScript == oldSelf.startupScript)").message("startupScript is immutable: the cloud runs it at first boot only; delete and recreate the GpuInstance to change it").field_path(".startupScript"),
    validation = Rule::new("!has(self.lifetime) || self.lifetime.onExpiry != 'Hibernate' || self.tier == 'Legacy'").message("lifetime.onExpiry Hibernate needs tier Legacy: the cloud wakes a hibernated machine on the Legacy tier only; use Stop").field_path(".lifetime.onExpiry"),
    validation = crate::lifetime::deleting_expiry_is_not_orphan(),
    validation = Rule::new("!has(self.schedule) || self.schedule.outside != 'Hibernated' || self.tier == 'Legacy'").message("schedule.outside Hibernated needs tier Legacy: the cloud wakes a hibernated machine on the Legacy tier only; use Stopped").field_path(".schedule.outside"),
    validation = crate::common::credentials_secret_ref_is_immutable(),
)]
// Parts most objects leave out and that take many bytes are boxed: the stores hold every
// object (`tests::a_stored_object_fits_its_size_class` in lib.rs).
pub struct GpuInstanceSpec {
    #[serde(flatten)]
    pub managed: ManagedFields,

    /// Region code, e.g. `us-east-1`. Immutable. Set this (with `gpuType`) or `placement`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub region: Option<String>,

    /// Where the machine may go, when more than one GPU type or region will do: alternatives
    /// and a policy choosing among those in stock. Instead of `region`, `gpuType` and
    /// `gpuCount`. Immutable; the choice is shown in `status.placement` and never changes once
    /// the machine is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Box<Placement>>,

    /// GPU model from the cloud's catalog, e.g. `H100-80G`. Immutable. Inherited from the
    /// snapshot when `source` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub gpu_type: Option<String>,

    /// Number of GPUs: one of the counts the catalog offers for the GPU type (`kubectl get
    /// gpuofferings -o wide` shows them), or the create is refused (`InvalidSpec`) before any
    /// cloud call. Immutable. Inherited from the snapshot when `source` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub gpu_count: Option<i32>,

    /// OS image id from the cloud's catalog, e.g. `ubuntu-22.04-cuda-12`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub os_image: Option<String>,

    /// An `Image` in this namespace to boot from. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_ref: Option<LocalRef>,

    /// Restore the instance from a snapshot instead of booting an image. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<InstanceSource>>,

    /// Service tier: `Advanced`, or `Legacy` (needed for security rules and for restoring a
    /// hibernated machine). Immutable.
    #[serde(default)]
    pub tier: Tier,

    /// `SshKey` objects in this namespace whose keys are installed on the machine when it is
    /// created. Immutable: the cloud cannot change a machine's keys later.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub ssh_key_refs: Vec<LocalRef>,

    /// Script run at first boot. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_script: Option<Box<StartupScript>>,

    /// Whether the machine gets a public IP address.
    #[serde(default = "default_true")]
    pub public_ip: bool,

    /// Instance security rules (Legacy tier only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub security_rules: Vec<SecurityRule>,

    /// Wanted power state: `Running`, `Stopped` or `Hibernated` (Legacy tier only: the cloud
    /// wakes hibernated machines on that tier alone). The operator starts, stops, hibernates or
    /// restores the machine to match, and starts it again if it is stopped outside the
    /// operator. Off is not free: the cloud bills a stopped machine 10 % of its running rate
    /// and a hibernated one 5 % (its disk is kept); only deleting it ends its billing.
    #[serde(default)]
    pub power_state: PowerState,

    /// Refuse to create the machine, and to start or restore it, when its hourly rate would
    /// exceed this (`PriceAboveLimit`, before any call). Lowered below the rate of a running
    /// machine, it is reported (`PriceAboveLimit`), not enforced: the machine is stopped only
    /// when `powerState` says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0001))]
    pub max_hourly_rate: Option<f64>,

    /// Name of a Secret (owned by this object) to receive host, port, user and, for a
    /// generated SSH key, the private key (read only from the Secret that SshKey created).
    /// Immutable. A Secret of that name this object did not create is never overwritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub connection_secret: Option<String>,

    /// What becomes of the final snapshot taken under `deletionPolicy: Snapshot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_snapshot: Option<FinalSnapshotSpec>,

    /// When the machine expires and what then happens to it (stopped, hibernated, deleted,
    /// or deleted after a final snapshot), so a forgotten machine does not run on at its full
    /// rate (stopped or hibernated, it is still billed a share of it; deleted, nothing).
    /// Editing it extends or brings forward the expiry; `status.expiresAt` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<Box<Lifetime>>,

    /// The windows of the week in which the machine runs (days, from and to times, an IANA
    /// time zone); outside them it is stopped or hibernated. Applies while `powerState` is
    /// `Running`: `Stopped` or `Hibernated` keep the machine off whatever the schedule says,
    /// and an ended `lifetime` wins over both. `status.nextTransition` shows the next start
    /// or stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Box<Schedule>>,
}

/// Where a machine may be created, and how the operator chooses.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// `Ordered`: the first alternative with GPUs in stock, in the order written (within an
    /// alternative, each GPU type in order, then each region in order). `Cheapest`: of those
    /// in stock, the lowest hourly rate (ties go to the earlier one). Either way a rate above
    /// `spec.maxHourlyRate` is skipped.
    #[serde(default)]
    pub policy: PlacementPolicy,
    /// The alternatives, at least one.
    #[schemars(length(min = 1, max = 16))]
    pub alternatives: Vec<PlacementAlternative>,
}

/// How an alternative is chosen among those in stock.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PlacementPolicy {
    #[default]
    Ordered,
    Cheapest,
}

/// GPU types that will do, with a count, in regions that will do.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementAlternative {
    /// GPU models from the cloud's catalog, e.g. `[H100-80G, A100-80G]`.
    #[schemars(length(min = 1, max = 8), inner(length(min = 1, max = 64)))]
    pub gpu_types: Vec<String>,
    /// Number of GPUs; one when left out. Each of `gpuTypes` must be offered with this many
    /// (`kubectl get gpuofferings -o wide` shows the counts), or the spec is refused
    /// (`InvalidSpec`).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 16))]
    pub gpu_count: i32,
    /// Region codes, e.g. `[us-east-1, eu-west-1]`.
    #[schemars(length(min = 1, max = 8), inner(length(min = 1, max = 64)))]
    pub regions: Vec<String>,
}

fn one() -> i32 {
    1
}

/// The placement the operator chose, and what it passed over.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    /// Where the machine is created; absent while nothing could be chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<ChosenPlacement>,
    /// Candidates passed over, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedPlacement>,
}

/// The candidate a machine is created from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChosenPlacement {
    /// The chosen GPU type.
    pub gpu_type: String,
    /// The chosen GPU count.
    pub gpu_count: i32,
    /// The chosen region.
    pub region: String,
    /// Index of the chosen alternative in `spec.placement.alternatives` (0 for a spec with
    /// `region` and `gpuType`).
    pub alternative: i32,
    /// The hourly rate the price list gave when it was chosen (the rate the machine is billed
    /// at, when no choice was recorded before the create: a first create, or an adoption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub hourly_rate: Option<f64>,
    /// Currency of `hourlyRate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

/// A candidate placement passed over.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedPlacement {
    pub gpu_type: String,
    pub gpu_count: i32,
    pub region: String,
    /// `OutOfStock` (the catalog showed too few free), `RefusedByCloud` (the cloud refused
    /// the create for want of stock), `AboveMaxHourlyRate`, `NotInPriceList` or `Pricier`
    /// (in stock, but policy `Cheapest` found a lower rate).
    pub reason: String,
    /// When the cloud refused it (`RefusedByCloud`): a catalog read later shows whether it
    /// has stock again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// The final snapshot taken when a GpuInstance with `deletionPolicy: Snapshot` is deleted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinalSnapshotSpec {
    /// Keep the `Snapshot` object (named `<instance>-final`) that took the final snapshot, so
    /// it can be restored with `source.snapshotRef` and is deleted with it. Left out or false,
    /// the object is removed with the instance and the cloud snapshot is left in place (its id
    /// is in the `FinalSnapshot` Event and the released-resources record).
    #[serde(default)]
    pub keep_as_object: bool,
}

/// The final snapshot a GpuInstance being deleted has taken.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinalSnapshotStatus {
    /// The `Snapshot` object that took it.
    pub object: String,
    /// Cloud id of the snapshot, available before the machine was deleted.
    pub snapshot_id: String,
}

fn default_true() -> bool {
    true
}

/// Where a restored instance comes from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceSource {
    /// A `Snapshot` in this namespace; the instance inherits its GPU type and specs.
    pub snapshot_ref: LocalRef,
}

/// The largest startup script the operator sends: the cloud refuses request bodies over 64 KiB
/// (`413`), and the rest of a create request fits in the remaining 4 KiB.
pub const MAX_STARTUP_SCRIPT_BYTES: usize = 61_440;

/// Startup script given inline or read from a ConfigMap. Read once, when the machine is
/// created: the cloud runs it at first boot and has no way to change it later.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.inline) != has(self.configMapRef)").message("set exactly one of inline and configMapRef"))]
pub struct StartupScript {
    /// The script's text, at most 61,440 characters (the cloud refuses a create request over
    /// 64 KiB; a script read from a ConfigMap is held to 61,440 bytes before the create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_STARTUP_SCRIPT_BYTES))]
    pub inline: Option<String>,
    /// A ConfigMap key in this namespace holding the script. Read when the machine is
    /// created: the cloud runs a startup script at first boot only, so a later change to the
    /// ConfigMap is not applied; it is reported (`Ready=False`, `SpecMismatch`) until the
    /// old script is put back or the GpuInstance is recreated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapKeyRef>,
}

/// Wanted power state of an instance.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PowerState {
    #[default]
    Running,
    Stopped,
    Hibernated,
}

/// Direction of a security or firewall rule.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Direction {
    #[default]
    Ingress,
    Egress,
}

impl Direction {
    /// The value the cloud API uses.
    pub fn cloud_value(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
}

/// IP family of a rule.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum EtherType {
    #[default]
    IPv4,
    IPv6,
}

impl EtherType {
    /// The value the cloud API uses.
    pub fn cloud_value(self) -> &'static str {
        match self {
            EtherType::IPv4 => "IPv4",
            EtherType::IPv6 => "IPv6",
        }
    }
}

/// A network rule: who may reach which ports. Shared by instance security rules and
/// firewalls.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.portRangeMin) == has(self.portRangeMax)").message("set both portRangeMin and portRangeMax, or neither for all ports"),
    validation = Rule::new("!has(self.portRangeMin) || !has(self.portRangeMax) || self.portRangeMin <= self.portRangeMax").message("portRangeMin must not exceed portRangeMax").field_path(".portRangeMin"),
    validation = Rule::new("!has(self.portRangeMin) || self.protocol == 'tcp' || self.protocol == 'udp'").message("ports apply to tcp and udp only; leave portRangeMin and portRangeMax out for other protocols").field_path(".portRangeMin"),
    validation = Rule::new("self.etherType == 'IPv4' ? !self.remoteIpPrefix.contains(':') : self.remoteIpPrefix.contains(':')").message("remoteIpPrefix must be of the rule's etherType").field_path(".remoteIpPrefix"),
)]
pub struct SecurityRule {
    /// `Ingress` or `Egress`.
    #[serde(default)]
    pub direction: Direction,
    /// Protocol from the cloud's supported-protocols catalog, e.g. `tcp`.
    #[schemars(length(min = 1, max = 16), regex(pattern = "^[a-z0-9]+$"))]
    pub protocol: String,
    /// `IPv4` or `IPv6`; must match `remoteIpPrefix`.
    #[serde(default)]
    pub ether_type: EtherType,
    /// Source (ingress) or destination (egress) network in CIDR notation.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new("isCIDR(self)").message("remoteIpPrefix must be a CIDR such as 203.0.113.0/24"))]
    pub remote_ip_prefix: String,
    /// First port of the range (`tcp` and `udp` only; leave both ports out for all ports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port_range_min: Option<i32>,
    /// Last port of the range (equal to `portRangeMin` for one port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port_range_max: Option<i32>,
}

/// What the operator observed of an instance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuInstanceStatus {
    #[serde(flatten)]
    pub cloud: CloudStatus,
    /// Power state as the cloud reports it, e.g. `RUNNING`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_status: Option<String>,
    /// Public IP address, when one is assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    /// `assigned` or `unassigned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_status: Option<String>,
    /// Hardware as the cloud reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub specs: Option<InstanceSpecs>,
    /// What the instance costs per hour, in `currency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub hourly_rate: Option<f64>,
    /// Currency of `hourlyRate`, e.g. `USD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// `image`, `custom_image` or `snapshot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_source: Option<String>,
    /// Cloud id of the snapshot the instance was restored from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_snapshot_id: Option<Box<str>>,
    /// The `gpucloud.io/restartedAt` value whose reboot has been done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_at: Option<Box<str>>,
    /// Under `deletionPolicy: Snapshot`, the final snapshot, recorded once it is available and
    /// before the machine is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_snapshot: Option<Box<FinalSnapshotStatus>>,
    /// When `spec.schedule` next starts or stops the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_transition: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Where the machine was placed (written with the create's intent, fixed once the machine
    /// exists: then it is the machine's own type and region). A restore is placed on its
    /// snapshot's GPUs and region, with no alternative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementStatus>,
    /// SHA-256 (hex) of the startup script `spec.startupScript.configMapRef` held when the
    /// machine was created: the ConfigMap's later content is compared with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub startup_script_sha256: Option<Box<str>>,
}

/// Hardware of an instance as the cloud reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceSpecs {
    /// GPU model.
    pub gpu_type: String,
    /// Number of GPUs.
    pub gpu_count: i32,
    /// Memory in GB.
    pub ram_gb: i32,
    /// Virtual CPUs.
    pub vcpus: i32,
    /// Boot disk in GB.
    pub storage_gb: i32,
}

impl GpuInstance {
    /// The `kubectl get` columns of this kind's own (see [`crate::Column`]).
    pub const COLUMNS: &[Column] = &[
        Column::new("GPU", "string", ".status.specs.gpuType"),
        Column::new("Count", "integer", ".status.specs.gpuCount"),
        Column::new("Region", "string", ".status.placement.chosen.region"),
        Column::new("IP", "string", ".status.ipAddress"),
        Column::new("Rate/h", "number", ".status.hourlyRate").wide(),
    ];

    /// How a change of each spec field is carried out (with [`crate::MANAGED_ON_CHANGE`]).
    pub const ON_CHANGE: &[(&str, OnChange)] = &[
        ("region", OnChange::Immutable),
        ("placement", OnChange::Immutable),
        ("tier", OnChange::Immutable),
        ("gpuType", OnChange::Immutable),
        ("gpuCount", OnChange::Immutable),
        ("osImage", OnChange::Immutable),
        ("imageRef", OnChange::Immutable),
        ("source", OnChange::Immutable),
        ("connectionSecret", OnChange::Immutable),
        ("sshKeyRefs", OnChange::Immutable),
        ("startupScript", OnChange::Immutable),
        (
            "powerState",
            OnChange::Applied("the machine is started, stopped or hibernated"),
        ),
        (
            "schedule",
            OnChange::Applied("the machine is started or stopped by the new windows"),
        ),
        (
            "lifetime",
            OnChange::Applied("the expiry is computed again: extended or brought forward"),
        ),
        (
            "publicIp",
            OnChange::Applied("the public IP is turned on or off"),
        ),
        (
            "securityRules",
            OnChange::Applied("missing rules added, then extra ones removed (Legacy tier)"),
        ),
        (
            "finalSnapshot",
            OnChange::Operator("read when the object is deleted under `deletionPolicy: Snapshot`"),
        ),
        (
            "maxHourlyRate",
            OnChange::Rechecked(
                "a machine above a lowered limit shows `PriceAboveLimit` and keeps running; one that is off is not started above it",
            ),
        ),
    ];
}

impl GpuInstance {
    /// The region the machine is in or goes to: `spec.region`, or the region its placement
    /// chose (`None` while nothing is chosen).
    pub fn region(&self) -> Option<&str> {
        self.spec.region.as_deref().or_else(|| {
            self.status
                .as_ref()
                .and_then(|s| s.placement.as_ref())
                .and_then(|p| p.chosen.as_ref())
                .map(|c| c.region.as_str())
        })
    }
}

impl_managed!(with_lifetime GpuInstance);
