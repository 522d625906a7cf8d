//! Kubernetes object semantics: structural schemas, defaulting, pruning, CEL rules and patch formats.
//!
//! A pure library: `serde_json::Value`s in, values or errors out. The embedded API server calls it
//! to treat custom resources (and a few built-ins) the way a real kube-apiserver does, including
//! the exact wording of its validation messages.
//!
//! - [`schema`]: a CRD version's `openAPIV3Schema` compiled once ([`schema::Schema::compile`]
//!   rejects what CRD creation rejects), then defaulting, pruning and validation, with
//!   `x-kubernetes-validations` CEL rules and ratcheting on update.
//! - [`patch`]: JSON merge patch, JSON patch and strategic merge patch.
//! - [`apply`]: server-side apply and `managedFields` bookkeeping for other writes.
//! - [`admission`]: ValidatingAdmissionPolicy: policies and bindings checked and compiled,
//!   matched against a write and evaluated with CEL, once per param of a parameterized policy.
//! - [`rbac`]: RBAC authorization: request attributes, rule matching, the rule resolver,
//!   escalation checks, ClusterRole aggregation and the bootstrap roles.
//!
//! What knowingly differs from the real apiserver is listed in `DIVERGENCES.md` beside this file.

pub mod admission;
pub mod apply;
mod gofmt;
#[cfg(test)]
mod growth;
mod json;
pub mod patch;
pub mod rbac;
pub mod schema;
