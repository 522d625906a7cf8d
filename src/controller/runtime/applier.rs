//! Runs a kind's reconciles: every due one at once, never two of one object at a time.
//!
//! kube-runtime's `Controller::run` keeps the same promises, but its runner polls every running
//! reconcile, and scans every request held behind one, each time any of them wakes. The billed
//! kinds start every due reconcile at once, each then waiting for its account's fair share
//! (`fair_share.rs`), so at 100,000 objects tens of thousands run at once: that polling, O(running)
//! per wake, took most of the operator's CPU. Here a finished reconcile is taken from a `JoinSet`,
//! which polls only the tasks that woke it, and requeues wait in a `DelayQueue`: each step costs
//! the same however many reconciles run.
//!
//! The queue's rules are kube-runtime's: of two requests for one object the earlier wins; a
//! request that comes due while the object's reconcile runs is held, and the object runs once
//! more when it ends (however many were held); a request for an object the store does not hold
//! is dropped; nothing starts before the store has its first list; on shutdown nothing new
//! starts and the running reconciles finish.

use crate::runtime::store::Store;
use futures::{FutureExt, Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};
use tracing::Instrument;

/// What a reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Run again after `after`, unless a change brings it sooner.
    pub const fn requeue(after: Duration) -> Self {
        Action {
            requeue_after: Some(after),
        }
    }

    /// Run again only when something changes.
    pub const fn await_change() -> Self {
        Action {
            requeue_after: None,
        }
    }

    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// A panicking reconcile is logged and its object tried again this long after: the panic is a
/// bug, but leaving the object unreconciled until something changes would hide it.
const AFTER_PANIC: Duration = Duration::from_secs(60);

/// `object`'s key in the queue and in every map that follows objects: its namespace and name,
/// all a key compares. kube-runtime's `ObjectRef::from_obj` also copies the uid and
/// resourceVersion (`extra`, which nothing here reads) into each key: two more strings in each
/// of the several maps that hold every settled object.
pub fn key_of<K: Resource<DynamicType = ()>>(object: &K) -> ObjectRef<K> {
    let meta = object.meta();
    let key = ObjectRef::new(meta.name.as_deref().unwrap_or_default());
    match meta.namespace.as_deref() {
        Some(namespace) => key.within(namespace),
        None => key,
    }
}

/// Which objects run, which are due to, and when. Pure bookkeeping: starting the reconciles
/// is `run`'s.
struct Queue<T> {
    /// Requests waiting for their time, with that time.
    scheduled: HashMap<T, (delay_queue::Key, Instant)>,
    due: DelayQueue<T>,
    running: HashSet<T>,
    /// Running objects that came due again: run once more when the reconcile ends.
    held: HashSet<T>,
}

impl<T: Hash + Eq + Clone> Queue<T> {
    fn new() -> Self {
        Queue {
            scheduled: HashMap::new(),
            due: DelayQueue::new(),
            running: HashSet::new(),
            held: HashSet::new(),
        }
    }

    /// A request for `item` at `at`: the item to start now, if any. The earlier of two
    /// requests for one item wins.
    fn request(&mut self, item: T, at: Instant, now: Instant) -> Option<T> {
        if self.held.contains(&item) {
            // Runs as soon as the running reconcile ends: nothing can be sooner.
            return None;
        }
        if at <= now {
            if let Some((key, _)) = self.scheduled.remove(&item) {
                self.due.remove(&key);
            }
            return self.came_due(item);
        }
        match self.scheduled.get_mut(&item) {
            Some((key, when)) => {
                if at < *when {
                    self.due.reset_at(key, at);
                    *when = at;
                }
            }
            None => {
                let key = self.due.insert_at(item.clone(), at);
                self.scheduled.insert(item, (key, at));
            }
        }
        None
    }

    /// `item`'s time came: the item to start, unless it runs already (then it is held).
    fn came_due(&mut self, item: T) -> Option<T> {
        if self.running.contains(&item) {
            self.held.insert(item);
            None
        } else {
            Some(item)
        }
    }

    /// A scheduled request's time came.
    fn expired(&mut self, item: T) -> Option<T> {
        self.scheduled.remove(&item);
        self.came_due(item)
    }

    fn started(&mut self, item: T) {
        self.running.insert(item);
    }

    /// `item`'s reconcile ended asking to run again after `requeue`: the item to start again
    /// now if it came due while it ran (that run's end then decides what comes next).
    fn finished(&mut self, item: T, requeue: Option<Duration>, now: Instant) -> Option<T> {
        self.running.remove(&item);
        // A convergence runs nearly every object at once, a settled kind few: the tables
        // would otherwise keep the convergence's size for good.
        shrink_if_sparse(&mut self.running);
        let held = self.held.remove(&item);
        shrink_if_sparse(&mut self.held);
        if held {
            return Some(item);
        }
        let after = requeue?;
        let at = now
            .checked_add(after)
            .unwrap_or(now + Duration::from_secs(86_400 * 365));
        self.request(item, at, now)
    }

    /// Waits for the next scheduled request to come due; never, while none is scheduled.
    async fn next_expired(&mut self) -> T {
        match futures::future::poll_fn(|cx| self.due.poll_expired(cx)).await {
            Some(expired) => expired.into_inner(),
            None => futures::future::pending().await,
        }
    }
}

/// Gives back most of `set`'s room once it holds under an eighth of it, keeping twice what it
/// holds: shrinking again takes another large drop, so it costs a constant per removal.
fn shrink_if_sparse<T: Hash + Eq>(set: &mut HashSet<T>) {
    if set.capacity() > 64 && set.len() * 8 < set.capacity() {
        set.shrink_to(set.len() * 2);
    }
}

/// Runs `reconcile` for each object `triggers` names (and again when its `Action` or
/// `error_policy` asks) until `shutdown` resolves or the triggers end; then waits for the
/// running reconciles.
pub async fn run<K, E, Ctx, Fut>(
    triggers: impl Stream<Item = ObjectRef<K>> + Send,
    store: Store<K>,
    reconcile: impl Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    error_policy: impl Fn(Arc<K>, &E, Arc<Ctx>) -> Action + Send + Sync + 'static,
    cx: Arc<Ctx>,
    shutdown: impl Future<Output = ()> + Send,
) where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
    Ctx: Send + Sync + 'static,
    E: Send + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let reconcile = Arc::new(reconcile);
    let error_policy = Arc::new(error_policy);
    // One key per object, shared by the queue's tables (each settled object is in two).
    let mut queue = Queue::<Arc<ObjectRef<K>>>::new();
    let mut tasks: JoinSet<(Arc<ObjectRef<K>>, Option<Duration>)> = JoinSet::new();
    // Objects due before the store had its first list.
    let mut before_ready: HashSet<Arc<ObjectRef<K>>> = HashSet::new();
    let mut ready = false;
    let ready_store = store.clone();
    let mut store_ready = std::pin::pin!(ready_store.wait_until_ready().fuse());
    let mut triggers = std::pin::pin!(triggers);
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    let mut accepting = true;

    let start = |item: Arc<ObjectRef<K>>,
                 queue: &mut Queue<Arc<ObjectRef<K>>>,
                 tasks: &mut JoinSet<(Arc<ObjectRef<K>>, Option<Duration>)>,
                 before_ready: &mut HashSet<Arc<ObjectRef<K>>>,
                 ready: bool| {
        if !ready {
            before_ready.insert(item);
            return;
        }
        // As kube-runtime: an object the store lacks is gone, or comes with a later trigger.
        let Some(object) = store.get(&item) else {
            tracing::debug!(object = %item, "trigger for an object not in the store; dropped");
            return;
        };
        queue.started(item.clone());
        let (reconcile, error_policy, cx) = (reconcile.clone(), error_policy.clone(), cx.clone());
        // No span of its own per task: a convergence starts nearly every object's reconcile at
        // once, most of them to wait for a slot of their account, and each open span would hold
        // its formatted fields and a slot of the subscriber's, which keeps that many for good.
        // The task runs in the applier's span (a handle, nothing recorded), and the reconcile
        // opens its own once it runs (`flow/reconcile/mod.rs`).
        let task = async move {
            let outcome = AssertUnwindSafe(reconcile(object.clone(), cx.clone()))
                .catch_unwind()
                .await;
            let requeue = match outcome {
                Ok(Ok(action)) => action.requeue_after(),
                Ok(Err(error)) => error_policy(object, &error, cx).requeue_after(),
                Err(_) => {
                    tracing::error!(object = %item, "reconcile panicked");
                    Some(AFTER_PANIC)
                }
            };
            (item, requeue)
        };
        tasks.spawn(task.in_current_span());
    };

    loop {
        if !accepting && tasks.is_empty() {
            return;
        }
        // Unbiased: each pass tries the branches in a random order, so reconciles that finish
        // back to back, or requeues that keep coming due, never starve the triggers.
        tokio::select! {
            Some(joined) = tasks.join_next() => {
                // Tasks are aborted only when this future is dropped, and a panic is caught
                // inside the task: every join carries its object.
                let Ok((item, requeue)) = joined else { continue };
                if let Some(again) = queue.finished(item, requeue, Instant::now())
                    && accepting
                {
                    start(again, &mut queue, &mut tasks, &mut before_ready, ready);
                }
            }
            () = &mut shutdown, if accepting => accepting = false,
            result = &mut store_ready, if !ready => {
                ready = true;
                if result.is_err() {
                    // The store's writer is gone: so is the watch, and this controller with it.
                    accepting = false;
                    continue;
                }
                for item in std::mem::take(&mut before_ready) {
                    start(item, &mut queue, &mut tasks, &mut before_ready, ready);
                }
            }
            item = queue.next_expired(), if accepting => {
                if let Some(item) = queue.expired(item) {
                    start(item, &mut queue, &mut tasks, &mut before_ready, ready);
                }
            }
            trigger = triggers.next(), if accepting => match trigger {
                Some(item) => {
                    let now = Instant::now();
                    if let Some(item) = queue.request(Arc::new(item), now, now) {
                        start(item, &mut queue, &mut tasks, &mut before_ready, ready);
                    }
                }
                None => accepting = false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A ConfigMap named `name` in `team-a`.
    fn config_map(name: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        k8s_openapi::api::core::v1::ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some("team-a".to_string()),
                ..kube::api::ObjectMeta::default()
            },
            ..Default::default()
        }
    }

    /// A store whose first list held `objects`.
    fn listed<'a>(
        objects: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::ConfigMap>,
    ) -> Store<k8s_openapi::api::core::v1::ConfigMap> {
        use kube::runtime::watcher::Event;
        let (store, mut writer) = crate::runtime::store::store();
        writer.apply_watcher_event(&Event::Init);
        for object in objects {
            writer.apply_watcher_event(&Event::InitApply(object.clone()));
        }
        writer.apply_watcher_event(&Event::InitDone);
        store
    }

    #[test]
    fn a_table_gives_back_its_room_once_sparse() {
        let mut running: HashSet<u32> = (0..100_000).collect();
        let grown = running.capacity();
        for n in 0..99_000 {
            running.remove(&n);
            shrink_if_sparse(&mut running);
        }
        assert_eq!(running.len(), 1_000);
        // At most a sixteenth: 1,000 items shrink to 8,192 buckets (7,168 places) of the
        // 131,072 grown; `capacity()` also counts tombstones out, so it may read lower.
        assert!(
            running.capacity() <= grown / 16,
            "{} of {grown}",
            running.capacity()
        );
        assert!(running.capacity() >= 2 * running.len());
        // Never below its contents, nor shrunk while dense.
        let mut small: HashSet<u32> = (0..60).collect();
        let room = small.capacity();
        shrink_if_sparse(&mut small);
        assert_eq!(small.capacity(), room);
    }

    #[tokio::test]
    async fn a_reconcile_runs_in_the_span_the_applier_runs_in() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let _subscriber = tracing::subscriber::set_default(tracing_subscriber::registry());
        let object = config_map("trainer");
        let store = listed([&object]);
        let (triggers, received) = tokio::sync::mpsc::unbounded_channel();
        triggers.send(ObjectRef::from_obj(&object)).unwrap();
        let (seen, mut spans) = tokio::sync::mpsc::unbounded_channel();
        let reconcile = |_: Arc<ConfigMap>, seen: Arc<tokio::sync::mpsc::UnboundedSender<_>>| async move {
            let _ = seen.send(tracing::Span::current().metadata().map(|span| span.name()));
            Ok::<_, std::convert::Infallible>(Action::await_change())
        };
        let applier = tokio::spawn(
            run(
                tokio_stream::wrappers::UnboundedReceiverStream::new(received),
                store,
                reconcile,
                |_, _, _| Action::await_change(),
                Arc::new(seen),
                std::future::pending(),
            )
            .instrument(tracing::info_span!("world")),
        );
        let span = tokio::time::timeout(secs(5), spans.recv()).await;
        applier.abort();
        assert_eq!(span.unwrap(), Some(Some("world")));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_trigger_is_taken_while_reconciles_finish_back_to_back() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let busy: Vec<ConfigMap> = (0..2000)
            .map(|n| config_map(&format!("busy-{n}")))
            .collect();
        let late_map = config_map("late");
        let store = listed(busy.iter().chain([&late_map]));
        let (triggers, received) = tokio::sync::mpsc::unbounded_channel();
        for object in &busy {
            triggers.send(ObjectRef::from_obj(object)).unwrap();
        }
        let late = Arc::new(tokio::sync::Notify::new());
        // Every busy object's reconcile waits a moment (its I/O) and asks to run again at once,
        // for as long as the test runs: more finish each moment than the applier takes in.
        let reconcile = move |object: Arc<ConfigMap>, late: Arc<tokio::sync::Notify>| async move {
            if object.metadata.name.as_deref() == Some("late") {
                late.notify_one();
                return Ok::<_, std::convert::Infallible>(Action::await_change());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(Action::requeue(Duration::ZERO))
        };
        let applier = tokio::spawn(run(
            tokio_stream::wrappers::UnboundedReceiverStream::new(received),
            store,
            reconcile,
            |_, _, _| Action::await_change(),
            late.clone(),
            std::future::pending(),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        triggers.send(ObjectRef::from_obj(&late_map)).unwrap();
        let taken = tokio::time::timeout(secs(5), late.notified()).await;
        applier.abort();
        assert!(
            taken.is_ok(),
            "the trigger waited behind the busy reconciles"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_while_running_is_held_and_runs_once_when_the_reconcile_ends() {
        let mut queue = Queue::new();
        let now = Instant::now();
        assert_eq!(queue.request("a", now, now), Some("a"));
        queue.started("a");
        assert_eq!(queue.request("a", now, now), None, "held while running");
        assert_eq!(queue.request("a", now, now), None, "held once");
        assert_eq!(queue.finished("a", None, now), Some("a"), "runs again");
        queue.started("a");
        assert_eq!(queue.finished("a", None, now), None, "and only once");
    }

    #[tokio::test(start_paused = true)]
    async fn of_two_requests_the_earlier_wins() {
        let mut queue = Queue::new();
        let now = Instant::now();
        assert_eq!(queue.request("a", now + secs(60), now), None);
        assert_eq!(
            queue.request("a", now + secs(90), now),
            None,
            "later: ignored"
        );
        assert_eq!(
            queue.request("a", now + secs(30), now),
            None,
            "earlier: moved"
        );
        tokio::time::advance(secs(30)).await;
        assert_eq!(queue.next_expired().await, "a");
        assert_eq!(queue.expired("a"), Some("a"));
        assert!(
            queue.scheduled.is_empty() && queue.due.is_empty(),
            "only one timer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_now_takes_the_place_of_a_scheduled_one() {
        let mut queue = Queue::new();
        let now = Instant::now();
        queue.request("a", now + secs(60), now);
        assert_eq!(queue.request("a", now, now), Some("a"));
        assert!(queue.scheduled.is_empty() && queue.due.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_requeue_is_scheduled_when_the_reconcile_ends_unless_it_came_due_meanwhile() {
        let mut queue = Queue::new();
        let now = Instant::now();
        queue.started("a");
        assert_eq!(queue.finished("a", Some(secs(10)), now), None);
        assert_eq!(
            queue.scheduled.get(&"a").map(|(_, at)| *at),
            Some(now + secs(10))
        );

        queue.started("b");
        queue.request("b", now, now);
        assert_eq!(
            queue.finished("b", Some(secs(10)), now),
            Some("b"),
            "held: now"
        );
        assert!(
            !queue.scheduled.contains_key(&"b"),
            "the next run's end decides"
        );
        // A requeue of zero runs at once.
        queue.started("c");
        assert_eq!(queue.finished("c", Some(Duration::ZERO), now), Some("c"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_scheduled_request_that_comes_due_while_running_is_held() {
        let mut queue = Queue::new();
        let now = Instant::now();
        queue.request("a", now + secs(5), now);
        queue.started("a");
        tokio::time::advance(secs(5)).await;
        let item = queue.next_expired().await;
        assert_eq!(queue.expired(item), None);
        assert_eq!(queue.finished("a", None, Instant::now()), Some("a"));
    }

    #[test]
    fn a_key_is_the_objects_namespace_and_name_only() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::ObjectMeta;
        let object = |namespace: Option<&str>| ConfigMap {
            metadata: ObjectMeta {
                name: Some("m".to_string()),
                namespace: namespace.map(str::to_string),
                uid: Some("0b1c2d3e-0000-4000-8000-000000000001".to_string()),
                resource_version: Some("4711".to_string()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        for namespace in [Some("team-a"), None] {
            let key = key_of(&object(namespace));
            // Found under the key kube-runtime's store gives the same object.
            assert_eq!(key, ObjectRef::from_obj(&object(namespace)));
            assert_eq!(key.name, "m");
            assert_eq!(key.namespace.as_deref(), namespace);
            assert_eq!(key.extra.uid, None);
            assert_eq!(key.extra.resource_version, None);
        }
        assert_ne!(
            key_of(&object(Some("team-a"))),
            key_of(&object(Some("team-b")))
        );
    }
}
