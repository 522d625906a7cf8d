//! The ClusterRoles and ClusterRoleBindings kube-apiserver creates at start-up
//! (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`, as its `testdata/cluster-roles.yaml`
//! renders them): the user-facing roles (`cluster-admin`, `admin`, `edit`, `view` and the
//! `system:aggregate-to-*` roles they aggregate), the discovery and self-review roles every
//! authenticated user is bound to, and `system:monitoring`. The roles of nodes, controllers
//! and other components are left out: nothing here runs as them.

use serde_json::{Value, json};

use super::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, GROUP, PolicyRule, SYSTEM_MASTERS};

/// `bootstrappolicy.Read`.
const READ: &[&str] = &["get", "list", "watch"];
/// `bootstrappolicy.Write`.
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
/// `bootstrappolicy.ReadWrite`, in the sorted order the rendered roles show.
const READ_WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The label aggregating a role into `admin`.
pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
/// The label aggregating a role into `edit`.
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
/// The label aggregating a role into `view`.
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule::resource(verbs, groups, resources)
}

fn metadata(name: &str, extra_labels: &[&str]) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert("kubernetes.io/bootstrapping".into(), json!("rbac-defaults"));
    for label in extra_labels {
        labels.insert((*label).to_string(), json!("true"));
    }
    json!({
        "name": name,
        "labels": labels,
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

fn cluster_role(name: &str, labels: &[&str], rules: &[PolicyRule]) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "ClusterRole",
        "metadata": metadata(name, labels),
        "rules": rules.iter().map(PolicyRule::to_value).collect::<Vec<_>>(),
    })
}

/// A role whose rules the aggregation controller fills from the roles carrying `label`.
fn aggregated_role(name: &str, labels: &[&str], label: &str) -> Value {
    let mut role = cluster_role(name, labels, &[]);
    role["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]});
    role
}

fn aggregate_to_admin_rules() -> Vec<PolicyRule> {
    vec![
        rule(
            &["create"],
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
        ),
        rule(READ_WRITE, &[GROUP], &["rolebindings", "roles"]),
    ]
}

fn aggregate_to_edit_rules() -> Vec<PolicyRule> {
    vec![
        rule(
            READ,
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
        ),
        rule(&["impersonate"], &[""], &["serviceaccounts"]),
        rule(
            WRITE,
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
        ),
        rule(&["create"], &[""], &["pods/eviction"]),
        rule(
            WRITE,
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
        ),
        rule(&["create"], &[""], &["serviceaccounts/token"]),
        rule(
            WRITE,
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
        rule(WRITE, &["batch"], &["cronjobs", "jobs"]),
        rule(
            WRITE,
            &["extensions"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "ingresses",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
            ],
        ),
        rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
        rule(
            WRITE,
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
        ),
        rule(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
    ]
}

fn aggregate_to_view_rules() -> Vec<PolicyRule> {
    vec![
        rule(
            READ,
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
        ),
        rule(
            READ,
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
        ),
        rule(READ, &[""], &["namespaces"]),
        rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
        rule(
            READ,
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
        ),
        rule(
            READ,
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
        ),
        rule(
            READ,
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
        ),
        rule(
            READ,
            &["extensions"],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
        ),
        rule(
            READ,
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        rule(
            READ,
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
        ),
    ]
}

/// The bootstrap ClusterRoles, as objects to store. `admin`, `edit` and `view` carry only
/// their aggregation rules: their rules are the aggregation's to fill.
pub fn cluster_roles() -> Vec<Value> {
    vec![
        aggregated_role("admin", &[], AGGREGATE_TO_ADMIN),
        cluster_role(
            "cluster-admin",
            &[],
            &[
                rule(&["*"], &["*"], &["*"]),
                PolicyRule::urls(&["*"], &["*"]),
            ],
        ),
        aggregated_role("edit", &[AGGREGATE_TO_ADMIN], AGGREGATE_TO_EDIT),
        cluster_role(
            "system:aggregate-to-admin",
            &[AGGREGATE_TO_ADMIN],
            &aggregate_to_admin_rules(),
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &[AGGREGATE_TO_EDIT],
            &aggregate_to_edit_rules(),
        ),
        cluster_role(
            "system:aggregate-to-view",
            &[AGGREGATE_TO_VIEW],
            &aggregate_to_view_rules(),
        ),
        cluster_role(
            "system:basic-user",
            &[],
            &[
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:discovery",
            &[],
            &[PolicyRule::urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        cluster_role(
            "system:monitoring",
            &[],
            &[PolicyRule::urls(
                &["get"],
                &[
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/metrics/slis",
                    "/readyz",
                    "/readyz/*",
                ],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            &[PolicyRule::urls(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        aggregated_role("view", &[AGGREGATE_TO_EDIT], AGGREGATE_TO_VIEW),
    ]
}

fn cluster_role_binding(name: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|group| json!({"apiGroup": GROUP, "kind": "Group", "name": group}))
        .collect();
    json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "ClusterRoleBinding",
        "metadata": metadata(name, &[]),
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
        "subjects": subjects,
    })
}

/// The bootstrap ClusterRoleBindings of those roles. Since Kubernetes 1.14 only
/// `system:public-info-viewer` is bound to unauthenticated callers.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        cluster_role_binding("cluster-admin", &[SYSTEM_MASTERS]),
        cluster_role_binding("system:basic-user", &[ALL_AUTHENTICATED]),
        cluster_role_binding("system:discovery", &[ALL_AUTHENTICATED]),
        cluster_role_binding("system:monitoring", &["system:monitoring"]),
        cluster_role_binding(
            "system:public-info-viewer",
            &[ALL_AUTHENTICATED, ALL_UNAUTHENTICATED],
        ),
    ]
}
