//! Fair shares of a kind's reconciles: each cloud account (each credentials Secret) has its
//! own `--concurrency` slots, and within an account the slots go round-robin to the
//! namespaces that wait for one.
//!
//! kube-runtime runs one queue per kind in the order objects came due. Shared by every team,
//! that queue lets a namespace that applies thousands of objects hold every slot for as long
//! as its creates take at its account's rate limit, while a single object of a quiet namespace,
//! or of another account whose limit is idle, waits behind all of them. Here the controller
//! starts every due reconcile at once (they cost a few hundred bytes while they wait) and each
//! takes a slot of its account's lane first: an account in a 429 storm or an outage holds only
//! its own lane, and within a lane a namespace gets the next free slot as soon as it is its turn,
//! however many objects another namespace has waiting.
//!
//! Within a namespace's turns, the reconciles of objects whose resource exists (recording what
//! a list shows, following a transition, attaching, deleting) and those that would create one
//! take turns too. In one queue, recording what a list shows of a new machine (its id, its
//! Ready) waited for every create the namespace had queued before it, and whatever waits on
//! that status (a volume's attach) with it: at 100,000 objects the machines' statuses were
//! written in a wave after the creates, while the accounts' rate went unused.

use crate::lock;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// The reconcile slots of every lane (account) of one kind.
#[derive(Clone)]
pub struct FairShare {
    inner: Arc<Inner>,
}

struct Inner {
    /// Slots per lane.
    slots: usize,
    /// By lane name, shared with the lane's slots and waits (no copy per reconcile).
    lanes: Mutex<HashMap<Arc<str>, Lane>>,
}

/// One account's slots and the namespaces waiting for one.
#[derive(Default)]
struct Lane {
    busy: usize,
    /// Waiters by namespace.
    waiting: HashMap<String, Waiting>,
    /// Namespaces with waiters, in the order their turn comes.
    turns: VecDeque<String>,
}

/// What a reconcile is about to do, for its turn within its namespace's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Create the object's resource: nothing is recorded of one yet.
    Create,
    /// Anything about a resource recorded or under way: observe it, change it, delete it.
    Existing,
}

/// One namespace's waiters, oldest first, creates apart from the rest; the two take turns.
#[derive(Default)]
struct Waiting {
    creates: VecDeque<oneshot::Sender<Slot>>,
    existing: VecDeque<oneshot::Sender<Slot>>,
    /// Whether a create goes next when both wait.
    create_next: bool,
}

impl Waiting {
    fn push(&mut self, work: Work, sender: oneshot::Sender<Slot>) {
        match work {
            Work::Create => self.creates.push_back(sender),
            Work::Existing => self.existing.push_back(sender),
        }
    }

    fn pop(&mut self) -> Option<oneshot::Sender<Slot>> {
        let create = match (self.creates.is_empty(), self.existing.is_empty()) {
            (true, true) => return None,
            (false, true) => true,
            (true, false) => false,
            (false, false) => self.create_next,
        };
        self.create_next = !create;
        if create {
            self.creates.pop_front()
        } else {
            self.existing.pop_front()
        }
    }

    fn len(&self) -> usize {
        self.creates.len() + self.existing.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A reconcile slot, given back when dropped.
pub struct Slot {
    inner: Arc<Inner>,
    lane: Arc<str>,
    held: bool,
}

impl FairShare {
    /// `slots` reconciles at once per lane (at least one).
    pub fn new(slots: usize) -> Self {
        FairShare {
            inner: Arc::new(Inner {
                slots: slots.max(1),
                lanes: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A slot of `lane` for a reconcile of an object of `namespace` about to do `work`: at
    /// once while the lane has one free and nobody waits, else when the namespace's turn
    /// comes (and within it, that of its kind of work). The wait borrows nothing of the
    /// caller's: in a convergence nearly every object waits, and names kept through the wait
    /// were two allocations per object left among the stores' objects.
    pub fn slot(
        &self,
        lane: &str,
        namespace: &str,
        work: Work,
    ) -> impl Future<Output = Slot> + Send + 'static {
        let inner = self.inner.clone();
        let (lane, granted) = {
            let mut lanes = lock(&self.inner.lanes);
            let lane: Arc<str> = match lanes.get_key_value(lane) {
                Some((name, _)) => name.clone(),
                None => Arc::from(lane),
            };
            let entry = lanes.entry(lane.clone()).or_default();
            if entry.busy < self.inner.slots && entry.turns.is_empty() {
                entry.busy += 1;
                (lane.clone(), Ok(inner.slot(&lane)))
            } else {
                let (sender, receiver) = oneshot::channel();
                let queue = entry.waiting.entry(namespace.to_string()).or_default();
                if queue.is_empty() {
                    entry.turns.push_back(namespace.to_string());
                }
                queue.push(work, sender);
                (lane, Err(receiver))
            }
        };
        async move {
            let receiver = match granted {
                Ok(slot) => return slot,
                Err(receiver) => receiver,
            };
            match receiver.await {
                Ok(slot) => slot,
                // The sender is only dropped with a slot sent or the lane's waiters handed on,
                // neither of which leaves this receiver unanswered; should it happen, a slot is
                // taken as if the lane had room rather than leaving the reconcile parked.
                Err(_) => {
                    lock(&inner.lanes).entry(lane.clone()).or_default().busy += 1;
                    inner.slot(&lane)
                }
            }
        }
    }

    /// Reconciles holding a slot and waiting for one, over every lane.
    pub fn counts(&self) -> (usize, usize) {
        let lanes = lock(&self.inner.lanes);
        lanes.values().fold((0, 0), |(busy, waiting), lane| {
            (
                busy + lane.busy,
                waiting + lane.waiting.values().map(Waiting::len).sum::<usize>(),
            )
        })
    }
}

impl Inner {
    fn slot(self: &Arc<Self>, lane: &Arc<str>) -> Slot {
        Slot {
            inner: self.clone(),
            lane: lane.clone(),
            held: true,
        }
    }

    /// A slot of `lane` came free: it goes to the next namespace's oldest waiter still
    /// waiting, or back to the lane.
    fn release(self: &Arc<Self>, lane_name: &Arc<str>) {
        let mut lanes = lock(&self.lanes);
        let Some(lane) = lanes.get_mut(lane_name) else {
            return;
        };
        while let Some(namespace) = lane.turns.pop_front() {
            let Some(queue) = lane.waiting.get_mut(&namespace) else {
                continue;
            };
            let sender = queue.pop();
            if queue.is_empty() {
                lane.waiting.remove(&namespace);
            } else {
                // The namespace's next waiter takes its turn after the others'.
                lane.turns.push_back(namespace);
            }
            let Some(sender) = sender else { continue };
            match sender.send(self.slot(lane_name)) {
                Ok(()) => return,
                // Its reconcile was dropped while waiting: the slot is not given back (that
                // would release it twice), it goes to the next waiter.
                Err(mut unclaimed) => unclaimed.held = false,
            }
        }
        lane.busy = lane.busy.saturating_sub(1);
        if lane.busy == 0 {
            lanes.remove(lane_name);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.held {
            self.inner.release(&self.lane);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::time::Duration;

    /// Starts a reconcile of `namespace` that, once it has a slot, records its name and holds
    /// the slot until told to give it back.
    fn waiter(
        share: &FairShare,
        lane: &'static str,
        namespace: &'static str,
        name: &'static str,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> oneshot::Sender<()> {
        waiter_doing(share, lane, namespace, name, Work::Existing, order)
    }

    fn waiter_doing(
        share: &FairShare,
        lane: &'static str,
        namespace: &'static str,
        name: &'static str,
        work: Work,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> oneshot::Sender<()> {
        let (done, finish) = oneshot::channel::<()>();
        let (share, order) = (share.clone(), order.clone());
        tokio::spawn(async move {
            let _slot = share.slot(lane, namespace, work).await;
            lock(&order).push(name);
            let _ = finish.await;
        });
        done
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn namespaces_take_turns_for_a_lanes_slots() {
        let share = FairShare::new(1);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut running = vec![waiter(&share, "a", "busy", "busy-1", &order)];
        settle().await;
        for name in ["busy-2", "busy-3", "busy-4"] {
            running.push(waiter(&share, "a", "busy", name, &order));
            settle().await;
        }
        running.push(waiter(&share, "a", "quiet", "quiet-1", &order));
        settle().await;
        assert_eq!(share.counts(), (1, 4));
        // Each slot given back goes to the next namespace in turn.
        for done in running {
            let _ = done.send(());
            settle().await;
        }
        assert_eq!(
            *lock(&order),
            ["busy-1", "busy-2", "quiet-1", "busy-3", "busy-4"]
        );
        assert_eq!(share.counts(), (0, 0));
    }

    #[tokio::test]
    async fn within_a_namespace_work_on_existing_resources_and_creates_take_turns() {
        let share = FairShare::new(1);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut running = vec![waiter(&share, "a", "team", "running", &order)];
        settle().await;
        for name in ["create-1", "create-2", "create-3"] {
            running.push(waiter_doing(
                &share,
                "a",
                "team",
                name,
                Work::Create,
                &order,
            ));
            settle().await;
        }
        for name in ["existing-1", "existing-2"] {
            running.push(waiter_doing(
                &share,
                "a",
                "team",
                name,
                Work::Existing,
                &order,
            ));
            settle().await;
        }
        running.push(waiter_doing(
            &share,
            "a",
            "quiet",
            "quiet-1",
            Work::Create,
            &order,
        ));
        settle().await;
        for done in running {
            let _ = done.send(());
            settle().await;
        }
        // In one queue, the machines already made would wait for every create before them;
        // the other namespace keeps its turn.
        assert_eq!(
            *lock(&order),
            [
                "running",
                "existing-1",
                "quiet-1",
                "create-1",
                "existing-2",
                "create-2",
                "create-3"
            ]
        );
        assert_eq!(share.counts(), (0, 0));
    }

    #[tokio::test]
    async fn a_wait_keeps_nothing_of_the_callers_names() {
        let share = FairShare::new(1);
        let (lane, namespace) = ("account-a".to_string(), "team".to_string());
        let held = share.slot(&lane, &namespace, Work::Existing).await;
        let waiting = share.slot(&lane, &namespace, Work::Create);
        drop((lane, namespace));
        let waiting = tokio::spawn(waiting);
        settle().await;
        assert_eq!(share.counts(), (1, 1));
        drop(held);
        let second = waiting.await.unwrap();
        assert_eq!(share.counts(), (1, 0));
        drop(second);
        assert_eq!(share.counts(), (0, 0));
    }

    #[tokio::test]
    async fn a_full_lane_does_not_hold_another() {
        let share = FairShare::new(2);
        let order = Arc::new(Mutex::new(Vec::new()));
        let _busy: Vec<_> = ["a-1", "a-2", "a-3"]
            .into_iter()
            .map(|name| waiter(&share, "account-a", "team", name, &order))
            .collect();
        settle().await;
        let _other = waiter(&share, "account-b", "team", "b-1", &order);
        settle().await;
        assert_eq!(*lock(&order), ["a-1", "a-2", "b-1"]);
    }

    #[tokio::test]
    async fn a_waiter_dropped_before_its_turn_leaves_no_slot_taken() {
        let share = FairShare::new(1);
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = waiter(&share, "a", "team", "first", &order);
        settle().await;
        let abandoned = {
            let share = share.clone();
            tokio::spawn(async move {
                let _slot = share.slot("a", "team", Work::Existing).await;
            })
        };
        settle().await;
        abandoned.abort();
        settle().await;
        let _ = first.send(());
        settle().await;
        assert_eq!(share.counts(), (0, 0));
        // The lane is free again: the next comes at once.
        let _next = waiter(&share, "a", "team", "next", &order);
        settle().await;
        assert_eq!(*lock(&order), ["first", "next"]);
    }
}
