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
    let recorded = gpucloud_controller::flow::recorded::recorded_status(&pending);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_waiting_for_a_list_while_lists_fail_is_woken_by_a_list_not_a_timer() {
    let mut env = Env::without_operator(SimulatorConfig::default()).await;
    let mut config = test_config(&env.simulator);
    // Nothing is due in the test's time on the resync's timer alone.
    config.reconcile.observe.resync = Duration::from_secs(120);
    let settle_window = config.reconcile.settle_window;
    let metrics = config.metrics.clone();
    env.start_operator(config);
    // The account's machines have been listed once.
    env.api::<GpuInstance>()
        .create(&PostParams::default(), &instance("listed"))
        .await
        .unwrap();
    support::ready::<GpuInstance>(&env, "listed").await;

    // From here on every list fails; the next machine's create is answered, so only a list
    // can show it, and until one does its object waits.
    env.simulator.set_faults(FaultPlan {
        error_rate_per_operation: BTreeMap::from([("ListInstances".to_string(), 1.0)]),
        ..FaultPlan::default()
    });
    env.api::<GpuInstance>()
        .create(&PostParams::default(), &instance("waiting"))
        .await
        .unwrap();
    eventually(30, "the second machine's create", || async {
        (env.calls("CreateInstance") >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(settle_window + Duration::from_secs(1)).await;
    let before = support::reconciles(&metrics, "GpuInstance");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during = support::reconciles(&metrics, "GpuInstance") - before;
    assert!(
        during <= 2.0,
        "{during} reconciles of one waiting create in 4 s of failing lists"
    );

    // The first list that comes shows the machine; it is recorded, never created again.
    env.simulator.set_faults(FaultPlan::default());
    let vm = support::ready_within::<GpuInstance>(&env, "waiting", 15).await;
    assert_eq!(env.simulator.state().instances.len(), 2);
    assert_eq!(env.calls("CreateInstance"), 2);
    assert!(vm.cloud_status().external_id.is_some());
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_did_not_happen_is_sent_again_once_a_list_after_its_window_comes() {
    // Each list takes 3 s, longer than the 2 s settle window: when the window has passed, the
    // lists sent since are still under way, and the object waits for the first to come. The
    // create is refused with a 500 before acting, so that list shows nothing of it and tells
    // of no change: only the wait wakes the object, not the resync (120 s).
    let simulator = SimulatorConfig {
        faults: FaultPlan {
            error_rate_per_operation: BTreeMap::from([("CreateInstance".to_string(), 1.0)]),
            ..FaultPlan::default()
        },
        ..SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    let mut config = test_config(&env.simulator);
    config.reconcile.observe.resync = Duration::from_secs(120);
    env.start_operator(config);
    env.api::<GpuInstance>()
        .create(&PostParams::default(), &instance("again"))
        .await
        .unwrap();
    eventually(30, "the create was answered 500", || async {
        (env.calls("CreateInstance") >= 1).then_some(())
    })
    .await;
    env.simulator.set_faults(FaultPlan {
        latency_ms_per_operation: BTreeMap::from([("ListInstances".to_string(), 3000)]),
        ..FaultPlan::default()
    });
    eventually(30, "the create sent again", || async {
        (env.calls("CreateInstance") >= 2).then_some(())
    })
    .await;
    let vm = support::ready::<GpuInstance>(&env, "again").await;
    assert_eq!(env.simulator.state().instances.len(), 1);
    assert_eq!(env.calls("CreateInstance"), 2);
    assert!(vm.cloud_status().external_id.is_some());
    env.stop_operator().await;
}

/// A create answered with a server error every time: the object shows the cloud's answer in
/// its Ready condition while it waits to learn whether the call was carried out, and the
/// account is not held as down for it: another kind's creates go on meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_failing_with_a_server_error_shows_it_and_holds_no_other_create() {
    let simulator = SimulatorConfig {
        faults: FaultPlan {
            error_rate_per_operation: BTreeMap::from([("CreateVolume".to_string(), 1.0)]),
            ..FaultPlan::default()
        },
        ..SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    env.start_operator(test_config(&env.simulator));
    let volume: Volume = support::object(
        "scratch",
        serde_json::json!({"region": "us-east-1", "sizeGb": 10}),
    );
    support::create(&env, &volume).await;
    eventually(30, "two creates answered 500", || async {
        (env.calls("CreateVolume") >= 2).then_some(())
    })
    .await;
    support::create(&env, &instance("worker")).await;
    support::ready_within::<GpuInstance>(&env, "worker", 15).await;

    let api = env.api::<Volume>();
    let shown = eventually(30, "the 500 in the Volume's Ready condition", || {
        let api = api.clone();
        async move {
            let volume = api.get("scratch").await.ok()?;
            let ready = volume.cloud_status().condition("Ready")?.clone();
            (ready.status == "False"
                && ready.reason == "CloudUnavailable"
                && ready.message.contains("server error (500)"))
            .then_some(ready)
        }
    })
    .await;
    assert!(shown.message.contains("CreateVolume"), "{}", shown.message);
    // And it stays shown through the waits for the list between the attempts, and through
    // the next attempt's own `Creating`.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let volume = api.get("scratch").await.unwrap();
        let ready = volume.cloud_status().condition("Ready").unwrap().clone();
        assert!(
            ready.message.contains("server error (500)"),
            "{}: {}",
            ready.reason,
            ready.message
        );
    }
    env.stop_operator().await;
}
