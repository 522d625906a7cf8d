//! RBAC through kubectl: the project's CRDs and its shipped tenant roles (labelled to
//! aggregate into `edit`, `admin` and `view`, `deploy/kustomize/tenant-roles.yaml`) applied by an
//! administrator in `system:masters`; a tenant bound to `edit` in one namespace then works
//! there, is refused the status subresource and other namespaces with kube-apiserver's
//! messages, and `kubectl auth can-i` answers truthfully.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use gpucloud_apiserver::{ApiServerConfig, AuthorizationMode};
use serde_json::{Value, json};

use crate::kubectl_support;

use kubectl_support::*;

fn repository_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

const INSTANCE: &str = r#"
apiVersion: gpucloud.io/v1alpha1
kind: GpuInstance
metadata:
  name: vm-1
  namespace: team-a
spec:
  region: us-east-1
  gpuType: H100-80G
  osImage: ubuntu-22.04-cuda-12
"#;

const ALICE: &str = "gpucloud-apiserver-alice";

async fn rbac_cluster() -> Cluster {
    Cluster::start_with(
        ApiServerConfig::default()
            .with_authorization(AuthorizationMode::Rbac)
            .with_user("kubectl-admin-token", "admin", &["system:masters"])
            .with_user("kubectl-alice-token", "alice", &[]),
    )
    .await
}

#[tokio::test]
async fn a_tenant_bound_to_edit_gets_the_shipped_tenant_rules_and_nothing_more() {
    let cluster = rbac_cluster().await;
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
    let tenant_roles = repository_path("deploy/kustomize/tenant-roles.yaml");
    cluster
        .kubectl(&["apply", "-f", tenant_roles.to_str().unwrap()])
        .await
        .ok();
    for namespace in ["team-a", "team-b"] {
        cluster
            .kubectl(&["create", "namespace", namespace])
            .await
            .ok();
    }

    // The aggregation controller has put the tenant rules into the bootstrap roles.
    let edit = cluster.get_json(&["clusterrole", "edit"]).await;
    let rules = edit["rules"].as_array().unwrap();
    let holds = |rules: &[Value], resource: &str, verb: &str| {
        rules.iter().any(|rule| {
            rule["apiGroups"] == json!(["gpucloud.io"])
                && rule["resources"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(resource))
                && rule["verbs"].as_array().unwrap().contains(&json!(verb))
        })
    };
    assert!(holds(rules, "gpuinstances", "create"), "{edit:#}");
    assert!(holds(rules, "gpuinstances/status", "get"), "{edit:#}");
    assert!(!holds(rules, "gpuinstances/status", "patch"), "{edit:#}");
    let view = cluster.get_json(&["clusterrole", "view"]).await;
    let view_rules = view["rules"].as_array().unwrap();
    assert!(holds(view_rules, "gpuinstances", "list"), "{view:#}");
    assert!(!holds(view_rules, "gpuinstances", "create"), "{view:#}");
    // `kubectl get -o yaml` shows the aggregated rules too.
    let yaml = cluster
        .kubectl(&["get", "clusterrole", "admin", "-o", "yaml"])
        .await
        .ok();
    assert!(yaml.contains("gpuinstancepools/scale"), "{yaml}");
    assert!(
        yaml.contains("rbac.authorization.k8s.io/aggregate-to-admin"),
        "{yaml}"
    );

    // Before any binding alice may do nothing in team-a.
    let refused = cluster
        .kubectl(&["--context", ALICE, "get", "gpuinstances", "-n", "team-a"])
        .await
        .fails();
    assert!(
        refused.contains(
            r#"Error from server (Forbidden): gpuinstances.gpucloud.io is forbidden: User "alice" cannot list resource "gpuinstances" in API group "gpucloud.io" in the namespace "team-a""#
        ),
        "{refused}"
    );
    let answer = cluster
        .kubectl(&[
            "--context",
            ALICE,
            "auth",
            "can-i",
            "create",
            "gpuinstances",
            "-n",
            "team-a",
        ])
        .await;
    assert!(!answer.success);
    assert_eq!(answer.stdout.trim(), "no");

    cluster
        .kubectl(&[
            "create",
            "rolebinding",
            "alice-edit",
            "--clusterrole=edit",
            "--user=alice",
            "-n",
            "team-a",
        ])
        .await
        .ok();
    let can = |args: &'static [&'static str]| {
        let cluster = &cluster;
        async move {
            let mut full = vec!["--context", ALICE, "auth", "can-i"];
            full.extend_from_slice(args);
            cluster.kubectl(&full).await.stdout.trim().to_string()
        }
    };
    assert_eq!(
        can(&["create", "gpuinstances", "-n", "team-a"]).await,
        "yes"
    );
    assert_eq!(can(&["create", "configmaps", "-n", "team-a"]).await, "yes");
    assert_eq!(can(&["create", "configmaps", "-n", "team-b"]).await, "no");
    assert_eq!(can(&["get", "secrets", "-n", "team-a"]).await, "yes");
    assert_eq!(
        can(&[
            "patch",
            "gpuinstances",
            "--subresource=status",
            "-n",
            "team-a"
        ])
        .await,
        "no"
    );
    assert_eq!(
        can(&[
            "get",
            "gpuinstances",
            "--subresource=status",
            "-n",
            "team-a"
        ])
        .await,
        "yes"
    );
    assert_eq!(can(&["create", "rolebindings", "-n", "team-a"]).await, "no");

    // Alice creates an instance in team-a, but its status is the operator's to write.
    cluster
        .kubectl_with_input(&["--context", ALICE, "apply", "-f", "-"], Some(INSTANCE))
        .await
        .ok();
    let refused = cluster
        .kubectl(&[
            "--context",
            ALICE,
            "patch",
            "gpuinstance",
            "vm-1",
            "-n",
            "team-a",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Ready"}}"#,
        ])
        .await
        .fails();
    assert!(
        refused.contains(
            r#"Error from server (Forbidden): gpuinstances.gpucloud.io "vm-1" is forbidden: User "alice" cannot patch resource "gpuinstances/status" in API group "gpucloud.io" in the namespace "team-a""#
        ),
        "{refused}"
    );
    let refused = cluster
        .kubectl(&["--context", ALICE, "get", "configmaps", "-n", "team-b"])
        .await
        .fails();
    assert!(
        refused.contains(
            r#"configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "team-b""#
        ),
        "{refused}"
    );
    // Her rules in team-a, as kubectl lists them.
    let listed = cluster
        .kubectl(&[
            "--context",
            ALICE,
            "auth",
            "can-i",
            "--list",
            "-n",
            "team-a",
        ])
        .await
        .ok();
    assert!(listed.contains("gpuinstances.gpucloud.io"), "{listed}");
    assert!(listed.contains("configmaps"), "{listed}");
    let whoami = cluster
        .kubectl(&["auth", "whoami", "-o", "json"])
        .await
        .ok();
    let whoami: Value = serde_json::from_str(&whoami).unwrap();
    assert_eq!(
        whoami["status"]["userInfo"]["groups"],
        json!(["system:masters", "system:authenticated"])
    );
    cluster.server.shutdown().await;
}
