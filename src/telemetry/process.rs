//! The standard process metrics of Prometheus' client libraries (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`,
//! `process_max_fds`, `process_start_time_seconds`), read from `/proc/self` at scrape time:
//! no background thread, and nothing to drift. Linux only; elsewhere they are not served.
//!
//! A value that cannot be read (a file missing or in an unexpected shape) is left out of the
//! scrape rather than reported as 0.
//!
//! Beside them, the allocator's own count, when the binary reports one (`report_heap`):
//! `gpucloud_heap_allocated_bytes` (what the program holds) and `gpucloud_heap_resident_bytes`
//! (what the allocator keeps in memory for it). The resident set alone does not tell a process
//! that holds its objects from one whose allocator keeps freed pages.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The allocator's count of the heap at one moment, in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeapFigures {
    /// Held by the program.
    pub allocated: u64,
    /// Kept in physical memory by the allocator: the allocated bytes, its own metadata, and
    /// freed pages not yet given back.
    pub resident: u64,
}

/// How this binary's allocator is read, set once at start.
static HEAP_FIGURES: std::sync::OnceLock<fn() -> Option<HeapFigures>> = std::sync::OnceLock::new();

/// Serves `read`'s figures with the process metrics from now on (the first call only: a
/// process has one allocator).
pub fn report_heap(read: fn() -> Option<HeapFigures>) {
    let _ = HEAP_FIGURES.set(read);
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times: Linux reports them in `USER_HZ`,
/// which is 100 on every architecture the operator is built for (x86-64, arm64).
const USER_HZ: f64 = 100.0;

/// One scrape's reading of `/proc`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProcessSample {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<f64>,
    pub virtual_bytes: Option<f64>,
    pub open_fds: Option<i64>,
    pub max_fds: Option<i64>,
    pub start_time_seconds: Option<f64>,
}

impl ProcessSample {
    /// This process, now.
    pub fn read() -> Self {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let stat = read("/proc/self/stat");
        let stat = stat.as_deref().and_then(StatFields::parse);
        let boot_time = read("/proc/stat").as_deref().and_then(boot_time);
        let status = read("/proc/self/status");
        ProcessSample {
            cpu_seconds: stat.map(|s| (s.utime + s.stime) as f64 / USER_HZ),
            resident_bytes: status.as_deref().and_then(|s| status_kib(s, "VmRSS:")),
            virtual_bytes: status.as_deref().and_then(|s| status_kib(s, "VmSize:")),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|entries| entries.count() as i64),
            max_fds: read("/proc/self/limits")
                .as_deref()
                .and_then(max_open_files),
            start_time_seconds: stat
                .zip(boot_time)
                .map(|(s, boot)| boot + s.starttime as f64 / USER_HZ),
        }
    }
}

/// The fields of `/proc/<pid>/stat` used here, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq)]
struct StatFields {
    utime: u64,
    stime: u64,
    starttime: u64,
}

impl StatFields {
    /// The command (field 2) is in parentheses and may hold spaces and parentheses itself:
    /// the fields are counted from its last `)`.
    fn parse(stat: &str) -> Option<Self> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3 (state): field n is at index n - 3.
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(StatFields {
            utime: field(14)?,
            stime: field(15)?,
            starttime: field(22)?,
        })
    }
}

/// The boot time in seconds since the epoch (`btime` of `/proc/stat`).
fn boot_time(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// A `kB` value of `/proc/<pid>/status`, in bytes.
fn status_kib(status: &str, key: &str) -> Option<f64> {
    let value = status.lines().find_map(|line| line.strip_prefix(key))?;
    let kib: f64 = value.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024.0)
}

/// The soft limit of open files (`/proc/<pid>/limits`); `unlimited` is left out.
fn max_open_files(limits: &str) -> Option<i64> {
    let line = limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// Encodes a [`ProcessSample`] read at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sample = ProcessSample::read();
        if let Some(seconds) = sample.cpu_seconds {
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(seconds).encode(metric)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                sample.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                sample.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                sample.open_fds.map(|n| n as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                sample.max_fds.map(|n| n as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                sample.start_time_seconds,
            ),
        ];
        let heap = HEAP_FIGURES.get().and_then(|read| read());
        let heap_gauges = [
            (
                "gpucloud_heap_allocated_bytes",
                "Bytes of heap the program holds, by the allocator's count",
                heap.map(|h| h.allocated as f64),
            ),
            (
                "gpucloud_heap_resident_bytes",
                "Bytes the allocator keeps in physical memory: the heap held, its metadata and freed pages not yet given back",
                heap.map(|h| h.resident as f64),
            ),
        ];
        for (name, help, value) in gauges.into_iter().chain(heap_gauges) {
            if let Some(value) = value {
                let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
                ConstGauge::new(value).encode(metric)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 1200 0 0 0 \
                    250 75 0 0 20 0 9 0 123456 1000000 2000 18446744073709551615";
        assert_eq!(
            StatFields::parse(stat),
            Some(StatFields {
                utime: 250,
                stime: 75,
                starttime: 123456,
            })
        );
        assert_eq!(StatFields::parse("4242 (cut short) S 1"), None);
    }

    #[test]
    fn limits_status_and_boot_time_parse() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1048576              1048576              files\n";
        assert_eq!(max_open_files(limits), Some(1_048_576));
        assert_eq!(
            max_open_files(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
        let status = "Name:\tgpucloud\nVmSize:\t  204800 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(10_485_760.0));
        assert_eq!(status_kib(status, "VmSize:"), Some(209_715_200.0));
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1764200000\n"),
            Some(1_764_200_000.0)
        );
    }

    #[test]
    fn the_allocators_figures_are_served_once_reported() {
        fn figures() -> Option<HeapFigures> {
            Some(HeapFigures {
                allocated: 3 << 20,
                resident: 5 << 20,
            })
        }
        report_heap(figures);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(
            text.contains("gpucloud_heap_allocated_bytes 3145728"),
            "{text}"
        );
        assert!(
            text.contains("gpucloud_heap_resident_bytes 5242880"),
            "{text}"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_read_whole() {
        let sample = ProcessSample::read();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_secs_f64();
        let started = sample.start_time_seconds.expect("start time");
        assert!(
            started <= now + 1.0 && started > now - 86_400.0 * 365.0,
            "{sample:?}"
        );
        assert!(sample.resident_bytes.expect("rss") > 0.0, "{sample:?}");
        assert!(
            sample.virtual_bytes.expect("vsize") >= sample.resident_bytes.expect("rss"),
            "{sample:?}"
        );
        assert!(sample.open_fds.expect("fds") >= 3, "{sample:?}");
        assert!(sample.cpu_seconds.expect("cpu") >= 0.0, "{sample:?}");
    }
}
