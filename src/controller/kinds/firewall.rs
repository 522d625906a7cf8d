//! `Firewall`: keeps the cloud firewall's rules and attachments equal to the spec, as a diff:
//! what is missing is added first, what is extra is removed after, the rest is left alone. A
//! rule changed in the cloud by hand is extra (removed) and its spec version missing (added
//! back).
//!
//! Attachments are the machines named by `instanceRefs` plus every GpuInstance of the namespace
//! whose labels match `instanceSelector`, in the firewall's region, once they have a cloud id.

use crate::accounts::account::Account;
use crate::accounts::observer::CloudResource;
use crate::accounts::records::{cloud_record, found, gone};
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::error::Error;
use crate::flow::kind::{KindDeclarations, ManagedKind, Plan, Record, Reference, WhenGone};
use crate::kinds::gpu_instance::{rule_diff, to_cloud_rule};
use gpucloud_api::{CloudStatus, Firewall, FirewallStatus, GpuInstance, Managed, SecurityRule};
use gpucloud_cloud::model::{CreateFirewallRequest, Firewall as CloudFirewall, NewRule};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use kube::api::ListParams;
use kube::core::{Selector, SelectorExt};
use kube::{Api, Resource, ResourceExt};
use std::collections::BTreeSet;

/// One change a firewall's plan asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum FirewallAction {
    /// Add these rules (the whole missing set, added one call each).
    AddRules(Vec<NewRule>),
    /// Remove the rule with this id.
    RemoveRule(String),
    /// Attach to exactly these machines.
    Attach(Vec<String>),
}

impl KindDeclarations for Firewall {
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

impl ManagedKind for Firewall {
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

    type Resolved = Result<Targets, Error>;
    type Action = FirewallAction;

    /// The machines to attach to; and, when rules are to be added, the whole new rule set
    /// checked against the cloud's protocols first, so a change refused half-way never starts.
    async fn resolve(
        &self,
        cx: &Context<Self>,
        account: &Account,
        record: &CloudFirewall,
    ) -> Result<Result<Targets, Error>, Error> {
        let (missing, _) = rule_diff(&self.spec.rules, &record.rules);
        if !missing.is_empty() {
            check_protocols(account, &self.spec.rules.iter().collect::<Vec<_>>()).await?;
        }
        // Kept as a value: the rules come first, and a reference that cannot be followed
        // matters only once they are in place.
        Ok(targets(self, cx, account).await)
    }

    fn plan(
        &self,
        record: &CloudFirewall,
        targets: Result<Targets, Error>,
    ) -> Result<Plan<FirewallAction>, Error> {
        let id = record.id.as_str();
        let (missing, extra) = rule_diff(&self.spec.rules, &record.rules);
        // Rules are added before any is removed: a change never leaves the firewall with fewer
        // rules than both the old and the new set.
        if !missing.is_empty() {
            let count = missing.len();
            return Ok(Plan::act(
                FirewallAction::AddRules(missing.iter().copied().map(to_cloud_rule).collect()),
                Outcome::progressing(reason::UPDATING, format!("adding {count} rules to {id}")),
            ));
        }
        if let Some(rule) = extra.first() {
            return Ok(Plan::act(
                FirewallAction::RemoveRule(rule.id.clone()),
                Outcome::progressing(
                    reason::UPDATING,
                    format!("removing rule {} from {id}", rule.id),
                ),
            ));
        }

        let targets = targets?;
        let attached: BTreeSet<String> =
            record.attachments.iter().map(|a| a.vm.id.clone()).collect();
        if attached != targets.ids {
            let ids: Vec<String> = targets.ids.iter().cloned().collect();
            let count = ids.len();
            return Ok(Plan::act(
                FirewallAction::Attach(ids),
                Outcome::progressing(
                    reason::UPDATING,
                    format!("attaching {id} to {count} instances"),
                ),
            ));
        }
        if let Some(error) = targets.waiting {
            return Ok(Plan::stand(error.outcome()));
        }
        Ok(Plan::stand(Outcome::ready(
            reason::AVAILABLE,
            format!(
                "{id} has {} rules and is attached to {} instances",
                record.rules.len(),
                attached.len()
            ),
        )))
    }

    async fn execute(
        &self,
        _cx: &Context<Self>,
        account: &Account,
        record: &CloudFirewall,
        action: &FirewallAction,
    ) -> Result<(), Error> {
        let (client, id) = (&account.client, record.id.as_str());
        match action {
            FirewallAction::AddRules(rules) => {
                for rule in rules {
                    client.add_firewall_rule(id, rule).await?;
                }
            }
            FirewallAction::RemoveRule(rule) => {
                client.remove_firewall_rule(id, rule).await.map(drop)?
            }
            FirewallAction::Attach(ids) => client.attach_firewall(id, ids).await.map(drop)?,
        }
        Ok(())
    }
}

/// The machines the firewall should be attached to, and the first reference that cannot be
/// followed yet.
#[derive(Debug)]
pub struct Targets {
    pub ids: BTreeSet<String>,
    pub waiting: Option<Error>,
}

async fn targets(
    firewall: &Firewall,
    cx: &Context<Firewall>,
    account: &Account,
) -> Result<Targets, Error> {
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
            && i.region() == Some(this.spec.region.as_str())
            && !crate::flow::dereference::machine_vanished(i)
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
            Some(i) if i.region().is_some_and(|r| r != this.spec.region) => {
                return Err(Error::InvalidSpec(format!(
                    "spec.instanceRefs: GpuInstance {:?} is in region {}, the firewall in {}",
                    reference.name,
                    i.region().unwrap_or_default(),
                    this.spec.region
                )));
            }
            Some(i) if i.region().is_none() => {
                targets
                    .waiting
                    .get_or_insert(waiting("its placement has not chosen a region yet"));
            }
            Some(i) if !usable(i) => {
                targets.waiting.get_or_insert(waiting(
                    if crate::flow::dereference::machine_vanished(i) {
                        "its machine was deleted outside the operator"
                    } else {
                        "it is being deleted"
                    },
                ));
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
    // Ids read from statuses, which whoever may write one can write: another namespace's
    // machine is refused before anything is attached.
    for id in &targets.ids {
        let what = format!("{id}, recorded by a GpuInstance this firewall selects,");
        cx.ownership
            .check_not_anothers::<GpuInstance>(
                &namespace,
                &what,
                (id, None),
                crate::accounts::released::SHARED_READ_FOR,
                Some(&account.client),
            )
            .await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_cloud::model::{AttachedVm, FirewallAttachment};

    fn firewall(rules: serde_json::Value) -> Firewall {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "Firewall",
            "metadata": {"name": "web", "namespace": "ml"},
            "spec": {"region": "us-east", "rules": rules},
        }))
        .unwrap()
    }

    fn rule(cidr: &str, port: i32) -> serde_json::Value {
        serde_json::json!({
            "direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
            "remoteIpPrefix": cidr, "portRangeMin": port, "portRangeMax": port,
        })
    }

    fn record(rules: &Firewall, attached: &[&str]) -> CloudFirewall {
        CloudFirewall {
            id: "fw-1".into(),
            rules: rules
                .spec
                .rules
                .iter()
                .enumerate()
                .map(|(n, r)| {
                    let new = to_cloud_rule(r);
                    gpucloud_cloud::model::SecurityRule {
                        id: format!("r{n}"),
                        direction: new.direction,
                        protocol: new.protocol,
                        ethertype: new.ethertype,
                        remote_ip_prefix: new.remote_ip_prefix,
                        port_range_min: new.port_range_min,
                        port_range_max: new.port_range_max,
                    }
                })
                .collect(),
            attachments: attached
                .iter()
                .map(|id| FirewallAttachment {
                    vm: AttachedVm {
                        id: id.to_string(),
                        ..AttachedVm::default()
                    },
                })
                .collect(),
            ..CloudFirewall::default()
        }
    }

    fn targets(ids: &[&str]) -> Result<Targets, Error> {
        Ok(Targets {
            ids: ids.iter().map(|id| id.to_string()).collect(),
            waiting: None,
        })
    }

    #[test]
    fn rules_are_added_all_at_once_then_removed_one_by_one_then_machines_attached() {
        let old = firewall(serde_json::json!([rule("0.0.0.0/0", 80)]));
        let new = firewall(serde_json::json!([rule("10.0.0.0/8", 22)]));
        let both = firewall(serde_json::json!([
            rule("0.0.0.0/0", 80),
            rule("10.0.0.0/8", 22)
        ]));

        let plan = new.plan(&record(&old, &[]), targets(&["vm-1"])).unwrap();
        assert_eq!(
            plan.action,
            Some(FirewallAction::AddRules(vec![to_cloud_rule(
                &new.spec.rules[0]
            )]))
        );
        let plan = new.plan(&record(&both, &[]), targets(&["vm-1"])).unwrap();
        assert_eq!(plan.action, Some(FirewallAction::RemoveRule("r0".into())));
        let plan = new.plan(&record(&new, &[]), targets(&["vm-1"])).unwrap();
        assert_eq!(
            plan.action,
            Some(FirewallAction::Attach(vec!["vm-1".into()]))
        );
        let plan = new
            .plan(&record(&new, &["vm-1"]), targets(&["vm-1"]))
            .unwrap();
        assert_eq!(plan.action, None);
        assert!(
            matches!(plan.outcome, Outcome::Ready { .. }),
            "{:?}",
            plan.outcome
        );
    }

    #[test]
    fn a_bad_reference_matters_only_once_the_rules_are_in_place() {
        let new = firewall(serde_json::json!([rule("10.0.0.0/8", 22)]));
        let refused = || Err(Error::InvalidSpec("spec.instanceRefs: elsewhere".into()));
        let plan = new.plan(&record(&firewall(serde_json::json!([])), &[]), refused());
        assert!(matches!(
            plan,
            Ok(Plan {
                action: Some(FirewallAction::AddRules(_)),
                ..
            })
        ));
        let plan = new.plan(&record(&new, &[]), refused());
        assert!(matches!(plan, Err(Error::InvalidSpec(_))), "{plan:?}");
        // Machines found are attached while another reference waits; then it still waits.
        let waiting = || {
            Ok(Targets {
                ids: ["vm-1".to_string()].into(),
                waiting: Some(Error::WaitingFor {
                    kind: "GpuInstance",
                    name: "train".into(),
                    detail: "it has no cloud id yet".into(),
                }),
            })
        };
        let plan = new.plan(&record(&new, &[]), waiting()).unwrap();
        assert_eq!(
            plan.action,
            Some(FirewallAction::Attach(vec!["vm-1".into()]))
        );
        let plan = new.plan(&record(&new, &["vm-1"]), waiting()).unwrap();
        assert_eq!(plan.action, None);
        assert!(
            matches!(plan.outcome, Outcome::Progressing { .. }),
            "{:?}",
            plan.outcome
        );
    }
}
