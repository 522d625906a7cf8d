//! Lookups of the objects one object refers to (same namespace, same API group).
//!
//! A reference that cannot be followed yet is an `Error::WaitingFor` (reason
//! `WaitingForReference`): the referring object reports it and is woken by the watch on the
//! referenced kind when that object appears or changes.

use crate::error::Error;
use gpucloud_api::{GpuInstance, Managed};
use kube::{Api, Resource};

/// The cloud id recorded by a referenced object, once it is `Ready`.
pub async fn ready_id<R>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    kind: &'static str,
) -> Result<String, Error>
where
    R: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Managed
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let api: Api<R> = Api::namespaced(client.clone(), namespace);
    let waiting = |detail: &str| Error::WaitingFor {
        kind,
        name: name.to_string(),
        detail: detail.to_string(),
    };
    let object = api
        .get_opt(name)
        .await?
        .ok_or_else(|| waiting("it does not exist"))?;
    let status = object.cloud_status();
    if !status.is_ready(object.meta().generation) {
        return Err(waiting("it is not Ready"));
    }
    status
        .external_id
        .ok_or_else(|| waiting("it has no cloud id yet"))
}

/// The cloud id of a referenced `GpuInstance`, as soon as it has one (ready or not: a volume
/// or firewall can be attached to a machine that is still booting). A machine being deleted is
/// no longer a valid target.
pub async fn instance_id(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<String, Error> {
    let api: Api<GpuInstance> = Api::namespaced(client.clone(), namespace);
    let waiting = |detail: &str| Error::WaitingFor {
        kind: "GpuInstance",
        name: name.to_string(),
        detail: detail.to_string(),
    };
    let object = api
        .get_opt(name)
        .await?
        .ok_or_else(|| waiting("it does not exist"))?;
    if object.meta().deletion_timestamp.is_some() {
        return Err(waiting("it is being deleted"));
    }
    if machine_vanished(&object) {
        return Err(waiting("its machine was deleted outside the operator"));
    }
    object
        .cloud_status()
        .external_id
        .ok_or_else(|| waiting("it has no cloud id yet"))
}

/// Whether the GpuInstance reports its recorded machine gone from the cloud: its id can no
/// longer be attached to anything.
pub fn machine_vanished(instance: &GpuInstance) -> bool {
    instance
        .cloud_status()
        .condition(gpucloud_api::condition_type::READY)
        .is_some_and(|c| c.reason == crate::conditions::reason::EXTERNAL_DELETED)
}
