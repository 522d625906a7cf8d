//! Volumes: records, create, resize, clone, attach and detach, and the volume billing report.

use std::collections::BTreeSet;

use gpucloud_cloud::model::{self, Tier, VolumeStatus};

use super::instances::InstanceState;
use super::{
    ApiResult, BillingSpan, Engine, SimTime, format_time, format_time_without_zone, validate_name,
    validate_region, validate_tier,
};
use crate::catalog;
use crate::error::ApiError;

/// Largest volume, in GB.
pub const MAX_VOLUME_GB: u64 = 65_536;

#[derive(Debug, Clone)]
pub struct Volume {
    pub id: String,
    pub name: String,
    pub size: u64,
    pub region: String,
    pub tier: Tier,
    pub volume_type: String,
    pub bootable: bool,
    pub created_at: SimTime,
    /// End of `creating`.
    pub ready_at: SimTime,
    pub instance_id: Option<String>,
    /// Set on the boot volume an instance was created with.
    pub boot_of: Option<String>,
    pub deleted_at: Option<SimTime>,
    pub billing: BillingSpan,
}

impl Volume {
    pub fn is_boot_volume(&self) -> bool {
        self.boot_of.is_some()
    }

    fn status(&self, now: SimTime) -> VolumeStatus {
        if now < self.ready_at {
            VolumeStatus::Creating
        } else if self.instance_id.is_some() {
            VolumeStatus::Attached
        } else {
            VolumeStatus::Available
        }
    }
}

/// Filters of `ListVolumes`, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VolumeFilters {
    pub bootable: Option<bool>,
    pub exclude_os_volumes: bool,
    pub region: Option<String>,
    pub tier: Option<Tier>,
}

/// Filters and page of `GetVolumeBilling`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeBillingFilters {
    /// First millisecond of the start day.
    pub start: Option<SimTime>,
    /// First millisecond after the end day.
    pub end: Option<SimTime>,
    pub size: Option<u64>,
    pub status: Option<String>,
    pub tier: Option<Tier>,
    pub min_minutes: Option<u64>,
    pub max_minutes: Option<u64>,
    pub min_cost: Option<f64>,
    pub max_cost: Option<f64>,
    pub page: u64,
    pub limit: u64,
}

impl Default for VolumeBillingFilters {
    fn default() -> Self {
        VolumeBillingFilters {
            start: None,
            end: None,
            size: None,
            status: None,
            tier: None,
            min_minutes: None,
            max_minutes: None,
            min_cost: None,
            max_cost: None,
            page: 1,
            limit: 20,
        }
    }
}

/// What a new volume is made of.
struct NewVolume<'a> {
    name: &'a str,
    size: u64,
    region: &'a str,
    tier: Tier,
    volume_type: &'a str,
    bootable: bool,
}

/// Values the `status` filter of volume billing accepts.
pub const VOLUME_BILLING_STATUSES: &[&str] = &["creating", "available", "attached", "deleted"];

fn capitalise(value: &str) -> String {
    let mut chars = value.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

impl Engine {
    fn live_volume(&self, id: &str) -> ApiResult<&Volume> {
        self.volumes
            .get(id)
            .filter(|v| v.deleted_at.is_none())
            .ok_or_else(|| ApiError::not_found("volume", id))
    }

    pub fn volume_view(&self, volume: &Volume, now: SimTime) -> model::Volume {
        let vm_status = volume.instance_id.as_ref().and_then(|instance_id| {
            self.instances
                .get(instance_id)
                .map(|i| i.vm_status(now, self.settings.delays.boot))
        });
        model::Volume {
            id: volume.id.clone(),
            name: volume.name.clone(),
            size: volume.size,
            region: volume.region.clone(),
            tier: volume.tier.clone(),
            volume_type: volume.volume_type.clone(),
            status: volume.status(now),
            bootable: volume.bootable,
            created_at: format_time(volume.created_at),
            instance_id: volume.instance_id.clone(),
            vm_status,
        }
    }

    fn new_volume(&mut self, spec: NewVolume<'_>, now: SimTime) -> String {
        let NewVolume {
            name,
            size,
            region,
            tier,
            volume_type,
            bootable,
        } = spec;
        let id = self.new_id("vol");
        let price = catalog::volume_type_price(volume_type).unwrap_or(0.0);
        self.volumes.insert(
            id.clone(),
            Volume {
                id: id.clone(),
                name: name.to_string(),
                size,
                region: region.to_string(),
                tier,
                volume_type: volume_type.to_string(),
                bootable,
                created_at: now,
                ready_at: now + Self::delay(self.settings.delays.volume),
                instance_id: None,
                boot_of: None,
                deleted_at: None,
                billing: BillingSpan::open(now, price * size as f64, &mut self.accrual),
            },
        );
        id
    }

    pub(super) fn add_boot_volume(
        &mut self,
        instance_id: &str,
        instance_name: &str,
        region: &str,
        tier: Tier,
        size: u64,
        now: SimTime,
    ) {
        let name: String = format!("{instance_name}-boot").chars().take(63).collect();
        let id = self.new_volume(
            NewVolume {
                name: &name,
                size,
                region,
                tier,
                volume_type: "NVMe",
                bootable: true,
            },
            now,
        );
        if let Some(volume) = self.volumes.get_mut(&id) {
            volume.instance_id = Some(instance_id.to_string());
            volume.boot_of = Some(instance_id.to_string());
            volume.ready_at = now;
        }
        if let Some(instance) = self.instances.get_mut(instance_id) {
            instance.boot_volume_id = Some(id);
        }
    }

    pub fn create_volume(
        &mut self,
        request: &model::CreateVolumeRequest,
        now: SimTime,
    ) -> ApiResult<model::Volume> {
        self.settle(now);
        validate_name("name", &request.name)?;
        validate_region("region", &request.region)?;
        let tier = validate_tier("tier", request.tier.as_ref())?;
        if request.size == 0 || request.size > MAX_VOLUME_GB {
            return Err(ApiError::validation(format!(
                "size: must be between 1 and {MAX_VOLUME_GB} GB"
            )));
        }
        let volume_type = request.volume_type.as_deref().unwrap_or("NVMe");
        if catalog::volume_type_price(volume_type).is_none() {
            return Err(ApiError::validation(format!(
                "volume_type: unknown volume type {volume_type:?} (known: NVMe, SSD)"
            )));
        }
        self.require_credit(now)?;
        let id = self.new_volume(
            NewVolume {
                name: &request.name,
                size: request.size,
                region: &request.region,
                tier,
                volume_type,
                bootable: request.bootable.unwrap_or(false),
            },
            now,
        );
        let volume = self.live_volume(&id)?;
        Ok(self.volume_view(volume, now))
    }

    pub fn get_volume(&mut self, id: &str, now: SimTime) -> ApiResult<model::Volume> {
        self.settle(now);
        let volume = self.live_volume(id)?;
        Ok(self.volume_view(volume, now))
    }

    pub fn list_volumes(&mut self, filters: &VolumeFilters, now: SimTime) -> model::VolumeList {
        self.settle(now);
        let listed: Vec<&Volume> = self
            .volumes
            .values()
            .filter(|v| self.listed(v.created_at, v.deleted_at, now))
            .collect();
        let tiers_used: BTreeSet<String> = listed.iter().map(|v| v.tier.to_string()).collect();
        let volumes: Vec<model::Volume> = listed
            .into_iter()
            .filter(|v| filters.bootable.is_none_or(|b| v.bootable == b))
            .filter(|v| !(filters.exclude_os_volumes && v.is_boot_volume()))
            .filter(|v| filters.region.as_ref().is_none_or(|r| &v.region == r))
            .filter(|v| filters.tier.as_ref().is_none_or(|t| &v.tier == t))
            .map(|v| self.volume_view(v, now))
            .collect();
        let bootable_count = volumes.iter().filter(|v| v.bootable).count() as u64;
        let total_count = volumes.len() as u64;
        model::VolumeList {
            next_volume_name: self.next_volume_name(),
            total_count,
            bootable_count,
            non_bootable_count: total_count - bootable_count,
            applied_filters: model::AppliedVolumeFilters {
                region: filters.region.clone(),
                tier: filters.tier.as_ref().map(|t| t.to_string()),
                bootable: filters.bootable,
            },
            metadata: model::VolumeListMetadata {
                regions_available: catalog::REGIONS
                    .iter()
                    .map(|(id, _)| id.to_string())
                    .collect(),
                tiers_used: tiers_used.into_iter().collect(),
            },
            volumes,
        }
    }

    /// `volume-N` with the smallest N no live volume is named.
    fn next_volume_name(&self) -> String {
        let used: BTreeSet<&str> = self
            .volumes
            .values()
            .filter(|v| v.deleted_at.is_none())
            .map(|v| v.name.as_str())
            .collect();
        (1u64..)
            .map(|n| format!("volume-{n}"))
            .find(|name| !used.contains(name.as_str()))
            .unwrap_or_default()
    }

    /// Grow only: a smaller size is refused, the same size is a no-op.
    pub fn resize_volume(&mut self, id: &str, size: u64, now: SimTime) -> ApiResult<model::Volume> {
        self.settle(now);
        let current = self.live_volume(id)?.size;
        if size < current {
            return Err(ApiError::validation(format!(
                "size: volumes only grow; {size} GB is smaller than the current {current} GB"
            )));
        }
        if size > MAX_VOLUME_GB {
            return Err(ApiError::validation(format!(
                "size: at most {MAX_VOLUME_GB} GB"
            )));
        }
        if let Some(volume) = self.volumes.get_mut(id)
            && size != volume.size
        {
            // The rate changes from now on; what was accrued before stays as it was.
            let price = catalog::volume_type_price(&volume.volume_type).unwrap_or(0.0);
            volume.size = size;
            volume
                .billing
                .change_rate(now, price * size as f64, &mut self.accrual);
        }
        self.get_volume(id, now)
    }

    pub fn clone_volume(&mut self, id: &str, name: &str, now: SimTime) -> ApiResult<model::Volume> {
        self.settle(now);
        validate_name("name", name)?;
        let source = self.live_volume(id)?.clone();
        if source.status(now) == VolumeStatus::Creating {
            return Err(ApiError::invalid_state(format!(
                "volume {id} is still being created"
            )));
        }
        self.require_credit(now)?;
        let new_id = self.new_volume(
            NewVolume {
                name,
                size: source.size,
                region: &source.region,
                tier: source.tier,
                volume_type: &source.volume_type,
                bootable: source.bootable,
            },
            now,
        );
        self.get_volume(&new_id, now)
    }

    /// An attached volume cannot be deleted.
    pub fn delete_volume(&mut self, id: &str, now: SimTime) -> ApiResult<model::DeletedBody> {
        self.settle(now);
        let volume = self.live_volume(id)?;
        if let Some(instance_id) = &volume.instance_id {
            return Err(ApiError::conflict(format!(
                "volume {id} is attached to instance {instance_id}; detach it first"
            )));
        }
        if let Some(volume) = self.volumes.get_mut(id) {
            volume.deleted_at = Some(now);
            volume.billing.close(now, &mut self.accrual);
        }
        Ok(model::DeletedBody { id: id.to_string() })
    }

    /// Checks a volume can be attached to an instance in `region` (already attached to
    /// `instance_id` counts as attachable: a repeated attach is harmless).
    pub(super) fn check_attachable(
        &self,
        volume_id: &str,
        region: &str,
        instance_id: Option<&str>,
        now: SimTime,
    ) -> ApiResult<()> {
        let volume = self
            .volumes
            .get(volume_id)
            .filter(|v| v.deleted_at.is_none())
            .ok_or_else(|| {
                ApiError::validation(format!("volume_ids: unknown volume {volume_id:?}"))
            })?;
        if volume.region != region {
            return Err(ApiError::validation(format!(
                "volume_ids: volume {volume_id} is in region {}, the instance in {region}",
                volume.region
            )));
        }
        if volume.status(now) == VolumeStatus::Creating {
            return Err(ApiError::invalid_state(format!(
                "volume {volume_id} is still being created"
            )));
        }
        match &volume.instance_id {
            Some(current) if Some(current.as_str()) == instance_id => Ok(()),
            Some(current) => Err(ApiError::conflict(format!(
                "volume {volume_id} is already attached to instance {current}"
            ))),
            None => Ok(()),
        }
    }

    pub fn attach_volumes(
        &mut self,
        instance_id: &str,
        volume_ids: &[String],
        now: SimTime,
    ) -> ApiResult<model::VolumeAttachmentBody> {
        self.settle(now);
        let instance = self.instance_for_volume_change(instance_id, now)?;
        let region = instance.region.clone();
        for volume_id in volume_ids {
            self.check_attachable(volume_id, &region, Some(instance_id), now)?;
        }
        for volume_id in volume_ids {
            self.set_attachment(volume_id, Some(instance_id));
        }
        Ok(self.attachment_body(instance_id, volume_ids, now))
    }

    /// Detaching a volume that is not attached is a no-op; one attached elsewhere, or the
    /// boot volume, is refused.
    pub fn detach_volumes(
        &mut self,
        instance_id: &str,
        volume_ids: &[String],
        now: SimTime,
    ) -> ApiResult<model::VolumeAttachmentBody> {
        self.settle(now);
        self.instance_for_volume_change(instance_id, now)?;
        for volume_id in volume_ids {
            let volume = self.live_volume(volume_id)?;
            if volume.boot_of.as_deref() == Some(instance_id) {
                return Err(ApiError::invalid_state(format!(
                    "volume {volume_id} is the boot volume of instance {instance_id}"
                )));
            }
            if let Some(other) = &volume.instance_id
                && other != instance_id
            {
                return Err(ApiError::conflict(format!(
                    "volume {volume_id} is attached to instance {other}, not {instance_id}"
                )));
            }
        }
        for volume_id in volume_ids {
            self.set_attachment(volume_id, None);
        }
        Ok(self.attachment_body(instance_id, volume_ids, now))
    }

    /// Attaches a data volume to `instance_id`, or detaches it (`None`), keeping the index
    /// of each instance's data volumes.
    pub(super) fn set_attachment(&mut self, volume_id: &str, instance_id: Option<&str>) {
        let Some(volume) = self.volumes.get_mut(volume_id) else {
            return;
        };
        if let Some(previous) = volume.instance_id.take()
            && let Some(attached) = self.data_volumes_of.get_mut(&previous)
        {
            attached.remove(volume_id);
            if attached.is_empty() {
                self.data_volumes_of.remove(&previous);
            }
        }
        if let Some(instance_id) = instance_id {
            volume.instance_id = Some(instance_id.to_string());
            self.data_volumes_of
                .entry(instance_id.to_string())
                .or_default()
                .insert(volume_id.to_string());
        }
    }

    fn instance_for_volume_change(
        &self,
        instance_id: &str,
        now: SimTime,
    ) -> ApiResult<&super::Instance> {
        let instance = self
            .instances
            .get(instance_id)
            .filter(|i| i.is_live(now))
            .ok_or_else(|| ApiError::not_found("instance", instance_id))?;
        if instance.state == InstanceState::Deleting {
            return Err(ApiError::invalid_state(format!(
                "instance {instance_id} is being deleted"
            )));
        }
        Ok(instance)
    }

    fn attachment_body(
        &self,
        instance_id: &str,
        volume_ids: &[String],
        now: SimTime,
    ) -> model::VolumeAttachmentBody {
        model::VolumeAttachmentBody {
            instance_id: instance_id.to_string(),
            volumes: volume_ids
                .iter()
                .filter_map(|id| self.volumes.get(id))
                .map(|v| self.volume_view(v, now))
                .collect(),
        }
    }

    pub fn volume_billing_records(&self, now: SimTime) -> Vec<model::VolumeBillingRecord> {
        self.volume_billing_entries(now)
            .into_iter()
            .map(|(record, _, _)| record)
            .collect()
    }

    /// Every volume's billing record with its start and end time (for date filters).
    fn volume_billing_entries(
        &self,
        now: SimTime,
    ) -> Vec<(model::VolumeBillingRecord, SimTime, SimTime)> {
        self.volumes
            .values()
            .map(|v| {
                let end = v.billing.end.map_or(now, |end| end.min(now));
                let minutes = v.billing.minutes(now);
                let per_minute_rate = v.billing.rate_at(now) / 60.0;
                let status = if v.deleted_at.is_some_and(|d| d <= now) {
                    "deleted".to_string()
                } else {
                    v.status(now).to_string()
                };
                let record = model::VolumeBillingRecord {
                    billing_id: format!("bill-{}", v.id),
                    volume_id: v.id.clone(),
                    volume_name: v.name.clone(),
                    size_gb: v.size,
                    tier: capitalise(v.tier.as_str()),
                    start_time: format_time_without_zone(v.created_at),
                    end_time: format_time_without_zone(end),
                    total_duration_minutes: minutes,
                    per_minute_rate,
                    total_cost: v.billing.cost_of_whole_minutes(now),
                    currency: catalog::CURRENCY.to_string(),
                    status,
                    description: format!(
                        "{} volume {} ({} GB) in {}",
                        v.volume_type, v.name, v.size, v.region
                    ),
                };
                (record, v.created_at, end)
            })
            .collect()
    }

    pub fn volume_billing(
        &mut self,
        filters: &VolumeBillingFilters,
        now: SimTime,
    ) -> model::VolumeBillingPage {
        self.settle(now);
        let records: Vec<model::VolumeBillingRecord> = self
            .volume_billing_entries(now)
            .into_iter()
            .filter(|(_, _, end)| filters.start.is_none_or(|start| *end >= start))
            .filter(|(_, start, _)| filters.end.is_none_or(|end| *start < end))
            .map(|(record, _, _)| record)
            .filter(|r| filters.size.is_none_or(|size| r.size_gb == size))
            .filter(|r| filters.status.as_ref().is_none_or(|s| &r.status == s))
            .filter(|r| {
                filters
                    .tier
                    .as_ref()
                    .is_none_or(|t| r.tier.eq_ignore_ascii_case(t.as_str()))
            })
            .filter(|r| {
                filters
                    .min_minutes
                    .is_none_or(|m| r.total_duration_minutes >= m)
            })
            .filter(|r| {
                filters
                    .max_minutes
                    .is_none_or(|m| r.total_duration_minutes <= m)
            })
            .filter(|r| filters.min_cost.is_none_or(|c| r.total_cost >= c))
            .filter(|r| filters.max_cost.is_none_or(|c| r.total_cost <= c))
            .collect();
        let total = records.len() as u64;
        let total_minutes: u64 = records.iter().map(|r| r.total_duration_minutes).sum();
        let summary = model::VolumeBillingSummary {
            total_minutes,
            active_count: records.iter().filter(|r| r.status != "deleted").count() as u64,
            average_usage: if total == 0 {
                0.0
            } else {
                total_minutes as f64 / total as f64
            },
            total_size_gb: records.iter().map(|r| r.size_gb).sum(),
            total_cost: records.iter().map(|r| r.total_cost).sum(),
        };
        let skip =
            usize::try_from((filters.page - 1).saturating_mul(filters.limit)).unwrap_or(usize::MAX);
        let take = usize::try_from(filters.limit).unwrap_or(usize::MAX);
        model::VolumeBillingPage {
            records: records.into_iter().skip(skip).take(take).collect(),
            summary,
            total,
            page: filters.page,
            limit: filters.limit,
            total_pages: total.div_ceil(filters.limit),
            currency: catalog::CURRENCY.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use gpucloud_cloud::model::VmStatus;

    #[test]
    fn volumes_attach_detach_and_refuse_deleting_while_attached() {
        let mut engine = engine();
        let vm = instance(&mut engine, Tier::Advanced);
        let volume = engine
            .create_volume(
                &volume_request("data", "us-east-1", Tier::Advanced),
                secs(0),
            )
            .unwrap();
        assert_eq!(volume.status, VolumeStatus::Creating);
        assert_eq!(
            engine
                .attach_volumes(&vm, std::slice::from_ref(&volume.id), secs(1))
                .unwrap_err()
                .code(),
            "INVALID_STATE"
        );
        let attached = engine
            .attach_volumes(&vm, std::slice::from_ref(&volume.id), secs(20))
            .unwrap();
        assert_eq!(attached.volumes[0].status, VolumeStatus::Attached);
        assert_eq!(
            attached.volumes[0].instance_id.as_deref(),
            Some(vm.as_str())
        );
        assert_eq!(attached.volumes[0].vm_status, Some(VmStatus::Running));
        assert_eq!(
            engine.get_instance(&vm, secs(20)).unwrap().volume_ids,
            vec![volume.id.clone()]
        );
        assert_eq!(
            engine
                .delete_volume(&volume.id, secs(21))
                .unwrap_err()
                .code(),
            "CONFLICT"
        );
        // A volume in another region cannot be attached.
        let far = engine
            .create_volume(&volume_request("far", "eu-west-1", Tier::Advanced), secs(0))
            .unwrap();
        let err = engine
            .attach_volumes(&vm, std::slice::from_ref(&far.id), secs(22))
            .unwrap_err();
        assert_eq!(err.code(), "VALIDATION_ERROR");
        let detached = engine
            .detach_volumes(&vm, std::slice::from_ref(&volume.id), secs(23))
            .unwrap();
        assert_eq!(detached.volumes[0].status, VolumeStatus::Available);
        assert!(engine.delete_volume(&volume.id, secs(24)).is_ok());
        assert_eq!(
            engine.get_volume(&volume.id, secs(25)).unwrap_err().code(),
            "NOT_FOUND"
        );
    }

    /// A machine's read and its delete find its data volumes through the index by machine;
    /// a list finds them by a pass over every volume. Both agree through attach, move and
    /// detach, and a deleted machine lets go of its volumes, which stay.
    #[test]
    fn a_machines_data_volumes_are_the_same_by_index_and_by_list() {
        let mut engine = engine();
        let first = instance(&mut engine, Tier::Advanced);
        let second = instance(&mut engine, Tier::Advanced);
        let volumes: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|name| {
                engine
                    .create_volume(&volume_request(name, "us-east-1", Tier::Advanced), secs(0))
                    .unwrap()
                    .id
            })
            .collect();
        let agree = |engine: &mut Engine, at: i64| {
            let listed = engine.list_instances(secs(at));
            for vm in [&first, &second] {
                let by_list = &listed
                    .iter()
                    .find(|i| &i.instance_id == vm)
                    .unwrap()
                    .volume_ids;
                let by_index = engine.get_instance(vm, secs(at)).unwrap().volume_ids;
                assert_eq!(&by_index, by_list, "{vm} at {at}");
            }
            listed
        };
        engine.attach_volumes(&first, &volumes, secs(20)).unwrap();
        agree(&mut engine, 20);
        engine
            .detach_volumes(&first, &volumes[..1], secs(21))
            .unwrap();
        engine
            .attach_volumes(&second, &volumes[..1], secs(22))
            .unwrap();
        let listed = agree(&mut engine, 22);
        let of = |vm: &str| {
            &listed
                .iter()
                .find(|i| i.instance_id == vm)
                .unwrap()
                .volume_ids
        };
        assert_eq!(of(&first), &volumes[1..]);
        assert_eq!(of(&second), &volumes[..1]);
        engine.delete_instance(&first, secs(23)).unwrap();
        for volume in &volumes[1..] {
            let record = engine.get_volume(volume, secs(23)).unwrap();
            assert_eq!(record.instance_id, None, "{volume}");
        }
        agree(&mut engine, 23);
        // Let go of, the volumes can go to another machine.
        engine
            .attach_volumes(&second, &volumes[1..], secs(24))
            .unwrap();
        assert_eq!(
            engine.get_instance(&second, secs(24)).unwrap().volume_ids,
            volumes
        );
    }

    #[test]
    fn volumes_and_snapshots_may_share_names() {
        let mut engine = engine();
        let a = engine
            .create_volume(
                &volume_request("same", "us-east-1", Tier::Advanced),
                secs(0),
            )
            .unwrap();
        let b = engine
            .create_volume(
                &volume_request("same", "us-east-1", Tier::Advanced),
                secs(0),
            )
            .unwrap();
        assert_ne!(a.id, b.id);
        let vm = instance(&mut engine, Tier::Advanced);
        let s1 = engine
            .create_snapshot(&vm, &snapshot_request("nightly"), secs(10))
            .unwrap();
        let s2 = engine
            .create_snapshot(&vm, &snapshot_request("nightly"), secs(10))
            .unwrap();
        assert_ne!(s1.snapshot_id, s2.snapshot_id);
        assert_eq!(engine.list_snapshots(secs(11)).len(), 2);
    }

    #[test]
    fn resize_grows_only_and_clone_copies() {
        let mut engine = engine();
        let volume = engine
            .create_volume(&volume_request("data", "us-east-1", Tier::Legacy), secs(0))
            .unwrap();
        let err = engine.resize_volume(&volume.id, 50, secs(5)).unwrap_err();
        assert!(err.to_string().starts_with("size:"));
        assert_eq!(
            engine.resize_volume(&volume.id, 200, secs(5)).unwrap().size,
            200
        );
        let clone = engine.clone_volume(&volume.id, "copy", secs(6)).unwrap();
        assert_eq!(clone.size, 200);
        assert_eq!(clone.name, "copy");
        assert_eq!(clone.tier, Tier::Legacy);
        assert_ne!(clone.id, volume.id);
    }

    #[test]
    fn resize_keeps_the_cost_already_accrued() {
        let mut engine = engine();
        let volume = engine
            .create_volume(
                &volume_request("data", "us-east-1", Tier::Advanced),
                secs(0),
            )
            .unwrap();
        // A balance set half-way through the first hour: what it drains must not jump when
        // the rate changes, whichever window it covers.
        engine.set_balance(50.0, secs(1800));
        let before = engine.balance(secs(3600));
        engine.resize_volume(&volume.id, 400, secs(3600)).unwrap();
        let after = engine.balance(secs(3600));
        assert!((before - after).abs() < 1e-12, "{before} vs {after}");
        // 100 GB of NVMe for the first hour, 400 GB from then on.
        let (small, large) = (100.0 * 0.0002, 400.0 * 0.0002);
        let drained = 50.0 - engine.balance(secs(7200));
        assert!((drained - (small / 2.0 + large)).abs() < 1e-12, "{drained}");
        // The billing record: real minutes, today's rate, each minute at the rate it had.
        let record = engine.volume_billing_records(secs(7200)).remove(0);
        assert_eq!(record.size_gb, 400);
        assert_eq!(record.total_duration_minutes, 120);
        assert!((record.per_minute_rate - large / 60.0).abs() < 1e-15);
        assert!((record.total_cost - (small + large)).abs() < 1e-12);
    }

    #[test]
    fn list_volumes_filters_counts_and_metadata() {
        let mut engine = engine();
        instance(&mut engine, Tier::Advanced); // brings a boot volume
        engine
            .create_volume(
                &volume_request("volume-1", "us-east-1", Tier::Legacy),
                secs(0),
            )
            .unwrap();
        let mut bootable = volume_request("b", "eu-west-1", Tier::Advanced);
        bootable.bootable = Some(true);
        engine.create_volume(&bootable, secs(0)).unwrap();

        let all = engine.list_volumes(&VolumeFilters::default(), secs(30));
        assert_eq!(all.total_count, 3);
        assert_eq!(all.bootable_count, 2);
        assert_eq!(all.non_bootable_count, 1);
        assert_eq!(all.applied_filters, model::AppliedVolumeFilters::default());
        assert_eq!(all.metadata.tiers_used, vec!["advanced", "legacy"]);
        assert_eq!(all.metadata.regions_available.len(), 3);
        assert_eq!(all.next_volume_name, "volume-2");
        let boot = all.volumes.iter().find(|v| v.name == "vm-boot").unwrap();
        assert_eq!(boot.status, VolumeStatus::Attached);

        let no_os = engine.list_volumes(
            &VolumeFilters {
                exclude_os_volumes: true,
                ..VolumeFilters::default()
            },
            secs(30),
        );
        assert_eq!(no_os.total_count, 2);
        assert!(no_os.volumes.iter().all(|v| v.name != "vm-boot"));

        let filtered = engine.list_volumes(
            &VolumeFilters {
                bootable: Some(true),
                region: Some("eu-west-1".to_string()),
                tier: Some(Tier::Advanced),
                exclude_os_volumes: false,
            },
            secs(30),
        );
        assert_eq!(filtered.total_count, 1);
        assert_eq!(filtered.volumes[0].name, "b");
        assert_eq!(
            filtered.applied_filters,
            model::AppliedVolumeFilters {
                region: Some("eu-west-1".to_string()),
                tier: Some("advanced".to_string()),
                bootable: Some(true),
            }
        );
    }

    #[test]
    fn volume_billing_records_filters_summary_and_pages() {
        let mut engine = engine();
        for (i, size) in [10u64, 20, 30, 40, 50].iter().enumerate() {
            let mut request = volume_request(&format!("v{i}"), "us-east-1", Tier::Advanced);
            request.size = *size;
            engine.create_volume(&request, secs(0)).unwrap();
        }
        let v0 = engine
            .list_volumes(&VolumeFilters::default(), secs(1))
            .volumes[0]
            .id
            .clone();
        engine.delete_volume(&v0, secs(600)).unwrap();

        let now = secs(3600);
        let all = engine.volume_billing(&VolumeBillingFilters::default(), now);
        assert_eq!(all.total, 5);
        assert_eq!(all.total_pages, 1);
        let first = all.records.iter().find(|r| r.volume_id == v0).unwrap();
        assert_eq!(first.status, "deleted");
        assert_eq!(first.total_duration_minutes, 10);
        assert_eq!(first.tier, "Advanced");
        assert_eq!(first.start_time, "2026-01-01T00:00:00");
        assert_eq!(first.end_time, "2026-01-01T00:10:00");
        assert!((first.per_minute_rate - 10.0 * 0.0002 / 60.0).abs() < 1e-12);
        assert!((first.total_cost - first.per_minute_rate * 10.0).abs() < 1e-12);
        assert_eq!(all.summary.active_count, 4);
        assert_eq!(all.summary.total_size_gb, 150);
        assert_eq!(all.summary.total_minutes, 10 + 4 * 60);
        assert!((all.summary.average_usage - 250.0 / 5.0).abs() < 1e-9);

        let paged = engine.volume_billing(
            &VolumeBillingFilters {
                page: 2,
                limit: 2,
                ..VolumeBillingFilters::default()
            },
            now,
        );
        assert_eq!(paged.records.len(), 2);
        assert_eq!(paged.total, 5);
        assert_eq!(paged.total_pages, 3);
        // Summary covers every filtered record, not the page.
        assert_eq!(paged.summary.total_size_gb, 150);

        // How many records the default filters changed by `edit` keep.
        let mut kept = |edit: fn(&mut VolumeBillingFilters)| {
            let mut filters = VolumeBillingFilters::default();
            edit(&mut filters);
            engine.volume_billing(&filters, now).total
        };
        const DAY: SimTime = 86_400_000;
        assert_eq!(kept(|f| f.size = Some(30)), 1);
        assert_eq!(kept(|f| f.status = Some("deleted".into())), 1);
        assert_eq!(
            kept(|f| (f.min_minutes, f.max_minutes) = (Some(30), Some(60))),
            4
        );
        // 30, 40 and 50 GB for an hour: 0.006, 0.008 and 0.010.
        assert_eq!(
            kept(|f| (f.min_cost, f.max_cost) = (Some(0.005), Some(1.0))),
            3
        );
        assert_eq!(kept(|f| f.tier = Some(Tier::Legacy)), 0);
        assert_eq!(kept(|f| f.start = Some(T0 + DAY)), 0);
        assert_eq!(kept(|f| (f.start, f.end) = (Some(T0), Some(T0 + DAY))), 5);
    }

    #[test]
    fn list_lag_hides_new_and_keeps_deleted_resources() {
        let mut settings = settings();
        settings.list_lag = std::time::Duration::from_secs(5);
        let mut engine = Engine::new(settings, T0);
        let volume = engine
            .create_volume(&volume_request("v", "us-east-1", Tier::Advanced), secs(0))
            .unwrap();
        assert_eq!(
            engine
                .list_volumes(&VolumeFilters::default(), secs(4))
                .total_count,
            0
        );
        // Reads by id are not lagged.
        assert!(engine.get_volume(&volume.id, secs(1)).is_ok());
        assert_eq!(
            engine
                .list_volumes(&VolumeFilters::default(), secs(5))
                .total_count,
            1
        );
        engine.delete_volume(&volume.id, secs(10)).unwrap();
        assert_eq!(
            engine
                .list_volumes(&VolumeFilters::default(), secs(14))
                .total_count,
            1
        );
        assert_eq!(
            engine
                .list_volumes(&VolumeFilters::default(), secs(15))
                .total_count,
            0
        );
    }

    #[test]
    fn billed_creates_are_refused_once_the_balance_is_spent() {
        let mut engine = engine();
        let vm = instance(&mut engine, Tier::Advanced);
        // L40S at 1.10/h drains 100 USD in about 91 hours.
        let late = secs(100 * 3600);
        assert!(engine.balance(late) < 0.0);
        let err = engine
            .create_volume(&volume_request("v", "us-east-1", Tier::Advanced), late)
            .unwrap_err();
        assert_eq!(err.code(), "INSUFFICIENT_CREDIT");
        assert_eq!(err.status(), 402);
        assert_eq!(
            engine
                .create_snapshot(&vm, &snapshot_request("s"), late)
                .unwrap_err()
                .code(),
            "INSUFFICIENT_CREDIT"
        );
        engine.set_balance(10.0, late);
        assert!(
            engine
                .create_volume(&volume_request("v", "us-east-1", Tier::Advanced), late)
                .is_ok()
        );
    }
}
