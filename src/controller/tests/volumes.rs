#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Volume: create, resize, attach, move, detach, clone, refused shrink, delete, orphan and
//! adoption, and the ordering with the instances it is attached to.

use crate::support;

use gpucloud_api::*;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::core::ObjectMeta;
use support::*;

fn machine(name: &str) -> GpuInstance {
    object(
        name,
        serde_json::json!({
            "region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
            "osImage": "ubuntu-22.04-cuda-12",
        }),
    )
}

fn volume(name: &str, spec: serde_json::Value) -> Volume {
    let mut full = serde_json::json!({"region": "us-east-1", "sizeGb": 10});
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    object(name, full)
}

async fn patch_spec(env: &Env, name: &str, spec: serde_json::Value) -> Result<Volume, kube::Error> {
    env.api::<Volume>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
}

/// Pauses the object `name` (`gpucloud.io/paused: "true"`), or lifts the pause.
async fn set_paused<K: TestKind>(api: &kube::Api<K>, name: &str, paused: bool) {
    let value = paused.then_some("true");
    let patch = serde_json::json!({"metadata": {"annotations": {PAUSED_ANNOTATION: value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// A machine `worker` and the volume `name` attached to it, both Ready: the volume's cloud id.
async fn volume_on_a_machine(env: &Env, name: &str) -> String {
    create(env, &machine("worker")).await;
    let on_worker = serde_json::json!({"instanceRef": {"name": "worker"}});
    create(env, &volume(name, on_worker)).await;
    let attached: Volume = ready(env, name).await;
    assert!(
        attached
            .status
            .as_ref()
            .unwrap()
            .attached_instance_id
            .is_some()
    );
    attached.cloud_status().external_id.unwrap()
}

fn cloud_volume(env: &Env, id: &str) -> gpucloud_cloud::model::Volume {
    data_volumes(env)
        .into_iter()
        .find(|v| v.id == id)
        .unwrap_or_else(|| panic!("{id} not in the cloud"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_is_created_resized_attached_moved_detached_cloned_and_deleted() {
    let mut env = Env::start().await;
    create(&env, &machine("node-a")).await;
    create(&env, &machine("node-b")).await;
    create(
        &env,
        &volume(
            "data",
            serde_json::json!({"instanceRef": {"name": "node-a"}}),
        ),
    )
    .await;
    let a = ready::<GpuInstance>(&env, "node-a").await;
    let b = ready::<GpuInstance>(&env, "node-b").await;
    let a_id = a.cloud_status().external_id.unwrap();
    let b_id = b.cloud_status().external_id.unwrap();

    // Attach.
    let data: Volume = ready(&env, "data").await;
    let status = data.status.clone().unwrap();
    let id = status.cloud.external_id.clone().unwrap();
    assert_eq!(status.attached_instance_id.as_deref(), Some(a_id.as_str()));
    assert_eq!(status.cloud.state.as_deref(), Some("attached"));
    assert_eq!(status.size_gb, Some(10));
    assert_eq!(status.volume_type.as_deref(), Some("NVMe"));
    assert_eq!(status.bootable, Some(false));
    assert_eq!(
        cloud_volume(&env, &id).instance_id.as_deref(),
        Some(a_id.as_str())
    );
    assert_eq!(env.calls("CreateVolume"), 1);

    // Grow; shrinking and immutable fields are refused at admission.
    grown_and_refused_a_shrink(&env, &id).await;

    // Move to another machine, then detach.
    moved_then_detached(&env, &id, &b_id).await;

    // Clone.
    create(
        &env,
        &volume(
            "data-copy",
            serde_json::json!({"sizeGb": 25, "source": {"volumeRef": {"name": "data"}}}),
        ),
    )
    .await;
    let copy: Volume = ready(&env, "data-copy").await;
    let copy_id = copy.cloud_status().external_id.unwrap();
    assert_ne!(copy_id, id);
    assert_eq!(cloud_volume(&env, &copy_id).size, 25);
    assert_eq!(env.calls("CloneVolume"), 1);
    assert_eq!(env.calls("CreateVolume"), 1, "a clone is not a create");

    // Delete, with the volume attached again first: it is detached, then deleted.
    patch_spec(
        &env,
        "data",
        serde_json::json!({"instanceRef": {"name": "node-a"}}),
    )
    .await
    .unwrap();
    eventually(30, "volume attached again", || async {
        cloud_volume(&env, &id).instance_id.is_some().then_some(())
    })
    .await;
    for name in ["data", "data-copy"] {
        env.api::<Volume>()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    gone::<Volume>(&env, "data").await;
    gone::<Volume>(&env, "data-copy").await;
    assert!(data_volumes(&env).is_empty(), "{:?}", data_volumes(&env));
    assert_eq!(
        env.simulator.state().instances.len(),
        2,
        "machines untouched"
    );
    env.stop_operator().await;
}

/// The volume `data` (cloud id `id`) grown to 25 GB; shrinking it and changing its type are
/// refused at admission with a clear message.
async fn grown_and_refused_a_shrink(env: &Env, id: &str) {
    patch_spec(env, "data", serde_json::json!({"sizeGb": 25}))
        .await
        .unwrap();
    eventually(30, "volume grown in the cloud", || async {
        (cloud_volume(env, id).size == 25).then_some(())
    })
    .await;
    let grown: Volume = ready(env, "data").await;
    assert_eq!(grown.status.unwrap().size_gb, Some(25));

    // Shrinking is refused at admission with a clear message.
    let refused = patch_spec(env, "data", serde_json::json!({"sizeGb": 5}))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("sizeGb cannot shrink"),
        "{refused}"
    );
    // So are immutable fields.
    let refused = patch_spec(env, "data", serde_json::json!({"volumeType": "SSD"}))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("volumeType is immutable"),
        "{refused}"
    );
}

/// The volume `data` (cloud id `id`) moved to the machine `b_id`, then detached.
async fn moved_then_detached(env: &Env, id: &str, b_id: &str) {
    patch_spec(
        env,
        "data",
        serde_json::json!({"instanceRef": {"name": "node-b"}}),
    )
    .await
    .unwrap();
    eventually(30, "volume moved to node-b", || async {
        (cloud_volume(env, id).instance_id.as_deref() == Some(b_id)).then_some(())
    })
    .await;
    let moved: Volume = ready(env, "data").await;
    assert_eq!(
        moved.status.unwrap().attached_instance_id.as_deref(),
        Some(b_id)
    );
    assert!(env.calls("DetachVolumes") >= 1);

    // Detach.
    patch_spec(env, "data", serde_json::json!({"instanceRef": null}))
        .await
        .unwrap();
    eventually(30, "volume detached", || async {
        cloud_volume(env, id).instance_id.is_none().then_some(())
    })
    .await;
    let detached: Volume = ready(env, "data").await;
    assert_eq!(detached.status.clone().unwrap().attached_instance_id, None);
    assert_eq!(
        detached.status.unwrap().cloud.state.as_deref(),
        Some("available")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_waits_for_its_instance_and_attaches_when_it_appears() {
    let mut env = Env::start().await;
    create(
        &env,
        &volume(
            "scratch",
            serde_json::json!({"instanceRef": {"name": "later"}}),
        ),
    )
    .await;
    let waiting: Volume = condition(
        &env,
        "scratch",
        "Reconciling",
        "True",
        "WaitingForReference",
    )
    .await;
    let message = ready_message(&waiting);
    assert!(message.contains("later"), "{message}");
    // The volume itself exists already; only the attachment waits.
    assert_eq!(data_volumes(&env).len(), 1);

    create(&env, &machine("later")).await;
    let vm: GpuInstance = ready(&env, "later").await;
    let attached: Volume = ready(&env, "scratch").await;
    assert_eq!(
        attached.status.unwrap().attached_instance_id,
        vm.cloud_status().external_id
    );
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_instance_detaches_its_volumes_first_and_the_volume_says_why() {
    let mut env = Env::start().await;
    let id = volume_on_a_machine(&env, "keep-me").await;

    support::delete_and_wait::<GpuInstance>(&env, "worker").await;
    assert!(
        env.calls("DetachVolumes") >= 1,
        "detached before the delete"
    );
    eventually(30, "machine gone from the cloud", || async {
        env.simulator.state().instances.is_empty().then_some(())
    })
    .await;
    let kept = cloud_volume(&env, &id);
    assert_eq!(kept.instance_id, None, "the volume outlives the machine");
    assert_eq!(kept.size, 10);

    let waiting: Volume = condition(
        &env,
        "keep-me",
        "Reconciling",
        "True",
        "WaitingForReference",
    )
    .await;
    let ready_condition = waiting.cloud_status().condition("Ready").unwrap().clone();
    assert_eq!(ready_condition.status, "False");
    assert!(ready_condition.message.contains("worker"));
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_volume_stays_and_is_adopted_by_a_new_object() {
    let mut env = Env::start().await;
    create(
        &env,
        &volume(
            "old",
            serde_json::json!({"deletionPolicy": "Orphan", "sizeGb": 12}),
        ),
    )
    .await;
    let old: Volume = ready(&env, "old").await;
    let id = old.cloud_status().external_id.unwrap();
    support::delete_and_wait::<Volume>(&env, "old").await;
    assert_eq!(cloud_volume(&env, &id).size, 12, "orphaned volume stays");

    let mut adopted = volume("new", serde_json::json!({"sizeGb": 12}));
    adopted.metadata = ObjectMeta {
        name: Some("new".into()),
        annotations: Some([(EXTERNAL_ID_ANNOTATION.to_string(), id.clone())].into()),
        ..Default::default()
    };
    create(&env, &adopted).await;
    let new: Volume = ready(&env, "new").await;
    assert_eq!(new.cloud_status().external_id.as_deref(), Some(id.as_str()));
    assert_eq!(env.calls("CreateVolume"), 1, "adoption creates nothing");

    support::delete_and_wait::<Volume>(&env, "new").await;
    assert!(data_volumes(&env).is_empty());
    env.stop_operator().await;
}

/// Two volumes cloning each other (and a machine restored from a snapshot of itself) can never
/// be created: each says so, `Stalled` with reason `ReferenceCycle` naming the chain, instead
/// of waiting for ever, and nothing is called in the cloud.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_that_wait_for_each_other_stall_as_a_cycle() {
    let env = Env::start().await;
    create(
        &env,
        &volume(
            "a",
            serde_json::json!({"source": {"volumeRef": {"name": "b"}}}),
        ),
    )
    .await;
    create(
        &env,
        &volume(
            "b",
            serde_json::json!({"source": {"volumeRef": {"name": "a"}}}),
        ),
    )
    .await;
    create::<GpuInstance>(
        &env,
        &object(
            "vm",
            serde_json::json!({"region": "us-east-1", "source": {"snapshotRef": {"name": "s"}}}),
        ),
    )
    .await;
    create::<Snapshot>(
        &env,
        &object("s", serde_json::json!({"instanceRef": {"name": "vm"}})),
    )
    .await;
    for name in ["a", "b"] {
        let stalled: Volume = condition(&env, name, "Stalled", "True", "ReferenceCycle").await;
        let message = stalled
            .cloud_status()
            .condition("Stalled")
            .unwrap()
            .message
            .clone();
        assert!(
            message.contains("Volume a -> Volume b") || message.contains("Volume b -> Volume a"),
            "{message}"
        );
    }
    let vm: GpuInstance = condition(&env, "vm", "Stalled", "True", "ReferenceCycle").await;
    let message = vm
        .cloud_status()
        .condition("Stalled")
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains("GpuInstance vm -> Snapshot s -> GpuInstance vm"),
        "{message}"
    );
    for operation in [
        "CreateVolume",
        "CloneVolume",
        "CreateInstance",
        "RestoreSnapshot",
        "CreateSnapshot",
    ] {
        assert_eq!(env.calls(operation), 0, "{operation} was called");
    }

    // Breaking the cycle lets both go on: b becomes a plain volume (recreated, since the source
    // is immutable), and a clones it.
    env.api::<Volume>()
        .delete("b", &Default::default())
        .await
        .unwrap();
    gone::<Volume>(&env, "b").await;
    create(&env, &volume("b", serde_json::json!({}))).await;
    ready::<Volume>(&env, "b").await;
    ready::<Volume>(&env, "a").await;
}

/// A team's teardown: a machine, the volume attached to it and a snapshot of it, the machine
/// deleted first and the others as soon as its delete is accepted. The volume is detached
/// once, by the machine's deletion: its own deletion, still shown it attached by a list from
/// before, deletes it without detaching it again. The snapshot's images are read once, before
/// its delete, not again while the deletion finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teardown_detaches_each_volume_once_and_reads_a_snapshots_images_once() {
    let mut env = Env::start().await;
    create(&env, &machine("worker")).await;
    create(
        &env,
        &volume(
            "scratch",
            serde_json::json!({"instanceRef": {"name": "worker"}}),
        ),
    )
    .await;
    let snapshot: Snapshot = object(
        "checkpoint",
        serde_json::json!({"instanceRef": {"name": "worker"}}),
    );
    create(&env, &snapshot).await;
    ready::<Volume>(&env, "scratch").await;
    ready::<Snapshot>(&env, "checkpoint").await;
    let detaches = env.calls("DetachVolumes");

    env.api::<GpuInstance>()
        .delete("worker", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "the machine's delete accepted", || async {
        (env.calls("DeleteInstance") == 1).then_some(())
    })
    .await;
    env.api::<Volume>()
        .delete("scratch", &DeleteParams::default())
        .await
        .unwrap();
    env.api::<Snapshot>()
        .delete("checkpoint", &DeleteParams::default())
        .await
        .unwrap();
    gone::<GpuInstance>(&env, "worker").await;
    gone::<Volume>(&env, "scratch").await;
    gone::<Snapshot>(&env, "checkpoint").await;

    assert_eq!(env.calls("DetachVolumes") - detaches, 1, "detaches");
    assert_eq!(env.calls("DeleteVolume"), 1, "volume deletes");
    assert_eq!(env.calls("GetSnapshotImageRelation"), 1, "image reads");
    assert!(data_volumes(&env).is_empty());
    env.stop_operator().await;
}

/// A machine and the volume attached to it deleted together: the volume's deletion waits for
/// the machine's, and says so; the machine's deletion leaves the volume attached (its data
/// goes anyway) and the cloud lets go of it with the machine. One delete each, no detach.
/// The machine is paused while the volume's deletion starts, so the volume's wait comes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_deleted_with_its_machine_waits_for_it_and_is_never_detached() {
    let mut env = Env::start().await;
    let id = volume_on_a_machine(&env, "scratch").await;
    let detaches = env.calls("DetachVolumes");

    let machines = env.api::<GpuInstance>();
    set_paused(&machines, "worker", true).await;
    condition::<GpuInstance>(&env, "worker", "Paused", "True", "Paused").await;
    machines
        .delete("worker", &DeleteParams::default())
        .await
        .unwrap();
    env.api::<Volume>()
        .delete("scratch", &DeleteParams::default())
        .await
        .unwrap();
    let waiting: Volume = condition(&env, "scratch", "Reconciling", "True", "Deleting").await;
    let message = waiting
        .cloud_status()
        .condition("Ready")
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains("waiting for GpuInstance worker's deletion"),
        "{message}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        env.calls("DetachVolumes"),
        detaches,
        "detached while waiting"
    );
    assert_eq!(env.calls("DeleteVolume"), 0, "deleted while attached");
    assert!(
        cloud_volume(&env, &id).instance_id.is_some(),
        "still attached"
    );

    set_paused(&machines, "worker", false).await;
    gone::<GpuInstance>(&env, "worker").await;
    gone::<Volume>(&env, "scratch").await;
    assert_eq!(env.calls("DetachVolumes"), detaches, "detaches");
    assert_eq!(env.calls("DeleteInstance"), 1, "machine deletes");
    assert_eq!(env.calls("DeleteVolume"), 1, "volume deletes");
    assert!(data_volumes(&env).is_empty());
    env.stop_operator().await;
}

/// A machine deleted after its volume's deletion began, but before the volume's own reconcile
/// has come (here the volume is paused, as a reconcile still queued behind many others): the
/// machine's deletion sees from the store that the volume goes with it and leaves it attached.
/// No detach; the volume, once reconciled, is deleted with one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deleted_after_its_volumes_deletion_began_does_not_detach_it() {
    let mut env = Env::start().await;
    volume_on_a_machine(&env, "scratch").await;
    let detaches = env.calls("DetachVolumes");

    let volumes = env.api::<Volume>();
    set_paused(&volumes, "scratch", true).await;
    condition::<Volume>(&env, "scratch", "Paused", "True", "Paused").await;
    volumes
        .delete("scratch", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "the volume's deletion in the store", || async {
        volumes
            .get("scratch")
            .await
            .ok()
            .filter(|v| v.metadata.deletion_timestamp.is_some())
            .map(drop)
    })
    .await;
    env.api::<GpuInstance>()
        .delete("worker", &DeleteParams::default())
        .await
        .unwrap();
    gone::<GpuInstance>(&env, "worker").await;
    assert_eq!(
        env.calls("DetachVolumes"),
        detaches,
        "detached by the machine's deletion"
    );

    set_paused(&volumes, "scratch", false).await;
    gone::<Volume>(&env, "scratch").await;
    assert_eq!(env.calls("DetachVolumes"), detaches, "detaches");
    assert_eq!(env.calls("DeleteInstance"), 1, "machine deletes");
    assert_eq!(env.calls("DeleteVolume"), 1, "volume deletes");
    assert!(data_volumes(&env).is_empty());
    env.stop_operator().await;
}

/// A machine's record, read from a list, names two data volumes, one of which has since been
/// detached and deleted (the list was older than the volume's delete): detaching both is
/// `404`, for that volume, not the machine. The other volume is still detached first, and the
/// machine is deleted all the same, never taken as gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_is_deleted_when_a_volume_its_listed_record_names_is_gone() {
    use gpucloud_cloud::model::{CreateVolumeRequest, InstanceStatus, VolumeStatus};
    use gpucloud_controller::accounts::observer::CloudResource;
    use gpucloud_controller::kinds::gpu_instance::Instances;

    let env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let cloud = cloud_client(&env);
    let id = machine_by_hand(&env, "stale-record").await.instance_id;
    let mut volume_ids = Vec::new();
    for name in ["deleted-data", "kept-data"] {
        let request = CreateVolumeRequest::new(name, 5, "us-east-1");
        volume_ids.push(cloud.create_volume(&request).await.unwrap().id);
    }
    eventually(30, "the machine and the volumes usable", || async {
        let state = env.simulator.state();
        let active = state
            .instances
            .iter()
            .any(|i| i.instance_id == id && i.status == InstanceStatus::Active);
        let available = state
            .volumes
            .iter()
            .filter(|v| volume_ids.contains(&v.id) && v.status == VolumeStatus::Available)
            .count();
        (active && available == 2).then_some(())
    })
    .await;
    cloud.attach_volumes(&id, &volume_ids).await.unwrap();
    let listed = cloud
        .list_instances()
        .await
        .unwrap()
        .instances
        .into_iter()
        .find(|i| i.instance_id == id)
        .unwrap();
    assert_eq!(listed.volume_ids.len(), 2, "the record names both volumes");

    let (deleted, kept) = (volume_ids[0].clone(), volume_ids[1].clone());
    cloud
        .detach_volumes(&id, std::slice::from_ref(&deleted))
        .await
        .unwrap();
    cloud.delete_volume(&deleted).await.unwrap();
    let detaches = env.calls("DetachVolumes");

    Instances::delete(cloud.clone(), listed).await.unwrap();
    let state = env.simulator.state();
    let status = state
        .instances
        .iter()
        .find(|i| i.instance_id == id)
        .map(|i| i.status.clone());
    assert!(
        matches!(status, None | Some(InstanceStatus::Deleting)),
        "the machine is deleted, not left {status:?}"
    );
    assert_eq!(env.calls("DeleteInstance"), 1, "machine deletes");
    assert_eq!(
        env.calls("DetachVolumes") - detaches,
        2,
        "the refused detach, then the kept volume's"
    );
    assert!(
        state
            .volumes
            .iter()
            .any(|v| v.id == kept && v.instance_id.is_none()),
        "the kept volume stays, detached"
    );
}
