//! Security rules of instances and rules of firewalls, which share one shape.

use serde::{Deserialize, Serialize};

use super::string_enum::string_enum;

string_enum! {
    /// Direction of a security or firewall rule.
    Direction {
        Ingress = "ingress",
        Egress = "egress",
    }
}

string_enum! {
    /// IP version of a security or firewall rule.
    Ethertype {
        Ipv4 = "IPv4",
        Ipv6 = "IPv6",
    }
}

string_enum! {
    /// Protocol of a security or firewall rule.
    Protocol {
        Tcp = "tcp",
        Udp = "udp",
        Icmp = "icmp",
        Any = "any",
    }
}

/// A security rule of an instance, or a rule of a firewall (same shape).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SecurityRule {
    pub id: String,
    pub direction: Direction,
    pub protocol: Protocol,
    pub ethertype: Ethertype,
    /// CIDR, e.g. `0.0.0.0/0`.
    pub remote_ip_prefix: String,
    pub port_range_min: Option<u32>,
    pub port_range_max: Option<u32>,
}

/// A firewall rule has the same fields as an instance security rule.
pub type FirewallRule = SecurityRule;

/// A new security or firewall rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct NewRule {
    pub direction: Direction,
    pub protocol: Protocol,
    pub ethertype: Ethertype,
    pub remote_ip_prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_range_min: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_range_max: Option<u32>,
}

impl NewRule {
    /// Inbound IPv4 TCP from `remote_ip_prefix` to `port`.
    pub fn tcp_ingress(remote_ip_prefix: impl Into<String>, port: u32) -> Self {
        NewRule {
            direction: Direction::Ingress,
            protocol: Protocol::Tcp,
            ethertype: Ethertype::Ipv4,
            remote_ip_prefix: remote_ip_prefix.into(),
            port_range_min: Some(port),
            port_range_max: Some(port),
        }
    }
}
