//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.
//!
//! - A candidate tries every `retry_period` to take the lease: when nobody holds it, or when
//!   the record it last saw has not changed for `lease_duration` (measured on its own clock,
//!   so clock skew between nodes does not matter).
//! - The holder renews every `retry_period`. When it has not renewed for `renew_deadline`
//!   (shorter than `lease_duration`), or it reads another holder, leadership is lost at once:
//!   it stops reconciling before any other replica may take over.
//! - Every write carries the resourceVersion it read, so of two candidates writing at once,
//!   one gets a conflict and stays a candidate.
//!
//! Nothing fences the cloud calls of a leader that stalls past its deadline; the operator's
//! idempotent create (intent recorded with the object's resourceVersion before the call) is
//! what keeps such a leader from making duplicates.

use gpucloud_telemetry::Health;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Settings of the election (`--leader-elect`, `--lease-name`, `--lease-duration`,
/// `--renew-deadline`, `--retry-period`).
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// Unique per replica: the pod name.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "leader election needs retry period < renew deadline < lease duration (got {retry:?}, {renew:?}, {lease:?})"
    )]
    Settings {
        retry: Duration,
        renew: Duration,
        lease: Duration,
    },
}

impl LeaseSettings {
    pub fn validate(&self) -> Result<(), Error> {
        if self.retry_period.is_zero()
            || self.retry_period >= self.renew_deadline
            || self.renew_deadline >= self.lease_duration
        {
            return Err(Error::Settings {
                retry: self.retry_period,
                renew: self.renew_deadline,
                lease: self.lease_duration,
            });
        }
        Ok(())
    }
}

/// What a candidate last read, and when it read it first.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    resource_version: Option<String>,
}

/// Competes for the lease of one operator deployment.
pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
}

/// Held leadership. It ends when [`Leadership::lost`] resolves, or on [`Leadership::release`].
pub struct Leadership {
    lost: watch::Receiver<bool>,
    renewer: JoinHandle<()>,
    api: Api<Lease>,
    settings: LeaseSettings,
}

enum Attempt {
    Acquired,
    HeldBy(Option<String>),
}

impl Elector {
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Result<Self, Error> {
        settings.validate()?;
        Ok(Elector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
        })
    }

    /// Waits until this replica holds the lease, reporting standby meanwhile.
    pub async fn acquire(&self, health: &Health) -> Leadership {
        let mut observed: Option<(Observed, Instant)> = None;
        loop {
            match self.try_acquire(&mut observed).await {
                Ok(Attempt::Acquired) => {
                    tracing::info!(
                        identity = %self.settings.identity,
                        lease = %self.settings.name,
                        "became the leader"
                    );
                    return self.hold();
                }
                Ok(Attempt::HeldBy(holder)) => {
                    if health.role()
                        != (gpucloud_telemetry::Role::Standby {
                            holder: holder.clone(),
                        })
                    {
                        tracing::info!(holder = ?holder, "standing by: another replica leads");
                    }
                    health.standby(holder);
                }
                Err(error) => {
                    tracing::warn!(%error, "reading the leader lease failed");
                }
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    async fn try_acquire(
        &self,
        observed: &mut Option<(Observed, Instant)>,
    ) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let Some(current) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Acquired),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::HeldBy(None)),
                Err(error) => Err(error),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = Observed {
            holder: holder.clone(),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            resource_version: current.metadata.resource_version.clone(),
        };
        let first_seen = match observed {
            Some((seen, at)) if *seen == record => *at,
            _ => {
                *observed = Some((record, Instant::now()));
                Instant::now()
            }
        };
        let duration = spec
            .lease_duration_seconds
            .map_or(self.settings.lease_duration, |s| {
                Duration::from_secs(u64::try_from(s).unwrap_or(0))
            });
        let ours = holder.as_deref() == Some(self.settings.identity.as_str());
        let expired = first_seen.elapsed() >= duration;
        if holder.is_some() && !ours && !expired {
            return Ok(Attempt::HeldBy(holder));
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquired = if ours {
            spec.acquire_time.map_or(now, |t| t.0)
        } else {
            now
        };
        let mut taken = current.clone();
        taken.spec = Some(self.spec(acquired, now, transitions));
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &taken)
            .await
        {
            Ok(_) => Ok(Attempt::Acquired),
            // Another candidate wrote first.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::HeldBy(holder)),
            Err(error) => Err(error),
        }
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.settings.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Starts renewing the lease in the background.
    fn hold(&self) -> Leadership {
        let (lost_tx, lost) = watch::channel(false);
        let api = self.api.clone();
        let settings = self.settings.clone();
        let renewer = tokio::spawn(renew(api.clone(), settings.clone(), lost_tx));
        Leadership {
            lost,
            renewer,
            api,
            settings,
        }
    }
}

/// Renews every retry period; gives up (and says so on `lost`) once the renew deadline has
/// passed since the last successful renewal or another holder is read.
async fn renew(api: Api<Lease>, settings: LeaseSettings, lost: watch::Sender<bool>) {
    let mut renewed_at = Instant::now();
    loop {
        tokio::time::sleep(settings.retry_period).await;
        let attempt = async {
            let mut current = api.get(&settings.name).await?;
            let holder = current
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.clone());
            if holder.as_deref() != Some(settings.identity.as_str()) {
                return Ok::<_, kube::Error>(Err(holder));
            }
            if let Some(spec) = current.spec.as_mut() {
                spec.renew_time = Some(MicroTime(Timestamp::now()));
            }
            Ok(Ok(api
                .replace(&settings.name, &PostParams::default(), &current)
                .await?))
        };
        let deadline = settings.renew_deadline.saturating_sub(renewed_at.elapsed());
        match tokio::time::timeout(deadline, attempt).await {
            Ok(Ok(Ok(_))) => renewed_at = Instant::now(),
            Ok(Ok(Err(holder))) => {
                tracing::error!(holder = ?holder, "the leader lease was taken by another replica");
                let _ = lost.send(true);
                return;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "renewing the leader lease failed");
            }
            Err(_) => {}
        }
        if renewed_at.elapsed() >= settings.renew_deadline {
            tracing::error!(
                deadline_s = settings.renew_deadline.as_secs_f64(),
                "the leader lease could not be renewed within the renew deadline"
            );
            let _ = lost.send(true);
            return;
        }
    }
}

/// A leadership dropped without release (its replica was killed) stops renewing, so the
/// lease expires and a standby takes over.
impl Drop for Leadership {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

impl Leadership {
    /// Resolves when leadership is lost.
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut lost = self.lost.clone();
        async move {
            // An error means the renewer ended, which it does only after reporting a loss.
            let _ = lost.wait_for(|lost| *lost).await;
        }
    }

    /// Stops renewing and hands the lease back, so another replica takes over at once
    /// instead of after the lease duration. Best effort: a failure only delays the handover.
    pub async fn release(self) {
        self.renewer.abort();
        let result = async {
            let mut current = self.api.get(&self.settings.name).await?;
            let ours = current
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                == Some(self.settings.identity.as_str());
            if !ours {
                return Ok(());
            }
            if let Some(spec) = current.spec.as_mut() {
                spec.holder_identity = None;
                spec.lease_duration_seconds = Some(1);
                spec.renew_time = Some(MicroTime(Timestamp::now()));
            }
            self.api
                .replace(&self.settings.name, &PostParams::default(), &current)
                .await
                .map(drop)
        }
        .await;
        match result {
            Ok(()) => tracing::info!("released the leader lease"),
            Err(error) => tracing::warn!(%error, "releasing the leader lease failed"),
        }
    }
}
