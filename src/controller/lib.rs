//! Reconcilers for every gpucloud.io kind and the machinery they share.

pub mod conditions;
pub mod create;
pub mod error;
pub mod naming;
pub mod requeue;

pub use error::{Category, Error};
