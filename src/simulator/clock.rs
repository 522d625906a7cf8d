//! The simulated clock: scaled wall time plus manual advances, so tests and demos can run
//! hours of billing in seconds.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::SimTime;

/// The simulated clock: wall time at start plus real elapsed time times the scale, plus any
/// manual advance.
pub struct Clock {
    origin: Instant,
    origin_millis: SimTime,
    scale: f64,
    advanced_millis: AtomicI64,
}

impl Clock {
    pub fn new(scale: f64) -> Self {
        Clock {
            origin: Instant::now(),
            origin_millis: jiff::Timestamp::now().as_millisecond(),
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
        let clock = Clock::new(3600.0);
        let start = clock.now();
        std::thread::sleep(Duration::from_millis(20));
        // 20 ms of real time at 3600x is at least 72 simulated seconds.
        assert!(clock.now() - start >= 72_000);
        let before = clock.now();
        clock.advance(Duration::from_secs(86_400));
        assert!(clock.now() - before >= 86_400_000);
    }
}
