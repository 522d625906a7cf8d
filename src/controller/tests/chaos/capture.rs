//! A process-wide tracing subscriber that formats every event of the run (debug and up, the
//! HTTP and TLS plumbing at info) and scans each line for secret markers as it is written.
//! Lines are not kept, so a run of thousands of worlds stays small; only offending lines are.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Text that must never appear in a log line.
pub const SECRET_MARKERS: &[&str] = &[crate::API_KEY_MARK, "PRIVATE KEY"];

/// What the scanner saw over the whole process.
#[derive(Default)]
pub struct Capture {
    /// Also print every line (`GPUCLOUD_CHAOS_LOG=1`), to study a replayed seed.
    echo: bool,
    lines: AtomicU64,
    offending: Mutex<Vec<String>>,
}

impl Capture {
    pub fn lines(&self) -> u64 {
        self.lines.load(Ordering::Relaxed)
    }

    /// Lines holding a secret marker (at most the first 20).
    pub fn offending(&self) -> Vec<String> {
        self.offending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn scan(&self, text: &str) {
        if self.echo {
            eprint!("{text}");
        }
        for line in text.lines() {
            self.lines.fetch_add(1, Ordering::Relaxed);
            if SECRET_MARKERS.iter().any(|marker| line.contains(marker)) {
                let mut offending = self.offending.lock().unwrap_or_else(|p| p.into_inner());
                if offending.len() < 20 {
                    offending.push(line.to_string());
                }
            }
        }
    }
}

static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();

/// Installs the scanning subscriber once for the process and returns its findings.
pub fn install() -> &'static Capture {
    CAPTURE.get_or_init(|| {
        let capture: &'static Capture = Box::leak(Box::new(Capture {
            echo: std::env::var_os("GPUCLOUD_CHAOS_LOG").is_some(),
            ..Capture::default()
        }));
        let filter = EnvFilter::new(
            "debug,hyper=info,hyper_util=info,h2=info,rustls=info,tokio_rustls=info,\
             tower=info,reqwest=info,tokio_util=info",
        );
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(ScanWriter(capture))
            .finish();
        // Another test of the same binary may have installed one first: then this one
        // cannot scan, and the run must say so rather than pass silently.
        assert!(
            tracing::subscriber::set_global_default(subscriber).is_ok(),
            "a global tracing subscriber was already installed; log lines cannot be scanned"
        );
        capture
    })
}

#[derive(Clone, Copy)]
struct ScanWriter(&'static Capture);

/// One formatted event is written in one or more pieces; they are joined before scanning.
struct LineBuffer {
    capture: &'static Capture,
    text: Vec<u8>,
}

impl Write for LineBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineBuffer {
    fn drop(&mut self) {
        self.capture.scan(&String::from_utf8_lossy(&self.text));
    }
}

impl<'a> MakeWriter<'a> for ScanWriter {
    type Writer = LineBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        LineBuffer {
            capture: self.0,
            text: Vec::new(),
        }
    }
}
