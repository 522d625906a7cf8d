//! Reconcile errors. Each carries a category that decides both the condition the object shows
//! and how soon it is retried, so the two can never disagree.

use crate::flow::conditions::{Outcome, reason};
use gpucloud_cloud::Error as CloudError;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cloud API: {0}")]
    Cloud(#[from] CloudError),

    #[error("Kubernetes API: {}", KubeMessage(.0))]
    Kube(#[from] kube::Error),

    /// No list of the kind could be had from the cloud.
    #[error("cloud unavailable: {0}")]
    CloudUnavailable(String),

    /// The cloud refuses the API key.
    #[error("the cloud refused the API key: {0}")]
    CredentialsInvalid(String),

    /// The credentials Secret, or its key, does not exist.
    #[error("{0}")]
    CredentialsMissing(String),

    /// The spec asks for something the controller can tell is impossible without the cloud.
    #[error("{0}")]
    InvalidSpec(String),

    /// A cloud resource named by id belongs to another object, or may not be adopted here
    /// (`adoption.rs`). `reason` is `AlreadyOwned` or `AdoptionNotAllowed`.
    #[error("{message}")]
    AdoptionRefused {
        reason: &'static str,
        message: String,
    },

    /// The object's create waits, through its references, for its own create.
    #[error("{0}")]
    ReferenceCycle(String),

    /// A referenced object does not exist yet or is not ready.
    #[error("waiting for {kind} {name:?}: {detail}")]
    WaitingFor {
        kind: &'static str,
        name: String,
        detail: String,
    },

    /// The account's balance is below the configured floor.
    #[error(
        "balance {balance:.2} {currency} is below the configured floor {floor:.2}: nothing is created; the balance is read again every half resync interval, and the create goes ahead once it is back at the floor"
    )]
    InsufficientCredit {
        balance: f64,
        floor: f64,
        currency: String,
    },

    /// The instance would cost more per hour than `spec.maxHourlyRate` allows.
    #[error("hourly rate {rate:.4} exceeds maxHourlyRate {limit:.4}")]
    PriceAboveLimit { rate: f64, limit: f64 },

    /// No placement the spec allows has GPUs in stock (`placement.rs`): the object waits for
    /// the account's catalog to show some of `wants` (`Context::wait_in_account`).
    #[error("{message}")]
    NoCapacity {
        message: String,
        wants: Vec<crate::accounts::catalog::Want>,
    },

    /// A create a `Budget` of the namespace refuses: it would pass its hourly limit, or the
    /// period's spend is used up.
    #[error("Budget {budget}: {message}")]
    BudgetExceeded { budget: String, message: String },

    /// A create a `GpuPolicy` governing the namespace refuses (`gpu_policy.rs`): the machine
    /// breaks a limit of its own (`PolicyViolation`, until the spec or the policy changes), or
    /// the namespace is at a cap (`PolicyLimit`: it waits for room). The message names the
    /// policy and the field.
    #[error("{message}")]
    PolicyRefused {
        reason: &'static str,
        message: String,
    },

    /// Work under way that the controller must come back to (a deletion the cloud has not
    /// finished). An error, not a success, so that the finalizer stays until it is done.
    #[error("{message}")]
    InProgress {
        reason: &'static str,
        message: String,
    },

    /// Work under way for less than one transition interval (a deletion the cloud has just
    /// accepted). Like `InProgress` an error, so the finalizer stays, but not reported: it
    /// ends before a person would read it, and its end is told.
    #[error("{message}")]
    Passing {
        reason: &'static str,
        message: String,
    },

    /// Work that cannot go on until a person acts (a final snapshot the cloud cannot take).
    /// Unlike `InProgress`, it is reported as `Stalled`.
    #[error("{message}")]
    Blocked {
        reason: &'static str,
        message: String,
    },

    /// The object's status could not be encoded or decoded.
    #[error("status serialization: {0}")]
    Serialization(#[from] serde_json::Error),

    #[error("{}", finalizer_message(.0))]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

/// The reconcile's own error, without the finalizer helper's wrapping, which would only add
/// noise to conditions and events.
fn finalizer_message(error: &kube::runtime::finalizer::Error<Error>) -> String {
    use kube::runtime::finalizer::Error as Finalizer;
    match error {
        Finalizer::ApplyFailed(e) | Finalizer::CleanupFailed(e) => e.to_string(),
        Finalizer::AddFinalizer(e) => format!("adding the finalizer: {}", KubeMessage(e)),
        Finalizer::RemoveFinalizer(e) => format!("removing the finalizer: {}", KubeMessage(e)),
        other => format!("finalizer: {other}"),
    }
}

/// A Kubernetes API error as a person reads it in a condition, an Event or a log line: the
/// server's message, code and reason. kube's own text appends a Debug dump of the whole
/// `Status`.
pub struct KubeMessage<'a>(pub &'a kube::Error);

impl std::fmt::Display for KubeMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            kube::Error::Api(status) => {
                write!(f, "{} ({} {})", status.message, status.code, status.reason)
            }
            other => write!(f, "{other}"),
        }
    }
}

/// How the controller treats a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// Will likely pass if tried again: back off and retry.
    Transient,
    /// Will fail until a person changes something: report `Stalled`, wait for a change.
    Terminal,
    /// Waiting on something that will happen by itself: report `Reconciling`, look again soon.
    Waiting,
}

/// The longest an object waits after a failure without a change waking it, by kind of wait
/// ([`Error::next_look`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backstops {
    /// A wait a watch or the account ends (a reference, stock): the resync interval.
    pub resync: Duration,
    /// Other waits (a GpuPolicy's cap): looked at again this often.
    pub waits: Duration,
    /// A failure only a person ends: the terminal recheck.
    pub recheck: Duration,
}

/// A duration as a condition's message says it: `5 minutes`, `30 s`, `200 ms`.
fn spoken(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        60 => "1 minute".to_string(),
        s if s >= 60 && s % 60 == 0 => format!("{} minutes", s / 60),
        s if s >= 1 => format!("{s} s"),
        _ => format!("{} ms", duration.as_millis()),
    }
}

/// Why the latest list failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFailure {
    /// The cloud refused the API key: no retry will help until the credentials change.
    pub unauthorized: bool,
    pub message: String,
}

/// Whether a failure says the cloud is not answering (server errors, timeouts, broken
/// connections), as opposed to refusing this request (4xx) or throttling it (429).
pub fn is_outage(error: &CloudError) -> bool {
    error.class() == gpucloud_cloud::ErrorClass::Transient
        && !matches!(error, CloudError::RateLimited { .. })
}

impl From<ListFailure> for Error {
    fn from(failure: ListFailure) -> Self {
        if failure.unauthorized {
            Error::CredentialsInvalid(failure.message)
        } else {
            Error::CloudUnavailable(failure.message)
        }
    }
}

/// A 409 answered to a create call: the cloud refused to create as things stand (e.g. not
/// enough GPUs in stock in the region). A duplicate name is left out: it means an earlier
/// create of ours happened, and the list will show it to be adopted.
fn is_create_conflict(error: &CloudError) -> bool {
    matches!(error, CloudError::Conflict { operation, code, .. }
        if operation.name().starts_with("Create")
            && code != gpucloud_cloud::model::error_code::DUPLICATE_NAME)
}

impl Error {
    pub fn category(&self) -> Category {
        match self.innermost() {
            Error::Cloud(CloudError::Unauthorized { .. }) => Category::Terminal,
            // A create refused as things stand (no stock in the region): asking again at once
            // gets the same answer, so it waits for a change or the periodic recheck.
            Error::Cloud(e) if is_create_conflict(e) => Category::Terminal,
            Error::Cloud(e) => match e.class() {
                gpucloud_cloud::ErrorClass::Transient => Category::Transient,
                gpucloud_cloud::ErrorClass::Terminal => Category::Terminal,
                // 404 and 409 answers that reach here were not expected by the reconciler:
                // the cloud moved under it, so look again after a backoff.
                gpucloud_cloud::ErrorClass::Semantic => Category::Transient,
            },
            // Conflicts and server errors from the API server pass with a fresh read.
            Error::Kube(_) | Error::CloudUnavailable(_) => Category::Transient,
            Error::CredentialsMissing(_)
            | Error::CredentialsInvalid(_)
            | Error::InvalidSpec(_)
            | Error::ReferenceCycle(_)
            | Error::AdoptionRefused { .. }
            | Error::Blocked { .. }
            | Error::InsufficientCredit { .. }
            | Error::PriceAboveLimit { .. }
            | Error::BudgetExceeded { .. }
            | Error::Serialization(_) => Category::Terminal,
            Error::PolicyRefused { reason, .. } if *reason == reason::POLICY_VIOLATION => {
                Category::Terminal
            }
            Error::PolicyRefused { .. } => Category::Waiting,
            Error::WaitingFor { .. }
            | Error::InProgress { .. }
            | Error::Passing { .. }
            | Error::NoCapacity { .. } => Category::Waiting,
            Error::Finalizer(_) => Category::Transient,
        }
    }

    /// The reconcile's own error inside a finalizer's (its apply or cleanup failed), else the
    /// error itself: every classification below looks through the finalizer.
    fn innermost(&self) -> &Error {
        match self {
            Error::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.innermost(),
                _ => self,
            },
            _ => self,
        }
    }

    /// Whether the failure says the account's cloud is not answering: the object then waits
    /// for the account to recover instead of backing off on its own.
    pub fn is_outage(&self) -> bool {
        match self.innermost() {
            Error::CloudUnavailable(_) => true,
            Error::Cloud(e) => is_outage(e),
            _ => false,
        }
    }

    /// The condition reason for this failure; one of `conditions::reason`.
    pub fn reason(&self) -> &'static str {
        match self.innermost() {
            Error::Cloud(e) if is_create_conflict(e) => reason::CREATE_REFUSED,
            Error::Cloud(e) => match e {
                CloudError::Unauthorized { .. } => reason::CREDENTIALS_INVALID,
                CloudError::InsufficientCredit { .. } => reason::INSUFFICIENT_CREDIT,
                CloudError::Forbidden { code, .. }
                    if code == gpucloud_cloud::model::error_code::TIER_NOT_SUPPORTED =>
                {
                    reason::TIER_NOT_SUPPORTED
                }
                CloudError::BadRequest { .. } | CloudError::Forbidden { .. } => {
                    reason::INVALID_SPEC
                }
                CloudError::RateLimited { .. } => reason::RATE_LIMITED,
                _ => reason::CLOUD_UNAVAILABLE,
            },
            Error::Kube(_) => reason::UPDATING,
            Error::CloudUnavailable(_) => reason::CLOUD_UNAVAILABLE,
            Error::CredentialsMissing(_) => reason::CREDENTIALS_MISSING,
            Error::CredentialsInvalid(_) => reason::CREDENTIALS_INVALID,
            Error::InvalidSpec(_) | Error::Serialization(_) => reason::INVALID_SPEC,
            Error::WaitingFor { .. } => reason::WAITING_FOR_REFERENCE,
            Error::ReferenceCycle(_) => reason::REFERENCE_CYCLE,
            Error::InProgress { reason, .. }
            | Error::Passing { reason, .. }
            | Error::AdoptionRefused { reason, .. }
            | Error::Blocked { reason, .. } => reason,
            Error::InsufficientCredit { .. } => reason::INSUFFICIENT_CREDIT,
            Error::PriceAboveLimit { .. } => reason::PRICE_ABOVE_LIMIT,
            Error::BudgetExceeded { .. } => reason::BUDGET_EXCEEDED,
            Error::PolicyRefused { reason, .. } => reason,
            Error::NoCapacity { .. } => reason::NO_CAPACITY,
            Error::Finalizer(_) => reason::UPDATING,
        }
    }

    /// The condition this failure puts on the object.
    pub fn outcome(&self) -> Outcome {
        let message = self.to_string();
        match self.category() {
            Category::Terminal => Outcome::stalled(self.reason(), message),
            Category::Transient | Category::Waiting => Outcome::progressing(self.reason(), message),
        }
    }

    /// Whether the cloud refused a call before acting on it (400, 401, 402, 403): a create so
    /// refused certainly made nothing.
    pub fn is_definite_refusal(&self) -> bool {
        matches!(self, Error::Cloud(e) if e.is_terminal())
    }

    /// A write refused because the object changed since it was read (409 from the API server):
    /// the next reconcile reads it afresh, so this is no sign of trouble to back off from.
    pub fn is_stale_write(&self) -> bool {
        match self.innermost() {
            Error::Kube(kube::Error::Api(status)) => status.code == 409,
            Error::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::AddFinalizer(kube::Error::Api(status))
                | kube::runtime::finalizer::Error::RemoveFinalizer(kube::Error::Api(status)) => {
                    status.code == 409
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// Whether the reconcile waits for a referenced object: the watch on that object's kind
    /// wakes the referrer, so no quick requeue is needed.
    pub fn is_waiting_for_reference(&self) -> bool {
        matches!(self.innermost(), Error::WaitingFor { .. })
    }

    /// The GPUs that would end a `NoCapacity` wait.
    pub fn capacity_wants(&self) -> Option<&[crate::accounts::catalog::Want]> {
        match self.innermost() {
            Error::NoCapacity { wants, .. } => Some(wants),
            _ => None,
        }
    }

    /// The balance floor a create was refused under (`--budget-floor`): the object waits for
    /// a balance at or above it.
    pub fn credit_floor(&self) -> Option<f64> {
        match self.innermost() {
            Error::InsufficientCredit { floor, .. } => Some(*floor),
            _ => None,
        }
    }

    /// Whether the cloud refused a create for want of GPUs in stock: nothing was created.
    pub fn is_out_of_stock(&self) -> bool {
        matches!(self.innermost(), Error::Cloud(e) if e.is_out_of_stock())
    }

    /// Whether the reconcile stopped only because work it started is still under way (a
    /// deletion waiting for the cloud to finish).
    pub fn is_in_progress(&self) -> bool {
        matches!(self.innermost(), Error::InProgress { .. })
    }

    /// Work under way too briefly to report (`Passing`).
    pub fn is_passing(&self) -> bool {
        matches!(self.innermost(), Error::Passing { .. })
    }

    /// When an object standing at this failure is looked at again with no one touching it,
    /// as its condition tells it: the change that wakes it, and the longest it waits without
    /// one (the backstop `error_policy` sets: the resync for a wait woken by a watch or by
    /// the account, `waits` for the other waits, `recheck` for a failure only a person ends).
    /// `None` for work under way and passing failures (retried after a short backoff), and
    /// where the message already says (a balance below the floor, adoption not allowed, a
    /// refused key: `named_credentials`).
    pub fn next_look(&self, backstops: Backstops) -> Option<String> {
        let Backstops {
            resync,
            waits,
            recheck,
        } = backstops;
        let (wakes, within) = match self.innermost() {
            Error::WaitingFor { .. } => ("when it changes", resync),
            Error::NoCapacity { .. } => ("when the account's catalog shows stock", resync),
            Error::BudgetExceeded { .. } => ("when a Budget of the namespace changes", recheck),
            Error::PolicyRefused { reason, .. } if *reason == reason::POLICY_LIMIT => (
                "when a GpuPolicy of the namespace changes or has room",
                waits,
            ),
            Error::PolicyRefused { .. } => (
                "when the spec or a GpuPolicy of the namespace changes",
                recheck,
            ),
            Error::CredentialsMissing(_) => ("when the Secret or the spec changes", recheck),
            Error::PriceAboveLimit { .. }
            | Error::InvalidSpec(_)
            | Error::ReferenceCycle(_)
            | Error::Serialization(_) => ("when the spec changes", recheck),
            Error::AdoptionRefused { reason, .. } if *reason == reason::ADOPTION_NOT_ALLOWED => {
                return None;
            }
            Error::AdoptionRefused { .. } | Error::Blocked { .. } => {
                ("when the object changes", recheck)
            }
            Error::Cloud(e) if self.category() == Category::Terminal => match e {
                CloudError::Unauthorized { .. } | CloudError::InsufficientCredit { .. } => {
                    return None;
                }
                _ => ("when the spec changes", recheck),
            },
            _ => return None,
        };
        Some(format!(
            "looked at again {wakes}, or in {} at the latest",
            spoken(within)
        ))
    }

    /// The server's requested wait, when it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.innermost() {
            Error::Cloud(e) => e.retry_after(),
            _ => None,
        }
    }

    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self.innermost() {
            Error::Cloud(e) => e.metric_label(),
            Error::Kube(_) => "kube",
            Error::CloudUnavailable(_) => "cloud_unavailable",
            Error::CredentialsMissing(_) => "credentials_missing",
            Error::CredentialsInvalid(_) => "credentials_invalid",
            Error::InvalidSpec(_) => "invalid_spec",
            Error::ReferenceCycle(_) => "reference_cycle",
            Error::AdoptionRefused { .. } => "adoption_refused",
            Error::Blocked { .. } => "blocked",
            Error::WaitingFor { .. } | Error::InProgress { .. } | Error::Passing { .. } => {
                "waiting"
            }
            Error::InsufficientCredit { .. } => "insufficient_credit",
            Error::PriceAboveLimit { .. } => "price_above_limit",
            Error::BudgetExceeded { .. } => "budget_exceeded",
            Error::PolicyRefused { .. } => "policy_refused",
            Error::NoCapacity { .. } => "no_capacity",
            Error::Serialization(_) => "serialization",
            Error::Finalizer(_) => "finalizer",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_cloud::Operation;

    /// Conditions and Events carry the API server's message, never a Debug dump of it.
    #[test]
    fn kubernetes_errors_read_as_the_server_wrote_them() {
        let status = || {
            kube::Error::Api(Box::new(kube::core::Status {
                message: "Operation cannot be fulfilled on gpuinstances \"a\": the object has been modified".into(),
                reason: "Conflict".into(),
                code: 409,
                ..kube::core::Status::default()
            }))
        };
        use kube::runtime::finalizer::Error as Finalizer;
        for error in [
            Error::Kube(status()),
            Error::Finalizer(Box::new(Finalizer::AddFinalizer(status()))),
            Error::Finalizer(Box::new(Finalizer::RemoveFinalizer(status()))),
            Error::Finalizer(Box::new(Finalizer::ApplyFailed(Error::Kube(status())))),
        ] {
            let text = error.to_string();
            assert!(
                !text.contains("Status {") && !text.contains("ApiError"),
                "{text}"
            );
            assert!(
                text.contains("the object has been modified (409 Conflict)"),
                "{text}"
            );
        }
    }

    /// Every failure a person or another object ends says in its condition when it is looked
    /// at again: what wakes it, and the longest it waits without that.
    #[test]
    fn a_waiting_or_stalled_object_says_when_it_is_looked_at_again() {
        let backstops = Backstops {
            resync: Duration::from_secs(60),
            waits: Duration::from_secs(2),
            recheck: Duration::from_secs(300),
        };
        let waiting = |detail: &str| Error::WaitingFor {
            kind: "Image",
            name: "base".into(),
            detail: detail.into(),
        };
        let policy = |reason: &'static str| Error::PolicyRefused {
            reason,
            message: "GpuPolicy p: spec.maxGpuCount is 1".into(),
        };
        let table: Vec<(Error, Option<&str>)> = vec![
            (
                waiting("it does not exist"),
                Some("looked at again when it changes, or in 1 minute at the latest"),
            ),
            (
                Error::NoCapacity {
                    message: "no placement has GPUs in stock".into(),
                    wants: Vec::new(),
                },
                Some("when the account's catalog shows stock, or in 1 minute"),
            ),
            (
                Error::BudgetExceeded {
                    budget: "team".into(),
                    message: "spent".into(),
                },
                Some("when a Budget of the namespace changes, or in 5 minutes"),
            ),
            (
                policy(reason::POLICY_LIMIT),
                Some("changes or has room, or in 2 s at the latest"),
            ),
            (
                policy(reason::POLICY_VIOLATION),
                Some("when the spec or a GpuPolicy of the namespace changes, or in 5 minutes"),
            ),
            (
                Error::PriceAboveLimit {
                    rate: 2.99,
                    limit: 1.0,
                },
                Some("when the spec changes, or in 5 minutes"),
            ),
            (
                Error::InvalidSpec("spec.gpuCount".into()),
                Some("when the spec changes"),
            ),
            (
                Error::CredentialsMissing("Secret team-a/key not found".into()),
                Some("when the Secret or the spec changes"),
            ),
            // Their messages say it already.
            (
                Error::InsufficientCredit {
                    balance: 0.0,
                    floor: 5.0,
                    currency: "USD".into(),
                },
                None,
            ),
            (Error::CredentialsInvalid("refused".into()), None),
            (
                Error::AdoptionRefused {
                    reason: reason::ADOPTION_NOT_ALLOWED,
                    message: "the label is looked at again every resync interval".into(),
                },
                None,
            ),
            // Work under way, and failures retried after a short backoff.
            (
                Error::InProgress {
                    reason: reason::DELETING,
                    message: "deleting".into(),
                },
                None,
            ),
            (Error::CloudUnavailable("timed out".into()), None),
        ];
        for (error, said) in table {
            let look = error.next_look(backstops);
            match said {
                Some(part) => {
                    let look = look.unwrap_or_else(|| panic!("{error:?}: nothing said"));
                    assert!(look.contains(part), "{error:?}: {look}");
                }
                None => assert_eq!(look, None, "{error:?}"),
            }
        }
    }

    #[test]
    fn durations_are_spoken_as_people_read_them() {
        for (duration, spoken_as) in [
            (Duration::from_secs(300), "5 minutes"),
            (Duration::from_secs(60), "1 minute"),
            (Duration::from_secs(90), "90 s"),
            (Duration::from_millis(200), "200 ms"),
        ] {
            assert_eq!(spoken(duration), spoken_as);
        }
    }

    #[test]
    fn categories_drive_conditions() {
        let unauthorized = Error::Cloud(CloudError::Unauthorized {
            operation: Operation::ListInstances,
            code: "INVALID_API_KEY".into(),
            message: "bad key".into(),
        });
        assert_eq!(unauthorized.category(), Category::Terminal);
        assert!(
            matches!(unauthorized.outcome(), Outcome::Stalled { reason, .. } if reason == "CredentialsInvalid")
        );

        let throttled = Error::Cloud(CloudError::RateLimited {
            operation: Operation::ListInstances,
            retry_after: Some(Duration::from_secs(3)),
            message: "slow down".into(),
        });
        assert_eq!(throttled.category(), Category::Transient);
        assert_eq!(throttled.retry_after(), Some(Duration::from_secs(3)));
        assert!(
            matches!(throttled.outcome(), Outcome::Progressing { reason, .. } if reason == "RateLimited")
        );

        let wrong_tier = Error::Cloud(CloudError::Forbidden {
            operation: Operation::RestoreHibernatedInstance,
            code: "TIER_NOT_SUPPORTED".into(),
            message: "legacy only".into(),
        });
        assert_eq!(wrong_tier.reason(), "TierNotSupported");
        assert_eq!(wrong_tier.category(), Category::Terminal);

        let waiting = Error::WaitingFor {
            kind: "Snapshot",
            name: "s".into(),
            detail: "not Ready".into(),
        };
        assert!(
            matches!(waiting.outcome(), Outcome::Progressing { reason, .. } if reason == "WaitingForReference")
        );
    }
}
