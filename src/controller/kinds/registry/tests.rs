#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The files generated from the kind registry (the CRDs in `crds/`, the field reference, the
//! chart's kind lists and CRD template, the kustomize base's CRD list) are kept in step with
//! it here.
//! Regenerate with `UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry`.

use std::path::PathBuf;

fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../crds")
}

#[test]
fn crds_directory_matches_the_rust_types() {
    let update = std::env::var_os("UPDATE_GENERATED").is_some();
    let mut expected_files = Vec::new();
    for crd in super::crds() {
        let name = crd.metadata.name.clone().expect("generated CRDs are named");
        let file = crds_dir().join(format!("{name}.yaml"));
        let yaml = format!("---\n{}", super::to_yaml(&crd).unwrap());
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
            "{} is out of date; regenerate with UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry",
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
    // The catalog's kinds are cluster-scoped and have no conditions: their own test below.
    // GpuPolicy is cluster-scoped, so that no namespace's user can edit its way out of it.
    let catalogs = super::catalog_crds();
    for crd in super::crds().into_iter().filter(|c| !catalogs.contains(c)) {
        let name = crd.metadata.name.clone().unwrap();
        assert_eq!(crd.spec.group, "gpucloud.io", "{name}");
        let scope = if name == "gpupolicies.gpucloud.io" {
            "Cluster"
        } else {
            "Namespaced"
        };
        assert_eq!(crd.spec.scope, scope, "{name}");
        // A cluster-scoped policy is no team's to read: out of the team's category.
        let category = if scope == "Cluster" {
            gpucloud_api::POLICY_CATEGORY
        } else {
            gpucloud_api::CATEGORY
        };
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&[category.to_string()][..]),
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
        // Why an object is not Ready (or Stalled) shows in the default table, from Ready's
        // reason; a managed kind's table starts with its cloud state.
        let policy = super::policy_crds()
            .iter()
            .any(|p| p.metadata.name == crd.metadata.name);
        let first: &[&str] = if policy {
            &["Ready", "Reason"]
        } else {
            &["State", "Ready", "Reason"]
        };
        assert!(
            first.iter().all(|c| columns.contains(c)) && columns.last() == Some(&"Age"),
            "{name}: {columns:?}"
        );
        if !policy {
            assert_eq!(columns.get(..3), Some(first), "{name}: {columns:?}");
        }
        let reason = version
            .additional_printer_columns
            .iter()
            .flatten()
            .find(|c| c.name == "Reason")
            .unwrap();
        assert_eq!(
            (reason.json_path.as_str(), reason.priority),
            (".status.conditions[?(@.type==\"Ready\")].reason", None),
            "{name}"
        );
        // A short name is `gpu` and an abbreviation of the kind, and never reads as another
        // word: `kubectl get gpus` listing snapshots surprised people.
        let kind = crd.spec.names.kind.to_lowercase();
        let kind = kind.trim_start_matches("gpu");
        for short in crd.spec.names.short_names.iter().flatten() {
            let rest = short.strip_prefix("gpu").unwrap_or_default();
            assert!(
                !rest.is_empty() && rest != "s" && kind.contains(&rest[..1]),
                "{name}: short name {short}"
            );
        }
    }
}

/// The catalog's kinds: cluster-scoped, in a category of their own, with a status subresource
/// (the operator writes only the status), a short name, and the table a person choosing a
/// machine reads.
#[test]
fn catalog_kinds_are_cluster_scoped_read_only_tables() {
    for crd in super::catalog_crds() {
        let name = crd.metadata.name.clone().unwrap();
        assert_eq!(crd.spec.scope, "Cluster", "{name}");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&[gpucloud_api::CATALOG_CATEGORY.to_string()][..]),
            "{name}"
        );
        assert!(crd.spec.names.short_names.iter().flatten().count() > 0);
        let version = &crd.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .filter(|c| c.priority.is_none())
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            [
                "GPU",
                "Region",
                "VRAM(GB)",
                "vCPUs/GPU",
                "RAM/GPU(GB)",
                "Price/GPU/h",
                "Currency",
                "Available",
                "Refreshed"
            ],
            "{name}"
        );
        // The spec cannot change once made.
        let rules = serde_json::to_string(&version.schema).unwrap();
        assert!(rules.contains("self == oldSelf"), "{name}");
    }
}

/// `kubectl explain <kind>` opens with what the kind is, and wraps descriptions itself: the
/// doc comments they come from carry no line breaks into the CRDs.
#[test]
fn descriptions_read_well_in_kubectl_explain() {
    fn descriptions<'a>(
        node: &'a serde_json::Value,
        path: String,
        out: &mut Vec<(String, &'a str)>,
    ) {
        match node {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    match value.as_str() {
                        Some(text) if key == "description" => out.push((path.clone(), text)),
                        _ => descriptions(value, format!("{path}.{key}"), out),
                    }
                }
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    descriptions(item, path.clone(), out);
                }
            }
            _ => {}
        }
    }
    for crd in super::crds() {
        let name = crd.metadata.name.clone().unwrap();
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let root = schema["openAPIV3Schema"]["description"]
            .as_str()
            .unwrap_or_default();
        assert!(
            !root.is_empty() && !root.contains("Auto-generated"),
            "{name}: {root:?}"
        );
        let mut all = Vec::new();
        descriptions(&schema, name.clone(), &mut all);
        for (path, text) in all {
            assert!(!text.contains('\n'), "{path}: {text:?}");
        }
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
    for crd in super::crds() {
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
    let generated = gpucloud_api::reference::markdown(&super::kinds());
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        std::fs::write(&file, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/crd-reference.md is out of date; regenerate with UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry"
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

#[test]
fn every_spec_field_declares_what_a_change_does() {
    use gpucloud_api::OnChange;
    use gpucloud_api::reference::{on_change_of, spec_fields};
    let mut errors = Vec::new();
    for kind in super::kinds() {
        let name = &kind.crd.spec.names.kind;
        let fields = spec_fields(&kind);
        for (declared, _) in kind.on_change.iter().chain(gpucloud_api::MANAGED_ON_CHANGE) {
            if !fields.iter().any(|f| f == declared) {
                errors.push(format!(
                    "{name}: spec.{declared} is declared but not in the schema"
                ));
            }
        }
        let spec = serde_json::to_value(
            &kind.crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap()
                .properties
                .as_ref()
                .unwrap()["spec"],
        )
        .unwrap();
        let rules = |node: &serde_json::Value| -> Vec<String> {
            node["x-kubernetes-validations"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| r["rule"].as_str().unwrap_or("").to_string())
                .collect()
        };
        let spec_rules = rules(&spec);
        for field in &fields {
            match on_change_of(&kind, field) {
                None => errors.push(format!(
                    "{name}: spec.{field} declares no on-change behaviour"
                )),
                // Kept by a transition rule on the spec naming the field's old value.
                Some(OnChange::Immutable) => {
                    let old = format!("oldSelf.{field}");
                    let kept = spec_rules.iter().any(|r| {
                        r.contains(&format!("self.{field} == {old}"))
                            || r.contains(&format!("self.{field}) == has({old})"))
                    });
                    if !kept {
                        errors.push(format!(
                            "{name}: spec.{field} is declared immutable but no CEL rule keeps it"
                        ));
                    }
                }
                // A field that changes must not be frozen by a rule.
                Some(_) => {
                    if spec_rules
                        .iter()
                        .any(|r| r.contains(&format!("self.{field} == oldSelf.{field}")))
                    {
                        errors.push(format!(
                            "{name}: spec.{field} is declared changeable but a CEL rule keeps it"
                        ));
                    }
                }
            }
        }
    }
    assert!(errors.is_empty(), "{errors:#?}");
}

/// Compares `path` with `text`, writing it first under `UPDATE_GENERATED`.
fn generated(path: &std::path::Path, text: &str) {
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        std::fs::write(path, text).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        on_disk == text,
        "{} is out of date; regenerate with UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry",
        path.display()
    );
}

#[test]
fn chart_kind_lists_crd_template_and_kustomize_crd_list_match_the_registry() {
    let root = crds_dir().join("..");
    generated(
        &root.join("charts/gpucloud-operator/templates/_kinds.tpl"),
        &super::chart_kinds_template(),
    );
    generated(
        &root.join("deploy/kustomize/crds/kustomization.yaml"),
        &super::kustomize_crds(),
    );
    generated(
        &root.join("charts/gpucloud-operator/templates/crds.yaml"),
        &super::chart_crds_template(&super::crds()).unwrap(),
    );
    let template = super::chart_kinds_template();
    for crd in super::crds() {
        let plural = &crd.spec.names.plural;
        assert!(
            template.contains(&format!(" {plural}/status"))
                || template.contains(&format!("[{plural}/status")),
            "{plural}"
        );
    }
}

/// A `{{` in a CRD (a CEL rule, a description) reaches the template as an action printing it,
/// and nothing else changes; tests/deploy_chart.rs renders such a template with Helm.
#[test]
fn crd_template_escapes_template_actions() {
    assert_eq!(
        super::escape_template("self.matches('^{{x}}$') {{- y"),
        "self.matches('^{{ \"{{\" }}x}}$') {{ \"{{\" }}- y"
    );
    let mut crd = super::crds().remove(0);
    let schema = crd.spec.versions[0].schema.as_mut().unwrap();
    schema.open_api_v3_schema.as_mut().unwrap().description = Some("Say {{ hello }}.".into());
    let template = super::chart_crds_template(&[crd]).unwrap();
    let lines: Vec<&str> = template.lines().collect();
    assert_eq!(lines[3], "{{- if .Values.crds.enabled }}");
    assert_eq!(lines.last(), Some(&"{{- end }}"));
    assert!(
        template.contains(r#"Say {{ "{{" }} hello }}."#),
        "{template}"
    );
    // The comment, `if` and `end` for enabled, `if`, `else` and `end` for keep, and the
    // escaped description.
    assert_eq!(template.matches("{{").count(), 8, "{template}");
}

/// The sweeper lists and claims exactly the kinds the operator manages: a kind it did not
/// claim would have its live resources reported (and with `--delete-orphans`, deleted).
#[test]
fn the_sweeper_claims_every_managed_kind_and_only_those() {
    let managed: Vec<String> = super::map_kinds(super::KindName);
    // Budgets own no cloud resource: nothing of theirs is swept.
    let mut from_crds: Vec<String> = super::crds()
        .into_iter()
        .filter(|c| !super::policy_crds().contains(c) && !super::catalog_crds().contains(c))
        .map(|c| c.spec.names.kind)
        .collect();
    let swept: Vec<String> = crate::accounts::orphans::swept_kinds()
        .into_iter()
        .map(|(kind, _)| kind)
        .collect();
    assert_eq!(swept, managed);
    let mut sorted = managed.clone();
    sorted.sort();
    from_crds.sort();
    assert_eq!(sorted, from_crds);
    let labels: std::collections::HashSet<&str> = crate::accounts::orphans::swept_kinds()
        .into_iter()
        .map(|(_, label)| label)
        .collect();
    assert_eq!(
        labels.len(),
        managed.len(),
        "every kind's resource has its own label"
    );
}

/// docs/design.md's table of references is the kinds' declarations.
#[test]
fn design_references_table_matches_the_declarations() {
    let file = crds_dir().join("../docs/design.md");
    let text = std::fs::read_to_string(&file).unwrap();
    let (start, end) = (
        "<!-- references: generated from ManagedKind::REFERS_TO -->\n",
        "<!-- end of references -->",
    );
    let from = text
        .find(start)
        .expect("design.md has the references markers")
        + start.len();
    let to = from
        + text[from..]
            .find(end)
            .expect("design.md has the end marker");
    let table = super::references_table();
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        let updated = format!("{}{table}{}", &text[..from], &text[to..]);
        std::fs::write(&file, updated).unwrap();
    } else {
        assert!(
            text[from..to] == table,
            "docs/design.md's references table is out of date; regenerate with UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry"
        );
    }
}
