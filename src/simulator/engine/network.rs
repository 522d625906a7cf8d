//! Firewalls and the validation of firewall and security rules.

use std::net::IpAddr;

use gpucloud_cloud::model::{self, Ethertype, Protocol};

use super::{ApiResult, Engine, SimTime, format_time, validate_name, validate_region};
use crate::error::ApiError;

#[derive(Debug, Clone)]
pub struct Firewall {
    pub id: String,
    pub name: String,
    pub description: String,
    pub region: String,
    pub rules: Vec<model::FirewallRule>,
    /// Attached instance ids, in attach order.
    pub attached: Vec<String>,
    pub created_at: SimTime,
    pub deleted_at: Option<SimTime>,
}

/// Checks direction, protocol, ethertype, CIDR (matching the ethertype) and ports
/// (1..=65535, min <= max; both or neither).
pub fn validate_rule(rule: &model::NewRule) -> ApiResult<()> {
    if !rule.direction.is_known() {
        return Err(ApiError::validation(format!(
            "direction: {:?} is not one of ingress, egress",
            rule.direction.as_str()
        )));
    }
    if !rule.protocol.is_known() {
        return Err(ApiError::validation(format!(
            "protocol: {:?} is not one of tcp, udp, icmp, any",
            rule.protocol.as_str()
        )));
    }
    if !rule.ethertype.is_known() {
        return Err(ApiError::validation(format!(
            "ethertype: {:?} is not one of IPv4, IPv6",
            rule.ethertype.as_str()
        )));
    }
    let is_v4 = parse_cidr(&rule.remote_ip_prefix)?;
    if is_v4 != (rule.ethertype == Ethertype::Ipv4) {
        return Err(ApiError::validation(format!(
            "remote_ip_prefix: {} does not match ethertype {}",
            rule.remote_ip_prefix, rule.ethertype
        )));
    }
    match (rule.port_range_min, rule.port_range_max) {
        (None, None) => Ok(()),
        (Some(min), Some(max)) => {
            for (field, port) in [("port_range_min", min), ("port_range_max", max)] {
                if !(1..=65535).contains(&port) {
                    return Err(ApiError::validation(format!(
                        "{field}: {port} is outside 1..=65535"
                    )));
                }
            }
            if min > max {
                return Err(ApiError::validation(format!(
                    "port_range_min: {min} is greater than port_range_max {max}"
                )));
            }
            if matches!(rule.protocol, Protocol::Icmp | Protocol::Any) {
                return Err(ApiError::validation(format!(
                    "port_range_min: ports apply to tcp and udp only, not {}",
                    rule.protocol
                )));
            }
            Ok(())
        }
        (Some(_), None) => Err(ApiError::validation(
            "port_range_max: required when port_range_min is given",
        )),
        (None, Some(_)) => Err(ApiError::validation(
            "port_range_min: required when port_range_max is given",
        )),
    }
}

/// Parses `address/prefix`; returns whether it is IPv4.
fn parse_cidr(value: &str) -> ApiResult<bool> {
    let bad = || {
        ApiError::validation(format!(
            "remote_ip_prefix: {value:?} is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32"
        ))
    };
    let (address, prefix) = value.split_once('/').ok_or_else(bad)?;
    let address: IpAddr = address.parse().map_err(|_| bad())?;
    if prefix.is_empty() || !prefix.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    if prefix > max {
        return Err(bad());
    }
    Ok(address.is_ipv4())
}

pub(super) fn rule_record(id: String, rule: &model::NewRule) -> model::SecurityRule {
    model::SecurityRule {
        id,
        direction: rule.direction.clone(),
        protocol: rule.protocol.clone(),
        ethertype: rule.ethertype.clone(),
        remote_ip_prefix: rule.remote_ip_prefix.clone(),
        port_range_min: rule.port_range_min,
        port_range_max: rule.port_range_max,
    }
}

// === impl Engine: firewalls ===

impl Engine {
    fn live_firewall(&self, id: &str) -> ApiResult<&Firewall> {
        self.firewalls
            .get(id)
            .filter(|f| f.deleted_at.is_none())
            .ok_or_else(|| ApiError::not_found("firewall", id))
    }

    /// The wire record; attachments list the instances still present.
    pub fn firewall_view(&self, firewall: &Firewall, now: SimTime) -> model::Firewall {
        let boot = self.settings.delays.boot;
        model::Firewall {
            id: firewall.id.clone(),
            name: firewall.name.clone(),
            description: firewall.description.clone(),
            region: firewall.region.clone(),
            rules: firewall.rules.clone(),
            attachments: firewall
                .attached
                .iter()
                .filter_map(|id| self.instances.get(id))
                .filter(|i| i.is_live(now))
                .map(|i| model::FirewallAttachment {
                    vm: model::AttachedVm {
                        id: i.id.clone(),
                        name: i.name.clone(),
                        status: i.vm_status(now, boot),
                    },
                })
                .collect(),
            created_at: format_time(firewall.created_at),
        }
    }

    pub fn create_firewall(
        &mut self,
        request: &model::CreateFirewallRequest,
        now: SimTime,
    ) -> ApiResult<model::Firewall> {
        self.settle(now);
        validate_name("name", &request.name)?;
        validate_region("region", &request.region)?;
        if request.description.chars().count() > 1024 {
            return Err(ApiError::validation(
                "description: at most 1024 characters allowed",
            ));
        }
        for rule in &request.rules {
            validate_rule(rule)?;
        }
        let id = self.new_id("fw");
        let mut rules = Vec::with_capacity(request.rules.len());
        for rule in &request.rules {
            let rule_id = self.new_id("rule");
            rules.push(rule_record(rule_id, rule));
        }
        let firewall = Firewall {
            id: id.clone(),
            name: request.name.clone(),
            description: request.description.clone(),
            region: request.region.clone(),
            rules,
            attached: Vec::new(),
            created_at: now,
            deleted_at: None,
        };
        let view = self.firewall_view(&firewall, now);
        self.firewalls.insert(id, firewall);
        Ok(view)
    }

    pub fn get_firewall(&mut self, id: &str, now: SimTime) -> ApiResult<model::Firewall> {
        self.settle(now);
        let firewall = self.live_firewall(id)?;
        Ok(self.firewall_view(firewall, now))
    }

    pub fn list_firewalls(&mut self, now: SimTime) -> Vec<model::Firewall> {
        self.settle(now);
        self.firewalls
            .values()
            .filter(|f| self.listed(f.created_at, f.deleted_at, now))
            .map(|f| self.firewall_view(f, now))
            .collect()
    }

    /// Firewalls attached to an instance.
    pub fn instance_firewalls(
        &mut self,
        instance_id: &str,
        now: SimTime,
    ) -> ApiResult<Vec<model::Firewall>> {
        self.get_instance(instance_id, now)?;
        Ok(self
            .firewalls
            .values()
            .filter(|f| f.deleted_at.is_none() && f.attached.iter().any(|id| id == instance_id))
            .map(|f| self.firewall_view(f, now))
            .collect())
    }

    /// Instances a firewall can be attached to: every present instance not being deleted.
    pub fn attachable_instances(&mut self, now: SimTime) -> Vec<model::Instance> {
        self.list_instances(now)
            .into_iter()
            .filter(|i| i.status != model::InstanceStatus::Deleting)
            .collect()
    }

    /// A firewall attached to instances cannot be deleted.
    pub fn delete_firewall(&mut self, id: &str, now: SimTime) -> ApiResult<model::DeletedBody> {
        let view = self.get_firewall(id, now)?;
        if !view.attachments.is_empty() {
            return Err(ApiError::conflict(format!(
                "firewall {id} is attached to {} instance(s); attach it to none first",
                view.attachments.len()
            )));
        }
        if let Some(firewall) = self.firewalls.get_mut(id) {
            firewall.deleted_at = Some(now);
        }
        Ok(model::DeletedBody { id: id.to_string() })
    }

    pub fn add_firewall_rule(
        &mut self,
        id: &str,
        rule: &model::NewRule,
        now: SimTime,
    ) -> ApiResult<model::AddFirewallRuleBody> {
        self.settle(now);
        validate_rule(rule)?;
        self.live_firewall(id)?;
        let rule_id = self.new_id("rule");
        let record = rule_record(rule_id, rule);
        if let Some(firewall) = self.firewalls.get_mut(id) {
            firewall.rules.push(record.clone());
        }
        Ok(model::AddFirewallRuleBody {
            firewall_id: id.to_string(),
            rule: record,
        })
    }

    pub fn remove_firewall_rule(
        &mut self,
        id: &str,
        rule_id: &str,
        now: SimTime,
    ) -> ApiResult<model::RemoveFirewallRuleBody> {
        self.settle(now);
        self.live_firewall(id)?;
        let firewall = self
            .firewalls
            .get_mut(id)
            .ok_or_else(|| ApiError::not_found("firewall", id))?;
        let before = firewall.rules.len();
        firewall.rules.retain(|rule| rule.id != rule_id);
        if firewall.rules.len() == before {
            return Err(ApiError::not_found("firewall rule", rule_id));
        }
        Ok(model::RemoveFirewallRuleBody {
            firewall_id: id.to_string(),
            rule_id: rule_id.to_string(),
        })
    }

    /// Sets the attachments to exactly `vm_ids` (instances of the firewall's region).
    pub fn attach_firewall(
        &mut self,
        id: &str,
        vm_ids: &[String],
        now: SimTime,
    ) -> ApiResult<model::Firewall> {
        self.settle(now);
        let region = self.live_firewall(id)?.region.clone();
        let mut wanted: Vec<String> = Vec::with_capacity(vm_ids.len());
        for vm_id in vm_ids {
            let instance = self
                .instances
                .get(vm_id)
                .filter(|i| i.is_live(now))
                .ok_or_else(|| {
                    ApiError::validation(format!("vm_ids: unknown instance {vm_id:?}"))
                })?;
            if instance.region != region {
                return Err(ApiError::validation(format!(
                    "vm_ids: instance {vm_id} is in region {}, the firewall in {region}",
                    instance.region
                )));
            }
            if !wanted.contains(vm_id) {
                wanted.push(vm_id.clone());
            }
        }
        if let Some(firewall) = self.firewalls.get_mut(id) {
            firewall.attached = wanted;
        }
        self.get_firewall(id, now)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use gpucloud_cloud::model::{Direction, Tier, VmStatus};

    fn rule(cidr: &str, min: Option<u32>, max: Option<u32>) -> model::NewRule {
        model::NewRule {
            direction: Direction::Ingress,
            protocol: Protocol::Tcp,
            ethertype: Ethertype::Ipv4,
            remote_ip_prefix: cidr.to_string(),
            port_range_min: min,
            port_range_max: max,
        }
    }

    fn field_of(result: ApiResult<()>) -> String {
        result
            .unwrap_err()
            .to_string()
            .split(':')
            .next()
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn rule_validation_names_the_field() {
        assert!(validate_rule(&rule("10.0.0.0/8", Some(22), Some(22))).is_ok());
        assert!(validate_rule(&rule("0.0.0.0/0", None, None)).is_ok());
        // (prefix, port_range_min, port_range_max, the field the refusal names)
        let refused = [
            ("10.0.0.0", None, None, "remote_ip_prefix"),
            ("10.0.0.0/33", None, None, "remote_ip_prefix"),
            ("300.0.0.0/8", None, None, "remote_ip_prefix"),
            ("2001:db8::/32", None, None, "remote_ip_prefix"),
            ("10.0.0.0/8", Some(0), Some(22), "port_range_min"),
            ("10.0.0.0/8", Some(1), Some(65536), "port_range_max"),
            ("10.0.0.0/8", Some(80), Some(22), "port_range_min"),
            ("10.0.0.0/8", Some(80), None, "port_range_max"),
        ];
        for (cidr, min, max, field) in refused {
            assert_eq!(
                field_of(validate_rule(&rule(cidr, min, max))),
                field,
                "{cidr}"
            );
        }
        let mut bad = rule("10.0.0.0/8", None, None);
        bad.protocol = Protocol::Other("sctp".into());
        assert_eq!(field_of(validate_rule(&bad)), "protocol");
        let mut bad = rule("10.0.0.0/8", None, None);
        bad.direction = Direction::Other("sideways".into());
        assert_eq!(field_of(validate_rule(&bad)), "direction");
        let mut bad = rule("10.0.0.0/8", None, None);
        bad.ethertype = Ethertype::Other("IPX".into());
        assert_eq!(field_of(validate_rule(&bad)), "ethertype");
        let mut v6 = rule("2001:db8::/32", Some(443), Some(443));
        v6.ethertype = Ethertype::Ipv6;
        assert!(validate_rule(&v6).is_ok());
    }

    #[test]
    fn attach_sets_attachments_exactly_and_shows_power_status() {
        let mut engine = engine();
        let request = |name: &str| model::CreateInstanceRequest {
            tier: Some(Tier::Advanced),
            ..model::CreateInstanceRequest::new(
                name,
                "us-east-1",
                "L40S",
                1,
                "ubuntu-22.04-cuda-12",
            )
        };
        let a = engine
            .create_instance(&request("a"), secs(0))
            .unwrap()
            .instance_id;
        let b = engine
            .create_instance(&request("b"), secs(0))
            .unwrap()
            .instance_id;
        let firewall = engine
            .create_firewall(
                &model::CreateFirewallRequest {
                    name: "fw".to_string(),
                    region: "us-east-1".to_string(),
                    description: String::new(),
                    rules: vec![rule("0.0.0.0/0", Some(22), Some(22))],
                },
                secs(0),
            )
            .unwrap();
        assert_eq!(firewall.rules.len(), 1);
        let both = engine
            .attach_firewall(&firewall.id, &[a.clone(), b.clone()], secs(20))
            .unwrap();
        assert_eq!(both.attachments.len(), 2);
        assert_eq!(both.attachments[0].vm.name, "a");
        assert_eq!(both.attachments[0].vm.status, VmStatus::Running);
        let only_b = engine
            .attach_firewall(&firewall.id, std::slice::from_ref(&b), secs(21))
            .unwrap();
        assert_eq!(only_b.attachments.len(), 1);
        assert_eq!(only_b.attachments[0].vm.id, b);
        assert_eq!(engine.instance_firewalls(&b, secs(21)).unwrap().len(), 1);
        assert!(engine.instance_firewalls(&a, secs(21)).unwrap().is_empty());
        assert_eq!(
            engine
                .delete_firewall(&firewall.id, secs(22))
                .unwrap_err()
                .code(),
            "CONFLICT"
        );
        let err = engine
            .attach_firewall(&firewall.id, &["vm-nope".to_string()], secs(22))
            .unwrap_err();
        assert!(err.to_string().starts_with("vm_ids:"));
        engine.attach_firewall(&firewall.id, &[], secs(23)).unwrap();
        assert!(engine.delete_firewall(&firewall.id, secs(24)).is_ok());
        // Duplicate firewall names are accepted.
        let make = |engine: &mut Engine| {
            engine.create_firewall(
                &model::CreateFirewallRequest {
                    name: "same".to_string(),
                    region: "us-east-1".to_string(),
                    description: String::new(),
                    rules: Vec::new(),
                },
                secs(30),
            )
        };
        assert!(make(&mut engine).is_ok());
        assert!(make(&mut engine).is_ok());
    }
}
