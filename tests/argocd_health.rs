#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The Argo CD health check (`deploy/argocd/health.lua`) run in Lua 5.1, the language of
//! Argo CD's gopher-lua, the way Argo CD runs it (the live object as the global `obj`, the
//! returned table read for `status` and `message`), on objects in every condition state the
//! operator writes; and the Application check the app-of-apps example's sync waves need. Also:
//! `deploy/argocd/argocd-cm.yaml` installs exactly those scripts (regenerate with
//! `UPDATE_GENERATED=1 cargo test --test argocd_health`).

use mlua::serde::SerializeOptions;
use mlua::{Lua, LuaSerdeExt, Table};
use serde_json::{Value, json};
use std::path::Path;

fn argocd_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/argocd")
}

fn script() -> String {
    read_script("health.lua")
}

fn read_script(name: &str) -> String {
    std::fs::read_to_string(argocd_dir().join(name)).unwrap()
}

/// (status, message) as Argo CD would show them.
fn health(object: &Value) -> (String, String) {
    run_health(&script(), object)
}

/// (status, message) of `script` run on `object` as Argo CD runs a health check.
fn run_health(script: &str, object: &Value) -> (String, String) {
    let lua = Lua::new();
    // Argo CD's objects have no JSON nulls: absent fields are nil.
    let options = SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false);
    let obj = lua.to_value_with(object, options).unwrap();
    lua.globals().set("obj", obj).unwrap();
    let result: Table = lua.load(script).set_name("health.lua").eval().unwrap();
    (
        result.get("status").unwrap(),
        result.get("message").unwrap(),
    )
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-11-22T09:00:00Z", "observedGeneration": 2})
}

fn object(generation: i64, status: Value) -> Value {
    let mut object = json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
        "metadata": {"name": "train-1", "namespace": "ml-team", "generation": generation},
        "spec": {"region": "us-east-1", "gpuType": "H100-80G", "gpuCount": 1},
    });
    if !status.is_null() {
        object["status"] = status;
    }
    object
}

fn status(observed: i64, conditions: Vec<Value>) -> Value {
    json!({"observedGeneration": observed, "state": "ACTIVE", "conditions": conditions})
}

#[test]
fn every_condition_state_has_its_argocd_health() {
    let ready = || {
        condition(
            "Ready",
            "True",
            "Available",
            "vm-7 is running (203.0.113.210)",
        )
    };
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "Ready",
            object(2, status(2, vec![ready()])),
            "Healthy",
            "Available: vm-7 is running (203.0.113.210)",
        ),
        (
            "Reconciling",
            object(
                2,
                status(
                    2,
                    vec![
                        condition("Ready", "False", "Provisioning", "vm-7 is CREATING"),
                        condition("Reconciling", "True", "Provisioning", "vm-7 is CREATING"),
                    ],
                ),
            ),
            "Progressing",
            "Provisioning: vm-7 is CREATING",
        ),
        (
            "Stalled",
            object(
                2,
                status(
                    2,
                    vec![
                        condition("Ready", "False", "PriceAboveLimit", "3.5 > 2.0"),
                        condition("Stalled", "True", "PriceAboveLimit", "3.5 > 2.0"),
                    ],
                ),
            ),
            "Degraded",
            "PriceAboveLimit: 3.5 > 2.0",
        ),
        (
            "no status yet",
            object(1, Value::Null),
            "Progressing",
            "Waiting for the operator to report",
        ),
        (
            "a status without conditions",
            object(1, json!({"observedGeneration": 1})),
            "Progressing",
            "Waiting for the operator to report",
        ),
        (
            "observedGeneration behind",
            object(3, status(2, vec![ready()])),
            "Progressing",
            "Waiting for the operator to observe generation 3",
        ),
        (
            "no observedGeneration",
            object(1, json!({"conditions": [ready()]})),
            "Progressing",
            "Waiting for the operator to observe generation 1",
        ),
        (
            "Ready False, nothing else",
            object(
                2,
                status(
                    2,
                    vec![condition(
                        "Ready",
                        "False",
                        "WaitingForReference",
                        "SshKey dev-key",
                    )],
                ),
            ),
            "Progressing",
            "WaitingForReference: SshKey dev-key",
        ),
        (
            "Ready True while still reconciling",
            object(
                2,
                status(
                    2,
                    vec![
                        ready(),
                        condition("Reconciling", "True", "Updating", "attaching fw-3"),
                    ],
                ),
            ),
            "Progressing",
            "Updating: attaching fw-3",
        ),
        (
            "Stalled wins over a stale Ready",
            object(
                2,
                status(
                    2,
                    vec![
                        ready(),
                        condition("Stalled", "True", "ExternalDeleted", "vm-7 is gone"),
                    ],
                ),
            ),
            "Degraded",
            "ExternalDeleted: vm-7 is gone",
        ),
    ];
    for (state, object, want_status, want_message) in cases {
        assert_eq!(
            health(&object),
            (want_status.to_string(), want_message.to_string()),
            "{state}"
        );
    }

    let mut deleting = object(2, status(2, vec![ready()]));
    deleting["metadata"]["deletionTimestamp"] = json!("2026-11-22T10:00:00Z");
    deleting["metadata"]["finalizers"] = json!(["gpucloud.io/cleanup"]);
    assert_eq!(health(&deleting).0, "Progressing", "deleting");

    let mut paused = object(2, status(2, vec![ready()]));
    paused["metadata"]["annotations"] = json!({"gpucloud.io/paused": "true"});
    assert_eq!(health(&paused).0, "Suspended", "paused");
}

/// The app-of-apps' Application check (deploy/argocd/application-health.lua): a child holds
/// the next sync wave until it is both synced and healthy.
#[test]
fn an_application_is_healthy_once_synced_and_healthy() {
    let script = read_script("application-health.lua");
    let application = |health: Option<&str>, sync: Option<&str>| {
        let mut status = json!({});
        if let Some(health) = health {
            status["health"] = json!({"status": health});
        }
        if let Some(sync) = sync {
            status["sync"] = json!({"status": sync});
        }
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": "gpucloud-crds", "namespace": "argocd"}, "status": status})
    };
    for (health, sync, expected) in [
        (Some("Healthy"), Some("Synced"), "Healthy"),
        // Its objects read healthy, but the sync has not applied everything (e.g. a kind the
        // server does not serve yet): the next wave waits.
        (Some("Healthy"), Some("OutOfSync"), "Progressing"),
        (Some("Missing"), Some("OutOfSync"), "Progressing"),
        (Some("Progressing"), Some("Synced"), "Progressing"),
        (Some("Degraded"), Some("Synced"), "Degraded"),
        (None, None, "Progressing"),
    ] {
        let (status, message) = run_health(&script, &application(health, sync));
        assert_eq!(status, expected, "{health:?} {sync:?}: {message}");
    }
    let unsynced = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                          "metadata": {"name": "gpucloud-crds", "namespace": "argocd"}});
    assert_eq!(run_health(&script, &unsynced).0, "Progressing");
}

const CM_HEADER: &str =
    "# Argo CD health checks: deploy/argocd/health.lua for each gpucloud.io kind, and
# deploy/argocd/application-health.lua for Applications (the app-of-apps' sync waves).
# Generated by tests/argocd_health.rs (UPDATE_GENERATED=1 cargo test --test argocd_health).
# Merge into Argo CD's settings:
#   kubectl -n argocd patch configmap argocd-cm --patch-file deploy/argocd/argocd-cm.yaml
";

#[test]
fn argocd_cm_installs_the_script_for_every_kind() {
    let script = script();
    let mut text = format!(
        "{CM_HEADER}apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\n  labels:\n    app.kubernetes.io/name: argocd-cm\n    app.kubernetes.io/part-of: argocd\ndata:\n"
    );
    // The catalog's kinds (GpuOffering) have no conditions and are never in a repository.
    let catalogs = gpucloud_controller::kinds::registry::catalog_crds();
    let mut kinds: Vec<String> = gpucloud_controller::kinds::registry::crds()
        .into_iter()
        .filter(|crd| !catalogs.contains(crd))
        .map(|crd| crd.spec.names.kind)
        .collect();
    kinds.sort();
    let mut checks: Vec<(String, String)> = kinds
        .iter()
        .map(|kind| (format!("gpucloud.io_{kind}"), script.clone()))
        .collect();
    checks.push((
        "argoproj.io_Application".into(),
        read_script("application-health.lua"),
    ));
    for (key, script) in &checks {
        text.push_str(&format!("  resource.customizations.health.{key}: |\n"));
        for line in script.lines() {
            if line.is_empty() {
                text.push('\n');
            } else {
                text.push_str(&format!("    {line}\n"));
            }
        }
    }
    let path = argocd_dir().join("argocd-cm.yaml");
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap();
    assert!(
        on_disk == text,
        "{} is out of date; regenerate with UPDATE_GENERATED=1 cargo test --test argocd_health",
        path.display()
    );
    // What Argo CD reads: each key holds the script itself.
    let config: Value = serde_saphyr::from_str(&on_disk).unwrap();
    let data = config["data"].as_object().unwrap();
    assert_eq!(data.len(), checks.len());
    for (key, script) in &checks {
        assert_eq!(
            data[&format!("resource.customizations.health.{key}")],
            json!(script),
            "{key}"
        );
    }
}
