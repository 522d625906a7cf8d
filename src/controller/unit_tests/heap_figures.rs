//! Heap held per watched object by the structures kept for each one: an account's cloud list,
//! its billing, and the writes read back before the watch brings them (`own_writes.rs`).
//!
//! Counted with a counting allocator, which this crate's unit tests run on: the bytes asked
//! for and not given back (what the allocator rounds up to is not counted). The figures are
//! printed, never judged, and are exact only while no other test allocates, so the test is
//! ignored and run alone:
//!
//! `cargo test -p gpucloud-controller --lib heap_figures -- --ignored --nocapture --test-threads=1`

use crate::accounts::account::{BillingCache, BillingList, Charge};
use crate::accounts::observer::CloudList;
use crate::flow::naming::cloud_name;
use crate::runtime::own_writes::OwnWrites;
use gpucloud_cloud::model::Instance;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::Event;
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use std::time::Instant;

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Objects per figure.
const OBJECTS: usize = 10_000;

/// The bytes `build` leaves allocated, with what it built.
fn held<T>(build: impl FnOnce() -> T) -> (T, i128) {
    let region = Region::new(ALLOCATOR);
    let built = build();
    let change = region.change();
    let held = i128::try_from(change.bytes_allocated).unwrap()
        - i128::try_from(change.bytes_deallocated).unwrap();
    (built, held)
}

fn report(what: &str, bytes: i128) {
    let per_object = bytes / i128::try_from(OBJECTS).unwrap();
    println!("{what}: {bytes} B in all, {per_object} B per object ({OBJECTS} objects)");
}

/// The cloud name and id of object `i`, shaped as the operator and the cloud make them.
fn names(i: usize) -> (String, String) {
    let name = cloud_name("team-ml", &format!("trainer-{i}"), &format!("uid-{i:08}"));
    (name, format!("vm-{i:012x}"))
}

/// A machine as the cloud lists it.
fn instance(i: usize) -> serde_json::Value {
    let (name, id) = names(i);
    json!({
        "instance_id": id, "vm_name": name, "ip_address": "203.0.113.7",
        "ip_status": "assigned", "billing": {"hourly_rate": 2.5, "currency": "USD"},
        "specs": {"gpu_type": "A100-80G", "gpu_count": 1, "ram_gb": 64, "vcpus": 8,
                  "storage_gb": 500},
        "status": "ACTIVE", "boot_source": "image", "created_at": "2026-11-01T00:00:00Z",
        "region": "eu-west-1", "tier": "advanced", "vm_status": "RUNNING",
        "image_id": "img-ubuntu-22-04", "public_ip_enabled": true,
        "ssh_key_ids": [format!("key-{i:012x}")], "volume_ids": [format!("vol-{i:012x}")],
    })
}

fn cloud_list() {
    // The list's body as the client receives it, decoded as the client decodes it.
    let body = serde_json::to_vec(&(0..OBJECTS).map(instance).collect::<Vec<_>>()).unwrap();
    let (records, records_only) = held(|| serde_json::from_slice::<Vec<Instance>>(&body).unwrap());
    drop(records);
    let (list, listed) = held(|| {
        let records = serde_json::from_slice::<Vec<Instance>>(&body).unwrap();
        CloudList::from_records(records, 1, Instant::now())
    });
    assert_eq!(list.len(), OBJECTS);
    report("instance records alone, as decoded", records_only);
    report("CloudList of those records", listed);
}

fn billing() {
    let charge = |i: usize, suffix: &str| {
        let (name, _) = names(i);
        Charge::read(
            &format!("{name}{suffix}"),
            "2026-11-01T00:00:00Z",
            None,
            12.5,
        )
    };
    let (mut cache, read) = held(|| {
        let mut cache = BillingCache::default();
        // Each machine is billed once, and its system disk in the volume list.
        for (list, suffix) in [
            (BillingList::Instances, ""),
            (BillingList::Volumes, "-disk"),
        ] {
            let charges = (0..OBJECTS).filter_map(|i| charge(i, suffix)).collect();
            cache.store(list, Instant::now(), 1, charges, "USD".into());
        }
        cache
    });
    let (merged, merging) = held(|| cache.merged());
    assert!(merged.total_of(&names(7).0).is_some());
    report("billing cache, two lists read", read);
    report("billing cache, merged", merging);
    report("billing cache in all", read + merging);
}

fn own_writes() {
    let object = |i: usize, version: &str| {
        let mut map = ConfigMap::default();
        map.metadata.name = Some(format!("trainer-{i}"));
        map.metadata.namespace = Some("team-ml".into());
        map.metadata.uid = Some(format!("uid-{i:08}"));
        map.metadata.resource_version = Some(version.into());
        map
    };
    let (_, mut writer) = crate::runtime::store::store();
    let written: Vec<_> = (0..OBJECTS)
        .map(|i| (object(i, "1"), object(i, "2")))
        .collect();
    // The store has caught up with every write by the sweep.
    for (_, after) in &written {
        writer.apply_watcher_event(&Event::Apply(after.clone()));
    }
    let own = OwnWrites::new(writer.as_reader());
    let ((), burst) = held(|| {
        for (before, after) in &written {
            own.note(before, after);
        }
    });
    let ((), swept) = held(|| {
        own.sweep_due();
        own.note(&object(OBJECTS, "1"), &object(OBJECTS, "2"));
    });
    report("own writes, a burst kept", burst);
    report(
        "own writes, after a sweep that finds all caught up",
        burst + swept,
    );
}

#[test]
#[ignore = "prints figures, exact only when run alone (see the module's doc)"]
fn heap_figures() {
    cloud_list();
    billing();
    own_writes();
}
