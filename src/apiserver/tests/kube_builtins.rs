//! Built-in kinds the operator uses, through their typed kube-rs APIs: events via the
//! kube-runtime Recorder, leases for leader election, secrets, service accounts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod kube_support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ObjectReference, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::events::{Event as RecordedEvent, EventType, Recorder, Reporter};
use kube_support::*;
use serde_json::json;

#[tokio::test]
async fn recorder_creates_then_patches_an_event_series() {
    let (server, client) = start().await;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "gpucloud-operator".into(),
            instance: None,
        },
    );
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some("subject".into()),
        namespace: Some("default".into()),
        uid: Some("0000".into()),
        ..ObjectReference::default()
    };
    let event = RecordedEvent {
        type_: EventType::Normal,
        reason: "Provisioned".into(),
        note: Some("instance is running".into()),
        action: "Provision".into(),
        secondary: None,
    };
    bounded(recorder.publish(&event, &regarding)).await.unwrap();
    bounded(recorder.publish(&event, &regarding)).await.unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = bounded(events.list(&ListParams::default())).await.unwrap();
    assert_eq!(
        list.items.len(),
        1,
        "the repeat is a series on the same event"
    );
    let stored = &list.items[0];
    assert_eq!(stored.reason.as_deref(), Some("Provisioned"));
    assert_eq!(stored.series.as_ref().unwrap().count, 2);

    // Both Event APIs show the same objects, as on a real server (one storage, two views):
    // what kubectl describe lists through core/v1, with its involvedObject field selector.
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let selected = bounded(core.list(
        &ListParams::default().fields("involvedObject.name=subject,involvedObject.kind=ConfigMap"),
    ))
    .await
    .unwrap();
    assert_eq!(selected.items.len(), 1);
    let core_event = &selected.items[0];
    assert_eq!(core_event.message.as_deref(), Some("instance is running"));
    assert_eq!(
        core_event.reporting_component.as_deref(),
        Some("gpucloud-operator")
    );
    assert_eq!(core_event.involved_object.name.as_deref(), Some("subject"));
    let other = bounded(core.list(&ListParams::default().fields("involvedObject.name=other")))
        .await
        .unwrap();
    assert!(other.items.is_empty());
    let by_regarding =
        bounded(events.list(&ListParams::default().fields("regarding.name=subject")))
            .await
            .unwrap();
    assert_eq!(by_regarding.items.len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn leases_follow_optimistic_concurrency() {
    let (server, client) = start().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "gpucloud-operator"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }))
    .unwrap();
    let created = bounded(leases.create(&PostParams::default(), &lease))
        .await
        .unwrap();
    let mut taken = created.clone();
    taken.spec.as_mut().unwrap().holder_identity = Some("b".into());
    bounded(leases.replace("gpucloud-operator", &PostParams::default(), &taken))
        .await
        .unwrap();
    // A second candidate holding the old resourceVersion loses: 409 Conflict, as a real
    // server's optimistic concurrency answers (apiserver storage/etcd3 GuaranteedUpdate).
    let mut late = created.clone();
    late.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let lost = status_of(
        bounded(leases.replace("gpucloud-operator", &PostParams::default(), &late)).await,
    );
    assert_eq!(lost.code, 409);
    let current = bounded(leases.get("gpucloud-operator")).await.unwrap();
    assert_eq!(current.spec.unwrap().holder_identity.as_deref(), Some("b"));
    server.shutdown().await;
}

#[tokio::test]
async fn secrets_fold_string_data_and_service_accounts_return_on_delete() {
    let (server, client) = start().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "key"},
        "stringData": {"token": "abc"},
    }))
    .unwrap();
    let created = bounded(secrets.create(&PostParams::default(), &secret))
        .await
        .unwrap();
    // The real server stores stringData as base64 data and defaults the type.
    assert_eq!(created.data.unwrap()["token"].0, b"abc");
    assert_eq!(created.type_.as_deref(), Some("Opaque"));
    assert!(created.string_data.is_none());

    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "operator"}})).unwrap();
    bounded(accounts.create(&PostParams::default(), &account))
        .await
        .unwrap();
    // ServiceAccount storage returns the deleted object (ReturnDeletedObject in
    // pkg/registry/core/serviceaccount/storage).
    let deleted = bounded(accounts.delete("operator", &DeleteParams::default()))
        .await
        .unwrap();
    assert!(deleted.is_left());
    server.shutdown().await;
}
