//! Operations on snapshots: create, list, read, restore into a new instance, delete, billing.

use super::CloudClient;
use crate::error::Error;
use crate::model::{
    ApiResponse, CreateSnapshotRequest, DeleteSnapshotBody, RestoreSnapshotBody,
    RestoreSnapshotRequest, Snapshot, SnapshotBillingBody, SnapshotBillingQuery, SnapshotBody,
    SnapshotList,
};
use crate::routes::Operation;

calls! {
    fn list_snapshots() -> SnapshotList = fetch(ListSnapshots, []);
    fn get_snapshot_billing(query: &SnapshotBillingQuery) -> SnapshotBillingBody
        = fetch_query(GetSnapshotBilling, [], query);
    fn get_snapshot(snapshot_id: &str) -> Snapshot
        = fetch(GetSnapshot, [snapshot_id]) .snapshot in SnapshotBody;
    /// Deletes a snapshot; deleting one already deleted also succeeds.
    fn delete_snapshot(snapshot_id: &str) -> DeleteSnapshotBody
        = fetch(DeleteSnapshot, [snapshot_id]);
    /// Creates a new instance from a snapshot; the instance is under `body.data`. Never
    /// retried by the client.
    fn restore_snapshot(snapshot_id: &str, new_vm_name: &str) -> ApiResponse<RestoreSnapshotBody>
        = send_response(RestoreSnapshot, [snapshot_id], &RestoreSnapshotRequest {
            new_vm_name: new_vm_name.to_owned(),
        });
}

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
}
