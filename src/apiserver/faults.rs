//! Fault injection for reliability tests: watches cut on demand or at a seeded rate, watch
//! events sent late, `409 Conflict` answers to status writes at a seeded rate, creates carried
//! out and answered `504 Timeout` at a seeded rate, and outages on demand (every request
//! answered with one error status).
//!
//! A real control plane drops watches (load balancer idle timeouts, apiserver restarts) and
//! answers writes with conflicts whenever another writer got there first. Controllers must
//! survive both; these knobs make them happen on purpose. Forced `410 Gone` needs no knob:
//! [`crate::ApiServerHandle::compact`] ends every open watch with it and makes older
//! resourceVersions expire.
//!
//! Every random choice comes from one generator seeded with the plan's seed, so a plan replays
//! the same sequence of decisions for the same sequence of requests.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

/// A fault plan was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FaultError {
    #[error("{what}: probability {value} is outside 0..=1")]
    Probability { what: &'static str, value: f64 },
    #[error("watch_lifetime: the longest lifetime must be at least the shortest")]
    Lifetime,
}

/// What to inject. The default injects nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiFaultPlan {
    /// Seed of every decision.
    pub seed: u64,
    /// Probability that a status write (update or patch of `/status`) is answered
    /// `409 Conflict` without being applied.
    pub status_conflict_rate: f64,
    /// Probability that a new watch is cut after a lifetime drawn from `watch_lifetime`.
    pub watch_cut_rate: f64,
    /// Shortest and longest lifetime of a watch that is to be cut.
    pub watch_lifetime: (Duration, Duration),
    /// Probability that a create of a custom resource is carried out and then answered
    /// `504 Timeout`, as when the request's deadline passes after the write committed: the
    /// client cannot tell whether the object was created.
    pub create_timeout_rate: f64,
    /// How long after its change each event of a watch started under this plan is sent, as a
    /// loaded API server's watch cache lags its writes: a client reading its cache right after
    /// a write of its own does not see it yet.
    pub watch_delay: Duration,
}

impl ApiFaultPlan {
    pub fn validate(&self) -> Result<(), FaultError> {
        for (what, value) in [
            ("status_conflict_rate", self.status_conflict_rate),
            ("watch_cut_rate", self.watch_cut_rate),
            ("create_timeout_rate", self.create_timeout_rate),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(FaultError::Probability { what, value });
            }
        }
        if self.watch_lifetime.1 < self.watch_lifetime.0 {
            return Err(FaultError::Lifetime);
        }
        Ok(())
    }
}

/// How many faults were injected so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub status_conflicts: u64,
    /// Watches cut by the seeded rate.
    pub watches_cut: u64,
    /// Calls of [`ApiFaults::disconnect_watches`].
    pub disconnects: u64,
    /// Creates carried out and answered `504 Timeout`.
    pub create_timeouts: u64,
}

/// The fault state one server shares between its handlers.
pub struct ApiFaults {
    decisions: Mutex<(ApiFaultPlan, StdRng)>,
    /// Bumped by every on-demand disconnect; open watches end when it changes.
    disconnect: watch::Sender<u64>,
    status_conflicts: AtomicU64,
    watches_cut: AtomicU64,
    create_timeouts: AtomicU64,
    /// The status of an outage on demand, 0 for none: see [`ApiFaults::set_outage`].
    outage: AtomicU16,
}

impl std::fmt::Debug for ApiFaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiFaults")
            .field("plan", &self.plan())
            .field("counts", &self.counts())
            .field("outage", &self.outage())
            .finish()
    }
}

impl Default for ApiFaults {
    fn default() -> Self {
        let (disconnect, _) = watch::channel(0);
        ApiFaults {
            decisions: Mutex::new((ApiFaultPlan::default(), StdRng::seed_from_u64(0))),
            disconnect,
            status_conflicts: AtomicU64::new(0),
            watches_cut: AtomicU64::new(0),
            create_timeouts: AtomicU64::new(0),
            outage: AtomicU16::new(0),
        }
    }
}

// === impl ApiFaults ===

impl ApiFaults {
    fn lock(&self) -> std::sync::MutexGuard<'_, (ApiFaultPlan, StdRng)> {
        self.decisions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the plan; the decision stream restarts from the plan's seed.
    pub fn set_plan(&self, plan: ApiFaultPlan) -> Result<(), FaultError> {
        plan.validate()?;
        let rng = StdRng::seed_from_u64(plan.seed);
        *self.lock() = (plan, rng);
        Ok(())
    }

    pub fn plan(&self) -> ApiFaultPlan {
        self.lock().0.clone()
    }

    pub fn counts(&self) -> FaultCounts {
        FaultCounts {
            status_conflicts: self.status_conflicts.load(Ordering::Relaxed),
            watches_cut: self.watches_cut.load(Ordering::Relaxed),
            disconnects: *self.disconnect.borrow(),
            create_timeouts: self.create_timeouts.load(Ordering::Relaxed),
        }
    }

    /// Ends every open watch now: clients see their stream close, as on a dropped connection.
    pub fn disconnect_watches(&self) {
        self.disconnect.send_modify(|generation| *generation += 1);
    }

    /// An outage, as while etcd is unreachable or the server restarts behind its load
    /// balancer: from `Some(code)` on, every request is answered with the error status `code`
    /// (500 `InternalError`, 503 `ServiceUnavailable`, ...) and the open watches end at once (a
    /// disconnect, counted as one); `None` ends the outage. kube-rs clients retry 429, 503
    /// and 504 answers themselves for minutes before a caller sees them; 500 reaches the
    /// caller at once.
    pub fn set_outage(&self, code: Option<u16>) {
        self.outage.store(code.unwrap_or(0), Ordering::SeqCst);
        if code.is_some() {
            self.disconnect_watches();
        }
    }

    /// The status every request is answered with, during an outage (see
    /// [`ApiFaults::set_outage`]).
    pub fn outage(&self) -> Option<u16> {
        Some(self.outage.load(Ordering::SeqCst)).filter(|code| *code != 0)
    }

    /// Whether this status write is to be refused with a conflict.
    pub fn conflict_on_status_write(&self) -> bool {
        let mut guard = self.lock();
        let (plan, rng) = &mut *guard;
        if plan.status_conflict_rate <= 0.0 {
            return false;
        }
        let conflict = rng.random::<f64>() < plan.status_conflict_rate;
        if conflict {
            self.status_conflicts.fetch_add(1, Ordering::Relaxed);
        }
        conflict
    }

    /// Whether the answer to this create, carried out, is to be lost (`504 Timeout`).
    pub fn timeout_after_create(&self) -> bool {
        let mut guard = self.lock();
        let (plan, rng) = &mut *guard;
        if plan.create_timeout_rate <= 0.0 {
            return false;
        }
        let lost = rng.random::<f64>() < plan.create_timeout_rate;
        if lost {
            self.create_timeouts.fetch_add(1, Ordering::Relaxed);
        }
        lost
    }

    /// What ends a new watch early: a receiver that changes on the next on-demand disconnect,
    /// and the lifetime after which the seeded rate cuts it, if it does.
    ///
    /// A watch admitted just before an outage began, but taking this after it, ends at once as
    /// the open ones did: the outage is read after subscribing, so either it is seen here or its
    /// disconnect comes later. Otherwise such a watch would stay open through the outage, which
    /// kube-apiserver's cannot.
    pub fn watch_cut(&self) -> WatchCut {
        let mut disconnect = self.disconnect.subscribe();
        if self.outage().is_some() {
            disconnect.mark_changed();
        } else {
            disconnect.mark_unchanged();
        }
        let mut guard = self.lock();
        let (plan, rng) = &mut *guard;
        let lifetime = (plan.watch_cut_rate > 0.0 && rng.random::<f64>() < plan.watch_cut_rate)
            .then(|| {
                let (shortest, longest) = plan.watch_lifetime;
                let spread = longest.saturating_sub(shortest).as_secs_f64();
                shortest + Duration::from_secs_f64(spread * rng.random::<f64>())
            });
        WatchCut {
            disconnect,
            lifetime,
        }
    }

    /// How long after its change a new watch sends each event (`ApiFaultPlan::watch_delay`).
    pub fn watch_delay(&self) -> Duration {
        self.lock().0.watch_delay
    }

    /// Counts a watch ended by its drawn lifetime.
    pub fn record_watch_cut(&self) {
        self.watches_cut.fetch_add(1, Ordering::Relaxed);
    }
}

/// How one watch may be ended by fault injection.
pub struct WatchCut {
    pub disconnect: watch::Receiver<u64>,
    pub lifetime: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_checked() {
        let faults = ApiFaults::default();
        assert_eq!(
            faults.set_plan(ApiFaultPlan {
                status_conflict_rate: 1.5,
                ..ApiFaultPlan::default()
            }),
            Err(FaultError::Probability {
                what: "status_conflict_rate",
                value: 1.5
            })
        );
        assert_eq!(
            faults.set_plan(ApiFaultPlan {
                watch_lifetime: (Duration::from_secs(2), Duration::from_secs(1)),
                ..ApiFaultPlan::default()
            }),
            Err(FaultError::Lifetime)
        );
        assert_eq!(faults.plan(), ApiFaultPlan::default());
    }

    #[test]
    fn decisions_repeat_for_a_seed_and_follow_the_rate() {
        let plan = ApiFaultPlan {
            seed: 7,
            status_conflict_rate: 0.3,
            watch_cut_rate: 0.5,
            watch_lifetime: (Duration::from_millis(100), Duration::from_millis(300)),
            create_timeout_rate: 0.0,
            watch_delay: Duration::ZERO,
        };
        let run = || {
            let faults = ApiFaults::default();
            faults.set_plan(plan.clone()).unwrap();
            let conflicts: Vec<bool> = (0..200)
                .map(|_| faults.conflict_on_status_write())
                .collect();
            let lifetimes: Vec<Option<Duration>> =
                (0..50).map(|_| faults.watch_cut().lifetime).collect();
            (conflicts, lifetimes, faults.counts())
        };
        let (conflicts, lifetimes, counts) = run();
        assert_eq!(run().0, conflicts);
        assert_eq!(run().1, lifetimes);
        let injected = conflicts.iter().filter(|c| **c).count();
        assert!((30..=90).contains(&injected), "{injected}");
        assert_eq!(counts.status_conflicts, injected as u64);
        assert!(
            lifetimes
                .iter()
                .flatten()
                .all(|l| (Duration::from_millis(100)..=Duration::from_millis(300)).contains(l))
        );
        assert!(lifetimes.iter().any(Option::is_some) && lifetimes.iter().any(Option::is_none));
    }

    #[test]
    fn no_plan_injects_nothing_and_disconnects_reach_open_watches() {
        let faults = ApiFaults::default();
        assert!(!(0..100).any(|_| faults.conflict_on_status_write()));
        let cut = faults.watch_cut();
        assert_eq!(cut.lifetime, None);
        assert!(!cut.disconnect.has_changed().unwrap());
        faults.disconnect_watches();
        assert!(cut.disconnect.has_changed().unwrap());
        // A watch opened after the disconnect is not ended by it.
        let later = faults.watch_cut();
        assert!(!later.disconnect.has_changed().unwrap());
        assert_eq!(faults.counts().disconnects, 1);
    }

    #[test]
    fn an_outage_ends_open_watches_and_lasts_until_lifted() {
        let faults = ApiFaults::default();
        assert_eq!(faults.outage(), None);
        let cut = faults.watch_cut();
        faults.set_outage(Some(500));
        assert_eq!(faults.outage(), Some(500));
        assert!(cut.disconnect.has_changed().unwrap());
        faults.set_outage(None);
        assert_eq!(faults.outage(), None);
        assert_eq!(faults.counts().disconnects, 1);
    }

    /// A watch request that passed the outage check just before the outage began takes its cut
    /// after it: it ends at once, as the watches open at the outage did.
    #[test]
    fn a_watch_admitted_as_an_outage_begins_ends_with_the_open_ones() {
        let faults = ApiFaults::default();
        faults.set_outage(Some(500));
        let admitted_before = faults.watch_cut();
        assert!(admitted_before.disconnect.has_changed().unwrap());
        faults.set_outage(None);
        let after = faults.watch_cut();
        assert!(!after.disconnect.has_changed().unwrap());
    }
}
