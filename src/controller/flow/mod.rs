//! The reconcile flow every managed kind shares, and the contract a kind fills in for it.
//!
//! Owns what a kind declares about its objects (`declarations`: its cloud resource, its
//! references, how its status reads a record, what it costs) and what it does in a reconcile
//! (`kind`: `ManagedKind`, built on the declarations), the per-kind context (`context`), the
//! flow itself (`reconcile`: pause, finalizer, credentials, adoption, idempotent create,
//! converge, status, deletion), what an object's status records (`recorded`), the create
//! decision (`create`), conditions and errors, the per-object failure backoff (`backoff`),
//! adoption checks (`adoption`) and the index of who claims which cloud resource
//! (`claim_index`), lookups of referenced objects (`dereference`) and the index
//! of referrers (`referrer_index`), cloud names (`naming`), re-adoption at start (`readopt`),
//! the settled objects' rechecks (`recheck`) and the per-kind gauges (`gauges`).
//!
//! May use: [`crate::runtime`] and [`crate::accounts`]' caches. The context and what it holds
//! (adoption, dereference, gauges, the referrer index) know a kind only by its
//! `KindDeclarations`, so `ManagedKind`, whose actions take the context, sits above them. The
//! flow names no kind; three features of some kinds are called by name from `reconcile`
//! (Budget reservations in `kinds::budget`, the released record of `accounts::orphans`, the
//! watch of `accounts::late_creates`), none of which uses `reconcile`.
pub mod adoption;
pub(crate) mod backoff;
pub(crate) mod claim_index;
pub mod conditions;
pub mod context;
pub(crate) mod create;
pub(crate) mod declarations;
pub(crate) mod dereference;
pub(crate) mod error;
pub(crate) mod gauges;
pub mod kind;
pub mod naming;
pub(crate) mod readopt;
pub(crate) mod recheck;
pub mod reconcile;
pub mod recorded;
pub(crate) mod referrer_index;
