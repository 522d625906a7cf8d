#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `deletionPolicy: Snapshot`: the machine is deleted only once a final snapshot of it is
//! available, exactly one is taken across operator kills, and it is left in the cloud (and the
//! released-resources record) or kept as a restorable Snapshot object.

use crate::support;

use gpucloud_api::*;
use gpucloud_controller::accounts::orphans::RELEASED_CONFIGMAP;
use gpucloud_controller::kinds::gpu_instance::final_snapshot::{
    FINAL_SNAPSHOT_OF_LABEL, FINAL_SNAPSHOT_OF_UID_ANNOTATION, object_name,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams};
use support::*;

fn machine(name: &str, extra: serde_json::Value) -> GpuInstance {
    let mut spec = serde_json::json!({
        "region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
        "osImage": "ubuntu-22.04-cuda-12", "deletionPolicy": "Snapshot",
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    object(name, spec)
}

/// Watches the simulator until `machine` is gone, checking in every state read that the
/// machine is never gone before an available snapshot of it exists. Returns that snapshot's id.
async fn machine_gone_after_its_snapshot(env: &Env, machine: &str) -> String {
    eventually(
        90,
        &format!("{machine} deleted after its final snapshot"),
        || {
            let state = env.simulator.state();
            let snapshot = state
                .snapshots
                .iter()
                .find(|s| s.instance_id == machine)
                .map(|s| (s.snapshot_id.clone(), s.status.clone()));
            let present = state.instances.iter().any(|i| i.instance_id == machine);
            if !present {
                let (id, status) = snapshot
                    .clone()
                    .expect("the machine went without a snapshot");
                assert_eq!(
                    status,
                    gpucloud_cloud::model::SnapshotStatus::Available,
                    "the machine went before its snapshot was available"
                );
                return std::future::ready(Some(id));
            }
            std::future::ready(None)
        },
    )
    .await
}

fn snapshots_of(env: &Env, machine: &str) -> usize {
    env.simulator
        .state()
        .snapshots
        .iter()
        .filter(|s| s.instance_id == machine)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_machine_is_started_snapshotted_then_deleted_and_its_snapshot_released() {
    let mut env = Env::start().await;
    create(
        &env,
        &machine("trainer", serde_json::json!({"powerState": "Stopped"})),
    )
    .await;
    let trainer: GpuInstance = ready(&env, "trainer").await;
    let id = trainer.cloud_status().external_id.unwrap();
    let started = env.calls("StartInstance");

    env.api::<GpuInstance>()
        .delete("trainer", &DeleteParams::default())
        .await
        .unwrap();
    let waiting: GpuInstance =
        condition(&env, "trainer", "Reconciling", "True", "FinalSnapshot").await;
    let message = ready_message(&waiting);
    assert!(message.contains("trainer-final"), "{message}");

    let snapshot_id = machine_gone_after_its_snapshot(&env, &id).await;
    gone::<GpuInstance>(&env, "trainer").await;
    // The cloud snapshots ACTIVE machines only: the stopped one was started for it.
    assert!(env.calls("StartInstance") > started);
    assert_eq!(snapshots_of(&env, &id), 1);
    assert_eq!(env.calls("CreateSnapshot"), 1);

    // Not kept as an object: the Snapshot object goes, the cloud snapshot stays, recorded as
    // released so the orphan sweeper never takes it.
    gone::<Snapshot>(&env, &object_name("trainer")).await;
    assert!(
        env.simulator
            .state()
            .snapshots
            .iter()
            .any(|s| s.snapshot_id == snapshot_id)
    );
    let released: kube::Api<ConfigMap> =
        kube::Api::namespaced(env.client.clone(), OPERATOR_NAMESPACE);
    let record = released.get(RELEASED_CONFIGMAP).await.unwrap();
    assert!(
        record
            .data
            .unwrap_or_default()
            .keys()
            .any(|k| k.contains(&snapshot_id)),
        "{snapshot_id} not in the released record"
    );
    wait_for_events(&env, "trainer", &["FinalSnapshot"]).await;
    env.stop_operator().await;
}

/// Kept as an object, with the operator killed while the snapshot is still being made and
/// again right after the machine's deletion began: one snapshot, no machine, and a Snapshot
/// object a new machine is restored from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_final_snapshot_survives_operator_kills_once_and_restores() {
    let mut env = Env::start_with_slow_snapshots(3).await;
    create(
        &env,
        &machine(
            "keeper",
            serde_json::json!({"finalSnapshot": {"keepAsObject": true}}),
        ),
    )
    .await;
    let keeper: GpuInstance = ready(&env, "keeper").await;
    let id = keeper.cloud_status().external_id.unwrap();
    env.api::<GpuInstance>()
        .delete("keeper", &DeleteParams::default())
        .await
        .unwrap();

    // Killed while the cloud is making the snapshot.
    eventually(30, "the final snapshot being made", || {
        std::future::ready((snapshots_of(&env, &id) == 1).then_some(()))
    })
    .await;
    env.kill_operator().await;
    env.start_operator(test_config(&env.simulator));
    // Killed again once the machine's deletion has begun.
    eventually(30, "the machine's delete", || {
        std::future::ready((env.calls("DeleteInstance") > 0).then_some(()))
    })
    .await;
    env.kill_operator().await;
    env.start_operator(test_config(&env.simulator));

    let snapshot_id = machine_gone_after_its_snapshot(&env, &id).await;
    gone::<GpuInstance>(&env, "keeper").await;
    assert_eq!(snapshots_of(&env, &id), 1);
    assert_eq!(env.calls("CreateSnapshot"), 1);

    let kept: Snapshot = ready(&env, &object_name("keeper")).await;
    assert_eq!(
        kept.cloud_status().external_id.as_deref(),
        Some(snapshot_id.as_str())
    );
    assert_eq!(kept.spec.managed.deletion_policy, DeletionPolicy::Delete);
    let labelled = env
        .api::<Snapshot>()
        .list(&ListParams::default().labels(&format!("{FINAL_SNAPSHOT_OF_LABEL}=keeper")))
        .await
        .unwrap();
    assert_eq!(labelled.items.len(), 1);

    create(
        &env,
        &object::<GpuInstance>(
            "resumed",
            serde_json::json!({"region": "us-east-1",
                "source": {"snapshotRef": {"name": object_name("keeper")}}}),
        ),
    )
    .await;
    let resumed: GpuInstance = ready(&env, "resumed").await;
    assert_eq!(
        resumed.status.unwrap().source_snapshot_id.as_deref(),
        Some(snapshot_id.as_str())
    );
    env.stop_operator().await;
}

/// A Snapshot object of the final snapshot's name that the instance did not make is never
/// taken for it: the deletion stalls, naming it, and the machine stays until it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_object_of_the_same_name_blocks_the_deletion_and_keeps_the_machine() {
    let mut env = Env::start().await;
    create(&env, &machine("busy", serde_json::json!({}))).await;
    let busy: GpuInstance = ready(&env, "busy").await;
    let id = busy.cloud_status().external_id.unwrap();
    create(
        &env,
        &object::<Snapshot>(
            &object_name("busy"),
            serde_json::json!({"instanceRef": {"name": "busy"}}),
        ),
    )
    .await;
    ready::<Snapshot>(&env, &object_name("busy")).await;
    env.api::<GpuInstance>()
        .delete("busy", &DeleteParams::default())
        .await
        .unwrap();
    let blocked: GpuInstance =
        condition(&env, "busy", "Stalled", "True", "FinalSnapshotBlocked").await;
    let message = ready_message(&blocked);
    assert!(message.contains("busy-final"), "{message}");
    assert!(
        env.simulator
            .state()
            .instances
            .iter()
            .any(|i| i.instance_id == id)
    );
    assert_eq!(env.calls("DeleteInstance"), 0);

    // Lifted by deleting that object: its going wakes the instance (no wait for the
    // five-minute recheck of a stalled object), which then takes its own final snapshot.
    env.api::<Snapshot>()
        .delete(&object_name("busy"), &DeleteParams::default())
        .await
        .unwrap();
    machine_gone_after_its_snapshot(&env, &id).await;
    gone::<GpuInstance>(&env, "busy").await;
    assert_eq!(snapshots_of(&env, &id), 1);
    env.stop_operator().await;
}

/// A Snapshot object made to pass for the final snapshot (its name, label and the instance's
/// uid copied) but of another machine is not taken for it: the cloud's record of which machine
/// a snapshot is of decides, so the deletion stalls and the machine stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_snapshot_of_another_machine_is_refused_and_the_machine_kept() {
    let mut env = Env::start().await;
    create(&env, &machine("busy", serde_json::json!({}))).await;
    create(
        &env,
        &machine("other", serde_json::json!({"deletionPolicy": "Delete"})),
    )
    .await;
    let busy: GpuInstance = ready(&env, "busy").await;
    ready::<GpuInstance>(&env, "other").await;
    let id = busy.cloud_status().external_id.unwrap();
    let mut forged = object::<Snapshot>(
        &object_name("busy"),
        serde_json::json!({"instanceRef": {"name": "other"}}),
    );
    forged.metadata.labels = Some(
        [(FINAL_SNAPSHOT_OF_LABEL.to_string(), "busy".to_string())]
            .into_iter()
            .collect(),
    );
    forged.metadata.annotations = Some(
        [(
            FINAL_SNAPSHOT_OF_UID_ANNOTATION.to_string(),
            busy.metadata.uid.clone().unwrap(),
        )]
        .into_iter()
        .collect(),
    );
    create(&env, &forged).await;
    ready::<Snapshot>(&env, &object_name("busy")).await;
    env.api::<GpuInstance>()
        .delete("busy", &DeleteParams::default())
        .await
        .unwrap();
    let blocked: GpuInstance =
        condition(&env, "busy", "Stalled", "True", "FinalSnapshotBlocked").await;
    let message = ready_message(&blocked);
    assert!(message.contains("another machine"), "{message}");
    assert!(
        env.simulator
            .state()
            .instances
            .iter()
            .any(|i| i.instance_id == id),
        "the machine was deleted without a snapshot of it"
    );
    assert_eq!(env.calls("DeleteInstance"), 0);
    assert_eq!(snapshots_of(&env, &id), 0);
    env.stop_operator().await;
}

/// Releasing the final Snapshot object reads the instance's record from the API server when
/// the copy in hand predates it (a cache behind a cut watch), so the object is not left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_object_is_released_when_the_copy_in_hand_predates_its_record() {
    let env = Env::without_operator(Default::default()).await;
    let instances = env.api::<GpuInstance>();
    create(&env, &machine("trainer", serde_json::json!({}))).await;
    let stale = instances.get("trainer").await.unwrap();

    let mut snapshot: Snapshot = object(
        &object_name("trainer"),
        serde_json::json!({"instanceId": "vm-000000000001", "deletionPolicy": "Orphan"}),
    );
    snapshot.metadata.annotations = Some(
        [(
            FINAL_SNAPSHOT_OF_UID_ANNOTATION.to_string(),
            stale.metadata.uid.clone().unwrap(),
        )]
        .into(),
    );
    create(&env, &snapshot).await;
    let record = serde_json::json!({"status": {"finalSnapshot": {
        "object": object_name("trainer"), "snapshotId": "snap-000000000002"}}});
    instances
        .patch_status(
            "trainer",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&record),
        )
        .await
        .unwrap();

    gpucloud_controller::kinds::gpu_instance::final_snapshot::release(&stale, &env.client)
        .await
        .unwrap();
    gone::<Snapshot>(&env, &object_name("trainer")).await;
}
