#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every kind declared in one go, each referring object created before the object it refers
//! to, all `Ready`; then everything deleted in one go, leaving the account empty and no
//! billing running.

use crate::support;

use gpucloud_api::*;
use kube::api::DeleteParams;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_declared_at_once_becomes_ready_and_deletes_to_an_empty_account() {
    let mut env = Env::start().await;
    // Referrers first, referenced objects last: the order a `kubectl apply -f dir/` may take.
    declare_every_kind_referrers_first(&env).await;

    for name in ["trainer", "resumed", "from-image"] {
        ready::<GpuInstance>(&env, name).await;
    }
    ready::<SshKey>(&env, "dev-key").await;
    let volume: Volume = ready(&env, "dataset").await;
    let firewall: Firewall = ready(&env, "ssh-only").await;
    ready::<Snapshot>(&env, "saved").await;
    ready::<Image>(&env, "golden").await;
    let trainer: GpuInstance = ready(&env, "trainer").await;
    let trainer_id = trainer.cloud_status().external_id.unwrap();
    assert_eq!(
        volume.status.unwrap().attached_instance_id.as_deref(),
        Some(trainer_id.as_str())
    );
    assert_eq!(
        firewall.status.unwrap().attached_instance_ids,
        vec![trainer_id]
    );
    let cloud = env.simulator.state();
    assert_eq!(cloud.instances.len(), 3);
    assert_eq!(cloud.ssh_keys.len(), 1);
    assert_eq!(cloud.snapshots.len(), 1);
    assert_eq!(cloud.images.len(), 1);
    assert_eq!(cloud.firewalls.len(), 1);
    assert_eq!(data_volumes(&env).len(), 1);

    // Everything at once, in no particular order.
    delete_everything_at_once(&env).await;

    let cloud = env.simulator.state();
    assert!(cloud.instances.is_empty(), "{:?}", cloud.instances);
    assert!(cloud.volumes.is_empty(), "{:?}", cloud.volumes);
    assert!(cloud.snapshots.is_empty(), "{:?}", cloud.snapshots);
    assert!(cloud.images.is_empty(), "{:?}", cloud.images);
    assert!(cloud.firewalls.is_empty(), "{:?}", cloud.firewalls);
    assert!(cloud.ssh_keys.is_empty(), "{:?}", cloud.ssh_keys);
    // Billing stopped: every record is closed.
    assert_eq!(cloud.instance_billing.len(), 3);
    assert!(cloud.instance_billing.iter().all(|b| b.end_time.is_some()));
    assert!(!cloud.volume_billing.is_empty());
    assert!(cloud.volume_billing.iter().all(|b| b.status == "deleted"));
    assert!(cloud.snapshot_billing.iter().all(|b| b.status == "ended"));
    let balance = env.simulator.state().balance;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(
        env.simulator.state().balance,
        balance,
        "nothing is billed any more"
    );
    env.stop_operator().await;
}

/// Every kind, each referring object created before the object it refers to: the order a
/// `kubectl apply -f dir/` may take.
async fn declare_every_kind_referrers_first(env: &Env) {
    create::<GpuInstance>(
        env,
        &object(
            "from-image",
            serde_json::json!({"region": "us-east-1", "gpuType": "A100-80G",
                "imageRef": {"name": "golden"}, "sshKeyRefs": [{"name": "dev-key"}]}),
        ),
    )
    .await;
    create::<Image>(
        env,
        &object(
            "golden",
            serde_json::json!({"snapshotRef": {"name": "saved"}}),
        ),
    )
    .await;
    create::<GpuInstance>(
        env,
        &object(
            "resumed",
            serde_json::json!({"region": "us-east-1", "source": {"snapshotRef": {"name": "saved"}}}),
        ),
    )
    .await;
    create::<Snapshot>(
        env,
        &object(
            "saved",
            serde_json::json!({"instanceRef": {"name": "trainer"}}),
        ),
    )
    .await;
    create::<Firewall>(
        env,
        &object(
            "ssh-only",
            serde_json::json!({
                "region": "us-east-1",
                "rules": [{"direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
                    "remoteIpPrefix": "203.0.113.0/24", "portRangeMin": 22, "portRangeMax": 22}],
                "instanceSelector": {"matchLabels": {"team": "a"}},
            }),
        ),
    )
    .await;
    create::<Volume>(
        env,
        &object(
            "dataset",
            serde_json::json!({"region": "us-east-1", "sizeGb": 50, "instanceRef": {"name": "trainer"}}),
        ),
    )
    .await;
    let mut trainer: GpuInstance = object(
        "trainer",
        serde_json::json!({"region": "us-east-1", "gpuType": "H100-80G",
            "osImage": "ubuntu-22.04-cuda-12", "sshKeyRefs": [{"name": "dev-key"}]}),
    );
    trainer.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
    create(env, &trainer).await;
    create::<SshKey>(env, &object("dev-key", serde_json::json!({}))).await;
}

/// Deletes every object at once, in no particular order, and waits until each is gone.
async fn delete_everything_at_once(env: &Env) {
    let params = DeleteParams::default();
    env.api::<Snapshot>()
        .delete("saved", &params)
        .await
        .unwrap();
    env.api::<SshKey>()
        .delete("dev-key", &params)
        .await
        .unwrap();
    for name in ["trainer", "resumed", "from-image"] {
        env.api::<GpuInstance>()
            .delete(name, &params)
            .await
            .unwrap();
    }
    env.api::<Firewall>()
        .delete("ssh-only", &params)
        .await
        .unwrap();
    env.api::<Image>().delete("golden", &params).await.unwrap();
    env.api::<Volume>()
        .delete("dataset", &params)
        .await
        .unwrap();
    for name in ["trainer", "resumed", "from-image"] {
        gone::<GpuInstance>(env, name).await;
    }
    gone::<Snapshot>(env, "saved").await;
    gone::<SshKey>(env, "dev-key").await;
    gone::<Firewall>(env, "ssh-only").await;
    gone::<Image>(env, "golden").await;
    gone::<Volume>(env, "dataset").await;
}

/// With the periodic resync far away, objects waiting for a reference can only make progress
/// promptly if the watch on the referenced kind wakes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_objects_are_woken_by_watches_not_by_polling() {
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let mut config = test_config(&env.simulator);
    config.reconcile.observe.resync = std::time::Duration::from_secs(120);
    env.start_operator(config);

    create::<Volume>(
        &env,
        &object(
            "vol",
            serde_json::json!({"region": "us-east-1", "sizeGb": 5, "instanceRef": {"name": "vm"}}),
        ),
    )
    .await;
    create::<Firewall>(
        &env,
        &object(
            "fw",
            serde_json::json!({"region": "us-east-1", "instanceRefs": [{"name": "vm"}]}),
        ),
    )
    .await;
    create::<Snapshot>(
        &env,
        &object("snap", serde_json::json!({"instanceRef": {"name": "vm"}})),
    )
    .await;
    create::<Image>(
        &env,
        &object("img", serde_json::json!({"snapshotRef": {"name": "snap"}})),
    )
    .await;
    create::<GpuInstance>(
        &env,
        &object(
            "booted",
            serde_json::json!({"region": "us-east-1", "gpuType": "L40S", "imageRef": {"name": "img"}}),
        ),
    )
    .await;
    condition::<Volume>(&env, "vol", "Reconciling", "True", "WaitingForReference").await;
    condition::<Firewall>(&env, "fw", "Reconciling", "True", "WaitingForReference").await;
    condition::<GpuInstance>(&env, "booted", "Reconciling", "True", "WaitingForReference").await;

    create::<GpuInstance>(
        &env,
        &object(
            "vm",
            serde_json::json!({"region": "us-east-1", "gpuType": "L40S", "osImage": "ubuntu-22.04-cuda-12"}),
        ),
    )
    .await;
    let started = std::time::Instant::now();
    let vm: GpuInstance = ready(&env, "vm").await;
    let vol: Volume = ready(&env, "vol").await;
    let fw: Firewall = ready(&env, "fw").await;
    ready::<GpuInstance>(&env, "booted").await;
    let waited = started.elapsed();
    assert!(
        waited < std::time::Duration::from_secs(20),
        "took {waited:?}: woken by the resync, not by the watches"
    );
    let vm_id = vm.cloud_status().external_id;
    assert_eq!(vol.status.unwrap().attached_instance_id, vm_id);
    assert_eq!(
        fw.status.unwrap().attached_instance_ids,
        vec![vm_id.unwrap()]
    );
    env.stop_operator().await;
}

/// A machine deleted behind the operator's back: the objects attached to it say so and wait,
/// they do not fail against the vanished id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependents_of_a_machine_deleted_outside_the_operator_show_a_reason() {
    let mut env = Env::start().await;
    create::<GpuInstance>(
        &env,
        &object(
            "vm",
            serde_json::json!({"region": "us-east-1", "gpuType": "L40S", "osImage": "ubuntu-22.04-cuda-12"}),
        ),
    )
    .await;
    create::<Volume>(
        &env,
        &object(
            "vol",
            serde_json::json!({"region": "us-east-1", "sizeGb": 5, "instanceRef": {"name": "vm"}}),
        ),
    )
    .await;
    create::<Firewall>(
        &env,
        &object(
            "fw",
            serde_json::json!({"region": "us-east-1", "instanceRefs": [{"name": "vm"}]}),
        ),
    )
    .await;
    let vm: GpuInstance = ready(&env, "vm").await;
    ready::<Volume>(&env, "vol").await;
    ready::<Firewall>(&env, "fw").await;
    let vm_id = vm.cloud_status().external_id.unwrap();

    cloud_client(&env).delete_instance(&vm_id).await.unwrap();
    condition::<GpuInstance>(&env, "vm", "Stalled", "True", "ExternalDeleted").await;
    for kind in ["Volume", "Firewall"] {
        let ready_condition = match kind {
            "Volume" => {
                condition::<Volume>(&env, "vol", "Reconciling", "True", "WaitingForReference")
                    .await
                    .cloud_status()
            }
            _ => condition::<Firewall>(&env, "fw", "Reconciling", "True", "WaitingForReference")
                .await
                .cloud_status(),
        }
        .condition("Ready")
        .unwrap()
        .clone();
        assert!(
            ready_condition
                .message
                .contains("deleted outside the operator"),
            "{kind}: {}",
            ready_condition.message
        );
    }
    let volumes = data_volumes(&env);
    assert_eq!(volumes.len(), 1);
    assert_eq!(
        volumes[0].instance_id, None,
        "the volume outlives the machine"
    );
    env.stop_operator().await;
}
