//! Operations on firewalls: create, read, delete, rules and attachments.

use crate::model::{
    AddFirewallRuleBody, AttachFirewallRequest, CreateFirewallRequest, DeletedBody, Firewall,
    FirewallBody, FirewallList, InstanceList, NewRule, ProtocolList, RemoveFirewallRuleBody,
};

calls! {
    fn list_firewalls() -> FirewallList = fetch(ListFirewalls, []);
    /// Creates a firewall. Never retried by the client.
    fn create_firewall(request: &CreateFirewallRequest) -> Firewall
        = send(CreateFirewall, [], request) .firewall in FirewallBody;
    fn list_firewall_protocols() -> ProtocolList = fetch(ListFirewallProtocols, []);
    fn list_firewall_attachable_instances() -> InstanceList
        = fetch(ListFirewallAttachableInstances, []);
    fn get_firewall(firewall_id: &str) -> Firewall
        = fetch(GetFirewall, [firewall_id]) .firewall in FirewallBody;
    fn delete_firewall(firewall_id: &str) -> DeletedBody = fetch(DeleteFirewall, [firewall_id]);
    fn add_firewall_rule(firewall_id: &str, rule: &NewRule) -> AddFirewallRuleBody
        = send(AddFirewallRule, [firewall_id], rule);
    fn remove_firewall_rule(firewall_id: &str, rule_id: &str) -> RemoveFirewallRuleBody
        = fetch(RemoveFirewallRule, [firewall_id, rule_id]);
    /// Sets the firewall's attachments to exactly `vm_ids` (an empty list detaches all).
    fn attach_firewall(firewall_id: &str, vm_ids: &[String]) -> Firewall
        = send(AttachFirewall, [firewall_id], &AttachFirewallRequest { vm_ids: vm_ids.to_vec() })
        .firewall in FirewallBody;
}
