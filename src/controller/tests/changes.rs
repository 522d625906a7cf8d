#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Allowed spec changes reach the cloud; immutable ones are refused at admission; changes
//! made in the cloud behind the operator's back are corrected or reported.

use crate::support;

use gpucloud_api::*;
use kube::api::{Patch, PatchParams, PostParams};
use std::collections::BTreeSet;
use std::time::Duration;
use support::{Env, eventually, ready_message};

fn instance(name: &str, extra: serde_json::Value) -> GpuInstance {
    let mut spec = serde_json::json!({
        "region": "us-east-1", "gpuType": "H100-80G", "gpuCount": 1, "osImage": "ubuntu-22.04-cuda-12",
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    GpuInstance::new(name, serde_json::from_value(spec).unwrap())
}

async fn merge(
    env: &Env,
    name: &str,
    patch: serde_json::Value,
) -> Result<GpuInstance, kube::Error> {
    merge_into::<GpuInstance>(env, name, patch).await
}

async fn merge_into<K: crate::support::TestKind>(
    env: &Env,
    name: &str,
    patch: serde_json::Value,
) -> Result<K, kube::Error> {
    env.api::<K>()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_public_ip_and_security_rules_reach_the_cloud() {
    let env = Env::start().await;
    let rule = serde_json::json!({"protocol": "tcp", "remoteIpPrefix": "10.0.0.0/8", "portRangeMin": 22, "portRangeMax": 22});
    env.api::<GpuInstance>()
        .create(
            &PostParams::default(),
            &instance(
                "legacy",
                serde_json::json!({"tier": "Legacy", "securityRules": [rule]}),
            ),
        )
        .await
        .unwrap();
    support::ready::<GpuInstance>(&env, "legacy").await;
    let vm = &env.simulator.state().instances[0];
    assert_eq!(vm.security_rules.len(), 1);
    assert_eq!(vm.security_rules[0].remote_ip_prefix, "10.0.0.0/8");

    // One reboot per new restartedAt value.
    merge(&env, "legacy", serde_json::json!({"metadata": {"annotations": {RESTARTED_AT_ANNOTATION: "2026-11-22T10:00:00Z"}}})).await.unwrap();
    eventually(30, "rebooted once", || async {
        (env.calls("RebootInstance") == 1).then_some(())
    })
    .await;
    // The annotation does not change the generation, so the object is Ready throughout: wait
    // for the reboot to be recorded, not for Ready.
    eventually(30, "reboot recorded in status", || async {
        let o = env.api::<GpuInstance>().get("legacy").await.ok()?;
        (o.status?.restarted_at.as_deref() == Some("2026-11-22T10:00:00Z")).then_some(())
    })
    .await;
    support::ready::<GpuInstance>(&env, "legacy").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        env.calls("RebootInstance"),
        1,
        "the same restartedAt rebooted twice"
    );

    // Public IP off, and the rule set replaced.
    let new_rule = serde_json::json!({"protocol": "tcp", "remoteIpPrefix": "192.0.2.0/24", "portRangeMin": 443, "portRangeMax": 443});
    merge(
        &env,
        "legacy",
        serde_json::json!({"spec": {"publicIp": false, "securityRules": [new_rule]}}),
    )
    .await
    .unwrap();
    eventually(30, "public IP released and rules replaced", || async {
        let vm = env.simulator.state().instances[0].clone();
        let rules_ok =
            vm.security_rules.len() == 1 && vm.security_rules[0].remote_ip_prefix == "192.0.2.0/24";
        (!vm.public_ip_enabled && rules_ok).then_some(())
    })
    .await;
    let updated = support::ready::<GpuInstance>(&env, "legacy").await;
    assert_eq!(
        updated.status.unwrap().ip_status.as_deref(),
        Some("unassigned")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_fields_are_refused_with_a_message() {
    let env = Env::start().await;
    env.api::<GpuInstance>()
        .create(
            &PostParams::default(),
            &instance("fixed", serde_json::json!({})),
        )
        .await
        .unwrap();
    for (patch, message) in [
        (
            serde_json::json!({"spec": {"region": "eu-west-1"}}),
            "region is immutable",
        ),
        (
            serde_json::json!({"spec": {"gpuType": "A100-80G"}}),
            "gpuType is immutable",
        ),
        (
            serde_json::json!({"spec": {"gpuCount": 2}}),
            "gpuCount is immutable",
        ),
        (
            serde_json::json!({"spec": {"osImage": "ubuntu-24.04-cuda-12"}}),
            "osImage is immutable",
        ),
    ] {
        match merge(&env, "fixed", patch).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422);
                assert!(status.message.contains(message), "{}", status.message);
            }
            other => panic!("expected 422 with {message:?}, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_corrected_or_reported() {
    let env = Env::start().await;
    env.api::<SshKey>()
        .create(
            &PostParams::default(),
            &SshKey::new("imported", serde_json::from_value(serde_json::json!({
                "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl user@host"
            })).unwrap()),
        )
        .await
        .unwrap();
    env.api::<GpuInstance>()
        .create(
            &PostParams::default(),
            &instance("drift", serde_json::json!({})),
        )
        .await
        .unwrap();
    let vm = support::ready::<GpuInstance>(&env, "drift").await;
    let vm_id = vm.cloud_status().external_id.unwrap();
    let key_api = env.api::<SshKey>();
    let key = eventually(30, "key ready", || {
        let key_api = key_api.clone();
        async move {
            let k = key_api.get("imported").await.ok()?;
            k.cloud_status()
                .is_ready(k.metadata.generation)
                .then_some(k)
        }
    })
    .await;
    assert_eq!(key.status.as_ref().unwrap().generated, Some(false));
    let key_id = key.cloud_status().external_id.unwrap();

    // Stopped in the cloud while the spec says Running: started again.
    support::cloud_client(&env)
        .stop_instance(&vm_id)
        .await
        .unwrap();
    eventually(30, "restarted by the operator", || async {
        (env.calls("StartInstance") >= 1).then_some(())
    })
    .await;
    eventually(30, "running again", || async {
        (env.simulator.state().instances[0].vm_status.as_str() == "RUNNING").then_some(())
    })
    .await;

    // A deleted key holds no data: recreated, under the same name, with a new id.
    support::cloud_client(&env)
        .delete_ssh_key(&key_id)
        .await
        .unwrap();
    let recreated = eventually(30, "key recreated", || {
        let key_api = key_api.clone();
        let key_id = key_id.clone();
        async move {
            let k = key_api.get("imported").await.ok()?;
            let id = k.cloud_status().external_id?;
            (id != key_id && k.cloud_status().is_ready(k.metadata.generation)).then_some(id)
        }
    })
    .await;
    assert_eq!(env.simulator.state().ssh_keys.len(), 1);
    assert_eq!(env.simulator.state().ssh_keys[0].id, recreated);

    // A deleted machine is reported, never silently replaced.
    support::cloud_client(&env)
        .delete_instance(&vm_id)
        .await
        .unwrap();
    let api = env.api::<GpuInstance>();
    eventually(30, "ExternalDeleted", || {
        let api = api.clone();
        async move {
            let o = api.get("drift").await.ok()?;
            let ready = o.cloud_status().condition("Ready")?.clone();
            (ready.status == "False" && ready.reason == "ExternalDeleted").then_some(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        env.calls("CreateInstance"),
        1,
        "a deleted instance was recreated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_floor_and_price_limit_refuse_billed_creates() {
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let mut config = support::test_config(&env.simulator);
    config.reconcile.budget_floor = 5000.0;
    env.start_operator(config);
    let api = env.api::<GpuInstance>();
    api.create(
        &PostParams::default(),
        &instance("poor", serde_json::json!({})),
    )
    .await
    .unwrap();
    api.create(
        &PostParams::default(),
        &instance("pricey", serde_json::json!({"maxHourlyRate": 0.01})),
    )
    .await
    .unwrap();
    assert_eq!(stalled_reason(&env, "poor").await, "InsufficientCredit");
    // The balance check comes first for every billed create.
    assert_eq!(stalled_reason(&env, "pricey").await, "InsufficientCredit");
    assert_eq!(env.calls("CreateInstance"), 0);
    env.stop_operator().await;

    let mut config = support::test_config(&env.simulator);
    config.reconcile.budget_floor = 0.0;
    env.start_operator(config);
    // Restarting with no floor: the price limit is what stops the second one now.
    merge(
        &env,
        "pricey",
        serde_json::json!({"metadata": {"annotations": {"touch": "1"}}}),
    )
    .await
    .unwrap();
    merge(
        &env,
        "poor",
        serde_json::json!({"metadata": {"annotations": {"touch": "1"}}}),
    )
    .await
    .unwrap();
    support::ready::<GpuInstance>(&env, "poor").await;
    assert_eq!(stalled_reason(&env, "pricey").await, "PriceAboveLimit");
    assert_eq!(env.simulator.state().instances.len(), 1);

    // A limit lowered below what the running machine costs: reported (not Ready, a Warning
    // event), and the machine is left running, since nothing asked for it to stop.
    a_limit_below_the_running_rate_is_reported_and_the_machine_runs_on(&env).await;

    // Stopped, then asked to run under a limit below its rate: not started (a start bills
    // the full rate), `PriceAboveLimit` naming the rate; raised, it starts.
    a_stopped_machine_stays_off_under_a_limit_below_its_rate(&env).await;
}

/// The reason of `name`'s `Stalled=True` condition, once it has one.
async fn stalled_reason(env: &Env, name: &'static str) -> String {
    let api = env.api::<GpuInstance>();
    eventually(30, name, || {
        let api = api.clone();
        async move {
            let o = api.get(name).await.ok()?;
            let c = o.cloud_status().condition("Stalled")?.clone();
            (c.status == "True").then_some(c.reason)
        }
    })
    .await
}

/// `poor`, running, gets a `maxHourlyRate` below its rate: `PriceAboveLimit` and a Warning
/// event, the machine left running; raised again, it is Ready for that generation.
async fn a_limit_below_the_running_rate_is_reported_and_the_machine_runs_on(env: &Env) {
    let api = env.api::<GpuInstance>();
    merge(
        env,
        "poor",
        serde_json::json!({"spec": {"maxHourlyRate": 0.01}}),
    )
    .await
    .unwrap();
    assert_eq!(stalled_reason(env, "poor").await, "PriceAboveLimit");
    let message = ready_message(&api.get("poor").await.unwrap());
    assert!(
        message.contains("maxHourlyRate 0.0100") && message.contains("keeps running"),
        "{message}"
    );
    support::wait_for_events(env, "poor", &["PriceAboveLimit"]).await;
    assert_eq!(env.calls("StopInstance"), 0, "the machine was stopped");
    assert_eq!(env.simulator.state().instances[0].status.as_str(), "ACTIVE");
    // Raised again: Ready for that generation.
    merge(
        env,
        "poor",
        serde_json::json!({"spec": {"maxHourlyRate": 1000}}),
    )
    .await
    .unwrap();
    eventually(30, "Ready again under the raised limit", || async {
        let object = api.get("poor").await.ok()?;
        object
            .cloud_status()
            .is_ready(object.metadata.generation)
            .then_some(())
    })
    .await;
}

/// `poor`, stopped, is asked to run under a limit below its rate: not started (a start bills
/// the full rate), `PriceAboveLimit` naming the rate; raised, it starts.
async fn a_stopped_machine_stays_off_under_a_limit_below_its_rate(env: &Env) {
    let api = env.api::<GpuInstance>();
    change_and_wait::<GpuInstance>(env, "poor", serde_json::json!({"powerState": "Stopped"})).await;
    let starts = env.calls("StartInstance");
    merge(
        env,
        "poor",
        serde_json::json!({"spec": {"maxHourlyRate": 0.01, "powerState": "Running"}}),
    )
    .await
    .unwrap();
    assert_eq!(stalled_reason(env, "poor").await, "PriceAboveLimit");
    let message = ready_message(&api.get("poor").await.unwrap());
    assert!(
        message.contains("would cost") && message.contains("stays off"),
        "{message}"
    );
    assert_eq!(
        env.calls("StartInstance"),
        starts,
        "the machine was started"
    );
    assert_eq!(
        env.simulator.state().instances[0].status.as_str(),
        "SHUTOFF"
    );
    change_and_wait::<GpuInstance>(env, "poor", serde_json::json!({"maxHourlyRate": 1000})).await;
    assert_eq!(env.simulator.state().instances[0].status.as_str(), "ACTIVE");
}

/// Patches `name`'s spec and waits until it is `Ready` for the new generation.
async fn change_and_wait<K>(env: &Env, name: &str, spec: serde_json::Value) -> K
where
    K: crate::support::TestKind,
{
    let changed: K = env
        .api::<K>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
        .unwrap();
    let generation = changed.meta().generation;
    let api = env.api::<K>();
    eventually(
        60,
        &format!("{name} Ready for generation {generation:?}"),
        || {
            let api = api.clone();
            async move {
                let object = api.get(name).await.ok()?;
                (object.meta().generation == generation
                    && object.cloud_status().is_ready(generation))
                .then_some(object)
            }
        },
    )
    .await
}

/// Every `Applied` and `Rechecked` spec field of every kind (as declared in the kinds'
/// `ON_CHANGE`) is changed once; as soon as the object says `Ready` for the new generation,
/// the cloud's record (not the status) must already show the change. A field declared
/// changeable without a case here fails the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_changeable_field_reaches_the_cloud_before_ready() {
    let mut env = Env::start().await;
    let api = env.api::<GpuInstance>();
    for (name, extra) in [
        ("walk", serde_json::json!({})),
        ("walk-legacy", serde_json::json!({"tier": "Legacy"})),
        ("walk-peer", serde_json::json!({})),
    ] {
        api.create(&PostParams::default(), &instance(name, extra))
            .await
            .unwrap();
    }
    let id = |object: &GpuInstance| object.cloud_status().external_id.clone().unwrap();
    let walk = id(&support::ready::<GpuInstance>(&env, "walk").await);
    let legacy = id(&support::ready::<GpuInstance>(&env, "walk-legacy").await);
    let peer = id(&support::ready::<GpuInstance>(&env, "walk-peer").await);
    support::create(
        &env,
        &support::object::<Volume>(
            "walk",
            serde_json::json!({"region": "us-east-1", "sizeGb": 10}),
        ),
    )
    .await;
    support::create(
        &env,
        &support::object::<Firewall>("walk", serde_json::json!({"region": "us-east-1"})),
    )
    .await;
    support::ready::<Volume>(&env, "walk").await;
    support::ready::<Firewall>(&env, "walk").await;
    let mut walked = Walked::new();
    walk_gpu_instance(&env, (&walk, &legacy), &mut walked).await;
    walk_volume_fields(&env, (&walk, &peer), &mut walked).await;
    walk_snapshot(&env, &mut walked).await;
    walk_firewall_fields(&env, (&walk, &peer), &mut walked).await;
    assert_every_changeable_field_walked(&walked);
    env.stop_operator().await;
}

/// The `(kind, field)` pairs a walk has changed.
type Walked = BTreeSet<(&'static str, &'static str)>;

/// The simulator's record of the machine `id`.
fn cloud_instance(env: &Env, id: &str) -> gpucloud_cloud::model::Instance {
    env.simulator
        .state()
        .instances
        .into_iter()
        .find(|i| i.instance_id == id)
        .unwrap()
}

/// The simulator's record of the one data volume.
fn walk_volume(env: &Env) -> gpucloud_cloud::model::Volume {
    support::data_volumes(env).pop().unwrap()
}

/// The simulator's record of the Firewall `walk`.
fn walk_firewall(env: &Env) -> gpucloud_cloud::model::Firewall {
    env.simulator
        .state()
        .firewalls
        .into_iter()
        .find(|f| f.name.contains("walk"))
        .unwrap()
}

/// The machines the Firewall `walk` is attached to in the cloud.
fn attached_to_walk_firewall(env: &Env) -> BTreeSet<String> {
    walk_firewall(env)
        .attachments
        .into_iter()
        .map(|a| a.vm.id)
        .collect()
}

/// An SSH rule from 10.0.0.0/8.
fn ssh_rule() -> serde_json::Value {
    serde_json::json!({"protocol": "tcp", "remoteIpPrefix": "10.0.0.0/8", "portRangeMin": 22, "portRangeMax": 22})
}

/// A lifetime already over, with `onExpiry: Delete`.
fn expired() -> serde_json::Value {
    serde_json::json!({"spec": {"lifetime": {"expiresAt": "2020-01-01T00:00:00Z", "onExpiry": "Delete"}}})
}

/// GpuInstance's changeable fields, on the machines `walk` and `walk-legacy`.
async fn walk_gpu_instance(env: &Env, (walk, legacy): (&str, &str), walked: &mut Walked) {
    use gpucloud_cloud::model::InstanceStatus;
    change_and_wait::<GpuInstance>(env, "walk", serde_json::json!({"powerState": "Stopped"})).await;
    assert_eq!(cloud_instance(env, walk).status, InstanceStatus::Shutoff);
    change_and_wait::<GpuInstance>(env, "walk", serde_json::json!({"powerState": "Running"})).await;
    assert_eq!(cloud_instance(env, walk).status, InstanceStatus::Active);
    walked.insert(("GpuInstance", "powerState"));
    let before = cloud_instance(env, walk).public_ip_enabled;
    change_and_wait::<GpuInstance>(env, "walk", serde_json::json!({"publicIp": !before})).await;
    assert_eq!(cloud_instance(env, walk).public_ip_enabled, !before);
    walked.insert(("GpuInstance", "publicIp"));
    change_and_wait::<GpuInstance>(
        env,
        "walk-legacy",
        serde_json::json!({"securityRules": [ssh_rule()]}),
    )
    .await;
    let rules = cloud_instance(env, legacy).security_rules;
    assert!(
        rules
            .iter()
            .any(|r| r.remote_ip_prefix == "10.0.0.0/8" && r.port_range_min == Some(22)),
        "{rules:?}"
    );
    walked.insert(("GpuInstance", "securityRules"));
    // A lifetime already over stops the machine; removed, the machine runs again.
    change_and_wait::<GpuInstance>(
        env,
        "walk-legacy",
        serde_json::json!({"lifetime": {"expiresAt": "2020-01-01T00:00:00Z"}}),
    )
    .await;
    assert_eq!(cloud_instance(env, legacy).status, InstanceStatus::Shutoff);
    change_and_wait::<GpuInstance>(env, "walk-legacy", serde_json::json!({"lifetime": null})).await;
    assert_eq!(cloud_instance(env, legacy).status, InstanceStatus::Active);
    walked.insert(("GpuInstance", "lifetime"));
    // A schedule whose one window is not now (the first second of each day) stops it.
    let every_day = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    change_and_wait::<GpuInstance>(
        env,
        "walk-legacy",
        serde_json::json!({"schedule": {"timeZone": "UTC", "windows": [
            {"days": every_day, "from": "00:00", "to": "00:00:01"}]}}),
    )
    .await;
    assert_eq!(cloud_instance(env, legacy).status, InstanceStatus::Shutoff);
    change_and_wait::<GpuInstance>(env, "walk-legacy", serde_json::json!({"schedule": null})).await;
    assert_eq!(cloud_instance(env, legacy).status, InstanceStatus::Active);
    walked.insert(("GpuInstance", "schedule"));
    // Re-checked: a limit below the running machine's rate is reported, and the machine is
    // left as it is; raised again, the machine is Ready.
    env.api::<GpuInstance>()
        .patch(
            "walk",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"maxHourlyRate": 0.01}})),
        )
        .await
        .unwrap();
    support::condition::<GpuInstance>(env, "walk", "Stalled", "True", "PriceAboveLimit").await;
    assert_eq!(cloud_instance(env, walk).status, InstanceStatus::Active);
    change_and_wait::<GpuInstance>(env, "walk", serde_json::json!({"maxHourlyRate": 1000})).await;
    assert_eq!(cloud_instance(env, walk).status, InstanceStatus::Active);
    walked.insert(("GpuInstance", "maxHourlyRate"));
}

/// Volume's changeable fields: resized, attached to `walk`, moved to `walk-peer`, detached,
/// and deleted by its lifetime.
async fn walk_volume_fields(env: &Env, (walk, peer): (&str, &str), walked: &mut Walked) {
    change_and_wait::<Volume>(env, "walk", serde_json::json!({"sizeGb": 20})).await;
    assert_eq!(walk_volume(env).size, 20);
    walked.insert(("Volume", "sizeGb"));
    change_and_wait::<Volume>(
        env,
        "walk",
        serde_json::json!({"instanceRef": {"name": "walk"}}),
    )
    .await;
    assert_eq!(walk_volume(env).instance_id.as_deref(), Some(walk));
    change_and_wait::<Volume>(
        env,
        "walk",
        serde_json::json!({"instanceRef": {"name": "walk-peer"}}),
    )
    .await;
    assert_eq!(walk_volume(env).instance_id.as_deref(), Some(peer));
    change_and_wait::<Volume>(env, "walk", serde_json::json!({"instanceRef": null})).await;
    assert_eq!(walk_volume(env).instance_id, None);
    walked.insert(("Volume", "instanceRef"));
    // A lifetime already over deletes the volume and its object.
    merge_into::<Volume>(env, "walk", expired()).await.unwrap();
    support::gone::<Volume>(env, "walk").await;
    assert!(support::data_volumes(env).is_empty());
    walked.insert(("Volume", "lifetime"));
}

/// Snapshot's changeable field: a lifetime already over deletes it.
async fn walk_snapshot(env: &Env, walked: &mut Walked) {
    support::create(
        env,
        &support::object::<Snapshot>(
            "walk",
            serde_json::json!({"instanceRef": {"name": "walk-peer"}}),
        ),
    )
    .await;
    support::ready::<Snapshot>(env, "walk").await;
    merge_into::<Snapshot>(env, "walk", expired())
        .await
        .unwrap();
    support::gone::<Snapshot>(env, "walk").await;
    assert!(env.simulator.state().snapshots.is_empty());
    walked.insert(("Snapshot", "lifetime"));
}

/// Firewall's changeable fields: rules, attachments by name and by selector.
async fn walk_firewall_fields(env: &Env, (walk, peer): (&str, &str), walked: &mut Walked) {
    change_and_wait::<Firewall>(env, "walk", serde_json::json!({"rules": [ssh_rule()]})).await;
    assert_eq!(walk_firewall(env).rules.len(), 1);
    change_and_wait::<Firewall>(env, "walk", serde_json::json!({"rules": []})).await;
    assert!(walk_firewall(env).rules.is_empty());
    walked.insert(("Firewall", "rules"));
    change_and_wait::<Firewall>(
        env,
        "walk",
        serde_json::json!({"instanceRefs": [{"name": "walk"}]}),
    )
    .await;
    assert_eq!(
        attached_to_walk_firewall(env),
        BTreeSet::from([walk.to_string()])
    );
    walked.insert(("Firewall", "instanceRefs"));
    env.api::<GpuInstance>()
        .patch(
            "walk-peer",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"role": "train"}}})),
        )
        .await
        .unwrap();
    change_and_wait::<Firewall>(
        env,
        "walk",
        serde_json::json!({"instanceSelector": {"matchLabels": {"role": "train"}}}),
    )
    .await;
    assert_eq!(
        attached_to_walk_firewall(env),
        BTreeSet::from([walk.to_string(), peer.to_string()])
    );
    walked.insert(("Firewall", "instanceSelector"));
}

/// Every field a kind declares `Applied` or `Rechecked` was walked.
fn assert_every_changeable_field_walked(walked: &Walked) {
    let mut missing = Vec::new();
    for kind in gpucloud_controller::kinds::registry::kinds() {
        let name = kind.crd.spec.names.kind.clone();
        for (field, on_change) in kind.on_change {
            let changeable = matches!(on_change, OnChange::Applied(_) | OnChange::Rechecked(_));
            if changeable && !walked.iter().any(|(k, f)| *k == name && f == field) {
                missing.push(format!("{name}.spec.{field}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "changeable fields not walked: {missing:?}"
    );
}

/// The balance floor reads the balance afresh for every billed create: a balance that fell
/// below the floor a moment ago refuses the next create, cache or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_balance_floor_reads_the_balance_of_the_moment() {
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let mut config = support::test_config(&env.simulator);
    config.reconcile.budget_floor = 500.0;
    // As in production, balances and catalogs are trusted for one resync interval.
    let resync = Duration::from_secs(20);
    config.reconcile.observe.resync = resync;
    config.cloud.catalog_ttl = resync;
    env.start_operator(config);
    let api = env.api::<GpuInstance>();
    api.create(
        &PostParams::default(),
        &instance("first", serde_json::json!({})),
    )
    .await
    .unwrap();
    support::ready::<GpuInstance>(&env, "first").await;
    env.simulator.set_balance(100.0);
    api.create(
        &PostParams::default(),
        &instance("second", serde_json::json!({})),
    )
    .await
    .unwrap();
    let refused: GpuInstance =
        support::condition(&env, "second", "Stalled", "True", "InsufficientCredit").await;
    assert!(
        ready_message(&refused).contains("below the configured floor"),
        "{:?}",
        refused.cloud_status().conditions
    );
    assert_eq!(env.calls("CreateInstance"), 1);

    // Topped up: the refused create goes ahead within one resync interval, nothing touched.
    let topped_up = std::time::Instant::now();
    env.simulator.set_balance(1000.0);
    support::ready_within::<GpuInstance>(&env, "second", resync.as_secs()).await;
    println!(
        "created {:?} after the top-up (resync interval {resync:?})",
        topped_up.elapsed()
    );
    assert_eq!(env.calls("CreateInstance"), 2);
    env.stop_operator().await;
}
