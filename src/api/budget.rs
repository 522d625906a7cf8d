//! `Budget`: a namespace's limit on what its billed resources cost per hour together.
//!
//! A Budget is no cloud resource: the operator counts the billed objects of its namespace
//! (GpuInstances, Volumes, Snapshots, Images) that its selector matches and refuses a create
//! that would take their hourly rate past `maxHourlyRate`. So that concurrent creates cannot
//! together pass a limit each alone would pass, a create first reserves its rate in the
//! Budget's status with a version-checked write (`status.reservations`); the reservation
//! gives way to the object's own `status.hourlyRate` once the cloud reports it.

use crate::common::Column;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A limit on what the billed resources of a namespace (or those of it a selector picks)
/// cost per hour. Creates that would pass it are refused with reason `BudgetExceeded`
/// before any cloud call.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gpucloud.io",
    version = "v1alpha1",
    kind = "Budget",
    namespaced,
    status = "BudgetStatus",
    shortname = "gpubudget",
    category = "gpucloud"
)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSpec {
    /// The most the counted resources may cost per hour together, in `currency`. A create
    /// whose hourly rate would take the sum past it is refused; `0` refuses every billed
    /// create.
    #[schemars(range(min = 0.0))]
    pub max_hourly_rate: f64,
    /// The currency of `maxHourlyRate` (ISO 4217, e.g. `USD`): it must be the cloud account's,
    /// or the Budget is `Stalled` with reason `CurrencyMismatch` and refuses every create.
    #[serde(default = "default_currency")]
    #[x_kube(validation = Rule::new("self.matches('^[A-Z]{3}$')").message("currency must be an ISO 4217 code of three capital letters, such as USD"))]
    pub currency: String,
    /// The objects counted: the namespace's billed objects whose labels match (a team's
    /// label, say). All of them when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// What happens while the counted objects cost more than `maxHourlyRate` (the limit was
    /// lowered, machines were started or adopted): `Refuse` (the default) refuses new
    /// billed creates; `Stop` and `Hibernate` also power off the newest running
    /// GpuInstances until the rest fit, never one annotated
    /// `gpucloud.io/deletion-protection: "true"`. A machine so powered off starts again
    /// once its hourly rate fits again, or when the Budget goes or says `Refuse`.
    #[serde(default)]
    pub on_exceeded: OnExceeded,
}

/// What a Budget does while its count is over its limit, besides refusing creates.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum OnExceeded {
    #[default]
    Refuse,
    Stop,
    Hibernate,
}

fn default_currency() -> String {
    "USD".into()
}

/// What the operator counts against the Budget.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetStatus {
    /// What the counted resources cost per hour together, reservations included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hourly_rate: Option<f64>,
    /// `maxHourlyRate` less `hourlyRate`: the hourly rate a new create may still add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<f64>,
    /// The currency of the figures, the cloud account's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// How many objects are counted (reservations included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<i32>,
    /// The counted objects, `Kind/name` each, billed first by rate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<String>,
    /// Creates under way: each reserved its hourly rate before its cloud call and keeps it
    /// until the cloud reports the resource's own rate, or the create is refused, or the
    /// object is gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<Reservation>,
    /// The machines this Budget powered off, newest first, until their rates fit again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub powered_off: Vec<PoweredOff>,
    /// The `metadata.generation` the figures were counted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (counted and within the limit) and `Exceeded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// An hourly rate held for a create under way.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// The object's kind, name and uid.
    pub kind: String,
    pub name: String,
    pub uid: String,
    /// What its resource will cost per hour, from the price list.
    pub hourly_rate: f64,
    /// When it was reserved.
    pub reserved_at: Time,
}

/// A GpuInstance a Budget keeps powered off.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoweredOff {
    pub name: String,
    pub uid: String,
    /// What the machine cost per hour running, when it was chosen: it starts again once
    /// that fits.
    pub hourly_rate: f64,
    /// `Stopped` or `Hibernated`.
    pub power_state: crate::PowerState,
    pub since: Time,
}

impl Budget {
    /// `kubectl get budget`: the limit, what is counted against it, and what is left.
    pub const COLUMNS: &'static [Column] = &[
        Column::new("Max/h", "number", ".spec.maxHourlyRate"),
        Column::new("Rate/h", "number", ".status.hourlyRate"),
        Column::new("Remaining", "number", ".status.remaining"),
        Column::new("Currency", "string", ".spec.currency"),
        Column::new("Counted", "integer", ".status.counted"),
        Column::new(
            "Ready",
            "string",
            ".status.conditions[?(@.type==\"Ready\")].status",
        ),
        Column::new(
            "Reason",
            "string",
            ".status.conditions[?(@.type==\"Ready\")].reason",
        ),
        Column::new("Age", "date", ".metadata.creationTimestamp"),
    ];
}
