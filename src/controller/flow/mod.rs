//! The reconcile flow every managed kind shares, and the contract a kind fills in for it.
//!
//! Owns `ManagedKind` (`kind`), the per-kind context (`context`), the flow itself
//! (`reconcile`: pause, finalizer, credentials, adoption, idempotent create, converge, status,
//! deletion), the create decision (`create`), conditions and errors, the per-object failure
//! backoff (`backoff`), adoption checks (`adoption`), lookups of referenced objects
//! (`dereference`) and the index of referrers (`referrer_index`), cloud names (`naming`),
//! re-adoption at start (`readopt`), the settled objects' rechecks (`recheck`) and the
//! per-kind gauges (`gauges`).
//!
//! May use: [`crate::runtime`] and [`crate::accounts`]' caches. It never names a kind, nor a
//! feature of some kinds (budgets, orphan records, late creates): those are reached through
//! the hooks its context is given.

pub mod adoption;
pub mod backoff;
pub mod conditions;
pub mod context;
pub mod create;
pub mod dereference;
pub mod error;
pub mod gauges;
pub mod kind;
pub mod naming;
pub mod readopt;
pub mod recheck;
pub mod reconcile;
pub mod referrer_index;
