//! Cloud observation by listing.
//!
//! One task per kind and account lists that kind's resources periodically (fast while some
//! object of the kind is in transition, slowly once everything is settled) and keeps the
//! latest list as a [`CloudList`]. Reconcilers read that list instead of calling the cloud
//! per object, so cloud traffic follows the number of kinds and accounts, not the number of
//! objects. After each list but the first, the resources whose record changed are mapped back
//! to their objects (by recorded id or by cloud name), and only those objects are reconciled.

use crate::accounts::account::{Account, AccountId};
use crate::flow::error::{ListFailure, is_outage};
use crate::lock;
use gpucloud_cloud::{CloudClient, Error as CloudError};
use k8s_openapi::jiff::Timestamp;
use std::collections::HashSet;
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
///
/// Every object of the kind is looked up in it, so it is held once per account and kind for
/// as long as the next list takes: the records sorted by id (looked up by binary search), and
/// a name index of positions, so that no id or name is held a second time.
#[derive(Debug)]
pub struct CloudList<R> {
    /// Counts successful lists; 0 before the first.
    pub generation: u64,
    /// When the list that produced this list was sent.
    pub listed_at: Option<Instant>,
    /// One record per id, sorted by id.
    records: Vec<R>,
    /// Positions in `records`, sorted by the record's name (and, within a name, by id).
    by_name: Vec<u32>,
}

impl<R: CloudRecord> CloudList<R> {
    fn empty() -> Self {
        CloudList {
            generation: 0,
            listed_at: None,
            records: Vec::new(),
            by_name: Vec::new(),
        }
    }

    /// The list of `records`; of records that repeat an id, the last one listed is kept.
    pub(crate) fn from_records(mut records: Vec<R>, generation: u64, listed_at: Instant) -> Self {
        // Reversed, then sorted stably and deduplicated (which keeps the first of a run): the
        // last record listed under an id is the one kept.
        records.reverse();
        records.sort_by(|a, b| a.id().cmp(b.id()));
        records.dedup_by(|later, kept| later.id() == kept.id());
        // A decoded list grows by doubling: up to half of it is room no record uses.
        records.shrink_to_fit();
        // Positions past u32::MAX (no cloud lists that many) are left out of the name index.
        let mut by_name: Vec<u32> = (0..records.len())
            .map_while(|position| u32::try_from(position).ok())
            .collect();
        by_name.sort_by(|a, b| name_at(&records, *a).cmp(name_at(&records, *b)));
        CloudList {
            generation,
            listed_at: Some(listed_at),
            records,
            by_name,
        }
    }

    pub fn get(&self, id: &str) -> Option<&R> {
        let position = self.records.binary_search_by(|r| r.id().cmp(id)).ok()?;
        self.records.get(position)
    }

    /// Every resource listed under `name` (names are not unique in the cloud), each once, in
    /// the order of their ids.
    pub fn named(&self, name: &str) -> Vec<&R> {
        let start = self
            .by_name
            .partition_point(|position| name_at(&self.records, *position) < name);
        self.by_name[start..]
            .iter()
            .filter_map(|position| self.records.get(*position as usize))
            .take_while(|record| record.name() == name)
            .collect()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every record, in the order of their ids.
    pub fn records(&self) -> impl Iterator<Item = &R> {
        self.records.iter()
    }

    /// Ids and names of resources that appeared, disappeared or changed since `previous`.
    fn changes_since(&self, previous: &CloudList<R>) -> Changes {
        let mut changes = Changes::default();
        for record in &self.records {
            if previous.get(record.id()) != Some(record) {
                changes.ids.insert(record.id().to_string());
                changes.names.insert(record.name().to_string());
            }
        }
        for record in &previous.records {
            if self.get(record.id()).is_none() {
                changes.ids.insert(record.id().to_string());
                changes.names.insert(record.name().to_string());
            }
        }
        changes
    }
}

/// The name of the record at `position`; "" for none (a position is always one).
fn name_at<R: CloudRecord>(records: &[R], position: u32) -> &str {
    records
        .get(position as usize)
        .map_or("", |record| record.name())
}

/// What changed in one list, for mapping back to objects.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    pub ids: HashSet<String>,
    pub names: HashSet<String>,
}

impl Changes {
    /// Adds the changes of a later list.
    pub fn merge(&mut self, later: Changes) {
        self.ids.extend(later.ids);
        self.names.extend(later.names);
    }
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

    /// The first successful list sent at or after `after`, however many lists fail before it
    /// and with no deadline; `None` once the list loop has ended (the account retired).
    pub async fn succeeded_after(&self, after: Instant) -> Option<Arc<CloudList<R>>> {
        let mut rx = self.state.clone();
        let state = rx
            .wait_for(|state| state.list.listed_at.is_some_and(|t| t >= after))
            .await
            .ok()?;
        Some(state.list.clone())
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

    /// The ids of `records`, in order.
    fn ids<'a>(records: impl IntoIterator<Item = &'a Rec>) -> Vec<&'static str> {
        records.into_iter().map(|r| r.id).collect()
    }

    #[test]
    fn a_list_holds_one_record_per_id_found_by_id_and_by_name() {
        // Out of order, names repeated, and id 2 listed twice under two names: the last
        // record listed under an id is the one kept, and only its name finds it.
        let list = listed(
            "3 b ACTIVE, 2 old CREATING, 1 a ACTIVE, 4 c ACTIVE, 2 a ACTIVE, 5 b SHUTOFF",
            1,
        );
        assert_eq!(list.len(), 5);
        assert_eq!(ids(list.records()), ["1", "2", "3", "4", "5"]);
        // id -> the record's name and state
        let by_id = [
            ("1", Some(("a", "ACTIVE"))),
            ("2", Some(("a", "ACTIVE"))),
            ("5", Some(("b", "SHUTOFF"))),
            ("0", None),
            ("22", None),
            ("6", None),
            ("", None),
        ];
        for (id, want) in by_id {
            assert_eq!(list.get(id).map(|r| (r.name, r.state)), want, "{id:?}");
        }
        // name -> the ids listed under it, each once
        let by_name: [(&str, &[&str]); 8] = [
            ("a", &["1", "2"]),
            ("b", &["3", "5"]),
            ("c", &["4"]),
            ("old", &[]),
            ("", &[]),
            ("aa", &[]),
            ("0", &[]),
            ("d", &[]),
        ];
        for (name, want) in by_name {
            assert_eq!(ids(list.named(name)), want, "{name:?}");
        }
        let empty = CloudList::<Rec>::empty();
        assert!(empty.is_empty() && empty.get("1").is_none() && empty.named("a").is_empty());
    }

    #[test]
    fn changes_count_the_record_kept_under_a_repeated_id() {
        let before = listed("1 a ACTIVE, 2 b CREATING, 2 b ACTIVE", 1);
        // after -> changed ids and names
        let cases: [(&'static str, &[&str], &[&str]); 4] = [
            // The same records in another order, repeated: nothing changed.
            ("2 b ACTIVE, 1 a ACTIVE, 1 a ACTIVE", &[], &[]),
            // Compared with the record kept (the last), not the first.
            ("1 a ACTIVE, 2 b CREATING", &["2"], &["b"]),
            ("1 a ACTIVE, 2 b ACTIVE, 2 b SHUTOFF", &["2"], &["b"]),
            (
                "2 b ACTIVE, 3 c ACTIVE, 3 c ACTIVE",
                &["1", "3"],
                &["a", "c"],
            ),
        ];
        for (after, ids, names) in cases {
            let changes = listed(after, 2).changes_since(&before);
            let set = |items: &[&str]| items.iter().map(|i| i.to_string()).collect();
            assert_eq!(changes.ids, set(ids), "{after}");
            assert_eq!(changes.names, set(names), "{after}");
        }
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
