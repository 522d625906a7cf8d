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
    let pending_since = status
        .pending_create
        .as_ref()
        .map(|p| cx.create_in_flight_until(&uid, p));
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
    // The lists leave out what this process's create call made: read by the id it answered
    // with, it exists, so it is recorded, never created again.
    if decision == CreateDecision::RetryCreate
        && let Some(id) = cx.create_answered(&uid)
        && let Some(record) = K::Cloud::get(account.client.clone(), id.clone()).await?
    {
        tracing::info!(cloud_id = %id, "the cloud's lists left out a created resource its read by id found");
        observer.mark_hot();
        let status = CloudStatus {
            account: Some(account.id.label()),
            cloud_name: Some(cloud_name),
            ..status
        };
        return converge(api, &object, cx, account, status, record).await;
    }
    match decision {
        // The others under the name are duplicates, settled once this one is recorded.
        CreateDecision::Adopt { id, extra: _ } => {
            // What the object now records is deleted with it.
            let object = if has_finalizer(&*object) {
                object
            } else {
                Arc::new(add_finalizer(api, cx, &object, None).await?)
            };
            // Recorded by the converge's one status write, with where the resource stands.
            if let Some(record) = listed.get(&id).cloned() {
                let status = CloudStatus {
                    account: Some(account.id.label()),
                    cloud_name: Some(cloud_name),
                    ..status
                };
                return converge(api, &object, cx, account, status, record).await;
            }
            cx.forget_create(&uid);
            let record = listed.get(&id).cloned();
            let status = CloudStatus {
                external_id: Some(id),
                cloud_name: Some(cloud_name),
                pending_create: None,
                ..status
            };
            let outcome =
                Outcome::progressing(reason::PROVISIONING, "found the cloud resource; converging");
            write_status(api, cx, &object, status, record.as_ref(), &outcome).await?;
            Ok(requeue(Duration::ZERO))
        }
        CreateDecision::WaitForList { .. } | CreateDecision::WaitForNextList => {
            observer.mark_hot();
            // A create call that failed is shown with the cloud's answer, not as a wait alone:
            // the wait is for whether it was carried out all the same.
            let outcome = match cx.create_failed(&uid) {
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
            write_progress(api, cx, &object, status, &outcome).await?;
            if let CreateDecision::WaitForList { recheck_after } = decision {
                return Ok(requeue(recheck_after));
            }
            // Woken by the list; the resync is only a backstop.
            cx.wait_for_next_list(account, applier::key_of(&*object));
            Ok(requeue(cx.settings.observe.resync))
        }
        CreateDecision::RecordIntentAndCreate | CreateDecision::RetryCreate => {
            // Created expired, a resource would be billed only to be stopped or deleted.
            if let Some(Stage::Expired { expires_at }) =
                lifetime_stage(&*object, cx.settings.clock.now())?
            {
                let field = match object.lifetime().and_then(|l| l.ttl.as_deref()) {
                    Some(ttl) => format!("spec.lifetime.ttl ({ttl} after the creation)"),
                    None => "spec.lifetime.expiresAt".to_string(),
                };
                return Err(Error::InvalidSpec(format!(
                    "{field} ended at {expires_at}, which has passed: nothing is created; set a later expiresAt, a longer ttl, or remove spec.lifetime"
                )));
            }
            account.check_budget(cx.settings.budget_floor).await?;
            let plan = match object.plan_create(cx, account).await {
                Err(error) if error.is_waiting_for_reference() => {
                    return Err(reference_cycle(cx, &*object).await?.unwrap_or(error));
                }
                plan => plan?,
            };
            // Reserved before the intent: no cloud call is made for a create a GpuPolicy or a
            // Budget refuses.
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
            let mut planned = (*object).clone();
            planned.planned(&plan);
            // The intent is written with the object's resourceVersion: a stale cache or a
            // second replica loses here, before any cloud call. A first create writes it with
            // the finalizer, in one patch, when the first list that shows the resource tells
            // all the status would record (no Budget's reservation, nothing of the plan a list
            // cannot show); otherwise the finalizer goes on first, then the status's intent.
            let object = if !has_finalizer(&*object) && !reserved && K::plan_shows_in_list(&plan) {
                let annotated = AnnotatedIntent {
                    started_at,
                    account: account.id.label(),
                };
                let patched = add_finalizer(api, cx, &object, Some(&annotated)).await?;
                // Read on as `with_annotated_intent` reads it.
                let mut read = planned.with_status(intent.clone(), None, Timestamp::now());
                *read.meta_mut() = patched.meta().clone();
                read
            } else {
                if !has_finalizer(&*object) {
                    let patched = add_finalizer(api, cx, &object, None).await?;
                    *planned.meta_mut() = patched.meta().clone();
                }
                let outcome =
                    Outcome::progressing(reason::CREATING, format!("creating {cloud_name}"));
                write_status(api, cx, &planned, intent.clone(), None, &outcome).await?
            };
            observer.mark_hot();
            let created = K::create(cx, account, plan, &cloud_name).await;
            // Whatever the answer, a list sent before now may not show the resource: the next
            // reconcile's settle window counts from here.
            cx.note_create_call_ended(&uid);
            match created {
                Ok(record) => {
                    // No second status write and no event yet: the intent's write says the
                    // create is under way, and the first list that shows the resource records
                    // its id and state and tells of the create (`pendingCreate` finds it by
                    // name until then; the id answered here is read before any retry).
                    cx.note_create_answered(&uid, record.id());
                    Ok(requeue(cx.settings.transition_requeue))
                }
                Err(error) if error.is_out_of_stock() => {
                    let mut refused = object.clone();
                    if !refused.refused_for_stock(Timestamp::now()) {
                        // Reported as any create conflict: the intent stays.
                        return Err(error);
                    }
                    // Refused before acting, for want of stock: nothing was created, and the
                    // kind has another placement to try. The intent goes with the refusal's
                    // record; the next reconcile plans again (a new intent, version-checked).
                    let cleared = CloudStatus {
                        pending_create: None,
                        ..intent
                    };
                    let outcome = Outcome::progressing(
                        reason::NO_CAPACITY,
                        format!("{error}; placing it again"),
                    );
                    publish(
                        cx,
                        &object,
                        EventType::Warning,
                        reason::NO_CAPACITY,
                        outcome.message(),
                    );
                    write_status(api, cx, &refused, cleared, None, &outcome).await?;
                    if reserved {
                        give_back_reservation(cx, &object).await;
                    }
                    Ok(requeue(cx.settings.transition_requeue))
                }
                Err(error) if error.is_definite_refusal() => {
                    // The cloud refused before acting: nothing was created, nothing is billed.
                    let cleared = CloudStatus {
                        pending_create: None,
                        ..intent
                    };
                    write_status(api, cx, &object, cleared, None, &error.outcome()).await?;
                    if reserved {
                        give_back_reservation(cx, &object).await;
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
