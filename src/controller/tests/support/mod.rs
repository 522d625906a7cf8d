//! A whole environment in one process: the embedded API server with the CRDs installed, the
//! cloud simulator, a default credentials Secret, and the operator running against both.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use futures::FutureExt;
use gpucloud_apiserver::{ApiServer, ApiServerConfig, ApiServerHandle};
use gpucloud_controller::accounts::account::{CloudSettings, SecretLocation};
use gpucloud_controller::accounts::observer::ObserveIntervals;
use gpucloud_controller::flow::context::ReconcileSettings;
use gpucloud_controller::flow::kind::Watched;
use gpucloud_controller::operator::run::OperatorConfig;
use gpucloud_controller::runtime::clock::Clock;
use gpucloud_simulator::{Simulator, SimulatorConfig, SimulatorHandle};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const NAMESPACE: &str = "team-a";
pub const OPERATOR_NAMESPACE: &str = "gpucloud-system";

pub struct Env {
    pub apiserver: ApiServerHandle,
    pub simulator: SimulatorHandle,
    pub client: kube::Client,
    stop: Option<oneshot::Sender<()>>,
    operator: Option<JoinHandle<()>>,
    _watchdog: Watchdog,
}

/// The reporter of the tests' events: the operator's controller name, a replica of its own.
pub fn reporter() -> gpucloud_controller::runtime::events::Reporter {
    gpucloud_controller::runtime::events::Reporter::new("gpucloud-operator", "test-replica")
}

/// Reconciles of `kind` counted by the operator's metrics, whatever their result.
pub fn reconciles(metrics: &gpucloud_telemetry::Metrics, kind: &str) -> f64 {
    let series = format!("gpucloud_reconciles_total{{kind=\"{kind}\"");
    metrics
        .encode()
        .lines()
        .filter(|line| line.starts_with(&series))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Operator settings sized for tests: fast lists, short windows.
pub fn test_config(simulator: &SimulatorHandle) -> OperatorConfig {
    OperatorConfig {
        namespaces: Vec::new(),
        concurrency: 4,
        cloud: CloudSettings {
            base_url: simulator.base_url(),
            timeout: Duration::from_secs(5),
            rate_limit: None,
            catalog_ttl: Duration::from_secs(5),
            observer: None,
        },
        default_secret: Some(SecretLocation {
            namespace: OPERATOR_NAMESPACE.into(),
            name: "gpucloud-credentials".into(),
            key: "apiKey".into(),
        }),
        reconcile: ReconcileSettings {
            settle_window: Duration::from_secs(2),
            budget_floor: 0.0,
            transition_requeue: Duration::from_millis(200),
            observe: ObserveIntervals {
                resync: Duration::from_secs(2),
                fast: Duration::from_millis(150),
                hot_window: Duration::from_secs(10),
                first_list_timeout: Duration::from_secs(10),
            },
            operator_namespace: OPERATOR_NAMESPACE.into(),
            allow_adoption: true,
            duplicates: gpucloud_controller::flow::context::DuplicateSettings {
                grace_period: Duration::from_secs(3),
                delete: true,
            },
            clock: Clock::real(),
        },
        reporter: reporter(),
        orphans: gpucloud_controller::accounts::orphans::OrphanSweepSettings::disabled(),
        metrics: Default::default(),
        health: Default::default(),
    }
}

impl Env {
    /// API server with CRDs, namespaces and the default credentials; simulator; no operator yet.
    pub async fn without_operator(simulator: SimulatorConfig) -> Env {
        let watchdog = watchdog(Duration::from_secs(300));
        let _ = rustls::crypto::ring::default_provider().install_default();
        let apiserver = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let client = apiserver.kube_client().await.unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in gpucloud_controller::kinds::registry::crds() {
            install_crd(&crds, &crd).await;
        }
        for ns in [NAMESPACE, OPERATOR_NAMESPACE] {
            // The tests' own namespace may adopt what the operator did not create;
            // `adoption.rs` covers the rest.
            create_namespace(&client, ns, ns == NAMESPACE)
                .await
                .unwrap();
        }
        // Started last: a scaled clock has not run far by the time the test begins.
        let simulator = Simulator::start(simulator, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let env = Env {
            apiserver,
            simulator,
            client,
            stop: None,
            operator: None,
            _watchdog: watchdog,
        };
        env.put_secret(
            OPERATOR_NAMESPACE,
            "gpucloud-credentials",
            env.simulator.api_key(),
        )
        .await;
        env
    }

    /// API server and simulator, no operator yet, on a scaled clock: the simulator's starts at
    /// `start` and runs `scale` clock seconds per real second, and the returned clock (for
    /// `ReconcileSettings::clock`) reads the same time, so the operator sees the cloud's time.
    /// Objects' `creationTimestamp`s stay the API server's wall clock.
    pub async fn on_scaled_clock(start: Timestamp, scale: f64) -> (Env, Clock) {
        let env = Env::without_operator(SimulatorConfig {
            time_scale: scale,
            start: Some(start),
            ..SimulatorConfig::default()
        })
        .await;
        // Both clocks run on the real monotonic clock at the same scale: anchored at the
        // simulator's reading, the operator's reads the same from then on (to the millisecond
        // the simulator counts in).
        let clock = Clock::scaled(env.simulator.now(), scale);
        (env, clock)
    }

    /// The whole environment with the operator running.
    pub async fn start() -> Env {
        Env::start_with(SimulatorConfig::default()).await
    }

    /// As `start`, with the cloud's snapshots `creating` for `seconds`: long enough to act
    /// while one is being made.
    pub async fn start_with_slow_snapshots(seconds: u64) -> Env {
        Env::start_with(SimulatorConfig {
            delays: gpucloud_simulator::Delays {
                snapshot: Duration::from_secs(seconds),
                ..gpucloud_simulator::Delays::fast()
            },
            ..SimulatorConfig::default()
        })
        .await
    }

    async fn start_with(simulator: SimulatorConfig) -> Env {
        let mut env = Env::without_operator(simulator).await;
        env.start_operator(test_config(&env.simulator));
        env
    }

    pub fn start_operator(&mut self, config: OperatorConfig) {
        let (stop, stopped) = oneshot::channel::<()>();
        let client = self.client.clone();
        let shutdown = stopped.map(|_| ()).boxed();
        // The operator's log lines carry the caller's span (a chaos run's seed, say).
        self.operator = Some(tokio::spawn(tracing::Instrument::in_current_span(
            gpucloud_controller::operator::run::run(client, config, shutdown),
        )));
        self.stop = Some(stop);
    }

    /// Stops the operator and waits for its in-flight reconciles.
    pub async fn stop_operator(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.operator.take() {
            within(20, task).await.unwrap().unwrap();
        }
    }

    /// Kills the operator mid-flight, as a crash would: nothing is finished or cleaned up.
    pub async fn kill_operator(&mut self) {
        self.stop = None;
        if let Some(task) = self.operator.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Cloud calls of `operation` so far.
    pub fn calls(&self, operation: &str) -> u64 {
        self.simulator
            .call_counts()
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    pub async fn put_secret(&self, namespace: &str, name: &str, api_key: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([(
                    gpucloud_controller::accounts::secrets::CREDENTIALS_LABEL.to_string(),
                    gpucloud_controller::accounts::secrets::CREDENTIALS_LABEL_VALUE.to_string(),
                )])),
                ..Default::default()
            },
            string_data: Some(BTreeMap::from([(
                "apiKey".to_string(),
                api_key.to_string(),
            )])),
            ..Default::default()
        };
        match secrets.get_opt(name).await.unwrap() {
            Some(_) => {
                secrets
                    .replace(name, &PostParams::default(), &secret)
                    .await
                    .unwrap();
            }
            None => {
                secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .unwrap();
            }
        }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }
}

/// Ends the test process if a test runs far past any of its own bounds, so a hang shows as a
/// failure naming the test instead of stalling the whole run.
fn watchdog(limit: Duration) -> Watchdog {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_string();
    let done = Arc::new(AtomicBool::new(false));
    let finished = done.clone();
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if finished.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        eprintln!(
            "{test}: still running after {}s; aborting the test process",
            limit.as_secs()
        );
        dump_thread_stacks();
        std::process::abort();
    });
    Watchdog(done)
}

/// Prints every thread's stack (with gdb, where installed), so a hang that starves the async
/// runtime (no timeout inside the test can fire then) shows where the threads are stuck.
fn dump_thread_stacks() {
    let pid = std::process::id().to_string();
    match std::process::Command::new("gdb")
        .args(["-p", &pid, "-batch", "-nx", "-ex", "thread apply all bt 30"])
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(output) => eprintln!("{}", String::from_utf8_lossy(&output.stdout)),
        Err(error) => eprintln!("no thread stacks (gdb: {error})"),
    }
}

/// Disarms the watchdog when the environment goes.
pub struct Watchdog(Arc<AtomicBool>);

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `future` with a bound of `seconds`, failing the test with a clear message past it.
pub async fn within<F: Future>(seconds: u64, future: F) -> Result<F::Output, String> {
    tokio::time::timeout(Duration::from_secs(seconds), future)
        .await
        .map_err(|_| format!("not done within {seconds}s"))
}

/// Polls `check` until it returns `Some`, for at most `seconds`.
pub async fn eventually<T, F, Fut>(seconds: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_showing(seconds, what, || {
        let checked = check();
        async move { checked.await.ok_or_else(String::new) }
    })
    .await
}

/// As [`eventually`], `check` saying what it saw when not yet true: a timeout shows the last.
pub async fn eventually_showing<T, F, Fut>(seconds: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        let seen = match check().await {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() > deadline {
            if seen.is_empty() {
                panic!("{what}: not true within {seconds}s");
            }
            panic!("{what}: not true within {seconds}s; last seen: {seen}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Installs the deletion-protection ValidatingAdmissionPolicy and binding from the manifest
/// the Helm chart and the kustomize base ship (`gpucloud_api::deletion_protection`).
pub async fn install_deletion_protection(env: &Env) {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let manifest = gpucloud_api::deletion_protection::POLICY_MANIFEST;
    for value in serde_saphyr::from_multiple::<serde_json::Value>(manifest).unwrap() {
        match value["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => {
                let policies: Api<ValidatingAdmissionPolicy> = Api::all(env.client.clone());
                policies
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(value).unwrap(),
                    )
                    .await
                    .unwrap();
            }
            Some("ValidatingAdmissionPolicyBinding") => {
                let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(env.client.clone());
                bindings
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(value).unwrap(),
                    )
                    .await
                    .unwrap();
            }
            other => panic!("unexpected document in the policy manifest: {other:?}"),
        }
    }
}

/// An object of kind `K` named `name` with `spec` given as JSON.
pub fn object<K>(name: &str, spec: serde_json::Value) -> K
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    serde_json::from_value(serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }))
    .unwrap()
}

/// The reads the operator makes once per account per interval, however many objects there
/// are: the balance (`gpucloud_account_balance`) and the three billing lists
/// (`gpucloud_spend`, Budgets).
pub const ACCOUNT_READS: [&str; 4] = [
    "GetBalance",
    "GetInstanceBilling",
    "GetSnapshotBilling",
    "GetVolumeBilling",
];

/// The catalog reads an account makes once per catalog TTL while machines are placed or wait
/// for stock, however many objects there are.
pub const CATALOG_READS: [&str; 4] = ["GetGpuStock", "GetGpuSpecs", "ListRegions", "GetPricing"];

/// Creates `object` in the test namespace.
pub async fn create<K>(env: &Env, object: &K)
where
    K: TestKind,
{
    env.api::<K>()
        .create(&PostParams::default(), object)
        .await
        .unwrap();
}

/// A kind the helpers read and write: a namespaced, managed kind.
pub trait TestKind: Watched + gpucloud_api::Managed + serde::Serialize {}

impl<K: Watched + gpucloud_api::Managed + serde::Serialize> TestKind for K {}

/// The cloud id `name` records once it is `Ready`.
pub async fn ready_id<K: TestKind>(env: &Env, name: &str) -> String {
    let object: K = ready(env, name).await;
    let id = object.cloud_status().external_id;
    id.unwrap_or_else(|| panic!("{name} is Ready without a cloud id"))
}

/// Waits until `name` is `Ready` for its current generation.
pub async fn ready<K>(env: &Env, name: &str) -> K
where
    K: TestKind,
{
    ready_within(env, name, 60).await
}

/// Waits at most `seconds` until `name` is `Ready` for its current generation.
pub async fn ready_within<K>(env: &Env, name: &str, seconds: u64) -> K
where
    K: TestKind,
{
    let api = env.api::<K>();
    eventually(seconds, &format!("{name} Ready"), || {
        let api = api.clone();
        async move {
            let object = api.get(name).await.ok()?;
            object
                .cloud_status()
                .is_ready(object.meta().generation)
                .then_some(object)
        }
    })
    .await
}

/// Waits until `name`'s condition `type_` has `status` and `reason`.
pub async fn condition<K>(env: &Env, name: &str, type_: &str, status: &str, reason: &str) -> K
where
    K: TestKind,
{
    let api = env.api::<K>();
    let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let seen = last.clone();
    let waited = within(
        60,
        eventually(61, "", || {
            let (api, seen) = (api.clone(), seen.clone());
            async move {
                let object = api.get(name).await.ok()?;
                *seen.lock().unwrap() = format!("{:?}", object.cloud_status().conditions);
                let c = object.cloud_status().condition(type_)?.clone();
                (c.status == status && c.reason == reason).then_some(object)
            }
        }),
    )
    .await;
    waited.unwrap_or_else(|_| {
        panic!(
            "{name}: {type_}={status} {reason}: not true within 60s; last seen {}",
            last.lock().unwrap()
        )
    })
}

/// The message of the object's `Ready` condition (empty without one).
pub fn ready_message<K: gpucloud_api::Managed>(object: &K) -> String {
    object
        .cloud_status()
        .condition("Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The Events about the object `name` in the test namespace with `reason`.
pub async fn events_about(
    env: &Env,
    name: &str,
    reason: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    events_of(env, name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// The Events about the object `name` in the test namespace.
async fn events_of(env: &Env, name: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(env.client.clone(), NAMESPACE);
    events
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

/// Waits until `name` is gone from the API server.
pub async fn gone<K>(env: &Env, name: &str)
where
    K: TestKind,
{
    let api = env.api::<K>();
    eventually(60, &format!("{name} deleted"), || {
        let api = api.clone();
        async move { api.get_opt(name).await.unwrap().is_none().then_some(()) }
    })
    .await
}

/// Deletes `name` and waits until it is gone (its finalizer removed).
pub async fn delete_and_wait<K>(env: &Env, name: &str)
where
    K: TestKind,
{
    env.api::<K>()
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    gone::<K>(env, name).await;
}

/// A client of the simulator's account, for changes made behind the operator's back.
pub fn cloud_client(env: &Env) -> gpucloud_cloud::CloudClient {
    cloud_client_with_key(env, env.simulator.api_key())
}

/// As `cloud_client`, for the account `api_key` opens.
pub fn cloud_client_with_key(env: &Env, api_key: &str) -> gpucloud_cloud::CloudClient {
    gpucloud_cloud::CloudClient::new(gpucloud_cloud::ClientConfig::new(
        env.simulator.base_url(),
        gpucloud_cloud::ApiKey::new(api_key),
    ))
    .unwrap()
}

/// A machine made in the cloud by hand, outside Kubernetes.
pub async fn machine_by_hand(env: &Env, name: &str) -> gpucloud_cloud::model::Instance {
    let request = gpucloud_cloud::model::CreateInstanceRequest::new(
        name,
        "us-east-1",
        "A100-80G",
        1,
        "ubuntu-22.04-cuda-12",
    );
    cloud_client(env).create_instance(&request).await.unwrap()
}

/// Creates a CRD and waits until the API server serves it.
pub async fn install_crd(crds: &Api<CustomResourceDefinition>, crd: &CustomResourceDefinition) {
    let name = crd.metadata.name.clone().unwrap();
    within(10, crds.create(&PostParams::default(), crd))
        .await
        .unwrap()
        .unwrap();
    within(
        10,
        await_condition(crds.clone(), &name, conditions::is_crd_established()),
    )
    .await
    .unwrap()
    .unwrap();
}

/// A public key for SshKeys and for keys made in the cloud by hand.
pub const PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@laptop";

/// Imports [`PUBLIC_KEY`] into the cloud as `name`, as a person would by hand.
pub async fn import_ssh_key(env: &Env, name: &str) -> gpucloud_cloud::model::SshKey {
    let request = gpucloud_cloud::model::CreateSshKeyRequest {
        name: name.into(),
        public_key: Some(PUBLIC_KEY.into()),
    };
    let created = cloud_client(env).create_ssh_key(&request).await.unwrap();
    created.body.key
}

/// The account's data volumes (the `<instance>-boot` volumes of instances left out).
pub fn data_volumes(env: &Env) -> Vec<gpucloud_cloud::model::Volume> {
    env.simulator
        .state()
        .volumes
        .into_iter()
        .filter(|v| !v.name.ends_with("-boot"))
        .collect()
}

/// Reasons of the events about the object `name` in the test namespace, oldest first.
pub async fn event_reasons(env: &Env, name: &str) -> Vec<String> {
    events_of(env, name)
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

/// Waits until events about the object `name` include every one of `reasons` (the operator
/// sends events in the background, so they may trail the status that caused them).
pub async fn wait_for_events(env: &Env, name: &str, reasons: &[&str]) {
    let what = format!("{reasons:?} events about {name}");
    eventually(10, &what, || async {
        let sent = event_reasons(env, name).await;
        reasons
            .iter()
            .all(|reason| sent.iter().any(|r| r == reason))
            .then_some(())
    })
    .await;
}

/// Creates the namespace `name`, labelled `gpucloud.io/adoption=allowed` when `adoption` is
/// true (with the operator's `allow_adoption` of `test_config`, its objects may then adopt
/// what the operator did not create).
pub async fn create_namespace(
    client: &kube::Client,
    name: &str,
    adoption: bool,
) -> Result<Namespace, kube::Error> {
    let labels = adoption.then(|| {
        BTreeMap::from([(
            gpucloud_controller::flow::adoption::ADOPTION_LABEL.to_string(),
            gpucloud_controller::flow::adoption::ADOPTION_ALLOWED.to_string(),
        )])
    });
    let namespace = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels,
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
}
