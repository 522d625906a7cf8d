//! `gpucloud-operator`: one binary, one subcommand per role.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "gpucloud-operator",
    version,
    about = "Manage Cloud GPU Compute Service resources as Kubernetes objects"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions of every kind as YAML (what `crds/` holds).
    Crds,
    /// Print version information.
    Version,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crds => {
            print!("{}", gpucloud_api::crds_yaml()?);
            Ok(())
        }
        Command::Version => {
            println!("gpucloud-operator {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
