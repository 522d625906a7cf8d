//! A GpuInstance's power schedule: the power state `spec.schedule` asks for at a moment, and
//! what the Ready message says of it.

use crate::flow::error::Error;
use gpucloud_api::lifetime::Stage;
use gpucloud_api::schedule::OutsideWindows;
use gpucloud_api::{GpuInstance, PowerState};
use k8s_openapi::jiff::Timestamp;

/// The power state `spec.schedule` asks for at `now` and when that next changes; `None`
/// without a schedule or while `powerState` keeps the machine off. A schedule the operator
/// cannot read (an unknown time zone, overlapping windows) is an invalid spec.
pub(crate) fn scheduled(
    instance: &GpuInstance,
    now: Timestamp,
) -> Result<Option<(PowerState, Option<Timestamp>)>, Error> {
    let Some(schedule) = &instance.spec.schedule else {
        return Ok(None);
    };
    // Read whatever the power state: a schedule that cannot be read is refused now, not once
    // powerState is set back to Running and the machine already exists.
    let standing = schedule.at(now).map_err(Error::InvalidSpec)?;
    if instance.spec.power_state != PowerState::Running {
        return Ok(None);
    }
    let power = match (standing.running, schedule.outside) {
        (true, _) => PowerState::Running,
        (false, OutsideWindows::Stopped) => PowerState::Stopped,
        (false, OutsideWindows::Hibernated) => PowerState::Hibernated,
    };
    Ok(Some((power, standing.next_transition)))
}

/// What the Ready message says of the schedule (nothing once an ended lifetime rules).
pub(crate) fn schedule_note(
    scheduled: Option<(PowerState, Option<Timestamp>)>,
    stage: Option<Stage>,
) -> String {
    match (scheduled, stage) {
        (_, Some(Stage::Expired { .. })) | (None, _) => String::new(),
        (Some((power, Some(next))), _) => {
            let change = if power == PowerState::Running {
                "stops"
            } else {
                "starts"
            };
            format!("; the schedule {change} it at {next}")
        }
        (Some((_, None)), _) => "; the schedule never changes it".into(),
    }
}
