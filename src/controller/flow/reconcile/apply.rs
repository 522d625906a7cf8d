//! The apply stage: the account and its latest list read (dereference), the adoption
//! annotation and an ended lifetime checked (validate), then the object's resource converged,
//! reported gone, or created.

use super::cleanup::cleanup;
use super::converge::converge;
use super::create_step::create_step;
use super::expiry::{Expiry, expire, lifetime_stage};
use super::next::{await_change, requeue};
use super::records::{RecordCheck, check_record, claim_conflict, refuse_another_account};
use super::status::{changed_condition, publish, write_progress, write_status};
use crate::accounts::account::Account;
use crate::accounts::observer::{CloudList, CloudRecord, CloudResource};
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::error::Error;
use crate::flow::kind::{ManagedKind, Record, WhenGone};
use crate::flow::naming;
use crate::flow::recorded::namespace;
use crate::runtime::events::EventType;
use gpucloud_api::lifetime::Stage;
use gpucloud_api::{CloudStatus, EXTERNAL_ID_ANNOTATION, ManagementPolicy};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use std::sync::Arc;
use std::time::Duration;

pub(super) async fn apply<K: ManagedKind>(
    api: &Api<K>,
    object: Arc<K>,
    cx: &Arc<Context<K>>,
) -> Result<Action, Error> {
    let managed = object.managed();
    let account = cx
        .accounts
        .resolve(
            &namespace(&*object),
            managed.credentials_secret_ref.as_ref(),
        )
        .await?;
    let listed = cx.observer(&account).latest().await?;
    let status = object.cloud_status();
    refuse_another_account::<K>(&account, &listed, &status).await?;
    if let Some(ended) = end_of_lifetime(api, &object, cx, &status).await? {
        return ended;
    }
    // Every write below records the account the resource is now seen in (a key of the same
    // account that replaced the old one included).
    let status = CloudStatus {
        account: Some(account.id.label()),
        ..status
    };
    let adopted_id = checked_adoption(cx, &*object, &status, &listed).await?;
    if let Some(id) = status.external_id.clone().or(adopted_id) {
        return apply_known(api, object, cx, (&account, &listed), status, id).await;
    }
    if managed.management_policy == ManagementPolicy::ObserveOnly {
        let outcome = Outcome::stalled(
            reason::INVALID_SPEC,
            format!(
                "managementPolicy ObserveOnly needs the {EXTERNAL_ID_ANNOTATION} annotation naming an existing resource"
            ),
        );
        write_status(api, cx, &object, status, None, &outcome).await?;
        return Ok(await_change());
    }
    create_step(api, object, cx, &account, &listed).await
}

/// An ended lifetime that deletes the object does so whatever the cloud shows (the resource
/// running, or gone since): the reconcile's answer once it did. Refused (deletion
/// protection), the flow goes on and the kind keeps the resource as cheap as it can. An object
/// that never made (nor named) a resource goes on to the create, which refuses a lifetime
/// already over: that is a spec to fix, as it is under onExpiry Stop, not an end to carry out.
async fn end_of_lifetime<K: ManagedKind>(
    api: &Api<K>,
    object: &K,
    cx: &Arc<Context<K>>,
    status: &CloudStatus,
) -> Result<Option<Result<Action, Error>>, Error> {
    let made_or_named = status.external_id.is_some()
        || status.pending_create.is_some()
        || object
            .annotations()
            .get(EXTERNAL_ID_ANNOTATION)
            .is_some_and(|id| !id.is_empty());
    if !made_or_named {
        return Ok(None);
    }
    let Some(Stage::Expired { expires_at }) = lifetime_stage(object, cx.settings.clock.now())?
    else {
        return Ok(None);
    };
    if !object.lifetime().is_some_and(|l| l.on_expiry.deletes()) {
        return Ok(None);
    }
    Ok(match expire(api, object, cx, expires_at).await? {
        Expiry::Refused => None,
        Expiry::Gone => Some(Ok(await_change())),
        // The deletion goes on in this reconcile rather than at the watch's news of it: the
        // resource is deleted at the expiry, not a watch round trip later.
        Expiry::Deleting(deleting) => Some(cleanup(Arc::new(deleting), cx).await),
    })
}

/// The resource the `external-id` annotation names, once adopting it is allowed (checked
/// until the status records it); `None` without the annotation.
async fn checked_adoption<K: ManagedKind>(
    cx: &Context<K>,
    object: &K,
    status: &CloudStatus,
    listed: &CloudList<Record<K>>,
) -> Result<Option<String>, Error> {
    let Some(adopted) = object
        .annotations()
        .get(EXTERNAL_ID_ANNOTATION)
        .filter(|id| !id.is_empty())
        .cloned()
    else {
        return Ok(None);
    };
    if status.external_id.as_ref() == Some(&adopted) {
        return Ok(Some(adopted));
    }
    let listed_name = listed.get(&adopted).map(|r| r.name().to_string());
    cx.ownership
        .check_adoption::<K>(
            &cx.client,
            cx.settings.allow_adoption,
            object,
            &format!("{EXTERNAL_ID_ANNOTATION} {adopted}"),
            &adopted,
            listed_name.as_deref(),
        )
        .await?;
    // The annotation is fixed once its resource is recorded: changed later, it would point
    // the object (and its delete) at another resource.
    if let Some(recorded) = &status.external_id {
        return Err(Error::InvalidSpec(format!(
            "{EXTERNAL_ID_ANNOTATION} cannot change once its resource is recorded: this object manages {recorded}; set it back, or create a new object to manage {adopted}"
        )));
    }
    Ok(Some(adopted))
}

/// The object records (or its annotation names) the resource `id`: converged when listed or
/// found by id and proven the object's; otherwise waited for (a create of moments ago),
/// reported missing, or, gone, reported or created again (`gone`).
async fn apply_known<K: ManagedKind>(
    api: &Api<K>,
    object: Arc<K>,
    cx: &Arc<Context<K>>,
    (account, listed): (&Arc<Account>, &CloudList<Record<K>>),
    status: CloudStatus,
    id: String,
) -> Result<Action, Error> {
    let observer = cx.observer(account);
    if let Some(record) = listed.get(&id) {
        let record = record.clone();
        if let RecordCheck::Conflict(other) =
            check_record(cx, &*object, &status, &id, record.name()).await?
        {
            return claim_conflict(api, cx, &object, status, &id, &other).await;
        }
        if status.external_id.as_deref() == Some(id.as_str()) {
            settle_duplicates(cx, &object, account, listed, &id).await;
        }
        return converge(api, &object, cx, account, status, record).await;
    }
    // Named by the annotation alone (the status records no id) and not listed.
    if let Some(why) = K::UNLISTED_NOT_ADOPTED
        && status.external_id.is_none()
    {
        // Looked at again at every resync: a list that only lagged shows it then.
        let outcome = Outcome::stalled(
            reason::INVALID_SPEC,
            format!(
                "{EXTERNAL_ID_ANNOTATION} names {id}, which the cloud does not list among the resources of this kind: {why}"
            ),
        );
        write_status(api, cx, &object, status, None, &outcome).await?;
        return Ok(requeue(cx.settings.observe.resync));
    }
    // Every conclusion below (missing, deleted outside, to be created again) is drawn from
    // the list's silence alone; a list can leave out what exists (a lagging index, a
    // pagination fault), so the resource is read by id first. A create of moments ago is
    // expected to be missing from lists for a while and is not read.
    let create_settling = status.pending_create.as_ref().is_some_and(|pending| {
        let since = cx.create_in_flight_until(&object.uid().unwrap_or_default(), pending);
        let elapsed = Duration::try_from(Timestamp::now().duration_since(since));
        elapsed.unwrap_or(Duration::ZERO) < cx.settings.settle_window
    });
    if create_settling {
        // Created by us moments ago and not listed yet: lists lag behind writes. Past the
        // settle window, a resource neither listed nor found by id is gone like any other
        // (one deleted, with its snapshot say, before a list or a status write showed it).
        observer.mark_hot();
        let outcome = Outcome::progressing(
            reason::WAITING_FOR_CLOUD_LIST,
            format!("waiting for {id} to appear in the cloud's list"),
        );
        write_progress(api, cx, &object, status, &outcome).await?;
        return Ok(requeue(cx.settings.transition_requeue));
    }
    if let Some(record) = K::Cloud::get(account.client.clone(), id.clone()).await? {
        tracing::info!(cloud_id = %id, "the cloud's list left out a resource its read by id found");
        observer.mark_hot();
        if let RecordCheck::Conflict(other) =
            check_record(cx, &*object, &status, &id, record.name()).await?
        {
            return claim_conflict(api, cx, &object, status, &id, &other).await;
        }
        return converge(api, &object, cx, account, status, record).await;
    }
    gone(api, object, cx, (account, listed), status, &id).await
}

/// The resource `id` is neither listed nor found by id: named by the annotation only, it is
/// not found; recorded, it was deleted outside the operator, which a kind with state (or an
/// observed object) reports and a stateless kind answers by creating it again.
async fn gone<K: ManagedKind>(
    api: &Api<K>,
    object: Arc<K>,
    cx: &Arc<Context<K>>,
    (account, listed): (&Arc<Account>, &CloudList<Record<K>>),
    status: CloudStatus,
    id: &str,
) -> Result<Action, Error> {
    if status.external_id.is_none() {
        let outcome = Outcome::stalled(
            reason::NOT_FOUND_IN_CLOUD,
            format!("{EXTERNAL_ID_ANNOTATION} names {id}, which the cloud does not list"),
        );
        write_status(api, cx, &object, status, None, &outcome).await?;
        return Ok(requeue(cx.settings.observe.resync));
    }
    if K::WHEN_GONE == WhenGone::Report
        || object.managed().management_policy == ManagementPolicy::ObserveOnly
    {
        let outcome = match object.explain_gone(cx, account).await {
            Some(outcome) => outcome,
            None => Outcome::stalled(
                reason::EXTERNAL_DELETED,
                format!(
                    "cloud resource {id} was deleted outside the operator; delete this object or recreate it"
                ),
            ),
        };
        if changed_condition(&status, &outcome) {
            publish(
                cx,
                &object,
                EventType::Warning,
                outcome.reason(),
                outcome.message(),
            );
        }
        write_status(api, cx, &object, status, None, &outcome).await?;
        return Ok(await_change());
    }
    // Stateless and gone: forget the id and create it again.
    publish(
        cx,
        &object,
        EventType::Warning,
        reason::EXTERNAL_DELETED,
        &format!("cloud resource {id} was deleted outside the operator; recreating it"),
    );
    let cleared = CloudStatus {
        external_id: None,
        state: None,
        ..status
    };
    let recreating = Outcome::progressing(reason::CREATING, "recreating");
    let object = Arc::new(write_status(api, cx, &object, cleared, None, &recreating).await?);
    create_step(api, object, cx, account, listed).await
}

/// Resources carrying the object's own cloud name besides the one it recorded: a create the
/// cloud carried out after the client gave up (and past the settle window), next to the create
/// that followed. Each is reported once (Event, log line, metric) and, past the grace period,
/// deleted unless the settings say otherwise or it is in use. A failed delete is tried again
/// at the next reconcile.
pub(super) async fn settle_duplicates<K: ManagedKind>(
    cx: &Context<K>,
    object: &K,
    account: &Account,
    listed: &CloudList<Record<K>>,
    recorded: &str,
) {
    let cloud_name = naming::cloud_name(
        &namespace(object),
        &object.name_any(),
        object.uid().as_deref().unwrap_or_default(),
    );
    let settings = cx.settings.duplicates;
    let kind = K::kind(&());
    for duplicate in listed
        .named(&cloud_name)
        .into_iter()
        .filter(|r| r.id() != recorded)
    {
        let id = duplicate.id();
        let (first_seen, new) = cx.duplicate_seen(id);
        if new {
            tracing::warn!(cloud_id = %id, recorded, "duplicate cloud resource found");
            cx.metrics.duplicate_found(&kind);
            let fate = if settings.delete {
                format!(
                    "it is deleted after {}s unless in use",
                    settings.grace_period.as_secs()
                )
            } else {
                "it is left in place (duplicate deletion is off)".to_string()
            };
            publish(
                cx,
                object,
                EventType::Warning,
                "DuplicateFound",
                &format!(
                    "{id} also carries this object's cloud name {cloud_name}; this object manages {recorded}, so {fate}"
                ),
            );
        }
        if !settings.delete || K::in_use(duplicate) || first_seen.elapsed() < settings.grace_period
        {
            continue;
        }
        match K::delete(cx, None, account, duplicate).await {
            Ok(()) => {
                cx.forget_duplicate(id);
                cx.metrics.duplicate_deleted(&kind);
                publish(
                    cx,
                    object,
                    EventType::Normal,
                    "DuplicateDeleted",
                    &format!("deleted {id}, a duplicate of {recorded}"),
                );
            }
            Err(error) => {
                tracing::warn!(cloud_id = %id, %error, "duplicate not deleted; trying again later");
            }
        }
    }
}
