//! One seeded chaos run: a small world, a random mix of changes under a seeded fault plan,
//! then the invariants checked against the simulator's records (`chaos/checks.rs`).

use crate::model::{
    ACCOUNTS, FinalSnapshotOf, Group, HARNESS_KEY, Kept, Kind, Model, ObjectKey, Policy, Preset,
    SECOND_ACCOUNT_SECRET, TEAM_C, TEAM_C_SECRET, Wanted, kind_name,
};
use crate::support::{Env, NAMESPACE, test_config};
use crate::tenant::Tenant;
use crate::{API_KEY_MARK, RunStats};
use gpucloud_api::{
    CloudStatus, EXTERNAL_ID_ANNOTATION, Firewall, GpuInstance, Image, Managed, Snapshot, SshKey,
    Volume,
};
use gpucloud_apiserver::faults::ApiFaultPlan;
use gpucloud_cloud::{ApiKey, CallObserver, CallOutcome, ClientConfig, CloudClient, Operation};
use gpucloud_controller::flow::kind::Watched;
use gpucloud_simulator::{
    Delays, DropMode, FaultPlan, LatencySpike, SimulatorConfig, ThrottleBurst,
};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Bound on the wait for every object to reach its desired state once faults are lifted.
pub(crate) const CONVERGE_SECONDS: u64 = 90;
/// Bound on the wait for every object to be gone once all are deleted.
pub(crate) const DELETE_SECONDS: u64 = 90;
/// After the faults are lifted, an object not yet `Ready` must say why within this time.
pub(crate) const EXPLAIN_WITHIN: Duration = Duration::from_secs(10);
/// The operator's bound on one cloud call; latency spikes go beyond it.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(600);
/// The longest a latency spike holds a request before the cloud acts on it.
const MAX_ACT_DELAY: Duration = Duration::from_millis(1400);
/// How long the cloud holds a late create, in milliseconds: past the client's timeout, the
/// settle window (list lag + 1.6 s) and the retry that follows it.
const LATE_ACT_MS: std::ops::Range<u64> = 5_000..7_500;
/// How long the operator only reports a duplicate before deleting it.
const DUPLICATE_GRACE: Duration = Duration::from_secs(1);

/// A failed run: the seed, what broke, and what happened before.
pub struct Failure {
    pub seed: u64,
    pub message: String,
    pub trace: Vec<String>,
}

// === Crash points ===

/// Where the operator is killed next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CrashPoint {
    /// An intent is recorded and the create is about to be sent (seen through the API server).
    BeforeCreate,
    /// The cloud answered a create; the id is not recorded yet.
    AfterCreateCall,
    /// The cloud answered a delete; the finalizer is still there.
    MidDelete,
    /// The cloud answered the read by id of a final snapshot: the GpuInstance is about to
    /// record it and delete its machine (the kill lands before, between or after those).
    FinalSnapshotRead,
}

/// Sees every cloud call the operator makes and signals when an armed crash point is hit.
#[derive(Default)]
struct CrashObserver {
    armed: Mutex<Option<CrashPoint>>,
    last_fired: Mutex<Option<CrashPoint>>,
    fired: Notify,
}

impl CrashObserver {
    fn arm(&self, point: CrashPoint) {
        *self.armed.lock().unwrap() = Some(point);
    }

    fn armed(&self) -> Option<CrashPoint> {
        *self.armed.lock().unwrap()
    }

    fn fire(&self) {
        *self.last_fired.lock().unwrap() = self.armed.lock().unwrap().take();
        self.fired.notify_one();
    }

    fn last_fired(&self) -> Option<CrashPoint> {
        *self.last_fired.lock().unwrap()
    }
}

impl CallObserver for CrashObserver {
    fn on_call(&self, operation: Operation, _outcome: &CallOutcome, _elapsed: Duration) {
        let name = operation.name();
        let hit = match self.armed() {
            Some(CrashPoint::AfterCreateCall) => {
                name.starts_with("Create") || name == "RestoreSnapshot" || name == "CloneVolume"
            }
            Some(CrashPoint::MidDelete) => name.starts_with("Delete"),
            Some(CrashPoint::FinalSnapshotRead) => name == "GetSnapshot",
            _ => false,
        };
        if hit {
            self.fire();
        }
    }
}

// === The run ===

/// The object whose first create the cloud carries out late, and the name prefix it holds.
pub(crate) struct LateTarget {
    pub key: ObjectKey,
    pub prefix: String,
}

pub(crate) struct Run {
    pub seed: u64,
    rng: StdRng,
    pub env: Env,
    /// `keys[account][place]`: team-a's, the other team's (the tenant's in the first
    /// account, team-c's in the second) and the harness's own.
    pub keys: [[String; 3]; ACCOUNTS],
    /// The harness's own client to each account.
    pub harness: Vec<CloudClient>,
    started: Instant,
    pub trace: Vec<String>,
    pub model: Model,
    pub presets: Vec<Preset>,
    /// Resources of deleted `deletionPolicy: Orphan` objects, to be left in the cloud.
    pub kept: Vec<Kept>,
    /// Deleted GpuInstances with `deletionPolicy: Snapshot`, whose final snapshots stay.
    pub final_snapshots: Vec<FinalSnapshotOf>,
    pub late: Option<LateTarget>,
    pub stats: RunStats,
    observer: Arc<CrashObserver>,
    operator: gpucloud_controller::operator::run::OperatorConfig,
    operator_down_until: Option<Instant>,
    /// The cloud fault plan in force during the fault phase.
    cloud_plan: FaultPlan,
    next_index: BTreeMap<(String, Kind), u32>,
    /// The hostile tenant of namespace `team-b`, with its own random stream.
    pub tenant: Tenant,
    /// GpuInstances placed by `spec.placement` (their snapshots are not restored).
    placed: std::collections::BTreeSet<ObjectKey>,
}

pub async fn run_seed(seed: u64) -> Result<RunStats, Failure> {
    let mut rng = StdRng::seed_from_u64(seed);
    let keys: [[String; 3]; ACCOUNTS] = std::array::from_fn(|account| {
        std::array::from_fn(|place| {
            format!(
                "{API_KEY_MARK}{seed:x}-{account}{place}-{:016x}",
                rng.random::<u64>()
            )
        })
    });
    let list_lag = Duration::from_millis([0, 200, 500][rng.random_range(0..3)]);
    let simulator = SimulatorConfig {
        api_keys: keys[0].to_vec(),
        other_accounts: keys[1..].iter().map(|k| k.to_vec()).collect(),
        keep_ledger: true,
        seed,
        delays: Delays::fast(),
        list_lag,
        ..SimulatorConfig::default()
    };
    // The default credentials Secret holds the first key: team-a's key to the first account.
    let env = Env::without_operator(simulator).await;
    // Placed machines try H100 in us-east-1 first: none, or a few GPUs that the first ones
    // take (a catalog read before they went says there are some: the cloud refuses, and the
    // placement moves on to L40S).
    let h100_stock = [0, 1, 2][rng.random_range(0..3)];
    env.simulator
        .set_gpu_stock("H100-80G", "us-east-1", h100_stock)
        .unwrap();
    let harness = keys
        .iter()
        .map(|account| {
            let config = ClientConfig::new(
                env.simulator.base_url(),
                ApiKey::new(account[HARNESS_KEY].clone()),
            );
            CloudClient::new(config).unwrap()
        })
        .collect();
    let observer = Arc::new(CrashObserver::default());
    let mut operator = test_config(&env.simulator);
    operator.cloud.timeout = CLIENT_TIMEOUT;
    operator.cloud.observer = Some(observer.clone());
    // The cloud acts on a request up to MAX_ACT_DELAY after receiving it, and a killed
    // process's call may have been sent just before the kill: the window covers both (a late
    // act goes past it on purpose).
    operator.reconcile.settle_window = list_lag + MAX_ACT_DELAY + Duration::from_millis(200);
    operator.reconcile.transition_requeue = Duration::from_millis(150);
    operator.reconcile.observe.resync = Duration::from_secs(3);
    // Every team's key has observers of its own (four keys list the two accounts): lists every
    // 250 ms while something is in transition, for 2 s after its last change, else every 2 s.
    operator.reconcile.observe.fast = Duration::from_millis(250);
    operator.reconcile.observe.hot_window = Duration::from_secs(2);
    operator.reconcile.duplicates.grace_period = DUPLICATE_GRACE;
    let mut run = Run {
        seed,
        rng,
        env,
        keys,
        harness,
        started: Instant::now(),
        trace: Vec::new(),
        model: Model::default(),
        presets: Vec::new(),
        kept: Vec::new(),
        final_snapshots: Vec::new(),
        late: None,
        stats: RunStats::default(),
        observer,
        operator,
        operator_down_until: None,
        cloud_plan: FaultPlan::default(),
        next_index: BTreeMap::new(),
        tenant: Tenant::new(seed),
        placed: std::collections::BTreeSet::new(),
    };
    run.note(format!("list lag {list_lag:?}, H100 stock {h100_stock}"));
    let outcome = run.play().await;
    // The operator stops with the world either way; a failure keeps its message.
    run.env.kill_operator().await;
    if std::env::var_os("GPUCLOUD_CHAOS_SEED").is_some() {
        eprintln!("chaos seed {seed} trace:\n    {}", run.trace.join("\n    "));
    }
    let tenant = &run.tenant.stats;
    run.stats.attacks += tenant.attacks;
    run.stats.attacks_refused += tenant.refused;
    run.stats.hostile_deleted += tenant.deleted;
    run.stats.forged_statuses += tenant.forged;
    run.stats.boot_attacks += tenant.boots;
    run.stats.pool_attacks += tenant.pools;
    run.stats.leftover_attacks += tenant.leftovers;
    run.stats.tenant_samples += tenant.samples;
    match outcome {
        Ok(()) => Ok(run.stats),
        Err(message) => Err(Failure {
            seed,
            message,
            trace: run.trace,
        }),
    }
}

impl Run {
    pub(crate) fn note(&mut self, line: impl Into<String>) {
        let at = self.started.elapsed().as_millis();
        self.trace.push(format!("{at:>6} ms  {}", line.into()));
    }

    async fn play(&mut self) -> Result<(), String> {
        let foreign = self.seed_foreign().await?;
        let baseline_drain = self.hourly_drain();
        self.note(format!(
            "foreign resources made; drain {baseline_drain:.6?}/h"
        ));
        self.seed_presets().await?;
        self.setup_namespaces().await?;
        let foreign_ids = self.foreign_ids();
        let tenant_key = self.keys[0][1].clone();
        self.tenant
            .setup(&self.env, &tenant_key, foreign_ids)
            .await?;

        self.env.start_operator(self.operator.clone());
        self.inject_faults()?;
        self.chaos().await?;
        self.lift_faults().await;

        self.converge().await?;
        self.check_foreign(&foreign)?;
        self.check_presets()?;
        self.check_secrets_in_objects_and_events().await?;
        self.delete_everything().await?;
        self.check_nothing_left(&foreign, &baseline_drain).await?;
        self.env.stop_operator().await;
        Ok(())
    }

    // === Setup ===

    /// Resources the operator did not make, in both accounts: one of each basic kind, made
    /// with the harness's key.
    async fn seed_foreign(&mut self) -> Result<Vec<Value>, String> {
        for cloud in self.harness.clone() {
            for (kind, request) in creates("foreign") {
                create_by_hand(&cloud, kind, request).await?;
            }
        }
        // Let every pending state finish, so later comparisons see settled resources.
        self.env.simulator.advance_clock(Duration::from_secs(60));
        Ok((0..ACCOUNTS).map(|a| self.view_of(a, "foreign-")).collect())
    }

    /// The foreign resources' ids, by kind, in both accounts.
    fn foreign_ids(&self) -> BTreeMap<Kind, Vec<String>> {
        let mut ids: BTreeMap<Kind, Vec<String>> = BTreeMap::new();
        for account in 0..ACCOUNTS {
            let state = self.account(account);
            for kind in Kind::BASIC {
                ids.entry(kind).or_default().extend(
                    crate::model::cloud_ids(&state, kind)
                        .into_iter()
                        .filter(|(_, name)| name.starts_with("foreign-"))
                        .map(|(id, _)| id),
                );
            }
        }
        ids
    }

    /// Resources in the first account for team-a to adopt by the `external-id` annotation:
    /// each basic kind with even odds, each with a role kept for the run (adopted and
    /// managed, adopted with `deletionPolicy: Orphan`, or only observed).
    async fn seed_presets(&mut self) -> Result<(), String> {
        let cloud = self.harness[0].clone();
        for (kind, request) in creates("preset") {
            if !self.rng.random_bool(0.5) {
                continue;
            }
            let role =
                [Policy::Manage, Policy::Orphan, Policy::ObserveOnly][self.rng.random_range(0..3)];
            let id = create_by_hand(&cloud, kind, request).await?;
            self.presets.push(Preset {
                kind,
                id,
                role,
                adopter: None,
                released_by: None,
                recorded: false,
                deleted: false,
                view: Value::Null,
            });
        }
        self.env.simulator.advance_clock(Duration::from_secs(60));
        for index in 0..self.presets.len() {
            let view = self.preset_view(index).unwrap_or_default();
            self.presets[index].view = view;
        }
        let made: Vec<String> = self
            .presets
            .iter()
            .map(|p| format!("{} {} ({:?})", kind_name(p.kind), p.id, p.role))
            .collect();
        self.note(format!("presets made: {}", made.join(", ")));
        Ok(())
    }

    /// Namespace team-c, and the Secrets naming the second account: team-a's and team-c's.
    async fn setup_namespaces(&mut self) -> Result<(), String> {
        crate::support::create_namespace(&self.env.client, TEAM_C, false)
            .await
            .map_err(|e| format!("creating namespace {TEAM_C}: {e}"))?;
        self.env
            .put_secret(NAMESPACE, SECOND_ACCOUNT_SECRET, &self.keys[1][0])
            .await;
        self.env
            .put_secret(TEAM_C, TEAM_C_SECRET, &self.keys[1][1])
            .await;
        Ok(())
    }

    /// Account `account` as it stands.
    pub(crate) fn account(&self, account: usize) -> gpucloud_simulator::AccountSnapshot {
        self.env
            .simulator
            .account_state(account)
            .expect("the world's simulator serves both accounts")
    }

    /// The resources of `account` named with `prefix`, without what time alone changes.
    pub(crate) fn view_of(&self, account: usize, prefix: &str) -> Value {
        let state = self.account(account);
        let pick = |items: Vec<Value>, field: &str| -> Vec<Value> {
            items
                .into_iter()
                .filter(|v| v[field].as_str().is_some_and(|n| n.starts_with(prefix)))
                .map(without_billing)
                .collect()
        };
        json!({
            "instances": pick(values(&state.instances), "vm_name"),
            "volumes": pick(values(&state.volumes), "name"),
            "firewalls": pick(values(&state.firewalls), "name"),
            "ssh_keys": pick(values(&state.ssh_keys), "name"),
        })
    }

    /// Preset `index` as it stands in the first account, if it is there.
    pub(crate) fn preset_view(&self, index: usize) -> Option<Value> {
        let preset = &self.presets[index];
        let state = self.account(0);
        let (items, field) = match preset.kind {
            Kind::Instance => (values(&state.instances), "instance_id"),
            Kind::Volume => (values(&state.volumes), "id"),
            Kind::Firewall => (values(&state.firewalls), "id"),
            Kind::SshKey => (values(&state.ssh_keys), "id"),
            Kind::Snapshot | Kind::Image => return None,
        };
        items
            .into_iter()
            .find(|v| v[field].as_str() == Some(preset.id.as_str()))
            .map(without_billing)
    }

    /// What each account spends per hour now, measured by moving the clock an hour.
    pub(crate) fn hourly_drain(&self) -> Vec<f64> {
        let before: Vec<f64> = (0..ACCOUNTS).map(|a| self.account(a).balance).collect();
        self.env.simulator.advance_clock(Duration::from_secs(3600));
        (0..ACCOUNTS)
            .map(|a| before[a] - self.account(a).balance)
            .collect()
    }

    fn inject_faults(&mut self) -> Result<(), String> {
        let rng = &mut self.rng;
        let creates_and_deletes = [
            "CreateInstance",
            "CreateVolume",
            "CreateFirewall",
            "CreateSshKey",
            "CreateSnapshot",
            "CreateImage",
            "CloneVolume",
            "RestoreSnapshot",
            "DeleteInstance",
            "DeleteVolume",
            "DeleteFirewall",
            "DeleteSshKey",
            "DeleteSnapshot",
            "DeleteImage",
            "AttachVolumes",
            "DetachVolumes",
        ];
        let mut act_then_drop = BTreeMap::new();
        for operation in creates_and_deletes {
            if rng.random_bool(0.5) {
                act_then_drop.insert(operation.to_string(), rng.random_range(0.1..0.5));
            }
        }
        let plan = FaultPlan {
            latency: Duration::ZERO,
            // Past the client's timeout: the cloud acts after the client gave up.
            latency_spike: Some(LatencySpike {
                probability: rng.random_range(0.02..0.08),
                extra: CLIENT_TIMEOUT
                    + Duration::from_millis(
                        rng.random_range(100..(MAX_ACT_DELAY - CLIENT_TIMEOUT).as_millis() as u64),
                    ),
            }),
            latency_ms_per_operation: BTreeMap::new(),
            error_rate: rng.random_range(0.1..0.3),
            error_rate_per_operation: BTreeMap::new(),
            throttle_burst: Some(ThrottleBurst {
                probability: rng.random_range(0.01..0.05),
                length: rng.random_range(1..6),
                retry_after_secs: 1,
            }),
            act_then_drop,
            drop_mode: if rng.random_bool(0.5) {
                DropMode::CloseConnection
            } else {
                DropMode::Delay {
                    delay: Duration::from_millis(1500),
                }
            },
            omit_from_lists: Default::default(),
            // Lists that leave out resources that exist: nothing irreversible may follow.
            list_omission_rate: if rng.random_bool(0.5) {
                rng.random_range(0.02..0.2)
            } else {
                0.0
            },
            // Armed by `late_create` during the fault phase.
            act_late: BTreeMap::new(),
            // Every account's calls.
            accounts: Vec::new(),
        };
        let api = ApiFaultPlan {
            seed: self.seed,
            status_conflict_rate: rng.random_range(0.05..0.3),
            watch_cut_rate: rng.random_range(0.2..0.6),
            watch_lifetime: (Duration::from_millis(100), Duration::from_millis(1500)),
            create_timeout_rate: 0.0,
            // A watch cache behind the writes: the operator's own among them.
            watch_delay: Duration::from_millis(rng.random_range(0..500)),
        };
        self.note(format!("cloud faults {plan:?}"));
        self.note(format!("API server faults {api:?}"));
        self.env.simulator.set_faults(plan.clone());
        self.cloud_plan = plan;
        self.env
            .apiserver
            .faults()
            .set_plan(api)
            .map_err(|e| e.to_string())
    }

    async fn lift_faults(&mut self) {
        self.env.simulator.set_faults(FaultPlan::default());
        let _ = self
            .env
            .apiserver
            .faults()
            .set_plan(ApiFaultPlan::default());
        if self.operator_down_until.take().is_some() {
            self.env.start_operator(self.operator.clone());
            self.note("operator restarted");
        }
        let sim = self.env.simulator.fault_counts();
        let api = self.env.apiserver.faults().counts();
        self.stats.throttled += sim.throttled;
        self.stats.internal_errors += sim.internal_errors;
        self.stats.latency_spikes += sim.latency_spikes;
        self.stats.dropped_responses += sim.dropped_responses;
        self.stats.omitted_from_lists += sim.omitted_from_lists;
        self.stats.late_acts += sim.late_acts;
        self.stats.cloud_calls_in_faults += self.env.simulator.call_counts().values().sum::<u64>();
        self.stats.status_conflicts += api.status_conflicts;
        self.stats.watches_cut += api.watches_cut + api.disconnects;
        self.note("faults lifted");
    }

    // === The fault phase ===

    async fn chaos(&mut self) -> Result<(), String> {
        // A few objects of every basic kind first, so changes have something to act on; team-c
        // and team-a's second account get a machine each, every preset its adopter.
        for kind in Kind::BASIC {
            if kind != Kind::SshKey || self.rng.random_bool(0.5) {
                self.create_basic(Group::TEAM_A, kind).await?;
            }
        }
        if self.rng.random_bool(0.5) {
            self.create_basic(Group::TEAM_A, Kind::Instance).await?;
        }
        self.create_basic(Group::TEAM_C, Kind::Instance).await?;
        if self.rng.random_bool(0.5) {
            let kind = Kind::BASIC[self.rng.random_range(0..4)];
            self.create_basic(Group::TEAM_C, kind).await?;
        }
        if self.rng.random_bool(0.5) {
            self.create_basic(Group::TEAM_A_SECOND, Kind::Instance)
                .await?;
        }
        // A snapshot early, so images and restores have something to start from.
        if self.rng.random_bool(0.5) {
            self.snapshot().await?;
        }
        for index in 0..self.presets.len() {
            self.adopt(index).await?;
        }
        let actions = self.rng.random_range(6..13);
        // At most one mass deletion and one late create per seed, at seeded moments.
        let mass_deletion_at = self
            .rng
            .random_bool(0.5)
            .then(|| self.rng.random_range(actions / 3..actions));
        // Early, so the held create mostly lands while the faults are still on.
        let late_create_at = self
            .rng
            .random_bool(0.35)
            .then(|| self.rng.random_range(0..actions / 2));
        let mut before_create_poll = tokio::time::interval(Duration::from_millis(100));
        let mut done = 0;
        let mut next_action = Instant::now();
        // The hostile tenant attacks on its own schedule, from its own random stream.
        let mut next_attack = Instant::now() + Duration::from_millis(self.tenant.pause());
        while done < actions {
            let down_until = self.operator_down_until;
            let polling =
                self.observer.armed() == Some(CrashPoint::BeforeCreate) && down_until.is_none();
            tokio::select! {
                () = self.observer.fired.notified(), if down_until.is_none() => {
                    if self.observer.last_fired() == Some(CrashPoint::FinalSnapshotRead) {
                        self.stats.final_snapshot_kills += 1;
                    }
                    self.kill("crash point hit").await;
                }
                _ = before_create_poll.tick(), if polling => {
                    if self.intent_recorded().await {
                        self.observer.fire();
                    }
                }
                () = sleep_until_some(down_until) => {
                    self.operator_down_until = None;
                    self.env.start_operator(self.operator.clone());
                    self.note("operator restarted");
                }
                () = tokio::time::sleep_until(next_action) => {
                    if Some(done) == mass_deletion_at {
                        self.mass_deletion().await?;
                    } else if Some(done) == late_create_at {
                        self.late_create().await?;
                    } else {
                        self.act().await?;
                    }
                    done += 1;
                    next_action = Instant::now() + Duration::from_millis(self.rng.random_range(20..300));
                }
                () = tokio::time::sleep_until(next_attack) => {
                    let notes = self.tenant.attack(&self.env).await?;
                    for note in notes {
                        self.note(note);
                    }
                    next_attack = Instant::now() + Duration::from_millis(self.tenant.pause());
                }
            }
        }
        // The tenant's ordinary objects turn hostile too, so each ends refused.
        let notes = self.tenant.finish(&self.env).await?;
        for note in notes {
            self.note(note);
        }
        Ok(())
    }

    async fn kill(&mut self, why: &str) {
        self.env.kill_operator().await;
        self.stats.kills += 1;
        let pause = Duration::from_millis(self.rng.random_range(0..400));
        self.operator_down_until = Some(Instant::now() + pause);
        self.note(format!("operator killed ({why}); back in {pause:?}"));
    }

    /// Whether some object has its create intent recorded but no id yet.
    async fn intent_recorded(&self) -> bool {
        let kinds: BTreeSet<Kind> = self.model.live.values().map(|w| w.kind).collect();
        let kinds: Vec<Kind> = kinds.into_iter().collect();
        objects_of(&self.env, &kinds).await.is_ok_and(|objects| {
            objects.values().any(|seen| {
                seen.status.pending_create.is_some() && seen.status.external_id.is_none()
            })
        })
    }

    async fn act(&mut self) -> Result<(), String> {
        let roll = self.rng.random_range(0..100);
        match roll {
            0..10 => {
                let group = self.random_group();
                let kind = Kind::BASIC[self.rng.random_range(0..4)];
                self.create_basic(group, kind).await
            }
            10..12 => self.delete_a_snapshot(None).await,
            12..18 => self.snapshot().await,
            18..23 => self.image().await,
            23..27 => self.clone_volume().await,
            27..32 => self.restore().await,
            32..34 => self.adopt_again().await,
            34..42 => self.delete_one().await,
            42..48 => self.set_power().await,
            48..54 => self.attach_or_detach().await,
            54..58 => self.resize().await,
            58..62 => self.change_rules().await,
            62..65 => self.change_firewall_targets().await,
            65..73 => {
                self.kill("random point").await;
                Ok(())
            }
            73..83 => {
                let point = [
                    CrashPoint::BeforeCreate,
                    CrashPoint::AfterCreateCall,
                    CrashPoint::MidDelete,
                    CrashPoint::FinalSnapshotRead,
                ][self.rng.random_range(0..4)];
                self.observer.arm(point);
                self.stats.crash_points_armed += 1;
                self.note(format!("crash point armed: {point:?}"));
                Ok(())
            }
            83..89 => {
                self.env.apiserver.faults().disconnect_watches();
                self.note("watches disconnected");
                Ok(())
            }
            89..94 => {
                self.env.apiserver.compact();
                self.stats.compactions += 1;
                self.note("history compacted: watches end with 410 Gone");
                Ok(())
            }
            _ => {
                self.storm().await;
                Ok(())
            }
        }
    }

    /// Half of all calls answered 429 for a short while.
    async fn storm(&mut self) {
        let calm = self.cloud_plan.clone();
        let mut storm = calm.clone();
        storm.throttle_burst = Some(ThrottleBurst {
            probability: 0.5,
            length: 1,
            retry_after_secs: 1,
        });
        let length = Duration::from_millis(self.rng.random_range(200..800));
        self.note(format!("429 storm for {length:?}"));
        // Counted before the plan is replaced (setting a plan keeps the counts).
        self.env.simulator.set_faults(storm);
        tokio::time::sleep(length).await;
        self.env.simulator.set_faults(calm);
        self.stats.storms += 1;
    }

    // === Creating objects ===

    /// Where a new object goes: mostly team-a's first account, else team-c or team-a's
    /// second account.
    fn random_group(&mut self) -> Group {
        match self.rng.random_range(0..100) {
            0..60 => Group::TEAM_A,
            60..75 => Group::TEAM_A_SECOND,
            _ => Group::TEAM_C,
        }
    }

    fn new_name(&mut self, namespace: &str, kind: Kind) -> String {
        // Names are reused now and then, so an object deleted and made again is tried too.
        let next = *self
            .next_index
            .get(&(namespace.to_string(), kind))
            .unwrap_or(&0);
        let deleted: Vec<u32> = (0..next)
            .filter(|i| {
                let key = ObjectKey::new(namespace, &format!("{}-{i}", kind.prefix()));
                !self.model.live.contains_key(&key)
            })
            .collect();
        if !deleted.is_empty() && self.rng.random_bool(0.3) {
            let i = deleted[self.rng.random_range(0..deleted.len())];
            return format!("{}-{i}", kind.prefix());
        }
        self.fresh_name(namespace, kind)
    }

    /// A name never used in `namespace`.
    fn fresh_name(&mut self, namespace: &str, kind: Kind) -> String {
        let index = self
            .next_index
            .entry((namespace.to_string(), kind))
            .or_insert(0);
        let name = format!("{}-{index}", kind.prefix());
        *index += 1;
        name
    }

    fn random_rules(&mut self) -> Value {
        let count = self.rng.random_range(0..4);
        let rules: Vec<Value> = (0..count)
            .map(|i| {
                let port = 1000 + i * 10 + self.rng.random_range(0..5);
                json!({"direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
                    "remoteIpPrefix": format!("10.{}.0.0/16", self.rng.random_range(0..200)),
                    "portRangeMin": port, "portRangeMax": port})
            })
            .collect();
        Value::Array(rules)
    }

    /// A referable object of `kind` in `group`, at random.
    fn pick_referable(&mut self, group: Group, kind: Kind) -> Option<ObjectKey> {
        let keys = self.model.referable(group, kind);
        (!keys.is_empty()).then(|| keys[self.rng.random_range(0..keys.len())].clone())
    }

    /// A referable object of `kind` in any group to make a new object from, with its group.
    fn pick_source(&mut self, kind: Kind) -> Option<(Group, ObjectKey)> {
        let sources: Vec<(Group, ObjectKey)> = self
            .model
            .live
            .iter()
            .filter(|(_, w)| w.kind == kind && w.referable())
            .map(|(key, w)| (w.group, key.clone()))
            .collect();
        (!sources.is_empty()).then(|| sources[self.rng.random_range(0..sources.len())].clone())
    }

    /// A basic object: a few in ten with `deletionPolicy: Orphan` (those refer to nothing).
    async fn create_basic(&mut self, group: Group, kind: Kind) -> Result<(), String> {
        let policy = if self.rng.random_bool(0.08) {
            Policy::Orphan
        } else {
            Policy::Manage
        };
        let refer = policy == Policy::Manage;
        let spec = self.basic_spec(group, kind, refer);
        let name = self.new_name(group.namespace, kind);
        self.create(group, kind, &name, spec, policy, None).await?;
        Ok(())
    }

    fn basic_spec(&mut self, group: Group, kind: Kind, refer: bool) -> Value {
        match kind {
            Kind::Instance => {
                let power = if self.rng.random_bool(0.2) {
                    "Stopped"
                } else {
                    "Running"
                };
                let mut spec = json!({"region": "us-east-1", "gpuType": "L40S",
                    "osImage": "ubuntu-22.04-cuda-12", "powerState": power});
                // Some are placed: H100 while the scarce stock lasts, else L40S, one region.
                if self.rng.random_bool(0.3) {
                    spec = json!({"osImage": "ubuntu-22.04-cuda-12", "powerState": power,
                    "placement": {"alternatives": [
                        {"gpuTypes": ["H100-80G"], "regions": ["us-east-1"]},
                        {"gpuTypes": ["L40S"], "regions": ["us-east-1"]},
                    ]}});
                }
                // Some are deleted through a final snapshot (`create` overrides it for Orphan).
                if self.rng.random_bool(0.25) {
                    spec["deletionPolicy"] = json!("Snapshot");
                }
                spec
            }
            Kind::Volume => {
                let mut spec =
                    json!({"region": "us-east-1", "sizeGb": self.rng.random_range(10..40)});
                if refer
                    && self.rng.random_bool(0.5)
                    && let Some(instance) = self.pick_referable(group, Kind::Instance)
                {
                    spec["instanceRef"] = json!({"name": instance.name});
                }
                spec
            }
            Kind::Firewall => {
                let mut refs = Vec::new();
                if refer
                    && self.rng.random_bool(0.6)
                    && let Some(instance) = self.pick_referable(group, Kind::Instance)
                {
                    refs.push(json!({"name": instance.name}));
                }
                json!({"region": "us-east-1", "rules": self.random_rules(), "instanceRefs": refs})
            }
            Kind::SshKey | Kind::Snapshot | Kind::Image => json!({}),
        }
    }

    /// Creates an object and adds it to the model; `Ok(false)` when the name is still held by
    /// an object finishing its deletion.
    async fn create(
        &mut self,
        group: Group,
        kind: Kind,
        name: &str,
        mut spec: Value,
        policy: Policy,
        adopted: Option<String>,
    ) -> Result<bool, String> {
        if let Some(secret) = group.secret() {
            spec["credentialsSecretRef"] = json!({"name": secret});
        }
        // Whichever step makes it (a basic create, a late create), a placed machine's
        // snapshots are not restored.
        if kind == Kind::Instance && spec.get("placement").is_some() {
            self.placed.insert(ObjectKey::new(group.namespace, name));
            self.stats.placed += 1;
        }
        let final_snapshot = kind == Kind::Instance
            && policy == Policy::Manage
            && spec["deletionPolicy"] == "Snapshot";
        match policy {
            Policy::Manage => {}
            Policy::Orphan => spec["deletionPolicy"] = json!("Orphan"),
            Policy::ObserveOnly => spec["managementPolicy"] = json!("ObserveOnly"),
        }
        let mut metadata = json!({"name": name, "namespace": group.namespace});
        if let Some(id) = &adopted {
            metadata["annotations"] = json!({EXTERNAL_ID_ANNOTATION: id});
        }
        let object = json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": kind_name(kind),
            "metadata": metadata,
            "spec": spec,
        });
        let key = ObjectKey::new(group.namespace, name);
        match post(&self.env, kind, group.namespace, &object).await {
            Ok(uid) => {
                let adoption = adopted
                    .as_ref()
                    .map(|id| format!(" adopting {id} ({policy:?})"))
                    .unwrap_or_default();
                self.note(format!(
                    "create {} {key} in {group}{adoption} {spec}",
                    kind_name(kind)
                ));
                self.model.live.insert(
                    key,
                    Wanted {
                        kind,
                        group,
                        spec,
                        uid,
                        adopted,
                        policy,
                        source_deleted: false,
                    },
                );
                self.stats.objects += 1;
                match kind {
                    Kind::Snapshot => self.stats.snapshots += 1,
                    Kind::Image => self.stats.images += 1,
                    _ => {}
                }
                if group.account != 0 {
                    self.stats.second_account_objects += 1;
                }
                if final_snapshot {
                    self.stats.final_snapshot_objects += 1;
                }
                if policy == Policy::Orphan {
                    self.stats.orphan_objects += 1;
                }
                Ok(true)
            }
            // The previous object of that name is still finishing its deletion.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.note(format!(
                    "create {key} skipped: the old one is still deleting"
                ));
                Ok(false)
            }
            Err(error) => Err(format!("create {key}: {error}")),
        }
    }

    /// A Snapshot of a running machine; the machine is not stopped while the snapshot has no
    /// id (the cloud snapshots running machines only).
    async fn snapshot(&mut self) -> Result<(), String> {
        let running: Vec<ObjectKey> = self
            .model
            .live
            .iter()
            .filter(|(_, w)| {
                w.kind == Kind::Instance && w.referable() && w.spec["powerState"] != "Stopped"
            })
            .map(|(key, _)| key.clone())
            .collect();
        if running.is_empty() {
            return Ok(());
        }
        let instance = running[self.rng.random_range(0..running.len())].clone();
        let group = self.model.live[&instance].group;
        let name = self.new_name(group.namespace, Kind::Snapshot);
        let spec = json!({"instanceRef": {"name": instance.name},
            "description": format!("{} at step {}", instance.name, self.stats.objects),
            "labels": ["chaos"]});
        self.create(group, Kind::Snapshot, &name, spec, Policy::Manage, None)
            .await?;
        Ok(())
    }

    /// An Image made from a Snapshot.
    async fn image(&mut self) -> Result<(), String> {
        let Some((group, snapshot)) = self.pick_source(Kind::Snapshot) else {
            return Ok(());
        };
        let name = self.new_name(group.namespace, Kind::Image);
        let spec = json!({"snapshotRef": {"name": snapshot.name}});
        self.create(group, Kind::Image, &name, spec, Policy::Manage, None)
            .await?;
        Ok(())
    }

    /// A Volume cloned from another, as large as the source is wanted (a clone copies the
    /// source's size and may only grow); the source is not resized while the clone has no id.
    async fn clone_volume(&mut self) -> Result<(), String> {
        let Some((group, source)) = self.pick_source(Kind::Volume) else {
            return Ok(());
        };
        let size = self.model.live[&source].spec["sizeGb"].clone();
        let name = self.new_name(group.namespace, Kind::Volume);
        let spec = json!({"region": "us-east-1", "sizeGb": size,
            "source": {"volumeRef": {"name": source.name}}});
        if self
            .create(group, Kind::Volume, &name, spec, Policy::Manage, None)
            .await?
        {
            self.stats.clones += 1;
        }
        Ok(())
    }

    /// Whether the snapshot `key` is of a placed machine: its H100 restore would need scarce
    /// stock and stay refused (restores inherit the machine's GPUs and have no alternatives).
    fn of_a_placed_machine(&self, key: &ObjectKey) -> bool {
        let Some(snapshot) = self.model.live.get(key) else {
            return false;
        };
        let Some(instance) = snapshot.spec["instanceRef"]["name"].as_str() else {
            return false;
        };
        self.placed
            .contains(&ObjectKey::new(&key.namespace, instance))
    }

    /// A GpuInstance restored from a Snapshot.
    async fn restore(&mut self) -> Result<(), String> {
        // Mostly from a snapshot the cloud has already made, as a restore usually is.
        let seen = all_objects(&self.env)
            .await
            .map_err(|e| format!("listing objects: {e}"))?;
        let made: Vec<(Group, ObjectKey)> = self
            .model
            .live
            .iter()
            .filter(|(key, w)| {
                w.kind == Kind::Snapshot
                    && w.referable()
                    && !self.of_a_placed_machine(key)
                    && seen
                        .get(*key)
                        .is_some_and(|s| s.status.external_id.is_some())
            })
            .map(|(key, w)| (w.group, key.clone()))
            .collect();
        let source = if !made.is_empty() && self.rng.random_bool(0.8) {
            Some(made[self.rng.random_range(0..made.len())].clone())
        } else {
            self.pick_source(Kind::Snapshot)
                .filter(|(_, key)| !self.of_a_placed_machine(key))
        };
        let Some((group, snapshot)) = source else {
            return Ok(());
        };
        let power = if self.rng.random_bool(0.2) {
            "Stopped"
        } else {
            "Running"
        };
        let name = self.new_name(group.namespace, Kind::Instance);
        let spec = json!({"region": "us-east-1", "powerState": power,
            "source": {"snapshotRef": {"name": snapshot.name}}});
        if self
            .create(group, Kind::Instance, &name, spec, Policy::Manage, None)
            .await?
        {
            self.stats.restores += 1;
            // Now and then the snapshot goes at once: its deletion waits for this restore.
            if self.rng.random_bool(0.5) {
                self.delete_a_snapshot(Some(snapshot)).await?;
            }
        }
        Ok(())
    }

    /// A preset let go by an `Orphan` or `ObserveOnly` adopter, adopted again once that object
    /// is gone.
    async fn adopt_again(&mut self) -> Result<(), String> {
        let seen = all_objects(&self.env)
            .await
            .map_err(|e| format!("listing objects: {e}"))?;
        let free: Vec<usize> = (0..self.presets.len())
            .filter(|i| {
                let preset = &self.presets[*i];
                preset.adopter.is_none()
                    && !preset.deleted
                    && preset
                        .released_by
                        .as_ref()
                        .is_none_or(|last| !seen.contains_key(last))
            })
            .collect();
        if free.is_empty() {
            return Ok(());
        }
        let index = free[self.rng.random_range(0..free.len())];
        self.adopt(index).await
    }

    /// A team-a object adopting preset `index` in the role the preset was given; an observed
    /// one asks for changes the operator must never make.
    async fn adopt(&mut self, index: usize) -> Result<(), String> {
        let preset = self.presets[index].clone();
        let observe = preset.role == Policy::ObserveOnly;
        let spec = match preset.kind {
            Kind::SshKey => json!({}),
            Kind::Instance => {
                let power = if observe || self.rng.random_bool(0.2) {
                    "Stopped"
                } else {
                    "Running"
                };
                let mut spec = json!({"region": "us-east-1", "gpuType": "L40S",
                    "osImage": "ubuntu-22.04-cuda-12", "powerState": power});
                // Some are deleted through a final snapshot (`create` overrides it for Orphan).
                if self.rng.random_bool(0.25) {
                    spec["deletionPolicy"] = json!("Snapshot");
                }
                spec
            }
            Kind::Volume => {
                let mut size = 20 + self.rng.random_range(0..10);
                if !observe {
                    // An earlier adopter may have grown it, and a volume cannot shrink: a
                    // smaller spec would be refused (rightly) as InvalidSpec.
                    let current = self
                        .env
                        .simulator
                        .state()
                        .volumes
                        .iter()
                        .find(|v| v.id == preset.id)
                        .map_or(0, |v| v.size);
                    size = size.max(current);
                }
                json!({"region": "us-east-1", "sizeGb": size})
            }
            Kind::Firewall => {
                let mut rules = self.random_rules();
                if observe && rules.as_array().is_some_and(Vec::is_empty) {
                    rules = json!([{"direction": "Ingress", "protocol": "tcp",
                        "etherType": "IPv4", "remoteIpPrefix": "0.0.0.0/0",
                        "portRangeMin": 22, "portRangeMax": 22}]);
                }
                json!({"region": "us-east-1", "rules": rules, "instanceRefs": []})
            }
            Kind::Snapshot | Kind::Image => return Ok(()),
        };
        let name = self.new_name(NAMESPACE, preset.kind);
        let created = self
            .create(
                Group::TEAM_A,
                preset.kind,
                &name,
                spec,
                preset.role,
                Some(preset.id.clone()),
            )
            .await?;
        if created {
            self.presets[index].adopter = Some(ObjectKey::new(NAMESPACE, &name));
            self.stats.adoptions += 1;
            if observe {
                self.stats.observe_only_objects += 1;
            }
        }
        Ok(())
    }

    /// One object whose first create the cloud carries out long after the client gave up:
    /// past the settle window, so the retry makes a second resource and the operator must
    /// report the duplicate and delete it after the grace period. The object refers to
    /// nothing and is not deleted before the end, so the late resource always lands under a
    /// live object.
    async fn late_create(&mut self) -> Result<(), String> {
        let group = self.random_group();
        let kind = [Kind::Instance, Kind::Volume, Kind::Firewall][self.rng.random_range(0..3)];
        let name = self.fresh_name(group.namespace, kind);
        let prefix = format!("{}{name}-", crate::model::team_mark(group.namespace));
        let delay = self.rng.random_range(LATE_ACT_MS);
        self.cloud_plan.act_late.insert(prefix.clone(), delay);
        self.env.simulator.set_faults(self.cloud_plan.clone());
        let spec = self.basic_spec(group, kind, false);
        self.note(format!(
            "late create armed: the first create of {prefix}* acts after {delay} ms"
        ));
        if self
            .create(group, kind, &name, spec, Policy::Manage, None)
            .await?
        {
            self.late = Some(LateTarget {
                key: ObjectKey::new(group.namespace, &name),
                prefix,
            });
            self.stats.late_creates_armed += 1;
        }
        Ok(())
    }

    // === Deleting objects ===

    /// Whether `key` can be deleted on its own now without leaving a live object waiting for
    /// it forever: a machine no volume or firewall is attached to and whose snapshots have
    /// ids, a volume whose clones have ids, a snapshot that exists in the cloud and whose
    /// images have ids (they go with it, a rule of the cloud); never the late create's object.
    fn deletable(&self, key: &ObjectKey, seen: &BTreeMap<ObjectKey, Seen>) -> bool {
        if self.late.as_ref().is_some_and(|late| &late.key == key) {
            return false;
        }
        let has_id = |key: &ObjectKey| {
            seen.get(key)
                .is_some_and(|s| s.status.external_id.is_some())
        };
        let Some(wanted) = self.model.live.get(key) else {
            return false;
        };
        let referrers = self.model.referrers(key);
        match wanted.kind {
            Kind::Instance => referrers.iter().all(|r| {
                let kind = self.model.live[r].kind;
                kind == Kind::Snapshot && has_id(r)
            }),
            Kind::Volume => referrers.iter().all(has_id),
            Kind::Snapshot => {
                has_id(key)
                    && referrers
                        .iter()
                        .all(|r| self.model.live[r].kind == Kind::Instance || has_id(r))
            }
            Kind::SshKey | Kind::Firewall | Kind::Image => true,
        }
    }

    /// Deletes a Snapshot (`snapshot`, or one at random) if it can go: it exists in the cloud
    /// and its images have ids. Its images go with it in the cloud; a machine still to be
    /// restored from it holds its deletion until restored.
    async fn delete_a_snapshot(&mut self, snapshot: Option<ObjectKey>) -> Result<(), String> {
        let seen = all_objects(&self.env)
            .await
            .map_err(|e| format!("listing objects: {e}"))?;
        let candidates: Vec<ObjectKey> = match snapshot {
            Some(key) => vec![key],
            None => self
                .model
                .live
                .iter()
                .filter(|(_, w)| w.kind == Kind::Snapshot)
                .map(|(key, _)| key.clone())
                .collect(),
        };
        let candidates: Vec<ObjectKey> = candidates
            .into_iter()
            .filter(|key| self.deletable(key, &seen))
            .collect();
        if candidates.is_empty() {
            return Ok(());
        }
        let key = candidates[self.rng.random_range(0..candidates.len())].clone();
        let waiting: Vec<String> = self
            .model
            .referrers(&key)
            .into_iter()
            .filter(|r| {
                self.model.live[r].kind == Kind::Instance
                    && seen.get(r).is_none_or(|s| s.status.external_id.is_none())
            })
            .map(|r| r.to_string())
            .collect();
        self.let_images_go_with(&key).await?;
        self.forget(&key, &seen);
        delete(&self.env, Kind::Snapshot, &key).await?;
        self.model.live.remove(&key);
        if waiting.is_empty() {
            self.note(format!("delete Snapshot {key}"));
        } else {
            self.stats.snapshot_deletions_held += 1;
            self.note(format!(
                "delete Snapshot {key}, held until {} is restored from it",
                waiting.join(", ")
            ));
        }
        Ok(())
    }

    /// A Snapshot deleted on its own while Images are made from it is held (`DependentsExist`)
    /// unless it says its images may go with it; it does, so the Images see their source
    /// deleted. (A mass deletion deletes a snapshot's images with it, and waits for them.)
    async fn let_images_go_with(&self, snapshot: &ObjectKey) -> Result<(), String> {
        let has_images = self
            .model
            .referrers(snapshot)
            .iter()
            .any(|r| self.model.live[r].kind == Kind::Image);
        if !has_images {
            return Ok(());
        }
        let patch = serde_json::json!({"metadata": {"annotations": {
            gpucloud_api::DELETE_DEPENDENTS_ANNOTATION: "true"
        }}});
        merge_patch(&self.env, Kind::Snapshot, snapshot, &patch)
            .await
            .map_err(|e| format!("annotating {snapshot}: {e}"))
    }

    async fn delete_one(&mut self) -> Result<(), String> {
        let seen = all_objects(&self.env)
            .await
            .map_err(|e| format!("listing objects: {e}"))?;
        let candidates: Vec<ObjectKey> = self
            .model
            .live
            .keys()
            .filter(|key| self.deletable(key, &seen))
            .cloned()
            .collect();
        if candidates.is_empty() {
            return Ok(());
        }
        let key = candidates[self.rng.random_range(0..candidates.len())].clone();
        let kind = self.model.live[&key].kind;
        if kind == Kind::Snapshot {
            self.let_images_go_with(&key).await?;
        }
        self.forget(&key, &seen);
        delete(&self.env, kind, &key).await?;
        self.model.live.remove(&key);
        self.note(format!("delete {} {key}", kind_name(kind)));
        Ok(())
    }

    /// Many of the teams' objects deleted at once while the faults are on: all of them, or
    /// about half with every object referring to one of those (never the late create's).
    async fn mass_deletion(&mut self) -> Result<(), String> {
        let seen = all_objects(&self.env)
            .await
            .map_err(|e| format!("listing objects: {e}"))?;
        let late = self.late.as_ref().map(|late| late.key.clone());
        let candidates: Vec<ObjectKey> = self
            .model
            .live
            .keys()
            .filter(|key| Some(*key) != late.as_ref())
            .cloned()
            .collect();
        let all = self.rng.random_bool(0.5);
        let chosen: Vec<ObjectKey> = candidates
            .into_iter()
            .filter(|_| all || self.rng.random_bool(0.5))
            .collect();
        let mut doomed = self.model.closed_under_referrers(chosen);
        if let Some(late) = &late {
            doomed.remove(late);
        }
        for key in &doomed {
            self.forget(key, &seen);
        }
        let deletes = doomed.iter().map(|key| {
            let kind = self.model.live[key].kind;
            let env = &self.env;
            async move { delete(env, kind, key).await }
        });
        let results = futures::future::join_all(deletes).await;
        for result in results {
            result?;
        }
        for key in &doomed {
            self.model.live.remove(key);
        }
        self.stats.mass_deletions += 1;
        self.stats.mass_deleted += doomed.len() as u64;
        let names: Vec<String> = doomed.iter().map(ToString::to_string).collect();
        self.note(format!(
            "mass deletion ({}): {} objects at once: {}",
            if all { "all" } else { "about half" },
            names.len(),
            names.join(", ")
        ));
        Ok(())
    }

    /// What the model keeps of an object about to be deleted: the resource an `Orphan` object
    /// leaves behind, the preset an adopter lets go, the images a snapshot takes with it.
    fn forget(&mut self, key: &ObjectKey, seen: &BTreeMap<ObjectKey, Seen>) {
        let Some(wanted) = self.model.live.get(key).cloned() else {
            return;
        };
        let recorded = seen.get(key).and_then(|s| s.status.external_id.clone());
        if wanted.kind == Kind::Instance
            && wanted.policy == Policy::Manage
            && wanted.spec["deletionPolicy"] == "Snapshot"
        {
            self.final_snapshots.push(FinalSnapshotOf {
                object: key.clone(),
                account: wanted.group.account,
                machine: recorded.clone(),
            });
        }
        if let Some(preset) = self
            .presets
            .iter_mut()
            .find(|p| p.adopter.as_ref() == Some(key))
        {
            preset.released_by = preset.adopter.take();
            preset.recorded |= recorded.as_deref() == Some(preset.id.as_str());
            // A managed adopter deletes it, or it was never recorded and stays: either way it
            // is not offered again.
            preset.deleted = preset.role == Policy::Manage;
        } else if wanted.policy == Policy::Orphan {
            self.kept.push(Kept {
                object: key.clone(),
                kind: wanted.kind,
                account: wanted.group.account,
                cloud_name: gpucloud_controller::flow::naming::cloud_name(
                    &key.namespace,
                    &key.name,
                    &wanted.uid,
                ),
                id: recorded,
            });
        }
        if wanted.kind == Kind::Snapshot {
            let images: Vec<ObjectKey> = self
                .model
                .referrers(key)
                .into_iter()
                .filter(|r| self.model.live[r].kind == Kind::Image)
                .collect();
            for image in images {
                if let Some(w) = self.model.live.get_mut(&image) {
                    w.source_deleted = true;
                }
                self.stats.images_removed_with_snapshot += 1;
                self.note(format!(
                    "{image}: its snapshot {key} goes, and the cloud removes the image with it"
                ));
            }
        }
    }

    // === Changing objects ===

    /// Merges `change` into the live object's spec, here and in the API server.
    async fn patch_spec(&mut self, key: &ObjectKey, change: Value) -> Result<(), String> {
        let Some(wanted) = self.model.live.get_mut(key) else {
            return Ok(());
        };
        merge(&mut wanted.spec, &change);
        let kind = wanted.kind;
        let patch = json!({"spec": change});
        let result = merge_patch(&self.env, kind, key, &patch).await;
        self.note(format!("patch {} {key} {change}", kind_name(kind)));
        self.stats.updates += 1;
        result.map_err(|e| format!("patch {key} {change}: {e}"))
    }

    /// A live object of `kind`, any group and policy.
    fn pick(&mut self, kind: Kind) -> Option<ObjectKey> {
        let keys: Vec<ObjectKey> = self
            .model
            .live
            .iter()
            .filter(|(_, w)| w.kind == kind)
            .map(|(key, _)| key.clone())
            .collect();
        (!keys.is_empty()).then(|| keys[self.rng.random_range(0..keys.len())].clone())
    }

    /// A live managed object of `kind` that may refer to others: not the late create's
    /// object, which refers to nothing so that no deletion ever takes it along.
    fn pick_referring(&mut self, kind: Kind) -> Option<ObjectKey> {
        let late = self.late.as_ref().map(|late| late.key.clone());
        let keys: Vec<ObjectKey> = self
            .model
            .live
            .iter()
            .filter(|(key, w)| w.kind == kind && w.referable() && Some(*key) != late.as_ref())
            .map(|(key, _)| key.clone())
            .collect();
        (!keys.is_empty()).then(|| keys[self.rng.random_range(0..keys.len())].clone())
    }

    async fn set_power(&mut self) -> Result<(), String> {
        let Some(key) = self.pick(Kind::Instance) else {
            return Ok(());
        };
        let power = if self.rng.random_bool(0.5) {
            "Stopped"
        } else {
            "Running"
        };
        if power == "Stopped" {
            // A snapshot waiting for this machine needs it running.
            let seen = all_objects(&self.env)
                .await
                .map_err(|e| format!("listing objects: {e}"))?;
            let waiting = self.model.referrers(&key).into_iter().any(|r| {
                self.model.live[&r].kind == Kind::Snapshot
                    && seen.get(&r).is_none_or(|s| s.status.external_id.is_none())
            });
            if waiting {
                return Ok(());
            }
        }
        self.patch_spec(&key, json!({"powerState": power})).await
    }

    async fn attach_or_detach(&mut self) -> Result<(), String> {
        let Some(volume) = self.pick_referring(Kind::Volume) else {
            return Ok(());
        };
        let group = self.model.live[&volume].group;
        let target = if self.rng.random_bool(0.4) {
            None
        } else {
            self.pick_referable(group, Kind::Instance)
        };
        let change = match target {
            Some(instance) => json!({"instanceRef": {"name": instance.name}}),
            None => json!({"instanceRef": null}),
        };
        self.patch_spec(&volume, change).await
    }

    async fn resize(&mut self) -> Result<(), String> {
        let Some(volume) = self.pick(Kind::Volume) else {
            return Ok(());
        };
        // A clone waiting for this volume copies its size: the clone's spec must stay as
        // large.
        let clones = self.model.referrers(&volume);
        if !clones.is_empty() {
            let seen = all_objects(&self.env)
                .await
                .map_err(|e| format!("listing objects: {e}"))?;
            if clones
                .iter()
                .any(|c| seen.get(c).is_none_or(|s| s.status.external_id.is_none()))
            {
                return Ok(());
            }
        }
        let current = self.model.live[&volume].spec["sizeGb"]
            .as_i64()
            .unwrap_or(10);
        let grown = current + self.rng.random_range(1..20);
        self.patch_spec(&volume, json!({"sizeGb": grown})).await
    }

    async fn change_rules(&mut self) -> Result<(), String> {
        let Some(firewall) = self.pick(Kind::Firewall) else {
            return Ok(());
        };
        let rules = self.random_rules();
        self.patch_spec(&firewall, json!({"rules": rules})).await
    }

    async fn change_firewall_targets(&mut self) -> Result<(), String> {
        let Some(firewall) = self.pick_referring(Kind::Firewall) else {
            return Ok(());
        };
        let group = self.model.live[&firewall].group;
        let refs: Vec<Value> = self
            .model
            .referable(group, Kind::Instance)
            .into_iter()
            .filter(|_| self.rng.random_bool(0.5))
            .map(|key| json!({"name": key.name}))
            .collect();
        self.patch_spec(&firewall, json!({"instanceRefs": refs}))
            .await
    }

    // === The end ===

    pub(crate) async fn delete_everything(&mut self) -> Result<(), String> {
        let seen = all_objects(&self.env)
            .await
            .map_err(|e| format!("listing objects: {e}"))?;
        let live: Vec<ObjectKey> = self.model.live.keys().cloned().collect();
        for key in &live {
            self.forget(key, &seen);
        }
        for key in live {
            let kind = self.model.live[&key].kind;
            delete(&self.env, kind, &key).await?;
        }
        self.model.live.clear();
        self.tenant.delete_all(&self.env).await?;
        self.note("everything deleted");
        let asked = Instant::now();
        let deadline = asked + Duration::from_secs(DELETE_SECONDS);
        loop {
            let remaining = all_objects(&self.env).await.map_err(|e| e.to_string())?;
            let tenant = self.tenant.remaining(&self.env).await?;
            if remaining.is_empty() && tenant.is_empty() {
                self.note(format!("everything gone in {:?}", asked.elapsed()));
                self.stats.delete_ms += asked.elapsed().as_millis() as u64;
                return Ok(());
            }
            if Instant::now() > deadline {
                let mut stuck: Vec<String> = remaining
                    .iter()
                    .map(|(key, seen)| {
                        format!(
                            "{} {key}: finalizers {:?}, conditions {:?}",
                            kind_name(seen.kind),
                            seen.meta.finalizers,
                            conditions(&seen.status)
                        )
                    })
                    .collect();
                stuck.extend(tenant);
                return Err(format!(
                    "stuck finalizers {DELETE_SECONDS}s after deleting everything:\n  {}",
                    stuck.join("\n  ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

// === Helpers ===

pub(crate) fn conditions(status: &CloudStatus) -> Vec<String> {
    status
        .conditions
        .iter()
        .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
        .collect()
}

/// The requests that make one resource of each basic kind named `<prefix>-...` by hand.
fn creates(prefix: &str) -> Vec<(Kind, Value)> {
    vec![
        (Kind::SshKey, json!({"name": format!("{prefix}-key")})),
        (
            Kind::Volume,
            json!({"name": format!("{prefix}-data"), "size": 20, "region": "us-east-1"}),
        ),
        (
            Kind::Firewall,
            json!({"name": format!("{prefix}-fw"), "region": "us-east-1",
                "rules": [{"direction": "ingress", "protocol": "tcp", "ethertype": "IPv4",
                    "remote_ip_prefix": "198.51.100.0/24", "port_range_min": 80, "port_range_max": 80}]}),
        ),
        (
            Kind::Instance,
            json!({"name": format!("{prefix}-vm"), "region": "us-east-1",
                "gpu_type": "L40S", "gpu_count": 1, "image_id": "ubuntu-22.04-cuda-12"}),
        ),
    ]
}

/// Makes one resource with the harness's own key; returns its id.
async fn create_by_hand(cloud: &CloudClient, kind: Kind, request: Value) -> Result<String, String> {
    let failed = |e: gpucloud_cloud::Error| format!("creating {request}: {e}");
    Ok(match kind {
        Kind::SshKey => {
            cloud
                .create_ssh_key(&serde_json::from_value(request.clone()).unwrap())
                .await
                .map_err(failed)?
                .body
                .key
                .id
        }
        Kind::Volume => {
            cloud
                .create_volume(&serde_json::from_value(request.clone()).unwrap())
                .await
                .map_err(failed)?
                .id
        }
        Kind::Firewall => {
            cloud
                .create_firewall(&serde_json::from_value(request.clone()).unwrap())
                .await
                .map_err(failed)?
                .id
        }
        Kind::Instance => {
            cloud
                .create_instance(&serde_json::from_value(request.clone()).unwrap())
                .await
                .map_err(failed)?
                .instance_id
        }
        Kind::Snapshot | Kind::Image => return Err(format!("no {kind:?} is made by hand")),
    })
}

fn values<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .map(|item| serde_json::to_value(item).unwrap_or_default())
        .collect()
}

fn without_billing(mut value: Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.remove("billing");
    }
    value
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// JSON merge patch semantics on a spec kept by the harness.
fn merge(target: &mut Value, change: &Value) {
    match (target.as_object_mut(), change.as_object()) {
        (Some(target), Some(change)) => {
            for (key, value) in change {
                if value.is_null() {
                    target.remove(key);
                } else {
                    target.insert(key.clone(), value.clone());
                }
            }
        }
        _ => *target = change.clone(),
    }
}

/// Calls `$f::<K>($args)` for the kind's type.
macro_rules! for_kind {
    ($kind:expr, $f:ident($($arg:expr),*)) => {
        match $kind {
            Kind::SshKey => $f::<SshKey>($($arg),*).await,
            Kind::Instance => $f::<GpuInstance>($($arg),*).await,
            Kind::Volume => $f::<Volume>($($arg),*).await,
            Kind::Firewall => $f::<Firewall>($($arg),*).await,
            Kind::Snapshot => $f::<Snapshot>($($arg),*).await,
            Kind::Image => $f::<Image>($($arg),*).await,
        }
    };
}

/// Creates the object; returns its uid.
pub async fn post(
    env: &Env,
    kind: Kind,
    namespace: &str,
    object: &Value,
) -> Result<String, kube::Error> {
    async fn create<K>(env: &Env, namespace: &str, object: &Value) -> Result<String, kube::Error>
    where
        K: Watched + serde::Serialize,
    {
        let object: K = serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
        let created = Api::<K>::namespaced(env.client.clone(), namespace)
            .create(&PostParams::default(), &object)
            .await?;
        Ok(created.uid().unwrap_or_default())
    }
    for_kind!(kind, create(env, namespace, object))
}

/// Deletes the object; one already gone is success.
pub async fn delete(env: &Env, kind: Kind, key: &ObjectKey) -> Result<(), String> {
    async fn remove<K>(env: &Env, key: &ObjectKey) -> Result<(), kube::Error>
    where
        K: Watched,
    {
        let api = Api::<K>::namespaced(env.client.clone(), &key.namespace);
        match api.delete(&key.name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(error),
        }
    }
    for_kind!(kind, remove(env, key)).map_err(|e| format!("delete {key}: {e}"))
}

async fn merge_patch(
    env: &Env,
    kind: Kind,
    key: &ObjectKey,
    patch: &Value,
) -> Result<(), kube::Error> {
    async fn apply<K>(env: &Env, key: &ObjectKey, patch: &Value) -> Result<(), kube::Error>
    where
        K: Watched,
    {
        Api::<K>::namespaced(env.client.clone(), &key.namespace)
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
    }
    for_kind!(kind, apply(env, key, patch))
}

/// An object as the API server holds it.
pub(crate) struct Seen {
    pub kind: Kind,
    pub status: CloudStatus,
    pub meta: kube::api::ObjectMeta,
}

/// Every object of every kind in the teams' namespaces (team-a, team-c), by key.
pub(crate) async fn all_objects(env: &Env) -> Result<BTreeMap<ObjectKey, Seen>, kube::Error> {
    objects_of(env, &Kind::ALL).await
}

/// Every object of `kinds` in the teams' namespaces, by key.
async fn objects_of(env: &Env, kinds: &[Kind]) -> Result<BTreeMap<ObjectKey, Seen>, kube::Error> {
    async fn list_of<K>(
        env: &Env,
        kind: Kind,
        into: &mut BTreeMap<ObjectKey, Seen>,
    ) -> Result<(), kube::Error>
    where
        K: Watched + Managed,
    {
        for object in Api::<K>::all(env.client.clone())
            .list(&ListParams::default())
            .await?
        {
            let namespace = object.namespace().unwrap_or_default();
            if namespace != NAMESPACE && namespace != TEAM_C {
                continue;
            }
            into.insert(
                ObjectKey::new(&namespace, &object.name_any()),
                Seen {
                    kind,
                    // A first create's intent may be in its annotation, not in the status yet.
                    status: gpucloud_controller::flow::recorded::recorded_status(&object),
                    meta: object.meta().clone(),
                },
            );
        }
        Ok(())
    }
    let mut objects = BTreeMap::new();
    for &kind in kinds {
        for_kind!(kind, list_of(env, kind, &mut objects))?;
    }
    Ok(objects)
}
