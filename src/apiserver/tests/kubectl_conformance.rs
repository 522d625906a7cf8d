//! Conformance of the embedded API server with the installed `kubectl` (v1.32): each test
//! starts a server, writes its kubeconfig into a temporary directory and drives kubectl
//! against it, checking what a user would see.
//!
//! These tests need `/usr/bin/kubectl` (or `kubectl` on `PATH`, or `$KUBECTL`); without it
//! they fail saying so. Every expected output below is what kubectl prints against a real
//! kube-apiserver for the same requests (kubectl's own messages, from its sources in
//! `staging/src/k8s.io/kubectl/pkg/cmd/`), unless a comment says otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpucloud_apiserver::ApiServerConfig;
use serde_json::Value;

use crate::kubectl_support;

use kubectl_support::*;

// === fixtures ===

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gpuinstances.gpucloud.io
spec:
  group: gpucloud.io
  names:
    kind: GpuInstance
    listKind: GpuInstanceList
    plural: gpuinstances
    singular: gpuinstance
    shortNames: [gi]
    categories: [gpucloud]
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: GPU
      type: string
      jsonPath: .spec.gpuType
    - name: Count
      type: integer
      jsonPath: .spec.count
    - name: Ready
      type: string
      jsonPath: .status.conditions[?(@.type=="Ready")].status
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        description: A GPU virtual machine in the cloud.
        properties:
          spec:
            type: object
            description: The desired machine.
            required: [gpuType, count]
            x-kubernetes-validations:
            - rule: "self.count <= 8 || self.gpuType != 'H100'"
              message: "at most 8 H100 GPUs per instance"
            properties:
              gpuType:
                type: string
                description: The GPU model.
                enum: [H100, A100, L4]
              count:
                type: integer
                description: How many GPUs.
                minimum: 1
                maximum: 16
          status:
            type: object
            properties:
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
                    reason: {type: string}
                    message: {type: string}
                    lastTransitionTime: {type: string, format: date-time}
"#;

/// A ConfigMap manifest. (kubectl's imperative `create configmap` sends protobuf, which this
/// server does not decode; see docs/apiserver.md.)
fn config_map(name: &str, data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  {data}\n")
}

fn instance(name: &str, gpu_type: &str, count: i64) -> String {
    format!(
        "apiVersion: gpucloud.io/v1\nkind: GpuInstance\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  gpuType: {gpu_type}\n  count: {count}\n"
    )
}

async fn install_crd(cluster: &Cluster) {
    cluster.apply_stdin(&[], CRD).await.ok();
    cluster
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "crd/gpuinstances.gpucloud.io",
        ])
        .await
        .ok();
}

// === tests ===

#[tokio::test]
async fn discovery_and_version_work_with_kubectl() {
    let cluster = Cluster::start().await;
    let versions = cluster.kubectl(&["version", "-o", "json"]).await.ok();
    let versions: Value = serde_json::from_str(&versions).unwrap();
    assert_eq!(versions["serverVersion"]["major"], "1");

    let resources = cluster.kubectl(&["api-resources"]).await.ok();
    for expected in [
        "configmaps",
        "namespaces",
        "secrets",
        "leases",
        "customresourcedefinitions",
    ] {
        assert!(
            resources.contains(expected),
            "{expected} missing:\n{resources}"
        );
    }

    let explained = cluster.kubectl(&["explain", "configmap.data"]).await.ok();
    assert!(explained.contains("KIND:       ConfigMap"), "{explained}");
    assert!(explained.contains("map[string]string"), "{explained}");

    let namespaces = cluster.kubectl(&["get", "namespaces"]).await.ok();
    // kubectl's table header for namespaces against a real server.
    assert!(namespaces.starts_with("NAME"), "{namespaces}");
    assert!(namespaces.contains("STATUS"), "{namespaces}");
    assert!(namespaces.contains("default"), "{namespaces}");
    assert!(namespaces.contains("Active"), "{namespaces}");
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn configmaps_create_get_and_patch_with_merge_and_json_patches() {
    let cluster = Cluster::start().await;
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels:\n    app: trainer\ndata:\n  a: \"1\"\n  b: \"2\"\n";
    let created = cluster
        .kubectl_with_input(&["create", "-f", "-"], Some(manifest))
        .await
        .ok();
    assert_eq!(created.trim(), "configmap/settings created");
    // Creating it again is AlreadyExists, as kubectl reports it from a real server.
    let again = cluster
        .kubectl_with_input(&["create", "-f", "-"], Some(manifest))
        .await
        .fails();
    assert!(
        again.contains(r#"configmaps "settings" already exists"#),
        "{again}"
    );

    // Server-side printing: the built-in ConfigMap columns.
    let table = cluster
        .kubectl(&["get", "configmaps", "settings"])
        .await
        .ok();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DATA", "AGE"]);
    assert!(
        table.lines().nth(1).unwrap().starts_with("settings"),
        "{table}"
    );
    assert!(table.contains(" 2 "), "{table}");

    let merge = cluster
        .kubectl(&[
            "patch",
            "configmap",
            "settings",
            "--type=merge",
            "-p",
            r#"{"data":{"c":"3"}}"#,
        ])
        .await
        .ok();
    assert_eq!(merge.trim(), "configmap/settings patched");
    cluster
        .kubectl(&[
            "patch",
            "configmap",
            "settings",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/data/a"}]"#,
        ])
        .await
        .ok();
    let object = cluster.get_json(&["configmap", "settings"]).await;
    assert_eq!(object["data"], serde_json::json!({"b": "2", "c": "3"}));
    // A JSON patch whose test fails changes nothing and is reported as invalid.
    let failed = cluster
        .kubectl(&[
            "patch",
            "configmap",
            "settings",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/data/b","value":"wrong"}]"#,
        ])
        .await
        .fails();
    // A failed `test` operation is a 422 without a kind, which kubectl renders this way.
    assert!(failed.contains("The request is invalid"), "{failed}");
    assert!(failed.contains("test failed"), "{failed}");
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn strategic_merge_patch_on_a_configmap() {
    let cluster = Cluster::start().await;
    cluster
        .kubectl_with_input(
            &["create", "-f", "-"],
            Some(&config_map("settings", "a: \"1\"")),
        )
        .await
        .ok();
    let patched = cluster
        .kubectl(&[
            "patch",
            "configmap",
            "settings",
            "--type=strategic",
            "-p",
            r#"{"data":{"d":"4"},"metadata":{"labels":{"tier":"gpu"}}}"#,
        ])
        .await
        .ok();
    assert_eq!(patched.trim(), "configmap/settings patched");
    let object = cluster.get_json(&["configmap", "settings"]).await;
    assert_eq!(object["data"], serde_json::json!({"a": "1", "d": "4"}));
    assert_eq!(object["metadata"]["labels"]["tier"], "gpu");
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn client_side_and_server_side_apply() {
    let cluster = Cluster::start().await;
    let first = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  keep: \"1\"\n  drop: \"2\"\n";
    assert_eq!(
        cluster.apply_stdin(&[], first).await.ok().trim(),
        "configmap/applied created"
    );
    let object = cluster.get_json(&["configmap", "applied"]).await;
    assert!(
        object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string(),
        "{object}"
    );
    // Removing a key from the manifest removes it from the object (three-way merge).
    let second = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  keep: \"1\"\n  added: \"3\"\n";
    assert_eq!(
        cluster.apply_stdin(&[], second).await.ok().trim(),
        "configmap/applied configured"
    );
    assert_eq!(
        cluster.apply_stdin(&[], second).await.ok().trim(),
        "configmap/applied unchanged"
    );
    let object = cluster.get_json(&["configmap", "applied"]).await;
    assert_eq!(
        object["data"],
        serde_json::json!({"keep": "1", "added": "3"})
    );

    let server_side =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  owner: kubectl\n";
    assert_eq!(
        cluster
            .apply_stdin(&["--server-side"], server_side)
            .await
            .ok()
            .trim(),
        "configmap/ssa serverside-applied"
    );
    // kubectl hides managedFields unless asked to show them.
    let object = cluster
        .get_json(&["configmap", "ssa", "--show-managed-fields"])
        .await;
    let managers: Vec<&str> = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["manager"].as_str().unwrap())
        .collect();
    assert!(managers.contains(&"kubectl"), "{object}");
    // Another manager's conflicting apply is refused without --force-conflicts...
    let conflicting =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  owner: other\n";
    let refused = cluster
        .apply_stdin(&["--server-side", "--field-manager=other"], conflicting)
        .await
        .fails();
    assert!(refused.contains("conflict"), "{refused}");
    // ...and taken over with it.
    cluster
        .apply_stdin(
            &[
                "--server-side",
                "--field-manager=other",
                "--force-conflicts",
            ],
            conflicting,
        )
        .await
        .ok();
    let object = cluster.get_json(&["configmap", "ssa"]).await;
    assert_eq!(object["data"]["owner"], "other");
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn label_selected_and_paginated_lists() {
    let cluster = Cluster::start().await;
    let mut manifest = String::new();
    for index in 0..7 {
        let tier = if index % 2 == 0 { "even" } else { "odd" };
        manifest.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{index}\n  labels:\n    tier: {tier}\ndata: {{}}\n"
        ));
    }
    cluster
        .kubectl_with_input(&["create", "-f", "-"], Some(&manifest))
        .await
        .ok();
    let names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let even = cluster.get_json(&["configmaps", "-l", "tier=even"]).await;
    assert_eq!(names(&even), ["cm-0", "cm-2", "cm-4", "cm-6"]);
    let not_even = cluster
        .get_json(&["configmaps", "-l", "tier!=even,tier"])
        .await;
    assert_eq!(names(&not_even), ["cm-1", "cm-3", "cm-5"]);
    let set = cluster
        .get_json(&["configmaps", "-l", "tier in (odd),!missing"])
        .await;
    assert_eq!(names(&set), ["cm-1", "cm-3", "cm-5"]);

    // --chunk-size makes kubectl page with limit/continue; it must see every item once.
    let paged = cluster
        .kubectl(&["get", "configmaps", "--chunk-size=2", "-v=6", "-o", "name"])
        .await;
    let stdout = paged.stdout.clone();
    let log = paged.stderr.clone();
    paged.ok();
    let listed: Vec<&str> = stdout.lines().filter(|line| line.contains("cm-")).collect();
    assert_eq!(listed.len(), 7, "{stdout}");
    assert!(log.contains("continue="), "kubectl did not page:\n{log}");
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn stale_updates_conflict() {
    let cluster = Cluster::start().await;
    cluster
        .kubectl_with_input(
            &["create", "-f", "-"],
            Some(&config_map("shared", "v: \"1\"")),
        )
        .await
        .ok();
    let mut stale = cluster.get_json(&["configmap", "shared"]).await;
    cluster
        .kubectl(&[
            "patch",
            "configmap",
            "shared",
            "--type=merge",
            "-p",
            r#"{"data":{"v":"2"}}"#,
        ])
        .await
        .ok();
    stale["data"]["v"] = Value::from("3");
    let refused = cluster
        .kubectl_with_input(&["replace", "-f", "-"], Some(&stale.to_string()))
        .await
        .fails();
    // kube-apiserver's Conflict message for a stale resourceVersion (storage/errors.go,
    // registry/generic/registry/store.go).
    assert!(
        refused.contains(r#"Operation cannot be fulfilled on configmaps "shared": the object has been modified; please apply your changes to the latest version and try again"#),
        "{refused}"
    );
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn finalizers_hold_deletion_and_owner_references_collect_dependents() {
    let cluster = Cluster::start().await;
    let held = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [gpucloud.io/cleanup]\n";
    cluster
        .kubectl_with_input(&["create", "-f", "-"], Some(held))
        .await
        .ok();
    cluster
        .kubectl(&["delete", "configmap", "held", "--wait=false"])
        .await
        .ok();
    let object = cluster.get_json(&["configmap", "held"]).await;
    assert!(
        object["metadata"]["deletionTimestamp"].is_string(),
        "{object}"
    );
    cluster
        .kubectl(&[
            "patch",
            "configmap",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ])
        .await
        .ok();
    cluster
        .eventually("the released object is gone", async |cluster| {
            let outcome = cluster.kubectl(&["get", "configmap", "held"]).await;
            !outcome.success && outcome.stderr.contains("NotFound")
        })
        .await;

    cluster
        .kubectl_with_input(&["create", "-f", "-"], Some(&config_map("owner", "{}")))
        .await
        .ok();
    let owner = cluster.get_json(&["configmap", "owner"]).await;
    let uid = owner["metadata"]["uid"].as_str().unwrap();
    let dependent = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dependent\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: owner\n    uid: {uid}\n"
    );
    cluster
        .kubectl_with_input(&["create", "-f", "-"], Some(&dependent))
        .await
        .ok();
    cluster
        .kubectl(&["delete", "configmap", "owner"])
        .await
        .ok();
    cluster
        .eventually("the dependent is garbage-collected", async |cluster| {
            let outcome = cluster.kubectl(&["get", "configmap", "dependent"]).await;
            !outcome.success && outcome.stderr.contains("NotFound")
        })
        .await;
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn custom_resources_print_columns_explain_validate_and_wait() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;

    cluster
        .apply_stdin(&[], &instance("trainer", "A100", 4))
        .await
        .ok();
    let table = cluster.kubectl(&["get", "gpuinstances"]).await.ok();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "GPU", "COUNT", "READY", "AGE"], "{table}");
    // A column whose JSONPath finds nothing is a null cell, which kubectl prints blank.
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row.len(), 4, "{table}");
    assert_eq!(&row[..3], ["trainer", "A100", "4"], "{table}");
    // Short name and category resolve through discovery.
    assert!(
        cluster
            .kubectl(&["get", "gi"])
            .await
            .ok()
            .contains("trainer")
    );
    assert!(
        cluster
            .kubectl(&["get", "gpucloud"])
            .await
            .ok()
            .contains("trainer")
    );

    let explained = cluster.kubectl(&["explain", "gpuinstance.spec"]).await.ok();
    assert!(explained.contains("The desired machine."), "{explained}");
    assert!(explained.contains("gpuType"), "{explained}");
    assert!(explained.contains("The GPU model."), "{explained}");

    // Schema violations are rejected with the field named (422 Invalid, as kube-apiserver's
    // CRD validation reports them, apiextensions-apiserver customresource validation).
    let invalid = cluster
        .apply_stdin(&[], &instance("broken", "TPU", 0))
        .await
        .fails();
    assert!(invalid.contains("spec.gpuType"), "{invalid}");
    assert!(invalid.contains("spec.count"), "{invalid}");
    // The CEL rule's message comes back as written in the CRD.
    let cel = cluster
        .apply_stdin(&[], &instance("too-big", "H100", 12))
        .await
        .fails();
    assert!(cel.contains("at most 8 H100 GPUs per instance"), "{cel}");

    // kubectl diff asks the server for a dry-run of the change: exit 1 with the diff when
    // something would change (nothing is stored), exit 0 when nothing would.
    let diff = cluster
        .kubectl_with_input(&["diff", "-f", "-"], Some(&instance("trainer", "A100", 6)))
        .await;
    assert!(!diff.success, "{diff:?}");
    assert!(diff.stdout.contains("-  count: 4"), "{diff:?}");
    assert!(diff.stdout.contains("+  count: 6"), "{diff:?}");
    let unchanged = cluster.get_json(&["gpuinstance", "trainer"]).await;
    assert_eq!(unchanged["spec"]["count"], 4);
    let same = cluster
        .kubectl_with_input(&["diff", "-f", "-"], Some(&instance("trainer", "A100", 4)))
        .await;
    assert!(same.success && same.stdout.is_empty(), "{same:?}");

    // Server-side apply of a custom resource, creating and then changing it.
    for count in [2, 3] {
        let applied = cluster
            .apply_stdin(&["--server-side"], &instance("inference", "L4", count))
            .await
            .ok();
        assert_eq!(
            applied.trim(),
            "gpuinstance.gpucloud.io/inference serverside-applied"
        );
        assert_eq!(
            cluster.get_json(&["gpuinstance", "inference"]).await["spec"]["count"],
            count
        );
    }

    // kubectl wait sees a condition set through the status subresource.
    cluster
        .kubectl(&[
            "patch",
            "gpuinstance",
            "trainer",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Running","message":"up","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#,
        ])
        .await
        .ok();
    let waited = cluster
        .kubectl(&[
            "wait",
            "--for=condition=Ready",
            "--timeout=20s",
            "gpuinstance/trainer",
        ])
        .await
        .ok();
    assert_eq!(
        waited.trim(),
        "gpuinstance.gpucloud.io/trainer condition met"
    );
    let table = cluster
        .kubectl(&["get", "gpuinstance", "trainer"])
        .await
        .ok();
    assert!(table.lines().nth(1).unwrap().contains("True"), "{table}");
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn a_wrong_token_is_unauthorized() {
    let cluster = Cluster::start().await;
    let refused = cluster
        .kubectl(&["--token=not-the-token", "get", "configmaps"])
        .await
        .fails();
    // kubectl 1.32's rendering of the real server's 401 Status (client-go maps a 401 to
    // "the server has asked for the client to provide credentials").
    assert!(
        refused.contains("error: You must be logged in to the server"),
        "{refused}"
    );
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn kubeconfig_contexts_carry_distinct_identities_into_the_request_log() {
    let cluster = Cluster::start_with(ApiServerConfig {
        users: vec![
            ("admin-token-for-tests".to_owned(), "admin".to_owned()),
            (
                "operator-token-for-tests".to_owned(),
                "gpucloud-operator".to_owned(),
            ),
        ],
        ..ApiServerConfig::default()
    })
    .await;
    cluster.kubectl(&["get", "configmaps"]).await.ok();
    cluster
        .kubectl(&[
            "--context",
            "gpucloud-apiserver-gpucloud-operator",
            "get",
            "leases",
            "-n",
            "kube-system",
        ])
        .await
        .ok();
    let requests = cluster.server.requests();
    let admin_listed = requests.iter().any(|record| {
        record.user == "admin" && record.verb == "list" && record.resource == "configmaps"
    });
    let operator_listed = requests.iter().any(|record| {
        record.user == "gpucloud-operator"
            && record.verb == "list"
            && record.group == "coordination.k8s.io"
            && record.resource == "leases"
            && record.namespace == "kube-system"
    });
    assert!(admin_listed, "{requests:#?}");
    // kubectl's own view of the identities (SelfSubjectReview).
    let whoami = cluster
        .kubectl(&[
            "--context",
            "gpucloud-apiserver-gpucloud-operator",
            "auth",
            "whoami",
        ])
        .await
        .ok();
    assert!(whoami.contains("gpucloud-operator"), "{whoami}");
    let can = cluster
        .kubectl(&["auth", "can-i", "create", "configmaps"])
        .await
        .ok();
    assert_eq!(can.trim(), "yes");
    assert!(operator_listed, "{requests:#?}");
    // Discovery and OpenAPI reads are not resource requests and are not logged as such.
    assert!(
        requests.iter().all(|record| !record.resource.is_empty()),
        "{requests:#?}"
    );
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn builtin_kinds_print_kubectls_usual_columns() {
    let cluster = Cluster::start().await;
    let manifests = r#"
apiVersion: v1
kind: Event
metadata:
  name: ev1
involvedObject:
  kind: GpuInstance
  name: trainer
  namespace: default
reason: Provisioned
message: instance is up
type: Normal
count: 1
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: leader
spec:
  holderIdentity: operator-0
---
apiVersion: v1
kind: Secret
metadata:
  name: credentials
stringData:
  key: value
"#;
    cluster.apply_stdin(&[], manifests).await.ok();
    let header = |table: &str| -> Vec<String> {
        table
            .lines()
            .next()
            .unwrap_or_default()
            .split("  ")
            .map(str::trim)
            .filter(|cell| !cell.is_empty())
            .map(str::to_owned)
            .collect()
    };
    // The headers kubectl prints for these kinds against a real cluster.
    let events = cluster.kubectl(&["get", "events"]).await.ok();
    assert_eq!(
        header(&events),
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{events}"
    );
    assert!(events.contains("gpuinstance/trainer"), "{events}");
    let leases = cluster.kubectl(&["get", "leases"]).await.ok();
    assert_eq!(header(&leases), ["NAME", "HOLDER", "AGE"], "{leases}");
    assert!(leases.contains("operator-0"), "{leases}");
    let secrets = cluster.kubectl(&["get", "secrets"]).await.ok();
    assert_eq!(
        header(&secrets),
        ["NAME", "TYPE", "DATA", "AGE"],
        "{secrets}"
    );
    assert!(secrets.contains("Opaque"), "{secrets}");
    let crds = cluster.kubectl(&["get", "crds"]).await;
    assert!(crds.success, "{crds:?}");
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn kubectl_get_watch_prints_each_change_as_a_table_row() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    cluster
        .apply_stdin(&[], &instance("watched", "L4", 1))
        .await
        .ok();
    let mut watcher = cluster.spawn_kubectl(&["get", "gpuinstances", "--watch"]);
    // Wait for the initial listing before changing the object.
    let stdout = watcher.stdout.take().unwrap();
    // A plain thread reads the pipe; the test awaits lines without blocking the runtime the
    // server runs on.
    let (lines_sender, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if lines_sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut next_line = async |what: &str| {
        tokio::time::timeout(Duration::from_secs(15), lines.recv())
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no {what} line from kubectl get --watch"))
    };
    let header: Vec<String> = next_line("header")
        .await
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(header, ["NAME", "GPU", "COUNT", "READY", "AGE"]);
    let initial = next_line("initial row").await;
    assert!(initial.starts_with("watched"), "{initial}");
    cluster
        .kubectl(&[
            "patch",
            "gpuinstance",
            "watched",
            "--type=merge",
            "-p",
            r#"{"spec":{"count":2}}"#,
        ])
        .await
        .ok();
    // The change arrives as one more row with the printer columns, not a new table.
    let changed: Vec<String> = next_line("changed row")
        .await
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(&changed[..3], ["watched", "L4", "2"], "{changed:?}");
    watcher.kill().ok();
    watcher.wait().ok();
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn deleting_a_namespace_or_a_crd_removes_what_it_holds() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let manifests = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: inside\n  namespace: team\n---\napiVersion: gpucloud.io/v1\nkind: GpuInstance\nmetadata:\n  name: worker\n  namespace: team\nspec:\n  gpuType: L4\n  count: 1\n";
    cluster.apply_stdin(&[], manifests).await.ok();
    assert!(
        cluster
            .kubectl(&["get", "configmaps", "-n", "team"])
            .await
            .ok()
            .contains("inside")
    );

    // `kubectl delete namespace` waits until the namespace and its contents are gone.
    let deleted = cluster
        .kubectl(&["delete", "namespace", "team", "--timeout=20s"])
        .await
        .ok();
    assert_eq!(deleted.trim(), r#"namespace "team" deleted"#);
    let gone = cluster.kubectl(&["get", "namespace", "team"]).await.fails();
    assert!(gone.contains(r#"namespaces "team" not found"#), "{gone}");
    let listed = cluster
        .kubectl(&["get", "gpuinstances", "-A", "-o", "name"])
        .await
        .ok();
    assert!(!listed.contains("worker"), "{listed}");

    cluster
        .kubectl(&["delete", "crd", "gpuinstances.gpucloud.io", "--timeout=20s"])
        .await
        .ok();
    cluster
        .eventually("the resource type is no longer served", async |cluster| {
            let outcome = cluster.kubectl(&["get", "gpuinstances"]).await;
            !outcome.success
                && (outcome.stderr.contains("doesn't have a resource type")
                    || outcome
                        .stderr
                        .contains("could not find the requested resource"))
        })
        .await;
    let resources = cluster.kubectl(&["api-resources"]).await.ok();
    assert!(!resources.contains("gpuinstances"), "{resources}");
    cluster.server.shutdown().await;
}

/// The repository's own CRDs and basic examples, as a newcomer would try them.
fn repository_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

#[tokio::test]
async fn the_projects_crds_and_basic_examples_apply_cleanly() {
    let cluster = Cluster::start().await;
    let crds = repository_path("crds");
    let crds = crds.to_str().unwrap();
    let created = cluster.kubectl(&["apply", "-f", crds]).await.ok();
    let count = created.lines().count();
    assert!(count > 0, "{created}");
    assert!(
        created
            .lines()
            .all(|line| line.starts_with("customresourcedefinition.apiextensions.k8s.io/")),
        "{created}"
    );
    cluster
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "--all",
            "crd",
        ])
        .await
        .ok();

    let examples = repository_path("examples/quickstart");
    let applied = cluster
        .kubectl(&["apply", "-f", examples.to_str().unwrap()])
        .await
        .ok();
    assert!(
        applied.lines().all(|line| line.ends_with(" created")),
        "{applied}"
    );

    // Every served kind prints a table starting with NAME and can be explained.
    let resources = cluster
        .kubectl(&["api-resources", "--api-group=gpucloud.io", "-o", "name"])
        .await
        .ok();
    assert_eq!(resources.lines().count(), count, "{resources}");
    for resource in resources.lines() {
        let table = cluster.kubectl(&["get", resource, "-A"]).await;
        assert!(table.success, "{resource}: {table:?}");
        if !table.stdout.is_empty() {
            assert!(
                table.stdout.starts_with("NAMESPACE   NAME"),
                "{resource}: {}",
                table.stdout
            );
        }
        let plural = resource.split('.').next().unwrap();
        let explained = cluster
            .kubectl(&["explain", &format!("{plural}.spec")])
            .await
            .ok();
        assert!(explained.contains("FIELDS:"), "{resource}: {explained}");
    }
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn builtin_manifests_are_type_checked() {
    let cluster = Cluster::start().await;
    let wrong_type = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typed\ndata:\n  a: 1\n";
    let stderr = cluster
        .kubectl_with_input(&["create", "-f", "-"], Some(wrong_type))
        .await
        .fails();
    assert_eq!(
        stderr.trim(),
        "Error from server (BadRequest): error when creating \"STDIN\": ConfigMap in version \
         \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct \
         field ConfigMap.data of type string"
    );

    let unknown_field =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\ndata:\n  a: b\nspec:\n  x: y\n";
    let stderr = cluster
        .kubectl_with_input(&["create", "-f", "-"], Some(unknown_field))
        .await
        .fails();
    assert_eq!(
        stderr.trim(),
        "Error from server (BadRequest): error when creating \"STDIN\": ConfigMap in version \
         \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"spec\""
    );
    // `--validate=false` sends fieldValidation=Ignore: created without the unknown field.
    cluster
        .kubectl_with_input(
            &["create", "--validate=false", "-f", "-"],
            Some(unknown_field),
        )
        .await
        .ok();
    let stored = cluster.get_json(&["configmap", "extra"]).await;
    assert_eq!(stored["data"]["a"], "b");
    assert!(stored.get("spec").is_none(), "{stored}");
    // `--validate=warn`: created, and kubectl prints the server's warning.
    let renamed = unknown_field.replace("name: extra", "name: warned");
    let outcome = cluster
        .kubectl_with_input(&["create", "--validate=warn", "-f", "-"], Some(&renamed))
        .await;
    let stderr = outcome.stderr.clone();
    assert_eq!(outcome.ok().trim(), "configmap/warned created");
    assert!(
        stderr.contains("Warning: unknown field \"spec\""),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_list_applies_item_by_item_and_an_unknown_kind_is_no_match() {
    let cluster = Cluster::start().await;
    // kubectl validates a `List` and a kind its OpenAPI v3 lookup does not know against the
    // protobuf OpenAPI v2 document; a real server serves one, and kubectl skips what it does
    // not describe.
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  \
                metadata:\n    name: first\n  data:\n    a: b\n- apiVersion: v1\n  kind: \
                ConfigMap\n  metadata:\n    name: second\n";
    let applied = cluster.apply_stdin(&[], list).await.ok();
    assert_eq!(
        applied.trim(),
        "configmap/first created\nconfigmap/second created"
    );
    assert_eq!(
        cluster.get_json(&["configmap", "first"]).await["data"]["a"],
        "b"
    );
    // kubectl validates a List's items against the OpenAPI v2 document before it sends
    // anything: a wrong field in one item refuses the whole List, with kubectl's own words.
    let unknown_field = list
        .replace("name: first\n", "name: fourth\n")
        .replace("name: second\n", "name: third\n  spec:\n    x: y\n");
    let stderr = cluster.apply_stdin(&[], &unknown_field).await.fails();
    assert_eq!(
        stderr.trim(),
        "error: error validating \"STDIN\": error validating data: \
         ValidationError(ConfigMap): unknown field \"spec\" in io.k8s.api.core.v1.ConfigMap; \
         if you choose to ignore these errors, turn validation off with --validate=false"
    );
    let fourth = cluster
        .kubectl(&["get", "configmap", "fourth"])
        .await
        .fails();
    assert!(fourth.contains("NotFound"), "{fourth}");

    // A kind no served group knows: kubectl finds no schema for it in either document and
    // stops at the REST mapping, naming the object and its source.
    let widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  \
                  namespace: team-a\n";
    let stderr = cluster.apply_stdin(&[], widget).await.fails();
    assert_eq!(
        stderr.trim(),
        "error: resource mapping not found for name: \"w\" namespace: \"team-a\" from \
         \"STDIN\": no matches for kind \"Widget\" in version \"example.com/v1\"\n\
         ensure CRDs are installed first"
    );

    // A List of custom resources is checked against the CRD's schema in its v2 form.
    install_crd(&cluster).await;
    let instances = |spec: &str| {
        format!(
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: gpucloud.io/v1\n  kind: \
             GpuInstance\n  metadata:\n    name: listed\n  spec:\n    {spec}\n"
        )
    };
    let stderr = cluster
        .apply_stdin(&[], &instances("{gpuType: L4, count: 1, colour: red}"))
        .await
        .fails();
    assert!(
        stderr.contains(
            "ValidationError(GpuInstance.spec): unknown field \"colour\" in \
             io.gpucloud.v1.GpuInstance.spec"
        ),
        "{stderr}"
    );
    let stderr = cluster
        .apply_stdin(&[], &instances("{gpuType: L4}"))
        .await
        .fails();
    assert!(
        stderr.contains(
            "ValidationError(GpuInstance.spec): missing required field \"count\" in \
             io.gpucloud.v1.GpuInstance.spec"
        ),
        "{stderr}"
    );
    let applied = cluster
        .apply_stdin(&[], &instances("{gpuType: L4, count: 1}"))
        .await
        .ok();
    assert_eq!(applied.trim(), "gpuinstance.gpucloud.io/listed created");
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn the_projects_objects_in_a_list_pass_kubectls_v2_validation() {
    let cluster = Cluster::start().await;
    let crds = repository_path("crds");
    cluster
        .kubectl(&["apply", "-f", crds.to_str().unwrap()])
        .await
        .ok();
    cluster
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "--all",
            "crd",
        ])
        .await
        .ok();
    // The quickstart's objects as one List: each is validated against its kind's v2 schema
    // (nullable and int-or-string fields, embedded resources, the envelope) before any is
    // sent, so a schema kubectl misreads would refuse them all.
    let examples = repository_path("examples/quickstart");
    let objects = cluster
        .kubectl(&[
            "create",
            "--dry-run=client",
            "-o",
            "json",
            "-f",
            examples.to_str().unwrap(),
        ])
        .await
        .ok();
    let items: Vec<Value> = serde_json::Deserializer::from_str(&objects)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(!items.is_empty());
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let applied = cluster.apply_stdin(&[], &list.to_string()).await.ok();
    assert_eq!(applied.lines().count(), items.len(), "{applied}");
    assert!(
        applied.lines().all(|line| line.ends_with(" created")),
        "{applied}"
    );

    // `kubectl explain` from the v2 document, as against a real server.
    let explained = cluster
        .kubectl(&["explain", "configmap.data", "--output=plaintext-openapiv2"])
        .await
        .ok();
    assert!(
        explained.contains("KIND:     ConfigMap")
            && explained.contains("FIELD:    data <map[string]string>"),
        "{explained}"
    );
    let explained = cluster
        .kubectl(&[
            "explain",
            "gpuinstance.spec",
            "--output=plaintext-openapiv2",
        ])
        .await
        .ok();
    assert!(
        explained.contains("KIND:     GpuInstance")
            && explained.contains("RESOURCE: spec <Object>"),
        "{explained}"
    );
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn describe_lists_events_and_both_event_apis_share_them() {
    let cluster = Cluster::start().await;
    cluster
        .apply_stdin(
            &[],
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: subject\ndata:\n  a: b\n",
        )
        .await
        .ok();
    let uid = cluster
        .kubectl(&[
            "get",
            "configmap",
            "subject",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .await
        .ok();
    let event = format!(
        "apiVersion: v1\nkind: Event\nmetadata:\n  name: subject.1\ninvolvedObject:\n  \
         apiVersion: v1\n  kind: ConfigMap\n  name: subject\n  namespace: default\n  uid: {uid}\n\
         reason: Rotated\nmessage: keys rotated\ntype: Normal\ncount: 1\n\
         firstTimestamp: \"2025-01-01T00:00:00Z\"\nlastTimestamp: \"2025-01-01T00:00:00Z\"\n\
         source:\n  component: gpucloud-operator\n"
    );
    cluster.apply_stdin(&[], &event).await.ok();
    // kubectl describe finds events by an involvedObject field selector (name, namespace,
    // kind, uid), as against a real server.
    let described = cluster
        .kubectl(&["describe", "configmap", "subject"])
        .await
        .ok();
    let events_section = described
        .split("Events:")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    assert!(
        events_section.contains("Rotated") && events_section.contains("keys rotated"),
        "{described}"
    );
    // A core/v1 Event is also an events.k8s.io/v1 Event (one storage, two views).
    let events_v1 = cluster
        .get_json(&["events.v1.events.k8s.io", "subject.1"])
        .await;
    assert_eq!(events_v1["apiVersion"], "events.k8s.io/v1");
    assert_eq!(events_v1["note"], "keys rotated");
    assert_eq!(events_v1["regarding"]["name"], "subject");
    // Field selectors on events from kubectl.
    let selected = cluster
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "reason=Rotated,involvedObject.kind=ConfigMap",
            "-o",
            "name",
        ])
        .await
        .ok();
    assert_eq!(selected.trim(), "event/subject.1");
    let none = cluster
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "reason=Other",
            "-o",
            "name",
        ])
        .await
        .ok();
    assert_eq!(none.trim(), "");
}
