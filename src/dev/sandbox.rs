//! Start-up, the running sandbox and its shutdown.

use crate::cli::Args;
use crate::manifests::{self, Document};
use clap::Parser;
use futures::FutureExt;
use gpucloud_apiserver::{ApiServer, ApiServerConfig, ApiServerHandle};
use gpucloud_simulator::{Simulator, SimulatorHandle};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The operator's namespace and its default credentials Secret inside the sandbox.
pub const OPERATOR_NAMESPACE: &str = "gpucloud-system";
pub const CREDENTIALS_SECRET: &str = "gpucloud-credentials";
/// Where namespaced manifests without a namespace go, as with kubectl.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Bound on one start-up step against the in-process API server.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on the controllers finishing their in-flight reconciles at shutdown.
const CONTROLLERS_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the live table lists the objects.
const TABLE_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{address} is in use; pass {flag} with another address (port 0 picks a free one)")]
    PortInUse {
        address: SocketAddr,
        flag: &'static str,
    },
    #[error("cannot start the API server: {0}")]
    ApiServer(String),
    #[error("cannot start the cloud simulator: {0}")]
    Simulator(String),
    #[error("--cloud-url needs an API key: pass --api-key or set GPUCLOUD_API_KEY")]
    ApiKeyMissing,
    #[error("cannot write the kubeconfig {path}: {reason}")]
    Kubeconfig { path: PathBuf, reason: String },
    #[error("operator settings: {0}")]
    Settings(String),
    #[error("setting up the sandbox ({step}): {reason}")]
    Setup { step: &'static str, reason: String },
    #[error(transparent)]
    Manifest(#[from] manifests::Error),
}

/// Runs the sandbox until Ctrl-C or SIGTERM.
pub async fn run(args: Args) -> Result<(), Error> {
    run_until(args, shutdown_signal()).await
}

/// [`run`] with the stop signal supplied by the caller.
pub async fn run_until<F>(args: Args, stop: F) -> Result<(), Error>
where
    F: Future<Output = ()>,
{
    // Manifests are read before anything starts: a typo in a path fails at once.
    let documents = manifests::load(&args.apply)?;
    if args.cloud_url.is_some() && args.api_key.as_deref().unwrap_or_default().is_empty() {
        return Err(Error::ApiKeyMissing);
    }
    let mut sandbox = Sandbox::start(&args).await?;
    let result = sandbox.ready(&args, &documents).await;
    match result {
        Ok(table) => {
            stop.await;
            println!("stopping: controllers first, then the servers");
            table.abort();
            sandbox.shutdown().await;
            println!("stopped");
            Ok(())
        }
        Err(error) => {
            sandbox.shutdown().await;
            Err(error)
        }
    }
}

/// Everything that runs, in start order.
struct Sandbox {
    apiserver: ApiServerHandle,
    simulator: Option<SimulatorHandle>,
    cloud_url: String,
    client: kube::Client,
    stop_controllers: Option<oneshot::Sender<()>>,
    controllers: Option<JoinHandle<()>>,
    /// Where `/metrics` and the probes answer, once the controllers run.
    endpoints: Option<SocketAddr>,
    stop_endpoints: Option<oneshot::Sender<()>>,
}

// === impl Sandbox ===

impl Sandbox {
    async fn start(args: &Args) -> Result<Sandbox, Error> {
        let apiserver = ApiServer::start(ApiServerConfig {
            listen: args.listen,
            ..ApiServerConfig::default()
        })
        .await
        .map_err(|error| match &error {
            gpucloud_apiserver::server::Error::Bind { address, source }
                if source.kind() == std::io::ErrorKind::AddrInUse =>
            {
                Error::PortInUse {
                    address: *address,
                    flag: "--listen",
                }
            }
            _ => Error::ApiServer(error.to_string()),
        })?;
        let client = match apiserver.kube_client().await {
            Ok(client) => client,
            Err(error) => {
                apiserver.shutdown().await;
                return Err(Error::ApiServer(error.to_string()));
            }
        };
        let (simulator, cloud_url) = match &args.cloud_url {
            Some(url) => (None, url.clone()),
            None => match start_simulator(args.cloud_listen).await {
                Ok(simulator) => {
                    let url = simulator.base_url();
                    (Some(simulator), url)
                }
                Err(error) => {
                    apiserver.shutdown().await;
                    return Err(error);
                }
            },
        };
        Ok(Sandbox {
            apiserver,
            simulator,
            cloud_url,
            client,
            stop_controllers: None,
            controllers: None,
            endpoints: None,
            stop_endpoints: None,
        })
    }

    /// CRDs, namespace, Secret, kubeconfig, controllers, manifests; then the live table.
    async fn ready(
        &mut self,
        args: &Args,
        documents: &[Document],
    ) -> Result<JoinHandle<()>, Error> {
        install_crds(&self.client).await?;
        install_deletion_protection(&self.client).await?;
        let api_key = match (&self.simulator, &args.api_key) {
            (Some(simulator), _) => simulator.api_key().to_string(),
            (None, Some(key)) => key.clone(),
            (None, None) => return Err(Error::ApiKeyMissing),
        };
        put_credentials(&self.client, &api_key).await?;
        self.start_controllers(args.metrics_listen).await?;
        let kubeconfig = absolute(&args.kubeconfig);
        self.apiserver
            .write_kubeconfig(&kubeconfig)
            .map_err(|error| Error::Kubeconfig {
                path: kubeconfig.clone(),
                reason: error.to_string(),
            })?;
        self.print_and_apply(&kubeconfig, documents).await
    }

    async fn print_and_apply(
        &self,
        kubeconfig: &Path,
        documents: &[Document],
    ) -> Result<JoinHandle<()>, Error> {
        println!("gpucloud sandbox");
        println!("  API server:  {}", self.apiserver.url());
        match &self.simulator {
            Some(simulator) => println!(
                "  cloud:       {} (simulator; API key in Secret {OPERATOR_NAMESPACE}/{CREDENTIALS_SECRET})",
                simulator.base_url()
            ),
            None => println!("  cloud:       {}", self.cloud_url),
        }
        println!("  kubeconfig:  {}", kubeconfig.display());
        if let Some(address) = self.endpoints {
            println!("  metrics:     http://{address}/metrics (probes: /healthz, /readyz)");
        }
        println!(
            "  deletion protection: ValidatingAdmissionPolicy {} (annotate an object {}=true)",
            gpucloud_api::deletion_protection::POLICY_NAME,
            gpucloud_api::deletion_protection::ANNOTATION
        );
        println!("export KUBECONFIG={}", kubeconfig.display());
        let applied = manifests::apply(&self.client, documents, DEFAULT_NAMESPACE).await?;
        for object in &applied {
            println!("applied {object}");
        }
        println!("objects (printed again on every change; Ctrl-C stops the sandbox):");
        Ok(tokio::spawn(crate::table::follow(
            self.client.clone(),
            TABLE_INTERVAL,
        )))
    }

    /// The controllers as `run` starts them, with their metrics and probes on `listen`.
    async fn start_controllers(&mut self, listen: SocketAddr) -> Result<(), Error> {
        let config = operator_config(&self.cloud_url)?;
        config.metrics.set_build_info(&BUILD);
        let (stop_endpoints, endpoints_stopped) = oneshot::channel::<()>();
        let endpoints = gpucloud_telemetry::server::serve(
            gpucloud_telemetry::Endpoints {
                metrics: listen,
                health: listen,
            },
            config.metrics.clone(),
            config.health.clone(),
            endpoints_stopped.map(drop),
        )
        .await
        .map_err(|error| match &error {
            gpucloud_telemetry::server::Error::Bind { source, .. }
                if source.kind() == std::io::ErrorKind::AddrInUse =>
            {
                Error::PortInUse {
                    address: listen,
                    flag: "--metrics-listen",
                }
            }
            _ => Error::Setup {
                step: "serving metrics",
                reason: error.to_string(),
            },
        })?;
        self.endpoints = Some(endpoints.metrics);
        self.stop_endpoints = Some(stop_endpoints);
        let (stop, stopped) = oneshot::channel::<()>();
        self.controllers = Some(tokio::spawn(gpucloud_controller::operator::run::run(
            self.client.clone(),
            config,
            stopped.map(|_| ()).boxed(),
        )));
        self.stop_controllers = Some(stop);
        Ok(())
    }

    /// Controllers first (their in-flight reconciles finish), then the servers.
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop_controllers.take() {
            let _ = stop.send(());
        }
        if let Some(mut controllers) = self.controllers.take()
            && tokio::time::timeout(CONTROLLERS_STOP_TIMEOUT, &mut controllers)
                .await
                .is_err()
        {
            tracing::warn!("controllers did not stop in time; abandoning their reconciles");
            controllers.abort();
        }
        if let Some(stop) = self.stop_endpoints.take() {
            let _ = stop.send(());
        }
        self.apiserver.shutdown().await;
        if let Some(simulator) = self.simulator.take() {
            simulator.shutdown().await;
        }
    }
}

/// What `gpucloud_build_info` reports for the sandbox's controllers: this crate's version
/// (the workspace's) and the Kubernetes API it is built against; the commit is known to the
/// binary's build only.
const BUILD: gpucloud_telemetry::BuildInfo = gpucloud_telemetry::BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    commit: "unknown",
    commit_date: "unknown",
    kubernetes: gpucloud_controller::operator::cli::KUBERNETES_API,
};

/// The simulator with the settings of `gpucloud-operator simulator` (its flags' defaults and
/// `GPUCLOUD_SIM_*` environment variables, e.g. the admin token), listening on `listen`.
async fn start_simulator(listen: SocketAddr) -> Result<SimulatorHandle, Error> {
    #[derive(Parser)]
    struct SimulatorFlags {
        #[command(flatten)]
        args: gpucloud_simulator::cli::Args,
    }
    let listen_flag = listen.to_string();
    let flags = SimulatorFlags::try_parse_from(["simulator", "--listen", listen_flag.as_str()])
        .map_err(|error| Error::Simulator(first_line(&error.to_string())))?;
    Simulator::start(flags.args.to_config(), listen)
        .await
        .map_err(|error| match &error {
            gpucloud_simulator::Error::Bind { addr, source }
                if source.kind() == std::io::ErrorKind::AddrInUse =>
            {
                Error::PortInUse {
                    address: *addr,
                    flag: "--cloud-listen",
                }
            }
            _ => Error::Simulator(error.to_string()),
        })
}

/// The operator configuration `gpucloud-operator run` builds from the same flags (their
/// defaults and environment variables), pointed at `cloud_url` and the sandbox's Secret.
pub fn operator_config(
    cloud_url: &str,
) -> Result<gpucloud_controller::operator::run::OperatorConfig, Error> {
    #[derive(Parser)]
    struct OperatorFlags {
        #[command(flatten)]
        args: gpucloud_controller::operator::cli::Args,
    }
    let secret = format!("{OPERATOR_NAMESPACE}/{CREDENTIALS_SECRET}");
    let flags = OperatorFlags::try_parse_from([
        "run",
        "--cloud-url",
        cloud_url,
        "--credentials-secret",
        secret.as_str(),
        "--credentials-key",
        "apiKey",
        "--operator-namespace",
        OPERATOR_NAMESPACE,
        // The sandbox's user is its cluster administrator: adoption still needs the
        // namespace's label, as in any cluster.
        "--allow-adoption",
    ])
    .map_err(|error| Error::Settings(first_line(&error.to_string())))?;
    flags
        .args
        .config()
        .map_err(|error| Error::Settings(error.to_string()))
}

async fn install_crds(client: &kube::Client) -> Result<(), Error> {
    let setup = |step: &'static str| move |reason: String| Error::Setup { step, reason };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in gpucloud_controller::kinds::registry::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        within(crds.patch(
            &name,
            &PatchParams::apply(manifests::FIELD_MANAGER).force(),
            &Patch::Apply(&crd),
        ))
        .await
        .map_err(setup("installing the CRDs"))?
        .map_err(|e| setup("installing the CRDs")(format!("{name}: {e}")))?;
        within(await_condition(
            crds.clone(),
            &name,
            conditions::is_crd_established(),
        ))
        .await
        .map_err(setup("waiting for the CRDs"))?
        .map_err(|e| setup("waiting for the CRDs")(format!("{name}: {e}")))?;
    }
    Ok(())
}

/// The deletion-protection policies and bindings the chart and the kustomize base install, so
/// kubectl against the sandbox refuses to delete a protected object as a cluster would.
async fn install_deletion_protection(client: &kube::Client) -> Result<(), Error> {
    let setup = |reason: String| Error::Setup {
        step: "installing the deletion-protection policy",
        reason,
    };
    let documents = manifests::parse(
        Path::new("deploy/kustomize/deletion-protection.yaml"),
        gpucloud_api::deletion_protection::POLICY_MANIFEST,
    )?;
    within(manifests::apply(client, &documents, DEFAULT_NAMESPACE))
        .await
        .map_err(setup)??;
    Ok(())
}

async fn put_credentials(client: &kube::Client, api_key: &str) -> Result<(), Error> {
    let setup = |reason: String| Error::Setup {
        step: "credentials Secret",
        reason,
    };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(OPERATOR_NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let params = PatchParams::apply(manifests::FIELD_MANAGER).force();
    within(namespaces.patch(OPERATOR_NAMESPACE, &params, &Patch::Apply(&namespace)))
        .await
        .map_err(setup)?
        .map_err(|e| setup(e.to_string()))?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(CREDENTIALS_SECRET.into()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([("apiKey".into(), api_key.to_string())])),
        ..Secret::default()
    };
    // The error names the step only: the Secret's body holds the key.
    within(secrets.patch(CREDENTIALS_SECRET, &params, &Patch::Apply(&secret)))
        .await
        .map_err(setup)?
        .map_err(|e| match e {
            kube::Error::Api(status) => setup(status.message.clone()),
            _ => setup("the API server refused the Secret".into()),
        })?;
    Ok(())
}

async fn within<F: Future>(future: F) -> Result<F::Output, String> {
    tokio::time::timeout(STEP_TIMEOUT, future)
        .await
        .map_err(|_| format!("not done within {}s", STEP_TIMEOUT.as_secs()))
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir()
        .map(|dir| dir.join(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_operator_is_configured_as_run_would_be_with_the_sandbox_secret() {
        let config = operator_config("http://127.0.0.1:8089/").unwrap();
        assert_eq!(config.cloud.base_url, "http://127.0.0.1:8089");
        let secret = config.default_secret.unwrap();
        assert_eq!(
            (
                secret.namespace.as_str(),
                secret.name.as_str(),
                secret.key.as_str()
            ),
            (OPERATOR_NAMESPACE, CREDENTIALS_SECRET, "apiKey")
        );
        assert!(
            config.namespaces.is_empty(),
            "the sandbox watches every namespace"
        );
    }

    #[tokio::test]
    async fn a_cloud_url_without_a_key_is_refused_before_anything_starts() {
        let args = Args {
            listen: "127.0.0.1:0".parse().unwrap(),
            cloud_listen: "127.0.0.1:0".parse().unwrap(),
            metrics_listen: "127.0.0.1:0".parse().unwrap(),
            cloud_url: Some("https://cloud.example".into()),
            api_key: None,
            kubeconfig: PathBuf::from("/nonexistent/dev.kubeconfig"),
            apply: Vec::new(),
        };
        let error = tokio::time::timeout(Duration::from_secs(10), run_until(args, async {}))
            .await
            .unwrap()
            .unwrap_err();
        assert!(matches!(error, Error::ApiKeyMissing), "{error}");
    }
}
