//! The kubeconfig the embedded API server writes for kubectl and kube-rs: the server URL, the
//! CA embedded as `certificate-authority-data`, and a bearer token per user.

use std::io::Write;
use std::path::Path;

use base64::Engine;

/// The cluster entry's name in written kubeconfigs.
pub const CLUSTER_NAME: &str = "gpucloud-apiserver";

/// Errors of writing a kubeconfig file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("serialising the kubeconfig: {0}")]
    Serialize(#[from] serde_saphyr::SerializeError),
    #[error("writing the kubeconfig to {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// One user entry of a kubeconfig. `Debug` hides the token.
#[derive(Clone)]
pub struct KubeconfigUser {
    pub name: String,
    pub token: String,
}

impl std::fmt::Debug for KubeconfigUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeconfigUser")
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Renders a kubeconfig with one cluster (`server_url`, trusting `ca_pem`), one user and one
/// context per entry of `users`, and `current_user`'s context as the current one.
///
/// Context names are `gpucloud-apiserver` for the current user and
/// `gpucloud-apiserver-<user>` for the others, so `kubectl --context` can switch identity.
pub fn render(
    server_url: &str,
    ca_pem: &str,
    users: &[KubeconfigUser],
    current_user: &str,
) -> Result<String, Error> {
    let ca_data = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes());
    let context_name = |user: &str| {
        if user == current_user {
            CLUSTER_NAME.to_owned()
        } else {
            format!("{CLUSTER_NAME}-{user}")
        }
    };
    let contexts: Vec<serde_json::Value> = users
        .iter()
        .map(|user| {
            serde_json::json!({
                "name": context_name(&user.name),
                "context": {
                    "cluster": CLUSTER_NAME,
                    "user": user.name,
                    "namespace": "default",
                },
            })
        })
        .collect();
    let user_entries: Vec<serde_json::Value> = users
        .iter()
        .map(|user| serde_json::json!({"name": user.name, "user": {"token": user.token}}))
        .collect();
    let document = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{
            "name": CLUSTER_NAME,
            "cluster": {
                "server": server_url,
                "certificate-authority-data": ca_data,
            },
        }],
        "users": user_entries,
        "contexts": contexts,
        "current-context": context_name(current_user),
    });
    Ok(crate::yaml::to_string(&document)?)
}

/// Writes `yaml` to `path` readable by the owner only (it holds bearer tokens), replacing
/// any existing file atomically so a reader never sees half a kubeconfig.
pub fn write(path: &Path, yaml: &str) -> Result<(), Error> {
    let write_error = |source| Error::Write {
        path: path.display().to_string(),
        source,
    };
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "kubeconfig".to_owned());
    // Unique per process and call, so concurrent writers never share a temporary file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let sequence = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temporary = directory.join(format!(
        ".{file_name}.{}.{sequence}.tmp",
        std::process::id()
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let result = (|| {
        let mut file = options.open(&temporary)?;
        file.write_all(yaml.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result.map_err(write_error)
}

/// The API server's version as a client configured by the kubeconfig `yaml` reads it.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) async fn version_seen_through(
    yaml: &str,
) -> k8s_openapi::apimachinery::pkg::version::Info {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(yaml).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let version = client.apiserver_version();
    tokio::time::timeout(std::time::Duration::from_secs(10), version)
        .await
        .unwrap()
        .unwrap()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn users() -> Vec<KubeconfigUser> {
        vec![
            KubeconfigUser {
                name: "admin".to_owned(),
                token: "admin-token".to_owned(),
            },
            KubeconfigUser {
                name: "gpucloud-operator".to_owned(),
                token: "op-token".to_owned(),
            },
        ]
    }

    #[test]
    fn kube_rs_parses_the_rendered_kubeconfig_for_every_user() {
        let yaml = render("https://127.0.0.1:6443", CA, &users(), "gpucloud-operator").unwrap();
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(
            kubeconfig.current_context.as_deref(),
            Some("gpucloud-apiserver")
        );
        let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        let ca = base64::engine::general_purpose::STANDARD
            .decode(cluster.certificate_authority_data.as_ref().unwrap())
            .unwrap();
        assert_eq!(ca, CA.as_bytes());

        let operator = kubeconfig
            .auth_infos
            .iter()
            .find(|entry| entry.name == "gpucloud-operator")
            .unwrap();
        assert!(operator.auth_info.as_ref().unwrap().token.is_some());
        // The token text itself, read from the YAML (kube keeps it in a secret wrapper).
        let raw: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(raw["users"][1]["user"]["token"].as_str(), Some("op-token"));

        let contexts: Vec<&str> = kubeconfig
            .contexts
            .iter()
            .map(|context| context.name.as_str())
            .collect();
        assert_eq!(contexts, ["gpucloud-apiserver-admin", "gpucloud-apiserver"]);
    }

    #[tokio::test]
    async fn kube_rs_builds_a_client_config_from_the_written_file() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("kubeconfig");
        let tls = crate::tls::TlsMaterial::generate(&["127.0.0.1".to_owned()]).unwrap();
        let yaml = render("https://127.0.0.1:6443", tls.ca_pem(), &users(), "admin").unwrap();
        write(&path, &yaml).unwrap();

        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }

        let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(config.default_namespace, "default");
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
        assert_eq!(config.auth_info.username, None);
        // The file is replaced, not appended to, when written again.
        write(&path, &yaml).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), yaml);
        assert_eq!(std::fs::read_dir(directory.path()).unwrap().count(), 1);
    }

    #[test]
    fn writing_into_a_missing_directory_is_a_clear_error() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("missing").join("kubeconfig");
        let error = write(&path, "x").unwrap_err();
        assert!(error.to_string().contains("missing/kubeconfig"), "{error}");
    }

    #[test]
    fn debug_of_a_user_hides_the_token() {
        let debug = format!("{:?}", users());
        assert!(!debug.contains("admin-token"));
        assert!(debug.contains("gpucloud-operator"));
    }
}
