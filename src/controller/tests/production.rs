#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The operator as production runs it: metrics and probes over HTTP through a whole run,
//! events on the objects, two replicas behind a Lease with the leader killed mid-creation,
//! a leader that loses its lease, and readiness through an API server outage.

use crate::support;

use futures::FutureExt;
use gpucloud_api::*;
use gpucloud_controller::accounts::orphans::OrphanSweepSettings;
use gpucloud_controller::operator::replica::{self, ReplicaSettings};
use gpucloud_controller::operator::run::OperatorConfig;
use gpucloud_controller::runtime::leader::LeaseSettings;
use gpucloud_simulator::{FaultPlan, SimulatorConfig, ThrottleBurst};
use gpucloud_telemetry::{Endpoints, Health, HealthSettings, Metrics};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams, PostParams};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{
    Env, OPERATOR_NAMESPACE, eventually, eventually_showing, object, ready, test_config,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const LEASE: &str = "gpucloud-operator";

fn lease_settings(identity: &str) -> LeaseSettings {
    LeaseSettings {
        namespace: OPERATOR_NAMESPACE.into(),
        name: LEASE.into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(500),
    }
}

/// One operator replica in this process, with its own metrics, probes and lease identity.
struct Replica {
    endpoints: Endpoints,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), replica::Error>>>,
}

impl Replica {
    async fn start(env: &Env, identity: &str, config: OperatorConfig) -> Replica {
        Replica::start_with(env, Some(lease_settings(identity)), config).await
    }

    /// A replica with `config`'s health settings, elected by `lease` or running without an
    /// election.
    async fn start_with(
        env: &Env,
        lease: Option<LeaseSettings>,
        config: OperatorConfig,
    ) -> Replica {
        let config = OperatorConfig {
            metrics: Arc::new(Metrics::new()),
            health: Arc::new(Health::new(config.health.settings())),
            ..config
        };
        // As the binary does (cli.rs).
        config
            .metrics
            .set_build_info(&gpucloud_telemetry::BuildInfo {
                version: env!("CARGO_PKG_VERSION"),
                commit: "0123456789ab",
                commit_date: "2026-11-27T00:00:00+00:00",
                kubernetes: gpucloud_controller::operator::cli::KUBERNETES_API,
            });
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let endpoints = gpucloud_telemetry::server::serve(
            Endpoints {
                metrics: any,
                health: any,
            },
            config.metrics.clone(),
            config.health.clone(),
            futures::future::pending(),
        )
        .await
        .unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let settings = ReplicaSettings {
            leader_election: lease,
            shutdown_timeout: Duration::from_secs(10),
        };
        // As the binary does (cli.rs): the client counts every request it makes.
        let client = gpucloud_controller::runtime::client_metrics::counted_client(
            &env.client,
            config.metrics.clone(),
            &env.apiserver.local_addr().to_string(),
        );
        let task = tokio::spawn(replica::run_replica(
            client,
            config,
            settings,
            stopped.map(drop).boxed(),
        ));
        Replica {
            endpoints,
            stop: Some(stop),
            task: Some(task),
        }
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let url = format!("http://{}{path}", self.endpoints.health);
        let response = reqwest::get(url).await.unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.endpoints.metrics);
        // Asked for as Prometheus asks (without it the answer is the 0.0.4 text format).
        let response = reqwest::Client::new()
            .get(url)
            .header(
                reqwest::header::ACCEPT,
                "application/openmetrics-text; version=1.0.0",
            )
            .send()
            .await
            .unwrap();
        // The body is OpenMetrics text and says so: Prometheus parses a body by its content
        // type, and as the 0.0.4 text format it would drop the counters' types.
        assert_eq!(
            response.headers()[reqwest::header::CONTENT_TYPE],
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        let body = response.text().await.unwrap();
        assert!(body.ends_with("# EOF\n"), "not OpenMetrics: {body}");
        body
    }

    /// SIGTERM's path: stop, wait for the replica to finish.
    async fn shut_down(&mut self) -> Result<(), replica::Error> {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap()
    }

    /// A crash: the replica's task is dropped mid-flight, nothing released.
    async fn kill(&mut self) {
        let task = self.task.take().unwrap();
        task.abort();
        let _ = task.await;
    }
}

/// The value of the sample `name{labels}` (the whole prefix up to the value), or 0.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|value| value.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

async fn holder(env: &Env) -> Option<String> {
    let leases: kube::Api<Lease> = kube::Api::namespaced(env.client.clone(), OPERATOR_NAMESPACE);
    leases
        .get_opt(LEASE)
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

fn instance(name: &str, extra: serde_json::Value) -> GpuInstance {
    let mut spec = serde_json::json!({
        "region": "us-east-1", "gpuType": "H100-80G", "osImage": "ubuntu-22.04-cuda-12",
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    object(name, spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_probes_and_events_follow_a_whole_run() {
    // An occasional 429 and a small client bucket: the throttling, retry and rate-limiter
    // families the dashboard plots have samples too.
    let simulator = SimulatorConfig {
        faults: FaultPlan {
            throttle_burst: Some(ThrottleBurst {
                probability: 0.1,
                length: 1,
                retry_after_secs: 0,
            }),
            ..FaultPlan::default()
        },
        ..SimulatorConfig::default()
    };
    let env = Env::without_operator(simulator).await;
    // A resource with the operator's mark that no object claims, for the sweeper to count.
    support::cloud_client(&env)
        .create_ssh_key(&gpucloud_cloud::model::CreateSshKeyRequest {
            name: "gco-gone-object-0123456789abcdef".into(),
            public_key: None,
        })
        .await
        .unwrap();
    let mut replica = Replica::start(&env, "replica-a", metered_config(&env)).await;
    assert_eq!(replica.get("/healthz").await.0, 200);

    eventually(30, "ready once leading with synced caches", || async {
        let (status, body) = replica.get("/readyz").await;
        (status == 200 && body.contains("leading: caches synced")).then_some(())
    })
    .await;
    let before = replica.metrics().await;
    assert_eq!(sample(&before, "gpucloud_leader"), 1.0, "{before}");

    let api = env.api::<GpuInstance>();
    run_a_machine_a_stalled_one_a_budget_and_a_relist(&env).await;

    let after = eventually(30, "metrics caught up", || async {
        let text = replica.metrics().await;
        (sample(
            &text,
            r#"gpucloud_objects{kind="GpuInstance",condition="Stalled",status="True"}"#,
        ) == 1.0
            && sample(
                &text,
                r#"gpucloud_watch_restarts_total{kind="GpuInstance"}"#,
            ) >= 1.0
            && sample(&text, r#"gpucloud_orphaned_resources{resource="ssh-key"}"#) == 1.0
            // Read once per resync interval.
            && text.contains("gpucloud_account_balance{account=")
            && text.contains("gpucloud_cloud_throttled_total{")
            && text.contains("gpucloud_cloud_rate_limit_wait_seconds_total{")
            // Counted by the Budget's controller.
            && text.contains(r#"gpucloud_budget_spent{object_namespace="team-a",budget="team",currency="USD"}"#))
        .then_some(text)
    })
    .await;
    assert_the_counters_moved(&env, &before, &after);
    assert_the_gauges_and_families_are_shown(&env, &after);

    api.delete("metered", &Default::default()).await.unwrap();
    support::gone::<GpuInstance>(&env, "metered").await;
    support::wait_for_events(&env, "metered", &["Created", "Deleted"]).await;
    support::wait_for_events(&env, "unknown-gpu", &["InvalidSpec"]).await;

    replica.shut_down().await.unwrap();
    let (status, body) = replica.get("/readyz").await;
    assert_eq!((status, body.trim()), (503, "shutting down"));
    assert_eq!(replica.get("/healthz").await.0, 200, "a clean stop is live");
    assert_eq!(holder(&env).await, None, "the lease was handed back");
}

/// The operator's settings for a metered run: a client bucket of one call, and the orphan
/// sweeper every second with no grace period.
fn metered_config(env: &Env) -> OperatorConfig {
    let mut config = test_config(&env.simulator);
    config.cloud.rate_limit = Some(gpucloud_cloud::RateLimit {
        per_second: 50.0,
        burst: 1,
    });
    config.orphans = OrphanSweepSettings {
        interval: Duration::from_secs(1),
        grace_period: Duration::ZERO,
        ..OrphanSweepSettings::disabled()
    };
    config
}

/// A machine made Ready and stopped, one stalled on an unknown GPU type, a Budget counted,
/// and every watch made to list again (410 Gone) after a write none of them sees.
async fn run_a_machine_a_stalled_one_a_budget_and_a_relist(env: &Env) {
    let api = env.api::<GpuInstance>();
    api.create(
        &PostParams::default(),
        &instance("metered", serde_json::json!({})),
    )
    .await
    .unwrap();
    api.create(
        &PostParams::default(),
        &instance("unknown-gpu", serde_json::json!({"gpuType": "Z9000"})),
    )
    .await
    .unwrap();
    ready::<GpuInstance>(env, "metered").await;
    let budget: Budget = serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "Budget",
        "metadata": {"name": "team", "namespace": support::NAMESPACE},
        "spec": {"maxHourlyRate": 50.0, "maxSpend": 1000.0, "period": {"type": "Weekly"}},
    }))
    .unwrap();
    kube::Api::<Budget>::namespaced(env.client.clone(), support::NAMESPACE)
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
    support::condition::<GpuInstance>(
        env,
        "unknown-gpu",
        condition_type::STALLED,
        "True",
        "InvalidSpec",
    )
    .await;
    api.patch(
        "metered",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"powerState": "Stopped"}})),
    )
    .await
    .unwrap();
    eventually(60, "machine stopped", || async {
        let o = api.get("metered").await.ok()?;
        (o.status?.vm_status.as_deref() == Some("STOPPED")).then_some(())
    })
    .await;
    // A write no operator watch sees, the history compacted past it, every watch cut: each
    // resumes from a version older than the history, gets 410 Gone and lists again.
    let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client.clone(), OPERATOR_NAMESPACE);
    maps.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "unrelated"}})).unwrap(),
    )
    .await
    .unwrap();
    env.apiserver.compact();
    env.apiserver.faults().disconnect_watches();
}

/// The counters of reconciles, cloud calls, watch restarts and API requests moved from
/// `before` to `after`, in our names and in controller-runtime's and client-go's.
fn assert_the_counters_moved(env: &Env, before: &str, after: &str) {
    let moved = |series: &str| {
        let (b, a) = (sample(before, series), sample(after, series));
        assert!(a > b, "{series} did not move: {b} -> {a}\n{after}");
    };
    moved(r#"gpucloud_reconciles_total{kind="GpuInstance",result="success"}"#);
    moved(r#"gpucloud_reconcile_duration_seconds_count{kind="GpuInstance"}"#);
    moved(r#"gpucloud_cloud_requests_total{operation="CreateInstance",code="200"}"#);
    moved(r#"gpucloud_cloud_request_duration_seconds_count{operation="ListInstances"}"#);
    moved(r#"gpucloud_cloud_requests_total{operation="StopInstance",code="200"}"#);
    moved(r#"gpucloud_watch_restarts_total{kind="GpuInstance"}"#);
    // controller-runtime's and client-go's names, from the same updates.
    let host = env.apiserver.local_addr().to_string();
    for series in [
        r#"controller_runtime_reconcile_time_seconds_count{controller="gpuinstance"}"#,
        r#"workqueue_work_duration_seconds_count{name="gpuinstance",controller="gpuinstance"}"#,
        r#"workqueue_queue_duration_seconds_count{name="gpuinstance",controller="gpuinstance"}"#,
        &format!(r#"rest_client_requests_total{{code="200",method="GET",host="{host}"}}"#),
        &format!(r#"rest_client_requests_total{{code="200",method="PATCH",host="{host}"}}"#),
        &format!(r#"rest_client_request_duration_seconds_count{{verb="GET",host="{host}"}}"#),
    ] {
        moved(series);
    }
    assert_eq!(
        sample(
            after,
            r#"controller_runtime_max_concurrent_reconciles{controller="gpuinstance"}"#
        ),
        4.0,
        "{after}"
    );
}

/// The gauges (queues, workers, Budgets, costs, objects) and the process families are shown,
/// valid OpenMetrics, and the API key is not.
fn assert_the_gauges_and_families_are_shown(env: &Env, after: &str) {
    for family in [
        r#"workqueue_depth{name="volume",controller="volume"}"#,
        r#"controller_runtime_active_workers{controller="volume"}"#,
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(after.contains(family), "missing {family}\n{after}");
    }
    crate::openmetrics::check(after);
    for (series, value) in [
        (
            r#"gpucloud_budget_max_hourly_rate{object_namespace="team-a",budget="team",currency="USD"}"#,
            50.0,
        ),
        (
            r#"gpucloud_budget_max_spend{object_namespace="team-a",budget="team",currency="USD"}"#,
            1000.0,
        ),
    ] {
        assert_eq!(sample(after, series), value, "{after}");
    }
    assert!(
        sample(
            after,
            r#"gpucloud_budget_hourly_rate{object_namespace="team-a",budget="team",currency="USD"}"#
        ) > 0.0,
        "{after}"
    );
    assert_eq!(
        sample(
            after,
            r#"gpucloud_objects{kind="GpuInstance",condition="Ready",status="True"}"#
        ),
        1.0,
        "{after}"
    );
    // The status carries the rate rounded to a millionth (`gpucloud_api::money`).
    let rate = env.simulator.state().instances[0].billing.hourly_rate;
    let shown = sample(
        after,
        r#"gpucloud_hourly_cost{kind="GpuInstance",object_namespace="team-a",currency="USD"}"#,
    );
    assert!((shown - rate).abs() < 1e-6, "{shown} for {rate}\n{after}");
    assert!(
        after.contains("gpucloud_account_balance{account="),
        "{after}"
    );
    for family in [
        "gpucloud_queue_depth{kind=\"GpuInstance\"}",
        "gpucloud_reconciles_in_flight{kind=\"Volume\"}",
    ] {
        assert!(after.contains(family), "missing {family}\n{after}");
    }
    assert!(
        !after.contains(env.simulator.api_key()),
        "the API key is in the metrics"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_a_killed_leader_without_duplicates() {
    const COUNT: usize = 24;
    let simulator = SimulatorConfig {
        faults: FaultPlan {
            latency: Duration::from_millis(150),
            ..FaultPlan::default()
        },
        ..SimulatorConfig::default()
    };
    let env = Env::without_operator(simulator).await;
    let mut config = test_config(&env.simulator);
    config.concurrency = 2;
    let mut leader = Replica::start(&env, "replica-a", config.clone()).await;
    eventually(30, "replica-a leads", || async {
        (holder(&env).await.as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    let mut standby = Replica::start(&env, "replica-b", config).await;
    eventually(30, "replica-b stands by, ready", || async {
        let (status, body) = standby.get("/readyz").await;
        (status == 200 && body.contains("standby: the lease is held by replica-a")).then_some(())
    })
    .await;
    assert_eq!(
        sample(&standby.metrics().await, "gpucloud_leader"),
        0.0,
        "a standby does not lead"
    );

    let api = env.api::<GpuInstance>();
    for i in 0..COUNT {
        api.create(
            &PostParams::default(),
            &instance(&format!("fleet-{i}"), serde_json::json!({})),
        )
        .await
        .unwrap();
    }
    eventually(60, "the leader is creating", || async {
        let made = env.simulator.state().instances.len();
        (2..COUNT).contains(&made).then_some(())
    })
    .await;
    leader.kill().await;
    let killed_at = Instant::now();

    eventually(30, "replica-b takes the lease", || async {
        (holder(&env).await.as_deref() == Some("replica-b")).then_some(())
    })
    .await;
    let takeover = killed_at.elapsed();
    // Lease duration (4 s) plus a retry period and a little scheduling slack.
    assert!(
        takeover < Duration::from_secs(6),
        "took over after {takeover:?}"
    );
    let mut ids = BTreeSet::new();
    for i in 0..COUNT {
        let object = ready::<GpuInstance>(&env, &format!("fleet-{i}")).await;
        ids.insert(object.cloud_status().external_id.unwrap());
    }
    let state = env.simulator.state();
    assert_eq!(
        state.instances.len(),
        COUNT,
        "exactly one machine per object"
    );
    let cloud: BTreeSet<String> = state
        .instances
        .iter()
        .map(|i| i.instance_id.clone())
        .collect();
    assert_eq!(ids, cloud, "every object records its own machine");
    standby.shut_down().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_lease_stops_reconciling_at_once() {
    let env = Env::without_operator(SimulatorConfig::default()).await;
    let mut leader = Replica::start(&env, "replica-a", test_config(&env.simulator)).await;
    eventually(30, "replica-a leads", || async {
        (holder(&env).await.as_deref() == Some("replica-a")).then_some(())
    })
    .await;

    // Another replica (or an operator by hand) takes the lease.
    let leases: kube::Api<Lease> = kube::Api::namespaced(env.client.clone(), OPERATOR_NAMESPACE);
    let mut lease = leases.get(LEASE).await.unwrap();
    lease.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
    leases
        .replace(LEASE, &PostParams::default(), &lease)
        .await
        .unwrap();
    let taken = Instant::now();
    let result = support::within(5, leader.task.take().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(result, Err(replica::Error::LostLeadership)),
        "{result:?}"
    );
    assert!(
        taken.elapsed() < Duration::from_secs(2),
        "{:?}",
        taken.elapsed()
    );
    let why = leader.get("/healthz").await;
    assert_eq!(why.0, 503, "{why:?}");
    assert!(why.1.contains("lost the leader lease"), "{why:?}");

    // Nothing reconciles any more: a new object is left alone.
    let creates_before = env.calls("CreateInstance");
    env.api::<GpuInstance>()
        .create(
            &PostParams::default(),
            &instance("after-loss", serde_json::json!({})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let object = env.api::<GpuInstance>().get("after-loss").await.unwrap();
    assert!(object.status.is_none(), "{:?}", object.status);
    assert!(object.metadata.finalizers.is_none());
    assert_eq!(env.calls("CreateInstance"), creates_before);
}

/// The API server stops serving (every request a 500, as with etcd unreachable; every open
/// watch cut): once the watches have been failing for longer than the threshold, `/readyz`
/// says so, naming them; liveness is not affected. When the API server is back, the watches
/// resume (quietly: nothing changed in between) and the replica is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_api_server_away_and_back() {
    let env = Env::without_operator(SimulatorConfig::default()).await;
    let config = OperatorConfig {
        health: Arc::new(Health::new(HealthSettings {
            watch_failure: Duration::from_secs(2),
            ..HealthSettings::default()
        })),
        ..test_config(&env.simulator)
    };
    // Without an election: a leader would lose its lease in the outage and exit, which says
    // nothing about the watches.
    let mut replica = Replica::start_with(&env, None, config).await;
    eventually(30, "ready once every watch has listed", || async {
        let (status, body) = replica.get("/readyz").await;
        (status == 200 && body.contains("leading: caches synced")).then_some(())
    })
    .await;

    env.apiserver.faults().set_outage(Some(500));
    // An object watch and a trigger watch, each named with how long and why. A timeout shows
    // the last answer: which watch was not named.
    let why = eventually_showing(30, "not ready, naming the failing watches", || async {
        let (status, body) = replica.get("/readyz").await;
        if status == 503
            && body.contains("the watch of GpuInstance has been failing for")
            && body
                .contains("the watch of Secret (gpucloud.io/credentials=true) has been failing for")
            && body.contains("(metadata.name=")
        {
            Ok(body)
        } else {
            Err(format!("/readyz {status}: {body}"))
        }
    })
    .await;
    assert!(why.contains("since "), "{why}");
    assert!(why.contains("last: HTTP 500 InternalError"), "{why}");
    assert!(
        !why.contains(env.simulator.api_key()),
        "the API key is in the readiness message"
    );
    let live = replica.get("/healthz").await;
    assert_eq!(
        live.0, 200,
        "an unreachable API server is no reason to restart: {live:?}"
    );

    env.apiserver.faults().set_outage(None);
    eventually(60, "ready again once the API server is back", || async {
        let (status, body) = replica.get("/readyz").await;
        (status == 200 && body.contains("leading: caches synced")).then_some(())
    })
    .await;
    replica.shut_down().await.unwrap();
}

/// Started before its CRDs are installed (or with some missing), the operator stops at once
/// and says which one is missing and how to install them, instead of watching in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_refuses_to_start_without_its_crds() {
    use gpucloud_apiserver::{ApiServer, ApiServerConfig};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let apiserver = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = apiserver.kube_client().await.unwrap();
    let check = || gpucloud_controller::operator::cli::ensure_crds_installed(&client);

    let error = check().await.expect_err("no CRD is installed").to_string();
    assert!(error.contains("not installed"), "{error}");
    assert!(
        error.contains("gpucloud-operator crds | kubectl apply -f -"),
        "{error}"
    );

    // All but the last: the error names that one.
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let mut all = gpucloud_controller::kinds::registry::crds();
    let last = all.pop().unwrap();
    for crd in &all {
        crds.create(&PostParams::default(), crd).await.unwrap();
    }
    let error = check().await.expect_err("one CRD is missing").to_string();
    let missing = last.metadata.name.clone().unwrap();
    assert!(error.contains(&format!("{missing} not found")), "{error}");

    crds.create(&PostParams::default(), &last).await.unwrap();
    check().await.unwrap();
}
