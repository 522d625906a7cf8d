//! `Image`: a custom image made from a Snapshot, bootable through `GpuInstance.imageRef`.
//!
//! The cloud removes the images of a snapshot when the snapshot is deleted; an Image whose
//! snapshot went that way says so (reason `SourceDeleted`) instead of reporting an error.

use crate::accounts::account::Account;
use crate::accounts::observer::CloudResource;
use crate::accounts::pricing;
use crate::accounts::records::{cloud_record, found, gone};
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::dereference;
use crate::flow::error::Error;
use crate::flow::kind::{
    KindDeclarations, ManagedKind, Plan, Record, Reference, WhenGone, never_acts,
};
use gpucloud_api::{CloudStatus, Image, ImageStatus, Snapshot};
use gpucloud_cloud::model::{
    CreateImageRequest, Image as CloudImage, ImageStatus as CloudState, PricingBody,
};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use kube::{Api, Resource, ResourceExt};

impl KindDeclarations for Image {
    type Cloud = Images;
    const REFERS_TO: &'static [(&'static str, &'static str)] = &[("Snapshot", "spec.snapshotRef")];

    fn references(&self) -> Vec<Reference> {
        vec![Reference::named("Snapshot", &self.spec.snapshot_ref.name)]
    }

    const WHEN_GONE: WhenGone = WhenGone::Report;
    const BILLED: bool = true;

    fn status_with(&self, common: CloudStatus, record: Option<&Record<Self>>) -> Self::Status {
        let previous = self.status.as_ref();
        match record {
            Some(r) => ImageStatus {
                cloud: common,
                snapshot_id: Some(r.snapshot_id.clone()),
                region: Some(r.region.clone()),
                size: Some(i64::try_from(r.size).unwrap_or(i64::MAX)),
                // From the price list, by `priced`.
                hourly_rate: previous.and_then(|p| p.hourly_rate),
                currency: previous.and_then(|p| p.currency.clone()),
            },
            None => ImageStatus {
                cloud: common,
                ..previous.cloned().unwrap_or_default()
            },
        }
    }

    const PRICED: bool = true;

    /// Its size (its snapshot's, which the cloud copies) times the image price per GB-hour.
    fn priced(&mut self, record: &CloudImage, pricing: &PricingBody) {
        let price = pricing::image_price(pricing);
        if let Some((rate, currency)) = pricing::shown(pricing, price, record.size) {
            let status = self.status.get_or_insert_with(ImageStatus::default);
            status.hourly_rate = Some(rate);
            status.currency = Some(currency);
        }
    }

    /// The rate the price list gave for the image, while it has one.
    fn hourly_cost(&self) -> Option<(f64, String)> {
        let status = self.status.as_ref()?;
        pricing::recorded_cost(&status.cloud, status.hourly_rate, status.currency.as_ref())
    }

    fn observed(&self, record: &CloudImage) -> Outcome {
        match record.status {
            CloudState::Error => Outcome::stalled(
                reason::CLOUD_UNAVAILABLE,
                format!("the cloud reports {} in error", record.id),
            ),
            _ => Outcome::ready(
                reason::AVAILABLE,
                format!(
                    "{} (from {}) is {}",
                    record.id, record.snapshot_id, record.status
                ),
            ),
        }
    }
}

impl ManagedKind for Image {
    /// The cloud id of the snapshot.
    type CreatePlan = String;

    async fn plan_create(&self, cx: &Context<Self>, account: &Account) -> Result<String, Error> {
        let namespace = self.namespace().unwrap_or_default();
        dereference::ready_id::<Snapshot>(
            cx.lookup(account),
            &namespace,
            &self.spec.snapshot_ref.name,
            "Snapshot",
        )
        .await
    }

    /// The snapshot's size (read by id: the plan holds only the id) times the image price per
    /// GB-hour: an image is as large as its snapshot.
    async fn planned_hourly_rate(
        snapshot_id: &String,
        account: &Account,
    ) -> Result<Option<f64>, Error> {
        let snapshot = account.client.get_snapshot(snapshot_id).await?;
        let pricing = account.pricing().await?;
        let price = pricing::required(pricing::image_price(&pricing), "image price")?;
        Ok(Some(pricing::per_hour(snapshot.size, price)))
    }

    async fn create(
        _cx: &Context<Self>,
        account: &Account,
        snapshot_id: String,
        cloud_name: &str,
    ) -> Result<CloudImage, Error> {
        let request = CreateImageRequest {
            snapshot_id,
            name: cloud_name.to_string(),
        };
        Ok(account.client.create_image(&request).await?)
    }

    never_acts!();

    /// Nothing to change in the cloud: the record is reported as it stands.
    fn plan(&self, record: &CloudImage, _resolved: ()) -> Result<Plan<Self::Action>, Error> {
        Ok(Plan::stand(match record.status {
            CloudState::Creating => {
                Outcome::progressing(reason::PROVISIONING, format!("{} is creating", record.id))
            }
            _ => self.observed(record),
        }))
    }

    async fn explain_gone(&self, cx: &Context<Self>, account: &Account) -> Option<Outcome> {
        let image_id = self.status.as_ref()?.cloud.external_id.clone()?;
        let snapshot_name = &self.spec.snapshot_ref.name;
        let namespace = self.namespace().unwrap_or_default();
        let snapshots: Api<Snapshot> = Api::namespaced(cx.client.clone(), &namespace);
        let object_gone = match snapshots.get_opt(snapshot_name).await {
            Ok(found) => found.is_none_or(|s| s.meta().deletion_timestamp.is_some()),
            Err(_) => false,
        };
        let cloud_gone = match self.status.as_ref().and_then(|s| s.snapshot_id.clone()) {
            Some(snapshot_id) => match account.client.list_snapshots().await {
                Ok(list) => !list.snapshots.iter().any(|s| s.snapshot_id == snapshot_id),
                Err(_) => false,
            },
            None => false,
        };
        (object_gone || cloud_gone).then(|| {
            Outcome::stalled(
                reason::SOURCE_DELETED,
                format!(
                    "image {image_id} was removed with its snapshot (Snapshot {snapshot_name:?} was deleted); delete this Image, or recreate the Snapshot and this Image"
                ),
            )
        })
    }
}

// === Cloud calls ===

cloud_record!(CloudImage, id: id, name: name, state: status);

/// The cloud's custom images.
pub struct Images;

impl CloudResource for Images {
    type Record = CloudImage;
    const LABEL: &'static str = "image";

    async fn list(client: CloudClient) -> Result<Vec<CloudImage>, CloudError> {
        Ok(client.list_images().await?.images)
    }

    async fn get(client: CloudClient, id: String) -> Result<Option<CloudImage>, CloudError> {
        found(client.get_image(&id).await)
    }

    async fn delete(client: CloudClient, record: CloudImage) -> Result<(), CloudError> {
        gone(client.delete_image(&record.id).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_api::Managed;

    fn image(rate: Option<f64>) -> Image {
        let mut object: Image = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "Image",
            "metadata": {"name": "golden", "namespace": "ml"},
            "spec": {"snapshotRef": {"name": "epoch-3"}},
        }))
        .unwrap();
        object.status = Some(ImageStatus {
            cloud: CloudStatus {
                external_id: Some("img-1".into()),
                ..CloudStatus::default()
            },
            hourly_rate: rate,
            currency: rate.map(|_| "USD".to_string()),
            ..ImageStatus::default()
        });
        object
    }

    #[test]
    fn the_rate_is_the_size_times_the_image_price() {
        let list = |image_price: f64| PricingBody {
            currency: "USD".into(),
            snapshot_price_per_gb_hour: 0.00005,
            image_price_per_gb_hour: image_price,
            ..PricingBody::default()
        };
        for (before, size, image_price, after) in [
            (None, 750, 0.00005, Some(0.0375)),
            (None, 100, 0.0002, Some(0.02)),
            // No image price in the list, or no size on the record: the rate stays.
            (Some(0.5), 100, 0.0, Some(0.5)),
            (None, 100, 0.0, None),
            (Some(0.5), 0, 0.0002, Some(0.5)),
        ] {
            let case = format!("{before:?} {size} GB at {image_price}");
            let record = CloudImage {
                id: "img-1".into(),
                size,
                ..CloudImage::default()
            };
            let mut object = image(before);
            object.priced(&record, &list(image_price));
            let written = object.with_status(
                object.cloud_status(),
                Some(&record),
                k8s_openapi::jiff::Timestamp::now(),
            );
            let status = written.status.as_ref().unwrap();
            match after {
                Some(rate) => {
                    let shown = status.hourly_rate.expect(&case);
                    assert!((shown - rate).abs() < 1e-12, "{case}: {shown}");
                    assert_eq!(status.currency.as_deref(), Some("USD"), "{case}");
                    assert_eq!(
                        written.hourly_cost(),
                        Some((shown, "USD".to_string())),
                        "{case}"
                    );
                }
                None => assert_eq!(written.hourly_cost(), None, "{case}"),
            }
        }
    }
}
