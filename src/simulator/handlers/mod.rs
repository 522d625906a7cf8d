//! One function per operation of the route table: decode the request, run the engine,
//! shape the reply with the shared model types.
//!
//! [`execute`] checks what every operation shares (the query parameters it accepts, no body
//! where it takes none) and calls the operation's function, found by `handler`. The
//! functions live in one file per resource, as the client's methods do.

mod account;
mod ai;
mod catalog;
mod firewalls;
mod images;
mod instances;
mod snapshots;
mod ssh_keys;
mod startup_scripts;
mod volumes;

use axum::body::Bytes;
use gpucloud_cloud::routes::{Method, Operation};

use crate::engine::{Engine, SimTime};
use crate::error::ApiError;
use crate::reply::Reply;
use crate::request::{QueryParams, parse_body};
use crate::state::{AppState, Caller};

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
}

/// What an operation's function works with: the request, its checked query parameters and
/// the simulator's state.
struct Call<'a> {
    state: &'a AppState,
    request: Request<'a>,
    query: QueryParams,
}

impl Call<'_> {
    /// Path parameter number `index`.
    fn param(&self, index: usize) -> Result<&str, ApiError> {
        self.request.param(index)
    }

    /// The decoded JSON request body.
    fn body<T: serde::de::DeserializeOwned>(&self) -> Result<T, ApiError> {
        self.request.body()
    }

    /// Runs `f` on the engine of the caller's account.
    fn engine<T>(
        &self,
        f: impl FnOnce(&mut Engine, SimTime) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let account = self.request.caller.account;
        self.state.with_account(account, f).unwrap_or_else(|| {
            Err(ApiError::Internal {
                message: format!("no account {account}"),
            })
        })
    }

    /// A list answer. The items are read under the account's lock and encoded once it is let
    /// go, so a long list does not hold up the account's other calls.
    fn listed<T: serde::Serialize>(
        &self,
        message: &str,
        key: &str,
        read: impl FnOnce(&mut Engine, SimTime) -> Vec<T>,
    ) -> Result<Reply, ApiError> {
        let items = self.engine(|e, now| Ok(read(e, now)))?;
        list(message, key, items)
    }
}

/// The function that carries out one operation.
type Handler = fn(&Call<'_>) -> Result<Reply, ApiError>;

/// Runs one operation.
pub fn execute(state: &AppState, request: Request<'_>) -> Result<Reply, ApiError> {
    let operation = request.operation;
    let query = QueryParams::parse(request.query, query_parameters(operation))?;
    if takes_no_body(operation) {
        request.no_body()?;
    }
    let call = Call {
        state,
        request,
        query,
    };
    handler(operation)(&call)
}

/// The query parameters an operation accepts; the others take none.
fn query_parameters(operation: Operation) -> &'static [&'static str] {
    match operation {
        Operation::ListVolumes => volumes::LIST_QUERY,
        Operation::GetVolumeBilling => volumes::BILLING_QUERY,
        Operation::GetInstanceBilling => &["instance_id"],
        Operation::GetSnapshotBilling => &["snapshot_id"],
        _ => &[],
    }
}

/// Reads, deletes and the power actions take no request body.
fn takes_no_body(operation: Operation) -> bool {
    use Operation as Op;
    matches!(operation.method(), Method::Get | Method::Delete)
        || matches!(
            operation,
            Op::StartInstance
                | Op::StopInstance
                | Op::RebootInstance
                | Op::HibernateInstance
                | Op::RestoreHibernatedInstance
        )
}

/// The function of each operation.
fn handler(operation: Operation) -> Handler {
    use Operation as Op;
    match operation {
        Op::GetBalance => account::get_balance,
        Op::CreateInstance => instances::create_instance,
        Op::GetPricing => account::get_pricing,
        Op::QuotePricing => account::quote_pricing,

        Op::ListInstances => instances::list_instances,
        Op::GetInstanceBilling => instances::get_instance_billing,
        Op::ListSnapshotEligibleInstances => instances::list_snapshot_eligible_instances,
        Op::GetInstance => instances::get_instance,
        Op::StartInstance => instances::start_instance,
        Op::StopInstance => instances::stop_instance,
        Op::RebootInstance => instances::reboot_instance,
        Op::HibernateInstance => instances::hibernate_instance,
        Op::RestoreHibernatedInstance => instances::restore_hibernated_instance,
        Op::TogglePublicIp => instances::toggle_public_ip,
        Op::AddSecurityRule => instances::add_security_rule,
        Op::RemoveSecurityRule => instances::remove_security_rule,
        Op::DeleteInstance => instances::delete_instance,
        Op::ListInstanceFirewalls => instances::list_instance_firewalls,
        Op::AttachVolumes => instances::attach_volumes,
        Op::DetachVolumes => instances::detach_volumes,

        Op::ListVolumes => volumes::list_volumes,
        Op::CreateVolume => volumes::create_volume,
        Op::GetVolumeBilling => volumes::get_volume_billing,
        Op::ListVolumeTypes => volumes::list_volume_types,
        Op::GetVolume => volumes::get_volume,
        Op::ResizeVolume => volumes::resize_volume,
        Op::CloneVolume => volumes::clone_volume,
        Op::DeleteVolume => volumes::delete_volume,

        Op::CreateSnapshot => snapshots::create_snapshot,
        Op::ListSnapshots => snapshots::list_snapshots,
        Op::GetSnapshotBilling => snapshots::get_snapshot_billing,
        Op::GetSnapshot => snapshots::get_snapshot,
        Op::RestoreSnapshot => snapshots::restore_snapshot,
        Op::DeleteSnapshot => snapshots::delete_snapshot,

        Op::ListImages => images::list_images,
        Op::CreateImage => images::create_image,
        Op::ListSnapshotImageRelations => images::list_snapshot_image_relations,
        Op::GetSnapshotImageRelation => images::get_snapshot_image_relation,
        Op::GetImage => images::get_image,
        Op::DeleteImage => images::delete_image,

        Op::ListFirewalls => firewalls::list_firewalls,
        Op::CreateFirewall => firewalls::create_firewall,
        Op::ListFirewallProtocols => firewalls::list_firewall_protocols,
        Op::ListFirewallAttachableInstances => firewalls::list_firewall_attachable_instances,
        Op::GetFirewall => firewalls::get_firewall,
        Op::DeleteFirewall => firewalls::delete_firewall,
        Op::AddFirewallRule => firewalls::add_firewall_rule,
        Op::RemoveFirewallRule => firewalls::remove_firewall_rule,
        Op::AttachFirewall => firewalls::attach_firewall,

        Op::ListSshKeys => ssh_keys::list_ssh_keys,
        Op::CreateSshKey => ssh_keys::create_ssh_key,
        Op::GetSshKey => ssh_keys::get_ssh_key,
        Op::DeleteSshKey => ssh_keys::delete_ssh_key,

        Op::ListStartupScripts => startup_scripts::list_startup_scripts,
        Op::CreateStartupScript => startup_scripts::create_startup_script,
        Op::DeleteStartupScripts => startup_scripts::delete_startup_scripts,
        Op::GetStartupScript => startup_scripts::get_startup_script,
        Op::UpdateStartupScript => startup_scripts::update_startup_script,
        Op::DeleteStartupScript => startup_scripts::delete_startup_script,

        Op::GetGpuStock => catalog::get_gpu_stock,
        Op::GetGpuSpecs => catalog::get_gpu_specs,
        Op::ListRegions => catalog::list_regions,
        Op::ListOsImages => catalog::list_os_images,

        Op::ListAiModels => ai::list_ai_models,
        Op::ChatWithAi => ai::chat_with_ai,
        Op::GetAiUsageSummary => ai::get_ai_usage_summary,
        Op::GetAiUsageHistory => ai::get_ai_usage_history,
    }
}

/// A list reply: `{"<key>": [items], "total_count": n}`.
fn list<T: serde::Serialize>(message: &str, key: &str, items: Vec<T>) -> Result<Reply, ApiError> {
    Reply::new(message, Listed { key, items })
}

/// A list body, encoded straight from the items.
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
