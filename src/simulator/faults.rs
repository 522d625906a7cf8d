//! Fault injection: the plan in force, the seeded draws that decide each request's faults,
//! and the counts of faults injected. A seed yields the same faults per operation in every
//! run and build.

use std::collections::HashMap;
use std::time::Duration;

use gpucloud_cloud::routes::Operation;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::config::{DropMode, FaultPlan};

/// The fault plan in force and one seeded generator per operation.
pub(crate) struct FaultState {
    pub(crate) plan: FaultPlan,
    seed: u64,
    streams: HashMap<&'static str, StdRng>,
    omission_streams: HashMap<&'static str, StdRng>,
    throttle_remaining: u32,
}

/// What the fault plan decided for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FaultDecision {
    pub throttle_secs: Option<u64>,
    pub internal_error: bool,
    pub latency: Duration,
    /// Whether `latency` includes a spike.
    pub spiked: bool,
    /// Whether `latency` holds a create for an `act_late` entry.
    pub late: bool,
    pub drop: Option<DropMode>,
}

/// Faults injected, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FaultCounts {
    /// Requests answered with an injected `429`.
    pub throttled: u64,
    /// Requests answered with an injected `500` (not performed).
    pub internal_errors: u64,
    /// Requests delayed by a latency spike.
    pub latency_spikes: u64,
    /// Operations performed whose response was then lost.
    pub dropped_responses: u64,
    /// Existing resources left out of a list.
    pub omitted_from_lists: u64,
    /// Creates held back by an `act_late` entry.
    pub late_acts: u64,
    /// Of those, the ones carried out since (whatever the outcome).
    pub late_acts_done: u64,
}

impl FaultCounts {
    pub(crate) fn add(&mut self, decision: &FaultDecision) {
        if decision.throttle_secs.is_some() {
            self.throttled += 1;
        } else if decision.internal_error {
            self.internal_errors += 1;
        }
        if decision.spiked {
            self.latency_spikes += 1;
        }
        if decision.late {
            self.late_acts += 1;
        }
    }
}

/// FNV-1a: a stable hash, so an operation's stream is the same in every build.
pub(crate) fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl FaultState {
    pub(crate) fn new(plan: FaultPlan, seed: u64) -> Self {
        FaultState {
            plan,
            seed,
            streams: HashMap::new(),
            omission_streams: HashMap::new(),
            throttle_remaining: 0,
        }
    }

    /// Whether a list leaves out one more item: drawn from a stream of the operation's own,
    /// apart from the per-request draws, so the request faults of a seed stay the same.
    pub(crate) fn draw_omission(&mut self, operation: Operation) -> bool {
        let rate = self.plan.list_omission_rate;
        if rate <= 0.0 {
            return false;
        }
        let seed = self.seed ^ stable_hash(operation.name()) ^ stable_hash("list omission");
        let rng = self
            .omission_streams
            .entry(operation.name())
            .or_insert_with(|| StdRng::seed_from_u64(seed));
        rng.random::<f64>() < rate
    }

    /// The faults of one request of `operation` made by account `account`.
    ///
    /// Draws the same four numbers for every request of an operation, whatever the plan,
    /// so a seed always yields the same sequence per operation. A request of an account the
    /// plan leaves out gets no fault and draws nothing (nor ends a 429 burst), so the accounts
    /// the plan targets see the same faults whatever the other accounts do.
    pub(crate) fn decide(&mut self, operation: Operation, account: usize) -> FaultDecision {
        if !self.plan.applies_to(account) {
            return FaultDecision::default();
        }
        let seed = self.seed ^ stable_hash(operation.name());
        let rng = self
            .streams
            .entry(operation.name())
            .or_insert_with(|| StdRng::seed_from_u64(seed));
        let draws: [f64; 4] = [rng.random(), rng.random(), rng.random(), rng.random()];
        let plan = &self.plan;
        let mut decision = FaultDecision {
            latency: plan.latency,
            ..FaultDecision::default()
        };
        if let Some(burst) = plan.throttle_burst {
            if self.throttle_remaining > 0 {
                self.throttle_remaining -= 1;
                decision.throttle_secs = Some(burst.retry_after_secs.max(1));
            } else if draws[0] < burst.probability {
                self.throttle_remaining = burst.length.saturating_sub(1);
                decision.throttle_secs = Some(burst.retry_after_secs.max(1));
            }
        }
        if let Some(extra) = plan.latency_ms_per_operation.get(operation.name()) {
            decision.latency += Duration::from_millis(*extra);
        }
        decision.internal_error = draws[1] < plan.error_rate_for(operation.name());
        if let Some(spike) = plan.latency_spike
            && draws[2] < spike.probability
        {
            decision.latency += spike.extra;
            decision.spiked = true;
        }
        if draws[3]
            < plan
                .act_then_drop
                .get(operation.name())
                .copied()
                .unwrap_or(0.0)
        {
            decision.drop = Some(plan.drop_mode);
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::ThrottleBurst;

    #[test]
    fn latency_spikes_and_drops_follow_the_plan() {
        let plan = FaultPlan {
            latency: Duration::from_millis(5),
            latency_spike: Some(crate::config::LatencySpike {
                probability: 1.0,
                extra: Duration::from_millis(40),
            }),
            act_then_drop: BTreeMap::from([("CreateInstance".to_string(), 1.0)]),
            ..FaultPlan::default()
        };
        let mut state = FaultState::new(plan, 3);
        let create = state.decide(Operation::CreateInstance, 0);
        assert_eq!(create.latency, Duration::from_millis(45));
        assert_eq!(create.drop, Some(DropMode::default()));
        assert!(!create.internal_error && create.throttle_secs.is_none());
        assert_eq!(state.decide(Operation::GetBalance, 0).drop, None);
    }

    #[test]
    fn a_plan_for_some_accounts_leaves_the_others_alone() {
        let plan = FaultPlan {
            latency: Duration::from_millis(5),
            error_rate: 1.0,
            throttle_burst: Some(ThrottleBurst {
                probability: 1.0,
                length: 3,
                retry_after_secs: 2,
            }),
            act_then_drop: BTreeMap::from([("CreateInstance".to_string(), 1.0)]),
            accounts: vec![1, 3],
            ..FaultPlan::default()
        };
        let mut state = FaultState::new(plan, 3);
        for account in [0, 2, 4] {
            assert_eq!(
                state.decide(Operation::CreateInstance, account),
                FaultDecision::default(),
                "account {account}"
            );
        }
        for account in [1, 3] {
            let decision = state.decide(Operation::CreateInstance, account);
            assert_eq!(decision.throttle_secs, Some(2), "account {account}");
            assert_eq!(decision.latency, Duration::from_millis(5));
        }
        // The untargeted calls drew nothing: the targeted account's stream is the one it
        // would be alone.
        let alone = FaultPlan {
            accounts: Vec::new(),
            ..state.plan.clone()
        };
        let mut alone = FaultState::new(alone, 3);
        let mut shared = FaultState::new(state.plan.clone(), 3);
        for _ in 0..8 {
            assert_eq!(
                shared.decide(Operation::ListVolumes, 0),
                FaultDecision::default()
            );
            assert_eq!(
                shared.decide(Operation::ListVolumes, 1),
                alone.decide(Operation::ListVolumes, 1)
            );
        }
    }

    #[test]
    fn fault_streams_repeat_for_the_same_seed_and_differ_by_operation() {
        let plan = FaultPlan {
            error_rate: 0.5,
            throttle_burst: Some(ThrottleBurst {
                probability: 0.1,
                length: 3,
                retry_after_secs: 1,
            }),
            ..FaultPlan::default()
        };
        let run = |seed: u64, op: Operation| {
            let mut state = FaultState::new(plan.clone(), seed);
            (0..64).map(|_| state.decide(op, 0)).collect::<Vec<_>>()
        };
        assert_eq!(
            run(9, Operation::ListVolumes),
            run(9, Operation::ListVolumes)
        );
        assert_ne!(
            run(9, Operation::ListVolumes),
            run(10, Operation::ListVolumes)
        );
        assert_ne!(
            run(9, Operation::ListVolumes),
            run(9, Operation::GetBalance)
        );
        let errors = run(9, Operation::ListVolumes)
            .iter()
            .filter(|d| d.internal_error)
            .count();
        assert!((16..=48).contains(&errors), "{errors}");
    }
}
