#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The CEL rules of the CRDs, evaluated client-side by kube's validator: each case is one
//! admission decision a user will meet.

use gpucloud_api::gpu_instance::{Direction, EtherType, InstanceSource, StartupScript};
use gpucloud_api::*;
use kube::core::cel::{validate_cel, validate_cel_update};

fn instance() -> GpuInstance {
    GpuInstance::new(
        "train-1",
        GpuInstanceSpec {
            managed: ManagedFields::default(),
            region: Some("us-east-1".into()),
            placement: None,
            gpu_type: Some("H100-80G".into()),
            gpu_count: Some(1),
            os_image: Some("ubuntu-22.04-cuda-12".into()),
            image_ref: None,
            source: None,
            tier: Tier::Advanced,
            ssh_key_refs: vec![],
            startup_script: None,
            public_ip: true,
            security_rules: vec![],
            power_state: PowerState::Running,
            max_hourly_rate: None,
            connection_secret: None,
            final_snapshot: None,
            lifetime: None,
            schedule: None,
        },
    )
}

fn rule(cidr: &str, min: i32, max: i32) -> SecurityRule {
    SecurityRule {
        direction: Direction::Ingress,
        protocol: "tcp".into(),
        ether_type: EtherType::IPv4,
        remote_ip_prefix: cidr.into(),
        port_range_min: Some(min),
        port_range_max: Some(max),
    }
}

fn rejected_with<T: kube::CustomResourceExt + serde::Serialize>(
    obj: &T,
    old: Option<&T>,
    needle: &str,
) {
    let result = match old {
        Some(old) => validate_cel_update(obj, old),
        None => validate_cel(obj),
    };
    let err = result.expect_err("the rule should reject this object");
    let text = format!("{err:?}");
    assert!(text.contains(needle), "expected {needle:?} in {text}");
}

#[test]
fn a_plain_instance_is_accepted_on_create_and_unchanged_update() {
    let i = instance();
    validate_cel(&i).unwrap();
    validate_cel_update(&i, &i).unwrap();
}

#[test]
fn exactly_one_boot_source() {
    let mut i = instance();
    i.spec.image_ref = Some(LocalRef { name: "img".into() });
    rejected_with(&i, None, "exactly one of osImage, imageRef and source");
    let mut i = instance();
    i.spec.os_image = None;
    rejected_with(&i, None, "exactly one of osImage, imageRef and source");
}

#[test]
fn restore_inherits_gpu_type() {
    let mut i = instance();
    i.spec.os_image = None;
    i.spec.source = Some(Box::new(InstanceSource {
        snapshot_ref: LocalRef { name: "s".into() },
    }));
    rejected_with(&i, None, "inherited from the snapshot");
    i.spec.gpu_type = None;
    i.spec.gpu_count = None;
    validate_cel(&i).unwrap();
}

#[test]
fn immutable_instance_fields_say_so() {
    let old = instance();
    let mut new = old.clone();
    new.spec.region = Some("eu-west-1".into());
    rejected_with(&new, Some(&old), "region is immutable");
    let mut new = old.clone();
    new.spec.gpu_type = Some("A100-80G".into());
    rejected_with(&new, Some(&old), "gpuType is immutable");
    let mut new = old.clone();
    new.spec.gpu_count = Some(2);
    rejected_with(&new, Some(&old), "gpuCount is immutable");
    let mut new = old.clone();
    new.spec.tier = Tier::Legacy;
    rejected_with(&new, Some(&old), "tier is immutable");
    // Mutable fields pass.
    let mut new = old.clone();
    new.spec.power_state = PowerState::Stopped;
    new.spec.public_ip = false;
    validate_cel_update(&new, &old).unwrap();
}

#[test]
fn security_rules_need_legacy_tier_a_cidr_and_ordered_ports() {
    let mut i = instance();
    i.spec.security_rules = vec![rule("10.0.0.0/8", 22, 22)];
    rejected_with(&i, None, "Legacy tier only");
    i.spec.tier = Tier::Legacy;
    validate_cel(&i).unwrap();
    i.spec.security_rules = vec![rule("10.0.0.0/33", 22, 22)];
    rejected_with(&i, None, "must be a CIDR");
    i.spec.security_rules = vec![rule("not-a-cidr", 22, 22)];
    rejected_with(&i, None, "must be a CIDR");
    i.spec.security_rules = vec![rule("10.0.0.0/8", 443, 80)];
    rejected_with(&i, None, "portRangeMin must not exceed portRangeMax");
    i.spec.security_rules = vec![rule("2001:db8::/32", 22, 22)];
    rejected_with(&i, None, "etherType");
    // Ports: both or neither, and only for tcp and udp.
    let mut half = rule("10.0.0.0/8", 22, 22);
    half.port_range_max = None;
    i.spec.security_rules = vec![half];
    rejected_with(&i, None, "set both portRangeMin and portRangeMax");
    let mut icmp = rule("10.0.0.0/8", 22, 22);
    icmp.protocol = "icmp".into();
    i.spec.security_rules = vec![icmp.clone()];
    rejected_with(&i, None, "ports apply to tcp and udp only");
    icmp.port_range_min = None;
    icmp.port_range_max = None;
    i.spec.security_rules = vec![icmp];
    validate_cel(&i).unwrap();
}

#[test]
fn startup_script_is_inline_or_from_a_config_map() {
    let mut i = instance();
    i.spec.startup_script = Some(Box::new(StartupScript {
        inline: None,
        config_map_ref: None,
    }));
    rejected_with(&i, None, "exactly one of inline and configMapRef");
}

#[test]
fn volumes_grow_but_never_shrink() {
    let old = Volume::new(
        "data",
        VolumeSpec {
            managed: ManagedFields::default(),
            region: "us-east-1".into(),
            size_gb: 100,
            volume_type: "NVMe".into(),
            tier: Tier::Advanced,
            bootable: false,
            instance_ref: None,
            source: None,
            lifetime: None,
        },
    );
    let mut grown = old.clone();
    grown.spec.size_gb = 200;
    validate_cel_update(&grown, &old).unwrap();
    let mut shrunk = old.clone();
    shrunk.spec.size_gb = 50;
    rejected_with(&shrunk, Some(&old), "cannot shrink");
    let mut moved = old.clone();
    moved.spec.instance_ref = Some(LocalRef {
        name: "train-1".into(),
    });
    validate_cel_update(&moved, &old).unwrap();
    // A volume's lifetime ends in its deletion, said out loud.
    let mut expiring = old.clone();
    expiring.spec.lifetime =
        Some(serde_json::from_value(serde_json::json!({"ttl": "24h"})).unwrap());
    rejected_with(&expiring, None, "write onExpiry: Delete");
    expiring.spec.lifetime = Some(
        serde_json::from_value(serde_json::json!({"ttl": "24h", "onExpiry": "Delete"})).unwrap(),
    );
    validate_cel(&expiring).unwrap();
}

#[test]
fn snapshots_name_one_source_instance_that_never_changes() {
    let spec = |r: Option<&str>, id: Option<&str>| SnapshotSpec {
        managed: ManagedFields::default(),
        instance_ref: r.map(|n| LocalRef { name: n.into() }),
        instance_id: id.map(Into::into),
        description: String::new(),
        labels: vec![],
        lifetime: None,
    };
    rejected_with(
        &Snapshot::new("s", spec(Some("a"), Some("vm-1"))),
        None,
        "exactly one of instanceRef and instanceId",
    );
    rejected_with(
        &Snapshot::new("s", spec(None, None)),
        None,
        "exactly one of instanceRef and instanceId",
    );
    let old = Snapshot::new("s", spec(Some("a"), None));
    validate_cel(&old).unwrap();
    rejected_with(
        &Snapshot::new("s", spec(Some("b"), None)),
        Some(&old),
        "immutable",
    );
}

#[test]
fn ssh_keys_are_checked_for_openssh_format() {
    let key = |k: &str| {
        SshKey::new(
            "k",
            SshKeySpec {
                managed: ManagedFields::default(),
                public_key: Some(k.into()),
                private_key_secret: None,
            },
        )
    };
    validate_cel(&key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl user@host")).unwrap();
    rejected_with(&key("hello world"), None, "OpenSSH public key");
    rejected_with(
        &key("-----BEGIN OPENSSH PRIVATE KEY-----"),
        None,
        "OpenSSH public key",
    );
}

#[test]
fn firewall_region_is_immutable() {
    let old = Firewall::new(
        "fw",
        FirewallSpec {
            managed: ManagedFields::default(),
            region: "us-east-1".into(),
            description: String::new(),
            rules: vec![rule("0.0.0.0/0", 22, 22)],
            instance_refs: vec![],
            instance_selector: None,
        },
    );
    validate_cel(&old).unwrap();
    let mut new = old.clone();
    new.spec.region = "eu-west-1".into();
    rejected_with(&new, Some(&old), "region is immutable");
}

/// An object of kind `T` with `spec`, through its JSON form (as a user would write it).
fn from_spec<T: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned>(
    spec: serde_json::Value,
) -> T {
    serde_json::from_value(serde_json::json!({
        "apiVersion": T::api_version(&()),
        "kind": T::kind(&()),
        "metadata": {"name": "x", "namespace": "team-a"},
        "spec": spec,
    }))
    .unwrap()
}

/// The Secret a spec names is fixed at creation: naming one later, naming another or
/// dropping it is refused, with a message naming the field and saying to recreate.
fn secret_reference_is_immutable<T>(
    base: serde_json::Value,
    field: &str,
    first: serde_json::Value,
    second: serde_json::Value,
) where
    T: kube::CustomResourceExt
        + kube::Resource<DynamicType = ()>
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let with = |value: Option<&serde_json::Value>| {
        let mut spec = base.clone();
        if let Some(value) = value {
            spec[field] = value.clone();
        }
        from_spec::<T>(spec)
    };
    let kind = T::kind(&());
    let without = with(None);
    let named = with(Some(&first));
    let other = with(Some(&second));
    validate_cel(&named).unwrap_or_else(|e| panic!("{kind}: {e:?}"));
    validate_cel_update(&named, &named).unwrap_or_else(|e| panic!("{kind}: {e:?}"));
    validate_cel_update(&without, &without).unwrap_or_else(|e| panic!("{kind}: {e:?}"));
    for (new, old, what) in [
        (&other, &named, "changed"),
        (&without, &named, "removed"),
        (&named, &without, "added"),
    ] {
        let result = validate_cel_update(new, old);
        let err = result.expect_err(&format!("{kind}: {field} {what} was accepted"));
        let text = format!("{err:?}");
        assert!(
            text.contains(&format!("{field} is immutable")) && text.contains("recreate"),
            "{kind}: {field} {what}: {text}"
        );
    }
}

#[test]
fn the_credentials_secret_reference_is_immutable_on_every_kind() {
    let field = "credentialsSecretRef";
    let first = serde_json::json!({"name": "team-key"});
    let second = serde_json::json!({"name": "deploy-key"});
    let rule = serde_json::json!({"direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
        "remoteIpPrefix": "0.0.0.0/0", "portRangeMin": 22, "portRangeMax": 22});
    secret_reference_is_immutable::<GpuInstance>(
        serde_json::to_value(&instance().spec).unwrap(),
        field,
        first.clone(),
        second.clone(),
    );
    secret_reference_is_immutable::<Volume>(
        serde_json::json!({"region": "us-east-1", "sizeGb": 10}),
        field,
        first.clone(),
        second.clone(),
    );
    secret_reference_is_immutable::<Snapshot>(
        serde_json::json!({"instanceId": "vm-1"}),
        field,
        first.clone(),
        second.clone(),
    );
    secret_reference_is_immutable::<Image>(
        serde_json::json!({"snapshotRef": {"name": "s"}}),
        field,
        first.clone(),
        second.clone(),
    );
    secret_reference_is_immutable::<SshKey>(
        serde_json::json!({}),
        field,
        first.clone(),
        second.clone(),
    );
    secret_reference_is_immutable::<Firewall>(
        serde_json::json!({"region": "us-east-1", "rules": [rule]}),
        field,
        first.clone(),
        second,
    );
    // Another key of the same Secret is another reference too.
    secret_reference_is_immutable::<Volume>(
        serde_json::json!({"region": "us-east-1", "sizeGb": 10}),
        field,
        first,
        serde_json::json!({"name": "team-key", "key": "otherKey"}),
    );
}

#[test]
fn the_private_key_secret_of_an_ssh_key_is_immutable() {
    secret_reference_is_immutable::<SshKey>(
        serde_json::json!({}),
        "privateKeySecret",
        serde_json::json!("dev-key-ssh"),
        serde_json::json!("deploy-key"),
    );
}

#[test]
fn the_connection_secret_of_an_instance_is_immutable() {
    secret_reference_is_immutable::<GpuInstance>(
        serde_json::to_value(&instance().spec).unwrap(),
        "connectionSecret",
        serde_json::json!("train-1-ssh"),
        serde_json::json!("deploy-key"),
    );
}

#[test]
fn deletion_policy_snapshot_is_for_gpu_instances_only() {
    let mut machine = instance();
    machine.spec.managed.deletion_policy = DeletionPolicy::Snapshot;
    validate_cel(&machine).unwrap();

    fn refused<T>(mut spec: serde_json::Value)
    where
        T: kube::CustomResourceExt
            + kube::Resource<DynamicType = ()>
            + serde::Serialize
            + serde::de::DeserializeOwned,
    {
        validate_cel(&from_spec::<T>(spec.clone()))
            .unwrap_or_else(|e| panic!("{}: {e:?}", T::kind(&())));
        spec["deletionPolicy"] = serde_json::json!("Orphan");
        validate_cel(&from_spec::<T>(spec.clone()))
            .unwrap_or_else(|e| panic!("{}: {e:?}", T::kind(&())));
        spec["deletionPolicy"] = serde_json::json!("Snapshot");
        rejected_with(
            &from_spec::<T>(spec),
            None,
            "deletionPolicy Snapshot is for GpuInstance only",
        );
    }
    let rule = serde_json::json!({"direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
        "remoteIpPrefix": "0.0.0.0/0", "portRangeMin": 22, "portRangeMax": 22});
    refused::<Volume>(serde_json::json!({"region": "us-east-1", "sizeGb": 10}));
    refused::<Snapshot>(serde_json::json!({"instanceId": "vm-1"}));
    refused::<Image>(serde_json::json!({"snapshotRef": {"name": "s"}}));
    refused::<SshKey>(serde_json::json!({}));
    refused::<Firewall>(serde_json::json!({"region": "us-east-1", "rules": [rule]}));
}

fn with_lifetime(lifetime: serde_json::Value) -> GpuInstance {
    let mut i = instance();
    i.spec.lifetime = Some(serde_json::from_value(lifetime).unwrap());
    i
}

/// Each lifetime a person could get wrong is refused at admission, naming the field.
#[test]
fn lifetimes_are_checked_at_admission() {
    for accepted in [
        serde_json::json!({"ttl": "2h"}),
        serde_json::json!({"ttl": "1h30m", "onExpiry": "Delete", "warnBefore": "10m"}),
        serde_json::json!({"ttl": "1.5h", "onExpiry": "Snapshot"}),
        serde_json::json!({"expiresAt": "2026-12-01T18:00:00Z", "onExpiry": "Stop"}),
    ] {
        let i = with_lifetime(accepted.clone());
        assert!(
            validate_cel(&i).is_ok(),
            "{accepted}: {:?}",
            validate_cel(&i)
        );
    }
    for (lifetime, needle) in [
        (
            serde_json::json!({}),
            "set exactly one of ttl and expiresAt",
        ),
        (
            serde_json::json!({"ttl": "2h", "expiresAt": "2026-12-01T18:00:00Z"}),
            "set exactly one of ttl and expiresAt",
        ),
        (
            serde_json::json!({"ttl": "-1h"}),
            "ttl must be a positive duration",
        ),
        (
            serde_json::json!({"ttl": "0s"}),
            "ttl must be a positive duration",
        ),
        (
            serde_json::json!({"ttl": "2 days"}),
            "ttl must be a positive duration",
        ),
        (
            serde_json::json!({"ttl": "2h", "warnBefore": "soon"}),
            "warnBefore must be a duration",
        ),
        (
            serde_json::json!({"ttl": "2h", "onExpiry": "Hibernate"}),
            "onExpiry Hibernate needs tier Legacy",
        ),
    ] {
        rejected_with(&with_lifetime(lifetime), None, needle);
    }
    let mut orphaned = with_lifetime(serde_json::json!({"ttl": "2h", "onExpiry": "Delete"}));
    orphaned.spec.managed.deletion_policy = DeletionPolicy::Orphan;
    rejected_with(&orphaned, None, "leave the resource billing");
    // Editing the lifetime is how it is extended.
    let old = with_lifetime(serde_json::json!({"ttl": "2h"}));
    let new = with_lifetime(serde_json::json!({"ttl": "8h"}));
    assert!(validate_cel_update(&new, &old).is_ok());
}

/// A schedule's times are read at admission: a time that is not one, and a window that ends
/// before it starts, are refused naming the field.
#[test]
fn schedules_are_checked_at_admission() {
    let with_schedule = |schedule: serde_json::Value| {
        let mut i = instance();
        i.spec.schedule = Some(serde_json::from_value(schedule).unwrap());
        i
    };
    let window = |from: &str, to: &str| {
        serde_json::json!({"timeZone": "Europe/Berlin",
                           "windows": [{"days": ["Mon", "Fri"], "from": from, "to": to}]})
    };
    validate_cel(&with_schedule(window("08:00", "20:00"))).unwrap();
    validate_cel(&with_schedule(window("08:00:30", "24:00"))).unwrap();
    rejected_with(
        &with_schedule(window("8am", "20:00")),
        None,
        "from must be a time of day",
    );
    rejected_with(
        &with_schedule(window("08:00", "25:00")),
        None,
        "to must be a time of day",
    );
    rejected_with(
        &with_schedule(window("20:00", "08:00")),
        None,
        "to must be after from",
    );
    let mut hibernating = window("08:00", "20:00");
    hibernating["outside"] = "Hibernated".into();
    rejected_with(
        &with_schedule(hibernating),
        None,
        "schedule.outside Hibernated needs tier Legacy",
    );
}

#[test]
fn a_placement_replaces_region_gpu_type_and_count_and_never_changes() {
    let placed = from_spec::<GpuInstance>(serde_json::json!({
        "osImage": "ubuntu-22.04-cuda-12",
        "placement": {
            "policy": "Cheapest",
            "alternatives": [
                {"gpuTypes": ["H100-80G", "A100-80G"], "regions": ["us-east-1", "eu-west-1"]},
                {"gpuTypes": ["L40S"], "gpuCount": 2, "regions": ["us-east-1"]},
            ],
        },
    }));
    validate_cel(&placed).unwrap();
    validate_cel_update(&placed, &placed).unwrap();
    // Both, or neither.
    let mut both = placed.clone();
    both.spec.region = Some("us-east-1".into());
    rejected_with(
        &both,
        None,
        "set exactly one of spec.region and spec.placement",
    );
    let mut neither = placed.clone();
    neither.spec.placement = None;
    rejected_with(
        &neither,
        None,
        "set exactly one of spec.region and spec.placement",
    );
    let mut typed = placed.clone();
    typed.spec.gpu_type = Some("H100-80G".into());
    rejected_with(&typed, None, "given by each alternative of spec.placement");
    // A custom image is in one region.
    let mut imaged = placed.clone();
    imaged.spec.os_image = None;
    imaged.spec.image_ref = Some(LocalRef { name: "img".into() });
    rejected_with(&imaged, None, "spec.placement needs osImage");
    // Immutable, and not to be swapped for a region.
    let mut moved = placed.clone();
    if let Some(p) = moved.spec.placement.as_mut() {
        p.alternatives.pop();
    }
    rejected_with(&moved, Some(&placed), "placement is immutable");
    rejected_with(&instance(), Some(&placed), "placement is immutable");
}
