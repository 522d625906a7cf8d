//! In-memory simulator of the Cloud GPU Compute Service API.
//!
//! [`Simulator::start`] serves every operation of the shared route table
//! (`gpucloud_cloud::routes::Operation::ALL`) over HTTP with the response shapes of
//! `gpucloud_cloud::model`, so the client and the simulator cannot disagree on the wire.
//! The rules live in [`engine`]; [`handlers`] holds one function per operation; [`server`]
//! routes a request through [`auth`], the rate limit, [`faults`] and its handler to a
//! [`reply`]; [`state`] is what the server shares; the admin API is [`admin`].
//! `docs/simulator.md` describes the behaviour, every setting and every choice the interface
//! document leaves open.

pub mod admin;
pub mod auth;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod counters;
pub mod engine;
pub mod error;
mod fallbacks;
pub mod faults;
pub mod handlers;
pub mod openapi;
mod rate_limiter;
pub mod reply;
pub mod request;
pub mod server;
pub mod state;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use config::{
    Delays, DropMode, FaultPlan, LatencySpike, RateLimit, SimulatorConfig, ThrottleBurst,
};
pub use counters::Counters;
pub use engine::AccountSnapshot;
pub use error::{ApiError, Error};
pub use faults::FaultCounts;
pub use state::{Caller, LedgerEntry};

/// Starts simulators.
pub struct Simulator;

impl Simulator {
    /// Validates the configuration, binds `listen` and serves until the handle shuts down.
    pub async fn start(
        config: SimulatorConfig,
        listen: SocketAddr,
    ) -> Result<SimulatorHandle, Error> {
        validate(&config)?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| Error::Bind {
                addr: listen,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| Error::Bind {
            addr: listen,
            source,
        })?;
        tracing::info!(
            %local,
            seed = config.seed,
            time_scale = config.time_scale,
            accounts = 1 + config.other_accounts.len(),
            "simulator listening"
        );
        let api_key = config.api_keys.first().cloned().unwrap_or_default();
        let state = Arc::new(state::AppState::new(config));
        let app = server::router(state.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        // TCP_NODELAY, as the embedded API server sets it (`gpucloud_apiserver`'s tls.rs): a
        // reply's last small segment goes out at once instead of waiting for the client's
        // delayed acknowledgement.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            if let Err(error) = tcp.set_nodelay(true) {
                tracing::debug!(%error, "TCP_NODELAY not set");
            }
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .map_err(Error::Serve)
        });
        Ok(SimulatorHandle {
            base_url: format!("http://{local}"),
            local_addr: local,
            api_key,
            state,
            stop: Some(stop),
            task,
        })
    }
}

fn validate(config: &SimulatorConfig) -> Result<(), Error> {
    let invalid = |message: &str| Err(Error::Config(message.to_string()));
    let accounts = || std::iter::once(&config.api_keys).chain(&config.other_accounts);
    if accounts().any(|keys| keys.is_empty() || keys.iter().any(|key| key.trim().is_empty())) {
        return invalid("every account needs at least one API key and keys must not be empty");
    }
    let keys: Vec<&String> = accounts().flatten().collect();
    let distinct: std::collections::BTreeSet<&String> = keys.iter().copied().collect();
    if distinct.len() != keys.len() {
        return invalid("an API key may be given once: it opens one account");
    }
    if !(config.time_scale.is_finite() && config.time_scale > 0.0 && config.time_scale <= 1e6) {
        return invalid("time_scale must be a positive number of at most 1000000");
    }
    if let Some(limit) = config.rate_limit
        && !(limit.per_second.is_finite() && limit.per_second > 0.0 && limit.burst >= 1)
    {
        return invalid("rate limit needs a positive rate and a burst of at least 1");
    }
    if !config.initial_balance.is_finite() {
        return invalid("initial_balance must be a finite number");
    }
    for (setting, fraction) in [
        ("stopped_rate_fraction", config.stopped_rate_fraction),
        ("hibernated_rate_fraction", config.hibernated_rate_fraction),
    ] {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Error::Config(format!(
                "{setting} must be between 0 and 1 (the share of a machine's running hourly rate it is billed while off), not {fraction}"
            )));
        }
    }
    if let Some(token) = &config.admin_token {
        if token.trim().is_empty() {
            return invalid("the admin token must not be empty");
        }
        if accounts().flatten().any(|key| key == token) {
            return invalid("the admin token must differ from every API key");
        }
    }
    if config.max_body_bytes == 0 {
        return invalid("max_body_bytes must be at least 1");
    }
    config.faults.validate().map_err(Error::Config)?;
    config
        .faults
        .validate_accounts(1 + config.other_accounts.len())
        .map_err(Error::Config)
}

/// A running simulator.
pub struct SimulatorHandle {
    base_url: String,
    local_addr: SocketAddr,
    api_key: String,
    state: Arc<state::AppState>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), Error>>,
}

impl std::fmt::Debug for SimulatorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatorHandle")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl SimulatorHandle {
    /// The API root, e.g. `http://127.0.0.1:41234`.
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The first accepted API key.
    pub fn api_key(&self) -> &str {
        &self.api_key
    }

    /// Everything in the first account, at the simulated now.
    pub fn state(&self) -> AccountSnapshot {
        self.state.with_engine(|engine, now| {
            engine.settle(now);
            engine.snapshot_account(now)
        })
    }

    /// Everything in account `account` (0 is the first, then `other_accounts` in order), at
    /// the simulated now; `None` when there is no such account.
    pub fn account_state(&self, account: usize) -> Option<AccountSnapshot> {
        self.state.with_account(account, |engine, now| {
            engine.settle(now);
            engine.snapshot_account(now)
        })
    }

    /// Every call that changed an account so far, in the order the cloud carried them out;
    /// empty unless `keep_ledger` is set.
    pub fn ledger(&self) -> Vec<LedgerEntry> {
        self.state.ledger()
    }

    /// Requests per operation name (every status, faults included).
    pub fn call_counts(&self) -> BTreeMap<String, u64> {
        self.state.counters().totals()
    }

    /// Requests per operation name and status code, plus unmatched requests.
    pub fn counters(&self) -> Counters {
        self.state.counters()
    }

    /// Faults injected so far, by kind (cleared by [`SimulatorHandle::reset`]).
    pub fn fault_counts(&self) -> FaultCounts {
        self.state.fault_counts()
    }

    /// Replaces the fault plan; every operation's random stream starts again from the seed.
    pub fn set_faults(&self, plan: FaultPlan) {
        self.state.set_faults(plan);
    }

    /// Sets the first account's balance.
    pub fn set_balance(&self, balance: f64) {
        self.state
            .with_engine(|engine, now| engine.set_balance(balance, now));
    }

    /// Sets how many GPUs of a type are free in a region from now on, in every account; an
    /// unknown type or region is refused as the admin API refuses it.
    pub fn set_gpu_stock(
        &self,
        gpu_type: &str,
        region: &str,
        available: u32,
    ) -> Result<(), crate::error::ApiError> {
        self.state.set_gpu_stock(gpu_type, region, available)
    }

    /// Sets the price per GPU-hour of a type from now on, in every account.
    pub fn set_gpu_price(
        &self,
        gpu_type: &str,
        price_per_gpu_hour: f64,
    ) -> Result<(), crate::error::ApiError> {
        self.state.set_gpu_price(gpu_type, price_per_gpu_hour)
    }

    /// The simulated clock's now (to the millisecond).
    pub fn now(&self) -> jiff::Timestamp {
        self.state.clock.timestamp()
    }

    /// Moves the simulated clock forward: billing accrues, pending states complete.
    pub fn advance_clock(&self, by: Duration) {
        self.state.clock.advance(by);
    }

    /// Empties every account, restores the initial balance and the configured faults, clears
    /// the counters and the ledger.
    pub fn reset(&self) {
        self.state.reset();
    }

    /// Stops accepting connections and waits briefly for requests in flight; a response held
    /// back by fault injection does not delay shutdown for more than a second.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(Duration::from_secs(1), &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

impl Drop for SimulatorHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_is_checked_before_starting() {
        assert!(validate(&SimulatorConfig::default()).is_ok());
        let refused = [
            SimulatorConfig {
                api_keys: Vec::new(),
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                time_scale: 0.0,
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                time_scale: f64::INFINITY,
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                rate_limit: Some(RateLimit {
                    per_second: 1.0,
                    burst: 0,
                }),
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                admin_token: Some("sim-key".to_string()),
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                faults: FaultPlan {
                    error_rate_per_operation: BTreeMap::from([("Nope".to_string(), 0.5)]),
                    ..FaultPlan::default()
                },
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                max_body_bytes: 0,
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                other_accounts: vec![Vec::new()],
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                other_accounts: vec![vec!["sim-key".to_string()]],
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                admin_token: Some("second".to_string()),
                other_accounts: vec![vec!["second".to_string()]],
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                faults: FaultPlan {
                    act_late: BTreeMap::from([(String::new(), 1000)]),
                    ..FaultPlan::default()
                },
                ..SimulatorConfig::default()
            },
            SimulatorConfig {
                faults: FaultPlan {
                    accounts: vec![1],
                    ..FaultPlan::default()
                },
                ..SimulatorConfig::default()
            },
        ];
        for config in refused {
            assert!(
                matches!(validate(&config), Err(Error::Config(_))),
                "{config:?}"
            );
        }
        // The configuration's Debug output hides the keys and the token.
        let config = SimulatorConfig {
            api_keys: vec!["very-secret".to_string()],
            other_accounts: vec![vec!["secret-too".to_string()]],
            admin_token: Some("also-secret".to_string()),
            ..SimulatorConfig::default()
        };
        let debug = format!("{config:?}");
        assert!(
            !debug.contains("very-secret")
                && !debug.contains("also-secret")
                && !debug.contains("secret-too")
        );
    }

    #[test]
    fn rate_fractions_of_a_machine_that_is_off_are_within_0_and_1() {
        type Setter = fn(&mut SimulatorConfig, f64);
        let settings: [(&str, Setter); 2] = [
            ("stopped_rate_fraction", |c, f| c.stopped_rate_fraction = f),
            ("hibernated_rate_fraction", |c, f| {
                c.hibernated_rate_fraction = f
            }),
        ];
        for (setting, set) in settings {
            for accepted in [0.0, 0.5, 1.0] {
                let mut config = SimulatorConfig::default();
                set(&mut config, accepted);
                assert!(validate(&config).is_ok(), "{setting} = {accepted}");
            }
            for refused in [1.5, -0.1, f64::NAN] {
                let mut config = SimulatorConfig::default();
                set(&mut config, refused);
                let err = validate(&config).expect_err("an out-of-range fraction is refused");
                let message = err.to_string();
                assert!(
                    matches!(err, Error::Config(_)) && message.contains(setting),
                    "{setting} = {refused}: {message}"
                );
            }
        }
    }
}
