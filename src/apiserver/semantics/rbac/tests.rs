use std::collections::HashMap;

use serde_json::{Value, json};

use super::*;

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule::resource(verbs, groups, resources)
}

#[test]
fn rules_match_as_the_rbac_evaluation_helpers_do() {
    let request = |verb: &str, group: &str, resource: &str, sub: &str, name: &str| {
        RequestAttributes::resource(verb, group, resource, sub, "team-a", name)
    };
    // (rule, request, allowed), after pkg/apis/rbac/v1/evaluation_helpers.go and rbac_test.go.
    let cases: Vec<(PolicyRule, RequestAttributes, bool)> = vec![
        (
            rule(&["get"], &[""], &["configmaps"]),
            request("get", "", "configmaps", "", "a"),
            true,
        ),
        (
            rule(&["get"], &[""], &["configmaps"]),
            request("list", "", "configmaps", "", ""),
            false,
        ),
        (
            rule(&["*"], &[""], &["configmaps"]),
            request("deletecollection", "", "configmaps", "", ""),
            true,
        ),
        // The group must match: "" is the core group, "*" every group.
        (
            rule(&["get"], &["apps"], &["configmaps"]),
            request("get", "", "configmaps", "", "a"),
            false,
        ),
        (
            rule(&["get"], &["*"], &["configmaps"]),
            request("get", "", "configmaps", "", "a"),
            true,
        ),
        // A resource does not grant its subresources; `x/y` and `*/y` do, `*` grants all.
        (
            rule(&["patch"], &["gpucloud.io"], &["gpuinstances"]),
            request("patch", "gpucloud.io", "gpuinstances", "status", "x"),
            false,
        ),
        (
            rule(&["patch"], &["gpucloud.io"], &["gpuinstances/status"]),
            request("patch", "gpucloud.io", "gpuinstances", "status", "x"),
            true,
        ),
        (
            rule(&["patch"], &["gpucloud.io"], &["gpuinstances/status"]),
            request("patch", "gpucloud.io", "gpuinstances", "", "x"),
            false,
        ),
        (
            rule(&["get"], &["*"], &["*/scale"]),
            request("get", "gpucloud.io", "gpuinstances", "scale", "x"),
            true,
        ),
        (
            rule(&["get"], &["*"], &["*/scale"]),
            request("get", "gpucloud.io", "gpuinstances", "status", "x"),
            false,
        ),
        (
            rule(&["get"], &["*"], &["*/scale"]),
            request("get", "gpucloud.io", "gpuinstances", "", "x"),
            false,
        ),
        (
            rule(&["get"], &["*"], &["*"]),
            request("get", "gpucloud.io", "gpuinstances", "status", "x"),
            true,
        ),
        // resourceNames restrict named requests; a list has no name and is not matched.
        (
            rule(&["get", "list"], &[""], &["secrets"]).with_names(&["creds"]),
            request("get", "", "secrets", "", "creds"),
            true,
        ),
        (
            rule(&["get", "list"], &[""], &["secrets"]).with_names(&["creds"]),
            request("get", "", "secrets", "", "other"),
            false,
        ),
        (
            rule(&["get", "list"], &[""], &["secrets"]).with_names(&["creds"]),
            request("list", "", "secrets", "", ""),
            false,
        ),
        // A resource rule never matches a non-resource request and the other way round.
        (
            rule(&["get"], &["*"], &["*"]),
            RequestAttributes::non_resource("get", "/version"),
            false,
        ),
        (
            PolicyRule::urls(&["get"], &["/version"]),
            RequestAttributes::non_resource("get", "/version"),
            true,
        ),
        (
            PolicyRule::urls(&["get"], &["/version"]),
            RequestAttributes::non_resource("get", "/version/"),
            false,
        ),
        (
            PolicyRule::urls(&["get"], &["/apis/*"]),
            RequestAttributes::non_resource("get", "/apis/gpucloud.io/v1alpha1"),
            true,
        ),
        (
            PolicyRule::urls(&["get"], &["/apis/*"]),
            RequestAttributes::non_resource("get", "/apis"),
            false,
        ),
        (
            PolicyRule::urls(&["*"], &["*"]),
            RequestAttributes::non_resource("post", "/anything"),
            true,
        ),
        (
            PolicyRule::urls(&["get"], &["/version"]),
            request("get", "", "version", "", ""),
            false,
        ),
    ];
    for (index, (rule, request, allowed)) in cases.iter().enumerate() {
        assert_eq!(
            rule_allows(request, rule),
            *allowed,
            "case {index}: {rule:?} {request:?}"
        );
    }
}

#[test]
fn request_attributes_follow_the_request_info_factory() {
    let attributes = |method: &str, path: &str, watch: Option<&str>, selector: Option<&str>| {
        request_attributes(method, path, watch, selector)
    };
    let resource = |verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str| {
        let mut expected = RequestAttributes::resource(verb, group, resource, sub, ns, name);
        expected.api_version = if group.is_empty() { "v1" } else { "v1alpha1" }.to_string();
        expected
    };
    let cases = [
        (
            attributes("GET", "/api/v1/namespaces/team-a/configmaps", None, None),
            resource("list", "", "configmaps", "", "team-a", ""),
        ),
        (
            attributes(
                "GET",
                "/api/v1/namespaces/team-a/configmaps",
                Some("true"),
                None,
            ),
            resource("watch", "", "configmaps", "", "team-a", ""),
        ),
        (
            attributes(
                "GET",
                "/api/v1/namespaces/team-a/configmaps",
                Some("1"),
                None,
            ),
            resource("watch", "", "configmaps", "", "team-a", ""),
        ),
        (
            attributes(
                "GET",
                "/api/v1/namespaces/team-a/configmaps",
                Some("false"),
                None,
            ),
            resource("list", "", "configmaps", "", "team-a", ""),
        ),
        // A list or watch pinned to one name by its field selector carries that name.
        (
            attributes(
                "GET",
                "/api/v1/namespaces/team-a/secrets",
                Some("true"),
                Some("metadata.name=creds"),
            ),
            resource("watch", "", "secrets", "", "team-a", "creds"),
        ),
        (
            attributes(
                "GET",
                "/api/v1/namespaces/team-a/secrets",
                None,
                Some("metadata.name!=creds"),
            ),
            resource("list", "", "secrets", "", "team-a", ""),
        ),
        (
            attributes("GET", "/api/v1/configmaps", None, None),
            resource("list", "", "configmaps", "", "", ""),
        ),
        (
            attributes("POST", "/api/v1/namespaces/team-a/configmaps", None, None),
            resource("create", "", "configmaps", "", "team-a", ""),
        ),
        (
            attributes("DELETE", "/api/v1/namespaces/team-a/configmaps", None, None),
            resource("deletecollection", "", "configmaps", "", "team-a", ""),
        ),
        (
            attributes(
                "DELETE",
                "/api/v1/namespaces/team-a/configmaps/a",
                None,
                None,
            ),
            resource("delete", "", "configmaps", "", "team-a", "a"),
        ),
        (
            attributes(
                "PATCH",
                "/apis/gpucloud.io/v1alpha1/namespaces/team-a/gpuinstances/x/status",
                None,
                None,
            ),
            resource(
                "patch",
                "gpucloud.io",
                "gpuinstances",
                "status",
                "team-a",
                "x",
            ),
        ),
        (
            attributes(
                "PUT",
                "/apis/gpucloud.io/v1alpha1/namespaces/team-a/gpuinstances/x/scale",
                None,
                None,
            ),
            resource(
                "update",
                "gpucloud.io",
                "gpuinstances",
                "scale",
                "team-a",
                "x",
            ),
        ),
        // A namespace is in itself; its status is a subresource, not a resource "status".
        (
            attributes("GET", "/api/v1/namespaces/team-a", None, None),
            resource("get", "", "namespaces", "", "team-a", "team-a"),
        ),
        (
            attributes("PUT", "/api/v1/namespaces/team-a/status", None, None),
            resource("update", "", "namespaces", "status", "team-a", "team-a"),
        ),
        (
            attributes("POST", "/api/v1/namespaces", None, None),
            resource("create", "", "namespaces", "", "", ""),
        ),
        (
            attributes(
                "GET",
                "/api/v1/watch/namespaces/team-a/configmaps",
                None,
                None,
            ),
            resource("watch", "", "configmaps", "", "team-a", ""),
        ),
        (
            attributes("HEAD", "/api/v1/namespaces/team-a/configmaps/a", None, None),
            resource("get", "", "configmaps", "", "team-a", "a"),
        ),
    ];
    for (index, (actual, mut expected)) in cases.into_iter().enumerate() {
        expected.path = actual.path.clone();
        assert_eq!(actual, expected, "case {index}");
    }
    // Discovery and everything outside /api/VERSION/... and /apis/GROUP/VERSION/... are
    // non-resource requests with the lower-cased method as verb.
    for path in [
        "/",
        "/api",
        "/api/v1",
        "/apis",
        "/apis/gpucloud.io",
        "/apis/gpucloud.io/v1alpha1",
        "/version",
        "/openapi/v3/apis/gpucloud.io/v1alpha1",
        "/healthz",
    ] {
        assert_eq!(
            request_attributes("GET", path, None, None),
            RequestAttributes::non_resource("get", path),
            "{path}"
        );
    }
}

#[test]
fn forbidden_messages_have_upstreams_three_shapes() {
    let namespaced = RequestAttributes::resource(
        "patch",
        "gpucloud.io",
        "gpuinstances",
        "status",
        "team-a",
        "x",
    );
    assert_eq!(
        forbidden_message("alice", &namespaced),
        r#"User "alice" cannot patch resource "gpuinstances/status" in API group "gpucloud.io" in the namespace "team-a""#
    );
    let cluster = RequestAttributes::resource("list", "", "namespaces", "", "", "");
    assert_eq!(
        forbidden_message("alice", &cluster),
        r#"User "alice" cannot list resource "namespaces" in API group "" at the cluster scope"#
    );
    assert_eq!(
        forbidden_message(
            "system:anonymous",
            &RequestAttributes::non_resource("get", "/apis")
        ),
        r#"User "system:anonymous" cannot get path "/apis""#
    );
}

#[test]
fn subjects_apply_as_upstream_resolves_them() {
    let alice = UserInfo::new("alice", &["devs", ALL_AUTHENTICATED]);
    let service_account = UserInfo::new(
        "system:serviceaccount:team-a:builder",
        &["system:serviceaccounts", ALL_AUTHENTICATED],
    );
    let subject = |kind: &str, name: &str, namespace: &str| Subject {
        kind: kind.into(),
        name: name.into(),
        namespace: namespace.into(),
    };
    let cases = [
        (&alice, subject("User", "alice", ""), "", true),
        (&alice, subject("User", "bob", ""), "", false),
        (&alice, subject("Group", "devs", ""), "", true),
        (
            &alice,
            subject("Group", ALL_AUTHENTICATED, ""),
            "team-a",
            true,
        ),
        (&alice, subject("Group", "alice", ""), "", false),
        (
            &service_account,
            subject("ServiceAccount", "builder", "team-a"),
            "",
            true,
        ),
        // Without a namespace the subject is in the binding's namespace.
        (
            &service_account,
            subject("ServiceAccount", "builder", ""),
            "team-a",
            true,
        ),
        (
            &service_account,
            subject("ServiceAccount", "builder", ""),
            "team-b",
            false,
        ),
        // A ClusterRoleBinding has no namespace to default to.
        (
            &service_account,
            subject("ServiceAccount", "builder", ""),
            "",
            false,
        ),
        (
            &service_account,
            subject("User", "system:serviceaccount:team-a:builder", ""),
            "",
            true,
        ),
        (&alice, subject("Robot", "alice", ""), "", false),
    ];
    for (index, (user, subject, namespace, applies)) in cases.iter().enumerate() {
        assert_eq!(
            applies_to_user(user, subject, namespace),
            *applies,
            "case {index}"
        );
    }
    assert_eq!(
        service_account_groups("system:serviceaccount:team-a:builder"),
        vec!["system:serviceaccounts", "system:serviceaccounts:team-a"]
    );
    assert!(service_account_groups("alice").is_empty());
}

/// Roles and bindings held in memory.
#[derive(Default)]
struct Fixture {
    roles: HashMap<(String, String), Vec<PolicyRule>>,
    cluster_roles: HashMap<String, Vec<PolicyRule>>,
    bindings: Vec<Binding>,
}

impl RoleSource for Fixture {
    fn role(&self, namespace: &str, name: &str) -> Option<Vec<PolicyRule>> {
        self.roles
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
    fn cluster_role(&self, name: &str) -> Option<Vec<PolicyRule>> {
        self.cluster_roles.get(name).cloned()
    }
    fn role_bindings(&self, namespace: &str) -> Vec<Binding> {
        self.bindings
            .iter()
            .filter(|binding| binding.namespace == namespace)
            .cloned()
            .collect()
    }
    fn cluster_role_bindings(&self) -> Vec<Binding> {
        self.bindings
            .iter()
            .filter(|binding| binding.namespace.is_empty())
            .cloned()
            .collect()
    }
}

fn binding(namespace: &str, name: &str, kind: &str, role: &str, user: &str) -> Binding {
    Binding::from_value(&json!({
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": GROUP, "kind": kind, "name": role},
        "subjects": [{"kind": "User", "name": user}],
    }))
}

fn fixture() -> Fixture {
    let mut fixture = Fixture::default();
    fixture.cluster_roles.insert(
        "configmap-editor".into(),
        vec![rule(&["get", "list", "create"], &[""], &["configmaps"])],
    );
    fixture.roles.insert(
        ("team-a".into(), "lease-reader".into()),
        vec![rule(&["get"], &["coordination.k8s.io"], &["leases"])],
    );
    fixture.bindings = vec![
        binding(
            "team-a",
            "alice-cm",
            "ClusterRole",
            "configmap-editor",
            "alice",
        ),
        binding("team-a", "alice-leases", "Role", "lease-reader", "alice"),
        binding("team-a", "alice-missing", "ClusterRole", "gone", "alice"),
        binding("", "bob-cm", "ClusterRole", "configmap-editor", "bob"),
    ];
    fixture
}

#[test]
fn role_bindings_grant_in_their_namespace_and_cluster_role_bindings_everywhere() {
    let fixture = fixture();
    let alice = UserInfo::new("alice", &[ALL_AUTHENTICATED]);
    let bob = UserInfo::new("bob", &[ALL_AUTHENTICATED]);
    let allowed = authorize(
        &fixture,
        &alice,
        &RequestAttributes::resource("create", "", "configmaps", "", "team-a", ""),
    );
    assert_eq!(
        allowed,
        Decision {
            allowed: true,
            reason: r#"RBAC: allowed by RoleBinding "alice-cm/team-a" of ClusterRole "configmap-editor" to User "alice""#.into()
        }
    );
    // Elsewhere the RoleBinding does not apply; a missing role is reported as the reason.
    let denied = authorize(
        &fixture,
        &alice,
        &RequestAttributes::resource("create", "", "configmaps", "", "team-b", ""),
    );
    assert_eq!(
        denied,
        Decision {
            allowed: false,
            reason: String::new()
        }
    );
    let denied = authorize(
        &fixture,
        &alice,
        &RequestAttributes::resource("delete", "", "configmaps", "", "team-a", "x"),
    );
    assert_eq!(
        denied.reason,
        r#"RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#
    );
    assert!(
        authorize(
            &fixture,
            &alice,
            &RequestAttributes::resource("get", "coordination.k8s.io", "leases", "", "team-a", "l"),
        )
        .allowed
    );
    let everywhere = authorize(
        &fixture,
        &bob,
        &RequestAttributes::resource("list", "", "configmaps", "", "", ""),
    );
    assert_eq!(
        everywhere.reason,
        r#"RBAC: allowed by ClusterRoleBinding "bob-cm" of ClusterRole "configmap-editor" to User "bob""#
    );
    let (rules, errors) = rules_for(&fixture, &alice, "team-a");
    assert_eq!(rules.len(), 2);
    assert_eq!(errors.len(), 1);
}

#[test]
fn covers_breaks_rules_down_and_honours_subresource_wildcards() {
    let owner = vec![
        rule(&["get", "list"], &[""], &["configmaps"]),
        rule(&["*"], &["apps"], &["*"]),
        rule(&["get"], &["gpucloud.io"], &["*/status"]),
        rule(&["get"], &[""], &["secrets"]).with_names(&["a", "b"]),
        PolicyRule::urls(&["get"], &["/apis/*"]),
    ];
    let cases = [
        (rule(&["get"], &[""], &["configmaps"]), true),
        (rule(&["get", "list"], &[""], &["configmaps"]), true),
        (rule(&["get", "create"], &[""], &["configmaps"]), false),
        (
            rule(
                &["update"],
                &["apps"],
                &["deployments", "deployments/scale"],
            ),
            true,
        ),
        (
            rule(&["get"], &["gpucloud.io"], &["gpuinstances/status"]),
            true,
        ),
        (rule(&["get"], &["gpucloud.io"], &["gpuinstances"]), false),
        (rule(&["get"], &[""], &["secrets"]).with_names(&["a"]), true),
        (
            rule(&["get"], &[""], &["secrets"]).with_names(&["c"]),
            false,
        ),
        // An unnamed rule is more than a named one grants.
        (rule(&["get"], &[""], &["secrets"]), false),
        (PolicyRule::urls(&["get"], &["/apis/gpucloud.io"]), true),
        (PolicyRule::urls(&["get"], &["/api"]), false),
    ];
    for (index, (servant, covered)) in cases.iter().enumerate() {
        assert_eq!(
            covers(&owner, std::slice::from_ref(servant)).0,
            *covered,
            "case {index}: {servant:?}"
        );
    }
    let (covered, missing) = covers(
        &owner,
        &[rule(&["get", "create", "delete"], &[""], &["configmaps"])],
    );
    assert!(!covered);
    assert_eq!(
        missing,
        vec![
            rule(&["create"], &[""], &["configmaps"]),
            rule(&["delete"], &[""], &["configmaps"])
        ]
    );
    assert_eq!(
        compact_rules(&missing),
        vec![rule(&["create", "delete"], &[""], &["configmaps"])]
    );
}

#[test]
fn escalation_errors_list_the_missing_rules_compactly_and_sorted() {
    let fixture = fixture();
    let alice = UserInfo::new("alice", &[ALL_AUTHENTICATED]);
    assert_eq!(
        confirm_no_escalation(
            &fixture,
            &alice,
            "team-a",
            &[rule(&["get", "list"], &[""], &["configmaps"])]
        ),
        Ok(())
    );
    let error = confirm_no_escalation(
        &fixture,
        &alice,
        "team-a",
        &[
            rule(&["get", "delete"], &["", "apps"], &["secrets"]),
            PolicyRule::urls(&["get"], &["/metrics"]),
        ],
    )
    .unwrap_err();
    assert_eq!(
        error,
        "user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
         {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}\n\
         {APIGroups:[\"apps\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}\n\
         {NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}; resolution errors: [clusterrole.rbac.authorization.k8s.io \"gone\" not found]"
    );
}

#[test]
fn label_selectors_select_as_metav1_selectors_do() {
    let labels = json!({"rbac.authorization.k8s.io/aggregate-to-edit": "true", "tier": "gold"});
    let cases = [
        (json!({}), true),
        (
            json!({"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}),
            true,
        ),
        (
            json!({"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-edit": "false"}}),
            false,
        ),
        (json!({"matchLabels": {"missing": "true"}}), false),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold", "silver"]}]}),
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]}),
            false,
        ),
        (
            json!({"matchExpressions": [{"key": "other", "operator": "NotIn", "values": ["gold"]}]}),
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
            false,
        ),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "Bogus"}]}),
            false,
        ),
    ];
    for (selector, matches) in cases {
        assert_eq!(selector_matches(&selector, &labels), matches, "{selector}");
    }
    assert!(!selector_matches(
        &json!({"matchLabels": {"a": "b"}}),
        &Value::Null
    ));
}

#[test]
fn bootstrap_roles_aggregate_view_into_edit_into_admin() {
    let mut roles = bootstrap::cluster_roles();
    // The controller re-aggregates until nothing changes: view feeds edit, edit feeds admin.
    for _ in 0..3 {
        for index in 0..roles.len() {
            if let Some(rules) = aggregate(&roles[index], &roles) {
                roles[index]["rules"] =
                    json!(rules.iter().map(PolicyRule::to_value).collect::<Vec<_>>());
            }
        }
    }
    let rules = |name: &str| {
        let role = roles
            .iter()
            .find(|role| role["metadata"]["name"] == name)
            .unwrap();
        PolicyRule::rules_of(role)
    };
    let allows = |name: &str, verb: &str, group: &str, resource: &str, sub: &str| {
        let attributes = RequestAttributes::resource(verb, group, resource, sub, "team-a", "x");
        rules(name)
            .iter()
            .any(|rule| rule_allows(&attributes, rule))
    };
    // view reads but never Secrets; edit writes but no status; admin also manages RBAC.
    assert!(allows("view", "get", "", "configmaps", ""));
    assert!(!allows("view", "get", "", "secrets", ""));
    assert!(!allows("view", "create", "", "configmaps", ""));
    assert!(allows("view", "get", "apps", "deployments", "status"));
    assert!(allows("edit", "create", "", "configmaps", ""));
    assert!(allows("edit", "get", "", "secrets", ""));
    assert!(allows("edit", "get", "", "configmaps", ""));
    assert!(!allows("edit", "update", "apps", "deployments", "status"));
    assert!(allows("edit", "update", "apps", "deployments", "scale"));
    assert!(!allows("edit", "create", GROUP, "roles", ""));
    assert!(allows("admin", "create", GROUP, "rolebindings", ""));
    assert!(allows("admin", "delete", "", "secrets", ""));
    // Equal rules are not repeated: edit holds view's rules once.
    let edit = rules("edit");
    let distinct: std::collections::HashSet<String> =
        edit.iter().map(PolicyRule::compact_string).collect();
    assert_eq!(distinct.len(), edit.len());
    // The aggregated role's own rules are not its input.
    assert_eq!(
        aggregate(&json!({"metadata": {"name": "plain"}}), &roles),
        None
    );
}

#[test]
fn rules_round_trip_through_json_without_empty_lists() {
    let value = json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]});
    let parsed = PolicyRule::from_value(&value);
    assert_eq!(parsed.to_value(), value);
    assert_eq!(
        PolicyRule::urls(&["get"], &["/version"]).to_value(),
        json!({"nonResourceURLs": ["/version"], "verbs": ["get"]})
    );
    assert_eq!(
        rule(&["get"], &["apps"], &["deployments"])
            .with_names(&["web"])
            .compact_string(),
        r#"{APIGroups:["apps"], Resources:["deployments"], ResourceNames:["web"], Verbs:["get"]}"#
    );
    assert_eq!(
        aggregate_errors(&["a".into(), "b".into(), "a".into()]),
        "[a, b]"
    );
    assert_eq!(aggregate_errors(&["a".into(), "a".into()]), "a");
}
