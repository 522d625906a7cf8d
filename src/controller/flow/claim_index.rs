//! Which objects of a kind claim a cloud resource: the index an ownership check is looked up
//! in, so that asking "whose is `vm-123`?" costs the claimants, not a pass over the kind.
//!
//! An object claims the id its status records and the cloud names it may carry (the one its
//! status records, and the one its namespace, name and uid give). Every adoption, every id a
//! spec names and every recorded id not named for its object is checked against the claims of
//! the whole cluster; read by a scan of each store, those checks cost a pass over 100,000
//! objects for every reference followed.
//!
//! Kept like the referrer index (`referrer_index.rs`): from the controller's object watch,
//! before its store takes each event, and rebuilt from the store after a complete list. It
//! holds hashes only (of each claim, and of the claimant's namespace and name, under the
//! store's seed); a lookup reads the candidates from the store and keeps those whose claim
//! matches exactly, so a shared hash costs a comparison, never a wrong answer.

use crate::flow::declarations::KindDeclarations;
use crate::flow::naming;
use crate::lock;
use crate::runtime::applier::key_of;
use crate::runtime::store::Store;
use kube::ResourceExt;
use kube::runtime::watcher;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The claimants of each claim, as store hashes.
#[derive(Default)]
pub struct ClaimIndex {
    by_claim: Mutex<HashMap<u64, Vec<u64>>>,
}

/// What `object` claims: the id its status records, the cloud name its status records, and the
/// cloud name its namespace, name and uid give.
pub fn claims_of<K: KindDeclarations>(object: &K) -> Vec<String> {
    let status = object.cloud_status();
    let own = naming::cloud_name(
        object.namespace().as_deref().unwrap_or_default(),
        &object.name_any(),
        object.uid().as_deref().unwrap_or_default(),
    );
    let mut claims: Vec<String> = status.external_id.into_iter().collect();
    claims.extend(status.cloud_name.filter(|name| *name != own));
    claims.push(own);
    claims
}

impl ClaimIndex {
    /// Takes in one event of the kind's watch; `store` is the controller's store before it
    /// takes the same event.
    pub fn observe<K: KindDeclarations>(&self, store: &Store<K>, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                let mut by_claim = lock(&self.by_claim);
                if let Some(stored) = store.get(&key_of(object)) {
                    remove(&mut by_claim, store, &*stored);
                }
                if matches!(event, watcher::Event::Apply(_)) {
                    add(&mut by_claim, store, object);
                } else {
                    remove(&mut by_claim, store, object);
                }
            }
            // A list is taken in whole at its end (`rebuild`).
            watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => {}
        }
    }

    /// Builds the index again from the store, once a list is in it.
    pub fn rebuild<K: KindDeclarations>(&self, store: &Store<K>) {
        let mut fresh = HashMap::new();
        for object in store.state() {
            add(&mut fresh, store, &*object);
        }
        *lock(&self.by_claim) = fresh;
    }

    /// The objects of the store that claim `claim` (an id or a cloud name), as it holds them
    /// now; the caller compares each claim exactly.
    pub fn candidates<K: KindDeclarations>(&self, store: &Store<K>, claim: &str) -> Vec<Arc<K>> {
        let claimants = lock(&self.by_claim)
            .get(&store.hash_value(claim))
            .cloned()
            .unwrap_or_default();
        claimants
            .into_iter()
            .flat_map(|object| store.with_hash(object))
            .collect()
    }
}

fn add<K: KindDeclarations>(by_claim: &mut HashMap<u64, Vec<u64>>, store: &Store<K>, object: &K) {
    let claimant = store.hash_of(&key_of(object));
    for claim in claims_of(object) {
        let claimants = by_claim
            .entry(store.hash_value(claim.as_str()))
            .or_default();
        if !claimants.contains(&claimant) {
            claimants.push(claimant);
        }
    }
}

fn remove<K: KindDeclarations>(
    by_claim: &mut HashMap<u64, Vec<u64>>,
    store: &Store<K>,
    object: &K,
) {
    let claimant = store.hash_of(&key_of(object));
    for claim in claims_of(object) {
        let hash = store.hash_value(claim.as_str());
        if let Some(claimants) = by_claim.get_mut(&hash) {
            claimants.retain(|c| *c != claimant);
            if claimants.is_empty() {
                by_claim.remove(&hash);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use gpucloud_api::GpuInstance;

    fn machine(namespace: &str, name: &str, id: Option<&str>) -> GpuInstance {
        let mut machine: GpuInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")},
            "spec": {"region": "us-east-1", "gpuType": "L40S", "osImage": "ubuntu-22.04"},
        }))
        .unwrap();
        let mut status = machine.status.clone().unwrap_or_default();
        status.cloud.external_id = id.map(str::to_string);
        machine.status = Some(status);
        machine
    }

    fn names(found: Vec<Arc<GpuInstance>>) -> Vec<String> {
        let mut names: Vec<String> = found.iter().map(|o| o.name_any()).collect();
        names.sort();
        names
    }

    #[test]
    fn claims_follow_the_watch_and_a_relist() {
        let (store, mut writer) = crate::runtime::store::store::<GpuInstance>();
        let index = ClaimIndex::default();
        let events = [
            watcher::Event::Apply(machine("team-a", "a", Some("vm-1"))),
            watcher::Event::Apply(machine("team-c", "forged", Some("vm-1"))),
            watcher::Event::Apply(machine("team-a", "b", Some("vm-2"))),
        ];
        for event in events {
            index.observe(&store, &event);
            writer.apply(event);
        }
        assert_eq!(names(index.candidates(&store, "vm-1")), ["a", "forged"]);
        let own = naming::cloud_name("team-a", "b", "uid-b");
        assert_eq!(names(index.candidates(&store, &own)), ["b"]);

        // A changed record moves; a deleted object claims nothing.
        for event in [
            watcher::Event::Apply(machine("team-c", "forged", Some("vm-9"))),
            watcher::Event::Delete(machine("team-a", "b", Some("vm-2"))),
        ] {
            index.observe(&store, &event);
            writer.apply(event);
        }
        assert_eq!(names(index.candidates(&store, "vm-1")), ["a"]);
        assert_eq!(names(index.candidates(&store, "vm-9")), ["forged"]);
        assert!(index.candidates(&store, "vm-2").is_empty());
        assert!(index.candidates(&store, &own).is_empty());

        // A relist replaces everything.
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(machine("team-b", "new", Some("vm-1"))),
            watcher::Event::InitDone,
        ] {
            index.observe(&store, &event);
            writer.apply(event);
        }
        index.rebuild(&store);
        assert_eq!(names(index.candidates(&store, "vm-1")), ["new"]);
        assert!(index.candidates(&store, "vm-9").is_empty());
    }
}
