//! Defaulting and pruning, after apiextensions `pkg/apiserver/schema/defaulting` and
//! `pkg/apiserver/schema/pruning`.

use serde_json::Value;

use super::Node;

/// `structuraldefaulting.Default`: a missing property, or a `null` one that is not nullable, gets
/// the property's default; then defaulting descends into every value, including new ones.
pub(crate) fn apply_defaults(node: &Node, value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, property) in &node.properties {
                let Some(default) = &property.default else {
                    continue;
                };
                let needs_default = match map.get(key) {
                    None => true,
                    Some(existing) => existing.is_null() && !property.nullable,
                };
                if needs_default {
                    map.insert(key.clone(), default.clone());
                }
            }
            for (key, child) in map.iter_mut() {
                if let Some(property) = node.property(key) {
                    apply_defaults(property, child);
                }
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = node.items.as_deref() else {
                return;
            };
            for item in items.iter_mut() {
                if item.is_null()
                    && !item_schema.nullable
                    && let Some(default) = &item_schema.default
                {
                    *item = default.clone();
                }
                apply_defaults(item_schema, item);
            }
        }
        _ => {}
    }
}

/// `structuralpruning.Prune`: removes fields not in the schema unless
/// `x-kubernetes-preserve-unknown-fields`; at the root and in embedded resources `apiVersion`,
/// `kind` and `metadata` are kept. Pruned paths are recorded as `spec.foo`, `spec.list[0].bar`.
pub(crate) fn prune(
    node: &Node,
    value: &mut Value,
    path: &str,
    is_resource_root: bool,
    pruned: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<String> = map.keys().cloned().collect();
            keys.sort();
            for key in keys {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                if is_resource_root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    // Metadata is coerced, not pruned; apiVersion and kind are type meta.
                    if let Some(property) = node.properties.get(&key)
                        && key != "metadata"
                        && let Some(child) = map.get_mut(&key)
                    {
                        prune(property, child, &child_path, false, pruned);
                    }
                    continue;
                }
                match node.property(&key) {
                    Some(property) => {
                        if let Some(child) = map.get_mut(&key) {
                            prune(
                                property,
                                child,
                                &child_path,
                                property.embedded_resource,
                                pruned,
                            );
                        }
                    }
                    None if node.preserve_unknown_fields => {}
                    None => {
                        map.remove(&key);
                        pruned.push(child_path);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = node.items.as_deref() {
                for (index, item) in items.iter_mut().enumerate() {
                    let item_path = format!("{path}[{index}]");
                    prune(
                        item_schema,
                        item,
                        &item_path,
                        item_schema.embedded_resource,
                        pruned,
                    );
                }
            }
        }
        _ => {}
    }
}

/// Whether [`prune`] would remove anything from `value`: the same walk, read only and without
/// building paths, so the common object that has nothing unknown costs no allocations.
pub(crate) fn needs_prune(node: &Node, value: &Value, is_resource_root: bool) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(key, child)| {
            if is_resource_root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                return key != "metadata"
                    && node
                        .properties
                        .get(key)
                        .is_some_and(|property| needs_prune(property, child, false));
            }
            match node.property(key) {
                Some(property) => needs_prune(property, child, property.embedded_resource),
                None => !node.preserve_unknown_fields,
            }
        }),
        Value::Array(items) => node.items.as_deref().is_some_and(|item_schema| {
            items
                .iter()
                .any(|item| needs_prune(item_schema, item, item_schema.embedded_resource))
        }),
        _ => false,
    }
}

/// `structuraldefaulting.PruneNonNullableNullsWithoutDefaults`: drops `null` values of
/// properties that are neither nullable nor defaulted.
pub(crate) fn prune_non_nullable_nulls(node: Option<&Node>, value: &mut Value) {
    // Without a schema nothing at or below this value is dropped.
    let Some(node) = node else {
        return;
    };
    match value {
        Value::Object(map) => {
            map.retain(|key, child| {
                !(child.is_null()
                    && node
                        .property(key)
                        .is_some_and(|s| !s.nullable && s.default.is_none()))
            });
            for (key, child) in map.iter_mut() {
                prune_non_nullable_nulls(node.property(key), child);
            }
        }
        Value::Array(items) => {
            for item in items {
                prune_non_nullable_nulls(node.items.as_deref(), item);
            }
        }
        _ => {}
    }
}
