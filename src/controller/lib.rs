//! Reconcilers for every gpucloud.io kind and the machinery they share.

pub mod account;
pub mod applier;
pub mod budget;
pub mod catalog;
pub mod cli;
pub mod client_hooks;
pub mod client_metrics;
pub mod client_throttle;
pub mod clock;
pub mod conditions;
pub mod context;
pub mod create;
pub mod decode;
pub mod error;
pub mod events;
pub mod fair_share;
pub mod final_snapshot;
pub mod firewall;
pub mod gauges;
pub mod gpu_instance;
pub mod gpu_instance_pool;
pub mod image;
pub mod kind;
pub mod late_creates;
pub mod leader;
pub mod manifests;
pub mod naming;
pub mod observer;
pub mod offerings;
pub mod orphans;
pub mod own_writes;
pub mod ownership;
pub mod pages;
pub mod placement;
pub mod plan;
pub mod pricing;
pub mod readopt;
pub mod recheck;
pub mod reconcile;
pub mod records;
pub mod references;
pub mod referrers;
pub mod registry;
pub mod release;
pub mod replica;
pub mod requeue;
pub mod run;
pub mod secrets;
pub mod snapshot;
pub mod ssh_key;
pub mod store;
pub mod volume;
pub mod watch_health;

#[cfg(test)]
mod heap_figures;
#[cfg(test)]
mod mapping_props;

pub use error::{Category, Error};

/// Locks `mutex`, recovering it from a panic in another holder: every lock here guards
/// bookkeeping that stays consistent between statements, so a panic leaves nothing half done.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
