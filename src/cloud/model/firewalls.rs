//! Firewalls, their rules and the instances they are attached to.

use serde::{Deserialize, Serialize};

use super::instances::VmStatus;
use super::rules::{FirewallRule, NewRule, Protocol};

/// The instance of a firewall attachment.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AttachedVm {
    pub id: String,
    pub name: String,
    /// Power status of the instance.
    pub status: VmStatus,
}

/// One instance a firewall is attached to.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct FirewallAttachment {
    pub vm: AttachedVm,
}

/// A firewall (as shown).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Firewall {
    pub id: String,
    pub name: String,
    pub description: String,
    pub region: String,
    pub rules: Vec<FirewallRule>,
    pub attachments: Vec<FirewallAttachment>,
    pub created_at: String,
}

/// Body of `CreateFirewall`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CreateFirewallRequest {
    pub name: String,
    pub region: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub rules: Vec<NewRule>,
}

/// Body of a response carrying one firewall under `firewall`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct FirewallBody {
    pub firewall: Firewall,
}

/// Body of `ListFirewalls` and `ListInstanceFirewalls`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct FirewallList {
    pub firewalls: Vec<Firewall>,
    pub total_count: u64,
}

/// Body of `AddFirewallRule`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AddFirewallRuleBody {
    pub firewall_id: String,
    pub rule: FirewallRule,
}

/// Body of `RemoveFirewallRule`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct RemoveFirewallRuleBody {
    pub firewall_id: String,
    pub rule_id: String,
}

/// Body of `AttachFirewall`: the complete set of attached instances after the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct AttachFirewallRequest {
    pub vm_ids: Vec<String>,
}

/// Body of `ListFirewallProtocols`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ProtocolList {
    pub protocols: Vec<Protocol>,
    pub total_count: u64,
}
