#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A first install as docs/install.md tells it, on a fresh embedded API server with every
//! install-time check it makes (structural schemas, CEL compilation and the CEL cost estimate
//! kube-apiserver makes): the CRDs from `crds/` with `kubectl apply --server-side`, the chart
//! as `scripts/release.sh` packages it with `helm install` (Helm's own library, the CRDs left
//! to `crds/`), the operator with the installed Deployment's settings, then the quickstart
//! applied with `kubectl` and every object Ready.
//!
//! The chart's own CRD template is installed the same way by `tests/release.rs`, and the
//! kustomize base by `tests/deploy_chart.rs`.

mod deploy;

use deploy::{RELEASE_NAMESPACE, render_chart, repository_root};
use futures::FutureExt;
use gpucloud_apiserver::{ApiServer, ApiServerConfig};
use gpucloud_simulator::{Simulator, SimulatorConfig};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `kubectl` against the server `kubeconfig` names, from the repository root; its output, or
/// the test fails with kubectl's words.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .current_dir(repository_root())
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The chart packaged by `scripts/release.sh`, as CI and a release make it.
fn packaged_chart(dist: &Path) -> PathBuf {
    deploy::python();
    let output = Command::new(repository_root().join("scripts/release.sh"))
        .env("CHART", deploy::chart_dir())
        .env("DIST", dist)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "scripts/release.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    dist.join(format!("gpucloud-operator-{VERSION}.tgz"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_install_as_documented_runs_the_quickstart() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("first-install");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let archive = packaged_chart(&scratch.join("dist"));

    let apiserver = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let simulator = Simulator::start(SimulatorConfig::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let kubeconfig = scratch.join("kubeconfig");
    apiserver.write_kubeconfig(&kubeconfig).unwrap();

    // docs/install.md, "With Helm", with the CRDs installed separately ("The CRDs").
    kubectl(&kubeconfig, &["apply", "--server-side", "-f", "crds/"]);
    kubectl(&kubeconfig, &["create", "namespace", RELEASE_NAMESPACE]);
    let key = format!("--from-literal=apiKey={}", simulator.api_key());
    kubectl(
        &kubeconfig,
        &[
            "-n",
            RELEASE_NAMESPACE,
            "create",
            "secret",
            "generic",
            "gpucloud-credentials",
            &key,
        ],
    );
    let values = json!({
        "crds": {"enabled": false},
        "image": {"repository": "registry.example.com/gpucloud-operator"},
        "cloud": {"url": simulator.base_url()},
    });
    let installed = {
        let (kubeconfig, archive, values) = (kubeconfig.clone(), archive.clone(), values.clone());
        tokio::task::spawn_blocking(move || deploy::helm(&kubeconfig, "install", &archive, &values))
            .await
            .unwrap()
    };
    assert_eq!(installed["status"], "deployed", "{installed}");

    // No pods run here: the operator runs in this process with the Deployment's settings.
    let rendered = render_chart(&archive, &values);
    let args = deploy::run_args(
        &rendered,
        &[
            ("resync-interval", "2s"),
            ("transition-interval", "200ms"),
            ("metrics-listen", "127.0.0.1:0"),
            ("health-listen", "127.0.0.1:0"),
        ],
    );
    let client = apiserver.kube_client().await.unwrap();
    gpucloud_controller::operator::cli::ensure_crds_installed(&client)
        .await
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(gpucloud_controller::operator::replica::run_replica(
        client,
        args.config().unwrap(),
        args.replica().unwrap(),
        stopped.map(|_| ()).boxed(),
    ));

    // README's quick start, against the installed operator.
    kubectl(&kubeconfig, &["apply", "-f", "examples/quickstart"]);
    let waited = {
        let kubeconfig = kubeconfig.clone();
        tokio::task::spawn_blocking(move || {
            kubectl(
                &kubeconfig,
                &[
                    "wait",
                    "--for=condition=Ready",
                    "--timeout=120s",
                    "-f",
                    "examples/quickstart",
                ],
            )
        })
        .await
        .unwrap()
    };
    assert_eq!(waited.lines().count(), 4, "{waited}");

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), operator)
        .await
        .expect("the operator stops")
        .unwrap()
        .unwrap();
    apiserver.shutdown().await;
}
