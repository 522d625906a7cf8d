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

/// A starting controller asks each account's first cloud list as soon as it sees the account
/// in the objects' list, all at once, not one account after another as its check reaches them:
/// with a slow list, three accounts one after another would take three lists' time before the
/// last account's objects were even looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_lists_every_account_at_once() {
    use gpucloud_cloud::model::InstanceStatus;
    const LIST: Duration = Duration::from_secs(3);
    let keys = [
        "sim-key",
        "second-account-key-4a1b",
        "third-account-key-7c2d",
    ];
    let simulator = gpucloud_simulator::SimulatorConfig {
        api_keys: vec![keys[0].into()],
        other_accounts: vec![vec![keys[1].into()], vec![keys[2].into()]],
        faults: gpucloud_simulator::FaultPlan {
            latency_ms_per_operation: [("ListInstances".to_string(), LIST.as_millis() as u64)]
                .into(),
            ..gpucloud_simulator::FaultPlan::default()
        },
        ..gpucloud_simulator::SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    let mut config = test_config(&env.simulator);
    config.cloud.timeout = LIST * 3;
    env.start_operator(config.clone());
    for (n, key) in keys.iter().enumerate() {
        let secret = format!("account-{n}");
        env.put_secret(support::NAMESPACE, &secret, key).await;
        let mut machine = instance(&format!("gpu-{n}"));
        machine.spec.managed.credentials_secret_ref = Some(SecretKeyRef {
            name: secret,
            key: "apiKey".into(),
        });
        create(&env, &machine).await;
    }
    for n in 0..keys.len() {
        support::ready_within::<GpuInstance>(&env, &format!("gpu-{n}"), 60).await;
    }
    env.stop_operator().await;

    // While no operator runs, each account's machine is stopped in the cloud.
    let states = |env: &Env| -> Vec<InstanceStatus> {
        (0..keys.len())
            .map(|account| {
                let machines = env.simulator.account_state(account).unwrap().instances;
                assert_eq!(machines.len(), 1, "account {account}: {machines:?}");
                machines[0].status.clone()
            })
            .collect()
    };
    for (account, key) in keys.iter().enumerate() {
        let client = support::cloud_client_with_key(&env, key);
        let machine = &env.simulator.account_state(account).unwrap().instances[0];
        client.stop_instance(&machine.instance_id).await.unwrap();
    }
    eventually(30, "every machine stopped", || async {
        states(&env)
            .iter()
            .all(|s| *s == InstanceStatus::Shutoff)
            .then_some(())
    })
    .await;

    config.reconcile.observe.resync = Duration::from_secs(600);
    let restarted = std::time::Instant::now();
    env.start_operator(config);
    eventually(60, "every stopped machine started again", || async {
        states(&env)
            .iter()
            .all(|s| *s != InstanceStatus::Shutoff)
            .then_some(())
    })
    .await;
    // The last account's machine is looked at after its first list, which is asked with the
    // others' (one list's time); one after another it would come after three.
    let took = restarted.elapsed();
    assert!(
        took < LIST * 5 / 2,
        "the machines were started {took:?} after the restart, with lists of {LIST:?}"
    );
    env.stop_operator().await;
}
