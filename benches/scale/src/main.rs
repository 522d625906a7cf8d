//! `scale-bench`: runs the scale scenario and prints each target's pass/fail.

use clap::Parser;
use gpucloud_bench::args::Args;
use std::process::ExitCode;

/// The operator's allocator, so that `--list-only` decodes as fast as the operator can.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // kube and reqwest both bring rustls; name the provider once for the whole process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Some(kubeconfig) = &args.list_only {
        return match gpucloud_bench::scenario::list_only(kubeconfig, args.scenario).await {
            Ok(listed) => {
                println!("{}{listed}", gpucloud_bench::scenario::LISTED_PREFIX);
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("scale-bench --list-only: {error}");
                ExitCode::FAILURE
            }
        };
    }
    match gpucloud_bench::scenario::run(&args).await {
        Ok(written) => {
            print!("{}", written.result.table());
            println!("result: {}", written.json.display());
            println!("plot: {}", written.plot.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("scale-bench: {error}");
            ExitCode::FAILURE
        }
    }
}
