//! Whether a create will be held by what governs its namespace: the GpuPolicies that govern it
//! and the Budgets that count the object, judged with the operator's own decisions (in its
//! order: the policies, then the Budgets) on the namespace's objects and the reservations as
//! the cluster holds them. A create of the plan that is not held counts, for the creates after
//! it, as the reservation it would make, as concurrent creates see each other's. Pure.

use crate::kinds::budget::{self, Billed};
use crate::kinds::gpu_policy;
use gpucloud_api::gpu_policy::{Held, Subject};
use gpucloud_api::{Budget, GpuPolicy, PolicyReservation, Reservation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;
use std::collections::BTreeMap;

/// What governs one namespace, as read from the cluster.
#[derive(Debug, Clone, Default)]
pub struct Standing {
    /// Every Budget of the namespace, with the billed objects it counts (its selector's).
    pub budgets: Vec<(Budget, Vec<Billed>)>,
    /// The GpuPolicies governing the namespace.
    pub policies: Vec<GpuPolicy>,
    /// Every billed object of the namespace (what the policies count).
    pub objects: Vec<Billed>,
    /// When the cluster was read (what the policies' reservations are aged by).
    pub now: Option<Timestamp>,
    /// What the creates of the plan not held reserve in the policies, empty as read (their
    /// objects are not in the cluster, for which `gpu_policy::still_held` would drop them).
    pub planned: Vec<PolicyReservation>,
}

/// One create, as the Budgets and policies judge it.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// What it will cost per hour by the price list (what the operator reserves), if known.
    pub rate: Option<f64>,
    /// The price list's currency.
    pub currency: &'a str,
    /// The machine it makes, for a GpuInstance.
    pub subject: Option<Subject>,
}

/// What holds a create, and why, in the operator's words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// `Budget` or `GpuPolicy`.
    pub by: String,
    pub name: String,
    /// The reason the object's Ready condition will show (`BudgetExceeded`, `PolicyLimit`...).
    pub reason: String,
    pub message: String,
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "held ({}): {}", self.reason, self.message)
    }
}

impl Standing {
    /// Whether `ask` is held, and by what; when it is not, what it reserves is recorded for the
    /// creates judged after it.
    pub fn judge(&mut self, ask: &Ask<'_>) -> Option<Hold> {
        let uid = format!("plan/{}/{}/{}", ask.kind, ask.namespace, ask.name);
        if let Some(hold) = self.judge_policies(ask, &uid) {
            return Some(hold);
        }
        self.judge_budgets(ask, &uid)
    }

    /// `gpu_policy::reserve`: a limit on the machine refuses it, a per-namespace cap it would
    /// pass holds it until there is room.
    fn judge_policies(&mut self, ask: &Ask<'_>, uid: &str) -> Option<Hold> {
        let hold = |name: String, error: crate::flow::error::Error| Hold {
            by: "GpuPolicy".into(),
            name,
            reason: error.reason().into(),
            message: error.to_string(),
        };
        if let Some(subject) = &ask.subject
            && let Some(violation) = self.policies.iter().find_map(|p| p.judge(subject))
        {
            let name = violation.policy.clone();
            return Some(hold(name, gpu_policy::refused(violation, false)));
        }
        let adds = Held {
            machines: i32::from(ask.subject.is_some()),
            gpus: ask.subject.as_ref().map_or(0, |s| s.gpus),
            hourly_rate: ask.rate.unwrap_or_default(),
        };
        let counting = self.policies.iter().filter(|p| p.counts(adds));
        for policy in counting.clone() {
            if let Some(error) = gpu_policy::currency_refusal(policy, adds, ask.currency) {
                return Some(hold(policy.name_any(), error));
            }
        }
        let has_budget = !self.budgets.is_empty();
        let now = self.now.unwrap_or_else(Timestamp::now);
        for policy in counting {
            let reservations = policy.status.iter().flat_map(|s| s.reservations.clone());
            let reservations: Vec<PolicyReservation> = reservations.collect();
            let held = gpu_policy::still_held(&reservations, ask.namespace, &self.objects, now);
            let in_namespace: Vec<PolicyReservation> = held
                .into_iter()
                .filter(|r| r.namespace == ask.namespace)
                .chain(self.planned.iter().cloned())
                .collect();
            let counted = gpu_policy::held(&self.objects, &in_namespace, Some(uid));
            if let Some(violation) = policy.judge_count(counted, adds, has_budget) {
                return Some(hold(
                    policy.name_any(),
                    gpu_policy::refused(violation, true),
                ));
            }
        }
        self.planned.push(PolicyReservation {
            namespace: ask.namespace.to_string(),
            kind: ask.kind.to_string(),
            name: ask.name.to_string(),
            uid: uid.to_string(),
            gpus: adds.gpus,
            hourly_rate: adds.hourly_rate,
            reserved_at: Time(now),
        });
        None
    }

    /// `budget::reserve`: in each Budget that counts the object, the create must fit its
    /// hourly limit, and its period's spend must not be used up.
    fn judge_budgets(&mut self, ask: &Ask<'_>, uid: &str) -> Option<Hold> {
        let rate = ask.rate?;
        let hold = |name: String, error: crate::flow::error::Error| Hold {
            by: "Budget".into(),
            name,
            reason: error.reason().into(),
            message: error.to_string(),
        };
        let counting: Vec<usize> = (0..self.budgets.len())
            .filter(|i| {
                // A selector that does not parse refuses the create, as in the operator.
                budget::selects(&self.budgets[*i].0, ask.labels).unwrap_or(true)
            })
            .collect();
        for index in &counting {
            let (budget, objects) = &self.budgets[*index];
            if let Err(error) = budget::selects(budget, ask.labels) {
                return Some(hold(budget.name_any(), error));
            }
            if budget.spec.currency != ask.currency {
                let error = budget::currency_mismatch(budget, ask.currency);
                return Some(hold(budget.name_any(), error));
            }
            let reservations = budget
                .status
                .as_ref()
                .map(|s| s.reservations.as_slice())
                .unwrap_or_default();
            let counted = budget::count(objects, reservations, Some(uid));
            if let Some(error) = budget::refusal(budget, &counted, rate) {
                return Some(hold(budget.name_any(), error));
            }
        }
        let now = self.now.unwrap_or_else(Timestamp::now);
        for index in counting {
            let status = self.budgets[index].0.status.get_or_insert_default();
            status.reservations.push(Reservation {
                kind: ask.kind.to_string(),
                name: ask.name.to_string(),
                uid: uid.to_string(),
                hourly_rate: rate,
                reserved_at: Time(now),
            });
        }
        None
    }
}
