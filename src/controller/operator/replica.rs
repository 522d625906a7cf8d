//! One replica of the operator: wait for the leader lease (when elected), run the controllers
//! while leading, and stop them on shutdown or at once when leadership is lost.
//!
//! Shutdown (SIGTERM): readiness drops, the controllers stop taking new work, in-flight
//! reconciles get `shutdown_timeout` to finish and are then abandoned (a create's intent is
//! recorded before its cloud call, so an abandoned one is resolved by the next leader's list,
//! never repeated blindly), and the lease is handed back so a standby takes over at once.

use crate::operator::run::{self, OperatorConfig};
use crate::runtime::leader::{self, Elector, LeaseSettings};
use futures::FutureExt;
use futures::future::BoxFuture;
use std::time::Duration;
use tokio::sync::oneshot;

/// How a replica runs beyond the controllers' own settings.
#[derive(Debug, Clone)]
pub struct ReplicaSettings {
    /// `None` runs the controllers at once, without an election.
    pub leader_election: Option<LeaseSettings>,
    /// How long in-flight reconciles may take to finish after shutdown begins.
    pub shutdown_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Election(#[from] leader::Error),
    #[error("lost the leader lease; stopped reconciling")]
    LostLeadership,
    #[error("the controllers stopped on their own")]
    ControllersEnded,
}

/// Runs until `shutdown` resolves (`Ok`) or leadership is lost (`Err`; the process should
/// exit and start over as a candidate).
pub async fn run_replica(
    client: kube::Client,
    config: OperatorConfig,
    settings: ReplicaSettings,
    shutdown: BoxFuture<'static, ()>,
) -> Result<(), Error> {
    let shutdown = shutdown.shared();
    let health = config.health.clone();
    let metrics = config.metrics.clone();
    metrics.set_leader(false);
    let leadership = match &settings.leader_election {
        None => None,
        Some(lease) => {
            let elector = Elector::new(client.clone(), lease.clone())?;
            tokio::select! {
                leadership = elector.acquire(&health) => Some(leadership),
                _ = shutdown.clone() => {
                    health.stopping();
                    return Ok(());
                }
            }
        }
    };
    let lost = match &leadership {
        Some(leadership) => leadership.lost().boxed(),
        None => futures::future::pending().boxed(),
    };

    let (stop, stopped) = oneshot::channel::<()>();
    let mut controllers = AbortOnDrop(tokio::spawn(run::run(
        client,
        config,
        stopped.map(|_| ()).boxed(),
    )));
    let result = tokio::select! {
        _ = shutdown => {
            health.stopping();
            tracing::info!(
                timeout_s = settings.shutdown_timeout.as_secs_f64(),
                "shutting down: no new reconciles; waiting for those in flight"
            );
            let _ = stop.send(());
            if tokio::time::timeout(settings.shutdown_timeout, &mut controllers.0)
                .await
                .is_err()
            {
                tracing::warn!("in-flight reconciles did not finish in time; abandoning them");
                controllers.0.abort();
                let _ = (&mut controllers.0).await;
            }
            Ok(())
        }
        _ = lost => {
            // Another replica may lead from now on: not one more write from this one.
            controllers.0.abort();
            let _ = (&mut controllers.0).await;
            health.fail("lost the leader lease");
            Err(Error::LostLeadership)
        }
        _ = &mut controllers.0 => {
            health.fail("the controllers stopped on their own");
            Err(Error::ControllersEnded)
        }
    };
    metrics.set_leader(false);
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    result
}

/// The controllers' task, aborted when the replica's future is dropped (a killed replica
/// leaves nothing running behind).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
