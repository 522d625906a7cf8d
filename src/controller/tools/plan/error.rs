//! What `plan` and the manifests it reads fail with.

/// The environment variable holding the cloud API key `--cloud-url` reads with.
pub const API_KEY_VARIABLE: &str = "GPUCLOUD_API_KEY";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {message}")]
    Read { path: String, message: String },
    #[error("{origin}: does not parse: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: {field}: {message}")]
    Decode {
        origin: String,
        field: String,
        message: String,
    },
    #[error("{kind} {namespace}/{name} in the cluster does not decode: {field}: {message}")]
    LiveDecode {
        kind: String,
        namespace: String,
        name: String,
        field: String,
        message: String,
    },
    #[error("--cloud-url needs the API key in the {API_KEY_VARIABLE} environment variable")]
    ApiKeyMissing,
    #[error("the cloud: {0}")]
    Cloud(#[from] gpucloud_cloud::Error),
    #[error("the cloud: {0}")]
    Catalog(#[from] crate::Error),
    #[error("Kubernetes API: {}", crate::flow::error::KubeMessage(.0))]
    Kube(#[from] kube::Error),
    #[error("reading what the Budgets and GpuPolicies count: {0}")]
    Counting(#[source] crate::Error),
    /// The API server would refuse a manifest: `output` is the plan, printed all the same.
    #[error("the API server would refuse: {messages}")]
    Refused { output: String, messages: String },
}
