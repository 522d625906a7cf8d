//! `Firewall`: keeps the cloud firewall's rules and attachments equal to the spec, as a diff:
//! what is missing is added first, what is extra is removed after, the rest is left alone. A
//! rule changed in the cloud by hand is extra (removed) and its spec version missing (added
//! back).
//!
//! Attachments are the machines named by `instanceRefs` plus every GpuInstance of the namespace
//! whose labels match `instanceSelector`, in the firewall's region, once they have a cloud id.

use crate::account::Account;
use crate::conditions::{Outcome, reason};
use crate::context::Context;
use crate::error::Error;
use crate::gpu_instance::{rule_diff, to_cloud_rule};
use crate::kind::{ManagedKind, Record, Reference, WhenGone};
use crate::observer::CloudResource;
use crate::records::{cloud_record, found, gone};
use gpucloud_api::{CloudStatus, Firewall, FirewallStatus, GpuInstance, Managed, SecurityRule};
use gpucloud_cloud::model::{CreateFirewallRequest, Firewall as CloudFirewall};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use kube::api::ListParams;
use kube::core::{Selector, SelectorExt};
use kube::{Api, Resource, ResourceExt};
use std::collections::BTreeSet;

impl ManagedKind for Firewall {
    type Cloud = Firewalls;
    const REFERS_TO: &'static [(&'static str, &'static str)] = &[
        ("GpuInstance", "spec.instanceRefs"),
        ("GpuInstance", "spec.instanceSelector"),
    ];

    fn references(&self) -> Vec<Reference> {
        if self.spec.instance_selector.is_some() {
            // Matching or not: a machine whose labels stop matching must be detached too.
            return vec![Reference::Every {
                kind: "GpuInstance",
            }];
        }
        self.spec
            .instance_refs
            .iter()
            .map(|r| Reference::named("GpuInstance", &r.name))
            .collect()
    }

    const WHEN_GONE: WhenGone = WhenGone::Recreate;

    fn status_with(&self, common: CloudStatus, record: Option<&Record<Self>>) -> Self::Status {
        match record {
            Some(r) => {
                let attached: Vec<String> = r.attachments.iter().map(|a| a.vm.id.clone()).collect();
                FirewallStatus {
                    cloud: common,
                    rule_count: Some(i32::try_from(r.rules.len()).unwrap_or(i32::MAX)),
                    attached_count: Some(i32::try_from(attached.len()).unwrap_or(i32::MAX)),
                    attached_instance_ids: attached,
                }
            }
            None => FirewallStatus {
                cloud: common,
                ..self.status.clone().unwrap_or_default()
            },
        }
    }

    type CreatePlan = CreateFirewallRequest;

    async fn plan_create(
        &self,
        _cx: &Context<Self>,
        account: &Account,
    ) -> Result<CreateFirewallRequest, Error> {
        check_protocols(account, &self.spec.rules.iter().collect::<Vec<_>>()).await?;
        Ok(CreateFirewallRequest {
            // `create` names it.
            name: String::new(),
            region: self.spec.region.clone(),
            description: self.spec.description.clone(),
            rules: self.spec.rules.iter().map(to_cloud_rule).collect(),
        })
    }

    async fn create(
        _cx: &Context<Self>,
        account: &Account,
        mut request: CreateFirewallRequest,
        cloud_name: &str,
    ) -> Result<CloudFirewall, Error> {
        request.name = cloud_name.to_string();
        Ok(account.client.create_firewall(&request).await?)
    }

    async fn converge(
        &mut self,
        cx: &Context<Self>,
        account: &Account,
        record: &CloudFirewall,
    ) -> Result<Outcome, Error> {
        let id = record.id.as_str();
        let client = &account.client;
        let (missing, extra) = rule_diff(&self.spec.rules, &record.rules);
        // The whole new rule set is checked before the first call, and rules are added before
        // any is removed: a change refused half-way never leaves the firewall with fewer rules
        // than both the old and the new set.
        if !missing.is_empty() {
            check_protocols(account, &self.spec.rules.iter().collect::<Vec<_>>()).await?;
            for rule in &missing {
                client.add_firewall_rule(id, &to_cloud_rule(rule)).await?;
            }
            return Ok(Outcome::progressing(
                reason::UPDATING,
                format!("adding {} rules to {id}", missing.len()),
            ));
        }
        if let Some(rule) = extra.first() {
            client.remove_firewall_rule(id, &rule.id).await?;
            return Ok(Outcome::progressing(
                reason::UPDATING,
                format!("removing rule {} from {id}", rule.id),
            ));
        }

        let targets = targets(self, cx).await?;
        let attached: BTreeSet<String> =
            record.attachments.iter().map(|a| a.vm.id.clone()).collect();
        if attached != targets.ids {
            let ids: Vec<String> = targets.ids.iter().cloned().collect();
            client.attach_firewall(id, &ids).await?;
            return Ok(Outcome::progressing(
                reason::UPDATING,
                format!("attaching {id} to {} instances", ids.len()),
            ));
        }
        if let Some(error) = targets.waiting {
            return Ok(error.outcome());
        }
        Ok(Outcome::ready(
            reason::AVAILABLE,
            format!(
                "{id} has {} rules and is attached to {} instances",
                record.rules.len(),
                attached.len()
            ),
        ))
    }

    fn observed(&self, record: &CloudFirewall) -> Outcome {
        Outcome::ready(
            reason::AVAILABLE,
            format!(
                "observing {} ({} rules, {} attachments)",
                record.id,
                record.rules.len(),
                record.attachments.len()
            ),
        )
    }

    fn in_use(record: &CloudFirewall) -> bool {
        !record.attachments.is_empty()
    }
}

/// The machines the firewall should be attached to, and the first reference that cannot be
/// followed yet.
struct Targets {
    ids: BTreeSet<String>,
    waiting: Option<Error>,
}

async fn targets(firewall: &Firewall, cx: &Context<Firewall>) -> Result<Targets, Error> {
    let this = firewall;
    let namespace = this.namespace().unwrap_or_default();
    let api: Api<GpuInstance> = Api::namespaced(cx.client.clone(), &namespace);
    let instances = api.list(&ListParams::default()).await?.items;
    let selector = match &this.spec.instance_selector {
        Some(selector) => Some(Selector::try_from(selector.clone()).map_err(|e| {
            Error::InvalidSpec(format!(
                "spec.instanceSelector is not a valid selector: {e}"
            ))
        })?),
        None => None,
    };
    let mut targets = Targets {
        ids: BTreeSet::new(),
        waiting: None,
    };
    let usable = |i: &GpuInstance| {
        i.meta().deletion_timestamp.is_none()
            && i.spec.region == this.spec.region
            && !crate::references::machine_vanished(i)
    };
    for reference in &this.spec.instance_refs {
        let found = instances.iter().find(|i| i.name_any() == reference.name);
        let waiting = |detail: &str| Error::WaitingFor {
            kind: "GpuInstance",
            name: reference.name.clone(),
            detail: detail.to_string(),
        };
        match found {
            None => {
                targets.waiting.get_or_insert(waiting("it does not exist"));
            }
            Some(i) if i.spec.region != this.spec.region => {
                return Err(Error::InvalidSpec(format!(
                    "spec.instanceRefs: GpuInstance {:?} is in region {}, the firewall in {}",
                    reference.name, i.spec.region, this.spec.region
                )));
            }
            Some(i) if !usable(i) => {
                targets
                    .waiting
                    .get_or_insert(waiting(if crate::references::machine_vanished(i) {
                        "its machine was deleted outside the operator"
                    } else {
                        "it is being deleted"
                    }));
            }
            Some(i) => match i.cloud_status().external_id {
                Some(id) => {
                    targets.ids.insert(id);
                }
                None => {
                    targets
                        .waiting
                        .get_or_insert(waiting("it has no cloud id yet"));
                }
            },
        }
    }
    if let Some(selector) = &selector {
        for instance in &instances {
            if usable(instance)
                && selector.matches(instance.labels())
                && let Some(id) = instance.cloud_status().external_id
            {
                targets.ids.insert(id);
            }
        }
    }
    Ok(targets)
}

/// Refuses rules whose protocol the cloud's supported-protocols catalog does not list.
async fn check_protocols(account: &Account, rules: &[&SecurityRule]) -> Result<(), Error> {
    if rules.is_empty() {
        return Ok(());
    }
    let catalog = account.client.list_firewall_protocols().await?.protocols;
    for rule in rules {
        if !catalog.iter().any(|p| p.as_str() == rule.protocol) {
            let known: Vec<&str> = catalog.iter().map(|p| p.as_str()).collect();
            return Err(Error::InvalidSpec(format!(
                "rule protocol {:?} is not supported by the cloud; supported: {}",
                rule.protocol,
                known.join(", ")
            )));
        }
    }
    Ok(())
}

// === Cloud calls ===

// The cloud reports no state for firewalls: a listed firewall is in force.
cloud_record!(CloudFirewall, id: id, name: name, state: "available");

/// The cloud's firewalls.
pub struct Firewalls;

impl CloudResource for Firewalls {
    type Record = CloudFirewall;
    const LABEL: &'static str = "firewall";

    async fn list(client: CloudClient) -> Result<Vec<CloudFirewall>, CloudError> {
        Ok(client.list_firewalls().await?.firewalls)
    }

    async fn get(client: CloudClient, id: String) -> Result<Option<CloudFirewall>, CloudError> {
        found(client.get_firewall(&id).await)
    }

    async fn delete(client: CloudClient, record: CloudFirewall) -> Result<(), CloudError> {
        // The cloud refuses to delete a firewall still attached to machines.
        if !record.attachments.is_empty() {
            match client.attach_firewall(&record.id, &[]).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        gone(client.delete_firewall(&record.id).await)
    }
}
