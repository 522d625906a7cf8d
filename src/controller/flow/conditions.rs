//! kstatus conditions: the one place that decides what `Ready`, `Reconciling` and `Stalled`
//! say for an outcome, so every kind reports the same way and Argo CD's and Flux's stock
//! health checks read it correctly.
//!
//! kstatus treats `Reconciling` and `Stalled` as "abnormal-true": present only while true.
//! `Ready` is always present once the operator has looked at the object. `Paused` is present
//! while the object is paused, and says how to resume; kstatus ignores it.

use gpucloud_api::PAUSED_ANNOTATION;
use gpucloud_api::condition_type::{PAUSED, READY, RECONCILING, STALLED};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Condition reasons. One list for every kind, so the reasons in events, conditions and
/// docs agree. A new reason joins `ALL` (a condition can carry it: README's troubleshooting
/// table must explain it) or `EVENTS_ONLY`; the tests below hold both lists to the constants
/// and to README.
pub mod reason {
    pub const AVAILABLE: &str = "Available";
    pub const CREATING: &str = "Creating";
    pub const PROVISIONING: &str = "Provisioning";
    pub const UPDATING: &str = "Updating";
    pub const DELETING: &str = "Deleting";
    pub const DEPENDENTS_EXIST: &str = "DependentsExist";
    /// A GpuInstance deleted under `deletionPolicy: Snapshot` waits for its final snapshot.
    pub const FINAL_SNAPSHOT: &str = "FinalSnapshot";
    /// The final snapshot cannot be taken until a person acts.
    pub const FINAL_SNAPSHOT_BLOCKED: &str = "FinalSnapshotBlocked";
    pub const WAITING_FOR_CLOUD_LIST: &str = "WaitingForCloudList";
    pub const WAITING_FOR_REFERENCE: &str = "WaitingForReference";
    pub const WAITING_FOR_INSTANCE: &str = "WaitingForInstance";
    pub const REFERENCE_CYCLE: &str = "ReferenceCycle";
    pub const PAUSED: &str = "Paused";
    pub const CREDENTIALS_MISSING: &str = "CredentialsMissing";
    pub const CREDENTIALS_INVALID: &str = "CredentialsInvalid";
    pub const INSUFFICIENT_CREDIT: &str = "InsufficientCredit";
    pub const PRICE_ABOVE_LIMIT: &str = "PriceAboveLimit";
    /// A create refused because a `Budget` of the namespace would be passed; on a Budget
    /// (`Ready=False`, `Stalled=True`), its count is over a limit or it keeps machines off.
    pub const BUDGET_EXCEEDED: &str = "BudgetExceeded";
    /// A Budget within its limits whose spend, projected at the counted rate to the end of
    /// its period, passes `maxSpend` (`Ready=True`, and one Warning Event per period).
    pub const PROJECTED_OVER_BUDGET: &str = "ProjectedOverBudget";
    /// A create refused by a `GpuPolicy`: the machine breaks one of its limits.
    pub const POLICY_VIOLATION: &str = "PolicyViolation";
    /// A create held by a `GpuPolicy`: the namespace is at one of its caps; it waits for room.
    pub const POLICY_LIMIT: &str = "PolicyLimit";
    /// A machine that exists outside a `GpuPolicy` governing its namespace (made before it, or
    /// adopted): a Warning Event, once; the machine is neither stopped nor deleted.
    pub const OUTSIDE_POLICY: &str = "OutsidePolicy";
    /// A Budget counting in a currency the cloud account does not bill in.
    pub const CURRENCY_MISMATCH: &str = "CurrencyMismatch";
    /// A Budget whose count is within its limit.
    pub const WITHIN_BUDGET: &str = "WithinBudget";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The machine is not the one the spec describes (hardware, region or tier of an adopted
    /// machine; a startup script changed in its ConfigMap after the create): the fields are
    /// immutable, and the cloud runs a startup script at first boot only.
    pub const SPEC_MISMATCH: &str = "SpecMismatch";
    /// The spec asks for what an ObserveOnly object never does in the cloud.
    pub const NOT_APPLIED: &str = "NotApplied";
    pub const CREATE_REFUSED: &str = "CreateRefused";
    /// No placement a GpuInstance allows has GPUs in stock: it waits for the catalog to show
    /// some (and, after a refusal of the cloud, tries the next placement).
    pub const NO_CAPACITY: &str = "NoCapacity";
    pub const TIER_NOT_SUPPORTED: &str = "TierNotSupported";
    pub const EXTERNAL_DELETED: &str = "ExternalDeleted";
    pub const ACCOUNT_CHANGED: &str = "AccountChanged";
    /// Event reasons of lifetimes: the warning before the end, the end, and a deletion at
    /// the end that the API server refused (deletion protection).
    pub const EXPIRES_SOON: &str = "ExpiresSoon";
    pub const EXPIRED: &str = "Expired";
    pub const EXPIRY_REFUSED: &str = "ExpiryRefused";
    pub const SOURCE_DELETED: &str = "SourceDeleted";
    pub const NOT_FOUND_IN_CLOUD: &str = "NotFoundInCloud";
    pub const ALREADY_OWNED: &str = "AlreadyOwned";
    /// Two objects claim one cloud resource: the one whose record is not provably its own
    /// does nothing to it until one lets go.
    pub const CLAIM_CONFLICT: &str = "ClaimConflict";
    /// The status records a resource that was neither created for the object nor is adopted
    /// by it: nothing is done to it.
    pub const FOREIGN_RECORD: &str = "ForeignRecord";
    pub const ADOPTION_NOT_ALLOWED: &str = "AdoptionNotAllowed";
    pub const RATE_LIMITED: &str = "RateLimited";
    pub const CLOUD_UNAVAILABLE: &str = "CloudUnavailable";
    /// A GpuInstancePool making or deleting machines to reach `replicas`.
    pub const SCALING: &str = "Scaling";
    /// A GpuInstancePool replacing machines made from an older template.
    pub const REPLACING: &str = "Replacing";
    /// A GpuInstancePool with more machines than `replicas` that deletion protection keeps.
    pub const DELETION_PROTECTED: &str = "DeletionProtected";

    /// Every reason a condition can carry.
    pub const ALL: &[&str] = &[
        AVAILABLE,
        CREATING,
        PROVISIONING,
        UPDATING,
        DELETING,
        DEPENDENTS_EXIST,
        FINAL_SNAPSHOT,
        FINAL_SNAPSHOT_BLOCKED,
        WAITING_FOR_CLOUD_LIST,
        WAITING_FOR_REFERENCE,
        WAITING_FOR_INSTANCE,
        REFERENCE_CYCLE,
        PAUSED,
        CREDENTIALS_MISSING,
        CREDENTIALS_INVALID,
        INSUFFICIENT_CREDIT,
        PRICE_ABOVE_LIMIT,
        BUDGET_EXCEEDED,
        POLICY_VIOLATION,
        POLICY_LIMIT,
        CURRENCY_MISMATCH,
        WITHIN_BUDGET,
        PROJECTED_OVER_BUDGET,
        INVALID_SPEC,
        SPEC_MISMATCH,
        NOT_APPLIED,
        CREATE_REFUSED,
        NO_CAPACITY,
        TIER_NOT_SUPPORTED,
        EXTERNAL_DELETED,
        ACCOUNT_CHANGED,
        SOURCE_DELETED,
        NOT_FOUND_IN_CLOUD,
        ALREADY_OWNED,
        CLAIM_CONFLICT,
        FOREIGN_RECORD,
        ADOPTION_NOT_ALLOWED,
        RATE_LIMITED,
        CLOUD_UNAVAILABLE,
        SCALING,
        REPLACING,
        DELETION_PROTECTED,
    ];

    /// Reasons of Events only, never of a condition.
    pub const EVENTS_ONLY: &[&str] = &[EXPIRES_SOON, EXPIRED, EXPIRY_REFUSED, OUTSIDE_POLICY];
}

/// Where an object stands after a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The cloud matches the spec.
    Ready { reason: String, message: String },
    /// Work is under way and will finish without a person acting.
    Progressing { reason: String, message: String },
    /// Nothing will change until a person acts (fixes the spec, the credentials, the credit).
    Stalled { reason: String, message: String },
}

impl Outcome {
    /// `ready`, `progressing` or `stalled`: what a plan's table test compares.
    #[cfg(test)]
    pub(crate) fn standing(&self) -> &'static str {
        match self {
            Outcome::Ready { .. } => "ready",
            Outcome::Progressing { .. } => "progressing",
            Outcome::Stalled { .. } => "stalled",
        }
    }

    pub fn ready(reason: &str, message: impl Into<String>) -> Self {
        Outcome::Ready {
            reason: reason.to_string(),
            message: message.into(),
        }
    }

    pub fn progressing(reason: &str, message: impl Into<String>) -> Self {
        Outcome::Progressing {
            reason: reason.to_string(),
            message: message.into(),
        }
    }

    pub fn stalled(reason: &str, message: impl Into<String>) -> Self {
        Outcome::Stalled {
            reason: reason.to_string(),
            message: message.into(),
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            Outcome::Ready { reason, .. }
            | Outcome::Progressing { reason, .. }
            | Outcome::Stalled { reason, .. } => reason,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Outcome::Ready { message, .. }
            | Outcome::Progressing { message, .. }
            | Outcome::Stalled { message, .. } => message,
        }
    }

    /// The same outcome with `note` added to its message.
    pub fn noted(mut self, note: &str) -> Self {
        match &mut self {
            Outcome::Ready { message, .. }
            | Outcome::Progressing { message, .. }
            | Outcome::Stalled { message, .. } => {
                message.push_str("; ");
                message.push_str(note);
            }
        }
        self
    }
}

/// Rewrites `conditions` to describe `outcome` for `generation`. A condition whose status does
/// not change keeps its `lastTransitionTime`. Returns whether anything changed, so callers skip
/// status writes that would say nothing new.
pub fn apply(
    conditions: &mut Vec<Condition>,
    outcome: &Outcome,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let before = conditions.clone();
    let (ready, reconciling, stalled) = match outcome {
        Outcome::Ready { .. } => ("True", None, None),
        Outcome::Progressing { .. } => ("False", Some("True"), None),
        Outcome::Stalled { .. } => ("False", None, Some("True")),
    };
    set(conditions, READY, ready, outcome, generation, now);
    match reconciling {
        Some(status) => set(conditions, RECONCILING, status, outcome, generation, now),
        None => conditions.retain(|c| c.type_ != RECONCILING),
    }
    match stalled {
        Some(status) => set(conditions, STALLED, status, outcome, generation, now),
        None => conditions.retain(|c| c.type_ != STALLED),
    }
    // An outcome is what a reconcile found, so the object is not paused (any more).
    conditions.retain(|c| c.type_ != PAUSED);
    *conditions != before
}

/// Adds the `Paused` condition of a paused object, leaving the others as the last reconcile
/// wrote them: the operator does not look at the cloud while paused, so it has nothing new to
/// say about readiness. Returns whether anything changed.
pub fn pause(conditions: &mut Vec<Condition>, generation: Option<i64>, now: Timestamp) -> bool {
    let before = conditions.clone();
    let outcome = Outcome::stalled(
        reason::PAUSED,
        format!(
            "the operator leaves this object and its cloud resource alone while it carries \
             {PAUSED_ANNOTATION}: \"true\"; remove the annotation to resume"
        ),
    );
    set(conditions, PAUSED, "True", &outcome, generation, now);
    *conditions != before
}

fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    outcome: &Outcome,
    generation: Option<i64>,
    now: Timestamp,
) {
    let message = truncate(outcome.message(), MAX_MESSAGE_BYTES);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.status = status.to_string();
                existing.last_transition_time = Time(now);
            }
            existing.reason = outcome.reason().to_string();
            existing.message = message;
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: outcome.reason().to_string(),
            message,
            observed_generation: generation,
            last_transition_time: Time(now),
        }),
    }
}

/// The apiserver caps a condition message at 32 KiB; cloud error texts are capped well below.
const MAX_MESSAGE_BYTES: usize = 1024;

fn truncate(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The values of the `reason` module's string constants, read from this file.
    fn reason_constants() -> Vec<&'static str> {
        let source = include_str!("conditions.rs");
        let start = source.find("pub mod reason {").unwrap();
        let end = start + source[start..].find("\n}\n").unwrap();
        source[start..end]
            .lines()
            .filter_map(|line| line.trim().strip_prefix("pub const "))
            .filter_map(|rest| rest.split_once(": &str = \""))
            .map(|(_, value)| value.trim_end_matches("\";"))
            .collect()
    }

    #[test]
    fn every_reason_is_a_condition_reason_or_an_event_reason_once() {
        let constants = reason_constants();
        assert!(constants.len() > 30, "{constants:?}");
        let mut listed: Vec<&str> = reason::ALL.to_vec();
        listed.extend(reason::EVENTS_ONLY);
        let unique: BTreeSet<&str> = listed.iter().copied().collect();
        assert_eq!(
            unique.len(),
            listed.len(),
            "a reason listed twice: {listed:?}"
        );
        let declared: BTreeSet<&str> = constants.into_iter().collect();
        let unlisted: Vec<&&str> = declared.difference(&unique).collect();
        assert!(
            unlisted.is_empty(),
            "reasons in neither reason::ALL nor reason::EVENTS_ONLY: {unlisted:?}"
        );
    }

    /// README's "Troubleshooting by condition reason" explains every reason a condition can
    /// carry, and only those.
    #[test]
    fn the_readme_troubleshooting_table_lists_every_condition_reason() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let heading = "## Troubleshooting by condition reason";
        let section = &readme[readme.find(heading).expect(heading) + heading.len()..];
        let section = &section[..section.find("\n## ").unwrap_or(section.len())];
        let in_table: BTreeSet<&str> = section
            .lines()
            .filter_map(|line| line.strip_prefix('|')?.split('|').next())
            .flat_map(|first_column| first_column.split('`').skip(1).step_by(2))
            .collect();
        let set: BTreeSet<&str> = reason::ALL.iter().copied().collect();
        let missing: Vec<&&str> = set.difference(&in_table).collect();
        let unknown: Vec<&&str> = in_table.difference(&set).collect();
        assert!(
            missing.is_empty(),
            "README's troubleshooting table has no row for {missing:?}"
        );
        assert!(
            unknown.is_empty(),
            "README's troubleshooting table explains {unknown:?}, which no condition carries"
        );
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
        conditions.iter().find(|c| c.type_ == type_)
    }

    #[test]
    fn progressing_then_ready_follows_kstatus() {
        let mut conditions = Vec::new();
        assert!(apply(
            &mut conditions,
            &Outcome::progressing(reason::CREATING, "creating"),
            Some(1),
            at(10)
        ));
        assert_eq!(find(&conditions, READY).unwrap().status, "False");
        assert_eq!(find(&conditions, RECONCILING).unwrap().status, "True");
        assert!(find(&conditions, STALLED).is_none());

        assert!(apply(
            &mut conditions,
            &Outcome::ready(reason::AVAILABLE, "up"),
            Some(1),
            at(20)
        ));
        let ready = find(&conditions, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Available")
        );
        assert_eq!(ready.last_transition_time, Time(at(20)));
        assert!(
            find(&conditions, RECONCILING).is_none(),
            "abnormal-true conditions go when false"
        );
    }

    #[test]
    fn stalled_sets_ready_false_and_drops_reconciling() {
        let mut conditions = Vec::new();
        apply(
            &mut conditions,
            &Outcome::progressing(reason::CREATING, "x"),
            Some(2),
            at(1),
        );
        apply(
            &mut conditions,
            &Outcome::stalled(reason::INSUFFICIENT_CREDIT, "balance 0"),
            Some(2),
            at(2),
        );
        assert_eq!(find(&conditions, STALLED).unwrap().status, "True");
        assert_eq!(
            find(&conditions, READY).unwrap().reason,
            "InsufficientCredit"
        );
        assert!(find(&conditions, RECONCILING).is_none());
        assert!(conditions.iter().all(|c| c.observed_generation == Some(2)));
    }

    #[test]
    fn unchanged_status_keeps_transition_time_and_reports_no_change() {
        let mut conditions = Vec::new();
        let outcome = Outcome::ready(reason::AVAILABLE, "up");
        apply(&mut conditions, &outcome, Some(1), at(5));
        assert!(!apply(&mut conditions, &outcome, Some(1), at(50)));
        assert_eq!(
            find(&conditions, READY).unwrap().last_transition_time,
            Time(at(5))
        );
        // A new message alone is a change, but not a transition.
        assert!(apply(
            &mut conditions,
            &Outcome::ready(reason::AVAILABLE, "still up"),
            Some(1),
            at(60)
        ));
        assert_eq!(
            find(&conditions, READY).unwrap().last_transition_time,
            Time(at(5))
        );
    }

    #[test]
    fn a_paused_object_says_so_and_the_next_outcome_clears_it() {
        let mut conditions = Vec::new();
        apply(
            &mut conditions,
            &Outcome::ready("Available", "up"),
            Some(1),
            at(1),
        );
        assert!(pause(&mut conditions, Some(1), at(2)));
        let paused = find(&conditions, PAUSED).unwrap();
        assert_eq!(
            (paused.status.as_str(), paused.reason.as_str()),
            ("True", "Paused")
        );
        assert!(paused.message.contains("remove the annotation"));
        // Readiness is left as the last reconcile found it.
        assert_eq!(find(&conditions, READY).unwrap().status, "True");
        assert!(
            !pause(&mut conditions, Some(1), at(3)),
            "nothing new to write"
        );
        apply(
            &mut conditions,
            &Outcome::ready("Available", "up"),
            Some(1),
            at(4),
        );
        assert!(find(&conditions, PAUSED).is_none());
    }

    #[test]
    fn long_messages_are_truncated_on_a_char_boundary() {
        let long = "é".repeat(2000);
        let mut conditions = Vec::new();
        apply(
            &mut conditions,
            &Outcome::stalled(reason::INVALID_SPEC, long),
            None,
            at(1),
        );
        let message = &find(&conditions, STALLED).unwrap().message;
        assert!(message.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(message.ends_with('…'));
    }
}
