//! Who owns a cloud resource, and who may adopt one.
//!
//! Several namespaces (teams) often share one cloud account, and any of them may write any
//! spec. A cloud resource therefore belongs to at most one object in the whole cluster: the
//! object that recorded its id (`status.externalId`), or the one whose cloud name it carries
//! (`gco-<namespace>-<name>-<hash>`, made from the object's uid). Naming a resource by id
//! (the `gpucloud.io/external-id` annotation, `Snapshot.spec.instanceId`) is adoption, and
//! adoption is checked here before anything is called in the cloud:
//!
//! - a resource another object owns is refused (`AlreadyOwned`), whatever the settings;
//! - a resource no object owns and the operator did not create for this object is adopted only
//!   where the platform team allowed it: the operator's `--allow-adoption` and the label
//!   `gpucloud.io/adoption: allowed` on the object's namespace (which tenants cannot set);
//! - an annotation that names another resource than the one the object recorded is refused:
//!   the annotation is fixed once its resource is recorded.
//!
//! The index is the controllers' own stores (every kind's objects, as watched), found by what
//! they claim through each controller's claim index (`claim_index.rs`), and the record of
//! resources released on purpose (`accounts::released`): a released resource stays the
//! namespace's that let it go. With each store comes its controller's index of referrers
//! (`referrer_index.rs`), so that one kind can find the objects of another that refer to one of
//! its own without a pass over the other kind's store.

use crate::accounts::observer::{CloudRecord, CloudResource};
use crate::accounts::released::{ReleasedRecord, Releaser};
use crate::flow::claim_index::ClaimIndex;
use crate::flow::conditions::reason;
use crate::flow::declarations::KindDeclarations;
use crate::flow::error::Error;
use crate::flow::naming;
use crate::flow::referrer_index::ReferrerIndex;
use crate::lock;
use crate::runtime::store::Store;
use gpucloud_api::EXTERNAL_ID_ANNOTATION;
use gpucloud_cloud::CloudClient;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The namespace label with which a cluster administrator lets the namespace's objects adopt
/// cloud resources the operator did not create for them (with `--allow-adoption`).
pub const ADOPTION_LABEL: &str = "gpucloud.io/adoption";
/// The value of [`ADOPTION_LABEL`] that allows adoption.
pub const ADOPTION_ALLOWED: &str = "allowed";

/// An object that owns a cloud resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl Owner {
    /// The object a released resource's entry names (its uid is not recorded).
    fn released_by(releaser: Releaser) -> Owner {
        Owner {
            kind: releaser.kind,
            namespace: releaser.namespace,
            name: releaser.name,
            uid: String::new(),
        }
    }

    /// How a message to the object `viewer_namespace` names this owner: by name only within
    /// that namespace, since another namespace's objects are not the tenant's to know of.
    pub fn described_to(&self, viewer_namespace: &str) -> String {
        if self.namespace == viewer_namespace {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        } else {
            "an object in another namespace".to_string()
        }
    }
}

impl<K: kube::Resource> From<&K> for Owner
where
    K::DynamicType: Default,
{
    fn from(object: &K) -> Owner {
        let meta = object.meta();
        Owner {
            kind: K::kind(&K::DynamicType::default()).to_string(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
        }
    }
}

/// The objects of one kind, as a controller's store holds them.
trait Claims: Send + Sync {
    /// The objects that recorded `id` or carry `cloud_name` as theirs; with `proven_only`,
    /// only those whose claim a status write cannot make (see [`Ownership::proven_owners`]).
    fn owners(&self, id: &str, cloud_name: Option<&str>, proven_only: bool) -> Vec<Owner>;

    /// The store and its index as their own type, for [`Ownership::referrers`].
    fn as_any(&self) -> &(dyn Any + Send + Sync);
}

/// A controller's store, the index of its objects' references and that of their claims.
struct Indexed<K: KindDeclarations> {
    store: Store<K>,
    referrers: Arc<ReferrerIndex>,
    claims: Arc<ClaimIndex>,
}

impl<K: KindDeclarations> Claims for Indexed<K> {
    fn as_any(&self) -> &(dyn Any + Send + Sync) {
        self
    }

    fn owners(&self, id: &str, cloud_name: Option<&str>, proven_only: bool) -> Vec<Owner> {
        let mut candidates = self.claims.candidates(&self.store, id);
        if let Some(name) = cloud_name {
            for candidate in self.claims.candidates(&self.store, name) {
                if !candidates.iter().any(|c| Arc::ptr_eq(c, &candidate)) {
                    candidates.push(candidate);
                }
            }
        }
        candidates
            .iter()
            .filter(|object| {
                let status = object.cloud_status();
                let own_name = cloud_name.is_some_and(|name| {
                    naming::cloud_name(
                        object.namespace().as_deref().unwrap_or_default(),
                        &object.name_any(),
                        object.uid().as_deref().unwrap_or_default(),
                    ) == name
                });
                // Without the resource's name nothing is proven: every claim counts then.
                if proven_only && cloud_name.is_some() {
                    return own_name
                        || status.external_id.as_deref() == Some(id)
                            && object
                                .annotations()
                                .get(EXTERNAL_ID_ANNOTATION)
                                .is_some_and(|adopted| adopted == id);
                }
                own_name
                    || status.external_id.as_deref() == Some(id)
                    || cloud_name.is_some_and(|name| status.cloud_name.as_deref() == Some(name))
            })
            .map(|object| Owner {
                kind: K::kind(&()).to_string(),
                namespace: object.namespace().unwrap_or_default(),
                name: object.name_any(),
                uid: object.uid().unwrap_or_default(),
            })
            .collect()
    }
}

/// Every controller's store, by kind, and the released record: the cluster-wide index of who
/// owns what.
pub struct Ownership {
    stores: Mutex<HashMap<String, Vec<Arc<dyn Claims>>>>,
    released: ReleasedRecord,
}

impl Default for Ownership {
    fn default() -> Self {
        Ownership::new(ReleasedRecord::none())
    }
}

impl Ownership {
    /// An index with no store yet, whose released resources are those `released` names.
    pub fn new(released: ReleasedRecord) -> Self {
        Ownership {
            stores: Mutex::default(),
            released,
        }
    }

    /// Adds a controller's store (one per kind and watched namespace) with its indexes of the
    /// references its objects make and of what they claim.
    pub fn register<K: KindDeclarations>(
        &self,
        store: Store<K>,
        referrers: Arc<ReferrerIndex>,
        claims: Arc<ClaimIndex>,
    ) {
        lock(&self.stores)
            .entry(K::kind(&()).to_string())
            .or_default()
            .push(Arc::new(Indexed {
                store,
                referrers,
                claims,
            }));
    }

    /// The object of another namespace than `namespace` that let the resource `id` go, as
    /// the released record read no longer than `max_age` ago names it.
    async fn released_elsewhere(
        &self,
        namespace: &str,
        id: &str,
        max_age: Duration,
    ) -> Result<Option<Owner>, Error> {
        Ok(self
            .released
            .releaser(id, max_age)
            .await?
            .filter(|releaser| releaser.namespace != namespace)
            .map(Owner::released_by))
    }

    /// The objects of kind `K` in `namespace` that refer to the object `name` of `kind` there,
    /// as their controllers' stores hold them.
    pub fn referrers<K: KindDeclarations>(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> Vec<Arc<K>> {
        self.stores_of::<K>()
            .iter()
            .filter_map(|claims| claims.as_any().downcast_ref::<Indexed<K>>())
            .flat_map(|indexed| {
                indexed
                    .referrers
                    .referrers(namespace, kind, name)
                    .into_iter()
                    .filter_map(|referrer| {
                        indexed
                            .store
                            .get(&ObjectRef::new(&referrer).within(namespace))
                    })
            })
            .collect()
    }

    /// The object `name` of kind `K` in `namespace`, as its controller's store holds it (none
    /// before the store's first list).
    pub fn get<K: KindDeclarations>(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        let key = ObjectRef::new(name).within(namespace);
        self.stores_of::<K>()
            .iter()
            .filter_map(|claims| claims.as_any().downcast_ref::<Indexed<K>>())
            .find_map(|indexed| indexed.store.get(&key))
    }

    /// The objects of kind `K` that own the resource `id` (named `cloud_name`, when known).
    pub fn owners<K: KindDeclarations>(&self, id: &str, cloud_name: Option<&str>) -> Vec<Owner> {
        self.stores_of::<K>()
            .iter()
            .flat_map(|store| store.owners(id, cloud_name, false))
            .collect()
    }

    /// The owners of `id` that a reference to it from `namespace` is judged by. A claim may be
    /// nothing but a status write (whoever may write statuses can make an object claim
    /// anything): when it could change the verdict, the resource's own name (the one listed, or
    /// else read from `cloud`, in these cases only) tells whose it is, and only the claims more
    /// than a status count ([`Ownership::proven_owners`]). That is when objects of `namespace`
    /// and of another both claim it (a forged claim must not make another namespace's resource
    /// look shared), and, with `own_claim_authorizes`, whenever one of `namespace` claims it (a
    /// forged claim must not make a resource nobody's object made look the namespace's own).
    /// Without a name, every claim counts.
    async fn reference_owners<R: KindDeclarations>(
        &self,
        namespace: &str,
        (id, listed_name): (&str, Option<&str>),
        cloud: Option<&CloudClient>,
        own_claim_authorizes: bool,
    ) -> Result<Vec<Owner>, Error> {
        let owners = self.owners::<R>(id, listed_name);
        // A resource no object of `namespace` claims is not its to name either way (and is
        // not read).
        let ours = owners.iter().any(|owner| owner.namespace == namespace);
        let only_ours = owners.iter().all(|owner| owner.namespace == namespace);
        if !ours || (only_ours && !own_claim_authorizes) {
            return Ok(owners);
        }
        let name = match (listed_name, cloud) {
            (Some(name), _) => Some(name.to_string()),
            (None, Some(client)) => R::Cloud::get(client.clone(), id.to_string())
                .await?
                .map(|record| record.name().to_string()),
            (None, None) => None,
        };
        Ok(match name {
            Some(name) => self.proven_owners::<R>(id, Some(&name)),
            None => owners,
        })
    }

    /// Of [`Ownership::owners`], those whose claim is more than a status: the resource, listed
    /// as `listed_name`, carries the object's own cloud name (made from its uid), or the object
    /// recorded it and its `gpucloud.io/external-id` annotation names it (an adoption, checked
    /// before it was recorded). Whoever may write a status subresource can make an object
    /// claim any id; such a claim stops that object (`ClaimConflict`), never one whose claim
    /// is proven. Without a listed name, every claim counts.
    pub fn proven_owners<K: KindDeclarations>(
        &self,
        id: &str,
        listed_name: Option<&str>,
    ) -> Vec<Owner> {
        self.stores_of::<K>()
            .iter()
            .flat_map(|store| store.owners(id, listed_name, true))
            .collect()
    }

    /// Whether the resource `id` named `cloud_name`, which the object `uid` of kind `kind` in
    /// `namespace` records, is claimed by another object or was let go by another namespace
    /// (the released record read no longer than `max_age` ago).
    pub async fn claimed_elsewhere(
        &self,
        kind: &str,
        namespace: &str,
        uid: &str,
        id: &str,
        cloud_name: &str,
        max_age: Duration,
    ) -> Result<bool, Error> {
        let stores = lock(&self.stores).get(kind).cloned().unwrap_or_default();
        let others = stores
            .iter()
            .flat_map(|store| store.owners(id, Some(cloud_name), false))
            .any(|owner| owner.uid != uid);
        Ok(others
            || self
                .released_elsewhere(namespace, id, max_age)
                .await?
                .is_some())
    }

    /// The stores of kind `K`, copied out so that none is read under the lock.
    fn stores_of<K: KindDeclarations>(&self) -> Vec<Arc<dyn Claims>> {
        lock(&self.stores)
            .get(K::kind(&()).as_ref())
            .cloned()
            .unwrap_or_default()
    }
}

/// What the check of an adoption found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adoption {
    /// The resource is the object's own (created for it, or already recorded by it).
    Own,
    /// No other object owns it, and adoption is allowed here.
    Allowed,
    /// Another object owns it.
    AlreadyOwned(Owner),
    /// No other object owns it, but adoption is not allowed here.
    NotAllowed,
}

/// Decides an adoption of a resource by the object `uid`: `owners` are the objects that
/// recorded the resource or carry its cloud name, `own_name` whether the resource carries the
/// object's own cloud name, `allowed` whether adoption is allowed for the object's namespace.
pub fn judge(uid: &str, owners: &[Owner], own_name: bool, allowed: bool) -> Adoption {
    if let Some(other) = owners.iter().find(|owner| owner.uid != uid) {
        return Adoption::AlreadyOwned(other.clone());
    }
    if own_name || !owners.is_empty() {
        Adoption::Own
    } else if allowed {
        Adoption::Allowed
    } else {
        Adoption::NotAllowed
    }
}

/// Whether adoption is allowed in `namespace`: the operator's setting and the namespace's
/// label. The namespace is read only when the setting is on (its read is granted only then).
pub async fn allowed_in(
    client: &kube::Client,
    setting: bool,
    namespace: &str,
) -> Result<bool, kube::Error> {
    if !setting {
        return Ok(false);
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let Some(meta) = namespaces.get_metadata_opt(namespace).await? else {
        return Ok(false);
    };
    Ok(meta
        .labels()
        .get(ADOPTION_LABEL)
        .is_some_and(|value| value == ADOPTION_ALLOWED))
}

impl Ownership {
    /// Checks that `object` may take the resource `id` of kind `R` (listed as `listed_name`
    /// when the latest list shows it): refused with `Error::AdoptionRefused` otherwise.
    /// `what` names the resource in the message. Calls nothing in the cloud.
    pub async fn check_adoption<R: KindDeclarations>(
        &self,
        client: &kube::Client,
        setting: bool,
        object: &impl kube::Resource,
        what: &str,
        id: &str,
        listed_name: Option<&str>,
    ) -> Result<(), Error> {
        let namespace = object.meta().namespace.clone().unwrap_or_default();
        let uid = object.meta().uid.clone().unwrap_or_default();
        let name = object.meta().name.clone().unwrap_or_default();
        let own_name =
            listed_name.is_some_and(|listed| listed == naming::cloud_name(&namespace, &name, &uid));
        // The object's own claim proves nothing: its status may be what made it one. Nor does
        // another's that only its status makes: a forged status must not take a resource from
        // whoever lawfully adopts it.
        let mut owners: Vec<Owner> = self
            .proven_owners::<R>(id, listed_name)
            .into_iter()
            .filter(|owner| owner.uid != uid)
            .collect();
        if !own_name {
            owners.extend(
                self.released_elsewhere(&namespace, id, Duration::ZERO)
                    .await?,
            );
        }
        let verdict = judge(&uid, &owners, own_name, false);
        settle(client, setting, &namespace, what, verdict).await
    }

    /// Checks that an object in `namespace` may name the resource `id` of kind `R` by id in
    /// its spec (a snapshot's source machine): the resource is the namespace's own (an object
    /// there recorded it), or no object owns it and adoption is allowed there.
    pub async fn check_reference<R: KindDeclarations>(
        &self,
        client: &kube::Client,
        setting: bool,
        namespace: &str,
        what: &str,
        id: &str,
        cloud: Option<&CloudClient>,
    ) -> Result<(), Error> {
        // The namespace's own claim lets the reference through: it must be proven.
        let mut owners = self
            .reference_owners::<R>(namespace, (id, None), cloud, true)
            .await?;
        owners.extend(
            self.released_elsewhere(namespace, id, Duration::ZERO)
                .await?,
        );
        let verdict = judge_reference(namespace, &owners, false);
        settle(client, setting, namespace, what, verdict).await
    }
}

impl Ownership {
    /// Checks that no object of another namespace owns the resource `id` of kind `R`, and that
    /// none let it go, named by an object in `namespace` in a field that also takes resources
    /// no object owns (an OS image of the catalog, by `spec.osImage`), or read from the status
    /// of an object it refers to (which whoever may write statuses can write): another team's
    /// image, snapshot or machine is not this namespace's to boot from or attach to. With the
    /// resource's cloud name (`listed_name`), an object whose create made it and has not
    /// recorded it yet is found too. The released record is read fresh, or from a read no older
    /// than `max_age`.
    pub async fn check_not_anothers<R: KindDeclarations>(
        &self,
        namespace: &str,
        what: &str,
        (id, listed_name): (&str, Option<&str>),
        max_age: Duration,
        cloud: Option<&CloudClient>,
    ) -> Result<(), Error> {
        // Only another namespace's claim refuses: the namespace's own need not be proven.
        let mut owners = self
            .reference_owners::<R>(namespace, (id, listed_name), cloud, false)
            .await?;
        owners.extend(self.released_elsewhere(namespace, id, max_age).await?);
        match owners.iter().find(|owner| owner.namespace != namespace) {
            None => Ok(()),
            Some(other) => {
                let verdict = Adoption::AlreadyOwned(other.clone());
                Err(Error::AdoptionRefused {
                    reason: reason::ALREADY_OWNED,
                    message: refusal(what, &verdict, namespace).unwrap_or_default(),
                })
            }
        }
    }
}

/// A verdict found `NotAllowed` before the namespace was read becomes `Allowed` where the
/// namespace allows adoption; any refusal becomes the error the object reports.
async fn settle(
    client: &kube::Client,
    setting: bool,
    namespace: &str,
    what: &str,
    mut verdict: Adoption,
) -> Result<(), Error> {
    if verdict == Adoption::NotAllowed && allowed_in(client, setting, namespace).await? {
        verdict = Adoption::Allowed;
    }
    match refusal(what, &verdict, namespace) {
        None => Ok(()),
        Some(message) => Err(Error::AdoptionRefused {
            reason: match verdict {
                Adoption::AlreadyOwned(_) => reason::ALREADY_OWNED,
                _ => reason::ADOPTION_NOT_ALLOWED,
            },
            message,
        }),
    }
}

/// Decides a reference by id from `namespace`: objects of the same namespace may share a
/// resource (one records it, others name it), another namespace's may not.
pub fn judge_reference(namespace: &str, owners: &[Owner], allowed: bool) -> Adoption {
    if let Some(other) = owners.iter().find(|owner| owner.namespace != namespace) {
        Adoption::AlreadyOwned(other.clone())
    } else if !owners.is_empty() {
        Adoption::Own
    } else if allowed {
        Adoption::Allowed
    } else {
        Adoption::NotAllowed
    }
}

/// How a refused adoption reads: what was refused and what would allow it.
pub fn refusal(what: &str, verdict: &Adoption, viewer_namespace: &str) -> Option<String> {
    match verdict {
        Adoption::Own | Adoption::Allowed => None,
        Adoption::AlreadyOwned(owner) => Some(format!(
            "{what} belongs to {}; a cloud resource is managed by one object only",
            owner.described_to(viewer_namespace)
        )),
        Adoption::NotAllowed => Some(format!(
            "{what} was not created by the operator for this object; adopting it needs the operator's --allow-adoption and the label {ADOPTION_LABEL}={ADOPTION_ALLOWED} on namespace {viewer_namespace}, set by a cluster administrator; the label is looked at again every resync interval"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(namespace: &str, name: &str, uid: &str) -> Owner {
        Owner {
            kind: "GpuInstance".into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn adoption_verdicts() {
        let me = owner("team-a", "mine", "u-me");
        let neighbour = owner("team-a", "other", "u-other");
        let stranger = owner("team-b", "theirs", "u-theirs");
        // (owners, own name, allowed) -> verdict
        let cases = [
            (vec![], true, false, Adoption::Own),
            (vec![me.clone()], false, false, Adoption::Own),
            (vec![], false, false, Adoption::NotAllowed),
            (vec![], false, true, Adoption::Allowed),
            (
                vec![stranger.clone()],
                false,
                true,
                Adoption::AlreadyOwned(stranger.clone()),
            ),
            (
                vec![me.clone(), neighbour.clone()],
                true,
                true,
                Adoption::AlreadyOwned(neighbour.clone()),
            ),
            // Carrying this object's name does not beat another object's record.
            (
                vec![stranger.clone()],
                true,
                false,
                Adoption::AlreadyOwned(stranger.clone()),
            ),
        ];
        for (owners, own_name, allowed, expected) in cases {
            assert_eq!(
                judge("u-me", &owners, own_name, allowed),
                expected,
                "{owners:?} own name {own_name} allowed {allowed}"
            );
        }
    }

    #[test]
    fn references_by_id_stay_in_their_namespace() {
        let neighbour = owner("team-a", "other", "u-other");
        let stranger = owner("team-b", "theirs", "u-theirs");
        assert_eq!(
            judge_reference("team-a", std::slice::from_ref(&neighbour), false),
            Adoption::Own
        );
        assert_eq!(
            judge_reference("team-a", &[neighbour, stranger.clone()], true),
            Adoption::AlreadyOwned(stranger)
        );
        assert_eq!(judge_reference("team-a", &[], false), Adoption::NotAllowed);
        assert_eq!(judge_reference("team-a", &[], true), Adoption::Allowed);
    }

    #[test]
    fn other_namespaces_are_never_named() {
        let stranger = owner("team-b", "theirs", "u");
        let neighbour = owner("team-a", "other", "u");
        let message = refusal("vm-1", &Adoption::AlreadyOwned(stranger), "team-a").unwrap();
        assert!(
            !message.contains("team-b") && !message.contains("theirs"),
            "{message}"
        );
        let message = refusal("vm-1", &Adoption::AlreadyOwned(neighbour), "team-a").unwrap();
        assert!(message.contains("GpuInstance team-a/other"), "{message}");
        let message = refusal("vm-1", &Adoption::NotAllowed, "team-a").unwrap();
        assert!(
            message.contains("--allow-adoption") && message.contains(ADOPTION_LABEL),
            "{message}"
        );
        assert_eq!(refusal("vm-1", &Adoption::Allowed, "team-a"), None);
    }
}
