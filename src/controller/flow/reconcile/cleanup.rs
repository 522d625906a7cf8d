//! The deletion stage, run by the finalizer: the object's resources deleted (or left, for
//! `Orphan` and `ObserveOnly`), and the finalizer kept until a list no longer shows them.

use super::next::await_change;
use super::records::{
    checked_for_deletion, listed_wall_clock, refuse_another_account, released_status,
};
use super::status::publish;
use crate::accounts::account::Account;
use crate::accounts::observer::{CloudList, CloudRecord, CloudResource};
use crate::flow::conditions::reason;
use crate::flow::context::Context;
use crate::flow::create::{self, CreateDecision};
use crate::flow::error::Error;
use crate::flow::kind::{ManagedKind, Record};
use crate::flow::naming;
use crate::flow::recorded::namespace;
use crate::runtime::events::EventType;
use gpucloud_api::{CloudStatus, DeletionPolicy, ManagementPolicy};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use std::sync::Arc;
use std::time::Instant;

pub(super) async fn cleanup<K: ManagedKind>(
    object: Arc<K>,
    cx: &Arc<Context<K>>,
) -> Result<Action, Error> {
    let managed = object.managed();
    if managed.deletion_policy == DeletionPolicy::Orphan
        || managed.management_policy == ManagementPolicy::ObserveOnly
    {
        return leave_in_place(&*object, cx).await;
    }
    let status = object.cloud_status();
    let account = match cx
        .accounts
        .resolve(
            &namespace(&*object),
            managed.credentials_secret_ref.as_ref(),
        )
        .await
    {
        Ok(account) => account,
        // Never usable credentials and nothing recorded: nothing was ever asked of the cloud
        // for this object (an intent is recorded before any create), so its deletion needs
        // none. Without this, an object refused for its credentials could not be deleted.
        Err(Error::CredentialsMissing(why))
            if status.external_id.is_none() && status.pending_create.is_none() =>
        {
            publish(
                cx,
                &object,
                EventType::Normal,
                "Deleted",
                &format!("nothing was created in the cloud ({why})"),
            );
            return Ok(await_change());
        }
        Err(error) => return Err(error),
    };
    // Before anything is asked of the cloud for this deletion (a final snapshot included):
    // another account's silence proves nothing, and an id there may be anyone's.
    let seen = cx.observer(&account).latest().await?;
    refuse_another_account::<K>(&account, &seen, &status).await?;
    let uid = object.uid().unwrap_or_default();
    // A recorded id that is not this object's (another object claims it, or it was neither
    // created for it nor lawfully adopted) is not its to delete, nor to snapshot first: only
    // what carries its own cloud name is.
    let status = checked_for_deletion(cx, (&object, &account), status, &seen).await?;
    // What holds a deletion holds the delete call: once the cloud has accepted one of ours,
    // nothing is left to hold (and the checks' reads are not made again while it finishes).
    if cx.delete_answered_at(&uid).is_none() && status.external_id.is_some() {
        object.hold_deletion(cx, &account).await?;
    }
    let found = deletion_targets(&*object, cx, &account, &status).await?;
    if found.targets.is_empty() {
        return nothing_left(object, cx, &account, &status, &found.listed).await;
    }
    delete_targets(&*object, cx, &account, found).await
}

/// `deletionPolicy: Orphan` or `ObserveOnly`: the resource stays. Recorded before the
/// finalizer goes, so the orphan sweeper never takes a resource kept on purpose for a leaked
/// one (its name still carries the operator's mark).
async fn leave_in_place<K: ManagedKind>(object: &K, cx: &Context<K>) -> Result<Action, Error> {
    let status = released_status(cx, object).await?;
    crate::accounts::orphans::record_released(
        &cx.client,
        &cx.settings.operator_namespace,
        object,
        &status,
    )
    .await?;
    publish(
        cx,
        object,
        EventType::Normal,
        "Orphaned",
        "the cloud resource is left in place",
    );
    Ok(await_change())
}

/// What a deletion found of the object's in the cloud, and the list it read.
struct Found<K: ManagedKind> {
    targets: Vec<Record<K>>,
    listed: Arc<CloudList<Record<K>>>,
    /// The list was sent after the cloud answered this process's delete call.
    listed_since_delete: bool,
}

/// The object's resources in the cloud. Deleting needs no fresh list: whatever the latest one
/// shows is deleted. Concluding that nothing is left does: a list sent after this process's
/// delete call, or failing that one sent after this reconcile began. Waiting for a list only
/// then keeps a reconcile slot from being held for a whole list per object.
async fn deletion_targets<K: ManagedKind>(
    object: &K,
    cx: &Context<K>,
    account: &Arc<Account>,
    status: &CloudStatus,
) -> Result<Found<K>, Error> {
    let uid = object.uid().unwrap_or_default();
    let cloud_name = naming::cloud_name(&namespace(object), &object.name_any(), &uid);
    let observer = cx.observer(account);
    let answered_at = cx.delete_answered_at(&uid);
    let latest = observer.latest().await?;
    let listed_since_delete = answered_at
        .is_some_and(|answered| latest.listed_at.is_some_and(|listed| listed >= answered));
    let mut listed = latest;
    let mut targets = cleanup_targets::<K>(&listed, status, &cloud_name);
    if targets.is_empty() && !listed_since_delete {
        listed = observer.list_after(Instant::now()).await?;
        targets = cleanup_targets::<K>(&listed, status, &cloud_name);
        // Silence in a list is no proof that a resource is gone: unless the cloud answered a
        // delete of ours that this list follows, the resource is read by id, the recorded one
        // or the one this process's create call answered with (no list has shown it yet).
        if targets.is_empty()
            && answered_at.is_none()
            && let Some(id) = status
                .external_id
                .clone()
                .or_else(|| cx.create_answered(&uid))
            && let Some(record) = K::Cloud::get(account.client.clone(), id.clone()).await?
        {
            tracing::info!(cloud_id = %id, "the cloud's list left out a resource its read by id found");
            targets.push(record);
        }
    }
    Ok(Found {
        targets,
        listed,
        listed_since_delete,
    })
}

/// Nothing of the object's is listed: the finalizer may go, unless a create whose answer was
/// lost may still be on its way into the list (its absence counts only in a list sent once
/// the settle window has passed, as before a retry).
async fn nothing_left<K: ManagedKind>(
    object: Arc<K>,
    cx: &Arc<Context<K>>,
    account: &Arc<Account>,
    status: &CloudStatus,
    listed: &CloudList<Record<K>>,
) -> Result<Action, Error> {
    let uid = object.uid().unwrap_or_default();
    let cloud_name = naming::cloud_name(&namespace(&*object), &object.name_any(), &uid);
    if let Some(pending) = &status.pending_create {
        let since = cx.create_in_flight_until(&uid, pending);
        let decision = create::decide(
            Some(since),
            &[],
            listed_wall_clock(listed),
            Timestamp::now(),
            cx.settings.settle_window,
        );
        // One list's silence is not enough to give the resource up: a second list, sent now,
        // must not show it either.
        let observer = cx.observer(account);
        let confirmed = decision == CreateDecision::RetryCreate
            && observer
                .list_after(Instant::now())
                .await?
                .named(&cloud_name)
                .is_empty();
        if !confirmed {
            observer.mark_hot();
            return Err(Error::InProgress {
                reason: reason::DELETING,
                message: "waiting for a recent create to show in the cloud's list before deleting"
                    .into(),
            });
        }
    }
    object.released(cx).await?;
    if status.pending_create.is_some() {
        // Concluded from the lists' silence: a cloud that carries the create out later still
        // makes the resource, deleted then (`late_creates.rs`).
        crate::accounts::late_creates::watch(
            cx.clone(),
            account.clone(),
            cloud_name,
            object.object_ref(&()),
        );
    }
    publish(
        cx,
        &object,
        EventType::Normal,
        "Deleted",
        "the cloud resource is gone",
    );
    cx.forget_delete(&uid);
    cx.forget_create(&uid);
    Ok(await_change())
}

/// Deletes what `found` lists (unless a list older than this process's last delete shows it:
/// sending it again would only spend the rate limit); the finalizer stays until a list no
/// longer shows them.
async fn delete_targets<K: ManagedKind>(
    object: &K,
    cx: &Context<K>,
    account: &Arc<Account>,
    found: Found<K>,
) -> Result<Action, Error> {
    let uid = object.uid().unwrap_or_default();
    if cx.delete_answered_at(&uid).is_none() || found.listed_since_delete {
        for record in &found.targets {
            K::delete(cx, Some(object), account, record).await?;
        }
        // Noted once the cloud has answered: a list sent before that (the call may have
        // waited for the rate limiter) may not show the delete yet.
        cx.note_delete_answered(&uid);
    }
    cx.observer(account).mark_hot();
    let ids: Vec<&str> = found.targets.iter().map(CloudRecord::id).collect();
    let message = format!("deleting {}", ids.join(", "));
    // A deletion the cloud accepted moments ago is told by its end (`Deleted`), unless it
    // lasts.
    let under_way_since = cx.delete_first_answered_at(&uid);
    if under_way_since.is_some_and(|since| since.elapsed() < cx.settings.transition_requeue) {
        return Err(Error::Passing {
            reason: reason::DELETING,
            message,
        });
    }
    Err(Error::InProgress {
        reason: reason::DELETING,
        message,
    })
}

/// Everything in the list `listed` that is the object's: the recorded id, and whatever carries its
/// cloud name (a create whose answer was lost). An `external-id` annotation the status has not
/// recorded is never a target: its adoption was refused or has not happened, and the resource
/// it names may be anyone's.
pub(super) fn cleanup_targets<K: ManagedKind>(
    listed: &CloudList<Record<K>>,
    status: &CloudStatus,
    cloud_name: &str,
) -> Vec<Record<K>> {
    let mut targets: Vec<Record<K>> = Vec::new();
    let named = listed.named(cloud_name);
    let by_id = status
        .external_id
        .as_deref()
        .into_iter()
        .filter_map(|id| listed.get(id));
    for record in by_id.chain(named) {
        if !targets.iter().any(|t| t.id() == record.id()) {
            targets.push(record.clone());
        }
    }
    targets
}
