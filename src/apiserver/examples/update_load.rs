//! A repeatable CPU measurement of the update path: the project's CRDs are installed in an
//! in-process server (no TLS, no sockets: requests go straight to the resource dispatcher),
//! a few hundred GpuInstances are created, then every object gets rounds of the writes the
//! operator makes: a PUT of the whole object to `/status`, a merge patch of `/status`, and
//! merge patches of annotations and finalizers.
//!
//! Run it under callgrind, whose instruction counts do not depend on the machine's load:
//!
//! ```text
//! cargo build --release -p gpucloud-apiserver --example update_load
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/update_load.out \
//!     target/release/examples/update_load [objects] [rounds]
//! callgrind_annotate /tmp/update_load.out | head -40
//! ```
//!
//! The defaults are 300 objects and 4 rounds (about 5,000 updates). It prints a digest of the
//! final stored objects (managedFields included, times and uids left out) so two builds can be
//! checked to give the same results.

use std::error::Error;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, header};
use gpucloud_apiserver::{ApiServerConfig, AppState};
use serde_json::{Value, json};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const NAMESPACES: usize = 10;
const GROUP_PATH: &str = "/apis/gpucloud.io/v1alpha1";
const USER_AGENT: &str = "gpucloud-operator/0.1.0";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let objects: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(300);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(4);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(objects, rounds))
}

async fn send(
    state: &AppState,
    method: Method,
    path: &str,
    content_type: &str,
    body: &Value,
) -> Result<Value> {
    let request = Request::builder()
        .method(method.clone())
        .uri(path)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::USER_AGENT, USER_AGENT)
        .body(Body::from(body.to_string()))?;
    let response = gpucloud_apiserver::handlers::dispatch(State(state.clone()), request).await;
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await?;
    if !status.is_success() {
        return Err(format!(
            "{method} {path}: {status}: {}",
            String::from_utf8_lossy(&bytes)
        )
        .into());
    }
    Ok(serde_json::from_slice(&bytes)?)
}

async fn install_crds(state: &AppState) -> Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<std::result::Result<_, _>>()?;
    files.sort();
    for file in files {
        let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(&file)?)?;
        send(
            state,
            Method::POST,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "application/json",
            &crd,
        )
        .await?;
    }
    Ok(())
}

fn instance(name: &str) -> Value {
    json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": "GpuInstance",
        "metadata": {
            "name": name,
            "labels": {"team": "research", "gpucloud.io/tenant": "t"},
            "annotations": {"gpucloud.io/restartedAt": "2026-11-22T09:00:00Z"},
        },
        "spec": {
            "region": "us-east-1",
            "gpuType": "H100-80G",
            "gpuCount": 1,
            "osImage": "ubuntu-22.04-cuda-12",
            "sshKeyRefs": [{"name": "dev-key"}],
            "startupScript": {"inline": "#!/bin/sh\nnvidia-smi > /var/log/gpu-ready.log\n"},
            "publicIp": true,
            "powerState": "Running",
            "connectionSecret": format!("{name}-ssh"),
            "maxHourlyRate": 5.0,
            "deletionPolicy": "Delete",
        },
    })
}

/// A status as the operator writes it; `round` changes a few fields, as a reconcile does.
fn status(name: &str, round: usize) -> Value {
    let time = format!("2026-01-01T00:{:02}:00Z", round % 60);
    let ready = if round == 0 { "False" } else { "True" };
    json!({
        "account": "acct-0",
        "cloudName": format!("{name}-abcde"),
        "externalId": format!("vm-{name}"),
        "state": if round == 0 { "Creating" } else { "Running" },
        "vmStatus": if round == 0 { "BUILD" } else { "ACTIVE" },
        "ipAddress": "203.0.113.7",
        "ipStatus": "ASSIGNED",
        "hourlyRate": 2.49,
        "currency": "USD",
        "observedGeneration": 1,
        "specs": {"gpuType": "H100-80G", "gpuCount": 1, "vcpus": 16, "ramGb": 128, "storageGb": 500},
        "placement": {"chosen": {"region": "us-east-1", "gpuType": "H100-80G", "gpuCount": 1, "hourlyRate": 2.49, "currency": "USD", "alternative": 0}},
        "conditions": [
            {"type": "Ready", "status": ready, "reason": if round == 0 { "Creating" } else { "Running" },
             "message": format!("the machine is {}", if round == 0 { "being created" } else { "running" }),
             "lastTransitionTime": time, "observedGeneration": 1},
            {"type": "Synced", "status": "True", "reason": "Observed", "message": "the cloud was read",
             "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
        ],
    })
}

async fn run(objects: usize, rounds: usize) -> Result<()> {
    let state = AppState::new(&ApiServerConfig::default());
    install_crds(&state).await?;
    for namespace in 0..NAMESPACES {
        send(
            &state,
            Method::POST,
            "/api/v1/namespaces",
            "application/json",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("tenant-{namespace}")}}),
        )
        .await?;
    }
    let mut cached = Vec::with_capacity(objects);
    for index in 0..objects {
        let namespace = format!("tenant-{}", index % NAMESPACES);
        let name = format!("gpu-{index}");
        let created = send(
            &state,
            Method::POST,
            &format!("{GROUP_PATH}/namespaces/{namespace}/gpuinstances"),
            "application/json",
            &instance(&name),
        )
        .await?;
        cached.push((namespace, name, created));
    }
    let mut updates = 0usize;
    for round in 0..rounds {
        for (namespace, name, object) in cached.iter_mut() {
            let path = format!("{GROUP_PATH}/namespaces/{namespace}/gpuinstances/{name}");
            if round == 0 {
                // The finalizer goes on first, as the operator's reconcile does.
                *object = send(
                    &state,
                    Method::PATCH,
                    &path,
                    "application/merge-patch+json",
                    &json!({"metadata": {"finalizers": ["gpucloud.io/finalizer"]}}),
                )
                .await?;
                updates += 1;
            }
            // The whole object, from the operator's cache, to /status.
            object["status"] = status(name, round);
            // Twice: the second is the same status again, a no-op write.
            for _ in 0..2 {
                *object = send(
                    &state,
                    Method::PUT,
                    &format!("{path}/status"),
                    "application/json",
                    object,
                )
                .await?;
            }
            *object = send(
                &state,
                Method::PATCH,
                &format!("{path}/status"),
                "application/merge-patch+json",
                &json!({"status": {"nextTransition": format!("2026-01-02T00:{:02}:00Z", round % 60)}}),
            )
            .await?;
            *object = send(
                &state,
                Method::PATCH,
                &path,
                "application/merge-patch+json",
                &json!({"metadata": {"annotations": {"gpucloud.io/observed": round.to_string()}}}),
            )
            .await?;
            updates += 4;
        }
    }
    println!("{updates} updates of {objects} objects");
    let list = gpucloud_apiserver::handlers::dispatch(
        State(state.clone()),
        Request::builder()
            .uri(format!("{GROUP_PATH}/gpuinstances"))
            .body(Body::empty())?,
    )
    .await;
    let bytes = axum::body::to_bytes(list.into_body(), usize::MAX).await?;
    let mut list: Value = serde_json::from_slice(&bytes)?;
    let mut digest = 0u64;
    if let Some(items) = list["items"].as_array_mut() {
        for item in items {
            if let Some(metadata) = item["metadata"].as_object_mut() {
                metadata.remove("uid");
                metadata.remove("creationTimestamp");
                if let Some(Value::Array(entries)) = metadata.get_mut("managedFields") {
                    for entry in entries {
                        if let Some(entry) = entry.as_object_mut() {
                            entry.remove("time");
                        }
                    }
                }
            }
            digest = digest.wrapping_mul(1_000_003) ^ fnv(item.to_string().as_bytes());
        }
    }
    println!("digest {digest:016x}");
    Ok(())
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
