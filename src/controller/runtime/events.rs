//! Kubernetes Events (`events.k8s.io/v1`) about the objects the operator manages.
//!
//! An event that repeats for the same object (same type, action, reason and related object)
//! within six minutes is folded into a series on the first one, as client-go's recorder does.
//! What the publisher remembers for that is a 64-bit key, the event's name and a count, for at
//! most `REMEMBERED_LIMIT` events by default, so its memory stays small and bounded however many objects
//! there are: a copy of every event sent, kept six minutes, would hold more than the objects
//! themselves during a bulk creation.
//!
//! Before that, client-go's spam filter: each object may have a burst of 25 events from this
//! publisher, then one per five minutes (a token bucket per object and source). A failure that
//! repeats on every retry therefore costs the API server 25 writes, then one per five
//! minutes, however long it lasts; the events past the budget are dropped with a debug log
//! line. The buckets are bounded by the same limit as the series.
//!
//! A reconcile never waits for an event: `send` queues it for a background lane and returns,
//! as client-go's broadcaster does. Each object's events go through one lane, so they keep
//! their order; a full lane drops the event (events are best effort) rather than hold a
//! reconcile slot while the API server is slow.

use crate::lock;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as KubeEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub use kube::runtime::events::{Event, EventType};

/// The longest note the API server accepts, in characters.
const NOTE_LIMIT: usize = 1024;

/// An event the operator reports about one of its own actions (`Reconcile`,
/// `SweepOrphans`, ...), its note cut to what the API server accepts.
pub fn event(type_: EventType, reason: &str, note: &str, action: &str) -> Event {
    Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note.chars().take(NOTE_LIMIT).collect()),
        action: action.to_owned(),
        secondary: None,
    }
}

/// How long a sent event can still grow into a series (client-go's value).
const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// How often expired entries are dropped; at most once per interval, on a publish.
const PRUNE_INTERVAL: Duration = Duration::from_secs(60);
/// Events remembered at most. Past it an event is still sent; a repeat of it within the
/// window becomes a new event instead of a series.
pub const REMEMBERED_LIMIT: usize = 8192;

/// client-go's spam filter: events an object may have at once, per source.
const SPAM_BURST: f64 = 25.0;
/// How long the spam filter takes to give an object back one event.
const SPAM_REFILL: Duration = Duration::from_secs(5 * 60);

/// Background lanes `send` spreads objects over: enough that one slow write does not hold
/// the others back.
const LANES: usize = 4;
/// Events queued in one lane at most; past it an event is dropped.
const LANE_CAPACITY: usize = 1024;

/// Who reports the events: the controller's name, and the replica (`reportingInstance`, the
/// pod's name) that wrote each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    pub controller: String,
    pub instance: String,
}

impl Reporter {
    /// `controller` reporting from the replica `instance`.
    pub fn new(controller: impl Into<String>, instance: impl Into<String>) -> Self {
        Reporter {
            controller: controller.into(),
            instance: instance.into(),
        }
    }
}

/// Publishes events under one reporting controller name.
pub struct EventPublisher {
    writer: Arc<Writer>,
    lanes: OnceLock<Vec<mpsc::Sender<(Event, ObjectReference)>>>,
    dropped: AtomicU64,
}

/// What writes events to the API server; shared with the background lanes.
struct Writer {
    client: kube::Client,
    reporter: Reporter,
    remembered: Mutex<Remembered>,
    limit: usize,
}

struct Remembered {
    by_key: HashMap<u64, Sent>,
    /// The spam filter's buckets, by object.
    buckets: HashMap<u64, Bucket>,
    pruned_at: Instant,
}

/// An object's spam-filter budget: `tokens` events left at `at`, one more every
/// [`SPAM_REFILL`] up to [`SPAM_BURST`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(at: Instant) -> Bucket {
        Bucket {
            tokens: SPAM_BURST,
            at,
        }
    }

    /// The budget at `now`, refilled since `at`.
    fn refilled(self, now: Instant) -> Bucket {
        let elapsed = now.saturating_duration_since(self.at);
        let tokens = self.tokens + elapsed.as_secs_f64() / SPAM_REFILL.as_secs_f64();
        Bucket {
            tokens: tokens.min(SPAM_BURST),
            at: now,
        }
    }

    /// Takes one event from the budget at `now`; `false` when none is left.
    fn take(&mut self, now: Instant) -> bool {
        *self = self.refilled(now);
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

/// An event already sent, enough to extend its series.
struct Sent {
    namespace: String,
    name: String,
    count: i32,
    last: Instant,
}

impl EventPublisher {
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self::with_limit(client, reporter, REMEMBERED_LIMIT)
    }

    /// A publisher that remembers at most `limit` events for series.
    pub fn with_limit(client: kube::Client, reporter: Reporter, limit: usize) -> Self {
        EventPublisher {
            writer: Arc::new(Writer {
                client,
                reporter,
                remembered: Mutex::new(Remembered {
                    by_key: HashMap::new(),
                    buckets: HashMap::new(),
                    pruned_at: Instant::now(),
                }),
                limit,
            }),
            lanes: OnceLock::new(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Sends `event` about `regarding` (in its namespace, or `default` for cluster-scoped
    /// objects) and waits for the API server's answer: a new Event, or the next count of the
    /// series it repeats.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        self.writer.publish(event, regarding).await
    }

    /// Queues `event` about `regarding` for a background lane and returns at once; a failed
    /// write is logged there. Needs a Tokio runtime (the lanes start on the first call).
    pub fn send(&self, event: Event, regarding: ObjectReference) {
        let lanes = self.lanes.get_or_init(|| {
            (0..LANES)
                .map(|_| {
                    let (lane, mut queued) = mpsc::channel(LANE_CAPACITY);
                    let writer = self.writer.clone();
                    tokio::spawn(async move {
                        while let Some((event, regarding)) = queued.recv().await {
                            if let Err(error) = writer.publish(&event, &regarding).await {
                                tracing::debug!(%error, reason = %event.reason, "event not published");
                            }
                        }
                    });
                    lane
                })
                .collect()
        });
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        // By the object's identity alone (not its version): all its events share a lane.
        hash_identity(&regarding, &mut hasher);
        let lane = &lanes[(hasher.finish() % lanes.len() as u64) as usize];
        if let Err(mpsc::error::TrySendError::Full((event, _))) = lane.try_send((event, regarding))
        {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // Once, then every thousandth: an API server too slow for events would flood the log.
            if dropped % 1000 == 1 {
                tracing::warn!(reason = %event.reason, dropped, "event dropped: the API server is not keeping up");
            }
        }
    }

    /// How many sent events are remembered for series.
    pub fn remembered(&self) -> usize {
        self.writer.with_remembered(|r| r.by_key.len())
    }
}

impl Writer {
    async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let key = self.key(event, regarding);
        let source = self.source(regarding);
        let now = Instant::now();
        let Some(repeat) = self.with_remembered(|r| {
            r.prune(now);
            if !r.admit(source, now, self.limit) {
                return None;
            }
            Some(
                r.by_key
                    .get(&key)
                    .map(|sent| (sent.namespace.clone(), sent.name.clone(), sent.count + 1)),
            )
        }) else {
            tracing::debug!(
                reason = %event.reason,
                object = regarding.name.as_deref().unwrap_or_default(),
                "event dropped by the spam filter"
            );
            return Ok(());
        };
        if let Some((namespace, name, count)) = repeat {
            let series = serde_json::json!({
                "series": EventSeries {
                    count,
                    last_observed_time: MicroTime(Timestamp::now()),
                }
            });
            let events: Api<KubeEvent> = Api::namespaced(self.client.clone(), &namespace);
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => {
                    self.with_remembered(|r| {
                        if let Some(sent) = r.by_key.get_mut(&key) {
                            sent.count = sent.count.max(count);
                            sent.last = now;
                        }
                    });
                    return Ok(());
                }
                // The first event expired or was deleted: start again with a new one.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        let created = self.to_kube_event(event, regarding);
        let namespace = created.metadata.namespace.clone().unwrap_or_default();
        let name = created.metadata.name.clone().unwrap_or_default();
        Api::<KubeEvent>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &created)
            .await?;
        self.with_remembered(|r| {
            if r.by_key.len() < self.limit || r.by_key.contains_key(&key) {
                r.by_key.insert(
                    key,
                    Sent {
                        namespace,
                        name,
                        count: 1,
                        last: now,
                    },
                );
            }
        });
        Ok(())
    }

    fn with_remembered<T>(&self, f: impl FnOnce(&mut Remembered) -> T) -> T {
        f(&mut lock(&self.remembered))
    }

    /// The spam filter's key: the object, whatever its version, and this publisher (client-go
    /// keys it by the event's source and the involved object).
    fn source(&self, regarding: &ObjectReference) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&self.reporter.controller, &self.reporter.instance).hash(&mut hasher);
        hash_identity(regarding, &mut hasher);
        hasher.finish()
    }

    /// What makes two events the same series: client-go's key. The note is not part of it, but
    /// the whole reference is, resource version included: a repeat after the object changed is a
    /// new event, not a count on a stale message.
    fn key(&self, event: &Event, regarding: &ObjectReference) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (type_name(event.type_), &event.action, &event.reason).hash(&mut hasher);
        hash_reference(regarding, &mut hasher);
        if let Some(related) = &event.secondary {
            hash_reference(related, &mut hasher);
        }
        hasher.finish()
    }

    fn to_kube_event(&self, event: &Event, regarding: &ObjectReference) -> KubeEvent {
        let now = Timestamp::now();
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let subject = regarding
            .name
            .as_deref()
            .unwrap_or(&self.reporter.controller);
        KubeEvent {
            metadata: ObjectMeta {
                // client-go's naming: unique per object and nanosecond.
                name: Some(format!("{subject}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: event.note.clone(),
            type_: Some(type_name(event.type_).into()),
            regarding: Some(regarding.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(self.reporter.instance.clone()),
            ..KubeEvent::default()
        }
    }
}

impl Remembered {
    fn prune(&mut self, now: Instant) {
        if now.duration_since(self.pruned_at) < PRUNE_INTERVAL {
            return;
        }
        self.pruned_at = now;
        self.by_key
            .retain(|_, sent| now.duration_since(sent.last) < SERIES_WINDOW);
        // A bucket refilled to the burst is what an object never seen gets.
        self.buckets
            .retain(|_, bucket| bucket.refilled(now).tokens < SPAM_BURST);
        // Give back what a burst grew the tables to.
        if self.by_key.capacity() > 4 * self.by_key.len().max(64) {
            self.by_key.shrink_to_fit();
        }
        if self.buckets.capacity() > 4 * self.buckets.len().max(64) {
            self.buckets.shrink_to_fit();
        }
    }

    /// Whether the spam filter lets an event about `source` through at `now`. Past `limit`
    /// objects a new one is let through without a bucket, as client-go's bounded cache
    /// forgets the oldest: the filter then holds back less, never more.
    fn admit(&mut self, source: u64, now: Instant, limit: usize) -> bool {
        if let Some(bucket) = self.buckets.get_mut(&source) {
            return bucket.take(now);
        }
        if self.buckets.len() < limit {
            let mut bucket = Bucket::full(now);
            bucket.take(now);
            self.buckets.insert(source, bucket);
        }
        true
    }
}

fn type_name(type_: EventType) -> &'static str {
    match type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// Hashes the whole reference, as client-go's key compares it. A failure repeated on every retry
/// still folds: the operator writes status only when it changes, so the version stays.
fn hash_reference(reference: &ObjectReference, hasher: &mut impl Hasher) {
    hash_identity(reference, hasher);
    reference.resource_version.hash(hasher);
    reference.field_path.hash(hasher);
}

/// Hashes which object a reference names, whatever its version.
fn hash_identity(reference: &ObjectReference, hasher: &mut impl Hasher) {
    reference.api_version.hash(hasher);
    reference.kind.hash(hasher);
    reference.namespace.hash(hasher);
    reference.name.hash(hasher);
    reference.uid.hash(hasher);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spam_filter_lets_a_burst_through_then_one_per_refill() {
        let start = Instant::now();
        let mut remembered = Remembered {
            by_key: HashMap::new(),
            buckets: HashMap::new(),
            pruned_at: start,
        };
        let admitted = (0..30).filter(|_| remembered.admit(1, start, 10)).count();
        assert_eq!(admitted, 25);
        // Another object has its own budget.
        assert!(remembered.admit(2, start, 10));
        // One event back per five minutes, not more.
        let later = start + SPAM_REFILL;
        assert!(remembered.admit(1, later, 10));
        assert!(!remembered.admit(1, later, 10));
        // Past the limit of objects, a new one is let through unremembered.
        for source in 3..=10 {
            assert!(remembered.admit(source, start, 10));
        }
        assert_eq!(remembered.buckets.len(), 10);
        assert!((0..30).all(|_| remembered.admit(11, start, 10)));
        // Refilled buckets are dropped: an object not seen for long starts afresh.
        let much_later = start + SPAM_REFILL * 30;
        remembered.pruned_at = start;
        remembered.prune(much_later);
        assert!(remembered.buckets.is_empty());
    }
}
