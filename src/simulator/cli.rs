//! The `simulator` subcommand: every setting as a flag with an environment variable, and the
//! keys of further accounts in an environment variable only
//! ([`OTHER_ACCOUNT_KEYS_ENV`]: secrets that many are not put on a command line).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::config::{
    DEFAULT_HIBERNATED_RATE_FRACTION, DEFAULT_STOPPED_RATE_FRACTION, Delays, DropMode, FaultPlan,
    LatencySpike, RateLimit, SimulatorConfig, ThrottleBurst,
};
use crate::{Error, Simulator};

/// Run the Cloud GPU Compute Service simulator.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, env = "GPUCLOUD_SIM_LISTEN", default_value = "127.0.0.1:8089")]
    pub listen: SocketAddr,
    /// Accepted API keys of the first account (comma-separated or repeated). Further
    /// accounts, each with its own resources, balance and rate limit per key, take their keys
    /// from the environment variable GPUCLOUD_SIM_OTHER_ACCOUNT_KEYS only: accounts separated
    /// by `;`, the keys of one account by `,` (e.g. `k1;k2,k2b`); unset or empty for none.
    #[arg(
        long = "api-key",
        env = "GPUCLOUD_SIM_API_KEYS",
        value_delimiter = ',',
        default_value = "sim-key",
        hide_env_values = true,
        hide_default_value = true
    )]
    pub api_keys: Vec<Secret>,
    /// Seed of every random choice (faults, IP addresses).
    #[arg(long, env = "GPUCLOUD_SIM_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Simulated seconds per real second (billing and state delays).
    #[arg(long, env = "GPUCLOUD_SIM_TIME_SCALE", default_value_t = 1.0)]
    pub time_scale: f64,
    /// The moment the simulated clock starts at (RFC 3339); the wall clock when absent.
    #[arg(long, env = "GPUCLOUD_SIM_START_AT")]
    pub start_at: Option<jiff::Timestamp>,
    /// Requests per second per API key; unlimited when absent.
    #[arg(long, env = "GPUCLOUD_SIM_RATE_LIMIT")]
    pub rate_limit: Option<f64>,
    /// Burst size of the rate limit.
    #[arg(long, env = "GPUCLOUD_SIM_RATE_BURST", default_value_t = 20)]
    pub rate_burst: u32,
    /// Milliseconds an instance stays CREATING.
    #[arg(long, env = "GPUCLOUD_SIM_CREATE_DELAY_MS", default_value_t = 3000)]
    pub create_delay_ms: u64,
    /// Milliseconds an ACTIVE instance reports BOOTING before RUNNING.
    #[arg(long, env = "GPUCLOUD_SIM_BOOT_DELAY_MS", default_value_t = 2000)]
    pub boot_delay_ms: u64,
    /// Milliseconds of STOPPING, STARTING, REBOOTING, HIBERNATING and DELETING.
    #[arg(long, env = "GPUCLOUD_SIM_TRANSITION_DELAY_MS", default_value_t = 2000)]
    pub transition_delay_ms: u64,
    /// Milliseconds a snapshot stays creating.
    #[arg(long, env = "GPUCLOUD_SIM_SNAPSHOT_DELAY_MS", default_value_t = 5000)]
    pub snapshot_delay_ms: u64,
    /// Milliseconds an image stays creating.
    #[arg(long, env = "GPUCLOUD_SIM_IMAGE_DELAY_MS", default_value_t = 5000)]
    pub image_delay_ms: u64,
    /// Milliseconds a volume stays creating.
    #[arg(long, env = "GPUCLOUD_SIM_VOLUME_DELAY_MS", default_value_t = 1000)]
    pub volume_delay_ms: u64,
    /// Balance of the fresh account, in USD.
    #[arg(long, env = "GPUCLOUD_SIM_INITIAL_BALANCE", default_value_t = 1000.0)]
    pub initial_balance: f64,
    /// Share of its running hourly rate a machine is billed while SHUTOFF (0 to 1).
    #[arg(
        long,
        env = "GPUCLOUD_SIM_STOPPED_RATE_FRACTION",
        default_value_t = DEFAULT_STOPPED_RATE_FRACTION
    )]
    pub stopped_rate_fraction: f64,
    /// Share of its running hourly rate a machine is billed while HIBERNATED (0 to 1).
    #[arg(
        long,
        env = "GPUCLOUD_SIM_HIBERNATED_RATE_FRACTION",
        default_value_t = DEFAULT_HIBERNATED_RATE_FRACTION
    )]
    pub hibernated_rate_fraction: f64,
    /// Bearer token of the admin API under /_admin/; the admin API is off without it.
    #[arg(long, env = "GPUCLOUD_SIM_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<Secret>,
    /// Milliseconds lists lag behind writes.
    #[arg(long, env = "GPUCLOUD_SIM_LIST_LAG_MS", default_value_t = 0)]
    pub list_lag_ms: u64,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "GPUCLOUD_SIM_MAX_BODY_BYTES", default_value_t = 65536)]
    pub max_body_bytes: usize,
    /// GPUs of each type available per region.
    #[arg(long, env = "GPUCLOUD_SIM_GPU_CAPACITY", default_value_t = 512)]
    pub gpu_capacity: u32,
    /// Milliseconds added to every API response.
    #[arg(long, env = "GPUCLOUD_SIM_LATENCY_MS", default_value_t = 0)]
    pub latency_ms: u64,
    /// Probability of a latency spike per request.
    #[arg(long, env = "GPUCLOUD_SIM_SPIKE_PROBABILITY", default_value_t = 0.0)]
    pub spike_probability: f64,
    /// Milliseconds of a latency spike.
    #[arg(long, env = "GPUCLOUD_SIM_SPIKE_MS", default_value_t = 2000)]
    pub spike_ms: u64,
    /// Probability of an injected 500 per request, for every operation.
    #[arg(long, env = "GPUCLOUD_SIM_ERROR_RATE", default_value_t = 0.0)]
    pub error_rate: f64,
    /// Per-operation error probability, as `Operation=probability` (comma-separated).
    #[arg(long, env = "GPUCLOUD_SIM_ERROR_RATE_FOR", value_delimiter = ',', value_parser = parse_operation_probability)]
    pub error_rate_for: Vec<(String, f64)>,
    /// Probability that a burst of 429 answers starts at a request.
    #[arg(long, env = "GPUCLOUD_SIM_THROTTLE_PROBABILITY", default_value_t = 0.0)]
    pub throttle_probability: f64,
    /// Requests answered 429 in a row once a burst starts.
    #[arg(long, env = "GPUCLOUD_SIM_THROTTLE_LENGTH", default_value_t = 5)]
    pub throttle_length: u32,
    /// Retry-After seconds of an injected 429.
    #[arg(long, env = "GPUCLOUD_SIM_THROTTLE_RETRY_AFTER", default_value_t = 1)]
    pub throttle_retry_after: u64,
    /// Operations performed whose response is then lost, as `Operation=probability`.
    #[arg(long, env = "GPUCLOUD_SIM_ACT_THEN_DROP", value_delimiter = ',', value_parser = parse_operation_probability)]
    pub act_then_drop: Vec<(String, f64)>,
    /// How a lost response is lost: `delay` (held back) or `close` (connection closed).
    #[arg(long, env = "GPUCLOUD_SIM_DROP_MODE", default_value = "delay", value_parser = ["delay", "close"])]
    pub drop_mode: String,
    /// Milliseconds a lost response is held back in `delay` mode.
    #[arg(long, env = "GPUCLOUD_SIM_DROP_DELAY_MS", default_value_t = 60_000)]
    pub drop_delay_ms: u64,
    /// Probability that a list of resources leaves out each existing item (0 to 1).
    #[arg(long, env = "GPUCLOUD_SIM_LIST_OMISSION_RATE", default_value_t = 0.0)]
    pub list_omission_rate: f64,
    /// Keep a ledger of every call that changed an account, with when it acted, for
    /// `GET /_admin/ledger` (it grows with every such call: for benchmarks and tests).
    #[arg(long, env = "GPUCLOUD_SIM_KEEP_LEDGER")]
    pub keep_ledger: bool,
}

/// A secret flag value (API key, admin token) whose `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Ok(Secret(value.to_string()))
    }
}

/// The environment variable with the API keys of the accounts after the first, in order:
/// accounts separated by `;`, the keys of one account by `,` (e.g. `k1;k2,k2b;k3` is three
/// accounts, the second with two keys). Unset or empty means none. It has no flag: keys are
/// secrets, and a command line is visible to every user of the machine.
pub const OTHER_ACCOUNT_KEYS_ENV: &str = "GPUCLOUD_SIM_OTHER_ACCOUNT_KEYS";

/// The further accounts [`OTHER_ACCOUNT_KEYS_ENV`] gives, checked against each other and
/// against `first_account` (the keys of `--api-key`).
pub fn other_accounts_from_env(first_account: &[String]) -> Result<Vec<Vec<String>>, Error> {
    match std::env::var(OTHER_ACCOUNT_KEYS_ENV) {
        Ok(value) => parse_other_account_keys(&value, first_account),
        Err(std::env::VarError::NotPresent) => Ok(Vec::new()),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::Environment {
            variable: OTHER_ACCOUNT_KEYS_ENV,
            reason: "not valid UTF-8".to_string(),
        }),
    }
}

/// Parses the value of [`OTHER_ACCOUNT_KEYS_ENV`]: one list of keys per account, in order.
/// Spaces around a key are dropped (an HTTP header value cannot carry them). An empty key or
/// account, or a key given twice (here or in `first_account`), is refused; the error names the
/// variable and the account, never a key.
pub fn parse_other_account_keys(
    value: &str,
    first_account: &[String],
) -> Result<Vec<Vec<String>>, Error> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    let refuse = |reason: String| Error::Environment {
        variable: OTHER_ACCOUNT_KEYS_ENV,
        reason,
    };
    // Which account each key seen so far opens; the first account is 0.
    let mut opened: BTreeMap<&str, usize> =
        first_account.iter().map(|key| (key.as_str(), 0)).collect();
    let mut accounts = Vec::new();
    for (entry, keys) in value.split(';').enumerate() {
        // Account 0 is that of `--api-key`: the variable's entries are accounts 1, 2, ...
        let account = entry + 1;
        if keys.trim().is_empty() {
            return Err(refuse(format!(
                "account {account} has no API key (accounts are separated by `;`, the keys of \
                 one account by `,`)"
            )));
        }
        let mut account_keys = Vec::new();
        for key in keys.split(',').map(str::trim) {
            if key.is_empty() {
                return Err(refuse(format!(
                    "account {account} has an empty API key (accounts are separated by `;`, the \
                     keys of one account by `,`)"
                )));
            }
            if let Some(owner) = opened.insert(key, account) {
                return Err(refuse(format!(
                    "account {account} repeats an API key of account {owner}: a key opens one \
                     account"
                )));
            }
            account_keys.push(key.to_string());
        }
        accounts.push(account_keys);
    }
    Ok(accounts)
}

fn parse_operation_probability(value: &str) -> Result<(String, f64), String> {
    let (name, probability) = value
        .split_once('=')
        .ok_or_else(|| format!("{value:?}: expected Operation=probability"))?;
    let probability: f64 = probability
        .parse()
        .map_err(|_| format!("{value:?}: {probability:?} is not a number"))?;
    Ok((name.trim().to_string(), probability))
}

impl Args {
    /// The configuration these flags describe: one account, as further accounts come from
    /// the environment only ([`other_accounts_from_env`], which [`run`] adds).
    pub fn to_config(&self) -> SimulatorConfig {
        let millis = Duration::from_millis;
        SimulatorConfig {
            api_keys: self
                .api_keys
                .iter()
                .map(|key| key.expose().to_string())
                .collect(),
            seed: self.seed,
            time_scale: self.time_scale,
            start: self.start_at,
            rate_limit: self.rate_limit.map(|per_second| RateLimit {
                per_second,
                burst: self.rate_burst,
            }),
            delays: Delays {
                create: millis(self.create_delay_ms),
                boot: millis(self.boot_delay_ms),
                power_transition: millis(self.transition_delay_ms),
                snapshot: millis(self.snapshot_delay_ms),
                image: millis(self.image_delay_ms),
                volume: millis(self.volume_delay_ms),
            },
            initial_balance: self.initial_balance,
            stopped_rate_fraction: self.stopped_rate_fraction,
            hibernated_rate_fraction: self.hibernated_rate_fraction,
            admin_token: self
                .admin_token
                .as_ref()
                .map(|token| token.expose().to_string()),
            faults: FaultPlan {
                latency: millis(self.latency_ms),
                latency_spike: (self.spike_probability > 0.0).then_some(LatencySpike {
                    probability: self.spike_probability,
                    extra: millis(self.spike_ms),
                }),
                latency_ms_per_operation: BTreeMap::new(),
                error_rate: self.error_rate,
                error_rate_per_operation: self
                    .error_rate_for
                    .iter()
                    .cloned()
                    .collect::<BTreeMap<_, _>>(),
                throttle_burst: (self.throttle_probability > 0.0).then_some(ThrottleBurst {
                    probability: self.throttle_probability,
                    length: self.throttle_length,
                    retry_after_secs: self.throttle_retry_after,
                }),
                act_then_drop: self.act_then_drop.iter().cloned().collect(),
                drop_mode: if self.drop_mode == "close" {
                    DropMode::CloseConnection
                } else {
                    DropMode::Delay {
                        delay: millis(self.drop_delay_ms),
                    }
                },
                omit_from_lists: Default::default(),
                list_omission_rate: self.list_omission_rate,
                act_late: BTreeMap::new(),
                accounts: Vec::new(),
            },
            list_lag: millis(self.list_lag_ms),
            max_body_bytes: self.max_body_bytes,
            gpu_capacity_per_region: self.gpu_capacity,
            // Further accounts come from the environment (`run`).
            other_accounts: Vec::new(),
            keep_ledger: self.keep_ledger,
        }
    }
}

/// Serves the accounts of the flags and of [`OTHER_ACCOUNT_KEYS_ENV`] until Ctrl-C, printing
/// the base URL once listening.
pub async fn run(args: Args) -> Result<(), Error> {
    let mut config = args.to_config();
    config.other_accounts = other_accounts_from_env(&config.api_keys)?;
    let handle = Simulator::start(config, args.listen).await?;
    println!("gpucloud simulator listening on {}", handle.base_url());
    if args.admin_token.is_some() {
        println!(
            "admin API at {}{}/",
            handle.base_url(),
            crate::admin::PREFIX
        );
    }
    tokio::signal::ctrl_c().await.map_err(Error::Serve)?;
    handle.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_build_the_configuration() {
        let cli = Cli::try_parse_from([
            "sim",
            "--listen",
            "127.0.0.1:0",
            "--api-key",
            "a,b",
            "--rate-limit",
            "5",
            "--rate-burst",
            "2",
            "--error-rate-for",
            "CreateInstance=0.5",
            "--act-then-drop",
            "CreateVolume=1",
            "--drop-mode",
            "close",
            "--list-lag-ms",
            "250",
            "--stopped-rate-fraction",
            "0.25",
        ])
        .unwrap();
        let config = cli.args.to_config();
        assert_eq!(config.stopped_rate_fraction, 0.25);
        assert_eq!(
            config.hibernated_rate_fraction,
            SimulatorConfig::default().hibernated_rate_fraction
        );
        assert_eq!(config.api_keys, vec!["a", "b"]);
        assert_eq!(
            config.rate_limit,
            Some(RateLimit {
                per_second: 5.0,
                burst: 2
            })
        );
        assert_eq!(config.faults.error_rate_for("CreateInstance"), 0.5);
        assert_eq!(config.faults.act_then_drop["CreateVolume"], 1.0);
        assert_eq!(config.faults.drop_mode, DropMode::CloseConnection);
        assert_eq!(config.list_lag, Duration::from_millis(250));
        assert!(config.faults.validate().is_ok());
        assert!(Cli::try_parse_from(["sim", "--error-rate-for", "nonsense"]).is_err());
        // Secrets never show in Debug output.
        let cli =
            Cli::try_parse_from(["sim", "--api-key", "top-secret", "--admin-token", "hidden"])
                .unwrap();
        let debug = format!("{:?}", cli.args);
        assert!(
            !debug.contains("top-secret") && !debug.contains("hidden"),
            "{debug}"
        );
        assert_eq!(cli.args.to_config().admin_token.as_deref(), Some("hidden"));
    }

    #[test]
    fn other_account_keys_parse_into_accounts_in_order() {
        let first = ["first".to_string()];
        assert_eq!(
            parse_other_account_keys("a;b,c", &first).unwrap(),
            [
                vec!["a".to_string()],
                vec!["b".to_string(), "c".to_string()]
            ]
        );
        assert_eq!(
            parse_other_account_keys(" k1 ; k2 , k2b ;k3", &first).unwrap(),
            [vec!["k1"], vec!["k2", "k2b"], vec!["k3"]]
        );
        for none in ["", "  "] {
            assert!(parse_other_account_keys(none, &first).unwrap().is_empty());
        }
    }

    #[test]
    fn bad_other_account_keys_are_refused_naming_the_variable_not_the_key() {
        let first = ["secret-first".to_string()];
        for (value, reason) in [
            ("a;;c", "account 2 has no API key"),
            ("a;b,", "account 2 has an empty API key"),
            ("a;", "account 2 has no API key"),
            (
                "secret-b;secret-b",
                "account 2 repeats an API key of account 1",
            ),
            (
                "secret-a,secret-a",
                "account 1 repeats an API key of account 1",
            ),
            (
                "secret-a;secret-first",
                "account 2 repeats an API key of account 0",
            ),
        ] {
            let error = parse_other_account_keys(value, &first).unwrap_err();
            assert!(
                matches!(error, Error::Environment { .. }),
                "{value}: {error:?}"
            );
            let message = error.to_string();
            assert!(
                message.starts_with("GPUCLOUD_SIM_OTHER_ACCOUNT_KEYS: ")
                    && message.contains(reason),
                "{value}: {message}"
            );
            assert!(!message.contains("secret-"), "{value}: {message}");
        }
    }

    #[test]
    fn help_names_the_variable_of_further_accounts() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains(OTHER_ACCOUNT_KEYS_ENV), "{help}");
    }
}
