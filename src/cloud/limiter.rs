//! Client-side token bucket, so one operator never floods the account's request quota, with
//! its tokens shared fairly between the teams whose calls wait for them.
//!
//! One bucket serves a whole account, and every team (namespace) whose objects use that
//! account draws on it. Served in the order the calls arrived, a team with thousands of
//! creates under way keeps a queue of calls waiting for tokens (one per reconcile slot), and a
//! quiet team's single call waits behind all of them: `--concurrency` / R seconds at the
//! account's rate. So the waiting calls are grouped by the share they run under (the team, set
//! around a reconcile with [`in_share`]; calls made outside one, such as the observers' lists,
//! form a share of their own), and each token goes to the next share in turn, the calls of one
//! share in the order they came.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

tokio::task_local! {
    /// The share the current task's calls wait under.
    static SHARE: Arc<str>;
}

/// Runs `future` with every rate-limit wait of its calls counted under `share` (a team's
/// namespace), so that one share's many calls do not hold back another's few.
pub async fn in_share<F: Future>(share: Arc<str>, future: F) -> F::Output {
    SHARE.scope(share, future).await
}

/// The share of the calls made outside [`in_share`].
fn current_share() -> Arc<str> {
    SHARE.try_with(Arc::clone).unwrap_or_else(|_| Arc::from(""))
}

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
/// finds the bucket empty, or others already waiting, waits for its share's turn.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    state: Arc<Mutex<Bucket>>,
    per_second: f64,
    burst: f64,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled_at: Instant,
    /// Waiting calls by share, oldest first.
    waiting: HashMap<Arc<str>, VecDeque<oneshot::Sender<()>>>,
    /// Shares with waiting calls, in the order their turn comes.
    turns: VecDeque<Arc<str>>,
    /// The task that hands out tokens to the waiting calls, while there are any. A task the
    /// runtime dropped (shut down) counts as none.
    dispatcher: Option<tokio::task::AbortHandle>,
}

/// Tokens short of a whole one by less than this count as whole: the refill's floating-point
/// arithmetic must not leave a dispatcher sleeping for nothing.
const WHOLE: f64 = 1.0 - 1e-9;

impl Bucket {
    fn refill(&mut self, per_second: f64, burst: f64) {
        let now = Instant::now();
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * per_second).min(burst);
        self.refilled_at = now;
    }

    /// The next waiting call in turn, its share's turn taken.
    fn next_waiting(&mut self) -> Option<oneshot::Sender<()>> {
        while let Some(share) = self.turns.pop_front() {
            let Some(queue) = self.waiting.get_mut(&share) else {
                continue;
            };
            let Some(sender) = queue.pop_front() else {
                self.waiting.remove(&share);
                continue;
            };
            if queue.is_empty() {
                self.waiting.remove(&share);
            } else {
                self.turns.push_back(share);
            }
            return Some(sender);
        }
        None
    }
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
                waiting: HashMap::new(),
                turns: VecDeque::new(),
                dispatcher: None,
            })),
            per_second,
            burst,
        }
    }

    fn bucket(&self) -> MutexGuard<'_, Bucket> {
        // The critical sections are plain bookkeeping, so a poisoned lock holds a usable state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a token, waiting for its share's turn while the bucket is empty or other calls
    /// wait. Returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let started = Instant::now();
        let granted = {
            let mut bucket = self.bucket();
            bucket.refill(self.per_second, self.burst);
            if bucket.turns.is_empty() && bucket.tokens >= WHOLE {
                bucket.tokens -= 1.0;
                return Duration::ZERO;
            }
            let (sender, receiver) = oneshot::channel();
            let share = current_share();
            let bucket = &mut *bucket;
            let queue = bucket.waiting.entry(share.clone()).or_default();
            if queue.is_empty() {
                bucket.turns.push_back(share);
            }
            queue.push_back(sender);
            if bucket
                .dispatcher
                .as_ref()
                .is_none_or(tokio::task::AbortHandle::is_finished)
            {
                bucket.dispatcher = Some(tokio::spawn(self.clone().dispatch()).abort_handle());
            }
            receiver
        };
        // A sender is dropped unsent only with its dispatcher, when the runtime shuts down:
        // the call then goes ahead rather than wait for a token no one will hand out.
        let _ = granted.await;
        started.elapsed()
    }

    /// Hands out tokens to the waiting calls, a share at a time, as the bucket refills; ends
    /// when no call waits. A call that stopped waiting (its future dropped) is passed over
    /// without taking a token.
    async fn dispatch(self) {
        loop {
            let wait = {
                let mut bucket = self.bucket();
                bucket.refill(self.per_second, self.burst);
                while bucket.tokens >= WHOLE {
                    let Some(sender) = bucket.next_waiting() else {
                        break;
                    };
                    if sender.send(()).is_ok() {
                        bucket.tokens -= 1.0;
                    }
                }
                if bucket.turns.is_empty() {
                    bucket.dispatcher = None;
                    return;
                }
                Duration::from_secs_f64(((1.0 - bucket.tokens) / self.per_second).max(0.0))
            };
            tokio::time::sleep(wait.max(Duration::from_micros(100))).await;
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

    /// Starts a call waiting for a token, under `share` (or outside any, with `None`); once it
    /// has one, it records `name` in `order`.
    fn waiting_call(
        limiter: &RateLimiter,
        share: Option<&str>,
        order: &Arc<Mutex<Vec<String>>>,
        name: String,
    ) -> tokio::task::JoinHandle<()> {
        let limiter = limiter.clone();
        let order = order.clone();
        let call = async move {
            limiter.acquire().await;
            order.lock().unwrap().push(name);
        };
        match share {
            Some(share) => tokio::spawn(in_share(Arc::from(share), call)),
            None => tokio::spawn(call),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_share_with_one_call_waits_for_one_token_not_for_every_call_of_a_busy_share() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 10.0,
            burst: 1,
        });
        assert_eq!(limiter.acquire().await, Duration::ZERO);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut calls = Vec::new();
        for i in 0..8 {
            calls.push(waiting_call(
                &limiter,
                Some("busy"),
                &order,
                format!("busy-{i}"),
            ));
            tokio::task::yield_now().await;
        }
        calls.push(waiting_call(
            &limiter,
            Some("quiet"),
            &order,
            "quiet".into(),
        ));
        for call in calls {
            call.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        // Served in arrival order, the quiet call would be ninth; in turns, it is second.
        let quiet = order.iter().position(|n| n == "quiet").unwrap();
        assert_eq!(quiet, 1, "{order:?}");
        // A share's own calls keep their order.
        let busy: Vec<&String> = order.iter().filter(|n| n.starts_with("busy")).collect();
        let sorted = {
            let mut sorted = busy.clone();
            sorted.sort();
            sorted
        };
        assert_eq!(busy, sorted);
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_holds_whatever_the_shares_and_calls_outside_a_share_get_their_turn() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 10.0,
            burst: 1,
        });
        let start = Instant::now();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut calls = Vec::new();
        for i in 0..10 {
            let share = ["a", "b", "c"][i % 3];
            calls.push(waiting_call(
                &limiter,
                Some(share),
                &order,
                format!("{share}-{i}"),
            ));
        }
        for call in calls {
            call.await.unwrap();
        }
        // One at once (the burst), nine more at 10/s.
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(899) && elapsed <= Duration::from_millis(910),
            "{elapsed:?}"
        );
        // A call outside any share (an observer's list) waits its own turn, not the queue's.
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut calls: Vec<_> = (0..5)
            .map(|i| waiting_call(&limiter, Some("a"), &order, format!("a-{i}")))
            .collect();
        tokio::task::yield_now().await;
        calls.push(waiting_call(&limiter, None, &order, "outside".into()));
        for call in calls {
            call.await.unwrap();
        }
        let position = order.lock().unwrap().iter().position(|n| n == "outside");
        assert!(
            position.is_some_and(|p| p <= 1),
            "{:?}",
            order.lock().unwrap()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_stopped_waiting_takes_no_token() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 10.0,
            burst: 1,
        });
        limiter.acquire().await;
        let abandoned = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire().await })
        };
        tokio::task::yield_now().await;
        abandoned.abort();
        let _ = abandoned.await;
        // The next call waits for the one token the bucket refills, not for two.
        assert_eq!(limiter.acquire().await, Duration::from_millis(100));
    }

    #[test]
    fn a_limiter_outlives_the_runtime_its_dispatcher_ran_on() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 1.0,
            burst: 1,
        });
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap()
        };
        runtime().block_on(async {
            limiter.acquire().await;
            // Waits, and the runtime is dropped with its dispatcher mid-sleep.
            let waiting = limiter.clone();
            tokio::spawn(async move { waiting.acquire().await });
            tokio::task::yield_now().await;
        });
        let waited = runtime().block_on(limiter.acquire());
        assert!(waited <= Duration::from_secs(2), "{waited:?}");
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
