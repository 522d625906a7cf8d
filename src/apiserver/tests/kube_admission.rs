//! ValidatingAdmissionPolicy through kube-rs: the denial's Status as kube-apiserver writes it,
//! creates, updates, deletes and deletecollection admitted, policies checked when written, a
//! namespace whose content a policy keeps, with the namespace controller's conditions, and
//! policy parameters (a custom resource by selector, a ConfigMap by name) read at each request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_support::*;
use serde_json::{Value, json};

/// A policy refusing deletes of ConfigMaps annotated `example.com/keep: "true"`.
fn keep_policy(reason: Option<&str>) -> Value {
    let mut validation = json!({
        "expression": "!(has(oldObject.metadata.annotations) && 'example.com/keep' in oldObject.metadata.annotations && oldObject.metadata.annotations['example.com/keep'] == 'true')",
        "messageExpression": "'ConfigMap ' + request.namespace + '/' + request.name + ' is kept'",
    });
    if let Some(reason) = reason {
        validation["reason"] = json!(reason);
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "keep"},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["DELETE"], "resources": ["configmaps"]}]},
            "validations": [validation],
        },
    })
}

fn binding_of(policy: &str, actions: &[&str]) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": format!("{policy}-binding")},
        "spec": {"policyName": policy, "validationActions": actions},
    })
}

async fn install(client: &kube::Client, policy: Value, binding: Value) {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    bounded(policies.create(
        &PostParams::default(),
        &serde_json::from_value(policy).unwrap(),
    ))
    .await
    .unwrap();
    bounded(bindings.create(
        &PostParams::default(),
        &serde_json::from_value(binding).unwrap(),
    ))
    .await
    .unwrap();
}

fn kept(name: &str) -> DynamicObject {
    let mut object = configmap(name, json!({}), json!({}));
    object.metadata.annotations =
        Some([("example.com/keep".to_string(), "true".to_string())].into());
    object
}

async fn exists(api: &Api<DynamicObject>, name: &str) -> bool {
    bounded(api.get_opt(name)).await.unwrap().is_some()
}

#[tokio::test]
async fn a_refused_delete_is_the_status_kube_apiserver_writes() {
    let (server, client) = start().await;
    install(
        &client,
        keep_policy(Some("Forbidden")),
        binding_of("keep", &["Deny"]),
    )
    .await;
    let api = configmaps(&client, "default");
    create(&api, &kept("settings")).await;

    let refused = status_of(bounded(api.delete("settings", &DeleteParams::default())).await);
    // admission.NewForbidden with the validation's reason and code; the cause repeats the
    // policy's part of the message (validating/dispatcher.go).
    let cause = "ValidatingAdmissionPolicy 'keep' with binding 'keep-binding' denied request: ConfigMap default/settings is kept";
    assert_eq!(refused.code, 403);
    assert_eq!(refused.reason, "Forbidden");
    assert_eq!(
        refused.message,
        format!("configmaps \"settings\" is forbidden: {cause}")
    );
    let details = refused.details.unwrap();
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        ("settings", "", "configmaps")
    );
    assert_eq!(details.causes.len(), 1);
    assert_eq!(details.causes[0].message, cause);
    assert_eq!(details.causes[0].reason, "");
    assert!(exists(&api, "settings").await);

    // A server dry run is admitted too.
    let dry_run = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    assert_eq!(
        status_of(bounded(api.delete("settings", &dry_run)).await).code,
        403
    );

    // Unannotated objects go; a protected one goes once the annotation is removed (an update,
    // which this policy does not match).
    create(&api, &configmap("plain", json!({}), json!({}))).await;
    bounded(api.delete("plain", &DeleteParams::default()))
        .await
        .unwrap();
    let release = Patch::Merge(json!({"metadata": {"annotations": {"example.com/keep": null}}}));
    bounded(api.patch("settings", &PatchParams::default(), &release))
        .await
        .unwrap();
    bounded(api.delete("settings", &DeleteParams::default()))
        .await
        .unwrap();
    assert!(!exists(&api, "settings").await);
    server.shutdown().await;
}

#[tokio::test]
async fn without_a_reason_a_refusal_is_invalid() {
    let (server, client) = start().await;
    install(&client, keep_policy(None), binding_of("keep", &["Deny"])).await;
    let api = configmaps(&client, "default");
    create(&api, &kept("settings")).await;
    let refused = status_of(bounded(api.delete("settings", &DeleteParams::default())).await);
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert!(
        refused
            .message
            .starts_with("configmaps \"settings\" is forbidden: ValidatingAdmissionPolicy 'keep'"),
        "{}",
        refused.message
    );
    server.shutdown().await;
}

#[tokio::test]
async fn deletecollection_stops_at_the_first_refusal() {
    let (server, client) = start().await;
    install(
        &client,
        keep_policy(Some("Forbidden")),
        binding_of("keep", &["Deny"]),
    )
    .await;
    let api = configmaps(&client, "default");
    for object in [
        configmap("a", json!({}), json!({})),
        kept("b"),
        configmap("c", json!({}), json!({})),
    ] {
        create(&api, &object).await;
    }
    // Each object is admitted as a DELETE of its own; with kube-apiserver's one
    // deletecollection worker the objects after the refused one stay too.
    let refused = status_of(
        bounded(api.delete_collection(&DeleteParams::default(), &ListParams::default())).await,
    );
    assert_eq!(refused.code, 403);
    assert!(
        refused
            .message
            .starts_with("configmaps \"b\" is forbidden: ")
    );
    assert!(!exists(&api, "a").await);
    assert!(exists(&api, "b").await && exists(&api, "c").await);
    server.shutdown().await;
}

#[tokio::test]
async fn creates_and_updates_see_the_object_the_old_object_and_the_request() {
    let (server, client) = start().await;
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "small"},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
            "variables": [{"name": "size", "expression": "has(object.data) && 'size' in object.data ? object.data['size'] : 'small'"}],
            "validations": [
                {"expression": "variables.size == 'small'",
                 "messageExpression": "request.operation + ' by ' + request.userInfo.username + ': size ' + variables.size"},
                {"expression": "oldObject == null || !has(oldObject.data) || !('frozen' in oldObject.data)",
                 "message": "frozen"},
            ],
        },
    });
    install(&client, policy, binding_of("small", &["Deny"])).await;
    let api = configmaps(&client, "default");
    let refused = status_of(
        bounded(api.create(
            &PostParams::default(),
            &configmap("big", json!({}), json!({"size": "large"})),
        ))
        .await,
    );
    assert_eq!(refused.code, 422);
    assert_eq!(
        refused.message,
        "configmaps \"big\" is forbidden: ValidatingAdmissionPolicy 'small' with binding 'small-binding' denied request: CREATE by admin: size large"
    );
    create(
        &api,
        &configmap("frozen", json!({}), json!({"frozen": "yes"})),
    )
    .await;
    let change = Patch::Merge(json!({"data": {"other": "x"}}));
    let refused = status_of(bounded(api.patch("frozen", &PatchParams::default(), &change)).await);
    assert!(
        refused.message.ends_with("denied request: frozen"),
        "{}",
        refused.message
    );
    // Deletes are not matched.
    bounded(api.delete("frozen", &DeleteParams::default()))
        .await
        .unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn policies_and_bindings_are_checked_and_defaulted_when_written() {
    let (server, client) = start().await;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let mut invalid = keep_policy(None);
    invalid["spec"]["validations"] = json!([]);
    invalid["spec"]["paramKind"] = json!({"apiVersion": "v1"});
    let refused = status_of(
        bounded(policies.create(
            &PostParams::default(),
            &serde_json::from_value(invalid).unwrap(),
        ))
        .await,
    );
    assert_eq!(refused.code, 422);
    assert_eq!(
        refused.message,
        "ValidatingAdmissionPolicy.admissionregistration.k8s.io \"keep\" is invalid: [spec.paramKind.kind: Required value, spec.validations: Required value: validations or auditAnnotations must contain at least one item, spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item]"
    );

    let created = bounded(policies.create(
        &PostParams::default(),
        &serde_json::from_value(keep_policy(None)).unwrap(),
    ))
    .await
    .unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let constraints = spec.match_constraints.unwrap();
    assert_eq!(constraints.match_policy.as_deref(), Some("Equivalent"));
    assert!(constraints.namespace_selector.is_some());
    assert_eq!(created.metadata.generation, Some(1));

    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let refused = status_of(
        bounded(bindings.create(
            &PostParams::default(),
            &serde_json::from_value(binding_of("keep", &["Deny", "Warn"])).unwrap(),
        ))
        .await,
    );
    assert!(
        refused
            .message
            .contains("spec.validationActions: Invalid value: []string{\"Deny\", \"Warn\"}: must not contain both Deny and Warn"),
        "{}",
        refused.message
    );
    server.shutdown().await;
}

/// The namespace controller's condition, by type.
fn condition(namespace: &Namespace, type_: &str) -> Option<(String, String, String)> {
    namespace
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

#[tokio::test]
async fn a_refused_delete_keeps_its_namespace_terminating_until_allowed() {
    let (server, client) = start().await;
    install(
        &client,
        keep_policy(Some("Forbidden")),
        binding_of("keep", &["Deny"]),
    )
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    bounded(namespaces.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap(),
    ))
    .await
    .unwrap();
    let api = configmaps(&client, "team-a");
    create(&api, &configmap("plain", json!({}), json!({}))).await;
    create(&api, &kept("settings")).await;

    bounded(namespaces.delete("team-a", &DeleteParams::default()))
        .await
        .unwrap();
    // As kube-apiserver's namespace controller reports a deletecollection the policy refused
    // (namespace/deletion/status_condition_utils.go).
    let refused = eventually(|| {
        let namespaces = namespaces.clone();
        async move {
            let namespace = namespaces.get("team-a").await.ok()?;
            let failure = condition(&namespace, "NamespaceDeletionContentFailure")?;
            (failure.0 == "True").then_some(namespace)
        }
    })
    .await;
    assert_eq!(
        condition(&refused, "NamespaceDeletionContentFailure").unwrap(),
        (
            "True".to_string(),
            "ContentDeletionFailed".to_string(),
            "Failed to delete all resource types, 1 remaining: configmaps \"settings\" is forbidden: ValidatingAdmissionPolicy 'keep' with binding 'keep-binding' denied request: ConfigMap team-a/settings is kept".to_string()
        )
    );
    assert_eq!(
        condition(&refused, "NamespaceContentRemaining").unwrap().0,
        "False",
        "a resource whose deletion failed is reported by its error"
    );
    assert_eq!(
        refused.status.as_ref().unwrap().phase.as_deref(),
        Some("Terminating")
    );
    assert!(exists(&api, "settings").await);
    assert!(!exists(&api, "plain").await, "the rest of the content goes");

    // Removing the annotation (updates are still allowed) lets the namespace go.
    let release = Patch::Merge(json!({"metadata": {"annotations": {"example.com/keep": null}}}));
    bounded(api.patch("settings", &PatchParams::default(), &release))
        .await
        .unwrap();
    eventually(|| {
        let namespaces = namespaces.clone();
        async move {
            namespaces
                .get_opt("team-a")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    server.shutdown().await;
}

// === parameters ===

/// Installs the cluster-scoped `GpuLimit` kind (`example.com/v1`), a policy's params.
async fn install_gpu_limits(client: &kube::Client) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gpulimits.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"plural": "gpulimits", "singular": "gpulimit", "kind": "GpuLimit",
                      "listKind": "GpuLimitList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                "openAPIV3Schema": {"type": "object", "properties": {"spec": {
                    "type": "object", "properties": {"maxSize": {"type": "integer"}}}}}}}],
        },
    });
    bounded(crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd).unwrap(),
    ))
    .await
    .unwrap();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "GpuLimit"),
        "gpulimits",
    );
    Api::all_with(client.clone(), &resource)
}

fn gpu_limit(name: &str, max_size: i64) -> DynamicObject {
    dynamic(json!({"apiVersion": "example.com/v1", "kind": "GpuLimit",
                   "metadata": {"name": name}, "spec": {"maxSize": max_size}}))
}

/// A policy on ConfigMap creates: `data.size` at most the param's limit.
fn size_policy(param_kind: Value, limit: &str, message: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "size"},
        "spec": {
            "paramKind": param_kind,
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "validations": [{
                "expression": format!("!has(object.data) || !('size' in object.data) || int(object.data.size) <= {limit}"),
                "messageExpression": message,
                "reason": "Forbidden",
            }],
        },
    })
}

fn size_binding(param_ref: Value) -> Value {
    let mut binding = binding_of("size", &["Deny"]);
    binding["spec"]["paramRef"] = param_ref;
    binding
}

fn sized(name: &str, size: &str) -> DynamicObject {
    configmap(name, json!({}), json!({"size": size}))
}

#[tokio::test]
async fn every_param_a_selector_finds_is_evaluated_at_each_request() {
    let (server, client) = start().await;
    let limits = install_gpu_limits(&client).await;
    install(
        &client,
        size_policy(
            json!({"apiVersion": "example.com/v1", "kind": "GpuLimit"}),
            "params.spec.maxSize",
            "'size ' + object.data.size + ' is over the limit of ' + params.metadata.name",
        ),
        size_binding(json!({"selector": {}, "parameterNotFoundAction": "Deny"})),
    )
    .await;
    let api = configmaps(&client, "default");

    // No params yet: the binding's Deny, a configuration error (422, no reason of its own).
    let refused = status_of(bounded(api.create(&PostParams::default(), &sized("a", "1"))).await);
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        refused.message,
        "configmaps \"a\" is forbidden: ValidatingAdmissionPolicy 'size' with binding 'size-binding' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );

    // Params created after the binding count; a request refused by the second one only names it.
    create(&limits, &gpu_limit("limit-a", 8)).await;
    create(&limits, &gpu_limit("limit-b", 2)).await;
    create(&api, &sized("small", "2")).await;
    let refused = status_of(bounded(api.create(&PostParams::default(), &sized("big", "4"))).await);
    let cause = "ValidatingAdmissionPolicy 'size' with binding 'size-binding' denied request: size 4 is over the limit of limit-b";
    assert_eq!((refused.code, refused.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        refused.message,
        format!("configmaps \"big\" is forbidden: {cause}")
    );
    assert_eq!(refused.details.unwrap().causes[0].message, cause);

    // A changed param takes effect at the next request.
    let raise = Patch::Merge(json!({"spec": {"maxSize": 8}}));
    bounded(limits.patch("limit-b", &PatchParams::default(), &raise))
        .await
        .unwrap();
    create(&api, &sized("big", "4")).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_configmap_named_by_the_binding_is_the_param() {
    let (server, client) = start().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    bounded(namespaces.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "config"}})).unwrap(),
    ))
    .await
    .unwrap();
    install(
        &client,
        size_policy(
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            "int(params.data.maxSize)",
            "'at most ' + params.data.maxSize + ' (' + params.kind + ' ' + params.metadata.namespace + '/' + params.metadata.name + ')'",
        ),
        size_binding(
            json!({"name": "limits", "namespace": "config", "parameterNotFoundAction": "Allow"}),
        ),
    )
    .await;
    let api = configmaps(&client, "default");

    // Allow: without the param nothing is evaluated.
    create(&api, &sized("before", "4")).await;
    create(
        &configmaps(&client, "config"),
        &configmap("limits", json!({}), json!({"maxSize": "2"})),
    )
    .await;
    let refused =
        status_of(bounded(api.create(&PostParams::default(), &sized("after", "4"))).await);
    assert_eq!(refused.code, 403);
    assert_eq!(
        refused.message,
        "configmaps \"after\" is forbidden: ValidatingAdmissionPolicy 'size' with binding 'size-binding' denied request: at most 2 (ConfigMap config/limits)"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn misconfigured_params_are_refusals_and_bad_param_refs_are_invalid() {
    let (server, client) = start().await;
    let limits = install_gpu_limits(&client).await;

    // A param kind nothing serves: the policy's configuration error.
    install(
        &client,
        size_policy(
            json!({"apiVersion": "example.com/v1", "kind": "GpuQuota"}),
            "params.spec.maxSize",
            "'over'",
        ),
        size_binding(json!({"selector": {}, "parameterNotFoundAction": "Allow"})),
    )
    .await;
    let api = configmaps(&client, "default");
    let refused = status_of(bounded(api.create(&PostParams::default(), &sized("a", "1"))).await);
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        refused.message,
        "configmaps \"a\" is forbidden: ValidatingAdmissionPolicy 'size' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=GpuQuota'"
    );

    // A namespaced param kind, no paramRef.namespace, a cluster-scoped request.
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    bounded(policies.delete("size", &DeleteParams::default()))
        .await
        .unwrap();
    bounded(bindings.delete("size-binding", &DeleteParams::default()))
        .await
        .unwrap();
    let on_limits = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "limits"},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["example.com"], "apiVersions": ["*"],
                "operations": ["CREATE"], "resources": ["gpulimits"]}]},
            "validations": [{"expression": "true"}],
        },
    });
    let mut by_name = binding_of("limits", &["Deny"]);
    by_name["spec"]["paramRef"] = json!({"name": "limits", "parameterNotFoundAction": "Allow"});
    install(&client, on_limits, by_name).await;
    let refused =
        status_of(bounded(limits.create(&PostParams::default(), &gpu_limit("x", 1))).await);
    assert_eq!(
        refused.message,
        "gpulimits.example.com \"x\" is forbidden: ValidatingAdmissionPolicy 'limits' with binding 'limits-binding' denied request: failed to configure binding: cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
    );

    // A paramRef with both name and selector and no parameterNotFoundAction is invalid.
    let mut bad = binding_of("limits", &["Deny"]);
    bad["metadata"]["name"] = json!("bad");
    bad["spec"]["paramRef"] = json!({"name": "limits", "selector": {}});
    let refused = status_of(
        bounded(bindings.create(
            &PostParams::default(),
            &serde_json::from_value(bad).unwrap(),
        ))
        .await,
    );
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        refused.message,
        "ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io \"bad\" is invalid: [spec.paramRef.name: Forbidden: name and selector are mutually exclusive, spec.paramRef.selector: Forbidden: name and selector are mutually exclusive, spec.paramRef.parameterNotFoundAction: Required value]"
    );
    server.shutdown().await;
}
