//! The multi-tenant run's result: per-account phases judged against the slowest account's
//! bound, settled traffic per account, memory over every kind, the restarts with every kind
//! settled, the API server's own figures, and one timeline per account.

use super::{
    ApiWrites, BoundedPhase, DELETION_MARK, MB, READY_MARK, Restart, Settings, Settled, TURN_MARK,
    Target, bounded_target, colored, restart_target, targets_table,
};
use crate::process::ProcessUsage;
use crate::scenario::tenants::Mix;
use plotters::style::RGBColor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A phase in every account: each account's time against its own bound, and the run's time
/// (the slowest account's) against the slowest account's bound.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AccountPhases {
    pub accounts: Vec<BoundedPhase>,
    pub seconds: f64,
    pub lower_bound_s: f64,
    pub ratio: f64,
    /// Cloud writes per account in each 5 s of the phase, from the simulator's ledger: where
    /// an account's rate limit went unused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes_per_5s: Vec<Vec<u32>>,
    /// Every account's cloud writes per operation in each 5 s of the phase: which writes the
    /// busy and the quiet steps were.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub operations_per_5s: BTreeMap<String, Vec<u32>>,
}

impl AccountPhases {
    pub fn new(accounts: Vec<BoundedPhase>) -> AccountPhases {
        let seconds = accounts.iter().map(|a| a.seconds).fold(0.0, f64::max);
        let lower_bound_s = accounts.iter().map(|a| a.lower_bound_s).fold(0.0, f64::max);
        AccountPhases {
            accounts,
            seconds,
            lower_bound_s,
            ratio: if lower_bound_s > 0.0 {
                seconds / lower_bound_s
            } else {
                f64::INFINITY
            },
            writes_per_5s: Vec::new(),
            operations_per_5s: BTreeMap::new(),
        }
    }

    /// The run's time against the slowest account's bound, as one phase.
    fn as_run(&self) -> BoundedPhase {
        BoundedPhase {
            seconds: self.seconds,
            calls_by_operation: BTreeMap::new(),
            minimum_calls: 0,
            cloud_time_s: 0.0,
            lower_bound_s: self.lower_bound_s,
            ratio: self.ratio,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TenantsMemory {
    pub operator_idle: ProcessUsage,
    pub operator_all_ready: ProcessUsage,
    pub operator_settled: ProcessUsage,
    /// The restarted operator with the highest peak, after re-adopting everything (its peak
    /// is the re-list's).
    pub operator_restarted: ProcessUsage,
    /// (settled RSS - idle RSS) / objects of every kind.
    pub slope_bytes_per_object: f64,
    /// CPU seconds of every operator process of the run: the first, and each restarted one.
    pub operator_cpu_s: f64,
    pub apiserver: ProcessUsage,
    pub simulator: ProcessUsage,
}

/// The embedded API server with every object settled.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ApiServerFigures {
    /// Per kind: the objects one list across every namespace returned, and its seconds.
    pub list_seconds_by_kind: BTreeMap<String, (usize, f64)>,
    pub usage_settled: ProcessUsage,
}

/// New objects' time from apply to their first cloud call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProbeLatencies {
    pub count: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The fairness phase: one namespace applied `objects` GpuInstances at once while new objects
/// were applied one at a time in two quiet namespaces.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Burst {
    pub namespace: String,
    pub objects: usize,
    /// From the burst's first apply until it and every probe were Ready.
    pub seconds: f64,
    /// Probes in a namespace of another account.
    pub other_account: Option<ProbeLatencies>,
    /// Probes in another namespace of the burst's account.
    pub same_account: Option<ProbeLatencies>,
    /// (concurrency + 1) / R + L: the calls in flight ahead of a quiet namespace's create, and
    /// its own, at the account's rate.
    pub fair_share_bound_ms: f64,
}

/// One account's machines in one round of the storm phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StormAccount {
    pub machines: usize,
    /// From the round's apply until the account's machines were all Ready; `None` if they
    /// were not within the phase timeout.
    pub seconds: Option<f64>,
    /// The account's cloud calls by operation, any status, from the round's start until every
    /// machine of the round was Ready (the settled objects' lists and reads included).
    pub calls_by_operation: BTreeMap<String, u64>,
    /// Of those, the creates that succeeded.
    pub created: u64,
    /// Of those, the calls answered `429` and `5xx`.
    pub throttled: u64,
    pub server_errors: u64,
    /// The deletes that succeeded while the round's machines were deleted.
    pub deleted: u64,
}

/// Fairness in a storm: a set of new GpuInstances spread over every namespace, applied once
/// without a fault (the reference) and once while one account answers every call with a
/// `429` or a `500`; each other account's time is compared with its own in the reference.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Storm {
    /// The machines of one round, over every account.
    pub machines: usize,
    /// The account in the storm.
    pub storm_account: usize,
    /// How long its fault plan was in force, from before the storm round's apply.
    pub window_s: f64,
    /// The simulator's fault plan of the storm.
    pub fault_plan: serde_json::Value,
    /// Per account, the round without the fault.
    pub reference: Vec<StormAccount>,
    /// Per account, the round with the storm.
    pub storm: Vec<StormAccount>,
    /// From the end of the window until the storm account's machines were all Ready; `None`
    /// if they were not within the phase timeout.
    pub recovered_after_s: Option<f64>,
}

impl Storm {
    /// The slowest time of the accounts other than the storm's in `round`; `None` if one of
    /// them did not converge, or there is no other account.
    fn slowest_other(&self, round: &[StormAccount]) -> Option<f64> {
        let mut slowest: Option<f64> = None;
        for (account, phase) in round.iter().enumerate() {
            if account != self.storm_account {
                slowest = Some(slowest.unwrap_or(0.0).max(phase.seconds?));
            }
        }
        slowest
    }

    /// The other accounts' slowest time in the storm over theirs without it.
    pub fn ratio(&self) -> Option<f64> {
        let storm = self.slowest_other(&self.storm)?;
        let reference = self.slowest_other(&self.reference)?;
        Some(if reference > 0.0 {
            storm / reference
        } else {
            f64::INFINITY
        })
    }

    fn target(&self) -> Target {
        let seconds =
            |s: Option<f64>| s.map_or("not converged".to_string(), |s| format!("{s:.1} s"));
        let storm = self.slowest_other(&self.storm);
        let past_window = if storm.is_some_and(|s| s > self.window_s) {
            format!(", past the {:.0} s storm", self.window_s)
        } else {
            String::new()
        };
        let stormed = self.storm.get(self.storm_account);
        let measured = format!(
            "{}: slowest other account {} in the storm{past_window}, {} without; account {} got {} answers 429 and {} 5xx, Ready {} after the storm",
            self.ratio()
                .map_or("none".to_string(), |r| format!("{r:.2}x")),
            seconds(storm),
            seconds(self.slowest_other(&self.reference)),
            self.storm_account,
            stormed.map_or(0, |a| a.throttled),
            stormed.map_or(0, |a| a.server_errors),
            seconds(self.recovered_after_s),
        );
        Target {
            name: STORM_TARGET.into(),
            target: "within 1.10 x the same round without the fault".into(),
            measured,
            pass: self.ratio().is_some_and(|r| r <= 1.10),
        }
    }

    /// Each account's time in both rounds.
    fn line(&self) -> String {
        let rounds: Vec<String> = self
            .reference
            .iter()
            .zip(&self.storm)
            .enumerate()
            .map(|(i, (reference, storm))| {
                let seconds = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{s:.1}"));
                let marker = if i == self.storm_account {
                    " (storm)"
                } else {
                    ""
                };
                format!(
                    "{i}{marker}: {} s / {} s",
                    seconds(storm.seconds),
                    seconds(reference.seconds)
                )
            })
            .collect();
        format!(
            "storm per account ({} machines a round; in the storm / without): {}\n",
            self.machines,
            rounds.join(", ")
        )
    }
}

/// The storm phase's row of the table.
pub const STORM_TARGET: &str =
    "fairness: the other accounts' convergence while one account is in a 429/5xx storm";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TenantsResult {
    pub settings: Settings,
    pub namespaces: usize,
    pub accounts: usize,
    /// Each namespace's objects besides its SshKey and Firewall.
    pub mix: Mix,
    /// Objects of every kind.
    pub objects: usize,
    pub convergence: AccountPhases,
    /// The settled window, per account.
    pub settled: Vec<Settled>,
    /// The operator restarted with every object of every kind settled; each run's bound is a
    /// new process's list of every kind in every namespace plus the slowest account's cloud
    /// lists.
    pub restart: Restart,
    pub deletion: AccountPhases,
    pub memory: TenantsMemory,
    pub api_writes: ApiWrites,
    pub api_server: ApiServerFigures,
    /// The fairness phase, unless it was skipped (`--burst-objects 0`).
    pub burst: Option<Burst>,
    /// The storm phase, unless it was skipped (`--storm-objects 0`, or a single account).
    #[serde(default)]
    pub storm: Option<Storm>,
    /// Every call over the whole run by operation, every account.
    pub calls_by_operation: BTreeMap<String, u64>,
    /// (seconds since start, Ready objects) per account.
    pub timelines: BTreeMap<usize, Vec<(f64, usize)>>,
    /// Seconds since start of: all Ready, the first restart, the start of deletion.
    pub marks: Vec<f64>,
    pub targets: Vec<Target>,
}

impl TenantsResult {
    pub fn judge(&mut self) {
        let mut targets = vec![bounded_target(
            "convergence (slowest account)",
            &self.convergence.as_run(),
        )];
        // Settled traffic: each account within the single-account budgets.
        let budgets = |s: &Settled| {
            (
                (2.0 * s.intervals).ceil() as u64,
                s.intervals.ceil() as u64 * crate::counters::PER_ACCOUNT.len() as u64,
            )
        };
        let worst_lists = self
            .settled
            .iter()
            .map(|s| s.max_lists_per_kind)
            .max()
            .unwrap_or(0);
        let worst_per_account = self
            .settled
            .iter()
            .map(|s| s.per_account_calls)
            .max()
            .unwrap_or(0);
        let per_object: u64 = self.settled.iter().map(|s| s.per_object_calls).sum();
        let (list_budget, account_budget) = self.settled.first().map(budgets).unwrap_or((0, 0));
        targets.push(Target {
            name: "settled traffic".into(),
            target: format!(
                "per account: <= 2 lists per kind per interval ({list_budget}), <= 1 balance, billing, catalog and price read per interval ({account_budget} calls); 0 per-object"
            ),
            measured: format!(
                "worst account: {worst_lists} lists per kind, {worst_per_account} per-account calls; {per_object} per-object in all"
            ),
            pass: self.settled.iter().all(|s| {
                let (lists, account) = budgets(s);
                s.max_lists_per_kind <= lists
                    && s.per_account_calls <= account
                    && s.per_object_calls == 0
            }),
        });
        let m = &self.memory;
        targets.push(Target {
            name: "memory idle".into(),
            target: "< 50 MB".into(),
            measured: format!("{:.1} MB", m.operator_idle.rss_bytes as f64 / MB),
            pass: (m.operator_idle.rss_bytes as f64) < 50.0 * MB,
        });
        targets.push(Target {
            name: "memory per object".into(),
            target: "<= 5 KB (every kind counted)".into(),
            measured: format!("{:.2} KB", m.slope_bytes_per_object / 1000.0),
            pass: m.slope_bytes_per_object <= 5_000.0,
        });
        targets.push(restart_target(&self.restart));
        if let Some(burst) = &self.burst {
            let probes = |latencies: &Option<ProbeLatencies>| {
                latencies.as_ref().map_or("none".to_string(), |l| {
                    format!(
                        "p99 {:.0} ms (p50 {:.0} ms, n = {}) during {} creates in {}",
                        l.p99_ms, l.p50_ms, l.count, burst.objects, burst.namespace
                    )
                })
            };
            targets.push(Target {
                name: "fairness: another account".into(),
                target: "first cloud call p99 < 1 s".into(),
                measured: probes(&burst.other_account),
                pass: burst
                    .other_account
                    .as_ref()
                    .is_some_and(|l| l.p99_ms < 1000.0),
            });
            if burst.same_account.is_some() {
                let bound = 2.0 * burst.fair_share_bound_ms;
                targets.push(Target {
                    name: "fairness: the same account".into(),
                    target: format!("first cloud call p99 <= 2 x fair share ({bound:.0} ms)"),
                    measured: probes(&burst.same_account),
                    pass: burst
                        .same_account
                        .as_ref()
                        .is_some_and(|l| l.p99_ms <= bound),
                });
            }
        }
        if let Some(storm) = &self.storm {
            targets.push(storm.target());
        }
        targets.push(bounded_target(
            "deletion (slowest account)",
            &self.deletion.as_run(),
        ));
        self.targets = targets;
    }

    pub fn table(&self) -> String {
        let mut out = self.settings.headline();
        out.push_str(&format!(
            "{} objects in {} namespaces, {} accounts; each namespace: an SshKey, a Firewall, {} GpuInstances, {} Volumes, {} Snapshots\n",
            self.objects,
            self.namespaces,
            self.accounts,
            self.mix.instances,
            self.mix.volumes,
            self.mix.snapshots
        ));
        out.push_str(&targets_table(&self.targets));
        for (name, phase) in [
            ("convergence", &self.convergence),
            ("deletion", &self.deletion),
        ] {
            let accounts: Vec<String> = phase
                .accounts
                .iter()
                .enumerate()
                .map(|(i, a)| format!("{i}: {:.1} s / {:.1} s", a.seconds, a.lower_bound_s))
                .collect();
            out.push_str(&format!("{name} per account: {}\n", accounts.join(", ")));
        }
        out.push_str(&self.restart_line());
        if let Some(storm) = &self.storm {
            out.push_str(&storm.line());
        }
        for line in self.api_writes.lines() {
            out.push_str(&line);
            out.push('\n');
        }
        let lists: Vec<String> = self
            .api_server
            .list_seconds_by_kind
            .iter()
            .map(|(kind, (n, s))| format!("{kind} {n} in {:.2} s", s))
            .collect();
        let m = &self.memory;
        out.push_str(&format!(
            "API server: lists across every namespace: {}; RSS settled {:.1} MB, peak {:.1} MB, CPU {:.1} s\n",
            lists.join(", "),
            self.api_server.usage_settled.rss_bytes as f64 / MB,
            m.apiserver.peak_rss_bytes as f64 / MB,
            m.apiserver.cpu_seconds,
        ));
        out.push_str(&format!(
            "operator: idle {:.1} MB, all Ready {:.1} MB, settled {:.1} MB, peak {:.1} MB, restarted peak {:.1} MB, CPU {:.1} s; simulator peak {:.1} MB, CPU {:.1} s\n",
            m.operator_idle.rss_bytes as f64 / MB,
            m.operator_all_ready.rss_bytes as f64 / MB,
            m.operator_settled.rss_bytes as f64 / MB,
            m.operator_settled.peak_rss_bytes as f64 / MB,
            m.operator_restarted.peak_rss_bytes as f64 / MB,
            m.operator_cpu_s,
            m.simulator.peak_rss_bytes as f64 / MB,
            m.simulator.cpu_seconds,
        ));
        out
    }

    /// What the median restart re-adopted by kind, and its list-only bound's lists.
    fn restart_line(&self) -> String {
        let median = &self.restart.median;
        let kinds: Vec<String> = median
            .readopted_by_kind
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        format!(
            "median restart: re-adopted {} ({}), reconciled {}; every kind listed in {:.2} s by a new process, {:.2} s by the bench's, {:.2} s decoded whole\n",
            median.objects_readopted,
            kinds.join(", "),
            median.objects_reconciled,
            median.kube_list_s,
            median.kube_list_in_bench_s,
            median.kube_plain_list_s,
        )
    }

    /// All Ready (green), the first restart (orange), deletion (red).
    pub fn timeline_marks(&self) -> Vec<(f64, RGBColor)> {
        colored(&self.marks, &[READY_MARK, TURN_MARK, DELETION_MARK])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(seconds: f64, lower_bound_s: f64) -> BoundedPhase {
        BoundedPhase {
            seconds,
            calls_by_operation: BTreeMap::new(),
            minimum_calls: 0,
            cloud_time_s: 0.0,
            lower_bound_s,
            ratio: seconds / lower_bound_s,
        }
    }

    #[test]
    fn the_run_is_judged_on_the_slowest_account() {
        // The fast account's own ratio is poor, but the run ends with the slow account.
        let phases = AccountPhases::new(vec![phase(30.0, 10.0), phase(110.0, 100.0)]);
        assert_eq!((phases.seconds, phases.lower_bound_s), (110.0, 100.0));
        assert!((phases.ratio - 1.1).abs() < 1e-9);
        assert!(bounded_target("x", &phases.as_run()).pass);
        let late = AccountPhases::new(vec![phase(130.0, 10.0), phase(110.0, 100.0)]);
        assert!(!bounded_target("x", &late.as_run()).pass);
    }

    fn round(seconds: &[Option<f64>]) -> Vec<StormAccount> {
        seconds
            .iter()
            .map(|seconds| StormAccount {
                machines: 10,
                seconds: *seconds,
                calls_by_operation: BTreeMap::new(),
                created: 10,
                throttled: 0,
                server_errors: 0,
                deleted: 10,
            })
            .collect()
    }

    fn storm(reference: &[Option<f64>], stormed: &[Option<f64>]) -> Storm {
        Storm {
            machines: 10 * reference.len(),
            storm_account: 0,
            window_s: 300.0,
            fault_plan: serde_json::json!({"error_rate": 1.0, "accounts": [0]}),
            reference: round(reference),
            storm: round(stormed),
            recovered_after_s: Some(12.0),
        }
    }

    #[test]
    fn a_storm_is_judged_on_the_slowest_other_account_against_its_reference() {
        // The storm account's own time does not count; the slowest others are 10 s and 10.5 s.
        let within = storm(
            &[Some(9.0), Some(10.0), Some(8.0)],
            &[Some(400.0), Some(10.5), Some(9.0)],
        );
        assert_eq!(within.ratio(), Some(1.05));
        let target = within.target();
        assert!(target.pass, "{target:?}");
        assert!(
            target
                .measured
                .starts_with("1.05x: slowest other account 10.5 s in the storm, 10.0 s without"),
            "{target:?}"
        );
        // 11.5 s against 10 s: over 1.10.
        let slower = storm(&[Some(9.0), Some(10.0)], &[None, Some(11.5)]);
        assert!(!slower.target().pass);
        // Another account that never converged in the storm is measured, and fails.
        let stuck = storm(
            &[Some(9.0), Some(10.0), Some(8.0)],
            &[None, Some(9.0), None],
        );
        assert_eq!(stuck.ratio(), None);
        let target = stuck.target();
        assert!(
            !target.pass && target.measured.contains("not converged"),
            "{target:?}"
        );
        // Past the storm's window: still measured against the reference.
        let late = storm(&[Some(9.0), Some(200.0)], &[Some(9.0), Some(320.0)]);
        let target = late.target();
        assert!(
            !target.pass && target.measured.contains("past the 300 s storm"),
            "{target:?}"
        );
        // A single account has no other account to judge.
        assert_eq!(storm(&[Some(9.0)], &[Some(20.0)]).ratio(), None);
    }
}
