#![allow(clippy::unwrap_used, clippy::expect_used)]
//! GpuPolicies, enforced by the operator alone (no admission policy installed): each limit on
//! one machine refuses its create before any cloud call, naming the policy and the field; a
//! namespace at its GPU cap holds the rest of a pool (never more GPUs in the cloud than the
//! cap) until the cap is raised; racing creates in ten namespaces never pass their caps.

use crate::support::{self, Env, eventually};
use gpucloud_api::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The label the tests' policies select namespaces by.
const TIER_LABEL: &str = "example.com/gpu-tier";

fn policy(name: &str, spec: serde_json::Value) -> GpuPolicy {
    let mut spec = spec;
    spec["namespaceSelector"] = serde_json::json!({"matchLabels": {TIER_LABEL: "research"}});
    serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

async fn label(env: &Env, namespace: &str) {
    Api::<Namespace>::all(env.client.clone())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {TIER_LABEL: "research"}}})),
        )
        .await
        .unwrap();
}

async fn install(env: &Env, policy: &GpuPolicy) {
    Api::<GpuPolicy>::all(env.client.clone())
        .create(&PostParams::default(), policy)
        .await
        .unwrap();
}

async fn change(env: &Env, name: &str, spec: serde_json::Value) {
    Api::<GpuPolicy>::all(env.client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

fn machine(name: &str, spec: serde_json::Value) -> GpuInstance {
    let mut full = serde_json::json!({"region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
        "osImage": "ubuntu-22.04-cuda-12"});
    for (key, value) in spec.as_object().unwrap() {
        full[key] = value.clone();
    }
    support::object(name, full)
}

/// A pool `name` of `replicas` machines of `gpu_type` x `gpu_count` in the test namespace.
fn pool(name: &str, replicas: i32, gpu_type: &str, gpu_count: i32) -> GpuInstancePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstancePool",
        "metadata": {"name": name, "namespace": support::NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"region": "us-east-1", "gpuType": gpu_type, "gpuCount": gpu_count,
                    "osImage": "ubuntu-22.04-cuda-12"}
            }
        }
    }))
    .unwrap()
}

/// The GPUs of the cloud's machines whose names carry `namespace`'s mark.
fn gpus_in_cloud(env: &Env, namespace: &str) -> (usize, u32) {
    let mark = format!("gco-{namespace}-");
    let state = env.simulator.state();
    let machines: Vec<_> = state
        .instances
        .iter()
        .filter(|i| i.vm_name.starts_with(&mark))
        .collect();
    let gpus = machines.iter().map(|i| i.specs.gpu_count).sum();
    (machines.len(), gpus)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_machine_limit_refuses_the_create_before_any_cloud_call() {
    let env = Env::start().await;
    label(&env, support::NAMESPACE).await;
    install(
        &env,
        &policy(
            "research",
            serde_json::json!({
                "allowedGpuTypes": ["L40S"],
                "allowedRegions": ["us-east-1"],
                "allowedTiers": ["Advanced"],
                "maxGpusPerMachine": 2,
                "maxLifetime": "24h",
            }),
        ),
    )
    .await;
    // (name, what breaks a limit, the field the refusal names)
    let refused = [
        (
            "gpu-type",
            serde_json::json!({"gpuType": "H100-80G"}),
            "spec.gpuType",
        ),
        (
            "region",
            serde_json::json!({"region": "eu-west-1"}),
            "spec.region",
        ),
        ("tier", serde_json::json!({"tier": "Legacy"}), "spec.tier"),
        ("size", serde_json::json!({"gpuCount": 4}), "spec.gpuCount"),
        (
            "lifetime",
            serde_json::json!({"lifetime": {"ttl": "48h"}}),
            "spec.lifetime",
        ),
        (
            "placed",
            serde_json::json!({"gpuType": null, "region": null, "gpuCount": null,
                "placement": {"alternatives": [
                    {"gpuTypes": ["L40S"], "regions": ["us-east-1"]},
                    {"gpuTypes": ["H100-80G"], "regions": ["us-east-1"]}]}}),
            "spec.placement.alternatives[1].gpuTypes[0]",
        ),
    ];
    for (name, spec, _) in &refused {
        support::create(&env, &machine(name, spec.clone())).await;
    }
    support::create(
        &env,
        &machine("fits", serde_json::json!({"lifetime": {"ttl": "12h"}})),
    )
    .await;
    support::ready::<GpuInstance>(&env, "fits").await;
    for (name, _, field) in &refused {
        let object =
            support::condition::<GpuInstance>(&env, name, "Stalled", "True", "PolicyViolation")
                .await;
        let message = support::ready_message(&object);
        assert!(
            message.starts_with(&format!("GpuPolicy research: {field}: ")),
            "{name}: {message}"
        );
        assert!(object.cloud_status().pending_create.is_none(), "{name}");
    }
    // The one that fits is the only machine the cloud was asked for.
    assert_eq!(env.calls("CreateInstance"), 1);
    assert_eq!(gpus_in_cloud(&env, support::NAMESPACE), (1, 1));

    change(
        &env,
        "research",
        serde_json::json!({"allowedGpuTypes": ["L40S", "H100-80G"]}),
    )
    .await;
    // Lifting a limit lets the machines it held through (the placement whose second
    // alternative it held too), without touching the objects.
    support::ready::<GpuInstance>(&env, "gpu-type").await;
    support::ready::<GpuInstance>(&env, "placed").await;
    assert_eq!(env.calls("CreateInstance"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_under_a_gpu_cap_never_holds_more_gpus_than_the_cap() {
    let env = Env::start().await;
    label(&env, support::NAMESPACE).await;
    install(
        &env,
        &policy(
            "eight-gpus",
            serde_json::json!({"namespaceLimits": {"gpus": 8}}),
        ),
    )
    .await;
    let pool = pool("train", 10, "L40S", 4);
    Api::<GpuInstancePool>::namespaced(env.client.clone(), support::NAMESPACE)
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
    // Sampled through the scale-up: never more than 8 GPUs in the cloud.
    let most = Arc::new(AtomicU32::new(0));
    let api = env.api::<GpuInstance>();
    let held = eventually(90, "two machines up and eight held by the policy", || {
        let (api, env, most) = (api.clone(), &env, most.clone());
        async move {
            let (_, gpus) = gpus_in_cloud(env, support::NAMESPACE);
            most.fetch_max(gpus, Ordering::SeqCst);
            let objects = api.list(&Default::default()).await.ok()?.items;
            let reason = |o: &GpuInstance| {
                o.cloud_status()
                    .condition("Ready")
                    .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
            };
            let ready = objects
                .iter()
                .filter(|o| reason(o).is_some_and(|(s, ..)| s == "True"))
                .count();
            let held: Vec<String> = objects
                .iter()
                .filter_map(|o| {
                    reason(o)
                        .filter(|(_, r, _)| r == "PolicyLimit")
                        .map(|(.., m)| m)
                })
                .collect();
            (objects.len() == 10 && ready == 2 && held.len() == 8).then_some(held)
        }
    })
    .await;
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 8, "{most} GPUs in the cloud under a cap of 8");
    for message in &held {
        assert!(
            message.starts_with("GpuPolicy eight-gpus: spec.namespaceLimits.gpus: "),
            "{message}"
        );
    }
    let counted = eventually(30, "the policy's count", || {
        let api = Api::<GpuPolicy>::all(env.client.clone());
        async move {
            let status = api.get("eight-gpus").await.ok()?.status?;
            (status.gpus == Some(8) && status.reservations.is_empty()).then_some(status)
        }
    })
    .await;
    assert_eq!(counted.namespaces, Some(1));
    assert_eq!(counted.machines, Some(2));
    for _ in 0..10 {
        let (_, gpus) = gpus_in_cloud(&env, support::NAMESPACE);
        assert!(gpus <= 8, "{gpus} GPUs in the cloud under a cap of 8");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // A raised cap lets the rest through.
    change(
        &env,
        "eight-gpus",
        serde_json::json!({"namespaceLimits": {"gpus": 40}}),
    )
    .await;
    eventually(120, "ten machines in the cloud", || {
        let env = &env;
        async move { (gpus_in_cloud(env, support::NAMESPACE) == (10, 40)).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_creates_in_ten_namespaces_never_pass_their_caps() {
    let env = Env::start().await;
    let namespaces: Vec<String> = (0..10).map(|i| format!("race-{i}")).collect();
    for namespace in &namespaces {
        support::create_namespace(&env.client, namespace, false)
            .await
            .unwrap();
        label(&env, namespace).await;
    }
    install(
        &env,
        &policy(
            "two-each",
            serde_json::json!({"namespaceLimits": {"machines": 2}}),
        ),
    )
    .await;
    // Four creates per namespace, all forty at once.
    let client = env.client.clone();
    let creates = namespaces.iter().flat_map(|namespace| {
        let client = client.clone();
        (0..4).map(move |i| {
            let api = Api::<GpuInstance>::namespaced(client.clone(), namespace);
            let mut object = machine(&format!("m-{i}"), serde_json::json!({}));
            object.metadata.namespace = Some(namespace.clone());
            async move { api.create(&PostParams::default(), &object).await.unwrap() }
        })
    });
    futures::future::join_all(creates).await;
    let most: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    eventually(
        120,
        "two machines in every namespace, the rest held",
        || {
            let (env, namespaces, most) = (&env, &namespaces, most.clone());
            async move {
                let mut settled = true;
                for namespace in namespaces {
                    let (machines, _) = gpus_in_cloud(env, namespace);
                    {
                        let mut most = most.lock().unwrap();
                        let seen = most.entry(namespace.clone()).or_default();
                        *seen = (*seen).max(machines);
                    }
                    let objects = Api::<GpuInstance>::namespaced(env.client.clone(), namespace)
                        .list(&Default::default())
                        .await
                        .ok()?
                        .items;
                    let held = objects
                        .iter()
                        .filter(|o| {
                            o.cloud_status()
                                .condition("Ready")
                                .is_some_and(|c| c.reason == "PolicyLimit")
                        })
                        .count();
                    settled &= machines == 2 && held == 2;
                }
                settled.then_some(())
            }
        },
    )
    .await;
    for (namespace, machines) in most.lock().unwrap().iter() {
        assert!(
            *machines <= 2,
            "{namespace}: {machines} machines under a cap of 2"
        );
    }
    assert_eq!(env.calls("CreateInstance"), 20);
}

/// Waits until the cloud shows machine `id` stopped (at the policy's lifetime).
async fn stopped_within(env: &Env, id: &str, seconds: u64) {
    eventually(
        seconds,
        "the machine stopped at the policy's lifetime",
        || async {
            let state = env.simulator.state();
            state
                .instances
                .iter()
                .find(|i| i.instance_id == id)
                .filter(|i| i.status == gpucloud_cloud::model::InstanceStatus::Shutoff)
                .map(|_| ())
        },
    )
    .await;
}

/// The machine says nothing of a policy's `maxLifetime`, so no timer of its own wakes it
/// then: the plan that reads the policy asks for the look. With the resync ten minutes away,
/// the machine is stopped within seconds of its end all the same; before, its status shows
/// the expiry and a Warning names the policy, as for a lifetime of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policys_lifetime_stops_the_machine_on_time_not_at_the_resync() {
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let mut config = support::test_config(&env.simulator);
    config.reconcile.observe.resync = std::time::Duration::from_secs(600);
    env.start_operator(config);
    label(&env, support::NAMESPACE).await;
    install(
        &env,
        &policy("short", serde_json::json!({"maxLifetime": "10s"})),
    )
    .await;
    support::create(&env, &machine("capped", serde_json::json!({}))).await;
    let id = support::ready_id::<GpuInstance>(&env, "capped").await;
    let object = env.api::<GpuInstance>().get("capped").await.unwrap();
    let created = object.metadata.creation_timestamp.clone().unwrap().0;
    let expires_at = object.status.unwrap().cloud.expires_at.map(|t| t.0);
    assert_eq!(
        expires_at,
        Some(
            created
                .checked_add(std::time::Duration::from_secs(10))
                .unwrap()
        )
    );
    let warned = eventually(10, "a Warning of the policy's expiry", || async {
        let warned = support::events_about(&env, "capped", "ExpiresSoon").await;
        (!warned.is_empty()).then_some(warned)
    })
    .await;
    assert_eq!(warned.len(), 1, "{warned:?}");
    let note = warned[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("the longest lifetime GpuPolicy short allows"),
        "{note}"
    );
    stopped_within(&env, &id, 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_without_a_lifetime_gets_the_policys_and_cannot_shed_it() {
    let env = Env::start().await;
    label(&env, support::NAMESPACE).await;
    install(
        &env,
        &policy("short", serde_json::json!({"maxLifetime": "4s"})),
    )
    .await;
    // No lifetime of its own; a policy's maxLifetime applies all the same, and stops it.
    support::create(&env, &machine("no-lifetime", serde_json::json!({}))).await;
    let id = support::ready_id::<GpuInstance>(&env, "no-lifetime").await;
    stopped_within(&env, &id, 60).await;
    let message = eventually(30, "the Ready message naming the policy", || {
        let api = env.api::<GpuInstance>();
        async move {
            let object = api.get("no-lifetime").await.ok()?;
            let message = support::ready_message(&object);
            message.contains("GpuPolicy short").then_some(message)
        }
    })
    .await;
    assert!(message.contains("lifetime ended"), "{message}");
    // Asking for it to run changes nothing while the policy stands.
    env.api::<GpuInstance>()
        .patch(
            "no-lifetime",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"powerState": "Running"}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let state = env.simulator.state();
    let machine = state
        .instances
        .iter()
        .find(|i| i.instance_id == id)
        .unwrap();
    assert_eq!(
        machine.status,
        gpucloud_cloud::model::InstanceStatus::Shutoff
    );
    assert_eq!(env.calls("StartInstance"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_asking_for_more_replicas_than_the_policy_allows_makes_no_machine() {
    let env = Env::start().await;
    label(&env, support::NAMESPACE).await;
    install(
        &env,
        &policy("small-pools", serde_json::json!({"maxPoolReplicas": 2})),
    )
    .await;
    let pools = Api::<GpuInstancePool>::namespaced(env.client.clone(), support::NAMESPACE);
    let pool = pool("big", 3, "L40S", 1);
    pools.create(&PostParams::default(), &pool).await.unwrap();
    let message = eventually(30, "the pool refused by the policy", || {
        let pools = pools.clone();
        async move {
            let pool = pools.get("big").await.ok()?;
            let stalled = pool
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Stalled" && c.status == "True")?;
            (stalled.reason == "PolicyViolation").then_some(stalled.message)
        }
    })
    .await;
    assert!(
        message.starts_with("GpuPolicy small-pools: spec.replicas: 3 replicas"),
        "{message}"
    );
    assert!(
        env.api::<GpuInstance>()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(env.calls("CreateInstance"), 0);

    pools
        .patch(
            "big",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    eventually(60, "two machines in the cloud", || {
        let env = &env;
        async move { (gpus_in_cloud(env, support::NAMESPACE).0 == 2).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_cap_for_namespaces_without_a_budget_gives_way_to_a_budget() {
    let env = Env::start().await;
    label(&env, support::NAMESPACE).await;
    // One L40S (1.10/h) fits, two do not.
    install(
        &env,
        &policy(
            "default-cap",
            serde_json::json!({"namespaceLimits": {"hourlyRateWithoutBudget": 1.5}}),
        ),
    )
    .await;
    support::create(&env, &machine("first", serde_json::json!({}))).await;
    support::ready::<GpuInstance>(&env, "first").await;
    support::create(&env, &machine("second", serde_json::json!({}))).await;
    let held =
        support::condition::<GpuInstance>(&env, "second", "Ready", "False", "PolicyLimit").await;
    let message = support::ready_message(&held);
    assert!(
        message
            .starts_with("GpuPolicy default-cap: spec.namespaceLimits.hourlyRateWithoutBudget: "),
        "{message}"
    );
    assert_eq!(env.calls("CreateInstance"), 1);

    // A Budget of the namespace's own replaces the default cap.
    let budget: Budget = serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "Budget",
        "metadata": {"name": "team", "namespace": support::NAMESPACE},
        "spec": {"maxHourlyRate": 10.0},
    }))
    .unwrap();
    Api::<Budget>::namespaced(env.client.clone(), support::NAMESPACE)
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
    support::ready::<GpuInstance>(&env, "second").await;
    assert_eq!(env.calls("CreateInstance"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_from_before_a_policy_are_reported_never_stopped() {
    let env = Env::start().await;
    label(&env, support::NAMESPACE).await;
    support::create(
        &env,
        &machine("older", serde_json::json!({"gpuType": "H100-80G"})),
    )
    .await;
    let id = support::ready_id::<GpuInstance>(&env, "older").await;
    install(
        &env,
        &policy(
            "l40s-only",
            serde_json::json!({"allowedGpuTypes": ["L40S"]}),
        ),
    )
    .await;
    let status = eventually(30, "the machine reported outside the policy", || {
        let api = Api::<GpuPolicy>::all(env.client.clone());
        async move {
            let status = api.get("l40s-only").await.ok()?.status?;
            (!status.outside.is_empty()).then_some(status)
        }
    })
    .await;
    assert_eq!(status.outside.len(), 1, "{:?}", status.outside);
    assert!(
        status.outside[0].starts_with(&format!("{}/older: GPU type H100-80G", support::NAMESPACE)),
        "{:?}",
        status.outside
    );
    let exceeded = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Exceeded")
        .unwrap();
    assert_eq!(
        (exceeded.status.as_str(), exceeded.reason.as_str()),
        ("True", "MachinesOutsidePolicy")
    );
    let state = env.simulator.state();
    let machine = state
        .instances
        .iter()
        .find(|i| i.instance_id == id)
        .unwrap();
    assert_eq!(
        machine.status,
        gpucloud_cloud::model::InstanceStatus::Active
    );
    assert_eq!(env.calls("StopInstance") + env.calls("DeleteInstance"), 0);
    support::wait_for_events(&env, "older", &["OutsidePolicy"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_would_pass_a_rate_cap_waits_for_room() {
    let env = Env::start().await;
    label(&env, support::NAMESPACE).await;
    support::create(&env, &machine("running", serde_json::json!({}))).await;
    support::create(
        &env,
        &machine("off", serde_json::json!({"powerState": "Stopped"})),
    )
    .await;
    support::ready::<GpuInstance>(&env, "running").await;
    let off = support::ready_id::<GpuInstance>(&env, "off").await;
    // One L40S running (1.10/h) and one stopped fit; two running do not.
    install(
        &env,
        &policy(
            "cap",
            serde_json::json!({"namespaceLimits": {"hourlyRate": 1.5}}),
        ),
    )
    .await;
    let starts = env.calls("StartInstance");
    env.api::<GpuInstance>()
        .patch(
            "off",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"powerState": "Running"}})),
        )
        .await
        .unwrap();
    let held =
        support::condition::<GpuInstance>(&env, "off", "Stalled", "True", "PolicyLimit").await;
    let message = support::ready_message(&held);
    assert!(
        message.starts_with("GpuPolicy cap: spec.namespaceLimits.hourlyRate: "),
        "{message}"
    );
    assert_eq!(env.calls("StartInstance"), starts);
    // Room made: the start goes through.
    support::delete_and_wait::<GpuInstance>(&env, "running").await;
    eventually(60, "the held machine started", || {
        let (env, off) = (&env, off.clone());
        async move {
            env.simulator
                .state()
                .instances
                .iter()
                .any(|i| {
                    i.instance_id == off
                        && i.status == gpucloud_cloud::model::InstanceStatus::Active
                })
                .then_some(())
        }
    })
    .await;
}

/// The pool of the report that asked for GpuPolicy: 100 replicas of H100-80G x 8 in a
/// namespace capped at 8 GPUs. At most 8 GPUs ever exist in the cloud, the other 99 machines
/// wait naming the policy, and a raised cap lets exactly as many more through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_replica_h100_pool_under_an_eight_gpu_cap_holds_eight_gpus() {
    let env = Env::start().await;
    label(&env, support::NAMESPACE).await;
    install(
        &env,
        &policy(
            "h100-cap",
            serde_json::json!({"namespaceLimits": {"gpus": 8}}),
        ),
    )
    .await;
    let pool = pool("h100", 100, "H100-80G", 8);
    Api::<GpuInstancePool>::namespaced(env.client.clone(), support::NAMESPACE)
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
    let most = Arc::new(AtomicU32::new(0));
    let settled = |machines: usize, cap: u32| {
        let (api, env, most) = (env.api::<GpuInstance>(), &env, most.clone());
        async move {
            let (_, gpus) = gpus_in_cloud(env, support::NAMESPACE);
            most.fetch_max(gpus, Ordering::SeqCst);
            let objects = api.list(&Default::default()).await.ok()?.items;
            let ready = |o: &&GpuInstance| {
                o.cloud_status()
                    .condition("Ready")
                    .is_some_and(|c| c.status == "True")
            };
            let held = objects
                .iter()
                .filter(|o| {
                    o.cloud_status().condition("Ready").is_some_and(|c| {
                        c.reason == "PolicyLimit"
                            && c.message
                                .starts_with("GpuPolicy h100-cap: spec.namespaceLimits.gpus: ")
                    })
                })
                .count();
            let up = objects.iter().filter(ready).count();
            (objects.len() == 100
                && up == machines
                && held == 100 - machines
                && gpus_in_cloud(env, support::NAMESPACE) == (machines, cap))
                .then_some(())
        }
    };
    eventually(120, "one machine up and 99 held", || settled(1, 8)).await;
    let seen = most.load(Ordering::SeqCst);
    assert!(seen <= 8, "{seen} GPUs in the cloud under a cap of 8");

    change(
        &env,
        "h100-cap",
        serde_json::json!({"namespaceLimits": {"gpus": 16}}),
    )
    .await;
    eventually(120, "two machines up and 98 held", || settled(2, 16)).await;
    let seen = most.load(Ordering::SeqCst);
    assert!(seen <= 16, "{seen} GPUs in the cloud under a cap of 16");
    assert_eq!(env.calls("CreateInstance"), 2);
}
