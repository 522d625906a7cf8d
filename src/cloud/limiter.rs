//! Client-side token bucket, so one operator never floods the account's request quota.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Requests per second and burst of a [`RateLimiter`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Sustained rate; must be positive.
    pub per_second: f64,
    /// Requests allowed at once after a quiet period; at least 1.
    pub burst: u32,
}

impl Default for RateLimit {
    /// 10 requests per second, bursts of 20.
    fn default() -> Self {
        RateLimit {
            per_second: 10.0,
            burst: 20,
        }
    }
}

/// A token bucket shared by every clone. Waiting for a token is not an error: a caller that
/// finds the bucket empty reserves the next token and sleeps until it is due, so waiting
/// callers are served in the order they arrived.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    state: Arc<Mutex<Bucket>>,
    per_second: f64,
    burst: f64,
}

#[derive(Debug)]
struct Bucket {
    /// May go negative: each waiting caller holds a reservation.
    tokens: f64,
    refilled_at: Instant,
}

impl RateLimiter {
    /// A full bucket. A non-positive or non-finite rate is raised to a tiny positive one and
    /// a zero burst to 1, so the limiter always makes progress.
    pub fn new(limit: RateLimit) -> Self {
        let per_second = if limit.per_second.is_finite() && limit.per_second > 0.0 {
            limit.per_second
        } else {
            1e-3
        };
        let burst = f64::from(limit.burst.max(1));
        RateLimiter {
            state: Arc::new(Mutex::new(Bucket {
                tokens: burst,
                refilled_at: Instant::now(),
            })),
            per_second,
            burst,
        }
    }

    /// Takes a token, waiting until one is available. Returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        wait
    }

    /// Takes a token now (possibly borrowing against the future) and returns how long the
    /// caller must wait before using it.
    fn reserve(&self) -> Duration {
        // The critical section is plain arithmetic, so a poisoned lock holds a usable state.
        let mut bucket = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let elapsed = now
            .saturating_duration_since(bucket.refilled_at)
            .as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_second).min(self.burst);
        bucket.refilled_at = now;
        bucket.tokens -= 1.0;
        if bucket.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-bucket.tokens / self.per_second)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_passes_at_once_then_the_rate_applies() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 10.0,
            burst: 3,
        });
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.acquire().await, Duration::ZERO);
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        for _ in 0..5 {
            limiter.acquire().await;
        }
        // Five more tokens at 10/s take half a second.
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(499) && elapsed <= Duration::from_millis(510),
            "{elapsed:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn clones_share_one_bucket() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 2.0,
            burst: 1,
        });
        let other = limiter.clone();
        assert_eq!(limiter.acquire().await, Duration::ZERO);
        let waited = other.acquire().await;
        assert_eq!(waited, Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_refills_after_a_quiet_period_but_not_beyond_burst() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 100.0,
            burst: 2,
        });
        limiter.acquire().await;
        limiter.acquire().await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(limiter.acquire().await, Duration::ZERO);
        assert_eq!(limiter.acquire().await, Duration::ZERO);
        assert!(limiter.acquire().await > Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn degenerate_limits_still_make_progress() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 0.0,
            burst: 0,
        });
        assert_eq!(limiter.acquire().await, Duration::ZERO);
    }
}
