//! Command-line flags of `scale-bench`.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// What the benchmark applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Scenario {
    /// N GpuInstances applied in bulk: convergence, a new object's first reconcile, a
    /// settled window, operator restarts and deletion.
    #[default]
    Instances,
    /// One GpuInstancePool scaled 0 -> N -> 0 through its scale subresource: scale-up and
    /// scale-down against the same lower bounds as N single machines, and the most machines
    /// the cloud ever held. The other phases do not run.
    Pool,
    /// N objects of every billed kind in `--namespaces` namespaces sharing `--accounts`
    /// cloud accounts (one credentials Secret per namespace): convergence and deletion
    /// against the slowest account's bound, settled traffic per account, memory, operator
    /// restarts, fairness under a burst, and the API server's own figures, with one timeline
    /// per account.
    Tenants,
}

/// Scale benchmark: N GpuInstances against the simulator at latency L and rate limit R.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "scale-bench")]
pub struct Args {
    /// `instances`: N GpuInstances, every phase. `pool`: one GpuInstancePool scaled
    /// 0 -> N -> 0; the new objects, settled window and restarts do not run, so
    /// `--new-objects`, `--quiet-wait`, `--settled-window` and `--restarts` are unused.
    #[arg(long, value_enum, default_value_t = Scenario::Instances)]
    pub scenario: Scenario,
    /// Number of GpuInstances applied in bulk (N); in the `tenants` scenario, objects of every
    /// kind.
    #[arg(long, default_value_t = 10_000)]
    pub objects: usize,
    /// `tenants`: namespaces the objects are spread over, each with the same mix.
    #[arg(long, default_value_t = 100)]
    pub namespaces: usize,
    /// `tenants`: cloud accounts; namespace i uses account i modulo this, through a
    /// credentials Secret of its own.
    #[arg(long, default_value_t = 10)]
    pub accounts: usize,
    /// `tenants`: GpuInstances one namespace applies at once for the fairness phase (default
    /// N / 2); 0 skips the phase.
    #[arg(long)]
    pub burst_objects: Option<usize>,
    /// `tenants`: new objects applied in each quiet namespace during the burst.
    #[arg(long, default_value_t = 20)]
    pub probes: usize,
    /// `tenants`: GpuInstances of the storm phase, spread evenly over every namespace and
    /// applied twice, once without a fault and once while the first account is in a storm of
    /// `429` and `500` answers (default N / 10); 0 skips the phase, as does a single account.
    #[arg(long)]
    pub storm_objects: Option<usize>,
    /// `tenants`: seconds the first account's storm lasts.
    #[arg(long, default_value_t = 300)]
    pub storm_seconds: u64,
    /// Fixed latency the simulator adds to every response, in milliseconds (L).
    #[arg(long, default_value_t = 20)]
    pub latency_ms: u64,
    /// Requests per second the simulator allows per API key (R). The operator is configured
    /// with the same rate, since the cloud does not publish its limit.
    #[arg(long, default_value_t = 50.0)]
    pub rate_limit: f64,
    /// Burst of the simulator's rate limit.
    #[arg(long, default_value_t = 20)]
    pub simulator_burst: u32,
    /// Burst of the operator's client limiter (kept below the simulator's so that network
    /// jitter never empties the simulator's bucket).
    #[arg(long, default_value_t = 5)]
    pub operator_burst: u32,
    /// The operator's client-side limit on Kubernetes API requests per second
    /// (`--kube-api-qps`); 0, its default, sets none.
    #[arg(long, default_value_t = 0.0)]
    pub kube_api_qps: f64,
    /// Reconciles of one kind at once in the operator (its default); used in the lower bound.
    #[arg(long, default_value_t = 8)]
    pub concurrency: u16,
    /// The operator's resync interval (its default is 60s); settled traffic is compared with
    /// one list per kind, and with N per-object reads, per interval.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub resync_interval: Duration,
    /// Wait after everything is Ready before the settled window, so that the operator's fast
    /// lists after the last transition (its hot window is 120 s) have wound down.
    #[arg(long, default_value = "130s", value_parser = parse_duration)]
    pub quiet_wait: Duration,
    /// Length of the settled window in which cloud calls are counted.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub settled_window: Duration,
    /// Objects applied one by one while N are settled, to measure the first reconcile.
    #[arg(long, default_value_t = 100)]
    pub new_objects: usize,
    /// Operator restarts with everything settled; the restart target is judged on the median.
    #[arg(long, default_value_t = 3)]
    pub restarts: usize,
    /// Concurrent writers applying and deleting objects.
    #[arg(long, default_value_t = 8)]
    pub writers: usize,
    /// Bound on each phase; a phase that takes longer fails the run with a clear error.
    #[arg(long, default_value = "1800s", value_parser = parse_duration)]
    pub phase_timeout: Duration,
    /// Directory for the result JSON, the plot and the processes' logs.
    #[arg(long, default_value = "target/scale-bench")]
    pub out: PathBuf,
    /// The `gpucloud-operator` binary. Default: the one next to this executable, built first
    /// with the same profile when this runs under cargo.
    #[arg(long)]
    pub operator_bin: Option<PathBuf>,
    /// Lists the benchmark's objects with this kubeconfig, prints `listed N` and exits: the
    /// restart's list-only bound, measured in a process as fresh as the restarted operator.
    /// What it lists follows `--scenario`: the GpuInstances (N counts them) and the SSH key of
    /// the single-account run, or every kind of the `tenants` run in every namespace.
    #[arg(long, hide = true)]
    pub list_only: Option<PathBuf>,
}

/// Parses `500ms`, `30s`, `5m`, or a bare number of seconds.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (digits, unit) = raw.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("{raw:?} is not a duration such as 30s, 5m or 500ms"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(value)),
        "ms" => Ok(Duration::from_millis(value)),
        "m" => Ok(Duration::from_secs(value.saturating_mul(60))),
        _ => Err(format!("{raw:?}: unknown unit {unit:?}; use ms, s or m")),
    }
}

impl Args {
    /// The GpuInstances of the multi-tenant run's burst.
    pub fn burst_size(&self) -> usize {
        self.burst_objects.unwrap_or(self.objects / 2)
    }

    /// The GpuInstances of one round of the multi-tenant run's storm phase.
    pub fn storm_size(&self) -> usize {
        self.storm_objects.unwrap_or(self.objects / 10)
    }

    /// How long the storm phase's fault plan is in force.
    pub fn storm_window(&self) -> Duration {
        Duration::from_secs(self.storm_seconds)
    }

    /// Refuses settings the benchmark cannot run with.
    pub fn validate(&self) -> Result<(), String> {
        if self.objects == 0 {
            return Err("--objects must be at least 1".into());
        }
        if !self.rate_limit.is_finite() || self.rate_limit <= 0.0 {
            return Err("--rate-limit must be a positive number".into());
        }
        if self.simulator_burst == 0 || self.operator_burst == 0 {
            return Err("--simulator-burst and --operator-burst must be at least 1".into());
        }
        if self.writers == 0 || self.concurrency == 0 || self.restarts == 0 {
            return Err("--writers, --concurrency and --restarts must be at least 1".into());
        }
        if self.resync_interval.is_zero() || self.settled_window.is_zero() {
            return Err("--resync-interval and --settled-window must be positive".into());
        }
        if self.scenario == Scenario::Tenants {
            if self.accounts == 0 || self.namespaces < self.accounts {
                return Err(
                    "--accounts must be at least 1 and --namespaces at least --accounts".into(),
                );
            }
            if self.objects < self.namespaces * crate::scenario::tenants::SMALLEST_MIX {
                return Err(format!(
                    "--objects must be at least {} per namespace for the tenants mix",
                    crate::scenario::tenants::SMALLEST_MIX
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn defaults_are_the_issue_scenario() {
        let args = Args::try_parse_from(["scale-bench"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.objects, 10_000);
        assert_eq!(args.latency_ms, 20);
        assert_eq!(args.rate_limit, 50.0);
        assert_eq!(args.settled_window, Duration::from_secs(120));
        assert_eq!(args.scenario, Scenario::Instances);
        assert!(args.validate().is_ok());
        assert_eq!(
            (args.storm_size(), args.storm_window()),
            (1_000, Duration::from_secs(300))
        );
    }

    #[test]
    fn the_pool_scenario_is_named_on_the_command_line() {
        let args = Args::try_parse_from(["scale-bench", "--scenario", "pool", "--objects", "1000"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((args.scenario, args.objects), (Scenario::Pool, 1000));
        assert!(Args::try_parse_from(["scale-bench", "--scenario", "pools"]).is_err());
    }

    #[test]
    fn bad_settings_are_refused() {
        let args = Args::try_parse_from(["scale-bench", "--objects", "0"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(args.validate().is_err());
        assert!(Args::try_parse_from(["scale-bench", "--settled-window", "3d"]).is_err());
        let args = Args::try_parse_from(["scale-bench", "--rate-limit", "0"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(args.validate().is_err());
        let args = Args::try_parse_from(["scale-bench", "--restarts", "0"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(args.validate().is_err());
    }
}
