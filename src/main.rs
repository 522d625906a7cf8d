//! `gpucloud-operator`: one binary, one subcommand per role.
#![forbid(unsafe_code)]

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use gpucloud_telemetry::LogFormat;

/// jemalloc instead of the C library's allocator: the work is mostly small, short-lived
/// allocations (decoding lists and watch events), and after a burst of them the operator held
/// about half as much memory per object with jemalloc, for less CPU time (docs/performance.md,
/// "Memory per object").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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

#[derive(Subcommand)]
enum Command {
    /// Run the controllers against a cluster.
    Run(gpucloud_controller::cli::Args),
    /// Print the CustomResourceDefinitions of every kind as YAML (what `crds/` holds).
    Crds,
    /// Run the cloud API simulator.
    Simulator(gpucloud_simulator::cli::Args),
    /// Run the embedded Kubernetes API server on its own.
    Apiserver(gpucloud_apiserver::cli::Args),
    /// Sandbox without a cluster: API server, CRDs, cloud simulator and controllers in one
    /// process, a kubeconfig for kubectl, and `--apply` for manifests.
    Dev(gpucloud_dev::Args),
    /// Print version information.
    Version,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // kube and reqwest both bring rustls; name the provider once for the whole process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if matches!(cli.command, Command::Crds | Command::Version) {
        return print_only(&cli.command);
    }
    let default_level = if matches!(cli.command, Command::Dev(_)) {
        "warn"
    } else {
        "info"
    };
    let log_level = cli.log_level.as_deref().unwrap_or(default_level);
    gpucloud_telemetry::init_logging(cli.log_format, log_level)?;
    match cli.command {
        Command::Run(args) => gpucloud_controller::cli::run(args)
            .await
            .context("operator")?,
        Command::Simulator(args) => gpucloud_simulator::cli::run(args)
            .await
            .context("simulator")?,
        Command::Apiserver(args) => gpucloud_apiserver::cli::run(args)
            .await
            .context("apiserver")?,
        // The sandbox's errors are one line each, shown without a cause chain or a
        // backtrace (whatever RUST_BACKTRACE says).
        Command::Dev(args) => {
            if let Err(error) = gpucloud_dev::run(args).await {
                eprintln!("Error: {error}");
                std::process::exit(1);
            }
        }
        Command::Crds | Command::Version => {}
    }
    Ok(())
}

fn print_only(command: &Command) -> anyhow::Result<()> {
    match command {
        Command::Crds => print!("{}", gpucloud_controller::registry::crds_yaml()?),
        _ => println!("gpucloud-operator {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

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
        for role in ["run", "crds", "simulator", "apiserver", "dev", "version"] {
            assert!(
                names.iter().any(|n| n == role),
                "missing subcommand {role}: {names:?}"
            );
        }
    }
}
