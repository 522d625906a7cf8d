//! Seeded chaos for GpuInstancePools: one pool scaled up and down through its scale
//! subresource 6 to 12 times, 0 to 400 ms apart, while the operator is killed (at random, and
//! right after a scale, mid-scale-up or mid-scale-down) and restarted, watches are cut and
//! compacted away (410), in a third of the seeds a second operator acts at once (a deposed
//! leader), status writes conflict, creates of GpuInstances are carried out and
//! answered `504 Timeout`, and the cloud drops create responses and fails calls.
//!
//! Checked: while the faults last, the pool never has more machines (not being deleted) than
//! the most it was ever asked for; the API server carried out no more GpuInstance creates
//! (answered 201, or 504 after acting) than the scale-ups asked for (the sum of the increases
//! of `replicas`): no machine was made twice; once the faults are lifted, exactly `replicas` machines, all Ready, and exactly
//! as many cloud machines; after the pool's deletion, none of either.

use crate::support::{Env, NAMESPACE, test_config};
use crate::world::Failure;
use gpucloud_api::GpuInstancePool;
use gpucloud_api::gpu_instance_pool::POOL_LABEL;
use gpucloud_apiserver::faults::ApiFaultPlan;
use gpucloud_simulator::{FaultPlan, SimulatorConfig};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::time::Duration;

/// What one pool run did, for the report.
#[derive(Debug, Default, Clone)]
pub struct PoolStats {
    pub runs: u64,
    pub scales: u64,
    pub kills: u64,
    pub creates: u64,
    pub create_timeouts: u64,
    pub status_conflicts: u64,
    /// Runs with a second operator acting at once.
    pub second_operators: u64,
}

impl PoolStats {
    pub fn add(&mut self, other: &PoolStats) {
        self.runs += other.runs;
        self.scales += other.scales;
        self.kills += other.kills;
        self.creates += other.creates;
        self.create_timeouts += other.create_timeouts;
        self.status_conflicts += other.status_conflicts;
        self.second_operators += other.second_operators;
    }
}

struct Run {
    seed: u64,
    env: Env,
    trace: Vec<String>,
}

impl Run {
    fn fail(&self, message: String) -> Failure {
        Failure {
            seed: self.seed,
            message: format!("pool: {message}"),
            trace: self.trace.clone(),
        }
    }

    fn pools(&self) -> Api<GpuInstancePool> {
        Api::namespaced(self.env.client.clone(), NAMESPACE)
    }

    fn machines_api(&self) -> Api<gpucloud_api::GpuInstance> {
        Api::namespaced(self.env.client.clone(), NAMESPACE)
    }

    /// The pool's machines: (all, not being deleted, Ready and not being deleted).
    async fn machines(&self) -> Option<(usize, usize, usize)> {
        let list = self
            .machines_api()
            .list(&ListParams::default().labels(&format!("{POOL_LABEL}=workers")))
            .await
            .ok()?;
        let live: Vec<_> = list
            .items
            .iter()
            .filter(|m| m.meta().deletion_timestamp.is_none())
            .collect();
        let ready = live
            .iter()
            .filter(|m| m.cloud_status().is_ready(m.meta().generation))
            .count();
        Some((list.items.len(), live.len(), ready))
    }

    /// The machines (name, created, deleting) and the pool's record, for a failure.
    async fn describe(&self) -> String {
        let machines: Vec<String> = self
            .machines_api()
            .list(&ListParams::default().labels(&format!("{POOL_LABEL}=workers")))
            .await
            .map(|list| {
                list.items
                    .iter()
                    .map(|m| {
                        format!(
                            "{} created {:?}{}",
                            m.metadata.name.as_deref().unwrap_or_default(),
                            m.meta().creation_timestamp.as_ref().map(|t| t.0),
                            if m.meta().deletion_timestamp.is_some() {
                                " deleting"
                            } else {
                                ""
                            }
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let record = self
            .pools()
            .get("workers")
            .await
            .ok()
            .and_then(|p| p.status)
            .map(|s| format!("creating {:?}, deleting {:?}", s.creating, s.deleting));
        format!("machines {machines:?}; record {record:?}")
    }

    /// The GpuInstance creates the API server carried out: answered 201, or 504 after acting.
    fn created(&self) -> u64 {
        self.env
            .apiserver
            .request_counts()
            .iter()
            .filter(|c| {
                c.verb == "create" && c.resource == "gpuinstances" && matches!(c.code, 201 | 504)
            })
            .map(|c| c.count)
            .sum()
    }

    fn cloud_machines(&self) -> usize {
        self.env.simulator.state().instances.len()
    }
}

use gpucloud_api::Managed;

fn pool(replicas: i32) -> GpuInstancePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstancePool",
        "metadata": {"name": "workers", "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "workers"}},
            "template": {
                "metadata": {"labels": {"app": "workers"}},
                "spec": {"region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
                         "osImage": "ubuntu-22.04-cuda-12"}
            }
        }
    }))
    .unwrap()
}

pub async fn run_seed(seed: u64) -> Result<PoolStats, Failure> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    let env = Env::without_operator(SimulatorConfig::default()).await;
    let mut run = Run {
        seed,
        env,
        trace: Vec::new(),
    };
    let mut stats = PoolStats {
        runs: 1,
        ..PoolStats::default()
    };
    let (api_faults, cloud_faults) = fault_plans(seed, &mut rng);
    run.trace.push(format!("API server faults {api_faults:?}"));
    run.trace.push(format!("cloud faults {cloud_faults:?}"));
    let first = rng.random_range(0..=4);
    run.pools()
        .create(&PostParams::default(), &pool(first))
        .await
        .map_err(|e| run.fail(format!("pool not created: {e}")))?;
    run.trace.push(format!("created with replicas {first}"));
    // From here on the only custom resources created are the pool's machines.
    run.env.apiserver.faults().set_plan(api_faults).unwrap();
    run.env.simulator.set_faults(cloud_faults);
    let config = test_config(&run.env.simulator);
    run.env.start_operator(config.clone());
    // In a third of the seeds a second operator acts on the same objects through the fault
    // phase, as a deposed leader that has not noticed yet: two controllers, each with its own
    // (possibly stale) view of the pool.
    let second = if rng.random_bool(1.0 / 3.0) {
        stats.second_operators += 1;
        Some(run.start_second_operator(&config))
    } else {
        None
    };
    let (replicas, asked) = run
        .fault_phase(&mut rng, &config, first, &mut stats)
        .await?;

    if let Some((stop, task)) = second {
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
        run.trace.push("the second operator stopped".into());
    }
    let counts = run.env.apiserver.faults().counts();
    stats.create_timeouts = counts.create_timeouts;
    stats.status_conflicts = counts.status_conflicts;
    run.env
        .apiserver
        .faults()
        .set_plan(ApiFaultPlan::default())
        .unwrap();
    run.env.simulator.set_faults(FaultPlan::default());
    run.trace
        .push(format!("faults lifted at replicas {replicas}"));

    run.converge(replicas).await?;
    // A create answered 504 was carried out all the same. The API server's own count of
    // those covers every kind's creates (the operator creates GpuOfferings too), so the
    // GpuInstance creates are read from its request log by answer.
    stats.creates = run.created();
    if stats.creates > asked {
        return Err(run.fail(format!(
            "duplicate: {} GpuInstances created where the scale-ups asked for {asked}",
            stats.creates
        )));
    }

    run.delete_pool_and_wait().await?;
    run.env.stop_operator().await;
    Ok(stats)
}

/// The API server's and the cloud's faults of a seed's run.
fn fault_plans(seed: u64, rng: &mut StdRng) -> (ApiFaultPlan, FaultPlan) {
    let api_faults = ApiFaultPlan {
        seed,
        status_conflict_rate: rng.random_range(0.05..0.3),
        watch_cut_rate: rng.random_range(0.2..0.6),
        watch_lifetime: (Duration::from_millis(100), Duration::from_millis(1500)),
        create_timeout_rate: rng.random_range(0.1..0.4),
        watch_delay: Duration::ZERO,
    };
    let cloud_faults = FaultPlan {
        error_rate: rng.random_range(0.0..0.1),
        act_then_drop: BTreeMap::from([("CreateInstance".to_string(), rng.random_range(0.1..0.4))]),
        ..FaultPlan::default()
    };
    (api_faults, cloud_faults)
}

impl Run {
    /// Starts a second operator on the same objects, until the sender is used.
    fn start_second_operator(
        &mut self,
        config: &gpucloud_controller::operator::run::OperatorConfig,
    ) -> (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(gpucloud_controller::operator::run::run(
            self.env.client.clone(),
            config.clone(),
            futures::FutureExt::boxed(async {
                let _ = stopped.await;
            }),
        ));
        self.trace
            .push("a second operator runs through the fault phase".into());
        (stop, task)
    }

    /// 6 to 12 steps, 0 to 400 ms apart, each a scale, a kill of the operator, cut watches or
    /// a compaction; after each, no more machines than the most ever asked for. Returns the
    /// replicas last asked for and the sum of the scale-ups' increases from `first`.
    async fn fault_phase(
        &mut self,
        rng: &mut StdRng,
        config: &gpucloud_controller::operator::run::OperatorConfig,
        first: i32,
        stats: &mut PoolStats,
    ) -> Result<(i32, u64), Failure> {
        let (mut replicas, mut most, mut asked) = (first, first, u64::try_from(first).unwrap_or(0));
        for _ in 0..rng.random_range(6..=12) {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..400))).await;
            match rng.random_range(0..10) {
                0..=5 => {
                    let next = rng.random_range(0..=5);
                    let scaled = self
                        .pools()
                        .patch_scale(
                            "workers",
                            &PatchParams::default(),
                            &Patch::Merge(serde_json::json!({"spec": {"replicas": next}})),
                        )
                        .await;
                    if let Err(error) = scaled {
                        self.trace.push(format!("scale to {next} failed: {error}"));
                        continue;
                    }
                    self.trace.push(format!("scaled {replicas} -> {next}"));
                    asked += u64::try_from((next - replicas).max(0)).unwrap_or(0);
                    replicas = next;
                    most = most.max(next);
                    stats.scales += 1;
                    // Killed in the middle of the scale, often.
                    if rng.random_bool(0.4) {
                        tokio::time::sleep(Duration::from_millis(rng.random_range(0..150))).await;
                        self.env.kill_operator().await;
                        self.env.start_operator(config.clone());
                        self.trace
                            .push("operator killed mid-scale and restarted".into());
                        stats.kills += 1;
                    }
                }
                6 | 7 => {
                    self.env.kill_operator().await;
                    tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
                    self.env.start_operator(config.clone());
                    self.trace.push("operator killed and restarted".into());
                    stats.kills += 1;
                }
                8 => {
                    self.env.apiserver.faults().disconnect_watches();
                    self.trace.push("watches disconnected".into());
                }
                _ => {
                    self.env.apiserver.compact();
                    self.trace.push("watch history compacted (410)".into());
                }
            }
            if let Some((_, live, _)) = self.machines().await
                && live > usize::try_from(most).unwrap_or(0)
            {
                let detail = self.describe().await;
                return Err(self.fail(format!(
                    "{live} machines at once, more than the most ever asked for ({most}): {detail}"
                )));
            }
        }
        Ok((replicas, asked))
    }

    /// Waits (up to 120 s) for exactly `replicas` machines, all Ready, and as many in the cloud.
    async fn converge(&self, replicas: i32) -> Result<(), Failure> {
        let wanted = usize::try_from(replicas).unwrap_or(0);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let machines = self.machines().await;
            let cloud = self.cloud_machines();
            if machines == Some((wanted, wanted, wanted)) && cloud == wanted {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(self.fail(format!(
                    "not converged: (machines, live, Ready) {machines:?} and {cloud} cloud machines for replicas {replicas}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// Deletes the pool and waits (up to 120 s) for it, its machines and theirs in the cloud
    /// to be gone.
    async fn delete_pool_and_wait(&self) -> Result<(), Failure> {
        self.pools()
            .delete("workers", &DeleteParams::foreground())
            .await
            .map_err(|e| self.fail(format!("pool not deleted: {e}")))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let machines = self.machines().await;
            let pool_gone = self
                .pools()
                .get_opt("workers")
                .await
                .ok()
                .flatten()
                .is_none();
            if machines == Some((0, 0, 0)) && self.cloud_machines() == 0 && pool_gone {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(self.fail(format!(
                    "leaked: {machines:?} machines, {} cloud machines, pool gone: {pool_gone}",
                    self.cloud_machines()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }
}
