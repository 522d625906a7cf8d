#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A 429 storm: half of all cloud calls answered `429` with `Retry-After` for a minute while
//! objects are created and changed. The operator's own token bucket keeps it under the
//! simulator's rate limit throughout (no request is refused by the real limiter, and no
//! one-second window holds more than the limit allows), and once the storm ends it is back to
//! successful calls within twice the `Retry-After`, and every object converges.

use crate::support;

use gpucloud_api::*;
use gpucloud_cloud::RateLimit as ClientRateLimit;
use gpucloud_simulator::{FaultPlan, RateLimit, SimulatorConfig, ThrottleBurst};
use kube::api::{Patch, PatchParams};
use std::collections::VecDeque;
use std::time::Duration;
use support::*;
use tokio::time::Instant;

const RETRY_AFTER_SECS: u64 = 2;
/// The simulator's limit per API key.
const SERVER_LIMIT: RateLimit = RateLimit {
    per_second: 5.0,
    burst: 10,
};

fn storm_length() -> Duration {
    let seconds = std::env::var("GPUCLOUD_STORM_SECONDS")
        .ok()
        .map(|text| {
            text.parse::<u64>()
                .expect("GPUCLOUD_STORM_SECONDS: whole seconds")
        })
        .unwrap_or(60);
    Duration::from_secs(seconds)
}

/// Requests the simulator has seen, and how many of them got 2xx / 429.
fn totals(env: &Env) -> (u64, u64, u64) {
    let counters = env.simulator.counters();
    let mut all = 0;
    let mut ok = 0;
    let mut throttled = 0;
    for statuses in counters.operations.values() {
        for (status, count) in statuses {
            all += count;
            if (200..300).contains(status) {
                ok += count;
            }
            if *status == 429 {
                throttled += count;
            }
        }
    }
    (all, ok, throttled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_of_429s_never_pushes_the_operator_past_the_rate_limit() {
    let storm = storm_length();
    let simulator = SimulatorConfig {
        rate_limit: Some(SERVER_LIMIT),
        ..SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    let mut config = test_config(&env.simulator);
    // The operator's bucket sits below the server's, as a deployment would set it.
    config.cloud.rate_limit = Some(ClientRateLimit {
        per_second: 4.0,
        burst: 8,
    });
    env.start_operator(config);

    env.simulator.set_faults(FaultPlan {
        throttle_burst: Some(ThrottleBurst {
            probability: 0.5,
            length: 1,
            retry_after_secs: RETRY_AFTER_SECS,
        }),
        ..FaultPlan::default()
    });
    let storm_started = Instant::now();
    let storm_ends = storm_started + storm;
    create_a_key_three_machines_and_a_volume(&env).await;

    let (busiest_second, changes) = sample_the_storm(&env, storm_started, storm_ends).await;
    let (storm_calls, storm_ok, storm_429) = totals(&env);
    let injected = env.simulator.fault_counts().throttled;
    env.simulator.set_faults(FaultPlan::default());
    let calm_from = Instant::now();

    // Back to successful calls within twice the Retry-After.
    let resumed = within(2 * RETRY_AFTER_SECS + 1, async {
        loop {
            let (_, ok, _) = totals(&env);
            if ok > storm_ok {
                return calm_from.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("no successful call after the storm ended");
    eprintln!(
        "storm of {storm:?}: {storm_calls} calls, {storm_429} answered 429 ({injected} injected), \
         {storm_ok} succeeded; busiest second {busiest_second} requests; first success {resumed:?} after the storm"
    );
    assert!(
        resumed <= Duration::from_secs(2 * RETRY_AFTER_SECS),
        "resumed after {resumed:?}"
    );
    // The storm really was half of all calls.
    let share = injected as f64 / storm_calls as f64;
    assert!(
        storm_calls >= 40,
        "only {storm_calls} calls during the storm"
    );
    assert!(
        (0.35..=0.65).contains(&share),
        "{injected} of {storm_calls} calls throttled"
    );
    // No request was refused by the simulator's real limiter, and none of its one-second
    // windows held more than the limit allows (the burst plus a second's refill).
    assert_eq!(
        storm_429,
        injected,
        "the simulator's own rate limit refused {} requests",
        storm_429 - injected
    );
    let allowed = SERVER_LIMIT.burst as u64 + SERVER_LIMIT.per_second as u64;
    assert!(
        busiest_second <= allowed,
        "{busiest_second} requests in one second, the limit allows {allowed}"
    );
    assert!(changes >= 1 || storm < Duration::from_secs(10));

    // Everything converges once the storm is over.
    for name in ["a", "b", "c"] {
        ready::<GpuInstance>(&env, name).await;
    }
    ready::<Volume>(&env, "data").await;
    ready::<SshKey>(&env, "key").await;
    let state = env.simulator.state();
    assert_eq!(state.instances.len(), 3, "one machine per object");
    let (_, _, after_429) = totals(&env);
    assert_eq!(
        after_429,
        env.simulator.fault_counts().throttled,
        "the real limiter refused requests after the storm"
    );
    env.stop_operator().await;
}

/// An SshKey, three machines, and a volume attached to the first.
async fn create_a_key_three_machines_and_a_volume(env: &Env) {
    create::<SshKey>(env, &object("key", serde_json::json!({}))).await;
    for name in ["a", "b", "c"] {
        create::<GpuInstance>(
            env,
            &object(
                name,
                serde_json::json!({"region": "us-east-1", "gpuType": "L40S",
                    "osImage": "ubuntu-22.04-cuda-12"}),
            ),
        )
        .await;
    }
    create::<Volume>(
        env,
        &object(
            "data",
            serde_json::json!({"region": "us-east-1", "sizeGb": 10, "instanceRef": {"name": "a"}}),
        ),
    )
    .await;
}

/// Samples the simulator's request count every 50 ms until `storm_ends`, keeping the operator
/// busy with a power change of `b` every 10 s. Returns the most requests in one second and the
/// number of power changes.
async fn sample_the_storm(env: &Env, storm_started: Instant, storm_ends: Instant) -> (u64, u32) {
    let mut window: VecDeque<(Instant, u64)> = VecDeque::new();
    let mut busiest_second = 0;
    let mut changes = 0;
    let mut next_change = storm_started + Duration::from_secs(10);
    let mut sample = tokio::time::interval(Duration::from_millis(50));
    while Instant::now() < storm_ends {
        sample.tick().await;
        let now = Instant::now();
        let (all, _, _) = totals(env);
        window.push_back((now, all));
        while window
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > Duration::from_secs(1))
        {
            window.pop_front();
        }
        if let Some((_, first)) = window.front() {
            busiest_second = busiest_second.max(all - first);
        }
        // Keep the operator busy: power changes during the storm.
        if now >= next_change {
            let power = if changes % 2 == 0 {
                "Stopped"
            } else {
                "Running"
            };
            within(
                10,
                env.api::<GpuInstance>().patch(
                    "b",
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"powerState": power}})),
                ),
            )
            .await
            .unwrap()
            .unwrap();
            changes += 1;
            next_change = now + Duration::from_secs(10);
        }
    }
    (busiest_second, changes)
}
