//! The project's own CRDs (`crds/`) and examples (`examples/`) install on the server through
//! kube-rs: every CRD is accepted and established, every example object validates.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_support::*;

fn workspace_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(name)
}

const GITOPS_TOOL_GROUPS: [&str; 4] = [
    "kustomize.config.k8s.io",
    "argoproj.io",
    "kustomize.toolkit.fluxcd.io",
    "source.toolkit.fluxcd.io",
];

fn yaml_documents(dir: &Path) -> Vec<(String, serde_json::Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        })
        .collect();
    files.sort();
    let mut documents = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for value in serde_saphyr::from_multiple::<serde_json::Value>(&text).unwrap() {
            if !value.is_null() {
                documents.push((file.display().to_string(), value));
            }
        }
    }
    documents
}

#[tokio::test]
async fn project_crds_and_examples_install() {
    let (server, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut resources = Vec::new();
    let definitions = yaml_documents(&workspace_dir("crds"));
    assert!(!definitions.is_empty(), "no CRDs found in crds/");
    for (file, value) in definitions {
        let crd: CustomResourceDefinition = serde_json::from_value(value).unwrap();
        let created = bounded(crds.create(&PostParams::default(), &crd))
            .await
            .unwrap_or_else(|error| panic!("{file}: {error}"));
        let established = created
            .status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "{file}");
        for version in created.spec.versions.iter().filter(|v| v.served) {
            resources.push((
                GroupVersionKind::gvk(&created.spec.group, &version.name, &created.spec.names.kind),
                created.spec.names.plural.clone(),
                created.spec.scope == "Cluster",
            ));
        }
    }
    let examples = workspace_dir("examples");
    let mut directories = vec![examples];
    let mut applied = 0;
    while let Some(directory) = directories.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                directories.push(path.clone());
            }
        }
        for (file, value) in yaml_documents(&directory) {
            let object: DynamicObject = serde_json::from_value(value).unwrap();
            let types = object.types.clone().unwrap();
            let (group, version) = match types.api_version.split_once('/') {
                Some((group, version)) => (group.to_string(), version.to_string()),
                None => (String::new(), types.api_version.clone()),
            };
            // The GitOps example's kustomization and its Argo CD and Flux objects are read by
            // those tools, not served here; the controller's examples test renders them.
            if GITOPS_TOOL_GROUPS.contains(&group.as_str()) {
                continue;
            }
            let gvk = GroupVersionKind::gvk(&group, &version, &types.kind);
            let known = resources.iter().find(|(known, ..)| *known == gvk);
            let plural = known
                .map(|(_, plural, _)| plural.clone())
                .unwrap_or_else(|| format!("{}s", types.kind.to_lowercase()));
            let cluster_scoped = known.is_some_and(|(.., cluster)| *cluster)
                || (group.is_empty() && types.kind == "Namespace");
            let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
            let namespace = object
                .metadata
                .namespace
                .clone()
                .unwrap_or("default".into());
            let api: Api<DynamicObject> = if cluster_scoped {
                Api::all_with(client.clone(), &resource)
            } else {
                Api::namespaced_with(client.clone(), &namespace, &resource)
            };
            bounded(api.create(&PostParams::default(), &object))
                .await
                .unwrap_or_else(|error| panic!("{file}: {} {error}", types.kind));
            applied += 1;
        }
    }
    assert!(applied > 0, "no examples found in examples/");
    server.shutdown().await;
}
