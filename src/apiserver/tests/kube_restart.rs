//! A restart of the server (`stop_serving`, then `resume_serving`): clients see their watches
//! end and their connections refused, then reconnect to the same address with the same
//! credentials, find every object as it was, and resume watches from the resourceVersions
//! they hold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube_support::*;
use serde_json::json;

#[tokio::test]
async fn a_restart_keeps_the_store_and_address_and_clients_resume() {
    let (mut server, client) = start().await;
    let url = server.url();
    let api = configmaps(&client, "default");
    let listed = bounded(api.list(&ListParams::default())).await.unwrap();
    let before = listed.metadata.resource_version.unwrap();
    let kept = create(&api, &configmap("kept", json!({}), json!({"k": "v"}))).await;
    let mut open = bounded(api.watch(&WatchParams::default().timeout(60), &before))
        .await
        .unwrap()
        .boxed();
    let first = bounded(open.try_next()).await.unwrap().unwrap();
    assert!(matches!(first, WatchEvent::Added(_)), "{first:?}");

    server.stop_serving().await;
    assert!(!server.is_serving());
    // The open watch ends (cleanly or with a transport error), as on a real restart.
    let after_stop = bounded(open.next()).await;
    assert!(
        !matches!(after_stop, Some(Ok(_))),
        "the watch delivered {after_stop:?} after the server stopped"
    );
    match bounded(api.get("kept")).await {
        Err(kube::Error::Api(status)) => panic!("answered while stopped: {status:?}"),
        Err(_) => {}
        Ok(object) => panic!("served while stopped: {object:?}"),
    }

    server.resume_serving().await.unwrap();
    assert!(server.is_serving());
    assert_eq!(server.url(), url, "the same address");
    // The same client (same token and CA) reconnects and finds the object unchanged.
    let found = eventually(|| async { api.get("kept").await.ok() }).await;
    assert_eq!(
        found.metadata.resource_version,
        kept.metadata.resource_version
    );
    assert_eq!(found.metadata.uid, kept.metadata.uid);
    // A watch from a resourceVersion taken before the restart replays what came after it.
    let mut resumed = bounded(api.watch(&WatchParams::default().timeout(60), &before))
        .await
        .unwrap()
        .boxed();
    create(&api, &configmap("later", json!({}), json!({}))).await;
    let mut names = Vec::new();
    while names.len() < 2 {
        match bounded(resumed.try_next()).await.unwrap().unwrap() {
            WatchEvent::Added(object) => names.push(object.metadata.name.unwrap()),
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(names, ["kept", "later"]);
    // Resuming twice is harmless; stopping again and shutting down works.
    server.resume_serving().await.unwrap();
    server.stop_serving().await;
    server.resume_serving().await.unwrap();
    assert!(
        eventually(|| async { api.get_opt("later").await.ok() })
            .await
            .is_some()
    );
    server.shutdown().await;
}
