//! Typed client and route table of the Cloud GPU Compute Service API.

pub mod model;
pub mod routes;

pub use routes::{Method, Operation, Retry, Source};
