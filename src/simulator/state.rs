//! The shared state of one simulator: its configuration, clock, one engine per account, the
//! fault plan and every counter, behind short synchronous locks.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use axum::http::StatusCode;
use gpucloud_cloud::routes::Operation;
use serde::Serialize;

use crate::clock::Clock;
use crate::config::{FaultPlan, SimulatorConfig};
use crate::counters::{Counters, StatusCounts};
use crate::engine::{Engine, EngineSettings, SimTime};
use crate::error::ApiError;
use crate::faults::{FaultCounts, FaultState};
use crate::rate_limiter::RateLimiter;

/// Shared state of one simulator.
pub struct AppState {
    pub config: SimulatorConfig,
    pub clock: Clock,
    /// The engine of the first account, that of `api_keys`.
    engine: Mutex<Engine>,
    /// One engine per entry of `other_accounts`, in order.
    other_engines: Vec<Mutex<Engine>>,
    pub(crate) faults: Mutex<FaultState>,
    pub(crate) fault_counts: Mutex<FaultCounts>,
    counters: Mutex<Counters>,
    pub(crate) limiter: Mutex<RateLimiter>,
    request_seq: AtomicU64,
    /// The `act_late` entries that have held their request.
    late_spent: Mutex<BTreeSet<String>>,
    pub(crate) ledger: Mutex<Vec<LedgerEntry>>,
}

/// Which accepted key made a call: its account (0 is that of `api_keys`, then
/// `other_accounts` in order) and its place in that account's list of keys.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
pub struct Caller {
    pub account: usize,
    pub key: usize,
}

/// One call that changed an account, as the cloud recorded it once it had acted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LedgerEntry {
    pub operation: String,
    pub caller: Caller,
    /// The ids the request named: its path parameters and every `*_id` or `*_ids` field of
    /// its body.
    pub named: Vec<String>,
    /// The name it gave a new resource (`name`, or `new_vm_name` of a restore).
    pub name: Option<String>,
    /// The id of the resource it created.
    pub created: Option<String>,
    /// When it acted, on the simulator's clock (milliseconds since the epoch).
    #[serde(default)]
    pub at_ms: SimTime,
}

/// Locks a mutex, recovering the data if a holder panicked (state stays usable).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl AppState {
    pub fn new(config: SimulatorConfig) -> Self {
        let clock = Clock::new(config.time_scale, config.start);
        let engine = Engine::new(EngineSettings::from_config(&config), clock.now());
        let other_engines = (1..=config.other_accounts.len())
            .map(|account| {
                let settings = EngineSettings::for_account(&config, account);
                Mutex::new(Engine::new(settings, clock.now()))
            })
            .collect();
        let faults = FaultState::new(config.faults.clone(), config.seed);
        AppState {
            clock,
            engine: Mutex::new(engine),
            other_engines,
            faults: Mutex::new(faults),
            fault_counts: Mutex::new(FaultCounts::default()),
            counters: Mutex::new(Counters::default()),
            limiter: Mutex::new(RateLimiter::default()),
            request_seq: AtomicU64::new(0),
            late_spent: Mutex::new(BTreeSet::new()),
            ledger: Mutex::new(Vec::new()),
            config,
        }
    }

    /// Runs `f` on the first account's engine under the lock (a short, synchronous section).
    pub fn with_engine<T>(&self, f: impl FnOnce(&mut Engine, SimTime) -> T) -> T {
        let mut engine = lock(&self.engine);
        let now = self.clock.now();
        f(&mut engine, now)
    }

    /// Runs `f` on the engine of account `account`; `None` when there is no such account.
    pub fn with_account<T>(
        &self,
        account: usize,
        f: impl FnOnce(&mut Engine, SimTime) -> T,
    ) -> Option<T> {
        let engine = match account {
            0 => &self.engine,
            other => self.other_engines.get(other - 1)?,
        };
        let mut engine = lock(engine);
        let now = self.clock.now();
        Some(f(&mut engine, now))
    }

    /// The delay of the `act_late` entry whose prefix starts `name`, if one is in the plan, the
    /// plan applies to `account` and the entry has not yet held a request; it is spent from
    /// here on.
    pub(crate) fn take_late_act(&self, name: &str, account: usize) -> Option<Duration> {
        let faults = lock(&self.faults);
        if !faults.plan.applies_to(account) {
            return None;
        }
        let mut spent = lock(&self.late_spent);
        let (prefix, delay) =
            faults.plan.act_late.iter().find(|(prefix, _)| {
                name.starts_with(prefix.as_str()) && !spent.contains(*prefix)
            })?;
        spent.insert(prefix.clone());
        Some(Duration::from_millis(*delay))
    }

    /// How many accounts the simulator serves.
    pub fn accounts(&self) -> usize {
        1 + self.other_engines.len()
    }

    /// Every call that changed an account so far, in the order they acted (empty unless
    /// `keep_ledger` is set).
    pub fn ledger(&self) -> Vec<LedgerEntry> {
        lock(&self.ledger).clone()
    }

    pub fn set_faults(&self, plan: FaultPlan) {
        *lock(&self.faults) = FaultState::new(plan, self.config.seed);
    }

    pub fn faults(&self) -> FaultPlan {
        lock(&self.faults).plan.clone()
    }

    /// Faults injected since the start (or the last reset); setting a plan keeps counting.
    pub fn fault_counts(&self) -> FaultCounts {
        *lock(&self.fault_counts)
    }

    /// Sets the GPUs of a type free in a region, in every account (each keeps the GPUs its
    /// machines hold).
    pub fn set_gpu_stock(
        &self,
        gpu_type: &str,
        region: &str,
        available: u32,
    ) -> Result<(), ApiError> {
        for account in 0..self.accounts() {
            self.with_account(account, |engine, now| {
                engine.set_gpu_stock(gpu_type, region, available, now)
            })
            .unwrap_or(Ok(()))?;
        }
        Ok(())
    }

    /// Sets the price per GPU-hour of a type, in every account.
    pub fn set_gpu_price(&self, gpu_type: &str, price_per_gpu_hour: f64) -> Result<(), ApiError> {
        for account in 0..self.accounts() {
            self.with_account(account, |engine, _| {
                engine.set_gpu_price(gpu_type, price_per_gpu_hour)
            })
            .unwrap_or(Ok(()))?;
        }
        Ok(())
    }

    /// Back to the start: empty account, initial balance, configured faults, no counters.
    pub fn reset(&self) {
        for account in 0..self.accounts() {
            self.with_account(account, |engine, now| engine.reset(now));
        }
        self.set_faults(self.config.faults.clone());
        *lock(&self.counters) = Counters::default();
        *lock(&self.fault_counts) = FaultCounts::default();
        *lock(&self.limiter) = RateLimiter::default();
        lock(&self.late_spent).clear();
        lock(&self.ledger).clear();
    }

    pub fn counters(&self) -> Counters {
        lock(&self.counters).clone()
    }

    pub(crate) fn count_received(&self, operation: Operation) {
        *lock(&self.counters)
            .received
            .entry(operation.name().to_string())
            .or_default() += 1;
    }

    /// Counts an answered request: under its operation (`None` for a path no route serves)
    /// and, when its API key named one, under the caller's account.
    pub(crate) fn count(
        &self,
        operation: Option<Operation>,
        caller: Option<Caller>,
        status: StatusCode,
    ) {
        let mut counters = lock(&self.counters);
        let Some(operation) = operation else {
            counters.unmatched += 1;
            return;
        };
        let add = |counts: &mut StatusCounts| {
            *counts
                .entry(operation.name().to_string())
                .or_default()
                .entry(status.as_u16())
                .or_default() += 1;
        };
        add(&mut counters.operations);
        if let Some(caller) = caller {
            add(counters.by_account.entry(caller.account).or_default());
        }
    }

    pub(crate) fn next_request_id(&self) -> String {
        let seq = self.request_seq.fetch_add(1, Ordering::Relaxed) + 1;
        // The seed's low bits keep ids of different runs apart.
        format!("req_{:08x}{seq:016x}", self.config.seed as u32)
    }
}
