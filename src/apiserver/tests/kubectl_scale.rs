//! The scale subresource of custom resources driven by kubectl (`kubectl scale`, `get --raw`,
//! an HPA applied and described), as against a real kube-apiserver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

use crate::kubectl_support;

use kubectl_support::*;

const CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: workerpools.example.io
spec:
  group: example.io
  names: {kind: WorkerPool, plural: workerpools, singular: workerpool, shortNames: [wp]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.selector
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer, minimum: 0}
              size: {type: string}
          status:
            type: object
            properties:
              replicas: {type: integer}
              selector: {type: string}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: plainpools.example.io
spec:
  group: example.io
  names: {kind: PlainPool, plural: plainpools, singular: plainpool}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
"#;

const OBJECTS: &str = r#"
apiVersion: example.io/v1
kind: WorkerPool
metadata: {name: workers, namespace: default}
spec: {replicas: 1, size: large}
---
apiVersion: example.io/v1
kind: PlainPool
metadata: {name: plain, namespace: default}
spec: {replicas: 1}
"#;

const SCALE_PATH: &str = "/apis/example.io/v1/namespaces/default/workerpools/workers/scale";

async fn cluster_with_pools() -> Cluster {
    let cluster = Cluster::start().await;
    cluster.apply_stdin(&[], CRDS).await.ok();
    cluster
        .eventually("the CRDs are served", async |cluster| {
            cluster
                .kubectl(&["get", "workerpools,plainpools"])
                .await
                .success
        })
        .await;
    cluster.apply_stdin(&[], OBJECTS).await.ok();
    cluster
}

fn raw(outcome: Outcome) -> Value {
    serde_json::from_str(&outcome.ok()).unwrap()
}

#[tokio::test]
async fn kubectl_scale_writes_the_spec_replicas_path() {
    let cluster = cluster_with_pools().await;
    let before = cluster.get_json(&["workerpool", "workers"]).await;

    let scaled = cluster
        .kubectl(&["scale", "workerpool", "workers", "--replicas=3"])
        .await
        .ok();
    assert_eq!(scaled.trim(), "workerpool.example.io/workers scaled");

    let after = cluster.get_json(&["workerpool", "workers"]).await;
    assert_eq!(after["spec"]["replicas"], 3);
    assert_eq!(after["spec"]["size"], "large", "the rest of the spec stays");
    assert_eq!(
        after["metadata"]["generation"].as_i64().unwrap(),
        before["metadata"]["generation"].as_i64().unwrap() + 1
    );

    // A stale --resource-version precondition is refused; the current one is honoured.
    let stale = before["metadata"]["resourceVersion"].as_str().unwrap();
    let refused = cluster
        .kubectl(&[
            "scale",
            "workerpool",
            "workers",
            "--replicas=5",
            &format!("--resource-version={stale}"),
        ])
        .await
        .fails();
    assert!(
        refused.contains(&format!("Expected resource version to be {stale}")),
        "{refused}"
    );
    // The server checks a Scale's resourceVersion as a precondition too.
    let stale_scale = format!(
        r#"{{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{{"name":"workers","namespace":"default","resourceVersion":"{stale}"}},"spec":{{"replicas":5}}}}"#
    );
    let refused = cluster
        .kubectl_with_input(
            &["replace", "--raw", SCALE_PATH, "-f", "-"],
            Some(&stale_scale),
        )
        .await
        .fails();
    assert!(
        refused.contains("the object has been modified"),
        "{refused}"
    );
    let current = after["metadata"]["resourceVersion"].as_str().unwrap();
    cluster
        .kubectl(&[
            "scale",
            "workerpool",
            "workers",
            "--replicas=5",
            "--current-replicas=3",
            &format!("--resource-version={current}"),
        ])
        .await
        .ok();
    let scale = raw(cluster.kubectl(&["get", "--raw", SCALE_PATH]).await);
    assert_eq!(scale["spec"]["replicas"], 5);

    // The schema still applies to what a Scale writes.
    let invalid = cluster
        .kubectl(&["scale", "workerpool", "workers", "--replicas=-1"])
        .await
        .fails();
    assert!(!invalid.is_empty());
}

#[tokio::test]
async fn the_scale_answers_with_status_replicas_and_the_selector() {
    let cluster = cluster_with_pools().await;
    let scale = raw(cluster.kubectl(&["get", "--raw", SCALE_PATH]).await);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 1);
    assert_eq!(scale["status"]["replicas"], 0);
    assert!(scale["status"].get("selector").is_none());

    cluster
        .kubectl(&[
            "patch",
            "workerpool",
            "workers",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"replicas":1,"selector":"pool=workers"}}"#,
        ])
        .await
        .ok();
    let scale = raw(cluster.kubectl(&["get", "--raw", SCALE_PATH]).await);
    assert_eq!(scale["status"]["replicas"], 1);
    assert_eq!(scale["status"]["selector"], "pool=workers");
    let object = cluster.get_json(&["workerpool", "workers"]).await;
    assert_eq!(scale["metadata"]["uid"], object["metadata"]["uid"]);
    assert_eq!(
        scale["metadata"]["resourceVersion"],
        object["metadata"]["resourceVersion"]
    );

    // `kubectl patch --subresource=scale` patches the Scale.
    cluster
        .kubectl(&[
            "patch",
            "workerpool",
            "workers",
            "--subresource=scale",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":4}}"#,
        ])
        .await
        .ok();
    let object = cluster.get_json(&["workerpool", "workers"]).await;
    assert_eq!(object["spec"]["replicas"], 4);
    assert_eq!(object["status"]["selector"], "pool=workers", "status kept");
}

#[tokio::test]
async fn a_crd_without_the_subresource_has_no_scale() {
    let cluster = cluster_with_pools().await;
    let missing = cluster
        .kubectl(&[
            "get",
            "--raw",
            "/apis/example.io/v1/namespaces/default/plainpools/plain/scale",
        ])
        .await
        .fails();
    assert!(missing.contains("NotFound"), "{missing}");
    let refused = cluster
        .kubectl(&["scale", "plainpool", "plain", "--replicas=2"])
        .await
        .fails();
    assert!(
        refused.contains("not found") || refused.contains("NotFound"),
        "{refused}"
    );
    // A missing object is a 404 of the resource.
    let gone = cluster
        .kubectl(&[
            "get",
            "--raw",
            "/apis/example.io/v1/namespaces/default/workerpools/nobody/scale",
        ])
        .await
        .fails();
    assert!(gone.contains("NotFound"), "{gone}");
}

#[tokio::test]
async fn discovery_lists_the_scale_subresource() {
    let cluster = cluster_with_pools().await;
    let resources = raw(cluster
        .kubectl(&["get", "--raw", "/apis/example.io/v1"])
        .await);
    let scale = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|resource| resource["name"] == "workerpools/scale")
        .expect("workerpools/scale listed");
    assert_eq!(scale["group"], "autoscaling");
    assert_eq!(scale["version"], "v1");
    assert_eq!(scale["kind"], "Scale");
    assert!(
        !resources["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|resource| resource["name"] == "plainpools/scale")
    );
}

#[tokio::test]
async fn an_hpa_targeting_a_custom_resource_is_accepted_and_described() {
    let cluster = cluster_with_pools().await;
    let hpa = r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: workers, namespace: default}
spec:
  scaleTargetRef: {apiVersion: example.io/v1, kind: WorkerPool, name: workers}
  minReplicas: 1
  maxReplicas: 10
  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {type: Utilization, averageUtilization: 80}
"#;
    let applied = cluster.apply_stdin(&[], hpa).await.ok();
    assert!(
        applied.contains("horizontalpodautoscaler.autoscaling/workers created"),
        "{applied}"
    );
    let stored = cluster.get_json(&["hpa", "workers"]).await;
    assert_eq!(stored["spec"]["scaleTargetRef"]["kind"], "WorkerPool");
    let described = cluster.kubectl(&["describe", "hpa", "workers"]).await.ok();
    assert!(described.contains("WorkerPool/workers"), "{described}");
    assert!(!described.contains("FailedGetScale"), "{described}");

    // The target resolves as the HPA controller resolves it: the kind through discovery,
    // then the scale subresource.
    let resources = raw(cluster
        .kubectl(&["get", "--raw", "/apis/example.io/v1"])
        .await);
    let plural = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|resource| resource["kind"] == "WorkerPool")
        .and_then(|resource| resource["name"].as_str())
        .unwrap()
        .to_owned();
    let scale = raw(cluster
        .kubectl(&[
            "get",
            "--raw",
            &format!("/apis/example.io/v1/namespaces/default/{plural}/workers/scale"),
        ])
        .await);
    assert_eq!(scale["spec"]["replicas"], 1);
}

#[tokio::test]
async fn scale_paths_outside_spec_and_status_are_refused() {
    let cluster = Cluster::start().await;
    let crd = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: badpools.example.io
spec:
  group: example.io
  names: {kind: BadPool, plural: badpools}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .status.replicas
        statusReplicasPath: status.replicas
        labelSelectorPath: .metadata.labels
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;
    let refused = cluster.apply_stdin(&[], crd).await.fails();
    for expected in [
        "spec.versions[0].subresources.scale.specReplicasPath: Invalid value: \".status.replicas\": should be a json path under .spec",
        "spec.versions[0].subresources.scale.statusReplicasPath: Invalid value: \"status.replicas\": must be a simple json path starting with .",
        "spec.versions[0].subresources.scale.labelSelectorPath: Invalid value: \".metadata.labels\": should be a json path under either .spec or .status",
    ] {
        assert!(refused.contains(expected), "{expected} in {refused}");
    }
}
