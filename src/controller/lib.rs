//! Reconcilers for every gpucloud.io kind and the machinery they share.

pub mod conditions;
pub mod create;
pub mod naming;
