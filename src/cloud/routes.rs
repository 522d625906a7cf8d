//! The route table: every operation of the Cloud GPU Compute Service, its method and path.
//!
//! Client and simulator both read this table, so a path exists in exactly one place.
//! Paths the interface document shows are copied verbatim (trailing slashes included);
//! the others follow its conventions and are marked [`Source::Assumed`]. The conventions,
//! and the table as a person reads it, are in `docs/cloud-api.md`.

use std::fmt;

/// HTTP method of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether the interface document shows a route or the project chose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Method and path are written in the interface document.
    Shown,
    /// The document names the operation (and sometimes its method) but not its path.
    Assumed,
}

/// What repeating a call does, which decides whether the client may retry it on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Reads, deletes and other calls whose repetition leaves the same state: safe to retry.
    Idempotent,
    /// A call that changes state once per request (power actions, rule changes): retried only
    /// when the request provably never reached the server.
    Unsafe,
    /// A call that creates a billed resource: never retried by the client. The caller
    /// decides, after looking for the resource by name.
    BilledCreate,
}

macro_rules! operations {
    ($( $(#[$doc:meta])* $name:ident => $method:ident $path:literal, $source:ident, $retry:ident; )*) => {
        /// One operation of the API.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Operation {
            $( $(#[$doc])* $name, )*
        }

        impl Operation {
            /// Every operation, in table order.
            pub const ALL: &'static [Operation] = &[ $( Operation::$name, )* ];

            pub fn method(self) -> Method {
                match self { $( Operation::$name => Method::$method, )* }
            }

            /// Path template relative to the base URL, with `{param}` placeholders.
            pub fn path(self) -> &'static str {
                match self { $( Operation::$name => $path, )* }
            }

            pub fn source(self) -> Source {
                match self { $( Operation::$name => Source::$source, )* }
            }

            pub fn retry(self) -> Retry {
                match self { $( Operation::$name => Retry::$retry, )* }
            }

            /// Stable name (the variant's), used in metrics labels and the simulator's counters.
            pub fn name(self) -> &'static str {
                match self { $( Operation::$name => stringify!($name), )* }
            }
        }
    };
}

operations! {
    // === Balance, deploy, pricing ===
    GetBalance => Get "/balance/", Assumed, Idempotent;
    /// Deploy a new instance.
    CreateInstance => Post "/instances/", Assumed, BilledCreate;
    GetPricing => Get "/pricing/", Assumed, Idempotent;
    /// Price quote for a configuration given in the body.
    QuotePricing => Post "/pricing/", Assumed, Idempotent;

    // === Instances ===
    ListInstances => Get "/instances/", Assumed, Idempotent;
    GetInstanceBilling => Get "/instances/billing/", Assumed, Idempotent;
    ListSnapshotEligibleInstances => Get "/instances/snapshot-eligible/", Assumed, Idempotent;
    GetInstance => Get "/instances/{vm_id}/", Assumed, Idempotent;
    StartInstance => Post "/instances/{vm_id}/start/", Assumed, Unsafe;
    StopInstance => Post "/instances/{vm_id}/stop/", Assumed, Unsafe;
    RebootInstance => Post "/instances/{vm_id}/reboot/", Assumed, Unsafe;
    HibernateInstance => Post "/instances/{vm_id}/hibernate/", Assumed, Unsafe;
    RestoreHibernatedInstance => Post "/compute/{vm_id}/restore/", Shown, Unsafe;
    /// Sets public IP on or off; the body carries the wanted value, so a repeat is harmless.
    TogglePublicIp => Post "/instances/{vm_id}/public-ip/", Assumed, Idempotent;
    AddSecurityRule => Post "/instances/{vm_id}/security-rules/", Assumed, Unsafe;
    RemoveSecurityRule => Delete "/instances/{vm_id}/security-rules/{rule_id}/", Shown, Idempotent;
    DeleteInstance => Delete "/instances/{vm_id}/", Assumed, Idempotent;
    ListInstanceFirewalls => Get "/instances/{vm_id}/firewalls/", Assumed, Idempotent;
    AttachVolumes => Post "/instances/{vm_id}/volumes/attach/", Assumed, Idempotent;
    DetachVolumes => Post "/instances/{vm_id}/volumes/detach/", Assumed, Idempotent;

    // === Volumes ===
    ListVolumes => Get "/volumes/", Shown, Idempotent;
    CreateVolume => Post "/volumes/", Assumed, BilledCreate;
    GetVolumeBilling => Get "/volumes/billing/", Shown, Idempotent;
    ListVolumeTypes => Get "/volumes/types/", Assumed, Idempotent;
    GetVolume => Get "/volumes/{volume_id}/", Assumed, Idempotent;
    ResizeVolume => Post "/volumes/{volume_id}/resize/", Assumed, Idempotent;
    CloneVolume => Post "/volumes/{volume_id}/clone/", Assumed, BilledCreate;
    DeleteVolume => Delete "/volumes/{volume_id}/", Assumed, Idempotent;

    // === Snapshots ===
    CreateSnapshot => Post "/instances/{vm_id}/snapshots/create/", Shown, BilledCreate;
    ListSnapshots => Get "/snapshots/", Assumed, Idempotent;
    GetSnapshotBilling => Get "/snapshots/billing/", Assumed, Idempotent;
    GetSnapshot => Get "/snapshots/{snapshot_id}/", Assumed, Idempotent;
    RestoreSnapshot => Post "/snapshots/{snapshot_id}/restore/", Shown, BilledCreate;
    DeleteSnapshot => Delete "/snapshots/{snapshot_id}/delete/", Shown, Idempotent;

    // === Custom images ===
    ListImages => Get "/images/", Assumed, Idempotent;
    /// Create a custom image from the snapshot named in the body.
    CreateImage => Post "/images/", Assumed, BilledCreate;
    ListSnapshotImageRelations => Get "/images/snapshot-relations/", Assumed, Idempotent;
    GetSnapshotImageRelation => Get "/images/snapshot-relations/{snapshot_id}/", Assumed, Idempotent;
    GetImage => Get "/images/{image_id}/", Assumed, Idempotent;
    DeleteImage => Delete "/images/{image_id}/", Assumed, Idempotent;

    // === Firewalls ===
    ListFirewalls => Get "/firewalls/", Assumed, Idempotent;
    CreateFirewall => Post "/firewalls/", Assumed, BilledCreate;
    ListFirewallProtocols => Get "/firewalls/protocols/", Assumed, Idempotent;
    ListFirewallAttachableInstances => Get "/firewalls/attachable-instances/", Assumed, Idempotent;
    GetFirewall => Get "/firewalls/{firewall_id}/", Shown, Idempotent;
    DeleteFirewall => Delete "/firewalls/{firewall_id}/", Assumed, Idempotent;
    AddFirewallRule => Post "/firewalls/{firewall_id}/rules/", Assumed, Unsafe;
    RemoveFirewallRule => Delete "/firewalls/{firewall_id}/rules/{rule_id}/", Assumed, Idempotent;
    /// Sets the firewall's attachments to exactly the instances in the body.
    AttachFirewall => Post "/firewalls/{firewall_id}/attach/", Assumed, Idempotent;

    // === SSH keys ===
    ListSshKeys => Get "/ssh-keys/", Assumed, Idempotent;
    /// Import the given public key, or generate a pair when none is given.
    CreateSshKey => Post "/ssh-keys/", Shown, BilledCreate;
    GetSshKey => Get "/ssh-keys/{key_id}/", Assumed, Idempotent;
    DeleteSshKey => Delete "/ssh-keys/{key_id}/", Assumed, Idempotent;

    // === Startup scripts ===
    ListStartupScripts => Get "/startup-scripts/", Assumed, Idempotent;
    CreateStartupScript => Post "/startup-scripts/", Assumed, BilledCreate;
    /// Delete the scripts whose ids are in the body.
    DeleteStartupScripts => Post "/startup-scripts/delete/", Assumed, Idempotent;
    GetStartupScript => Get "/startup-scripts/{script_id}/", Assumed, Idempotent;
    UpdateStartupScript => Put "/startup-scripts/{script_id}/", Assumed, Idempotent;
    DeleteStartupScript => Delete "/startup-scripts/{script_id}/", Assumed, Idempotent;

    // === Catalogs ===
    GetGpuStock => Get "/gpus/stock/", Assumed, Idempotent;
    GetGpuSpecs => Get "/gpus/specs/", Assumed, Idempotent;
    ListRegions => Get "/regions/", Assumed, Idempotent;
    ListOsImages => Get "/os-images/", Assumed, Idempotent;

    // === AI chat ===
    ListAiModels => Get "/ai/models/", Shown, Idempotent;
    ChatWithAi => Post "/ai/chat/", Assumed, Unsafe;
    GetAiUsageSummary => Get "/ai/usage/summary/", Assumed, Idempotent;
    GetAiUsageHistory => Get "/ai/usage/history/", Assumed, Idempotent;
}

impl Operation {
    /// Names of the `{param}` placeholders in the path, in order.
    pub fn params(self) -> impl Iterator<Item = &'static str> {
        self.path()
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
    }

    /// The path with its placeholders replaced by `args`, in order, each percent-encoded.
    ///
    /// Returns `None` when the number of arguments does not match the placeholders.
    pub fn render(self, args: &[&str]) -> Option<String> {
        let mut out = String::with_capacity(self.path().len() + 32);
        let mut args = args.iter();
        for (i, seg) in self.path().split('/').enumerate() {
            if i > 0 {
                out.push('/');
            }
            if seg.starts_with('{') {
                encode_segment(args.next()?, &mut out);
            } else {
                out.push_str(seg);
            }
        }
        args.next().is_none().then_some(out)
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Percent-encodes everything outside RFC 3986's unreserved set, so an id can never
/// change the shape of a path.
fn encode_segment(value: &str, out: &mut String) {
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn method_and_path_pairs_are_unique() {
        let mut seen = HashSet::new();
        for op in Operation::ALL {
            assert!(
                seen.insert((op.method(), op.path())),
                "{op} duplicates a route"
            );
        }
    }

    #[test]
    fn every_path_is_absolute_with_trailing_slash() {
        for op in Operation::ALL {
            assert!(
                op.path().starts_with('/') && op.path().ends_with('/'),
                "{op}"
            );
        }
    }

    #[test]
    fn shown_paths_are_verbatim_from_the_interface_document() {
        let shown: Vec<_> = Operation::ALL
            .iter()
            .filter(|op| op.source() == Source::Shown)
            .map(|op| (op.method().as_str(), op.path()))
            .collect();
        assert_eq!(
            shown,
            vec![
                ("POST", "/compute/{vm_id}/restore/"),
                ("DELETE", "/instances/{vm_id}/security-rules/{rule_id}/"),
                ("GET", "/volumes/"),
                ("GET", "/volumes/billing/"),
                ("POST", "/instances/{vm_id}/snapshots/create/"),
                ("POST", "/snapshots/{snapshot_id}/restore/"),
                ("DELETE", "/snapshots/{snapshot_id}/delete/"),
                ("GET", "/firewalls/{firewall_id}/"),
                ("POST", "/ssh-keys/"),
                ("GET", "/ai/models/"),
            ]
        );
    }

    #[test]
    fn render_fills_and_encodes_parameters() {
        assert_eq!(
            Operation::RemoveSecurityRule
                .render(&["vm 1", "r/2"])
                .as_deref(),
            Some("/instances/vm%201/security-rules/r%2F2/")
        );
        assert_eq!(
            Operation::ListVolumes.render(&[]).as_deref(),
            Some("/volumes/")
        );
        assert_eq!(Operation::GetInstance.render(&[]), None);
        assert_eq!(Operation::GetInstance.render(&["a", "b"]), None);
        assert_eq!(
            Operation::RemoveSecurityRule.params().collect::<Vec<_>>(),
            ["vm_id", "rule_id"]
        );
    }
}
