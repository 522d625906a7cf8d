//! `gpucloud-operator release`: lets go of the objects for good, for a team that removes the
//! operator. The operator's finalizer is removed from every object with `Orphan` semantics
//! whatever its `deletionPolicy`: the cloud resources stay, each first recorded in the released
//! record (`orphans::RELEASED_CONFIGMAP`, so a later sweeper never takes one for an orphan) and
//! returned for the caller to print. The objects, their namespaces and the CRDs can then be
//! deleted without waiting on an operator that is gone.
//!
//! A running operator would put its finalizer back, so the command reads the leader Lease and
//! refuses while a replica holds it.

use crate::accounts::orphans::record_released;
use crate::flow::kind::ManagedKind;
use crate::kinds::registry::{KindFn, map_kinds};
use futures::future::BoxFuture;
use gpucloud_api::FINALIZER;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use std::collections::HashMap;

/// Attempts at removing the finalizer of one object that keeps changing meanwhile.
const ATTEMPTS: usize = 5;

#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
#[command(group(clap::ArgGroup::new("scope").required(true).multiple(false)))]
pub struct Args {
    /// Release the objects of every namespace.
    #[arg(long, group = "scope")]
    pub all: bool,
    /// Release the objects of this namespace only (repeat for several).
    #[arg(long, short = 'n', group = "scope")]
    pub namespace: Vec<String>,
    /// The operator's namespace: where the released record and the leader Lease are.
    #[arg(long, env = "POD_NAMESPACE", default_value = "gpucloud-system")]
    pub operator_namespace: String,
    /// The leader Lease whose holder means the operator still runs.
    #[arg(long, env = "GPUCLOUD_LEASE_NAME", default_value = "gpucloud-operator")]
    pub lease_name: String,
    /// Release even though the Lease says a replica holds it.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the operator still runs: {holder} holds the Lease {namespace}/{lease}, renewed {age_seconds}s ago; stop it first (kubectl -n {namespace} scale deployment --all --replicas=0), or pass --force"
    )]
    OperatorRunning {
        namespace: String,
        lease: String,
        holder: String,
        age_seconds: i64,
    },
    #[error("{kind} {namespace}/{name} kept changing; run the command again")]
    KeptChanging {
        kind: String,
        namespace: String,
        name: String,
    },
    #[error("Kubernetes API: {}", crate::flow::error::KubeMessage(.0))]
    Kube(#[from] kube::Error),
}

/// One object let go of, and the cloud resource it leaves in the cloud.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The cloud id the object recorded (`None`: it never recorded one, so nothing of it is
    /// known to be in the cloud).
    pub external_id: Option<String>,
}

/// [`release`] with the client the environment configures (kubeconfig or in-cluster).
pub async fn run(args: &Args) -> Result<Vec<Released>, Error> {
    release(&kube::Client::try_default().await?, args).await
}

/// Releases the objects `args` names, kind by kind in the registry's deletion order.
pub async fn release(client: &kube::Client, args: &Args) -> Result<Vec<Released>, Error> {
    if !args.force {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &args.operator_namespace);
        let lease = leases.get_opt(&args.lease_name).await?;
        if let Some((holder, age)) = lease
            .and_then(|lease| lease.spec)
            .and_then(|spec| held(&spec, Timestamp::now()))
        {
            return Err(Error::OperatorRunning {
                namespace: args.operator_namespace.clone(),
                lease: args.lease_name.clone(),
                holder,
                age_seconds: age.as_secs(),
            });
        }
    }
    struct Kind<'a>(&'a kube::Client, &'a Args);
    impl<'a> KindFn<BoxFuture<'a, Result<Vec<Released>, Error>>> for Kind<'a> {
        fn call<K: ManagedKind>(&self) -> BoxFuture<'a, Result<Vec<Released>, Error>> {
            Box::pin(release_kind::<K>(self.0, self.1))
        }
    }
    let mut released = Vec::new();
    for kind in map_kinds(Kind(client, args)) {
        released.extend(kind.await?);
    }
    Ok(released)
}

/// The holder of a lease still in force at `now`, and how long ago it was renewed. A lease
/// handed back (no holder) or not renewed within its duration is not held. Unlike the
/// election (`leader.rs`), which times a record by its own clock, this compares the renew
/// time with the local clock: one look, from a machine whose clock may be off by more than a
/// lease duration, so `--force` is there for a wrong verdict either way.
fn held(spec: &LeaseSpec, now: Timestamp) -> Option<(String, SignedDuration)> {
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let duration = SignedDuration::from_secs(spec.lease_duration_seconds.unwrap_or(15).into());
    let age = now.duration_since(renewed);
    (age < duration).then_some((holder, age))
}

async fn release_kind<K: ManagedKind>(
    client: &kube::Client,
    args: &Args,
) -> Result<Vec<Released>, Error> {
    let scopes: Vec<Api<K>> = if args.all {
        vec![Api::all(client.clone())]
    } else {
        let namespaced = |namespace: &String| Api::namespaced(client.clone(), namespace);
        args.namespace.iter().map(namespaced).collect()
    };
    let mut released = Vec::new();
    let mut listed = Vec::new();
    for api in scopes {
        listed.extend(list_all(&api).await?);
    }
    // An id two objects record is recorded as released by neither: one of the statuses was
    // written by someone else than the operator, and the record decides which namespace may
    // take the resource again.
    let mut recorders: HashMap<String, usize> = HashMap::new();
    for object in &listed {
        if let Some(id) = object.cloud_status().external_id {
            *recorders.entry(id).or_default() += 1;
        }
    }
    for object in listed {
        if !object.finalizers().iter().any(|f| f == FINALIZER) {
            continue;
        }
        let namespace = object.namespace().unwrap_or_default();
        let mut status = object.cloud_status();
        if let Some(id) = &status.external_id
            && recorders.get(id).is_some_and(|count| *count > 1)
        {
            tracing::warn!(
                kind = %K::kind(&()),
                %namespace,
                name = %object.name_any(),
                cloud_id = %id,
                "the id is recorded by another object too; only the names this object's resource carries are recorded as released"
            );
            status.external_id = None;
        }
        // Recorded before the finalizer goes: once it is gone the object may vanish.
        record_released(client, &args.operator_namespace, &object, &status).await?;
        if remove_finalizer(&Api::namespaced(client.clone(), &namespace), object.clone()).await? {
            released.push(Released {
                kind: K::kind(&()).into_owned(),
                namespace,
                name: object.name_any(),
                external_id: object.cloud_status().external_id,
            });
        }
    }
    Ok(released)
}

/// Every object of `api`, read page by page.
async fn list_all<K: ManagedKind>(api: &Api<K>) -> Result<Vec<K>, kube::Error> {
    let mut objects = Vec::new();
    crate::runtime::pages::for_each_page(api, |page| objects.extend(page)).await?;
    Ok(objects)
}

/// Removes the operator's finalizer from `object`, guarded by the resourceVersion it was read
/// with (a merge patch that carries it fails with 409 when the object changed meanwhile), and
/// reads it again then. `false`: the object is gone.
async fn remove_finalizer<K: ManagedKind>(api: &Api<K>, mut object: K) -> Result<bool, Error> {
    for _ in 0..ATTEMPTS {
        let kept: Vec<&String> = object
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .collect();
        if kept.len() == object.finalizers().len() {
            return Ok(true);
        }
        let patch = serde_json::json!({"metadata": {
            "resourceVersion": object.resource_version(),
            "finalizers": kept,
        }});
        let name = object.name_any();
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(false),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                match api.get_opt(&name).await? {
                    Some(fresh) => object = fresh,
                    None => return Ok(false),
                }
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(Error::KeptChanging {
        kind: K::kind(&()).into_owned(),
        namespace: object.meta().namespace.clone().unwrap_or_default(),
        name: object.name_any(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: Option<&str>, renewed_seconds_ago: i64, duration: i32) -> LeaseSpec {
        let now = Timestamp::now();
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: Some(MicroTime(
                now - SignedDuration::from_secs(renewed_seconds_ago),
            )),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_lease_is_held_while_renewed_within_its_duration() {
        let now = Timestamp::now();
        let holder = |spec: LeaseSpec| held(&spec, now).map(|(holder, _)| holder);
        assert_eq!(holder(lease(Some("pod-a"), 3, 15)), Some("pod-a".into()));
        // Expired: the replica is gone (killed, or the lease outlived it).
        assert_eq!(holder(lease(Some("pod-a"), 20, 15)), None);
        // Handed back on SIGTERM: no holder.
        assert_eq!(holder(lease(None, 0, 1)), None);
        assert_eq!(holder(lease(Some(""), 0, 15)), None);
        // Never renewed nor acquired: nothing says it is in force.
        let unknown = LeaseSpec {
            holder_identity: Some("pod-a".into()),
            ..LeaseSpec::default()
        };
        assert_eq!(holder(unknown), None);
    }
}
