//! Full-jitter exponential backoff.
//!
//! The client waits this long between retries of one call; controllers reuse the same policy
//! for per-object requeues, so every retry in the operator spreads out the same way.

use std::time::Duration;

use rand::Rng;

/// Full-jitter exponential backoff: the delay before retry `attempt` (0-based) is uniform in
/// `[0, min(cap, base * 2^attempt)]`, so many clients that failed together do not retry
/// together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    pub const fn new(base: Duration, cap: Duration) -> Self {
        Backoff { base, cap }
    }

    /// The upper bound of the delay for `attempt`: `min(cap, base * 2^attempt)`, without
    /// overflowing for any attempt.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .map_or(self.cap, |grown| grown.min(self.cap))
    }

    /// A random delay in `[0, ceiling(attempt)]`.
    pub fn delay<R: Rng + ?Sized>(&self, attempt: u32, rng: &mut R) -> Duration {
        let ceiling = u64::try_from(self.ceiling(attempt).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=ceiling))
    }
}

impl Default for Backoff {
    /// 200 ms growing to at most 10 s.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(200), Duration::from_secs(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn ceiling_doubles_until_the_cap() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(backoff.ceiling(0), Duration::from_millis(100));
        assert_eq!(backoff.ceiling(1), Duration::from_millis(200));
        assert_eq!(backoff.ceiling(3), Duration::from_millis(800));
        assert_eq!(backoff.ceiling(4), Duration::from_secs(1));
        assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn delays_are_jittered_within_the_ceiling() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 0..10 {
            let delays: Vec<_> = (0..200).map(|_| backoff.delay(attempt, &mut rng)).collect();
            assert!(delays.iter().all(|d| *d <= backoff.ceiling(attempt)));
            // Full jitter: both halves of the range are used, not a fixed delay.
            let half = backoff.ceiling(attempt) / 2;
            assert!(delays.iter().any(|d| *d < half), "attempt {attempt}");
            assert!(delays.iter().any(|d| *d > half), "attempt {attempt}");
        }
    }

    #[test]
    fn zero_base_gives_zero_delay() {
        let backoff = Backoff::new(Duration::ZERO, Duration::from_secs(1));
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(backoff.delay(5, &mut rng), Duration::ZERO);
    }
}
