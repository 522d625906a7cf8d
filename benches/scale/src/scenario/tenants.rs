//! The multi-tenant run (`--scenario tenants`): N objects of every billed kind spread over
//! `--namespaces` namespaces that share `--accounts` cloud accounts. Each namespace is a team
//! with a credentials Secret of its own naming its account's key (namespace i uses account
//! i modulo the number of accounts) and the same mix: an SshKey and a Firewall, GpuInstances
//! using the key, a Volume attached to each of the first half of them and a Snapshot of each
//! of the first tenth.
//!
//! Each account's lower bound is today's for the calls no operator can do without in that
//! account (a create of every resource, an attach of every volume, two lists per kind) at
//! the account's own rate limit, plus the cloud's time for its last resource (a machine's
//! CREATING and BOOTING, then its snapshot's creating); the run is judged against the slowest
//! account's bound. The objects are applied round-robin over the namespaces, so every account
//! has work from the start.
//!
//! After the settled window the operator is restarted `--restarts` times with everything
//! settled, as in the single-account run: each restart until every kind's startup check has
//! re-adopted its objects in every namespace, against a new process's list of every kind in
//! every namespace plus the slowest account's cloud lists at its rate limit. Then come two
//! fairness phases: one namespace's burst (`burst.rs`) and one account's storm of 429 and 5xx
//! answers (`storm.rs`); the objects of both are deleted before the N objects are.

mod burst;
mod storm;

use super::{
    CLOUD_DELETING, CLOUD_READY_AFTER, CLOUD_SNAPSHOTTING, Environment, Error, LISTS_PER_PHASE,
    Readopting, Restarts, SSH_PUBLIC_KEY, bounded_phase, create_namespace, instance_spec,
    kube_error, log, operator_writes, restarts, settings, settled_summary, wait_for,
};
use crate::args::Args;
use crate::counters::Counters;
use crate::report::tenants::{AccountPhases, ApiServerFigures, TenantsMemory, TenantsResult};
use crate::tracker::Tracker;
use futures::TryStreamExt;
use gpucloud_api::{Firewall, GpuInstance, Snapshot, SshKey, Volume};
use gpucloud_controller::accounts::secrets::{CREDENTIALS_LABEL, CREDENTIALS_LABEL_VALUE};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The fewest objects per namespace the mix is made of (the key, the firewall, five
/// machines and two volumes).
pub const SMALLEST_MIX: usize = 9;

/// The kinds every namespace has, each listed by the operator once per account.
const KINDS: u64 = 5;
const CREDENTIALS: &str = "team-credentials";
const KEY: &str = "team-key";
const FIREWALL: &str = "team-edge";

/// One namespace's objects besides its key and firewall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mix {
    pub instances: usize,
    /// Each attached to one of the first `volumes` instances.
    pub volumes: usize,
    /// Each of one of the first `snapshots` instances.
    pub snapshots: usize,
}

impl Mix {
    /// The largest mix of at most `objects` objects.
    pub fn within(objects: usize) -> Mix {
        let mut instances = objects.saturating_sub(2) * 10 / 16 + 1;
        loop {
            let mix = Mix {
                instances,
                volumes: instances / 2,
                snapshots: instances / 10,
            };
            if mix.objects() <= objects || instances == 0 {
                return mix;
            }
            instances -= 1;
        }
    }

    /// Every object of a namespace, the key and the firewall included.
    pub fn objects(&self) -> usize {
        2 + self.instances + self.volumes + self.snapshots
    }

    /// Cloud writes no operator can do without to make a namespace: a create of every
    /// resource and an attach of every volume.
    pub fn creates(&self) -> u64 {
        (self.objects() + self.volumes) as u64
    }
}

/// The namespaces and which account each uses.
#[derive(Debug, Clone)]
pub struct Teams {
    pub namespaces: Vec<String>,
    pub accounts: usize,
}

impl Teams {
    pub fn new(namespaces: usize, accounts: usize) -> Teams {
        Teams {
            namespaces: (0..namespaces).map(|i| format!("tenant-{i:03}")).collect(),
            accounts,
        }
    }

    /// The account of namespace `namespace` (of this run's; others count as account 0).
    pub fn account_of(&self, namespace: &str) -> usize {
        namespace
            .strip_prefix("tenant-")
            .and_then(|i| i.parse::<usize>().ok())
            .map_or(0, |i| i % self.accounts.max(1))
    }

    /// The namespaces of account `account`.
    pub fn namespaces_of(&self, account: usize) -> usize {
        self.namespaces
            .iter()
            .filter(|n| self.account_of(n) == account)
            .count()
    }
}

/// One object to apply.
struct Manifest {
    resource: ApiResource,
    namespace: String,
    object: DynamicObject,
}

impl Manifest {
    fn key(&self) -> String {
        tracker_key(
            &self.resource.kind,
            &self.namespace,
            &self.object.name_any(),
        )
    }
}

fn tracker_key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

fn manifest<K: Resource<DynamicType = ()>>(
    namespace: &str,
    name: &str,
    spec: serde_json::Value,
) -> Result<Manifest, Error> {
    let resource = ApiResource::erase::<K>(&());
    let mut spec = spec;
    spec["credentialsSecretRef"] = serde_json::json!({"name": CREDENTIALS});
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))?;
    Ok(Manifest {
        resource,
        namespace: namespace.to_string(),
        object,
    })
}

/// A namespace's objects in the order a team would apply them.
fn namespace_manifests(namespace: &str, mix: Mix) -> Result<Vec<Manifest>, Error> {
    let mut manifests = vec![
        manifest::<SshKey>(
            namespace,
            KEY,
            serde_json::json!({"publicKey": SSH_PUBLIC_KEY}),
        )?,
        manifest::<Firewall>(
            namespace,
            FIREWALL,
            serde_json::json!({
                "region": "us-east-1",
                "description": "the team's machines",
                "rules": [{
                    "direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
                    "remoteIpPrefix": "203.0.113.0/24", "portRangeMin": 22, "portRangeMax": 22,
                }],
            }),
        )?,
    ];
    for i in 0..mix.instances {
        manifests.push(machine(namespace, &instance_name(i))?);
    }
    for i in 0..mix.volumes {
        manifests.push(manifest::<Volume>(
            namespace,
            &format!("vol-{i:05}"),
            serde_json::json!({
                "region": "us-east-1", "sizeGb": 100, "volumeType": "NVMe",
                "instanceRef": {"name": instance_name(i)},
            }),
        )?);
    }
    for i in 0..mix.snapshots {
        manifests.push(manifest::<Snapshot>(
            namespace,
            &format!("snap-{i:05}"),
            serde_json::json!({"instanceRef": {"name": instance_name(i)}}),
        )?);
    }
    Ok(manifests)
}

/// A team's machine: the benchmark's spec, with the team's key.
fn machine(namespace: &str, name: &str) -> Result<Manifest, Error> {
    let mut spec = instance_spec();
    spec["sshKeyRefs"] = serde_json::json!([{"name": KEY}]);
    manifest::<GpuInstance>(namespace, name, spec)
}

fn instance_name(i: usize) -> String {
    format!("gi-{i:05}")
}

/// Every namespace's objects, taken round-robin: the first of each namespace, then the
/// second of each, and so on.
fn interleaved(per_namespace: Vec<Vec<Manifest>>) -> Vec<Manifest> {
    let mut queues: Vec<std::vec::IntoIter<Manifest>> =
        per_namespace.into_iter().map(Vec::into_iter).collect();
    let mut all = Vec::new();
    loop {
        let before = all.len();
        all.extend(queues.iter_mut().filter_map(Iterator::next));
        if all.len() == before {
            return all;
        }
    }
}

/// The namespaces, each with its credentials Secret.
async fn prepare_namespaces(env: &Environment, teams: &Teams) -> Result<(), Error> {
    for name in &teams.namespaces {
        create_namespace(&env.client, name).await?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(CREDENTIALS.into()),
                labels: Some(BTreeMap::from([(
                    CREDENTIALS_LABEL.to_string(),
                    CREDENTIALS_LABEL_VALUE.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            string_data: Some(BTreeMap::from([(
                "apiKey".to_string(),
                env.api_keys[teams.account_of(name)].clone(),
            )])),
            ..Secret::default()
        };
        Api::<Secret>::namespaced(env.client.clone(), name)
            .create(&PostParams::default(), &secret)
            .await
            .map_err(kube_error(format!(
                "creating the credentials Secret of {name}"
            )))?;
    }
    Ok(())
}

/// Watches every kind in every namespace, each object counted under its account.
fn track_every_kind(env: &Environment, teams: &Arc<Teams>) -> Tracker {
    fn watch<K>(tracker: &Tracker, env: &Environment, teams: &Arc<Teams>)
    where
        K: Resource<DynamicType = ()>
            + gpucloud_api::Managed
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + 'static,
    {
        let teams = teams.clone();
        tracker.watch(
            Api::<K>::all(env.client.clone()),
            |object: &K| {
                tracker_key(
                    &K::kind(&()),
                    &object.namespace().unwrap_or_default(),
                    &object.name_any(),
                )
            },
            move |object: &K| teams.account_of(&object.namespace().unwrap_or_default()),
        );
    }
    let tracker = Tracker::new(Duration::from_millis(500));
    watch::<SshKey>(&tracker, env, teams);
    watch::<Firewall>(&tracker, env, teams);
    watch::<GpuInstance>(&tracker, env, teams);
    watch::<Volume>(&tracker, env, teams);
    watch::<Snapshot>(&tracker, env, teams);
    tracker
}

/// Creates (or deletes) every manifest with `writers` at once.
async fn apply(
    env: &Environment,
    manifests: &[Manifest],
    tracker: Option<&Tracker>,
    delete: bool,
    writers: usize,
) -> Result<(), Error> {
    futures::stream::iter(manifests.iter().map(Ok::<_, Error>))
        .try_for_each_concurrent(writers, |m| async move {
            let api: Api<DynamicObject> =
                Api::namespaced_with(env.client.clone(), &m.namespace, &m.resource);
            let name = m.object.name_any();
            if delete {
                api.delete(&name, &DeleteParams::default())
                    .await
                    .map_err(kube_error(format!("deleting {}", m.key())))?;
            } else {
                if let Some(tracker) = tracker {
                    tracker.applying(&m.key());
                }
                api.create(&PostParams::default(), &m.object)
                    .await
                    .map_err(kube_error(format!("creating {}", m.key())))?;
            }
            Ok(())
        })
        .await
}

/// Seconds to list every object of each kind across the namespaces, by kind.
async fn list_latencies(env: &Environment) -> Result<BTreeMap<String, (usize, f64)>, Error> {
    async fn timed<K>(env: &Environment) -> Result<(String, (usize, f64)), Error>
    where
        K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    {
        let started = Instant::now();
        let listed = Api::<K>::all(env.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kube_error(format!("listing every {}", K::kind(&()))))?
            .items
            .len();
        Ok((
            K::kind(&()).to_string(),
            (listed, started.elapsed().as_secs_f64()),
        ))
    }
    Ok(BTreeMap::from([
        timed::<GpuInstance>(env).await?,
        timed::<Volume>(env).await?,
        timed::<Snapshot>(env).await?,
        timed::<SshKey>(env).await?,
        timed::<Firewall>(env).await?,
    ]))
}

/// Objects of every kind the API server holds, listed: a watch's view can keep an object
/// whose deletion fell in a gap it re-listed over.
async fn objects_left(env: &Environment) -> Result<usize, Error> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(list_latencies(env).await?.values().map(|(n, _)| n).sum())
}

/// Milliseconds since the epoch: the simulator's clock is this machine's.
fn epoch_ms(at: std::time::SystemTime) -> i64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The cloud writes since `from`, read from the simulator's ledger, per 5 s: each account's,
/// and every account's per operation.
async fn writes_since(
    env: &Environment,
    accounts: usize,
    from: std::time::SystemTime,
) -> Result<(Vec<Vec<u32>>, BTreeMap<String, Vec<u32>>), Error> {
    let ledger = env.admin.ledger().await?;
    let (from_ms, until_ms) = (epoch_ms(from), epoch_ms(std::time::SystemTime::now()));
    let step = Duration::from_secs(5);
    Ok((
        crate::counters::writes_per_step(&ledger, accounts, from_ms, until_ms, step),
        crate::counters::operations_per_step(&ledger, from_ms, until_ms, step),
    ))
}

/// Per account: the phase's time against the cloud writes it needed at least
/// (`minimum_writes[account]`) and two lists per kind.
fn account_phases(
    args: &Args,
    counters: &Counters,
    took: &[Duration],
    minimum_writes: &[u64],
    cloud_time: Duration,
) -> AccountPhases {
    let accounts = took
        .iter()
        .zip(minimum_writes)
        .enumerate()
        .map(|(account, (took, writes))| {
            bounded_phase(
                args,
                *took,
                &counters.of_account(account),
                writes + LISTS_PER_PHASE * KINDS,
                cloud_time,
            )
        })
        .collect();
    AccountPhases::new(accounts)
}

pub(super) async fn measure(
    args: &Args,
    binary: &Path,
    env: &Environment,
) -> Result<TenantsResult, Error> {
    let teams = Arc::new(Teams::new(args.namespaces, args.accounts));
    let mix = Mix::within(args.objects / args.namespaces);
    prepare_namespaces(env, &teams).await?;
    let manifests = interleaved(
        teams
            .namespaces
            .iter()
            .map(|namespace| namespace_manifests(namespace, mix))
            .collect::<Result<_, _>>()?,
    );
    let objects = manifests.len();
    let keys_of = |account: usize| -> Vec<String> {
        manifests
            .iter()
            .filter(|m| teams.account_of(&m.namespace) == account)
            .map(Manifest::key)
            .collect()
    };
    let tracker = track_every_kind(env, &teams);

    // 1. The operator, idle.
    let operator = env
        .start_operator(args, binary, "operator", Default::default())
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let operator_idle = operator.usage()?;
    log(&format!(
        "operator idle: {:.1} MB; applying {objects} objects ({mix:?} in each of {} namespaces, {} accounts)",
        operator_idle.rss_bytes as f64 / 1e6,
        teams.namespaces.len(),
        teams.accounts
    ));

    // 2. Everything, until every object is Ready.
    let before = env.admin.counters().await?;
    let api_at_start = env.api_counts().await?;
    let started = Instant::now();
    let started_on_clock = std::time::SystemTime::now();
    apply(env, &manifests, Some(&tracker), false, args.writers).await?;
    log(&format!(
        "applied {objects} objects in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let all_keys: Vec<String> = manifests.iter().map(Manifest::key).collect();
    let converged_at = wait_for(args.phase_timeout, "every object Ready", || {
        let done = tracker.all_ready_at(&all_keys);
        async move { done }
    })
    .await
    .map_err(|e| super::with_progress(e, format!("{} of {objects} Ready", tracker.ready())))?;
    let ready_took: Vec<Duration> = (0..teams.accounts)
        .map(|account| {
            tracker
                .all_ready_at(&keys_of(account))
                .unwrap_or(converged_at)
                .saturating_duration_since(started)
        })
        .collect();
    let convergence_counters = env.admin.counters().await?.since(&before);
    let creates: Vec<u64> = (0..teams.accounts)
        .map(|account| teams.namespaces_of(account) as u64 * mix.creates())
        .collect();
    let mut convergence = account_phases(
        args,
        &convergence_counters,
        &ready_took,
        &creates,
        CLOUD_READY_AFTER + CLOUD_SNAPSHOTTING,
    );
    (convergence.writes_per_5s, convergence.operations_per_5s) =
        writes_since(env, teams.accounts, started_on_clock).await?;
    log(&format!(
        "converged in {:.1} s (slowest account's bound {:.1} s)",
        convergence.seconds, convergence.lower_bound_s
    ));
    let converged_mark = tracker.seconds(converged_at);
    let operator_all_ready = operator.usage()?;

    // 3. Settled window.
    tokio::time::sleep(args.quiet_wait).await;
    let api_at_settled = env.api_counts().await?;
    let window_start = env.admin.counters().await?;
    tokio::time::sleep(args.settled_window).await;
    let window = env.admin.counters().await?.since(&window_start);
    let operator_settled = operator.usage()?;
    let settled = (0..teams.accounts)
        .map(|account| settled_summary(args, &window.of_account(account), keys_of(account).len()))
        .collect();
    let api_server = ApiServerFigures {
        list_seconds_by_kind: list_latencies(env).await?,
        usage_settled: env.apiserver.usage()?,
    };

    // 4. Restarts: kill the operator, start a new one, wait until every object of every kind
    // in every namespace is re-adopted.
    let restart_mark = tracker.seconds(Instant::now());
    let mut objects_by_kind = BTreeMap::new();
    for m in &manifests {
        *objects_by_kind.entry(m.resource.kind.clone()).or_insert(0) += 1;
    }
    let readopting = Readopting {
        objects_by_kind,
        accounts: teams.accounts,
        fewest_lists: KINDS,
    };
    let Restarts {
        operator,
        restart,
        operator_restarted,
        killed_cpu_s,
    } = restarts(args, binary, env, operator, &readopting).await?;
    let api_after_restarts = env.api_counts().await?;

    // 5. Fairness: one namespace's burst, new objects in two quiet namespaces; then they
    // go, so that the deletion below is that of the N objects alone.
    let burst = if args.burst_size() > 0 {
        let (burst, made) = burst::measure(args, env, &teams, &tracker).await?;
        log(&format!("{burst:?}"));
        apply(env, &made, None, true, args.writers).await?;
        wait_for(
            args.phase_timeout,
            "the burst and the probes deleted",
            || async { (objects_left(env).await.ok()? <= objects).then_some(()) },
        )
        .await?;
        Some(burst)
    } else {
        None
    };

    // 6. Fairness in a storm: new machines in every namespace, without a fault and then
    // with the first account in a storm; they go too before the deletion below.
    let storm = if args.storm_size() > 0 && teams.accounts > 1 {
        let instances: Vec<usize> = (0..teams.accounts)
            .map(|account| teams.namespaces_of(account) * mix.instances)
            .collect();
        let storm = storm::measure(args, env, &teams, &tracker, &instances, objects).await?;
        log(&format!(
            "storm: the other accounts' slowest {:.2}x their time without it",
            storm.ratio().unwrap_or(f64::NAN)
        ));
        Some(storm)
    } else {
        None
    };

    // 7. Delete everything; time until every account is empty.
    let deletion_mark = tracker.seconds(Instant::now());
    let before_delete = env.admin.counters().await?;
    let api_before_delete = env.api_counts().await?;
    let deleting = Instant::now();
    let deleting_on_clock = std::time::SystemTime::now();
    apply(env, &manifests, None, true, args.writers).await?;
    let mut emptied_at: Vec<Option<Instant>> = vec![None; teams.accounts];
    while emptied_at.iter().any(Option::is_none) {
        if deleting.elapsed() > args.phase_timeout {
            let left = emptied_at.iter().filter(|at| at.is_none()).count();
            return Err(Error::Timeout {
                what: "every account empty".into(),
                seconds: args.phase_timeout.as_secs(),
                progress: format!("{left} accounts still hold resources"),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        for (account, at) in emptied_at.iter_mut().enumerate() {
            if at.is_none() && env.admin.holdings_of(account).await?.is_empty() {
                *at = Some(Instant::now());
            }
        }
    }
    wait_for(
        args.phase_timeout,
        "every object gone from the API server",
        || async { (objects_left(env).await.ok()? == 0).then_some(()) },
    )
    .await?;
    let deletion_took: Vec<Duration> = emptied_at
        .iter()
        .map(|at| {
            at.unwrap_or_else(Instant::now)
                .saturating_duration_since(deleting)
        })
        .collect();
    let deletion_counters = env.admin.counters().await?.since(&before_delete);
    let deletes: Vec<u64> = (0..teams.accounts)
        .map(|account| {
            manifests
                .iter()
                .filter(|m| teams.account_of(&m.namespace) == account)
                .count() as u64
        })
        .collect();
    let mut deletion = account_phases(
        args,
        &deletion_counters,
        &deletion_took,
        &deletes,
        CLOUD_DELETING,
    );
    (deletion.writes_per_5s, deletion.operations_per_5s) =
        writes_since(env, teams.accounts, deleting_on_clock).await?;
    log(&format!(
        "deleted in {:.1} s (slowest account's bound {:.1} s)",
        deletion.seconds, deletion.lower_bound_s
    ));

    let operator_cpu_s = killed_cpu_s + operator.usage()?.cpu_seconds;
    let api_at_end = env.stop_operator(operator).await?;
    let memory = TenantsMemory {
        slope_bytes_per_object: (operator_settled.rss_bytes as f64
            - operator_idle.rss_bytes as f64)
            / objects as f64,
        operator_idle,
        operator_all_ready,
        operator_settled,
        operator_restarted,
        operator_cpu_s,
        apiserver: env.apiserver.usage()?,
        simulator: env.simulator.usage()?,
    };
    let phase_writes = |later, earlier| operator_writes(later, earlier, objects);
    // The burst's writes are left out: they are not the N objects'.
    let api_writes = crate::report::ApiWrites::new(
        objects,
        phase_writes(&api_at_settled, &api_at_start),
        phase_writes(&api_after_restarts, &api_at_settled),
        phase_writes(&api_at_end, &api_before_delete),
    );
    let end_mark = tracker.seconds(Instant::now());
    let mut timelines = tracker.group_timelines();
    for timeline in timelines.values_mut() {
        timeline.retain(|(t, _)| *t <= end_mark);
    }
    Ok(TenantsResult {
        settings: settings(args),
        namespaces: teams.namespaces.len(),
        accounts: teams.accounts,
        mix,
        objects,
        convergence,
        settled,
        restart,
        deletion,
        memory,
        api_writes,
        api_server,
        burst,
        storm,
        calls_by_operation: env.admin.counters().await?.by_operation(),
        timelines,
        marks: vec![converged_mark, restart_mark, deletion_mark],
        targets: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mix_is_the_largest_within_its_objects() {
        // objects -> (instances, volumes, snapshots)
        let cases = [(9, (5, 2, 0)), (100, (61, 30, 6)), (1_000, (624, 312, 62))];
        for (objects, (instances, volumes, snapshots)) in cases {
            let mix = Mix::within(objects);
            assert_eq!(
                (mix.instances, mix.volumes, mix.snapshots),
                (instances, volumes, snapshots),
                "{objects}"
            );
            assert!(mix.objects() <= objects);
        }
        assert_eq!(Mix::within(100).creates(), 99 + 30);
    }

    #[test]
    fn namespaces_share_the_accounts_round_robin() {
        let teams = Teams::new(10, 2);
        assert_eq!(teams.account_of("tenant-003"), 1);
        assert_eq!(teams.account_of("tenant-004"), 0);
        assert_eq!(teams.account_of("kube-system"), 0);
        assert_eq!((teams.namespaces_of(0), teams.namespaces_of(1)), (5, 5));
    }

    #[test]
    fn manifests_are_taken_round_robin_over_the_namespaces() {
        let mix = Mix::within(SMALLEST_MIX);
        let all = interleaved(vec![
            namespace_manifests("tenant-000", mix).unwrap_or_else(|e| panic!("{e}")),
            namespace_manifests("tenant-001", mix).unwrap_or_else(|e| panic!("{e}")),
        ]);
        let keys: Vec<String> = all.iter().take(4).map(Manifest::key).collect();
        assert_eq!(
            keys,
            [
                "SshKey/tenant-000/team-key",
                "SshKey/tenant-001/team-key",
                "Firewall/tenant-000/team-edge",
                "Firewall/tenant-001/team-edge",
            ]
        );
        assert_eq!(all.len(), 2 * mix.objects());
        assert!(
            all.iter()
                .all(|m| { m.object.data["spec"]["credentialsSecretRef"]["name"] == CREDENTIALS })
        );
    }
}
