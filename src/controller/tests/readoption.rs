#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A starting operator re-adopts settled objects from its lists and reconciles at once only
//! what is not settled or changed in the cloud while no operator ran (`readopt.rs`).

use crate::support;

use futures::StreamExt;
use gpucloud_api::*;
use std::time::Duration;
use support::{Env, cloud_client, create, eventually, ready, reconciles, test_config};

const KEYS: usize = 5;

/// A key the operator generates (its pair kept in an owned Secret).
fn key(n: usize) -> SshKey {
    SshKey::new(
        &format!("key-{n}"),
        serde_json::from_value(serde_json::json!({})).unwrap(),
    )
}

fn instance(name: &str) -> GpuInstance {
    GpuInstance::new(
        name,
        serde_json::from_value(serde_json::json!({
            "region": "us-east-1", "gpuType": "H100-80G", "gpuCount": 1,
            "osImage": "ubuntu-22.04-cuda-12",
        }))
        .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reconciles_only_what_is_not_as_the_status_recorded_it() {
    let mut env = Env::start().await;
    for n in 0..KEYS {
        create(&env, &key(n)).await;
    }
    create(&env, &instance("gpu")).await;
    for n in 0..KEYS {
        ready::<SshKey>(&env, &format!("key-{n}")).await;
    }
    let vm = ready::<GpuInstance>(&env, "gpu").await;
    env.stop_operator().await;

    // While no operator runs, the machine is stopped in the cloud.
    cloud_client(&env)
        .stop_instance(&vm.cloud_status().external_id.unwrap())
        .await
        .unwrap();

    // No settled object comes due during the test.
    let mut config = test_config(&env.simulator);
    config.reconcile.observe.resync = Duration::from_secs(600);
    let metrics = config.metrics.clone();
    env.start_operator(config);

    // The machine's state differs from its status: reconciled at once, and started again.
    eventually(30, "the stopped machine started again", || async {
        (env.calls("StartInstance") >= 1).then_some(())
    })
    .await;
    ready::<GpuInstance>(&env, "gpu").await;
    // Counted when the reconcile that started it returns, which may be after the call.
    eventually(10, "the machine's reconcile counted", || async {
        (reconciles(&metrics, "GpuInstance") >= 1.0).then_some(())
    })
    .await;
    // The keys are as their status recorded them: re-adopted, not reconciled.
    assert_eq!(reconciles(&metrics, "SshKey"), 0.0, "{}", metrics.encode());
    env.stop_operator().await;

    // With the usual interval, each re-adopted object is looked at within one interval.
    let config = test_config(&env.simulator);
    let resync = config.reconcile.observe.resync;
    let metrics = config.metrics.clone();
    env.start_operator(config);
    tokio::time::sleep(resync / 4).await;
    let early = reconciles(&metrics, "SshKey");
    assert!(
        early < KEYS as f64,
        "{early} reconciles a quarter interval in"
    );
    eventually(10, "every key rechecked", || async {
        (reconciles(&metrics, "SshKey") >= KEYS as f64).then_some(())
    })
    .await;
    // Nothing was written to the cloud by either start but the one start of the machine.
    assert_eq!(env.calls("StartInstance"), 1);
    assert_eq!(env.calls("CreateSshKey"), KEYS as u64);
    env.stop_operator().await;
}

/// After `410 Gone` a watch lists again, and an object created meanwhile comes only in that
/// list, which the controller's store takes in at the list's end: each such object is
/// reconciled once the list is in, not dropped as unknown to the store. The list is long
/// (paused keys, which cost one status write each), so the controller takes triggers while it
/// is still being read, as it does at scale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_created_while_a_watch_lists_again_are_reconciled() {
    const PAUSED: usize = 1_500;
    let mut env = Env::without_operator(Default::default()).await;
    // Nothing but the watch's triggers reconciles during the test.
    let mut config = test_config(&env.simulator);
    config.reconcile.observe.resync = Duration::from_secs(600);
    env.start_operator(config);
    futures::stream::iter(0..PAUSED)
        .for_each_concurrent(16, |n| {
            let mut paused = key(n);
            paused.metadata.name = Some(format!("paused-{n:04}"));
            paused.metadata.annotations =
                Some([(PAUSED_ANNOTATION.to_string(), "true".to_string())].into());
            let env = &env;
            async move { create(env, &paused).await }
        })
        .await;
    create(&env, &key(0)).await;
    ready::<SshKey>(&env, "key-0").await;

    // Every watch ends with 410 and lists again after its backoff (most of a second): keys
    // created over two seconds from now fall before, in and after that list.
    env.apiserver.compact();
    for n in 1..=KEYS * 4 {
        create(&env, &key(n)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for n in 1..=KEYS * 4 {
        support::ready_within::<SshKey>(&env, &format!("key-{n}"), 30).await;
    }
}
