//! Every method of the typed client, at least once, against the simulator over HTTP.
//!
//! The last step checks the simulator's per-operation counters, so an operation the client
//! never reached (or reached under another route) fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpucloud_cloud::Operation;
use gpucloud_cloud::model::*;
use gpucloud_simulator::SimulatorConfig;

mod common;
use common::through_client::*;

fn rule(port: u32) -> NewRule {
    NewRule::tcp_ingress("10.0.0.0/8", port)
}

/// With `ssh_key_ids` and a public IP.
fn keyed_instance_request(
    name: &str,
    tier: Tier,
    ssh_key_ids: Vec<String>,
) -> CreateInstanceRequest {
    CreateInstanceRequest {
        ssh_key_ids,
        public_ip: Some(true),
        ..instance_request(name, tier)
    }
}

#[tokio::test]
async fn every_client_method_works_against_the_simulator() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);

    // === Catalogs, pricing, balance ===
    let balance = step(client.get_balance()).await.unwrap();
    assert!(balance.balance > 0.0);
    assert_eq!(balance.currency, "USD");
    let regions = step(client.list_regions()).await.unwrap();
    assert!(regions.regions.iter().any(|r| r.id == "us-east-1"));
    assert_eq!(regions.total_count, regions.regions.len() as u64);
    let os_images = step(client.list_os_images()).await.unwrap();
    assert!(
        os_images
            .os_images
            .iter()
            .any(|i| i.id == "ubuntu-22.04-cuda-12")
    );
    let stock = step(client.get_gpu_stock()).await.unwrap();
    assert!(
        stock
            .gpus
            .iter()
            .any(|g| g.gpu_type == "A100-80G" && g.region == "us-east-1" && g.available > 0)
    );
    let specs = step(client.get_gpu_specs()).await.unwrap();
    let a100 = specs
        .gpus
        .iter()
        .find(|g| g.gpu_type == "A100-80G")
        .expect("A100 spec")
        .clone();
    assert!(a100.price_per_gpu_hour > 0.0);
    let pricing = step(client.get_pricing()).await.unwrap();
    assert!(pricing.gpus.iter().any(|g| g.gpu_type == "A100-80G"));
    let quote = step(client.quote_pricing(&PriceQuoteRequest {
        gpu_type: "A100-80G".into(),
        gpu_count: 2,
        hours: Some(10.0),
    }))
    .await
    .unwrap();
    assert!((quote.hourly_rate - 2.0 * a100.price_per_gpu_hour).abs() < 1e-9);
    assert!((quote.total_cost - 10.0 * quote.hourly_rate).abs() < 1e-6);
    let volume_types = step(client.list_volume_types()).await.unwrap();
    assert!(volume_types.volume_types.iter().any(|t| t.id == "NVMe"));
    let protocols = step(client.list_firewall_protocols()).await.unwrap();
    assert!(protocols.protocols.contains(&Protocol::Tcp));

    // === SSH keys ===
    let generated = step(client.create_ssh_key(&CreateSshKeyRequest {
        name: "generated-key".into(),
        public_key: None,
    }))
    .await
    .unwrap();
    assert_eq!(generated.code.as_deref(), Some("SSH_KEY_GENERATED"));
    assert!(generated.body.private_key.is_some());
    let imported = step(client.create_ssh_key(&CreateSshKeyRequest {
        name: "imported-key".into(),
        public_key: Some(generated.body.key.public_key.clone()),
    }))
    .await
    .unwrap();
    assert_eq!(imported.code.as_deref(), Some("SSH_KEY_IMPORTED"));
    assert!(imported.body.private_key.is_none());
    let key_id = imported.body.key.id.clone();
    let fetched = step(client.get_ssh_key(&key_id)).await.unwrap();
    assert_eq!(fetched.name, "imported-key");
    let keys = step(client.list_ssh_keys()).await.unwrap();
    assert_eq!(keys.ssh_keys.len(), 2);
    let deleted = step(client.delete_ssh_key(&generated.body.key.id))
        .await
        .unwrap();
    assert_eq!(deleted.id, generated.body.key.id);

    // === Startup scripts ===
    let script = step(client.create_startup_script(&CreateStartupScriptRequest {
        name: "setup".into(),
        content: "#!/bin/sh\necho hello\n".into(),
        description: "prints hello".into(),
    }))
    .await
    .unwrap();
    let fetched = step(client.get_startup_script(&script.id)).await.unwrap();
    assert_eq!(fetched.content, "#!/bin/sh\necho hello\n");
    let updated = step(client.update_startup_script(
        &script.id,
        &UpdateStartupScriptRequest {
            content: Some("#!/bin/sh\necho bye\n".into()),
            ..UpdateStartupScriptRequest::default()
        },
    ))
    .await
    .unwrap();
    assert_eq!(updated.content, "#!/bin/sh\necho bye\n");
    assert_eq!(updated.name, "setup");
    let second = step(client.create_startup_script(&CreateStartupScriptRequest {
        name: "second".into(),
        content: "true".into(),
        description: String::new(),
    }))
    .await
    .unwrap();
    let third = step(client.create_startup_script(&CreateStartupScriptRequest {
        name: "third".into(),
        content: "true".into(),
        description: String::new(),
    }))
    .await
    .unwrap();
    let scripts = step(client.list_startup_scripts()).await.unwrap();
    assert_eq!(scripts.scripts.len(), 3);
    step(client.delete_startup_script(&second.id))
        .await
        .unwrap();
    let bulk = step(client.delete_startup_scripts(&[third.id.clone(), "no-such-script".into()]))
        .await
        .unwrap();
    assert_eq!(bulk.deleted_ids, vec![third.id.clone()]);
    assert_eq!(bulk.not_found_ids, vec!["no-such-script".to_owned()]);

    // === Instances ===
    let mut request = keyed_instance_request("worker", Tier::Legacy, vec![key_id.clone()]);
    request.startup_script_id = Some(script.id.clone());
    let created = step(client.create_instance(&request)).await.unwrap();
    assert_eq!(created.vm_name, "worker");
    assert_eq!(created.specs.gpu_type, "A100-80G");
    assert_eq!(created.boot_source, BootSource::Image);
    assert_eq!(created.ssh_key_ids, vec![key_id.clone()]);
    let vm = created.instance_id.clone();
    let active = wait_status(&client, &vm, InstanceStatus::Active).await;
    assert_eq!(active.tier, Tier::Legacy);
    let instances = step(client.list_instances()).await.unwrap();
    assert!(instances.instances.iter().any(|i| i.instance_id == vm));
    let eligible = step(client.list_snapshot_eligible_instances())
        .await
        .unwrap();
    assert!(eligible.instances.iter().any(|i| i.instance_id == vm));
    let billing = step(client.get_instance_billing(&InstanceBillingQuery {
        instance_id: Some(vm.clone()),
    }))
    .await
    .unwrap();
    assert_eq!(billing.records.len(), 1);
    assert_eq!(billing.records[0].instance_id, vm);
    assert!(billing.records[0].end_time.is_none());

    let no_ip = step(client.toggle_public_ip(&vm, false)).await.unwrap();
    assert_eq!(no_ip.ip_status, IpStatus::Unassigned);
    assert!(!no_ip.public_ip_enabled);
    let with_ip = step(client.toggle_public_ip(&vm, true)).await.unwrap();
    assert_eq!(with_ip.ip_status, IpStatus::Assigned);

    let added = step(client.add_security_rule(&vm, &rule(22)))
        .await
        .unwrap();
    assert_eq!(added.instance_id, vm);
    assert_eq!(added.rule.port_range_min, Some(22));
    wait_vm_status(&client, &vm, VmStatus::Running).await;
    let removed = step(client.remove_security_rule(&vm, &added.rule.id))
        .await
        .unwrap();
    assert_eq!(removed.body.rule_id, added.rule.id);
    assert_eq!(removed.tier, Some(Tier::Legacy));

    // === Volumes ===
    let volume = step(client.create_volume(&CreateVolumeRequest {
        volume_type: Some("NVMe".into()),
        ..CreateVolumeRequest::new("data", 100, "us-east-1")
    }))
    .await
    .unwrap();
    let volume_id = volume.id.clone();
    wait_until("volume available", || async {
        let v = client.get_volume(&volume_id).await.unwrap();
        (v.status == VolumeStatus::Available).then_some(())
    })
    .await;
    let grown = step(client.resize_volume(&volume_id, 200)).await.unwrap();
    assert_eq!(grown.size, 200);
    let cloned = step(client.clone_volume(&volume_id, "data-copy"))
        .await
        .unwrap();
    assert_eq!(cloned.name, "data-copy");
    assert_eq!(cloned.size, 200);
    let attached = step(client.attach_volumes(&vm, std::slice::from_ref(&volume_id)))
        .await
        .unwrap();
    assert_eq!(attached.instance_id, vm);
    assert!(
        attached
            .volumes
            .iter()
            .any(|v| v.id == volume_id && v.status == VolumeStatus::Attached)
    );
    let listed = step(client.list_volumes(&VolumeListQuery::default()))
        .await
        .unwrap();
    let listed_volume = listed
        .volumes
        .iter()
        .find(|v| v.id == volume_id)
        .expect("attached volume listed");
    assert_eq!(listed_volume.instance_id.as_deref(), Some(vm.as_str()));
    assert_eq!(listed_volume.vm_status, Some(VmStatus::Running));
    let detached = step(client.detach_volumes(&vm, std::slice::from_ref(&volume_id)))
        .await
        .unwrap();
    assert!(
        detached
            .volumes
            .iter()
            .any(|v| v.id == volume_id && v.instance_id.is_none())
    );
    let volume_billing = step(client.get_volume_billing(&VolumeBillingQuery::default()))
        .await
        .unwrap();
    assert!(
        volume_billing
            .records
            .iter()
            .any(|r| r.volume_id == volume_id)
    );
    assert_eq!(volume_billing.page, 1);
    let deleted = step(client.delete_volume(&cloned.id)).await.unwrap();
    assert_eq!(deleted.id, cloned.id);

    // === Firewalls ===
    let firewall = step(client.create_firewall(&CreateFirewallRequest {
        name: "web".into(),
        region: "us-east-1".into(),
        description: "web traffic".into(),
        rules: vec![rule(443)],
    }))
    .await
    .unwrap();
    assert_eq!(firewall.rules.len(), 1);
    let firewall_rule = step(client.add_firewall_rule(&firewall.id, &rule(80)))
        .await
        .unwrap();
    assert_eq!(firewall_rule.firewall_id, firewall.id);
    let removed_rule = step(client.remove_firewall_rule(&firewall.id, &firewall_rule.rule.id))
        .await
        .unwrap();
    assert_eq!(removed_rule.rule_id, firewall_rule.rule.id);
    let attachable = step(client.list_firewall_attachable_instances())
        .await
        .unwrap();
    assert!(attachable.instances.iter().any(|i| i.instance_id == vm));
    let attached_firewall = step(client.attach_firewall(&firewall.id, std::slice::from_ref(&vm)))
        .await
        .unwrap();
    assert_eq!(attached_firewall.attachments.len(), 1);
    assert_eq!(attached_firewall.attachments[0].vm.id, vm);
    assert_eq!(attached_firewall.attachments[0].vm.name, "worker");
    let fetched_firewall = step(client.get_firewall(&firewall.id)).await.unwrap();
    assert_eq!(fetched_firewall.rules.len(), 1);
    let firewalls = step(client.list_firewalls()).await.unwrap();
    assert_eq!(firewalls.firewalls.len(), 1);
    let of_instance = step(client.list_instance_firewalls(&vm)).await.unwrap();
    assert_eq!(of_instance.firewalls[0].id, firewall.id);
    let detached_firewall = step(client.attach_firewall(&firewall.id, &[]))
        .await
        .unwrap();
    assert!(detached_firewall.attachments.is_empty());
    step(client.delete_firewall(&firewall.id)).await.unwrap();

    // === Snapshots and images ===
    let snapshot = step(client.create_snapshot(
        &vm,
        &CreateSnapshotRequest {
            name: "snap".into(),
            description: "before upgrade".into(),
            labels: vec!["nightly".into()],
        },
    ))
    .await
    .unwrap();
    assert_eq!(snapshot.status, SnapshotStatus::Creating);
    assert_eq!(snapshot.instance_id, vm);
    let snapshot_id = snapshot.snapshot_id.clone();
    wait_until("snapshot available", || async {
        let s = client.get_snapshot(&snapshot_id).await.unwrap();
        (s.status == SnapshotStatus::Available).then_some(())
    })
    .await;
    let snapshots = step(client.list_snapshots()).await.unwrap();
    assert!(
        snapshots
            .snapshots
            .iter()
            .any(|s| s.snapshot_id == snapshot_id)
    );
    let snapshot_billing = step(client.get_snapshot_billing(&SnapshotBillingQuery {
        snapshot_id: Some(snapshot_id.clone()),
    }))
    .await
    .unwrap();
    assert_eq!(snapshot_billing.records.len(), 1);
    let image = step(client.create_image(&CreateImageRequest {
        snapshot_id: snapshot_id.clone(),
        name: "golden".into(),
    }))
    .await
    .unwrap();
    assert_eq!(image.snapshot_id, snapshot_id);
    let fetched_image = step(client.get_image(&image.id)).await.unwrap();
    assert_eq!(fetched_image.name, "golden");
    let images = step(client.list_images()).await.unwrap();
    assert_eq!(images.images.len(), 1);
    let relation = step(client.get_snapshot_image_relation(&snapshot_id))
        .await
        .unwrap();
    assert_eq!(relation.image_ids, vec![image.id.clone()]);
    let relations = step(client.list_snapshot_image_relations()).await.unwrap();
    assert!(
        relations
            .relations
            .iter()
            .any(|r| r.snapshot_id == snapshot_id)
    );
    let restored = step(client.restore_snapshot(&snapshot_id, "worker-restored"))
        .await
        .unwrap();
    assert_eq!(restored.body.data.boot_source, BootSource::Snapshot);
    let hex = restored
        .request_id
        .strip_prefix("req_")
        .expect("req_ prefix");
    assert_eq!(hex.len(), 24, "{}", restored.request_id);
    assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(restored.body.snapshot.id, snapshot_id);
    let restored_vm = restored.body.data.instance_id.clone();
    step(client.delete_image(&image.id)).await.unwrap();
    let deleted_snapshot = step(client.delete_snapshot(&snapshot_id)).await.unwrap();
    assert_eq!(deleted_snapshot.snapshot_name, "snap");

    // === Power ===
    let stopping = step(client.stop_instance(&vm)).await.unwrap();
    assert_eq!(stopping.vm_id, vm);
    assert_eq!(stopping.status, InstanceStatus::Stopping);
    wait_status(&client, &vm, InstanceStatus::Shutoff).await;
    let starting = step(client.start_instance(&vm)).await.unwrap();
    assert_eq!(starting.status, InstanceStatus::Starting);
    wait_status(&client, &vm, InstanceStatus::Active).await;
    let rebooting = step(client.reboot_instance(&vm)).await.unwrap();
    assert_eq!(rebooting.status, InstanceStatus::Rebooting);
    wait_status(&client, &vm, InstanceStatus::Active).await;
    let hibernating = step(client.hibernate_instance(&vm)).await.unwrap();
    assert_eq!(hibernating.status, InstanceStatus::Hibernating);
    wait_status(&client, &vm, InstanceStatus::Hibernated).await;
    let woken = step(client.restore_hibernated_instance(&vm)).await.unwrap();
    assert_eq!(woken.body.status, InstanceStatus::Active);
    assert_eq!(woken.tier, Some(Tier::Legacy));

    // === AI ===
    let models = step(client.list_ai_models()).await.unwrap();
    let model = models.models[0].id.clone();
    let chat = step(client.chat(&ChatRequest {
        model: model.clone(),
        messages: vec![ChatMessage {
            role: "user".into(),
            content: "Say hello".into(),
        }],
        max_tokens: Some(64),
        ..ChatRequest::default()
    }))
    .await
    .unwrap();
    assert_eq!(chat.model, model);
    assert!(chat.usage.total_tokens > 0);
    assert!(!chat.reply.content.is_empty());
    let summary = step(client.get_ai_usage_summary()).await.unwrap();
    assert_eq!(summary.total_requests, 1);
    assert_eq!(summary.total_tokens, chat.usage.total_tokens);
    let history = step(client.get_ai_usage_history()).await.unwrap();
    assert_eq!(history.records.len(), 1);
    assert_eq!(history.records[0].model, model);

    // === Delete ===
    let deleting = step(client.delete_instance(&restored_vm)).await.unwrap();
    assert_eq!(deleting.status, InstanceStatus::Deleting);
    step(client.delete_instance(&vm)).await.unwrap();
    wait_until("instances gone", || async {
        let err = client.get_instance(&vm).await.err()?;
        err.is_not_found().then_some(())
    })
    .await;

    // Every operation of the route table was reached through its own route.
    let counts = sim.call_counts();
    let missing: Vec<&str> = Operation::ALL
        .iter()
        .map(|op| op.name())
        .filter(|name| counts.get(*name).copied().unwrap_or(0) == 0)
        .collect();
    assert!(missing.is_empty(), "operations never called: {missing:?}");
    step(sim.shutdown()).await;
}
