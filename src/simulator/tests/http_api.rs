//! Raw-HTTP tests of the simulator: wire shapes of the spec's detailed endpoints, the bad
//! input table, authentication, the admin API and the rate limit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Sim, assert_request_id, config, start};
use gpucloud_simulator::{Caller, Delays, LedgerEntry, RateLimit, SimulatorConfig};
use reqwest::Method;
use serde_json::{Value, json};

/// Method, path, raw body, expected status, expected code, text the message must contain.
type BadInput = (
    Method,
    String,
    Option<String>,
    u16,
    &'static str,
    &'static str,
);

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

fn assert_has(value: &Value, fields: &[&str]) {
    for field in fields {
        assert!(value.get(field).is_some(), "missing {field} in {value}");
    }
}

/// An instance that is RUNNING (instant delays), legacy tier.
async fn running_legacy_instance(sim: &Sim) -> String {
    let id = sim.instance("vm-1", "legacy").await;
    let instance = sim.get(&format!("/instances/{id}/")).await.ok();
    assert_eq!(instance["instance"]["vm_status"], "RUNNING");
    id
}

#[tokio::test]
async fn snapshot_endpoints_answer_the_shown_shapes() {
    let sim = start(SimulatorConfig {
        delays: Delays {
            snapshot: Duration::from_secs(60),
            ..Delays::instant()
        },
        ..config()
    })
    .await;
    let vm = running_legacy_instance(&sim).await;

    let created = sim
        .post(
            &format!("/instances/{vm}/snapshots/create/"),
            json!({"name": "snap", "description": "nightly", "labels": ["a"]}),
        )
        .await
        .ok();
    assert_request_id(&created);
    assert_eq!(created["tier"], "legacy");
    let snapshot = &created["snapshot"];
    assert_has(
        snapshot,
        &[
            "snapshot_id",
            "name",
            "description",
            "size",
            "status",
            "instance_id",
            "region",
            "created_at",
        ],
    );
    assert_eq!(snapshot["status"], "creating");
    assert_eq!(snapshot["instance_id"], vm.as_str());
    assert!(snapshot["created_at"].as_str().unwrap().ends_with('Z'));
    let snapshot_id = snapshot["snapshot_id"].as_str().unwrap().to_string();

    // Restore of a snapshot still creating is refused.
    sim.post(
        &format!("/snapshots/{snapshot_id}/restore/"),
        json!({"new_vm_name": "restored"}),
    )
    .await
    .error(409, "INVALID_STATE");
    sim.handle.advance_clock(Duration::from_secs(61));

    let restored = sim
        .post(
            &format!("/snapshots/{snapshot_id}/restore/"),
            json!({"new_vm_name": "restored"}),
        )
        .await
        .ok();
    assert_eq!(
        keys(&restored),
        [
            "data",
            "message",
            "request_id",
            "snapshot",
            "success",
            "tier",
            "timestamp"
        ]
    );
    assert!(restored["timestamp"].as_str().unwrap().ends_with('Z'));
    let data = &restored["data"];
    assert_has(
        data,
        &[
            "instance_id",
            "vm_name",
            "ip_address",
            "ip_status",
            "billing",
            "specs",
            "status",
            "boot_source",
            "created_at",
        ],
    );
    assert_eq!(data["status"], "ACTIVE");
    assert_eq!(data["boot_source"], "snapshot");
    assert_eq!(data["ip_status"], "assigned");
    assert_eq!(data["billing"]["currency"], "USD");
    assert_has(
        &data["specs"],
        &["gpu_type", "gpu_count", "ram_gb", "vcpus", "storage_gb"],
    );
    assert_eq!(data["specs"]["gpu_type"], "L40S");
    assert_eq!(
        restored["snapshot"],
        json!({"id": snapshot_id, "name": "snap"})
    );

    let deleted = sim
        .delete(&format!("/snapshots/{snapshot_id}/delete/"))
        .await
        .ok();
    assert_eq!(
        keys(&deleted),
        ["message", "request_id", "snapshot_name", "success", "tier"]
    );
    assert_eq!(deleted["snapshot_name"], "snap");
    // Idempotent.
    let again = sim
        .delete(&format!("/snapshots/{snapshot_id}/delete/"))
        .await
        .ok();
    assert_eq!(again["snapshot_name"], "snap");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn legacy_instance_endpoints_answer_the_shown_shapes() {
    let sim = start(config()).await;
    let vm = running_legacy_instance(&sim).await;
    let added = sim
        .post(
            &format!("/instances/{vm}/security-rules/"),
            json!({"direction": "ingress", "protocol": "tcp", "ethertype": "IPv4",
                   "remote_ip_prefix": "0.0.0.0/0", "port_range_min": 22, "port_range_max": 22}),
        )
        .await
        .ok();
    let rule_id = added["rule"]["id"].as_str().unwrap().to_string();
    let removed = sim
        .delete(&format!("/instances/{vm}/security-rules/{rule_id}/"))
        .await
        .ok();
    assert_eq!(
        keys(&removed),
        [
            "instance_id",
            "message",
            "request_id",
            "rule_id",
            "success",
            "tier"
        ]
    );
    assert_eq!(removed["rule_id"], rule_id.as_str());
    assert_eq!(removed["tier"], "legacy");

    let hibernating = sim
        .post(&format!("/instances/{vm}/hibernate/"), json!({}))
        .await
        .ok();
    assert_eq!(hibernating["status"], "HIBERNATING");
    let restored = sim
        .send(Method::POST, &format!("/compute/{vm}/restore/"), None)
        .await
        .ok();
    assert_has(
        &restored,
        &[
            "success",
            "message",
            "vm_id",
            "status",
            "tier",
            "request_id",
        ],
    );
    assert_eq!(restored["status"], "ACTIVE");
    assert_eq!(restored["vm_id"], vm.as_str());
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn list_volumes_and_volume_billing_answer_the_shown_shapes() {
    let sim = start(config()).await;
    sim.instance("vm-a", "advanced").await;
    sim.post(
        "/volumes/",
        json!({"name": "data", "size": 100, "region": "eu-west-1", "tier": "legacy"}),
    )
    .await
    .ok();
    let listed = sim.get("/volumes/").await.ok();
    assert_eq!(
        keys(&listed),
        [
            "applied_filters",
            "bootable_count",
            "message",
            "metadata",
            "next_volume_name",
            "non_bootable_count",
            "request_id",
            "success",
            "total_count",
            "volumes"
        ]
    );
    assert_eq!(
        listed["applied_filters"],
        json!({"region": null, "tier": null, "bootable": null})
    );
    assert_eq!(listed["total_count"], 2);
    assert_eq!(listed["bootable_count"], 1);
    assert_eq!(listed["non_bootable_count"], 1);
    assert_eq!(
        listed["metadata"]["tiers_used"],
        json!(["advanced", "legacy"])
    );
    assert!(
        listed["next_volume_name"]
            .as_str()
            .unwrap()
            .starts_with("volume-")
    );
    let boot = listed["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["bootable"] == true)
        .unwrap();
    assert_has(
        boot,
        &[
            "id",
            "name",
            "size",
            "region",
            "tier",
            "volume_type",
            "status",
            "bootable",
            "created_at",
            "instance_id",
            "vm_status",
        ],
    );
    assert_eq!(boot["status"], "attached");
    assert_eq!(boot["vm_status"], "RUNNING");

    let filtered = sim
        .get("/volumes/?region=eu-west-1&tier=legacy&bootable=false&exclude_os_volumes=true")
        .await
        .ok();
    assert_eq!(filtered["total_count"], 1);
    assert_eq!(
        filtered["applied_filters"],
        json!({"region": "eu-west-1", "tier": "legacy", "bootable": false})
    );

    sim.handle.advance_clock(Duration::from_secs(600));
    let billing = sim.get("/volumes/billing/?limit=1&page=2").await.ok();
    assert_has(
        &billing,
        &[
            "success",
            "records",
            "summary",
            "total",
            "page",
            "limit",
            "total_pages",
            "currency",
        ],
    );
    assert_eq!(billing["total"], 2);
    assert_eq!(billing["page"], 2);
    assert_eq!(billing["limit"], 1);
    assert_eq!(billing["total_pages"], 2);
    assert_eq!(
        keys(&billing["summary"]),
        [
            "activeCount",
            "averageUsage",
            "totalCost",
            "totalMinutes",
            "totalSizeGB"
        ]
    );
    let record = &billing["records"][0];
    assert_eq!(
        keys(record),
        [
            "billing_id",
            "currency",
            "description",
            "end_time",
            "per_minute_rate",
            "size_gb",
            "start_time",
            "status",
            "tier",
            "total_cost",
            "total_duration_minutes",
            "volume_id",
            "volume_name"
        ]
    );
    let start_time = record["start_time"].as_str().unwrap();
    assert!(
        !start_time.ends_with('Z') && start_time.contains('T'),
        "{start_time}"
    );
    assert!(matches!(
        record["tier"].as_str(),
        Some("Advanced" | "Legacy")
    ));
    assert!(record["total_duration_minutes"].as_u64().unwrap() >= 10);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn firewall_ssh_key_and_ai_models_answer_the_shown_shapes() {
    let sim = start(config()).await;
    let vm = sim.instance("vm-a", "advanced").await;
    let firewall = sim
        .post(
            "/firewalls/",
            json!({"name": "web", "region": "us-east-1", "description": "d",
                   "rules": [{"direction": "ingress", "protocol": "tcp", "ethertype": "IPv4",
                              "remote_ip_prefix": "10.0.0.0/8", "port_range_min": 80,
                              "port_range_max": 443}]}),
        )
        .await
        .ok();
    let firewall_id = firewall["firewall"]["id"].as_str().unwrap().to_string();
    sim.post(
        &format!("/firewalls/{firewall_id}/attach/"),
        json!({"vm_ids": [vm]}),
    )
    .await
    .ok();
    let details = sim.get(&format!("/firewalls/{firewall_id}/")).await.ok();
    assert_has(&details, &["success", "firewall", "tier", "request_id"]);
    let firewall = &details["firewall"];
    assert_has(
        firewall,
        &[
            "id",
            "name",
            "description",
            "region",
            "rules",
            "attachments",
        ],
    );
    assert_eq!(
        keys(&firewall["rules"][0]),
        [
            "direction",
            "ethertype",
            "id",
            "port_range_max",
            "port_range_min",
            "protocol",
            "remote_ip_prefix"
        ]
    );
    assert_eq!(
        firewall["attachments"][0]["vm"],
        json!({"id": vm, "name": "vm-a", "status": "RUNNING"})
    );

    let imported = sim
        .post(
            "/ssh-keys/",
            json!({"name": "laptop",
                   "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb2Tn+1ELHMxMM+y8aO3O8f2Hn1WNA6T6Q0eG5QY3f1 me@laptop"}),
        )
        .await
        .ok();
    assert_eq!(
        keys(&imported),
        [
            "code",
            "created_at",
            "id",
            "message",
            "metadata",
            "name",
            "public_key",
            "request_id",
            "success"
        ]
    );
    assert_eq!(imported["code"], "SSH_KEY_IMPORTED");
    let generated = sim.post("/ssh-keys/", json!({"name": "gen"})).await.ok();
    assert_eq!(generated["code"], "SSH_KEY_GENERATED");
    assert!(
        generated["private_key"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----")
    );
    // Returned once: reading the key back never shows it.
    let id = generated["id"].as_str().unwrap();
    let read = sim.get(&format!("/ssh-keys/{id}/")).await.ok();
    assert!(!read.to_string().contains("PRIVATE KEY"));
    sim.post("/ssh-keys/", json!({"name": "gen"}))
        .await
        .error(409, "DUPLICATE_NAME");

    let models = sim.get("/ai/models/").await.ok();
    assert_has(
        &models,
        &[
            "success",
            "models",
            "currency",
            "minimum_balance",
            "parameters",
            "authentication_type",
            "authenticated_user",
        ],
    );
    assert_eq!(models["authentication_type"], "api_key");
    assert!(!models.to_string().contains(sim.handle.api_key()));
    assert_eq!(
        keys(&models["models"][0]),
        ["currency", "id", "name", "price_per_1M_tokens"]
    );
    let parameters = &models["parameters"];
    let expected = [
        ("max_tokens", "integer", Value::Null, [1.0, 32768.0]),
        ("temperature", "float", json!(1.0), [0.0, 2.0]),
        ("top_p", "float", Value::Null, [0.0, 1.0]),
        ("top_k", "integer", json!(-1.0), [-1.0, 200.0]),
        ("presence_penalty", "float", json!(0.0), [-2.0, 2.0]),
        ("repetition_penalty", "float", json!(1.0), [-2.0, 2.0]),
    ];
    assert_eq!(parameters.as_object().unwrap().len(), expected.len());
    for (name, kind, default, range) in expected {
        let parameter = &parameters[name];
        assert_eq!(parameter["type"], kind, "{name}");
        assert_eq!(parameter["default"], default, "{name}");
        assert_eq!(parameter["range"], json!(range), "{name}");
        assert!(parameter["description"].is_string());
    }
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn every_operation_answers_with_the_envelope() {
    let sim = start(config()).await;
    // Reads without path parameters: each answers 200 with the envelope.
    for op in gpucloud_cloud::routes::Operation::ALL {
        if op.method() != gpucloud_cloud::routes::Method::Get || op.params().next().is_some() {
            continue;
        }
        let answer = sim.get(op.path()).await;
        let body = answer.ok();
        assert_request_id(&body);
        assert!(body["message"].is_string(), "{op}");
    }
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn bad_input_gets_a_json_error_naming_the_problem() {
    let sim = start(SimulatorConfig {
        max_body_bytes: 4096,
        ..config()
    })
    .await;
    let vm = sim.instance("vm-a", "advanced").await;
    let instance = |extra: Value| {
        let mut body = json!({"name": "x", "region": "us-east-1", "gpu_type": "L40S",
                              "gpu_count": 1, "image_id": "ubuntu-22.04-cuda-12"});
        for (key, value) in extra.as_object().unwrap() {
            if value.is_null() {
                body.as_object_mut().unwrap().remove(key);
            } else {
                body[key] = value.clone();
            }
        }
        body.to_string()
    };
    let big = format!("{{\"name\": \"{}\"}}", "x".repeat(5000));
    let vm_start = format!("/instances/{vm}/start/");
    // (method, path, raw body, status, code, text the message must contain)
    let cases: Vec<BadInput> = vec![
        (Method::POST, "/instances/".into(), Some("{".into()), 400, "VALIDATION_ERROR", "malformed JSON"),
        (Method::POST, "/instances/".into(), Some("[]".into()), 400, "VALIDATION_ERROR", "body"),
        (Method::POST, "/instances/".into(), Some(String::new()), 400, "VALIDATION_ERROR", "body"),
        (Method::POST, "/instances/".into(), Some(instance(json!({"gpu_type": null}))), 400, "VALIDATION_ERROR", "gpu_type"),
        (Method::POST, "/instances/".into(), Some(instance(json!({"gpu_count": "two"}))), 400, "VALIDATION_ERROR", "gpu_count"),
        (Method::POST, "/instances/".into(), Some(instance(json!({"gpu_count": -1}))), 400, "VALIDATION_ERROR", "gpu_count"),
        (Method::POST, "/instances/".into(), Some(instance(json!({"gpu_count": 0}))), 400, "VALIDATION_ERROR", "gpu_count"),
        (Method::POST, "/instances/".into(), Some(instance(json!({"gpu_count": 3}))), 400, "VALIDATION_ERROR", "gpu_count: L40S is offered with 1, 2, 4, 8 GPUs, not 3"),
        (Method::POST, "/pricing/".into(), Some(json!({"gpu_type": "L40S", "gpu_count": 3}).to_string()), 400, "VALIDATION_ERROR", "gpu_count"),
        (Method::POST, "/instances/".into(), Some(instance(json!({"region": "mars-1"}))), 400, "VALIDATION_ERROR", "region"),
        (Method::POST, "/instances/".into(), Some(instance(json!({"name": "has space"}))), 400, "VALIDATION_ERROR", "name"),
        (Method::POST, "/instances/".into(), Some(instance(json!({"image_id": "windows-95"}))), 400, "VALIDATION_ERROR", "image_id"),
        (Method::POST, "/instances/".into(), Some(instance(json!({"tier": "gold"}))), 400, "VALIDATION_ERROR", "tier"),
        (Method::POST, "/volumes/".into(), Some(json!({"name": "v", "size": 0, "region": "us-east-1"}).to_string()), 400, "VALIDATION_ERROR", "size"),
        (Method::POST, "/volumes/".into(), Some(json!({"name": "v", "size": 10, "region": "us-east-1", "volume_type": "HDD"}).to_string()), 400, "VALIDATION_ERROR", "volume_type"),
        (Method::GET, "/volumes/?bootable=maybe".into(), None, 400, "VALIDATION_ERROR", "bootable"),
        (Method::GET, "/volumes/?tier=gold".into(), None, 400, "VALIDATION_ERROR", "tier"),
        (Method::GET, "/volumes/?region=mars-1".into(), None, 400, "VALIDATION_ERROR", "region"),
        (Method::GET, "/volumes/?colour=red".into(), None, 400, "VALIDATION_ERROR", "colour"),
        (Method::GET, "/instances/?page=1".into(), None, 400, "VALIDATION_ERROR", "page"),
        (Method::GET, "/volumes/billing/?start_date=2026-13-01".into(), None, 400, "VALIDATION_ERROR", "start_date"),
        (Method::GET, "/volumes/billing/?end_date=yesterday".into(), None, 400, "VALIDATION_ERROR", "end_date"),
        (Method::GET, "/volumes/billing/?start_date=2026-02-01&end_date=2026-01-01".into(), None, 400, "VALIDATION_ERROR", "start_date"),
        (Method::GET, "/volumes/billing/?limit=101".into(), None, 400, "VALIDATION_ERROR", "limit"),
        (Method::GET, "/volumes/billing/?page=0".into(), None, 400, "VALIDATION_ERROR", "page"),
        (Method::GET, "/volumes/billing/?size=big".into(), None, 400, "VALIDATION_ERROR", "size"),
        (Method::GET, "/volumes/billing/?min_cost=-1".into(), None, 400, "VALIDATION_ERROR", "min_cost"),
        (Method::GET, "/volumes/billing/?status=melting".into(), None, 400, "VALIDATION_ERROR", "status"),
        (Method::GET, "/volumes/billing/?min_minutes=10&max_minutes=5".into(), None, 400, "VALIDATION_ERROR", "min_minutes"),
        (Method::GET, "/volumes/billing/?page=1&page=2".into(), None, 400, "VALIDATION_ERROR", "page"),
        (Method::GET, "/instances/vm-missing/".into(), None, 404, "NOT_FOUND", "vm-missing"),
        (Method::GET, "/instances/%FF/".into(), None, 400, "VALIDATION_ERROR", "path"),
        (Method::DELETE, "/snapshots/snap-missing/delete/".into(), None, 404, "NOT_FOUND", "snap-missing"),
        (Method::GET, "/nowhere/".into(), None, 404, "ROUTE_NOT_FOUND", "/nowhere/"),
        (Method::GET, "/instances".into(), None, 404, "ROUTE_NOT_FOUND", "/instances"),
        (Method::PATCH, "/instances/".into(), None, 405, "METHOD_NOT_ALLOWED", "PATCH"),
        (Method::PUT, "/balance/".into(), None, 405, "METHOD_NOT_ALLOWED", "PUT"),
        (Method::POST, "/ssh-keys/".into(), Some(json!({"name": "k", "public_key": "garbage"}).to_string()), 400, "VALIDATION_ERROR", "public_key"),
        (Method::POST, "/ssh-keys/".into(), Some(json!({"public_key": "garbage"}).to_string()), 400, "VALIDATION_ERROR", "name"),
        (Method::POST, "/firewalls/".into(), Some(json!({"name": "f", "region": "us-east-1", "rules": [{"direction": "ingress", "protocol": "tcp", "ethertype": "IPv4", "remote_ip_prefix": "0.0.0.0/0", "port_range_min": 1, "port_range_max": 70000}]}).to_string()), 400, "VALIDATION_ERROR", "port_range_max"),
        (Method::POST, "/firewalls/".into(), Some(json!({"name": "f", "region": "us-east-1", "rules": [{"direction": "ingress", "protocol": "tcp", "ethertype": "IPv4", "remote_ip_prefix": "10.0.0.0/40"}]}).to_string()), 400, "VALIDATION_ERROR", "remote_ip_prefix"),
        (Method::POST, "/firewalls/".into(), Some(json!({"name": "f", "region": "us-east-1", "rules": [{"direction": "ingress", "protocol": "gre", "ethertype": "IPv4", "remote_ip_prefix": "10.0.0.0/8"}]}).to_string()), 400, "VALIDATION_ERROR", "protocol"),
        (Method::POST, "/ai/chat/".into(), Some(json!({"model": "mistral-7b-instruct", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}).to_string()), 400, "VALIDATION_ERROR", "temperature"),
        (Method::POST, "/ai/chat/".into(), Some(json!({"model": "mistral-7b-instruct", "messages": [{"role": "user", "content": "hi"}], "top_k": 500}).to_string()), 400, "VALIDATION_ERROR", "top_k"),
        (Method::POST, "/snapshots/snap-x/restore/".into(), Some("{}".into()), 400, "VALIDATION_ERROR", "new_vm_name"),
        (Method::POST, "/volumes/".into(), Some(big), 413, "PAYLOAD_TOO_LARGE", "4096"),
        (Method::POST, vm_start, Some(json!({"force": true}).to_string()), 400, "VALIDATION_ERROR", "body"),
        (Method::POST, format!("/instances/{vm}/public-ip/"), Some(json!({"enabled": "yes"}).to_string()), 400, "VALIDATION_ERROR", "enabled"),
    ];
    assert!(cases.len() >= 20);
    let key = sim.handle.api_key().to_string();
    for (method, path, body, status, code, needle) in cases {
        let answer = sim
            .send_with(method.clone(), &path, None, |request| {
                let request = request
                    .header("X-API-Key", key.clone())
                    .header("Content-Type", "application/json");
                match body {
                    Some(body) => request.body(body),
                    None => request,
                }
            })
            .await;
        assert_eq!(
            answer.status.as_u16(),
            status,
            "{method} {path}: {}",
            answer.body
        );
        assert_eq!(
            answer.body["code"], code,
            "{method} {path}: {}",
            answer.body
        );
        assert_eq!(answer.body["success"], false);
        assert_request_id(&answer.body);
        let message = answer.body["message"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{method} {path}: message {message:?} lacks {needle:?}"
        );
    }
    // Nothing above changed the account beyond the one instance.
    assert_eq!(sim.handle.state().instances.len(), 1);
    assert!(sim.handle.state().volumes.iter().all(|v| v.bootable));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn each_account_sees_its_own_resources_and_the_ledger_names_who_acted() {
    let sim = start(SimulatorConfig {
        api_keys: vec!["first-a".into(), "first-b".into()],
        other_accounts: vec![vec!["second-a".into()]],
        keep_ledger: true,
        ..config()
    })
    .await;
    let with_key = |key: &'static str| move |r: reqwest::RequestBuilder| r.header("X-API-Key", key);
    let volume = |name: &str| json!({"name": name, "size": 10, "region": "us-east-1"});
    let first = sim
        .send_with(
            Method::POST,
            "/volumes/",
            Some(volume("one")),
            with_key("first-b"),
        )
        .await
        .ok()["volume"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let second = sim
        .send_with(
            Method::POST,
            "/volumes/",
            Some(volume("two")),
            with_key("second-a"),
        )
        .await
        .ok()["volume"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(first, second, "ids are unique across accounts");
    // Both keys of the first account see its volume; the second account sees only its own,
    // and cannot act on the other's.
    for key in ["first-a", "first-b"] {
        let listed = sim
            .send_with(Method::GET, "/volumes/", None, with_key(key))
            .await
            .ok();
        let names: Vec<&str> = listed["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        assert_eq!(names, ["one"], "{key}");
    }
    sim.send_with(
        Method::DELETE,
        &format!("/volumes/{first}/"),
        None,
        with_key("second-a"),
    )
    .await
    .error(404, "NOT_FOUND");
    assert_eq!(sim.handle.state().volumes.len(), 1);
    let other = sim.handle.account_state(1).unwrap();
    assert_eq!(other.volumes.len(), 1);
    assert_eq!(other.volumes[0].id, second);
    assert!(sim.handle.account_state(2).is_none());
    sim.send_with(
        Method::POST,
        &format!("/volumes/{second}/resize/"),
        Some(json!({"size": 20})),
        with_key("second-a"),
    )
    .await
    .ok();

    // Only calls that acted, with who made them, what they named and what they created.
    let entry = |operation: &str,
                 account,
                 key,
                 named: &[&str],
                 name: Option<&str>,
                 created: Option<&str>| {
        LedgerEntry {
            operation: operation.to_string(),
            caller: Caller { account, key },
            named: named.iter().map(|id| id.to_string()).collect(),
            name: name.map(str::to_string),
            created: created.map(str::to_string),
            at_ms: 0,
        }
    };
    let ledger = sim.handle.ledger();
    // The admin API serves the same ledger.
    let served = sim.admin(Method::GET, "/_admin/ledger", None).await;
    assert_eq!(served.status, 200, "{}", served.body);
    assert_eq!(served.body, serde_json::to_value(&ledger).unwrap());
    assert!(
        ledger.windows(2).all(|w| w[0].at_ms <= w[1].at_ms) && ledger[0].at_ms > 0,
        "{ledger:?}"
    );
    assert_eq!(
        ledger
            .into_iter()
            .map(|entry| LedgerEntry { at_ms: 0, ..entry })
            .collect::<Vec<_>>(),
        [
            entry("CreateVolume", 0, 1, &[], Some("one"), Some(&first)),
            entry("CreateVolume", 1, 0, &[], Some("two"), Some(&second)),
            entry("ResizeVolume", 1, 0, &[&second], None, None),
        ]
    );
    sim.handle.reset();
    assert!(sim.handle.ledger().is_empty());
    assert!(sim.handle.account_state(1).unwrap().volumes.is_empty());
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn calls_are_counted_under_the_account_of_their_key() {
    let sim = start(SimulatorConfig {
        api_keys: vec!["first-a".into()],
        other_accounts: vec![vec!["second-a".into(), "second-b".into()]],
        ..config()
    })
    .await;
    let with_key = |key: &'static str| move |r: reqwest::RequestBuilder| r.header("X-API-Key", key);
    sim.send_with(Method::GET, "/balance/", None, with_key("first-a"))
        .await
        .ok();
    for key in ["second-a", "second-b"] {
        sim.send_with(Method::GET, "/balance/", None, with_key(key))
            .await
            .ok();
    }
    sim.send_with(
        Method::GET,
        "/volumes/vol-missing/",
        None,
        with_key("second-b"),
    )
    .await
    .error(404, "NOT_FOUND");
    // A call without an accepted key belongs to no account.
    sim.send_with(Method::GET, "/balance/", None, with_key("nobody"))
        .await
        .error(401, "INVALID_API_KEY");

    let counters = sim.handle.counters();
    assert_eq!(counters.operations["GetBalance"][&200], 3);
    assert_eq!(counters.operations["GetBalance"][&401], 1);
    assert_eq!(counters.received["GetBalance"], 4);
    let first = counters.of_account(0);
    assert_eq!(first["GetBalance"][&200], 1);
    assert_eq!(first.len(), 1, "{first:?}");
    let second = counters.of_account(1);
    assert_eq!(second["GetBalance"][&200], 2);
    assert_eq!(second["GetVolume"][&404], 1);
    assert!(counters.of_account(2).is_empty());
    assert!(!counters.by_account.values().any(|operations| {
        operations
            .values()
            .any(|statuses| statuses.contains_key(&401))
    }));
    // The admin API answers the same, keyed by the account's index.
    let read = sim.admin(Method::GET, "/_admin/counters", None).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body["by_account"]["0"]["GetBalance"]["200"], 1);
    assert_eq!(read.body["by_account"]["1"]["GetBalance"]["200"], 2);
    assert_eq!(read.body["by_account"]["1"]["GetVolume"]["404"], 1);

    sim.handle.reset();
    assert!(sim.handle.counters().by_account.is_empty());
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn admin_state_answers_the_account_of_the_query() {
    let sim = start(SimulatorConfig {
        other_accounts: vec![vec!["second-a".into()]],
        ..config()
    })
    .await;
    let first = sim.instance("vm-first", "advanced").await;
    let second = sim
        .send_with(
            Method::POST,
            "/instances/",
            Some(json!({
                "name": "vm-second", "region": "us-east-1", "gpu_type": "L40S", "gpu_count": 1,
                "image_id": "ubuntu-22.04-cuda-12", "tier": "advanced",
            })),
            |r| r.header("X-API-Key", "second-a"),
        )
        .await
        .ok()["instance"]["instance_id"]
        .as_str()
        .unwrap()
        .to_string();
    let instance_ids = |state: &Value| -> Vec<String> {
        state["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|instance| instance["instance_id"].as_str().unwrap().to_string())
            .collect()
    };
    for (path, expected) in [
        ("/_admin/state", &first),
        ("/_admin/state?account=0", &first),
        ("/_admin/state?account=1", &second),
    ] {
        let state = sim.admin(Method::GET, path, None).await;
        assert_eq!(state.status, 200, "{path}: {}", state.body);
        assert_eq!(instance_ids(&state.body), [expected.as_str()], "{path}");
        assert_eq!(state.body["currency"], "USD", "{path}");
        // The counts are those of the snapshot, kind by kind.
        let counted = sim
            .admin(Method::GET, &path.replace("/state", "/holdings"), None)
            .await;
        assert_eq!(counted.status, 200, "{path}: {}", counted.body);
        for kind in [
            "instances",
            "volumes",
            "snapshots",
            "images",
            "firewalls",
            "ssh_keys",
        ] {
            assert_eq!(
                counted.body[kind].as_u64(),
                state.body[kind].as_array().map(|a| a.len() as u64),
                "{path}: {kind}"
            );
        }
    }
    sim.admin(Method::GET, "/_admin/holdings?account=2", None)
        .await
        .error(404, "NOT_FOUND");
    for unknown in ["2", "18446744073709551615"] {
        let answer = sim
            .admin(
                Method::GET,
                &format!("/_admin/state?account={unknown}"),
                None,
            )
            .await;
        answer.error(404, "NOT_FOUND");
        assert!(
            answer.body["message"].as_str().unwrap().contains("account"),
            "{}",
            answer.body
        );
    }
    for malformed in [
        "account=one",
        "account=-1",
        "account=",
        "acount=1",
        "account=1&account=1",
    ] {
        sim.admin(Method::GET, &format!("/_admin/state?{malformed}"), None)
            .await
            .error(400, "VALIDATION_ERROR");
    }
    // The token comes before the query.
    sim.send_with(Method::GET, "/_admin/state?account=9", None, |r| r)
        .await
        .error(401, "INVALID_ADMIN_TOKEN");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn api_key_is_required_and_never_opens_the_admin_api() {
    let sim = start(SimulatorConfig {
        api_keys: vec!["key-one".into(), "key-two".into()],
        ..config()
    })
    .await;
    sim.send_with(Method::GET, "/balance/", None, |r| r)
        .await
        .error(401, "INVALID_API_KEY");
    sim.send_with(Method::GET, "/balance/", None, |r| {
        r.header("X-API-Key", "wrong")
    })
    .await
    .error(401, "INVALID_API_KEY");
    // A shown route answers 401 before looking at the body or the id.
    sim.send_with(Method::DELETE, "/snapshots/x/delete/", None, |r| {
        r.header("X-API-Key", "key-one-but-longer")
    })
    .await
    .error(401, "INVALID_API_KEY");
    for key in ["key-one", "key-two"] {
        sim.send_with(Method::GET, "/balance/", None, |r| {
            r.header("X-API-Key", key)
        })
        .await
        .ok();
    }
    // The error never echoes the key.
    let wrong = sim
        .send_with(Method::GET, "/balance/", None, |r| {
            r.header("X-API-Key", "leaky-key-value")
        })
        .await;
    assert!(!wrong.body.to_string().contains("leaky-key-value"));

    // Admin: the API key does not work, in either header.
    sim.send_with(Method::GET, "/_admin/state", None, |r| {
        r.header("X-API-Key", "key-one")
    })
    .await
    .error(401, "INVALID_ADMIN_TOKEN");
    sim.send_with(Method::GET, "/_admin/state", None, |r| {
        r.bearer_auth("key-one")
    })
    .await
    .error(401, "INVALID_ADMIN_TOKEN");
    let state = sim.admin(Method::GET, "/_admin/state", None).await;
    assert_eq!(state.status, 200);
    sim.handle.shutdown().await;

    // Without an admin token the admin API does not exist.
    let sim = start(SimulatorConfig {
        admin_token: None,
        ..config()
    })
    .await;
    sim.admin(Method::GET, "/_admin/state", None)
        .await
        .error(404, "ROUTE_NOT_FOUND");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn admin_reads_state_and_counters_sets_balance_and_resets() {
    let sim = start(config()).await;
    let vm = sim.instance("vm-a", "advanced").await;
    sim.get("/instances/vm-missing/")
        .await
        .error(404, "NOT_FOUND");
    sim.send_with(Method::GET, "/balance/", None, |r| r)
        .await
        .error(401, "INVALID_API_KEY");
    sim.get("/not-a-route/").await.error(404, "ROUTE_NOT_FOUND");

    let state = sim.admin(Method::GET, "/_admin/state", None).await;
    assert_eq!(state.status, 200);
    assert_eq!(state.body["instances"][0]["instance_id"], vm.as_str());
    assert_eq!(state.body["volumes"].as_array().unwrap().len(), 1);
    assert_eq!(state.body["currency"], "USD");
    assert!(state.body["balance"].as_f64().unwrap() <= 1000.0);
    assert_eq!(
        state.body["instance_billing"][0]["instance_id"],
        vm.as_str()
    );

    let counters = sim.admin(Method::GET, "/_admin/counters", None).await.body;
    assert_eq!(counters["operations"]["CreateInstance"]["200"], 1);
    assert_eq!(counters["operations"]["GetInstance"]["404"], 1);
    assert_eq!(counters["operations"]["GetBalance"]["401"], 1);
    assert_eq!(counters["unmatched"], 1);
    assert_eq!(sim.handle.call_counts()["CreateInstance"], 1);

    let set = sim
        .admin(
            Method::PUT,
            "/_admin/balance",
            Some(json!({"balance": 0.5})),
        )
        .await;
    assert_eq!(set.status, 200);
    let balance = sim.get("/balance/").await.ok();
    assert!(balance["balance"].as_f64().unwrap() <= 0.5);
    assert_eq!(balance["currency"], "USD");
    sim.admin(
        Method::PUT,
        "/_admin/balance",
        Some(json!({"balance": "lots"})),
    )
    .await
    .error(400, "VALIDATION_ERROR");
    sim.admin(
        Method::PUT,
        "/_admin/faults",
        Some(json!({"error_rate": 2.0})),
    )
    .await
    .error(400, "VALIDATION_ERROR");
    sim.admin(
        Method::PUT,
        "/_admin/faults",
        Some(json!({"act_then_drop": {"NoSuchOperation": 1.0}})),
    )
    .await
    .error(400, "VALIDATION_ERROR");
    sim.admin(Method::DELETE, "/_admin/reset", None)
        .await
        .error(405, "METHOD_NOT_ALLOWED");

    let reset = sim.admin(Method::POST, "/_admin/reset", None).await;
    assert_eq!(reset.status, 200);
    let state = sim.handle.state();
    assert!(state.instances.is_empty() && state.volumes.is_empty());
    assert_eq!(state.balance, 1000.0);
    assert!(sim.handle.call_counts().is_empty());
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after_per_key() {
    let sim = start(SimulatorConfig {
        api_keys: vec!["first".into(), "second".into()],
        rate_limit: Some(RateLimit {
            per_second: 0.2,
            burst: 3,
        }),
        ..config()
    })
    .await;
    let with_key = |key: &'static str| move |r: reqwest::RequestBuilder| r.header("X-API-Key", key);
    for _ in 0..3 {
        sim.send_with(Method::GET, "/regions/", None, with_key("first"))
            .await
            .ok();
    }
    let limited = sim
        .send_with(Method::GET, "/regions/", None, with_key("first"))
        .await;
    limited.error(429, "RATE_LIMITED");
    let retry_after: u64 = limited.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=5).contains(&retry_after), "{retry_after}");
    // Another key has its own bucket.
    sim.send_with(Method::GET, "/regions/", None, with_key("second"))
        .await
        .ok();
    assert_eq!(sim.handle.counters().operations["ListRegions"][&429], 1);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn every_operation_refuses_junk_with_a_json_4xx() {
    let sim = start(config()).await;
    let key = sim.handle.api_key().to_string();
    for op in gpucloud_cloud::routes::Operation::ALL {
        let args: Vec<&str> = op.params().map(|_| "no-such-id").collect();
        let path = op.render(&args).unwrap();
        let method = Method::from_bytes(op.method().as_str().as_bytes()).unwrap();
        for junk in [
            "{\"unexpected\": [1, 2, {\"deep\": null}]}",
            "not json",
            "[]",
        ] {
            let answer = sim
                .send_with(method.clone(), &path, None, |request| {
                    request
                        .header("X-API-Key", key.clone())
                        .header("Content-Type", "application/json")
                        .body(junk)
                })
                .await;
            let status = answer.status.as_u16();
            if status == 200 {
                // Operations without a body or id may ignore unknown fields: still enveloped.
                assert_eq!(answer.body["success"], true, "{op} {junk}: {}", answer.body);
                continue;
            }
            assert!(
                (400..500).contains(&status),
                "{op} {junk}: {status} {}",
                answer.body
            );
            assert_eq!(answer.body["success"], false, "{op}: {}", answer.body);
            assert!(answer.body["code"].is_string(), "{op}: {}", answer.body);
            assert_request_id(&answer.body);
        }
    }
    // Nothing was created by junk.
    let state = sim.handle.state();
    assert!(state.instances.is_empty() && state.volumes.is_empty() && state.ssh_keys.is_empty());
    sim.handle.shutdown().await;
}

/// The GPUs free of a type in a region, as the stock catalog lists them.
async fn listed_stock(sim: &Sim, gpu_type: &str, region: &str) -> u64 {
    let stock = sim.get("/gpus/stock/").await.ok();
    stock["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["gpu_type"] == gpu_type && s["region"] == region)
        .and_then(|s| s["available"].as_u64())
        .unwrap()
}

#[tokio::test]
async fn stock_is_set_by_the_admin_taken_by_creates_and_given_back_by_deletes() {
    let sim = start(config()).await;
    let set = sim
        .admin(
            Method::PUT,
            "/_admin/stock",
            Some(json!({"gpu_type": "L40S", "region": "us-east-1", "available": 1})),
        )
        .await;
    assert_eq!(set.status, 200);
    assert_eq!(listed_stock(&sim, "L40S", "us-east-1").await, 1);
    // Another region and another type keep the configured stock.
    assert_eq!(listed_stock(&sim, "L40S", "eu-west-1").await, 512);
    assert_eq!(listed_stock(&sim, "H100-80G", "us-east-1").await, 512);

    let vm = sim.instance("vm-a", "advanced").await;
    assert_eq!(listed_stock(&sim, "L40S", "us-east-1").await, 0);
    let create = json!({
        "name": "vm-b", "region": "us-east-1", "gpu_type": "L40S", "gpu_count": 1,
        "image_id": "ubuntu-22.04-cuda-12",
    });
    let refused = sim.post("/instances/", create.clone()).await;
    refused.error(409, "INSUFFICIENT_STOCK");
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap()
            .contains("L40S GPUs in stock in us-east-1"),
        "{}",
        refused.body
    );

    // Setting the stock while a machine holds a GPU counts only the free ones.
    let set = sim
        .admin(
            Method::PUT,
            "/_admin/stock",
            Some(json!({"gpu_type": "L40S", "region": "us-east-1", "available": 0})),
        )
        .await;
    assert_eq!(set.status, 200);
    sim.delete(&format!("/instances/{vm}/")).await.ok();
    sim.settle();
    assert_eq!(listed_stock(&sim, "L40S", "us-east-1").await, 1);
    sim.post("/instances/", create).await.ok();
    assert_eq!(listed_stock(&sim, "L40S", "us-east-1").await, 0);

    for (body, field) in [
        (
            json!({"gpu_type": "Z9", "region": "us-east-1", "available": 1}),
            "gpu_type",
        ),
        (
            json!({"gpu_type": "L40S", "region": "mars-1", "available": 1}),
            "region",
        ),
        (
            json!({"gpu_type": "L40S", "region": "us-east-1", "available": -1}),
            "available",
        ),
    ] {
        let answer = sim.admin(Method::PUT, "/_admin/stock", Some(body)).await;
        answer.error(400, "VALIDATION_ERROR");
        assert!(
            answer.body["message"].as_str().unwrap().contains(field),
            "{}",
            answer.body
        );
    }
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn prices_set_by_the_admin_show_in_the_catalogs_quotes_and_new_machines() {
    let sim = start(config()).await;
    let running = sim.instance("old", "advanced").await;
    let set = sim
        .admin(
            Method::PUT,
            "/_admin/prices",
            Some(json!({"gpu_type": "L40S", "price_per_gpu_hour": 0.5})),
        )
        .await;
    assert_eq!(set.status, 200);
    let pricing = sim.get("/pricing/").await.ok();
    let price = |body: &Value, key: &str| {
        body[key]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["gpu_type"] == "L40S")
            .and_then(|g| g["price_per_gpu_hour"].as_f64())
            .unwrap()
    };
    assert_eq!(price(&pricing, "gpus"), 0.5);
    assert_eq!(price(&sim.get("/gpus/specs/").await.ok(), "gpus"), 0.5);
    let quote = sim
        .post("/pricing/", json!({"gpu_type": "L40S", "gpu_count": 2}))
        .await
        .ok();
    assert_eq!(quote["hourly_rate"], 1.0);
    let new = sim
        .post(
            "/instances/",
            json!({
                "name": "new", "region": "us-east-1", "gpu_type": "L40S", "gpu_count": 1,
                "image_id": "ubuntu-22.04-cuda-12",
            }),
        )
        .await
        .ok();
    assert_eq!(new["instance"]["billing"]["hourly_rate"], 0.5);
    // A machine running before the change keeps its rate.
    let old = sim.get(&format!("/instances/{running}/")).await.ok();
    assert_eq!(old["instance"]["billing"]["hourly_rate"], 1.1);
    sim.admin(
        Method::PUT,
        "/_admin/prices",
        Some(json!({"gpu_type": "L40S", "price_per_gpu_hour": 0})),
    )
    .await
    .error(400, "VALIDATION_ERROR");
    sim.handle.shutdown().await;
}
