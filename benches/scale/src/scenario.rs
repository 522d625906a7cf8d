//! The seven steps of the benchmark, in order: start the three processes, apply N objects,
//! time a new object's first reconcile, count a settled window, restart the operator,
//! delete everything, and write the result. The operator runs as an API server user of its
//! own, so the API server's request counts tell its writes from the benchmark's. The pool
//! scenario (`pool.rs`) and the multi-tenant one (`tenants.rs`) run in the same processes and
//! write their results the same way.

mod pool;
pub mod tenants;

use crate::api_counts::{self, ApiCounts};
use crate::args::{Args, Scenario};
use crate::counters::{self, Admin, Counters};
use crate::plot::{self, Marker};
use crate::process::{self, ProcessUsage, RoleProcess};
use crate::report::{
    self, ApiWrites, BenchResult, BoundedPhase, FirstReconcile, Memory, PhaseWrites, Report,
    Restart, RestartRun, Settings, Settled,
};
use crate::tracker::Tracker;
use futures::TryStreamExt;
use gpucloud_api::{Firewall, GpuInstance, Snapshot, SshKey, Volume};
use gpucloud_controller::runtime::decode::Decoded;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client, Resource};
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Namespace of the benchmark's objects.
pub const NAMESPACE: &str = "scale-bench";
const OPERATOR_NAMESPACE: &str = "gpucloud-system";
const CREDENTIALS_SECRET: &str = "gpucloud-credentials";
const SSH_KEY_NAME: &str = "bench-key";
/// A public key only; its private half was never kept.
const SSH_PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKWIQ+QF3fCIBgjBxZfHUID/+ZdKl9sgVJ+r46Z+ucKM bench";
/// The summary each kind's controller logs once its startup check is done
/// (`src/controller/flow/readopt.rs`), with the fields `kind`, `readopted` and `reconciled`.
const CHECKED_MESSAGE: &str = "first list checked against the cloud";
/// What `scale-bench --list-only` prints before the number of objects it listed.
pub const LISTED_PREFIX: &str = "listed ";
/// Lists any design needs to see the result of a phase: one per kind (instances, SSH keys).
const LISTS_PER_PHASE: u64 = 2;
/// The simulator's `CREATING`, `BOOTING` and `DELETING` (its defaults, passed explicitly so
/// the bounds below hold to what it does).
const CLOUD_CREATING: Duration = Duration::from_secs(3);
const CLOUD_BOOTING: Duration = Duration::from_secs(2);
const CLOUD_DELETING: Duration = Duration::from_secs(2);
/// A snapshot's `creating` and a volume's, the multi-tenant run's other kinds.
const CLOUD_SNAPSHOTTING: Duration = Duration::from_secs(3);
const CLOUD_VOLUME_CREATING: Duration = Duration::from_secs(1);
/// From a create accepted to a machine running: no machine is Ready sooner.
const CLOUD_READY_AFTER: Duration = CLOUD_CREATING.saturating_add(CLOUD_BOOTING);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Arguments(String),
    #[error(transparent)]
    Process(#[from] process::Error),
    #[error(transparent)]
    Simulator(#[from] counters::Error),
    #[error(transparent)]
    Plot(#[from] plot::Error),
    #[error("Kubernetes API while {doing}: {source}")]
    Kube {
        doing: String,
        source: Box<kube::Error>,
    },
    #[error("reading the kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error("{what} did not happen within {seconds} s ({progress})")]
    Timeout {
        what: String,
        seconds: u64,
        progress: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("encoding the result: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unexpected banner {0:?}")]
    Banner(String),
    #[error("the list-only process {0}")]
    ListOnly(String),
}

fn kube_error(doing: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let doing = doing.into();
    move |source| Error::Kube {
        doing,
        source: Box::new(source),
    }
}

/// Where the result landed.
#[derive(Debug)]
pub struct Written {
    pub result: Report,
    pub json: PathBuf,
    pub plot: PathBuf,
}

/// Runs the whole benchmark.
pub async fn run(args: &Args) -> Result<Written, Error> {
    args.validate().map_err(Error::Arguments)?;
    std::fs::create_dir_all(&args.out).map_err(|source| Error::Io {
        path: args.out.display().to_string(),
        source,
    })?;
    let binary = process::operator_binary(args.operator_bin.as_deref()).await?;
    let env = Environment::start(args, &binary).await?;
    let result = match args.scenario {
        Scenario::Instances => measure(args, &binary, &env)
            .await
            .map(|result| Report::Instances(Box::new(result))),
        Scenario::Pool => pool::measure(args, &binary, &env)
            .await
            .map(|result| Report::Pool(Box::new(result))),
        Scenario::Tenants => tenants::measure(args, &binary, &env)
            .await
            .map(|result| Report::Tenants(Box::new(result))),
    };
    env.stop().await;
    let mut result = result?;
    result.judge();
    let json = args.out.join("result.json");
    let plot_path = args.out.join("ready.png");
    std::fs::write(&json, serde_json::to_vec_pretty(&result)?).map_err(|source| Error::Io {
        path: json.display().to_string(),
        source,
    })?;
    let markers = result_markers(&result);
    plot::draw(&plot_path, &result.series(), &markers)?;
    Ok(Written {
        result,
        json,
        plot: plot_path,
    })
}

fn result_markers(result: &Report) -> Vec<Marker> {
    result
        .timeline_marks()
        .into_iter()
        .map(|(seconds, color)| Marker { seconds, color })
        .collect()
}

// === impl Environment ===

/// The API server and the simulator, with a Kubernetes client and the simulator's admin API.
struct Environment {
    apiserver: RoleProcess,
    simulator: RoleProcess,
    simulator_url: String,
    /// One API key per cloud account (the multi-tenant run has several).
    api_keys: Vec<String>,
    kubeconfig: PathBuf,
    /// The same API server as the operator's own user.
    operator_kubeconfig: PathBuf,
    client: Client,
    admin: Admin,
}

impl Environment {
    async fn start(args: &Args, binary: &Path) -> Result<Environment, Error> {
        let kubeconfig =
            std::path::absolute(args.out.join("kubeconfig")).map_err(|source| Error::Io {
                path: args.out.display().to_string(),
                source,
            })?;
        let (apiserver, _) = RoleProcess::start(
            "apiserver",
            binary,
            &strings(&[
                "apiserver",
                "--listen",
                "127.0.0.1:0",
                "--kubeconfig",
                &kubeconfig.display().to_string(),
                "--user",
                api_counts::OPERATOR_USER,
            ]),
            &[("GPUCLOUD_APISERVER_TOKEN", random_token())],
            &args.out,
            "gpucloud API server listening on",
            None,
        )
        .await?;
        let admin_token = random_token();
        let accounts = match args.scenario {
            Scenario::Tenants => args.accounts,
            Scenario::Instances | Scenario::Pool => 1,
        };
        let api_keys: Vec<String> = (0..accounts)
            .map(|i| format!("bench-{i}-{}", random_token()))
            .collect();
        // Room for every instance, and a balance that billing cannot drain during the run.
        let capacity = (args.objects + args.new_objects + 64).to_string();
        let (simulator, banner) = RoleProcess::start(
            "simulator",
            binary,
            &strings(&[
                "simulator",
                "--listen",
                "127.0.0.1:0",
                "--rate-limit",
                &args.rate_limit.to_string(),
                "--rate-burst",
                &args.simulator_burst.to_string(),
                "--latency-ms",
                &args.latency_ms.to_string(),
                "--gpu-capacity",
                &capacity,
                "--create-delay-ms",
                &CLOUD_CREATING.as_millis().to_string(),
                "--boot-delay-ms",
                &CLOUD_BOOTING.as_millis().to_string(),
                "--transition-delay-ms",
                &CLOUD_DELETING.as_millis().to_string(),
                "--snapshot-delay-ms",
                &CLOUD_SNAPSHOTTING.as_millis().to_string(),
                "--volume-delay-ms",
                &CLOUD_VOLUME_CREATING.as_millis().to_string(),
                "--initial-balance",
                "1000000000",
            ])
            .into_iter()
            .chain(
                // The multi-tenant run times new objects' first cloud call from the ledger.
                (args.scenario == Scenario::Tenants).then(|| "--keep-ledger".to_string()),
            )
            .collect::<Vec<_>>(),
            &[
                ("GPUCLOUD_SIM_ADMIN_TOKEN", admin_token.clone()),
                ("GPUCLOUD_SIM_API_KEYS", api_keys[0].clone()),
                ("GPUCLOUD_SIM_OTHER_ACCOUNT_KEYS", api_keys[1..].join(";")),
            ],
            &args.out,
            "gpucloud simulator listening on",
            None,
        )
        .await?;
        let simulator_url = banner
            .rsplit(' ')
            .next()
            .filter(|url| url.starts_with("http"))
            .ok_or_else(|| Error::Banner(banner.clone()))?
            .to_string();
        let client = kube_client(&kubeconfig).await?;
        let operator_kubeconfig = std::path::absolute(args.out.join("operator.kubeconfig"))
            .map_err(|source| Error::Io {
                path: args.out.display().to_string(),
                source,
            })?;
        write_operator_kubeconfig(&kubeconfig, &operator_kubeconfig)?;
        let env = Environment {
            apiserver,
            simulator,
            admin: Admin::new(&simulator_url, admin_token),
            simulator_url,
            api_keys,
            kubeconfig,
            operator_kubeconfig,
            client,
        };
        env.prepare_cluster().await?;
        Ok(env)
    }

    /// CRDs, the two namespaces and the credentials Secret.
    async fn prepare_cluster(&self) -> Result<(), Error> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for crd in gpucloud_controller::kinds::registry::crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            crds.create(&PostParams::default(), &crd)
                .await
                .map_err(kube_error(format!("creating CRD {name}")))?;
            wait_for(
                Duration::from_secs(30),
                &format!("CRD {name} established"),
                || {
                    let crds = crds.clone();
                    let name = name.clone();
                    async move {
                        let crd = crds.get(&name).await.ok()?;
                        let established = crd
                            .status?
                            .conditions?
                            .iter()
                            .any(|c| c.type_ == "Established" && c.status == "True");
                        established.then_some(())
                    }
                },
            )
            .await?;
        }
        for name in [NAMESPACE, OPERATOR_NAMESPACE] {
            create_namespace(&self.client, name).await?;
        }
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), OPERATOR_NAMESPACE);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(CREDENTIALS_SECRET.into()),
                ..ObjectMeta::default()
            },
            string_data: Some(BTreeMap::from([(
                "apiKey".into(),
                self.api_keys[0].clone(),
            )])),
            ..Secret::default()
        };
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .map_err(kube_error("creating the credentials Secret"))?;
        Ok(())
    }

    /// Starts an operator with its defaults except the rate limit and its endpoints' ports
    /// (free ones); the summaries of its startup checks are recorded in `startup`.
    async fn start_operator(
        &self,
        args: &Args,
        binary: &Path,
        role: &str,
        startup: ReadoptionLog,
    ) -> Result<RoleProcess, Error> {
        let (lines_sender, lines) = mpsc::unbounded_channel();
        startup.follow(lines);
        let (operator, _) = RoleProcess::start(
            role,
            binary,
            &strings(&[
                "run",
                "--cloud-url",
                &self.simulator_url,
                "--credentials-secret",
                &format!("{OPERATOR_NAMESPACE}/{CREDENTIALS_SECRET}"),
                "--rate-limit",
                &args.rate_limit.to_string(),
                "--rate-burst",
                &args.operator_burst.to_string(),
                "--concurrency",
                &args.concurrency.to_string(),
                "--kube-api-qps",
                &args.kube_api_qps.to_string(),
                "--resync-interval",
                &format!("{}ms", args.resync_interval.as_millis()),
                // Free ports: the default 8080 and 8081 may be another process's (a second
                // benchmark on the same machine), and a restart must not fail on them.
                "--metrics-listen",
                "127.0.0.1:0",
                "--health-listen",
                "127.0.0.1:0",
            ]),
            &[
                ("KUBECONFIG", self.operator_kubeconfig.display().to_string()),
                ("GPUCLOUD_LOG_FORMAT", "json".into()),
                // The startup checks' summaries, all the bench reads, are info lines.
                ("RUST_LOG", "info".into()),
            ],
            &args.out,
            "{",
            Some(lines_sender),
        )
        .await?;
        Ok(operator)
    }

    /// Stops `operator` once the events it queued have reached the API server (they do in a
    /// moment), and returns the API server's request counts then: none is left out.
    async fn stop_operator(&self, operator: RoleProcess) -> Result<ApiCounts, Error> {
        tokio::time::sleep(Duration::from_secs(2)).await;
        operator.kill().await?;
        self.api_counts().await
    }

    /// The API server's request counts now.
    async fn api_counts(&self) -> Result<ApiCounts, Error> {
        ApiCounts::read(&self.client)
            .await
            .map_err(kube_error("reading the API server's request counts"))
    }

    async fn stop(self) {
        let _ = self.simulator.kill().await;
        let _ = self.apiserver.kill().await;
    }
}

async fn create_namespace(client: &Client, name: &str) -> Result<(), Error> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .map_err(kube_error(format!("creating namespace {name}")))?;
    Ok(())
}

/// The API server's kubeconfig with the operator's user as the current context (the API server
/// names the context of a further user `gpucloud-apiserver-<user>`). Written as JSON, which
/// every kubeconfig reader takes as YAML.
fn write_operator_kubeconfig(admin: &Path, operator: &Path) -> Result<(), Error> {
    let config_error = |reason: String| Error::Kubeconfig {
        path: admin.display().to_string(),
        reason,
    };
    let mut parsed =
        kube::config::Kubeconfig::read_from(admin).map_err(|e| config_error(e.to_string()))?;
    let context = format!("gpucloud-apiserver-{}", api_counts::OPERATOR_USER);
    if !parsed.contexts.iter().any(|c| c.name == context) {
        return Err(config_error(format!("no context {context}")));
    }
    parsed.current_context = Some(context);
    let json = serde_json::to_vec_pretty(&parsed)?;
    std::fs::write(operator, json).map_err(|source| Error::Io {
        path: operator.display().to_string(),
        source,
    })
}

async fn kube_client(kubeconfig: &Path) -> Result<Client, Error> {
    let config_error = |reason: String| Error::Kubeconfig {
        path: kubeconfig.display().to_string(),
        reason,
    };
    let parsed =
        kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| config_error(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .map_err(|e| config_error(e.to_string()))?;
    Client::try_from(config).map_err(kube_error("building the client"))
}

/// A token for this run only: process-unique randomness from the standard library's hasher
/// keys, mixed with the time.
fn random_token() -> String {
    let mut token = String::new();
    for round in 0..2u64 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(round);
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        token.push_str(&format!("{:016x}", hasher.finish()));
    }
    token
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| s.to_string()).collect()
}

// === impl ReadoptionLog ===

/// What a restarted operator's log says about its start: the summary each kind's controller
/// logs once it has checked the settled objects of its first list against the cloud's first
/// list. The bench's operator watches every namespace, so each kind has one controller and
/// one summary.
#[derive(Debug, Clone, Default)]
struct ReadoptionLog {
    checked: Arc<Mutex<BTreeMap<String, Checked>>>,
}

/// One kind's startup check.
#[derive(Debug, Clone, Copy)]
struct Checked {
    at: Instant,
    /// Objects found settled and as the cloud lists them: re-adopted without a reconcile.
    readopted: usize,
    /// Settled objects the cloud listed otherwise (or not at all): reconciled at once.
    reconciled: usize,
}

impl ReadoptionLog {
    fn follow(&self, mut lines: mpsc::UnboundedReceiver<String>) {
        let checked = self.checked.clone();
        tokio::spawn(async move {
            while let Some(line) = lines.recv().await {
                if !line.contains(CHECKED_MESSAGE) {
                    continue;
                }
                let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                // Flattened into the line by the operator's JSON format, or under `fields`.
                let field = |name: &str| {
                    event
                        .get(name)
                        .or_else(|| event.get("fields").and_then(|f| f.get(name)))
                        .cloned()
                };
                let count = |name: &str| field(name).and_then(|v| v.as_u64()).map(|n| n as usize);
                let (Some(kind), Some(readopted)) = (
                    field("kind").and_then(|v| v.as_str().map(str::to_string)),
                    count("readopted"),
                ) else {
                    continue;
                };
                let summary = Checked {
                    at: Instant::now(),
                    readopted,
                    reconciled: count("reconciled").unwrap_or(0),
                };
                checked
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(kind, summary);
            }
        });
    }

    /// When the last of `kinds` had checked its first list, once all have.
    fn all_checked_at<'a>(&self, kinds: impl Iterator<Item = &'a String>) -> Option<Instant> {
        let checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        let mut latest: Option<Instant> = None;
        for kind in kinds {
            let at = checked.get(kind)?.at;
            latest = Some(latest.map_or(at, |latest| latest.max(at)));
        }
        latest
    }

    /// Of `kinds`: the objects re-adopted by kind, and the objects reconciled at once in all.
    fn counts<'a>(
        &self,
        kinds: impl Iterator<Item = &'a String>,
    ) -> (BTreeMap<String, usize>, usize) {
        let checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        let mut readopted = BTreeMap::new();
        let mut reconciled = 0;
        for kind in kinds {
            let summary = checked.get(kind);
            readopted.insert(kind.clone(), summary.map_or(0, |s| s.readopted));
            reconciled += summary.map_or(0, |s| s.reconciled);
        }
        (readopted, reconciled)
    }
}

// === the steps ===

/// The run's settings, as the result records them.
fn settings(args: &Args) -> Settings {
    Settings {
        scenario: args.scenario,
        objects: args.objects,
        latency_ms: args.latency_ms,
        rate_limit: args.rate_limit,
        simulator_burst: args.simulator_burst,
        operator_burst: args.operator_burst,
        concurrency: args.concurrency,
        kube_api_qps: args.kube_api_qps,
        resync_interval_s: args.resync_interval.as_secs_f64(),
        quiet_wait_s: args.quiet_wait.as_secs_f64(),
        settled_window_s: args.settled_window.as_secs_f64(),
        new_objects: args.new_objects,
        writers: args.writers,
    }
}

async fn measure(args: &Args, binary: &Path, env: &Environment) -> Result<BenchResult, Error> {
    let settings = settings(args);
    let instances: Api<GpuInstance> = Api::namespaced(env.client.clone(), NAMESPACE);
    let keys: Api<SshKey> = Api::namespaced(env.client.clone(), NAMESPACE);
    let tracker = Tracker::start(instances.clone(), Duration::from_millis(500));

    // 1. The operator, idle.
    let operator = env
        .start_operator(args, binary, "operator", ReadoptionLog::default())
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let operator_idle = operator.usage()?;
    log(&format!(
        "operator idle: {:.1} MB",
        operator_idle.rss_bytes as f64 / 1e6
    ));

    // 2. N objects in bulk, until all are Ready.
    let names: Vec<String> = (0..args.objects).map(|i| format!("gi-{i:05}")).collect();
    let before = env.admin.counters().await?;
    let api_at_start = env.api_counts().await?;
    let started = Instant::now();
    create_ssh_key(&keys).await?;
    apply_all(&instances, &tracker, &names, args.writers).await?;
    log(&format!(
        "applied {} objects in {:.1} s",
        names.len(),
        started.elapsed().as_secs_f64()
    ));
    let mut operator_at_1000 = None;
    let converged_at = wait_for(args.phase_timeout, "every object Ready", || {
        let ready = tracker.ready();
        if operator_at_1000.is_none() && args.objects > 1000 && ready >= 1000 {
            operator_at_1000 = operator.usage().ok();
        }
        let done = tracker.all_ready_at(&names);
        async move { done }
    })
    .await?;
    let convergence_counters = env.admin.counters().await?.since(&before);
    let creates = convergence_counters.succeeded("CreateInstance")
        + convergence_counters.succeeded("CreateSshKey");
    let convergence = bounded_phase(
        args,
        converged_at.saturating_duration_since(started),
        &convergence_counters,
        creates + LISTS_PER_PHASE,
        CLOUD_READY_AFTER,
    );
    log(&format!(
        "converged in {:.1} s (bound {:.1} s)",
        convergence.seconds, convergence.lower_bound_s
    ));
    let converged_mark = tracker.seconds(converged_at);

    // 3. New objects, one at a time, while N are settled: time to first reconcile.
    let new_names: Vec<String> = (0..args.new_objects)
        .map(|i| format!("gn-{i:05}"))
        .collect();
    for name in &new_names {
        tracker.applying(name);
        instances
            .create(&PostParams::default(), &instance(name)?)
            .await
            .map_err(kube_error(format!("creating {name}")))?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for(args.phase_timeout, "every new object Ready", || {
        let done = tracker.all_ready_at(&new_names);
        async move { done }
    })
    .await?;
    let latencies: Vec<f64> = tracker
        .times(&new_names)
        .into_iter()
        .filter_map(|(_, t)| {
            Some(
                t.first_reconciled?
                    .saturating_duration_since(t.applied?)
                    .as_secs_f64()
                    * 1000.0,
            )
        })
        .collect();
    let first_reconcile = FirstReconcile {
        count: latencies.len(),
        p50_ms: report::quantile(&latencies, 0.5),
        p99_ms: report::quantile(&latencies, 0.99),
        max_ms: latencies.iter().copied().fold(0.0, f64::max),
    };
    let operator_all_ready = operator.usage()?;
    let all_names: Vec<String> = names.iter().chain(&new_names).cloned().collect();

    // 4. Settled window.
    log(&format!(
        "all {} Ready; quiet for {} s, then counting {} s",
        all_names.len(),
        args.quiet_wait.as_secs(),
        args.settled_window.as_secs()
    ));
    tokio::time::sleep(args.quiet_wait).await;
    let api_at_settled = env.api_counts().await?;
    let window_start = env.admin.counters().await?;
    tokio::time::sleep(args.settled_window).await;
    let window = env.admin.counters().await?.since(&window_start);
    let operator_settled = operator.usage()?;
    let settled = settled_summary(args, &window, all_names.len());

    // 5. Restarts: kill the operator, start a new one, wait until every object is re-adopted.
    let operator_cpu_s = operator.usage()?.cpu_seconds;
    let restart_mark = tracker.seconds(Instant::now());
    let readopting = Readopting {
        objects_by_kind: BTreeMap::from([(GpuInstance::kind(&()).to_string(), all_names.len())]),
        accounts: 1,
        fewest_lists: LISTS_PER_PHASE,
    };
    let Restarts {
        operator,
        restart,
        operator_restarted,
        ..
    } = restarts(args, binary, env, operator, &readopting).await?;

    // 6. Delete everything; time until the account is empty.
    let deletion_mark = tracker.seconds(Instant::now());
    let before_delete = env.admin.counters().await?;
    let api_before_delete = env.api_counts().await?;
    let deleting = Instant::now();
    delete_all(&instances, &all_names, args.writers).await?;
    keys.delete(SSH_KEY_NAME, &DeleteParams::default())
        .await
        .map_err(kube_error("deleting the SSH key"))?;
    let emptied_at = wait_until_emptied(args, env, &instances).await?;
    let deletion_counters = env.admin.counters().await?.since(&before_delete);
    let deletes =
        deletion_counters.succeeded("DeleteInstance") + deletion_counters.succeeded("DeleteSshKey");
    let deletion = bounded_phase(
        args,
        emptied_at.saturating_duration_since(deleting),
        &deletion_counters,
        deletes + LISTS_PER_PHASE,
        CLOUD_DELETING,
    );
    log(&format!(
        "deleted in {:.1} s (bound {:.1} s)",
        deletion.seconds, deletion.lower_bound_s
    ));

    // 7. Totals and memory.
    let totals = env.admin.counters().await?;
    let slope_bytes_per_object = (operator_settled.rss_bytes as f64
        - operator_idle.rss_bytes as f64)
        / all_names.len() as f64;
    let slope_1000_to_n_bytes_per_object = operator_at_1000.map(|at_1000: ProcessUsage| {
        (operator_all_ready.rss_bytes as f64 - at_1000.rss_bytes as f64)
            / (all_names.len() as f64 - 1000.0)
    });
    let memory = Memory {
        operator_idle,
        operator_at_1000,
        operator_all_ready,
        operator_settled,
        operator_restarted,
        slope_bytes_per_object,
        slope_1000_to_n_bytes_per_object,
        apiserver: env.apiserver.usage()?,
        simulator: env.simulator.usage()?,
        operator_cpu_s,
    };
    let api_at_end = env.stop_operator(operator).await?;
    let phase_writes =
        |later: &ApiCounts, earlier: &ApiCounts| operator_writes(later, earlier, all_names.len());
    let api_writes = ApiWrites::new(
        all_names.len(),
        phase_writes(&api_at_settled, &api_at_start),
        phase_writes(&api_before_delete, &api_at_settled),
        phase_writes(&api_at_end, &api_before_delete),
    );
    for line in api_writes.lines() {
        log(&line);
    }
    let end_mark = tracker.seconds(Instant::now());
    let mut timeline = tracker.timeline();
    timeline.retain(|(t, _)| *t <= end_mark);
    Ok(BenchResult {
        settings,
        convergence,
        first_reconcile,
        settled,
        restart,
        deletion,
        memory,
        throttled: totals.with_status("429"),
        calls_by_operation: totals.by_operation(),
        api_writes,
        timeline,
        marks: vec![converged_mark, restart_mark, deletion_mark],
        targets: Vec::new(),
    })
}

/// The operator's writes to the API server between two counts, over `objects`.
fn operator_writes(later: &ApiCounts, earlier: &ApiCounts, objects: usize) -> PhaseWrites {
    let delta = later.since(earlier);
    PhaseWrites::new(
        delta.writes_of(api_counts::OPERATOR_USER),
        delta.conflicts_of(api_counts::OPERATOR_USER),
        delta.requests_of(api_counts::OPERATOR_USER),
        objects,
    )
}

/// Waits until the cloud account holds nothing, then until no GpuInstance is left in the API
/// server; returns when the account was seen empty.
async fn wait_until_emptied(
    args: &Args,
    env: &Environment,
    instances: &Api<GpuInstance>,
) -> Result<Instant, Error> {
    let emptied_at = wait_for(args.phase_timeout, "the cloud account empty", || {
        let admin = env.admin.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let holdings = admin.holdings().await.ok()?;
            holdings.is_empty().then(Instant::now)
        }
    })
    .await?;
    wait_for(
        args.phase_timeout,
        "every object gone from the API server",
        || {
            let instances = instances.clone();
            async move {
                let left = instances
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .len();
                (left == 0).then_some(())
            }
        },
    )
    .await?;
    Ok(emptied_at)
}

/// A phase's time against its bound: `minimum_calls` at the cloud's rate limit, then the
/// `cloud_time` its last resource takes in the cloud (`CLOUD_READY_AFTER`, `CLOUD_DELETING`).
fn bounded_phase(
    args: &Args,
    took: Duration,
    counters: &Counters,
    minimum_calls: u64,
    cloud_time: Duration,
) -> BoundedPhase {
    let cloud_time_s = cloud_time.as_secs_f64();
    let lower_bound_s = report::lower_bound_seconds(
        minimum_calls,
        args.rate_limit,
        args.latency_ms,
        args.concurrency,
    ) + cloud_time_s;
    let seconds = took.as_secs_f64();
    BoundedPhase {
        seconds,
        calls_by_operation: counters.by_operation(),
        minimum_calls,
        cloud_time_s,
        lower_bound_s,
        ratio: seconds / lower_bound_s,
    }
}

fn settled_summary(args: &Args, window: &Counters, objects: usize) -> Settled {
    let intervals = args.settled_window.as_secs_f64() / args.resync_interval.as_secs_f64();
    let by_operation = window.by_operation();
    let max_lists_per_kind = by_operation
        .iter()
        .filter(|(op, _)| counters::is_list(op))
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0);
    let per_object_calls = by_operation
        .iter()
        .filter(|(op, _)| !counters::is_list(op) && !counters::is_per_account(op))
        .map(|(_, n)| *n)
        .sum();
    let per_account_calls = by_operation
        .iter()
        .filter(|(op, _)| counters::is_per_account(op))
        .map(|(_, n)| *n)
        .sum();
    Settled {
        window_s: args.settled_window.as_secs_f64(),
        objects,
        calls_by_operation: by_operation,
        max_lists_per_kind,
        intervals,
        per_object_calls,
        per_account_calls,
        per_object_polling_calls: (objects as f64 * intervals).round() as u64,
    }
}

/// Every benchmark machine's spec: a GpuInstance's, and the pool's template's.
fn instance_spec() -> serde_json::Value {
    serde_json::json!({
        "region": "us-east-1",
        "gpuType": "L40S",
        "osImage": "ubuntu-22.04-cuda-12",
        "sshKeyRefs": [{"name": SSH_KEY_NAME}],
    })
}

fn instance(name: &str) -> Result<GpuInstance, Error> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": "GpuInstance",
        "metadata": {"name": name},
        "spec": instance_spec(),
    }))?)
}

async fn create_ssh_key(keys: &Api<SshKey>) -> Result<(), Error> {
    let key: SshKey = serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": "SshKey",
        "metadata": {"name": SSH_KEY_NAME},
        "spec": {"publicKey": SSH_PUBLIC_KEY},
    }))?;
    keys.create(&PostParams::default(), &key)
        .await
        .map_err(kube_error("creating the SSH key"))?;
    Ok(())
}

/// Applies every object with `writers` concurrent creates.
async fn apply_all(
    api: &Api<GpuInstance>,
    tracker: &Tracker,
    names: &[String],
    writers: usize,
) -> Result<(), Error> {
    futures::stream::iter(names.iter().map(Ok::<_, Error>))
        .try_for_each_concurrent(writers, |name| async move {
            tracker.applying(name);
            api.create(&PostParams::default(), &instance(name)?)
                .await
                .map_err(kube_error(format!("creating {name}")))?;
            Ok(())
        })
        .await
}

async fn delete_all(api: &Api<GpuInstance>, names: &[String], writers: usize) -> Result<(), Error> {
    futures::stream::iter(names.iter().map(Ok::<_, Error>))
        .try_for_each_concurrent(writers, |name| async move {
            api.delete(name, &DeleteParams::default())
                .await
                .map_err(kube_error(format!("deleting {name}")))?;
            Ok(())
        })
        .await
}

/// What a restarted operator re-adopts, and the cloud accounts it lists to do it.
struct Readopting {
    /// The objects it waits for, by kind as the startup check's summary names it.
    objects_by_kind: BTreeMap<String, usize>,
    /// Accounts: each is listed at its own rate limit, in parallel with the others.
    accounts: usize,
    /// The fewest cloud lists any operator needs in one account: one per kind.
    fewest_lists: u64,
}

/// The restarts step's outcome.
struct Restarts {
    /// The last operator started, running.
    operator: RoleProcess,
    restart: Restart,
    /// The restarted operator with the highest peak RSS, once it had re-adopted everything.
    operator_restarted: ProcessUsage,
    /// CPU seconds of the operators killed, each read as its restart began.
    killed_cpu_s: f64,
}

/// `--restarts` times: kills the operator and starts another, which re-adopts `readopting`'s
/// objects with everything settled.
async fn restarts(
    args: &Args,
    binary: &Path,
    env: &Environment,
    mut operator: RoleProcess,
    readopting: &Readopting,
) -> Result<Restarts, Error> {
    let mut runs = Vec::with_capacity(args.restarts);
    let mut operator_restarted: Option<ProcessUsage> = None;
    let mut killed_cpu_s = 0.0;
    for run in 1..=args.restarts {
        killed_cpu_s += operator.usage()?.cpu_seconds;
        let (restarted, measured, usage) =
            restart(args, binary, env, operator, readopting, run).await?;
        operator = restarted;
        log(&format!(
            "restart {run} re-adopted {} objects from the lists and reconciled {} in {:.2} s \
             with {} cloud writes (the API server's list decoded as the operator does: {:.2} s \
             from a new process, {:.2} s from the bench's; decoded whole: {:.2} s)",
            measured.objects_readopted,
            measured.objects_reconciled,
            measured.seconds,
            measured.cloud_writes,
            measured.kube_list_s,
            measured.kube_list_in_bench_s,
            measured.kube_plain_list_s
        ));
        runs.push(measured);
        if operator_restarted
            .as_ref()
            .is_none_or(|peak| usage.peak_rss_bytes > peak.peak_rss_bytes)
        {
            operator_restarted = Some(usage);
        }
    }
    let (Some(restart), Some(operator_restarted)) = (Restart::from_runs(runs), operator_restarted)
    else {
        return Err(Error::Arguments("--restarts must be at least 1".into()));
    };
    Ok(Restarts {
        operator,
        restart,
        operator_restarted,
        killed_cpu_s,
    })
}

/// Kills `operator` and starts another, which re-adopts `readopting`'s objects; the list-only
/// bound is measured just before, listing what the operator lists, decoded as the operator
/// decodes it.
async fn restart(
    args: &Args,
    binary: &Path,
    env: &Environment,
    operator: RoleProcess,
    readopting: &Readopting,
    run: usize,
) -> Result<(RoleProcess, RestartRun, ProcessUsage), Error> {
    let (_, kube_list_in_bench_s) =
        timed_list(&env.client, args.scenario, Decoding::AsTheOperator).await?;
    let (_, kube_plain_list_s) = timed_list(&env.client, args.scenario, Decoding::Whole).await?;
    let (listed, kube_list_s) = fresh_process_list(&env.kubeconfig, args.scenario).await?;
    let before = env.admin.counters().await?;
    operator.kill().await?;
    let startup = ReadoptionLog::default();
    let started = Instant::now();
    let operator = env
        .start_operator(
            args,
            binary,
            &format!("operator-restarted-{run}"),
            startup.clone(),
        )
        .await?;
    let kinds = || readopting.objects_by_kind.keys();
    let checked_at = wait_for(
        args.phase_timeout,
        "every kind's startup check done",
        || {
            let done = startup.all_checked_at(kinds());
            async move { done }
        },
    )
    .await
    .map_err(|e| {
        let (readopted, _) = startup.counts(kinds());
        let readopted: usize = readopted.values().sum();
        with_progress(e, format!("{readopted} re-adopted of {listed}"))
    })?;
    let (readopted_by_kind, objects_reconciled) = startup.counts(kinds());
    // The bench restarts with every object settled: each should be re-adopted from the lists.
    // One that was not is the restart's failure, measured and judged, not the run's end.
    let not_readopted_by_kind = not_readopted(&readopting.objects_by_kind, &readopted_by_kind);
    if !not_readopted_by_kind.is_empty() {
        log(&format!(
            "restart {run} did not re-adopt every object: {:?} short (its startup checks reconciled {objects_reconciled} at once)",
            not_readopted_by_kind
        ));
    }
    let counters = env.admin.counters().await?.since(&before);
    let usage = operator.usage()?;
    // Each account's lists at its own rate limit; the accounts are listed in parallel.
    let cloud_list_s = (0..readopting.accounts)
        .map(|account| {
            cloud_list_seconds(args, &counters.of_account(account), readopting.fewest_lists)
        })
        .fold(0.0, f64::max);
    let seconds = checked_at.saturating_duration_since(started).as_secs_f64();
    let lower_bound_s = kube_list_s + cloud_list_s;
    let measured = RestartRun {
        seconds,
        objects_readopted: readopted_by_kind.values().sum(),
        objects_reconciled,
        readopted_by_kind,
        not_readopted_by_kind,
        calls_by_operation: counters.by_operation(),
        cloud_writes: counters.writes(),
        kube_list_s,
        kube_list_in_bench_s,
        kube_plain_list_s,
        lower_bound_s,
        ratio: seconds / lower_bound_s,
    };
    Ok((operator, measured, usage))
}

/// Per kind, the objects of `expected` that `readopted` falls short of (none: absent).
fn not_readopted(
    expected: &BTreeMap<String, usize>,
    readopted: &BTreeMap<String, usize>,
) -> BTreeMap<String, usize> {
    expected
        .iter()
        .filter_map(|(kind, expected)| {
            let short = expected.saturating_sub(readopted.get(kind).copied().unwrap_or(0));
            (short > 0).then(|| (kind.clone(), short))
        })
        .collect()
}

/// One account's cloud lists at the rate limit: the lists `counters` holds, at least
/// `fewest`, or one round trip when they take less.
fn cloud_list_seconds(args: &Args, counters: &Counters, fewest: u64) -> f64 {
    let lists = counters
        .by_operation()
        .iter()
        .filter(|(op, _)| counters::is_list(op))
        .map(|(_, n)| *n)
        .sum::<u64>()
        .max(fewest);
    (lists as f64 / args.rate_limit).max(args.latency_ms as f64 / 1000.0)
}

/// `scale-bench --list-only`: how many objects a new client lists of what `scenario`'s
/// operator re-adopts, decoded as the operator decodes them (see `timed_list`).
pub async fn list_only(kubeconfig: &Path, scenario: Scenario) -> Result<usize, Error> {
    let client = kube_client(kubeconfig).await?;
    let (listed, _) = timed_list(&client, scenario, Decoding::AsTheOperator).await?;
    Ok(listed)
}

/// How many objects there are, and the seconds from starting a new `scale-bench --list-only`
/// process until it has listed them: what a restarted operator cannot go below (a new
/// process, a new connection, a heap not yet grown), with none of its other work.
async fn fresh_process_list(kubeconfig: &Path, scenario: Scenario) -> Result<(usize, f64), Error> {
    use clap::ValueEnum;
    use tokio::io::AsyncBufReadExt;
    let binary = std::env::current_exe().map_err(|source| Error::Io {
        path: "the scale-bench executable".into(),
        source,
    })?;
    let io_error = |source| Error::Io {
        path: binary.display().to_string(),
        source,
    };
    let scenario = scenario
        .to_possible_value()
        .ok_or_else(|| Error::ListOnly(format!("has no name for {scenario:?}")))?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(&binary)
        .arg("--list-only")
        .arg(kubeconfig)
        .arg("--scenario")
        .arg(scenario.get_name())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io_error)?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::ListOnly("has no standard output".into()))?;
    let line = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::io::BufReader::new(stdout).lines().next_line(),
    )
    .await
    .map_err(|_| Error::ListOnly("did not list within 60 s".into()))?
    .map_err(io_error)?;
    let seconds = started.elapsed().as_secs_f64();
    let output = child.wait_with_output().await.map_err(io_error)?;
    let listed = line
        .as_deref()
        .and_then(|l| l.strip_prefix(LISTED_PREFIX))
        .and_then(|n| n.trim().parse().ok());
    match listed {
        Some(listed) if output.status.success() => Ok((listed, seconds)),
        _ => Err(Error::ListOnly(format!(
            "ended with {} after printing {line:?}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))),
    }
}

/// How a timed list decodes each object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decoding {
    /// As the operator's watches do (`Decoded`, without `managedFields`).
    AsTheOperator,
    /// Whole, as a plain client does.
    Whole,
}

/// How many objects there are of what `scenario`'s operator re-adopts, and the seconds it
/// takes to list them, every kind at once as the operator's controllers do: the
/// single-account run's GpuInstances (the count) and SSH key in its namespace, or every kind
/// of the multi-tenant run in every namespace (all counted).
async fn timed_list(
    client: &Client,
    scenario: Scenario,
    decoding: Decoding,
) -> Result<(usize, f64), Error> {
    let started = Instant::now();
    let listed = match scenario {
        Scenario::Instances | Scenario::Pool => {
            let namespace = Some(NAMESPACE);
            let (instances, _) = futures::future::try_join(
                count::<GpuInstance>(client, namespace, decoding),
                count::<SshKey>(client, namespace, decoding),
            )
            .await?;
            instances
        }
        Scenario::Tenants => {
            let (instances, volumes, snapshots, keys, firewalls) = futures::future::try_join5(
                count::<GpuInstance>(client, None, decoding),
                count::<Volume>(client, None, decoding),
                count::<Snapshot>(client, None, decoding),
                count::<SshKey>(client, None, decoding),
                count::<Firewall>(client, None, decoding),
            )
            .await?;
            instances + volumes + snapshots + keys + firewalls
        }
    };
    Ok((listed, started.elapsed().as_secs_f64()))
}

/// The objects of kind `K` one list returns, in `namespace` or in every namespace.
async fn count<K>(
    client: &Client,
    namespace: Option<&str>,
    decoding: Decoding,
) -> Result<usize, Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    async fn list<R>(client: &Client, namespace: Option<&str>) -> Result<usize, Error>
    where
        R: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned,
    {
        let api = match namespace {
            Some(namespace) => Api::<R>::namespaced(client.clone(), namespace),
            None => Api::<R>::all(client.clone()),
        };
        Ok(api
            .list(&ListParams::default())
            .await
            .map_err(kube_error(format!("listing the {}", R::plural(&()))))?
            .items
            .len())
    }
    match decoding {
        Decoding::AsTheOperator => list::<Decoded<K>>(client, namespace).await,
        Decoding::Whole => list::<K>(client, namespace).await,
    }
}

/// Polls `check` every 200 ms until it yields a value, at most `limit`.
async fn wait_for<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.into(),
                seconds: limit.as_secs(),
                progress: String::new(),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn with_progress(error: Error, progress: String) -> Error {
    match error {
        Error::Timeout { what, seconds, .. } => Error::Timeout {
            what,
            seconds,
            progress,
        },
        other => other,
    }
}

fn log(message: &str) {
    eprintln!("scale-bench: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn a_phase_is_bound_by_the_rate_limit_then_the_cloud_time_of_its_last_resource() {
        let args = Args::try_parse_from(["scale-bench"]).unwrap_or_else(|e| panic!("{e}"));
        let phase = bounded_phase(
            &args,
            Duration::from_secs(28),
            &Counters::default(),
            1_003,
            CLOUD_READY_AFTER,
        );
        assert_eq!(phase.cloud_time_s, 5.0);
        assert!((phase.lower_bound_s - 25.06).abs() < 1e-9, "{phase:?}");
        assert!((phase.ratio - 28.0 / 25.06).abs() < 1e-9, "{phase:?}");
    }

    /// The operator's JSON line of one kind's startup check, its fields flattened into it.
    fn checked_line(kind: &str, readopted: u64, reconciled: u64) -> String {
        serde_json::json!({
            "timestamp": "2026-11-28T10:00:00.000000Z",
            "level": "INFO",
            "message": CHECKED_MESSAGE,
            "kind": kind,
            "readopted": readopted,
            "reconciled": reconciled,
            "target": "gpucloud_controller::flow::readopt",
        })
        .to_string()
    }

    #[tokio::test]
    async fn each_kinds_startup_check_is_counted_under_its_own_kind() {
        let log = ReadoptionLog::default();
        let (lines, received) = mpsc::unbounded_channel();
        log.follow(received);
        let kinds = [
            "GpuInstance".to_string(),
            "Volume".to_string(),
            "Snapshot".to_string(),
        ];
        let send = |line: String| lines.send(line).unwrap_or_else(|e| panic!("{e}"));
        send(checked_line("GpuInstance", 610, 0));
        send(r#"{"message":"serving metrics and probes","kind":"Volume","readopted":1}"#.into());
        // A line with its fields nested, as a format without flattening writes it.
        send(
            serde_json::json!({
                "fields": {
                    "message": CHECKED_MESSAGE, "kind": "Volume", "readopted": 299,
                    "reconciled": 1,
                },
            })
            .to_string(),
        );
        let both = || kinds[..2].iter();
        wait_for(Duration::from_secs(5), "both checks read", || {
            let done = log.all_checked_at(both());
            async move { done }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        // The Snapshot controller has not logged its check yet.
        assert_eq!(log.all_checked_at(kinds.iter()), None);
        let (readopted, reconciled) = log.counts(kinds.iter());
        assert_eq!(
            readopted,
            BTreeMap::from([
                ("GpuInstance".to_string(), 610),
                ("Snapshot".to_string(), 0),
                ("Volume".to_string(), 299),
            ])
        );
        assert_eq!(reconciled, 1);
        // Kinds not waited for are left out.
        assert_eq!(
            log.counts(kinds[..1].iter()),
            (BTreeMap::from([("GpuInstance".to_string(), 610)]), 0)
        );
    }

    #[test]
    fn a_restart_is_short_of_the_kinds_it_did_not_re_adopt_whole() {
        let counts = |entries: &[(&str, usize)]| {
            entries
                .iter()
                .map(|(kind, n)| (kind.to_string(), *n))
                .collect::<BTreeMap<_, _>>()
        };
        let expected = counts(&[("GpuInstance", 610), ("Volume", 300), ("Snapshot", 60)]);
        assert_eq!(not_readopted(&expected, &expected), BTreeMap::new());
        // A kind whose check re-adopted fewer, and one whose check said nothing.
        assert_eq!(
            not_readopted(&expected, &counts(&[("GpuInstance", 600), ("Volume", 300)])),
            counts(&[("GpuInstance", 10), ("Snapshot", 60)])
        );
    }

    #[test]
    fn a_restarts_cloud_lists_take_at_least_one_per_kind_at_the_rate_limit_or_a_round_trip() {
        let args =
            Args::try_parse_from(["scale-bench", "--rate-limit", "50", "--latency-ms", "20"])
                .unwrap_or_else(|e| panic!("{e}"));
        let lists = |n: u64| Counters {
            operations: BTreeMap::from([
                (
                    "ListInstances".to_string(),
                    BTreeMap::from([("200".to_string(), n)]),
                ),
                (
                    "CreateInstance".to_string(),
                    BTreeMap::from([("200".to_string(), 7)]),
                ),
            ]),
            by_account: BTreeMap::new(),
        };
        // 10 lists at 50/s: 0.2 s; the writes are not lists.
        assert!((cloud_list_seconds(&args, &lists(10), 5) - 0.2).abs() < 1e-9);
        // One list counted, five kinds at least: 0.1 s.
        assert!((cloud_list_seconds(&args, &lists(1), 5) - 0.1).abs() < 1e-9);
        // At a high rate limit, one round trip of 20 ms.
        let fast = Args::try_parse_from(["scale-bench", "--rate-limit", "1000"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!((cloud_list_seconds(&fast, &lists(2), 2) - 0.02).abs() < 1e-9);
    }
}
