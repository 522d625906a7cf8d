#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every manifest under `examples/` is applied as a user would apply it (server-side apply)
//! and reaches `Ready`.

mod support;

use gpucloud_api::*;
use gpucloud_cloud::model::CreateInstanceRequest;
use gpucloud_cloud::{ApiKey, ClientConfig, CloudClient};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use support::{Env, NAMESPACE, eventually};

fn manifests(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            manifests(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_applies_and_becomes_ready() {
    let env = Env::start().await;
    // `adopt-existing.yaml` names the account's first machine, made outside Kubernetes.
    let cloud = CloudClient::new(ClientConfig::new(
        env.simulator.base_url(),
        ApiKey::new(env.simulator.api_key()),
    ))
    .unwrap();
    let existing = cloud
        .create_instance(&CreateInstanceRequest {
            name: "made-by-hand".into(),
            region: "us-east-1".into(),
            gpu_type: "A100-80G".into(),
            gpu_count: 1,
            image_id: "ubuntu-22.04-cuda-12".into(),
            tier: None,
            ssh_key_ids: vec![],
            startup_script: None,
            startup_script_id: None,
            public_ip: None,
            volume_ids: vec![],
        })
        .await
        .unwrap();
    assert_eq!(existing.instance_id, "vm-000000000001");

    let mut files = Vec::new();
    manifests(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples"),
        &mut files,
    );
    assert!(!files.is_empty());
    let mut applied = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_json::Value::deserialize(document).unwrap();
            if value.is_null() {
                continue;
            }
            let object: DynamicObject = serde_json::from_value(value).unwrap();
            let types = object
                .types
                .clone()
                .expect("examples carry apiVersion and kind");
            let (group, version) = types
                .api_version
                .split_once('/')
                .unwrap_or(("", &types.api_version));
            let resource =
                ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &types.kind));
            let api: Api<DynamicObject> =
                Api::namespaced_with(env.client.clone(), NAMESPACE, &resource);
            let name = object.name_any();
            api.patch(
                &name,
                &PatchParams::apply("examples-test"),
                &Patch::Apply(&object),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {name}: {e}", file.display()));
            applied.push((types.kind, name));
        }
    }
    for (kind, name) in &applied {
        let ready = match kind.as_str() {
            "GpuInstance" => wait_ready::<GpuInstance>(&env, name).await,
            "SshKey" => wait_ready::<SshKey>(&env, name).await,
            "Volume" => wait_ready::<Volume>(&env, name).await,
            "Snapshot" => wait_ready::<Snapshot>(&env, name).await,
            "Image" => wait_ready::<Image>(&env, name).await,
            "Firewall" => wait_ready::<Firewall>(&env, name).await,
            other => panic!("no readiness check for {other}"),
        };
        assert!(ready.is_ready(None), "{kind}/{name}");
    }
    let state = env.simulator.state();
    assert_eq!(
        state.instances.len(),
        4,
        "train-1, its restored copy, the machine booted from its image, and the adopted machine"
    );
    assert_eq!(state.snapshots.len(), 1);
    assert_eq!(state.images.len(), 1);
    assert_eq!(state.firewalls.len(), 1);
    let data_volumes = state
        .volumes
        .iter()
        .filter(|v| !v.name.ends_with("-boot"))
        .count();
    assert_eq!(data_volumes, 2, "dataset and its clone");
    assert_eq!(
        env.calls("RebootInstance"),
        0,
        "the initial restartedAt value reboots nothing"
    );
}

async fn wait_ready<K>(env: &Env, name: &str) -> CloudStatus
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Managed
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let api = env.api::<K>();
    eventually(60, &format!("{name} Ready"), || {
        let api = api.clone();
        async move {
            let o = api.get(name).await.ok()?;
            let status = o.cloud_status();
            status.is_ready(o.meta().generation).then_some(status)
        }
    })
    .await
}
