//! Cloud observation by listing.
//!
//! One task per kind and account lists that kind's resources periodically (fast while some
//! object of the kind is in transition, slowly once everything is settled) and keeps the
//! latest list as a [`CloudList`]. Reconcilers read that list instead of calling the cloud
//! per object, so cloud traffic follows the number of kinds and accounts, not the number of
//! objects. After each list but the first, the resources whose record changed are mapped back
//! to their objects (by recorded id or by cloud name), and only those objects are reconciled.

use crate::account::{Account, AccountId};
use crate::error::{ListFailure, is_outage};
use crate::lock;
use gpucloud_cloud::{CloudClient, Error as CloudError};
use k8s_openapi::jiff::Timestamp;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, watch};

/// A cloud resource as a list returns it.
pub trait CloudRecord: Clone + Debug + PartialEq + Send + Sync + 'static {
    fn id(&self) -> &str;
    fn name(&self) -> &str;
    /// The cloud's state string, reported in `status.state`.
    fn state(&self) -> String;
    fn created_at(&self) -> Option<Timestamp>;
}

/// A kind's calls to the cloud that the shared flow, the observers and the orphan sweeper
/// make: list, read by id, delete. Creating and changing a resource are the kind's own
/// (`ManagedKind`).
pub trait CloudResource: Send + Sync + 'static {
    type Record: CloudRecord;

    /// The resource's name in logs, Events and the `resource` label of metrics.
    const LABEL: &'static str;

    fn list(
        client: CloudClient,
    ) -> impl Future<Output = Result<Vec<Self::Record>, CloudError>> + Send + 'static;

    /// Reads one resource by id; `None` when the cloud answers that it does not exist. The
    /// confirmation a list's silence needs before anything irreversible follows from it.
    fn get(
        client: CloudClient,
        id: String,
    ) -> impl Future<Output = Result<Option<Self::Record>, CloudError>> + Send + 'static;

    /// Deletes the resource, first undoing what the cloud refuses a delete for (a volume's
    /// attachment, a firewall's machines). A resource already gone is success.
    fn delete(
        client: CloudClient,
        record: Self::Record,
    ) -> impl Future<Output = Result<(), CloudError>> + Send + 'static;
}

/// How often observers list.
#[derive(Debug, Clone, Copy)]
pub struct ObserveIntervals {
    /// While nothing of the kind is in transition.
    pub resync: Duration,
    /// While some object of the kind is in transition.
    pub fast: Duration,
    /// How long an object's transition keeps the fast interval after its last change.
    pub hot_window: Duration,
    /// How long a reconcile waits for the first list of a new account before giving up.
    pub first_list_timeout: Duration,
}

impl Default for ObserveIntervals {
    fn default() -> Self {
        ObserveIntervals {
            resync: Duration::from_secs(60),
            fast: Duration::from_secs(2),
            hot_window: Duration::from_secs(120),
            first_list_timeout: Duration::from_secs(30),
        }
    }
}

/// One list of one kind in one account.
#[derive(Debug)]
pub struct CloudList<R> {
    /// Counts successful lists; 0 before the first.
    pub generation: u64,
    /// When the list that produced this list was sent.
    pub listed_at: Option<Instant>,
    by_id: HashMap<String, R>,
    by_name: HashMap<String, Vec<String>>,
}

impl<R: CloudRecord> CloudList<R> {
    fn empty() -> Self {
        CloudList {
            generation: 0,
            listed_at: None,
            by_id: HashMap::new(),
            by_name: HashMap::new(),
        }
    }

    pub(crate) fn from_records(records: Vec<R>, generation: u64, listed_at: Instant) -> Self {
        let mut by_name: HashMap<String, Vec<String>> = HashMap::new();
        let mut by_id = HashMap::with_capacity(records.len());
        for record in records {
            by_name
                .entry(record.name().to_string())
                .or_default()
                .push(record.id().to_string());
            by_id.insert(record.id().to_string(), record);
        }
        CloudList {
            generation,
            listed_at: Some(listed_at),
            by_id,
            by_name,
        }
    }

    pub fn get(&self, id: &str) -> Option<&R> {
        self.by_id.get(id)
    }

    /// Every resource listed under `name` (names are not unique in the cloud).
    pub fn named(&self, name: &str) -> Vec<&R> {
        self.by_name
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    pub fn records(&self) -> impl Iterator<Item = &R> {
        self.by_id.values()
    }

    /// Ids and names of resources that appeared, disappeared or changed since `previous`.
    fn changes_since(&self, previous: &CloudList<R>) -> Changes {
        let mut changes = Changes::default();
        for (id, record) in &self.by_id {
            if previous.by_id.get(id) != Some(record) {
                changes.ids.insert(id.clone());
                changes.names.insert(record.name().to_string());
            }
        }
        for (id, record) in &previous.by_id {
            if !self.by_id.contains_key(id) {
                changes.ids.insert(id.clone());
                changes.names.insert(record.name().to_string());
            }
        }
        changes
    }
}

/// What changed in one list, for mapping back to objects.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    pub ids: HashSet<String>,
    pub names: HashSet<String>,
}

/// What the observer knows: the latest successful list, and the outcome of the latest attempt.
#[derive(Debug)]
struct State<R> {
    list: Arc<CloudList<R>>,
    attempts: u64,
    failure: Option<ListFailure>,
}

/// The observer of one kind in one account.
pub struct Observer<R> {
    state: watch::Receiver<State<R>>,
    hot_until: Mutex<Instant>,
    wake: Notify,
    intervals: ObserveIntervals,
}

impl<R: CloudRecord> Observer<R> {
    /// Starts the list loop for `account`; changes are sent on `changes` with the account's
    /// identity.
    pub fn spawn<L: CloudResource<Record = R>>(
        account: Arc<Account>,
        intervals: ObserveIntervals,
        changes: mpsc::UnboundedSender<(AccountId, Changes)>,
    ) -> Arc<Self> {
        let (tx, rx) = watch::channel(State {
            list: Arc::new(CloudList::empty()),
            attempts: 0,
            failure: None,
        });
        let observer = Arc::new(Observer {
            state: rx,
            hot_until: Mutex::new(Instant::now()),
            wake: Notify::new(),
            intervals,
        });
        let weak = Arc::downgrade(&observer);
        tokio::spawn(async move {
            let mut generation = 0;
            loop {
                let Some(observer) = weak.upgrade() else {
                    return;
                };
                // No object uses the account any more: stop listing it.
                if account.is_retired() {
                    break;
                }
                let started = Instant::now();
                let result = L::list(account.client.clone()).await;
                let mut diff = None;
                tx.send_modify(|state| {
                    state.attempts += 1;
                    match result {
                        Ok(records) => {
                            account.mark_up();
                            generation += 1;
                            let next =
                                Arc::new(CloudList::from_records(records, generation, started));
                            // The first list changes nothing anyone has seen: every reconcile
                            // waits for it, and a starting controller checks its objects
                            // against it (`readopt.rs`).
                            if generation > 1 {
                                diff = Some(next.changes_since(&state.list));
                            }
                            state.list = next;
                            state.failure = None;
                        }
                        Err(error) => {
                            tracing::warn!(account = %account.id, %error, "cloud list failed");
                            let unauthorized =
                                matches!(error, gpucloud_cloud::Error::Unauthorized { .. });
                            if is_outage(&error) {
                                account.mark_down();
                            }
                            state.failure = Some(ListFailure {
                                unauthorized,
                                message: error.to_string(),
                            });
                        }
                    }
                });
                if let Some(diff) = diff.filter(|d| !d.ids.is_empty() || !d.names.is_empty())
                    && changes.send((account.id, diff)).is_err()
                {
                    return;
                }
                let interval = observer.interval();
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = observer.wake.notified() => {}
                    () = account.retirement() => break,
                }
            }
            // Retired: its last list serves no one (a stopped observer answers with an
            // error), and the maps that still name the observer would keep it in memory.
            tx.send_modify(|state| state.list = Arc::new(CloudList::empty()));
        });
        observer
    }

    fn interval(&self) -> Duration {
        let hot = *lock(&self.hot_until) > Instant::now();
        if hot {
            self.intervals.fast
        } else {
            self.intervals.resync
        }
    }

    /// The latest list, waiting for the first list attempt. An older list is served
    /// through a passing failure; a refused key, or no list at all yet, is an error.
    pub async fn latest(&self) -> Result<Arc<CloudList<R>>, ListFailure> {
        self.wait_for(|state| state.attempts > 0).await
    }

    /// A list sent at or after `after`, asking for one at once. A failed list
    /// is an error, never the older list: callers conclude from absence (a deletion is
    /// done), which only a fresh list can show.
    pub async fn list_after(&self, after: Instant) -> Result<Arc<CloudList<R>>, ListFailure> {
        self.refresh();
        self.next_list(after).await
    }

    /// A list sent at or after `after`, at the list loop's own pace: nothing more is asked of
    /// the cloud. An error as for [`Observer::list_after`].
    pub async fn next_list(&self, after: Instant) -> Result<Arc<CloudList<R>>, ListFailure> {
        let list = self
            .wait_for(|state| {
                state.failure.is_some() && state.attempts > 0
                    || state.list.listed_at.is_some_and(|t| t >= after)
            })
            .await?;
        if list.listed_at.is_some_and(|t| t >= after) {
            return Ok(list);
        }
        let failure = self.state.borrow().failure.clone();
        Err(failure.unwrap_or_else(|| ListFailure {
            unauthorized: false,
            message: "no fresh cloud list yet".into(),
        }))
    }

    async fn wait_for(
        &self,
        ready: impl Fn(&State<R>) -> bool,
    ) -> Result<Arc<CloudList<R>>, ListFailure> {
        let mut rx = self.state.clone();
        // The guard `wait_for` answers with holds the channel's read lock: it goes at once,
        // since taking the lock again below while the list loop waits to write deadlocks.
        let timed_out = tokio::time::timeout(self.intervals.first_list_timeout, async {
            drop(rx.wait_for(|s| ready(s)).await);
        })
        .await
        .is_err();
        if !self.is_running() {
            // The list loop has ended: what it last saw is frozen, not current.
            return Err(ListFailure {
                unauthorized: false,
                message: "the cloud list loop has stopped".into(),
            });
        }
        let state = self.state.borrow();
        if timed_out && state.attempts == 0 {
            return Err(ListFailure {
                unauthorized: false,
                message: "the first cloud list has not completed".into(),
            });
        }
        match &state.failure {
            Some(failure) if failure.unauthorized || state.list.generation == 0 => {
                Err(failure.clone())
            }
            _ if timed_out => Err(ListFailure {
                unauthorized: false,
                message: "no fresh cloud list in time".into(),
            }),
            _ => Ok(state.list.clone()),
        }
    }

    /// Whether the list loop still runs. It ends only when nothing holds the observer or no
    /// one takes its changes any more; an observer whose loop ended must be replaced.
    pub fn is_running(&self) -> bool {
        self.state.has_changed().is_ok()
    }

    /// Lists fast for a while: some object of this kind is in transition.
    pub fn mark_hot(&self) {
        let until = Instant::now() + self.intervals.hot_window;
        let mut hot = lock(&self.hot_until);
        if *hot < until {
            let was_cold = *hot <= Instant::now();
            *hot = until;
            drop(hot);
            if was_cold {
                // Leave the slow sleep now rather than after a full resync interval.
                self.wake.notify_one();
            }
        }
    }

    /// Lists now.
    pub fn refresh(&self) {
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Rec {
        id: &'static str,
        name: &'static str,
        state: &'static str,
    }

    impl CloudRecord for Rec {
        fn id(&self) -> &str {
            self.id
        }
        fn name(&self) -> &str {
            self.name
        }
        fn state(&self) -> String {
            self.state.to_string()
        }
        fn created_at(&self) -> Option<Timestamp> {
            None
        }
    }

    fn rec(id: &'static str, name: &'static str, state: &'static str) -> Rec {
        Rec { id, name, state }
    }

    /// A list of records written `id name state`, separated by commas.
    fn listed(records: &'static str, generation: u64) -> CloudList<Rec> {
        let records = records.split(',').map(|record| {
            let fields: Vec<&'static str> = record.split_whitespace().collect();
            rec(fields[0], fields[1], fields[2])
        });
        CloudList::from_records(records.collect(), generation, Instant::now())
    }

    #[test]
    fn changes_cover_new_changed_and_gone_records_only() {
        let before = listed("1 a ACTIVE, 2 b ACTIVE, 3 c ACTIVE", 1);
        let after = listed("1 a ACTIVE, 2 b SHUTOFF, 4 d CREATING", 2);
        let changes = after.changes_since(&before);
        assert_eq!(
            changes.ids,
            HashSet::from(["2".to_string(), "3".to_string(), "4".to_string()])
        );
        assert_eq!(
            changes.names,
            HashSet::from(["b".to_string(), "c".to_string(), "d".to_string()])
        );
        assert_eq!(after.changes_since(&after), Changes::default());
    }

    /// Lists one machine whose state alternates, so every list is a change.
    struct Flapping;

    impl CloudResource for Flapping {
        type Record = Rec;
        const LABEL: &'static str = "flapping";
        fn list(
            _client: CloudClient,
        ) -> impl Future<Output = Result<Vec<Rec>, CloudError>> + Send + 'static {
            static LISTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = LISTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let state = if n.is_multiple_of(2) {
                "ACTIVE"
            } else {
                "SHUTOFF"
            };
            async move { Ok(vec![rec("1", "a", state)]) }
        }
        async fn get(_client: CloudClient, _id: String) -> Result<Option<Rec>, CloudError> {
            Ok(None)
        }
        async fn delete(_client: CloudClient, _record: Rec) -> Result<(), CloudError> {
            Ok(())
        }
    }

    /// Intervals that list every `interval`, hot or not.
    fn listing_every(interval: Duration) -> ObserveIntervals {
        ObserveIntervals {
            resync: interval,
            fast: interval,
            hot_window: Duration::ZERO,
            first_list_timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn an_observer_whose_loop_ended_serves_no_frozen_list() {
        let account = Account::for_tests("http://127.0.0.1:9");
        let intervals = listing_every(Duration::from_millis(20));
        let (changes, received) = mpsc::unbounded_channel();
        let observer = Observer::spawn::<Flapping>(account, intervals, changes);
        assert_eq!(observer.latest().await.map(|s| s.len()), Ok(1));
        assert!(observer.is_running());

        // No one takes the changes any more: the loop ends at its next change.
        drop(received);
        let deadline = Instant::now() + Duration::from_secs(5);
        while observer.is_running() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!observer.is_running());
        let failure = observer.latest().await.err();
        assert_eq!(
            failure.map(|f| f.message),
            Some("the cloud list loop has stopped".to_string())
        );
        assert!(observer.list_after(Instant::now()).await.is_err());
    }

    #[tokio::test]
    async fn a_retired_account_is_no_longer_listed() {
        let account = Account::for_tests("http://127.0.0.1:9");
        let (changes, mut received) = mpsc::unbounded_channel();
        tokio::spawn(async move { while received.recv().await.is_some() {} });
        // A long interval: the loop waits in its sleep when the retirement comes.
        let intervals = listing_every(Duration::from_secs(3600));
        let observer = Observer::spawn::<Flapping>(account.clone(), intervals, changes);
        assert!(observer.latest().await.is_ok());
        assert!(observer.is_running());
        account.retire();
        let deadline = Instant::now() + Duration::from_secs(5);
        while observer.is_running() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!observer.is_running(), "still listing a retired account");
    }

    /// Readers of the list and the list loop's writes share one lock: a reader that held
    /// its guard while taking the lock again would deadlock with a writer queued in between,
    /// blocking the runtime's threads for good.
    #[test]
    fn readers_and_the_list_loop_never_deadlock() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let intervals = listing_every(Duration::ZERO);
                let (changes, mut received) = mpsc::unbounded_channel();
                tokio::spawn(async move { while received.recv().await.is_some() {} });
                let observer = Observer::spawn::<Flapping>(
                    Account::for_tests("http://127.0.0.1:9"),
                    intervals,
                    changes,
                );
                let readers: Vec<_> = (0..4)
                    .map(|_| {
                        let observer = observer.clone();
                        tokio::spawn(async move {
                            for _ in 0..20_000 {
                                // Keeps the list loop writing as often as it can.
                                observer.refresh();
                                let _ = observer.latest().await;
                                tokio::task::yield_now().await;
                            }
                        })
                    })
                    .collect();
                for reader in readers {
                    reader.await.unwrap();
                }
            });
            let _ = done.send(());
        });
        assert!(
            finished.recv_timeout(Duration::from_secs(30)).is_ok(),
            "list readers and the list loop deadlocked"
        );
    }

    #[test]
    fn names_may_repeat() {
        let list = listed("1 same ACTIVE, 2 same ACTIVE", 1);
        let mut ids: Vec<_> = list.named("same").iter().map(|r| r.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, ["1", "2"]);
        assert!(list.named("other").is_empty());
    }
}
