//! Flags of `gpucloud-operator dev`.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Run the sandbox: embedded API server, cloud simulator and the controllers in one process.
#[derive(Clone, clap::Args)]
pub struct Args {
    /// Address of the embedded Kubernetes API server (HTTPS; port 0 picks a free port).
    #[arg(long, env = "GPUCLOUD_DEV_LISTEN", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Address of the cloud simulator (port 0 picks a free port). Not used with --cloud-url.
    #[arg(
        long,
        env = "GPUCLOUD_DEV_CLOUD_LISTEN",
        default_value = "127.0.0.1:8089"
    )]
    pub cloud_listen: SocketAddr,
    /// Address of the controllers' `/metrics`, `/healthz` and `/readyz`, as `run` serves them
    /// (port 0 picks a free port).
    #[arg(
        long,
        env = "GPUCLOUD_METRICS_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub metrics_listen: SocketAddr,
    /// Use this Cloud GPU Compute Service API instead of the simulator (needs --api-key).
    #[arg(long, env = "GPUCLOUD_URL")]
    pub cloud_url: Option<String>,
    /// API key for --cloud-url. Prefer the environment variable: command lines are visible to
    /// other local users.
    #[arg(long, env = "GPUCLOUD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Where to write the kubeconfig for kubectl (replaced if it exists).
    #[arg(
        long,
        env = "GPUCLOUD_DEV_KUBECONFIG",
        default_value = "dev.kubeconfig"
    )]
    pub kubeconfig: PathBuf,
    /// Manifests to apply once everything runs: a file or a folder (its .yaml, .yml and .json
    /// files, recursively, in name order; `kustomization.yaml` files are skipped). Repeatable.
    #[arg(long, value_name = "PATH")]
    pub apply: Vec<PathBuf>,
}

impl std::fmt::Debug for Args {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Args")
            .field("listen", &self.listen)
            .field("cloud_listen", &self.cloud_listen)
            .field("metrics_listen", &self.metrics_listen)
            .field("cloud_url", &self.cloud_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("kubeconfig", &self.kubeconfig)
            .field("apply", &self.apply)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Command {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn cli_definition_is_consistent() {
        Command::command().debug_assert();
    }

    #[test]
    fn defaults_and_repeated_apply() {
        let command = Command::try_parse_from([
            "dev",
            "--apply",
            "examples/quickstart",
            "--apply",
            "extra.yaml",
        ])
        .unwrap();
        assert_eq!(command.args.listen, "127.0.0.1:6443".parse().unwrap());
        assert_eq!(command.args.cloud_listen, "127.0.0.1:8089".parse().unwrap());
        assert_eq!(
            command.args.metrics_listen,
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(command.args.kubeconfig, PathBuf::from("dev.kubeconfig"));
        assert_eq!(command.args.apply.len(), 2);
    }

    #[test]
    fn the_api_key_never_shows_in_debug_output() {
        let command = Command::try_parse_from([
            "dev",
            "--cloud-url",
            "https://cloud.example",
            "--api-key",
            "very-secret-key",
        ])
        .unwrap();
        assert!(!format!("{command:?}").contains("very-secret-key"));
    }
}
