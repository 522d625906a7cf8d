//! Manifests given with `--apply`: read and split into documents before anything starts, then
//! applied server-side, each kind resolved through the API server's discovery.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use kube::{Api, ResourceExt};
use std::path::{Path, PathBuf};

/// The field manager of everything `dev --apply` writes.
pub const FIELD_MANAGER: &str = "gpucloud-dev";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: document {index}: {reason}")]
    Invalid {
        path: PathBuf,
        index: usize,
        reason: String,
    },
    #[error(
        "{path}: document {index}: unknown kind {kind} (apiVersion {api_version}); the API server does not serve it"
    )]
    UnknownKind {
        path: PathBuf,
        index: usize,
        kind: String,
        api_version: String,
    },
    #[error("{path}: document {index} ({kind} {name}): {reason}")]
    Rejected {
        path: PathBuf,
        index: usize,
        kind: String,
        name: String,
        reason: String,
    },
    #[error("API discovery: {0}")]
    Discovery(#[source] Box<kube::Error>),
}

/// One object of one manifest file; `index` counts from 1, as a person reads the file.
#[derive(Debug, Clone)]
pub struct Document {
    pub path: PathBuf,
    pub index: usize,
    pub object: DynamicObject,
}

impl Document {
    pub fn kind(&self) -> &str {
        self.object
            .types
            .as_ref()
            .map(|types| types.kind.as_str())
            .unwrap_or_default()
    }
}

/// Every document of every path (a file, or a folder read recursively in name order, its
/// YAML and JSON files but kustomize's own: `gpucloud_controller::tools::manifests::files`).
pub fn load(paths: &[PathBuf]) -> Result<Vec<Document>, Error> {
    let mut files = Vec::new();
    for path in paths {
        files.extend(
            gpucloud_controller::tools::manifests::files(path)
                .map_err(|(path, source)| Error::Unreadable { path, source })?,
        );
    }
    let mut documents = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|source| Error::Unreadable {
            path: file.clone(),
            source,
        })?;
        documents.extend(parse(&file, &text)?);
    }
    Ok(documents)
}

/// The documents of one file's text; empty documents (comments only) are skipped.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Document>, Error> {
    let mut documents = Vec::new();
    for (index, value) in gpucloud_controller::tools::manifests::documents(text) {
        let invalid = |reason: String| Error::Invalid {
            path: path.to_path_buf(),
            index,
            reason,
        };
        let value = value.map_err(|e| invalid(format!("invalid YAML: {e}")))?;
        let object: DynamicObject = serde_json::from_value(value)
            .map_err(|e| invalid(format!("not a Kubernetes object: {e}")))?;
        let Some(types) = object.types.as_ref() else {
            return Err(invalid("apiVersion and kind are required".into()));
        };
        if types.kind.is_empty() || types.api_version.is_empty() {
            return Err(invalid("apiVersion and kind are required".into()));
        }
        if object
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        {
            return Err(invalid("metadata.name is required".into()));
        }
        documents.push(Document {
            path: path.to_path_buf(),
            index,
            object,
        });
    }
    Ok(documents)
}

/// What one applied document became, for the start-up output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Applies `documents` in order with server-side apply. Namespaced objects without a
/// namespace go to `default_namespace`, as with kubectl. Discovery runs again after a
/// document of an unknown kind, in case an earlier document installed its CRD.
pub async fn apply(
    client: &kube::Client,
    documents: &[Document],
    default_namespace: &str,
) -> Result<Vec<Applied>, Error> {
    let mut discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| Error::Discovery(Box::new(e)))?;
    let mut applied = Vec::new();
    for document in documents {
        let Some(types) = document.object.types.as_ref() else {
            continue;
        };
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", types.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &types.kind);
        let resolved = match discovery.resolve_gvk(&gvk) {
            Some(resolved) => Some(resolved),
            None => {
                discovery = Discovery::new(client.clone())
                    .run()
                    .await
                    .map_err(|e| Error::Discovery(Box::new(e)))?;
                discovery.resolve_gvk(&gvk)
            }
        };
        let Some((resource, capabilities)) = resolved else {
            return Err(Error::UnknownKind {
                path: document.path.clone(),
                index: document.index,
                kind: types.kind.clone(),
                api_version: types.api_version.clone(),
            });
        };
        let name = document.object.name_any();
        let namespace = (capabilities.scope == Scope::Namespaced).then(|| {
            document
                .object
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| default_namespace.to_string())
        });
        let api = api_for(client, &resource, namespace.as_deref());
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&document.object),
        )
        .await
        .map_err(|error| Error::Rejected {
            path: document.path.clone(),
            index: document.index,
            kind: types.kind.clone(),
            name: name.clone(),
            // The API server's own message, as kubectl shows it.
            reason: match error {
                kube::Error::Api(status) => status.message.clone(),
                other => other.to_string(),
            },
        })?;
        applied.push(Applied {
            kind: types.kind.clone(),
            namespace,
            name,
        });
    }
    Ok(applied)
}

fn api_for(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn documents_are_numbered_and_empty_ones_skipped() {
        let text = "# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: gpucloud.io/v1alpha1\nkind: SshKey\nmetadata: {name: k}\nspec: {}\n";
        let documents = parse(Path::new("m.yaml"), text).unwrap();
        assert_eq!(documents.len(), 2);
        assert_eq!(
            documents[0].index, 1,
            "a comment before the first separator is no document"
        );
        assert_eq!(documents[0].kind(), "ConfigMap");
        assert_eq!(documents[1].index, 3);
        assert_eq!(documents[1].kind(), "SshKey");
    }

    #[test]
    fn bad_documents_name_the_file_and_the_document() {
        let error = parse(
            Path::new("bad.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: [unclosed\n",
        )
        .unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("bad.yaml: document 2: invalid YAML"),
            "{message}"
        );
        assert!(!message.contains('\n'), "{message}");

        let error = parse(Path::new("x.yaml"), "metadata: {name: a}\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "x.yaml: document 1: apiVersion and kind are required"
        );
        let error = parse(Path::new("x.yaml"), "apiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "x.yaml: document 1: metadata.name is required"
        );
    }

    #[test]
    fn a_missing_path_is_unreadable() {
        let error = load(&[PathBuf::from("/nonexistent/manifests.yaml")]).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("cannot read /nonexistent/manifests.yaml: "),
            "{message}"
        );
    }

    #[test]
    fn folders_are_read_in_name_order_without_kustomization_files() {
        let root = std::env::temp_dir().join(format!("gpucloud-dev-load-{}", std::process::id()));
        let nested = root.join("b");
        std::fs::create_dir_all(&nested).unwrap();
        let object =
            |name: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\n");
        std::fs::write(root.join("z.yaml"), object("z")).unwrap();
        std::fs::write(root.join("a.yml"), object("a")).unwrap();
        std::fs::write(
            nested.join("c.json"),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#,
        )
        .unwrap();
        std::fs::write(root.join("kustomization.yaml"), "resources: [a.yml]\n").unwrap();
        std::fs::write(root.join("notes.md"), "not a manifest").unwrap();
        let names: Vec<String> = load(std::slice::from_ref(&root))
            .unwrap()
            .into_iter()
            .map(|d| d.object.name_any())
            .collect();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(names, ["a", "c", "z"]);
    }
}
