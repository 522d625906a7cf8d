//! Volumes: list with filters, create, resize, clone, delete, types and the volume billing
//! report with its filters.

use gpucloud_cloud::model;

use super::{Call, list};
use crate::engine::{
    Engine, SimTime, VOLUME_BILLING_STATUSES, VolumeBillingFilters, VolumeFilters, validate_region,
};
use crate::error::ApiError;
use crate::reply::Reply;
use crate::request::QueryParams;

/// Query parameters of `ListVolumes`.
pub(super) const LIST_QUERY: &[&str] = &["bootable", "exclude_os_volumes", "region", "tier"];

/// Query parameters of `GetVolumeBilling`.
pub(super) const BILLING_QUERY: &[&str] = &[
    "start_date",
    "end_date",
    "size",
    "status",
    "tier",
    "min_minutes",
    "max_minutes",
    "min_cost",
    "max_cost",
    "page",
    "limit",
];

/// A reply carrying one volume, with the volume's tier in the envelope.
fn volume_reply(message: &str, volume: model::Volume) -> Result<Reply, ApiError> {
    let tier = volume.tier.clone();
    Ok(Reply::new(message, model::VolumeBody { volume })?.tier(tier))
}

pub(super) fn list_volumes(call: &Call<'_>) -> Result<Reply, ApiError> {
    let query = &call.query;
    let region = query.text("region").map(str::to_string);
    if let Some(region) = &region {
        validate_region("region", region)?;
    }
    let filters = VolumeFilters {
        bootable: query.bool("bootable")?,
        exclude_os_volumes: query.bool("exclude_os_volumes")?.unwrap_or(false),
        region,
        tier: query.text("tier").map(parse_tier).transpose()?,
    };
    call.engine(|e, now| Reply::new("volumes listed", e.list_volumes(&filters, now)))
}

pub(super) fn create_volume(call: &Call<'_>) -> Result<Reply, ApiError> {
    let body: model::CreateVolumeRequest = call.body()?;
    call.engine(|e, now| volume_reply("volume is being created", e.create_volume(&body, now)?))
}

pub(super) fn get_volume_billing(call: &Call<'_>) -> Result<Reply, ApiError> {
    let filters = volume_billing_filters(&call.query)?;
    call.engine(|e, now| Reply::new("volume billing retrieved", e.volume_billing(&filters, now)))
}

pub(super) fn list_volume_types(_call: &Call<'_>) -> Result<Reply, ApiError> {
    list(
        "volume types listed",
        "volume_types",
        Engine::volume_types(),
    )
}

pub(super) fn get_volume(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| volume_reply("volume retrieved", e.get_volume(id, now)?))
}

pub(super) fn resize_volume(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let body: model::ResizeVolumeRequest = call.body()?;
    call.engine(|e, now| volume_reply("volume resized", e.resize_volume(id, body.size, now)?))
}

pub(super) fn clone_volume(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let body: model::CloneVolumeRequest = call.body()?;
    call.engine(|e, now| {
        volume_reply(
            "volume is being cloned",
            e.clone_volume(id, &body.name, now)?,
        )
    })
}

pub(super) fn delete_volume(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| Reply::new("volume deleted", e.delete_volume(id, now)?))
}

fn parse_tier(value: &str) -> Result<model::Tier, ApiError> {
    match model::Tier::from_wire(&value.to_ascii_lowercase()) {
        model::Tier::Other(_) => Err(ApiError::validation(format!(
            "tier: {value:?} is not one of legacy, advanced"
        ))),
        tier => Ok(tier),
    }
}

/// `YYYY-MM-DD` to the first millisecond of that day (UTC).
fn parse_date(name: &str, value: &str) -> Result<SimTime, ApiError> {
    let bad = || {
        ApiError::validation(format!(
            "{name}: {value:?} is not a date in the form YYYY-MM-DD"
        ))
    };
    if value.len() != 10 {
        return Err(bad());
    }
    let date: jiff::civil::Date = value.parse().map_err(|_| bad())?;
    date.to_zoned(jiff::tz::TimeZone::UTC)
        .map(|zoned| zoned.timestamp().as_millisecond())
        .map_err(|_| bad())
}

fn volume_billing_filters(query: &QueryParams) -> Result<VolumeBillingFilters, ApiError> {
    const DAY: i64 = 86_400_000;
    let start = query
        .text("start_date")
        .map(|v| parse_date("start_date", v))
        .transpose()?;
    let end_day = query
        .text("end_date")
        .map(|v| parse_date("end_date", v))
        .transpose()?;
    if let (Some(start), Some(end)) = (start, end_day)
        && start > end
    {
        return Err(ApiError::validation(
            "start_date: must not be after end_date",
        ));
    }
    let status = query.text("status").map(str::to_ascii_lowercase);
    if let Some(status) = &status
        && !VOLUME_BILLING_STATUSES.contains(&status.as_str())
    {
        return Err(ApiError::validation(format!(
            "status: {status:?} is not one of {}",
            VOLUME_BILLING_STATUSES.join(", ")
        )));
    }
    let min_minutes = query.unsigned("min_minutes")?;
    let max_minutes = query.unsigned("max_minutes")?;
    ordered(min_minutes, max_minutes, "min_minutes", "max_minutes")?;
    let min_cost = query.number("min_cost")?;
    let max_cost = query.number("max_cost")?;
    ordered(min_cost, max_cost, "min_cost", "max_cost")?;
    let page = query.unsigned("page")?.unwrap_or(1);
    if page == 0 {
        return Err(ApiError::validation("page: pages start at 1"));
    }
    let limit = query.unsigned("limit")?.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::validation("limit: must be between 1 and 100"));
    }
    let size = query.unsigned("size")?;
    if size == Some(0) {
        return Err(ApiError::validation("size: must be at least 1 GB"));
    }
    Ok(VolumeBillingFilters {
        start,
        end: end_day.map(|day| day + DAY),
        size,
        status,
        tier: query.text("tier").map(parse_tier).transpose()?,
        min_minutes,
        max_minutes,
        min_cost,
        max_cost,
        page,
        limit,
    })
}

/// Refuses a range filter whose lower bound is above its upper bound.
fn ordered<T: PartialOrd>(
    min: Option<T>,
    max: Option<T>,
    min_name: &str,
    max_name: &str,
) -> Result<(), ApiError> {
    match (min, max) {
        (Some(min), Some(max)) if min > max => Err(ApiError::validation(format!(
            "{min_name}: must not be greater than {max_name}"
        ))),
        _ => Ok(()),
    }
}
