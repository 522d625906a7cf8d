//! The create stage: the pure decision (`flow::create::decide`) from the lists, then the
//! kind's create plan, the GpuPolicy and Budget reservations, the intent written with the
//! object's version, and one create call; its answer recorded or reported.

use super::converge::converge;
use super::expiry::lifetime_stage;
use super::finalizer::{add_finalizer, has_finalizer};
use super::next::requeue;
use super::records::listed_wall_clock;
use super::status::{publish, write_progress, write_status};
use crate::accounts::account::Account;
use crate::accounts::observer::{CloudList, CloudRecord, CloudResource};
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::create::{self, AnnotatedIntent, CreateDecision, Found};
use crate::flow::dereference;
use crate::flow::error::Error;
use crate::flow::kind::{ManagedKind, Record};
use crate::flow::naming;
use crate::flow::recorded::namespace;
use crate::runtime::applier;
use crate::runtime::events::EventType;
use gpucloud_api::lifetime::Stage;
use gpucloud_api::{CloudStatus, PendingCreate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) async fn create_step<K: ManagedKind>(
    api: &Api<K>,
    object: Arc<K>,
    cx: &Context<K>,
    account: &Arc<Account>,
    listed: &CloudList<Record<K>>,
) -> Result<Action, Error> {
    let cloud_name = naming::cloud_name(
        &namespace(&*object),
        &object.name_any(),
        object.uid().as_deref().unwrap_or_default(),
    );
    let status = object.cloud_status();
    let uid = object.uid().unwrap_or_default();
    let observer = cx.observer(account);
    let decide = |listed: &CloudList<Record<K>>| {
        let found: Vec<Found> = listed
            .named(&cloud_name)
            .into_iter()
            .map(|r| Found {
                id: r.id().to_string(),
                created_at: r.created_at(),
            })
            .collect();
        let pending_since = status
            .pending_create
            .as_ref()
            .map(|p| cx.create_in_flight_until(&uid, p));
        create::decide(
            pending_since,
            &found,
            listed_wall_clock(listed),
            Timestamp::now(),
            cx.settings.settle_window,
        )
    };
    let mut decision = decide(listed);
    let fresh;
    let mut listed = listed;
    if decision == CreateDecision::RetryCreate {
        // Creating again is irreversible: one list's silence is not enough, a second list
        // sent now must not show the resource either.
        fresh = observer.list_after(Instant::now()).await?;
        listed = &fresh;
        decision = decide(listed);
    }
    let named = CloudStatus {
        account: Some(account.id.label()),
        cloud_name: Some(cloud_name.clone()),
        ..status.clone()
    };
    // The lists leave out what this process's create call made: read by the id it answered
    // with, it exists, so it is recorded, never created again.
    if decision == CreateDecision::RetryCreate
        && let Some(id) = cx.create_answered(&uid)
        && let Some(record) = K::Cloud::get(account.client.clone(), id.clone()).await?
    {
        tracing::info!(cloud_id = %id, "the cloud's lists left out a created resource its read by id found");
        observer.mark_hot();
        return converge(api, &object, cx, account, named, record).await;
    }
    match decision {
        // The others under the name are duplicates, settled once this one is recorded.
        CreateDecision::Adopt { id, extra: _ } => {
            adopt_found(api, object, cx, (account, listed), named, id).await
        }
        CreateDecision::WaitForList { .. } | CreateDecision::WaitForNextList => {
            observer.mark_hot();
            wait_for_list(api, &object, cx, status, &cloud_name).await?;
            if let CreateDecision::WaitForList { recheck_after } = decision {
                return Ok(requeue(recheck_after));
            }
            // Woken by the list; the resync is only a backstop.
            cx.wait_for_next_list(account, applier::key_of(&*object));
            Ok(requeue(cx.settings.observe.resync))
        }
        CreateDecision::RecordIntentAndCreate | CreateDecision::RetryCreate => {
            create_now(api, object, cx, account, status, cloud_name).await
        }
    }
}

/// A resource carrying the object's cloud name is listed: the object records it (with its
/// finalizer first, so what it records is deleted with it) and converges.
async fn adopt_found<K: ManagedKind>(
    api: &Api<K>,
    object: Arc<K>,
    cx: &Context<K>,
    (account, listed): (&Arc<Account>, &CloudList<Record<K>>),
    named: CloudStatus,
    id: String,
) -> Result<Action, Error> {
    let object = if has_finalizer(&*object) {
        object
    } else {
        Arc::new(add_finalizer(api, cx, &object, None).await?)
    };
    // Recorded by the converge's one status write, with where the resource stands.
    if let Some(record) = listed.get(&id).cloned() {
        return converge(api, &object, cx, account, named, record).await;
    }
    cx.forget_create(&object.uid().unwrap_or_default());
    let status = CloudStatus {
        external_id: Some(id),
        pending_create: None,
        ..named
    };
    let outcome =
        Outcome::progressing(reason::PROVISIONING, "found the cloud resource; converging");
    write_status(api, cx, &object, status, None, &outcome).await?;
    Ok(requeue(Duration::ZERO))
}

/// A create may be in flight: shown as a wait for the cloud's list, with the cloud's answer
/// when the create call failed (the wait is for whether it was carried out all the same).
async fn wait_for_list<K: ManagedKind>(
    api: &Api<K>,
    object: &K,
    cx: &Context<K>,
    status: CloudStatus,
    cloud_name: &str,
) -> Result<(), Error> {
    let outcome = match cx.create_failed(&object.uid().unwrap_or_default()) {
        Some(failed) => Outcome::progressing(
            failed.reason,
            format!(
                "the create of {cloud_name} failed: {}; it may have been carried out all the same, so the cloud's list is read before it is tried again",
                failed.message
            ),
        ),
        None => Outcome::progressing(
            reason::WAITING_FOR_CLOUD_LIST,
            format!(
                "a create of {cloud_name} may be in flight; waiting for the cloud's list before trying again"
            ),
        ),
    };
    write_progress(api, cx, object, status, &outcome).await?;
    Ok(())
}

/// Nothing of the object's is in the cloud: its create is planned and reserved, its intent
/// written, and the cloud asked once.
async fn create_now<K: ManagedKind>(
    api: &Api<K>,
    object: Arc<K>,
    cx: &Context<K>,
    account: &Arc<Account>,
    status: CloudStatus,
    cloud_name: String,
) -> Result<Action, Error> {
    refuse_ended_lifetime(cx, &*object)?;
    account.check_budget(cx.settings.budget_floor).await?;
    let plan = match object.plan_create(cx, account).await {
        Err(error) if error.is_waiting_for_reference() => {
            return Err(reference_cycle(cx, &*object).await?.unwrap_or(error));
        }
        plan => plan?,
    };
    // Reserved before the intent: no cloud call is made for a create a GpuPolicy or a Budget
    // refuses.
    let reserved = reserve_for_create(cx, account, &object, &plan, &cloud_name).await?;
    let started_at = Timestamp::now();
    let intent = CloudStatus {
        account: Some(account.id.label()),
        cloud_name: Some(cloud_name.clone()),
        pending_create: Some(PendingCreate {
            cloud_name: cloud_name.clone(),
            started_at: Time(started_at),
        }),
        ..status
    };
    let object = write_intent(api, &object, cx, (account, &plan), &intent, reserved).await?;
    cx.observer(account).mark_hot();
    let uid = object.uid().unwrap_or_default();
    let created = K::create(cx, account, plan, &cloud_name).await;
    // Whatever the answer, a list sent before now may not show the resource: the next
    // reconcile's settle window counts from here.
    cx.note_create_call_ended(&uid);
    let created = created.map(|record| record.id().to_string());
    create_answered(api, &object, cx, created, intent, reserved).await
}

/// Created expired, a resource would be billed only to be stopped or deleted.
fn refuse_ended_lifetime<K: ManagedKind>(cx: &Context<K>, object: &K) -> Result<(), Error> {
    let Some(Stage::Expired { expires_at }) = lifetime_stage(object, cx.settings.clock.now())?
    else {
        return Ok(());
    };
    let field = match object.lifetime().and_then(|l| l.ttl.as_deref()) {
        Some(ttl) => format!("spec.lifetime.ttl ({ttl} after the creation)"),
        None => "spec.lifetime.expiresAt".to_string(),
    };
    Err(Error::InvalidSpec(format!(
        "{field} ended at {expires_at}, which has passed: nothing is created; set a later expiresAt, a longer ttl, or remove spec.lifetime"
    )))
}

/// Writes the create's intent with the object's resourceVersion: a stale cache or a second
/// replica loses here, before any cloud call. A first create writes it with the finalizer, in
/// one patch, when the first list that shows the resource tells all the status would record
/// (no Budget's reservation, nothing of the plan a list cannot show); otherwise the finalizer
/// goes on first, then the status's intent. The object as the flow reads on.
async fn write_intent<K: ManagedKind>(
    api: &Api<K>,
    object: &K,
    cx: &Context<K>,
    (account, plan): (&Account, &K::CreatePlan),
    intent: &CloudStatus,
    reserved: bool,
) -> Result<K, Error> {
    let mut planned = object.clone();
    planned.planned(plan);
    if !has_finalizer(object) && !reserved && K::plan_shows_in_list(plan) {
        let started_at = intent
            .pending_create
            .as_ref()
            .map_or_else(Timestamp::now, |p| p.started_at.0);
        let annotated = AnnotatedIntent {
            started_at,
            account: account.id.label(),
        };
        let patched = add_finalizer(api, cx, object, Some(&annotated)).await?;
        // Read on as `with_annotated_intent` reads it.
        let mut read = planned.with_status(intent.clone(), None, Timestamp::now());
        *read.meta_mut() = patched.meta().clone();
        return Ok(read);
    }
    if !has_finalizer(object) {
        let patched = add_finalizer(api, cx, object, None).await?;
        *planned.meta_mut() = patched.meta().clone();
    }
    let cloud_name = intent.cloud_name.as_deref().unwrap_or_default();
    // A retry keeps the last attempt's failure in sight until this one answers.
    let message = match cx.create_failed(&object.uid().unwrap_or_default()) {
        Some(failed) => format!(
            "creating {cloud_name} again; the last attempt failed: {}",
            failed.message
        ),
        None => format!("creating {cloud_name}"),
    };
    let outcome = Outcome::progressing(reason::CREATING, message);
    write_status(api, cx, &planned, intent.clone(), None, &outcome).await
}

/// The cloud's answer to the create: the id it answered with (recorded by the first list that
/// shows it), a refusal for want of stock (placed again), a definite refusal (the intent
/// cleared, the reservation given back), or no definite answer (the intent kept: the next
/// reconcile looks before creating).
async fn create_answered<K: ManagedKind>(
    api: &Api<K>,
    object: &K,
    cx: &Context<K>,
    created: Result<String, Error>,
    intent: CloudStatus,
    reserved: bool,
) -> Result<Action, Error> {
    let uid = object.uid().unwrap_or_default();
    let cleared = CloudStatus {
        pending_create: None,
        ..intent
    };
    match created {
        Ok(id) => {
            // No second status write and no event yet: the intent's write says the create is
            // under way, and the first list that shows the resource records its id and state
            // and tells of the create (`pendingCreate` finds it by name until then; the id
            // answered here is read before any retry).
            cx.note_create_answered(&uid, &id);
            Ok(requeue(cx.settings.transition_requeue))
        }
        Err(error) if error.is_out_of_stock() => {
            let mut refused = object.clone();
            if !refused.refused_for_stock(Timestamp::now()) {
                // Reported as any create conflict: the intent stays.
                return Err(error);
            }
            // Refused before acting, for want of stock: nothing was created, and the kind has
            // another placement to try. The intent goes with the refusal's record; the next
            // reconcile plans again (a new intent, version-checked).
            let outcome =
                Outcome::progressing(reason::NO_CAPACITY, format!("{error}; placing it again"));
            publish(
                cx,
                object,
                EventType::Warning,
                reason::NO_CAPACITY,
                outcome.message(),
            );
            write_status(api, cx, &refused, cleared, None, &outcome).await?;
            if reserved {
                give_back_reservation(cx, object).await;
            }
            Ok(requeue(cx.settings.transition_requeue))
        }
        Err(error) if error.is_definite_refusal() => {
            // The cloud refused before acting: nothing was created, nothing is billed.
            write_status(api, cx, object, cleared, None, &error.outcome()).await?;
            if reserved {
                give_back_reservation(cx, object).await;
            }
            Err(error)
        }
        // Unknown outcome: keep the intent; the next reconcile looks before creating.
        Err(error) => {
            cx.note_create_failed(&uid, &error);
            Err(error)
        }
    }
}

/// Gives back the Budget reservation of a create the cloud refused. Should that fail, the
/// Budget drops the reservation of a create no longer pending after `budget::ABANDONED_AFTER`.
pub(super) async fn give_back_reservation<K: ManagedKind>(cx: &Context<K>, object: &K) {
    if let Err(e) = crate::kinds::budget::release(&cx.client, object).await {
        tracing::warn!(error = %e, "the Budget reservation of a refused create was not given back");
    }
    if let Err(e) = crate::kinds::gpu_policy::release(&cx.client, object).await {
        tracing::warn!(error = %e, "the GpuPolicy reservation of a refused create was not given back");
    }
}

/// Judges the create `plan` makes by the GpuPolicies governing the namespace, then reserves
/// its hourly rate in the namespace's Budgets that count it: refused (nothing reserved) when
/// either would be passed. Says whether anything was reserved.
pub(super) async fn reserve_for_create<K: ManagedKind>(
    cx: &Context<K>,
    account: &Account,
    object: &K,
    plan: &K::CreatePlan,
    cloud_name: &str,
) -> Result<bool, Error> {
    let clock = &cx.settings.clock;
    let subject = object.policy_subject(plan);
    let budgets = crate::kinds::budget::budgets_of(&cx.client, object).await?;
    let policies = crate::kinds::gpu_policy::governing(&cx.client, &namespace(object)).await?;
    // The price list is read only for a create something counts.
    let rate = if K::BILLED && (!budgets.is_empty() || !policies.is_empty()) {
        K::planned_hourly_rate(plan, account).await?
    } else {
        None
    };
    let currency = match rate {
        Some(_) => account.pricing().await?.currency.clone(),
        None => String::new(),
    };
    let policy_reserved = crate::kinds::gpu_policy::reserve(
        &cx.client,
        object,
        policies,
        subject.as_ref(),
        rate,
        &currency,
        clock,
    )
    .await?;
    let (false, Some(rate)) = (budgets.is_empty(), rate) else {
        return Ok(policy_reserved);
    };
    let ask = crate::kinds::budget::Ask {
        rate,
        currency: &currency,
        charge: account.charge_entry(&namespace(object), cloud_name),
    };
    if let Err(error) =
        crate::kinds::budget::reserve(&cx.client, object, budgets, &ask, clock).await
    {
        if policy_reserved {
            give_back_reservation(cx, object).await;
        }
        return Err(error);
    }
    Ok(true)
}

/// The refusal of an object whose create waits, link by link, for its own (clones of each
/// other, a machine restored from a snapshot of itself): waiting would never end.
pub(super) async fn reference_cycle<K: ManagedKind>(
    cx: &Context<K>,
    object: &K,
) -> Result<Option<Error>, Error> {
    let namespace = namespace(object);
    let Some(kind) = dereference::CHAINED_KINDS
        .into_iter()
        .find(|kind| *kind == K::kind(&()))
    else {
        return Ok(None);
    };
    let start = dereference::Link {
        kind,
        name: object.name_any(),
    };
    let cycle = dereference::cycle_through(start, |link| {
        dereference::waits_for(&cx.client, &namespace, link)
    })
    .await?;
    Ok(cycle.map(|chain| {
        let chain: Vec<String> = chain.iter().map(ToString::to_string).collect();
        Error::ReferenceCycle(format!(
            "the references form a cycle ({}): none of these can be created before the others; change the source of one of them",
            chain.join(" -> ")
        ))
    }))
}
