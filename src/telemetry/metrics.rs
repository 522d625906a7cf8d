//! The operator's Prometheus metrics: one registry, every family registered once here.
//!
//! Counters and histograms are updated where things happen (reconciles, cloud calls, watch
//! events). Gauges that describe the objects (how many per condition, what they cost per
//! hour, how many wait for a reconcile) are computed at scrape time from [`StateSource`]s the
//! controllers register, so they can never drift from the caches they describe.
//!
//! Labels never carry a secret: an account is named by a label derived from its key's
//! SHA-256 digest (its first 12 hex digits), never by the key.

use gpucloud_cloud::{CallObserver, CallOutcome, Error as CloudError, Operation};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Buckets of reconcile and cloud-call durations, in seconds: 5 ms to 60 s.
const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    kind: String,
    /// `success`, or the error's metric label.
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    operation: String,
    /// The HTTP status code, or the failure (`timeout`, `transport`) when there was no answer.
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    operation: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccountLabels {
    /// Fingerprint of the API key, never the key.
    account: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceKindLabels {
    resource: String,
}

/// What one kind's controller reports at scrape time.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct KindState {
    /// Objects by (condition type, condition status); an object without conditions yet is
    /// counted under ("Ready", "Unknown").
    pub conditions: BTreeMap<(String, String), i64>,
    /// Summed hourly rate of the kind's cloud resources by (namespace, currency).
    pub hourly_cost: BTreeMap<(String, String), f64>,
    /// Objects due for a reconcile that has not started yet.
    pub queue_depth: i64,
    /// Reconciles running now.
    pub in_flight: i64,
}

/// Computes a kind's [`KindState`] from its controller's cache on every scrape.
pub trait StateSource: Send + Sync {
    fn kind(&self) -> &str;
    fn state(&self) -> KindState;
}

/// Every metric family of the operator.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_duration: Family<KindLabels, Histogram>,
    watch_restarts: Family<KindLabels, Counter>,
    watch_errors: Family<KindLabels, Counter>,
    cloud_requests: Family<CallLabels, Counter>,
    cloud_duration: Family<OperationLabels, Histogram>,
    cloud_retries: Family<RetryLabels, Counter>,
    cloud_throttled: Family<OperationLabels, Counter>,
    rate_limit_waits: Family<OperationLabels, Counter>,
    rate_limit_wait_seconds: Family<OperationLabels, Counter<f64, AtomicU64>>,
    balance: Family<AccountLabels, Gauge<f64, AtomicU64>>,
    orphans: Family<ResourceKindLabels, Gauge>,
    orphan_sweeps: Counter,
    duplicates_found: Family<KindLabels, Counter>,
    duplicates_deleted: Family<KindLabels, Counter>,
    leader: Gauge,
    build_info: Family<BuildLabels, Gauge>,
    sources: Arc<StateSources>,
}

/// What the running binary is: its version, the commit it was built from and the Kubernetes
/// API version it targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: &'static str,
    pub commit: &'static str,
    pub commit_date: &'static str,
    pub kubernetes: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
    kubernetes: String,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let histogram = || Histogram::new(DURATION_BUCKETS);
        let mut metrics = Metrics {
            registry: Registry::with_prefix("gpucloud"),
            reconciles: Family::default(),
            reconcile_duration: Family::new_with_constructor(histogram),
            watch_restarts: Family::default(),
            watch_errors: Family::default(),
            cloud_requests: Family::default(),
            cloud_duration: Family::new_with_constructor(histogram),
            cloud_retries: Family::default(),
            cloud_throttled: Family::default(),
            rate_limit_waits: Family::default(),
            rate_limit_wait_seconds: Family::default(),
            balance: Family::default(),
            orphans: Family::default(),
            orphan_sweeps: Counter::default(),
            duplicates_found: Family::default(),
            duplicates_deleted: Family::default(),
            leader: Gauge::default(),
            build_info: Family::default(),
            sources: Arc::new(StateSources::default()),
        };
        let r = &mut metrics.registry;
        r.register(
            "reconciles",
            "Reconciles by kind and result (success or the error's class)",
            metrics.reconciles.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile",
            metrics.reconcile_duration.clone(),
        );
        r.register(
            "watch_restarts",
            "Watches of a kind's objects that started over with a full list (after a 410 Gone, a cut connection or an error)",
            metrics.watch_restarts.clone(),
        );
        r.register(
            "watch_errors",
            "Errors of a kind's object watch",
            metrics.watch_errors.clone(),
        );
        r.register(
            "cloud_requests",
            "Cloud API requests by operation and HTTP status code (or timeout/transport)",
            metrics.cloud_requests.clone(),
        );
        r.register(
            "cloud_request_duration_seconds",
            "Duration of one cloud API request",
            metrics.cloud_duration.clone(),
        );
        r.register(
            "cloud_retries",
            "Cloud API requests retried, by operation and the error that caused the retry",
            metrics.cloud_retries.clone(),
        );
        r.register(
            "cloud_throttled",
            "Cloud API answers with status 429 (Too Many Requests)",
            metrics.cloud_throttled.clone(),
        );
        r.register(
            "cloud_rate_limit_waits",
            "Cloud API requests that waited for the client-side rate limiter",
            metrics.rate_limit_waits.clone(),
        );
        r.register(
            "cloud_rate_limit_wait_seconds",
            "Time spent waiting for the client-side rate limiter",
            metrics.rate_limit_wait_seconds.clone(),
        );
        r.register(
            "account_balance",
            "Credit balance of each cloud account in use, by account label (12 hex digits of the key's SHA-256)",
            metrics.balance.clone(),
        );
        r.register(
            "orphaned_resources",
            "Cloud resources carrying the operator's mark that no object claims, as of the last sweep",
            metrics.orphans.clone(),
        );
        r.register(
            "orphan_sweeps",
            "Orphan sweeps completed",
            metrics.orphan_sweeps.clone(),
        );
        r.register(
            "duplicates_found",
            "Second cloud resources found under an object's cloud name (a create carried out after the client gave up, then created again)",
            metrics.duplicates_found.clone(),
        );
        r.register(
            "duplicates_deleted",
            "Duplicates deleted after their grace period",
            metrics.duplicates_deleted.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader lease (or runs without leader election)",
            metrics.leader.clone(),
        );
        r.register(
            "build_info",
            "1, labelled with the running binary's version, commit and targeted Kubernetes API",
            metrics.build_info.clone(),
        );
        r.register_collector(Box::new(metrics.sources.clone()));
        metrics
    }

    /// The whole registry in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail; an encoder error would be a bug in a label.
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!(%error, "metrics could not be encoded");
        }
        text
    }

    /// Starts timing a reconcile of `kind`; [`ReconcileTimer::finish`] records it.
    pub fn reconcile_started(&self, kind: &str) -> ReconcileTimer<'_> {
        ReconcileTimer {
            metrics: self,
            kind: kind.to_string(),
            started: Instant::now(),
        }
    }

    /// A kind's object watch started over with a full list.
    pub fn watch_restarted(&self, kind: &str) {
        self.watch_restarts
            .get_or_create(&KindLabels { kind: kind.into() })
            .inc();
    }

    pub fn duplicate_found(&self, kind: &str) {
        self.duplicates_found
            .get_or_create(&KindLabels { kind: kind.into() })
            .inc();
    }

    pub fn duplicate_deleted(&self, kind: &str) {
        self.duplicates_deleted
            .get_or_create(&KindLabels { kind: kind.into() })
            .inc();
    }

    pub fn watch_failed(&self, kind: &str) {
        self.watch_errors
            .get_or_create(&KindLabels { kind: kind.into() })
            .inc();
    }

    /// `account` is the account's label, never its key.
    pub fn set_balance(&self, account: &str, balance: f64) {
        self.balance
            .get_or_create(&AccountLabels {
                account: account.into(),
            })
            .set(balance);
    }

    /// Reports what the running binary is (`gpucloud_build_info`, always 1).
    pub fn set_build_info(&self, build: &BuildInfo) {
        self.build_info
            .get_or_create(&BuildLabels {
                version: build.version.into(),
                commit: build.commit.into(),
                kubernetes: build.kubernetes.into(),
            })
            .set(1);
    }

    /// `account` is no longer used: its balance is no longer reported.
    pub fn remove_balance(&self, account: &str) {
        self.balance.remove(&AccountLabels {
            account: account.into(),
        });
    }

    /// The result of one orphan sweep: orphans by cloud resource kind (kinds with none
    /// included, so a cleared orphan goes back to 0).
    pub fn set_orphans<'a>(&self, counts: impl IntoIterator<Item = (&'a str, i64)>) {
        for (resource, count) in counts {
            self.orphans
                .get_or_create(&ResourceKindLabels {
                    resource: resource.into(),
                })
                .set(count);
        }
        self.orphan_sweeps.inc();
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Adds a kind's scrape-time state.
    pub fn register_state(&self, source: Arc<dyn StateSource>) {
        self.sources
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(source);
    }
}

/// Times one reconcile; dropping it without `finish` records nothing.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    kind: String,
    started: Instant,
}

impl ReconcileTimer<'_> {
    /// Records the reconcile with `result`: `success` or an error's metric label.
    pub fn finish(self, result: &str) {
        self.metrics
            .reconcile_duration
            .get_or_create(&KindLabels {
                kind: self.kind.clone(),
            })
            .observe(self.started.elapsed().as_secs_f64());
        self.metrics
            .reconciles
            .get_or_create(&ReconcileLabels {
                kind: self.kind,
                result: result.into(),
            })
            .inc();
    }
}

impl CallObserver for Metrics {
    fn on_call(&self, operation: Operation, outcome: &CallOutcome, elapsed: Duration) {
        let code = match (outcome.status, outcome.error) {
            (Some(status), _) => status.to_string(),
            (None, Some(error)) => error.to_string(),
            (None, None) => "none".to_string(),
        };
        if outcome.status == Some(429) {
            self.cloud_throttled
                .get_or_create(&OperationLabels {
                    operation: operation.name().into(),
                })
                .inc();
        }
        self.cloud_requests
            .get_or_create(&CallLabels {
                operation: operation.name().into(),
                code,
            })
            .inc();
        self.cloud_duration
            .get_or_create(&OperationLabels {
                operation: operation.name().into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    fn on_retry(&self, operation: Operation, _next: u32, error: &CloudError, _delay: Duration) {
        self.cloud_retries
            .get_or_create(&RetryLabels {
                operation: operation.name().into(),
                reason: error.metric_label().into(),
            })
            .inc();
    }

    fn on_rate_limit_wait(&self, operation: Operation, waited: Duration) {
        let labels = OperationLabels {
            operation: operation.name().into(),
        };
        self.rate_limit_waits.get_or_create(&labels).inc();
        self.rate_limit_wait_seconds
            .get_or_create(&labels)
            .inc_by(waited.as_secs_f64());
    }
}

/// The registered [`StateSource`]s, encoded as gauges on every scrape (the registry adds
/// the `gpucloud_` prefix).
#[derive(Default)]
struct StateSources {
    sources: Mutex<Vec<Arc<dyn StateSource>>>,
}

impl std::fmt::Debug for StateSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateSources").finish_non_exhaustive()
    }
}

impl Collector for StateSources {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let states: Vec<(String, KindState)> = self
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|s| (s.kind().to_string(), s.state()))
            .collect();

        let mut objects = Vec::new();
        let mut costs = Vec::new();
        let mut queued = Vec::new();
        let mut running = Vec::new();
        for (kind, state) in &states {
            for ((condition, status), count) in &state.conditions {
                let labels = vec![
                    ("kind", kind.as_str()),
                    ("condition", condition),
                    ("status", status),
                ];
                objects.push((labels, *count));
            }
            for ((namespace, currency), cost) in &state.hourly_cost {
                let labels = vec![
                    ("kind", kind.as_str()),
                    ("namespace", namespace),
                    ("currency", currency),
                ];
                costs.push((labels, *cost));
            }
            queued.push((vec![("kind", kind.as_str())], state.queue_depth));
            running.push((vec![("kind", kind.as_str())], state.in_flight));
        }
        gauge_family(
            &mut encoder,
            "objects",
            "Objects by kind and by the status of each kstatus condition",
            &objects,
        )?;
        gauge_family(
            &mut encoder,
            "hourly_cost",
            "Summed hourly rate of the cloud resources the operator manages, by kind, namespace and currency",
            &costs,
        )?;
        gauge_family(
            &mut encoder,
            "queue_depth",
            "Objects due for a reconcile that has not started yet",
            &queued,
        )?;
        gauge_family(
            &mut encoder,
            "reconciles_in_flight",
            "Reconciles running now",
            &running,
        )?;
        Ok(())
    }
}

/// One gauge family computed at scrape time: a sample per label set.
fn gauge_family<N: EncodeGaugeValue + Copy>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: &[(Vec<(&str, &str)>, N)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    for (labels, value) in samples {
        ConstGauge::new(*value).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(KindState);

    impl StateSource for Fixed {
        fn kind(&self) -> &str {
            "GpuInstance"
        }
        fn state(&self) -> KindState {
            self.0.clone()
        }
    }

    #[test]
    fn every_family_is_exposed_with_the_prefix() {
        let metrics = Metrics::new();
        metrics.reconcile_started("GpuInstance").finish("success");
        metrics.watch_restarted("Volume");
        metrics.set_balance("fp-1234", 12.5);
        metrics.set_leader(true);
        metrics.set_orphans([("instance", 2)]);
        metrics.set_build_info(&BuildInfo {
            version: "0.1.0",
            commit: "0123456789ab",
            commit_date: "2026-11-27T01:00:00+00:00",
            kubernetes: "1.33",
        });
        let throttled = CallOutcome {
            status: Some(429),
            error: Some("rate_limited"),
        };
        metrics.on_call(
            Operation::ListInstances,
            &throttled,
            Duration::from_millis(3),
        );
        let error = CloudError::Timeout {
            operation: Operation::ListInstances,
            after: Duration::from_secs(1),
        };
        metrics.on_retry(Operation::ListInstances, 2, &error, Duration::from_secs(1));
        metrics.on_rate_limit_wait(Operation::CreateInstance, Duration::from_millis(250));
        let mut state = KindState::default();
        state.conditions.insert(("Ready".into(), "True".into()), 3);
        state
            .hourly_cost
            .insert(("team-a".into(), "USD".into()), 5.98);
        state.queue_depth = 1;
        metrics.register_state(Arc::new(Fixed(state)));
        let text = metrics.encode();
        for line in [
            r#"gpucloud_reconciles_total{kind="GpuInstance",result="success"} 1"#,
            r#"gpucloud_reconcile_duration_seconds_count{kind="GpuInstance"} 1"#,
            r#"gpucloud_watch_restarts_total{kind="Volume"} 1"#,
            r#"gpucloud_account_balance{account="fp-1234"} 12.5"#,
            r#"gpucloud_leader 1"#,
            r#"gpucloud_build_info{version="0.1.0",commit="0123456789ab",kubernetes="1.33"} 1"#,
            r#"gpucloud_orphaned_resources{resource="instance"} 2"#,
            r#"gpucloud_objects{kind="GpuInstance",condition="Ready",status="True"} 3"#,
            r#"gpucloud_hourly_cost{kind="GpuInstance",namespace="team-a",currency="USD"} 5.98"#,
            r#"gpucloud_queue_depth{kind="GpuInstance"} 1"#,
            r#"gpucloud_cloud_requests_total{operation="ListInstances",code="429"} 1"#,
            r#"gpucloud_cloud_throttled_total{operation="ListInstances"} 1"#,
            r#"gpucloud_cloud_retries_total{operation="ListInstances",reason="timeout"} 1"#,
            r#"gpucloud_cloud_rate_limit_waits_total{operation="CreateInstance"} 1"#,
            r#"gpucloud_cloud_rate_limit_wait_seconds_total{operation="CreateInstance"} 0.25"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    /// Every series the sample Grafana dashboard queries is one the operator exports.
    #[test]
    fn the_grafana_dashboard_queries_exported_families() {
        let metrics = Metrics::new();
        metrics.reconcile_started("GpuInstance").finish("success");
        metrics.watch_restarted("Volume");
        metrics.watch_failed("Volume");
        metrics.set_balance("fp", 1.0);
        metrics.set_orphans([("instance", 0)]);
        let ok = CallOutcome {
            status: Some(429),
            error: None,
        };
        metrics.on_call(Operation::ListInstances, &ok, Duration::ZERO);
        let error = CloudError::Timeout {
            operation: Operation::ListInstances,
            after: Duration::ZERO,
        };
        metrics.on_retry(Operation::ListInstances, 2, &error, Duration::ZERO);
        metrics.on_rate_limit_wait(Operation::ListInstances, Duration::ZERO);
        let mut state = KindState::default();
        state.conditions.insert(("Ready".into(), "True".into()), 1);
        state.hourly_cost.insert(("a".into(), "USD".into()), 1.0);
        metrics.register_state(Arc::new(Fixed(state)));
        let exported = metrics.encode();

        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../deploy/grafana/gpucloud-operator.json"))
                .expect("the dashboard is JSON");
        let panels = dashboard["panels"].as_array().expect("panels");
        let mut checked = 0;
        for target in panels
            .iter()
            .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        {
            let expr = target["expr"].as_str().expect("an expression");
            for (at, _) in expr.match_indices("gpucloud_") {
                let name: String = expr[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    exported.contains(&format!("\n{name}{{"))
                        || exported.contains(&format!("\n{name} ")),
                    "the dashboard queries {name}, which is not exported"
                );
                checked += 1;
            }
        }
        assert!(checked >= 12, "only {checked} series checked");
    }
}
