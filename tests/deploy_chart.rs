#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The Helm chart and the kustomize base: rendered with the default values and the main
//! combinations, linted (`helm lint --strict`), checked against the Kubernetes 1.33 schemas,
//! applied to the embedded API server; the values schema refuses wrong types; the chart's
//! CRDs and the kustomize base are the generated files they claim to be. The guardrails the
//! chart installs (the GpuPolicy admission policy, the default GpuPolicy, the tenant roles
//! under RBAC) are exercised on the embedded API server in `guardrails`.
//!
//! Regenerate the copies (kustomize CRDs and base) with
//! `UPDATE_GENERATED=1 cargo test --test deploy_chart`; the chart's CRD template comes from
//! the kind registry (`UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry`).

mod deploy;
#[path = "deploy/guardrails.rs"]
mod guardrails;

use deploy::{RELEASE, RELEASE_NAMESPACE, Rendered, render, repository_root, try_render};
use gpucloud_apiserver::{ApiServer, ApiServerConfig};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn updating() -> bool {
    std::env::var_os("UPDATE_GENERATED").is_some()
}

/// The main combinations of values, by what they turn on.
fn combinations() -> Vec<(&'static str, Value)> {
    vec![
        ("defaults (cluster-wide)", json!({})),
        (
            "namespaced",
            json!({"watchNamespaces": ["team-a", "team-b"]}),
        ),
        (
            "namespaced, the release namespace watched",
            json!({"watchNamespaces": ["gpucloud-system", "team-a"]}),
        ),
        (
            "high availability with everything optional on",
            json!({
                "replicas": 2,
                "credentials": {"existingSecret": "", "apiKey": "sk-test"},
                "metrics": {"service": {"enabled": true},
                            "serviceMonitor": {"enabled": true, "labels": {"release": "prom"}}},
                "podDisruptionBudget": {"enabled": true},
                "networkPolicy": {"enabled": true, "metricsFrom": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]},
                "logFormat": "text", "logLevel": "debug", "resyncInterval": "5m",
                "concurrency": 16, "budgetFloor": 25.5,
                "prometheusRule": {"enabled": true, "labels": {"release": "prom"}, "lowBalance": 80,
                    "additionalRules": [{"alert": "GpuCloudSpendHigh",
                        "expr": "sum(gpucloud_hourly_cost) > 100", "for": "1h"}]},
                "grafana": {"dashboards": {"enabled": true,
                    "annotations": {"grafana_folder": "GPU cloud"}}},
                "extraEnv": [{"name": "GPUCLOUD_SETTLE_WINDOW", "value": "45s"}],
                "podAnnotations": {"example.com/team": "platform"},
                "gpuPolicy": {"default": {"enabled": true, "maxLifetime": "168h",
                    "namespaceSelector": {"matchExpressions": [
                        {"key": "gpucloud.io/tenant", "operator": "Exists"}]},
                    "namespaceLimits": {"gpus": 64}}},
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            }),
        ),
        (
            "no default credentials, own ServiceAccount",
            json!({"credentials": {"existingSecret": ""},
                   "serviceAccount": {"create": false, "name": "platform-operator"},
                   "leaderElection": {"enabled": true}}),
        ),
        (
            "CRDs installed separately",
            json!({"crds": {"enabled": false}}),
        ),
        (
            "namespaced, no default credentials, leader election",
            json!({"watchNamespaces": ["team-a"], "credentials": {"existingSecret": ""},
                   "replicas": 2}),
        ),
        (
            "ids from the platform's range (OpenShift), pinned image, pod settings, PodMonitor",
            platform_values(),
        ),
    ]
}

/// A digest of the placeholder image, for rendering (no image has it).
const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// What a platform team sets: the image from its registry by digest, user ids left to the
/// platform, spread over zones, a scratch volume, flags, probes, a PodMonitor.
fn platform_values() -> Value {
    json!({
        "image": {"registry": "registry.example.com/platform", "repository": "gpucloud-operator",
                  "tag": "ignored", "digest": DIGEST},
        "podSecurityContext": {"runAsUser": null, "runAsGroup": null},
        "replicas": 2,
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
             "whenUnsatisfiable": "ScheduleAnyway"},
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
             "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"team": "platform"}}}],
        "extraArgs": ["--settle-window=45s"],
        "extraEnv": [{"name": "GPUCLOUD_TRANSITION_INTERVAL",
                      "valueFrom": {"configMapKeyRef": {"name": "operator-tuning", "key": "transition"}}}],
        "extraVolumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "64Mi"}}],
        "extraVolumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        "livenessProbe": {"initialDelaySeconds": 10, "periodSeconds": 20, "timeoutSeconds": 3,
                          "failureThreshold": 5},
        "readinessProbe": {"initialDelaySeconds": 1, "periodSeconds": 7, "timeoutSeconds": 4,
                           "failureThreshold": 2},
        "global": {"priorityClassName": "platform-critical"},
        "metrics": {"podMonitor": {"enabled": true, "interval": "15s", "scrapeTimeout": "10s",
            "labels": {"release": "prom"},
            "relabelings": [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                             "targetLabel": "node"}],
            "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"],
                                   "regex": "process_virtual_memory_bytes"}]}},
        "prometheusRule": {"enabled": true},
    })
}

/// Minimal CRD of one of the Prometheus Operator's kinds (ServiceMonitor, PrometheusRule), as
/// installed with it.
fn monitoring_crd(kind: &str) -> Value {
    let singular = kind.to_lowercase();
    let plural = format!("{singular}s");
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.monitoring.coreos.com")},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
            "names": {"plural": plural, "singular": singular,
                      "kind": kind, "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_combination_renders_lints_validates_and_applies() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    for (label, values) in combinations() {
        let rendered = render(&values);
        let findings = rendered.lint_findings(2);
        assert!(
            findings.is_empty(),
            "{label}: helm lint --strict: {findings:#?}"
        );
        assert_eq!(
            rendered.lint["errors"],
            json!([]),
            "{label}: helm lint --strict"
        );
        assert_eq!(
            rendered.invalid,
            Vec::<String>::new(),
            "{label}: objects the Kubernetes 1.33 schemas reject"
        );
        check_pod(label, &rendered);

        // What `helm install` does: the CRDs (first in Helm's install order), then the other
        // templates, into a fresh cluster.
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let client = server.kube_client().await.unwrap();
        let mut namespaces = vec![RELEASE_NAMESPACE];
        if let Some(list) = values["watchNamespaces"].as_array() {
            namespaces.extend(list.iter().map(|n| n.as_str().unwrap()));
        }
        deploy::create_namespaces(&client, &namespaces).await;
        let monitoring = [
            monitoring_crd("ServiceMonitor"),
            monitoring_crd("PodMonitor"),
            monitoring_crd("PrometheusRule"),
        ];
        deploy::apply_all(&client, &monitoring).await;
        deploy::apply_all(&client, &rendered.crd_objects()).await;
        deploy::apply_all(&client, &rendered.objects()).await;
        server.shutdown().await;
    }
}

/// Pod security (restricted profile) and the probes on the health endpoints.
fn check_pod(label: &str, rendered: &Rendered) {
    let deployment = rendered.find("Deployment", RELEASE).unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        restricted_violations(pod),
        Vec::<String>::new(),
        "{label}: the restricted Pod Security Standard"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{label}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{label}"
    );
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false, "{label}");
    assert_eq!(security["readOnlyRootFilesystem"], true, "{label}");
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]), "{label}");
    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "health"})
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "health"})
    );
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let shutdown = rendered.env_var("GPUCLOUD_SHUTDOWN_TIMEOUT").unwrap();
    let shutdown = gpucloud_controller::operator::cli::parse_duration(&shutdown).unwrap();
    assert!(
        shutdown.as_secs() < grace,
        "{label}: shutdown within the grace period"
    );
    let downward: Vec<&str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["valueFrom"].get("fieldRef").is_some())
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(downward, ["POD_NAME", "POD_NAMESPACE"], "{label}");
}

/// The PrometheusRule selects the job the ServiceMonitor's Service makes, and the dashboard
/// ConfigMap carries the chart's dashboard file as it is.
fn check_monitoring(rendered: &Rendered) {
    let service = format!("{RELEASE}-metrics");
    assert!(rendered.find("Service", &service).is_some());
    let rule = rendered.find("PrometheusRule", RELEASE).unwrap();
    assert_eq!(rule["metadata"]["labels"]["release"], "prom", "{rule}");
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    let alerts: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    for alert in [
        "GpuCloudOperatorDown",
        "GpuCloudOperatorNoLeader",
        "GpuCloudObjectsStalled",
        "GpuCloudOrphanedResources",
        "GpuCloudDuplicateResources",
        "GpuCloudLowBalance",
        "GpuCloudCreatesRefusedForCredit",
        "GpuCloudThrottled",
        "GpuCloudSpendHigh",
    ] {
        assert!(alerts.contains(&alert), "{alert} missing: {alerts:?}");
    }
    let selector = format!(r#"job="{service}",namespace="{RELEASE_NAMESPACE}""#);
    for rule in &rules[..rules.len() - 1] {
        let expr = rule["expr"].as_str().unwrap();
        assert!(expr.contains(&selector), "{expr}");
    }
    let low = rules
        .iter()
        .find(|r| r["alert"] == "GpuCloudLowBalance")
        .unwrap();
    assert!(low["expr"].as_str().unwrap().ends_with("< 80"), "{low}");

    let dashboard = rendered
        .find("ConfigMap", &format!("{RELEASE}-dashboard"))
        .unwrap();
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        dashboard["metadata"]["annotations"]["grafana_folder"],
        "GPU cloud"
    );
    let file = std::fs::read_to_string(
        repository_root().join("charts/gpucloud-operator/dashboards/gpucloud-operator.json"),
    )
    .unwrap();
    assert_eq!(
        dashboard["data"]["gpucloud-operator.json"].as_str(),
        Some(file.trim_end())
    );
}

#[test]
fn values_reach_the_operator_settings() {
    let rendered = render(&combinations()[3].1);
    let env: BTreeMap<String, String> = rendered.env().into_iter().collect();
    for (name, value) in [
        (
            "GPUCLOUD_CREDENTIALS_SECRET",
            "gpucloud-operator-credentials",
        ),
        ("GPUCLOUD_LEADER_ELECT", "true"),
        ("GPUCLOUD_LEASE_NAME", "gpucloud-operator"),
        ("GPUCLOUD_LOG_FORMAT", "text"),
        ("RUST_LOG", "debug"),
        ("GPUCLOUD_RESYNC_INTERVAL", "5m"),
        ("GPUCLOUD_CONCURRENCY", "16"),
        ("GPUCLOUD_BUDGET_FLOOR", "25.5"),
        ("GPUCLOUD_SETTLE_WINDOW", "45s"),
        ("GPUCLOUD_METRICS_LISTEN", "0.0.0.0:8080"),
        ("GPUCLOUD_HEALTH_LISTEN", "0.0.0.0:8081"),
    ] {
        assert_eq!(env.get(name).map(String::as_str), Some(value), "{name}");
    }
    let secret = rendered
        .find("Secret", "gpucloud-operator-credentials")
        .unwrap();
    assert_eq!(secret["stringData"]["apiKey"], "sk-test");
    // The operator's labels never collide with the target's (`object_namespace`, not
    // `namespace`; see openmetrics.rs), so the scrape keeps Prometheus' own `job`, `instance`
    // and `namespace`: no honorLabels.
    let monitor = rendered.find("ServiceMonitor", RELEASE).unwrap();
    assert!(
        monitor["spec"]["endpoints"][0]["honorLabels"].is_null(),
        "{monitor}"
    );
    assert!(rendered.find("PodDisruptionBudget", RELEASE).is_some());
    assert!(rendered.find("NetworkPolicy", RELEASE).is_some());
    check_monitoring(&rendered);

    let namespaced = render(&combinations()[1].1);
    assert_eq!(
        namespaced.env_var("GPUCLOUD_NAMESPACES").as_deref(),
        Some("team-a,team-b")
    );
    let defaults = render(&json!({}));
    assert_eq!(defaults.env_var("GPUCLOUD_NAMESPACES"), None);
    let kinds: Vec<String> = defaults
        .objects()
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "Deployment",
            // The GpuPolicies at admission.
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            // The record of released resources, in the operator's namespace.
            "Role",
            "RoleBinding",
            // Leader election, on by default.
            "Role",
            "RoleBinding",
            // Every authenticated user reads the GpuOfferings.
            "ClusterRole",
            "ClusterRoleBinding",
            "ServiceAccount",
            // The tenant roles, edit and view.
            "ClusterRole",
            "ClusterRole"
        ],
        "defaults: nothing optional but deletion protection, the GpuPolicy admission policy, leader election, the catalog reader and the tenant roles"
    );
    assert_eq!(
        defaults.env_var("GPUCLOUD_LEADER_ELECT").as_deref(),
        Some("true")
    );
    let unprotected = render(&json!({"deletionProtection": {"enabled": false},
        "gpuPolicy": {"admission": {"enabled": false}}}));
    assert!(
        unprotected
            .objects()
            .iter()
            .all(|o| o["apiVersion"] != "admissionregistration.k8s.io/v1")
    );
    let none = render(&combinations()[4].1);
    assert_eq!(none.env_var("GPUCLOUD_CREDENTIALS_SECRET"), None);
    assert!(none.find("ServiceAccount", "platform-operator").is_none());
}

#[test]
fn the_values_schema_refuses_wrong_types() {
    for bad in [
        json!({"replicas": "two"}),
        json!({"watchNamespaces": "team-a"}),
        json!({"watchNamespaces": ["Team_A"]}),
        json!({"logFormat": "xml"}),
        json!({"resyncInterval": 60}),
        json!({"resyncInterval": "a minute"}),
        json!({"concurrency": 0}),
        json!({"budgetFloor": "lots"}),
        json!({"cloud": {"url": "ftp://cloud"}}),
        json!({"credentials": {"apiKey": 42}}),
        json!({"leaderElection": {"enabled": "yes"}}),
        json!({"metrics": {"port": 70000}}),
        json!({"unknownValue": true}),
        json!({"deletionProtection": {"enabled": "yes"}}),
    ] {
        assert!(try_render(&bad).is_err(), "{bad} was accepted");
    }
    // Both credential sources at once is a template error, not a schema one.
    let output = Command::new(deploy::python())
        .arg(repository_root().join("tests/deploy/chart.py"))
        .arg(deploy::chart_dir())
        .arg(json!({"credentials": {"apiKey": "k"}}).to_string())
        .arg(RELEASE)
        .arg(RELEASE_NAMESPACE)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("set credentials.existingSecret or credentials.apiKey, not both")
    );
}

// === generated copies ===

/// Writes `content` to `path` when regenerating; otherwise asserts the file holds it.
fn generated(path: &Path, content: &str) {
    if updating() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; regenerate with UPDATE_GENERATED=1",
            path.display()
        )
    });
    assert!(
        on_disk == content,
        "{} is out of date; regenerate with UPDATE_GENERATED=1 cargo test --test deploy_chart",
        path.display()
    );
}

fn yaml_files(dir: &Path) -> Vec<String> {
    yaml_files_with(dir, ".yaml")
}

/// The names of the files in `dir` ending in `suffix`, sorted.
fn yaml_files_with(dir: &Path, suffix: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    files.sort();
    files
}

#[test]
fn chart_and_kustomize_crds_are_the_generated_crds() {
    let source = repository_root().join("crds");
    let copy = repository_root().join("deploy/kustomize/crds");
    for file in yaml_files(&source) {
        let text = std::fs::read_to_string(source.join(&file)).unwrap();
        generated(&copy.join(&file), &text);
    }
    // The kustomize base lists its CRDs in a kustomization of their own, generated from
    // the kind registry (gpucloud-controller's registry tests).
    let mut copies = yaml_files(&copy);
    copies.retain(|f| f != "kustomization.yaml");
    assert_eq!(copies, yaml_files(&source), "{}", copy.display());

    // The chart templates them (templates/crds.yaml, generated by the kind registry), so a
    // crds/ folder, which Helm installs once and never upgrades, would be a second copy.
    assert!(
        !repository_root()
            .join("charts/gpucloud-operator/crds")
            .exists()
    );
    // Rendered, they are the Rust types' CRDs (crds/ itself is checked by gpucloud-api's
    // tests), kept by `helm uninstall` unless `crds.keep` is off, and then open to the
    // deletion that uninstall asks for.
    let from_types: Vec<Value> =
        deploy::yaml_documents(&gpucloud_controller::kinds::registry::crds_yaml().unwrap());
    let annotated = |annotations: Value| -> Vec<Value> {
        from_types
            .iter()
            .cloned()
            .map(|mut crd| {
                crd["metadata"]["annotations"] = annotations.clone();
                crd
            })
            .collect()
    };
    assert_eq!(
        render(&json!({"crds": {"keep": false}})).crd_objects(),
        annotated(json!({"gpucloud.io/allow-deletion": "true"}))
    );
    assert_eq!(
        render(&json!({})).crd_objects(),
        annotated(json!({"helm.sh/resource-policy": "keep"}))
    );
    assert!(
        render(&json!({"crds": {"enabled": false}}))
            .crd_objects()
            .is_empty()
    );
}

/// The chart's labels that say Helm manages an object; the kustomize base leaves them out.
const HELM_LABELS: &[&str] = &["helm.sh/chart", "app.kubernetes.io/managed-by"];

fn without_helm_labels(mut object: Value) -> Value {
    fn strip(labels: &mut Value) {
        if let Some(map) = labels.as_object_mut() {
            for label in HELM_LABELS {
                map.remove(*label);
            }
        }
    }
    strip(&mut object["metadata"]["labels"]);
    if object["kind"] == "Deployment" {
        strip(&mut object["spec"]["template"]["metadata"]["labels"]);
    }
    object
}

/// The kustomize base's copy of the deletion-protection policy, which the dev sandbox and the
/// tests install (`gpucloud_api::deletion_protection::POLICY_MANIFEST`).
const DELETION_PROTECTION: &str = "deletion-protection.yaml";

/// The kustomize base's copy of the tenant roles (`templates/tenant-roles.yaml`).
const TENANT_ROLES: &str = "tenant-roles.yaml";

/// The kustomize base's copy of the GpuPolicy admission policy
/// (`templates/gpu-policy-admission.yaml`).
const GPU_POLICY_ADMISSION: &str = "gpu-policy-admission.yaml";

const GENERATED_HEADER: &str = "# Generated from charts/gpucloud-operator with its default values by tests/deploy_chart.rs\n# (UPDATE_GENERATED=1 cargo test --test deploy_chart); change the chart, not this file.\n";

/// `deploy/kustomize/` is the chart's default rendering without Helm's labels: one file per
/// template, and `kubectl kustomize` renders exactly those objects plus the CRDs.
#[test]
fn kustomize_base_renders_what_the_chart_renders() {
    let base = repository_root().join("deploy/kustomize");
    let rendered = render(&json!({}));
    let mut files = Vec::new();
    for manifest in &rendered.manifests {
        let objects: Vec<Value> = deploy::yaml_documents(manifest)
            .into_iter()
            .map(without_helm_labels)
            .collect();
        let file = format!(
            "{}.yaml",
            objects[0]["kind"].as_str().unwrap().to_lowercase()
        );
        let first_name = objects[0]["metadata"]["name"].as_str().unwrap_or_default();
        let tenant_roles = first_name.ends_with("-tenant-edit");
        let gpu_policy = first_name.ends_with("-gpu-policy");
        let file = match file.as_str() {
            "clusterrole.yaml" if tenant_roles => TENANT_ROLES.to_string(),
            "clusterrole.yaml" => "rbac.yaml".to_string(),
            "validatingadmissionpolicy.yaml" if gpu_policy => GPU_POLICY_ADMISSION.to_string(),
            "validatingadmissionpolicy.yaml" => DELETION_PROTECTION.to_string(),
            _ => file,
        };
        let mut text = GENERATED_HEADER.to_string();
        for object in &objects {
            text.push_str("---\n");
            text.push_str(&gpucloud_controller::kinds::registry::to_yaml(object).unwrap());
        }
        generated(&base.join(&file), &text);
        files.push(file);
    }
    files.sort();
    let mut present = yaml_files(&base);
    present.retain(|f| f != "kustomization.yaml");
    assert_eq!(
        present, files,
        "deploy/kustomize holds files the chart does not render"
    );

    let output = Command::new("kubectl")
        .args(["kustomize"])
        .arg(&base)
        .output()
        .expect("kubectl is needed to render the kustomize base (.ci/run installs it)");
    assert!(
        output.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let key = |o: &Value| {
        format!(
            "{} {}/{}",
            o["kind"].as_str().unwrap(),
            o["metadata"]["namespace"].as_str().unwrap_or(""),
            o["metadata"]["name"].as_str().unwrap()
        )
    };
    let from_kustomize: BTreeMap<String, Value> =
        deploy::yaml_documents(&String::from_utf8(output.stdout).unwrap())
            .into_iter()
            .map(|o| (key(&o), o))
            .collect();
    // The CRDs as the types make them: without Helm's keep policy, which means nothing to
    // kustomize, and protected from deletion by the CRD policy.
    let from_chart: BTreeMap<String, Value> =
        deploy::yaml_documents(&gpucloud_controller::kinds::registry::crds_yaml().unwrap())
            .into_iter()
            .chain(rendered.objects().into_iter().map(without_helm_labels))
            .map(|o| (key(&o), o))
            .collect();
    assert_eq!(
        from_kustomize.keys().collect::<Vec<_>>(),
        from_chart.keys().collect::<Vec<_>>()
    );
    for (name, object) in &from_chart {
        // kustomize writes whole floats (a schema's `maximum: 65535.0`) as integers.
        let (ours, theirs) = (
            whole_numbers(object.clone()),
            whole_numbers(from_kustomize[name].clone()),
        );
        if let Some(difference) = first_difference(&ours, &theirs, "") {
            panic!("{name}: kustomize base and chart differ at {difference}");
        }
    }
}

fn whole_numbers(value: Value) -> Value {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => json!(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(whole_numbers).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, whole_numbers(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Where two values first differ, as a JSON path with both sides.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                first_difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{path}.{k}"),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(x, y, &format!("{path}[{i}]"))),
        _ => (a != b).then(|| format!("{path}: chart {a}, kustomize {b}")),
    }
}

/// The GitOps installs of the operator (deploy/argocd/operator.yaml, deploy/flux/operator.yaml)
/// name this chart, leave its CRDs out (`crds.enabled: false`: the CRD Application/Kustomization
/// of examples/gitops owns them), and carry values the chart accepts.
#[test]
fn gitops_installs_name_the_chart_with_values_it_accepts() {
    let read = |path: &str| -> Value {
        let documents =
            deploy::yaml_documents(&std::fs::read_to_string(repository_root().join(path)).unwrap());
        assert_eq!(documents.len(), 1, "{path}");
        documents.into_iter().next().unwrap()
    };
    let argocd = read("deploy/argocd/operator.yaml");
    let source = &argocd["spec"]["source"];
    assert_eq!(source["path"], "charts/gpucloud-operator");
    assert_eq!(
        argocd["spec"]["destination"]["namespace"],
        RELEASE_NAMESPACE
    );
    let rendered = render(&source["helm"]["valuesObject"]);
    assert!(rendered.crd_objects().is_empty(), "Argo CD: CRDs rendered");
    assert_not_placeholder("Argo CD", &rendered);

    let flux = read("deploy/flux/operator.yaml");
    assert_eq!(
        flux["spec"]["chart"]["spec"]["chart"],
        "./charts/gpucloud-operator"
    );
    assert_eq!(flux["spec"]["targetNamespace"], RELEASE_NAMESPACE);
    let rendered = render(&flux["spec"]["values"]);
    assert!(rendered.crd_objects().is_empty(), "Flux: CRDs rendered");
    assert_not_placeholder("Flux", &rendered);

    // The CRDs come first: Argo CD's CRD Application in an earlier sync wave, Flux's
    // workloads depending on its CRD Kustomization.
    let wave = |o: &Value| -> i64 {
        o["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let applications = deploy::yaml_documents(
        &std::fs::read_to_string(repository_root().join("examples/gitops/argocd/apps/crds.yaml"))
            .unwrap(),
    );
    let crds = applications
        .iter()
        .find(|a| a["spec"]["source"]["path"] == "crds")
        .unwrap();
    assert!(wave(crds) < wave(&argocd));
}

/// The documents of a YAML stream as the operator reads manifests
/// (`tools::manifests::documents`, serde-saphyr); `origin` names it in a failure.
fn read_as_the_operator(origin: &str, text: &str) -> Vec<Value> {
    gpucloud_controller::tools::manifests::documents(text)
        .into_iter()
        .map(|(n, d)| d.unwrap_or_else(|e| panic!("{origin}: document {n}: {e}")))
        .collect()
}

/// The documents of a YAML stream as PyYAML reads them (the parser the chart's rendering is
/// validated with); empty ones left out.
fn read_with_pyyaml(text: &str) -> Vec<Value> {
    use std::io::Write;
    let script = "import json, sys, yaml\nprint(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d is not None]))";
    let mut child = Command::new(deploy::python())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The YAML files under `dir`, recursively.
fn yaml_files_under(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files_under(&path, files);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            files.push(path);
        }
    }
}

/// Every example and deployment manifest, and every template of the chart as rendered with
/// the platform values, reads as the operator reads manifests into what PyYAML reads: the
/// same documents, numbered alike.
#[test]
fn every_manifest_reads_alike_with_the_operators_yaml_reader() {
    let mut files = Vec::new();
    for dir in [
        "examples",
        "deploy",
        "crds",
        "charts/gpucloud-operator/values.yaml",
    ] {
        let path = repository_root().join(dir);
        if path.is_dir() {
            yaml_files_under(&path, &mut files);
        } else {
            files.push(path);
        }
    }
    files.sort();
    assert!(files.len() > 30, "{files:?}");
    let mut streams: Vec<(String, String)> = files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            (file.display().to_string(), text)
        })
        .collect();
    let rendered = render(&platform_values());
    assert!(rendered.objects().len() > 10 && !rendered.crds.is_empty());
    for (index, text) in rendered.crds.iter().chain(&rendered.manifests).enumerate() {
        streams.push((format!("the chart's template output {index}"), text.clone()));
    }
    for (origin, text) in &streams {
        let ours = read_as_the_operator(origin, text);
        assert!(!ours.is_empty(), "{origin}");
        assert_eq!(
            whole_numbers(json!(ours)),
            whole_numbers(json!(read_with_pyyaml(text))),
            "{origin}"
        );
    }
}

/// A GitOps install names an image of its own: the chart's default is a placeholder no
/// registry serves.
fn assert_not_placeholder(label: &str, rendered: &Rendered) {
    let image = pod_spec(rendered)["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !image.starts_with("ghcr.io/example/"),
        "{label}: the placeholder image {image}"
    );
}

/// Numbers of kinds in the docs and the chart ("the nine kinds") are the registry's.
#[test]
fn docs_count_the_kinds_the_registry_has() {
    const NUMBERS: [&str; 13] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    let kinds = gpucloud_controller::kinds::registry::crds().len();
    let mut files = vec![
        "README.md".to_string(),
        "CHANGELOG.md".to_string(),
        "charts/gpucloud-operator/README.md".to_string(),
        "charts/gpucloud-operator/values.yaml".to_string(),
        "charts/gpucloud-operator/values.schema.json".to_string(),
        "charts/gpucloud-operator/Chart.yaml".to_string(),
    ];
    // docs/performance.md (benchmark runs) and docs/simulator.md (its load tests) count the
    // kinds a run exercised, not the operator's.
    files.extend(
        yaml_files_with(&repository_root().join("docs"), ".md")
            .into_iter()
            .filter(|f| f != "performance.md" && f != "simulator.md")
            .map(|f| format!("docs/{f}")),
    );
    let mut counted = 0;
    for file in &files {
        let text = std::fs::read_to_string(repository_root().join(file)).unwrap();
        let words: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric() && c != '-')
            .map(str::to_lowercase)
            .filter(|w| !w.is_empty())
            .collect();
        for pair in words.windows(2) {
            if pair[1] != "kinds" {
                continue;
            }
            let number = NUMBERS
                .iter()
                .position(|n| *n == pair[0])
                .or_else(|| pair[0].parse().ok());
            if let Some(number) = number {
                assert_eq!(
                    number, kinds,
                    "{file} says \"{} kinds\"; the registry has {kinds}",
                    pair[0]
                );
                counted += 1;
            }
        }
    }
    assert!(counted >= 4, "only {counted} counts of kinds found");
}

/// The image's user is the one the pod's securityContext runs as.
#[test]
fn dockerfile_runs_as_the_chart_user() {
    let dockerfile = std::fs::read_to_string(repository_root().join("Dockerfile")).unwrap();
    let user = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    let pod = render(&json!({}))
        .find("Deployment", RELEASE)
        .unwrap()["spec"]["template"]["spec"]["securityContext"]
        .clone();
    assert_eq!(
        user.trim(),
        format!("{}:{}", pod["runAsUser"], pod["runAsGroup"])
    );
    assert!(
        dockerfile.contains("distroless"),
        "a distroless final stage"
    );
}

/// The example overlay of docs/install.md renders: image, namespace and settings replaced.
#[test]
fn the_example_overlay_renders() {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(repository_root().join("deploy/overlays/example"))
        .output()
        .expect("kubectl is needed to render the kustomize base (.ci/run installs it)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let objects = deploy::yaml_documents(&String::from_utf8(output.stdout).unwrap());
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example.com/gpucloud-operator:0.1.0"
    );
    let env: BTreeMap<&str, &str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?)))
        .collect();
    assert_eq!(env["GPUCLOUD_BUDGET_FLOOR"], "50");
    let binding = objects
        .iter()
        .find(|o| o["kind"] == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(binding["subjects"][0]["namespace"], RELEASE_NAMESPACE);
}

/// `--set key=value` of a helm command line as values (`{a,b}` is a list, `true` and `false`
/// booleans, `null` a removed key, as in Helm).
fn helm_set_values(command: &str) -> Value {
    let mut values = json!({});
    let mut words = command.split_whitespace();
    while let Some(word) = words.next() {
        if word != "--set" {
            continue;
        }
        let assignment = words.next().unwrap().trim_matches('\'');
        let (path, raw) = assignment
            .split_once('=')
            .unwrap_or_else(|| panic!("--set {assignment}"));
        let value = match raw.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            Some(list) => json!(list.split(',').collect::<Vec<_>>()),
            None => match raw {
                "true" | "false" => json!(raw == "true"),
                // Helm's --set removes a key set to null.
                "null" => Value::Null,
                _ => json!(raw),
            },
        };
        let mut target = &mut values;
        for key in path.split('.') {
            target = &mut target[key];
        }
        *target = value;
    }
    values
}

/// The install commands of the README and docs/install.md use files that exist and values the
/// chart accepts.
#[test]
fn documented_install_commands_use_these_files() {
    for doc in ["README.md", "docs/install.md"] {
        let text = std::fs::read_to_string(repository_root().join(doc)).unwrap();
        let joined = text.replace("\\\n", " ");
        let helm_installs: Vec<&str> = joined
            .lines()
            .filter(|l| l.starts_with("helm install "))
            .collect();
        assert!(!helm_installs.is_empty(), "{doc}: no helm install");
        for line in helm_installs {
            let values = helm_set_values(line);
            assert!(values["image"]["repository"].is_string(), "{doc}: {line}");
            render(&values);
        }
        // The chart they name is the package scripts/release.sh makes (tests/release.rs).
        let package = format!(
            "target/dist/gpucloud-operator-{}.tgz",
            env!("CARGO_PKG_VERSION")
        );
        for line in joined
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with("helm install ") || l.starts_with("helm upgrade "))
        {
            let chart = line.split_whitespace().nth(3).unwrap();
            assert_eq!(chart, package, "{doc}: {line}");
        }
        // Options shown inline (`--set ...` in prose); `...` stands for the reader's value.
        let prose = joined.replace('\n', " ");
        for span in prose.split('`').skip(1).step_by(2) {
            if span.starts_with("--set ") {
                let mut values = helm_set_values(&span.replace("=...", "=placeholder"));
                if values["credentials"]["existingSecret"] == "" {
                    values["credentials"]["apiKey"] = json!("placeholder");
                }
                if values["image"]["digest"] == "placeholder" {
                    values["image"]["digest"] = json!(DIGEST);
                }
                render(&values);
            }
        }
        for line in joined
            .lines()
            .filter(|l| l.contains("kubectl apply --server-side -k "))
        {
            let dir = line
                .split("-k ")
                .nth(1)
                .unwrap()
                .split(|c: char| c.is_whitespace() || c == '`')
                .next()
                .unwrap();
            assert!(
                repository_root()
                    .join(dir)
                    .join("kustomization.yaml")
                    .is_file(),
                "{doc}: {dir}"
            );
        }
    }
}

/// Every setting the chart renders is read by the operator: `run` parses each combination's
/// environment, and the binary takes the logging variables.
#[test]
fn every_rendered_setting_is_taken_by_the_operator() {
    for (label, values) in combinations() {
        let rendered = render(&values);
        let args = deploy::run_args(&rendered, &[]);
        assert_eq!(args.operator_namespace, RELEASE_NAMESPACE, "{label}");
        let watched: Vec<String> = values["watchNamespaces"]
            .as_array()
            .map(|l| l.iter().map(|n| n.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        assert_eq!(args.namespaces, watched, "{label}");
        args.config().unwrap_or_else(|e| panic!("{label}: {e}"));

        let env = deploy::pod_env(&rendered);
        let logging: Vec<&(String, String)> = env
            .iter()
            .filter(|(n, _)| deploy::GLOBAL_ENV.contains(&n.as_str()))
            .collect();
        assert_eq!(logging.len(), 2, "{label}");
        let output = Command::new(env!("CARGO_BIN_EXE_gpucloud-operator"))
            .arg("version")
            .envs(logging.iter().map(|(n, v)| (n, v)))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{label}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

// === pod security and the platform's values ===

/// What the restricted Pod Security Standard (Kubernetes 1.33, `restricted:latest`, the
/// baseline's checks included) refuses in a pod spec, one message per violation: what
/// `pod-security.kubernetes.io/enforce: restricted` would refuse.
fn restricted_violations(pod: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let pod_security = &pod["securityContext"];
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[field] == true {
            found.push(format!("{field} is true"));
        }
    }
    const VOLUME_TYPES: [&str; 8] = [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    for volume in pod["volumes"].as_array().into_iter().flatten() {
        let volume = volume.as_object().unwrap();
        for key in volume.keys().filter(|k| *k != "name") {
            if !VOLUME_TYPES.contains(&key.as_str()) {
                found.push(format!("volume {}: type {key}", volume["name"]));
            }
        }
    }
    let seccomp_allowed = |profile: &Value| {
        matches!(
            profile["type"].as_str(),
            Some("RuntimeDefault") | Some("Localhost")
        )
    };
    if pod_security["runAsUser"] == 0 {
        found.push("pod runAsUser is 0".into());
    }
    if pod_security["seccompProfile"]["type"] == "Unconfined" {
        found.push("pod seccompProfile is Unconfined".into());
    }
    for sysctl in pod_security["sysctls"].as_array().into_iter().flatten() {
        found.push(format!("sysctl {}", sysctl["name"]));
    }
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| pod[*list].as_array().into_iter().flatten());
    for container in containers {
        let name = container["name"].as_str().unwrap_or("?");
        let security = &container["securityContext"];
        if security["privileged"] == true {
            found.push(format!("{name}: privileged"));
        }
        if security["allowPrivilegeEscalation"] != false {
            found.push(format!("{name}: allowPrivilegeEscalation is not false"));
        }
        let non_root = match &security["runAsNonRoot"] {
            Value::Bool(value) => *value,
            _ => pod_security["runAsNonRoot"] == true,
        };
        if !non_root {
            found.push(format!("{name}: runAsNonRoot is not true"));
        }
        if security["runAsUser"] == 0 {
            found.push(format!("{name}: runAsUser is 0"));
        }
        let seccomp = if security["seccompProfile"].is_object() {
            &security["seccompProfile"]
        } else {
            &pod_security["seccompProfile"]
        };
        if !seccomp_allowed(seccomp) {
            found.push(format!(
                "{name}: seccompProfile is not RuntimeDefault or Localhost"
            ));
        }
        let capabilities = &security["capabilities"];
        if !capabilities["drop"]
            .as_array()
            .is_some_and(|d| d.contains(&json!("ALL")))
        {
            found.push(format!("{name}: capabilities do not drop ALL"));
        }
        for added in capabilities["add"].as_array().into_iter().flatten() {
            if added != "NET_BIND_SERVICE" {
                found.push(format!("{name}: adds capability {added}"));
            }
        }
        if security["procMount"]
            .as_str()
            .is_some_and(|m| m != "Default")
        {
            found.push(format!("{name}: procMount"));
        }
        for port in container["ports"].as_array().into_iter().flatten() {
            if port["hostPort"].as_u64().is_some_and(|p| p != 0) {
                found.push(format!("{name}: hostPort {}", port["hostPort"]));
            }
        }
    }
    found
}

fn pod_spec(rendered: &Rendered) -> Value {
    rendered.find("Deployment", RELEASE).unwrap()["spec"]["template"]["spec"].clone()
}

/// The chart's pod passes the restricted Pod Security Standard with its defaults and with the
/// user ids left to the platform (OpenShift's restricted SCC assigns them from a range), and
/// the check itself refuses what the standard refuses.
#[test]
fn the_pod_meets_the_restricted_pod_security_standard() {
    let defaults = pod_spec(&render(&json!({})));
    assert_eq!(restricted_violations(&defaults), Vec::<String>::new());
    assert_eq!(defaults["securityContext"]["runAsUser"], 65532);

    let platform = render(&json!({"podSecurityContext": {"runAsUser": null, "runAsGroup": null}}));
    assert_eq!(platform.invalid, Vec::<String>::new());
    let pod = pod_spec(&platform);
    assert_eq!(restricted_violations(&pod), Vec::<String>::new());
    let security = pod["securityContext"].as_object().unwrap();
    assert!(
        !security.contains_key("runAsUser") && !security.contains_key("runAsGroup"),
        "{security:?}"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);

    let escalating = pod_spec(&render(&json!({
        "securityContext": {"allowPrivilegeEscalation": true, "capabilities": {"add": ["NET_ADMIN"]}},
        "podSecurityContext": {"runAsNonRoot": null, "seccompProfile": null},
        "extraVolumes": [{"name": "host", "hostPath": {"path": "/var/run"}}],
    })));
    let violations = restricted_violations(&escalating);
    for expected in [
        "operator: allowPrivilegeEscalation is not false",
        "operator: adds capability \"NET_ADMIN\"",
        "operator: seccompProfile is not RuntimeDefault or Localhost",
        "volume \"host\": type hostPath",
    ] {
        assert!(
            violations.iter().any(|v| v == expected),
            "{expected} not found in {violations:?}"
        );
    }
    // runAsNonRoot from the container alone still passes.
    assert!(!violations.iter().any(|v| v.contains("runAsNonRoot")));
}

/// `image.digest` pins the image (`repository@sha256:...`) whatever the tag says;
/// `image.registry` goes in front of the repository.
#[test]
fn the_image_is_pinned_by_digest() {
    let image = |values: Value| -> String {
        let pod = pod_spec(&render(&values));
        pod["containers"][0]["image"].as_str().unwrap().to_string()
    };
    assert_eq!(image(json!({})), "ghcr.io/example/gpucloud-operator:0.1.0");
    assert_eq!(
        image(
            json!({"image": {"repository": "registry.example.com/gpucloud-operator",
                               "tag": "0.1.0-rc1", "digest": DIGEST}})
        ),
        format!("registry.example.com/gpucloud-operator@{DIGEST}")
    );
    assert_eq!(
        image(json!({"image": {"registry": "registry.example.com:5000/",
                               "repository": "platform/gpucloud-operator", "tag": "0.1.0-rc1"}})),
        "registry.example.com:5000/platform/gpucloud-operator:0.1.0-rc1"
    );
    for bad in [
        json!({"image": {"digest": "sha256:abc"}}),
        json!({"image": {"digest": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}),
        json!({"image": {"registry": "https://registry.example.com"}}),
    ] {
        assert!(try_render(&bad).is_err(), "{bad} was accepted");
    }
}

/// Each of the platform values lands where Kubernetes reads it.
#[test]
fn platform_values_land_where_they_should() {
    let rendered = render(&platform_values());
    assert_eq!(rendered.invalid, Vec::<String>::new());
    let deployment = rendered.find("Deployment", RELEASE).unwrap();
    assert_eq!(
        deployment["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "platform-critical");
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let selector = deployment["spec"]["selector"]["matchLabels"].clone();
    let spread = pod["topologySpreadConstraints"].as_array().unwrap();
    assert_eq!(spread.len(), 2);
    assert_eq!(spread[0]["labelSelector"]["matchLabels"], selector);
    assert_eq!(spread[0]["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(
        spread[1]["labelSelector"]["matchLabels"],
        json!({"team": "platform"})
    );
    assert_eq!(
        pod["volumes"],
        json!([{"name": "scratch", "emptyDir": {"sizeLimit": "64Mi"}}])
    );
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        format!("registry.example.com/platform/gpucloud-operator@{DIGEST}")
    );
    assert_eq!(container["args"], json!(["run", "--settle-window=45s"]));
    assert_eq!(
        container["volumeMounts"],
        json!([{"name": "scratch", "mountPath": "/scratch"}])
    );
    let env = container["env"].as_array().unwrap();
    assert_eq!(
        env.last().unwrap()["valueFrom"]["configMapKeyRef"]["name"],
        "operator-tuning"
    );
    assert_eq!(
        container["livenessProbe"],
        json!({"httpGet": {"path": "/healthz", "port": "health"}, "initialDelaySeconds": 10,
               "periodSeconds": 20, "timeoutSeconds": 3, "failureThreshold": 5})
    );
    assert_eq!(
        container["readinessProbe"],
        json!({"httpGet": {"path": "/readyz", "port": "health"}, "initialDelaySeconds": 1,
               "periodSeconds": 7, "timeoutSeconds": 4, "failureThreshold": 2})
    );
    // The flags reach `run` (the ConfigMap's value stands in for the kubelet's).
    let args = deploy::run_args(&rendered, &[]);
    args.config().unwrap();

    // The PodMonitor scrapes the metrics port and names the job the alerts select.
    assert!(rendered.find("ServiceMonitor", RELEASE).is_none());
    let monitor = rendered.find("PodMonitor", RELEASE).unwrap();
    assert_eq!(monitor["metadata"]["labels"]["release"], "prom");
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["interval"], "15s");
    assert_eq!(endpoint["scrapeTimeout"], "10s");
    assert_eq!(
        endpoint["relabelings"][0],
        json!({"targetLabel": "job", "replacement": format!("{RELEASE}-metrics")})
    );
    assert_eq!(endpoint["relabelings"][1]["targetLabel"], "node");
    assert_eq!(
        endpoint["metricRelabelings"][0]["regex"],
        "process_virtual_memory_bytes"
    );
    let rule = rendered.find("PrometheusRule", RELEASE).unwrap();
    let expr = rule["spec"]["groups"][0]["rules"][1]["expr"]
        .as_str()
        .unwrap();
    assert!(
        expr.contains(&format!("job=\"{RELEASE}-metrics\"")),
        "{expr}"
    );

    // The chart's own priorityClassName wins over the global one.
    let own = render(&json!({"priorityClassName": "own",
                             "global": {"priorityClassName": "platform-critical"}}));
    assert_eq!(pod_spec(&own)["priorityClassName"], "own");
    assert!(
        pod_spec(&render(&json!({})))
            .get("priorityClassName")
            .is_none()
    );

    // The ServiceMonitor's options.
    let service_monitor = render(&json!({"metrics": {"serviceMonitor": {"enabled": true,
        "scrapeTimeout": "20s", "relabelings": [{"targetLabel": "team", "replacement": "platform"}],
        "metricRelabelings": [{"action": "labeldrop", "regex": "host"}]}}}));
    let monitor = service_monitor.find("ServiceMonitor", RELEASE).unwrap();
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["scrapeTimeout"], "20s");
    assert_eq!(endpoint["relabelings"][0]["targetLabel"], "team");
    assert_eq!(endpoint["metricRelabelings"][0]["action"], "labeldrop");
    assert!(try_render(&json!({"metrics": {"serviceMonitor": {"scrapeTimeout": 10}}})).is_err());
}

/// A ServiceMonitor and a PodMonitor at once would scrape every replica twice.
#[test]
fn service_and_pod_monitor_are_refused_together() {
    let results = deploy::render_many(&[json!({"metrics": {
        "serviceMonitor": {"enabled": true}, "podMonitor": {"enabled": true}}})]);
    let error = results[0].as_ref().unwrap_err();
    assert!(error.contains("not both"), "{error}");
}

/// The leaves of the values schema: each property without properties of its own, by its
/// dotted path.
fn schema_leaves(schema: &Value, path: &str, leaves: &mut Vec<String>) {
    match schema["properties"].as_object() {
        Some(properties) => {
            for (name, property) in properties {
                let path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                schema_leaves(property, &path, leaves);
            }
        }
        None => leaves.push(path.to_string()),
    }
}

/// `value` with `change` (a dotted path and its value) merged in.
fn with_value(mut values: Value, path: &str, change: Value) -> Value {
    let mut target = &mut values;
    for key in path.split('.') {
        target = &mut target[key];
    }
    *target = change;
    values
}

/// Every value the schema accepts is used: set to something other than its default (with the
/// values it depends on turned on), it changes what the chart renders. The table names a
/// value for every leaf of the schema, so a value added to the schema without a use fails here.
#[test]
fn every_value_the_schema_accepts_changes_the_rendering() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(deploy::chart_dir().join("values.schema.json")).unwrap(),
    )
    .unwrap();
    let mut leaves = Vec::new();
    schema_leaves(&schema, "", &mut leaves);

    let monitoring = json!({"metrics": {"serviceMonitor": {"enabled": true}},
        "prometheusRule": {"enabled": true}, "grafana": {"dashboards": {"enabled": true}},
        "podDisruptionBudget": {"enabled": true}, "networkPolicy": {"enabled": true}});
    let pod_monitor = json!({"metrics": {"podMonitor": {"enabled": true}}});
    let rolling = json!({"strategy": {"type": "RollingUpdate"}});
    let inline_key = json!({"credentials": {"existingSecret": ""}});
    let label = json!({"a": "b"});
    let list = json!([{"targetLabel": "team", "replacement": "platform"}]);
    let default_policy = json!({"gpuPolicy": {"default": {"enabled": true}}});
    #[rustfmt::skip]
    let table: Vec<(&str, Value, Value)> = vec![
        ("image.registry", json!({}), json!("registry.example.com")),
        ("image.repository", json!({}), json!("registry.example.com/gpucloud-operator")),
        ("image.tag", json!({}), json!("0.1.0-rc1")),
        ("image.digest", json!({}), json!(DIGEST)),
        ("image.pullPolicy", json!({}), json!("Always")),
        ("imagePullSecrets", json!({}), json!([{"name": "pull"}])),
        ("replicas", json!({}), json!(3)),
        ("leaderElection.enabled", json!({}), json!(false)),
        ("leaderElection.leaseName", json!({}), json!("other")),
        ("leaderElection.leaseDuration", json!({}), json!("20s")),
        ("leaderElection.renewDeadline", json!({}), json!("12s")),
        ("leaderElection.retryPeriod", json!({}), json!("3s")),
        ("watchNamespaces", json!({}), json!(["team-a"])),
        ("cloud.url", json!({}), json!("https://cloud.example/v1")),
        ("cloud.timeout", json!({}), json!("10s")),
        ("cloud.rateLimit", json!({}), json!(5)),
        ("cloud.rateBurst", json!({}), json!(7)),
        ("credentials.existingSecret", json!({}), json!("other")),
        ("credentials.apiKey", inline_key.clone(), json!("sk-test")),
        ("credentials.key", json!({}), json!("token")),
        ("logLevel", json!({}), json!("debug")),
        ("logFormat", json!({}), json!("text")),
        ("resyncInterval", json!({}), json!("5m")),
        ("concurrency", json!({}), json!(3)),
        ("kubeApi.qps", json!({}), json!(20)),
        ("kubeApi.burst", json!({}), json!(40)),
        ("kubeApi.maxInFlight", json!({}), json!(8)),
        ("budgetFloor", json!({}), json!(10)),
        ("orphans.sweepInterval", json!({}), json!("5m")),
        ("orphans.gracePeriod", json!({}), json!("30m")),
        ("orphans.delete", json!({}), json!(true)),
        ("crds.enabled", json!({}), json!(false)),
        ("crds.keep", json!({}), json!(false)),
        ("deletionProtection.enabled", json!({}), json!(false)),
        ("tenantRoles.enabled", json!({}), json!(false)),
        ("tenantRoles.aggregate", json!({}), json!(false)),
        ("gpuPolicy.admission.enabled", json!({}), json!(false)),
        ("gpuPolicy.default.enabled", json!({}), json!(true)),
        ("gpuPolicy.default.namespaceSelector", default_policy.clone(), json!({"matchLabels": {"team": "a"}})),
        ("gpuPolicy.default.allowedGpuTypes", default_policy.clone(), json!(["L40S"])),
        ("gpuPolicy.default.allowedRegions", default_policy.clone(), json!(["us-east-1"])),
        ("gpuPolicy.default.allowedTiers", default_policy.clone(), json!(["Advanced"])),
        ("gpuPolicy.default.maxGpusPerMachine", default_policy.clone(), json!(4)),
        ("gpuPolicy.default.maxLifetime", default_policy.clone(), json!("72h")),
        ("gpuPolicy.default.maxPoolReplicas", default_policy.clone(), json!(10)),
        ("gpuPolicy.default.namespaceLimits.machines", default_policy.clone(), json!(10)),
        ("gpuPolicy.default.namespaceLimits.gpus", default_policy.clone(), json!(32)),
        ("gpuPolicy.default.namespaceLimits.hourlyRate", default_policy.clone(), json!(100.5)),
        ("gpuPolicy.default.namespaceLimits.hourlyRateWithoutBudget", default_policy.clone(), json!(25)),
        ("gpuPolicy.default.namespaceLimits.currency", default_policy.clone(), json!("EUR")),
        ("catalogReader.bindAuthenticated", json!({}), json!(false)),
        ("adoption.allowed", json!({}), json!(true)),
        ("shutdownTimeout", json!({}), json!("20s")),
        ("terminationGracePeriodSeconds", json!({}), json!(60)),
        ("extraEnv", json!({}), json!([{"name": "GPUCLOUD_SETTLE_WINDOW", "value": "45s"}])),
        ("extraArgs", json!({}), json!(["--settle-window=45s"])),
        ("extraVolumes", json!({}), json!([{"name": "scratch", "emptyDir": {}}])),
        ("extraVolumeMounts", json!({}), json!([{"name": "scratch", "mountPath": "/scratch"}])),
        ("strategy.type", json!({}), json!("Recreate")),
        ("strategy.rollingUpdate.maxSurge", rolling.clone(), json!(1)),
        ("strategy.rollingUpdate.maxUnavailable", rolling.clone(), json!(0)),
        ("podSecurityContext.runAsNonRoot", json!({}), json!(null)),
        ("podSecurityContext.runAsUser", json!({}), json!(1000)),
        ("podSecurityContext.runAsGroup", json!({}), json!(1000)),
        ("podSecurityContext.fsGroup", json!({}), json!(1000)),
        ("podSecurityContext.seccompProfile", json!({}), json!({"type": "Localhost", "localhostProfile": "operator.json"})),
        ("securityContext.allowPrivilegeEscalation", json!({}), json!(null)),
        ("securityContext.readOnlyRootFilesystem", json!({}), json!(false)),
        ("securityContext.runAsNonRoot", json!({}), json!(null)),
        ("securityContext.runAsUser", json!({}), json!(1000)),
        ("securityContext.runAsGroup", json!({}), json!(1000)),
        ("securityContext.privileged", json!({}), json!(null)),
        ("securityContext.capabilities", json!({}), json!({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})),
        ("livenessProbe.initialDelaySeconds", json!({}), json!(9)),
        ("livenessProbe.periodSeconds", json!({}), json!(9)),
        ("livenessProbe.timeoutSeconds", json!({}), json!(9)),
        ("livenessProbe.failureThreshold", json!({}), json!(9)),
        ("readinessProbe.initialDelaySeconds", json!({}), json!(9)),
        ("readinessProbe.periodSeconds", json!({}), json!(9)),
        ("readinessProbe.timeoutSeconds", json!({}), json!(9)),
        ("readinessProbe.failureThreshold", json!({}), json!(9)),
        ("metrics.port", json!({}), json!(9090)),
        ("metrics.service.enabled", json!({}), json!(true)),
        ("metrics.service.annotations", monitoring.clone(), label.clone()),
        ("metrics.serviceMonitor.enabled", json!({}), json!(true)),
        ("metrics.serviceMonitor.interval", monitoring.clone(), json!("15s")),
        ("metrics.serviceMonitor.scrapeTimeout", monitoring.clone(), json!("10s")),
        ("metrics.serviceMonitor.labels", monitoring.clone(), label.clone()),
        ("metrics.serviceMonitor.relabelings", monitoring.clone(), list.clone()),
        ("metrics.serviceMonitor.metricRelabelings", monitoring.clone(), list.clone()),
        ("metrics.podMonitor.enabled", json!({}), json!(true)),
        ("metrics.podMonitor.interval", pod_monitor.clone(), json!("15s")),
        ("metrics.podMonitor.scrapeTimeout", pod_monitor.clone(), json!("10s")),
        ("metrics.podMonitor.labels", pod_monitor.clone(), label.clone()),
        ("metrics.podMonitor.relabelings", pod_monitor.clone(), list.clone()),
        ("metrics.podMonitor.metricRelabelings", pod_monitor.clone(), list.clone()),
        ("prometheusRule.enabled", json!({}), json!(true)),
        ("prometheusRule.labels", monitoring.clone(), label.clone()),
        ("prometheusRule.lowBalance", monitoring.clone(), json!(80)),
        ("prometheusRule.additionalRules", monitoring.clone(), json!([{"alert": "Extra", "expr": "vector(1)"}])),
        ("prometheusRule.runbookBaseUrl", monitoring.clone(), json!("https://docs.example.com/operations")),
        ("grafana.dashboards.enabled", json!({}), json!(true)),
        ("grafana.dashboards.label", monitoring.clone(), json!("dashboards")),
        ("grafana.dashboards.labelValue", monitoring.clone(), json!("yes")),
        ("grafana.dashboards.namespace", monitoring.clone(), json!("monitoring")),
        ("grafana.dashboards.annotations", monitoring.clone(), label.clone()),
        ("health.port", json!({}), json!(9091)),
        ("resources", json!({}), json!({"requests": {"cpu": "100m"}})),
        ("serviceAccount.create", json!({"serviceAccount": {"name": "own"}}), json!(false)),
        ("serviceAccount.name", json!({}), json!("own")),
        ("serviceAccount.annotations", json!({}), label.clone()),
        ("podDisruptionBudget.enabled", json!({}), json!(true)),
        ("podDisruptionBudget.maxUnavailable", monitoring.clone(), json!("50%")),
        ("networkPolicy.enabled", json!({}), json!(true)),
        ("networkPolicy.metricsFrom", monitoring.clone(), json!([{"podSelector": {}}])),
        ("networkPolicy.apiServerPorts", monitoring.clone(), json!([443])),
        ("networkPolicy.cloudPorts", monitoring.clone(), json!([8443])),
        ("podAnnotations", json!({}), label.clone()),
        ("podLabels", json!({}), label.clone()),
        ("nodeSelector", json!({}), label.clone()),
        ("tolerations", json!({}), json!([{"key": "gpu", "operator": "Exists"}])),
        ("affinity", json!({}), json!({"nodeAffinity": {}})),
        ("topologySpreadConstraints", json!({}), json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}])),
        ("priorityClassName", json!({}), json!("high")),
        ("global.priorityClassName", json!({}), json!("high")),
    ];
    let named: Vec<String> = table.iter().map(|(path, _, _)| path.to_string()).collect();
    let mut sorted_leaves = leaves.clone();
    sorted_leaves.sort();
    let mut sorted_named = named.clone();
    sorted_named.sort();
    assert_eq!(
        sorted_named, sorted_leaves,
        "the table must name every leaf of values.schema.json, once"
    );

    let mut sets = Vec::new();
    for (path, base, value) in &table {
        sets.push(base.clone());
        sets.push(with_value(base.clone(), path, value.clone()));
    }
    let results = deploy::render_many(&sets);
    for ((path, _, value), pair) in table.iter().zip(results.chunks(2)) {
        let before = pair[0]
            .as_ref()
            .unwrap_or_else(|e| panic!("{path} base: {e}"));
        let after = pair[1]
            .as_ref()
            .unwrap_or_else(|e| panic!("{path}={value} refused: {e}"));
        assert_ne!(
            before, after,
            "{path}={value} changes nothing the chart renders"
        );
    }
}

/// The values docs/install.md's "Values" table names: each backquoted name of a row's first
/// cell, a name written `.leaf` taking the path of the cell's first name before its last dot.
fn documented_values() -> Vec<String> {
    let install = std::fs::read_to_string(repository_root().join("docs/install.md")).unwrap();
    let section = install
        .split("\n## Values\n")
        .nth(1)
        .expect("docs/install.md has a Values section");
    let section = section.split("\n## ").next().unwrap_or_default();
    let mut names = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cell = row.split('|').nth(1).unwrap_or_default();
        let mut prefix = String::new();
        for name in cell.split('`').skip(1).step_by(2) {
            match name.strip_prefix('.') {
                Some(leaf) => names.push(format!("{prefix}{leaf}")),
                None => {
                    if prefix.is_empty() {
                        prefix = name
                            .rsplit_once('.')
                            .map(|(parent, _)| format!("{parent}."))
                            .unwrap_or_default();
                    }
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

/// docs/install.md's Values table names every value of values.schema.json: the value itself,
/// a parent that stands for all of it (`podSecurityContext`), or `parent.*`.
#[test]
fn the_install_guide_lists_every_value() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(deploy::chart_dir().join("values.schema.json")).unwrap(),
    )
    .unwrap();
    let mut leaves = Vec::new();
    schema_leaves(&schema, "", &mut leaves);
    let documented = documented_values();
    let missing: Vec<&String> = leaves
        .iter()
        .filter(|leaf| {
            !documented.iter().any(|name| {
                let parent = name.strip_suffix(".*").unwrap_or(name);
                *leaf == name || leaf.starts_with(&format!("{parent}."))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/install.md (\"Values\") does not name {missing:?}"
    );
}

/// NOTES.txt warns while the image is the placeholder, and not once it is set.
#[test]
fn notes_warn_about_the_placeholder_image() {
    let results = deploy::render_many(&[
        json!({}),
        json!({"image": {"repository": "registry.example.com/gpucloud-operator"}}),
        json!({"image": {"registry": "registry.example.com", "repository": "gpucloud-operator"}}),
    ]);
    let notes = |i: usize| -> String {
        let rendered = results[i].as_ref().unwrap();
        rendered
            .iter()
            .find(|(path, _)| path.ends_with("NOTES.txt"))
            .map(|(_, text)| text.clone())
            .unwrap()
    };
    assert!(notes(0).contains("WARNING: image.repository is the chart's placeholder"));
    assert!(notes(0).contains("--set image.repository="));
    assert!(!notes(1).contains("WARNING"), "{}", notes(1));
    assert!(!notes(2).contains("WARNING"), "{}", notes(2));
}

/// GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as dashes.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Each alert names its runbook: a section of docs/operations.md.
#[test]
fn every_alert_has_a_runbook_in_the_operations_guide() {
    let rendered = render(&json!({"prometheusRule": {"enabled": true,
        "additionalRules": [{"alert": "Own", "expr": "vector(1)"}]}}));
    let rule = rendered.find("PrometheusRule", RELEASE).unwrap();
    let docs = std::fs::read_to_string(repository_root().join("docs/operations.md")).unwrap();
    let anchors: Vec<String> = docs
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect();
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    let base = "https://github.com/example/gpucloud-operator/blob/main/docs/operations.md#";
    for rule in &rules[..rules.len() - 1] {
        let alert = rule["alert"].as_str().unwrap();
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| {
                panic!("{alert} has no runbook_url");
            });
        let section = url
            .strip_prefix(base)
            .unwrap_or_else(|| panic!("{alert}: {url}"));
        assert_eq!(section, alert.to_lowercase());
        assert!(
            anchors.iter().any(|a| a == section),
            "{alert}: docs/operations.md has no section #{section}"
        );
    }
}
