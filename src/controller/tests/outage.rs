#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A cloud outage is the account's state, not each object's: objects that failed while the
//! cloud was down wait for the account to answer again and are reconciled as soon as it does,
//! instead of each on a per-object backoff that grew through the outage.

use crate::support;

use gpucloud_api::*;
use gpucloud_simulator::{Delays, FaultPlan, SimulatorConfig};
use kube::api::{Patch, PatchParams};
use std::time::{Duration, Instant};
use support::*;

const MACHINES: usize = 5;
const OUTAGE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_waiting_through_a_minute_long_outage_are_reconciled_within_seconds_of_its_end() {
    let mut env = Env::without_operator(SimulatorConfig {
        delays: Delays::instant(),
        ..SimulatorConfig::default()
    })
    .await;
    let mut config = test_config(&env.simulator);
    // A long resync, so that only the account's recovery can wake the objects in time.
    config.reconcile.observe.resync = Duration::from_secs(30);
    env.start_operator(config);
    let names: Vec<String> = (0..MACHINES).map(|i| format!("m{i}")).collect();
    for name in &names {
        let machine: GpuInstance = object(
            name,
            serde_json::json!({
                "region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
                "osImage": "ubuntu-22.04-cuda-12",
            }),
        );
        create(&env, &machine).await;
    }
    for name in &names {
        ready::<GpuInstance>(&env, name).await;
    }

    // Every cloud call fails while the machines are asked to stop.
    env.simulator.set_faults(FaultPlan {
        error_rate: 1.0,
        ..FaultPlan::default()
    });
    for name in &names {
        env.api::<GpuInstance>()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"powerState": "Stopped"}})),
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(OUTAGE).await;
    assert!(
        env.simulator
            .state()
            .instances
            .iter()
            .all(|i| i.vm_status.as_str() == "RUNNING"),
        "nothing got through"
    );

    let back = Instant::now();
    env.simulator.set_faults(FaultPlan::default());
    let api = env.api::<GpuInstance>();
    eventually(30, "every machine stopped and Ready", || {
        let api = api.clone();
        let names = names.clone();
        async move {
            for name in &names {
                let machine = api.get(name).await.ok()?;
                let stopped = machine
                    .status
                    .as_ref()
                    .and_then(|s| s.vm_status.as_deref())
                    .is_some_and(|s| s.eq_ignore_ascii_case("stopped"));
                if !(stopped && machine.cloud_status().is_ready(machine.metadata.generation)) {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
    let recovered_in = back.elapsed();
    println!("{MACHINES} machines reconciled {recovered_in:?} after a {OUTAGE:?} outage ended");
    assert!(
        recovered_in <= Duration::from_secs(5),
        "reconciled {recovered_in:?} after the cloud came back; wanted at most 5 s"
    );
}
