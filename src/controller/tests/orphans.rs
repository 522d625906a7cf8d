#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The orphan sweeper against leaks made the way they happen: the operator is killed after a
//! create call and before the id is recorded, then the object's finalizer is removed by hand
//! and the object deleted, so the pending-create mark goes with it. One sweep must find
//! exactly those resources, report them (the sweep report and an Event on the summary object),
//! leave foreign, claimed and deliberately orphaned resources alone, respect the grace period,
//! and with `delete` remove them (detaching what the cloud would refuse to delete) so their
//! billing stops.

use crate::support;

use gpucloud_api::*;
use gpucloud_apiserver::faults::{ApiFaultPlan, ApiFaults};
use gpucloud_cloud::model::CreateVolumeRequest;
use gpucloud_cloud::{CallObserver, CallOutcome, Operation};
use gpucloud_controller::accounts::account::{Accounts, SecretLocation};
use gpucloud_controller::accounts::orphans::{
    OrphanSweepSettings, OrphanSweeper, REASON_DELETED, REASON_FOUND, RELEASED_CONFIGMAP,
};
use gpucloud_controller::runtime::events::EventPublisher;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::*;
use tokio::sync::Notify;

/// Makes every status write fail from the moment a create call returns: the operator can
/// never record the id, exactly as if it had been killed right after the call.
struct LoseTheRecord {
    faults: Arc<ApiFaults>,
    armed: AtomicBool,
    fired: Notify,
}

impl CallObserver for LoseTheRecord {
    fn on_call(&self, operation: Operation, _outcome: &CallOutcome, _elapsed: Duration) {
        if operation.name().starts_with("Create") && self.armed.swap(false, Ordering::SeqCst) {
            self.faults
                .set_plan(ApiFaultPlan {
                    status_conflict_rate: 1.0,
                    ..ApiFaultPlan::default()
                })
                .unwrap();
            self.fired.notify_one();
        }
    }
}

/// Creates `object`, kills the operator between its create call and the record of the id,
/// and returns the object as the API server holds it then.
async fn create_then_crash<K>(env: &mut Env, lose: &Arc<LoseTheRecord>, object: K) -> K
where
    K: crate::support::TestKind,
{
    let mut config = test_config(&env.simulator);
    config.cloud.observer = Some(lose.clone());
    lose.armed.store(true, Ordering::SeqCst);
    env.start_operator(config);
    create(env, &object).await;
    within(30, lose.fired.notified())
        .await
        .expect("no create call");
    env.kill_operator().await;
    env.apiserver
        .faults()
        .set_plan(ApiFaultPlan::default())
        .unwrap();
    let name = object.name_any();
    let stored = env.api::<K>().get(&name).await.unwrap();
    let status = gpucloud_controller::flow::recorded::recorded_status(&stored);
    assert!(
        status.pending_create.is_some() && status.external_id.is_none(),
        "{name}: expected a pending create without an id, got {status:?}"
    );
    stored
}

/// Deletes `name` the way people unstick a deletion: finalizers removed by hand.
async fn delete_bypassing_finalizer<K>(env: &Env, name: &str)
where
    K: crate::support::TestKind,
{
    let api = env.api::<K>();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    api.delete(name, &DeleteParams::default()).await.unwrap();
    gone::<K>(env, name).await;
}

pub fn sweeper(env: &Env, grace_period: Duration, delete: bool) -> OrphanSweeper {
    observed_sweeper(env, grace_period, delete, None)
}

/// A sweeper whose cloud calls `observer` sees.
fn observed_sweeper(
    env: &Env,
    grace_period: Duration,
    delete: bool,
    observer: Option<Arc<dyn CallObserver>>,
) -> OrphanSweeper {
    let mut config = test_config(&env.simulator);
    config.cloud.observer = observer;
    let accounts = Arc::new(Accounts::new(
        config.cloud,
        env.client.clone(),
        Some(SecretLocation {
            namespace: OPERATOR_NAMESPACE.into(),
            name: "gpucloud-credentials".into(),
            key: "apiKey".into(),
        }),
    ));
    OrphanSweeper::new(
        env.client.clone(),
        accounts,
        Vec::new(),
        OrphanSweepSettings {
            interval: Duration::from_secs(600),
            grace_period,
            delete,
            summary_namespace: OPERATOR_NAMESPACE.into(),
            summary_name: "gpucloud-operator".into(),
        },
        Arc::new(EventPublisher::new(env.client.clone(), support::reporter())),
    )
}

/// Notes of the Events with `reason` regarding the summary Lease.
async fn summary_events(env: &Env, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), OPERATOR_NAMESPACE);
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.involved_object.kind.as_deref() == Some("Lease")
                && e.involved_object.name.as_deref() == Some("gpucloud-operator")
        })
        .filter_map(|e| e.message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sweep_finds_exactly_the_leaked_resources_and_deletes_them_when_asked() {
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let cloud = cloud_client(&env);
    let (lost_vm, lost_vol, lost_fw) = leak_a_machine_a_volume_and_a_firewall(&mut env).await;
    let (ready_vm, kept_id) = claim_a_machine_and_release_a_volume(&mut env).await;

    // Foreign resources: made by hand, no mark (one only looks like ours).
    for name in ["hand-made-data", "gco-looks-like-ours"] {
        cloud
            .create_volume(&CreateVolumeRequest::new(name, 5, "us-east-1"))
            .await
            .unwrap();
    }

    // The leaked volume and firewall are attached to the claimed machine: the cloud refuses to
    // delete them as they are.
    let vm_id = ready_vm.cloud_status().external_id.unwrap();
    let (lost_vm_id, lost_vol_id, lost_fw_id) = cloud_ids(&env, (&lost_vm, &lost_vol, &lost_fw));
    cloud
        .attach_volumes(&vm_id, std::slice::from_ref(&lost_vol_id))
        .await
        .unwrap();
    cloud
        .attach_firewall(&lost_fw_id, std::slice::from_ref(&vm_id))
        .await
        .unwrap();
    let before = env.simulator.state();

    // Within the grace period nothing is an orphan yet.
    let report = sweeper(&env, Duration::from_secs(15 * 60), false)
        .sweep()
        .await
        .unwrap();
    assert!(report.orphans.is_empty(), "{:?}", report.orphans);
    assert_eq!(report.accounts.len(), 1);

    let leaked = BTreeSet::from([
        ("instance", lost_vm_id.clone()),
        ("volume", lost_vol_id.clone()),
        ("firewall", lost_fw_id.clone()),
    ]);
    // Past it, one report-only sweep finds exactly the three leaks.
    a_report_only_sweep_finds_exactly(&env, &leaked, &before).await;
    // With delete set, the same sweep deletes them, detaching first.
    let state = a_deleting_sweep_removes_exactly(&env, &leaked, (&lost_vm_id, &vm_id)).await;
    assert!(!state.volumes.iter().any(|v| v.id == lost_vol_id));
    assert!(!state.firewalls.iter().any(|f| f.id == lost_fw_id));
    // Everything else stays.
    let instance = |id: &str| state.instances.iter().find(|i| i.instance_id == id);
    assert!(instance(&vm_id).is_some_and(|i| i.status.to_string() == "ACTIVE"));
    for name in ["hand-made-data", "gco-looks-like-ours"] {
        assert!(state.volumes.iter().any(|v| v.name == name), "{name} gone");
    }
    assert!(
        state.volumes.iter().any(|v| v.id == kept_id),
        "kept-vol gone"
    );
    assert_eq!(state.ssh_keys.len(), before.ssh_keys.len());

    // A later sweep finds nothing left (a machine still shutting down is not reported again).
    let report = sweeper(&env, Duration::ZERO, true).sweep().await.unwrap();
    assert!(report.orphans.is_empty(), "{:?}", report.orphans);
}

/// Leaks a machine, a volume and a firewall: each created, the operator killed before the id
/// was recorded, the object deleted by hand. An SshKey goes through the same crash but is
/// kept: its pending create still claims the key. Returns the three deleted objects.
async fn leak_a_machine_a_volume_and_a_firewall(env: &mut Env) -> (GpuInstance, Volume, Firewall) {
    let lose = Arc::new(LoseTheRecord {
        faults: env.apiserver.state().faults.clone(),
        armed: AtomicBool::new(false),
        fired: Notify::new(),
    });
    let lost_vm = create_then_crash(
        env,
        &lose,
        object::<GpuInstance>(
            "lost-vm",
            serde_json::json!({"region": "us-east-1", "gpuType": "L40S",
                "osImage": "ubuntu-22.04-cuda-12"}),
        ),
    )
    .await;
    delete_bypassing_finalizer::<GpuInstance>(env, "lost-vm").await;
    let lost_vol = create_then_crash(
        env,
        &lose,
        object::<Volume>(
            "lost-vol",
            serde_json::json!({"region": "us-east-1", "sizeGb": 10}),
        ),
    )
    .await;
    delete_bypassing_finalizer::<Volume>(env, "lost-vol").await;
    let lost_fw = create_then_crash(
        env,
        &lose,
        object::<Firewall>(
            "lost-fw",
            serde_json::json!({"region": "us-east-1", "rules": []}),
        ),
    )
    .await;
    delete_bypassing_finalizer::<Firewall>(env, "lost-fw").await;
    // Same crash, object kept: its pending create still claims the key.
    create_then_crash(
        env,
        &lose,
        object::<SshKey>("pending-key", serde_json::json!({})),
    )
    .await;
    (lost_vm, lost_vol, lost_fw)
}

/// A Ready machine (claimed), and a volume deleted with `deletionPolicy: Orphan` (left on
/// purpose, recorded as released). Returns the machine and the volume's id.
async fn claim_a_machine_and_release_a_volume(env: &mut Env) -> (GpuInstance, String) {
    env.start_operator(test_config(&env.simulator));
    create(
        env,
        &object::<GpuInstance>(
            "ready-vm",
            serde_json::json!({"region": "us-east-1", "gpuType": "L40S",
                "osImage": "ubuntu-22.04-cuda-12"}),
        ),
    )
    .await;
    create(
        env,
        &object::<Volume>(
            "kept-vol",
            serde_json::json!({"region": "us-east-1", "sizeGb": 10, "deletionPolicy": "Orphan"}),
        ),
    )
    .await;
    let ready_vm = ready::<GpuInstance>(env, "ready-vm").await;
    let kept_id = ready_id::<Volume>(env, "kept-vol").await;
    support::delete_and_wait::<Volume>(env, "kept-vol").await;
    env.stop_operator().await;
    let released: Api<ConfigMap> = Api::namespaced(env.client.clone(), OPERATOR_NAMESPACE);
    let released = released.get(RELEASED_CONFIGMAP).await.unwrap();
    assert!(
        released
            .data
            .unwrap_or_default()
            .contains_key(&format!("id.{kept_id}")),
        "the deliberately orphaned volume is not recorded as released"
    );
    (ready_vm, kept_id)
}

/// The cloud ids of the leaked machine, volume and firewall, found by their cloud names.
fn cloud_ids(
    env: &Env,
    (lost_vm, lost_vol, lost_fw): (&GpuInstance, &Volume, &Firewall),
) -> (String, String, String) {
    let state = env.simulator.state();
    let id_named = |names: Vec<(String, String)>, cloud_name: &str| {
        names
            .into_iter()
            .find(|(_, n)| n == cloud_name)
            .map(|(id, _)| id)
            .unwrap_or_else(|| panic!("{cloud_name} is not in the cloud"))
    };
    let cloud_name = |o: &dyn CloudNamed| o.pending_name();
    let lost_vm_id = id_named(
        state
            .instances
            .iter()
            .map(|i| (i.instance_id.clone(), i.vm_name.clone()))
            .collect(),
        &cloud_name(lost_vm),
    );
    let lost_vol_id = id_named(
        state
            .volumes
            .iter()
            .map(|v| (v.id.clone(), v.name.clone()))
            .collect(),
        &cloud_name(lost_vol),
    );
    let lost_fw_id = id_named(
        state
            .firewalls
            .iter()
            .map(|f| (f.id.clone(), f.name.clone()))
            .collect(),
        &cloud_name(lost_fw),
    );
    (lost_vm_id, lost_vol_id, lost_fw_id)
}

/// A report-only sweep finds exactly `leaked`, tells of them in one Event on the summary
/// object (without the API key), and deletes nothing.
async fn a_report_only_sweep_finds_exactly(
    env: &Env,
    leaked: &BTreeSet<(&str, String)>,
    before: &gpucloud_simulator::AccountSnapshot,
) {
    let report = sweeper(env, Duration::ZERO, false).sweep().await.unwrap();
    let found: BTreeSet<(&str, String)> = report
        .orphans
        .iter()
        .map(|o| (o.kind, o.id.clone()))
        .collect();
    assert_eq!(&found, leaked);
    assert!(report.deleted.is_empty() && report.delete_failed.is_empty());
    assert!(report.list_errors.is_empty(), "{:?}", report.list_errors);
    let notes = summary_events(env, REASON_FOUND).await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    for (_, id) in leaked {
        assert!(notes[0].contains(id.as_str()), "{id} not in {:?}", notes[0]);
    }
    assert!(notes[0].contains("--delete-orphans"), "{:?}", notes[0]);
    assert!(!notes[0].contains(env.simulator.api_key()));
    let after_report = env.simulator.state();
    assert_eq!(after_report.instances.len(), before.instances.len());
    assert_eq!(after_report.volumes.len(), before.volumes.len());
    assert_eq!(after_report.firewalls.len(), before.firewalls.len());
}

/// A deleting sweep deletes exactly `leaked` (detaching first), tells of it in one Event, and
/// the leaked machine's billing stops: only the claimed machine `vm_id` is billed. Returns the
/// cloud's state as it was right after the sweep.
async fn a_deleting_sweep_removes_exactly(
    env: &Env,
    leaked: &BTreeSet<(&str, String)>,
    (lost_vm_id, vm_id): (&str, &str),
) -> gpucloud_simulator::AccountSnapshot {
    let report = sweeper(env, Duration::ZERO, true).sweep().await.unwrap();
    assert!(
        report.delete_failed.is_empty(),
        "{:?}",
        report.delete_failed
    );
    let deleted: BTreeSet<(&str, String)> = report
        .deleted
        .iter()
        .map(|o| (o.kind, o.id.clone()))
        .collect();
    assert_eq!(&deleted, leaked);
    assert_eq!(summary_events(env, REASON_DELETED).await.len(), 1);

    let state = env.simulator.state();
    let instance = |id: &str| state.instances.iter().find(|i| i.instance_id == id);
    assert!(
        instance(lost_vm_id).is_none_or(|i| i.status.to_string() == "DELETING"),
        "the leaked machine is still there"
    );
    // Once its shutdown has run, only the claimed machine is billed.
    env.simulator.advance_clock(Duration::from_secs(120));
    let billed: Vec<String> = env
        .simulator
        .state()
        .instance_billing
        .into_iter()
        .filter(|b| b.end_time.is_none())
        .map(|b| b.instance_id)
        .collect();
    assert_eq!(billed, vec![vm_id.to_string()], "billing did not stop");
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_read_from_every_page_and_an_unreadable_object_stops_the_sweep() {
    use gpucloud_controller::runtime::pages::PAGE;
    let env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    // More keys than a page; the last one listed claims a marked key in the cloud.
    let keys = usize::try_from(PAGE).unwrap() + 1;
    for n in 0..keys {
        create(
            &env,
            &object::<SshKey>(&format!("key-{n:04}"), serde_json::json!({})),
        )
        .await;
    }
    let last = env
        .api::<SshKey>()
        .get(&format!("key-{:04}", keys - 1))
        .await
        .unwrap();
    let claimed = gpucloud_controller::flow::naming::cloud_name(
        NAMESPACE,
        &last.name_any(),
        &last.uid().unwrap(),
    );
    import_ssh_key(&env, &claimed).await;
    let report = sweeper(&env, Duration::ZERO, false).sweep().await.unwrap();
    assert!(report.orphans.is_empty(), "{:?}", report.orphans);

    // An object the kind cannot read may claim anything: nothing is reported, or deleted.
    crate::invalid_objects::loosen_ssh_key_schema(&env).await;
    crate::invalid_objects::create_unreadable_ssh_key(&env, "unreadable").await;
    import_ssh_key(&env, "gco-unclaimed-0123456789abcdef").await;
    let error = sweeper(&env, Duration::ZERO, true)
        .sweep()
        .await
        .expect_err("a sweep with an unreadable object");
    assert!(
        error.to_string().contains("SshKey") && error.to_string().contains("unreadable"),
        "{error}"
    );
    assert_eq!(env.simulator.state().ssh_keys.len(), 2);
}

/// The cloud name an object's pending create recorded.
trait CloudNamed {
    fn pending_name(&self) -> String;
}

impl<K: Managed + Resource> CloudNamed for K {
    fn pending_name(&self) -> String {
        gpucloud_controller::flow::recorded::recorded_status(self)
            .pending_create
            .unwrap()
            .cloud_name
    }
}

/// Deletes the cloud SSH key `id` as soon as the sweep's first list of keys is answered: as
/// if the key's object had finished its deletion between the sweep's cloud lists and its read
/// of the objects, which a large deletion does.
struct GoneAfterTheList {
    base_url: String,
    api_key: String,
    id: String,
    armed: AtomicBool,
}

impl CallObserver for GoneAfterTheList {
    fn on_call(&self, operation: Operation, _outcome: &CallOutcome, _elapsed: Duration) {
        if operation.name() != "ListSshKeys" || !self.armed.swap(false, Ordering::SeqCst) {
            return;
        }
        let (url, key, id) = (self.base_url.clone(), self.api_key.clone(), self.id.clone());
        // The hook is synchronous: the delete runs on a runtime of its own, and the sweep
        // waits for it.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let config =
                    gpucloud_cloud::ClientConfig::new(url, gpucloud_cloud::ApiKey::new(&key));
                let client = gpucloud_cloud::CloudClient::new(config).unwrap();
                client.delete_ssh_key(&id).await.unwrap();
            });
        })
        .join()
        .unwrap();
    }
}

/// A marked resource no object claims, listed by the sweep and gone before the sweep has read
/// the objects, is no orphan: only a later list could show one. The other, still there, is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_gone_since_the_sweeps_list_is_no_orphan() {
    let env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let gone = import_ssh_key(&env, "gco-deleted-meanwhile-0123456789abcdef").await;
    let leaked = import_ssh_key(&env, "gco-leaked-0123456789abcdef").await;
    let hook = Arc::new(GoneAfterTheList {
        base_url: env.simulator.base_url(),
        api_key: env.simulator.api_key().to_string(),
        id: gone.id.clone(),
        armed: AtomicBool::new(true),
    });
    let report = observed_sweeper(&env, Duration::ZERO, false, Some(hook.clone()))
        .sweep()
        .await
        .unwrap();
    assert!(
        !hook.armed.load(Ordering::SeqCst),
        "the sweep listed no keys"
    );
    assert_eq!(env.simulator.state().ssh_keys.len(), 1);
    let found: Vec<&str> = report.orphans.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(found, [leaked.id.as_str()]);
    assert!(report.list_errors.is_empty(), "{:?}", report.list_errors);
}
