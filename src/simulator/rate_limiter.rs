//! The server-side rate limit: one token bucket per API key.

use std::collections::HashMap;
use std::time::Instant;

use crate::config::RateLimit;

#[derive(Default)]
pub(crate) struct RateLimiter {
    buckets: HashMap<String, Bucket>,
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl RateLimiter {
    /// Takes a token for `key`, or says how many whole seconds until one is available.
    pub(crate) fn take(&mut self, key: &str, limit: RateLimit) -> Result<(), u64> {
        let now = Instant::now();
        let burst = f64::from(limit.burst.max(1));
        let bucket = self.buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: burst,
            refilled: now,
        });
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * limit.per_second).min(burst);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else if limit.per_second > 0.0 {
            let wait = (1.0 - bucket.tokens) / limit.per_second;
            Err((wait.ceil() as u64).max(1))
        } else {
            Err(60)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bucket_allows_the_burst_then_asks_to_wait() {
        let mut limiter = RateLimiter::default();
        let limit = RateLimit {
            per_second: 0.5,
            burst: 3,
        };
        for _ in 0..3 {
            assert!(limiter.take("k", limit).is_ok());
        }
        assert_eq!(limiter.take("k", limit), Err(2));
        // Buckets are per key.
        assert!(limiter.take("other", limit).is_ok());
    }
}
