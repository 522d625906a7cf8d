//! `tracing` output, as JSON for log aggregators or as text for people.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid log level {level:?}: {reason}")]
    InvalidLevel { level: String, reason: String },
    #[error("logging was already initialised")]
    AlreadyInitialised,
}

/// Installs the global subscriber. `level` takes `RUST_LOG` syntax (`info`,
/// `gpucloud_controller=debug,info`).
pub fn init_logging(format: LogFormat, level: &str) -> Result<(), Error> {
    let filter = EnvFilter::try_new(level).map_err(|e| Error::InvalidLevel {
        level: level.to_string(),
        reason: e.to_string(),
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
    };
    result.map_err(|_| Error::AlreadyInitialised)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_levels_are_reported() {
        let err = init_logging(LogFormat::Text, "gpucloud=notalevel").unwrap_err();
        assert!(err.to_string().contains("notalevel"), "{err}");
    }
}
