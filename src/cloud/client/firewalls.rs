//! Operations on firewalls: create, read, delete, rules and attachments.

use super::CloudClient;
use crate::error::Error;
use crate::model::{
    AddFirewallRuleBody, AttachFirewallRequest, CreateFirewallRequest, DeletedBody, Firewall,
    FirewallBody, FirewallList, InstanceList, NewRule, ProtocolList, RemoveFirewallRuleBody,
};
use crate::routes::Operation;

impl CloudClient {
    pub async fn list_firewalls(&self) -> Result<FirewallList, Error> {
        self.fetch(Operation::ListFirewalls, &[]).await
    }

    /// Creates a firewall. Never retried by the client.
    pub async fn create_firewall(
        &self,
        request: &CreateFirewallRequest,
    ) -> Result<Firewall, Error> {
        let body: FirewallBody = self.send(Operation::CreateFirewall, &[], request).await?;
        Ok(body.firewall)
    }

    pub async fn list_firewall_protocols(&self) -> Result<ProtocolList, Error> {
        self.fetch(Operation::ListFirewallProtocols, &[]).await
    }

    pub async fn list_firewall_attachable_instances(&self) -> Result<InstanceList, Error> {
        self.fetch(Operation::ListFirewallAttachableInstances, &[])
            .await
    }

    pub async fn get_firewall(&self, firewall_id: &str) -> Result<Firewall, Error> {
        let body: FirewallBody = self.fetch(Operation::GetFirewall, &[firewall_id]).await?;
        Ok(body.firewall)
    }

    pub async fn delete_firewall(&self, firewall_id: &str) -> Result<DeletedBody, Error> {
        self.fetch(Operation::DeleteFirewall, &[firewall_id]).await
    }

    pub async fn add_firewall_rule(
        &self,
        firewall_id: &str,
        rule: &NewRule,
    ) -> Result<AddFirewallRuleBody, Error> {
        self.send(Operation::AddFirewallRule, &[firewall_id], rule)
            .await
    }

    pub async fn remove_firewall_rule(
        &self,
        firewall_id: &str,
        rule_id: &str,
    ) -> Result<RemoveFirewallRuleBody, Error> {
        self.fetch(Operation::RemoveFirewallRule, &[firewall_id, rule_id])
            .await
    }

    /// Sets the firewall's attachments to exactly `vm_ids` (an empty list detaches all).
    pub async fn attach_firewall(
        &self,
        firewall_id: &str,
        vm_ids: &[String],
    ) -> Result<Firewall, Error> {
        let request = AttachFirewallRequest {
            vm_ids: vm_ids.to_vec(),
        };
        let body: FirewallBody = self
            .send(Operation::AttachFirewall, &[firewall_id], &request)
            .await?;
        Ok(body.firewall)
    }
}
