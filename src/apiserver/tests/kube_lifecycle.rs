//! Deletion through kube-rs: finalizers and deletionTimestamp, preconditions, dry run,
//! propagation policies with owner-reference garbage collection, namespace termination,
//! and deletecollection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy,
};
use kube_support::*;
use serde_json::json;

async fn exists(api: &Api<DynamicObject>, name: &str) -> bool {
    bounded(api.get_opt(name)).await.unwrap().is_some()
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let mut held = configmap("held", json!({}), json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    create(&api, &held).await;

    // A real server marks the object (deletionTimestamp) and returns it with 200 while
    // finalizers remain (registry/store.go updateForGracefulDeletionAndFinalizers).
    let deleted = bounded(api.delete("held", &DeleteParams::default()))
        .await
        .unwrap();
    let marked = deleted
        .left()
        .expect("the object is returned while finalizers remain");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(exists(&api, "held").await);

    // No new finalizers once deleting: 422 with the real validation wording
    // (apimachinery ValidateObjectMetaUpdate).
    let add =
        Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}));
    let refused = status_of(bounded(api.patch("held", &PatchParams::default(), &add)).await);
    assert_eq!(refused.code, 422);
    assert!(
        refused
            .message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        refused.message
    );

    // Removing the last finalizer deletes the object.
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    bounded(api.patch("held", &PatchParams::default(), &release))
        .await
        .unwrap();
    assert!(!exists(&api, "held").await);
    server.shutdown().await;
}

#[tokio::test]
async fn an_update_carrying_a_uid_is_a_uid_precondition() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let created = create(&api, &configmap("racing", json!({"a": "1"}), json!({}))).await;
    let uid = created.metadata.uid.clone().unwrap();

    // Another uid than the stored object's: 409 from the storage precondition, before the
    // update's own validation (which would call uid immutable).
    let mut other = created.clone();
    other.metadata.uid = Some("00000000-0000-4000-8000-000000000000".into());
    let refused = status_of(bounded(api.replace("racing", &PostParams::default(), &other)).await);
    assert_eq!(refused.code, 409, "{}", refused.message);
    assert_eq!(
        refused.message,
        format!(
            "Operation cannot be fulfilled on configmaps \"racing\": StorageError: invalid \
             object, Code: 4, Key: /registry/configmaps/default/racing, ResourceVersion: 0, \
             AdditionalErrorMsg: Precondition failed: UID in precondition: \
             00000000-0000-4000-8000-000000000000, UID in object meta: {uid}"
        )
    );

    // An update racing the object's deletion: with the uid it read, a real server answers 409
    // (the precondition finds no object); without one, 404.
    bounded(api.delete("racing", &DeleteParams::default()))
        .await
        .unwrap();
    let raced = status_of(bounded(api.replace("racing", &PostParams::default(), &created)).await);
    assert_eq!(raced.code, 409, "{}", raced.message);
    assert!(
        raced.message.contains(&format!(
            "StorageError: invalid object, Code: 4, Key: /registry/configmaps/default/racing, \
             ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: \
             {uid}, UID in object meta: "
        )),
        "{}",
        raced.message
    );
    let mut without_uid = created.clone();
    without_uid.metadata.uid = None;
    let missing =
        status_of(bounded(api.replace("racing", &PostParams::default(), &without_uid)).await);
    assert_eq!(missing.code, 404, "{}", missing.message);
    server.shutdown().await;
}

#[tokio::test]
async fn a_failed_uid_precondition_names_the_real_storage_key() {
    let (server, client) = start().await;
    // kube-apiserver's etcd keys: built-in groups are not part of them, Services live under
    // `services/specs`, CustomResourceDefinitions keep their group
    // (`SpecialDefaultResourcePrefixes`, apiextensions' `CRDRESTOptionsGetter`).
    let cases = [
        (
            "coordination.k8s.io/v1",
            "Lease",
            "leases",
            "leases.coordination.k8s.io",
            "/registry/leases/default/gone",
        ),
        (
            "apps/v1",
            "Deployment",
            "deployments",
            "deployments.apps",
            "/registry/deployments/default/gone",
        ),
        (
            "v1",
            "Service",
            "services",
            "services",
            "/registry/services/specs/default/gone",
        ),
        (
            "events.k8s.io/v1",
            "Event",
            "events",
            "events.events.k8s.io",
            "/registry/events/default/gone",
        ),
    ];
    for (api_version, kind, plural, resource, key) in cases {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let resource_type = kube::discovery::ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "default", &resource_type);
        let object = dynamic(json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": "gone", "uid": "6a4d8fa2-6a1b-4f43-9a53-0d2b3c1a7e51"},
        }));
        let refused =
            status_of(bounded(api.replace("gone", &PostParams::default(), &object)).await);
        assert_eq!(refused.code, 409, "{kind}: {}", refused.message);
        assert_eq!(
            refused.message,
            format!(
                "Operation cannot be fulfilled on {resource} \"gone\": StorageError: invalid \
                 object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: \
                 Precondition failed: UID in precondition: \
                 6a4d8fa2-6a1b-4f43-9a53-0d2b3c1a7e51, UID in object meta: "
            )
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn preconditions_and_dry_run_deletes() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let created = create(&api, &configmap("pre", json!({}), json!({}))).await;
    let wrong_uid = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    // Real: 409 Conflict "Precondition failed: UID in precondition: ..." (storage
    // Preconditions.Check).
    let conflict = status_of(bounded(api.delete("pre", &wrong_uid)).await);
    assert_eq!(conflict.code, 409);
    assert!(
        conflict
            .message
            .contains("Precondition failed: UID in precondition")
    );

    let dry_run = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    bounded(api.delete("pre", &dry_run)).await.unwrap();
    assert!(exists(&api, "pre").await, "dry run keeps the object");

    let right_uid = DeleteParams {
        preconditions: Some(Preconditions {
            uid: created.metadata.uid.clone(),
            resource_version: created.metadata.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    let gone = bounded(api.delete("pre", &right_uid)).await.unwrap();
    // ConfigMaps answer an immediate delete with a Success Status, as the real registry
    // (ReturnDeletedObject unset for configmaps).
    assert!(gone.is_right());
    assert!(!exists(&api, "pre").await);
    server.shutdown().await;
}

fn owned_by(name: &str, owner: &DynamicObject, block: bool) -> DynamicObject {
    let mut dependent = configmap(name, json!({}), json!({}));
    dependent.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: owner.metadata.name.clone().unwrap(),
            uid: owner.metadata.uid.clone().unwrap(),
            block_owner_deletion: Some(block),
            controller: Some(true),
        },
    ]);
    dependent
}

#[tokio::test]
async fn background_deletion_collects_dependents() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let owner = create(&api, &configmap("owner", json!({}), json!({}))).await;
    create(&api, &owned_by("child", &owner, false)).await;
    bounded(api.delete("owner", &DeleteParams::background()))
        .await
        .unwrap();
    assert!(!exists(&api, "owner").await);
    eventually(|| async { (!exists(&api, "child").await).then_some(()) }).await;
    server.shutdown().await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_dependents() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let owner = create(&api, &configmap("fg", json!({}), json!({}))).await;
    let mut child = owned_by("fg-child", &owner, true);
    // The child's own finalizer keeps it (and so the owner) around until released.
    child.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    create(&api, &child).await;
    let deleted = bounded(api.delete("fg", &DeleteParams::foreground()))
        .await
        .unwrap();
    let marked = deleted
        .left()
        .expect("foreground deletion returns the marked owner");
    // Real: the owner gets the foregroundDeletion finalizer and a deletionTimestamp.
    assert_eq!(marked.metadata.finalizers.unwrap(), ["foregroundDeletion"]);
    eventually(|| async {
        let child = bounded(api.get("fg-child")).await.unwrap();
        child.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    assert!(
        exists(&api, "fg").await,
        "owner waits for its blocking dependent"
    );
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    bounded(api.patch("fg-child", &PatchParams::default(), &release))
        .await
        .unwrap();
    eventually(|| async { (!exists(&api, "fg").await).then_some(()) }).await;
    server.shutdown().await;
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_without_the_reference() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let owner = create(&api, &configmap("orphaner", json!({}), json!({}))).await;
    create(&api, &owned_by("orphan", &owner, false)).await;
    let orphan = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    bounded(api.delete("orphaner", &orphan)).await.unwrap();
    eventually(|| async { (!exists(&api, "orphaner").await).then_some(()) }).await;
    let kept = bounded(api.get("orphan")).await.unwrap();
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn namespace_deletion_empties_then_removes_it() {
    let (server, client) = start().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "temp"}})).unwrap();
    let created = bounded(namespaces.create(&PostParams::default(), &namespace))
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let api = configmaps(&client, "temp");
    let mut held = configmap("held", json!({}), json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    create(&api, &held).await;
    create(&api, &configmap("plain", json!({}), json!({}))).await;

    let deleted = bounded(namespaces.delete("temp", &DeleteParams::default()))
        .await
        .unwrap();
    let terminating = deleted
        .left()
        .expect("namespace deletion returns the namespace");
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    // Real (NamespaceLifecycle admission): 403 Forbidden for new content.
    let forbidden = status_of(
        bounded(api.create(
            &PostParams::default(),
            &configmap("late", json!({}), json!({})),
        ))
        .await,
    );
    assert_eq!(
        (forbidden.code, forbidden.reason.as_str()),
        (403, "Forbidden")
    );
    eventually(|| async { (!exists(&api, "plain").await).then_some(()) }).await;
    assert!(
        bounded(namespaces.get_opt("temp")).await.unwrap().is_some(),
        "held content keeps it"
    );
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    bounded(api.patch("held", &PatchParams::default(), &release))
        .await
        .unwrap();
    eventually(|| async {
        bounded(namespaces.get_opt("temp"))
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn delete_collection_by_label() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    create(&api, &configmap("k1", json!({"batch": "1"}), json!({}))).await;
    create(&api, &configmap("k2", json!({"batch": "1"}), json!({}))).await;
    create(&api, &configmap("k3", json!({"batch": "2"}), json!({}))).await;
    let deleted = bounded(api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("batch=1"),
    ))
    .await
    .unwrap();
    assert_eq!(deleted.left().unwrap().items.len(), 2);
    let left: Vec<_> = bounded(api.list(&ListParams::default()))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| o.metadata.name.unwrap())
        .collect();
    assert_eq!(left, ["k3"]);
    server.shutdown().await;
}

#[tokio::test]
async fn kube_runtime_finalizer_helper_round_trip() {
    use kube::runtime::controller::Action;
    use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
    use std::sync::Arc;

    const FINALIZER: &str = "gpucloud.io/cleanup";
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    create(&api, &configmap("fin", json!({}), json!({}))).await;
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    // One step of what a controller does: the helper adds its finalizer with a JSON patch
    // (test + add), runs Apply, and on deletion runs Cleanup then removes it (test + remove).
    let step = |events: Arc<std::sync::Mutex<Vec<&'static str>>>| {
        let api = api.clone();
        async move {
            let object = Arc::new(bounded(api.get("fin")).await.unwrap());
            bounded(finalizer(&api, FINALIZER, object, |event| {
                events.lock().unwrap().push(match event {
                    FinalizerEvent::Apply(_) => "apply",
                    FinalizerEvent::Cleanup(_) => "cleanup",
                });
                async { Ok::<_, std::convert::Infallible>(Action::await_change()) }
            }))
            .await
            .unwrap();
        }
    };
    step(events.clone()).await;
    let stored = bounded(api.get("fin")).await.unwrap();
    assert_eq!(stored.metadata.finalizers.unwrap(), [FINALIZER]);
    step(events.clone()).await;
    bounded(api.delete("fin", &DeleteParams::default()))
        .await
        .unwrap();
    assert!(exists(&api, "fin").await, "held by the finalizer");
    step(events.clone()).await;
    assert!(!exists(&api, "fin").await, "released after cleanup");
    assert_eq!(*events.lock().unwrap(), ["apply", "cleanup"]);
    server.shutdown().await;
}

#[tokio::test]
async fn odd_namespace_shapes_are_refused_and_termination_finishes() {
    let (server, client) = start().await;
    let resource = kube::core::ApiResource::erase::<Namespace>(&());
    let namespaces: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let namespace =
        dynamic(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "odd"}}));
    bounded(namespaces.create(&PostParams::default(), &namespace))
        .await
        .unwrap();
    // A status or spec of the wrong shape does not decode into the Go type: 400, as the real
    // server answers, and nothing is stored; the deletion then finishes as usual.
    let params = PatchParams::default();
    let refused = status_of(
        bounded(namespaces.patch_status("odd", &params, &Patch::Merge(json!({"status": "weird"}))))
            .await,
    );
    assert_eq!((refused.code, refused.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        refused.message,
        "Namespace in version \"v1\" cannot be handled as a Namespace: json: cannot unmarshal \
         string into Go struct field Namespace.status of type v1.NamespaceStatus"
    );
    let refused = status_of(
        bounded(namespaces.patch("odd", &params, &Patch::Merge(json!({"spec": "weird"})))).await,
    );
    assert_eq!((refused.code, refused.reason.as_str()), (400, "BadRequest"));
    let stored = bounded(namespaces.get("odd")).await.unwrap();
    assert_eq!(stored.data["status"]["phase"], "Active");
    bounded(namespaces.delete("odd", &DeleteParams::default()))
        .await
        .unwrap();
    eventually(|| async {
        bounded(namespaces.get_opt("odd"))
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    server.shutdown().await;
}
