//! What the deployment tests share: the Python tools (helm-python-sdk, kubernetes-validate)
//! that render the chart without a helm binary, applying rendered objects to the embedded API
//! server, and an RBAC rule matcher.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use clap::{CommandFactory, Parser};
use gpucloud_controller::operator::cli::Args;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const RELEASE: &str = "gpucloud-operator";
pub const RELEASE_NAMESPACE: &str = "gpucloud-system";

pub fn repository_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn chart_dir() -> PathBuf {
    repository_root().join("charts/gpucloud-operator")
}

#[path = "../python/tools.rs"]
mod tools;

/// The virtualenv's interpreter, made by `.ci/python-tools.sh` on first use.
pub fn python() -> &'static Path {
    tools::python(repository_root())
}

/// The chart rendered with some values.
#[derive(Debug, Deserialize)]
pub struct Rendered {
    /// The CRDs (`templates/crds.yaml`; empty with `crds.enabled: false`).
    pub crds: Vec<String>,
    /// Each other template's output (NOTES.txt left out).
    pub manifests: Vec<String>,
    /// Chart.yaml as Helm reads it.
    pub metadata: Value,
    /// `helm lint --strict` with the same values.
    pub lint: Value,
    /// Rendered built-in objects the Kubernetes 1.33 schemas reject.
    pub invalid: Vec<String>,
}

impl Rendered {
    /// `helm lint --strict`'s messages of at least `severity` (1 info, 2 warning, 3 error).
    pub fn lint_findings(&self, severity: i64) -> Vec<&Value> {
        self.lint["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["severity"].as_i64().unwrap() >= severity)
            .collect()
    }

    pub fn crd_objects(&self) -> Vec<Value> {
        self.crds.iter().flat_map(|t| yaml_documents(t)).collect()
    }

    /// Every rendered object, in template order.
    pub fn objects(&self) -> Vec<Value> {
        self.manifests
            .iter()
            .flat_map(|t| yaml_documents(t))
            .collect()
    }

    pub fn find(&self, kind: &str, name: &str) -> Option<Value> {
        self.objects()
            .into_iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    /// The Deployment's environment variables with literal values.
    pub fn env(&self) -> Vec<(String, String)> {
        let deployment = self.find("Deployment", RELEASE).expect("a Deployment");
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
            .collect()
    }

    pub fn env_var(&self, name: &str) -> Option<String> {
        self.env()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
}

/// Runs `tests/deploy/chart.py`: the chart rendered as release `gpucloud-operator` in
/// `gpucloud-system`, or the values schema's refusal.
pub fn try_render(values: &Value) -> Result<Rendered, String> {
    try_render_chart(&chart_dir(), values)
}

/// [`try_render`] of another chart: a directory or a packaged `.tgz`.
pub fn try_render_chart(chart: &Path, values: &Value) -> Result<Rendered, String> {
    let output = Command::new(python())
        .arg(repository_root().join("tests/deploy/chart.py"))
        .arg(chart)
        .arg(values.to_string())
        .arg(RELEASE)
        .arg(RELEASE_NAMESPACE)
        .output()
        .unwrap();
    match output.status.code() {
        Some(0) => Ok(serde_json::from_slice(&output.stdout).unwrap()),
        Some(2) => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
        _ => panic!(
            "chart.py failed with values {values}:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

pub fn render(values: &Value) -> Rendered {
    render_chart(&chart_dir(), values)
}

pub fn render_chart(chart: &Path, values: &Value) -> Rendered {
    try_render_chart(chart, values).unwrap_or_else(|e| panic!("values {values} rejected: {e}"))
}

/// Renders the chart once per set of values in one Python process (`tests/deploy/render_many.py`,
/// no lint or validation): each template's output by path (NOTES.txt and the CRDs included),
/// or the refusal of the values schema or a template.
pub fn render_many(values: &[Value]) -> Vec<Result<BTreeMap<String, String>, String>> {
    use std::io::Write as _;
    let mut child = Command::new(python())
        .arg(repository_root().join("tests/deploy/render_many.py"))
        .arg(chart_dir())
        .args([RELEASE, RELEASE_NAMESPACE])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::to_vec(values).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        output.status.success(),
        "render_many.py: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    results
        .into_iter()
        .map(|result| match result.get("error") {
            Some(error) => Err(error.as_str().unwrap_or_default().to_string()),
            None => Ok(serde_json::from_value(result["rendered"].clone()).unwrap()),
        })
        .collect()
}

/// A real Helm action (`tests/deploy/helm.py`) on release [`RELEASE`] in [`RELEASE_NAMESPACE`]
/// of the cluster `kubeconfig` names: `install` or `upgrade` of `chart` (a directory or a
/// `.tgz`) with `values`, or `uninstall` (`chart` and `values` unused). Returns Helm's result;
/// fails the test on Helm's refusal. Blocking, so async tests run it off their runtime.
pub fn helm(kubeconfig: &Path, action: &str, chart: &Path, values: &Value) -> Value {
    let output = Command::new(python())
        .arg(repository_root().join("tests/deploy/helm.py"))
        .arg(kubeconfig)
        .args([RELEASE_NAMESPACE, RELEASE, action])
        .arg(chart)
        .arg(values.to_string())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The documents of a YAML stream, read as the operator reads manifests (serde-saphyr);
/// empty documents left out.
pub fn yaml_documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("YAML: {e}\n{text}"))
        .into_iter()
        .filter(|value| !value.is_null())
        .collect()
}

fn api_resource(object: &Value) -> ApiResource {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        group,
        version,
        object["kind"].as_str().unwrap(),
    ))
}

/// Server-side applies `objects` (as `kubectl apply --server-side` would), failing the test
/// on any refusal. Namespaced objects carry their namespace (the chart sets it everywhere).
pub async fn apply_all(client: &kube::Client, objects: &[Value]) {
    apply_all_with(client, objects, &PatchParams::apply("deploy-test").force()).await;
}

/// [`apply_all`] as a server-side dry run: every admission and validation step, nothing stored.
pub async fn dry_run_all(client: &kube::Client, objects: &[Value]) {
    let mut params = PatchParams::apply("deploy-test").force();
    params.dry_run = true;
    apply_all_with(client, objects, &params).await;
}

async fn apply_all_with(client: &kube::Client, objects: &[Value], params: &PatchParams) {
    for object in objects {
        let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        let resource = api_resource(object);
        let api: Api<DynamicObject> = match dynamic.namespace() {
            Some(ns) => Api::namespaced_with(client.clone(), &ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        api.patch(&dynamic.name_any(), params, &Patch::Apply(&dynamic))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{} {} refused by the API server: {e}",
                    object["kind"],
                    dynamic.name_any()
                )
            });
    }
}

pub async fn create_namespaces(client: &kube::Client, names: &[&str]) {
    for name in names {
        let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        apply_all(client, &[object]).await;
    }
}

// === RBAC ===

/// One permission: a verb on a resource (`plural` or `plural/subresource`) of a group, in a
/// namespace (`None`: cluster-wide), for any name or only the listed ones.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub namespace: Option<String>,
    pub group: String,
    pub resource: String,
    pub verb: String,
    pub names: BTreeSet<String>,
}

/// The permissions the rendered bindings give `service_account` (in [`RELEASE_NAMESPACE`]),
/// one per (rule, group, resource, verb). Panics on a wildcard anywhere in a rule.
pub fn grants(objects: &[Value], service_account: &str) -> Vec<Grant> {
    let bound = |binding: &Value| {
        binding["subjects"].as_array().unwrap().iter().any(|s| {
            s["kind"] == "ServiceAccount"
                && s["name"] == service_account
                && s["namespace"] == RELEASE_NAMESPACE
        })
    };
    let mut grants = Vec::new();
    for binding in objects {
        let kind = binding["kind"].as_str().unwrap_or_default();
        if !matches!(kind, "ClusterRoleBinding" | "RoleBinding") || !bound(binding) {
            continue;
        }
        let namespace = (kind == "RoleBinding").then(|| {
            binding["metadata"]["namespace"]
                .as_str()
                .unwrap()
                .to_string()
        });
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
        let role_name = binding["roleRef"]["name"].as_str().unwrap();
        grants.extend(role_grants(
            objects,
            role_kind,
            role_name,
            namespace.as_deref(),
        ));
    }
    grants
}

/// The permissions of the role `role_kind`/`role_name` (a Role in `namespace`, or a
/// ClusterRole) as a binding in `namespace` (or a ClusterRoleBinding, `None`) gives them, one
/// per (rule, group, resource, verb). Panics on a wildcard anywhere in a rule, and on a role
/// the rendering lacks.
pub fn role_grants(
    objects: &[Value],
    role_kind: &str,
    role_name: &str,
    namespace: Option<&str>,
) -> Vec<Grant> {
    let role = objects
        .iter()
        .find(|o| {
            o["kind"] == role_kind
                && o["metadata"]["name"] == role_name
                && (role_kind == "ClusterRole" || o["metadata"]["namespace"].as_str() == namespace)
        })
        .unwrap_or_else(|| panic!("no {role_kind} {role_name} in the rendering"));
    let mut grants = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        let list = |field: &str| -> Vec<String> {
            let values: Vec<String> = rule[field]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                .unwrap_or_default();
            assert!(
                !values.iter().any(|v| v.contains('*')),
                "wildcard in {role_kind} {role_name}: {rule}"
            );
            values
        };
        assert!(
            rule.get("nonResourceURLs").is_none(),
            "nonResourceURLs in {role_name}"
        );
        let names: BTreeSet<String> = list("resourceNames").into_iter().collect();
        for group in list("apiGroups") {
            for resource in list("resources") {
                for verb in list("verbs") {
                    grants.push(Grant {
                        namespace: namespace.map(str::to_string),
                        group: group.clone(),
                        resource: resource.clone(),
                        verb,
                        names: names.clone(),
                    });
                }
            }
        }
    }
    grants
}

/// A request as RBAC authorizes it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Use {
    pub verb: String,
    pub group: String,
    /// `plural` or `plural/subresource`.
    pub resource: String,
    /// Empty for cluster-scoped resources and requests across all namespaces.
    pub namespace: String,
    /// Empty for list, watch, create and collection requests.
    pub name: String,
}

impl Use {
    pub fn from_record(record: &gpucloud_apiserver::RequestRecord) -> Use {
        let resource = if record.subresource.is_empty() {
            record.resource.clone()
        } else {
            format!("{}/{}", record.resource, record.subresource)
        };
        Use {
            verb: record.verb.clone(),
            group: record.group.clone(),
            resource,
            namespace: record.namespace.clone(),
            name: record.name.clone(),
        }
    }
}

/// Whether `grant` authorizes `used`, by the RBAC authorizer's rules: a Role's grant holds in
/// its namespace only, a ClusterRole's everywhere; resourceNames restrict requests that name
/// an object (so never list, watch or create).
pub fn allows(grant: &Grant, used: &Use) -> bool {
    grant.group == used.group
        && grant.resource == used.resource
        && grant.verb == used.verb
        && grant
            .namespace
            .as_ref()
            .is_none_or(|ns| *ns == used.namespace)
        && (grant.names.is_empty() || grant.names.contains(&used.name))
}

// === the rendered settings as `run` reads them ===

/// The binary's global flags (`src/main.rs`), checked by running it.
pub const GLOBAL_ENV: &[&str] = &["RUST_LOG", "GPUCLOUD_LOG_FORMAT"];

#[derive(Parser)]
#[command(name = "run")]
struct RunCommand {
    #[command(flatten)]
    args: Args,
}

/// What an `extraEnv` variable read from a ConfigMap holds in the tests: a duration, which
/// every duration flag takes.
pub const CONFIG_MAP_VALUE: &str = "750ms";

/// The pod's environment: literal values, and the downward API's fields as the kubelet
/// fills them (pod `gpucloud-operator-0` in the release namespace).
pub fn pod_env(rendered: &Rendered) -> Vec<(String, String)> {
    let deployment = rendered.find("Deployment", RELEASE).expect("a Deployment");
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.namespace") => RELEASE_NAMESPACE.to_string(),
                Some("metadata.name") => "gpucloud-operator-0".to_string(),
                Some(other) => panic!("{name}: unexpected fieldRef {other}"),
                // A ConfigMap's or Secret's key (the chart's extraEnv): what the test's
                // ConfigMap would hold.
                None if e["valueFrom"]["configMapKeyRef"].is_object() => {
                    CONFIG_MAP_VALUE.to_string()
                }
                None => e["value"].as_str().expect("a literal value").to_string(),
            };
            (name, value)
        })
        .collect()
}

/// `run`'s arguments as this build parses the rendered pod environment and the container's
/// arguments, with `overrides`
/// (long flag name, value) applied on top. Overrides of flags this build does not have are
/// left out. Panics on a value `run` refuses, and on a variable that is neither a `run` flag
/// nor a global flag.
pub fn run_args(rendered: &Rendered, overrides: &[(&str, &str)]) -> Args {
    let command = RunCommand::command();
    let mut flags: BTreeMap<String, (String, bool)> = BTreeMap::new();
    for (name, value) in pod_env(rendered) {
        let known = command
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == name.as_str()));
        match known {
            Some(arg) => {
                let is_switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
                flags.insert(arg.get_long().unwrap().to_string(), (value, is_switch));
            }
            None => assert!(
                GLOBAL_ENV.contains(&name.as_str()),
                "the chart sets {name}, which `gpucloud-operator run` does not read"
            ),
        }
    }
    for (long, value) in overrides {
        if let Some(arg) = command
            .get_arguments()
            .find(|a| a.get_long() == Some(*long))
        {
            let is_switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
            flags.insert(long.to_string(), (value.to_string(), is_switch));
        }
    }
    let mut argv = vec!["run".to_string()];
    for (long, (value, is_switch)) in flags {
        if is_switch {
            match value.as_str() {
                "true" => argv.push(format!("--{long}")),
                "false" => {}
                other => panic!("--{long}: {other:?} is not true or false"),
            }
        } else {
            argv.push(format!("--{long}={value}"));
        }
    }
    // The container's own arguments after `run` (the chart's extraArgs).
    let deployment = rendered.find("Deployment", RELEASE).expect("a Deployment");
    let container_args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("container args");
    assert_eq!(container_args[0], "run", "the container runs `run`");
    argv.extend(
        container_args[1..]
            .iter()
            .map(|a| a.as_str().expect("a string argument").to_string()),
    );
    match RunCommand::try_parse_from(&argv) {
        Ok(parsed) => parsed.args,
        Err(error) => panic!("`run` refuses the rendered settings {argv:?}: {error}"),
    }
}
