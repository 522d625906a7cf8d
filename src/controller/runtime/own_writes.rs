//! This process's own writes, read back before the watch brings them.
//!
//! A reconcile starts from the store's copy of its object, which the watch keeps. When the API
//! server's watch lags its writes (a loaded server; a real one more than the embedded one), a
//! reconcile that closely follows one of this process's writes to the object (woken by a
//! volume's change, or requeued within a transition) finds the copy from before that write:
//! its status write is answered 409 Conflict, and the work is done again a second later. So
//! each object's latest write is kept with the resourceVersions it replaced: while the store
//! still holds one of those, the written object is the newer copy and is used instead.
//!
//! Equality only: resourceVersions are opaque to clients, so any version not replaced by this
//! process (another writer's, or the watch caught up) is the store's to give. A write kept is
//! dropped once the store has moved past every version it replaced, at the object's next
//! reconcile or at a sweep of the writes, whichever comes first. Writes and reconcile starts
//! sweep, at most once a second; a sweep that leaves the table mostly empty shrinks it, so a
//! burst of writes does not hold its size for good.

use crate::lock;
use crate::runtime::store::Store;
use kube::Resource;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the writes are swept of those the store has caught up with.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How long a write is kept at most, while the store still lags behind it. Under load a watch
/// can be a minute behind or more: at 100,000 objects one whose resourceVersion had expired
/// lists 60,000 objects in pages, its watch from the list's start may have expired again, and
/// the store keeps its copies from before the first list until the last is in. Kept only
/// 60 s, the writes of that time would be forgotten, and each reconcile of their objects
/// would write from the copy before them, be answered 409 and come back a second later
/// (14,000 times in a minute in one such run). A watch further behind than this is not
/// lagging but stuck.
const KEPT_AT_MOST: Duration = Duration::from_secs(10 * 60);

/// The most resourceVersions one write chain remembers (writes made one after another, each
/// from the object the one before returned, before the watch brought any of them).
const CHAIN: usize = 8;

/// The latest write of each object, by object.
pub struct OwnWrites<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store: Store<K>,
    writes: Mutex<Writes<K>>,
}

struct Writes<K: Resource<DynamicType = ()>> {
    latest: HashMap<ObjectRef<K>, Written<K>>,
    swept: Instant,
}

struct Written<K> {
    /// The resourceVersions the chain of writes replaced, oldest first.
    replaced: Vec<String>,
    object: Arc<K>,
    at: Instant,
}

impl<K> Written<K>
where
    K: Resource<DynamicType = ()>,
{
    /// Whether `stored` is a copy from before this write: one it replaced, of the same object.
    fn is_newer_than(&self, stored: &K) -> bool {
        stored.meta().uid == self.object.meta().uid
            && stored
                .meta()
                .resource_version
                .as_ref()
                .is_some_and(|version| self.replaced.contains(version))
    }
}

impl<K> OwnWrites<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// Writes read back against `store`, the controller's copy of the objects.
    pub fn new(store: Store<K>) -> Self {
        OwnWrites {
            store,
            writes: Mutex::new(Writes {
                latest: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }

    /// Notes that this process wrote `before` (the copy the write was made from, whose
    /// resourceVersion it replaced) and the API server answered with `after`.
    pub fn note(&self, before: &K, after: &K) {
        let Some(replaced) = before.resource_version() else {
            return;
        };
        let key = crate::runtime::applier::key_of(after);
        let now = Instant::now();
        let mut writes = lock(&self.writes);
        self.sweep_if_due(&mut writes, now);
        let mut chain = match writes.latest.remove(&key) {
            // Written from the object this process wrote last: the same chain.
            Some(last) if last.object.resource_version().as_ref() == Some(&replaced) => {
                last.replaced
            }
            _ => Vec::new(),
        };
        chain.push(replaced);
        if chain.len() > CHAIN {
            chain.remove(0);
        }
        // Kept as the store keeps objects: without managedFields (`decode.rs`).
        let mut object = after.clone();
        object.meta_mut().managed_fields = None;
        writes.latest.insert(
            key,
            Written {
                replaced: chain,
                object: Arc::new(object),
                at: now,
            },
        );
    }

    /// The newer of `stored` and this process's latest write of it: the write while `stored`
    /// is a copy from before it.
    pub fn newest(&self, stored: Arc<K>) -> Arc<K> {
        let key = crate::runtime::applier::key_of(&*stored);
        let mut writes = lock(&self.writes);
        // Called as every reconcile starts: writes of objects not reconciled again are
        // dropped while no other write comes either.
        self.sweep_if_due(&mut writes, Instant::now());
        match writes.latest.get(&key) {
            Some(written) if written.is_newer_than(&stored) => written.object.clone(),
            Some(_) => {
                writes.latest.remove(&key);
                stored
            }
            None => stored,
        }
    }

    /// Drops the writes the store has caught up with or that are too old, unless the last
    /// sweep was less than `SWEEP_EVERY` ago. The table then keeps room for twice the writes
    /// left: one that a sweep left at most about a quarter full is made smaller (a hash table
    /// keeps its largest size otherwise), one fuller is left as it is.
    fn sweep_if_due(&self, writes: &mut Writes<K>, now: Instant) {
        if now.duration_since(writes.swept) < SWEEP_EVERY {
            return;
        }
        writes.swept = now;
        let store = &self.store;
        writes.latest.retain(|key, written| {
            now.duration_since(written.at) < KEPT_AT_MOST
                && store
                    .get(key)
                    .is_some_and(|stored| written.is_newer_than(&stored))
        });
        let kept = writes.latest.len();
        writes.latest.shrink_to(kept * 2);
    }

    /// Makes the next write sweep, as if a sweep's time had passed.
    #[cfg(test)]
    pub(crate) fn sweep_due(&self) {
        lock(&self.writes).swept -= SWEEP_EVERY;
    }

    /// How many writes are kept.
    #[cfg(test)]
    fn kept(&self) -> usize {
        lock(&self.writes).latest.len()
    }

    /// How many writes the table has room for.
    #[cfg(test)]
    fn room(&self) -> usize {
        lock(&self.writes).latest.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::store::Writer;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;

    fn object(uid: &str, version: &str, data: &str) -> ConfigMap {
        let mut map = ConfigMap::default();
        map.metadata.name = Some("team".into());
        map.metadata.namespace = Some("ml".into());
        map.metadata.uid = Some(uid.into());
        map.metadata.resource_version = Some(version.into());
        map.data = Some([("step".to_string(), data.to_string())].into());
        map
    }

    fn step(object: &ConfigMap) -> &str {
        object.data.as_ref().unwrap()["step"].as_str()
    }

    fn writes() -> (OwnWrites<ConfigMap>, Writer<ConfigMap>) {
        let (store, writer) = crate::runtime::store::store();
        (OwnWrites::new(store), writer)
    }

    #[test]
    fn a_copy_from_before_a_write_gives_way_to_the_write_and_any_other_copy_wins() {
        let (own, _) = writes();
        let v1 = object("u", "1", "read");
        let v2 = object("u", "2", "written");
        own.note(&v1, &v2);
        // The store still holds the version the write replaced: the write is newer.
        assert_eq!(step(&own.newest(Arc::new(v1.clone()))), "written");
        // Another version (the watch caught up, or another writer): the store's copy, and
        // the write is forgotten.
        let other = object("u", "3", "someone else's");
        assert_eq!(step(&own.newest(Arc::new(other))), "someone else's");
        assert_eq!(own.kept(), 0);
        assert_eq!(step(&own.newest(Arc::new(v1))), "read");
    }

    #[test]
    fn writes_one_after_another_count_every_version_they_replaced() {
        let (own, _) = writes();
        let v1 = object("u", "1", "read");
        let v2 = object("u", "2", "intent");
        let v3 = object("u", "3", "ready");
        own.note(&v1, &v2);
        own.note(&v2, &v3);
        assert_eq!(step(&own.newest(Arc::new(v1.clone()))), "ready");
        assert_eq!(step(&own.newest(Arc::new(v2))), "ready");
        // A write from a copy this process did not write starts a chain of its own.
        let v5 = object("u", "5", "after another writer");
        let v6 = object("u", "6", "written again");
        own.note(&v5, &v6);
        assert_eq!(step(&own.newest(Arc::new(v1))), "read");
    }

    #[test]
    fn an_object_made_again_under_the_same_name_is_not_confused_with_the_old_one() {
        let (own, _) = writes();
        own.note(&object("old", "1", "read"), &object("old", "2", "written"));
        let namesake = object("new", "1", "new object");
        assert_eq!(step(&own.newest(Arc::new(namesake))), "new object");
    }

    #[test]
    fn a_sweep_drops_the_writes_the_store_has_caught_up_with() {
        let (own, mut writer) = writes();
        let v1 = object("u", "1", "read");
        let v2 = object("u", "2", "written");
        writer.apply_watcher_event(&Event::Apply(v1.clone()));
        own.note(&v1, &v2);
        writer.apply_watcher_event(&Event::Apply(v2.clone()));
        // Another object's write, a sweep's time later, sweeps the first.
        lock(&own.writes).swept -= SWEEP_EVERY;
        let mut other = object("w", "7", "x");
        other.metadata.name = Some("other".into());
        let mut other_written = other.clone();
        other_written.metadata.resource_version = Some("8".into());
        own.note(&other, &other_written);
        assert_eq!(own.kept(), 1);
    }

    #[test]
    fn a_write_is_kept_for_as_long_as_the_store_lags_behind_it_minutes_included() {
        let (own, mut writer) = writes();
        let [v1, v2] = versions("lagging", ["1", "2"]);
        writer.apply_watcher_event(&Event::Apply(v1.clone()));
        own.note(&v1, &v2);
        let sweep_at = |after: Duration| {
            let mut writes = lock(&own.writes);
            writes.swept -= SWEEP_EVERY;
            own.sweep_if_due(&mut writes, Instant::now() + after);
            writes.latest.len()
        };
        assert_eq!(sweep_at(Duration::from_secs(5 * 60)), 1);
        let read = own.newest(Arc::new(v1.clone()));
        assert_eq!(read.resource_version().as_deref(), Some("2"));
        // Stuck, not lagging: the re-list brings the object.
        assert_eq!(sweep_at(KEPT_AT_MOST + SWEEP_EVERY), 0);
        assert_eq!(
            own.newest(Arc::new(v1)).resource_version().as_deref(),
            Some("1")
        );
    }

    /// `name`'s copies at `versions`, with one uid.
    fn versions(name: &str, versions: [&str; 2]) -> [ConfigMap; 2] {
        versions.map(|version| {
            let mut map = object(&format!("uid-{name}"), version, "x");
            map.metadata.name = Some(name.into());
            map
        })
    }

    #[test]
    fn a_reconcile_start_sweeps_the_writes_too() {
        let (own, mut writer) = writes();
        let [v1, v2] = versions("caught-up", ["1", "2"]);
        let [w1, w2] = versions("lagging", ["1", "2"]);
        writer.apply_watcher_event(&Event::Apply(v2.clone()));
        writer.apply_watcher_event(&Event::Apply(w1.clone()));
        own.note(&v1, &v2);
        own.note(&w1, &w2);
        // Within a sweep's time of the last one, nothing is swept.
        let [r1, _] = versions("reconciled", ["1", "2"]);
        own.newest(Arc::new(r1.clone()));
        assert_eq!(own.kept(), 2);
        // A sweep's time later, a reconcile start of another object sweeps: the write the
        // store has caught up with goes, the one it has not stays.
        own.sweep_due();
        own.newest(Arc::new(r1));
        assert_eq!(own.kept(), 1);
        let read = own.newest(Arc::new(w1));
        assert_eq!(read.resource_version().as_deref(), Some("2"));
    }

    #[test]
    fn a_sweep_that_empties_most_of_the_table_shrinks_it() {
        // kept of 1,000 writes after the sweep -> whether the table shrinks
        let cases = [
            (0, true),
            (10, true),
            (250, true),
            (900, false),
            (1_000, false),
        ];
        for (lagging, shrinks) in cases {
            let (own, mut writer) = writes();
            for i in 0..1_000 {
                let [before, after] = versions(&format!("object-{i}"), ["1", "2"]);
                let stored = if i < lagging { &before } else { &after };
                writer.apply_watcher_event(&Event::Apply(stored.clone()));
                own.note(&before, &after);
            }
            let room = own.room();
            own.sweep_due();
            own.newest(Arc::new(versions("other", ["1", "2"])[0].clone()));
            assert_eq!(own.kept(), lagging, "{lagging}");
            // Room is counted less the slots of removed entries, until the table is rebuilt.
            let shrunk = own.room() <= room / 2;
            assert_eq!(shrunk, shrinks, "{lagging}: {room} -> {}", own.room());
            assert!(own.room() >= lagging, "{lagging}");
        }
    }
}
