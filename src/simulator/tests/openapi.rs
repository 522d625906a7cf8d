//! The served OpenAPI document equals the checked-in `docs/cloud-api.openapi.json`.
//! Regenerate the file with `UPDATE_OPENAPI=1 cargo test -p gpucloud-simulator --test openapi`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{config, start};
use serde_json::Value;

fn checked_in_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/cloud-api.openapi.json")
}

#[tokio::test]
async fn served_document_matches_the_checked_in_file() {
    let sim = start(config()).await;
    // Served without an API key: it documents the API, it is not part of it.
    let response = sim.http.get(sim.url("/openapi.json")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let served: Value = response.json().await.unwrap();
    sim.handle.shutdown().await;

    let path = checked_in_path();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        let text = serde_json::to_string_pretty(&served).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!(
            "{}: {err}; run UPDATE_OPENAPI=1 cargo test -p gpucloud-simulator --test openapi",
            path.display()
        )
    });
    let checked_in: Value = serde_json::from_str(&text).unwrap();
    assert!(
        served == checked_in,
        "docs/cloud-api.openapi.json is out of date; run \
         UPDATE_OPENAPI=1 cargo test -p gpucloud-simulator --test openapi"
    );
    assert_eq!(served["openapi"], "3.0.3");
    assert_eq!(
        served["paths"]["/snapshots/{snapshot_id}/restore/"]["post"]["operationId"],
        "RestoreSnapshot"
    );
}
