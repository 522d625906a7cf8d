//! The read-only catalogs: GPU stock and specs, regions, OS images.

use super::{Call, list};
use crate::engine::Engine;
use crate::error::ApiError;
use crate::reply::Reply;

pub(super) fn get_gpu_stock(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.listed("GPU stock retrieved", "gpus", |e, now| e.gpu_stock(now))
}

pub(super) fn get_gpu_specs(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.listed("GPU specifications retrieved", "gpus", |e, _| e.gpu_specs())
}

pub(super) fn list_regions(_call: &Call<'_>) -> Result<Reply, ApiError> {
    list("regions listed", "regions", Engine::regions())
}

pub(super) fn list_os_images(_call: &Call<'_>) -> Result<Reply, ApiError> {
    list("OS images listed", "os_images", Engine::os_images())
}
