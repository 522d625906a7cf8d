#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The Helm chart and the kustomize base: rendered with the default values and the main
//! combinations, linted (`helm lint --strict`), checked against the Kubernetes 1.33 schemas,
//! applied to the embedded API server; the values schema refuses wrong types; the chart's
//! CRDs and the kustomize base are the generated files they claim to be.
//!
//! Regenerate the copies (kustomize CRDs and base) with
//! `UPDATE_GENERATED=1 cargo test --test deploy_chart`; the chart's CRD template comes from
//! the kind registry (`UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry`).

mod deploy;

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
    ]
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
        .filter(|e| e.get("valueFrom").is_some())
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
            "ServiceAccount"
        ],
        "defaults: nothing optional but deletion protection, leader election and the catalog reader"
    );
    assert_eq!(
        defaults.env_var("GPUCLOUD_LEADER_ELECT").as_deref(),
        Some("true")
    );
    let unprotected = render(&json!({"deletionProtection": {"enabled": false}}));
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
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
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
        let file = match file.as_str() {
            "clusterrole.yaml" => "rbac.yaml".to_string(),
            "validatingadmissionpolicy.yaml" => DELETION_PROTECTION.to_string(),
            _ => file,
        };
        let mut text = GENERATED_HEADER.to_string();
        for object in &objects {
            text.push_str("---\n");
            text.push_str(&serde_yaml::to_string(object).unwrap());
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

    let flux = read("deploy/flux/operator.yaml");
    assert_eq!(
        flux["spec"]["chart"]["spec"]["chart"],
        "./charts/gpucloud-operator"
    );
    assert_eq!(flux["spec"]["targetNamespace"], RELEASE_NAMESPACE);
    let rendered = render(&flux["spec"]["values"]);
    assert!(rendered.crd_objects().is_empty(), "Flux: CRDs rendered");

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
/// booleans, as in Helm).
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
