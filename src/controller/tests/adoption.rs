#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Teams sharing one cloud account: what a tenant of one namespace can write must never make
//! the operator touch another team's resources. Every attack here is refused with its reason
//! and without a single cloud call that changes anything.

use crate::support;

use gpucloud_api::*;
use gpucloud_cloud::model::CreateVolumeRequest;
use gpucloud_controller::flow::conditions::reason;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use support::*;

/// The tenant's namespace: not labelled for adoption.
const TENANT: &str = "team-b";

async fn tenant_namespace(env: &Env) {
    support::create_namespace(&env.client, TENANT, false)
        .await
        .unwrap();
}

fn in_tenant<K>(mut object: K, external_id: Option<&str>) -> K
where
    K: kube::Resource,
{
    object.meta_mut().namespace = Some(TENANT.into());
    if let Some(id) = external_id {
        object.meta_mut().annotations = Some(BTreeMap::from([(
            EXTERNAL_ID_ANNOTATION.to_string(),
            id.to_string(),
        )]));
    }
    object
}

fn tenant_api<K>(env: &Env) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(env.client.clone(), TENANT)
}

fn machine(name: &str, spec: serde_json::Value) -> GpuInstance {
    let mut full = serde_json::json!({
        "region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
        "osImage": "ubuntu-22.04-cuda-12",
    });
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    object(name, full)
}

/// Every cloud call that is not a read, so far.
fn writes(env: &Env) -> BTreeMap<String, u64> {
    env.simulator
        .call_counts()
        .into_iter()
        .filter(|(operation, _)| !operation.starts_with("List") && !operation.starts_with("Get"))
        .collect()
}

/// Waits until the tenant's object `name` is Stalled with `reason`, and returns its message.
async fn stalled_in_tenant<K>(env: &Env, name: &str, wanted: &str) -> String
where
    K: crate::support::TestKind,
{
    stalled_in::<K>(env, TENANT, name, wanted).await
}

async fn stalled_in<K>(env: &Env, namespace: &str, name: &str, wanted: &str) -> String
where
    K: crate::support::TestKind,
{
    let api: Api<K> = Api::namespaced(env.client.clone(), namespace);
    eventually_showing(30, &format!("{namespace}/{name} Stalled {wanted}"), || {
        let api = api.clone();
        async move {
            let object = api.get(name).await.map_err(|e| e.to_string())?;
            let conditions = object.cloud_status().conditions;
            match conditions
                .iter()
                .find(|c| c.type_ == condition_type::STALLED)
            {
                Some(stalled) if stalled.status == "True" && stalled.reason == wanted => {
                    Ok(stalled.message.clone())
                }
                _ => Err(format!("{conditions:?}")),
            }
        }
    })
    .await
}

async fn delete_in_tenant<K>(env: &Env, name: &str)
where
    K: crate::support::TestKind,
{
    let api = tenant_api::<K>(env);
    api.delete(name, &DeleteParams::default()).await.unwrap();
    eventually(30, &format!("{TENANT}/{name} deleted"), || {
        let api = api.clone();
        async move { api.get_opt(name).await.unwrap().is_none().then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_teams_machine_cannot_be_taken_by_annotation_at_create_or_later() {
    let env = Env::start().await;
    tenant_namespace(&env).await;
    create(&env, &machine("victim", serde_json::json!({}))).await;
    let victim = ready_id::<GpuInstance>(&env, "victim").await;

    // The tenant's own machine, to which the annotation is added later.
    let own = tenant_api::<GpuInstance>(&env);
    own.create(
        &PostParams::default(),
        &in_tenant(machine("mine", serde_json::json!({})), None),
    )
    .await
    .unwrap();
    let mine = eventually(60, "the tenant's machine Ready", || {
        let own = own.clone();
        async move {
            let object = own.get("mine").await.ok()?;
            let status = object.cloud_status();
            status
                .is_ready(object.metadata.generation)
                .then(|| status.external_id.clone().unwrap())
        }
    })
    .await;
    let before = writes(&env);

    // At create: stop the other team's machine and delete it with the object.
    own.create(
        &PostParams::default(),
        &in_tenant(
            machine("thief", serde_json::json!({"powerState": "Stopped"})),
            Some(&victim),
        ),
    )
    .await
    .unwrap();
    let message = stalled_in_tenant::<GpuInstance>(&env, "thief", reason::ALREADY_OWNED).await;
    assert!(
        !message.contains("team-a") && !message.contains("victim"),
        "the owner's namespace is not the tenant's to see: {message}"
    );

    // Later: the annotation added to a machine that manages its own.
    own.patch(
        "mine",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({
            "metadata": {"annotations": {EXTERNAL_ID_ANNOTATION: victim}},
            "spec": {"powerState": "Stopped"},
        })),
    )
    .await
    .unwrap();
    stalled_in_tenant::<GpuInstance>(&env, "mine", reason::ALREADY_OWNED).await;
    assert_eq!(writes(&env), before, "no cloud call changed anything");

    delete_in_tenant::<GpuInstance>(&env, "thief").await;
    delete_in_tenant::<GpuInstance>(&env, "mine").await;
    let instances = env.simulator.state().instances;
    assert!(
        instances
            .iter()
            .any(|i| i.instance_id == victim && i.status.to_string() == "ACTIVE"),
        "the other team's machine is still there and running: {instances:?}"
    );
    assert!(
        !instances.iter().any(|i| i.instance_id == mine),
        "the tenant's own machine went with its object"
    );
    assert_eq!(
        env.calls("DeleteInstance"),
        1,
        "only the tenant's own machine"
    );
    assert_eq!(env.calls("StopInstance"), 0);
    ready::<GpuInstance>(&env, "victim").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_create_intent_never_points_at_another_teams_machine() {
    let env = Env::start().await;
    tenant_namespace(&env).await;
    create(&env, &machine("victim", serde_json::json!({}))).await;
    let victim: GpuInstance = ready(&env, "victim").await;
    let victim_status = victim.cloud_status();
    let victim_id = victim_status.external_id.clone().unwrap();

    // The annotation the operator writes with its finalizer for a first create, written by
    // the tenant with the finalizer, naming the other team's machine, in the same account,
    // started long ago: were it believed, the victim would be adopted and stopped.
    let mut thief = in_tenant(
        machine("thief", serde_json::json!({"powerState": "Stopped"})),
        None,
    );
    thief.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    thief.metadata.annotations = Some(BTreeMap::from([(
        CREATE_INTENT_ANNOTATION.to_string(),
        serde_json::json!({
            "startedAt": "2020-01-01T00:00:00Z",
            "account": victim_status.account,
            "cloudName": victim_status.cloud_name,
        })
        .to_string(),
    )]));
    let own = tenant_api::<GpuInstance>(&env);
    own.create(&PostParams::default(), &thief).await.unwrap();
    let made = eventually(60, "the tenant's machine Ready", || {
        let own = own.clone();
        async move {
            let object = own.get("thief").await.ok()?;
            let status = object.cloud_status();
            status
                .is_ready(object.metadata.generation)
                .then(|| status.external_id.clone().unwrap())
        }
    })
    .await;
    assert_ne!(
        made, victim_id,
        "the tenant's object recorded its own machine"
    );
    let instances = env.simulator.state().instances;
    assert!(
        instances
            .iter()
            .any(|i| i.instance_id == victim_id && i.status.to_string() == "ACTIVE"),
        "the other team's machine is still running: {instances:?}"
    );

    delete_in_tenant::<GpuInstance>(&env, "thief").await;
    let instances = env.simulator.state().instances;
    assert!(instances.iter().any(|i| i.instance_id == victim_id));
    assert!(!instances.iter().any(|i| i.instance_id == made));
    assert_eq!(
        env.calls("CreateInstance"),
        2,
        "the victim's and the tenant's own"
    );
    assert_eq!(
        env.calls("DeleteInstance"),
        1,
        "only the tenant's own machine"
    );
    ready::<GpuInstance>(&env, "victim").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_teams_firewall_cannot_be_adopted() {
    let env = Env::start().await;
    tenant_namespace(&env).await;
    let rule = serde_json::json!({
        "direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
        "remoteIpPrefix": "192.0.2.0/24", "portRangeMin": 22, "portRangeMax": 22,
    });
    let firewall: Firewall = object(
        "edge",
        serde_json::json!({"region": "us-east-1", "rules": [rule]}),
    );
    create(&env, &firewall).await;
    let id = ready_id::<Firewall>(&env, "edge").await;
    let rules_before = env.simulator.state().firewalls[0].rules.clone();
    let before = writes(&env);

    let open_to_the_world = serde_json::json!({
        "direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
        "remoteIpPrefix": "0.0.0.0/0", "portRangeMin": 1, "portRangeMax": 65535,
    });
    let hostile: Firewall = object(
        "open",
        serde_json::json!({"region": "us-east-1", "rules": [open_to_the_world]}),
    );
    tenant_api::<Firewall>(&env)
        .create(&PostParams::default(), &in_tenant(hostile, Some(&id)))
        .await
        .unwrap();
    stalled_in_tenant::<Firewall>(&env, "open", reason::ALREADY_OWNED).await;
    delete_in_tenant::<Firewall>(&env, "open").await;

    assert_eq!(writes(&env), before, "no cloud call changed anything");
    let state = env.simulator.state();
    assert_eq!(state.firewalls.len(), 1);
    assert_eq!(state.firewalls[0].rules, rules_before);
    ready::<Firewall>(&env, "edge").await;
}

/// A 10 GB volume the operator did not create, named by a Volume `taken` (20 GB) in the
/// tenant's namespace, which may not adopt: the volume, the cloud's writes before the
/// object, and the refusal's message once it shows.
async fn refused_volume_adoption(
    env: &Env,
) -> (gpucloud_cloud::model::Volume, BTreeMap<String, u64>, String) {
    tenant_namespace(env).await;
    let foreign = cloud_client(env)
        .create_volume(&CreateVolumeRequest::new(
            "someone-elses-data",
            10,
            "us-east-1",
        ))
        .await
        .unwrap();
    let before = writes(env);
    let volume: Volume = object(
        "taken",
        serde_json::json!({"region": "us-east-1", "sizeGb": 20}),
    );
    tenant_api::<Volume>(env)
        .create(
            &PostParams::default(),
            &in_tenant(volume, Some(&foreign.id)),
        )
        .await
        .unwrap();
    let message = stalled_in_tenant::<Volume>(env, "taken", reason::ADOPTION_NOT_ALLOWED).await;
    (foreign, before, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_the_operator_did_not_create_is_adopted_only_where_allowed() {
    let env = Env::start().await;
    let (foreign, before, message) = refused_volume_adoption(&env).await;
    assert!(
        message.contains("--allow-adoption") && message.contains("gpucloud.io/adoption"),
        "the message says how to allow it: {message}"
    );
    delete_in_tenant::<Volume>(&env, "taken").await;
    assert_eq!(writes(&env), before, "no cloud call changed anything");
    let volumes = data_volumes(&env);
    assert_eq!(volumes.len(), 1);
    assert_eq!(
        (volumes[0].id.as_str(), volumes[0].size),
        (foreign.id.as_str(), 10)
    );
}

/// A namespace labelled to allow adoption after its object was refused: the object is
/// adopted within one resync interval, without being touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_labelled_later_lets_its_refused_adoption_through() {
    let env = Env::start().await;
    let (foreign, _, _) = refused_volume_adoption(&env).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    namespaces
        .patch(
            TENANT,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "metadata": {"labels": {"gpucloud.io/adoption": "allowed"}}
            })),
        )
        .await
        .unwrap();
    // The tests' resync interval is 2 s; the terminal recheck, 5 minutes.
    eventually(15, "the volume adopted", || async {
        let volume = tenant_api::<Volume>(&env).get("taken").await.ok()?;
        (volume.cloud_status().external_id.as_deref() == Some(foreign.id.as_str())
            && volume.cloud_status().is_ready(volume.metadata.generation))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_teams_machine_cannot_be_snapshotted_by_id() {
    let env = Env::start().await;
    tenant_namespace(&env).await;
    create(&env, &machine("victim", serde_json::json!({}))).await;
    let victim = ready_id::<GpuInstance>(&env, "victim").await;
    let gets_before = env.calls("GetInstance");
    let before = writes(&env);

    let copy: Snapshot = object("copy", serde_json::json!({"instanceId": victim}));
    tenant_api::<Snapshot>(&env)
        .create(&PostParams::default(), &in_tenant(copy, None))
        .await
        .unwrap();
    stalled_in_tenant::<Snapshot>(&env, "copy", reason::ALREADY_OWNED).await;
    delete_in_tenant::<Snapshot>(&env, "copy").await;

    assert_eq!(writes(&env), before, "no cloud call changed anything");
    assert_eq!(env.calls("CreateSnapshot"), 0);
    assert_eq!(
        env.calls("GetInstance"),
        gets_before,
        "not even a read of the other team's machine"
    );
    assert!(env.simulator.state().snapshots.is_empty());
}

/// Status is memory, not authority: a tenant who may write its object's status points it at
/// another team's machine (`externalId` and `cloudName`), then asks for `powerState: Stopped`
/// and deletes the object. The other team's machine is never stopped nor deleted; the forged
/// object stalls naming the conflict, and its deletion deletes only its own machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_status_never_acts_on_another_teams_machine() {
    let env = Env::start().await;
    tenant_namespace(&env).await;
    create(&env, &machine("victim", serde_json::json!({}))).await;
    let victim_id = ready_id::<GpuInstance>(&env, "victim").await;
    let victim: GpuInstance = env.api::<GpuInstance>().get("victim").await.unwrap();
    let victim_name = victim.cloud_status().cloud_name.unwrap();
    let thief_id = tenant_machine(&env, "thief").await;
    forge_then_stop(
        &env,
        "thief",
        serde_json::json!({"externalId": victim_id, "cloudName": victim_name}),
    )
    .await;
    let message = stalled_in_tenant::<GpuInstance>(&env, "thief", reason::CLAIM_CONFLICT).await;
    assert!(message.contains(&victim_id), "{message}");
    assert!(message.contains("another namespace"), "{message}");
    // The team whose machine was named hears of it too, without learning who named it.
    wait_for_events(&env, "victim", &[reason::CLAIM_CONFLICT]).await;
    for event in events_about(&env, "victim", reason::CLAIM_CONFLICT).await {
        let note = event.note.unwrap_or_default();
        assert!(!note.contains(TENANT) && !note.contains("thief"), "{note}");
    }
    delete_in_tenant::<GpuInstance>(&env, "thief").await;

    assert_eq!(env.calls("StopInstance"), 0, "no machine was stopped");
    assert_victim_running_and_own_deleted(&env, &victim_id, &thief_id);
}

/// A forged `status.cloudName` alone (the object's own id left as it was) names another team's
/// machine by the name the operator would find it by: nothing is done to that machine, the
/// forged object stalls naming the conflict, the other team hears of it, and the deletion
/// deletes only the tenant's own machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_cloud_name_alone_never_acts_on_another_teams_machine() {
    let env = Env::start().await;
    tenant_namespace(&env).await;
    create(&env, &machine("victim", serde_json::json!({}))).await;
    let victim_id = ready_id::<GpuInstance>(&env, "victim").await;
    let victim: GpuInstance = env.api::<GpuInstance>().get("victim").await.unwrap();
    let victim_name = victim.cloud_status().cloud_name.unwrap();
    let thief_id = tenant_machine(&env, "thief").await;
    forge_then_stop(&env, "thief", serde_json::json!({"cloudName": victim_name})).await;
    let message = stalled_in_tenant::<GpuInstance>(&env, "thief", reason::CLAIM_CONFLICT).await;
    assert!(message.contains("another namespace"), "{message}");
    wait_for_events(&env, "victim", &[reason::CLAIM_CONFLICT]).await;
    delete_in_tenant::<GpuInstance>(&env, "thief").await;
    assert_victim_running_and_own_deleted(&env, &victim_id, &thief_id);
}

/// A forged status claiming a machine another namespace lawfully adopted stops only the
/// forger (`ClaimConflict`): the adopter hears of it and keeps managing its machine (a power
/// change is carried out), and the forger's deletion leaves the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_claim_never_stops_the_lawful_adopter() {
    let env = Env::start().await;
    tenant_namespace(&env).await;
    let request = gpucloud_cloud::model::CreateInstanceRequest::new(
        "preset-vm",
        "us-east-1",
        "L40S",
        1,
        "ubuntu-22.04-cuda-12",
    );
    let preset = cloud_client(&env)
        .create_instance(&request)
        .await
        .unwrap()
        .instance_id;
    let mut adopter = machine("adopter", serde_json::json!({}));
    adopter.metadata.annotations = Some(BTreeMap::from([(
        EXTERNAL_ID_ANNOTATION.to_string(),
        preset.clone(),
    )]));
    create(&env, &adopter).await;
    ready::<GpuInstance>(&env, "adopter").await;
    tenant_machine(&env, "thief").await;
    forge_then_stop(
        &env,
        "thief",
        serde_json::json!({"externalId": preset, "cloudName": "preset-vm"}),
    )
    .await;
    stalled_in_tenant::<GpuInstance>(&env, "thief", reason::CLAIM_CONFLICT).await;
    wait_for_events(&env, "adopter", &[reason::CLAIM_CONFLICT]).await;

    let stopped = change_power(
        &env,
        "adopter",
        "Stopped",
        gpucloud_cloud::model::InstanceStatus::Shutoff,
    )
    .await;
    assert!(stopped, "the adopter's machine was not stopped");
    delete_in_tenant::<GpuInstance>(&env, "thief").await;
    assert!(
        env.simulator
            .state()
            .instances
            .iter()
            .any(|i| i.instance_id == preset),
        "the adopted machine is still there"
    );
}

/// A forged claim on a team's machine from another namespace never stops that team's own
/// references to it (the machine's own cloud name says whose it is): a Volume attached to it
/// and a Snapshot of it by id are made as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_claim_never_blocks_the_owners_references() {
    let env = Env::start().await;
    tenant_namespace(&env).await;
    create(&env, &machine("victim", serde_json::json!({}))).await;
    let victim = ready_id::<GpuInstance>(&env, "victim").await;
    tenant_machine(&env, "thief").await;
    let forged = serde_json::json!({"status": {"externalId": victim}});
    tenant_api::<GpuInstance>(&env)
        .patch_status("thief", &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .unwrap();
    stalled_in_tenant::<GpuInstance>(&env, "thief", reason::CLAIM_CONFLICT).await;

    create(
        &env,
        &object::<Volume>(
            "data",
            serde_json::json!({"region": "us-east-1", "sizeGb": 10,
                "instanceRef": {"name": "victim"}}),
        ),
    )
    .await;
    create(
        &env,
        &object::<Snapshot>("disk", serde_json::json!({"instanceId": victim})),
    )
    .await;
    let volume = ready_id::<Volume>(&env, "data").await;
    ready_id::<Snapshot>(&env, "disk").await;
    let attached = env
        .simulator
        .state()
        .volumes
        .into_iter()
        .find(|v| v.id == volume)
        .and_then(|v| v.instance_id);
    assert_eq!(attached.as_deref(), Some(victim.as_str()));
    delete_in_tenant::<GpuInstance>(&env, "thief").await;
}

/// A status forged in one's own namespace is no claim to what it names either: a machine
/// nobody's object made (created by hand in the shared account), written into the status of
/// the tenant's own GpuInstance, does not make a Snapshot of the tenant naming it by
/// `spec.instanceId` the tenant's to take. Refused (`AdoptionNotAllowed`), no snapshot made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_claim_in_ones_own_namespace_authorizes_no_reference() {
    let env = Env::start().await;
    tenant_namespace(&env).await;
    let foreign = support::machine_by_hand(&env, "someone-elses").await;
    tenant_machine(&env, "decoy").await;
    let forged = serde_json::json!({"status": {"externalId": foreign.instance_id}});
    tenant_api::<GpuInstance>(&env)
        .patch_status("decoy", &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .unwrap();
    stalled_in_tenant::<GpuInstance>(&env, "decoy", reason::FOREIGN_RECORD).await;
    tenant_api::<Snapshot>(&env)
        .create(
            &PostParams::default(),
            &in_tenant(
                object::<Snapshot>(
                    "copy",
                    serde_json::json!({"instanceId": foreign.instance_id}),
                ),
                None,
            ),
        )
        .await
        .unwrap();
    let message = stalled_in_tenant::<Snapshot>(&env, "copy", reason::ADOPTION_NOT_ALLOWED).await;
    assert!(message.contains(&foreign.instance_id), "{message}");
    assert_eq!(env.calls("CreateSnapshot"), 0);
    assert!(env.simulator.state().snapshots.is_empty());
    delete_in_tenant::<Snapshot>(&env, "copy").await;
    delete_in_tenant::<GpuInstance>(&env, "decoy").await;
}

/// Sets the test namespace's GpuInstance `name` to `power` and waits (30 s at most) for the
/// cloud to show the machine it records in `wanted`.
async fn change_power(
    env: &Env,
    name: &str,
    power: &str,
    wanted: gpucloud_cloud::model::InstanceStatus,
) -> bool {
    let api = env.api::<GpuInstance>();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"powerState": power}})),
    )
    .await
    .unwrap();
    let id = api.get(name).await.unwrap().cloud_status().external_id;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        let state = env.simulator.state();
        if state
            .instances
            .iter()
            .any(|i| Some(&i.instance_id) == id.as_ref() && i.status == wanted)
        {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

/// A machine's boot volume goes with the machine: even where adoption is allowed, a Volume
/// naming one by `gpucloud.io/external-id` adopts nothing, and the boot volume is left as it
/// was (no resize, no detach), the object's deletion included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boot_volume_is_never_adopted_on_its_own() {
    let env = Env::start().await;
    support::create_namespace(&env.client, "team-c", true)
        .await
        .unwrap();
    create(&env, &machine("victim", serde_json::json!({}))).await;
    let victim = ready_id::<GpuInstance>(&env, "victim").await;
    let boot = env
        .simulator
        .state()
        .volumes
        .into_iter()
        .find(|v| v.instance_id.as_deref() == Some(victim.as_str()) && v.bootable)
        .expect("the machine's boot volume");
    let before = writes(&env);

    let mut volume: Volume = object(
        "taken",
        serde_json::json!({"region": "us-east-1", "sizeGb": 2000}),
    );
    volume.metadata.namespace = Some("team-c".to_string());
    volume.metadata.annotations = Some(
        [(EXTERNAL_ID_ANNOTATION.to_string(), boot.id.clone())]
            .into_iter()
            .collect(),
    );
    let api: Api<Volume> = Api::namespaced(env.client.clone(), "team-c");
    api.create(&PostParams::default(), &volume).await.unwrap();
    let message = stalled_in::<Volume>(&env, "team-c", "taken", reason::INVALID_SPEC).await;
    assert!(message.contains("boot volume"), "{message}");
    assert_eq!(
        api.get("taken").await.unwrap().cloud_status().external_id,
        None
    );
    api.delete("taken", &DeleteParams::default()).await.unwrap();
    eventually(30, "team-c/taken deleted", || {
        let api = api.clone();
        async move { api.get_opt("taken").await.ok()?.is_none().then_some(()) }
    })
    .await;

    assert_eq!(writes(&env), before, "no cloud call changed anything");
    let now = env
        .simulator
        .state()
        .volumes
        .into_iter()
        .find(|v| v.id == boot.id)
        .expect("the boot volume is still there");
    assert_eq!(
        (now.size, now.instance_id.as_deref()),
        (boot.size, Some(victim.as_str()))
    );
}

/// `spec.osImage` also boots a custom image or a snapshot by id: another team's is refused
/// before any call, and the other team's image and snapshot are left as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_teams_image_or_snapshot_cannot_be_booted_by_os_image() {
    let env = Env::start().await;
    let snapshot = victim_snapshot(&env).await;
    create(
        &env,
        &object::<Image>(
            "golden",
            serde_json::json!({"snapshotRef": {"name": "disk"}}),
        ),
    )
    .await;
    let image = ready_id::<Image>(&env, "golden").await;
    let creates = env.calls("CreateInstance");
    let before = writes(&env);

    for (name, id) in [("from-image", &image), ("from-snapshot", &snapshot)] {
        tenant_api::<GpuInstance>(&env)
            .create(
                &PostParams::default(),
                &in_tenant(machine(name, serde_json::json!({"osImage": id})), None),
            )
            .await
            .unwrap();
        let message = stalled_in_tenant::<GpuInstance>(&env, name, reason::ALREADY_OWNED).await;
        assert!(message.contains("another namespace"), "{message}");
        delete_in_tenant::<GpuInstance>(&env, name).await;
    }

    assert_eq!(env.calls("CreateInstance"), creates, "no machine booted");
    assert_eq!(writes(&env), before, "no cloud call changed anything");
    let state = env.simulator.state();
    assert!(state.images.iter().any(|i| i.id == image));
    assert!(state.snapshots.iter().any(|s| s.snapshot_id == snapshot));
    assert_eq!(state.instances.len(), 1);
}

/// A team's custom image whose object has not recorded it yet (its create's answer lost: the
/// object still waits) is that team's by its cloud name: another namespace booting it by
/// `spec.osImage` is refused before any create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_not_recorded_yet_cannot_be_booted_by_another_team() {
    let env = Env::start().await;
    let snapshot = victim_snapshot(&env).await;
    // The Image object waits for a Snapshot that is not there yet; the image its create made
    // (as a create whose answer was lost leaves it) carries its cloud name.
    let golden = env
        .api::<Image>()
        .create(
            &PostParams::default(),
            &object::<Image>(
                "golden",
                serde_json::json!({"snapshotRef": {"name": "not-yet"}}),
            ),
        )
        .await
        .unwrap();
    let name = gpucloud_controller::flow::naming::cloud_name(
        NAMESPACE,
        "golden",
        golden.metadata.uid.as_deref().unwrap(),
    );
    let image = cloud_client(&env)
        .create_image(&gpucloud_cloud::model::CreateImageRequest {
            snapshot_id: snapshot,
            name,
        })
        .await
        .unwrap()
        .id;
    let creates = env.calls("CreateInstance");

    tenant_api::<GpuInstance>(&env)
        .create(
            &PostParams::default(),
            &in_tenant(
                machine("from-image", serde_json::json!({"osImage": image})),
                None,
            ),
        )
        .await
        .unwrap();
    let message = stalled_in_tenant::<GpuInstance>(&env, "from-image", reason::ALREADY_OWNED).await;
    assert!(message.contains("another namespace"), "{message}");
    delete_in_tenant::<GpuInstance>(&env, "from-image").await;
    assert_eq!(env.calls("CreateInstance"), creates, "no machine booted");
    assert!(
        env.api::<Image>()
            .get("golden")
            .await
            .unwrap()
            .cloud_status()
            .external_id
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_whose_report_was_lost_shows_soon_after() {
    // Status writes do not wake an object; a refusal whose status write failed used to show
    // nothing until the terminal recheck, five minutes later (found by the chaos runs'
    // hostile tenant under status-write conflicts).
    let env = Env::start().await;
    tenant_namespace(&env).await;
    create(&env, &machine("victim", serde_json::json!({}))).await;
    let victim = ready_id::<GpuInstance>(&env, "victim").await;
    let conflicts = gpucloud_apiserver::faults::ApiFaultPlan {
        seed: 1,
        status_conflict_rate: 1.0,
        watch_cut_rate: 0.0,
        watch_lifetime: (
            std::time::Duration::from_millis(100),
            std::time::Duration::from_millis(1500),
        ),
        create_timeout_rate: 0.0,
        watch_delay: std::time::Duration::ZERO,
    };
    env.apiserver.faults().set_plan(conflicts).unwrap();
    let own = tenant_api::<GpuInstance>(&env);
    own.create(
        &PostParams::default(),
        &in_tenant(machine("thief", serde_json::json!({})), Some(&victim)),
    )
    .await
    .unwrap();
    // Refused at least once, its report lost.
    eventually(30, "the refusal's report refused", || async {
        (env.apiserver.faults().counts().status_conflicts >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    env.apiserver.faults().set_plan(Default::default()).unwrap();
    stalled_in_tenant::<GpuInstance>(&env, "thief", reason::ALREADY_OWNED).await;
    delete_in_tenant::<GpuInstance>(&env, "thief").await;
    ready::<GpuInstance>(&env, "victim").await;
}

/// The tenant's namespace, and in the test namespace a machine `victim` with a Ready Snapshot
/// `disk` of it: the snapshot's cloud id.
async fn victim_snapshot(env: &Env) -> String {
    tenant_namespace(env).await;
    create(env, &machine("victim", serde_json::json!({}))).await;
    ready_id::<GpuInstance>(env, "victim").await;
    create(
        env,
        &object::<Snapshot>(
            "disk",
            serde_json::json!({"instanceRef": {"name": "victim"}}),
        ),
    )
    .await;
    ready_id::<Snapshot>(env, "disk").await
}

/// Writes `status` (a forged one) into the tenant's GpuInstance `name`, then asks it to stop.
async fn forge_then_stop(env: &Env, name: &str, status: serde_json::Value) {
    let own = tenant_api::<GpuInstance>(env);
    own.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .unwrap();
    own.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"powerState": "Stopped"}})),
    )
    .await
    .unwrap();
}

/// The other team's machine `victim` is still there and running; the tenant's own `own`
/// went with its object.
fn assert_victim_running_and_own_deleted(env: &Env, victim: &str, own: &str) {
    let state = env.simulator.state();
    let victim_machine = state
        .instances
        .iter()
        .find(|i| i.instance_id == victim)
        .expect("the other team's machine still exists");
    assert_eq!(
        victim_machine.status,
        gpucloud_cloud::model::InstanceStatus::Active
    );
    assert!(
        !state.instances.iter().any(|i| i.instance_id == own),
        "the tenant's own machine is deleted with its object"
    );
}

/// The tenant's own machine `name`, made and Ready: its cloud id.
async fn tenant_machine(env: &Env, name: &str) -> String {
    let own = tenant_api::<GpuInstance>(env);
    own.create(
        &PostParams::default(),
        &in_tenant(machine(name, serde_json::json!({})), None),
    )
    .await
    .unwrap();
    eventually(60, &format!("{TENANT}/{name} Ready"), || {
        let own = own.clone();
        async move {
            let object = own.get(name).await.ok()?;
            object
                .cloud_status()
                .is_ready(object.metadata.generation)
                .then(|| object.cloud_status().external_id)
                .flatten()
        }
    })
    .await
}

/// Deletes the test namespace's object `name` of kind `K` with `deletionPolicy: Orphan`: its
/// cloud resource stays, written into the released record as that namespace's.
async fn release<K>(env: &Env, name: &str)
where
    K: crate::support::TestKind,
{
    let api = env.api::<K>();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"deletionPolicy": "Orphan"}})),
    )
    .await
    .unwrap();
    api.delete(name, &DeleteParams::default()).await.unwrap();
    eventually(30, &format!("{name} released"), || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok()?.is_none().then_some(()) }
    })
    .await;
}

/// A resource another namespace let go (`deletionPolicy: Orphan`, a kept final snapshot)
/// stays that namespace's: where adoption is allowed, another namespace can neither adopt it
/// by annotation nor boot from it, and nothing is called on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_resource_stays_its_namespaces() {
    let env = Env::start().await;
    support::create_namespace(&env.client, "team-c", true)
        .await
        .unwrap();
    create(&env, &machine("victim", serde_json::json!({}))).await;
    ready_id::<GpuInstance>(&env, "victim").await;
    create(
        &env,
        &object::<Snapshot>(
            "disk",
            serde_json::json!({"instanceRef": {"name": "victim"}}),
        ),
    )
    .await;
    let snapshot = ready_id::<Snapshot>(&env, "disk").await;
    release::<Snapshot>(&env, "disk").await;
    let creates = env.calls("CreateInstance");
    let before = writes(&env);

    let mut adopted: Snapshot =
        object("taken", serde_json::json!({"instanceRef": {"name": "any"}}));
    adopted.metadata.namespace = Some("team-c".into());
    adopted.metadata.annotations = Some(BTreeMap::from([(
        EXTERNAL_ID_ANNOTATION.to_string(),
        snapshot.clone(),
    )]));
    let snapshots: Api<Snapshot> = Api::namespaced(env.client.clone(), "team-c");
    snapshots
        .create(&PostParams::default(), &adopted)
        .await
        .unwrap();
    let message = stalled_in::<Snapshot>(&env, "team-c", "taken", reason::ALREADY_OWNED).await;
    assert!(message.contains("another namespace"), "{message}");

    let mut booted = machine("booted", serde_json::json!({"osImage": snapshot}));
    booted.metadata.namespace = Some("team-c".into());
    let machines: Api<GpuInstance> = Api::namespaced(env.client.clone(), "team-c");
    machines
        .create(&PostParams::default(), &booted)
        .await
        .unwrap();
    let message = stalled_in::<GpuInstance>(&env, "team-c", "booted", reason::ALREADY_OWNED).await;
    assert!(message.contains("another namespace"), "{message}");

    snapshots
        .delete("taken", &DeleteParams::default())
        .await
        .unwrap();
    machines
        .delete("booted", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "team-c's objects deleted", || {
        let (snapshots, machines) = (snapshots.clone(), machines.clone());
        async move {
            (snapshots.get_opt("taken").await.ok()?.is_none()
                && machines.get_opt("booted").await.ok()?.is_none())
            .then_some(())
        }
    })
    .await;
    assert_eq!(env.calls("CreateInstance"), creates, "no machine booted");
    assert_eq!(writes(&env), before, "no cloud call changed anything");
    assert!(
        env.simulator
            .state()
            .snapshots
            .iter()
            .any(|s| s.snapshot_id == snapshot),
        "the released snapshot is still there"
    );
}

/// A status naming a resource no object claims (here one another namespace let go) is not
/// taken for the operator's memory: with `externalId` alone the object stalls
/// `ForeignRecord`; with the annotation forged to match, the adoption check refuses it. No
/// call is made on that machine, and deleting the objects deletes only the tenant's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_status_naming_a_resource_no_object_claims_is_never_acted_on() {
    let env = Env::start().await;
    tenant_namespace(&env).await;
    create(&env, &machine("kept", serde_json::json!({}))).await;
    let kept = ready_id::<GpuInstance>(&env, "kept").await;
    release::<GpuInstance>(&env, "kept").await;
    let own_ids = [
        tenant_machine(&env, "status-only").await,
        tenant_machine(&env, "with-annotation").await,
    ];
    let own = tenant_api::<GpuInstance>(&env);
    // One after the other: two objects naming one resource would conflict with each other.
    for (name, refused) in [
        ("status-only", reason::FOREIGN_RECORD),
        ("with-annotation", reason::ALREADY_OWNED),
    ] {
        if name == "with-annotation" {
            own.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({
                    "metadata": {"annotations": {EXTERNAL_ID_ANNOTATION: kept}},
                })),
            )
            .await
            .unwrap();
        }
        forge_then_stop(&env, name, serde_json::json!({"externalId": kept})).await;
        let message = stalled_in_tenant::<GpuInstance>(&env, name, refused).await;
        assert!(message.contains(&kept), "{message}");
        delete_in_tenant::<GpuInstance>(&env, name).await;
    }

    assert_eq!(env.calls("StopInstance"), 0, "no machine was stopped");
    let state = env.simulator.state();
    let kept_machine = state
        .instances
        .iter()
        .find(|i| i.instance_id == kept)
        .expect("the released machine still exists");
    assert_eq!(
        kept_machine.status,
        gpucloud_cloud::model::InstanceStatus::Active
    );
    for id in own_ids {
        assert!(
            !state.instances.iter().any(|i| i.instance_id == id),
            "the tenant's own machine {id} is deleted with its object"
        );
    }
}
