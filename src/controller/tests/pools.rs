#![allow(clippy::unwrap_used, clippy::expect_used)]
//! GpuInstancePools through kubectl: `kubectl scale` makes exactly `replicas` Ready machines
//! and takes the newest away, the scale subresource answers with the selector, a template
//! change replaces machines without going below `replicas - maxUnavailable` Ready, an HPA
//! against the pool is accepted, deleting the pool empties the cloud; and stale copies of a
//! pool reconciled at once never make more machines than `replicas`.

use crate::support::{self, Env, eventually};
use gpucloud_api::gpu_instance_pool::{IN_PLACE_HASH_ANNOTATION, POOL_LABEL, TEMPLATE_HASH_LABEL};
use gpucloud_api::*;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

const POOL: &str = r#"
apiVersion: gpucloud.io/v1alpha1
kind: GpuInstancePool
metadata: {name: workers, namespace: team-a}
spec:
  replicas: 1
  selector: {matchLabels: {app: workers}}
  template:
    metadata: {labels: {app: workers}}
    spec: {region: us-east-1, gpuType: L40S, gpuCount: 1, osImage: ubuntu-22.04-cuda-12}
  strategy:
    type: RollingReplace
    rollingReplace: {maxUnavailable: 1, maxSurge: 0}
"#;

struct Kubectl(PathBuf);

impl Kubectl {
    fn new(env: &Env) -> Kubectl {
        let path = std::env::temp_dir().join(format!(
            "gpucloud-pools-{}-{}.kubeconfig",
            std::process::id(),
            rand::random::<u32>()
        ));
        env.apiserver.write_kubeconfig(&path).unwrap();
        let kubectl = Kubectl(path);
        kubectl.run_blocking(&["config", "set-context", "--current", "--namespace=team-a"]);
        kubectl
    }

    /// A merge patch of the pool `workers`, as a person would send it.
    async fn patch_workers(&self, patch: &str) -> String {
        self.run(&[
            "patch",
            "gpuinstancepool",
            "workers",
            "--type=merge",
            "-p",
            patch,
        ])
        .await
    }

    fn run_blocking(&self, args: &[&str]) -> String {
        run(&self.0, args, None)
    }

    async fn run(&self, args: &[&str]) -> String {
        self.run_with(args, None).await
    }

    async fn run_with(&self, args: &[&str], stdin: Option<&str>) -> String {
        let path = self.0.clone();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let stdin = stdin.map(str::to_string);
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run(&path, &args, stdin.as_deref())
        })
        .await
        .unwrap()
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn run(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(stdin.unwrap_or_default().as_bytes())
            .unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn machines_api(env: &Env) -> Api<GpuInstance> {
    Api::namespaced(env.client.clone(), support::NAMESPACE)
}

/// The pool's machines, deleting ones included.
async fn pool_machines(env: &Env) -> Vec<GpuInstance> {
    machines_api(env)
        .list(&ListParams::default().labels(&format!("{POOL_LABEL}=workers")))
        .await
        .map(|list| list.items)
        .unwrap_or_default()
}

fn is_ready(machine: &GpuInstance) -> bool {
    machine.meta().deletion_timestamp.is_none()
        && machine.cloud_status().is_ready(machine.meta().generation)
}

use kube::Resource;

/// Waits until the pool has exactly `count` machines, all Ready and made from its current
/// template, the pool itself Ready, and the cloud exactly `count` machines.
async fn settled(env: &Env, count: usize) -> Vec<GpuInstance> {
    let pools: Api<GpuInstancePool> = Api::namespaced(env.client.clone(), support::NAMESPACE);
    eventually(120, &format!("{count} Ready machines"), || {
        let pools = pools.clone();
        async move {
            let pool = pools.get("workers").await.ok()?;
            let status = pool.status.clone()?;
            if status.observed_generation != pool.metadata.generation {
                return None;
            }
            let hash = status.template_hash.clone()?;
            let machines = pool_machines(env).await;
            let ready = machines
                .iter()
                .filter(|m| is_ready(m) && m.labels().get(TEMPLATE_HASH_LABEL) == Some(&hash))
                .count();
            let pool_ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (machines.len() == count
                && ready == count
                && pool_ready
                && status.ready_replicas == count as i32
                && env.simulator.state().instances.len() == count)
                .then_some(machines)
        }
    })
    .await
}

/// What [`sample`] saw: the most machine objects and cloud machines at once, and the fewest
/// Ready machines.
#[derive(Debug)]
struct Seen {
    most_objects: usize,
    most_cloud: usize,
    fewest_ready: usize,
}

/// Samples the pool's machines every 50 ms until `done` resolves, and returns its output.
async fn sample<T>(env: &Env, done: impl std::future::Future<Output = T>) -> (Seen, T) {
    let stop = AtomicBool::new(false);
    let mut seen = Seen {
        most_objects: 0,
        most_cloud: 0,
        fewest_ready: usize::MAX,
    };
    let sampling = async {
        while !stop.load(Ordering::SeqCst) {
            let machines = pool_machines(env).await;
            seen.most_objects = seen.most_objects.max(machines.len());
            seen.fewest_ready = seen
                .fewest_ready
                .min(machines.iter().filter(|m| is_ready(m)).count());
            seen.most_cloud = seen.most_cloud.max(env.simulator.state().instances.len());
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let finishing = async {
        let output = done.await;
        stop.store(true, Ordering::SeqCst);
        output
    };
    let ((), output) = tokio::join!(sampling, finishing);
    (seen, output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_makes_exactly_replicas_machines_and_deleting_the_pool_empties_the_cloud() {
    let env = Env::start().await;
    let kubectl = Kubectl::new(&env);
    kubectl.run_with(&["apply", "-f", "-"], Some(POOL)).await;
    settled(&env, 1).await;

    let (seen, machines) = sample(&env, async {
        let scaled = kubectl
            .run(&["scale", "gpuinstancepool", "workers", "--replicas=3"])
            .await;
        assert_eq!(scaled.trim(), "gpuinstancepool.gpucloud.io/workers scaled");
        settled(&env, 3).await
    })
    .await;
    assert_eq!(seen.most_objects, 3, "never more than 3 GpuInstances");
    assert_eq!(seen.most_cloud, 3, "never more than 3 cloud machines");
    for machine in &machines {
        let owner = &machine.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("GpuInstancePool", "workers")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert!(machine.name_any().starts_with("workers-"));
    }

    // The scale subresource, as an HPA reads it.
    let scale: serde_json::Value = serde_json::from_str(
        &kubectl
            .run(&[
                "get",
                "--raw",
                "/apis/gpucloud.io/v1alpha1/namespaces/team-a/gpuinstancepools/workers/scale",
            ])
            .await,
    )
    .unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=workers");
    let table = kubectl.run(&["get", "gpupool", "workers"]).await;
    eprintln!("{table}");
    assert!(table.contains("DESIRED"), "{table}");
    assert!(table.contains("UP-TO-DATE"), "{table}");

    // Down to one: the two newest go, the oldest stays.
    let oldest = machines
        .iter()
        .min_by_key(|m| (m.meta().creation_timestamp.clone(), m.name_any()))
        .unwrap()
        .name_any();
    kubectl
        .run(&["scale", "gpuinstancepool", "workers", "--replicas=1"])
        .await;
    let left = settled(&env, 1).await;
    // Machines made within one second share a creationTimestamp: then any of them may stay.
    let same_second = machines
        .iter()
        .filter(|m| m.meta().creation_timestamp == machines[0].meta().creation_timestamp)
        .count();
    if same_second < 2 {
        assert_eq!(left[0].name_any(), oldest);
    }

    // Deleting the pool deletes its machines through the garbage collector.
    kubectl
        .run(&["delete", "gpuinstancepool", "workers", "--wait=false"])
        .await;
    eventually(120, "no machine object and an empty cloud", || async {
        (pool_machines(&env).await.is_empty() && env.simulator.state().instances.is_empty())
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_removes_a_machine_that_is_not_ready_first() {
    let env = Env::start().await;
    let kubectl = Kubectl::new(&env);
    kubectl.run_with(&["apply", "-f", "-"], Some(POOL)).await;
    kubectl
        .run(&["scale", "gpuinstancepool", "workers", "--replicas=2"])
        .await;
    let machines = settled(&env, 2).await;
    // The oldest is held to a price limit below its rate: Stalled, not Ready.
    let oldest = machines
        .iter()
        .min_by_key(|m| (m.meta().creation_timestamp.clone(), m.name_any()))
        .unwrap()
        .clone();
    kubectl
        .run(&[
            "patch",
            "gpuinstance",
            &oldest.name_any(),
            "--type=merge",
            "-p",
            r#"{"spec":{"maxHourlyRate":0.0001}}"#,
        ])
        .await;
    eventually(60, "the oldest machine not Ready", || async {
        let machine = machines_api(&env).get(&oldest.name_any()).await.ok()?;
        let ready = machine
            .cloud_status()
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (!ready).then_some(())
    })
    .await;
    kubectl
        .run(&["scale", "gpuinstancepool", "workers", "--replicas=1"])
        .await;
    eventually(60, "only the newer machine left", || async {
        let left: Vec<String> = pool_machines(&env)
            .await
            .iter()
            .filter(|m| m.meta().deletion_timestamp.is_none())
            .map(|m| m.name_any())
            .collect();
        (left.len() == 1).then_some(left)
    })
    .await
    .iter()
    .for_each(|name| assert_ne!(name, &oldest.name_any()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_replaces_machines_within_max_unavailable() {
    let env = Env::start().await;
    let kubectl = Kubectl::new(&env);
    kubectl.run_with(&["apply", "-f", "-"], Some(POOL)).await;
    kubectl
        .run(&["scale", "gpuinstancepool", "workers", "--replicas=3"])
        .await;
    let before = settled(&env, 3).await;
    let old_hash = before[0].labels()[TEMPLATE_HASH_LABEL].clone();

    let (seen, after) = sample(&env, async {
        kubectl
            .patch_workers(r#"{"spec":{"template":{"spec":{"osImage":"ubuntu-24.04-cuda-12"}}}}"#)
            .await;
        settled(&env, 3).await
    })
    .await;
    let Seen {
        most_objects,
        most_cloud,
        fewest_ready,
    } = seen;
    assert!(
        after
            .iter()
            .all(|m| m.labels()[TEMPLATE_HASH_LABEL] != old_hash
                && m.spec.os_image.as_deref() == Some("ubuntu-24.04-cuda-12")),
        "every machine replaced"
    );
    assert!(
        before
            .iter()
            .all(|old| after.iter().all(|new| new.name_any() != old.name_any()))
    );
    assert!(
        fewest_ready >= 2,
        "{fewest_ready} Ready machines at one point"
    );
    // maxSurge 0: the machine being deleted and its replacement are never both billed.
    assert!(most_objects <= 4, "{most_objects} objects at once");
    assert!(most_cloud <= 4, "{most_cloud} cloud machines at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_against_the_pool_is_accepted_and_resolves() {
    let env = Env::start().await;
    let kubectl = Kubectl::new(&env);
    kubectl.run_with(&["apply", "-f", "-"], Some(POOL)).await;
    settled(&env, 1).await;
    let hpa = r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: workers, namespace: team-a}
spec:
  scaleTargetRef: {apiVersion: gpucloud.io/v1alpha1, kind: GpuInstancePool, name: workers}
  minReplicas: 1
  maxReplicas: 4
  metrics:
  - type: External
    external:
      metric: {name: queue_length}
      target: {type: AverageValue, averageValue: "10"}
"#;
    let applied = kubectl.run_with(&["apply", "-f", "-"], Some(hpa)).await;
    assert!(applied.contains("created"), "{applied}");
    let described = kubectl.run(&["describe", "hpa", "workers"]).await;
    assert!(described.contains("GpuInstancePool/workers"), "{described}");
    assert!(!described.contains("FailedGetScale"), "{described}");
    // The scale target resolves as the HPA controller resolves it: the kind's resource from
    // discovery, then its scale subresource with a selector.
    let resources = kubectl
        .run(&["api-resources", "--api-group=gpucloud.io"])
        .await;
    assert!(resources.contains("gpuinstancepools"), "{resources}");
    let scale: serde_json::Value = serde_json::from_str(
        &kubectl
            .run(&[
                "get",
                "--raw",
                "/apis/gpucloud.io/v1alpha1/namespaces/team-a/gpuinstancepools/workers/scale",
            ])
            .await,
    )
    .unwrap();
    assert_eq!(scale["status"]["selector"], "app=workers");
}

/// Several reconciles of the same (soon stale) copy of a pool at once, as two replicas or a
/// lagging cache would run them: exactly `replicas` machines. Each reconcile records its
/// names with the copy's resourceVersion first; only one record lands, and only its names
/// are created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_copies_of_a_pool_never_make_more_than_replicas() {
    let env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let pools: Api<GpuInstancePool> = Api::namespaced(env.client.clone(), support::NAMESPACE);
    let mut pool: GpuInstancePool = serde_saphyr::from_str(POOL).unwrap();
    pool.spec.replicas = 3;
    let pool = pools.create(&PostParams::default(), &pool).await.unwrap();
    let runs = (0..4).map(|_| {
        let (client, pool) = (env.client.clone(), pool.clone());
        tokio::spawn(async move {
            gpucloud_controller::kinds::gpu_instance_pool::reconcile(&client, &pool).await
        })
    });
    let results: Vec<_> = futures::future::join_all(runs).await;
    let won = results
        .iter()
        .filter(|r| r.as_ref().unwrap().is_ok())
        .count();
    assert_eq!(won, 1, "one record lands: {results:?}");
    assert_eq!(pool_machines(&env).await.len(), 3);
    // The same stale copy once more, after the winner: refused, nothing created.
    let again = gpucloud_controller::kinds::gpu_instance_pool::reconcile(&env.client, &pool).await;
    assert!(again.is_err_and(|e| e.is_stale_write()));
    assert_eq!(pool_machines(&env).await.len(), 3);
    // The current copy, many times over: still 3.
    for _ in 0..3 {
        let current = pools.get("workers").await.unwrap();
        gpucloud_controller::kinds::gpu_instance_pool::reconcile(&env.client, &current)
            .await
            .unwrap();
    }
    assert_eq!(pool_machines(&env).await.len(), 3);
}

/// Budgets apply per machine: a pool of three under a Budget with room for two has two Ready
/// machines, and says why it has no third (`BudgetExceeded`, from its machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_a_budget_holds_back_says_why() {
    let env = Env::start().await;
    let kubectl = Kubectl::new(&env);
    let budget = r#"
apiVersion: gpucloud.io/v1alpha1
kind: Budget
metadata: {name: team, namespace: team-a}
spec: {maxHourlyRate: 2.75}
"#;
    kubectl.run_with(&["apply", "-f", "-"], Some(budget)).await;
    kubectl
        .run_with(
            &["apply", "-f", "-"],
            Some(&POOL.replace("replicas: 1", "replicas: 3")),
        )
        .await;
    let pools: Api<GpuInstancePool> = Api::namespaced(env.client.clone(), support::NAMESPACE);
    let pool = eventually(120, "the pool Stalled with BudgetExceeded", || async {
        let pool = pools.get("workers").await.ok()?;
        let status = pool.status.clone()?;
        let stalled = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Stalled" && c.status == "True" && c.reason == "BudgetExceeded");
        (stalled && status.ready_replicas == 2).then_some(pool)
    })
    .await;
    let status = pool.status.unwrap();
    assert_eq!(
        status.replicas, 3,
        "three machines, one refused by the Budget"
    );
    assert_eq!(env.simulator.state().instances.len(), 2);
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "False");
    assert!(ready.message.contains("2 of 3 machines Ready"), "{ready:?}");
    assert_eq!(pool_machines(&env).await.len(), 3);
}

/// A change a machine can make (the pool's `deletionPolicy`, `powerState: Stopped` to pause
/// the pool, a lifetime, a template label) is made on every machine in place: none is
/// replaced, no machine is created, and the cloud's machines are stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_a_machine_can_make_is_made_in_place() {
    let env = Env::start().await;
    let kubectl = Kubectl::new(&env);
    kubectl
        .run_with(
            &["apply", "-f", "-"],
            Some(&POOL.replace("replicas: 1", "replicas: 2")),
        )
        .await;
    let before = settled(&env, 2).await;
    assert!(
        before
            .iter()
            .all(|m| m.spec.managed.deletion_policy == DeletionPolicy::Delete)
    );
    let creates = env.calls("CreateInstance");
    kubectl.patch_workers(r#"{"spec":{"deletionPolicy":"Orphan","template":{"metadata":{"labels":{"team":"vision"}},"spec":{"powerState":"Stopped","lifetime":{"ttl":"8h"}}}}}"#).await;
    let after = eventually(90, "every machine stopped in place", || async {
        let machines = pool_machines(&env).await;
        let cloud = env.simulator.state();
        let stopped = cloud
            .instances
            .iter()
            .filter(|i| i.status.as_str() == "SHUTOFF")
            .count();
        (machines.len() == 2
            && stopped == 2
            && machines.iter().all(|m| {
                m.spec.managed.deletion_policy == DeletionPolicy::Orphan
                    && m.spec.power_state == PowerState::Stopped
                    && m.spec.lifetime.as_ref().and_then(|l| l.ttl.as_deref()) == Some("8h")
                    && m.labels().get("team").map(String::as_str) == Some("vision")
            }))
        .then_some(machines)
    })
    .await;
    for machine in &after {
        let made = before
            .iter()
            .find(|b| b.name_any() == machine.name_any())
            .expect("the same machine, not a replacement");
        assert_eq!(
            machine.labels()[TEMPLATE_HASH_LABEL],
            made.labels()[TEMPLATE_HASH_LABEL]
        );
    }
    assert_eq!(env.calls("CreateInstance"), creates, "no machine created");
    assert_eq!(env.simulator.state().instances.len(), 2);
}

/// A machine the API server refuses (here a template label no object may carry) is not
/// retried in a loop: the pool is Stalled with `CreateRefused` and the server's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_machine_stalls_the_pool_with_the_servers_message() {
    let env = Env::start().await;
    let kubectl = Kubectl::new(&env);
    kubectl
        .run_with(
            &["apply", "-f", "-"],
            Some(&POOL.replace(
                "metadata: {labels: {app: workers}}",
                "metadata: {labels: {app: workers, \"not a label!\": x}}",
            )),
        )
        .await;
    let pools: Api<GpuInstancePool> = Api::namespaced(env.client.clone(), support::NAMESPACE);
    let stalled = eventually(60, "the pool Stalled with CreateRefused", || async {
        let pool = pools.get("workers").await.ok()?;
        pool.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Stalled" && c.status == "True" && c.reason == "CreateRefused")
    })
    .await;
    assert!(stalled.message.contains("metadata.labels"), "{stalled:?}");
    assert!(pool_machines(&env).await.is_empty());
    assert!(env.simulator.state().instances.is_empty());
}

/// Another team's GpuInstance that claims the pool (its labels, and a controller owner
/// reference to the pool's uid), and one of the pool's own namespace with its labels but no
/// such reference: neither is counted, scaled down or deleted by the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_that_only_claim_the_pool_are_never_its_own() {
    let env = Env::start().await;
    let kubectl = Kubectl::new(&env);
    kubectl.run_with(&["apply", "-f", "-"], Some(POOL)).await;
    settled(&env, 1).await;
    let pool: GpuInstancePool = Api::namespaced(env.client.clone(), support::NAMESPACE)
        .get("workers")
        .await
        .unwrap();
    support::create_namespace(&env.client, "team-b", false)
        .await
        .unwrap();
    let claimant = |namespace: &str, name: &str, owned: bool| -> GpuInstance {
        let mut machine: GpuInstance = support::object(
            name,
            serde_json::json!({"region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
                               "osImage": "ubuntu-22.04-cuda-12"}),
        );
        machine.metadata.namespace = Some(namespace.into());
        machine.metadata.labels = Some([("app".to_string(), "workers".to_string())].into());
        // Paused, so that no cloud machine of theirs muddles the pool's count in the cloud.
        machine.metadata.annotations = Some(
            [(
                gpucloud_api::PAUSED_ANNOTATION.to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        if owned {
            machine.metadata.owner_references = pool.controller_owner_ref(&()).map(|o| vec![o]);
        }
        machine
    };
    let foreign: Api<GpuInstance> = Api::namespaced(env.client.clone(), "team-b");
    foreign
        .create(
            &PostParams::default(),
            &claimant("team-b", "workers-claimed", true),
        )
        .await
        .unwrap();
    machines_api(&env)
        .create(
            &PostParams::default(),
            &claimant(support::NAMESPACE, "workers-lookalike", false),
        )
        .await
        .unwrap();

    // Scaled to 2, changed in place, then scaled to 0: the pool makes, changes and takes
    // only its own.
    kubectl
        .run(&["scale", "gpuinstancepool", "workers", "--replicas=2"])
        .await;
    settled(&env, 2).await;
    kubectl.patch_workers(r#"{"spec":{"template":{"metadata":{"labels":{"team":"vision"}},"spec":{"lifetime":{"ttl":"8h"}}}}}"#).await;
    eventually(60, "the pool's machines changed in place", || async {
        let machines = pool_machines(&env).await;
        (machines.len() == 2
            && machines.iter().all(|m| {
                m.spec.lifetime.is_some()
                    && m.labels().get("team").map(String::as_str) == Some("vision")
            }))
        .then_some(())
    })
    .await;
    kubectl
        .run(&["scale", "gpuinstancepool", "workers", "--replicas=0"])
        .await;
    settled(&env, 0).await;
    for (api, name) in [
        (&foreign, "workers-claimed"),
        (&machines_api(&env), "workers-lookalike"),
    ] {
        let machine = api.get(name).await.unwrap();
        assert!(
            machine.metadata.deletion_timestamp.is_none(),
            "{name} is being deleted by the pool"
        );
        assert_eq!(
            (
                machine.spec.lifetime.is_some(),
                machine.labels().get("team"),
                machine.annotations().get(IN_PLACE_HASH_ANNOTATION),
            ),
            (false, None, None),
            "{name} was changed by the pool"
        );
    }
}
