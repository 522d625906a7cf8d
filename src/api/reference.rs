//! The field reference in `docs/crd-reference.md`, generated from the CRD schemas so it cannot
//! drift from what the API server enforces.

use crate::{KindReference, MANAGED_ON_CHANGE, OnChange};
use serde_json::Value;
use std::fmt::Write;

/// Markdown reference of every field of every kind.
pub fn markdown(kinds: &[KindReference]) -> String {
    let mut out = String::from(
        "# CRD field reference\n\nGenerated from the CustomResourceDefinitions (`gpucloud-operator crds`) \
         and each kind's `ON_CHANGE` table; regenerate with `UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry`.\n\
         Every kind is in API group `gpucloud.io`, version `v1alpha1`; each says its scope and category.\n\n\
         The `on change` column says what a change of a spec field after creation does: *applied* \
         (the operator makes the cloud match, and the object is `Ready` for the new generation \
         only once it does), *immutable* (refused at admission: delete and recreate the object), \
         *re-checked* (a limit the cloud resource is checked against again; the resource is not \
         changed) or *operator only* (read by the operator when it acts; no cloud call). A nested \
         field follows its top-level field.\n",
    );
    for kind in kinds {
        let crd = &kind.crd;
        let names = &crd.spec.names;
        let _ = write!(out, "\n## {}\n\n", names.kind);
        let short = names.short_names.clone().unwrap_or_default().join(", ");
        let categories = names.categories.clone().unwrap_or_default().join(", ");
        let _ = writeln!(
            out,
            "Plural `{}`, short name `{short}`, {} scope, category `{categories}`.\n",
            names.plural,
            crd.spec.scope.to_lowercase()
        );
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
        let on_change = |field: &str| {
            on_change_of(kind, field).map_or_else(|| "undeclared".to_string(), OnChange::describe)
        };
        for part in ["spec", "status"] {
            let _ = writeln!(out, "### `{part}`\n");
            let table = Table {
                on_change: (part == "spec").then_some(&on_change as &dyn Fn(&str) -> String),
            };
            table.header(&mut out);
            if let Some(node) = schema.pointer(&format!("/properties/{part}")) {
                table.rule_rows(&mut out, part, node);
                table.field_rows(&mut out, part, node, 0);
            }
            out.push('\n');
        }
    }
    out
}

/// How a change of the top-level spec field `field` of `kind` is carried out, if declared.
pub fn on_change_of(kind: &KindReference, field: &str) -> Option<OnChange> {
    kind.on_change
        .iter()
        .chain(MANAGED_ON_CHANGE)
        .find(|(name, _)| *name == field)
        .map(|(_, on_change)| *on_change)
}

/// The top-level spec fields of a kind's schema.
pub fn spec_fields(kind: &KindReference) -> Vec<String> {
    let schema = kind
        .crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| s.properties.as_ref())
        .and_then(|p| p.get("spec"))
        .and_then(|spec| spec.properties.as_ref());
    schema
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// One table of the reference; the spec's has an `on change` column.
struct Table<'a> {
    on_change: Option<&'a dyn Fn(&str) -> String>,
}

impl Table<'_> {
    fn header(&self, out: &mut String) {
        out.push_str(match self.on_change {
            Some(_) => "| field | type | default | on change | description and rules |\n|---|---|---|---|---|\n",
            None => "| field | type | default | description and rules |\n|---|---|---|---|\n",
        });
    }

    /// A row; `on_change` is the top-level field's name when the row is one.
    fn row(&self, out: &mut String, cells: [&str; 3], top_level: Option<&str>, notes: &str) {
        let [field, kind, default] = cells;
        match self.on_change {
            Some(describe) => {
                let change = top_level.map(describe).unwrap_or_default();
                let _ = writeln!(out, "| {field} | {kind} | {default} | {change} | {notes} |");
            }
            None => {
                let _ = writeln!(out, "| {field} | {kind} | {default} | {notes} |");
            }
        }
    }

    fn field_rows(&self, out: &mut String, path: &str, node: &Value, depth: usize) {
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
            let top_level = (depth == 0).then_some(name.as_str());
            self.row(
                out,
                [&format!("`{field}`"), &kind, &default],
                top_level,
                &notes,
            );
            self.rule_rows(out, &field, child);
            if child.get("properties").is_some() {
                self.field_rows(out, &field, child, depth + 1);
            }
            if let Some(items) = child.get("items").filter(|i| i.get("properties").is_some()) {
                self.rule_rows(out, &format!("{field}[]"), items);
                self.field_rows(out, &format!("{field}[]"), items, depth + 1);
            }
        }
    }

    /// CEL rules declared on a node, as rows naming what they enforce.
    fn rule_rows(&self, out: &mut String, path: &str, node: &Value) {
        for rule in node
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let message = rule.get("message").and_then(Value::as_str).unwrap_or("");
            let expression = rule.get("rule").and_then(Value::as_str).unwrap_or("");
            let notes = format!(
                "{} (`{}`)",
                one_line(message),
                expression.replace('|', "\\|")
            );
            self.row(out, [&format!("`{path}`"), "rule", ""], None, &notes);
        }
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
