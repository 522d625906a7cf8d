//! `gpucloud-operator run`: every setting as a flag with an environment variable.

use crate::accounts::account::{CloudSettings, SecretLocation};
use crate::accounts::observer::ObserveIntervals;
use crate::accounts::orphans::OrphanSweepSettings;
use crate::flow::context::{DuplicateSettings, ReconcileSettings};
use crate::operator::replica::ReplicaSettings;
use crate::operator::run::OperatorConfig;
use crate::runtime::client_throttle::ClientThrottle;
use crate::runtime::leader::LeaseSettings;
use futures::FutureExt;
use gpucloud_cloud::RateLimit;
use gpucloud_telemetry::{Endpoints, Health, HealthSettings, Metrics};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// The shortest `--runtime-stall-threshold`: a few heartbeats, so scheduling jitter is no stall.
const MIN_RUNTIME_STALL: Duration = Duration::from_secs(5);

/// Run the controllers against the cluster of the current kubeconfig (or in-cluster config).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Base URL of the Cloud GPU Compute Service API.
    #[arg(long, env = "GPUCLOUD_URL")]
    pub cloud_url: String,
    /// Default credentials Secret, as `namespace/name` (or `name` in the operator's namespace).
    #[arg(long, env = "GPUCLOUD_CREDENTIALS_SECRET")]
    pub credentials_secret: Option<String>,
    /// Key of the API key in the credentials Secret.
    #[arg(long, env = "GPUCLOUD_CREDENTIALS_KEY", default_value = "apiKey")]
    pub credentials_key: String,
    /// The operator's own namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = "gpucloud-system")]
    pub operator_namespace: String,
    /// Namespaces to watch, comma-separated; empty watches the whole cluster.
    #[arg(long, env = "GPUCLOUD_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Reconciles of one kind running at once per cloud account (credentials Secret), shared
    /// out in turn between the namespaces waiting for one.
    #[arg(long, env = "GPUCLOUD_CONCURRENCY", default_value_t = 8)]
    pub concurrency: u16,
    /// Interval of the cloud lists while nothing is in transition (e.g. `60s`, `5m`).
    #[arg(long, env = "GPUCLOUD_RESYNC_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub resync_interval: Duration,
    /// Interval of the cloud lists while something is in transition.
    #[arg(long, env = "GPUCLOUD_TRANSITION_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub transition_interval: Duration,
    /// How long a created resource may take to show in the cloud's lists.
    #[arg(long, env = "GPUCLOUD_SETTLE_WINDOW", default_value = "30s", value_parser = parse_duration)]
    pub settle_window: Duration,
    /// Billed creates are refused while the account balance is below this.
    #[arg(long, env = "GPUCLOUD_BUDGET_FLOOR", default_value_t = 0.0)]
    pub budget_floor: f64,
    /// Cloud requests per second per account.
    #[arg(long, env = "GPUCLOUD_RATE_LIMIT", default_value_t = 10.0)]
    pub rate_limit: f64,
    /// Burst of cloud requests per account.
    #[arg(long, env = "GPUCLOUD_RATE_BURST", default_value_t = 20)]
    pub rate_burst: u32,
    /// Kubernetes API requests per second of the controllers, client-side (client-go's QPS);
    /// 0 (the default, as controller-runtime's) leaves flow control to the API server's
    /// Priority and Fairness. Leader election is never throttled.
    #[arg(long, env = "GPUCLOUD_KUBE_API_QPS", default_value_t = 0.0)]
    pub kube_api_qps: f64,
    /// Burst of Kubernetes API requests of the controllers, with `--kube-api-qps`.
    #[arg(long, env = "GPUCLOUD_KUBE_API_BURST", default_value_t = 100)]
    pub kube_api_burst: u32,
    /// Kubernetes API requests of the controllers in flight at once; each one beyond them
    /// opens a connection of its own (HTTP/1.1). Watches and leader election are not counted.
    #[arg(long, env = "GPUCLOUD_KUBE_API_MAX_IN_FLIGHT", default_value_t = crate::runtime::client_throttle::DEFAULT_MAX_IN_FLIGHT)]
    pub kube_api_max_in_flight: usize,
    /// Bound on one cloud request.
    #[arg(long, env = "GPUCLOUD_CLOUD_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub cloud_timeout: Duration,
    /// Time between sweeps for orphaned cloud resources (marked by the operator, claimed by no
    /// object); `0` disables the sweeper.
    #[arg(long, env = "GPUCLOUD_ORPHAN_SWEEP_INTERVAL", default_value = "10m", value_parser = parse_duration)]
    pub orphan_sweep_interval: Duration,
    /// How old an unclaimed resource must be before it counts as orphaned.
    #[arg(long, env = "GPUCLOUD_ORPHAN_GRACE_PERIOD", default_value = "15m", value_parser = parse_duration)]
    pub orphan_grace_period: Duration,
    /// Delete orphaned resources; without it they are only reported.
    #[arg(long, env = "GPUCLOUD_DELETE_ORPHANS", default_value_t = false)]
    pub delete_orphans: bool,
    /// Let objects adopt cloud resources the operator did not create for them
    /// (`gpucloud.io/external-id`, `Snapshot.spec.instanceId`), in namespaces labelled
    /// `gpucloud.io/adoption=allowed`; without it every such adoption is refused.
    #[arg(long, env = "GPUCLOUD_ALLOW_ADOPTION", default_value_t = false)]
    pub allow_adoption: bool,
    /// How long a duplicate (a second cloud resource under an object's cloud name) is only
    /// reported before it is deleted.
    #[arg(long, env = "GPUCLOUD_DUPLICATE_GRACE_PERIOD", default_value = "10m", value_parser = parse_duration)]
    pub duplicate_grace_period: Duration,
    /// Delete duplicates past their grace period (never one in use); `false` only reports them.
    #[arg(long, env = "GPUCLOUD_DELETE_DUPLICATES", default_value_t = true, action = clap::ArgAction::Set)]
    pub delete_duplicates: bool,
    /// Address of `/metrics`: every family from the first scrape, as OpenMetrics 1.0 text to a
    /// scraper whose `Accept` header prefers it (Prometheus does), as the Prometheus text format
    /// 0.0.4 otherwise (curl); docs/operations.md, Endpoints.
    #[arg(long, env = "GPUCLOUD_METRICS_LISTEN", default_value = "0.0.0.0:8080")]
    pub metrics_listen: SocketAddr,
    /// Address of `/healthz` (liveness) and `/readyz` (readiness); may equal the metrics one.
    #[arg(long, env = "GPUCLOUD_HEALTH_LISTEN", default_value = "0.0.0.0:8081")]
    pub health_listen: SocketAddr,
    /// A watch failing (API server unreachable, 5xx, 403) this long without a successful list
    /// or watch makes the leader not ready.
    #[arg(long, env = "GPUCLOUD_WATCH_FAILURE_THRESHOLD", default_value = "30s", value_parser = parse_duration)]
    pub watch_failure_threshold: Duration,
    /// The async runtime not running its once-a-second heartbeat for this long makes the
    /// process not live (at least 5s; a busy runtime still beats, so keep it generous).
    #[arg(long, env = "GPUCLOUD_RUNTIME_STALL_THRESHOLD", default_value = "60s", value_parser = parse_duration)]
    pub runtime_stall_threshold: Duration,
    /// Run only while holding the leader Lease (for more than one replica).
    #[arg(long, env = "GPUCLOUD_LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,
    /// Name of the leader Lease, in the operator's namespace.
    #[arg(long, env = "GPUCLOUD_LEASE_NAME", default_value = "gpucloud-operator")]
    pub lease_name: String,
    /// How long a lease not renewed stays held; a standby takes over after it.
    #[arg(long, env = "GPUCLOUD_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops reconciling (less than the duration).
    #[arg(long, env = "GPUCLOUD_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// Interval of lease renewals and of a standby's attempts to take over.
    #[arg(long, env = "GPUCLOUD_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// This replica's identity in the Lease; the pod name.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// How long in-flight reconciles may take to finish after SIGTERM (keep it below the pod's
    /// terminationGracePeriodSeconds).
    #[arg(long, env = "GPUCLOUD_SHUTDOWN_TIMEOUT", default_value = "25s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--credentials-secret {0:?}: expected NAME or NAMESPACE/NAME")]
    CredentialsSecret(String),
    #[error(
        "--kube-api-qps must be a number (0 for no client-side limit) and --kube-api-burst at least 1"
    )]
    KubeApiLimit,
    #[error("--kube-api-max-in-flight must be at least 1")]
    KubeApiMaxInFlight,
    #[error("--rate-limit must be positive and --rate-burst at least 1")]
    RateLimit,
    #[error(
        "--runtime-stall-threshold must be at least {}s (the heartbeat ticks every second)",
        MIN_RUNTIME_STALL.as_secs()
    )]
    RuntimeStall,
    #[error("Kubernetes API: {}", crate::flow::error::KubeMessage(.0))]
    Kube(#[from] kube::Error),
    #[error(
        "the CustomResourceDefinitions are not installed ({0}); install them with: gpucloud-operator crds | kubectl apply -f -"
    )]
    CrdsMissing(String),
    #[error(
        "Kubernetes {}.{} or newer is needed (the CRDs' validation rules use CEL functions older API servers refuse); this API server is {found}",
        MIN_KUBERNETES.0,
        MIN_KUBERNETES.1
    )]
    KubernetesTooOld { found: String },
    #[error(transparent)]
    Endpoints(#[from] gpucloud_telemetry::server::Error),
    #[error(transparent)]
    Replica(#[from] crate::operator::replica::Error),
    #[error(transparent)]
    Election(#[from] crate::runtime::leader::Error),
}

impl Args {
    /// The operator configuration these arguments describe.
    pub fn config(&self) -> Result<OperatorConfig, Error> {
        let default_secret = match &self.credentials_secret {
            None => None,
            Some(raw) => {
                let (namespace, name) = match raw.split_once('/') {
                    Some((ns, name)) => (ns.to_string(), name.to_string()),
                    None => (self.operator_namespace.clone(), raw.clone()),
                };
                if namespace.is_empty() || name.is_empty() || name.contains('/') {
                    return Err(Error::CredentialsSecret(raw.clone()));
                }
                Some(SecretLocation {
                    namespace,
                    name,
                    key: self.credentials_key.clone(),
                })
            }
        };
        if !self.rate_limit.is_finite() || self.rate_limit <= 0.0 || self.rate_burst == 0 {
            return Err(Error::RateLimit);
        }
        if self.runtime_stall_threshold < MIN_RUNTIME_STALL {
            return Err(Error::RuntimeStall);
        }
        let observe = ObserveIntervals {
            resync: self.resync_interval,
            fast: self.transition_interval,
            ..ObserveIntervals::default()
        };
        Ok(OperatorConfig {
            namespaces: self
                .namespaces
                .iter()
                .filter(|n| !n.is_empty())
                .cloned()
                .collect(),
            concurrency: self.concurrency.max(1),
            cloud: CloudSettings {
                base_url: self.cloud_url.trim_end_matches('/').to_string(),
                timeout: self.cloud_timeout,
                rate_limit: Some(RateLimit {
                    per_second: self.rate_limit,
                    burst: self.rate_burst,
                }),
                catalog_ttl: self.resync_interval,
                observer: None,
            },
            default_secret,
            reconcile: ReconcileSettings {
                settle_window: self.settle_window,
                budget_floor: self.budget_floor,
                transition_requeue: self.transition_interval,
                observe,
                operator_namespace: self.operator_namespace.clone(),
                allow_adoption: self.allow_adoption,
                duplicates: DuplicateSettings {
                    grace_period: self.duplicate_grace_period,
                    delete: self.delete_duplicates,
                },
                clock: crate::runtime::clock::Clock::real(),
            },
            reporter: crate::runtime::events::Reporter::new(
                "gpucloud-operator",
                self.instance_name(),
            ),
            orphans: OrphanSweepSettings {
                interval: self.orphan_sweep_interval,
                grace_period: self.orphan_grace_period,
                delete: self.delete_orphans,
                summary_namespace: self.operator_namespace.clone(),
                summary_name: self.lease_name.clone(),
            },
            metrics: Arc::new(Metrics::new()),
            health: Arc::new(Health::new(HealthSettings {
                watch_failure: self.watch_failure_threshold,
                runtime_stall: self.runtime_stall_threshold,
            })),
        })
    }

    /// How this replica runs: leader election and shutdown.
    pub fn replica(&self) -> Result<ReplicaSettings, Error> {
        let leader_election = if self.leader_elect {
            let lease = LeaseSettings {
                namespace: self.operator_namespace.clone(),
                name: self.lease_name.clone(),
                identity: self.identity(),
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            };
            lease.validate()?;
            Some(lease)
        } else {
            None
        };
        Ok(ReplicaSettings {
            leader_election,
            shutdown_timeout: self.shutdown_timeout,
        })
    }

    /// The client-side limit toward the API server, if any.
    pub fn kube_api_limit(&self) -> Result<Option<RateLimit>, Error> {
        if !self.kube_api_qps.is_finite() || (self.kube_api_qps > 0.0 && self.kube_api_burst == 0) {
            return Err(Error::KubeApiLimit);
        }
        Ok((self.kube_api_qps > 0.0).then_some(RateLimit {
            per_second: self.kube_api_qps,
            burst: self.kube_api_burst,
        }))
    }

    /// The bound on the controllers' Kubernetes API requests in flight.
    pub fn kube_api_max_in_flight(&self) -> Result<usize, Error> {
        match self.kube_api_max_in_flight {
            0 => Err(Error::KubeApiMaxInFlight),
            limit => Ok(limit),
        }
    }

    /// The pod name, or the host name outside a pod: the replica Events name as their
    /// `reportingInstance`.
    fn instance_name(&self) -> String {
        if let Some(name) = self.pod_name.as_ref().filter(|n| !n.is_empty()) {
            return name.clone();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "gpucloud-operator".into())
    }

    /// The lease holder's name: the pod name, or the host name with a random suffix outside a
    /// pod (two processes on one host are two candidates).
    fn identity(&self) -> String {
        match self.pod_name.as_ref().filter(|n| !n.is_empty()) {
            Some(name) => name.clone(),
            None => format!("{}-{:08x}", self.instance_name(), rand::random::<u32>()),
        }
    }
}

/// Serves metrics and probes, checks the CRDs are installed, then runs this replica until
/// Ctrl-C or SIGTERM (or until it loses the leader lease, which is an error: exit and start
/// over).
pub async fn run(args: Args, build: gpucloud_telemetry::BuildInfo) -> Result<(), Error> {
    let config = args.config()?;
    config.metrics.set_build_info(&build);
    let replica = args.replica()?;
    let kube_api_limit = args.kube_api_limit()?;
    let kube_api_max_in_flight = args.kube_api_max_in_flight()?;
    let (stop_endpoints, endpoints_stopped) = oneshot::channel::<()>();
    let endpoints = gpucloud_telemetry::server::serve(
        Endpoints {
            metrics: args.metrics_listen,
            health: args.health_listen,
        },
        config.metrics.clone(),
        config.health.clone(),
        endpoints_stopped.map(drop),
    )
    .await?;
    tracing::info!(metrics = %endpoints.metrics, health = %endpoints.health, "serving metrics and probes");
    let kube_config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let host = crate::runtime::client_metrics::host_label(&kube_config.cluster_url);
    // Wrapped once, here: every request of the replica (start-up checks, election,
    // controllers) is counted.
    let client = crate::runtime::client_metrics::counted_client(
        &kube::Client::try_from(kube_config)?,
        config.metrics.clone(),
        &host,
    );
    let client =
        crate::runtime::client_throttle::in_flight_bounded_client(&client, kube_api_max_in_flight);
    let client = match kube_api_limit {
        Some(limit) => crate::runtime::client_throttle::throttled_client(
            &client,
            &ClientThrottle { limit, host },
            config.metrics.clone(),
        ),
        None => client,
    };
    ensure_server_supported(&client).await?;
    ensure_crds_installed(&client).await?;
    tracing::info!(
        namespaces = ?config.namespaces,
        cloud = %config.cloud.base_url,
        leader_election = replica.leader_election.is_some(),
        "starting"
    );
    let result =
        crate::operator::replica::run_replica(client, config, replica, Box::pin(shutdown_signal()))
            .await;
    let _ = stop_endpoints.send(());
    Ok(result?)
}

/// The oldest Kubernetes whose API server accepts the CRDs (CEL's `isCIDR` came in 1.31).
pub const MIN_KUBERNETES: (u32, u32) = (1, 31);

/// The Kubernetes API the operator is built against (k8s-openapi's `v1_33` feature).
pub const KUBERNETES_API: &str = "1.33";

/// Refuses an API server older than [`MIN_KUBERNETES`], in one line that says what is needed.
pub async fn ensure_server_supported(client: &kube::Client) -> Result<(), Error> {
    let info = client.apiserver_version().await?;
    match supported(&info.major, &info.minor) {
        Some(true) => Ok(()),
        Some(false) => Err(Error::KubernetesTooOld {
            found: info.git_version,
        }),
        None => {
            tracing::warn!(
                major = %info.major,
                minor = %info.minor,
                version = %info.git_version,
                "the API server's version does not parse; going on without checking it"
            );
            Ok(())
        }
    }
}

/// Whether a server reporting `major` and `minor` (managed services write `31+`) is at least
/// [`MIN_KUBERNETES`]; `None` when they are not numbers.
fn supported(major: &str, minor: &str) -> Option<bool> {
    let number = |text: &str| text.trim_end_matches('+').parse::<u32>().ok();
    Some((number(major)?, number(minor)?) >= MIN_KUBERNETES)
}

/// Every kind's CRD must be served before the controllers start, or their watches would
/// fail in a loop: say so once, with the fix.
pub async fn ensure_crds_installed(client: &kube::Client) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // Asked all at once, for metadata only (a CRD's schema is large, and only its existence
    // matters here): the operator's start waits for the answers.
    let crds = &crds;
    let lookups = crate::kinds::registry::crds()
        .into_iter()
        .map(|crd| async move {
            let name = crd.metadata.name.unwrap_or_default();
            match crds.get_metadata_opt(&name).await {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err(Error::CrdsMissing(format!("{name} not found"))),
                Err(e) => Err(e.into()),
            }
        });
    futures::future::try_join_all(lookups).await.map(drop)
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Parses `500ms`, `30s`, `5m`, `2h`, or a bare number of seconds.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    let (digits, unit) = raw.split_at(raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len()));
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("{raw:?} is not a duration such as 30s, 5m or 500ms"))?;
    let duration = match unit {
        "" | "s" => Duration::from_secs(value),
        "ms" => Duration::from_millis(value),
        "m" => Duration::from_secs(value.saturating_mul(60)),
        "h" => Duration::from_secs(value.saturating_mul(3600)),
        _ => return Err(format!("{raw:?}: unknown unit {unit:?}; use ms, s, m or h")),
    };
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: super::Args,
    }

    #[test]
    fn the_requests_in_flight_are_bounded_by_at_least_one() {
        let parse = |extra: &[&str]| {
            let args = ["gpucloud-operator", "--cloud-url", "http://cloud.example"];
            Command::try_parse_from(args.iter().chain(extra))
                .unwrap()
                .args
        };
        assert_eq!(
            parse(&[]).kube_api_max_in_flight().unwrap(),
            crate::runtime::client_throttle::DEFAULT_MAX_IN_FLIGHT
        );
        assert_eq!(
            parse(&["--kube-api-max-in-flight", "3"])
                .kube_api_max_in_flight()
                .unwrap(),
            3
        );
        let refused = parse(&["--kube-api-max-in-flight", "0"])
            .kube_api_max_in_flight()
            .unwrap_err();
        assert!(
            refused.to_string().contains("--kube-api-max-in-flight"),
            "{refused}"
        );
    }

    #[test]
    // The push is there only when k8s-openapi's feature is `v1_33`.
    #[allow(clippy::vec_init_then_push)]
    fn the_targeted_kubernetes_api_is_k8s_openapis() {
        let mut features = Vec::new();
        k8s_openapi::k8s_if_1_33! { features.push("1.33"); }
        assert_eq!(features, [super::KUBERNETES_API]);
    }

    #[test]
    fn servers_older_than_the_crds_need_are_refused() {
        for (major, minor, expected) in [
            ("1", "33", Some(true)),
            ("1", "31", Some(true)),
            ("1", "31+", Some(true)),
            ("2", "0", Some(true)),
            ("1", "30", Some(false)),
            ("1", "28+", Some(false)),
            ("1", "9", Some(false)),
            ("0", "99", Some(false)),
            ("1", "", None),
            ("one", "31", None),
        ] {
            assert_eq!(super::supported(major, minor), expected, "{major}.{minor}");
        }
        let message = super::Error::KubernetesTooOld {
            found: "v1.28.7".into(),
        }
        .to_string();
        assert!(!message.contains('\n'));
        assert!(
            message.contains("1.31 or newer") && message.contains("v1.28.7"),
            "{message}"
        );
    }

    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("five").is_err());
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("").is_err());
    }
}
