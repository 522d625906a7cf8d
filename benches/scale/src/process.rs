//! The three roles as child processes of the `gpucloud-operator` binary, their logs, and
//! their memory and CPU time read from `/proc`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting {role} ({binary}): {source}")]
    Spawn {
        role: String,
        binary: String,
        source: std::io::Error,
    },
    #[error("{role} exited before printing {expected:?}; see {log}")]
    NoBanner {
        role: String,
        expected: String,
        log: String,
    },
    #[error("{role} did not print {expected:?} within {seconds} s; see {log}")]
    BannerTimeout {
        role: String,
        expected: String,
        seconds: u64,
        log: String,
    },
    #[error("log file {path}: {source}")]
    Log {
        path: String,
        source: std::io::Error,
    },
    #[error("reading /proc/{pid}: {reason}")]
    Proc { pid: u32, reason: String },
    #[error("building gpucloud-operator with `{command}` failed ({status})")]
    Build { command: String, status: String },
    #[error("stopping {role}: {source}")]
    Stop {
        role: String,
        source: std::io::Error,
    },
}

/// Memory and CPU time of one process.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ProcessUsage {
    /// Resident set size now, in bytes (`VmRSS`).
    pub rss_bytes: u64,
    /// Peak resident set size, in bytes (`VmHWM`).
    pub peak_rss_bytes: u64,
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
}

/// A running role; killed when dropped.
#[derive(Debug)]
pub struct RoleProcess {
    pub role: String,
    pub log_path: PathBuf,
    child: Child,
    pid: u32,
}

/// Where to find (and, under cargo, how to build) the operator binary.
pub async fn operator_binary(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    let own = std::env::current_exe().map_err(|source| Error::Spawn {
        role: "scale-bench".into(),
        binary: "current executable".into(),
        source,
    })?;
    // Test binaries live in `target/<profile>/deps`, the bench itself in `target/<profile>`.
    let mut directory = own.parent().map(Path::to_path_buf).unwrap_or_default();
    if directory.ends_with("deps") {
        directory.pop();
    }
    let binary = directory.join("gpucloud-operator");
    // Under cargo, build it with this build's profile so it is never stale.
    if let Some(cargo) = std::env::var_os("CARGO") {
        let mut command = Command::new(cargo);
        command.args([
            "build",
            "--quiet",
            "-p",
            "gpucloud-operator",
            "--bin",
            "gpucloud-operator",
        ]);
        if directory.ends_with("release") {
            command.arg("--release");
        }
        let shown = format!("{command:?}");
        let status = command.status().await.map_err(|source| Error::Spawn {
            role: "cargo build".into(),
            binary: shown.clone(),
            source,
        })?;
        if !status.success() {
            return Err(Error::Build {
                command: shown,
                status: status.to_string(),
            });
        }
    }
    Ok(binary)
}

impl RoleProcess {
    /// Starts `binary args`, sends its stdout and stderr to `<out>/<role>.log`, and waits for
    /// a line starting with `banner`; returns the process and that line. Every further line
    /// also goes to `lines` when given.
    pub async fn start(
        role: &str,
        binary: &Path,
        args: &[String],
        env: &[(&str, String)],
        out: &Path,
        banner: &str,
        lines: Option<mpsc::UnboundedSender<String>>,
    ) -> Result<(RoleProcess, String), Error> {
        let log_path = out.join(format!("{role}.log"));
        let log = tokio::fs::File::create(&log_path)
            .await
            .map_err(|source| Error::Log {
                path: log_path.display().to_string(),
                source,
            })?;
        let mut command = Command::new(binary);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().map_err(|source| Error::Spawn {
            role: role.into(),
            binary: binary.display().to_string(),
            source,
        })?;
        let pid = child.id().unwrap_or_default();
        let (line_sender, mut line_receiver) = mpsc::unbounded_channel::<String>();
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        ]
        .into_iter()
        .flatten()
        {
            let sender = line_sender.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        drop(line_sender);
        // One task owns the log file and forwards lines: the banner to us, the rest onwards.
        let (banner_sender, mut banner_receiver) = mpsc::channel::<String>(1);
        let banner_prefix = banner.to_string();
        tokio::spawn(async move {
            let mut log = tokio::io::BufWriter::new(log);
            let mut banner_sender = Some(banner_sender);
            while let Some(line) = line_receiver.recv().await {
                let _ = log.write_all(line.as_bytes()).await;
                let _ = log.write_all(b"\n").await;
                if banner_sender.is_some() && line.starts_with(&banner_prefix) {
                    if let Some(sender) = banner_sender.take() {
                        let _ = sender.send(line.clone()).await;
                    }
                    let _ = log.flush().await;
                }
                if let Some(lines) = &lines {
                    let _ = lines.send(line);
                }
            }
            let _ = log.flush().await;
        });
        let waited = Duration::from_secs(60);
        let line = match tokio::time::timeout(waited, banner_receiver.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => {
                return Err(Error::NoBanner {
                    role: role.into(),
                    expected: banner.into(),
                    log: log_path.display().to_string(),
                });
            }
            Err(_) => {
                return Err(Error::BannerTimeout {
                    role: role.into(),
                    expected: banner.into(),
                    seconds: waited.as_secs(),
                    log: log_path.display().to_string(),
                });
            }
        };
        Ok((
            RoleProcess {
                role: role.into(),
                log_path,
                child,
                pid,
            },
            line,
        ))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Memory and CPU time from `/proc/PID/status` and `/proc/PID/stat`.
    pub fn usage(&self) -> Result<ProcessUsage, Error> {
        read_usage(self.pid)
    }

    /// Kills the process (SIGKILL: what a crash or an evicted pod looks like) and reaps it.
    pub async fn kill(mut self) -> Result<(), Error> {
        let role = self.role.clone();
        self.child
            .kill()
            .await
            .map_err(|source| Error::Stop { role, source })
    }
}

/// Reads `VmRSS`, `VmHWM` and utime + stime of a process.
pub fn read_usage(pid: u32) -> Result<ProcessUsage, Error> {
    let proc_error = |reason: String| Error::Proc { pid, reason };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| proc_error(e.to_string()))?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| proc_error(e.to_string()))?;
    let kib = |field: &str| -> Result<u64, Error> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .map(|n| n * 1024)
            .ok_or_else(|| proc_error(format!("no {field} in status")))
    };
    Ok(ProcessUsage {
        rss_bytes: kib("VmRSS:")?,
        peak_rss_bytes: kib("VmHWM:")?,
        cpu_seconds: cpu_seconds(&stat).ok_or_else(|| proc_error("malformed stat".into()))?,
    })
}

/// utime + stime (fields 14 and 15) in seconds. The command name (field 2) may contain
/// spaces, so fields are counted after its closing parenthesis. /proc reports clock ticks of
/// USER_HZ, which is 100 on Linux whatever the kernel's tick rate.
fn cpu_seconds(stat: &str) -> Option<f64> {
    const USER_HZ: f64 = 100.0;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After the name, field 3 (state) is index 0, so field N is index N - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_the_command_name() {
        let stat = "1234 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(cpu_seconds(stat), Some(3.0));
        assert_eq!(cpu_seconds("garbage"), None);
    }

    #[test]
    fn own_usage_is_readable() {
        let usage = read_usage(std::process::id()).unwrap_or_else(|e| panic!("{e}"));
        assert!(usage.rss_bytes > 0 && usage.peak_rss_bytes >= usage.rss_bytes);
    }
}
