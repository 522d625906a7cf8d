//! Logging, metrics and health endpoints of the operator.

pub mod logging;

pub use logging::{LogFormat, init_logging};
