#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Seeded chaos runs. Each seed builds a small world (embedded API server, cloud simulator,
//! operator) with foreign resources in the account, changes objects of every kind at random
//! while a seeded fault plan injects cloud errors, 429 storms, latency past the client
//! timeout, lost responses, lagging lists, operator kills (at random and at crash points),
//! watch disconnects, 410 Gone and status-write conflicts; then lifts the faults and checks:
//! every object reaches its desired state with exactly one cloud resource, foreign resources
//! are untouched, deleting everything leaves nothing billed behind and no finalizer, and no
//! secret appears in any log line, event, status or error.
//!
//! Meanwhile a hostile tenant (`chaos/tenant.rs`, namespace `team-b`, not labelled for
//! adoption, with its own random stream) names team-a's resources (read from their objects'
//! status, or from the account) and the foreign ones by id: objects created with the
//! `gpucloud.io/external-id` annotation and hostile specs (machines stopped, firewalls open to
//! the world), ordinary objects of its own patched to such an annotation later, Snapshots of
//! others' machines by `spec.instanceId`, and random deletes of all of these. Sampled at every
//! attack and at the end: no tenant object ever records a resource not its own, and no team-a
//! object's recorded id ever changes. Once the faults are lifted every hostile object must be
//! `Stalled` with `AlreadyOwned` or `AdoptionNotAllowed` (only the latter for a foreign
//! resource) without naming team-a, the deleted ones gone; deleting everything includes the
//! tenant's objects, and no snapshot may ever have been created.
//!
//! `GPUCLOUD_CHAOS_SEED=N` replays one seed (printing its trace); `GPUCLOUD_CHAOS_SEEDS=N`
//! runs seeds 1..=N (default 200); `GPUCLOUD_CHAOS_CONCURRENCY` sets how many worlds run at
//! once (default 8). See docs/reliability.md.

mod support;

#[path = "chaos/capture.rs"]
mod capture;
#[path = "chaos/tenant.rs"]
mod tenant;
#[path = "chaos/world.rs"]
mod world;

use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Every API key of a chaos run starts with this, so any leak of any run's key is found.
pub const API_KEY_MARK: &str = "chaos-api-key-";

/// What one run did, summed over runs for the report.
#[derive(Debug, Default, Clone)]
pub struct RunStats {
    pub runs: u64,
    pub objects: u64,
    pub updates: u64,
    pub kills: u64,
    pub crash_points_armed: u64,
    pub compactions: u64,
    pub storms: u64,
    pub throttled: u64,
    pub internal_errors: u64,
    pub latency_spikes: u64,
    pub dropped_responses: u64,
    pub status_conflicts: u64,
    pub watches_cut: u64,
    pub events: u64,
    pub converge_ms: u64,
    pub delete_ms: u64,
    /// The hostile tenant's objects naming another's resource (created so, or patched).
    pub attacks: u64,
    /// Hostile objects found refused (`AlreadyOwned`, `AdoptionNotAllowed`) at the end.
    pub attacks_refused: u64,
    /// Hostile objects deleted during the fault phase.
    pub hostile_deleted: u64,
    /// Samples of the tenant invariants (no foreign id recorded, team-a ids unchanged).
    pub tenant_samples: u64,
}

impl RunStats {
    fn add(&mut self, other: &RunStats) {
        self.runs += 1;
        self.objects += other.objects;
        self.updates += other.updates;
        self.kills += other.kills;
        self.crash_points_armed += other.crash_points_armed;
        self.compactions += other.compactions;
        self.storms += other.storms;
        self.throttled += other.throttled;
        self.internal_errors += other.internal_errors;
        self.latency_spikes += other.latency_spikes;
        self.dropped_responses += other.dropped_responses;
        self.status_conflicts += other.status_conflicts;
        self.watches_cut += other.watches_cut;
        self.events += other.events;
        self.converge_ms += other.converge_ms;
        self.delete_ms += other.delete_ms;
        self.attacks += other.attacks;
        self.attacks_refused += other.attacks_refused;
        self.hostile_deleted += other.hostile_deleted;
        self.tenant_samples += other.tenant_samples;
    }
}

/// How long one seed may run before it counts as failed.
const RUN_BOUND: Duration = Duration::from_secs(280);

/// Seeds running now, with their start. Read from a plain thread, so a run that starves the
/// async runtime (where no timeout can fire) is still named before the environment's
/// watchdog ends the process.
static IN_FLIGHT: Mutex<BTreeMap<u64, Instant>> = Mutex::new(BTreeMap::new());

fn report_overdue_seeds() {
    std::thread::spawn(|| {
        let mut reported = BTreeSet::new();
        loop {
            std::thread::sleep(Duration::from_secs(5));
            let in_flight = IN_FLIGHT.lock().map(|m| m.clone()).unwrap_or_default();
            for (seed, started) in in_flight {
                if started.elapsed() > RUN_BOUND + Duration::from_secs(5) && reported.insert(seed) {
                    eprintln!(
                        "chaos seed {seed} still running after {}s: its runtime is starved \
                         (replay: GPUCLOUD_CHAOS_SEED={seed})",
                        started.elapsed().as_secs()
                    );
                }
            }
        }
    });
}

/// The invariant a failure broke, for the summary.
fn classify(message: &str) -> &'static str {
    if message.starts_with("tenant:") || message.contains("not refused with") {
        "tenant"
    } else if message.contains("operator resources in the cloud") {
        "duplicate"
    } else if message.contains("leaked") || message.contains("billing did not stop") {
        "leak"
    } else if message.contains("stuck finalizers") {
        "stuck finalizer"
    } else if message.contains("not converged") || message.contains("stuck without") {
        "not converged"
    } else {
        "other"
    }
}

fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a whole number")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_chaos_runs_keep_every_invariant() {
    let capture = capture::install();
    let replay = env_number("GPUCLOUD_CHAOS_SEED");
    let seeds: Vec<u64> = match replay {
        Some(seed) => vec![seed],
        None => (1..=env_number("GPUCLOUD_CHAOS_SEEDS").unwrap_or(200)).collect(),
    };
    let concurrency = env_number("GPUCLOUD_CHAOS_CONCURRENCY").unwrap_or(8).max(1) as usize;
    let started = Instant::now();
    let count = seeds.len();
    report_overdue_seeds();
    let mut results = futures::stream::iter(seeds)
        .map(|seed| async move {
            // Each run is its own task, so a panic inside one names its seed; a run past its
            // bound is a failure, never a hang.
            if let Ok(mut in_flight) = IN_FLIGHT.lock() {
                in_flight.insert(seed, Instant::now());
            }
            let run = tokio::time::timeout(RUN_BOUND, world::run_seed(seed));
            let task = tokio::spawn(tracing::Instrument::instrument(
                run,
                tracing::info_span!("world", seed),
            ));
            let outcome = task.await;
            if let Ok(mut in_flight) = IN_FLIGHT.lock() {
                in_flight.remove(&seed);
            }
            let log = capture.take_world(seed);
            match outcome {
                Ok(Ok(Err(mut failure))) => {
                    let stuck = capture::log_of_stuck_objects(&failure.message, &log);
                    if !stuck.is_empty() {
                        failure.trace.push(stuck);
                    }
                    Err(failure)
                }
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err(world::Failure {
                    seed,
                    message: format!("the run did not finish within {}s", RUN_BOUND.as_secs()),
                    trace: Vec::new(),
                }),
                Err(panic) => Err(world::Failure {
                    seed,
                    message: format!("the run panicked: {panic}"),
                    trace: Vec::new(),
                }),
            }
        })
        .buffer_unordered(concurrency);

    let mut total = RunStats::default();
    let mut failures = Vec::new();
    while let Some(result) = results.next().await {
        match result {
            Ok(stats) => total.add(&stats),
            Err(failure) => {
                eprintln!(
                    "chaos seed {} FAILED: {}\n  replay: GPUCLOUD_CHAOS_SEED={} cargo test -p gpucloud-controller --test chaos\n  trace:\n    {}",
                    failure.seed,
                    failure.message,
                    failure.seed,
                    failure.trace.join("\n    ")
                );
                failures.push((failure.seed, classify(&failure.message)));
            }
        }
    }
    let offending = capture.offending();
    let failed_with = |class: &str| failures.iter().filter(|(_, c)| *c == class).count();
    eprintln!(
        "chaos: {count} seeds in {:.1}s ({} passed, {} failed: duplicates {}, leaks {}, \
         stuck finalizers {}, not converged {}, tenant {}, other {}); {} log lines scanned, {} with secrets\n  {total:?}",
        started.elapsed().as_secs_f64(),
        total.runs,
        failures.len(),
        failed_with("duplicate"),
        failed_with("leak"),
        failed_with("stuck finalizer"),
        failed_with("not converged"),
        failed_with("tenant"),
        failed_with("other"),
        capture.lines(),
        offending.len(),
    );
    assert!(
        failures.is_empty(),
        "chaos seeds failed: {failures:?} (each printed with its trace above)"
    );
    assert!(
        offending.is_empty(),
        "secrets in log lines:\n{}",
        offending.join("\n")
    );
    assert!(capture.lines() > 0, "no log line was captured");
}
