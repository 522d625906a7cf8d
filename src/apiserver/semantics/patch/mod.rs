//! The apiserver's patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902, with the
//! behaviour and messages of `github.com/evanphx/json-patch` that the apiserver uses) and
//! strategic merge patch for built-in kinds.

use serde_json::{Map, Value};

use crate::json::{self, InArrays, json_equal};

mod strategic;

pub use strategic::{MergeKeys, builtin_merge_keys, strategic_merge_patch};

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PatchError {
    /// The patch document itself is malformed; the apiserver answers 400 Bad Request.
    #[error("{0}")]
    Malformed(String),
    /// The patch is well-formed but does not apply to the object; the apiserver answers 422.
    #[error("{0}")]
    NotApplicable(String),
}

// === merge patch ===

/// RFC 7386 JSON merge patch: objects merge key by key, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return;
    };
    for (key, value) in patch_map {
        if value.is_null() {
            target_map.remove(key);
        } else {
            let slot = target_map.entry(key.clone()).or_insert(Value::Null);
            merge_patch(slot, value);
        }
    }
}

/// The merge patch that turns `original` into `modified` (`jsonpatch.CreateMergePatch`).
/// `null`s inside `modified` cannot be expressed and are dropped, as RFC 7386 requires.
pub fn create_merge_patch(original: &Value, modified: &Value) -> Value {
    match (original, modified) {
        (Value::Object(before), Value::Object(after)) => {
            let mut patch = Map::new();
            for key in before.keys() {
                if !after.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            for (key, value) in after {
                match before.get(key) {
                    Some(old) if json_equal(old, value) => {}
                    Some(old) if old.is_object() && value.is_object() => {
                        patch.insert(key.clone(), create_merge_patch(old, value));
                    }
                    _ => {
                        patch.insert(key.clone(), strip_nulls(value));
                    }
                }
            }
            Value::Object(patch)
        }
        _ => strip_nulls(modified),
    }
}

fn strip_nulls(value: &Value) -> Value {
    json::strip_nulls(value, InArrays::Kept)
}

// === JSON patch ===

/// RFC 6902 JSON patch (add, remove, replace, move, copy, test), atomic: on error the target is
/// unchanged. Like the apiserver's implementation, the root (`""`) cannot be a target, negative
/// array indices count from the end, and error texts follow `evanphx/json-patch`.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Value::Array(operations) = patch else {
        return Err(PatchError::Malformed(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch".to_string(),
        ));
    };
    let mut document = target.clone();
    for operation in operations {
        apply_operation(&mut document, operation)?;
    }
    *target = document;
    Ok(())
}

const MISSING: &str = "missing value";
const INVALID_INDEX: &str = "invalid index referenced";

fn not_applicable(message: String) -> PatchError {
    PatchError::NotApplicable(message)
}

fn apply_operation(document: &mut Value, operation: &Value) -> Result<(), PatchError> {
    let Value::Object(fields) = operation else {
        return Err(PatchError::Malformed(
            "json: cannot unmarshal into Go value of type jsonpatch.Operation".to_string(),
        ));
    };
    let kind = fields
        .get("op")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let path = fields.get("path").and_then(Value::as_str);
    let from = fields.get("from").and_then(Value::as_str);
    let value = fields.get("value");
    let require_path = |operation: &str| {
        path.ok_or_else(|| {
            not_applicable(format!(
                "{operation} operation failed to decode path: {MISSING}"
            ))
        })
    };
    let require_value = |operation: &str| {
        value.ok_or_else(|| {
            not_applicable(format!(
                "{operation} operation failed to decode value: {MISSING}"
            ))
        })
    };
    match kind {
        "add" => {
            let path = require_path("add")?;
            let value = require_value("add")?.clone();
            let (parent, key) = find_parent(document, path).ok_or_else(|| {
                not_applicable(format!(
                    "add operation does not apply: doc is missing path: \"{path}\": {MISSING}"
                ))
            })?;
            add(parent, &key, value).map_err(|cause| {
                not_applicable(format!("error in add for path: '{path}': {cause}"))
            })
        }
        "remove" => {
            let path = require_path("remove")?;
            let (parent, key) = find_parent(document, path).ok_or_else(|| {
                not_applicable(format!(
                    "remove operation does not apply: doc is missing path: \"{path}\": {MISSING}"
                ))
            })?;
            remove(parent, &key).map(|_| ()).map_err(|cause| {
                not_applicable(format!("error in remove for path: '{path}': {cause}"))
            })
        }
        "replace" => {
            let path = require_path("replace")?;
            let value = require_value("replace")?.clone();
            let (parent, key) = find_parent(document, path).ok_or_else(|| {
                not_applicable(format!(
                    "replace operation does not apply: doc is missing path: {path}: {MISSING}"
                ))
            })?;
            let slot = get_mut(parent, &key).map_err(|_| {
                not_applicable(format!(
                    "replace operation does not apply: doc is missing key: {path}: {MISSING}"
                ))
            })?;
            *slot = value;
            Ok(())
        }
        "move" => {
            let from = from.ok_or_else(|| {
                not_applicable(format!("move operation failed to decode from: {MISSING}"))
            })?;
            let (parent, key) = find_parent(document, from).ok_or_else(|| {
                not_applicable(format!(
                    "move operation does not apply: doc is missing from path: {from}: {MISSING}"
                ))
            })?;
            let in_move =
                |cause: String| not_applicable(format!("error in move for path: '{key}': {cause}"));
            get_mut(parent, &key).map_err(in_move)?;
            let moved = remove(parent, &key).map_err(in_move)?;
            let path = require_path("move")?;
            let (parent, key) = find_parent(document, path).ok_or_else(|| {
                not_applicable(format!("move operation does not apply: doc is missing destination path: {path}: {MISSING}"))
            })?;
            add(parent, &key, moved).map_err(|cause| {
                not_applicable(format!("error in move for path: '{path}': {cause}"))
            })
        }
        "copy" => {
            let from = from.ok_or_else(|| {
                not_applicable(format!("copy operation failed to decode from: {MISSING}"))
            })?;
            let (parent, key) = find_parent(document, from).ok_or_else(|| {
                not_applicable(format!(
                    "copy operation does not apply: doc is missing from path: {from}: {MISSING}"
                ))
            })?;
            let copied = get_mut(parent, &key)
                .map_err(|cause| {
                    not_applicable(format!("error in copy for from: '{from}': {cause}"))
                })?
                .clone();
            let path = require_path("copy")?;
            let (parent, key) = find_parent(document, path).ok_or_else(|| {
                not_applicable(format!("copy operation does not apply: doc is missing destination path: {path}: {MISSING}"))
            })?;
            add(parent, &key, copied).map_err(|cause| {
                not_applicable(format!("error while adding value during copy: {cause}"))
            })
        }
        "test" => {
            let path = require_path("test")?;
            let (parent, key) = find_parent(document, path).ok_or_else(|| {
                not_applicable(format!(
                    "test operation does not apply: is missing path: {path}: {MISSING}"
                ))
            })?;
            let expected = value.cloned().unwrap_or(Value::Null);
            let actual = match get_mut(parent, &key) {
                Ok(actual) => actual.clone(),
                Err(_) if expected.is_null() => return Ok(()),
                Err(_) => {
                    return Err(not_applicable(format!(
                        "testing value {path} failed: test failed"
                    )));
                }
            };
            if json_equal(&actual, &expected) {
                Ok(())
            } else {
                Err(not_applicable(format!(
                    "testing value {path} failed: test failed"
                )))
            }
        }
        other => Err(not_applicable(format!("Unexpected kind: {other}"))),
    }
}

fn decode_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// The container holding the last token of `path`, and that token (`findObject`).
fn find_parent<'a>(document: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let tokens: Vec<&str> = path.split('/').collect();
    if tokens.len() < 2 || !tokens[0].is_empty() {
        return None;
    }
    let mut current = document;
    for token in &tokens[1..tokens.len() - 1] {
        let token = decode_token(token);
        current = match current {
            Value::Object(map) => map.get_mut(&token)?,
            Value::Array(items) => {
                let index = resolve_index(&token, items.len(), false).ok()?;
                items.get_mut(index)?
            }
            _ => return None,
        };
        if !(current.is_object() || current.is_array()) {
            return None;
        }
    }
    if !(current.is_object() || current.is_array()) {
        return None;
    }
    let last = tokens.last().map(|t| decode_token(t)).unwrap_or_default();
    Some((current, last))
}

/// An array index; negative indices count from the end. `for_insert` allows `len`.
fn resolve_index(token: &str, len: usize, for_insert: bool) -> Result<usize, String> {
    let index: i64 = token.parse().map_err(|_| {
        format!(
            "strconv.Atoi: parsing {}: invalid syntax",
            crate::gofmt::quote(token)
        )
    })?;
    let bound = if for_insert { len + 1 } else { len } as i64;
    let resolved = if index < 0 { index + bound } else { index };
    if resolved < 0 || resolved >= bound {
        return Err(format!(
            "Unable to access invalid index: {index}: {INVALID_INDEX}"
        ));
    }
    Ok(resolved as usize)
}

fn add(container: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match container {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(value);
                return Ok(());
            }
            // Only a token that is not a number is "not a proper array index" in evanphx.
            if key.parse::<i64>().is_err() {
                let cause = resolve_index(key, items.len(), true)
                    .err()
                    .unwrap_or_default();
                return Err(format!(
                    "value was not a proper array index: '{key}': {cause}"
                ));
            }
            let index = resolve_index(key, items.len(), true)?;
            items.insert(index, value);
            Ok(())
        }
        _ => Err(MISSING.to_string()),
    }
}

fn remove(container: &mut Value, key: &str) -> Result<Value, String> {
    match container {
        Value::Object(map) => map
            .remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}: {MISSING}")),
        Value::Array(items) => {
            let index = resolve_index(key, items.len(), false)?;
            Ok(items.remove(index))
        }
        _ => Err(MISSING.to_string()),
    }
}

fn get_mut<'a>(container: &'a mut Value, key: &str) -> Result<&'a mut Value, String> {
    match container {
        Value::Object(map) => map
            .get_mut(key)
            .ok_or_else(|| format!("unable to get nonexistent key: {key}: {MISSING}")),
        Value::Array(items) => {
            let index = resolve_index(key, items.len(), false)?;
            items.get_mut(index).ok_or_else(|| MISSING.to_string())
        }
        _ => Err(MISSING.to_string()),
    }
}

#[cfg(test)]
mod tests;
