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

/// The counts by user, verb, resource and status, as a process outside reads them over HTTP.
#[tokio::test]
async fn requests_are_counted_by_user_verb_resource_and_status() {
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
    for _ in 0..2 {
        bounded(api.patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "v"}})),
        ))
        .await
        .unwrap();
    }
    // A second create of the same name: 409.
    let again =
        bounded(api.create(&Default::default(), &configmap("r", json!({}), json!({})))).await;
    assert!(again.is_err());

    let request = http::Request::get(gpucloud_apiserver::server::REQUEST_COUNTS_PATH)
        .body(Vec::new())
        .unwrap();
    let text = bounded(admin.request_text(request)).await.unwrap();
    let counts: Vec<gpucloud_apiserver::server::RequestCount> =
        serde_json::from_str(&text).unwrap();
    let count = |user: &str, verb: &str, code: u16| {
        counts
            .iter()
            .filter(|c| {
                c.user == user && c.verb == verb && c.resource == "configmaps" && c.code == code
            })
            .map(|c| c.count)
            .sum::<u64>()
    };
    assert_eq!(count("admin", "create", 201), 1, "{counts:?}");
    assert_eq!(count("operator", "patch", 200), 2, "{counts:?}");
    assert_eq!(count("operator", "create", 409), 1, "{counts:?}");
    assert_eq!(counts, server.request_counts());
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
