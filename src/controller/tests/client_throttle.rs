#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `--kube-api-qps`: the controllers' requests wait for the client-side bucket, leader
//! election's do not. `--kube-api-max-in-flight`: a request waits for a place among those in
//! flight, held until its answer is read; watches and leader election's requests hold none.

use crate::support::*;
use gpucloud_cloud::RateLimit;
use gpucloud_controller::runtime::client_throttle::{
    ClientThrottle, in_flight_bounded_client, throttled_client,
};
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

/// With one place, an answer whose body is not read yet holds it: the next request waits until
/// that body is dropped; a watch and a Lease request hold no place and pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_answer_holds_its_place_and_watches_hold_none() {
    let env = Env::without_operator(SimulatorConfig::default()).await;
    let client = in_flight_bounded_client(&env.client, 1);
    let get = |path: &str| {
        http::Request::get(path)
            .body(kube::client::Body::empty())
            .unwrap()
    };
    let config_maps = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");

    let unread = client.send(get(&config_maps)).await.unwrap();
    let waiting = tokio::spawn({
        let (client, request) = (client.clone(), get(&config_maps));
        async move { client.send(request).await.map(drop) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a second request went out while the first answer was unread"
    );

    let watch = format!("{config_maps}?watch=true&timeoutSeconds=5");
    let lease = format!("/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases");
    for path in [watch, lease] {
        tokio::time::timeout(Duration::from_secs(5), client.send(get(&path)))
            .await
            .unwrap_or_else(|_| panic!("{path} waited for a place"))
            .unwrap();
    }

    drop(unread);
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the second request still waits after the first answer was dropped")
        .unwrap()
        .unwrap();
    // Answers read to the end give their place back: one after another, all go out.
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    for _ in 0..5 {
        tokio::time::timeout(Duration::from_secs(5), api.list(&Default::default()))
            .await
            .expect("a read answer kept its place")
            .unwrap();
    }
}
