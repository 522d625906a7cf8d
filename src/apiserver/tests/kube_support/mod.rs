//! Shared helpers of the kube-rs conformance tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use gpucloud_apiserver::{ApiServer, ApiServerConfig, ApiServerHandle};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// Every await in these tests is bounded by this.
pub const STEP: Duration = Duration::from_secs(10);

pub async fn bounded<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .expect("step timed out")
}

pub async fn start() -> (ApiServerHandle, kube::Client) {
    start_with(ApiServerConfig::default()).await
}

pub async fn start_with(config: ApiServerConfig) -> (ApiServerHandle, kube::Client) {
    let server = bounded(ApiServer::start(config))
        .await
        .expect("server starts");
    let client = bounded(server.kube_client()).await.expect("client");
    (server, client)
}

pub fn configmaps(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "ConfigMap"),
        "configmaps",
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

pub fn dynamic(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("valid object")
}

pub fn configmap(name: &str, labels: Value, data: Value) -> DynamicObject {
    dynamic(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }))
}

pub async fn create(api: &Api<DynamicObject>, object: &DynamicObject) -> DynamicObject {
    bounded(api.create(&PostParams::default(), object))
        .await
        .expect("create")
}

/// The `Status` of a failed call.
pub fn status_of<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls `check` every 20 ms until it returns `Some`, for at most `STEP`.
pub async fn eventually<T, F, Fut>(mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    bounded(async {
        loop {
            if let Some(value) = check().await {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}
