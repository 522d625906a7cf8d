//! GpuInstancePools: `replicas` GpuInstances made from one template, and never more.
//!
//! A pool owns no cloud resource: it creates and deletes GpuInstance objects (each a machine
//! with its own create protocol, budgets and capacity), owned by the pool through a controller
//! owner reference, so the garbage collector deletes them with it.
//!
//! **Exactly N.** ReplicaSet keeps in memory which creates it expects to see, and a restarted
//! controller or one reading a stale cache may create again what it already asked for. Here
//! the expectation is written down first: a reconcile decides ([`plan`], pure) which names to
//! create and which machines to delete, writes those names to `status.creating` and
//! `status.deleting` with the pool's resourceVersion as a precondition, and only then calls
//! create and delete. A reconcile working from an older copy of the pool loses that write with
//! 409 and acts on nothing. A recorded name is created again by every later reconcile until the
//! machines' list shows it, and the API server refuses a second object of that name (409
//! AlreadyExists): a crash, a lost response or a stale view at any point creates the recorded
//! names, never others. The machines are read from the API server (a list by the pool's
//! selector, filtered to those the pool controls), not from a cache, so a count is never older
//! than the record it is checked with.
//!
//! | crash or failure point | what the next reconcile sees | result |
//! |---|---|---|
//! | before the record write | no record | decides again from the list |
//! | record write conflicts (stale pool) | fresh pool on requeue | the winner's record stands |
//! | after the record, before or during the creates | names recorded, some not listed | creates them (409 for those that exist) |
//! | create answered, machine not yet listed | name recorded, not listed | counted as a machine; created again: 409 |
//! | after the delete record, before the delete | name recorded, machine live | deletes it |
//!
//! A recorded create is never given up before it is listed (a killed or deposed controller's
//! request may still be on its way): a scale-down waits for it and then deletes it like any
//! machine. Scale-down removes machines not Ready first, then those made from an older
//! template, then the newest; never one annotated with deletion protection. A recorded delete
//! not yet carried out is chosen again first, or let go when `replicas` was raised meanwhile.
//!
//! **Replaced only for what a machine cannot change.** A GPU machine cannot change type,
//! region or image in place, but it can be stopped, given a lifetime or a schedule, and so on.
//! A template change in a field a GpuInstance cannot change once created (those its CRD's CEL
//! rules compare with `oldSelf`, as its `ON_CHANGE` table lists them: [`immutable_fields`])
//! replaces machines: the hash of those fields is the machines'
//! `gpucloud.io/pool-template-hash` label, and machines are replaced within `maxUnavailable`
//! (Ready machines deleted only while more than `replicas - maxUnavailable` are Ready) and
//! `maxSurge` (machines beyond `replicas` while old ones remain); `OnDelete` makes new ones from
//! the new template only for machines a person deleted. Any other change (`powerState:
//! Stopped` to pause a pool, a lifetime, the template's labels and annotations, the pool's
//! `deletionPolicy`) is patched onto every live machine, as a person editing each one would
//! ([`in_place_patch`]): no machine is billed anew or loses its disk for it. So the hash also
//! stays the same across operator upgrades that add a field a machine can change.

use crate::flow::conditions::{self, Outcome, reason};
use crate::flow::error::Error;
use futures::future::{BoxFuture, FutureExt};
use futures::{StreamExt, TryStreamExt};
use gpucloud_api::condition_type::{READY, STALLED};
use gpucloud_api::deletion_protection::ANNOTATION as DELETION_PROTECTION;
use gpucloud_api::gpu_instance_pool::{
    ADOPTION_ANNOTATIONS, IN_PLACE_HASH_ANNOTATION, POOL_LABEL, TEMPLATE_HASH_LABEL,
};
use gpucloud_api::{
    GpuInstance, GpuInstancePool, GpuInstancePoolStatus, MANAGED_ON_CHANGE, OnChange,
    RollingReplace, StrategyType,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::sync::LazyLock;
use std::time::Duration;

/// How soon a pool with recorded work, or machines not yet Ready, is looked at again (its
/// machines' changes also wake it).
const BUSY_REQUEUE: Duration = Duration::from_secs(2);
/// A pool whose machines are all Ready is looked at again this often (a backstop: its
/// machines' changes wake it).
const SETTLED_REQUEUE: Duration = Duration::from_secs(60);
/// A pool that cannot go on until a person (or the cloud's capacity) acts.
const STALLED_REQUEUE: Duration = Duration::from_secs(30);
/// Creates (and deletes) of machines a reconcile has in flight at once. One at a time, a pool
/// scaled by a thousand waits a thousand API server round trips before its last machine
/// exists, and its machines reach the cloud slower than its rate limit allows; the record
/// written first makes the order of a record's creates irrelevant.
const WRITES_AT_ONCE: usize = 8;

// === the decision ===

/// A machine of the pool as [`plan`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub name: String,
    pub created: Option<Timestamp>,
    pub ready: bool,
    /// Made from the current template.
    pub current: bool,
    /// Annotated with deletion protection: never chosen for deletion.
    pub protected: bool,
    /// Being deleted (has a deletionTimestamp).
    pub deleting: bool,
}

/// The names a pool decided to create and to delete, as its status records them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub creating: Vec<String>,
    pub deleting: Vec<String>,
}

/// How a template change reaches the machines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    RollingReplace {
        max_unavailable: usize,
        max_surge: usize,
    },
    OnDelete,
}

/// What a reconcile records and then does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The record to write before acting.
    pub record: Record,
    /// Names to create (every recorded create not yet listed).
    pub create: Vec<String>,
    /// Machines to delete (every recorded delete still live).
    pub delete: Vec<String>,
    /// Machines beyond `replicas` that deletion protection keeps.
    pub protected_excess: usize,
}

/// The order machines are given up in: not Ready first, then made from an older template,
/// then the newest.
fn removal_order(a: &&Machine, b: &&Machine) -> std::cmp::Ordering {
    a.ready
        .cmp(&b.ready)
        .then(a.current.cmp(&b.current))
        .then(b.created.cmp(&a.created))
        .then(b.name.cmp(&a.name))
}

/// Decides which names to create and which machines to delete for `replicas` machines, from
/// the pool's machines as listed and its record. `new_name` proposes a fresh name; one
/// already in use is never taken.
pub fn plan(
    replicas: usize,
    strategy: Strategy,
    machines: &[Machine],
    record: &Record,
    new_name: &mut dyn FnMut() -> String,
) -> Plan {
    let listed = |name: &str| machines.iter().find(|m| m.name == name);
    // A recorded create stays recorded until it is listed, and counts as a machine: it may be
    // carried out at any moment (by this process, or by a killed or deposed one whose request
    // is still on its way), so it is never given up unlisted; once listed, it can be deleted.
    let mut creating: Vec<String> = record
        .creating
        .iter()
        .filter(|name| listed(name).is_none())
        .cloned()
        .collect();
    // A recorded delete not yet carried out (its machine still live) is chosen again first
    // while machines are still to go, and let go when none are (replicas raised meanwhile).
    let chosen: Vec<&str> = record
        .deleting
        .iter()
        .filter(|name| listed(name).is_some_and(|m| !m.deleting))
        .map(String::as_str)
        .collect();
    let order = |a: &&Machine, b: &&Machine| {
        let a_chosen = chosen.contains(&a.name.as_str());
        let b_chosen = chosen.contains(&b.name.as_str());
        b_chosen.cmp(&a_chosen).then_with(|| removal_order(a, b))
    };
    let mut deleting: Vec<String> = Vec::new();
    let mut live: Vec<&Machine> = machines.iter().filter(|m| !m.deleting).collect();
    let surge = match strategy {
        Strategy::RollingReplace { max_surge, .. } => max_surge,
        Strategy::OnDelete => 0,
    };
    let ceiling = |live: &[&Machine]| {
        if live.iter().any(|m| !m.current) {
            replicas + surge
        } else {
            replicas
        }
    };
    let mut protected_excess = 0;

    // Listed machines beyond the ceiling go (recorded creates wait until they are listed).
    while live.len() > ceiling(&live) {
        let mut candidates: Vec<&Machine> = live.iter().copied().filter(|m| !m.protected).collect();
        candidates.sort_by(order);
        match candidates.first() {
            Some(machine) => {
                deleting.push(machine.name.clone());
                live.retain(|m| m.name != machine.name);
            }
            None => {
                protected_excess = live.len() - ceiling(&live);
                break;
            }
        }
    }

    // Machines of an older template, within maxUnavailable.
    if let Strategy::RollingReplace {
        max_unavailable, ..
    } = strategy
    {
        let min_ready = replicas.saturating_sub(max_unavailable);
        let mut ready = live.iter().filter(|m| m.ready).count();
        let mut old: Vec<&Machine> = live
            .iter()
            .copied()
            .filter(|m| !m.current && !m.protected)
            .collect();
        old.sort_by(order);
        for machine in old {
            if machine.ready {
                if ready <= min_ready {
                    continue;
                }
                ready -= 1;
            }
            deleting.push(machine.name.clone());
            live.retain(|m| m.name != machine.name);
        }
    }

    // Fill up to replicas with machines of the current template, within the ceiling.
    let total = live.len() + creating.len();
    let have = match strategy {
        Strategy::RollingReplace { .. } => {
            live.iter().filter(|m| m.current).count() + creating.len()
        }
        Strategy::OnDelete => total,
    };
    let room = ceiling(&live).saturating_sub(total);
    for _ in 0..room.min(replicas.saturating_sub(have)) {
        let name = loop {
            let name = new_name();
            let taken = listed(&name).is_some()
                || creating.contains(&name)
                || deleting.contains(&name)
                || record.deleting.contains(&name);
            if !taken {
                break name;
            }
        };
        creating.push(name);
    }

    Plan {
        create: creating.clone(),
        delete: deleting.clone(),
        record: Record { creating, deleting },
        protected_excess,
    }
}

/// A machine's own standing, for the pool's conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineStanding {
    pub name: String,
    pub reason: String,
    pub message: String,
    pub stalled: bool,
}

/// Where the pool stands once its plan is recorded.
pub fn outcome(
    replicas: usize,
    machines: &[Machine],
    plan: &Plan,
    not_ready: &[MachineStanding],
) -> Outcome {
    let live: Vec<&Machine> = machines
        .iter()
        .filter(|m| !m.deleting && !plan.record.deleting.contains(&m.name))
        .collect();
    let ready = live.iter().filter(|m| m.ready).count();
    let figures = format!("{ready} of {replicas} machines Ready");
    if plan.protected_excess > 0 {
        return Outcome::stalled(
            reason::DELETION_PROTECTED,
            format!(
                "{figures}; {} machines beyond replicas are annotated {DELETION_PROTECTION}: remove the annotation to let the pool delete them",
                plan.protected_excess
            ),
        );
    }
    let settled = plan.record == Record::default()
        && live.len() == replicas
        && live.iter().all(|m| m.current && m.ready);
    if settled {
        return Outcome::ready(reason::AVAILABLE, figures);
    }
    if let Some(stalled) = not_ready.iter().find(|m| m.stalled)
        && plan.create.is_empty()
        && plan.delete.is_empty()
    {
        return Outcome::stalled(
            &stalled.reason,
            format!(
                "{figures}; {}: {}: {}",
                stalled.name, stalled.reason, stalled.message
            ),
        );
    }
    let detail = not_ready
        .first()
        .map(|m| format!("; {}: {}: {}", m.name, m.reason, m.message))
        .unwrap_or_default();
    if live.iter().any(|m| !m.current) {
        Outcome::progressing(reason::REPLACING, format!("{figures}{detail}"))
    } else if live.len() + plan.record.creating.len() != replicas || !plan.delete.is_empty() {
        Outcome::progressing(reason::SCALING, format!("{figures}{detail}"))
    } else {
        Outcome::progressing(reason::WAITING_FOR_INSTANCE, format!("{figures}{detail}"))
    }
}

/// The fields of a GpuInstance's spec it cannot change once created: those its `ON_CHANGE`
/// table (and the shared `MANAGED_ON_CHANGE`) marks `Immutable`, the table a test holds to the
/// CRD's CEL rules.
pub fn immutable_fields() -> &'static BTreeSet<&'static str> {
    static FIELDS: LazyLock<BTreeSet<&'static str>> = LazyLock::new(|| {
        GpuInstance::ON_CHANGE
            .iter()
            .chain(MANAGED_ON_CHANGE)
            .filter(|(_, on_change)| *on_change == OnChange::Immutable)
            .map(|(field, _)| *field)
            .collect()
    });
    &FIELDS
}

/// A short stable hash of the template's immutable fields ([`immutable_fields`]), the
/// machines' `gpucloud.io/pool-template-hash`. A change of any other field is made in place,
/// and replaces no machine.
pub fn template_hash(pool: &GpuInstancePool) -> Result<String, Error> {
    let spec = serde_json::to_value(&pool.spec.template.spec)?;
    let immutable = immutable_fields();
    hash_of(&fields_where(&spec, |key| immutable.contains(key)))
}

/// A short stable hash of what a machine changes in place: the template's other fields with
/// the pool's `deletionPolicy`, and its labels and annotations; the machines'
/// `gpucloud.io/pool-in-place-hash`.
pub fn in_place_hash(pool: &GpuInstancePool) -> Result<String, Error> {
    let wanted = machine(pool, "", "", "");
    let spec = serde_json::to_value(&wanted.spec)?;
    let immutable = immutable_fields();
    hash_of(&serde_json::json!({
        "spec": fields_where(&spec, |key| !immutable.contains(key)),
        "labels": pool.spec.template.metadata.labels,
        "annotations": pool.spec.template.metadata.annotations,
    }))
}

/// The fields of the object `value` whose names pass `keep`.
fn fields_where(value: &Value, keep: impl Fn(&str) -> bool) -> Value {
    Value::Object(
        value
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(key, _)| keep(key))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
    )
}

/// FNV-1a of `value`'s JSON, in the letters `generateName` uses. Its objects' keys are
/// sorted (`Map` without `preserve_order` is sorted), so the hash does not follow the order
/// of the fields in the Rust types.
fn hash_of(value: &Value) -> Result<String, Error> {
    let text = serde_json::to_string(value)?;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    Ok(encode(hash, 10))
}

/// The JSON merge patch that brings a live machine's changeable fields to the template, once
/// the template (or the pool's `deletionPolicy`) changed since they were last set
/// (`in_place_hash`, the machine's annotation): its spec's fields outside
/// [`immutable_fields`], and the template's labels and annotations (added or updated; one the
/// template drops stays on the machines, where others may have put it too). `None` when the
/// machine has them already. The template hash label is never changed: it says what the
/// machine was made from.
pub fn in_place_patch(
    pool: &GpuInstancePool,
    instance: &GpuInstance,
    in_place_hash: &str,
) -> Result<Option<Value>, Error> {
    if instance
        .annotations()
        .get(IN_PLACE_HASH_ANNOTATION)
        .map(String::as_str)
        == Some(in_place_hash)
    {
        return Ok(None);
    }
    let wanted = machine(pool, &instance.name_any(), "", in_place_hash);
    let immutable = immutable_fields();
    let have = serde_json::to_value(&instance.spec)?;
    let want = serde_json::to_value(&wanted.spec)?;
    let empty = Map::new();
    let have = have.as_object().unwrap_or(&empty);
    let want = want.as_object().unwrap_or(&empty);
    let mut spec = Map::new();
    for key in have.keys().chain(want.keys()) {
        if immutable.contains(key.as_str()) || spec.contains_key(key) {
            continue;
        }
        match (have.get(key), want.get(key)) {
            (Some(old), Some(new)) if old == new => {}
            (old, new) => {
                let patch = merge_diff(old.unwrap_or(&Value::Null), new.unwrap_or(&Value::Null));
                spec.insert(key.clone(), patch);
            }
        }
    }
    let mut metadata = Map::new();
    for (field, wanted, have) in [
        ("labels", wanted.labels(), instance.labels()),
        ("annotations", wanted.annotations(), instance.annotations()),
    ] {
        let changed: Map<String, Value> = wanted
            .iter()
            .filter(|(key, value)| {
                key.as_str() != TEMPLATE_HASH_LABEL && have.get(key.as_str()) != Some(*value)
            })
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect();
        if !changed.is_empty() {
            metadata.insert(field.to_string(), Value::Object(changed));
        }
    }
    let mut patch = serde_json::json!({"metadata": metadata});
    if !spec.is_empty() {
        patch["spec"] = Value::Object(spec);
    }
    Ok(Some(patch))
}

/// The RFC 7386 merge patch turning `old` into `new`: objects key by key (`null` removes a
/// key), anything else replaced whole.
fn merge_diff(old: &Value, new: &Value) -> Value {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return new.clone();
    };
    let mut patch = Map::new();
    for key in old.keys().filter(|key| !new.contains_key(*key)) {
        patch.insert(key.clone(), Value::Null);
    }
    for (key, value) in new {
        match old.get(key) {
            Some(before) if before == value => {}
            before => {
                patch.insert(
                    key.clone(),
                    merge_diff(before.unwrap_or(&Value::Null), value),
                );
            }
        }
    }
    Value::Object(patch)
}

const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn encode(mut value: u64, length: usize) -> String {
    let base = NAME_ALPHABET.len() as u64;
    (0..length)
        .map(|_| {
            let digit = NAME_ALPHABET[(value % base) as usize] as char;
            value /= base;
            digit
        })
        .collect()
}

/// `<pool>-<5 random characters>`.
fn new_name(pool: &str) -> String {
    format!("{pool}-{}", encode(rand::random::<u64>(), 5))
}

// === reading and writing objects ===

fn strategy(pool: &GpuInstancePool) -> Strategy {
    match pool.spec.strategy.type_ {
        StrategyType::OnDelete => Strategy::OnDelete,
        StrategyType::RollingReplace => {
            let limits = pool.spec.strategy.rolling_replace.unwrap_or_default();
            let RollingReplace {
                max_unavailable,
                max_surge,
            } = limits;
            Strategy::RollingReplace {
                max_unavailable: usize::try_from(max_unavailable).unwrap_or(0),
                max_surge: usize::try_from(max_surge).unwrap_or(0),
            }
        }
    }
}

fn condition_true(instance: &GpuInstance, type_: &str) -> bool {
    instance.status.as_ref().is_some_and(|s| {
        s.cloud
            .conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

fn machine_of(instance: &GpuInstance, hash: &str) -> Machine {
    Machine {
        name: instance.name_any(),
        created: instance.meta().creation_timestamp.as_ref().map(|t| t.0),
        ready: condition_true(instance, READY),
        current: instance
            .labels()
            .get(TEMPLATE_HASH_LABEL)
            .map(String::as_str)
            == Some(hash),
        protected: instance
            .annotations()
            .get(DELETION_PROTECTION)
            .is_some_and(|v| v == "true"),
        deleting: instance.meta().deletion_timestamp.is_some(),
    }
}

fn standing_of(instance: &GpuInstance) -> MachineStanding {
    let ready = instance
        .status
        .as_ref()
        .and_then(|s| s.cloud.conditions.iter().find(|c| c.type_ == READY));
    MachineStanding {
        name: instance.name_any(),
        reason: ready.map_or_else(|| reason::CREATING.to_string(), |c| c.reason.clone()),
        message: ready.map(|c| c.message.clone()).unwrap_or_default(),
        stalled: condition_true(instance, STALLED),
    }
}

/// The GpuInstance named `name` made from the pool's template, whose hashes are `hash`
/// ([`template_hash`]) and `in_place_hash` ([`in_place_hash`]).
pub fn machine(pool: &GpuInstancePool, name: &str, hash: &str, in_place_hash: &str) -> GpuInstance {
    let template = &pool.spec.template;
    let mut spec = template.spec.clone();
    spec.managed.deletion_policy = pool.spec.deletion_policy;
    let mut labels = template.metadata.labels.clone();
    labels.insert(POOL_LABEL.to_string(), pool.name_any());
    labels.insert(TEMPLATE_HASH_LABEL.to_string(), hash.to_string());
    let mut annotations = template.metadata.annotations.clone();
    annotations.insert(
        IN_PLACE_HASH_ANNOTATION.to_string(),
        in_place_hash.to_string(),
    );
    GpuInstance {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: pool.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            // The garbage collector deletes machines with their pool (and, in the
            // foreground, the pool waits for them).
            owner_references: pool.controller_owner_ref(&()).map(|owner| {
                vec![OwnerReference {
                    block_owner_deletion: Some(true),
                    ..owner
                }]
            }),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// An annotation of the template that would make every machine adopt or claim one cloud
/// resource (the CRD refuses them; an object stored before that rule is refused here too).
fn adoption_annotation(pool: &GpuInstancePool) -> Option<&'static str> {
    ADOPTION_ANNOTATIONS.into_iter().find(|annotation| {
        pool.spec
            .template
            .metadata
            .annotations
            .contains_key(*annotation)
    })
}

fn selector(pool: &GpuInstancePool) -> Result<Selector, Error> {
    Selector::try_from(pool.spec.selector.clone()).map_err(|e| Error::Blocked {
        reason: reason::INVALID_SPEC,
        message: format!("GpuInstancePool {}: spec.selector: {e}", pool.name_any()),
    })
}

fn controlled_by(instance: &GpuInstance, pool: &GpuInstancePool) -> bool {
    let uid = pool.meta().uid.as_deref();
    instance
        .owner_references()
        .iter()
        .any(|owner| owner.controller == Some(true) && Some(owner.uid.as_str()) == uid)
}

/// Reconciles one pool: records its plan, then creates and deletes what it recorded.
/// Returns when to look again.
pub async fn reconcile(client: &kube::Client, pool: &GpuInstancePool) -> Result<Duration, Error> {
    if pool.meta().deletion_timestamp.is_some() {
        // Its machines go with it, through the garbage collector.
        return Ok(BUSY_REQUEUE);
    }
    let namespace = pool.namespace().unwrap_or_default();
    let pools: Api<GpuInstancePool> = Api::namespaced(client.clone(), &namespace);
    let instances: Api<GpuInstance> = Api::namespaced(client.clone(), &namespace);
    let mut status = pool.status.clone().unwrap_or_default();
    let selector = match selector(pool) {
        Ok(selector) => selector,
        Err(error) => return write_failure(&pools, pool, status, &error).await,
    };
    if let Some(annotation) = adoption_annotation(pool) {
        let error = Error::Blocked {
            reason: reason::INVALID_SPEC,
            message: format!(
                "spec.template.metadata.annotations[{annotation}]: a pool's machines are created, \
                 never adopted; remove the annotation"
            ),
        };
        return write_failure(&pools, pool, status, &error).await;
    }
    if !selector.matches(&pool.spec.template.metadata.labels) {
        let error = Error::Blocked {
            reason: reason::INVALID_SPEC,
            message: format!(
                "spec.selector {selector} does not select spec.template.metadata.labels: the pool's machines would not be its own"
            ),
        };
        return write_failure(&pools, pool, status, &error).await;
    }
    // More replicas than a GpuPolicy allows: the pool makes no machine until it asks for
    // fewer or the policy allows more (the machines it has are left as they are).
    let governing = crate::kinds::gpu_policy::governing(client, &namespace).await?;
    if let Some(violation) = governing
        .iter()
        .find_map(|policy| policy.judge_replicas(pool.spec.replicas))
    {
        let error = Error::PolicyRefused {
            reason: reason::POLICY_VIOLATION,
            message: violation.to_string(),
        };
        return write_failure(&pools, pool, status, &error).await;
    }
    let hash = template_hash(pool)?;
    let listed = instances
        .list(&ListParams::default().labels(&selector.to_string()))
        .await?;
    let owned: Vec<&GpuInstance> = listed
        .items
        .iter()
        .filter(|instance| controlled_by(instance, pool))
        .collect();
    let machines: Vec<Machine> = owned.iter().map(|m| machine_of(m, &hash)).collect();
    let record = Record {
        creating: status.creating.clone(),
        deleting: status.deleting.clone(),
    };
    let replicas = usize::try_from(pool.spec.replicas).unwrap_or(0);
    let pool_name = pool.name_any();
    let plan = plan(replicas, strategy(pool), &machines, &record, &mut || {
        new_name(&pool_name)
    });

    let live: Vec<&GpuInstance> = owned
        .iter()
        .copied()
        .filter(|m| m.meta().deletion_timestamp.is_none() && !plan.delete.contains(&m.name_any()))
        .collect();
    let outcome = outcome(
        replicas,
        &machines,
        &plan,
        &live
            .iter()
            .filter(|m| !condition_true(m, READY))
            .map(|m| standing_of(m))
            .collect::<Vec<_>>(),
    );
    show(&mut status, pool, &machines, &live, &plan);
    status.selector = Some(selector.to_string());
    status.template_hash = Some(hash.clone());
    conditions::apply(
        &mut status.conditions,
        &outcome,
        pool.meta().generation,
        Timestamp::now(),
    );

    // The record first, checked against the pool's resourceVersion; then what it says.
    let acting = !plan.create.is_empty() || !plan.delete.is_empty();
    let written = write(&pools, pool, status, acting).await?;
    let in_place = in_place_hash(pool)?;
    let refused = act(&instances, pool, &plan, &live, (&hash, &in_place)).await?;
    if !refused.is_empty() {
        give_up(&pools, written, &refused).await?;
        return Ok(STALLED_REQUEUE);
    }
    Ok(match outcome {
        Outcome::Ready { .. } if !acting => SETTLED_REQUEUE,
        Outcome::Stalled { .. } if !acting => STALLED_REQUEUE,
        _ => BUSY_REQUEUE,
    })
}

/// The figures of `status` for what was listed and planned, and the record to write.
fn show(
    status: &mut GpuInstancePoolStatus,
    pool: &GpuInstancePool,
    machines: &[Machine],
    live: &[&GpuInstance],
    plan: &Plan,
) {
    let count = |f: &dyn Fn(&Machine) -> bool| {
        let n = machines
            .iter()
            .filter(|m| !m.deleting && !plan.delete.contains(&m.name) && f(m))
            .count();
        i32::try_from(n).unwrap_or(i32::MAX)
    };
    status.replicas = count(&|_| true);
    status.ready_replicas = count(&|m| m.ready);
    status.updated_replicas = count(&|m| m.current);
    status.available_replicas = status.ready_replicas;
    status.observed_generation = pool.meta().generation;
    let rates: Vec<f64> = live
        .iter()
        .filter_map(|m| m.status.as_ref().and_then(|s| s.hourly_rate))
        .collect();
    status.hourly_rate = (!rates.is_empty()).then(|| round(rates.iter().sum()));
    status.currency = live
        .iter()
        .find_map(|m| m.status.as_ref().and_then(|s| s.currency.clone()));
    status.creating = plan.record.creating.clone();
    status.deleting = plan.record.deleting.clone();
}

/// Carries out a written record: its creates (one that exists is a 409, not a second
/// machine) and deletes, and the template's changeable fields on every live machine
/// ([`in_place_patch`]), [`WRITES_AT_ONCE`] at a time. Returns the creates the API server
/// refused, with its message. A failure stops the writes not yet sent; the record (and the
/// machines' in-place hash) keeps them for the next reconcile.
async fn act(
    instances: &Api<GpuInstance>,
    pool: &GpuInstancePool,
    plan: &Plan,
    live: &[&GpuInstance],
    (hash, in_place_hash): (&str, &str),
) -> Result<Vec<(String, String)>, Error> {
    // Owned futures: the controller's reconcile future must be `Send` for every lifetime.
    let creates: Vec<GpuInstance> = plan
        .create
        .iter()
        .map(|name| machine(pool, name, hash, in_place_hash))
        .collect();
    let refused: Vec<(String, String)> = futures::stream::iter(creates)
        .map(|machine| {
            let instances = instances.clone();
            async move {
                match instances.create(&PostParams::default(), &machine).await {
                    Ok(_) => Ok(None),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
                    Err(kube::Error::Api(status)) if matches!(status.code, 400 | 403 | 422) => {
                        Ok(Some((machine.name_any(), status.message)))
                    }
                    Err(error) => Err(Error::from(error)),
                }
            }
        })
        .buffered(WRITES_AT_ONCE)
        .try_filter_map(|refused| futures::future::ready(Ok(refused)))
        .try_collect()
        .await?;
    write_each(plan.delete.clone(), |name| {
        let instances = instances.clone();
        async move {
            instances
                .delete(&name, &DeleteParams::background())
                .await
                .map(drop)
        }
        .boxed()
    })
    .await?;
    let patches: Vec<(String, serde_json::Value)> = live
        .iter()
        .filter_map(|machine| {
            in_place_patch(pool, machine, in_place_hash)
                .transpose()
                .map(|patch| patch.map(|patch| (machine.name_any(), patch)))
        })
        .collect::<Result<_, _>>()?;
    write_each(patches, |(name, patch)| {
        let instances = instances.clone();
        async move {
            instances
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop)
        }
        .boxed()
    })
    .await?;
    Ok(refused)
}

/// Runs `write` for each of `items`, [`WRITES_AT_ONCE`] at a time, stopping at the first
/// failure; a machine already gone (404) is no failure.
async fn write_each<T>(
    items: Vec<T>,
    write: impl Fn(T) -> BoxFuture<'static, Result<(), kube::Error>> + Send + Sync,
) -> Result<(), Error> {
    futures::stream::iter(items)
        .map(|item| {
            let sent = write(item);
            async move {
                match sent.await {
                    Ok(()) => Ok(()),
                    Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                    Err(error) => Err(Error::from(error)),
                }
            }
        })
        .buffered(WRITES_AT_ONCE)
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
}

/// Creates the API server refused are refused again: their names leave the record and the
/// pool says why (a later reconcile tries new names, after the requeue).
async fn give_up(
    pools: &Api<GpuInstancePool>,
    pool: GpuInstancePool,
    refused: &[(String, String)],
) -> Result<(), Error> {
    let mut status = pool.status.clone().unwrap_or_default();
    status
        .creating
        .retain(|n| !refused.iter().any(|(r, _)| r == n));
    if let Some((name, message)) = refused.first() {
        conditions::apply(
            &mut status.conditions,
            &Outcome::stalled(
                reason::CREATE_REFUSED,
                format!("machine {name} was refused: {message}"),
            ),
            pool.meta().generation,
            Timestamp::now(),
        );
    }
    write(pools, &pool, status, false).await.map(drop)
}

fn round(value: f64) -> f64 {
    (value * 10_000.0).round() / 10_000.0
}

async fn write_failure(
    api: &Api<GpuInstancePool>,
    pool: &GpuInstancePool,
    mut status: GpuInstancePoolStatus,
    error: &Error,
) -> Result<Duration, Error> {
    conditions::apply(
        &mut status.conditions,
        &error.outcome(),
        pool.meta().generation,
        Timestamp::now(),
    );
    status.observed_generation = pool.meta().generation;
    write(api, pool, status, false).await?;
    Ok(Duration::from_secs(300))
}

/// Writes `status` through the status subresource with the pool's resourceVersion. With
/// `always`, an unchanged status is sent anyway: the write then only proves the pool read is
/// the latest, which acting on its record needs.
async fn write(
    api: &Api<GpuInstancePool>,
    pool: &GpuInstancePool,
    status: GpuInstancePoolStatus,
    always: bool,
) -> Result<GpuInstancePool, Error> {
    if !always && pool.status.as_ref() == Some(&status) {
        return Ok(pool.clone());
    }
    let mut updated = pool.clone();
    updated.status = Some(status);
    Ok(api
        .replace_status(&pool.name_any(), &PostParams::default(), &updated)
        .await?)
}

#[cfg(test)]
mod tests;
