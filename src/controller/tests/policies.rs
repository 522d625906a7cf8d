#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Adoption, management and deletion policies, pause, credentials and terminal errors.

use crate::support;

use gpucloud_api::*;
use gpucloud_cloud::ApiKey;
use gpucloud_cloud::model::CreateInstanceRequest;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use std::time::Duration;
use support::{Env, NAMESPACE, eventually};

fn instance(name: &str, extra: serde_json::Value) -> GpuInstance {
    let mut spec = serde_json::json!({
        "region": "us-east-1",
        "gpuType": "H100-80G",
        "gpuCount": 1,
        "osImage": "ubuntu-22.04-cuda-12",
    });
    json_merge(&mut spec, extra);
    GpuInstance::new(name, serde_json::from_value(spec).unwrap())
}

fn json_merge(target: &mut serde_json::Value, patch: serde_json::Value) {
    if let (Some(t), serde_json::Value::Object(p)) = (target.as_object_mut(), patch) {
        for (k, v) in p {
            t.insert(k, v);
        }
    }
}

async fn condition(env: &Env, name: &str, type_: &str, status: &str, reason: &str) -> GpuInstance {
    let api = env.api::<GpuInstance>();
    eventually(30, &format!("{name}: {type_}={status} {reason}"), || {
        let api = api.clone();
        async move {
            let object = api.get(name).await.ok()?;
            let c = object.cloud_status().condition(type_)?.clone();
            (c.status == status && c.reason == reason).then_some(object)
        }
    })
    .await
}

async fn foreign_instance(env: &Env, name: &str) -> String {
    let request =
        CreateInstanceRequest::new(name, "us-east-1", "H100-80G", 1, "ubuntu-22.04-cuda-12");
    support::cloud_client(env)
        .create_instance(&request)
        .await
        .unwrap()
        .instance_id
}

fn with_annotation(mut object: GpuInstance, key: &str, value: &str) -> GpuInstance {
    object
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_leaves_the_cloud_resource() {
    let env = Env::start().await;
    let api = env.api::<GpuInstance>();
    api.create(
        &PostParams::default(),
        &instance("keep", serde_json::json!({"deletionPolicy": "Orphan"})),
    )
    .await
    .unwrap();
    condition(&env, "keep", "Ready", "True", "Available").await;
    api.delete("keep", &DeleteParams::default()).await.unwrap();
    eventually(30, "object gone", || async {
        api.get_opt("keep").await.unwrap().is_none().then_some(())
    })
    .await;
    let cloud = env.simulator.state();
    assert_eq!(cloud.instances.len(), 1);
    assert_eq!(env.calls("DeleteInstance"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_waits_for_the_cloud_before_releasing_the_finalizer() {
    let env = Env::start().await;
    let api = env.api::<GpuInstance>();
    api.create(
        &PostParams::default(),
        &instance("gone", serde_json::json!({})),
    )
    .await
    .unwrap();
    condition(&env, "gone", "Ready", "True", "Available").await;
    api.delete("gone", &DeleteParams::default()).await.unwrap();
    // While the cloud still lists the instance the object stays, marked for deletion.
    let mut saw_held = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let listed = !env.simulator.state().instances.is_empty();
        match api.get_opt("gone").await.unwrap() {
            Some(object) => {
                assert!(object.metadata.deletion_timestamp.is_some());
                saw_held |= listed;
            }
            None => break,
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "object not released within 30s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        saw_held,
        "the object was released before the cloud confirmed the delete"
    );
    assert!(env.simulator.state().instances.is_empty());
    assert_eq!(env.calls("DeleteInstance"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adoption_by_annotation_creates_nothing_and_manages_the_existing_instance() {
    let env = Env::start().await;
    let id = foreign_instance(&env, "pre-existing").await;
    let api = env.api::<GpuInstance>();
    let object = with_annotation(
        instance("adopted", serde_json::json!({})),
        EXTERNAL_ID_ANNOTATION,
        &id,
    );
    api.create(&PostParams::default(), &object).await.unwrap();
    let ready = condition(&env, "adopted", "Ready", "True", "Available").await;
    assert_eq!(
        ready.cloud_status().external_id.as_deref(),
        Some(id.as_str())
    );
    assert_eq!(env.simulator.state().instances.len(), 1);
    assert_eq!(env.calls("CreateInstance"), 1, "only the test's own create");
    // Managed from now on: deleting the object deletes the adopted instance.
    api.delete("adopted", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "adopted instance deleted", || async {
        env.simulator.state().instances.is_empty().then_some(())
    })
    .await;
}

/// An adopted machine that is not what the spec states (other GPUs, another image) is never
/// Ready, and nothing is done to it: the fields that differ are immutable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_machine_other_than_the_spec_states_is_stalled_naming_both() {
    let env = Env::start().await;
    let request = CreateInstanceRequest::new(
        "smaller",
        "us-east-1",
        "RTX-A6000",
        1,
        "ubuntu-22.04-cuda-12",
    );
    let id = support::cloud_client(&env)
        .create_instance(&request)
        .await
        .unwrap()
        .instance_id;
    let api = env.api::<GpuInstance>();
    let object = with_annotation(
        instance(
            "adopted",
            serde_json::json!({
                "gpuCount": 4,
                "powerState": "Stopped",
                "osImage": "debian-12-cuda-12",
            }),
        ),
        EXTERNAL_ID_ANNOTATION,
        &id,
    );
    api.create(&PostParams::default(), &object).await.unwrap();
    let stalled = condition(&env, "adopted", "Stalled", "True", "SpecMismatch").await;
    let ready = stalled.cloud_status().condition("Ready").unwrap().clone();
    assert_eq!(ready.status, "False");
    for part in [
        "RTX-A6000 x1",
        "spec.gpuType is H100-80G",
        "spec.gpuCount is 4",
        "spec.osImage is debian-12-cuda-12 (it booted ubuntu-22.04-cuda-12)",
    ] {
        assert!(
            ready.message.contains(part),
            "{part:?} in {}",
            ready.message
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.calls("StopInstance"),
        0,
        "acted on a machine it does not describe"
    );
    assert_eq!(env.calls("CreateInstance"), 1, "only the test's own create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_only_reports_and_never_mutates() {
    let env = Env::start().await;
    let id = foreign_instance(&env, "watched").await;
    let api = env.api::<GpuInstance>();
    let object = with_annotation(
        instance(
            "observer",
            serde_json::json!({"managementPolicy": "ObserveOnly", "powerState": "Stopped", "publicIp": false}),
        ),
        EXTERNAL_ID_ANNOTATION,
        &id,
    );
    api.create(&PostParams::default(), &object).await.unwrap();
    // The spec asks for Stopped, the machine runs, and nothing will change that: not Ready.
    // (While the machine boots, only its public IP is named: it has one, the spec none.)
    let observed = eventually(30, "observer: NotApplied naming the power state", || {
        let api = api.clone();
        async move {
            let object = api.get("observer").await.ok()?;
            let ready = object.cloud_status().condition("Ready")?.clone();
            (ready.reason == "NotApplied"
                && ready.message.contains("spec.powerState is Stopped")
                && ready.message.contains("spec.publicIp is false"))
            .then_some(object)
        }
    })
    .await;
    assert_eq!(
        observed
            .cloud_status()
            .condition("Stalled")
            .map(|c| c.status.as_str()),
        Some("True")
    );
    assert_eq!(
        observed.cloud_status().external_id.as_deref(),
        Some(id.as_str())
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    for mutation in [
        "StopInstance",
        "TogglePublicIp",
        "DeleteInstance",
        "HibernateInstance",
    ] {
        assert_eq!(
            env.calls(mutation),
            0,
            "{mutation} called under ObserveOnly"
        );
    }
    api.delete("observer", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "object gone", || async {
        api.get_opt("observer")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        env.simulator.state().instances.len(),
        1,
        "ObserveOnly never deletes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_only_without_an_external_id_is_stalled() {
    let env = Env::start().await;
    let api = env.api::<GpuInstance>();
    api.create(
        &PostParams::default(),
        &instance(
            "nothing",
            serde_json::json!({"managementPolicy": "ObserveOnly"}),
        ),
    )
    .await
    .unwrap();
    let stalled = condition(&env, "nothing", "Stalled", "True", "InvalidSpec").await;
    assert!(
        stalled
            .cloud_status()
            .condition("Stalled")
            .unwrap()
            .message
            .contains(EXTERNAL_ID_ANNOTATION)
    );
    assert_eq!(env.calls("CreateInstance"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_objects_are_left_alone_until_unpaused() {
    let env = Env::start().await;
    let api = env.api::<GpuInstance>();
    api.create(
        &PostParams::default(),
        &instance("p", serde_json::json!({})),
    )
    .await
    .unwrap();
    condition(&env, "p", "Ready", "True", "Available").await;
    let patch = serde_json::json!({
        "metadata": {"annotations": {PAUSED_ANNOTATION: "true"}},
        "spec": {"powerState": "Stopped"},
    });
    api.patch("p", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    // Paused says so, and how to resume; Ready is still the last reconcile's (generation 1),
    // not a claim about the stop that has not happened.
    let paused = condition(&env, "p", "Paused", "True", "Paused").await;
    let status = paused.cloud_status();
    assert!(
        status
            .condition("Paused")
            .unwrap()
            .message
            .contains("remove the annotation"),
        "{status:?}"
    );
    let ready = status.condition("Ready").unwrap();
    assert_eq!(ready.observed_generation, Some(1), "{ready:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        env.calls("StopInstance"),
        0,
        "a paused object was reconciled"
    );
    let unpause = serde_json::json!({"metadata": {"annotations": {PAUSED_ANNOTATION: null}}});
    api.patch("p", &PatchParams::default(), &Patch::Merge(unpause))
        .await
        .unwrap();
    eventually(30, "stopped after unpause", || async {
        (env.simulator.state().instances[0].status.as_str() == "SHUTOFF").then_some(())
    })
    .await;
    eventually(30, "Paused gone once resumed and Ready again", || async {
        let status = api.get("p").await.ok()?.cloud_status();
        (status.condition("Paused").is_none() && status.is_ready(Some(2))).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_cloud_errors_stall_without_a_retry_storm() {
    let env = Env::start().await;
    let api = env.api::<GpuInstance>();
    api.create(
        &PostParams::default(),
        // An OS image the cloud does not have: only the cloud says so.
        &instance("bad-gpu", serde_json::json!({"osImage": "windows-95"})),
    )
    .await
    .unwrap();
    let stalled = condition(&env, "bad-gpu", "Stalled", "True", "InvalidSpec").await;
    let message = stalled
        .cloud_status()
        .condition("Stalled")
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains("image_id"),
        "the cloud's message is shown: {message}"
    );
    assert!(
        stalled.cloud_status().pending_create.is_none(),
        "a refused create leaves no pending intent"
    );
    let calls = env.calls("CreateInstance");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        env.calls("CreateInstance"),
        calls,
        "a terminal error was retried"
    );
    assert_eq!(calls, 1);
    assert!(env.simulator.state().instances.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_credentials_stall_until_the_secret_appears() {
    let env = Env::start().await;
    let api = env.api::<GpuInstance>();
    let object = instance(
        "creds",
        serde_json::json!({"credentialsSecretRef": {"name": "team-key"}}),
    );
    api.create(&PostParams::default(), &object).await.unwrap();
    let stalled = condition(&env, "creds", "Stalled", "True", "CredentialsMissing").await;
    assert!(
        stalled
            .cloud_status()
            .condition("Stalled")
            .unwrap()
            .message
            .contains("team-key")
    );
    env.put_secret(NAMESPACE, "team-key", env.simulator.api_key())
        .await;
    condition(&env, "creds", "Ready", "True", "Available").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credentials_secret_is_read_once_not_per_reconcile() {
    let env = Env::start().await;
    let api = env.api::<GpuInstance>();
    let names: Vec<String> = (0..12).map(|i| format!("shared-{i}")).collect();
    for name in &names {
        api.create(
            &PostParams::default(),
            &instance(name, serde_json::json!({})),
        )
        .await
        .unwrap();
    }
    for name in &names {
        condition(&env, name, "Ready", "True", "Available").await;
    }
    let requests = env.apiserver.requests();
    let secret_reads = requests
        .iter()
        .filter(|r| r.resource == "secrets" && r.verb == "get")
        .count();
    let status_writes = requests
        .iter()
        .filter(|r| r.resource == "gpuinstances" && r.subresource == "status")
        .count();
    // Every status write came from a reconcile that needed the key; reading the Secret for
    // each would be one read per write, at least one per object (a machine whose first list
    // shows it running reaches Ready in one). The reads left are those after a (re)list of
    // the Secret watches, which may have changed it.
    assert!(
        status_writes >= names.len() && secret_reads < names.len(),
        "{secret_reads} Secret reads for {status_writes} status writes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_credentials_stall_and_never_leak_the_key() {
    let env = Env::start().await;
    env.put_secret(NAMESPACE, "wrong-key", "not-the-key-4f9a")
        .await;
    let api = env.api::<GpuInstance>();
    let object = instance(
        "wrong",
        serde_json::json!({"credentialsSecretRef": {"name": "wrong-key"}}),
    );
    api.create(&PostParams::default(), &object).await.unwrap();
    let stalled = condition(&env, "wrong", "Stalled", "True", "CredentialsInvalid").await;
    let text = serde_json::to_string(&stalled).unwrap();
    assert!(
        !text.contains("not-the-key-4f9a"),
        "the key appears in the object"
    );
    // The message names where the key is read, the one place to fix it.
    let status = stalled.cloud_status();
    let message = &status.condition("Ready").unwrap().message;
    assert!(
        message.contains(&format!("Secret {NAMESPACE}/wrong-key")),
        "{message}"
    );
    // Fixing the Secret is enough: its change wakes the object.
    env.put_secret(NAMESPACE, "wrong-key", env.simulator.api_key())
        .await;
    condition(&env, "wrong", "Ready", "True", "Available").await;
}

/// Calls the cloud refused for their key (a `401` belongs to no account).
fn refused_calls(env: &Env) -> u64 {
    env.simulator
        .counters()
        .operations
        .values()
        .filter_map(|statuses| statuses.get(&401))
        .sum()
}

/// Once the Secret holds a good key, the refused one is no longer sent: the account it opened
/// (its observers' lists included) ends when the Secret is next read, not after the passes
/// that retire unused accounts (two resyncs: minutes in production).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_secret_ends_the_use_of_the_refused_key_at_once() {
    let env = Env::start().await;
    env.put_secret(NAMESPACE, "rotated-key", "not-the-key-5be2")
        .await;
    let api = env.api::<GpuInstance>();
    let object = instance(
        "rotated",
        serde_json::json!({"credentialsSecretRef": {"name": "rotated-key"}}),
    );
    api.create(&PostParams::default(), &object).await.unwrap();
    condition(&env, "rotated", "Stalled", "True", "CredentialsInvalid").await;
    env.put_secret(NAMESPACE, "rotated-key", env.simulator.api_key())
        .await;
    condition(&env, "rotated", "Ready", "True", "Available").await;
    // A call sent before the fix may still be answered.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused = refused_calls(&env);
    // Three resyncs: the observers of an account still open list it in that time.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        refused_calls(&env),
        refused,
        "the refused key was sent again after the Secret was fixed"
    );
}

/// Another team holding the same key in a Secret of its own, then changing it, closes nothing
/// of this team's: the account stays open (listed, its balance reported) while this team's
/// Secret still resolves to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_team_changing_its_copy_of_the_key_leaves_this_teams_account_open() {
    const SHARED_KEY: &str = "shared-key-41c0";
    const OTHER_KEY: &str = "other-key-8e77";
    let simulator = gpucloud_simulator::SimulatorConfig {
        api_keys: vec![
            "default-key-2a9d".into(),
            SHARED_KEY.into(),
            OTHER_KEY.into(),
        ],
        ..gpucloud_simulator::SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    let config = support::test_config(&env.simulator);
    let metrics = config.metrics.clone();
    env.start_operator(config);
    support::create_namespace(&env.client, "team-b", false)
        .await
        .unwrap();
    env.put_secret(NAMESPACE, "team-key", SHARED_KEY).await;
    env.put_secret("team-b", "copied-key", SHARED_KEY).await;
    let with_key = |name: &str, secret: &str| {
        instance(
            name,
            serde_json::json!({"credentialsSecretRef": {"name": secret}}),
        )
    };
    env.api::<GpuInstance>()
        .create(&PostParams::default(), &with_key("mine", "team-key"))
        .await
        .unwrap();
    let theirs: kube::Api<GpuInstance> = kube::Api::namespaced(env.client.clone(), "team-b");
    theirs
        .create(&PostParams::default(), &with_key("theirs", "copied-key"))
        .await
        .unwrap();
    support::ready::<GpuInstance>(&env, "mine").await;
    eventually(30, "team-b's machine Ready", || async {
        let object = theirs.get("theirs").await.ok()?;
        (object.cloud_status().condition("Ready")?.status == "True").then_some(())
    })
    .await;
    let shared = gpucloud_controller::accounts::account::AccountId::of(&ApiKey::new(SHARED_KEY));
    let balance = format!("gpucloud_account_balance{{account=\"{}\"}}", shared.label());
    eventually(30, "the shared key's balance reported", || async {
        metrics.encode().contains(&balance).then_some(())
    })
    .await;

    env.put_secret("team-b", "copied-key", OTHER_KEY).await;
    // Three resyncs: the shared account is never closed meanwhile.
    for _ in 0..60 {
        assert!(
            metrics.encode().contains(&balance),
            "team-b's change closed the account team-a's Secret resolves to"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    support::ready::<GpuInstance>(&env, "mine").await;
}

/// The operator's default Secret lives in the operator's namespace; fixing it wakes the objects
/// of every namespace that read it, rather than leaving them to the five-minute recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_default_secret_wakes_the_objects_of_every_namespace() {
    // The wrong key is in place before the operator starts: a Secret replaced while it runs
    // reaches it through its watch, and an object created before that event arrives may still
    // use the key the operator read before.
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    env.put_secret(
        support::OPERATOR_NAMESPACE,
        "gpucloud-credentials",
        "not-the-key-77c1",
    )
    .await;
    env.start_operator(support::test_config(&env.simulator));
    let api = env.api::<GpuInstance>();
    api.create(
        &PostParams::default(),
        &instance("by-default", serde_json::json!({})),
    )
    .await
    .unwrap();
    condition(&env, "by-default", "Stalled", "True", "CredentialsInvalid").await;
    env.put_secret(
        support::OPERATOR_NAMESPACE,
        "gpucloud-credentials",
        env.simulator.api_key(),
    )
    .await;
    condition(&env, "by-default", "Ready", "True", "Available").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_of_other_namespaces_cannot_be_used() {
    let env = Env::start().await;
    // The key exists, but only in the operator's namespace.
    env.put_secret(
        support::OPERATOR_NAMESPACE,
        "shared-key",
        env.simulator.api_key(),
    )
    .await;
    let api = env.api::<GpuInstance>();
    let object = instance(
        "cross",
        serde_json::json!({"credentialsSecretRef": {"name": "shared-key"}}),
    );
    api.create(&PostParams::default(), &object).await.unwrap();
    let stalled = condition(&env, "cross", "Stalled", "True", "CredentialsMissing").await;
    assert!(
        stalled
            .cloud_status()
            .condition("Stalled")
            .unwrap()
            .message
            .contains(&format!("{NAMESPACE}/shared-key"))
    );
    // A namespace in the reference is not part of the schema: it never reaches the operator.
    let sneaky = serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
        "metadata": {"name": "cross2"},
        "spec": {"region": "us-east-1", "gpuType": "H100-80G", "osImage": "ubuntu-22.04-cuda-12",
                 "credentialsSecretRef": {"name": "shared-key", "namespace": support::OPERATOR_NAMESPACE}},
    });
    let created: GpuInstance = match api
        .create(
            &PostParams::default(),
            &serde_json::from_value(sneaky.clone()).unwrap(),
        )
        .await
    {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    assert!(
        serde_json::to_value(&created.spec).unwrap()["credentialsSecretRef"]
            .get("namespace")
            .is_none()
    );
    condition(&env, "cross2", "Stalled", "True", "CredentialsMissing").await;
    assert!(env.simulator.state().instances.is_empty());
}

/// A key replaced in its Secret by another key of the same cloud account: the object goes on
/// with the new key, and the old key's account, which no object uses any more, is retired:
/// no longer listed, its balance no longer read or reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_key_stops_being_used() {
    const OLD_KEY: &str = "old-key-0d1e";
    const NEW_KEY: &str = "new-key-7a2b";
    let simulator = gpucloud_simulator::SimulatorConfig {
        api_keys: vec!["default-key-5c3f".into(), OLD_KEY.into(), NEW_KEY.into()],
        ..gpucloud_simulator::SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    let config = support::test_config(&env.simulator);
    let metrics = config.metrics.clone();
    env.start_operator(config);
    env.put_secret(NAMESPACE, "team-key", OLD_KEY).await;
    let object = instance(
        "rotated",
        serde_json::json!({"credentialsSecretRef": {"name": "team-key"}}),
    );
    env.api::<GpuInstance>()
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let machine = support::ready::<GpuInstance>(&env, "rotated")
        .await
        .cloud_status()
        .external_id;
    let balance_of = |key: &str| {
        let account = gpucloud_controller::accounts::account::AccountId::of(&ApiKey::new(key));
        format!(
            "gpucloud_account_balance{{account=\"{}\"}}",
            account.label()
        )
    };
    let reported = |key: &str| metrics.encode().contains(&balance_of(key));
    eventually(30, "the old key's balance reported", || async {
        reported(OLD_KEY).then_some(())
    })
    .await;

    env.put_secret(NAMESPACE, "team-key", NEW_KEY).await;
    eventually(30, "the old key retired, the new one in use", || async {
        (!reported(OLD_KEY) && reported(NEW_KEY)).then_some(())
    })
    .await;
    let after = support::ready::<GpuInstance>(&env, "rotated").await;
    assert_eq!(
        after.cloud_status().external_id,
        machine,
        "the same machine"
    );
    // Retired for good while no object names the key again: not back a few passes later.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!reported(OLD_KEY), "{}", metrics.encode());
}

/// A Secret switched to the key of another cloud account, one that does not hold the object's
/// resource. Nothing irreversible is concluded from that account's silence: no second resource
/// is created there (a second bill, and the first one left running unseen), and nothing is
/// reported deleted outside. The objects are Stalled until the key is put back; deleting one
/// keeps its finalizer (the resource still exists, in the first account) until
/// `deletionPolicy: Orphan` leaves the resource where it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_account_is_not_followed() {
    const FIRST: &str = "first-account-key-1c2d";
    const SECOND: &str = "second-account-key-9e8f";
    let simulator = gpucloud_simulator::SimulatorConfig {
        api_keys: vec!["default-key-5c3f".into(), FIRST.into()],
        other_accounts: vec![vec![SECOND.into()]],
        ..gpucloud_simulator::SimulatorConfig::default()
    };
    let mut env = Env::without_operator(simulator).await;
    env.start_operator(support::test_config(&env.simulator));
    env.put_secret(NAMESPACE, "team-key", FIRST).await;
    let credentials = serde_json::json!({"credentialsSecretRef": {"name": "team-key"}});
    support::create(&env, &instance("switched", credentials.clone())).await;
    // An SshKey is a kind the operator creates again when its resource is deleted outside.
    let mut key_spec = serde_json::json!({"publicKey": support::PUBLIC_KEY});
    key_spec["credentialsSecretRef"] = credentials["credentialsSecretRef"].clone();
    support::create(&env, &support::object::<SshKey>("switched-key", key_spec)).await;
    let machine = support::ready_id::<GpuInstance>(&env, "switched").await;
    let key = support::ready_id::<SshKey>(&env, "switched-key").await;

    env.put_secret(NAMESPACE, "team-key", SECOND).await;
    let held = condition(&env, "switched", "Stalled", "True", "AccountChanged").await;
    let message = held
        .cloud_status()
        .condition("Ready")
        .unwrap()
        .message
        .clone();
    assert!(message.contains(&machine), "{message}");
    support::condition::<SshKey>(&env, "switched-key", "Stalled", "True", "AccountChanged").await;
    // A few resyncs later: still nothing made in the second account.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = env.simulator.account_state(1).unwrap();
    assert!(
        second.instances.is_empty() && second.ssh_keys.is_empty(),
        "created in the second account: {second:?}"
    );
    for secret in [FIRST, SECOND] {
        assert!(!message.contains(secret), "{message}");
    }

    // The key put back: the same resources, Ready again.
    env.put_secret(NAMESPACE, "team-key", FIRST).await;
    assert_eq!(
        support::ready_id::<GpuInstance>(&env, "switched").await,
        machine
    );
    assert_eq!(support::ready_id::<SshKey>(&env, "switched-key").await, key);

    // Deleted while the key opens the other account: the finalizer stays, and the machine,
    // until the resource is explicitly left behind.
    env.put_secret(NAMESPACE, "team-key", SECOND).await;
    condition(&env, "switched", "Stalled", "True", "AccountChanged").await;
    let api = env.api::<GpuInstance>();
    api.delete("switched", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        api.get_opt("switched").await.unwrap().is_some(),
        "the finalizer went"
    );
    api.patch(
        "switched",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"deletionPolicy": "Orphan"}})),
    )
    .await
    .unwrap();
    eventually(30, "the orphaned object gone", || async {
        api.get_opt("switched")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let first = env.simulator.account_state(0).unwrap();
    assert!(
        first.instances.iter().any(|i| i.instance_id == machine),
        "the machine is left in the first account"
    );
}
