#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every manifest under `examples/` is applied as a user would apply it (server-side apply),
//! each example folder into its own namespace (or the namespaces it names), and every
//! gpucloud.io object reaches `Ready`, but the machine platform-policy's GpuPolicy refuses,
//! which the operator refuses (no admission policy is installed here).
//! The GitOps folder's Argo CD and Flux objects are applied against minimal CRDs of their
//! kinds, and the paths they sync are checked to exist and render.

use crate::support;

use gpucloud_api::*;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use std::path::{Path, PathBuf};
use support::{Env, eventually, within};

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The manifests of a folder, recursively, in name order; kustomize's own file is rendered by
/// kustomize, not applied.
fn manifests(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            manifests(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml")
            && path.file_name().is_some_and(|n| n != "kustomization.yaml")
        {
            out.push(path);
        }
    }
}

fn documents(file: &Path) -> Vec<DynamicObject> {
    let text = std::fs::read_to_string(file).unwrap();
    serde_saphyr::from_multiple::<serde_json::Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .into_iter()
        .filter(|value| !value.is_null())
        .map(|value| {
            serde_json::from_value(value).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        })
        .collect()
}

fn resource_of(object: &DynamicObject) -> (ApiResource, String) {
    let types = object
        .types
        .clone()
        .expect("examples carry apiVersion and kind");
    let (group, version) = types
        .api_version
        .split_once('/')
        .unwrap_or(("", &types.api_version));
    (
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &types.kind)),
        types.kind,
    )
}

/// An applied example object: its kind, namespace, name and manifest.
type Applied = (String, String, String, DynamicObject);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_applies_and_becomes_ready() {
    let env = Env::start().await;
    // `adopt-existing` names the account's first machine, made outside Kubernetes.
    let existing = support::machine_by_hand(&env, "made-by-hand").await;
    assert_eq!(existing.instance_id, "vm-000000000001");
    install_gitops_crds(&env.client).await;
    let applied = apply_every_example(&env, &example_folders()).await;
    every_object_is_ready(&env, &applied).await;
    the_cloud_holds_what_the_examples_make(&env);
    the_workstation_shows_its_expiry_and_schedule(&env).await;
    stop_at_night_stops_and_starts(&env).await;
    gitops_paths_exist_and_render(&applied);
    gitops_syncs_need_no_ordering(&applied);
}

/// The example folders, each checked to be one the docs name.
fn example_folders() -> Vec<PathBuf> {
    let examples = repository_root().join("examples");
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&examples)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    let folder_names: Vec<String> = folders
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        folder_names,
        [
            "adopt-existing",
            "budget-and-lifetimes",
            "gitops",
            "placement",
            "platform-policy",
            "quickstart",
            "snapshot-and-restore",
            "stop-at-night"
        ]
    );
    folders
}

/// Applies every manifest of every folder (server-side apply, into the folder's namespace
/// unless the manifest names one).
async fn apply_every_example(env: &Env, folders: &[PathBuf]) -> Vec<Applied> {
    // Every file is a manifest that is applied, a kustomization that is rendered, or a README.
    let mut applied = Vec::new();
    for folder in folders {
        let default_namespace = folder.file_name().unwrap().to_string_lossy().into_owned();
        let mut files = Vec::new();
        manifests(folder, &mut files);
        assert!(!files.is_empty(), "{} has no manifests", folder.display());
        assert!(
            folder.join("README.md").is_file(),
            "{} has no README.md",
            folder.display()
        );
        for file in &files {
            for object in documents(file) {
                let namespace = object
                    .namespace()
                    .unwrap_or_else(|| default_namespace.clone());
                ensure_namespace(&env.client, &namespace).await;
                let (resource, kind) = resource_of(&object);
                // The examples' cluster-scoped kinds: Flux's target namespace, and the
                // namespaces and GpuPolicy of platform-policy.
                let api: Api<DynamicObject> = if kind == "Namespace" || kind == "GpuPolicy" {
                    Api::all_with(env.client.clone(), &resource)
                } else {
                    Api::namespaced_with(env.client.clone(), &namespace, &resource)
                };
                let name = object.name_any();
                within(
                    20,
                    api.patch(
                        &name,
                        &PatchParams::apply("examples-test"),
                        &Patch::Apply(&object),
                    ),
                )
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{}: {name}: {e}", file.display()));
                applied.push((kind, namespace, name, object));
            }
        }
    }

    applied
}

/// Every applied object of the operator's kinds becomes Ready (or, for the one the policy
/// refuses, is refused; Budgets and GpuPolicies count what they should).
async fn every_object_is_ready(env: &Env, applied: &[Applied]) {
    for (kind, namespace, name, _) in applied {
        let ready = match kind.as_str() {
            "GpuInstance" if name == REFUSED_BY_POLICY => {
                refused_by_policy(env, namespace, name).await;
                continue;
            }
            "GpuInstance" => wait_ready::<GpuInstance>(env, namespace, name).await,
            "SshKey" => wait_ready::<SshKey>(env, namespace, name).await,
            "Volume" => wait_ready::<Volume>(env, namespace, name).await,
            "Snapshot" => wait_ready::<Snapshot>(env, namespace, name).await,
            "Image" => wait_ready::<Image>(env, namespace, name).await,
            "Firewall" => wait_ready::<Firewall>(env, namespace, name).await,
            "Budget" => {
                budget_counts_its_namespace(env, namespace, name).await;
                continue;
            }
            "GpuPolicy" => {
                policy_counts_its_namespaces(env, name).await;
                continue;
            }
            "Application" | "Kustomization" | "Namespace" | "RoleBinding" => continue,
            other => panic!("no readiness check for {other}"),
        };
        assert!(ready.is_ready(None), "{kind} {namespace}/{name}");
    }
}

fn the_cloud_holds_what_the_examples_make(env: &Env) {
    let state = env.simulator.state();
    assert_eq!(
        state.instances.len(),
        10,
        "train-1, finetune-1, its restored copy, eval-1, dev-box, nightly-eval, workstation, anywhere-h100, notebook and the adopted machine (not big-training, which the policy refuses)"
    );
    assert_eq!(state.snapshots.len(), 1);
    assert_eq!(state.images.len(), 1);
    assert_eq!(state.firewalls.len(), 1);
    let data_volumes = state.volumes.iter().filter(|v| !v.bootable).count();
    let names: Vec<&str> = state.volumes.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        data_volumes, 4,
        "dataset, checkpoints, its clone and scratch: {names:?}"
    );
    assert_eq!(
        env.calls("RebootInstance"),
        0,
        "the initial restartedAt value reboots nothing"
    );
}

/// budget-and-lifetimes: the expiry and the schedule's next transition are shown.
async fn the_workstation_shows_its_expiry_and_schedule(env: &Env) {
    let workstation = Api::<GpuInstance>::namespaced(env.client.clone(), "budget-and-lifetimes")
        .get("workstation")
        .await
        .unwrap();
    let created = workstation.metadata.creation_timestamp.clone().unwrap().0;
    assert_eq!(
        workstation.cloud_status().expires_at.map(|t| t.0),
        Some(created + k8s_openapi::jiff::SignedDuration::from_hours(168))
    );
    assert!(
        workstation
            .status
            .as_ref()
            .unwrap()
            .next_transition
            .is_some(),
        "{:?}",
        workstation.status
    );
}

/// What a GitOps sync of the examples cannot count on: its target namespace existing (Flux's
/// `targetNamespace` creates none; Argo CD creates it when told), and the CRDs being served
/// before the objects (Argo CD orders standalone Applications by nothing, so the objects'
/// Application skips the dry run of unknown kinds and retries).
fn gitops_syncs_need_no_ordering(applied: &[Applied]) {
    argo_app_of_apps_orders_crds_first(applied);
    let namespaces: Vec<&str> = applied
        .iter()
        .filter(|(kind, ..)| kind == "Namespace")
        .map(|(_, _, name, _)| name.as_str())
        .collect();
    for (kind, _, name, object) in applied {
        let spec = &object.data["spec"];
        match kind.as_str() {
            "Kustomization" => {
                if let Some(target) = spec["targetNamespace"].as_str() {
                    assert!(
                        namespaces.contains(&target),
                        "{name}: no Namespace {target}"
                    );
                }
            }
            "Application" if spec["destination"]["namespace"].is_string() => {
                let options = spec["syncPolicy"]["syncOptions"].to_string();
                for option in ["CreateNamespace=true", "SkipDryRunOnMissingResource=true"] {
                    assert!(
                        options.contains(option),
                        "{name}: {option} missing: {options}"
                    );
                }
                assert!(
                    spec["syncPolicy"]["retry"]["limit"].as_u64() > Some(0),
                    "{name}"
                );
            }
            _ => {}
        }
    }
}

/// Argo CD's app-of-apps: its one Application syncs a folder holding the other Applications, in
/// sync waves that put the Application of the CRDs before the one of the objects, and Argo CD's
/// settings (deploy/argocd/argocd-cm.yaml) restore the Application health check the waves wait
/// on.
fn argo_app_of_apps_orders_crds_first(applied: &[Applied]) {
    let applications: Vec<&DynamicObject> = applied
        .iter()
        .filter(|(kind, ..)| kind == "Application")
        .map(|(.., object)| object)
        .collect();
    let path = |app: &DynamicObject| {
        app.data["spec"]["source"]["path"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let children_folder = repository_root().join("examples/gitops/argocd/apps");
    let roots: Vec<&&DynamicObject> = applications
        .iter()
        .filter(|app| repository_root().join(path(app)) == children_folder)
        .collect();
    assert_eq!(
        roots.len(),
        1,
        "one app-of-apps syncs examples/gitops/argocd/apps"
    );
    let mut files = Vec::new();
    manifests(&children_folder, &mut files);
    let wave_of = |synced: &str| -> i64 {
        let child = files
            .iter()
            .flat_map(|file| documents(file))
            .find(|child| path(child) == synced)
            .unwrap_or_else(|| panic!("no Application in apps/ syncs {synced}"));
        child
            .annotations()
            .get("argocd.argoproj.io/sync-wave")
            .map_or(0, |wave| wave.parse().unwrap())
    };
    assert!(wave_of("crds") < wave_of("examples/gitops/workloads"));
    let settings =
        std::fs::read_to_string(repository_root().join("deploy/argocd/argocd-cm.yaml")).unwrap();
    assert!(settings.contains("resource.customizations.health.argoproj.io_Application"));
}

/// The stop-at-night example: the CronJob's script from its README, run against the sandbox
/// in the example's namespace (the namespace a pod's kubectl works in) with `POWER_STATE` as
/// the CronJob sets it and then as its twin sets it, stops the machine and starts it again.
async fn stop_at_night_stops_and_starts(env: &Env) {
    let (command, power_state) = cron_job_command();
    assert_eq!(power_state, "Stopped", "the CronJob stops");
    let kubeconfig = std::env::temp_dir().join(format!(
        "gpucloud-stop-at-night-{}.kubeconfig",
        std::process::id()
    ));
    env.apiserver.write_kubeconfig(&kubeconfig).unwrap();
    kubectl(
        &kubeconfig,
        &[
            "config",
            "set-context",
            "--current",
            "--namespace=stop-at-night",
        ],
    );
    let api: Api<GpuInstance> = Api::namespaced(env.client.clone(), "stop-at-night");
    for (power, vm_status) in [("Stopped", "STOPPED"), ("Running", "RUNNING")] {
        let run = std::process::Command::new(&command[0])
            .args(&command[1..])
            .env("KUBECONFIG", &kubeconfig)
            .env("POWER_STATE", power)
            .output();
        let output = tokio::task::spawn_blocking(move || run).await.unwrap();
        succeeded(
            output,
            &format!("the CronJob's script with POWER_STATE={power}"),
        );
        eventually(60, &format!("dev-box {vm_status} and Ready"), || {
            let api = api.clone();
            async move {
                let instance = api.get("dev-box").await.ok()?;
                let status = instance.status.as_ref()?;
                let wanted: PowerState = serde_json::from_value(power.into()).ok()?;
                (instance.spec.power_state == wanted
                    && status.vm_status.as_deref() == Some(vm_status)
                    && instance.cloud_status().is_ready(instance.meta().generation))
                .then_some(())
            }
        })
        .await;
    }
    let _ = std::fs::remove_file(&kubeconfig);
}

/// The stop-at-night README's CronJob: its container's command and arguments, and the
/// `POWER_STATE` it sets.
fn cron_job_command() -> (Vec<String>, String) {
    let readme =
        std::fs::read_to_string(repository_root().join("examples/stop-at-night/README.md"))
            .unwrap();
    let blocks = readme
        .split("```yaml")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap());
    let cron_job = blocks
        .flat_map(|block| serde_saphyr::from_multiple::<serde_json::Value>(block).unwrap())
        .find(|object| object["kind"].as_str() == Some("CronJob"))
        .expect("a CronJob in examples/stop-at-night/README.md");
    let container = &cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    let strings = |value: &serde_json::Value| -> Vec<String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .map(|item| item.as_str().unwrap().to_string())
            .collect()
    };
    let mut command = strings(&container["command"]);
    command.extend(strings(&container["args"]));
    let power_state = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|variable| variable["name"].as_str() == Some("POWER_STATE"))
        .and_then(|variable| variable["value"].as_str())
        .expect("the CronJob sets POWER_STATE")
        .to_string();
    (command, power_state)
}

/// Runs kubectl with `kubeconfig`; panics with its error output when it fails.
fn kubectl(kubeconfig: &Path, args: &[&str]) {
    let output = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output();
    succeeded(output, &format!("kubectl {args:?}"));
}

/// The standard output of a command that ran and succeeded; `what` names it when it did not.
fn succeeded(output: std::io::Result<std::process::Output>, what: &str) -> String {
    let output = output.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The folders the Argo CD Applications and Flux Kustomizations sync exist in this repository
/// and render: with `kubectl kustomize` where they are kustomizations, as plain manifests
/// otherwise.
fn gitops_paths_exist_and_render(applied: &[Applied]) {
    let mut paths = Vec::new();
    for (kind, _, name, object) in applied {
        let path = match kind.as_str() {
            "Application" => object.data["spec"]["source"]["path"].as_str(),
            "Kustomization" => object.data["spec"]["path"].as_str(),
            _ => continue,
        };
        paths.push((name.clone(), path.expect("a synced path").to_string()));
    }
    assert_eq!(
        paths.len(),
        5,
        "three Argo CD Applications (the app-of-apps and its two), two Flux Kustomizations"
    );
    let kubectl_found = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    for (name, path) in paths {
        let folder = repository_root().join(path.trim_start_matches("./"));
        assert!(folder.is_dir(), "{name}: {path} is not a folder");
        if !folder.join("kustomization.yaml").is_file() {
            let mut files = Vec::new();
            manifests(&folder, &mut files);
            assert!(!files.is_empty(), "{name}: {path} holds no manifests");
            for file in files {
                assert!(!documents(&file).is_empty(), "{}", file.display());
            }
            continue;
        }
        if !kubectl_found {
            println!(
                "skipped rendering {path} with kubectl kustomize: kubectl is not on PATH (.ci/run installs it)"
            );
            continue;
        }
        let output = std::process::Command::new("kubectl")
            .arg("kustomize")
            .arg(&folder)
            .output();
        let rendered = succeeded(output, &format!("kubectl kustomize {path}"));
        let kinds: Vec<String> = serde_saphyr::from_multiple::<serde_json::Value>(&rendered)
            .unwrap()
            .into_iter()
            .filter_map(|v| v["kind"].as_str().map(str::to_string))
            .collect();
        assert!(
            kinds.iter().any(|k| k == "GpuInstance"),
            "{path} renders {kinds:?}"
        );
    }
}

async fn ensure_namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if within(10, namespaces.get_opt(name))
        .await
        .unwrap()
        .unwrap()
        .is_some()
    {
        return;
    }
    // `adopt-existing` adopts a machine made outside Kubernetes: its README has the
    // namespace labelled for adoption first.
    within(
        10,
        crate::support::create_namespace(client, name, name == "adopt-existing"),
    )
    .await
    .unwrap()
    .unwrap();
}

/// Just enough of Argo CD's and Flux's CRDs for their objects to be stored: these kinds are
/// served by those projects' controllers, not by this one.
async fn install_gitops_crds(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (group, kind, version) in [
        ("argoproj.io", "Application", "v1alpha1"),
        ("kustomize.toolkit.fluxcd.io", "Kustomization", "v1"),
    ] {
        let plural = format!("{}s", kind.to_lowercase());
        let name = format!("{plural}.{group}");
        let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                "versions": [{
                    "name": version, "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true
                    }}
                }]
            }
        }))
        .unwrap();
        support::install_crd(&crds, &crd).await;
    }
}

async fn wait_ready<K>(env: &Env, namespace: &str, name: &str) -> CloudStatus
where
    K: crate::support::TestKind,
{
    let api: Api<K> = Api::namespaced(env.client.clone(), namespace);
    eventually(90, &format!("{namespace}/{name} Ready"), || {
        let api = api.clone();
        async move {
            let o = api.get(name).await.ok()?;
            let status = o.cloud_status();
            status.is_ready(o.meta().generation).then_some(status)
        }
    })
    .await
}

/// The GpuInstance of platform-policy that its GpuPolicy refuses.
const REFUSED_BY_POLICY: &str = "big-training";

/// The operator refuses the machine the policy does not allow, before any cloud call: Ready is
/// False with reason `PolicyViolation` and the policy's message, and Stalled is True.
async fn refused_by_policy(env: &Env, namespace: &str, name: &str) {
    let api: Api<GpuInstance> = Api::namespaced(env.client.clone(), namespace);
    eventually(60, &format!("{namespace}/{name} refused by its policy"), || {
        let api = api.clone();
        async move {
            let instance = api.get(name).await.ok()?;
            let status = serde_json::to_value(instance.status?).ok()?;
            let condition = |type_: &str| {
                status["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == type_)
                    .cloned()
            };
            let ready = condition("Ready")?;
            (ready["status"] == "False"
                && ready["reason"] == "PolicyViolation"
                && ready["message"]
                    == "GpuPolicy standard: spec.gpuType: GPU type H100-80G is not among allowedGpuTypes [\"L40S\", \"A100-80G\"]; \
                        looked at again when the spec or a GpuPolicy of the namespace changes, or in 5 minutes at the latest"
                && condition("Stalled")?["status"] == "True")
                .then_some(())
        }
    })
    .await;
}

/// Waits until the GpuPolicy is Ready and counts the namespaces it selects and the machine
/// that fits (`notebook`).
async fn policy_counts_its_namespaces(env: &Env, name: &str) {
    let policies: Api<GpuPolicy> = Api::all(env.client.clone());
    eventually(60, &format!("GpuPolicy {name} counting"), || {
        let policies = policies.clone();
        async move {
            let status = policies.get(name).await.ok()?.status?;
            let ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (ready
                && status.namespaces == Some(2)
                && status.machines == Some(1)
                && status.gpus == Some(1))
            .then_some(())
        }
    })
    .await;
}

/// Waits until the Budget is Ready and counts what its namespace's billed objects say they
/// cost per hour.
async fn budget_counts_its_namespace(env: &Env, namespace: &str, name: &str) {
    let budgets: Api<Budget> = Api::namespaced(env.client.clone(), namespace);
    let client = env.client.clone();
    eventually(60, &format!("Budget {namespace}/{name} counting"), || {
        let (budgets, client) = (budgets.clone(), client.clone());
        async move {
            let budget = budgets.get(name).await.ok()?;
            let status = budget.status?;
            let ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let mut sum = 0.0;
            let instances: Api<GpuInstance> = Api::namespaced(client.clone(), namespace);
            for i in instances.list(&Default::default()).await.ok()?.items {
                sum += i.status.and_then(|s| s.hourly_rate).unwrap_or(0.0);
            }
            let volumes: Api<Volume> = Api::namespaced(client, namespace);
            for v in volumes.list(&Default::default()).await.ok()?.items {
                let rate = serde_json::to_value(&v.status).ok()?["hourlyRate"].as_f64();
                sum += rate.unwrap_or(0.0);
            }
            (ready && sum > 0.0 && status.hourly_rate.is_some_and(|r| (r - sum).abs() < 1e-6))
                .then_some(())
        }
    })
    .await;
}
