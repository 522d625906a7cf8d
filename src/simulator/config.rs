//! Settings of a simulator run: keys, clock, delays, limits and the fault plan.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Everything a simulator run is configured with.
///
/// `Debug` is written by hand so API keys and the admin token never reach a log.
#[derive(Clone)]
pub struct SimulatorConfig {
    /// Accepted values of the `X-API-Key` header for the first account. The first one is
    /// [`crate::SimulatorHandle::api_key`].
    pub api_keys: Vec<String>,
    /// The keys of further accounts, one list per account. Each account has its own resources,
    /// balance and billing behind the same endpoint, clock and fault plan; ids are unique
    /// across accounts, as a real service's are.
    pub other_accounts: Vec<Vec<String>>,
    /// Seed of every random choice (faults, IP addresses), so a run can be replayed.
    pub seed: u64,
    /// Simulated seconds per real second. Billing, balance drain and every state delay run on
    /// the simulated clock.
    pub time_scale: f64,
    /// The moment the simulated clock starts at; the wall clock when `None`.
    pub start: Option<jiff::Timestamp>,
    /// Token bucket per API key; `None` means unlimited.
    pub rate_limit: Option<RateLimit>,
    /// How long intermediate states last (simulated time).
    pub delays: Delays,
    /// Balance of a fresh account, in USD.
    pub initial_balance: f64,
    /// The share of its running hourly rate a machine is billed while `SHUTOFF` (0 to 1).
    pub stopped_rate_fraction: f64,
    /// The share of its running hourly rate a machine is billed while `HIBERNATED` (0 to 1).
    pub hibernated_rate_fraction: f64,
    /// Bearer token of the `/_admin/` API; the admin API is off when `None`.
    pub admin_token: Option<String>,
    /// Faults in force from the start.
    pub faults: FaultPlan,
    /// A resource younger than this is missing from lists; a deleted one stays listed this long.
    pub list_lag: Duration,
    /// Request bodies larger than this are refused with 413.
    pub max_body_bytes: usize,
    /// GPUs of each type available per region.
    pub gpu_capacity_per_region: u32,
    /// Keep a ledger of every call that changed an account
    /// ([`crate::SimulatorHandle::ledger`]). Off by default: it grows with every call.
    pub keep_ledger: bool,
}

/// The share of the running rate a `SHUTOFF` machine is billed by default (the cloud's
/// documents do not say; `docs/cloud-api.md` states it as assumed).
pub const DEFAULT_STOPPED_RATE_FRACTION: f64 = 0.1;

/// The share of the running rate a `HIBERNATED` machine is billed by default.
pub const DEFAULT_HIBERNATED_RATE_FRACTION: f64 = 0.05;

impl Default for SimulatorConfig {
    fn default() -> Self {
        SimulatorConfig {
            api_keys: vec!["sim-key".to_string()],
            other_accounts: Vec::new(),
            seed: 1,
            time_scale: 1.0,
            start: None,
            rate_limit: None,
            delays: Delays::fast(),
            initial_balance: 1000.0,
            stopped_rate_fraction: DEFAULT_STOPPED_RATE_FRACTION,
            hibernated_rate_fraction: DEFAULT_HIBERNATED_RATE_FRACTION,
            admin_token: None,
            faults: FaultPlan::default(),
            list_lag: Duration::ZERO,
            max_body_bytes: 64 * 1024,
            gpu_capacity_per_region: 512,
            keep_ledger: false,
        }
    }
}

impl std::fmt::Debug for SimulatorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatorConfig")
            .field(
                "api_keys",
                &format_args!("[{} redacted]", self.api_keys.len()),
            )
            .field(
                "other_accounts",
                &format_args!("{} accounts, keys redacted", self.other_accounts.len()),
            )
            .field("seed", &self.seed)
            .field("time_scale", &self.time_scale)
            .field("start", &self.start)
            .field("rate_limit", &self.rate_limit)
            .field("delays", &self.delays)
            .field("initial_balance", &self.initial_balance)
            .field("stopped_rate_fraction", &self.stopped_rate_fraction)
            .field("hibernated_rate_fraction", &self.hibernated_rate_fraction)
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<redacted>"),
            )
            .field("faults", &self.faults)
            .field("list_lag", &self.list_lag)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("gpu_capacity_per_region", &self.gpu_capacity_per_region)
            .field("keep_ledger", &self.keep_ledger)
            .finish()
    }
}

/// Requests per second and burst allowed per API key.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: u32,
}

/// Durations of the intermediate states, on the simulated clock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Delays {
    /// `CREATING` of a new instance.
    #[serde(with = "millis")]
    pub create: Duration,
    /// `BOOTING` power state after an instance becomes `ACTIVE`.
    #[serde(with = "millis")]
    pub boot: Duration,
    /// `STOPPING`, `STARTING`, `REBOOTING`, `HIBERNATING` and `DELETING`.
    #[serde(with = "millis")]
    pub power_transition: Duration,
    /// Snapshot `creating`.
    #[serde(with = "millis")]
    pub snapshot: Duration,
    /// Image `creating`.
    #[serde(with = "millis")]
    pub image: Duration,
    /// Volume `creating`.
    #[serde(with = "millis")]
    pub volume: Duration,
}

impl Delays {
    /// Short delays for tests: every state is observable, none slows a test down.
    pub fn fast() -> Self {
        Delays {
            create: Duration::from_millis(100),
            boot: Duration::from_millis(100),
            power_transition: Duration::from_millis(100),
            snapshot: Duration::from_millis(100),
            image: Duration::from_millis(100),
            volume: Duration::from_millis(50),
        }
    }

    /// No intermediate states at all (every transition completes at once).
    pub fn instant() -> Self {
        Delays {
            create: Duration::ZERO,
            boot: Duration::ZERO,
            power_transition: Duration::ZERO,
            snapshot: Duration::ZERO,
            image: Duration::ZERO,
            volume: Duration::ZERO,
        }
    }
}

/// Faults injected into responses. Every random choice is drawn from a generator seeded with
/// the run's seed and the operation, so a given seed yields the same sequence per operation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultPlan {
    /// Added to every API response (`latency_ms` on the wire).
    #[serde(with = "millis", rename = "latency_ms")]
    pub latency: Duration,
    /// Occasional extra latency.
    pub latency_spike: Option<LatencySpike>,
    /// Extra milliseconds for one operation, keyed by operation name. Like all latency it
    /// comes before the operation acts, so a client that gives up sooner sees a timeout for an
    /// operation the cloud still performs afterwards.
    pub latency_ms_per_operation: BTreeMap<String, u64>,
    /// Probability of a 500 `INTERNAL_ERROR` (before acting) for every operation.
    pub error_rate: f64,
    /// Per-operation override of `error_rate`, keyed by operation name (e.g. `CreateInstance`).
    pub error_rate_per_operation: BTreeMap<String, f64>,
    /// Bursts of 429 `RATE_LIMITED` answers.
    pub throttle_burst: Option<ThrottleBurst>,
    /// Probability, per operation name, that the operation is performed and the response lost.
    pub act_then_drop: BTreeMap<String, f64>,
    /// How a response is lost.
    pub drop_mode: DropMode,
    /// Ids every list leaves out although the resource exists (a pagination bug, a lagging
    /// index, a proxy); a read by id still finds them.
    pub omit_from_lists: BTreeSet<String>,
    /// Probability that a list leaves out each of its items, drawn per item from the list
    /// operation's seeded stream.
    pub list_omission_rate: f64,
    /// Creates the cloud carries out long after they arrived, keyed by the start of the new
    /// resource's name (`name`, or `new_vm_name` of a restore), in milliseconds: the first
    /// such request that would otherwise act (no injected 429 or 500) waits that long before
    /// acting. Each entry holds one request over the simulator's life (until a reset), so
    /// setting the plan again does not hold another.
    pub act_late: BTreeMap<String, u64>,
    /// The accounts whose calls the plan's faults apply to, by index (0 is the account of
    /// `api_keys`, then `other_accounts` in order); empty means every account. Calls of the
    /// other accounts get no fault at all, so one account can be in a storm of 429s and 500s
    /// while the rest are served normally.
    pub accounts: Vec<usize>,
}

/// Extra latency added with some probability.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencySpike {
    pub probability: f64,
    #[serde(with = "millis", rename = "extra_ms")]
    pub extra: Duration,
}

/// With probability `probability` per request a burst starts: that request and the next
/// `length - 1` requests are answered 429.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThrottleBurst {
    pub probability: f64,
    pub length: u32,
    pub retry_after_secs: u64,
}

/// How an "act then drop" response is lost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum DropMode {
    /// The connection is closed after the operation without a complete response.
    CloseConnection,
    /// The response is held back this long, past any sensible client timeout.
    Delay {
        #[serde(with = "millis", rename = "delay_ms")]
        delay: Duration,
    },
}

/// Holding the response back a minute: the client times out, as with a lost response.
impl Default for DropMode {
    fn default() -> Self {
        DropMode::Delay {
            delay: Duration::from_secs(60),
        }
    }
}

impl FaultPlan {
    /// Error probability of one operation.
    pub fn error_rate_for(&self, operation: &str) -> f64 {
        self.error_rate_per_operation
            .get(operation)
            .copied()
            .unwrap_or(self.error_rate)
    }

    /// Whether the plan's faults apply to the calls of account `account`.
    pub fn applies_to(&self, account: usize) -> bool {
        self.accounts.is_empty() || self.accounts.contains(&account)
    }

    /// Checks that every account the plan targets is one of the `accounts` the simulator
    /// serves (a plan naming no account that exists would inject nothing, silently).
    pub fn validate_accounts(&self, accounts: usize) -> Result<(), String> {
        match self.accounts.iter().find(|&&account| account >= accounts) {
            Some(account) => Err(format!(
                "accounts: there is no account {account} (the simulator serves accounts 0 to {})",
                accounts.saturating_sub(1)
            )),
            None => Ok(()),
        }
    }

    /// Checks every probability is within 0..=1 and every name is an operation.
    pub fn validate(&self) -> Result<(), String> {
        let known = |name: &str| {
            gpucloud_cloud::routes::Operation::ALL
                .iter()
                .any(|op| op.name() == name)
        };
        let check = |what: &str, p: f64| {
            if (0.0..=1.0).contains(&p) {
                Ok(())
            } else {
                Err(format!("{what}: probability {p} is outside 0..=1"))
            }
        };
        check("error_rate", self.error_rate)?;
        check("list_omission_rate", self.list_omission_rate)?;
        for (name, p) in self
            .error_rate_per_operation
            .iter()
            .map(|(n, p)| (n, *p))
            .chain(self.act_then_drop.iter().map(|(n, p)| (n, *p)))
        {
            if !known(name) {
                return Err(format!("unknown operation name {name:?}"));
            }
            check(name, p)?;
        }
        if let Some(name) = self.latency_ms_per_operation.keys().find(|n| !known(n)) {
            return Err(format!("unknown operation name {name:?}"));
        }
        if self.act_late.keys().any(String::is_empty) {
            return Err("act_late: an empty name prefix would hold any create".to_string());
        }
        if let Some(spike) = self.latency_spike {
            check("latency_spike.probability", spike.probability)?;
        }
        if let Some(burst) = self.throttle_burst {
            check("throttle_burst.probability", burst.probability)?;
            if burst.length == 0 {
                return Err("throttle_burst.length must be at least 1".to_string());
            }
        }
        Ok(())
    }
}

/// Durations on the wire as whole milliseconds.
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}
