//! Raw-HTTP tests of fault injection: error rates, latency, 429 bursts, act-then-drop, list
//! lag, and the same seed giving the same fault sequence.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{config, start};
use gpucloud_simulator::{DropMode, FaultPlan, SimulatorConfig, ThrottleBurst};
use reqwest::Method;
use serde_json::json;

fn volume(name: &str) -> serde_json::Value {
    json!({"name": name, "size": 10, "region": "us-east-1"})
}

#[tokio::test]
async fn error_rate_per_operation_answers_500_before_acting() {
    let sim = start(config()).await;
    sim.handle.set_faults(FaultPlan {
        error_rate_per_operation: BTreeMap::from([("CreateVolume".to_string(), 1.0)]),
        ..FaultPlan::default()
    });
    for i in 0..5 {
        sim.post("/volumes/", volume(&format!("v{i}")))
            .await
            .error(500, "INTERNAL_ERROR");
    }
    // Nothing was created, and other operations are untouched.
    assert!(sim.handle.state().volumes.is_empty());
    sim.get("/volumes/").await.ok();
    assert_eq!(sim.handle.counters().operations["CreateVolume"][&500], 5);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn same_seed_gives_the_same_fault_sequence() {
    let plan = FaultPlan {
        error_rate: 0.5,
        throttle_burst: Some(ThrottleBurst {
            probability: 0.1,
            length: 2,
            retry_after_secs: 1,
        }),
        ..FaultPlan::default()
    };
    async fn sequence(sim: &common::Sim) -> Vec<u16> {
        let mut statuses = Vec::new();
        for _ in 0..40 {
            statuses.push(sim.get("/regions/").await.status.as_u16());
        }
        statuses
    }
    let seeded = |seed: u64| SimulatorConfig {
        seed,
        faults: plan.clone(),
        ..config()
    };
    let first = start(seeded(42)).await;
    let run_a = sequence(&first).await;
    // Setting the plan again restarts every stream from the seed.
    first.handle.set_faults(plan.clone());
    let run_b = sequence(&first).await;
    assert_eq!(run_a, run_b);
    assert!(run_a.contains(&200) && run_a.contains(&500), "{run_a:?}");
    let twin = start(seeded(42)).await;
    assert_eq!(sequence(&twin).await, run_a);
    let other = start(seeded(43)).await;
    assert_ne!(sequence(&other).await, run_a);
    for sim in [first, twin, other] {
        sim.handle.shutdown().await;
    }
}

#[tokio::test]
async fn throttle_bursts_answer_429_with_retry_after() {
    let sim = start(config()).await;
    sim.handle.set_faults(FaultPlan {
        throttle_burst: Some(ThrottleBurst {
            probability: 1.0,
            length: 3,
            retry_after_secs: 7,
        }),
        ..FaultPlan::default()
    });
    let answer = sim.get("/balance/").await;
    answer.error(429, "RATE_LIMITED");
    assert_eq!(answer.headers["retry-after"], "7");
    sim.handle.set_faults(FaultPlan::default());
    sim.get("/balance/").await.ok();
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_plan_for_one_account_leaves_the_others_served() {
    let sim = start(SimulatorConfig {
        other_accounts: vec![vec!["second".into()]],
        ..config()
    })
    .await;
    let second = |r: reqwest::RequestBuilder| r.header("X-API-Key", "second");
    sim.handle.set_faults(FaultPlan {
        throttle_burst: Some(ThrottleBurst {
            probability: 1.0,
            length: 3,
            retry_after_secs: 4,
        }),
        error_rate_per_operation: BTreeMap::from([("CreateVolume".to_string(), 1.0)]),
        accounts: vec![1],
        ..FaultPlan::default()
    });
    for _ in 0..4 {
        sim.get("/balance/").await.ok();
        let answer = sim.send_with(Method::GET, "/balance/", None, second).await;
        answer.error(429, "RATE_LIMITED");
        assert_eq!(answer.headers["retry-after"], "4");
    }
    sim.post("/volumes/", volume("first-data")).await.ok();
    assert_eq!(sim.handle.state().volumes.len(), 1);
    let counters = sim.handle.counters();
    assert_eq!(counters.of_account(0)["GetBalance"][&200], 4);
    assert_eq!(counters.of_account(1)["GetBalance"][&429], 4);
    assert!(!counters.of_account(1)["GetBalance"].contains_key(&200));
    assert_eq!(sim.handle.fault_counts().throttled, 4);

    // Through the admin API, with an account the simulator does not serve refused.
    let storm = json!({"error_rate": 1.0, "accounts": [0]});
    let set = sim.admin(Method::PUT, "/_admin/faults", Some(storm)).await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(set.body["accounts"], json!([0]));
    sim.get("/balance/").await.error(500, "INTERNAL_ERROR");
    sim.send_with(Method::GET, "/balance/", None, second)
        .await
        .ok();
    let unknown = json!({"error_rate": 1.0, "accounts": [2]});
    sim.admin(Method::PUT, "/_admin/faults", Some(unknown))
        .await
        .error(400, "VALIDATION_ERROR");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn fixed_latency_delays_every_response() {
    let sim = start(SimulatorConfig {
        faults: FaultPlan {
            latency: Duration::from_millis(150),
            ..FaultPlan::default()
        },
        ..config()
    })
    .await;
    let started = Instant::now();
    sim.get("/regions/").await.ok();
    assert!(started.elapsed() >= Duration::from_millis(150));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_slow_operation_acts_after_its_client_gave_up() {
    let sim = start(config()).await;
    sim.handle.set_faults(FaultPlan {
        latency_ms_per_operation: BTreeMap::from([("CreateVolume".to_string(), 600)]),
        ..FaultPlan::default()
    });
    gpucloud_cloud::install_crypto_provider();
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let started = Instant::now();
    let outcome = impatient
        .post(sim.url("/volumes/"))
        .header("X-API-Key", sim.handle.api_key())
        .json(&volume("late"))
        .send()
        .await;
    assert!(outcome.expect_err("slower than the timeout").is_timeout());
    // Not yet acted when the client gave up, but already counted as received (so whoever sees
    // the effect later also sees the call); acted, and counted as answered, once the latency
    // passed.
    assert!(sim.handle.state().volumes.is_empty());
    assert_eq!(sim.handle.call_counts()["CreateVolume"], 1);
    assert!(
        !sim.handle
            .counters()
            .operations
            .contains_key("CreateVolume")
    );
    tokio::time::sleep(Duration::from_millis(600).saturating_sub(started.elapsed())).await;
    let mut acted = false;
    for _ in 0..50 {
        if sim.handle.state().volumes.iter().any(|v| v.name == "late") {
            acted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(acted, "the create was dropped with its client");
    assert_eq!(sim.handle.counters().operations["CreateVolume"][&200], 1);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_late_act_holds_one_create_of_its_name_and_is_then_spent() {
    let sim = start(config()).await;
    let plan = FaultPlan {
        act_late: BTreeMap::from([("team-a-data-".to_string(), 500)]),
        ..FaultPlan::default()
    };
    sim.handle.set_faults(plan.clone());
    // Another name is not held.
    sim.post("/volumes/", volume("team-a-other-1")).await.ok();
    let started = Instant::now();
    let held = sim.post("/volumes/", volume("team-a-data-1"));
    let (held, _) = tokio::join!(held, async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Held, not yet carried out.
        assert!(
            !sim.handle
                .state()
                .volumes
                .iter()
                .any(|v| v.name == "team-a-data-1")
        );
        assert_eq!(sim.handle.fault_counts().late_acts, 1);
        assert_eq!(sim.handle.fault_counts().late_acts_done, 0);
    });
    held.ok();
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_eq!(sim.handle.fault_counts().late_acts_done, 1);
    // Spent: the next create of that name, even under the plan set again, acts at once.
    sim.handle.set_faults(plan);
    let again = Instant::now();
    sim.post("/volumes/", volume("team-a-data-2")).await.ok();
    assert!(again.elapsed() < Duration::from_millis(400));
    assert_eq!(sim.handle.fault_counts().late_acts, 1);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn act_then_drop_performs_the_create_and_loses_the_response() {
    let sim = start(config()).await;
    sim.handle.set_faults(FaultPlan {
        act_then_drop: BTreeMap::from([("CreateVolume".to_string(), 1.0)]),
        drop_mode: DropMode::Delay {
            delay: Duration::from_secs(30),
        },
        ..FaultPlan::default()
    });
    gpucloud_cloud::install_crypto_provider();
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let outcome = impatient
        .post(sim.url("/volumes/"))
        .header("X-API-Key", sim.handle.api_key())
        .json(&volume("held-back"))
        .send()
        .await;
    let error = outcome.expect_err("the response is held back past the timeout");
    assert!(error.is_timeout(), "{error}");
    // The create really happened.
    let state = sim.handle.state();
    assert_eq!(state.volumes.len(), 1);
    assert_eq!(state.volumes[0].name, "held-back");

    // Close mode: the connection ends without a complete response.
    sim.handle.set_faults(FaultPlan {
        act_then_drop: BTreeMap::from([("CreateVolume".to_string(), 1.0)]),
        drop_mode: DropMode::CloseConnection,
        ..FaultPlan::default()
    });
    let outcome = tokio::time::timeout(Duration::from_secs(10), async {
        let response = sim
            .http
            .post(sim.url("/volumes/"))
            .header("X-API-Key", sim.handle.api_key())
            .json(&volume("cut-off"))
            .send()
            .await?;
        response.json::<serde_json::Value>().await
    })
    .await
    .expect("bounded");
    assert!(outcome.is_err(), "{outcome:?}");
    let names: Vec<String> = sim
        .handle
        .state()
        .volumes
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["held-back", "cut-off"]);
    // A refused request is not dropped: nothing to hide.
    sim.post(
        "/volumes/",
        json!({"name": "bad name", "size": 1, "region": "us-east-1"}),
    )
    .await
    .error(400, "VALIDATION_ERROR");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn list_lag_hides_new_resources_then_shows_them() {
    let sim = start(SimulatorConfig {
        list_lag: Duration::from_secs(30),
        ..config()
    })
    .await;
    let created = sim.post("/volumes/", volume("lagging")).await.ok();
    let id = created["volume"]["id"].as_str().unwrap().to_string();
    assert_eq!(sim.get("/volumes/").await.ok()["total_count"], 0);
    // Reading by id is consistent at once.
    sim.get(&format!("/volumes/{id}/")).await.ok();
    sim.handle.advance_clock(Duration::from_secs(31));
    assert_eq!(sim.get("/volumes/").await.ok()["total_count"], 1);
    sim.delete(&format!("/volumes/{id}/")).await.ok();
    sim.get(&format!("/volumes/{id}/"))
        .await
        .error(404, "NOT_FOUND");
    // Still listed for the lag after the delete.
    assert_eq!(sim.get("/volumes/").await.ok()["total_count"], 1);
    sim.handle.advance_clock(Duration::from_secs(31));
    assert_eq!(sim.get("/volumes/").await.ok()["total_count"], 0);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn faults_are_settable_through_the_admin_api() {
    let sim = start(config()).await;
    let plan = json!({
        "error_rate_per_operation": {"ListRegions": 1.0},
        "drop_mode": {"mode": "delay", "delay_ms": 1000},
    });
    let set = sim.admin(Method::PUT, "/_admin/faults", Some(plan)).await;
    assert_eq!(set.status, 200, "{}", set.body);
    sim.get("/regions/").await.error(500, "INTERNAL_ERROR");
    let read = sim.admin(Method::GET, "/_admin/faults", None).await.body;
    assert_eq!(read["error_rate_per_operation"]["ListRegions"], 1.0);
    sim.admin(Method::POST, "/_admin/reset", None).await;
    sim.get("/regions/").await.ok();
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn injected_faults_are_counted_by_kind() {
    let sim = start(config()).await;
    sim.handle.set_faults(FaultPlan {
        error_rate_per_operation: BTreeMap::from([("ListRegions".to_string(), 1.0)]),
        latency_spike: Some(gpucloud_simulator::LatencySpike {
            probability: 1.0,
            extra: Duration::from_millis(1),
        }),
        act_then_drop: BTreeMap::from([("CreateVolume".to_string(), 1.0)]),
        drop_mode: DropMode::Delay {
            delay: Duration::from_millis(10),
        },
        ..FaultPlan::default()
    });
    for _ in 0..3 {
        sim.get("/regions/").await.error(500, "INTERNAL_ERROR");
    }
    sim.post("/volumes/", volume("dropped")).await;
    let counts = sim.handle.fault_counts();
    assert_eq!(counts.internal_errors, 3);
    assert_eq!(counts.latency_spikes, 4);
    assert_eq!(counts.dropped_responses, 1);
    assert_eq!(counts.throttled, 0);
    sim.handle.reset();
    assert_eq!(
        sim.handle.fault_counts(),
        gpucloud_simulator::FaultCounts::default()
    );
    sim.handle.shutdown().await;
}
