//! Which Secrets the operator may write, or copy a private key from: only those it created for
//! an object, recognised by that object being their controller owner.
//!
//! A tenant who can write gpucloud.io objects can name any Secret of their namespace in a
//! spec (`privateKeySecret`, `connectionSecret`). Names alone would let them make the operator
//! overwrite a Secret it did not create, or copy another Secret's private key (a deploy key,
//! say) into a connection Secret they can read. Every such write and copy checks this first.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ObjectMeta;

/// The label a Secret named in `spec.credentialsSecretRef` must carry, with the value
/// [`CREDENTIALS_LABEL_VALUE`], before the operator reads it as cloud credentials: a tenant can
/// name any Secret of their namespace, and only those labelled for it are the operator's to
/// read. The operator's own default credentials Secret, named by the administrator, needs none.
pub const CREDENTIALS_LABEL: &str = "gpucloud.io/credentials";
pub const CREDENTIALS_LABEL_VALUE: &str = "true";

/// The label selector of credentials Secrets, for the operator's Secret watch.
pub fn credentials_selector() -> String {
    format!("{CREDENTIALS_LABEL}={CREDENTIALS_LABEL_VALUE}")
}

/// Whether the object with `owner_uid` is the controller owner of the Secret with `meta`, as
/// the operator makes it of every Secret it creates (`controller_owner_ref`). A plain owner
/// reference is not enough: anyone who can create the Secret can add one.
pub fn controlled_by(meta: &ObjectMeta, owner_uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == owner_uid && r.controller == Some(true))
}

/// Whether the Secret with `meta` is labelled as cloud credentials.
pub fn labelled_as_credentials(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|labels| labels.get(CREDENTIALS_LABEL))
        .is_some_and(|value| value == CREDENTIALS_LABEL_VALUE)
}

/// A Secret as the operator may see it.
pub enum Read {
    Missing,
    /// It exists, but its metadata says it is not the operator's to read; its data was never
    /// fetched.
    Refused,
    Admitted(Box<Secret>),
}

/// Reads the Secret `name` in two steps: its metadata first, its data only when `admit` accepts
/// the metadata. So the data of a Secret that is not the operator's (not created by it, not
/// labelled for it) never reaches the operator, whatever name a spec gives.
pub async fn read_if(
    api: &Api<Secret>,
    name: &str,
    admit: impl FnOnce(&ObjectMeta) -> bool,
) -> Result<Read, kube::Error> {
    let Some(meta) = api.get_metadata_opt(name).await? else {
        return Ok(Read::Missing);
    };
    if !admit(&meta.metadata) {
        return Ok(Read::Refused);
    }
    Ok(match api.get_opt(name).await? {
        None => Read::Missing,
        // Changed between the two reads: judged again on what came with the data.
        Some(secret) if !admit_again(&meta.metadata, &secret.metadata) => Read::Refused,
        Some(secret) => Read::Admitted(Box::new(secret)),
    })
}

/// Whether the Secret read with its data is the one whose metadata was admitted (the same
/// object, unchanged labels and owners).
fn admit_again(admitted: &ObjectMeta, read: &ObjectMeta) -> bool {
    admitted.uid == read.uid
        && admitted.labels == read.labels
        && admitted.owner_references == read.owner_references
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn secret_meta(owners: Vec<OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            name: Some("s".into()),
            owner_references: Some(owners),
            ..Default::default()
        }
    }

    fn owner(uid: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "gpucloud.io/v1alpha1".into(),
            kind: "SshKey".into(),
            name: "k".into(),
            uid: uid.into(),
            controller,
            block_owner_deletion: None,
        }
    }

    #[test]
    fn only_labelled_secrets_are_credentials() {
        let labelled = |value: &str| ObjectMeta {
            labels: Some([(CREDENTIALS_LABEL.to_string(), value.to_string())].into()),
            ..Default::default()
        };
        assert!(labelled_as_credentials(&labelled("true")));
        assert!(!labelled_as_credentials(&labelled("yes")));
        assert!(!labelled_as_credentials(&ObjectMeta::default()));
        assert_eq!(credentials_selector(), "gpucloud.io/credentials=true");
    }

    #[test]
    fn only_the_controller_owner_counts() {
        assert!(controlled_by(
            &secret_meta(vec![owner("u-1", Some(true))]),
            "u-1"
        ));
        assert!(controlled_by(
            &secret_meta(vec![owner("u-0", None), owner("u-1", Some(true))]),
            "u-1"
        ));
        assert!(!controlled_by(
            &secret_meta(vec![owner("u-2", Some(true))]),
            "u-1"
        ));
        assert!(!controlled_by(
            &secret_meta(vec![owner("u-1", None)]),
            "u-1"
        ));
        assert!(!controlled_by(
            &secret_meta(vec![owner("u-1", Some(false))]),
            "u-1"
        ));
        assert!(!controlled_by(&secret_meta(vec![]), "u-1"));
        assert!(!controlled_by(&ObjectMeta::default(), "u-1"));
    }
}
