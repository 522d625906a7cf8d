#![allow(clippy::unwrap_used, clippy::expect_used)]
//! GpuInstance and SshKey from create to delete, through the embedded API server and the
//! cloud simulator, with the operator running in-process.

use crate::support;

use gpucloud_api::*;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use support::{Env, eventually, ready};

fn instance(name: &str, keys: &[&str]) -> GpuInstance {
    let mut spec: GpuInstanceSpec = serde_json::from_value(serde_json::json!({
        "region": "us-east-1",
        "gpuType": "H100-80G",
        "gpuCount": 1,
        "osImage": "ubuntu-22.04-cuda-12",
    }))
    .unwrap();
    spec.ssh_key_refs = keys
        .iter()
        .map(|k| LocalRef { name: (*k).into() })
        .collect();
    GpuInstance::new(name, spec)
}

fn generated_key(name: &str) -> SshKey {
    SshKey::new(name, serde_json::from_value(serde_json::json!({})).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_with_generated_key_reaches_ready_and_delete_leaves_the_account_empty() {
    let mut env = Env::start().await;
    env.api::<SshKey>()
        .create(&PostParams::default(), &generated_key("dev-key"))
        .await
        .unwrap();
    let mut vm = instance("train-1", &["dev-key"]);
    vm.spec.connection_secret = Some("train-1-ssh".into());
    env.api::<GpuInstance>()
        .create(&PostParams::default(), &vm)
        .await
        .unwrap();

    let key: SshKey = ready(&env, "dev-key").await;
    let key_status = key.status.clone().unwrap();
    assert_eq!(key_status.generated, Some(true));
    let secret_name = key_status.private_key_secret.clone().unwrap();
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = env.api();
    let secret = secrets.get(&secret_name).await.unwrap();
    let private = secret.data.as_ref().unwrap().get("ssh-privatekey").unwrap();
    assert!(String::from_utf8_lossy(&private.0).contains("OPENSSH PRIVATE KEY"));
    assert_eq!(
        secret.metadata.owner_references.as_ref().unwrap()[0].uid,
        key.metadata.uid.clone().unwrap()
    );

    let vm: GpuInstance = ready(&env, "train-1").await;
    let status = vm.status.clone().unwrap();
    let cloud_id = status.cloud.external_id.clone().unwrap();
    assert_eq!(status.cloud.state.as_deref(), Some("ACTIVE"));
    assert_eq!(status.vm_status.as_deref(), Some("RUNNING"));
    assert_eq!(status.specs.as_ref().unwrap().gpu_type, "H100-80G");
    assert!(status.hourly_rate.unwrap() > 0.0);
    assert!(status.ip_address.is_some());
    assert!(
        vm.metadata
            .finalizers
            .as_ref()
            .unwrap()
            .contains(&FINALIZER.to_string())
    );

    let cloud = env.simulator.state();
    assert_eq!(cloud.instances.len(), 1, "exactly one instance");
    assert_eq!(cloud.instances[0].instance_id, cloud_id);
    assert_eq!(
        cloud.instances[0].ssh_key_ids,
        vec![key_status.cloud.external_id.clone().unwrap()]
    );
    assert_eq!(cloud.ssh_keys.len(), 1);
    assert_eq!(
        cloud.ssh_keys[0].public_key.trim(),
        String::from_utf8_lossy(&secret.data.as_ref().unwrap()["ssh-publickey"].0).trim()
    );

    // The connection Secret lets a Pod reach the machine with the generated key.
    the_connection_secret_reaches_the_machine(&env, &vm, &private.0).await;

    power_round_trip(&env).await;

    let api = env.api::<GpuInstance>();
    // Delete: the finalizer holds the object until the cloud resource is gone.
    api.delete("train-1", &DeleteParams::default())
        .await
        .unwrap();
    env.api::<SshKey>()
        .delete("dev-key", &DeleteParams::default())
        .await
        .unwrap();
    eventually(60, "objects gone", || async {
        let vm = env.api::<GpuInstance>().get_opt("train-1").await.unwrap();
        let key = env.api::<SshKey>().get_opt("dev-key").await.unwrap();
        (vm.is_none() && key.is_none()).then_some(())
    })
    .await;
    let cloud = env.simulator.state();
    assert!(
        cloud.instances.is_empty(),
        "instance left in the cloud: {:?}",
        cloud.instances
    );
    assert!(cloud.ssh_keys.is_empty(), "key left in the cloud");
    // The Secrets holding the private key go with the objects that own them.
    eventually(30, "private-key Secrets garbage-collected", || async {
        let connection = secrets.get_opt("train-1-ssh").await.unwrap();
        let key = secrets.get_opt(&secret_name).await.unwrap();
        (connection.is_none() && key.is_none()).then_some(())
    })
    .await;
    env.stop_operator().await;
}

/// `train-1-ssh`, owned by the machine `vm`, holds its address, port, user and the
/// generated `private` key.
async fn the_connection_secret_reaches_the_machine(env: &Env, vm: &GpuInstance, private: &[u8]) {
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = env.api();
    let status = vm.status.clone().unwrap();
    let connection = secrets.get("train-1-ssh").await.unwrap();
    let data = connection.data.clone().unwrap();
    let text = |k: &str| String::from_utf8_lossy(&data[k].0).into_owned();
    assert_eq!(text("host"), status.ip_address.clone().unwrap());
    assert_eq!(text("port"), "22");
    assert_eq!(text("user"), "ubuntu");
    assert_eq!(text("ssh-privatekey"), String::from_utf8_lossy(private));
    assert_eq!(
        connection.metadata.owner_references.as_ref().unwrap()[0].uid,
        vm.metadata.uid.clone().unwrap()
    );
}

/// `train-1` stopped (SHUTOFF in the cloud, Ready) and running again.
async fn power_round_trip(env: &Env) {
    let api = env.api::<GpuInstance>();
    api.patch(
        "train-1",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"powerState": "Stopped"}})),
    )
    .await
    .unwrap();
    eventually(60, "instance SHUTOFF in the cloud", || async {
        let cloud = env.simulator.state();
        (cloud.instances[0].status.as_str() == "SHUTOFF").then_some(())
    })
    .await;
    let stopped: GpuInstance = ready(env, "train-1").await;
    assert_eq!(
        stopped.status.unwrap().cloud.state.as_deref(),
        Some("SHUTOFF")
    );
    api.patch(
        "train-1",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"powerState": "Running"}})),
    )
    .await
    .unwrap();
    eventually(60, "instance running again", || async {
        let cloud = env.simulator.state();
        (cloud.instances[0].vm_status.as_str() == "RUNNING").then_some(())
    })
    .await;
}

/// What an instance's life writes to its own object: the finalizer added with the create's
/// intent (one patch) and removed, the id once listed, Ready, and Deleting when the deletion
/// outlasts a transition interval, at most one status write per step; the states the machine
/// passes through while it boots are not written one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_from_create_to_deleted_writes_its_object_only_with_news() {
    let env = Env::start().await;
    env.api::<GpuInstance>()
        .create(&PostParams::default(), &instance("frugal", &[]))
        .await
        .unwrap();
    let _: GpuInstance = ready(&env, "frugal").await;
    support::delete_and_wait::<GpuInstance>(&env, "frugal").await;
    let writes = |subresource: &str| {
        env.apiserver
            .requests()
            .into_iter()
            .filter(|r| {
                r.resource == "gpuinstances"
                    && r.name == "frugal"
                    && r.subresource == subresource
                    && matches!(r.verb.as_str(), "update" | "patch")
            })
            .count()
    };
    // A write refused with 409 (sent from a cache a moment behind) changed nothing: the
    // object is the only GpuInstance, so every such answer was about it.
    let refused = |subresource: &str| {
        env.apiserver
            .request_counts()
            .into_iter()
            .filter(|c| {
                c.resource == "gpuinstances"
                    && c.subresource == subresource
                    && matches!(c.verb.as_str(), "update" | "patch")
                    && c.code == 409
            })
            .map(|c| c.count as usize)
            .sum::<usize>()
    };
    assert_eq!(
        writes("") - refused(""),
        2,
        "the finalizer, added with the create's intent and removed"
    );
    let status_writes = writes("status") - refused("status");
    assert!(
        (1..=3).contains(&status_writes),
        "{status_writes} status writes: the id (with Ready when the first list shows the \
         machine running), Ready, Deleting (when the deletion lasts)"
    );
}

/// With the API server's watch 400 ms behind its writes (a loaded server's watch cache), a
/// reconcile that closely follows one of the operator's own writes works from that write, not
/// from the store's older copy: machines with volumes attached and a snapshot each reach Ready
/// with no status write answered 409 Conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_watch_does_not_make_the_operators_own_writes_conflict() {
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    env.apiserver
        .faults()
        .set_plan(gpucloud_apiserver::faults::ApiFaultPlan {
            watch_delay: std::time::Duration::from_millis(400),
            ..Default::default()
        })
        .unwrap();
    env.start_operator(support::test_config(&env.simulator));
    for machine in ["lag-a", "lag-b"] {
        support::create(&env, &instance(machine, &[])).await;
        for disk in 0..2 {
            let volume: Volume = support::object(
                &format!("{machine}-disk-{disk}"),
                serde_json::json!({
                    "region": "us-east-1", "sizeGb": 10, "instanceRef": {"name": machine},
                }),
            );
            support::create(&env, &volume).await;
        }
        let snapshot: Snapshot = support::object(
            &format!("{machine}-checkpoint"),
            serde_json::json!({"instanceRef": {"name": machine}}),
        );
        support::create(&env, &snapshot).await;
    }
    for machine in ["lag-a", "lag-b"] {
        let _: GpuInstance = ready(&env, machine).await;
        let _: Snapshot = ready(&env, &format!("{machine}-checkpoint")).await;
        for disk in 0..2 {
            let _: Volume = ready(&env, &format!("{machine}-disk-{disk}")).await;
        }
    }
    let conflicts: Vec<String> = env
        .apiserver
        .request_counts()
        .into_iter()
        .filter(|c| c.code == 409)
        .map(|c| format!("{} {}/{}: {}", c.verb, c.resource, c.subresource, c.count))
        .collect();
    assert!(conflicts.is_empty(), "writes answered 409: {conflicts:?}");
    env.stop_operator().await;
}
