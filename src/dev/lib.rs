//! `gpucloud-operator dev`: the whole product on one machine without a cluster. The embedded
//! Kubernetes API server with the CRDs and the deletion-protection policy installed, the cloud
//! simulator (or a real cloud), and the controllers run in one process; a kubeconfig is written
//! for kubectl, manifests can be applied at start, and a table of every gpucloud.io object is
//! printed as it changes.

pub mod cli;
pub mod manifests;
pub mod sandbox;
pub mod table;

pub use cli::Args;
pub use sandbox::{Error, run, run_until};
