#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A create whose outcome the operator never learns must not become two billed machines:
//! lost responses, lists that lag behind writes, and an operator killed mid-create.

use crate::support;

use gpucloud_api::*;
use gpucloud_simulator::{DropMode, FaultPlan, SimulatorConfig};
use kube::ResourceExt;
use kube::api::PostParams;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{Env, eventually, test_config};

fn instance(name: &str) -> GpuInstance {
    GpuInstance::new(
        name,
        serde_json::from_value(serde_json::json!({
            "region": "us-east-1", "gpuType": "H100-80G", "osImage": "ubuntu-22.04-cuda-12",
        }))
        .unwrap(),
    )
}

fn dropping_creates(mode: DropMode) -> FaultPlan {
    FaultPlan {
        act_then_drop: BTreeMap::from([
            ("CreateInstance".to_string(), 1.0),
            ("CreateSshKey".to_string(), 1.0),
        ]),
        drop_mode: mode,
        ..FaultPlan::default()
    }
}

/// The account holds exactly one machine, made by one create call and recorded on `vm`.
fn assert_one_machine_made_by_one_call(env: &Env, vm: &GpuInstance) {
    let state = env.simulator.state();
    let machines: Vec<_> = state
        .instances
        .iter()
        .map(|i| (&i.instance_id, &i.vm_name))
        .collect();
    assert_eq!(machines.len(), 1, "duplicates: {machines:?}");
    assert_eq!(env.calls("CreateInstance"), 1);
    assert_eq!(
        vm.cloud_status().external_id.as_deref(),
        Some(state.instances[0].instance_id.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_create_responses_behind_a_lagging_list_yield_one_resource_each() {
    let simulator = SimulatorConfig {
        faults: dropping_creates(DropMode::Delay {
            delay: Duration::from_secs(60),
        }),
        // Longer than a lost call plus the first backoff, so the retry finds nothing listed yet.
        list_lag: Duration::from_secs(4),
        ..SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    let mut config = test_config(&env.simulator);
    config.cloud.timeout = Duration::from_millis(700);
    config.reconcile.settle_window = Duration::from_secs(6);
    env.start_operator(config);

    env.api::<SshKey>()
        .create(
            &PostParams::default(),
            &SshKey::new("k", serde_json::from_value(serde_json::json!({})).unwrap()),
        )
        .await
        .unwrap();
    for name in ["a", "b", "c"] {
        env.api::<GpuInstance>()
            .create(&PostParams::default(), &instance(name))
            .await
            .unwrap();
    }
    for name in ["a", "b", "c"] {
        let vm = support::ready::<GpuInstance>(&env, name).await;
        assert!(vm.cloud_status().pending_create.is_none());
    }
    let state = env.simulator.state();
    assert_eq!(
        state.instances.len(),
        3,
        "duplicates: {:?}",
        state
            .instances
            .iter()
            .map(|i| &i.vm_name)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        env.calls("CreateInstance"),
        3,
        "a create whose response was lost was sent again"
    );
    assert_eq!(state.ssh_keys.len(), 1);
    let mut names: Vec<_> = state.instances.iter().map(|i| i.vm_name.clone()).collect();
    names.dedup();
    assert_eq!(names.len(), 3);
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_the_cloud_performs_after_the_client_gave_up_is_adopted_not_repeated() {
    // Each create acts 6 s after it arrives; the client gives up after 4 s. Counted from the
    // intent, the 3 s settle window has passed when the reconcile after the timeout looks, so a
    // second create would be sent before the first lands; counted from the end of the
    // unanswered call, the window ends at 7 s and a list shows the first.
    let simulator = SimulatorConfig {
        faults: FaultPlan {
            latency_ms_per_operation: BTreeMap::from([("CreateInstance".to_string(), 6000)]),
            ..FaultPlan::default()
        },
        ..SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    let mut config = test_config(&env.simulator);
    config.cloud.timeout = Duration::from_secs(4);
    config.reconcile.settle_window = Duration::from_secs(3);
    env.start_operator(config);
    env.api::<GpuInstance>()
        .create(&PostParams::default(), &instance("late"))
        .await
        .unwrap();
    let vm = support::ready::<GpuInstance>(&env, "late").await;
    // A second create sent before Ready would land up to 6 s later.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_one_machine_made_by_one_call(&env, &vm);
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_killed_mid_create_is_replaced_without_a_duplicate() {
    let simulator = SimulatorConfig {
        faults: dropping_creates(DropMode::Delay {
            delay: Duration::from_secs(60),
        }),
        ..SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    let mut config = test_config(&env.simulator);
    // The first operator waits on the create's answer until it is killed.
    config.cloud.timeout = Duration::from_secs(120);
    env.start_operator(config);
    env.api::<GpuInstance>()
        .create(&PostParams::default(), &instance("crash"))
        .await
        .unwrap();
    eventually(30, "create reached the cloud", || async {
        (env.simulator.state().instances.len() == 1).then_some(())
    })
    .await;
    env.kill_operator().await;
    let pending = env.api::<GpuInstance>().get("crash").await.unwrap();
    // A first create's intent is written with the finalizer, in its annotation.
    let recorded = gpucloud_controller::reconcile::recorded_status(&pending);
    assert!(
        recorded.pending_create.is_some() && pending.finalizers().contains(&FINALIZER.to_string()),
        "the intent was recorded, with the finalizer, before the call"
    );
    assert!(
        pending.status.is_none(),
        "the intent and the finalizer were one write, and no status write came before the call: {:?}",
        pending.status
    );
    assert!(
        recorded.external_id.is_none(),
        "the crash came before the id was recorded"
    );

    env.simulator.set_faults(FaultPlan::default());
    env.start_operator(test_config(&env.simulator));
    let vm = support::ready::<GpuInstance>(&env, "crash").await;
    assert_one_machine_made_by_one_call(&env, &vm);
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_creates_that_never_acted_are_retried_until_one_succeeds() {
    let simulator = SimulatorConfig {
        faults: FaultPlan {
            error_rate_per_operation: BTreeMap::from([("CreateInstance".to_string(), 0.6)]),
            ..FaultPlan::default()
        },
        seed: 7,
        ..SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    let mut config = test_config(&env.simulator);
    config.reconcile.settle_window = Duration::from_millis(500);
    env.start_operator(config);
    for name in ["x", "y"] {
        env.api::<GpuInstance>()
            .create(&PostParams::default(), &instance(name))
            .await
            .unwrap();
    }
    for name in ["x", "y"] {
        support::ready_within::<GpuInstance>(&env, name, 90).await;
    }
    assert_eq!(env.simulator.state().instances.len(), 2);
    env.stop_operator().await;
}
