//! Operations on volumes: list, create, resize, clone, delete, types and billing.

use super::CloudClient;
use crate::error::Error;
use crate::model::{
    CloneVolumeRequest, CreateVolumeRequest, DeletedBody, ResizeVolumeRequest, Volume,
    VolumeBillingPage, VolumeBillingQuery, VolumeBody, VolumeList, VolumeListQuery, VolumeTypeList,
};
use crate::routes::Operation;

impl CloudClient {
    pub async fn list_volumes(&self, query: &VolumeListQuery) -> Result<VolumeList, Error> {
        self.fetch_query(Operation::ListVolumes, query).await
    }

    /// Creates a volume. Never retried by the client (see [`Self::create_instance`]).
    pub async fn create_volume(&self, request: &CreateVolumeRequest) -> Result<Volume, Error> {
        let body: VolumeBody = self.send(Operation::CreateVolume, &[], request).await?;
        Ok(body.volume)
    }

    pub async fn get_volume_billing(
        &self,
        query: &VolumeBillingQuery,
    ) -> Result<VolumeBillingPage, Error> {
        self.fetch_query(Operation::GetVolumeBilling, query).await
    }

    pub async fn list_volume_types(&self) -> Result<VolumeTypeList, Error> {
        self.fetch(Operation::ListVolumeTypes, &[]).await
    }

    pub async fn get_volume(&self, volume_id: &str) -> Result<Volume, Error> {
        let body: VolumeBody = self.fetch(Operation::GetVolume, &[volume_id]).await?;
        Ok(body.volume)
    }

    /// Grows a volume to `size` GB.
    pub async fn resize_volume(&self, volume_id: &str, size: u64) -> Result<Volume, Error> {
        let request = ResizeVolumeRequest { size };
        let body: VolumeBody = self
            .send(Operation::ResizeVolume, &[volume_id], &request)
            .await?;
        Ok(body.volume)
    }

    /// Clones a volume into a new one named `name`. Never retried by the client.
    pub async fn clone_volume(&self, volume_id: &str, name: &str) -> Result<Volume, Error> {
        let request = CloneVolumeRequest {
            name: name.to_owned(),
        };
        let body: VolumeBody = self
            .send(Operation::CloneVolume, &[volume_id], &request)
            .await?;
        Ok(body.volume)
    }

    pub async fn delete_volume(&self, volume_id: &str) -> Result<DeletedBody, Error> {
        self.fetch(Operation::DeleteVolume, &[volume_id]).await
    }
}
