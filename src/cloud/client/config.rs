//! What a client is built from: where the service is, the API key, timeouts, retries and the
//! client-side rate limit.

use std::fmt;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::limiter::RateLimit;

/// The account's API key. It is sent only in the `X-API-Key` header (marked sensitive) and
/// never printed: `Debug` and `Display` show `ApiKey(***)`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    /// The key itself, for the few places that must send or compare it.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// When and how often the client repeats a failed call on its own.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included; 1 disables retries.
    pub max_attempts: u32,
    pub backoff: Backoff,
    /// A `Retry-After` longer than this is not waited out: the error goes to the caller.
    pub max_retry_after: Duration,
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn never() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }
}

impl Default for RetryPolicy {
    /// Four attempts, backoff from 200 ms to 10 s, `Retry-After` honoured up to 60 s.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            backoff: Backoff::default(),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// Everything the client needs to reach the service.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The API root, e.g. `https://api.example.com/v1`; operation paths are appended to it.
    pub base_url: String,
    pub api_key: ApiKey,
    /// Bound on one attempt, from sending the request to the last byte of the answer.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    /// Client-side limit shared by every clone; `None` sends as fast as callers ask.
    pub rate_limit: Option<RateLimit>,
}

impl ClientConfig {
    /// Defaults: 30 s timeout, [`RetryPolicy::default`], [`RateLimit::default`].
    pub fn new(base_url: impl Into<String>, api_key: ApiKey) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            api_key,
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            rate_limit: Some(RateLimit::default()),
        }
    }
}
