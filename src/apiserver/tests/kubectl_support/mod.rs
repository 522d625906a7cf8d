//! The kubectl harness shared by the kubectl test files: a server with a kubeconfig in a
//! private temporary directory, and kubectl runs bounded in time with their output captured.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpucloud_apiserver::{ApiServer, ApiServerConfig, ApiServerHandle};
use serde_json::Value;

/// Longest any single kubectl invocation may take before the test fails.
pub const KUBECTL_TIMEOUT: Duration = Duration::from_secs(30);

pub fn kubectl_binary() -> PathBuf {
    if let Ok(path) = std::env::var("KUBECTL") {
        let path = PathBuf::from(path);
        assert!(
            path.exists(),
            "kubectl not found: $KUBECTL names {}, which does not exist",
            path.display()
        );
        return path;
    }
    let default = PathBuf::from("/usr/bin/kubectl");
    if default.exists() {
        return default;
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for directory in std::env::split_paths(&paths) {
            let candidate = directory.join("kubectl");
            if candidate.exists() {
                return candidate;
            }
        }
    }
    panic!(
        "kubectl not found: these conformance tests need kubectl v1.32 at /usr/bin/kubectl, \
         on PATH, or named by $KUBECTL"
    );
}

/// What one kubectl run produced.
#[derive(Debug)]
pub struct Outcome {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    #[track_caller]
    pub fn ok(self) -> String {
        assert!(
            self.success,
            "kubectl failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self.stdout
    }

    #[track_caller]
    pub fn fails(self) -> String {
        assert!(
            !self.success,
            "kubectl unexpectedly succeeded\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self.stderr
    }
}

/// A running server plus a kubeconfig for it in a private temporary directory.
pub struct Cluster {
    pub server: ApiServerHandle,
    pub directory: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

impl Cluster {
    pub async fn start() -> Cluster {
        Cluster::start_with(ApiServerConfig::default()).await
    }

    pub async fn start_with(config: ApiServerConfig) -> Cluster {
        let server = tokio::time::timeout(Duration::from_secs(20), ApiServer::start(config))
            .await
            .expect("server start timed out")
            .expect("server starts");
        let directory = tempfile::tempdir().unwrap();
        let kubeconfig = directory.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        Cluster {
            server,
            directory,
            kubeconfig,
        }
    }

    /// Runs kubectl with `args`, feeding `stdin` if given, off the async runtime.
    pub async fn kubectl_with_input(&self, args: &[&str], stdin: Option<&str>) -> Outcome {
        let binary = kubectl_binary();
        let home = self.directory.path().to_path_buf();
        let kubeconfig = self.kubeconfig.clone();
        let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
        let stdin = stdin.map(str::to_owned);
        tokio::task::spawn_blocking(move || run_kubectl(&binary, &home, &kubeconfig, &args, stdin))
            .await
            .unwrap()
    }

    /// Starts a long-running kubectl (e.g. `get -w`) whose output is collected until `stop`.
    pub fn spawn_kubectl(&self, args: &[&str]) -> std::process::Child {
        Command::new(kubectl_binary())
            .args(args)
            .env_clear()
            .env("HOME", self.directory.path())
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", self.directory.path().join("cache"))
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts")
    }

    pub async fn kubectl(&self, args: &[&str]) -> Outcome {
        self.kubectl_with_input(args, None).await
    }

    pub async fn apply_stdin(&self, extra: &[&str], manifest: &str) -> Outcome {
        let mut args = vec!["apply", "-f", "-"];
        args.extend_from_slice(extra);
        self.kubectl_with_input(&args, Some(manifest)).await
    }

    pub async fn get_json(&self, args: &[&str]) -> Value {
        let mut full = vec!["get"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl(&full).await.ok()).unwrap()
    }

    /// Polls `check` (a kubectl run) until it returns true or the time runs out.
    pub async fn eventually<F>(&self, what: &str, mut check: F)
    where
        F: AsyncFnMut(&Cluster) -> bool,
    {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if check(self).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("timed out waiting until {what}");
    }
}

pub fn run_kubectl(
    binary: &Path,
    home: &Path,
    kubeconfig: &Path,
    args: &[String],
    stdin: Option<String>,
) -> Outcome {
    let mut command = Command::new(binary);
    command
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", home.join("cache"))
        .env("PATH", "/usr/bin:/bin")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("kubectl starts");
    if let Some(input) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        pipe.write_all(input.as_bytes()).unwrap();
    }
    // Read output on threads so a chatty kubectl never blocks on a full pipe.
    let stdout = child.stdout.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut pipe, &mut text).ok();
            text
        })
    });
    let stderr = child.stderr.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut pipe, &mut text).ok();
            text
        })
    });
    let deadline = Instant::now() + KUBECTL_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("kubectl {args:?} did not finish within {KUBECTL_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Outcome {
        success: status.success(),
        stdout: stdout.map(|t| t.join().unwrap()).unwrap_or_default(),
        stderr: stderr.map(|t| t.join().unwrap()).unwrap_or_default(),
    }
}
