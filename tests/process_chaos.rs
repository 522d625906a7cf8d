#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Seeded chaos with the real binary: `gpucloud-operator run` as OS processes (one or two
//! replicas with leader election, as the chart runs them) against the embedded API server and
//! the cloud simulator. Each seed draws a cloud fault plan (errors, 429 bursts, latency past
//! the client's timeout, responses lost after the cloud acted, lists that leave resources
//! out), creates and deletes objects of four kinds in two namespaces (team-b's with a
//! credentials Secret of its own), and meanwhile SIGKILLs the leader (at random moments, right
//! after creates were sent, right after the cloud received a create, during an API server
//! outage), SIGKILLs every replica at once, stops replicas with SIGTERM while a replacement
//! starts, and restarts the API server (watches cut, connections refused for a while, the
//! same address and stored objects afterwards, sometimes with the watch history dropped).
//! Exited processes come back as the kubelet brings them back: the same pod name (a container
//! restart) or a new one (a replacement pod).
//!
//! Then the faults are lifted and one replica is left: every object must become `Ready` with
//! exactly one cloud resource (checked against the simulator's own state), deleting everything
//! must leave no object behind (no finalizer stuck) and nothing billed in the cloud, no
//! process may panic, and nothing any process printed may hold the API key or a private key.
//!
//! `GPUCLOUD_PROCESS_CHAOS_SEED=N` replays one seed, printing its trace;
//! `GPUCLOUD_PROCESS_CHAOS_SEEDS=N` runs seeds 1..=N (default 3);
//! `GPUCLOUD_PROCESS_CHAOS_CONCURRENCY` sets how many worlds run at once (default 2).
//! See docs/reliability.md.

mod process_world;

use futures::StreamExt;
use gpucloud_api::{CloudStatus, Firewall, GpuInstance, SshKey, Volume};
use gpucloud_simulator::{DropMode, FaultPlan, LatencySpike, SimulatorConfig, ThrottleBurst};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use process_world::{World, send_sigterm};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::process::Child;
use tokio::time::Instant;

const NAMESPACES: [&str; 2] = ["team-a", "team-b"];
/// The namespace whose objects name a credentials Secret of their own.
const TEAM_B: &str = "team-b";
const TEAM_B_CREDENTIALS: &str = "cloud-key";
/// Every API key of a run starts with this.
const API_KEY_MARK: &str = "process-chaos-key-";
/// The operator's bound on one cloud call; latency spikes go beyond it.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(600);
/// The longest a latency spike holds a request before the cloud acts on it.
const MAX_ACT_DELAY: Duration = Duration::from_millis(1400);
/// How long a stopped process may take to finish in-flight reconciles.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);
/// After SIGTERM, a process still running this long is SIGKILLed (the pod's grace period).
const TERMINATION_GRACE: Duration = Duration::from_secs(8);
/// Bound on every object becoming `Ready` once the faults are lifted.
const CONVERGE_BOUND: Duration = Duration::from_secs(60);
/// Bound on every object being gone once all are deleted.
const DELETE_BOUND: Duration = Duration::from_secs(60);
/// How long one seed may run before it counts as failed.
const RUN_BOUND: Duration = Duration::from_secs(240);

/// What the runs did, summed for the report.
#[derive(Debug, Default, Clone)]
struct Stats {
    runs: u64,
    objects: u64,
    deletes: u64,
    sigkills: u64,
    sigterms: u64,
    apiserver_restarts: u64,
    /// Exits the harness did not cause (lost leadership, an API server that was down).
    exits: u64,
    processes: u64,
    /// Cloud faults injected: 500s, 429s, latency spikes, responses lost after acting, and
    /// resources left out of lists.
    internal_errors: u64,
    throttled: u64,
    latency_spikes: u64,
    dropped_responses: u64,
    omitted_from_lists: u64,
    converge_ms: u64,
    delete_ms: u64,
    output_lines: u64,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.runs += 1;
        self.objects += other.objects;
        self.deletes += other.deletes;
        self.sigkills += other.sigkills;
        self.sigterms += other.sigterms;
        self.apiserver_restarts += other.apiserver_restarts;
        self.exits += other.exits;
        self.processes += other.processes;
        self.internal_errors += other.internal_errors;
        self.throttled += other.throttled;
        self.latency_spikes += other.latency_spikes;
        self.dropped_responses += other.dropped_responses;
        self.omitted_from_lists += other.omitted_from_lists;
        self.converge_ms += other.converge_ms;
        self.delete_ms += other.delete_ms;
        self.output_lines += other.output_lines;
    }
}

// === The objects ===

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    SshKey,
    Instance,
    Volume,
    Firewall,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::SshKey, Kind::Instance, Kind::Volume, Kind::Firewall];

    fn name(self) -> &'static str {
        match self {
            Kind::SshKey => "SshKey",
            Kind::Instance => "GpuInstance",
            Kind::Volume => "Volume",
            Kind::Firewall => "Firewall",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Kind::SshKey => "key",
            Kind::Instance => "vm",
            Kind::Volume => "vol",
            Kind::Firewall => "fw",
        }
    }

    fn resource(self) -> ApiResource {
        match self {
            Kind::SshKey => ApiResource::erase::<SshKey>(&()),
            Kind::Instance => ApiResource::erase::<GpuInstance>(&()),
            Kind::Volume => ApiResource::erase::<Volume>(&()),
            Kind::Firewall => ApiResource::erase::<Firewall>(&()),
        }
    }
}

/// `(namespace, name)` of an object.
type Key = (String, String);

/// An object as listed from the API server.
struct Listed {
    kind: Kind,
    status: CloudStatus,
    generation: Option<i64>,
    finalizers: Vec<String>,
}

/// A cloud resource carrying the operator's name mark, as the simulator holds it.
struct CloudResource {
    kind: Kind,
    id: String,
    name: String,
    /// Instance: its status; Volume: the instance id; Firewall: the instance ids, sorted.
    detail: Value,
}

// === The replicas ===

/// One replica of the Deployment: its current pod's process, or when it comes back.
struct Replica {
    pod: String,
    process: Option<Child>,
    restart_at: Option<Instant>,
}

/// A pod told to stop with SIGTERM; SIGKILLed if it outlives the grace period.
struct Stopping {
    pod: String,
    child: Child,
    since: Instant,
}

// === One seeded run ===

struct Run {
    rng: StdRng,
    world: World,
    /// Flags of every operator process beyond the world's own.
    settings: Vec<String>,
    started: Instant,
    trace: Arc<Mutex<Vec<String>>>,
    replicas: Vec<Replica>,
    stopping: Vec<Stopping>,
    next_pod: u32,
    live: BTreeMap<Key, (Kind, Value)>,
    next_index: BTreeMap<(String, Kind), u32>,
    stats: Stats,
}

struct Failure {
    seed: u64,
    message: String,
}

async fn run_seed(seed: u64, trace: Arc<Mutex<Vec<String>>>) -> Result<Stats, Failure> {
    let mut rng = StdRng::seed_from_u64(seed);
    let api_key = format!("{API_KEY_MARK}{seed:x}-{:016x}", rng.random::<u64>());
    let list_lag = Duration::from_millis([0, 200, 500][rng.random_range(0..3)]);
    let simulator = SimulatorConfig {
        api_keys: vec![api_key],
        seed,
        list_lag,
        ..SimulatorConfig::default()
    };
    let world = World::start(&format!("process-chaos-{seed}"), simulator, &NAMESPACES).await;
    // A create sent just before a kill lands up to MAX_ACT_DELAY later, after the call may
    // have waited for the client's rate limiter; a new process must not conclude sooner that
    // it never happened.
    let settle_window = list_lag + MAX_ACT_DELAY + Duration::from_secs(2);
    let settings: Vec<String> = [
        "--cloud-timeout",
        &format!("{}ms", CLIENT_TIMEOUT.as_millis()),
        "--settle-window",
        &format!("{}ms", settle_window.as_millis()),
        "--lease-duration",
        "3s",
        "--renew-deadline",
        "2s",
        "--retry-period",
        "500ms",
        "--resync-interval",
        "2s",
        "--transition-interval",
        "300ms",
        "--shutdown-timeout",
        &format!("{}s", SHUTDOWN_TIMEOUT.as_secs()),
    ]
    .iter()
    .map(|flag| flag.to_string())
    .collect();
    let mut run = Run {
        rng,
        world,
        settings,
        started: Instant::now(),
        trace,
        replicas: Vec::new(),
        stopping: Vec::new(),
        next_pod: 0,
        live: BTreeMap::new(),
        next_index: BTreeMap::new(),
        stats: Stats::default(),
    };
    run.note(format!(
        "list lag {list_lag:?}, settle window {settle_window:?}"
    ));
    let outcome = run.play().await;
    let output = run.world.output.lock().unwrap().clone();
    run.stats.output_lines = output.len() as u64;
    outcome.map(|()| run.stats).map_err(|message| Failure {
        seed,
        message: format!("{message}\n  {}", last_warnings(&output)),
    })
}

/// The operators' last warnings and errors, cut to a readable length, for a failure report.
fn last_warnings(output: &[String]) -> String {
    const SHOWN: usize = 15;
    const WIDTH: usize = 400;
    let warnings: Vec<&String> = output
        .iter()
        .filter(|line| line.contains("\"level\":\"WARN\"") || line.contains("\"level\":\"ERROR\""))
        .collect();
    let shown: Vec<String> = warnings[warnings.len().saturating_sub(SHOWN)..]
        .iter()
        .map(|line| line.chars().take(WIDTH).collect())
        .collect();
    format!(
        "the operators' last {} of {} warnings and errors:\n    {}",
        shown.len(),
        warnings.len(),
        shown.join("\n    ")
    )
}

impl Run {
    fn note(&self, line: impl Into<String>) {
        let at = self.started.elapsed().as_millis();
        self.trace
            .lock()
            .unwrap()
            .push(format!("{at:>6} ms  {}", line.into()));
    }

    async fn play(&mut self) -> Result<(), String> {
        self.team_b_credentials().await?;
        let baseline_drain = self.hourly_drain();
        let replicas = self.rng.random_range(1..=2);
        for _ in 0..replicas {
            let pod = self.new_pod_name();
            self.replicas.push(Replica {
                pod,
                process: None,
                restart_at: Some(Instant::now()),
            });
        }
        self.supervise()?;
        self.inject_faults();
        self.chaos().await?;
        self.lift_faults().await?;
        self.converge().await?;
        self.delete_everything().await?;
        self.check_nothing_left(baseline_drain)?;
        self.stop_all().await?;
        self.check_output()
    }

    async fn team_b_credentials(&mut self) -> Result<(), String> {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": TEAM_B_CREDENTIALS, "namespace": TEAM_B,
                         "labels": {"gpucloud.io/credentials": "true"}},
            "stringData": {"apiKey": self.world.simulator.api_key()},
        }))
        .map_err(|e| e.to_string())?;
        Api::<Secret>::namespaced(self.world.client.clone(), TEAM_B)
            .create(&PostParams::default(), &secret)
            .await
            .map_err(|e| format!("team-b credentials: {e}"))?;
        Ok(())
    }

    /// What the account spends per hour now, measured by moving the clock an hour.
    fn hourly_drain(&self) -> f64 {
        let before = self.world.simulator.state().balance;
        self.world
            .simulator
            .advance_clock(Duration::from_secs(3600));
        before - self.world.simulator.state().balance
    }

    fn inject_faults(&mut self) {
        let rng = &mut self.rng;
        let mut act_then_drop = BTreeMap::new();
        for operation in [
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
        ] {
            if rng.random_bool(0.5) {
                act_then_drop.insert(operation.to_string(), rng.random_range(0.1..0.4));
            }
        }
        let spike = CLIENT_TIMEOUT
            + Duration::from_millis(
                rng.random_range(100..(MAX_ACT_DELAY - CLIENT_TIMEOUT).as_millis() as u64),
            );
        let plan = FaultPlan {
            latency_spike: Some(LatencySpike {
                probability: rng.random_range(0.02..0.08),
                extra: spike,
            }),
            error_rate: rng.random_range(0.05..0.2),
            throttle_burst: Some(ThrottleBurst {
                probability: rng.random_range(0.01..0.04),
                length: rng.random_range(1..5),
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
            list_omission_rate: if rng.random_bool(0.5) {
                rng.random_range(0.02..0.2)
            } else {
                0.0
            },
            ..FaultPlan::default()
        };
        self.note(format!("cloud faults {plan:?}"));
        self.world.simulator.set_faults(plan);
    }

    // === The replicas ===

    fn new_pod_name(&mut self) -> String {
        self.next_pod += 1;
        format!("operator-{}", self.next_pod)
    }

    fn running(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|&i| self.replicas[i].process.is_some())
            .collect()
    }

    /// What the kubelet does: notices exits, brings replicas back when due, and SIGKILLs a
    /// stopping pod past its grace period. A panic is a failure at once.
    fn supervise(&mut self) -> Result<(), String> {
        let now = Instant::now();
        for index in 0..self.replicas.len() {
            let replica = &mut self.replicas[index];
            if let Some(child) = &mut replica.process
                && let Ok(Some(status)) = child.try_wait()
            {
                let pod = replica.pod.clone();
                replica.process = None;
                let back_in = Duration::from_millis(self.rng.random_range(100..600));
                self.replicas[index].restart_at = Some(now + back_in);
                self.stats.exits += 1;
                self.note(format!(
                    "{pod} exited on its own ({status}); back in {back_in:?}"
                ));
                if status.code() == Some(101) {
                    return Err(format!("{pod} panicked ({status})"));
                }
            }
            let replica = &mut self.replicas[index];
            if replica.process.is_none() && replica.restart_at.is_some_and(|at| at <= now) {
                replica.restart_at = None;
                let settings: Vec<&str> = self.settings.iter().map(String::as_str).collect();
                replica.process = Some(self.world.operator(&replica.pod, &settings));
                self.stats.processes += 1;
                let pod = replica.pod.clone();
                self.note(format!("{pod} started"));
            }
        }
        let mut still = Vec::new();
        for mut stopping in std::mem::take(&mut self.stopping) {
            match stopping.child.try_wait() {
                Ok(Some(status)) => {
                    self.note(format!(
                        "{} exited {:?} after SIGTERM ({status})",
                        stopping.pod,
                        stopping.since.elapsed()
                    ));
                    if status.code() == Some(101) {
                        return Err(format!("{} panicked ({status})", stopping.pod));
                    }
                }
                _ if stopping.since.elapsed() > TERMINATION_GRACE => {
                    let _ = stopping.child.start_kill();
                    self.note(format!(
                        "{} still running {TERMINATION_GRACE:?} after SIGTERM: SIGKILL",
                        stopping.pod
                    ));
                    still.push(stopping);
                }
                _ => still.push(stopping),
            }
        }
        self.stopping = still;
        Ok(())
    }

    /// Waits `length`, supervising the replicas meanwhile.
    async fn pause(&mut self, length: Duration) -> Result<(), String> {
        let until = Instant::now() + length;
        while Instant::now() < until {
            self.supervise()?;
            tokio::time::sleep(
                Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())),
            )
            .await;
        }
        self.supervise()
    }

    /// The running replica that holds the lease (and `true`), else any running one.
    async fn leader_or_any(&mut self) -> Option<(usize, bool)> {
        let holder = self.world.holder().await.ok().flatten();
        let running = self.running();
        let leader = running
            .iter()
            .copied()
            .find(|&i| Some(&self.replicas[i].pod) == holder.as_ref());
        match leader {
            Some(index) => Some((index, true)),
            None if running.is_empty() => None,
            None => Some((running[self.rng.random_range(0..running.len())], false)),
        }
    }

    /// SIGKILL, as the OOM killer or a node failure ends a process; it comes back as the same
    /// pod (container restart) or a new one.
    async fn sigkill(&mut self, index: usize, why: &str) {
        let Some(mut child) = self.replicas[index].process.take() else {
            return;
        };
        let _ = child.start_kill();
        let _ = child.wait().await;
        self.stats.sigkills += 1;
        let back_in = Duration::from_millis(self.rng.random_range(0..800));
        let old = self.replicas[index].pod.clone();
        if self.rng.random_bool(0.3) {
            self.replicas[index].pod = self.new_pod_name();
        }
        self.replicas[index].restart_at = Some(Instant::now() + back_in);
        self.note(format!(
            "SIGKILL {old} ({why}); back in {back_in:?} as {}",
            self.replicas[index].pod
        ));
    }

    async fn sigkill_leader(&mut self, why: &str) {
        match self.leader_or_any().await {
            Some((index, true)) => self.sigkill(index, &format!("the leader, {why}")).await,
            Some((index, false)) => self.sigkill(index, &format!("no leader yet, {why}")).await,
            None => self.note(format!("no replica running to kill ({why})")),
        }
    }

    /// SIGTERM, as in a rolling update: a replacement pod starts at once.
    async fn sigterm_one(&mut self) -> Result<(), String> {
        let Some((index, _)) = self.leader_or_any().await else {
            return Ok(());
        };
        let Some(child) = self.replicas[index].process.take() else {
            return Ok(());
        };
        send_sigterm(&child)?;
        self.stats.sigterms += 1;
        let replacement = self.new_pod_name();
        let pod = std::mem::replace(&mut self.replicas[index].pod, replacement);
        self.note(format!(
            "SIGTERM {pod}; replaced by {}",
            self.replicas[index].pod
        ));
        self.stopping.push(Stopping {
            pod,
            child,
            since: Instant::now(),
        });
        self.replicas[index].restart_at = Some(Instant::now());
        self.supervise()
    }

    /// Stops the API server for a while and starts it again on the same address with the
    /// same objects; sometimes a replica is killed meanwhile, sometimes the watch history is
    /// dropped (clients then get 410 Gone and list again).
    async fn restart_apiserver(&mut self) -> Result<(), String> {
        let downtime = Duration::from_millis(self.rng.random_range(200..3000));
        let kill_meanwhile = self.rng.random_bool(0.3);
        let compact = self.rng.random_bool(0.3);
        self.world.apiserver.stop_serving().await;
        self.stats.apiserver_restarts += 1;
        self.note(format!("API server stopped for {downtime:?}"));
        if kill_meanwhile {
            self.pause(downtime / 2).await?;
            let running = self.running();
            if !running.is_empty() {
                let index = running[self.rng.random_range(0..running.len())];
                self.sigkill(index, "while the API server is down").await;
            }
            self.pause(downtime / 2).await?;
        } else {
            self.pause(downtime).await?;
        }
        self.world
            .apiserver
            .resume_serving()
            .await
            .map_err(|e| format!("the API server did not start again: {e}"))?;
        if compact {
            self.world.apiserver.compact();
        }
        // The harness's own client starts afresh; the operators' must find their way back.
        self.world.client = self
            .world
            .apiserver
            .kube_client()
            .await
            .map_err(|e| e.to_string())?;
        self.note(if compact {
            "API server serving again, watch history dropped"
        } else {
            "API server serving again"
        });
        Ok(())
    }

    // === The fault phase ===

    async fn chaos(&mut self) -> Result<(), String> {
        for namespace in NAMESPACES {
            for kind in Kind::ALL {
                self.create(kind, namespace).await?;
            }
        }
        let actions = self.rng.random_range(12..20);
        for _ in 0..actions {
            self.act().await?;
            let pause = Duration::from_millis(self.rng.random_range(100..700));
            self.pause(pause).await?;
        }
        Ok(())
    }

    async fn act(&mut self) -> Result<(), String> {
        match self.rng.random_range(0..100) {
            0..30 => self.create_random().await,
            30..42 => self.delete_one().await,
            42..52 => {
                self.sigkill_leader("at a random moment").await;
                Ok(())
            }
            52..60 => {
                for _ in 0..self.rng.random_range(1..=3) {
                    self.create_random().await?;
                }
                self.sigkill_leader("right after creates were sent").await;
                Ok(())
            }
            60..68 => self.kill_when_the_cloud_creates().await,
            68..76 => self.sigterm_one().await,
            76..92 => self.restart_apiserver().await,
            _ => {
                for index in self.running() {
                    self.sigkill(index, "every replica at once").await;
                }
                Ok(())
            }
        }
    }

    /// Creates an object, then SIGKILLs the leader the moment the cloud receives a create.
    async fn kill_when_the_cloud_creates(&mut self) -> Result<(), String> {
        let creates = |world: &World| -> u64 {
            world
                .simulator
                .call_counts()
                .iter()
                .filter(|(operation, _)| operation.starts_with("Create"))
                .map(|(_, count)| count)
                .sum()
        };
        let before = creates(&self.world);
        self.create_random().await?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while creates(&self.world) == before {
            if Instant::now() > deadline {
                self.note("no create reached the cloud within 5 s; no kill");
                return Ok(());
            }
            self.supervise()?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.sigkill_leader("the cloud just received a create")
            .await;
        Ok(())
    }

    fn new_name(&mut self, namespace: &str, kind: Kind) -> String {
        // Names are reused now and then: an object deleted and made again is tried too.
        let used = *self
            .next_index
            .get(&(namespace.to_string(), kind))
            .unwrap_or(&0);
        let free: Vec<u32> = (0..used)
            .filter(|i| {
                !self
                    .live
                    .contains_key(&(namespace.to_string(), format!("{}-{i}", kind.prefix())))
            })
            .collect();
        if !free.is_empty() && self.rng.random_bool(0.3) {
            return format!(
                "{}-{}",
                kind.prefix(),
                free[self.rng.random_range(0..free.len())]
            );
        }
        self.next_index
            .insert((namespace.to_string(), kind), used + 1);
        format!("{}-{used}", kind.prefix())
    }

    fn random_instance(&mut self, namespace: &str) -> Option<String> {
        let instances: Vec<String> = self
            .live
            .iter()
            .filter(|((ns, _), (kind, _))| ns == namespace && *kind == Kind::Instance)
            .map(|((_, name), _)| name.clone())
            .collect();
        (!instances.is_empty())
            .then(|| instances[self.rng.random_range(0..instances.len())].clone())
    }

    async fn create_random(&mut self) -> Result<(), String> {
        let kind = Kind::ALL[self.rng.random_range(0..Kind::ALL.len())];
        let namespace = NAMESPACES[self.rng.random_range(0..NAMESPACES.len())];
        self.create(kind, namespace).await
    }

    async fn create(&mut self, kind: Kind, namespace: &str) -> Result<(), String> {
        let name = self.new_name(namespace, kind);
        let mut spec = match kind {
            Kind::SshKey => json!({}),
            Kind::Instance => json!({"region": "us-east-1", "gpuType": "L40S",
                "osImage": "ubuntu-22.04-cuda-12"}),
            Kind::Volume => {
                let mut spec =
                    json!({"region": "us-east-1", "sizeGb": self.rng.random_range(10..40)});
                if self.rng.random_bool(0.5)
                    && let Some(instance) = self.random_instance(namespace)
                {
                    spec["instanceRef"] = json!({"name": instance});
                }
                spec
            }
            Kind::Firewall => {
                let mut refs = Vec::new();
                if self.rng.random_bool(0.6)
                    && let Some(instance) = self.random_instance(namespace)
                {
                    refs.push(json!({"name": instance}));
                }
                json!({"region": "us-east-1", "instanceRefs": refs, "rules": [
                    {"direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
                     "remoteIpPrefix": "10.0.0.0/16", "portRangeMin": 22, "portRangeMax": 22}]})
            }
        };
        if namespace == TEAM_B {
            spec["credentialsSecretRef"] = json!({"name": TEAM_B_CREDENTIALS});
        }
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": kind.name(),
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }))
        .map_err(|e| e.to_string())?;
        let api = self.api(kind, namespace);
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {
                self.note(format!("create {} {namespace}/{name} {spec}", kind.name()));
                self.live
                    .insert((namespace.to_string(), name), (kind, spec));
                self.stats.objects += 1;
                Ok(())
            }
            // The previous object of that name is still finishing its deletion.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.note(format!(
                    "create {namespace}/{name} skipped: the old one is still deleting"
                ));
                Ok(())
            }
            Err(error) => Err(format!("create {namespace}/{name}: {error}")),
        }
    }

    fn api(&self, kind: Kind, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.world.client.clone(), namespace, &kind.resource())
    }

    /// Whether a live object refers to instance `name` of `namespace`.
    fn referenced(&self, namespace: &str, name: &str) -> bool {
        self.live.iter().any(|((ns, _), (kind, spec))| {
            ns == namespace
                && match kind {
                    Kind::Volume => spec["instanceRef"]["name"] == name,
                    Kind::Firewall => spec["instanceRefs"]
                        .as_array()
                        .is_some_and(|refs| refs.iter().any(|r| r["name"] == name)),
                    _ => false,
                }
        })
    }

    async fn delete_one(&mut self) -> Result<(), String> {
        let candidates: Vec<(Key, Kind)> = self
            .live
            .iter()
            .filter(|((ns, name), (kind, _))| *kind != Kind::Instance || !self.referenced(ns, name))
            .map(|(key, (kind, _))| (key.clone(), *kind))
            .collect();
        if candidates.is_empty() {
            return Ok(());
        }
        let (key, kind) = candidates[self.rng.random_range(0..candidates.len())].clone();
        self.delete(kind, &key).await?;
        self.live.remove(&key);
        self.stats.deletes += 1;
        self.note(format!("delete {} {}/{}", kind.name(), key.0, key.1));
        Ok(())
    }

    async fn delete(&self, kind: Kind, (namespace, name): &Key) -> Result<(), String> {
        match self
            .api(kind, namespace)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(format!("delete {namespace}/{name}: {error}")),
        }
    }

    // === After the faults ===

    /// No more cloud faults, the API server serving, and one replica left.
    async fn lift_faults(&mut self) -> Result<(), String> {
        self.world.simulator.set_faults(FaultPlan::default());
        let faults = self.world.simulator.fault_counts();
        self.stats.internal_errors += faults.internal_errors;
        self.stats.throttled += faults.throttled;
        self.stats.latency_spikes += faults.latency_spikes;
        self.stats.dropped_responses += faults.dropped_responses;
        self.stats.omitted_from_lists += faults.omitted_from_lists;
        if !self.world.apiserver.is_serving() {
            return Err("the API server is not serving".into());
        }
        while self.replicas.len() > 1 {
            let Some(replica) = self.replicas.pop() else {
                break;
            };
            if let Some(child) = replica.process {
                send_sigterm(&child)?;
                self.stats.sigterms += 1;
                self.note(format!("SIGTERM {} (scaled down)", replica.pod));
                self.stopping.push(Stopping {
                    pod: replica.pod,
                    child,
                    since: Instant::now(),
                });
            }
        }
        if self.replicas[0].process.is_none() {
            self.replicas[0].restart_at = Some(Instant::now());
        }
        let deadline = Instant::now() + TERMINATION_GRACE + Duration::from_secs(2);
        while !self.stopping.is_empty() && Instant::now() < deadline {
            self.pause(Duration::from_millis(100)).await?;
        }
        self.supervise()?;
        self.note("faults lifted; one replica");
        Ok(())
    }

    /// Every object of the four kinds in both namespaces.
    async fn listed(&self) -> Result<BTreeMap<Key, Listed>, String> {
        let mut objects = BTreeMap::new();
        for namespace in NAMESPACES {
            for kind in Kind::ALL {
                let list = self
                    .api(kind, namespace)
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| format!("listing {} in {namespace}: {e}", kind.name()))?;
                for object in list.items {
                    let status: CloudStatus = object
                        .data
                        .get("status")
                        .cloned()
                        .map(serde_json::from_value)
                        .transpose()
                        .map_err(|e| format!("status of {:?}: {e}", object.metadata.name))?
                        .unwrap_or_default();
                    let name = object.metadata.name.clone().unwrap_or_default();
                    objects.insert(
                        (namespace.to_string(), name),
                        Listed {
                            kind,
                            status,
                            generation: object.metadata.generation,
                            finalizers: object.metadata.finalizers.unwrap_or_default(),
                        },
                    );
                }
            }
        }
        Ok(objects)
    }

    /// The cloud resources carrying the operator's mark, from the simulator's own state.
    fn cloud_resources(&self) -> Vec<CloudResource> {
        let state = self.world.simulator.state();
        let mut resources = Vec::new();
        for instance in &state.instances {
            resources.push(CloudResource {
                kind: Kind::Instance,
                id: instance.instance_id.clone(),
                name: instance.vm_name.clone(),
                detail: serde_json::to_value(&instance.status).unwrap_or_default(),
            });
        }
        for volume in &state.volumes {
            resources.push(CloudResource {
                kind: Kind::Volume,
                id: volume.id.clone(),
                name: volume.name.clone(),
                detail: json!(volume.instance_id),
            });
        }
        for firewall in &state.firewalls {
            let mut attached: Vec<String> = firewall
                .attachments
                .iter()
                .map(|a| a.vm.id.clone())
                .collect();
            attached.sort();
            resources.push(CloudResource {
                kind: Kind::Firewall,
                id: firewall.id.clone(),
                name: firewall.name.clone(),
                detail: json!(attached),
            });
        }
        for key in &state.ssh_keys {
            resources.push(CloudResource {
                kind: Kind::SshKey,
                id: key.id.clone(),
                name: key.name.clone(),
                detail: Value::Null,
            });
        }
        resources.retain(|r| r.name.starts_with("gco-"));
        resources
    }

    /// Why the world has not converged yet; empty once it has.
    async fn convergence_problems(&self) -> Vec<String> {
        let objects = match self.listed().await {
            Ok(objects) => objects,
            Err(error) => return vec![error],
        };
        let mut problems = Vec::new();
        for ((namespace, name), listed) in &objects {
            if !self.live.contains_key(&(namespace.clone(), name.clone())) {
                problems.push(format!(
                    "{} {namespace}/{name}: deleted but still present (finalizers {:?})",
                    listed.kind.name(),
                    listed.finalizers
                ));
            }
        }
        let mut ids: BTreeMap<&Key, (&str, &str)> = BTreeMap::new();
        for (key, (kind, _)) in &self.live {
            let Some(listed) = objects.get(key) else {
                problems.push(format!("{}/{}: missing from the API server", key.0, key.1));
                continue;
            };
            let status = &listed.status;
            match (&status.external_id, &status.cloud_name) {
                (Some(id), Some(cloud_name)) if status.is_ready(listed.generation) => {
                    ids.insert(key, (id, cloud_name));
                }
                _ => problems.push(format!(
                    "{} {}/{}: not Ready (generation {:?}, observed {:?}, id {:?}; {})",
                    kind.name(),
                    key.0,
                    key.1,
                    listed.generation,
                    status.observed_generation,
                    status.external_id,
                    status
                        .conditions
                        .iter()
                        .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
            }
        }
        if !problems.is_empty() {
            return problems;
        }
        // Exactly one cloud resource per object, under its cloud name, and none besides.
        let resources = self.cloud_resources();
        let counted = |r: &&CloudResource| !(r.kind == Kind::Volume && r.name.ends_with("-boot"));
        for namespace in NAMESPACES {
            let mark = format!("gco-{namespace}-");
            for kind in Kind::ALL {
                let made: Vec<(&str, &str)> = resources
                    .iter()
                    .filter(counted)
                    .filter(|r| r.kind == kind && r.name.starts_with(&mark))
                    .map(|r| (r.id.as_str(), r.name.as_str()))
                    .collect();
                let wanted = self
                    .live
                    .iter()
                    .filter(|((ns, _), (k, _))| ns == namespace && *k == kind)
                    .count();
                if made.len() != wanted {
                    problems.push(format!(
                        "{} in {namespace}: {wanted} objects but {} operator resources in the cloud: {made:?}",
                        kind.name(),
                        made.len()
                    ));
                }
            }
        }
        for (key, (id, cloud_name)) in &ids {
            let named: Vec<&str> = resources
                .iter()
                .filter(|r| r.name == *cloud_name)
                .map(|r| r.id.as_str())
                .collect();
            if named != [*id] {
                problems.push(format!(
                    "{}/{}: records {id}, the cloud holds {named:?} under {cloud_name}",
                    key.0, key.1
                ));
            }
        }
        if !problems.is_empty() {
            return problems;
        }
        // Each resource as its object asks: machines running, volumes and firewalls attached
        // to the machines named.
        let id_of = |namespace: &str, name: Option<&str>| {
            name.and_then(|name| ids.get(&(namespace.to_string(), name.to_string())))
                .map(|(id, _)| id.to_string())
        };
        for (key, (kind, spec)) in &self.live {
            let (id, _) = ids[key];
            let Some(resource) = resources.iter().find(|r| r.id == id) else {
                continue;
            };
            let wanted = match kind {
                Kind::Instance => json!("ACTIVE"),
                Kind::Volume => json!(id_of(&key.0, spec["instanceRef"]["name"].as_str())),
                Kind::Firewall => {
                    let mut attached: Vec<String> = spec["instanceRefs"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| id_of(&key.0, r["name"].as_str()))
                        .collect();
                    attached.sort();
                    json!(attached)
                }
                Kind::SshKey => Value::Null,
            };
            if resource.detail != wanted {
                problems.push(format!(
                    "{} {}/{}: the cloud has {}, wanted {wanted}",
                    kind.name(),
                    key.0,
                    key.1,
                    resource.detail
                ));
            }
        }
        problems
    }

    async fn converge(&mut self) -> Result<(), String> {
        let lifted = Instant::now();
        loop {
            self.supervise()?;
            let problems = self.convergence_problems().await;
            if problems.is_empty() {
                self.note(format!(
                    "converged in {:?}: {} objects",
                    lifted.elapsed(),
                    self.live.len()
                ));
                self.stats.converge_ms += lifted.elapsed().as_millis() as u64;
                return Ok(());
            }
            if lifted.elapsed() > CONVERGE_BOUND {
                return Err(format!(
                    "not converged {CONVERGE_BOUND:?} after the faults were lifted:\n  {}",
                    problems.join("\n  ")
                ));
            }
            self.pause(Duration::from_millis(250)).await?;
        }
    }

    async fn delete_everything(&mut self) -> Result<(), String> {
        for (key, (kind, _)) in std::mem::take(&mut self.live) {
            self.delete(kind, &key).await?;
        }
        self.note("everything deleted");
        let asked = Instant::now();
        loop {
            self.supervise()?;
            let remaining = self.listed().await?;
            if remaining.is_empty() {
                self.note(format!("everything gone in {:?}", asked.elapsed()));
                self.stats.delete_ms += asked.elapsed().as_millis() as u64;
                return Ok(());
            }
            if asked.elapsed() > DELETE_BOUND {
                let stuck: Vec<String> = remaining
                    .iter()
                    .map(|((namespace, name), listed)| {
                        format!(
                            "{} {namespace}/{name}: finalizers {:?}, conditions {:?}",
                            listed.kind.name(),
                            listed.finalizers,
                            listed
                                .status
                                .conditions
                                .iter()
                                .map(|c| format!("{} {}: {}", c.status, c.reason, c.message))
                                .collect::<Vec<_>>()
                        )
                    })
                    .collect();
                return Err(format!(
                    "stuck finalizers {DELETE_BOUND:?} after deleting everything:\n  {}",
                    stuck.join("\n  ")
                ));
            }
            self.pause(Duration::from_millis(250)).await?;
        }
    }

    fn check_nothing_left(&self, baseline_drain: f64) -> Result<(), String> {
        let mut leaks: Vec<String> = self
            .cloud_resources()
            .iter()
            .map(|r| format!("{} {} {}", r.kind.name(), r.id, r.name))
            .collect();
        leaks.extend(
            self.world
                .simulator
                .state()
                .snapshots
                .iter()
                .map(|s| format!("snapshot {}", serde_json::to_string(s).unwrap_or_default())),
        );
        if !leaks.is_empty() {
            return Err(format!("leaked after deleting every object: {leaks:?}"));
        }
        let drain = self.hourly_drain();
        if (drain - baseline_drain).abs() > 0.001 {
            return Err(format!(
                "billing did not stop: {drain:.6}/h spent, {baseline_drain:.6}/h before any object"
            ));
        }
        self.note("nothing left in the cloud");
        Ok(())
    }

    /// The last replica stops cleanly on SIGTERM, within its grace period.
    async fn stop_all(&mut self) -> Result<(), String> {
        for replica in std::mem::take(&mut self.replicas) {
            let Some(mut child) = replica.process else {
                continue;
            };
            let sent = Instant::now();
            send_sigterm(&child)?;
            match tokio::time::timeout(TERMINATION_GRACE, child.wait()).await {
                Ok(Ok(status)) if status.success() => {
                    self.note(format!(
                        "{} exited {:?} after SIGTERM",
                        replica.pod,
                        sent.elapsed()
                    ));
                }
                Ok(Ok(status)) => {
                    return Err(format!(
                        "{} exited with {status} after SIGTERM",
                        replica.pod
                    ));
                }
                Ok(Err(error)) => return Err(format!("waiting for {}: {error}", replica.pod)),
                Err(_) => {
                    return Err(format!(
                        "{} still running {TERMINATION_GRACE:?} after SIGTERM",
                        replica.pod
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_output(&self) -> Result<(), String> {
        let output = self.world.output.lock().unwrap();
        if !output.iter().any(|line| line.contains("became the leader")) {
            return Err(format!(
                "the operators' output was not captured ({} lines)",
                output.len()
            ));
        }
        if let Some(line) = output.iter().find(|line| line.contains("panicked at")) {
            return Err(format!("a process panicked: {line}"));
        }
        drop(output);
        let secrets = self.world.secrets_in_output();
        if let Some(first) = secrets.first() {
            return Err(format!(
                "{} output lines hold a secret, the first: {first}",
                secrets.len()
            ));
        }
        Ok(())
    }
}

// === The test ===

fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a whole number")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_process_kills_and_apiserver_restarts_keep_every_invariant() {
    let replay = env_number("GPUCLOUD_PROCESS_CHAOS_SEED");
    let seeds: Vec<u64> = match replay {
        Some(seed) => vec![seed],
        None => (1..=env_number("GPUCLOUD_PROCESS_CHAOS_SEEDS").unwrap_or(3)).collect(),
    };
    let concurrency = env_number("GPUCLOUD_PROCESS_CHAOS_CONCURRENCY")
        .unwrap_or(2)
        .max(1) as usize;
    let count = seeds.len();
    let started = std::time::Instant::now();
    let mut results = futures::stream::iter(seeds)
        .map(|seed| async move {
            let trace = Arc::new(Mutex::new(Vec::new()));
            // Each run is its own task, so a panic names its seed; a run past its bound is a
            // failure, never a hang (dropping it kills its processes).
            let run = tokio::time::timeout(RUN_BOUND, run_seed(seed, trace.clone()));
            let outcome = match tokio::spawn(run).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err(Failure {
                    seed,
                    message: format!("the run did not finish within {RUN_BOUND:?}"),
                }),
                Err(panic) => Err(Failure {
                    seed,
                    message: format!("the run panicked: {panic}"),
                }),
            };
            let trace = trace.lock().unwrap().clone();
            if replay.is_some() {
                eprintln!(
                    "process chaos seed {seed} trace:\n    {}",
                    trace.join("\n    ")
                );
            }
            outcome.map_err(|failure| (failure, trace))
        })
        .buffer_unordered(concurrency);

    let mut total = Stats::default();
    let mut failed = Vec::new();
    while let Some(result) = results.next().await {
        match result {
            Ok(stats) => total.add(&stats),
            Err((failure, trace)) => {
                eprintln!(
                    "process chaos seed {} FAILED: {}\n  replay: GPUCLOUD_PROCESS_CHAOS_SEED={} cargo test --test process_chaos -- --nocapture\n  trace:\n    {}",
                    failure.seed,
                    failure.message,
                    failure.seed,
                    trace.join("\n    ")
                );
                failed.push(failure.seed);
            }
        }
    }
    eprintln!(
        "process chaos: {count} seeds in {:.1}s ({} passed, {} failed)\n  {total:?}",
        started.elapsed().as_secs_f64(),
        total.runs,
        failed.len(),
    );
    assert!(
        failed.is_empty(),
        "process chaos seeds failed: {failed:?} (each printed with its trace above)"
    );
}
