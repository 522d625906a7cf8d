#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A cloud whose lists leave out resources that exist (a lagging index, a pagination fault, a
//! proxy), or that carries out a create long after the client gave up: nothing irreversible
//! follows from one list's silence (a recorded resource missing from the lists is read by id
//! before it is reported deleted, created again, or its deletion taken as done), a duplicate
//! left by a late create is reported, then removed, and a resource a late create makes after
//! its object's deletion has ended is deleted.

use crate::support;

use gpucloud_api::*;
use gpucloud_simulator::FaultPlan;
use kube::api::DeleteParams;
use std::collections::BTreeSet;
use support::*;

/// Leaves `id` out of every list from now on, and waits until at least `lists` lists did.
async fn omit_from_lists(env: &Env, id: &str, lists: u64) {
    let before = env.simulator.fault_counts().omitted_from_lists;
    env.simulator.set_faults(FaultPlan {
        omit_from_lists: BTreeSet::from([id.to_string()]),
        ..FaultPlan::default()
    });
    eventually(30, &format!("{lists} lists without {id}"), || async {
        (env.simulator.fault_counts().omitted_from_lists >= before + lists).then_some(())
    })
    .await;
}

/// The object's `Ready` condition, as `(status, reason)`.
async fn ready_condition<K>(env: &Env, name: &str) -> (String, String)
where
    K: crate::support::TestKind,
{
    let object = env.api::<K>().get(name).await.unwrap();
    let ready = object
        .cloud_status()
        .condition(condition_type::READY)
        .cloned()
        .unwrap();
    (ready.status, ready.reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_left_out_of_lists_stays_ready_and_is_deleted_for_real() {
    let env = Env::start().await;
    let volume: Volume = object(
        "data",
        serde_json::json!({"region": "us-east-1", "sizeGb": 10}),
    );
    create(&env, &volume).await;
    let id = ready_id::<Volume>(&env, "data").await;

    omit_from_lists(&env, &id, 5).await;
    assert_eq!(
        ready_condition::<Volume>(&env, "data").await,
        ("True".to_string(), "Available".to_string()),
        "a volume only left out of lists is not deleted outside the operator"
    );

    support::delete_and_wait::<Volume>(&env, "data").await;
    assert_eq!(env.calls("DeleteVolume"), 1, "the delete was sent");
    assert!(
        data_volumes(&env).is_empty(),
        "the volume is gone from the cloud, not only from its lists"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firewall_and_a_key_left_out_of_lists_are_not_created_twice() {
    let env = Env::start().await;
    let firewall: Firewall = object("edge", serde_json::json!({"region": "us-east-1"}));
    let key: SshKey = object("dev", serde_json::json!({}));
    create(&env, &firewall).await;
    create(&env, &key).await;
    let firewall_id = ready_id::<Firewall>(&env, "edge").await;
    let key_id = ready_id::<SshKey>(&env, "dev").await;

    let before = env.simulator.fault_counts().omitted_from_lists;
    env.simulator.set_faults(FaultPlan {
        omit_from_lists: BTreeSet::from([firewall_id.clone(), key_id.clone()]),
        ..FaultPlan::default()
    });
    eventually(30, "lists without the firewall and the key", || async {
        (env.simulator.fault_counts().omitted_from_lists >= before + 10).then_some(())
    })
    .await;

    assert_eq!(env.calls("CreateFirewall"), 1, "no second firewall");
    assert_eq!(env.calls("CreateSshKey"), 1, "no second key");
    let state = env.simulator.state();
    assert_eq!(state.firewalls.len(), 1);
    assert_eq!(state.ssh_keys.len(), 1);
    assert_eq!(
        ready_condition::<Firewall>(&env, "edge").await.0,
        "True",
        "the firewall stays Ready"
    );
    assert_eq!(ready_condition::<SshKey>(&env, "dev").await.0, "True");

    env.api::<Firewall>()
        .delete("edge", &DeleteParams::default())
        .await
        .unwrap();
    env.api::<SshKey>()
        .delete("dev", &DeleteParams::default())
        .await
        .unwrap();
    gone::<Firewall>(&env, "edge").await;
    gone::<SshKey>(&env, "dev").await;
    assert_eq!(env.calls("DeleteFirewall"), 1);
    assert_eq!(env.calls("DeleteSshKey"), 1);
    let state = env.simulator.state();
    assert!(state.firewalls.is_empty() && state.ssh_keys.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_the_cloud_carries_out_late_leaves_a_duplicate_that_is_reported_then_removed() {
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let mut config = test_config(&env.simulator);
    config.reconcile.duplicates.delete = false;
    env.start_operator(config.clone());

    // The first create is carried out 30 s after it was sent: 25 s after the client (5 s
    // timeout) gave up on it, long past the settle window (2 s); the retry goes through.
    env.simulator.set_faults(FaultPlan {
        latency_ms_per_operation: [("CreateVolume".to_string(), 30_000)].into(),
        ..FaultPlan::default()
    });
    let volume: Volume = object(
        "data",
        serde_json::json!({"region": "us-east-1", "sizeGb": 10}),
    );
    create(&env, &volume).await;
    // The simulator counts a call when it answers: the intent recorded, the call follows at
    // once, and it is in (its delay decided on arrival) well before the client gives up.
    let api = env.api::<Volume>();
    eventually(10, "the create intent recorded", || {
        let api = api.clone();
        async move {
            let volume = api.get("data").await.ok()?;
            volume.cloud_status().pending_create.map(|_| ())
        }
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    env.simulator.set_faults(FaultPlan::default());
    let recorded = ready_id::<Volume>(&env, "data").await;
    eventually(45, "the late create carried out", || async {
        (data_volumes(&env).len() == 2).then_some(())
    })
    .await;
    eventually(20, "the duplicate reported", || async {
        event_reasons(&env, "data")
            .await
            .contains(&"DuplicateFound".to_string())
            .then_some(())
    })
    .await;

    // With deletion off it stays, well past the grace period (3 s in the tests' settings).
    tokio::time::sleep(config.reconcile.duplicates.grace_period * 3).await;
    assert_eq!(data_volumes(&env).len(), 2, "deletion is off: left alone");
    assert_eq!(env.calls("DeleteVolume"), 0);
    // The orphan sweeper reports it as a duplicate, not as an orphan.
    let duplicate = data_volumes(&env)
        .into_iter()
        .find(|v| v.id != recorded)
        .unwrap();
    let report = crate::orphans::sweeper(&env, std::time::Duration::ZERO, false)
        .sweep()
        .await
        .unwrap();
    let reported: Vec<&str> = report.duplicates.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(reported, [duplicate.id.as_str()]);
    assert!(report.orphans.is_empty(), "{:?}", report.orphans);

    // With deletion on, it goes after the grace period; the recorded volume stays.
    env.stop_operator().await;
    config.reconcile.duplicates.delete = true;
    env.start_operator(config);
    eventually(30, "the duplicate deleted", || async {
        let volumes = data_volumes(&env);
        (volumes.len() == 1 && volumes[0].id == recorded).then_some(())
    })
    .await;
    assert_eq!(env.calls("DeleteVolume"), 1);
    eventually(10, "the deletion reported", || async {
        event_reasons(&env, "data")
            .await
            .contains(&"DuplicateDeleted".to_string())
            .then_some(())
    })
    .await;
    ready::<Volume>(&env, "data").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_the_cloud_carries_out_after_its_objects_deletion_is_deleted_then() {
    let env = Env::start().await;
    // The create is carried out 15 s after it was sent: the client (5 s timeout) gives up,
    // and the deletion that follows ends, from lists that show nothing, before it lands.
    env.simulator.set_faults(FaultPlan {
        act_late: [("gco-".to_string(), 15_000)].into(),
        ..FaultPlan::default()
    });
    let volume: Volume = object(
        "late",
        serde_json::json!({"region": "us-east-1", "sizeGb": 10}),
    );
    create(&env, &volume).await;
    eventually(10, "the create held by the cloud", || async {
        (env.simulator.fault_counts().late_acts == 1).then_some(())
    })
    .await;
    delete_and_wait::<Volume>(&env, "late").await;
    assert!(
        data_volumes(&env).is_empty(),
        "the deletion ended before the late create landed"
    );
    assert_eq!(env.calls("DeleteVolume"), 0);

    // It lands with no object left to claim it, and is deleted at the next list.
    eventually(30, "the late volume made", || async {
        (env.simulator.fault_counts().late_acts_done == 1).then_some(())
    })
    .await;
    eventually(20, "the late volume deleted", || async {
        (data_volumes(&env).is_empty() && env.calls("DeleteVolume") == 1).then_some(())
    })
    .await;
    eventually(10, "the deleted object told of it", || async {
        event_reasons(&env, "late")
            .await
            .contains(&"LateResourceDeleted".to_string())
            .then_some(())
    })
    .await;
}

/// A machine `unlisted` created under a cloud whose lists leave out everything.
async fn unlisted_machine() -> Env {
    let env = Env::start().await;
    env.simulator.set_faults(FaultPlan {
        list_omission_rate: 1.0,
        ..FaultPlan::default()
    });
    let vm: GpuInstance = object(
        "unlisted",
        serde_json::json!({
            "region": "us-east-1",
            "gpuType": "H100-80G",
            "osImage": "ubuntu-22.04-cuda-12",
        }),
    );
    create(&env, &vm).await;
    env
}

/// A machine whose create the cloud answered, and which no list shows: the settle window
/// passes with the name missing from two lists, yet it is not created again. The id the create
/// answered with is read first, found, and recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_machine_no_list_shows_is_read_by_id_not_created_again() {
    let env = unlisted_machine().await;
    let id = ready_id::<GpuInstance>(&env, "unlisted").await;
    env.simulator.set_faults(FaultPlan::default());
    assert_eq!(env.calls("CreateInstance"), 1, "created again");
    let machines: Vec<String> = env
        .simulator
        .state()
        .instances
        .into_iter()
        .map(|i| i.instance_id)
        .collect();
    assert_eq!(machines, vec![id]);
    support::delete_and_wait::<GpuInstance>(&env, "unlisted").await;
}

/// A machine whose create the cloud answered, deleted before any list showed it: its deletion
/// is not taken as done from the lists' silence, past the settle window and with a second list
/// silent too. The id the create answered with is read, and the machine deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_machine_no_list_shows_is_deleted_with_its_object() {
    let env = unlisted_machine().await;
    eventually(30, "the machine created", || async {
        (env.simulator.state().instances.len() == 1).then_some(())
    })
    .await;
    support::delete_and_wait::<GpuInstance>(&env, "unlisted").await;
    let left: Vec<String> = env
        .simulator
        .state()
        .instances
        .into_iter()
        .map(|i| format!("{} {}", i.instance_id, i.status.as_str()))
        .collect();
    assert!(
        left.iter().all(|m| m.ends_with("DELETING")) && env.calls("DeleteInstance") == 1,
        "left in the cloud: {left:?}, {} deletes",
        env.calls("DeleteInstance")
    );
    assert_eq!(env.calls("CreateInstance"), 1, "created again");
}
