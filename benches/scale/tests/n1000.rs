#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The benchmark at N = 1,000 with the rate limit raised: the harness runs every step to the
//! end and writes a consistent result file and a plot. Targets are not asserted here (the
//! debug build on a shared machine is not what they are set for), only correctness.

use gpucloud_bench::report::BenchResult;
use std::process::Stdio;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_objects_run_through_every_step_and_write_the_result() {
    let out = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_scale-bench"));
    command
        .args([
            "--objects",
            "1000",
            "--rate-limit",
            "1000",
            "--quiet-wait",
            "2s",
            "--settled-window",
            "5s",
            "--new-objects",
            "20",
            "--phase-timeout",
            // Generous: a loaded machine (the debug build sharing two cores with other work)
            // converges 1,000 objects in 100-200 s; this test is about correctness only.
            "300s",
            "--out",
        ])
        .arg(out.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().unwrap();
    let output = tokio::time::timeout(Duration::from_secs(900), child.wait_with_output())
        .await
        .expect("scale-bench did not finish within 900 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scale-bench failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    // Every target is printed with its verdict.
    for target in [
        "convergence",
        "settled traffic",
        "memory idle",
        "memory per object",
        "first reconcile",
        "restart",
        "429 absorbed",
        "deletion",
        "API writes",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(target) && (l.contains("PASS") || l.contains("FAIL"))),
            "no verdict for {target}:\n{stdout}"
        );
    }

    let json = std::fs::read(out.path().join("result.json")).unwrap();
    let result: BenchResult = serde_json::from_slice(&json).unwrap();
    assert_eq!(result.settings.objects, 1000);
    assert_eq!(result.targets.len(), 10, "{:?}", result.targets);
    // Every object was created once in the cloud and deleted once.
    assert_eq!(
        result.convergence.calls_by_operation.get("CreateInstance"),
        Some(&1000)
    );
    assert_eq!(
        result.deletion.calls_by_operation.get("DeleteInstance"),
        Some(&1020)
    );
    assert!(result.convergence.seconds > 0.0 && result.convergence.lower_bound_s > 0.0);
    assert_eq!(result.first_reconcile.count, 20);
    assert!(result.first_reconcile.p99_ms >= result.first_reconcile.p50_ms);
    // Each restart re-adopts all 1,020 settled objects from the lists, without reconciling
    // any, and writes nothing to the cloud.
    assert_eq!(result.restart.runs.len(), 3, "{:?}", result.restart);
    for run in &result.restart.runs {
        assert_eq!(
            (
                run.objects_readopted,
                run.objects_reconciled,
                run.cloud_writes
            ),
            (1020, 0, 0),
            "{run:?}"
        );
        assert!(run.lower_bound_s > 0.0 && run.seconds > 0.0, "{run:?}");
        // The bound's list comes from a new `scale-bench --list-only` process.
        assert!(
            run.kube_list_s > 0.0 && run.lower_bound_s > run.kube_list_s,
            "{run:?}"
        );
        assert!(run.kube_list_in_bench_s > 0.0, "{run:?}");
    }
    assert!(result.restart.runs.contains(&result.restart.median));
    assert_eq!(result.restart.cloud_writes, 0, "{:?}", result.restart);
    // Settled objects cost no per-object calls; the limiter kept below the simulator's limit.
    assert_eq!(result.settled.per_object_calls, 0, "{:?}", result.settled);
    assert_eq!(result.settled.per_object_polling_calls, 85);
    assert_eq!(result.throttled, 0);
    assert!(result.memory.operator_idle.rss_bytes > 0);
    assert!(result.timeline.iter().any(|(_, ready)| *ready == 1020));

    // The operator's writes to the API server are counted apart from the bench's: the bench
    // creates and deletes the GpuInstances, the operator never does.
    let writes = &result.api_writes;
    assert_eq!(writes.objects, 1020);
    assert!(writes.create_to_ready.per_object > 0.0, "{writes:?}");
    assert!(
        writes.delete.by_request.contains_key("patch gpuinstances"),
        "{writes:?}"
    );
    for phase in [&writes.create_to_ready, &writes.delete] {
        assert!(
            !phase.by_request.contains_key("create gpuinstances")
                && !phase.by_request.contains_key("delete gpuinstances"),
            "{writes:?}"
        );
    }

    let png = std::fs::read(out.path().join("ready.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
}
