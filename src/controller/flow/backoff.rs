//! Per-object requeue after a failed reconcile. kube-runtime has no per-object failure backoff;
//! this is the one every kind uses: full-jitter exponential growth per object (the policy of
//! `gpucloud_cloud::Backoff`, shared with the client's own retries), never shorter than the
//! server's `Retry-After`, reset by the object's next success. One object's failures never delay
//! another's.

use crate::flow::error::{Backstops, Category, Error};
use crate::lock;
use gpucloud_cloud::Backoff;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

/// How long to wait before reconciling an object again after a failure.
#[derive(Debug)]
pub struct RequeuePolicy {
    /// Transient failures: from about a second up to a few minutes.
    transient: Backoff,
    /// Terminal failures are looked at again only this rarely (a spec, Secret or balance change
    /// wakes the object sooner through its watch).
    terminal_recheck: Duration,
    /// Waiting on a reference or on the cloud: a steady, short poll.
    waiting: Duration,
    failures: Mutex<HashMap<String, u32>>,
    /// Objects whose last failure could not be put on their status: a terminal one is then
    /// retried like a transient one, since nothing else (status writes do not wake an object)
    /// would show the reason before the terminal recheck.
    unreported: Mutex<HashSet<String>>,
}

impl Default for RequeuePolicy {
    fn default() -> Self {
        RequeuePolicy::new(
            Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            Duration::from_secs(300),
            Duration::from_secs(5),
        )
    }
}

impl RequeuePolicy {
    pub fn new(transient: Backoff, terminal_recheck: Duration, waiting: Duration) -> Self {
        RequeuePolicy {
            transient,
            terminal_recheck,
            waiting,
            failures: Mutex::new(HashMap::new()),
            unreported: Mutex::new(HashSet::new()),
        }
    }

    /// The longest waits after a failure without a change, as conditions tell them.
    pub fn backstops(&self, resync: Duration) -> Backstops {
        Backstops {
            resync,
            waits: self.waiting,
            recheck: self.terminal_recheck,
        }
    }

    /// The delay before the next attempt for `object` after `error`, counting the failure.
    pub fn after_failure(&self, object: &str, error: &Error) -> Duration {
        if error.is_stale_write() {
            // Not counted: conflicts come with every busy control plane, and counting them
            // would push an object's next attempt out by minutes for no failure at all.
            return Duration::from_secs(1).min(self.transient.cap);
        }
        let unreported = lock(&self.unreported).remove(object);
        match error.category() {
            Category::Terminal if !unreported => self.terminal_recheck,
            Category::Waiting => self.waiting,
            Category::Terminal | Category::Transient => {
                let attempt = {
                    let mut failures = lock(&self.failures);
                    let count = failures.entry(object.to_string()).or_insert(0);
                    let attempt = *count;
                    *count = count.saturating_add(1);
                    attempt
                };
                let jittered = self.transient.delay(attempt, &mut rand::rng());
                // Never below a second (no hot loop), never below what the server asked for.
                jittered
                    .max(Duration::from_secs(1).min(self.transient.cap))
                    .max(error.retry_after().unwrap_or_default())
            }
        }
    }

    /// Forgets `object`'s failures after a successful reconcile or its deletion.
    pub fn reset(&self, object: &str) {
        lock(&self.failures).remove(object);
        lock(&self.unreported).remove(object);
    }

    /// Notes that `object`'s failure could not be written to its status, so its next attempt
    /// comes after a backoff, not the terminal recheck.
    pub fn unreported(&self, object: &str) {
        lock(&self.unreported).insert(object.to_string());
    }

    /// Consecutive transient failures recorded for `object`.
    pub fn failures(&self, object: &str) -> u32 {
        lock(&self.failures).get(object).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_cloud::{Error as CloudError, Operation};

    fn server_error() -> Error {
        Error::Cloud(CloudError::Server {
            operation: Operation::ListInstances,
            status: 503,
            message: "busy".into(),
        })
    }

    #[test]
    fn transient_failures_grow_per_object_and_reset_on_success() {
        let policy = RequeuePolicy::new(
            Backoff::new(Duration::from_secs(1), Duration::from_secs(64)),
            Duration::from_secs(300),
            Duration::from_secs(5),
        );
        let mut ceilings = Vec::new();
        for attempt in 0..8 {
            let delay = policy.after_failure("ns/a", &server_error());
            let ceiling = Duration::from_secs(1 << attempt).min(Duration::from_secs(64));
            assert!(
                delay >= Duration::from_secs(1) && delay <= ceiling,
                "attempt {attempt}: {delay:?}"
            );
            ceilings.push(ceiling);
        }
        assert_eq!(policy.failures("ns/a"), 8);
        // Another object is unaffected.
        assert_eq!(policy.failures("ns/b"), 0);
        assert!(policy.after_failure("ns/b", &server_error()) <= Duration::from_secs(1));
        policy.reset("ns/a");
        assert_eq!(policy.failures("ns/a"), 0);
    }

    #[test]
    fn retry_after_is_a_floor() {
        let policy = RequeuePolicy::default();
        let throttled = Error::Cloud(CloudError::RateLimited {
            operation: Operation::CreateInstance,
            retry_after: Some(Duration::from_secs(42)),
            message: String::new(),
        });
        assert!(policy.after_failure("ns/a", &throttled) >= Duration::from_secs(42));
    }

    #[test]
    fn a_terminal_failure_not_reported_is_retried_with_backoff() {
        let policy = RequeuePolicy::default();
        let terminal = Error::InvalidSpec("bad".into());
        policy.unreported("ns/a");
        assert!(policy.after_failure("ns/a", &terminal) <= Duration::from_secs(1));
        // Reported the next time: back to the terminal recheck.
        assert_eq!(
            policy.after_failure("ns/a", &terminal),
            Duration::from_secs(300)
        );
        policy.unreported("ns/a");
        policy.reset("ns/a");
        assert_eq!(
            policy.after_failure("ns/a", &terminal),
            Duration::from_secs(300)
        );
    }

    #[test]
    fn terminal_and_waiting_do_not_count_as_failures() {
        let policy = RequeuePolicy::default();
        let terminal = Error::InvalidSpec("bad".into());
        assert_eq!(
            policy.after_failure("ns/a", &terminal),
            Duration::from_secs(300)
        );
        let waiting = Error::WaitingFor {
            kind: "Snapshot",
            name: "s".into(),
            detail: String::new(),
        };
        assert_eq!(
            policy.after_failure("ns/a", &waiting),
            Duration::from_secs(5)
        );
        assert_eq!(policy.failures("ns/a"), 0);
    }

    #[test]
    fn stale_writes_retry_soon_and_do_not_count() {
        let policy = RequeuePolicy::default();
        let conflict = || {
            let status = kube::core::Status::failure("the object has been modified", "Conflict")
                .with_code(409);
            Error::Finalizer(Box::new(kube::runtime::finalizer::Error::ApplyFailed(
                Error::Kube(kube::Error::Api(Box::new(status))),
            )))
        };
        for _ in 0..10 {
            assert_eq!(
                policy.after_failure("ns/a", &conflict()),
                Duration::from_secs(1)
            );
        }
        assert_eq!(policy.failures("ns/a"), 0);
    }
}
