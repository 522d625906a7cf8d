//! The cloud side of each account (one per credentials Secret).
//!
//! Owns the account state and its credentials (`account`), which Secrets the operator may
//! read or write (`secrets`), the cached cloud lists (`observer`, with what every kind's
//! records share in `records`), the GPU catalog and price list (`catalog`, `pricing`), and
//! the sweeps of cloud resources no object claims (`orphans`, `late_creates`), and the record
//! of resources left in the cloud on purpose (`released`).
//!
//! May use: [`crate::runtime`], and of [`crate::flow`] the error and condition types; the
//! sweeps also use the kinds' contract (`flow::kind`), the context (`late_creates`) and the
//! registry (`orphans`). The flow's `reconcile` calls the sweeps' entry points by name.
pub mod account;
pub(crate) mod catalog;
pub(crate) mod late_creates;
pub mod observer;
pub mod orphans;
pub(crate) mod pricing;
pub(crate) mod records;
pub mod released;
pub mod secrets;
