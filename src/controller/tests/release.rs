#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `gpucloud-operator release`, the last step of removing the operator for good: refused while
//! a replica holds the lease; with the operator stopped, every object is let go of with
//! `Orphan` semantics, so deleting the objects no longer waits on anyone and the cloud keeps
//! (and the released record names) what they managed.

use crate::support;

use gpucloud_api::*;
use gpucloud_controller::accounts::orphans::RELEASED_CONFIGMAP;
use gpucloud_controller::tools::release::{self, Args, Error, Released};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use support::{Env, NAMESPACE, OPERATOR_NAMESPACE, create, object, ready_id};

fn args() -> Args {
    Args {
        all: true,
        namespace: Vec::new(),
        operator_namespace: OPERATOR_NAMESPACE.into(),
        lease_name: "gpucloud-operator".into(),
        force: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_lets_go_of_every_object_and_leaves_the_cloud_as_it_was() {
    let mut env = Env::start().await;
    let instance: GpuInstance = object(
        "train-1",
        serde_json::json!({"region": "us-east-1", "gpuType": "A100-80G", "gpuCount": 1,
                           "osImage": "ubuntu-22.04-cuda-12"}),
    );
    let volume: Volume = object(
        "data",
        serde_json::json!({"region": "us-east-1", "sizeGb": 50}),
    );
    create(&env, &instance).await;
    create(&env, &volume).await;
    let instance_id = ready_id::<GpuInstance>(&env, "train-1").await;
    let volume_id = ready_id::<Volume>(&env, "data").await;

    // A replica holds the lease (renewed just now): refused, nothing touched.
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), OPERATOR_NAMESPACE);
    let mut lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpucloud-operator"},
        "spec": {"holderIdentity": "gpucloud-operator-7d9f-abcde", "leaseDurationSeconds": 15},
    }))
    .unwrap();
    lease.spec.as_mut().unwrap().renew_time = Some(MicroTime(Timestamp::now()));
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let refused = release::release(&env.client, &args()).await.unwrap_err();
    assert!(
        matches!(refused, Error::OperatorRunning { .. }),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("gpucloud-operator-7d9f-abcde"),
        "{refused}"
    );
    let still: GpuInstance = env.api().get("train-1").await.unwrap();
    assert!(still.finalizers().iter().any(|f| f == FINALIZER));

    // The operator stopped, its lease handed back.
    env.stop_operator().await;
    let handed_back = serde_json::json!({"spec": {"holderIdentity": null}});
    leases
        .patch(
            "gpucloud-operator",
            &PatchParams::default(),
            &Patch::Merge(&handed_back),
        )
        .await
        .unwrap();
    let mut released = release::release(&env.client, &args()).await.unwrap();
    released.sort_by(|a, b| a.kind.cmp(&b.kind));
    let expected = |kind: &str, name: &str, id: &str| Released {
        kind: kind.into(),
        namespace: NAMESPACE.into(),
        name: name.into(),
        external_id: Some(id.into()),
    };
    assert_eq!(
        released,
        [
            expected("GpuInstance", "train-1", &instance_id),
            expected("Volume", "data", &volume_id),
        ]
    );
    // Nothing more to let go of: a second run releases nothing.
    assert!(
        release::release(&env.client, &args())
            .await
            .unwrap()
            .is_empty()
    );

    // The record names what stayed in the cloud, so a later sweeper leaves it alone.
    let record: ConfigMap = Api::namespaced(env.client.clone(), OPERATOR_NAMESPACE)
        .get(RELEASED_CONFIGMAP)
        .await
        .unwrap();
    let keys: Vec<String> = record.data.unwrap().into_keys().collect();
    for id in [&instance_id, &volume_id] {
        assert!(keys.contains(&format!("id.{id}")), "{id} not in {keys:?}");
    }

    // The objects go at once, with no operator; their resources stay in the cloud.
    let instances = env.api::<GpuInstance>();
    let volumes = env.api::<Volume>();
    instances
        .delete("train-1", &DeleteParams::default())
        .await
        .unwrap();
    volumes
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    assert!(instances.get_opt("train-1").await.unwrap().is_none());
    assert!(volumes.get_opt("data").await.unwrap().is_none());
    let cloud = support::cloud_client(&env);
    let machines = cloud.list_instances().await.unwrap().instances;
    assert!(machines.iter().any(|m| m.instance_id == instance_id));
    assert!(
        support::data_volumes(&env)
            .iter()
            .any(|v| v.id == volume_id)
    );
    assert_eq!(env.calls("DeleteInstance"), 0);
    assert_eq!(env.calls("DeleteVolume"), 0);
}
