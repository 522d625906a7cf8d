//! The operator's clock: the time the product's decisions read (where a lifetime stands, a
//! power schedule's window, a Budget's period and its abandoned reservations) and the real
//! time a timer set for a moment of that clock sleeps.
//!
//! In production it is the wall clock. In tests it can run scaled, as the cloud simulator's
//! clock does (`SimulatorConfig::time_scale`): from an `origin` moment, `scale` clock seconds
//! per real second, so a week of power schedules or a lifetime of hours runs in seconds. The
//! operator and the simulator then share origin and scale, and both see the same time.
//!
//! What is about the real world rather than the product's time stays on the wall clock:
//! leader election leases, event and condition timestamps, the create protocol's settle window
//! and create times (compared with the API server's and the cloud's records), orphan sweeps.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::time::{Duration, Instant};

/// The time the operator decides by. Cheap to copy; reading it allocates nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clock {
    scaled: Option<Scaled>,
}

#[derive(Debug, Clone, Copy)]
struct Scaled {
    origin: Timestamp,
    /// The real moment the clock read `origin`.
    started: Instant,
    scale: f64,
}

impl Clock {
    /// The wall clock (`Timestamp::now()`), timers in real time.
    pub const fn real() -> Self {
        Clock { scaled: None }
    }

    /// A clock that reads `origin` now and runs `scale` clock seconds per real second.
    ///
    /// # Panics
    /// When `scale` is not a positive finite number.
    pub fn scaled(origin: Timestamp, scale: f64) -> Self {
        assert!(
            scale.is_finite() && scale > 0.0,
            "a clock's scale must be positive, not {scale}"
        );
        Clock {
            scaled: Some(Scaled {
                origin,
                started: Instant::now(),
                scale,
            }),
        }
    }

    /// Clock seconds per real second: 1 for the wall clock.
    pub fn scale(&self) -> f64 {
        self.scaled.map_or(1.0, |s| s.scale)
    }

    /// The clock's time now.
    pub fn now(&self) -> Timestamp {
        let Some(scaled) = self.scaled else {
            return Timestamp::now();
        };
        let nanos = scaled.started.elapsed().as_nanos() as f64 * scaled.scale;
        // Saturates (at about 292 years), far beyond any clock a test runs.
        let elapsed = SignedDuration::from_nanos(nanos as i64);
        scaled.origin.checked_add(elapsed).unwrap_or(Timestamp::MAX)
    }

    /// The real time `span` of clock time takes: what a timer sleeps. Rounded up to the
    /// microsecond, so that a timer never ends before its moment; nothing for a span not
    /// positive.
    pub fn real_duration(&self, span: SignedDuration) -> Duration {
        let Ok(span) = Duration::try_from(span) else {
            return Duration::ZERO;
        };
        match self.scaled {
            None => span,
            Some(scaled) => {
                let micros = (span.as_nanos() as f64 / scaled.scale / 1_000.0).ceil();
                Duration::from_micros(micros as u64)
            }
        }
    }

    /// The real time until the clock reads `at`: nothing when it has passed.
    pub fn until(&self, at: Timestamp) -> Duration {
        self.real_duration(at.duration_since(self.now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_clock_is_the_wall_clock_and_its_timers_real_time() {
        let clock = Clock::real();
        let before = Timestamp::now();
        let now = clock.now();
        assert!(now >= before && now <= Timestamp::now());
        assert_eq!(clock.scale(), 1.0);
        assert_eq!(
            clock.real_duration(SignedDuration::from_secs(90)),
            Duration::from_secs(90)
        );
        assert_eq!(
            clock.real_duration(SignedDuration::from_secs(-5)),
            Duration::ZERO
        );
        let soon = clock.until(Timestamp::now() + SignedDuration::from_secs(10));
        assert!(soon > Duration::from_secs(9) && soon <= Duration::from_secs(10));
    }

    #[test]
    fn a_scaled_clock_starts_at_its_origin_and_runs_scale_times_faster() {
        let origin: Timestamp = "2026-10-23T04:00:00Z".parse().unwrap();
        let clock = Clock::scaled(origin, 3600.0);
        let start = clock.now();
        assert!(start >= origin && start < origin + SignedDuration::from_secs(60));
        std::thread::sleep(Duration::from_millis(20));
        // 20 ms of real time at 3600x is at least 72 clock seconds.
        assert!(clock.now().duration_since(start) >= SignedDuration::from_secs(72));
        // An hour of clock time is a real second, never less.
        assert_eq!(
            clock.real_duration(SignedDuration::from_hours(1)),
            Duration::from_secs(1)
        );
        assert_eq!(
            clock.real_duration(SignedDuration::from_millis(1)),
            Duration::from_micros(1)
        );
        let copy = clock;
        let in_an_hour = copy.until(copy.now() + SignedDuration::from_hours(1));
        assert!(in_an_hour <= Duration::from_secs(1) && in_an_hour > Duration::from_millis(900));
        assert_eq!(clock.until(origin), Duration::ZERO);
    }
}
