//! A process-wide tracing subscriber that formats every event of the run (debug and up, the
//! HTTP and TLS plumbing at info) and scans each line for secret markers as it is written.
//! Lines are not kept, so a run of thousands of worlds stays small; only offending lines are.

use std::collections::HashMap;
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
    /// The lines of each running world (those logged under its `world{seed=N}` span), so a
    /// failed run can show what the operator did with the objects that did not converge.
    worlds: Mutex<HashMap<u64, Vec<String>>>,
}

/// Lines kept per world; a run logs about 1,400 on average.
const WORLD_LINES: usize = 50_000;

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

    /// The lines logged under the world of `seed`, forgotten from here.
    pub fn take_world(&self, seed: u64) -> Vec<String> {
        let mut worlds = self.worlds.lock().unwrap_or_else(|p| p.into_inner());
        worlds.remove(&seed).unwrap_or_default()
    }

    fn scan(&self, text: &str) {
        if self.echo {
            eprint!("{text}");
        }
        for line in text.lines() {
            self.lines.fetch_add(1, Ordering::Relaxed);
            if let Some(seed) = world_of(line) {
                let mut worlds = self.worlds.lock().unwrap_or_else(|p| p.into_inner());
                let kept = worlds.entry(seed).or_default();
                if kept.len() < WORLD_LINES {
                    kept.push(line.to_string());
                }
            }
            if SECRET_MARKERS.iter().any(|marker| line.contains(marker)) {
                let mut offending = self.offending.lock().unwrap_or_else(|p| p.into_inner());
                if offending.len() < 20 {
                    offending.push(line.to_string());
                }
            }
        }
    }
}

/// The seed of the `world{seed=N}` span a line was logged under.
fn world_of(line: &str) -> Option<u64> {
    let start = line.find("world{seed=")? + "world{seed=".len();
    let digits: String = line[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// For each object a convergence failure names (`  Kind name: not Ready ...`) or whose
/// resource it found left in the cloud, the last lines of the world's log that concern it,
/// compacted ([`compact`]).
pub fn log_of_stuck_objects(message: &str, log: &[String]) -> String {
    let mut out = String::new();
    let stuck = |l: &&str| {
        l.contains(": not Ready")
            || l.contains(" but not refused")
            || l.contains(": deleted but still present")
    };
    // (kind, name, `namespace=… ` field, the id of a resource left in the cloud)
    let mut concerned: Vec<(String, String, String, Option<String>)> = Vec::new();
    for problem in message.lines().filter(stuck) {
        let mut words = problem.split_whitespace();
        let (Some(kind), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        let name = name.trim_end_matches(':');
        // The tenant's objects are named `namespace/name`.
        let (namespace_field, name) = match name.split_once('/') {
            Some((namespace, name)) => (format!("namespace={namespace} "), name),
            None => (String::new(), name),
        };
        concerned.push((kind.to_string(), name.to_string(), namespace_field, None));
    }
    concerned.extend(
        message
            .lines()
            .flat_map(objects_of_left_resources)
            .map(|(kind, name, namespace_field, id)| (kind, name, namespace_field, Some(id))),
    );
    for (kind, name, namespace_field, id) in concerned {
        let (kind_field, name_field) = (format!("kind={kind}"), format!("name={name} "));
        // Lines naming a left resource's id are its object's too: a late create's watch, the
        // sweeper and the observers log them outside the object's reconcile.
        let lines: Vec<String> = log
            .iter()
            .filter(|l| {
                (l.contains(&kind_field) && l.contains(&name_field) && l.contains(&namespace_field))
                    || id.as_deref().is_some_and(|id| l.contains(id))
            })
            .filter_map(|l| compact(l))
            .collect();
        let lines: Vec<&String> = lines.iter().collect();
        let title = format!("the operator's last log lines for {kind} {name}");
        append_tail(&mut out, &title, &lines, 60);
    }
    if !out.is_empty() {
        // What else went wrong in the world: warnings, errors, ended streams.
        let notable: Vec<&String> = log
            .iter()
            .filter(|l| {
                l.contains(" WARN ")
                    || l.contains(" ERROR ")
                    || l.contains("terminated")
                    || l.contains("shutdown")
                    || l.contains("controller error")
            })
            .collect();
        let title = "the world's warnings, errors and ended streams";
        append_tail(&mut out, title, &notable, 30);
    }
    out
}

/// One log line as a failure report shows it: its time and level, then what follows its
/// spans; a Kubernetes API request as `HTTP <method> <url> -> <status>` once answered (its
/// "requesting" line left out). The spans name the world and the object, which the report's
/// title already says, and would leave a reader of a cut report only their first lines.
fn compact(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    let (time, level) = (words.next()?, words.next()?);
    let field = |name: &str| {
        let start = line.find(&format!("{name}="))? + name.len() + 1;
        line[start..].split([' ', '}']).next()
    };
    if line.contains("HTTP{") {
        if !line.contains("http.status_code=") {
            return None;
        }
        let (method, url, status) = (
            field("http.method")?,
            field("http.url")?,
            field("http.status_code")?,
        );
        return Some(format!("{time} {level} HTTP {method} {url} -> {status}"));
    }
    let rest = line.rsplit_once("}: ").map_or(line, |(_, rest)| rest);
    Some(format!("{time} {level} {rest}"))
}

/// The objects whose names the operator's resources left in the cloud carry, from a line
/// such as `  GpuInstance in team-a@account0: 0 objects but 1 operator resources in the
/// cloud: [("vm-1", "gco-team-a-vm-0-ae92…")]`: (kind, name, `namespace=… ` field, id).
fn objects_of_left_resources(problem: &str) -> Vec<(String, String, String, String)> {
    let Some((head, resources)) = problem.split_once(" operator resources in the cloud: ") else {
        return Vec::new();
    };
    let mut words = head.split_whitespace();
    let (Some(kind), Some(_in), Some(group)) = (words.next(), words.next(), words.next()) else {
        return Vec::new();
    };
    let namespace = group.split('@').next().unwrap_or_default();
    let prefix = format!("gco-{namespace}-");
    // `("id", "name")` pairs: the quoted texts alternate.
    let quoted: Vec<&str> = resources.split('"').skip(1).step_by(2).collect();
    quoted
        .chunks(2)
        .filter_map(|pair| match pair {
            [id, cloud_name] => Some((*id, cloud_name.strip_prefix(&prefix)?)),
            _ => None,
        })
        // The cloud name ends with a hash of the object's uid.
        .filter_map(|(id, rest)| rest.rsplit_once('-').map(|(name, _uid_hash)| (id, name)))
        .map(|(id, name)| {
            (
                kind.to_string(),
                name.to_string(),
                format!("namespace={namespace} "),
                id.to_string(),
            )
        })
        .collect()
}

/// Appends `title`, the number of `lines`, and the last `keep` of them.
fn append_tail(out: &mut String, title: &str, lines: &[&String], keep: usize) {
    out.push_str(&format!("\n  {title} ({} in all):", lines.len()));
    for line in &lines[lines.len().saturating_sub(keep)..] {
        out.push_str("\n    ");
        out.push_str(line);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_left_in_the_cloud_names_its_object() {
        let problem = r#"  GpuInstance in team-a@account0: 0 objects but 2 operator resources in the cloud: [("vm-00000000000c", "gco-team-a-vm-0-ae9283191c709ee8"), ("vm-00000000000d", "gco-team-a-big-vm-1-0123456789abcdef")]"#;
        let field = "namespace=team-a ".to_string();
        assert_eq!(
            objects_of_left_resources(problem),
            [
                (
                    "GpuInstance".into(),
                    "vm-0".into(),
                    field.clone(),
                    "vm-00000000000c".into()
                ),
                (
                    "GpuInstance".into(),
                    "big-vm-1".into(),
                    field,
                    "vm-00000000000d".into()
                ),
            ]
        );
        assert!(objects_of_left_resources("  GpuInstance vm-0: not Ready").is_empty());
    }

    #[test]
    fn a_report_line_keeps_its_time_level_and_what_follows_its_spans() {
        let span = "world{seed=142}:reconciling object{object.ref=GpuInstance.v1alpha1.gpucloud.io/vm-0.team-c}:reconcile{kind=GpuInstance namespace=team-c name=vm-0 cloud_id=}";
        let answered = format!(
            "2026-12-05T02:46:16.174881Z DEBUG {span}:HTTP{{http.method=PUT http.url=https://127.0.0.1:33959/apis/gpucloud.io/v1alpha1/namespaces/team-c/gpuinstances/vm-0/status? otel.name=\"replace_status\" otel.kind=\"client\" http.status_code=409 otel.status_code=\"ERROR\"}}: kube_client::client::builder: stream closed"
        );
        assert_eq!(
            compact(&answered).unwrap(),
            "2026-12-05T02:46:16.174881Z DEBUG HTTP PUT https://127.0.0.1:33959/apis/gpucloud.io/v1alpha1/namespaces/team-c/gpuinstances/vm-0/status? -> 409"
        );
        let asked = format!(
            "2026-12-05T02:46:16.083313Z DEBUG {span}:HTTP{{http.method=PUT http.url=https://x/status? otel.name=\"replace_status\" otel.kind=\"client\"}}: kube_client::client::builder: requesting"
        );
        assert_eq!(compact(&asked), None);
        let call = format!(
            "2026-12-05T02:46:16.082915Z DEBUG {span}: gpucloud_cloud::client::transport: cloud call operation=\"CreateInstance\" attempt=1 error=\"transport\" elapsed_ms=66"
        );
        assert_eq!(
            compact(&call).unwrap(),
            "2026-12-05T02:46:16.082915Z DEBUG gpucloud_cloud::client::transport: cloud call operation=\"CreateInstance\" attempt=1 error=\"transport\" elapsed_ms=66"
        );
    }

    #[test]
    fn a_left_resource_is_reported_with_its_objects_lines_and_those_naming_its_id() {
        let message = r#"  GpuInstance in team-c@account1: 0 objects but 1 operator resources in the cloud: [("vm-010000000008", "gco-team-c-vm-0-d12d46de535dcfed")]"#;
        let object =
            "world{seed=142}:reconcile{kind=GpuInstance namespace=team-c name=vm-0 cloud_id=}";
        let log: Vec<String> = [
            format!(
                "t1 DEBUG {object}: gpucloud_controller::flow::reconcile: reconcile failed error=deleting"
            ),
            "t2 INFO world{seed=142}: gpucloud_controller::accounts::orphans: found cloud_id=vm-010000000008"
                .to_string(),
            "t3 INFO world{seed=142}: gpucloud_controller::accounts::orphans: found cloud_id=vm-010000000009"
                .to_string(),
            format!(
                "t4 DEBUG {}: other",
                object.replace("name=vm-0 ", "name=vm-1 ")
            ),
        ]
        .into();
        let report = log_of_stuck_objects(message, &log);
        assert!(report.contains("(2 in all)"), "{report}");
        assert!(
            report.contains("t1 DEBUG gpucloud_controller::flow::reconcile: reconcile failed"),
            "{report}"
        );
        assert!(
            report.contains(
                "t2 INFO gpucloud_controller::accounts::orphans: found cloud_id=vm-010000000008"
            ),
            "{report}"
        );
        assert!(!report.contains("t3") && !report.contains("t4"), "{report}");
    }
}
