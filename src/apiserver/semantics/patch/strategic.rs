//! Strategic merge patch for built-in kinds, after `k8s.io/apimachinery/pkg/util/strategicpatch`:
//! maps merge, lists with a merge key merge item by item, lists of primitives with the merge
//! strategy form a union, other lists are replaced; the directives `$patch`, `$retainKeys`,
//! `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` are honoured.

use serde_json::{Map, Value};

use super::PatchError;
use crate::gofmt;
use std::collections::{HashMap, HashSet};

use crate::json::canonical_text;

// Error texts of k8s.io/apimachinery/pkg/util/mergepatch/errors.go.
const BAD_JSON_DOC: &str = "invalid JSON document";
const NO_LIST_OF_LISTS: &str = "lists of lists are not supported";
const BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const BAD_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";
const RETAIN_KEYS_MISMATCH: &str = "patch content doesn't match retainKeys list";

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Where a list's merge key comes from: the field path of the list (field names only, e.g.
/// `["spec", "containers", "env"]`).
pub trait MergeKeys {
    /// The list's merge key; `Some("")` for a list of primitives merged as a set (patch strategy
    /// `merge` without a key, like `metadata.finalizers`); `None` for a list that is replaced.
    fn merge_key(&self, path: &[&str]) -> Option<&str>;
}

/// Merge keys of the built-in kinds, from their Go struct tags (`patchStrategy:"merge"`,
/// `patchMergeKey`).
struct BuiltinMergeKeys {
    kind: String,
}

impl MergeKeys for BuiltinMergeKeys {
    fn merge_key(&self, path: &[&str]) -> Option<&str> {
        // ObjectMeta, on every kind.
        match path {
            ["metadata", "ownerReferences"] => return Some("uid"),
            ["metadata", "finalizers"] => return Some(""),
            _ => {}
        }
        match self.kind.as_str() {
            "ServiceAccount" => match path {
                ["secrets"] => Some("name"),
                _ => None,
            },
            "Namespace" | "Node" => match path {
                ["status", "conditions"] => Some("type"),
                _ => None,
            },
            // Pods and the workload kinds that embed a pod template.
            "Pod"
            | "PodTemplate"
            | "Deployment"
            | "StatefulSet"
            | "DaemonSet"
            | "ReplicaSet"
            | "ReplicationController"
            | "Job"
            | "CronJob" => match path {
                [.., "containers" | "initContainers" | "ephemeralContainers"] => Some("name"),
                [
                    ..,
                    "containers" | "initContainers" | "ephemeralContainers",
                    "env",
                ] => Some("name"),
                [
                    ..,
                    "containers" | "initContainers" | "ephemeralContainers",
                    "ports",
                ] => Some("containerPort"),
                [
                    ..,
                    "containers" | "initContainers" | "ephemeralContainers",
                    "volumeMounts",
                ] => Some("mountPath"),
                [.., "volumes"] | [.., "imagePullSecrets"] => Some("name"),
                ["status", "conditions"] => Some("type"),
                _ => None,
            },
            // Secret, ConfigMap, Event, Lease, CustomResourceDefinition: no merge lists beyond
            // ObjectMeta's.
            _ => None,
        }
    }
}

/// Merge keys of a built-in kind: ObjectMeta's lists for every kind (`ownerReferences` by
/// `uid`, `finalizers` as a set), ServiceAccount `secrets` by `name`, Namespace/Node status
/// conditions by `type`, and for Pods and pod-template kinds containers, env, volumes and
/// imagePullSecrets by `name`, ports by `containerPort`, volumeMounts by `mountPath`. Every
/// other list (including those of Secret, ConfigMap, Event, Lease and
/// CustomResourceDefinition) is replaced by a patch.
pub fn builtin_merge_keys(_group: &str, kind: &str) -> Box<dyn MergeKeys> {
    Box::new(BuiltinMergeKeys {
        kind: kind.to_string(),
    })
}

/// Applies a strategic merge patch; on error the target is unchanged.
pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    keys: &dyn MergeKeys,
) -> Result<(), PatchError> {
    let Value::Object(patch_map) = patch else {
        return Err(PatchError::Malformed(BAD_JSON_DOC.to_string()));
    };
    let original = match target {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let merged = merge_map(original, patch_map, &mut Vec::new(), keys)?;
    *target = Value::Object(merged.unwrap_or_default());
    Ok(())
}

fn malformed(message: &str) -> PatchError {
    PatchError::Malformed(message.to_string())
}

fn not_applicable(message: impl Into<String>) -> PatchError {
    PatchError::NotApplicable(message.into())
}

/// Merges a patch map into an original map; `None` when the patch deletes the map.
fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
    keys: &dyn MergeKeys,
) -> Result<Option<Map<String, Value>>, PatchError> {
    match patch.get(DIRECTIVE) {
        None => {}
        Some(Value::String(directive)) if directive == "merge" => {}
        Some(Value::String(directive)) if directive == "replace" => {
            let mut replaced = Map::new();
            for (key, value) in patch {
                if key != DIRECTIVE {
                    replaced.insert(key.clone(), strip_directives(value));
                }
            }
            return Ok(Some(replaced));
        }
        Some(Value::String(directive)) if directive == "delete" => return Ok(None),
        Some(other) => {
            return Err(not_applicable(format!(
                "unknown patch type: {} in map: {}",
                gofmt::plain(other),
                gofmt::plain(&Value::Object(patch.clone()))
            )));
        }
    }

    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let Some(retain) = retain.as_array().and_then(|items| {
            items
                .iter()
                .map(Value::as_str)
                .collect::<Option<Vec<&str>>>()
        }) else {
            return Err(malformed(BAD_RETAIN_KEYS));
        };
        let patch_fields = patch.keys().filter(|k| !k.starts_with('$'));
        if patch_fields.clone().any(|k| !retain.contains(&k.as_str())) {
            return Err(not_applicable(RETAIN_KEYS_MISMATCH));
        }
        original.retain(|key, _| retain.contains(&key.as_str()));
    }

    let mut orders: Vec<(String, Vec<Value>)> = Vec::new();
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Some(to_delete) = value.as_array() else {
                return Err(malformed(BAD_PRIMITIVE_LIST));
            };
            if let Some(Value::Array(items)) = original.get_mut(field) {
                let gone: HashSet<String> = to_delete.iter().map(canonical_text).collect();
                items.retain(|item| !gone.contains(&canonical_text(item)));
            }
        } else if let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) {
            let Some(order) = value.as_array() else {
                return Err(malformed(BAD_SET_ELEMENT_ORDER));
            };
            orders.push((field.to_string(), order.clone()));
        }
    }

    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        path.push(key.clone());
        let result = merge_value(original.remove(key), value, path, keys);
        path.pop();
        if let Some(merged) = result? {
            original.insert(key.clone(), merged);
        }
    }

    for (field, order) in orders {
        path.push(field.clone());
        let key = keys
            .merge_key(&path.iter().map(String::as_str).collect::<Vec<_>>())
            .map(str::to_string);
        path.pop();
        if let Some(Value::Array(items)) = original.get_mut(&field) {
            apply_order(items, &order, key.as_deref());
        }
    }
    Ok(Some(original))
}

/// The merged value of one field; `None` removes it.
fn merge_value(
    original: Option<Value>,
    patch: &Value,
    path: &mut Vec<String>,
    keys: &dyn MergeKeys,
) -> Result<Option<Value>, PatchError> {
    match (original, patch) {
        (_, Value::Null) => Ok(None),
        (Some(Value::Object(original)), Value::Object(patch)) => {
            Ok(merge_map(original, patch, path, keys)?.map(Value::Object))
        }
        (None | Some(_), Value::Object(patch)) => {
            Ok(merge_map(Map::new(), patch, path, keys)?.map(Value::Object))
        }
        (Some(Value::Array(original)), Value::Array(patch)) => {
            merge_list(original, patch, path, keys).map(|items| Some(Value::Array(items)))
        }
        (None | Some(_), Value::Array(patch)) => {
            merge_list(Vec::new(), patch, path, keys).map(|items| Some(Value::Array(items)))
        }
        (_, scalar) => Ok(Some(scalar.clone())),
    }
}

fn merge_list(
    original: Vec<Value>,
    patch: &[Value],
    path: &mut Vec<String>,
    keys: &dyn MergeKeys,
) -> Result<Vec<Value>, PatchError> {
    if patch.iter().any(Value::is_array) {
        return Err(not_applicable(NO_LIST_OF_LISTS));
    }
    let names: Vec<&str> = path.iter().map(String::as_str).collect();
    let Some(merge_key) = keys.merge_key(&names).map(str::to_string) else {
        // Lists without a patch strategy are replaced.
        return Ok(patch.iter().map(strip_directives).collect());
    };
    let replace = patch
        .iter()
        .any(|item| item.get(DIRECTIVE).and_then(Value::as_str) == Some("replace"));
    let items: Vec<&Value> = patch
        .iter()
        .filter(|item| item.get(DIRECTIVE).and_then(Value::as_str) != Some("replace"))
        .collect();
    let mut merged = if replace { Vec::new() } else { original };

    if merge_key.is_empty() {
        // A set of primitives: union, keeping the original order (hashed: lists can be long).
        let mut present: HashSet<String> = merged.iter().map(canonical_text).collect();
        for item in items {
            if item.is_object() {
                return Err(malformed(BAD_PRIMITIVE_LIST));
            }
            if present.insert(canonical_text(item)) {
                merged.push(item.clone());
            }
        }
        return Ok(merged);
    }

    // Slots indexed by merge-key value, so that each patch item finds its original in
    // constant time; deleted slots become `None`.
    let mut slots: Vec<Option<Value>> = merged.into_iter().map(Some).collect();
    let mut by_key: HashMap<String, Vec<usize>> = HashMap::new();
    for (index, slot) in slots.iter().enumerate() {
        if let Some(key_value) = slot.as_ref().and_then(|item| item.get(&merge_key)) {
            by_key
                .entry(canonical_text(key_value))
                .or_default()
                .push(index);
        }
    }
    for item in items {
        let Value::Object(fields) = item else {
            return Err(not_applicable(format!(
                "map: {} does not contain declared merge key: {merge_key}",
                gofmt::plain(item)
            )));
        };
        let Some(key_value) = fields.get(&merge_key) else {
            return Err(not_applicable(format!(
                "map: {} does not contain declared merge key: {merge_key}",
                gofmt::plain(item)
            )));
        };
        let key_text = canonical_text(key_value);
        let position = by_key
            .get(&key_text)
            .and_then(|indices| indices.iter().copied().find(|&i| slots[i].is_some()));
        let directive = fields.get(DIRECTIVE).and_then(Value::as_str);
        match (directive, position) {
            (Some("delete"), _) => {
                for index in by_key.remove(&key_text).unwrap_or_default() {
                    slots[index] = None;
                }
            }
            (_, Some(position)) => {
                let existing = match slots[position].take() {
                    Some(Value::Object(map)) => map,
                    _ => Map::new(),
                };
                slots[position] = merge_map(existing, fields, path, keys)?.map(Value::Object);
            }
            (_, None) => {
                if let Some(result) = merge_map(Map::new(), fields, path, keys)? {
                    by_key.entry(key_text).or_default().push(slots.len());
                    slots.push(Some(Value::Object(result)));
                }
            }
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// Orders a list by a `$setElementOrder` list: listed items first in that order, the others
/// after them in their current order.
fn apply_order(items: &mut [Value], order: &[Value], merge_key: Option<&str>) {
    let identity = |value: &Value| -> Option<String> {
        match merge_key {
            Some(key) if !key.is_empty() => value.get(key).map(canonical_text),
            _ => Some(canonical_text(value)),
        }
    };
    let mut ranks: HashMap<String, usize> = HashMap::new();
    for (rank, entry) in order.iter().enumerate() {
        if let Some(identity) = identity(entry) {
            ranks.entry(identity).or_insert(rank);
        }
    }
    items.sort_by_cached_key(|item| {
        identity(item)
            .and_then(|identity| ranks.get(&identity).copied())
            .unwrap_or(order.len())
    });
}

/// A patch value stored as-is (replaced lists, `$patch: replace` maps) loses its directives.
fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !key.starts_with('$'))
                .map(|(key, child)| (key.clone(), strip_directives(child)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(original: Value, patch: Value) -> Value {
        let mut target = original;
        strategic_merge_patch(&mut target, &patch, builtin_merge_keys("", "Pod").as_ref()).unwrap();
        target
    }

    // Cases modelled on k8s.io/apimachinery/pkg/util/strategicpatch/patch_test.go.
    #[test]
    fn maps_merge_and_null_deletes() {
        assert_eq!(
            patched(
                json!({"data": {"a": "1", "b": "2"}}),
                json!({"data": {"b": null, "c": "3"}})
            ),
            json!({"data": {"a": "1", "c": "3"}})
        );
    }

    #[test]
    fn patch_directive_replace_and_delete_on_maps() {
        assert_eq!(
            patched(
                json!({"data": {"a": "1"}, "x": 1}),
                json!({"data": {"$patch": "replace", "b": "2"}})
            ),
            json!({"data": {"b": "2"}, "x": 1})
        );
        assert_eq!(
            patched(
                json!({"data": {"a": "1"}, "x": 1}),
                json!({"data": {"$patch": "delete"}})
            ),
            json!({"x": 1})
        );
        let mut target = json!({});
        assert_eq!(
            strategic_merge_patch(
                &mut target,
                &json!({"data": {"$patch": "bogus"}}),
                builtin_merge_keys("", "Pod").as_ref()
            ),
            Err(PatchError::NotApplicable(
                "unknown patch type: bogus in map: map[$patch:bogus]".to_string()
            ))
        );
    }

    #[test]
    fn merge_key_lists_merge_items_and_delete_by_directive() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}
        ]}});
        let result = patched(
            pod.clone(),
            json!({"spec": {"containers": [
                {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "c:1"}
            ]}}),
        );
        assert_eq!(
            result,
            json!({"spec": {"containers": [
                {"name": "a", "image": "a:2", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
                {"name": "c", "image": "c:1"}
            ]}})
        );
        // {"$patch": "replace"} in a list replaces it.
        let replaced = patched(
            pod,
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z"}]}}),
        );
        assert_eq!(
            replaced,
            json!({"spec": {"containers": [{"name": "z", "image": "z"}]}})
        );
    }

    #[test]
    fn lists_without_a_strategy_are_replaced() {
        assert_eq!(
            patched(
                json!({"spec": {"args": ["a", "b"]}}),
                json!({"spec": {"args": ["c"]}})
            ),
            json!({"spec": {"args": ["c"]}})
        );
    }

    #[test]
    fn primitive_lists_union_and_delete_from_primitive_list() {
        let original = json!({"metadata": {"finalizers": ["a", "b"]}});
        assert_eq!(
            patched(
                original.clone(),
                json!({"metadata": {"finalizers": ["b", "c"]}})
            ),
            json!({"metadata": {"finalizers": ["a", "b", "c"]}})
        );
        assert_eq!(
            patched(
                original,
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
            ),
            json!({"metadata": {"finalizers": ["b"]}})
        );
    }

    #[test]
    fn retain_keys_drops_unlisted_fields() {
        assert_eq!(
            patched(
                json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
                json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}})
            ),
            json!({"spec": {"strategy": {"type": "Recreate"}}})
        );
        let mut target = json!({});
        assert_eq!(
            strategic_merge_patch(
                &mut target,
                &json!({"s": {"$retainKeys": ["a"], "b": 1}}),
                builtin_merge_keys("", "Pod").as_ref()
            ),
            Err(PatchError::NotApplicable(RETAIN_KEYS_MISMATCH.to_string()))
        );
        assert_eq!(
            strategic_merge_patch(
                &mut target,
                &json!({"s": {"$retainKeys": "a"}}),
                builtin_merge_keys("", "Pod").as_ref()
            ),
            Err(PatchError::Malformed(BAD_RETAIN_KEYS.to_string()))
        );
    }

    #[test]
    fn set_element_order_reorders() {
        let original = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}, "metadata": {"finalizers": ["x", "y"]}});
        let result = patched(
            original,
            json!({
                "spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "b", "image": "i"}]},
                "metadata": {"$setElementOrder/finalizers": ["y", "x"]}
            }),
        );
        assert_eq!(
            result,
            json!({"spec": {"containers": [{"name": "b", "image": "i"}, {"name": "a"}]}, "metadata": {"finalizers": ["y", "x"]}})
        );
    }

    #[test]
    fn merge_keys_depend_on_the_kind() {
        let service_account = builtin_merge_keys("", "ServiceAccount");
        assert_eq!(service_account.merge_key(&["secrets"]), Some("name"));
        assert_eq!(service_account.merge_key(&["imagePullSecrets"]), None);
        let crd = builtin_merge_keys("apiextensions.k8s.io", "CustomResourceDefinition");
        assert_eq!(crd.merge_key(&["status", "conditions"]), None);
        assert_eq!(crd.merge_key(&["metadata", "finalizers"]), Some(""));
        let deployment = builtin_merge_keys("apps", "Deployment");
        assert_eq!(
            deployment.merge_key(&["spec", "template", "spec", "containers", "env"]),
            Some("name")
        );
        let namespace = builtin_merge_keys("", "Namespace");
        assert_eq!(namespace.merge_key(&["status", "conditions"]), Some("type"));
        assert_eq!(namespace.merge_key(&["spec", "finalizers"]), None);
    }

    #[test]
    fn long_lists_merge_in_linear_time() {
        crate::growth::assert_grows_linearly("merging long lists", 5_000, |n| {
            let original: Vec<Value> = (0..n)
                .map(|i| json!({"name": format!("c{i}"), "image": "a"}))
                .collect();
            let patch: Vec<Value> = (0..n)
                .rev()
                .map(|i| json!({"name": format!("c{i}"), "image": "b"}))
                .collect();
            let order: Vec<Value> = (0..n)
                .rev()
                .map(|i| json!({"name": format!("c{i}")}))
                .collect();
            let finalizers: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
            let result = patched(
                json!({"spec": {"containers": original}, "metadata": {"finalizers": finalizers.clone()}}),
                json!({"spec": {"containers": patch, "$setElementOrder/containers": order},
                       "metadata": {"finalizers": finalizers, "$deleteFromPrimitiveList/finalizers": ["f1"]}}),
            );
            assert_eq!(
                result["spec"]["containers"][0],
                json!({"name": format!("c{}", n - 1), "image": "b"})
            );
            assert_eq!(
                result["metadata"]["finalizers"].as_array().map(Vec::len),
                Some(n)
            );
        });
    }

    #[test]
    fn owner_references_merge_by_uid() {
        let result = patched(
            json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}}),
            json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}, {"uid": "1", "name": "a2"}]}}),
        );
        assert_eq!(
            result,
            json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a2"}, {"uid": "2", "name": "b"}]}})
        );
    }

    #[test]
    fn bad_patches_are_errors_and_leave_the_target() {
        let original = json!({"spec": {"containers": [{"name": "a"}]}});
        for (patch, expected) in [
            (json!([1]), PatchError::Malformed(BAD_JSON_DOC.into())),
            (
                json!({"spec": {"containers": [[1]]}}),
                PatchError::NotApplicable(NO_LIST_OF_LISTS.into()),
            ),
            (
                json!({"spec": {"containers": [{"image": "x"}]}}),
                PatchError::NotApplicable(
                    "map: map[image:x] does not contain declared merge key: name".into(),
                ),
            ),
            (
                json!({"spec": {"$setElementOrder/containers": "x"}}),
                PatchError::Malformed(BAD_SET_ELEMENT_ORDER.into()),
            ),
            (
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "x"}}),
                PatchError::Malformed(BAD_PRIMITIVE_LIST.into()),
            ),
        ] {
            let mut target = original.clone();
            assert_eq!(
                strategic_merge_patch(&mut target, &patch, builtin_merge_keys("", "Pod").as_ref()),
                Err(expected),
                "{patch}"
            );
            assert_eq!(target, original);
        }
    }
}
