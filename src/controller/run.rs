//! Wiring: one kube-runtime `Controller` per kind (and per watched namespace), each fed by
//! its object watch, its cloud observers, and the watches that wake it when something it
//! depends on changes (credentials Secrets, referenced objects).

use crate::account::{Accounts, CloudSettings, SecretLocation};
use crate::context::{Context, ReconcileSettings};
use crate::kind::ManagedKind;
use crate::orphans::{OrphanSweepSettings, OrphanSweeper};
use crate::reconcile::{error_policy, reconcile};
use futures::{FutureExt, StreamExt, future::BoxFuture};
use gpucloud_api::{Firewall, GpuInstance, Image, Snapshot, SshKey, Volume};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use std::sync::Arc;
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
}

/// Runs every controller until `shutdown` resolves, then lets in-flight reconciles finish.
pub async fn run(client: kube::Client, config: OperatorConfig, shutdown: BoxFuture<'static, ()>) {
    let accounts = Arc::new(Accounts::new(
        config.cloud.clone(),
        client.clone(),
        config.default_secret.clone(),
    ));
    let shutdown = shutdown.shared();
    let scopes: Vec<Option<String>> = if config.namespaces.is_empty() {
        vec![None]
    } else {
        config.namespaces.iter().cloned().map(Some).collect()
    };
    let mut controllers = Vec::new();
    controllers.push(
        OrphanSweeper::new(
            client.clone(),
            accounts.clone(),
            config.namespaces.clone(),
            config.orphans.clone(),
            config.reporter.clone(),
        )
        .run(shutdown.clone().boxed())
        .boxed(),
    );
    for scope in scopes {
        controllers.push(controller::<SshKey>(
            &client,
            &accounts,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            |c, _| c,
        ));
        controllers.push(controller::<GpuInstance>(
            &client,
            &accounts,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            |c, api| {
                let keys = c.store();
                let snapshots = c.store();
                let images = c.store();
                let scripts = c.store();
                c.watches(
                    api_for::<SshKey>(&api),
                    watcher::Config::default(),
                    move |key| {
                        referrers(&keys, &key, |i| {
                            i.spec.ssh_key_refs.iter().any(|r| r.name == key.name_any())
                        })
                    },
                )
                .watches(
                    api_for::<Snapshot>(&api),
                    watcher::Config::default(),
                    move |snapshot| {
                        referrers(&snapshots, &snapshot, |i| {
                            i.spec
                                .source
                                .as_ref()
                                .is_some_and(|s| s.snapshot_ref.name == snapshot.name_any())
                        })
                    },
                )
                .watches(
                    api_for::<Image>(&api),
                    watcher::Config::default(),
                    move |image| {
                        referrers(&images, &image, |i| {
                            i.spec
                                .image_ref
                                .as_ref()
                                .is_some_and(|r| r.name == image.name_any())
                        })
                    },
                )
                // Startup scripts read from a ConfigMap; only metadata is watched (a change
                // of the data changes its resourceVersion).
                .watches(
                    api_for::<PartialObjectMeta<ConfigMap>>(&api),
                    watcher::Config::default(),
                    move |map| {
                        referrers(&scripts, &map, |i| {
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
            &client,
            &accounts,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            |c, api| {
                let attached = c.store();
                let clones = c.store();
                c.watches(
                    api_for::<GpuInstance>(&api),
                    watcher::Config::default(),
                    move |instance| {
                        referrers(&attached, &instance, |v| {
                            v.spec
                                .instance_ref
                                .as_ref()
                                .is_some_and(|r| r.name == instance.name_any())
                        })
                    },
                )
                .watches(
                    api_for::<Volume>(&api),
                    watcher::Config::default(),
                    move |source| {
                        referrers(&clones, &source, |v| {
                            v.spec
                                .source
                                .as_ref()
                                .is_some_and(|s| s.volume_ref.name == source.name_any())
                        })
                    },
                )
            },
        ));
        controllers.push(controller::<Snapshot>(
            &client,
            &accounts,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            |c, api| {
                let store = c.store();
                // The snapshotted machine, and machines restored from a snapshot (which
                // hold its deletion until they exist).
                c.watches(
                    api_for::<GpuInstance>(&api),
                    watcher::Config::default(),
                    move |instance| {
                        let restored_from = instance
                            .spec
                            .source
                            .as_ref()
                            .map(|s| s.snapshot_ref.name.clone());
                        referrers(&store, &instance, |s| {
                            s.spec
                                .instance_ref
                                .as_ref()
                                .is_some_and(|r| r.name == instance.name_any())
                                || restored_from.as_deref() == Some(s.name_any().as_str())
                        })
                    },
                )
            },
        ));
        controllers.push(controller::<Image>(
            &client,
            &accounts,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            |c, api| {
                let store = c.store();
                c.watches(
                    api_for::<Snapshot>(&api),
                    watcher::Config::default(),
                    move |snapshot| {
                        referrers(&store, &snapshot, |i| {
                            i.spec.snapshot_ref.name == snapshot.name_any()
                        })
                    },
                )
            },
        ));
        controllers.push(controller::<Firewall>(
            &client,
            &accounts,
            &config,
            scope.as_deref(),
            shutdown.clone(),
            |c, api| {
                let store = c.store();
                c.watches(
                    api_for::<GpuInstance>(&api),
                    watcher::Config::default(),
                    move |instance| {
                        referrers(&store, &instance, |f| {
                            f.spec
                                .instance_refs
                                .iter()
                                .any(|r| r.name == instance.name_any())
                                // Matching or not: a label removed must detach too.
                                || f.spec.instance_selector.is_some()
                        })
                    },
                )
            },
        ));
    }
    futures::future::join_all(controllers).await;
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

/// An `Api` of kind `R` with the same scope (namespace or cluster) as `api`.
fn api_for<R>(api: &ScopedApi) -> Api<R>
where
    R: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match &api.namespace {
        Some(ns) => Api::namespaced(api.client.clone(), ns),
        None => Api::all(api.client.clone()),
    }
}

/// Client and namespace a controller works in, for the watches a kind adds.
pub struct ScopedApi {
    pub client: kube::Client,
    pub namespace: Option<String>,
}

/// The objects of `store` in `changed`'s namespace for which `refers` holds.
fn referrers<K: ManagedKind>(
    store: &Store<K>,
    changed: &impl Resource,
    refers: impl Fn(&K) -> bool,
) -> Vec<ObjectRef<K>> {
    let namespace = changed.meta().namespace.clone();
    store
        .state()
        .iter()
        .filter(|o| o.meta().namespace == namespace && refers(o))
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

fn controller<K: ManagedKind>(
    client: &kube::Client,
    accounts: &Arc<Accounts>,
    config: &OperatorConfig,
    namespace: Option<&str>,
    shutdown: futures::future::Shared<BoxFuture<'static, ()>>,
    extend: impl FnOnce(Controller<K>, ScopedApi) -> Controller<K>,
) -> BoxFuture<'static, ()> {
    let scoped = ScopedApi {
        client: client.clone(),
        namespace: namespace.map(str::to_string),
    };
    let api: Api<K> = api_for(&scoped);
    // The store sees every change; reconciles are triggered only by changes a reconcile acts
    // on. Without the filter, each status write would wake its own object again, and a
    // refused create would be retried in a loop.
    let (store, writer) = reflector::store();
    let objects = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(intent_changed, PredicateConfig::default());
    let controller = Controller::for_stream(objects, store.clone());
    let (trigger, triggers) = mpsc::unbounded_channel();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: config.reporter.clone(),
            instance: None,
        },
    );
    let cx = Context::new(
        client.clone(),
        accounts.clone(),
        config.reconcile.clone(),
        recorder,
        store.clone(),
        trigger,
    );

    // A changed credentials Secret wakes the objects that read it. Only metadata is watched:
    // the operator never holds Secret contents it does not need.
    let secrets: Api<PartialObjectMeta<Secret>> = match &scoped.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let secret_store = store.clone();
    let secret_accounts = accounts.clone();
    let secret_changes = watcher(secrets, watcher::Config::default())
        .touched_objects()
        .map(move |secret| {
            secret.map(|secret| {
                let namespace = secret.namespace().unwrap_or_default();
                let name = secret.name_any();
                let is_default = secret_accounts.is_default_secret(&namespace, &name);
                referrers(&secret_store, &secret, |o| {
                    is_default && o.managed().credentials_secret_ref.is_none()
                        || o.managed()
                            .credentials_secret_ref
                            .as_ref()
                            .is_some_and(|r| r.name == name)
                })
            })
        });

    let controller = extend(
        controller,
        ScopedApi {
            client: client.clone(),
            namespace: namespace.map(str::to_string),
        },
    )
    .with_config(ControllerConfig::default().concurrency(config.concurrency))
    .reconcile_on(UnboundedReceiverStream::new(triggers))
    .reconcile_on(
        secret_changes
            .filter_map(|r| async move { r.ok() })
            .flat_map(futures::stream::iter),
    )
    .graceful_shutdown_on(shutdown);
    let kind = K::kind(&()).to_string();
    controller
        .run(reconcile::<K>, error_policy::<K>, cx)
        .for_each(move |result| {
            if let Err(error) = result {
                tracing::debug!(kind = %kind, %error, "reconcile failed");
            }
            futures::future::ready(())
        })
        .boxed()
}
