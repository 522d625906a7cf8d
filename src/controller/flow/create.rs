//! The idempotent-create decision, shared by every kind that creates a billed resource.
//!
//! A create whose outcome is unknown (timeout, dropped connection, crash, a failed status
//! write after the call) must never lead to a second billed resource. The protocol, described
//! with its crash points in `docs/design.md`:
//!
//! 1. Before calling create, record `status.pendingCreate` (the cloud name and the time) with a
//!    resourceVersion-checked status write. A stale cache or a second replica loses that write
//!    with a conflict and so never reaches the create call.
//! 2. While `pendingCreate` is set, look for the cloud name in the cloud's list first. Found:
//!    adopt it. Not found: the create may still be on its way into the list (cloud lists lag
//!    behind writes), so wait until the list has had `settle_window` to show it.
//! 3. Only after that window, with the name still absent from a list *sent* after the window
//!    (an older list proves nothing: lists fail or run late under load), is the create
//!    repeated (recording the new attempt time first, again version-checked); the id this
//!    process's own create call answered with is read first, and found, it is recorded instead.
//!    While no such list has come, the object waits to be woken by the first one: however
//!    long the lists fail, a waiting create costs no reconcile until then.
//! 4. The create's answer is not written by itself: the intent's write already shows the create
//!    under way, and the first list that shows the resource records its id, with its state, and
//!    clears the intent in one write.
//!
//! An object's first create records its intent in the patch that adds the finalizer, as the
//! `gpucloud.io/create-intent` annotation (one write where the status subresource would need
//! a second: it ignores metadata, and the main resource ignores status). The annotation counts
//! as `pendingCreate` only while the status records nothing of the create ([`annotated`]); the
//! first status write after it carries the intent over, or clears it.
//!
//! This module is the pure decision; the reconcilers do the I/O around it.

use gpucloud_api::{CREATE_INTENT_ANNOTATION, CloudStatus, FINALIZER, Managed, PendingCreate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// A first create's intent, as `gpucloud.io/create-intent` carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnnotatedIntent {
    /// When the create was attempted.
    pub started_at: Timestamp,
    /// The account it was sent to (`CloudStatus::account`).
    pub account: String,
}

impl AnnotatedIntent {
    /// The annotation's value.
    pub fn value(&self) -> String {
        serde_json::json!({"startedAt": self.started_at, "account": self.account}).to_string()
    }
}

/// The pending create an object's annotation records and its status does not: the intent
/// written with the finalizer (so only while the finalizer is there), read while the status
/// records nothing of the create (no id, no intent, no cloud name). The cloud name is the
/// object's own, whatever the annotation says; a time after `now` (written by hand, or a clock
/// ahead) counts as `now`, and an unreadable value as no intent. Returns the status the flow
/// reads instead of the stored one.
pub fn annotated(
    annotations: &BTreeMap<String, String>,
    finalizers: &[String],
    status: &CloudStatus,
    cloud_name: &str,
    now: Timestamp,
) -> Option<CloudStatus> {
    if records_create(status) || !finalizers.iter().any(|f| f == FINALIZER) {
        return None;
    }
    let intent: AnnotatedIntent =
        serde_json::from_str(annotations.get(CREATE_INTENT_ANNOTATION)?).ok()?;
    Some(CloudStatus {
        account: Some(intent.account),
        cloud_name: Some(cloud_name.to_string()),
        pending_create: Some(PendingCreate {
            cloud_name: cloud_name.to_string(),
            started_at: Time(intent.started_at.min(now)),
        }),
        ..status.clone()
    })
}

/// Whether `status` records the object's create: an id, a create under way or a cloud name.
/// From then on the annotated intent is read by nothing: it stands in only for a status that
/// records none of them.
pub fn records_create(status: &CloudStatus) -> bool {
    status.external_id.is_some() || status.pending_create.is_some() || status.cloud_name.is_some()
}

/// Drops from `object`'s annotations what the operator never reads again: the create intent once
/// its status records the create ([`records_create`]), and kubectl's
/// `last-applied-configuration` (a copy of the whole object as applied). The watches' stores
/// keep one copy of every object for as long as it exists, and the intent alone, kept in its
/// own map, cost about 750 bytes of each. Only the stored copy forgets them: the operator's
/// writes never send metadata taken wholesale from one (status writes change only status,
/// metadata changes are merge patches of their own keys), so the API server keeps both.
pub fn forget_unread_annotations<K: Managed + Resource>(object: &mut K) {
    let create_recorded = object.cloud_status_ref().is_some_and(records_create);
    let annotations = &mut object.meta_mut().annotations;
    let Some(map) = annotations else { return };
    if create_recorded {
        map.remove(CREATE_INTENT_ANNOTATION);
    }
    map.remove(LAST_APPLIED_ANNOTATION);
    if map.is_empty() {
        *annotations = None;
    }
}

/// kubectl's record of an object as last applied with client-side `kubectl apply`.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A cloud resource found under the object's cloud name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub id: String,
    /// Creation time as the cloud reports it; orders duplicates.
    pub created_at: Option<Timestamp>,
}

/// What the reconciler does next about creating the cloud resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateDecision {
    /// The resource exists: record this id. `extra` lists other resources under the same
    /// name (never expected; reported, not deleted).
    Adopt { id: String, extra: Vec<String> },
    /// No create has been recorded: write `pendingCreate` (version-checked), then create.
    RecordIntentAndCreate,
    /// A create was attempted recently and the list may not show it yet: look again later.
    WaitForList { recheck_after: Duration },
    /// The settle window has passed, but no list sent since then has come (lists fail or run
    /// late): look again when one does, not on a timer. Only such a list can prove the create
    /// did not happen.
    WaitForNextList,
    /// A create was attempted long enough ago that the list would show it: it did not happen.
    /// Record a new attempt time (version-checked), then create.
    RetryCreate,
}

/// Decides the next create step from the pending intent (if any), the resources listed under
/// the cloud name, when that list was sent, the current time and how long the cloud's lists
/// may lag behind writes.
pub fn decide(
    pending_since: Option<Timestamp>,
    found: &[Found],
    listed_at: Option<Timestamp>,
    now: Timestamp,
    settle_window: Duration,
) -> CreateDecision {
    if let Some(oldest) = oldest(found) {
        let extra = found
            .iter()
            .filter(|f| f.id != oldest.id)
            .map(|f| f.id.clone())
            .collect();
        return CreateDecision::Adopt {
            id: oldest.id.clone(),
            extra,
        };
    }
    let Some(since) = pending_since else {
        return CreateDecision::RecordIntentAndCreate;
    };
    let elapsed = now.duration_since(since);
    // A clock that moved backwards, or an attempt "in the future", counts as just now.
    let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
    if elapsed < settle_window {
        return CreateDecision::WaitForList {
            recheck_after: (settle_window - elapsed).max(Duration::from_millis(100)),
        };
    }
    // The absence counts only in a list sent once the window had passed.
    let settled = since
        .checked_add(settle_window)
        .ok()
        .is_some_and(|due| listed_at.is_some_and(|listed| listed >= due));
    if settled {
        CreateDecision::RetryCreate
    } else {
        CreateDecision::WaitForNextList
    }
}

fn oldest(found: &[Found]) -> Option<&Found> {
    // `None` creation times sort last; ties broken by id, so every replica picks the same one.
    found
        .iter()
        .min_by(|a, b| match (a.created_at, b.created_at) {
            (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.id.cmp(&b.id)),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.id.cmp(&b.id),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent_annotation(value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(CREATE_INTENT_ANNOTATION.to_string(), value.to_string())])
    }

    #[test]
    fn the_annotated_intent_counts_until_the_status_records_the_create() {
        let finalizers = [FINALIZER.to_string()];
        let value = AnnotatedIntent {
            started_at: at(90),
            account: "acct-1".into(),
        }
        .value();
        let annotations = intent_annotation(&value);
        let read = annotated(
            &annotations,
            &finalizers,
            &CloudStatus::default(),
            "gco-a",
            at(100),
        )
        .expect("an intent");
        assert_eq!(read.account.as_deref(), Some("acct-1"));
        assert_eq!(read.cloud_name.as_deref(), Some("gco-a"));
        assert_eq!(
            read.pending_create,
            Some(PendingCreate {
                cloud_name: "gco-a".into(),
                started_at: Time(at(90)),
            })
        );
        // Anything the status records of the create supersedes it.
        for status in statuses_recording_a_create() {
            assert_eq!(
                annotated(&annotations, &finalizers, &status, "gco-a", at(100)),
                None,
                "{status:?}"
            );
        }
        // Written with the finalizer: without it, it was not written by the operator's patch.
        assert_eq!(
            annotated(&annotations, &[], &CloudStatus::default(), "gco-a", at(100)),
            None
        );
    }

    /// A status recording the create by each of its three marks: an id, a cloud name, a create
    /// under way.
    fn statuses_recording_a_create() -> [CloudStatus; 3] {
        [
            CloudStatus {
                external_id: Some("vm-1".into()),
                ..CloudStatus::default()
            },
            CloudStatus {
                cloud_name: Some("gco-a".into()),
                ..CloudStatus::default()
            },
            CloudStatus {
                pending_create: Some(PendingCreate {
                    cloud_name: "gco-a".into(),
                    started_at: Time(at(95)),
                }),
                ..CloudStatus::default()
            },
        ]
    }

    #[test]
    fn a_stored_copy_forgets_the_intent_once_the_status_records_the_create_and_never_a_users_annotation()
     {
        use gpucloud_api::{SshKey, SshKeyStatus};
        let [id, name, pending] = statuses_recording_a_create();
        let recorded = [CloudStatus::default(), id, name, pending];
        // (annotations, status recorded, what the stored copy keeps)
        let cases: [(&[&str], usize, &[&str]); 6] = [
            (&[CREATE_INTENT_ANNOTATION], 0, &[CREATE_INTENT_ANNOTATION]),
            (&[CREATE_INTENT_ANNOTATION], 1, &[]),
            (&[CREATE_INTENT_ANNOTATION], 2, &[]),
            (&[CREATE_INTENT_ANNOTATION], 3, &[]),
            (
                &[
                    CREATE_INTENT_ANNOTATION,
                    LAST_APPLIED_ANNOTATION,
                    "team/owner",
                ],
                0,
                &[CREATE_INTENT_ANNOTATION, "team/owner"],
            ),
            (
                &[
                    CREATE_INTENT_ANNOTATION,
                    LAST_APPLIED_ANNOTATION,
                    "gpucloud.io/paused",
                ],
                1,
                &["gpucloud.io/paused"],
            ),
        ];
        for (annotations, status, kept) in cases {
            let mut key: SshKey = serde_json::from_value(serde_json::json!({
                "apiVersion": "gpucloud.io/v1alpha1", "kind": "SshKey",
                "metadata": {"name": "k", "namespace": "team"},
                "spec": {"publicKey": "ssh-ed25519 AAAA"},
            }))
            .unwrap();
            key.metadata.annotations = Some(
                annotations
                    .iter()
                    .map(|a| (a.to_string(), "{}".to_string()))
                    .collect(),
            );
            key.status = Some(SshKeyStatus {
                cloud: recorded[status].clone(),
                ..SshKeyStatus::default()
            });
            forget_unread_annotations(&mut key);
            let left: Vec<&str> = key
                .metadata
                .annotations
                .iter()
                .flatten()
                .map(|(k, _)| k.as_str())
                .collect();
            assert_eq!(left, kept, "{annotations:?} with status {status}");
            // A map left empty goes altogether: an empty map still costs its allocation.
            assert_eq!(key.metadata.annotations.is_none(), kept.is_empty());
        }
    }

    #[test]
    fn an_annotated_intent_names_the_objects_own_resource_and_no_later_than_now() {
        let finalizers = [FINALIZER.to_string()];
        // A hand-written value: another name is ignored, a time ahead counts as now.
        let annotations = intent_annotation(
            r#"{"startedAt":"2099-01-01T00:00:00Z","account":"a","cloudName":"gco-other"}"#,
        );
        let read = annotated(
            &annotations,
            &finalizers,
            &CloudStatus::default(),
            "gco-a",
            at(100),
        )
        .expect("an intent");
        assert_eq!(
            read.pending_create,
            Some(PendingCreate {
                cloud_name: "gco-a".into(),
                started_at: Time(at(100)),
            })
        );
        for unreadable in ["", "yesterday", r#"{"startedAt":"soon"}"#] {
            assert_eq!(
                annotated(
                    &intent_annotation(unreadable),
                    &finalizers,
                    &CloudStatus::default(),
                    "gco-a",
                    at(100)
                ),
                None,
                "{unreadable}"
            );
        }
    }

    const WINDOW: Duration = Duration::from_secs(30);

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn found(id: &str, created: Option<i64>) -> Found {
        Found {
            id: id.into(),
            created_at: created.map(at),
        }
    }

    #[test]
    fn first_create_records_intent() {
        assert_eq!(
            decide(None, &[], None, at(100), WINDOW),
            CreateDecision::RecordIntentAndCreate
        );
    }

    #[test]
    fn a_listed_resource_is_adopted_whatever_the_intent() {
        let listed = [found("vm-1", Some(5))];
        for pending in [None, Some(at(99)), Some(at(1))] {
            assert_eq!(
                decide(pending, &listed, Some(at(100)), at(100), WINDOW),
                CreateDecision::Adopt {
                    id: "vm-1".into(),
                    extra: vec![]
                }
            );
        }
    }

    #[test]
    fn a_recent_unlisted_attempt_waits_for_the_list() {
        assert_eq!(
            decide(Some(at(90)), &[], Some(at(100)), at(100), WINDOW),
            CreateDecision::WaitForList {
                recheck_after: Duration::from_secs(20)
            }
        );
    }

    #[test]
    fn an_old_unlisted_attempt_is_retried() {
        assert_eq!(
            decide(Some(at(60)), &[], Some(at(99)), at(100), WINDOW),
            CreateDecision::RetryCreate
        );
        assert_eq!(
            decide(Some(at(70)), &[], Some(at(100)), at(100), WINDOW),
            CreateDecision::RetryCreate
        );
    }

    #[test]
    fn a_list_sent_before_the_window_passed_proves_nothing() {
        // The window has passed, but the latest list is older: lists failed or ran late.
        for listed in [None, Some(at(65)), Some(at(89))] {
            assert_eq!(
                decide(Some(at(60)), &[], listed, at(100), WINDOW),
                CreateDecision::WaitForNextList,
                "{listed:?}"
            );
        }
    }

    #[test]
    fn a_clock_going_backwards_never_triggers_a_retry() {
        assert!(matches!(
            decide(Some(at(200)), &[], Some(at(100)), at(100), WINDOW),
            CreateDecision::WaitForList { .. }
        ));
    }

    #[test]
    fn duplicates_adopt_the_oldest_and_report_the_rest() {
        let listed = [
            found("vm-b", Some(20)),
            found("vm-a", Some(10)),
            found("vm-c", None),
        ];
        assert_eq!(
            decide(None, &listed, Some(at(100)), at(100), WINDOW),
            CreateDecision::Adopt {
                id: "vm-a".into(),
                extra: vec!["vm-b".into(), "vm-c".into()]
            }
        );
    }
}
