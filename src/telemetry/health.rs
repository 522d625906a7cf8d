//! Liveness and readiness of the operator process.
//!
//! - Live (`/healthz`) until a component reports a failure the process cannot recover from
//!   (the controllers ended on their own, the leader lease was lost); the process then exits,
//!   and the probe tells the kubelet the same thing should the exit hang. Also not live while
//!   the async runtime is stuck: a heartbeat task ticks every second on the runtime that runs
//!   the controllers (started by [`crate::server::serve`], which answers the probes from a
//!   thread of its own); when it has not ticked for [`HealthSettings::runtime_stall`], the
//!   runtime is not getting to its tasks. A busy runtime still gets to a task that takes
//!   microseconds once a second, so the threshold is generous and busy is never stuck.
//! - Ready (`/readyz`) when this replica can do its job: a standby once it has read the lease
//!   (so a rolling update of two replicas can go on while one of them leads), the leader (or
//!   a replica without leader election) once every watch has delivered its first full list,
//!   and as long as no watch has been failing for longer than
//!   [`HealthSettings::watch_failure`]. Not ready from the moment shutdown starts.
//!
//! A watch is failing from its first error (refused connection, a 5xx, a 403) until the API
//! server next answers it: a complete list, a change, or a watch request accepted. A list
//! started or a page of it is not enough (kube-runtime announces a list before asking for it,
//! and a list whose later page fails has not recovered). The errors of a failing watch come
//! at most its backoff's longest delay apart, so a streak is measured from its first error.
//! Whether a watch has synced is told apart, by whoever reads the watch's first list: the
//! controller once the list is in its cache, which may be a moment after the watch's own
//! `InitDone` (and after a later error of the watch, which must not be forgotten then).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How long a failure may last before the probes report it (`--watch-failure-threshold`,
/// `--runtime-stall-threshold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthSettings {
    /// A watch failing this long makes the leader not ready.
    pub watch_failure: Duration,
    /// A runtime heartbeat this late makes the process not live.
    pub runtime_stall: Duration,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            watch_failure: Duration::from_secs(30),
            runtime_stall: Duration::from_secs(60),
        }
    }
}

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

/// What a watch told readiness, from kube-runtime's watcher events and the watch's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchSignal {
    /// A list started or one of its pages arrived (`Init`, `InitApply`): neither says the
    /// watch works yet.
    Listing,
    /// The API server answered: a complete list (`InitDone`) or a change (`Apply`, `Delete`)
    /// arrived, or a watch request was accepted (a resumed watch says nothing until something
    /// changes).
    Answered,
    /// The watch's first complete list is where its reader reads it (a controller's cache).
    /// Says nothing of the watch's health since: see the module documentation.
    Synced,
    /// The watch failed. `cause` is short and holds no secrets: a status code, "connection".
    Failed { cause: String },
}

/// When a watch began to fail, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Streak {
    since: Instant,
    /// The same moment, for people reading the message.
    since_wall: SystemTime,
    errors: u64,
    last_cause: String,
}

/// One watch, as readiness sees it: the pure state machine behind `/readyz`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchState {
    /// Has delivered its first full list.
    synced: bool,
    /// Failing since, when it is.
    failing: Option<Streak>,
}

/// What a watch's state means for readiness at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchVerdict {
    /// Synced, and not failing (or not for long enough to count).
    Healthy,
    /// Its first list has not arrived; `failing_for` when it has failed since.
    Unsynced { failing_for: Option<Duration> },
    /// Synced, then failing for longer than the threshold.
    Failing {
        failing_for: Duration,
        since: SystemTime,
        errors: u64,
        last_cause: String,
    },
}

// === impl WatchState ===

impl WatchState {
    pub fn observe(&mut self, signal: WatchSignal, now: Instant, wall: SystemTime) {
        match signal {
            WatchSignal::Listing => {}
            WatchSignal::Synced => self.synced = true,
            WatchSignal::Answered => self.failing = None,
            WatchSignal::Failed { cause } => {
                let streak = self.failing.get_or_insert_with(|| Streak {
                    since: now,
                    since_wall: wall,
                    errors: 0,
                    last_cause: String::new(),
                });
                streak.errors += 1;
                streak.last_cause = cause;
            }
        }
    }

    pub fn verdict(&self, now: Instant, threshold: Duration) -> WatchVerdict {
        let failing_for = self
            .failing
            .as_ref()
            .map(|s| now.saturating_duration_since(s.since));
        match (&self.failing, failing_for) {
            _ if !self.synced => WatchVerdict::Unsynced { failing_for },
            (Some(streak), Some(failing_for)) if failing_for > threshold => WatchVerdict::Failing {
                failing_for,
                since: streak.since_wall,
                errors: streak.errors,
                last_cause: streak.last_cause.clone(),
            },
            _ => WatchVerdict::Healthy,
        }
    }
}

#[derive(Debug)]
struct State {
    role: Role,
    /// Every watch of the controllers since they started, by name.
    watches: BTreeMap<String, WatchState>,
    stopping: bool,
    failed: Option<String>,
    /// The runtime's last heartbeat; `None` until the heartbeat runs.
    beat: Option<Instant>,
}

/// Shared by the components that report and the HTTP server that answers probes.
#[derive(Debug)]
pub struct Health {
    settings: HealthSettings,
    state: Mutex<State>,
}

impl Default for Health {
    fn default() -> Self {
        Health::new(HealthSettings::default())
    }
}

// === impl Health ===

impl Health {
    pub fn new(settings: HealthSettings) -> Self {
        Health {
            settings,
            state: Mutex::new(State {
                role: Role::Starting,
                watches: BTreeMap::new(),
                stopping: false,
                failed: None,
                beat: None,
            }),
        }
    }

    pub fn settings(&self) -> HealthSettings {
        self.settings
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// This replica is now a standby behind `holder`.
    pub fn standby(&self, holder: Option<String>) {
        self.with(|s| {
            s.role = Role::Standby { holder };
            s.watches.clear();
        });
    }

    /// This replica now runs the controllers; each announces its watches with
    /// [`Health::awaiting_sync`] before any of them runs.
    pub fn leading(&self) {
        self.with(|s| {
            s.role = Role::Leading;
            s.watches.clear();
        });
    }

    /// Not ready until `watch` has delivered its first full list.
    pub fn awaiting_sync(&self, watch: &str) {
        self.with(|s| {
            s.watches.insert(watch.to_string(), WatchState::default());
        });
    }

    /// `watch`'s first full list is in place (see [`WatchSignal::Synced`]).
    pub fn synced(&self, watch: &str) {
        self.watch_signal(watch, WatchSignal::Synced);
    }

    /// What `watch` told: see [`WatchSignal`]. A watch not announced (one of controllers
    /// that have since stopped) is ignored.
    pub fn watch_signal(&self, watch: &str, signal: WatchSignal) {
        let (now, wall) = (Instant::now(), SystemTime::now());
        self.with(|s| {
            if let Some(state) = s.watches.get_mut(watch) {
                state.observe(signal, now, wall);
            }
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

    /// The runtime ran the heartbeat task (see [`heartbeat`]).
    pub fn beat(&self) {
        let now = Instant::now();
        self.with(|s| s.beat = Some(now));
    }

    pub fn role(&self) -> Role {
        self.with(|s| s.role.clone())
    }

    /// `Ok(what)` when live, `Err(why)` when not.
    pub fn live(&self) -> Result<String, String> {
        self.live_at(Instant::now())
    }

    /// `Ok(what)` when ready, `Err(why)` when not.
    pub fn ready(&self) -> Result<String, String> {
        self.ready_at(Instant::now())
    }

    fn live_at(&self, now: Instant) -> Result<String, String> {
        let stall = self.settings.runtime_stall;
        self.with(|s| {
            if let Some(reason) = &s.failed {
                return Err(reason.clone());
            }
            match s.beat.map(|beat| now.saturating_duration_since(beat)) {
                Some(late) if late > stall => Err(format!(
                    "the async runtime has not run its heartbeat for {}s (limit {}s)",
                    late.as_secs(),
                    stall.as_secs()
                )),
                _ => Ok("ok".into()),
            }
        })
    }

    fn ready_at(&self, now: Instant) -> Result<String, String> {
        let threshold = self.settings.watch_failure;
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
                Role::Leading => leading_readiness(&s.watches, now, threshold),
            }
        })
    }
}

/// The leader's readiness from its watches.
fn leading_readiness(
    watches: &BTreeMap<String, WatchState>,
    now: Instant,
    threshold: Duration,
) -> Result<String, String> {
    let mut unsynced = Vec::new();
    let mut failing = Vec::new();
    for (name, watch) in watches {
        match watch.verdict(now, threshold) {
            WatchVerdict::Healthy => {}
            WatchVerdict::Unsynced { failing_for } => unsynced.push(match failing_for {
                Some(failing_for) => format!("{name} (failing for {}s)", failing_for.as_secs()),
                None => name.clone(),
            }),
            WatchVerdict::Failing {
                failing_for,
                since,
                errors,
                last_cause,
            } => {
                let mut line = format!(
                    "the watch of {name} has been failing for {}s",
                    failing_for.as_secs()
                );
                let _ = write!(
                    line,
                    " (since {}, {errors} error{}, last: {last_cause})",
                    rfc3339(since),
                    if errors == 1 { "" } else { "s" }
                );
                failing.push(line);
            }
        }
    }
    if failing.is_empty() && unsynced.is_empty() {
        return Ok("leading: caches synced".into());
    }
    let mut why = Vec::new();
    if !failing.is_empty() {
        why.push(failing.join("; "));
    }
    if !unsynced.is_empty() {
        why.push(format!(
            "waiting for the first list of {}",
            unsynced.join(", ")
        ));
    }
    Err(format!("leading: {}", why.join("; ")))
}

/// `2025-01-02T03:04:05Z`, to the second.
fn rfc3339(time: SystemTime) -> String {
    let seconds = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    i64::try_from(seconds)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(|| format!("{seconds}s after the epoch"), |t| t.to_string())
}

/// How often the heartbeat ticks.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// Beats for `health` every second on the runtime it runs on, until the task is dropped.
pub async fn heartbeat(health: Arc<Health>) {
    let mut ticks = tokio::time::interval(HEARTBEAT);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        health.beat();
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

    fn failed(cause: &str) -> WatchSignal {
        WatchSignal::Failed {
            cause: cause.into(),
        }
    }

    /// What a watch's verdict is after a sequence of signals, each at a second from the
    /// start, judged at a later second with a 30 s threshold.
    #[test]
    fn a_watch_is_failing_after_errors_without_an_answer_for_longer_than_the_threshold() {
        use WatchSignal::*;
        #[derive(Debug, PartialEq)]
        enum Expect {
            Healthy,
            Unsynced,
            UnsyncedFailingFor(u64),
            /// Failing for this many seconds, with this many errors.
            Failing(u64, u64),
        }
        /// A case: its name, signals at seconds from the start, the second it is judged at,
        /// and the verdict.
        type Case = (&'static str, Vec<(u64, WatchSignal)>, u64, Expect);
        let cases: Vec<Case> = vec![
            ("nothing yet", vec![], 100, Expect::Unsynced),
            (
                "a list started, not done",
                vec![(0, Listing), (1, Listing)],
                100,
                Expect::Unsynced,
            ),
            (
                "listed, not yet in the cache",
                vec![(0, Listing), (1, Answered)],
                100,
                Expect::Unsynced,
            ),
            (
                "listed and synced",
                vec![(0, Listing), (1, Answered), (1, Synced)],
                100,
                Expect::Healthy,
            ),
            (
                "an error between the list and the sync is kept",
                vec![(0, Answered), (10, failed("500")), (11, Synced)],
                100,
                Expect::Failing(90, 1),
            ),
            (
                "never listed, failing",
                vec![
                    (0, Listing),
                    (0, failed("503")),
                    (1, Listing),
                    (2, failed("503")),
                ],
                100,
                Expect::UnsyncedFailingFor(100),
            ),
            (
                "failing, but not for long enough",
                vec![(0, Synced), (10, failed("503")), (20, failed("503"))],
                40,
                Expect::Healthy,
            ),
            (
                "exactly at the threshold still counts as brief",
                vec![(0, Synced), (10, failed("503"))],
                40,
                Expect::Healthy,
            ),
            (
                "failing past the threshold, measured from the first error",
                vec![(0, Synced), (10, failed("503")), (39, failed("503"))],
                41,
                Expect::Failing(31, 2),
            ),
            (
                "relists that fail again do not end the streak",
                vec![
                    (0, Synced),
                    (5, failed("connection")),
                    (6, Listing),
                    (7, failed("connection")),
                    (9, Listing),
                    (9, Listing),
                    (13, failed("503")),
                ],
                60,
                Expect::Failing(55, 3),
            ),
            (
                "a complete relist ends it",
                vec![
                    (0, Synced),
                    (5, failed("503")),
                    (50, Listing),
                    (51, Answered),
                ],
                100,
                Expect::Healthy,
            ),
            (
                "an accepted watch ends it (a resumed watch is silent)",
                vec![(0, Synced), (5, failed("503")), (50, Answered)],
                100,
                Expect::Healthy,
            ),
            (
                "a new streak after a recovery starts from its own first error",
                vec![
                    (0, Synced),
                    (5, failed("503")),
                    (50, Answered),
                    (60, failed("403")),
                ],
                80,
                Expect::Healthy,
            ),
            (
                "the new streak counts once it is long enough",
                vec![
                    (0, Synced),
                    (5, failed("503")),
                    (50, Answered),
                    (60, failed("403")),
                ],
                95,
                Expect::Failing(35, 1),
            ),
            (
                "quiet is healthy: a watch with nothing to say is not failing",
                vec![(0, Synced)],
                10_000,
                Expect::Healthy,
            ),
        ];
        let start = Instant::now();
        let wall = SystemTime::UNIX_EPOCH;
        let threshold = Duration::from_secs(30);
        for (name, signals, at, expected) in cases {
            let mut watch = WatchState::default();
            for (second, signal) in signals {
                let offset = Duration::from_secs(second);
                watch.observe(signal, start + offset, wall + offset);
            }
            let verdict = watch.verdict(start + Duration::from_secs(at), threshold);
            let got = match verdict {
                WatchVerdict::Healthy => Expect::Healthy,
                WatchVerdict::Unsynced { failing_for: None } => Expect::Unsynced,
                WatchVerdict::Unsynced {
                    failing_for: Some(f),
                } => Expect::UnsyncedFailingFor(f.as_secs()),
                WatchVerdict::Failing {
                    failing_for,
                    errors,
                    ..
                } => Expect::Failing(failing_for.as_secs(), errors),
            };
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn the_readiness_message_names_the_failing_watch_its_start_and_last_cause() {
        let health = Health::new(HealthSettings {
            watch_failure: Duration::from_secs(30),
            ..HealthSettings::default()
        });
        health.leading();
        for watch in [
            "ConfigMap in team-a",
            "GpuInstance in team-a",
            "Volume in team-a",
        ] {
            health.awaiting_sync(watch);
            health.synced(watch);
        }
        let start = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        health.with(|s| {
            let watch = s.watches.get_mut("GpuInstance in team-a").unwrap();
            watch.observe(failed("HTTP 500"), start, wall);
            watch.observe(failed("HTTP 503 ServiceUnavailable"), start, wall);
            let brief = s.watches.get_mut("Volume in team-a").unwrap();
            brief.observe(failed("connection"), start + Duration::from_secs(40), wall);
        });
        assert!(health.ready_at(start + Duration::from_secs(30)).is_ok());
        let why = health
            .ready_at(start + Duration::from_secs(45))
            .unwrap_err();
        assert_eq!(
            why,
            "leading: the watch of GpuInstance in team-a has been failing for 45s \
             (since 2026-01-01T00:00:00Z, 2 errors, last: HTTP 503 ServiceUnavailable)"
        );
        health.watch_signal("GpuInstance in team-a", WatchSignal::Answered);
        assert!(health.ready().is_ok());
        // A watch nobody announced (of controllers that have stopped) changes nothing.
        health.watch_signal("Image", failed("connection"));
        health.awaiting_sync("Image");
        let why = health.ready().unwrap_err();
        assert_eq!(why, "leading: waiting for the first list of Image");
    }

    #[test]
    fn a_standby_is_ready_whatever_its_last_watches_said() {
        let health = Health::default();
        health.leading();
        health.awaiting_sync("GpuInstance");
        health.watch_signal("GpuInstance", failed("connection"));
        health.standby(None);
        assert_eq!(health.ready().unwrap(), "standby: waiting for the lease");
    }

    #[test]
    fn liveness_fails_when_the_heartbeat_stalls_past_its_threshold() {
        let health = Health::new(HealthSettings {
            runtime_stall: Duration::from_secs(60),
            ..HealthSettings::default()
        });
        let start = Instant::now();
        assert!(
            health.live_at(start + Duration::from_secs(3600)).is_ok(),
            "no heartbeat started: nothing to judge"
        );
        health.beat();
        let beat = health.with(|s| s.beat).unwrap();
        assert!(health.live_at(beat + Duration::from_secs(59)).is_ok());
        assert!(health.live_at(beat + Duration::from_secs(60)).is_ok());
        let why = health.live_at(beat + Duration::from_secs(75)).unwrap_err();
        assert_eq!(
            why,
            "the async runtime has not run its heartbeat for 75s (limit 60s)"
        );
        health.beat();
        assert!(health.live().is_ok());
    }

    #[tokio::test]
    async fn the_heartbeat_beats_on_the_runtime_it_runs_on() {
        let health = Arc::new(Health::default());
        let task = tokio::spawn(heartbeat(health.clone()));
        let beaten = || async {
            let deadline = Instant::now() + Duration::from_secs(5);
            while health.with(|s| s.beat).is_none() {
                assert!(Instant::now() < deadline, "no heartbeat within 5s");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        beaten().await;
        health.with(|s| s.beat = None);
        beaten().await;
        task.abort();
    }
}
