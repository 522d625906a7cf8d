//! What one kind's controller reports at scrape time (`gpucloud_objects`,
//! `gpucloud_hourly_cost`, `gpucloud_spend`, `gpucloud_queue_depth`,
//! `gpucloud_reconciles_in_flight`), computed from its reflector store, the accounts' billing
//! last read (a scrape makes no cloud call) and the reconcile requests it has seen.
//!
//! Queue depth counts the objects due for a reconcile that has not started: woken by a watch
//! event, a reference or Secret change, a cloud list, or a requeue whose time has come. The
//! same bookkeeping feeds controller-runtime's names for these numbers (`workqueue_depth`,
//! `workqueue_queue_duration_seconds`, `controller_runtime_active_workers`,
//! `controller_runtime_max_concurrent_reconciles`).

use crate::accounts::account::{Accounts, Billing};
use crate::flow::conditions::reason;
use crate::flow::declarations::KindDeclarations;
use crate::lock;
use crate::runtime::store::Store;
use gpucloud_api::condition_type;
use gpucloud_telemetry::{KindState, Metrics, StateSource};
use kube::runtime::reflector::ObjectRef;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a reconcile asked for next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    /// To run again after this long.
    Requeue(Duration),
    /// Nothing but a change: paused, an invalid spec, a resource gone.
    Change,
    /// Settled: a change, or the settled sweep's recheck (`recheck.rs`).
    Sweep,
}

pub struct KindGauges<K: KindDeclarations> {
    kind: String,
    store: Store<K>,
    /// When each object is next due for a reconcile, while one is pending, by the store's
    /// `hash_of` the object (every object has an entry once settled: no copy of its name).
    due: Mutex<HashMap<u64, Instant>>,
    /// The objects whose last reconcile asked for nothing but a change (few: the paused, the
    /// invalid, the gone), which the settled sweep leaves alone.
    awaiting: Mutex<HashSet<ObjectRef<K>>>,
    in_flight: AtomicI64,
    /// The controller's concurrency (0: no limit).
    max_concurrent: u16,
    metrics: Arc<Metrics>,
    accounts: Arc<Accounts>,
}

impl<K: KindDeclarations> KindGauges<K> {
    pub fn new(
        store: Store<K>,
        metrics: Arc<Metrics>,
        max_concurrent: u16,
        accounts: Arc<Accounts>,
    ) -> Self {
        KindGauges {
            kind: K::kind(&()).to_string(),
            store,
            due: Mutex::new(HashMap::new()),
            awaiting: Mutex::new(HashSet::new()),
            in_flight: AtomicI64::new(0),
            max_concurrent,
            metrics,
            accounts,
        }
    }

    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    fn with_due<T>(&self, f: impl FnOnce(&mut HashMap<u64, Instant>) -> T) -> T {
        f(&mut lock(&self.due))
    }

    /// `object` was asked to reconcile now.
    pub fn triggered(&self, object: &ObjectRef<K>) {
        let now = Instant::now();
        self.with_due(|due| {
            due.entry(self.store.hash_of(object))
                .and_modify(|at| *at = (*at).min(now))
                .or_insert(now);
        });
    }

    /// A reconcile of `object` starts: how long it waited since it came due is observed.
    pub fn started(&self, object: &ObjectRef<K>) {
        lock(&self.awaiting).remove(object);
        if let Some(at) = self.with_due(|due| due.remove(&self.store.hash_of(object))) {
            let waited = Instant::now().saturating_duration_since(at);
            self.metrics.dequeued(&self.kind, waited);
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A reconcile of `object` ended, asking for `next` (`None`: it failed, and the error
    /// policy says when it runs again).
    pub fn finished(&self, object: &ObjectRef<K>, next: Option<Next>) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        match next {
            Some(Next::Requeue(after)) => self.due_in(object, after),
            Some(Next::Change) => {
                lock(&self.awaiting).insert(object.clone());
            }
            Some(Next::Sweep) | None => {}
        }
    }

    /// Marks `object` as due now and says so, unless something else has it in hand: a
    /// reconcile due (a requeue, a wake, a retry, a trigger not yet started), or its last
    /// reconcile asking for nothing but a change. The settled sweep's test (`recheck.rs`).
    pub fn recheck(&self, object: &ObjectRef<K>) -> bool {
        if lock(&self.awaiting).contains(object) {
            return false;
        }
        self.with_due(|due| match due.entry(self.store.hash_of(object)) {
            Entry::Occupied(_) => false,
            Entry::Vacant(vacant) => {
                vacant.insert(Instant::now());
                true
            }
        })
    }

    /// Forgets the objects no longer in the store: one deleted while due is never reconciled
    /// again, and a deleted object's last reconcile asks for nothing but a change. Called at
    /// each scrape and each round of the settled sweep, so neither grows with deletions when
    /// nothing scrapes.
    pub fn forget_gone(&self) {
        self.with_due(|due| self.store.retain_held(due));
        lock(&self.awaiting).retain(|object| self.store.get(object).is_some());
    }

    /// `object` is to reconcile again after `after`.
    pub fn due_in(&self, object: &ObjectRef<K>, after: Duration) {
        let at = Instant::now() + after;
        self.with_due(|due| {
            due.entry(self.store.hash_of(object))
                .and_modify(|existing| *existing = (*existing).min(at))
                .or_insert(at);
        });
    }

    /// The objects of the store in `namespace` named in `names`, marked as due.
    pub fn wake_named(
        &self,
        namespace: &str,
        names: impl IntoIterator<Item = String>,
    ) -> Vec<ObjectRef<K>> {
        let woken: Vec<ObjectRef<K>> = names
            .into_iter()
            .map(|name| ObjectRef::new(&name).within(namespace))
            .filter(|object| self.store.get(object).is_some())
            .collect();
        for object in &woken {
            self.triggered(object);
        }
        woken
    }

    /// The objects of the store, in any namespace, for which `wanted` holds, marked as due.
    pub fn wake(&self, wanted: impl Fn(&K) -> bool) -> Vec<ObjectRef<K>> {
        let woken: Vec<ObjectRef<K>> = self
            .store
            .state()
            .iter()
            .filter(|o| wanted(o))
            .map(|o| crate::runtime::applier::key_of(o.as_ref()))
            .collect();
        for object in &woken {
            self.triggered(object);
        }
        woken
    }
}

impl<K: KindDeclarations> StateSource for KindGauges<K> {
    fn kind(&self) -> &str {
        &self.kind
    }

    fn state(&self) -> KindState {
        let mut state = KindState::default();
        // Each account's billing as last read, by the label objects record it under.
        let billing: HashMap<String, Arc<Billing>> = if K::BILLED {
            self.accounts
                .all()
                .iter()
                .filter_map(|a| Some((a.id.label(), a.last_billing()?)))
                .collect()
        } else {
            HashMap::new()
        };
        for object in self.store.state() {
            let status = object.cloud_status();
            for type_ in [
                condition_type::READY,
                condition_type::RECONCILING,
                condition_type::STALLED,
            ] {
                let value = status
                    .condition(type_)
                    .map_or("Unknown".to_string(), |c| c.status.clone());
                *state
                    .conditions
                    .entry((type_.to_string(), value))
                    .or_default() += 1;
            }
            if status.condition(condition_type::STALLED).is_some_and(|c| {
                c.status == "True"
                    && [reason::CLAIM_CONFLICT, reason::FOREIGN_RECORD].contains(&c.reason.as_str())
            }) {
                state.claim_conflicts += 1;
            }
            let namespace = || object.meta().namespace.clone().unwrap_or_default();
            if let Some((rate, currency)) = object.hourly_cost() {
                *state
                    .hourly_cost
                    .entry((namespace(), currency))
                    .or_default() += rate;
            }
            if let (Some(account), Some(cloud_name)) = (&status.account, &status.cloud_name)
                && let Some(billing) = billing.get(account)
                && let Some(spent) = billing.total_of(cloud_name)
            {
                *state
                    .spend
                    .entry((namespace(), billing.currency.clone()))
                    .or_default() += spent;
            }
        }
        let now = Instant::now();
        self.forget_gone();
        state.queue_depth =
            self.with_due(|due| due.values().filter(|at| **at <= now).count()) as i64;
        state.in_flight = self.in_flight.load(Ordering::Relaxed);
        state.max_concurrent = i64::from(self.max_concurrent);
        state
    }
}
