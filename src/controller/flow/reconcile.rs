//! The reconcile flow every kind shares: pause, finalizer, credentials, adoption, idempotent
//! create, convergence, status and conditions, deletion.

use crate::accounts::account::Account;
use crate::accounts::observer::{CloudList, CloudRecord, CloudResource};
use crate::flow::adoption::Owner;
use crate::flow::conditions::{self, Outcome, reason};
use crate::flow::context::{Awaited, Context};
use crate::flow::create::{self, AnnotatedIntent, CreateDecision, Found};
use crate::flow::dereference;
use crate::flow::error::Error;
use crate::flow::gauges::Next;
use crate::flow::kind::{ManagedKind, ObjectKey, Record, WhenGone};
use crate::flow::naming;
use crate::flow::recorded::{namespace, recorded_status};
use crate::runtime::applier;
use crate::runtime::clock::Clock;
use crate::runtime::events::{self, EventType};
use crate::runtime::fair_share::Work;
use gpucloud_api::lifetime::{self, OnExpiry, Stage};
use gpucloud_api::{
    CREATE_INTENT_ANNOTATION, CloudStatus, DeletionPolicy, EXTERNAL_ID_ANNOTATION, FINALIZER,
    ManagementPolicy, PAUSED_ANNOTATION, PendingCreate,
};
use gpucloud_telemetry::ReconcileResult;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::{Api, Resource, ResourceExt};
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

tokio::task_local! {
    /// What the running reconcile asked for next, for the queue-depth gauge and the settled
    /// sweep (kube-runtime's `Action` does not tell).
    static NEXT: Cell<Option<Next>>;
}

/// Requeue after `after`; every requeue of the flow goes through here.
fn requeue(after: Duration) -> Action {
    let _ = NEXT.try_with(|cell| cell.set(Some(Next::Requeue(after))));
    Action::requeue(after)
}

/// Wait for a change, and nothing else; every such answer of the flow goes through here.
fn await_change() -> Action {
    let _ = NEXT.try_with(|cell| cell.set(Some(Next::Change)));
    Action::await_change()
}

/// Settled: wait for a change, and for the settled sweep's recheck (`recheck.rs`).
fn settled() -> Action {
    let _ = NEXT.try_with(|cell| cell.set(Some(Next::Sweep)));
    Action::await_change()
}

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

fn has_finalizer<K: Resource>(object: &K) -> bool {
    object.finalizers().iter().any(|f| f == FINALIZER)
}

/// Whether the object asks the operator to leave it alone for now.
pub fn paused<K: Resource>(object: &K) -> bool {
    object
        .annotations()
        .get(PAUSED_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// The refusal of an object whose create waits, link by link, for its own (clones of each
/// other, a machine restored from a snapshot of itself): waiting would never end.
async fn reference_cycle<K: ManagedKind>(
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

// === apply ===

async fn apply<K: ManagedKind>(
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
    let observer = cx.observer(&account);
    let listed = observer.latest().await?;
    let status = object.cloud_status();
    refuse_another_account::<K>(&account, &listed, &status).await?;
    // An ended lifetime that deletes the object does so whatever the cloud shows (the
    // resource running, or gone since); refused (deletion protection), the flow goes on and
    // the kind keeps the resource as cheap as it can. An object that never made (nor named) a
    // resource goes on to the create, which refuses a lifetime already over: that is a spec
    // to fix, as it is under onExpiry Stop, not an end to carry out.
    let made_or_named = status.external_id.is_some()
        || status.pending_create.is_some()
        || object
            .annotations()
            .get(EXTERNAL_ID_ANNOTATION)
            .is_some_and(|id| !id.is_empty());
    if made_or_named
        && let Some(Stage::Expired { expires_at }) =
            lifetime_stage(&*object, cx.settings.clock.now())?
        && object.lifetime().is_some_and(|l| l.on_expiry.deletes())
    {
        match expire(api, &object, cx, expires_at).await? {
            Expiry::Refused => {}
            Expiry::Gone => return Ok(await_change()),
            // The deletion goes on in this reconcile rather than at the watch's news of it:
            // the resource is deleted at the expiry, not a watch round trip later.
            Expiry::Deleting(deleting) => return cleanup(Arc::new(deleting), cx).await,
        }
    }
    // Every write below records the account the resource is now seen in (a key of the same
    // account that replaced the old one included).
    let status = CloudStatus {
        account: Some(account.id.label()),
        ..status
    };
    let adopted_id = object
        .annotations()
        .get(EXTERNAL_ID_ANNOTATION)
        .filter(|id| !id.is_empty())
        .cloned();
    if let Some(adopted) = &adopted_id
        && status.external_id.as_ref() != Some(adopted)
    {
        let listed_name = listed.get(adopted).map(|r| r.name().to_string());
        cx.ownership
            .check_adoption::<K>(
                &cx.client,
                cx.settings.allow_adoption,
                &*object,
                &format!("{EXTERNAL_ID_ANNOTATION} {adopted}"),
                adopted,
                listed_name.as_deref(),
            )
            .await?;
        // The annotation is fixed once its resource is recorded: changed later, it would
        // point the object (and its delete) at another resource.
        if let Some(recorded) = &status.external_id {
            return Err(Error::InvalidSpec(format!(
                "{EXTERNAL_ID_ANNOTATION} cannot change once its resource is recorded: this object manages {recorded}; set it back, or create a new object to manage {adopted}"
            )));
        }
    }
    let known_id = status.external_id.clone().or_else(|| adopted_id.clone());

    if let Some(id) = known_id {
        if let Some(record) = listed.get(&id) {
            let record = record.clone();
            if let RecordCheck::Conflict(other) =
                check_record(cx, &*object, &status, &id, record.name()).await?
            {
                return claim_conflict(api, cx, &object, status, &id, &other).await;
            }
            if status.external_id.as_deref() == Some(id.as_str()) {
                settle_duplicates(cx, &object, &account, &listed, &id).await;
            }
            return converge(api, &object, cx, &account, status, record).await;
        }
        if let Some(why) = K::UNLISTED_NOT_ADOPTED
            && status.external_id.is_none()
            && adopted_id.as_deref() == Some(id.as_str())
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
        if !create_settling
            && let Some(record) = K::Cloud::get(account.client.clone(), id.clone()).await?
        {
            tracing::info!(cloud_id = %id, "the cloud's list left out a resource its read by id found");
            observer.mark_hot();
            if let RecordCheck::Conflict(other) =
                check_record(cx, &*object, &status, &id, record.name()).await?
            {
                return claim_conflict(api, cx, &object, status, &id, &other).await;
            }
            return converge(api, &object, cx, &account, status, record).await;
        }
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
        if status.external_id.is_none() {
            let outcome = Outcome::stalled(
                reason::NOT_FOUND_IN_CLOUD,
                format!("{EXTERNAL_ID_ANNOTATION} names {id}, which the cloud does not list"),
            );
            write_status(api, cx, &object, status, None, &outcome).await?;
            return Ok(requeue(cx.settings.observe.resync));
        }
        if K::WHEN_GONE == WhenGone::Report
            || managed.management_policy == ManagementPolicy::ObserveOnly
        {
            let outcome = match object.explain_gone(cx, &account).await {
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
        // Stateless and gone: forget the id and create it again below.
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
        let object = Arc::new(
            write_status(
                api,
                cx,
                &object,
                cleared,
                None,
                &Outcome::progressing(reason::CREATING, "recreating"),
            )
            .await?,
        );
        return create_step(api, object, cx, &account, &listed).await;
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

async fn create_step<K: ManagedKind>(
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

/// Adds the finalizer, with the object's resourceVersion as a precondition, and with it the
/// first create's intent when there is one: one write of the main resource.
async fn add_finalizer<K: ManagedKind>(
    api: &Api<K>,
    cx: &Context<K>,
    object: &K,
    intent: Option<&AnnotatedIntent>,
) -> Result<K, Error> {
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    let mut metadata = serde_json::Map::new();
    metadata.insert(
        "resourceVersion".into(),
        serde_json::json!(object.resource_version()),
    );
    metadata.insert("finalizers".into(), serde_json::json!(finalizers));
    if let Some(intent) = intent {
        metadata.insert(
            "annotations".into(),
            serde_json::json!({ CREATE_INTENT_ANNOTATION: intent.value() }),
        );
    }
    let patch = serde_json::json!({ "metadata": metadata });
    let patched = api
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    cx.own_writes.note(object, &patched);
    Ok(patched)
}

/// Gives back the Budget reservation of a create the cloud refused. Should that fail, the
/// Budget drops the reservation of a create no longer pending after `budget::ABANDONED_AFTER`.
async fn give_back_reservation<K: ManagedKind>(cx: &Context<K>, object: &K) {
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
async fn reserve_for_create<K: ManagedKind>(
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

/// The object's resource is listed: one step toward the spec (resolve, plan, at most one
/// action), then the status it stands at.
async fn converge<K: ManagedKind>(
    api: &Api<K>,
    object: &Arc<K>,
    cx: &Context<K>,
    account: &Arc<Account>,
    status: CloudStatus,
    record: Record<K>,
) -> Result<Action, Error> {
    let stage = lifetime_stage(&**object, cx.settings.clock.now())?;
    let mut working = K::clone(object);
    let mut acted = false;
    let outcome = if object.managed().management_policy == ManagementPolicy::ObserveOnly {
        object.observed(&record)
    } else {
        // Read, decide (pure), then at most one action.
        let resolved = working.resolve(cx, account, &record).await?;
        let plan = working.plan(&record, resolved)?;
        if let Some(action) = &plan.action {
            tracing::debug!(object = %object.name_any(), ?action, "carrying out");
            working.execute(cx, account, &record, action).await?;
            working.executed(action);
            acted = true;
        }
        plan.outcome
    };
    // What the resource costs by the price list, for the kinds the cloud bills by it: the
    // list is cached per account, so this is no call per object.
    if K::PRICED
        && let Some(pricing) = account.pricing_for_status().await
    {
        working.priced(&record, &pricing);
    }
    let uid = object.uid().unwrap_or_default();
    // The first sight of a resource this object's create made (its intent is still recorded).
    let created = status.pending_create.is_some();
    if created {
        // Listed: the create's settle window no longer matters.
        cx.forget_create(&uid);
    }
    let previous_state = status.state.clone();
    let warn_of = expiry_warning_due(stage, &status, &outcome);
    if let Some(expires_at) = warn_of {
        let on_expiry = object.lifetime().map(|l| l.on_expiry);
        publish(
            cx,
            object,
            EventType::Warning,
            reason::EXPIRES_SOON,
            &format!(
                "{} expires at {expires_at} (onExpiry {}): extend or remove spec.lifetime to keep it",
                record.id(),
                on_expiry.map_or_else(String::new, |o| format!("{o:?}"))
            ),
        );
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
    // Told once the status is written: a create's story in one event when it ends Ready at
    // first sight; otherwise the create, then the transition's end when it comes.
    let mut tell: Vec<(EventType, &str, String)> = Vec::new();
    let ready = matches!(outcome, Outcome::Ready { .. });
    if created {
        let mut note = format!("created {} as {}", record.id(), record.name());
        if ready {
            note = format!("{note}; {}: {}", outcome.reason(), outcome.message());
        }
        tell.push((EventType::Normal, "Created", note));
    }
    if !(created && ready) && changed_condition(&object.cloud_status(), &outcome) {
        let event_type = match outcome {
            Outcome::Ready { .. } => Some(EventType::Normal),
            Outcome::Stalled { .. } => Some(EventType::Warning),
            Outcome::Progressing { .. } => None,
        };
        if let Some(event_type) = event_type {
            tell.push((event_type, outcome.reason(), outcome.message().to_string()));
        }
    }
    // An action's write records what it did; without one, a step within a transition already
    // shown under way is not news.
    let write = if acted { Write::Always } else { Write::News };
    write_status_from(
        api,
        cx,
        object,
        &working,
        status,
        Some(&record),
        &outcome,
        write,
    )
    .await?;
    for (event_type, reason, note) in tell {
        publish(cx, object, event_type, reason, &note);
    }
    let after = match outcome {
        // Looked at again by the settled sweep (`recheck.rs`), or sooner by a change.
        Outcome::Ready { .. } => return Ok(settled()),
        // Waiting for another object (an attachment target): its watch wakes this one.
        Outcome::Progressing { reason, .. } if reason == reason::WAITING_FOR_REFERENCE => {
            cx.settings.observe.resync
        }
        Outcome::Progressing { .. } => {
            cx.observer(account).mark_hot();
            cx.settings.transition_requeue
        }
        Outcome::Stalled { .. } => cx.settings.observe.resync,
    };
    Ok(requeue(after))
}

/// Where `object` stands in its lifetime at `now`; a lifetime the operator cannot read
/// (admission refuses those) is an invalid spec.
pub(crate) fn lifetime_stage<K: ManagedKind>(
    object: &K,
    now: Timestamp,
) -> Result<Option<Stage>, Error> {
    lifetime::stage_of(object, now).map_err(Error::InvalidSpec)
}

/// The expiry to warn of now: in the warning stage, once the object is settled (Ready), and
/// not already warned of (an edited expiry is warned of again).
fn expiry_warning_due(
    stage: Option<Stage>,
    status: &CloudStatus,
    outcome: &Outcome,
) -> Option<Timestamp> {
    let Some(Stage::Expiring { expires_at }) = stage else {
        return None;
    };
    let warned = status.expiry_warned.as_ref().map(|t| t.0);
    (matches!(outcome, Outcome::Ready { .. }) && warned != Some(expires_at)).then_some(expires_at)
}

/// What became of an object whose lifetime ended with a deletion.
enum Expiry<K> {
    /// The API server refused to delete it (deletion protection).
    Refused,
    /// Deleted, its finalizer still on: the object as the API server now holds it.
    Deleting(K),
    /// Deleted and gone, or replaced by a namesake: nothing of it is left to delete.
    Gone,
}

/// The lifetime ended with `onExpiry` Delete or Snapshot: the object deletes itself, and the
/// finalizer deletes the resource (after a final snapshot for `Snapshot`). Only this very object
/// is deleted (its uid is a precondition), never a namesake created since. Refused (deletion
/// protection), the kind keeps the resource as cheap as it can (a GpuInstance is stopped) and
/// a Warning says why.
async fn expire<K: ManagedKind>(
    api: &Api<K>,
    object: &K,
    cx: &Context<K>,
    expires_at: Timestamp,
) -> Result<Expiry<K>, Error> {
    // A final snapshot is recorded as asked for before the deletion, where the deletion reads
    // it: an edit of the spec meanwhile cannot skip it. A plain delete needs no record.
    let on_expiry = object.lifetime().map(|l| l.on_expiry);
    if on_expiry == Some(OnExpiry::Snapshot) && object.cloud_status().expired_with != on_expiry {
        let recorded = serde_json::json!({"status": {"expiredWith": on_expiry}});
        api.patch_status(
            &object.name_any(),
            &PatchParams::default(),
            &kube::api::Patch::Merge(&recorded),
        )
        .await?;
    }
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: object.uid(),
            resource_version: None,
        }),
        ..kube::api::DeleteParams::default()
    };
    match api.delete(&object.name_any(), &params).await {
        Ok(deleted) => {
            publish(
                cx,
                object,
                EventType::Normal,
                reason::EXPIRED,
                &format!("the lifetime ended at {expires_at}: deleting this object"),
            );
            Ok(match deleted.left() {
                Some(deleting) if deleting.finalizers().iter().any(|f| f == FINALIZER) => {
                    Expiry::Deleting(deleting)
                }
                _ => Expiry::Gone,
            })
        }
        // Already gone, or a namesake: nothing of this object is left to delete.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            Ok(Expiry::Gone)
        }
        Err(kube::Error::Api(status)) if status.code == 403 => {
            publish(
                cx,
                object,
                EventType::Warning,
                reason::EXPIRY_REFUSED,
                &format!(
                    "the lifetime ended at {expires_at}, and deleting this object was refused: {}",
                    status.message
                ),
            );
            Ok(Expiry::Refused)
        }
        Err(error) => Err(error.into()),
    }
}

/// The moment the object must be looked at again whatever the cloud does: its lifetime's
/// next stage, or the kind's own (a power schedule's next transition).
pub(crate) fn wake_of<K: ManagedKind>(object: &K, now: Timestamp) -> Option<Timestamp> {
    let stage = lifetime::stage_of(object, now)
        .ok()
        .flatten()
        .and_then(Stage::next_change);
    [stage, object.next_wake(now)].into_iter().flatten().min()
}

/// `action`, or a requeue at `wake` (a moment of `clock`) when that is sooner than what it
/// asked for. A settled object with a moment ahead is looked at again by a timer of its own,
/// at the moment or one `resync` on, whichever comes first: the settled sweep leaves alone
/// objects that have a timer, and the moment may be days away.
fn no_later_than(
    action: Action,
    wake: Option<Timestamp>,
    clock: &Clock,
    resync: Duration,
) -> Action {
    let next = NEXT.try_with(Cell::get).ok().flatten();
    let requeued = match next {
        Some(Next::Requeue(after)) => Some(after),
        _ => None,
    };
    let asked = match next {
        Some(Next::Sweep) if wake.is_some() => Some(resync),
        _ => requeued,
    };
    match until_wake(asked, wake, clock) {
        Some(after) if Some(after) != requeued => requeue(after),
        _ => action,
    }
}

/// The requeue `asked` (`None`: wait for a change), or sooner when the object must be looked
/// at again at `wake`: the real time until `clock` reads it.
fn until_wake(asked: Option<Duration>, wake: Option<Timestamp>, clock: &Clock) -> Option<Duration> {
    let Some(wake) = wake else {
        return asked;
    };
    let until = clock.until(wake);
    Some(asked.map_or(until, |asked| asked.min(until)))
}

/// Resources carrying the object's own cloud name besides the one it recorded: a create the
/// cloud carried out after the client gave up (and past the settle window), next to the create
/// that followed. Each is reported once (Event, log line, metric) and, past the grace period,
/// deleted unless the settings say otherwise or it is in use. A failed delete is tried again
/// at the next reconcile.
async fn settle_duplicates<K: ManagedKind>(
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

// === cleanup ===

async fn cleanup<K: ManagedKind>(object: Arc<K>, cx: &Arc<Context<K>>) -> Result<Action, Error> {
    let managed = object.managed();
    if managed.deletion_policy == DeletionPolicy::Orphan
        || managed.management_policy == ManagementPolicy::ObserveOnly
    {
        // Recorded before the finalizer goes, so the orphan sweeper never takes a resource
        // kept on purpose for a leaked one (its name still carries the operator's mark).
        let status = released_status(cx, &object).await?;
        crate::accounts::orphans::record_released(
            &cx.client,
            &cx.settings.operator_namespace,
            &*object,
            &status,
        )
        .await?;
        publish(
            cx,
            &object,
            EventType::Normal,
            "Orphaned",
            "the cloud resource is left in place",
        );
        return Ok(await_change());
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
    let observer = cx.observer(&account);
    // Before anything is asked of the cloud for this deletion (a final snapshot included):
    // another account's silence proves nothing, and an id there may be anyone's.
    let seen = observer.latest().await?;
    refuse_another_account::<K>(&account, &seen, &status).await?;
    let uid = object.uid().unwrap_or_default();
    // A recorded id that is not this object's (another object claims it, or it was neither
    // created for it nor lawfully adopted) is not its to delete, nor to snapshot first: only
    // what carries its own cloud name is.
    let status = checked_for_deletion(cx, (&object, &account), status, &seen).await?;
    let answered_at = cx.delete_answered_at(&uid);
    // What holds a deletion holds the delete call: once the cloud has accepted one of ours,
    // nothing is left to hold (and the checks' reads are not made again while it finishes).
    if answered_at.is_none() && status.external_id.is_some() {
        object.hold_deletion(cx, &account).await?;
    }
    let cloud_name = naming::cloud_name(&namespace(&*object), &object.name_any(), &uid);

    // Deleting needs no fresh list: whatever the latest one shows is deleted. Concluding that
    // nothing is left does: a list sent after this process's delete call, or failing that one
    // sent after this reconcile began. Waiting for a list only then keeps a reconcile slot from
    // being held for a whole list per object.
    let latest = observer.latest().await?;
    let listed_since_delete = answered_at
        .is_some_and(|answered| latest.listed_at.is_some_and(|listed| listed >= answered));
    let mut listed = latest;
    let mut targets = cleanup_targets::<K>(&listed, &status, &cloud_name);
    if targets.is_empty() && !listed_since_delete {
        listed = observer.list_after(Instant::now()).await?;
        targets = cleanup_targets::<K>(&listed, &status, &cloud_name);
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
    if targets.is_empty() {
        // A create whose answer was lost may still be on its way into the list: its absence
        // counts only in a list sent once the settle window has passed, as before a retry.
        if let Some(pending) = &status.pending_create {
            let since = cx.create_in_flight_until(&uid, pending);
            let decision = create::decide(
                Some(since),
                &[],
                listed_wall_clock(&listed),
                Timestamp::now(),
                cx.settings.settle_window,
            );
            // One list's silence is not enough to give the resource up: a second list, sent
            // now, must not show it either.
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
                    message:
                        "waiting for a recent create to show in the cloud's list before deleting"
                            .into(),
                });
            }
        }
        object.released(cx).await?;
        if status.pending_create.is_some() {
            // Concluded from the lists' silence: a cloud that carries the create out later
            // still makes the resource, deleted then (`late_creates.rs`).
            crate::accounts::late_creates::watch(
                cx.clone(),
                account.clone(),
                cloud_name.clone(),
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
        return Ok(await_change());
    }
    // A list older than this process's last delete still shows what that delete removed:
    // sending it again would only spend the rate limit.
    if answered_at.is_none() || listed_since_delete {
        for record in &targets {
            K::delete(cx, Some(&*object), &account, record).await?;
        }
        // Noted once the cloud has answered: a list sent before that (the call may have
        // waited for the rate limiter) may not show the delete yet.
        cx.note_delete_answered(&uid);
    }
    observer.mark_hot();
    let ids: Vec<&str> = targets.iter().map(CloudRecord::id).collect();
    let message = format!("deleting {}", ids.join(", "));
    // Not done until a list no longer shows them: the finalizer stays until then. A deletion
    // the cloud accepted moments ago is told by its end (`Deleted`), unless it lasts.
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

/// Refuses to act for an object whose resource was last seen in another cloud account than
/// the one its credentials open now, unless this account holds the resource (the same account
/// under a new key): the recorded cloud name under the recorded id or, for a create in flight,
/// the name alone. Otherwise nothing may be concluded here: the resource is not missing (it is
/// in the other account), an id may name another team's resource in this one, and a create
/// would bill a second machine.
async fn refuse_another_account<K: ManagedKind>(
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
fn listed_wall_clock<R>(listed: &CloudList<R>) -> Option<Timestamp> {
    let age = k8s_openapi::jiff::SignedDuration::try_from(listed.listed_at?.elapsed()).ok()?;
    Timestamp::now().checked_sub(age).ok()
}

/// What the check of a recorded id found.
enum RecordCheck {
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
async fn check_record<K: ManagedKind>(
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
async fn checked_for_deletion<K: ManagedKind>(
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
async fn released_status<K: ManagedKind>(
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
async fn claim_conflict<K: ManagedKind>(
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

/// Everything in the list `listed` that is the object's: the recorded id, and whatever carries its
/// cloud name (a create whose answer was lost). An `external-id` annotation the status has not
/// recorded is never a target: its adoption was refused or has not happened, and the resource
/// it names may be anyone's.
fn cleanup_targets<K: ManagedKind>(
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

// === status, events ===

/// Writes the status through the status subresource with the object's resourceVersion, so a
/// write based on a stale read fails with a conflict instead of overwriting newer state. Skips
/// the write when nothing would change. Returns the object as stored.
async fn write_status<K: ManagedKind>(
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
async fn write_progress<K: ManagedKind>(
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
enum Write {
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
fn retells_progress(stored: &CloudStatus, updated: &CloudStatus) -> bool {
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
async fn write_status_from<K: ManagedKind>(
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
fn named_credentials<K: ManagedKind>(cx: &Context<K>, object: &K, outcome: Outcome) -> Outcome {
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
async fn report_failure<K: ManagedKind>(
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
fn changed_condition(status: &CloudStatus, outcome: &Outcome) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::declarations::KindDeclarations;
    use crate::flow::recorded::records_any;
    use std::collections::HashSet;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// The machine `ml/train` of both tables, with `finalizers`.
    fn train(finalizers: &[&str]) -> gpucloud_api::gpu_instance::GpuInstance {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
            "metadata": {"name": "train", "namespace": "ml", "uid": "uid-1",
                         "finalizers": finalizers},
            "spec": {"region": "us-east", "gpuType": "A100", "osImage": "ubuntu"},
        }))
        .unwrap()
    }

    #[test]
    fn only_an_object_with_nothing_of_a_resource_recorded_waits_its_turn_as_a_create() {
        use gpucloud_api::PendingCreate;
        let object = |status: CloudStatus, annotation: Option<&str>, deleting: bool| {
            let mut object = train(&[]);
            if let Some(annotation) = annotation {
                object
                    .annotations_mut()
                    .insert(annotation.into(), "{}".into());
            }
            if deleting {
                object.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
            }
            object.with_status(status, None, Timestamp::now())
        };
        let nothing = CloudStatus::default();
        let recorded = CloudStatus {
            external_id: Some("vm-1".into()),
            ..CloudStatus::default()
        };
        let pending = CloudStatus {
            pending_create: Some(PendingCreate {
                cloud_name: "name".into(),
                started_at: Time(Timestamp::now()),
            }),
            ..CloudStatus::default()
        };
        let named = CloudStatus {
            cloud_name: Some("name".into()),
            ..CloudStatus::default()
        };
        for (object, work) in [
            (object(nothing.clone(), None, false), Work::Create),
            (object(recorded, None, false), Work::Existing),
            (object(pending, None, false), Work::Existing),
            (object(named, None, false), Work::Existing),
            // The first create's intent, written with the finalizer before the status has any.
            (
                object(nothing.clone(), Some(CREATE_INTENT_ANNOTATION), false),
                Work::Existing,
            ),
            // Named for adoption: found in the cloud, not created.
            (
                object(nothing.clone(), Some(EXTERNAL_ID_ANNOTATION), false),
                Work::Existing,
            ),
            // Going before anything was made: its cleanup creates nothing.
            (object(nothing, None, true), Work::Existing),
        ] {
            assert_eq!(work_of(&object), work, "{:?}", object.status);
        }
    }

    #[test]
    fn a_list_change_concerns_the_objects_whose_recorded_status_names_it() {
        use gpucloud_api::PendingCreate;
        let object = |status: Option<CloudStatus>, annotated: bool| {
            let mut object = train(&[FINALIZER]);
            if annotated {
                let intent = AnnotatedIntent {
                    started_at: at("2026-11-27T10:00:00Z"),
                    account: "acct".into(),
                };
                object
                    .annotations_mut()
                    .insert(CREATE_INTENT_ANNOTATION.into(), intent.value());
            }
            if let Some(status) = status {
                object = object.with_status(status, None, Timestamp::now());
            }
            object
        };
        let derived = naming::cloud_name("ml", "train", "uid-1");
        let set = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<HashSet<_>>();
        let pending = CloudStatus {
            pending_create: Some(PendingCreate {
                cloud_name: "pending-name".into(),
                started_at: Time(Timestamp::now()),
            }),
            ..CloudStatus::default()
        };
        let recorded = CloudStatus {
            external_id: Some("vm-1".into()),
            cloud_name: Some("recorded-name".into()),
            ..CloudStatus::default()
        };
        for (object, ids, names, concerned) in [
            (
                object(Some(recorded.clone()), false),
                set(&["vm-1"]),
                set(&[]),
                true,
            ),
            (
                object(Some(recorded.clone()), false),
                set(&[]),
                set(&["recorded-name"]),
                true,
            ),
            (
                object(Some(recorded.clone()), false),
                set(&["vm-2"]),
                set(&["other"]),
                false,
            ),
            // A recorded name is the one the object answers to, whatever it would derive.
            (
                object(Some(recorded.clone()), true),
                set(&[]),
                set(&[derived.as_str()]),
                false,
            ),
            (
                object(Some(pending.clone()), false),
                set(&[]),
                set(&["pending-name"]),
                true,
            ),
            (
                object(Some(pending.clone()), false),
                set(&[]),
                set(&[derived.as_str()]),
                false,
            ),
            // The intent only the annotation records: the derived name.
            (object(None, true), set(&[]), set(&[derived.as_str()]), true),
            (
                object(Some(CloudStatus::default()), true),
                set(&[]),
                set(&[derived.as_str()]),
                true,
            ),
            (object(None, true), set(&[]), set(&["other"]), false),
            (
                object(None, false),
                set(&[]),
                set(&[derived.as_str()]),
                false,
            ),
        ] {
            assert_eq!(
                records_any(&object, &ids, &names),
                concerned,
                "{:?} {ids:?} {names:?}",
                object.status
            );
            // The same answer as matching the status every other reader reads.
            let status = recorded_status(&object);
            let by_status = status.external_id.is_some_and(|id| ids.contains(&id))
                || status.cloud_name.is_some_and(|name| names.contains(&name))
                || status
                    .pending_create
                    .is_some_and(|pending| names.contains(&pending.cloud_name));
            assert_eq!(by_status, concerned, "{:?}", object.status);
        }
    }

    #[test]
    fn an_expiry_is_warned_of_once_when_settled_and_again_when_moved() {
        let expires_at = at("2026-11-27T11:00:00Z");
        let expiring = Some(Stage::Expiring { expires_at });
        let ready = Outcome::ready(reason::AVAILABLE, "up");
        let busy = Outcome::progressing(reason::UPDATING, "stopping");
        let warned = |at: Option<Timestamp>| CloudStatus {
            expiry_warned: at.map(Time),
            ..CloudStatus::default()
        };
        let moved = at("2026-11-27T10:00:00Z");
        for (stage, status, outcome, due) in [
            (expiring, warned(None), &ready, Some(expires_at)),
            (expiring, warned(Some(expires_at)), &ready, None),
            (expiring, warned(Some(moved)), &ready, Some(expires_at)),
            // Not while anything is under way: the warning waits for a settled object.
            (expiring, warned(None), &busy, None),
            (
                Some(Stage::Live {
                    warn_at: moved,
                    expires_at,
                }),
                warned(None),
                &ready,
                None,
            ),
            (
                Some(Stage::Expired { expires_at }),
                warned(None),
                &ready,
                None,
            ),
            (None, warned(None), &ready, None),
        ] {
            assert_eq!(
                expiry_warning_due(stage, &status, outcome),
                due,
                "{stage:?} {status:?}"
            );
        }
    }

    #[test]
    fn a_step_within_a_transition_shown_under_way_is_no_news() {
        let now = Timestamp::now();
        let status = |outcome: &Outcome, generation: i64, state: &str, id: Option<&str>| {
            let mut status = CloudStatus {
                external_id: id.map(str::to_string),
                state: Some(state.to_string()),
                observed_generation: Some(generation),
                ..CloudStatus::default()
            };
            conditions::apply(&mut status.conditions, outcome, Some(generation), now);
            status
        };
        let provisioning =
            |state: &str| Outcome::progressing(reason::PROVISIONING, format!("vm-1 is {state}"));
        let booting = status(&provisioning("CREATING"), 1, "CREATING", Some("vm-1"));
        let ready = Outcome::ready(reason::AVAILABLE, "vm-1 is running");
        // Another state of the same transition: not written.
        assert!(retells_progress(
            &booting,
            &status(&provisioning("BOOTING"), 1, "ACTIVE", Some("vm-1"))
        ));
        // The transition's end, another transition, another generation, an id recorded: news.
        assert!(!retells_progress(
            &booting,
            &status(&ready, 1, "ACTIVE", Some("vm-1"))
        ));
        let updating = Outcome::progressing(reason::UPDATING, "stopping vm-1");
        assert!(!retells_progress(
            &booting,
            &status(&updating, 1, "ACTIVE", Some("vm-1"))
        ));
        assert!(!retells_progress(
            &booting,
            &status(&provisioning("BOOTING"), 2, "ACTIVE", Some("vm-1"))
        ));
        let creating = Outcome::progressing(reason::CREATING, "creating gco-x");
        let waiting = Outcome::progressing(reason::WAITING_FOR_CLOUD_LIST, "waiting for the list");
        let intent = status(&creating, 1, "", None);
        assert!(!retells_progress(
            &intent,
            &status(&provisioning("CREATING"), 1, "CREATING", Some("vm-1"))
        ));
        // Waiting for the list to show a create is the create.
        assert!(retells_progress(&intent, &status(&waiting, 1, "", None)));
        // Nothing under way in the stored status: a report of work is news.
        let settled = status(&ready, 1, "ACTIVE", Some("vm-1"));
        assert!(!retells_progress(
            &settled,
            &status(&provisioning("BOOTING"), 1, "ACTIVE", Some("vm-1"))
        ));
    }

    #[test]
    fn a_requeue_is_never_later_than_the_next_wake() {
        let real = Clock::real();
        let five_minutes = Some(Duration::from_secs(300));
        let soon = Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(5);
        for asked in [five_minutes, None] {
            let after = until_wake(asked, Some(soon), &real).unwrap();
            assert!(
                after <= Duration::from_secs(5) && after > Duration::from_secs(3),
                "{after:?}"
            );
        }
        assert_eq!(until_wake(five_minutes, None, &real), five_minutes);
        assert_eq!(until_wake(None, None, &real), None);
        let past = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(5);
        assert_eq!(
            until_wake(five_minutes, Some(past), &real),
            Some(Duration::ZERO)
        );
        let later = Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1);
        assert_eq!(until_wake(five_minutes, Some(later), &real), five_minutes);
    }

    /// A settled object is left to the sweep unless it has a moment ahead: then a timer of its
    /// own, at the moment or one resync interval on, whichever is sooner.
    #[tokio::test]
    async fn a_settled_object_with_a_moment_ahead_keeps_a_timer_of_at_most_one_interval() {
        let real = Clock::real();
        let minute = Duration::from_secs(60);
        let from_now =
            |seconds| Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(seconds);
        let next_after = |wake: Option<Timestamp>| {
            NEXT.sync_scope(Cell::new(None), || {
                no_later_than(settled(), wake, &real, minute);
                NEXT.with(Cell::get)
            })
        };
        assert_eq!(next_after(None), Some(Next::Sweep));
        assert_eq!(
            next_after(Some(from_now(86_400))),
            Some(Next::Requeue(minute))
        );
        match next_after(Some(from_now(5))) {
            Some(Next::Requeue(after)) => assert!(after <= Duration::from_secs(5), "{after:?}"),
            other => panic!("{other:?}"),
        }
        // What asked for nothing but a change waits for its moment, however far.
        let awaiting = NEXT.sync_scope(Cell::new(None), || {
            no_later_than(await_change(), Some(from_now(86_400)), &real, minute);
            NEXT.with(Cell::get)
        });
        assert!(matches!(awaiting, Some(Next::Requeue(after)) if after > minute));
    }

    /// On a scaled clock, a wake hours of clock time away is a timer of seconds.
    #[test]
    fn a_wake_on_a_scaled_clock_is_its_clock_span_over_the_scale() {
        let origin = at("2026-10-23T04:00:00Z");
        let clock = Clock::scaled(origin, 3600.0);
        let five_minutes = Some(Duration::from_secs(300));
        let after = until_wake(five_minutes, Some(at("2026-10-23T06:00:00Z")), &clock).unwrap();
        assert!(
            after <= Duration::from_secs(2) && after > Duration::from_millis(1900),
            "{after:?}"
        );
        assert_eq!(
            until_wake(five_minutes, Some(origin), &clock),
            Some(Duration::ZERO)
        );
    }
}
