//! The objects of one managed kind as its watch last told them, found by namespace and name.
//!
//! kube-runtime's reflector store would do, at a cost per object that shows at 100,000 of
//! them: its table keys each object by a copy of its name, namespace, uid and resourceVersion
//! (four strings and a 96-byte key), and it takes each event by reference, so every change
//! the watch brings is copied into the store and the watch's own decoded object dropped right
//! after. This table holds the objects alone, found by a hash of their namespace and name
//! computed again when needed, and stores the watch's object itself, shared (`Arc`) with what
//! the watch hands on. Its semantics are kube-runtime's: changes apply at once; a list (the
//! first, or one after the watch's history was lost) is gathered apart and replaces the
//! objects only at its end.
//!
//! [`Wakes`] is the other per-object table of the watch: whether an object's change is one its
//! reconcile acts on (kube-runtime's predicate filter, which keys its cache by three more
//! copied strings).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;
use kube::Resource;
use kube::runtime::{reflector::ObjectRef, watcher};
use tokio::sync::watch;

/// A readable view of the objects; clones share them.
pub struct Store<K> {
    shared: Arc<Shared<K>>,
}

struct Shared<K> {
    objects: RwLock<HashTable<Arc<K>>>,
    /// Whether the first list is in.
    ready: watch::Receiver<bool>,
    /// Seeded per process: names are tenants' input, and must not be able to pile up in one
    /// bucket.
    hasher: RandomState,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            shared: self.shared.clone(),
        }
    }
}

/// The namespace and name an object is found by.
fn identity<K: Resource>(object: &K) -> (Option<&str>, &str) {
    let meta = object.meta();
    (
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

impl<K: Resource> Store<K> {
    fn read(&self) -> RwLockReadGuard<'_, HashTable<Arc<K>>> {
        self.shared
            .objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashTable<Arc<K>>> {
        self.shared
            .objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn hash(&self, value: impl std::hash::Hash) -> u64 {
        self.shared.hasher.hash_one(value)
    }

    /// The hash an object of `key`'s namespace and name is found by, seeded per process: a key
    /// for tables that follow the store's objects without copies of their names. Two objects
    /// share one with a chance of about one in 10^9 at 100,000 objects; such tables only
    /// decide what a missed change or a recheck would also see to.
    pub fn hash_of(&self, key: &ObjectRef<K>) -> u64 {
        self.hash((key.namespace.as_deref(), key.name.as_str()))
    }

    fn hash_of_object(&self, object: &K) -> u64 {
        self.hash(identity(object))
    }

    /// Keeps the entries of `table` (keyed by `hash_of`) whose object the store holds.
    pub fn retain_held<V>(&self, table: &mut HashMap<u64, V>) {
        let objects = self.read();
        table.retain(|hash, _| {
            objects
                .find(*hash, |held| self.hash_of_object(held) == *hash)
                .is_some()
        });
    }

    /// The object `key` names (its namespace and name; a key's uid and resourceVersion, if
    /// any, are not compared), if the store holds it.
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        let wanted = (key.namespace.as_deref(), key.name.as_str());
        self.read()
            .find(self.hash(wanted), |held| identity(&**held) == wanted)
            .cloned()
    }

    /// The hash of any value under the store's seed: a key for tables that find the store's
    /// objects by something else than their name (see [`Store::with_hash`]).
    pub fn hash_value(&self, value: impl std::hash::Hash) -> u64 {
        self.hash(value)
    }

    /// The objects whose namespace and name have the hash `hash` ([`Store::hash_of`]):
    /// normally one, or none once it is gone.
    pub fn with_hash(&self, hash: u64) -> Vec<Arc<K>> {
        let objects = self.read();
        objects
            .iter_hash(hash)
            .filter(|held| self.hash_of_object(held) == hash)
            .cloned()
            .collect()
    }

    /// Resolves once the first list is in, or fails if the writer is dropped before.
    pub fn wait_until_ready(&self) -> impl Future<Output = Result<(), WriterDropped>> + use<K> {
        let mut ready = self.shared.ready.clone();
        async move {
            ready
                .wait_for(|ready| *ready)
                .await
                .map(|_| ())
                .map_err(|_| WriterDropped)
        }
    }

    /// Every object held.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.read().iter().cloned().collect()
    }

    /// How many objects are held.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no object is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `object` in `table`, in place of the one of the same namespace and name if any.
    fn put(&self, table: &mut HashTable<Arc<K>>, object: Arc<K>) {
        let wanted = identity(&*object);
        let hash = self.hash(wanted);
        match table.find_mut(hash, |held| identity(&**held) == wanted) {
            Some(held) => *held = object,
            None => {
                table.insert_unique(hash, object, |held| self.hash(identity(&**held)));
            }
        }
    }
}

/// The store's writer was dropped before the first list was in.
#[derive(Debug, thiserror::Error)]
#[error("the store's writer was dropped before its first list was in")]
pub struct WriterDropped;

/// The store's only writer: the watch's events, taken in order.
pub struct Writer<K> {
    store: Store<K>,
    ready: watch::Sender<bool>,
    /// The list under way, if any: it replaces the objects at its end.
    listing: Option<HashTable<Arc<K>>>,
}

/// An empty store and its writer.
pub fn store<K: Resource>() -> (Store<K>, Writer<K>) {
    let (ready, ready_receiver) = watch::channel(false);
    let store = Store {
        shared: Arc::new(Shared {
            objects: RwLock::new(HashTable::new()),
            ready: ready_receiver,
            hasher: RandomState::new(),
        }),
    };
    let writer = Writer {
        store: store.clone(),
        ready,
        listing: None,
    };
    (store, writer)
}

impl<K: Resource> Writer<K> {
    /// A reader of the objects this writer writes (the tests read through it; the watches
    /// are given their reader with the writer).
    #[cfg(test)]
    pub fn as_reader(&self) -> Store<K> {
        self.store.clone()
    }

    /// Takes `event` in, and hands it on with its object as stored.
    pub fn apply(&mut self, event: watcher::Event<K>) -> watcher::Event<Arc<K>> {
        match event {
            watcher::Event::Apply(object) => {
                let object = Arc::new(object);
                self.store.put(&mut self.store.write(), object.clone());
                watcher::Event::Apply(object)
            }
            watcher::Event::Delete(object) => {
                let wanted = identity(&object);
                let hash = self.store.hash(wanted);
                if let Ok(held) = self
                    .store
                    .write()
                    .find_entry(hash, |held| identity(&**held) == wanted)
                {
                    held.remove();
                }
                watcher::Event::Delete(Arc::new(object))
            }
            watcher::Event::Init => {
                self.listing = Some(HashTable::new());
                watcher::Event::Init
            }
            watcher::Event::InitApply(object) => {
                let object = Arc::new(object);
                let listing = self.listing.get_or_insert_with(HashTable::new);
                self.store.put(listing, object.clone());
                watcher::Event::InitApply(object)
            }
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                // The objects the list replaces are dropped once the lock is let go.
                let replaced = std::mem::replace(&mut *self.store.write(), listed);
                drop(replaced);
                self.ready.send_replace(true);
                watcher::Event::InitDone
            }
        }
    }

    /// Takes in a copy of `event`, for the tests, which keep it.
    #[cfg(test)]
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<K>) -> watcher::Event<Arc<K>>
    where
        K: Clone,
    {
        self.apply(event.clone())
    }
}

/// Which changes of a watch wake their object's reconcile: those that change `what` the
/// reconcile acts on (a hash of the object, or `None` for "always"), or come with another
/// uid (the object was deleted and made again under the same name while the watch was lost).
///
/// Kept as two 64-bit hashes per object: the store's `hash_of` its namespace and name, and its
/// uid's with `what`'s. A change lost to two objects sharing a hash would still be seen by the
/// object's resync.
pub struct Wakes<K> {
    what: fn(&K) -> Option<u64>,
    store: Store<K>,
    seen: HashMap<u64, u64>,
}

impl<K: Resource> Wakes<K> {
    /// Follows the changes `store`'s writer hands on.
    pub fn new(what: fn(&K) -> Option<u64>, store: Store<K>) -> Self {
        Wakes {
            what,
            store,
            seen: HashMap::new(),
        }
    }

    /// The object of `event` if it wakes its reconcile: a change or a listed object whose
    /// `what` or uid differs from the last seen. A deleted object is forgotten, and at a
    /// list's end every object the list did not show (deleted while the watch was lost).
    pub fn take(&mut self, event: watcher::Event<Arc<K>>) -> Option<Arc<K>> {
        match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                self.wakes(&object).then_some(object)
            }
            watcher::Event::Delete(object) => {
                self.seen.remove(&self.store.hash_of_object(&object));
                None
            }
            watcher::Event::InitDone => {
                self.store.retain_held(&mut self.seen);
                None
            }
            watcher::Event::Init => None,
        }
    }

    fn wakes(&mut self, object: &K) -> bool {
        let key = self.store.hash_of_object(object);
        let Some(what) = (self.what)(object) else {
            self.seen.remove(&key);
            return true;
        };
        let seen = self.store.hash((object.meta().uid.as_deref(), what));
        self.seen.insert(key, seen) != Some(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use watcher::Event;

    fn object(namespace: &str, name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{namespace}-{name}")),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn key(namespace: &str, name: &str) -> ObjectRef<ConfigMap> {
        ObjectRef::new(name).within(namespace)
    }

    fn version(store: &Store<ConfigMap>, namespace: &str, name: &str) -> Option<String> {
        store
            .get(&key(namespace, name))
            .and_then(|held| held.metadata.resource_version.clone())
    }

    #[test]
    fn changes_apply_at_once_and_an_object_is_found_by_namespace_and_name() {
        let (store, mut writer) = store::<ConfigMap>();
        writer.apply(Event::Apply(object("team-a", "x", "1")));
        writer.apply(Event::Apply(object("team-b", "x", "2")));
        writer.apply(Event::Apply(object("team-a", "x", "3")));
        assert_eq!(version(&store, "team-a", "x").as_deref(), Some("3"));
        assert_eq!(version(&store, "team-b", "x").as_deref(), Some("2"));
        assert_eq!(version(&store, "team-c", "x"), None);
        assert_eq!(store.len(), 2);
        // A key's extras are not compared.
        let with_extras = ObjectRef::from_obj(&object("team-b", "x", "9"));
        assert!(store.get(&with_extras).is_some());
        writer.apply(Event::Delete(object("team-a", "x", "4")));
        assert_eq!(version(&store, "team-a", "x"), None);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_table_keyed_by_hash_keeps_only_what_the_store_holds() {
        let (store, mut writer) = store::<ConfigMap>();
        writer.apply(Event::Apply(object("team-a", "x", "1")));
        writer.apply(Event::Apply(object("team-b", "x", "1")));
        let mut due: HashMap<u64, &str> = [
            (store.hash_of(&key("team-a", "x")), "a"),
            (store.hash_of(&key("team-b", "x")), "b"),
            (store.hash_of(&key("team-c", "x")), "c"),
        ]
        .into();
        assert_eq!(due.len(), 3, "each namespace's object has its own hash");
        writer.apply(Event::Delete(object("team-b", "x", "2")));
        store.retain_held(&mut due);
        assert_eq!(due.into_values().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn the_stored_object_is_the_one_handed_on() {
        let (store, mut writer) = store::<ConfigMap>();
        let Event::Apply(handed_on) = writer.apply(Event::Apply(object("team-a", "x", "1"))) else {
            panic!("an Apply is handed on as an Apply");
        };
        let held = store.get(&key("team-a", "x")).expect("held");
        assert!(Arc::ptr_eq(&held, &handed_on));
    }

    #[tokio::test]
    async fn ready_once_the_first_list_is_in_and_not_if_the_writer_goes_before() {
        let (store, mut writer) = store::<ConfigMap>();
        let waiting = tokio::spawn(store.wait_until_ready());
        writer.apply(Event::Init);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        writer.apply(Event::InitDone);
        assert!(waiting.await.expect("joined").is_ok());
        let (store, writer) = super::store::<ConfigMap>();
        drop(writer);
        assert!(store.wait_until_ready().await.is_err());
    }

    #[test]
    fn a_list_replaces_the_objects_only_at_its_end() {
        let (store, mut writer) = store::<ConfigMap>();
        writer.apply(Event::Apply(object("team-a", "gone", "1")));
        writer.apply(Event::Apply(object("team-a", "kept", "1")));
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(object("team-a", "kept", "5")));
        writer.apply(Event::InitApply(object("team-a", "new", "5")));
        assert_eq!(version(&store, "team-a", "gone").as_deref(), Some("1"));
        assert_eq!(version(&store, "team-a", "kept").as_deref(), Some("1"));
        assert_eq!(version(&store, "team-a", "new"), None);
        writer.apply(Event::InitDone);
        assert_eq!(version(&store, "team-a", "gone"), None);
        assert_eq!(version(&store, "team-a", "kept").as_deref(), Some("5"));
        assert_eq!(version(&store, "team-a", "new").as_deref(), Some("5"));
        assert_eq!(store.len(), 2);
    }

    fn labelled(namespace: &str, name: &str, uid: &str, label: &str) -> ConfigMap {
        let mut object = object(namespace, name, "1");
        object.metadata.uid = Some(uid.into());
        object.metadata.labels = Some([("l".to_string(), label.to_string())].into());
        object
    }

    fn by_labels(object: &ConfigMap) -> Option<u64> {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut hasher = DefaultHasher::new();
        object.metadata.labels.hash(&mut hasher);
        Some(hasher.finish())
    }

    /// Runs `events` through a store and `wakes`: the names (namespace/name) woken.
    fn woken(
        writer: &mut Writer<ConfigMap>,
        wakes: &mut Wakes<ConfigMap>,
        events: Vec<Event<ConfigMap>>,
    ) -> Vec<String> {
        events
            .into_iter()
            .filter_map(|event| wakes.take(writer.apply(event)))
            .map(|object| {
                format!(
                    "{}/{}",
                    object.metadata.namespace.as_deref().unwrap_or_default(),
                    object.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect()
    }

    #[test]
    fn only_a_change_of_what_is_acted_on_or_of_uid_wakes() {
        let (store, mut writer) = store::<ConfigMap>();
        let mut wakes = Wakes::new(by_labels, store);
        let cases = [
            // (what the watch tells, whether it wakes)
            (Event::Apply(labelled("team-a", "x", "u1", "a")), true),
            (Event::Apply(labelled("team-a", "x", "u1", "a")), false),
            (Event::Apply(labelled("team-b", "x", "u1", "a")), true),
            (Event::Apply(labelled("team-a", "x", "u1", "b")), true),
            // Made again under the same name while the watch was lost.
            (Event::InitApply(labelled("team-a", "x", "u2", "b")), true),
            (Event::Apply(labelled("team-a", "x", "u2", "b")), false),
            (Event::Delete(labelled("team-a", "x", "u2", "b")), false),
            // Deleted, then made again with the same uid and labels.
            (Event::Apply(labelled("team-a", "x", "u2", "b")), true),
        ];
        for (step, (event, expected)) in cases.into_iter().enumerate() {
            let woken = woken(&mut writer, &mut wakes, vec![event]);
            assert_eq!(!woken.is_empty(), expected, "step {step}");
        }
    }

    #[test]
    fn a_list_forgets_what_it_no_longer_shows() {
        let (store, mut writer) = store::<ConfigMap>();
        let mut wakes = Wakes::new(by_labels, store);
        let first = vec![
            Event::Init,
            Event::InitApply(labelled("team-a", "x", "u1", "a")),
            Event::InitApply(labelled("team-b", "x", "u2", "a")),
            Event::InitDone,
        ];
        assert_eq!(
            woken(&mut writer, &mut wakes, first),
            ["team-a/x", "team-b/x"]
        );
        let second = vec![
            Event::Init,
            Event::InitApply(labelled("team-a", "x", "u1", "a")),
            Event::InitDone,
        ];
        assert!(woken(&mut writer, &mut wakes, second).is_empty());
        // team-b/x was forgotten: seen again, it wakes; team-a/x, unchanged, does not.
        let again = vec![
            Event::Apply(labelled("team-b", "x", "u2", "a")),
            Event::Apply(labelled("team-a", "x", "u1", "a")),
        ];
        assert_eq!(woken(&mut writer, &mut wakes, again), ["team-b/x"]);
    }

    #[test]
    fn no_hash_always_wakes() {
        let (store, mut writer) = store::<ConfigMap>();
        let mut wakes = Wakes::new(|_: &ConfigMap| None, store);
        let object = labelled("team-a", "x", "u1", "a");
        let events = vec![Event::Apply(object.clone()), Event::Apply(object)];
        assert_eq!(woken(&mut writer, &mut wakes, events).len(), 2);
    }
}
