#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A tenant who can write gpucloud.io objects in their namespace, and nothing more, cannot
//! make the operator copy or overwrite a Secret it did not create, nor move an object to
//! other credentials after it was created.

use crate::support;

use gpucloud_api::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use support::*;

/// The private key of someone else's Secret (a git deploy key), which must never be copied.
const FOREIGN_PRIVATE_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nZGVwbG95LWtleS1vZi1hbm90aGVyLXRlYW0tOWUzZg==\n-----END OPENSSH PRIVATE KEY-----\n";
const FOREIGN_MARK: &str = "ZGVwbG95LWtleS1vZi1hbm90aGVyLXRlYW0tOWUzZg";

fn vm(extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({"region": "us-east-1", "gpuType": "H100-80G", "gpuCount": 1,
        "osImage": "ubuntu-22.04-cuda-12"});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

/// An `ssh-auth` Secret the operator did not create (no owner), as a person would make it.
async fn foreign_ssh_secret(env: &Env, name: &str) -> Secret {
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/ssh-auth".into()),
        data: Some(BTreeMap::from([(
            "ssh-privatekey".to_string(),
            ByteString(FOREIGN_PRIVATE_KEY.as_bytes().to_vec()),
        )])),
        ..Default::default()
    };
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap()
}

fn text_of(secret: &Secret) -> String {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}\n", String::from_utf8_lossy(&v.0)))
        .collect()
}

/// Attack: an SshKey adopted from the cloud (so it is `Ready` without generating anything)
/// whose `privateKeySecret` names a Secret it did not create, referenced by a GpuInstance
/// with a `connectionSecret` the tenant can read. The connection Secret must carry the
/// private key of the SshKey that did create its Secret, never the foreign one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_private_key_never_reaches_the_connection_secret() {
    let env = Env::start().await;
    let deploy_key = foreign_ssh_secret(&env, "deploy-key").await;
    let by_hand = support::import_ssh_key(&env, "by-hand").await;
    let mut borrowed: SshKey = object("borrowed", json!({"privateKeySecret": "deploy-key"}));
    borrowed.metadata.annotations =
        Some([(EXTERNAL_ID_ANNOTATION.to_string(), by_hand.id.clone())].into());
    create(&env, &borrowed).await;
    create::<SshKey>(&env, &object("own", json!({}))).await;
    ready::<SshKey>(&env, "borrowed").await;
    ready::<SshKey>(&env, "own").await;

    // The borrowed key comes first, so the old code copied it and stopped looking.
    create::<GpuInstance>(
        &env,
        &object(
            "train-1",
            vm(
                json!({"sshKeyRefs": [{"name": "borrowed"}, {"name": "own"}],
                "connectionSecret": "conn"}),
            ),
        ),
    )
    .await;
    ready::<GpuInstance>(&env, "train-1").await;

    let secrets = env.api::<Secret>();
    let connection = secrets.get("conn").await.unwrap();
    let connection_text = text_of(&connection);
    assert!(
        !connection_text.contains(FOREIGN_MARK),
        "the deploy key's private key was copied into the connection Secret"
    );
    let own = secrets.get("own-ssh-key").await.unwrap();
    let own_private = &own.data.as_ref().unwrap()["ssh-privatekey"];
    assert_eq!(
        connection.data.as_ref().unwrap().get("ssh-privatekey"),
        Some(own_private),
        "the connection Secret carries the key of the SshKey that created its Secret"
    );
    // The foreign Secret is left as it was.
    let after = secrets.get("deploy-key").await.unwrap();
    assert_eq!(after.data, deploy_key.data);
    assert_eq!(after.metadata.owner_references, None);
    assert_eq!(
        after.metadata.resource_version,
        deploy_key.metadata.resource_version
    );
    // The SshKey's and GpuInstance's status say nothing of the foreign key either.
    for text in [
        serde_json::to_string(&env.api::<SshKey>().get("borrowed").await.unwrap()).unwrap(),
        serde_json::to_string(&env.api::<GpuInstance>().get("train-1").await.unwrap()).unwrap(),
    ] {
        assert!(!text.contains(FOREIGN_MARK));
    }
}

/// A Secret of the name an SshKey or a GpuInstance asks for, which they did not create, is
/// never overwritten: the object stalls and says so, naming the Secret, never its content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_the_operator_did_not_create_are_never_overwritten() {
    let env = Env::start().await;
    let key_secret = foreign_ssh_secret(&env, "dev-ssh-key").await;
    let conn_secret = foreign_ssh_secret(&env, "conn").await;
    create::<SshKey>(&env, &object("dev", json!({}))).await;
    create::<GpuInstance>(
        &env,
        &object("train-1", vm(json!({"connectionSecret": "conn"}))),
    )
    .await;
    let key: SshKey = condition(&env, "dev", "Stalled", "True", "InvalidSpec").await;
    let vm: GpuInstance = condition(&env, "train-1", "Stalled", "True", "InvalidSpec").await;
    for (message, secret) in [
        (
            key.cloud_status()
                .condition("Stalled")
                .unwrap()
                .message
                .clone(),
            "dev-ssh-key",
        ),
        (
            vm.cloud_status()
                .condition("Stalled")
                .unwrap()
                .message
                .clone(),
            "conn",
        ),
    ] {
        assert!(
            message.contains(secret) && message.contains("recreate"),
            "{message}"
        );
        assert!(!message.contains(FOREIGN_MARK));
    }
    assert_eq!(env.calls("CreateSshKey"), 0, "a key was imported");
    // Refused before a machine was billed, not once it runs.
    assert_eq!(env.calls("CreateInstance"), 0, "a machine was created");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let secrets = env.api::<Secret>();
    for before in [key_secret, conn_secret] {
        let name = before.metadata.name.clone().unwrap();
        let after = secrets.get(&name).await.unwrap();
        assert_eq!(
            after.metadata.resource_version, before.metadata.resource_version,
            "{name} was written"
        );
    }
}

/// A Ready GpuInstance cannot be moved to another Secret's credentials: the update is refused
/// at admission, naming the field, and nothing is called in the cloud.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_instance_cannot_be_moved_to_other_credentials() {
    let env = Env::start().await;
    env.put_secret(NAMESPACE, "team-key", env.simulator.api_key())
        .await;
    env.put_secret(NAMESPACE, "deploy-key", "someone-elses-key-7c1d")
        .await;
    create::<GpuInstance>(
        &env,
        &object(
            "train-1",
            vm(json!({"credentialsSecretRef": {"name": "team-key"}})),
        ),
    )
    .await;
    let before_object: GpuInstance = ready(&env, "train-1").await;
    let api = env.api::<GpuInstance>();
    let before = env.simulator.call_counts();
    for change in [
        json!({"name": "deploy-key"}),
        json!({"name": "team-key", "key": "otherKey"}),
        serde_json::Value::Null,
    ] {
        let patch = json!({"spec": {"credentialsSecretRef": change}});
        match api
            .patch("train-1", &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{change}: {status:?}");
                assert!(
                    status.message.contains("credentialsSecretRef is immutable")
                        && status.message.contains("recreate"),
                    "{change}: {}",
                    status.message
                );
                assert!(!status.message.contains("someone-elses-key"));
            }
            Ok(_) => panic!("{change}: the credentials of a Ready instance were changed"),
            Err(other) => panic!("{change}: {other}"),
        }
    }
    // Past a resync interval and many transition intervals: only the observers' periodic
    // lists and the account's balance and billing reads, no call on the instance, and none with the other key.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = env.simulator.call_counts();
    let mut calls = Vec::new();
    for (operation, count) in &after {
        let new = count - before.get(operation).copied().unwrap_or(0);
        let periodic =
            operation.starts_with("List") || support::ACCOUNT_READS.contains(&operation.as_str());
        if new > 0 && !periodic {
            calls.push(format!("{operation} x{new}"));
        }
    }
    assert!(
        calls.is_empty(),
        "cloud calls after a refused update: {calls:?}"
    );
    let unauthorized: u64 = env
        .simulator
        .counters()
        .operations
        .values()
        .filter_map(|statuses| statuses.get(&401))
        .sum();
    assert_eq!(unauthorized, 0, "the cloud was called with another key");
    let now = api.get("train-1").await.unwrap();
    assert_eq!(now.metadata.generation, before_object.metadata.generation);
    assert_eq!(now.spec, before_object.spec);
    assert!(now.cloud_status().is_ready(now.metadata.generation));
}
