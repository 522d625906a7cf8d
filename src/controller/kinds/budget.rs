//! Budgets: what a namespace's billed objects may cost per hour together.
//!
//! A create of a billed kind reserves its hourly rate in every Budget of its namespace whose
//! selector matches it, before the create intent is recorded and before any cloud call
//! ([`reserve`]). The reservation is a status write carrying the Budget's resourceVersion, so
//! of concurrent creates each sees the others' reservations: together they cannot pass a
//! limit that each alone would pass. A create refused by the Budget, or by the cloud, gives
//! its reservation back ([`release`]); one that succeeded keeps it until the object records
//! its resource, from when the object's own `status.hourlyRate` counts instead. The Budget's
//! controller ([`reconcile`]) recounts on every change of a billed object of its namespace and
//! drops reservations whose create is over, whose object is gone, or that no create has
//! followed for [`ABANDONED_AFTER`].
//!
//! Counting reads the objects from the API server, never from a cache, so a count is never
//! older than the reservation it is checked with.
//!
//! A machine that is off still costs what the cloud bills for it (a share of its running
//! rate): it counts at that rate, shown apart in `status.offHourlyRate`, and a machine the
//! Budget powered off is let go only if its running rate fits in place of it.
//!
//! Under `onExceeded: Delete` or `SnapshotThenDelete` the Budget deletes the newest
//! GpuInstances it may ([`to_delete`]) through their own deletion, so each machine goes by its
//! finalizer, after a final snapshot for `SnapshotThenDelete` (the Budget sets
//! `deletionPolicy: Snapshot` first, as a user would); a machine being deleted is going, and
//! no other is chosen in its place meanwhile.
//!
//! The Budget's conditions follow kstatus, which Argo CD and Flux read: within its limits it
//! is `Ready=True`; over one, or keeping machines off, it is `Ready=False` and `Stalled=True`
//! with reason `BudgetExceeded`, since only a person (raising a limit, deleting something it
//! counts) or the next period changes that. A spend projected past `maxSpend` before the
//! period ends is said before it happens: `Ready=True` with reason `ProjectedOverBudget`, and
//! one Warning Event per period, which the status remembers (`overspendWarnedFor`) so that
//! neither a recount nor a restart tells it again.

use crate::accounts::account::{Accounts, Billing};
use crate::flow::adoption::Ownership;
use crate::flow::conditions::{self, Outcome, reason};
use crate::flow::error::Error;
use crate::flow::kind::ManagedKind;
use crate::kinds::registry::{KindFn, map_kinds};
use crate::runtime::clock::Clock;
use crate::runtime::events::{EventPublisher, EventType};
use gpucloud_api::{
    Budget, BudgetStatus, DeletionPolicy, GpuInstance, ManagementPolicy, OnExceeded, PowerState,
    PoweredOff, Reservation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::{Api, Resource, ResourceExt};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A reservation no create has followed for this long (the create was given up: its object
/// refused for another reason, its spec changed) is dropped.
pub const ABANDONED_AFTER: SignedDuration = SignedDuration::from_mins(10);

/// How often a Budget whose reservation write lost a race is read again before the create
/// gives up for now (and is retried like any conflict).
const RESERVE_ATTEMPTS: usize = 8;

/// The counted objects listed in a Budget's status, at most.
const LISTED_OBJECTS: usize = 50;

/// A billed object as a Budget counts it.
#[derive(Debug, Clone, PartialEq)]
pub struct Billed {
    pub kind: String,
    pub name: String,
    pub uid: String,
    /// What its resource costs per hour, once the object records it.
    pub hourly_rate: Option<f64>,
    pub currency: Option<String>,
    /// Whether a create of it is under way or done (a cloud id or a create intent recorded).
    pub create_started: bool,
    /// Whether the object records its resource and no create is pending.
    pub created: bool,
    /// The name its resource carries in the cloud, and the account it is in (key digest).
    pub cloud_name: Option<String>,
    /// The id its status records, and whether the name recorded is not the one its namespace,
    /// name and uid give (an adopted resource's, or one a written status names).
    pub external_id: Option<String>,
    pub foreign_name: bool,
    pub account: Option<String>,
    pub created_at: Option<Timestamp>,
    /// A machine the cloud reports running, which a Budget may power off: not annotated
    /// with deletion protection.
    pub may_power_off: bool,
    /// A machine the cloud reports off (stopped or hibernated): `hourly_rate` is the share of
    /// its running rate the cloud still bills.
    pub off: bool,
    /// Whether the object is being deleted.
    pub deleting: bool,
    /// A GpuInstance a Budget may delete: recorded, not being deleted, not annotated with
    /// deletion protection, and deleted with its machine (not `deletionPolicy: Orphan`, not
    /// `managementPolicy: ObserveOnly`, either of which would leave the machine billed).
    pub may_delete: bool,
    /// The GPUs of its machine (0 for what is no machine).
    pub gpus: i32,
}

/// What a Budget counts: the objects' own rates, and reservations of creates not yet
/// recorded. An object with both counts once, at the larger.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Count {
    pub hourly_rate: f64,
    /// The part of `hourly_rate` that machines which are off cost, and how many they are.
    pub off_hourly_rate: f64,
    pub off: usize,
    /// `Kind/name` of each counted object, dearest first.
    pub objects: Vec<String>,
}

/// Counts `objects` and `reservations`, leaving out the object `except` (the one reserving).
pub fn count(objects: &[Billed], reservations: &[Reservation], except: Option<&str>) -> Count {
    // By uid: `Kind/name`, the rate, and whether it is a machine that is off.
    let mut rates: BTreeMap<&str, (String, f64, bool)> = BTreeMap::new();
    for object in objects.iter().filter(|o| Some(o.uid.as_str()) != except) {
        if let Some(rate) = object.hourly_rate.filter(|_| object.created) {
            rates.insert(
                &object.uid,
                (format!("{}/{}", object.kind, object.name), rate, object.off),
            );
        }
    }
    for reservation in reservations
        .iter()
        .filter(|r| Some(r.uid.as_str()) != except)
    {
        let entry = rates.entry(&reservation.uid).or_insert_with(|| {
            (
                format!("{}/{}", reservation.kind, reservation.name),
                0.0,
                false,
            )
        });
        entry.1 = entry.1.max(reservation.hourly_rate);
    }
    let mut counted: Vec<(String, f64, bool)> = rates.into_values().collect();
    counted.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let off = || counted.iter().filter(|(_, _, off)| *off);
    Count {
        // Folded from +0: a sum of nothing is -0 in Rust, which would show as "-0".
        hourly_rate: counted.iter().fold(0.0, |sum, (_, rate, _)| sum + rate),
        off_hourly_rate: off().fold(0.0, |sum, (_, rate, _)| sum + rate),
        off: off().count(),
        objects: counted.into_iter().map(|(name, _, _)| name).collect(),
    }
}

/// Rates are compared with this slack, so that sums of prices written with a few decimals
/// never refuse a create that fits exactly.
const RATE_SLACK: f64 = 1e-9;

/// Whether a create costing `rate` fits: the count without it plus `rate` within `limit`.
pub fn fits(count: &Count, rate: f64, limit: f64) -> bool {
    fits_rate(count.hourly_rate + rate, limit)
}

fn fits_rate(rate: f64, limit: f64) -> bool {
    rate <= limit + RATE_SLACK
}

/// The reservations still held once `objects` are seen at `now`: those of an object still
/// there that has not recorded its resource, and not abandoned.
pub fn held(reservations: &[Reservation], objects: &[Billed], now: Timestamp) -> Vec<Reservation> {
    reservations
        .iter()
        .filter(|r| {
            let Some(object) = objects.iter().find(|o| o.uid == r.uid) else {
                return false;
            };
            if object.created {
                return false;
            }
            object.create_started || now.duration_since(r.reserved_at.0) < ABANDONED_AFTER
        })
        .cloned()
        .collect()
}

/// Whether `labels` are selected by the Budget (every object when it has no selector).
pub fn selects(budget: &Budget, labels: &BTreeMap<String, String>) -> Result<bool, Error> {
    match &budget.spec.selector {
        None => Ok(true),
        Some(selector) => Ok(parse_selector(budget, selector)?.matches(labels)),
    }
}

fn parse_selector(budget: &Budget, selector: &LabelSelector) -> Result<Selector, Error> {
    Selector::try_from(selector.clone()).map_err(|e| Error::Blocked {
        reason: reason::INVALID_SPEC,
        message: format!("Budget {}: spec.selector: {e}", budget.name_any()),
    })
}

/// The billed objects of `namespace` that `budget` counts, read from the API server.
pub async fn billed_objects(
    client: &kube::Client,
    namespace: &str,
    budget: &Budget,
) -> Result<Vec<Billed>, Error> {
    let params = match &budget.spec.selector {
        None => ListParams::default(),
        Some(selector) => ListParams::default().labels_from(&parse_selector(budget, selector)?),
    };
    billed_matching(client, namespace, params).await
}

/// The billed objects of `namespace` that `params` list, read from the API server.
pub async fn billed_matching(
    client: &kube::Client,
    namespace: &str,
    params: ListParams,
) -> Result<Vec<Billed>, Error> {
    let mut objects = Vec::new();
    for listed in map_kinds(ListBilled {
        client: client.clone(),
        namespace: namespace.to_string(),
        params,
    }) {
        objects.extend(listed.await?);
    }
    Ok(objects)
}

type Listing = Pin<Box<dyn Future<Output = Result<Vec<Billed>, Error>> + Send>>;

/// Lists the objects of each billed kind.
struct ListBilled {
    client: kube::Client,
    namespace: String,
    params: ListParams,
}

impl KindFn<Listing> for ListBilled {
    fn call<K: ManagedKind>(&self) -> Listing {
        if !K::BILLED {
            return Box::pin(async { Ok(Vec::new()) });
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = self.params.clone();
        Box::pin(async move {
            let listed = api.list(&params).await?;
            Ok(listed.items.iter().map(billed).collect())
        })
    }
}

/// An object as a Budget counts it.
pub fn billed<K: ManagedKind>(object: &K) -> Billed {
    let status = crate::flow::recorded::recorded_status(object);
    let cost = object.hourly_cost();
    let protected = object
        .annotations()
        .get(gpucloud_api::deletion_protection::ANNOTATION)
        .is_some_and(|v| v == "true");
    let deleting = object.meta().deletion_timestamp.is_some();
    let managed = object.managed();
    let deletes_its_resource = managed.deletion_policy != DeletionPolicy::Orphan
        && managed.management_policy == ManagementPolicy::Manage;
    Billed {
        kind: K::kind(&()).into_owned(),
        name: object.name_any(),
        uid: object.uid().unwrap_or_default(),
        hourly_rate: cost.as_ref().map(|(rate, _)| *rate),
        currency: cost.map(|(_, currency)| currency),
        create_started: status.external_id.is_some() || status.pending_create.is_some(),
        created: status.external_id.is_some() && status.pending_create.is_none(),
        foreign_name: status.cloud_name.as_ref().is_some_and(|name| {
            *name
                != crate::flow::naming::cloud_name(
                    &object.namespace().unwrap_or_default(),
                    &object.name_any(),
                    &object.uid().unwrap_or_default(),
                )
        }),
        external_id: status.external_id.clone(),
        cloud_name: status.cloud_name.clone(),
        account: status.account.clone(),
        created_at: object.meta().creation_timestamp.as_ref().map(|t| t.0),
        may_power_off: object.is_running() && !protected,
        off: object.is_off(),
        deleting,
        may_delete: K::kind(&()) == GpuInstance::kind(&())
            && status.external_id.is_some()
            && !deleting
            && !protected
            && deletes_its_resource,
        gpus: object.gpus(),
    }
}

/// The machines a Budget keeps powered off, from those it `held` before. A held machine
/// that is off counts at what the cloud still bills for it (a share of its running rate).
/// Whether to power off more, a held machine not off yet counts as nothing, as those chosen
/// now do (the next count reads what they cost off): while what is counted so would pass
/// `limit`, the newest running machines are added. Whether to let one go, every machine
/// counts at what it costs now (one still powering off at its running rate, so that no
/// machine starts on a guess of what another will cost off): while it fits, held machines
/// are let go, oldest first, each whose running rate fits in place of what it costs now.
/// Machines gone are let go. Under `Refuse` none is held.
pub fn powered_off(
    on_exceeded: OnExceeded,
    limit: f64,
    counted: &Count,
    objects: &[Billed],
    held: &[PoweredOff],
    now: Timestamp,
) -> Vec<PoweredOff> {
    let power_state = match on_exceeded {
        OnExceeded::Refuse | OnExceeded::Delete | OnExceeded::SnapshotThenDelete => {
            return Vec::new();
        }
        OnExceeded::Stop => PowerState::Stopped,
        OnExceeded::Hibernate => PowerState::Hibernated,
    };
    let find = |uid: &str| objects.iter().find(|o| o.uid == uid);
    let rate_now = |uid: &str| {
        find(uid)
            .filter(|o| o.created)
            .and_then(|o| o.hourly_rate)
            .unwrap_or(0.0)
    };
    let mut held: Vec<PoweredOff> = held
        .iter()
        .filter(|h| find(&h.uid).is_some())
        .cloned()
        .collect();
    let powering_off: f64 = held
        .iter()
        .filter(|h| find(&h.uid).is_some_and(|o| !o.off))
        .map(|h| rate_now(&h.uid))
        .sum();
    let mut projected = counted.hourly_rate - powering_off;
    if !fits_rate(projected, limit) {
        let mut candidates: Vec<&Billed> = objects
            .iter()
            .filter(|o| o.may_power_off && o.created && !held.iter().any(|h| h.uid == o.uid))
            .collect();
        candidates.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.name.cmp(&b.name)));
        for machine in candidates {
            if fits_rate(projected, limit) {
                break;
            }
            let rate = machine.hourly_rate.unwrap_or(0.0);
            projected -= rate;
            held.push(PoweredOff {
                name: machine.name.clone(),
                uid: machine.uid.clone(),
                hourly_rate: rate,
                power_state,
                since: Time(now),
            });
        }
    } else {
        let created_at = |h: &PoweredOff| find(&h.uid).and_then(|o| o.created_at);
        let mut oldest_first: Vec<PoweredOff> = held.clone();
        oldest_first.sort_by_key(created_at);
        let mut counted_now = counted.hourly_rate;
        for machine in oldest_first {
            let instead = machine.hourly_rate - rate_now(&machine.uid);
            if fits_rate(counted_now + instead, limit) {
                counted_now += instead;
                held.retain(|h| h.uid != machine.uid);
            }
        }
    }
    held
}

/// The GpuInstances a Budget deletes under `Delete` or `SnapshotThenDelete`: while what is
/// counted, less what the objects already being deleted cost (they are going), would pass
/// `limit`, the newest machines it may delete, each taking off what it costs now (running or
/// off). None under the other policies.
pub fn to_delete<'a>(
    on_exceeded: OnExceeded,
    limit: f64,
    counted: &Count,
    objects: &'a [Billed],
) -> Vec<&'a Billed> {
    if !matches!(
        on_exceeded,
        OnExceeded::Delete | OnExceeded::SnapshotThenDelete
    ) {
        return Vec::new();
    }
    let rate_now = |o: &Billed| o.hourly_rate.filter(|_| o.created).unwrap_or(0.0);
    let going: f64 = objects.iter().filter(|o| o.deleting).map(rate_now).sum();
    let mut projected = counted.hourly_rate - going;
    let mut candidates: Vec<&Billed> = objects.iter().filter(|o| o.may_delete).collect();
    candidates.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.name.cmp(&b.name)));
    let mut chosen = Vec::new();
    for machine in candidates {
        if fits_rate(projected, limit) {
            break;
        }
        projected -= rate_now(machine);
        chosen.push(machine);
    }
    chosen
}

/// Deletes the `machines` [`to_delete`] chose, each through its own deletion (its finalizer
/// deletes the machine), with its uid as a precondition so a namesake made since is never
/// deleted. Under `SnapshotThenDelete` each is first set to `deletionPolicy: Snapshot`, and
/// the delete also carries the resourceVersion that write returned: an edit in between (the
/// policy set back) fails it, and the next count chooses again. A delete refused at admission
/// (deletion protection) or of an object gone is left to the next count. Returns the names
/// deleted; each gets a Warning Event saying why.
async fn delete_machines(
    client: &kube::Client,
    events: &EventPublisher,
    budget: &Budget,
    machines: &[&Billed],
    why: &str,
) -> Result<Vec<String>, Error> {
    let namespace = budget.namespace().unwrap_or_default();
    let api: Api<GpuInstance> = Api::namespaced(client.clone(), &namespace);
    let snapshot = budget.spec.on_exceeded == OnExceeded::SnapshotThenDelete;
    let mut deleted = Vec::new();
    for machine in machines {
        let mut preconditions = kube::api::Preconditions {
            uid: Some(machine.uid.clone()),
            resource_version: None,
        };
        if snapshot {
            let patch = serde_json::json!({
                "metadata": {"uid": machine.uid},
                "spec": {"deletionPolicy": DeletionPolicy::Snapshot},
            });
            match api
                .patch(
                    &machine.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(patched) => preconditions.resource_version = patched.resource_version(),
                // Refused, gone, or a namesake (its uid differs): the next count looks again.
                Err(kube::Error::Api(status)) if matches!(status.code, 403 | 404 | 409 | 422) => {
                    continue;
                }
                Err(error) => return Err(error.into()),
            }
        }
        let params = DeleteParams {
            preconditions: Some(preconditions),
            ..DeleteParams::default()
        };
        match api.delete(&machine.name, &params).await {
            Ok(_) => {
                let how = if snapshot {
                    "after a final snapshot (deletionPolicy set to Snapshot)"
                } else {
                    "with its machine"
                };
                events.send(
                    crate::runtime::events::event(
                        EventType::Warning,
                        reason::BUDGET_EXCEEDED,
                        &format!(
                            "deleted {how} by Budget {} (onExceeded: {:?}): {why}",
                            budget.name_any(),
                            budget.spec.on_exceeded
                        ),
                        "DeleteForBudget",
                    ),
                    k8s_openapi::api::core::v1::ObjectReference {
                        api_version: Some(GpuInstance::api_version(&()).into_owned()),
                        kind: Some(GpuInstance::kind(&()).into_owned()),
                        name: Some(machine.name.clone()),
                        namespace: Some(namespace.clone()),
                        uid: Some(machine.uid.clone()),
                        ..Default::default()
                    },
                );
                deleted.push(machine.name.clone());
            }
            // Refused at admission (deletion protection), gone, or changed since it was
            // read: the next count looks again.
            Err(kube::Error::Api(status)) if matches!(status.code, 403 | 404 | 409) => {
                tracing::info!(budget = %budget.name_any(), machine = %machine.name, code = status.code, message = %status.message, "machine not deleted for the Budget");
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(deleted)
}

/// The Budgets of the object's namespace that count it.
pub async fn budgets_of<K: ManagedKind>(
    client: &kube::Client,
    object: &K,
) -> Result<Vec<Budget>, Error> {
    if !K::BILLED {
        return Ok(Vec::new());
    }
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<Budget> = Api::namespaced(client.clone(), &namespace);
    let mut counting = Vec::new();
    for budget in api.list(&ListParams::default()).await?.items {
        if selects(&budget, object.labels())? {
            counting.push(budget);
        }
    }
    Ok(counting)
}

/// What a create reserves: its hourly rate in the account's currency, and the resource it
/// makes (`<account>/<cloud name>`), whose billing a Budget with `maxSpend` counts from then
/// on, even should the resource be deleted before the Budget is next counted.
pub struct Ask<'a> {
    pub rate: f64,
    pub currency: &'a str,
    pub charge: String,
}

/// Reserves `ask` for the create of `object` in each of `budgets`, or refuses it with
/// `BudgetExceeded` when one would be passed (giving back what it reserved in the others).
/// A reservation the object already holds is kept as it is. The final snapshot of a machine
/// being deleted is reserved, never refused: it is what lets the machine go.
pub async fn reserve<K: ManagedKind>(
    client: &kube::Client,
    object: &K,
    budgets: Vec<Budget>,
    ask: &Ask<'_>,
    clock: &Clock,
) -> Result<(), Error> {
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<Budget> = Api::namespaced(client.clone(), &namespace);
    let uid = object.uid().unwrap_or_default();
    let refusable = object.budget_may_refuse(client).await?;
    let mut reserved: Vec<String> = Vec::new();
    for budget in budgets {
        let name = budget.name_any();
        match reserve_in(client, &api, object, (&uid, refusable), budget, ask, clock).await {
            Ok(()) => reserved.push(name),
            Err(error) => {
                for name in &reserved {
                    if let Err(e) = release_in(&api, name, &uid).await {
                        tracing::warn!(budget = %name, error = %e, "reservation not given back; the Budget drops it once the object is settled");
                    }
                }
                return Err(error);
            }
        }
    }
    Ok(())
}

async fn reserve_in<K: ManagedKind>(
    client: &kube::Client,
    api: &Api<Budget>,
    object: &K,
    (uid, refusable): (&str, bool),
    mut budget: Budget,
    ask: &Ask<'_>,
    clock: &Clock,
) -> Result<(), Error> {
    let (rate, currency) = (ask.rate, ask.currency);
    let namespace = object.namespace().unwrap_or_default();
    let name = budget.name_any();
    for _ in 0..RESERVE_ATTEMPTS {
        let mut status = budget.status.clone().unwrap_or_default();
        if status.reservations.iter().any(|r| r.uid == uid) {
            return Ok(());
        }
        if budget.spec.currency != currency {
            return Err(currency_mismatch(&budget, currency));
        }
        let objects = billed_objects(client, &namespace, &budget).await?;
        let counted = count(&objects, &status.reservations, Some(uid));
        if let Some(refused) = refusal(&budget, &counted, rate).filter(|_| refusable) {
            return Err(refused);
        }
        status.reservations.push(Reservation {
            kind: K::kind(&()).into_owned(),
            name: object.name_any(),
            uid: uid.to_string(),
            hourly_rate: rate,
            // On the operator's clock, as `held` reads it (`ABANDONED_AFTER`).
            reserved_at: Time(clock.now()),
        });
        if budget.spec.max_spend.is_some() && !status.charged.contains(&ask.charge) {
            status.charged.push(ask.charge.clone());
        }
        let total = count(&objects, &status.reservations, None);
        show_count(&mut status, &total, &budget, currency);
        budget.status = Some(status);
        // Carries the resourceVersion read: a concurrent reservation makes this one lose.
        match api
            .replace_status(&name, &PostParams::default(), &budget)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                budget = read(api, &name).await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(Error::InProgress {
        reason: reason::BUDGET_EXCEEDED,
        message: format!(
            "Budget {name} changed under {RESERVE_ATTEMPTS} reservations in a row; trying again"
        ),
    })
}

/// Why `budget` refuses a create costing `rate` (in its currency) while it counts `counted`
/// (the create left out), if it does: the create would pass its `maxHourlyRate`, or the
/// period's spend is used up. Pure: [`reserve`] decides with it, and so does `plan`.
pub fn refusal(budget: &Budget, counted: &Count, rate: f64) -> Option<Error> {
    let currency = &budget.spec.currency;
    let limit = budget.spec.max_hourly_rate;
    let message = if fits(counted, rate, limit) {
        spend_used_up(budget)?
    } else {
        format!(
            "this create would add {rate:.4} {currency}/h to the {:.4} {currency}/h counted, over its maxHourlyRate of {limit:.4} {currency}/h",
            counted.hourly_rate
        )
    };
    Some(Error::BudgetExceeded {
        budget: budget.name_any(),
        message,
    })
}

/// Gives back the reservations of `object` (its create was refused).
pub async fn release<K: ManagedKind>(client: &kube::Client, object: &K) -> Result<(), Error> {
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<Budget> = Api::namespaced(client.clone(), &namespace);
    let uid = object.uid().unwrap_or_default();
    for budget in api.list(&ListParams::default()).await?.items {
        let holds = budget
            .status
            .as_ref()
            .is_some_and(|s| s.reservations.iter().any(|r| r.uid == uid));
        if holds {
            release_in(&api, &budget.name_any(), &uid).await?;
        }
    }
    Ok(())
}

async fn release_in(api: &Api<Budget>, name: &str, uid: &str) -> Result<(), Error> {
    for _ in 0..RESERVE_ATTEMPTS {
        let mut budget = read(api, name).await?;
        let mut status = budget.status.clone().unwrap_or_default();
        let before = status.reservations.len();
        status.reservations.retain(|r| r.uid != uid);
        if status.reservations.len() == before {
            return Ok(());
        }
        budget.status = Some(status);
        match api
            .replace_status(name, &PostParams::default(), &budget)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Why no create may be billed under the Budget's spend limit this period, if so: what the
/// Budget last counted as spent has reached `maxSpend`.
fn spend_used_up(budget: &Budget) -> Option<String> {
    let max = budget.spec.max_spend?;
    let status = budget.status.as_ref()?;
    let spent = status.spent?;
    let currency = &budget.spec.currency;
    let until = status
        .period_end
        .as_ref()
        .map_or_else(String::new, |end| format!(" until {}", end.0));
    (spent >= max).then(|| {
        format!(
            "{spent:.2} {currency} of its maxSpend {max:.2} {currency} is spent this period: no billed create{until}"
        )
    })
}

/// The charges to count: the billing entries, by account, of the resources `charged` names
/// (`<account>/<cloud name>/<seal>`, checked by the caller).
pub fn spent_since(
    charged: &[String],
    billing: &BTreeMap<String, Arc<Billing>>,
    from: Timestamp,
    now: Timestamp,
) -> f64 {
    let mut spent = 0.0;
    for entry in charged {
        let mut parts = entry.split('/');
        let (Some(account), Some(name)) = (parts.next(), parts.next()) else {
            continue;
        };
        if let Some(billing) = billing.get(account) {
            spent += billing
                .charges_of(name)
                .iter()
                .map(|c| c.since(from, now))
                .sum::<f64>();
        }
    }
    spent
}

/// Counts the period's spend into `status` (for a Budget with `maxSpend`): the resources
/// counted this period are remembered in `status.charged` (so a deleted one's spend still
/// counts), each account's billing is read (cached as `Account::billing` says), and the spend,
/// the projection to the period's end and what is left are written. A billing read that fails
/// leaves the last figures.
async fn count_spend(
    status: &mut BudgetStatus,
    budget: &Budget,
    objects: &[Billed],
    counted: &Count,
    (accounts, ownership): (&Accounts, &Ownership),
    now: Timestamp,
) -> Result<(), Error> {
    let (Some(max), Some(period)) = (budget.spec.max_spend, &budget.spec.period) else {
        status.spent = None;
        status.projected = None;
        status.spend_remaining = None;
        status.overspend_warned_for = None;
        status.period_start = None;
        status.period_end = None;
        status.charged.clear();
        return Ok(());
    };
    let (start, end) = period.around(now).map_err(|message| Error::Blocked {
        reason: reason::INVALID_SPEC,
        message,
    })?;
    if status.period_start.as_ref().map(|t| t.0) != Some(start) {
        status.charged.clear();
        status.spent = Some(0.0);
    }
    status.period_start = Some(Time(start));
    status.period_end = Some(Time(end));
    let namespace = budget.namespace().unwrap_or_default();
    let all = accounts.all();
    // Entries the operator did not seal for this namespace (written into the status by
    // someone else) are dropped: a Budget reads only its namespace's charges. Those of an
    // account this process does not use (yet) stay, uncounted.
    let before = status.charged.len();
    status.charged.retain(|entry| {
        all.iter()
            .find(|account| entry.starts_with(&format!("{}/", account.id.label())))
            .is_none_or(|account| account.is_own_charge(&namespace, entry))
    });
    if status.charged.len() < before {
        tracing::warn!(
            budget = %budget.name_any(),
            %namespace,
            dropped = before - status.charged.len(),
            "status.charged named resources the operator did not count for this namespace; they are not counted"
        );
    }
    for object in objects.iter().filter(|o| o.create_started) {
        if let (Some(label), Some(name)) = (&object.account, &object.cloud_name)
            && let Some(account) = all.iter().find(|a| a.id.label() == *label)
        {
            // A name not made for the object is counted only while it is no one else's: a
            // status can name any resource.
            if object.foreign_name
                && ownership
                    .claimed_elsewhere(
                        &object.kind,
                        &namespace,
                        &object.uid,
                        object.external_id.as_deref().unwrap_or_default(),
                        name,
                        crate::accounts::released::SHARED_READ_FOR,
                    )
                    .await?
            {
                continue;
            }
            let entry = account.charge_entry(&namespace, name);
            if !status.charged.contains(&entry) {
                status.charged.push(entry);
            }
        }
    }
    let mut billing = BTreeMap::new();
    let mut unread = false;
    for account in all {
        let label = account.id.label();
        if !status
            .charged
            .iter()
            .any(|c| c.starts_with(&format!("{label}/")))
        {
            continue;
        }
        match account
            .billing(&crate::accounts::account::BillingList::ALL)
            .await
        {
            Ok(charges) => {
                billing.insert(label, charges);
            }
            Err(error) => {
                tracing::warn!(account = %label, %error, "billing not read; the Budget keeps its last spend");
                unread = true;
            }
        }
    }
    if !unread {
        status.spent = Some(round(spent_since(&status.charged, &billing, start, now)));
    }
    let spent = status.spent.unwrap_or(0.0);
    let hours_left = end.duration_since(now).as_secs_f64().max(0.0) / 3600.0;
    // To the cent: a projection to a millionth would change at every count, and each count
    // would be a status write.
    status.projected = Some(((spent + counted.hourly_rate * hours_left) * 100.0).round() / 100.0);
    status.spend_remaining = Some(round(max - spent));
    Ok(())
}

/// A Budget as it stands now, read with a list (the operator is granted `list` and `watch` on
/// Budgets, never `get`): gone, it is nothing to reserve in or give back to.
async fn read(api: &Api<Budget>, name: &str) -> Result<Budget, Error> {
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    api.list(&params)
        .await?
        .items
        .into_iter()
        .next()
        .ok_or_else(|| Error::InProgress {
            reason: reason::BUDGET_EXCEEDED,
            message: format!("Budget {name} is gone; counting again"),
        })
}

/// Why a Budget counting in another currency than the account's refuses every create.
pub fn currency_mismatch(budget: &Budget, currency: &str) -> Error {
    Error::Blocked {
        reason: reason::CURRENCY_MISMATCH,
        message: format!(
            "Budget {} counts in {} but the cloud account bills in {currency}: set spec.currency to {currency}",
            budget.name_any(),
            budget.spec.currency
        ),
    }
}

/// Writes the figures of `count` into `status`.
fn show_count(status: &mut BudgetStatus, count: &Count, budget: &Budget, currency: &str) {
    status.hourly_rate = Some(round(count.hourly_rate));
    status.off_hourly_rate = Some(round(count.off_hourly_rate));
    status.remaining = Some(round(budget.spec.max_hourly_rate - count.hourly_rate));
    status.currency = Some(currency.to_string());
    status.counted = Some(i32::try_from(count.objects.len()).unwrap_or(i32::MAX));
    status.objects = count.objects.iter().take(LISTED_OBJECTS).cloned().collect();
}

/// Rates to a millionth: sums of prices otherwise show float noise in `kubectl get`.
fn round(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}

/// The Budgets of a scope as a scrape reports them (`gpucloud_budget_*`).
pub struct Figures(pub kube::runtime::reflector::Store<Budget>);

impl gpucloud_telemetry::BudgetSource for Figures {
    fn budgets(&self) -> Vec<gpucloud_telemetry::BudgetFigures> {
        self.0
            .state()
            .iter()
            .map(|b| {
                let status = b.status.clone().unwrap_or_default();
                gpucloud_telemetry::BudgetFigures {
                    namespace: b.namespace().unwrap_or_default(),
                    name: b.name_any(),
                    currency: b.spec.currency.clone(),
                    hourly_rate: status.hourly_rate,
                    max_hourly_rate: b.spec.max_hourly_rate,
                    spent: status.spent,
                    max_spend: b.spec.max_spend,
                }
            })
            .collect()
    }
}

/// Where a Budget stands, read from `budget` as just counted (its status holds the spend and
/// the machines it keeps off): within its limits (`Ready`), within them but projected past
/// `maxSpend` before the period ends (`Ready`, reason `ProjectedOverBudget`), over one of them
/// or keeping machines off (`Stalled`: a person raises a limit or deletes something it counts,
/// or the next period comes), or unusable.
pub fn outcome(budget: &Budget, count: &Count, objects: &[Billed]) -> Outcome {
    let currency = &budget.spec.currency;
    if let Some(other) = objects
        .iter()
        .filter_map(|o| o.currency.as_deref())
        .find(|c| c != currency)
    {
        return Outcome::stalled(
            reason::CURRENCY_MISMATCH,
            format!(
                "the counted objects are billed in {other} but the Budget counts in {currency}: set spec.currency to {other}"
            ),
        );
    }
    let limit = budget.spec.max_hourly_rate;
    let mut figures = format!(
        "{} objects cost {:.4} {currency}/h of its maxHourlyRate {:.4} {currency}/h",
        count.objects.len(),
        count.hourly_rate,
        limit
    );
    if count.off > 0 {
        figures.push_str(&format!(
            " ({:.4} {currency}/h of it for {} off: the cloud bills a share of their running rate)",
            count.off_hourly_rate,
            machines(count.off)
        ));
    }
    let status = budget.status.as_ref();
    let keeps_off = status
        .map(|s| keeps_off(&s.powered_off))
        .unwrap_or_default();
    // Machines being deleted still count until they are gone.
    let going = deleting(objects);
    if let Some(used_up) = spend_used_up(budget) {
        Outcome::stalled(
            reason::BUDGET_EXCEEDED,
            format!(
                "{figures}; {used_up}{keeps_off}{going}. Raise maxSpend, or wait for the next period"
            ),
        )
    } else if !fits(count, 0.0, limit) {
        Outcome::stalled(
            reason::BUDGET_EXCEEDED,
            format!(
                "{figures}, over it: new billed creates are refused{keeps_off}{going}. Raise maxHourlyRate, or delete something it counts"
            ),
        )
    } else if !keeps_off.is_empty() {
        Outcome::stalled(
            reason::BUDGET_EXCEEDED,
            format!(
                "{figures}{keeps_off}: running, they would take it past maxHourlyRate. Raise maxHourlyRate, or delete something it counts"
            ),
        )
    } else if let Some(warning) = projected_over(budget, count) {
        Outcome::ready(
            reason::PROJECTED_OVER_BUDGET,
            format!("{figures}; {warning}"),
        )
    } else {
        match (budget.spec.max_spend, status) {
            (Some(max), Some(status)) => Outcome::ready(
                reason::WITHIN_BUDGET,
                format!(
                    "{figures}; {:.2} {currency} spent of its maxSpend {max:.2} {currency}, {:.2} {currency} projected by the end of the period",
                    status.spent.unwrap_or(0.0),
                    status.projected.unwrap_or(0.0)
                ),
            ),
            _ => Outcome::ready(reason::WITHIN_BUDGET, figures),
        }
    }
}

/// The machines listed in a message, at most.
const NAMED_MACHINES: usize = 5;

/// `; it keeps 2 machines off (stopped: b; hibernated: a)`, or nothing when it keeps none.
fn keeps_off(held: &[PoweredOff]) -> String {
    if held.is_empty() {
        return String::new();
    }
    let named = |state: PowerState| -> Vec<&str> {
        held.iter()
            .filter(|h| h.power_state == state)
            .map(|h| h.name.as_str())
            .collect()
    };
    let mut parts = Vec::new();
    for (state, word) in [
        (PowerState::Stopped, "stopped"),
        (PowerState::Hibernated, "hibernated"),
    ] {
        let names = named(state);
        if names.is_empty() {
            continue;
        }
        let more = names.len().saturating_sub(NAMED_MACHINES);
        let mut listed = names
            .iter()
            .take(NAMED_MACHINES)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        if more > 0 {
            listed.push_str(&format!(" and {more} more"));
        }
        parts.push(format!("{word}: {listed}"));
    }
    format!(
        "; it keeps {} off ({})",
        machines(held.len()),
        parts.join("; ")
    )
}

/// `; it is deleting 2 machines (b, a)`: the GpuInstances counted that are being deleted, or
/// nothing.
fn deleting(objects: &[Billed]) -> String {
    let names: Vec<&str> = objects
        .iter()
        .filter(|o| o.deleting && o.gpus > 0)
        .map(|o| o.name.as_str())
        .collect();
    if names.is_empty() {
        return String::new();
    }
    let more = names.len().saturating_sub(NAMED_MACHINES);
    let mut listed = names[..names.len() - more].join(", ");
    if more > 0 {
        listed.push_str(&format!(" and {more} more"));
    }
    format!("; {} being deleted ({listed})", machines(names.len()))
}

/// `1 machine`, `2 machines`.
fn machines(count: usize) -> String {
    if count == 1 {
        "1 machine".into()
    } else {
        format!("{count} machines")
    }
}

/// What a Budget with `maxSpend`, counted into `budget.status`, says before its spend is used
/// up: that at the counted rate the spend reaches `maxSpend` before the period ends, about
/// when, and what happens then.
fn projected_over(budget: &Budget, count: &Count) -> Option<String> {
    let max = budget.spec.max_spend?;
    let status = budget.status.as_ref()?;
    let projected = status.projected?;
    let end = status.period_end.as_ref()?.0;
    if projected <= max || count.hourly_rate <= 0.0 {
        return None;
    }
    let currency = &budget.spec.currency;
    let spent = status.spent.unwrap_or(0.0);
    // The projection is a line at the counted rate up to the period's end: it meets maxSpend
    // that much earlier. To the hour, so that the message moves only as the figures do.
    let reached = SignedDuration::try_from_secs_f64((projected - max) / count.hourly_rate * 3600.0)
        .ok()
        .and_then(|early| end.checked_sub(early).ok())
        .and_then(|at| {
            let second = at.as_second();
            Timestamp::from_second(second - second.rem_euclid(3600)).ok()
        })
        .map_or_else(String::new, |at| format!(" about {at}"));
    let then = match budget.spec.on_exceeded {
        OnExceeded::Refuse => "billed creates are refused",
        OnExceeded::Stop => "billed creates are refused and its running machines stopped",
        OnExceeded::Hibernate => "billed creates are refused and its running machines hibernated",
        OnExceeded::Delete => "billed creates are refused and its machines deleted",
        OnExceeded::SnapshotThenDelete => {
            "billed creates are refused and its machines deleted after a final snapshot"
        }
    };
    Some(format!(
        "{spent:.2} {currency} spent, projected {projected:.2} {currency} by the end of the period ({end}), over its maxSpend {max:.2} {currency}: at this rate maxSpend is reached{reached}, from when {then}"
    ))
}

/// Recounts a Budget: its figures, conditions and the reservations still held, written with
/// its resourceVersion (a reservation made meanwhile is never dropped). Its period, the
/// reservations' age and the spend are read at the `clock`'s now; its conditions' times are
/// the wall clock's, as events' are. A spend projected past `maxSpend` is told in one Warning
/// Event per period, once the status that remembers it is written. Returns when its spend
/// period ends (with `maxSpend`).
pub async fn reconcile(
    client: &kube::Client,
    (accounts, ownership): (&Accounts, &Ownership),
    events: &EventPublisher,
    budget: &Budget,
    clock: &Clock,
) -> Result<Option<Timestamp>, Error> {
    let namespace = budget.namespace().unwrap_or_default();
    let api: Api<Budget> = Api::namespaced(client.clone(), &namespace);
    let objects = match billed_objects(client, &namespace, budget).await {
        Ok(objects) => objects,
        Err(error @ Error::Blocked { .. }) => {
            let status = budget.status.clone().unwrap_or_default();
            return write_failure(&api, budget, status, &error)
                .await
                .map(|()| None);
        }
        Err(error) => return Err(error),
    };
    let now = clock.now();
    let mut status = budget.status.clone().unwrap_or_default();
    status.reservations = held(&status.reservations, &objects, now);
    let counted = count(&objects, &status.reservations, None);
    let currency = objects
        .iter()
        .find_map(|o| o.currency.clone())
        .unwrap_or_else(|| budget.spec.currency.clone());
    show_count(&mut status, &counted, budget, &currency);
    status.observed_generation = budget.meta().generation;
    if let Err(error) = count_spend(
        &mut status,
        budget,
        &objects,
        &counted,
        (accounts, ownership),
        now,
    )
    .await
    {
        return write_failure(&api, budget, status, &error)
            .await
            .map(|()| None);
    }
    let period_end = status.period_end.as_ref().map(|end| end.0);
    let as_counted = |status: &BudgetStatus| Budget {
        status: Some(status.clone()),
        ..budget.clone()
    };
    // With the period's spend used up, nothing running may stay on.
    let limit = if spend_used_up(&as_counted(&status)).is_some() {
        0.0
    } else {
        budget.spec.max_hourly_rate
    };
    status.powered_off = powered_off(
        budget.spec.on_exceeded,
        limit,
        &counted,
        &objects,
        &status.powered_off,
        now,
    );
    let chosen = to_delete(budget.spec.on_exceeded, limit, &counted, &objects);
    let mut objects = objects.clone();
    if !chosen.is_empty() {
        let why = spend_used_up(&as_counted(&status)).unwrap_or_else(|| {
            format!(
                "it counts {:.4} {currency}/h, over its maxHourlyRate {:.4} {currency}/h",
                counted.hourly_rate, budget.spec.max_hourly_rate
            )
        });
        let deleted = delete_machines(client, events, budget, &chosen, &why).await?;
        // Being deleted now: said so below, and never chosen twice.
        for object in objects.iter_mut().filter(|o| deleted.contains(&o.name)) {
            object.deleting = true;
            object.may_delete = false;
        }
    }
    let outcome = outcome(&as_counted(&status), &counted, &objects);
    conditions::apply(
        &mut status.conditions,
        &outcome,
        budget.meta().generation,
        Timestamp::now(),
    );
    set_exceeded(&mut status, &outcome, budget.meta().generation);
    let warn = outcome.reason() == reason::PROJECTED_OVER_BUDGET
        && status.period_start.is_some()
        && status.overspend_warned_for != status.period_start;
    if warn {
        status.overspend_warned_for = status.period_start.clone();
    }
    write(&api, budget, status).await?;
    // After the write that remembers it: a write that lost a race tells nothing, and the
    // next count tells it then.
    if warn {
        events.send(
            crate::runtime::events::event(
                EventType::Warning,
                reason::PROJECTED_OVER_BUDGET,
                outcome.message(),
                "CountBudget",
            ),
            budget.object_ref(&()),
        );
    }
    Ok(period_end)
}

/// The condition type saying whether the count is over the limit.
pub const EXCEEDED: &str = "Exceeded";

/// Sets `Exceeded` from the outcome, its time moving only when its status does.
fn set_exceeded(status: &mut BudgetStatus, outcome: &Outcome, generation: Option<i64>) {
    let exceeded = outcome.reason() == reason::BUDGET_EXCEEDED;
    let value = if exceeded { "True" } else { "False" };
    let since = status
        .conditions
        .iter()
        .find(|c| c.type_ == EXCEEDED && c.status == value)
        .map_or_else(
            || Time(Timestamp::now()),
            |c| c.last_transition_time.clone(),
        );
    status.conditions.retain(|c| c.type_ != EXCEEDED);
    status.conditions.push(Condition {
        type_: EXCEEDED.into(),
        status: value.into(),
        reason: outcome.reason().into(),
        message: outcome.message().into(),
        observed_generation: generation,
        last_transition_time: since,
    });
}

/// Writes `status` with the failure that stopped the count on its conditions.
async fn write_failure(
    api: &Api<Budget>,
    budget: &Budget,
    mut status: BudgetStatus,
    error: &Error,
) -> Result<(), Error> {
    conditions::apply(
        &mut status.conditions,
        &error.outcome(),
        budget.meta().generation,
        Timestamp::now(),
    );
    write(api, budget, status).await
}

async fn write(api: &Api<Budget>, budget: &Budget, status: BudgetStatus) -> Result<(), Error> {
    if budget.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut updated = budget.clone();
    updated.status = Some(status);
    api.replace_status(&budget.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, rate: Option<f64>, created: bool) -> Billed {
        Billed {
            kind: "GpuInstance".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            hourly_rate: rate,
            currency: rate.map(|_| "USD".into()),
            create_started: created,
            created,
            cloud_name: None,
            external_id: None,
            foreign_name: false,
            account: None,
            created_at: None,
            may_power_off: false,
            off: false,
            deleting: false,
            may_delete: false,
            gpus: 1,
        }
    }

    fn reservation(name: &str, rate: f64, minutes_ago: i64) -> Reservation {
        Reservation {
            kind: "GpuInstance".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            hourly_rate: rate,
            reserved_at: Time(Timestamp::now() - SignedDuration::from_mins(minutes_ago)),
        }
    }

    #[test]
    fn an_object_counts_once_at_the_larger_of_its_rate_and_its_reservation() {
        let objects = [object("a", Some(2.0), true), object("b", None, false)];
        // (reservations, except, expected rate, expected objects)
        type Row<'a> = (Vec<Reservation>, Option<&'a str>, f64, Vec<&'a str>);
        let table: Vec<Row> = vec![
            (vec![], None, 2.0, vec!["GpuInstance/a"]),
            (
                vec![reservation("b", 3.0, 0)],
                None,
                5.0,
                vec!["GpuInstance/b", "GpuInstance/a"],
            ),
            // Reserved and already reporting: once, the larger.
            (
                vec![reservation("a", 2.5, 0)],
                None,
                2.5,
                vec!["GpuInstance/a"],
            ),
            (
                vec![reservation("a", 1.0, 0)],
                None,
                2.0,
                vec!["GpuInstance/a"],
            ),
            // The object reserving is left out of its own check.
            (
                vec![reservation("b", 3.0, 0)],
                Some("uid-b"),
                2.0,
                vec!["GpuInstance/a"],
            ),
        ];
        for (reservations, except, rate, names) in table {
            let counted = count(&objects, &reservations, except);
            assert!(
                (counted.hourly_rate - rate).abs() < 1e-12,
                "{reservations:?}"
            );
            assert_eq!(counted.objects, names, "{reservations:?}");
        }
    }

    #[test]
    fn a_rate_not_yet_settled_does_not_count_without_a_reservation() {
        // A create in flight shows no rate of its own: its reservation is what counts.
        let objects = [object("a", Some(2.0), false)];
        assert_eq!(count(&objects, &[], None).hourly_rate, 0.0);
    }

    #[test]
    fn nothing_counted_is_zero_not_minus_zero() {
        let counted = count(&[], &[], None);
        assert!(counted.hourly_rate.is_sign_positive(), "{counted:?}");
        assert!(counted.off_hourly_rate.is_sign_positive(), "{counted:?}");
        assert_eq!(round(counted.hourly_rate).to_string(), "0");
    }

    #[test]
    fn a_create_fits_up_to_the_limit_exactly() {
        let counted = Count {
            hourly_rate: 0.1 + 0.2,
            ..Count::default()
        };
        assert!(fits(&counted, 0.7, 1.0));
        assert!(!fits(&counted, 0.71, 1.0));
        assert!(fits(&Count::default(), 0.0, 0.0));
        assert!(!fits(&Count::default(), 0.01, 0.0));
    }

    #[test]
    fn reservations_are_held_until_the_create_is_over() {
        let now = Timestamp::now();
        let objects = [
            object("settled", Some(1.0), true),
            object("creating", None, false),
            Billed {
                create_started: true,
                ..object("in-flight", None, false)
            },
        ];
        // (reservation, held?)
        let table = [
            (reservation("settled", 1.0, 0), false),
            (reservation("creating", 1.0, 1), true),
            (reservation("creating", 1.0, 11), false),
            (reservation("in-flight", 1.0, 60), true),
            (reservation("gone", 1.0, 0), false),
        ];
        for (reservation, expected) in table {
            let kept = held(std::slice::from_ref(&reservation), &objects, now);
            assert_eq!(!kept.is_empty(), expected, "{}", reservation.name);
        }
    }

    /// A running machine created `minute` minutes into the hour.
    fn running(name: &str, rate: f64, minute: i64) -> Billed {
        Billed {
            created_at: Some(Timestamp::from_second(minute * 60).unwrap()),
            may_power_off: true,
            ..object(name, Some(rate), true)
        }
    }

    fn names(held: &[PoweredOff]) -> Vec<&str> {
        held.iter().map(|h| h.name.as_str()).collect()
    }

    #[test]
    fn the_newest_running_machines_are_powered_off_until_the_rest_fit() {
        let now = Timestamp::now();
        let protected = Billed {
            may_power_off: false,
            ..running("protected", 1.0, 9)
        };
        let objects = [
            running("oldest", 1.0, 1),
            running("middle", 1.0, 2),
            running("newest", 1.0, 3),
            protected,
            object("volume", Some(0.5), true),
        ];
        let counted = count(&objects, &[], None);
        assert_eq!(counted.hourly_rate, 4.5);
        // (policy, limit, held before, held after)
        let table: Vec<(OnExceeded, f64, Vec<&str>, Vec<&str>)> = vec![
            (OnExceeded::Stop, 10.0, vec![], vec![]),
            (OnExceeded::Stop, 3.5, vec![], vec!["newest"]),
            (OnExceeded::Stop, 2.5, vec![], vec!["newest", "middle"]),
            // Only the protected machine and the volume left: as far as it can go.
            (
                OnExceeded::Stop,
                0.1,
                vec![],
                vec!["newest", "middle", "oldest"],
            ),
            (OnExceeded::Refuse, 2.5, vec![], vec![]),
            // Held machines count as off: no further machine is chosen.
            (
                OnExceeded::Stop,
                2.5,
                vec!["middle", "newest"],
                vec!["newest", "middle"],
            ),
        ];
        for (policy, limit, before, after) in table {
            let before: Vec<PoweredOff> =
                powered_off(OnExceeded::Stop, 0.0, &counted, &objects, &[], now)
                    .into_iter()
                    .filter(|h| before.contains(&h.name.as_str()))
                    .collect();
            let held = powered_off(policy, limit, &counted, &objects, &before, now);
            assert_eq!(names(&held), after, "{policy:?} at {limit}");
        }
    }

    #[test]
    fn a_machine_powered_off_starts_again_once_its_running_rate_fits() {
        let now = Timestamp::now();
        let objects = [
            running("oldest", 1.0, 1),
            stopped(running("middle", 1.0, 2)),
            stopped(running("newest", 1.0, 3)),
        ];
        let held: Vec<PoweredOff> = ["middle", "newest"]
            .iter()
            .map(|name| PoweredOff {
                name: name.to_string(),
                uid: format!("uid-{name}"),
                hourly_rate: 1.0,
                power_state: PowerState::Stopped,
                since: Time(now),
            })
            .collect();
        let counted = count(&objects, &[], None);
        // (limit, still held): one started again costs its running rate in place of the
        // tenth it costs stopped, beside the other's tenth.
        for (limit, after) in [
            (1.5, vec!["middle", "newest"]),
            (2.0, vec!["middle", "newest"]),
            (2.1, vec!["newest"]),
            (3.0, vec![]),
        ] {
            let kept = powered_off(OnExceeded::Stop, limit, &counted, &objects, &held, now);
            assert_eq!(names(&kept), after, "at {limit}");
        }
        // A machine gone is let go.
        let kept = powered_off(OnExceeded::Stop, 1.5, &counted, &objects[..2], &held, now);
        assert_eq!(names(&kept), ["middle"]);
    }

    fn budget(spec: serde_json::Value, status: BudgetStatus) -> Budget {
        let mut budget: Budget = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "Budget",
            "metadata": {"name": "team", "namespace": "ml"}, "spec": spec,
        }))
        .unwrap();
        budget.status = Some(status);
        budget
    }

    #[test]
    fn a_budget_over_a_limit_or_keeping_machines_off_is_stalled_and_within_them_ready() {
        use gpucloud_api::condition_type::{READY, STALLED};
        let objects = [running("a", 1.1, 1), running("b", 1.1, 2)];
        let counted = count(&objects, &[], None);
        let keeping = BudgetStatus {
            powered_off: vec![PoweredOff {
                name: "c".into(),
                uid: "uid-c".into(),
                hourly_rate: 1.1,
                power_state: PowerState::Stopped,
                since: Time(Timestamp::now()),
            }],
            ..BudgetStatus::default()
        };
        let spent = BudgetStatus {
            spent: Some(12.0),
            projected: Some(20.0),
            period_end: Some(Time("2026-12-01T00:00:00Z".parse().unwrap())),
            ..BudgetStatus::default()
        };
        let monthly = |max: f64| serde_json::json!({"maxHourlyRate": 5.0, "maxSpend": max, "period": {"type": "Monthly"}});
        // (spec, status, Ready, reason, said in the message)
        let table = [
            (
                serde_json::json!({"maxHourlyRate": 5.0}),
                BudgetStatus::default(),
                "True",
                reason::WITHIN_BUDGET,
                "2 objects cost 2.2000 USD/h of its maxHourlyRate 5.0000 USD/h",
            ),
            (
                serde_json::json!({"maxHourlyRate": 2.0}),
                BudgetStatus::default(),
                "False",
                reason::BUDGET_EXCEEDED,
                "2.2000 USD/h of its maxHourlyRate 2.0000 USD/h, over it: new billed creates are refused",
            ),
            (
                serde_json::json!({"maxHourlyRate": 2.0, "onExceeded": "Stop"}),
                keeping.clone(),
                "False",
                reason::BUDGET_EXCEEDED,
                "refused; it keeps 1 machine off (stopped: c)",
            ),
            // Within the limit only because it keeps a machine off.
            (
                serde_json::json!({"maxHourlyRate": 5.0, "onExceeded": "Stop"}),
                keeping,
                "False",
                reason::BUDGET_EXCEEDED,
                "it keeps 1 machine off (stopped: c): running, they would take it past maxHourlyRate",
            ),
            (
                monthly(10.0),
                spent.clone(),
                "False",
                reason::BUDGET_EXCEEDED,
                "12.00 USD of its maxSpend 10.00 USD is spent this period",
            ),
            (
                monthly(100.0),
                spent,
                "True",
                reason::WITHIN_BUDGET,
                "12.00 USD spent of its maxSpend 100.00 USD, 20.00 USD projected",
            ),
        ];
        for (spec, status, ready, why, said) in table {
            let outcome = outcome(&budget(spec.clone(), status), &counted, &objects);
            let mut conditions = Vec::new();
            conditions::apply(&mut conditions, &outcome, Some(1), Timestamp::now());
            let find = |type_: &str| conditions.iter().find(|c| c.type_ == type_);
            let found = find(READY).unwrap();
            assert_eq!(
                (found.status.as_str(), found.reason.as_str()),
                (ready, why),
                "{spec}"
            );
            // kstatus: not ready and needing a person is Stalled; ready carries no Stalled.
            assert_eq!(find(STALLED).is_some(), ready == "False", "{spec}");
            assert!(
                outcome.message().contains(said),
                "{spec}: {}",
                outcome.message()
            );
        }
    }

    #[test]
    fn a_spend_projected_past_max_spend_is_told_before_it_is_spent() {
        let objects = [running("a", 2.6, 1)];
        let counted = count(&objects, &[], None);
        let at = |spent: f64, projected: f64| {
            budget(
                serde_json::json!({"maxHourlyRate": 5.0, "maxSpend": 20.0, "onExceeded": "Stop",
                                   "period": {"type": "Monthly"}}),
                BudgetStatus {
                    spent: Some(spent),
                    projected: Some(projected),
                    period_end: Some(Time("2026-12-01T00:00:00Z".parse().unwrap())),
                    ..BudgetStatus::default()
                },
            )
        };
        // 1,864 projected against 20: said while it is still within its limits.
        let told = outcome(&at(7.31, 1864.0), &counted, &objects);
        assert_eq!(
            (told.standing(), told.reason()),
            ("ready", reason::PROJECTED_OVER_BUDGET)
        );
        // 1,844 over at 2.6/h: 709 hours and 14 minutes before the period ends.
        for said in [
            "7.31 USD spent, projected 1864.00 USD by the end of the period (2026-12-01T00:00:00Z), over its maxSpend 20.00 USD",
            "reached about 2026-11-01T10:00:00Z",
            "running machines stopped",
        ] {
            assert!(told.message().contains(said), "{}", told.message());
        }
        let within = outcome(&at(7.31, 19.99), &counted, &objects);
        assert_eq!(
            (within.standing(), within.reason()),
            ("ready", reason::WITHIN_BUDGET)
        );
    }

    #[test]
    fn under_delete_the_newest_machines_it_may_delete_go_until_the_rest_fit() {
        let deletable = |machine: Billed| Billed {
            may_delete: true,
            ..machine
        };
        let objects = [
            deletable(running("oldest", 1.0, 1)),
            deletable(stopped(running("middle", 1.0, 2))),
            // Protected (or kept by deletionPolicy: Orphan): never chosen.
            running("newest", 1.0, 3),
            Billed {
                kind: "Volume".into(),
                gpus: 0,
                ..object("scratch", Some(0.5), true)
            },
        ];
        let counted = count(&objects, &[], None);
        assert!((counted.hourly_rate - 2.6).abs() < 1e-12);
        let chosen = |policy, limit, objects: &[Billed]| -> Vec<String> {
            to_delete(policy, limit, &count(objects, &[], None), objects)
                .iter()
                .map(|o| o.name.clone())
                .collect()
        };
        // (policy, limit, deleted)
        let table: Vec<(OnExceeded, f64, Vec<&str>)> = vec![
            (OnExceeded::Delete, 10.0, vec![]),
            // A machine that is off is deleted too: it still bills.
            (OnExceeded::Delete, 2.5, vec!["middle"]),
            (
                OnExceeded::SnapshotThenDelete,
                2.0,
                vec!["middle", "oldest"],
            ),
            // As far as it can go: the protected machine and the volume stay.
            (OnExceeded::Delete, 0.0, vec!["middle", "oldest"]),
            (OnExceeded::Stop, 2.0, vec![]),
            (OnExceeded::Refuse, 2.0, vec![]),
        ];
        for (policy, limit, deleted) in table {
            assert_eq!(
                chosen(policy, limit, &objects),
                deleted,
                "{policy:?} at {limit}"
            );
        }
        // A machine already being deleted is going: no other is chosen in its place.
        let mut going = objects.clone();
        going[1].deleting = true;
        going[1].may_delete = false;
        assert!(chosen(OnExceeded::Delete, 2.5, &going).is_empty());
        assert_eq!(chosen(OnExceeded::Delete, 1.5, &going), ["oldest"]);
    }

    /// `machine` as the cloud reports it once stopped: billed a tenth of its running rate.
    fn stopped(machine: Billed) -> Billed {
        Billed {
            hourly_rate: machine.hourly_rate.map(|rate| rate / 10.0),
            may_power_off: false,
            off: true,
            ..machine
        }
    }

    #[test]
    fn what_a_stopped_machine_still_costs_is_counted_and_shown() {
        let objects = [running("a", 1.0, 1), stopped(running("b", 1.0, 2))];
        let counted = count(&objects, &[], None);
        assert!((counted.hourly_rate - 1.1).abs() < 1e-12, "{counted:?}");
        assert!((counted.off_hourly_rate - 0.1).abs() < 1e-12, "{counted:?}");
        assert_eq!(counted.off, 1);
        let budget = budget(
            serde_json::json!({"maxHourlyRate": 5.0}),
            BudgetStatus::default(),
        );
        let message = outcome(&budget, &counted, &objects).message().to_string();
        assert!(
            message.contains("1.1000 USD/h")
                && message.contains("0.1000 USD/h of it for 1 machine off"),
            "{message}"
        );
    }

    #[test]
    fn machines_powered_off_still_count_at_what_they_cost_off() {
        let now = Timestamp::now();
        // Three machines at 1.0/h under 2.05/h: one stopped is not enough once the cloud
        // bills it its tenth (2.1/h), so a second one is stopped (1.2/h).
        let running_three = [
            running("oldest", 1.0, 1),
            running("middle", 1.0, 2),
            running("newest", 1.0, 3),
        ];
        let first = powered_off(
            OnExceeded::Stop,
            2.05,
            &count(&running_three, &[], None),
            &running_three,
            &[],
            now,
        );
        assert_eq!(names(&first), ["newest"]);
        // Being stopped: nothing more yet (its rate off is not known until it is off).
        let second = powered_off(
            OnExceeded::Stop,
            2.05,
            &count(&running_three, &[], None),
            &running_three,
            &first,
            now,
        );
        assert_eq!(names(&second), ["newest"]);
        let newest_off = [
            running("oldest", 1.0, 1),
            running("middle", 1.0, 2),
            stopped(running("newest", 1.0, 3)),
        ];
        let third = powered_off(
            OnExceeded::Stop,
            2.05,
            &count(&newest_off, &[], None),
            &newest_off,
            &first,
            now,
        );
        assert_eq!(names(&third), ["newest", "middle"]);
        // Middle still stopping (billed in full): newest is not started on a guess of what
        // middle will cost off.
        let stopping = powered_off(
            OnExceeded::Stop,
            2.05,
            &count(&newest_off, &[], None),
            &newest_off,
            &third,
            now,
        );
        assert_eq!(names(&stopping), ["newest", "middle"]);
        let both_off = [
            running("oldest", 1.0, 1),
            stopped(running("middle", 1.0, 2)),
            stopped(running("newest", 1.0, 3)),
        ];
        // Settled: neither starts again (either would take it to 2.1/h).
        let fourth = powered_off(
            OnExceeded::Stop,
            2.05,
            &count(&both_off, &[], None),
            &both_off,
            &third,
            now,
        );
        assert_eq!(names(&fourth), ["newest", "middle"]);
    }

    fn charge(
        name: &str,
        start: &str,
        end: Option<&str>,
        cost: f64,
    ) -> crate::accounts::account::Charge {
        crate::accounts::account::Charge {
            cloud_name: name.into(),
            start: start.parse().unwrap(),
            end: end.map(|e| e.parse().unwrap()),
            total_cost: cost,
        }
    }

    #[test]
    fn spend_counts_the_charged_resources_from_the_period_start() {
        let from: Timestamp = "2026-11-01T00:00:00Z".parse().unwrap();
        let now: Timestamp = "2026-11-11T00:00:00Z".parse().unwrap();
        let billing: BTreeMap<String, Arc<Billing>> = [
            (
                "acct1".to_string(),
                Arc::new(Billing::new(
                    vec![
                        // Inside the period: all of it.
                        charge("gco-a-vm", "2026-11-02T00:00:00Z", None, 24.0),
                        // Deleted inside the period: all of it still.
                        charge(
                            "gco-a-vol",
                            "2026-11-03T00:00:00Z",
                            Some("2026-11-04T00:00:00Z"),
                            2.0,
                        ),
                        // Begun before the period, still billed: the share after its start.
                        charge("gco-a-old", "2026-10-27T00:00:00Z", None, 15.0),
                        // Ended before the period: nothing.
                        charge(
                            "gco-a-gone",
                            "2026-10-01T00:00:00Z",
                            Some("2026-10-02T00:00:00Z"),
                            9.0,
                        ),
                        // Not this Budget's.
                        charge("gco-b-vm", "2026-11-02T00:00:00Z", None, 100.0),
                    ],
                    "USD".into(),
                )),
            ),
            (
                "acct2".to_string(),
                Arc::new(Billing::new(
                    vec![charge("gco-a-vm", "2026-11-02T00:00:00Z", None, 50.0)],
                    "USD".into(),
                )),
            ),
        ]
        .into();
        let charged: Vec<String> = [
            "acct1/gco-a-vm",
            "acct1/gco-a-vol",
            "acct1/gco-a-old",
            "acct1/gco-a-gone",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // 24 + 2 + 15 x 10/15 days + 0; the same name in another account is another resource.
        let spent = spent_since(&charged, &billing, from, now);
        assert!((spent - 36.0).abs() < 1e-9, "{spent}");
        let with_other_account = [charged.clone(), vec!["acct2/gco-a-vm".into()]].concat();
        let spent = spent_since(&with_other_account, &billing, from, now);
        assert!((spent - 86.0).abs() < 1e-9, "{spent}");
    }
}
