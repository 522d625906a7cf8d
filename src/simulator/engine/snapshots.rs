//! Snapshots of instances: create, restore into a new instance, delete, snapshot billing.

use gpucloud_cloud::model::{self, BootSource, SnapshotStatus, Tier};

use super::instances::{InstanceBlueprint, InstanceState};
use super::{ApiResult, BillingSpan, Engine, SimTime, format_time, validate_name};
use crate::catalog;
use crate::error::ApiError;

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub id: String,
    pub name: String,
    pub description: String,
    pub labels: Vec<String>,
    pub size: u64,
    pub region: String,
    pub tier: Tier,
    pub specs: model::InstanceSpecs,
    pub instance_id: String,
    pub image_id: Option<String>,
    pub created_at: SimTime,
    pub status: SnapshotStatus,
    pub ready_at: SimTime,
    pub deleted_at: Option<SimTime>,
    pub billing: BillingSpan,
}

impl Snapshot {
    pub(super) fn settle(&mut self, now: SimTime) {
        if self.status == SnapshotStatus::Creating && now >= self.ready_at {
            self.status = SnapshotStatus::Available;
        }
    }

    pub fn view(&self) -> model::Snapshot {
        model::Snapshot {
            snapshot_id: self.id.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            size: self.size,
            status: self.status.clone(),
            instance_id: self.instance_id.clone(),
            region: self.region.clone(),
            created_at: format_time(self.created_at),
            labels: self.labels.clone(),
            tier: Some(self.tier.clone()),
            specs: Some(self.specs.clone()),
        }
    }
}

impl Engine {
    pub(super) fn live_snapshot(&self, id: &str) -> ApiResult<&Snapshot> {
        self.snapshots
            .get(id)
            .filter(|s| s.deleted_at.is_none())
            .ok_or_else(|| ApiError::not_found("snapshot", id))
    }

    /// Only from an `ACTIVE` instance; the snapshot is `creating`, then `available`.
    /// Billing starts at once.
    pub fn create_snapshot(
        &mut self,
        instance_id: &str,
        request: &model::CreateSnapshotRequest,
        now: SimTime,
    ) -> ApiResult<model::Snapshot> {
        self.settle(now);
        validate_name("name", &request.name)?;
        if request.description.chars().count() > 1024 {
            return Err(ApiError::validation(
                "description: at most 1024 characters allowed",
            ));
        }
        for label in &request.labels {
            validate_name("labels", label)?;
        }
        let instance = self
            .instances
            .get(instance_id)
            .filter(|i| i.is_live(now))
            .ok_or_else(|| ApiError::not_found("instance", instance_id))?;
        if instance.state != InstanceState::Active {
            return Err(ApiError::invalid_state(format!(
                "instance {instance_id} must be ACTIVE to take a snapshot; it is {}",
                instance.view(now, self.settings.delays.boot).status
            )));
        }
        self.require_credit(now)?;
        let size = u64::from(instance.specs.storage_gb);
        let snapshot = Snapshot {
            id: String::new(),
            name: request.name.clone(),
            description: request.description.clone(),
            labels: request.labels.clone(),
            size,
            region: instance.region.clone(),
            tier: instance.tier.clone(),
            specs: instance.specs.clone(),
            instance_id: instance_id.to_string(),
            image_id: instance.image_id.clone(),
            created_at: now,
            status: SnapshotStatus::Creating,
            ready_at: now + Self::delay(self.settings.delays.snapshot),
            deleted_at: None,
            billing: BillingSpan::open(
                now,
                catalog::SNAPSHOT_PRICE_PER_GB_HOUR * size as f64,
                &mut self.accrual,
            ),
        };
        let id = self.new_id("snap");
        let snapshot = Snapshot {
            id: id.clone(),
            ..snapshot
        };
        let mut snapshot = snapshot;
        snapshot.settle(now);
        let view = snapshot.view();
        self.snapshots.insert(id, snapshot);
        Ok(view)
    }

    pub fn get_snapshot(&mut self, id: &str, now: SimTime) -> ApiResult<model::Snapshot> {
        self.settle(now);
        Ok(self.live_snapshot(id)?.view())
    }

    pub fn list_snapshots(&mut self, now: SimTime) -> Vec<model::Snapshot> {
        self.settle(now);
        self.snapshots
            .values()
            .filter(|s| self.listed(s.created_at, s.deleted_at, now))
            .map(Snapshot::view)
            .collect()
    }

    /// A new `ACTIVE` instance with the snapshot's GPU type, specs and storage, billed at once.
    pub fn restore_snapshot(
        &mut self,
        snapshot_id: &str,
        new_vm_name: &str,
        now: SimTime,
    ) -> ApiResult<(model::RestoreSnapshotBody, Tier)> {
        self.settle(now);
        validate_name("new_vm_name", new_vm_name)?;
        let snapshot = self.live_snapshot(snapshot_id)?.clone();
        if snapshot.status != SnapshotStatus::Available {
            return Err(ApiError::invalid_state(format!(
                "snapshot {snapshot_id} is {}, not available; restore once it is available",
                snapshot.status
            )));
        }
        let gpu =
            catalog::gpu_type(&snapshot.specs.gpu_type).ok_or_else(|| ApiError::Internal {
                message: format!("snapshot {snapshot_id} has an unknown GPU type"),
            })?;
        self.require_stock(gpu.id, &snapshot.region, snapshot.specs.gpu_count, now)?;
        self.require_credit(now)?;
        let id = self.add_instance(
            InstanceBlueprint {
                name: new_vm_name.to_string(),
                region: snapshot.region.clone(),
                tier: snapshot.tier.clone(),
                gpu,
                gpu_count: snapshot.specs.gpu_count,
                storage_gb: snapshot.specs.storage_gb,
                image_id: snapshot.image_id.clone(),
                boot_source: BootSource::Snapshot,
                public_ip: true,
                snapshot_id: Some(snapshot.id.clone()),
            },
            InstanceState::Active,
            now,
        );
        let instance = self
            .instances
            .get(&id)
            .ok_or_else(|| ApiError::not_found("instance", &id))?;
        let data = self.instance_view(instance, now);
        Ok((
            model::RestoreSnapshotBody {
                data,
                snapshot: model::SnapshotRef {
                    id: snapshot.id,
                    name: snapshot.name,
                },
            },
            snapshot.tier,
        ))
    }

    /// Idempotent: a deleted snapshot deletes again with success. Ends billing and removes
    /// the snapshot's images. A snapshot still `creating` cannot be deleted yet.
    pub fn delete_snapshot(
        &mut self,
        id: &str,
        now: SimTime,
    ) -> ApiResult<(model::DeleteSnapshotBody, Tier)> {
        self.settle(now);
        let snapshot = self
            .snapshots
            .get_mut(id)
            .ok_or_else(|| ApiError::not_found("snapshot", id))?;
        if snapshot.deleted_at.is_none() {
            if snapshot.status == SnapshotStatus::Creating {
                return Err(ApiError::conflict(format!(
                    "snapshot {id} is still being created; delete it once it is available"
                )));
            }
            snapshot.deleted_at = Some(now);
            snapshot.billing.close(now, &mut self.accrual);
            for image in self.images.values_mut() {
                if image.snapshot_id == id && image.deleted_at.is_none() {
                    image.deleted_at = Some(now);
                    image.billing.close(now, &mut self.accrual);
                }
            }
        }
        let snapshot = self
            .snapshots
            .get(id)
            .ok_or_else(|| ApiError::not_found("snapshot", id))?;
        Ok((
            model::DeleteSnapshotBody {
                snapshot_name: snapshot.name.clone(),
            },
            snapshot.tier.clone(),
        ))
    }

    pub fn snapshot_billing(
        &self,
        snapshot_id: Option<&str>,
        now: SimTime,
    ) -> model::SnapshotBillingBody {
        let records: Vec<_> = self
            .snapshots
            .values()
            .filter(|s| snapshot_id.is_none_or(|wanted| s.id == wanted))
            .map(|s| model::SnapshotBillingRecord {
                snapshot_id: s.id.clone(),
                snapshot_name: s.name.clone(),
                size_gb: s.size,
                hourly_rate: s.billing.rate_at(now),
                start_time: format_time(s.billing.start),
                end_time: s.billing.end.map(format_time),
                total_duration_minutes: s.billing.minutes(now),
                total_cost: s.billing.cost_between(s.billing.start, now),
                currency: catalog::CURRENCY.to_string(),
                status: if s.billing.end.is_some() {
                    "ended".to_string()
                } else {
                    "active".to_string()
                },
            })
            .collect();
        model::SnapshotBillingBody {
            total_count: records.len() as u64,
            total_cost: records.iter().map(|r| r.total_cost).sum(),
            records,
            currency: catalog::CURRENCY.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::instances::PowerAction;
    use super::super::test_support::*;
    use super::*;
    use gpucloud_cloud::model::{ImageStatus, InstanceStatus};

    #[test]
    fn snapshot_needs_an_active_instance_and_completes_asynchronously() {
        let mut engine = engine();
        let vm = instance(&mut engine, Tier::Advanced);
        // Still CREATING.
        let err = engine
            .create_snapshot(&vm, &snapshot_request("s"), secs(1))
            .unwrap_err();
        assert_eq!(err.code(), "INVALID_STATE");
        let balance_before = engine.balance(secs(10));
        let snapshot = engine
            .create_snapshot(&vm, &snapshot_request("s"), secs(10))
            .unwrap();
        assert_eq!(snapshot.status, SnapshotStatus::Creating);
        assert_eq!(snapshot.size, 300);
        assert_eq!(snapshot.instance_id, vm);
        // Billing started at once: the snapshot's span is open from creation.
        let billing = engine.snapshot_billing(Some(&snapshot.snapshot_id), secs(3610));
        assert_eq!(billing.records[0].status, "active");
        assert!((billing.total_cost - 300.0 * catalog::SNAPSHOT_PRICE_PER_GB_HOUR).abs() < 1e-9);
        assert!(engine.balance(secs(3610)) < balance_before);
        assert_eq!(
            engine
                .get_snapshot(&snapshot.snapshot_id, secs(29))
                .unwrap()
                .status,
            SnapshotStatus::Creating
        );
        assert_eq!(
            engine
                .get_snapshot(&snapshot.snapshot_id, secs(30))
                .unwrap()
                .status,
            SnapshotStatus::Available
        );
        // A stopped instance cannot be snapshotted either.
        engine
            .power_action(&vm, PowerAction::Stop, secs(40))
            .unwrap();
        let err = engine
            .create_snapshot(&vm, &snapshot_request("s2"), secs(50))
            .unwrap_err();
        assert_eq!(err.code(), "INVALID_STATE");
    }

    #[test]
    fn restore_makes_an_active_instance_inheriting_the_snapshot() {
        let mut engine = engine();
        let vm = instance(&mut engine, Tier::Legacy);
        let snapshot = engine
            .create_snapshot(&vm, &snapshot_request("s"), secs(10))
            .unwrap();
        // Still creating: refused.
        let err = engine
            .restore_snapshot(&snapshot.snapshot_id, "restored", secs(11))
            .unwrap_err();
        assert_eq!(err.code(), "INVALID_STATE");
        assert_eq!(err.status(), 409);
        let err = engine
            .restore_snapshot(&snapshot.snapshot_id, "bad name", secs(40))
            .unwrap_err();
        assert!(err.to_string().starts_with("new_vm_name:"));
        let err = engine
            .restore_snapshot(&snapshot.snapshot_id, "", secs(40))
            .unwrap_err();
        assert!(err.to_string().starts_with("new_vm_name:"));
        let (restored, tier) = engine
            .restore_snapshot(&snapshot.snapshot_id, "restored", secs(40))
            .unwrap();
        assert_eq!(tier, Tier::Legacy);
        let data = restored.data;
        assert_eq!(data.status, InstanceStatus::Active);
        assert_eq!(data.boot_source, BootSource::Snapshot);
        assert_eq!(data.vm_name, "restored");
        assert_eq!(data.specs, snapshot.specs.clone().unwrap());
        assert_eq!(
            data.snapshot_id.as_deref(),
            Some(snapshot.snapshot_id.as_str())
        );
        assert!(data.billing.hourly_rate > 0.0);
        assert_eq!(restored.snapshot.name, "s");
        let billing = engine.instance_billing(Some(&data.instance_id), secs(40));
        assert_eq!(billing.records[0].start_time, format_time(secs(40)));
        assert_eq!(
            engine
                .restore_snapshot("snap-missing", "x", secs(40))
                .unwrap_err()
                .code(),
            "NOT_FOUND"
        );
    }

    #[test]
    fn snapshot_delete_is_idempotent_ends_billing_and_removes_images() {
        let mut engine = engine();
        let vm = instance(&mut engine, Tier::Advanced);
        let snapshot = engine
            .create_snapshot(&vm, &snapshot_request("s"), secs(10))
            .unwrap();
        let id = snapshot.snapshot_id;
        // Creating: not deletable yet.
        assert_eq!(
            engine.delete_snapshot(&id, secs(11)).unwrap_err().code(),
            "CONFLICT"
        );
        let image = engine
            .create_image(
                &model::CreateImageRequest {
                    snapshot_id: id.clone(),
                    name: "img".to_string(),
                },
                secs(30),
            )
            .unwrap();
        assert_eq!(image.status, ImageStatus::Creating);
        let (deleted, _) = engine.delete_snapshot(&id, secs(100)).unwrap();
        assert_eq!(deleted.snapshot_name, "s");
        let (again, _) = engine.delete_snapshot(&id, secs(200)).unwrap();
        assert_eq!(again.snapshot_name, "s");
        assert_eq!(
            engine.get_image(&image.id, secs(101)).unwrap_err().code(),
            "NOT_FOUND"
        );
        assert_eq!(
            engine.get_snapshot(&id, secs(101)).unwrap_err().code(),
            "NOT_FOUND"
        );
        let billing = engine.snapshot_billing(Some(&id), secs(10_000));
        assert_eq!(billing.records[0].status, "ended");
        assert_eq!(
            billing.records[0].end_time.as_deref(),
            Some(format_time(secs(100)).as_str())
        );
        assert_eq!(
            engine
                .delete_snapshot("snap-never", secs(1))
                .unwrap_err()
                .code(),
            "NOT_FOUND"
        );
    }
}
