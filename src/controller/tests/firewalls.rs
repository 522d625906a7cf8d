#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Firewall: rules and attachments reconciled as a diff, selector-driven attachment, protocols
//! checked against the cloud's catalog, refused specs, delete, orphan and adoption.

use crate::support;

use gpucloud_api::*;
use gpucloud_cloud::model::NewRule;
use kube::api::{Patch, PatchParams};
use kube::core::ObjectMeta;
use std::collections::{BTreeMap, BTreeSet};
use support::*;

fn machine(name: &str, labels: &[(&str, &str)]) -> GpuInstance {
    let mut vm: GpuInstance = object(
        name,
        serde_json::json!({
            "region": "us-east-1", "gpuType": "RTX-A6000", "gpuCount": 1,
            "osImage": "ubuntu-22.04-cuda-12",
        }),
    );
    vm.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    vm
}

fn rule(cidr: &str, port: u16) -> serde_json::Value {
    serde_json::json!({
        "direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
        "remoteIpPrefix": cidr, "portRangeMin": port, "portRangeMax": port,
    })
}

async fn patch_spec(env: &Env, spec: serde_json::Value) -> Result<Firewall, kube::Error> {
    env.api::<Firewall>()
        .patch(
            "edge",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
}

fn cloud_firewall(env: &Env) -> gpucloud_cloud::model::Firewall {
    let firewalls = env.simulator.state().firewalls;
    assert_eq!(firewalls.len(), 1, "{firewalls:?}");
    firewalls[0].clone()
}

fn attached(env: &Env) -> BTreeSet<String> {
    cloud_firewall(env)
        .attachments
        .iter()
        .map(|a| a.vm.id.clone())
        .collect()
}

/// The cloud's rules as (CIDR, port) pairs with their ids.
fn rules(env: &Env) -> BTreeMap<(String, u32), String> {
    cloud_firewall(env)
        .rules
        .iter()
        .map(|r| {
            (
                (r.remote_ip_prefix.clone(), r.port_range_min.unwrap_or(0)),
                r.id.clone(),
            )
        })
        .collect()
}

async fn id_of(env: &Env, name: &str) -> String {
    ready::<GpuInstance>(env, name)
        .await
        .cloud_status()
        .external_id
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_and_attachments_are_reconciled_as_a_diff() {
    let mut env = Env::start().await;
    create(&env, &machine("a", &[("role", "train")])).await;
    create(&env, &machine("b", &[])).await;
    create::<Firewall>(
        &env,
        &object(
            "edge",
            serde_json::json!({
                "region": "us-east-1",
                "description": "training cluster",
                "rules": [rule("10.0.0.0/8", 22)],
                "instanceRefs": [{"name": "b"}],
                "instanceSelector": {"matchLabels": {"role": "train"}},
            }),
        ),
    )
    .await;
    let a = id_of(&env, "a").await;
    let b = id_of(&env, "b").await;
    let fw: Firewall = ready(&env, "edge").await;
    let status = fw.status.unwrap();
    assert_eq!(status.rule_count, Some(1));
    assert_eq!(status.attached_count, Some(2));
    assert_eq!(attached(&env), BTreeSet::from([a.clone(), b.clone()]));
    assert_eq!(cloud_firewall(&env).description, "training cluster");
    let ssh_rule = rules(&env)[&("10.0.0.0/8".to_string(), 22)].clone();

    rules_are_changed_as_a_diff_and_put_back(&env, &ssh_rule).await;

    // A labelled machine appearing is attached; a label removed detaches.
    attachments_follow_labels_and_references(&env, &b).await;

    // Refused at admission: bad CIDR, ports out of order, region change.
    bad_rules_and_a_region_change_are_refused(&env).await;

    // A protocol the cloud's catalog lacks stalls with the catalog in the message.
    let mut sctp = rule("10.0.0.0/8", 22);
    sctp["protocol"] = "sctp".into();
    let rule_fields = sctp.as_object_mut().unwrap();
    rule_fields.remove("portRangeMin");
    rule_fields.remove("portRangeMax");
    patch_spec(&env, serde_json::json!({"rules": [sctp]}))
        .await
        .unwrap();
    let stalled: Firewall = condition(&env, "edge", "Stalled", "True", "InvalidSpec").await;
    let message = ready_message(&stalled);
    assert!(
        message.contains("sctp") && message.contains("tcp"),
        "{message}"
    );

    // Deleted while attached: detached, then deleted.
    support::delete_and_wait::<Firewall>(&env, "edge").await;
    assert!(env.simulator.state().firewalls.is_empty());
    assert_eq!(env.simulator.state().instances.len(), 3);
    env.stop_operator().await;
}

/// Rules added and removed one by one (the others left alone), and a rule changed by hand in
/// the cloud put back; `ssh_rule` is the cloud id of the spec's first rule.
async fn rules_are_changed_as_a_diff_and_put_back(env: &Env, ssh_rule: &str) {
    patch_spec(
        env,
        serde_json::json!({"rules": [rule("10.0.0.0/8", 22), rule("0.0.0.0/0", 443)]}),
    )
    .await
    .unwrap();
    eventually(30, "second rule added", || async {
        (rules(env).len() == 2).then_some(())
    })
    .await;
    assert_eq!(rules(env)[&("10.0.0.0/8".to_string(), 22)], ssh_rule);
    ready::<Firewall>(env, "edge").await;

    // Remove one: only that one goes.
    patch_spec(env, serde_json::json!({"rules": [rule("10.0.0.0/8", 22)]}))
        .await
        .unwrap();
    eventually(30, "rule removed", || async {
        (rules(env).len() == 1).then_some(())
    })
    .await;
    assert_eq!(rules(env)[&("10.0.0.0/8".to_string(), 22)], ssh_rule);
    assert_eq!(env.calls("RemoveFirewallRule"), 1);

    // A rule changed by hand in the cloud is put back.
    let cloud = cloud_client(env);
    let fw_id = cloud_firewall(env).id;
    cloud.remove_firewall_rule(&fw_id, ssh_rule).await.unwrap();
    cloud
        .add_firewall_rule(&fw_id, &NewRule::tcp_ingress("0.0.0.0/0", 22))
        .await
        .unwrap();
    // The next cloud list shows the change and wakes the firewall.
    eventually(30, "hand-made rule replaced by the spec's", || async {
        let r = rules(env);
        (r.len() == 1 && r.contains_key(&("10.0.0.0/8".to_string(), 22))).then_some(())
    })
    .await;
}

/// A labelled machine appearing is attached, a label removed detaches, and dropping the
/// reference detaches the referenced machine `b`: at the end only `c` is attached.
async fn attachments_follow_labels_and_references(env: &Env, b: &str) {
    create(env, &machine("c", &[("role", "train")])).await;
    let c = id_of(env, "c").await;
    eventually(30, "c attached by selector", || async {
        attached(env).contains(&c).then_some(())
    })
    .await;
    env.api::<GpuInstance>()
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"role": null}}})),
        )
        .await
        .unwrap();
    eventually(30, "a detached", || async {
        (attached(env) == BTreeSet::from([b.to_string(), c.clone()])).then_some(())
    })
    .await;
    // Dropping the reference detaches b.
    patch_spec(env, serde_json::json!({"instanceRefs": null}))
        .await
        .unwrap();
    eventually(30, "b detached", || async {
        (attached(env) == BTreeSet::from([c.clone()])).then_some(())
    })
    .await;
    let fw: Firewall = ready(env, "edge").await;
    assert_eq!(fw.status.unwrap().attached_instance_ids, vec![c.clone()]);
}

/// Refused at admission: a bad CIDR, ports out of order, a region change.
async fn bad_rules_and_a_region_change_are_refused(env: &Env) {
    let bad_cidr = patch_spec(
        env,
        serde_json::json!({"rules": [rule("10.0.0.300/8", 22)]}),
    )
    .await
    .unwrap_err();
    assert!(
        bad_cidr.to_string().contains("must be a CIDR"),
        "{bad_cidr}"
    );
    let mut reversed = rule("10.0.0.0/8", 22);
    reversed["portRangeMin"] = 100.into();
    reversed["portRangeMax"] = 10.into();
    let bad_ports = patch_spec(env, serde_json::json!({"rules": [reversed]}))
        .await
        .unwrap_err();
    assert!(
        bad_ports
            .to_string()
            .contains("portRangeMin must not exceed portRangeMax"),
        "{bad_ports}"
    );
    let moved = patch_spec(env, serde_json::json!({"region": "eu-west-1"}))
        .await
        .unwrap_err();
    assert!(moved.to_string().contains("region is immutable"), "{moved}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firewall_waits_for_its_instances_and_is_orphaned_and_adopted() {
    let mut env = Env::start().await;
    let mut fw: Firewall = object(
        "edge",
        serde_json::json!({
            "region": "us-east-1", "rules": [rule("192.0.2.0/24", 8080)],
            "instanceRefs": [{"name": "later"}], "deletionPolicy": "Orphan",
        }),
    );
    create(&env, &fw).await;
    let waiting: Firewall =
        condition(&env, "edge", "Reconciling", "True", "WaitingForReference").await;
    let message = ready_message(&waiting);
    assert!(message.contains("later"), "{message}");
    create(&env, &machine("later", &[])).await;
    let later = id_of(&env, "later").await;
    eventually(30, "attached when the machine appears", || async {
        (attached(&env) == BTreeSet::from([later.clone()])).then_some(())
    })
    .await;
    let done: Firewall = ready(&env, "edge").await;
    let fw_id = done.cloud_status().external_id.unwrap();

    support::delete_and_wait::<Firewall>(&env, "edge").await;
    assert_eq!(cloud_firewall(&env).id, fw_id, "orphaned firewall stays");

    fw.metadata = ObjectMeta {
        name: Some("adopted".into()),
        annotations: Some(BTreeMap::from([(
            EXTERNAL_ID_ANNOTATION.to_string(),
            fw_id.clone(),
        )])),
        ..Default::default()
    };
    fw.spec.managed.deletion_policy = DeletionPolicy::Delete;
    fw.spec.instance_refs = Vec::new();
    create(&env, &fw).await;
    let adopted: Firewall = ready(&env, "adopted").await;
    assert_eq!(adopted.cloud_status().external_id, Some(fw_id));
    assert!(
        attached(&env).is_empty(),
        "the adopted firewall follows its spec"
    );
    assert_eq!(env.calls("CreateFirewall"), 1);
    support::delete_and_wait::<Firewall>(&env, "adopted").await;
    assert!(env.simulator.state().firewalls.is_empty());
    env.stop_operator().await;
}

/// A rules change with one rule the cloud does not support is refused before any call: the
/// rules in place stay (today's set is never emptied for a set that cannot be applied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_with_an_unsupported_rule_leaves_the_rules_in_place() {
    let env = Env::start().await;
    let three = [
        rule("10.0.0.0/8", 22),
        rule("10.0.0.0/8", 80),
        rule("10.0.0.0/8", 443),
    ];
    create::<Firewall>(
        &env,
        &object(
            "edge",
            serde_json::json!({"region": "us-east-1", "rules": three}),
        ),
    )
    .await;
    ready::<Firewall>(&env, "edge").await;
    let before = rules(&env);
    assert_eq!(before.len(), 3);

    let mut gre = rule("192.168.0.0/16", 0);
    gre["protocol"] = "gre".into();
    gre.as_object_mut().unwrap().remove("portRangeMin");
    gre.as_object_mut().unwrap().remove("portRangeMax");
    patch_spec(
        &env,
        serde_json::json!({"rules": [rule("10.0.0.0/8", 8443), gre]}),
    )
    .await
    .unwrap();
    let refused: Firewall = condition(&env, "edge", "Stalled", "True", "InvalidSpec").await;
    let ready_condition = refused
        .cloud_status()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert!(
        ready_condition.message.contains("gre"),
        "{ready_condition:?}"
    );
    assert_eq!(rules(&env), before, "the rules in place were changed");
    assert_eq!(env.calls("RemoveFirewallRule"), 0);
    assert_eq!(env.calls("AddFirewallRule"), 0);
}
