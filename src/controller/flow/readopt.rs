//! Re-adoption when a controller starts (an operator restart, or a new leader).
//!
//! A starting controller finds its objects in one list from the API server and their cloud
//! resources in one list per kind and account. An object that list shows settled (Ready for
//! its generation, finalizer in place, nothing pending or asked for outside the spec) whose
//! resource the cloud's first list shows as its status records it is re-adopted from the two
//! lists alone: nothing would change, so it is not reconciled at once. Its next reconcile
//! comes as any settled object's does, once per resync interval, spread over the first
//! interval so that a restart does not wake every object at the same moment. Everything else
//! (not settled, missing from the cloud's list, or listed otherwise than its status says) is
//! reconciled at once.
//!
//! A change the status does not show (a security rule edited in the cloud while no operator
//! ran) is found by that first recheck, within one resync interval, as a settled operator
//! finds it with its next list.
//!
//! A moment the object must be looked at whatever the cloud does (its lifetime's next stage, a
//! power schedule's next transition) is kept across the restart: an object whose moment
//! passed while no operator ran is reconciled at once, and a re-adopted one is rechecked at
//! its moment should that come before its place in the spread.

use crate::accounts::account::SecretLocation;
use crate::accounts::observer::{CloudList, CloudRecord};
use crate::flow::context::Context;
use crate::flow::kind::{ManagedKind, Record};
use crate::flow::reconcile::{paused, wake_of};
use crate::lock;
use gpucloud_api::lifetime::{self, Stage};
use gpucloud_api::{FINALIZER, SecretKeyRef};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The startup check of one controller: fed with the objects of its first list, until that
/// list is complete.
pub struct Readoption<K: ManagedKind> {
    cx: Arc<Context<K>>,
    listing: Mutex<Option<mpsc::UnboundedSender<Arc<K>>>>,
}

impl<K: ManagedKind> Readoption<K> {
    /// Starts the check: objects found to need a reconcile, and later the rechecks of the
    /// re-adopted ones, are sent on `trigger`.
    pub fn start(cx: Arc<Context<K>>, trigger: mpsc::UnboundedSender<ObjectRef<K>>) -> Self {
        let (sender, received) = mpsc::unbounded_channel();
        tokio::spawn(check(cx.clone(), received, trigger));
        Readoption {
            cx,
            listing: Mutex::new(Some(sender)),
        }
    }

    /// An object of the first list: taken for the check when settled, handed back (to be
    /// reconciled as usual) otherwise or once the first list is complete.
    pub fn offer(&self, object: Arc<K>) -> Option<Arc<K>> {
        let listing = lock(&self.listing);
        let Some(check) = listing.as_ref() else {
            return Some(object);
        };
        // The first cloud list of the object's account is asked for now, beside the other
        // accounts' (once per account): the check takes the accounts one after another, and
        // would otherwise wait one whole list per account.
        self.cx.prepare(&object);
        if !settled(&*object) {
            // Reconciled once the whole list is in.
            return Some(object);
        }
        match check.send(object) {
            Ok(()) => None,
            Err(mpsc::error::SendError(object)) => Some(object),
        }
    }

    /// The first list is complete: objects from now on are reconciled as they come.
    pub fn listed(&self) {
        lock(&self.listing).take();
    }
}

/// Whether the object's status says everything is done: Ready for the current generation,
/// the finalizer in place, the resource recorded, no create pending, not being deleted, not
/// paused, and nothing asked for through annotations that the status does not show.
pub fn settled<K: ManagedKind>(object: &K) -> bool {
    let meta = object.meta();
    let Some(status) = object.cloud_status_ref() else {
        return false;
    };
    meta.deletion_timestamp.is_none()
        && meta.generation.is_some()
        && status.is_ready(meta.generation)
        && status.external_id.is_some()
        && status.pending_create.is_none()
        && object.finalizers().iter().any(|f| f == FINALIZER)
        && !paused(object)
        && object.annotations_observed()
}

/// Whether `record` is what the object's status shows at `now`: the state, and every field
/// the kind takes from the record (or the time) into its status.
pub fn listed_as_recorded<K: ManagedKind>(object: &K, record: &Record<K>, now: Timestamp) -> bool {
    let Some(status) = object.cloud_status_ref() else {
        return false;
    };
    status.state.as_deref() == Some(record.state().as_str())
        && object.status() == Some(&object.status_at(status.clone(), Some(record), now))
}

/// Checks the settled objects of the first list against the cloud's first list, then spreads
/// the re-adopted objects' first rechecks over one resync interval.
async fn check<K: ManagedKind>(
    cx: Arc<Context<K>>,
    mut received: mpsc::UnboundedReceiver<Arc<K>>,
    trigger: mpsc::UnboundedSender<ObjectRef<K>>,
) {
    // The cloud's first list per credentials, or `None` when the credentials or the list
    // failed: asked once each, so a cloud that does not answer holds the check up once, not
    // once per object.
    let mut first_lists: HashMap<SecretLocation, Option<Arc<CloudList<Record<K>>>>> =
        HashMap::new();
    // A map: a first list retried after an error offers its objects again. Each with the
    // moment it must be looked at whatever the cloud does.
    let mut readopted = HashMap::new();
    let mut reconciled = 0_usize;
    let clock = cx.settings.clock;
    while let Some(object) = received.recv().await {
        let object = &*object;
        let namespace = object.namespace().unwrap_or_default();
        let reference = object.managed().credentials_secret_ref.as_ref();
        let listed = match cx.accounts.secret_for(&namespace, reference) {
            Some(location) => match first_lists.get(&location) {
                Some(listed) => listed.clone(),
                None => {
                    let listed = first_list(&cx, &namespace, reference).await;
                    first_lists.insert(location, listed.clone());
                    listed
                }
            },
            None => None,
        };
        let key = crate::runtime::applier::key_of(object);
        let now = clock.now();
        // A lifetime that reached a stage while no operator ran is acted on now, not at the
        // object's place in the spread (a schedule's edge shows in `status_at`).
        if !lifetime_due(object, now)
            && listed.is_some_and(|snapshot| matches_cloud(&snapshot, object, now))
        {
            readopted.insert(key, wake_of(object, now));
        } else {
            reconciled += 1;
            cx.gauges.triggered(&key);
            if trigger.send(key).is_err() {
                return;
            }
        }
    }
    tracing::info!(
        kind = %K::kind(&()),
        readopted = readopted.len(),
        reconciled,
        "first list checked against the cloud"
    );
    spread(&cx, readopted, cx.settings.observe.resync, &trigger).await;
}

/// The cloud's first list for the credentials an object names. A failure is the reconcile's
/// to report.
async fn first_list<K: ManagedKind>(
    cx: &Context<K>,
    namespace: &str,
    reference: Option<&SecretKeyRef>,
) -> Option<Arc<CloudList<Record<K>>>> {
    let account = cx.accounts.resolve(namespace, reference).await.ok()?;
    cx.observer(&account).latest().await.ok()
}

/// Whether the object's lifetime is at a stage at `now` that its status may not show yet:
/// ended (carried out or not, the reconcile tells at no cloud call), or in its warning stage
/// not warned of.
fn lifetime_due<K: ManagedKind>(object: &K, now: Timestamp) -> bool {
    match lifetime::stage_of(object, now) {
        Ok(Some(Stage::Expired { .. })) | Err(_) => true,
        Ok(Some(Stage::Expiring { expires_at })) => {
            object
                .cloud_status_ref()
                .and_then(|s| s.expiry_warned.as_ref())
                .map(|t| t.0)
                != Some(expires_at)
        }
        Ok(Some(Stage::Live { .. }) | None) => false,
    }
}

/// Whether `listed` shows the object's resource as its status records it at `now`.
fn matches_cloud<K: ManagedKind>(
    listed: &CloudList<Record<K>>,
    object: &K,
    now: Timestamp,
) -> bool {
    object
        .cloud_status_ref()
        .and_then(|s| s.external_id.as_deref())
        .and_then(|id| listed.get(id))
        .is_some_and(|record| listed_as_recorded(object, record, now))
}

/// Wakes `objects` one after another, evenly over `over` and in no particular order: the
/// recheck each would have had one resync interval after its last reconcile, or sooner at
/// the moment (of the operator's clock) it must be looked at.
async fn spread<K: ManagedKind>(
    cx: &Context<K>,
    objects: HashMap<ObjectRef<K>, Option<Timestamp>>,
    over: Duration,
    trigger: &mpsc::UnboundedSender<ObjectRef<K>>,
) {
    let count = u32::try_from(objects.len()).unwrap_or(u32::MAX).max(1);
    let step = over / count;
    let clock = cx.settings.clock;
    let start = tokio::time::Instant::now();
    let mut due: Vec<(Duration, ObjectRef<K>)> = (1..)
        .zip(objects)
        .map(|(n, (key, wake))| {
            let slot = step * n;
            let at = wake.map_or(slot, |wake| slot.min(clock.until(wake)));
            (at, key)
        })
        .collect();
    due.sort_by_key(|(at, _)| *at);
    for (at, key) in &due {
        cx.gauges.due_in(key, *at);
    }
    for (at, key) in due {
        tokio::time::sleep_until(start + at).await;
        // Deleted meanwhile: its watch event has already woken it.
        if cx.gauges.store().get(&key).is_none() {
            continue;
        }
        cx.gauges.triggered(&key);
        if trigger.send(key).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_api::{GpuInstance, PAUSED_ANNOTATION, RESTARTED_AT_ANNOTATION, SshKey};
    use gpucloud_apiserver_semantics::patch::merge_patch as merge;
    use gpucloud_cloud::model::SshKey as CloudSshKey;
    use serde_json::json;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKWIQ key";

    /// An SshKey as a reconcile leaves it once its key is imported.
    fn settled_key() -> serde_json::Value {
        json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": "SshKey",
            "metadata": {
                "name": "key", "namespace": "team", "uid": "u-1", "generation": 2,
                "finalizers": [FINALIZER],
            },
            "spec": {"publicKey": KEY},
            "status": {
                "externalId": "key-1", "cloudName": "team-key-u1", "state": "available",
                "observedGeneration": 2,
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "Available", "message": "",
                    "lastTransitionTime": "2026-11-25T00:00:00Z", "observedGeneration": 2,
                }],
                "generated": false, "publicKey": KEY,
            },
        })
    }

    fn key(value: serde_json::Value) -> SshKey {
        serde_json::from_value(value).expect("a valid SshKey")
    }

    fn record(public_key: &str) -> CloudSshKey {
        CloudSshKey {
            id: "key-1".into(),
            name: "team-key-u1".into(),
            public_key: public_key.into(),
            created_at: "2026-11-25T00:00:00Z".into(),
            metadata: Default::default(),
        }
    }

    #[test]
    fn ready_for_its_generation_with_the_finalizer_is_settled() {
        assert!(settled(&key(settled_key())));
    }

    #[test]
    fn anything_left_to_do_is_not_settled() {
        let changes: [(&str, serde_json::Value); 7] = [
            ("a newer spec", json!({"metadata": {"generation": 3}})),
            ("no finalizer", json!({"metadata": {"finalizers": null}})),
            (
                "being deleted",
                json!({"metadata": {"deletionTimestamp": "2026-11-25T01:00:00Z"}}),
            ),
            (
                "paused",
                json!({"metadata": {"annotations": {PAUSED_ANNOTATION: "true"}}}),
            ),
            (
                "no resource recorded",
                json!({"status": {"externalId": null}}),
            ),
            (
                "a create pending",
                json!({"status": {"pendingCreate": {
                    "cloudName": "team-key-u1", "startedAt": "2026-11-25T00:00:00Z",
                }}}),
            ),
            (
                "not Ready",
                json!({"status": {"conditions": [{
                    "type": "Ready", "status": "False", "reason": "Creating", "message": "",
                    "lastTransitionTime": "2026-11-25T00:00:00Z", "observedGeneration": 2,
                }]}}),
            ),
        ];
        for (what, change) in changes {
            let mut object = settled_key();
            merge(&mut object, &change);
            assert!(!settled(&key(object)), "{what}");
        }
    }

    #[test]
    fn a_restart_asked_for_and_not_done_is_not_settled() {
        let instance = |annotation: Option<&str>, done: Option<&str>| -> GpuInstance {
            serde_json::from_value(json!({
                "apiVersion": "gpucloud.io/v1alpha1",
                "kind": "GpuInstance",
                "metadata": {
                    "name": "gpu", "namespace": "team", "generation": 1,
                    "finalizers": [FINALIZER],
                    "annotations": annotation.map(|a| json!({RESTARTED_AT_ANNOTATION: a})),
                },
                "spec": {"region": "us-east-1", "gpuType": "A100", "osImage": "ubuntu-22.04"},
                "status": {
                    "externalId": "vm-1", "state": "ACTIVE", "observedGeneration": 1,
                    "restartedAt": done,
                    "conditions": [{
                        "type": "Ready", "status": "True", "reason": "Available", "message": "",
                        "lastTransitionTime": "2026-11-25T00:00:00Z", "observedGeneration": 1,
                    }],
                },
            }))
            .expect("a valid GpuInstance")
        };
        assert!(settled(&instance(None, None)));
        assert!(settled(&instance(Some("t1"), Some("t1"))));
        assert!(!settled(&instance(Some("t2"), Some("t1"))));
        assert!(!settled(&instance(Some("t1"), None)));
    }

    /// A lifetime's stage the status may not show yet brings a reconcile at the start: ended,
    /// or in its warning stage without the warning recorded.
    #[test]
    fn a_lifetime_ended_or_unwarned_is_due_at_the_start() {
        let expires_at = "2026-10-23T12:00:00Z";
        let instance = |warned: Option<&str>| -> GpuInstance {
            serde_json::from_value(json!({
                "apiVersion": "gpucloud.io/v1alpha1",
                "kind": "GpuInstance",
                "metadata": {"name": "gpu", "namespace": "team", "generation": 1},
                "spec": {
                    "region": "us-east-1", "gpuType": "A100", "osImage": "ubuntu-22.04",
                    "lifetime": {"expiresAt": expires_at, "warnBefore": "1h", "onExpiry": "Stop"},
                },
                "status": {"externalId": "vm-1", "expiryWarned": warned},
            }))
            .expect("a valid GpuInstance")
        };
        let at = |text: &str| -> Timestamp { text.parse().unwrap() };
        for (now, warned, due) in [
            ("2026-10-23T10:00:00Z", None, false),
            ("2026-10-23T11:30:00Z", None, true),
            ("2026-10-23T11:30:00Z", Some(expires_at), false),
            ("2026-10-23T11:30:00Z", Some("2026-10-23T09:00:00Z"), true),
            ("2026-10-23T12:00:00Z", Some(expires_at), true),
        ] {
            assert_eq!(
                lifetime_due(&instance(warned), at(now)),
                due,
                "{now} {warned:?}"
            );
        }
        let without: GpuInstance = serde_json::from_value(json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
            "metadata": {"name": "gpu", "namespace": "team"},
            "spec": {"region": "us-east-1", "gpuType": "A100", "osImage": "ubuntu-22.04"},
        }))
        .expect("a valid GpuInstance");
        assert!(!lifetime_due(&without, at("2026-10-23T12:00:00Z")));
    }

    #[test]
    fn a_record_matches_when_the_status_shows_it() {
        let object = key(settled_key());
        assert!(listed_as_recorded(&object, &record(KEY), Timestamp::now()));
        // A field the kind takes into its status differs.
        assert!(!listed_as_recorded(
            &object,
            &record("ssh-ed25519 AAAAother key"),
            Timestamp::now()
        ));
        // The state recorded differs from the listed one.
        let mut other_state = settled_key();
        merge(&mut other_state, &json!({"status": {"state": "pending"}}));
        assert!(!listed_as_recorded(
            &key(other_state),
            &record(KEY),
            Timestamp::now()
        ));
    }
}
