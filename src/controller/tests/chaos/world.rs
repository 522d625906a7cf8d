//! One seeded chaos run: a small world, a random mix of changes under a seeded fault plan,
//! then the invariants checked against the simulator's admin view.

use crate::support::{Env, NAMESPACE, OPERATOR_NAMESPACE, cloud_client, test_config};
use crate::tenant::{TENANT, Tenant};
use crate::{API_KEY_MARK, RunStats};
use gpucloud_api::{CloudStatus, Firewall, GpuInstance, Managed, Snapshot, SshKey, Volume};
use gpucloud_apiserver::faults::ApiFaultPlan;
use gpucloud_cloud::{CallObserver, CallOutcome, Operation};
use gpucloud_simulator::{
    Delays, DropMode, FaultPlan, LatencySpike, SimulatorConfig, ThrottleBurst,
};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Bound on the wait for every object to reach its desired state once faults are lifted.
const CONVERGE_SECONDS: u64 = 90;
/// Bound on the wait for every object to be gone once all are deleted.
const DELETE_SECONDS: u64 = 90;
/// After the faults are lifted, an object not yet `Ready` must say why within this time.
const EXPLAIN_WITHIN: Duration = Duration::from_secs(10);
/// The operator's bound on one cloud call; latency spikes go beyond it.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(600);
/// The longest a latency spike holds a request before the cloud acts on it.
const MAX_ACT_DELAY: Duration = Duration::from_millis(1400);

/// A failed run: the seed, what broke, and what happened before.
pub struct Failure {
    pub seed: u64,
    pub message: String,
    pub trace: Vec<String>,
}

// === The model of what should exist ===

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    SshKey,
    Instance,
    Volume,
    Firewall,
}

impl Kind {
    pub(crate) const ALL: [Kind; 4] = [Kind::SshKey, Kind::Instance, Kind::Volume, Kind::Firewall];

    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Kind::SshKey => "key",
            Kind::Instance => "vm",
            Kind::Volume => "vol",
            Kind::Firewall => "fw",
        }
    }
}

/// The objects that exist (as far as the harness asked) and their wanted specs.
#[derive(Default)]
struct Model {
    live: BTreeMap<String, (Kind, Value)>,
}

impl Model {
    fn names(&self, kind: Kind) -> Vec<String> {
        self.live
            .iter()
            .filter(|(_, (k, _))| *k == kind)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whether a live object refers to instance `name`.
    fn referenced(&self, name: &str) -> bool {
        self.live.values().any(|(kind, spec)| match kind {
            Kind::Volume => spec["instanceRef"]["name"] == name,
            Kind::Firewall => spec["instanceRefs"]
                .as_array()
                .is_some_and(|refs| refs.iter().any(|r| r["name"] == name)),
            _ => false,
        })
    }
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
}

/// Sees every cloud call the operator makes and signals when an armed crash point is hit.
#[derive(Default)]
struct CrashObserver {
    armed: Mutex<Option<CrashPoint>>,
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
        *self.armed.lock().unwrap() = None;
        self.fired.notify_one();
    }
}

impl CallObserver for CrashObserver {
    fn on_call(&self, operation: Operation, _outcome: &CallOutcome, _elapsed: Duration) {
        let name = operation.name();
        let hit = match self.armed() {
            Some(CrashPoint::AfterCreateCall) => name.starts_with("Create"),
            Some(CrashPoint::MidDelete) => name.starts_with("Delete"),
            _ => false,
        };
        if hit {
            self.fire();
        }
    }
}

// === The run ===

struct Run {
    seed: u64,
    rng: StdRng,
    env: Env,
    api_key: String,
    started: Instant,
    trace: Vec<String>,
    model: Model,
    stats: RunStats,
    observer: Arc<CrashObserver>,
    operator: gpucloud_controller::run::OperatorConfig,
    operator_down_until: Option<Instant>,
    /// The cloud fault plan in force during the fault phase.
    cloud_plan: FaultPlan,
    next_index: BTreeMap<Kind, u32>,
    /// The hostile tenant of namespace `team-b`, with its own random stream.
    tenant: Tenant,
}

pub async fn run_seed(seed: u64) -> Result<RunStats, Failure> {
    let mut rng = StdRng::seed_from_u64(seed);
    let api_key = format!("{API_KEY_MARK}{seed:x}-{:016x}", rng.random::<u64>());
    let list_lag = Duration::from_millis([0, 200, 500][rng.random_range(0..3)]);
    let simulator = SimulatorConfig {
        api_keys: vec![api_key.clone()],
        seed,
        delays: Delays::fast(),
        list_lag,
        ..SimulatorConfig::default()
    };
    let env = Env::without_operator(simulator).await;
    let observer = Arc::new(CrashObserver::default());
    let mut operator = test_config(&env.simulator);
    operator.cloud.timeout = CLIENT_TIMEOUT;
    operator.cloud.observer = Some(observer.clone());
    // The cloud acts on a request up to MAX_ACT_DELAY after receiving it, and a killed
    // process's call may have been sent just before the kill: the window covers both.
    operator.reconcile.settle_window = list_lag + MAX_ACT_DELAY + Duration::from_millis(200);
    operator.reconcile.transition_requeue = Duration::from_millis(150);
    operator.reconcile.observe.resync = Duration::from_secs(1);
    operator.reconcile.observe.fast = Duration::from_millis(100);
    let mut run = Run {
        seed,
        rng,
        env,
        api_key,
        started: Instant::now(),
        trace: Vec::new(),
        model: Model::default(),
        stats: RunStats::default(),
        observer,
        operator,
        operator_down_until: None,
        cloud_plan: FaultPlan::default(),
        next_index: BTreeMap::new(),
        tenant: Tenant::new(seed),
    };
    run.note(format!("list lag {list_lag:?}"));
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
    fn note(&mut self, line: impl Into<String>) {
        let at = self.started.elapsed().as_millis();
        self.trace.push(format!("{at:>6} ms  {}", line.into()));
    }

    async fn play(&mut self) -> Result<(), String> {
        let foreign = self.seed_foreign().await?;
        let baseline_drain = self.hourly_drain();
        self.note(format!(
            "foreign resources made; drain {baseline_drain:.6}/h"
        ));
        self.tenant.setup(&self.env).await?;

        self.env.start_operator(self.operator.clone());
        self.inject_faults()?;
        self.chaos().await?;
        self.lift_faults().await;

        self.converge().await?;
        self.check_foreign(&foreign)?;
        self.check_secrets_in_objects_and_events().await?;
        self.delete_everything().await?;
        self.check_nothing_left(&foreign, baseline_drain)?;
        self.env.stop_operator().await;
        Ok(())
    }

    // === Setup ===

    /// Resources the operator did not make: one of each kind, made with the account's key.
    async fn seed_foreign(&mut self) -> Result<Value, String> {
        let cloud = cloud_client(&self.env);
        let key: gpucloud_cloud::model::CreateSshKeyRequest =
            serde_json::from_value(json!({"name": "foreign-key"})).unwrap();
        cloud
            .create_ssh_key(&key)
            .await
            .map_err(|e| e.to_string())?;
        let volume: gpucloud_cloud::model::CreateVolumeRequest = serde_json::from_value(
            json!({"name": "foreign-data", "size": 20, "region": "us-east-1"}),
        )
        .unwrap();
        cloud
            .create_volume(&volume)
            .await
            .map_err(|e| e.to_string())?;
        let firewall: gpucloud_cloud::model::CreateFirewallRequest =
            serde_json::from_value(json!({"name": "foreign-fw", "region": "us-east-1",
                "rules": [{"direction": "ingress", "protocol": "tcp", "ethertype": "IPv4",
                    "remote_ip_prefix": "198.51.100.0/24", "port_range_min": 80, "port_range_max": 80}]}))
            .unwrap();
        cloud
            .create_firewall(&firewall)
            .await
            .map_err(|e| e.to_string())?;
        let instance: gpucloud_cloud::model::CreateInstanceRequest =
            serde_json::from_value(json!({"name": "foreign-vm", "region": "us-east-1",
                "gpu_type": "L40S", "gpu_count": 1, "image_id": "ubuntu-22.04-cuda-12"}))
            .unwrap();
        cloud
            .create_instance(&instance)
            .await
            .map_err(|e| e.to_string())?;
        // Let every pending state finish, so later comparisons see settled resources.
        self.env.simulator.advance_clock(Duration::from_secs(60));
        Ok(self.foreign_view())
    }

    /// The foreign resources as they stand, without what time alone changes (billing).
    fn foreign_view(&self) -> Value {
        let state = self.env.simulator.state();
        let strip = |mut value: Value| {
            if let Some(object) = value.as_object_mut() {
                object.remove("billing");
            }
            value
        };
        let pick = |items: Vec<Value>, field: &str| -> Vec<Value> {
            items
                .into_iter()
                .filter(|v| v[field].as_str().is_some_and(|n| n.starts_with("foreign-")))
                .map(strip)
                .collect()
        };
        let to_values = |v: &dyn erased::ToValues| v.values();
        json!({
            "instances": pick(to_values(&state.instances), "vm_name"),
            "volumes": pick(to_values(&state.volumes), "name"),
            "firewalls": pick(to_values(&state.firewalls), "name"),
            "ssh_keys": pick(to_values(&state.ssh_keys), "name"),
        })
    }

    /// What the account spends per hour now, measured by moving the clock an hour.
    fn hourly_drain(&self) -> f64 {
        let before = self.env.simulator.state().balance;
        self.env.simulator.advance_clock(Duration::from_secs(3600));
        let after = self.env.simulator.state().balance;
        before - after
    }

    fn inject_faults(&mut self) -> Result<(), String> {
        let rng = &mut self.rng;
        let creates_and_deletes = [
            "CreateInstance",
            "CreateVolume",
            "CreateFirewall",
            "CreateSshKey",
            "DeleteInstance",
            "DeleteVolume",
            "DeleteFirewall",
            "DeleteSshKey",
            "AttachVolume",
            "DetachVolume",
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
            act_late: BTreeMap::new(),
        };
        let api = ApiFaultPlan {
            seed: self.seed,
            status_conflict_rate: rng.random_range(0.05..0.3),
            watch_cut_rate: rng.random_range(0.2..0.6),
            watch_lifetime: (Duration::from_millis(100), Duration::from_millis(1500)),
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
        self.stats.status_conflicts += api.status_conflicts;
        self.stats.watches_cut += api.watches_cut + api.disconnects;
        self.note("faults lifted");
    }

    // === The fault phase ===

    async fn chaos(&mut self) -> Result<(), String> {
        // A few objects of every kind first, so updates have something to act on.
        for kind in Kind::ALL {
            self.create(kind).await?;
        }
        if self.rng.random_bool(0.5) {
            self.create(Kind::Instance).await?;
        }
        let actions = self.rng.random_range(10..20);
        let mut before_create_poll = tokio::time::interval(Duration::from_millis(20));
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
                    self.act().await?;
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
        async fn any<K>(client: &kube::Client) -> bool
        where
            K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
                + Managed
                + Clone
                + std::fmt::Debug
                + serde::de::DeserializeOwned,
        {
            let api: Api<K> = Api::namespaced(client.clone(), NAMESPACE);
            api.list(&ListParams::default()).await.is_ok_and(|list| {
                list.items.iter().any(|o| {
                    let s = o.cloud_status();
                    s.pending_create.is_some() && s.external_id.is_none()
                })
            })
        }
        let client = &self.env.client;
        any::<GpuInstance>(client).await
            || any::<Volume>(client).await
            || any::<Firewall>(client).await
            || any::<SshKey>(client).await
    }

    async fn act(&mut self) -> Result<(), String> {
        let roll = self.rng.random_range(0..100);
        match roll {
            0..15 => {
                let kind = Kind::ALL[self.rng.random_range(0..4)];
                self.create(kind).await
            }
            15..25 => self.delete_one().await,
            25..35 => self.set_power().await,
            35..45 => self.attach_or_detach().await,
            45..52 => self.resize().await,
            52..60 => self.change_rules().await,
            60..66 => self.change_firewall_targets().await,
            66..74 => {
                self.kill("random point").await;
                Ok(())
            }
            74..84 => {
                let point = [
                    CrashPoint::BeforeCreate,
                    CrashPoint::AfterCreateCall,
                    CrashPoint::MidDelete,
                ][self.rng.random_range(0..3)];
                self.observer.arm(point);
                self.stats.crash_points_armed += 1;
                self.note(format!("crash point armed: {point:?}"));
                Ok(())
            }
            84..90 => {
                self.env.apiserver.faults().disconnect_watches();
                self.note("watches disconnected");
                Ok(())
            }
            90..95 => {
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

    // === Changes to objects ===

    fn new_name(&mut self, kind: Kind) -> String {
        // Names are reused now and then, so an object deleted and made again is tried too.
        let deleted: Vec<u32> = (0..*self.next_index.get(&kind).unwrap_or(&0))
            .filter(|i| {
                !self
                    .model
                    .live
                    .contains_key(&format!("{}-{i}", kind.prefix()))
            })
            .collect();
        if !deleted.is_empty() && self.rng.random_bool(0.3) {
            let i = deleted[self.rng.random_range(0..deleted.len())];
            return format!("{}-{i}", kind.prefix());
        }
        let index = self.next_index.entry(kind).or_insert(0);
        let name = format!("{}-{index}", kind.prefix());
        *index += 1;
        name
    }

    fn random_instance(&mut self) -> Option<String> {
        let instances = self.model.names(Kind::Instance);
        (!instances.is_empty())
            .then(|| instances[self.rng.random_range(0..instances.len())].clone())
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

    async fn create(&mut self, kind: Kind) -> Result<(), String> {
        let name = self.new_name(kind);
        let spec = match kind {
            Kind::SshKey => json!({}),
            Kind::Instance => {
                let power = if self.rng.random_bool(0.2) {
                    "Stopped"
                } else {
                    "Running"
                };
                json!({"region": "us-east-1", "gpuType": "L40S",
                    "osImage": "ubuntu-22.04-cuda-12", "powerState": power})
            }
            Kind::Volume => {
                let mut spec =
                    json!({"region": "us-east-1", "sizeGb": self.rng.random_range(10..40)});
                if self.rng.random_bool(0.5)
                    && let Some(instance) = self.random_instance()
                {
                    spec["instanceRef"] = json!({"name": instance});
                }
                spec
            }
            Kind::Firewall => {
                let mut refs = Vec::new();
                if self.rng.random_bool(0.6)
                    && let Some(instance) = self.random_instance()
                {
                    refs.push(json!({"name": instance}));
                }
                json!({"region": "us-east-1", "rules": self.random_rules(), "instanceRefs": refs})
            }
        };
        let object = json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": kind_name(kind),
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": spec,
        });
        let created = match kind {
            Kind::SshKey => post::<SshKey>(&self.env, &object).await,
            Kind::Instance => post::<GpuInstance>(&self.env, &object).await,
            Kind::Volume => post::<Volume>(&self.env, &object).await,
            Kind::Firewall => post::<Firewall>(&self.env, &object).await,
        };
        match created {
            Ok(()) => {
                self.note(format!("create {} {name} {spec}", kind_name(kind)));
                self.model.live.insert(name, (kind, spec));
                self.stats.objects += 1;
                Ok(())
            }
            // The previous object of that name is still finishing its deletion.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.note(format!(
                    "create {name} skipped: the old one is still deleting"
                ));
                Ok(())
            }
            Err(error) => Err(format!("create {name}: {error}")),
        }
    }

    async fn delete_one(&mut self) -> Result<(), String> {
        let candidates: Vec<(String, Kind)> = self
            .model
            .live
            .iter()
            .filter(|(name, (kind, _))| *kind != Kind::Instance || !self.model.referenced(name))
            .map(|(name, (kind, _))| (name.clone(), *kind))
            .collect();
        if candidates.is_empty() {
            return Ok(());
        }
        let (name, kind) = candidates[self.rng.random_range(0..candidates.len())].clone();
        self.delete(kind, &name).await?;
        self.model.live.remove(&name);
        self.note(format!("delete {} {name}", kind_name(kind)));
        Ok(())
    }

    async fn delete(&self, kind: Kind, name: &str) -> Result<(), String> {
        let result = match kind {
            Kind::SshKey => remove::<SshKey>(&self.env, name).await,
            Kind::Instance => remove::<GpuInstance>(&self.env, name).await,
            Kind::Volume => remove::<Volume>(&self.env, name).await,
            Kind::Firewall => remove::<Firewall>(&self.env, name).await,
        };
        result.map_err(|e| format!("delete {name}: {e}"))
    }

    /// Merges `change` into the live object's spec, here and in the API server.
    async fn patch_spec(&mut self, name: &str, change: Value) -> Result<(), String> {
        let Some((kind, spec)) = self.model.live.get_mut(name) else {
            return Ok(());
        };
        merge(spec, &change);
        let kind = *kind;
        let patch = json!({"spec": change});
        let result = match kind {
            Kind::SshKey => merge_patch::<SshKey>(&self.env, name, &patch).await,
            Kind::Instance => merge_patch::<GpuInstance>(&self.env, name, &patch).await,
            Kind::Volume => merge_patch::<Volume>(&self.env, name, &patch).await,
            Kind::Firewall => merge_patch::<Firewall>(&self.env, name, &patch).await,
        };
        self.note(format!("patch {} {name} {change}", kind_name(kind)));
        self.stats.updates += 1;
        result.map_err(|e| format!("patch {name} {change}: {e}"))
    }

    fn pick(&mut self, kind: Kind) -> Option<String> {
        let names = self.model.names(kind);
        (!names.is_empty()).then(|| names[self.rng.random_range(0..names.len())].clone())
    }

    async fn set_power(&mut self) -> Result<(), String> {
        let Some(name) = self.pick(Kind::Instance) else {
            return Ok(());
        };
        let power = if self.rng.random_bool(0.5) {
            "Stopped"
        } else {
            "Running"
        };
        self.patch_spec(&name, json!({"powerState": power})).await
    }

    async fn attach_or_detach(&mut self) -> Result<(), String> {
        let Some(volume) = self.pick(Kind::Volume) else {
            return Ok(());
        };
        let target = if self.rng.random_bool(0.4) {
            None
        } else {
            self.random_instance()
        };
        let change = match target {
            Some(instance) => json!({"instanceRef": {"name": instance}}),
            None => json!({"instanceRef": null}),
        };
        self.patch_spec(&volume, change).await
    }

    async fn resize(&mut self) -> Result<(), String> {
        let Some(volume) = self.pick(Kind::Volume) else {
            return Ok(());
        };
        let current = self.model.live[&volume].1["sizeGb"].as_i64().unwrap_or(10);
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
        let Some(firewall) = self.pick(Kind::Firewall) else {
            return Ok(());
        };
        let refs: Vec<Value> = self
            .model
            .names(Kind::Instance)
            .into_iter()
            .filter(|_| self.rng.random_bool(0.5))
            .map(|name| json!({"name": name}))
            .collect();
        self.patch_spec(&firewall, json!({"instanceRefs": refs}))
            .await
    }

    // === Invariants ===

    /// Waits until every object is `Ready` and matches its spec in the cloud, with exactly one
    /// cloud resource each; an object not `Ready` must say why.
    async fn converge(&mut self) -> Result<(), String> {
        let lifted = Instant::now();
        let deadline = lifted + Duration::from_secs(CONVERGE_SECONDS);
        // Cloud calls near the end, to tell an operator still acting on a stale view from one
        // that stopped reconciling.
        let watch_calls_from = deadline - Duration::from_secs(10);
        let mut calls_before: Option<BTreeMap<String, u64>> = None;
        loop {
            if calls_before.is_none() && Instant::now() > watch_calls_from {
                calls_before = Some(self.env.simulator.call_counts());
            }
            let mut problems = self.convergence_problems().await;
            if problems.is_empty() {
                // Team-a is done; the tenant's objects must be refused (or gone).
                problems = self.tenant.problems(&self.env).await?;
            }
            if problems.is_empty() {
                self.tenant.sample(&self.env).await?;
                self.note(format!("converged in {:?}", lifted.elapsed()));
                self.stats.converge_ms += lifted.elapsed().as_millis() as u64;
                return Ok(());
            }
            if lifted.elapsed() > EXPLAIN_WITHIN
                && let Some(stuck) = problems.iter().find(|p| p.contains("no condition"))
            {
                return Err(format!("stuck without a condition explaining why: {stuck}"));
            }
            if Instant::now() > deadline {
                let before = calls_before.unwrap_or_default();
                let recent: Vec<String> = self
                    .env
                    .simulator
                    .call_counts()
                    .into_iter()
                    .filter_map(|(operation, count)| {
                        let new =
                            count.saturating_sub(before.get(&operation).copied().unwrap_or(0));
                        (new > 0).then(|| format!("{operation} {new}"))
                    })
                    .collect();
                return Err(format!(
                    "not converged {CONVERGE_SECONDS}s after the faults were lifted:\n  {}\n  cloud calls in the last 10 s: {}",
                    problems.join("\n  "),
                    if recent.is_empty() {
                        "none".to_string()
                    } else {
                        recent.join(", ")
                    }
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn convergence_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let state = self.env.simulator.state();
        // Serialized once, and only when an object is stuck.
        let account = std::cell::OnceCell::new();
        let objects = match all_objects(&self.env).await {
            Ok(objects) => objects,
            Err(error) => return vec![format!("listing objects: {error}")],
        };
        // Objects the harness deleted must be gone (their finalizers released).
        for (name, (kind, _, meta)) in &objects {
            if !self.model.live.contains_key(name) {
                problems.push(format!(
                    "{} {name}: deleted but still present (finalizers {:?})",
                    kind_name(*kind),
                    meta.finalizers
                ));
            }
        }
        let mut ids: BTreeMap<&str, String> = BTreeMap::new();
        for (name, (kind, _)) in &self.model.live {
            let Some((_, status, meta)) = objects.get(name) else {
                problems.push(format!("{name}: missing from the API server"));
                continue;
            };
            if let Some(id) = &status.external_id {
                ids.insert(name, id.clone());
            }
            if !status.is_ready(meta.generation) {
                let explained = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ != "Ready" && c.status == "True" && !c.message.is_empty())
                    || status
                        .condition("Ready")
                        .is_some_and(|c| !c.message.is_empty());
                let conditions: Vec<String> = status
                    .conditions
                    .iter()
                    .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                    .collect();
                // What the cloud holds under the recorded id, to tell a stale view of the
                // operator's from a cloud that keeps undoing its calls.
                let in_cloud = status
                    .external_id
                    .as_deref()
                    .map(|id| {
                        let account = account
                            .get_or_init(|| serde_json::to_value(&state).unwrap_or_default());
                        format!("; the cloud's record: {}", cloud_record(account, id))
                    })
                    .unwrap_or_default();
                problems.push(format!(
                    "{} {name}: not Ready (generation {:?}, observed {:?}; {}){}{in_cloud}",
                    kind_name(*kind),
                    meta.generation,
                    status.observed_generation,
                    conditions.join("; "),
                    if explained { "" } else { " - no condition" }
                ));
            }
        }
        if !problems.is_empty() {
            return problems;
        }
        // Exactly one cloud resource per object, and nothing else carrying the operator's mark
        // for this namespace (the tenant's own resources are checked when deleted).
        let team_mark = format!("gco-{NAMESPACE}-");
        let marked = |name: &str| name.starts_with(&team_mark) && !name.ends_with("-boot");
        let cloud_names: BTreeMap<Kind, Vec<(String, String)>> = BTreeMap::from([
            (
                Kind::Instance,
                state
                    .instances
                    .iter()
                    .map(|i| (i.instance_id.clone(), i.vm_name.clone()))
                    .collect(),
            ),
            (
                Kind::Volume,
                state
                    .volumes
                    .iter()
                    .map(|v| (v.id.clone(), v.name.clone()))
                    .collect(),
            ),
            (
                Kind::Firewall,
                state
                    .firewalls
                    .iter()
                    .map(|f| (f.id.clone(), f.name.clone()))
                    .collect(),
            ),
            (
                Kind::SshKey,
                state
                    .ssh_keys
                    .iter()
                    .map(|k| (k.id.clone(), k.name.clone()))
                    .collect(),
            ),
        ]);
        for kind in Kind::ALL {
            let live = self.model.names(kind);
            let resources: Vec<&(String, String)> = cloud_names[&kind]
                .iter()
                .filter(|(_, n)| marked(n))
                .collect();
            if resources.len() != live.len() {
                problems.push(format!(
                    "{}: {} objects but {} operator resources in the cloud: {:?}",
                    kind_name(kind),
                    live.len(),
                    resources.len(),
                    resources
                ));
            }
            for name in &live {
                let Some(id) = ids.get(name.as_str()) else {
                    problems.push(format!("{name}: Ready without a cloud id"));
                    continue;
                };
                if !resources.iter().any(|(rid, _)| rid == id) {
                    problems.push(format!("{name}: its cloud resource {id} does not exist"));
                }
            }
        }
        if !problems.is_empty() {
            return problems;
        }
        // Every object matches its spec.
        let id_of = |name: &str| ids.get(name).cloned();
        for (name, (kind, spec)) in &self.model.live {
            let id = &ids[name.as_str()];
            match kind {
                Kind::Instance => {
                    let instance = state.instances.iter().find(|i| &i.instance_id == id);
                    let status =
                        instance.map(|i| serde_json::to_value(&i.status).unwrap_or_default());
                    let wanted = if spec["powerState"] == "Stopped" {
                        "SHUTOFF"
                    } else {
                        "ACTIVE"
                    };
                    if status.as_ref().and_then(Value::as_str) != Some(wanted) {
                        problems.push(format!("{name}: cloud status {status:?}, wanted {wanted}"));
                    }
                }
                Kind::Volume => {
                    let Some(volume) = state.volumes.iter().find(|v| &v.id == id) else {
                        continue;
                    };
                    if Some(volume.size as i64) != spec["sizeGb"].as_i64() {
                        problems.push(format!(
                            "{name}: size {} in the cloud, spec {}",
                            volume.size, spec["sizeGb"]
                        ));
                    }
                    let wanted = spec["instanceRef"]["name"].as_str().and_then(id_of);
                    if volume.instance_id != wanted {
                        problems.push(format!(
                            "{name}: attached to {:?} in the cloud, wanted {wanted:?}",
                            volume.instance_id
                        ));
                    }
                }
                Kind::Firewall => {
                    let Some(firewall) = state.firewalls.iter().find(|f| &f.id == id) else {
                        continue;
                    };
                    let rules = spec["rules"].as_array().map_or(0, Vec::len);
                    if firewall.rules.len() != rules {
                        problems.push(format!(
                            "{name}: {} rules in the cloud, spec {rules}",
                            firewall.rules.len()
                        ));
                    }
                    let attached: BTreeSet<String> = firewall
                        .attachments
                        .iter()
                        .map(|a| a.vm.id.clone())
                        .collect();
                    let wanted: BTreeSet<String> = spec["instanceRefs"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| r["name"].as_str().and_then(id_of))
                        .collect();
                    if attached != wanted {
                        problems.push(format!(
                            "{name}: attached to {attached:?}, wanted {wanted:?}"
                        ));
                    }
                }
                Kind::SshKey => {}
            }
        }
        problems
    }

    fn check_foreign(&self, before: &Value) -> Result<(), String> {
        let now = self.foreign_view();
        if &now != before {
            return Err(format!(
                "foreign resources were touched:\n  before {before}\n  after  {now}"
            ));
        }
        Ok(())
    }

    /// Neither the API key nor a private key in any object (statuses and condition messages
    /// included) or any event.
    async fn check_secrets_in_objects_and_events(&mut self) -> Result<(), String> {
        let mut texts = Vec::new();
        texts.extend(list_json::<SshKey>(&self.env).await?);
        texts.extend(list_json::<GpuInstance>(&self.env).await?);
        texts.extend(list_json::<Volume>(&self.env).await?);
        texts.extend(list_json::<Firewall>(&self.env).await?);
        texts.extend(list_json::<Snapshot>(&self.env).await?);
        let events: Api<Event> = Api::all(self.env.client.clone());
        let events = events
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing events: {e}"))?;
        self.stats.events += events.items.len() as u64;
        for event in &events.items {
            texts.push(serde_json::to_string(event).unwrap_or_default());
        }
        for text in texts {
            for marker in [self.api_key.as_str(), "PRIVATE KEY"] {
                if text.contains(marker) {
                    return Err(format!(
                        "a secret ({marker:?} marker) in an object or event: {text}"
                    ));
                }
            }
        }
        Ok(())
    }

    async fn delete_everything(&mut self) -> Result<(), String> {
        let live: Vec<(String, Kind)> = self
            .model
            .live
            .iter()
            .map(|(name, (kind, _))| (name.clone(), *kind))
            .collect();
        for (name, kind) in live {
            self.delete(kind, &name).await?;
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
                    .map(|(name, (kind, status, meta))| {
                        format!(
                            "{} {name}: finalizers {:?}, conditions {:?}",
                            kind_name(*kind),
                            meta.finalizers,
                            status
                                .conditions
                                .iter()
                                .map(|c| format!(
                                    "{}={} {}: {}",
                                    c.type_, c.status, c.reason, c.message
                                ))
                                .collect::<Vec<_>>()
                        )
                    })
                    .collect();
                stuck.extend(tenant);
                return Err(format!(
                    "stuck finalizers {DELETE_SECONDS}s after deleting everything:\n  {}",
                    stuck.join("\n  ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn check_nothing_left(&mut self, foreign: &Value, baseline_drain: f64) -> Result<(), String> {
        let state = self.env.simulator.state();
        let mut leaks: Vec<String> = Vec::new();
        leaks.extend(
            state
                .instances
                .iter()
                .filter(|i| i.vm_name.starts_with("gco-"))
                .map(|i| format!("instance {} {}", i.instance_id, i.vm_name)),
        );
        leaks.extend(
            state
                .volumes
                .iter()
                .filter(|v| v.name.starts_with("gco-"))
                .map(|v| format!("volume {} {}", v.id, v.name)),
        );
        leaks.extend(
            state
                .firewalls
                .iter()
                .filter(|f| f.name.starts_with("gco-"))
                .map(|f| format!("firewall {} {}", f.id, f.name)),
        );
        leaks.extend(
            state
                .ssh_keys
                .iter()
                .filter(|k| k.name.starts_with("gco-"))
                .map(|k| format!("ssh key {} {}", k.id, k.name)),
        );
        // Team-a makes no snapshot: any would be the tenant's copy of another's disk.
        leaks.extend(
            state
                .snapshots
                .iter()
                .map(|s| format!("snapshot {}", serde_json::to_string(s).unwrap_or_default())),
        );
        if !leaks.is_empty() {
            return Err(format!("leaked after deleting every object: {leaks:?}"));
        }
        let snapshots = self.env.calls("CreateSnapshot");
        if snapshots != 0 {
            return Err(format!(
                "tenant: {snapshots} CreateSnapshot calls; the tenant's snapshots of others' machines were all to be refused"
            ));
        }
        self.check_foreign(foreign)?;
        let drain = self.hourly_drain();
        if (drain - baseline_drain).abs() > 0.001 {
            return Err(format!(
                "billing did not stop: {drain:.6}/h spent, the foreign resources alone spend {baseline_drain:.6}/h"
            ));
        }
        Ok(())
    }
}

// === Helpers ===

pub(crate) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::SshKey => "SshKey",
        Kind::Instance => "GpuInstance",
        Kind::Volume => "Volume",
        Kind::Firewall => "Firewall",
    }
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

async fn post<K>(env: &Env, object: &Value) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let object: K = serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
    env.api::<K>()
        .create(&PostParams::default(), &object)
        .await
        .map(|_| ())
}

async fn remove<K>(env: &Env, name: &str) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    match env.api::<K>().delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error),
    }
}

async fn merge_patch<K>(env: &Env, name: &str, patch: &Value) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    env.api::<K>()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
}

async fn list_of<K>(
    env: &Env,
    kind: Kind,
    into: &mut BTreeMap<String, (Kind, CloudStatus, kube::api::ObjectMeta)>,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Managed
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    for object in env.api::<K>().list(&ListParams::default()).await? {
        into.insert(
            object.name_any(),
            (kind, object.cloud_status(), object.meta().clone()),
        );
    }
    Ok(())
}

/// Every object of the four kinds in the test namespace, by name.
async fn all_objects(
    env: &Env,
) -> Result<BTreeMap<String, (Kind, CloudStatus, kube::api::ObjectMeta)>, kube::Error> {
    let mut objects = BTreeMap::new();
    list_of::<SshKey>(env, Kind::SshKey, &mut objects).await?;
    list_of::<GpuInstance>(env, Kind::Instance, &mut objects).await?;
    list_of::<Volume>(env, Kind::Volume, &mut objects).await?;
    list_of::<Firewall>(env, Kind::Firewall, &mut objects).await?;
    Ok(objects)
}

async fn list_json<K>(env: &Env) -> Result<Vec<String>, String>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let mut texts = Vec::new();
    for namespace in [NAMESPACE, TENANT, OPERATOR_NAMESPACE] {
        let api: Api<K> = Api::namespaced(env.client.clone(), namespace);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing: {e}"))?;
        texts.extend(
            list.items
                .iter()
                .map(|o| serde_json::to_string(o).unwrap_or_default()),
        );
    }
    Ok(texts)
}

/// Turns any list of serialisable records into JSON values.
mod erased {
    pub trait ToValues {
        fn values(&self) -> Vec<serde_json::Value>;
    }

    impl<T: serde::Serialize> ToValues for Vec<T> {
        fn values(&self) -> Vec<serde_json::Value> {
            self.iter()
                .map(|item| serde_json::to_value(item).unwrap_or_default())
                .collect()
        }
    }
}

/// The record carrying `id` (any kind) in the account's JSON, or a note that there is none.
fn cloud_record(account: &Value, id: &str) -> String {
    account
        .as_object()
        .into_iter()
        .flat_map(|kinds| kinds.values())
        .filter_map(Value::as_array)
        .flatten()
        .find(|record| {
            record
                .as_object()
                .is_some_and(|fields| fields.values().any(|v| v.as_str() == Some(id)))
        })
        .map_or_else(|| "none".to_string(), Value::to_string)
}
