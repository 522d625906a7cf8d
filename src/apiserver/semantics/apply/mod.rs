//! Server-side apply and field ownership (`metadata.managedFields`), after
//! `sigs.k8s.io/structured-merge-diff` and the apiserver's `managedfields` package.
//!
//! Ownership is a set of paths per manager entry. An apply merges the manager's intent into the
//! live object, fails on fields whose value it changes that other managers own (unless forced,
//! in which case ownership moves), and removes fields the manager owned before and no longer
//! applies, unless another manager owns them too. Other writes ("Update") take over the fields
//! they change.

mod fieldset;

use serde_json::{Map, Value, json};

use crate::gofmt;
use crate::json::{InArrays, json_equal, strip_nulls};
use crate::schema::{ListType, Schema};

use fieldset::{FieldSet, Path, PathElement, canonical_json, item_key, render_path};

/// One field another manager owns that an apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager's name, e.g. `kubectl-client-side-apply`.
    pub manager: String,
    /// The field as structured-merge-diff prints paths, e.g. `.spec.replicas` or
    /// `.spec.rules[name="ssh"].cidr`.
    pub field: String,
    /// For a manager that wrote with an update (not an apply), the apiVersion it used; the
    /// apiserver names it in the message (`"x" using v1`).
    pub api_version: Option<String>,
}

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Other managers own fields the apply would change; the apiserver answers 409.
    #[error("{}", conflict_message(.conflicts))]
    Conflicts { conflicts: Vec<Conflict> },
    /// The applied configuration is not acceptable; the apiserver answers 400/422.
    #[error("{0}")]
    Invalid(String),
}

fn print_manager(conflict: &Conflict) -> String {
    match &conflict.api_version {
        Some(version) => format!("{} using {version}", gofmt::quote(&conflict.manager)),
        None => gofmt::quote(&conflict.manager),
    }
}

/// The apiserver's 409 message for apply conflicts, e.g.
/// `Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .spec.replicas`.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [conflict] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            print_manager(conflict),
            conflict.field
        );
    }
    let mut managers: Vec<String> = conflicts.iter().map(print_manager).collect();
    managers.sort();
    managers.dedup();
    let mut lines = Vec::new();
    for manager in &managers {
        lines.push(format!("conflicts with {manager}:"));
        for conflict in conflicts.iter().filter(|c| &print_manager(c) == manager) {
            lines.push(format!("- {}", conflict.field));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

// === managers ===

/// One `managedFields` entry.
#[derive(Debug, Clone)]
struct ManagerEntry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
    set: FieldSet,
}

impl ManagerEntry {
    fn is(&self, manager: &str, operation: &str, api_version: &str) -> bool {
        self.manager == manager
            && self.operation == operation
            // Appliers are one entry whatever version they used.
            && (operation == "Apply" || self.api_version == api_version)
            && self.subresource.is_none()
    }
}

fn read_managers(object: &Value) -> Vec<ManagerEntry> {
    let Some(entries) = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let mut managers = Vec::new();
    for entry in entries {
        let text = |key: &str| entry.get(key).and_then(Value::as_str).map(str::to_string);
        let Some(fields) = entry.get("fieldsV1") else {
            continue;
        };
        // Unreadable entries are dropped, as the apiserver resets managed fields it cannot decode.
        let Ok(set) = FieldSet::decode(fields) else {
            continue;
        };
        managers.push(ManagerEntry {
            manager: text("manager").unwrap_or_default(),
            operation: text("operation").unwrap_or_else(|| "Update".to_string()),
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            subresource: text("subresource"),
            set,
        });
    }
    managers
}

/// Writes the entries with non-empty sets, in the apiserver's order (operation, time, manager,
/// apiVersion, subresource).
fn write_managers(object: &mut Value, mut managers: Vec<ManagerEntry>) {
    managers.retain(|entry| !entry.set.is_empty());
    managers.sort_by(|a, b| {
        (
            &a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                &b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let entries: Vec<Value> = managers
        .into_iter()
        .map(|entry| {
            let mut encoded = Map::new();
            encoded.insert("manager".into(), Value::String(entry.manager));
            encoded.insert("operation".into(), Value::String(entry.operation));
            encoded.insert("apiVersion".into(), Value::String(entry.api_version));
            if let Some(time) = entry.time {
                encoded.insert("time".into(), Value::String(time));
            }
            encoded.insert("fieldsType".into(), Value::String("FieldsV1".into()));
            encoded.insert("fieldsV1".into(), entry.set.encode());
            if let Some(subresource) = entry.subresource {
                encoded.insert("subresource".into(), Value::String(subresource));
            }
            Value::Object(encoded)
        })
        .collect();
    let Some(object) = object.as_object_mut() else {
        return;
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(metadata) = metadata.as_object_mut() {
        if entries.is_empty() {
            metadata.remove("managedFields");
        } else {
            metadata.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

fn without_managed_fields(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(metadata) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    copy
}

// === schema context ===

struct Types<'a> {
    schema: Option<&'a Schema>,
}

/// The field names along a path, list items left out: what the schema is looked up by.
fn field_names(path: &Path) -> Vec<&str> {
    path.iter()
        .filter_map(|element| match element {
            PathElement::Field(name) => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

impl Types<'_> {
    /// Whether the object at a path is atomic (`x-kubernetes-map-type: atomic`).
    fn is_atomic_object(&self, path: &Path) -> bool {
        let names = field_names(path);
        !names.is_empty()
            && self
                .schema
                .is_some_and(|schema| schema.is_atomic_object(&names))
    }

    /// The list type at a path: ObjectMeta's lists are known; the rest comes from the schema,
    /// and lists without one are atomic.
    fn list_type(&self, path: &Path) -> ListType {
        let names = field_names(path);
        match names.as_slice() {
            ["metadata", "ownerReferences"] => ListType::Map {
                keys: vec!["uid".to_string()],
            },
            ["metadata", "finalizers"] => ListType::Set,
            ["metadata", ..] => ListType::Atomic,
            _ => self
                .schema
                .and_then(|schema| schema.list_type(&names))
                .unwrap_or(ListType::Atomic),
        }
    }
}

/// Paths the apiserver never tracks (its `StripMetaManager` list).
fn is_untracked(path: &Path) -> bool {
    let names: Vec<&str> = path
        .iter()
        .map(|element| match element {
            PathElement::Field(name) => name.as_str(),
            _ => "",
        })
        .collect();
    matches!(
        names.as_slice(),
        [] | ["apiVersion"]
            | ["kind"]
            | ["metadata"]
            | [
                "metadata",
                "name"
                    | "namespace"
                    | "creationTimestamp"
                    | "selfLink"
                    | "uid"
                    | "clusterName"
                    | "generation"
                    | "resourceVersion"
            ]
    ) || names.starts_with(&["metadata", "managedFields"])
}

/// Whether `path` is `metadata.managedFields` or below it (never compared or owned).
fn is_managed_fields(path: &Path) -> bool {
    matches!(path.as_slice(), [PathElement::Field(first), PathElement::Field(second), ..]
        if first == "metadata" && second == "managedFields")
}

fn insert_tracked(set: &mut FieldSet, path: &Path) {
    if !is_untracked(path) {
        set.insert(path.clone());
    }
}

/// The fields a configuration sets (structured-merge-diff's `ToFieldSet`): leaves, empty
/// objects, whole atomic lists, set elements and map-list items.
fn field_set_of(value: &Value, path: &mut Path, types: &Types<'_>, set: &mut FieldSet) {
    collect_fields(value, path, types, set, false);
}

/// Walks a value collecting owned paths; `mark_objects` also records every object itself, as
/// a comparison does for objects that appear or disappear.
fn collect_fields(
    value: &Value,
    path: &mut Path,
    types: &Types<'_>,
    set: &mut FieldSet,
    mark_objects: bool,
) {
    match value {
        Value::Object(_) if types.is_atomic_object(path) => insert_tracked(set, path),
        Value::Object(map) => {
            if map.is_empty() || mark_objects {
                insert_tracked(set, path);
            }
            for (key, child) in map {
                path.push(PathElement::Field(key.clone()));
                if !is_managed_fields(path) {
                    collect_fields(child, path, types, set, mark_objects);
                }
                path.pop();
            }
        }
        Value::Array(items) => match types.list_type(path) {
            ListType::Atomic => insert_tracked(set, path),
            ListType::Set => {
                for item in items {
                    path.push(PathElement::Value(canonical_json(item)));
                    insert_tracked(set, path);
                    path.pop();
                }
            }
            ListType::Map { keys } => {
                for item in items {
                    let Some(key) = item_key(item, &keys) else {
                        insert_tracked(set, path);
                        continue;
                    };
                    path.push(PathElement::Key(key));
                    insert_tracked(set, path);
                    if let Value::Object(fields) = item {
                        for (name, child) in fields {
                            path.push(PathElement::Field(name.clone()));
                            collect_fields(child, path, types, set, mark_objects);
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
        },
        _ => insert_tracked(set, path),
    }
}

#[derive(Default)]
struct Diff {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

/// A subtree that appeared or disappeared: its objects and its fields.
fn mark_subtree(value: &Value, path: &mut Path, types: &Types<'_>, set: &mut FieldSet) {
    collect_fields(value, path, types, set, true);
}

/// [`json_equal`] of two lists, without building list values.
fn items_equal(old: &[Value], new: &[Value]) -> bool {
    old.len() == new.len() && old.iter().zip(new).all(|(a, b)| json_equal(a, b))
}

fn compare<'v>(
    old: Option<&'v Value>,
    new: Option<&'v Value>,
    path: &mut Path,
    types: &Types<'_>,
    diff: &mut Diff,
) {
    // Values that are the same to the last number representation hold no change below them:
    // most of an update leaves most of the object as it was.
    if let (Some(old), Some(new)) = (old, new)
        && old == new
    {
        return;
    }
    match (old, new) {
        (None, None) => {}
        (None, Some(new)) => mark_subtree(new, path, types, &mut diff.added),
        (Some(old), None) => mark_subtree(old, path, types, &mut diff.removed),
        (Some(old @ Value::Object(_)), Some(new @ Value::Object(_)))
            if types.is_atomic_object(path) =>
        {
            if !json_equal(old, new) {
                insert_tracked(&mut diff.modified, path);
            }
        }
        (Some(Value::Object(old)), Some(Value::Object(new))) => {
            let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let (old_child, new_child) = (old.get(key), new.get(key));
                if old_child.is_some() && old_child == new_child {
                    continue;
                }
                path.push(PathElement::Field(key.clone()));
                if !is_managed_fields(path) {
                    compare(old_child, new_child, path, types, diff);
                }
                path.pop();
            }
        }
        (Some(Value::Array(old_items)), Some(Value::Array(new_items))) => {
            match types.list_type(path) {
                ListType::Set => {
                    let old_set: std::collections::HashSet<String> =
                        old_items.iter().map(crate::json::canonical_text).collect();
                    let new_set: std::collections::HashSet<String> =
                        new_items.iter().map(crate::json::canonical_text).collect();
                    for item in new_items {
                        if !old_set.contains(&crate::json::canonical_text(item)) {
                            path.push(PathElement::Value(canonical_json(item)));
                            insert_tracked(&mut diff.added, path);
                            path.pop();
                        }
                    }
                    for item in old_items {
                        if !new_set.contains(&crate::json::canonical_text(item)) {
                            path.push(PathElement::Value(canonical_json(item)));
                            insert_tracked(&mut diff.removed, path);
                            path.pop();
                        }
                    }
                }
                ListType::Map { keys } => {
                    let keyed = |items: &'v [Value]| -> Option<Vec<(String, &'v Value)>> {
                        items
                            .iter()
                            .map(|item| item_key(item, &keys).map(|key| (key, item)))
                            .collect()
                    };
                    match (keyed(old_items), keyed(new_items)) {
                        (Some(old_keyed), Some(new_keyed)) => {
                            // Indexed by key: lists can be long.
                            let old_by_key: std::collections::HashMap<&String, &Value> =
                                old_keyed.iter().map(|(k, v)| (k, *v)).collect();
                            let new_by_key: std::collections::HashMap<&String, &Value> =
                                new_keyed.iter().map(|(k, v)| (k, *v)).collect();
                            let mut all_keys: Vec<&String> = old_keyed
                                .iter()
                                .chain(new_keyed.iter())
                                .map(|(k, _)| k)
                                .collect();
                            all_keys.sort();
                            all_keys.dedup();
                            for key in all_keys {
                                let old_item = old_by_key.get(key).copied();
                                let new_item = new_by_key.get(key).copied();
                                path.push(PathElement::Key(key.clone()));
                                compare(old_item, new_item, path, types, diff);
                                path.pop();
                            }
                        }
                        _ => {
                            if !items_equal(old_items, new_items) {
                                insert_tracked(&mut diff.modified, path);
                            }
                        }
                    }
                }
                ListType::Atomic => {
                    if !items_equal(old_items, new_items) {
                        insert_tracked(&mut diff.modified, path);
                    }
                }
            }
        }
        (Some(old), Some(new)) => {
            if !json_equal(old, new) {
                insert_tracked(&mut diff.modified, path);
            }
        }
    }
}

/// Merges an applied configuration into the live object following the list types.
fn merge(live: &Value, applied: &Value, path: &mut Path, types: &Types<'_>) -> Value {
    match (live, applied) {
        (Value::Object(_), Value::Object(_)) if types.is_atomic_object(path) => applied.clone(),
        (Value::Object(live_map), Value::Object(applied_map)) => {
            let mut merged = live_map.clone();
            for (key, value) in applied_map {
                path.push(PathElement::Field(key.clone()));
                let child = match live_map.get(key) {
                    Some(existing) => merge(existing, value, path, types),
                    None => value.clone(),
                };
                merged.insert(key.clone(), child);
                path.pop();
            }
            Value::Object(merged)
        }
        (Value::Array(live_items), Value::Array(applied_items)) => match types.list_type(path) {
            ListType::Set => {
                let mut merged = live_items.clone();
                let mut present: std::collections::HashSet<String> =
                    live_items.iter().map(crate::json::canonical_text).collect();
                for item in applied_items {
                    if present.insert(crate::json::canonical_text(item)) {
                        merged.push(item.clone());
                    }
                }
                Value::Array(merged)
            }
            ListType::Map { keys } => {
                let mut merged = live_items.clone();
                let mut positions: std::collections::HashMap<String, usize> = merged
                    .iter()
                    .enumerate()
                    .filter_map(|(index, existing)| item_key(existing, &keys).map(|k| (k, index)))
                    .collect();
                for item in applied_items {
                    let key = item_key(item, &keys);
                    let position = key.as_ref().and_then(|key| positions.get(key).copied());
                    match (position, key) {
                        (Some(position), Some(key)) => {
                            path.push(PathElement::Key(key));
                            merged[position] = merge(&merged[position], item, path, types);
                            path.pop();
                        }
                        (_, key) => {
                            if let Some(key) = key {
                                positions.insert(key, merged.len());
                            }
                            merged.push(item.clone());
                        }
                    }
                }
                Value::Array(merged)
            }
            ListType::Atomic => applied.clone(),
        },
        _ => applied.clone(),
    }
}

/// Whether `path` names a key field of a map-list item.
fn is_key_field(path: &Path, types: &Types<'_>) -> bool {
    let [.., PathElement::Key(_), PathElement::Field(name)] = path.as_slice() else {
        return false;
    };
    let list_path: Path = path[..path.len() - 2].to_vec();
    matches!(types.list_type(&list_path), ListType::Map { keys } if keys.contains(name))
}

/// Removes every path of `removal` from `value` in one walk (so that dropping many list items
/// stays linear); a removed map-list item or object takes its fields with it.
fn remove_owned(value: &mut Value, path: &mut Path, removal: &FieldSet, types: &Types<'_>) {
    match value {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                path.push(PathElement::Field(key.clone()));
                if removal.contains(path) {
                    map.remove(&key);
                } else if removal.owns_at_or_below(path)
                    && let Some(child) = map.get_mut(&key)
                {
                    remove_owned(child, path, removal, types);
                }
                path.pop();
            }
        }
        Value::Array(items) => match types.list_type(path) {
            ListType::Map { keys } => items.retain_mut(|item| {
                let Some(key) = item_key(item, &keys) else {
                    return true;
                };
                path.push(PathElement::Key(key));
                let remove = removal.contains(path);
                if !remove && removal.owns_at_or_below(path) {
                    remove_owned(item, path, removal, types);
                }
                path.pop();
                !remove
            }),
            ListType::Set => items.retain(|item| {
                path.push(PathElement::Value(canonical_json(item)));
                let keep = !removal.contains(path);
                path.pop();
                keep
            }),
            ListType::Atomic => {}
        },
        _ => {}
    }
}

/// An applied configuration must identify every map-list item by its keys, once, and list
/// each set element once (structured-merge-diff refuses the configuration otherwise).
fn check_lists(value: &Value, path: &mut Path, types: &Types<'_>) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                path.push(PathElement::Field(key.clone()));
                check_lists(child, path, types)?;
                path.pop();
            }
            Ok(())
        }
        Value::Array(items) => {
            let here = render_path(path);
            match types.list_type(path) {
                ListType::Map { keys } => {
                    let mut seen = std::collections::HashSet::new();
                    for (index, item) in items.iter().enumerate() {
                        let Some(fields) = item.as_object() else {
                            return Err(format!(
                                "{here}: element {index}: associative list with keys may not have non-map elements"
                            ));
                        };
                        if let Some(missing) = keys.iter().find(|key| !fields.contains_key(*key)) {
                            return Err(format!(
                                "{here}: element {index}: associative list with keys has an element that omits key field {} (and doesn't have default value)",
                                gofmt::quote(missing)
                            ));
                        }
                        let key = item_key(item, &keys).unwrap_or_default();
                        if seen.contains(&key) {
                            let mut duplicate = path.clone();
                            duplicate.push(PathElement::Key(key));
                            return Err(format!(
                                "{here}: duplicate entries for key {}",
                                render_path(&duplicate[path.len()..].to_vec())
                            ));
                        }
                        path.push(PathElement::Key(key.clone()));
                        check_lists(item, path, types)?;
                        path.pop();
                        seen.insert(key);
                    }
                    Ok(())
                }
                ListType::Set => {
                    let mut seen = std::collections::HashSet::new();
                    for item in items {
                        if !seen.insert(crate::json::canonical_text(item)) {
                            return Err(format!(
                                "{here}: duplicate entries for key [={}]",
                                canonical_json(item)
                            ));
                        }
                    }
                    Ok(())
                }
                ListType::Atomic => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

// === apply ===

/// Server-side apply of `applied` (the manager's full intent) onto `live` (None: create),
/// returning the new object with `metadata.managedFields` updated.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    schema: Option<&Schema>,
    now: &str,
) -> Result<Value, ApplyError> {
    if !applied.is_object() {
        return Err(ApplyError::Invalid(
            "apply configuration must be a JSON object".to_string(),
        ));
    }
    if manager.is_empty() {
        return Err(ApplyError::Invalid(
            "PATCH, application/apply-patch+yaml requests must have a field manager".to_string(),
        ));
    }
    if applied
        .pointer("/metadata/managedFields")
        .is_some_and(|fields| !fields.is_null())
    {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".to_string(),
        ));
    }
    let types = Types { schema };
    let applied = strip_nulls(applied, InArrays::Stripped);
    if let Err(problem) = check_lists(&applied, &mut Vec::new(), &types) {
        let api_version = applied
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = applied.get("kind").and_then(Value::as_str).unwrap_or("");
        return Err(ApplyError::Invalid(format!(
            "failed to create typed patch object ({api_version}, Kind={kind}): {problem}"
        )));
    }
    let api_version = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .or_else(|| {
            live.and_then(|l| l.get("apiVersion"))
                .and_then(Value::as_str)
        })
        .unwrap_or_default()
        .to_string();

    let mut managers = live.map(read_managers).unwrap_or_default();
    let live_clean = live
        .map(without_managed_fields)
        .unwrap_or_else(|| json!({}));
    let mut merged = merge(&live_clean, &applied, &mut Vec::new(), &types);

    let mut new_set = FieldSet::default();
    field_set_of(&applied, &mut Vec::new(), &types, &mut new_set);

    let mut diff = Diff::default();
    compare(
        Some(&live_clean),
        Some(&merged),
        &mut Vec::new(),
        &types,
        &mut diff,
    );
    let changed = diff.added.union(&diff.modified);

    let mut conflicts = Vec::new();
    for entry in managers.iter_mut() {
        if entry.is(manager, "Apply", &api_version) {
            continue;
        }
        let overlap = entry.set.intersection(&changed);
        if overlap.is_empty() {
            continue;
        }
        for path in &overlap.paths {
            conflicts.push(Conflict {
                manager: entry.manager.clone(),
                field: render_path(path),
                api_version: (entry.operation != "Apply").then(|| entry.api_version.clone()),
            });
        }
        if force {
            entry.set = entry.set.difference(&overlap);
        }
    }
    if !force && !conflicts.is_empty() {
        conflicts.sort_by(|a, b| (&a.manager, &a.field).cmp(&(&b.manager, &b.field)));
        return Err(ApplyError::Conflicts { conflicts });
    }

    let position = managers
        .iter()
        .position(|entry| entry.is(manager, "Apply", &api_version));
    let previous = position
        .map(|index| managers[index].set.clone())
        .unwrap_or_default();
    let others: FieldSet = managers
        .iter()
        .enumerate()
        .filter(|(index, _)| Some(*index) != position)
        .fold(FieldSet::default(), |all, (_, entry)| all.union(&entry.set));
    // Parents before children: a removed map-list item takes its fields with it, and the key
    // fields of an item that stays are never removed.
    let mut removal = FieldSet::default();
    for path in &previous.difference(&new_set).paths {
        if !others.owns_at_or_below(path) && !is_key_field(path, &types) {
            removal.insert(path.clone());
        }
    }
    if !removal.is_empty() {
        remove_owned(&mut merged, &mut Vec::new(), &removal, &types);
    }

    let changed_anything = merged != live_clean || previous != new_set;
    match position {
        Some(index) => {
            let entry = &mut managers[index];
            entry.set = new_set;
            entry.api_version = api_version;
            if changed_anything || entry.time.is_none() {
                entry.time = Some(now.to_string());
            }
        }
        None => managers.push(ManagerEntry {
            manager: manager.to_string(),
            operation: "Apply".to_string(),
            api_version,
            time: Some(now.to_string()),
            subresource: None,
            set: new_set,
        }),
    }
    write_managers(&mut merged, managers);
    Ok(merged)
}

/// Records field ownership of a non-apply write (create/update/patch) by `manager` with
/// operation "Update": the manager takes over the fields it changed, and fields it removed are
/// no longer owned by anyone. When `new` carries `managedFields` different from `old`'s, they
/// replace the stored ones (`[{}]` clears them), as the apiserver allows.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    schema: Option<&Schema>,
    now: &str,
) {
    let types = Types { schema };
    let api_version = new
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let submitted = new.pointer("/metadata/managedFields");
    let stored = old.and_then(|old| old.pointer("/metadata/managedFields"));
    let mut managers = match submitted {
        Some(Value::Array(entries)) if !entries.is_empty() && submitted != stored => {
            read_managers(new)
        }
        _ => old.map(read_managers).unwrap_or_default(),
    };

    // The comparison never enters metadata.managedFields, so the objects are compared as
    // they are, without copies that leave it out.
    let mut diff = Diff::default();
    compare(old, Some(new), &mut Vec::new(), &types, &mut diff);
    let Diff {
        added: mut changed,
        modified,
        removed,
    } = diff;
    changed.paths.extend(modified.paths);

    let touched = !changed.is_empty() || !removed.is_empty();
    if touched {
        for entry in managers.iter_mut() {
            if !entry.is(manager, "Update", &api_version) {
                entry
                    .set
                    .paths
                    .retain(|path| !changed.contains(path) && !removed.contains(path));
            }
        }
    }
    match managers
        .iter_mut()
        .find(|entry| entry.is(manager, "Update", &api_version))
    {
        Some(entry) if touched => {
            entry.set.paths.extend(changed.paths);
            entry.set.paths.retain(|path| !removed.contains(path));
            entry.time = Some(now.to_string());
        }
        // An untouched entry keeps its fields and its time.
        Some(_) => {}
        None if !changed.is_empty() => managers.push(ManagerEntry {
            manager: manager.to_string(),
            operation: "Update".to_string(),
            api_version,
            time: Some(now.to_string()),
            subresource: None,
            set: changed,
        }),
        None => {}
    }
    write_managers(new, managers);
}

#[cfg(test)]
mod tests;
