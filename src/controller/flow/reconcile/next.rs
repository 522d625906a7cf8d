//! What a reconcile asks for next: every requeue and wait of the flow goes through here, so
//! the queue-depth gauge and the settled sweep know it (kube-runtime's `Action` does not tell).

use crate::flow::gauges::Next;
use crate::runtime::clock::Clock;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use std::cell::Cell;
use std::time::Duration;

tokio::task_local! {
    /// What the running reconcile asked for next, for the queue-depth gauge and the settled
    /// sweep (kube-runtime's `Action` does not tell).
    pub(super) static NEXT: Cell<Option<Next>>;
}

/// Requeue after `after`; every requeue of the flow goes through here.
pub(super) fn requeue(after: Duration) -> Action {
    let _ = NEXT.try_with(|cell| cell.set(Some(Next::Requeue(after))));
    Action::requeue(after)
}

/// Wait for a change, and nothing else; every such answer of the flow goes through here.
pub(super) fn await_change() -> Action {
    let _ = NEXT.try_with(|cell| cell.set(Some(Next::Change)));
    Action::await_change()
}

/// Settled: wait for a change, and for the settled sweep's recheck (`recheck.rs`).
pub(super) fn settled() -> Action {
    let _ = NEXT.try_with(|cell| cell.set(Some(Next::Sweep)));
    Action::await_change()
}

/// `action`, or a requeue at `wake` (a moment of `clock`) when that is sooner than what it
/// asked for. A settled object with a moment ahead is looked at again by a timer of its own,
/// at the moment or one `resync` on, whichever comes first: the settled sweep leaves alone
/// objects that have a timer, and the moment may be days away.
pub(super) fn no_later_than(
    action: Action,
    wake: Option<Timestamp>,
    clock: &Clock,
    resync: Duration,
) -> Action {
    let next = NEXT.try_with(Cell::get).ok().flatten();
    let requeued = match next {
        Some(Next::Requeue(after)) => Some(after),
        _ => None,
    };
    let asked = match next {
        Some(Next::Sweep) if wake.is_some() => Some(resync),
        _ => requeued,
    };
    match until_wake(asked, wake, clock) {
        Some(after) if Some(after) != requeued => requeue(after),
        _ => action,
    }
}

/// The requeue `asked` (`None`: wait for a change), or sooner when the object must be looked
/// at again at `wake`: the real time until `clock` reads it.
pub(super) fn until_wake(
    asked: Option<Duration>,
    wake: Option<Timestamp>,
    clock: &Clock,
) -> Option<Duration> {
    let Some(wake) = wake else {
        return asked;
    };
    let until = clock.until(wake);
    Some(asked.map_or(until, |asked| asked.min(until)))
}
