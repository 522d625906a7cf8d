//! Built-in kinds the operator uses, through their typed kube-rs APIs: events via the
//! kube-runtime Recorder, leases for leader election, secrets, service accounts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

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

/// Sends a raw JSON POST; returns the status code, the `Warning` headers and the body.
async fn post_json(
    client: &kube::Client,
    uri: &str,
    body: serde_json::Value,
) -> (u16, Vec<String>, serde_json::Value) {
    let request = http::Request::post(uri)
        .header("Content-Type", "application/json")
        .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    let response = bounded(client.send(request)).await.unwrap();
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|value| value.to_str().unwrap().to_string())
        .collect();
    let bytes = bounded(http_body_util::BodyExt::collect(response.into_body()))
        .await
        .unwrap()
        .to_bytes();
    (code, warnings, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn builtin_objects_of_the_wrong_type_are_400() {
    let (server, client) = start().await;
    // Real: 400 BadRequest from decoding into the Go struct (apiserver handlers
    // transformDecodeError wrapping encoding/json's UnmarshalTypeError).
    let (code, _, status) = post_json(
        &client,
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typed"},
               "data": {"a": 1}}),
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    assert_eq!(
        status["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal \
         number into Go struct field ConfigMap.data of type string"
    );
    let (code, _, status) = post_json(
        &client,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "lock"}, "spec": {"leaseDurationSeconds": "15"}}),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "Lease in version \"v1\" cannot be handled as a Lease: json: cannot unmarshal string \
         into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"
    );
    // Bad base64 in Secret data is a decoding error too.
    let (code, _, status) = post_json(
        &client,
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
               "data": {"k": "%%%"}}),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "Secret in version \"v1\" cannot be handled as a Secret: Invalid symbol 37, offset 0."
    );
    // Nothing was stored.
    let config_maps = configmaps(&client, "default");
    assert!(
        bounded(config_maps.get_opt("typed"))
            .await
            .unwrap()
            .is_none()
    );

    // An update (merge patch) to a wrong type is refused the same way.
    create(
        &config_maps,
        &configmap("patched", json!({}), json!({"a": "b"})),
    )
    .await;
    let refused = status_of(
        bounded(config_maps.patch(
            "patched",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"a": true}})),
        ))
        .await,
    );
    assert_eq!((refused.code, refused.reason.as_str()), (400, "BadRequest"));
    assert!(
        refused
            .message
            .ends_with("cannot unmarshal bool into Go struct field ConfigMap.data of type string"),
        "{}",
        refused.message
    );
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_fields_of_builtin_objects_follow_field_validation() {
    let (server, client) = start().await;
    let manifest = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "colour": "red"},
               "data": {"a": "b"}, "spec": {"replicas": 1}})
    };
    let path = "/api/v1/namespaces/default/configmaps";
    // Strict (what kubectl sends): 400 naming every unknown field.
    let (code, _, status) = post_json(
        &client,
        &format!("{path}?fieldValidation=Strict"),
        manifest("strict"),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: \
         unknown field \"metadata.colour\", unknown field \"spec\""
    );
    // Warn (the default): created without the unknown fields, one warning per field.
    let (code, warnings, created) = post_json(&client, path, manifest("warned")).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        warnings,
        [
            "299 - \"unknown field \\\"metadata.colour\\\"\"",
            "299 - \"unknown field \\\"spec\\\"\""
        ]
    );
    assert!(created.get("spec").is_none(), "{created}");
    assert!(created["metadata"].get("colour").is_none(), "{created}");
    // Ignore: created, no warnings.
    let (code, warnings, _) = post_json(
        &client,
        &format!("{path}?fieldValidation=Ignore"),
        manifest("ignored"),
    )
    .await;
    assert_eq!((code, warnings.len()), (201, 0));

    // Through kube-rs: a strict patch adding an unknown field is refused.
    let config_maps = configmaps(&client, "default");
    let refused = status_of(
        bounded(config_maps.patch(
            "warned",
            &kube::api::PatchParams::default().validation(kube::api::ValidationDirective::Strict),
            &kube::api::Patch::Merge(json!({"immutible": true})),
        ))
        .await,
    );
    assert_eq!((refused.code, refused.reason.as_str()), (400, "BadRequest"));
    assert!(
        refused
            .message
            .ends_with("strict decoding error: unknown field \"immutible\""),
        "{}",
        refused.message
    );
    let stored = bounded(config_maps.get("warned")).await.unwrap();
    assert!(stored.data.get("immutible").is_none());
    server.shutdown().await;
}
