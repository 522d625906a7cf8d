//! Operations on instances: deploy, read, power actions, public IP, security rules, volumes
//! and billing.

use super::CloudClient;
use crate::error::Error;
use crate::model::{
    AddSecurityRuleBody, ApiResponse, CreateInstanceRequest, DeleteInstanceBody, FirewallList,
    Instance, InstanceBillingBody, InstanceBillingQuery, InstanceBody, InstanceList, NewRule,
    PowerActionBody, PublicIpRequest, RemoveSecurityRuleBody, VolumeAttachmentBody,
    VolumeIdsRequest,
};
use crate::routes::Operation;

impl CloudClient {
    /// Deploys an instance. Never retried by the client: after a timeout the caller looks
    /// for the instance by name before creating again.
    pub async fn create_instance(
        &self,
        request: &CreateInstanceRequest,
    ) -> Result<Instance, Error> {
        let body: InstanceBody = self.send(Operation::CreateInstance, &[], request).await?;
        Ok(body.instance)
    }

    pub async fn list_instances(&self) -> Result<InstanceList, Error> {
        self.fetch(Operation::ListInstances, &[]).await
    }

    pub async fn get_instance_billing(
        &self,
        query: &InstanceBillingQuery,
    ) -> Result<InstanceBillingBody, Error> {
        self.fetch_query(Operation::GetInstanceBilling, query).await
    }

    pub async fn list_snapshot_eligible_instances(&self) -> Result<InstanceList, Error> {
        self.fetch(Operation::ListSnapshotEligibleInstances, &[])
            .await
    }

    pub async fn get_instance(&self, vm_id: &str) -> Result<Instance, Error> {
        let body: InstanceBody = self.fetch(Operation::GetInstance, &[vm_id]).await?;
        Ok(body.instance)
    }

    pub async fn start_instance(&self, vm_id: &str) -> Result<PowerActionBody, Error> {
        self.fetch(Operation::StartInstance, &[vm_id]).await
    }

    pub async fn stop_instance(&self, vm_id: &str) -> Result<PowerActionBody, Error> {
        self.fetch(Operation::StopInstance, &[vm_id]).await
    }

    pub async fn reboot_instance(&self, vm_id: &str) -> Result<PowerActionBody, Error> {
        self.fetch(Operation::RebootInstance, &[vm_id]).await
    }

    pub async fn hibernate_instance(&self, vm_id: &str) -> Result<PowerActionBody, Error> {
        self.fetch(Operation::HibernateInstance, &[vm_id]).await
    }

    /// Wakes a hibernated instance (legacy tier only).
    pub async fn restore_hibernated_instance(
        &self,
        vm_id: &str,
    ) -> Result<ApiResponse<PowerActionBody>, Error> {
        self.fetch_response(Operation::RestoreHibernatedInstance, &[vm_id])
            .await
    }

    /// Sets the instance's public IP on or off (a repeat is harmless).
    pub async fn toggle_public_ip(&self, vm_id: &str, enabled: bool) -> Result<Instance, Error> {
        let request = PublicIpRequest { enabled };
        let body: InstanceBody = self
            .send(Operation::TogglePublicIp, &[vm_id], &request)
            .await?;
        Ok(body.instance)
    }

    pub async fn add_security_rule(
        &self,
        vm_id: &str,
        rule: &NewRule,
    ) -> Result<AddSecurityRuleBody, Error> {
        self.send(Operation::AddSecurityRule, &[vm_id], rule).await
    }

    /// Removes a security rule (legacy tier only; the instance must be `RUNNING`).
    pub async fn remove_security_rule(
        &self,
        vm_id: &str,
        rule_id: &str,
    ) -> Result<ApiResponse<RemoveSecurityRuleBody>, Error> {
        self.fetch_response(Operation::RemoveSecurityRule, &[vm_id, rule_id])
            .await
    }

    pub async fn delete_instance(&self, vm_id: &str) -> Result<DeleteInstanceBody, Error> {
        self.fetch(Operation::DeleteInstance, &[vm_id]).await
    }

    pub async fn list_instance_firewalls(&self, vm_id: &str) -> Result<FirewallList, Error> {
        self.fetch(Operation::ListInstanceFirewalls, &[vm_id]).await
    }

    pub async fn attach_volumes(
        &self,
        vm_id: &str,
        volume_ids: &[String],
    ) -> Result<VolumeAttachmentBody, Error> {
        self.change_volumes(Operation::AttachVolumes, vm_id, volume_ids)
            .await
    }

    pub async fn detach_volumes(
        &self,
        vm_id: &str,
        volume_ids: &[String],
    ) -> Result<VolumeAttachmentBody, Error> {
        self.change_volumes(Operation::DetachVolumes, vm_id, volume_ids)
            .await
    }

    /// Attach or detach: the same request, the same answer.
    async fn change_volumes(
        &self,
        operation: Operation,
        vm_id: &str,
        volume_ids: &[String],
    ) -> Result<VolumeAttachmentBody, Error> {
        let request = VolumeIdsRequest {
            volume_ids: volume_ids.to_vec(),
        };
        self.send(operation, &[vm_id], &request).await
    }
}
