//! Reconcilers for every gpucloud.io kind and the machinery they share.

pub mod account;
pub mod conditions;
pub mod context;
pub mod create;
pub mod error;
pub mod kind;
pub mod naming;
pub mod observer;
pub mod reconcile;
pub mod requeue;

pub use error::{Category, Error};
