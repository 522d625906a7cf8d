#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `gpucloud-operator run` as a process, as a pod runs it: SIGTERM in the middle of creating
//! a fleet exits within the shutdown timeout and hands the lease back; a restarted operator
//! converges with exactly one machine per object; and nothing either process printed (debug
//! logs included) holds the API key or a private key.

use gpucloud_api::{GpuInstance, Managed, SshKey};
use gpucloud_apiserver::{ApiServer, ApiServerConfig, ApiServerHandle};
use gpucloud_simulator::{FaultPlan, Simulator, SimulatorConfig, SimulatorHandle};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::wait::{await_condition, conditions};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const BINARY: &str = env!("CARGO_BIN_EXE_gpucloud-operator");
const NAMESPACE: &str = "team-a";
const OPERATOR_NAMESPACE: &str = "gpucloud-system";
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
const FLEET: usize = 16;

struct World {
    apiserver: ApiServerHandle,
    simulator: SimulatorHandle,
    client: kube::Client,
    kubeconfig: PathBuf,
    /// Every line either operator process printed.
    output: Arc<Mutex<Vec<String>>>,
}

impl World {
    async fn start() -> World {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let apiserver = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let simulator = Simulator::start(
            SimulatorConfig {
                // Slow enough that a fleet is still being created when SIGTERM comes.
                faults: FaultPlan {
                    latency: Duration::from_millis(150),
                    ..FaultPlan::default()
                },
                ..SimulatorConfig::default()
            },
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let client = apiserver.kube_client().await.unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in gpucloud_api::crds() {
            let name = crd.metadata.name.clone().unwrap();
            crds.create(&PostParams::default(), &crd).await.unwrap();
            await_condition(crds.clone(), &name, conditions::is_crd_established())
                .await
                .unwrap();
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for name in [NAMESPACE, OPERATOR_NAMESPACE] {
            let namespace: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
            namespaces
                .create(&PostParams::default(), &namespace)
                .await
                .unwrap();
        }
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpucloud-credentials", "namespace": OPERATOR_NAMESPACE},
            "stringData": {"apiKey": simulator.api_key()},
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), OPERATOR_NAMESPACE)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let kubeconfig = std::env::temp_dir().join(format!(
            "gpucloud-operator-process-{}.kubeconfig",
            std::process::id()
        ));
        apiserver.write_kubeconfig(&kubeconfig).unwrap();
        World {
            apiserver,
            simulator,
            client,
            kubeconfig,
            output: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Starts `gpucloud-operator run` as replica `pod` with debug logs, collecting its output.
    fn operator(&self, pod: &str) -> Child {
        let mut child = Command::new(BINARY)
            .args(["--log-level", "debug", "--log-format", "json", "run"])
            .args(["--cloud-url", &self.simulator.base_url()])
            .args([
                "--credentials-secret",
                &format!("{OPERATOR_NAMESPACE}/gpucloud-credentials"),
            ])
            .args(["--operator-namespace", OPERATOR_NAMESPACE])
            .args(["--metrics-listen", "127.0.0.1:0"])
            .args(["--health-listen", "127.0.0.1:0"])
            .args(["--leader-elect", "--pod-name", pod])
            .args(["--lease-duration", "6s", "--renew-deadline", "4s"])
            .args(["--retry-period", "1s"])
            .args(["--resync-interval", "2s", "--transition-interval", "300ms"])
            .args(["--settle-window", "3s"])
            .args(["--shutdown-timeout", "5s"])
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("GPUCLOUD_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let output = self.output.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    output.lock().unwrap().push(line);
                }
            });
        }
        child
    }

    async fn holder(&self) -> Option<String> {
        Api::<Lease>::namespaced(self.client.clone(), OPERATOR_NAMESPACE)
            .get_opt("gpucloud-operator")
            .await
            .unwrap()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    }
}

async fn eventually<T, F, Fut>(seconds: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {seconds}s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends SIGTERM and waits for the exit; returns how long it took.
async fn terminate(child: &mut Child) -> Duration {
    let pid = child.id().unwrap().to_string();
    let sent = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(SHUTDOWN_TIMEOUT * 3, child.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status {exit:?}");
    sent.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_fleet_then_restart_converges_without_duplicates_or_leaks() {
    let world = World::start().await;
    let mut first = world.operator("operator-a");
    eventually(30, "operator-a leads", || async {
        (world.holder().await.as_deref() == Some("operator-a")).then_some(())
    })
    .await;

    let keys: Api<SshKey> = Api::namespaced(world.client.clone(), NAMESPACE);
    for i in 0..3 {
        let key: SshKey = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "SshKey",
            "metadata": {"name": format!("key-{i}")}, "spec": {},
        }))
        .unwrap();
        keys.create(&PostParams::default(), &key).await.unwrap();
    }
    let instances: Api<GpuInstance> = Api::namespaced(world.client.clone(), NAMESPACE);
    for i in 0..FLEET {
        let instance: GpuInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
            "metadata": {"name": format!("fleet-{i}")},
            "spec": {"region": "us-east-1", "gpuType": "H100-80G",
                     "osImage": "ubuntu-22.04-cuda-12",
                     "sshKeyRefs": [{"name": format!("key-{}", i % 3)}]},
        }))
        .unwrap();
        instances
            .create(&PostParams::default(), &instance)
            .await
            .unwrap();
    }
    eventually(60, "the fleet is being created", || async {
        let made = world.simulator.state().instances.len();
        (2..FLEET).contains(&made).then_some(())
    })
    .await;
    let made_before = world.simulator.state().instances.len();
    let took = terminate(&mut first).await;
    eprintln!(
        "SIGTERM with {made_before} of {FLEET} machines made; exited after {took:?}; {} machines then",
        world.simulator.state().instances.len()
    );
    assert!(
        took <= SHUTDOWN_TIMEOUT + Duration::from_secs(2),
        "SIGTERM to exit took {took:?}"
    );
    assert_eq!(world.holder().await, None, "the lease was handed back");

    let mut second = world.operator("operator-b");
    let mut ids = BTreeSet::new();
    for i in 0..FLEET {
        let name = format!("fleet-{i}");
        let id = eventually(120, &format!("{name} Ready"), || async {
            let object = instances.get(&name).await.ok()?;
            let status = object.cloud_status();
            status
                .is_ready(object.metadata.generation)
                .then(|| status.external_id.clone())
                .flatten()
        })
        .await;
        ids.insert(id);
    }
    let cloud: BTreeSet<String> = world
        .simulator
        .state()
        .instances
        .iter()
        .map(|i| i.instance_id.clone())
        .collect();
    assert_eq!(cloud.len(), FLEET, "exactly one machine per object");
    assert_eq!(ids, cloud);
    terminate(&mut second).await;

    let output = world.output.lock().unwrap().clone();
    eprintln!("{} output lines scanned", output.len());
    assert!(
        output.iter().any(|l| l.contains("became the leader")),
        "the debug output was captured: {} lines",
        output.len()
    );
    let key = world.simulator.api_key().to_string();
    let leaks: Vec<&String> = output
        .iter()
        .filter(|l| l.contains(&key) || l.contains("PRIVATE KEY"))
        .collect();
    assert!(
        leaks.is_empty(),
        "{} of {} lines hold a secret: {:?}",
        leaks.len(),
        output.len(),
        leaks.first()
    );
    let _ = std::fs::remove_file(&world.kubeconfig);
    world.apiserver.shutdown().await;
}
