//! The account's state and every rule of the service, as plain synchronous code.
//!
//! Every method takes the simulated time `now` (milliseconds since the Unix epoch), so the
//! rules are tested without sleeping. Intermediate states are stored with the time they end
//! and settled lazily by [`Engine::settle`] at the start of each call; billing is a closed
//! form over each billed resource's start, end and rate changes, so no background task
//! exists. An instance's rate changes at the moment it settles into `SHUTOFF`, `HIBERNATED`
//! or `ACTIVE`, so a read of a cost settles first, as every other call does.

mod account;
mod accrual;
mod images;
mod instances;
mod network;
mod snapshots;
mod volumes;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gpucloud_cloud::model::{self, Tier};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::config::{Delays, SimulatorConfig};
use crate::error::ApiError;

pub use account::{AiUsage, MAX_SCRIPT_BYTES, Script, SshKeyRecord};
use accrual::Accrual;
pub use images::Image;
pub use instances::{Instance, InstanceState, PowerAction};
pub use network::{Firewall, validate_rule};
pub use snapshots::Snapshot;
pub use volumes::{
    MAX_VOLUME_GB, VOLUME_BILLING_STATUSES, Volume, VolumeBillingFilters, VolumeFilters,
};

/// Simulated time: milliseconds since the Unix epoch.
pub type SimTime = i64;

/// Result of an engine call.
pub type ApiResult<T> = Result<T, ApiError>;

/// The settings the engine's rules depend on.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    pub delays: Delays,
    pub initial_balance: f64,
    /// The share of its running rate a machine is billed while `SHUTOFF`.
    pub stopped_rate_fraction: f64,
    /// The share of its running rate a machine is billed while `HIBERNATED`.
    pub hibernated_rate_fraction: f64,
    pub list_lag: Duration,
    pub gpu_capacity_per_region: u32,
    pub seed: u64,
    /// Where the account's id counter starts: the accounts of one simulator start far apart,
    /// so an id names a resource of one account only.
    pub first_id: u64,
}

/// How far apart the id counters of two accounts start.
const IDS_PER_ACCOUNT: u64 = 1 << 40;

impl EngineSettings {
    pub fn from_config(config: &SimulatorConfig) -> Self {
        Self::for_account(config, 0)
    }

    /// The settings of the account `account` (0 is the first, that of `api_keys`).
    pub fn for_account(config: &SimulatorConfig, account: usize) -> Self {
        let account = account as u64;
        EngineSettings {
            delays: config.delays,
            initial_balance: config.initial_balance,
            stopped_rate_fraction: config.stopped_rate_fraction,
            hibernated_rate_fraction: config.hibernated_rate_fraction,
            list_lag: config.list_lag,
            gpu_capacity_per_region: config.gpu_capacity_per_region,
            seed: config.seed.wrapping_add(account),
            first_id: account.saturating_mul(IDS_PER_ACCOUNT),
        }
    }
}

/// An interval during which a resource is billed, at an hourly rate that may change over
/// time (an instance's power state, a volume's size).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BillingSpan {
    pub start: SimTime,
    pub end: Option<SimTime>,
    /// The rate from `start`, then each change: never empty, in time order, the first entry
    /// at `start`.
    rates: Vec<RateChange>,
}

/// The hourly rate billed from `from` until the next change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
struct RateChange {
    from: SimTime,
    hourly_rate: f64,
}

impl BillingSpan {
    /// A span billed from `start`, counted in `accrual` from then on.
    fn open(start: SimTime, hourly_rate: f64, accrual: &mut Accrual) -> Self {
        let span = BillingSpan {
            start,
            end: None,
            rates: vec![RateChange {
                from: start,
                hourly_rate,
            }],
        };
        accrual.add(&span);
        span
    }

    /// The rate billed at `at` (the first rate before the span starts, the last one after it
    /// ends).
    pub fn rate_at(&self, at: SimTime) -> f64 {
        self.rates
            .iter()
            .take_while(|change| change.from <= at)
            .last()
            .or(self.rates.first())
            .map_or(0.0, |change| change.hourly_rate)
    }

    /// Bills `hourly_rate` from `at` on. Changes are recorded in time order: one earlier than
    /// the last change takes effect with it, and a change at the same moment replaces it.
    fn change_rate(&mut self, at: SimTime, hourly_rate: f64, accrual: &mut Accrual) {
        accrual.remove(self);
        self.record_rate(at, hourly_rate);
        accrual.add(self);
    }

    fn record_rate(&mut self, at: SimTime, hourly_rate: f64) {
        let Some(last) = self.rates.last_mut() else {
            self.rates.push(RateChange {
                from: self.start.max(at),
                hourly_rate,
            });
            return;
        };
        if at <= last.from {
            last.hourly_rate = hourly_rate;
            // A change back to the rate before it is no change at all.
            let len = self.rates.len();
            if len >= 2 && self.rates[len - 2].hourly_rate == hourly_rate {
                self.rates.pop();
            }
        } else if last.hourly_rate != hourly_rate {
            self.rates.push(RateChange {
                from: at,
                hourly_rate,
            });
        }
    }

    /// Each rate with the part of the span it is billed over, `until` being `SimTime::MAX`
    /// for the last rate of a span still open: what [`Self::cost_between`] and the account's
    /// [`Accrual`] both sum.
    fn segments(&self) -> impl Iterator<Item = (SimTime, SimTime, f64)> + '_ {
        let end = self.end.unwrap_or(SimTime::MAX);
        let untils = self
            .rates
            .iter()
            .skip(1)
            .map(|next| next.from)
            .chain(std::iter::once(SimTime::MAX));
        self.rates
            .iter()
            .zip(untils)
            .map(move |(change, until)| {
                (
                    change.from.max(self.start),
                    until.min(end),
                    change.hourly_rate,
                )
            })
            .filter(|(from, until, _)| until > from)
    }

    /// Cost accrued inside `[from, to]`: each rate times the part of its interval inside the
    /// window and the span.
    pub fn cost_between(&self, from: SimTime, to: SimTime) -> f64 {
        self.segments()
            .map(|(a, b, rate)| {
                let (a, b) = (a.max(from), b.min(to));
                if b > a { hours(b - a) * rate } else { 0.0 }
            })
            .sum()
    }

    /// Whole minutes billed up to `now`.
    pub fn minutes(&self, now: SimTime) -> u64 {
        let end = self.end.map_or(now, |end| end.min(now));
        u64::try_from((end - self.start).max(0) / 60_000).unwrap_or(0)
    }

    /// Cost of the whole minutes billed up to `now`, each at the rate in force then.
    pub fn cost_of_whole_minutes(&self, now: SimTime) -> f64 {
        let minutes = i64::try_from(self.minutes(now)).unwrap_or(i64::MAX / 120_000);
        self.cost_between(self.start, self.start + minutes * 60_000)
    }

    /// Ends the span at `at`, unless it already ended earlier.
    fn close(&mut self, at: SimTime, accrual: &mut Accrual) {
        accrual.remove(self);
        self.end = Some(self.end.map_or(at, |end| end.min(at)));
        accrual.add(self);
    }
}

const MILLIS_PER_HOUR: f64 = 3_600_000.0;

fn hours(millis: i64) -> f64 {
    millis as f64 / MILLIS_PER_HOUR
}

/// The whole account.
#[derive(Debug)]
pub struct Engine {
    settings: EngineSettings,
    next_id: u64,
    rng: StdRng,
    /// Balance when it was last set; what `accrual` counts since is subtracted on read.
    balance_anchor: f64,
    accrual: Accrual,
    instances: BTreeMap<String, Instance>,
    /// Instances with a pending transition, by when it is due: `settle` visits only these, so
    /// a call costs the same however many instances the account has had.
    transitions: BTreeSet<(SimTime, String)>,
    volumes: BTreeMap<String, Volume>,
    /// The data volumes attached to each instance, as their `instance_id` says (kept by
    /// `set_attachment`): a machine's delete or read visits its own volumes, not every one.
    data_volumes_of: BTreeMap<String, BTreeSet<String>>,
    snapshots: BTreeMap<String, Snapshot>,
    images: BTreeMap<String, Image>,
    firewalls: BTreeMap<String, Firewall>,
    ssh_keys: BTreeMap<String, SshKeyRecord>,
    scripts: BTreeMap<String, Script>,
    ai_usage: Vec<AiUsage>,
    /// GPUs of a type a region holds in all (in use or free), by (GPU type, region), where set
    /// apart from `gpu_capacity_per_region` (the admin API's stock).
    gpu_capacity: BTreeMap<(String, String), u32>,
    /// Prices per GPU-hour set apart from the catalog's, by GPU type (the admin API's prices).
    gpu_prices: BTreeMap<String, f64>,
}

// === impl Engine: core ===

impl Engine {
    pub fn new(settings: EngineSettings, now: SimTime) -> Self {
        Engine {
            rng: StdRng::seed_from_u64(settings.seed),
            balance_anchor: settings.initial_balance,
            accrual: Accrual::new(now),
            next_id: settings.first_id,
            settings,
            instances: BTreeMap::new(),
            transitions: BTreeSet::new(),
            volumes: BTreeMap::new(),
            data_volumes_of: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            images: BTreeMap::new(),
            firewalls: BTreeMap::new(),
            ssh_keys: BTreeMap::new(),
            scripts: BTreeMap::new(),
            ai_usage: Vec::new(),
            gpu_capacity: BTreeMap::new(),
            gpu_prices: BTreeMap::new(),
        }
    }

    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    /// Empties the account and restores the initial balance. The id counter keeps going, so
    /// an id from before the reset never names a new resource.
    pub fn reset(&mut self, now: SimTime) {
        let next_id = self.next_id;
        *self = Engine::new(self.settings.clone(), now);
        self.next_id = next_id;
    }

    /// A new opaque id: a prefix and a zero-padded counter, so ids sort by creation order.
    fn new_id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{:012x}", self.next_id)
    }

    fn delay(duration: Duration) -> i64 {
        i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
    }

    fn list_lag(&self) -> i64 {
        Self::delay(self.settings.list_lag)
    }

    /// Whether a resource shows in lists at `now`: lists lag behind writes by `list_lag`.
    fn listed(&self, created_at: SimTime, deleted_at: Option<SimTime>, now: SimTime) -> bool {
        let lag = self.list_lag();
        created_at + lag <= now && deleted_at.is_none_or(|deleted| now < deleted + lag)
    }

    /// Applies every intermediate state whose end has passed.
    pub fn settle(&mut self, now: SimTime) {
        while self.transitions.first().is_some_and(|(at, _)| *at <= now) {
            let Some((_, id)) = self.transitions.pop_first() else {
                break;
            };
            let Some(instance) = self.instances.get_mut(&id) else {
                continue;
            };
            instance.settle(now, &self.settings, &mut self.accrual);
            // A boot volume goes when its instance is gone.
            if instance.state == InstanceState::Deleted
                && let Some(boot) = &instance.boot_volume_id
                && let Some(volume) = self.volumes.get_mut(boot)
                && volume.deleted_at.is_none()
            {
                volume.deleted_at = instance.deleted_at;
            }
        }
        for snapshot in self.snapshots.values_mut() {
            snapshot.settle(now);
        }
        for image in self.images.values_mut() {
            image.settle(now);
        }
    }

    // --- Balance ---

    /// Every billing span of the account, deleted resources included.
    #[cfg(debug_assertions)]
    fn billing_spans(&self) -> impl Iterator<Item = &BillingSpan> {
        self.instances
            .values()
            .map(|i| &i.billing)
            .chain(self.volumes.values().map(|v| &v.billing))
            .chain(self.snapshots.values().map(|s| &s.billing))
            .chain(self.images.values().map(|i| &i.billing))
    }

    /// The balance at `now`: the anchor minus everything accrued since the anchor.
    pub fn balance(&self, now: SimTime) -> f64 {
        let accrued = self.accrual.accrued(now);
        #[cfg(debug_assertions)]
        {
            // Span by span, as each resource's billing reads it: the accrual must agree.
            let since = self.accrual.since();
            let exact: f64 = self
                .billing_spans()
                .map(|span| span.cost_between(since, now))
                .sum();
            debug_assert!(
                (exact - accrued).abs() <= 1e-9 * (1.0 + exact.abs()),
                "accrued {accrued} against {exact} span by span"
            );
        }
        self.balance_anchor - accrued
    }

    pub fn set_balance(&mut self, balance: f64, now: SimTime) {
        self.balance_anchor = balance;
        self.accrual.restart(now);
    }

    /// A one-off charge (AI chat).
    fn charge(&mut self, amount: f64) {
        self.balance_anchor -= amount;
    }

    /// Refuses a billed create once the balance is spent.
    fn require_credit(&self, now: SimTime) -> ApiResult<()> {
        let balance = self.balance(now);
        if balance <= 0.0 {
            return Err(ApiError::InsufficientCredit {
                message: format!(
                    "insufficient credit: balance is {balance:.2} {}",
                    crate::catalog::CURRENCY
                ),
            });
        }
        Ok(())
    }

    /// A public IPv4 address from the documentation range (RFC 5737), drawn from the seeded
    /// generator.
    fn new_ip_address(&mut self) -> String {
        let host: u8 = self.rng.random_range(1..=254);
        let net = ["192.0.2", "198.51.100", "203.0.113"][self.rng.random_range(0..3usize)];
        format!("{net}.{host}")
    }

    /// Everything in the account, as the admin API and [`crate::SimulatorHandle::state`]
    /// show it.
    pub fn holdings(&self, now: SimTime) -> AccountHoldings {
        AccountHoldings {
            instances: self.instances.values().filter(|i| i.is_live(now)).count(),
            volumes: self
                .volumes
                .values()
                .filter(|v| v.deleted_at.is_none())
                .count(),
            snapshots: self
                .snapshots
                .values()
                .filter(|s| s.deleted_at.is_none())
                .count(),
            images: self
                .images
                .values()
                .filter(|i| i.deleted_at.is_none())
                .count(),
            firewalls: self
                .firewalls
                .values()
                .filter(|f| f.deleted_at.is_none())
                .count(),
            ssh_keys: self
                .ssh_keys
                .values()
                .filter(|k| k.deleted_at.is_none())
                .count(),
            scripts: self
                .scripts
                .values()
                .filter(|s| s.deleted_at.is_none())
                .count(),
        }
    }

    pub fn snapshot_account(&self, now: SimTime) -> AccountSnapshot {
        let boot = self.settings.delays.boot;
        AccountSnapshot {
            now: format_time(now),
            balance: self.balance(now),
            currency: crate::catalog::CURRENCY.to_string(),
            instances: self
                .instances
                .values()
                .filter(|i| i.is_live(now))
                .map(|i| i.view(now, boot))
                .collect(),
            volumes: self
                .volumes
                .values()
                .filter(|v| v.deleted_at.is_none())
                .map(|v| self.volume_view(v, now))
                .collect(),
            snapshots: self
                .snapshots
                .values()
                .filter(|s| s.deleted_at.is_none())
                .map(Snapshot::view)
                .collect(),
            deleted_snapshot_ids: self
                .snapshots
                .values()
                .filter(|s| s.deleted_at.is_some())
                .map(|s| s.id.clone())
                .collect(),
            images: self
                .images
                .values()
                .filter(|i| i.deleted_at.is_none())
                .map(Image::view)
                .collect(),
            firewalls: self
                .firewalls
                .values()
                .filter(|f| f.deleted_at.is_none())
                .map(|f| self.firewall_view(f, now))
                .collect(),
            ssh_keys: self
                .ssh_keys
                .values()
                .filter(|k| k.deleted_at.is_none())
                .map(SshKeyRecord::view)
                .collect(),
            scripts: self
                .scripts
                .values()
                .filter(|s| s.deleted_at.is_none())
                .map(Script::view)
                .collect(),
            instance_billing: self.instance_billing(None, now).records,
            volume_billing: self.volume_billing_records(now),
            snapshot_billing: self.snapshot_billing(None, now).records,
            ai_usage: self.ai_usage.iter().map(AiUsage::view).collect(),
        }
    }
}

/// How many resources of each kind the account holds at one moment: what
/// [`Engine::snapshot_account`] lists, counted without writing a record of each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AccountHoldings {
    pub instances: usize,
    /// Data and boot volumes.
    pub volumes: usize,
    pub snapshots: usize,
    pub images: usize,
    pub firewalls: usize,
    pub ssh_keys: usize,
    pub scripts: usize,
}

/// Everything in the account at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct AccountSnapshot {
    pub now: String,
    pub balance: f64,
    pub currency: String,
    pub instances: Vec<model::Instance>,
    pub volumes: Vec<model::Volume>,
    pub snapshots: Vec<model::Snapshot>,
    /// Snapshots deleted (kept so a repeated delete succeeds).
    pub deleted_snapshot_ids: Vec<String>,
    pub images: Vec<model::Image>,
    pub firewalls: Vec<model::Firewall>,
    pub ssh_keys: Vec<model::SshKey>,
    pub scripts: Vec<model::StartupScript>,
    pub instance_billing: Vec<model::InstanceBillingRecord>,
    pub volume_billing: Vec<model::VolumeBillingRecord>,
    pub snapshot_billing: Vec<model::SnapshotBillingRecord>,
    pub ai_usage: Vec<model::AiUsageRecord>,
}

// === Shared validation and formatting ===

/// ISO 8601 UTC with `Z`, second precision.
pub fn format_time(at: SimTime) -> String {
    jiff::Timestamp::from_millisecond(at)
        .map(|ts| ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// ISO 8601 without a zone suffix, as volume billing records show times.
pub fn format_time_without_zone(at: SimTime) -> String {
    jiff::Timestamp::from_millisecond(at)
        .map(|ts| ts.strftime("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_default()
}

/// Names: 1..=63 characters of `[A-Za-z0-9._-]`.
pub fn validate_name(field: &str, value: &str) -> ApiResult<()> {
    if value.is_empty() {
        return Err(ApiError::validation(format!("{field}: must not be empty")));
    }
    if value.chars().count() > 63 {
        return Err(ApiError::validation(format!(
            "{field}: at most 63 characters allowed"
        )));
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(ApiError::validation(format!(
            "{field}: character {bad:?} is not allowed (use A-Z, a-z, 0-9, '.', '_', '-')"
        )));
    }
    Ok(())
}

/// The catalog's GPU type `id`; an unknown one is refused, naming the known ones.
pub fn known_gpu_type(field: &str, id: &str) -> ApiResult<&'static crate::catalog::GpuType> {
    crate::catalog::gpu_type(id).ok_or_else(|| {
        ApiError::validation(format!(
            "{field}: unknown GPU type {id:?} (known: {})",
            crate::catalog::GPU_TYPES
                .iter()
                .map(|g| g.id)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

pub fn validate_region(field: &str, region: &str) -> ApiResult<()> {
    if crate::catalog::is_region(region) {
        Ok(())
    } else {
        Err(ApiError::validation(format!(
            "{field}: unknown region {region:?} (known: {})",
            crate::catalog::REGIONS
                .iter()
                .map(|(id, _)| *id)
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

/// A tier from a request, `advanced` when absent; unknown values are refused.
pub fn validate_tier(field: &str, tier: Option<&Tier>) -> ApiResult<Tier> {
    match tier {
        None => Ok(Tier::Advanced),
        Some(tier) if tier.is_known() => Ok(tier.clone()),
        Some(other) => Err(ApiError::validation(format!(
            "{field}: unknown tier {:?} (known: legacy, advanced)",
            other.as_str()
        ))),
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub const T0: SimTime = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    pub fn settings() -> EngineSettings {
        EngineSettings {
            delays: Delays {
                create: Duration::from_secs(10),
                boot: Duration::from_secs(5),
                power_transition: Duration::from_secs(3),
                snapshot: Duration::from_secs(20),
                image: Duration::from_secs(15),
                volume: Duration::from_secs(2),
            },
            initial_balance: 100.0,
            stopped_rate_fraction: 0.1,
            hibernated_rate_fraction: 0.05,
            list_lag: Duration::ZERO,
            gpu_capacity_per_region: 16,
            seed: 7,
            first_id: 0,
        }
    }

    pub fn engine() -> Engine {
        Engine::new(settings(), T0)
    }

    pub fn secs(s: i64) -> SimTime {
        T0 + s * 1000
    }

    /// A request for an instance named `name` of `tier`: two A100-80G in us-east-1.
    pub fn create_request(name: &str, tier: Tier) -> model::CreateInstanceRequest {
        model::CreateInstanceRequest {
            tier: Some(tier),
            ..model::CreateInstanceRequest::new(
                name,
                "us-east-1",
                "A100-80G",
                2,
                "ubuntu-22.04-cuda-12",
            )
        }
    }

    /// A new instance of `tier` (one L40S in us-east-1) created at `secs(0)`; its id.
    pub fn instance(engine: &mut Engine, tier: Tier) -> String {
        let request = model::CreateInstanceRequest {
            gpu_type: "L40S".to_string(),
            gpu_count: 1,
            ..create_request("vm", tier)
        };
        engine
            .create_instance(&request, secs(0))
            .unwrap()
            .instance_id
    }

    pub fn snapshot_request(name: &str) -> model::CreateSnapshotRequest {
        model::CreateSnapshotRequest {
            name: name.to_string(),
            description: "d".to_string(),
            labels: vec!["nightly".to_string()],
        }
    }

    pub fn volume_request(name: &str, region: &str, tier: Tier) -> model::CreateVolumeRequest {
        model::CreateVolumeRequest {
            tier: Some(tier),
            ..model::CreateVolumeRequest::new(name, 100, region)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[test]
    fn names_follow_the_rules() {
        assert!(validate_name("name", "ok-name_1.2").is_ok());
        for bad in ["", "has space", "ünicode", &"x".repeat(64)] {
            let err = validate_name("name", bad).unwrap_err();
            assert_eq!(err.code(), "VALIDATION_ERROR");
            assert!(err.to_string().starts_with("name:"), "{err}");
        }
        assert!(validate_name("name", &"x".repeat(63)).is_ok());
    }

    #[test]
    fn billing_span_costs_only_inside_the_window() {
        let mut accrual = Accrual::new(secs(0));
        let mut span = BillingSpan::open(secs(0), 2.0, &mut accrual);
        span.close(secs(7200), &mut accrual);
        assert!((span.cost_between(secs(0), secs(3600)) - 2.0).abs() < 1e-9);
        assert!((span.cost_between(secs(3600), secs(99_999)) - 2.0).abs() < 1e-9);
        assert_eq!(span.cost_between(secs(8000), secs(9000)), 0.0);
        assert_eq!(span.minutes(secs(90)), 1);
        assert_eq!(span.minutes(secs(99_999)), 120);
    }

    #[test]
    fn billing_span_integrates_across_rate_changes() {
        // 2/h for an hour, 0.2/h for two hours, 2/h for an hour, then ended.
        let mut accrual = Accrual::new(secs(0));
        let mut span = BillingSpan::open(secs(0), 2.0, &mut accrual);
        span.change_rate(secs(3600), 0.2, &mut accrual);
        span.change_rate(secs(10_800), 2.0, &mut accrual);
        span.close(secs(14_400), &mut accrual);
        let cases = [
            // (from, to, expected cost)
            (0, 3600, 2.0),
            (3600, 10_800, 0.4),
            (0, 14_400, 2.0 + 0.4 + 2.0),
            (1800, 12_600, 1.0 + 0.4 + 1.0),
            (5400, 7200, 0.1),
            (-3600, 99_999, 4.4),
            (14_400, 20_000, 0.0),
            (7200, 3600, 0.0),
        ];
        for (from, to, expected) in cases {
            let cost = span.cost_between(secs(from), secs(to));
            assert!(
                (cost - expected).abs() < 1e-9,
                "[{from}, {to}]: {cost} instead of {expected}"
            );
            // The account's accrual, counted from `from`, says the same.
            let mut counted = accrual.clone();
            counted.restart(secs(from));
            let accrued = counted.accrued(secs(to));
            assert!(
                (accrued - expected).abs() < 1e-9,
                "[{from}, {to}]: accrued {accrued} instead of {expected}"
            );
        }
        // Any split of a window costs what the window costs.
        for cut in [0, 1, 3599, 3600, 3601, 7200, 10_800, 14_399] {
            let whole = span.cost_between(secs(0), secs(14_400));
            let parts =
                span.cost_between(secs(0), secs(cut)) + span.cost_between(secs(cut), secs(14_400));
            assert!((whole - parts).abs() < 1e-9, "cut at {cut}");
        }
        for (at, rate) in [(-1, 2.0), (0, 2.0), (3599, 2.0), (3600, 0.2), (10_800, 2.0)] {
            assert_eq!(span.rate_at(secs(at)), rate, "rate at {at}");
        }
        assert_eq!(span.minutes(secs(99_999)), 240);
        assert!((span.cost_of_whole_minutes(secs(99_999)) - 4.4).abs() < 1e-9);
    }

    #[test]
    fn billing_span_records_changes_in_time_order() {
        let mut accrual = Accrual::new(secs(0));
        let mut span = BillingSpan::open(secs(0), 1.0, &mut accrual);
        // The same rate again is no change; a change at the start replaces the first rate.
        span.change_rate(secs(10), 1.0, &mut accrual);
        span.change_rate(secs(0), 3.0, &mut accrual);
        assert_eq!(span.rates.len(), 1);
        assert_eq!(span.rate_at(secs(5)), 3.0);
        // Two changes at one instant: the later one holds, and going back to the rate before
        // leaves no trace.
        span.change_rate(secs(60), 0.5, &mut accrual);
        span.change_rate(secs(60), 3.0, &mut accrual);
        assert_eq!(span.rates.len(), 1);
        span.change_rate(secs(60), 0.5, &mut accrual);
        span.change_rate(secs(60), 0.25, &mut accrual);
        assert_eq!(span.rates.len(), 2);
        assert_eq!(span.rate_at(secs(60)), 0.25);
        assert!((span.cost_between(secs(0), secs(3660)) - (3.0 / 60.0 + 0.25)).abs() < 1e-9);
    }

    #[test]
    fn the_accrual_sums_every_span_however_it_changed() {
        let mut accrual = Accrual::new(secs(0));
        let mut spans = [
            BillingSpan::open(secs(0), 2.0, &mut accrual),
            BillingSpan::open(secs(600), 1.5, &mut accrual),
            BillingSpan::open(secs(1200), 4.0, &mut accrual),
        ];
        spans[0].change_rate(secs(1800), 0.2, &mut accrual);
        // Ends later than the moments read below: a machine still being deleted.
        spans[1].close(secs(5400), &mut accrual);
        spans[2].close(secs(2400), &mut accrual);
        // A change before the last one takes effect with it; an earlier end wins.
        spans[0].change_rate(secs(1700), 0.4, &mut accrual);
        spans[1].close(secs(4000), &mut accrual);
        let exact = |accrual: &Accrual, now: i64| -> f64 {
            spans
                .iter()
                .map(|span| span.cost_between(accrual.since(), secs(now)))
                .sum()
        };
        for since in [0, 900, 3000] {
            let mut counted = accrual.clone();
            counted.restart(secs(since));
            for now in [0, 300, 1200, 1800, 2400, 3599, 4000, 5400, 9000] {
                let (accrued, expected) = (counted.accrued(secs(now)), exact(&counted, now));
                assert!(
                    (accrued - expected).abs() < 1e-9,
                    "from {since} to {now}: {accrued} instead of {expected}"
                );
            }
        }
    }

    #[test]
    fn set_balance_re_anchors_the_drain() {
        let mut engine = engine();
        engine.set_balance(50.0, secs(100));
        assert_eq!(engine.balance(secs(100)), 50.0);
        let before = engine.new_id("vm");
        engine.reset(secs(200));
        assert_eq!(engine.balance(secs(300)), 100.0);
        assert!(
            engine.new_id("vm") > before,
            "ids are not reused after a reset"
        );
    }

    #[test]
    fn times_are_formatted_with_and_without_zone() {
        assert_eq!(format_time(T0), "2026-01-01T00:00:00Z");
        assert_eq!(format_time_without_zone(T0 + 61_000), "2026-01-01T00:01:01");
    }
}
