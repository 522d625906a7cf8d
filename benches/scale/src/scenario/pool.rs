//! The pool scenario: one GpuInstancePool, made at 0 replicas, scaled to N through its scale
//! subresource (as `kubectl scale` and an HPA do) and back to 0. Each phase is bounded as N
//! single machines are, from the same cloud calls (the SSH key, N machines, a list per kind),
//! so its ratio compares with the instances scenario's. The cloud's machines and the
//! GpuInstances are sampled from the scale to N to the end, so a duplicate shows even if it
//! is gone by the time the pool is Ready.

use super::{
    CLOUD_DELETING, CLOUD_READY_AFTER, Environment, Error, LISTS_PER_PHASE, NAMESPACE,
    ReadoptionLog, SSH_KEY_NAME, bounded_phase, create_ssh_key, instance_spec, kube_error, log,
    operator_writes, settings, wait_for, wait_until_emptied, with_progress,
};
use crate::args::Args;
use crate::counters::Admin;
use crate::report::{PoolApiWrites, PoolMachines, PoolResult};
use crate::tracker::Tracker;
use gpucloud_api::{GpuInstance, GpuInstancePool, SshKey};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The pool's name; its machines are `bench-pool-<5 characters>`.
const POOL_NAME: &str = "bench-pool";
/// How often the cloud's machines and the GpuInstances are counted.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

pub(super) async fn measure(
    args: &Args,
    binary: &Path,
    env: &Environment,
) -> Result<PoolResult, Error> {
    let n = args.objects;
    let replicas = i32::try_from(n)
        .map_err(|_| Error::Arguments(format!("--objects {n} is more than a pool can hold")))?;
    let instances: Api<GpuInstance> = Api::namespaced(env.client.clone(), NAMESPACE);
    let keys: Api<SshKey> = Api::namespaced(env.client.clone(), NAMESPACE);
    let pools: Api<GpuInstancePool> = Api::namespaced(env.client.clone(), NAMESPACE);
    let tracker = Tracker::start(instances.clone(), Duration::from_millis(500));

    // 1. The operator, and the pool at 0 replicas once its controller has counted it.
    let operator = env
        .start_operator(args, binary, "operator", ReadoptionLog::default())
        .await?;
    pools
        .create(&PostParams::default(), &pool()?)
        .await
        .map_err(kube_error("creating the pool"))?;
    wait_for(args.phase_timeout, "the pool counted at 0 replicas", || {
        let pools = pools.clone();
        async move {
            let pool = pools.get(POOL_NAME).await.ok()?;
            let status = pool.status?;
            (status.observed_generation == pool.metadata.generation && status.replicas == 0)
                .then_some(())
        }
    })
    .await?;

    // 2. The SSH key, then the scale to N: until the pool counts N Ready and so does the
    // bench's watch.
    let before = env.admin.counters().await?;
    let api_at_start = env.api_counts().await?;
    let most = MostSeen::start(env.admin.clone(), tracker.clone());
    let started = Instant::now();
    create_ssh_key(&keys).await?;
    scale(&pools, replicas).await?;
    let scaled_mark = tracker.seconds(started);
    let mut all_made_at = None;
    let ready_at = wait_for(args.phase_timeout, "the pool Ready at N replicas", || {
        let pools = pools.clone();
        let tracker = tracker.clone();
        if all_made_at.is_none() && tracker.objects() >= n {
            all_made_at = Some(Instant::now());
        }
        async move {
            let ready = pools.get(POOL_NAME).await.ok()?.status?.ready_replicas;
            (ready == replicas && tracker.ready() == n).then(Instant::now)
        }
    })
    .await
    .map_err(|e| with_progress(e, format!("{} of {n} GpuInstances Ready", tracker.ready())))?;
    let scale_up_counters = env.admin.counters().await?.since(&before);
    let cloud_creates = scale_up_counters.succeeded("CreateInstance");
    let scale_up = bounded_phase(
        args,
        ready_at.saturating_duration_since(started),
        &scale_up_counters,
        cloud_creates + scale_up_counters.succeeded("CreateSshKey") + LISTS_PER_PHASE,
        CLOUD_READY_AFTER,
    );
    let ready_mark = tracker.seconds(ready_at);
    let operator_ready = operator.usage()?;
    let cloud_at_ready = env.admin.holdings().await?.instances;
    let objects_at_ready = instances
        .list(&ListParams::default())
        .await
        .map_err(kube_error("listing the pool's machines"))?
        .items
        .len();
    let all_made_s = all_made_at
        .unwrap_or(ready_at)
        .saturating_duration_since(started)
        .as_secs_f64();
    log(&format!(
        "pool Ready at {n} in {:.1} s (bound {:.1} s; all {n} GpuInstances made after \
         {all_made_s:.1} s): {cloud_at_ready} machines in the cloud, {objects_at_ready} \
         GpuInstances, {cloud_creates} cloud creates",
        scale_up.seconds, scale_up.lower_bound_s
    ));

    // 3. The scale to 0 and the SSH key deleted, as the instances scenario deletes its
    // objects: until the cloud holds nothing and no GpuInstance is left.
    let before_down = env.admin.counters().await?;
    let api_before_down = env.api_counts().await?;
    let scaling_down = Instant::now();
    let scale_down_mark = tracker.seconds(scaling_down);
    scale(&pools, 0).await?;
    keys.delete(SSH_KEY_NAME, &DeleteParams::default())
        .await
        .map_err(kube_error("deleting the SSH key"))?;
    let emptied_at = wait_until_emptied(args, env, &instances).await?;
    let scale_down_counters = env.admin.counters().await?.since(&before_down);
    let scale_down = bounded_phase(
        args,
        emptied_at.saturating_duration_since(scaling_down),
        &scale_down_counters,
        scale_down_counters.succeeded("DeleteInstance")
            + scale_down_counters.succeeded("DeleteSshKey")
            + LISTS_PER_PHASE,
        CLOUD_DELETING,
    );
    let (most_cloud, most_objects, samples) = most.stop();
    log(&format!(
        "pool scaled to 0 in {:.1} s (bound {:.1} s); at most {most_cloud} machines in the \
         cloud and {most_objects} GpuInstances over {samples} samples",
        scale_down.seconds, scale_down.lower_bound_s
    ));

    // 4. Totals.
    let totals = env.admin.counters().await?;
    let api_at_end = env.stop_operator(operator).await?;
    let api_writes = PoolApiWrites {
        objects: n,
        scale_up: operator_writes(&api_before_down, &api_at_start, n),
        scale_down: operator_writes(&api_at_end, &api_before_down, n),
    };
    for line in api_writes.lines() {
        log(&line);
    }
    Ok(PoolResult {
        settings: settings(args),
        scale_up,
        scale_down,
        machines: PoolMachines {
            cloud_at_ready,
            objects_at_ready,
            most_cloud,
            most_objects,
            samples,
            cloud_creates,
            all_made_s,
        },
        operator_ready,
        throttled: totals.with_status("429"),
        calls_by_operation: totals.by_operation(),
        api_writes,
        timeline: tracker.timeline(),
        marks: vec![scaled_mark, ready_mark, scale_down_mark],
        targets: Vec::new(),
    })
}

/// The pool at 0 replicas, its template the instances scenario's GpuInstance.
fn pool() -> Result<GpuInstancePool, Error> {
    let labels = serde_json::json!({"app": POOL_NAME});
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": "GpuInstancePool",
        "metadata": {"name": POOL_NAME},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": instance_spec(),
            },
        },
    }))?)
}

/// Sets the pool's replicas through the scale subresource, as `kubectl scale` does.
async fn scale(pools: &Api<GpuInstancePool>, replicas: i32) -> Result<(), Error> {
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    pools
        .patch_scale(POOL_NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(kube_error(format!("scaling the pool to {replicas}")))?;
    Ok(())
}

// === impl MostSeen ===

/// The most machines the cloud held, and the most GpuInstances the bench's watch saw, at any
/// sample since it started.
struct MostSeen {
    cloud: Arc<AtomicUsize>,
    objects: Arc<AtomicUsize>,
    samples: Arc<AtomicUsize>,
    sampling: tokio::task::JoinHandle<()>,
}

impl MostSeen {
    fn start(admin: Admin, tracker: Tracker) -> MostSeen {
        let cloud = Arc::new(AtomicUsize::new(0));
        let objects = Arc::new(AtomicUsize::new(0));
        let samples = Arc::new(AtomicUsize::new(0));
        let sampling = tokio::spawn({
            let (cloud, objects, samples) = (cloud.clone(), objects.clone(), samples.clone());
            async move {
                let mut ticks = tokio::time::interval(SAMPLE_EVERY);
                loop {
                    ticks.tick().await;
                    // A failed read is no sample; the next one counts.
                    if let Ok(holdings) = admin.holdings().await {
                        cloud.fetch_max(holdings.instances, Ordering::Relaxed);
                        objects.fetch_max(tracker.objects(), Ordering::Relaxed);
                        samples.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        MostSeen {
            cloud,
            objects,
            samples,
            sampling,
        }
    }

    /// Stops sampling: (most machines in the cloud, most GpuInstances, samples).
    fn stop(self) -> (usize, usize, usize) {
        self.sampling.abort();
        (
            self.cloud.load(Ordering::Relaxed),
            self.objects.load(Ordering::Relaxed),
            self.samples.load(Ordering::Relaxed),
        )
    }
}
