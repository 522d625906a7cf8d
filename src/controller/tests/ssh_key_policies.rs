#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The shared policies hold for SshKey as for GpuInstance: Orphan, adoption, ObserveOnly, pause.

use crate::support;

use gpucloud_api::*;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use std::time::Duration;
use support::{Env, PUBLIC_KEY, eventually};

fn key(name: &str, spec: serde_json::Value) -> SshKey {
    SshKey::new(name, serde_json::from_value(spec).unwrap())
}

async fn ready(env: &Env, name: &str) -> SshKey {
    let api = env.api::<SshKey>();
    eventually(30, &format!("{name} Ready"), || {
        let api = api.clone();
        async move {
            let k = api.get(name).await.ok()?;
            k.cloud_status()
                .is_ready(k.metadata.generation)
                .then_some(k)
        }
    })
    .await
}

async fn gone(env: &Env, name: &str) {
    let api = env.api::<SshKey>();
    eventually(30, &format!("{name} deleted"), || {
        let api = api.clone();
        async move { api.get_opt(name).await.unwrap().is_none().then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_keys_stay_in_the_cloud() {
    let env = Env::start().await;
    let api = env.api::<SshKey>();
    api.create(
        &PostParams::default(),
        &key(
            "keep",
            serde_json::json!({"publicKey": PUBLIC_KEY, "deletionPolicy": "Orphan"}),
        ),
    )
    .await
    .unwrap();
    ready(&env, "keep").await;
    api.delete("keep", &DeleteParams::default()).await.unwrap();
    gone(&env, "keep").await;
    assert_eq!(env.simulator.state().ssh_keys.len(), 1);
    assert_eq!(env.calls("DeleteSshKey"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_adopted_observed_and_paused_like_every_kind() {
    let env = Env::start().await;
    let existing = support::import_ssh_key(&env, "by-hand").await;
    let api = env.api::<SshKey>();

    // Adopted and observed only: nothing created, nothing deleted.
    let mut observed = key(
        "watched",
        serde_json::json!({"publicKey": PUBLIC_KEY, "managementPolicy": "ObserveOnly"}),
    );
    observed.metadata.annotations =
        Some([(EXTERNAL_ID_ANNOTATION.to_string(), existing.id.clone())].into());
    api.create(&PostParams::default(), &observed).await.unwrap();
    let watched = ready(&env, "watched").await;
    assert_eq!(
        watched.cloud_status().external_id.as_deref(),
        Some(existing.id.as_str())
    );
    api.delete("watched", &DeleteParams::default())
        .await
        .unwrap();
    gone(&env, "watched").await;
    assert_eq!(env.simulator.state().ssh_keys.len(), 1);

    // Adopted and managed: deleting the object deletes the key.
    let mut adopted = key("adopted", serde_json::json!({"publicKey": PUBLIC_KEY}));
    adopted.metadata.annotations =
        Some([(EXTERNAL_ID_ANNOTATION.to_string(), existing.id.clone())].into());
    api.create(&PostParams::default(), &adopted).await.unwrap();
    ready(&env, "adopted").await;
    assert_eq!(env.calls("CreateSshKey"), 1, "only the test's own create");

    // Paused: deletion is not acted on until the pause is lifted.
    api.patch(
        "adopted",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"metadata": {"annotations": {PAUSED_ANNOTATION: "true"}}}),
        ),
    )
    .await
    .unwrap();
    api.delete("adopted", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        api.get_opt("adopted").await.unwrap().is_some(),
        "a paused object was released"
    );
    assert_eq!(env.calls("DeleteSshKey"), 0);
    api.patch(
        "adopted",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {PAUSED_ANNOTATION: null}}})),
    )
    .await
    .unwrap();
    gone(&env, "adopted").await;
    assert!(env.simulator.state().ssh_keys.is_empty());
}
