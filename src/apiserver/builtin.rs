//! The built-in kinds the server serves, and the few behaviours the real apiserver gives them on
//! write (namespace phase and finalizer, Secret `stringData` folding and default type).

use base64::Engine;
use serde_json::{Value, json};

use crate::registry::{ALL_VERBS, ResourceInfo};

struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    namespaced: bool,
    has_status: bool,
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        singular: "namespace",
        short_names: &["ns"],
        categories: &[],
        namespaced: false,
        has_status: true,
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        singular: "secret",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        singular: "configmap",
        short_names: &["cm"],
        categories: &[],
        namespaced: true,
        has_status: false,
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        singular: "event",
        short_names: &["ev"],
        categories: &[],
        namespaced: true,
        has_status: false,
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        short_names: &["sa"],
        categories: &[],
        namespaced: true,
        has_status: false,
    },
    Builtin {
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        singular: "event",
        short_names: &["ev"],
        categories: &[],
        namespaced: true,
        has_status: false,
    },
    Builtin {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        singular: "lease",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
        singular: "service",
        short_names: &["svc"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
    },
    Builtin {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
        singular: "deployment",
        short_names: &["deploy"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
    },
    Builtin {
        group: "policy",
        version: "v1",
        kind: "PodDisruptionBudget",
        plural: "poddisruptionbudgets",
        singular: "poddisruptionbudget",
        short_names: &["pdb"],
        categories: &[],
        namespaced: true,
        has_status: true,
    },
    Builtin {
        group: "networking.k8s.io",
        version: "v1",
        kind: "NetworkPolicy",
        plural: "networkpolicies",
        singular: "networkpolicy",
        short_names: &["netpol"],
        categories: &[],
        namespaced: true,
        has_status: false,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "ClusterRole",
        plural: "clusterroles",
        singular: "clusterrole",
        short_names: &[],
        categories: &[],
        namespaced: false,
        has_status: false,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "ClusterRoleBinding",
        plural: "clusterrolebindings",
        singular: "clusterrolebinding",
        short_names: &[],
        categories: &[],
        namespaced: false,
        has_status: false,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "Role",
        plural: "roles",
        singular: "role",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "RoleBinding",
        plural: "rolebindings",
        singular: "rolebinding",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        version: "v1",
        kind: "ValidatingAdmissionPolicy",
        plural: "validatingadmissionpolicies",
        singular: "validatingadmissionpolicy",
        short_names: &[],
        categories: &["api-extensions"],
        namespaced: false,
        has_status: true,
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        version: "v1",
        kind: "ValidatingAdmissionPolicyBinding",
        plural: "validatingadmissionpolicybindings",
        singular: "validatingadmissionpolicybinding",
        short_names: &[],
        categories: &["api-extensions"],
        namespaced: false,
        has_status: false,
    },
    // What scales a custom resource through its scale subresource.
    Builtin {
        group: "autoscaling",
        version: "v2",
        kind: "HorizontalPodAutoscaler",
        plural: "horizontalpodautoscalers",
        singular: "horizontalpodautoscaler",
        short_names: &["hpa"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
    },
    Builtin {
        group: "apiextensions.k8s.io",
        version: "v1",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        singular: "customresourcedefinition",
        short_names: &["crd", "crds"],
        categories: &["api-extensions"],
        namespaced: false,
        has_status: true,
    },
];

/// The namespaces every cluster starts with.
pub const INITIAL_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// ResourceInfo for every built-in kind.
pub fn builtin_resources() -> Vec<ResourceInfo> {
    BUILTINS
        .iter()
        .map(|builtin| ResourceInfo {
            group: builtin.group.to_string(),
            version: builtin.version.to_string(),
            kind: builtin.kind.to_string(),
            list_kind: format!("{}List", builtin.kind),
            plural: builtin.plural.to_string(),
            singular: builtin.singular.to_string(),
            short_names: builtin.short_names.iter().map(|s| s.to_string()).collect(),
            categories: builtin.categories.iter().map(|s| s.to_string()).collect(),
            namespaced: builtin.namespaced,
            verbs: if builtin.plural == "namespaces" {
                // The real server has no deletecollection for namespaces.
                ALL_VERBS
                    .iter()
                    .copied()
                    .filter(|verb| *verb != "deletecollection")
                    .collect()
            } else {
                ALL_VERBS.to_vec()
            },
            has_status: builtin.has_status,
            scale: None,
            printer_columns: Vec::new(),
            schema: None,
            storage_version: true,
            served: true,
        })
        .collect()
}

/// Whether `info` is the built-in Namespace kind.
pub fn is_namespace(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "namespaces"
}

/// Whether `info` is the CustomResourceDefinition kind.
pub fn is_crd(info: &ResourceInfo) -> bool {
    info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions"
}

/// Whether objects of `info` carry `metadata.generation`, set to 1 on create and raised on
/// every change outside metadata and status (custom resources, CRDs, admission policies).
pub fn tracks_generation(info: &ResourceInfo) -> bool {
    info.is_custom()
        || is_crd(info)
        || crate::admission::is_policy(info)
        || crate::admission::is_binding(info)
}

/// Whether `info` is the events.k8s.io/v1 view of Events (stored as core/v1 Events, as the
/// real server stores both views in one place).
pub fn is_events_v1(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io" && info.plural == "events"
}

/// Whether `info` is core/v1 Events.
pub fn is_core_event(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "events"
}

/// Fields that differ only in name between core/v1 and events.k8s.io/v1 Events
/// (k8s.io/kubernetes pkg/apis/events/v1 conversion).
const EVENT_RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename_fields(mut object: Value, to_events_v1: bool, api_version: &str) -> Value {
    if let Some(map) = object.as_object_mut() {
        for (core, events_v1) in EVENT_RENAMES {
            let (from, to) = if to_events_v1 {
                (*core, *events_v1)
            } else {
                (*events_v1, *core)
            };
            if let Some(value) = map.remove(from) {
                map.insert(to.to_string(), value);
            }
        }
        map.insert("apiVersion".into(), json!(api_version));
    }
    object
}

/// A stored (core/v1) Event as events.k8s.io/v1 serves it.
pub fn event_to_events_v1(object: Value) -> Value {
    if object["apiVersion"] == "events.k8s.io/v1" {
        return object;
    }
    rename_fields(object, true, "events.k8s.io/v1")
}

/// An events.k8s.io/v1 Event in its stored (core/v1) form.
pub fn event_to_core(object: Value) -> Value {
    if object["apiVersion"] == "v1" {
        return object;
    }
    rename_fields(object, false, "v1")
}

/// Extra field selectors a kind supports, each mapped to the path it reads in the stored
/// object (core/v1 Event fields from pkg/registry/core/event/strategy.go; the events.k8s.io
/// view accepts its own names for the same fields too).
pub fn selectable_fields(info: &ResourceInfo) -> &'static [(&'static str, &'static str)] {
    const CORE_EVENT: &[(&str, &str)] = &[
        ("involvedObject.kind", "involvedObject.kind"),
        ("involvedObject.namespace", "involvedObject.namespace"),
        ("involvedObject.name", "involvedObject.name"),
        ("involvedObject.uid", "involvedObject.uid"),
        ("involvedObject.apiVersion", "involvedObject.apiVersion"),
        (
            "involvedObject.resourceVersion",
            "involvedObject.resourceVersion",
        ),
        ("involvedObject.fieldPath", "involvedObject.fieldPath"),
        ("reason", "reason"),
        ("reportingComponent", "reportingComponent"),
        ("source", "source.component"),
        ("type", "type"),
    ];
    const EVENTS_V1: &[(&str, &str)] = &[
        ("involvedObject.kind", "involvedObject.kind"),
        ("involvedObject.namespace", "involvedObject.namespace"),
        ("involvedObject.name", "involvedObject.name"),
        ("involvedObject.uid", "involvedObject.uid"),
        ("involvedObject.apiVersion", "involvedObject.apiVersion"),
        (
            "involvedObject.resourceVersion",
            "involvedObject.resourceVersion",
        ),
        ("involvedObject.fieldPath", "involvedObject.fieldPath"),
        ("regarding.kind", "involvedObject.kind"),
        ("regarding.namespace", "involvedObject.namespace"),
        ("regarding.name", "involvedObject.name"),
        ("regarding.uid", "involvedObject.uid"),
        ("regarding.apiVersion", "involvedObject.apiVersion"),
        (
            "regarding.resourceVersion",
            "involvedObject.resourceVersion",
        ),
        ("regarding.fieldPath", "involvedObject.fieldPath"),
        ("reason", "reason"),
        ("reportingComponent", "reportingComponent"),
        ("reportingController", "reportingComponent"),
        ("source", "source.component"),
        ("type", "type"),
    ];
    if is_core_event(info) {
        CORE_EVENT
    } else if is_events_v1(info) {
        EVENTS_V1
    } else {
        &[]
    }
}

/// A Namespace object as created at start-up.
pub fn initial_namespace(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// Sets a Namespace's `status.phase`, replacing a status that is not an object.
pub fn set_namespace_phase(namespace: &mut Value, phase: &str) {
    if !namespace["status"].is_object() {
        namespace["status"] = json!({});
    }
    namespace["status"]["phase"] = json!(phase);
}

/// Removes the `kubernetes` finalizer from a Namespace's `spec.finalizers`.
pub fn remove_namespace_finalizer(namespace: &mut Value, finalizer: &str) {
    if let Some(finalizers) = namespace
        .get_mut("spec")
        .and_then(|spec| spec.get_mut("finalizers"))
        .and_then(Value::as_array_mut)
    {
        finalizers.retain(|f| f.as_str() != Some(finalizer));
    }
}

/// Built-in strategy on create, as the real registry's `PrepareForCreate`.
pub fn prepare_builtin_create(info: &ResourceInfo, object: &mut Value) {
    if is_namespace(info) {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        // The NamespaceLifecycle strategy always sets this label and the kubernetes finalizer.
        if let Some(metadata) = object["metadata"].as_object_mut() {
            let labels = metadata.entry("labels").or_insert_with(|| json!({}));
            if let Some(labels) = labels.as_object_mut() {
                labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
        }
        object["spec"] = json!({"finalizers": ["kubernetes"]});
        object["status"] = json!({"phase": "Active"});
    }
    prepare_builtin_write(info, object);
}

/// Built-in behaviour on every write (create, update, patch).
pub fn prepare_builtin_write(info: &ResourceInfo, object: &mut Value) {
    if info.group.is_empty() && info.plural == "secrets" {
        fold_string_data(object);
        if object.get("type").is_none_or(Value::is_null) {
            object["type"] = json!("Opaque");
        }
    }
}

/// The apiserver folds `stringData` into base64 `data` and never stores `stringData`.
fn fold_string_data(object: &mut Value) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let Some(Value::Object(string_data)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (key, value) in string_data {
            let text = value
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            data.insert(
                key,
                json!(base64::engine::general_purpose::STANDARD.encode(text.as_bytes())),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_convert_between_views() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "message": "m",
                          "involvedObject": {"name": "x"}, "reason": "R"});
        let events_v1 = event_to_events_v1(core.clone());
        assert_eq!(events_v1["apiVersion"], "events.k8s.io/v1");
        assert_eq!(events_v1["note"], "m");
        assert_eq!(events_v1["regarding"]["name"], "x");
        assert_eq!(event_to_core(events_v1), core);
    }

    #[test]
    fn secret_string_data_is_folded_into_data() {
        let info = builtin_resources()
            .into_iter()
            .find(|info| info.plural == "secrets")
            .unwrap();
        let mut secret = json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}});
        prepare_builtin_write(&info, &mut secret);
        assert_eq!(secret["data"]["k"], "dg==");
        assert_eq!(secret["type"], "Opaque");
        assert!(secret.get("stringData").is_none());
    }
}
