#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every way a GpuInstance comes to `Ready=True`, each checked against the cloud simulator's
//! record of its machine at the moment Ready is seen: the hardware, region and tier the spec
//! states (or its chosen placement, or its snapshot's), the power state it asks for (through
//! `powerState`, a schedule, or an ended lifetime), the image, public IP, security rules, SSH
//! keys and connection Secret. Ready is looked at every 20 ms from the create on, and every
//! time it is `True` for the object's current generation the record must agree.

use crate::support::{self, Env, eventually};
use gpucloud_api::*;
use gpucloud_cloud::model::{Instance, InstanceStatus};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// One path to Ready: the object, the power state its machine must be in when Ready, and
/// whether the walk goes on after its first Ready (an ended lifetime comes later).
struct Path {
    name: &'static str,
    spec: serde_json::Value,
    annotations: Vec<(&'static str, String)>,
    /// The machine's state whenever the object is Ready, by the Ready message's words.
    power: fn(&str) -> InstanceStatus,
    /// Ready is followed until its message contains this.
    until: &'static str,
}

fn running(_: &str) -> InstanceStatus {
    InstanceStatus::Active
}

fn stopped(_: &str) -> InstanceStatus {
    InstanceStatus::Shutoff
}

fn hibernated(_: &str) -> InstanceStatus {
    InstanceStatus::Hibernated
}

/// Running until its lifetime ends, then stopped.
fn running_then_stopped(message: &str) -> InstanceStatus {
    if message.contains("stopped") {
        InstanceStatus::Shutoff
    } else {
        InstanceStatus::Active
    }
}

fn base(extra: serde_json::Value) -> serde_json::Value {
    let mut spec = serde_json::json!({
        "region": "us-east-1",
        "gpuType": "H100-80G",
        "gpuCount": 1,
        "osImage": "ubuntu-22.04-cuda-12",
    });
    for (key, value) in extra.as_object().unwrap() {
        spec[key] = value.clone();
    }
    spec
}

/// A schedule whose one window is on another day than today, so the machine is kept off.
fn off_schedule() -> serde_json::Value {
    let today = k8s_openapi::jiff::Timestamp::now()
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
        .weekday();
    let other = today.wrapping_add(3);
    let day = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        [usize::try_from(other.to_monday_zero_offset()).unwrap()];
    serde_json::json!({"timeZone": "UTC", "windows": [{"days": [day], "from": "08:00", "to": "09:00"}]})
}

fn created_paths() -> Vec<Path> {
    let rule = serde_json::json!({"protocol": "tcp", "remoteIpPrefix": "10.0.0.0/8", "portRangeMin": 22, "portRangeMax": 22});
    vec![
        Path {
            name: "runs",
            spec: base(serde_json::json!({
                "tier": "Legacy", "publicIp": true, "securityRules": [rule], "sshKeyRefs": [{"name": "walk-key"}],
                "connectionSecret": "runs-ssh",
            })),
            annotations: Vec::new(),
            power: running,
            until: "running",
        },
        Path {
            name: "private",
            spec: base(
                serde_json::json!({"publicIp": false, "gpuType": "A100-80G", "gpuCount": 2, "region": "eu-west-1"}),
            ),
            annotations: Vec::new(),
            power: running,
            until: "running",
        },
        Path {
            name: "stopped",
            spec: base(serde_json::json!({"powerState": "Stopped"})),
            annotations: Vec::new(),
            power: stopped,
            until: "stopped",
        },
        Path {
            name: "hibernated",
            spec: base(serde_json::json!({"powerState": "Hibernated", "tier": "Legacy"})),
            annotations: Vec::new(),
            power: hibernated,
            until: "hibernated",
        },
        Path {
            name: "off-hours",
            spec: base(serde_json::json!({"schedule": off_schedule()})),
            annotations: Vec::new(),
            power: stopped,
            until: "stopped",
        },
        Path {
            name: "short-lived",
            spec: base(serde_json::json!({"lifetime": {"ttl": "20s", "onExpiry": "Stop"}})),
            annotations: Vec::new(),
            power: running_then_stopped,
            until: "stopped",
        },
        Path {
            name: "placed",
            spec: serde_json::json!({
                "osImage": "ubuntu-22.04-cuda-12",
                "placement": {"policy": "Cheapest", "alternatives": [
                    {"gpuTypes": ["H100-80G"], "regions": ["us-east-1"]},
                    {"gpuTypes": ["A100-80G", "L40S"], "regions": ["eu-west-1", "us-east-1"]},
                ]},
            }),
            annotations: Vec::new(),
            power: running,
            until: "running",
        },
    ]
}

/// The fields that differ, as "field: spec vs cloud" lines.
#[derive(Default)]
struct Differences(Vec<String>);

impl Differences {
    fn check(&mut self, field: &str, wanted: String, found: String) {
        if wanted != found {
            self.0
                .push(format!("{field}: spec {wanted} vs cloud {found}"));
        }
    }
}

/// What of the spec the machine `machine` does not have.
fn differences(
    vm: &GpuInstance,
    machine: &Instance,
    power: InstanceStatus,
    key_ids: &BTreeSet<String>,
) -> Vec<String> {
    let spec = &vm.spec;
    let mut differs = Differences::default();
    hardware_differences(vm, machine, &mut differs);
    differs.check(
        "tier",
        spec.tier.cloud_value().into(),
        machine.tier.to_string(),
    );
    differs.check(
        "powerState",
        format!("{power:?}"),
        format!("{:?}", machine.status),
    );
    differs.check(
        "publicIp",
        spec.public_ip.to_string(),
        machine.public_ip_enabled.to_string(),
    );
    if let Some(os) = &spec.os_image {
        differs.check(
            "osImage",
            os.clone(),
            machine.image_id.clone().unwrap_or_default(),
        );
    }
    let wanted_rules = rule_keys(
        &spec.security_rules,
        ["remoteIpPrefix", "portRangeMin", "portRangeMax"],
    );
    let found_rules = rule_keys(
        &machine.security_rules,
        ["remote_ip_prefix", "port_range_min", "port_range_max"],
    );
    differs.check(
        "securityRules",
        format!("{wanted_rules:?}"),
        format!("{found_rules:?}"),
    );
    if spec.source.is_none() {
        let found_keys: BTreeSet<String> = machine.ssh_key_ids.iter().cloned().collect();
        differs.check(
            "sshKeyRefs",
            format!("{key_ids:?}"),
            format!("{found_keys:?}"),
        );
    }
    differs.0
}

/// Rules by their network and ports (the spec and the cloud spell the fields differently).
fn rule_keys<R: serde::Serialize>(rules: &[R], fields: [&str; 3]) -> BTreeSet<String> {
    rules
        .iter()
        .map(|rule| {
            let rule = serde_json::to_value(rule).unwrap();
            let [prefix, min, max] = fields.map(|field| rule[field].to_string());
            format!("{prefix}:{min}-{max}")
        })
        .collect()
}

/// The GPUs, their count and the region: the spec's, one of its placement's alternatives (the
/// one its status says was chosen), or, for a restore, the region it names.
fn hardware_differences(vm: &GpuInstance, machine: &Instance, differs: &mut Differences) {
    let spec = &vm.spec;
    let found = (
        machine.specs.gpu_type.clone(),
        machine.specs.gpu_count,
        machine.region.clone(),
    );
    if let Some(placement) = &spec.placement {
        let allowed = placement.alternatives.iter().any(|a| {
            a.gpu_types.contains(&found.0)
                && u32::try_from(a.gpu_count).unwrap() == found.1
                && a.regions.contains(&found.2)
        });
        differs.check(
            "placement",
            "an alternative".into(),
            (if allowed { "an alternative" } else { "another" }).into(),
        );
        let chosen = vm
            .status
            .as_ref()
            .and_then(|s| s.placement.as_ref())
            .and_then(|p| p.chosen.clone())
            .map(|c| (c.gpu_type, u32::try_from(c.gpu_count).unwrap(), c.region));
        differs.check(
            "status.placement.chosen",
            format!("{chosen:?}"),
            format!("{:?}", Some(found)),
        );
        return;
    }
    if spec.source.is_none() {
        differs.check(
            "gpuType",
            format!("{:?}", spec.gpu_type),
            format!("{:?}", Some(&found.0)),
        );
        differs.check(
            "gpuCount",
            format!("{:?}", spec.gpu_count),
            format!("{:?}", Some(found.1)),
        );
    }
    if let Some(region) = &spec.region {
        differs.check("region", region.clone(), found.2);
    }
}

/// Follows `name` until its Ready message contains `until`, checking the cloud's record each
/// time it is Ready for its generation; the number of Ready sightings checked.
async fn walk(env: &Env, path: &Path, key_ids: &BTreeSet<String>) -> usize {
    let api = env.api::<GpuInstance>();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut checked = 0;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: not Ready with {:?} within 90 s",
            path.name,
            path.until
        );
        let vm = api.get(path.name).await.unwrap();
        let status = vm.cloud_status();
        let ready = status
            .condition(condition_type::READY)
            .filter(|c| c.status == "True" && c.observed_generation == vm.metadata.generation)
            .map(|c| c.message.clone());
        if let Some(message) = ready {
            // Read at once: the machine as it is while the object says Ready.
            let machines = env.simulator.state().instances;
            let id = status.external_id.clone().expect("Ready without an id");
            let machine = machines
                .iter()
                .find(|m| m.instance_id == id)
                .unwrap_or_else(|| {
                    panic!(
                        "{}: Ready for {id}, which the cloud does not have",
                        path.name
                    )
                });
            let power = (path.power)(&message);
            let keys = if path.spec.get("sshKeyRefs").is_some() {
                key_ids.clone()
            } else {
                BTreeSet::new()
            };
            let differs = differences(&vm, machine, power, &keys);
            assert!(
                differs.is_empty(),
                "{}: Ready ({message}) while the cloud's record differs from the spec: {differs:#?}",
                path.name
            );
            checked += 1;
            if message.contains(path.until) {
                return checked;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn object_of(path: &Path) -> GpuInstance {
    let mut object: GpuInstance = support::object(path.name, path.spec.clone());
    for (key, value) in &path.annotations {
        object
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert((*key).to_string(), value.clone());
    }
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ready_gpu_instance_is_running_as_its_spec_states() {
    let env = Env::start().await;
    support::create(
        &env,
        &support::object::<SshKey>(
            "walk-key",
            serde_json::json!({"publicKey": support::PUBLIC_KEY}),
        ),
    )
    .await;
    let key_id = support::ready_id::<SshKey>(&env, "walk-key").await;
    let key_ids = BTreeSet::from([key_id]);
    let paths = created_paths();
    for path in &paths {
        support::create(&env, &object_of(path)).await;
    }
    let walks = paths.iter().map(|path| walk(&env, path, &key_ids));
    let checked = futures::future::join_all(walks).await;
    for (path, checked) in paths.iter().zip(&checked) {
        assert!(*checked > 0, "{} was never Ready", path.name);
    }

    // The connection Secret of the running machine says where it is.
    let vm = support::ready::<GpuInstance>(&env, "runs").await;
    let secret = env.api::<Secret>().get("runs-ssh").await.unwrap();
    let host = secret
        .data
        .unwrap()
        .get("host")
        .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    assert_eq!(host, vm.status.unwrap().ip_address);

    // Restored from a snapshot of a running machine: the snapshot's hardware and region.
    support::create(
        &env,
        &support::object::<Snapshot>(
            "walk-snap",
            serde_json::json!({"instanceRef": {"name": "private"}}),
        ),
    )
    .await;
    support::ready::<Snapshot>(&env, "walk-snap").await;
    let restored = Path {
        name: "restored",
        spec: serde_json::json!({"region": "eu-west-1", "source": {"snapshotRef": {"name": "walk-snap"}}}),
        annotations: Vec::new(),
        power: running,
        until: "running",
    };
    support::create(&env, &object_of(&restored)).await;
    assert!(walk(&env, &restored, &key_ids).await > 0);

    // Adopted machines made by hand: managed as specified, and observed in the state asked.
    let by_hand = support::machine_by_hand(&env, "by-hand").await;
    let adopted = Path {
        name: "adopted",
        spec: base(serde_json::json!({"gpuType": "A100-80G", "publicIp": false})),
        annotations: vec![(EXTERNAL_ID_ANNOTATION, by_hand.instance_id.clone())],
        power: running,
        until: "running",
    };
    support::create(&env, &object_of(&adopted)).await;
    assert!(walk(&env, &adopted, &key_ids).await > 0);
    let watched = support::machine_by_hand(&env, "watched").await;
    let observed = Path {
        name: "observed",
        spec: base(serde_json::json!({"gpuType": "A100-80G", "managementPolicy": "ObserveOnly"})),
        annotations: vec![(EXTERNAL_ID_ANNOTATION, watched.instance_id.clone())],
        power: running,
        until: "ACTIVE",
    };
    support::create(&env, &object_of(&observed)).await;
    assert!(walk(&env, &observed, &key_ids).await > 0);

    // An edit: Ready again only once the machine is as the new generation asks.
    env.api::<GpuInstance>()
        .patch(
            "private",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"powerState": "Stopped", "publicIp": true}})),
        )
        .await
        .unwrap();
    let edited = Path {
        name: "private",
        spec: serde_json::json!({}),
        annotations: Vec::new(),
        power: stopped,
        until: "stopped",
    };
    eventually(30, "the edit's generation observed", || async {
        let vm = env.api::<GpuInstance>().get("private").await.unwrap();
        (vm.cloud_status().observed_generation == vm.metadata.generation).then_some(())
    })
    .await;
    assert!(walk(&env, &edited, &key_ids).await > 0);
}

/// The ConfigMap a startup script comes from is read at the create; the cloud runs the script
/// at first boot only. A later change to the ConfigMap cannot reach the machine: the object is
/// not Ready (`SpecMismatch`, naming the ConfigMap and the way out) until the script the
/// machine booted with is back, and nothing is created, rebooted or deleted meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_script_changed_in_its_config_map_is_reported_not_applied() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let env = Env::start().await;
    let config_maps = env.api::<ConfigMap>();
    let script = |text: &str| ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("boot".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("run.sh".to_string(), text.to_string())])),
        ..Default::default()
    };
    let put = |text: &'static str| {
        let config_maps = config_maps.clone();
        async move {
            config_maps
                .patch(
                    "boot",
                    &PatchParams::apply("test").force(),
                    &Patch::Apply(script(text)),
                )
                .await
                .unwrap();
        }
    };
    put("#!/bin/sh\necho first\n").await;
    let path = Path {
        name: "scripted",
        spec: base(
            serde_json::json!({"startupScript": {"configMapRef": {"name": "boot", "key": "run.sh"}}}),
        ),
        annotations: Vec::new(),
        power: running,
        until: "running",
    };
    support::create(&env, &object_of(&path)).await;
    let ready = support::ready::<GpuInstance>(&env, "scripted").await;
    // The status records which script the machine was created with.
    let digest: String = {
        use sha2::Digest;
        sha2::Sha256::digest(b"#!/bin/sh\necho first\n")
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    };
    assert_eq!(
        ready.status.unwrap().startup_script_sha256.as_deref(),
        Some(digest.as_str())
    );

    put("#!/bin/sh\necho second\n").await;
    let api = env.api::<GpuInstance>();
    let mismatch = eventually(
        30,
        "scripted: SpecMismatch after the ConfigMap changed",
        || {
            let api = api.clone();
            async move {
                let object = api.get("scripted").await.ok()?;
                let ready = object.cloud_status().condition("Ready")?.clone();
                (ready.status == "False" && ready.reason == "SpecMismatch").then_some(ready)
            }
        },
    )
    .await;
    for part in ["ConfigMap boot", "\"run.sh\"", "recreate the GpuInstance"] {
        assert!(
            mismatch.message.contains(part),
            "{part:?} in {}",
            mismatch.message
        );
    }
    put("#!/bin/sh\necho first\n").await;
    support::ready::<GpuInstance>(&env, "scripted").await;
    for (operation, expected) in [
        ("CreateInstance", 1),
        ("RebootInstance", 0),
        ("DeleteInstance", 0),
    ] {
        assert_eq!(env.calls(operation), expected, "{operation}");
    }
}
