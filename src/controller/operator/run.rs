//! Wiring: one applier (`applier.rs`) per kind (and per watched namespace), each fed by
//! its object watch, its cloud observers, and the changes that wake it when something it
//! depends on changes (credentials Secrets, referenced objects), relayed from the one watch
//! of each kind.

use crate::accounts::account::{Accounts, CloudSettings, SecretLocation};
use crate::accounts::orphans::{OrphanSweepSettings, OrphanSweeper};
use crate::accounts::released::ReleasedRecord;
use crate::flow::adoption::Ownership;
use crate::flow::claim_index::ClaimIndex;
use crate::flow::context::{Context, ReconcileSettings, Shared};
use crate::flow::gauges::KindGauges;
use crate::flow::kind::{ManagedKind, Reference, Watched};
use crate::flow::readopt::Readoption;
use crate::flow::recheck::settled_rechecks;
use crate::flow::reconcile::{error_policy, reconcile};
use crate::flow::referrer_index::ReferrerIndex;
use crate::kinds::registry::{KindFn, KindVisitor, each_kind, map_kinds};
use crate::lock;
use crate::runtime::applier::key_of;
use crate::runtime::clock::Clock;
use crate::runtime::decode::{Decoded, Guard};
use crate::runtime::events::EventPublisher;
use crate::runtime::fair_share::FairShare;
use crate::runtime::store::{Store, Wakes};
use crate::runtime::watch_health;
use futures::{FutureExt, StreamExt, TryStreamExt, future::BoxFuture};
use gpucloud_api::{Budget, GpuInstance, GpuInstancePool};
use gpucloud_cloud::{CallObserver, FanOut};
use gpucloud_telemetry::{Health, Metrics};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// Everything `run` needs to know.
#[derive(Debug, Clone)]
pub struct OperatorConfig {
    /// Namespaces to watch; empty watches the whole cluster.
    pub namespaces: Vec<String>,
    /// Reconciles of one kind running at once.
    pub concurrency: u16,
    pub cloud: CloudSettings,
    pub default_secret: Option<SecretLocation>,
    pub reconcile: ReconcileSettings,
    /// Name the operator's events carry.
    pub reporter: crate::runtime::events::Reporter,
    /// The orphan sweeper; see `orphans.rs`.
    pub orphans: OrphanSweepSettings,
    pub metrics: Arc<Metrics>,
    /// Told when each watch has synced, and when it fails (see `watch_health.rs`).
    pub health: Arc<Health>,
}

/// A kind's object changes (applied or deleted), passed from the one watch of the kind (its
/// controller's; the Secrets' in `relay_secrets`) to controllers woken by them: each kind is
/// listed and watched once, however many controllers follow it. Subscribers are controllers'
/// trigger streams, which the controllers drain as they come (a mapping to object references,
/// no I/O), so the channels stay short.
struct Relay<K> {
    subscribers: Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>,
}

impl<K> Default for Relay<K> {
    fn default() -> Self {
        Relay {
            subscribers: Mutex::new(Vec::new()),
        }
    }
}

impl<K: Clone> Relay<K> {
    /// The changes seen from now on.
    fn subscribe(&self) -> impl futures::Stream<Item = Arc<K>> + Send + 'static
    where
        K: Send + Sync + 'static,
    {
        let (sender, receiver) = mpsc::unbounded_channel();
        lock(&self.subscribers).push(sender);
        UnboundedReceiverStream::new(receiver)
    }

    fn send(&self, object: &K) {
        let mut subscribers = lock(&self.subscribers);
        if subscribers.is_empty() {
            return;
        }
        let object = Arc::new(object.clone());
        // A subscriber whose controller has ended is dropped.
        subscribers.retain(|s| s.send(object.clone()).is_ok());
    }
}

/// A change of an object that other objects may follow: what it is, and what it refers to
/// (for the kinds that follow their referrers).
struct Change {
    kind: String,
    namespace: Option<String>,
    name: String,
    references: Vec<Reference>,
}

/// The changes of every followed kind in a scope, passed from the one watch of each kind to
/// the controllers that follow it. Who follows what is derived from each kind's
/// `KindDeclarations::REFERS_TO` and `FOLLOWS_REFERRERS`.
#[derive(Default)]
struct ChangeHub {
    followers: Mutex<Vec<Follower>>,
}

/// A controller's subscription: the kinds it follows, and its trigger channel.
struct Follower {
    kinds: Vec<String>,
    sender: mpsc::UnboundedSender<Arc<Change>>,
}

impl ChangeHub {
    /// The changes of objects of `kinds` from now on.
    fn subscribe(
        &self,
        kinds: Vec<String>,
    ) -> impl futures::Stream<Item = Arc<Change>> + Send + 'static {
        let (sender, receiver) = mpsc::unbounded_channel();
        lock(&self.followers).push(Follower { kinds, sender });
        UnboundedReceiverStream::new(receiver)
    }

    /// Whether a controller follows objects of `kind`.
    fn followed(&self, kind: &str) -> bool {
        lock(&self.followers)
            .iter()
            .any(|f| f.kinds.iter().any(|k| k == kind))
    }

    fn publish(&self, change: Change) {
        let change = Arc::new(change);
        // A subscriber whose controller has ended is dropped.
        lock(&self.followers)
            .retain(|f| !f.kinds.contains(&change.kind) || f.sender.send(change.clone()).is_ok());
    }
}

/// What followers are told of `object`'s change.
fn change_of<K: ManagedKind>(object: &K) -> Change {
    Change {
        kind: K::kind(&()).into_owned(),
        namespace: object.namespace(),
        name: object.name_any(),
        references: object.references(),
    }
}

/// The changes of one kind's watch that its followers are told of, each once the
/// controller's store holds it (the watch's events are taken here after the store's).
///
/// A change the watch brings is told at once. The first list tells nothing: each follower
/// looks at all its objects when it starts (`readopt.rs`). A later list (the watch was lost and
/// its history gone) is taken into the store only at its end, so what it brings is told then:
/// the objects listed in another version than the store held, and those the store held that
/// the list no longer shows. Told as each listed object came, a follower woken by one (a
/// volume by its machine) would read the store's copy from before the list, find nothing new
/// (no cloud id yet) and wait for its resync with nothing left to wake it sooner: at 100,000
/// objects, the volumes woken by a list of their machines waited a minute, the account's rate
/// unused.
struct ChangeNotices<K: ManagedKind> {
    store: Store<K>,
    listed_before: bool,
    /// The store's objects when a later list began.
    before_list: Vec<Arc<K>>,
    /// The changes of the list under way.
    relisted: Vec<Change>,
}

impl<K: ManagedKind> ChangeNotices<K> {
    fn new(store: Store<K>) -> Self {
        ChangeNotices {
            store,
            listed_before: false,
            before_list: Vec::new(),
            relisted: Vec::new(),
        }
    }

    /// The changes to tell now that the store has taken `event`; none are gathered while no
    /// controller `follows` the kind (the lists are still counted).
    fn take(&mut self, event: &watcher::Event<Arc<K>>, follows: bool) -> Vec<Change> {
        match event {
            watcher::Event::InitDone => self.listed_before = true,
            _ if !follows => return Vec::new(),
            _ => {}
        }
        match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                vec![change_of(&**object)]
            }
            watcher::Event::Init if self.listed_before => {
                self.before_list = self.store.state();
                Vec::new()
            }
            watcher::Event::InitApply(object) if self.listed_before => {
                let unchanged = self.store.get(&key_of(&**object)).is_some_and(|held| {
                    held.meta().resource_version == object.meta().resource_version
                });
                if !unchanged {
                    self.relisted.push(change_of(&**object));
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                let mut told = std::mem::take(&mut self.relisted);
                for held in std::mem::take(&mut self.before_list) {
                    if self.store.get(&key_of(&*held)).is_none() {
                        told.push(change_of(&*held));
                    }
                }
                told
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
        }
    }
}

/// The one kind outside the API group that objects refer to (a GpuInstance's startup script).
const CONFIG_MAP: &str = "ConfigMap";

/// Every kind some managed kind refers to.
fn followed_kinds() -> Vec<String> {
    struct RefersTo;
    impl KindFn<Vec<String>> for RefersTo {
        fn call<K: ManagedKind>(&self) -> Vec<String> {
            K::REFERS_TO
                .iter()
                .map(|(kind, _)| kind.to_string())
                .collect()
        }
    }
    let mut kinds: Vec<String> = map_kinds(RefersTo).into_iter().flatten().collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// The kinds whose changes look at objects of `K` again: those it refers to, and (when it
/// follows its referrers) those that refer to it.
fn followed_by<K: ManagedKind>() -> Vec<String> {
    struct Referrers(String);
    impl KindFn<Option<String>> for Referrers {
        fn call<R: ManagedKind>(&self) -> Option<String> {
            R::REFERS_TO
                .iter()
                .any(|(kind, _)| *kind == self.0)
                .then(|| R::kind(&()).into_owned())
        }
    }
    let mut kinds: Vec<String> = K::REFERS_TO
        .iter()
        .map(|(kind, _)| kind.to_string())
        .collect();
    if K::FOLLOWS_REFERRERS {
        kinds.extend(
            map_kinds(Referrers(K::kind(&()).into_owned()))
                .into_iter()
                .flatten(),
        );
    }
    kinds.sort();
    kinds.dedup();
    kinds
}

/// The objects of `K` a change looks at again: those referring to the changed object (from
/// `referrers`, the kind's index), and, when `K` follows its referrers, those the changed
/// object refers to.
fn woken_by<K: ManagedKind>(
    gauges: &KindGauges<K>,
    referrers: &ReferrerIndex,
    change: &Change,
) -> Vec<ObjectRef<K>> {
    let kind = K::kind(&());
    let namespace = change.namespace.as_deref().unwrap_or_default();
    let mut names = referrers.referrers(namespace, &change.kind, &change.name);
    if K::FOLLOWS_REFERRERS {
        for reference in &change.references {
            match reference {
                Reference::Named { kind: k, name } if *k == kind => {
                    names.insert(name.clone());
                }
                // A selector over this kind: any object of the namespace may be concerned.
                Reference::Every { kind: k } if *k == kind => {
                    return gauges.wake(|object| object.meta().namespace == change.namespace);
                }
                _ => {}
            }
        }
    }
    gauges.wake_named(namespace, names)
}

/// Starts the controller of each kind in a scope.
struct Wiring<'a> {
    shared: &'a Shared,
    config: &'a OperatorConfig,
    scope: Option<&'a str>,
    shutdown: &'a futures::future::Shared<BoxFuture<'static, ()>>,
    changes: &'a Arc<ChangeHub>,
    secrets: &'a Arc<Relay<PartialObjectMeta<Secret>>>,
    budgets: &'a Arc<Relay<BudgetChange>>,
    budget_store: &'a reflector::Store<Budget>,
    policies: &'a Arc<Relay<PolicyChange>>,
    policy_store: &'a reflector::Store<gpucloud_api::GpuPolicy>,
    controllers: Vec<BoxFuture<'static, ()>>,
}

impl KindVisitor for Wiring<'_> {
    fn visit<K: ManagedKind>(&mut self) {
        let controller = controller::<K>(self);
        self.controllers.push(controller);
    }
}

/// Watches the ConfigMaps of a scope, metadata only (a change of the data changes the
/// resourceVersion), for the objects that refer to them. Ends on shutdown.
fn relay_config_maps(
    api: &ScopedApi,
    changes: Arc<ChangeHub>,
    shutdown: futures::future::Shared<BoxFuture<'static, ()>>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    api.triggers::<PartialObjectMeta<ConfigMap>>()
        .take_until(shutdown)
        .for_each(move |map| {
            if let Ok(map) = map {
                changes.publish(Change {
                    kind: CONFIG_MAP.to_string(),
                    namespace: map.namespace(),
                    name: map.name_any(),
                    references: Vec::new(),
                });
            }
            futures::future::ready(())
        })
}

/// The name readiness knows a watch by: a kind's watch in one namespace (or the whole cluster).
fn sync_key(kind: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(namespace) => format!("{kind} in {namespace}"),
        None => kind.to_string(),
    }
}

/// The name readiness knows a watch by: `sync_key`, with the selection of a watch narrowed by
/// one (the Secrets are watched twice in a scope: by label, and the default one by name).
fn watch_name(kind: &str, namespace: Option<&str>, selection: &watcher::Config) -> String {
    let key = sync_key(kind, namespace);
    match (&selection.label_selector, &selection.field_selector) {
        (None, None) => key,
        (labels, fields) => {
            let selectors: Vec<&str> = [labels, fields]
                .into_iter()
                .flatten()
                .map(String::as_str)
                .collect();
            format!("{key} ({})", selectors.join(", "))
        }
    }
}

/// Runs every controller until `shutdown` resolves, then lets in-flight reconciles finish.
pub async fn run(client: kube::Client, config: OperatorConfig, shutdown: BoxFuture<'static, ()>) {
    let accounts = Arc::new(Accounts::new(
        observed_cloud(&config),
        client.clone(),
        config.default_secret.clone(),
    ));
    // One publisher for every controller: its memory of recent events is bounded once.
    let events = Arc::new(EventPublisher::new(client.clone(), config.reporter.clone()));
    let shared = Shared {
        client: client.clone(),
        accounts: accounts.clone(),
        events: events.clone(),
        ownership: Arc::new(Ownership::new(ReleasedRecord::new(
            client.clone(),
            config.reconcile.operator_namespace.clone(),
        ))),
    };
    let shutdown = shutdown.shared();
    let scopes: Vec<Option<String>> = if config.namespaces.is_empty() {
        vec![None]
    } else {
        config.namespaces.iter().cloned().map(Some).collect()
    };
    // Each controller below announces its watch before any of them runs.
    config.health.leading();
    config.metrics.set_leader(true);
    let mut controllers = Vec::new();
    // GpuPolicies, cluster-scoped: counted by one controller, their changes relayed to every
    // scope's billed kinds, which look again at the creates they refused or held.
    let policies = Arc::new(Relay::<PolicyChange>::default());
    let (policy_store, policy_writer) = reflector::store::<gpucloud_api::GpuPolicy>();
    controllers.push(policy_controller(
        client.clone(),
        (config.namespaces.clone(), events.clone()),
        (policy_store.clone(), policy_writer),
        policies.clone(),
        &config.reconcile,
        shutdown.clone(),
    ));
    controllers.push(
        keep_accounts(
            accounts.clone(),
            config.metrics.clone(),
            config.reconcile.observe.resync,
        )
        .boxed(),
    );
    controllers.push(
        OrphanSweeper::new(
            client.clone(),
            accounts.clone(),
            config.namespaces.clone(),
            config.orphans.clone(),
            events.clone(),
        )
        .run(config.metrics.clone(), shutdown.clone().boxed())
        .boxed(),
    );
    for scope in scopes {
        controllers.extend(scope_controllers(
            &shared,
            &config,
            scope.as_deref(),
            &shutdown,
            (&policies, &policy_store),
        ));
    }
    // The GpuOfferings, from the default account's catalog.
    let offerings = crate::kinds::gpu_offering::keep(
        client.clone(),
        accounts.clone(),
        config.reconcile.observe.resync,
    );
    // The balance reporter and the offerings' keeper never end: the controllers' end (on
    // shutdown) ends the run.
    let balances = controllers.remove(0);
    tokio::select! {
        _ = futures::future::join_all(controllers) => {}
        _ = balances => {}
        _ = offerings => {}
    }
    config.metrics.set_leader(false);
}

/// The cloud settings of `config`, with every cloud call also told to the metrics.
fn observed_cloud(config: &OperatorConfig) -> CloudSettings {
    let mut cloud = config.cloud.clone();
    let metrics: Arc<dyn CallObserver> = config.metrics.clone();
    cloud.observer = Some(match cloud.observer.take() {
        Some(other) => Arc::new(FanOut(vec![other, metrics])),
        None => metrics,
    });
    cloud
}

/// The controllers of one scope (a watched namespace, or the whole cluster): every managed
/// kind's, the Budgets', the pools', and the relays of the ConfigMaps and credentials Secrets
/// they follow.
fn scope_controllers(
    shared: &Shared,
    config: &OperatorConfig,
    scope: Option<&str>,
    shutdown: &futures::future::Shared<BoxFuture<'static, ()>>,
    (policies, policy_store): (
        &Arc<Relay<PolicyChange>>,
        &reflector::Store<gpucloud_api::GpuPolicy>,
    ),
) -> Vec<BoxFuture<'static, ()>> {
    // Changes of the kinds controllers follow, each kind watched once (by its own
    // controller; ConfigMaps below).
    let changes = Arc::new(ChangeHub::default());
    // Credentials Secrets, which every kind reads: watched once for all controllers.
    let secrets = Arc::new(Relay::<PartialObjectMeta<Secret>>::default());
    // Budgets, which wake the billed objects they refused and the machines they power
    // off or let go; read by the machines' reconciles from their store.
    let budgets = Arc::new(Relay::<BudgetChange>::default());
    let (budget_store, budget_writer) = reflector::store::<Budget>();
    let mut wiring = Wiring {
        shared,
        config,
        scope,
        shutdown,
        changes: &changes,
        secrets: &secrets,
        budgets: &budgets,
        budget_store: &budget_store,
        policies,
        policy_store,
        controllers: Vec::new(),
    };
    each_kind(&mut wiring);
    let mut controllers = wiring.controllers;
    let scoped = ScopedApi::new(shared, scope, config);
    controllers.push(budget_controller(
        &scoped,
        &changes,
        (budget_store, budget_writer),
        budgets,
        (shared.accounts.clone(), shared.ownership.clone()),
        &config.reconcile,
        shutdown.clone(),
    ));
    controllers.push(pool_controller(&scoped, &changes, shutdown.clone()));
    if followed_kinds().iter().any(|k| k == CONFIG_MAP) {
        controllers.push(relay_config_maps(&scoped, changes, shutdown.clone()).boxed());
    }
    let default = config.default_secret.as_ref().map(|secret| {
        (
            ScopedApi::new(shared, Some(&secret.namespace), config),
            secret.name.clone(),
        )
    });
    controllers.push(
        relay_secrets(
            &scoped,
            default,
            shared.accounts.clone(),
            secrets,
            shutdown.clone(),
        )
        .boxed(),
    );
    controllers
}

/// Watches the credentials Secrets of a scope for every controller, metadata only (the
/// operator never holds Secret contents it does not need): those labelled as credentials
/// (`crate::accounts::secrets::CREDENTIALS_LABEL`), and the operator's default Secret by name (`default`,
/// watched in its own namespace). A change ends the reuse of the account the Secret resolved
/// to, then wakes the objects that read it. Ends on shutdown. The watches are built (and
/// announced to readiness) at once, with the controllers' own.
fn relay_secrets(
    api: &ScopedApi,
    default: Option<(ScopedApi, String)>,
    accounts: Arc<Accounts>,
    relay: Arc<Relay<PartialObjectMeta<Secret>>>,
    shutdown: futures::future::Shared<BoxFuture<'static, ()>>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let labelled = api.selected_triggers::<PartialObjectMeta<Secret>>(
        watcher::Config::default().labels(&crate::accounts::secrets::credentials_selector()),
    );
    let default = default.map(|(api, name)| {
        api.selected_triggers::<PartialObjectMeta<Secret>>(
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
    });
    futures::stream::select(labelled, futures::stream::iter(default).flatten())
        .take_until(shutdown)
        .for_each(move |secret| {
            if let Ok(secret) = secret {
                accounts.forget_secret(&secret.namespace().unwrap_or_default(), &secret.name_any());
                relay.send(&secret);
            }
            futures::future::ready(())
        })
}

/// Once per resync interval: retires the accounts no object uses any more, then reads each
/// remaining account's balance for `gpucloud_account_balance` (one call per account, however
/// many objects there are) and, for `gpucloud_spend`, the billing lists its objects' kinds are
/// billed in (shared with the Budgets that count spend).
async fn keep_accounts(accounts: Arc<Accounts>, metrics: Arc<Metrics>, every: Duration) {
    loop {
        for retired in accounts.retire_unused() {
            metrics.remove_balance(&retired.label());
            tracing::info!(account = %retired, "no object uses the account any more; it is no longer listed");
        }
        for account in accounts.all() {
            match account.balance().await {
                Ok(balance) => metrics.set_balance(&account.id.label(), balance.balance),
                Err(error) => tracing::debug!(%error, "balance not read"),
            }
            let lists = accounts.billed_in(&account.id);
            if !lists.is_empty()
                && let Err(error) = account.billing(&lists).await
            {
                tracing::debug!(%error, "billing not read");
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// A hash of what a reconcile acts on: the spec (through `generation`), annotations (pause,
/// adoption, restarts), labels (selectors), finalizers and deletion. Status is left out, and
/// so are the operator's own finalizer and create intent: the reconcile that writes them goes
/// on with the object it wrote (a first create, in the same reconcile), so their news would
/// only start a reconcile that has nothing to do, or retry at once a create just refused.
fn intent_hash<K: Resource>(object: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = object.meta();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    if let Some(annotations) = &meta.annotations {
        annotations
            .iter()
            .filter(|(key, _)| key.as_str() != gpucloud_api::CREATE_INTENT_ANNOTATION)
            .for_each(|entry| entry.hash(&mut hasher));
    }
    meta.labels.hash(&mut hasher);
    if let Some(finalizers) = &meta.finalizers {
        finalizers
            .iter()
            .filter(|f| f.as_str() != gpucloud_api::FINALIZER)
            .for_each(|f| f.hash(&mut hasher));
    }
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    Some(hasher.finish())
}

/// How many watch events an object watch decodes ahead of the controller: more than one list
/// page (kube-runtime's 500), so that the next page is requested and decoded while the
/// previous one is stored, filtered and checked.
const READ_AHEAD: usize = 1024;

/// `stream`, polled on a task of its own up to `capacity` items ahead of its consumer: what
/// produces the items (a watch decoding them) and what consumes them run on separate cores.
/// The task ends when the stream does or the consumer is dropped.
fn read_ahead<T: Send + 'static>(
    stream: impl futures::Stream<Item = T> + Send + 'static,
    capacity: usize,
) -> impl futures::Stream<Item = T> + Send + 'static {
    let (sender, receiver) = mpsc::channel(capacity);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            let item = tokio::select! {
                () = sender.closed() => return,
                item = stream.next() => item,
            };
            let Some(item) = item else { return };
            if sender.send(item).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

/// `stream`, polled on a task of its own however slowly its items are taken. An object watch's
/// pipeline writes the controller's store as it goes: polled by the applier, a busy applier
/// (reconciles finishing back to back) left the store behind the API server, every write from
/// it was answered 409 and retried, and the retries kept the applier busy. Its items are object
/// keys, which the applier's queue merges, so they are not bounded here.
fn drive_apart<T: Send + 'static>(
    stream: impl futures::Stream<Item = T> + Send + 'static,
) -> impl futures::Stream<Item = T> + Send + 'static {
    let (sender, receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            let item = tokio::select! {
                () = sender.closed() => return,
                item = stream.next() => item,
            };
            if item.is_none_or(|item| sender.send(item).is_err()) {
                return;
            }
        }
    });
    UnboundedReceiverStream::new(receiver)
}

/// An `Api` of kind `R` in `namespace` (or the whole cluster).
fn api_for<R>(client: kube::Client, namespace: Option<&str>) -> Api<R>
where
    R: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

/// Client and namespace a controller works in, for the watches a kind adds.
pub struct ScopedApi {
    pub client: kube::Client,
    /// Where objects that do not decode are reported (`decode.rs`).
    pub events: Arc<EventPublisher>,
    pub namespace: Option<String>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
}

impl ScopedApi {
    fn new(shared: &Shared, namespace: Option<&str>, config: &OperatorConfig) -> Self {
        ScopedApi {
            client: shared.client.clone(),
            events: shared.events.clone(),
            namespace: namespace.map(str::to_string),
            metrics: config.metrics.clone(),
            health: config.health.clone(),
        }
    }

    /// Every watch of the operator is built here: kube-runtime's watcher of `K` in this scope
    /// (decoded without managedFields; an object that does not decode as `K` is reported and
    /// left out, see `decode.rs`), with its own backoff, reporting to readiness as the
    /// watch `sync_key(kind, namespace)` (see `watch_health.rs`): readiness waits until the
    /// reader says the first list is in place (`Health::synced`), and fails while the watch
    /// has been failing for too long. Each kind is watched once per scope, so the name is the
    /// watch's own.
    fn watch<K>(
        &self,
        config: watcher::Config,
    ) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>
    where
        K: Watched,
    {
        let name = watch_name(&K::kind(&()), self.namespace.as_deref(), &config);
        self.health.awaiting_sync(&name);
        let client =
            watch_health::reporting_client(&self.client, self.health.clone(), name.clone());
        let health = self.health.clone();
        let mut guard = Guard::<K>::new(self.events.clone());
        watcher(
            api_for::<Decoded<K>>(client, self.namespace.as_deref()),
            config,
        )
        .default_backoff()
        .inspect(move |item| health.watch_signal(&name, watch_health::signal(item)))
        .try_filter_map(move |event| futures::future::ready(Ok(guard.pass(event))))
    }

    /// The objects of kind `R` in this scope as they change: a watch with its own backoff,
    /// whose errors are counted (`gpucloud_watch_errors`) and retried, never passed on. A
    /// controller's triggers share one backoff: an error item from any of them would pause
    /// them all, the controller's own object watch included.
    pub fn triggers<R>(
        &self,
    ) -> impl futures::Stream<Item = Result<R, watcher::Error>> + Send + 'static
    where
        R: Watched,
    {
        self.selected_triggers(watcher::Config::default())
    }

    /// As `triggers`, for the objects `selection` selects (a label or field selector).
    pub fn selected_triggers<R>(
        &self,
        selection: watcher::Config,
    ) -> impl futures::Stream<Item = Result<R, watcher::Error>> + Send + use<R>
    where
        R: Watched,
    {
        let metrics = self.metrics.clone();
        let kind = R::kind(&()).to_string();
        let (health, name) = (
            self.health.clone(),
            watch_name(&kind, self.namespace.as_deref(), &selection),
        );
        let mut listed_before = false;
        self.watch::<R>(selection).filter_map(move |event| {
            futures::future::ready(match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => {
                    Some(Ok(object))
                }
                // The first list says what exists, not what changed: a starting
                // controller looks at all its objects anyway (see `readopt.rs`). A
                // later list (after the watch was lost) may hold missed changes.
                Ok(watcher::Event::InitApply(object)) if listed_before => Some(Ok(object)),
                Ok(watcher::Event::InitDone) => {
                    listed_before = true;
                    health.synced(&name);
                    None
                }
                Ok(_) => None,
                Err(error) => {
                    metrics.watch_failed(&kind);
                    tracing::debug!(kind = %kind, %error, "watch failed; retrying");
                    None
                }
            })
        })
    }
}

/// The controller of kind `K` in the wiring's scope.
fn controller<K: ManagedKind>(wiring: &Wiring) -> BoxFuture<'static, ()> {
    let Wiring {
        shared,
        config,
        scope: namespace,
        shutdown,
        changes,
        secrets,
        budgets,
        budget_store,
        policies,
        policy_store,
        ..
    } = wiring;
    let (shared, config, namespace) = (*shared, *config, *namespace);
    let (shutdown, changes, budget_store, policy_store) = (
        (*shutdown).clone(),
        (*changes).clone(),
        (*budget_store).clone(),
        (*policy_store).clone(),
    );
    let scoped = ScopedApi::new(shared, namespace, config);
    // The store sees every change; reconciles are triggered only by changes a reconcile acts
    // on. Without the filter, each status write would wake its own object again, and a
    // refused create would be retried in a loop.
    let (store, writer) = crate::runtime::store::store();
    let gauges = Arc::new(KindGauges::new(
        store.clone(),
        config.metrics.clone(),
        config.concurrency,
        shared.accounts.clone(),
    ));
    config.metrics.register_state(gauges.clone());
    let referrers = Arc::new(ReferrerIndex::default());
    let claims = Arc::new(ClaimIndex::default());
    shared
        .ownership
        .register(store.clone(), referrers.clone(), claims.clone());
    register_account_users(shared, store.clone());
    let (trigger, triggers) = mpsc::unbounded_channel();
    let cx = Context::new(
        shared,
        config.reconcile.clone(),
        config.metrics.clone(),
        gauges.clone(),
        trigger.clone(),
        (budget_store, policy_store),
        FairShare::new(usize::from(config.concurrency)),
    );
    let objects = object_keys(
        &scoped,
        config,
        (store.clone(), writer),
        (referrers.clone(), claims),
        changes.clone(),
        gauges.clone(),
        (cx.clone(), trigger),
    );
    let secret_changes = woken_by_secrets(&gauges, shared.accounts.clone(), secrets);
    let budget_changes = woken_by_budgets(&gauges, budgets);
    let policy_changes = woken_by_policies(&gauges, policies);
    let (follower, followed_referrers) = (gauges.clone(), referrers.clone());
    let followed = changes
        .subscribe(followed_by::<K>())
        .flat_map(move |change| {
            futures::stream::iter(woken_by(&follower, &followed_referrers, &change))
        });
    // Every due reconcile starts at once and waits for a slot of its account's lane
    // (`fair_share.rs`), where `--concurrency` applies: one queue for every account would hold
    // a quiet team's object behind a busy team's thousands.
    let triggers = futures::stream::select_all([
        drive_apart(objects).boxed(),
        followed.boxed(),
        UnboundedReceiverStream::new(triggers).boxed(),
        settled_rechecks(gauges.clone(), config.reconcile.observe.resync).boxed(),
        secret_changes.boxed(),
        budget_changes.boxed(),
        policy_changes.boxed(),
    ]);
    crate::runtime::applier::run(
        triggers,
        store,
        reconcile::<K>,
        error_policy::<K>,
        cx,
        shutdown,
    )
    .boxed()
}

/// Tells the accounts which credentials the objects of `store` read, so that an account no
/// object uses any more is retired.
fn register_account_users<K: ManagedKind>(shared: &Shared, users: Store<K>) {
    shared.accounts.register_users(
        K::BILLING_LIST,
        Box::new(move || {
            let objects = users.state();
            let credentials = |object: &Arc<K>| {
                let reference = object.managed().credentials_secret_ref.clone();
                (object.namespace().unwrap_or_default(), reference)
            };
            objects.iter().map(credentials).collect()
        }),
    );
}

/// The keys of the objects of kind `K` to reconcile as the object watch brings them: the watch
/// fills the store and the indexes, publishes the changes other kinds follow, tells readiness
/// when it has listed, and passes on only the changes a reconcile acts on, once the store holds
/// them.
fn object_keys<K: ManagedKind>(
    scoped: &ScopedApi,
    config: &OperatorConfig,
    (store, mut writer): (Store<K>, crate::runtime::store::Writer<K>),
    (referrers, claims): (Arc<ReferrerIndex>, Arc<ClaimIndex>),
    publisher: Arc<ChangeHub>,
    gauges: Arc<KindGauges<K>>,
    (cx, trigger): (Arc<Context<K>>, mpsc::UnboundedSender<ObjectRef<K>>),
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    let kind = K::kind(&()).to_string();
    let scope = sync_key(&kind, scoped.namespace.as_deref());
    // kube-runtime runs a trigger only for an object its store holds, and drops it otherwise;
    // the store takes a list in only at the list's end. An object whose listed version the
    // store does not hold yet (created or changed while the watch was lost) waits here until
    // that list is in, so that its reconcile reads what the list brought.
    let unlisted: Arc<Mutex<Vec<ObjectRef<K>>>> = Arc::default();
    let (listed_in, relisted_trigger, in_store) =
        (unlisted.clone(), trigger.clone(), store.clone());
    let readoption = Arc::new(Readoption::start(cx, trigger));
    let (metrics, health, woken, checked) = (
        config.metrics.clone(),
        config.health.clone(),
        gauges,
        readoption.clone(),
    );
    let mut listed_before = false;
    let mut notices = ChangeNotices::new(store.clone());
    // The stores hold every object for as long as it exists: what is never read again is
    // dropped as it comes in.
    let watch = scoped
        .watch::<K>(watcher::Config::default().any_semantic())
        .map_ok(|event| event.modify(crate::flow::create::forget_unread_annotations));
    let (indexed, indexed_claims, before) = (referrers.clone(), claims.clone(), store.clone());
    let (listed_referrers, listed_claims, listed) = (referrers.clone(), claims, store.clone());
    let mut wakes = Wakes::new(intent_hash::<K>, store.clone());
    read_ahead(watch, READ_AHEAD)
        .inspect(move |event| {
            if let Ok(event) = event {
                indexed.observe(&before, event);
                indexed_claims.observe(&before, event);
            }
        })
        .map_ok(move |event| writer.apply(event))
        .inspect(move |event| {
            if let Ok(event) = event {
                for change in notices.take(event, publisher.followed(&K::kind(&()))) {
                    publisher.publish(change);
                }
            }
        })
        .inspect(move |event| match event {
            Ok(watcher::Event::Init) if listed_before => metrics.watch_restarted(&kind),
            Ok(watcher::Event::InitDone) => {
                listed_referrers.rebuild(&listed.state());
                listed_claims.rebuild(&listed);
                for object in lock(&listed_in).drain(..) {
                    // The controller outlives its triggers' receiver only when shutting down.
                    let _ = relisted_trigger.send(object);
                }
                readoption.listed();
                listed_before = true;
                // In the cache now; the watch reports its own health (`ScopedApi::watch`).
                health.synced(&scope);
            }
            Err(_) => metrics.watch_failed(&kind),
            _ => {}
        })
        .map_ok(move |event| wakes.take(event))
        // Watch errors are counted above and retried by the backoff; kept out of the
        // controller, whose queue stalls on an error item until something else wakes it.
        .filter_map(move |object| {
            futures::future::ready(match object {
                Ok(None) => None,
                // Settled objects of the first list are checked against the cloud's list
                // instead of each being reconciled at once.
                Ok(Some(object)) => checked.offer(object).and_then(|object| {
                    let key = key_of(&*object);
                    woken.triggered(&key);
                    let stored = in_store.get(&key);
                    if stored
                        .is_none_or(|stored| stored.resource_version() != object.resource_version())
                    {
                        lock(&unlisted).push(key);
                        return None;
                    }
                    Some(key)
                }),
                Err(error) => {
                    tracing::debug!(%error, "object watch failed; retrying");
                    None
                }
            })
        })
}

/// A changed credentials Secret wakes the objects that read it: those of its namespace that
/// name it, and, for the operator's default Secret, those of every namespace that name none.
fn woken_by_secrets<K: ManagedKind>(
    gauges: &Arc<KindGauges<K>>,
    accounts: Arc<Accounts>,
    secrets: &Relay<PartialObjectMeta<Secret>>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    let secret_gauges = gauges.clone();
    secrets.subscribe().flat_map(move |secret| {
        let namespace = secret.namespace();
        let name = secret.name_any();
        let is_default =
            accounts.is_default_secret(namespace.as_deref().unwrap_or_default(), &name);
        futures::stream::iter(secret_gauges.wake(|o| {
            let managed = o.managed();
            match &managed.credentials_secret_ref {
                None => is_default,
                Some(named) => named.name == name && o.meta().namespace == namespace,
            }
        }))
    })
}

/// A changed Budget (raised, or with room again) looks again at the creates it refused, and at
/// the machines it powers off or lets go.
fn woken_by_budgets<K: ManagedKind>(
    gauges: &Arc<KindGauges<K>>,
    budgets: &Relay<BudgetChange>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    let budget_gauges = gauges.clone();
    budgets.subscribe().flat_map(move |change| {
        futures::stream::iter(budget_gauges.wake(|o| {
            K::BILLED
                && o.meta().namespace == change.namespace
                && (refused_by_budget(o)
                    || o.uid().is_some_and(|uid| change.powered_off.contains(&uid)))
        }))
    })
}

/// A changed GpuPolicy (its limits, or room freed under a cap) looks again at the creates it
/// refused or held.
fn woken_by_policies<K: ManagedKind>(
    gauges: &Arc<KindGauges<K>>,
    policies: &Relay<PolicyChange>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    let policy_gauges = gauges.clone();
    policies.subscribe().flat_map(move |_| {
        futures::stream::iter(policy_gauges.wake(|o| K::BILLED && held_by_policy(o)))
    })
}

/// A Budget's change as the billed kinds' controllers follow it: its namespace, and the
/// machines it powers off now or did before.
#[derive(Clone)]
struct BudgetChange {
    namespace: Option<String>,
    powered_off: Vec<String>,
}

fn powered_off_by(budget: &Budget) -> Vec<String> {
    budget
        .status
        .iter()
        .flat_map(|s| s.powered_off.iter().map(|p| p.uid.clone()))
        .collect()
}

/// Whether the object's last create was refused by a Budget.
fn refused_by_budget<K: ManagedKind>(object: &K) -> bool {
    object
        .cloud_status_ref()
        .and_then(|s| s.condition(gpucloud_api::condition_type::READY))
        .is_some_and(|c| c.reason == crate::flow::conditions::reason::BUDGET_EXCEEDED)
}

/// Whether the object's last create was refused or held by a GpuPolicy.
fn held_by_policy<K: ManagedKind>(object: &K) -> bool {
    use crate::flow::conditions::reason;
    object
        .cloud_status_ref()
        .and_then(|s| s.condition(gpucloud_api::condition_type::READY))
        .is_some_and(|c| c.reason == reason::POLICY_LIMIT || c.reason == reason::POLICY_VIOLATION)
}

/// A GpuPolicy's change as the billed kinds' controllers follow it: nothing but that one
/// happened (a refused create reads every policy again).
#[derive(Clone)]
struct PolicyChange;

/// The cluster's GpuPolicies (`gpu_policy.rs`): each is recounted when it changes and once
/// per resync interval. A change that may let a held create through (its spec, a deletion,
/// reservations given back or a count gone down) is relayed to the billed kinds.
fn policy_controller(
    client: kube::Client,
    (watched, events): (Vec<String>, Arc<EventPublisher>),
    (store, writer): (
        reflector::Store<gpucloud_api::GpuPolicy>,
        reflector::store::Writer<gpucloud_api::GpuPolicy>,
    ),
    relay: Arc<Relay<PolicyChange>>,
    settings: &ReconcileSettings,
    shutdown: futures::future::Shared<BoxFuture<'static, ()>>,
) -> BoxFuture<'static, ()> {
    let (resync, clock) = (settings.observe.resync, settings.clock);
    let before = store.clone();
    let api: Api<gpucloud_api::GpuPolicy> = Api::all(client.clone());
    let objects = watcher(api, watcher::Config::default())
        .default_backoff()
        .inspect(move |event| {
            let relayed = match event {
                Ok(watcher::Event::Apply(policy)) => {
                    let old = before.get(&key_of(policy));
                    old.is_none_or(|old| frees_room(&old, policy))
                }
                Ok(watcher::Event::Delete(_)) => true,
                _ => false,
            };
            if relayed {
                relay.send(&PolicyChange);
            }
        })
        .reflect(writer)
        .applied_objects()
        .predicate_filter(intent_hash, PredicateConfig::default())
        .filter_map(|policy| futures::future::ready(policy.ok().map(Ok::<_, watcher::Error>)));
    let context = Arc::new((client, clock, watched, events));
    Controller::for_stream(objects, store)
        .graceful_shutdown_on(shutdown)
        .run(
            move |policy, cx: Arc<crate::kinds::gpu_policy::PolicyContext>| async move {
                crate::kinds::gpu_policy::reconcile(&policy, &cx).await?;
                Ok::<_, crate::flow::error::Error>(kube::runtime::controller::Action::requeue(resync))
            },
            |policy, error, _| {
                tracing::debug!(policy = %policy.name_any(), %error, "GpuPolicy not counted; trying again");
                kube::runtime::controller::Action::requeue(Duration::from_secs(if error.is_stale_write() { 1 } else { 10 }))
            },
            context,
        )
        .for_each(|_| futures::future::ready(()))
        .boxed()
}

/// Whether a policy's change from `old` to `new` may let a held create through: a new spec,
/// or fewer reservations.
fn frees_room(old: &gpucloud_api::GpuPolicy, new: &gpucloud_api::GpuPolicy) -> bool {
    let reservations =
        |p: &gpucloud_api::GpuPolicy| p.status.as_ref().map_or(0, |s| s.reservations.len());
    old.metadata.generation != new.metadata.generation || reservations(new) < reservations(old)
}

/// What a Budget's count reads: the API server, the accounts' billing, the ownership index
/// (which charges are the namespace's) and the clock; and where it tells of a spend projected
/// past its limit.
type BudgetContext = (
    kube::Client,
    (Arc<Accounts>, Arc<Ownership>),
    Clock,
    Arc<EventPublisher>,
);

/// The Budgets of a scope (`budget.rs`): each is recounted when it changes, when a billed
/// object of its namespace changes, and once per resync interval; each change of a Budget
/// is relayed to the billed kinds' controllers, which look again at the creates it refused.
fn budget_controller(
    scoped: &ScopedApi,
    changes: &ChangeHub,
    (store, writer): (reflector::Store<Budget>, reflector::store::Writer<Budget>),
    relay: Arc<Relay<BudgetChange>>,
    (accounts, ownership): (Arc<Accounts>, Arc<Ownership>),
    settings: &ReconcileSettings,
    shutdown: futures::future::Shared<BoxFuture<'static, ()>>,
) -> BoxFuture<'static, ()> {
    let (resync, clock) = (settings.observe.resync, settings.clock);
    struct Billed;
    impl KindFn<Option<String>> for Billed {
        fn call<K: ManagedKind>(&self) -> Option<String> {
            K::BILLED.then(|| K::kind(&()).into_owned())
        }
    }
    scoped
        .metrics
        .register_budgets(Arc::new(crate::kinds::budget::Figures(store.clone())));
    let in_namespace = store.clone();
    let before = store.clone();
    // The machines the changed Budget held before the change, from one stage of its watch
    // stream to the next (the stream takes one event at a time).
    let held_before = Arc::new(Mutex::new(Vec::<String>::new()));
    let held_after = held_before.clone();
    let billed_changes = changes
        .subscribe(map_kinds(Billed).into_iter().flatten().collect())
        .flat_map(move |change| {
            let budgets: Vec<ObjectRef<Budget>> = in_namespace
                .state()
                .iter()
                .filter(|b| b.namespace() == change.namespace)
                .map(|b| key_of(b.as_ref()))
                .collect();
            futures::stream::iter(budgets)
        });
    let health = scoped.health.clone();
    let scope = sync_key("Budget", scoped.namespace.as_deref());
    let objects = scoped
        .watch::<Budget>(watcher::Config::default())
        // Read before the store takes the change: the machines it powered off until now.
        .inspect(move |event| {
            if let Ok(
                watcher::Event::Apply(budget)
                | watcher::Event::InitApply(budget)
                | watcher::Event::Delete(budget),
            ) = event
            {
                let old = before.get(&key_of(budget));
                *lock(&held_before) = old.as_deref().map(powered_off_by).unwrap_or_default();
            }
        })
        .reflect(writer)
        // Relayed once the store has it (the machines read their holds there): those it powers
        // off now and those it let go, which start again.
        .inspect(move |event| match event {
            Ok(
                watcher::Event::Apply(budget)
                | watcher::Event::InitApply(budget)
                | watcher::Event::Delete(budget),
            ) => {
                let mut powered_off = powered_off_by(budget);
                powered_off.append(&mut lock(&held_after));
                relay.send(&BudgetChange {
                    namespace: budget.namespace(),
                    powered_off,
                });
            }
            Ok(watcher::Event::InitDone) => health.synced(&scope),
            _ => {}
        })
        .applied_objects()
        // Its own status writes do not count it again (the projection moves with the clock,
        // so every count would write and wake the next): the spec, a billed object's change,
        // the resync and the period's end do.
        .predicate_filter(intent_hash, PredicateConfig::default())
        .filter_map(|budget| futures::future::ready(budget.ok().map(Ok::<_, watcher::Error>)));
    let client = Arc::new((
        scoped.client.clone(),
        (accounts, ownership),
        clock,
        scoped.events.clone(),
    ));
    Controller::for_stream(objects, store)
        .reconcile_on(billed_changes)
        .graceful_shutdown_on(shutdown)
        .run(
            move |budget, cx: Arc<BudgetContext>| async move {
                let (accounts, ownership) = (&*cx.1.0, &*cx.1.1);
                let period_end = crate::kinds::budget::reconcile(&cx.0, (accounts, ownership), &cx.3, &budget, &cx.2).await?;
                // Counted again at the resync, or when its spend period ends if that is
                // sooner: a spent Budget lets go at the new period, not up to an interval later.
                let next = period_end.map_or(resync, |end| resync.min(cx.2.until(end)));
                Ok::<_, crate::flow::error::Error>(kube::runtime::controller::Action::requeue(next))
            },
            |budget, error, _| {
                tracing::debug!(budget = %budget.name_any(), %error, "budget not counted; trying again");
                kube::runtime::controller::Action::requeue(Duration::from_secs(if error.is_stale_write() { 1 } else { 10 }))
            },
            client,
        )
        .for_each(|_| futures::future::ready(()))
        .boxed()
}

/// The GpuInstancePools of a scope (`gpu_instance_pool.rs`): each is reconciled when its
/// spec, labels or annotations change (not its own status writes), when one of its machines
/// changes (the GpuInstances' one watch, relayed: a machine is named `<pool>-<suffix>`), and
/// when its reconcile asks to be looked at again.
fn pool_controller(
    scoped: &ScopedApi,
    changes: &ChangeHub,
    shutdown: futures::future::Shared<BoxFuture<'static, ()>>,
) -> BoxFuture<'static, ()> {
    let (store, writer) = reflector::store::<GpuInstancePool>();
    let pools = store.clone();
    let machine_changes = changes
        .subscribe(vec![GpuInstance::kind(&()).into_owned()])
        .filter_map(move |change| {
            let pool = change
                .name
                .rsplit_once('-')
                .map(|(pool, _)| pool.to_string())
                .and_then(|pool| {
                    let reference = ObjectRef::<GpuInstancePool>::new(&pool)
                        .within(change.namespace.as_deref().unwrap_or_default());
                    pools.get(&reference).map(|_| reference)
                });
            futures::future::ready(pool)
        });
    let health = scoped.health.clone();
    let scope = sync_key("GpuInstancePool", scoped.namespace.as_deref());
    let objects = scoped
        .watch::<GpuInstancePool>(watcher::Config::default())
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(watcher::Event::InitDone) = event {
                health.synced(&scope);
            }
        })
        .applied_objects()
        .predicate_filter(intent_hash, PredicateConfig::default())
        .filter_map(|pool| futures::future::ready(pool.ok().map(Ok::<_, watcher::Error>)));
    Controller::for_stream(objects, store)
        .reconcile_on(machine_changes)
        .graceful_shutdown_on(shutdown)
        .run(
            |pool, client: Arc<kube::Client>| async move {
                let next = crate::kinds::gpu_instance_pool::reconcile(&client, &pool).await?;
                Ok::<_, crate::flow::error::Error>(kube::runtime::controller::Action::requeue(next))
            },
            |pool, error, _| {
                tracing::debug!(pool = %pool.name_any(), %error, "pool not reconciled; trying again");
                kube::runtime::controller::Action::requeue(Duration::from_secs(
                    if error.is_stale_write() { 1 } else { 5 },
                ))
            },
            Arc::new(scoped.client.clone()),
        )
        .for_each(|_| futures::future::ready(()))
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_api::{Firewall, Image, Managed, Snapshot, SshKey, Volume};

    /// Who follows whom, derived from the kinds' declarations: each row is what the
    /// hand-wired relays did before the declarations existed.
    #[test]
    fn each_kind_follows_what_it_refers_to_and_snapshots_their_referrers() {
        assert_eq!(
            followed_by::<GpuInstance>(),
            ["ConfigMap", "Image", "Snapshot", "SshKey"]
        );
        assert_eq!(followed_by::<Volume>(), ["GpuInstance", "Volume"]);
        // Its machine; machines restored from it and images made from it (its referrers).
        assert_eq!(followed_by::<Snapshot>(), ["GpuInstance", "Image"]);
        assert_eq!(followed_by::<Image>(), ["Snapshot"]);
        assert_eq!(followed_by::<Firewall>(), ["GpuInstance"]);
        assert!(followed_by::<SshKey>().is_empty());
    }

    fn machine(name: &str, version: &str, id: Option<&str>) -> GpuInstance {
        let mut machine: GpuInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
            "metadata": {"name": name, "namespace": "team", "resourceVersion": version},
            "spec": {"region": "us-east-1", "gpuType": "L40S", "osImage": "ubuntu-22.04"},
        }))
        .unwrap();
        if let Some(id) = id {
            let mut status = machine.status.clone().unwrap_or_default();
            status.cloud.external_id = Some(id.to_string());
            machine.status = Some(status);
        }
        machine
    }

    /// Each event taken into the store as the reflector does, then into the notices: the
    /// names told, each with the cloud id the store holds for it at that moment.
    fn told(
        writer: &mut crate::runtime::store::Writer<GpuInstance>,
        notices: &mut ChangeNotices<GpuInstance>,
        events: Vec<watcher::Event<GpuInstance>>,
    ) -> Vec<(String, Option<String>)> {
        let store = writer.as_reader();
        let mut told = Vec::new();
        for event in events {
            let event = writer.apply(event);
            for change in notices.take(&event, true) {
                let held = store
                    .get(&ObjectRef::new(&change.name).within("team"))
                    .and_then(|m| m.cloud_status().external_id);
                told.push((change.name, held));
            }
        }
        told
    }

    #[test]
    fn a_later_lists_changes_are_told_once_the_store_holds_them() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let (store, mut writer) = crate::runtime::store::store();
        let mut notices = ChangeNotices::new(store);
        // The first list tells nothing; a change then is told at once.
        let first = vec![
            Init,
            InitApply(machine("gi-1", "1", None)),
            InitApply(machine("gi-2", "1", None)),
            InitApply(machine("gi-3", "1", None)),
            InitDone,
        ];
        assert!(told(&mut writer, &mut notices, first).is_empty());
        let changed = vec![Apply(machine("gi-3", "2", Some("vm-3")))];
        assert_eq!(
            told(&mut writer, &mut notices, changed),
            [("gi-3".to_string(), Some("vm-3".to_string()))]
        );
        // The watch lost: gi-1 got its id and gi-2 went meanwhile; gi-3 is listed unchanged.
        let relist = vec![
            Init,
            InitApply(machine("gi-1", "5", Some("vm-1"))),
            InitApply(machine("gi-3", "2", Some("vm-3"))),
            InitDone,
        ];
        let mut relisted = told(&mut writer, &mut notices, relist);
        relisted.sort();
        // Told with what the list brought in the store: a follower woken reads the id.
        assert_eq!(
            relisted,
            [
                ("gi-1".to_string(), Some("vm-1".to_string())),
                ("gi-2".to_string(), None),
            ]
        );
        let deleted = vec![Delete(machine("gi-3", "6", Some("vm-3")))];
        assert_eq!(
            told(&mut writer, &mut notices, deleted),
            [("gi-3".to_string(), None)]
        );
    }

    /// A kind referred to that nothing watches would never wake its referrers.
    #[test]
    fn every_kind_referred_to_is_watched() {
        let managed = map_kinds(crate::kinds::registry::KindName);
        for kind in followed_kinds() {
            assert!(
                managed.contains(&kind) || kind == CONFIG_MAP,
                "{kind} is referred to but not watched"
            );
        }
    }

    #[tokio::test]
    async fn read_ahead_passes_every_item_in_order_and_ends_with_the_stream() {
        let items: Vec<u32> = read_ahead(futures::stream::iter(0..2500), 1024)
            .collect()
            .await;
        assert_eq!(items, (0..2500).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn read_ahead_stays_within_its_capacity_and_stops_when_dropped() {
        let (polled, mut seen) = tokio::sync::watch::channel(0_usize);
        let counting = futures::stream::iter(0..).inspect(move |n| {
            let _ = polled.send(n + 1);
        });
        let mut ahead = Box::pin(read_ahead(counting, 4));
        assert_eq!(ahead.next().await, Some(0));
        // One taken, four buffered, at most one more held by the task waiting to send.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(*seen.borrow_and_update() <= 6, "{}", *seen.borrow());
        drop(ahead);
        // The task ends: the stream (and the watch's sender with it) is dropped.
        tokio::time::timeout(Duration::from_secs(5), async {
            while seen.changed().await.is_ok() {}
        })
        .await
        .expect("the read-ahead task ended");
    }
}
