//! The project's deletion protection through kubectl: the ValidatingAdmissionPolicy and binding
//! the Helm chart and the kustomize base ship (their kustomize copy,
//! `deploy/kustomize/deletion-protection.yaml`), applied with `kubectl apply`, refuse
//! `kubectl delete` of an annotated object with kube-apiserver's message, and keep a deleted
//! namespace Terminating, with the namespace controller's conditions, until the annotation goes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::kubectl_support;

use kubectl_support::*;

fn repository_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

const POLICY: &str = "gpucloud-operator-deletion-protection";
const CRD_POLICY: &str = "gpucloud-operator-crd-protection";

const INSTANCES: &str = r#"
apiVersion: gpucloud.io/v1alpha1
kind: GpuInstance
metadata:
  name: vm-1
  namespace: team-a
  annotations:
    gpucloud.io/deletion-protection: "true"
spec:
  region: us-east-1
  gpuType: H100-80G
  osImage: ubuntu-22.04-cuda-12
---
apiVersion: gpucloud.io/v1alpha1
kind: GpuInstance
metadata:
  name: vm-2
  namespace: team-a
spec:
  region: us-east-1
  gpuType: H100-80G
  osImage: ubuntu-22.04-cuda-12
"#;

/// A namespace condition's (status, reason, message).
fn condition(namespace: &Value, type_: &str) -> Option<(String, String, String)> {
    let condition = namespace["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    let text = |field: &str| condition[field].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

#[tokio::test]
async fn the_shipped_policy_refuses_kubectl_delete_of_a_protected_object() {
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
    let manifest = repository_path("deploy/kustomize/deletion-protection.yaml");
    let applied = cluster
        .kubectl(&["apply", "-f", manifest.to_str().unwrap()])
        .await
        .ok();
    assert_eq!(
        applied,
        format!(
            "validatingadmissionpolicy.admissionregistration.k8s.io/{POLICY} created\n\
             validatingadmissionpolicybinding.admissionregistration.k8s.io/{POLICY} created\n\
             validatingadmissionpolicy.admissionregistration.k8s.io/{CRD_POLICY} created\n\
             validatingadmissionpolicybinding.admissionregistration.k8s.io/{CRD_POLICY} created\n"
        )
    );
    // The built-in printers' columns.
    let policies = cluster
        .kubectl(&["get", "validatingadmissionpolicies"])
        .await
        .ok();
    let columns: Vec<&str> = policies
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(columns, ["NAME", "VALIDATIONS", "PARAMKIND", "AGE"]);
    let row_of = |table: &str, name: &str| -> Vec<String> {
        table
            .lines()
            .map(|line| {
                line.split_whitespace()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .find(|row| row.first().map(String::as_str) == Some(name))
            .unwrap_or_default()
    };
    assert_eq!(row_of(&policies, POLICY)[..3], [POLICY, "1", "<unset>"]);
    assert_eq!(
        row_of(&policies, CRD_POLICY)[..3],
        [CRD_POLICY, "1", "<unset>"]
    );
    let bindings = cluster
        .kubectl(&["get", "validatingadmissionpolicybindings"])
        .await
        .ok();
    assert_eq!(row_of(&bindings, POLICY)[..3], [POLICY, POLICY, "<unset>"]);
    // Applying the same manifest again changes nothing.
    let reapplied = cluster
        .kubectl(&["apply", "-f", manifest.to_str().unwrap()])
        .await
        .ok();
    assert!(
        reapplied.lines().all(|line| line.ends_with(" unchanged")),
        "{reapplied}"
    );

    cluster
        .kubectl(&["create", "namespace", "team-a"])
        .await
        .ok();
    cluster.apply_stdin(&[], INSTANCES).await.ok();

    let refused = cluster
        .kubectl(&["delete", "gpuinstance", "vm-1", "-n", "team-a"])
        .await
        .fails();
    // kubectl prints the Status message of kube-apiserver's 403 (`reason: Forbidden` in the
    // policy's validation).
    assert_eq!(
        refused.trim_end(),
        format!(
            "Error from server (Forbidden): gpuinstances.gpucloud.io \"vm-1\" is forbidden: \
             ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: \
             GpuInstance team-a/vm-1 is protected from deletion by the annotation \
             gpucloud.io/deletion-protection=true; remove the annotation (kubectl annotate \
             gpuinstance vm-1 -n team-a gpucloud.io/deletion-protection-) to delete it"
        )
    );
    cluster
        .kubectl(&["get", "gpuinstance", "vm-1", "-n", "team-a"])
        .await
        .ok();
    let deleted = cluster
        .kubectl(&["delete", "gpuinstance", "vm-2", "-n", "team-a"])
        .await
        .ok();
    assert_eq!(deleted, "gpuinstance.gpucloud.io \"vm-2\" deleted\n");

    // Deleting the namespace leaves the protected object, and the namespace Terminating with
    // the namespace controller's report of the refused delete.
    cluster
        .kubectl(&["delete", "namespace", "team-a", "--wait=false"])
        .await
        .ok();
    cluster
        .eventually(
            "the namespace reports the refused delete",
            async |cluster| {
                let namespace = cluster.get_json(&["namespace", "team-a"]).await;
                condition(&namespace, "NamespaceDeletionContentFailure")
                    .is_some_and(|(status, _, _)| status == "True")
            },
        )
        .await;
    let namespace = cluster.get_json(&["namespace", "team-a"]).await;
    assert_eq!(namespace["status"]["phase"], "Terminating");
    let (_, reason, message) = condition(&namespace, "NamespaceDeletionContentFailure").unwrap();
    assert_eq!(reason, "ContentDeletionFailed");
    assert_eq!(
        message,
        format!(
            "Failed to delete all resource types, 1 remaining: gpuinstances.gpucloud.io \"vm-1\" \
             is forbidden: ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied \
             request: GpuInstance team-a/vm-1 is protected from deletion by the annotation \
             gpucloud.io/deletion-protection=true; remove the annotation (kubectl annotate \
             gpuinstance vm-1 -n team-a gpucloud.io/deletion-protection-) to delete it"
        )
    );
    for (type_, status) in [
        ("NamespaceDeletionDiscoveryFailure", "False"),
        ("NamespaceDeletionGroupVersionParsingFailure", "False"),
        ("NamespaceContentRemaining", "False"),
        ("NamespaceFinalizersRemaining", "False"),
    ] {
        assert_eq!(condition(&namespace, type_).unwrap().0, status, "{type_}");
    }
    let described = cluster
        .kubectl(&["describe", "namespace", "team-a"])
        .await
        .ok();
    assert!(
        described.contains("NamespaceDeletionContentFailure")
            && described.contains("ContentDeletionFailed"),
        "{described}"
    );
    cluster
        .kubectl(&["get", "gpuinstance", "vm-1", "-n", "team-a"])
        .await
        .ok();

    // The command the message gives lifts the protection; the namespace then goes.
    cluster
        .kubectl(&[
            "annotate",
            "gpuinstance",
            "vm-1",
            "-n",
            "team-a",
            "gpucloud.io/deletion-protection-",
        ])
        .await
        .ok();
    cluster
        .eventually("the namespace is gone", async |cluster| {
            !cluster
                .kubectl(&["get", "namespace", "team-a"])
                .await
                .success
        })
        .await;

    // `kubectl delete crd` of the operator's CRD is refused until it is annotated, with the
    // command to do so in the message.
    let crd = "gpuinstances.gpucloud.io";
    let refused = cluster.kubectl(&["delete", "crd", crd]).await.fails();
    assert_eq!(
        refused.trim_end(),
        format!(
            "Error from server (Forbidden): customresourcedefinitions.apiextensions.k8s.io \
             \"{crd}\" is forbidden: ValidatingAdmissionPolicy '{CRD_POLICY}' with binding \
             '{CRD_POLICY}' denied request: deleting the CustomResourceDefinition {crd} deletes \
             every object of its kind, and the operator then deletes their cloud resources; to \
             go ahead, annotate it first (kubectl annotate crd {crd} \
             gpucloud.io/allow-deletion=true)"
        )
    );
    cluster
        .kubectl(&["annotate", "crd", crd, "gpucloud.io/allow-deletion=true"])
        .await
        .ok();
    cluster.kubectl(&["delete", "crd", crd]).await.ok();
}
