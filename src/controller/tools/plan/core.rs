//! The plan itself, pure: the objects of the input, the live objects they name (and those
//! `--prune` would delete), the catalog and prices in; per object an action, the changed spec
//! fields, the placement and the hourly cost before and after out, with the totals.

use super::holds::{Ask, Hold, Standing};
use super::kinds::{Desired, KindInfo, Wanted};
use crate::accounts::catalog::Catalog;
use crate::accounts::pricing;
use crate::flow::conditions::reason;
use crate::flow::kind::ManagedKind;
use crate::kinds::gpu_instance::{InstancePlan, placement};
use crate::kinds::gpu_offering::HEARTBEAT;
use crate::kinds::gpu_policy;
use gpucloud_api::{
    ChosenPlacement, GpuInstance, GpuInstanceSpec, GpuOffering, PowerState, Volume, VolumeSpec,
};
use gpucloud_cloud::model::{CreateInstanceRequest, PriceQuoteBody, PricingBody};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use std::collections::BTreeMap;

/// An object as the cluster holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Live {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// Its spec as the kind reads it.
    pub spec: serde_json::Value,
    /// What it costs per hour by its status.
    pub cost: Option<(f64, String)>,
    /// Where it was placed (a GpuInstance's `status.placement.chosen`).
    pub placement: Option<ChosenPlacement>,
    /// The API server's message refusing its deletion, if it would (for `--prune`).
    pub refused: Option<String>,
    /// A GpuInstance's machine as its status records it.
    pub machine: Option<LiveMachine>,
}

/// A GpuInstance's machine as its status records it: what a start is judged by.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveMachine {
    pub uid: String,
    /// Stopped or hibernated.
    pub off: bool,
    pub gpu_type: String,
    pub gpu_count: u32,
}

/// Where the prices come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PriceSource {
    /// The cloud's price quote (`POST /pricing/`).
    Quote,
    /// The cloud's price list (`GET /pricing`).
    PriceList,
    /// The cluster's GpuOfferings.
    Offerings,
    /// The live object's status (what it costs now).
    Status,
    /// The cloud does not bill the kind.
    NotBilled,
}

impl std::fmt::Display for PriceSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PriceSource::Quote => "quote",
            PriceSource::PriceList => "price list",
            PriceSource::Offerings => "offerings",
            PriceSource::Status => "status",
            PriceSource::NotBilled => "not billed",
        })
    }
}

/// The catalog and prices a plan places and prices with.
#[derive(Debug, Clone, Default)]
pub struct Prices {
    pub catalog: Catalog,
    /// GPU prices, and with the cloud's price list storage, snapshot and image prices.
    pub pricing: PricingBody,
    /// Where `catalog` and `pricing` come from: `Offerings` or `PriceList`.
    pub source: Option<PriceSource>,
    /// The cloud's quotes by (GPU type, count).
    pub quotes: BTreeMap<(String, u32), PriceQuoteBody>,
    /// Why a placement chosen with `catalog` may not be where the create goes (the operator
    /// has stopped refreshing the offerings it comes from), if so.
    pub stale_stock: Option<String>,
}

/// What is to be done with an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Create,
    Change,
    Delete,
    Unchanged,
    Skipped,
    /// The API server refuses it: nothing changes.
    Refused,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Action::Create => "create",
            Action::Change => "change",
            Action::Delete => "delete",
            Action::Unchanged => "unchanged",
            Action::Skipped => "skipped",
            Action::Refused => "refused",
        })
    }
}

/// A changed top-level spec field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// JSON pointer, e.g. `/spec/sizeGb`.
    pub path: String,
    /// The API server refuses the change (a CEL rule): delete and recreate the object.
    pub immutable: bool,
}

/// Where a GpuInstance goes (or is).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedPlacement {
    pub gpu_type: String,
    pub gpu_count: u32,
    pub region: String,
    /// Index of the alternative in `spec.placement.alternatives` (0 without one).
    pub alternative: u32,
    /// The hourly rate of the price list (or offerings) the choice was made with.
    #[serde(serialize_with = "gpucloud_api::money::option")]
    pub hourly_rate: Option<f64>,
}

impl std::fmt::Display for PlannedPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} x{} in {}",
            self.gpu_type, self.gpu_count, self.region
        )
    }
}

/// What an object costs per hour before and after; `None`: not known.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HourlyCost {
    #[serde(serialize_with = "gpucloud_api::money::option")]
    pub before: Option<f64>,
    #[serde(serialize_with = "gpucloud_api::money::option")]
    pub after: Option<f64>,
    /// What priced the line (`after`'s source; the status's for an object left as it is).
    pub source: Option<PriceSource>,
}

/// One object of the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedObject {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub action: Action,
    pub changes: Vec<Change>,
    pub placement: Option<PlannedPlacement>,
    pub hourly_cost: HourlyCost,
    pub note: Option<String>,
    /// The API server's message refusing it (`kubectl apply` prints the same).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// What holds a create (a Budget, a GpuPolicy): the object is made, its resource is not
    /// while the hold lasts, so it costs nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<Hold>,
}

/// The sums over the objects whose cost is known.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Total {
    #[serde(serialize_with = "gpucloud_api::money::serialize")]
    pub before: f64,
    #[serde(serialize_with = "gpucloud_api::money::serialize")]
    pub after: f64,
    #[serde(serialize_with = "gpucloud_api::money::serialize")]
    pub delta: f64,
    pub currency: String,
    /// Objects whose cost before or after is not known, left out of the sums.
    pub unpriced: usize,
    /// Creates held by a Budget or GpuPolicy, counted at no cost after, and starts held (by
    /// them or `spec.maxHourlyRate`), counted at what the machine costs off.
    pub held: usize,
    /// Objects the API server would refuse, counted as they are.
    pub refused: usize,
}

/// The plan: every object, then the totals, and what the plan was checked with.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub objects: Vec<PlannedObject>,
    pub total: Total,
    pub checks: Checks,
}

impl Plan {
    /// The API server's messages for the objects it would refuse.
    pub fn refusals(&self) -> Vec<&str> {
        self.objects
            .iter()
            .filter_map(|o| o.refused.as_deref())
            .collect()
    }
}

/// What the plan was checked with, as the output says it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Checks {
    /// The CustomResourceDefinitions whose schemas and rules the manifests were validated
    /// with: the cluster's, or the operator's own (and why).
    pub crds: String,
    /// The ValidatingAdmissionPolicies evaluated, or why none.
    pub admission: String,
    /// The stock placements were chosen with, and how old it is.
    pub stock: String,
    /// What creates were judged by (the Budgets and GpuPolicies), or what could not be read.
    pub holds: String,
}

/// Plans `desired` (each with the live object of its name, if any) and deletes `pruned`;
/// each create judged by what governs its namespace (`standing`, by namespace).
pub fn plan(
    desired: Vec<(Desired, Option<Live>)>,
    pruned: Vec<Live>,
    kinds: &[KindInfo],
    prices: &Prices,
    standing: &mut BTreeMap<String, Standing>,
) -> Plan {
    let mut objects = Vec::new();
    for (object, live) in desired {
        objects.push(one(object, live, kinds, prices, standing));
    }
    for live in pruned {
        let billed = kinds.iter().any(|k| k.kind == live.kind && k.billed);
        let (before, source) = now(&live, billed);
        let mut deleted = match live.refused {
            // Refused: it stays, as it costs.
            Some(message) => PlannedObject {
                refused: Some(message),
                ..planned(Action::Refused, before, before)
            },
            None => planned(Action::Delete, before, Some(0.0)),
        };
        deleted.hourly_cost.source = Some(source);
        deleted.placement = live.placement.as_ref().map(shown);
        objects.push(PlannedObject {
            kind: live.kind,
            namespace: live.namespace,
            name: live.name,
            ..deleted
        });
    }
    let total = total(&objects, prices);
    Plan {
        objects,
        total,
        checks: Checks::default(),
    }
}

fn one(
    object: Desired,
    live: Option<Live>,
    kinds: &[KindInfo],
    prices: &Prices,
    standing: &mut BTreeMap<String, Standing>,
) -> PlannedObject {
    let billed = kinds.iter().any(|k| k.kind == object.kind && k.billed);
    let planned = match &object.what {
        Wanted::Skipped(why) => PlannedObject {
            note: Some(why.clone()),
            ..planned(Action::Skipped, None, None)
        },
        Wanted::Refused { message, spec } => {
            let (before, source) = live.as_ref().map_or((Some(0.0), None), |live| {
                let (before, source) = now(live, billed);
                (before, Some(source))
            });
            let mut out = planned(Action::Refused, before, before);
            out.hourly_cost.source = source;
            out.placement = live.as_ref().and_then(|l| l.placement.as_ref()).map(shown);
            out.refused = Some(message.clone());
            if let (Some(spec), Some(live)) = (spec, &live) {
                out.changes = changes(&live.spec, spec, immutable_of(kinds, &object.kind));
            }
            out
        }
        Wanted::Managed { spec } => {
            let immutable = immutable_of(kinds, &object.kind);
            match &live {
                None => {
                    let mut out = create(&object.kind, spec, billed, prices);
                    if billed {
                        let standing = standing.entry(object.namespace.clone()).or_default();
                        hold(&object, spec, prices, standing, &mut out);
                    }
                    out
                }
                Some(live) => {
                    let mut out = existing(&object.kind, spec, live, immutable, billed, prices);
                    if let Some(machine) = &live.machine
                        && out.refused.is_none()
                        && out.note.is_none()
                    {
                        let standing = standing.entry(object.namespace.clone()).or_default();
                        start(&object.namespace, spec, machine, prices, standing, &mut out);
                    }
                    out
                }
            }
        }
    };
    PlannedObject {
        kind: object.kind,
        namespace: object.namespace,
        name: object.name,
        ..planned
    }
}

/// The top-level spec fields of `kind` a change of which the API server refuses.
fn immutable_of<'a>(kinds: &'a [KindInfo], kind: &str) -> &'a [&'static str] {
    kinds
        .iter()
        .find(|k| k.kind == kind)
        .map(|k| k.immutable.as_slice())
        .unwrap_or_default()
}

/// Judges a create by the Budgets and GpuPolicies of its namespace, at the rate the operator
/// reserves (the price list's, not a quote); a held create costs nothing.
fn hold(
    object: &Desired,
    spec: &serde_json::Value,
    prices: &Prices,
    standing: &mut Standing,
    out: &mut PlannedObject,
) {
    let is_instance = object.kind == GpuInstance::kind(&());
    if is_instance && out.placement.is_none() {
        // Not placed (refused by placement, or restored): nothing to reserve yet.
        return;
    }
    let rate = match &out.placement {
        Some(placed) => placed.hourly_rate,
        None => out.hourly_cost.after,
    };
    let subject = out
        .placement
        .as_ref()
        .and_then(|placed| subject(object, spec, placed));
    let ask = Ask {
        kind: &object.kind,
        namespace: &object.namespace,
        name: &object.name,
        labels: &object.labels,
        rate,
        currency: &prices.pricing.currency,
        subject,
    };
    if let Some(held) = standing.judge(&ask) {
        out.hourly_cost.after = Some(0.0);
        out.held = Some(held);
    }
}

/// A GpuInstance whose machine is off and whose changed spec asks for it running (without a
/// schedule or a lifetime, which the operator judges at their moments): the operator starts
/// it at the price list's running rate, unless `spec.maxHourlyRate` is below that rate
/// (`PriceAboveLimit`), a Budget keeps it off (it lists the machine in `status.poweredOff`) or
/// the start would pass a GpuPolicy's per-namespace rate cap (`PolicyLimit`). Judged as the
/// operator judges the start; a held start costs what the machine costs off.
fn start(
    namespace: &str,
    spec: &serde_json::Value,
    machine: &LiveMachine,
    prices: &Prices,
    standing: &Standing,
    out: &mut PlannedObject,
) {
    let Ok(wanted) = serde_json::from_value::<GpuInstanceSpec>(spec.clone()) else {
        return;
    };
    let asked_to_start = out.changes.iter().any(|c| c.path == "/spec/powerState")
        && wanted.power_state == PowerState::Running;
    // A schedule or a lifetime (its own or a policy's) may keep it off: judged by the
    // operator at the moment, not here.
    let timed = wanted.schedule.is_some()
        || wanted.lifetime.is_some()
        || standing
            .policies
            .iter()
            .any(|p| p.spec.max_lifetime.is_some());
    if !machine.off || !asked_to_start || timed {
        return;
    }
    let rate = placement::rate(&prices.pricing, &machine.gpu_type, machine.gpu_count);
    let hardware = format!("{} x{}", machine.gpu_type, machine.gpu_count);
    let hold = |by: &str, name: String, reason: &str, message: String| Hold {
        by: by.into(),
        name,
        reason: reason.into(),
        message,
    };
    let held = if let Some(limit) = wanted.max_hourly_rate
        && rate.is_none_or(|rate| rate > limit)
    {
        Some(hold(
            "GpuInstance",
            "spec.maxHourlyRate".into(),
            reason::PRICE_ABOVE_LIMIT,
            match rate {
                Some(rate) => format!(
                    "starting it ({hardware}) would cost {rate:.4} per hour, above spec.maxHourlyRate {limit:.4}: it stays off"
                ),
                None => format!("the prices give none for {hardware}: it stays off"),
            },
        ))
    } else if let Some(budget) = standing.budgets.iter().map(|(b, _)| b).find(|b| {
        b.status
            .as_ref()
            .is_some_and(|s| s.powered_off.iter().any(|p| p.uid == machine.uid))
    }) {
        Some(hold(
            "Budget",
            budget.name_any(),
            reason::BUDGET_EXCEEDED,
            format!("Budget {} keeps it off", budget.name_any()),
        ))
    } else {
        rate.and_then(|rate| {
            let start = gpu_policy::Start {
                namespace,
                uid: &machine.uid,
                running_rate: rate,
                currency: &prices.pricing.currency,
            };
            let has_budget = !standing.budgets.is_empty();
            gpu_policy::start_violation(&standing.policies, &standing.objects, &start, has_budget)
                .map(|violation| {
                    hold(
                        "GpuPolicy",
                        violation.policy.clone(),
                        reason::POLICY_LIMIT,
                        format!("{violation}: it stays off until there is room"),
                    )
                })
        })
    };
    match held {
        Some(held) => out.held = Some(held),
        None => {
            out.hourly_cost.after = rate;
            out.hourly_cost.source = prices.source;
            out.note = Some(format!("starts the machine ({hardware})"));
        }
    }
}

/// What a GpuPolicy judges of the machine a GpuInstance create makes where it is placed, as
/// the operator's create asks it.
fn subject(
    object: &Desired,
    spec: &serde_json::Value,
    placed: &PlannedPlacement,
) -> Option<gpucloud_api::gpu_policy::Subject> {
    let spec: GpuInstanceSpec = serde_json::from_value(spec.clone()).ok()?;
    let mut vm = GpuInstance::new(&object.name, spec);
    vm.metadata.namespace = Some(object.namespace.clone());
    let request = CreateInstanceRequest::new(
        object.name.clone(),
        placed.region.clone(),
        placed.gpu_type.clone(),
        placed.gpu_count,
        String::new(),
    );
    let plan = InstancePlan::Create {
        request: Box::new(request),
        placement: gpucloud_api::PlacementStatus::default(),
    };
    vm.policy_subject(&plan)
}

/// What a live object costs per hour now, by its status (nothing for a kind not billed).
fn now(live: &Live, billed: bool) -> (Option<f64>, PriceSource) {
    if billed {
        (
            live.cost.as_ref().map(|(rate, _)| *rate),
            PriceSource::Status,
        )
    } else {
        (Some(0.0), PriceSource::NotBilled)
    }
}

/// A planned object without its name yet.
fn planned(action: Action, before: Option<f64>, after: Option<f64>) -> PlannedObject {
    PlannedObject {
        kind: String::new(),
        namespace: String::new(),
        name: String::new(),
        action,
        changes: Vec::new(),
        placement: None,
        hourly_cost: HourlyCost {
            before,
            after,
            source: None,
        },
        note: None,
        refused: None,
        held: None,
    }
}

fn create(kind: &str, spec: &serde_json::Value, billed: bool, prices: &Prices) -> PlannedObject {
    let mut out = planned(Action::Create, Some(0.0), None);
    if !billed {
        out.hourly_cost.after = Some(0.0);
        out.hourly_cost.source = Some(PriceSource::NotBilled);
        return out;
    }
    if kind == GpuInstance::kind(&()) {
        place(spec, prices, &mut out);
    } else if kind == Volume::kind(&()) {
        match serde_json::from_value::<VolumeSpec>(spec.clone()) {
            Ok(volume) if volume.source.is_some() => {
                out.note = Some("a clone: its size is the source's at least".into());
            }
            Ok(volume) => price_volume(&volume, prices, &mut out),
            Err(_) => {}
        }
    } else {
        out.note = Some("priced by its size, known once it is made".into());
    }
    out
}

/// The placement of a GpuInstance to create, chosen as the operator chooses it, and its rate.
fn place(spec: &serde_json::Value, prices: &Prices, out: &mut PlannedObject) {
    let Ok(spec) = serde_json::from_value::<GpuInstanceSpec>(spec.clone()) else {
        return;
    };
    if spec.source.is_some() {
        out.note = Some("restored from a snapshot: its GPUs are the snapshot's".into());
        return;
    }
    let chosen = placement::candidates(&spec).and_then(|(policy, candidates)| {
        placement::check_known(&spec, &candidates, &prices.catalog)?;
        placement::choose(
            policy,
            &candidates,
            spec.max_hourly_rate,
            &prices.catalog,
            &prices.pricing,
            &[],
        )
    });
    match chosen {
        Ok(choice) => {
            let Some(chosen) = choice.status.chosen.as_ref() else {
                return;
            };
            let placed = shown(chosen);
            out.note.clone_from(&prices.stale_stock);
            let (rate, source) = gpu_rate(&placed, prices);
            out.hourly_cost.after = rate;
            out.hourly_cost.source = source;
            out.placement = Some(placed);
        }
        Err(error) => {
            // Nothing is created until it can be placed: nothing billed.
            out.hourly_cost.after = Some(0.0);
            out.hourly_cost.source = prices.source;
            out.note = Some(format!("{}: {error}", error.reason()));
        }
    }
}

/// What `placed` costs per hour: the quote for its GPUs when there is one, else its rate.
fn gpu_rate(placed: &PlannedPlacement, prices: &Prices) -> (Option<f64>, Option<PriceSource>) {
    let key = (placed.gpu_type.clone(), placed.gpu_count);
    match prices.quotes.get(&key) {
        Some(quote) => (Some(quote.hourly_rate), Some(PriceSource::Quote)),
        None => (placed.hourly_rate, prices.source),
    }
}

fn price_volume(volume: &VolumeSpec, prices: &Prices, out: &mut PlannedObject) {
    let price = pricing::storage_price(&prices.pricing, &volume.volume_type);
    let size = u64::try_from(volume.size_gb).unwrap_or_default();
    if let Some(price) = price {
        out.hourly_cost.after = Some(pricing::per_hour(size, price));
        out.hourly_cost.source = prices.source;
    } else {
        out.note = Some(format!(
            "no price for volume type {:?} ({})",
            volume.volume_type,
            match prices.source {
                Some(PriceSource::PriceList) => "not in the cloud's price list",
                _ => "the GpuOfferings show GPU prices only",
            }
        ));
    }
}

fn existing(
    kind: &str,
    spec: &serde_json::Value,
    live: &Live,
    immutable: &[&str],
    billed: bool,
    prices: &Prices,
) -> PlannedObject {
    let changes = changes(&live.spec, spec, immutable);
    let action = if changes.is_empty() {
        Action::Unchanged
    } else {
        Action::Change
    };
    let (before, source) = now(live, billed);
    let mut out = planned(action, before, before);
    out.hourly_cost.source = Some(source);
    out.placement = live.placement.as_ref().map(shown);
    let refused: Vec<&str> = changes
        .iter()
        .filter(|c| c.immutable)
        .map(|c| c.path.trim_start_matches("/spec/"))
        .collect();
    if !refused.is_empty() {
        // The API server refuses the whole update: nothing changes.
        out.note = Some(format!(
            "refused: {} immutable (delete and recreate to change)",
            refused.join(", ")
        ));
    } else if action == Action::Change && billed {
        if kind == GpuInstance::kind(&()) {
            if let Some((rate, Some(PriceSource::Quote))) =
                out.placement.as_ref().map(|p| gpu_rate(p, prices))
            {
                out.hourly_cost.after = rate;
                out.hourly_cost.source = Some(PriceSource::Quote);
            }
        } else if kind == Volume::kind(&()) && changes.iter().any(|c| c.path == "/spec/sizeGb") {
            out.hourly_cost.after = None;
            out.hourly_cost.source = None;
            if let Ok(volume) = serde_json::from_value::<VolumeSpec>(spec.clone()) {
                price_volume(&volume, prices, &mut out);
            }
        }
    }
    out.changes = changes;
    out
}

/// The top-level spec fields that differ, in name order.
fn changes(
    live: &serde_json::Value,
    wanted: &serde_json::Value,
    immutable: &[&str],
) -> Vec<Change> {
    let empty = serde_json::Map::new();
    let live = live.as_object().unwrap_or(&empty);
    let wanted = wanted.as_object().unwrap_or(&empty);
    let mut fields: Vec<&String> = live.keys().chain(wanted.keys()).collect();
    fields.sort();
    fields.dedup();
    fields
        .into_iter()
        .filter(|field| live.get(*field) != wanted.get(*field))
        .map(|field| Change {
            path: format!("/spec/{field}"),
            immutable: immutable.contains(&field.as_str()),
        })
        .collect()
}

fn shown(chosen: &ChosenPlacement) -> PlannedPlacement {
    PlannedPlacement {
        gpu_type: chosen.gpu_type.clone(),
        gpu_count: u32::try_from(chosen.gpu_count).unwrap_or_default(),
        region: chosen.region.clone(),
        alternative: u32::try_from(chosen.alternative).unwrap_or_default(),
        hourly_rate: chosen.hourly_rate,
    }
}

fn total(objects: &[PlannedObject], prices: &Prices) -> Total {
    let mut before = 0.0;
    let mut after = 0.0;
    let mut unpriced = 0;
    for object in objects.iter().filter(|o| o.action != Action::Skipped) {
        match (object.hourly_cost.before, object.hourly_cost.after) {
            (Some(b), Some(a)) => {
                before += b;
                after += a;
            }
            _ => unpriced += 1,
        }
    }
    let quoted = prices.quotes.values().map(|q| q.currency.clone());
    let currency = std::iter::once(prices.pricing.currency.clone())
        .chain(quoted)
        .find(|c| !c.is_empty())
        .unwrap_or_default();
    let round = |x: f64| pricing::per_hour(1, x);
    Total {
        before: round(before),
        after: round(after),
        delta: round(after - before),
        currency,
        unpriced,
        held: objects.iter().filter(|o| o.held.is_some()).count(),
        refused: objects.iter().filter(|o| o.refused.is_some()).count(),
    }
}

/// How fresh the stock of `offerings` is at `now`, as the output says it, and the note for
/// placements chosen with it when it may be older than the operator's catalog (`catalog_ttl`,
/// its resync interval): the create may then go elsewhere. While the operator runs, its
/// keeper reads the catalog once per interval and writes what changed, and every offering at
/// least once per `HEARTBEAT` intervals; so the offerings lag the operator's catalog by one
/// interval at most. An offering not refreshed for longer than that (the oldest
/// `status.refreshedAt`), or none with a time, says the keeper has missed its passes.
pub fn stock_age(
    offerings: &[GpuOffering],
    now: Timestamp,
    catalog_ttl: std::time::Duration,
) -> (Option<String>, String) {
    if offerings.is_empty() {
        return (None, "no GpuOfferings in the cluster".into());
    }
    let shown = |d: SignedDuration| format!("{:#}", SignedDuration::from_secs(d.as_secs()));
    let ttl = SignedDuration::try_from(catalog_ttl).unwrap_or(SignedDuration::MAX);
    let heartbeat = ttl.saturating_mul(i32::try_from(HEARTBEAT).unwrap_or(i32::MAX));
    let oldest = offerings
        .iter()
        .map(|o| Some(o.status.as_ref()?.refreshed_at.as_ref()?.0))
        .collect::<Option<Vec<Timestamp>>>()
        .and_then(|times| times.into_iter().min());
    let Some(oldest) = oldest else {
        let note = "placement may differ: the GpuOfferings' stock is of unknown age (an offering without refreshedAt); --cloud-url reads the cloud's stock".to_string();
        return (Some(note), "the GpuOfferings', of unknown age".into());
    };
    let oldest = oldest
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or(oldest);
    let age = now.duration_since(oldest).max(SignedDuration::ZERO);
    let stock = format!(
        "the GpuOfferings', each refreshed within the last {} (the operator refreshes them every {}, each at least every {}, on a catalog read at most that old)",
        shown(age),
        shown(ttl),
        shown(heartbeat)
    );
    let note = (age > heartbeat.saturating_add(ttl)).then(|| {
        format!(
            "placement may differ: a GpuOffering was last refreshed {} ago, so the operator has missed its refreshes (every {}, each offering at least every {}) and places with fresher stock; --cloud-url reads the cloud's stock",
            shown(age),
            shown(ttl),
            shown(heartbeat)
        )
    });
    (note, stock)
}

/// The (GPU type, count) of every GpuInstance created or changed: what the cloud is asked to
/// quote.
pub fn to_quote(plan: &Plan) -> Vec<(String, u32)> {
    let mut wanted: Vec<(String, u32)> = plan
        .objects
        .iter()
        .filter(|o| o.kind == GpuInstance::kind(&()))
        .filter(|o| matches!(o.action, Action::Create | Action::Change))
        .filter_map(|o| o.placement.as_ref())
        .map(|p| (p.gpu_type.clone(), p.gpu_count))
        .collect();
    wanted.sort();
    wanted.dedup();
    wanted
}
