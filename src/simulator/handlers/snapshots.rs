//! Snapshots: create, read, restore into a new instance, delete, billing.

use gpucloud_cloud::model;

use super::Call;
use crate::engine::format_time;
use crate::error::ApiError;
use crate::reply::Reply;

/// A reply carrying one snapshot, with its tier (`advanced` when it has none) in the envelope.
fn snapshot_reply(message: &str, snapshot: model::Snapshot) -> Result<Reply, ApiError> {
    let tier = snapshot.tier.clone().unwrap_or(model::Tier::Advanced);
    Ok(Reply::new(message, model::SnapshotBody { snapshot })?.tier(tier))
}

pub(super) fn create_snapshot(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let body: model::CreateSnapshotRequest = call.body()?;
    call.engine(|e, now| {
        snapshot_reply(
            "snapshot is being created",
            e.create_snapshot(id, &body, now)?,
        )
    })
}

pub(super) fn list_snapshots(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.listed("snapshots listed", "snapshots", |e, now| {
        e.list_snapshots(now)
    })
}

pub(super) fn get_snapshot_billing(call: &Call<'_>) -> Result<Reply, ApiError> {
    let snapshot_id = call.query.text("snapshot_id").map(str::to_string);
    call.engine(|e, now| {
        let billing = e.snapshot_billing(snapshot_id.as_deref(), now);
        if let Some(id) = &snapshot_id
            && billing.records.is_empty()
        {
            return Err(ApiError::not_found("snapshot", id));
        }
        Reply::new("snapshot billing retrieved", billing)
    })
}

pub(super) fn get_snapshot(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| snapshot_reply("snapshot retrieved", e.get_snapshot(id, now)?))
}

pub(super) fn restore_snapshot(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let body: model::RestoreSnapshotRequest = call.body()?;
    call.engine(|e, now| {
        let (restored, tier) = e.restore_snapshot(id, &body.new_vm_name, now)?;
        Ok(Reply::new("snapshot restored to a new instance", restored)?
            .tier(tier)
            .timestamp(format_time(now)))
    })
}

pub(super) fn delete_snapshot(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| {
        let (body, tier) = e.delete_snapshot(id, now)?;
        Ok(Reply::new("snapshot deleted", body)?.tier(tier))
    })
}
