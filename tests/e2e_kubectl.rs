#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What the README promises, done with the installed `kubectl` against the built binary:
//! `gpucloud-operator dev` in the background, the quickstart applied and Ready, the table
//! columns, a powerState change followed by the cloud, a protected instance's delete refused,
//! deletion leaving nothing billed, and a clean stop on SIGTERM; its `/metrics`. Also the
//! sandbox's one-line errors.

mod scrape;

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const BINARY: &str = env!("CARGO_BIN_EXE_gpucloud-operator");

fn repository_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh folder under the system's temp dir, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(label: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let path = std::env::temp_dir().join(format!(
            "gpucloud-e2e-{label}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn kubectl_available() -> bool {
    std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// `gpucloud-operator dev` with its environment cleared of anything pointing elsewhere.
fn dev_command(args: &[&str]) -> Command {
    let mut command = Command::new(BINARY);
    command
        .arg("dev")
        .args(args)
        .current_dir(repository_root())
        .env_remove("GPUCLOUD_URL")
        .env_remove("GPUCLOUD_API_KEY")
        .env_remove("KUBECONFIG")
        // A free port for /metrics: tests run at once, and 8080 may be taken.
        .env("GPUCLOUD_METRICS_LISTEN", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The running sandbox: its stdout lines arrive on `lines`.
struct Sandbox {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Sandbox {
    fn start(mut command: Command) -> Sandbox {
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Sandbox {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line (from now on) starting with `prefix`.
    async fn line_starting(&mut self, prefix: &str, seconds: u64) -> String {
        let found = tokio::time::timeout(Duration::from_secs(seconds), async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                if line.trim_start().starts_with(prefix) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => line,
            _ => panic!(
                "no line starting with {prefix:?} within {seconds}s; output so far:\n{}",
                self.seen.join("\n")
            ),
        }
    }

    /// Sends SIGTERM, as a service manager would, and waits for the exit.
    async fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().expect("still running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        tokio::time::timeout(Duration::from_secs(45), self.child.wait())
            .await
            .expect("the sandbox stops within 45s of SIGTERM")
            .unwrap()
    }
}

struct Kubectl {
    kubeconfig: String,
}

impl Kubectl {
    async fn run(&self, args: &[&str]) -> std::process::Output {
        let mut command = Command::new("kubectl");
        command
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .current_dir(repository_root())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        tokio::time::timeout(Duration::from_secs(150), command.output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish within 150s"))
            .unwrap()
    }

    async fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args).await;
        assert!(
            output.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }
}

/// The simulator's admin API.
struct Admin {
    base_url: String,
    token: String,
    http: reqwest::Client,
}

impl Admin {
    async fn state(&self) -> serde_json::Value {
        let response = tokio::time::timeout(
            Duration::from_secs(10),
            self.http
                .get(format!("{}/_admin/state", self.base_url))
                .bearer_auth(&self.token)
                .send(),
        )
        .await
        .unwrap()
        .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        response.json().await.unwrap()
    }

    /// Polls the account until `check` holds, for at most `seconds`.
    async fn until(
        &self,
        seconds: u64,
        what: &str,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
        loop {
            let state = self.state().await;
            if check(&state) {
                return state;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {seconds}s; account: {state:#}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn train_1_status(state: &serde_json::Value) -> Option<String> {
    state["instances"]
        .as_array()?
        .iter()
        .find(|i| {
            i["vm_name"]
                .as_str()
                .is_some_and(|n| n.starts_with("gco-default-train-1-"))
        })
        .and_then(|i| i["status"].as_str().map(str::to_string))
}

/// The column of `header` starting at `name`, read from `row`.
fn cell<'a>(header: &str, row: &'a str, name: &str) -> &'a str {
    let start = header
        .find(&format!("{name} "))
        .or_else(|| header.ends_with(name).then(|| header.len() - name.len()))
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"));
    row.get(start..)
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_session_with_kubectl() {
    if !kubectl_available() {
        println!(
            "skipped: kubectl is not on PATH; this test drives the real kubectl (.ci/run installs it)"
        );
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let scratch = Scratch::new("session");
    let kubeconfig = scratch.0.join("dev.kubeconfig");
    // Unique per run (the scratch folder's name); it only guards a loopback port of this test.
    let admin_token = scratch
        .0
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let mut command = dev_command(&[
        "--listen",
        "127.0.0.1:0",
        "--cloud-listen",
        "127.0.0.1:0",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    // Shorter cloud delays than the simulator's defaults, so the session takes seconds.
    command
        .env("GPUCLOUD_SIM_ADMIN_TOKEN", &admin_token)
        .env("GPUCLOUD_SIM_CREATE_DELAY_MS", "1000")
        .env("GPUCLOUD_SIM_BOOT_DELAY_MS", "500")
        .env("GPUCLOUD_SIM_TRANSITION_DELAY_MS", "500")
        .env("GPUCLOUD_SIM_VOLUME_DELAY_MS", "300")
        .env("GPUCLOUD_TRANSITION_INTERVAL", "500ms");
    let mut sandbox = Sandbox::start(command);

    // The chosen addresses are printed; the kubeconfig line comes once everything runs.
    let cloud = sandbox.line_starting("cloud:", 60).await;
    let base_url = cloud
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .expect("the simulator's URL")
        .to_string();
    let metrics = sandbox.line_starting("metrics:", 60).await;
    let metrics: std::net::SocketAddr = metrics
        .split_whitespace()
        .find_map(|word| word.strip_prefix("http://")?.strip_suffix("/metrics"))
        .expect("the metrics URL")
        .parse()
        .unwrap();
    sandbox
        .line_starting(
            "deletion protection: ValidatingAdmissionPolicy gpucloud-operator-deletion-protection",
            60,
        )
        .await;
    let export = sandbox.line_starting("export KUBECONFIG=", 60).await;
    assert_eq!(
        export,
        format!("export KUBECONFIG={}", kubeconfig.display())
    );
    let kubectl = Kubectl {
        kubeconfig: kubeconfig.to_str().unwrap().to_string(),
    };
    let admin = Admin {
        base_url,
        token: admin_token,
        http: reqwest::Client::new(),
    };

    let applied = kubectl.ok(&["apply", "-f", "examples/quickstart"]).await;
    for object in [
        "firewall.gpucloud.io/research-edge created",
        "gpuinstance.gpucloud.io/train-1 created",
        "sshkey.gpucloud.io/dev-key created",
        "volume.gpucloud.io/dataset created",
    ] {
        assert!(applied.contains(object), "{applied}");
    }
    let waited = kubectl
        .ok(&[
            "wait",
            "--for=condition=Ready",
            "-f",
            "examples/quickstart",
            "--timeout=120s",
        ])
        .await;
    assert_eq!(waited.lines().count(), 4, "{waited}");
    assert!(
        waited.lines().all(|l| l.ends_with("condition met")),
        "{waited}"
    );
    // The live table follows: every object Ready.
    sandbox.line_starting("all 4 objects Ready", 30).await;

    // The sandbox serves the controllers' metrics, as `run` does: the hourly cost of what
    // was just made, and the spend family the dashboard shows.
    let (content_type, body) = scrape::scrape(metrics, Some(scrape::PROMETHEUS_ACCEPT)).await;
    let families = scrape::parse(&content_type, &body);
    for family in [
        "gpucloud_spend",
        "gpucloud_hourly_cost",
        "gpucloud_build_info",
    ] {
        assert!(families.contains_key(family), "{family} not served");
    }
    assert!(
        body.contains("\ngpucloud_hourly_cost{kind=\"GpuInstance\",object_namespace=\"default\""),
        "{body}"
    );

    // `kubectl get gpucloud`: one table per kind, READY True everywhere.
    let tables = kubectl.ok(&["get", "gpucloud"]).await;
    let blocks: Vec<Vec<&str>> = tables
        .split("\n\n")
        .map(|block| block.lines().collect())
        .filter(|block: &Vec<&str>| !block.is_empty())
        .collect();
    // The catalog's GpuOfferings are in a category of their own (`gpucloud-catalog`).
    assert!(!tables.contains("gpuoffering"), "{tables}");
    assert_eq!(blocks.len(), 4, "{tables}");
    for block in &blocks {
        let header = block[0];
        assert!(header.starts_with("NAME "), "{tables}");
        for row in &block[1..] {
            assert_eq!(cell(header, row, "READY"), "True", "{tables}");
        }
    }
    // `kubectl get gpuofferings`: the catalog, four GPU types in three regions, with prices and
    // stock.
    let mut offered = String::new();
    for _ in 0..60 {
        offered = kubectl.ok(&["get", "gpuofferings"]).await;
        if offered.lines().count() == 13 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let lines: Vec<&str> = offered.lines().collect();
    assert_eq!(lines.len(), 13, "{offered}");
    let catalog = kubectl.ok(&["get", "gpucloud-catalog", "-o", "name"]).await;
    assert_eq!(catalog.lines().count(), 12, "{catalog}");
    assert!(
        catalog
            .lines()
            .all(|l| l.starts_with("gpuoffering.gpucloud.io/")),
        "{catalog}"
    );
    let columns: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        columns,
        [
            "NAME",
            "GPU",
            "REGION",
            "VRAM(GB)",
            "VCPUS/GPU",
            "RAM/GPU(GB)",
            "PRICE/GPU/H",
            "CURRENCY",
            "AVAILABLE",
            "REFRESHED",
        ],
        "{offered}"
    );
    let h100 = lines
        .iter()
        .find(|l| l.starts_with("h100-80g.us-east-1 "))
        .unwrap_or_else(|| panic!("{offered}"));
    assert_eq!(cell(lines[0], h100, "PRICE/GPU/H"), "2.99", "{offered}");
    assert_eq!(cell(lines[0], h100, "VRAM(GB)"), "80", "{offered}");
    assert_eq!(cell(lines[0], h100, "CURRENCY"), "USD", "{offered}");

    let instances = kubectl.ok(&["get", "gpuinstance", "train-1"]).await;
    let lines: Vec<&str> = instances.lines().collect();
    let columns: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        columns,
        [
            "NAME", "STATE", "READY", "REASON", "GPU", "COUNT", "REGION", "IP", "AGE"
        ],
        "{instances}"
    );
    let row = lines[1];
    assert_eq!(cell(lines[0], row, "STATE"), "ACTIVE");
    assert_eq!(cell(lines[0], row, "REASON"), "Available");
    assert_eq!(cell(lines[0], row, "GPU"), "H100-80G");
    assert_eq!(cell(lines[0], row, "COUNT"), "1");
    assert_eq!(cell(lines[0], row, "REGION"), "us-east-1");
    assert!(cell(lines[0], row, "IP").contains('.'), "{instances}");
    let described = kubectl.ok(&["describe", "gpuinstance", "train-1"]).await;
    assert!(described.contains("Conditions:"), "{described}");

    // powerState: the cloud follows.
    let state = admin.state().await;
    assert_eq!(
        train_1_status(&state).as_deref(),
        Some("ACTIVE"),
        "{}",
        state["instances"]
    );
    kubectl
        .ok(&[
            "patch",
            "gpuinstance",
            "train-1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"powerState":"Stopped"}}"#,
        ])
        .await;
    admin
        .until(60, "train-1 SHUTOFF in the cloud", |state| {
            train_1_status(state).as_deref() == Some("SHUTOFF")
        })
        .await;
    kubectl
        .ok(&[
            "wait",
            "--for=jsonpath={.status.vmStatus}=STOPPED",
            "gpuinstance/train-1",
            "--timeout=60s",
        ])
        .await;
    kubectl
        .ok(&[
            "patch",
            "gpuinstance",
            "train-1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"powerState":"Running"}}"#,
        ])
        .await;
    admin
        .until(60, "train-1 ACTIVE again in the cloud", |state| {
            train_1_status(state).as_deref() == Some("ACTIVE")
        })
        .await;

    // Changes the cloud could not carry out, or could never undo, are refused at admission,
    // naming the field; the object and its machine stay as they were.
    let generation = kubectl
        .ok(&[
            "get",
            "gpuinstance",
            "train-1",
            "-o",
            "jsonpath={.metadata.generation}",
        ])
        .await;
    let machine = ("gpuinstance", "train-1");
    let firewall = ("firewall", "research-edge");
    for ((kind, name), patch, says) in [
        (
            machine,
            r#"{"spec":{"powerState":"Hibernated"}}"#,
            "powerState Hibernated needs tier Legacy",
        ),
        (
            machine,
            r#"{"spec":{"startupScript":{"inline":"echo changed"}}}"#,
            "startupScript is immutable",
        ),
        (
            machine,
            r#"{"spec":{"sshKeyRefs":[{"name":"another-key"}]}}"#,
            "sshKeyRefs is immutable",
        ),
        (
            firewall,
            r#"{"spec":{"description":"changed"}}"#,
            "description is immutable",
        ),
        // A final snapshot on delete is for machines only.
        (
            firewall,
            r#"{"spec":{"deletionPolicy":"Snapshot"}}"#,
            "spec.deletionPolicy: Invalid value: \"object\": deletionPolicy Snapshot is for GpuInstance only",
        ),
    ] {
        let refused = kubectl
            .run(&["patch", kind, name, "--type", "merge", "-p", patch])
            .await;
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains(says),
            "{kind} {patch}: {stderr}"
        );
    }
    // A startup script over the cloud's limit is refused before anything is created.
    let oversize = scratch.0.join("oversize.yaml");
    std::fs::write(
        &oversize,
        format!(
            "apiVersion: gpucloud.io/v1alpha1\nkind: GpuInstance\nmetadata:\n  name: oversize\n\
             spec:\n  region: us-east-1\n  gpuType: H100-80G\n  gpuCount: 1\n  \
             osImage: ubuntu-22.04-cuda-12\n  startupScript:\n    inline: \"{}\"\n",
            "x".repeat(65_536)
        ),
    )
    .unwrap();
    let refused = kubectl
        .run(&["apply", "-f", oversize.to_str().unwrap()])
        .await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("spec.startupScript.inline"),
        "{stderr}"
    );
    assert_eq!(
        kubectl
            .ok(&[
                "get",
                "gpuinstance",
                "train-1",
                "-o",
                "jsonpath={.metadata.generation}"
            ])
            .await,
        generation
    );
    let state = admin.state().await;
    assert_eq!(state["instances"].as_array().map(Vec::len), Some(1));
    assert_eq!(train_1_status(&state).as_deref(), Some("ACTIVE"));

    // Deletion protection: the sandbox installs the chart's policy, so a protected instance's
    // delete is refused (the machine stays) until the annotation is removed.
    kubectl
        .ok(&[
            "annotate",
            "gpuinstance",
            "train-1",
            "gpucloud.io/deletion-protection=true",
        ])
        .await;
    let refused = kubectl.run(&["delete", "gpuinstance", "train-1"]).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.starts_with(
            "Error from server (Forbidden): gpuinstances.gpucloud.io \"train-1\" is forbidden: \
             ValidatingAdmissionPolicy 'gpucloud-operator-deletion-protection' with binding \
             'gpucloud-operator-deletion-protection' denied request: GpuInstance default/train-1 \
             is protected from deletion"
        ),
        "{stderr}"
    );
    assert_eq!(
        train_1_status(&admin.state().await).as_deref(),
        Some("ACTIVE")
    );
    kubectl
        .ok(&[
            "annotate",
            "gpuinstance",
            "train-1",
            "gpucloud.io/deletion-protection-",
        ])
        .await;

    // Deleting returns once the cloud resources are gone; nothing is left billed.
    kubectl
        .ok(&["delete", "-f", "examples/quickstart", "--timeout=120s"])
        .await;
    let state = admin
        .until(30, "the account empty", |state| {
            ["instances", "volumes", "firewalls", "ssh_keys", "snapshots"]
                .iter()
                .all(|kind| state[kind].as_array().is_some_and(|a| a.is_empty()))
        })
        .await;
    for record in state["instance_billing"].as_array().unwrap() {
        assert!(!record["end_time"].is_null(), "still billed: {record}");
    }
    assert!(
        !state["instance_billing"].as_array().unwrap().is_empty(),
        "train-1 was billed while it ran"
    );
    // Nothing left of the user's (the catalog's offerings are the cloud's, in their own
    // category).
    let left = kubectl.ok(&["get", "gpucloud", "-A", "-o", "name"]).await;
    assert_eq!(left.trim(), "", "{left}");

    // SIGTERM: controllers stopped, servers closed, exit 0.
    let status = sandbox.terminate().await;
    assert!(status.success(), "{status:?}");
    sandbox.line_starting("stopped", 5).await;
}

/// Runs `dev` expecting it to fail at start; returns stderr.
async fn failing_start(args: &[&str], scratch: &Scratch) -> String {
    let kubeconfig = scratch.0.join("dev.kubeconfig");
    let mut command = dev_command(args);
    command.arg("--kubeconfig").arg(&kubeconfig);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("dev exits within 60s on a start-up error")
        .unwrap();
    assert!(!output.status.success(), "{args:?} succeeded");
    String::from_utf8(output.stderr).unwrap()
}

fn only_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    lines[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_start_up_errors_are_one_line() {
    let scratch = Scratch::new("errors");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let stderr = failing_start(
        &["--listen", &address, "--cloud-listen", "127.0.0.1:0"],
        &scratch,
    )
    .await;
    assert_eq!(
        only_line(&stderr),
        format!(
            "Error: {address} is in use; pass --listen with another address (port 0 picks a free one)"
        )
    );
    let stderr = failing_start(
        &["--listen", "127.0.0.1:0", "--cloud-listen", &address],
        &scratch,
    )
    .await;
    assert_eq!(
        only_line(&stderr),
        format!(
            "Error: {address} is in use; pass --cloud-listen with another address (port 0 picks a free one)"
        )
    );

    let missing = scratch.0.join("missing.yaml");
    let stderr = failing_start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--cloud-listen",
            "127.0.0.1:0",
            "--apply",
            missing.to_str().unwrap(),
        ],
        &scratch,
    )
    .await;
    assert!(
        only_line(&stderr).starts_with(&format!("Error: cannot read {}: ", missing.display())),
        "{stderr}"
    );

    let broken = scratch.0.join("broken.yaml");
    std::fs::write(
        &broken,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine}\n---\nkind: [unclosed\n",
    )
    .unwrap();
    let stderr = failing_start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--cloud-listen",
            "127.0.0.1:0",
            "--apply",
            broken.to_str().unwrap(),
        ],
        &scratch,
    )
    .await;
    assert!(
        only_line(&stderr).starts_with(&format!(
            "Error: {}: document 2: invalid YAML",
            broken.display()
        )),
        "{stderr}"
    );

    let unknown = scratch.0.join("unknown.yaml");
    std::fs::write(
        &unknown,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
    )
    .unwrap();
    let stderr = failing_start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--cloud-listen",
            "127.0.0.1:0",
            "--apply",
            unknown.to_str().unwrap(),
        ],
        &scratch,
    )
    .await;
    assert_eq!(
        only_line(&stderr),
        format!(
            "Error: {}: document 2: unknown kind Widget (apiVersion example.com/v1); the API server does not serve it",
            unknown.display()
        )
    );
    drop(taken);
}
