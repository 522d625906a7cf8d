#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `gpucloud.io/reconcile-requested-at`: an object waiting on a long recheck is tried again
//! within seconds of the annotation being set, and of each new value.

use crate::support;

use gpucloud_api::*;
use kube::api::{Patch, PatchParams, PostParams};
use std::time::Duration;
use support::{Env, eventually};

/// An object the cloud refuses: an OS image only the cloud knows it does not have. The
/// refusal is terminal, so the object is looked at again only after the terminal recheck
/// (minutes), or when it changes.
fn refused_instance(name: &str) -> GpuInstance {
    GpuInstance::new(
        name,
        serde_json::from_value(serde_json::json!({
            "region": "us-east-1",
            "gpuType": "H100-80G",
            "gpuCount": 1,
            "osImage": "windows-95",
        }))
        .unwrap(),
    )
}

async fn request_reconcile(api: &kube::Api<GpuInstance>, name: &str, value: &str) {
    let patch = serde_json::json!({
        "metadata": {"annotations": {RECONCILE_REQUESTED_ANNOTATION: value}}
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Waits until the cloud has seen `calls` creates, for at most `seconds`.
async fn creates_reach(env: &Env, calls: u64, seconds: u64) {
    eventually(
        seconds,
        &format!("{calls} CreateInstance calls"),
        || async { (env.calls("CreateInstance") >= calls).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_annotation_retries_a_stalled_object_now() {
    let mut env = Env::without_operator(Default::default()).await;
    // A long resync: no sweep comes between the refusal and the request.
    let mut config = support::test_config(&env.simulator);
    config.reconcile.observe.resync = Duration::from_secs(600);
    env.start_operator(config);
    let api = env.api::<GpuInstance>();
    api.create(&PostParams::default(), &refused_instance("refused"))
        .await
        .unwrap();
    eventually(30, "refused: Stalled InvalidSpec", || async {
        let object = api.get("refused").await.ok()?;
        let stalled = object.cloud_status().condition("Stalled")?.clone();
        (stalled.status == "True" && stalled.reason == "InvalidSpec").then_some(())
    })
    .await;
    assert_eq!(env.calls("CreateInstance"), 1);
    // Left alone, it waits: no retry for a while.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(env.calls("CreateInstance"), 1, "retried without a request");

    request_reconcile(&api, "refused", "2026-01-01T10:00:00Z").await;
    creates_reach(&env, 2, 5).await;
    // Each new value asks again; the same value written again is no change.
    request_reconcile(&api, "refused", "2026-01-01T10:05:00Z").await;
    creates_reach(&env, 3, 5).await;
    request_reconcile(&api, "refused", "2026-01-01T10:05:00Z").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(env.calls("CreateInstance"), 3, "an unchanged value retried");
    let object = api.get("refused").await.unwrap();
    assert!(object.cloud_status().condition("Stalled").is_some());
}
