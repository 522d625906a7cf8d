//! Property tests of the spec-to-request mapping: arbitrary specs (arbitrary JSON shaped like
//! a spec, and arbitrary valid rules) never make the mapping panic; what the mapping sends
//! carries the spec's values; a rule sent to the cloud and listed back is recognised as the
//! spec's rule (and only that rule), so the firewall diff never adds or removes it again;
//! cloud names always fit the cloud and carry the mark.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::flow::naming::{MAX_CLOUD_NAME, carries_mark, cloud_name};
use crate::kinds::gpu_instance::create::create_request as instance_request;
use crate::kinds::gpu_instance::{rule_diff, to_cloud_rule};
use crate::kinds::volume::create_request as volume_request;
use gpucloud_api::gpu_instance::{Direction, EtherType, SecurityRule};
use gpucloud_api::{FirewallSpec, GpuInstanceSpec, VolumeSpec};
use gpucloud_cloud::model::SecurityRule as CloudRule;
use proptest::prelude::*;
use serde_json::{Value, json};

fn rules() -> impl Strategy<Value = SecurityRule> {
    (
        prop_oneof![Just(Direction::Ingress), Just(Direction::Egress)],
        prop_oneof![
            Just("tcp".to_string()),
            Just("udp".to_string()),
            Just("icmp".to_string()),
            "[a-z0-9]{1,16}",
        ],
        prop_oneof![Just(EtherType::IPv4), Just(EtherType::IPv6)],
        prop_oneof![
            "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}/[0-9]{1,2}",
            "[0-9a-f:]{2,20}/[0-9]{1,3}",
        ],
        prop::option::of((1i32..=65535, 1i32..=65535)),
    )
        .prop_map(|(direction, protocol, ether_type, cidr, ports)| {
            let (min, max) = match ports {
                Some((a, b)) => (Some(a.min(b)), Some(a.max(b))),
                None => (None, None),
            };
            SecurityRule {
                direction,
                protocol,
                ether_type,
                remote_ip_prefix: cidr,
                port_range_min: min,
                port_range_max: max,
            }
        })
}

/// The rule as the cloud lists it after it was sent: the request's JSON with an id.
fn listed_back(rule: &SecurityRule, id: &str) -> CloudRule {
    let mut sent = serde_json::to_value(to_cloud_rule(rule)).unwrap();
    sent["id"] = json!(id);
    serde_json::from_value(sent).unwrap()
}

/// Arbitrary JSON; strings and numbers of every sign and size.
fn json_values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-3i64..20).prop_map(|n| json!(n)),
        ".{0,10}".prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A spec-shaped object: the real field names with arbitrary values, over a valid base.
fn spec_like(base: Value, fields: &'static [&'static str]) -> impl Strategy<Value = Value> {
    prop::collection::btree_map(prop::sample::select(fields), json_values(), 0..5).prop_map(
        move |changes| {
            let mut spec = base.clone();
            for (field, value) in changes {
                spec[field] = value;
            }
            spec
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_rule_sent_and_listed_back_is_the_same_rule(rule in rules(), other in rules()) {
        let back = listed_back(&rule, "r-1");
        let (missing, extra) = rule_diff(std::slice::from_ref(&rule), std::slice::from_ref(&back));
        prop_assert!(missing.is_empty() && extra.is_empty(), "{rule:?} listed back as {back:?}");
        // Another rule matches it only when equal in content.
        let (missing, _) = rule_diff(std::slice::from_ref(&other), std::slice::from_ref(&back));
        prop_assert_eq!(missing.is_empty(), other == rule);
    }

    #[test]
    fn volume_specs_map_to_requests_or_refusals(
        spec in spec_like(
            json!({"region": "us-east-1", "sizeGb": 10}),
            &["region", "sizeGb", "volumeType", "tier", "bootable", "instanceRef", "deletionPolicy"],
        ),
    ) {
        let Ok(spec) = serde_json::from_value::<VolumeSpec>(spec) else {
            return Ok(());
        };
        match volume_request(&spec) {
            Ok(request) => {
                prop_assert!(spec.size_gb > 0);
                prop_assert_eq!(request.size, u64::try_from(spec.size_gb).unwrap());
                prop_assert_eq!(&request.region, &spec.region);
                prop_assert_eq!(request.volume_type.as_deref(), Some(spec.volume_type.as_str()));
                let wire = serde_json::to_value(&request).unwrap();
                prop_assert!(matches!(wire["tier"].as_str(), Some("legacy" | "advanced")), "{wire}");
                prop_assert_eq!(wire["bootable"].as_bool(), Some(spec.bootable));
            }
            Err(error) => prop_assert!(spec.size_gb <= 0, "{error}"),
        }
    }

    #[test]
    fn instance_specs_map_to_requests_or_refusals(
        spec in spec_like(
            json!({"region": "us-east-1", "gpuType": "L40S", "osImage": "ubuntu-22.04-cuda-12"}),
            &["region", "gpuType", "gpuCount", "osImage", "tier", "publicIp", "powerState",
              "maxHourlyRate", "sshKeyRefs", "securityRules", "startupScript"],
        ),
    ) {
        let Ok(spec) = serde_json::from_value::<GpuInstanceSpec>(spec) else {
            return Ok(());
        };
        let placed = match crate::kinds::gpu_instance::placement::candidates(&spec) {
            Ok((_, placed)) => placed,
            Err(error) => {
                prop_assert!(
                    spec.gpu_count.is_some_and(|n| n <= 0)
                        || spec.gpu_type.is_none()
                        || spec.region.is_none(),
                    "{error}"
                );
                return Ok(());
            }
        };
        prop_assert_eq!(placed.len(), 1);
        let request = instance_request(
            &spec,
            &placed[0],
            spec.os_image.clone().unwrap_or_default(),
            vec!["key-1".into()],
            None,
        );
        match request {
            Ok(request) => {
                prop_assert_eq!(i64::from(request.gpu_count), i64::from(spec.gpu_count.unwrap_or(1)));
                prop_assert!(request.gpu_count >= 1);
                prop_assert_eq!(Some(&request.region), spec.region.as_ref());
                prop_assert_eq!(Some(&request.gpu_type), spec.gpu_type.as_ref());
                prop_assert_eq!(request.public_ip, Some(spec.public_ip));
                let wire = serde_json::to_value(&request).unwrap();
                prop_assert!(matches!(wire["tier"].as_str(), Some("legacy" | "advanced")), "{wire}");
            }
            Err(error) => prop_assert!(error.to_string().contains("spec.startupScript"), "{error}"),
        }
        for rule in &spec.security_rules {
            let _ = to_cloud_rule(rule);
        }
    }

    #[test]
    fn firewall_specs_never_break_the_rule_mapping(
        spec in spec_like(
            json!({"region": "us-east-1"}),
            &["region", "description", "rules", "instanceRefs", "instanceSelector"],
        ),
    ) {
        if let Ok(spec) = serde_json::from_value::<FirewallSpec>(spec) {
            let listed: Vec<CloudRule> = spec
                .rules
                .iter()
                .enumerate()
                .map(|(i, r)| listed_back(r, &format!("r-{i}")))
                .collect();
            let (missing, extra) = rule_diff(&spec.rules, &listed);
            prop_assert!(missing.is_empty() && extra.is_empty());
        }
    }

    #[test]
    fn cloud_names_fit_the_cloud_and_carry_the_mark(
        namespace in "\\PC{0,80}",
        name in "\\PC{0,300}",
        uid in "\\PC{0,40}",
        other_uid in "\\PC{0,40}",
    ) {
        let cloud = cloud_name(&namespace, &name, &uid);
        prop_assert!(cloud.len() <= MAX_CLOUD_NAME, "{cloud}");
        prop_assert!(carries_mark(&cloud), "{cloud}");
        prop_assert!(!cloud.contains("--"), "{cloud}");
        prop_assert_eq!(&cloud, &cloud_name(&namespace, &name, &uid));
        if other_uid != uid {
            prop_assert_ne!(cloud, cloud_name(&namespace, &name, &other_uid));
        }
    }
}
