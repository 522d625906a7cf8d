#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `--kube-api-qps`: the controllers' requests wait for the client-side bucket, leader
//! election's do not.

use crate::support::*;
use gpucloud_cloud::RateLimit;
use gpucloud_controller::client_throttle::{ClientThrottle, throttled_client};
use gpucloud_simulator::SimulatorConfig;
use gpucloud_telemetry::Metrics;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The count of `rest_client_rate_limiter_duration_seconds` observations for `verb`.
fn throttled(metrics: &Metrics, verb: &str) -> u64 {
    let wanted = format!("rest_client_rate_limiter_duration_seconds_count{{verb=\"{verb}\"");
    metrics
        .encode()
        .lines()
        .find(|line| line.starts_with(&wanted))
        .and_then(|line| line.rsplit(' ').next())
        .map_or(0, |count| count.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_wait_for_the_bucket_and_leases_pass() {
    let env = Env::without_operator(SimulatorConfig::default()).await;
    let metrics = Arc::new(Metrics::new());
    let throttle = ClientThrottle {
        limit: RateLimit {
            per_second: 10.0,
            burst: 2,
        },
        host: "apiserver".into(),
    };
    let client = throttled_client(&env.client, &throttle, metrics.clone());

    // Two at once (the burst), then one every 100 ms: seven reads take at least 0.5 s.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    for _ in 0..7 {
        config_maps.get_opt("absent").await.unwrap();
    }
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "seven requests at 10/s with a burst of 2 took {:?}",
        started.elapsed()
    );
    assert_eq!(throttled(&metrics, "GET"), 7);

    // The bucket is empty now; the Lease's requests take no token and are not observed.
    let leases: Api<Lease> = Api::namespaced(client, OPERATOR_NAMESPACE);
    for _ in 0..20 {
        leases.get_opt("gpucloud-operator").await.unwrap();
    }
    assert_eq!(
        throttled(&metrics, "GET"),
        7,
        "a Lease request was throttled"
    );
}
