//! Firewalls: create, read, delete, rules and attachments. Firewalls exist on the
//! `advanced` tier only, so their replies say so.

use gpucloud_cloud::model;

use super::{Call, list};
use crate::engine::Engine;
use crate::error::ApiError;
use crate::reply::Reply;

/// A reply carrying one firewall.
fn firewall_reply(message: &str, firewall: model::Firewall) -> Result<Reply, ApiError> {
    Ok(Reply::new(message, model::FirewallBody { firewall })?.tier(model::Tier::Advanced))
}

pub(super) fn list_firewalls(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.listed("firewalls listed", "firewalls", |e, now| {
        e.list_firewalls(now)
    })
}

pub(super) fn create_firewall(call: &Call<'_>) -> Result<Reply, ApiError> {
    let body: model::CreateFirewallRequest = call.body()?;
    call.engine(|e, now| firewall_reply("firewall created", e.create_firewall(&body, now)?))
}

pub(super) fn list_firewall_protocols(_call: &Call<'_>) -> Result<Reply, ApiError> {
    list("protocols listed", "protocols", Engine::protocols())
}

pub(super) fn list_firewall_attachable_instances(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.engine(|e, now| {
        list(
            "instances a firewall can be attached to listed",
            "instances",
            e.attachable_instances(now),
        )
    })
}

pub(super) fn get_firewall(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| firewall_reply("firewall retrieved", e.get_firewall(id, now)?))
}

pub(super) fn delete_firewall(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| Reply::new("firewall deleted", e.delete_firewall(id, now)?))
}

pub(super) fn add_firewall_rule(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let body: model::NewRule = call.body()?;
    call.engine(|e, now| Reply::new("firewall rule added", e.add_firewall_rule(id, &body, now)?))
}

pub(super) fn remove_firewall_rule(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let rule_id = call.param(1)?;
    call.engine(|e, now| {
        Reply::new(
            "firewall rule removed",
            e.remove_firewall_rule(id, rule_id, now)?,
        )
    })
}

pub(super) fn attach_firewall(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let body: model::AttachFirewallRequest = call.body()?;
    call.engine(|e, now| {
        firewall_reply(
            "firewall attachments set",
            e.attach_firewall(id, &body.vm_ids, now)?,
        )
    })
}
