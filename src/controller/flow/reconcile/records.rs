//! Whether a recorded resource is the object's to act on: the account it was last seen in, a
//! status written by anyone but the operator, another object's claim.

use super::next::requeue;
use super::status::{publish, write_status};
use crate::accounts::account::Account;
use crate::accounts::observer::{CloudList, CloudRecord, CloudResource};
use crate::flow::adoption::Owner;
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::error::Error;
use crate::flow::kind::{ManagedKind, Record};
use crate::flow::naming;
use crate::flow::recorded::namespace;
use crate::runtime::events::EventType;
use gpucloud_api::{CloudStatus, EXTERNAL_ID_ANNOTATION};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

/// Refuses to act for an object whose resource was last seen in another cloud account than
/// the one its credentials open now, unless this account holds the resource (the same account
/// under a new key): the recorded cloud name under the recorded id or, for a create in flight,
/// the name alone. Otherwise nothing may be concluded here: the resource is not missing (it is
/// in the other account), an id may name another team's resource in this one, and a create
/// would bill a second machine.
pub(super) async fn refuse_another_account<K: ManagedKind>(
    account: &Account,
    listed: &CloudList<Record<K>>,
    status: &CloudStatus,
) -> Result<(), Error> {
    let current = account.id.label();
    let Some(recorded) = status.account.as_deref().filter(|r| *r != current) else {
        return Ok(());
    };
    let name = status.cloud_name.as_deref().unwrap_or_default();
    let (held, what) = match &status.external_id {
        Some(id) => {
            let record = match listed.get(id) {
                Some(record) => Some(record.clone()),
                None => K::Cloud::get(account.client.clone(), id.clone()).await?,
            };
            (
                record.is_some_and(|r| !name.is_empty() && r.name() == name),
                format!("cloud resource {id}"),
            )
        }
        None if status.pending_create.is_some() => (
            !name.is_empty() && !listed.named(name).is_empty(),
            format!("a create of {name}"),
        ),
        None => return Ok(()),
    };
    if held {
        return Ok(());
    }
    Err(Error::Blocked {
        reason: reason::ACCOUNT_CHANGED,
        message: format!(
            "{what} is in cloud account {recorded}, and the credentials now open account \
             {current}, which does not hold it: put the key of account {recorded} back, or set \
             deletionPolicy: Orphan and delete this object to leave the resource there"
        ),
    })
}

/// The wall-clock time the list was sent, for comparison with recorded attempts.
pub(super) fn listed_wall_clock<R>(listed: &CloudList<R>) -> Option<Timestamp> {
    let age = k8s_openapi::jiff::SignedDuration::try_from(listed.listed_at?.elapsed()).ok()?;
    Timestamp::now().checked_sub(age).ok()
}

/// What the check of a recorded id found.
pub(super) enum RecordCheck {
    /// The object's own: created for it, or adopted as its annotation asks and the adoption
    /// checks allow.
    Own,
    /// Another object claims it too.
    Conflict(Owner),
}

/// Checks that the resource `id` the status records (listed as `listed_name`, empty when no
/// list shows it) is the object's to act on. A status is the operator's memory, but whoever
/// may write the status subresource can write one, so a record is taken only where it is
/// provably the object's: the resource carries the object's own cloud name (made from its uid,
/// which no status write changes), or the object's `external-id` annotation names it and
/// adopting it is allowed now (not another object's, not released by another namespace, and
/// allowed in this namespace). A resource another object claims is a conflict; any other
/// record is refused (`AlreadyOwned`, `AdoptionNotAllowed` or `ForeignRecord`), before any
/// call on it.
pub(super) async fn check_record<K: ManagedKind>(
    cx: &Context<K>,
    object: &K,
    status: &CloudStatus,
    id: &str,
    listed_name: &str,
) -> Result<RecordCheck, Error> {
    let uid = object.uid().unwrap_or_default();
    let own_name = naming::cloud_name(&namespace(object), &object.name_any(), &uid);
    // A resource carrying this object's own cloud name is its own: the common case costs one
    // comparison.
    if listed_name == own_name
        && status
            .cloud_name
            .as_deref()
            .is_none_or(|name| name == own_name)
    {
        return Ok(RecordCheck::Own);
    }
    // Another object's claim counts when it is proven (the resource, or the name this status
    // records, is its own cloud name; its adoption annotation names the id): one made by a
    // status write alone stops only the object carrying it.
    let listed = Some(listed_name).filter(|name| !name.is_empty());
    let mut names: Vec<Option<&str>> = [listed, status.cloud_name.as_deref()]
        .into_iter()
        .filter(|name| name.is_some_and(|name| !name.is_empty()))
        .collect();
    if names.is_empty() {
        names.push(None);
    }
    let other = names
        .into_iter()
        .flat_map(|name| cx.ownership.proven_owners::<K>(id, name))
        .find(|owner| owner.uid != uid);
    if let Some(other) = other {
        return Ok(RecordCheck::Conflict(other));
    }
    let annotated = object
        .annotations()
        .get(EXTERNAL_ID_ANNOTATION)
        .is_some_and(|adopted| adopted == id);
    if !annotated {
        return Err(Error::Blocked {
            reason: reason::FOREIGN_RECORD,
            message: format!(
                "status.externalId records {id}, which was not created for this object and is not named by its {EXTERNAL_ID_ANNOTATION} annotation: nothing is done to it (a status written by anyone but the operator is not taken for its memory); remove status.externalId, or adopt the resource with the annotation"
            ),
        });
    }
    cx.ownership
        .check_adoption::<K>(
            &cx.client,
            cx.settings.allow_adoption,
            object,
            &format!("{EXTERNAL_ID_ANNOTATION} {id}"),
            id,
            listed,
        )
        .await?;
    Ok(RecordCheck::Own)
}

/// The status a deletion acts on: without the recorded id when it is not the object's
/// (`check_record`), with a Warning Event saying the resource is left in place. A resource the
/// list `seen` leaves out is read by id for its name (lists can leave out what exists); one
/// that does not exist is nothing to act on either way.
pub(super) async fn checked_for_deletion<K: ManagedKind>(
    cx: &Context<K>,
    (object, account): (&K, &Account),
    mut status: CloudStatus,
    seen: &CloudList<Record<K>>,
) -> Result<CloudStatus, Error> {
    let Some(id) = status.external_id.clone() else {
        return Ok(status);
    };
    let listed_name = match seen.get(&id) {
        Some(record) => Some(record.name().to_string()),
        None => match K::Cloud::get(account.client.clone(), id.clone()).await? {
            Some(record) => Some(record.name().to_string()),
            None => return Ok(status),
        },
    };
    let why = match check_record(
        cx,
        object,
        &status,
        &id,
        listed_name.as_deref().unwrap_or_default(),
    )
    .await
    {
        Ok(RecordCheck::Own) => return Ok(status),
        Ok(RecordCheck::Conflict(other)) => format!(
            "{id} is also claimed by {}",
            other.described_to(&namespace(object))
        ),
        Err(error @ (Error::AdoptionRefused { .. } | Error::Blocked { .. })) => error.to_string(),
        Err(error) => return Err(error),
    };
    publish(
        cx,
        object,
        EventType::Warning,
        reason::CLAIM_CONFLICT,
        &format!(
            "{why}; it is left in place, and only a resource carrying this object's own cloud name is deleted"
        ),
    );
    status.external_id = None;
    Ok(status)
}

/// The status whose resources the released record names for an object left in the cloud:
/// its recorded id only when it is the object's (checked against the latest list of its
/// account, or left out when that cannot be read), and the cloud names it carries.
pub(super) async fn released_status<K: ManagedKind>(
    cx: &Context<K>,
    object: &K,
) -> Result<CloudStatus, Error> {
    let status = object.cloud_status();
    if status.external_id.is_none() {
        return Ok(status);
    }
    let managed = object.managed();
    let Ok(account) = cx
        .accounts
        .resolve(&namespace(object), managed.credentials_secret_ref.as_ref())
        .await
    else {
        return Ok(CloudStatus {
            external_id: None,
            ..status
        });
    };
    match cx.observer(&account).latest().await {
        Ok(seen) => checked_for_deletion(cx, (object, &account), status, &seen).await,
        Err(_) => Ok(CloudStatus {
            external_id: None,
            ..status
        }),
    }
}

/// Stops acting on a resource two objects claim: `Stalled` with `ClaimConflict` and a Warning
/// Event naming the other claimant (by name only within the namespace), looked at again at
/// every resync until one of them lets go.
pub(super) async fn claim_conflict<K: ManagedKind>(
    api: &Api<K>,
    cx: &Context<K>,
    object: &K,
    status: CloudStatus,
    id: &str,
    other: &Owner,
) -> Result<Action, Error> {
    let message = format!(
        "{id} is also claimed by {}: a cloud resource is managed by one object only, and \
         nothing is done to it until one of them lets go (a status written by anyone but the \
         operator is not taken for its memory)",
        other.described_to(&namespace(object))
    );
    publish(
        cx,
        object,
        EventType::Warning,
        reason::CLAIM_CONFLICT,
        &message,
    );
    // The other claimant hears of it too: it keeps acting only if the resource is provably
    // its own, and its owners should know that someone's status names their resource.
    if let Some(claimant) = cx.ownership.get::<K>(&other.namespace, &other.name) {
        publish(
            cx,
            &claimant,
            EventType::Warning,
            reason::CLAIM_CONFLICT,
            &format!(
                "{id}, recorded by this object, is also claimed by {}; nothing is done to it for that object",
                Owner::from(object).described_to(&other.namespace)
            ),
        );
    }
    let outcome = Outcome::stalled(reason::CLAIM_CONFLICT, message);
    write_status(api, cx, object, status, None, &outcome).await?;
    Ok(requeue(cx.settings.observe.resync))
}
