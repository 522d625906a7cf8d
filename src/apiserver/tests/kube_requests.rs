//! The request log: who did what, as an RBAC rule would name it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use futures::TryStreamExt;
use gpucloud_apiserver::{ApiServerConfig, RequestRecord};
use kube::api::{ListParams, Patch, PatchParams, WatchParams};
use kube_support::*;
use serde_json::json;

#[tokio::test]
async fn requests_are_recorded_per_user_with_rbac_attributes() {
    let config = ApiServerConfig {
        users: vec![
            ("token-for-admin".into(), "admin".into()),
            ("token-for-operator".into(), "operator".into()),
        ],
        ..ApiServerConfig::default()
    };
    let (server, admin) = start_with(config).await;
    let operator = bounded(server.kube_client_as(Some("operator")))
        .await
        .unwrap();
    create(
        &configmaps(&admin, "default"),
        &configmap("r", json!({}), json!({})),
    )
    .await;

    let api = configmaps(&operator, "default");
    bounded(api.get("r")).await.unwrap();
    bounded(api.list(&ListParams::default())).await.unwrap();
    let events = bounded(api.watch(&WatchParams::default().timeout(1), "0"))
        .await
        .unwrap();
    let _ = bounded(events.try_collect::<Vec<_>>()).await;
    bounded(api.patch(
        "r",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    ))
    .await
    .unwrap();

    let record = |user: &str, verb: &str, name: &str| RequestRecord {
        user: user.into(),
        verb: verb.into(),
        group: String::new(),
        resource: "configmaps".into(),
        subresource: String::new(),
        namespace: "default".into(),
        name: name.into(),
        label_selector: String::new(),
        metadata_only: false,
    };
    let operator_requests: Vec<RequestRecord> = server
        .requests()
        .into_iter()
        .filter(|request| request.user == "operator")
        .collect();
    assert_eq!(
        operator_requests,
        [
            record("operator", "get", "r"),
            record("operator", "list", ""),
            record("operator", "watch", ""),
            record("operator", "patch", "r"),
        ]
    );
    assert!(server.requests().contains(&record("admin", "create", "")));
    // Tokens never show in the handle's Debug output.
    let debug = format!("{server:?}");
    assert!(!debug.contains("token-for-operator"), "{debug}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_wildcard_bind_is_reached_through_loopback() {
    let config = ApiServerConfig {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..ApiServerConfig::default()
    };
    let (server, client) = start_with(config).await;
    assert!(
        server.url().starts_with("https://127.0.0.1:"),
        "{}",
        server.url()
    );
    // The generated certificate covers the loopback address the kubeconfig names.
    bounded(configmaps(&client, "default").list(&ListParams::default()))
        .await
        .unwrap();
    server.shutdown().await;
}
