//! `deletionPolicy: Snapshot`: a GpuInstance being deleted keeps its machine until a final
//! snapshot of it is available, then lets the machine go.
//!
//! The snapshot is taken by a `Snapshot` object, `<instance>-final`, that the instance creates
//! in its namespace, so it is made with the same idempotent create as any other (an intent
//! recorded first, a lost answer found by name, never a second snapshot). The steps, each of
//! which a restarted operator takes again from what the objects record:
//!
//! 1. no `<instance>-final` object: start the machine if it is stopped (the cloud snapshots
//!    `ACTIVE` machines only) and create the object;
//! 2. the object's snapshot is `available` when read by id: record it in the instance's
//!    `status.finalSnapshot` (and, unless `spec.finalSnapshot.keepAsObject`, set the object's
//!    `deletionPolicy` to `Orphan`) before anything is deleted;
//! 3. the machine is deleted by the shared flow;
//! 4. once it is gone, an object not kept is deleted: under `Orphan`, the cloud snapshot stays
//!    and is written to the released-resources record.
//!
//! A status that records the final snapshot skips steps 1–2, so a crash after it never takes a
//! second one.

use crate::accounts::account::Account;
use crate::flow::conditions::reason;
use crate::flow::context::Context;
use crate::flow::error::Error;
use gpucloud_api::lifetime::OnExpiry;
use gpucloud_api::{
    DeletionPolicy, FinalSnapshotStatus, GpuInstance, Managed, ManagedFields, Snapshot,
    SnapshotSpec,
};
use gpucloud_cloud::model::{InstanceStatus, SnapshotStatus as CloudState};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Label on a final Snapshot object: the GpuInstance it was taken for.
pub const FINAL_SNAPSHOT_OF_LABEL: &str = "gpucloud.io/final-snapshot-of";
/// Annotation on a final Snapshot object: the uid of that GpuInstance, so an object of the
/// same name made by someone else is never taken for it.
pub const FINAL_SNAPSHOT_OF_UID_ANNOTATION: &str = "gpucloud.io/final-snapshot-of-uid";

/// How the description of every final snapshot starts, in the cloud too.
pub const DESCRIPTION_PREFIX: &str = "final snapshot of GpuInstance ";

/// The name of the Snapshot object that takes an instance's final snapshot.
pub fn object_name(instance: &str) -> String {
    format!("{instance}-final")
}

/// Holds the instance's deletion until its final snapshot is available (and recorded).
pub async fn hold(
    instance: &GpuInstance,
    cx: &Context<GpuInstance>,
    account: &Arc<Account>,
) -> Result<(), Error> {
    let status = instance.status.clone().unwrap_or_default();
    if status.final_snapshot.is_some() {
        return Ok(());
    }
    // Nothing recorded, nothing run: a machine whose create answer was lost is deleted by the
    // shared flow as usual.
    let Some(machine) = status.cloud.external_id.clone() else {
        return Ok(());
    };
    let namespace = instance.namespace().unwrap_or_default();
    let name = object_name(&instance.name_any());
    let snapshots: Api<Snapshot> = Api::namespaced(cx.client.clone(), &namespace);
    let Some(object) = snapshots.get_opt(&name).await? else {
        return start(instance, cx, account, &snapshots, &machine).await;
    };
    check_made_for(instance, &object, &name)?;
    let Some(snapshot_id) = object.cloud_status().external_id else {
        return untaken(cx, account, &snapshots, &object, &machine).await;
    };
    check_available(account, &snapshot_id, &machine, &name).await?;
    record(instance, cx, &snapshots, &snapshot_id, &machine).await
}

/// Step 1: creates the final Snapshot object once the machine is there to be snapshotted.
async fn start(
    instance: &GpuInstance,
    cx: &Context<GpuInstance>,
    account: &Arc<Account>,
    snapshots: &Api<Snapshot>,
    machine: &str,
) -> Result<(), Error> {
    let name = object_name(&instance.name_any());
    if !machine_active(cx, account, machine).await? {
        return Ok(());
    }
    snapshots
        .create(&PostParams::default(), &final_object(instance, machine))
        .await?;
    crate::flow::reconcile::publish(
        cx,
        instance,
        kube::runtime::events::EventType::Normal,
        reason::FINAL_SNAPSHOT,
        &format!("taking a final snapshot of {machine} as Snapshot {name} before deleting it"),
    );
    Err(waiting(format!(
        "taking a final snapshot of {machine} (Snapshot {name}) before deleting it"
    )))
}

/// That the Snapshot object `name` is this instance's own final snapshot, and not on its way out.
fn check_made_for(instance: &GpuInstance, object: &Snapshot, name: &str) -> Result<(), Error> {
    // One being deleted (a final snapshot of an earlier instance of this name, say) is waited
    // for, whoever made it.
    if object.meta().deletion_timestamp.is_some() {
        return Err(waiting(format!(
            "Snapshot {name} is being deleted; a new final snapshot is taken once it is gone"
        )));
    }
    let ours = object
        .annotations()
        .get(FINAL_SNAPSHOT_OF_UID_ANNOTATION)
        .is_some_and(|uid| Some(uid) == instance.uid().as_ref());
    if !ours {
        return Err(Error::Blocked {
            reason: reason::FINAL_SNAPSHOT_BLOCKED,
            message: format!(
                "Snapshot {name} exists and was not made for this instance's final snapshot: \
                 delete or rename it, or set spec.deletionPolicy to Delete or Orphan"
            ),
        });
    }
    Ok(())
}

/// The final Snapshot object has no snapshot yet: its create waits for the machine to be
/// `ACTIVE`; a machine gone meanwhile leaves nothing to keep, and the object goes.
async fn untaken(
    cx: &Context<GpuInstance>,
    account: &Arc<Account>,
    snapshots: &Api<Snapshot>,
    object: &Snapshot,
    machine: &str,
) -> Result<(), Error> {
    let name = object.name_any();
    if !machine_active(cx, account, machine).await? {
        // Gone before its snapshot was taken: nothing is left to keep. An object whose
        // create may have happened (its answer lost) is left to find it first, so no
        // snapshot made is deleted unseen.
        if crate::flow::recorded::recorded_status(object)
            .pending_create
            .is_some()
        {
            return Err(waiting(format!(
                "{machine} is gone; waiting for the create of Snapshot {name} to settle"
            )));
        }
        snapshots.delete(&name, &DeleteParams::default()).await?;
        return Ok(());
    }
    Err(waiting(format!(
        "taking a final snapshot of {machine} (Snapshot {name}) before deleting it"
    )))
}

/// Step 2's proof: the cloud itself, read by id, says the snapshot is of this machine and
/// available.
async fn check_available(
    account: &Arc<Account>,
    snapshot_id: &str,
    machine: &str,
    name: &str,
) -> Result<(), Error> {
    // Read by id: the machine goes only once the cloud itself says the snapshot is there.
    let cloud = match account.client.get_snapshot(snapshot_id).await {
        Ok(cloud) => cloud,
        // One read is no proof it is gone (a cloud's index may lag its create): the machine
        // stays, and a snapshot really gone shows on the Snapshot object as `ExternalDeleted`.
        Err(e) if e.is_not_found() => {
            return Err(waiting(format!(
                "the cloud does not find the final snapshot {snapshot_id} (Snapshot {name}); \
                 the machine is kept. Should Snapshot {name} report ExternalDeleted, delete it \
                 to take another"
            )));
        }
        Err(e) => return Err(e.into()),
    };
    // The object's annotation and name can be copied by anyone who may write Snapshots in the
    // namespace; only the cloud's own record says which machine a snapshot is of.
    if cloud.instance_id != machine {
        return Err(Error::Blocked {
            reason: reason::FINAL_SNAPSHOT_BLOCKED,
            message: format!(
                "Snapshot {name} holds {snapshot_id}, a snapshot of another machine than this \
                 instance's {machine}: delete or rename it to take the final snapshot, or set \
                 spec.deletionPolicy to Delete or Orphan"
            ),
        });
    }
    match cloud.status {
        CloudState::Available => Ok(()),
        CloudState::Error => Err(Error::Blocked {
            reason: reason::FINAL_SNAPSHOT_BLOCKED,
            message: format!(
                "the cloud reports the final snapshot {snapshot_id} (Snapshot {name}) in \
                 error: delete Snapshot {name} to take another, or set spec.deletionPolicy \
                 to Delete"
            ),
        }),
        _ => Err(waiting(format!(
            "waiting for the final snapshot {snapshot_id} (Snapshot {name}) to be available"
        ))),
    }
}

/// Step 2: records the available snapshot in the instance's status (unless the object is
/// kept, after setting it to leave the cloud snapshot in place), before the machine goes.
async fn record(
    instance: &GpuInstance,
    cx: &Context<GpuInstance>,
    snapshots: &Api<Snapshot>,
    snapshot_id: &str,
    machine: &str,
) -> Result<(), Error> {
    let namespace = instance.namespace().unwrap_or_default();
    let name = object_name(&instance.name_any());
    let keep = instance
        .spec
        .final_snapshot
        .as_ref()
        .is_some_and(|f| f.keep_as_object);
    if !keep {
        // From here on, deleting the object leaves the cloud snapshot in place.
        let patch = serde_json::json!({"spec": {"deletionPolicy": DeletionPolicy::Orphan}});
        snapshots
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let record = FinalSnapshotStatus {
        object: name.clone(),
        snapshot_id: snapshot_id.to_string(),
    };
    let patch = serde_json::json!({"status": {"finalSnapshot": record}});
    let instances: Api<GpuInstance> = Api::namespaced(cx.client.clone(), &namespace);
    instances
        .patch_status(
            &instance.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let kept = if keep {
        format!("kept as Snapshot {name}")
    } else {
        format!(
            "left in the cloud when Snapshot {name} goes; restore it through a Snapshot \
             adopting it with gpucloud.io/external-id"
        )
    };
    crate::flow::reconcile::publish(
        cx,
        instance,
        kube::runtime::events::EventType::Normal,
        reason::FINAL_SNAPSHOT,
        &format!(
            "final snapshot {snapshot_id} of {machine} is available ({kept}); deleting the machine"
        ),
    );
    Ok(())
}

/// Whether `snapshot` is the final snapshot of a GpuInstance of its namespace being deleted
/// with one: a create a Budget counts but never refuses, since the machine, which costs far
/// more, waits for it to go (a Budget deleting machines under `SnapshotThenDelete` would
/// otherwise wait for itself). Its name, label and annotation are checked against the
/// machine, read from the API server: a Snapshot labelled so by hand is judged like any other.
pub async fn waited_for(client: &kube::Client, snapshot: &Snapshot) -> Result<bool, Error> {
    let Some(machine) = snapshot.labels().get(FINAL_SNAPSHOT_OF_LABEL) else {
        return Ok(false);
    };
    if snapshot.name_any() != object_name(machine) {
        return Ok(false);
    }
    let namespace = snapshot.namespace().unwrap_or_default();
    let api: Api<GpuInstance> = Api::namespaced(client.clone(), &namespace);
    let Some(instance) = api.get_opt(machine).await? else {
        return Ok(false);
    };
    Ok(
        instance.uid().as_ref() == snapshot.annotations().get(FINAL_SNAPSHOT_OF_UID_ANNOTATION)
            && instance.meta().deletion_timestamp.is_some()
            && asked_for(&instance),
    )
}

/// Whether this deletion takes a final snapshot: `deletionPolicy: Snapshot`, or an expiry that
/// asked for one (as recorded then, whatever the spec says now).
pub fn asked_for(instance: &GpuInstance) -> bool {
    instance.spec.managed.deletion_policy == DeletionPolicy::Snapshot
        || instance.cloud_status().expired_with == Some(OnExpiry::Snapshot)
}

/// Once the machine is gone: removes the final Snapshot object unless it is kept. Under the
/// `Orphan` policy step 2 gave it, its cloud snapshot stays.
pub async fn release(instance: &GpuInstance, client: &kube::Client) -> Result<(), Error> {
    let namespace = instance.namespace().unwrap_or_default();
    let recorded_in = |i: &GpuInstance| i.status.as_ref().and_then(|s| s.final_snapshot.clone());
    // The copy in hand may predate the record this same deletion wrote (a cache behind a cut
    // watch): trusted alone, it would leave the final Snapshot object behind.
    let fresh = if recorded_in(instance).is_none() && asked_for(instance) {
        let instances: Api<GpuInstance> = Api::namespaced(client.clone(), &namespace);
        match instances.get_opt(&instance.name_any()).await? {
            Some(fresh) => fresh,
            None => return Ok(()),
        }
    } else {
        instance.clone()
    };
    let Some(recorded) = recorded_in(&fresh) else {
        return Ok(());
    };
    if fresh
        .spec
        .final_snapshot
        .as_ref()
        .is_some_and(|f| f.keep_as_object)
    {
        return Ok(());
    }
    let snapshots: Api<Snapshot> = Api::namespaced(client.clone(), &namespace);
    let Some(object) = snapshots.get_opt(&recorded.object).await? else {
        return Ok(());
    };
    let ours = object
        .annotations()
        .get(FINAL_SNAPSHOT_OF_UID_ANNOTATION)
        .is_some_and(|uid| Some(uid) == fresh.uid().as_ref());
    if ours
        && object.meta().deletion_timestamp.is_none()
        && object.spec.managed.deletion_policy == DeletionPolicy::Orphan
    {
        snapshots
            .delete(&recorded.object, &DeleteParams::default())
            .await?;
    }
    Ok(())
}

/// Whether the machine is there to be snapshotted, moving it toward `ACTIVE`: a stopped machine
/// is started, a hibernated one restored. `false` only when neither a read by id nor the latest
/// list finds it: there is nothing left to snapshot.
async fn machine_active(
    cx: &Context<GpuInstance>,
    account: &Arc<Account>,
    machine: &str,
) -> Result<bool, Error> {
    let client = &account.client;
    let record = match client.get_instance(machine).await {
        Ok(record) => record,
        Err(e) if e.is_not_found() => {
            let listed = cx.observer(account).latest().await?.get(machine).is_some();
            if listed {
                return Err(waiting(format!(
                    "{machine} is listed but not found by id; looking again before its final snapshot"
                )));
            }
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    };
    match record.status {
        InstanceStatus::Shutoff => {
            client.start_instance(machine).await?;
        }
        InstanceStatus::Hibernated => {
            client.restore_hibernated_instance(machine).await?;
        }
        InstanceStatus::Error => {
            return Err(Error::Blocked {
                reason: reason::FINAL_SNAPSHOT_BLOCKED,
                message: format!(
                    "the cloud reports {machine} in ERROR and snapshots ACTIVE machines only: \
                     set spec.deletionPolicy to Delete (or Orphan) to go on without a final \
                     snapshot"
                ),
            });
        }
        _ => {}
    }
    Ok(true)
}

/// The Snapshot object that takes the final snapshot of `machine`.
fn final_object(instance: &GpuInstance, machine: &str) -> Snapshot {
    let name = instance.name_any();
    let mut object = Snapshot::new(
        &object_name(&name),
        SnapshotSpec {
            managed: ManagedFields {
                deletion_policy: DeletionPolicy::Delete,
                credentials_secret_ref: instance.managed().credentials_secret_ref.clone(),
                ..ManagedFields::default()
            },
            instance_ref: None,
            instance_id: Some(machine.to_string()),
            description: format!("{DESCRIPTION_PREFIX}{name}"),
            labels: Vec::new(),
            lifetime: None,
        },
    );
    object.metadata = ObjectMeta {
        name: Some(object_name(&name)),
        namespace: instance.namespace(),
        labels: Some(BTreeMap::from([(
            FINAL_SNAPSHOT_OF_LABEL.to_string(),
            name.clone(),
        )])),
        annotations: Some(BTreeMap::from([(
            FINAL_SNAPSHOT_OF_UID_ANNOTATION.to_string(),
            instance.uid().unwrap_or_default(),
        )])),
        ..ObjectMeta::default()
    };
    object
}

fn waiting(message: String) -> Error {
    Error::InProgress {
        reason: reason::FINAL_SNAPSHOT,
        message,
    }
}
