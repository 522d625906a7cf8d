//! What the tests of `gpucloud-operator run` as an OS process share: the embedded API server
//! with the CRDs, the namespaces and the default credentials Secret; the cloud simulator; a
//! kubeconfig file; and operator processes started as a pod runs them (leader election on),
//! with every line they print collected.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use gpucloud_apiserver::{ApiServer, ApiServerConfig, ApiServerHandle};
use gpucloud_simulator::{Simulator, SimulatorConfig, SimulatorHandle};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::wait::{await_condition, conditions};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const BINARY: &str = env!("CARGO_BIN_EXE_gpucloud-operator");
pub const OPERATOR_NAMESPACE: &str = "gpucloud-system";
pub const CREDENTIALS_SECRET: &str = "gpucloud-credentials";
pub const LEASE_NAME: &str = "gpucloud-operator";

pub struct World {
    pub apiserver: ApiServerHandle,
    pub simulator: SimulatorHandle,
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    /// Every line any operator process printed, as `POD: LINE`.
    pub output: Arc<Mutex<Vec<String>>>,
}

impl World {
    /// A world whose kubeconfig file is named after `tag` (unique among worlds running at
    /// once), with `namespaces` created besides the operator's.
    pub async fn start(tag: &str, simulator: SimulatorConfig, namespaces: &[&str]) -> World {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let apiserver = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let simulator = Simulator::start(simulator, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = apiserver.kube_client().await.unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in gpucloud_controller::kinds::registry::crds() {
            let name = crd.metadata.name.clone().unwrap();
            crds.create(&PostParams::default(), &crd).await.unwrap();
            await_condition(crds.clone(), &name, conditions::is_crd_established())
                .await
                .unwrap();
        }
        let api: Api<Namespace> = Api::all(client.clone());
        for name in namespaces.iter().copied().chain([OPERATOR_NAMESPACE]) {
            let namespace: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
            api.create(&PostParams::default(), &namespace)
                .await
                .unwrap();
        }
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": CREDENTIALS_SECRET, "namespace": OPERATOR_NAMESPACE},
            "stringData": {"apiKey": simulator.api_key()},
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), OPERATOR_NAMESPACE)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let kubeconfig =
            std::env::temp_dir().join(format!("gpucloud-{tag}-{}.kubeconfig", std::process::id()));
        apiserver.write_kubeconfig(&kubeconfig).unwrap();
        World {
            apiserver,
            simulator,
            client,
            kubeconfig,
            output: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Starts `gpucloud-operator run` as replica `pod` with debug logs and leader election,
    /// collecting its output. `settings` are further flags of `run` (timings, windows).
    pub fn operator(&self, pod: &str, settings: &[&str]) -> Child {
        let mut child = Command::new(BINARY)
            .args(["--log-level", "debug", "--log-format", "json", "run"])
            .args(["--cloud-url", &self.simulator.base_url()])
            .args([
                "--credentials-secret",
                &format!("{OPERATOR_NAMESPACE}/{CREDENTIALS_SECRET}"),
            ])
            .args(["--operator-namespace", OPERATOR_NAMESPACE])
            .args(["--metrics-listen", "127.0.0.1:0"])
            .args(["--health-listen", "127.0.0.1:0"])
            .args([
                "--leader-elect",
                "--lease-name",
                LEASE_NAME,
                "--pod-name",
                pod,
            ])
            .args(settings)
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
            let pod = pod.to_string();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    output.lock().unwrap().push(format!("{pod}: {line}"));
                }
            });
        }
        child
    }

    /// The replica named in the leader Lease.
    pub async fn holder(&self) -> Result<Option<String>, kube::Error> {
        Ok(
            Api::<Lease>::namespaced(self.client.clone(), OPERATOR_NAMESPACE)
                .get_opt(LEASE_NAME)
                .await?
                .and_then(|lease| lease.spec)
                .and_then(|spec| spec.holder_identity)
                .filter(|holder| !holder.is_empty()),
        )
    }

    /// Output lines holding the API key or a private key.
    pub fn secrets_in_output(&self) -> Vec<String> {
        let key = self.simulator.api_key();
        self.output
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.contains(key) || line.contains("PRIVATE KEY"))
            .cloned()
            .collect()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// Polls `check` every 100 ms until it returns `Some`; panics after `seconds`.
pub async fn eventually<T, F, Fut>(seconds: u64, what: &str, mut check: F) -> T
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

/// Sends SIGTERM, as the kubelet does to stop a pod.
pub fn send_sigterm(child: &Child) -> Result<(), String> {
    let pid = child
        .id()
        .ok_or_else(|| "the process has already exited".to_string())?;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .map_err(|error| format!("kill -TERM {pid}: {error}"))?;
    if !status.success() {
        return Err(format!("kill -TERM {pid}: {status}"));
    }
    Ok(())
}
