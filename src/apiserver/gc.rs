//! Background work the real control plane's controllers do: the garbage collector (owner
//! references, Foreground and Orphan propagation) and the namespace controller (emptying a
//! terminating namespace, reporting progress in its conditions, then removing it). Their
//! deletes go through validating admission under the controllers' own identities.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::admission::{GARBAGE_COLLECTOR, NAMESPACE_CONTROLLER, Requester};
use crate::handlers::crd::{CLEANUP_FINALIZER, served_resource};
use crate::handlers::delete::{
    DeleteOptions, Deleted, FOREGROUND_FINALIZER, NAMESPACE_FINALIZER, ORPHAN_FINALIZER,
    Propagation, delete_object,
};
use crate::handlers::write::{now, string_list};
use crate::registry::{ResourceInfo, ResourceKey};
use crate::server::AppState;
use crate::status::ApiError;
use crate::store::{ObjectIndex, StoreError};

/// Safety net: a full pass at least this often even without a wake-up.
const RESYNC_INTERVAL: Duration = Duration::from_secs(10);

/// Passes are at least this far apart, so a burst of deletions costs one scan, not one each.
const MIN_PASS_INTERVAL: Duration = Duration::from_millis(20);

/// A pass scans every object, so over a large store it is costly: passes are also spaced by
/// this many times the last one's duration, keeping collection to a fraction of a core while
/// objects are deleted in bulk (a real control plane's collector also trails a bulk delete).
const PASS_COST_SPACING: u32 = 4;

/// Runs until the task is aborted.
pub async fn run(state: AppState) {
    let mut last_pass = Duration::ZERO;
    loop {
        let _ = tokio::time::timeout(RESYNC_INTERVAL, state.store.changed.notified()).await;
        tokio::time::sleep(MIN_PASS_INTERVAL.max(last_pass * PASS_COST_SPACING)).await;
        let started = std::time::Instant::now();
        // Keep passing while passes change something: each change can enable the next step
        // (a dependent gone lets its owner's finalizer go, an empty namespace goes).
        for _ in 0..16 {
            // A bug in one pass must not end garbage collection for the server's lifetime.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| collect(&state))) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => {
                    tracing::error!("garbage collection pass failed; retrying on the next change");
                    break;
                }
            }
        }
        last_pass = started.elapsed();
    }
}

/// One pass of garbage collection and namespace cleanup. Returns how many changes it made.
pub fn collect(state: &AppState) -> usize {
    let grouped = state.store.all_indexes();
    let mut infos: HashMap<&ResourceKey, ResourceInfo> = HashMap::new();
    for (resource, _) in &grouped {
        if let Some(info) = state.registry.storage_entry(resource) {
            infos.insert(resource, info);
        }
    }
    let indexes: Vec<(&ResourceKey, &Arc<ObjectIndex>)> = grouped
        .iter()
        .flat_map(|(resource, objects)| objects.iter().map(move |index| (resource, index)))
        .collect();
    let alive: HashSet<&str> = indexes
        .iter()
        .map(|(_, index)| index.uid.as_str())
        .collect();
    let mut dependents: HashMap<&str, Vec<(&ResourceKey, &Arc<ObjectIndex>)>> = HashMap::new();
    for (resource, index) in &indexes {
        for owner in &index.owners {
            dependents
                .entry(owner.uid.as_str())
                .or_default()
                .push((resource, index));
        }
    }
    let mut changes = 0;
    for (resource, index) in &indexes {
        let Some(info) = infos.get(resource) else {
            continue;
        };
        // Dependents whose owners are all gone are deleted; references to missing owners are
        // dropped when other owners remain.
        if !index.owners.is_empty() {
            let missing: Vec<&str> = index
                .owners
                .iter()
                .map(|owner| owner.uid.as_str())
                .filter(|uid| !alive.contains(uid))
                .collect();
            if missing.len() == index.owners.len() {
                if !index.deleting {
                    changes += delete_dependent(
                        state,
                        &Requester::controller(GARBAGE_COLLECTOR),
                        info,
                        index,
                        Propagation::Background,
                    );
                }
                continue;
            }
            if !missing.is_empty() {
                changes += edit(state, info, index, &|object| {
                    remove_owner_references(object, &missing);
                });
            }
        }
        if !index.deleting {
            continue;
        }
        let own_dependents = dependents
            .get(index.uid.as_str())
            .cloned()
            .unwrap_or_default();
        if index.finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
            for (dependent_resource, dependent) in &own_dependents {
                if let Some(dependent_info) = infos.get(dependent_resource) {
                    let uid = index.uid.as_str();
                    changes += edit(state, dependent_info, dependent, &|object| {
                        remove_owner_references(object, &[uid]);
                    });
                }
            }
            changes += remove_finalizer(state, info, index, ORPHAN_FINALIZER);
        } else if index.finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) {
            // Dependents go first (in the foreground too); the owner waits for the ones
            // blocking its deletion.
            let mut blocking = 0;
            for (dependent_resource, dependent) in &own_dependents {
                let Some(dependent_info) = infos.get(dependent_resource) else {
                    continue;
                };
                if dependent
                    .owners
                    .iter()
                    .any(|owner| owner.uid == index.uid && owner.block_owner_deletion)
                {
                    blocking += 1;
                }
                if !dependent.deleting {
                    changes += delete_dependent(
                        state,
                        &Requester::controller(GARBAGE_COLLECTOR),
                        dependent_info,
                        dependent,
                        Propagation::Foreground,
                    );
                }
            }
            if blocking == 0 {
                changes += remove_finalizer(state, info, index, FOREGROUND_FINALIZER);
            }
        }
        if crate::builtin::is_namespace(info) {
            changes += finish_namespace(state, info, index, &indexes, &infos);
        }
        if crate::builtin::is_crd(info) && index.finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
            changes += finish_crd(state, info, index, &grouped);
        }
    }
    changes
}

fn delete_dependent(
    state: &AppState,
    requester: &Requester<'_>,
    info: &ResourceInfo,
    index: &ObjectIndex,
    propagation: Propagation,
) -> usize {
    match delete_as(state, requester, info, index, propagation) {
        Ok(_) => 1,
        Err(error) => {
            if error.code != 404 && error.code != 409 {
                tracing::warn!(name = %index.name, %error, "garbage collection could not delete a dependent");
            }
            0
        }
    }
}

/// A controller's delete of one object, guarded by its uid.
fn delete_as(
    state: &AppState,
    requester: &Requester<'_>,
    info: &ResourceInfo,
    index: &ObjectIndex,
    propagation: Propagation,
) -> Result<Deleted, ApiError> {
    let options = DeleteOptions {
        propagation,
        precondition_uid: Some(index.uid.clone()),
        ..DeleteOptions::default()
    };
    delete_object(
        state,
        requester,
        info,
        &index.namespace,
        &index.name,
        &options,
    )
}

fn remove_owner_references(object: &mut Value, uids: &[&str]) {
    if let Some(owners) = object
        .get_mut("metadata")
        .and_then(|metadata| metadata.get_mut("ownerReferences"))
        .and_then(Value::as_array_mut)
    {
        owners.retain(|owner| !uids.contains(&owner["uid"].as_str().unwrap_or_default()));
        if owners.is_empty()
            && let Some(metadata) = object["metadata"].as_object_mut()
        {
            metadata.remove("ownerReferences");
        }
    }
}

fn remove_finalizer(
    state: &AppState,
    info: &ResourceInfo,
    index: &ObjectIndex,
    finalizer: &str,
) -> usize {
    edit(state, info, index, &|object| {
        if let Some(finalizers) = object
            .get_mut("metadata")
            .and_then(|metadata| metadata.get_mut("finalizers"))
            .and_then(Value::as_array_mut)
        {
            finalizers.retain(|f| f.as_str() != Some(finalizer));
        }
    })
}

/// Applies a controller's edit to one object; an object emptied of finalizers while deleting
/// is removed, as after any update.
fn edit(
    state: &AppState,
    info: &ResourceInfo,
    index: &ObjectIndex,
    change: &dyn Fn(&mut Value),
) -> usize {
    let storage_key = info.storage_key();
    let Some(current) = state.store.get(&storage_key, &index.namespace, &index.name) else {
        return 0;
    };
    if current.index.uid != index.uid {
        return 0;
    }
    let Ok(mut object) = current.to_value() else {
        return 0;
    };
    let before = object.clone();
    change(&mut object);
    if object == before {
        return 0;
    }
    match state
        .store
        .update(&storage_key, object, current.index.resource_version)
    {
        Ok((stored, value)) => {
            if stored.index.deleting && stored.index.finalizers.is_empty() {
                if let Ok((_, removed)) = state.store.delete(
                    &storage_key,
                    &index.namespace,
                    &index.name,
                    Some(stored.index.resource_version),
                ) {
                    crate::handlers::delete::after_removed(state, info, &removed);
                }
            } else {
                let _ = value;
            }
            1
        }
        // Changed meanwhile: the next pass sees the new state.
        Err(StoreError::Conflict | StoreError::NotFound) => 0,
        Err(error) => {
            tracing::warn!(name = %index.name, %error, "garbage collection update failed");
            0
        }
    }
}

/// The namespace controller (`namespacedResourcesDeleter`): deletes everything in a
/// terminating namespace as [`NAMESPACE_CONTROLLER`], records how that went in the namespace's
/// status conditions, and once nothing is left removes the `kubernetes` finalizer and the
/// namespace. A delete that admission refuses leaves its object, and so the namespace, in place
/// until a later pass succeeds.
fn finish_namespace(
    state: &AppState,
    info: &ResourceInfo,
    namespace: &ObjectIndex,
    indexes: &[(&ResourceKey, &Arc<ObjectIndex>)],
    infos: &HashMap<&ResourceKey, ResourceInfo>,
) -> usize {
    let requester = Requester::controller(NAMESPACE_CONTROLLER);
    let mut changes = 0;
    let mut content = ContentTotals::default();
    for (resource, index) in indexes {
        if index.namespace != namespace.name || content.failures.contains_key(*resource) {
            continue;
        }
        let Some(content_info) = infos.get(resource) else {
            continue;
        };
        let finalizers = if index.deleting {
            index.finalizers.clone()
        } else {
            match delete_as(
                state,
                &requester,
                content_info,
                index,
                Propagation::Background,
            ) {
                Ok(Deleted::Gone(_)) => {
                    changes += 1;
                    continue;
                }
                Ok(Deleted::Pending(object)) => {
                    changes += 1;
                    string_list(&object["metadata"]["finalizers"])
                }
                // Gone or changed meanwhile: the next pass sees it as it is.
                Err(error) if error.code == 404 || error.code == 409 => index.finalizers.clone(),
                Err(error) => {
                    // The controller deletes a resource's objects with one deletecollection,
                    // which (with kube-apiserver's one delete worker) stops at the first
                    // refusal: the objects after it stay, and the resource is reported by its
                    // error rather than by what remains.
                    content.remaining.remove(*resource);
                    content.failures.insert((*resource).clone(), error.message);
                    continue;
                }
            }
        };
        let remaining = content.remaining.entry((*resource).clone()).or_default();
        remaining.objects += 1;
        for finalizer in finalizers {
            *remaining.finalizers.entry(finalizer).or_default() += 1;
        }
    }
    changes += record_conditions(state, info, namespace, &content);
    if !content.remaining.is_empty() || !content.failures.is_empty() {
        return changes;
    }
    // Empty: drop the `kubernetes` finalizer from spec, then the object goes.
    let storage_key = info.storage_key();
    let Some(current) = state.store.get(&storage_key, "", &namespace.name) else {
        return changes;
    };
    let Ok(mut object) = current.to_value() else {
        return changes;
    };
    crate::builtin::remove_namespace_finalizer(&mut object, NAMESPACE_FINALIZER);
    if object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|finalizers| !finalizers.is_empty())
    {
        crate::builtin::set_namespace_phase(&mut object, "Terminating");
        let _ = state
            .store
            .update(&storage_key, object, current.index.resource_version);
        return changes + 1;
    }
    if let Ok((_, removed)) = state.store.delete(
        &storage_key,
        "",
        &namespace.name,
        Some(current.index.resource_version),
    ) {
        crate::handlers::delete::after_removed(state, info, &removed);
        changes += 1;
    }
    changes
}

/// What one pass of the namespace controller left in a namespace.
#[derive(Default)]
struct ContentTotals {
    /// Objects left (waiting for finalizers), by resource.
    remaining: BTreeMap<ResourceKey, Remaining>,
    /// The refused delete of each resource whose deletion failed.
    failures: BTreeMap<ResourceKey, String>,
}

/// The objects of one resource left in a namespace.
#[derive(Default)]
struct Remaining {
    objects: usize,
    /// How many of them hold each finalizer.
    finalizers: BTreeMap<String, usize>,
}

/// The condition types the namespace controller maintains, in its order, with the reason and
/// message of their "ok" (`False`) state (`status_condition_utils.go`).
const NAMESPACE_CONDITIONS: [(&str, &str, &str); 5] = [
    (
        "NamespaceDeletionDiscoveryFailure",
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    (
        "NamespaceDeletionGroupVersionParsingFailure",
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    (
        "NamespaceDeletionContentFailure",
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    (
        "NamespaceContentRemaining",
        "ContentRemoved",
        "All content successfully removed",
    ),
    (
        "NamespaceFinalizersRemaining",
        "ContentRemoved",
        "All content successfully removed",
    ),
];

/// The failing (`True`) conditions of one pass, by type: reason and message.
fn failing_conditions(content: &ContentTotals) -> BTreeMap<&'static str, (&'static str, String)> {
    let mut failing = BTreeMap::new();
    if !content.failures.is_empty() {
        let mut messages: Vec<&str> = content.failures.values().map(String::as_str).collect();
        messages.sort_unstable();
        failing.insert(
            "NamespaceDeletionContentFailure",
            (
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    messages.len(),
                    messages.join(", ")
                ),
            ),
        );
    }
    if !content.remaining.is_empty() {
        let mut remaining: Vec<String> = content
            .remaining
            .iter()
            .map(|(resource, remaining)| {
                format!(
                    "{}.{} has {} resource instances",
                    resource.plural, resource.group, remaining.objects
                )
            })
            .collect();
        remaining.sort();
        failing.insert(
            "NamespaceContentRemaining",
            (
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", remaining.join(", ")),
            ),
        );
    }
    let mut totals: BTreeMap<&str, usize> = BTreeMap::new();
    for remaining in content.remaining.values() {
        for (finalizer, count) in &remaining.finalizers {
            *totals.entry(finalizer.as_str()).or_default() += count;
        }
    }
    if !totals.is_empty() {
        let mut finalizers: Vec<String> = totals
            .iter()
            .map(|(finalizer, count)| format!("{finalizer} in {count} resource instances"))
            .collect();
        finalizers.sort();
        failing.insert(
            "NamespaceFinalizersRemaining",
            (
                "SomeFinalizerRemain",
                format!("Some finalizers are remaining: {}", finalizers.join(", ")),
            ),
        );
    }
    failing
}

/// Writes the namespace's deletion conditions when they changed (`updateConditions`: the
/// transition time moves only when the status does). Returns 1 when it wrote.
fn record_conditions(
    state: &AppState,
    info: &ResourceInfo,
    namespace: &ObjectIndex,
    content: &ContentTotals,
) -> usize {
    let storage_key = info.storage_key();
    let Some(current) = state.store.get(&storage_key, "", &namespace.name) else {
        return 0;
    };
    let Ok(mut object) = current.to_value() else {
        return 0;
    };
    let failing = failing_conditions(content);
    let mut conditions: Vec<Value> = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut changed = false;
    for (type_, ok_reason, ok_message) in NAMESPACE_CONDITIONS {
        let (status, reason, message) = match failing.get(type_) {
            Some((reason, message)) => ("True", *reason, message.clone()),
            None => ("False", ok_reason, ok_message.to_string()),
        };
        match conditions.iter_mut().find(|c| c["type"] == type_) {
            None => {
                conditions.push(json!({
                    "type": type_, "status": status, "lastTransitionTime": now(),
                    "reason": reason, "message": message,
                }));
                changed = true;
            }
            Some(condition) => {
                if condition["status"] != status {
                    condition["lastTransitionTime"] = json!(now());
                }
                if condition["status"] != status
                    || condition["reason"] != reason
                    || condition["message"] != message.as_str()
                {
                    condition["status"] = json!(status);
                    condition["reason"] = json!(reason);
                    condition["message"] = json!(message);
                    changed = true;
                }
            }
        }
    }
    if !changed {
        return 0;
    }
    if !object["status"].is_object() {
        object["status"] = json!({});
    }
    object["status"]["conditions"] = Value::Array(conditions);
    match state
        .store
        .update(&storage_key, object, current.index.resource_version)
    {
        Ok(_) => 1,
        // Changed meanwhile: the next pass writes them.
        Err(_) => 0,
    }
}

/// The CRD finalizer controller: deletes the CRD's custom resources (honouring their own
/// finalizers), then releases the CRD.
fn finish_crd(
    state: &AppState,
    info: &ResourceInfo,
    crd: &ObjectIndex,
    grouped: &[(ResourceKey, Vec<Arc<ObjectIndex>>)],
) -> usize {
    let Some(stored) = state.store.get(&info.storage_key(), "", &crd.name) else {
        return 0;
    };
    let Ok(object) = stored.to_value() else {
        return 0;
    };
    let resource = served_resource(&object);
    let instances: Vec<&Arc<ObjectIndex>> = grouped
        .iter()
        .filter(|(key, _)| *key == resource)
        .flat_map(|(_, objects)| objects.iter())
        .collect();
    if instances.is_empty() {
        return remove_finalizer(state, info, crd, CLEANUP_FINALIZER);
    }
    let Some(instance_info) = state.registry.storage_entry(&resource) else {
        return 0;
    };
    instances
        .into_iter()
        .filter(|instance| !instance.deleting)
        .map(|instance| {
            delete_dependent(
                state,
                &Requester::storage(),
                &instance_info,
                instance,
                Propagation::Background,
            )
        })
        .sum()
}
