//! Serde models of every record, request body and response body of the Cloud GPU Compute
//! Service API, as `docs/cloud-api.md` fixes them.
//!
//! The client decodes responses with these types and the simulator encodes its responses with
//! them, so the two cannot disagree on the wire. Decoding is lenient on purpose: unknown fields
//! are ignored, missing response fields take their defaults, and the string enums keep values
//! they do not know in an `Other` variant, so a new state in the cloud never breaks decoding.
//! Request bodies keep their required fields required, so a server decoding them can name the
//! field that is missing.

mod string_enum;

mod account;
mod ai;
mod catalog;
mod common;
mod firewalls;
mod images;
mod instances;
mod rules;
mod snapshots;
mod ssh_keys;
mod startup_scripts;
mod volumes;

pub use account::*;
pub use ai::*;
pub use catalog::*;
pub use common::*;
pub use firewalls::*;
pub use images::*;
pub use instances::*;
pub use rules::*;
pub use snapshots::*;
pub use ssh_keys::*;
pub use startup_scripts::*;
pub use volumes::*;

#[cfg(test)]
mod tests;
