#![allow(clippy::unwrap_used, clippy::expect_used)]
//! An object the API server holds but the operator's type cannot read (stored under a looser
//! schema) is reported on, with a Warning Event, and left alone; every other object of its
//! kind is reconciled as usual. Without that guard the kind's whole list fails to decode, and
//! the watch retries it forever.

use crate::support::*;
use gpucloud_api::SshKey;
use gpucloud_simulator::SimulatorConfig;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

/// The SshKey CRD with a spec of any shape: what an older or looser schema let in.
pub(crate) async fn loosen_ssh_key_schema(env: &Env) {
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd = crds.get("sshkeys.gpucloud.io").await.unwrap();
    let mut crd = serde_json::to_value(crd).unwrap();
    for version in crd["spec"]["versions"].as_array_mut().unwrap() {
        version["schema"]["openAPIV3Schema"]["properties"]["spec"] =
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    }
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    crds.replace("sshkeys.gpucloud.io", &PostParams::default(), &crd)
        .await
        .unwrap();
}

/// Creates the SshKey `name` with a number where the type reads a string (the schema loosened
/// first); returns the API the object can be read and changed with.
pub(crate) async fn create_unreadable_ssh_key(env: &Env, name: &str) -> Api<DynamicObject> {
    let dynamic: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        NAMESPACE,
        &ApiResource::erase::<SshKey>(&()),
    );
    let unreadable: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": "SshKey",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"publicKey": 42}
    }))
    .unwrap();
    dynamic
        .create(&PostParams::default(), &unreadable)
        .await
        .unwrap();
    dynamic
}

/// The InvalidObject events about `name`: (type, note, series count).
async fn invalid_object_events(env: &Env, name: &str) -> Vec<(String, String, i32)> {
    events_about(
        env,
        name,
        gpucloud_controller::runtime::decode::INVALID_OBJECT,
    )
    .await
    .into_iter()
    .map(|e| {
        (
            e.type_.unwrap_or_default(),
            e.note.unwrap_or_default(),
            e.series.map_or(1, |s| s.count),
        )
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_does_not_decode_stalls_no_other() {
    let mut env = Env::without_operator(SimulatorConfig::default()).await;
    loosen_ssh_key_schema(&env).await;
    let dynamic = create_unreadable_ssh_key(&env, "unreadable").await;
    create(&env, &object::<SshKey>("readable", json!({}))).await;

    // Both are in the operator's first list.
    env.start_operator(test_config(&env.simulator));
    ready::<SshKey>(&env, "readable").await;
    let events = eventually(
        30,
        "an InvalidObject event on the unreadable SshKey",
        || {
            let env = &env;
            async move {
                let events = invalid_object_events(env, "unreadable").await;
                (!events.is_empty()).then_some(events)
            }
        },
    )
    .await;
    let (type_, note, count) = &events[0];
    assert_eq!(type_, "Warning");
    assert!(note.contains("SshKey"), "{note}");
    assert!(
        note.contains("spec.publicKey") && note.contains("42"),
        "the note names what could not be read: {note}"
    );
    assert_eq!((events.len(), *count), (1, 1), "{events:?}");

    // Left alone: no finalizer, no status.
    let stored = dynamic.get("unreadable").await.unwrap();
    assert!(stored.metadata.finalizers.is_none(), "{stored:?}");
    assert!(stored.data.get("status").is_none(), "{stored:?}");

    // Once per version, not in a loop: another object's changes and a while later, still one.
    create(&env, &object::<SshKey>("readable-2", json!({}))).await;
    ready::<SshKey>(&env, "readable-2").await;
    let events = invalid_object_events(&env, "unreadable").await;
    assert_eq!(
        events.iter().map(|e| e.2).sum::<i32>(),
        1,
        "reported again: {events:?}"
    );

    // Made readable, it is reconciled like any other.
    dynamic
        .patch(
            "unreadable",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"publicKey": null}})),
        )
        .await
        .unwrap();
    ready::<SshKey>(&env, "unreadable").await;
    env.stop_operator().await;
}
