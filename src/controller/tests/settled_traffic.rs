#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Once everything is settled, cloud traffic follows the number of kinds and accounts, not
//! of objects: a list per kind per resync interval, the billing lists per account, and no
//! per-object call.

use crate::support;

use gpucloud_api::*;
use kube::api::PostParams;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{Env, eventually, test_config};

/// Without a Budget, an account is read only the billing lists of the kinds its objects are:
/// machines alone never have the volume list read (paged, and holding every machine's system
/// disk, it grows with the fleet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_alone_read_only_the_instance_billing() {
    let env = Env::start().await;
    for i in 0..3 {
        let spec = serde_json::json!({"region": "us-east-1", "gpuType": "L40S", "osImage": "ubuntu-22.04-cuda-12"});
        support::create(
            &env,
            &GpuInstance::new(&format!("vm-{i}"), serde_json::from_value(spec).unwrap()),
        )
        .await;
    }
    for i in 0..3 {
        support::ready::<GpuInstance>(&env, &format!("vm-{i}")).await;
    }
    // Past the resync (2 s) and the catalog TTL (5 s) of the tests' settings.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(env.calls("GetInstanceBilling") >= 1);
    assert_eq!(env.calls("GetVolumeBilling"), 0);
    assert_eq!(env.calls("GetSnapshotBilling"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_objects_cost_only_periodic_lists() {
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let mut config = test_config(&env.simulator);
    config.reconcile.observe.resync = Duration::from_secs(1);
    config.reconcile.observe.hot_window = Duration::from_secs(1);
    env.start_operator(config);
    const N: usize = 24;
    // A Budget with a spend limit: its billing reads are per account, not per object.
    let budget: Budget = serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "Budget",
        "metadata": {"name": "team", "namespace": support::NAMESPACE},
        "spec": {"maxHourlyRate": 1000.0, "maxSpend": 100000.0, "period": {"type": "Monthly"}},
    }))
    .unwrap();
    kube::Api::<Budget>::namespaced(env.client.clone(), support::NAMESPACE)
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
    let api = env.api::<GpuInstance>();
    create_machines(&api, N).await;
    eventually(90, "all Ready", || async {
        let ready = api
            .list(&Default::default())
            .await
            .ok()?
            .items
            .iter()
            .filter(|o| o.cloud_status().is_ready(o.metadata.generation))
            .count();
        (ready == N).then_some(())
    })
    .await;
    // Let the fast lists of the transition wind down, then count a quiet window.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before: BTreeMap<String, u64> = env.simulator.call_counts();
    // Longer than the catalog TTL (5 s), so that a read on demand at its end falls inside.
    let window = Duration::from_secs(6);
    tokio::time::sleep(window).await;
    let after = env.simulator.call_counts();
    let made: BTreeMap<&str, u64> = after
        .iter()
        .map(|(op, n)| (op.as_str(), n - before.get(op).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let lists = made.get("ListInstances").copied().unwrap_or(0);
    assert!(
        (4..=8).contains(&lists),
        "about one instance list per second expected, got {made:?}"
    );
    // Besides lists, one balance read per account per resync interval (2 s here) for
    // `gpucloud_account_balance`: per account, not per object.
    let balance_reads = made.get("GetBalance").copied().unwrap_or(0);
    assert!(balance_reads <= 3, "balance read {balance_reads} times");
    // The billing (for `gpucloud_spend` and the Budget): the three billing lists of the
    // account, once per catalog TTL (5 s here), whatever the number of objects.
    let billing = [
        "GetInstanceBilling",
        "GetSnapshotBilling",
        "GetVolumeBilling",
    ];
    for operation in billing {
        let reads = made.get(operation).copied().unwrap_or(0);
        assert!(
            (1..=2).contains(&reads),
            "{operation} {reads} times: {made:?}"
        );
    }
    // The GPU catalog (for the GpuOfferings), once per catalog TTL.
    for operation in support::CATALOG_READS {
        let reads = made.get(operation).copied().unwrap_or(0);
        assert!(reads <= 2, "{operation} {reads} times: {made:?}");
    }
    assert!(
        made.keys().all(|op| op.starts_with("List")
            || *op == "GetBalance"
            || support::CATALOG_READS.contains(op)
            || billing.contains(op)),
        "settled objects made per-object or mutating calls: {made:?}"
    );
    assert_eq!(env.simulator.state().instances.len(), N);
    env.stop_operator().await;
}

/// Each kind is listed and watched once, however many controllers follow it (GpuInstances by
/// Volumes, Snapshots and Firewalls; SshKeys and Images by GpuInstances), and the Secrets by
/// two metadata watches for all six controllers: the credentials Secrets by their label, and
/// the operator's default Secret by its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_and_the_secrets_are_listed_and_watched_once() {
    let mut env = Env::start().await;
    const KINDS: [&str; 6] = [
        "gpuinstances",
        "volumes",
        "snapshots",
        "images",
        "firewalls",
        "sshkeys",
    ];
    let count = |verb: &str| -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for r in env.apiserver.requests() {
            if r.verb == verb && (KINDS.contains(&r.resource.as_str()) || r.resource == "secrets") {
                *counts.entry(r.resource).or_default() += 1;
            }
        }
        counts
    };
    eventually(30, "every watch open", || async {
        (count("watch").values().sum::<usize>() == KINDS.len() + 2).then_some(())
    })
    .await;
    // Time for a second watch of any of them to open too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut expected: BTreeMap<String, usize> = KINDS.iter().map(|r| (r.to_string(), 1)).collect();
    expected.insert("secrets".into(), 2);
    assert_eq!(count("list"), expected, "lists");
    assert_eq!(count("watch"), expected, "watches");
    // Both Secret watches are narrowed and read metadata only: by the credentials label, and
    // the default Secret by name. No watch reads every Secret's data.
    let secret_watches: Vec<(String, String, bool)> = env
        .apiserver
        .requests()
        .into_iter()
        .filter(|r| r.verb == "watch" && r.resource == "secrets")
        .map(|r| (r.label_selector, r.name, r.metadata_only))
        .collect();
    assert!(
        secret_watches
            .iter()
            .all(|(_, _, metadata_only)| *metadata_only),
        "{secret_watches:?}"
    );
    assert!(
        secret_watches
            .iter()
            .any(|(labels, name, _)| labels.contains("gpucloud.io/credentials") && name.is_empty()),
        "{secret_watches:?}"
    );
    assert!(
        secret_watches
            .iter()
            .any(|(labels, name, _)| labels.is_empty() && !name.is_empty()),
        "{secret_watches:?}"
    );
    env.stop_operator().await;
}

/// A settled object holds no requeue of its own: the sweep (`recheck.rs`) looks at every one
/// again about once per resync interval, and so finds what changed without waking it (its
/// status edited by someone else).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settled_sweep_looks_at_every_object_again_without_a_requeue_each() {
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let mut config = test_config(&env.simulator);
    config.reconcile.observe.resync = Duration::from_secs(1);
    config.reconcile.observe.hot_window = Duration::from_secs(1);
    let metrics = config.metrics.clone();
    env.start_operator(config);
    const N: usize = 6;
    let api = env.api::<GpuInstance>();
    create_machines(&api, N).await;
    for i in 0..N {
        support::ready::<GpuInstance>(&env, &format!("vm-{i}")).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reconciles = |result: &str| {
        let series = format!(
            r#"controller_runtime_reconcile_total{{controller="gpuinstance",result="{result}"}} "#
        );
        metrics
            .encode()
            .lines()
            .find_map(|line| line.strip_prefix(&series)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let (done, requeued) = (reconciles("success"), reconciles("requeue_after"));
    // Four rounds of the sweep.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let looked_at = reconciles("success") - done;
    assert!(
        looked_at >= (2 * N) as f64,
        "{looked_at} settled reconciles of {N} objects in 4 resync intervals"
    );
    assert_eq!(
        reconciles("requeue_after") - requeued,
        0.0,
        "a settled object asked for a requeue of its own"
    );

    // A status edit wakes no reconcile (`run::intent_hash`); the sweep finds it.
    let running = api.get("vm-0").await.unwrap().cloud_status().state.clone();
    api.patch_status(
        "vm-0",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"status": {"state": "EDITED"}})),
    )
    .await
    .unwrap();
    eventually(10, "the edited state put back", || async {
        let state = api.get("vm-0").await.ok()?.cloud_status().state.clone();
        (state == running).then_some(())
    })
    .await;
}

/// Creates the machines `vm-0` to `vm-{n-1}`.
async fn create_machines(api: &kube::Api<GpuInstance>, n: usize) {
    for i in 0..n {
        let spec = serde_json::json!({"region": "us-east-1", "gpuType": "L40S", "osImage": "ubuntu-22.04-cuda-12"});
        api.create(
            &PostParams::default(),
            &GpuInstance::new(&format!("vm-{i}"), serde_json::from_value(spec).unwrap()),
        )
        .await
        .unwrap();
    }
}

/// The operator's accounts as `env`'s operator would have them, and a reference to the
/// Secret `team-key`.
fn accounts_and_team_key(
    env: &Env,
) -> (
    gpucloud_controller::accounts::account::Accounts,
    SecretKeyRef,
) {
    let accounts = gpucloud_controller::accounts::account::Accounts::new(
        test_config(&env.simulator).cloud,
        env.client.clone(),
        None,
    );
    let reference = serde_json::from_value(serde_json::json!({"name": "team-key"})).unwrap();
    (accounts, reference)
}

/// Reconciles that need a Secret while no reuse of it is at hand wait for one read of it and
/// share its answer: twenty at once read the Secret from the API server once (its metadata,
/// then its data: two GETs), not twenty times (at 100,000 objects each reuse's end was a
/// burst of thousands of reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reconciles_read_a_secret_once() {
    let env = Env::without_operator(Default::default()).await;
    env.put_secret(support::NAMESPACE, "team-key", env.simulator.api_key())
        .await;
    let secret_reads = || {
        env.apiserver
            .request_counts()
            .iter()
            .filter(|c| c.verb == "get" && c.resource == "secrets")
            .map(|c| c.count)
            .sum::<u64>()
    };
    let before = secret_reads();
    let (accounts, reference) = accounts_and_team_key(&env);
    let resolved = futures::future::join_all(
        (0..20).map(|_| accounts.resolve(support::NAMESPACE, Some(&reference))),
    )
    .await;
    let ids: std::collections::HashSet<_> = resolved
        .into_iter()
        .map(|account| account.expect("the Secret resolves").id)
        .collect();
    assert_eq!(ids.len(), 1, "one account for one key");
    assert_eq!(
        secret_reads() - before,
        2,
        "the Secret was read once, metadata then data"
    );
}

/// The turns are per Secret: another team's Secret of the same name, read at the same moment,
/// gives that team its own account and never this one's, and a team whose Secret is missing
/// gets its error without holding anyone's read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_teams_secret_of_the_same_name_is_read_apart() {
    let env = Env::without_operator(Default::default()).await;
    for namespace in ["team-b", "team-c"] {
        support::create_namespace(&env.client, namespace, false)
            .await
            .unwrap();
    }
    env.put_secret(support::NAMESPACE, "team-key", "key-of-team-a")
        .await;
    env.put_secret("team-b", "team-key", "key-of-team-b").await;
    let (accounts, reference) = accounts_and_team_key(&env);
    let namespaces = [support::NAMESPACE, "team-b", "team-c"];
    let resolved = futures::future::join_all(
        (0..30).map(|i| accounts.resolve(namespaces[i % 3], Some(&reference))),
    )
    .await;
    let id_of = |key: &str| {
        accounts
            .account_for(gpucloud_cloud::ApiKey::new(key))
            .unwrap()
            .id
    };
    for (i, result) in resolved.into_iter().enumerate() {
        match namespaces[i % 3] {
            "team-c" => assert!(
                result
                    .as_ref()
                    .is_err_and(|e| e.to_string().contains("team-c/team-key")),
                "team-c has no such Secret: {:?}",
                result.map(|a| a.id)
            ),
            "team-b" => assert_eq!(result.unwrap().id, id_of("key-of-team-b")),
            _ => assert_eq!(result.unwrap().id, id_of("key-of-team-a")),
        }
    }
}
