//! Property tests of response decoding: whatever a server answers (any status, any
//! `Retry-After`, arbitrary bytes, arbitrary JSON in the envelope and under the keys each
//! operation reads, answers that echo the API key), every operation the operator uses returns
//! `Ok` or an `Error`, never panics, and no error's text carries the API key.
//!
//! `PROPTEST_CASES` sets the number of cases per property (256 by default).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gpucloud_cloud::model::*;
use gpucloud_cloud::{ApiKey, ClientConfig, CloudClient, Error, RetryPolicy};
use proptest::prelude::*;
use serde_json::{Value, json};

const KEY: &str = "fuzz-secret-key-77c1d0";

/// The answer the server gives to every request until changed.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Vec<u8>,
}

type Shared = Arc<Mutex<Answer>>;

async fn answer(State(shared): State<Shared>) -> Response {
    let answer = shared.lock().unwrap().clone();
    let mut response = answer.body.into_response();
    *response.status_mut() = StatusCode::from_u16(answer.status).unwrap();
    if let Some(value) = answer
        .retry_after
        .and_then(|v| HeaderValue::from_str(&v).ok())
    {
        response.headers_mut().insert("retry-after", value);
    }
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    response
}

struct Server {
    runtime: tokio::runtime::Runtime,
    shared: Shared,
    client: CloudClient,
}

fn server() -> Server {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let shared: Shared = Arc::new(Mutex::new(Answer {
        status: 200,
        retry_after: None,
        body: Vec::new(),
    }));
    let app = Router::new().fallback(answer).with_state(shared.clone());
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let address = listener.local_addr().unwrap();
    runtime.spawn(async move { axum::serve(listener, app).await });
    let mut config = ClientConfig::new(format!("http://{address}"), ApiKey::new(KEY));
    config.timeout = Duration::from_secs(5);
    config.retry = RetryPolicy::never();
    config.rate_limit = None;
    let client = runtime
        .block_on(async { CloudClient::new(config) })
        .unwrap();
    Server {
        runtime,
        shared,
        client,
    }
}

type Call = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// Every operation the operator makes, each decoding its own response type.
fn operations(client: &CloudClient) -> Vec<(&'static str, Call)> {
    let c = client.clone();
    macro_rules! op {
        ($name:literal, $call:expr) => {{
            let c = c.clone();
            (
                $name,
                Box::pin(async move {
                    let c = c;
                    $call(c).await.map(drop)
                }) as Call,
            )
        }};
    }
    let instance: CreateInstanceRequest = serde_json::from_value(json!({
        "name": "n", "region": "r", "gpu_type": "g", "gpu_count": 1, "image_id": "i",
        "ssh_key_ids": [], "volume_ids": []
    }))
    .unwrap();
    let volume: CreateVolumeRequest =
        serde_json::from_value(json!({"name": "n", "size": 1, "region": "r"})).unwrap();
    let firewall: CreateFirewallRequest =
        serde_json::from_value(json!({"name": "n", "region": "r"})).unwrap();
    let key: CreateSshKeyRequest = serde_json::from_value(json!({"name": "n"})).unwrap();
    let image: CreateImageRequest =
        serde_json::from_value(json!({"snapshot_id": "s", "name": "n"})).unwrap();
    let snapshot: CreateSnapshotRequest = serde_json::from_value(json!({"name": "n"})).unwrap();
    let rule: NewRule = serde_json::from_value(json!({
        "direction": "ingress", "protocol": "tcp", "ethertype": "IPv4",
        "remote_ip_prefix": "0.0.0.0/0"
    }))
    .unwrap();
    vec![
        op!("get_balance", |c: CloudClient| async move {
            c.get_balance().await
        }),
        op!("get_pricing", |c: CloudClient| async move {
            c.get_pricing().await
        }),
        op!("list_instances", |c: CloudClient| async move {
            c.list_instances().await
        }),
        op!("list_volumes", |c: CloudClient| async move {
            c.list_volumes(&VolumeListQuery::default()).await
        }),
        op!("list_snapshots", |c: CloudClient| async move {
            c.list_snapshots().await
        }),
        op!("list_images", |c: CloudClient| async move {
            c.list_images().await
        }),
        op!("list_firewalls", |c: CloudClient| async move {
            c.list_firewalls().await
        }),
        op!("list_ssh_keys", |c: CloudClient| async move {
            c.list_ssh_keys().await
        }),
        op!("list_firewall_protocols", |c: CloudClient| async move {
            c.list_firewall_protocols().await
        }),
        op!("create_instance", move |c: CloudClient| async move {
            c.create_instance(&instance).await
        }),
        op!("create_volume", move |c: CloudClient| async move {
            c.create_volume(&volume).await
        }),
        op!("create_firewall", move |c: CloudClient| async move {
            c.create_firewall(&firewall).await
        }),
        op!("create_ssh_key", move |c: CloudClient| async move {
            c.create_ssh_key(&key).await
        }),
        op!("create_image", move |c: CloudClient| async move {
            c.create_image(&image).await
        }),
        op!("create_snapshot", move |c: CloudClient| async move {
            c.create_snapshot("vm-1", &snapshot).await
        }),
        op!("restore_snapshot", |c: CloudClient| async move {
            c.restore_snapshot("snap-1", "n").await
        }),
        op!("stop_instance", |c: CloudClient| async move {
            c.stop_instance("vm-1").await
        }),
        op!("toggle_public_ip", |c: CloudClient| async move {
            c.toggle_public_ip("vm-1", true).await
        }),
        op!("add_firewall_rule", move |c: CloudClient| async move {
            c.add_firewall_rule("fw-1", &rule).await
        }),
        op!("attach_firewall", |c: CloudClient| async move {
            c.attach_firewall("fw-1", &["vm-1".to_string()]).await
        }),
        op!("detach_volumes", |c: CloudClient| async move {
            c.detach_volumes("vm-1", &["vol-1".to_string()]).await
        }),
        op!("resize_volume", |c: CloudClient| async move {
            c.resize_volume("vol-1", 10).await
        }),
        op!("delete_instance", |c: CloudClient| async move {
            c.delete_instance("vm-1").await
        }),
        op!("delete_snapshot", |c: CloudClient| async move {
            c.delete_snapshot("snap-1").await
        }),
        op!("delete_ssh_key", |c: CloudClient| async move {
            c.delete_ssh_key("key-1").await
        }),
    ]
}

/// Runs every operation against `answer`; fails on a panic or a key in an error.
fn check_every_operation(server: &Server, answer: Answer) -> Result<(), TestCaseError> {
    *server.shared.lock().unwrap() = answer.clone();
    for (name, call) in operations(&server.client) {
        // A panic inside the client surfaces as a JoinError instead of ending the run.
        let outcome = server.runtime.block_on(async { tokio::spawn(call).await });
        match outcome {
            Err(panic) => {
                return Err(TestCaseError::fail(format!(
                    "{name} panicked on {answer:?}: {panic}"
                )));
            }
            Ok(Err(error)) => {
                let text = format!("{error} {error:?}");
                prop_assert!(
                    !text.contains(KEY),
                    "{name}: the API key is in the error: {text}"
                );
            }
            Ok(Ok(())) => {}
        }
    }
    Ok(())
}

fn statuses() -> impl Strategy<Value = u16> {
    prop_oneof![
        Just(200u16),
        Just(201),
        Just(204),
        Just(400),
        Just(401),
        Just(402),
        Just(403),
        Just(404),
        Just(409),
        Just(413),
        Just(422),
        Just(429),
        Just(500),
        Just(503),
        200u16..600,
    ]
}

fn retry_afters() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("1e308".to_string())),
        Just(Some("-1".to_string())),
        Just(Some("18446744073709551616".to_string())),
        Just(Some("NaN".to_string())),
        Just(Some("Wed, 21 Oct 2015 07:28:00 GMT".to_string())),
        "[ -~]{0,24}".prop_map(Some),
    ]
}

/// Arbitrary JSON, nested a few levels, with strings that sometimes echo the key.
fn json_values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        Just(Value::String(format!("echo {KEY}"))),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(field_names(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Keys the decoders look for, so arbitrary values land where they are read.
fn field_names() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "success",
            "message",
            "code",
            "request_id",
            "data",
            "instances",
            "instance",
            "volumes",
            "volume",
            "snapshots",
            "snapshot",
            "images",
            "image",
            "firewalls",
            "firewall",
            "ssh_keys",
            "ssh_key",
            "protocols",
            "gpus",
            "balance",
            "currency",
            "id",
            "instance_id",
            "vm_name",
            "name",
            "status",
            "created_at",
            "size",
            "attachments",
            "rules",
            "private_key",
            "instance_ids",
            "volume_ids",
            "tier",
        ])
        .prop_map(str::to_string),
        "[a-z_]{1,10}",
    ]
}

/// An envelope as the service sends it, with arbitrary contents.
fn envelopes() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::option::of(any::<bool>()),
        prop::collection::btree_map(field_names(), json_values(), 0..8),
    )
        .prop_map(|(success, fields)| {
            let mut object: serde_json::Map<String, Value> = fields.into_iter().collect();
            if let Some(success) = success {
                object.insert("success".into(), Value::Bool(success));
            }
            serde_json::to_vec(&Value::Object(object)).unwrap()
        })
}

fn bodies() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        json_values().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        envelopes(),
        envelopes(),
        Just(
            format!("{{\"success\": false, \"message\": \"bad key {KEY}\", \"code\": \"{KEY}\"}}")
                .into_bytes()
        ),
        Just(b"{\"success\": true".to_vec()),
        Just(Vec::new()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_answer_decodes_to_a_value_or_an_error(
        status in statuses(),
        retry_after in retry_afters(),
        body in bodies(),
    ) {
        thread_local! {
            static SERVER: Server = server();
        }
        SERVER.with(|server| {
            check_every_operation(server, Answer { status, retry_after, body })
        })?;
    }
}

/// Responses larger than the client's bound are refused, not buffered without end; a list's
/// bound is larger, since the cloud's lists are not paged and an account of 30,000 machines
/// answers more than 16 MiB.
#[test]
fn oversized_answers_are_errors_and_long_lists_are_read() {
    let server = server();
    let answer = |body: String| Answer {
        status: 200,
        retry_after: None,
        body: body.into_bytes(),
    };
    let padding = "x".repeat(gpucloud_cloud::MAX_RESPONSE_BYTES);
    *server.shared.lock().unwrap() = answer(format!(
        "{{\"success\": true, \"instance\": {{\"instance_id\": \"vm\", \"note\": \"{padding}\"}}}}"
    ));
    let result = server.runtime.block_on(server.client.get_instance("vm"));
    assert!(result.is_err(), "an answer over 16 MiB was accepted");

    let machines = 40_000;
    let record = format!(
        "{{\"instance_id\": \"vm\", \"note\": \"{}\"}}",
        "x".repeat(500)
    );
    let body = format!(
        "{{\"success\": true, \"instances\": [{}]}}",
        vec![record.as_str(); machines].join(",")
    );
    assert!(body.len() > gpucloud_cloud::MAX_RESPONSE_BYTES);
    *server.shared.lock().unwrap() = answer(body);
    let listed = server
        .runtime
        .block_on(server.client.list_instances())
        .expect("a list of 40,000 machines is read");
    assert_eq!(listed.instances.len(), machines);
}
