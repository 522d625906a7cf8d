//! The settled objects' rechecks: one sweep over a kind's store per resync interval, spread
//! evenly over it, instead of a timer per object.
//!
//! Every object is looked at again now and then whatever happens, as the backstop of
//! list-based observation: a wake can be missed (a reconcile on a cached copy older than its
//! own last status write finds nothing to change, and status-only changes wake no one), and a
//! change the cloud's list does not show as a change of state is found only by looking. A
//! Ready object used to ask for this with a requeue one interval on, which kube-runtime's
//! scheduler and the queue-depth gauge each hold as an entry keyed by the object's reference
//! (its name, namespace, uid and resourceVersion, twice in the scheduler): about 1.4 KB per
//! settled object, for as long as it is settled. The sweep holds nothing per object between
//! rounds: each round takes the store's objects (shared, not copied) and wakes them a slice at
//! a time.
//!
//! Only objects whose last reconcile found them settled are taken (`gauges::Next::Sweep`):
//! one with a reconcile due is left to it (a requeue in a transition, a retry's backoff, the
//! timer of a lifetime's or schedule's next moment, which a settled object with one keeps),
//! and one whose reconcile asked for nothing but a change (paused, an invalid spec, a resource
//! gone) is left alone as before. So a settled object is looked at again between a few seconds
//! and two intervals after its last reconcile, about one interval on average, and the first
//! round starts one interval after the controller (whose first list has woken or re-adopted
//! every object: `readopt.rs`).

use crate::flow::gauges::KindGauges;
use crate::flow::kind::ManagedKind;
use futures::{Stream, StreamExt};
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// At most this long between two slices of a round.
const SLICE_EVERY: Duration = Duration::from_secs(1);

/// The rechecks of `gauges`' store, one round per `interval`, each object of a round at most
/// once, as a stream for `Controller::reconcile_on`.
pub fn settled_rechecks<K: ManagedKind>(
    gauges: Arc<KindGauges<K>>,
    interval: Duration,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static {
    let interval = interval.max(Duration::from_millis(1));
    let slice_every = SLICE_EVERY.min(interval / 20).max(Duration::from_millis(1));
    let first = Round {
        objects: Vec::new(),
        started: Instant::now(),
        taken: 0,
    };
    futures::stream::unfold(first, move |mut round| {
        let gauges = gauges.clone();
        async move {
            let mut elapsed = round.started.elapsed();
            if elapsed >= interval {
                gauges.forget_gone();
                round = Round {
                    objects: gauges.store().state(),
                    started: Instant::now(),
                    taken: 0,
                };
                elapsed = Duration::ZERO;
            }
            // The next slice is taken at the next step, or at the round's end.
            let step = (elapsed + slice_every).min(interval);
            tokio::time::sleep_until(round.started + step).await;
            let upto = due_by(round.objects.len(), step, interval);
            let woken: Vec<ObjectRef<K>> = round.objects[round.taken.min(upto)..upto]
                .iter()
                .map(|object| crate::runtime::applier::key_of(object.as_ref()))
                .filter(|key| gauges.store().get(key).is_some() && gauges.recheck(key))
                .collect();
            round.taken = upto;
            Some((futures::stream::iter(woken), round))
        }
    })
    .flatten()
}

/// One round of the sweep: the store's objects when it started, and how many of them have
/// been taken.
struct Round<K> {
    objects: Vec<Arc<K>>,
    started: Instant,
    taken: usize,
}

/// How many of a round's `total` objects are due by `elapsed` into a round of `interval`:
/// evenly spread, every one by the round's end.
fn due_by(total: usize, elapsed: Duration, interval: Duration) -> usize {
    if elapsed >= interval || interval.is_zero() {
        return total;
    }
    let share = elapsed.as_secs_f64() / interval.as_secs_f64();
    // Rounded up, so the first slice is not empty and the last is not left over.
    ((total as f64 * share).ceil() as usize).min(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rounds_objects_are_due_evenly_and_all_by_its_end() {
        let minute = Duration::from_secs(60);
        let cases = [
            // (objects, seconds into the round, due by then)
            (0, 1, 0),
            (60, 0, 0),
            (60, 1, 1),
            (60, 30, 30),
            (60, 59, 59),
            (60, 60, 60),
            (60, 90, 60),
            (1, 1, 1),
            (7, 1, 1),
            (100_000, 1, 1_667),
            (100_000, 59, 98_334),
        ];
        for (total, seconds, due) in cases {
            assert_eq!(
                due_by(total, Duration::from_secs(seconds), minute),
                due,
                "{total} objects, {seconds} s into the round"
            );
        }
    }

    #[test]
    fn a_zero_interval_takes_every_object_at_once() {
        assert_eq!(due_by(5, Duration::ZERO, Duration::ZERO), 5);
    }
}
