//! A few hundred concurrent creates and deletes of several kinds, then a consistency check:
//! no lost or duplicated resources, and the counters add up to the requests made.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{config, start};
use reqwest::Method;
use serde_json::{Value, json};

const PER_KIND: usize = 60;

/// Collection path, request body of the i-th resource, wrapper key and id field.
type Kind = (&'static str, fn(usize) -> Value, &'static str, &'static str);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_and_deletes_leave_a_consistent_state() {
    let sim = Arc::new(start(config()).await);
    let kinds: [Kind; 4] = [
        (
            "/volumes/",
            |i| json!({"name": format!("vol-{i}"), "size": 10, "region": "us-east-1"}),
            "volume",
            "id",
        ),
        (
            "/firewalls/",
            |i| json!({"name": format!("fw-{i}"), "region": "eu-west-1"}),
            "firewall",
            "id",
        ),
        (
            "/startup-scripts/",
            |i| json!({"name": format!("script-{i}"), "content": "echo hi"}),
            "script",
            "id",
        ),
        (
            "/instances/",
            |i| {
                json!({"name": format!("vm-{i}"), "region": "ap-southeast-1", "gpu_type": "RTX-A6000",
                   "gpu_count": 1, "image_id": "ubuntu-22.04-cuda-12"})
            },
            "instance",
            "instance_id",
        ),
    ];

    // Phase 1: create PER_KIND of each kind, all at once.
    let mut tasks = Vec::new();
    for (path, body, wrapper, id_field) in kinds {
        for i in 0..PER_KIND {
            let sim = sim.clone();
            tasks.push(tokio::spawn(async move {
                let created = sim.post(path, body(i)).await.ok();
                (
                    path,
                    created[wrapper][id_field].as_str().unwrap().to_string(),
                )
            }));
        }
    }
    let mut created: Vec<(&str, String)> = Vec::new();
    for task in tasks {
        created.push(
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("bounded")
                .unwrap(),
        );
    }
    let ids: BTreeSet<&String> = created.iter().map(|(_, id)| id).collect();
    assert_eq!(ids.len(), created.len(), "ids are unique");

    // Phase 2: delete every other resource, concurrently with reads.
    let mut tasks = Vec::new();
    for (index, (path, id)) in created.iter().enumerate() {
        let sim = sim.clone();
        let url = format!("{path}{id}/");
        let delete = index % 2 == 0;
        tasks.push(tokio::spawn(async move {
            if delete {
                sim.send(Method::DELETE, &url, None).await.ok();
            } else {
                sim.get(&url).await.ok();
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("bounded")
            .unwrap();
    }
    sim.settle();

    let kept: BTreeSet<String> = created
        .iter()
        .enumerate()
        .filter(|(index, _)| index % 2 == 1)
        .map(|(_, (_, id))| id.clone())
        .collect();
    let state = sim.handle.state();
    let mut present: Vec<String> = Vec::new();
    present.extend(
        state
            .volumes
            .iter()
            .filter(|v| !v.bootable)
            .map(|v| v.id.clone()),
    );
    present.extend(state.firewalls.iter().map(|f| f.id.clone()));
    present.extend(state.scripts.iter().map(|s| s.id.clone()));
    present.extend(state.instances.iter().map(|i| i.instance_id.clone()));
    let present_set: BTreeSet<String> = present.iter().cloned().collect();
    assert_eq!(present.len(), present_set.len(), "no duplicates");
    assert_eq!(present_set, kept, "exactly the kept resources remain");
    // Each remaining instance kept its boot volume; deleted ones took theirs along.
    assert_eq!(
        state.volumes.iter().filter(|v| v.bootable).count(),
        state.instances.len()
    );

    let counts = sim.handle.call_counts();
    let total: u64 = counts.values().sum();
    assert_eq!(total as usize, created.len() * 2);
    assert_eq!(counts["CreateVolume"] as usize, PER_KIND);
    assert_eq!(counts["CreateInstance"] as usize, PER_KIND);
    assert_eq!(
        (counts["DeleteVolume"] + counts["GetVolume"]) as usize,
        PER_KIND
    );
    let statuses = sim.handle.counters();
    assert!(
        statuses
            .operations
            .values()
            .all(|by_status| by_status.keys().all(|status| *status == 200)),
        "{statuses:?}"
    );
    let Ok(sim) = Arc::try_unwrap(sim) else {
        panic!("all tasks finished");
    };
    sim.handle.shutdown().await;
}
