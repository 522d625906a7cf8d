//! CustomResourceDefinitions and custom resources through a typed kube-rs client: serving,
//! the status subresource, generation, schema and CEL validation, pruning, defaults, and
//! removal with the CRD.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt};
use kube_support::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gpucloud.io",
    version = "v1",
    kind = "GpuInstance",
    namespaced,
    status = "GpuInstanceStatus",
    shortname = "gi",
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#
)]
pub struct GpuInstanceSpec {
    #[schemars(range(min = 1))]
    pub size: i32,
    pub region: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct GpuInstanceStatus {
    pub phase: String,
}

/// The derived CRD plus a CEL rule and a defaulted field, as an operator's CRD would carry.
fn crd() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(GpuInstance::crd()).unwrap();
    let spec_schema =
        &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec_schema["x-kubernetes-validations"] = json!([
        {"rule": "self.size <= 8", "message": "at most 8 GPUs per instance"}
    ]);
    spec_schema["properties"]["tier"] = json!({"type": "string", "default": "standard"});
    serde_json::from_value(crd).unwrap()
}

async fn install(client: &kube::Client) -> Api<GpuInstance> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created = bounded(crds.create(&PostParams::default(), &crd()))
        .await
        .unwrap();
    // The server sets the conditions a real apiextensions-apiserver sets once names are
    // accepted: NamesAccepted and Established, both True.
    let conditions = created.status.unwrap().conditions.unwrap();
    for kind in ["NamesAccepted", "Established"] {
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == kind && c.status == "True"),
            "{kind} in {conditions:?}"
        );
    }
    Api::namespaced(client.clone(), "default")
}

fn instance(name: &str, size: i32) -> GpuInstance {
    GpuInstance::new(
        name,
        GpuInstanceSpec {
            size,
            region: "eu-1".into(),
        },
    )
}

#[tokio::test]
async fn crd_serves_custom_resources_with_defaults() {
    let (server, client) = start().await;
    let api = install(&client).await;
    let created = bounded(api.create(&PostParams::default(), &instance("a", 2)))
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::core::ApiResource::erase::<GpuInstance>(&()),
    );
    let stored = bounded(raw.get("a")).await.unwrap();
    assert_eq!(
        stored.data["spec"]["tier"], "standard",
        "schema default applied"
    );
    let list = bounded(api.list(&ListParams::default())).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].spec, created.spec);
    server.shutdown().await;
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let (server, client) = start().await;
    let api = install(&client).await;
    let mut object = instance("s", 1);
    object.status = Some(GpuInstanceStatus {
        phase: "Ignored".into(),
    });
    // Create drops status when the status subresource is enabled (customResourceStrategy
    // PrepareForCreate in apiextensions-apiserver).
    let created = bounded(api.create(&PostParams::default(), &object))
        .await
        .unwrap();
    assert_eq!(created.status, None);

    let status_patch = Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"size": 5}}));
    let after_status = bounded(api.patch_status("s", &PatchParams::default(), &status_patch))
        .await
        .unwrap();
    assert_eq!(after_status.status.as_ref().unwrap().phase, "Running");
    assert_eq!(after_status.spec.size, 1, "/status ignores spec");
    assert_eq!(
        after_status.metadata.generation,
        Some(1),
        "status does not bump generation"
    );

    let main_patch = Patch::Merge(json!({"status": {"phase": "Hacked"}, "spec": {"size": 3}}));
    let after_spec = bounded(api.patch("s", &PatchParams::default(), &main_patch))
        .await
        .unwrap();
    assert_eq!(after_spec.spec.size, 3);
    assert_eq!(
        after_spec.status.as_ref().unwrap().phase,
        "Running",
        "main endpoint ignores status"
    );
    assert_eq!(after_spec.metadata.generation, Some(2));

    let label_patch = Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}));
    let after_label = bounded(api.patch("s", &PatchParams::default(), &label_patch))
        .await
        .unwrap();
    assert_eq!(
        after_label.metadata.generation,
        Some(2),
        "metadata changes keep generation"
    );

    // A no-op update writes nothing: the resourceVersion stays.
    let again = bounded(api.patch("s", &PatchParams::default(), &label_patch))
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        after_label.metadata.resource_version
    );

    // Custom resources refuse unconditional updates: a real server answers 422 for a PUT
    // without metadata.resourceVersion (customResourceStrategy.AllowUnconditionalUpdate).
    let mut unconditional = again.clone();
    unconditional.metadata.resource_version = None;
    let refused =
        status_of(bounded(api.replace("s", &PostParams::default(), &unconditional)).await);
    assert_eq!(refused.code, 422);
    server.shutdown().await;
}

#[tokio::test]
async fn a_status_write_racing_a_delete() {
    let (server, client) = start().await;
    let api = install(&client).await;
    let created = bounded(api.create(&PostParams::default(), &instance("raced", 1)))
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let mut written = created.clone();
    written.status = Some(GpuInstanceStatus {
        phase: "Running".into(),
    });
    bounded(api.delete("raced", &DeleteParams::default()))
        .await
        .unwrap();

    // A PUT to /status carrying the uid read (what kube-rs' replace_status sends): the
    // storage precondition finds no object, 409 (registry Store.Update with
    // `DefaultUpdatedObjectInfo`'s uid precondition, etcd3 GuaranteedUpdate).
    let raced =
        status_of(bounded(api.replace_status("raced", &PostParams::default(), &written)).await);
    assert_eq!((raced.code, raced.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        raced.message,
        format!(
            "Operation cannot be fulfilled on gpuinstances.gpucloud.io \"raced\": StorageError: \
             invalid object, Code: 4, Key: /registry/gpucloud.io/gpuinstances/default/raced, \
             ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: \
             {uid}, UID in object meta: "
        )
    );

    // Without a uid there is no precondition: the missing object is a 404, as is a status
    // patch (a patch carries no precondition) and a status write to a name never used.
    let mut without_uid = written.clone();
    without_uid.metadata.uid = None;
    let missing =
        status_of(bounded(api.replace_status("raced", &PostParams::default(), &without_uid)).await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    let patch = Patch::Merge(json!({"metadata": {"uid": uid}, "status": {"phase": "Running"}}));
    let patched =
        status_of(bounded(api.patch_status("raced", &PatchParams::default(), &patch)).await);
    assert_eq!(patched.code, 404, "{}", patched.message);
    let mut never = without_uid.clone();
    never.metadata.name = Some("never".into());
    let never_used =
        status_of(bounded(api.replace_status("never", &PostParams::default(), &never)).await);
    assert_eq!(never_used.code, 404, "{}", never_used.message);
    server.shutdown().await;
}

#[tokio::test]
async fn annotations_over_256_kib_are_refused_on_custom_resources() {
    let (server, client) = start().await;
    let api = install(&client).await;
    let mut big = instance("big", 1);
    big.metadata.annotations = Some(
        [("example.com/blob".to_owned(), "x".repeat(256 * 1024))]
            .into_iter()
            .collect(),
    );
    // Real: ValidateObjectMetaAccessor (customResourceStrategy.Validate) counts the key too.
    let refused = status_of(bounded(api.create(&PostParams::default(), &big)).await);
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (
            422,
            "GpuInstance.gpucloud.io \"big\" is invalid: metadata.annotations: Too long: may not \
             be more than 262144 bytes"
        )
    );
    let apply = Patch::Apply(json!({
        "apiVersion": "gpucloud.io/v1",
        "kind": "GpuInstance",
        "metadata": {"name": "big", "annotations": {"a": "x".repeat(256 * 1024)}},
        "spec": {"size": 1, "region": "eu-1"},
    }));
    let applied =
        status_of(bounded(api.patch("big", &PatchParams::apply("annotator"), &apply)).await);
    assert_eq!(applied.code, 422, "{}", applied.message);
    server.shutdown().await;
}

#[tokio::test]
async fn schema_and_cel_violations_are_422_with_causes() {
    let (server, client) = start().await;
    let api = install(&client).await;
    // Real wording of a minimum violation (kube-openapi validate, via the apiextensions
    // validator): `spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1`.
    let too_small = status_of(bounded(api.create(&PostParams::default(), &instance("z", 0))).await);
    assert_eq!(
        (too_small.code, too_small.reason.as_str()),
        (422, "Invalid")
    );
    assert_eq!(
        too_small.message,
        "GpuInstance.gpucloud.io \"z\" is invalid: spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"
    );
    let causes = too_small.details.unwrap().causes;
    assert_eq!(causes[0].field, "spec.size");
    assert_eq!(causes[0].reason, "FieldValueInvalid");

    // A failed x-kubernetes-validations rule is a 422 carrying the rule's message
    // (apiextensions-apiserver pkg/apiserver/schema/cel).
    let too_big = status_of(bounded(api.create(&PostParams::default(), &instance("big", 9))).await);
    assert_eq!(too_big.code, 422);
    assert!(
        too_big.message.contains("at most 8 GPUs per instance"),
        "{}",
        too_big.message
    );

    // Unknown fields: pruned with a warning by default, a 400 with fieldValidation=Strict
    // (as kubectl sends), as the real server does.
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::core::ApiResource::erase::<GpuInstance>(&()),
    );
    let with_unknown = dynamic(json!({
        "apiVersion": "gpucloud.io/v1", "kind": "GpuInstance",
        "metadata": {"name": "u"},
        "spec": {"size": 1, "region": "eu-1", "color": "red"},
    }));
    let created = bounded(raw.create(&PostParams::default(), &with_unknown))
        .await
        .unwrap();
    assert!(
        created.data["spec"].get("color").is_none(),
        "unknown field pruned"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn deleting_the_crd_removes_its_objects_and_routes() {
    let (server, client) = start().await;
    let api = install(&client).await;
    let mut held = instance("held", 1);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    bounded(api.create(&PostParams::default(), &held))
        .await
        .unwrap();
    bounded(api.create(&PostParams::default(), &instance("plain", 1)))
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // The real server adds the customresourcecleanup finalizer at creation, so a delete
    // marks the CRD and its instances are deleted first (apiextensions finalizer controller).
    let deleted = bounded(crds.delete("gpuinstances.gpucloud.io", &DeleteParams::default()))
        .await
        .unwrap();
    let terminating = deleted
        .left()
        .expect("the CRD waits for its cleanup finalizer");
    assert_eq!(
        terminating.metadata.finalizers.unwrap(),
        ["customresourcecleanup.apiextensions.k8s.io"]
    );
    eventually(|| async {
        let plain = bounded(api.get_opt("plain")).await.unwrap();
        plain.is_none().then_some(())
    })
    .await;
    // Real: 405 for new instances while the CRD is terminating (crdHandler).
    let refused =
        status_of(bounded(api.create(&PostParams::default(), &instance("late", 1))).await);
    assert_eq!(refused.code, 405);
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    bounded(api.patch("held", &PatchParams::default(), &release))
        .await
        .unwrap();
    // Once the CRD is gone its resource path is a 404, as the real crdHandler answers.
    eventually(|| async {
        match api.list(&ListParams::default()).await {
            Err(kube::Error::Api(status)) if status.code == 404 => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(
        bounded(crds.get_opt("gpuinstances.gpucloud.io"))
            .await
            .unwrap()
            .is_none()
    );
    // Re-creating the CRD serves an empty collection: the old objects went with it.
    let api = install(&client).await;
    assert!(
        bounded(api.list(&ListParams::default()))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn strategic_merge_patch_on_a_custom_resource_is_415() {
    let (server, client) = start().await;
    let api = install(&client).await;
    bounded(api.create(&PostParams::default(), &instance("m", 1)))
        .await
        .unwrap();
    // Real: 415 UnsupportedMediaType (custom resources accept JSON patch, merge patch and
    // apply only; apiextensions-apiserver crdHandler).
    let refused = status_of(
        bounded(api.patch(
            "m",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        ))
        .await,
    );
    assert_eq!(
        (refused.code, refused.reason.as_str()),
        (415, "UnsupportedMediaType")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn every_served_version_reads_the_same_objects() {
    let (server, client) = start().await;
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}});
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "pools.gpucloud.io"},
        "spec": {
            "group": "gpucloud.io",
            "scope": "Namespaced",
            "names": {"plural": "pools", "singular": "pool", "kind": "Pool", "listKind": "PoolList"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema}},
                {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema}},
                {"name": "v1alpha1", "served": false, "storage": false, "schema": {"openAPIV3Schema": schema}},
            ],
        },
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    bounded(crds.create(&PostParams::default(), &crd))
        .await
        .unwrap();
    let at = |version: &str| {
        let resource = kube::core::ApiResource {
            group: "gpucloud.io".into(),
            version: version.into(),
            api_version: format!("gpucloud.io/{version}"),
            kind: "Pool".into(),
            plural: "pools".into(),
        };
        Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), "default", &resource)
    };
    let created = bounded(at("v1beta1").create(
        &PostParams::default(),
        &dynamic(json!({"apiVersion": "gpucloud.io/v1beta1", "kind": "Pool",
                        "metadata": {"name": "p"}, "spec": {"size": 2}})),
    ))
    .await
    .unwrap();
    assert_eq!(created.types.unwrap().api_version, "gpucloud.io/v1beta1");
    // With conversion strategy None the real server only rewrites apiVersion between versions.
    let stored = bounded(at("v1").get("p")).await.unwrap();
    assert_eq!(stored.types.unwrap().api_version, "gpucloud.io/v1");
    assert_eq!(stored.data["spec"]["size"], 2);
    let listed = bounded(at("v1beta1").list(&ListParams::default()))
        .await
        .unwrap();
    assert_eq!(
        listed.items[0].types.as_ref().unwrap().api_version,
        "gpucloud.io/v1beta1"
    );
    // A version with served: false is a 404, as the real crdHandler answers.
    let not_served = status_of(bounded(at("v1alpha1").get("p")).await);
    assert_eq!(not_served.code, 404);
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_fields_warn_by_default_and_fail_when_strict() {
    let (server, client) = start().await;
    install(&client).await;
    let body = |name: &str| {
        serde_json::to_vec(&json!({
            "apiVersion": "gpucloud.io/v1", "kind": "GpuInstance",
            "metadata": {"name": name},
            "spec": {"size": 1, "region": "eu-1", "color": "red"},
        }))
        .unwrap()
    };
    let path = "/apis/gpucloud.io/v1/namespaces/default/gpuinstances";
    let send = |uri: String, body: Vec<u8>| {
        let request = http::Request::post(uri)
            .header("Content-Type", "application/json")
            .body(kube::client::Body::from(body))
            .unwrap();
        client.send(request)
    };
    // Default (Warn): created, pruned, and a `Warning: 299 - "unknown field ..."` header, as
    // the real server's field validation reports it.
    let response = bounded(send(path.to_string(), body("warned")))
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let warning = response.headers()["warning"].to_str().unwrap().to_string();
    assert_eq!(warning, "299 - \"unknown field \\\"spec.color\\\"\"");
    // Strict (what kubectl sends): 400 BadRequest naming the field, worded as the real
    // server's strict decoding error.
    let response = bounded(send(
        format!("{path}?fieldValidation=Strict"),
        body("strict"),
    ))
    .await
    .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let bytes = bounded(http_body_util::BodyExt::collect(response.into_body()))
        .await
        .unwrap()
        .to_bytes();
    let status: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        status["message"],
        "GpuInstance in version \"v1\" cannot be handled as a GpuInstance: strict decoding error: unknown field \"spec.color\""
    );
    server.shutdown().await;
}

#[tokio::test]
async fn invalid_crds_are_rejected_with_causes() {
    let (server, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let base = serde_json::to_value(crd()).unwrap();
    let cases = [
        (
            "/metadata/name",
            json!("wrong.gpucloud.io"),
            "metadata.name",
        ),
        ("/spec/versions/0/storage", json!(false), "spec.versions"),
        (
            "/spec/versions/0/schema/openAPIV3Schema/properties/spec/type",
            json!("nonsense"),
            // One version: its schema is validated as the top-level one.
            "spec.validation.openAPIV3Schema",
        ),
    ];
    for (pointer, value, field) in cases {
        let mut broken = base.clone();
        *broken.pointer_mut(pointer).unwrap() = value;
        let broken: CustomResourceDefinition = serde_json::from_value(broken).unwrap();
        // Real: 422 Invalid from the CRD validation (apiextensions-apiserver
        // pkg/apis/apiextensions/validation), with a cause per offending field.
        let refused = status_of(bounded(crds.create(&PostParams::default(), &broken)).await);
        assert_eq!(
            (refused.code, refused.reason.as_str()),
            (422, "Invalid"),
            "{pointer}"
        );
        let causes = refused.details.unwrap().causes;
        assert!(
            causes.iter().any(|cause| cause.field.starts_with(field)),
            "{pointer}: {causes:?}"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn protobuf_bodies_for_custom_resources_are_415() {
    let (server, client) = start().await;
    install(&client).await;
    // A well-formed Kubernetes protobuf envelope naming the custom kind.
    let mut type_meta = vec![0x0a, 14];
    type_meta.extend_from_slice(b"gpucloud.io/v1");
    type_meta.extend_from_slice(&[0x12, 11]);
    type_meta.extend_from_slice(b"GpuInstance");
    let mut body = b"k8s\0".to_vec();
    body.push(0x0a);
    body.push(type_meta.len() as u8);
    body.extend_from_slice(&type_meta);
    let request = http::Request::post("/apis/gpucloud.io/v1/namespaces/default/gpuinstances")
        .header("Content-Type", "application/vnd.kubernetes.protobuf")
        .body(kube::client::Body::from(body))
        .unwrap();
    let response = bounded(client.send(request)).await.unwrap();
    // Real: 415, since apiextensions-apiserver has no protobuf serializer for custom
    // resources; the message lists what it does accept.
    assert_eq!(response.status().as_u16(), 415);
    let bytes = bounded(http_body_util::BodyExt::collect(response.into_body()))
        .await
        .unwrap()
        .to_bytes();
    let status: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(status["reason"], "UnsupportedMediaType");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("accepted media types include: application/json, application/yaml ("),
        "{message}"
    );
    server.shutdown().await;
}
