#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Placement with alternatives: the machine goes where the catalog shows GPUs in stock, by the
//! placement's policy; a refusal of the cloud for want of stock moves on to the next
//! alternative; with none in stock the object waits, woken by the account's catalog, not by
//! polling of its own; and whatever happens between alternatives, one machine.

use crate::support;

use gpucloud_api::*;
use gpucloud_simulator::{DropMode, FaultPlan, SimulatorConfig};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::{Env, condition, eventually, ready, test_config};

const ADMIN_TOKEN: &str = "placement-admin-token";

/// A GpuInstance placed by `placement`.
fn placed(name: &str, placement: serde_json::Value) -> GpuInstance {
    support::object(
        name,
        serde_json::json!({"osImage": "ubuntu-22.04-cuda-12", "placement": placement}),
    )
}

/// H100 in us-east-1, else H100 in eu-west-1, else A100 in eu-west-1.
fn three_alternatives(policy: &str) -> serde_json::Value {
    serde_json::json!({
        "policy": policy,
        "alternatives": [
            {"gpuTypes": ["H100-80G"], "regions": ["us-east-1"]},
            {"gpuTypes": ["H100-80G"], "regions": ["eu-west-1"]},
            {"gpuTypes": ["A100-80G"], "regions": ["eu-west-1"]},
        ],
    })
}

/// The account's machines as (name, GPU type, region).
fn machines(env: &Env) -> Vec<(String, String, String)> {
    env.simulator
        .state()
        .instances
        .iter()
        .map(|i| {
            (
                i.vm_name.clone(),
                i.specs.gpu_type.clone(),
                i.region.clone(),
            )
        })
        .collect()
}

fn chosen(vm: &GpuInstance) -> ChosenPlacement {
    vm.status
        .as_ref()
        .and_then(|s| s.placement.as_ref())
        .and_then(|p| p.chosen.clone())
        .expect("a chosen placement")
}

fn skipped(vm: &GpuInstance) -> Vec<(String, String, String)> {
    vm.status
        .as_ref()
        .and_then(|s| s.placement.as_ref())
        .map(|p| {
            p.skipped
                .iter()
                .map(|s| (s.gpu_type.clone(), s.region.clone(), s.reason.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn skip(gpu_type: &str, region: &str, reason: &str) -> (String, String, String) {
    (gpu_type.into(), region.into(), reason.into())
}

/// Sets the stock through the simulator's admin API, as a person would.
/// No GPU of the alternatives' types in stock in any region.
async fn sell_out(env: &Env) {
    for region in ["us-east-1", "eu-west-1"] {
        for gpu in ["H100-80G", "A100-80G"] {
            set_stock(env, gpu, region, 0).await;
        }
    }
}

async fn set_stock(env: &Env, gpu_type: &str, region: &str, available: u32) {
    let answer = reqwest::Client::new()
        .put(format!("{}/_admin/stock", env.simulator.base_url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"gpu_type": gpu_type, "region": region, "available": available}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
}

fn with_admin() -> SimulatorConfig {
    SimulatorConfig {
        admin_token: Some(ADMIN_TOKEN.into()),
        ..SimulatorConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_alternative_out_of_stock_the_second_is_chosen_and_the_status_says_why() {
    let mut env = Env::without_operator(with_admin()).await;
    set_stock(&env, "H100-80G", "us-east-1", 0).await;
    env.start_operator(test_config(&env.simulator));
    support::create(&env, &placed("vm", three_alternatives("Ordered"))).await;
    let vm: GpuInstance = ready(&env, "vm").await;

    let name = vm.cloud_status().cloud_name.clone().unwrap();
    assert_eq!(
        machines(&env),
        [(name, "H100-80G".into(), "eu-west-1".into())]
    );
    assert_eq!(env.calls("CreateInstance"), 1);
    let chosen = chosen(&vm);
    assert_eq!(
        (
            chosen.alternative,
            chosen.gpu_type.as_str(),
            chosen.region.as_str()
        ),
        (1, "H100-80G", "eu-west-1")
    );
    assert_eq!(chosen.hourly_rate, Some(2.99));
    assert_eq!(chosen.currency.as_deref(), Some("USD"));
    assert_eq!(skipped(&vm), [skip("H100-80G", "us-east-1", "OutOfStock")]);
    assert_eq!(vm.region(), Some("eu-west-1"));
}

/// A GPU count the catalog does not offer for the type (L40S comes with 1, 2, 4 or 8) is refused
/// before any create, naming the field and the counts offered, with or without alternatives;
/// an alternative with such a count refuses the spec, as one with an unknown GPU type does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_count_the_catalog_does_not_offer_is_refused_before_any_create() {
    let env = Env::start().await;
    let plain: GpuInstance = support::object(
        "three",
        serde_json::json!({"region": "us-east-1", "gpuType": "L40S", "gpuCount": 3,
                           "osImage": "ubuntu-22.04-cuda-12"}),
    );
    support::create(&env, &plain).await;
    let alternatives = serde_json::json!({
        "alternatives": [
            {"gpuTypes": ["L40S"], "gpuCount": 3, "regions": ["us-east-1"]},
            {"gpuTypes": ["L40S"], "gpuCount": 2, "regions": ["us-east-1"]},
        ],
    });
    support::create(&env, &placed("three-placed", alternatives)).await;
    for (name, field) in [
        ("three", "spec.gpuCount"),
        ("three-placed", "spec.placement.alternatives[0].gpuCount"),
    ] {
        let stalled: GpuInstance = condition(&env, name, "Stalled", "True", "InvalidSpec").await;
        let message = support::ready_message(&stalled);
        assert!(
            message.contains(&format!(
                "{field}: L40S is offered with 1, 2, 4, 8 GPUs, not 3"
            )),
            "{name}: {message}"
        );
    }
    assert_eq!(env.calls("CreateInstance"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cheapest_picks_the_lowest_price_in_stock() {
    let mut env = Env::without_operator(with_admin()).await;
    // H100 made the cheapest of the three, then taken out of stock in us-east-1: of the two
    // left in stock, H100 in eu-west-1 (0.50) is cheaper than A100 (1.89).
    env.simulator.set_gpu_price("H100-80G", 0.5).unwrap();
    set_stock(&env, "H100-80G", "us-east-1", 0).await;
    env.start_operator(test_config(&env.simulator));
    support::create(&env, &placed("vm", three_alternatives("Cheapest"))).await;
    let vm: GpuInstance = ready(&env, "vm").await;
    let chosen = chosen(&vm);
    assert_eq!(
        (chosen.gpu_type.as_str(), chosen.region.as_str()),
        ("H100-80G", "eu-west-1")
    );
    assert_eq!(chosen.hourly_rate, Some(0.5));
    assert_eq!(vm.status.as_ref().unwrap().hourly_rate, Some(0.5));
    assert_eq!(
        skipped(&vm),
        [
            skip("H100-80G", "us-east-1", "OutOfStock"),
            skip("A100-80G", "eu-west-1", "Pricier"),
        ]
    );
    assert_eq!(env.calls("CreateInstance"), 1);
}

/// Cloud calls that name one object (a read, a create, an action): what waiting for stock must
/// not make.
fn per_object_calls(counts: &BTreeMap<String, u64>) -> u64 {
    const ACCOUNT_WIDE: &[&str] = &[
        "ListInstances",
        "ListVolumes",
        "ListSnapshots",
        "ListImages",
        "ListFirewalls",
        "ListSshKeys",
        "GetGpuStock",
        "GetGpuSpecs",
        "ListRegions",
        "ListOsImages",
        "GetPricing",
        "GetBalance",
        "GetInstanceBilling",
        "GetSnapshotBilling",
        "GetVolumeBilling",
    ];
    counts
        .iter()
        .filter(|(op, _)| !ACCOUNT_WIDE.contains(&op.as_str()))
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_in_stock_waits_then_stock_set_through_the_admin_api_is_used_within_one_catalog_refresh()
 {
    const N: usize = 20;
    let mut env = Env::without_operator(with_admin()).await;
    sell_out(&env).await;
    let config = test_config(&env.simulator);
    let ttl = config.cloud.catalog_ttl;
    env.start_operator(config);
    for i in 0..N {
        support::create(
            &env,
            &placed(&format!("vm-{i}"), three_alternatives("Ordered")),
        )
        .await;
    }
    for i in 0..N {
        let vm: GpuInstance =
            condition(&env, &format!("vm-{i}"), "Ready", "False", "NoCapacity").await;
        if i == 0 {
            assert_eq!(
                support::ready_message(&vm),
                "no placement has GPUs in stock: H100-80G x1 in us-east-1: out of stock (0 free); \
                 H100-80G x1 in eu-west-1: out of stock (0 free); \
                 A100-80G x1 in eu-west-1: out of stock (0 free); \
                 looked at again when the account's catalog shows stock, or in 2 s at the latest"
            );
        }
    }

    // Waiting costs the account's catalog reads, not calls per object.
    let before = env.simulator.call_counts();
    let waited = Duration::from_secs(12);
    tokio::time::sleep(waited).await;
    let after = env.simulator.call_counts();
    let delta = |op: &str| after.get(op).unwrap_or(&0) - before.get(op).unwrap_or(&0);
    assert_eq!(
        per_object_calls(&after),
        per_object_calls(&before),
        "per-object calls while waiting: {before:?} -> {after:?}"
    );
    let refreshes = waited.as_secs() / ttl.as_secs() + 1;
    assert!(
        (1..=refreshes).contains(&delta("GetGpuStock")),
        "{} stock reads in {waited:?} for {N} waiting objects (TTL {ttl:?})",
        delta("GetGpuStock")
    );
    assert!(machines(&env).is_empty());

    // Stock for all of them, through the admin API: each is created within one refresh.
    set_stock(&env, "A100-80G", "eu-west-1", 64).await;
    let started = Instant::now();
    for i in 0..N {
        let vm: GpuInstance = ready(&env, &format!("vm-{i}")).await;
        assert_eq!(chosen(&vm).gpu_type, "A100-80G");
    }
    assert!(
        started.elapsed() < ttl * 2 + Duration::from_secs(5),
        "created {:?} after the stock came",
        started.elapsed()
    );
    assert_eq!(env.calls("CreateInstance"), N as u64);
    assert_eq!(machines(&env).len(), N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_for_stock_after_the_catalog_said_yes_moves_to_the_next_alternative() {
    let mut env = Env::without_operator(with_admin()).await;
    let mut config = test_config(&env.simulator);
    // The catalog is read once and trusted for the whole test.
    config.cloud.catalog_ttl = Duration::from_secs(600);
    env.start_operator(config);
    support::create(&env, &placed("first", three_alternatives("Ordered"))).await;
    let first: GpuInstance = ready(&env, "first").await;
    assert_eq!(chosen(&first).region, "us-east-1");
    let reads = env.calls("GetGpuStock");

    // Gone from the cloud, still in the catalog the operator read.
    set_stock(&env, "H100-80G", "us-east-1", 0).await;
    support::create(&env, &placed("second", three_alternatives("Ordered"))).await;
    let second: GpuInstance = ready(&env, "second").await;
    let chosen = chosen(&second);
    assert_eq!(
        (chosen.alternative, chosen.region.as_str()),
        (1, "eu-west-1")
    );
    let refused = skipped(&second);
    assert_eq!(refused, [skip("H100-80G", "us-east-1", "RefusedByCloud")]);
    assert_eq!(
        env.calls("GetGpuStock"),
        reads,
        "the catalog was read again"
    );
    let counters = env.simulator.counters();
    assert_eq!(counters.operations["CreateInstance"].get(&409), Some(&1));
    assert_eq!(env.calls("CreateInstance"), 3);
    let names: Vec<String> = machines(&env).into_iter().map(|m| m.0).collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&second.cloud_status().cloud_name.clone().unwrap()));
    let events = support::events_about(&env, "second", "NoCapacity").await;
    assert_eq!(events.len(), 1, "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_create_response_and_a_restart_between_alternatives_end_with_one_machine() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("gpucloud_controller=debug")
        .with_test_writer()
        .try_init();
    let mut env = Env::without_operator(with_admin()).await;
    let mut config = test_config(&env.simulator);
    config.cloud.catalog_ttl = Duration::from_secs(600);
    config.cloud.timeout = Duration::from_millis(700);
    env.start_operator(config.clone());
    // The catalog read (and kept) while H100 is in stock in us-east-1.
    support::create(&env, &placed("first", three_alternatives("Ordered"))).await;
    ready::<GpuInstance>(&env, "first").await;

    // The first alternative is refused by the cloud; the second's create acts, and its answer
    // is lost.
    set_stock(&env, "H100-80G", "us-east-1", 0).await;
    env.simulator.set_faults(FaultPlan {
        act_then_drop: BTreeMap::from([("CreateInstance".to_string(), 1.0)]),
        drop_mode: DropMode::Delay {
            delay: Duration::from_secs(30),
        },
        ..FaultPlan::default()
    });
    support::create(&env, &placed("vm", three_alternatives("Ordered"))).await;
    eventually(30, "vm's create to act", || {
        let env = &env;
        async move { (machines(env).len() == 2).then_some(()) }
    })
    .await;
    let vm: GpuInstance = env.api::<GpuInstance>().get("vm").await.unwrap();
    // Killed between the call and any list showing the machine; the stock of every
    // alternative then changes, so a new plan would go elsewhere.
    env.kill_operator().await;
    env.simulator.set_faults(FaultPlan::default());
    set_stock(&env, "H100-80G", "us-east-1", 8).await;
    set_stock(&env, "H100-80G", "eu-west-1", 0).await;
    env.start_operator(config);

    let before_restart = vm.cloud_status().cloud_name.clone();
    let vm: GpuInstance = support::ready_within(&env, "vm", 60).await;
    assert_eq!(vm.cloud_status().cloud_name, before_restart);
    let name = vm.cloud_status().cloud_name.clone().unwrap();
    let all = machines(&env);
    assert_eq!(all.len(), 2, "first's and vm's alone: {all:?}");
    assert!(
        all.contains(&(name, "H100-80G".into(), "eu-west-1".into())),
        "{all:?}"
    );
    let chosen = chosen(&vm);
    assert_eq!(
        (chosen.gpu_type.as_str(), chosen.region.as_str()),
        ("H100-80G", "eu-west-1")
    );
    assert_eq!(
        env.calls("CreateInstance"),
        3,
        "{:?}",
        env.simulator.counters().operations["CreateInstance"]
    );
}

/// The task that reads the catalog for objects waiting for stock ends with the operator:
/// stopped, or killed as a crash would, it reads the cloud no more (a process that runs the
/// controllers again, as a new leader does, would otherwise keep one reader per stint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_catalog_is_read_for_waiting_objects_once_the_operator_is_gone() {
    let mut env = Env::without_operator(with_admin()).await;
    sell_out(&env).await;
    let config = test_config(&env.simulator);
    let ttl = config.cloud.catalog_ttl;
    for stop in ["stopped", "killed"] {
        env.start_operator(config.clone());
        let name = format!("waiting-{stop}");
        support::create(&env, &placed(&name, three_alternatives("Ordered"))).await;
        let _: GpuInstance = condition(&env, &name, "Ready", "False", "NoCapacity").await;
        if stop == "stopped" {
            env.stop_operator().await;
        } else {
            env.kill_operator().await;
        }
        let before = env.calls("GetGpuStock");
        tokio::time::sleep(ttl * 2).await;
        assert_eq!(
            env.calls("GetGpuStock"),
            before,
            "stock read after the operator was {stop}"
        );
    }
}

/// A restore inherits its snapshot's GPUs and has no alternative: with none of them free it
/// waits as `NoCapacity`, woken by the catalog, with no restore call the cloud would refuse
/// again, no create left pending, and is made once stock returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_without_its_gpus_in_stock_waits_for_the_catalog_then_is_made_once() {
    let mut env = Env::without_operator(with_admin()).await;
    set_stock(&env, "H100-80G", "us-east-1", 1).await;
    let config = test_config(&env.simulator);
    let ttl = config.cloud.catalog_ttl;
    env.start_operator(config);
    support::create(
        &env,
        &support::object::<GpuInstance>(
            "trainer",
            serde_json::json!({"region": "us-east-1", "gpuType": "H100-80G",
                "osImage": "ubuntu-22.04-cuda-12"}),
        ),
    )
    .await;
    let _: GpuInstance = ready(&env, "trainer").await;
    support::create(
        &env,
        &support::object::<Snapshot>(
            "saved",
            serde_json::json!({"instanceRef": {"name": "trainer"}}),
        ),
    )
    .await;
    let _: Snapshot = ready(&env, "saved").await;

    // The trainer holds the one H100: the restore waits, whether the catalog it reads still
    // shows the H100 free (the cloud refuses) or already not.
    support::create(
        &env,
        &support::object::<GpuInstance>(
            "resumed",
            serde_json::json!({"region": "us-east-1", "source": {"snapshotRef": {"name": "saved"}}}),
        ),
    )
    .await;
    let _: GpuInstance = condition(&env, "resumed", "Ready", "False", "NoCapacity").await;
    let api = env.api::<GpuInstance>();
    let waiting = eventually(30, "the restore waits for the snapshot's GPUs", || async {
        let vm = api.get("resumed").await.ok()?;
        support::ready_message(&vm)
            .starts_with("no placement has GPUs in stock: H100-80G x1 in us-east-1")
            .then_some(vm)
    })
    .await;
    assert_eq!(waiting.cloud_status().pending_create, None);

    // Waiting for more than a catalog refresh calls no restore once the catalog shows none.
    tokio::time::sleep(ttl + Duration::from_secs(1)).await;
    let restores = env.calls("RestoreSnapshot");
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(
        env.calls("RestoreSnapshot"),
        restores,
        "restore calls while the catalog shows no H100 free"
    );
    assert!(restores <= 1, "{restores} restores refused");
    assert_eq!(machines(&env).len(), 1);

    set_stock(&env, "H100-80G", "us-east-1", 1).await;
    let resumed: GpuInstance = ready(&env, "resumed").await;
    let counters = env.simulator.counters();
    assert_eq!(
        counters.operations["RestoreSnapshot"].get(&200),
        Some(&1),
        "{:?}",
        counters.operations["RestoreSnapshot"]
    );
    let names: Vec<String> = machines(&env).into_iter().map(|m| m.0).collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&resumed.cloud_status().cloud_name.clone().unwrap()));
}
