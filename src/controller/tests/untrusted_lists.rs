#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Cloud lists that leave out resources that exist (a lagging index, a pagination fault, a
//! proxy): nothing irreversible follows from one list's silence. A recorded resource missing
//! from the lists is read by id before it is reported deleted, created again, or its deletion
//! taken as done.

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
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Managed
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
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
    let id = ready::<Volume>(&env, "data")
        .await
        .cloud_status()
        .external_id
        .unwrap();

    omit_from_lists(&env, &id, 5).await;
    assert_eq!(
        ready_condition::<Volume>(&env, "data").await,
        ("True".to_string(), "Available".to_string()),
        "a volume only left out of lists is not deleted outside the operator"
    );

    env.api::<Volume>()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    gone::<Volume>(&env, "data").await;
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
    let firewall_id = ready::<Firewall>(&env, "edge")
        .await
        .cloud_status()
        .external_id
        .unwrap();
    let key_id = ready::<SshKey>(&env, "dev")
        .await
        .cloud_status()
        .external_id
        .unwrap();

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
