//! The client against a scripted in-test HTTP server: error mapping, retry decisions,
//! Retry-After, the rate limiter, timeouts, the observer hook and secrecy of the API key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use gpucloud_cloud::model::*;
use gpucloud_cloud::{
    ApiKey, Backoff, CallObserver, CallOutcome, ClientConfig, CloudClient, Error, Operation,
    RateLimit, RetryPolicy,
};
use serde_json::json;

const KEY: &str = "test-secret-key-4f9a";

/// One scripted answer.
#[derive(Clone)]
struct Reply {
    status: u16,
    body: String,
    retry_after: Option<&'static str>,
    delay: Duration,
}

fn reply(status: u16, body: serde_json::Value) -> Reply {
    Reply {
        status,
        body: body.to_string(),
        retry_after: None,
        delay: Duration::ZERO,
    }
}

fn error_reply(status: u16, code: &str, message: &str) -> Reply {
    reply(
        status,
        json!({"success": false, "message": message, "code": code, "request_id": "req_1"}),
    )
}

fn ok_reply(body: serde_json::Value) -> Reply {
    let mut object = json!({"success": true, "message": "ok", "request_id": "req_2"});
    for (key, value) in body.as_object().unwrap() {
        object[key] = value.clone();
    }
    reply(200, object)
}

#[derive(Debug, Clone)]
struct Received {
    method: Method,
    uri: Uri,
    api_key: Option<String>,
    content_type: Option<String>,
    body: Bytes,
}

#[derive(Default)]
struct Script {
    replies: Mutex<VecDeque<Reply>>,
    received: Mutex<Vec<Received>>,
}

async fn scripted(
    State(script): State<Arc<Script>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    script.received.lock().unwrap().push(Received {
        method,
        uri,
        api_key: headers
            .get("x-api-key")
            .map(|v| v.to_str().unwrap().to_owned()),
        content_type: headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned()),
        body,
    });
    let next = script.replies.lock().unwrap().pop_front();
    let Some(next) = next else {
        return (StatusCode::IM_A_TEAPOT, "script exhausted").into_response();
    };
    tokio::time::sleep(next.delay).await;
    let mut response = (
        StatusCode::from_u16(next.status).unwrap(),
        [("content-type", "application/json")],
        next.body,
    )
        .into_response();
    if let Some(value) = next.retry_after {
        response
            .headers_mut()
            .insert("retry-after", value.parse().unwrap());
    }
    response
}

struct Server {
    addr: SocketAddr,
    script: Arc<Script>,
}

impl Server {
    async fn start(replies: Vec<Reply>) -> Server {
        let script = Arc::new(Script {
            replies: Mutex::new(replies.into()),
            received: Mutex::default(),
        });
        let app = Router::new()
            .fallback(scripted)
            .with_state(Arc::clone(&script));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Server { addr, script }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn received(&self) -> Vec<Received> {
        self.script.received.lock().unwrap().clone()
    }
}

fn config(base_url: String) -> ClientConfig {
    ClientConfig {
        base_url,
        api_key: ApiKey::new(KEY),
        timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_attempts: 3,
            backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(5)),
            max_retry_after: Duration::from_secs(5),
        },
        rate_limit: None,
    }
}

async fn bounded<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .expect("test step took too long")
}

#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(Operation, CallOutcome)>>,
    retries: Mutex<Vec<(u32, Duration)>>,
    waits: Mutex<Vec<Duration>>,
}

impl CallObserver for Recorder {
    fn on_call(&self, operation: Operation, outcome: &CallOutcome, _elapsed: Duration) {
        self.calls.lock().unwrap().push((operation, *outcome));
    }
    fn on_retry(&self, _operation: Operation, next_attempt: u32, _error: &Error, delay: Duration) {
        self.retries.lock().unwrap().push((next_attempt, delay));
    }
    fn on_rate_limit_wait(&self, _operation: Operation, waited: Duration) {
        self.waits.lock().unwrap().push(waited);
    }
}

#[tokio::test]
async fn requests_carry_key_path_query_and_body() {
    let server = Server::start(vec![
        ok_reply(
            json!({"volumes": [{"id": "vol-1", "status": "attached", "vm_status": "RUNNING",
            "instance_id": "vm-1", "size": 50}], "total_count": 1,
            "applied_filters": {"region": "us-east-1", "tier": null, "bootable": true}}),
        ),
        ok_reply(json!({"data": {"instance_id": "vm-2", "status": "ACTIVE"},
            "snapshot": {"id": "snap 1", "name": "s"}, "timestamp": "2025-01-01T00:00:00Z",
            "tier": "legacy"})),
    ])
    .await;
    let client = CloudClient::new(config(server.url())).unwrap();
    let volumes = bounded(client.list_volumes(&VolumeListQuery {
        bootable: Some(true),
        region: Some("us-east-1".into()),
        ..VolumeListQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(volumes.volumes[0].status, VolumeStatus::Attached);
    assert_eq!(volumes.volumes[0].vm_status, Some(VmStatus::Running));
    assert_eq!(volumes.applied_filters.tier, None);

    let restored = bounded(client.restore_snapshot("snap 1", "new-vm"))
        .await
        .unwrap();
    assert_eq!(restored.body.data.instance_id, "vm-2");
    assert_eq!(restored.tier, Some(Tier::Legacy));
    assert!(restored.timestamp.is_some());

    let received = server.received();
    assert_eq!(received[0].method, Method::GET);
    assert_eq!(received[0].uri.path(), "/volumes/");
    let query = received[0].uri.query().unwrap();
    assert!(query.contains("bootable=true") && query.contains("region=us-east-1"));
    assert!(!query.contains("tier"));
    assert_eq!(received[0].api_key.as_deref(), Some(KEY));
    assert_eq!(received[1].method, Method::POST);
    assert_eq!(received[1].uri.path(), "/snapshots/snap%201/restore/");
    assert_eq!(
        received[1].content_type.as_deref(),
        Some("application/json")
    );
    let sent: serde_json::Value = serde_json::from_slice(&received[1].body).unwrap();
    assert_eq!(sent, json!({"new_vm_name": "new-vm"}));
}

#[tokio::test]
async fn base_url_with_a_path_prefix_is_kept() {
    let server = Server::start(vec![ok_reply(json!({"balance": 12.5, "currency": "USD"}))]).await;
    let client = CloudClient::new(config(format!("{}/api/v1/", server.url()))).unwrap();
    let balance = bounded(client.get_balance()).await.unwrap();
    assert_eq!(balance.balance, 12.5);
    assert_eq!(server.received()[0].uri.path(), "/api/v1/balance/");
}

/// A cloud that cannot be reached is named in the error with why (what a person needs to fix
/// a wrong URL or a firewall), never with the API key or a user:password in the URL.
#[tokio::test]
async fn an_unreachable_cloud_is_named_with_the_cause() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = CloudClient::new(config(format!(
        "http://admin:hunter2@127.0.0.1:{port}/api/v1/"
    )))
    .unwrap();
    let err = bounded(client.get_balance()).await.unwrap_err();
    assert!(err.never_sent(), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("http://127.0.0.1:{port}")),
        "{message}"
    );
    assert!(
        message.to_lowercase().contains("connection refused"),
        "{message}"
    );
    for secret in [KEY, "hunter2", "admin"] {
        assert!(!message.contains(secret), "{message}");
        assert!(!format!("{err:?}").contains(secret), "{err:?}");
    }
}

#[tokio::test]
async fn statuses_map_to_typed_errors_with_message_and_code() {
    // (status, code, message, metric label); the error keeps the code the reply carries.
    let cases = [
        (401, "INVALID_API_KEY", "bad key", "unauthorized"),
        (403, "TIER_NOT_SUPPORTED", "legacy only", "forbidden"),
        (404, "NOT_FOUND", "no such instance", "not_found"),
        (409, "INVALID_STATE", "instance is SHUTOFF", "conflict"),
        (409, "DUPLICATE_NAME", "name taken", "conflict"),
        (
            402,
            "INSUFFICIENT_CREDIT",
            "balance spent",
            "insufficient_credit",
        ),
        (400, "VALIDATION_ERROR", "name: too long", "bad_request"),
        (413, "PAYLOAD_TOO_LARGE", "too big", "bad_request"),
        (422, "VALIDATION_ERROR", "unprocessable", "bad_request"),
        (405, "METHOD_NOT_ALLOWED", "no", "unexpected_status"),
    ];
    for (status, code, expected_message, label) in cases {
        let server = Server::start(vec![error_reply(status, code, expected_message)]).await;
        let client = CloudClient::new(config(server.url())).unwrap();
        let err = bounded(client.get_instance("vm-1")).await.unwrap_err();
        assert_eq!(err.metric_label(), label, "{status}");
        assert_eq!(err.code(), Some(code), "{status}");
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.operation(), Some(Operation::GetInstance));
        assert!(err.to_string().contains(expected_message), "{err}");
        assert!(!err.is_retryable(), "{status} must not be retried");
        assert_eq!(server.received().len(), 1, "{status} was retried");
    }
    // Terminal errors are told apart from the ones whose meaning is the resource's state.
    for (status, terminal) in [
        (400, true),
        (402, true),
        (403, true),
        (404, false),
        (409, false),
    ] {
        let server = Server::start(vec![error_reply(status, "X", "m")]).await;
        let client = CloudClient::new(config(server.url())).unwrap();
        let err = bounded(client.get_instance("vm-1")).await.unwrap_err();
        assert_eq!(err.is_terminal(), terminal, "{status}");
    }
}

#[tokio::test]
async fn error_without_json_body_keeps_a_short_message() {
    let server = Server::start(vec![Reply {
        status: 502,
        body: "<html>bad gateway</html>".into(),
        retry_after: None,
        delay: Duration::ZERO,
    }])
    .await;
    let mut cfg = config(server.url());
    cfg.retry = RetryPolicy::never();
    let client = CloudClient::new(cfg).unwrap();
    let err = bounded(client.list_instances()).await.unwrap_err();
    assert!(matches!(err, Error::Server { status: 502, .. }), "{err:?}");
    assert!(err.to_string().contains("bad gateway"));
}

#[tokio::test]
async fn undecodable_success_body_is_a_decode_error_with_a_capped_excerpt() {
    let long_garbage = format!("not json {}", "x".repeat(10_000));
    let server = Server::start(vec![
        Reply {
            status: 200,
            body: long_garbage,
            retry_after: None,
            delay: Duration::ZERO,
        },
        reply(
            200,
            json!({"success": true, "instance": {"specs": {"gpu_count": "four"}}}),
        ),
    ])
    .await;
    let client = CloudClient::new(config(server.url())).unwrap();
    let err = bounded(client.list_instances()).await.unwrap_err();
    match &err {
        Error::Decode {
            operation,
            status,
            excerpt,
            ..
        } => {
            assert_eq!(*operation, Operation::ListInstances);
            assert_eq!(*status, 200);
            assert!(excerpt.starts_with("not json"));
            assert!(excerpt.len() <= 256);
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    assert!(err.to_string().len() < 1024);
    let err = bounded(client.get_instance("vm-1")).await.unwrap_err();
    assert_eq!(err.metric_label(), "decode");
    assert!(err.to_string().contains("GetInstance"));
}

#[tokio::test]
async fn idempotent_calls_are_retried_on_server_errors_until_success() {
    let server = Server::start(vec![
        error_reply(503, "INTERNAL_ERROR", "busy"),
        error_reply(500, "INTERNAL_ERROR", "oops"),
        ok_reply(json!({"balance": 3.0, "currency": "USD"})),
    ])
    .await;
    let recorder = Arc::new(Recorder::default());
    let client = CloudClient::new(config(server.url()))
        .unwrap()
        .with_observer(recorder.clone());
    let balance = bounded(client.get_balance()).await.unwrap();
    assert_eq!(balance.balance, 3.0);
    assert_eq!(server.received().len(), 3);
    let calls = recorder.calls.lock().unwrap().clone();
    let statuses: Vec<_> = calls.iter().map(|(_, outcome)| outcome.status).collect();
    assert_eq!(statuses, vec![Some(503), Some(500), Some(200)]);
    assert_eq!(calls[0].1.error, Some("server_error"));
    assert!(calls[2].1.is_success());
    let retries = recorder.retries.lock().unwrap().clone();
    assert_eq!(
        retries.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        vec![2, 3]
    );
}

#[tokio::test]
async fn retries_stop_after_max_attempts() {
    let server = Server::start(vec![error_reply(500, "INTERNAL_ERROR", "down"); 5]).await;
    let client = CloudClient::new(config(server.url())).unwrap();
    let err = bounded(client.list_regions()).await.unwrap_err();
    assert!(matches!(err, Error::Server { status: 500, .. }));
    assert_eq!(server.received().len(), 3);
}

#[tokio::test]
async fn unsafe_and_billed_create_calls_are_not_retried_after_the_server_answered() {
    let server = Server::start(vec![error_reply(503, "INTERNAL_ERROR", "busy"); 4]).await;
    let client = CloudClient::new(config(server.url())).unwrap();
    let err = bounded(client.start_instance("vm-1")).await.unwrap_err();
    assert!(err.is_retryable());
    let err2 = bounded(client.create_instance(&CreateInstanceRequest::new(
        "a",
        "us-east-1",
        "A100-80G",
        1,
        "ubuntu-22.04-cuda-12",
    )))
    .await
    .unwrap_err();
    assert!(err2.is_retryable());
    // One request each: the server may have acted, so the client does not repeat them.
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn unsafe_calls_are_retried_when_the_connection_never_opened() {
    // A port with nothing listening: the connection is refused before any byte is sent.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let recorder = Arc::new(Recorder::default());
    let client = CloudClient::new(config(format!("http://{addr}")))
        .unwrap()
        .with_observer(recorder.clone());
    let err = bounded(client.reboot_instance("vm-1")).await.unwrap_err();
    assert!(err.never_sent(), "{err:?}");
    assert_eq!(err.metric_label(), "transport");
    assert_eq!(recorder.calls.lock().unwrap().len(), 3);
    // A billed create is never repeated by the client, not even then.
    let recorder = Arc::new(Recorder::default());
    let client = CloudClient::new(config(format!("http://{addr}")))
        .unwrap()
        .with_observer(recorder.clone());
    let err = bounded(client.create_volume(&CreateVolumeRequest::new("v", 10, "us-east-1")))
        .await
        .unwrap_err();
    assert!(err.never_sent());
    assert_eq!(recorder.calls.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn retry_after_is_waited_out_before_the_retry() {
    let mut limited = error_reply(429, "RATE_LIMITED", "slow down");
    limited.retry_after = Some("1");
    let server = Server::start(vec![
        limited,
        ok_reply(json!({"regions": [{"id": "us-east-1"}]})),
    ])
    .await;
    let recorder = Arc::new(Recorder::default());
    let client = CloudClient::new(config(server.url()))
        .unwrap()
        .with_observer(recorder.clone());
    let started = std::time::Instant::now();
    let regions = bounded(client.list_regions()).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(regions.regions[0].id, "us-east-1");
    let retries = recorder.retries.lock().unwrap().clone();
    assert_eq!(retries.len(), 1);
    assert!(retries[0].1 >= Duration::from_secs(1));
}

#[tokio::test]
async fn retry_after_beyond_the_policy_goes_to_the_caller() {
    let mut limited = error_reply(429, "RATE_LIMITED", "come back later");
    limited.retry_after = Some("3600");
    let server = Server::start(vec![limited]).await;
    let client = CloudClient::new(config(server.url())).unwrap();
    let err = bounded(client.list_regions()).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3600)));
    assert_eq!(err.metric_label(), "rate_limited");
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn slow_answers_time_out_and_billed_creates_are_not_repeated() {
    let slow = Reply {
        delay: Duration::from_secs(3),
        ..ok_reply(json!({}))
    };
    let server = Server::start(vec![slow; 4]).await;
    let mut cfg = config(server.url());
    cfg.timeout = Duration::from_millis(200);
    let client = CloudClient::new(cfg).unwrap();
    let err = bounded(client.create_snapshot(
        "vm-1",
        &CreateSnapshotRequest {
            name: "s".into(),
            description: String::new(),
            labels: vec![],
        },
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(err.is_retryable() && !err.never_sent());
    assert_eq!(server.received().len(), 1);
    // An idempotent read is repeated up to the attempt bound.
    let err = bounded(client.list_snapshots()).await.unwrap_err();
    assert_eq!(err.metric_label(), "timeout");
    assert_eq!(server.received().len(), 4);
}

#[tokio::test]
async fn rate_limiter_spaces_calls_and_is_shared_by_clones() {
    let server = Server::start(vec![ok_reply(json!({"balance": 1.0})); 6]).await;
    let mut cfg = config(server.url());
    cfg.rate_limit = Some(RateLimit {
        per_second: 10.0,
        burst: 2,
    });
    let recorder = Arc::new(Recorder::default());
    let client = CloudClient::new(cfg)
        .unwrap()
        .with_observer(recorder.clone());
    let clone = client.clone();
    let started = std::time::Instant::now();
    for _ in 0..3 {
        bounded(client.get_balance()).await.unwrap();
        bounded(clone.get_balance()).await.unwrap();
    }
    // Burst of 2, then 4 more at 10/s: at least 0.4 s, and waiting is not an error.
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(380), "{elapsed:?}");
    let waits = recorder.waits.lock().unwrap().clone();
    assert_eq!(waits.len(), 4);
    assert_eq!(recorder.calls.lock().unwrap().len(), 6);
}

#[tokio::test]
async fn api_key_never_appears_in_errors_even_when_the_server_echoes_it() {
    let echo = format!("key {KEY} is not valid");
    let server = Server::start(vec![
        error_reply(401, "INVALID_API_KEY", &echo),
        Reply {
            status: 200,
            body: format!("{{\"broken\": \"{KEY}"),
            retry_after: None,
            delay: Duration::ZERO,
        },
        Reply {
            status: 500,
            body: format!("internal: {KEY}"),
            retry_after: None,
            delay: Duration::ZERO,
        },
    ])
    .await;
    let mut cfg = config(server.url());
    cfg.retry = RetryPolicy::never();
    let client = CloudClient::new(cfg).unwrap();
    for _ in 0..3 {
        let err = bounded(client.get_balance()).await.unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(KEY), "{shown}");
        assert!(shown.contains("***"), "{shown}");
    }
    let received = server.received();
    assert!(received.iter().all(|r| r.api_key.as_deref() == Some(KEY)));
    // Nothing else of the request carries the key.
    assert!(received.iter().all(|r| !r.uri.to_string().contains(KEY)));
    assert!(!format!("{client:?}").contains(KEY));
}

#[tokio::test]
async fn path_arguments_are_encoded_so_ids_cannot_change_the_route() {
    let server = Server::start(vec![ok_reply(json!({"instance_id": "x", "rule_id": "y"}))]).await;
    let client = CloudClient::new(config(server.url())).unwrap();
    bounded(client.remove_security_rule("../volumes", "a?b=c"))
        .await
        .unwrap();
    let received = server.received();
    assert_eq!(received[0].method, Method::DELETE);
    assert_eq!(
        received[0].uri.path(),
        "/instances/..%2Fvolumes/security-rules/a%3Fb%3Dc/"
    );
    assert_eq!(received[0].uri.query(), None);
}

#[tokio::test]
async fn ssh_key_generation_returns_the_private_key_once_hidden_from_debug() {
    let server = Server::start(vec![ok_reply(json!({
        "code": "SSH_KEY_GENERATED", "id": "key-1", "name": "k",
        "public_key": "ssh-ed25519 AAAA", "created_at": "2025-01-01T00:00:00Z", "metadata": {},
        "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n"
    }))])
    .await;
    let client = CloudClient::new(config(server.url())).unwrap();
    let created = bounded(client.create_ssh_key(&CreateSshKeyRequest {
        name: "k".into(),
        public_key: None,
    }))
    .await
    .unwrap();
    assert_eq!(created.code.as_deref(), Some("SSH_KEY_GENERATED"));
    assert_eq!(created.body.key.id, "key-1");
    let private = created.body.private_key.as_ref().unwrap();
    assert!(
        private
            .expose()
            .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----")
    );
    assert!(!format!("{created:?}").contains("BEGIN OPENSSH"));
    let sent: serde_json::Value = serde_json::from_slice(&server.received()[0].body).unwrap();
    assert_eq!(sent, json!({"name": "k"}));
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn api_key_never_appears_in_log_lines() {
    let logs = LogBuffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(logs.clone())
        .finish();
    // The test runtime is single-threaded, so the default subscriber sees every event.
    let _guard = tracing::subscriber::set_default(subscriber);
    let echo = format!("bad key {KEY}");
    let server = Server::start(vec![
        error_reply(500, "INTERNAL_ERROR", &echo),
        error_reply(500, "INTERNAL_ERROR", &echo),
        error_reply(401, "INVALID_API_KEY", &echo),
    ])
    .await;
    let client = CloudClient::new(config(server.url())).unwrap();
    let err = bounded(client.get_balance()).await.unwrap_err();
    assert_eq!(err.metric_label(), "unauthorized");
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("retrying cloud call"), "{text}");
    assert!(text.contains("GetBalance"), "{text}");
    assert!(!text.contains(KEY), "{text}");
}

#[tokio::test]
async fn empty_ids_are_refused_before_anything_is_sent() {
    let server = Server::start(vec![]).await;
    let client = CloudClient::new(config(server.url())).unwrap();
    let err = bounded(client.delete_instance("")).await.unwrap_err();
    assert!(matches!(err, Error::InvalidRequest { .. }), "{err:?}");
    assert!(err.to_string().contains("vm_id"), "{err}");
    assert!(err.is_terminal());
    let err = bounded(client.remove_firewall_rule("fw-1", ""))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("rule_id"), "{err}");
    assert!(server.received().is_empty());
}

#[tokio::test]
async fn redirects_are_not_followed_so_the_key_stays_with_the_api() {
    let elsewhere = Server::start(vec![ok_reply(json!({"balance": 1.0}))]).await;
    // A server that answers every request with a redirect to another host.
    let app = Router::new().fallback({
        let target = format!("{}/balance/", elsewhere.url());
        move || async move { (StatusCode::FOUND, [("location", target)], String::new()) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redirecting = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    let client = CloudClient::new(config(format!("http://{redirecting}"))).unwrap();
    let err = bounded(client.get_balance()).await.unwrap_err();
    assert!(
        matches!(err, Error::UnexpectedStatus { status: 302, .. }),
        "{err:?}"
    );
    assert!(elsewhere.received().is_empty(), "the key went elsewhere");
}

#[tokio::test]
async fn empty_success_answers_decode_to_defaults() {
    let mut no_content = reply(204, json!({}));
    no_content.body = String::new();
    let server = Server::start(vec![no_content]).await;
    let client = CloudClient::new(config(server.url())).unwrap();
    let deleted = bounded(client.delete_volume("vol-1")).await.unwrap();
    assert_eq!(deleted, DeletedBody::default());
}

#[tokio::test]
async fn a_success_status_whose_body_says_otherwise_is_an_error() {
    let server = Server::start(vec![
        reply(
            200,
            json!({"success": false, "message": "quota exceeded", "code": "QUOTA"}),
        ),
        reply(200, json!({"instance": {"instance_id": "vm-1"}})),
    ])
    .await;
    let client = CloudClient::new(config(server.url())).unwrap();
    let err = bounded(client.get_instance("vm-1")).await.unwrap_err();
    assert!(
        matches!(err, Error::UnexpectedStatus { status: 200, .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), Some("QUOTA"));
    assert!(err.to_string().contains("quota exceeded"));
    assert_eq!(server.received().len(), 1, "not retried");
    // Without the flag the status decides.
    let instance = bounded(client.get_instance("vm-1")).await.unwrap();
    assert_eq!(instance.instance_id, "vm-1");
}
