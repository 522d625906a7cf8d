//! In-memory object storage with a global monotonic resourceVersion and a bounded window of
//! watch history ([`WatchHistory`]).
//!
//! Each object is kept as its serialized JSON bytes next to a small parsed index (name,
//! namespace, labels, resourceVersion, uid, owners, finalizers), so a LIST concatenates stored
//! bytes and filters on the index without re-serialising anything. One mutex guards everything;
//! callers parse and validate outside it and commit with an expected resourceVersion, retrying
//! on conflict as the real registry's `GuaranteedUpdate` does.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::registry::ResourceKey;

/// Labels of one object.
pub type Labels = BTreeMap<String, String>;

/// Buffered events per watcher before it is considered too slow (and sent a 410).
const BROADCAST_CAPACITY: usize = 16_384;

/// The changes kept for watches that resume from a resourceVersion, sized as the real watch
/// cache sizes its history (k8s.io/apiserver pkg/storage/cacher): every change younger than
/// `fresh_for` (its `eventFreshDuration`, 75 s: a little more than a bookmark's interval) up to
/// `at_most` (its upper bound, 100 * 1024, per resource there and across all resources here),
/// and always the last `at_least`.
///
/// A count alone falls short under load: a client that lists 60,000 objects in pages watches
/// from the first page's resourceVersion, and at 2,000 changes a second 10,000 changes are
/// gone within 5 s of the list's start. Its watch would get 410 and it would list again, for
/// as long as the changes came that fast, its cache as old as the loop was long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchHistory {
    pub at_least: usize,
    pub fresh_for: Duration,
    pub at_most: usize,
}

impl Default for WatchHistory {
    fn default() -> Self {
        WatchHistory {
            at_least: 10_000,
            fresh_for: Duration::from_secs(75),
            at_most: 100 * 1024,
        }
    }
}

impl WatchHistory {
    /// The last `changes`, however recent the others.
    pub fn last(changes: usize) -> Self {
        WatchHistory {
            at_least: changes,
            fresh_for: Duration::ZERO,
            at_most: changes,
        }
    }

    /// Whether a history of `len` changes, its oldest made `age` before the newest, drops
    /// that oldest.
    fn drops_oldest(&self, len: usize, age: Duration) -> bool {
        len > self.at_least.max(1) && (len > self.at_most || age >= self.fresh_for)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("object not found")]
    NotFound,
    #[error("object already exists")]
    AlreadyExists,
    #[error(
        "the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict,
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: u64, oldest: u64 },
    #[error("object could not be serialized: {0}")]
    Serialize(String),
}

/// An owner reference, as far as garbage collection needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    pub uid: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub block_owner_deletion: bool,
}

/// The parsed part of a stored object that lists, selectors, watches and GC use.
#[derive(Clone, Debug)]
pub struct ObjectIndex {
    pub name: String,
    pub namespace: String,
    pub labels: Arc<Labels>,
    pub resource_version: u64,
    pub uid: String,
    pub owners: Vec<OwnerRef>,
    pub finalizers: Vec<String>,
    pub deleting: bool,
}

/// One stored object: its JSON bytes and its index.
#[derive(Clone, Debug)]
pub struct StoredObject {
    pub bytes: Bytes,
    pub index: Arc<ObjectIndex>,
}

impl StoredObject {
    /// The object parsed back into a value (for read-modify-write).
    pub fn to_value(&self) -> Result<Value, StoreError> {
        serde_json::from_slice(&self.bytes)
            .map_err(|error| StoreError::Serialize(error.to_string()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as retained in the watch window and fanned out to watchers.
#[derive(Debug)]
pub struct WatchEvent {
    pub event_type: EventType,
    pub resource: ResourceKey,
    pub resource_version: u64,
    pub namespace: String,
    pub name: String,
    pub labels: Arc<Labels>,
    /// Labels before a modification, so label-selected watches can turn a change that leaves
    /// or enters the selection into DELETED / ADDED as the real watch cache does.
    pub previous_labels: Option<Arc<Labels>>,
    pub object: Bytes,
    /// When the change was made (for the initial state of a watch, when it was read).
    pub committed_at: tokio::time::Instant,
}

/// What watchers receive from the store.
#[derive(Clone, Debug)]
pub enum StoreEvent {
    Change(Arc<WatchEvent>),
    /// History was dropped: open watches end with a 410 so their clients re-list.
    Compacted {
        resource_version: u64,
    },
}

/// A page of a LIST.
#[derive(Debug)]
pub struct ListPage {
    pub items: Vec<StoredObject>,
    pub resource_version: u64,
    /// The (namespace, name) of the last item returned, when more items remain.
    pub continue_after: Option<(String, String)>,
    pub remaining: usize,
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug)]
pub enum WatchStart {
    /// Synthetic ADDED events for every current object, then changes.
    InitialState,
    /// Only changes after the current resourceVersion.
    Now,
    /// Changes after the given resourceVersion, replayed from the window.
    After(u64),
}

/// A started watch: events to send first, then the live receiver.
pub struct WatchSubscription {
    pub initial: Vec<Arc<WatchEvent>>,
    pub start_resource_version: u64,
    pub receiver: broadcast::Receiver<StoreEvent>,
}

type Objects = BTreeMap<(String, String), StoredObject>;

struct Inner {
    resource_version: u64,
    resources: HashMap<ResourceKey, Objects>,
    uids: HashMap<String, (ResourceKey, String, String)>,
    history: VecDeque<Arc<WatchEvent>>,
    /// Events with a resourceVersion up to this one are no longer retained.
    compacted_through: u64,
    retention: WatchHistory,
}

/// The object store. Shared as `Arc<Store>`.
pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<StoreEvent>,
    /// Woken after every deletion and owner change so garbage collection runs promptly.
    pub changed: Notify,
}

// === impl Store ===

impl Store {
    pub fn new(retention: WatchHistory) -> Self {
        let (events, _) = broadcast::channel(BROADCAST_CAPACITY);
        Store {
            inner: Mutex::new(Inner {
                resource_version: 1,
                resources: HashMap::new(),
                uids: HashMap::new(),
                history: VecDeque::new(),
                compacted_through: 0,
                retention,
            }),
            events,
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-updated in a way later
        // readers could not handle, so a poisoned lock is still usable.
        match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    pub fn current_resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// The oldest resourceVersion a watch may still start from.
    pub fn compacted_through(&self) -> u64 {
        self.lock().compacted_through
    }

    pub fn get(&self, resource: &ResourceKey, namespace: &str, name: &str) -> Option<StoredObject> {
        let inner = self.lock();
        inner
            .resources
            .get(resource)?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Whether an object with this uid exists (in any resource).
    pub fn uid_exists(&self, uid: &str) -> bool {
        self.lock().uids.contains_key(uid)
    }

    /// Looks an object up by uid.
    pub fn get_by_uid(&self, uid: &str) -> Option<(ResourceKey, StoredObject)> {
        let inner = self.lock();
        let (resource, namespace, name) = inner.uids.get(uid)?;
        let object = inner
            .resources
            .get(resource)?
            .get(&(namespace.clone(), name.clone()))?
            .clone();
        Some((resource.clone(), object))
    }

    /// A page of objects of one resource, optionally in one namespace, in (namespace, name)
    /// order, starting after `continue_after`.
    pub fn list(
        &self,
        resource: &ResourceKey,
        namespace: Option<&str>,
        continue_after: Option<&(String, String)>,
        limit: Option<usize>,
        filter: &dyn Fn(&ObjectIndex) -> bool,
    ) -> ListPage {
        let inner = self.lock();
        let resource_version = inner.resource_version;
        let Some(objects) = inner.resources.get(resource) else {
            return ListPage {
                items: Vec::new(),
                resource_version,
                continue_after: None,
                remaining: 0,
            };
        };
        let lower = match (continue_after, namespace) {
            (Some(after), _) => Bound::Excluded(after.clone()),
            (None, Some(namespace)) => Bound::Included((namespace.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let mut items = Vec::new();
        let mut continue_key = None;
        let mut remaining = 0;
        for ((object_namespace, _), object) in objects.range((lower, Bound::Unbounded)) {
            if let Some(namespace) = namespace
                && object_namespace != namespace
            {
                // Keys are ordered by namespace first: nothing further can match.
                if object_namespace.as_str() > namespace {
                    break;
                }
                continue;
            }
            if !filter(&object.index) {
                continue;
            }
            if continue_key.is_some() {
                remaining += 1;
                continue;
            }
            if limit.is_some_and(|limit| items.len() >= limit) {
                let last: &StoredObject = match items.last() {
                    Some(last) => last,
                    None => break,
                };
                continue_key = Some((last.index.namespace.clone(), last.index.name.clone()));
                remaining += 1;
                continue;
            }
            items.push(object.clone());
        }
        ListPage {
            items,
            resource_version,
            continue_after: continue_key,
            remaining,
        }
    }

    /// Every object's index, grouped by resource (for garbage collection and namespace
    /// cleanup).
    pub fn all_indexes(&self) -> Vec<(ResourceKey, Vec<Arc<ObjectIndex>>)> {
        let inner = self.lock();
        inner
            .resources
            .iter()
            .map(|(resource, objects)| {
                (
                    resource.clone(),
                    objects
                        .values()
                        .map(|object| object.index.clone())
                        .collect(),
                )
            })
            .collect()
    }

    /// Stores a new object, assigning its resourceVersion.
    pub fn create(
        &self,
        resource: &ResourceKey,
        mut object: Value,
    ) -> Result<(StoredObject, Value), StoreError> {
        let mut inner = self.lock();
        let key = object_key(&object);
        if inner
            .resources
            .get(resource)
            .is_some_and(|objects| objects.contains_key(&key))
        {
            return Err(StoreError::AlreadyExists);
        }
        let resource_version = inner.resource_version + 1;
        let stored = seal(&mut object, resource_version)?;
        inner.resource_version = resource_version;
        inner.uids.insert(
            stored.index.uid.clone(),
            (resource.clone(), key.0.clone(), key.1.clone()),
        );
        inner
            .resources
            .entry(resource.clone())
            .or_default()
            .insert(key, stored.clone());
        self.record(&mut inner, resource, EventType::Added, &stored, None);
        drop(inner);
        if !stored.index.owners.is_empty() {
            // The owner may already be gone: the collector has to look.
            self.changed.notify_one();
        }
        Ok((stored, object))
    }

    /// Replaces an object whose current resourceVersion is `expected`.
    pub fn update(
        &self,
        resource: &ResourceKey,
        mut object: Value,
        expected: u64,
    ) -> Result<(StoredObject, Value), StoreError> {
        let mut inner = self.lock();
        let key = object_key(&object);
        let current = inner
            .resources
            .get(resource)
            .and_then(|objects| objects.get(&key))
            .ok_or(StoreError::NotFound)?;
        if current.index.resource_version != expected {
            return Err(StoreError::Conflict);
        }
        let previous_labels = current.index.labels.clone();
        let owners_changed = current.index.owners != index_of(&object).owners;
        let resource_version = inner.resource_version + 1;
        let stored = seal(&mut object, resource_version)?;
        inner.resource_version = resource_version;
        inner
            .resources
            .entry(resource.clone())
            .or_default()
            .insert(key, stored.clone());
        self.record(
            &mut inner,
            resource,
            EventType::Modified,
            &stored,
            Some(previous_labels),
        );
        drop(inner);
        if owners_changed || stored.index.deleting {
            self.changed.notify_one();
        }
        Ok((stored, object))
    }

    /// Removes an object whose current resourceVersion is `expected` (any when `None`). The
    /// returned object carries the resourceVersion of the deletion, as in the DELETED event.
    pub fn delete(
        &self,
        resource: &ResourceKey,
        namespace: &str,
        name: &str,
        expected: Option<u64>,
    ) -> Result<(StoredObject, Value), StoreError> {
        let mut inner = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let current = inner
            .resources
            .get(resource)
            .and_then(|objects| objects.get(&key))
            .ok_or(StoreError::NotFound)?;
        if expected.is_some_and(|expected| current.index.resource_version != expected) {
            return Err(StoreError::Conflict);
        }
        let mut object = current.to_value()?;
        let resource_version = inner.resource_version + 1;
        let stored = seal(&mut object, resource_version)?;
        inner.resource_version = resource_version;
        if let Some(objects) = inner.resources.get_mut(resource) {
            objects.remove(&key);
        }
        inner.uids.remove(&stored.index.uid);
        self.record(&mut inner, resource, EventType::Deleted, &stored, None);
        drop(inner);
        self.changed.notify_one();
        Ok((stored, object))
    }

    /// Removes every object of a resource (its CRD is gone), with a DELETED event for each.
    pub fn remove_resource(&self, resource: &ResourceKey) {
        let mut inner = self.lock();
        let Some(objects) = inner.resources.remove(resource) else {
            return;
        };
        for (_, object) in objects {
            inner.uids.remove(&object.index.uid);
            let Ok(mut value) = object.to_value() else {
                continue;
            };
            let resource_version = inner.resource_version + 1;
            let Ok(stored) = seal(&mut value, resource_version) else {
                continue;
            };
            inner.resource_version = resource_version;
            self.record(&mut inner, resource, EventType::Deleted, &stored, None);
        }
        drop(inner);
        self.changed.notify_one();
    }

    /// Starts a watch on one resource; the caller filters by namespace and selectors.
    pub fn watch(
        &self,
        resource: &ResourceKey,
        start: WatchStart,
    ) -> Result<WatchSubscription, StoreError> {
        // Subscribing under the lock means no change falls between the replayed part and the
        // live part, and none is seen twice.
        let inner = self.lock();
        let receiver = self.events.subscribe();
        let current = inner.resource_version;
        let initial = match start {
            WatchStart::Now => Vec::new(),
            WatchStart::InitialState => inner
                .resources
                .get(resource)
                .map(|objects| {
                    objects
                        .values()
                        .map(|object| {
                            Arc::new(WatchEvent {
                                event_type: EventType::Added,
                                resource: resource.clone(),
                                resource_version: object.index.resource_version,
                                namespace: object.index.namespace.clone(),
                                name: object.index.name.clone(),
                                labels: object.index.labels.clone(),
                                previous_labels: None,
                                object: object.bytes.clone(),
                                committed_at: tokio::time::Instant::now(),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
            WatchStart::After(requested) => {
                if requested < inner.compacted_through {
                    return Err(StoreError::Expired {
                        requested,
                        oldest: inner.compacted_through + 1,
                    });
                }
                inner
                    .history
                    .iter()
                    .filter(|event| {
                        event.resource_version > requested && &event.resource == resource
                    })
                    .cloned()
                    .collect()
            }
        };
        // A watch from a resourceVersion not yet reached starts there, not now.
        let start_resource_version = match start {
            WatchStart::After(requested) => current.max(requested),
            _ => current,
        };
        Ok(WatchSubscription {
            initial,
            start_resource_version,
            receiver,
        })
    }

    /// Drops all retained watch history and ends open watches with 410 Expired, so every
    /// watcher has to re-list (what a real server does after etcd compaction).
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.compacted_through = inner.resource_version;
        let resource_version = inner.resource_version;
        // No receivers is not an error: nobody is watching.
        let _ = self.events.send(StoreEvent::Compacted { resource_version });
    }

    fn record(
        &self,
        inner: &mut Inner,
        resource: &ResourceKey,
        event_type: EventType,
        stored: &StoredObject,
        previous_labels: Option<Arc<Labels>>,
    ) {
        let event = Arc::new(WatchEvent {
            event_type,
            resource: resource.clone(),
            resource_version: stored.index.resource_version,
            namespace: stored.index.namespace.clone(),
            name: stored.index.name.clone(),
            labels: stored.index.labels.clone(),
            previous_labels,
            object: stored.bytes.clone(),
            committed_at: tokio::time::Instant::now(),
        });
        inner.history.push_back(event.clone());
        while let Some(oldest) = inner.history.front()
            && inner.retention.drops_oldest(
                inner.history.len(),
                event.committed_at.duration_since(oldest.committed_at),
            )
        {
            inner.compacted_through = oldest.resource_version;
            inner.history.pop_front();
        }
        // No receivers is not an error: nobody is watching.
        let _ = self.events.send(StoreEvent::Change(event));
    }
}

/// (namespace, name) of an object value.
pub fn object_key(object: &Value) -> (String, String) {
    let metadata = &object["metadata"];
    (
        metadata["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        metadata["name"].as_str().unwrap_or_default().to_string(),
    )
}

/// Sets the resourceVersion, serializes, and indexes an object.
fn seal(object: &mut Value, resource_version: u64) -> Result<StoredObject, StoreError> {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert(
            "resourceVersion".into(),
            Value::String(resource_version.to_string()),
        );
    }
    let bytes =
        serde_json::to_vec(object).map_err(|error| StoreError::Serialize(error.to_string()))?;
    let mut index = index_of(object);
    index.resource_version = resource_version;
    Ok(StoredObject {
        bytes: Bytes::from(bytes),
        index: Arc::new(index),
    })
}

/// The index of an object value.
pub fn index_of(object: &Value) -> ObjectIndex {
    let metadata = &object["metadata"];
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let labels = metadata["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .map(|(key, value)| (key.clone(), text(value)))
                .collect()
        })
        .unwrap_or_default();
    let owners = metadata["ownerReferences"]
        .as_array()
        .map(|owners| {
            owners
                .iter()
                .map(|owner| OwnerRef {
                    uid: text(&owner["uid"]),
                    api_version: text(&owner["apiVersion"]),
                    kind: text(&owner["kind"]),
                    name: text(&owner["name"]),
                    block_owner_deletion: owner["blockOwnerDeletion"].as_bool().unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default();
    let finalizers = metadata["finalizers"]
        .as_array()
        .map(|finalizers| finalizers.iter().map(text).collect())
        .unwrap_or_default();
    ObjectIndex {
        name: text(&metadata["name"]),
        namespace: text(&metadata["namespace"]),
        labels: Arc::new(labels),
        resource_version: metadata["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(0),
        uid: text(&metadata["uid"]),
        owners,
        finalizers,
        deleting: metadata
            .get("deletionTimestamp")
            .is_some_and(|timestamp| !timestamp.is_null()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configmaps() -> ResourceKey {
        ResourceKey {
            group: String::new(),
            plural: "configmaps".into(),
        }
    }

    fn configmap(namespace: &str, name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": namespace, "uid": format!("{namespace}-{name}")}})
    }

    #[test]
    fn resource_versions_are_global_and_monotonic() {
        let store = Store::new(WatchHistory::last(100));
        let (first, _) = store.create(&configmaps(), configmap("a", "x")).unwrap();
        let (second, _) = store.create(&configmaps(), configmap("b", "x")).unwrap();
        assert!(second.index.resource_version > first.index.resource_version);
        assert_eq!(
            store
                .create(&configmaps(), configmap("a", "x"))
                .unwrap_err(),
            StoreError::AlreadyExists
        );
        let stale = first.index.resource_version;
        let (updated, _) = store
            .update(&configmaps(), configmap("a", "x"), stale)
            .unwrap();
        assert_eq!(
            store
                .update(&configmaps(), configmap("a", "x"), stale)
                .unwrap_err(),
            StoreError::Conflict
        );
        let (deleted, value) = store.delete(&configmaps(), "a", "x", None).unwrap();
        assert!(deleted.index.resource_version > updated.index.resource_version);
        assert_eq!(
            value["metadata"]["resourceVersion"],
            deleted.index.resource_version.to_string()
        );
        assert!(store.get(&configmaps(), "a", "x").is_none());
    }

    #[test]
    fn list_pages_through_in_key_order() {
        let store = Store::new(WatchHistory::last(100));
        for name in ["c", "a", "b", "d"] {
            store.create(&configmaps(), configmap("ns", name)).unwrap();
        }
        store
            .create(&configmaps(), configmap("other", "z"))
            .unwrap();
        let page = store.list(&configmaps(), Some("ns"), None, Some(3), &|_| true);
        let names: Vec<_> = page.items.iter().map(|o| o.index.name.clone()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(page.remaining, 1);
        let after = page.continue_after.unwrap();
        let page = store.list(&configmaps(), Some("ns"), Some(&after), Some(3), &|_| true);
        let names: Vec<_> = page.items.iter().map(|o| o.index.name.clone()).collect();
        assert_eq!(names, ["d"]);
        assert!(page.continue_after.is_none());
        assert_eq!(
            store
                .list(&configmaps(), None, None, None, &|_| true)
                .items
                .len(),
            5
        );
    }

    #[test]
    fn history_keeps_what_is_fresh_within_its_bounds_and_always_the_last_few() {
        let history = WatchHistory {
            at_least: 2,
            fresh_for: Duration::from_secs(75),
            at_most: 5,
        };
        let fresh = Duration::from_secs(74);
        let stale = Duration::from_secs(75);
        let cases = [
            // (changes kept, the oldest's age, dropped)
            (3, fresh, false),
            (5, fresh, false),
            (6, fresh, true),
            (3, stale, true),
            (2, stale, false),
            (2, Duration::from_secs(3600), false),
        ];
        for (len, age, dropped) in cases {
            assert_eq!(history.drops_oldest(len, age), dropped, "{len} {age:?}");
        }
        assert!(
            !WatchHistory::last(0).drops_oldest(1, stale),
            "one change at least"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_resumes_from_any_change_of_the_fresh_history() {
        let store = Store::new(WatchHistory {
            at_least: 2,
            fresh_for: Duration::from_secs(75),
            at_most: 5,
        });
        let start = store.current_resource_version();
        for name in ["a", "b", "c", "d"] {
            store.create(&configmaps(), configmap("ns", name)).unwrap();
        }
        // More changes than `at_least`, all fresh: a watch from before them replays them all.
        let replayed = store
            .watch(&configmaps(), WatchStart::After(start))
            .unwrap();
        assert_eq!(replayed.initial.len(), 4);
        // Past `at_most`, the oldest go however fresh.
        for name in ["e", "f"] {
            store.create(&configmaps(), configmap("ns", name)).unwrap();
        }
        assert!(matches!(
            store.watch(&configmaps(), WatchStart::After(start)),
            Err(StoreError::Expired { .. })
        ));
        // Once they are older than `fresh_for`, the next change leaves the last `at_least`.
        tokio::time::advance(Duration::from_secs(76)).await;
        store.create(&configmaps(), configmap("ns", "g")).unwrap();
        let current = store.current_resource_version();
        let kept = store
            .watch(&configmaps(), WatchStart::After(current - 2))
            .unwrap();
        assert_eq!(kept.initial.len(), 2);
        assert!(matches!(
            store.watch(&configmaps(), WatchStart::After(current - 3)),
            Err(StoreError::Expired { .. })
        ));
    }

    #[test]
    fn watch_from_a_compacted_version_is_expired() {
        let store = Store::new(WatchHistory::last(2));
        let start = store.current_resource_version();
        for name in ["a", "b", "c"] {
            store.create(&configmaps(), configmap("ns", name)).unwrap();
        }
        assert!(matches!(
            store.watch(&configmaps(), WatchStart::After(start)),
            Err(StoreError::Expired { .. })
        ));
        let recent = store.current_resource_version() - 1;
        let subscription = store
            .watch(&configmaps(), WatchStart::After(recent))
            .unwrap();
        assert_eq!(subscription.initial.len(), 1);
        store.compact();
        assert!(matches!(
            store.watch(&configmaps(), WatchStart::After(recent)),
            Err(StoreError::Expired { .. })
        ));
    }
}
