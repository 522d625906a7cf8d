//! kubectl's imperative generators (`kubectl create namespace|configmap|secret|serviceaccount`)
//! against the embedded API server. kubectl sends these objects as protobuf
//! (`application/vnd.kubernetes.protobuf`), so these tests prove the protobuf request path;
//! the objects are then read back as JSON and through kube-rs.
//!
//! Like `kubectl_conformance.rs`, these tests need `/usr/bin/kubectl` (or `kubectl` on `PATH`,
//! or `$KUBECTL`) and fail saying so without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;

use crate::kubectl_support;

use kubectl_support::*;

#[tokio::test]
async fn create_namespace_sends_protobuf_and_is_stored() {
    let cluster = Cluster::start().await;
    // -v=8 shows the request headers: the body really is protobuf.
    let outcome = cluster
        .kubectl(&["create", "namespace", "team-a", "-v=8"])
        .await;
    let stderr = outcome.stderr.clone();
    assert_eq!(outcome.ok().trim(), "namespace/team-a created");
    assert!(
        stderr.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "kubectl did not send protobuf:\n{stderr}"
    );
    // kubectl accepts JSON back, which is what the server answers.
    assert!(
        stderr.contains("Accept: application/vnd.kubernetes.protobuf,application/json"),
        "{stderr}"
    );
    let namespace = cluster
        .get_json(&["namespace", "team-a", "--show-managed-fields"])
        .await;
    assert_eq!(namespace["metadata"]["name"], "team-a");
    assert_eq!(
        namespace["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
    assert_eq!(namespace["status"]["phase"], "Active");
    assert_eq!(namespace["spec"]["finalizers"][0], "kubernetes");
    assert!(namespace["metadata"]["uid"].as_str().is_some());
    // The generator's manager is recorded as for a JSON create.
    assert_eq!(
        namespace["metadata"]["managedFields"][0]["manager"],
        "kubectl-create"
    );

    // Creating it again is a conflict, as from a manifest.
    let stderr = cluster
        .kubectl(&["create", "namespace", "team-a"])
        .await
        .fails();
    assert!(
        stderr.contains("namespaces \"team-a\" already exists"),
        "{stderr}"
    );
    cluster
        .kubectl(&["delete", "namespace", "team-a"])
        .await
        .ok();
}

#[tokio::test]
async fn create_configmap_and_secret_from_literals() {
    let cluster = Cluster::start().await;
    let created = cluster
        .kubectl(&[
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
            "--from-literal=replicas=3",
        ])
        .await
        .ok();
    assert_eq!(created.trim(), "configmap/settings created");
    let config_map = cluster.get_json(&["configmap", "settings"]).await;
    assert_eq!(
        config_map["data"],
        serde_json::json!({"mode": "fast", "replicas": "3"})
    );
    assert_eq!(config_map["metadata"]["namespace"], "default");

    let created = cluster
        .kubectl(&[
            "create",
            "secret",
            "generic",
            "credentials",
            "--from-literal=user=admin",
            "--from-literal=password=s3cr3t",
        ])
        .await
        .ok();
    assert_eq!(created.trim(), "secret/credentials created");
    let secret = cluster.get_json(&["secret", "credentials"]).await;
    assert_eq!(secret["type"], "Opaque");
    // base64 of "admin" and "s3cr3t".
    assert_eq!(
        secret["data"],
        serde_json::json!({"user": "YWRtaW4=", "password": "czNjcjN0"})
    );

    // The same objects through kube-rs' typed API.
    let client = cluster.server.kube_client().await.unwrap();
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), "default");
    let secret = tokio::time::timeout(Duration::from_secs(10), secrets.get("credentials"))
        .await
        .unwrap()
        .unwrap();
    let password = secret.data.unwrap().remove("password").unwrap();
    assert_eq!(password.0, b"s3cr3t");
    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client, "default");
    let config_map = tokio::time::timeout(Duration::from_secs(10), config_maps.get("settings"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(config_map.data.unwrap()["replicas"], "3");
}

#[tokio::test]
async fn create_serviceaccount_and_dry_run() {
    let cluster = Cluster::start().await;
    cluster
        .kubectl(&["create", "namespace", "build"])
        .await
        .ok();
    let created = cluster
        .kubectl(&["create", "serviceaccount", "builder", "-n", "build"])
        .await
        .ok();
    assert_eq!(created.trim(), "serviceaccount/builder created");
    let account = cluster
        .get_json(&["serviceaccount", "builder", "-n", "build"])
        .await;
    assert_eq!(account["kind"], "ServiceAccount");
    assert_eq!(account["metadata"]["namespace"], "build");

    // A server dry run goes through the same decoding and stores nothing.
    let dry = cluster
        .kubectl(&[
            "create",
            "configmap",
            "preview",
            "--from-literal=a=b",
            "--dry-run=server",
            "-o",
            "json",
        ])
        .await
        .ok();
    let dry: Value = serde_json::from_str(&dry).unwrap();
    assert_eq!(dry["data"]["a"], "b");
    let stderr = cluster
        .kubectl(&["get", "configmap", "preview"])
        .await
        .fails();
    assert!(stderr.contains("not found"), "{stderr}");
}
