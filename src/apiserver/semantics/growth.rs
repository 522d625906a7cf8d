//! A check for tests that work grows linearly with its input, judged by the ratio of two
//! timings (the same work on an input four times larger) instead of a wall-clock bound: a slow
//! or loaded machine slows both alike, while quadratic work still shows as about 16 times.

use std::time::{Duration, Instant};

/// Runs `work` on `small` and on four times `small` items (the best of two runs each) and
/// fails when the larger took more than ten times as long: linear work takes about four.
pub(crate) fn assert_grows_linearly(what: &str, small: usize, work: impl Fn(usize)) {
    let best_of_two = |n: usize| -> Duration {
        (0..2)
            .map(|_| {
                let started = Instant::now();
                work(n);
                started.elapsed()
            })
            .min()
            .unwrap_or_default()
    };
    let small_time = best_of_two(small);
    let large_time = best_of_two(4 * small);
    let ratio = large_time.as_secs_f64() / small_time.as_secs_f64().max(1e-6);
    assert!(
        ratio < 10.0,
        "{what}: four times the items took {ratio:.1} times as long ({small_time:?} for {small}, {large_time:?} for {})",
        4 * small
    );
}
