//! The reconcile flow every kind shares: pause, finalizer, credentials, adoption, idempotent
//! create, convergence, status and conditions, deletion.
//!
//! One reconcile runs in stages, each in a file of its own:
//! - `apply`: dereference (the account its credentials open, that account's latest list)
//!   and validate (an ended lifetime, the adoption annotation, the recorded resource proven
//!   the object's in `records`); then one of the three stages below.
//! - `converge`: a listed resource, one step toward the spec: the kind's async `resolve`,
//!   its pure `plan`, at most one action; then the status.
//! - `create_step`: nothing recorded, or a create whose answer was lost: the pure create
//!   decision from the lists, the kind's create plan (its own dereference, then a pure plan),
//!   the reservations, the intent, one create call.
//! - `cleanup`: the finalizer's deletion.
//!
//! Every status write, failure report and event goes through `status`; every requeue through
//! `next`; lifetimes and wakes are in `expiry`. The stages refer to each other downward
//! only (apply to create_step to converge), never back to this module.

mod apply;
mod cleanup;
mod converge;
mod create_step;
mod expiry;
mod finalizer;
mod next;
mod records;
mod status;
#[cfg(test)]
mod tests;

pub(crate) use expiry::{lifetime_stage, wake_of};
pub(crate) use status::publish;

use crate::flow::conditions::{self, reason};
use crate::flow::context::{Awaited, Context};
use crate::flow::create::{self};
use crate::flow::error::Error;
use crate::flow::gauges::Next;
use crate::flow::kind::{ManagedKind, ObjectKey};
use crate::flow::recorded::{namespace, recorded_status};
use crate::runtime::applier;
use crate::runtime::fair_share::Work;
use apply::apply;
use cleanup::cleanup;
use finalizer::{add_finalizer, has_finalizer};
use gpucloud_api::{
    CREATE_INTENT_ANNOTATION, CloudStatus, EXTERNAL_ID_ANNOTATION, FINALIZER, ManagementPolicy,
    PAUSED_ANNOTATION,
};
use gpucloud_telemetry::ReconcileResult;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::{Api, Resource, ResourceExt};
use next::{NEXT, await_change, no_later_than};
use status::report_failure;
use std::cell::Cell;
use std::sync::Arc;
use tracing::Instrument;

/// Entry point for the kind's applier (`applier.rs`), which starts every due reconcile at once:
/// a slot of the object's account first (`fair_share.rs`), then the flow, whose cloud calls
/// take the account's rate-limit tokens in their namespace's turn (`gpucloud_cloud::limiter`). The flow's future is
/// boxed once the slot is taken, so a reconcile waiting for one costs only this small future.
pub async fn reconcile<K: ManagedKind>(
    object: Arc<K>,
    cx: Arc<Context<K>>,
) -> Result<applier::Action, Error> {
    let waiting = {
        let namespace = namespace(&*object);
        let lane = cx
            .accounts
            .secret_for(&namespace, object.managed().credentials_secret_ref.as_ref())
            .map(|location| format!("{}/{}/{}", location.namespace, location.name, location.key))
            .unwrap_or_default();
        cx.fair_share.slot(&lane, &namespace, work_of(&*object))
    };
    let _slot = waiting.await;
    // The copy handed over when the reconcile started may be older than the slot: the store's
    // copy now has what the object's previous reconcile wrote while this one waited (a
    // finalizer, a status), so its writes do not meet 409 and its cleanup does not run twice.
    let object = cx
        .gauges
        .store()
        .get(&applier::key_of(&*object))
        .unwrap_or(object);
    // Nor may the store's copy have what this process wrote last, while the watch lags.
    let object = cx.own_writes.newest(object);
    // Within the account, its cloud calls wait for tokens in their team's turn too.
    gpucloud_cloud::limiter::in_share(
        Arc::from(namespace(&*object)),
        Box::pin(reconcile_in_slot(object, cx)),
    )
    .await
}

/// Whether a reconcile of `object` is about to create its resource (nothing of one is recorded,
/// pending or named for adoption, and the object is not going) or works on one that exists:
/// the two take turns for their namespace's slots (`fair_share.rs`).
fn work_of<K: ManagedKind>(object: &K) -> Work {
    let status = object.cloud_status();
    let annotations = object.annotations();
    let nothing_recorded = !create::records_create(&status)
        && !annotations.contains_key(CREATE_INTENT_ANNOTATION)
        && !annotations.contains_key(EXTERNAL_ID_ANNOTATION);
    if nothing_recorded && object.meta().deletion_timestamp.is_none() {
        Work::Create
    } else {
        Work::Existing
    }
}

/// The flow, timed and counted. What it asks for next is what it told `NEXT`: every answer of
/// the flow but the finalizer helper's (which waits for a change) goes through `requeue`,
/// `await_change` or `settled`, and kube-runtime's `Action` does not tell its requeue.
async fn reconcile_in_slot<K: ManagedKind>(
    object: Arc<K>,
    cx: Arc<Context<K>>,
) -> Result<applier::Action, Error> {
    let key = applier::key_of(&*object);
    cx.gauges.started(&key);
    let timer = cx.metrics.reconcile_started(&K::kind(&()));
    let span = tracing::info_span!(
        "reconcile",
        kind = %K::kind(&()),
        namespace = %namespace(&*object),
        name = %object.name_any(),
        cloud_id = %object.cloud_status().external_id.unwrap_or_default(),
    );
    let (result, next) = NEXT
        .scope(
            Cell::new(None),
            async {
                let result = reconcile_flow(object, &cx).await;
                (result, NEXT.with(Cell::get))
            }
            .instrument(span),
        )
        .await;
    timer.finish(match (&result, next) {
        (Ok(_), Some(Next::Requeue(after))) => ReconcileResult::RequeueAfter(after),
        (Ok(_), _) => ReconcileResult::Done,
        (Err(error), _) => ReconcileResult::Failed {
            label: error.metric_label(),
            terminal: error.category() == crate::flow::error::Category::Terminal,
        },
    });
    match &result {
        Ok(_) => tracing::debug!(
            kind = %K::kind(&()), name = %key.name, next = ?next, "reconcile done"
        ),
        Err(error) => tracing::debug!(
            kind = %K::kind(&()), name = %key.name, %error, "reconcile failed"
        ),
    }
    // After an error, `error_policy` decides when to come back.
    cx.gauges.finished(&key, result.as_ref().ok().and(next));
    result.map(|_| match next {
        Some(Next::Requeue(after)) => applier::Action::requeue(after),
        Some(Next::Change | Next::Sweep) | None => applier::Action::await_change(),
    })
}

async fn reconcile_flow<K: ManagedKind>(
    object: Arc<K>,
    cx: &Arc<Context<K>>,
) -> Result<Action, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(cx.client.clone(), &namespace);
    let uid = object.uid().unwrap_or_default();
    if object.meta().deletion_timestamp.is_some() && cx.was_released(&uid) {
        // Released by this process already: this copy predates the finalizer's removal.
        return Ok(await_change());
    }
    if paused(&*object) {
        show_paused(&api, &object, cx.settings.clock.now()).await;
        return Ok(await_change());
    }
    let object = with_annotated_intent(object);
    let apply_event = |object: Arc<K>| async {
        // Whatever the flow decides, the object is looked at again at its next wake: one
        // timer per object, read from the object, so no polling.
        let clock = cx.settings.clock;
        let wake = wake_of(&*object, clock.now());
        apply(&api, object, cx)
            .await
            .map(|action| no_later_than(action, wake, &clock, cx.settings.observe.resync))
    };
    let cleaned_up = std::sync::atomic::AtomicBool::new(false);
    let result = if object.meta().deletion_timestamp.is_none() && !has_finalizer(&*object) {
        if first_create_ahead(&*object) {
            // Its finalizer comes with the create's intent, in one patch (`create_step`).
            apply_event(object.clone()).await
        } else {
            // The flow goes on with the object as written: the finalizer's news wakes no
            // reconcile (`run::intent_hash`).
            match add_finalizer(&api, cx, &object, None).await {
                Ok(patched) => apply_event(Arc::new(patched)).await,
                Err(error) => Err(error),
            }
        }
    } else {
        finalizer(&api, FINALIZER, object.clone(), |event| async {
            match event {
                FinalizerEvent::Apply(object) => apply_event(object).await,
                FinalizerEvent::Cleanup(object) => {
                    let done = cleanup(object, cx).await;
                    cleaned_up.store(done.is_ok(), std::sync::atomic::Ordering::Relaxed);
                    done
                }
            }
        })
        .await
        .map_err(|e| Error::Finalizer(Box::new(e)))
    };
    if cleaned_up.load(std::sync::atomic::Ordering::Relaxed) && result.is_ok() {
        // The helper removed the finalizer after the cleanup's success.
        cx.note_released(&uid);
    }
    match &result {
        Ok(_) => cx.requeue.reset(&object.key()),
        Err(error) => report_failure(&api, &object, cx, error).await,
    }
    result
}

/// The object as the flow reads it: a create whose intent only the annotation records (the
/// first one, written with the finalizer) shows as the status's `pendingCreate`, so every
/// step treats it as recorded there, and the next status write records it there.
fn with_annotated_intent<K: ManagedKind>(object: Arc<K>) -> Arc<K> {
    let status = recorded_status(&*object);
    if object.cloud_status_ref() == Some(&status)
        || (object.cloud_status_ref().is_none() && status == CloudStatus::default())
    {
        return object;
    }
    Arc::new(object.with_status(status, None, Timestamp::now()))
}

/// Whether all the flow can do for the object is a first create (nothing recorded, nothing
/// to adopt, not observe-only) that has not started: its finalizer is then added with the
/// create's intent, in one patch, rather than on its own first.
fn first_create_ahead<K: ManagedKind>(object: &K) -> bool {
    let status = object.cloud_status_ref();
    object.meta().deletion_timestamp.is_none()
        && !has_finalizer(object)
        && status.is_none_or(|s| {
            s.external_id.is_none() && s.pending_create.is_none() && s.cloud_name.is_none()
        })
        && object
            .annotations()
            .get(EXTERNAL_ID_ANNOTATION)
            .is_none_or(|id| id.is_empty())
        && object.managed().management_policy != ManagementPolicy::ObserveOnly
}

/// Whether the object asks the operator to leave it alone for now.
pub fn paused<K: Resource>(object: &K) -> bool {
    object
        .annotations()
        .get(PAUSED_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// Best effort: a paused object says so in its `Paused` condition (the next reconcile after
/// the annotation is removed clears it). A failed write is shown by the next change.
async fn show_paused<K: ManagedKind>(api: &Api<K>, object: &K, now: Timestamp) {
    let mut status = object.cloud_status();
    if conditions::pause(
        &mut status.conditions,
        object.meta().generation,
        Timestamp::now(),
    ) {
        let updated = object.with_status(status, None, now);
        if let Err(error) = api
            .replace_status(&object.name_any(), &PostParams::default(), &updated)
            .await
        {
            tracing::debug!(%error, "the Paused condition was not written");
        }
    }
}

/// Entry point for kube-runtime's `error_policy`.
pub fn error_policy<K: ManagedKind>(
    object: Arc<K>,
    error: &Error,
    cx: Arc<Context<K>>,
) -> applier::Action {
    let account = || {
        let namespace = object.meta().namespace.as_deref().unwrap_or_default();
        let reference = object.managed().credentials_secret_ref.as_ref();
        cx.accounts
            .secret_for(namespace, reference)
            .and_then(|location| cx.accounts.resolved(&location))
    };
    let after = if let Some(wants) = error.capacity_wants()
        && let Some(account) = account()
    {
        // Woken when the account's catalog shows stock it could use; the resync (whose pass
        // reads the catalog the account caches, not the cloud) is only a backstop.
        cx.wait_in_account(
            &account,
            applier::key_of(&*object),
            Awaited::Stock(wants.to_vec()),
        );
        cx.settings.observe.resync
    } else if let Some(floor) = error.credit_floor()
        && let Some(account) = account()
    {
        // Woken when a read of the balance shows it at the floor again; the recheck is only
        // a backstop.
        cx.wait_in_account(&account, applier::key_of(&*object), Awaited::Credit(floor));
        cx.requeue.after_failure(&object.key(), error)
    } else if error.reason() == reason::ADOPTION_NOT_ALLOWED {
        // The namespace's label can change at any time, and nothing watches namespaces: one
        // read of its metadata per resync interval tells, rather than the terminal recheck.
        cx.settings.observe.resync
    } else if error.is_waiting_for_reference() {
        // Woken by the watch on the referenced kind; the resync is only a backstop.
        cx.settings.observe.resync
    } else if error.is_outage()
        && let Some(account) = account()
    {
        if account.is_down() {
            // The account's cloud is down (its lists fail): wait for it to answer again (the
            // resync is only a backstop), without growing this object's own backoff.
            cx.wait_for_recovery(&account, applier::key_of(&*object));
            cx.settings.observe.resync
        } else {
            // One call failed: the account's next list, sent soon, tells whether the cloud is
            // down; until then this object backs off on its own, and other objects' calls
            // that succeed are not held for it.
            cx.observer(&account).mark_hot();
            cx.requeue.after_failure(&object.key(), error)
        }
    } else {
        cx.requeue.after_failure(&object.key(), error)
    };
    cx.gauges.due_in(&applier::key_of(&*object), after);
    tracing::debug!(
        kind = %K::kind(&()), namespace = %namespace(&*object), name = %object.name_any(),
        retry_in = ?after, "retrying after an error"
    );
    applier::Action::requeue(after)
}
