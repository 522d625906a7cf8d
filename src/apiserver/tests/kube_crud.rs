//! CRUD, lists and error Statuses through the kube-rs client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_support::*;
use serde_json::json;

#[tokio::test]
async fn create_get_update_delete_a_configmap() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let created = create(
        &api,
        &configmap("a", json!({"app": "web"}), json!({"k": "v"})),
    )
    .await;
    let uid = created.metadata.uid.clone().expect("uid set");
    assert!(created.metadata.creation_timestamp.is_some());
    let first_version: u64 = created
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .expect("resourceVersion is a decimal string");

    let fetched = bounded(api.get("a")).await.unwrap();
    assert_eq!(fetched.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(fetched.data["data"]["k"], "v");

    let mut changed = fetched.clone();
    changed.data["data"]["k"] = json!("w");
    let updated = bounded(api.replace("a", &PostParams::default(), &changed))
        .await
        .unwrap();
    let second_version: u64 = updated
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(second_version > first_version);
    assert_eq!(updated.data["data"]["k"], "w");

    // A stale resourceVersion is a 409 Conflict, worded as the real registry store words it
    // (k8s.io/apiserver/pkg/registry/generic/registry/store.go, errors.NewConflict).
    let stale = status_of(bounded(api.replace("a", &PostParams::default(), &fetched)).await);
    assert_eq!(stale.code, 409);
    assert_eq!(stale.reason, "Conflict");
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    bounded(api.delete("a", &DeleteParams::default()))
        .await
        .unwrap();
    // A real kube-apiserver answers a GET of a missing object with 404 NotFound and
    // details naming the resource (apimachinery errors.NewNotFound).
    let missing = status_of(bounded(api.get("a")).await);
    assert_eq!(missing.code, 404);
    assert_eq!(missing.reason, "NotFound");
    assert_eq!(missing.message, "configmaps \"a\" not found");
    server.shutdown().await;
}

#[tokio::test]
async fn create_errors_are_statuses() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    create(&api, &configmap("dup", json!({}), json!({}))).await;
    // Real: 409 AlreadyExists, `configmaps "dup" already exists`.
    let duplicate = status_of(
        bounded(api.create(
            &PostParams::default(),
            &configmap("dup", json!({}), json!({})),
        ))
        .await,
    );
    assert_eq!(
        (duplicate.code, duplicate.reason.as_str()),
        (409, "AlreadyExists")
    );
    assert_eq!(duplicate.message, "configmaps \"dup\" already exists");

    // Real: 422 Invalid with a cause on metadata.name for a name that is not a DNS subdomain.
    let invalid = status_of(
        bounded(api.create(
            &PostParams::default(),
            &configmap("Bad_Name", json!({}), json!({})),
        ))
        .await,
    );
    assert_eq!((invalid.code, invalid.reason.as_str()), (422, "Invalid"));
    let causes = invalid.details.unwrap().causes;
    assert_eq!(causes[0].field, "metadata.name");

    // Real (NamespaceLifecycle admission): 404 `namespaces "nope" not found`.
    let elsewhere = configmaps(&client, "nope");
    let no_namespace = status_of(
        bounded(elsewhere.create(
            &PostParams::default(),
            &configmap("x", json!({}), json!({})),
        ))
        .await,
    );
    assert_eq!(no_namespace.code, 404);
    assert_eq!(no_namespace.message, "namespaces \"nope\" not found");
    server.shutdown().await;
}

#[tokio::test]
async fn generate_name_and_dry_run() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let mut object = configmap("", json!({}), json!({}));
    object.metadata.name = None;
    object.metadata.generate_name = Some("gen-".into());
    let created = create(&api, &object).await;
    let name = created.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let would_be = bounded(api.create(&dry, &configmap("dry", json!({}), json!({}))))
        .await
        .unwrap();
    assert_eq!(would_be.metadata.name.as_deref(), Some("dry"));
    // dryRun=All persists nothing (apiserver handlers/create.go): the object is a 404.
    assert!(status_of(bounded(api.get("dry")).await).code == 404);

    // A dry-run patch answers with the patched object and changes nothing stored.
    let dry_patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let before = bounded(api.get(&name)).await.unwrap();
    let patched = bounded(api.patch(
        &name,
        &dry_patch,
        &Patch::Merge(json!({"data": {"k": "v"}})),
    ))
    .await
    .unwrap();
    assert_eq!(patched.data["data"]["k"], "v");
    let after = bounded(api.get(&name)).await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert!(
        after
            .data
            .get("data")
            .is_none_or(|data| data.get("k").is_none())
    );
    server.shutdown().await;
}

#[tokio::test]
async fn label_and_field_selected_lists_and_pages() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    for (name, app, tier) in [
        ("a", "web", Some("front")),
        ("b", "web", None),
        ("c", "db", Some("back")),
        ("d", "cache", None),
    ] {
        let labels = match tier {
            Some(tier) => json!({"app": app, "tier": tier}),
            None => json!({"app": app}),
        };
        create(&api, &configmap(name, labels, json!({}))).await;
    }
    let names = |list: kube::core::ObjectList<kube::api::DynamicObject>| -> Vec<String> {
        list.items
            .into_iter()
            .map(|o| o.metadata.name.unwrap())
            .collect()
    };
    let select = |selector: &str| ListParams::default().labels(selector);
    for (selector, expected) in [
        ("app=web", vec!["a", "b"]),
        ("app==web", vec!["a", "b"]),
        ("app!=web", vec!["c", "d"]),
        ("app in (db,cache)", vec!["c", "d"]),
        ("app notin (db,cache)", vec!["a", "b"]),
        ("tier", vec!["a", "c"]),
        ("!tier", vec!["b", "d"]),
    ] {
        let list = bounded(api.list(&select(selector))).await.unwrap();
        assert_eq!(names(list), expected, "{selector}");
    }
    let by_name = bounded(api.list(&ListParams::default().fields("metadata.name=c")))
        .await
        .unwrap();
    assert_eq!(names(by_name), ["c"]);

    // Real: a malformed selector is a 400 BadRequest.
    let bad = status_of(bounded(api.list(&select("app in web"))).await);
    assert_eq!(bad.code, 400);

    let first = bounded(api.list(&ListParams::default().limit(3)))
        .await
        .unwrap();
    let token = first.metadata.continue_.clone().expect("more pages");
    assert_eq!(first.metadata.remaining_item_count, Some(1));
    let version = first.metadata.resource_version.clone();
    assert_eq!(names(first), ["a", "b", "c"]);
    let second = bounded(api.list(&ListParams::default().limit(3).continue_token(&token)))
        .await
        .unwrap();
    assert!(
        second
            .metadata
            .continue_
            .as_deref()
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(second.metadata.resource_version, version);
    assert_eq!(names(second), ["d"]);
    server.shutdown().await;
}

#[tokio::test]
async fn merge_and_json_patches() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let created = create(&api, &configmap("p", json!({"a": "1"}), json!({"x": "1"}))).await;
    let params = PatchParams::default();
    let merged = bounded(api.patch(
        "p",
        &params,
        &Patch::Merge(json!({"metadata": {"labels": {"b": "2"}}, "data": {"x": null, "y": "2"}})),
    ))
    .await
    .unwrap();
    assert_eq!(merged.metadata.labels.as_ref().unwrap().len(), 2);
    assert_eq!(merged.data["data"], json!({"y": "2"}));

    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/data/z", "value": "3"},
    ]))
    .unwrap();
    let patched = bounded(api.patch("p", &params, &Patch::<()>::Json(patch)))
        .await
        .unwrap();
    assert_eq!(patched.data["data"]["z"], "3");

    // A merge patch carrying a stale resourceVersion is a 409 Conflict, as on a real server
    // (the patched object's resourceVersion is the update precondition, handlers/patch.go).
    let stale = status_of(
        bounded(api.patch(
            "p",
            &params,
            &Patch::Merge(
                json!({"metadata": {"resourceVersion": created.metadata.resource_version}}),
            ),
        ))
        .await,
    );
    assert_eq!(stale.code, 409);
    server.shutdown().await;
}

#[tokio::test]
async fn strategic_merge_patch_merges_lists_by_key() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    // Real owners, so the garbage collector leaves the dependent alone.
    let mut uids = Vec::new();
    for name in ["o1", "o2"] {
        let owner = create(&api, &configmap(name, json!({}), json!({}))).await;
        uids.push(owner.metadata.uid.unwrap());
    }
    let owner_ref =
        |uid: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": uid});
    let mut object = configmap("s", json!({}), json!({"a": "1"}));
    object.metadata.owner_references =
        Some(vec![serde_json::from_value(owner_ref(&uids[0])).unwrap()]);
    create(&api, &object).await;
    // ownerReferences merge by uid in a strategic merge patch (a JSON merge patch would
    // replace the list), as the real server's patch strategy for ObjectMeta declares.
    let patched = bounded(api.patch(
        "s",
        &PatchParams::default(),
        &Patch::Strategic(json!({
            "metadata": {"ownerReferences": [owner_ref(&uids[1])]},
            "data": {"b": "2"},
        })),
    ))
    .await
    .unwrap();
    let owners: Vec<String> = patched
        .metadata
        .owner_references
        .unwrap()
        .into_iter()
        .map(|owner| owner.uid)
        .collect();
    assert_eq!(owners, uids);
    assert_eq!(patched.data["data"], json!({"a": "1", "b": "2"}));
    server.shutdown().await;
}

#[tokio::test]
async fn metadata_only_reads() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    create(
        &api,
        &configmap("meta", json!({"app": "web"}), json!({"secret-ish": "x"})),
    )
    .await;
    // kube-rs asks for PartialObjectMetadata; the real server converts objects to it
    // (apiserver endpoints/handlers/response.go asPartialObjectMetadata).
    let object = bounded(api.get_metadata("meta")).await.unwrap();
    assert_eq!(object.types.as_ref().unwrap().kind, "PartialObjectMetadata");
    assert_eq!(object.metadata.labels.unwrap()["app"], "web");
    let list = bounded(api.list_metadata(&ListParams::default()))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let raw = http::Request::get("/api/v1/namespaces/default/configmaps/meta")
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .unwrap();
    let partial: serde_json::Value =
        serde_json::from_str(&bounded(client.request_text(raw)).await.unwrap()).unwrap();
    assert!(partial.get("data").is_none(), "{partial}");
    assert_eq!(partial["metadata"]["name"], "meta");
    server.shutdown().await;
}

#[tokio::test]
async fn metadata_validation_and_protected_namespaces() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    // Real: 422 for a label value that is not a valid label value (ValidateLabels).
    let bad_label = status_of(
        bounded(api.create(
            &PostParams::default(),
            &configmap("l", json!({"app": "not valid!"}), json!({})),
        ))
        .await,
    );
    assert_eq!(bad_label.code, 422);
    assert_eq!(
        bad_label.details.unwrap().causes[0].field,
        "metadata.labels"
    );
    // Real (ValidateAnnotationsSize): keys and values over 256 KiB together are refused, 422
    // "metadata.annotations: Too long: may not be more than 262144 bytes"; exactly 256 KiB
    // passes.
    let annotated = |name: &str, bytes: usize| {
        let key = "example.com/blob";
        dynamic(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "annotations": {key: "x".repeat(bytes - key.len())}},
        }))
    };
    let too_large = status_of(
        bounded(api.create(&PostParams::default(), &annotated("big", 256 * 1024 + 1))).await,
    );
    assert_eq!(too_large.code, 422);
    assert!(
        too_large
            .message
            .contains("metadata.annotations: Too long: may not be more than 262144 bytes"),
        "{}",
        too_large.message
    );
    bounded(api.create(&PostParams::default(), &annotated("fits", 256 * 1024)))
        .await
        .unwrap();
    // Real (NamespaceLifecycle): 403 Forbidden "this namespace may not be deleted".
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let refused = status_of(bounded(namespaces.delete("default", &DeleteParams::default())).await);
    assert_eq!((refused.code, refused.reason.as_str()), (403, "Forbidden"));
    server.shutdown().await;
}

#[tokio::test]
async fn annotations_are_validated_as_apimachinery_does() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let annotated = |name: &str, annotations: serde_json::Value| {
        dynamic(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "annotations": annotations},
        }))
    };
    const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and \
        must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
        '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    // Real (ValidateAnnotations): each key must be a qualified name once lowercased; the
    // error names the key as written, one error per problem (IsQualifiedName).
    let cases = [
        ("not valid!", format!("name part {NAME_RULE}")),
        (
            "example.com/a/b",
            format!(
                "a qualified name {NAME_RULE} with an optional DNS subdomain prefix and '/' \
                 (e.g. 'example.com/MyName')"
            ),
        ),
        (
            "-bad.example.com/x",
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character \
             (e.g. 'example.com', regex used for validation is \
             '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                .to_owned(),
        ),
        ("/x", "prefix part must be non-empty".to_owned()),
    ];
    for (key, detail) in cases {
        let refused = status_of(
            bounded(api.create(
                &PostParams::default(),
                &annotated("bad-key", json!({key: "v"})),
            ))
            .await,
        );
        assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            refused.message,
            format!(
                "ConfigMap \"bad-key\" is invalid: metadata.annotations: Invalid value: \
                 {key:?}: {detail}"
            )
        );
    }
    // Case does not matter in a key (it is checked lowercased), unlike a label key.
    bounded(api.create(
        &PostParams::default(),
        &annotated("upper", json!({"Example.COM/Upper-Case": "v"})),
    ))
    .await
    .unwrap();

    // Over 256 KiB of keys and values is refused on every write, not only on create.
    let big = json!({"example.com/blob": "x".repeat(256 * 1024)});
    let too_long = "ConfigMap \"upper\" is invalid: metadata.annotations: Too long: may not be \
                    more than 262144 bytes";
    let merge = Patch::Merge(json!({"metadata": {"annotations": big}}));
    let json_patch = Patch::<()>::Json(
        serde_json::from_value(
            json!([{"op": "add", "path": "/metadata/annotations/example.com~1blob", "value": big["example.com/blob"]}]),
        )
        .unwrap(),
    );
    let apply = Patch::Apply(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "upper", "annotations": big},
    }));
    let params = PatchParams::apply("annotator");
    for refused in [
        status_of(bounded(api.patch("upper", &PatchParams::default(), &merge)).await),
        status_of(bounded(api.patch("upper", &PatchParams::default(), &json_patch)).await),
        status_of(bounded(api.patch("upper", &params, &apply)).await),
    ] {
        assert_eq!((refused.code, refused.message.as_str()), (422, too_long));
    }
    let mut replaced = bounded(api.get("upper")).await.unwrap();
    replaced.metadata.annotations = Some(
        [("example.com/blob".to_owned(), "x".repeat(256 * 1024))]
            .into_iter()
            .collect(),
    );
    let refused = status_of(bounded(api.replace("upper", &PostParams::default(), &replaced)).await);
    assert_eq!((refused.code, refused.message.as_str()), (422, too_long));
    server.shutdown().await;
}

#[tokio::test]
async fn owner_references_are_validated() {
    let (server, client) = start().await;
    let api = configmaps(&client, "default");
    let mut object = configmap("o", json!({}), json!({}));
    object.metadata.owner_references = Some(vec![
        serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "", "uid": "1"}),
        )
        .unwrap(),
    ]);
    // Real: 422 with metadata.ownerReferences[0].name Required (ValidateOwnerReferences).
    let invalid = status_of(bounded(api.create(&PostParams::default(), &object)).await);
    assert_eq!(invalid.code, 422);
    assert_eq!(
        invalid.details.unwrap().causes[0].field,
        "metadata.ownerReferences[0].name"
    );
    server.shutdown().await;
}
