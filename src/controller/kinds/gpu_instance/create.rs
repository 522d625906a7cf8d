//! A GpuInstance's create, in the update path's shape: [`check_spec`] (pure: what the spec
//! alone decides), [`dereference`] (async: every object, cloud record and catalog the create
//! reads, in one [`CreateReads`]), then [`plan`] (pure: the create or restore request and its
//! placement, or the refusal). Nothing here writes; the flow writes the intent, then calls the
//! cloud with the plan. The plan is table-tested from fixtures (`fixtures/create_plans.json`).

use crate::accounts::account::Account;
use crate::accounts::catalog::Catalog;
use crate::accounts::records::found;
use crate::accounts::secrets::controlled_by;
use crate::flow::context::Context;
use crate::flow::error::Error;
use crate::flow::kind::ManagedKind;
use crate::kinds::gpu_instance::placement::{self, Candidate};
use crate::kinds::gpu_instance::schedule::scheduled;
use gpucloud_api::{
    GpuInstance, GpuInstanceSpec, Image, MAX_STARTUP_SCRIPT_BYTES, Managed, PlacementPolicy,
    PlacementStatus, Snapshot, SshKey,
};
use gpucloud_cloud::model::{
    CreateInstanceRequest, PricingBody, Snapshot as CloudSnapshot,
    SnapshotStatus as CloudSnapshotStatus, Tier as CloudTier,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Resource, ResourceExt};
use std::sync::Arc;

/// How an instance comes to exist: booted from an image, or restored from a snapshot.
pub enum InstancePlan {
    /// Booted from an image, where `placement` chose.
    Create {
        request: Box<CreateInstanceRequest>,
        placement: PlacementStatus,
    },
    Restore {
        snapshot_id: String,
        /// The snapshot's GPUs and region, where the cloud says them.
        placement: Option<PlacementStatus>,
    },
}

/// The placements the cloud refused for want of stock, or the catalog showed without it, as
/// the status records them: the next plan skips a refusal newer than its catalog.
fn refused_placements(vm: &GpuInstance) -> &[gpucloud_api::SkippedPlacement] {
    vm.status
        .as_ref()
        .and_then(|s| s.placement.as_ref())
        .map(|p| p.skipped.as_slice())
        .unwrap_or_default()
}

/// What the spec alone decides, before anything is read: refused here, a spec costs no read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SpecChecked {
    /// Restored from the Snapshot object of this name.
    Restore { snapshot: String },
    /// Booted on one of `candidates`, chosen by `policy`.
    Boot {
        policy: PlacementPolicy,
        candidates: Vec<Candidate>,
        image: BootImage,
    },
}

/// What a booted machine's disk comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BootImage {
    /// `spec.osImage`: a catalog image, or an image or snapshot by cloud id.
    OsImage(String),
    /// `spec.imageRef`: the Image object of this name.
    ImageRef(String),
}

/// Refuses what the spec alone shows cannot be created: a schedule the operator cannot read
/// (it would leave the machine running, billed), both or neither of `osImage` and `imageRef`,
/// a placement without a candidate.
pub(crate) fn check_spec(instance: &GpuInstance, now: Timestamp) -> Result<SpecChecked, Error> {
    scheduled(instance, now)?;
    let spec = &instance.spec;
    if let Some(source) = &spec.source {
        return Ok(SpecChecked::Restore {
            snapshot: source.snapshot_ref.name.clone(),
        });
    }
    let (policy, candidates) = placement::candidates(spec)?;
    let image = match (&spec.os_image, &spec.image_ref) {
        (Some(os), None) => BootImage::OsImage(os.clone()),
        (None, Some(image)) => BootImage::ImageRef(image.name.clone()),
        _ => {
            return Err(Error::InvalidSpec(
                "set exactly one of spec.osImage and spec.imageRef".into(),
            ));
        }
    };
    Ok(SpecChecked::Boot {
        policy,
        candidates,
        image,
    })
}

/// Who made the Secret `spec.connectionSecret` names, if it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum SecretOwner {
    /// No `spec.connectionSecret`, or no such Secret yet.
    Absent,
    /// Written by this GpuInstance (a create tried again).
    This,
    /// Made by someone else: never overwritten.
    Another,
}

/// Everything a create reads, for [`plan`].
#[derive(Debug)]
pub(crate) struct CreateReads {
    pub connection_secret: SecretOwner,
    /// The references resolved, or the wait for one (an object not `Ready` yet, a ConfigMap
    /// missing): the plan tells a wait only after what the spec and the Secret refuse.
    pub source: Result<SourceReads, Error>,
    pub catalog: Arc<Catalog>,
    pub pricing: Arc<PricingBody>,
}

/// The resolved references of a restore or a boot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SourceReads {
    Restore {
        snapshot_id: String,
        /// The region the Snapshot object records, if any.
        recorded_region: Option<String>,
        /// The cloud's record of the snapshot: its region and hardware.
        snapshot: Box<CloudSnapshot>,
    },
    Boot {
        image_id: String,
        ssh_key_ids: Vec<String>,
        startup_script: Option<String>,
    },
}

/// Reads what the create of `instance` needs: the connection Secret's owner, the references
/// (`Ready` objects' cloud ids, the startup script, the snapshot's record; an `osImage` not in
/// the OS-image catalog checked as no other namespace's), the account's catalog and prices.
pub(crate) async fn dereference(
    instance: &GpuInstance,
    checked: &SpecChecked,
    cx: &Context<GpuInstance>,
    account: &Account,
) -> Result<CreateReads, Error> {
    let namespace = instance.namespace().unwrap_or_default();
    let connection_secret = secret_owner(instance, cx, &namespace).await?;
    let source = match checked {
        SpecChecked::Restore { snapshot } => restore_reads(cx, account, &namespace, snapshot).await,
        SpecChecked::Boot { image, .. } => {
            boot_reads(&instance.spec, image, cx, account, &namespace).await
        }
    };
    // A read that failed is an error now; only a reference's wait is the plan's to tell.
    let source = match source {
        Err(error) if !error.is_waiting_for_reference() => return Err(error),
        source => source,
    };
    Ok(CreateReads {
        connection_secret,
        source,
        catalog: account.catalog().await?,
        pricing: account.pricing().await?,
    })
}

/// The create `instance` makes with what [`dereference`] read: where the machine goes (the
/// catalog's stock, the prices and the cloud's refusals the status records) and the request,
/// or the restore of its snapshot in the snapshot's region. Refused: a Secret another made, a
/// reference not ready, a restore into another region than its snapshot's, GPUs the catalog
/// does not offer, no stock within the price limit, a startup script too long.
pub(crate) fn plan(
    instance: &GpuInstance,
    checked: SpecChecked,
    reads: CreateReads,
) -> Result<InstancePlan, Error> {
    let spec = &instance.spec;
    // Refused before a machine is billed, not after: the Secret is written once it runs.
    if reads.connection_secret == SecretOwner::Another
        && let Some(name) = &spec.connection_secret
    {
        return Err(foreign_connection_secret(
            &instance.namespace().unwrap_or_default(),
            name,
        ));
    }
    let refused = refused_placements(instance);
    match (checked, reads.source?) {
        (
            SpecChecked::Restore { snapshot: name },
            SourceReads::Restore {
                snapshot_id,
                recorded_region,
                snapshot,
            },
        ) => {
            // The cloud restores into the snapshot's region, whatever the spec says.
            if let Some(region) = recorded_region
                && let Some(wanted) = &spec.region
                && &region != wanted
            {
                return Err(Error::InvalidSpec(format!(
                    "spec.region is {wanted} but Snapshot {name:?} is in {region}; a restored instance is in its snapshot's region"
                )));
            }
            // A restore has its snapshot's GPUs and region: placed as a machine without
            // alternatives is, it waits for stock (and records a refusal for want of it) as
            // one does.
            let placement = match snapshot.specs {
                Some(specs) => {
                    let candidate = Candidate {
                        alternative: 0,
                        gpu_type: specs.gpu_type,
                        gpu_count: specs.gpu_count,
                        region: snapshot.region,
                    };
                    let choice = placement::choose(
                        PlacementPolicy::Ordered,
                        &[candidate],
                        spec.max_hourly_rate,
                        &reads.catalog,
                        &reads.pricing,
                        refused,
                    )?;
                    Some(choice.status)
                }
                None => None,
            };
            Ok(InstancePlan::Restore {
                snapshot_id,
                placement,
            })
        }
        (
            SpecChecked::Boot {
                policy, candidates, ..
            },
            SourceReads::Boot {
                image_id,
                ssh_key_ids,
                startup_script,
            },
        ) => {
            placement::check_known(spec, &candidates, &reads.catalog)?;
            let choice = placement::choose(
                policy,
                &candidates,
                spec.max_hourly_rate,
                &reads.catalog,
                &reads.pricing,
                refused,
            )?;
            let request = create_request(
                spec,
                &choice.candidate,
                image_id,
                ssh_key_ids,
                startup_script,
            )?;
            Ok(InstancePlan::Create {
                request: Box::new(request),
                placement: choice.status,
            })
        }
        // `dereference` reads the source `check_spec` named.
        (SpecChecked::Restore { .. }, SourceReads::Boot { .. })
        | (SpecChecked::Boot { .. }, SourceReads::Restore { .. }) => Err(Error::InvalidSpec(
            "spec.source changed while its create was planned; the next reconcile plans again"
                .into(),
        )),
    }
}

async fn secret_owner(
    instance: &GpuInstance,
    cx: &Context<GpuInstance>,
    namespace: &str,
) -> Result<SecretOwner, Error> {
    let Some(name) = &instance.spec.connection_secret else {
        return Ok(SecretOwner::Absent);
    };
    let secrets: Api<Secret> = Api::namespaced(cx.client.clone(), namespace);
    Ok(match secrets.get_metadata_opt(name).await? {
        None => SecretOwner::Absent,
        Some(meta)
            if instance
                .uid()
                .is_some_and(|uid| controlled_by(&meta.metadata, &uid)) =>
        {
            SecretOwner::This
        }
        Some(_) => SecretOwner::Another,
    })
}

async fn restore_reads(
    cx: &Context<GpuInstance>,
    account: &Account,
    namespace: &str,
    name: &str,
) -> Result<SourceReads, Error> {
    let snapshot_id = restorable_snapshot(cx, account, namespace, name).await?;
    let snapshots: Api<Snapshot> = Api::namespaced(cx.client.clone(), namespace);
    let recorded_region = snapshots
        .get_opt(name)
        .await?
        .and_then(|s| s.status.and_then(|s| s.region));
    let snapshot = Box::new(account.client.get_snapshot(&snapshot_id).await?);
    Ok(SourceReads::Restore {
        snapshot_id,
        recorded_region,
        snapshot,
    })
}

async fn boot_reads(
    spec: &GpuInstanceSpec,
    image: &BootImage,
    cx: &Context<GpuInstance>,
    account: &Account,
    namespace: &str,
) -> Result<SourceReads, Error> {
    let image_id = match image {
        BootImage::OsImage(os) => {
            check_os_image(cx, account, namespace, os).await?;
            os.clone()
        }
        BootImage::ImageRef(name) => {
            ready_reference::<Image>((cx, account), namespace, name, "Image").await?
        }
    };
    let mut ssh_key_ids = Vec::with_capacity(spec.ssh_key_refs.len());
    for key in &spec.ssh_key_refs {
        ssh_key_ids
            .push(ready_reference::<SshKey>((cx, account), namespace, &key.name, "SshKey").await?);
    }
    let startup_script = match &spec.startup_script {
        None => None,
        Some(script) => match (&script.inline, &script.config_map_ref) {
            (Some(text), _) => Some(text.clone()),
            (None, Some(reference)) => {
                Some(config_map_value(cx, namespace, &reference.name, &reference.key).await?)
            }
            (None, None) => None,
        },
    };
    Ok(SourceReads::Boot {
        image_id,
        ssh_key_ids,
        startup_script,
    })
}

async fn ready_reference<R>(
    (cx, account): (&Context<GpuInstance>, &Account),
    namespace: &str,
    name: &str,
    kind: &'static str,
) -> Result<String, Error>
where
    R: ManagedKind,
{
    crate::flow::dereference::ready_id::<R>(cx.lookup(account), namespace, name, kind).await
}

/// The cloud id of the snapshot to restore from, once it is `Ready`. A snapshot whose
/// deletion waits for this very restore no longer reports `Ready` (its conditions say what
/// holds it); it is still usable while the cloud has it `available`. A deleting Snapshot
/// records no state changes, so one deleted while still `creating` is read from the cloud:
/// its recorded state would keep this restore (and with it the deletion) waiting for ever.
async fn restorable_snapshot(
    cx: &Context<GpuInstance>,
    account: &Account,
    namespace: &str,
    name: &str,
) -> Result<String, Error> {
    match ready_reference::<Snapshot>((cx, account), namespace, name, "Snapshot").await {
        Err(Error::WaitingFor { kind, name, detail }) => {
            let api: Api<Snapshot> = Api::namespaced(cx.client.clone(), namespace);
            let held = api.get_opt(&name).await?.and_then(|s| {
                let status = s.cloud_status();
                (s.meta().deletion_timestamp.is_some())
                    .then_some(status.external_id.map(|id| (id, status.state)))
                    .flatten()
            });
            let waiting = Error::WaitingFor { kind, name, detail };
            match held {
                Some((id, state)) if state.as_deref() == Some("available") => Ok(id),
                Some((id, _)) => match account.client.get_snapshot(&id).await {
                    Ok(snapshot) if snapshot.status == CloudSnapshotStatus::Available => Ok(id),
                    Ok(_) => Err(waiting),
                    Err(e) if e.is_not_found() => Err(waiting),
                    Err(e) => Err(e.into()),
                },
                None => Err(waiting),
            }
        }
        other => other,
    }
}

/// `spec.osImage` boots a custom image or a snapshot by id as well as a catalog image: one
/// another namespace owns or let go is refused before any billed call; the catalog's are
/// anyone's. A custom image or snapshot whose object has not recorded it yet (its create's
/// answer lost, say) is claimed by its cloud name alone, so what is not in the OS-image
/// catalog is read by id for its name.
async fn check_os_image(
    cx: &Context<GpuInstance>,
    account: &Account,
    namespace: &str,
    os: &str,
) -> Result<(), Error> {
    // The catalog's images are no one's (an object's status naming one, forged, must not
    // keep every namespace from booting it).
    if account.os_image_ids().await?.contains(os) {
        return Ok(());
    }
    let what = format!("spec.osImage {os}");
    let fresh = std::time::Duration::ZERO;
    let image = found(account.client.get_image(os).await)?;
    let snapshot = match image {
        Some(_) => None,
        None => found(account.client.get_snapshot(os).await)?,
    };
    let (image_name, snapshot_name) = (image.map(|i| i.name), snapshot.map(|s| s.name));
    cx.ownership
        .check_not_anothers::<Image>(namespace, &what, (os, image_name.as_deref()), fresh, None)
        .await?;
    cx.ownership
        .check_not_anothers::<Snapshot>(
            namespace,
            &what,
            (os, snapshot_name.as_deref()),
            fresh,
            None,
        )
        .await
}

/// The refusal of a `spec.connectionSecret` naming a Secret this GpuInstance did not create.
pub(crate) fn foreign_connection_secret(namespace: &str, name: &str) -> Error {
    Error::InvalidSpec(format!(
        "spec.connectionSecret: Secret {namespace}/{name} exists and was not created by this GpuInstance; recreate the GpuInstance with another spec.connectionSecret"
    ))
}

/// The digest the status records of a startup script (`status.startupScriptSha256`).
pub(crate) fn script_digest(script: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(script.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

pub(crate) async fn config_map_value(
    cx: &Context<GpuInstance>,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<String, Error> {
    let api: Api<ConfigMap> = Api::namespaced(cx.client.clone(), namespace);
    let waiting = |detail: String| Error::WaitingFor {
        kind: "ConfigMap",
        name: name.to_string(),
        detail,
    };
    let map = api
        .get_opt(name)
        .await?
        .ok_or_else(|| waiting("it does not exist".into()))?;
    map.data
        .as_ref()
        .and_then(|d| d.get(key))
        .cloned()
        .ok_or_else(|| waiting(format!("it has no key {key:?}")))
}

/// The create request of a spec whose references are resolved, for the placement chosen
/// (unnamed: `create` names it).
pub(crate) fn create_request(
    spec: &GpuInstanceSpec,
    placed: &Candidate,
    image_id: String,
    ssh_key_ids: Vec<String>,
    startup_script: Option<String>,
) -> Result<CreateInstanceRequest, Error> {
    if let Some(script) = &startup_script
        && script.len() > MAX_STARTUP_SCRIPT_BYTES
    {
        return Err(Error::InvalidSpec(format!(
            "spec.startupScript is {} bytes; the cloud accepts at most {MAX_STARTUP_SCRIPT_BYTES}",
            script.len()
        )));
    }
    Ok(CreateInstanceRequest {
        name: String::new(),
        region: placed.region.clone(),
        gpu_type: placed.gpu_type.clone(),
        gpu_count: placed.gpu_count,
        image_id,
        tier: Some(CloudTier::from_wire(spec.tier.cloud_value())),
        ssh_key_ids,
        startup_script,
        startup_script_id: None,
        public_ip: Some(spec.public_ip),
        volume_ids: Vec::new(),
    })
}

#[cfg(test)]
#[path = "create_tests.rs"]
mod tests;
