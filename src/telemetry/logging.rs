//! `tracing` output, as JSON for log aggregators or as text for people.

use std::io::IsTerminal;
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
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal: a pod's log, a file or a pipe gets none.
        .with_ansi(colours_wanted());
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

/// Whether stderr is a terminal and `NO_COLOR` is not set (no-color.org).
fn colours_wanted() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Writes the error that ends the process as the log's last line, in the log's format: one
/// JSON object under `json` (what a log aggregator parses), `Error: ...` under `text`; on one
/// line whatever the error holds.
pub fn report_fatal(format: LogFormat, message: &str) {
    eprintln!("{}", fatal_line(format, message, jiff::Timestamp::now()));
}

fn fatal_line(format: LogFormat, message: &str, now: jiff::Timestamp) -> String {
    let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
    match format {
        LogFormat::Json => serde_json::json!({
            "timestamp": now.to_string(),
            "level": "ERROR",
            "message": message,
            "target": "gpucloud_operator",
        })
        .to_string(),
        LogFormat::Text => format!("Error: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fatal_error_is_one_line_in_the_log_format() {
        let now: jiff::Timestamp = "2026-01-01T10:00:00Z".parse().unwrap();
        let message = "operator: Kubernetes API: connection refused\n  at https://10.0.0.1:6443";
        let json = fatal_line(LogFormat::Json, message, now);
        assert!(!json.contains('\n'));
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["level"], "ERROR");
        assert_eq!(
            parsed["message"],
            "operator: Kubernetes API: connection refused at https://10.0.0.1:6443"
        );
        assert_eq!(parsed["timestamp"], "2026-01-01T10:00:00Z");
        let text = fatal_line(LogFormat::Text, message, now);
        assert_eq!(
            text,
            "Error: operator: Kubernetes API: connection refused at https://10.0.0.1:6443"
        );
    }

    #[test]
    fn bad_levels_are_reported() {
        let err = init_logging(LogFormat::Text, "gpucloud=notalevel").unwrap_err();
        assert!(err.to_string().contains("notalevel"), "{err}");
    }
}
