//! What the account has accrued since its balance was last set, over every billing span at
//! once, so that a balance read (every billed create makes one) costs the same however many
//! resources the account has had, deleted ones included.
//!
//! Each span is a sum of rate steps: `+rate` where one of its segments starts and `-rate`
//! where it ends ([`BillingSpan::segments`]). The account's steps are kept summed by moment.
//! The cost of a step `d` at `t` up to `now` is `d * (now - max(t, since))` when `t <= now`
//! and nothing otherwise, so the total is `rate_sum * (now - since) - weighted`, less what
//! the steps still to come would wrongly add: only those after `now` are visited, and they
//! are the few machines still being deleted.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::{BillingSpan, MILLIS_PER_HOUR, SimTime};

/// The account's billing spans as summed rate steps. Every span is added when it opens and
/// replaced when it changes ([`BillingSpan::change_rate`], [`BillingSpan::close`]), so this
/// always describes every span the account holds.
#[derive(Debug, Clone)]
pub struct Accrual {
    /// Costs are counted from here (the moment the balance was last set).
    since: SimTime,
    /// The sum of every span's rate steps at each moment.
    steps: BTreeMap<SimTime, f64>,
    /// The sum of every step.
    rate_sum: f64,
    /// The sum of every step times how long after `since` it comes (zero for a step before
    /// it), in milliseconds.
    weighted: f64,
}

impl Accrual {
    pub fn new(since: SimTime) -> Self {
        Accrual {
            since,
            steps: BTreeMap::new(),
            rate_sum: 0.0,
            weighted: 0.0,
        }
    }

    /// Where costs are counted from.
    #[cfg(debug_assertions)]
    pub fn since(&self) -> SimTime {
        self.since
    }

    /// Counts costs from `since` on, as a balance set at that moment does.
    pub fn restart(&mut self, since: SimTime) {
        self.since = since;
        self.weighted = self
            .steps
            .iter()
            .map(|(at, step)| step * self.offset(*at))
            .sum();
    }

    /// Cost accrued in `[since, now]`, as the sum of every span's
    /// [`BillingSpan::cost_between`] over it.
    pub fn accrued(&self, now: SimTime) -> f64 {
        if now <= self.since {
            return 0.0;
        }
        let to_come: f64 = self
            .steps
            .range((Bound::Excluded(now), Bound::Unbounded))
            .map(|(at, step)| step * (now - at) as f64)
            .sum();
        (self.rate_sum * (now - self.since) as f64 - self.weighted - to_come) / MILLIS_PER_HOUR
    }

    pub(super) fn add(&mut self, span: &BillingSpan) {
        self.apply(span, 1.0);
    }

    pub(super) fn remove(&mut self, span: &BillingSpan) {
        self.apply(span, -1.0);
    }

    fn apply(&mut self, span: &BillingSpan, sign: f64) {
        for (from, until, rate) in span.segments() {
            self.step(from, sign * rate);
            if until != SimTime::MAX {
                self.step(until, -sign * rate);
            }
        }
    }

    fn step(&mut self, at: SimTime, step: f64) {
        *self.steps.entry(at).or_insert(0.0) += step;
        self.rate_sum += step;
        self.weighted += step * self.offset(at);
    }

    /// How long after `since` a step at `at` starts to count, in milliseconds.
    fn offset(&self, at: SimTime) -> f64 {
        (at.max(self.since) - self.since) as f64
    }
}
