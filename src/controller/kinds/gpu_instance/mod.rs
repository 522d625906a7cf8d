//! `GpuInstance`: creates (or restores) the machine, then drives power state, reboots, public
//! IP and security rules toward the spec, one cloud call per step.

pub(crate) mod create;
pub mod final_snapshot;
pub(crate) mod placement;
pub(crate) mod schedule;

use crate::accounts::account::Account;
use crate::accounts::observer::CloudResource;
use crate::accounts::records::{cloud_record, found, gone};
use crate::accounts::secrets::{Read, controlled_by, read_if};
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::error::Error;
use crate::flow::kind::{
    ImposedLifetime, KindDeclarations, ManagedKind, Plan, Record, Reference, WhenGone,
};
use crate::flow::reconcile::lifetime_stage;
pub use crate::kinds::gpu_instance::create::InstancePlan;
use crate::kinds::gpu_instance::create::foreign_connection_secret;
use crate::kinds::gpu_instance::schedule::{schedule_note, scheduled};
use gpucloud_api::gpu_instance::{InstanceSpecs, SecurityRule};
use gpucloud_api::lifetime::{OnExpiry, Stage};
use gpucloud_api::{
    ChosenPlacement, CloudStatus, GpuInstance, GpuInstanceStatus, Managed, PlacementStatus,
    PowerState, RESTARTED_AT_ANNOTATION, SshKey,
};
use gpucloud_cloud::model::{
    Direction, Ethertype, Instance, InstanceStatus, NewRule, Protocol, SecurityRule as CloudRule,
    VmStatus,
};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};
use std::collections::BTreeMap;

/// One change a GpuInstance's plan asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum InstanceAction {
    /// Restore a hibernated machine.
    Restore,
    Start,
    Stop,
    Hibernate,
    /// Reboot for this `restartedAt` value (recorded in the status once done).
    Reboot(String),
    /// Assign (`true`) or release the public IP.
    PublicIp(bool),
    AddRule(NewRule),
    /// Remove the security rule with this id.
    RemoveRule(String),
    /// Write the connection Secret of this name (a running machine's address and keys).
    WriteConnectionSecret(String),
}

impl KindDeclarations for GpuInstance {
    type Cloud = Instances;
    const WHEN_GONE: WhenGone = WhenGone::Report;
    const BILLED: bool = true;
    const BILLING_LIST: Option<crate::accounts::account::BillingList> =
        Some(crate::accounts::account::BillingList::Instances);
    const REFERS_TO: &'static [(&'static str, &'static str)] = &[
        ("SshKey", "spec.sshKeyRefs"),
        ("Image", "spec.imageRef"),
        ("Snapshot", "spec.source.snapshotRef"),
        (
            "Snapshot",
            "its final snapshot `<name>-final`, while deleting",
        ),
        ("ConfigMap", "spec.startupScript.configMapRef"),
    ];

    fn references(&self) -> Vec<Reference> {
        let spec = &self.spec;
        let mut references: Vec<Reference> = spec
            .ssh_key_refs
            .iter()
            .map(|r| Reference::named("SshKey", &r.name))
            .collect();
        references.extend(
            spec.image_ref
                .iter()
                .map(|r| Reference::named("Image", &r.name)),
        );
        references.extend(
            spec.source
                .iter()
                .map(|s| Reference::named("Snapshot", &s.snapshot_ref.name)),
        );
        if self.meta().deletion_timestamp.is_some() {
            references.push(Reference::named(
                "Snapshot",
                crate::kinds::gpu_instance::final_snapshot::object_name(&self.name_any()),
            ));
        }
        references.extend(
            spec.startup_script
                .as_ref()
                .and_then(|s| s.config_map_ref.as_ref())
                .map(|r| Reference::named("ConfigMap", &r.name)),
        );
        references
    }

    /// The hardware the cloud reports, else where the create placed it, else the spec's.
    fn gpus(&self) -> i32 {
        let status = self.status.as_ref();
        status
            .and_then(|s| s.specs.as_ref())
            .map(|specs| specs.gpu_count)
            .or_else(|| {
                status
                    .and_then(|s| s.placement.as_ref())
                    .and_then(|p| p.chosen.as_ref())
                    .map(|chosen| chosen.gpu_count)
            })
            .or(self.spec.gpu_count)
            .unwrap_or(1)
            .max(1)
    }

    /// `ACTIVE`: billed in full and stoppable, booting or running.
    fn is_running(&self) -> bool {
        self.cloud_status_ref().and_then(|s| s.state.as_deref())
            == Some(InstanceStatus::Active.as_str())
    }

    /// `SHUTOFF` or `HIBERNATED`: billed a share of the running rate.
    fn is_off(&self) -> bool {
        let state = self.cloud_status_ref().and_then(|s| s.state.as_deref());
        state == Some(InstanceStatus::Shutoff.as_str())
            || state == Some(InstanceStatus::Hibernated.as_str())
    }

    /// The rate the cloud gave for the machine, while it has one.
    fn hourly_cost(&self) -> Option<(f64, String)> {
        let status = self.status.as_ref()?;
        status.cloud.external_id.as_ref()?;
        let rate = status.hourly_rate?;
        Some((
            rate,
            status.currency.clone().unwrap_or_else(|| "USD".into()),
        ))
    }

    /// A `restartedAt` value not yet recorded in the status asks for a reboot.
    fn annotations_observed(&self) -> bool {
        let done = self.status.as_ref().and_then(|s| s.restarted_at.as_deref());
        self.annotations()
            .get(RESTARTED_AT_ANNOTATION)
            .is_none_or(|requested| done == Some(requested.as_str()))
    }

    fn status_with(&self, common: CloudStatus, record: Option<&Record<Self>>) -> Self::Status {
        let previous = self.status.as_ref();
        match record {
            Some(r) => GpuInstanceStatus {
                cloud: common,
                vm_status: Some(r.vm_status.as_str().to_string()),
                ip_address: r.ip_address.clone(),
                ip_status: Some(r.ip_status.as_str().to_string()),
                specs: Some(InstanceSpecs {
                    gpu_type: r.specs.gpu_type.clone(),
                    gpu_count: i32::try_from(r.specs.gpu_count).unwrap_or(i32::MAX),
                    ram_gb: i32::try_from(r.specs.ram_gb).unwrap_or(i32::MAX),
                    vcpus: i32::try_from(r.specs.vcpus).unwrap_or(i32::MAX),
                    storage_gb: i32::try_from(r.specs.storage_gb).unwrap_or(i32::MAX),
                }),
                hourly_rate: Some(r.billing.hourly_rate),
                currency: Some(r.billing.currency.clone()),
                boot_source: Some(r.boot_source.as_str().to_string()),
                source_snapshot_id: r.snapshot_id.as_deref().map(Into::into),
                // The value present when the machine is first recorded (created or adopted)
                // asks for nothing: only a later change reboots.
                restarted_at: previous.and_then(|p| p.restarted_at.clone()).or_else(|| {
                    previous
                        .is_none_or(|p| p.cloud.external_id.is_none())
                        .then(|| self.annotations().get(RESTARTED_AT_ANNOTATION))
                        .flatten()
                        .map(|requested| requested.as_str().into())
                }),
                final_snapshot: previous.and_then(|p| p.final_snapshot.clone()),
                next_transition: previous.and_then(|p| p.next_transition.clone()),
                placement: Some(placed(previous.and_then(|p| p.placement.as_ref()), r)),
                startup_script_sha256: previous.and_then(|p| p.startup_script_sha256.clone()),
            },
            None => GpuInstanceStatus {
                cloud: common,
                ..previous.cloned().unwrap_or_default()
            },
        }
    }

    /// The schedule's next transition is shown as of `now`.
    fn status_at(
        &self,
        common: CloudStatus,
        record: Option<&Record<Self>>,
        now: Timestamp,
    ) -> GpuInstanceStatus {
        GpuInstanceStatus {
            next_transition: self.next_wake(now).map(Time),
            ..self.status_with(common, record)
        }
    }

    /// The schedule's next start or stop is acted on at its moment.
    fn next_wake(&self, now: Timestamp) -> Option<Timestamp> {
        if matches!(lifetime_stage(self, now), Ok(Some(Stage::Expired { .. }))) {
            return None;
        }
        scheduled(self, now)
            .ok()
            .flatten()
            .and_then(|(_, next)| next)
    }

    /// Observed only, yet Ready only while the machine is what the spec states: a spec edited
    /// to ask for another power state is shown not applied, with the way to apply it.
    fn observed(&self, record: &Instance) -> Outcome {
        let id = &record.instance_id;
        if record.status == InstanceStatus::Error {
            return Outcome::stalled(reason::CLOUD_UNAVAILABLE, format!("{id} is in ERROR"));
        }
        if let Some(mismatch) = hardware_mismatch(&self.spec, record) {
            return Outcome::stalled(reason::SPEC_MISMATCH, mismatch);
        }
        let wanted = self.spec.power_state;
        let settled = match record.status {
            InstanceStatus::Active => Some(PowerState::Running),
            InstanceStatus::Shutoff => Some(PowerState::Stopped),
            InstanceStatus::Hibernated => Some(PowerState::Hibernated),
            _ => None,
        };
        let mut differs = Vec::new();
        if let Some(state) = settled
            && state != wanted
        {
            differs.push(format!(
                "spec.powerState is {wanted:?} but {id} is {}",
                record.status
            ));
        }
        if record.public_ip_enabled != self.spec.public_ip {
            differs.push(format!(
                "spec.publicIp is {} but {id} has {}",
                self.spec.public_ip,
                if record.public_ip_enabled {
                    "one"
                } else {
                    "none"
                }
            ));
        }
        let (missing, extra) = rule_diff(&self.spec.security_rules, &record.security_rules);
        if !missing.is_empty() || !extra.is_empty() {
            differs.push(format!(
                "spec.securityRules differ from {id}'s ({} missing, {} more)",
                missing.len(),
                extra.len()
            ));
        }
        if !differs.is_empty() {
            return Outcome::stalled(
                reason::NOT_APPLIED,
                format!(
                    "{}: managementPolicy ObserveOnly changes nothing in the cloud; set it to Manage to apply the spec",
                    differs.join("; ")
                ),
            );
        }
        let observing = format!("observing {id} ({})", record.status);
        // Between states (by someone else's hand): not as the spec states yet, nor stuck.
        if settled.is_none() {
            return Outcome::progressing(reason::PROVISIONING, observing);
        }
        Outcome::ready(reason::AVAILABLE, observing)
    }
}

impl ManagedKind for GpuInstance {
    type CreatePlan = InstancePlan;

    fn policy_subject(&self, plan: &InstancePlan) -> Option<gpucloud_api::gpu_policy::Subject> {
        Some(policy_subject(self, plan))
    }

    async fn plan_create(
        &self,
        cx: &Context<Self>,
        account: &Account,
    ) -> Result<InstancePlan, Error> {
        let checked = create::check_spec(self, cx.settings.clock.now())?;
        let reads = create::dereference(self, &checked, cx, account).await?;
        create::plan(self, checked, reads)
    }

    /// The placement is written with the intent: a crash or a lost answer after it finds the
    /// create by its one cloud name, wherever it went.
    /// So is the digest of a startup script read from a ConfigMap: the machine runs that one,
    /// whatever the ConfigMap holds later.
    fn planned(&mut self, plan: &InstancePlan) {
        let from_config_map = self
            .spec
            .startup_script
            .as_ref()
            .is_some_and(|s| s.config_map_ref.is_some());
        let (placement, script) = match plan {
            InstancePlan::Create { placement, request } => {
                (Some(placement), request.startup_script.as_deref())
            }
            InstancePlan::Restore { placement, .. } => (placement.as_ref(), None),
        };
        let status = self.status.get_or_insert_default();
        if let Some(placement) = placement {
            status.placement = Some(placement.clone());
        }
        if let Some(script) = script.filter(|_| from_config_map) {
            status.startup_script_sha256 = Some(create::script_digest(script).into());
        }
    }

    /// A first list shows the machine's GPUs and region, and its rate (`placed`); not which
    /// alternative it was, nor the candidates passed over, nor the startup script it got.
    fn plan_shows_in_list(plan: &InstancePlan) -> bool {
        let (placement, script) = match plan {
            InstancePlan::Create { placement, request } => {
                (Some(placement), request.startup_script.as_ref())
            }
            InstancePlan::Restore { placement, .. } => (placement.as_ref(), None),
        };
        script.is_none()
            && placement.is_none_or(|p| {
                p.skipped.is_empty() && p.chosen.as_ref().is_none_or(|c| c.alternative == 0)
            })
    }

    /// The chosen placement joins the skipped ones; the next plan takes another, or waits.
    fn refused_for_stock(&mut self, at: Timestamp) -> bool {
        let refused = self
            .status
            .as_ref()
            .and_then(|s| s.placement.as_ref())
            .and_then(|p| placement::refused(p, at));
        match refused {
            Some(placement) => {
                self.status.get_or_insert_default().placement = Some(placement);
                true
            }
            None => false,
        }
    }

    async fn planned_hourly_rate(
        plan: &InstancePlan,
        account: &Account,
    ) -> Result<Option<f64>, Error> {
        let (gpu_type, gpu_count) = match plan {
            InstancePlan::Create { request, .. } => (request.gpu_type.clone(), request.gpu_count),
            // A restored machine has its snapshot's hardware.
            InstancePlan::Restore {
                snapshot_id,
                placement,
            } => {
                let chosen = placement
                    .as_ref()
                    .and_then(|p| p.chosen.as_ref())
                    .ok_or_else(|| {
                        Error::InvalidSpec(format!(
                            "the cloud does not say which GPUs snapshot {snapshot_id} restores to"
                        ))
                    })?;
                (
                    chosen.gpu_type.clone(),
                    u32::try_from(chosen.gpu_count).unwrap_or_default(),
                )
            }
        };
        machine_rate(account, &gpu_type, gpu_count).await.map(Some)
    }

    async fn create(
        _cx: &Context<Self>,
        account: &Account,
        plan: InstancePlan,
        cloud_name: &str,
    ) -> Result<Instance, Error> {
        match plan {
            InstancePlan::Restore { snapshot_id, .. } => Ok(account
                .client
                .restore_snapshot(&snapshot_id, cloud_name)
                .await?
                .body
                .data),
            InstancePlan::Create { mut request, .. } => {
                request.name = cloud_name.to_string();
                Ok(account.client.create_instance(&request).await?)
            }
        }
    }

    /// The moment the plan is made: where the lifetime stands depends on it.
    type Resolved = Moment;
    type Action = InstanceAction;

    async fn resolve(
        &self,
        cx: &Context<Self>,
        account: &Account,
        record: &Instance,
    ) -> Result<Moment, Error> {
        // A Budget read before its store is filled would let a machine it keeps off start.
        let listed = tokio::time::timeout(BUDGETS_LISTED_WITHIN, cx.budgets.wait_until_ready());
        if !matches!(listed.await, Ok(Ok(()))) {
            return Err(Error::InProgress {
                reason: reason::UPDATING,
                message: "waiting for the namespace's Budgets to be listed before changing the machine's power".into(),
            });
        }
        let uid = self.uid().unwrap_or_default();
        let namespace = self.namespace();
        let budget_hold = cx
            .budgets
            .state()
            .iter()
            .filter(|b| b.namespace() == namespace)
            .filter_map(|b| {
                let held = b
                    .status
                    .as_ref()?
                    .powered_off
                    .iter()
                    .find(|p| p.uid == uid)?;
                Some(BudgetHold {
                    budget: b.name_any(),
                    power_state: held.power_state,
                })
            })
            // Hibernated if any Budget asks for it: the further off.
            .max_by_key(|h| h.power_state == PowerState::Hibernated);
        let off = matches!(
            record.status,
            InstanceStatus::Shutoff | InstanceStatus::Hibernated
        );
        let capped_start = off && self.spec.power_state == PowerState::Running;
        let running_rate = if off && (self.spec.max_hourly_rate.is_some() || capped_start) {
            let pricing = account.pricing().await?;
            placement::rate(&pricing, &record.specs.gpu_type, record.specs.gpu_count)
                .map(|rate| (rate, pricing.currency.clone()))
        } else {
            None
        };
        let policy_lifetime = crate::kinds::gpu_policy::lifetime_cap(
            &cx.client,
            &cx.policies,
            namespace.as_deref().unwrap_or_default(),
        )
        .await?;
        let policy_start_hold = match (&running_rate, capped_start) {
            (Some((rate, currency)), true) => {
                crate::kinds::gpu_policy::start_refusal(&cx.client, self, *rate, currency).await?
            }
            _ => None,
        };
        Ok(Moment {
            now: cx.settings.clock.now(),
            budget_hold,
            running_rate,
            policy_lifetime,
            policy_start_hold,
            startup_script_changed: startup_script_change(self, cx, record).await?,
        })
    }

    /// The power state, the public IP, the rules, a reboot and the connection Secret
    /// (`power_and_network_plan`); a machine that runs as specified is Ready only if it
    /// booted with the startup script its ConfigMap holds now.
    fn plan(&self, record: &Instance, moment: Moment) -> Result<Plan<InstanceAction>, Error> {
        let script_changed = moment.startup_script_changed.clone();
        let imposed = imposed_lifetime(self, &moment);
        let mut plan = power_and_network_plan(self, record, moment)?;
        plan.imposed_lifetime = imposed;
        // The machine runs the script it booted with: not as specified, and no call changes it.
        if let (Some(change), Outcome::Ready { .. }) = (script_changed, &plan.outcome) {
            plan.outcome = Outcome::stalled(reason::SPEC_MISMATCH, change);
        }
        Ok(plan)
    }

    async fn execute(
        &self,
        cx: &Context<Self>,
        account: &Account,
        record: &Instance,
        action: &InstanceAction,
    ) -> Result<(), Error> {
        let (client, id) = (&account.client, record.instance_id.as_str());
        match action {
            InstanceAction::Restore => client.restore_hibernated_instance(id).await.map(drop)?,
            InstanceAction::Start => client.start_instance(id).await.map(drop)?,
            InstanceAction::Stop => client.stop_instance(id).await.map(drop)?,
            InstanceAction::Hibernate => client.hibernate_instance(id).await.map(drop)?,
            InstanceAction::Reboot(_) => client.reboot_instance(id).await.map(drop)?,
            InstanceAction::PublicIp(enabled) => {
                client.toggle_public_ip(id, *enabled).await.map(drop)?
            }
            InstanceAction::AddRule(rule) => client.add_security_rule(id, rule).await.map(drop)?,
            InstanceAction::RemoveRule(rule) => {
                client.remove_security_rule(id, rule).await.map(drop)?
            }
            InstanceAction::WriteConnectionSecret(secret) => {
                write_connection_secret(self, cx, secret, record).await?
            }
        }
        Ok(())
    }

    fn executed(&mut self, action: &InstanceAction) {
        if let (InstanceAction::Reboot(requested), Some(status)) = (action, self.status.as_mut()) {
            status.restarted_at = Some(requested.as_str().into());
        }
    }

    /// Its data volumes are detached first (`Instances::delete`), but for those deleted with
    /// it: their data goes anyway. Those are the volumes whose own deletion waits for this one
    /// (`Volume::hold_deletion`), and those whose objects, by the stores, are being deleted
    /// while attached to it (`volume::deleted_with_machine`), though their reconciles have not
    /// come yet. All are noted as let go of, so that the volumes' deletions, reading a list
    /// from before, need not detach them again.
    async fn delete(
        cx: &Context<Self>,
        own: Option<&Self>,
        account: &Account,
        record: &Instance,
    ) -> Result<(), Error> {
        let deleted_with_it = match own {
            Some(machine) if !record.volume_ids.is_empty() => {
                crate::kinds::volume::deleted_with_machine(
                    &cx.ownership,
                    account,
                    &machine.namespace().unwrap_or_default(),
                    &machine.name_any(),
                    &record.instance_id,
                )
            }
            _ => Vec::new(),
        };
        let detached: Vec<String> = record
            .volume_ids
            .iter()
            .filter(|volume| !account.volume_deleting(volume) && !deleted_with_it.contains(volume))
            .cloned()
            .collect();
        delete_instance(&account.client, record, &detached).await?;
        account.note_volumes_released(&record.instance_id, &record.volume_ids);
        Ok(())
    }

    /// Under `deletionPolicy: Snapshot`, the machine is kept until its final snapshot is
    /// available (`final_snapshot.rs`).
    async fn hold_deletion(
        &self,
        cx: &Context<Self>,
        account: &std::sync::Arc<Account>,
    ) -> Result<(), Error> {
        if crate::kinds::gpu_instance::final_snapshot::asked_for(self) {
            crate::kinds::gpu_instance::final_snapshot::hold(self, cx, account).await
        } else {
            Ok(())
        }
    }

    async fn released(&self, cx: &Context<Self>) -> Result<(), Error> {
        crate::kinds::gpu_instance::final_snapshot::release(self, &cx.client).await
    }
}

/// How the script in `spec.startupScript.configMapRef` differs from the one the machine was
/// created with (`status.startupScriptSha256`), if it does. A ConfigMap or key gone since is
/// no difference: the machine runs what it booted with, and nothing asks for another script.
async fn startup_script_change(
    vm: &GpuInstance,
    cx: &Context<GpuInstance>,
    record: &Instance,
) -> Result<Option<String>, Error> {
    let reference = vm
        .spec
        .startup_script
        .as_ref()
        .and_then(|s| s.config_map_ref.as_ref());
    let created_with = vm
        .status
        .as_ref()
        .and_then(|s| s.startup_script_sha256.as_deref());
    let (Some(reference), Some(created_with)) = (reference, created_with) else {
        return Ok(None);
    };
    let namespace = vm.namespace().unwrap_or_default();
    let now = match create::config_map_value(cx, &namespace, &reference.name, &reference.key).await
    {
        Ok(script) => script,
        Err(error) if error.is_waiting_for_reference() => return Ok(None),
        Err(error) => return Err(error),
    };
    Ok((create::script_digest(&now) != created_with).then(|| {
        format!(
            "key {:?} of ConfigMap {} changed after {} was created with the script it held then; the cloud runs a startup script at first boot only: put the old script back, or recreate the GpuInstance to run the new one",
            reference.key, reference.name, record.instance_id
        )
    }))
}

/// Power state first; then, on a machine off as it should be, the public IP and the security
/// rules (the cloud changes those in any settled state); on a running one, a requested
/// reboot, the public IP, the security rules and the connection Secret.
fn power_and_network_plan(
    vm: &GpuInstance,
    record: &Instance,
    moment: Moment,
) -> Result<Plan<InstanceAction>, Error> {
    if let Some(passing) = in_transition(record) {
        return Ok(passing);
    }
    // Adopted, the machine may not be the one the spec describes, and the fields that
    // say so are immutable: nothing is done to it, and it is not Ready.
    if let Some(mismatch) = hardware_mismatch(&vm.spec, record) {
        return Ok(Plan::stand(Outcome::stalled(
            reason::SPEC_MISMATCH,
            mismatch,
        )));
    }
    let power = wanted_power(vm, &moment)?;
    if let Some(step) = power_step(vm, record, &moment, &power) {
        return Ok(step);
    }
    if power.wanted != PowerState::Running {
        // The public IP and the rules are the cloud's to change on a machine that is off.
        if let Some(step) = address_and_rules_step(vm, record) {
            return Ok(step);
        }
        return Ok(Plan::stand(held_off(vm, record, &power)));
    }
    if record.vm_status != VmStatus::Running {
        return Ok(Plan::stand(Outcome::progressing(
            reason::PROVISIONING,
            format!("{} is {}", record.instance_id, record.vm_status),
        )));
    }
    Ok(running_step(vm, record, &power.note))
}

/// The public IP, then the security rules (added before removed, as for firewalls: a change
/// never leaves the machine with fewer rules than both the old and the new set).
fn address_and_rules_step(vm: &GpuInstance, record: &Instance) -> Option<Plan<InstanceAction>> {
    let id = record.instance_id.as_str();
    let progressing = |message: String| Outcome::progressing(reason::UPDATING, message);
    if record.public_ip_enabled != vm.spec.public_ip {
        let verb = if vm.spec.public_ip {
            "assigning"
        } else {
            "releasing"
        };
        return Some(Plan::act(
            InstanceAction::PublicIp(vm.spec.public_ip),
            progressing(format!("{verb} the public IP of {id}")),
        ));
    }
    let (missing, extra) = rule_diff(&vm.spec.security_rules, &record.security_rules);
    if let Some(rule) = missing.first() {
        return Some(Plan::act(
            InstanceAction::AddRule(to_cloud_rule(rule)),
            progressing(format!("adding a security rule to {id}")),
        ));
    }
    if let Some(rule) = extra.first() {
        return Some(Plan::act(
            InstanceAction::RemoveRule(rule.id.clone()),
            progressing(format!("removing security rule {} from {id}", rule.id)),
        ));
    }
    None
}

/// A machine between states (or in ERROR) is waited for: nothing is asked of it meanwhile.
fn in_transition(record: &Instance) -> Option<Plan<InstanceAction>> {
    let id = record.instance_id.as_str();
    match &record.status {
        InstanceStatus::Creating
        | InstanceStatus::Stopping
        | InstanceStatus::Starting
        | InstanceStatus::Rebooting
        | InstanceStatus::Hibernating
        | InstanceStatus::Deleting => Some(Plan::stand(Outcome::progressing(
            reason::PROVISIONING,
            format!("{id} is {}", record.status),
        ))),
        InstanceStatus::Error => Some(Plan::stand(Outcome::stalled(
            reason::CLOUD_UNAVAILABLE,
            format!("the cloud reports {id} in ERROR"),
        ))),
        _ => None,
    }
}

/// The power state a machine should be in now, and why.
struct WantedPower {
    wanted: PowerState,
    /// The lifetime (its own or a GpuPolicy's) has ended.
    expired: bool,
    /// The GpuPolicy whose `maxLifetime` ends the machine, when it comes first.
    capped_by: Option<String>,
    /// A Budget over its limit keeps the machine off.
    budget_hold: Option<BudgetHold>,
    /// What the Ready message says of the lifetime, schedule and Budget.
    note: String,
}

/// The power state `powerState`, an ended lifetime, the schedule and a Budget ask for at
/// `moment`.
fn wanted_power(vm: &GpuInstance, moment: &Moment) -> Result<WantedPower, Error> {
    let now = moment.now;
    let (stage, on_expiry, capped_by) = effective_lifetime(vm, moment, now)?;
    // An expiry that deletes the object is carried out by the shared flow before any plan.
    let expired = matches!(stage, Some(Stage::Expired { .. }));
    // Once the lifetime has ended the schedule no longer matters (not even whether it can be
    // read).
    let scheduled = if expired { None } else { scheduled(vm, now)? };
    let wanted = match on_expiry {
        // An ended lifetime only ever turns a machine further off: one already off by
        // `powerState` stays as it is (never started to be stopped or hibernated).
        Some(_) if expired && vm.spec.power_state != PowerState::Running => vm.spec.power_state,
        Some(OnExpiry::Hibernate) if expired => PowerState::Hibernated,
        // Stop, and a Delete or Snapshot whose deletion was refused (deletion protection).
        Some(_) if expired => PowerState::Stopped,
        _ => scheduled.map_or(vm.spec.power_state, |(power, _)| power),
    };
    // A Budget over its limit only keeps a machine that would run off (never starts one,
    // never wakes a hibernated one to stop it).
    let budget_hold = moment
        .budget_hold
        .clone()
        .filter(|_| !expired && wanted == PowerState::Running);
    let wanted = budget_hold.as_ref().map_or(wanted, |h| h.power_state);
    let note = format!(
        "{}{}{}{}",
        lifetime_note(stage, on_expiry),
        capped_by
            .as_ref()
            .map_or_else(String::new, |policy| format!(
                " (the longest lifetime GpuPolicy {policy} allows)"
            )),
        schedule_note(scheduled, stage),
        budget_note(budget_hold.as_ref())
    );
    Ok(WantedPower {
        wanted,
        expired,
        capped_by,
        budget_hold,
        note,
    })
}

/// The power change the machine needs, if any: a start or restore only within the price
/// limit and the namespace's GpuPolicy caps.
fn power_step(
    vm: &GpuInstance,
    record: &Instance,
    moment: &Moment,
    power: &WantedPower,
) -> Option<Plan<InstanceAction>> {
    let id = record.instance_id.as_str();
    let wanted = power.wanted;
    let (action, step) = match (wanted, &record.status) {
        (PowerState::Running | PowerState::Stopped, InstanceStatus::Hibernated) => {
            (InstanceAction::Restore, "restoring")
        }
        (PowerState::Running | PowerState::Hibernated, InstanceStatus::Shutoff) => {
            (InstanceAction::Start, "starting")
        }
        (PowerState::Stopped, InstanceStatus::Active) => (InstanceAction::Stop, "stopping"),
        (PowerState::Hibernated, InstanceStatus::Active) => {
            (InstanceAction::Hibernate, "hibernating")
        }
        _ => return None,
    };
    let billed = matches!(action, InstanceAction::Start | InstanceAction::Restore);
    // A start bills the machine's full rate: under a limit it waits for a price within it (a
    // restore runs the machine too, if only on its way to Stopped).
    if billed
        && let Some(held) = start_above_price_limit(
            vm.spec.max_hourly_rate,
            record,
            moment.running_rate.as_ref(),
        )
    {
        return Some(Plan::stand(held));
    }
    // A start bills the full rate against the namespace's caps too.
    if billed && let Some(why) = &moment.policy_start_hold {
        return Some(Plan::stand(Outcome::stalled(
            reason::POLICY_LIMIT,
            format!("{why}: {id} stays off until there is room"),
        )));
    }
    Some(Plan::act(
        action,
        Outcome::progressing(
            reason::UPDATING,
            format!("{step} {id} toward powerState {wanted:?}"),
        ),
    ))
}

/// A machine off as it should be: Ready when the spec asks for it off, not when a Budget or
/// a GpuPolicy's lifetime keeps it off against the spec's `Running` (the message says who).
fn held_off(vm: &GpuInstance, record: &Instance, power: &WantedPower) -> Outcome {
    let state = if power.wanted == PowerState::Stopped {
        "stopped"
    } else {
        "hibernated"
    };
    let message = format!("{} is {state}{}", record.instance_id, power.note);
    if power.budget_hold.is_some() {
        Outcome::stalled(reason::BUDGET_EXCEEDED, message)
    } else if power.expired
        && power.capped_by.is_some()
        && vm.spec.power_state == PowerState::Running
    {
        Outcome::stalled(reason::POLICY_LIMIT, message)
    } else {
        Outcome::ready(reason::AVAILABLE, message)
    }
}

/// The next change a running machine needs: a requested reboot, the public IP, the security
/// rules, then the connection Secret with the machine Ready.
fn running_step(vm: &GpuInstance, record: &Instance, note: &str) -> Plan<InstanceAction> {
    let id = record.instance_id.as_str();
    let progressing = |message: String| Outcome::progressing(reason::UPDATING, message);
    // A new `restartedAt` value asks for one reboot.
    let restart = vm.annotations().get(RESTARTED_AT_ANNOTATION).cloned();
    let done = vm.status.as_ref().and_then(|s| s.restarted_at.clone());
    if let Some(requested) = restart
        && done.as_deref() != Some(requested.as_str())
    {
        let message = format!("rebooting {id} for {RESTARTED_AT_ANNOTATION}={requested}");
        return Plan::act(InstanceAction::Reboot(requested), progressing(message));
    }
    if let Some(step) = address_and_rules_step(vm, record) {
        return step;
    }
    // A limit lowered below what the running machine costs is reported, not enforced: a
    // machine is stopped only when its spec says so.
    let outcome = above_price_limit(vm.spec.max_hourly_rate, record).unwrap_or_else(|| {
        let address = record.ip_address.as_deref().unwrap_or("no public IP");
        Outcome::ready(
            reason::AVAILABLE,
            format!("{id} is running ({address}){note}"),
        )
    });
    match &vm.spec.connection_secret {
        Some(secret) => Plan::act(
            InstanceAction::WriteConnectionSecret(secret.clone()),
            outcome,
        ),
        None => Plan::stand(outcome),
    }
}

/// Where the machine stands in its lifetime, what its expiry does, and the GpuPolicy whose
/// `maxLifetime` ends it, if one does (`effective_lifetime`).
type EffectiveLifetime = (Option<Stage>, Option<OnExpiry>, Option<String>);

/// Where the machine stands in its lifetime, what its expiry does, and the GpuPolicy whose
/// `maxLifetime` ends it, when that comes before the machine's own lifetime (or it has
/// none): the policy's expiry stops the machine.
fn effective_lifetime(
    vm: &GpuInstance,
    moment: &Moment,
    now: Timestamp,
) -> Result<EffectiveLifetime, Error> {
    let stage = lifetime_stage(vm, now)?;
    let on_expiry = vm.spec.lifetime.as_ref().map(|l| l.on_expiry);
    let Some((policy, max)) = &moment.policy_lifetime else {
        return Ok((stage, on_expiry, None));
    };
    let created = vm.meta().creation_timestamp.as_ref().map_or(now, |t| t.0);
    let capped = gpucloud_api::lifetime::Lifetime {
        ttl: None,
        expires_at: created
            .checked_add(*max)
            .ok()
            .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
        on_expiry: OnExpiry::Stop,
        warn_before: vm
            .spec
            .lifetime
            .as_ref()
            .and_then(|l| l.warn_before.clone()),
    };
    let Some(policy_stage) = capped
        .expires_at
        .is_some()
        .then(|| capped.stage(created, now))
        .transpose()
        .map_err(Error::InvalidSpec)?
    else {
        return Ok((stage, on_expiry, None));
    };
    Ok(match stage {
        Some(own) if own.expires_at() <= policy_stage.expires_at() => (stage, on_expiry, None),
        _ => (
            Some(policy_stage),
            Some(OnExpiry::Stop),
            Some(policy.clone()),
        ),
    })
}

/// The lifetime a GpuPolicy's `maxLifetime` sets, when it ends the machine before its own:
/// the object says nothing of it, so the plan tells the flow (to show, warn of and wake for).
fn imposed_lifetime(vm: &GpuInstance, moment: &Moment) -> Option<ImposedLifetime> {
    match effective_lifetime(vm, moment, moment.now) {
        Ok((Some(stage), _, Some(policy))) => Some(ImposedLifetime {
            stage,
            by: format!("GpuPolicy {policy}"),
        }),
        _ => None,
    }
}

/// What the Ready message says of the lifetime.
fn lifetime_note(stage: Option<Stage>, on_expiry: Option<OnExpiry>) -> String {
    match (stage, on_expiry) {
        (Some(Stage::Expired { expires_at }), _) => {
            format!(": its lifetime ended at {expires_at}")
        }
        (Some(stage), Some(on_expiry)) => {
            format!(
                "; expires at {} (onExpiry {on_expiry:?})",
                stage.expires_at()
            )
        }
        _ => String::new(),
    }
}

/// Keys of the connection Secret.
pub mod connection {
    pub const HOST: &str = "host";
    pub const PORT: &str = "port";
    pub const USER: &str = "user";
    pub const PRIVATE_KEY: &str = "ssh-privatekey";
}

/// Writes (or updates) the Secret a Pod uses to reach the machine: host, port, user and, when
/// one of its keys was generated by the operator, that private key, read only from a Secret
/// the SshKey controls (`crate::accounts::secrets`). Owned by the instance, so it goes with it; a Secret
/// of that name the instance does not control is never overwritten. Written only when its
/// content changes.
async fn write_connection_secret(
    instance: &GpuInstance,
    cx: &Context<GpuInstance>,
    name: &str,
    record: &Instance,
) -> Result<(), Error> {
    let namespace = instance.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(cx.client.clone(), &namespace);
    let owner = instance
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidSpec("the GpuInstance has no uid yet".into()))?;
    let mut data = BTreeMap::from([
        (
            connection::HOST.to_string(),
            record.ip_address.clone().unwrap_or_default(),
        ),
        (connection::PORT.to_string(), "22".to_string()),
        (connection::USER.to_string(), login_user(record).to_string()),
    ]);
    if let Some(private) = generated_private_key(instance, cx, &secrets).await? {
        data.insert(connection::PRIVATE_KEY.to_string(), private);
    }
    let current = match read_if(&secrets, name, |meta| controlled_by(meta, &owner.uid)).await? {
        Read::Admitted(existing) => Some(existing),
        Read::Missing => None,
        Read::Refused => return Err(foreign_connection_secret(&namespace, name)),
    };
    if let Some(existing) = &current {
        let same = existing.data.as_ref().is_some_and(|d| {
            d.len() == data.len()
                && data
                    .iter()
                    .all(|(k, v)| d.get(k).is_some_and(|b| b.0 == v.as_bytes()))
        });
        if same {
            return Ok(());
        }
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace),
            owner_references: Some(vec![owner]),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "gpucloud-operator".to_string(),
            )])),
            ..Default::default()
        },
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    };
    match current {
        Some(existing) => {
            let mut replacement = secret;
            replacement.metadata.resource_version = existing.metadata.resource_version;
            secrets
                .replace(name, &PostParams::default(), &replacement)
                .await?;
        }
        None => {
            secrets.create(&PostParams::default(), &secret).await?;
        }
    }
    Ok(())
}

/// The private key of the first SshKey the machine names that generated one (it has no
/// `publicKey`), read from the Secret that SshKey created and no other.
async fn generated_private_key(
    instance: &GpuInstance,
    cx: &Context<GpuInstance>,
    secrets: &Api<Secret>,
) -> Result<Option<String>, Error> {
    let namespace = instance.namespace().unwrap_or_default();
    let keys: Api<SshKey> = Api::namespaced(cx.client.clone(), &namespace);
    for reference in &instance.spec.ssh_key_refs {
        let Some(key) = keys.get_opt(&reference.name).await? else {
            continue;
        };
        if key.spec.public_key.is_some() {
            continue;
        }
        // Only the Secret this SshKey created holds its key: a name alone could point at any
        // Secret of the namespace (a deploy key, say), which must never be copied.
        let Some(key_uid) = key.uid() else {
            continue;
        };
        let key_secret = crate::kinds::ssh_key::private_key_secret_name(&key);
        let secret = match read_if(secrets, &key_secret, |meta| controlled_by(meta, &key_uid))
            .await?
        {
            Read::Admitted(secret) => secret,
            Read::Missing => continue,
            Read::Refused => {
                tracing::debug!(
                    object = %instance.name_any(),
                    ssh_key = %key.name_any(),
                    secret = %key_secret,
                    "the SshKey's Secret was not created by it; no private key is copied from it"
                );
                continue;
            }
        };
        if let Some(private) = secret
            .data
            .as_ref()
            .and_then(|d| d.get(crate::kinds::ssh_key::PRIVATE_KEY_FIELD))
        {
            return Ok(Some(String::from_utf8_lossy(&private.0).into_owned()));
        }
    }
    Ok(None)
}

/// The login user of the machine's image: `ubuntu` on the Ubuntu images, `root` otherwise.
fn login_user(record: &Instance) -> &'static str {
    if record
        .image_id
        .as_deref()
        .is_some_and(|i| i.starts_with("ubuntu"))
    {
        "ubuntu"
    } else {
        "root"
    }
}

/// The placement of a machine the cloud has: where it is (its own type, count and region,
/// whatever was planned: a machine adopted by name may be another attempt's), the rest as
/// planned. Fixed from then on.
fn placed(planned: Option<&PlacementStatus>, record: &Instance) -> PlacementStatus {
    let before = planned.and_then(|p| p.chosen.as_ref());
    let count = i32::try_from(record.specs.gpu_count).unwrap_or(i32::MAX);
    let same = before.filter(|c| {
        c.gpu_type == record.specs.gpu_type && c.region == record.region && c.gpu_count == count
    });
    PlacementStatus {
        chosen: Some(ChosenPlacement {
            gpu_type: record.specs.gpu_type.clone(),
            gpu_count: count,
            region: record.region.clone(),
            alternative: same.map_or(0, |c| c.alternative),
            // No choice recorded (adopted, or the intent written with the finalizer): the rate
            // the machine is billed at is the one the price list gave.
            hourly_rate: match before {
                None => Some(record.billing.hourly_rate),
                Some(_) => same.and_then(|c| c.hourly_rate),
            },
            currency: match before {
                None => Some(record.billing.currency.clone()),
                Some(_) => same.and_then(|c| c.currency.clone()),
            },
        }),
        skipped: planned.map(|p| p.skipped.clone()).unwrap_or_default(),
    }
}

/// What a machine of `gpu_count` GPUs of `gpu_type` costs per hour, from the price list.
async fn machine_rate(account: &Account, gpu_type: &str, gpu_count: u32) -> Result<f64, Error> {
    let pricing = account.pricing().await?;
    let per_gpu = pricing
        .gpus
        .iter()
        .find(|p| p.gpu_type == gpu_type)
        .map(|p| p.price_per_gpu_hour)
        .ok_or_else(|| {
            Error::InvalidSpec(format!(
                "the cloud's price list has no GPU type {gpu_type:?}"
            ))
        })?;
    Ok(per_gpu * f64::from(gpu_count))
}

/// How long a reconcile waits for the Budgets' first list before it gives up for now.
const BUDGETS_LISTED_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// When a plan is made, and what holds the machine off besides its spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Moment {
    pub now: Timestamp,
    pub budget_hold: Option<BudgetHold>,
    /// What the machine would cost per hour running, by the price list, and its currency:
    /// read only for a machine that is off under a `spec.maxHourlyRate`, the one case a
    /// start (or a restore) needs it; `None` otherwise, and when the list has no price.
    pub running_rate: Option<(f64, String)>,
    /// The shortest `maxLifetime` of the GpuPolicies governing the namespace, and the policy
    /// that sets it: a machine without a lifetime of its own, or with a longer one, expires
    /// (stopped) that long after its creation.
    pub policy_lifetime: Option<(String, k8s_openapi::jiff::SignedDuration)>,
    /// Why a GpuPolicy's per-namespace rate cap keeps the machine off (its start would pass
    /// it): read only for a machine that is off and asked to run.
    pub policy_start_hold: Option<String>,
    /// How the startup script in the spec's ConfigMap differs from the one the machine was
    /// created with, if it does.
    pub startup_script_changed: Option<String>,
}

impl From<Timestamp> for Moment {
    fn from(now: Timestamp) -> Self {
        Moment {
            now,
            budget_hold: None,
            running_rate: None,
            policy_lifetime: None,
            policy_start_hold: None,
            startup_script_changed: None,
        }
    }
}

/// A Budget over its limit that keeps the machine powered off (`budget.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetHold {
    pub budget: String,
    pub power_state: PowerState,
}

/// What the Ready message says of a Budget keeping the machine off.
fn budget_note(hold: Option<&BudgetHold>) -> String {
    hold.map_or_else(String::new, |h| {
        format!(
            "; kept {} by Budget {} (over its maxHourlyRate) until its rate fits again",
            match h.power_state {
                PowerState::Hibernated => "hibernated",
                _ => "stopped",
            },
            h.budget
        )
    })
}

/// What of the hardware, region and tier the spec states the machine `record` does not have,
/// as a message naming both and the way out; `None` when it has all of it. A restore's
/// hardware and region are its snapshot's, so only its tier is compared; a spec with
/// `placement` is matched by any of its alternatives.
fn hardware_mismatch(spec: &gpucloud_api::GpuInstanceSpec, record: &Instance) -> Option<String> {
    let found = &record.specs;
    let machine = format!(
        "{} is {} x{} in {} ({})",
        record.instance_id, found.gpu_type, found.gpu_count, record.region, record.tier
    );
    let mut differs: Vec<String> = Vec::new();
    if spec.source.is_none() {
        match &spec.placement {
            Some(_) => {
                if let Ok((_, candidates)) = placement::candidates(spec)
                    && !candidates.iter().any(|c| {
                        c.gpu_type == found.gpu_type
                            && c.gpu_count == found.gpu_count
                            && c.region == record.region
                    })
                {
                    differs.push("no spec.placement alternative offers that hardware there".into());
                }
            }
            None => {
                if let Some(gpu_type) = spec.gpu_type.as_ref().filter(|t| **t != found.gpu_type) {
                    differs.push(format!("spec.gpuType is {gpu_type}"));
                }
                // Left out beside a GPU type, the count is the create's default, one.
                let count = spec
                    .gpu_count
                    .or_else(|| spec.gpu_type.as_ref().map(|_| 1))
                    .filter(|n| u32::try_from(*n).ok() != Some(found.gpu_count));
                if let Some(count) = count {
                    differs.push(format!("spec.gpuCount is {count}"));
                }
                if let Some(region) = spec.region.as_ref().filter(|r| **r != record.region) {
                    differs.push(format!("spec.region is {region}"));
                }
            }
        }
    }
    if spec.tier.cloud_value() != record.tier.as_str() {
        differs.push(format!("spec.tier is {:?}", spec.tier));
    }
    // The image a machine booted is compared when the cloud names it: an `osImage` is sent
    // as the create's image id unchanged.
    if let (Some(os), Some(booted)) = (&spec.os_image, &record.image_id)
        && spec.source.is_none()
        && os != booted
    {
        differs.push(format!("spec.osImage is {os} (it booted {booted})"));
    }
    (!differs.is_empty()).then(|| {
        format!(
            "{machine}, but {}: these fields are immutable; write a spec that describes this machine, or let it go (deletionPolicy Orphan, then delete the object)",
            differs.join(", ")
        )
    })
}

/// `PriceAboveLimit` for a running machine that costs more per hour than `limit`.
fn above_price_limit(limit: Option<f64>, record: &Instance) -> Option<Outcome> {
    let limit = limit?;
    let rate = record.billing.hourly_rate;
    (record.status == InstanceStatus::Active && rate > limit).then(|| {
        Outcome::stalled(
            reason::PRICE_ABOVE_LIMIT,
            format!(
                "{} costs {rate:.4} {} per hour, above spec.maxHourlyRate {limit:.4}; it keeps running: raise the limit, or stop or delete the machine",
                record.instance_id, record.billing.currency
            ),
        )
    })
}

/// `PriceAboveLimit` for a machine that is off and would cost more per hour running than
/// `limit` (or whose price the list does not give): it is not started.
fn start_above_price_limit(
    limit: Option<f64>,
    record: &Instance,
    running_rate: Option<&(f64, String)>,
) -> Option<Outcome> {
    let limit = limit?;
    let id = &record.instance_id;
    let hardware = format!("{} x{}", record.specs.gpu_type, record.specs.gpu_count);
    let message = match running_rate {
        Some((rate, _)) if *rate <= limit => return None,
        Some((rate, currency)) => format!(
            "starting {id} ({hardware}) would cost {rate:.4} {currency} per hour, above spec.maxHourlyRate {limit:.4}: it stays off; raise the limit, or set powerState to Stopped"
        ),
        None => format!(
            "the price list gives no price for {hardware}, so starting {id} could cost more than spec.maxHourlyRate {limit:.4}: it stays off until the price list has one"
        ),
    };
    Some(Outcome::stalled(reason::PRICE_ABOVE_LIMIT, message))
}

/// Rules in the spec the cloud lacks, and rules the cloud has that the spec does not name.
/// Rules are compared by content; the cloud's ids play no part.
pub(crate) fn rule_diff<'a>(
    wanted: &'a [SecurityRule],
    actual: &'a [CloudRule],
) -> (Vec<&'a SecurityRule>, Vec<&'a CloudRule>) {
    let matches = |w: &SecurityRule, a: &CloudRule| {
        a.direction.as_str() == w.direction.cloud_value()
            && a.protocol.as_str() == w.protocol
            && a.ethertype.as_str() == w.ether_type.cloud_value()
            && a.remote_ip_prefix == w.remote_ip_prefix
            && a.port_range_min == w.port_range_min.and_then(|p| u32::try_from(p).ok())
            && a.port_range_max == w.port_range_max.and_then(|p| u32::try_from(p).ok())
    };
    // Each cloud rule stands for one wanted rule at most, so a rule added twice (a lost
    // answer, then a retry) shows up as extra and is removed.
    let mut claimed = vec![false; actual.len()];
    let mut missing = Vec::new();
    for w in wanted {
        match (0..actual.len()).find(|&i| !claimed[i] && matches(w, &actual[i])) {
            Some(i) => claimed[i] = true,
            None => missing.push(w),
        }
    }
    let extra = actual
        .iter()
        .zip(claimed)
        .filter(|(_, claimed)| !claimed)
        .map(|(a, _)| a)
        .collect();
    (missing, extra)
}

pub(crate) fn to_cloud_rule(rule: &SecurityRule) -> NewRule {
    NewRule {
        direction: Direction::from_wire(rule.direction.cloud_value()),
        protocol: Protocol::from_wire(&rule.protocol),
        ethertype: Ethertype::from_wire(rule.ether_type.cloud_value()),
        remote_ip_prefix: rule.remote_ip_prefix.clone(),
        port_range_min: rule.port_range_min.and_then(|p| u32::try_from(p).ok()),
        port_range_max: rule.port_range_max.and_then(|p| u32::try_from(p).ok()),
    }
}

// === Cloud calls ===

cloud_record!(Instance, id: instance_id, name: vm_name, state: status);

/// The cloud's machines.
pub struct Instances;

impl CloudResource for Instances {
    type Record = Instance;
    const LABEL: &'static str = "instance";

    async fn list(client: CloudClient) -> Result<Vec<Instance>, CloudError> {
        Ok(client.list_instances().await?.instances)
    }

    async fn get(client: CloudClient, id: String) -> Result<Option<Instance>, CloudError> {
        found(client.get_instance(&id).await)
    }

    async fn delete(client: CloudClient, record: Instance) -> Result<(), CloudError> {
        delete_instance(&client, &record, &record.volume_ids).await
    }
}

/// Deletes the machine, detaching the data volumes `detached` first, so that they outlive it
/// with their data whatever the cloud does with volumes still attached to a deleted instance.
async fn delete_instance(
    client: &CloudClient,
    record: &Instance,
    detached: &[String],
) -> Result<(), CloudError> {
    if record.status == InstanceStatus::Deleting {
        return Ok(());
    }
    let id = &record.instance_id;
    if !detached.is_empty() {
        match client.detach_volumes(id, detached).await {
            Ok(_) => {}
            // The machine is gone, or a volume the record names is (a record listed before
            // the volume's delete): which one, only the machine as it is now tells. Taking
            // the 404 for the machine's would leave a machine billed with no delete sent.
            Err(e) if e.is_not_found() => {
                tracing::debug!(cloud_id = %id, "detaching answered 404; reading the machine again");
                let Some(current) = found(client.get_instance(id).await)? else {
                    return Ok(());
                };
                if current.status == InstanceStatus::Deleting {
                    return Ok(());
                }
                let attached: Vec<String> = detached
                    .iter()
                    .filter(|volume| current.volume_ids.contains(volume))
                    .cloned()
                    .collect();
                if !attached.is_empty() {
                    client.detach_volumes(id, &attached).await?;
                }
            }
            Err(e) => return Err(e),
        }
    }
    gone(client.delete_instance(id).await)
}

/// What a GpuPolicy judges of the machine `plan` makes: every GPU type, region and count the
/// spec names (each placement alternative's too), and the hardware the plan chose (a
/// restore's comes from its snapshot, which the spec does not name).
fn policy_subject(vm: &GpuInstance, plan: &InstancePlan) -> gpucloud_api::gpu_policy::Subject {
    let spec = &vm.spec;
    let mut subject = gpucloud_api::gpu_policy::Subject {
        gpu_types: spec
            .gpu_type
            .iter()
            .map(|t| ("spec.gpuType".to_string(), t.clone()))
            .collect(),
        regions: spec
            .region
            .iter()
            .map(|r| ("spec.region".to_string(), r.clone()))
            .collect(),
        gpu_counts: spec
            .gpu_count
            .iter()
            .map(|c| ("spec.gpuCount".to_string(), *c))
            .collect(),
        tier: spec.tier,
        gpus: 1,
        expires_after: spec.lifetime.as_ref().map(|lifetime| {
            let created = vm
                .meta()
                .creation_timestamp
                .as_ref()
                .map_or_else(Timestamp::now, |t| t.0);
            lifetime
                .expires_at(created)
                .map(|at| at.duration_since(created))
        }),
    };
    for (index, alternative) in spec
        .placement
        .iter()
        .flat_map(|p| p.alternatives.iter())
        .enumerate()
    {
        let at = format!("spec.placement.alternatives[{index}]");
        subject.gpu_types.extend(
            alternative
                .gpu_types
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("{at}.gpuTypes[{i}]"), t.clone())),
        );
        subject.regions.extend(
            alternative
                .regions
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("{at}.regions[{i}]"), r.clone())),
        );
        subject
            .gpu_counts
            .push((format!("{at}.gpuCount"), alternative.gpu_count));
    }
    let chosen = match plan {
        InstancePlan::Create { request, .. } => Some((
            request.gpu_type.clone(),
            i32::try_from(request.gpu_count).unwrap_or(i32::MAX),
            request.region.clone(),
        )),
        InstancePlan::Restore { placement, .. } => placement
            .as_ref()
            .and_then(|p| p.chosen.as_ref())
            .map(|c| (c.gpu_type.clone(), c.gpu_count, c.region.clone())),
    };
    if let Some((gpu_type, gpu_count, region)) = chosen {
        const PLANNED: &str = "the machine planned";
        subject.gpu_types.push((PLANNED.into(), gpu_type));
        subject.regions.push((PLANNED.into(), region));
        subject.gpu_counts.push((PLANNED.into(), gpu_count));
        subject.gpus = gpu_count.max(1);
    }
    subject
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_api::gpu_instance::{Direction as SpecDirection, EtherType};
    use gpucloud_cloud::model::Tier as CloudTier;

    fn spec_rule(cidr: &str, port: i32) -> SecurityRule {
        SecurityRule {
            direction: SpecDirection::Ingress,
            protocol: "tcp".into(),
            ether_type: EtherType::IPv4,
            remote_ip_prefix: cidr.into(),
            port_range_min: Some(port),
            port_range_max: Some(port),
        }
    }

    fn cloud_rule(id: &str, cidr: &str, port: u32) -> CloudRule {
        CloudRule {
            id: id.into(),
            direction: Direction::Ingress,
            protocol: Protocol::Tcp,
            ethertype: Ethertype::Ipv4,
            remote_ip_prefix: cidr.into(),
            port_range_min: Some(port),
            port_range_max: Some(port),
        }
    }

    #[test]
    fn rules_diff_by_content() {
        let wanted = [spec_rule("10.0.0.0/8", 22), spec_rule("0.0.0.0/0", 443)];
        let actual = [
            cloud_rule("r1", "10.0.0.0/8", 22),
            cloud_rule("r2", "0.0.0.0/0", 80),
        ];
        let (missing, extra) = rule_diff(&wanted, &actual);
        assert_eq!(missing, vec![&wanted[1]]);
        assert_eq!(
            extra.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["r2"]
        );
        let (missing, extra) = rule_diff(&wanted[..1], &actual[..1]);
        assert!(missing.is_empty() && extra.is_empty());
    }

    #[test]
    fn a_rule_added_twice_is_extra_once() {
        let wanted = [spec_rule("10.0.0.0/8", 22)];
        let actual = [
            cloud_rule("r1", "10.0.0.0/8", 22),
            cloud_rule("r2", "10.0.0.0/8", 22),
        ];
        let (missing, extra) = rule_diff(&wanted, &actual);
        assert!(missing.is_empty());
        assert_eq!(
            extra.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["r2"]
        );
    }

    #[test]
    fn cloud_rules_carry_the_cloud_spelling() {
        let rule = to_cloud_rule(&spec_rule("192.0.2.0/24", 8080));
        let json = serde_json::to_value(&rule).unwrap();
        assert_eq!(json["direction"], "ingress");
        assert_eq!(json["ethertype"], "IPv4");
        assert_eq!(json["protocol"], "tcp");
        assert_eq!(json["port_range_min"], 8080);
    }

    // === plan ===

    #[test]
    fn the_earlier_of_its_own_lifetime_and_the_policys_ends_the_machine() {
        let created: Timestamp = "2026-12-06T00:00:00Z".parse().unwrap();
        let now: Timestamp = "2026-12-06T01:00:00Z".parse().unwrap();
        let hours = |h| k8s_openapi::jiff::SignedDuration::from_hours(h);
        // (its own lifetime, the policy's maxLifetime, expiry, onExpiry, the policy named)
        let table = [
            (None, None, None, None, None),
            (None, Some(2), Some(2), Some(OnExpiry::Stop), Some("cap")),
            (
                Some(("3h", "Delete")),
                Some(2),
                Some(2),
                Some(OnExpiry::Stop),
                Some("cap"),
            ),
            (
                Some(("1h30m", "Delete")),
                Some(2),
                Some(1),
                Some(OnExpiry::Delete),
                None,
            ),
            (
                Some(("3h", "Hibernate")),
                None,
                Some(3),
                Some(OnExpiry::Hibernate),
                None,
            ),
        ];
        for (own, max, expires_after, on_expiry, policy) in table {
            let spec = own.map_or_else(
                || serde_json::json!({}),
                |(ttl, on)| serde_json::json!({"lifetime": {"ttl": ttl, "onExpiry": on}}),
            );
            let mut vm = instance(spec, None);
            vm.metadata.creation_timestamp = Some(Time(created));
            let moment = Moment {
                policy_lifetime: max.map(|h| ("cap".to_string(), hours(h))),
                ..Moment::from(now)
            };
            let (stage, expiry, named) = effective_lifetime(&vm, &moment, now).unwrap();
            let case = format!("{own:?} {max:?}");
            // Whole hours, but for 1h30m.
            let expected = expires_after.map(|h: i64| {
                let extra = if own.is_some_and(|(t, _)| t == "1h30m") {
                    30
                } else {
                    0
                };
                created
                    .checked_add(hours(h))
                    .unwrap()
                    .checked_add(k8s_openapi::jiff::SignedDuration::from_mins(extra))
                    .unwrap()
            });
            assert_eq!(stage.map(Stage::expires_at), expected, "{case}");
            assert_eq!(expiry, on_expiry, "{case}");
            assert_eq!(named.as_deref(), policy, "{case}");
        }
    }

    /// The object's own moments wake it by themselves (`next_wake`, `wake_of`); a policy's
    /// `maxLifetime` is known to the plan alone, which asks for the look at its next moment.
    #[test]
    fn the_plan_asks_for_a_look_at_the_policys_lifetime_moments_only() {
        let created: Timestamp = "2026-12-06T00:00:00Z".parse().unwrap();
        let at = |t: &str| -> Timestamp { t.parse().unwrap() };
        let hours = |h| k8s_openapi::jiff::SignedDuration::from_hours(h);
        // (its own lifetime, the policy's maxLifetime in hours, now, the wake asked for)
        let table = [
            (None, None, "2026-12-06T01:00:00Z", None),
            // Warned an hour before by default, then ended.
            (
                None,
                Some(3),
                "2026-12-06T01:00:00Z",
                Some("2026-12-06T02:00:00Z"),
            ),
            (
                None,
                Some(3),
                "2026-12-06T02:30:00Z",
                Some("2026-12-06T03:00:00Z"),
            ),
            (None, Some(3), "2026-12-06T03:30:00Z", None),
            (
                Some("4h"),
                Some(3),
                "2026-12-06T01:00:00Z",
                Some("2026-12-06T02:00:00Z"),
            ),
            // Its own lifetime ends it first: `wake_of` reads that from the object.
            (Some("2h"), Some(3), "2026-12-06T00:30:00Z", None),
        ];
        for (own, max, now, wake) in table {
            let spec = own.map_or_else(
                || serde_json::json!({}),
                |ttl| serde_json::json!({"lifetime": {"ttl": ttl, "onExpiry": "Stop"}}),
            );
            let mut vm = instance(spec, None);
            vm.metadata.creation_timestamp = Some(Time(created));
            let moment = Moment {
                policy_lifetime: max.map(|h| ("cap".to_string(), hours(h))),
                ..Moment::from(at(now))
            };
            let record = machine(InstanceStatus::Active, VmStatus::Running);
            let plan = vm.plan(&record, moment).unwrap();
            let imposed = plan.imposed_lifetime;
            assert_eq!(
                imposed.as_ref().and_then(|l| l.stage.next_change()),
                wake.map(at),
                "{own:?} {max:?} at {now}"
            );
            if let Some(imposed) = imposed {
                assert_eq!(imposed.by, "GpuPolicy cap");
            }
        }
    }

    fn instance(spec: serde_json::Value, restarted_at: Option<&str>) -> GpuInstance {
        let mut object = serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"region": "us-east", "gpuType": "A100", "osImage": "ubuntu"},
        });
        for (key, value) in spec.as_object().into_iter().flatten() {
            object["spec"][key] = value.clone();
        }
        if let Some(value) = restarted_at {
            object["metadata"]["annotations"] =
                serde_json::json!({ RESTARTED_AT_ANNOTATION: value });
        }
        serde_json::from_value(object).unwrap()
    }

    fn machine(status: InstanceStatus, vm_status: VmStatus) -> Instance {
        Instance {
            instance_id: "vm-1".into(),
            status,
            vm_status,
            // The spec's default.
            public_ip_enabled: true,
            // What `instance` asks for.
            specs: gpucloud_cloud::model::InstanceSpecs {
                gpu_type: "A100".into(),
                gpu_count: 1,
                ..Default::default()
            },
            region: "us-east".into(),
            tier: CloudTier::Advanced,
            ..Instance::default()
        }
    }

    /// Every field of the hardware the spec states is compared, each alternative of a
    /// placement matches, and a restore's hardware is its snapshot's.
    #[test]
    fn a_machine_other_than_the_spec_states_is_named_with_the_fields_that_differ() {
        let adopted = |gpu_type: &str, count: u32, region: &str, tier: CloudTier| Instance {
            specs: gpucloud_cloud::model::InstanceSpecs {
                gpu_type: gpu_type.into(),
                gpu_count: count,
                ..Default::default()
            },
            region: region.into(),
            tier,
            ..machine(InstanceStatus::Active, VmStatus::Running)
        };
        let placement = serde_json::json!({"alternatives": [
            {"gpuTypes": ["H100", "A100"], "gpuCount": 2, "regions": ["us-east", "eu-west"]},
        ]});
        let cases: &[(&str, serde_json::Value, Instance, Option<&[&str]>)] = &[
            (
                "as stated",
                serde_json::json!({}),
                adopted("A100", 1, "us-east", CloudTier::Advanced),
                None,
            ),
            (
                "everything differs",
                serde_json::json!({"gpuType": "H100", "gpuCount": 4}),
                adopted("A6000", 1, "eu-west", CloudTier::Legacy),
                Some(&[
                    "vm-1 is A6000 x1 in eu-west (legacy)",
                    "spec.gpuType is H100",
                    "spec.gpuCount is 4",
                    "spec.region is us-east",
                    "spec.tier is Advanced",
                ]),
            ),
            (
                "a left-out count is one",
                serde_json::json!({}),
                adopted("A100", 8, "us-east", CloudTier::Advanced),
                Some(&["spec.gpuCount is 1"]),
            ),
            (
                "any placement alternative",
                serde_json::json!({"region": null, "gpuType": null, "placement": placement}),
                adopted("A100", 2, "eu-west", CloudTier::Advanced),
                None,
            ),
            (
                "outside every placement alternative",
                serde_json::json!({"region": null, "gpuType": null, "placement": placement}),
                adopted("A100", 1, "eu-west", CloudTier::Advanced),
                Some(&["no spec.placement alternative"]),
            ),
            (
                "the image it booted",
                serde_json::json!({}),
                Instance {
                    image_id: Some("debian-12".into()),
                    ..adopted("A100", 1, "us-east", CloudTier::Advanced)
                },
                Some(&["spec.osImage is ubuntu (it booted debian-12)"]),
            ),
            (
                "the image the spec states",
                serde_json::json!({}),
                Instance {
                    image_id: Some("ubuntu".into()),
                    ..adopted("A100", 1, "us-east", CloudTier::Advanced)
                },
                None,
            ),
            (
                "a restore has its snapshot's hardware",
                serde_json::json!({"source": {"snapshotRef": {"name": "base"}}}),
                adopted("H100", 8, "eu-west", CloudTier::Advanced),
                None,
            ),
        ];
        for (case, spec, record, expected) in cases {
            let object = instance(spec.clone(), None);
            let found = hardware_mismatch(&object.spec, record);
            match (expected, &found) {
                (None, None) => {}
                (Some(parts), Some(message)) => {
                    for part in *parts {
                        assert!(message.contains(part), "{case}: {part:?} in {message}");
                    }
                }
                _ => panic!("{case}: {found:?}"),
            }
            // Managed or observed, such a machine is never Ready, and nothing is done to it.
            let (action, standing) = planned(&object, record);
            let observed = object.observed(record);
            let ready = expected.is_none();
            assert_eq!(standing == "ready", ready, "{case}: {standing}");
            assert_eq!(observed.reason() == reason::AVAILABLE, ready, "{case}");
            if !ready {
                assert_eq!(action, None, "{case}");
                assert_eq!(observed.reason(), reason::SPEC_MISMATCH, "{case}");
            }
        }
    }

    /// A machine a Budget keeps off against the spec's `Running` is not Ready, and says which
    /// Budget keeps it so; one off by its own spec is.
    #[test]
    fn a_machine_kept_off_by_a_budget_is_not_ready() {
        let running = instance(serde_json::json!({}), None);
        let off = machine(InstanceStatus::Shutoff, VmStatus::Stopped);
        let moment = Moment {
            budget_hold: Some(BudgetHold {
                budget: "team".into(),
                power_state: PowerState::Stopped,
            }),
            ..Moment::from(Timestamp::now())
        };
        let plan = running.plan(&off, moment).unwrap();
        assert_eq!(plan.action, None);
        assert_eq!(plan.outcome.reason(), reason::BUDGET_EXCEEDED);
        assert!(
            plan.outcome.message().contains("Budget team"),
            "{}",
            plan.outcome.message()
        );
        let stopped = instance(serde_json::json!({"powerState": "Stopped"}), None);
        assert_eq!(planned(&stopped, &off), (None, "ready"));
    }

    /// An ObserveOnly object whose spec asks for another power state is not Ready: the
    /// operator never applies it, and the message says how to.
    #[test]
    fn an_observed_machine_in_another_power_state_than_the_spec_is_not_ready() {
        let stopped = instance(serde_json::json!({"powerState": "Stopped"}), None);
        let active = machine(InstanceStatus::Active, VmStatus::Running);
        let outcome = stopped.observed(&active);
        assert_eq!(outcome.reason(), reason::NOT_APPLIED);
        assert!(
            outcome.message().contains("ObserveOnly"),
            "{}",
            outcome.message()
        );
        let off = machine(InstanceStatus::Shutoff, VmStatus::Stopped);
        assert_eq!(stopped.observed(&off).reason(), reason::AVAILABLE);
        // On its way there (by someone else's hand): not a difference, nor Ready yet.
        let stopping = machine(InstanceStatus::Stopping, VmStatus::Running);
        assert_eq!(stopped.observed(&stopping).standing(), "progressing");
    }

    #[test]
    fn a_machine_off_as_asked_gets_its_public_ip_and_rules_before_it_is_ready() {
        let off = machine(InstanceStatus::Shutoff, VmStatus::Stopped);
        let without_ip = Instance {
            public_ip_enabled: false,
            ..off.clone()
        };
        let stopped = instance(serde_json::json!({"powerState": "Stopped"}), None);
        assert_eq!(
            planned(&stopped, &without_ip),
            (Some(InstanceAction::PublicIp(true)), "progressing")
        );
        let ruled = instance(
            serde_json::json!({"powerState": "Stopped", "tier": "Legacy",
                "securityRules": [{"protocol": "tcp", "remoteIpPrefix": "10.0.0.0/8"}]}),
            None,
        );
        let legacy_off = Instance {
            tier: CloudTier::Legacy,
            ..off.clone()
        };
        let (action, standing) = planned(&ruled, &legacy_off);
        assert!(
            matches!(action, Some(InstanceAction::AddRule(_))),
            "{action:?}"
        );
        assert_eq!(standing, "progressing");
        assert_eq!(planned(&stopped, &off), (None, "ready"));
    }

    #[test]
    fn an_observed_machine_without_the_public_ip_or_rules_the_spec_states_is_not_ready() {
        let running = machine(InstanceStatus::Active, VmStatus::Running);
        let without_ip = Instance {
            public_ip_enabled: false,
            ..running.clone()
        };
        let spec = instance(serde_json::json!({}), None);
        let outcome = spec.observed(&without_ip);
        assert_eq!(outcome.reason(), reason::NOT_APPLIED);
        assert!(
            outcome.message().contains("spec.publicIp"),
            "{}",
            outcome.message()
        );
        let ruled = instance(
            serde_json::json!({"securityRules": [{"protocol": "tcp", "remoteIpPrefix": "10.0.0.0/8"}]}),
            None,
        );
        let outcome = ruled.observed(&running);
        assert_eq!(outcome.reason(), reason::NOT_APPLIED);
        assert!(
            outcome.message().contains("spec.securityRules"),
            "{}",
            outcome.message()
        );
        assert_eq!(spec.observed(&running).reason(), reason::AVAILABLE);
    }

    /// What kind of outcome a plan ends at, and its action.
    fn planned(object: &GpuInstance, record: &Instance) -> (Option<InstanceAction>, &'static str) {
        planned_at(object, record, Timestamp::now())
    }

    fn planned_at(
        object: &GpuInstance,
        record: &Instance,
        now: Timestamp,
    ) -> (Option<InstanceAction>, &'static str) {
        let plan = object.plan(record, now.into()).unwrap();
        (plan.action, plan.outcome.standing())
    }

    /// A machine created at 09:00 with a two-hour lifetime.
    fn with_lifetime(on_expiry: &str, power_state: &str) -> GpuInstance {
        let mut object = instance(
            serde_json::json!({
                "powerState": power_state,
                "tier": "Legacy",
                "lifetime": {"ttl": "2h", "warnBefore": "30m", "onExpiry": on_expiry},
            }),
            None,
        );
        object.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at("2026-11-27T09:00:00Z")),
        );
        object
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// A machine that is off starts only at a price within `spec.maxHourlyRate`: above it, or
    /// with no price to tell, the plan stands at `PriceAboveLimit` and calls nothing.
    #[test]
    fn a_start_or_restore_above_the_price_limit_is_not_made() {
        use InstanceAction::{Restore, Start};
        let mut stopped = machine(InstanceStatus::Shutoff, VmStatus::Stopped);
        stopped.specs.gpu_type = "H100-80G".into();
        stopped.specs.gpu_count = 1;
        let mut hibernated = stopped.clone();
        hibernated.status = InstanceStatus::Hibernated;
        let price = |rate: f64| Some((rate, "USD".to_string()));
        let table = [
            // (maxHourlyRate, running rate by the price list, machine, action, reason)
            (None, None, &stopped, Some(Start), reason::UPDATING),
            (
                Some(1.0),
                price(2.99),
                &stopped,
                None,
                reason::PRICE_ABOVE_LIMIT,
            ),
            (Some(1.0), None, &stopped, None, reason::PRICE_ABOVE_LIMIT),
            (
                Some(3.0),
                price(2.99),
                &stopped,
                Some(Start),
                reason::UPDATING,
            ),
            (
                Some(2.99),
                price(2.99),
                &stopped,
                Some(Start),
                reason::UPDATING,
            ),
            (
                Some(1.0),
                price(2.99),
                &hibernated,
                None,
                reason::PRICE_ABOVE_LIMIT,
            ),
            (
                Some(3.0),
                price(2.99),
                &hibernated,
                Some(Restore),
                reason::UPDATING,
            ),
        ];
        for (limit, running_rate, record, action, why) in table {
            let object = instance(
                serde_json::json!({"powerState": "Running", "maxHourlyRate": limit, "gpuType": "H100-80G"}),
                None,
            );
            let moment = Moment {
                running_rate,
                ..Moment::from(Timestamp::now())
            };
            let plan = object.plan(record, moment).unwrap();
            let case = format!("{limit:?} {:?} {:?}", record.status, plan.outcome);
            assert_eq!(plan.action, action, "{case}");
            assert_eq!(plan.outcome.reason(), why, "{case}");
            if action.is_none() {
                assert_eq!(plan.outcome.standing(), "stalled", "{case}");
                assert!(
                    plan.outcome.message().contains("spec.maxHourlyRate"),
                    "{case}"
                );
            }
        }
    }

    #[test]
    fn an_ended_lifetime_stops_or_hibernates_the_machine_whatever_power_state_says() {
        use InstanceAction::{Hibernate, Start, Stop};
        // On the tier `with_lifetime` asks for.
        let legacy = |status, vm_status| Instance {
            tier: CloudTier::Legacy,
            ..machine(status, vm_status)
        };
        let running = legacy(InstanceStatus::Active, VmStatus::Running);
        let stopped = legacy(InstanceStatus::Shutoff, VmStatus::Stopped);
        let hibernated = legacy(InstanceStatus::Hibernated, VmStatus::Stopped);
        let table = [
            // (onExpiry, powerState, now, machine, action, standing)
            ("Stop", "Running", "10:59", &running, None, "ready"),
            (
                "Stop",
                "Running",
                "11:00",
                &running,
                Some(Stop),
                "progressing",
            ),
            ("Stop", "Running", "12:00", &stopped, None, "ready"),
            (
                "Hibernate",
                "Running",
                "11:00",
                &running,
                Some(Hibernate),
                "progressing",
            ),
            // A machine off by powerState is never woken by the end of its lifetime.
            ("Stop", "Hibernated", "12:00", &hibernated, None, "ready"),
            ("Hibernate", "Stopped", "12:00", &stopped, None, "ready"),
            // A Delete the API server refused (deletion protection): at least stopped.
            (
                "Delete",
                "Running",
                "12:00",
                &running,
                Some(Stop),
                "progressing",
            ),
            // Before the end, powerState rules.
            (
                "Stop",
                "Running",
                "10:00",
                &stopped,
                Some(Start),
                "progressing",
            ),
            ("Stop", "Stopped", "10:00", &stopped, None, "ready"),
        ];
        for (on_expiry, power, now, record, action, standing) in table {
            let object = with_lifetime(on_expiry, power);
            let now = at(&format!("2026-11-27T{now}:00Z"));
            assert_eq!(
                planned_at(&object, record, now),
                (action, standing),
                "{on_expiry} {power} at {now}"
            );
        }
        // The Ready message says when, and what then happens; after, that it happened.
        let object = with_lifetime("Stop", "Running");
        let before = object
            .plan(&running, at("2026-11-27T10:00:00Z").into())
            .unwrap();
        assert!(
            before
                .outcome
                .message()
                .contains("expires at 2026-11-27T11:00:00Z (onExpiry Stop)"),
            "{}",
            before.outcome.message()
        );
        let after = object
            .plan(&stopped, at("2026-11-27T12:00:00Z").into())
            .unwrap();
        assert!(
            after
                .outcome
                .message()
                .contains("stopped: its lifetime ended at 2026-11-27T11:00:00Z"),
            "{}",
            after.outcome.message()
        );
    }

    #[test]
    fn a_schedule_runs_the_machine_in_its_windows_and_power_state_or_an_ended_lifetime_win() {
        use InstanceAction::{Start, Stop};
        let running = machine(InstanceStatus::Active, VmStatus::Running);
        let stopped = machine(InstanceStatus::Shutoff, VmStatus::Stopped);
        let scheduled = |power: &str, lifetime: Option<&str>| {
            let mut spec = serde_json::json!({
                "powerState": power,
                "schedule": {"timeZone": "Europe/Berlin", "windows": [
                    {"days": ["Mon", "Tue", "Wed", "Thu", "Fri"], "from": "08:00", "to": "20:00"}
                ]},
            });
            if let Some(ttl) = lifetime {
                spec["lifetime"] = serde_json::json!({"ttl": ttl});
            }
            let mut object = instance(spec, None);
            object.metadata.creation_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at("2026-11-27T07:00:00Z")),
            );
            object
        };
        // Friday 2026-11-27: 12:00 CET is 11:00Z, in the window; 21:00 CET is outside.
        let (inside, outside) = ("2026-11-27T11:00:00Z", "2026-11-27T20:00:00Z");
        for (power, lifetime, now, record, action, standing) in [
            (
                "Running",
                None,
                inside,
                &stopped,
                Some(Start),
                "progressing",
            ),
            ("Running", None, inside, &running, None, "ready"),
            (
                "Running",
                None,
                outside,
                &running,
                Some(Stop),
                "progressing",
            ),
            ("Running", None, outside, &stopped, None, "ready"),
            // powerState Stopped keeps it off inside the window.
            ("Stopped", None, inside, &running, Some(Stop), "progressing"),
            // An ended lifetime wins over the window.
            (
                "Running",
                Some("1h"),
                inside,
                &running,
                Some(Stop),
                "progressing",
            ),
        ] {
            let object = scheduled(power, lifetime);
            assert_eq!(
                planned_at(&object, record, at(now)),
                (action, standing),
                "{power} {lifetime:?} at {now}"
            );
        }
        let object = scheduled("Running", None);
        assert_eq!(
            object.next_wake(at(inside)),
            Some(at("2026-11-27T19:00:00Z")),
            "20:00 CET"
        );
        let plan = object.plan(&running, at(inside).into()).unwrap();
        assert!(
            plan.outcome
                .message()
                .contains("the schedule stops it at 2026-11-27T19:00:00Z"),
            "{}",
            plan.outcome.message()
        );
        assert_eq!(scheduled("Stopped", None).next_wake(at(inside)), None);
        // After an ended lifetime the schedule wakes nothing, and one that cannot be read
        // does not keep the lifetime from stopping the machine.
        assert_eq!(scheduled("Running", Some("1h")).next_wake(at(inside)), None);
        let mut unreadable = scheduled("Running", Some("1h"));
        unreadable.spec.schedule.as_mut().unwrap().time_zone = "Mars/Olympus_Mons".into();
        assert_eq!(
            planned_at(&unreadable, &running, at(inside)),
            (Some(Stop), "progressing")
        );
    }

    #[test]
    fn power_state_is_planned_first_one_call_at_a_time() {
        use InstanceStatus::{Active, Creating, Error, Hibernated, Shutoff, Stopping};
        use PowerState::{Hibernated as Hib, Running, Stopped};
        let table = [
            (Running, Creating, None, "progressing"),
            (Running, Stopping, None, "progressing"),
            (Running, Error, None, "stalled"),
            (Running, Shutoff, Some(InstanceAction::Start), "progressing"),
            (
                Running,
                Hibernated,
                Some(InstanceAction::Restore),
                "progressing",
            ),
            (Stopped, Active, Some(InstanceAction::Stop), "progressing"),
            (
                Stopped,
                Hibernated,
                Some(InstanceAction::Restore),
                "progressing",
            ),
            (Stopped, Shutoff, None, "ready"),
            (Hib, Active, Some(InstanceAction::Hibernate), "progressing"),
            (Hib, Shutoff, Some(InstanceAction::Start), "progressing"),
            (Hib, Hibernated, None, "ready"),
            (Running, Active, None, "ready"),
        ];
        for (wanted, state, action, standing) in table {
            let object = instance(serde_json::json!({ "powerState": wanted }), None);
            let record = machine(state.clone(), VmStatus::Running);
            assert_eq!(
                planned(&object, &record),
                (action, standing),
                "{wanted:?} with the machine {state}"
            );
        }
    }

    #[test]
    fn a_running_machine_is_rebooted_once_then_ip_then_rules_then_the_secret() {
        let record = machine(InstanceStatus::Active, VmStatus::Running);
        // Still booting: nothing until the guest runs.
        let booting = machine(InstanceStatus::Active, VmStatus::Stopped);
        assert_eq!(
            planned(&instance(serde_json::json!({}), None), &booting),
            (None, "progressing")
        );
        // A new restartedAt reboots; once recorded, it does not again.
        let mut asked = instance(serde_json::json!({}), Some("2026-11-26T10:00:00Z"));
        assert_eq!(
            planned(&asked, &record),
            (
                Some(InstanceAction::Reboot("2026-11-26T10:00:00Z".into())),
                "progressing"
            )
        );
        asked.status = Some(GpuInstanceStatus::default());
        asked.executed(&InstanceAction::Reboot("2026-11-26T10:00:00Z".into()));
        assert_eq!(planned(&asked, &record), (None, "ready"));
        // The public IP, then rules added before any is removed.
        let private = instance(serde_json::json!({ "publicIp": false }), None);
        assert_eq!(
            planned(&private, &record),
            (Some(InstanceAction::PublicIp(false)), "progressing")
        );
        let rule = spec_rule("10.0.0.0/8", 22);
        let with_rule = instance(serde_json::json!({ "securityRules": [rule] }), None);
        let mut stale = record.clone();
        stale.security_rules = vec![cloud_rule("old", "0.0.0.0/0", 80)];
        assert_eq!(
            planned(&with_rule, &stale),
            (
                Some(InstanceAction::AddRule(to_cloud_rule(&rule))),
                "progressing"
            )
        );
        stale
            .security_rules
            .push(cloud_rule("new", "10.0.0.0/8", 22));
        assert_eq!(
            planned(&with_rule, &stale),
            (
                Some(InstanceAction::RemoveRule("old".into())),
                "progressing"
            )
        );
        // Settled: the connection Secret is written with the Ready outcome.
        let connected = instance(serde_json::json!({ "connectionSecret": "train-ssh" }), None);
        assert_eq!(
            planned(&connected, &record),
            (
                Some(InstanceAction::WriteConnectionSecret("train-ssh".into())),
                "ready"
            )
        );
    }

    #[test]
    fn a_price_limit_below_the_running_rate_is_reported_not_acted_on() {
        let mut record = machine(InstanceStatus::Active, VmStatus::Running);
        record.billing.hourly_rate = 3.0;
        let limited = instance(serde_json::json!({ "maxHourlyRate": 2.0 }), None);
        assert_eq!(planned(&limited, &record), (None, "stalled"));
        let generous = instance(serde_json::json!({ "maxHourlyRate": 5.0 }), None);
        assert_eq!(planned(&generous, &record), (None, "ready"));
    }
}
