//! Watches through kube-rs: event sequences, resuming from a resourceVersion, label-selected
//! transitions, bookmarks, timeouts, and 410 Expired for history that is no longer retained.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use gpucloud_apiserver::{ApiServerConfig, WatchHistory};
use kube::api::{
    DeleteParams, DynamicObject, ListParams, Patch, PatchParams, VersionMatch, WatchEvent,
    WatchParams,
};
use kube_support::*;
use serde_json::json;

fn describe(event: &WatchEvent<DynamicObject>) -> String {
    match event {
        WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.clone().unwrap()),
        WatchEvent::Modified(o) => format!("MODIFIED {}", o.metadata.name.clone().unwrap()),
        WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.clone().unwrap()),
        WatchEvent::Bookmark(_) => "BOOKMARK".to_string(),
        WatchEvent::Error(e) => format!("ERROR {}", e.code),
    }
}

#[tokio::test]
async fn watch_from_a_list_sees_every_later_change_in_order() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    create(&api, &configmap("before", json!({}), json!({}))).await;
    let list = bounded(api.list(&ListParams::default())).await.unwrap();
    let version = list.metadata.resource_version.unwrap();
    let mut stream = bounded(api.watch(&WatchParams::default().timeout(10), &version))
        .await
        .unwrap()
        .boxed();
    create(&api, &configmap("w", json!({}), json!({}))).await;
    bounded(api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    ))
    .await
    .unwrap();
    bounded(api.delete("w", &DeleteParams::default()))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = bounded(stream.try_next()).await.unwrap().unwrap();
        seen.push(describe(&event));
    }
    // A real watch from the list's resourceVersion delivers exactly the later changes, in
    // order (k8s.io/apiserver storage/cacher semantics for "Start at Exact").
    assert_eq!(seen, ["ADDED w", "MODIFIED w", "DELETED w"]);
    server.shutdown().await;
}

#[tokio::test]
async fn watch_without_version_starts_with_the_current_state() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    create(&api, &configmap("x", json!({}), json!({}))).await;
    create(&api, &configmap("y", json!({}), json!({}))).await;
    let mut stream = bounded(api.watch(&WatchParams::default().timeout(10), "0"))
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(describe(
            &bounded(stream.try_next()).await.unwrap().unwrap(),
        ));
    }
    // resourceVersion=0: synthetic ADDED events for the current objects first, as the real
    // server documents for "Start at Any" watches (API concepts, resource versions).
    assert_eq!(seen, ["ADDED x", "ADDED y"]);
    server.shutdown().await;
}

#[tokio::test]
async fn label_selected_watch_sees_objects_enter_and_leave() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let version = bounded(api.list(&ListParams::default()))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let params = WatchParams::default().labels("app=web").timeout(10);
    let mut stream = bounded(api.watch(&params, &version)).await.unwrap().boxed();
    create(&api, &configmap("other", json!({"app": "db"}), json!({}))).await;
    create(&api, &configmap("l", json!({"app": "db"}), json!({}))).await;
    let relabel = |app: &str| Patch::Merge(json!({"metadata": {"labels": {"app": app}}}));
    bounded(api.patch("l", &PatchParams::default(), &relabel("web")))
        .await
        .unwrap();
    bounded(api.patch("l", &PatchParams::default(), &relabel("db")))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(describe(
            &bounded(stream.try_next()).await.unwrap().unwrap(),
        ));
    }
    // The watch cache turns a modification into ADDED / DELETED when the object enters or
    // leaves the selection (k8s.io/apiserver pkg/storage/cacher cacheWatcher.convertToWatchEvent).
    assert_eq!(seen, ["ADDED l", "DELETED l"]);
    server.shutdown().await;
}

#[tokio::test]
async fn too_old_versions_are_410_expired() {
    let config = ApiServerConfig {
        watch_history: WatchHistory::last(3),
        ..ApiServerConfig::default()
    };
    let (server, client) = start_with(config).await;
    let api = configmaps(&client, "default");
    let start_version = bounded(api.list(&ListParams::default()))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    for name in ["a", "b", "c", "d", "e"] {
        create(&api, &configmap(name, json!({}), json!({}))).await;
    }
    // A real kube-apiserver answers a watch from a compacted resourceVersion with 200 and a
    // single ERROR event carrying 410 Expired "too old resource version" (cacher
    // newErrWatcher); kube-runtime's watcher re-lists on it.
    let mut stream = bounded(api.watch(&WatchParams::default().timeout(10), &start_version))
        .await
        .unwrap()
        .boxed();
    match bounded(stream.try_next()).await.unwrap().unwrap() {
        WatchEvent::Error(error) => {
            assert_eq!((error.code, error.reason.as_str()), (410, "Expired"));
            assert!(
                error.message.starts_with("too old resource version"),
                "{}",
                error.message
            );
        }
        other => panic!("expected a 410 ERROR event, got {}", describe(&other)),
    }

    // A list at an exact old resourceVersion is a 410 Expired response, as the real server
    // answers once etcd compacted that revision (storage/etcd3 store.go GetList).
    let exact = ListParams::default()
        .at(&start_version)
        .matching(VersionMatch::Exact);
    let gone = status_of(bounded(api.list(&exact)).await);
    assert_eq!((gone.code, gone.reason.as_str()), (410, "Expired"));

    // An open watch ends with a 410 ERROR event when history is compacted (a documented
    // divergence: the real watch cache sends this to watchers that fall out of its window).
    let current = bounded(api.list(&ListParams::default()))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut open = bounded(api.watch(&WatchParams::default().timeout(10), &current))
        .await
        .unwrap()
        .boxed();
    server.compact();
    match bounded(open.try_next()).await.unwrap().unwrap() {
        WatchEvent::Error(error) => assert_eq!(error.code, 410),
        other => panic!("expected a 410 ERROR event, got {}", describe(&other)),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn bookmarks_and_timeouts() {
    let config = ApiServerConfig {
        bookmark_interval: Duration::from_millis(100),
        ..ApiServerConfig::default()
    };
    let (server, client) = start_with(config).await;
    let api = configmaps(&client, "default");
    let version = bounded(api.list(&ListParams::default()))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let params = WatchParams::default().timeout(1);
    assert!(params.bookmarks, "kube-rs asks for bookmarks by default");
    let stream = bounded(api.watch(&params, &version)).await.unwrap();
    // timeoutSeconds=1: the server ends the stream; everything in it is a bookmark here. Real
    // bookmarks carry only kind, apiVersion and metadata.resourceVersion (watch bookmarks KEP).
    let events: Vec<_> = bounded(stream.try_collect::<Vec<_>>()).await.unwrap();
    assert!(!events.is_empty());
    for event in &events {
        match event {
            WatchEvent::Bookmark(bookmark) => {
                let at: u64 = bookmark.metadata.resource_version.parse().unwrap();
                assert!(at >= version.parse::<u64>().unwrap());
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn streaming_list_watch_sends_initial_events_then_a_marked_bookmark() {
    use kube::runtime::watcher::{self, Event};
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    create(&api, &configmap("s1", json!({}), json!({}))).await;
    create(&api, &configmap("s2", json!({}), json!({}))).await;
    // kube-runtime's streaming lists send sendInitialEvents=true with
    // resourceVersionMatch=NotOlderThan; the real server answers with ADDED events for the
    // current state and a BOOKMARK annotated `k8s.io/initial-events-end: "true"` (KEP-3157),
    // which the watcher turns into InitDone.
    let config = watcher::Config::default().streaming_lists();
    let mut stream = watcher::watcher(api.clone(), config).boxed();
    let mut initial = Vec::new();
    loop {
        match bounded(stream.try_next()).await.unwrap().unwrap() {
            Event::Init => {}
            Event::InitApply(object) => initial.push(object.metadata.name.unwrap()),
            Event::InitDone => break,
            other => panic!("unexpected before InitDone: {other:?}"),
        }
    }
    assert_eq!(initial, ["s1", "s2"]);
    create(&api, &configmap("s3", json!({}), json!({}))).await;
    match bounded(stream.try_next()).await.unwrap().unwrap() {
        Event::Apply(object) => assert_eq!(object.metadata.name.as_deref(), Some("s3")),
        other => panic!("expected the new object, got {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn table_watch_events_carry_rows() {
    let (server, client) = start().await;
    create(
        &configmaps(&client, "default"),
        &configmap("t", json!({}), json!({})),
    )
    .await;
    // kubectl get -w asks for Table rendering on the watch too; each event's object is a
    // meta.k8s.io/v1 Table with the object's row.
    let request = http::Request::get(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0&timeoutSeconds=1",
    )
    .header(
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    .body(Vec::new())
    .unwrap();
    let text = bounded(client.request_text(request)).await.unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["kind"], "Table");
    assert_eq!(first["object"]["rows"][0]["cells"][0], "t");
    server.shutdown().await;
}

#[tokio::test]
async fn list_resource_version_semantics() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    create(&api, &configmap("v", json!({}), json!({}))).await;
    let current = bounded(api.list(&ListParams::default()))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    // Exact at the current version and NotOlderThan at or below it are served.
    let exact = ListParams::default()
        .at(&current)
        .matching(VersionMatch::Exact);
    assert_eq!(bounded(api.list(&exact)).await.unwrap().items.len(), 1);
    let not_older = ListParams::default()
        .at("1")
        .matching(VersionMatch::NotOlderThan);
    assert_eq!(bounded(api.list(&not_older)).await.unwrap().items.len(), 1);
    // A version the server has not reached: the real server answers 504 Timeout "Too large
    // resource version" (after waiting for it) with retryAfterSeconds 1 and Retry-After. kube-rs
    // retries that by default, so this asks through a client that does not.
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&server.kubeconfig_yaml(None)).unwrap();
    let mut config = bounded(kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    ))
    .await
    .unwrap();
    config.default_retry = false;
    let no_retry = configmaps(&kube::Client::try_from(config).unwrap(), "default");
    let future = (current.parse::<u64>().unwrap() + 1000).to_string();
    let ahead = ListParams::default()
        .at(&future)
        .matching(VersionMatch::NotOlderThan);
    let too_large = status_of(bounded(no_retry.list(&ahead)).await);
    assert_eq!(
        (too_large.code, too_large.reason.as_str()),
        (504, "Timeout")
    );
    assert!(too_large.message.starts_with("Too large resource version"));
    // Not a number: 400.
    let garbage = ListParams::default().at("abc");
    assert_eq!(status_of(bounded(api.list(&garbage)).await).code, 400);
    server.shutdown().await;
}
