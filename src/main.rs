//! `gpucloud-operator`: one binary, one subcommand per role. The `simulator`, `apiserver` and
//! `dev` subcommands come with the `sandbox` feature (on by default); the production build
//! (`--no-default-features`) has `run`, `crds`, `release`, `plan` and `version` only.
#![forbid(unsafe_code)]

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use gpucloud_telemetry::LogFormat;

/// jemalloc instead of the C library's allocator: the work is mostly small, short-lived
/// allocations (decoding lists and watch events), and after a burst of them the operator held
/// about half as much memory per object with jemalloc, for less CPU time (docs/performance/history.md,
/// "Where the time goes", "Memory per object").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long jemalloc keeps pages freed by the heap before giving them back to the system. Its
/// default, 10 s, is counted only while the arena that freed them allocates again, so once the
/// work settled an operator kept the pages of its last burst resident; a background thread now
/// gives them back on time (docs/performance/history.md, "Pages given back on time").
const DIRTY_DECAY_MS: isize = 1_000;

/// Sets [`DIRTY_DECAY_MS`] for the main thread's arena and every arena made after it (one per
/// thread, up to four per core), and starts jemalloc's background threads. Called before the
/// runtime starts its threads.
fn return_freed_pages_on_time() -> Result<(), tikv_jemalloc_ctl::Error> {
    use tikv_jemalloc_ctl::{Access, AsName, background_thread};
    b"arenas.dirty_decay_ms\0".name().write(DIRTY_DECAY_MS)?;
    b"arena.0.dirty_decay_ms\0".name().write(DIRTY_DECAY_MS)?;
    background_thread::write(true)
}

/// jemalloc's count of the heap, for the metrics (`gpucloud_heap_*_bytes`); `None` when its
/// statistics cannot be read.
fn heap_figures() -> Option<gpucloud_telemetry::process::HeapFigures> {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The statistics are a snapshot taken at each new epoch.
    epoch::advance().ok()?;
    Some(gpucloud_telemetry::process::HeapFigures {
        allocated: stats::allocated::read().ok()? as u64,
        resident: stats::resident::read().ok()? as u64,
    })
}

#[derive(Parser)]
#[command(
    name = "gpucloud-operator",
    version,
    about = "Manage Cloud GPU Compute Service resources as Kubernetes objects"
)]
struct Cli {
    /// Log verbosity, in RUST_LOG syntax (e.g. `info` or `gpucloud_controller=debug,info`).
    /// Defaults to `info`; `dev` defaults to `warn` so its table stays readable.
    #[arg(long, global = true, env = "RUST_LOG")]
    log_level: Option<String>,
    /// Log line format.
    #[arg(long, global = true, env = "GPUCLOUD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant (`run`'s flags) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the controllers against a cluster.
    Run(gpucloud_controller::operator::cli::Args),
    /// Print the CustomResourceDefinitions of every kind as YAML (what `crds/` holds).
    Crds,
    /// Let go of the objects for good before removing the operator: its finalizer is removed
    /// with Orphan semantics, so the cloud resources stay; each is recorded in the operator's
    /// namespace and printed (kind, namespace/name, cloud id) on standard output.
    Release(gpucloud_controller::tools::release::Args),
    /// What applying manifests would do, read-only: per object create, change, delete or
    /// unchanged, the placement a GpuInstance would get, and the hourly cost before and after.
    Plan(gpucloud_controller::tools::plan::Args),
    /// Run the cloud API simulator.
    #[cfg(feature = "sandbox")]
    Simulator(gpucloud_simulator::cli::Args),
    /// Run the embedded Kubernetes API server on its own.
    #[cfg(feature = "sandbox")]
    Apiserver(gpucloud_apiserver::cli::Args),
    /// Sandbox without a cluster: API server, CRDs, cloud simulator and controllers in one
    /// process, a kubeconfig for kubectl, and `--apply` for manifests.
    #[cfg(feature = "sandbox")]
    Dev(gpucloud_dev::Args),
    /// Print version information.
    Version,
}

/// Stack of the runtime's threads. The API server evaluates CEL rules on them, which takes
/// more than tokio's 2 MiB default; only the pages used are committed.
#[cfg(feature = "sandbox")]
const THREAD_STACK_BYTES: usize = gpucloud_apiserver::CEL_STACK_BYTES;
#[cfg(not(feature = "sandbox"))]
const THREAD_STACK_BYTES: usize = 2 * 1024 * 1024;

/// Runs the command; an error that ends it is the log's last line, in the log's format, on
/// one line with its causes (see [`one_line`]).
fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let format = cli.log_format;
    let page_return = return_freed_pages_on_time();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(THREAD_STACK_BYTES)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            gpucloud_telemetry::report_fatal(format, &format!("starting the runtime: {error}"));
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, page_return)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            gpucloud_telemetry::report_fatal(format, &one_line(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `page_return`: whether [`return_freed_pages_on_time`] took, logged once logging is set up.
async fn run(cli: Cli, page_return: Result<(), tikv_jemalloc_ctl::Error>) -> anyhow::Result<()> {
    // kube and reqwest both bring rustls; name the provider once for the whole process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if matches!(cli.command, Command::Crds | Command::Version) {
        return print_only(&cli.command);
    }
    let default_level = if cli.command.is_sandbox() {
        "warn"
    } else {
        "info"
    };
    let log_level = cli.log_level.as_deref().unwrap_or(default_level);
    gpucloud_telemetry::init_logging(cli.log_format, log_level)?;
    gpucloud_telemetry::process::report_heap(heap_figures);
    if let Err(error) = page_return {
        // Only memory is at stake: the process runs on with jemalloc's defaults.
        tracing::warn!(%error, "freed heap pages are given back on jemalloc's default schedule");
    }
    match cli.command {
        Command::Run(args) => gpucloud_controller::operator::cli::run(args, BUILD)
            .await
            .context("operator")?,
        #[cfg(feature = "sandbox")]
        Command::Simulator(args) => gpucloud_simulator::cli::run(args)
            .await
            .context("simulator")?,
        #[cfg(feature = "sandbox")]
        Command::Apiserver(args) => gpucloud_apiserver::cli::run(args)
            .await
            .context("apiserver")?,
        // The sandbox's errors are one line each already: no context added.
        #[cfg(feature = "sandbox")]
        Command::Dev(args) => gpucloud_dev::run(args).await?,
        Command::Release(args) => {
            let released = gpucloud_controller::tools::release::run(&args)
                .await
                .context("release")?;
            println!("KIND\tNAMESPACE/NAME\tCLOUD ID (left in the cloud)");
            for object in &released {
                let id = object.external_id.as_deref().unwrap_or("-");
                println!(
                    "{}\t{}/{}\t{id}",
                    object.kind, object.namespace, object.name
                );
            }
            eprintln!(
                "released {} objects; what they leave in the cloud is also recorded in ConfigMap {}/{}",
                released.len(),
                args.operator_namespace,
                gpucloud_controller::accounts::orphans::RELEASED_CONFIGMAP
            );
        }
        Command::Plan(args) => {
            use gpucloud_controller::tools::plan;
            let planned = plan::run(&args).await;
            // A plan the API server would refuse is printed all the same, then fails.
            if let Err(plan::Error::Refused { output, .. }) = &planned {
                print!("{output}");
            }
            print!("{}", planned.context("plan")?);
        }
        Command::Crds | Command::Version => {}
    }
    Ok(())
}

impl Command {
    /// The sandbox, whose table is the output: it logs only warnings by default.
    fn is_sandbox(&self) -> bool {
        #[cfg(feature = "sandbox")]
        if matches!(self, Command::Dev(_)) {
            return true;
        }
        false
    }
}

/// `context: cause: cause`, each cause once: an error whose text already carries its source's
/// (as most of ours do, to read well in conditions) does not repeat it.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// What this binary is (build.rs records the commit).
const BUILD: gpucloud_telemetry::BuildInfo = gpucloud_telemetry::BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    commit: env!("GPUCLOUD_GIT_COMMIT"),
    commit_date: env!("GPUCLOUD_COMMIT_DATE"),
    kubernetes: gpucloud_controller::operator::cli::KUBERNETES_API,
};

fn print_only(command: &Command) -> anyhow::Result<()> {
    match command {
        Command::Crds => print!("{}", gpucloud_controller::kinds::registry::crds_yaml()?),
        _ => print!("{}", version_text(&BUILD)),
    }
    Ok(())
}

/// `gpucloud-operator version`: one fact a line.
fn version_text(build: &gpucloud_telemetry::BuildInfo) -> String {
    let (major, minor) = gpucloud_controller::operator::cli::MIN_KUBERNETES;
    format!(
        "gpucloud-operator {}\ncommit: {} ({})\nkubernetes: API {}, runs on {major}.{minor} or newer\n",
        build.version, build.commit, build.commit_date, build.kubernetes
    )
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn version_names_the_commit_and_the_kubernetes_it_needs() {
        let text = super::version_text(&super::BUILD);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!("gpucloud-operator {}", env!("CARGO_PKG_VERSION"))
        );
        assert!(
            lines[1].starts_with("commit: ") && !lines[1].contains("unknown"),
            "{text}"
        );
        assert_eq!(lines[2], "kubernetes: API 1.33, runs on 1.31 or newer");
    }

    #[test]
    fn a_fatal_error_names_each_cause_once() {
        /// An error whose text carries its source's, as the operator's errors do.
        #[derive(Debug)]
        struct Wrapping(std::io::Error);
        impl std::fmt::Display for Wrapping {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "Kubernetes API: {}", self.0)
            }
        }
        impl std::error::Error for Wrapping {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no file /etc/kubeconfig");
        let error = anyhow::Error::new(Wrapping(io)).context("operator");
        assert_eq!(
            super::one_line(&error),
            "operator: Kubernetes API: no file /etc/kubeconfig"
        );
        let chained = anyhow::anyhow!("connection refused").context("listing volumes");
        assert_eq!(
            super::one_line(&chained.context("operator")),
            "operator: listing volumes: connection refused"
        );
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_role_is_a_subcommand() {
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        let mut roles = vec!["run", "crds", "release", "plan", "version"];
        if cfg!(feature = "sandbox") {
            roles.extend(["simulator", "apiserver", "dev"]);
        } else {
            for sandbox_only in ["simulator", "apiserver", "dev"] {
                assert!(
                    !names.iter().any(|n| n == sandbox_only),
                    "{sandbox_only} needs the sandbox feature: {names:?}"
                );
            }
        }
        for role in roles {
            assert!(
                names.iter().any(|n| n == role),
                "missing subcommand {role}: {names:?}"
            );
        }
    }

    /// Freed pages are given back within [`super::DIRTY_DECAY_MS`], by a background thread.
    #[test]
    fn freed_pages_are_given_back_on_time() {
        use tikv_jemalloc_ctl::{Access, AsName, background_thread};
        super::return_freed_pages_on_time().expect("jemalloc takes the settings");
        for name in [&b"arenas.dirty_decay_ms\0"[..], b"arena.0.dirty_decay_ms\0"] {
            let decay: isize = name.name().read().unwrap();
            assert_eq!(decay, super::DIRTY_DECAY_MS);
        }
        assert!(background_thread::read().unwrap());
    }

    /// The binary's allocator keeps statistics: the heap metrics have figures to serve.
    #[test]
    fn jemalloc_counts_the_heap() {
        let held = vec![1u8; 4 << 20];
        let figures = super::heap_figures().expect("jemalloc built with statistics");
        assert!(figures.allocated >= held.len() as u64, "{figures:?}");
        assert!(figures.resident >= figures.allocated, "{figures:?}");
    }
}
