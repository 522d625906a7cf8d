//! The served OpenAPI document equals the checked-in `docs/cloud-api.openapi.json`, and the
//! simulator's answers are what it describes.
//! Regenerate the file with `UPDATE_OPENAPI=1 cargo test -p gpucloud-simulator --test openapi`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{config, start};
use gpucloud_cloud::routes::{Method, Operation};
use serde_json::{Value, json};

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

/// Every field of every answer is one the document declares, with the declared type (and
/// one of the declared values, for enumerations): the document describes what is served.
#[tokio::test]
async fn answers_match_the_document() {
    let sim = start(config()).await;
    let served: Value = sim.get("/openapi.json").await.body;
    let vm = sim.instance("vm-a", "legacy").await;
    sim.instance("vm-b", "advanced").await;
    sim.settle();
    let volume = sim
        .post(
            "/volumes/",
            json!({ "name": "data", "size": 10, "region": "us-east-1" }),
        )
        .await
        .ok()["volume"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    sim.post("/ssh-keys/", json!({ "name": "key" })).await.ok();
    sim.settle();

    let mut checked = 0;
    for &op in Operation::ALL {
        let args: Vec<&str> = match op {
            Operation::GetInstance | Operation::ListInstanceFirewalls => vec![&vm],
            Operation::GetVolume => vec![&volume],
            _ if op.params().count() == 0 => Vec::new(),
            _ => continue,
        };
        if op.method() != Method::Get {
            continue;
        }
        let path = op.render(&args).unwrap();
        let answer = sim.get(&path).await.ok();
        let schema = &served["paths"][op.path()]["get"]["responses"]["200"]["content"]["application/json"]
            ["schema"];
        let mut errors = Vec::new();
        check(&served, schema, &answer, op.name(), &mut errors);
        assert!(errors.is_empty(), "{}", errors.join("\n"));
        checked += 1;
    }
    assert!(checked >= 20, "{checked}");
    sim.handle.shutdown().await;
}

fn resolve<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(reference) => {
            let name = reference.trim_start_matches("#/components/schemas/");
            resolve(document, &document["components"]["schemas"][name])
        }
        None => schema,
    }
}

/// The properties of a schema, those of every part of an `allOf` included.
fn properties(document: &Value, schema: &Value, into: &mut serde_json::Map<String, Value>) {
    let schema = resolve(document, schema);
    if let Some(own) = schema["properties"].as_object() {
        into.extend(own.clone());
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        properties(document, part, into);
    }
}

fn check(document: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = resolve(document, schema);
    if schema == &Value::Bool(true) || schema.as_object().is_some_and(|map| map.is_empty()) {
        // Any value (e.g. a free-form map's entries).
        return;
    }
    if let Some(options) = schema["anyOf"].as_array() {
        let fits = options.iter().any(|option| {
            let mut found = Vec::new();
            check(document, option, value, at, &mut found);
            found.is_empty()
        });
        if !fits {
            errors.push(format!("{at}: {value} fits none of {schema}"));
        }
        return;
    }
    if let Some(parts) = schema["allOf"].as_array()
        && !value.is_object()
    {
        for part in parts {
            check(document, part, value, at, errors);
        }
        return;
    }
    if value.is_null() {
        if schema["nullable"] != true {
            errors.push(format!("{at}: null where the document does not allow it"));
        }
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        errors.push(format!("{at}: {value} is not one of {allowed:?}"));
    }
    let mut declared = serde_json::Map::new();
    properties(document, schema, &mut declared);
    let is_object = schema["type"] == "object" || !declared.is_empty();
    match value {
        Value::Object(fields) if is_object => {
            for (name, field) in fields {
                let at = format!("{at}.{name}");
                match declared.get(name).or(schema.get("additionalProperties")) {
                    Some(field_schema) => check(document, field_schema, field, &at, errors),
                    None => errors.push(format!("{at}: not in the document")),
                }
            }
        }
        Value::Array(items) if schema["type"] == "array" => {
            for (index, item) in items.iter().enumerate() {
                check(
                    document,
                    &schema["items"],
                    item,
                    &format!("{at}[{index}]"),
                    errors,
                );
            }
        }
        Value::String(_) if schema["type"] == "string" || schema["enum"].is_array() => {}
        Value::Number(number) if schema["type"] == "integer" => {
            if !(number.is_i64() || number.is_u64()) {
                errors.push(format!("{at}: {number} is not an integer"));
            }
        }
        Value::Number(_) if schema["type"] == "number" => {}
        Value::Bool(_) if schema["type"] == "boolean" => {}
        _ => errors.push(format!("{at}: {value} does not fit {schema}")),
    }
}
