//! Logging, metrics and health endpoints of the operator.
