#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Lifetimes and power schedules on a scaled clock: the operator and the simulator share one
//! clock running thousands of clock seconds per real second (`Env::on_scaled_clock`), so a
//! week's schedule across the end of summer time, or a lifetime of hours, runs in seconds.
//!
//! Tolerances. A timer ends no earlier than its moment (`Clock::real_duration` rounds up), so
//! no call may come before it. How late one comes is real time times the scale: tokio's timers
//! run on a millisecond wheel, kube-runtime's queue adds its own turn, and the reconcile reads
//! the object's account, the cloud's latest list and the Budgets before the call, a few
//! milliseconds of a debug build on a shared two-core machine, where one late wake-up of a
//! busy suite can be ten of them. A late bound of `LATE_REAL` real time is allowed for that,
//! which is `LATE_REAL × scale` of clock time: at 10,800 clock seconds per real second, 50 ms
//! is nine clock minutes, well under the hour the end of summer time moves an edge by, and at
//! 3,600 three clock minutes of a two-hour lifetime. How close a timer comes to its moment is
//! checked at 25x, within one clock second, by the last test. Calls are timed when sent (the
//! clock when the answer came, less the call's own duration), as `lifetimes.rs` times them.

use crate::support::{self, Env, eventually, test_config};
use gpucloud_api::*;
use gpucloud_cloud::{CallObserver, CallOutcome, Operation};
use gpucloud_controller::runtime::clock::Clock;
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How late, in real time, a call may come after its moment (see the module's docs).
const LATE_REAL: Duration = Duration::from_millis(50);

/// The power and delete calls of the operator, each with the clock time it was sent at.
struct PowerCalls {
    clock: Clock,
    calls: Mutex<Vec<(&'static str, Timestamp)>>,
}

impl PowerCalls {
    fn new(clock: Clock) -> Arc<Self> {
        Arc::new(PowerCalls {
            clock,
            calls: Mutex::new(Vec::new()),
        })
    }

    fn calls(&self) -> Vec<(&'static str, Timestamp)> {
        self.calls.lock().unwrap().clone()
    }
}

impl CallObserver for PowerCalls {
    fn on_call(&self, operation: Operation, outcome: &CallOutcome, elapsed: Duration) {
        let name = operation.name();
        if !matches!(
            name,
            "StartInstance" | "StopInstance" | "HibernateInstance" | "DeleteInstance"
        ) {
            return;
        }
        assert!(outcome.is_success(), "{name}: {outcome:?}");
        let call = SignedDuration::try_from(elapsed.mul_f64(self.clock.scale())).unwrap();
        let sent = self.clock.now() - call;
        self.calls.lock().unwrap().push((name, sent));
    }
}

/// The operator on `clock`, its power calls timed, `resync` apart.
fn start_operator(env: &mut Env, clock: Clock, calls: &Arc<PowerCalls>, resync: Duration) {
    let mut config = test_config(&env.simulator);
    config.cloud.observer = Some(calls.clone());
    config.reconcile.clock = clock;
    config.reconcile.observe.resync = resync;
    env.start_operator(config);
}

/// The latest `name`, once its machine reports `wanted` and the object is Ready.
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

/// Sleeps until `clock` reads `at`.
async fn sleep_until(clock: &Clock, at: Timestamp) {
    tokio::time::sleep(clock.until(at)).await;
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// Asserts `sent` is at `moment` or after it, by no more than `late` (clock time).
fn on_time(what: &str, sent: Timestamp, moment: Timestamp, late: SignedDuration) {
    let after = sent.duration_since(moment);
    assert!(
        after >= SignedDuration::ZERO && after <= late,
        "{what} sent at {sent}, {after} after {moment} (allowed: {late})"
    );
}

/// Office hours in Berlin, Monday to Friday 08:00-20:00, from Friday 23 October 2026 early
/// morning to Tuesday 27 October: summer time ends on Sunday 25 October, so the windows open
/// at 06:00Z and close at 18:00Z on Friday, and at 07:00Z and 19:00Z from Monday on. The
/// machine is started and stopped at each edge, and never over the weekend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn office_hours_in_berlin_follow_the_end_of_summer_time() {
    const SCALE: f64 = 10_800.0;
    let late = SignedDuration::try_from(LATE_REAL.mul_f64(SCALE)).unwrap();
    let (mut env, clock) = Env::on_scaled_clock(at("2026-10-23T00:00:00Z"), SCALE).await;
    let calls = PowerCalls::new(clock);
    start_operator(&mut env, clock, &calls, Duration::from_secs(2));
    let weekdays = ["Mon", "Tue", "Wed", "Thu", "Fri"];
    let object: GpuInstance = support::object(
        "office-hours",
        serde_json::json!({
            "region": "us-east-1", "gpuType": "H100-80G", "osImage": "ubuntu-22.04-cuda-12",
            "schedule": {"timeZone": "Europe/Berlin", "windows": [
                {"days": weekdays, "from": "08:00", "to": "20:00"}
            ]},
        }),
    );
    support::create(&env, &object).await;
    // Created outside its windows: created running, then stopped at once.
    let stopped = vm_status(&env, "office-hours", "STOPPED").await;
    let first_edge = at("2026-10-23T06:00:00Z");
    assert!(
        clock.now() < first_edge,
        "the set-up ran past Friday's first window ({}): the scale is too high for this machine",
        clock.now()
    );
    let next = stopped.status.as_ref().unwrap().next_transition.clone();
    assert_eq!(next.map(|t| t.0), Some(first_edge));
    let created = calls.calls();
    assert_eq!(
        created.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        ["StopInstance"],
        "{created:?}"
    );

    let edges = [
        ("StartInstance", "2026-10-23T06:00:00Z"),
        ("StopInstance", "2026-10-23T18:00:00Z"),
        ("StartInstance", "2026-10-26T07:00:00Z"),
        ("StopInstance", "2026-10-26T19:00:00Z"),
        ("StartInstance", "2026-10-27T07:00:00Z"),
    ];
    sleep_until(&clock, at("2026-10-27T07:10:00Z")).await;
    let running = vm_status(&env, "office-hours", "RUNNING").await;
    let next = running.status.as_ref().unwrap().next_transition.clone();
    assert_eq!(next.map(|t| t.0), Some(at("2026-10-27T19:00:00Z")));

    let berlin = TimeZone::get("Europe/Berlin").unwrap();
    let seen = calls.calls()[created.len()..].to_vec();
    let lateness: Vec<String> = seen
        .iter()
        .zip(&edges)
        .map(|((_, sent), (_, edge))| sent.duration_since(at(edge)).to_string())
        .collect();
    eprintln!("power calls after their edges: {lateness:?}");
    assert_eq!(
        seen.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        edges.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        "{seen:?}"
    );
    for ((name, sent), (_, edge)) in seen.iter().zip(&edges) {
        let local = sent.to_zoned(berlin.clone());
        assert!(
            !matches!(
                local.weekday(),
                k8s_openapi::jiff::civil::Weekday::Saturday
                    | k8s_openapi::jiff::civil::Weekday::Sunday
            ),
            "{name} on a weekend: {local}"
        );
        on_time(name, *sent, at(edge), late);
    }
}

/// A two-hour lifetime at 3,600 clock seconds per real second: the machine is stopped at its
/// expiry, timed on the clock the operator and the cloud share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifetime_of_hours_ends_on_time() {
    const SCALE: f64 = 3_600.0;
    let late = SignedDuration::try_from(LATE_REAL.mul_f64(SCALE)).unwrap();
    // `ttl` counts from the object's creationTimestamp, the API server's wall clock: the
    // clocks start at the real now.
    let (mut env, clock) = Env::on_scaled_clock(Timestamp::now(), SCALE).await;
    let calls = PowerCalls::new(clock);
    start_operator(&mut env, clock, &calls, Duration::from_secs(2));
    support::create(&env, &expiring("two-hours")).await;
    let running = vm_status(&env, "two-hours", "RUNNING").await;
    let expiry = running.cloud_status().expires_at.unwrap().0;
    let created = running.metadata.creation_timestamp.unwrap().0;
    assert_eq!(expiry, created + SignedDuration::from_hours(2));
    assert!(
        clock.now() < expiry,
        "expired before it ran: {}",
        clock.now()
    );

    vm_status(&env, "two-hours", "STOPPED").await;
    let seen = calls.calls();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (name, sent) = seen[0];
    assert_eq!(name, "StopInstance");
    eprintln!("stopped {} after its expiry", sent.duration_since(expiry));
    on_time(name, sent, expiry, late);
}

/// The same lifetime with the operator stopped across its expiry: the operator started after
/// it stops the machine at its start, not at the first recheck of a settled object (one resync
/// interval, made long here so the two cannot be confused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifetime_that_ended_while_the_operator_was_down_ends_at_its_start() {
    const SCALE: f64 = 3_600.0;
    let resync = Duration::from_secs(30);
    let (mut env, clock) = Env::on_scaled_clock(Timestamp::now(), SCALE).await;
    let calls = PowerCalls::new(clock);
    start_operator(&mut env, clock, &calls, resync);
    support::create(&env, &expiring("while-down")).await;
    let running = vm_status(&env, "while-down", "RUNNING").await;
    let expiry = running.cloud_status().expires_at.unwrap().0;
    env.kill_operator().await;
    assert!(clock.now() < expiry, "expired before the operator stopped");

    sleep_until(&clock, expiry + SignedDuration::from_mins(10)).await;
    assert!(calls.calls().is_empty());
    let restarted = clock.now();
    start_operator(&mut env, clock, &calls, resync);
    vm_status(&env, "while-down", "STOPPED").await;
    let seen = calls.calls();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (name, sent) = seen[0];
    assert_eq!(name, "StopInstance");
    // Its start: the lists of the API server and the cloud, then the one reconcile. Well
    // within the resync interval, when a re-adopted object would first be looked at.
    let start_up = SignedDuration::try_from((resync / 6).mul_f64(SCALE)).unwrap();
    eprintln!(
        "stopped {} after the restart",
        sent.duration_since(restarted)
    );
    on_time(name, sent, restarted, start_up);
}

/// Each end of a lifetime at 25 clock seconds per real second, where one clock second is
/// 40 ms of real time, room for the reads and the API server's writes of a debug build before
/// the call: three machines stopped, hibernated and deleted at their expiry by the operator
/// that created them (Legacy tier machines: the cloud hibernates no other), then three more by
/// an operator started after them (their timers derived from the objects), each call sent
/// within one clock second of its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_end_of_a_lifetime_comes_within_a_clock_second_before_and_after_a_restart() {
    const SCALE: f64 = 25.0;
    let second = SignedDuration::from_secs(1);
    let (mut env, clock) = Env::on_scaled_clock(Timestamp::now(), SCALE).await;
    let calls = PowerCalls::new(clock);
    start_operator(&mut env, clock, &calls, Duration::from_secs(2));
    let ends = [
        ("Stop", "STOPPED"),
        ("Hibernate", "HIBERNATED"),
        ("Delete", ""),
    ];
    let mut expiries = Vec::new();
    for (ttl, set) in [("5m", "first"), ("10m", "second")] {
        for (on_expiry, _) in ends {
            let name = format!("{set}-{}", on_expiry.to_lowercase());
            let lifetime = serde_json::json!({"ttl": ttl, "onExpiry": on_expiry});
            support::create(&env, &with_lifetime(&name, lifetime)).await;
        }
    }
    for set in ["first", "second"] {
        let mut set_expiries = Vec::new();
        for (on_expiry, _) in ends {
            let name = format!("{set}-{}", on_expiry.to_lowercase());
            let running = vm_status(&env, &name, "RUNNING").await;
            set_expiries.push(running.cloud_status().expires_at.unwrap().0);
        }
        expiries.push(set_expiries);
    }
    assert!(
        clock.now() < expiries[0][0],
        "the set-up ran past the first expiry ({}): the scale is too high for this machine",
        clock.now()
    );

    ended(&env, "first", &ends).await;
    env.kill_operator().await;
    start_operator(&mut env, clock, &calls, Duration::from_secs(2));
    assert!(
        clock.now() < expiries[1][0],
        "the restart ran past the second expiry ({})",
        clock.now()
    );
    ended(&env, "second", &ends).await;

    // Each set's three calls come before the next set's, in any order among themselves.
    let seen = calls.calls();
    assert_eq!(seen.len(), 6, "{seen:?}");
    let wanted = ["StopInstance", "HibernateInstance", "DeleteInstance"];
    let mut lateness = Vec::new();
    for (set, set_calls) in seen.chunks(3).enumerate() {
        let mut names: Vec<&str> = set_calls.iter().map(|(name, _)| *name).collect();
        names.sort();
        let mut expected = wanted.to_vec();
        expected.sort();
        assert_eq!(names, expected, "{seen:?}");
        for (name, sent) in set_calls {
            let end = wanted.iter().position(|w| w == name).unwrap();
            let expiry = expiries[set][end];
            lateness.push((*name, *sent, expiry));
        }
    }
    let report: Vec<String> = lateness
        .iter()
        .map(|(name, sent, expiry)| format!("{name} {}", sent.duration_since(*expiry)))
        .collect();
    eprintln!("calls after their expiries: {report:?}");
    for (name, sent, expiry) in lateness {
        on_time(name, sent, expiry, second);
    }
}

/// Waits until each machine of `set` has ended as its `onExpiry` asks: its machine in the
/// vm status named next to it, or (named "") its object gone.
async fn ended(env: &Env, set: &str, ends: &[(&str, &str)]) {
    for (on_expiry, vm) in ends {
        let name = format!("{set}-{}", on_expiry.to_lowercase());
        match *vm {
            "" => support::gone::<GpuInstance>(env, &name).await,
            vm => drop(vm_status(env, &name, vm).await),
        }
    }
}

/// A machine with a two-hour lifetime that stops it.
fn expiring(name: &str) -> GpuInstance {
    with_lifetime(name, serde_json::json!({"ttl": "2h", "onExpiry": "Stop"}))
}

fn with_lifetime(name: &str, lifetime: serde_json::Value) -> GpuInstance {
    support::object(
        name,
        serde_json::json!({
            "region": "us-east-1", "gpuType": "H100-80G", "osImage": "ubuntu-22.04-cuda-12",
            // The Legacy tier, the one whose machines can be hibernated.
            "tier": "Legacy", "lifetime": lifetime,
        }),
    )
}
