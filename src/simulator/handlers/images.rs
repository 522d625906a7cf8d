//! Custom images and the relation between a snapshot and its image.

use gpucloud_cloud::model;

use super::{Call, list};
use crate::error::ApiError;
use crate::reply::Reply;

pub(super) fn list_images(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.listed("images listed", "images", |e, now| e.list_images(now))
}

pub(super) fn create_image(call: &Call<'_>) -> Result<Reply, ApiError> {
    let body: model::CreateImageRequest = call.body()?;
    call.engine(|e, now| {
        let image = e.create_image(&body, now)?;
        Reply::new("image is being created", model::ImageBody { image })
    })
}

pub(super) fn list_snapshot_image_relations(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.engine(|e, now| {
        list(
            "snapshot-image relations listed",
            "relations",
            e.list_relations(now),
        )
    })
}

pub(super) fn get_snapshot_image_relation(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| {
        let relation = e.get_relation(id, now)?;
        Reply::new(
            "snapshot-image relation retrieved",
            model::RelationBody { relation },
        )
    })
}

pub(super) fn get_image(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| {
        let image = e.get_image(id, now)?;
        Reply::new("image retrieved", model::ImageBody { image })
    })
}

pub(super) fn delete_image(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| Reply::new("image deleted", e.delete_image(id, now)?))
}
