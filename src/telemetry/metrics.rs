//! The operator's Prometheus metrics: one registry, every family registered once here. Ours
//! carry the prefix `gpucloud_`; beside them, without it, the names controller-runtime and
//! client-go serve (`controller_runtime_*`, `workqueue_*`, `rest_client_*`), fed by the same
//! updates, and the standard process metrics (`process.rs`).
//!
//! Counters and histograms are updated where things happen (reconciles, cloud calls, watch
//! events). Gauges that describe the objects (how many per condition, what they cost per
//! hour, how many wait for a reconcile) are computed at scrape time from [`StateSource`]s the
//! controllers register, so they can never drift from the caches they describe.
//!
//! Labels never carry a secret: an account is named by a label derived from its key's
//! SHA-256 digest (its first 12 hex digits), never by the key.

use gpucloud_cloud::{CallObserver, CallOutcome, Error as CloudError, Operation, Retry};
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

/// The metric labels of the errors the cloud client retries (`ErrorClass::Transient`).
const TRANSIENT_REASONS: [&str; 4] = ["rate_limited", "server_error", "timeout", "transport"];

/// Buckets of reconcile and cloud-call durations, in seconds: 5 ms to 60 s.
const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

/// client-go's buckets of `rest_client_request_duration_seconds` (component-base's
/// restclient metrics), so that dashboards made for Kubernetes' own clients read ours alike.
const REST_CLIENT_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// controller-runtime's workqueue buckets: 10 ns to 1,000 s, by factors of 10.
fn workqueue_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        1e-8, 10.0, 12,
    ))
}

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

/// controller-runtime's label of a controller: the kind's name in lower case.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerResultLabels {
    controller: String,
    /// `success`, `error`, `requeue` or `requeue_after`.
    result: String,
}

/// A workqueue's labels: controller-runtime names each controller's queue after it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    controller: String,
}

impl QueueLabels {
    fn of(kind: &str) -> Self {
        let controller = controller_name(kind);
        QueueLabels {
            name: controller.clone(),
            controller,
        }
    }
}

/// client-go's `rest_client_requests_total` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestResultLabels {
    /// The HTTP status code, or `<error>` when there was no answer.
    code: String,
    method: String,
    host: String,
}

/// client-go's `rest_client_request_duration_seconds` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestLatencyLabels {
    verb: String,
    host: String,
}

/// The `controller` label of a kind's controller-runtime metrics (`GpuInstance` →
/// `gpuinstance`), as controller-runtime names a controller built for a kind.
pub fn controller_name(kind: &str) -> String {
    kind.to_lowercase()
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
    /// What the cloud's billing charged for the kind's cloud resources, each since it was
    /// made, by (namespace, currency).
    pub spend: BTreeMap<(String, String), f64>,
    /// Objects stalled over whose cloud resource it is (`ClaimConflict`, `ForeignRecord`).
    pub claim_conflicts: i64,
    /// Objects due for a reconcile that has not started yet.
    pub queue_depth: i64,
    /// Reconciles running now.
    pub in_flight: i64,
    /// Reconciles the kind's controller runs at once at most (0: no limit).
    pub max_concurrent: i64,
}

impl KindState {
    /// Adds `other` (the same kind's controller in another namespace).
    fn merge(&mut self, other: KindState) {
        for (key, count) in other.conditions {
            *self.conditions.entry(key).or_default() += count;
        }
        for (key, cost) in other.hourly_cost {
            *self.hourly_cost.entry(key).or_default() += cost;
        }
        for (key, spent) in other.spend {
            *self.spend.entry(key).or_default() += spent;
        }
        self.claim_conflicts += other.claim_conflicts;
        self.queue_depth += other.queue_depth;
        self.in_flight += other.in_flight;
        self.max_concurrent += other.max_concurrent;
    }
}

/// How a reconcile ended, for `gpucloud_reconciles` and controller-runtime's names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReconcileResult<'a> {
    /// Done, waiting for a change.
    Done,
    /// Done, to run again after the delay.
    RequeueAfter(Duration),
    /// Failed with the error's metric label; `terminal` when it will fail until someone
    /// changes something.
    Failed { label: &'a str, terminal: bool },
}

impl ReconcileResult<'_> {
    /// `gpucloud_reconciles`' result: `success` or the error's class.
    fn label(&self) -> &str {
        match self {
            ReconcileResult::Done | ReconcileResult::RequeueAfter(_) => "success",
            ReconcileResult::Failed { label, .. } => label,
        }
    }

    /// `controller_runtime_reconcile_total`'s result.
    fn controller_runtime(&self) -> &'static str {
        match self {
            ReconcileResult::Done => "success",
            ReconcileResult::RequeueAfter(after) if after.is_zero() => "requeue",
            ReconcileResult::RequeueAfter(_) => "requeue_after",
            ReconcileResult::Failed { .. } => "error",
        }
    }
}

/// Computes a kind's [`KindState`] from its controller's cache on every scrape.
pub trait StateSource: Send + Sync {
    fn kind(&self) -> &str;
    fn state(&self) -> KindState;
}

/// One Budget's figures, as its status and spec say them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BudgetFigures {
    pub namespace: String,
    pub name: String,
    pub currency: String,
    pub hourly_rate: Option<f64>,
    pub max_hourly_rate: f64,
    pub spent: Option<f64>,
    pub max_spend: Option<f64>,
}

/// The Budgets a scope's Budget controller sees, read at scrape time.
pub trait BudgetSource: Send + Sync {
    fn budgets(&self) -> Vec<BudgetFigures>;
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
    // controller-runtime's and client-go's names, for dashboards and alerts made for them.
    rest_requests: Family<RestResultLabels, Counter>,
    rest_duration: Family<RestLatencyLabels, Histogram>,
    rest_rate_limiter: Family<RestLatencyLabels, Histogram>,
    cr_reconciles: Family<ControllerResultLabels, Counter>,
    cr_errors: Family<ControllerLabels, Counter>,
    cr_terminal_errors: Family<ControllerLabels, Counter>,
    cr_reconcile_time: Family<ControllerLabels, Histogram>,
    queue_retries: Family<QueueLabels, Counter>,
    queue_wait: Family<QueueLabels, Histogram>,
    queue_work: Family<QueueLabels, Histogram>,
}

/// A registered metric whose family is described (`# HELP`, `# TYPE`) on every scrape, also
/// before its first series: `prometheus-client` leaves an empty family out entirely, and the
/// documented families must all be there from the first scrape, for the scraper and for
/// whoever reads the body to find what the operator serves.
#[derive(Debug)]
struct Described<M>(M);

impl<M: EncodeMetric> EncodeMetric for Described<M> {
    fn encode(&self, encoder: prometheus_client::encoding::MetricEncoder) -> std::fmt::Result {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        false
    }
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
            registry: Registry::default(),
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
            rest_requests: Family::default(),
            rest_duration: Family::new_with_constructor(|| Histogram::new(REST_CLIENT_BUCKETS)),
            rest_rate_limiter: Family::new_with_constructor(|| Histogram::new(REST_CLIENT_BUCKETS)),
            cr_reconciles: Family::default(),
            cr_errors: Family::default(),
            cr_terminal_errors: Family::default(),
            cr_reconcile_time: Family::new_with_constructor(histogram),
            queue_retries: Family::default(),
            queue_wait: Family::new_with_constructor(workqueue_histogram),
            queue_work: Family::new_with_constructor(workqueue_histogram),
        };
        metrics.register_common_names();
        metrics.serve_cloud_counters_from_zero();
        let r = metrics.registry.sub_registry_with_prefix("gpucloud");
        r.register(
            "reconciles",
            "Reconciles by kind and result (success or the error's class)",
            Described(metrics.reconciles.clone()),
        );
        r.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile",
            Described(metrics.reconcile_duration.clone()),
        );
        r.register(
            "watch_restarts",
            "Watches of a kind's objects that started over with a full list (after a 410 Gone, a cut connection or an error)",
            Described(metrics.watch_restarts.clone()),
        );
        r.register(
            "watch_errors",
            "Errors of a kind's object watch",
            Described(metrics.watch_errors.clone()),
        );
        r.register(
            "cloud_requests",
            "Cloud API requests by operation and HTTP status code (or timeout/transport)",
            Described(metrics.cloud_requests.clone()),
        );
        r.register(
            "cloud_request_duration_seconds",
            "Duration of one cloud API request",
            Described(metrics.cloud_duration.clone()),
        );
        r.register(
            "cloud_retries",
            "Cloud API requests retried, by operation and the error that caused the retry",
            Described(metrics.cloud_retries.clone()),
        );
        r.register(
            "cloud_throttled",
            "Cloud API answers with status 429 (Too Many Requests)",
            Described(metrics.cloud_throttled.clone()),
        );
        r.register(
            "cloud_rate_limit_waits",
            "Cloud API requests that waited for the client-side rate limiter",
            Described(metrics.rate_limit_waits.clone()),
        );
        r.register(
            "cloud_rate_limit_wait_seconds",
            "Time spent waiting for the client-side rate limiter",
            Described(metrics.rate_limit_wait_seconds.clone()),
        );
        r.register(
            "account_balance",
            "Credit balance of each cloud account in use, by account label (12 hex digits of the key's SHA-256)",
            Described(metrics.balance.clone()),
        );
        r.register(
            "orphaned_resources",
            "Cloud resources carrying the operator's mark that no object claims, as of the last sweep",
            Described(metrics.orphans.clone()),
        );
        r.register(
            "orphan_sweeps",
            "Orphan sweeps completed",
            Described(metrics.orphan_sweeps.clone()),
        );
        r.register(
            "duplicates_found",
            "Second cloud resources found under an object's cloud name (a create carried out after the client gave up, then created again)",
            Described(metrics.duplicates_found.clone()),
        );
        r.register(
            "duplicates_deleted",
            "Duplicates deleted after their grace period",
            Described(metrics.duplicates_deleted.clone()),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader lease (or runs without leader election)",
            Described(metrics.leader.clone()),
        );
        r.register(
            "build_info",
            "1, labelled with the running binary's version, commit and targeted Kubernetes API",
            Described(metrics.build_info.clone()),
        );
        metrics
            .registry
            .register_collector(Box::new(metrics.sources.clone()));
        #[cfg(target_os = "linux")]
        metrics
            .registry
            .register_collector(Box::new(crate::process::ProcessCollector));
        metrics
    }

    /// Every cloud operation's counters of throttling, rate-limiter waits and retries, at 0
    /// before the first event: a series that first appears at 1 is missed by `increase()` and
    /// `rate()`, so an alert on the first 429 would not fire. Retries only under the reasons
    /// the client retries the operation for (`gpucloud_cloud::client::transport`): a transient
    /// error for an idempotent call, a request never sent for an unsafe one, none for a
    /// billed create.
    fn serve_cloud_counters_from_zero(&self) {
        for operation in Operation::ALL {
            let labels = OperationLabels {
                operation: operation.name().into(),
            };
            let _ = self.cloud_throttled.get_or_create(&labels);
            let _ = self.rate_limit_waits.get_or_create(&labels);
            let _ = self.rate_limit_wait_seconds.get_or_create(&labels);
            let reasons: &[&str] = match operation.retry() {
                Retry::Idempotent => &TRANSIENT_REASONS,
                Retry::Unsafe => &["transport"],
                Retry::BilledCreate => &[],
            };
            for reason in reasons {
                let _ = self.cloud_retries.get_or_create(&RetryLabels {
                    operation: operation.name().into(),
                    reason: (*reason).into(),
                });
            }
        }
    }

    /// The families named as controller-runtime and client-go name them (without our
    /// prefix). Their scrape-time gauges are encoded by [`StateSources`].
    fn register_common_names(&mut self) {
        let r = &mut self.registry;
        r.register(
            "rest_client_requests",
            "Number of HTTP requests to the Kubernetes API, partitioned by status code, method, and host",
            Described(self.rest_requests.clone()),
        );
        r.register(
            "rest_client_request_duration_seconds",
            "Kubernetes API request latency in seconds (to the response's headers), by verb and host",
            Described(self.rest_duration.clone()),
        );
        r.register(
            "rest_client_rate_limiter_duration_seconds",
            "Kubernetes API client-side rate limiter latency in seconds, by verb and host (observed only with --kube-api-qps set)",
            Described(self.rest_rate_limiter.clone()),
        );
        r.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            Described(self.cr_reconciles.clone()),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            Described(self.cr_errors.clone()),
        );
        r.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller (errors that fail until the object or its environment changes)",
            Described(self.cr_terminal_errors.clone()),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            Described(self.cr_reconcile_time.clone()),
        );
        r.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            Described(self.queue_retries.clone()),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            Described(self.queue_wait.clone()),
        );
        r.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            Described(self.queue_work.clone()),
        );
    }

    /// The whole registry in `format`.
    pub fn encode_as(&self, format: crate::Format) -> String {
        match format {
            crate::Format::OpenMetrics => self.encode(),
            crate::Format::PrometheusText => crate::exposition::prometheus_text(&self.encode()),
        }
    }

    /// The whole registry in the OpenMetrics text format.
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

    /// An object of `kind` waited `waited` between becoming due and its reconcile starting.
    pub fn dequeued(&self, kind: &str, waited: Duration) {
        self.queue_wait
            .get_or_create(&QueueLabels::of(kind))
            .observe(waited.as_secs_f64());
    }

    /// One request of the Kubernetes client: `method` (GET, POST, ...), the API server's
    /// `host`, and the status code (`None`: no answer), timed to the response's headers.
    pub fn kube_request(&self, method: &str, host: &str, code: Option<u16>, elapsed: Duration) {
        self.rest_requests
            .get_or_create(&RestResultLabels {
                code: code.map_or_else(|| "<error>".to_string(), |c| c.to_string()),
                method: method.into(),
                host: host.into(),
            })
            .inc();
        self.rest_duration
            .get_or_create(&RestLatencyLabels {
                verb: method.into(),
                host: host.into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// How long one request of the Kubernetes client waited for its client-side rate limiter.
    pub fn kube_request_throttled(&self, method: &str, host: &str, waited: Duration) {
        self.rest_rate_limiter
            .get_or_create(&RestLatencyLabels {
                verb: method.into(),
                host: host.into(),
            })
            .observe(waited.as_secs_f64());
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

    /// Adds a kind's scrape-time state, and serves the kind's counters from 0 on: a series
    /// that first appears at 1 is missed by `increase()`, so an alert on the first duplicate
    /// would never fire. controller-runtime starts its reconcile counters at 0 the same way.
    /// Adds a scope's Budgets to what a scrape reports.
    pub fn register_budgets(&self, source: Arc<dyn BudgetSource>) {
        self.sources
            .budgets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(source);
    }

    pub fn register_state(&self, source: Arc<dyn StateSource>) {
        let kind = source.kind().to_string();
        let labels = KindLabels { kind: kind.clone() };
        for family in [
            &self.duplicates_found,
            &self.duplicates_deleted,
            &self.watch_restarts,
            &self.watch_errors,
        ] {
            let _ = family.get_or_create(&labels);
        }
        let controller = ControllerLabels {
            controller: controller_name(&kind),
        };
        for result in ["success", "error", "requeue", "requeue_after"] {
            let _ = self.cr_reconciles.get_or_create(&ControllerResultLabels {
                controller: controller.controller.clone(),
                result: result.into(),
            });
        }
        let _ = self.cr_errors.get_or_create(&controller);
        let _ = self.cr_terminal_errors.get_or_create(&controller);
        let _ = self.queue_retries.get_or_create(&QueueLabels::of(&kind));
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
    /// Records the reconcile under our names and controller-runtime's.
    pub fn finish(self, result: ReconcileResult<'_>) {
        let m = self.metrics;
        let seconds = self.started.elapsed().as_secs_f64();
        let controller = ControllerLabels {
            controller: controller_name(&self.kind),
        };
        let queue = QueueLabels::of(&self.kind);
        for histogram in [
            m.reconcile_duration.get_or_create(&KindLabels {
                kind: self.kind.clone(),
            }),
            m.cr_reconcile_time.get_or_create(&controller),
            m.queue_work.get_or_create(&queue),
        ] {
            histogram.observe(seconds);
        }
        m.reconciles
            .get_or_create(&ReconcileLabels {
                kind: self.kind.clone(),
                result: result.label().into(),
            })
            .inc();
        m.cr_reconciles
            .get_or_create(&ControllerResultLabels {
                controller: controller.controller.clone(),
                result: result.controller_runtime().into(),
            })
            .inc();
        if let ReconcileResult::Failed { terminal, .. } = result {
            // Every failed reconcile is requeued with backoff (`error_policy`): a retry.
            m.cr_errors.get_or_create(&controller).inc();
            m.queue_retries.get_or_create(&queue).inc();
            if terminal {
                m.cr_terminal_errors.get_or_create(&controller).inc();
            }
        }
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

/// The registered [`StateSource`]s, encoded as gauges on every scrape: ours, and
/// controller-runtime's names for the same numbers. A kind watched in several namespaces has a
/// controller (and a source) per namespace; their states are added up.
#[derive(Default)]
struct StateSources {
    sources: Mutex<Vec<Arc<dyn StateSource>>>,
    budgets: Mutex<Vec<Arc<dyn BudgetSource>>>,
}

impl std::fmt::Debug for StateSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateSources").finish_non_exhaustive()
    }
}

impl StateSources {
    /// `gpucloud_budget_*`: each Budget's hourly rate and spend next to its limits.
    fn encode_budgets(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let budgets: Vec<BudgetFigures> = self
            .budgets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flat_map(|source| source.budgets())
            .collect();
        type Figure = fn(&BudgetFigures) -> Option<f64>;
        let families: [(&str, &str, Figure); 4] = [
            (
                "gpucloud_budget_hourly_rate",
                "What the objects a Budget counts cost per hour together, reservations included",
                |b| b.hourly_rate,
            ),
            (
                "gpucloud_budget_max_hourly_rate",
                "A Budget's maxHourlyRate",
                |b| Some(b.max_hourly_rate),
            ),
            (
                "gpucloud_budget_spent",
                "What the objects a Budget counts cost in its current period, from the cloud's billing",
                |b| b.spent,
            ),
            (
                "gpucloud_budget_max_spend",
                "A Budget's maxSpend per period",
                |b| b.max_spend,
            ),
        ];
        for (name, help, figure) in families {
            let samples: Vec<(Vec<(&str, &str)>, f64)> = budgets
                .iter()
                .filter_map(|b| {
                    let labels = vec![
                        ("object_namespace", b.namespace.as_str()),
                        ("budget", b.name.as_str()),
                        ("currency", b.currency.as_str()),
                    ];
                    figure(b).map(|value| (labels, value))
                })
                .collect();
            gauge_family(encoder, name, help, &samples)?;
        }
        Ok(())
    }
}

impl Collector for StateSources {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_budgets(&mut encoder)?;
        let mut states: BTreeMap<String, KindState> = BTreeMap::new();
        for source in self
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            states
                .entry(source.kind().to_string())
                .or_default()
                .merge(source.state());
        }
        let controllers: Vec<String> = states.keys().map(|k| controller_name(k)).collect();

        let mut objects = Vec::new();
        let mut costs = Vec::new();
        let mut spend = Vec::new();
        let mut queued = Vec::new();
        let mut conflicts = Vec::new();
        let mut running = Vec::new();
        let (mut workers, mut max_workers, mut depth) = (Vec::new(), Vec::new(), Vec::new());
        for ((kind, state), controller) in states.iter().zip(&controllers) {
            let controller = controller.as_str();
            workers.push((vec![("controller", controller)], state.in_flight));
            max_workers.push((vec![("controller", controller)], state.max_concurrent));
            depth.push((
                vec![("name", controller), ("controller", controller)],
                state.queue_depth,
            ));
            for ((condition, status), count) in &state.conditions {
                let labels = vec![
                    ("kind", kind.as_str()),
                    ("condition", condition),
                    ("status", status),
                ];
                objects.push((labels, *count));
            }
            // Not `namespace`: a scrape's target labels (namespace, pod, job, ...) would take
            // its place.
            fn money<'a>(
                kind: &'a str,
                (namespace, currency): &'a (String, String),
            ) -> Vec<(&'static str, &'a str)> {
                vec![
                    ("kind", kind),
                    ("object_namespace", namespace),
                    ("currency", currency),
                ]
            }
            for (key, cost) in &state.hourly_cost {
                costs.push((money(kind, key), *cost));
            }
            for (key, spent) in &state.spend {
                spend.push((money(kind, key), *spent));
            }
            queued.push((vec![("kind", kind.as_str())], state.queue_depth));
            conflicts.push((vec![("kind", kind.as_str())], state.claim_conflicts));
            running.push((vec![("kind", kind.as_str())], state.in_flight));
        }
        gauge_family(
            &mut encoder,
            "gpucloud_objects",
            "Objects by kind and by the status of each kstatus condition",
            &objects,
        )?;
        gauge_family(
            &mut encoder,
            "gpucloud_hourly_cost",
            "Summed hourly rate of the cloud resources the operator manages, by kind, namespace and currency",
            &costs,
        )?;
        gauge_family(
            &mut encoder,
            "gpucloud_spend",
            "What the cloud's billing charged for the cloud resources the operator manages, each since it was made, by kind, namespace and currency (billing read once per resync interval per account)",
            &spend,
        )?;
        gauge_family(
            &mut encoder,
            "gpucloud_claim_conflicts",
            "Objects that do nothing to the cloud resource their status records because another object claims it or it is not provably theirs (Stalled ClaimConflict or ForeignRecord)",
            &conflicts,
        )?;
        gauge_family(
            &mut encoder,
            "gpucloud_queue_depth",
            "Objects due for a reconcile that has not started yet",
            &queued,
        )?;
        gauge_family(
            &mut encoder,
            "gpucloud_reconciles_in_flight",
            "Reconciles running now",
            &running,
        )?;
        gauge_family(
            &mut encoder,
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            &workers,
        )?;
        gauge_family(
            &mut encoder,
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            &max_workers,
        )?;
        gauge_family(
            &mut encoder,
            "workqueue_depth",
            "Current depth of workqueue: objects due for a reconcile that has not started",
            &depth,
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
        metrics
            .reconcile_started("GpuInstance")
            .finish(ReconcileResult::RequeueAfter(Duration::from_secs(1)));
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
        state.spend.insert(("team-a".into(), "USD".into()), 71.76);
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
            r#"gpucloud_hourly_cost{kind="GpuInstance",object_namespace="team-a",currency="USD"} 5.98"#,
            r#"gpucloud_spend{kind="GpuInstance",object_namespace="team-a",currency="USD"} 71.76"#,
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

    /// A fresh registry describes every family, and serves every operation's throttling,
    /// rate-limiter and retry counters at 0, retries only for the reasons the client retries
    /// that operation for.
    #[test]
    fn cloud_counters_are_served_from_zero() {
        let text = Metrics::new().encode();
        for operation in Operation::ALL {
            let name = operation.name();
            for family in [
                "cloud_throttled_total",
                "cloud_rate_limit_waits_total",
                "cloud_rate_limit_wait_seconds_total",
            ] {
                let line = format!("\ngpucloud_{family}{{operation=\"{name}\"}} 0");
                assert!(text.contains(&line), "missing {line}");
            }
            let retried = |reason: &str| {
                text.contains(&format!(
                    "\ngpucloud_cloud_retries_total{{operation=\"{name}\",reason=\"{reason}\"}} 0"
                ))
            };
            match operation.retry() {
                Retry::Idempotent => assert!(TRANSIENT_REASONS.iter().all(|r| retried(r))),
                Retry::Unsafe => assert!(retried("transport") && !retried("timeout")),
                Retry::BilledCreate => assert!(!retried("transport"), "{name}"),
            }
        }
        // Families without a series yet are described all the same.
        for family in [
            "# TYPE gpucloud_account_balance gauge",
            "# TYPE gpucloud_reconciles counter",
            "# TYPE gpucloud_reconcile_duration_seconds histogram",
            "# TYPE gpucloud_orphaned_resources gauge",
            "# TYPE rest_client_rate_limiter_duration_seconds histogram",
        ] {
            assert!(text.contains(family), "missing {family}");
        }
        let timeout = CloudError::Timeout {
            operation: Operation::ListInstances,
            after: Duration::from_secs(1),
        };
        assert!(timeout.is_retryable());
        assert!(TRANSIENT_REASONS.contains(&timeout.metric_label()));
    }

    /// controller-runtime's and client-go's names come from the same updates as ours, and a
    /// kind watched in two namespaces is one series per family.
    #[test]
    fn controller_runtime_names_follow_the_same_updates() {
        let metrics = Metrics::new();
        metrics
            .reconcile_started("GpuInstance")
            .finish(ReconcileResult::Done);
        metrics
            .reconcile_started("GpuInstance")
            .finish(ReconcileResult::RequeueAfter(Duration::from_secs(30)));
        metrics
            .reconcile_started("GpuInstance")
            .finish(ReconcileResult::RequeueAfter(Duration::ZERO));
        metrics
            .reconcile_started("GpuInstance")
            .finish(ReconcileResult::Failed {
                label: "cloud_unavailable",
                terminal: false,
            });
        metrics
            .reconcile_started("GpuInstance")
            .finish(ReconcileResult::Failed {
                label: "invalid_spec",
                terminal: true,
            });
        metrics.dequeued("GpuInstance", Duration::from_millis(20));
        metrics.kube_request("GET", "10.96.0.1:443", Some(200), Duration::from_millis(3));
        metrics.kube_request("PATCH", "10.96.0.1:443", None, Duration::from_millis(3));
        for namespace_state in [(2, 1, 4), (1, 0, 4)] {
            let (queue_depth, in_flight, max_concurrent) = namespace_state;
            metrics.register_state(Arc::new(Fixed(KindState {
                queue_depth,
                in_flight,
                max_concurrent,
                ..KindState::default()
            })));
        }
        let text = metrics.encode();
        for line in [
            r#"controller_runtime_reconcile_total{controller="gpuinstance",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="gpuinstance",result="requeue_after"} 1"#,
            r#"controller_runtime_reconcile_total{controller="gpuinstance",result="requeue"} 1"#,
            r#"controller_runtime_reconcile_total{controller="gpuinstance",result="error"} 2"#,
            r#"controller_runtime_reconcile_errors_total{controller="gpuinstance"} 2"#,
            r#"controller_runtime_terminal_reconcile_errors_total{controller="gpuinstance"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="gpuinstance"} 5"#,
            r#"gpucloud_reconciles_total{kind="GpuInstance",result="success"} 3"#,
            r#"gpucloud_reconciles_total{kind="GpuInstance",result="cloud_unavailable"} 1"#,
            r#"workqueue_retries_total{name="gpuinstance",controller="gpuinstance"} 2"#,
            r#"workqueue_work_duration_seconds_count{name="gpuinstance",controller="gpuinstance"} 5"#,
            r#"workqueue_queue_duration_seconds_count{name="gpuinstance",controller="gpuinstance"} 1"#,
            r#"workqueue_depth{name="gpuinstance",controller="gpuinstance"} 3"#,
            r#"controller_runtime_active_workers{controller="gpuinstance"} 1"#,
            r#"controller_runtime_max_concurrent_reconciles{controller="gpuinstance"} 8"#,
            r#"gpucloud_queue_depth{kind="GpuInstance"} 3"#,
            r#"rest_client_requests_total{code="200",method="GET",host="10.96.0.1:443"} 1"#,
            r#"rest_client_requests_total{code="<error>",method="PATCH",host="10.96.0.1:443"} 1"#,
            r#"rest_client_request_duration_seconds_count{verb="GET",host="10.96.0.1:443"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert_eq!(
            text.matches("\ngpucloud_queue_depth{").count(),
            1,
            "one series per kind:\n{text}"
        );
        #[cfg(target_os = "linux")]
        for family in [
            "# TYPE process_cpu_seconds counter",
            "# TYPE process_resident_memory_bytes gauge",
            "# TYPE process_virtual_memory_bytes gauge",
            "# TYPE process_open_fds gauge",
            "# TYPE process_max_fds gauge",
            "# TYPE process_start_time_seconds gauge",
        ] {
            assert!(text.contains(family), "missing {family} in\n{text}");
        }
    }

    /// Every series the sample Grafana dashboard queries is one the operator exports.
    #[test]
    fn the_grafana_dashboard_queries_exported_families() {
        let metrics = Metrics::new();
        metrics
            .reconcile_started("GpuInstance")
            .finish(ReconcileResult::RequeueAfter(Duration::from_secs(1)));
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

        let dashboard: serde_json::Value = serde_json::from_str(include_str!(
            "../../charts/gpucloud-operator/dashboards/gpucloud-operator.json"
        ))
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
