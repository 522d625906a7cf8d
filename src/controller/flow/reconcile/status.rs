//! The status and events: every status write of the flow (version-checked, skipped when it
//! would retell work under way), the failure report, and events.

use crate::flow::conditions::{self, Outcome, reason};
use crate::flow::context::Context;
use crate::flow::error::Error;
use crate::flow::kind::{ManagedKind, ObjectKey, Record};
use crate::flow::recorded::recorded_status;
use crate::runtime::events::{self, EventType};
use gpucloud_api::CloudStatus;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use std::sync::Arc;

/// Writes the status through the status subresource with the object's resourceVersion, so a
/// write based on a stale read fails with a conflict instead of overwriting newer state. Skips
/// the write when nothing would change. Returns the object as stored.
pub(super) async fn write_status<K: ManagedKind>(
    api: &Api<K>,
    cx: &Context<K>,
    object: &K,
    status: CloudStatus,
    record: Option<&Record<K>>,
    outcome: &Outcome,
) -> Result<K, Error> {
    write_status_from(
        api,
        cx,
        object,
        object,
        status,
        record,
        outcome,
        Write::Always,
    )
    .await
}

/// As `write_status` for a report of work under way: not written when it only retells a
/// transition the stored status already shows (`retells_progress`).
pub(super) async fn write_progress<K: ManagedKind>(
    api: &Api<K>,
    cx: &Context<K>,
    object: &K,
    status: CloudStatus,
    outcome: &Outcome,
) -> Result<K, Error> {
    write_status_from(api, cx, object, object, status, None, outcome, Write::News).await
}

/// When a status write is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Write {
    /// Whenever anything would change.
    Always,
    /// Only with news for a person or for the next reconcile: not when it only retells a
    /// transition the stored status already shows under way (`retells_progress`).
    News,
}

/// Whether `updated` only retells what `stored` shows: both report the same work under way
/// (`Reconciling`, for the same generation, with the same reasons), and nothing but the cloud's
/// state, the conditions' messages and the kind's copy of the cloud record differs. The states
/// a machine passes through while it boots are such steps; the end of the transition (Ready,
/// Stalled), an id recorded, a create's intent set or cleared are not. A create waiting for the
/// cloud's list to show it is the same transition as the create.
pub(super) fn retells_progress(stored: &CloudStatus, updated: &CloudStatus) -> bool {
    let under_way = |s: &CloudStatus| {
        s.condition(gpucloud_api::condition_type::RECONCILING)
            .is_some_and(|c| c.status == "True")
    };
    let transition = |reason: &str| {
        if reason == reason::WAITING_FOR_CLOUD_LIST {
            reason::CREATING.to_string()
        } else {
            reason.to_string()
        }
    };
    let shape = |s: &CloudStatus| {
        let mut shape: Vec<_> = s
            .conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    transition(&c.reason),
                    c.observed_generation,
                )
            })
            .collect();
        shape.sort();
        shape
    };
    let recorded = |s: &CloudStatus| CloudStatus {
        state: None,
        conditions: Vec::new(),
        ..s.clone()
    };
    under_way(stored)
        && under_way(updated)
        && shape(stored) == shape(updated)
        && recorded(stored) == recorded(updated)
}

/// As `write_status`, with the kind's own status fields taken from `working`, a copy of
/// `stored` that a kind's executed action may have annotated (`ManagedKind::executed`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn write_status_from<K: ManagedKind>(
    api: &Api<K>,
    cx: &Context<K>,
    stored: &K,
    working: &K,
    mut status: CloudStatus,
    record: Option<&Record<K>>,
    outcome: &Outcome,
    write: Write,
) -> Result<K, Error> {
    let generation = stored.meta().generation;
    status.observed_generation = generation;
    conditions::apply(
        &mut status.conditions,
        outcome,
        generation,
        Timestamp::now(),
    );
    // The kind's time-dependent fields (a schedule's next transition) by the operator's
    // clock; the condition's transition time above is the wall clock's, as events are.
    let updated = working.with_status(status, record, cx.settings.clock.now());
    // The status subresource writes the status alone, so an unchanged status is no write.
    // Compared as values: serializing the whole object twice per reconcile to compare was a
    // tenth of the operator's CPU at 100,000 objects.
    if updated.status() == stored.status() {
        return Ok(updated);
    }
    if write == Write::News && retells_progress(&stored.cloud_status(), &updated.cloud_status()) {
        return Ok(stored.clone());
    }
    let written = api
        .replace_status(&stored.name_any(), &PostParams::default(), &updated)
        .await?;
    cx.own_writes.note(stored, &written);
    Ok(written)
}

/// A refused API key is shown with where the key comes from (the Secret's name and key,
/// never its value): the one place to fix it.
pub(super) fn named_credentials<K: ManagedKind>(
    cx: &Context<K>,
    object: &K,
    outcome: Outcome,
) -> Outcome {
    if outcome.reason() != reason::CREDENTIALS_INVALID {
        return outcome;
    }
    let namespace = object.meta().namespace.as_deref().unwrap_or_default();
    let reference = object.managed().credentials_secret_ref.as_ref();
    match cx.accounts.secret_for(namespace, reference) {
        Some(secret) => Outcome::stalled(
            reason::CREDENTIALS_INVALID,
            format!(
                "{}; the API key is read from key {:?} of Secret {}/{}: put a valid key there, and the object is tried again when the Secret changes",
                outcome.message(),
                secret.key,
                secret.namespace,
                secret.name
            ),
        ),
        None => outcome,
    }
}

/// Best effort: puts the failure on the object's conditions and a Warning event (a Normal one
/// for work under way, such as a deletion waiting for the cloud).
pub(super) async fn report_failure<K: ManagedKind>(
    api: &Api<K>,
    object: &Arc<K>,
    cx: &Context<K>,
    error: &Error,
) {
    if error.is_stale_write() || error.is_passing() {
        // Not a failure: the object changed since it was read, and the retry (a second away)
        // reads it again. Reporting it would change the object once more and make that retry
        // stale too, for as long as the cache lags. Work passing within a transition interval
        // is told by its end.
        return;
    }
    let outcome = named_credentials(cx, &**object, error.outcome());
    let backstops = cx.requeue.backstops(cx.settings.observe.resync);
    let outcome = match error.next_look(backstops) {
        Some(look) => outcome.noted(&look),
        None => outcome,
    };
    let status = object.cloud_status();
    if changed_condition(&status, &outcome) {
        // Work under way (a deletion waiting for the cloud) is no failure.
        let event_type = if error.is_in_progress() {
            EventType::Normal
        } else {
            EventType::Warning
        };
        publish(cx, object, event_type, outcome.reason(), outcome.message());
    }
    let reported = match write_status(api, cx, object, status, None, &outcome).await {
        Ok(_) => true,
        // The reconcile itself wrote the status (a create's intent) before it failed, so the
        // copy it started from is stale: report on the stored object, or a failure after the
        // intent (a create the cloud refused) would never show.
        Err(Error::Kube(kube::Error::Api(status))) if status.code == 409 => {
            match api.get_opt(&object.name_any()).await {
                Ok(Some(fresh))
                    if fresh.meta().generation == object.meta().generation
                        && changed_condition(&fresh.cloud_status(), &outcome) =>
                {
                    let status = recorded_status(&fresh);
                    write_status(api, cx, &fresh, status, None, &outcome)
                        .await
                        .is_ok()
                }
                // Already shown, or the spec changed (its watch event brings a reconcile).
                Ok(_) => true,
                Err(_) => false,
            }
        }
        // The object may be gone; the next reconcile reports again.
        Err(_) => false,
    };
    if !reported {
        // Status writes do not wake the object: without this, a terminal failure whose
        // report was lost would show nothing until the terminal recheck, minutes away.
        cx.requeue.unreported(&object.key());
    }
}

/// Whether `outcome` would change the `Ready` condition's status or reason: events are sent
/// on such transitions only, so a retrying error does not flood the event stream.
pub(super) fn changed_condition(status: &CloudStatus, outcome: &Outcome) -> bool {
    let ready = status.condition(gpucloud_api::condition_type::READY);
    let wanted = if matches!(outcome, Outcome::Ready { .. }) {
        "True"
    } else {
        "False"
    };
    ready.is_none_or(|c| c.status != wanted || c.reason != outcome.reason())
}

/// Queues an event about `object`: the reconcile does not wait for the API server's answer.
pub(crate) fn publish<K: ManagedKind>(
    cx: &Context<K>,
    object: &K,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let event = events::event(type_, reason, note, "Reconcile");
    cx.events.send(event, object.object_ref(&()));
}
