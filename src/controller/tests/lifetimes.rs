#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Lifetimes: a machine is stopped, or deleted, at the end of `spec.lifetime`, to within a
//! second of its expiry plus the cloud call, also when the operator was down at that moment;
//! a lifetime extended in time keeps it running; one that has passed before the create makes
//! no machine. A Volume's lifetime ends in its deletion.

use crate::support::{self, Env, eventually, test_config};
use gpucloud_api::*;
use gpucloud_cloud::{CallObserver, CallOutcome, Operation};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, Patch, PatchParams};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// When each StopInstance call was answered.
#[derive(Default)]
struct Stops(Mutex<Vec<Timestamp>>);

impl CallObserver for Stops {
    fn on_call(&self, operation: Operation, _outcome: &CallOutcome, elapsed: Duration) {
        if operation.name() == "StopInstance" {
            let sent = Timestamp::now() - SignedDuration::try_from(elapsed).unwrap();
            self.0.lock().unwrap().push(sent);
        }
    }
}

/// An operator whose StopInstance calls are timed.
async fn counting_stops() -> (Env, Arc<Stops>) {
    let mut env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    let stops = Arc::new(Stops::default());
    let mut config = test_config(&env.simulator);
    config.cloud.observer = Some(stops.clone());
    env.start_operator(config);
    (env, stops)
}

/// Asserts the one StopInstance call was sent within a second after `at`.
fn stopped_within_a_second_of(stops: &Stops, at: Timestamp) {
    let sent = stops.0.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let late = sent[0].duration_since(at);
    assert!(
        late >= SignedDuration::ZERO && late <= SignedDuration::from_secs(1),
        "stopped {late} after {at}"
    );
}

/// A 10 GB Volume deleted `ttl` after its creation.
fn expiring_volume(name: &str, ttl: &str) -> Volume {
    support::object(
        name,
        serde_json::json!({"region": "us-east-1", "sizeGb": 10,
                           "lifetime": {"ttl": ttl, "onExpiry": "Delete"}}),
    )
}

fn instance(name: &str, lifetime: serde_json::Value) -> GpuInstance {
    support::object(
        name,
        serde_json::json!({
            "region": "us-east-1", "gpuType": "H100-80G", "osImage": "ubuntu-22.04-cuda-12",
            "lifetime": lifetime,
        }),
    )
}

async fn vm_status(env: &Env, name: &str, wanted: &str) -> GpuInstance {
    let api = env.api::<GpuInstance>();
    eventually(30, &format!("{name} {wanted}"), || {
        let api = api.clone();
        async move {
            let object = api.get(name).await.ok()?;
            let status = object.status.as_ref()?;
            (status.vm_status.as_deref() == Some(wanted)
                && object.cloud_status().is_ready(object.metadata.generation))
            .then_some(object)
        }
    })
    .await
}

fn expiry_of(object: &GpuInstance) -> Timestamp {
    object.cloud_status().expires_at.unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_is_warned_then_stopped_at_the_end_of_its_lifetime() {
    let (env, stops) = counting_stops().await;
    support::create(
        &env,
        &instance(
            "short",
            serde_json::json!({"ttl": "6s", "warnBefore": "3s"}),
        ),
    )
    .await;
    let ready = vm_status(&env, "short", "RUNNING").await;
    let created = ready.metadata.creation_timestamp.as_ref().unwrap().0;
    let expiry = expiry_of(&ready);
    assert_eq!(expiry, created + SignedDuration::from_secs(6));
    let message = ready
        .cloud_status()
        .condition("Ready")
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains(&format!("expires at {expiry}")),
        "{message}"
    );

    let stopped = vm_status(&env, "short", "STOPPED").await;
    let message = stopped
        .cloud_status()
        .condition("Ready")
        .unwrap()
        .message
        .clone();
    assert!(message.contains("its lifetime ended"), "{message}");
    stopped_within_a_second_of(&stops, expiry);
    // Warned once, before.
    let warned = support::events_about(&env, "short", "ExpiresSoon").await;
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0].type_.as_deref(), Some("Warning"));
    assert!(warned[0].event_time.as_ref().unwrap().0 < expiry);

    // Extended: the machine runs again, until the new expiry.
    env.api::<GpuInstance>()
        .patch(
            "short",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"lifetime": {"ttl": "1h"}}})),
        )
        .await
        .unwrap();
    let extended = vm_status(&env, "short", "RUNNING").await;
    assert_eq!(
        expiry_of(&extended),
        created + SignedDuration::from_hours(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_passed_while_the_operator_was_down_is_acted_on_at_its_start() {
    let mut env = Env::start().await;
    support::create(
        &env,
        &instance("while-down", serde_json::json!({"ttl": "5s"})),
    )
    .await;
    let ready = vm_status(&env, "while-down", "RUNNING").await;
    let expiry = expiry_of(&ready);
    env.kill_operator().await;
    let wait = expiry.duration_since(Timestamp::now()) + SignedDuration::from_secs(1);
    tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;
    assert_eq!(env.calls("StopInstance"), 0);
    env.start_operator(test_config(&env.simulator));
    vm_status(&env, "while-down", "STOPPED").await;
    assert_eq!(env.calls("StopInstance"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_that_deletes_leaves_nothing_billed() {
    let env = Env::start().await;
    support::create(
        &env,
        &instance(
            "one-shot",
            serde_json::json!({"ttl": "4s", "onExpiry": "Delete"}),
        ),
    )
    .await;
    vm_status(&env, "one-shot", "RUNNING").await;
    support::gone::<GpuInstance>(&env, "one-shot").await;
    // Its finalizer went only once the machine was gone.
    assert!(env.simulator.state().instances.is_empty());
    assert_eq!(
        support::events_about(&env, "one-shot", "Expired")
            .await
            .len(),
        1
    );
}

/// A lifetime over before anything is made is a spec to fix, whatever its `onExpiry`: nothing
/// is created (nor billed), and the object stays, Stalled, naming the field; one that would be
/// deleted at its expiry is not deleted for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifetime_over_before_the_create_makes_no_machine() {
    let env = Env::start().await;
    let past = Timestamp::now() - SignedDuration::from_mins(5);
    let names = ["too-late", "too-late-delete", "too-late-snapshot"];
    for (name, on_expiry) in names.into_iter().zip(["Stop", "Delete", "Snapshot"]) {
        support::create(
            &env,
            &instance(
                name,
                serde_json::json!({"expiresAt": past.to_string(), "onExpiry": on_expiry}),
            ),
        )
        .await;
    }
    let volume: Volume = support::object(
        "too-late-volume",
        serde_json::json!({"region": "us-east-1", "sizeGb": 10,
                           "lifetime": {"expiresAt": past.to_string(), "onExpiry": "Delete"}}),
    );
    support::create(&env, &volume).await;
    for name in names {
        let stalled =
            support::condition::<GpuInstance>(&env, name, "Stalled", "True", "InvalidSpec").await;
        let message = support::ready_message(&stalled);
        assert!(
            message.contains("spec.lifetime.expiresAt"),
            "{name}: {message}"
        );
        assert!(
            support::events_about(&env, name, "Expired")
                .await
                .is_empty(),
            "{name}"
        );
    }
    let stalled =
        support::condition::<Volume>(&env, "too-late-volume", "Stalled", "True", "InvalidSpec")
            .await;
    let message = support::ready_message(&stalled);
    assert!(message.contains("spec.lifetime.expiresAt"), "{message}");
    assert_eq!(env.calls("CreateInstance"), 0);
    assert_eq!(env.calls("CreateVolume"), 0);
    for name in names {
        env.api::<GpuInstance>()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    env.api::<Volume>()
        .delete("too-late-volume", &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_with_a_snapshot_keeps_the_disk_and_deletes_the_machine() {
    let env = Env::start().await;
    support::create(
        &env,
        &instance(
            "kept-disk",
            serde_json::json!({"ttl": "4s", "onExpiry": "Snapshot"}),
        ),
    )
    .await;
    vm_status(&env, "kept-disk", "RUNNING").await;
    // Once the expiry has deleted it, the lifetime is removed from the spec: the final
    // snapshot the expiry asked for is taken all the same.
    let api = env.api::<GpuInstance>();
    let deleting = eventually(30, "kept-disk deleting", || {
        let api = api.clone();
        async move {
            let object = api.get_opt("kept-disk").await.ok()??;
            object
                .metadata
                .deletion_timestamp
                .is_some()
                .then_some(object)
        }
    })
    .await;
    assert_eq!(
        deleting.cloud_status().expired_with,
        Some(gpucloud_api::lifetime::OnExpiry::Snapshot)
    );
    api.patch(
        "kept-disk",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"lifetime": null}})),
    )
    .await
    .unwrap();
    support::gone::<GpuInstance>(&env, "kept-disk").await;
    let state = env.simulator.state();
    assert!(state.instances.is_empty(), "{:?}", state.instances);
    assert_eq!(
        state.snapshots.len(),
        1,
        "the final snapshot is left in the cloud"
    );
    assert_eq!(env.calls("CreateSnapshot"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_is_deleted_at_the_end_of_its_lifetime() {
    let env = Env::start().await;
    support::create(&env, &expiring_volume("scratch", "4s")).await;
    let ready = support::ready::<Volume>(&env, "scratch").await;
    let expiry = ready.cloud_status().expires_at.unwrap().0;
    assert_eq!(
        expiry,
        ready.metadata.creation_timestamp.unwrap().0 + SignedDuration::from_secs(4)
    );
    support::gone::<Volume>(&env, "scratch").await;
    assert!(env.simulator.state().volumes.is_empty());
    assert!(Timestamp::now() >= expiry);
}

/// A schedule whose window closes in a few seconds: the machine runs, then is stopped at the
/// window's end (to within a second plus the call), and `status.nextTransition` says when.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_stops_the_machine_when_its_window_closes() {
    let time_of = |h, m| k8s_openapi::jiff::civil::time(h, m, 0, 0);
    use k8s_openapi::jiff::tz::TimeZone;
    let (env, stops) = counting_stops().await;
    // A zone where the window (a minute ago until eight seconds from now) lies within today.
    let now = Timestamp::now();
    let (zone, local) = ["UTC", "Asia/Tokyo", "America/New_York"]
        .into_iter()
        .map(|zone| (zone, now.to_zoned(TimeZone::get(zone).unwrap())))
        .find(|(_, local)| {
            let time = local.time();
            time > time_of(0, 5) && time < time_of(23, 55)
        })
        .unwrap();
    let at = |offset: i64| {
        let at = local
            .checked_add(SignedDuration::from_secs(offset))
            .unwrap();
        at.with().subsec_nanosecond(0).build().unwrap()
    };
    let clock = |offset: i64| at(offset).time().strftime("%H:%M:%S").to_string();
    let closes = at(8).timestamp();
    let every_day = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let object: GpuInstance = support::object(
        "office-hours",
        serde_json::json!({
            "region": "us-east-1", "gpuType": "H100-80G", "osImage": "ubuntu-22.04-cuda-12",
            "schedule": {"timeZone": zone, "windows": [
                {"days": every_day, "from": clock(-60), "to": clock(8)}
            ]},
        }),
    );
    support::create(&env, &object).await;
    let running = vm_status(&env, "office-hours", "RUNNING").await;
    let next = running
        .status
        .as_ref()
        .unwrap()
        .next_transition
        .clone()
        .unwrap()
        .0;
    assert_eq!(next, closes, "{zone} {}", clock(8));

    let stopped = vm_status(&env, "office-hours", "STOPPED").await;
    stopped_within_a_second_of(&stops, closes);
    // Next: the window opens again tomorrow.
    let next = stopped
        .status
        .as_ref()
        .unwrap()
        .next_transition
        .clone()
        .unwrap()
        .0;
    assert!(
        next > Timestamp::now() + SignedDuration::from_hours(23),
        "{next}"
    );
}

/// What only the operator can tell of a schedule (its time zone exists, its windows do not
/// overlap) is told before any machine is created, whatever `powerState` says: a machine
/// created off would run once it is set to Running, under a schedule nobody can read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_the_operator_cannot_read_creates_no_machine() {
    let env = Env::start().await;
    for (name, schedule, field) in [
        (
            "mars-time",
            serde_json::json!({"timeZone": "Mars/Olympus_Mons", "windows": [
                {"days": ["Mon"], "from": "08:00", "to": "20:00"}]}),
            "spec.schedule.timeZone",
        ),
        (
            "double-booked",
            serde_json::json!({"timeZone": "UTC", "windows": [
                {"days": ["Mon", "Tue"], "from": "08:00", "to": "12:00"},
                {"days": ["Tue"], "from": "11:00", "to": "13:00"}]}),
            "spec.schedule.windows[1] overlaps",
        ),
    ] {
        for (power, tier) in [
            ("Running", "Advanced"),
            ("Stopped", "Advanced"),
            ("Hibernated", "Legacy"),
        ] {
            let name = format!("{name}-{}", power.to_lowercase());
            let object: GpuInstance = support::object(
                &name,
                serde_json::json!({
                    "region": "us-east-1", "gpuType": "H100-80G",
                    "osImage": "ubuntu-22.04-cuda-12", "tier": tier, "powerState": power,
                    "schedule": schedule,
                }),
            );
            support::create(&env, &object).await;
            let stalled =
                support::condition::<GpuInstance>(&env, &name, "Stalled", "True", "InvalidSpec")
                    .await;
            let message = support::ready_message(&stalled);
            assert!(message.contains(field), "{name}: {message}");
        }
    }
    assert_eq!(env.calls("CreateInstance"), 0);
}

/// An expiry that deletes the object does so whatever became of the resource: one deleted
/// outside the operator (the object Stalled, ExternalDeleted) still ends its object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_deletes_the_object_of_a_resource_deleted_outside() {
    let env = Env::start().await;
    support::create(&env, &expiring_volume("gone-early", "8s")).await;
    let id = support::ready_id::<Volume>(&env, "gone-early").await;
    support::cloud_client(&env)
        .delete_volume(&id)
        .await
        .unwrap();
    support::condition::<Volume>(&env, "gone-early", "Stalled", "True", "ExternalDeleted").await;
    support::gone::<Volume>(&env, "gone-early").await;
}
