//! Operations on custom images and on the relation between a snapshot and its image.

use super::CloudClient;
use crate::error::Error;
use crate::model::{
    CreateImageRequest, DeletedBody, Image, ImageBody, ImageList, RelationBody, RelationList,
    SnapshotImageRelation,
};
use crate::routes::Operation;

impl CloudClient {
    pub async fn list_images(&self) -> Result<ImageList, Error> {
        self.fetch(Operation::ListImages, &[]).await
    }

    /// Creates a custom image from an available snapshot. Never retried by the client.
    pub async fn create_image(&self, request: &CreateImageRequest) -> Result<Image, Error> {
        let body: ImageBody = self.send(Operation::CreateImage, &[], request).await?;
        Ok(body.image)
    }

    pub async fn list_snapshot_image_relations(&self) -> Result<RelationList, Error> {
        self.fetch(Operation::ListSnapshotImageRelations, &[]).await
    }

    pub async fn get_snapshot_image_relation(
        &self,
        snapshot_id: &str,
    ) -> Result<SnapshotImageRelation, Error> {
        let op = Operation::GetSnapshotImageRelation;
        let body: RelationBody = self.fetch(op, &[snapshot_id]).await?;
        Ok(body.relation)
    }

    pub async fn get_image(&self, image_id: &str) -> Result<Image, Error> {
        let body: ImageBody = self.fetch(Operation::GetImage, &[image_id]).await?;
        Ok(body.image)
    }

    pub async fn delete_image(&self, image_id: &str) -> Result<DeletedBody, Error> {
        self.fetch(Operation::DeleteImage, &[image_id]).await
    }
}
