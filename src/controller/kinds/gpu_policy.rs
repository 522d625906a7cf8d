//! GpuPolicies: the cluster administrator's limits, enforced by the operator.
//!
//! The chart's ValidatingAdmissionPolicy refuses at admission what one object alone breaks;
//! this module enforces every limit again before each billed create (the flow calls
//! [`reserve`] beside the Budgets' reservation, before the create intent and before any
//! cloud call), so that a cluster without the admission policy, or an object admitted before
//! the policy, is held all the same. What one machine breaks (a GPU type, region, tier, size,
//! lifetime) is judged by `GpuPolicy::judge` in the API crate; the per-namespace caps count
//! the namespace's objects, read from the API server (never from a cache), plus the
//! reservations of creates under way, which each create writes into the policy's status with
//! a version-checked write: of concurrent creates each sees the others', so together they
//! cannot pass a cap each alone would pass. A create refused gives its reservation back
//! ([`release`]); one that succeeded keeps it until its object records its resource, from
//! when the object itself counts. The policy's controller ([`reconcile`]) recounts what each
//! selected namespace holds, drops reservations that are over, and reports the machines that
//! exist outside the policy (made before it, or adopted): reported, never stopped or deleted.

use crate::flow::conditions::reason;
use crate::flow::error::Error;
use crate::flow::kind::ManagedKind;
use crate::kinds::budget::{Billed, billed_matching};
use crate::runtime::clock::Clock;
use gpucloud_api::gpu_policy::{Held, Subject, Violation};
use gpucloud_api::{
    Budget, GpuInstance, GpuPolicy, GpuPolicyStatus, NamespaceCount, PolicyReservation,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ListParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::{Api, Resource, ResourceExt};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A reservation no create has followed for this long is dropped (as a Budget's).
pub const ABANDONED_AFTER: SignedDuration = crate::kinds::budget::ABANDONED_AFTER;

/// How often a policy whose reservation write lost a race is read again before the create
/// gives up for now (and is retried like any conflict).
const RESERVE_ATTEMPTS: usize = 8;

/// The namespaces listed in a policy's status, and the machines reported outside it, at most.
const LISTED_NAMESPACES: usize = 100;
const LISTED_OUTSIDE: usize = 50;

/// Whether `policy` governs a namespace with `labels`.
pub fn governs(policy: &GpuPolicy, labels: &BTreeMap<String, String>) -> Result<bool, Error> {
    let selector =
        Selector::try_from(policy.spec.namespace_selector.clone()).map_err(|e| Error::Blocked {
            reason: reason::POLICY_VIOLATION,
            message: format!(
                "GpuPolicy {}: spec.namespaceSelector: {e}",
                policy.name_any()
            ),
        })?;
    Ok(selector.matches(labels))
}

/// The labels of `namespace` (none when it is gone), read from the API server.
async fn namespace_labels(
    client: &kube::Client,
    namespace: &str,
) -> Result<BTreeMap<String, String>, Error> {
    Ok(Api::<Namespace>::all(client.clone())
        .get_metadata_opt(namespace)
        .await?
        .map(|meta| meta.labels().clone())
        .unwrap_or_default())
}

/// Whether `namespace` has a Budget of its own (`hourlyRateWithoutBudget` applies where it has
/// none).
async fn has_budget(client: &kube::Client, namespace: &str) -> Result<bool, Error> {
    Ok(!Api::<Budget>::namespaced(client.clone(), namespace)
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .items
        .is_empty())
}

/// The policies that govern `namespace`, read from the API server.
pub async fn governing(client: &kube::Client, namespace: &str) -> Result<Vec<GpuPolicy>, Error> {
    let policies = Api::<GpuPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    if policies.is_empty() {
        return Ok(policies);
    }
    let labels = namespace_labels(client, namespace).await?;
    let mut governing = Vec::new();
    for policy in policies {
        if governs(&policy, &labels)? {
            governing.push(policy);
        }
    }
    Ok(governing)
}

/// The shortest `maxLifetime` of the policies in `policies` (the operator's store) that govern
/// `namespace`, with the policy's name. The namespace's labels are read only when some policy
/// sets a lifetime.
pub async fn lifetime_cap(
    client: &kube::Client,
    policies: &kube::runtime::reflector::Store<GpuPolicy>,
    namespace: &str,
) -> Result<Option<(String, SignedDuration)>, Error> {
    let capping: Vec<_> = policies
        .state()
        .into_iter()
        .filter(|p| p.spec.max_lifetime.is_some())
        .collect();
    if capping.is_empty() {
        return Ok(None);
    }
    let labels = namespace_labels(client, namespace).await?;
    let mut shortest: Option<(String, SignedDuration)> = None;
    for policy in capping {
        if !governs(&policy, &labels)? {
            continue;
        }
        if let Some(Ok(max)) = policy.max_lifetime()
            && shortest.as_ref().is_none_or(|(_, s)| max < *s)
        {
            shortest = Some((policy.name_any(), max));
        }
    }
    Ok(shortest)
}

/// Why starting the machine `vm` (off, costing its stopped rate) at `running_rate` would pass
/// a per-namespace rate cap of a policy governing its namespace, if it would. A start is not
/// reserved: it is judged against the namespace's count as the API server has it now.
pub async fn start_refusal(
    client: &kube::Client,
    vm: &GpuInstance,
    running_rate: f64,
    currency: &str,
) -> Result<Option<String>, Error> {
    let namespace = vm.namespace().unwrap_or_default();
    let policies = governing(client, &namespace).await?;
    if !policies.iter().any(|p| p.counts(start_adds(running_rate))) {
        return Ok(None);
    }
    let objects = billed_matching(client, &namespace, ListParams::default()).await?;
    let has_budget = has_budget(client, &namespace).await?;
    let start = Start {
        namespace: &namespace,
        uid: &vm.uid().unwrap_or_default(),
        running_rate,
        currency,
    };
    Ok(start_violation(&policies, &objects, &start, has_budget).map(|v| v.to_string()))
}

/// A machine off, to be started: what [`start_violation`] judges.
pub struct Start<'a> {
    pub namespace: &'a str,
    pub uid: &'a str,
    /// What it costs per hour running, by the price list.
    pub running_rate: f64,
    pub currency: &'a str,
}

/// What a start adds to a namespace's count: no machine and no GPU (it has them already),
/// the running rate (the machine itself, counted at its off rate, is left out).
fn start_adds(running_rate: f64) -> Held {
    Held {
        machines: 0,
        gpus: 0,
        hourly_rate: running_rate,
    }
}

/// Why `start` would pass the per-namespace rate cap of one of `policies` (those governing
/// its namespace), given the namespace's billed `objects`, if it would. Pure: the operator's
/// start and `plan` judge with it.
pub fn start_violation(
    policies: &[GpuPolicy],
    objects: &[Billed],
    start: &Start<'_>,
    has_budget: bool,
) -> Option<Violation> {
    let adds = start_adds(start.running_rate);
    for policy in policies.iter().filter(|p| p.counts(adds)) {
        if policy
            .spec
            .namespace_limits
            .as_ref()
            .is_some_and(|l| l.currency != start.currency)
        {
            continue;
        }
        let reservations: Vec<PolicyReservation> = policy
            .status
            .iter()
            .flat_map(|s| s.reservations.iter())
            .filter(|r| r.namespace == start.namespace)
            .cloned()
            .collect();
        let counted = held(objects, &reservations, Some(start.uid));
        if let Some(violation) = policy.judge_count(counted, adds, has_budget) {
            return Some(violation);
        }
    }
    None
}

/// What one namespace holds: each object counted once, by uid, at the larger of what its
/// status records and what its reservation holds; `except` (the object reserving) left out.
pub fn held(objects: &[Billed], reservations: &[PolicyReservation], except: Option<&str>) -> Held {
    let mut by_uid: BTreeMap<&str, Held> = BTreeMap::new();
    for object in objects.iter().filter(|o| Some(o.uid.as_str()) != except) {
        if !object.create_started {
            continue;
        }
        by_uid.insert(
            &object.uid,
            Held {
                machines: i32::from(object.gpus > 0),
                gpus: object.gpus,
                hourly_rate: object
                    .hourly_rate
                    .filter(|_| object.created)
                    .unwrap_or_default(),
            },
        );
    }
    for reservation in reservations
        .iter()
        .filter(|r| Some(r.uid.as_str()) != except)
    {
        let entry = by_uid.entry(&reservation.uid).or_default();
        entry.machines = entry.machines.max(i32::from(reservation.gpus > 0));
        entry.gpus = entry.gpus.max(reservation.gpus);
        entry.hourly_rate = entry.hourly_rate.max(reservation.hourly_rate);
    }
    by_uid.into_values().fold(Held::default(), |sum, one| Held {
        machines: sum.machines + one.machines,
        gpus: sum.gpus + one.gpus,
        hourly_rate: sum.hourly_rate + one.hourly_rate,
    })
}

/// The reservations still held once `objects` (the namespace's) are seen at `now`: those of an
/// object still there that has not recorded its resource, and not abandoned. Reservations of
/// other namespaces are kept as they are.
pub fn still_held(
    reservations: &[PolicyReservation],
    namespace: &str,
    objects: &[Billed],
    now: Timestamp,
) -> Vec<PolicyReservation> {
    reservations
        .iter()
        .filter(|r| {
            if r.namespace != namespace {
                return true;
            }
            let Some(object) = objects.iter().find(|o| o.uid == r.uid) else {
                return false;
            };
            let recorded = object.created && object.hourly_rate.is_some();
            let abandoned = now
                .duration_since(r.reserved_at.0)
                .checked_sub(ABANDONED_AFTER)
                .is_some_and(|over| over.is_positive());
            !recorded && (object.create_started || !abandoned)
        })
        .cloned()
        .collect()
}

/// The error a create `violation` refuses is: `waiting` for a per-namespace cap.
pub fn refused(violation: Violation, waiting: bool) -> Error {
    Error::PolicyRefused {
        reason: if waiting {
            reason::POLICY_LIMIT
        } else {
            reason::POLICY_VIOLATION
        },
        message: violation.to_string(),
    }
}

/// Why `policy`, whose caps count in another currency than the account's `currency`, refuses
/// a create adding `adds` at a price, if it does. Pure: [`reserve`] decides with it, and so
/// does `plan`.
pub fn currency_refusal(policy: &GpuPolicy, adds: Held, currency: &str) -> Option<Error> {
    let limits = policy.spec.namespace_limits.as_ref()?;
    (adds.hourly_rate > 0.0 && limits.currency != currency).then(|| Error::PolicyRefused {
        reason: reason::POLICY_VIOLATION,
        message: format!(
            "GpuPolicy {}: spec.namespaceLimits.currency {} is not the cloud account's {currency}: no billed create is let through",
            policy.name_any(),
            limits.currency
        ),
    })
}

/// Judges the create of `object` by `policies`, those governing its namespace: the machine it
/// makes (`subject`, for a machine) and what it adds to the namespace (`rate`, from the price
/// list). A limit on the machine refuses it (`PolicyViolation`, until the spec or the policy
/// changes); a per-namespace cap it would pass makes it wait (`PolicyLimit`), and otherwise
/// it reserves what it adds in each policy that caps it. Says whether it reserved anything.
pub async fn reserve<K: ManagedKind>(
    client: &kube::Client,
    object: &K,
    policies: Vec<GpuPolicy>,
    subject: Option<&Subject>,
    rate: Option<f64>,
    currency: &str,
    clock: &Clock,
) -> Result<bool, Error> {
    let namespace = object.namespace().unwrap_or_default();
    if policies.is_empty() {
        return Ok(false);
    }
    if let Some(subject) = subject
        && let Some(violation) = policies.iter().find_map(|p| p.judge(subject))
    {
        return Err(refused(violation, false));
    }
    let adds = Held {
        machines: i32::from(subject.is_some()),
        gpus: subject.map_or(0, |s| s.gpus),
        hourly_rate: rate.unwrap_or_default(),
    };
    let counting: Vec<GpuPolicy> = policies.into_iter().filter(|p| p.counts(adds)).collect();
    if counting.is_empty() {
        return Ok(false);
    }
    if let Some(refused) = counting
        .iter()
        .find_map(|p| currency_refusal(p, adds, currency))
    {
        return Err(refused);
    }
    let has_budget = has_budget(client, &namespace).await?;
    let uid = object.uid().unwrap_or_default();
    let mut reserved: Vec<String> = Vec::new();
    for policy in counting {
        let name = policy.name_any();
        let ask = Ask {
            namespace: &namespace,
            kind: K::kind(&()).into_owned(),
            name: object.name_any(),
            uid: &uid,
            adds,
            has_budget,
        };
        match reserve_in(client, policy, &ask, clock).await {
            Ok(()) => reserved.push(name),
            Err(error) => {
                for name in &reserved {
                    if let Err(e) = release_in(client, name, &uid).await {
                        tracing::warn!(policy = %name, error = %e, "reservation not given back; the policy drops it once the object is settled");
                    }
                }
                return Err(error);
            }
        }
    }
    Ok(true)
}

/// One create's ask of one policy.
struct Ask<'a> {
    namespace: &'a str,
    kind: String,
    name: String,
    uid: &'a str,
    adds: Held,
    has_budget: bool,
}

async fn reserve_in(
    client: &kube::Client,
    mut policy: GpuPolicy,
    ask: &Ask<'_>,
    clock: &Clock,
) -> Result<(), Error> {
    let api: Api<GpuPolicy> = Api::all(client.clone());
    let name = policy.name_any();
    for _ in 0..RESERVE_ATTEMPTS {
        let mut status = policy.status.clone().unwrap_or_default();
        if status.reservations.iter().any(|r| r.uid == ask.uid) {
            return Ok(());
        }
        let objects = billed_matching(client, ask.namespace, ListParams::default()).await?;
        let now = clock.now();
        status.reservations = still_held(&status.reservations, ask.namespace, &objects, now);
        let in_namespace: Vec<PolicyReservation> = status
            .reservations
            .iter()
            .filter(|r| r.namespace == ask.namespace)
            .cloned()
            .collect();
        let counted = held(&objects, &in_namespace, Some(ask.uid));
        if let Some(violation) = policy.judge_count(counted, ask.adds, ask.has_budget) {
            return Err(refused(violation, true));
        }
        status.reservations.push(PolicyReservation {
            namespace: ask.namespace.to_string(),
            kind: ask.kind.clone(),
            name: ask.name.clone(),
            uid: ask.uid.to_string(),
            gpus: ask.adds.gpus,
            hourly_rate: ask.adds.hourly_rate,
            // On the operator's clock, as `still_held` reads it.
            reserved_at: Time(now),
        });
        policy.status = Some(status);
        // Carries the resourceVersion read: a concurrent reservation makes this one lose.
        match api
            .replace_status(&name, &PostParams::default(), &policy)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                policy = read(&api, &name).await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(Error::InProgress {
        reason: reason::POLICY_LIMIT,
        message: format!(
            "GpuPolicy {name} changed under {RESERVE_ATTEMPTS} reservations in a row; trying again"
        ),
    })
}

/// Gives back the reservations of `object` (its create was refused).
pub async fn release<K: ManagedKind>(client: &kube::Client, object: &K) -> Result<(), Error> {
    let uid = object.uid().unwrap_or_default();
    for policy in Api::<GpuPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        let holds = policy
            .status
            .as_ref()
            .is_some_and(|s| s.reservations.iter().any(|r| r.uid == uid));
        if holds {
            release_in(client, &policy.name_any(), &uid).await?;
        }
    }
    Ok(())
}

async fn release_in(client: &kube::Client, name: &str, uid: &str) -> Result<(), Error> {
    let api: Api<GpuPolicy> = Api::all(client.clone());
    for _ in 0..RESERVE_ATTEMPTS {
        let mut policy = read(&api, name).await?;
        let mut status = policy.status.clone().unwrap_or_default();
        let before = status.reservations.len();
        status.reservations.retain(|r| r.uid != uid);
        if status.reservations.len() == before {
            return Ok(());
        }
        policy.status = Some(status);
        match api
            .replace_status(name, &PostParams::default(), &policy)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Reads the policy `name` again, by a list narrowed to its name: the operator lists and
/// watches policies, and needs no other read of them.
async fn read(api: &Api<GpuPolicy>, name: &str) -> Result<GpuPolicy, Error> {
    api.list(&ListParams::default().fields(&format!("metadata.name={name}")))
        .await?
        .items
        .into_iter()
        .next()
        .ok_or_else(|| Error::InProgress {
            reason: reason::POLICY_LIMIT,
            message: format!("GpuPolicy {name} is gone; judging the create again"),
        })
}

/// Why an existing machine is outside `policy`, if it is: what the cloud reports of it (or
/// its spec, before the cloud does) judged as a create would be.
pub fn outside(policy: &GpuPolicy, vm: &GpuInstance) -> Option<Violation> {
    let status = vm.status.as_ref();
    let recorded = status.and_then(|s| s.specs.as_ref());
    let placed = status
        .and_then(|s| s.placement.as_ref())
        .and_then(|p| p.chosen.as_ref());
    let gpu_type = recorded
        .map(|s| s.gpu_type.clone())
        .or_else(|| placed.map(|c| c.gpu_type.clone()))
        .or_else(|| vm.spec.gpu_type.clone())?;
    let region = placed
        .map(|c| c.region.clone())
        .or_else(|| vm.spec.region.clone())
        .unwrap_or_default();
    let gpus = crate::flow::kind::KindDeclarations::gpus(vm);
    const MACHINE: &str = "the machine";
    let subject = Subject {
        gpu_types: vec![(MACHINE.into(), gpu_type)],
        regions: if region.is_empty() {
            Vec::new()
        } else {
            vec![(MACHINE.into(), region)]
        },
        gpu_counts: vec![(MACHINE.into(), gpus)],
        tier: vm.spec.tier,
        gpus,
        expires_after: None,
    };
    policy.judge(&subject)
}

/// What the policy's controller reads: the API server, the clock, and the namespaces the
/// operator watches (all when empty): it counts in no other. It tells of machines found outside
/// a policy through the event publisher.
pub type PolicyContext = (
    kube::Client,
    Clock,
    Vec<String>,
    Arc<crate::runtime::events::EventPublisher>,
);

/// Recounts a policy: the namespaces it selects, what each holds (reservations included),
/// the reservations still held, and the machines outside it. Every object it reads comes from
/// the API server.
pub async fn reconcile(
    policy: &GpuPolicy,
    (client, clock, watched, events): &PolicyContext,
) -> Result<(), Error> {
    let selected = selected_namespaces(policy, client, watched).await?;
    let now = clock.now();
    let mut reservations = policy
        .status
        .as_ref()
        .map(|s| s.reservations.clone())
        .unwrap_or_default();
    reservations.retain(|r| selected.contains(&r.namespace));
    let mut tally = Tally {
        reservations,
        counts: Vec::new(),
        outside_policy: Vec::new(),
        exceeded: Vec::new(),
    };
    for namespace in &selected {
        tally.count(policy, client, namespace, now).await?;
        let machines = Api::<GpuInstance>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await?;
        tally
            .outside_policy
            .extend(report_outside(policy, namespace, &machines.items, events));
    }
    let status = recounted_status(policy, selected.len(), tally, now);
    write_status(policy, client, status).await
}

/// The namespaces the policy selects, of those the operator watches.
async fn selected_namespaces(
    policy: &GpuPolicy,
    client: &kube::Client,
    watched: &[String],
) -> Result<Vec<String>, Error> {
    let namespaces = Api::<Namespace>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?;
    let mut selected = Vec::new();
    for namespace in &namespaces.items {
        let in_scope = watched.is_empty() || watched.contains(&namespace.name_any());
        if in_scope && governs(policy, namespace.labels())? {
            selected.push(namespace.name_any());
        }
    }
    Ok(selected)
}

/// What a recount has found so far, namespace by namespace.
struct Tally {
    /// The reservations still held.
    reservations: Vec<PolicyReservation>,
    /// What each namespace that holds anything holds.
    counts: Vec<NamespaceCount>,
    /// `namespace/name: why` of each machine outside the policy.
    outside_policy: Vec<String>,
    /// `namespace: why` of each namespace over a cap.
    exceeded: Vec<String>,
}

impl Tally {
    /// Counts what `namespace` holds, its reservations included, dropping those that are over.
    async fn count(
        &mut self,
        policy: &GpuPolicy,
        client: &kube::Client,
        namespace: &str,
        now: Timestamp,
    ) -> Result<(), Error> {
        let objects = billed_matching(client, namespace, ListParams::default()).await?;
        self.reservations = still_held(&self.reservations, namespace, &objects, now);
        let in_namespace: Vec<PolicyReservation> = self
            .reservations
            .iter()
            .filter(|r| r.namespace == namespace)
            .cloned()
            .collect();
        let count = held(&objects, &in_namespace, None);
        if let Some(violation) = over_caps(policy, count) {
            self.exceeded
                .push(format!("{namespace}: {}", violation.message));
        }
        if count != Held::default() {
            self.counts.push(NamespaceCount {
                namespace: namespace.to_string(),
                machines: count.machines,
                gpus: count.gpus,
                hourly_rate: round(count.hourly_rate),
            });
        }
        Ok(())
    }
}

/// The entries of `status.outside` for the machines of `namespace` outside the policy; a
/// Warning event tells of each one the policy's status does not list yet.
fn report_outside(
    policy: &GpuPolicy,
    namespace: &str,
    machines: &[GpuInstance],
    events: &crate::runtime::events::EventPublisher,
) -> Vec<String> {
    let mut entries = Vec::new();
    for vm in machines.iter().filter(|vm| {
        vm.status
            .as_ref()
            .is_some_and(|s| s.cloud.external_id.is_some())
    }) {
        if let Some(violation) = outside(policy, vm) {
            let entry = format!("{namespace}/{}: {}", vm.name_any(), violation.message);
            // Told once, when first found (the list is the policy's memory of it).
            let known = policy
                .status
                .as_ref()
                .is_some_and(|s| s.outside.contains(&entry));
            if !known {
                let note = format!(
                    "{violation}; the machine was made before the policy or adopted: it is reported, not stopped or deleted"
                );
                events.send(
                    crate::runtime::events::event(
                        kube::runtime::events::EventType::Warning,
                        reason::OUTSIDE_POLICY,
                        &note,
                        "CountPolicy",
                    ),
                    vm.object_ref(&()),
                );
            }
            entries.push(entry);
        }
    }
    entries
}

/// The policy's status from a recount of `selected` namespaces.
fn recounted_status(
    policy: &GpuPolicy,
    selected: usize,
    tally: Tally,
    now: Timestamp,
) -> GpuPolicyStatus {
    let Tally {
        reservations,
        mut counts,
        mut outside_policy,
        exceeded,
    } = tally;
    counts.sort_by(|a, b| {
        b.gpus
            .cmp(&a.gpus)
            .then(b.hourly_rate.total_cmp(&a.hourly_rate))
            .then(a.namespace.cmp(&b.namespace))
    });
    let total = counts.iter().fold(Held::default(), |sum, c| Held {
        machines: sum.machines + c.machines,
        gpus: sum.gpus + c.gpus,
        hourly_rate: sum.hourly_rate + c.hourly_rate,
    });
    counts.truncate(LISTED_NAMESPACES);
    outside_policy.sort();
    let outside_count = outside_policy.len();
    outside_policy.truncate(LISTED_OUTSIDE);
    let generation = policy.meta().generation;
    let conditions = recount_conditions(selected, total, &exceeded, outside_count, generation, now);
    let previous = policy.status.clone().unwrap_or_default();
    GpuPolicyStatus {
        namespaces: Some(i32::try_from(selected).unwrap_or(i32::MAX)),
        machines: Some(total.machines),
        gpus: Some(total.gpus),
        hourly_rate: Some(round(total.hourly_rate)),
        counts,
        reservations,
        outside: outside_policy,
        observed_generation: generation,
        conditions: keep_transition_times(&previous.conditions, conditions),
    }
}

/// `Ready` with the totals, and `Exceeded`: whether a namespace is over a cap or a machine
/// outside the policy.
fn recount_conditions(
    selected: usize,
    total: Held,
    exceeded: &[String],
    outside_count: usize,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut conditions = vec![condition(
        "Ready",
        true,
        "Counted",
        format!(
            "{} namespaces selected: {} machines, {} GPUs, {:.4}/h",
            selected, total.machines, total.gpus, total.hourly_rate
        ),
        generation,
        now,
    )];
    conditions.push(if exceeded.is_empty() && outside_count == 0 {
        condition(
            "Exceeded",
            false,
            "WithinPolicy",
            "every selected namespace is within the caps and every machine within the policy"
                .into(),
            generation,
            now,
        )
    } else {
        let mut parts = exceeded.to_vec();
        if outside_count > 0 {
            parts.push(format!(
                "{outside_count} machines outside the policy (status.outside); reported, not stopped"
            ));
        }
        condition(
            "Exceeded",
            true,
            if exceeded.is_empty() {
                "MachinesOutsidePolicy"
            } else {
                "OverCap"
            },
            parts.join("; "),
            generation,
            now,
        )
    });
    conditions
}

/// Writes the recounted status, unless it is the one the policy has.
async fn write_status(
    policy: &GpuPolicy,
    client: &kube::Client,
    status: GpuPolicyStatus,
) -> Result<(), Error> {
    if policy.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<GpuPolicy> = Api::all(client.clone());
    let name = policy.name_any();
    let mut updated = policy.clone();
    updated.status = Some(status);
    // Version-checked: a reservation written since the read wins, and the recount runs again.
    match api
        .replace_status(&name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(Error::InProgress {
            reason: reason::POLICY_LIMIT,
            message: format!("GpuPolicy {name} changed while it was counted; counting again"),
        }),
        Err(error) => Err(error.into()),
    }
}

/// The first cap the namespace's count passes (lowered caps, machines from before the
/// policy): reported, nothing is stopped.
fn over_caps(policy: &GpuPolicy, count: Held) -> Option<Violation> {
    let limits = policy.spec.namespace_limits.as_ref()?;
    let over = |cap: Option<i32>, value: i32| cap.is_some_and(|max| value > max);
    let name = policy.name_any();
    if over(limits.machines, count.machines) {
        return Some(Violation {
            policy: name,
            field: "spec.namespaceLimits.machines".into(),
            message: format!(
                "{} machines, over the cap of {}",
                count.machines,
                limits.machines.unwrap_or_default()
            ),
        });
    }
    if over(limits.gpus, count.gpus) {
        return Some(Violation {
            policy: name,
            field: "spec.namespaceLimits.gpus".into(),
            message: format!(
                "{} GPUs, over the cap of {}",
                count.gpus,
                limits.gpus.unwrap_or_default()
            ),
        });
    }
    if limits
        .hourly_rate
        .is_some_and(|max| count.hourly_rate > max + 1e-9)
    {
        return Some(Violation {
            policy: name,
            field: "spec.namespaceLimits.hourlyRate".into(),
            message: format!(
                "{:.4} {}/h, over the cap of {:.4}",
                count.hourly_rate,
                limits.currency,
                limits.hourly_rate.unwrap_or_default()
            ),
        });
    }
    None
}

fn round(value: f64) -> f64 {
    (value * 10_000.0).round() / 10_000.0
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: Time(now),
    }
}

/// A condition whose status did not change keeps its transition time.
fn keep_transition_times(previous: &[Condition], mut next: Vec<Condition>) -> Vec<Condition> {
    for condition in &mut next {
        if let Some(old) = previous
            .iter()
            .find(|c| c.type_ == condition.type_ && c.status == condition.status)
        {
            condition.last_transition_time = old.last_transition_time.clone();
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn billed(uid: &str, gpus: i32, rate: Option<f64>, started: bool, created: bool) -> Billed {
        Billed {
            kind: if gpus > 0 { "GpuInstance" } else { "Volume" }.into(),
            name: uid.into(),
            uid: uid.into(),
            hourly_rate: rate,
            currency: Some("USD".into()),
            create_started: started,
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
            gpus,
        }
    }

    fn reservation(
        namespace: &str,
        uid: &str,
        gpus: i32,
        rate: f64,
        at: Timestamp,
    ) -> PolicyReservation {
        PolicyReservation {
            namespace: namespace.into(),
            kind: "GpuInstance".into(),
            name: uid.into(),
            uid: uid.into(),
            gpus,
            hourly_rate: rate,
            reserved_at: Time(at),
        }
    }

    #[test]
    fn a_namespace_counts_each_object_once_at_the_larger_of_record_and_reservation() {
        let now: Timestamp = "2026-12-06T12:00:00Z".parse().unwrap();
        let objects = [
            // Running, recorded: counts its GPUs and rate.
            billed("a", 4, Some(2.0), true, true),
            // Created, its rate not yet reported, reservation still held.
            billed("b", 2, None, true, false),
            // Never started (refused, say): counts nothing of its own.
            billed("c", 8, None, false, false),
            // A volume: its rate, no machine.
            billed("v", 0, Some(0.25), true, true),
        ];
        let reservations = [
            reservation("team-a", "b", 2, 1.5, now),
            reservation("team-a", "d", 1, 0.5, now),
        ];
        let all = held(&objects, &reservations, None);
        assert_eq!((all.machines, all.gpus), (3, 7));
        assert!((all.hourly_rate - 4.25).abs() < 1e-9, "{all:?}");
        let without_d = held(&objects, &reservations, Some("d"));
        assert_eq!((without_d.machines, without_d.gpus), (2, 6));
    }

    #[test]
    fn reservations_go_once_recorded_gone_or_abandoned() {
        let now: Timestamp = "2026-12-06T12:00:00Z".parse().unwrap();
        let old = now.checked_sub(SignedDuration::from_mins(11)).unwrap();
        let objects = [
            billed("recorded", 1, Some(1.0), true, true),
            billed("creating", 1, None, true, false),
            billed("waiting", 1, None, false, false),
            billed("given-up", 1, None, false, false),
        ];
        let reservations = [
            reservation("team-a", "recorded", 1, 1.0, now),
            reservation("team-a", "creating", 1, 1.0, old),
            reservation("team-a", "waiting", 1, 1.0, now),
            reservation("team-a", "given-up", 1, 1.0, old),
            reservation("team-a", "deleted", 1, 1.0, now),
            reservation("team-b", "elsewhere", 1, 1.0, old),
        ];
        let kept: Vec<String> = still_held(&reservations, "team-a", &objects, now)
            .into_iter()
            .map(|r| r.uid)
            .collect();
        assert_eq!(kept, ["creating", "waiting", "elsewhere"]);
    }
}
