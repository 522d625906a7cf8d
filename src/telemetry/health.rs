//! Liveness and readiness of the operator process.
//!
//! - Live (`/healthz`) until a component reports a failure the process cannot recover from
//!   (the controllers ended on their own, the leader lease was lost); the process then exits,
//!   and the probe tells the kubelet the same thing should the exit hang.
//! - Ready (`/readyz`) when this replica can do its job: a standby once it has read the lease
//!   (so a rolling update of two replicas can go on while one of them leads), the leader (or
//!   a replica without leader election) once every kind's watch has delivered its first full
//!   list. Not ready from the moment shutdown starts.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// This replica's part in leader election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Has not read the lease yet.
    Starting,
    /// Another replica holds the lease (named when known).
    Standby { holder: Option<String> },
    /// Runs the controllers: holds the lease, or runs without leader election.
    Leading,
}

#[derive(Debug)]
struct State {
    role: Role,
    /// Kinds whose watch has not delivered its first full list since the controllers started.
    unsynced: BTreeSet<String>,
    stopping: bool,
    failed: Option<String>,
}

/// Shared by the components that report and the HTTP server that answers probes.
#[derive(Debug)]
pub struct Health {
    state: Mutex<State>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            state: Mutex::new(State {
                role: Role::Starting,
                unsynced: BTreeSet::new(),
                stopping: false,
                failed: None,
            }),
        }
    }
}

impl Health {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// This replica is now a standby behind `holder`.
    pub fn standby(&self, holder: Option<String>) {
        self.with(|s| {
            s.role = Role::Standby { holder };
            s.unsynced.clear();
        });
    }

    /// This replica now runs the controllers; each announces its watch with
    /// [`Health::awaiting_sync`] before any of them runs.
    pub fn leading(&self) {
        self.with(|s| {
            s.role = Role::Leading;
            s.unsynced.clear();
        });
    }

    /// Not ready until `watch` has delivered its first full list.
    pub fn awaiting_sync(&self, watch: &str) {
        self.with(|s| {
            s.unsynced.insert(watch.to_string());
        });
    }

    /// `kind`'s watch delivered its first full list.
    pub fn synced(&self, kind: &str) {
        self.with(|s| {
            s.unsynced.remove(kind);
        });
    }

    /// Shutdown has begun: no longer ready.
    pub fn stopping(&self) {
        self.with(|s| s.stopping = true);
    }

    /// A failure the process exits on; liveness reports it.
    pub fn fail(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.with(|s| s.failed.get_or_insert(reason).clone());
    }

    pub fn role(&self) -> Role {
        self.with(|s| s.role.clone())
    }

    /// `Ok(what)` when live, `Err(why)` when not.
    pub fn live(&self) -> Result<String, String> {
        self.with(|s| match &s.failed {
            Some(reason) => Err(reason.clone()),
            None => Ok("ok".into()),
        })
    }

    /// `Ok(what)` when ready, `Err(why)` when not.
    pub fn ready(&self) -> Result<String, String> {
        self.with(|s| {
            if let Some(reason) = &s.failed {
                return Err(format!("failed: {reason}"));
            }
            if s.stopping {
                return Err("shutting down".into());
            }
            match &s.role {
                Role::Starting => Err("starting: the leader lease has not been read yet".into()),
                Role::Standby { holder } => Ok(match holder {
                    Some(holder) => format!("standby: the lease is held by {holder}"),
                    None => "standby: waiting for the lease".into(),
                }),
                Role::Leading if s.unsynced.is_empty() => Ok("leading: caches synced".into()),
                Role::Leading => Err(format!(
                    "leading: waiting for the first list of {}",
                    s.unsynced.iter().cloned().collect::<Vec<_>>().join(", ")
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_role_sync_and_shutdown() {
        let health = Health::default();
        assert!(
            health.ready().is_err(),
            "not ready before the lease is read"
        );
        health.standby(Some("pod-b".into()));
        assert_eq!(
            health.ready().unwrap(),
            "standby: the lease is held by pod-b"
        );
        health.leading();
        health.awaiting_sync("GpuInstance");
        health.awaiting_sync("Volume");
        let why = health.ready().unwrap_err();
        assert!(why.contains("GpuInstance, Volume"), "{why}");
        health.synced("GpuInstance");
        assert!(health.ready().is_err());
        health.synced("Volume");
        assert!(health.ready().is_ok());
        health.stopping();
        assert_eq!(health.ready().unwrap_err(), "shutting down");
        assert!(health.live().is_ok(), "shutting down is still live");
    }

    #[test]
    fn a_failure_ends_liveness_and_keeps_its_first_reason() {
        let health = Health::default();
        health.leading();
        assert!(health.ready().is_ok());
        health.fail("lost the leader lease");
        health.fail("something later");
        assert_eq!(health.live().unwrap_err(), "lost the leader lease");
        assert!(health.ready().is_err());
    }
}
