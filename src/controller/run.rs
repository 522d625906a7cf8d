//! Wiring: one kube-runtime `Controller` per kind (and per watched namespace), each fed by
//! its object watch, its cloud observers, and the changes that wake it when something it
//! depends on changes (credentials Secrets, referenced objects), relayed from the one watch
//! of each kind.

use crate::account::{Accounts, CloudSettings, SecretLocation};
use crate::context::{Context, ReconcileSettings, Shared};
use crate::decode::{Decoded, Guard};
use crate::events::EventPublisher;
use crate::gauges::KindGauges;
use crate::kind::ManagedKind;
use crate::lock;
use crate::orphans::{OrphanSweepSettings, OrphanSweeper};
use crate::ownership::Ownership;
use crate::readopt::Readoption;
use crate::reconcile::{error_policy, reconcile};
use crate::watch_health;
use futures::{FutureExt, StreamExt, TryStreamExt, future::BoxFuture};
use gpucloud_api::{Firewall, GpuInstance, Image, Snapshot, SshKey, Volume};
use gpucloud_cloud::{CallObserver, FanOut};
use gpucloud_telemetry::{Health, Metrics};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
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
    pub reporter: String,
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
    let mut cloud = config.cloud.clone();
    let metrics: Arc<dyn CallObserver> = config.metrics.clone();
    cloud.observer = Some(match cloud.observer.take() {
        Some(other) => Arc::new(FanOut(vec![other, metrics])),
        None => metrics,
    });
    let accounts = Arc::new(Accounts::new(
        cloud,
        client.clone(),
        config.default_secret.clone(),
    ));
    // One publisher for every controller: its memory of recent events is bounded once.
    let events = Arc::new(EventPublisher::new(client.clone(), config.reporter.clone()));
    let shared = Shared {
        client: client.clone(),
        accounts: accounts.clone(),
        events: events.clone(),
        ownership: Arc::new(Ownership::default()),
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
    controllers.push(
        report_balances(
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
        // Kinds other controllers follow; each is watched once, by its own controller.
        let keys = Arc::new(Relay::<SshKey>::default());
        let instances = Arc::new(Relay::<GpuInstance>::default());
        let volumes = Arc::new(Relay::<Volume>::default());
        let snapshots = Arc::new(Relay::<Snapshot>::default());
        let images = Arc::new(Relay::<Image>::default());
        // Credentials Secrets, which every kind reads: watched once for all controllers.
        let secrets = Arc::new(Relay::<PartialObjectMeta<Secret>>::default());
        controllers.push(controller::<SshKey>(
            &shared,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            Some(keys.clone()),
            &secrets,
            |c, _, _| c,
        ));
        controllers.push(controller::<GpuInstance>(
            &shared,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            Some(instances.clone()),
            &secrets,
            |c, api, gauges| {
                let by_key = gauges.clone();
                let by_snapshot = gauges.clone();
                let by_image = gauges.clone();
                let scripts = gauges;
                c.watches_shared_stream(keys.subscribe(), move |key| {
                    by_key.referrers(key.as_ref(), |i| {
                        i.spec.ssh_key_refs.iter().any(|r| r.name == key.name_any())
                    })
                })
                // Snapshots restored from, and the final snapshot a deleting instance waits
                // for (its progress, or a foreign one of that name going).
                .watches_shared_stream(snapshots.subscribe(), move |snapshot| {
                    by_snapshot.referrers(snapshot.as_ref(), |i| {
                        i.spec
                            .source
                            .as_ref()
                            .is_some_and(|s| s.snapshot_ref.name == snapshot.name_any())
                            || i.meta().deletion_timestamp.is_some()
                                && crate::final_snapshot::object_name(&i.name_any())
                                    == snapshot.name_any()
                    })
                })
                .watches_shared_stream(images.subscribe(), move |image| {
                    by_image.referrers(image.as_ref(), |i| {
                        i.spec
                            .image_ref
                            .as_ref()
                            .is_some_and(|r| r.name == image.name_any())
                    })
                })
                // Startup scripts read from a ConfigMap; only metadata is watched (a change
                // of the data changes its resourceVersion).
                .watches_stream(
                    api.triggers::<PartialObjectMeta<ConfigMap>>(),
                    move |map| {
                        scripts.referrers(&map, |i| {
                            i.spec
                                .startup_script
                                .as_ref()
                                .and_then(|s| s.config_map_ref.as_ref())
                                .is_some_and(|r| r.name == map.name_any())
                        })
                    },
                )
            },
        ));
        controllers.push(controller::<Volume>(
            &shared,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            Some(volumes.clone()),
            &secrets,
            |c, _, gauges| {
                let attached = gauges.clone();
                let clones = gauges;
                c.watches_shared_stream(instances.subscribe(), move |instance| {
                    attached.referrers(instance.as_ref(), |v| {
                        v.spec
                            .instance_ref
                            .as_ref()
                            .is_some_and(|r| r.name == instance.name_any())
                    })
                })
                .watches_shared_stream(volumes.subscribe(), move |source| {
                    clones.referrers(source.as_ref(), |v| {
                        v.spec
                            .source
                            .as_ref()
                            .is_some_and(|s| s.volume_ref.name == source.name_any())
                    })
                })
            },
        ));
        controllers.push(controller::<Snapshot>(
            &shared,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            Some(snapshots.clone()),
            &secrets,
            |c, _, store| {
                let held = store.clone();
                // The snapshotted machine, and machines restored from a snapshot (which
                // hold its deletion until they exist).
                c.watches_shared_stream(instances.subscribe(), move |instance| {
                    let restored_from = instance
                        .spec
                        .source
                        .as_ref()
                        .map(|s| s.snapshot_ref.name.clone());
                    store.referrers(instance.as_ref(), |s| {
                        s.spec
                            .instance_ref
                            .as_ref()
                            .is_some_and(|r| r.name == instance.name_any())
                            || restored_from.as_deref() == Some(s.name_any().as_str())
                    })
                })
                // Images made from a snapshot hold its deletion until they are gone.
                .watches_shared_stream(images.subscribe(), move |image| {
                    held.referrers(image.as_ref(), |s| {
                        s.meta().deletion_timestamp.is_some()
                            && image.spec.snapshot_ref.name == s.name_any()
                    })
                })
            },
        ));
        controllers.push(controller::<Image>(
            &shared,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            Some(images),
            &secrets,
            |c, _, store| {
                c.watches_shared_stream(snapshots.subscribe(), move |snapshot| {
                    store.referrers(snapshot.as_ref(), |i| {
                        i.spec.snapshot_ref.name == snapshot.name_any()
                    })
                })
            },
        ));
        controllers.push(controller::<Firewall>(
            &shared,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            None,
            &secrets,
            |c, _, store| {
                c.watches_shared_stream(instances.subscribe(), move |instance| {
                    store.referrers(instance.as_ref(), |f| {
                        f.spec
                                .instance_refs
                                .iter()
                                .any(|r| r.name == instance.name_any())
                                // Matching or not: a label removed must detach too.
                                || f.spec.instance_selector.is_some()
                    })
                })
            },
        ));
        let scoped = ScopedApi::new(&shared, scope.as_deref(), &config);
        let default = config.default_secret.as_ref().map(|secret| {
            (
                ScopedApi::new(&shared, Some(&secret.namespace), &config),
                secret.name.clone(),
            )
        });
        controllers.push(
            relay_secrets(
                &scoped,
                default,
                accounts.clone(),
                secrets,
                shutdown.clone(),
            )
            .boxed(),
        );
    }
    // The balance reporter never ends: the controllers' end (on shutdown) ends the run.
    let balances = controllers.remove(0);
    tokio::select! {
        _ = futures::future::join_all(controllers) => {}
        _ = balances => {}
    }
    config.metrics.set_leader(false);
}

/// Watches the credentials Secrets of a scope for every controller, metadata only (the
/// operator never holds Secret contents it does not need): those labelled as credentials
/// (`crate::secrets::CREDENTIALS_LABEL`), and the operator's default Secret by name (`default`,
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
        watcher::Config::default().labels(&crate::secrets::credentials_selector()),
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

/// Reads each account's balance once per resync interval for `gpucloud_account_balance`:
/// one call per account, however many objects there are.
async fn report_balances(accounts: Arc<Accounts>, metrics: Arc<Metrics>, every: Duration) {
    loop {
        for account in accounts.all() {
            match account.balance().await {
                Ok(balance) => metrics.set_balance(&account.id.label(), balance.balance),
                Err(error) => tracing::debug!(%error, "balance not read"),
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// A hash of what a reconcile acts on: the spec (through `generation`), annotations (pause,
/// adoption, restarts), labels (selectors), finalizers and deletion. Status is left out.
fn intent_changed<K: Resource>(object: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = object.meta();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
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
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + 'static,
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
        R: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + 'static,
    {
        self.selected_triggers(watcher::Config::default())
    }

    /// As `triggers`, for the objects `selection` selects (a label or field selector).
    pub fn selected_triggers<R>(
        &self,
        selection: watcher::Config,
    ) -> impl futures::Stream<Item = Result<R, watcher::Error>> + Send + use<R>
    where
        R: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + 'static,
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

fn controller<K: ManagedKind>(
    shared: &Shared,
    config: &OperatorConfig,
    namespace: Option<&str>,
    shutdown: futures::future::Shared<BoxFuture<'static, ()>>,
    relay: Option<Arc<Relay<K>>>,
    secrets: &Relay<PartialObjectMeta<Secret>>,
    extend: impl FnOnce(Controller<K>, ScopedApi, Arc<KindGauges<K>>) -> Controller<K>,
) -> BoxFuture<'static, ()> {
    let scoped = ScopedApi::new(shared, namespace, config);
    // The store sees every change; reconciles are triggered only by changes a reconcile acts
    // on. Without the filter, each status write would wake its own object again, and a
    // refused create would be retried in a loop.
    let (store, writer) = reflector::store();
    let gauges = Arc::new(KindGauges::new(store.clone()));
    config.metrics.register_state(gauges.clone());
    shared.ownership.register(store.clone());
    let kind = K::kind(&()).to_string();
    let scope = sync_key(&kind, namespace);
    let (trigger, triggers) = mpsc::unbounded_channel();
    let cx = Context::new(
        shared,
        config.reconcile.clone(),
        config.metrics.clone(),
        gauges.clone(),
        trigger.clone(),
    );
    let readoption = Arc::new(Readoption::start(cx.clone(), trigger));
    let (metrics, health, woken, checked) = (
        config.metrics.clone(),
        config.health.clone(),
        gauges.clone(),
        readoption.clone(),
    );
    let mut listed_before = false;
    let watch = scoped.watch::<K>(watcher::Config::default().any_semantic());
    let objects = read_ahead(watch, READ_AHEAD)
        .reflect(writer)
        .inspect(move |event| match event {
            Ok(
                watcher::Event::Apply(object)
                | watcher::Event::InitApply(object)
                | watcher::Event::Delete(object),
            ) => {
                let listed = matches!(event, Ok(watcher::Event::InitApply(_)));
                // The first list tells followers nothing: each looks at all its objects
                // when it starts (see `readopt.rs`).
                if let Some(relay) = relay.as_ref().filter(|_| listed_before || !listed) {
                    relay.send(object);
                }
            }
            Ok(watcher::Event::Init) if listed_before => metrics.watch_restarted(&kind),
            Ok(watcher::Event::InitDone) => {
                readoption.listed();
                listed_before = true;
                // In the cache now; the watch reports its own health (`ScopedApi::watch`).
                health.synced(&scope);
            }
            Err(_) => metrics.watch_failed(&kind),
            _ => {}
        })
        .applied_objects()
        .predicate_filter(intent_changed, PredicateConfig::default())
        // Watch errors are counted above and retried by the backoff; kept out of the
        // controller, whose queue stalls on an error item until something else wakes it.
        .filter_map(move |object| {
            futures::future::ready(match object {
                // Settled objects of the first list are checked against the cloud's list
                // instead of each being reconciled at once.
                Ok(object) => checked.offer(object).map(|object| {
                    woken.triggered(&ObjectRef::from_obj(&object));
                    Ok::<_, watcher::Error>(object)
                }),
                Err(error) => {
                    tracing::debug!(%error, "object watch failed; retrying");
                    None
                }
            })
        });
    let controller = Controller::for_stream(objects, store.clone());

    // A changed credentials Secret wakes the objects that read it: those of its namespace that
    // name it, and, for the operator's default Secret, those of every namespace that name none.
    let secret_gauges = gauges.clone();
    let secret_accounts = shared.accounts.clone();
    let secret_changes = secrets.subscribe().flat_map(move |secret| {
        let namespace = secret.namespace();
        let name = secret.name_any();
        let is_default =
            secret_accounts.is_default_secret(namespace.as_deref().unwrap_or_default(), &name);
        futures::stream::iter(secret_gauges.wake(|o| {
            let managed = o.managed();
            match &managed.credentials_secret_ref {
                None => is_default,
                Some(named) => named.name == name && o.meta().namespace == namespace,
            }
        }))
    });

    let controller = extend(controller, scoped, gauges)
        .with_config(ControllerConfig::default().concurrency(config.concurrency))
        .reconcile_on(UnboundedReceiverStream::new(triggers))
        .reconcile_on(secret_changes)
        .graceful_shutdown_on(shutdown);
    let kind = K::kind(&()).to_string();
    controller
        .run(reconcile::<K>, error_policy::<K>, cx)
        .for_each(move |result| {
            match result {
                // Logged by the reconcile itself, with the object's name.
                Ok(_) | Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
                Err(error) => tracing::debug!(kind = %kind, %error, "controller error"),
            }
            futures::future::ready(())
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

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
