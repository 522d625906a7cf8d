//! Operations on instances: deploy, read, power actions, public IP, security rules, volumes
//! and billing.

use crate::model::{
    AddSecurityRuleBody, ApiResponse, CreateInstanceRequest, DeleteInstanceBody, FirewallList,
    Instance, InstanceBillingBody, InstanceBillingQuery, InstanceBody, InstanceList, NewRule,
    PowerActionBody, PublicIpRequest, RemoveSecurityRuleBody, VolumeAttachmentBody,
    VolumeIdsRequest,
};

calls! {
    /// Deploys an instance. Never retried by the client: after a timeout the caller looks
    /// for the instance by name before creating again.
    fn create_instance(request: &CreateInstanceRequest) -> Instance
        = send(CreateInstance, [], request) .instance in InstanceBody;
    fn list_instances() -> InstanceList = fetch(ListInstances, []);
    fn get_instance_billing(query: &InstanceBillingQuery) -> InstanceBillingBody
        = fetch_query(GetInstanceBilling, [], query);
    fn list_snapshot_eligible_instances() -> InstanceList
        = fetch(ListSnapshotEligibleInstances, []);
    fn get_instance(vm_id: &str) -> Instance
        = fetch(GetInstance, [vm_id]) .instance in InstanceBody;
    fn start_instance(vm_id: &str) -> PowerActionBody = fetch(StartInstance, [vm_id]);
    fn stop_instance(vm_id: &str) -> PowerActionBody = fetch(StopInstance, [vm_id]);
    fn reboot_instance(vm_id: &str) -> PowerActionBody = fetch(RebootInstance, [vm_id]);
    fn hibernate_instance(vm_id: &str) -> PowerActionBody = fetch(HibernateInstance, [vm_id]);
    /// Wakes a hibernated instance (legacy tier only).
    fn restore_hibernated_instance(vm_id: &str) -> ApiResponse<PowerActionBody>
        = fetch_response(RestoreHibernatedInstance, [vm_id]);
    fn add_security_rule(vm_id: &str, rule: &NewRule) -> AddSecurityRuleBody
        = send(AddSecurityRule, [vm_id], rule);
    /// Removes a security rule (legacy tier only; the instance must be `RUNNING`).
    fn remove_security_rule(vm_id: &str, rule_id: &str) -> ApiResponse<RemoveSecurityRuleBody>
        = fetch_response(RemoveSecurityRule, [vm_id, rule_id]);
    fn delete_instance(vm_id: &str) -> DeleteInstanceBody = fetch(DeleteInstance, [vm_id]);
    fn list_instance_firewalls(vm_id: &str) -> FirewallList
        = fetch(ListInstanceFirewalls, [vm_id]);
    /// Sets the instance's public IP on or off (a repeat is harmless).
    fn toggle_public_ip(vm_id: &str, enabled: bool) -> Instance
        = send(TogglePublicIp, [vm_id], &PublicIpRequest { enabled }) .instance in InstanceBody;
    fn attach_volumes(vm_id: &str, volume_ids: &[String]) -> VolumeAttachmentBody
        = send(AttachVolumes, [vm_id], &VolumeIdsRequest { volume_ids: volume_ids.to_vec() });
    fn detach_volumes(vm_id: &str, volume_ids: &[String]) -> VolumeAttachmentBody
        = send(DetachVolumes, [vm_id], &VolumeIdsRequest { volume_ids: volume_ids.to_vec() });
}
