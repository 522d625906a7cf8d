#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The CRD YAML in `crds/` is generated from the Rust types; these tests keep it so.
//! Regenerate with `UPDATE_GENERATED=1 cargo test -p gpucloud-api --test crds`.

use std::path::PathBuf;

fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../crds")
}

#[test]
fn crds_directory_matches_the_rust_types() {
    let update = std::env::var_os("UPDATE_GENERATED").is_some();
    let mut expected_files = Vec::new();
    for crd in gpucloud_api::crds() {
        let name = crd.metadata.name.clone().expect("generated CRDs are named");
        let file = crds_dir().join(format!("{name}.yaml"));
        let yaml = format!("---\n{}", serde_yaml::to_string(&crd).unwrap());
        if update {
            std::fs::create_dir_all(crds_dir()).unwrap();
            std::fs::write(&file, &yaml).unwrap();
        }
        let on_disk = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; regenerate with UPDATE_GENERATED=1",
                file.display()
            )
        });
        assert!(
            on_disk == yaml,
            "{} is out of date; regenerate with UPDATE_GENERATED=1 cargo test -p gpucloud-api --test crds",
            file.display()
        );
        expected_files.push(format!("{name}.yaml"));
    }
    let mut present: Vec<String> = std::fs::read_dir(crds_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    present.sort();
    expected_files.sort();
    assert_eq!(
        present, expected_files,
        "crds/ holds files no kind generates"
    );
}

#[test]
fn every_kind_is_namespaced_in_the_gpucloud_category_with_status_subresource() {
    for crd in gpucloud_api::crds() {
        let name = crd.metadata.name.clone().unwrap();
        assert_eq!(crd.spec.group, "gpucloud.io", "{name}");
        assert_eq!(crd.spec.scope, "Namespaced", "{name}");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["gpucloud".to_string()][..]),
            "{name}"
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{name}"
        );
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert!(
            columns.contains(&"Ready") && columns.contains(&"Age"),
            "{name}: {columns:?}"
        );
    }
}

/// A structural schema (what the apiserver demands of a CRD) has a type on every node, and
/// no `$ref`, `anyOf`/`oneOf` carrying types, or `additionalProperties` beside `properties`.
#[test]
fn schemas_are_structural() {
    fn walk(path: &str, node: &serde_json::Value, errors: &mut Vec<String>) {
        let Some(obj) = node.as_object() else { return };
        if obj.contains_key("$ref") {
            errors.push(format!("{path}: $ref"));
        }
        let preserves =
            obj.get("x-kubernetes-preserve-unknown-fields") == Some(&serde_json::Value::Bool(true));
        let int_or_string =
            obj.get("x-kubernetes-int-or-string") == Some(&serde_json::Value::Bool(true));
        if !obj.contains_key("type") && !preserves && !int_or_string {
            errors.push(format!("{path}: no type"));
        }
        if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
            errors.push(format!("{path}: properties and additionalProperties"));
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(branches) = obj.get(key).and_then(|v| v.as_array()) {
                for b in branches {
                    if b.get("type").is_some() {
                        errors.push(format!("{path}: type inside {key}"));
                    }
                }
            }
        }
        if let Some(props) = obj.get("properties").and_then(|p| p.as_object()) {
            for (k, v) in props {
                walk(&format!("{path}.{k}"), v, errors);
            }
        }
        if let Some(items) = obj.get("items") {
            walk(&format!("{path}[]"), items, errors);
        }
        if let Some(ap) = obj.get("additionalProperties").filter(|v| v.is_object()) {
            walk(&format!("{path}{{}}"), ap, errors);
        }
    }
    for crd in gpucloud_api::crds() {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let mut errors = Vec::new();
        walk(
            crd.metadata.name.as_deref().unwrap(),
            &schema["openAPIV3Schema"],
            &mut errors,
        );
        assert!(errors.is_empty(), "{errors:#?}");
    }
}

#[test]
fn field_reference_matches_the_crds() {
    let file = crds_dir().join("../docs/crd-reference.md");
    let generated = gpucloud_api::reference::markdown(&gpucloud_api::crds());
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        std::fs::write(&file, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/crd-reference.md is out of date; regenerate with UPDATE_GENERATED=1 cargo test -p gpucloud-api --test crds"
    );
    // Every spec field of every kind is documented.
    for field in [
        "spec.powerState",
        "spec.securityRules[].remoteIpPrefix",
        "spec.publicKey",
        "spec.sizeGb",
        "spec.instanceSelector",
    ] {
        assert!(generated.contains(&format!("`{field}`")), "{field} missing");
    }
}
