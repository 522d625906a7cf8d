//! The simulated clock: scaled wall time plus manual advances, so tests and demos can run
//! hours of billing in seconds.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::SimTime;

/// The simulated clock: its start (wall time unless chosen) plus real elapsed time times the
/// scale, plus any manual advance.
pub struct Clock {
    origin: Instant,
    origin_millis: SimTime,
    scale: f64,
    advanced_millis: AtomicI64,
}

impl Clock {
    /// A clock reading `start` now (the wall clock when `None`) and running `scale` simulated
    /// seconds per real second.
    pub fn new(scale: f64, start: Option<jiff::Timestamp>) -> Self {
        Clock {
            origin: Instant::now(),
            origin_millis: start.unwrap_or_else(jiff::Timestamp::now).as_millisecond(),
            scale,
            advanced_millis: AtomicI64::new(0),
        }
    }

    pub fn now(&self) -> SimTime {
        let elapsed = self.origin.elapsed().as_secs_f64() * 1000.0 * self.scale;
        self.origin_millis
            .saturating_add(elapsed as i64)
            .saturating_add(self.advanced_millis.load(Ordering::Relaxed))
    }

    /// The simulated now as a timestamp (to the millisecond).
    pub fn timestamp(&self) -> jiff::Timestamp {
        jiff::Timestamp::from_millisecond(self.now()).unwrap_or(jiff::Timestamp::MAX)
    }

    /// Moves simulated time forward (billing accrues, pending states complete).
    pub fn advance(&self, by: Duration) {
        let millis = i64::try_from(by.as_millis()).unwrap_or(i64::MAX / 4);
        self.advanced_millis.fetch_add(millis, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_runs_scaled_and_advances_on_demand() {
        let clock = Clock::new(3600.0, None);
        let start = clock.now();
        std::thread::sleep(Duration::from_millis(20));
        // 20 ms of real time at 3600x is at least 72 simulated seconds.
        assert!(clock.now() - start >= 72_000);
        let before = clock.now();
        clock.advance(Duration::from_secs(86_400));
        assert!(clock.now() - before >= 86_400_000);
    }

    #[test]
    fn clock_starts_at_a_chosen_instant() {
        let start: jiff::Timestamp = "2026-10-23T04:00:00Z".parse().unwrap();
        let clock = Clock::new(3600.0, Some(start));
        let now = clock.timestamp();
        assert!(
            now >= start && now < start + jiff::SignedDuration::from_secs(60),
            "{now}"
        );
    }
}
