//! The CEL declaration of a schema node (`apiserver/pkg/cel/common/schemas.go`,
//! `apiserver/pkg/cel/types.go`): its type and the most elements each string, list and map can
//! hold, from the schema's bounds or else from the request size limit.

use std::collections::BTreeMap;

use serde_json::Value;

use super::super::Node;
use super::estimate::*;

/// The CEL declaration of a schema node: its kind, the most elements (characters, items or
/// properties) a value may have, and the fewest bytes it serializes to.
#[derive(Debug)]
pub(crate) struct Decl {
    pub(super) kind: DeclKind,
    pub(super) max_elements: i64,
    pub(super) min_serialized_size: i64,
    /// A string, list or map whose bound is the request-size fallback: the schema declares no
    /// `maxLength`, `maxItems`, `maxProperties` or enum for it.
    pub(super) unbounded: bool,
}

#[derive(Debug)]
pub(super) enum DeclKind {
    Bool,
    Int,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    /// `x-kubernetes-int-or-string`.
    Dyn,
    List(Box<Decl>),
    Map(Box<Decl>, Box<Decl>),
    Object(BTreeMap<String, Decl>),
}

impl Decl {
    pub(super) fn simple(kind: DeclKind, min_serialized_size: i64) -> Decl {
        Decl {
            kind,
            max_elements: 0,
            min_serialized_size,
            unbounded: false,
        }
    }

    /// `SchemaDeclType`: `None` where the schema is not exposed to rules.
    pub(crate) fn of(node: &Node, resource_root: bool) -> Option<Decl> {
        if node.int_or_string {
            let mut dyn_decl = Decl::simple(DeclKind::Dyn, 1);
            dyn_decl.max_elements = match node.max_length {
                Some(max_length) => max_length.max(0).saturating_mul(4),
                None => MAX_REQUEST_SIZE_BYTES - 2,
            };
            dyn_decl.unbounded = node.max_length.is_none();
            return Some(dyn_decl);
        }
        match node.type_name.as_deref()? {
            "array" => {
                let items = node.items.as_deref()?;
                let item = Decl::of(items, items.embedded_resource)?;
                let max_items = match node.max_items {
                    Some(max_items) => max_items.max(0),
                    None => (MAX_REQUEST_SIZE_BYTES - 2) / (item.min_serialized_size + 1),
                };
                Some(Decl {
                    kind: DeclKind::List(Box::new(item)),
                    max_elements: max_items,
                    min_serialized_size: 2,
                    unbounded: node.max_items.is_none(),
                })
            }
            "object" => {
                if let Some(values) = node.additional_properties.as_deref() {
                    let value = Decl::of(values, values.embedded_resource)?;
                    let max_properties = match node.max_properties {
                        Some(max_properties) => max_properties.max(0),
                        None => (MAX_REQUEST_SIZE_BYTES - 2) / (value.min_serialized_size + 6),
                    };
                    let key = Decl::simple(DeclKind::String, MIN_STRING_SIZE);
                    return Some(Decl {
                        kind: DeclKind::Map(Box::new(key), Box::new(value)),
                        max_elements: max_properties,
                        min_serialized_size: 2,
                        unbounded: node.max_properties.is_none(),
                    });
                }
                let mut fields = BTreeMap::new();
                let mut min_serialized_size = 2;
                for (name, property) in &node.properties {
                    let Some(field) = Decl::of(property, property.embedded_resource) else {
                        continue;
                    };
                    if node.required.contains(name) && property.default.is_none() {
                        min_serialized_size += i64::try_from(name.len()).unwrap_or(i64::MAX / 4)
                            + field.min_serialized_size
                            + 4;
                    }
                    if let Some(escaped) = escape(name) {
                        fields.insert(escaped, field);
                    }
                }
                if resource_root {
                    with_type_and_object_meta(&mut fields, node);
                }
                Some(Decl {
                    kind: DeclKind::Object(fields),
                    max_elements: 0,
                    min_serialized_size,
                    unbounded: false,
                })
            }
            "string" => Some(string_decl(node)),
            "boolean" => Some(Decl::simple(DeclKind::Bool, MIN_BOOL_SIZE)),
            "number" => Some(Decl::simple(DeclKind::Double, MIN_NUMBER_SIZE)),
            "integer" => Some(Decl::simple(DeclKind::Int, MIN_NUMBER_SIZE)),
            _ => None,
        }
    }
}

pub(super) fn string_decl(node: &Node) -> Decl {
    let per_request = |node: &Node| match node.format.as_deref() {
        Some("duration") => MAX_DURATION_SIZE_JSON,
        Some("date") => JSON_DATE_SIZE,
        Some("date-time") => MAX_DATETIME_SIZE_JSON,
        _ => MAX_REQUEST_SIZE_BYTES - 2,
    };
    let (kind, min_size) = match node.format.as_deref() {
        Some("byte") => (DeclKind::Bytes, MIN_STRING_SIZE),
        Some("duration") => (DeclKind::Duration, MIN_DURATION_SIZE_JSON),
        Some("date") => (DeclKind::Timestamp, JSON_DATE_SIZE),
        Some("date-time") => (DeclKind::Timestamp, MIN_DATETIME_SIZE_JSON),
        _ => (DeclKind::String, MIN_STRING_SIZE),
    };
    let max_elements = match kind {
        DeclKind::Bytes => node
            .max_length
            .map_or_else(|| per_request(node), |max_length| max_length.max(0)),
        DeclKind::Duration | DeclKind::Timestamp => per_request(node),
        _ => match (node.max_length, &node.enum_values) {
            (Some(max_length), _) => max_length.max(0).saturating_mul(4),
            (None, Some(values)) if !values.is_empty() => values
                .iter()
                .filter_map(Value::as_str)
                .map(|value| i64::try_from(value.len()).unwrap_or(i64::MAX))
                .max()
                .unwrap_or(0),
            (None, _) => per_request(node),
        },
    };
    let unbounded = matches!(kind, DeclKind::String | DeclKind::Bytes)
        && node.max_length.is_none()
        && node.enum_values.as_ref().is_none_or(Vec::is_empty);
    Decl {
        kind,
        max_elements,
        min_serialized_size: min_size,
        unbounded,
    }
}

/// `WithTypeAndObjectMeta`: at a resource's root, rules always see `apiVersion`, `kind` and
/// `metadata.name`/`generateName` (unbounded strings), whatever the schema declares there.
pub(super) fn with_type_and_object_meta(fields: &mut BTreeMap<String, Decl>, node: &Node) {
    let is_string =
        |node: Option<&Node>| node.and_then(|n| n.type_name.as_deref()) == Some("string");
    let metadata = node.properties.get("metadata");
    let complete = is_string(node.properties.get("kind"))
        && is_string(node.properties.get("apiVersion"))
        && metadata.and_then(|m| m.type_name.as_deref()) == Some("object")
        && is_string(metadata.and_then(|m| m.properties.get("name")))
        && is_string(metadata.and_then(|m| m.properties.get("generateName")));
    if complete {
        return;
    }
    // Unbounded for the estimate, but not the schema's to bound: the apiserver validates them.
    let unbounded_string = || Decl {
        kind: DeclKind::String,
        max_elements: MAX_REQUEST_SIZE_BYTES - 2,
        min_serialized_size: MIN_STRING_SIZE,
        unbounded: false,
    };
    fields.insert("kind".to_string(), unbounded_string());
    fields.insert("apiVersion".to_string(), unbounded_string());
    let meta: BTreeMap<String, Decl> = [
        ("name".to_string(), unbounded_string()),
        ("generateName".to_string(), unbounded_string()),
    ]
    .into_iter()
    .collect();
    fields.insert(
        "metadata".to_string(),
        Decl {
            kind: DeclKind::Object(meta),
            max_elements: 0,
            min_serialized_size: 2,
            unbounded: false,
        },
    );
}

/// CEL's reserved words (`celReservedSymbols`), which a property name is escaped from
/// (`__name__`).
pub(crate) const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// `cel.Escape`: the name a property has in rules, or `None` when it cannot be named.
pub(super) fn escape(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.contains("__")
    {
        return Some(name.to_string());
    }
    let mut escaped = String::new();
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            escaped.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => escaped.push_str("__dot__"),
            '-' => escaped.push_str("__dash__"),
            '/' => escaped.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => escaped.push(c),
            _ => return None,
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(escaped)
}

/// The size a value has where `path` leads (`@items`/`@values`/`@keys`: the largest over the
/// elements), as the estimate counts it: characters of a string, items of a list, entries of a
/// map; objects and scalars count 0, as their declared bound does.
pub(super) fn actual_size(decl: &Decl, value: &Value, path: &[String]) -> u64 {
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let Some((first, rest)) = path.split_first() else {
        return match (&decl.kind, value) {
            (DeclKind::String | DeclKind::Bytes | DeclKind::Dyn, Value::String(text)) => {
                count(text.chars().count())
            }
            (DeclKind::List(_), Value::Array(items)) => count(items.len()),
            (DeclKind::Map(..), Value::Object(entries)) => count(entries.len()),
            _ => 0,
        };
    };
    match (first.as_str(), &decl.kind, value) {
        ("@items" | "@values", DeclKind::List(item), Value::Array(items)) => items
            .iter()
            .map(|element| actual_size(item, element, rest))
            .max()
            .unwrap_or(0),
        ("@items" | "@values", DeclKind::Map(_, entry), Value::Object(entries)) => entries
            .values()
            .map(|element| actual_size(entry, element, rest))
            .max()
            .unwrap_or(0),
        ("@keys", DeclKind::Map(..), Value::Object(entries)) if rest.is_empty() => entries
            .keys()
            .map(|key| count(key.chars().count()))
            .max()
            .unwrap_or(0),
        (field, DeclKind::Object(fields), Value::Object(entries)) => {
            match (fields.get(field), entries.get(field)) {
                (Some(field_decl), Some(field_value)) => actual_size(field_decl, field_value, rest),
                _ => 0,
            }
        }
        _ => 0,
    }
}
