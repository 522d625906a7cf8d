//! `GpuPolicy`: a cluster administrator's limits on what the namespaces it selects may run.
//!
//! A GpuPolicy is cluster-scoped, so only whoever may write cluster-scoped gpucloud objects
//! (cluster administrators; the chart's tenant roles cannot) sets it, and no tenant can edit
//! its way out of it. It is enforced twice: at admission by the chart's
//! ValidatingAdmissionPolicy, whose `paramKind` is GpuPolicy (what one object alone breaks:
//! a GPU type, a region, a size, a lifetime, a pool's replicas), and by the operator before
//! every billed create and start (all of that, plus the per-namespace counts, which need the
//! namespace's other objects). So that concurrent creates cannot together pass a count each
//! alone would pass, a create reserves what it adds in the policy's status with a
//! version-checked write, as Budgets do. Several policies selecting one namespace all apply:
//! together they are as strict as the strictest of each limit.

use crate::common::{Column, Tier};
use crate::lifetime::MAX_DURATION_LENGTH;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::jiff::SignedDuration;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The most items each allowed list holds.
pub const MAX_ALLOWED: u32 = 64;

/// Limits on the GPU machines of the namespaces a label selector picks.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "gpucloud.io",
    version = "v1alpha1",
    kind = "GpuPolicy",
    status = "GpuPolicyStatus",
    shortname = "gpupolicy",
    category = "gpucloud-policy"
)]
#[serde(rename_all = "camelCase")]
pub struct GpuPolicySpec {
    /// The namespaces the policy governs, by their labels; `{}` selects every namespace.
    pub namespace_selector: LabelSelector,
    /// The GPU types a machine may have (`spec.gpuType` and every placement alternative's).
    /// Any when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ALLOWED), inner(length(min = 1, max = 64)))]
    pub allowed_gpu_types: Option<Vec<String>>,
    /// The regions a machine may be created in. Any when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ALLOWED), inner(length(min = 1, max = 64)))]
    pub allowed_regions: Option<Vec<String>>,
    /// The service tiers a machine may be created on. Any when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2))]
    pub allowed_tiers: Option<Vec<Tier>>,
    /// The most GPUs one machine may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub max_gpus_per_machine: Option<i32>,
    /// The longest a machine may live, as kubectl writes durations (`72h`, `30m`): a
    /// machine without `spec.lifetime` (or with a longer one) is stopped this long after its
    /// creation, a create with a longer lifetime is refused, and removing a lifetime does not
    /// lift this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_DURATION_LENGTH))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && !self.matches('^([0.]+(ns|us|ms|s|m|h))+$')").message("maxLifetime must be a positive duration as kubectl writes them, such as 72h or 1h30m"))]
    pub max_lifetime: Option<String>,
    /// The most replicas a GpuInstancePool may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub max_pool_replicas: Option<i32>,
    /// What each selected namespace may hold at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_limits: Option<NamespaceLimits>,
}

/// Caps on what one namespace holds at once, each counted on its own.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceLimits {
    /// The most GpuInstances whose machines exist or are being created (stopped ones too:
    /// they hold their GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub machines: Option<i32>,
    /// The most GPUs those machines have together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub gpus: Option<i32>,
    /// The most the namespace's billed resources (machines, volumes, snapshots, images) may
    /// cost per hour together, in `currency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub hourly_rate: Option<f64>,
    /// The same cap, for namespaces that have no Budget of their own: a default a namespace's
    /// Budget replaces (`hourlyRate`, if set, applies either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub hourly_rate_without_budget: Option<f64>,
    /// The currency of the rates (ISO 4217): it must be the cloud account's, or every billed
    /// create the rates govern is refused.
    #[serde(default = "default_currency")]
    #[schemars(length(max = 3))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Z]{3}$')").message("currency must be an ISO 4217 code of three capital letters, such as USD"))]
    pub currency: String,
}

fn default_currency() -> String {
    "USD".into()
}

/// What the operator counts against the policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuPolicyStatus {
    /// How many namespaces the policy selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<i32>,
    /// The machines, GPUs and hourly rate counted in those namespaces together (reservations
    /// included); the caps apply to each namespace on its own (`counts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machines: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub hourly_rate: Option<f64>,
    /// The namespaces that hold anything, fullest first (at most 100).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counts: Vec<NamespaceCount>,
    /// Creates under way, each holding what it adds until its object records its resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<PolicyReservation>,
    /// Machines that exist outside the policy (made before it, or adopted), `namespace/name:
    /// why` each (at most 50). They are reported, never stopped or deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside: Vec<String>,
    /// The `metadata.generation` the figures were counted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (counted), `Exceeded` (a namespace holds more than a cap: lowered caps, or
    /// machines from before the policy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// What one namespace holds, as a policy counts it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceCount {
    pub namespace: String,
    pub machines: i32,
    pub gpus: i32,
    #[serde(serialize_with = "crate::money::serialize")]
    pub hourly_rate: f64,
}

/// What a create under way holds in a policy's count.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReservation {
    pub namespace: String,
    /// The object's kind, name and uid.
    pub kind: String,
    pub name: String,
    pub uid: String,
    /// The GPUs it adds (0 for what is no machine).
    pub gpus: i32,
    /// What its resource will cost per hour, from the price list.
    #[serde(serialize_with = "crate::money::serialize")]
    pub hourly_rate: f64,
    pub reserved_at: Time,
}

impl GpuPolicy {
    /// `kubectl get gpupolicy`: what it selects and counts, against the per-namespace caps.
    pub const COLUMNS: &'static [Column] = &[
        Column::new("Namespaces", "integer", ".status.namespaces"),
        Column::new("Machines", "integer", ".status.machines"),
        Column::new("GPUs", "integer", ".status.gpus"),
        Column::new("Rate/h", "number", ".status.hourlyRate"),
        Column::new(
            "Max machines/ns",
            "integer",
            ".spec.namespaceLimits.machines",
        ),
        Column::new("Max GPUs/ns", "integer", ".spec.namespaceLimits.gpus"),
        Column::new("Max rate/ns", "number", ".spec.namespaceLimits.hourlyRate"),
        Column::new("GPU types", "string", ".spec.allowedGpuTypes").wide(),
        Column::new("Regions", "string", ".spec.allowedRegions").wide(),
        crate::READY_COLUMN,
        crate::REASON_COLUMN,
        crate::AGE_COLUMN,
    ];
}

// === Judgement ===

/// What a policy judges of one machine: each GPU type, region and GPU count the object
/// names (or its plan chose: a restore's hardware comes from its snapshot), with the field
/// that names it, its tier, and its lifetime.
#[derive(Clone, Debug, PartialEq)]
pub struct Subject {
    pub gpu_types: Vec<(String, String)>,
    pub regions: Vec<(String, String)>,
    pub gpu_counts: Vec<(String, i32)>,
    pub tier: Tier,
    /// The GPUs the machine will have (what the namespace's GPU cap counts).
    pub gpus: i32,
    /// When the machine expires under its own `spec.lifetime`, if it has one: `Err` when the
    /// lifetime cannot be read (the object reports that itself).
    pub expires_after: Option<Result<SignedDuration, String>>,
}

/// A limit of a policy that an object breaks, or would break.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The policy's name.
    pub policy: String,
    /// The object's field at fault (`spec.gpuType`), or the namespace's count.
    pub field: String,
    /// What is wrong and what the policy allows, naming the policy's field.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GpuPolicy {}: {}: {}",
            self.policy, self.field, self.message
        )
    }
}

/// What one namespace holds, or what a create adds to it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Held {
    pub machines: i32,
    pub gpus: i32,
    pub hourly_rate: f64,
}

/// Rates are compared with this slack, so that sums of prices written with a few decimals
/// never refuse a create that fits exactly.
const RATE_SLACK: f64 = 1e-9;

impl GpuPolicy {
    /// The longest lifetime the policy allows, if it sets one.
    pub fn max_lifetime(&self) -> Option<Result<SignedDuration, String>> {
        self.spec.max_lifetime.as_deref().map(|text| {
            crate::lifetime::parse_duration(text).map_err(|e| format!("spec.maxLifetime: {e}"))
        })
    }

    /// The first limit on one machine that `subject` breaks: an unlisted GPU type, region or
    /// tier, too many GPUs, or a lifetime longer than `maxLifetime`.
    pub fn judge(&self, subject: &Subject) -> Option<Violation> {
        let name = self.metadata.name.clone().unwrap_or_default();
        let violation = |field: &str, message: String| Violation {
            policy: name.clone(),
            field: field.to_string(),
            message,
        };
        let spec = &self.spec;
        if let Some(allowed) = &spec.allowed_gpu_types
            && let Some((field, value)) =
                subject.gpu_types.iter().find(|(_, v)| !allowed.contains(v))
        {
            return Some(violation(
                field,
                format!("GPU type {value} is not among allowedGpuTypes {allowed:?}"),
            ));
        }
        if let Some(allowed) = &spec.allowed_regions
            && let Some((field, value)) = subject.regions.iter().find(|(_, v)| !allowed.contains(v))
        {
            return Some(violation(
                field,
                format!("region {value} is not among allowedRegions {allowed:?}"),
            ));
        }
        if let Some(allowed) = &spec.allowed_tiers
            && !allowed.contains(&subject.tier)
        {
            return Some(violation(
                "spec.tier",
                format!(
                    "tier {:?} is not among allowedTiers {allowed:?}",
                    subject.tier
                ),
            ));
        }
        if let Some(max) = spec.max_gpus_per_machine
            && let Some((field, count)) = subject.gpu_counts.iter().find(|(_, c)| *c > max)
        {
            return Some(violation(
                field,
                format!("{count} GPUs is more than maxGpusPerMachine {max}"),
            ));
        }
        if let Some(Ok(max)) = self.max_lifetime()
            && let Some(Ok(after)) = &subject.expires_after
            && *after > max
        {
            return Some(violation(
                "spec.lifetime",
                format!(
                    "a lifetime of {} is longer than maxLifetime {}",
                    show_duration(*after),
                    spec.max_lifetime.as_deref().unwrap_or_default()
                ),
            ));
        }
        None
    }

    /// Whether a pool asking for `replicas` machines passes `maxPoolReplicas`.
    pub fn judge_replicas(&self, replicas: i32) -> Option<Violation> {
        let max = self.spec.max_pool_replicas?;
        (replicas > max).then(|| Violation {
            policy: self.metadata.name.clone().unwrap_or_default(),
            field: "spec.replicas".into(),
            message: format!("{replicas} replicas is more than maxPoolReplicas {max}"),
        })
    }

    /// The first per-namespace cap that `held` (what the namespace holds without the create)
    /// plus `adds` would pass. `has_budget` says whether the namespace has a Budget of its own
    /// (`hourlyRateWithoutBudget` applies only where it has none).
    pub fn judge_count(&self, held: Held, adds: Held, has_budget: bool) -> Option<Violation> {
        let limits = self.spec.namespace_limits.as_ref()?;
        let name = self.metadata.name.clone().unwrap_or_default();
        let violation = |field: &str, message: String| Violation {
            policy: name.clone(),
            field: format!("spec.namespaceLimits.{field}"),
            message,
        };
        if adds.machines > 0
            && let Some(max) = limits.machines
            && held.machines + adds.machines > max
        {
            return Some(violation(
                "machines",
                format!(
                    "the namespace has {} machines; one more would pass the cap of {max}",
                    held.machines
                ),
            ));
        }
        if adds.gpus > 0
            && let Some(max) = limits.gpus
            && held.gpus + adds.gpus > max
        {
            return Some(violation(
                "gpus",
                format!(
                    "the namespace has {} GPUs; {} more would pass the cap of {max}",
                    held.gpus, adds.gpus
                ),
            ));
        }
        let rate_caps = [
            ("hourlyRate", limits.hourly_rate),
            (
                "hourlyRateWithoutBudget",
                limits.hourly_rate_without_budget.filter(|_| !has_budget),
            ),
        ];
        for (field, cap) in rate_caps {
            if adds.hourly_rate > 0.0
                && let Some(max) = cap
                && held.hourly_rate + adds.hourly_rate > max + RATE_SLACK
            {
                return Some(violation(
                    field,
                    format!(
                        "the namespace's resources cost {:.4} {currency}/h; {:.4} {currency}/h more would pass the cap of {max:.4} {currency}/h",
                        held.hourly_rate,
                        adds.hourly_rate,
                        currency = limits.currency
                    ),
                ));
            }
        }
        None
    }

    /// Whether the policy caps anything a create of `adds` counts toward.
    pub fn counts(&self, adds: Held) -> bool {
        self.spec.namespace_limits.as_ref().is_some_and(|limits| {
            (adds.machines > 0 && limits.machines.is_some())
                || (adds.gpus > 0 && limits.gpus.is_some())
                || (adds.hourly_rate > 0.0
                    && (limits.hourly_rate.is_some()
                        || limits.hourly_rate_without_budget.is_some()))
        })
    }
}

/// A duration as kubectl writes it, to the second (`72h0m0s`).
fn show_duration(duration: SignedDuration) -> String {
    let seconds = duration.as_secs();
    format!(
        "{}h{}m{}s",
        seconds / 3600,
        (seconds % 3600) / 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: serde_json::Value) -> GpuPolicy {
        let mut spec = spec;
        spec["namespaceSelector"] = serde_json::json!({});
        GpuPolicy::new("research", serde_json::from_value(spec).unwrap())
    }

    fn machine(gpu_type: &str, count: i32, region: &str, tier: Tier) -> Subject {
        Subject {
            gpu_types: vec![("spec.gpuType".into(), gpu_type.into())],
            regions: vec![("spec.region".into(), region.into())],
            gpu_counts: vec![("spec.gpuCount".into(), count)],
            tier,
            gpus: count,
            expires_after: None,
        }
    }

    #[test]
    fn a_machine_is_judged_field_by_field() {
        let strict = policy(serde_json::json!({
            "allowedGpuTypes": ["L40S", "A100-80G"],
            "allowedRegions": ["us-east-1"],
            "allowedTiers": ["Advanced"],
            "maxGpusPerMachine": 2,
            "maxLifetime": "72h",
        }));
        let open = policy(serde_json::json!({}));
        let ok = machine("L40S", 2, "us-east-1", Tier::Advanced);
        let long_lived = Subject {
            expires_after: Some(Ok(SignedDuration::from_hours(73))),
            ..ok.clone()
        };
        let short_lived = Subject {
            expires_after: Some(Ok(SignedDuration::from_hours(72))),
            ..ok.clone()
        };
        let placed = Subject {
            gpu_types: vec![
                (
                    "spec.placement.alternatives[0].gpuTypes[0]".into(),
                    "L40S".into(),
                ),
                (
                    "spec.placement.alternatives[1].gpuTypes[0]".into(),
                    "H100-80G".into(),
                ),
            ],
            ..ok.clone()
        };
        // (policy, subject, the field at fault, words of the message)
        let table: [(&GpuPolicy, Subject, Option<&str>, &str); 9] = [
            (&strict, ok.clone(), None, ""),
            (
                &open,
                machine("H100-80G", 8, "eu-west-1", Tier::Legacy),
                None,
                "",
            ),
            (
                &strict,
                machine("H100-80G", 1, "us-east-1", Tier::Advanced),
                Some("spec.gpuType"),
                "allowedGpuTypes",
            ),
            (
                &strict,
                machine("L40S", 1, "eu-west-1", Tier::Advanced),
                Some("spec.region"),
                "allowedRegions",
            ),
            (
                &strict,
                machine("L40S", 1, "us-east-1", Tier::Legacy),
                Some("spec.tier"),
                "allowedTiers",
            ),
            (
                &strict,
                machine("L40S", 4, "us-east-1", Tier::Advanced),
                Some("spec.gpuCount"),
                "maxGpusPerMachine 2",
            ),
            (
                &strict,
                long_lived,
                Some("spec.lifetime"),
                "longer than maxLifetime 72h",
            ),
            (&strict, short_lived, None, ""),
            (
                &strict,
                placed,
                Some("spec.placement.alternatives[1].gpuTypes[0]"),
                "H100-80G",
            ),
        ];
        for (policy, subject, field, words) in table {
            let violation = policy.judge(&subject);
            assert_eq!(
                violation.as_ref().map(|v| v.field.as_str()),
                field,
                "{subject:?}: {violation:?}"
            );
            if let Some(violation) = violation {
                assert!(violation.message.contains(words), "{violation}");
                assert!(
                    violation.to_string().starts_with("GpuPolicy research: "),
                    "{violation}"
                );
            }
        }
    }

    #[test]
    fn each_namespace_cap_counts_on_its_own() {
        let capped = policy(serde_json::json!({"namespaceLimits": {
            "machines": 3, "gpus": 8, "hourlyRate": 10.0, "hourlyRateWithoutBudget": 5.0}}));
        let held = |machines, gpus, hourly_rate| Held {
            machines,
            gpus,
            hourly_rate,
        };
        let machine = |gpus, rate| held(1, gpus, rate);
        let volume = held(0, 0, 0.5);
        // (held, adds, has a Budget, the cap passed)
        let table = [
            (held(0, 0, 0.0), machine(8, 4.0), false, None),
            (held(1, 4, 2.0), machine(4, 2.0), false, None),
            (
                held(1, 4, 2.0),
                machine(5, 2.0),
                false,
                Some("spec.namespaceLimits.gpus"),
            ),
            (
                held(3, 3, 1.0),
                machine(1, 0.5),
                false,
                Some("spec.namespaceLimits.machines"),
            ),
            (held(3, 3, 1.0), volume, false, None),
            (
                held(1, 1, 4.0),
                machine(1, 2.0),
                false,
                Some("spec.namespaceLimits.hourlyRateWithoutBudget"),
            ),
            (held(1, 1, 4.0), machine(1, 2.0), true, None),
            (
                held(1, 1, 9.0),
                machine(1, 2.0),
                true,
                Some("spec.namespaceLimits.hourlyRate"),
            ),
            // A sum of prices written with a few decimals that fits exactly.
            (held(0, 0, 0.1 + 0.2), held(0, 0, 4.7), false, None),
        ];
        for (held, adds, has_budget, field) in table {
            let violation = capped.judge_count(held, adds, has_budget);
            assert_eq!(
                violation.as_ref().map(|v| v.field.as_str()),
                field,
                "{held:?} + {adds:?}: {violation:?}"
            );
        }
        let uncapped = policy(serde_json::json!({"allowedRegions": ["us-east-1"]}));
        assert_eq!(
            uncapped.judge_count(held(100, 800, 1e6), machine(8, 30.0), false),
            None
        );
        assert!(!uncapped.counts(machine(8, 30.0)));
        assert_eq!(uncapped.judge_replicas(10_000), None);
        let pools = policy(serde_json::json!({"maxPoolReplicas": 10}));
        assert_eq!(pools.judge_replicas(10), None);
        let refused = pools.judge_replicas(11).unwrap();
        assert_eq!(refused.field, "spec.replicas");
        assert!(refused.message.contains("maxPoolReplicas 10"), "{refused}");
        assert!(capped.counts(volume));
    }
}
