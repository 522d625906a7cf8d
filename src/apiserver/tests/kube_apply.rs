//! Server-side apply and managedFields through kube-rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use kube::api::{Patch, PatchParams};
use kube_support::*;
use serde_json::json;

fn applied(data: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": data})
}

#[tokio::test]
async fn apply_creates_tracks_ownership_and_reports_conflicts() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let alice = PatchParams::apply("alice");
    let created = bounded(api.patch(
        "ssa",
        &alice,
        &Patch::Apply(applied(json!({"a": "1", "b": "1"}))),
    ))
    .await
    .unwrap();
    assert_eq!(created.data["data"], json!({"a": "1", "b": "1"}));
    let managers = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(managers.len(), 1);
    assert_eq!(managers[0].manager.as_deref(), Some("alice"));
    assert_eq!(managers[0].operation.as_deref(), Some("Apply"));

    // Another manager changing alice's field conflicts: 409 with the real message format
    // (structured-merge-diff conflicts, apiserver managedfields).
    let bob = PatchParams::apply("bob");
    let conflict =
        status_of(bounded(api.patch("ssa", &bob, &Patch::Apply(applied(json!({"a": "2"}))))).await);
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        conflict.message,
        "Apply failed with 1 conflict: conflict with \"alice\": .data.a"
    );
    let forced = bounded(api.patch(
        "ssa",
        &bob.clone().force(),
        &Patch::Apply(applied(json!({"a": "2"}))),
    ))
    .await
    .unwrap();
    assert_eq!(forced.data["data"]["a"], "2");

    // alice no longer applies b: it is removed (she was its only owner); a moved to bob, so
    // alice's apply without a leaves it.
    let pruned = bounded(api.patch("ssa", &alice, &Patch::Apply(applied(json!({})))))
        .await
        .unwrap();
    assert_eq!(pruned.data["data"], json!({"a": "2"}));

    // A non-apply write is recorded as an Update by its field manager.
    let params = PatchParams {
        field_manager: Some("carol".into()),
        ..PatchParams::default()
    };
    let updated = bounded(api.patch("ssa", &params, &Patch::Merge(json!({"data": {"c": "3"}}))))
        .await
        .unwrap();
    let carol = updated
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|entry| entry.manager.as_deref() == Some("carol"))
        .expect("carol recorded");
    assert_eq!(carol.operation.as_deref(), Some("Update"));
    server.shutdown().await;
}

#[tokio::test]
async fn apply_requires_a_field_manager() {
    let (server, client) = start().await;
    // kube-rs refuses to send an apply without a field manager, so this goes raw. A real
    // server answers 422 Invalid (apimachinery ValidatePatchOptions: fieldManager Required).
    let request = http::Request::patch("/api/v1/namespaces/default/configmaps/ssa")
        .header("Content-Type", "application/apply-patch+yaml")
        .body(serde_json::to_vec(&applied(json!({}))).unwrap())
        .unwrap();
    let refused = status_of(bounded(client.request::<serde_json::Value>(request)).await);
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert!(
        refused.message.contains("fieldManager"),
        "{}",
        refused.message
    );
    server.shutdown().await;
}

#[tokio::test]
async fn an_apply_written_in_yaml_applies_as_its_json_would() {
    let (server, client) = start().await;
    // Block style, a comment, a literal block, quoted look-alikes of other types, as
    // `kubectl apply --server-side` users write them.
    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa  # the object\ndata:\n  \
                script: |\n    echo one\n    echo two\n  enabled: \"yes\"\n  port: \"0123\"\n";
    let request =
        http::Request::patch("/api/v1/namespaces/default/configmaps/ssa?fieldManager=yaml")
            .header("Content-Type", "application/apply-patch+yaml")
            .body(body.as_bytes().to_vec())
            .unwrap();
    let created: serde_json::Value = bounded(client.request(request)).await.unwrap();
    assert_eq!(
        created["data"],
        json!({"script": "echo one\necho two\n", "enabled": "yes", "port": "0123"})
    );
    server.shutdown().await;
}
