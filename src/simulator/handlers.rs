//! One function per operation of the route table: decode the request, run the engine,
//! shape the reply with the shared model types.

use axum::body::Bytes;
use gpucloud_cloud::model::{self, success_code};
use gpucloud_cloud::routes::Operation;

use crate::engine::{
    Engine, SimTime, VOLUME_BILLING_STATUSES, VolumeBillingFilters, VolumeFilters, format_time,
    validate_region,
};
use crate::error::ApiError;
use crate::server::{AppState, Caller, QueryParams, Reply, parse_body};

/// A request as the handlers see it, after authentication and fault injection.
pub struct Request<'a> {
    pub operation: Operation,
    pub params: Vec<String>,
    pub query: Option<&'a str>,
    pub body: &'a Bytes,
    /// The accepted API key the request carried (never echoed back).
    pub api_key: &'a str,
    /// Whose key it is: the account the request acts on.
    pub caller: Caller,
}

impl Request<'_> {
    fn param(&self, index: usize) -> Result<&str, ApiError> {
        self.params
            .get(index)
            .map(String::as_str)
            .ok_or_else(|| ApiError::validation("path: missing path parameter"))
    }

    fn body<T: serde::de::DeserializeOwned>(&self) -> Result<T, ApiError> {
        parse_body(self.body)
    }

    /// Operations without a body accept an empty one (or `{}`) only.
    fn no_body(&self) -> Result<(), ApiError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let value: serde_json::Value = self.body()?;
        match value.as_object() {
            Some(map) if map.is_empty() => Ok(()),
            _ => Err(ApiError::validation(
                "body: this operation takes no request body",
            )),
        }
    }

    fn query(&self, allowed: &[&str]) -> Result<QueryParams, ApiError> {
        QueryParams::parse(self.query, allowed)
    }
}

fn list<T: serde::Serialize>(message: &str, key: &str, items: Vec<T>) -> Result<Reply, ApiError> {
    Reply::new(message, Listed { key, items })
}

/// A list body: `{"<key>": [items], "total_count": n}`, encoded straight from the items.
struct Listed<'a, T> {
    key: &'a str,
    items: Vec<T>,
}

impl<T: serde::Serialize> serde::Serialize for Listed<'_, T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry(self.key, &self.items)?;
        map.serialize_entry("total_count", &(self.items.len() as u64))?;
        map.end()
    }
}

/// Runs one operation.
pub fn execute(state: &AppState, request: Request<'_>) -> Result<Reply, ApiError> {
    use Operation as Op;
    // Only the listed operations take query parameters.
    let query = match request.operation {
        Op::ListVolumes => request.query(&["bootable", "exclude_os_volumes", "region", "tier"])?,
        Op::GetVolumeBilling => request.query(&[
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
        ])?,
        Op::GetInstanceBilling => request.query(&["instance_id"])?,
        Op::GetSnapshotBilling => request.query(&["snapshot_id"])?,
        _ => request.query(&[])?,
    };
    if matches!(
        request.operation.method(),
        gpucloud_cloud::routes::Method::Get | gpucloud_cloud::routes::Method::Delete
    ) || matches!(
        request.operation,
        Op::StartInstance
            | Op::StopInstance
            | Op::RebootInstance
            | Op::HibernateInstance
            | Op::RestoreHibernatedInstance
    ) {
        request.no_body()?;
    }
    let account = request.caller.account;
    let engine = |f: &mut dyn FnMut(&mut Engine, SimTime) -> Result<Reply, ApiError>| {
        state
            .with_account(account, |engine, now| f(engine, now))
            .unwrap_or_else(|| {
                Err(ApiError::Internal {
                    message: format!("no account {account}"),
                })
            })
    };

    match request.operation {
        // --- Balance, deploy, pricing ---
        Op::GetBalance => engine(&mut |e, now| {
            Reply::new(
                "balance retrieved",
                model::BalanceBody {
                    balance: e.balance(now),
                    currency: crate::catalog::CURRENCY.to_string(),
                },
            )
        }),
        Op::CreateInstance => {
            let body: model::CreateInstanceRequest = request.body()?;
            engine(&mut |e, now| {
                let instance = e.create_instance(&body, now)?;
                let tier = instance.tier.clone();
                Ok(Reply::new(
                    "instance is being created",
                    model::InstanceBody { instance },
                )?
                .tier(tier))
            })
        }
        Op::GetPricing => Reply::new("pricing retrieved", Engine::pricing()),
        Op::QuotePricing => {
            let body: model::PriceQuoteRequest = request.body()?;
            Reply::new("price quoted", Engine::quote(&body)?)
        }

        // --- Instances ---
        Op::ListInstances => {
            engine(&mut |e, now| list("instances listed", "instances", e.list_instances(now)))
        }
        Op::GetInstanceBilling => {
            let instance_id = query.text("instance_id").map(str::to_string);
            engine(&mut |e, now| {
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
        Op::ListSnapshotEligibleInstances => engine(&mut |e, now| {
            list(
                "instances eligible for a snapshot listed",
                "instances",
                e.list_snapshot_eligible(now),
            )
        }),
        Op::GetInstance => {
            let id = request.param(0)?;
            engine(&mut |e, now| {
                let instance = e.get_instance(id, now)?;
                let tier = instance.tier.clone();
                Ok(Reply::new("instance retrieved", model::InstanceBody { instance })?.tier(tier))
            })
        }
        Op::StartInstance
        | Op::StopInstance
        | Op::RebootInstance
        | Op::HibernateInstance
        | Op::RestoreHibernatedInstance => {
            use crate::engine::PowerAction;
            let id = request.param(0)?;
            let (action, message) = match request.operation {
                Op::StartInstance => (PowerAction::Start, "instance is starting"),
                Op::StopInstance => (PowerAction::Stop, "instance is stopping"),
                Op::RebootInstance => (PowerAction::Reboot, "instance is rebooting"),
                Op::HibernateInstance => (PowerAction::Hibernate, "instance is hibernating"),
                _ => (
                    PowerAction::RestoreHibernated,
                    "instance restored from hibernation",
                ),
            };
            engine(&mut |e, now| {
                let (body, tier) = e.power_action(id, action, now)?;
                let reply = Reply::new(message, body)?.tier(tier);
                Ok(if action == PowerAction::RestoreHibernated {
                    reply.timestamp(format_time(now))
                } else {
                    reply
                })
            })
        }
        Op::TogglePublicIp => {
            let id = request.param(0)?;
            let body: model::PublicIpRequest = request.body()?;
            engine(&mut |e, now| {
                let instance = e.set_public_ip(id, body.enabled, now)?;
                let tier = instance.tier.clone();
                let message = if body.enabled {
                    "public IP enabled"
                } else {
                    "public IP disabled"
                };
                Ok(Reply::new(message, model::InstanceBody { instance })?.tier(tier))
            })
        }
        Op::AddSecurityRule => {
            let id = request.param(0)?;
            let body: model::NewRule = request.body()?;
            engine(&mut |e, now| {
                let (added, tier) = e.add_security_rule(id, &body, now)?;
                Ok(Reply::new("security rule added", added)?.tier(tier))
            })
        }
        Op::RemoveSecurityRule => {
            let id = request.param(0)?;
            let rule_id = request.param(1)?;
            engine(&mut |e, now| {
                let (removed, tier) = e.remove_security_rule(id, rule_id, now)?;
                Ok(Reply::new("security rule removed", removed)?.tier(tier))
            })
        }
        Op::DeleteInstance => {
            let id = request.param(0)?;
            engine(&mut |e, now| {
                let (body, tier) = e.delete_instance(id, now)?;
                Ok(Reply::new("instance is being deleted", body)?.tier(tier))
            })
        }
        Op::ListInstanceFirewalls => {
            let id = request.param(0)?;
            engine(&mut |e, now| {
                list(
                    "firewalls of the instance listed",
                    "firewalls",
                    e.instance_firewalls(id, now)?,
                )
            })
        }
        Op::AttachVolumes | Op::DetachVolumes => {
            let id = request.param(0)?;
            let body: model::VolumeIdsRequest = request.body()?;
            let attach = request.operation == Op::AttachVolumes;
            engine(&mut |e, now| {
                if attach {
                    Reply::new(
                        "volumes attached",
                        e.attach_volumes(id, &body.volume_ids, now)?,
                    )
                } else {
                    Reply::new(
                        "volumes detached",
                        e.detach_volumes(id, &body.volume_ids, now)?,
                    )
                }
            })
        }

        // --- Volumes ---
        Op::ListVolumes => {
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
            engine(&mut |e, now| Reply::new("volumes listed", e.list_volumes(&filters, now)))
        }
        Op::CreateVolume => {
            let body: model::CreateVolumeRequest = request.body()?;
            engine(&mut |e, now| {
                let volume = e.create_volume(&body, now)?;
                let tier = volume.tier.clone();
                Ok(Reply::new("volume is being created", model::VolumeBody { volume })?.tier(tier))
            })
        }
        Op::GetVolumeBilling => {
            let filters = volume_billing_filters(&query)?;
            engine(&mut |e, now| {
                Reply::new("volume billing retrieved", e.volume_billing(&filters, now))
            })
        }
        Op::ListVolumeTypes => list(
            "volume types listed",
            "volume_types",
            Engine::volume_types(),
        ),
        Op::GetVolume => {
            let id = request.param(0)?;
            engine(&mut |e, now| {
                let volume = e.get_volume(id, now)?;
                let tier = volume.tier.clone();
                Ok(Reply::new("volume retrieved", model::VolumeBody { volume })?.tier(tier))
            })
        }
        Op::ResizeVolume => {
            let id = request.param(0)?;
            let body: model::ResizeVolumeRequest = request.body()?;
            engine(&mut |e, now| {
                let volume = e.resize_volume(id, body.size, now)?;
                let tier = volume.tier.clone();
                Ok(Reply::new("volume resized", model::VolumeBody { volume })?.tier(tier))
            })
        }
        Op::CloneVolume => {
            let id = request.param(0)?;
            let body: model::CloneVolumeRequest = request.body()?;
            engine(&mut |e, now| {
                let volume = e.clone_volume(id, &body.name, now)?;
                let tier = volume.tier.clone();
                Ok(Reply::new("volume is being cloned", model::VolumeBody { volume })?.tier(tier))
            })
        }
        Op::DeleteVolume => {
            let id = request.param(0)?;
            engine(&mut |e, now| Reply::new("volume deleted", e.delete_volume(id, now)?))
        }

        // --- Snapshots ---
        Op::CreateSnapshot => {
            let id = request.param(0)?;
            let body: model::CreateSnapshotRequest = request.body()?;
            engine(&mut |e, now| {
                let snapshot = e.create_snapshot(id, &body, now)?;
                let tier = snapshot.tier.clone().unwrap_or(model::Tier::Advanced);
                Ok(Reply::new(
                    "snapshot is being created",
                    model::SnapshotBody { snapshot },
                )?
                .tier(tier))
            })
        }
        Op::ListSnapshots => {
            engine(&mut |e, now| list("snapshots listed", "snapshots", e.list_snapshots(now)))
        }
        Op::GetSnapshotBilling => {
            let snapshot_id = query.text("snapshot_id").map(str::to_string);
            engine(&mut |e, now| {
                let billing = e.snapshot_billing(snapshot_id.as_deref(), now);
                if let Some(id) = &snapshot_id
                    && billing.records.is_empty()
                {
                    return Err(ApiError::not_found("snapshot", id));
                }
                Reply::new("snapshot billing retrieved", billing)
            })
        }
        Op::GetSnapshot => {
            let id = request.param(0)?;
            engine(&mut |e, now| {
                let snapshot = e.get_snapshot(id, now)?;
                let tier = snapshot.tier.clone().unwrap_or(model::Tier::Advanced);
                Ok(Reply::new("snapshot retrieved", model::SnapshotBody { snapshot })?.tier(tier))
            })
        }
        Op::RestoreSnapshot => {
            let id = request.param(0)?;
            let body: model::RestoreSnapshotRequest = request.body()?;
            engine(&mut |e, now| {
                let (restored, tier) = e.restore_snapshot(id, &body.new_vm_name, now)?;
                Ok(Reply::new("snapshot restored to a new instance", restored)?
                    .tier(tier)
                    .timestamp(format_time(now)))
            })
        }
        Op::DeleteSnapshot => {
            let id = request.param(0)?;
            engine(&mut |e, now| {
                let (body, tier) = e.delete_snapshot(id, now)?;
                Ok(Reply::new("snapshot deleted", body)?.tier(tier))
            })
        }

        // --- Custom images ---
        Op::ListImages => engine(&mut |e, now| list("images listed", "images", e.list_images(now))),
        Op::CreateImage => {
            let body: model::CreateImageRequest = request.body()?;
            engine(&mut |e, now| {
                Reply::new(
                    "image is being created",
                    model::ImageBody {
                        image: e.create_image(&body, now)?,
                    },
                )
            })
        }
        Op::ListSnapshotImageRelations => engine(&mut |e, now| {
            list(
                "snapshot-image relations listed",
                "relations",
                e.list_relations(now),
            )
        }),
        Op::GetSnapshotImageRelation => {
            let id = request.param(0)?;
            engine(&mut |e, now| {
                Reply::new(
                    "snapshot-image relation retrieved",
                    model::RelationBody {
                        relation: e.get_relation(id, now)?,
                    },
                )
            })
        }
        Op::GetImage => {
            let id = request.param(0)?;
            engine(&mut |e, now| {
                Reply::new(
                    "image retrieved",
                    model::ImageBody {
                        image: e.get_image(id, now)?,
                    },
                )
            })
        }
        Op::DeleteImage => {
            let id = request.param(0)?;
            engine(&mut |e, now| Reply::new("image deleted", e.delete_image(id, now)?))
        }

        // --- Firewalls ---
        Op::ListFirewalls => {
            engine(&mut |e, now| list("firewalls listed", "firewalls", e.list_firewalls(now)))
        }
        Op::CreateFirewall => {
            let body: model::CreateFirewallRequest = request.body()?;
            engine(&mut |e, now| {
                Ok(Reply::new(
                    "firewall created",
                    model::FirewallBody {
                        firewall: e.create_firewall(&body, now)?,
                    },
                )?
                .tier(model::Tier::Advanced))
            })
        }
        Op::ListFirewallProtocols => list("protocols listed", "protocols", Engine::protocols()),
        Op::ListFirewallAttachableInstances => engine(&mut |e, now| {
            list(
                "instances a firewall can be attached to listed",
                "instances",
                e.attachable_instances(now),
            )
        }),
        Op::GetFirewall => {
            let id = request.param(0)?;
            engine(&mut |e, now| {
                Ok(Reply::new(
                    "firewall retrieved",
                    model::FirewallBody {
                        firewall: e.get_firewall(id, now)?,
                    },
                )?
                .tier(model::Tier::Advanced))
            })
        }
        Op::DeleteFirewall => {
            let id = request.param(0)?;
            engine(&mut |e, now| Reply::new("firewall deleted", e.delete_firewall(id, now)?))
        }
        Op::AddFirewallRule => {
            let id = request.param(0)?;
            let body: model::NewRule = request.body()?;
            engine(&mut |e, now| {
                Reply::new("firewall rule added", e.add_firewall_rule(id, &body, now)?)
            })
        }
        Op::RemoveFirewallRule => {
            let id = request.param(0)?;
            let rule_id = request.param(1)?;
            engine(&mut |e, now| {
                Reply::new(
                    "firewall rule removed",
                    e.remove_firewall_rule(id, rule_id, now)?,
                )
            })
        }
        Op::AttachFirewall => {
            let id = request.param(0)?;
            let body: model::AttachFirewallRequest = request.body()?;
            engine(&mut |e, now| {
                Ok(Reply::new(
                    "firewall attachments set",
                    model::FirewallBody {
                        firewall: e.attach_firewall(id, &body.vm_ids, now)?,
                    },
                )?
                .tier(model::Tier::Advanced))
            })
        }

        // --- SSH keys ---
        Op::ListSshKeys => {
            engine(&mut |e, now| list("SSH keys listed", "ssh_keys", e.list_ssh_keys(now)))
        }
        Op::CreateSshKey => {
            let body: model::CreateSshKeyRequest = request.body()?;
            engine(&mut |e, now| {
                let created = e.create_ssh_key(&body, now)?;
                let (message, code) = if created.private_key.is_some() {
                    (
                        "SSH key pair generated; the private key is shown only once",
                        success_code::SSH_KEY_GENERATED,
                    )
                } else {
                    ("SSH key imported", success_code::SSH_KEY_IMPORTED)
                };
                Ok(Reply::new(
                    message,
                    model::SshKeyCreatedBody {
                        key: created.key,
                        private_key: created.private_key,
                    },
                )?
                .code(code))
            })
        }
        Op::GetSshKey => {
            let id = request.param(0)?;
            engine(&mut |e, _| {
                Reply::new(
                    "SSH key retrieved",
                    model::SshKeyBody {
                        ssh_key: e.get_ssh_key(id)?,
                    },
                )
            })
        }
        Op::DeleteSshKey => {
            let id = request.param(0)?;
            engine(&mut |e, now| Reply::new("SSH key deleted", e.delete_ssh_key(id, now)?))
        }

        // --- Startup scripts ---
        Op::ListStartupScripts => {
            engine(&mut |e, now| list("startup scripts listed", "scripts", e.list_scripts(now)))
        }
        Op::CreateStartupScript => {
            let body: model::CreateStartupScriptRequest = request.body()?;
            engine(&mut |e, now| {
                Reply::new(
                    "startup script created",
                    model::StartupScriptBody {
                        script: e.create_script(&body, now)?,
                    },
                )
            })
        }
        Op::DeleteStartupScripts => {
            let body: model::DeleteStartupScriptsRequest = request.body()?;
            engine(&mut |e, now| {
                Reply::new(
                    "startup scripts deleted",
                    e.delete_scripts(&body.script_ids, now),
                )
            })
        }
        Op::GetStartupScript => {
            let id = request.param(0)?;
            engine(&mut |e, _| {
                Reply::new(
                    "startup script retrieved",
                    model::StartupScriptBody {
                        script: e.get_script(id)?,
                    },
                )
            })
        }
        Op::UpdateStartupScript => {
            let id = request.param(0)?;
            let body: model::UpdateStartupScriptRequest = request.body()?;
            engine(&mut |e, now| {
                Reply::new(
                    "startup script updated",
                    model::StartupScriptBody {
                        script: e.update_script(id, &body, now)?,
                    },
                )
            })
        }
        Op::DeleteStartupScript => {
            let id = request.param(0)?;
            engine(&mut |e, now| Reply::new("startup script deleted", e.delete_script(id, now)?))
        }

        // --- Catalogs ---
        Op::GetGpuStock => {
            engine(&mut |e, now| list("GPU stock retrieved", "gpus", e.gpu_stock(now)))
        }
        Op::GetGpuSpecs => list("GPU specifications retrieved", "gpus", Engine::gpu_specs()),
        Op::ListRegions => list("regions listed", "regions", Engine::regions()),
        Op::ListOsImages => list("OS images listed", "os_images", Engine::os_images()),

        // --- AI chat ---
        Op::ListAiModels => Reply::new(
            "AI models retrieved",
            Engine::ai_models(&authenticated_user(request.api_key)),
        ),
        Op::ChatWithAi => {
            let body: model::ChatRequest = request.body()?;
            engine(&mut |e, now| Reply::new("chat completed", e.chat(&body, now)?))
        }
        Op::GetAiUsageSummary => engine(&mut |e, _| {
            Reply::new(
                "AI usage summary retrieved",
                model::AiUsageSummaryBody {
                    summary: e.ai_usage_summary(),
                },
            )
        }),
        Op::GetAiUsageHistory => engine(&mut |e, _| {
            let records = e.ai_usage_history();
            Reply::new(
                "AI usage history retrieved",
                model::AiUsageHistoryBody {
                    total_count: records.len() as u64,
                    records,
                },
            )
        }),
    }
}

/// A stable, non-secret name for the account of an API key: a short hash, never the key.
fn authenticated_user(api_key: &str) -> String {
    let hash = api_key
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("sim-user-{:08x}", hash as u32)
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
    if let (Some(min), Some(max)) = (min_minutes, max_minutes)
        && min > max
    {
        return Err(ApiError::validation(
            "min_minutes: must not be greater than max_minutes",
        ));
    }
    let min_cost = query.number("min_cost")?;
    let max_cost = query.number("max_cost")?;
    if let (Some(min), Some(max)) = (min_cost, max_cost)
        && min > max
    {
        return Err(ApiError::validation(
            "min_cost: must not be greater than max_cost",
        ));
    }
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
