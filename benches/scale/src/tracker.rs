//! Watches the benchmark's GpuInstances and timestamps, per object, when the bench applied
//! it, when the operator first reconciled it (its finalizer appeared) and when it became
//! Ready.

use futures::StreamExt;
use gpucloud_api::{FINALIZER, GpuInstance};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Timestamps of one object.
#[derive(Debug, Clone, Copy, Default)]
pub struct ObjectTimes {
    pub applied: Option<Instant>,
    pub first_reconciled: Option<Instant>,
    pub ready: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    objects: HashMap<String, ObjectTimes>,
    ready_now: usize,
    present: usize,
    /// (seconds since start, Ready objects) every sample period.
    timeline: Vec<(f64, usize)>,
}

/// Shared view of the objects' progress.
#[derive(Debug, Clone)]
pub struct Tracker {
    state: Arc<Mutex<State>>,
    started: Instant,
}

impl Tracker {
    /// Starts the watch and a sampler of the Ready count; both end when the runtime does.
    pub fn start(api: Api<GpuInstance>, sample_every: Duration) -> Tracker {
        let tracker = Tracker {
            state: Arc::new(Mutex::new(State::default())),
            started: Instant::now(),
        };
        let watching = tracker.clone();
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                        watching.observe(&object);
                    }
                    Ok(watcher::Event::Delete(object)) => watching.forget(&object.name_any()),
                    Ok(watcher::Event::Init | watcher::Event::InitDone) | Err(_) => {}
                }
            }
        });
        let sampling = tracker.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(sample_every);
            loop {
                ticks.tick().await;
                let at = sampling.started.elapsed().as_secs_f64();
                let mut state = sampling.lock();
                let ready = state.ready_now;
                state.timeline.push((at, ready));
            }
        });
        tracker
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the timestamps are still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    /// Records that the bench is about to apply `name`.
    pub fn applying(&self, name: &str) {
        let mut state = self.lock();
        state.objects.entry(name.to_string()).or_default().applied = Some(Instant::now());
    }

    fn observe(&self, object: &GpuInstance) {
        let now = Instant::now();
        let name = object.name_any();
        let has_finalizer = object.finalizers().iter().any(|f| f == FINALIZER);
        let ready = object
            .status
            .as_ref()
            .is_some_and(|s| s.cloud.is_ready(object.metadata.generation));
        let mut state = self.lock();
        let times = state.objects.entry(name).or_default();
        let was_present = times.first_reconciled.is_some() || times.ready.is_some();
        let was_ready = times.ready.is_some();
        if has_finalizer && times.first_reconciled.is_none() {
            times.first_reconciled = Some(now);
        }
        if ready && times.ready.is_none() {
            times.ready = Some(now);
        }
        let is_present = times.first_reconciled.is_some() || times.ready.is_some();
        let is_ready = times.ready.is_some();
        if is_present && !was_present {
            state.present += 1;
        }
        if is_ready && !was_ready {
            state.ready_now += 1;
        }
    }

    fn forget(&self, name: &str) {
        let mut state = self.lock();
        if let Some(times) = state.objects.remove(name) {
            if times.ready.is_some() {
                state.ready_now = state.ready_now.saturating_sub(1);
            }
            if times.first_reconciled.is_some() || times.ready.is_some() {
                state.present = state.present.saturating_sub(1);
            }
        }
    }

    /// Objects Ready now (each counted once, from its first Ready on).
    pub fn ready(&self) -> usize {
        self.lock().ready_now
    }

    /// GpuInstances the watch sees now, reconciled or not (and any the bench is applying).
    pub fn objects(&self) -> usize {
        self.lock().objects.len()
    }

    /// Objects the watch still sees.
    pub fn present(&self) -> usize {
        self.lock().present
    }

    /// Timestamps of the named objects that exist.
    pub fn times(&self, names: &[String]) -> Vec<(String, ObjectTimes)> {
        let state = self.lock();
        names
            .iter()
            .filter_map(|n| state.objects.get(n).map(|t| (n.clone(), *t)))
            .collect()
    }

    /// The latest Ready time among the named objects, if all of them are Ready.
    pub fn all_ready_at(&self, names: &[String]) -> Option<Instant> {
        let state = self.lock();
        let mut latest: Option<Instant> = None;
        for name in names {
            let ready = state.objects.get(name)?.ready?;
            latest = Some(latest.map_or(ready, |l| l.max(ready)));
        }
        latest
    }

    pub fn timeline(&self) -> Vec<(f64, usize)> {
        self.lock().timeline.clone()
    }

    /// Seconds since the tracker started.
    pub fn seconds(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.started).as_secs_f64()
    }
}
