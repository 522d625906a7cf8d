//! Custom images made from snapshots, and the snapshot-image relations.

use gpucloud_cloud::model::{self, ImageStatus, SnapshotStatus, Tier};

use super::snapshots::Snapshot;
use super::{ApiResult, BillingSpan, Engine, SimTime, format_time, validate_name};
use crate::catalog;
use crate::error::ApiError;

#[derive(Debug, Clone)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub snapshot_id: String,
    pub region: String,
    pub size: u64,
    pub tier: Tier,
    pub status: ImageStatus,
    pub created_at: SimTime,
    pub ready_at: SimTime,
    pub deleted_at: Option<SimTime>,
    pub billing: BillingSpan,
}

impl Image {
    pub(super) fn settle(&mut self, now: SimTime) {
        if self.status == ImageStatus::Creating && now >= self.ready_at {
            self.status = ImageStatus::Available;
        }
    }

    pub fn view(&self) -> model::Image {
        model::Image {
            id: self.id.clone(),
            name: self.name.clone(),
            snapshot_id: self.snapshot_id.clone(),
            region: self.region.clone(),
            size: self.size,
            status: self.status.clone(),
            created_at: format_time(self.created_at),
        }
    }
}

impl Engine {
    fn live_image(&self, id: &str) -> ApiResult<&Image> {
        self.images
            .get(id)
            .filter(|i| i.deleted_at.is_none())
            .ok_or_else(|| ApiError::not_found("image", id))
    }

    /// Only from an `available` snapshot.
    pub fn create_image(
        &mut self,
        request: &model::CreateImageRequest,
        now: SimTime,
    ) -> ApiResult<model::Image> {
        self.settle(now);
        validate_name("name", &request.name)?;
        let snapshot = self
            .snapshots
            .get(&request.snapshot_id)
            .filter(|s| s.deleted_at.is_none())
            .ok_or_else(|| ApiError::not_found("snapshot", &request.snapshot_id))?;
        if snapshot.status != SnapshotStatus::Available {
            return Err(ApiError::invalid_state(format!(
                "snapshot {} is {}; an image needs an available snapshot",
                snapshot.id, snapshot.status
            )));
        }
        self.require_credit(now)?;
        let (region, size, tier) = (
            snapshot.region.clone(),
            snapshot.size,
            snapshot.tier.clone(),
        );
        let id = self.new_id("img");
        let image = Image {
            id: id.clone(),
            name: request.name.clone(),
            snapshot_id: request.snapshot_id.clone(),
            region,
            size,
            tier,
            status: ImageStatus::Creating,
            created_at: now,
            ready_at: now + Self::delay(self.settings.delays.image),
            deleted_at: None,
            billing: BillingSpan::open(
                now,
                catalog::IMAGE_PRICE_PER_GB_HOUR * size as f64,
                &mut self.accrual,
            ),
        };
        let mut image = image;
        image.settle(now);
        let view = image.view();
        self.images.insert(id, image);
        Ok(view)
    }

    pub fn get_image(&mut self, id: &str, now: SimTime) -> ApiResult<model::Image> {
        self.settle(now);
        Ok(self.live_image(id)?.view())
    }

    pub fn list_images(&mut self, now: SimTime) -> Vec<model::Image> {
        self.settle(now);
        self.images
            .values()
            .filter(|i| self.listed(i.created_at, i.deleted_at, now))
            .map(Image::view)
            .collect()
    }

    pub fn delete_image(&mut self, id: &str, now: SimTime) -> ApiResult<model::DeletedBody> {
        self.settle(now);
        self.live_image(id)?;
        if let Some(image) = self.images.get_mut(id) {
            image.deleted_at = Some(now);
            image.billing.close(now, &mut self.accrual);
        }
        Ok(model::DeletedBody { id: id.to_string() })
    }

    fn relation(&self, snapshot: &Snapshot) -> model::SnapshotImageRelation {
        model::SnapshotImageRelation {
            snapshot_id: snapshot.id.clone(),
            snapshot_name: snapshot.name.clone(),
            image_ids: self
                .images
                .values()
                .filter(|i| i.deleted_at.is_none() && i.snapshot_id == snapshot.id)
                .map(|i| i.id.clone())
                .collect(),
        }
    }

    pub fn list_relations(&mut self, now: SimTime) -> Vec<model::SnapshotImageRelation> {
        self.settle(now);
        self.snapshots
            .values()
            .filter(|s| self.listed(s.created_at, s.deleted_at, now))
            .map(|s| self.relation(s))
            .collect()
    }

    pub fn get_relation(
        &mut self,
        snapshot_id: &str,
        now: SimTime,
    ) -> ApiResult<model::SnapshotImageRelation> {
        self.settle(now);
        let snapshot = self.live_snapshot(snapshot_id)?;
        Ok(self.relation(snapshot))
    }
}

#[cfg(test)]
mod tests {
    use gpucloud_cloud::model::BootSource;

    use super::super::test_support::*;
    use super::*;

    #[test]
    fn image_needs_an_available_snapshot() {
        let mut engine = engine();
        let vm = instance(&mut engine, Tier::Advanced);
        let snapshot = engine
            .create_snapshot(&vm, &snapshot_request("s"), secs(10))
            .unwrap();
        let request = model::CreateImageRequest {
            snapshot_id: snapshot.snapshot_id.clone(),
            name: "img".to_string(),
        };
        assert_eq!(
            engine.create_image(&request, secs(11)).unwrap_err().code(),
            "INVALID_STATE"
        );
        let image = engine.create_image(&request, secs(30)).unwrap();
        assert_eq!(
            engine.get_image(&image.id, secs(45)).unwrap().status,
            ImageStatus::Available
        );
        let relation = engine
            .get_relation(&snapshot.snapshot_id, secs(45))
            .unwrap();
        assert_eq!(relation.image_ids, vec![image.id.clone()]);
        // An instance can boot from the custom image.
        let boot = model::CreateInstanceRequest {
            public_ip: Some(false),
            ..model::CreateInstanceRequest::new(
                "from-image",
                "us-east-1",
                "L40S",
                1,
                image.id.clone(),
            )
        };
        let vm2 = engine.create_instance(&boot, secs(46)).unwrap();
        assert_eq!(vm2.boot_source, BootSource::CustomImage);
    }
}
