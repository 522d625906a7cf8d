#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The benchmark at N = 1,000 with the rate limit raised: the harness runs every step to the
//! end and writes a consistent result file and a plot; the pool scenario at N = 100; and the
//! multi-tenant scenario at N = 1,000 in 10 namespaces sharing 2 accounts.
//! Targets are not asserted here (the debug build on a shared machine is not what they are
//! set for), only correctness.

use gpucloud_bench::args::Scenario;
use gpucloud_bench::report::tenants::{STORM_TARGET, TenantsResult};
use gpucloud_bench::report::{BenchResult, PoolResult};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

/// Runs `scale-bench args` to the end, checks that it printed a verdict for each of `targets`
/// and drew its plot, and returns its `result.json`.
async fn scale_bench(args: &[&str], targets: &[&str]) -> Vec<u8> {
    let out = tempfile::tempdir().unwrap();
    let stdout = run(args, out.path()).await;
    for target in targets {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(target) && (l.contains("PASS") || l.contains("FAIL"))),
            "no verdict for {target}:\n{stdout}"
        );
    }
    let png = std::fs::read(out.path().join("ready.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    std::fs::read(out.path().join("result.json")).unwrap()
}

/// Runs `scale-bench args --out out` to the end; panics with its output if it failed.
async fn run(args: &[&str], out: &Path) -> String {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_scale-bench"));
    command
        .args(args)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().unwrap();
    let output: Output = tokio::time::timeout(Duration::from_secs(900), child.wait_with_output())
        .await
        .expect("scale-bench did not finish within 900 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scale-bench failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_objects_run_through_every_step_and_write_the_result() {
    let json = scale_bench(
        &[
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
        ],
        &[
            "convergence",
            "settled traffic",
            "memory idle",
            "memory per object",
            "first reconcile",
            "restart",
            "429 absorbed",
            "deletion",
            "API writes",
        ],
    )
    .await;

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
}

/// One pool scaled 0 -> 100 -> 0: exactly 100 machines, each created and deleted once in the
/// cloud, the GpuInstances created and deleted by the operator (the pool), never by the bench.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_scaled_to_a_hundred_and_back_writes_the_result() {
    let json = scale_bench(
        &[
            "--scenario",
            "pool",
            "--objects",
            "100",
            "--rate-limit",
            "1000",
            "--phase-timeout",
            "300s",
        ],
        &[
            "pool scale-up",
            "pool scale-down",
            "pool machines",
            "429 absorbed",
        ],
    )
    .await;
    let result: PoolResult = serde_json::from_slice(&json).unwrap();
    assert_eq!(
        (result.settings.scenario, result.settings.objects),
        (Scenario::Pool, 100)
    );
    assert_eq!(result.targets.len(), 4, "{:?}", result.targets);
    assert!(result.machines.exactly(100), "{:?}", result.machines);
    assert!(result.machines.samples > 0, "{:?}", result.machines);
    assert_eq!(
        result.scale_up.calls_by_operation.get("CreateInstance"),
        Some(&100)
    );
    assert_eq!(
        result.scale_down.calls_by_operation.get("DeleteInstance"),
        Some(&100)
    );
    assert_eq!(result.scale_up.minimum_calls, 103);
    assert!(result.scale_up.seconds > 0.0 && result.scale_down.seconds > 0.0);
    let writes = &result.api_writes;
    assert_eq!(
        writes.scale_up.by_request.get("create gpuinstances"),
        Some(&100),
        "{writes:?}"
    );
    assert_eq!(
        writes.scale_down.by_request.get("delete gpuinstances"),
        Some(&100),
        "{writes:?}"
    );
    assert!(result.timeline.iter().any(|(_, ready)| *ready == 100));
    assert_eq!(result.marks.len(), 3);
}

/// 1,000 objects of every kind in 10 namespaces, 5 per account: every resource is made and
/// deleted once in its namespace's account and in no other, each account is listed and judged
/// on its own, a restart re-adopts every object of every kind, a storm in one account is
/// measured against a round without it, and the plot has a line per account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_objects_of_every_kind_in_ten_namespaces_and_two_accounts() {
    let json = scale_bench(
        &[
            "--scenario",
            "tenants",
            "--objects",
            "1000",
            "--namespaces",
            "10",
            "--accounts",
            "2",
            "--rate-limit",
            "1000",
            "--quiet-wait",
            "2s",
            "--settled-window",
            "5s",
            "--restarts",
            "1",
            // A short storm of few machines: the phase's mechanics, not its target. The storm
            // account's machines still take the operator's settle window (30 s) to be created
            // again after a failed create.
            "--storm-objects",
            "20",
            "--storm-seconds",
            "2",
            "--phase-timeout",
            "300s",
        ],
        &[
            "convergence (slowest account)",
            "settled traffic",
            "memory idle",
            "memory per object",
            "restart",
            "fairness: another account",
            "fairness: the same account",
            STORM_TARGET,
            "deletion (slowest account)",
        ],
    )
    .await;
    let result: TenantsResult = serde_json::from_slice(&json).unwrap();
    assert_eq!(result.settings.scenario, Scenario::Tenants);
    assert_eq!((result.namespaces, result.accounts), (10, 2));
    let mix = result.mix;
    assert_eq!(
        (mix.instances, mix.volumes, mix.snapshots, result.objects),
        (61, 30, 6, 990)
    );
    assert_eq!(result.targets.len(), 9, "{:?}", result.targets);
    // The burst (N / 2 machines in the first namespace) and 20 new machines in each quiet
    // namespace, each timed from the simulator's ledger.
    let burst = result.burst.as_ref().unwrap();
    assert_eq!(
        (burst.namespace.as_str(), burst.objects),
        ("tenant-000", 500)
    );
    for probes in [&burst.other_account, &burst.same_account] {
        let probes = probes.as_ref().unwrap();
        assert_eq!(probes.count, 20, "{burst:?}");
        assert!(
            probes.p50_ms > 0.0 && probes.p99_ms >= probes.p50_ms,
            "{burst:?}"
        );
    }
    // The storm phase (20 machines, 2 per namespace, twice): both rounds timed in both
    // accounts; every machine created once in its account in each round and deleted; the
    // storm account alone answered 429 and 500, and its machines were Ready after the storm.
    let storm = result.storm.as_ref().unwrap();
    assert_eq!((storm.machines, storm.storm_account), (20, 0), "{storm:?}");
    for round in [&storm.reference, &storm.storm] {
        assert_eq!(round.len(), 2, "{storm:?}");
        for account in round {
            assert_eq!((account.machines, account.created), (10, 10), "{storm:?}");
            assert!(account.deleted >= 10, "{storm:?}");
            assert!(account.seconds.is_some_and(|s| s > 0.0), "{storm:?}");
        }
    }
    for account in storm.reference.iter().chain(&storm.storm[1..]) {
        assert_eq!(
            (account.throttled, account.server_errors),
            (0, 0),
            "{storm:?}"
        );
    }
    let stormed = &storm.storm[0];
    assert!(
        stormed.throttled > 0 && stormed.server_errors > 0,
        "{storm:?}"
    );
    assert!(storm.recovered_after_s.is_some(), "{storm:?}");
    assert!(storm.ratio().is_some(), "{storm:?}");
    // Five namespaces per account: each account made exactly its own resources, each once,
    // and deleted every one of them (a delete may be retried, a create never).
    let per_account = [
        ("Instance", 5 * 61),
        ("Volume", 5 * 30),
        ("Snapshot", 5 * 6),
        ("SshKey", 5),
        ("Firewall", 5),
    ];
    for (phases, verb) in [
        (&result.convergence, "Create"),
        (&result.deletion, "Delete"),
    ] {
        assert_eq!(phases.accounts.len(), 2);
        for (account, phase) in phases.accounts.iter().enumerate() {
            for (resource, count) in per_account {
                let operation = format!("{verb}{resource}");
                let calls = phase.calls_by_operation.get(&operation).copied();
                let expected = if verb == "Create" {
                    calls == Some(count)
                } else {
                    calls.is_some_and(|calls| calls >= count)
                };
                assert!(expected, "account {account}, {operation}: {phase:?}");
            }
            assert!(
                phase.seconds > 0.0 && phase.lower_bound_s > 0.0,
                "{phase:?}"
            );
        }
        assert!(phases.seconds >= phases.accounts[0].seconds);
    }
    // Each account's settled window was counted apart and cost no per-object call.
    assert_eq!(result.settled.len(), 2);
    for settled in &result.settled {
        assert_eq!(settled.objects, 495, "{settled:?}");
        assert_eq!(settled.per_object_calls, 0, "{settled:?}");
        assert!(settled.max_lists_per_kind > 0, "{settled:?}");
    }
    // The restart re-adopted every object of every kind in every namespace from the lists,
    // reconciling none and writing nothing to the cloud; its bound is a new process's list of
    // every kind plus the slowest account's cloud lists.
    assert_eq!(result.restart.runs.len(), 1, "{:?}", result.restart);
    let run = &result.restart.median;
    assert_eq!(
        run.readopted_by_kind,
        std::collections::BTreeMap::from(
            [
                ("GpuInstance", 610),
                ("Volume", 300),
                ("Snapshot", 60),
                ("SshKey", 10),
                ("Firewall", 10),
            ]
            .map(|(kind, n)| (kind.to_string(), n))
        ),
        "{run:?}"
    );
    assert_eq!(
        (
            run.objects_readopted,
            run.objects_reconciled,
            run.cloud_writes
        ),
        (990, 0, 0),
        "{run:?}"
    );
    assert_eq!(result.restart.cloud_writes, 0, "{:?}", result.restart);
    assert!(run.seconds > 0.0, "{run:?}");
    assert!(
        run.kube_list_s > 0.0 && run.lower_bound_s > run.kube_list_s,
        "{run:?}"
    );
    assert!(
        run.kube_list_in_bench_s > 0.0 && run.kube_plain_list_s > 0.0,
        "{run:?}"
    );
    assert!(
        result.memory.operator_restarted.peak_rss_bytes > 0,
        "{:?}",
        result.memory
    );
    assert_eq!(result.marks.len(), 3);
    assert_eq!(result.timelines.len(), 2);
    for timeline in result.timelines.values() {
        assert!(timeline.iter().any(|(_, ready)| *ready == 495));
    }
    assert_eq!(result.api_server.list_seconds_by_kind["GpuInstance"].0, 610);
    assert!(result.memory.operator_idle.rss_bytes > 0);
}
