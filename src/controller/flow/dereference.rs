//! Lookups of the objects one object refers to (same namespace, same API group).
//!
//! A reference that cannot be followed yet is an `Error::WaitingFor` (reason
//! `WaitingForReference`): the referring object reports it and is woken by the watch on the
//! referenced kind when that object appears or changes.
//!
//! The referenced object is read from its controller's store ([`Ownership::get`]), which the
//! watch keeps, and from the API server only when the store does not hold it: a reference to
//! an object just created, or gone, is not concluded missing from a copy that may lag. Read
//! live on every reconcile of a Volume, Snapshot or GpuInstance, the settled rechecks of
//! 100,000 objects alone would cost the API server 500 to 1,000 GETs a second, for ever. What
//! a copy can show late is the referenced object's own change (a cloud id, a deletion), and
//! the watch on its kind wakes the referrers when it comes.

use crate::accounts::released::SHARED_READ_FOR;
use crate::flow::adoption::Ownership;
use crate::flow::declarations::KindDeclarations;
use crate::flow::error::Error;
use gpucloud_api::{
    DeletionPolicy, GpuInstance, Image, Managed, ManagementPolicy, Snapshot, Volume,
};
use kube::{Api, Resource};
use std::future::Future;
use std::sync::Arc;

/// Where referenced objects are read: the controllers' stores, then the API server.
#[derive(Clone, Copy)]
pub struct Lookup<'a> {
    pub client: &'a kube::Client,
    pub stores: &'a Ownership,
    /// The cloud account the referring object's credentials open: where a referenced id's
    /// resource is read when two namespaces claim it.
    pub cloud: &'a gpucloud_cloud::CloudClient,
    /// Read from the API server only, past the stores: for the rare read whose answer must
    /// not lag behind a change made a moment ago (see [`Lookup::live`]).
    pub live: bool,
}

impl<'a> Lookup<'a> {
    /// The same lookup, reading the API server rather than the stores: one GET per read.
    pub fn live(self) -> Lookup<'a> {
        Lookup { live: true, ..self }
    }

    /// The object `name` of kind `R` in `namespace`; one that does not exist is waited for.
    async fn read<R: KindDeclarations>(
        &self,
        namespace: &str,
        name: &str,
        kind: &'static str,
    ) -> Result<Arc<R>, Error> {
        if let Some(stored) = (!self.live)
            .then(|| self.stores.get::<R>(namespace, name))
            .flatten()
        {
            return Ok(stored);
        }
        let api: Api<R> = Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name)
            .await?
            .map(Arc::new)
            .ok_or_else(|| waiting_for(kind, name, "it does not exist"))
    }
}

/// The cloud id recorded by a referenced object, once it is `Ready`.
pub async fn ready_id<R: KindDeclarations>(
    lookup: Lookup<'_>,
    namespace: &str,
    name: &str,
    kind: &'static str,
) -> Result<String, Error> {
    let object: Arc<R> = lookup.read(namespace, name, kind).await?;
    let status = object.cloud_status();
    if !status.is_ready(object.meta().generation) {
        return Err(waiting_for(kind, name, "it is not Ready"));
    }
    let id = status
        .external_id
        .ok_or_else(|| waiting_for(kind, name, "it has no cloud id yet"))?;
    checked::<R>(lookup, namespace, kind, name, id).await
}

/// `id`, read from the status of the object `name` of `kind`, once checked against the
/// ownership index: whoever may write a status can write any id there, and another
/// namespace's resource (one of its objects claims it, or it let it go) is refused, named as
/// what `kind` `name` records.
async fn checked<R: KindDeclarations>(
    lookup: Lookup<'_>,
    namespace: &str,
    kind: &str,
    name: &str,
    id: String,
) -> Result<String, Error> {
    let what = format!("{id}, recorded by {kind} {name},");
    lookup
        .stores
        .check_not_anothers::<R>(
            namespace,
            &what,
            (&id, None),
            SHARED_READ_FOR,
            Some(lookup.cloud),
        )
        .await?;
    Ok(id)
}

/// The cloud id of a referenced `GpuInstance`, as soon as it has one (ready or not: a volume
/// or firewall can be attached to a machine that is still booting). A machine being deleted is
/// no longer a valid target.
pub async fn instance_id(lookup: Lookup<'_>, namespace: &str, name: &str) -> Result<String, Error> {
    match referenced_instance(lookup, namespace, name).await? {
        ReferencedInstance::Id(id) => Ok(id),
        ReferencedInstance::BeingDeleted { waiting, .. } => Err(waiting),
    }
}

/// Where a reference to a `GpuInstance` leads.
#[derive(Debug)]
pub enum ReferencedInstance {
    /// The machine's cloud id (see [`instance_id`]).
    Id(String),
    /// The object is being deleted: nothing may be attached to its machine any more, and its
    /// deletion detaches the data volumes still attached (`Instances::delete`). The error is
    /// what an object waiting on it reports; `deletes` is the machine the deletion deletes in
    /// the cloud (none when the object leaves it in place or never recorded one).
    BeingDeleted {
        waiting: Error,
        deletes: Option<String>,
    },
}

/// As [`instance_id`], telling a machine being deleted apart from the other reasons to wait.
pub async fn referenced_instance(
    lookup: Lookup<'_>,
    namespace: &str,
    name: &str,
) -> Result<ReferencedInstance, Error> {
    const KIND: &str = "GpuInstance";
    let object: Arc<GpuInstance> = lookup.read(namespace, name, KIND).await?;
    if object.meta().deletion_timestamp.is_some() {
        let managed = object.managed();
        let deletes = (managed.deletion_policy != DeletionPolicy::Orphan
            && managed.management_policy != ManagementPolicy::ObserveOnly)
            .then(|| object.cloud_status().external_id)
            .flatten();
        return Ok(ReferencedInstance::BeingDeleted {
            waiting: waiting_for(KIND, name, "it is being deleted"),
            deletes,
        });
    }
    if machine_vanished(&object) {
        return Err(waiting_for(
            KIND,
            name,
            "its machine was deleted outside the operator",
        ));
    }
    let id = object
        .cloud_status()
        .external_id
        .ok_or_else(|| waiting_for(KIND, name, "it has no cloud id yet"))?;
    checked::<GpuInstance>(lookup, namespace, KIND, name, id)
        .await
        .map(ReferencedInstance::Id)
}

fn waiting_for(kind: &'static str, name: &str, detail: &str) -> Error {
    Error::WaitingFor {
        kind,
        name: name.to_string(),
        detail: detail.to_string(),
    }
}

/// Whether the GpuInstance reports its recorded machine gone from the cloud: its id can no
/// longer be attached to anything.
pub fn machine_vanished(instance: &GpuInstance) -> bool {
    instance
        .cloud_status()
        .condition(gpucloud_api::condition_type::READY)
        .is_some_and(|c| c.reason == crate::flow::conditions::reason::EXTERNAL_DELETED)
}

/// An object of a namespace, as a link in a chain of creates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub kind: &'static str,
    pub name: String,
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// The kinds whose create can wait for another object's create.
pub const CHAINED_KINDS: [&str; 4] = ["Volume", "GpuInstance", "Image", "Snapshot"];

/// Longest chain of creates followed before giving up (a chain that long is a reference
/// graph nobody writes by hand; it is left waiting, not called a cycle).
const MAX_CHAIN: usize = 64;

/// The chain of creates from `start` back to `start`, if the object `start` waits for (its
/// clone, restore or image source, through `waits_for`) waits, link by link, for `start`
/// itself: none of them can ever be created. `None` when the chain ends, or loops without
/// passing through `start` (the objects on that loop report it themselves).
pub async fn cycle_through<F, Fut>(
    start: Link,
    mut waits_for: F,
) -> Result<Option<Vec<Link>>, Error>
where
    F: FnMut(Link) -> Fut,
    Fut: Future<Output = Result<Option<Link>, Error>>,
{
    let mut chain = vec![start.clone()];
    while chain.len() <= MAX_CHAIN {
        let last = chain[chain.len() - 1].clone();
        let Some(next) = waits_for(last).await? else {
            return Ok(None);
        };
        if next == start {
            chain.push(next);
            return Ok(Some(chain));
        }
        if chain.contains(&next) {
            return Ok(None);
        }
        chain.push(next);
    }
    Ok(None)
}

/// The object `link` waits for before its cloud resource can be created: a Volume its clone
/// source, a GpuInstance its restore snapshot or image, an Image its snapshot, a Snapshot its
/// machine. `None` once it has a cloud resource (nothing to wait for), or when it does not
/// exist or names nothing.
pub async fn waits_for(
    client: &kube::Client,
    namespace: &str,
    link: Link,
) -> Result<Option<Link>, Error> {
    fn uncreated<K: Managed>(object: Option<K>) -> Option<K> {
        object.filter(|o| o.cloud_status().external_id.is_none())
    }
    let next = |kind: &'static str, name: &str| Link {
        kind,
        name: name.to_string(),
    };
    Ok(match link.kind {
        "Volume" => {
            let api: Api<Volume> = Api::namespaced(client.clone(), namespace);
            uncreated(api.get_opt(&link.name).await?)
                .and_then(|v| v.spec.source.map(|s| next("Volume", &s.volume_ref.name)))
        }
        "GpuInstance" => {
            let api: Api<GpuInstance> = Api::namespaced(client.clone(), namespace);
            uncreated(api.get_opt(&link.name).await?).and_then(|i| {
                match (i.spec.source, i.spec.image_ref) {
                    (Some(source), _) => Some(next("Snapshot", &source.snapshot_ref.name)),
                    (None, Some(image)) => Some(next("Image", &image.name)),
                    (None, None) => None,
                }
            })
        }
        "Image" => {
            let api: Api<Image> = Api::namespaced(client.clone(), namespace);
            uncreated(api.get_opt(&link.name).await?)
                .map(|i| next("Snapshot", &i.spec.snapshot_ref.name))
        }
        "Snapshot" => {
            let api: Api<Snapshot> = Api::namespaced(client.clone(), namespace);
            uncreated(api.get_opt(&link.name).await?)
                .and_then(|s| s.spec.instance_ref.map(|r| next("GpuInstance", &r.name)))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::claim_index::ClaimIndex;
    use crate::flow::referrer_index::ReferrerIndex;
    use kube::runtime::watcher;
    use std::collections::BTreeMap;

    /// A Ready machine `name` of `namespace` with the cloud id `id`, as its store holds it.
    fn machine(namespace: &str, name: &str, id: &str) -> GpuInstance {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("{namespace}-{name}")},
            "spec": {"region": "us-east", "gpuType": "A100", "osImage": "ubuntu"},
            "status": {"externalId": id},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_reference_follows_the_store_in_its_own_namespace_and_never_another_teams() {
        let (store, mut writer) = crate::runtime::store::store::<GpuInstance>();
        writer.apply_watcher_event(&watcher::Event::Apply(machine("team-a", "trainer", "vm-a")));
        writer.apply_watcher_event(&watcher::Event::Apply(machine("team-b", "victim", "vm-b")));
        let stores = Ownership::default();
        let claims = Arc::new(ClaimIndex::default());
        claims.rebuild(&store);
        stores.register(store, Arc::new(ReferrerIndex::default()), claims);
        // No API server answers: a read that is not in the store fails, and says so.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        // Nor does a cloud: nothing here reads one.
        let cloud = gpucloud_cloud::CloudClient::new(gpucloud_cloud::ClientConfig::new(
            "http://127.0.0.1:9",
            gpucloud_cloud::ApiKey::new("unused"),
        ))
        .unwrap();
        let lookup = Lookup {
            client: &client,
            stores: &stores,
            cloud: &cloud,
            live: false,
        };

        let own = instance_id(lookup, "team-a", "trainer").await;
        assert_eq!(own.unwrap(), "vm-a");
        // Team A names team B's machine: the store's copy of it is not team A's to follow, so
        // the name is looked up in team A's namespace, where nothing answers.
        let foreign = instance_id(lookup, "team-a", "victim").await;
        assert!(matches!(foreign, Err(Error::Kube(_))), "{foreign:?}");
    }

    /// An edge of a reference graph: (kind, name) waits for (kind, name).
    type Edge<'a> = ((&'static str, &'a str), (&'static str, &'a str));

    fn link(kind: &'static str, name: &str) -> Link {
        Link {
            kind,
            name: name.to_string(),
        }
    }

    async fn cycle(edges: &[Edge<'_>], start: (&'static str, &str)) -> Option<Vec<String>> {
        let edges: BTreeMap<(&str, String), Link> = edges
            .iter()
            .map(|((k, n), (to_k, to_n))| ((*k, n.to_string()), link(to_k, to_n)))
            .collect();
        cycle_through(link(start.0, start.1), |l| {
            let next = edges.get(&(l.kind, l.name.clone())).cloned();
            async move { Ok(next) }
        })
        .await
        .unwrap()
        .map(|chain| chain.iter().map(ToString::to_string).collect())
    }

    #[tokio::test]
    async fn chains_of_creates_that_come_back_are_cycles() {
        // Two volumes cloning each other.
        let clones = [
            (("Volume", "a"), ("Volume", "b")),
            (("Volume", "b"), ("Volume", "a")),
        ];
        assert_eq!(
            cycle(&clones, ("Volume", "a")).await,
            Some(vec![
                "Volume a".into(),
                "Volume b".into(),
                "Volume a".into()
            ])
        );
        // A machine restored from a snapshot of itself.
        let restore = [
            (("GpuInstance", "vm"), ("Snapshot", "s")),
            (("Snapshot", "s"), ("GpuInstance", "vm")),
        ];
        assert_eq!(
            cycle(&restore, ("Snapshot", "s")).await.map(|c| c.len()),
            Some(3)
        );
        // Booting from an image of a snapshot of itself.
        let image = [
            (("GpuInstance", "vm"), ("Image", "i")),
            (("Image", "i"), ("Snapshot", "s")),
            (("Snapshot", "s"), ("GpuInstance", "vm")),
        ];
        assert_eq!(
            cycle(&image, ("GpuInstance", "vm")).await.map(|c| c.len()),
            Some(4)
        );
        // A volume cloning itself.
        assert!(
            cycle(&[(("Volume", "a"), ("Volume", "a"))], ("Volume", "a"))
                .await
                .is_some()
        );
    }

    #[tokio::test]
    async fn chains_that_end_or_loop_elsewhere_are_not() {
        let chain = [
            (("Volume", "a"), ("Volume", "b")),
            (("Volume", "b"), ("Volume", "c")),
        ];
        assert_eq!(cycle(&chain, ("Volume", "a")).await, None);
        // a waits on a loop between b and c: b and c report it, a waits.
        let elsewhere = [
            (("Volume", "a"), ("Volume", "b")),
            (("Volume", "b"), ("Volume", "c")),
            (("Volume", "c"), ("Volume", "b")),
        ];
        assert_eq!(cycle(&elsewhere, ("Volume", "a")).await, None);
        assert!(cycle(&elsewhere, ("Volume", "b")).await.is_some());
        // Same names, other kinds: no cycle.
        let kinds = [(("Volume", "x"), ("Snapshot", "x"))];
        assert_eq!(cycle(&kinds, ("Volume", "x")).await, None);
    }

    #[tokio::test]
    async fn a_very_long_chain_is_left_waiting() {
        let names: Vec<String> = (0..200).map(|i| format!("v{i}")).collect();
        let edges: Vec<_> = names
            .windows(2)
            .map(|w| (("Volume", w[0].as_str()), ("Volume", w[1].as_str())))
            .collect();
        assert_eq!(cycle(&edges, ("Volume", "v0")).await, None);
    }
}
