//! Instances: deploy, read, power actions, public IP, security rules, volumes and billing.

use gpucloud_cloud::model;

use super::{Call, list};
use crate::engine::{ApiResult, Engine, PowerAction, SimTime, format_time};
use crate::error::ApiError;
use crate::reply::Reply;

/// A reply carrying one instance, with the instance's tier in the envelope.
fn instance_reply(message: &str, instance: model::Instance) -> Result<Reply, ApiError> {
    let tier = instance.tier.clone();
    Ok(Reply::new(message, model::InstanceBody { instance })?.tier(tier))
}

pub(super) fn create_instance(call: &Call<'_>) -> Result<Reply, ApiError> {
    let body: model::CreateInstanceRequest = call.body()?;
    call.engine(|e, now| {
        instance_reply("instance is being created", e.create_instance(&body, now)?)
    })
}

pub(super) fn list_instances(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.listed("instances listed", "instances", |e, now| {
        e.list_instances(now)
    })
}

pub(super) fn get_instance_billing(call: &Call<'_>) -> Result<Reply, ApiError> {
    let instance_id = call.query.text("instance_id").map(str::to_string);
    call.engine(|e, now| {
        e.settle(now);
        if let Some(id) = &instance_id
            && e.instance_billing(Some(id), now).records.is_empty()
        {
            return Err(ApiError::not_found("instance", id));
        }
        Reply::new(
            "instance billing retrieved",
            e.instance_billing(instance_id.as_deref(), now),
        )
    })
}

pub(super) fn list_snapshot_eligible_instances(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.engine(|e, now| {
        list(
            "instances eligible for a snapshot listed",
            "instances",
            e.list_snapshot_eligible(now),
        )
    })
}

pub(super) fn get_instance(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| instance_reply("instance retrieved", e.get_instance(id, now)?))
}

pub(super) fn start_instance(call: &Call<'_>) -> Result<Reply, ApiError> {
    power(call, PowerAction::Start, "instance is starting")
}

pub(super) fn stop_instance(call: &Call<'_>) -> Result<Reply, ApiError> {
    power(call, PowerAction::Stop, "instance is stopping")
}

pub(super) fn reboot_instance(call: &Call<'_>) -> Result<Reply, ApiError> {
    power(call, PowerAction::Reboot, "instance is rebooting")
}

pub(super) fn hibernate_instance(call: &Call<'_>) -> Result<Reply, ApiError> {
    power(call, PowerAction::Hibernate, "instance is hibernating")
}

pub(super) fn restore_hibernated_instance(call: &Call<'_>) -> Result<Reply, ApiError> {
    power(
        call,
        PowerAction::RestoreHibernated,
        "instance restored from hibernation",
    )
}

/// The power actions: the same answer shape, and a timestamp on a restore from hibernation.
fn power(call: &Call<'_>, action: PowerAction, message: &str) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| {
        let (body, tier) = e.power_action(id, action, now)?;
        let reply = Reply::new(message, body)?.tier(tier);
        Ok(if action == PowerAction::RestoreHibernated {
            reply.timestamp(format_time(now))
        } else {
            reply
        })
    })
}

pub(super) fn toggle_public_ip(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let body: model::PublicIpRequest = call.body()?;
    call.engine(|e, now| {
        let instance = e.set_public_ip(id, body.enabled, now)?;
        let message = if body.enabled {
            "public IP enabled"
        } else {
            "public IP disabled"
        };
        instance_reply(message, instance)
    })
}

pub(super) fn add_security_rule(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let body: model::NewRule = call.body()?;
    call.engine(|e, now| {
        let (added, tier) = e.add_security_rule(id, &body, now)?;
        Ok(Reply::new("security rule added", added)?.tier(tier))
    })
}

pub(super) fn remove_security_rule(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let rule_id = call.param(1)?;
    call.engine(|e, now| {
        let (removed, tier) = e.remove_security_rule(id, rule_id, now)?;
        Ok(Reply::new("security rule removed", removed)?.tier(tier))
    })
}

pub(super) fn delete_instance(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| {
        let (body, tier) = e.delete_instance(id, now)?;
        Ok(Reply::new("instance is being deleted", body)?.tier(tier))
    })
}

pub(super) fn list_instance_firewalls(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| {
        list(
            "firewalls of the instance listed",
            "firewalls",
            e.instance_firewalls(id, now)?,
        )
    })
}

pub(super) fn attach_volumes(call: &Call<'_>) -> Result<Reply, ApiError> {
    change_volumes(call, "volumes attached", Engine::attach_volumes)
}

pub(super) fn detach_volumes(call: &Call<'_>) -> Result<Reply, ApiError> {
    change_volumes(call, "volumes detached", Engine::detach_volumes)
}

/// Attach or detach: the same request, the same answer.
fn change_volumes(
    call: &Call<'_>,
    message: &str,
    change: fn(&mut Engine, &str, &[String], SimTime) -> ApiResult<model::VolumeAttachmentBody>,
) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let body: model::VolumeIdsRequest = call.body()?;
    call.engine(|e, now| Reply::new(message, change(e, id, &body.volume_ids, now)?))
}
