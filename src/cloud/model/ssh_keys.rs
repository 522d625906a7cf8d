//! SSH keys; a generated key's private half is never printed.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Private key text (OpenSSH PEM). Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct PrivateKeyPem(String);

impl PrivateKeyPem {
    pub fn new(pem: impl Into<String>) -> Self {
        PrivateKeyPem(pem.into())
    }

    /// The key text; handle with care.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PrivateKeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKeyPem(***)")
    }
}

/// An SSH key (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SshKey {
    pub id: String,
    pub name: String,
    pub public_key: String,
    pub created_at: String,
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// Body of `CreateSshKey`: import when `public_key` is given, generate a pair otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CreateSshKeyRequest {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
}

/// Body of a `CreateSshKey` response: the key's fields at the top level, plus the private
/// key of a generated pair (returned once, never stored).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct SshKeyCreatedBody {
    #[serde(flatten)]
    pub key: SshKey,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<PrivateKeyPem>,
}

/// Body of `GetSshKey`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SshKeyBody {
    pub ssh_key: SshKey,
}

/// Body of `ListSshKeys`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SshKeyList {
    pub ssh_keys: Vec<SshKey>,
    pub total_count: u64,
}
