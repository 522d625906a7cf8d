//! Typed client and route table of the Cloud GPU Compute Service API.
//!
//! [`CloudClient`] has one async method per [`Operation`]; [`model`] holds the serde types of
//! every body; [`routes`] is the single table of methods and paths, shared with the simulator.
//! The wire conventions are described in `docs/cloud-api.md`.

pub mod backoff;
pub mod client;
pub mod error;
pub mod limiter;
pub mod model;
pub mod routes;

pub use backoff::Backoff;
pub use client::{
    API_KEY_HEADER, ApiKey, CallObserver, CallOutcome, ClientConfig, CloudClient, FanOut,
    MAX_LIST_RESPONSE_BYTES, MAX_RESPONSE_BYTES, RetryPolicy, install_crypto_provider,
};
pub use error::{Error, ErrorClass};
pub use limiter::{RateLimit, RateLimiter};
pub use routes::{Method, Operation, Retry, Source};
