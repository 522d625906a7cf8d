//! The result of a run: what was measured, the targets as pass/fail, the JSON file
//! and the printed table.

pub mod tenants;

use crate::args::Scenario;
use crate::process::ProcessUsage;
use plotters::style::RGBColor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Settings of the run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    /// `instances` or `pool` (runs written before pools were benchmarked: `instances`).
    #[serde(default)]
    pub scenario: Scenario,
    pub objects: usize,
    pub latency_ms: u64,
    pub rate_limit: f64,
    pub simulator_burst: u32,
    pub operator_burst: u32,
    pub concurrency: u16,
    /// The operator's `--kube-api-qps` (0: none).
    #[serde(default)]
    pub kube_api_qps: f64,
    pub resync_interval_s: f64,
    pub quiet_wait_s: f64,
    pub settled_window_s: f64,
    pub new_objects: usize,
    pub writers: usize,
}

/// A phase bounded by the cloud: time, calls, and its lower bound.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BoundedPhase {
    pub seconds: f64,
    pub calls_by_operation: BTreeMap<String, u64>,
    /// Calls any design must make: one per created (or deleted) resource plus one list per
    /// kind to see the result.
    pub minimum_calls: u64,
    /// The cloud's own time for the phase's last resource, which no client can shorten: its
    /// `CREATING` and `BOOTING` for a create, `DELETING` for a delete.
    #[serde(default)]
    pub cloud_time_s: f64,
    /// max(minimum_calls / R, L x minimum_calls / concurrency) + cloud_time_s.
    pub lower_bound_s: f64,
    pub ratio: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FirstReconcile {
    pub count: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Settled {
    pub window_s: f64,
    pub objects: usize,
    pub calls_by_operation: BTreeMap<String, u64>,
    /// Most list calls of any one operation in the window.
    pub max_lists_per_kind: u64,
    /// Resync intervals in the window (window / interval).
    pub intervals: f64,
    /// Calls other than lists and per-account reads.
    pub per_object_calls: u64,
    /// Per-account reads (the balance), at most one per account per resync interval.
    pub per_account_calls: u64,
    /// What one read per object per resync interval would have made in the same window.
    pub per_object_polling_calls: u64,
}

/// The operator restarted with everything settled, several times: one restart takes a
/// fraction of a second, and a single one moves with whatever else the machine does.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Restart {
    /// Each restart, in order.
    pub runs: Vec<RestartRun>,
    /// The run with the median ratio (of an even number, the higher of the middle two).
    pub median: RestartRun,
    /// Cloud writes over all runs.
    pub cloud_writes: u64,
}

impl Restart {
    /// `None` without runs.
    pub fn from_runs(runs: Vec<RestartRun>) -> Option<Restart> {
        let mut by_ratio: Vec<&RestartRun> = runs.iter().collect();
        by_ratio.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
        let median = (*by_ratio.get(by_ratio.len() / 2)?).clone();
        Some(Restart {
            cloud_writes: runs.iter().map(|r| r.cloud_writes).sum(),
            median,
            runs,
        })
    }
}

/// One restart.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RestartRun {
    /// From starting the new operator process until every object was re-adopted: the startup
    /// check of each kind waited for had found its objects settled and as the cloud lists them.
    pub seconds: f64,
    /// Objects the operator found settled and as the cloud lists them, not reconciled.
    pub objects_readopted: usize,
    /// Settled objects the startup checks found listed otherwise by the cloud, reconciled at
    /// once (a restart counts as re-adopting everything only with none).
    pub objects_reconciled: usize,
    /// `objects_readopted` by kind (runs written before it was kept: empty).
    #[serde(default)]
    pub readopted_by_kind: BTreeMap<String, usize>,
    /// Per kind, the settled objects the startup checks did not re-adopt (a kind re-adopted
    /// whole is absent): the restart fails its target, and the run goes on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_readopted_by_kind: BTreeMap<String, usize>,
    pub calls_by_operation: BTreeMap<String, u64>,
    pub cloud_writes: u64,
    /// The time a new process needs, just before the restart, from its start until it has
    /// listed every object from the API server, decoded as the operator decodes them (without
    /// `managedFields`): `scale-bench --list-only`.
    pub kube_list_s: f64,
    /// The same list by the bench itself, whose process, connection and heap are warm: for
    /// comparison, not a bound (no restarted process starts warm).
    pub kube_list_in_bench_s: f64,
    /// The same list decoded whole, as a plain client decodes it: for comparison, not a bound.
    pub kube_plain_list_s: f64,
    /// kube_list_s plus the cloud lists' bound (calls / R, or L per list); with several
    /// accounts, each listed at its own R in parallel, the slowest account's.
    pub lower_bound_s: f64,
    pub ratio: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Memory {
    pub operator_idle: ProcessUsage,
    /// When 1,000 objects were Ready (runs with more than 1,000 objects).
    pub operator_at_1000: Option<ProcessUsage>,
    pub operator_all_ready: ProcessUsage,
    pub operator_settled: ProcessUsage,
    /// The restarted operator with the highest peak, after re-adopting everything (its peak
    /// is the re-list's).
    pub operator_restarted: ProcessUsage,
    /// (settled RSS - idle RSS) / objects.
    pub slope_bytes_per_object: f64,
    /// (RSS with N - RSS with 1,000) / (N - 1,000), when measured.
    pub slope_1000_to_n_bytes_per_object: Option<f64>,
    pub apiserver: ProcessUsage,
    pub simulator: ProcessUsage,
    /// CPU seconds of the first operator process (convergence, settled window).
    pub operator_cpu_s: f64,
}

/// The operator's writes to the API server in one stretch of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseWrites {
    /// Writes by `verb resource` (`update gpuinstances/status`), any answer.
    pub by_request: BTreeMap<String, u64>,
    /// Of those, the ones answered 409 Conflict.
    pub conflicts: u64,
    /// The ones answered 409 Conflict, by `verb resource`.
    #[serde(default)]
    pub conflicts_by_request: BTreeMap<String, u64>,
    /// All writes over the objects.
    pub per_object: f64,
    /// Every request, reads and watches included, over the objects: what a client-side limit
    /// (`--kube-api-qps`) paces.
    #[serde(default)]
    pub requests_per_object: f64,
}

impl PhaseWrites {
    pub fn new(
        by_request: BTreeMap<String, u64>,
        conflicts_by_request: BTreeMap<String, u64>,
        requests: u64,
        objects: usize,
    ) -> PhaseWrites {
        let total: u64 = by_request.values().sum();
        PhaseWrites {
            per_object: total as f64 / objects.max(1) as f64,
            requests_per_object: requests as f64 / objects.max(1) as f64,
            by_request,
            conflicts: conflicts_by_request.values().sum(),
            conflicts_by_request,
        }
    }

    pub fn total(&self) -> u64 {
        self.by_request.values().sum()
    }
}

/// What the operator wrote to the API server (Events included), per object: from the first
/// apply until everything was Ready and the quiet wait had passed (the SSH key's writes
/// included), in the settled window and the restarts, and from the first delete until the
/// operator stopped.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ApiWrites {
    pub objects: usize,
    pub create_to_ready: PhaseWrites,
    pub settled_and_restarts: PhaseWrites,
    pub delete: PhaseWrites,
    /// All three over the objects: an object's whole life.
    pub per_object: f64,
}

impl ApiWrites {
    pub fn new(
        objects: usize,
        create_to_ready: PhaseWrites,
        settled_and_restarts: PhaseWrites,
        delete: PhaseWrites,
    ) -> ApiWrites {
        let total = create_to_ready.total() + settled_and_restarts.total() + delete.total();
        ApiWrites {
            objects,
            per_object: total as f64 / objects.max(1) as f64,
            create_to_ready,
            settled_and_restarts,
            delete,
        }
    }

    /// One line per phase: its writes per object, then per object by request.
    pub fn lines(&self) -> Vec<String> {
        phase_lines(
            self.objects,
            &[
                ("create to Ready", &self.create_to_ready),
                ("settled, restarts", &self.settled_and_restarts),
                ("delete", &self.delete),
            ],
        )
    }
}

/// One line per named phase: its writes per object, then per object by request.
fn phase_lines(objects: usize, phases: &[(&str, &PhaseWrites)]) -> Vec<String> {
    let objects = objects.max(1) as f64;
    phases
        .iter()
        .map(|(name, phase)| {
            let requests: Vec<String> = phase
                .by_request
                .iter()
                .map(|(request, n)| format!("{request} {:.2}", *n as f64 / objects))
                .collect();
            let conflicts: Vec<String> = phase
                .conflicts_by_request
                .iter()
                .map(|(request, n)| format!("{request} {n}"))
                .collect();
            format!(
                "API writes per object, {name}: {:.2} ({}; {} answered 409{}); all requests {:.2}",
                phase.per_object,
                if requests.is_empty() {
                    "none".to_string()
                } else {
                    requests.join(", ")
                },
                phase.conflicts,
                if conflicts.is_empty() {
                    String::new()
                } else {
                    format!(": {}", conflicts.join(", "))
                },
                phase.requests_per_object
            )
        })
        .collect()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Target {
    pub name: String,
    pub target: String,
    pub measured: String,
    pub pass: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BenchResult {
    pub settings: Settings,
    pub convergence: BoundedPhase,
    pub first_reconcile: FirstReconcile,
    pub settled: Settled,
    pub restart: Restart,
    pub deletion: BoundedPhase,
    pub memory: Memory,
    /// 429 answers over the whole run.
    pub throttled: u64,
    /// Every call over the whole run by operation.
    pub calls_by_operation: BTreeMap<String, u64>,
    /// The operator's writes to the API server.
    pub api_writes: ApiWrites,
    /// (seconds since start, Ready objects).
    pub timeline: Vec<(f64, usize)>,
    /// Seconds since start of: all N Ready, the operator restart, the start of deletion.
    pub marks: Vec<f64>,
    pub targets: Vec<Target>,
}

/// max(calls / R, L x calls / concurrency), in seconds.
pub fn lower_bound_seconds(calls: u64, rate: f64, latency_ms: u64, concurrency: u16) -> f64 {
    let by_rate = calls as f64 / rate;
    let by_latency = latency_ms as f64 / 1000.0 * calls as f64 / f64::from(concurrency.max(1));
    by_rate.max(by_latency)
}

/// The value at quantile `q` (0..=1) of `values`, nearest rank.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

const MB: f64 = 1_000_000.0;

/// Colours of the plot's phase markers: everything Ready, a turn (a restart, a pool scaled to
/// N), the deletion's start.
const READY_MARK: RGBColor = RGBColor(0, 160, 0);
const TURN_MARK: RGBColor = RGBColor(230, 140, 0);
const DELETION_MARK: RGBColor = RGBColor(210, 0, 0);

/// `marks` paired with `colors` in order (a mark without a colour is left out).
fn colored(marks: &[f64], colors: &[RGBColor]) -> Vec<(f64, RGBColor)> {
    marks.iter().copied().zip(colors.iter().copied()).collect()
}

impl Settings {
    /// The first line of the printed table.
    fn headline(&self) -> String {
        format!(
            "N = {}, L = {} ms, R = {}/s (operator --rate-limit {} --rate-burst {} --kube-api-qps {})\n",
            self.objects,
            self.latency_ms,
            self.rate_limit,
            self.rate_limit,
            self.operator_burst,
            self.kube_api_qps
        )
    }
}

/// One line per target: name, target, PASS or FAIL, what was measured.
fn targets_table(targets: &[Target]) -> String {
    let name_width = targets.iter().map(|t| t.name.len()).max().unwrap_or(0);
    let target_width = targets.iter().map(|t| t.target.len()).max().unwrap_or(0);
    targets
        .iter()
        .map(|t| {
            format!(
                "{:<name_width$}  {:<target_width$}  {}  {}\n",
                t.name,
                t.target,
                if t.pass { "PASS" } else { "FAIL" },
                t.measured,
            )
        })
        .collect()
}

/// A phase's time against its lower bound, within 1.25 times.
fn bounded_target(name: &str, phase: &BoundedPhase) -> Target {
    Target {
        name: name.into(),
        target: "<= 1.25 x lower bound".into(),
        measured: format!(
            "{:.1} s / {:.1} s = {:.2}x",
            phase.seconds, phase.lower_bound_s, phase.ratio
        ),
        pass: phase.ratio <= 1.25,
    }
}

/// Restarts with everything settled: every object re-adopted in every run, no cloud write,
/// and the median run within 1.1 times its list-only bound.
fn restart_target(restart: &Restart) -> Target {
    let ratios: Vec<String> = restart
        .runs
        .iter()
        .map(|run| format!("{:.2}x", run.ratio))
        .collect();
    let short: Vec<String> = restart
        .runs
        .iter()
        .enumerate()
        .filter(|(_, run)| !run.not_readopted_by_kind.is_empty())
        .map(|(i, run)| {
            let kinds: Vec<String> = run
                .not_readopted_by_kind
                .iter()
                .map(|(kind, n)| format!("{kind} {n}"))
                .collect();
            format!("run {} did not re-adopt {}", i + 1, kinds.join(", "))
        })
        .collect();
    let mut measured = format!(
        "{} writes, median {:.2} s / {:.2} s = {:.2}x ({})",
        restart.cloud_writes,
        restart.median.seconds,
        restart.median.lower_bound_s,
        restart.median.ratio,
        ratios.join(", ")
    );
    if !short.is_empty() {
        measured.push_str(&format!("; {}", short.join("; ")));
    }
    Target {
        name: "restart".into(),
        target: "every object re-adopted, 0 writes, median <= 1.1 x list-only bound".into(),
        measured,
        pass: short.is_empty() && restart.cloud_writes == 0 && restart.median.ratio <= 1.1,
    }
}

/// No 429 answer over the run.
fn throttled_target(throttled: u64) -> Target {
    Target {
        name: "429 absorbed".into(),
        target: "0 answers 429".into(),
        measured: format!("{throttled}"),
        pass: throttled == 0,
    }
}

impl BenchResult {
    /// The targets, judged on this run.
    pub fn judge(&mut self) {
        let mut targets = Vec::new();
        targets.push(bounded_target("convergence", &self.convergence));
        let s = &self.settled;
        let list_budget = (2.0 * s.intervals).ceil() as u64;
        let account_budget = s.intervals.ceil() as u64 * crate::counters::PER_ACCOUNT.len() as u64;
        targets.push(Target {
            name: "settled traffic".into(),
            target: format!(
                "<= 2 lists per kind per interval ({list_budget}), <= 1 balance, billing, catalog and price read per interval ({account_budget} calls), 0 per-object"
            ),
            measured: format!(
                "max {} lists per kind, {} balance, billing, catalog and price calls, {} per-object (polling design: {})",
                s.max_lists_per_kind,
                s.per_account_calls,
                s.per_object_calls,
                s.per_object_polling_calls
            ),
            pass: s.max_lists_per_kind <= list_budget
                && s.per_account_calls <= account_budget
                && s.per_object_calls == 0,
        });
        let m = &self.memory;
        targets.push(Target {
            name: "memory idle".into(),
            target: "< 50 MB".into(),
            measured: format!("{:.1} MB", m.operator_idle.rss_bytes as f64 / MB),
            pass: (m.operator_idle.rss_bytes as f64) < 50.0 * MB,
        });
        let slope = m
            .slope_1000_to_n_bytes_per_object
            .unwrap_or(m.slope_bytes_per_object);
        targets.push(Target {
            name: "memory per object".into(),
            target: "<= 10 KB".into(),
            measured: format!("{:.2} KB", slope / 1000.0),
            pass: slope <= 10_000.0,
        });
        let settled_rss = m.operator_settled.rss_bytes as f64;
        let relist_peak = m.operator_restarted.peak_rss_bytes as f64;
        targets.push(Target {
            name: "memory on re-list".into(),
            target: "peak <= 2 x settled".into(),
            measured: format!(
                "{:.1} MB peak / {:.1} MB settled",
                relist_peak / MB,
                settled_rss / MB
            ),
            pass: relist_peak <= 2.0 * settled_rss,
        });
        let f = &self.first_reconcile;
        targets.push(Target {
            name: "first reconcile".into(),
            target: "p99 <= 1 s".into(),
            measured: format!(
                "p99 {:.0} ms (p50 {:.0} ms, n = {})",
                f.p99_ms, f.p50_ms, f.count
            ),
            pass: f.p99_ms <= 1000.0,
        });
        targets.push(restart_target(&self.restart));
        targets.push(throttled_target(self.throttled));
        targets.push(bounded_target("deletion", &self.deletion));
        let w = &self.api_writes;
        targets.push(Target {
            name: "API writes".into(),
            target: "<= 6 per object, create to Ready to deleted (events included)".into(),
            measured: format!(
                "{:.2} per object ({:.2} to Ready, {:.2} settled, {:.2} delete)",
                w.per_object,
                w.create_to_ready.per_object,
                w.settled_and_restarts.per_object,
                w.delete.per_object
            ),
            pass: w.per_object <= 6.0,
        });
        self.targets = targets;
    }

    /// The table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let s = &self.settings;
        out.push_str(&s.headline());
        out.push_str(&targets_table(&self.targets));
        for line in self.api_writes.lines() {
            out.push_str(&line);
            out.push('\n');
        }
        let m = &self.memory;
        out.push_str(&format!(
            "operator: idle {:.1} MB, all Ready {:.1} MB, settled {:.1} MB, peak {:.1} MB, CPU {:.1} s; \
             apiserver peak {:.1} MB, CPU {:.1} s; simulator peak {:.1} MB, CPU {:.1} s\n",
            m.operator_idle.rss_bytes as f64 / MB,
            m.operator_all_ready.rss_bytes as f64 / MB,
            m.operator_settled.rss_bytes as f64 / MB,
            m.operator_settled.peak_rss_bytes as f64 / MB,
            m.operator_cpu_s,
            m.apiserver.peak_rss_bytes as f64 / MB,
            m.apiserver.cpu_seconds,
            m.simulator.peak_rss_bytes as f64 / MB,
            m.simulator.cpu_seconds,
        ));
        out
    }

    /// Phase boundaries for the plot: converged (green), restart (orange), deletion (red).
    pub fn timeline_marks(&self) -> Vec<(f64, RGBColor)> {
        colored(&self.marks, &[READY_MARK, TURN_MARK, DELETION_MARK])
    }

    pub fn all_pass(&self) -> bool {
        self.targets.iter().all(|t| t.pass)
    }
}

// === impl PoolResult ===

/// A pool's machines, counted in the cloud and in the API server.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PoolMachines {
    /// Machines the cloud held once the pool was Ready.
    pub cloud_at_ready: usize,
    /// GpuInstances the API server held once the pool was Ready.
    pub objects_at_ready: usize,
    /// The most machines the cloud held at any sample, from the scale to N until the scale
    /// to 0.
    pub most_cloud: usize,
    /// The most GpuInstances the bench's watch saw at any sample over the same time.
    pub most_objects: usize,
    /// Samples taken.
    pub samples: usize,
    /// Successful cloud creates of machines during the scale-up.
    pub cloud_creates: u64,
    /// Seconds from the scale to N until the bench's watch saw N GpuInstances: how long the
    /// pool's controller took to make its machines' objects (sampled every 200 ms).
    #[serde(default)]
    pub all_made_s: f64,
}

impl PoolMachines {
    /// Exactly `n`: `n` in the cloud and `n` GpuInstances once Ready, never more at any
    /// sample, and one cloud create per machine.
    pub fn exactly(&self, n: usize) -> bool {
        self.cloud_at_ready == n
            && self.objects_at_ready == n
            && self.most_cloud <= n
            && self.most_objects <= n
            && self.cloud_creates == n as u64
    }
}

/// The operator's writes to the API server while the pool scaled up and down.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PoolApiWrites {
    pub objects: usize,
    pub scale_up: PhaseWrites,
    pub scale_down: PhaseWrites,
}

impl PoolApiWrites {
    pub fn lines(&self) -> Vec<String> {
        phase_lines(
            self.objects,
            &[
                ("pool scale-up", &self.scale_up),
                ("pool scale-down", &self.scale_down),
            ],
        )
    }
}

/// One GpuInstancePool scaled 0 -> N -> 0.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolResult {
    pub settings: Settings,
    /// From the scale to N until the pool's `status.readyReplicas` is N and N GpuInstances
    /// are Ready. Its bound counts the calls of N single machines: the SSH key (created as
    /// the scale-up starts), the N creates and a list per kind.
    pub scale_up: BoundedPhase,
    /// From the scale to 0 until the cloud holds nothing (the SSH key is deleted with it)
    /// and no GpuInstance is left.
    pub scale_down: BoundedPhase,
    pub machines: PoolMachines,
    /// The operator once the pool was Ready.
    pub operator_ready: ProcessUsage,
    /// 429 answers over the whole run.
    pub throttled: u64,
    /// Every call over the whole run by operation.
    pub calls_by_operation: BTreeMap<String, u64>,
    pub api_writes: PoolApiWrites,
    /// (seconds since start, Ready GpuInstances).
    pub timeline: Vec<(f64, usize)>,
    /// Seconds since start of: the scale to N, the pool Ready, the scale to 0.
    pub marks: Vec<f64>,
    pub targets: Vec<Target>,
}

impl PoolResult {
    /// The pool targets, judged on this run.
    pub fn judge(&mut self) {
        let n = self.settings.objects;
        let m = &self.machines;
        self.targets = vec![
            bounded_target("pool scale-up", &self.scale_up),
            bounded_target("pool scale-down", &self.scale_down),
            Target {
                name: "pool machines".into(),
                target: format!("exactly {n}, 0 duplicates"),
                measured: format!(
                    "{} in the cloud and {} GpuInstances when Ready, at most {} and {} over {} samples, {} cloud creates (all GpuInstances made after {:.1} s)",
                    m.cloud_at_ready,
                    m.objects_at_ready,
                    m.most_cloud,
                    m.most_objects,
                    m.samples,
                    m.cloud_creates,
                    m.all_made_s
                ),
                pass: m.exactly(n),
            },
            throttled_target(self.throttled),
        ];
    }

    pub fn table(&self) -> String {
        let mut out = self.settings.headline();
        out.push_str(&targets_table(&self.targets));
        for line in self.api_writes.lines() {
            out.push_str(&line);
            out.push('\n');
        }
        let o = &self.operator_ready;
        out.push_str(&format!(
            "operator with the pool Ready: {:.1} MB, peak {:.1} MB, CPU {:.1} s\n",
            o.rss_bytes as f64 / MB,
            o.peak_rss_bytes as f64 / MB,
            o.cpu_seconds
        ));
        out
    }

    /// Phase boundaries for the plot: scaled to N (orange), Ready (green), scaled to 0 (red).
    pub fn timeline_marks(&self) -> Vec<(f64, RGBColor)> {
        colored(&self.marks, &[TURN_MARK, READY_MARK, DELETION_MARK])
    }
}

/// The result of either scenario; its JSON is the scenario's own.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Report {
    Instances(Box<BenchResult>),
    Pool(Box<PoolResult>),
    Tenants(Box<tenants::TenantsResult>),
}

impl Report {
    pub fn judge(&mut self) {
        match self {
            Report::Instances(result) => result.judge(),
            Report::Pool(result) => result.judge(),
            Report::Tenants(result) => result.judge(),
        }
    }

    pub fn table(&self) -> String {
        match self {
            Report::Instances(result) => result.table(),
            Report::Pool(result) => result.table(),
            Report::Tenants(result) => result.table(),
        }
    }

    /// The plot's lines: Ready objects over time, one per account in the multi-tenant run.
    pub fn series(&self) -> Vec<crate::plot::Series<'_>> {
        let one = |label: &str, points| {
            vec![crate::plot::Series {
                label: label.into(),
                points,
            }]
        };
        match self {
            Report::Instances(result) => one("GpuInstances", &result.timeline),
            Report::Pool(result) => one("pool machines", &result.timeline),
            Report::Tenants(result) => result
                .timelines
                .iter()
                .map(|(account, points)| crate::plot::Series {
                    label: format!("account {account}"),
                    points,
                })
                .collect(),
        }
    }

    pub fn timeline_marks(&self) -> Vec<(f64, RGBColor)> {
        match self {
            Report::Instances(result) => result.timeline_marks(),
            Report::Pool(result) => result.timeline_marks(),
            Report::Tenants(result) => result.timeline_marks(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_bound_takes_the_binding_constraint() {
        // 10,000 calls at 50/s: 200 s; at 20 ms with 8 at once: 25 s.
        assert_eq!(lower_bound_seconds(10_000, 50.0, 20, 8), 200.0);
        // At 5,000/s the latency binds: 10,000 x 0.02 / 8 = 25 s.
        assert_eq!(lower_bound_seconds(10_000, 5_000.0, 20, 8), 25.0);
    }

    fn run(ratio: f64, cloud_writes: u64) -> RestartRun {
        RestartRun {
            seconds: ratio,
            objects_readopted: 10,
            objects_reconciled: 0,
            readopted_by_kind: BTreeMap::new(),
            not_readopted_by_kind: BTreeMap::new(),
            calls_by_operation: BTreeMap::new(),
            cloud_writes,
            kube_list_s: 1.0,
            kube_list_in_bench_s: 0.8,
            kube_plain_list_s: 1.5,
            lower_bound_s: 1.0,
            ratio,
        }
    }

    #[test]
    fn restarts_are_judged_on_the_median_run_and_every_write() {
        let restart = Restart::from_runs(vec![run(1.4, 0), run(0.9, 1), run(1.05, 0)])
            .unwrap_or_else(|| panic!("three runs"));
        assert_eq!(restart.median, run(1.05, 0));
        assert_eq!(restart.cloud_writes, 1);
        // Of an even number, the higher of the middle two.
        let restart = Restart::from_runs(vec![run(1.2, 0), run(1.0, 0)])
            .unwrap_or_else(|| panic!("two runs"));
        assert_eq!(restart.median.ratio, 1.2);
        assert_eq!(Restart::from_runs(Vec::new()), None);
    }

    #[test]
    fn a_restart_passes_with_no_cloud_write_and_its_median_within_one_point_one() {
        let target =
            |runs| restart_target(&Restart::from_runs(runs).unwrap_or_else(|| panic!("runs")));
        let within = target(vec![run(1.1, 0), run(0.9, 0), run(1.3, 0)]);
        assert!(within.pass, "{within:?}");
        assert!(
            within
                .measured
                .contains("median 1.10 s / 1.00 s = 1.10x (1.10x, 0.90x, 1.30x)"),
            "{within:?}"
        );
        assert!(!target(vec![run(1.0, 1)]).pass);
        assert!(!target(vec![run(1.2, 0)]).pass);
        // A run that left objects out fails the target however fast it was, naming them.
        let mut short = run(0.9, 0);
        short.not_readopted_by_kind =
            BTreeMap::from([("GpuInstance".to_string(), 10), ("Volume".to_string(), 2)]);
        let missed = target(vec![run(1.0, 0), short]);
        assert!(!missed.pass, "{missed:?}");
        assert!(
            missed
                .measured
                .ends_with("; run 2 did not re-adopt GpuInstance 10, Volume 2"),
            "{missed:?}"
        );
    }

    #[test]
    fn api_writes_are_per_object_over_the_whole_life() {
        let phase = |entries: &[(&str, u64)]| {
            let by_request = entries.iter().map(|(r, n)| (r.to_string(), *n)).collect();
            PhaseWrites::new(by_request, BTreeMap::new(), 70, 10)
        };
        let writes = ApiWrites::new(
            10,
            phase(&[("create events", 20), ("update gpuinstances/status", 20)]),
            phase(&[]),
            phase(&[("patch gpuinstances", 10)]),
        );
        assert_eq!(writes.create_to_ready.per_object, 4.0);
        assert_eq!(writes.per_object, 5.0);
        let lines = writes.lines();
        assert!(
            lines[0].contains("create events 2.00, update gpuinstances/status 2.00"),
            "{lines:?}"
        );
        assert!(lines[1].contains("0.00 (none;"), "{lines:?}");
        assert!(lines[0].ends_with("all requests 7.00"), "{lines:?}");
        assert!(lines[0].contains("; 0 answered 409); "), "{lines:?}");

        let conflicts = BTreeMap::from([
            ("create events".to_string(), 1),
            ("update gpuinstances/status".to_string(), 3),
        ]);
        let stale = PhaseWrites::new(BTreeMap::new(), conflicts, 0, 10);
        assert_eq!(stale.conflicts, 4);
        let line = &phase_lines(10, &[("create to Ready", &stale)])[0];
        assert!(
            line.contains("4 answered 409: create events 1, update gpuinstances/status 3)"),
            "{line}"
        );
    }

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&values, 0.99), 99.0);
        assert_eq!(quantile(&values, 0.5), 50.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    fn bounded(seconds: f64, lower_bound_s: f64) -> BoundedPhase {
        BoundedPhase {
            seconds,
            calls_by_operation: BTreeMap::new(),
            minimum_calls: 1003,
            cloud_time_s: 0.0,
            lower_bound_s,
            ratio: seconds / lower_bound_s,
        }
    }

    fn pool_result(machines: PoolMachines) -> PoolResult {
        PoolResult {
            settings: Settings {
                scenario: Scenario::Pool,
                objects: 1000,
                latency_ms: 20,
                rate_limit: 50.0,
                simulator_burst: 20,
                operator_burst: 5,
                concurrency: 8,
                kube_api_qps: 0.0,
                resync_interval_s: 60.0,
                quiet_wait_s: 130.0,
                settled_window_s: 120.0,
                new_objects: 100,
                writers: 8,
            },
            scale_up: bounded(24.0, 20.0),
            scale_down: bounded(26.0, 20.0),
            machines,
            operator_ready: ProcessUsage::default(),
            throttled: 0,
            calls_by_operation: BTreeMap::new(),
            api_writes: PoolApiWrites::default(),
            timeline: Vec::new(),
            marks: Vec::new(),
            targets: Vec::new(),
        }
    }

    const EXACTLY_1000: PoolMachines = PoolMachines {
        cloud_at_ready: 1000,
        objects_at_ready: 1000,
        most_cloud: 1000,
        most_objects: 1000,
        samples: 90,
        cloud_creates: 1000,
        all_made_s: 5.0,
    };

    #[test]
    fn a_pool_run_is_judged_on_its_two_bounds_and_exactly_n_machines() {
        let mut result = pool_result(EXACTLY_1000);
        result.judge();
        let verdicts: Vec<(&str, bool)> = result
            .targets
            .iter()
            .map(|t| (t.name.as_str(), t.pass))
            .collect();
        // 24 s of 20 s is within 1.25x; 26 s is not.
        assert_eq!(
            verdicts,
            [
                ("pool scale-up", true),
                ("pool scale-down", false),
                ("pool machines", true),
                ("429 absorbed", true),
            ]
        );
        let table = result.table();
        assert!(
            table.contains("exactly 1000, 0 duplicates  PASS  1000 in the cloud"),
            "{table}"
        );
        assert!(table.contains("1.30x"), "{table}");
    }

    #[test]
    fn one_machine_too_many_at_any_sample_or_one_create_too_many_is_a_duplicate() {
        assert!(EXACTLY_1000.exactly(1000));
        let changes: [fn(&mut PoolMachines); 5] = [
            |m| m.most_cloud = 1001,
            |m| m.most_objects = 1001,
            |m| m.cloud_creates = 1001,
            |m| m.cloud_at_ready = 999,
            |m| m.objects_at_ready = 999,
        ];
        for change in changes {
            let mut machines = EXACTLY_1000;
            change(&mut machines);
            assert!(!machines.exactly(1000), "{machines:?}");
            let mut result = pool_result(machines);
            result.judge();
            assert!(!result.targets[2].pass, "{:?}", result.targets[2]);
        }
    }
}
