//! Scale benchmark: prints figures, asserts only correctness (counts), never timings.
//!
//! `cargo test --release -p gpucloud-apiserver --test kube kube_scale -- --ignored --nocapture`
//! (`GPUCLOUD_SCALE_OBJECTS` sets the number of custom resources, 50,000 by default).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{CustomResource, CustomResourceExt};
use kube_support::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(group = "scale.gpucloud.io", version = "v1", kind = "Item", namespaced)]
pub struct ItemSpec {
    pub size: i64,
    pub region: String,
    pub note: String,
}

fn resident_megabytes() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map(|kilobytes| kilobytes / 1024.0)
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints figures; run with --release -- --ignored --nocapture"]
async fn scale_figures() {
    let total: usize = std::env::var("GPUCLOUD_SCALE_OBJECTS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(50_000);
    let (server, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    bounded(crds.create(&PostParams::default(), &Item::crd()))
        .await
        .unwrap();
    let api: Api<Item> = Api::namespaced(client.clone(), "default");

    // Ten watchers count every ADDED event while the objects are created.
    let watchers_seen = Arc::new(AtomicUsize::new(0));
    let mut watchers = Vec::new();
    for _ in 0..10 {
        let stream = bounded(api.watch(&WatchParams::default().timeout(600), "0"))
            .await
            .unwrap();
        let seen = watchers_seen.clone();
        watchers.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(event)) = stream.next().await {
                if matches!(event, WatchEvent::Added(_)) {
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    let memory_before = resident_megabytes();
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..16 {
        let client = bounded(server.kube_client()).await.unwrap();
        let next = next.clone();
        clients.push(tokio::spawn(async move {
            let api: Api<Item> = Api::namespaced(client, "default");
            loop {
                let position = next.fetch_add(1, Ordering::Relaxed);
                if position >= total {
                    return;
                }
                let mut item = Item::new(
                    &format!("item-{position:06}"),
                    ItemSpec {
                        size: (position % 8) as i64 + 1,
                        region: "eu-1".into(),
                        note: "x".repeat(200),
                    },
                );
                let labels = [("shard".to_string(), (position % 100).to_string())];
                item.metadata.labels = Some(labels.into_iter().collect());
                bounded(api.create(&PostParams::default(), &item))
                    .await
                    .unwrap();
            }
        }));
    }
    for task in clients {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    println!(
        "created {total} custom resources from 16 clients in {:.1} s: {:.0} creates/s",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    println!(
        "resident memory: {memory_before:.0} MB before, {:.0} MB after ({:.0} MB for the objects, their history and the clients)",
        resident_megabytes(),
        resident_megabytes() - memory_before
    );

    let caught_up = Instant::now();
    eventually(|| async { (watchers_seen.load(Ordering::Relaxed) >= total * 10).then_some(()) })
        .await;
    println!(
        "10 watchers received all {} ADDED events, {} ms after the last create",
        total,
        caught_up.elapsed().as_millis()
    );

    for _ in 0..3 {
        let started = Instant::now();
        let list = bounded(api.list(&ListParams::default().limit(10_000)))
            .await
            .unwrap();
        assert_eq!(list.items.len(), 10_000.min(total));
        println!(
            "LIST of {} objects: {} ms",
            list.items.len(),
            started.elapsed().as_millis()
        );
    }
    for _ in 0..3 {
        // The same LIST read as raw bytes: the server's share without client-side decoding.
        let started = Instant::now();
        let request =
            http::Request::get("/apis/scale.gpucloud.io/v1/namespaces/default/items?limit=10000")
                .body(Vec::new())
                .unwrap();
        let body = bounded(client.request_text(request)).await.unwrap();
        println!(
            "LIST of 10000 as bytes ({} kB): {} ms",
            body.len() / 1024,
            started.elapsed().as_millis()
        );
    }
    for _ in 0..3 {
        let started = Instant::now();
        let list = bounded(api.list(&ListParams::default().labels("shard=7")))
            .await
            .unwrap();
        println!(
            "label-selected LIST ({} of {total}): {} ms",
            list.items.len(),
            started.elapsed().as_millis()
        );
    }
    for watcher in watchers {
        watcher.abort();
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    server.shutdown().await;
}
