//! Startup scripts run on an instance's first boot.

use serde::{Deserialize, Serialize};

/// A startup script.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct StartupScript {
    pub id: String,
    pub name: String,
    pub description: String,
    /// The script text.
    pub content: String,
    pub created_at: String,
    pub updated_at: String,
}

/// Body of `CreateStartupScript`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CreateStartupScriptRequest {
    pub name: String,
    pub content: String,
    #[serde(default)]
    pub description: String,
}

/// Body of `UpdateStartupScript`: the fields to change.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct UpdateStartupScriptRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Body of a response carrying one script under `script`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct StartupScriptBody {
    pub script: StartupScript,
}

/// Body of `ListStartupScripts`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct StartupScriptList {
    pub scripts: Vec<StartupScript>,
    pub total_count: u64,
}

/// Body of `DeleteStartupScripts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct DeleteStartupScriptsRequest {
    pub script_ids: Vec<String>,
}

/// Body of a `DeleteStartupScripts` response. Ids that did not exist are reported, not
/// refused, so a repeated call succeeds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct DeleteStartupScriptsBody {
    pub deleted_ids: Vec<String>,
    pub not_found_ids: Vec<String>,
}
