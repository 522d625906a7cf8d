//! Reconcilers for every gpucloud.io kind and the machinery they share.
//!
//! The folders, from the bottom up (a folder uses only those before it, except where its
//! module doc says otherwise; `tests/import_circles.rs` at the workspace root checks that no
//! two files refer to each other, directly or round a circle):
//!
//! - [`runtime`]: kind-independent machinery: the applier, stores, fair shares, the
//!   operator's own writes, leader election, the Kubernetes client's throttle, hooks and
//!   metrics, watch health, decoding, paging, events, the clock.
//! - [`accounts`]: the cloud side of each account: credentials, the cached lists and catalog,
//!   observers, prices, and the sweeps of what no object claims.
//! - [`flow`]: the reconcile flow every kind shares, the `ManagedKind` contract it is
//!   written against, and what decides for it (conditions, errors, backoff, adoption).
//! - [`kinds`]: one controller per kind, with its own parts, and the registry that lists them.
//! - [`operator`]: the running operator: its flags, its replica's leadership, the wiring of
//!   every controller.
//! - [`tools`]: the command-line tools besides `run` (`plan`, `release`) and the manifests
//!   they read.
// Every function, tests included, stays within clippy's default of 100 lines: a longer one
// is split into named steps.
#![warn(clippy::too_many_lines)]

pub mod accounts;
pub mod flow;
pub mod kinds;
pub mod operator;
pub mod runtime;
pub mod tools;

#[cfg(test)]
mod unit_tests;

pub use flow::error::{Category, Error};

/// Locks `mutex`, recovering it from a panic in another holder: every lock here guards
/// bookkeeping that stays consistent between statements, so a panic leaves nothing half done.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
