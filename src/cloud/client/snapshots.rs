//! Operations on snapshots: create, list, read, restore into a new instance, delete, billing.

use super::CloudClient;
use crate::error::Error;
use crate::model::{
    ApiResponse, CreateSnapshotRequest, DeleteSnapshotBody, RestoreSnapshotBody,
    RestoreSnapshotRequest, Snapshot, SnapshotBillingBody, SnapshotBillingQuery, SnapshotBody,
    SnapshotList,
};
use crate::routes::Operation;

impl CloudClient {
    /// Snapshots an `ACTIVE` instance. Never retried by the client.
    pub async fn create_snapshot(
        &self,
        vm_id: &str,
        request: &CreateSnapshotRequest,
    ) -> Result<Snapshot, Error> {
        let response: ApiResponse<SnapshotBody> = self
            .send_response(Operation::CreateSnapshot, &[vm_id], request)
            .await?;
        let mut snapshot = response.body.snapshot;
        // The shown response carries the tier in the envelope, not in the record.
        if snapshot.tier.is_none() {
            snapshot.tier = response.tier;
        }
        Ok(snapshot)
    }

    pub async fn list_snapshots(&self) -> Result<SnapshotList, Error> {
        self.fetch(Operation::ListSnapshots, &[]).await
    }

    pub async fn get_snapshot_billing(
        &self,
        query: &SnapshotBillingQuery,
    ) -> Result<SnapshotBillingBody, Error> {
        self.fetch_query(Operation::GetSnapshotBilling, query).await
    }

    pub async fn get_snapshot(&self, snapshot_id: &str) -> Result<Snapshot, Error> {
        let body: SnapshotBody = self.fetch(Operation::GetSnapshot, &[snapshot_id]).await?;
        Ok(body.snapshot)
    }

    /// Creates a new instance from a snapshot; the instance is under `body.data`. Never
    /// retried by the client.
    pub async fn restore_snapshot(
        &self,
        snapshot_id: &str,
        new_vm_name: &str,
    ) -> Result<ApiResponse<RestoreSnapshotBody>, Error> {
        let request = RestoreSnapshotRequest {
            new_vm_name: new_vm_name.to_owned(),
        };
        self.send_response(Operation::RestoreSnapshot, &[snapshot_id], &request)
            .await
    }

    /// Deletes a snapshot; deleting one already deleted also succeeds.
    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<DeleteSnapshotBody, Error> {
        self.fetch(Operation::DeleteSnapshot, &[snapshot_id]).await
    }
}
