//! `SshKey`: a public key registered with the cloud, imported or generated.

use crate::common::{CloudStatus, Column, ManagedFields, OnChange};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// An SSH key in the Cloud GPU Compute Service.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gpucloud.io",
    version = "v1alpha1",
    kind = "SshKey",
    namespaced,
    status = "SshKeyStatus",
    shortname = "gpuk",
    category = "gpucloud"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.publicKey) == has(oldSelf.publicKey) && (!has(self.publicKey) || self.publicKey == oldSelf.publicKey)").message("publicKey is immutable").field_path(".publicKey"),
    validation = Rule::new("!has(self.publicKey) || !has(self.privateKeySecret)").message("privateKeySecret applies only to generated keys; leave it out when publicKey is given").field_path(".privateKeySecret"),
    validation = Rule::new("has(self.privateKeySecret) == has(oldSelf.privateKeySecret) && (!has(self.privateKeySecret) || self.privateKeySecret == oldSelf.privateKeySecret)").message("privateKeySecret is immutable: delete and recreate the SshKey to write its key to another Secret").field_path(".privateKeySecret"),
    validation = crate::common::credentials_secret_ref_is_immutable(),
    validation = crate::common::deletion_policy_is_not_snapshot(),
)]
pub struct SshKeySpec {
    #[serde(flatten)]
    pub managed: ManagedFields,

    /// OpenSSH public key to import (`ssh-ed25519 AAAA... comment`). Leave it out to have the
    /// cloud generate a key pair. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16384))]
    #[x_kube(validation = Rule::new("self.matches('^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|sk-ssh-ed25519@openssh.com) [A-Za-z0-9+/]+={0,3}( .*)?$')").message("publicKey must be an OpenSSH public key line such as 'ssh-ed25519 AAAA... user@host'"))]
    pub public_key: Option<String>,

    /// For a generated key: the Secret (owned by this object) that receives the private key.
    /// Defaults to `<name>-ssh-key`. Immutable. A Secret of that name this SshKey did not
    /// create (its controller owner) is never written, and no private key is copied from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub private_key_secret: Option<String>,
}

/// What the operator observed of an SSH key.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SshKeyStatus {
    #[serde(flatten)]
    pub cloud: CloudStatus,
    /// Whether the cloud generated the pair (the private key is in `privateKeySecret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated: Option<bool>,
    /// The public key the cloud holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// The Secret holding the generated private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_secret: Option<String>,
}

impl SshKey {
    /// The `kubectl get` columns of this kind's own (see [`crate::Column`]).
    pub const COLUMNS: &[Column] = &[Column::new("Generated", "boolean", ".status.generated")];

    /// How a change of each spec field is carried out (with [`crate::MANAGED_ON_CHANGE`]).
    pub const ON_CHANGE: &[(&str, OnChange)] = &[
        ("publicKey", OnChange::Immutable),
        ("privateKeySecret", OnChange::Immutable),
    ];
}

impl_managed!(SshKey);
