//! The flow's pure parts: the turn a reconcile takes, the records a list change concerns,
//! expiry warnings, progress that is no news, and wakes.

use super::expiry::expiry_warning_due;
use super::next::{NEXT, await_change, no_later_than, settled, until_wake};
use super::status::retells_progress;
use super::*;
use crate::flow::conditions::{self, Outcome, reason};
use crate::flow::create::AnnotatedIntent;
use crate::flow::declarations::KindDeclarations;
use crate::flow::gauges::Next;
use crate::flow::naming;
use crate::flow::recorded::recorded_status;
use crate::flow::recorded::records_any;
use crate::runtime::clock::Clock;
use crate::runtime::fair_share::Work;
use gpucloud_api::lifetime::Stage;
use gpucloud_api::{CREATE_INTENT_ANNOTATION, CloudStatus, EXTERNAL_ID_ANNOTATION, FINALIZER};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use std::cell::Cell;
use std::collections::HashSet;
use std::time::Duration;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// The machine `ml/train` of both tables, with `finalizers`.
fn train(finalizers: &[&str]) -> gpucloud_api::gpu_instance::GpuInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
        "metadata": {"name": "train", "namespace": "ml", "uid": "uid-1",
                     "finalizers": finalizers},
        "spec": {"region": "us-east", "gpuType": "A100", "osImage": "ubuntu"},
    }))
    .unwrap()
}

#[test]
fn only_an_object_with_nothing_of_a_resource_recorded_waits_its_turn_as_a_create() {
    use gpucloud_api::PendingCreate;
    let object = |status: CloudStatus, annotation: Option<&str>, deleting: bool| {
        let mut object = train(&[]);
        if let Some(annotation) = annotation {
            object
                .annotations_mut()
                .insert(annotation.into(), "{}".into());
        }
        if deleting {
            object.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        }
        object.with_status(status, None, Timestamp::now())
    };
    let nothing = CloudStatus::default();
    let recorded = CloudStatus {
        external_id: Some("vm-1".into()),
        ..CloudStatus::default()
    };
    let pending = CloudStatus {
        pending_create: Some(PendingCreate {
            cloud_name: "name".into(),
            started_at: Time(Timestamp::now()),
        }),
        ..CloudStatus::default()
    };
    let named = CloudStatus {
        cloud_name: Some("name".into()),
        ..CloudStatus::default()
    };
    for (object, work) in [
        (object(nothing.clone(), None, false), Work::Create),
        (object(recorded, None, false), Work::Existing),
        (object(pending, None, false), Work::Existing),
        (object(named, None, false), Work::Existing),
        // The first create's intent, written with the finalizer before the status has any.
        (
            object(nothing.clone(), Some(CREATE_INTENT_ANNOTATION), false),
            Work::Existing,
        ),
        // Named for adoption: found in the cloud, not created.
        (
            object(nothing.clone(), Some(EXTERNAL_ID_ANNOTATION), false),
            Work::Existing,
        ),
        // Going before anything was made: its cleanup creates nothing.
        (object(nothing, None, true), Work::Existing),
    ] {
        assert_eq!(work_of(&object), work, "{:?}", object.status);
    }
}

#[test]
fn a_list_change_concerns_the_objects_whose_recorded_status_names_it() {
    use gpucloud_api::PendingCreate;
    let object = |status: Option<CloudStatus>, annotated: bool| {
        let mut object = train(&[FINALIZER]);
        if annotated {
            let intent = AnnotatedIntent {
                started_at: at("2026-11-27T10:00:00Z"),
                account: "acct".into(),
            };
            object
                .annotations_mut()
                .insert(CREATE_INTENT_ANNOTATION.into(), intent.value());
        }
        if let Some(status) = status {
            object = object.with_status(status, None, Timestamp::now());
        }
        object
    };
    let derived = naming::cloud_name("ml", "train", "uid-1");
    let set = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<HashSet<_>>();
    let pending = CloudStatus {
        pending_create: Some(PendingCreate {
            cloud_name: "pending-name".into(),
            started_at: Time(Timestamp::now()),
        }),
        ..CloudStatus::default()
    };
    let recorded = CloudStatus {
        external_id: Some("vm-1".into()),
        cloud_name: Some("recorded-name".into()),
        ..CloudStatus::default()
    };
    for (object, ids, names, concerned) in [
        (
            object(Some(recorded.clone()), false),
            set(&["vm-1"]),
            set(&[]),
            true,
        ),
        (
            object(Some(recorded.clone()), false),
            set(&[]),
            set(&["recorded-name"]),
            true,
        ),
        (
            object(Some(recorded.clone()), false),
            set(&["vm-2"]),
            set(&["other"]),
            false,
        ),
        // A recorded name is the one the object answers to, whatever it would derive.
        (
            object(Some(recorded.clone()), true),
            set(&[]),
            set(&[derived.as_str()]),
            false,
        ),
        (
            object(Some(pending.clone()), false),
            set(&[]),
            set(&["pending-name"]),
            true,
        ),
        (
            object(Some(pending.clone()), false),
            set(&[]),
            set(&[derived.as_str()]),
            false,
        ),
        // The intent only the annotation records: the derived name.
        (object(None, true), set(&[]), set(&[derived.as_str()]), true),
        (
            object(Some(CloudStatus::default()), true),
            set(&[]),
            set(&[derived.as_str()]),
            true,
        ),
        (object(None, true), set(&[]), set(&["other"]), false),
        (
            object(None, false),
            set(&[]),
            set(&[derived.as_str()]),
            false,
        ),
    ] {
        assert_eq!(
            records_any(&object, &ids, &names),
            concerned,
            "{:?} {ids:?} {names:?}",
            object.status
        );
        // The same answer as matching the status every other reader reads.
        let status = recorded_status(&object);
        let by_status = status.external_id.is_some_and(|id| ids.contains(&id))
            || status.cloud_name.is_some_and(|name| names.contains(&name))
            || status
                .pending_create
                .is_some_and(|pending| names.contains(&pending.cloud_name));
        assert_eq!(by_status, concerned, "{:?}", object.status);
    }
}

#[test]
fn an_expiry_is_warned_of_once_when_settled_and_again_when_moved() {
    let expires_at = at("2026-11-27T11:00:00Z");
    let expiring = Some(Stage::Expiring { expires_at });
    let ready = Outcome::ready(reason::AVAILABLE, "up");
    let busy = Outcome::progressing(reason::UPDATING, "stopping");
    let warned = |at: Option<Timestamp>| CloudStatus {
        expiry_warned: at.map(Time),
        ..CloudStatus::default()
    };
    let moved = at("2026-11-27T10:00:00Z");
    for (stage, status, outcome, due) in [
        (expiring, warned(None), &ready, Some(expires_at)),
        (expiring, warned(Some(expires_at)), &ready, None),
        (expiring, warned(Some(moved)), &ready, Some(expires_at)),
        // Not while anything is under way: the warning waits for a settled object.
        (expiring, warned(None), &busy, None),
        (
            Some(Stage::Live {
                warn_at: moved,
                expires_at,
            }),
            warned(None),
            &ready,
            None,
        ),
        (
            Some(Stage::Expired { expires_at }),
            warned(None),
            &ready,
            None,
        ),
        (None, warned(None), &ready, None),
    ] {
        assert_eq!(
            expiry_warning_due(stage, &status, outcome),
            due,
            "{stage:?} {status:?}"
        );
    }
}

#[test]
fn a_step_within_a_transition_shown_under_way_is_no_news() {
    let now = Timestamp::now();
    let status = |outcome: &Outcome, generation: i64, state: &str, id: Option<&str>| {
        let mut status = CloudStatus {
            external_id: id.map(str::to_string),
            state: Some(state.to_string()),
            observed_generation: Some(generation),
            ..CloudStatus::default()
        };
        conditions::apply(&mut status.conditions, outcome, Some(generation), now);
        status
    };
    let provisioning =
        |state: &str| Outcome::progressing(reason::PROVISIONING, format!("vm-1 is {state}"));
    let booting = status(&provisioning("CREATING"), 1, "CREATING", Some("vm-1"));
    let ready = Outcome::ready(reason::AVAILABLE, "vm-1 is running");
    // Another state of the same transition: not written.
    assert!(retells_progress(
        &booting,
        &status(&provisioning("BOOTING"), 1, "ACTIVE", Some("vm-1"))
    ));
    // The transition's end, another transition, another generation, an id recorded: news.
    assert!(!retells_progress(
        &booting,
        &status(&ready, 1, "ACTIVE", Some("vm-1"))
    ));
    let updating = Outcome::progressing(reason::UPDATING, "stopping vm-1");
    assert!(!retells_progress(
        &booting,
        &status(&updating, 1, "ACTIVE", Some("vm-1"))
    ));
    assert!(!retells_progress(
        &booting,
        &status(&provisioning("BOOTING"), 2, "ACTIVE", Some("vm-1"))
    ));
    let creating = Outcome::progressing(reason::CREATING, "creating gco-x");
    let waiting = Outcome::progressing(reason::WAITING_FOR_CLOUD_LIST, "waiting for the list");
    let intent = status(&creating, 1, "", None);
    assert!(!retells_progress(
        &intent,
        &status(&provisioning("CREATING"), 1, "CREATING", Some("vm-1"))
    ));
    // Waiting for the list to show a create is the create.
    assert!(retells_progress(&intent, &status(&waiting, 1, "", None)));
    // Nothing under way in the stored status: a report of work is news.
    let settled = status(&ready, 1, "ACTIVE", Some("vm-1"));
    assert!(!retells_progress(
        &settled,
        &status(&provisioning("BOOTING"), 1, "ACTIVE", Some("vm-1"))
    ));
}

#[test]
fn a_requeue_is_never_later_than_the_next_wake() {
    let real = Clock::real();
    let five_minutes = Some(Duration::from_secs(300));
    let soon = Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(5);
    for asked in [five_minutes, None] {
        let after = until_wake(asked, Some(soon), &real).unwrap();
        assert!(
            after <= Duration::from_secs(5) && after > Duration::from_secs(3),
            "{after:?}"
        );
    }
    assert_eq!(until_wake(five_minutes, None, &real), five_minutes);
    assert_eq!(until_wake(None, None, &real), None);
    let past = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(5);
    assert_eq!(
        until_wake(five_minutes, Some(past), &real),
        Some(Duration::ZERO)
    );
    let later = Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1);
    assert_eq!(until_wake(five_minutes, Some(later), &real), five_minutes);
}

/// A settled object is left to the sweep unless it has a moment ahead: then a timer of its
/// own, at the moment or one resync interval on, whichever is sooner.
#[tokio::test]
async fn a_settled_object_with_a_moment_ahead_keeps_a_timer_of_at_most_one_interval() {
    let real = Clock::real();
    let minute = Duration::from_secs(60);
    let from_now =
        |seconds| Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(seconds);
    let next_after = |wake: Option<Timestamp>| {
        NEXT.sync_scope(Cell::new(None), || {
            no_later_than(settled(), wake, &real, minute);
            NEXT.with(Cell::get)
        })
    };
    assert_eq!(next_after(None), Some(Next::Sweep));
    assert_eq!(
        next_after(Some(from_now(86_400))),
        Some(Next::Requeue(minute))
    );
    match next_after(Some(from_now(5))) {
        Some(Next::Requeue(after)) => assert!(after <= Duration::from_secs(5), "{after:?}"),
        other => panic!("{other:?}"),
    }
    // What asked for nothing but a change waits for its moment, however far.
    let awaiting = NEXT.sync_scope(Cell::new(None), || {
        no_later_than(await_change(), Some(from_now(86_400)), &real, minute);
        NEXT.with(Cell::get)
    });
    assert!(matches!(awaiting, Some(Next::Requeue(after)) if after > minute));
}

/// On a scaled clock, a wake hours of clock time away is a timer of seconds.
#[test]
fn a_wake_on_a_scaled_clock_is_its_clock_span_over_the_scale() {
    let origin = at("2026-10-23T04:00:00Z");
    let clock = Clock::scaled(origin, 3600.0);
    let five_minutes = Some(Duration::from_secs(300));
    let after = until_wake(five_minutes, Some(at("2026-10-23T06:00:00Z")), &clock).unwrap();
    assert!(
        after <= Duration::from_secs(2) && after > Duration::from_millis(1900),
        "{after:?}"
    );
    assert_eq!(
        until_wake(five_minutes, Some(origin), &clock),
        Some(Duration::ZERO)
    );
}
