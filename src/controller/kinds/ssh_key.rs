//! `SshKey`: imports the given public key, or generates a pair.
//!
//! A generated pair is made by the operator, not the cloud: the private key goes into the
//! object's owned Secret *before* the public half is imported. A cloud-generated pair returns
//! its private key once, in the create response; a lost response would lose the key for good.
//! Made here, a retried import after a lost response reuses the same pair from the Secret.

use crate::accounts::account::Account;
use crate::accounts::observer::CloudResource;
use crate::accounts::records::{cloud_record, found, gone};
use crate::accounts::secrets::{Read, controlled_by, read_if};
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::error::Error;
use crate::flow::kind::{KindDeclarations, ManagedKind, Plan, Record, WhenGone, never_acts};
use gpucloud_api::{CloudStatus, SshKey, SshKeyStatus};
use gpucloud_cloud::model::{CreateSshKeyRequest, SshKey as CloudSshKey};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};
use std::collections::BTreeMap;

/// Secret keys, as the `kubernetes.io/ssh-auth` Secret type names them.
pub const PRIVATE_KEY_FIELD: &str = "ssh-privatekey";
pub const PUBLIC_KEY_FIELD: &str = "ssh-publickey";

impl KindDeclarations for SshKey {
    type Cloud = SshKeys;
    const WHEN_GONE: WhenGone = WhenGone::Recreate;

    fn status_with(&self, common: CloudStatus, record: Option<&Record<Self>>) -> Self::Status {
        let generated = self.spec.public_key.is_none();
        SshKeyStatus {
            cloud: common,
            generated: Some(generated),
            public_key: record
                .map(|r| r.public_key.clone())
                .or_else(|| self.status.as_ref()?.public_key.clone()),
            private_key_secret: generated.then(|| private_key_secret_name(self)),
        }
    }

    fn observed(&self, record: &Record<Self>) -> Outcome {
        Outcome::ready(
            reason::AVAILABLE,
            format!("key {} is registered", record.id),
        )
    }
}

impl ManagedKind for SshKey {
    /// The public key to import.
    type CreatePlan = String;

    async fn plan_create(&self, cx: &Context<Self>, _account: &Account) -> Result<String, Error> {
        match &self.spec.public_key {
            Some(key) => {
                validate_public_key(key)?;
                Ok(key.clone())
            }
            None => generated_public_key(self, cx).await,
        }
    }

    async fn create(
        _cx: &Context<Self>,
        account: &Account,
        public_key: String,
        cloud_name: &str,
    ) -> Result<Record<Self>, Error> {
        let request = CreateSshKeyRequest {
            name: cloud_name.to_string(),
            public_key: Some(public_key),
        };
        Ok(account.client.create_ssh_key(&request).await?.body.key)
    }

    never_acts!();

    /// Nothing to change in the cloud: the record is reported as it stands.
    fn plan(&self, record: &Record<Self>, _resolved: ()) -> Result<Plan<Self::Action>, Error> {
        Ok(Plan::stand(self.observed(record)))
    }
}

/// The Secret receiving a generated private key.
pub fn private_key_secret_name(key: &SshKey) -> String {
    key.spec
        .private_key_secret
        .clone()
        .unwrap_or_else(|| format!("{}-ssh-key", key.name_any()))
}

/// Checks the shape of an OpenSSH public key line before the cloud sees it.
fn validate_public_key(line: &str) -> Result<(), Error> {
    ssh_key::PublicKey::from_openssh(line.trim())
        .map(|_| ())
        .map_err(|e| {
            Error::InvalidSpec(format!(
                "spec.publicKey is not a valid OpenSSH public key: {e}"
            ))
        })
}

/// The public half of this object's generated pair: read from its Secret when a previous
/// attempt made one, otherwise generated and stored there first.
async fn generated_public_key(key: &SshKey, cx: &Context<SshKey>) -> Result<String, Error> {
    let namespace = key.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(cx.client.clone(), &namespace);
    let name = private_key_secret_name(key);
    let owner = key
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidSpec("the SshKey has no uid yet".into()))?;
    let read = read_if(&secrets, &name, |meta| controlled_by(meta, &owner.uid)).await?;
    if let Read::Refused = read {
        return Err(Error::InvalidSpec(format!(
            "Secret {namespace}/{name} exists and was not created by this SshKey; recreate the SshKey with another spec.privateKeySecret"
        )));
    }
    if let Read::Admitted(existing) = read {
        let public = existing
            .data
            .as_ref()
            .and_then(|d| d.get(PUBLIC_KEY_FIELD))
            .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
            .filter(|k| !k.is_empty());
        if let Some(public) = public {
            return Ok(public);
        }
        return Err(Error::InvalidSpec(format!(
            "Secret {namespace}/{name} has no {PUBLIC_KEY_FIELD}"
        )));
    }
    let private =
        ssh_key::PrivateKey::random(&mut ssh_key::rand_core::OsRng, ssh_key::Algorithm::Ed25519)
            .map_err(|_| Error::InvalidSpec("SSH key generation failed".into()))?;
    let private_pem = private
        .to_openssh(ssh_key::LineEnding::LF)
        .map_err(|_| Error::InvalidSpec("SSH key encoding failed".into()))?;
    let public = private
        .public_key()
        .to_openssh()
        .map_err(|_| Error::InvalidSpec("SSH key encoding failed".into()))?;
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            owner_references: Some(vec![owner]),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "gpucloud-operator".to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/ssh-auth".into()),
        data: Some(BTreeMap::from([
            (
                PRIVATE_KEY_FIELD.to_string(),
                ByteString(private_pem.as_bytes().to_vec()),
            ),
            (
                PUBLIC_KEY_FIELD.to_string(),
                ByteString(public.as_bytes().to_vec()),
            ),
        ])),
        ..Default::default()
    };
    // Written once: a concurrent writer's Secret wins and is read back on the next reconcile.
    secrets.create(&PostParams::default(), &secret).await?;
    Ok(public)
}

// === Cloud calls ===

// The cloud reports no state for keys: a listed key is usable.
cloud_record!(CloudSshKey, id: id, name: name, state: "available");

/// The cloud's SSH keys.
pub struct SshKeys;

impl CloudResource for SshKeys {
    type Record = CloudSshKey;
    const LABEL: &'static str = "ssh-key";

    async fn list(client: CloudClient) -> Result<Vec<CloudSshKey>, CloudError> {
        Ok(client.list_ssh_keys().await?.ssh_keys)
    }

    async fn get(client: CloudClient, id: String) -> Result<Option<CloudSshKey>, CloudError> {
        found(client.get_ssh_key(&id).await)
    }

    async fn delete(client: CloudClient, record: CloudSshKey) -> Result<(), CloudError> {
        gone(client.delete_ssh_key(&record.id).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_keys_are_validated() {
        assert!(validate_public_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl user@host").is_ok());
        for bad in [
            "",
            "ssh-ed25519",
            "ssh-ed25519 AAAA",
            "ssh-rsa !!!",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
        ] {
            let err = validate_public_key(bad).unwrap_err();
            assert!(err.to_string().contains("spec.publicKey"), "{bad}: {err}");
        }
    }
}
