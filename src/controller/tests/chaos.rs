#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Seeded chaos runs. Each seed builds a small world in one process: the embedded API server,
//! a cloud simulator serving two accounts, and the operator (adoption allowed, duplicate grace
//! period 1 s). Three namespaces have objects: `team-a` (labelled for adoption) on the first
//! account through the default credentials and on the second through a Secret of its own,
//! `team-c` on the second account through its Secret, and `team-b`, a hostile tenant with its
//! own key to the first account (`chaos/tenant.rs`). Every team's key is its own, so the
//! simulator's ledger tells whose key made each call. Before the operator starts, the harness
//! makes one foreign resource of each basic kind in each account, and presets in the first
//! account for team-a to adopt by the `gpucloud.io/external-id` annotation, each kept in one
//! role for the run: managed, managed with `deletionPolicy: Orphan`, or `ObserveOnly`.
//!
//! Then a fault phase (`chaos/world.rs`): a few objects of every basic kind, presets adopted,
//! then 6 to 12 random actions 20 to 300 ms apart: SshKeys, GpuInstances, Volumes and Firewalls
//! created (some with `deletionPolicy: Orphan`, machines some with `Snapshot`, and some placed
//! by `spec.placement`: H100 while the first account's scarce H100 stock lasts, refused by the
//! cloud when the catalog read earlier still shows some, else L40S) in one of the
//! three team and account groups,
//! Snapshots of running machines, Images of snapshots, Volumes cloned from volumes, machines
//! restored from snapshots, presets adopted again once let go, deletes (a snapshot taking its
//! images with it, or held by a machine being restored from it), power changes, attach and
//! detach, resizes, rule and firewall target changes; operator kills at random and at crash
//! points (one of them a final snapshot recorded before its machine's delete), watch disconnects, 410 Gone, 429 storms; in half the seeds one mass deletion of all
//! or about half the teams' objects at once, and in a third one late create (the cloud carries
//! out an object's first create 5 to 7.5 s after it arrived, past the client's timeout and the
//! settle window, so the retry makes a duplicate). All under a seeded fault plan: cloud errors, 429
//! bursts, latency past the client timeout, lost responses, lists lagging and leaving out
//! what exists, status-write conflicts, cut watches. Meanwhile the tenant attacks team-a's and
//! team-c's resources and the foreign ones by id.
//!
//! Once the faults are lifted, checked against the simulator's records: every object reaches
//! its desired state with exactly one cloud resource in its own account (an Image whose
//! snapshot was deleted says `SourceDeleted` and owns none), every late create landed and its
//! duplicate reported (`DuplicateFound`) and deleted, foreign and observed resources exactly as
//! made; no secret in any object, event or log line; every hostile object refused. Then every
//! object is deleted: nothing left in either account but what `Orphan` objects and adoptions
//! left on purpose (each still there, then removed by the harness), exactly one available final
//! snapshot of each `Snapshot` machine that recorded its id and none of a machine still there,
//! no finalizer, billing back
//! to the foreign resources' alone, and in the ledger no call of a team's key naming another
//! team's, a foreign or an observed resource, nor a create without the team's mark.
//!
//! `GPUCLOUD_CHAOS_SEED=N` replays one seed (printing its trace); `GPUCLOUD_CHAOS_SEEDS=N`
//! runs seeds 1..=N (default 200, about 6 min on a 2-core machine; the long mode is 2,000),
//! from `GPUCLOUD_CHAOS_FIRST` instead of 1 if set;
//! `GPUCLOUD_CHAOS_CONCURRENCY` sets how many worlds run at once (default 8). See
//! docs/reliability.md.
// Every function, tests included, stays within clippy's default of 100 lines: a longer one
// is split into named steps.
#![warn(clippy::too_many_lines)]

mod support;

#[path = "chaos/capture.rs"]
mod capture;
#[path = "chaos/checks.rs"]
mod checks;
#[path = "chaos/model.rs"]
mod model;
#[path = "chaos/pools.rs"]
mod pools;
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
    /// Of the attacks: statuses forged, machines booting another's image, pools adopting,
    /// leftovers (boot volumes, final snapshots) adopted.
    pub forged_statuses: u64,
    pub boot_attacks: u64,
    pub pool_attacks: u64,
    pub leftover_attacks: u64,
    /// Samples of the tenant invariants (no foreign id recorded, team-a ids unchanged).
    pub tenant_samples: u64,
    /// Objects on the second account (team-a's through its Secret, and team-c's).
    pub second_account_objects: u64,
    pub snapshots: u64,
    pub images: u64,
    pub clones: u64,
    pub restores: u64,
    /// GpuInstances placed by `spec.placement`.
    pub placed: u64,
    /// Snapshots deleted while a machine was still to be restored from them.
    pub snapshot_deletions_held: u64,
    /// Images the cloud removed with their deleted snapshot.
    pub images_removed_with_snapshot: u64,
    /// Objects adopting a preset by the `external-id` annotation.
    pub adoptions: u64,
    /// Of those, objects only observing (`ObserveOnly`).
    pub observe_only_objects: u64,
    /// Objects created with `deletionPolicy: Orphan`.
    pub orphan_objects: u64,
    /// Resources found left behind on purpose once everything was deleted.
    pub kept_after_delete: u64,
    /// GpuInstances created with `deletionPolicy: Snapshot`.
    pub final_snapshot_objects: u64,
    /// Final snapshots found in the cloud once everything was deleted, one per machine.
    pub final_snapshots: u64,
    /// Operator kills right after a final snapshot was recorded, before its machine's delete.
    pub final_snapshot_kills: u64,
    pub mass_deletions: u64,
    /// Objects deleted by the mass deletions.
    pub mass_deleted: u64,
    /// Objects whose first create the cloud was told to carry out late.
    pub late_creates_armed: u64,
    /// Creates the cloud held and carried out late.
    pub late_acts: u64,
    /// Second resources those made (duplicates), each reported and deleted.
    pub late_duplicates: u64,
    /// Objects with a duplicate found reported by a `DuplicateFound` event.
    pub duplicates_reported: u64,
    /// Items the cloud's lists left out although they existed.
    pub omitted_from_lists: u64,
    /// Calls of the teams' keys checked in the simulator's ledger.
    pub ledger_calls: u64,
    /// Requests the cloud received until the faults were lifted (every key, every outcome).
    pub cloud_calls_in_faults: u64,
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
        self.forged_statuses += other.forged_statuses;
        self.boot_attacks += other.boot_attacks;
        self.pool_attacks += other.pool_attacks;
        self.leftover_attacks += other.leftover_attacks;
        self.tenant_samples += other.tenant_samples;
        self.second_account_objects += other.second_account_objects;
        self.snapshots += other.snapshots;
        self.images += other.images;
        self.clones += other.clones;
        self.restores += other.restores;
        self.placed += other.placed;
        self.snapshot_deletions_held += other.snapshot_deletions_held;
        self.images_removed_with_snapshot += other.images_removed_with_snapshot;
        self.adoptions += other.adoptions;
        self.observe_only_objects += other.observe_only_objects;
        self.orphan_objects += other.orphan_objects;
        self.kept_after_delete += other.kept_after_delete;
        self.final_snapshot_objects += other.final_snapshot_objects;
        self.final_snapshots += other.final_snapshots;
        self.final_snapshot_kills += other.final_snapshot_kills;
        self.mass_deletions += other.mass_deletions;
        self.mass_deleted += other.mass_deleted;
        self.late_creates_armed += other.late_creates_armed;
        self.late_acts += other.late_acts;
        self.late_duplicates += other.late_duplicates;
        self.duplicates_reported += other.duplicates_reported;
        self.omitted_from_lists += other.omitted_from_lists;
        self.ledger_calls += other.ledger_calls;
        self.cloud_calls_in_faults += other.cloud_calls_in_faults;
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

/// Every 100 seeds of a long run, how far it is and how many tasks the runtime holds: a count
/// that grows from one hundred to the next is a task outliving its world.
fn progress(what: &str, done: usize, count: usize, started: Instant) {
    if done.is_multiple_of(100) && done < count {
        eprintln!(
            "{what}: {done} of {count} seeds in {:.0}s, {} tasks alive",
            started.elapsed().as_secs_f64(),
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        );
    }
}

/// The invariant a failure broke, for the summary.
fn classify(message: &str) -> &'static str {
    if message.starts_with("tenant:") || message.contains("not refused with") {
        "tenant"
    } else if message.starts_with("touched:") || message.contains("foreign resources of") {
        "touched"
    } else if message.contains("operator resources in the cloud")
        || message.contains("DuplicateFound")
    {
        "duplicate"
    } else if message.contains("leaked")
        || message.contains("billing did not stop")
        || message.contains("left in account")
    {
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
        None => {
            let first = env_number("GPUCLOUD_CHAOS_FIRST").unwrap_or(1);
            (first..=env_number("GPUCLOUD_CHAOS_SEEDS").unwrap_or(200)).collect()
        }
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
    let mut done = 0;
    while let Some(result) = results.next().await {
        done += 1;
        progress("chaos", done, count, started);
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
         stuck finalizers {}, not converged {}, tenant {}, touched {}, other {}); {} log lines scanned, {} with secrets\n  {total:?}",
        started.elapsed().as_secs_f64(),
        total.runs,
        failures.len(),
        failed_with("duplicate"),
        failed_with("leak"),
        failed_with("stuck finalizer"),
        failed_with("not converged"),
        failed_with("tenant"),
        failed_with("touched"),
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

/// GpuInstancePools under operator kills, lost create answers and stale views
/// (`chaos/pools.rs`): exactly `replicas` machines and no machine made twice, in every seed.
/// The same seeds as the world runs (`GPUCLOUD_CHAOS_SEED`, `GPUCLOUD_CHAOS_SEEDS`,
/// `GPUCLOUD_CHAOS_FIRST`, `GPUCLOUD_CHAOS_CONCURRENCY`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_pool_runs_keep_exactly_replicas() {
    let seeds: Vec<u64> = match env_number("GPUCLOUD_CHAOS_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_number("GPUCLOUD_CHAOS_FIRST").unwrap_or(1);
            (first..=env_number("GPUCLOUD_CHAOS_SEEDS").unwrap_or(200)).collect()
        }
    };
    let concurrency = env_number("GPUCLOUD_CHAOS_CONCURRENCY").unwrap_or(8).max(1) as usize;
    let started = Instant::now();
    let count = seeds.len();
    let mut results = futures::stream::iter(seeds)
        .map(|seed| async move {
            let run = tokio::time::timeout(RUN_BOUND, pools::run_seed(seed));
            match tokio::spawn(run).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err(world::Failure {
                    seed,
                    message: format!(
                        "pool: the run did not finish within {}s",
                        RUN_BOUND.as_secs()
                    ),
                    trace: Vec::new(),
                }),
                Err(panic) => Err(world::Failure {
                    seed,
                    message: format!("pool: the run panicked: {panic}"),
                    trace: Vec::new(),
                }),
            }
        })
        .buffer_unordered(concurrency);
    let mut total = pools::PoolStats::default();
    let mut failures = Vec::new();
    let mut done = 0;
    while let Some(result) = results.next().await {
        done += 1;
        progress("pool chaos", done, count, started);
        match result {
            Ok(stats) => total.add(&stats),
            Err(failure) => {
                eprintln!(
                    "pool chaos seed {} FAILED: {}\n  replay: GPUCLOUD_CHAOS_SEED={} cargo test -p gpucloud-controller --test chaos seeded_pool\n  trace:\n    {}",
                    failure.seed,
                    failure.message,
                    failure.seed,
                    failure.trace.join("\n    ")
                );
                failures.push(failure.seed);
            }
        }
    }
    eprintln!(
        "pool chaos: {count} seeds in {:.1}s ({} passed, {} failed)\n  {total:?}",
        started.elapsed().as_secs_f64(),
        total.runs,
        failures.len(),
    );
    assert!(failures.is_empty(), "pool chaos seeds failed: {failures:?}");
}
