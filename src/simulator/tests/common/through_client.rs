//! Helpers shared by the tests that drive the simulator through the typed client.

use std::future::Future;
use std::time::Duration;

use gpucloud_cloud::model::{CreateInstanceRequest, Instance, InstanceStatus, Tier, VmStatus};
use gpucloud_cloud::{ApiKey, ClientConfig, CloudClient};
use gpucloud_simulator::{Simulator, SimulatorConfig, SimulatorHandle};

/// Bound on any single step, so a broken simulator fails the test instead of hanging it.
pub const STEP: Duration = Duration::from_secs(15);

pub async fn step<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(STEP, future)
        .await
        .expect("step took too long")
}

/// Polls `probe` until it yields a value, for at most [`STEP`].
pub async fn wait_until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn start_simulator(config: SimulatorConfig) -> SimulatorHandle {
    step(Simulator::start(config, "127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap()
}

/// A client of `sim` without a rate limit of its own.
pub fn client_config(sim: &SimulatorHandle) -> ClientConfig {
    let mut config = ClientConfig::new(sim.base_url(), ApiKey::new(sim.api_key()));
    config.timeout = Duration::from_secs(10);
    config.rate_limit = None;
    config
}

pub fn client_for(sim: &SimulatorHandle) -> CloudClient {
    CloudClient::new(client_config(sim)).unwrap()
}

/// One A100-80G in us-east-1 of `tier`.
pub fn instance_request(name: &str, tier: Tier) -> CreateInstanceRequest {
    CreateInstanceRequest {
        tier: Some(tier),
        ..CreateInstanceRequest::new(name, "us-east-1", "A100-80G", 1, "ubuntu-22.04-cuda-12")
    }
}

pub async fn wait_status(client: &CloudClient, id: &str, status: InstanceStatus) -> Instance {
    wait_until(&format!("instance {id} {status}"), || async {
        let instance = client.get_instance(id).await.unwrap();
        (instance.status == status).then_some(instance)
    })
    .await
}

pub async fn wait_vm_status(client: &CloudClient, id: &str, status: VmStatus) -> Instance {
    wait_until(&format!("instance {id} vm_status {status}"), || async {
        let instance = client.get_instance(id).await.unwrap();
        (instance.vm_status == status).then_some(instance)
    })
    .await
}
