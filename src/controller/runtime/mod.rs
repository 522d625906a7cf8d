//! Kind-independent machinery: nothing here knows `ManagedKind` or a cloud account.
//!
//! Owns the applier that runs a kind's reconciles and its queue rules, the stores the watches
//! keep, fair shares of reconcile slots, this process's own writes read back, leader election,
//! the Kubernetes client's throttle, request hooks and metrics, watch health for readiness,
//! decoding of watched objects, paged lists, Kubernetes Events and the operator's clock.
//!
//! May use: other crates and the crate root's helpers (`crate::lock`); nothing else of this
//! crate.

pub(crate) mod applier;
pub(crate) mod client_hooks;
pub mod client_metrics;
pub mod client_throttle;
pub mod clock;
pub mod decode;
pub mod events;
pub(crate) mod fair_share;
pub mod leader;
pub(crate) mod own_writes;
pub mod pages;
pub(crate) mod store;
pub(crate) mod watch_health;
