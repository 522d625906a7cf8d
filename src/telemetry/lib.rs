//! Logging, metrics and health endpoints of the operator.

pub mod exposition;
pub mod health;
pub mod logging;
pub mod metrics;
pub mod process;
pub mod server;

pub use exposition::Format;
pub use health::{Health, HealthSettings, Role, WatchSignal};
pub use logging::{LogFormat, init_logging, report_fatal};
pub use metrics::{
    BudgetFigures, BudgetSource, BuildInfo, KindState, Metrics, ReconcileResult, StateSource,
};
pub use server::Endpoints;
