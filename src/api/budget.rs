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
use k8s_openapi::jiff::civil::Date;
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{Span, Timestamp};
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
#[x_kube(
    validation = Rule::new("has(self.maxSpend) == has(self.period)").message("maxSpend and period go together: the spend is counted per period"),
)]
pub struct BudgetSpec {
    /// The most the counted resources may cost per hour together, in `currency`. A create
    /// whose hourly rate would take the sum past it is refused; `0` refuses every billed
    /// create.
    #[schemars(range(min = 0.0))]
    pub max_hourly_rate: f64,
    /// The currency of `maxHourlyRate` (ISO 4217, e.g. `USD`): it must be the cloud account's,
    /// or the Budget is `Stalled` with reason `CurrencyMismatch` and refuses every create.
    #[serde(default = "default_currency")]
    #[schemars(length(max = 3))]
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
    /// once its hourly rate fits again, or when the Budget goes or says `Refuse`. `Delete`
    /// instead deletes the newest counted GpuInstances (running or off) until the rest fit,
    /// each through its own deletion (its finalizer deletes the machine), never one annotated
    /// with deletion protection nor one whose deletion would leave its machine billed
    /// (`deletionPolicy: Orphan`, `managementPolicy: ObserveOnly`); `SnapshotThenDelete`
    /// deletes them the same way after a final snapshot of each, as `deletionPolicy:
    /// Snapshot` does (the Budget sets it on the machine before deleting it).
    #[serde(default)]
    pub on_exceeded: OnExceeded,
    /// The most the counted objects may cost together in one `period`, in `currency`, as
    /// the cloud's billing says (spend of objects deleted in the period included). Once
    /// spent, billed creates are refused and, under `Stop` or `Hibernate`, every running
    /// machine the Budget may power off is, until the next period; under `Delete` or
    /// `SnapshotThenDelete`, every machine it may delete is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub max_spend: Option<f64>,
    /// The period `maxSpend` is counted over, in UTC: `Monthly` from `dayOfMonth` (1-28,
    /// default 1) or `Weekly` from `dayOfWeek` (default Monday), at midnight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<BudgetPeriod>,
}

/// How a Budget's spend is counted over time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.dayOfMonth) || self.type == 'Monthly'").message("dayOfMonth applies to a Monthly period").field_path(".dayOfMonth"),
    validation = Rule::new("!has(self.dayOfWeek) || self.type == 'Weekly'").message("dayOfWeek applies to a Weekly period").field_path(".dayOfWeek"),
)]
pub struct BudgetPeriod {
    #[serde(rename = "type")]
    pub type_: PeriodType,
    /// The day of the month a Monthly period starts on (1-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 28))]
    pub day_of_month: Option<i32>,
    /// The day a Weekly period starts on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day_of_week: Option<crate::schedule::Day>,
}

/// The length of a Budget's period.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum PeriodType {
    Monthly,
    Weekly,
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
    Delete,
    SnapshotThenDelete,
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
    #[serde(serialize_with = "crate::money::option")]
    pub hourly_rate: Option<f64>,
    /// The part of `hourlyRate` that counted machines which are off still cost: the cloud
    /// bills a stopped or hibernated machine a share of its running rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub off_hourly_rate: Option<f64>,
    /// `maxHourlyRate` less `hourlyRate`: the hourly rate a new create may still add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
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
    /// What the counted objects cost in the current period, from the cloud's billing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub spent: Option<f64>,
    /// `spent` plus `hourlyRate` until the period ends, to the cent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub projected: Option<f64>,
    /// `maxSpend` less `spent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub spend_remaining: Option<f64>,
    /// The `periodStart` of the period whose projected overspend a `ProjectedOverBudget`
    /// Warning Event told of: one such Event per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overspend_warned_for: Option<Time>,
    /// The current period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_start: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_end: Option<Time>,
    /// The cloud names of the resources counted in this period, deleted ones included, by
    /// which their billing is found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub charged: Vec<String>,
    /// The machines this Budget powered off, newest first, until their rates fit again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub powered_off: Vec<PoweredOff>,
    /// The `metadata.generation` the figures were counted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: `True` while the count is within the limits (reason `WithinBudget`, or
    /// `ProjectedOverBudget` while the projection passes `maxSpend`); `False` with `Stalled`
    /// while it is over them or keeps machines off (reason `BudgetExceeded`). `Exceeded` says
    /// the same as a condition of its own.
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
    #[serde(serialize_with = "crate::money::serialize")]
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
    #[serde(serialize_with = "crate::money::serialize")]
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
        Column::new("Off/h", "number", ".status.offHourlyRate").wide(),
        Column::new("Remaining", "number", ".status.remaining"),
        Column::new("Spent", "number", ".status.spent"),
        Column::new("Max spend", "number", ".spec.maxSpend"),
        Column::new("Projected", "number", ".status.projected").wide(),
        Column::new("Currency", "string", ".spec.currency"),
        Column::new("Counted", "integer", ".status.counted"),
        crate::READY_COLUMN,
        crate::REASON_COLUMN,
        crate::AGE_COLUMN,
    ];
}

impl BudgetPeriod {
    /// The period that holds `now`: its start and end, at midnight UTC.
    pub fn around(&self, now: Timestamp) -> Result<(Timestamp, Timestamp), String> {
        let today = now.to_zoned(TimeZone::UTC).date();
        let midnight = |date: Date| -> Result<Timestamp, String> {
            date.to_zoned(TimeZone::UTC)
                .map(|z| z.timestamp())
                .map_err(|e| format!("spec.period: {e}"))
        };
        let (start, end) = match self.type_ {
            PeriodType::Monthly => {
                let day = self.day_of_month.unwrap_or(1);
                let day = i8::try_from(day)
                    .ok()
                    .filter(|d| (1..=28).contains(d))
                    .ok_or_else(|| format!("spec.period.dayOfMonth {day} is not within 1-28"))?;
                let this_month = today
                    .first_of_month()
                    .with()
                    .day(day)
                    .build()
                    .map_err(|e| e.to_string())?;
                let start = if today >= this_month {
                    this_month
                } else {
                    this_month
                        .checked_sub(Span::new().months(1))
                        .map_err(|e| e.to_string())?
                };
                let end = start
                    .checked_add(Span::new().months(1))
                    .map_err(|e| e.to_string())?;
                (start, end)
            }
            PeriodType::Weekly => {
                let first = self
                    .day_of_week
                    .unwrap_or(crate::schedule::Day::Mon)
                    .weekday();
                let back = i64::from(today.weekday().since(first));
                let start = today
                    .checked_sub(Span::new().days(back))
                    .map_err(|e| e.to_string())?;
                let end = start
                    .checked_add(Span::new().days(7))
                    .map_err(|e| e.to_string())?;
                (start, end)
            }
        };
        Ok((midnight(start)?, midnight(end)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Day;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_period_starts_at_midnight_utc_on_its_day() {
        let monthly = |day| BudgetPeriod {
            type_: PeriodType::Monthly,
            day_of_month: day,
            day_of_week: None,
        };
        let weekly = |day| BudgetPeriod {
            type_: PeriodType::Weekly,
            day_of_month: None,
            day_of_week: day,
        };
        // (period, now, start, end)
        let table = [
            (
                monthly(None),
                "2026-11-27T10:00:00Z",
                "2026-11-01T00:00:00Z",
                "2026-12-01T00:00:00Z",
            ),
            (
                monthly(Some(15)),
                "2026-11-27T10:00:00Z",
                "2026-11-15T00:00:00Z",
                "2026-12-15T00:00:00Z",
            ),
            (
                monthly(Some(28)),
                "2026-11-27T23:59:59Z",
                "2026-10-28T00:00:00Z",
                "2026-11-28T00:00:00Z",
            ),
            (
                monthly(Some(28)),
                "2027-03-01T00:00:00Z",
                "2027-02-28T00:00:00Z",
                "2027-03-28T00:00:00Z",
            ),
            (
                monthly(None),
                "2026-12-31T23:00:00Z",
                "2026-12-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
            ),
            // 2026-11-27 is a Friday.
            (
                weekly(None),
                "2026-11-27T10:00:00Z",
                "2026-11-23T00:00:00Z",
                "2026-11-30T00:00:00Z",
            ),
            (
                weekly(Some(Day::Fri)),
                "2026-11-27T00:00:00Z",
                "2026-11-27T00:00:00Z",
                "2026-12-04T00:00:00Z",
            ),
            (
                weekly(Some(Day::Sat)),
                "2026-11-27T10:00:00Z",
                "2026-11-21T00:00:00Z",
                "2026-11-28T00:00:00Z",
            ),
        ];
        for (period, now, start, end) in table {
            assert_eq!(
                period.around(at(now)),
                Ok((at(start), at(end))),
                "{period:?} at {now}"
            );
        }
        assert!(monthly(Some(0)).around(at("2026-11-27T10:00:00Z")).is_err());
    }
}
