#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `gpucloud-operator run` as a process, as a pod runs it: SIGTERM in the middle of creating
//! a fleet exits within the shutdown timeout and hands the lease back; a restarted operator
//! converges with exactly one machine per object; and nothing either process printed (debug
//! logs included) holds the API key or a private key. A fresh process's first scrapes serve
//! every documented metric family, in the format each scraper asks for.

mod process_world;
mod scrape;

use gpucloud_api::{GpuInstance, Managed, SshKey};
use gpucloud_simulator::{FaultPlan, SimulatorConfig};
use kube::Api;
use kube::api::PostParams;
use process_world::{World, eventually, send_sigterm};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tokio::process::Child;

const NAMESPACE: &str = "team-a";
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
const FLEET: usize = 16;
const SETTINGS: &[&str] = &[
    "--lease-duration",
    "6s",
    "--renew-deadline",
    "4s",
    "--retry-period",
    "1s",
    "--resync-interval",
    "2s",
    "--transition-interval",
    "300ms",
    "--settle-window",
    "3s",
    "--shutdown-timeout",
    "5s",
];

async fn start_world() -> World {
    let simulator = SimulatorConfig {
        // Slow enough that a fleet is still being created when SIGTERM comes.
        faults: FaultPlan {
            latency: Duration::from_millis(150),
            ..FaultPlan::default()
        },
        ..SimulatorConfig::default()
    };
    World::start("operator-process", simulator, &[NAMESPACE]).await
}

/// Sends SIGTERM and waits for the exit; returns how long it took.
async fn terminate(child: &mut Child) -> Duration {
    let sent = Instant::now();
    send_sigterm(child).unwrap();
    let exit = tokio::time::timeout(SHUTDOWN_TIMEOUT * 3, child.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status {exit:?}");
    sent.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_fleet_then_restart_converges_without_duplicates_or_leaks() {
    let world = start_world().await;
    let mut first = world.operator("operator-a", SETTINGS);
    eventually(30, "operator-a leads", || async {
        (world.holder().await.unwrap().as_deref() == Some("operator-a")).then_some(())
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
    assert_eq!(
        world.holder().await.unwrap(),
        None,
        "the lease was handed back"
    );

    let mut second = world.operator("operator-b", SETTINGS);
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
    let leaks = world.secrets_in_output();
    assert!(
        leaks.is_empty(),
        "{} of {} lines hold a secret: {:?}",
        leaks.len(),
        output.len(),
        leaks.first()
    );
}

/// A start that fails (here: no kubeconfig at the path given) ends the log with one line that
/// names the cause and the path: one JSON object under `--log-format json`, like every line
/// before it; `Error: ...` under text. stderr is not a terminal here, so no line carries a
/// colour code.
#[tokio::test]
async fn a_failed_start_ends_the_log_with_one_line_in_its_format() {
    for format in ["json", "text"] {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpucloud-operator"))
            .args([
                "--log-format",
                format,
                "run",
                "--cloud-url",
                "http://127.0.0.1:9",
            ])
            .args([
                "--metrics-listen",
                "127.0.0.1:0",
                "--health-listen",
                "127.0.0.1:0",
            ])
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("NO_COLOR")
            .output()
            .await
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(!stderr.contains('\x1b'), "colour codes: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        let message = if format == "json" {
            for line in stderr.lines() {
                serde_json::from_str::<serde_json::Value>(line)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            }
            let fatal: serde_json::Value = serde_json::from_str(last).unwrap();
            assert_eq!(fatal["level"], "ERROR", "{last}");
            fatal["message"].as_str().unwrap().to_string()
        } else {
            last.strip_prefix("Error: ").expect(last).to_string()
        };
        assert!(message.contains("/nonexistent/kubeconfig"), "{message}");
        // Each cause once.
        assert_eq!(
            message.matches("Failed to infer configuration").count(),
            1,
            "{message}"
        );
    }
}

/// The address `run` printed for `/metrics` (`serving metrics and probes`, JSON log).
async fn metrics_address(world: &World, pod: &str) -> std::net::SocketAddr {
    eventually(30, "the metrics address is logged", || async {
        let output = world.output.lock().unwrap().clone();
        output
            .iter()
            .filter(|line| line.starts_with(&format!("{pod}: ")))
            .filter(|line| line.contains("serving metrics and probes"))
            .find_map(|line| {
                let start = line.find("\"metrics\":\"")? + "\"metrics\":\"".len();
                let end = start + line[start..].find('"')?;
                line[start..end].parse().ok()
            })
    })
    .await
}

/// The first scrapes of a fresh operator, before it has done anything: OpenMetrics for
/// Prometheus' Accept header, the 0.0.4 text format without one; each read by its strict
/// parser, and each holding every family docs/operations.md documents, the counters of every
/// cloud operation already at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_operator_serves_every_documented_family_in_the_format_asked_for() {
    let world = World::start(
        "metrics-first-scrape",
        SimulatorConfig::default(),
        &[NAMESPACE],
    )
    .await;
    let _operator = world.operator("operator-m", SETTINGS);
    let address = metrics_address(&world, "operator-m").await;

    let (openmetrics_type, openmetrics) =
        scrape::scrape(address, Some(scrape::PROMETHEUS_ACCEPT)).await;
    let (text_type, text) = scrape::scrape(address, None).await;
    assert_eq!(openmetrics_type, scrape::OPENMETRICS_TYPE);
    assert!(openmetrics.ends_with("# EOF\n"));
    assert_eq!(text_type, scrape::TEXT_TYPE);
    assert!(!text.contains("# EOF"));
    let (plain_type, _) = scrape::scrape(address, Some("text/plain;version=0.0.4")).await;
    assert_eq!(plain_type, scrape::TEXT_TYPE);

    let documented = scrape::documented_families();
    for (format, body, content_type) in [
        ("OpenMetrics", &openmetrics, &openmetrics_type),
        ("0.0.4", &text, &text_type),
    ] {
        let families = scrape::parse(content_type, body);
        let missing: Vec<&String> = documented
            .iter()
            .filter(|name| !families.contains_key(name.as_str()))
            .collect();
        assert!(missing.is_empty(), "{format}: not served: {missing:?}");
        // Counters keep their type in both formats (a 0.0.4 parser reads a counter named
        // without `_total` in its TYPE line as untyped samples).
        for counter in [
            "gpucloud_cloud_throttled",
            "gpucloud_cloud_retries",
            "gpucloud_cloud_rate_limit_waits",
            "controller_runtime_reconcile",
            "rest_client_requests",
        ] {
            let family = &families[counter];
            assert_eq!(family.type_, "counter", "{format}: {counter}");
        }
        let throttled = &families["gpucloud_cloud_throttled"];
        assert_eq!(
            throttled.samples,
            ["gpucloud_cloud_throttled_total"],
            "{format}"
        );
        assert_eq!(throttled.labels, ["operation"], "{format}");
        assert!(
            body.contains("\ngpucloud_cloud_throttled_total{operation=\"CreateInstance\"} 0\n"),
            "{format}: the throttling counter is not served from 0"
        );
    }
}
