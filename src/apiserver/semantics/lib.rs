//! Kubernetes object semantics: structural schemas, defaulting, pruning, CEL rules and patch formats.
//!
//! A pure library: `serde_json::Value`s in, values or errors out. The embedded API server calls it
//! to treat custom resources (and a few built-ins) the way a real kube-apiserver does, including
//! the exact wording of its validation messages.

pub mod apply;
mod gofmt;
mod json;
pub mod patch;

pub mod schema;
