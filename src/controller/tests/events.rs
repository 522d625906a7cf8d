#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The operator's event publisher against the API server: repeats become a series on the
//! first event, what it remembers for that is bounded, and client-go's spam filter holds back
//! a flood about one object; and the events of an instance's whole life.

use crate::support::*;
use gpucloud_controller::runtime::events::{Event, EventPublisher, EventType};
use gpucloud_simulator::SimulatorConfig;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, DeleteParams, ListParams};

fn regarding(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("gpucloud.io/v1alpha1".into()),
        kind: Some("GpuInstance".into()),
        name: Some(name.into()),
        namespace: Some(NAMESPACE.into()),
        uid: Some(format!("uid-{name}")),
        ..ObjectReference::default()
    }
}

fn event(reason: &str) -> Event {
    Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(format!("note for {reason}")),
        action: "Reconcile".into(),
        secondary: None,
    }
}

/// Every event in the test namespace.
async fn all_events(env: &Env) -> Vec<KubeEvent> {
    let events: Api<KubeEvent> = Api::namespaced(env.client.clone(), NAMESPACE);
    events.list(&ListParams::default()).await.unwrap().items
}

/// (regarding name, reason, series count) of every event, sorted.
async fn sent(env: &Env) -> Vec<(String, String, i32)> {
    let mut sent: Vec<_> = all_events(env)
        .await
        .into_iter()
        .map(|e| {
            (
                e.regarding.and_then(|r| r.name).unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.series.map_or(1, |s| s.count),
            )
        })
        .collect();
    sent.sort();
    sent
}

async fn send(publisher: &EventPublisher, reason: &str, name: &str) {
    publisher
        .publish(&event(reason), &regarding(name))
        .await
        .unwrap();
}

fn expected(events: &[(&str, &str, i32)]) -> Vec<(String, String, i32)> {
    events
        .iter()
        .map(|(name, reason, count)| (name.to_string(), reason.to_string(), *count))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_becomes_a_series_on_the_first() {
    let env = Env::without_operator(SimulatorConfig::default()).await;
    let publisher = EventPublisher::new(env.client.clone(), reporter());
    for _ in 0..3 {
        send(&publisher, "Created", "a").await;
    }
    send(&publisher, "Ready", "a").await;
    send(&publisher, "Created", "b").await;
    assert_eq!(
        sent(&env).await,
        expected(&[("a", "Created", 3), ("a", "Ready", 1), ("b", "Created", 1)])
    );
    assert_eq!(publisher.remembered(), 3);

    // The first event is gone (expired, deleted): a repeat starts a new one.
    let events: Api<KubeEvent> = Api::namespaced(env.client.clone(), NAMESPACE);
    for e in events.list(&ListParams::default()).await.unwrap().items {
        // Which controller, and which of its replicas, wrote it.
        assert_eq!(e.reporting_controller.as_deref(), Some("gpucloud-operator"));
        assert_eq!(e.reporting_instance.as_deref(), Some("test-replica"));
        if e.reason.as_deref() == Some("Ready") {
            let name = e.metadata.name.unwrap();
            events
                .delete(&name, &DeleteParams::default())
                .await
                .unwrap();
        }
    }
    send(&publisher, "Ready", "a").await;
    assert_eq!(
        sent(&env).await,
        expected(&[("a", "Created", 3), ("a", "Ready", 1), ("b", "Created", 1)])
    );
}

/// A repeat folds into a series only while the object is at the version the first event
/// named (client-go's key holds the whole reference): a state change that moved the object to
/// a new version starts a new event, so `kubectl describe` never shows the first change's
/// message counted for a later one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_at_a_new_object_version_is_a_new_event() {
    let env = Env::without_operator(SimulatorConfig::default()).await;
    let publisher = EventPublisher::new(env.client.clone(), reporter());
    let at = |version: &str, note: &str| {
        let mut regarding = regarding("a");
        regarding.resource_version = Some(version.into());
        let mut event = event("StateChanged");
        event.note = Some(note.into());
        (event, regarding)
    };
    for (version, note) in [
        ("1", "is now STOPPING"),
        ("1", "is now STOPPING"),
        ("2", "is now RUNNING"),
    ] {
        let (event, regarding) = at(version, note);
        publisher.publish(&event, &regarding).await.unwrap();
    }
    let mut notes: Vec<(String, i32)> = all_events(&env)
        .await
        .into_iter()
        .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
        .collect();
    notes.sort();
    assert_eq!(
        notes,
        vec![
            ("is now RUNNING".to_string(), 1),
            ("is now STOPPING".to_string(), 2)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_past_the_limit_are_sent_but_not_remembered() {
    let env = Env::without_operator(SimulatorConfig::default()).await;
    let publisher = EventPublisher::with_limit(env.client.clone(), reporter(), 2);
    for name in ["a", "b", "c"] {
        send(&publisher, "Created", name).await;
    }
    assert_eq!(publisher.remembered(), 2);
    // A remembered one grows its series; the forgotten one is sent again as a new event.
    for name in ["a", "c"] {
        send(&publisher, "Created", name).await;
    }
    assert_eq!(
        sent(&env).await,
        expected(&[
            ("a", "Created", 2),
            ("b", "Created", 1),
            ("c", "Created", 1),
            ("c", "Created", 1),
        ])
    );
    assert_eq!(publisher.remembered(), 2);
}

/// `send` returns before the API server answers; an object's queued events keep their order,
/// so its repeats still fold into one series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_events_arrive_in_order_and_repeats_fold_into_a_series() {
    let env = Env::without_operator(SimulatorConfig::default()).await;
    let publisher = EventPublisher::new(env.client.clone(), reporter());
    for _ in 0..5 {
        publisher.send(event("Created"), regarding("a"));
    }
    // Later versions of the object: still its lane, so still in order.
    for (reason, version) in [("Ready", "2"), ("Stopped", "3"), ("Started", "4")] {
        let mut at_version = regarding("a");
        at_version.resource_version = Some(version.into());
        publisher.send(event(reason), at_version);
    }
    for name in ["b", "c", "d"] {
        publisher.send(event("Created"), regarding(name));
    }
    let wanted = expected(&[
        ("a", "Created", 5),
        ("a", "Ready", 1),
        ("a", "Started", 1),
        ("a", "Stopped", 1),
        ("b", "Created", 1),
        ("c", "Created", 1),
        ("d", "Created", 1),
    ]);
    eventually(10, "the queued events", || async {
        let now = sent(&env).await;
        (now == wanted).then_some(())
    })
    .await;
    let mut of_a: Vec<_> = all_events(&env)
        .await
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("a"))
        .collect();
    of_a.sort_by_key(|e| e.event_time.clone().map(|t| t.0));
    let order: Vec<_> = of_a.iter().filter_map(|e| e.reason.clone()).collect();
    assert_eq!(
        order,
        ["Created", "Ready", "Stopped", "Started"],
        "a's events out of order"
    );
}

/// (reason, type, series count) of the events about `name`, oldest first.
async fn life_of(env: &Env, name: &str) -> Vec<(String, String, i32)> {
    let mut events: Vec<KubeEvent> = all_events(env)
        .await
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    events.sort_by_key(|e| e.event_time.clone().map(|t| t.0));
    events
        .into_iter()
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.series.map_or(1, |s| s.count),
            )
        })
        .collect()
}

/// The environment with the operator on the production transition interval (2 s) and the
/// cloud's transitions taking `delays`.
async fn with_transitions_of(delays: gpucloud_simulator::Delays) -> Env {
    let mut env = Env::without_operator(SimulatorConfig {
        delays,
        ..SimulatorConfig::default()
    })
    .await;
    let mut config = test_config(&env.simulator);
    config.reconcile.transition_requeue = std::time::Duration::from_secs(2);
    env.start_operator(config);
    env
}

/// Creates a plain machine, waits for it to be Ready, then deletes it; the events it carried
/// when Ready and when gone.
async fn life_of_a_plain_machine(
    env: &Env,
) -> (Vec<(String, String, i32)>, Vec<(String, String, i32)>) {
    let vm: gpucloud_api::GpuInstance = object(
        "plain",
        serde_json::json!({
            "region": "us-east-1",
            "gpuType": "H100-80G",
            "osImage": "ubuntu-22.04-cuda-12",
        }),
    );
    create(env, &vm).await;
    let _: gpucloud_api::GpuInstance = ready(env, "plain").await;
    // Published from a queue: give the last one time to land.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let when_ready = life_of(env, "plain").await;
    delete_and_wait::<gpucloud_api::GpuInstance>(env, "plain").await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    (when_ready, life_of(env, "plain").await)
}

fn normal(reason: &str) -> (String, String, i32) {
    (reason.to_string(), "Normal".to_string(), 1)
}

/// A machine that is Ready at the first list after its create, and gone at the first list
/// after its delete, carries two events, both Normal: `Created` (which tells it is Ready) and
/// `Deleted`. The states it passed through within one transition interval are not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_ready_and_gone_at_once_carries_created_then_deleted() {
    let env = with_transitions_of(gpucloud_simulator::Delays::instant()).await;
    let (when_ready, when_gone) = life_of_a_plain_machine(&env).await;
    assert_eq!(when_ready, vec![normal("Created")]);
    assert_eq!(when_gone, vec![normal("Created"), normal("Deleted")]);
    let created = all_events(&env)
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("Created"))
        .and_then(|e| e.note)
        .unwrap_or_default();
    assert!(
        created.contains("Available"),
        "the Created event tells it is Ready: {created}"
    );
}

/// A machine whose create and delete each last longer than a transition interval carries one
/// event per transition a person waits through, in order, all Normal: created, Ready
/// (`Available`), deleting, deleted. Still no event for each state it passed through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_slow_to_boot_and_to_go_carries_one_event_per_transition() {
    let env = with_transitions_of(gpucloud_simulator::Delays {
        create: std::time::Duration::from_secs(4),
        power_transition: std::time::Duration::from_secs(4),
        ..gpucloud_simulator::Delays::fast()
    })
    .await;
    let (when_ready, when_gone) = life_of_a_plain_machine(&env).await;
    assert_eq!(when_ready, vec![normal("Created"), normal("Available")]);
    assert_eq!(
        when_gone,
        vec![
            normal("Created"),
            normal("Available"),
            normal("Deleting"),
            normal("Deleted"),
        ]
    );
}

/// client-go's spam filter: an object gets 25 events at once from one publisher; past that,
/// its events are dropped (the next one after five minutes), and other objects are not held
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_gets_a_burst_of_25_events_then_no_more_for_now() {
    let env = Env::without_operator(SimulatorConfig::default()).await;
    let publisher = EventPublisher::new(env.client.clone(), reporter());
    for n in 0..30 {
        send(&publisher, &format!("Reason{n}"), "noisy").await;
    }
    send(&publisher, "Created", "quiet").await;
    let sent = sent(&env).await;
    assert_eq!(sent.iter().filter(|(name, ..)| name == "noisy").count(), 25);
    assert!(sent.contains(&("quiet".to_string(), "Created".to_string(), 1)));
}
