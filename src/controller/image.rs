//! `Image`: a custom image made from a Snapshot, bootable through `GpuInstance.imageRef`.
//!
//! The cloud removes the images of a snapshot when the snapshot is deleted; an Image whose
//! snapshot went that way says so (reason `SourceDeleted`) instead of reporting an error.

use crate::account::Account;
use crate::conditions::{Outcome, reason};
use crate::context::Context;
use crate::error::Error;
use crate::kind::{ManagedKind, Plan, Record, Reference, WhenGone, never_acts};
use crate::observer::CloudResource;
use crate::records::{cloud_record, found, gone};
use crate::references;
use gpucloud_api::{CloudStatus, Image, ImageStatus, Snapshot};
use gpucloud_cloud::model::{CreateImageRequest, Image as CloudImage, ImageStatus as CloudState};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use kube::{Api, Resource, ResourceExt};

impl ManagedKind for Image {
    type Cloud = Images;
    const REFERS_TO: &'static [(&'static str, &'static str)] = &[("Snapshot", "spec.snapshotRef")];

    fn references(&self) -> Vec<Reference> {
        vec![Reference::named("Snapshot", &self.spec.snapshot_ref.name)]
    }

    const WHEN_GONE: WhenGone = WhenGone::Report;
    const BILLED: bool = true;

    fn status_with(&self, common: CloudStatus, record: Option<&Record<Self>>) -> Self::Status {
        match record {
            Some(r) => ImageStatus {
                cloud: common,
                snapshot_id: Some(r.snapshot_id.clone()),
                region: Some(r.region.clone()),
                size: Some(i64::try_from(r.size).unwrap_or(i64::MAX)),
            },
            None => ImageStatus {
                cloud: common,
                ..self.status.clone().unwrap_or_default()
            },
        }
    }

    /// The cloud id of the snapshot.
    type CreatePlan = String;

    async fn plan_create(&self, cx: &Context<Self>, _account: &Account) -> Result<String, Error> {
        let namespace = self.namespace().unwrap_or_default();
        references::ready_id::<Snapshot>(
            &cx.client,
            &namespace,
            &self.spec.snapshot_ref.name,
            "Snapshot",
        )
        .await
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
