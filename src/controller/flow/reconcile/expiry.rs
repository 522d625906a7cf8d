//! Lifetimes in the flow: where an object stands, the expiry warning, the deletion an ended
//! lifetime asks for, and the moment the object must be looked at again.

use super::status::publish;
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::error::Error;
use crate::flow::kind::ManagedKind;
use crate::runtime::events::EventType;
use gpucloud_api::lifetime::{self, OnExpiry, Stage};
use gpucloud_api::{CloudStatus, FINALIZER};
use k8s_openapi::jiff::Timestamp;
use kube::api::PatchParams;
use kube::{Api, ResourceExt};

/// Where `object` stands in its lifetime at `now`; a lifetime the operator cannot read
/// (admission refuses those) is an invalid spec.
pub(crate) fn lifetime_stage<K: ManagedKind>(
    object: &K,
    now: Timestamp,
) -> Result<Option<Stage>, Error> {
    lifetime::stage_of(object, now).map_err(Error::InvalidSpec)
}

/// The expiry to warn of now: in the warning stage, once the object is settled (Ready), and
/// not already warned of (an edited expiry is warned of again).
pub(super) fn expiry_warning_due(
    stage: Option<Stage>,
    status: &CloudStatus,
    outcome: &Outcome,
) -> Option<Timestamp> {
    let Some(Stage::Expiring { expires_at }) = stage else {
        return None;
    };
    let warned = status.expiry_warned.as_ref().map(|t| t.0);
    (matches!(outcome, Outcome::Ready { .. }) && warned != Some(expires_at)).then_some(expires_at)
}

/// What became of an object whose lifetime ended with a deletion.
pub(super) enum Expiry<K> {
    /// The API server refused to delete it (deletion protection).
    Refused,
    /// Deleted, its finalizer still on: the object as the API server now holds it.
    Deleting(K),
    /// Deleted and gone, or replaced by a namesake: nothing of it is left to delete.
    Gone,
}

/// The lifetime ended with `onExpiry` Delete or Snapshot: the object deletes itself, and the
/// finalizer deletes the resource (after a final snapshot for `Snapshot`). Only this very object
/// is deleted (its uid is a precondition), never a namesake created since. Refused (deletion
/// protection), the kind keeps the resource as cheap as it can (a GpuInstance is stopped) and
/// a Warning says why.
pub(super) async fn expire<K: ManagedKind>(
    api: &Api<K>,
    object: &K,
    cx: &Context<K>,
    expires_at: Timestamp,
) -> Result<Expiry<K>, Error> {
    // A final snapshot is recorded as asked for before the deletion, where the deletion reads
    // it: an edit of the spec meanwhile cannot skip it. A plain delete needs no record.
    let on_expiry = object.lifetime().map(|l| l.on_expiry);
    if on_expiry == Some(OnExpiry::Snapshot) && object.cloud_status().expired_with != on_expiry {
        let recorded = serde_json::json!({"status": {"expiredWith": on_expiry}});
        api.patch_status(
            &object.name_any(),
            &PatchParams::default(),
            &kube::api::Patch::Merge(&recorded),
        )
        .await?;
    }
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: object.uid(),
            resource_version: None,
        }),
        ..kube::api::DeleteParams::default()
    };
    match api.delete(&object.name_any(), &params).await {
        Ok(deleted) => {
            publish(
                cx,
                object,
                EventType::Normal,
                reason::EXPIRED,
                &format!("the lifetime ended at {expires_at}: deleting this object"),
            );
            Ok(match deleted.left() {
                Some(deleting) if deleting.finalizers().iter().any(|f| f == FINALIZER) => {
                    Expiry::Deleting(deleting)
                }
                _ => Expiry::Gone,
            })
        }
        // Already gone, or a namesake: nothing of this object is left to delete.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            Ok(Expiry::Gone)
        }
        Err(kube::Error::Api(status)) if status.code == 403 => {
            publish(
                cx,
                object,
                EventType::Warning,
                reason::EXPIRY_REFUSED,
                &format!(
                    "the lifetime ended at {expires_at}, and deleting this object was refused: {}",
                    status.message
                ),
            );
            Ok(Expiry::Refused)
        }
        Err(error) => Err(error.into()),
    }
}

/// The moment the object must be looked at again whatever the cloud does: its lifetime's
/// next stage, or the kind's own (a power schedule's next transition).
pub(crate) fn wake_of<K: ManagedKind>(object: &K, now: Timestamp) -> Option<Timestamp> {
    let stage = lifetime::stage_of(object, now)
        .ok()
        .flatten()
        .and_then(Stage::next_change);
    [stage, object.next_wake(now)].into_iter().flatten().min()
}
