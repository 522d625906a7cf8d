//! The observer hook, so callers can count calls without this crate depending on a metrics
//! library.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::routes::Operation;

/// How one attempt ended, as an observer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallOutcome {
    /// HTTP status of the answer, when there was one.
    pub status: Option<u16>,
    /// [`Error::metric_label`] when the attempt failed.
    pub error: Option<&'static str>,
}

impl CallOutcome {
    pub fn is_success(&self) -> bool {
        self.error.is_none()
    }
}

/// Hook for counting calls without this crate depending on a metrics library. Methods are
/// called inline, so they should be quick.
pub trait CallObserver: Send + Sync {
    /// After every attempt, successful or not.
    fn on_call(&self, operation: Operation, outcome: &CallOutcome, elapsed: Duration);

    /// Before sleeping `delay` ahead of attempt number `next_attempt` (1-based: the first
    /// retry is 2).
    fn on_retry(
        &self,
        _operation: Operation,
        _next_attempt: u32,
        _error: &Error,
        _delay: Duration,
    ) {
    }

    /// After waiting `waited` for a token of the client-side rate limiter.
    fn on_rate_limit_wait(&self, _operation: Operation, _waited: Duration) {}
}

/// Reports every call to each of several observers, in order.
pub struct FanOut(pub Vec<Arc<dyn CallObserver>>);

impl CallObserver for FanOut {
    fn on_call(&self, operation: Operation, outcome: &CallOutcome, elapsed: Duration) {
        for observer in &self.0 {
            observer.on_call(operation, outcome, elapsed);
        }
    }

    fn on_retry(&self, operation: Operation, next_attempt: u32, error: &Error, delay: Duration) {
        for observer in &self.0 {
            observer.on_retry(operation, next_attempt, error, delay);
        }
    }

    fn on_rate_limit_wait(&self, operation: Operation, waited: Duration) {
        for observer in &self.0 {
            observer.on_rate_limit_wait(operation, waited);
        }
    }
}
