//! The operator's scenarios, one module per topic, linked into a single test binary: every
//! binary carries the whole operator, API server and simulator, so one binary instead of one
//! per file keeps the build's disk use and link time down. The chaos harness stays a binary of
//! its own because it installs a process-wide log subscriber.
// Every function, tests included, stays within clippy's default of 100 lines: a longer one
// is split into named steps.
#![warn(clippy::too_many_lines)]

mod support;

mod adoption;
mod all_in_one;
mod bad_input;
mod budgets;
mod changes;
mod client_throttle;
mod deletion_protection;
mod events;
mod examples;
mod fair_share;
mod final_snapshot;
mod firewalls;
mod gpu_policies;
mod hourly_rates;
mod idempotence;
mod invalid_objects;
mod lifecycle;
mod lifetimes;
mod lifetimes_scaled;
mod offerings;
mod openmetrics;
mod orphans;
mod outage;
mod placement;
mod plan;
mod policies;
mod pools;
mod production;
mod rate_limit_storm;
mod readoption;
mod ready_as_specified;
mod reconcile_now;
mod release;
mod secret_isolation;
mod settled_traffic;
mod snapshots;
mod ssh_key_policies;
mod untrusted_lists;
mod volumes;
