//! Background work the real control plane's controllers do: the garbage collector (owner
//! references, Foreground and Orphan propagation) and the namespace controller (emptying a
//! terminating namespace, then removing it).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::handlers::crd::{CLEANUP_FINALIZER, served_resource};
use crate::handlers::delete::{
    DeleteOptions, FOREGROUND_FINALIZER, NAMESPACE_FINALIZER, ORPHAN_FINALIZER, Propagation,
    delete_object,
};
use crate::registry::{ResourceInfo, ResourceKey};
use crate::server::AppState;
use crate::store::{ObjectIndex, StoreError};

/// Safety net: a full pass at least this often even without a wake-up.
const RESYNC_INTERVAL: Duration = Duration::from_secs(10);

/// Passes are at least this far apart, so a burst of deletions costs one scan, not one each.
const MIN_PASS_INTERVAL: Duration = Duration::from_millis(20);

/// Runs until the task is aborted.
pub async fn run(state: AppState) {
    loop {
        let _ = tokio::time::timeout(RESYNC_INTERVAL, state.store.changed.notified()).await;
        tokio::time::sleep(MIN_PASS_INTERVAL).await;
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
                    changes += delete_dependent(state, info, index, Propagation::Background);
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
                    changes +=
                        delete_dependent(state, dependent_info, dependent, Propagation::Foreground);
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
    info: &ResourceInfo,
    index: &ObjectIndex,
    propagation: Propagation,
) -> usize {
    let options = DeleteOptions {
        propagation,
        precondition_uid: Some(index.uid.clone()),
        ..DeleteOptions::default()
    };
    match delete_object(state, info, &index.namespace, &index.name, &options) {
        Ok(_) => 1,
        Err(error) => {
            if error.code != 404 && error.code != 409 {
                tracing::warn!(name = %index.name, %error, "garbage collection could not delete a dependent");
            }
            0
        }
    }
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

/// The namespace controller: deletes everything in a terminating namespace, then the
/// namespace itself once nothing is left.
fn finish_namespace(
    state: &AppState,
    info: &ResourceInfo,
    namespace: &ObjectIndex,
    indexes: &[(&ResourceKey, &Arc<ObjectIndex>)],
    infos: &HashMap<&ResourceKey, ResourceInfo>,
) -> usize {
    let mut changes = 0;
    let mut remaining = 0;
    for (resource, index) in indexes {
        if index.namespace != namespace.name {
            continue;
        }
        remaining += 1;
        if index.deleting {
            continue;
        }
        if let Some(content_info) = infos.get(resource) {
            changes += delete_dependent(state, content_info, index, Propagation::Background);
        }
    }
    if remaining > 0 {
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
        .map(|instance| delete_dependent(state, &instance_info, instance, Propagation::Background))
        .sum()
}
