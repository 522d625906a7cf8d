//! Which objects of a kind refer to a given object: the index a change of a referenced object
//! is looked up in, so that waking its referrers costs the referrers, not a scan of the kind.
//!
//! Every change of a followed kind (a machine's status write, a volume attached) wakes the
//! objects that refer to it. Found by scanning the controller's store, each change cost a pass
//! over every object of the kind, building each one's references: at 100,000 objects the
//! changes of a bulk apply kept a core busy in the scan and held up the controller's own watch.
//!
//! The index is kept from the controller's object watch, before its store takes each event:
//! an applied object's references replace those of the version the store held, a deleted
//! object's are removed, and a complete list (the first, or one after the watch was lost, which
//! the store takes in whole) rebuilds it from the store.

use crate::flow::declarations::{KindDeclarations, Reference};
use crate::lock;
use crate::runtime::store::Store;
use kube::ResourceExt;
use kube::runtime::watcher;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// What a reference points at, in the referrer's namespace: one object of a kind, or every
/// object of it (`name: None`, a label selector).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Target {
    namespace: String,
    kind: String,
    name: Option<String>,
}

impl Target {
    fn of(namespace: &str, reference: &Reference) -> Target {
        let (kind, name) = match reference {
            Reference::Named { kind, name } => (*kind, Some(name.clone())),
            Reference::Every { kind } => (*kind, None),
        };
        Target {
            namespace: namespace.to_string(),
            kind: kind.to_string(),
            name,
        }
    }
}

/// The referrers of each target, by name.
#[derive(Default)]
pub struct ReferrerIndex {
    by_target: Mutex<HashMap<Target, BTreeSet<String>>>,
}

impl ReferrerIndex {
    /// Takes in one event of the kind's watch; `store` is the controller's store before it
    /// takes the same event.
    pub fn observe<K: KindDeclarations>(&self, store: &Store<K>, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(object) => {
                if let Some(stored) = store.get(&crate::runtime::applier::key_of(object)) {
                    self.remove(&*stored);
                }
                self.insert(object);
            }
            watcher::Event::Delete(object) => {
                self.remove(object);
            }
            // A list is taken in whole at its end (`rebuild`).
            watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => {}
        }
    }

    /// Builds the index again from `objects` (the store, once a list is in it).
    pub fn rebuild<K: KindDeclarations>(&self, objects: &[Arc<K>]) {
        let mut fresh = HashMap::new();
        for object in objects {
            add(&mut fresh, &**object);
        }
        *lock(&self.by_target) = fresh;
    }

    /// The names of the objects in `namespace` that refer to the object `name` of `kind`.
    pub fn referrers(&self, namespace: &str, kind: &str, name: &str) -> BTreeSet<String> {
        let by_target = lock(&self.by_target);
        let mut found = BTreeSet::new();
        for name in [Some(name.to_string()), None] {
            let target = Target {
                namespace: namespace.to_string(),
                kind: kind.to_string(),
                name,
            };
            if let Some(names) = by_target.get(&target) {
                found.extend(names.iter().cloned());
            }
        }
        found
    }

    fn insert<K: KindDeclarations>(&self, object: &K) {
        add(&mut lock(&self.by_target), object);
    }

    fn remove<K: KindDeclarations>(&self, object: &K) {
        let namespace = object.namespace().unwrap_or_default();
        let name = object.name_any();
        let mut by_target = lock(&self.by_target);
        for reference in object.references() {
            let target = Target::of(&namespace, &reference);
            if let Some(names) = by_target.get_mut(&target) {
                names.remove(&name);
                if names.is_empty() {
                    by_target.remove(&target);
                }
            }
        }
    }
}

/// Adds `object` as a referrer of each target it refers to.
fn add<K: KindDeclarations>(by_target: &mut HashMap<Target, BTreeSet<String>>, object: &K) {
    let namespace = object.namespace().unwrap_or_default();
    for reference in object.references() {
        by_target
            .entry(Target::of(&namespace, &reference))
            .or_default()
            .insert(object.name_any());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use gpucloud_api::Volume;

    fn volume(namespace: &str, name: &str, instance: &str) -> Volume {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "Volume",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"region": "us-east-1", "sizeGb": 50, "instanceRef": {"name": instance}},
        }))
        .unwrap()
    }

    fn names(found: BTreeSet<String>) -> Vec<String> {
        found.into_iter().collect()
    }

    #[test]
    fn an_applied_object_replaces_the_references_of_the_version_the_store_held() {
        let (store, mut writer) = crate::runtime::store::store::<Volume>();
        let index = ReferrerIndex::default();
        // Each event as the controller's watch passes it: to the index, then to the store.
        let mut pass = |event: watcher::Event<Volume>| {
            index.observe(&store, &event);
            writer.apply_watcher_event(&event);
        };
        pass(watcher::Event::Apply(volume("team-a", "data", "gi-1")));
        pass(watcher::Event::Apply(volume("team-a", "scratch", "gi-1")));
        pass(watcher::Event::Apply(volume("team-b", "data", "gi-1")));
        assert_eq!(
            names(index.referrers("team-a", "GpuInstance", "gi-1")),
            ["data", "scratch"]
        );
        assert_eq!(
            names(index.referrers("team-b", "GpuInstance", "gi-1")),
            ["data"]
        );
        assert!(index.referrers("team-a", "SshKey", "gi-1").is_empty());

        // Moved to another machine: no longer a referrer of the first.
        pass(watcher::Event::Apply(volume("team-a", "data", "gi-2")));
        assert_eq!(
            names(index.referrers("team-a", "GpuInstance", "gi-1")),
            ["scratch"]
        );
        assert_eq!(
            names(index.referrers("team-a", "GpuInstance", "gi-2")),
            ["data"]
        );

        pass(watcher::Event::Delete(volume("team-a", "scratch", "gi-1")));
        assert!(index.referrers("team-a", "GpuInstance", "gi-1").is_empty());
    }

    #[test]
    fn a_complete_list_rebuilds_the_index_from_the_store() {
        let (store, mut writer) = crate::runtime::store::store::<Volume>();
        let index = ReferrerIndex::default();
        for event in [
            watcher::Event::Apply(volume("team-a", "gone", "gi-1")),
            watcher::Event::Init,
            watcher::Event::InitApply(volume("team-a", "data", "gi-2")),
            watcher::Event::InitDone,
        ] {
            index.observe(&store, &event);
            writer.apply_watcher_event(&event);
        }
        // "gone" was deleted while the watch was lost: only the list says so.
        assert_eq!(
            names(index.referrers("team-a", "GpuInstance", "gi-1")),
            ["gone"]
        );
        index.rebuild(&store.state());
        assert!(index.referrers("team-a", "GpuInstance", "gi-1").is_empty());
        assert_eq!(
            names(index.referrers("team-a", "GpuInstance", "gi-2")),
            ["data"]
        );
    }
}
