//! The converge stage: one step of a listed resource toward the spec (the kind's resolve, pure
//! plan, at most one action), then the status and events it stands at.

use super::expiry::{expiry_warning_due, lifetime_stage};
use super::next::{no_later_than, requeue, settled};
use super::status::{Write, changed_condition, publish, write_status_from};
use crate::accounts::account::Account;
use crate::accounts::observer::CloudRecord;
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::error::Error;
use crate::flow::kind::{ImposedLifetime, ManagedKind, Plan, Record};
use crate::runtime::events::EventType;
use gpucloud_api::{CloudStatus, ManagementPolicy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use std::sync::Arc;

/// The object's resource is listed: one step toward the spec (resolve, plan, at most one
/// action), then the status it stands at.
pub(super) async fn converge<K: ManagedKind>(
    api: &Api<K>,
    object: &Arc<K>,
    cx: &Context<K>,
    account: &Arc<Account>,
    status: CloudStatus,
    record: Record<K>,
) -> Result<Action, Error> {
    let own_stage = lifetime_stage(&**object, cx.settings.clock.now())?;
    let mut working = K::clone(object);
    let plan = planned_step(&working, cx, account, &record).await?;
    let (outcome, imposed) = (plan.outcome, plan.imposed_lifetime);
    let stage = imposed.as_ref().map(|l| l.stage).or(own_stage);
    // What the resource costs by the price list, for the kinds the cloud bills by it: the
    // list is cached per account, so this is no call per object.
    if K::PRICED
        && let Some(pricing) = account.pricing_for_status().await
    {
        working.priced(&record, &pricing);
    }
    // The first sight of a resource this object's create made (its intent is still recorded).
    let created = status.pending_create.is_some();
    if created {
        // Listed: the create's settle window no longer matters.
        cx.forget_create(&object.uid().unwrap_or_default());
    }
    let previous_state = status.state.clone();
    let warn_of = expiry_warning_due(stage, &status, &outcome);
    if let Some(expires_at) = warn_of {
        warn_of_expiry(cx, object, &record, expires_at, imposed.as_ref());
    }
    let status = CloudStatus {
        expires_at: stage.map(|s| Time(s.expires_at())),
        expiry_warned: warn_of.map(Time).or(status.expiry_warned.clone()),
        external_id: Some(record.id().to_string()),
        cloud_name: status
            .cloud_name
            .clone()
            .or_else(|| Some(record.name().to_string())),
        state: Some(record.state()),
        pending_create: None,
        ..status
    };
    // A state change is news when the object was settled (a machine stopped from the cloud's
    // console, an instance in ERROR); the states a transition passes through show in the
    // status, and its end in the Ready (or Stalled) event.
    let was_ready = object
        .cloud_status()
        .condition(gpucloud_api::condition_type::READY)
        .is_some_and(|c| c.status == "True");
    if was_ready && previous_state.is_some() && previous_state != status.state {
        publish(
            cx,
            object,
            EventType::Normal,
            "StateChanged",
            &format!("{} is now {}", record.id(), record.state()),
        );
    }
    let tell = to_tell(&**object, &record, &outcome, created);
    let mut stored = K::clone(object);
    if let Some(action) = &plan.action {
        // `Ready=True` never outlives the call that takes the resource out of the state it
        // states (a stop at the end of a lifetime, a reboot): the condition tells what is
        // under way first, and the write after the call is then news only if more changed.
        if was_ready && !matches!(outcome, Outcome::Ready { .. }) {
            stored = write_status_from(
                api,
                cx,
                object,
                &working,
                status.clone(),
                Some(&record),
                &outcome,
                Write::Always,
            )
            .await?;
            *working.meta_mut() = stored.meta().clone();
        }
        tracing::debug!(object = %working.name_any(), ?action, "carrying out");
        working.execute(cx, account, &record, action).await?;
        working.executed(action);
    }
    // An action's write records what it did; without one, a step within a transition already
    // shown under way is not news.
    let write = if plan.action.is_some() {
        Write::Always
    } else {
        Write::News
    };
    write_status_from(
        api,
        cx,
        &stored,
        &working,
        status,
        Some(&record),
        &outcome,
        write,
    )
    .await?;
    for (event_type, reason, note) in tell {
        publish(cx, object, event_type, &reason, &note);
    }
    let next = next_after(cx, account, &outcome);
    Ok(no_later_than(
        next,
        imposed.and_then(|l| l.stage.next_change()),
        &cx.settings.clock,
        cx.settings.observe.resync,
    ))
}

/// The kind's read and its pure plan: at most one action (none for an observed object,
/// which is only reported) and the outcome it leads to.
async fn planned_step<K: ManagedKind>(
    working: &K,
    cx: &Context<K>,
    account: &Account,
    record: &Record<K>,
) -> Result<Plan<K::Action>, Error> {
    if working.managed().management_policy == ManagementPolicy::ObserveOnly {
        return Ok(Plan::stand(working.observed(record)));
    }
    let resolved = working.resolve(cx, account, record).await?;
    working.plan(record, resolved)
}

fn warn_of_expiry<K: ManagedKind>(
    cx: &Context<K>,
    object: &K,
    record: &Record<K>,
    expires_at: k8s_openapi::jiff::Timestamp,
    imposed: Option<&ImposedLifetime>,
) {
    let message = match imposed {
        Some(imposed) => format!(
            "{} is stopped at {expires_at}, at the longest lifetime {} allows: save what it holds, or ask a cluster administrator to raise the limit",
            record.id(),
            imposed.by
        ),
        None => format!(
            "{} expires at {expires_at} (onExpiry {}): extend or remove spec.lifetime to keep it",
            record.id(),
            object
                .lifetime()
                .map_or_else(String::new, |l| format!("{:?}", l.on_expiry))
        ),
    };
    publish(
        cx,
        object,
        EventType::Warning,
        reason::EXPIRES_SOON,
        &message,
    );
}

/// The events told once the status is written: a create's story in one event when it ends
/// Ready at first sight; otherwise the create, then the transition's end when it comes.
fn to_tell<K: ManagedKind>(
    object: &K,
    record: &Record<K>,
    outcome: &Outcome,
    created: bool,
) -> Vec<(EventType, String, String)> {
    let mut tell: Vec<(EventType, String, String)> = Vec::new();
    let ready = matches!(outcome, Outcome::Ready { .. });
    if created {
        let mut note = format!("created {} as {}", record.id(), record.name());
        if ready {
            note = format!("{note}; {}: {}", outcome.reason(), outcome.message());
        }
        tell.push((EventType::Normal, "Created".to_string(), note));
    }
    if !(created && ready) && changed_condition(&object.cloud_status(), outcome) {
        let event_type = match outcome {
            Outcome::Ready { .. } => Some(EventType::Normal),
            Outcome::Stalled { .. } => Some(EventType::Warning),
            Outcome::Progressing { .. } => None,
        };
        if let Some(event_type) = event_type {
            tell.push((
                event_type,
                outcome.reason().to_string(),
                outcome.message().to_string(),
            ));
        }
    }
    tell
}

/// When an object that stands at `outcome` is looked at again.
fn next_after<K: ManagedKind>(
    cx: &Context<K>,
    account: &Arc<Account>,
    outcome: &Outcome,
) -> Action {
    let after = match outcome {
        // Looked at again by the settled sweep (`recheck.rs`), or sooner by a change.
        Outcome::Ready { .. } => return settled(),
        // Waiting for another object (an attachment target): its watch wakes this one.
        Outcome::Progressing { reason, .. } if *reason == reason::WAITING_FOR_REFERENCE => {
            cx.settings.observe.resync
        }
        Outcome::Progressing { .. } => {
            cx.observer(account).mark_hot();
            cx.settings.transition_requeue
        }
        Outcome::Stalled { .. } => cx.settings.observe.resync,
    };
    requeue(after)
}
