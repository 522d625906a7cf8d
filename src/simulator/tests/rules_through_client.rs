//! Each rule of the simulated service, exercised through the typed client over HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpucloud_cloud::model::*;
use gpucloud_cloud::{
    ApiKey, Backoff, CallObserver, CallOutcome, CloudClient, Error, Operation, RetryPolicy,
};
use gpucloud_simulator::{Delays, FaultPlan, RateLimit, SimulatorConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::through_client::*;

const HOUR: Duration = Duration::from_secs(3600);

/// Every intermediate state lasts a simulated hour, so a test sees each state for as long as
/// it likes and moves on with [`SimulatorHandle::advance_clock`], independent of machine speed.
fn hour_long_states() -> SimulatorConfig {
    SimulatorConfig {
        delays: Delays {
            create: HOUR,
            boot: HOUR,
            power_transition: HOUR,
            snapshot: HOUR,
            image: HOUR,
            volume: HOUR,
        },
        ..SimulatorConfig::default()
    }
}

async fn get(client: &CloudClient, id: &str) -> Instance {
    step(client.get_instance(id)).await.unwrap()
}

fn volume_request(name: &str, size: u64, region: &str, tier: Tier) -> CreateVolumeRequest {
    CreateVolumeRequest {
        tier: Some(tier),
        ..CreateVolumeRequest::new(name, size, region)
    }
}

fn snapshot_request(name: &str) -> CreateSnapshotRequest {
    CreateSnapshotRequest {
        name: name.into(),
        description: String::new(),
        labels: vec![],
    }
}

fn rule() -> NewRule {
    NewRule::tcp_ingress("0.0.0.0/0", 22)
}

async fn active_instance(client: &CloudClient, name: &str, tier: Tier) -> Instance {
    let created = step(client.create_instance(&instance_request(name, tier)))
        .await
        .unwrap();
    wait_status(client, &created.instance_id, InstanceStatus::Active).await
}

async fn available_snapshot(client: &CloudClient, vm: &str, name: &str) -> Snapshot {
    let snapshot = step(client.create_snapshot(vm, &snapshot_request(name)))
        .await
        .unwrap();
    wait_until("snapshot available", || async {
        let s = client.get_snapshot(&snapshot.snapshot_id).await.unwrap();
        (s.status == SnapshotStatus::Available).then_some(s)
    })
    .await
}

fn assert_conflict(err: &Error, code: &str) {
    assert!(
        matches!(err, Error::Conflict { .. }) && err.code() == Some(code),
        "expected 409 {code}, got {err:?}"
    );
}

fn assert_bad_request_naming(err: &Error, field: &str) {
    assert!(
        matches!(err, Error::BadRequest { status: 400, .. }),
        "expected 400, got {err:?}"
    );
    assert!(
        err.to_string().contains(field),
        "{err} does not name {field}"
    );
}

// === Snapshots ===

#[tokio::test]
async fn snapshot_needs_an_active_instance_and_completes_asynchronously() {
    let sim = start_simulator(hour_long_states()).await;
    let client = client_for(&sim);
    let created = step(client.create_instance(&instance_request("src", Tier::Advanced)))
        .await
        .unwrap();
    assert_eq!(created.status, InstanceStatus::Creating);
    let vm = created.instance_id;
    let err = step(client.create_snapshot(&vm, &snapshot_request("too-early")))
        .await
        .unwrap_err();
    assert_conflict(&err, "INVALID_STATE");

    sim.advance_clock(HOUR);
    assert_eq!(get(&client, &vm).await.status, InstanceStatus::Active);
    let snapshot = step(client.create_snapshot(&vm, &snapshot_request("ok")))
        .await
        .unwrap();
    assert_eq!(snapshot.status, SnapshotStatus::Creating);
    assert_eq!(snapshot.instance_id, vm);
    assert_eq!(snapshot.region, "us-east-1");
    assert!(
        snapshot.tier.is_some(),
        "tier comes with the create response"
    );
    let still = step(client.get_snapshot(&snapshot.snapshot_id))
        .await
        .unwrap();
    assert_eq!(still.status, SnapshotStatus::Creating);
    // A snapshot still being created cannot be restored yet.
    let err = step(client.restore_snapshot(&snapshot.snapshot_id, "early"))
        .await
        .unwrap_err();
    assert_conflict(&err, "INVALID_STATE");
    sim.advance_clock(HOUR);
    let done = step(client.get_snapshot(&snapshot.snapshot_id))
        .await
        .unwrap();
    assert_eq!(done.status, SnapshotStatus::Available);

    // Not from a stopping or stopped instance either.
    step(client.stop_instance(&vm)).await.unwrap();
    let err = step(client.create_snapshot(&vm, &snapshot_request("stopping")))
        .await
        .unwrap_err();
    assert_conflict(&err, "INVALID_STATE");
    sim.advance_clock(HOUR);
    assert_eq!(get(&client, &vm).await.status, InstanceStatus::Shutoff);
    let err = step(client.create_snapshot(&vm, &snapshot_request("stopped")))
        .await
        .unwrap_err();
    assert_conflict(&err, "INVALID_STATE");
    let err = step(client.create_snapshot("vm-unknown", &snapshot_request("x")))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    step(sim.shutdown()).await;
}

#[tokio::test]
async fn snapshot_billing_starts_at_once_and_drains_the_balance() {
    let sim = start_simulator(hour_long_states()).await;
    let client = client_for(&sim);
    let created = step(client.create_instance(&instance_request("billed", Tier::Advanced)))
        .await
        .unwrap();
    let vm = created.instance_id;
    sim.advance_clock(HOUR);
    let snapshot = step(client.create_snapshot(&vm, &snapshot_request("s")))
        .await
        .unwrap();
    assert_eq!(snapshot.status, SnapshotStatus::Creating);
    // Still `creating`, yet billed already.
    let billing = step(client.get_snapshot_billing(&SnapshotBillingQuery {
        snapshot_id: Some(snapshot.snapshot_id.clone()),
    }))
    .await
    .unwrap();
    assert_eq!(billing.records.len(), 1);
    let record = billing.records[0].clone();
    assert!(record.hourly_rate > 0.0);
    assert!(record.end_time.is_none());
    assert_eq!(record.status, "active");
    // Delete the instance, so the snapshot is all that is billed.
    step(client.delete_instance(&vm)).await.unwrap();
    sim.advance_clock(HOUR);
    assert!(
        step(client.get_instance(&vm))
            .await
            .unwrap_err()
            .is_not_found()
    );

    let before = step(client.get_balance()).await.unwrap().balance;
    sim.advance_clock(10 * HOUR);
    let after = step(client.get_balance()).await.unwrap().balance;
    let drained = before - after;
    let expected = 10.0 * record.hourly_rate;
    assert!(
        drained >= expected * 0.999 && drained <= expected * 1.01,
        "balance drained {drained}, expected about {expected} (ten hours of the snapshot)"
    );
    let later = step(client.get_snapshot_billing(&SnapshotBillingQuery {
        snapshot_id: Some(snapshot.snapshot_id.clone()),
    }))
    .await
    .unwrap();
    assert!(later.records[0].total_cost >= expected * 0.999);
    step(sim.shutdown()).await;
}

#[tokio::test]
async fn restore_makes_an_active_billed_instance_that_inherits_the_hardware() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);
    let mut request = instance_request("big", Tier::Legacy);
    request.gpu_type = "H100-80G".into();
    request.gpu_count = 2;
    request.region = "eu-west-1".into();
    let created = step(client.create_instance(&request)).await.unwrap();
    let source = wait_status(&client, &created.instance_id, InstanceStatus::Active).await;
    let snapshot = available_snapshot(&client, &source.instance_id, "big-snap").await;

    let restored = step(client.restore_snapshot(&snapshot.snapshot_id, "big-copy"))
        .await
        .unwrap();
    assert!(restored.success);
    assert!(restored.timestamp.is_some(), "restore carries a timestamp");
    assert_eq!(restored.tier, Some(Tier::Legacy));
    assert_eq!(restored.body.snapshot.id, snapshot.snapshot_id);
    assert_eq!(restored.body.snapshot.name, "big-snap");
    let data = &restored.body.data;
    assert_eq!(data.status, InstanceStatus::Active);
    assert_eq!(data.boot_source, BootSource::Snapshot);
    assert_eq!(data.vm_name, "big-copy");
    assert_eq!(data.specs, source.specs);
    assert_eq!(data.specs.gpu_type, "H100-80G");
    assert_eq!(data.specs.gpu_count, 2);
    assert_eq!(data.region, "eu-west-1");
    assert_eq!(
        data.snapshot_id.as_deref(),
        Some(snapshot.snapshot_id.as_str())
    );
    assert_ne!(data.instance_id, source.instance_id);
    assert!(data.billing.hourly_rate > 0.0);
    let billing = step(client.get_instance_billing(&InstanceBillingQuery {
        instance_id: Some(data.instance_id.clone()),
    }))
    .await
    .unwrap();
    assert_eq!(billing.records.len(), 1, "billed from the restore on");
    assert!(billing.records[0].end_time.is_none());

    for bad in ["", "has space", "bad/slash", &"x".repeat(64)] {
        let err = step(client.restore_snapshot(&snapshot.snapshot_id, bad))
            .await
            .unwrap_err();
        assert_bad_request_naming(&err, "new_vm_name");
    }
    let err = step(client.restore_snapshot("snap-unknown", "fine"))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    step(sim.shutdown()).await;
}

#[tokio::test]
async fn snapshot_delete_is_idempotent_ends_billing_and_removes_linked_images() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);
    let vm = active_instance(&client, "src", Tier::Advanced).await;
    let snapshot = available_snapshot(&client, &vm.instance_id, "to-delete").await;
    let image = step(client.create_image(&CreateImageRequest {
        snapshot_id: snapshot.snapshot_id.clone(),
        name: "img".into(),
    }))
    .await
    .unwrap();
    let other_snapshot = available_snapshot(&client, &vm.instance_id, "kept").await;
    let other_image = step(client.create_image(&CreateImageRequest {
        snapshot_id: other_snapshot.snapshot_id.clone(),
        name: "other-img".into(),
    }))
    .await
    .unwrap();

    let first = step(client.delete_snapshot(&snapshot.snapshot_id))
        .await
        .unwrap();
    assert_eq!(first.snapshot_name, "to-delete");
    let second = step(client.delete_snapshot(&snapshot.snapshot_id))
        .await
        .unwrap();
    assert_eq!(second.snapshot_name, "to-delete");

    let billing = step(client.get_snapshot_billing(&SnapshotBillingQuery {
        snapshot_id: Some(snapshot.snapshot_id.clone()),
    }))
    .await
    .unwrap();
    assert!(billing.records[0].end_time.is_some(), "billing ended");
    assert_eq!(billing.records[0].status, "ended");
    let cost_at_delete = billing.records[0].total_cost;
    sim.advance_clock(HOUR);
    let billing = step(client.get_snapshot_billing(&SnapshotBillingQuery {
        snapshot_id: Some(snapshot.snapshot_id.clone()),
    }))
    .await
    .unwrap();
    assert_eq!(billing.records[0].total_cost, cost_at_delete);

    let err = step(client.get_image(&image.id)).await.unwrap_err();
    assert!(err.is_not_found(), "linked image removed: {err:?}");
    let err = step(client.get_snapshot(&snapshot.snapshot_id))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    let images = step(client.list_images()).await.unwrap();
    let ids: Vec<_> = images.images.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, vec![other_image.id.as_str()], "other images stay");
    step(sim.shutdown()).await;
}

// === Tier and power-state rules ===

#[tokio::test]
async fn legacy_only_operations_refuse_other_tiers() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);
    let vm = active_instance(&client, "modern", Tier::Advanced).await;
    let id = vm.instance_id;
    let added = step(client.add_security_rule(&id, &rule())).await.unwrap();
    wait_vm_status(&client, &id, VmStatus::Running).await;
    let err = step(client.remove_security_rule(&id, &added.rule.id))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Forbidden { .. }), "{err:?}");
    assert_eq!(err.code(), Some("TIER_NOT_SUPPORTED"));
    assert!(err.is_terminal());

    step(client.hibernate_instance(&id)).await.unwrap();
    wait_status(&client, &id, InstanceStatus::Hibernated).await;
    let err = step(client.restore_hibernated_instance(&id))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Forbidden { .. }), "{err:?}");
    assert_eq!(err.code(), Some("TIER_NOT_SUPPORTED"));
    // The refused call changed nothing.
    let still = step(client.get_instance(&id)).await.unwrap();
    assert_eq!(still.status, InstanceStatus::Hibernated);
    step(sim.shutdown()).await;
}

#[tokio::test]
async fn removing_a_security_rule_needs_a_running_legacy_instance() {
    let sim = start_simulator(hour_long_states()).await;
    let client = client_for(&sim);
    let created = step(client.create_instance(&instance_request("old", Tier::Legacy)))
        .await
        .unwrap();
    let id = created.instance_id;
    let added = step(client.add_security_rule(&id, &rule())).await.unwrap();
    // CREATING (power PENDING): refused.
    let err = step(client.remove_security_rule(&id, &added.rule.id))
        .await
        .unwrap_err();
    assert_conflict(&err, "INVALID_STATE");
    // ACTIVE but still BOOTING: ACTIVE is not RUNNING, so still refused.
    sim.advance_clock(HOUR);
    let booting = get(&client, &id).await;
    assert_eq!(booting.status, InstanceStatus::Active);
    assert_eq!(booting.vm_status, VmStatus::Booting);
    let err = step(client.remove_security_rule(&id, &added.rule.id))
        .await
        .unwrap_err();
    assert_conflict(&err, "INVALID_STATE");

    sim.advance_clock(HOUR);
    assert_eq!(get(&client, &id).await.vm_status, VmStatus::Running);
    let removed = step(client.remove_security_rule(&id, &added.rule.id))
        .await
        .unwrap();
    assert_eq!(removed.body.instance_id, id);
    assert_eq!(removed.body.rule_id, added.rule.id);
    assert_eq!(removed.tier, Some(Tier::Legacy));
    assert!(get(&client, &id).await.security_rules.is_empty());
    let err = step(client.remove_security_rule(&id, &added.rule.id))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "already removed: {err:?}");

    let again = step(client.add_security_rule(&id, &rule())).await.unwrap();
    step(client.stop_instance(&id)).await.unwrap();
    sim.advance_clock(HOUR);
    assert_eq!(get(&client, &id).await.vm_status, VmStatus::Stopped);
    let err = step(client.remove_security_rule(&id, &again.rule.id))
        .await
        .unwrap_err();
    assert_conflict(&err, "INVALID_STATE");
    assert_eq!(get(&client, &id).await.security_rules.len(), 1);
    step(sim.shutdown()).await;
}

#[tokio::test]
async fn power_transitions_pass_through_intermediate_states_and_refuse_invalid_ones() {
    let sim = start_simulator(hour_long_states()).await;
    let client = client_for(&sim);
    let created = step(client.create_instance(&instance_request("p", Tier::Legacy)))
        .await
        .unwrap();
    assert_eq!(created.status, InstanceStatus::Creating);
    assert_eq!(created.vm_status, VmStatus::Pending);
    let id = created.instance_id;
    assert_conflict(
        &step(client.stop_instance(&id)).await.unwrap_err(),
        "INVALID_STATE",
    );
    sim.advance_clock(HOUR);
    let active = get(&client, &id).await;
    assert_eq!(active.status, InstanceStatus::Active);
    assert_eq!(active.vm_status, VmStatus::Booting);
    sim.advance_clock(HOUR);
    assert_eq!(get(&client, &id).await.vm_status, VmStatus::Running);

    // From ACTIVE: start and restore-hibernated are invalid.
    assert_conflict(
        &step(client.start_instance(&id)).await.unwrap_err(),
        "INVALID_STATE",
    );
    assert_conflict(
        &step(client.restore_hibernated_instance(&id))
            .await
            .unwrap_err(),
        "INVALID_STATE",
    );

    // Stop: ACTIVE -> STOPPING -> SHUTOFF.
    let stopping = step(client.stop_instance(&id)).await.unwrap();
    assert_eq!(stopping.vm_id, id);
    assert_eq!(stopping.status, InstanceStatus::Stopping);
    let during = get(&client, &id).await;
    assert_eq!(during.status, InstanceStatus::Stopping);
    assert_eq!(during.vm_status, VmStatus::Transitioning);
    for err in [
        step(client.start_instance(&id)).await.unwrap_err(),
        step(client.stop_instance(&id)).await.unwrap_err(),
    ] {
        assert_conflict(&err, "INVALID_STATE");
    }
    sim.advance_clock(HOUR);
    let stopped = get(&client, &id).await;
    assert_eq!(stopped.status, InstanceStatus::Shutoff);
    assert_eq!(stopped.vm_status, VmStatus::Stopped);
    for err in [
        step(client.stop_instance(&id)).await.unwrap_err(),
        step(client.reboot_instance(&id)).await.unwrap_err(),
        step(client.hibernate_instance(&id)).await.unwrap_err(),
    ] {
        assert_conflict(&err, "INVALID_STATE");
    }

    // Start: SHUTOFF -> STARTING -> ACTIVE.
    let starting = step(client.start_instance(&id)).await.unwrap();
    assert_eq!(starting.status, InstanceStatus::Starting);
    assert_eq!(get(&client, &id).await.status, InstanceStatus::Starting);
    sim.advance_clock(HOUR);
    assert_eq!(get(&client, &id).await.status, InstanceStatus::Active);

    // Reboot: ACTIVE -> REBOOTING -> ACTIVE.
    let rebooting = step(client.reboot_instance(&id)).await.unwrap();
    assert_eq!(rebooting.status, InstanceStatus::Rebooting);
    let during = get(&client, &id).await;
    assert_eq!(during.status, InstanceStatus::Rebooting);
    assert_eq!(during.vm_status, VmStatus::Transitioning);
    sim.advance_clock(HOUR);
    assert_eq!(get(&client, &id).await.status, InstanceStatus::Active);

    // Hibernate: ACTIVE -> HIBERNATING -> HIBERNATED; only restore-hibernated wakes it.
    let hibernating = step(client.hibernate_instance(&id)).await.unwrap();
    assert_eq!(hibernating.status, InstanceStatus::Hibernating);
    assert_eq!(get(&client, &id).await.status, InstanceStatus::Hibernating);
    sim.advance_clock(HOUR);
    let hibernated = get(&client, &id).await;
    assert_eq!(hibernated.status, InstanceStatus::Hibernated);
    assert_eq!(hibernated.vm_status, VmStatus::Hibernated);
    for err in [
        step(client.start_instance(&id)).await.unwrap_err(),
        step(client.reboot_instance(&id)).await.unwrap_err(),
    ] {
        assert_conflict(&err, "INVALID_STATE");
    }
    let woken = step(client.restore_hibernated_instance(&id)).await.unwrap();
    assert_eq!(woken.body.vm_id, id);
    assert_eq!(woken.body.status, InstanceStatus::Active);
    assert_eq!(woken.tier, Some(Tier::Legacy));
    assert_eq!(get(&client, &id).await.status, InstanceStatus::Active);

    // Delete: DELETING, then gone.
    let deleting = step(client.delete_instance(&id)).await.unwrap();
    assert_eq!(deleting.status, InstanceStatus::Deleting);
    assert_eq!(get(&client, &id).await.status, InstanceStatus::Deleting);
    assert_conflict(
        &step(client.stop_instance(&id)).await.unwrap_err(),
        "INVALID_STATE",
    );
    sim.advance_clock(HOUR);
    assert!(
        step(client.get_instance(&id))
            .await
            .unwrap_err()
            .is_not_found()
    );
    let err = step(client.delete_instance(&id)).await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    step(sim.shutdown()).await;
}

// === Volumes ===

#[tokio::test]
async fn volume_list_applies_filters_and_reports_counts_and_metadata() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);
    let vm = active_instance(&client, "host", Tier::Legacy).await;
    let mut bootable = volume_request("boot-data", 20, "us-east-1", Tier::Advanced);
    bootable.bootable = Some(true);
    let bootable = step(client.create_volume(&bootable)).await.unwrap();
    let plain_us =
        step(client.create_volume(&volume_request("plain-us", 10, "us-east-1", Tier::Legacy)))
            .await
            .unwrap();
    let plain_eu =
        step(client.create_volume(&volume_request("plain-eu", 10, "eu-west-1", Tier::Advanced)))
            .await
            .unwrap();

    let all = step(client.list_volumes(&VolumeListQuery::default()))
        .await
        .unwrap();
    // The instance's boot volume plus the three made here.
    assert_eq!(all.total_count, 4);
    assert_eq!(all.volumes.len(), 4);
    assert_eq!(all.bootable_count + all.non_bootable_count, all.total_count);
    assert_eq!(all.applied_filters, AppliedVolumeFilters::default());
    assert!(
        all.metadata
            .regions_available
            .iter()
            .any(|r| r == "eu-west-1")
    );
    let mut tiers = all.metadata.tiers_used.clone();
    tiers.sort();
    assert_eq!(tiers, vec!["advanced".to_owned(), "legacy".to_owned()]);
    assert!(!all.next_volume_name.is_empty());
    assert!(all.volumes.iter().all(|v| v.name != all.next_volume_name));
    let boot_volume = all
        .volumes
        .iter()
        .find(|v| v.instance_id.as_deref() == Some(vm.instance_id.as_str()))
        .expect("the instance's boot volume is listed");
    assert_eq!(boot_volume.status, VolumeStatus::Attached);

    let eu = step(client.list_volumes(&VolumeListQuery {
        region: Some("eu-west-1".into()),
        ..VolumeListQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(
        eu.volumes.iter().map(|v| &v.id).collect::<Vec<_>>(),
        vec![&plain_eu.id]
    );
    assert_eq!(eu.applied_filters.region.as_deref(), Some("eu-west-1"));
    assert_eq!(eu.applied_filters.tier, None);
    assert_eq!(eu.applied_filters.bootable, None);
    assert_eq!(eu.total_count, 1);

    let legacy = step(client.list_volumes(&VolumeListQuery {
        tier: Some(Tier::Legacy),
        ..VolumeListQuery::default()
    }))
    .await
    .unwrap();
    assert!(legacy.volumes.iter().all(|v| v.tier == Tier::Legacy));
    assert!(legacy.volumes.iter().any(|v| v.id == plain_us.id));
    assert_eq!(legacy.applied_filters.tier.as_deref(), Some("legacy"));

    let only_bootable = step(client.list_volumes(&VolumeListQuery {
        bootable: Some(true),
        ..VolumeListQuery::default()
    }))
    .await
    .unwrap();
    assert!(only_bootable.volumes.iter().all(|v| v.bootable));
    assert!(only_bootable.volumes.iter().any(|v| v.id == bootable.id));
    assert_eq!(only_bootable.non_bootable_count, 0);
    assert_eq!(only_bootable.applied_filters.bootable, Some(true));

    let no_os = step(client.list_volumes(&VolumeListQuery {
        exclude_os_volumes: Some(true),
        ..VolumeListQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(no_os.total_count, 3, "the boot volume is left out");
    assert!(no_os.volumes.iter().all(|v| v.id != boot_volume.id));
    assert!(no_os.volumes.iter().any(|v| v.id == bootable.id));

    let combined = step(client.list_volumes(&VolumeListQuery {
        region: Some("us-east-1".into()),
        tier: Some(Tier::Advanced),
        bootable: Some(true),
        exclude_os_volumes: Some(true),
    }))
    .await
    .unwrap();
    assert_eq!(
        combined.volumes.iter().map(|v| &v.id).collect::<Vec<_>>(),
        vec![&bootable.id]
    );
    step(sim.shutdown()).await;
}

#[tokio::test]
async fn volume_billing_filters_and_paginates() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);
    let mut ids = Vec::new();
    for (i, size) in [10u64, 20, 30, 40, 50].into_iter().enumerate() {
        let tier = if i % 2 == 0 {
            Tier::Advanced
        } else {
            Tier::Legacy
        };
        let volume =
            step(client.create_volume(&volume_request(&format!("v{i}"), size, "us-east-1", tier)))
                .await
                .unwrap();
        ids.push(volume.id);
    }
    // Two simulated hours of storage.
    sim.advance_clock(2 * HOUR);

    let page1 = step(client.get_volume_billing(&VolumeBillingQuery {
        limit: Some(2),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(page1.total, 5);
    assert_eq!(page1.page, 1);
    assert_eq!(page1.limit, 2);
    assert_eq!(page1.total_pages, 3);
    assert_eq!(page1.records.len(), 2);
    assert_eq!(page1.currency, "USD");
    assert_eq!(
        page1.summary.total_size_gb, 150,
        "summary covers every page"
    );
    assert!(page1.summary.total_minutes > 0);
    assert!(page1.summary.total_cost > 0.0);
    let page3 = step(client.get_volume_billing(&VolumeBillingQuery {
        limit: Some(2),
        page: Some(3),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(page3.records.len(), 1);
    let mut seen: Vec<String> = page1.records.iter().map(|r| r.volume_id.clone()).collect();
    let page2 = step(client.get_volume_billing(&VolumeBillingQuery {
        limit: Some(2),
        page: Some(2),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    seen.extend(page2.records.iter().map(|r| r.volume_id.clone()));
    seen.extend(page3.records.iter().map(|r| r.volume_id.clone()));
    seen.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(seen, expected, "pages cover every record once");

    let record = &page1.records[0];
    assert!(record.billing_id.len() > 1);
    assert!(matches!(record.tier.as_str(), "Advanced" | "Legacy"));
    assert!(!record.start_time.ends_with('Z') && record.start_time.contains('T'));
    assert!(
        (record.total_cost - record.per_minute_rate * record.total_duration_minutes as f64).abs()
            < 1e-9
    );

    let size30 = step(client.get_volume_billing(&VolumeBillingQuery {
        size: Some(30),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(size30.total, 1);
    assert_eq!(size30.records[0].size_gb, 30);
    assert_eq!(size30.summary.total_size_gb, 30);

    let legacy = step(client.get_volume_billing(&VolumeBillingQuery {
        tier: Some("legacy".into()),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(legacy.total, 2);
    assert!(legacy.records.iter().all(|r| r.tier == "Legacy"));

    let available = step(client.get_volume_billing(&VolumeBillingQuery {
        status: Some("available".into()),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(available.total, 5);

    assert!(
        page1
            .records
            .iter()
            .all(|r| r.total_duration_minutes >= 120)
    );
    let long_enough = step(client.get_volume_billing(&VolumeBillingQuery {
        min_minutes: Some(120),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(long_enough.total, 5);
    let too_short = step(client.get_volume_billing(&VolumeBillingQuery {
        max_minutes: Some(60),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(too_short.total, 0);
    assert_eq!(too_short.summary.total_size_gb, 0);
    let too_long = step(client.get_volume_billing(&VolumeBillingQuery {
        min_minutes: Some(1_000_000),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(too_long.total, 0);
    let cheap = step(client.get_volume_billing(&VolumeBillingQuery {
        max_cost: Some(0.0),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    assert!(cheap.records.iter().all(|r| r.total_cost <= 0.0));
    let in_the_past = step(client.get_volume_billing(&VolumeBillingQuery {
        end_date: Some("2000-01-01".into()),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap();
    assert_eq!(in_the_past.total, 0);

    let err = step(client.get_volume_billing(&VolumeBillingQuery {
        start_date: Some("01/02/2025".into()),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap_err();
    assert_bad_request_naming(&err, "start_date");
    let err = step(client.get_volume_billing(&VolumeBillingQuery {
        page: Some(0),
        ..VolumeBillingQuery::default()
    }))
    .await
    .unwrap_err();
    assert_bad_request_naming(&err, "page");
    step(sim.shutdown()).await;
}

// === SSH keys ===

#[tokio::test]
async fn ssh_keys_import_generate_and_refuse_duplicate_names() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);
    let generated = step(client.create_ssh_key(&CreateSshKeyRequest {
        name: "gen".into(),
        public_key: None,
    }))
    .await
    .unwrap();
    assert_eq!(generated.code.as_deref(), Some("SSH_KEY_GENERATED"));
    let private_key = generated.body.private_key.as_ref().expect("private key");
    assert!(
        private_key
            .expose()
            .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----")
    );
    assert!(generated.body.key.public_key.starts_with("ssh-"));

    let imported = step(client.create_ssh_key(&CreateSshKeyRequest {
        name: "imported".into(),
        public_key: Some(generated.body.key.public_key.clone()),
    }))
    .await
    .unwrap();
    assert!(imported.success);
    assert_eq!(imported.code.as_deref(), Some("SSH_KEY_IMPORTED"));
    assert!(imported.request_id.starts_with("req_"));
    assert_eq!(imported.body.key.name, "imported");
    assert_eq!(imported.body.key.public_key, generated.body.key.public_key);
    assert!(imported.body.private_key.is_none());
    // The private key is returned once and never stored.
    let stored = step(client.get_ssh_key(&generated.body.key.id))
        .await
        .unwrap();
    assert_eq!(stored.name, "gen");

    for request in [
        CreateSshKeyRequest {
            name: "imported".into(),
            public_key: None,
        },
        CreateSshKeyRequest {
            name: "gen".into(),
            public_key: Some(generated.body.key.public_key.clone()),
        },
    ] {
        let err = step(client.create_ssh_key(&request)).await.unwrap_err();
        assert_conflict(&err, "DUPLICATE_NAME");
    }
    let err = step(client.create_ssh_key(&CreateSshKeyRequest {
        name: "garbage".into(),
        public_key: Some("not a key".into()),
    }))
    .await
    .unwrap_err();
    assert_bad_request_naming(&err, "public_key");
    // Deleting frees the name.
    step(client.delete_ssh_key(&imported.body.key.id))
        .await
        .unwrap();
    step(client.create_ssh_key(&CreateSshKeyRequest {
        name: "imported".into(),
        public_key: None,
    }))
    .await
    .unwrap();
    step(sim.shutdown()).await;
}

// === AI ===

/// A change to a valid chat request.
type ChatTweak = fn(&mut ChatRequest);

#[tokio::test]
async fn ai_models_list_the_parameter_table_and_chat_checks_ranges_and_balance() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);
    let models = step(client.list_ai_models()).await.unwrap();
    assert!(!models.models.is_empty());
    assert!(
        models
            .models
            .iter()
            .all(|m| m.price_per_million_tokens > 0.0)
    );
    assert_eq!(models.authentication_type, "api_key");
    assert!(!models.authenticated_user.is_empty());
    assert!(!models.authenticated_user.contains(sim.api_key()));
    assert!(models.minimum_balance > 0.0);
    let table: Vec<(&str, &str, Option<f64>, [f64; 2])> = models
        .parameters
        .iter()
        .map(|(name, p)| (name.as_str(), p.value_type.as_str(), p.default, p.range))
        .collect();
    assert_eq!(
        table,
        vec![
            ("max_tokens", "integer", None, [1.0, 32768.0]),
            ("presence_penalty", "float", Some(0.0), [-2.0, 2.0]),
            ("repetition_penalty", "float", Some(1.0), [-2.0, 2.0]),
            ("temperature", "float", Some(1.0), [0.0, 2.0]),
            ("top_k", "integer", Some(-1.0), [-1.0, 200.0]),
            ("top_p", "float", None, [0.0, 1.0]),
        ]
    );

    let model = models.models[0].id.clone();
    let chat = |tweak: ChatTweak| {
        let mut request = ChatRequest {
            model: model.clone(),
            messages: vec![ChatMessage {
                role: "user".into(),
                content: "hi".into(),
            }],
            ..ChatRequest::default()
        };
        tweak(&mut request);
        request
    };
    let at_the_edges = chat(|r| {
        r.max_tokens = Some(32768);
        r.temperature = Some(0.0);
        r.top_p = Some(1.0);
        r.top_k = Some(-1);
        r.presence_penalty = Some(-2.0);
        r.repetition_penalty = Some(2.0);
    });
    let before = step(client.get_balance()).await.unwrap().balance;
    let answer = step(client.chat(&at_the_edges)).await.unwrap();
    assert!(answer.cost > 0.0);
    let after = step(client.get_balance()).await.unwrap().balance;
    assert!(after < before, "chat is charged");

    let out_of_range: [(ChatTweak, &str); 6] = [
        (|r| r.max_tokens = Some(0), "max_tokens"),
        (|r| r.temperature = Some(2.5), "temperature"),
        (|r| r.top_p = Some(1.5), "top_p"),
        (|r| r.top_k = Some(201), "top_k"),
        (|r| r.presence_penalty = Some(-2.1), "presence_penalty"),
        (|r| r.repetition_penalty = Some(3.0), "repetition_penalty"),
    ];
    for (tweak, name) in out_of_range {
        let err = step(client.chat(&chat(tweak))).await.unwrap_err();
        assert_bad_request_naming(&err, name);
    }

    sim.set_balance(models.minimum_balance / 2.0);
    let err = step(client.chat(&chat(|_| {}))).await.unwrap_err();
    assert!(matches!(err, Error::InsufficientCredit { .. }), "{err:?}");
    assert!(err.is_terminal());
    step(sim.shutdown()).await;
}

// === Balance and credit ===

#[tokio::test]
async fn a_machine_that_is_off_bills_a_share_of_its_rate_until_it_runs_again() {
    let sim = start_simulator(SimulatorConfig {
        stopped_rate_fraction: 0.1,
        ..hour_long_states()
    })
    .await;
    let client = client_for(&sim);
    let vm = step(client.create_instance(&instance_request("sleeper", Tier::Advanced)))
        .await
        .unwrap()
        .instance_id;
    sim.advance_clock(HOUR);
    let running = get(&client, &vm).await.billing.hourly_rate;
    assert_eq!(running, 1.89, "one A100-80G, running");
    let boot_volume = step(client.get_volume_billing(&VolumeBillingQuery::default()))
        .await
        .unwrap()
        .records
        .remove(0);
    let boot_rate = boot_volume.per_minute_rate * 60.0;
    let billing = |client: &CloudClient| {
        let client = client.clone();
        let vm = vm.clone();
        async move {
            step(client.get_instance_billing(&InstanceBillingQuery {
                instance_id: Some(vm),
            }))
            .await
            .unwrap()
            .records
            .remove(0)
        }
    };
    let close = |what: &str, got: f64, expected: f64| {
        // The clock also runs at real speed while the test does: allow a few seconds' worth.
        assert!(
            (got - expected).abs() < 0.01 * expected.max(0.01),
            "{what}: {got}, expected {expected}"
        );
    };

    step(client.stop_instance(&vm)).await.unwrap();
    assert_eq!(get(&client, &vm).await.billing.hourly_rate, running);
    sim.advance_clock(HOUR);
    let stopped = get(&client, &vm).await;
    assert_eq!(stopped.status, InstanceStatus::Shutoff);
    assert_eq!(stopped.billing.hourly_rate, 0.1 * running);

    // An hour stopped: a tenth of the machine's hour, plus the boot volume's.
    let record_before = billing(&client).await;
    let before = step(client.get_balance()).await.unwrap().balance;
    sim.advance_clock(HOUR);
    let after = step(client.get_balance()).await.unwrap().balance;
    let record_after = billing(&client).await;
    close("drained", before - after, 0.1 * running + boot_rate);
    close(
        "billed for the hour",
        record_after.total_cost - record_before.total_cost,
        0.1 * running,
    );
    assert_eq!(record_after.hourly_rate, 0.1 * running);
    // An hour creating and an hour stopping at the full rate, then the hour stopped.
    close(
        "total",
        record_after.total_cost,
        2.0 * running + 0.1 * running,
    );

    step(client.start_instance(&vm)).await.unwrap();
    sim.advance_clock(HOUR);
    let started = get(&client, &vm).await;
    assert_eq!(started.status, InstanceStatus::Active);
    assert_eq!(started.billing.hourly_rate, running);
    let before = step(client.get_balance()).await.unwrap().balance;
    sim.advance_clock(HOUR);
    let after = step(client.get_balance()).await.unwrap().balance;
    close("drained once running", before - after, running + boot_rate);
    step(sim.shutdown()).await;
}

#[tokio::test]
async fn balance_drains_and_billed_creates_are_refused_once_it_is_spent() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);
    let vm = active_instance(&client, "spender", Tier::Advanced).await;
    let snapshot = available_snapshot(&client, &vm.instance_id, "snap").await;
    let volume =
        step(client.create_volume(&volume_request("vol", 10, "us-east-1", Tier::Advanced)))
            .await
            .unwrap();
    let first = step(client.get_balance()).await.unwrap();
    sim.advance_clock(HOUR);
    let second = step(client.get_balance()).await.unwrap();
    // At least an hour of the instance (plus the snapshot and the volumes).
    assert!(
        first.balance - second.balance >= vm.billing.hourly_rate,
        "balance {} -> {} drained less than the instance's hour at {}",
        first.balance,
        second.balance,
        vm.billing.hourly_rate
    );

    sim.set_balance(0.0);
    let refusals = [
        step(client.create_instance(&instance_request("more", Tier::Advanced)))
            .await
            .map(|_| ())
            .unwrap_err(),
        step(client.create_volume(&volume_request("more", 10, "us-east-1", Tier::Advanced)))
            .await
            .map(|_| ())
            .unwrap_err(),
        step(client.clone_volume(&volume.id, "more"))
            .await
            .map(|_| ())
            .unwrap_err(),
        step(client.create_snapshot(&vm.instance_id, &snapshot_request("more")))
            .await
            .map(|_| ())
            .unwrap_err(),
        step(client.restore_snapshot(&snapshot.snapshot_id, "more"))
            .await
            .map(|_| ())
            .unwrap_err(),
        step(client.create_image(&CreateImageRequest {
            snapshot_id: snapshot.snapshot_id.clone(),
            name: "more".into(),
        }))
        .await
        .map(|_| ())
        .unwrap_err(),
    ];
    for err in refusals {
        assert!(matches!(err, Error::InsufficientCredit { .. }), "{err:?}");
        assert_eq!(err.code(), Some("INSUFFICIENT_CREDIT"));
        assert!(err.is_terminal() && !err.is_retryable());
    }
    // Reads still work with no credit.
    step(client.list_instances()).await.unwrap();
    sim.set_balance(100.0);
    step(client.create_volume(&volume_request(
        "after-top-up",
        10,
        "us-east-1",
        Tier::Advanced,
    )))
    .await
    .unwrap();
    step(sim.shutdown()).await;
}

// === Names ===

#[tokio::test]
async fn duplicate_names_are_accepted_except_for_ssh_keys() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);
    let a = active_instance(&client, "same", Tier::Advanced).await;
    let b = active_instance(&client, "same", Tier::Advanced).await;
    assert_ne!(a.instance_id, b.instance_id);
    let v1 = step(client.create_volume(&volume_request("same", 10, "us-east-1", Tier::Legacy)))
        .await
        .unwrap();
    let v2 = step(client.create_volume(&volume_request("same", 10, "us-east-1", Tier::Legacy)))
        .await
        .unwrap();
    assert_ne!(v1.id, v2.id);
    let s1 = step(client.create_snapshot(&a.instance_id, &snapshot_request("same")))
        .await
        .unwrap();
    let s2 = step(client.create_snapshot(&a.instance_id, &snapshot_request("same")))
        .await
        .unwrap();
    assert_ne!(s1.snapshot_id, s2.snapshot_id);
    let firewall = CreateFirewallRequest {
        name: "same".into(),
        region: "us-east-1".into(),
        description: String::new(),
        rules: vec![],
    };
    let f1 = step(client.create_firewall(&firewall)).await.unwrap();
    let f2 = step(client.create_firewall(&firewall)).await.unwrap();
    assert_ne!(f1.id, f2.id);
    let instances = step(client.list_instances()).await.unwrap();
    assert_eq!(
        instances
            .instances
            .iter()
            .filter(|i| i.vm_name == "same")
            .count(),
        2
    );
    let key = CreateSshKeyRequest {
        name: "same".into(),
        public_key: None,
    };
    step(client.create_ssh_key(&key)).await.unwrap();
    let err = step(client.create_ssh_key(&key)).await.unwrap_err();
    assert_conflict(&err, "DUPLICATE_NAME");

    for bad in ["", "white space", "semi;colon", &"n".repeat(64)] {
        let err = step(client.create_volume(&volume_request(bad, 10, "us-east-1", Tier::Legacy)))
            .await
            .unwrap_err();
        assert_bad_request_naming(&err, "name");
    }
    step(client.create_volume(&volume_request(
        &"n".repeat(63),
        10,
        "us-east-1",
        Tier::Legacy,
    )))
    .await
    .unwrap();
    step(sim.shutdown()).await;
}

// === Authentication and rate limiting ===

/// Sends a bare HTTP/1.1 request and returns the status code and body.
async fn raw_get(base_url: &str, path: &str, extra_header: Option<&str>) -> (u16, String) {
    let authority = base_url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let header = extra_header.map_or(String::new(), |h| format!("{h}\r\n"));
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\n{header}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("status line");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn missing_or_wrong_api_key_is_401_on_every_kind_of_route() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let mut config = client_config(&sim);
    config.api_key = ApiKey::new("wrong-key");
    let wrong = CloudClient::new(config).unwrap();
    for err in [
        step(wrong.get_balance()).await.unwrap_err(),
        step(wrong.list_volumes(&VolumeListQuery::default()))
            .await
            .unwrap_err(),
        step(wrong.list_ai_models()).await.unwrap_err(),
        step(wrong.delete_snapshot("snap-x")).await.unwrap_err(),
        step(wrong.create_ssh_key(&CreateSshKeyRequest {
            name: "k".into(),
            public_key: None,
        }))
        .await
        .unwrap_err(),
    ] {
        assert!(matches!(err, Error::Unauthorized { .. }), "{err:?}");
        assert_eq!(err.code(), Some("INVALID_API_KEY"));
        assert!(!err.to_string().contains("wrong-key"));
    }
    for path in [
        "/balance/",
        "/volumes/billing/",
        "/firewalls/fw-1/",
        "/ai/models/",
    ] {
        let (status, body) = step(raw_get(&sim.base_url(), path, None)).await;
        assert_eq!(status, 401, "{path}");
        assert!(body.contains("INVALID_API_KEY"), "{path}: {body}");
    }
    let with_key = format!("X-API-Key: {}", sim.api_key());
    let (status, _) = step(raw_get(&sim.base_url(), "/balance/", Some(&with_key))).await;
    assert_eq!(status, 200);
    // Nothing was created by the refused calls.
    let client = client_for(&sim);
    assert!(
        step(client.list_ssh_keys())
            .await
            .unwrap()
            .ssh_keys
            .is_empty()
    );
    step(sim.shutdown()).await;
}

#[derive(Default)]
struct RetryLog {
    retries: Mutex<Vec<Duration>>,
    statuses: Mutex<Vec<Option<u16>>>,
}

impl CallObserver for RetryLog {
    fn on_call(&self, _operation: Operation, outcome: &CallOutcome, _elapsed: Duration) {
        self.statuses.lock().unwrap().push(outcome.status);
    }
    fn on_retry(&self, _operation: Operation, _next_attempt: u32, _error: &Error, delay: Duration) {
        self.retries.lock().unwrap().push(delay);
    }
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after_and_the_client_waits_it_out() {
    let sim = start_simulator(SimulatorConfig {
        rate_limit: Some(RateLimit {
            per_second: 1.0,
            burst: 2,
        }),
        ..SimulatorConfig::default()
    })
    .await;
    let mut config = client_config(&sim);
    config.retry = RetryPolicy::never();
    let impatient = CloudClient::new(config).unwrap();
    // The burst of two passes; calls beyond it are refused (a slow machine may see a
    // refilled token first, hence a few tries).
    step(impatient.get_balance()).await.unwrap();
    step(impatient.get_balance()).await.unwrap();
    let mut refused = None;
    for _ in 0..5 {
        if let Err(err) = step(impatient.get_balance()).await {
            refused = Some(err);
            break;
        }
    }
    let err = refused.expect("a call past the burst is refused");
    assert!(matches!(err, Error::RateLimited { .. }), "{err:?}");
    let retry_after = err.retry_after().expect("Retry-After header");
    assert!(retry_after >= Duration::from_secs(1), "{retry_after:?}");
    assert!(err.is_retryable());

    let log = Arc::new(RetryLog::default());
    let mut config = client_config(&sim);
    config.retry = RetryPolicy {
        max_attempts: 4,
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(10)),
        max_retry_after: Duration::from_secs(5),
    };
    let patient = CloudClient::new(config).unwrap().with_observer(log.clone());
    // The bucket is empty, so these calls meet 429s and wait them out; none fails.
    let started = tokio::time::Instant::now();
    for _ in 0..3 {
        step(patient.get_balance()).await.unwrap();
        if !log.retries.lock().unwrap().is_empty() {
            break;
        }
    }
    let statuses = log.statuses.lock().unwrap().clone();
    assert!(statuses.contains(&Some(429)), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&Some(200)));
    let retries = log.retries.lock().unwrap().clone();
    assert!(!retries.is_empty());
    assert!(
        retries.iter().all(|delay| *delay >= Duration::from_secs(1)),
        "every retry waits at least Retry-After: {retries:?}"
    );
    assert!(started.elapsed() >= Duration::from_secs(1));
    step(sim.shutdown()).await;
}

// === Faults and the client's retry classes ===

#[tokio::test]
async fn injected_faults_are_retried_only_where_repeating_is_safe() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let mut config = client_config(&sim);
    config.timeout = Duration::from_secs(2);
    config.retry = RetryPolicy {
        max_attempts: 3,
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(5)),
        max_retry_after: Duration::from_secs(5),
    };
    let client = CloudClient::new(config).unwrap();
    let vm = active_instance(&client, "faulty", Tier::Advanced).await;

    let mut plan = FaultPlan::default();
    plan.error_rate_per_operation
        .insert("GetBalance".into(), 1.0);
    plan.error_rate_per_operation
        .insert("StopInstance".into(), 1.0);
    plan.act_then_drop.insert("CreateVolume".into(), 1.0);
    sim.set_faults(plan);
    let before = sim.call_counts();
    let count = |counts: &std::collections::BTreeMap<String, u64>, op: &str| {
        counts.get(op).copied().unwrap_or(0)
    };

    // An idempotent read is repeated up to the attempt bound.
    let err = step(client.get_balance()).await.unwrap_err();
    assert!(matches!(err, Error::Server { status: 500, .. }), "{err:?}");
    // A power action is not repeated once the server has answered.
    let err = step(client.stop_instance(&vm.instance_id))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Server { status: 500, .. }), "{err:?}");
    assert_eq!(
        get(&client, &vm.instance_id).await.status,
        InstanceStatus::Active
    );
    // A billed create whose answer is lost is not repeated, although it happened.
    let err = step(client.create_volume(&volume_request(
        "lost-answer",
        10,
        "us-east-1",
        Tier::Advanced,
    )))
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Timeout { .. }
                | Error::Transport {
                    connected: true,
                    ..
                }
        ),
        "{err:?}"
    );
    assert!(!err.never_sent());

    let after = sim.call_counts();
    assert_eq!(
        count(&after, "GetBalance") - count(&before, "GetBalance"),
        3
    );
    assert_eq!(
        count(&after, "StopInstance") - count(&before, "StopInstance"),
        1
    );
    assert_eq!(
        count(&after, "CreateVolume") - count(&before, "CreateVolume"),
        1
    );

    // The caller finds the volume by name instead of creating it again.
    sim.set_faults(FaultPlan::default());
    let volumes = step(client.list_volumes(&VolumeListQuery::default()))
        .await
        .unwrap();
    assert_eq!(
        volumes
            .volumes
            .iter()
            .filter(|v| v.name == "lost-answer")
            .count(),
        1
    );
    step(sim.shutdown()).await;
}

#[tokio::test]
async fn volumes_grow_only_and_cannot_be_deleted_while_attached() {
    let sim = start_simulator(SimulatorConfig::default()).await;
    let client = client_for(&sim);
    let vm = active_instance(&client, "host", Tier::Advanced).await;
    let volume =
        step(client.create_volume(&volume_request("data", 50, "us-east-1", Tier::Advanced)))
            .await
            .unwrap();
    wait_until("volume available", || async {
        let v = client.get_volume(&volume.id).await.unwrap();
        (v.status == VolumeStatus::Available).then_some(())
    })
    .await;
    let err = step(client.resize_volume(&volume.id, 40))
        .await
        .unwrap_err();
    assert_bad_request_naming(&err, "size");
    assert_eq!(
        step(client.resize_volume(&volume.id, 80))
            .await
            .unwrap()
            .size,
        80
    );

    let elsewhere =
        step(client.create_volume(&volume_request("far", 10, "eu-west-1", Tier::Advanced)))
            .await
            .unwrap();
    let err = step(client.attach_volumes(&vm.instance_id, std::slice::from_ref(&elsewhere.id)))
        .await
        .unwrap_err();
    assert_bad_request_naming(&err, "volume_ids");

    step(client.attach_volumes(&vm.instance_id, std::slice::from_ref(&volume.id)))
        .await
        .unwrap();
    let err = step(client.delete_volume(&volume.id)).await.unwrap_err();
    assert_conflict(&err, "CONFLICT");
    let attached = step(client.get_volume(&volume.id)).await.unwrap();
    assert_eq!(attached.status, VolumeStatus::Attached);
    assert_eq!(
        attached.instance_id.as_deref(),
        Some(vm.instance_id.as_str())
    );

    step(client.detach_volumes(&vm.instance_id, std::slice::from_ref(&volume.id)))
        .await
        .unwrap();
    step(client.delete_volume(&volume.id)).await.unwrap();
    let err = step(client.get_volume(&volume.id)).await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    step(sim.shutdown()).await;
}
