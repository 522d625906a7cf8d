//! A kube-runtime Controller and a reflector run against the server under a steady load of
//! creates, updates and deletes, with history compacted several times (forcing 410 Expired and
//! re-lists). Nothing may fail except the expected 410s, the reflector must re-list after each
//! compaction, and at the end the reflector's cache and the controller's work must match the
//! server's state exactly.
//!
//! The soak lasts 30 s in the suite (four compactions whatever its length);
//! `GPUCLOUD_SOAK_SECONDS=600` is its long mode.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, ResourceExt};
use kube::runtime::controller::{Action, Controller, Error as ControllerError};
use kube::runtime::reflector::{self, reflector};
use kube::runtime::watcher::{self, Event};
use kube::{CustomResource, CustomResourceExt};
use kube_support::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "soak.gpucloud.io",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub struct WidgetSpec {
    pub value: i64,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct WidgetStatus {
    pub observed: i64,
}

#[derive(Debug, thiserror::Error)]
#[error("status write failed: {0}")]
struct ReconcileError(#[source] kube::Error);

struct Context {
    api: Api<Widget>,
    reconciles: AtomicUsize,
}

async fn reconcile(widget: Arc<Widget>, context: Arc<Context>) -> Result<Action, ReconcileError> {
    context.reconciles.fetch_add(1, Ordering::Relaxed);
    let observed = widget.status.as_ref().map(|status| status.observed);
    if observed != Some(widget.spec.value) {
        let patch = Patch::Merge(json!({"status": {"observed": widget.spec.value}}));
        match context
            .api
            .patch_status(&widget.name_any(), &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {}
            // Deleted since the event: nothing left to reconcile.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(ReconcileError(error)),
        }
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Widget>, _: &ReconcileError, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

fn soak_duration() -> Duration {
    let seconds = std::env::var("GPUCLOUD_SOAK_SECONDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(seconds)
}

/// Unexpected errors seen by the controller or the reflector, for the final assertion.
#[derive(Default)]
struct Observed {
    unexpected: std::sync::Mutex<Vec<String>>,
    expired: AtomicUsize,
    relists: AtomicUsize,
}

impl Observed {
    fn watcher_error(&self, error: &watcher::Error) {
        match error {
            watcher::Error::WatchError(status) if status.code == 410 => {
                self.expired.fetch_add(1, Ordering::Relaxed);
            }
            other => self.unexpected.lock().unwrap().push(other.to_string()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_and_reflector_survive_load_and_compaction() {
    let (server, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    bounded(crds.create(&PostParams::default(), &Widget::crd()))
        .await
        .unwrap();
    let api: Api<Widget> = Api::namespaced(client.clone(), "default");
    let observed = Arc::new(Observed::default());

    let (reader, writer) = reflector::store::<Widget>();
    let reflector_task = {
        let observed = observed.clone();
        let stream = reflector(
            writer,
            watcher::watcher(api.clone(), watcher::Config::default()),
        );
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(Event::Init) => {
                        observed.relists.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(error) => observed.watcher_error(&error),
                }
            }
        })
    };

    let context = Arc::new(Context {
        api: api.clone(),
        reconciles: AtomicUsize::new(0),
    });
    let controller_task = {
        let observed = observed.clone();
        let controller = Controller::new(api.clone(), watcher::Config::default()).run(
            reconcile,
            error_policy,
            context.clone(),
        );
        tokio::spawn(async move {
            let mut controller = std::pin::pin!(controller);
            while let Some(result) = controller.next().await {
                match result {
                    Ok(_) => {}
                    Err(ControllerError::QueueError(error)) => observed.watcher_error(&error),
                    // A reconcile scheduled for an object deleted meanwhile: expected under
                    // deletes (kube-runtime documents it as such).
                    Err(ControllerError::ObjectNotFound(_)) => {}
                    Err(other) => observed.unexpected.lock().unwrap().push(other.to_string()),
                }
            }
        })
    };

    // Load: create, update and delete 20 widgets in turn; compact history four times.
    let duration = soak_duration();
    let started = tokio::time::Instant::now();
    let compactions = 4u32;
    let mut next_compaction = 1u32;
    let mut step: i64 = 0;
    while started.elapsed() < duration {
        step += 1;
        let name = format!("w{}", step % 20);
        let result = match step % 7 {
            0 => bounded(api.delete(&name, &DeleteParams::default()))
                .await
                .map(|_| ()),
            1 | 2 => bounded(api.create(
                &PostParams::default(),
                &Widget::new(&name, WidgetSpec { value: step }),
            ))
            .await
            .map(|_| ()),
            _ => bounded(api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"value": step}})),
            ))
            .await
            .map(|_| ()),
        };
        match result {
            Ok(()) => {}
            // The sequence deliberately hits missing and existing names.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(error) => panic!("load request failed: {error}"),
        }
        if next_compaction <= compactions
            && started.elapsed() >= duration * next_compaction / (compactions + 1)
        {
            server.compact();
            next_compaction += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Converged: every widget's status shows its spec, and the reflector holds exactly the
    // server's objects at their current resourceVersions.
    let snapshot = |widgets: Vec<Widget>| -> BTreeMap<String, String> {
        widgets
            .into_iter()
            .map(|w| (w.name_any(), w.resource_version().unwrap_or_default()))
            .collect()
    };
    eventually(|| async {
        let list = bounded(api.list(&ListParams::default())).await.unwrap();
        let settled = list
            .items
            .iter()
            .all(|w| w.status.as_ref().map(|s| s.observed) == Some(w.spec.value));
        let cached = snapshot(reader.state().iter().map(|w| (**w).clone()).collect());
        (settled && cached == snapshot(list.items)).then_some(())
    })
    .await;

    let unexpected = observed.unexpected.lock().unwrap().clone();
    assert!(unexpected.is_empty(), "unexpected errors: {unexpected:?}");
    // Each compaction ends both watches with a 410 and makes the reflector list again.
    assert!(
        observed.expired.load(Ordering::Relaxed) >= compactions as usize,
        "410s seen: {}",
        observed.expired.load(Ordering::Relaxed)
    );
    assert!(
        observed.relists.load(Ordering::Relaxed) > compactions as usize,
        "re-lists: {}",
        observed.relists.load(Ordering::Relaxed)
    );
    assert!(context.reconciles.load(Ordering::Relaxed) > 0);
    reflector_task.abort();
    controller_task.abort();
    server.shutdown().await;
}
