//! RBAC authorization (`AuthorizationMode::Rbac`): a server with an administrator in
//! `system:masters` and users holding only what is bound to them. Denials are checked against
//! kube-apiserver's exact Status, bindings against the bootstrap roles and their aggregation,
//! role and binding writes against escalation prevention, and the self access reviews against
//! the same rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use gpucloud_apiserver::{ApiServerConfig, ApiServerHandle, AuthorizationMode};
use kube_support::*;
use serde_json::{Value, json};

const ADMIN_TOKEN: &str = "rbac-admin-token";

/// A server under RBAC with `admin` (system:masters), `alice` and `bob`, namespaces `team-a`
/// and `team-b`; the admin's client.
async fn start_rbac() -> (ApiServerHandle, kube::Client) {
    let config = ApiServerConfig::default()
        .with_authorization(AuthorizationMode::Rbac)
        .with_user(ADMIN_TOKEN, "admin", &["system:masters"])
        .with_user("rbac-alice-token", "alice", &[])
        .with_user("rbac-bob-token", "bob", &["devs"]);
    let (server, admin) = start_with(config).await;
    for namespace in ["team-a", "team-b"] {
        let (code, body) = send(
            &admin,
            "POST",
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
        .await;
        assert_eq!(code, 201, "{body}");
    }
    (server, admin)
}

async fn client_of(server: &ApiServerHandle, user: &str) -> kube::Client {
    bounded(server.kube_client_as(Some(user))).await.unwrap()
}

/// Sends one JSON request (no body when `body` is null); the status code and the JSON body.
async fn send(client: &kube::Client, method: &str, path: &str, body: Value) -> (u16, Value) {
    let mut request = http::Request::builder().method(method).uri(path);
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        let content_type = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        request = request.header(http::header::CONTENT_TYPE, content_type);
        body.to_string().into_bytes()
    };
    let response = bounded(client.send(request.body(kube::client::Body::from(bytes)).unwrap()))
        .await
        .unwrap();
    let code = response.status().as_u16();
    let bytes = bounded(http_body_util::BodyExt::collect(response.into_body()))
        .await
        .unwrap()
        .to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (code, value)
}

async fn get(client: &kube::Client, path: &str) -> (u16, Value) {
    send(client, "GET", path, Value::Null).await
}

/// Asserts a 403 Forbidden Status with exactly `message` and `details`.
#[track_caller]
fn assert_forbidden(answer: (u16, Value), message: &str, details: Value) {
    let (code, status) = answer;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status,
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "Forbidden",
            "details": details,
            "code": 403,
        })
    );
}

fn configmap_body(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}})
}

fn role_binding(name: &str, role_kind: &str, role: &str, subject: Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [subject],
    })
}

fn user(name: &str) -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name})
}

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

async fn bind(admin: &kube::Client, namespace: &str, name: &str, role: &str, subject: Value) {
    let (code, body) = send(
        admin,
        "POST",
        &format!("{RBAC}/namespaces/{namespace}/rolebindings"),
        role_binding(name, "ClusterRole", role, subject),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn alice_is_forbidden_until_an_edit_binding_lets_her_write_in_its_namespace() {
    let (server, admin) = start_rbac().await;
    let alice = client_of(&server, "alice").await;
    let configmaps_a = "/api/v1/namespaces/team-a/configmaps";

    // The messages and details of kube-apiserver's authorization filter, for a collection, a
    // named object, the cluster scope and a non-resource path.
    assert_forbidden(
        get(&alice, configmaps_a).await,
        r#"configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "team-a""#,
        json!({"kind": "configmaps"}),
    );
    assert_forbidden(
        get(&alice, &format!("{configmaps_a}/settings")).await,
        r#"configmaps "settings" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "team-a""#,
        json!({"name": "settings", "kind": "configmaps"}),
    );
    assert_forbidden(
        get(&alice, "/api/v1/namespaces").await,
        r#"namespaces is forbidden: User "alice" cannot list resource "namespaces" in API group "" at the cluster scope"#,
        json!({"kind": "namespaces"}),
    );
    assert_forbidden(
        get(&alice, "/apis/coordination.k8s.io/v1/leases?watch=true").await,
        r#"leases.coordination.k8s.io is forbidden: User "alice" cannot watch resource "leases" in API group "coordination.k8s.io" at the cluster scope"#,
        json!({"group": "coordination.k8s.io", "kind": "leases"}),
    );
    assert_forbidden(
        get(&alice, "/debug/gpucloud/request-counts").await,
        r#"forbidden: User "alice" cannot get path "/debug/gpucloud/request-counts""#,
        json!({}),
    );
    // Discovery, version and health are every authenticated user's (system:discovery,
    // system:public-info-viewer), and a resource that does not exist is still forbidden
    // rather than missing: authorization comes before routing.
    for path in [
        "/api",
        "/apis",
        "/api/v1",
        "/version",
        "/healthz",
        "/openapi/v2",
    ] {
        assert_eq!(get(&alice, path).await.0, 200, "{path}");
    }
    assert_eq!(
        get(&alice, "/apis/nowhere.example.com/v1/things").await.0,
        403
    );

    bind(&admin, "team-a", "alice-edit", "edit", user("alice")).await;
    let (code, body) = send(&alice, "POST", configmaps_a, configmap_body("settings")).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(get(&alice, configmaps_a).await.0, 200);
    assert_eq!(
        get(
            &alice,
            &format!("{configmaps_a}?watch=true&timeoutSeconds=1")
        )
        .await
        .0,
        200
    );
    // The binding holds in its namespace only.
    assert_forbidden(
        send(
            &alice,
            "POST",
            "/api/v1/namespaces/team-b/configmaps",
            configmap_body("settings"),
        )
        .await,
        r#"configmaps is forbidden: User "alice" cannot create resource "configmaps" in API group "" in the namespace "team-b""#,
        json!({"kind": "configmaps"}),
    );
    // edit reads Secrets; view, bound to a group, does not.
    assert_eq!(
        get(&alice, "/api/v1/namespaces/team-a/secrets").await.0,
        200
    );
    let bob = client_of(&server, "bob").await;
    bind(
        &admin,
        "team-a",
        "devs-view",
        "view",
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"}),
    )
    .await;
    assert_eq!(get(&bob, configmaps_a).await.0, 200);
    assert_forbidden(
        get(&bob, "/api/v1/namespaces/team-a/secrets/creds").await,
        r#"secrets "creds" is forbidden: User "bob" cannot get resource "secrets" in API group "" in the namespace "team-a""#,
        json!({"name": "creds", "kind": "secrets"}),
    );
    // A namespace is in itself: view in team-a reads team-a only.
    assert_eq!(get(&bob, "/api/v1/namespaces/team-a").await.0, 200);
    assert_eq!(get(&bob, "/api/v1/namespaces/team-b").await.0, 403);
    // Refusals are logged and counted as the 403s they are.
    let counted = server
        .request_counts()
        .into_iter()
        .any(|count| count.user == "bob" && count.resource == "secrets" && count.code == 403);
    assert!(counted, "{:#?}", server.request_counts());
    server.shutdown().await;
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
                },
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}, "phase": {"type": "string"}}},
                }}},
            }],
        },
    })
}

const WIDGETS_A: &str = "/apis/example.com/v1/namespaces/team-a/widgets";

#[tokio::test]
async fn an_aggregated_custom_role_grants_the_resource_but_not_its_status_or_scale() {
    let (server, admin) = start_rbac().await;
    let (code, body) = send(
        &admin,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widget_crd(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // A ClusterRole labelled to aggregate into edit, for the main resource only.
    let (code, body) = send(
        &admin,
        "POST",
        &format!("{RBAC}/clusterroles"),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "widget-editor",
                         "labels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
            "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"],
                       "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}],
        }),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // The aggregation controller puts its rules into edit, and edit's into admin.
    let widget_rule = json!({"apiGroups": ["example.com"], "resources": ["widgets"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]});
    for role in ["edit", "admin"] {
        let (code, aggregated) = get(&admin, &format!("{RBAC}/clusterroles/{role}")).await;
        assert_eq!(code, 200);
        let rules = aggregated["rules"].as_array().unwrap();
        assert!(rules.contains(&widget_rule), "{role}: {aggregated:#}");
        let managers: Vec<&str> = aggregated["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|entry| entry["manager"].as_str())
            .collect();
        assert!(
            managers.contains(&"clusterrole-aggregation-controller"),
            "{managers:?}"
        );
    }
    // view is not fed by edit.
    let (_, view) = get(&admin, &format!("{RBAC}/clusterroles/view")).await;
    assert!(!view["rules"].as_array().unwrap().contains(&widget_rule));

    bind(&admin, "team-a", "alice-edit", "edit", user("alice")).await;
    let alice = client_of(&server, "alice").await;
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "x"}, "spec": {"replicas": 1}});
    let (code, body) = send(&alice, "POST", WIDGETS_A, widget).await;
    assert_eq!(code, 201, "{body}");
    assert_forbidden(
        send(
            &alice,
            "PATCH",
            &format!("{WIDGETS_A}/x/status"),
            json!({"status": {"phase": "Ready"}}),
        )
        .await,
        r#"widgets.example.com "x" is forbidden: User "alice" cannot patch resource "widgets/status" in API group "example.com" in the namespace "team-a""#,
        json!({"name": "x", "group": "example.com", "kind": "widgets"}),
    );
    assert_forbidden(
        get(&alice, &format!("{WIDGETS_A}/x/scale")).await,
        r#"widgets.example.com "x" is forbidden: User "alice" cannot get resource "widgets/scale" in API group "example.com" in the namespace "team-a""#,
        json!({"name": "x", "group": "example.com", "kind": "widgets"}),
    );
    // `*/scale` grants the scale subresource of every resource, and only that.
    let (code, body) = send(
        &admin,
        "POST",
        &format!("{RBAC}/namespaces/team-a/roles"),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "scaler"},
            "rules": [{"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["get", "update", "patch"]}],
        }),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = send(
        &admin,
        "POST",
        &format!("{RBAC}/namespaces/team-a/rolebindings"),
        role_binding("alice-scaler", "Role", "scaler", user("alice")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(get(&alice, &format!("{WIDGETS_A}/x/scale")).await.0, 200);
    assert_eq!(get(&alice, &format!("{WIDGETS_A}/x/status")).await.0, 403);

    // Deleting the custom role takes its rules out of edit again.
    let (code, _) = send(
        &admin,
        "DELETE",
        &format!("{RBAC}/clusterroles/widget-editor"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    let (_, edit) = get(&admin, &format!("{RBAC}/clusterroles/edit")).await;
    assert!(!edit["rules"].as_array().unwrap().contains(&widget_rule));
    assert_eq!(get(&alice, &format!("{WIDGETS_A}/x")).await.0, 403);
    server.shutdown().await;
}

#[tokio::test]
async fn list_and_watch_are_separate_verbs_and_resource_names_pin_single_objects() {
    let (server, admin) = start_rbac().await;
    for name in ["one", "two"] {
        let (code, body) = send(
            &admin,
            "POST",
            "/api/v1/namespaces/team-b/configmaps",
            configmap_body(name),
        )
        .await;
        assert_eq!(code, 201, "{body}");
    }
    let (code, body) = send(
        &admin,
        "POST",
        &format!("{RBAC}/namespaces/team-b/roles"),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "lister"},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "watch"],
                 "resourceNames": ["one"]},
            ],
        }),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = send(
        &admin,
        "POST",
        &format!("{RBAC}/namespaces/team-b/rolebindings"),
        role_binding("alice-lister", "Role", "lister", user("alice")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let alice = client_of(&server, "alice").await;
    let configmaps = "/api/v1/namespaces/team-b/configmaps";
    let (code, list) = get(&alice, configmaps).await;
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    assert_forbidden(
        get(&alice, &format!("{configmaps}?watch=true")).await,
        r#"configmaps is forbidden: User "alice" cannot watch resource "configmaps" in API group "" in the namespace "team-b""#,
        json!({"kind": "configmaps"}),
    );
    // A watch pinned to a permitted name by its field selector is that name's request.
    assert_eq!(
        get(
            &alice,
            &format!("{configmaps}?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Done")
        )
        .await
        .0,
        200
    );
    assert_eq!(get(&alice, &format!("{configmaps}/one")).await.0, 200);
    assert_forbidden(
        get(&alice, &format!("{configmaps}/two")).await,
        r#"configmaps "two" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "team-b""#,
        json!({"name": "two", "kind": "configmaps"}),
    );
    // A binding to a role that does not exist grants nothing and says so in the reason.
    let (code, body) = send(
        &admin,
        "POST",
        &format!("{RBAC}/namespaces/team-b/rolebindings"),
        role_binding("alice-ghost", "Role", "ghost", user("alice")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_forbidden(
        send(&alice, "DELETE", &format!("{configmaps}/one"), Value::Null).await,
        r#"configmaps "one" is forbidden: User "alice" cannot delete resource "configmaps" in API group "" in the namespace "team-b": RBAC: role.rbac.authorization.k8s.io "ghost" not found"#,
        json!({"name": "one", "kind": "configmaps"}),
    );
    server.shutdown().await;
}

#[tokio::test]
async fn role_and_binding_writes_cannot_grant_more_than_the_writer_holds() {
    let (server, admin) = start_rbac().await;
    bind(&admin, "team-a", "alice-admin", "admin", user("alice")).await;
    let alice = client_of(&server, "alice").await;
    let roles = format!("{RBAC}/namespaces/team-a/roles");
    let bindings = format!("{RBAC}/namespaces/team-a/rolebindings");
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": name}, "rules": rules})
    };
    // Rules she holds (admin aggregates edit and view) she may hand on.
    let (code, body) = send(
        &alice,
        "POST",
        &roles,
        role(
            "cm-reader",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]),
        ),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // Rules she does not hold she may not.
    let too_much = role(
        "node-reader",
        json!([{"apiGroups": [""], "resources": ["nodes", "configmaps"], "verbs": ["get", "list"]}]),
    );
    assert_forbidden(
        send(&alice, "POST", &roles, too_much.clone()).await,
        "roles.rbac.authorization.k8s.io \"node-reader\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"get\" \"list\"]}",
        json!({"name": "node-reader", "group": "rbac.authorization.k8s.io", "kind": "roles"}),
    );
    // Nor widen a role she may edit.
    let widened = role(
        "cm-reader",
        json!([{"apiGroups": [""], "resources": ["configmaps", "nodes"], "verbs": ["get"]}]),
    );
    let (code, status) = send(&alice, "PUT", &format!("{roles}/cm-reader"), widened).await;
    assert_eq!(code, 403, "{status}");
    // Binding a role she holds is fine; binding cluster-admin is not.
    let (code, body) = send(
        &alice,
        "POST",
        &bindings,
        role_binding("bob-view", "ClusterRole", "view", user("bob")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_forbidden(
        send(
            &alice,
            "POST",
            &bindings,
            role_binding("bob-root", "ClusterRole", "cluster-admin", user("bob")),
        )
        .await,
        "rolebindings.rbac.authorization.k8s.io \"bob-root\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}\n{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}",
        json!({"name": "bob-root", "group": "rbac.authorization.k8s.io", "kind": "rolebindings"}),
    );
    // A binding to a missing role is the lister's 404.
    let (code, status) = send(
        &alice,
        "POST",
        &bindings,
        role_binding("bob-ghost", "ClusterRole", "ghost", user("bob")),
    )
    .await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(
        status["message"],
        r#"clusterrole.rbac.authorization.k8s.io "ghost" not found"#
    );

    // `escalate` on roles and `bind` on a named ClusterRole lift the checks, as upstream.
    let (code, body) = send(
        &admin,
        "POST",
        &roles,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "delegate"},
               "rules": [
                   {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]},
                   {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                    "verbs": ["bind"], "resourceNames": ["cluster-admin"]},
               ]}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = send(
        &admin,
        "POST",
        &bindings,
        role_binding("alice-delegate", "Role", "delegate", user("alice")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = send(&alice, "POST", &roles, too_much).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = send(
        &alice,
        "POST",
        &bindings,
        role_binding("bob-root", "ClusterRole", "cluster-admin", user("bob")),
    )
    .await;
    assert_eq!(code, 201, "{body}");

    // An aggregationRule gathers anything, so only cluster-admin's holders may set one.
    let (code, body) = send(
        &admin,
        "POST",
        &format!("{RBAC}/clusterroles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "role-writer"},
               "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                          "verbs": ["create"]}]}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = send(
        &admin,
        "POST",
        &format!("{RBAC}/clusterrolebindings"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "alice-role-writer"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "role-writer"},
               "subjects": [user("alice")]}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_forbidden(
        send(
            &alice,
            "POST",
            &format!("{RBAC}/clusterroles"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "gatherer"},
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]},
                   "rules": []}),
        )
        .await,
        r#"clusterroles.rbac.authorization.k8s.io "gatherer" is forbidden: must have cluster-admin privileges to use the aggregationRule"#,
        json!({"name": "gatherer", "group": "rbac.authorization.k8s.io", "kind": "clusterroles"}),
    );
    server.shutdown().await;
}

async fn access_review(client: &kube::Client, spec: Value) -> Value {
    let (code, review) = send(
        client,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec}),
    )
    .await;
    assert_eq!(code, 201, "{review}");
    review["status"].clone()
}

#[tokio::test]
async fn self_access_reviews_answer_from_the_callers_rules() {
    let (server, admin) = start_rbac().await;
    let alice = client_of(&server, "alice").await;
    let create_configmaps = json!({"resourceAttributes": {
        "verb": "create", "resource": "configmaps", "namespace": "team-a"}});
    assert_eq!(
        access_review(&alice, create_configmaps.clone()).await,
        json!({"allowed": false})
    );
    bind(&admin, "team-a", "alice-edit", "edit", user("alice")).await;
    assert_eq!(
        access_review(&alice, create_configmaps).await,
        json!({"allowed": true,
               "reason": r#"RBAC: allowed by RoleBinding "alice-edit/team-a" of ClusterRole "edit" to User "alice""#})
    );
    assert_eq!(
        access_review(
            &alice,
            json!({"resourceAttributes": {"verb": "update", "group": "apps",
                   "resource": "deployments", "subresource": "status", "namespace": "team-a"}})
        )
        .await,
        json!({"allowed": false})
    );
    assert_eq!(
        access_review(
            &alice,
            json!({"nonResourceAttributes": {"verb": "get", "path": "/version"}})
        )
        .await,
        json!({"allowed": true,
               "reason": r#"RBAC: allowed by ClusterRoleBinding "system:discovery" of ClusterRole "system:discovery" to Group "system:authenticated""#})
    );
    // system:masters is allowed ahead of RBAC, with no reason.
    assert_eq!(
        access_review(
            &admin,
            json!({"resourceAttributes": {"verb": "delete", "resource": "nodes"}})
        )
        .await,
        json!({"allowed": true})
    );
    let (code, status) = send(
        &alice,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}),
    )
    .await;
    assert_eq!(code, 422, "{status}");

    // The rules review lists what applies in the namespace.
    let (code, review) = send(
        &alice,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
               "spec": {"namespace": "team-a"}}),
    )
    .await;
    assert_eq!(code, 201, "{review}");
    let resource_rules = review["status"]["resourceRules"].as_array().unwrap();
    assert!(
        resource_rules.iter().any(|rule| rule["resources"]
            .as_array()
            .unwrap()
            .contains(&json!("configmaps"))
            && rule["verbs"].as_array().unwrap().contains(&json!("create"))),
        "{review:#}"
    );
    assert!(
        review["status"]["nonResourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|rule| rule["nonResourceURLs"]
                .as_array()
                .unwrap()
                .contains(&json!("/apis/*"))),
        "{review:#}"
    );
    assert_eq!(review["status"]["incomplete"], false);
    server.shutdown().await;
}

#[tokio::test]
async fn without_rbac_everyone_may_do_everything_and_reviews_say_so() {
    let config = ApiServerConfig::default()
        .with_user("plain-admin-token", "admin", &[])
        .with_user("plain-alice-token", "alice", &[]);
    let (server, _) = start_with(config).await;
    let alice = client_of(&server, "alice").await;
    assert_eq!(get(&alice, "/api/v1/namespaces").await.0, 200);
    assert_eq!(
        access_review(
            &alice,
            json!({"resourceAttributes": {"verb": "delete", "resource": "nodes"}})
        )
        .await["allowed"],
        true
    );
    // No bootstrap roles are created outside RBAC mode.
    let (_, roles) = get(&alice, &format!("{RBAC}/clusterroles")).await;
    assert_eq!(roles["items"], json!([]));
    server.shutdown().await;
}
