//! Instances: create, power transitions, public IP, security rules, delete, billing.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use gpucloud_cloud::model::{
    self, BootSource, InstanceStatus, IpStatus, SecurityRule, Tier, VmStatus,
};

use super::{
    Accrual, ApiResult, BillingSpan, Engine, EngineSettings, SimTime, format_time, known_gpu_type,
    validate_name, validate_region, validate_tier,
};
use crate::catalog;
use crate::error::ApiError;

/// Lifecycle state of an instance, including the end of its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    Creating,
    Active,
    Stopping,
    Shutoff,
    Starting,
    Rebooting,
    Hibernating,
    Hibernated,
    Deleting,
    /// Gone: kept only as a tombstone for billing and lagging lists.
    Deleted,
}

impl InstanceState {
    fn wire(self) -> InstanceStatus {
        match self {
            InstanceState::Creating => InstanceStatus::Creating,
            InstanceState::Active => InstanceStatus::Active,
            InstanceState::Stopping => InstanceStatus::Stopping,
            InstanceState::Shutoff => InstanceStatus::Shutoff,
            InstanceState::Starting => InstanceStatus::Starting,
            InstanceState::Rebooting => InstanceStatus::Rebooting,
            InstanceState::Hibernating => InstanceStatus::Hibernating,
            InstanceState::Hibernated => InstanceStatus::Hibernated,
            // A lagging list still shows a deleted instance as it was last seen.
            InstanceState::Deleting | InstanceState::Deleted => InstanceStatus::Deleting,
        }
    }

    /// The share of the running rate billed from the moment the machine reaches this state;
    /// `None` for the states that bill as the state they leave: the intermediate ones,
    /// `DELETING` included (billing ends when the machine is gone). `CREATING` bills the
    /// running rate the span opens with.
    fn billed_share(self, settings: &EngineSettings) -> Option<f64> {
        match self {
            InstanceState::Active => Some(1.0),
            InstanceState::Shutoff => Some(settings.stopped_rate_fraction),
            InstanceState::Hibernated => Some(settings.hibernated_rate_fraction),
            InstanceState::Creating
            | InstanceState::Stopping
            | InstanceState::Starting
            | InstanceState::Rebooting
            | InstanceState::Hibernating
            | InstanceState::Deleting
            | InstanceState::Deleted => None,
        }
    }
}

/// An instance and the bookkeeping of its transitions.
#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    pub name: String,
    pub region: String,
    pub tier: Tier,
    pub specs: model::InstanceSpecs,
    pub image_id: Option<String>,
    pub boot_source: BootSource,
    pub ip_address: String,
    pub public_ip: bool,
    pub security_rules: Vec<SecurityRule>,
    pub ssh_key_ids: Vec<String>,
    pub startup_script_id: Option<String>,
    /// Inline startup script text given at create.
    pub startup_script: Option<String>,
    pub snapshot_id: Option<String>,
    pub created_at: SimTime,
    pub state: InstanceState,
    /// The state the current one turns into, and when.
    pub pending: Option<(SimTime, InstanceState)>,
    /// When the instance last became `ACTIVE` (its power state is `BOOTING` for the boot
    /// delay after that).
    pub active_since: Option<SimTime>,
    /// When the instance is gone (end of `DELETING`).
    pub deleted_at: Option<SimTime>,
    /// The volume it boots from, which goes with it.
    pub boot_volume_id: Option<String>,
    /// What the machine costs per hour while it runs (GPU price times GPU count).
    pub running_rate: f64,
    /// Billed at `running_rate` while it runs, at a share of it while it is off.
    pub billing: BillingSpan,
}

impl Instance {
    pub(super) fn settle(
        &mut self,
        now: SimTime,
        settings: &EngineSettings,
        accrual: &mut Accrual,
    ) {
        while let Some((at, next)) = self.pending {
            if at > now {
                break;
            }
            self.pending = None;
            self.enter(next, at, settings, accrual);
        }
    }

    /// The machine reaches `state` at `at`: the rate billed follows its power state from that
    /// moment.
    fn enter(
        &mut self,
        state: InstanceState,
        at: SimTime,
        settings: &EngineSettings,
        accrual: &mut Accrual,
    ) {
        self.state = state;
        if state == InstanceState::Active {
            self.active_since = Some(at);
        }
        if let Some(share) = state.billed_share(settings) {
            self.billing
                .change_rate(at, self.running_rate * share, accrual);
        }
    }

    /// Present (not yet gone) at `now`.
    pub fn is_live(&self, now: SimTime) -> bool {
        self.deleted_at.is_none_or(|gone| now < gone)
    }

    pub fn vm_status(&self, now: SimTime, boot: Duration) -> VmStatus {
        match self.state {
            InstanceState::Creating => VmStatus::Pending,
            InstanceState::Active => {
                let booted = self
                    .active_since
                    .is_some_and(|since| now >= since + Engine::delay(boot));
                if booted {
                    VmStatus::Running
                } else {
                    VmStatus::Booting
                }
            }
            InstanceState::Shutoff => VmStatus::Stopped,
            InstanceState::Hibernated => VmStatus::Hibernated,
            InstanceState::Stopping
            | InstanceState::Starting
            | InstanceState::Rebooting
            | InstanceState::Hibernating
            | InstanceState::Deleting
            | InstanceState::Deleted => VmStatus::Transitioning,
        }
    }

    pub fn view(&self, now: SimTime, boot: Duration) -> model::Instance {
        self.view_with(now, boot, Vec::new())
    }

    fn view_with(&self, now: SimTime, boot: Duration, volume_ids: Vec<String>) -> model::Instance {
        model::Instance {
            instance_id: self.id.clone(),
            vm_name: self.name.clone(),
            ip_address: self.public_ip.then(|| self.ip_address.clone()),
            ip_status: if self.public_ip {
                IpStatus::Assigned
            } else {
                IpStatus::Unassigned
            },
            billing: model::Billing {
                hourly_rate: self.billing.rate_at(now),
                currency: catalog::CURRENCY.to_string(),
            },
            specs: self.specs.clone(),
            status: self.state.wire(),
            boot_source: self.boot_source.clone(),
            created_at: format_time(self.created_at),
            region: self.region.clone(),
            tier: self.tier.clone(),
            vm_status: self.vm_status(now, boot),
            image_id: self.image_id.clone(),
            public_ip_enabled: self.public_ip,
            security_rules: self.security_rules.clone(),
            ssh_key_ids: self.ssh_key_ids.clone(),
            startup_script_id: self.startup_script_id.clone(),
            volume_ids,
            snapshot_id: self.snapshot_id.clone(),
        }
    }
}

/// What a restore or create needs to build an instance.
pub(super) struct InstanceBlueprint {
    pub name: String,
    pub region: String,
    pub tier: Tier,
    pub gpu: &'static catalog::GpuType,
    pub gpu_count: u32,
    pub storage_gb: u32,
    pub image_id: Option<String>,
    pub boot_source: BootSource,
    pub public_ip: bool,
    pub snapshot_id: Option<String>,
}

/// A power action on an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerAction {
    Start,
    Stop,
    Reboot,
    Hibernate,
    RestoreHibernated,
}

impl PowerAction {
    fn verb(self) -> &'static str {
        match self {
            PowerAction::Start => "start",
            PowerAction::Stop => "stop",
            PowerAction::Reboot => "reboot",
            PowerAction::Hibernate => "hibernate",
            PowerAction::RestoreHibernated => "restore from hibernation",
        }
    }

    /// The state the action needs, the intermediate state, and the final state.
    fn transition(self) -> (InstanceState, InstanceState, InstanceState) {
        use InstanceState::*;
        match self {
            PowerAction::Start => (Shutoff, Starting, Active),
            PowerAction::Stop => (Active, Stopping, Shutoff),
            PowerAction::Reboot => (Active, Rebooting, Active),
            PowerAction::Hibernate => (Active, Hibernating, Hibernated),
            PowerAction::RestoreHibernated => (Hibernated, Active, Active),
        }
    }
}

// === impl Engine: instances ===

impl Engine {
    fn instance(&self, id: &str, now: SimTime) -> ApiResult<&Instance> {
        self.instances
            .get(id)
            .filter(|i| i.is_live(now))
            .ok_or_else(|| ApiError::not_found("instance", id))
    }

    fn instance_mut(&mut self, id: &str, now: SimTime) -> ApiResult<&mut Instance> {
        live_instance_mut(&mut self.instances, id, now)
    }

    /// The wire record of an instance, with the data volumes attached to it.
    pub fn instance_view(&self, instance: &Instance, now: SimTime) -> model::Instance {
        let volume_ids = self
            .data_volumes_of
            .get(&instance.id)
            .into_iter()
            .flatten()
            .filter(|id| {
                self.volumes
                    .get(*id)
                    .is_some_and(|v| v.deleted_at.is_none())
            })
            .cloned()
            .collect();
        instance.view_with(now, self.settings.delays.boot, volume_ids)
    }

    /// GPUs of a type in use in a region.
    fn gpus_in_use(&self, gpu_type: &str, region: &str, now: SimTime) -> u32 {
        self.instances
            .values()
            .filter(|i| i.is_live(now) && i.specs.gpu_type == gpu_type && i.region == region)
            .map(|i| i.specs.gpu_count)
            .sum()
    }

    /// GPUs of a type a region holds in all, in use or free.
    fn gpu_capacity(&self, gpu_type: &str, region: &str) -> u32 {
        self.gpu_capacity
            .get(&(gpu_type.to_string(), region.to_string()))
            .copied()
            .unwrap_or(self.settings.gpu_capacity_per_region)
    }

    /// GPUs of a type free in a region: what a create may take. Creates take from it, and a
    /// machine's GPUs come back once it is gone.
    pub fn gpu_available(&self, gpu_type: &str, region: &str, now: SimTime) -> u32 {
        self.gpu_capacity(gpu_type, region)
            .saturating_sub(self.gpus_in_use(gpu_type, region, now))
    }

    /// Sets how many GPUs of a type are free in a region from now on (the machines holding
    /// some keep them, and give them back when they go).
    pub fn set_gpu_stock(
        &mut self,
        gpu_type: &str,
        region: &str,
        available: u32,
        now: SimTime,
    ) -> ApiResult<()> {
        self.settle(now);
        let gpu = known_gpu_type("gpu_type", gpu_type)?;
        validate_region("region", region)?;
        let capacity = available.saturating_add(self.gpus_in_use(gpu.id, region, now));
        self.gpu_capacity
            .insert((gpu.id.to_string(), region.to_string()), capacity);
        Ok(())
    }

    /// Sets the price per GPU-hour of a type for machines created from now on (and in the
    /// price list, the quotes and the specifications); running machines keep their rate.
    pub fn set_gpu_price(&mut self, gpu_type: &str, price_per_gpu_hour: f64) -> ApiResult<()> {
        let gpu = known_gpu_type("gpu_type", gpu_type)?;
        if !(price_per_gpu_hour.is_finite() && price_per_gpu_hour > 0.0) {
            return Err(ApiError::validation(
                "price_per_gpu_hour: must be a positive number",
            ));
        }
        self.gpu_prices
            .insert(gpu.id.to_string(), price_per_gpu_hour);
        Ok(())
    }

    /// The price per GPU-hour of a type: as set, or the catalog's.
    pub fn gpu_price(&self, gpu: &catalog::GpuType) -> f64 {
        self.gpu_prices
            .get(gpu.id)
            .copied()
            .unwrap_or(gpu.price_per_gpu_hour)
    }

    /// Refuses a create that needs more GPUs than are free: `409 INSUFFICIENT_STOCK`.
    pub(super) fn require_stock(
        &self,
        gpu_type: &str,
        region: &str,
        count: u32,
        now: SimTime,
    ) -> ApiResult<()> {
        let available = self.gpu_available(gpu_type, region, now);
        if available < count {
            return Err(ApiError::InsufficientStock {
                message: format!(
                    "not enough {gpu_type} GPUs in stock in {region}: {count} wanted, {available} available"
                ),
            });
        }
        Ok(())
    }

    pub fn create_instance(
        &mut self,
        request: &model::CreateInstanceRequest,
        now: SimTime,
    ) -> ApiResult<model::Instance> {
        self.settle(now);
        validate_name("name", &request.name)?;
        validate_region("region", &request.region)?;
        let tier = validate_tier("tier", request.tier.as_ref())?;
        let gpu = known_gpu_type("gpu_type", &request.gpu_type)?;
        gpu.check_count(request.gpu_count)
            .map_err(ApiError::validation)?;
        let (boot_source, storage_gb) = if catalog::is_os_image(&request.image_id) {
            (
                BootSource::Image,
                gpu.storage_gb_per_gpu * request.gpu_count,
            )
        } else {
            let image = self
                .images
                .get(&request.image_id)
                .filter(|image| image.deleted_at.is_none())
                .ok_or_else(|| {
                    ApiError::validation(format!(
                        "image_id: {:?} is neither an OS image nor a custom image",
                        request.image_id
                    ))
                })?;
            if image.status != model::ImageStatus::Available {
                return Err(ApiError::invalid_state(format!(
                    "image {} is {}, not available",
                    image.id, image.status
                )));
            }
            if image.region != request.region {
                return Err(ApiError::validation(format!(
                    "image_id: image {} is in region {}, not {}",
                    image.id, image.region, request.region
                )));
            }
            let size = u32::try_from(image.size).unwrap_or(u32::MAX);
            (
                BootSource::CustomImage,
                size.max(gpu.storage_gb_per_gpu * request.gpu_count),
            )
        };
        if request.startup_script.is_some() && request.startup_script_id.is_some() {
            return Err(ApiError::validation(
                "startup_script: give either startup_script or startup_script_id, not both",
            ));
        }
        if let Some(script_id) = &request.startup_script_id
            && self
                .scripts
                .get(script_id)
                .is_none_or(|s| s.deleted_at.is_some())
        {
            return Err(ApiError::validation(format!(
                "startup_script_id: unknown startup script {script_id:?}"
            )));
        }
        for key_id in &request.ssh_key_ids {
            if self
                .ssh_keys
                .get(key_id)
                .is_none_or(|k| k.deleted_at.is_some())
            {
                return Err(ApiError::validation(format!(
                    "ssh_key_ids: unknown SSH key {key_id:?}"
                )));
            }
        }
        for volume_id in &request.volume_ids {
            self.check_attachable(volume_id, &request.region, None, now)?;
        }
        self.require_stock(gpu.id, &request.region, request.gpu_count, now)?;
        self.require_credit(now)?;

        let id = self.add_instance(
            InstanceBlueprint {
                name: request.name.clone(),
                region: request.region.clone(),
                tier,
                gpu,
                gpu_count: request.gpu_count,
                storage_gb,
                image_id: Some(request.image_id.clone()),
                boot_source,
                public_ip: request.public_ip.unwrap_or(true),
                snapshot_id: None,
            },
            InstanceState::Creating,
            now,
        );
        if let Some(instance) = self.instances.get_mut(&id) {
            instance.ssh_key_ids = request.ssh_key_ids.clone();
            instance.startup_script_id = request.startup_script_id.clone();
            instance.startup_script = request.startup_script.clone();
        }
        for volume_id in &request.volume_ids {
            self.set_attachment(volume_id, Some(&id));
        }
        self.instance_by_id_view(&id, now)
    }

    fn instance_by_id_view(&self, id: &str, now: SimTime) -> ApiResult<model::Instance> {
        let instance = self.instance(id, now)?;
        Ok(self.instance_view(instance, now))
    }

    /// Adds an instance and its boot volume; billing starts at `now`.
    pub(super) fn add_instance(
        &mut self,
        blueprint: InstanceBlueprint,
        state: InstanceState,
        now: SimTime,
    ) -> String {
        let id = self.new_id("vm");
        let ip_address = self.new_ip_address();
        let gpu = blueprint.gpu;
        let running_rate = self.gpu_price(gpu) * f64::from(blueprint.gpu_count);
        let (pending, active_since) = match state {
            InstanceState::Creating => (
                Some((
                    now + Self::delay(self.settings.delays.create),
                    InstanceState::Active,
                )),
                None,
            ),
            _ => (None, Some(now)),
        };
        let instance = Instance {
            id: id.clone(),
            name: blueprint.name.clone(),
            region: blueprint.region.clone(),
            tier: blueprint.tier.clone(),
            specs: model::InstanceSpecs {
                gpu_type: gpu.id.to_string(),
                gpu_count: blueprint.gpu_count,
                ram_gb: gpu.ram_gb_per_gpu * blueprint.gpu_count,
                vcpus: gpu.vcpus_per_gpu * blueprint.gpu_count,
                storage_gb: blueprint.storage_gb,
            },
            image_id: blueprint.image_id,
            boot_source: blueprint.boot_source,
            ip_address,
            public_ip: blueprint.public_ip,
            security_rules: Vec::new(),
            ssh_key_ids: Vec::new(),
            startup_script_id: None,
            startup_script: None,
            snapshot_id: blueprint.snapshot_id,
            created_at: now,
            state,
            pending,
            active_since,
            deleted_at: None,
            boot_volume_id: None,
            running_rate,
            billing: BillingSpan::open(now, running_rate, &mut self.accrual),
        };
        if let Some((at, _)) = instance.pending {
            self.transitions.insert((at, id.clone()));
        }
        self.instances.insert(id.clone(), instance);
        self.add_boot_volume(
            &id,
            &blueprint.name,
            &blueprint.region,
            blueprint.tier,
            u64::from(blueprint.storage_gb),
            now,
        );
        id
    }

    pub fn get_instance(&mut self, id: &str, now: SimTime) -> ApiResult<model::Instance> {
        self.settle(now);
        self.instance_by_id_view(id, now)
    }

    pub fn list_instances(&mut self, now: SimTime) -> Vec<model::Instance> {
        self.settle(now);
        // One pass over the volumes instead of one per instance.
        let mut data_volumes: HashMap<&str, Vec<String>> = HashMap::new();
        for volume in self.volumes.values() {
            if volume.deleted_at.is_none()
                && !volume.is_boot_volume()
                && let Some(instance_id) = &volume.instance_id
            {
                data_volumes
                    .entry(instance_id.as_str())
                    .or_default()
                    .push(volume.id.clone());
            }
        }
        let boot = self.settings.delays.boot;
        self.instances
            .values()
            .filter(|i| self.listed(i.created_at, i.deleted_at, now))
            .map(|i| {
                let volume_ids = data_volumes.remove(i.id.as_str()).unwrap_or_default();
                i.view_with(now, boot, volume_ids)
            })
            .collect()
    }

    /// Instances a snapshot can be taken of: `ACTIVE` ones.
    pub fn list_snapshot_eligible(&mut self, now: SimTime) -> Vec<model::Instance> {
        self.list_instances(now)
            .into_iter()
            .filter(|i| i.status == InstanceStatus::Active)
            .collect()
    }

    pub fn power_action(
        &mut self,
        id: &str,
        action: PowerAction,
        now: SimTime,
    ) -> ApiResult<(model::PowerActionBody, Tier)> {
        self.settle(now);
        let delay = Self::delay(self.settings.delays.power_transition);
        let settings = self.settings.clone();
        let instance = live_instance_mut(&mut self.instances, id, now)?;
        if action == PowerAction::RestoreHibernated && instance.tier != Tier::Legacy {
            return Err(ApiError::TierNotSupported {
                message: format!(
                    "restore of a hibernated instance is available on the legacy tier only; instance {} is {}",
                    instance.id, instance.tier
                ),
            });
        }
        let (needs, during, after) = action.transition();
        if instance.state != needs {
            return Err(ApiError::invalid_state(format!(
                "cannot {} instance {}: it is {} and must be {}",
                action.verb(),
                instance.id,
                instance.state.wire(),
                needs.wire()
            )));
        }
        if during == after {
            instance.enter(after, now, &settings, &mut self.accrual);
        } else {
            instance.state = during;
            instance.pending = Some((now + delay, after));
        }
        let answer = (
            model::PowerActionBody {
                vm_id: instance.id.clone(),
                status: instance.state.wire(),
            },
            instance.tier.clone(),
        );
        if during != after {
            self.transitions.insert((now + delay, id.to_string()));
        }
        Ok(answer)
    }

    pub fn set_public_ip(
        &mut self,
        id: &str,
        enabled: bool,
        now: SimTime,
    ) -> ApiResult<model::Instance> {
        self.settle(now);
        let instance = self.instance_mut(id, now)?;
        if instance.state == InstanceState::Deleting {
            return Err(ApiError::invalid_state(format!(
                "instance {id} is being deleted"
            )));
        }
        instance.public_ip = enabled;
        self.instance_by_id_view(id, now)
    }

    pub fn add_security_rule(
        &mut self,
        id: &str,
        rule: &model::NewRule,
        now: SimTime,
    ) -> ApiResult<(model::AddSecurityRuleBody, Tier)> {
        self.settle(now);
        super::validate_rule(rule)?;
        let rule_id = self.new_id("rule");
        let instance = self.instance_mut(id, now)?;
        if instance.state == InstanceState::Deleting {
            return Err(ApiError::invalid_state(format!(
                "instance {id} is being deleted"
            )));
        }
        let rule = super::network::rule_record(rule_id, rule);
        instance.security_rules.push(rule.clone());
        Ok((
            model::AddSecurityRuleBody {
                instance_id: instance.id.clone(),
                rule,
            },
            instance.tier.clone(),
        ))
    }

    /// Legacy tier only; the instance must be `RUNNING`.
    pub fn remove_security_rule(
        &mut self,
        id: &str,
        rule_id: &str,
        now: SimTime,
    ) -> ApiResult<(model::RemoveSecurityRuleBody, Tier)> {
        self.settle(now);
        let boot = self.settings.delays.boot;
        let instance = self.instance_mut(id, now)?;
        if instance.tier != Tier::Legacy {
            return Err(ApiError::TierNotSupported {
                message: format!(
                    "removing a security rule is available on the legacy tier only; instance {} is {}",
                    instance.id, instance.tier
                ),
            });
        }
        let vm_status = instance.vm_status(now, boot);
        if vm_status != VmStatus::Running {
            return Err(ApiError::invalid_state(format!(
                "instance {} must be RUNNING to remove a security rule; it is {vm_status}",
                instance.id
            )));
        }
        let before = instance.security_rules.len();
        instance.security_rules.retain(|rule| rule.id != rule_id);
        if instance.security_rules.len() == before {
            return Err(ApiError::not_found("security rule", rule_id));
        }
        Ok((
            model::RemoveSecurityRuleBody {
                instance_id: instance.id.clone(),
                rule_id: rule_id.to_string(),
            },
            instance.tier.clone(),
        ))
    }

    /// Starts deletion: `DELETING` for the transition delay, then gone. Billing ends when
    /// the instance is gone. Data volumes are detached at once; the boot volume goes with
    /// the instance.
    pub fn delete_instance(
        &mut self,
        id: &str,
        now: SimTime,
    ) -> ApiResult<(model::DeleteInstanceBody, Tier)> {
        self.settle(now);
        let gone_at = now + Self::delay(self.settings.delays.power_transition);
        let instance = live_instance_mut(&mut self.instances, id, now)?;
        let starts = instance.state != InstanceState::Deleting;
        if starts {
            instance.state = InstanceState::Deleting;
            instance.pending = Some((gone_at, InstanceState::Deleted));
            instance.deleted_at = Some(gone_at);
            instance.billing.close(gone_at, &mut self.accrual);
        }
        let body = model::DeleteInstanceBody {
            instance_id: instance.id.clone(),
            status: instance.state.wire(),
        };
        let tier = instance.tier.clone();
        let boot_volume = instance.boot_volume_id.clone();
        if starts {
            self.transitions.insert((gone_at, id.to_string()));
        }
        // Removed by `settle` once the instance is gone; billed until then.
        if let Some(boot) = boot_volume.and_then(|boot| self.volumes.get_mut(&boot))
            && boot.instance_id.as_deref() == Some(id)
        {
            boot.billing.close(gone_at, &mut self.accrual);
        }
        for volume_id in self.data_volumes_of.get(id).cloned().unwrap_or_default() {
            self.set_attachment(&volume_id, None);
        }
        Ok((body, tier))
    }

    pub fn instance_billing(
        &self,
        instance_id: Option<&str>,
        now: SimTime,
    ) -> model::InstanceBillingBody {
        let records: Vec<_> = self
            .instances
            .values()
            .filter(|i| instance_id.is_none_or(|wanted| i.id == wanted))
            .map(|i| model::InstanceBillingRecord {
                instance_id: i.id.clone(),
                vm_name: i.name.clone(),
                gpu_type: i.specs.gpu_type.clone(),
                gpu_count: i.specs.gpu_count,
                tier: i.tier.clone(),
                hourly_rate: i.billing.rate_at(now),
                start_time: format_time(i.billing.start),
                end_time: i.billing.end.filter(|end| *end <= now).map(format_time),
                total_duration_minutes: i.billing.minutes(now),
                total_cost: i.billing.cost_between(i.billing.start, now),
                currency: catalog::CURRENCY.to_string(),
                status: i.state.wire(),
            })
            .collect();
        model::InstanceBillingBody {
            total_count: records.len() as u64,
            total_cost: records.iter().map(|r| r.total_cost).sum(),
            records,
            currency: catalog::CURRENCY.to_string(),
        }
    }
}

/// A live instance of the account, borrowed apart from the rest of the engine (its billing
/// changes are counted in the engine's accrual while it is held).
fn live_instance_mut<'a>(
    instances: &'a mut BTreeMap<String, Instance>,
    id: &str,
    now: SimTime,
) -> ApiResult<&'a mut Instance> {
    instances
        .get_mut(id)
        .filter(|i| i.is_live(now))
        .ok_or_else(|| ApiError::not_found("instance", id))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn create_goes_through_creating_then_booting_then_running() {
        let mut engine = engine();
        let created = engine
            .create_instance(&create_request("a", Tier::Advanced), secs(0))
            .unwrap();
        assert_eq!(created.status, InstanceStatus::Creating);
        assert_eq!(created.vm_status, VmStatus::Pending);
        assert_eq!(created.specs.ram_gb, 240);
        assert_eq!(created.boot_source, BootSource::Image);
        assert_eq!(created.ip_status, IpStatus::Assigned);
        let id = created.instance_id;
        let active = engine.get_instance(&id, secs(10)).unwrap();
        assert_eq!(active.status, InstanceStatus::Active);
        assert_eq!(active.vm_status, VmStatus::Booting);
        let running = engine.get_instance(&id, secs(15)).unwrap();
        assert_eq!(running.vm_status, VmStatus::Running);
    }

    #[test]
    fn power_transitions_pass_through_intermediate_states() {
        let mut engine = engine();
        let id = engine
            .create_instance(&create_request("a", Tier::Legacy), secs(0))
            .unwrap()
            .instance_id;
        let (stop, _) = engine
            .power_action(&id, PowerAction::Stop, secs(20))
            .unwrap();
        assert_eq!(stop.status, InstanceStatus::Stopping);
        assert_eq!(
            engine.get_instance(&id, secs(21)).unwrap().vm_status,
            VmStatus::Transitioning
        );
        let stopped = engine.get_instance(&id, secs(23)).unwrap();
        assert_eq!(stopped.status, InstanceStatus::Shutoff);
        assert_eq!(stopped.vm_status, VmStatus::Stopped);
        // Stopping a stopped instance is an invalid transition.
        let err = engine
            .power_action(&id, PowerAction::Stop, secs(24))
            .unwrap_err();
        assert_eq!(err.code(), "INVALID_STATE");
        let (start, _) = engine
            .power_action(&id, PowerAction::Start, secs(30))
            .unwrap();
        assert_eq!(start.status, InstanceStatus::Starting);
        assert_eq!(
            engine.get_instance(&id, secs(33)).unwrap().status,
            InstanceStatus::Active
        );
        let (reboot, _) = engine
            .power_action(&id, PowerAction::Reboot, secs(40))
            .unwrap();
        assert_eq!(reboot.status, InstanceStatus::Rebooting);
        let (hibernate, _) = engine
            .power_action(&id, PowerAction::Hibernate, secs(50))
            .unwrap();
        assert_eq!(hibernate.status, InstanceStatus::Hibernating);
        let (restored, tier) = engine
            .power_action(&id, PowerAction::RestoreHibernated, secs(60))
            .unwrap();
        assert_eq!(restored.status, InstanceStatus::Active);
        assert_eq!(tier, Tier::Legacy);
    }

    #[test]
    fn restore_hibernated_is_legacy_only() {
        let mut engine = engine();
        let id = engine
            .create_instance(&create_request("a", Tier::Advanced), secs(0))
            .unwrap()
            .instance_id;
        engine
            .power_action(&id, PowerAction::Hibernate, secs(20))
            .unwrap();
        let err = engine
            .power_action(&id, PowerAction::RestoreHibernated, secs(30))
            .unwrap_err();
        assert_eq!(err.code(), "TIER_NOT_SUPPORTED");
        assert_eq!(err.status(), 403);
    }

    #[test]
    fn remove_security_rule_needs_legacy_and_running() {
        let rule = model::NewRule::tcp_ingress("0.0.0.0/0", 22);
        let mut engine = engine();
        let advanced = engine
            .create_instance(&create_request("adv", Tier::Advanced), secs(0))
            .unwrap()
            .instance_id;
        let (added, _) = engine.add_security_rule(&advanced, &rule, secs(1)).unwrap();
        let err = engine
            .remove_security_rule(&advanced, &added.rule.id, secs(30))
            .unwrap_err();
        assert_eq!(err.code(), "TIER_NOT_SUPPORTED");

        let legacy = engine
            .create_instance(&create_request("leg", Tier::Legacy), secs(0))
            .unwrap()
            .instance_id;
        let (added, _) = engine.add_security_rule(&legacy, &rule, secs(1)).unwrap();
        // ACTIVE but still BOOTING: not RUNNING.
        let err = engine
            .remove_security_rule(&legacy, &added.rule.id, secs(12))
            .unwrap_err();
        assert_eq!(err.code(), "INVALID_STATE");
        let (removed, tier) = engine
            .remove_security_rule(&legacy, &added.rule.id, secs(16))
            .unwrap();
        assert_eq!(removed.rule_id, added.rule.id);
        assert_eq!(tier, Tier::Legacy);
        let err = engine
            .remove_security_rule(&legacy, &added.rule.id, secs(17))
            .unwrap_err();
        assert_eq!(err.code(), "NOT_FOUND");
    }

    #[test]
    fn delete_passes_through_deleting_then_the_instance_is_gone() {
        let mut engine = engine();
        let id = engine
            .create_instance(&create_request("a", Tier::Advanced), secs(0))
            .unwrap()
            .instance_id;
        let (deleting, _) = engine.delete_instance(&id, secs(20)).unwrap();
        assert_eq!(deleting.status, InstanceStatus::Deleting);
        assert_eq!(
            engine.get_instance(&id, secs(21)).unwrap().status,
            InstanceStatus::Deleting
        );
        // A repeated delete while DELETING succeeds.
        assert!(engine.delete_instance(&id, secs(22)).is_ok());
        assert_eq!(
            engine.get_instance(&id, secs(23)).unwrap_err().code(),
            "NOT_FOUND"
        );
        assert_eq!(
            engine.delete_instance(&id, secs(24)).unwrap_err().code(),
            "NOT_FOUND"
        );
        assert!(engine.list_instances(secs(24)).is_empty());
        // The boot volume went with the instance, billed until it was gone.
        let volumes = engine.list_volumes(&super::super::VolumeFilters::default(), secs(24));
        assert_eq!(volumes.total_count, 0);
        let boot = &engine.volume_billing_records(secs(24))[0];
        assert_eq!(boot.status, "deleted");
        assert_eq!(boot.end_time, "2026-01-01T00:00:23");
        // Billing ran from create until the instance was gone.
        let billing = engine.instance_billing(Some(&id), secs(100));
        assert_eq!(billing.records[0].total_duration_minutes, 0);
        let expected = 2.0 * 1.89 * 23.0 / 3600.0;
        assert!((billing.total_cost - expected).abs() < 1e-9);
    }

    /// What the instance's record and its billing say at `at`: the body's rate and the
    /// billing record's total.
    fn rate_and_total(engine: &mut Engine, id: &str, at: SimTime) -> (f64, f64) {
        let rate = engine.get_instance(id, at).unwrap().billing.hourly_rate;
        let record = &engine.instance_billing(Some(id), at).records[0];
        assert_eq!(
            record.hourly_rate, rate,
            "the record shows the rate billed now"
        );
        (rate, record.total_cost)
    }

    /// The boot volume's hourly rate (billed alongside the instance, from the balance too).
    fn boot_volume_rate(engine: &Engine, at: SimTime) -> f64 {
        let volumes = engine.volume_billing_records(at);
        assert_eq!(volumes.len(), 1, "only the boot volume");
        volumes[0].per_minute_rate * 60.0
    }

    #[test]
    fn a_machine_that_is_off_bills_its_share_of_the_running_rate() {
        // One L40S: 1.10 per hour while running. Created at 0, ACTIVE at 10; the power
        // action at 20 completes at 23 (a three-second transition).
        let running = 1.10;
        let cases = [
            (PowerAction::Stop, InstanceStatus::Shutoff, 0.1),
            (PowerAction::Hibernate, InstanceStatus::Hibernated, 0.05),
        ];
        for (action, off, share) in cases {
            let mut engine = engine();
            let id = instance(&mut engine, Tier::Advanced);
            assert_eq!(rate_and_total(&mut engine, &id, secs(20)).0, running);
            engine.power_action(&id, action, secs(20)).unwrap();
            // While the transition runs the machine bills as the state it leaves.
            assert_eq!(rate_and_total(&mut engine, &id, secs(22)).0, running);
            assert_eq!(engine.get_instance(&id, secs(23)).unwrap().status, off);
            let (rate, total_when_off) = rate_and_total(&mut engine, &id, secs(23));
            assert!((rate - share * running).abs() < 1e-12, "{action:?}: {rate}");
            assert!((total_when_off - running * 23.0 / 3600.0).abs() < 1e-9);

            // Exactly one simulated hour off: its share of the rate for that hour.
            let balance_when_off = engine.balance(secs(23));
            let (_, total_an_hour_later) = rate_and_total(&mut engine, &id, secs(3623));
            let hour = total_an_hour_later - total_when_off;
            assert!(
                (hour - share * running).abs() < 1e-9,
                "{action:?}: an hour off cost {hour}"
            );
            // The balance drains by that, plus the boot volume, which is billed as before.
            let drained = balance_when_off - engine.balance(secs(3623));
            let expected = share * running + boot_volume_rate(&engine, secs(3623));
            assert!(
                (drained - expected).abs() < 1e-9,
                "{action:?}: drained {drained}, expected {expected}"
            );
        }
    }

    #[test]
    fn billing_follows_the_power_state_across_several_changes() {
        // Two A100-80G (3.78 per hour running), legacy so it can restore from hibernation.
        let running = 2.0 * 1.89;
        let mut engine = engine();
        let id = engine
            .create_instance(&create_request("a", Tier::Legacy), secs(0))
            .unwrap()
            .instance_id;
        let boot_rate = boot_volume_rate(&engine, secs(0));
        // What happens when, and the rate the body shows: full until the machine is off, its
        // share while it is off (STARTING included), full again once ACTIVE. Each action
        // completes three seconds later, except restore-hibernated (at once).
        enum Step {
            Act(PowerAction),
            Delete,
            SetBalance(f64),
            Shows(InstanceStatus, f64),
        }
        use InstanceStatus::*;
        let timeline = [
            (3600, Step::Act(PowerAction::Stop)),
            (3601, Step::Shows(Stopping, 1.0)),
            (3603, Step::Shows(Shutoff, 0.1)),
            (5000, Step::SetBalance(50.0)),
            (7203, Step::Act(PowerAction::Start)),
            (7204, Step::Shows(Starting, 0.1)),
            (7206, Step::Shows(Active, 1.0)),
            (10_806, Step::Act(PowerAction::Hibernate)),
            (10_807, Step::Shows(Hibernating, 1.0)),
            (10_809, Step::Shows(Hibernated, 0.05)),
            (14_409, Step::Act(PowerAction::RestoreHibernated)),
            (14_409, Step::Shows(Active, 1.0)),
            (18_009, Step::Delete),
            (18_010, Step::Shows(Deleting, 1.0)),
        ];
        for (at, step) in timeline {
            match step {
                Step::Act(action) => {
                    engine.power_action(&id, action, secs(at)).unwrap();
                }
                Step::Delete => {
                    engine.delete_instance(&id, secs(at)).unwrap();
                }
                Step::SetBalance(balance) => engine.set_balance(balance, secs(at)),
                Step::Shows(status, share) => {
                    let (rate, _) = rate_and_total(&mut engine, &id, secs(at));
                    assert_eq!(engine.get_instance(&id, secs(at)).unwrap().status, status);
                    assert!(
                        (rate - share * running).abs() < 1e-12,
                        "at {at} ({status}): {rate}"
                    );
                }
            }
        }
        // The pieces: running, stopped, running, hibernated, running until gone at 18012.
        let pieces = [
            (0, 3603, 1.0),
            (3603, 7206, 0.1),
            (7206, 10_809, 1.0),
            (10_809, 14_409, 0.05),
            (14_409, 18_012, 1.0),
        ];
        let cost_of = |from: i64, to: i64| -> f64 {
            pieces
                .iter()
                .map(|(start, end, share)| {
                    let (a, b) = (from.max(*start), to.min(*end));
                    (b - a).max(0) as f64 / 3600.0 * share * running
                })
                .sum()
        };

        // Any window costs the sum of its pieces, however many changes it spans.
        let billing = &engine.instances[&id].billing;
        let windows = [
            (0, 18_012),
            (0, 99_999),
            (1800, 12_000),
            (3603, 7206),
            (5000, 16_000),
            (10_809, 14_409),
            (17_000, 20_000),
        ];
        for (from, to) in windows {
            let cost = billing.cost_between(secs(from), secs(to));
            let expected = cost_of(from, to);
            assert!(
                (cost - expected).abs() < 1e-9,
                "[{from}, {to}]: {cost} instead of {expected}"
            );
        }

        // The billing record's total is the sum of every piece; its rate the last one.
        let record = &engine.instance_billing(Some(&id), secs(20_000)).records[0];
        assert!((record.total_cost - cost_of(0, 18_012)).abs() < 1e-9);
        assert_eq!(record.hourly_rate, running);
        assert_eq!(record.end_time.as_deref(), Some("2026-01-01T05:00:12Z"));

        // The balance set at 5000 drained by the same pieces, plus the boot volume until it
        // went with the instance.
        let drained = 50.0 - engine.balance(secs(20_000));
        let expected = cost_of(5000, 18_012) + boot_rate * (18_012.0 - 5000.0) / 3600.0;
        assert!(
            (drained - expected).abs() < 1e-9,
            "drained {drained}, expected {expected}"
        );
    }

    #[test]
    fn a_machine_deleted_while_off_bills_its_share_until_gone() {
        let running = 1.10;
        let mut engine = engine();
        let id = instance(&mut engine, Tier::Advanced);
        engine
            .power_action(&id, PowerAction::Stop, secs(20))
            .unwrap();
        engine.delete_instance(&id, secs(3623)).unwrap();
        let deleting = engine.get_instance(&id, secs(3624)).unwrap();
        assert_eq!(deleting.status, InstanceStatus::Deleting);
        assert!((deleting.billing.hourly_rate - 0.1 * running).abs() < 1e-12);
        let record = &engine.instance_billing(Some(&id), secs(9999)).records[0];
        let expected = running * 23.0 / 3600.0 + 0.1 * running * 3603.0 / 3600.0;
        assert!((record.total_cost - expected).abs() < 1e-9);
    }

    #[test]
    fn off_machines_bill_what_the_settings_say() {
        let mut engine = Engine::new(
            EngineSettings {
                stopped_rate_fraction: 0.0,
                hibernated_rate_fraction: 1.0,
                ..settings()
            },
            T0,
        );
        let stopped = instance(&mut engine, Tier::Advanced);
        let hibernated = instance(&mut engine, Tier::Advanced);
        engine
            .power_action(&stopped, PowerAction::Stop, secs(20))
            .unwrap();
        engine
            .power_action(&hibernated, PowerAction::Hibernate, secs(20))
            .unwrap();
        let rate = |engine: &mut Engine, id: &str| {
            engine
                .get_instance(id, secs(30))
                .unwrap()
                .billing
                .hourly_rate
        };
        assert_eq!(rate(&mut engine, &stopped), 0.0);
        assert_eq!(rate(&mut engine, &hibernated), 1.10);
    }

    #[test]
    fn public_ip_is_set_to_the_requested_value() {
        let mut engine = engine();
        let id = engine
            .create_instance(&create_request("a", Tier::Advanced), secs(0))
            .unwrap()
            .instance_id;
        let off = engine.set_public_ip(&id, false, secs(1)).unwrap();
        assert_eq!(off.ip_status, IpStatus::Unassigned);
        assert_eq!(off.ip_address, None);
        let off_again = engine.set_public_ip(&id, false, secs(2)).unwrap();
        assert_eq!(off_again.ip_status, IpStatus::Unassigned);
        let on = engine.set_public_ip(&id, true, secs(3)).unwrap();
        assert_eq!(on.ip_status, IpStatus::Assigned);
    }

    #[test]
    fn duplicate_instance_names_are_accepted_and_create_validates() {
        let mut engine = engine();
        let first = engine
            .create_instance(&create_request("same", Tier::Advanced), secs(0))
            .unwrap();
        let second = engine
            .create_instance(&create_request("same", Tier::Advanced), secs(0))
            .unwrap();
        assert_ne!(first.instance_id, second.instance_id);

        let mut bad = create_request("x", Tier::Advanced);
        bad.gpu_type = "TPU".to_string();
        let err = engine.create_instance(&bad, secs(0)).unwrap_err();
        assert!(err.to_string().starts_with("gpu_type:"), "{err}");
        // GPU count is an enumeration: a count the specs catalog does not offer is refused.
        for count in [0, 3, 9] {
            let mut bad = create_request("x", Tier::Advanced);
            bad.gpu_count = count;
            let err = engine.create_instance(&bad, secs(0)).unwrap_err();
            assert_eq!(err.status().as_u16(), 400, "{count}: {err}");
            assert_eq!(
                err.to_string(),
                format!("gpu_count: A100-80G is offered with 1, 2, 4, 8 GPUs, not {count}")
            );
        }
        let mut bad = create_request("x", Tier::Advanced);
        bad.tier = Some(Tier::Other("gold".into()));
        assert!(
            engine
                .create_instance(&bad, secs(0))
                .unwrap_err()
                .to_string()
                .starts_with("tier:")
        );
    }

    #[test]
    fn gpu_stock_limits_creates() {
        let mut engine = engine();
        let mut request = create_request("big", Tier::Advanced);
        request.gpu_count = 8;
        engine.create_instance(&request, secs(0)).unwrap();
        engine.create_instance(&request, secs(0)).unwrap();
        assert_eq!(engine.gpu_available("A100-80G", "us-east-1", secs(0)), 0);
        let err = engine.create_instance(&request, secs(0)).unwrap_err();
        assert_eq!(err.code(), "INSUFFICIENT_STOCK");
        assert_eq!(err.status().as_u16(), 409);
    }
}
