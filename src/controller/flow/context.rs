//! Per-kind context handed to every reconcile of that kind.

use crate::accounts::account::{Account, AccountId, Accounts, SecretLocation};
use crate::accounts::catalog::Want;
use crate::accounts::observer::{Changes, ObserveIntervals, Observer};
use crate::flow::adoption::Ownership;
use crate::flow::backoff::RequeuePolicy;
use crate::flow::declarations::{KindDeclarations, Record};
use crate::flow::gauges::KindGauges;
use crate::lock;
use crate::runtime::clock::Clock;
use crate::runtime::events::EventPublisher;
use crate::runtime::fair_share::FairShare;
use crate::runtime::own_writes::OwnWrites;
use gpucloud_api::{Budget, GpuPolicy, PendingCreate};
use gpucloud_telemetry::Metrics;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Settings of the reconcile flow.
#[derive(Debug, Clone)]
pub struct ReconcileSettings {
    /// How long after a create attempt a missing resource may still be on its way into the
    /// cloud's lists. Must exceed the cloud's list lag.
    pub settle_window: Duration,
    /// Billed creates are refused while the balance is below this.
    pub budget_floor: f64,
    /// Requeue interval while an object is in transition.
    pub transition_requeue: Duration,
    pub observe: ObserveIntervals,
    /// The operator's namespace: where resources left in the cloud on purpose
    /// (`deletionPolicy: Orphan`) are recorded for the orphan sweeper.
    pub operator_namespace: String,
    /// Whether objects may adopt cloud resources the operator did not create for them, in
    /// namespaces labelled for it (`adoption.rs`).
    pub allow_adoption: bool,
    /// What happens to a second resource under an object's cloud name.
    pub duplicates: DuplicateSettings,
    /// The time lifetimes, power schedules and Budget periods are read at, and their timers
    /// set by (`clock.rs`): the wall clock but in tests.
    pub clock: Clock,
}

/// Duplicates: resources carrying an object's cloud name other than the one it recorded (a
/// create the cloud carried out long after the client gave up, and the create that followed).
#[derive(Debug, Clone, Copy)]
pub struct DuplicateSettings {
    /// How long a duplicate is only reported before it is deleted.
    pub grace_period: Duration,
    /// Delete duplicates past the grace period (never one in use); off, they are only reported.
    pub delete: bool,
}

impl Default for DuplicateSettings {
    fn default() -> Self {
        DuplicateSettings {
            grace_period: Duration::from_secs(600),
            delete: true,
        }
    }
}

impl Default for ReconcileSettings {
    fn default() -> Self {
        ReconcileSettings {
            settle_window: Duration::from_secs(30),
            budget_floor: 0.0,
            transition_requeue: Duration::from_secs(2),
            observe: ObserveIntervals::default(),
            operator_namespace: "gpucloud-system".into(),
            allow_adoption: false,
            duplicates: DuplicateSettings::default(),
            clock: Clock::real(),
        }
    }
}

/// How long a removed finalizer is remembered: far longer than a watch takes to deliver the
/// deletion, far shorter than the life of a process.
const RELEASED_REMEMBERED: Duration = Duration::from_secs(600);

/// When the cloud first and last answered this process's delete of one object.
#[derive(Debug, Clone, Copy)]
struct DeleteAnswers {
    first: Instant,
    last: Instant,
}

/// What an object waits for in its account, read by one task per account.
#[derive(Debug, Clone)]
pub enum Awaited {
    /// GPUs in stock: any of these would do.
    Stock(Vec<Want>),
    /// A balance at or above this floor.
    Credit(f64),
}

/// Objects waiting for something in their account, by account.
type CapacityWaiters<K> = HashMap<AccountId, HashMap<ObjectRef<K>, Awaited>>;
/// Objects waiting for a list sent after a moment, by account, each with that moment.
type ListWaiters<K> = HashMap<AccountId, HashMap<ObjectRef<K>, Instant>>;

/// What every controller shares.
pub struct Shared {
    pub client: kube::Client,
    pub accounts: Arc<Accounts>,
    pub events: Arc<EventPublisher>,
    /// Every kind's objects: who owns which cloud resource.
    pub ownership: Arc<Ownership>,
}

/// A create call that failed without a definite answer: it may have been carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateFailure {
    pub reason: &'static str,
    pub message: String,
}

/// Everything a reconcile of kind `K` needs.
pub struct Context<K: KindDeclarations> {
    pub client: kube::Client,
    pub accounts: Arc<Accounts>,
    pub settings: ReconcileSettings,
    pub requeue: RequeuePolicy,
    pub events: Arc<EventPublisher>,
    pub metrics: Arc<Metrics>,
    /// The kind's scrape-time state, holding the controller's store.
    pub gauges: Arc<KindGauges<K>>,
    /// Every kind's objects: who owns which cloud resource.
    pub ownership: Arc<Ownership>,
    /// This process's latest write of each object, until the store has it (`own_writes.rs`).
    pub own_writes: OwnWrites<K>,
    /// The reconcile slots of each account, shared out between namespaces.
    pub fair_share: FairShare,
    /// The Budgets of the controller's scope (`budget.rs`): those that keep a machine off.
    pub budgets: Store<Budget>,
    /// The cluster's GpuPolicies (`gpu_policy.rs`): those that cap a machine's lifetime.
    pub policies: Store<GpuPolicy>,
    observers: Mutex<HashMap<AccountId, Arc<Observer<Record<K>>>>>,
    changes: mpsc::UnboundedSender<(AccountId, Changes)>,
    /// When the cloud first and last answered this process's delete for an object (by uid):
    /// a list sent after the last shows whether the resource is gone, with no need to wait for
    /// a newer one; the first tells how long the deletion has been under way.
    deletes_answered: Mutex<HashMap<String, DeleteAnswers>>,
    /// When this process's last create call for an object (by uid) ended: a list sent before
    /// that may not show what it created (the call may have waited for the rate limiter, or
    /// the cloud may have acted after the client gave up), so the settle window counts from
    /// there.
    creates_ended: Mutex<HashMap<String, Timestamp>>,
    /// The id this process's create call answered with, by object uid, until a list shows it.
    creates_answered: Mutex<HashMap<String, String>>,
    /// By object uid, how the object's last create call failed without a definite answer
    /// (a server error, a timeout): shown while its list is awaited.
    creates_failed: Mutex<HashMap<String, CreateFailure>>,
    /// When this process first saw each duplicate (by cloud id): its grace period counts from
    /// there, so a restart only makes it longer.
    duplicates_seen: Mutex<HashMap<String, Instant>>,
    /// Objects (by uid) whose finalizer this process removed, and when: a copy of one still
    /// holding the finalizer is the cache behind, not a deletion to run again.
    released: Mutex<HashMap<String, Instant>>,
    /// Objects waiting for an account's cloud to answer again, by account, and
    /// the accounts whose recoveries are listened to.
    outage_waiters: Arc<Mutex<HashMap<AccountId, HashSet<ObjectRef<K>>>>>,
    recovery_listeners: Mutex<HashSet<AccountId>>,
    /// Objects waiting for GPUs in stock, by account, with the GPUs that would do
    /// (`wait_in_account`).
    capacity_waiters: Arc<Mutex<CapacityWaiters<K>>>,
    /// Creates waiting for a cloud list sent after they began to wait, by account, each
    /// with that moment (`wait_for_next_list`).
    list_waiters: Arc<Mutex<ListWaiters<K>>>,
    /// Asks the controller to reconcile an object now.
    trigger: mpsc::UnboundedSender<ObjectRef<K>>,
    /// Credentials whose observer `prepare` has started.
    prepared: Mutex<HashSet<SecretLocation>>,
    /// When this context was made. A create call of an earlier process (one killed mid-call)
    /// ended at the latest then.
    started: Timestamp,
}

impl<K: KindDeclarations> Context<K> {
    /// Where this kind's reconciles read the objects theirs refer to (`dereference.rs`).
    pub fn lookup<'a>(
        &'a self,
        account: &'a crate::accounts::account::Account,
    ) -> crate::flow::dereference::Lookup<'a> {
        crate::flow::dereference::Lookup {
            client: &self.client,
            stores: &self.ownership,
            cloud: &account.client,
            live: false,
        }
    }

    /// Builds the context and the task that turns cloud changes into reconcile requests for
    /// the objects they concern, found through `store`.
    pub fn new(
        shared: &Shared,
        settings: ReconcileSettings,
        metrics: Arc<Metrics>,
        gauges: Arc<KindGauges<K>>,
        trigger: mpsc::UnboundedSender<ObjectRef<K>>,
        (budgets, policies): (Store<Budget>, Store<GpuPolicy>),
        fair_share: FairShare,
    ) -> Arc<Self> {
        let store = gauges.store().clone();
        let own_writes = OwnWrites::new(store.clone());
        let woken = gauges.clone();
        let triggers = trigger.clone();
        let (changes, mut received) = mpsc::unbounded_channel::<(AccountId, Changes)>();
        tokio::spawn(async move {
            while let Some((_account, first)) = received.recv().await {
                let changes = merge_queued(first, &mut received);
                let started = Instant::now();
                let concerned = objects_concerned(&store, &changes);
                let pass = started.elapsed();
                for object in concerned {
                    woken.triggered(&object);
                    if trigger.send(object).is_err() {
                        return;
                    }
                }
                tokio::time::sleep(pass * PAUSE_PER_PASS).await;
            }
        });
        Arc::new(Context {
            client: shared.client.clone(),
            accounts: shared.accounts.clone(),
            requeue: RequeuePolicy::new(
                gpucloud_cloud::Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
                Duration::from_secs(300),
                settings.transition_requeue,
            ),
            events: shared.events.clone(),
            metrics,
            gauges,
            ownership: shared.ownership.clone(),
            own_writes,
            fair_share,
            budgets,
            policies,
            settings,
            observers: Mutex::new(HashMap::new()),
            changes,
            deletes_answered: Mutex::new(HashMap::new()),
            creates_ended: Mutex::new(HashMap::new()),
            creates_answered: Mutex::new(HashMap::new()),
            creates_failed: Mutex::new(HashMap::new()),
            duplicates_seen: Mutex::new(HashMap::new()),
            released: Mutex::new(HashMap::new()),
            outage_waiters: Arc::new(Mutex::new(HashMap::new())),
            recovery_listeners: Mutex::new(HashSet::new()),
            capacity_waiters: Arc::new(Mutex::new(HashMap::new())),
            list_waiters: Arc::new(Mutex::new(HashMap::new())),
            trigger: triggers,
            prepared: Mutex::new(HashSet::new()),
            started: Timestamp::now(),
        })
    }

    /// Records that the cloud has just answered the delete for the object `uid`.
    pub fn note_delete_answered(&self, uid: &str) {
        let now = Instant::now();
        lock(&self.deletes_answered)
            .entry(uid.to_string())
            .and_modify(|answers| answers.last = now)
            .or_insert(DeleteAnswers {
                first: now,
                last: now,
            });
    }

    /// When the cloud last answered this process's delete for the object `uid`.
    pub fn delete_answered_at(&self, uid: &str) -> Option<Instant> {
        lock(&self.deletes_answered).get(uid).map(|a| a.last)
    }

    /// When the cloud first answered this process's delete for the object `uid`.
    pub fn delete_first_answered_at(&self, uid: &str) -> Option<Instant> {
        lock(&self.deletes_answered).get(uid).map(|a| a.first)
    }

    /// Forgets the object `uid`'s delete: its finalizer is going.
    pub fn forget_delete(&self, uid: &str) {
        lock(&self.deletes_answered).remove(uid);
    }

    /// Notes that the object `uid`'s finalizer was removed; forgets those removed long enough
    /// ago for any cache to have seen it.
    pub fn note_released(&self, uid: &str) {
        let mut released = lock(&self.released);
        released.retain(|_, at| at.elapsed() < RELEASED_REMEMBERED);
        released.insert(uid.to_string(), Instant::now());
    }

    /// Whether this process removed the object `uid`'s finalizer (recently).
    pub fn was_released(&self, uid: &str) -> bool {
        lock(&self.released)
            .get(uid)
            .is_some_and(|at| at.elapsed() < RELEASED_REMEMBERED)
    }

    /// When the duplicate `id` was first seen, and whether that is now.
    pub fn duplicate_seen(&self, id: &str) -> (Instant, bool) {
        let mut seen = lock(&self.duplicates_seen);
        match seen.get(id) {
            Some(first) => (*first, false),
            None => {
                let now = Instant::now();
                seen.insert(id.to_string(), now);
                (now, true)
            }
        }
    }

    /// Forgets the duplicate `id`: it is gone.
    pub fn forget_duplicate(&self, id: &str) {
        lock(&self.duplicates_seen).remove(id);
    }

    /// Makes `object` wait for `account`'s cloud to answer again: it is reconciled at the
    /// account's recovery (found by its observers, which list fast meanwhile), not on a
    /// per-object timer that grew through the outage.
    pub fn wait_for_recovery(&self, account: &Arc<Account>, object: ObjectRef<K>) {
        self.observer(account).mark_hot();
        lock(&self.outage_waiters)
            .entry(account.id)
            .or_default()
            .insert(object);
        if lock(&self.recovery_listeners).insert(account.id) {
            self.listen_for_recoveries(account);
        }
        // Up again before the wait was noted (or the listener subscribed): no recovery will
        // come to wake it, so it is woken now.
        if !account.is_down() {
            let waiting = lock(&self.outage_waiters)
                .remove(&account.id)
                .unwrap_or_default();
            for object in waiting {
                self.gauges.triggered(&object);
                let _ = self.trigger.send(object);
            }
        }
    }

    /// Wakes the objects waiting for `account`'s cloud at each of its recoveries.
    fn listen_for_recoveries(&self, account: &Arc<Account>) {
        let mut recoveries = account.recoveries();
        let (waiters, trigger, woken) = (
            self.outage_waiters.clone(),
            self.trigger.clone(),
            self.gauges.clone(),
        );
        let id = account.id;
        tokio::spawn(async move {
            while recoveries.changed().await.is_ok() {
                let waiting = lock(&waiters).remove(&id).unwrap_or_default();
                for object in waiting {
                    woken.triggered(&object);
                    if trigger.send(object).is_err() {
                        return;
                    }
                }
            }
        });
    }

    /// Makes `object` wait for something in its account: GPUs in stock its catalog shows, or a
    /// balance back above the floor. One task per account reads the catalog (three calls)
    /// once per catalog TTL and the balance (one) once per half TTL, each only while an
    /// object waits for it, and wakes those it now can serve, all from that one read: no
    /// object polls the cloud, and a top-up is seen within one resync interval.
    pub fn wait_in_account(&self, account: &Arc<Account>, object: ObjectRef<K>, awaited: Awaited) {
        let mut waiters = lock(&self.capacity_waiters);
        let first = !waiters.contains_key(&account.id);
        waiters
            .entry(account.id)
            .or_default()
            .insert(object, awaited);
        if !first {
            return;
        }
        drop(waiters);
        let (waiters, trigger, woken) = (
            self.capacity_waiters.clone(),
            self.trigger.clone(),
            self.gauges.clone(),
        );
        let account = account.clone();
        tokio::spawn(async move {
            let interval = account.catalog_ttl() / 2;
            let mut ticks: u64 = 0;
            loop {
                // Ends with the controller (its trigger's receiver), stopped or not: a process
                // that runs the controllers again would otherwise keep a reader per stint.
                tokio::select! {
                    () = trigger.closed() => return,
                    () = tokio::time::sleep(interval) => {}
                }
                let (stock, credit) = {
                    let waiters = lock(&waiters);
                    let waiting = waiters
                        .get(&account.id)
                        .into_iter()
                        .flat_map(|w| w.values());
                    waiting.fold((false, false), |(stock, credit), awaited| match awaited {
                        Awaited::Stock(_) => (true, credit),
                        Awaited::Credit(_) => (stock, true),
                    })
                };
                // The catalog every other tick, once per TTL (a read of the last half TTL, a
                // reconcile's, serves); the balance, one call, at every tick.
                ticks += 1;
                let catalog = match stock && ticks.is_multiple_of(2) {
                    true => account.catalog_within(interval).await.map(Some),
                    false => Ok(None),
                };
                let catalog = catalog.unwrap_or_else(|error| {
                    tracing::warn!(account = %account.id, %error, "the GPU catalog could not be read; objects waiting for stock wait on");
                    None
                });
                let balance = match credit {
                    true => account.client.get_balance().await.map(Some),
                    false => Ok(None),
                };
                let balance = balance.unwrap_or_else(|error| {
                    tracing::warn!(account = %account.id, %error, "the balance could not be read; objects waiting for credit wait on");
                    None
                });
                let ready: Vec<ObjectRef<K>> = {
                    let mut waiters = lock(&waiters);
                    let Some(waiting) = waiters.get_mut(&account.id) else {
                        return;
                    };
                    let ready: Vec<ObjectRef<K>> = waiting
                        .iter()
                        .filter(|(_, awaited)| match awaited {
                            Awaited::Stock(wants) => {
                                catalog.as_ref().is_some_and(|c| c.satisfies_any(wants))
                            }
                            Awaited::Credit(floor) => {
                                balance.as_ref().is_some_and(|b| b.balance >= *floor)
                            }
                        })
                        .map(|(object, _)| object.clone())
                        .collect();
                    for object in &ready {
                        waiting.remove(object);
                    }
                    if waiting.is_empty() || account.is_retired() {
                        waiters.remove(&account.id);
                    }
                    ready
                };
                for object in ready {
                    woken.triggered(&object);
                    if trigger.send(object).is_err() {
                        return;
                    }
                }
                if !lock(&waiters).contains_key(&account.id) {
                    return;
                }
            }
        });
    }

    /// Makes `object` wait for a list of its kind in `account` sent from now on: it is
    /// reconciled when one comes, however many lists fail before it. One task per account
    /// waits while anything does, so a create that needs a fresh list to tell whether it
    /// happened costs nothing while the lists fail, rather than a reconcile per tick.
    pub fn wait_for_next_list(&self, account: &Arc<Account>, object: ObjectRef<K>) {
        let since = Instant::now();
        let mut waiters = lock(&self.list_waiters);
        let first = !waiters.contains_key(&account.id);
        waiters.entry(account.id).or_default().insert(object, since);
        if !first {
            return;
        }
        drop(waiters);
        let observer = self.observer(account);
        let (waiters, trigger, woken) = (
            self.list_waiters.clone(),
            self.trigger.clone(),
            self.gauges.clone(),
        );
        let id = account.id;
        tokio::spawn(async move {
            let mut earliest = since;
            loop {
                let list = tokio::select! {
                    () = trigger.closed() => return,
                    list = observer.succeeded_after(earliest) => list,
                };
                // A list loop that ended (the account retired) wakes every waiter: its
                // reconcile finds the observer that replaces it.
                let listed_at = list.and_then(|list| list.listed_at);
                let (ready, done) = {
                    let mut waiters = lock(&waiters);
                    let Some(waiting) = waiters.get_mut(&id) else {
                        return;
                    };
                    let ready: Vec<ObjectRef<K>> = waiting
                        .iter()
                        .filter(|(_, since)| listed_at.is_none_or(|listed| **since <= listed))
                        .map(|(object, _)| object.clone())
                        .collect();
                    for object in &ready {
                        waiting.remove(object);
                    }
                    // Emptied under the lock that registers: a waiter after this starts a
                    // task of its own.
                    let done = match waiting.values().min() {
                        Some(next) if listed_at.is_some() => {
                            earliest = *next;
                            false
                        }
                        _ => {
                            waiters.remove(&id);
                            true
                        }
                    };
                    (ready, done)
                };
                for object in ready {
                    woken.triggered(&object);
                    if trigger.send(object).is_err() {
                        return;
                    }
                }
                if done {
                    return;
                }
            }
        });
    }

    /// Records that this process's create call for the object `uid` has just ended.
    pub fn note_create_call_ended(&self, uid: &str) {
        lock(&self.creates_ended).insert(uid.to_string(), Timestamp::now());
    }

    /// Forgets the object `uid`'s create call: a list has shown the resource, or the object
    /// is going.
    pub fn forget_create(&self, uid: &str) {
        lock(&self.creates_ended).remove(uid);
        lock(&self.creates_answered).remove(uid);
        lock(&self.creates_failed).remove(uid);
    }

    /// Notes how the object `uid`'s create call failed without a definite answer: until a
    /// list tells whether it was carried out, the object shows that failure.
    pub fn note_create_failed(&self, uid: &str, error: &crate::flow::error::Error) {
        let failure = CreateFailure {
            reason: error.reason(),
            message: error.to_string(),
        };
        lock(&self.creates_failed).insert(uid.to_string(), failure);
    }

    /// How the object `uid`'s last create call failed, while no list has told its outcome.
    pub fn create_failed(&self, uid: &str) -> Option<CreateFailure> {
        lock(&self.creates_failed).get(uid).cloned()
    }

    /// Notes that the object `uid`'s create call answered with the resource `id`: until a
    /// list shows it, the resource is read by that id before a create is tried again.
    pub fn note_create_answered(&self, uid: &str, id: &str) {
        lock(&self.creates_answered).insert(uid.to_string(), id.to_string());
    }

    /// The id the object `uid`'s create call answered with, while no list has shown it.
    pub fn create_answered(&self, uid: &str) -> Option<String> {
        lock(&self.creates_answered).get(uid).cloned()
    }

    /// The last moment a create recorded in `pending` may have been in flight: the attempt's
    /// start, the end of this process's call if it outlived that, and never before this
    /// process started (an earlier process's call ended at the latest when it stopped). The
    /// settle window counts from here.
    pub fn create_in_flight_until(&self, uid: &str, pending: &PendingCreate) -> Timestamp {
        let latest = pending.started_at.0.max(self.started);
        match lock(&self.creates_ended).get(uid) {
            Some(ended) => latest.max(*ended),
            None => latest,
        }
    }

    /// Starts the observer of `object`'s account, once per credentials Secret. A starting
    /// controller checks or reconciles no object before its whole list has arrived from the
    /// API server: started from the first listed object of each account, every account's
    /// first cloud list runs meanwhile, all at once.
    pub fn prepare(self: &Arc<Self>, object: &K) {
        let namespace = object.meta().namespace.as_deref().unwrap_or_default();
        let reference = object.managed().credentials_secret_ref.as_ref();
        let Some(location) = self.accounts.secret_for(namespace, reference) else {
            return;
        };
        if !lock(&self.prepared).insert(location) {
            return;
        }
        let cx = self.clone();
        let (namespace, reference) = (namespace.to_string(), reference.cloned());
        tokio::spawn(async move {
            // A failure is the first reconcile's to report.
            if let Ok(account) = cx.accounts.resolve(&namespace, reference.as_ref()).await {
                cx.observer(&account);
            }
        });
    }

    /// The observer of this kind in `account`, started on first use (and again should its
    /// list loop have ended, so no reconcile works from a frozen list).
    pub fn observer(&self, account: &Arc<Account>) -> Arc<Observer<Record<K>>> {
        let mut observers = lock(&self.observers);
        match observers.get(&account.id) {
            Some(observer) if observer.is_running() => observer.clone(),
            _ => {
                let observer = Observer::spawn::<K::Cloud>(
                    account.clone(),
                    self.settings.observe,
                    self.changes.clone(),
                );
                observers.insert(account.id, observer.clone());
                observer
            }
        }
    }
}

/// After each pass over the store, the changes task waits this many times as long as the
/// pass took, and the lists that arrive meanwhile are matched in one pass. A pass reads every
/// object of the kind: at 100,000 objects in ten accounts, each listing every 2 s, one pass
/// per list was a third of the operator's CPU. Paced so, the passes take at most a tenth of a
/// core per kind whatever the fleet, and a small fleet's passes (microseconds) delay nothing.
const PAUSE_PER_PASS: u32 = 9;

/// `first` with every change queued behind it.
fn merge_queued(
    mut merged: Changes,
    queued: &mut mpsc::UnboundedReceiver<(AccountId, Changes)>,
) -> Changes {
    while let Ok((_account, more)) = queued.try_recv() {
        merged.merge(more);
    }
    merged
}

/// The objects whose recorded id, cloud name or pending create matches a change. One pass
/// over the store for any number of changes.
fn objects_concerned<K: KindDeclarations>(
    store: &crate::runtime::store::Store<K>,
    changes: &Changes,
) -> Vec<ObjectRef<K>> {
    store
        .state()
        .iter()
        .filter(|object| {
            crate::flow::recorded::records_any(object.as_ref(), &changes.ids, &changes.names)
        })
        .map(|object| crate::runtime::applier::key_of(object.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(ids: &[&str], names: &[&str]) -> Changes {
        Changes {
            ids: ids.iter().map(ToString::to_string).collect(),
            names: names.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn the_changes_queued_behind_a_list_are_matched_with_it() {
        let (sender, mut queued) = mpsc::unbounded_channel();
        for queued_changes in [
            changes(&["vol-2"], &["b"]),
            changes(&["vol-3"], &["a", "c"]),
        ] {
            let account = AccountId::of(&gpucloud_cloud::ApiKey::new("team-a"));
            sender.send((account, queued_changes)).unwrap();
        }
        let merged = merge_queued(changes(&["vol-1"], &["a"]), &mut queued);
        assert_eq!(
            merged,
            changes(&["vol-1", "vol-2", "vol-3"], &["a", "b", "c"])
        );
        assert!(queued.try_recv().is_err(), "everything queued was taken");
        assert_eq!(
            merge_queued(changes(&["vol-4"], &[]), &mut queued),
            changes(&["vol-4"], &[]),
            "with nothing queued, the list's own changes"
        );
    }
}
