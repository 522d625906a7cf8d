#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Fair shares between teams: a namespace with a hundred creates queued at its account's rate
//! limit does not hold back a single new object of a quiet namespace of the same account.

use crate::support::*;
use gpucloud_api::GpuInstance;
use gpucloud_simulator::SimulatorConfig;
use kube::api::{Api, PostParams};

const BUSY: &str = "busy-team";
const QUIET: &str = "quiet-team";

fn machine(namespace: &str, name: &str) -> GpuInstance {
    let mut object: GpuInstance = object(
        name,
        serde_json::json!({
            "region": "us-east-1",
            "gpuType": "H100-80G",
            "osImage": "ubuntu-22.04-cuda-12",
        }),
    );
    object.metadata.namespace = Some(namespace.into());
    object
}

/// The cloud's machines whose names carry `namespace`'s mark.
fn machines_of(env: &Env, namespace: &str) -> usize {
    let mark = format!("gco-{namespace}-");
    env.simulator
        .state()
        .instances
        .iter()
        .filter(|instance| instance.vm_name.starts_with(&mark))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_namespace_is_not_held_behind_a_busy_one() {
    let rate = gpucloud_simulator::RateLimit {
        per_second: 20.0,
        burst: 2,
    };
    let mut env = Env::without_operator(SimulatorConfig {
        rate_limit: Some(rate),
        ..SimulatorConfig::default()
    })
    .await;
    for namespace in [BUSY, QUIET] {
        create_namespace(&env.client, namespace, false)
            .await
            .unwrap();
    }
    // A hundred creates due at once in one namespace: at 20 calls per second, 5 s of work.
    let busy: Api<GpuInstance> = Api::namespaced(env.client.clone(), BUSY);
    for n in 0..100 {
        busy.create(
            &PostParams::default(),
            &machine(BUSY, &format!("vm-{n:03}")),
        )
        .await
        .unwrap();
    }
    let mut config = test_config(&env.simulator);
    config.cloud.rate_limit = Some(gpucloud_cloud::RateLimit {
        per_second: rate.per_second,
        burst: rate.burst,
    });
    config.concurrency = 2;
    env.start_operator(config);
    eventually(30, "the busy namespace's first machines", || async {
        (machines_of(&env, BUSY) >= 5).then_some(())
    })
    .await;

    // One object of another namespace, now: it takes the next free slot of the account.
    Api::<GpuInstance>::namespaced(env.client.clone(), QUIET)
        .create(&PostParams::default(), &machine(QUIET, "vm-1"))
        .await
        .unwrap();
    let busy_before = eventually(30, "the quiet namespace's machine", || async {
        (machines_of(&env, QUIET) == 1).then(|| machines_of(&env, BUSY))
    })
    .await;
    // Served in turn, it is created while most of the busy namespace's creates still wait;
    // in one queue for the account it would come after all hundred.
    assert!(
        busy_before < 50,
        "{busy_before} of the busy namespace's 100 machines were created before the quiet one's"
    );
}
