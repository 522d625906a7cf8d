#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Snapshot, restore and Image: a snapshot waits for its machine to be ACTIVE, a machine is
//! restored from it, an image is made from it and boots a third machine; deletion ordering
//! between them; no duplicates when create responses are lost.

use crate::support;

use gpucloud_api::*;
use gpucloud_simulator::{DropMode, FaultPlan, SimulatorConfig};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::core::ObjectMeta;
use std::collections::BTreeMap;
use std::time::Duration;
use support::*;

fn machine(name: &str, extra: serde_json::Value) -> GpuInstance {
    let mut spec = serde_json::json!({
        "region": "us-east-1", "gpuType": "L40S", "gpuCount": 2,
        "osImage": "ubuntu-22.04-cuda-12",
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    object(name, spec)
}

fn restored(name: &str, snapshot: &str) -> GpuInstance {
    object(
        name,
        serde_json::json!({"region": "us-east-1", "source": {"snapshotRef": {"name": snapshot}}}),
    )
}

fn snapshot_of(name: &str, instance: &str) -> Snapshot {
    object(
        name,
        serde_json::json!({
            "instanceRef": {"name": instance},
            "description": "weights after epoch 3",
            "labels": ["epoch-3"],
        }),
    )
}

fn image_of(name: &str, snapshot: &str) -> Image {
    object(name, serde_json::json!({"snapshotRef": {"name": snapshot}}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_of_a_running_machine_is_restored_and_imaged_into_two_more_machines() {
    let mut env = Env::start().await;
    // Everything declared at once, the source machine last and stopped.
    declare_everything_the_source_machine_last(&env).await;

    let trainer_id = a_stopped_machine_is_not_snapshotted(&env).await;

    env.api::<GpuInstance>()
        .patch(
            "trainer",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"powerState": "Running"}})),
        )
        .await
        .unwrap();
    let snapshot: Snapshot = ready(&env, "epoch-3").await;
    let status = snapshot.status.clone().unwrap();
    let snapshot_id = status.cloud.external_id.clone().unwrap();
    assert_eq!(status.cloud.state.as_deref(), Some("available"));
    assert_eq!(
        status.source_instance_id.as_deref(),
        Some(trainer_id.as_str())
    );
    assert_eq!(status.region.as_deref(), Some("us-east-1"));
    assert!(status.size.unwrap() > 0);
    let cloud = env.simulator.state();
    let cloud_snapshot = cloud
        .snapshots
        .iter()
        .find(|s| s.snapshot_id == snapshot_id)
        .unwrap();
    assert_eq!(cloud_snapshot.description, "weights after epoch 3");
    assert_eq!(cloud_snapshot.labels, vec!["epoch-3".to_string()]);

    restored_and_imaged_from(&env, &snapshot_id).await;

    the_snapshot_deletion_waits_for_its_image_then_takes_it(&env).await;

    // Everything else goes in one delete.
    for name in ["trainer", "resumed", "from-image"] {
        env.api::<GpuInstance>()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    support::delete_and_wait::<Image>(&env, "golden").await;
    for name in ["trainer", "resumed", "from-image"] {
        gone::<GpuInstance>(&env, name).await;
    }
    let cloud = env.simulator.state();
    assert!(cloud.instances.is_empty() && cloud.images.is_empty());
    env.stop_operator().await;
}

/// The Snapshot, a machine restored from it, its Image and a machine booted from that, each
/// waiting for what it refers to, which does not exist yet.
async fn declare_everything_the_source_machine_last(env: &Env) {
    create(env, &snapshot_of("epoch-3", "trainer")).await;
    create(env, &restored("resumed", "epoch-3")).await;
    create(env, &image_of("golden", "epoch-3")).await;
    create(
        env,
        &machine(
            "from-image",
            serde_json::json!({"osImage": null, "imageRef": {"name": "golden"}, "gpuCount": 1}),
        ),
    )
    .await;
    let waiting: Snapshot =
        condition(env, "epoch-3", "Reconciling", "True", "WaitingForReference").await;
    assert!(
        ready_message(&waiting).contains("trainer"),
        "{}",
        ready_message(&waiting)
    );
    let waiting: GpuInstance =
        condition(env, "resumed", "Reconciling", "True", "WaitingForReference").await;
    assert!(
        ready_message(&waiting).contains("epoch-3"),
        "{}",
        ready_message(&waiting)
    );
    condition::<Image>(env, "golden", "Reconciling", "True", "WaitingForReference").await;
    condition::<GpuInstance>(
        env,
        "from-image",
        "Reconciling",
        "True",
        "WaitingForReference",
    )
    .await;
}

/// The machine `trainer` made stopped, while the Snapshot is paused (a new machine is ACTIVE
/// for a moment before it is stopped): the Snapshot then waits rather than fails, and takes
/// nothing. Returns the machine's id.
async fn a_stopped_machine_is_not_snapshotted(env: &Env) -> String {
    let pause = |paused: Option<&str>| serde_json::json!({"metadata": {"annotations": {gpucloud_api::PAUSED_ANNOTATION: paused}}});
    env.api::<Snapshot>()
        .patch(
            "epoch-3",
            &PatchParams::default(),
            &Patch::Merge(pause(Some("true"))),
        )
        .await
        .unwrap();
    create(
        env,
        &machine("trainer", serde_json::json!({"powerState": "Stopped"})),
    )
    .await;
    let trainer: GpuInstance = ready(env, "trainer").await;
    env.api::<Snapshot>()
        .patch(
            "epoch-3",
            &PatchParams::default(),
            &Patch::Merge(pause(None)),
        )
        .await
        .unwrap();
    let trainer_id = trainer.cloud_status().external_id.unwrap();
    let waiting: Snapshot =
        condition(env, "epoch-3", "Reconciling", "True", "WaitingForInstance").await;
    assert!(
        ready_message(&waiting).contains("SHUTOFF"),
        "{}",
        ready_message(&waiting)
    );
    assert_eq!(env.calls("CreateSnapshot"), 0);
    trainer_id
}

/// The machine restored from the snapshot `snapshot_id` inherits its GPUs and says where it
/// came from; the Image is made from it, and a third machine booted from the Image.
async fn restored_and_imaged_from(env: &Env, snapshot_id: &str) {
    let resumed: GpuInstance = ready(env, "resumed").await;
    let resumed_status = resumed.status.clone().unwrap();
    assert_eq!(resumed_status.boot_source.as_deref(), Some("snapshot"));
    assert_eq!(
        resumed_status.source_snapshot_id.as_deref(),
        Some(snapshot_id)
    );
    let specs = resumed_status.specs.unwrap();
    assert_eq!((specs.gpu_type.as_str(), specs.gpu_count), ("L40S", 2));
    assert_eq!(env.calls("RestoreSnapshot"), 1);

    // The image, and a third machine booted from it.
    let golden: Image = ready(env, "golden").await;
    let image_status = golden.status.clone().unwrap();
    let image_id = image_status.cloud.external_id.clone().unwrap();
    assert_eq!(image_status.snapshot_id.as_deref(), Some(snapshot_id));
    assert_eq!(image_status.cloud.state.as_deref(), Some("available"));
    let third: GpuInstance = ready(env, "from-image").await;
    let third_status = third.status.unwrap();
    assert_eq!(third_status.boot_source.as_deref(), Some("custom_image"));
    let cloud = env.simulator.state();
    let third_cloud = cloud
        .instances
        .iter()
        .find(|i| Some(&i.instance_id) == third_status.cloud.external_id.as_ref())
        .unwrap();
    assert_eq!(third_cloud.image_id.as_deref(), Some(image_id.as_str()));
    assert_eq!(cloud.instances.len(), 3);
}

/// Deleting the Snapshot waits while this namespace's Image depends on it (another
/// namespace's Image of a Snapshot of the same name holds nothing), and says why; told its
/// images may go, it takes the Image's cloud image with it, and the Image says so.
async fn the_snapshot_deletion_waits_for_its_image_then_takes_it(env: &Env) {
    support::create_namespace(&env.client, "team-b", false)
        .await
        .unwrap();
    let mut tenant_image = image_of("tenant-img", "epoch-3");
    tenant_image.metadata.namespace = Some("team-b".into());
    kube::Api::<Image>::namespaced(env.client.clone(), "team-b")
        .create(&Default::default(), &tenant_image)
        .await
        .unwrap();
    // The cloud would delete the image with the snapshot: the deletion waits and says why.
    env.api::<Snapshot>()
        .delete("epoch-3", &DeleteParams::default())
        .await
        .unwrap();
    let held: Snapshot = condition(env, "epoch-3", "Ready", "False", "DependentsExist").await;
    let why = ready_message(&held);
    assert!(
        why.contains("Image golden")
            && !why.contains("tenant-img")
            && why.contains(DELETE_DEPENDENTS_ANNOTATION),
        "{why}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(env.calls("DeleteSnapshot"), 0);
    assert_eq!(env.simulator.state().images.len(), 1);

    // Told that its images may go, the snapshot takes its image with it: the Image says so.
    env.api::<Snapshot>()
        .patch(
            "epoch-3",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                DELETE_DEPENDENTS_ANNOTATION: "true"
            }}})),
        )
        .await
        .unwrap();
    gone::<Snapshot>(env, "epoch-3").await;
    assert!(env.simulator.state().snapshots.is_empty());
    let orphaned: Image = condition(env, "golden", "Stalled", "True", "SourceDeleted").await;
    assert!(
        ready_message(&orphaned).contains("epoch-3"),
        "{}",
        ready_message(&orphaned)
    );
    assert!(env.simulator.state().images.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_snapshot_waits_for_the_machine_being_restored_from_it() {
    let mut env = Env::start().await;
    create(&env, &machine("src", serde_json::json!({}))).await;
    create(&env, &snapshot_of("snap", "src")).await;
    let snapshot: Snapshot = ready(&env, "snap").await;
    let snapshot_id = snapshot.cloud_status().external_id.unwrap();

    // A paused restore has not happened yet: it holds the snapshot's deletion.
    let mut later = restored("later", "snap");
    later.metadata = ObjectMeta {
        name: Some("later".into()),
        annotations: Some(BTreeMap::from([(
            PAUSED_ANNOTATION.to_string(),
            "true".to_string(),
        )])),
        ..Default::default()
    };
    create(&env, &later).await;
    env.api::<Snapshot>()
        .delete("snap", &DeleteParams::default())
        .await
        .unwrap();
    let held: Snapshot = condition(&env, "snap", "Reconciling", "True", "Deleting").await;
    assert!(
        ready_message(&held).contains("later"),
        "{}",
        ready_message(&held)
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        env.api::<Snapshot>()
            .get_opt("snap")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(env.calls("DeleteSnapshot"), 0);

    env.api::<GpuInstance>()
        .patch(
            "later",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {PAUSED_ANNOTATION: null}}}),
            ),
        )
        .await
        .unwrap();
    let later: GpuInstance = ready(&env, "later").await;
    assert_eq!(
        later.status.unwrap().source_snapshot_id.as_deref(),
        Some(snapshot_id.as_str())
    );
    gone::<Snapshot>(&env, "snap").await;
    assert!(env.simulator.state().snapshots.is_empty());
    assert!(
        env.simulator
            .state()
            .deleted_snapshot_ids
            .contains(&snapshot_id)
    );
    env.stop_operator().await;
}

/// The Snapshot is deleted while the cloud is still making it, with a machine to be restored
/// from it: the deletion waits for the restore, and the restore must not wait for a state the
/// deleting Snapshot no longer records (found by the chaos runs: both waited for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_deleted_while_still_creating_lets_its_restore_finish() {
    let mut env = Env::start_with_slow_snapshots(3).await;
    create(&env, &machine("src", serde_json::json!({}))).await;
    ready::<GpuInstance>(&env, "src").await;
    create(&env, &snapshot_of("snap", "src")).await;
    let api = env.api::<Snapshot>();
    let creating = eventually(20, "the snapshot recorded, still creating", || {
        let api = api.clone();
        async move {
            let snapshot = api.get("snap").await.ok()?;
            let status = snapshot.cloud_status();
            (status.external_id.is_some() && status.state.as_deref() == Some("creating"))
                .then_some(snapshot)
        }
    })
    .await;
    let snapshot_id = creating.cloud_status().external_id.unwrap();
    create(&env, &restored("copy", "snap")).await;
    api.delete("snap", &DeleteParams::default()).await.unwrap();
    let held: Snapshot = condition(&env, "snap", "Reconciling", "True", "Deleting").await;
    assert!(
        ready_message(&held).contains("copy"),
        "{}",
        ready_message(&held)
    );

    let copy: GpuInstance = ready(&env, "copy").await;
    assert_eq!(
        copy.status.unwrap().source_snapshot_id.as_deref(),
        Some(snapshot_id.as_str())
    );
    gone::<Snapshot>(&env, "snap").await;
    assert!(env.simulator.state().snapshots.is_empty());
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_and_images_are_orphaned_adopted_and_deleted_idempotently() {
    let mut env = Env::start().await;
    create(&env, &machine("src", serde_json::json!({}))).await;
    let mut keep: Snapshot = snapshot_of("keep", "src");
    keep.spec.managed.deletion_policy = DeletionPolicy::Orphan;
    create(&env, &keep).await;
    let kept: Snapshot = ready(&env, "keep").await;
    let snapshot_id = kept.cloud_status().external_id.unwrap();
    create(&env, &image_of("img", "keep")).await;
    let image: Image = ready(&env, "img").await;
    let image_id = image.cloud_status().external_id.unwrap();
    // The Image is orphaned too, then both are adopted by new objects.
    env.api::<Image>()
        .patch(
            "img",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"deletionPolicy": "Orphan"}})),
        )
        .await
        .unwrap();
    ready::<Image>(&env, "img").await;
    env.api::<Image>()
        .delete("img", &DeleteParams::default())
        .await
        .unwrap();
    env.api::<Snapshot>()
        .delete("keep", &DeleteParams::default())
        .await
        .unwrap();
    gone::<Image>(&env, "img").await;
    gone::<Snapshot>(&env, "keep").await;
    let cloud = env.simulator.state();
    assert_eq!(cloud.snapshots.len(), 1);
    assert_eq!(cloud.images.len(), 1);

    let adopt = |name: &str, id: &str| ObjectMeta {
        name: Some(name.into()),
        annotations: Some(BTreeMap::from([(
            EXTERNAL_ID_ANNOTATION.to_string(),
            id.to_string(),
        )])),
        ..Default::default()
    };
    let mut snapshot = snapshot_of("adopted", "src");
    snapshot.metadata = adopt("adopted", &snapshot_id);
    create(&env, &snapshot).await;
    let mut image = image_of("adopted-img", "adopted");
    image.metadata = adopt("adopted-img", &image_id);
    create(&env, &image).await;
    ready::<Snapshot>(&env, "adopted").await;
    ready::<Image>(&env, "adopted-img").await;
    assert_eq!(env.calls("CreateSnapshot"), 1);
    assert_eq!(env.calls("CreateImage"), 1);

    // The image goes first, then the snapshot; a snapshot already deleted in the cloud is
    // deleted again without error.
    support::delete_and_wait::<Image>(&env, "adopted-img").await;
    support::delete_and_wait::<Snapshot>(&env, "adopted").await;
    let cloud = env.simulator.state();
    assert!(cloud.snapshots.is_empty() && cloud.images.is_empty());
    assert!(
        cloud_client(&env)
            .delete_snapshot(&snapshot_id)
            .await
            .is_ok()
    );
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_responses_of_snapshot_restore_and_image_creates_yield_one_resource_each() {
    let simulator = SimulatorConfig {
        faults: FaultPlan {
            act_then_drop: BTreeMap::from([
                ("CreateSnapshot".to_string(), 1.0),
                ("RestoreSnapshot".to_string(), 1.0),
                ("CreateImage".to_string(), 1.0),
                ("CreateVolume".to_string(), 1.0),
                ("CreateFirewall".to_string(), 1.0),
            ]),
            drop_mode: DropMode::Delay {
                delay: Duration::from_secs(60),
            },
            ..FaultPlan::default()
        },
        list_lag: Duration::from_secs(2),
        ..SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    let mut config = test_config(&env.simulator);
    config.cloud.timeout = Duration::from_millis(700);
    config.reconcile.settle_window = Duration::from_secs(4);
    env.start_operator(config);

    create(&env, &machine("src", serde_json::json!({}))).await;
    create(&env, &snapshot_of("snap", "src")).await;
    create(&env, &restored("copy", "snap")).await;
    create(&env, &image_of("img", "snap")).await;
    create::<Volume>(
        &env,
        &object(
            "vol",
            serde_json::json!({"region": "us-east-1", "sizeGb": 5}),
        ),
    )
    .await;
    create::<Firewall>(
        &env,
        &object("fw", serde_json::json!({"region": "us-east-1"})),
    )
    .await;
    for name in ["src", "copy"] {
        ready::<GpuInstance>(&env, name).await;
    }
    ready::<Snapshot>(&env, "snap").await;
    ready::<Image>(&env, "img").await;
    ready::<Volume>(&env, "vol").await;
    ready::<Firewall>(&env, "fw").await;
    let cloud = env.simulator.state();
    assert_eq!(cloud.instances.len(), 2, "{:?}", cloud.instances);
    assert_eq!(cloud.snapshots.len(), 1);
    assert_eq!(cloud.images.len(), 1);
    assert_eq!(data_volumes(&env).len(), 1);
    assert_eq!(cloud.firewalls.len(), 1);
    env.stop_operator().await;
}

/// A resource created and recorded but gone before any list showed it is not waited for for
/// ever: once the create's settle window has passed and a read by id finds nothing, it is
/// treated as gone (here an Image whose snapshot was deleted with it says `SourceDeleted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_gone_before_any_list_showed_it_says_so() {
    let mut env = Env::start().await;
    create(&env, &machine("src", serde_json::json!({}))).await;
    create(&env, &snapshot_of("snap", "src")).await;
    let snapshot: Snapshot = ready(&env, "snap").await;
    let snapshot_id = snapshot.cloud_status().external_id.unwrap();
    // From now on no list shows anything: the image is never listed.
    env.simulator.set_faults(FaultPlan {
        list_omission_rate: 1.0,
        ..FaultPlan::default()
    });
    create(&env, &image_of("img", "snap")).await;
    let api = env.api::<Image>();
    eventually(30, "the image's id recorded", || {
        let api = api.clone();
        async move {
            let image = api.get("img").await.ok()?;
            image.cloud_status().external_id.clone()
        }
    })
    .await;
    // Deleted outside the operator, with the image, within the create's settle window.
    cloud_client(&env)
        .delete_snapshot(&snapshot_id)
        .await
        .unwrap();
    assert!(env.simulator.state().images.is_empty());
    let gone: Image = condition(&env, "img", "Stalled", "True", "SourceDeleted").await;
    assert!(
        ready_message(&gone).contains("snap"),
        "{}",
        ready_message(&gone)
    );
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_by_cloud_id_and_refused_restores() {
    let mut env = Env::start().await;
    let foreign = machine_by_hand(&env, "made-by-hand").await;
    create::<Snapshot>(
        &env,
        &object(
            "by-id",
            serde_json::json!({"instanceId": foreign.instance_id}),
        ),
    )
    .await;
    let snapshot: Snapshot = ready(&env, "by-id").await;
    assert_eq!(
        snapshot.status.unwrap().source_instance_id.as_deref(),
        Some(foreign.instance_id.as_str())
    );

    // An id the cloud does not know is a spec error, not a wait.
    create::<Snapshot>(
        &env,
        &object(
            "unknown",
            serde_json::json!({"instanceId": "vm-ffffffffffff"}),
        ),
    )
    .await;
    let refused: Snapshot = condition(&env, "unknown", "Stalled", "True", "InvalidSpec").await;
    assert!(
        ready_message(&refused).contains("vm-ffffffffffff"),
        "{}",
        ready_message(&refused)
    );

    // A restore is in the snapshot's region: another region in the spec is refused.
    let mut elsewhere = restored("elsewhere", "by-id");
    elsewhere.spec.region = Some("eu-west-1".into());
    create(&env, &elsewhere).await;
    let refused: GpuInstance = condition(&env, "elsewhere", "Stalled", "True", "InvalidSpec").await;
    assert!(
        ready_message(&refused).contains("us-east-1"),
        "{}",
        ready_message(&refused)
    );
    assert_eq!(env.calls("RestoreSnapshot"), 0);

    // Both sources at once, or none, is refused at admission.
    let both = env
        .api::<Snapshot>()
        .create(
            &Default::default(),
            &object::<Snapshot>(
                "both",
                serde_json::json!({"instanceId": "vm-1", "instanceRef": {"name": "x"}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        both.to_string()
            .contains("exactly one of instanceRef and instanceId"),
        "{both}"
    );
    env.stop_operator().await;
}
