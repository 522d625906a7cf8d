//! Which Secrets the operator may write, or copy a private key from: only those it created for
//! an object, recognised by that object being their controller owner.
//!
//! A tenant who can write gpucloud.io objects can name any Secret of their namespace in a
//! spec (`privateKeySecret`, `connectionSecret`). Names alone would let them make the operator
//! overwrite a Secret it did not create, or copy another Secret's private key (a deploy key,
//! say) into a connection Secret they can read. Every such write and copy checks this first.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

/// Whether the object with `owner_uid` is the controller owner of `secret`, as the operator
/// makes it of every Secret it creates (`controller_owner_ref`). A plain owner reference is
/// not enough: anyone who can create the Secret can add one.
pub fn controlled_by(secret: &Secret, owner_uid: &str) -> bool {
    secret
        .owner_references()
        .iter()
        .any(|r| r.uid == owner_uid && r.controller == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn secret(owners: Vec<OwnerReference>) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("s".into()),
                owner_references: Some(owners),
                ..Default::default()
            },
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
    fn only_the_controller_owner_counts() {
        assert!(controlled_by(
            &secret(vec![owner("u-1", Some(true))]),
            "u-1"
        ));
        assert!(controlled_by(
            &secret(vec![owner("u-0", None), owner("u-1", Some(true))]),
            "u-1"
        ));
        assert!(!controlled_by(
            &secret(vec![owner("u-2", Some(true))]),
            "u-1"
        ));
        assert!(!controlled_by(&secret(vec![owner("u-1", None)]), "u-1"));
        assert!(!controlled_by(
            &secret(vec![owner("u-1", Some(false))]),
            "u-1"
        ));
        assert!(!controlled_by(&secret(vec![]), "u-1"));
        assert!(!controlled_by(&Secret::default(), "u-1"));
    }
}
