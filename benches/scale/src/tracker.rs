//! Watches the benchmark's objects and timestamps, per object, when the bench applied it,
//! when the operator first reconciled it (its finalizer appeared) and when it became Ready.
//! Objects are counted in groups (the multi-tenant run's accounts), each with its own
//! timeline.

use futures::StreamExt;
use gpucloud_api::{FINALIZER, GpuInstance, Managed};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
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
    objects: HashMap<String, (usize, ObjectTimes)>,
    ready_now: usize,
    /// Ready objects per group.
    ready_in: BTreeMap<usize, usize>,
    present: usize,
    /// (seconds since start, Ready objects) every sample period.
    timeline: Vec<(f64, usize)>,
    /// The same, per group.
    group_timelines: BTreeMap<usize, Vec<(f64, usize)>>,
}

/// Shared view of the objects' progress.
#[derive(Debug, Clone)]
pub struct Tracker {
    state: Arc<Mutex<State>>,
    started: Instant,
}

impl Tracker {
    /// Watches the GpuInstances of `api`, keyed by name, in one group; see [`Tracker::new`].
    pub fn start(api: Api<GpuInstance>, sample_every: Duration) -> Tracker {
        let tracker = Tracker::new(sample_every);
        tracker.watch(api, |object| object.name_any(), |_| 0);
        tracker
    }

    /// A tracker with a sampler of the Ready counts, and nothing watched yet; the sampler and
    /// the watches end when the runtime does.
    pub fn new(sample_every: Duration) -> Tracker {
        let tracker = Tracker {
            state: Arc::new(Mutex::new(State::default())),
            started: Instant::now(),
        };
        let sampling = tracker.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(sample_every);
            loop {
                ticks.tick().await;
                let at = sampling.started.elapsed().as_secs_f64();
                let mut state = sampling.lock();
                let ready = state.ready_now;
                state.timeline.push((at, ready));
                let groups: Vec<(usize, usize)> =
                    state.ready_in.iter().map(|(g, n)| (*g, *n)).collect();
                for (group, ready) in groups {
                    state
                        .group_timelines
                        .entry(group)
                        .or_default()
                        .push((at, ready));
                }
            }
        });
        tracker
    }

    /// Watches the objects of `api`: each is known by `key` (unique across everything this
    /// tracker watches) and counted in the group `group` gives it.
    pub fn watch<K>(
        &self,
        api: Api<K>,
        key: impl Fn(&K) -> String + Send + 'static,
        group: impl Fn(&K) -> usize + Send + 'static,
    ) where
        K: Resource + Managed + Clone + Debug + DeserializeOwned + Send + 'static,
    {
        let watching = self.clone();
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                        watching.observe(&key(&object), group(&object), &object);
                    }
                    Ok(watcher::Event::Delete(object)) => watching.forget(&key(&object)),
                    Ok(watcher::Event::Init | watcher::Event::InitDone) | Err(_) => {}
                }
            }
        });
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
        state.objects.entry(name.to_string()).or_default().1.applied = Some(Instant::now());
    }

    fn observe<K: Resource + Managed>(&self, key: &str, group: usize, object: &K) {
        let now = Instant::now();
        let has_finalizer = object.finalizers().iter().any(|f| f == FINALIZER);
        let ready = object
            .cloud_status_ref()
            .is_some_and(|s| s.is_ready(object.meta().generation));
        let mut state = self.lock();
        let (in_group, times) = state.objects.entry(key.to_string()).or_default();
        *in_group = group;
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
            *state.ready_in.entry(group).or_default() += 1;
        }
    }

    fn forget(&self, key: &str) {
        let mut state = self.lock();
        if let Some((group, times)) = state.objects.remove(key) {
            if times.ready.is_some() {
                state.ready_now = state.ready_now.saturating_sub(1);
                if let Some(ready) = state.ready_in.get_mut(&group) {
                    *ready = ready.saturating_sub(1);
                }
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

    /// Objects whose key starts with `prefix`, seen by a watch or being applied.
    pub fn objects_with_prefix(&self, prefix: &str) -> usize {
        self.lock()
            .objects
            .keys()
            .filter(|key| key.starts_with(prefix))
            .count()
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
            .filter_map(|n| state.objects.get(n).map(|(_, t)| (n.clone(), *t)))
            .collect()
    }

    /// The latest Ready time among the named objects, if all of them are Ready.
    pub fn all_ready_at(&self, names: &[String]) -> Option<Instant> {
        let state = self.lock();
        let mut latest: Option<Instant> = None;
        for name in names {
            let ready = state.objects.get(name)?.1.ready?;
            latest = Some(latest.map_or(ready, |l| l.max(ready)));
        }
        latest
    }

    pub fn timeline(&self) -> Vec<(f64, usize)> {
        self.lock().timeline.clone()
    }

    /// Each group's timeline.
    pub fn group_timelines(&self) -> BTreeMap<usize, Vec<(f64, usize)>> {
        self.lock().group_timelines.clone()
    }

    /// Seconds since the tracker started.
    pub fn seconds(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.started).as_secs_f64()
    }
}
