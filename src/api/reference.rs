//! The field reference in `docs/crd-reference.md`, generated from the CRD schemas so it cannot
//! drift from what the API server enforces.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;
use std::fmt::Write;

/// Markdown reference of every field of every kind.
pub fn markdown(crds: &[CustomResourceDefinition]) -> String {
    let mut out = String::from(
        "# CRD field reference\n\nGenerated from the CustomResourceDefinitions (`gpucloud-operator crds`); \
         regenerate with `UPDATE_GENERATED=1 cargo test -p gpucloud-api --test crds`.\n\
         Every kind is namespaced, in API group `gpucloud.io`, version `v1alpha1`, category `gpucloud`.\n",
    );
    for crd in crds {
        let names = &crd.spec.names;
        let _ = write!(out, "\n## {}\n\n", names.kind);
        let short = names.short_names.clone().unwrap_or_default().join(", ");
        let _ = writeln!(out, "Plural `{}`, short name `{short}`.\n", names.plural);
        let Some(schema) = crd
            .spec
            .versions
            .first()
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
        else {
            continue;
        };
        let Ok(schema) = serde_json::to_value(schema) else {
            continue;
        };
        for part in ["spec", "status"] {
            let _ = writeln!(out, "### `{part}`\n");
            out.push_str("| field | type | default | description and rules |\n|---|---|---|---|\n");
            if let Some(node) = schema.pointer(&format!("/properties/{part}")) {
                rule_rows(&mut out, part, node);
                field_rows(&mut out, part, node);
            }
            out.push('\n');
        }
    }
    out
}

fn field_rows(out: &mut String, path: &str, node: &Value) {
    let Some(properties) = node.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = node
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for (name, child) in properties {
        let field = format!("{path}.{name}");
        let mut kind = type_name(child);
        if required.contains(&name.as_str()) {
            kind.push_str(", required");
        }
        let default = child
            .get("default")
            .map(|d| format!("`{d}`"))
            .unwrap_or_default();
        let mut notes = one_line(
            child
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or(""),
        );
        for constraint in constraints(child) {
            if !notes.is_empty() {
                notes.push(' ');
            }
            notes.push_str(&constraint);
        }
        let _ = writeln!(out, "| `{field}` | {kind} | {default} | {notes} |");
        rule_rows(out, &field, child);
        if child.get("properties").is_some() {
            field_rows(out, &field, child);
        }
        if let Some(items) = child.get("items").filter(|i| i.get("properties").is_some()) {
            rule_rows(out, &format!("{field}[]"), items);
            field_rows(out, &format!("{field}[]"), items);
        }
    }
}

/// CEL rules declared on a node, as rows naming what they enforce.
fn rule_rows(out: &mut String, path: &str, node: &Value) {
    for rule in node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let message = rule.get("message").and_then(Value::as_str).unwrap_or("");
        let expression = rule.get("rule").and_then(Value::as_str).unwrap_or("");
        let _ = writeln!(
            out,
            "| `{path}` | rule | | {} (`{}`) |",
            one_line(message),
            expression.replace('|', "\\|")
        );
    }
}

fn type_name(node: &Value) -> String {
    let base = node.get("type").and_then(Value::as_str).unwrap_or("object");
    match base {
        "array" => {
            let item = node
                .get("items")
                .map(type_name)
                .unwrap_or_else(|| "any".into());
            format!("array of {item}")
        }
        "string" => match node.get("enum").and_then(Value::as_array) {
            Some(values) => values
                .iter()
                .filter_map(Value::as_str)
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(" \\| "),
            None => "string".into(),
        },
        other => other.to_string(),
    }
}

fn constraints(node: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let number = |key: &str| node.get(key).and_then(Value::as_f64);
    match (number("minimum"), number("maximum")) {
        (Some(min), Some(max)) => out.push(format!("Between {min} and {max}.")),
        (Some(min), None) => out.push(format!("At least {min}.")),
        (None, Some(max)) => out.push(format!("At most {max}.")),
        (None, None) => {}
    }
    match (number("minLength"), number("maxLength")) {
        (Some(min), Some(max)) => out.push(format!("{min} to {max} characters.")),
        (None, Some(max)) => out.push(format!("At most {max} characters.")),
        _ => {}
    }
    if let Some(max) = number("maxItems") {
        out.push(format!("At most {max} items."));
    }
    if let Some(pattern) = node.get("pattern").and_then(Value::as_str) {
        out.push(format!("Matches `{pattern}`."));
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}
