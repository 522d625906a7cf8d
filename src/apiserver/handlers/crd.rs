//! CustomResourceDefinitions: validating and defaulting them on write, compiling their schemas,
//! setting their status, and serving (or ceasing to serve) their resources.

use std::sync::Arc;

use serde_json::{Value, json};

use super::semantics::{FieldError, compile};
use super::write::now;
use crate::builtin;
use crate::registry::{ALL_VERBS, PrinterColumn, ResourceInfo, ResourceKey, ScalePaths};
use crate::server::AppState;

/// The finalizer under which a CRD's custom resources are deleted before the CRD goes.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Validates and defaults a CRD (create or update) and sets its status; returns field errors.
pub fn prepare(state: &AppState, crd: &mut Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default().to_string();
    let plural = spec["names"]["plural"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = spec["names"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if group.is_empty() {
        errors.push(FieldError::required("spec.group", ""));
    } else if !group.contains('.') {
        errors.push(FieldError::invalid(
            "spec.group",
            json!(group),
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        errors.push(FieldError::required("spec.names.plural", ""));
    }
    if kind.is_empty() {
        errors.push(FieldError::required("spec.names.kind", ""));
    }
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        errors.push(FieldError::invalid(
            "metadata.name",
            json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec["scope"].as_str() {
        Some("Namespaced") | Some("Cluster") => {}
        Some(other) => errors.push(FieldError::not_supported(
            "spec.scope",
            json!(other),
            &["Cluster".to_string(), "Namespaced".to_string()],
        )),
        None => errors.push(FieldError::required("spec.scope", "")),
    }
    if let Some(old) = old {
        for field in ["group", "scope"] {
            if old["spec"][field] != crd["spec"][field] {
                errors.push(FieldError::invalid(
                    format!("spec.{field}"),
                    crd["spec"][field].clone(),
                    "field is immutable",
                ));
            }
        }
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        errors.push(FieldError::invalid(
            "spec.versions",
            json!(null),
            "must have exactly one version marked as storage version",
        ));
    }
    let storage_count = versions
        .iter()
        .filter(|version| version["storage"].as_bool() == Some(true))
        .count();
    if !versions.is_empty() && storage_count != 1 {
        errors.push(FieldError::invalid(
            "spec.versions",
            spec["versions"].clone(),
            "must have exactly one version marked as storage version",
        ));
    }
    // The apiserver converts a v1 CRD whose versions share one schema to the top-level
    // `spec.validation` before validating it, so that schema's errors are named there.
    let shared_schema = versions
        .windows(2)
        .all(|pair| pair[0].pointer("/schema") == pair[1].pointer("/schema"));
    for (position, version) in versions.iter().enumerate() {
        let path = format!("spec.versions[{position}]");
        if version["name"].as_str().is_none_or(str::is_empty) {
            errors.push(FieldError::required(format!("{path}.name"), ""));
        }
        match version.pointer("/schema/openAPIV3Schema") {
            None | Some(Value::Null) => errors.push(FieldError::required(
                format!("{path}.schema.openAPIV3Schema"),
                "schemas are required",
            )),
            // A shared schema is compiled and reported once, at spec.validation.
            Some(_) if shared_schema && position > 0 => {}
            Some(schema) => {
                if let Err(error) = compile(schema) {
                    let prefix = if shared_schema {
                        "spec.validation.openAPIV3Schema".to_string()
                    } else {
                        format!("{path}.schema.openAPIV3Schema")
                    };
                    errors.extend(
                        error
                            .errors()
                            .iter()
                            .cloned()
                            .map(|error| error.with_prefix(&prefix)),
                    );
                }
            }
        }
        if let Some(scale) = version.pointer("/subresources/scale") {
            errors.extend(scale_path_errors(&format!("{path}.subresources"), scale));
        }
    }
    if !errors.is_empty() {
        return errors;
    }

    if old.is_none() {
        // Every CRD carries the cleanup finalizer from creation: deleting it first deletes its
        // custom resources (the real apiextensions-apiserver's finalizer controller).
        let mut finalizers = super::write::string_list(&crd["metadata"]["finalizers"]);
        if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
            finalizers.push(CLEANUP_FINALIZER.to_string());
            crd["metadata"]["finalizers"] = json!(finalizers);
        }
    }

    // Defaults the real apiserver fills in.
    if crd["spec"]["names"]["singular"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        crd["spec"]["names"]["singular"] = json!(kind.to_lowercase());
    }
    if crd["spec"]["names"]["listKind"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        crd["spec"]["names"]["listKind"] = json!(format!("{kind}List"));
    }
    if crd["spec"]["conversion"].is_null() {
        crd["spec"]["conversion"] = json!({"strategy": "None"});
    }

    // Conflicting names in the same group make the real server refuse to serve the CRD.
    let conflicting = state
        .registry
        .resources()
        .into_iter()
        .any(|info| info.group == group && info.kind == kind && info.plural != plural);
    let accepted_condition = if conflicting {
        json!({"type": "NamesAccepted", "status": "False", "reason": "KindConflict",
               "message": format!("\"{kind}\" is already in use"), "lastTransitionTime": now()})
    } else {
        json!({"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
               "message": "no conflicts found", "lastTransitionTime": now()})
    };
    let established_condition = if conflicting {
        json!({"type": "Established", "status": "False", "reason": "NotAccepted",
               "message": "not all names are accepted", "lastTransitionTime": now()})
    } else {
        json!({"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
               "message": "the initial names have been accepted", "lastTransitionTime": now()})
    };
    let keep_time = |condition: Value| -> Value {
        // An unchanged condition keeps its transition time.
        let previous = old.and_then(|old| {
            old["status"]["conditions"]
                .as_array()
                .and_then(|conditions| {
                    conditions
                        .iter()
                        .find(|c| {
                            c["type"] == condition["type"] && c["status"] == condition["status"]
                        })
                        .cloned()
                })
        });
        match previous {
            Some(previous) => {
                let mut condition = condition;
                condition["lastTransitionTime"] = previous["lastTransitionTime"].clone();
                condition
            }
            None => condition,
        }
    };
    let mut stored_versions: Vec<String> = old
        .map(|old| super::write::string_list(&old["status"]["storedVersions"]))
        .unwrap_or_default();
    for version in &versions {
        if version["storage"].as_bool() == Some(true)
            && let Some(name) = version["name"].as_str()
            && !stored_versions.iter().any(|stored| stored == name)
        {
            stored_versions.push(name.to_string());
        }
    }
    crd["status"] = json!({
        "conditions": [keep_time(accepted_condition), keep_time(established_condition)],
        "acceptedNames": crd["spec"]["names"].clone(),
        "storedVersions": stored_versions,
    });
    errors
}

/// Whether the CRD's names were accepted (its resources are served).
fn established(crd: &Value) -> bool {
    crd["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
}

/// After a committed write: a CRD's resources are (re)registered.
pub fn after_write(state: &AppState, info: &ResourceInfo, object: &Value) {
    if builtin::is_crd(info) {
        register(state, object);
    }
}

/// Serves every served version of a CRD (replacing what was served before).
pub fn register(state: &AppState, crd: &Value) {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    if !established(crd) {
        state.registry.remove_resource(group, plural);
        return;
    }
    let mut infos = Vec::new();
    let names = &spec["names"];
    let strings = |value: &Value| super::write::string_list(value);
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    for version in spec["versions"].as_array().into_iter().flatten() {
        let Some(schema) = version
            .pointer("/schema/openAPIV3Schema")
            .and_then(|schema| compile(schema).ok())
        else {
            continue;
        };
        let printer_columns = version["additionalPrinterColumns"]
            .as_array()
            .map(|columns| {
                columns
                    .iter()
                    .map(|column| PrinterColumn {
                        name: column["name"].as_str().unwrap_or_default().to_string(),
                        type_: column["type"].as_str().unwrap_or_default().to_string(),
                        format: column["format"].as_str().map(str::to_string),
                        description: column["description"].as_str().map(str::to_string),
                        priority: column["priority"].as_i64().unwrap_or(0) as i32,
                        json_path: column["jsonPath"].as_str().unwrap_or_default().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        infos.push(ResourceInfo {
            group: group.to_string(),
            version: version["name"].as_str().unwrap_or_default().to_string(),
            kind: kind.clone(),
            list_kind: names["listKind"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("{kind}List")),
            plural: plural.to_string(),
            singular: names["singular"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| kind.to_lowercase()),
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            namespaced: spec["scope"] == "Namespaced",
            verbs: ALL_VERBS.to_vec(),
            has_status: version.pointer("/subresources/status").is_some(),
            scale: version
                .pointer("/subresources/scale")
                .map(|scale| ScalePaths {
                    spec_replicas: scale["specReplicasPath"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    status_replicas: scale["statusReplicasPath"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    label_selector: scale["labelSelectorPath"]
                        .as_str()
                        .filter(|path| !path.is_empty())
                        .map(str::to_string),
                }),
            printer_columns,
            schema: Some(Arc::new(schema)),
            storage_version: version["storage"].as_bool() == Some(true),
            served: version["served"].as_bool().unwrap_or(true),
        });
    }
    state.registry.replace_resource(group, plural, infos);
}

/// `validateCustomResourceDefinitionSubresources`: the scale paths are simple JSON paths,
/// the spec replicas under `.spec`, the status replicas under `.status`, the selector under
/// either.
fn scale_path_errors(path: &str, scale: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let simple = |field: &str, value: &str| -> Option<FieldError> {
        if value.is_empty() {
            Some(FieldError::invalid(
                field,
                json!(value),
                "must not be empty",
            ))
        } else if !value.starts_with('.') {
            Some(FieldError::invalid(
                field,
                json!(value),
                "must be a simple json path starting with .",
            ))
        } else {
            None
        }
    };
    for (name, under, message) in [
        (
            "specReplicasPath",
            &[".spec."][..],
            "should be a json path under .spec",
        ),
        (
            "statusReplicasPath",
            &[".status."][..],
            "should be a json path under .status",
        ),
    ] {
        let field = format!("{path}.scale.{name}");
        match scale[name].as_str().filter(|value| !value.is_empty()) {
            None => errors.push(FieldError::required(field, "")),
            Some(value) => match simple(&field, value) {
                Some(error) => errors.push(error),
                None if !under.iter().any(|prefix| value.starts_with(prefix)) => {
                    errors.push(FieldError::invalid(field, json!(value), message));
                }
                None => {}
            },
        }
    }
    if let Some(value) = scale["labelSelectorPath"]
        .as_str()
        .filter(|v| !v.is_empty())
    {
        let field = format!("{path}.scale.labelSelectorPath");
        match simple(&field, value) {
            Some(error) => errors.push(error),
            None if !value.starts_with(".spec.") && !value.starts_with(".status.") => {
                errors.push(FieldError::invalid(
                    field,
                    json!(value),
                    "should be a json path under either .spec or .status",
                ));
            }
            None => {}
        }
    }
    errors
}

/// A CRD is gone: its objects are removed and its resources no longer served.
pub fn unregister(state: &AppState, crd: &Value) {
    let group = crd["spec"]["group"].as_str().unwrap_or_default();
    let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
    let resource = ResourceKey {
        group: group.to_string(),
        plural: plural.to_string(),
    };
    state.registry.remove_resource(group, plural);
    state.store.remove_resource(&resource);
}

/// The storage key of the custom resources a CRD defines.
pub fn served_resource(crd: &Value) -> ResourceKey {
    ResourceKey {
        group: crd["spec"]["group"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        plural: crd["spec"]["names"]["plural"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

/// Whether the CRD serving `info` is being deleted (new objects are then refused).
pub fn terminating(state: &AppState, info: &ResourceInfo) -> bool {
    let crds = ResourceKey {
        group: "apiextensions.k8s.io".into(),
        plural: "customresourcedefinitions".into(),
    };
    state
        .store
        .get(&crds, "", &format!("{}.{}", info.plural, info.group))
        .is_some_and(|crd| crd.index.deleting)
}
