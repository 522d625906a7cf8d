#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Budgets: concurrent creates cannot together pass a namespace's `maxHourlyRate`, a refused
//! create makes no cloud call and is looked at again when the Budget is raised, a selector
//! counts only what it selects, a Budget in another currency than the account's refuses, and
//! spend is counted from the cloud's billing (in a Budget and in `gpucloud_spend`).

use crate::support::{self, Env, condition, eventually};
use gpucloud_api::*;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

/// The simulator's price of one L40S GPU per hour.
const L40S: f64 = 1.10;

fn machine(name: &str, labels: &[(&str, &str)]) -> GpuInstance {
    let mut machine: GpuInstance = support::object(
        name,
        serde_json::json!({"region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
                           "osImage": "ubuntu-22.04-cuda-12"}),
    );
    machine.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    machine
}

fn budget(name: &str, spec: serde_json::Value) -> Budget {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "Budget",
        "metadata": {"name": name, "namespace": support::NAMESPACE},
        "spec": spec,
    }))
    .unwrap()
}

fn budgets(env: &Env) -> Api<Budget> {
    Api::namespaced(env.client.clone(), support::NAMESPACE)
}

fn machines_in_cloud(env: &Env) -> usize {
    env.simulator.state().instances.len()
}

/// Waits until the Budget's status counts `objects` at `rate` per hour, with no reservation
/// left, and returns it.
async fn counted(env: &Env, name: &str, objects: i32, rate: f64) -> Budget {
    let api = budgets(env);
    eventually(
        60,
        &format!("Budget {name} counting {objects} at {rate}/h"),
        || {
            let api = api.clone();
            async move {
                let budget = api.get(name).await.ok()?;
                let status = budget.status.clone()?;
                (status.counted == Some(objects)
                    && status.reservations.is_empty()
                    && status.hourly_rate.is_some_and(|r| (r - rate).abs() < 1e-6))
                .then_some(budget)
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_concurrent_creates_make_two_machines_under_a_budget_for_two() {
    let mut env = Env::start().await;
    budgets(&env)
        .create(
            &PostParams::default(),
            &budget("team", serde_json::json!({"maxHourlyRate": 2.5 * L40S})),
        )
        .await
        .unwrap();
    counted(&env, "team", 0, 0.0).await;

    let api = env.api::<GpuInstance>();
    let creates = ["a", "b", "c"].map(|name| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &machine(name, &[]))
                .await
                .unwrap()
        }
    });
    futures::future::join_all(creates).await;

    // Two become Ready, one is refused before any cloud call of its own.
    let refused = eventually(60, "one machine refused by the Budget", || {
        let api = api.clone();
        async move {
            let mut refused = Vec::new();
            for name in ["a", "b", "c"] {
                let object = api.get(name).await.ok()?;
                let ready = object.cloud_status().condition("Ready").cloned()?;
                if ready.reason == "BudgetExceeded" {
                    refused.push(object);
                }
            }
            (refused.len() == 1).then(|| refused.remove(0))
        }
    })
    .await;
    let refused_name = refused.metadata.name.clone().unwrap();
    for name in ["a", "b", "c"].into_iter().filter(|n| *n != refused_name) {
        support::ready::<GpuInstance>(&env, name).await;
    }
    assert_eq!(machines_in_cloud(&env), 2);
    assert!(refused.cloud_status().pending_create.is_none());
    assert!(refused.cloud_status().external_id.is_none());
    let message = support::ready_message(&refused);
    assert!(message.contains("Budget team"), "{message}");
    assert!(
        refused.cloud_status().condition("Stalled").is_some(),
        "{:?}",
        refused.cloud_status().conditions
    );
    let team = counted(&env, "team", 2, 2.0 * L40S).await;
    let status = team.status.unwrap();
    assert!((status.remaining.unwrap() - 0.5 * L40S).abs() < 1e-6);
    assert_eq!(status.currency.as_deref(), Some("USD"));
    let exceeded = status.conditions.iter().find(|c| c.type_ == "Exceeded");
    assert_eq!(exceeded.map(|c| c.status.as_str()), Some("False"));

    // Still two a while later: the refusal holds.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(machines_in_cloud(&env), 2);

    // Raised: the refused machine is looked at again and created.
    set_limit(&budgets(&env), "team", 3.0 * L40S).await;
    support::ready_within::<GpuInstance>(&env, &refused_name, 30).await;
    assert_eq!(machines_in_cloud(&env), 3);
    counted(&env, "team", 3, 3.0 * L40S).await;
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_counts_only_its_team_and_another_currency_refuses() {
    let mut env = Env::start().await;
    let api = budgets(&env);
    api.create(
        &PostParams::default(),
        &budget(
            "vision",
            serde_json::json!({"maxHourlyRate": L40S,
                               "selector": {"matchLabels": {"team": "vision"}}}),
        ),
    )
    .await
    .unwrap();
    support::create(&env, &machine("v1", &[("team", "vision")])).await;
    support::ready::<GpuInstance>(&env, "v1").await;
    // Another team's machine is not counted, and not refused.
    support::create(&env, &machine("n1", &[("team", "nlp")])).await;
    support::ready::<GpuInstance>(&env, "n1").await;
    counted(&env, "vision", 1, L40S).await;
    // The vision team's second machine would pass its Budget.
    support::create(&env, &machine("v2", &[("team", "vision")])).await;
    support::condition::<GpuInstance>(&env, "v2", "Ready", "False", "BudgetExceeded").await;
    assert_eq!(machines_in_cloud(&env), 2);

    // A Budget counting in euros, when the account bills in dollars: refused, and said so.
    api.create(
        &PostParams::default(),
        &budget(
            "euros",
            serde_json::json!({"maxHourlyRate": 100.0, "currency": "EUR"}),
        ),
    )
    .await
    .unwrap();
    eventually(30, "Budget euros Stalled with CurrencyMismatch", || {
        let api = api.clone();
        async move {
            let budget = api.get("euros").await.ok()?;
            let conditions = budget.status?.conditions;
            conditions
                .iter()
                .any(|c| c.type_ == "Stalled" && c.reason == "CurrencyMismatch")
                .then_some(())
        }
    })
    .await;
    support::create(&env, &machine("n2", &[("team", "nlp")])).await;
    let refused: GpuInstance =
        support::condition(&env, "n2", "Ready", "False", "CurrencyMismatch").await;
    let message = support::ready_message(&refused);
    assert!(message.contains("set spec.currency to USD"), "{message}");
    assert_eq!(machines_in_cloud(&env), 2);
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_refused_at_admission_with_the_field_named() {
    let env = Env::without_operator(Default::default()).await;
    let resource = kube::api::ApiResource::erase::<Budget>(&());
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(env.client.clone(), support::NAMESPACE, &resource);
    for (spec, field) in [
        (
            serde_json::json!({"maxHourlyRate": -1.0}),
            "spec.maxHourlyRate",
        ),
        (
            serde_json::json!({"maxHourlyRate": 1.0, "currency": "usd"}),
            "spec.currency",
        ),
        (
            serde_json::json!({"maxHourlyRate": 1.0, "currency": "DOLLARS"}),
            "spec.currency",
        ),
        (serde_json::json!({}), "spec.maxHourlyRate"),
        (
            serde_json::json!({"maxHourlyRate": 1.0, "maxSpend": 10.0}),
            "maxSpend and period go together",
        ),
        (
            serde_json::json!({"maxHourlyRate": 1.0, "maxSpend": 10.0,
                               "period": {"type": "Monthly", "dayOfMonth": 0}}),
            "spec.period.dayOfMonth",
        ),
        (
            serde_json::json!({"maxHourlyRate": 1.0, "maxSpend": 10.0,
                               "period": {"type": "Monthly", "dayOfWeek": "Mon"}}),
            "spec.period.dayOfWeek",
        ),
        (
            serde_json::json!({"maxHourlyRate": 1.0, "maxSpend": -5.0,
                               "period": {"type": "Weekly"}}),
            "spec.maxSpend",
        ),
        (
            serde_json::json!({"maxHourlyRate": 1.0, "onExceeded": "Destroy"}),
            "spec.onExceeded",
        ),
    ] {
        let object: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "Budget",
            "metadata": {"name": "bad"}, "spec": spec,
        }))
        .unwrap();
        let error = api
            .create(&PostParams::default(), &object)
            .await
            .map(|_| ())
            .unwrap_err();
        let message = error.to_string();
        assert!(message.contains(field), "{spec}: {message}");
    }
}

/// Waits until the cloud reports the machine `name` records in `vm_status`.
async fn power_is(env: &Env, name: &str, vm_status: &str) -> GpuInstance {
    let api = env.api::<GpuInstance>();
    eventually(60, &format!("{name} {vm_status}"), || {
        let api = api.clone();
        async move {
            let object = api.get(name).await.ok()?;
            let id = object.cloud_status().external_id?;
            let state = env_state(env, &id).await?;
            (state == vm_status).then_some(object)
        }
    })
    .await
}

/// The machine's power status as the cloud answers a read by id (the simulator's own state
/// completes a transition only when something reads it).
async fn env_state(env: &Env, id: &str) -> Option<String> {
    let machine = support::cloud_client(env).get_instance(id).await.ok()?;
    Some(machine.vm_status.as_str().to_string())
}

/// A Budget `team` for three L40S machines (`onExceeded` as given), and three machines
/// created a second apart, the newest with deletion protection, counted by it.
async fn three_machines_under(env: &Env, on_exceeded: &str) -> Api<Budget> {
    let api = budgets(env);
    api.create(
        &PostParams::default(),
        &budget(
            "team",
            serde_json::json!({"maxHourlyRate": 3.0 * L40S, "onExceeded": on_exceeded}),
        ),
    )
    .await
    .unwrap();
    for name in ["oldest", "middle", "newest"] {
        let mut machine = machine(name, &[]);
        if name == "newest" {
            machine.metadata.annotations = Some(
                [(
                    gpucloud_api::deletion_protection::ANNOTATION.to_string(),
                    "true".to_string(),
                )]
                .into(),
            );
        }
        support::create(env, &machine).await;
        support::ready::<GpuInstance>(env, name).await;
        // Creation times a second apart: "newest" is an order, not a tie.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    counted(env, "team", 3, 3.0 * L40S).await;
    api
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_its_limit_a_budget_stops_the_newest_unprotected_machine_until_it_fits_again() {
    let mut env = Env::start().await;
    let api = three_machines_under(&env, "Stop").await;

    // Lowered: the newest machine is protected, so the next newest is stopped, and only it.
    set_limit(&api, "team", 2.5 * L40S).await;
    let middle = power_is(&env, "middle", "STOPPED").await;
    let machines = env.api::<GpuInstance>();
    eventually(30, "middle's Ready message naming the Budget", || {
        let machines = machines.clone();
        async move {
            let middle = machines.get("middle").await.ok()?;
            support::ready_message(&middle)
                .contains("kept stopped by Budget team")
                .then_some(())
        }
    })
    .await;
    // Off against its spec: not Ready.
    condition::<GpuInstance>(&env, "middle", "Ready", "False", "BudgetExceeded").await;
    // Within its limit only by keeping middle off: not Ready, and Stalled (kstatus), saying
    // what it keeps off.
    let team = budget_condition(&env, "team", "Stalled", "True", "BudgetExceeded").await;
    let ready = team.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "BudgetExceeded")
    );
    assert!(
        ready
            .message
            .contains("it keeps 1 machine off (stopped: middle)"),
        "{}",
        ready.message
    );
    let held: Vec<&str> = team.powered_off.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(held, ["middle"]);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        env_state(&env, &ready_id(&env, "oldest").await)
            .await
            .as_deref(),
        Some("RUNNING")
    );
    assert_eq!(
        env_state(&env, &ready_id(&env, "newest").await)
            .await
            .as_deref(),
        Some("RUNNING")
    );
    assert_eq!(
        env_state(&env, middle.cloud_status().external_id.as_deref().unwrap())
            .await
            .as_deref(),
        Some("STOPPED")
    );

    // Raised again: it fits, and starts.
    set_limit(&api, "team", 3.0 * L40S).await;
    power_is(&env, "middle", "RUNNING").await;
    let team = budget_condition(&env, "team", "Ready", "True", "WithinBudget").await;
    assert!(team.powered_off.is_empty(), "{:?}", team.powered_off);
    assert!(
        !team.conditions.iter().any(|c| c.type_ == "Stalled"),
        "{:?}",
        team.conditions
    );

    // Lowered again once the Budget counts middle running (a machine still starting is
    // counted at its stopped rate, and the next newest running one would be chosen), then
    // the Budget deleted: what it kept off starts again.
    counted(&env, "team", 3, 3.0 * L40S).await;
    set_limit(&api, "team", 2.5 * L40S).await;
    power_is(&env, "middle", "STOPPED").await;
    api.delete("team", &Default::default()).await.unwrap();
    power_is(&env, "middle", "RUNNING").await;
    env.stop_operator().await;
}

/// A machine that is off still bills a share of its running rate (a tenth while stopped): the
/// Budget counts it, shows it apart, and stops a second machine when the first one's tenth
/// still leaves it over its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_machine_counts_at_the_share_it_still_bills() {
    let mut env = Env::start().await;
    let api = budgets(&env);
    api.create(
        &PostParams::default(),
        &budget(
            "team",
            serde_json::json!({"maxHourlyRate": 3.0 * L40S, "onExceeded": "Stop"}),
        ),
    )
    .await
    .unwrap();
    for name in ["oldest", "middle", "newest"] {
        support::create(&env, &machine(name, &[])).await;
        support::ready::<GpuInstance>(&env, name).await;
        // Creation times a second apart: "newest" is an order, not a tie.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    counted(&env, "team", 3, 3.0 * L40S).await;

    // Room for 2.05 machines: with one stopped, 2.1 of them are still billed, so a second
    // one is stopped too.
    set_limit(&api, "team", 2.05 * L40S).await;
    power_is(&env, "newest", "STOPPED").await;
    power_is(&env, "middle", "STOPPED").await;
    let team = counted(&env, "team", 3, 1.2 * L40S).await;
    let status = team.status.unwrap();
    let off = status.off_hourly_rate.unwrap();
    let mut states = Vec::new();
    for name in ["oldest", "middle", "newest"] {
        let vm = env.api::<GpuInstance>().get(name).await.unwrap();
        let s = vm.status.unwrap();
        states.push((
            name,
            s.cloud.state.clone(),
            s.hourly_rate,
            s.vm_status.clone(),
        ));
    }
    assert!(
        (off - 0.2 * L40S).abs() < 1e-6,
        "{off} {status:?} {states:?}"
    );
    let held: Vec<&str> = status.powered_off.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(held, ["newest", "middle"]);
    assert_eq!(
        env_state(&env, &ready_id(&env, "oldest").await)
            .await
            .as_deref(),
        Some("RUNNING")
    );
    env.stop_operator().await;
}

/// Waits until the Budget `name` has the condition `type_` with `status` and `reason`, and
/// returns its status.
async fn budget_condition(
    env: &Env,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> BudgetStatus {
    let api = budgets(env);
    eventually(
        30,
        &format!("Budget {name} {type_}={status} ({reason})"),
        || {
            let api = api.clone();
            async move {
                let budget = api.get(name).await.ok()?.status?;
                budget
                    .conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.status == status && c.reason == reason)
                    .then_some(budget)
            }
        },
    )
    .await
}

/// A machine deleted under `deletionPolicy: Snapshot` while its Budget is full still gets its
/// final snapshot (counted, not refused: the machine, which costs far more, waits for it) and
/// goes. A Snapshot labelled as a final snapshot by hand, for a machine not being deleted, is
/// refused like any other create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_budget_never_refuses_the_final_snapshot_a_deletion_waits_for() {
    use gpucloud_controller::kinds::gpu_instance::final_snapshot::{
        FINAL_SNAPSHOT_OF_LABEL, FINAL_SNAPSHOT_OF_UID_ANNOTATION,
    };
    let env = Env::start().await;
    budgets(&env)
        .create(
            &PostParams::default(),
            &budget("team", serde_json::json!({"maxHourlyRate": L40S})),
        )
        .await
        .unwrap();
    let mut trainer = machine("trainer", &[]);
    trainer.spec.managed.deletion_policy = DeletionPolicy::Snapshot;
    support::create(&env, &trainer).await;
    let trainer: GpuInstance = support::ready(&env, "trainer").await;
    let id = trainer.cloud_status().external_id.unwrap();
    counted(&env, "team", 1, L40S).await;

    let mut forged: Snapshot = support::object(
        "trainer-final",
        serde_json::json!({"instanceRef": {"name": "trainer"}}),
    );
    forged.metadata.labels = Some([(FINAL_SNAPSHOT_OF_LABEL.into(), "trainer".into())].into());
    forged.metadata.annotations = Some(
        [(
            FINAL_SNAPSHOT_OF_UID_ANNOTATION.into(),
            trainer.metadata.uid.clone().unwrap(),
        )]
        .into(),
    );
    support::create(&env, &forged).await;
    support::condition::<Snapshot>(&env, "trainer-final", "Ready", "False", "BudgetExceeded").await;
    support::delete_and_wait::<Snapshot>(&env, "trainer-final").await;

    env.api::<GpuInstance>()
        .delete("trainer", &Default::default())
        .await
        .unwrap();
    support::gone::<GpuInstance>(&env, "trainer").await;
    let state = env.simulator.state();
    assert!(!state.instances.iter().any(|i| i.instance_id == id));
    assert!(
        state
            .snapshots
            .iter()
            .any(|s| s.instance_id == id
                && s.status == gpucloud_cloud::model::SnapshotStatus::Available),
        "{:?}",
        state.snapshots
    );
}

/// `onExceeded: Delete` deletes the newest machine it may until the rest fit, through the
/// object's own deletion and never one with deletion protection; `SnapshotThenDelete` deletes
/// the next after a final snapshot of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_its_limit_a_budget_deletes_the_newest_unprotected_machine_or_snapshots_it_first() {
    let mut env = Env::start().await;
    let api = three_machines_under(&env, "Delete").await;
    let middle = ready_id(&env, "middle").await;

    // Lowered: the newest machine is protected, so the next newest is deleted, and only it.
    set_limit(&api, "team", 2.5 * L40S).await;
    support::gone::<GpuInstance>(&env, "middle").await;
    eventually(60, "middle's machine deleted in the cloud", || {
        let gone = !env
            .simulator
            .state()
            .instances
            .iter()
            .any(|i| i.instance_id == middle);
        std::future::ready(gone.then_some(()))
    })
    .await;
    support::wait_for_events(&env, "middle", &["BudgetExceeded"]).await;
    let team = budget_condition(&env, "team", "Ready", "True", "WithinBudget").await;
    assert_eq!(team.counted, Some(2), "{team:?}");
    assert_eq!(machines_in_cloud(&env), 2);

    // SnapshotThenDelete: the next newest it may delete goes after a final snapshot.
    let oldest = ready_id(&env, "oldest").await;
    api.patch(
        "team",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {
            "onExceeded": "SnapshotThenDelete", "maxHourlyRate": 1.5 * L40S}})),
    )
    .await
    .unwrap();
    // Its final snapshot is made though the Budget is over its limit (it is what lets the
    // machine go), then the machine is deleted.
    support::gone::<GpuInstance>(&env, "oldest").await;
    let state = env.simulator.state();
    assert!(!state.instances.iter().any(|i| i.instance_id == oldest));
    let snapshot = state
        .snapshots
        .iter()
        .find(|s| s.instance_id == oldest)
        .expect("a final snapshot of oldest");
    assert_eq!(
        snapshot.status,
        gpucloud_cloud::model::SnapshotStatus::Available
    );
    // The protected machine is left running.
    assert_eq!(
        env_state(&env, &ready_id(&env, "newest").await)
            .await
            .as_deref(),
        Some("RUNNING")
    );
    env.stop_operator().await;
}

async fn ready_id(env: &Env, name: &str) -> String {
    support::ready_id::<GpuInstance>(env, name).await
}

/// What the cloud's billing lists say the resources named `names` cost in all.
async fn billed(env: &Env, names: &[String]) -> f64 {
    let cloud = support::cloud_client(env);
    let instances = cloud
        .get_instance_billing(&Default::default())
        .await
        .unwrap();
    let volumes = cloud
        .get_volume_billing(&gpucloud_cloud::model::VolumeBillingQuery {
            limit: Some(100),
            ..Default::default()
        })
        .await
        .unwrap();
    let machines = instances
        .records
        .iter()
        .filter(|r| names.contains(&r.vm_name))
        .map(|r| r.total_cost);
    let disks = volumes
        .records
        .iter()
        .filter(|r| names.contains(&r.volume_name))
        .map(|r| r.total_cost);
    machines.chain(disks).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_month_of_spend_matches_the_clouds_billing_and_a_spent_budget_refuses() {
    let mut env = Env::without_operator(Default::default()).await;
    let config = support::test_config(&env.simulator);
    let metrics = config.metrics.clone();
    env.start_operator(config);
    let api = budgets(&env);
    api.create(
        &PostParams::default(),
        &budget(
            "month",
            serde_json::json!({"maxHourlyRate": 100.0, "maxSpend": 100000.0,
                               "period": {"type": "Monthly"}}),
        ),
    )
    .await
    .unwrap();
    support::create(&env, &machine("trainer", &[])).await;
    let volume: Volume = support::object(
        "scratch",
        serde_json::json!({"region": "us-east-1", "sizeGb": 500}),
    );
    support::create(&env, &volume).await;
    let trainer: GpuInstance = support::ready(&env, "trainer").await;
    let scratch: Volume = support::ready(&env, "scratch").await;
    let names = [trainer.cloud_status(), scratch.cloud_status()]
        .map(|s| s.cloud_name.unwrap())
        .to_vec();
    assert_a_settled_budget_is_rarely_written(&env).await;

    // Ten days running, then stopped (billed a tenth) and the volume deleted: its spend stays.
    run_ten_days_then_stop_and_delete_the_volume(&env).await;

    // The Budget is counted again on its own (at the resync); its billing is read at most
    // once per catalog TTL.
    let spent = eventually(
        60,
        "the Budget's spend within 1% of the cloud's billing",
        || {
            let (api, names, env) = (api.clone(), names.clone(), &env);
            async move {
                let expected = billed(env, &names).await;
                let spent = api.get("month").await.ok()?.status?.spent?;
                ((spent - expected).abs() <= 0.01 * expected).then_some(spent)
            }
        },
    )
    .await;
    // A month of a machine is hundreds of dollars: the test measured something.
    assert!(spent > 10.0 * 24.0 * L40S, "{spent}");
    assert_the_spend_metric_shows_the_machines_billing(&env, &metrics, &names).await;

    // Spent: lowered below what is spent, the Budget refuses the next create.
    assert_a_spent_budget_refuses(&env, &api, spent).await;
    assert_eq!(machines_in_cloud(&env), 1);
    env.stop_operator().await;
}

/// Settled with a machine running (its projection moving with the clock), the Budget is
/// counted at the resync (2 s here) and written only when a figure moved: its own status write
/// does not count it again.
async fn assert_a_settled_budget_is_rarely_written(env: &Env) {
    let budget_writes = || {
        env.apiserver
            .requests()
            .iter()
            .filter(|r| r.resource == "budgets" && r.subresource == "status" && r.verb != "get")
            .count()
    };
    let before = budget_writes();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let writes = budget_writes() - before;
    assert!(
        writes <= 3,
        "{writes} status writes of a settled Budget in 5 s"
    );
}

/// Runs the machine `trainer` for ten days, stops it (billed a tenth from then on), deletes
/// the volume `scratch`, and lets twenty more days pass.
async fn run_ten_days_then_stop_and_delete_the_volume(env: &Env) {
    env.simulator
        .advance_clock(std::time::Duration::from_secs(10 * 86_400));
    env.api::<GpuInstance>()
        .patch(
            "trainer",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"powerState": "Stopped"}})),
        )
        .await
        .unwrap();
    power_is(env, "trainer", "STOPPED").await;
    support::delete_and_wait::<Volume>(env, "scratch").await;
    env.simulator
        .advance_clock(std::time::Duration::from_secs(20 * 86_400));
}

/// `gpucloud_spend` by kind and namespace shows the machine's billing since it was made (the
/// deleted volume is no longer the namespace's).
async fn assert_the_spend_metric_shows_the_machines_billing(
    env: &Env,
    metrics: &std::sync::Arc<gpucloud_telemetry::Metrics>,
    names: &[String],
) {
    let series = format!(
        "gpucloud_spend{{kind=\"GpuInstance\",object_namespace=\"{}\",currency=\"USD\"}} ",
        support::NAMESPACE
    );
    eventually(30, "gpucloud_spend shows the machine's billing", || {
        let (metrics, series) = (metrics.clone(), series.clone());
        async move {
            let machine = billed(env, &names[..1]).await;
            let text = metrics.encode();
            let shown: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix(&series))?
                .parse()
                .ok()?;
            ((shown - machine).abs() <= 0.01 * machine).then_some(())
        }
    })
    .await;
    assert!(
        !metrics.encode().contains("gpucloud_spend{kind=\"Volume\""),
        "{}",
        metrics.encode()
    );
}

/// With `maxSpend` lowered below what is spent, the Budget says so in its conditions and
/// refuses the next create.
async fn assert_a_spent_budget_refuses(env: &Env, api: &Api<Budget>, spent: f64) {
    api.patch(
        "month",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"maxSpend": spent / 2.0}})),
    )
    .await
    .unwrap();
    let month = budget_condition(env, "month", "Exceeded", "True", "BudgetExceeded").await;
    let ready = month
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "BudgetExceeded")
    );
    assert!(
        ready.message.contains("is spent this period"),
        "{}",
        ready.message
    );
    assert!(month.conditions.iter().any(|c| c.type_ == "Stalled"));
    support::create(env, &machine("another", &[])).await;
    let refused: GpuInstance =
        support::condition(env, "another", "Ready", "False", "BudgetExceeded").await;
    let message = support::ready_message(&refused);
    assert!(message.contains("spent this period"), "{message}");
}

/// A Budget whose spend, projected at its counted rate to the end of its period, passes
/// `maxSpend` says so while it is still within it (`Ready=True`, reason `ProjectedOverBudget`)
/// and tells it in one Warning Event for the period, however often it is counted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spend_projected_past_max_spend_is_told_once_before_it_is_spent() {
    use k8s_openapi::jiff::{Timestamp, tz::TimeZone};
    let mut env = Env::start().await;
    let api = budgets(&env);
    // A week from today's midnight (UTC): days of a machine still to come, a few cents spent.
    let today = format!("{:?}", Timestamp::now().to_zoned(TimeZone::UTC).weekday());
    api.create(
        &PostParams::default(),
        &budget(
            "team",
            serde_json::json!({"maxHourlyRate": 100.0, "maxSpend": 20.0,
                               "period": {"type": "Weekly", "dayOfWeek": &today[..3]}}),
        ),
    )
    .await
    .unwrap();
    support::create(&env, &machine("trainer", &[])).await;
    support::ready::<GpuInstance>(&env, "trainer").await;
    let team = budget_condition(&env, "team", "Ready", "True", "ProjectedOverBudget").await;
    assert!(team.spent.unwrap_or(0.0) < 20.0, "{team:?}");
    assert!(team.projected.unwrap() > 20.0, "{team:?}");
    let ready = team.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert!(
        ready.message.contains("over its maxSpend 20.00 USD"),
        "{}",
        ready.message
    );
    assert!(!team.conditions.iter().any(|c| c.type_ == "Stalled"));
    support::wait_for_events(&env, "team", &["ProjectedOverBudget"]).await;

    // Counted again at every resync (2 s here): no second Event, nor a repeat of the first.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let told = support::events_about(&env, "team", "ProjectedOverBudget").await;
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].type_.as_deref(), Some("Warning"));
    assert!(told[0].series.is_none(), "{:?}", told[0].series);
    assert!(
        told[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("maxSpend is reached about")),
        "{:?}",
        told[0].note
    );
    let team = api.get("team").await.unwrap().status.unwrap();
    assert_eq!(team.overspend_warned_for, team.period_start);
    env.stop_operator().await;
}

/// A Budget spent before the end of its month stops the machine; at the first of the next
/// month it is counted again at once (a timer at the period's end, not the next resync, made
/// long here so that the two cannot be confused) and lets the machine start. On a clock of
/// 3,600 clock seconds per real second from 14:00 on the last day of November.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_lets_go_at_the_start_of_its_next_period() {
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    const SCALE: f64 = 3_600.0;
    let at = |text: &str| text.parse::<Timestamp>().unwrap();
    let (mut env, clock) = Env::on_scaled_clock(at("2026-11-30T14:00:00Z"), SCALE).await;
    let mut config = support::test_config(&env.simulator);
    config.reconcile.clock = clock;
    // A resync of 60 real seconds is 60 clock hours: past the test's end.
    config.reconcile.observe.resync = std::time::Duration::from_secs(60);
    env.start_operator(config);
    let api = budgets(&env);
    api.create(
        &PostParams::default(),
        &budget(
            "month",
            serde_json::json!({"maxHourlyRate": 100.0, "maxSpend": 1000.0, "onExceeded": "Stop",
                               "period": {"type": "Monthly"}}),
        ),
    )
    .await
    .unwrap();
    support::create(&env, &machine("trainer", &[])).await;
    power_is(&env, "trainer", "RUNNING").await;
    // Hours of an L40S later, the limit is lowered below what they cost: stopped.
    tokio::time::sleep(clock.until(at("2026-11-30T20:00:00Z"))).await;
    api.patch(
        "month",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"maxSpend": 2.0}})),
    )
    .await
    .unwrap();
    power_is(&env, "trainer", "STOPPED").await;
    let new_month = at("2026-12-01T00:00:00Z");
    assert!(
        clock.now() < new_month,
        "stopped only at {}: the scale is too high for this machine",
        clock.now()
    );
    let spent = api.get("month").await.unwrap().status.unwrap();
    assert_eq!(spent.period_end.map(|t| t.0), Some(new_month));

    power_is(&env, "trainer", "RUNNING").await;
    let started = clock.now();
    let budget = api.get("month").await.unwrap().status.unwrap();
    assert_eq!(budget.period_start.map(|t| t.0), Some(new_month));
    // Seen by polling the cloud: an hour of clock time is under a real second.
    let late = started.duration_since(new_month);
    eprintln!("started {late} after the new period began");
    assert!(
        late >= SignedDuration::ZERO && late <= SignedDuration::from_hours(1),
        "started at {started}"
    );
    env.stop_operator().await;
}

/// A Budget is its namespace's alone: another team's Budget that refuses everything and
/// powers everything off, its status written by that team to name this team's machine,
/// neither stops the machine nor refuses this team's next create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_namespaces_budget_neither_stops_nor_refuses_this_ones_machines() {
    another_namespaces_budget_leaves_this_ones_machines("Stop").await;
}

/// The same with a hostile Budget that deletes, and one that snapshots then deletes: nothing
/// of this namespace is deleted or snapshotted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_namespaces_deleting_budget_never_deletes_this_ones_machines() {
    for on_exceeded in ["Delete", "SnapshotThenDelete"] {
        another_namespaces_budget_leaves_this_ones_machines(on_exceeded).await;
    }
}

/// Team B's Budget of nothing (`onExceeded` as given), its status forged to name team A's
/// machine: team A's machines run on, made and never stopped, deleted or snapshotted.
async fn another_namespaces_budget_leaves_this_ones_machines(on_exceeded: &str) {
    let env = Env::start().await;
    support::create(&env, &machine("trainer", &[])).await;
    let trainer = power_is(&env, "trainer", "RUNNING").await;
    support::create_namespace(&env.client, "team-b", false)
        .await
        .unwrap();
    let hostile: Api<Budget> = Api::namespaced(env.client.clone(), "team-b");
    let mut zero = budget(
        "everything",
        serde_json::json!({"maxHourlyRate": 0.0, "onExceeded": on_exceeded}),
    );
    zero.metadata.namespace = Some("team-b".into());
    let created = hostile.create(&PostParams::default(), &zero).await.unwrap();
    // The other team writes its Budget's status itself, naming this team's machine.
    let forged = serde_json::json!({"status": {"poweredOff": [{
        "name": "trainer", "uid": trainer.metadata.uid.clone().unwrap(), "hourlyRate": L40S,
        "powerState": "Stopped", "since": "2026-11-27T00:00:00Z",
    }]}});
    hostile
        .patch_status(
            &created.metadata.name.clone().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(forged),
        )
        .await
        .unwrap();

    support::create(&env, &machine("another", &[])).await;
    power_is(&env, "another", "RUNNING").await;
    // Past a resync interval (2 s here) and the relay's wake-ups.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(env.calls("StopInstance"), 0);
    assert_eq!(env.calls("DeleteInstance"), 0, "{on_exceeded}");
    assert_eq!(env.calls("CreateSnapshot"), 0, "{on_exceeded}");
    assert_eq!(machines_in_cloud(&env), 2);
    power_is(&env, "trainer", "RUNNING").await;
    let machines = env.api::<GpuInstance>();
    for name in ["trainer", "another"] {
        let object = machines.get(name).await.unwrap();
        assert!(
            object.metadata.deletion_timestamp.is_none(),
            "{name} deleted under {on_exceeded}"
        );
    }
}

/// Sets the Budget's `maxHourlyRate`.
async fn set_limit(api: &Api<Budget>, name: &str, rate: f64) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"maxHourlyRate": rate}})),
    )
    .await
    .unwrap();
}

/// Whoever may write a Budget's status can list any `<account>/<cloud name>` in its
/// `status.charged`: another team's machines there (unsealed, or with a made-up seal) are
/// dropped at the next count, and their billing never shows in this Budget's spend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_charge_never_reads_another_teams_billing() {
    let env = Env::start().await;
    support::create(&env, &machine("trainer", &[])).await;
    let trainer = power_is(&env, "trainer", "RUNNING").await;
    let status = trainer.cloud_status();
    let (account, name) = (status.account.unwrap(), status.cloud_name.unwrap());
    support::create_namespace(&env.client, "team-b", false)
        .await
        .unwrap();
    let hostile: Api<Budget> = Api::namespaced(env.client.clone(), "team-b");
    let mut spy = budget(
        "spy",
        serde_json::json!({"maxHourlyRate": 100.0, "maxSpend": 100000.0,
                           "period": {"type": "Monthly"}}),
    );
    spy.metadata.namespace = Some("team-b".into());
    hostile.create(&PostParams::default(), &spy).await.unwrap();
    // Counted once first: a count that starts a period starts its entries afresh.
    eventually(30, "the spy Budget counted", || {
        let hostile = hostile.clone();
        async move {
            let status = hostile.get("spy").await.ok()?.status?;
            status.period_start.map(drop)
        }
    })
    .await;
    let forged_entries = [
        format!("{account}/{name}"),
        format!("{account}/{name}/0123456789abcdef"),
    ];
    let forged = serde_json::json!({"status": {"charged": forged_entries}});
    hostile
        .patch_status("spy", &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .unwrap();
    env.simulator
        .advance_clock(std::time::Duration::from_secs(3 * 86_400));

    // Counted again at the resync (2 s here): the forged entries are gone and nothing of the
    // other team's billing is counted.
    let spy = eventually(
        30,
        "the spy Budget counted without the forged entries",
        || {
            let hostile = hostile.clone();
            async move {
                let status = hostile.get("spy").await.ok()?.status?;
                (status.charged.is_empty() && status.spent.is_some()).then_some(status)
            }
        },
    )
    .await;
    assert_eq!(spy.spent, Some(0.0), "{spy:?}");
}
