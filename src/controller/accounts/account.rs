//! Cloud accounts and the credentials that reach them.
//!
//! The API key comes only from Kubernetes Secrets: the operator-wide default, or the Secret an
//! object names in its own namespace (a reference carries no namespace, so another namespace's
//! Secret cannot be named). Objects whose Secrets hold the same key share one [`Account`]: one
//! client, one rate limiter and one set of cloud observers, so the operator never runs two
//! limiters against the same account. Keys are told apart by their SHA-256 digest
//! ([`AccountId`]), so two different keys never share an account.
//!
//! An account no object resolves to any more (its objects deleted, or their Secret now holds
//! another key) is retired after two passes in a row without users ([`Accounts::retire_unused`]):
//! its observers stop listing, its balance is no longer read, the sweeper no longer visits it.
//! A changed Secret read again with another key retires its old account at once when no other
//! Secret resolves to it: a refused key fixed in its Secret is not sent again for minutes.
//! Nothing irreversible follows: an object that resolves to the key again gets a new account.

use crate::accounts::catalog::Catalog;
use crate::accounts::secrets::{
    CREDENTIALS_LABEL, CREDENTIALS_LABEL_VALUE, Read, labelled_as_credentials, read_if,
};
use crate::flow::error::Error;
use crate::lock;
use gpucloud_api::SecretKeyRef;
use gpucloud_cloud::model::{
    BalanceBody, InstanceBillingQuery, PricingBody, SnapshotBillingQuery, VolumeBillingQuery,
};
use gpucloud_cloud::{ApiKey, CallObserver, ClientConfig, CloudClient, RateLimit};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Where the operator-wide default API key lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SecretLocation {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

/// How clients to the cloud are built.
#[derive(Clone)]
pub struct CloudSettings {
    pub base_url: String,
    pub timeout: Duration,
    pub rate_limit: Option<RateLimit>,
    /// How long cached balance and pricing answers are trusted.
    pub catalog_ttl: Duration,
    pub observer: Option<Arc<dyn CallObserver>>,
}

impl std::fmt::Debug for CloudSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudSettings")
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .field("rate_limit", &self.rate_limit)
            .field("catalog_ttl", &self.catalog_ttl)
            .finish_non_exhaustive()
    }
}

/// Which account an API key reaches: the SHA-256 digest of the key, so that only the same
/// key gives the same identity. Shown (`Display`, `Debug`) as its [label](AccountId::label),
/// never as the key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccountId([u8; 32]);

impl AccountId {
    /// Hex digits of the digest in the label: 48 bits, enough to tell a cluster's accounts
    /// apart by eye; the digest itself tells them apart in code.
    pub const LABEL_LEN: usize = 12;

    pub fn of(key: &ApiKey) -> AccountId {
        AccountId(Sha256::digest(key.expose_secret().as_bytes()).into())
    }

    /// The first `LABEL_LEN` hex digits of the digest: names the account in logs, metrics
    /// and events without revealing the key.
    pub fn label(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in &self.0[..Self::LABEL_LEN / 2] {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AccountId({self})")
    }
}

/// One cloud account, as reached with one API key.
pub struct Account {
    /// The account's identity; its `Display` is the label logs, metrics and events show.
    pub id: AccountId,
    pub client: CloudClient,
    catalog_ttl: Duration,
    balance: Mutex<Option<(Instant, BalanceBody)>>,
    /// The price list as last read. An async lock, held across the read: when the list is
    /// due again, the reconciles that want it meanwhile (many, while calls wait for the rate
    /// limit) share one read.
    pricing: tokio::sync::Mutex<Option<(Instant, Arc<PricingBody>)>>,
    /// The GPU catalog as last read. An async lock, held across the read: objects woken
    /// together for stock ask for it together, and one read answers them all.
    catalog: tokio::sync::Mutex<Option<(Instant, Arc<Catalog>)>>,
    /// The ids of the cloud's OS images as last read (async lock, as the price list's).
    os_images: tokio::sync::Mutex<Option<(Instant, Arc<BTreeSet<String>>)>>,
    billing: Mutex<BillingCache>,
    /// When the latest read of the price list failed; `None` once one succeeds.
    pricing_failed: Mutex<Option<Instant>>,
    /// Since when the account's cloud has not answered (a list or a call failed as a server
    /// that is down fails); `None` while it answers.
    down_since: Mutex<Option<Instant>>,
    /// Counts the account's recoveries: objects that failed during an outage wait on this
    /// rather than each on a growing timer of its own.
    recoveries: watch::Sender<u64>,
    /// Set once no object uses the account: its observers stop.
    retired: watch::Sender<bool>,
    /// Data volumes this process had the cloud let go of with their machine (detached before
    /// its delete, which the cloud accepted), by volume id: the machine's id, and when.
    released_volumes: Mutex<HashMap<String, (String, Instant)>>,
    /// Data volumes whose own deletion waits for their machine's (`Volume::hold_deletion`),
    /// by volume id, with when that was noted: the machine's deletion need not detach them.
    deleting_volumes: Mutex<HashMap<String, Instant>>,
}

/// How long a volume released with its machine is remembered: longer than any list the
/// volume's deletion could read from before the release.
const RELEASED_VOLUMES_KEPT: Duration = Duration::from_secs(600);

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Account {
    fn new(id: AccountId, client: CloudClient, catalog_ttl: Duration) -> Arc<Account> {
        Arc::new(Account {
            id,
            client,
            catalog_ttl,
            balance: Mutex::new(None),
            pricing: tokio::sync::Mutex::new(None),
            catalog: tokio::sync::Mutex::new(None),
            os_images: tokio::sync::Mutex::new(None),
            billing: Mutex::new(BillingCache::default()),
            pricing_failed: Mutex::new(None),
            down_since: Mutex::new(None),
            recoveries: watch::Sender::new(0),
            retired: watch::Sender::new(false),
            released_volumes: Mutex::new(HashMap::new()),
            deleting_volumes: Mutex::new(HashMap::new()),
        })
    }

    /// An entry of a Budget's `status.charged`, `<account>/<cloud name>/<seal>`: the seal is
    /// an HMAC of the namespace and the entry under the digest of this account's API key,
    /// which nothing shows. Whoever may write a Budget's status could otherwise add another
    /// namespace's resources there and read their spend; an entry the operator did not seal
    /// for this namespace is not counted ([`Account::is_own_charge`]).
    pub fn charge_entry(&self, namespace: &str, cloud_name: &str) -> String {
        let entry = format!("{}/{cloud_name}", self.id.label());
        let seal = self.seal(namespace, &entry);
        format!("{entry}/{seal}")
    }

    /// Whether `entry` is one [`Account::charge_entry`] made for `namespace` with this account.
    pub fn is_own_charge(&self, namespace: &str, entry: &str) -> bool {
        entry
            .rsplit_once('/')
            .is_some_and(|(unsealed, seal)| self.seal(namespace, unsealed) == seal)
    }

    fn seal(&self, namespace: &str, entry: &str) -> String {
        use hmac::Mac;
        // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
        let Ok(mut mac) = hmac::Hmac::<Sha256>::new_from_slice(&self.id.0) else {
            return String::new();
        };
        mac.update(namespace.as_bytes());
        mac.update(b"\n");
        mac.update(entry.as_bytes());
        mac.finalize().into_bytes()[..8]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// Notes that the cloud let go of `volumes` with the machine `instance`: it answered this
    /// process's detach of them and accepted the machine's delete.
    pub fn note_volumes_released(&self, instance: &str, volumes: &[String]) {
        let now = Instant::now();
        let mut released = lock(&self.released_volumes);
        released.retain(|_, (_, at)| now.duration_since(*at) < RELEASED_VOLUMES_KEPT);
        for volume in volumes {
            released.insert(volume.clone(), (instance.to_string(), now));
        }
    }

    /// Whether this process saw the cloud let go of `volume` with the machine `instance`
    /// lately: a list sent before then still shows it attached there. No proof that it is
    /// detached now: a delete relying on it detaches after all when the cloud answers that
    /// the volume is attached.
    pub fn volume_released(&self, volume: &str, instance: &str) -> bool {
        lock(&self.released_volumes)
            .get(volume)
            .is_some_and(|(from, at)| from == instance && at.elapsed() < RELEASED_VOLUMES_KEPT)
    }

    /// Notes that `volume` is being deleted and waits for its machine's deletion to let go of
    /// it, which then need not detach it first.
    pub fn note_volume_deleting(&self, volume: &str) {
        let now = Instant::now();
        let mut deleting = lock(&self.deleting_volumes);
        deleting.retain(|_, at| now.duration_since(*at) < RELEASED_VOLUMES_KEPT);
        deleting.insert(volume.to_string(), now);
    }

    /// Whether `volume` was lately noted as being deleted (`note_volume_deleting`). Forgotten
    /// after a while: a machine deleted later detaches it first, as any other volume.
    pub fn volume_deleting(&self, volume: &str) -> bool {
        lock(&self.deleting_volumes)
            .get(volume)
            .is_some_and(|at| at.elapsed() < RELEASED_VOLUMES_KEPT)
    }

    /// Whether no object used the account any more when it was last looked at.
    pub fn is_retired(&self) -> bool {
        *self.retired.borrow()
    }

    /// Marks the account as no longer used: its observers stop.
    pub(crate) fn retire(&self) {
        self.retired.send_replace(true);
    }

    /// Resolves once the account is retired.
    pub async fn retirement(&self) {
        let mut retired = self.retired.subscribe();
        let _ = retired.wait_for(|retired| *retired).await;
    }

    /// Marks the account's cloud as not answering.
    pub fn mark_down(&self) {
        let mut down = lock(&self.down_since);
        if down.is_none() {
            *down = Some(Instant::now());
            tracing::warn!(account = %self.id, "the cloud is not answering; objects wait for it to come back");
        }
    }

    /// Marks the account's cloud as answering again; wakes whatever waits for that.
    pub fn mark_up(&self) {
        let since = lock(&self.down_since).take();
        if let Some(since) = since {
            tracing::info!(account = %self.id, down_for = ?since.elapsed(), "the cloud answers again");
            self.recoveries.send_modify(|n| *n += 1);
        }
    }

    /// Whether the account's cloud is marked as not answering.
    pub fn is_down(&self) -> bool {
        lock(&self.down_since).is_some()
    }

    /// Changes at each recovery of the account's cloud.
    pub fn recoveries(&self) -> watch::Receiver<u64> {
        self.recoveries.subscribe()
    }

    /// An account on a client that is never called (for tests of code that only passes the
    /// client on).
    #[cfg(test)]
    pub(crate) fn for_tests(base_url: &str) -> Arc<Account> {
        let key = ApiKey::new("test-key");
        let id = AccountId::of(&key);
        let client = CloudClient::new(ClientConfig::new(base_url, key));
        Account::new(
            id,
            client.unwrap_or_else(|e| panic!("{e}")),
            Duration::from_secs(60),
        )
    }

    /// The balance, read from the cloud at most once per catalog TTL.
    pub async fn balance(&self) -> Result<BalanceBody, Error> {
        if let Some((at, body)) = lock(&self.balance).as_ref()
            && at.elapsed() < self.catalog_ttl
        {
            return Ok(body.clone());
        }
        let body = self.client.get_balance().await?;
        *lock(&self.balance) = Some((Instant::now(), body.clone()));
        Ok(body)
    }

    /// The price list, read from the cloud at most once per catalog TTL.
    pub async fn pricing(&self) -> Result<Arc<PricingBody>, Error> {
        let mut cached = self.pricing.lock().await;
        if let Some((at, body)) = cached.as_ref()
            && at.elapsed() < self.catalog_ttl
        {
            return Ok(body.clone());
        }
        let body = match self.client.get_pricing().await {
            Ok(body) => Arc::new(body),
            Err(error) => {
                *lock(&self.pricing_failed) = Some(Instant::now());
                return Err(error.into());
            }
        };
        *cached = Some((Instant::now(), body.clone()));
        *lock(&self.pricing_failed) = None;
        Ok(body)
    }

    /// The ids of the cloud's OS images (its catalog, which boots no one's data), read from
    /// the cloud at most once per catalog TTL.
    pub async fn os_image_ids(&self) -> Result<Arc<BTreeSet<String>>, Error> {
        let mut cached = self.os_images.lock().await;
        if let Some((at, ids)) = cached.as_ref()
            && at.elapsed() < self.catalog_ttl
        {
            return Ok(ids.clone());
        }
        let list = self.client.list_os_images().await?;
        let ids: Arc<BTreeSet<String>> =
            Arc::new(list.os_images.into_iter().map(|image| image.id).collect());
        *cached = Some((Instant::now(), ids.clone()));
        Ok(ids)
    }

    /// The GPU catalog (stock, specifications, regions), read from the cloud at most once per
    /// catalog TTL, whoever asks.
    pub async fn catalog(&self) -> Result<Arc<Catalog>, Error> {
        self.catalog_within(self.catalog_ttl).await
    }

    /// The GPU catalog, read again unless the last read is younger than `max_age`.
    pub async fn catalog_within(&self, max_age: Duration) -> Result<Arc<Catalog>, Error> {
        let mut cached = self.catalog.lock().await;
        if let Some((at, catalog)) = cached.as_ref()
            && at.elapsed() < max_age
        {
            return Ok(catalog.clone());
        }
        let catalog = Arc::new(Catalog::read(&self.client).await?);
        *cached = Some((Instant::now(), catalog.clone()));
        Ok(catalog)
    }

    /// How long cached catalogs, prices and balances are trusted: the resync interval.
    pub fn catalog_ttl(&self) -> Duration {
        self.catalog_ttl
    }

    /// What the cloud has billed for each resource of the account, deleted ones included: the
    /// billing lists `wanted` are read unless still fresh (a TTL per page it took; whoever
    /// asked), the others are as last read. The volume list is read 100 records a page, and
    /// holds the machines' system disks too: it is asked for only where Volumes are counted.
    pub async fn billing(&self, wanted: &[BillingList]) -> Result<Arc<Billing>, Error> {
        for list in wanted {
            let fresh = lock(&self.billing).is_fresh(*list, self.catalog_ttl);
            if !fresh {
                let (charges, pages, currency) = self.read_billing(*list).await?;
                lock(&self.billing).store(*list, Instant::now(), pages, charges, currency);
            }
        }
        Ok(lock(&self.billing).merged())
    }

    /// One billing list, as charges, the calls it took (its pages) and the currency it is in.
    async fn read_billing(&self, list: BillingList) -> Result<(Vec<Charge>, u64, String), Error> {
        let mut charges = Vec::new();
        match list {
            BillingList::Instances => {
                let body = self
                    .client
                    .get_instance_billing(&InstanceBillingQuery::default())
                    .await?;
                for r in &body.records {
                    charges.extend(Charge::read(
                        &r.vm_name,
                        &r.start_time,
                        r.end_time.as_deref(),
                        r.total_cost,
                    ));
                }
                Ok((charges, 1, body.currency))
            }
            BillingList::Snapshots => {
                let body = self
                    .client
                    .get_snapshot_billing(&SnapshotBillingQuery::default())
                    .await?;
                for r in &body.records {
                    charges.extend(Charge::read(
                        &r.snapshot_name,
                        &r.start_time,
                        r.end_time.as_deref(),
                        r.total_cost,
                    ));
                }
                Ok((charges, 1, body.currency))
            }
            BillingList::Volumes => {
                let mut page = 1;
                loop {
                    let query = VolumeBillingQuery {
                        page: Some(page),
                        limit: Some(100),
                        ..VolumeBillingQuery::default()
                    };
                    let body = self.client.get_volume_billing(&query).await?;
                    for r in &body.records {
                        // As shown, the volume record's times carry no zone: UTC.
                        let start = format!("{}Z", r.start_time.trim_end_matches('Z'));
                        let end = format!("{}Z", r.end_time.trim_end_matches('Z'));
                        let ended = (r.status == "deleted").then_some(end.as_str());
                        charges.extend(Charge::read(&r.volume_name, &start, ended, r.total_cost));
                    }
                    if page >= body.total_pages {
                        return Ok((charges, page, body.currency));
                    }
                    page += 1;
                }
            }
        }
    }

    /// The billing last read, however old, without a call: what a scrape reports.
    pub fn last_billing(&self) -> Option<Arc<Billing>> {
        lock(&self.billing).merged.clone()
    }

    /// The price list a status's hourly rate is read from (`KindDeclarations::priced`): as
    /// [`Account::pricing`], except that after a failed read it is not asked for again for a
    /// catalog TTL (`None` meanwhile, the rates shown left as they are), so that every
    /// reconcile of every priced object does not call the cloud while the list cannot be read.
    pub async fn pricing_for_status(&self) -> Option<Arc<PricingBody>> {
        let failed_recently =
            lock(&self.pricing_failed).is_some_and(|at| at.elapsed() < self.catalog_ttl);
        if failed_recently {
            return None;
        }
        match self.pricing().await {
            Ok(body) => Some(body),
            Err(error) => {
                tracing::warn!(account = %self.id, %error, "the price list could not be read: hourly rates are left as they are");
                None
            }
        }
    }

    /// Refuses a billed create when the balance is below `floor`. The balance is read afresh
    /// (one call per create, only with a floor set): a cached one may predate a drop below
    /// the floor by a whole catalog TTL.
    pub async fn check_budget(&self, floor: f64) -> Result<(), Error> {
        if floor <= 0.0 {
            return Ok(());
        }
        let balance = self.client.get_balance().await?;
        *lock(&self.balance) = Some((Instant::now(), balance.clone()));
        if balance.balance < floor {
            return Err(Error::InsufficientCredit {
                balance: balance.balance,
                floor,
                currency: balance.currency,
            });
        }
        Ok(())
    }
}

/// One of the cloud's billing lists, each billing one kind of resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BillingList {
    Instances,
    Snapshots,
    Volumes,
}

impl BillingList {
    pub const ALL: [BillingList; 3] = [
        BillingList::Instances,
        BillingList::Snapshots,
        BillingList::Volumes,
    ];
}

/// How long a billing list's read that took `pages` calls is trusted: a TTL per page. A paged
/// list (the volume billing, 100 records a page) then costs the account one call per TTL on
/// average however many resources it has ever had, and is as many TTLs old at worst; a list
/// read in one call is read once per TTL.
fn trusted_for(pages: u64, ttl: Duration) -> Duration {
    ttl.saturating_mul(u32::try_from(pages.max(1)).unwrap_or(u32::MAX))
}

/// One billing list as last read: when, in how many calls, and its charges (sorted by cloud
/// name, and shared with the merged billing: each charge is held once).
struct ListRead {
    at: Instant,
    pages: u64,
    charges: Arc<[Charge]>,
}

impl ListRead {
    fn is_fresh(&self, ttl: Duration) -> bool {
        self.at.elapsed() < trusted_for(self.pages, ttl)
    }
}

/// The billing lists as last read, and their charges merged.
#[derive(Default)]
pub(crate) struct BillingCache {
    lists: HashMap<BillingList, ListRead>,
    currency: Option<String>,
    merged: Option<Arc<Billing>>,
}

impl BillingCache {
    /// Whether `list` was read less than its trust ago (a TTL per page).
    fn is_fresh(&self, list: BillingList, ttl: Duration) -> bool {
        self.lists.get(&list).is_some_and(|read| read.is_fresh(ttl))
    }

    /// Keeps a read of `list` made `at` in `pages` calls, in place of the one before; the
    /// currency it names becomes the billing's.
    pub(crate) fn store(
        &mut self,
        list: BillingList,
        at: Instant,
        pages: u64,
        charges: Vec<Charge>,
        currency: String,
    ) {
        let charges = sorted_by_name(charges);
        self.lists.insert(list, ListRead { at, pages, charges });
        self.currency = Some(currency);
        self.merged = None;
    }

    /// Every list's charges as last read, merged again only after a read.
    pub(crate) fn merged(&mut self) -> Arc<Billing> {
        if let Some(merged) = &self.merged {
            return merged.clone();
        }
        let lists = BillingList::ALL
            .iter()
            .filter_map(|list| self.lists.get(list))
            .map(|read| read.charges.clone())
            .collect();
        let merged = Arc::new(Billing {
            currency: self.currency.clone().unwrap_or_default(),
            lists,
        });
        self.merged = Some(merged.clone());
        merged
    }
}

/// An account's billing records (instances, volumes and snapshots, deleted ones included), by
/// the name of the resource each is for.
#[derive(Debug, Default, PartialEq)]
pub struct Billing {
    /// The account's currency, as its instance billing names it.
    pub currency: String,
    /// Each billing list's charges, sorted by cloud name: the lists' reads hold the same
    /// slices, and a name is found by binary search (tens of thousands of charges per account,
    /// each kept once; a map by name would hold every name twice).
    lists: Vec<Arc<[Charge]>>,
}

impl Billing {
    pub fn new(charges: Vec<Charge>, currency: String) -> Billing {
        Billing {
            currency,
            lists: vec![sorted_by_name(charges)],
        }
    }

    /// The charges for the resource named `cloud_name`: list by list, each list's in the
    /// order it gave them.
    pub fn charges_of(&self, cloud_name: &str) -> Vec<&Charge> {
        self.named(cloud_name).collect()
    }

    /// What the resource named `cloud_name` has cost in all; `None` when the billing has no
    /// record of it.
    pub fn total_of(&self, cloud_name: &str) -> Option<f64> {
        let mut charges = self.named(cloud_name).peekable();
        charges.peek()?;
        Some(charges.map(|c| c.total_cost).sum())
    }

    fn named<'a>(&'a self, cloud_name: &str) -> impl Iterator<Item = &'a Charge> {
        self.lists.iter().flat_map(move |charges| {
            let start = charges.partition_point(|c| c.cloud_name.as_str() < cloud_name);
            let rest = &charges[start..];
            &rest[..rest.partition_point(|c| c.cloud_name == cloud_name)]
        })
    }
}

/// `charges` sorted by cloud name, a name's in the order they came (the sort is stable).
fn sorted_by_name(mut charges: Vec<Charge>) -> Arc<[Charge]> {
    charges.sort_by(|a, b| a.cloud_name.cmp(&b.cloud_name));
    charges.into()
}

/// What the cloud billed for one resource: from when, until when (`None` while billed), and
/// how much in all.
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub cloud_name: String,
    pub start: Timestamp,
    pub end: Option<Timestamp>,
    pub total_cost: f64,
}

impl Charge {
    /// A billing record's charge; `None` (logged) when its times do not read.
    pub(crate) fn read(
        name: &str,
        start: &str,
        end: Option<&str>,
        total_cost: f64,
    ) -> Option<Charge> {
        let parse = |text: &str| text.parse::<Timestamp>().ok();
        let charge = Charge {
            cloud_name: name.to_string(),
            start: parse(start)?,
            end: match end {
                Some(text) => Some(parse(text)?),
                None => None,
            },
            total_cost,
        };
        Some(charge)
    }

    /// The part of the charge that falls after `from` (up to `now`), assuming it accrued
    /// evenly: exact for a resource billed at one rate throughout.
    pub fn since(&self, from: Timestamp, now: Timestamp) -> f64 {
        let end = self.end.unwrap_or(now).max(self.start);
        if end <= from {
            return 0.0;
        }
        if self.start >= from {
            return self.total_cost;
        }
        let whole = end.duration_since(self.start).as_secs_f64();
        let inside = end.duration_since(from).as_secs_f64();
        if whole <= 0.0 {
            self.total_cost
        } else {
            self.total_cost * inside / whole
        }
    }
}

/// The credentials the objects of one kind (in one watched scope) use: each object's namespace
/// and the Secret reference of its spec.
pub type CredentialUsers = Box<dyn Fn() -> Vec<(String, Option<SecretKeyRef>)> + Send + Sync>;

/// Accounts by key digest, and which Secret resolved to which key.
pub struct Accounts {
    settings: CloudSettings,
    kube: kube::Client,
    default_secret: Option<SecretLocation>,
    by_id: Mutex<HashMap<AccountId, Arc<Account>>>,
    resolved: Mutex<ResolvedSecrets>,
    /// Each kind's users, with the billing list that bills the kind's resources.
    users: Mutex<Vec<(Option<BillingList>, CredentialUsers)>>,
    /// The billing lists each account's objects are billed in, as of the latest
    /// [`Accounts::retire_unused`].
    billed_in: Mutex<HashMap<AccountId, BTreeSet<BillingList>>>,
    /// The accounts the previous [`Accounts::retire_unused`] found without users.
    unused_before: Mutex<HashSet<AccountId>>,
    /// Accounts kept in use with no object using them, by number of holds
    /// ([`Accounts::hold`]).
    held: Mutex<HashMap<AccountId, usize>>,
    /// Accounts retired between passes (their Secret now holds another key), reported by the
    /// next [`Accounts::retire_unused`] with those it retires.
    retired_since: Mutex<Vec<AccountId>>,
}

/// Keeps an account in use while it lives: listed, never retired, whether or not any object
/// uses it (a deleted object's late resource is looked for after its last object went).
pub struct AccountHold {
    accounts: Arc<Accounts>,
    id: AccountId,
}

impl Drop for AccountHold {
    fn drop(&mut self) {
        let mut held = lock(&self.accounts.held);
        if let Some(holds) = held.get_mut(&self.id) {
            *holds -= 1;
            if *holds == 0 {
                held.remove(&self.id);
            }
        }
    }
}

/// How long a Secret's account is reused without reading the Secret again. A change to a
/// Secret in a watched namespace ends the reuse at once ([`Accounts::forget_secret`]); this
/// bounds it for Secrets no watch covers (the default Secret when only some namespaces are
/// watched).
const SECRET_REUSE: Duration = Duration::from_secs(60);

/// The account each Secret resolved to, so that reconciles do not read the Secret from the
/// API server every time (10,000 objects sharing one Secret would read it 10,000 times per
/// pass). Only the account is kept, never the Secret.
#[derive(Default)]
struct ResolvedSecrets {
    by_location: HashMap<SecretLocation, (Instant, Arc<Account>)>,
    /// Bumped by every forget: a read that started before a forget may have seen the old
    /// Secret, so it is not kept.
    forgets: u64,
    /// The account each forgotten Secret resolved to before its change, until it is read
    /// again: a read that finds another key retires the old account when nothing else
    /// resolves to it ([`Accounts::read_secret`]).
    replaced: HashMap<SecretLocation, AccountId>,
    /// The Secrets being read, each with the lock its readers take in turn: when a Secret's
    /// reuse ends, the reconciles that need it meanwhile wait for one read and take its
    /// answer, rather than each reading the Secret (up to 2,000 Secret GETs in 5 s at
    /// 100,000 objects). Each Secret has its own turns: one team's slow or missing Secret
    /// holds no other's. An entry goes with its last reader.
    reading: HashMap<SecretLocation, Arc<tokio::sync::Mutex<()>>>,
}

impl ResolvedSecrets {
    /// The account `location` resolved to, while it may be reused.
    fn reusable(&self, location: &SecretLocation) -> Option<Arc<Account>> {
        self.by_location
            .get(location)
            .filter(|(at, _)| at.elapsed() < SECRET_REUSE)
            .map(|(_, account)| account.clone())
    }
}

impl Accounts {
    pub fn new(
        settings: CloudSettings,
        kube: kube::Client,
        default_secret: Option<SecretLocation>,
    ) -> Self {
        Accounts {
            settings,
            kube,
            default_secret,
            by_id: Mutex::new(HashMap::new()),
            resolved: Mutex::new(ResolvedSecrets::default()),
            users: Mutex::new(Vec::new()),
            billed_in: Mutex::new(HashMap::new()),
            unused_before: Mutex::new(HashSet::new()),
            held: Mutex::new(HashMap::new()),
            retired_since: Mutex::new(Vec::new()),
        }
    }

    /// Keeps account `id` in use until the hold is dropped.
    pub fn hold(self: &Arc<Self>, id: AccountId) -> AccountHold {
        *lock(&self.held).entry(id).or_insert(0) += 1;
        AccountHold {
            accounts: self.clone(),
            id,
        }
    }

    /// Adds the objects of a kind to those whose credentials keep accounts in use; `billing`
    /// is the list the cloud bills the kind's resources in.
    pub fn register_users(&self, billing: Option<BillingList>, users: CredentialUsers) {
        lock(&self.users).push((billing, users));
    }

    /// The billing lists the objects using account `id` are billed in.
    pub fn billed_in(&self, id: &AccountId) -> Vec<BillingList> {
        lock(&self.billed_in)
            .get(id)
            .map(|lists| lists.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Retires the accounts no object has resolved to in this pass and the one before: they
    /// leave [`Accounts::all`], and their observers stop. Returns them, and those retired
    /// since the previous pass because their Secret changed.
    pub fn retire_unused(&self) -> Vec<AccountId> {
        let locations: Vec<(Option<BillingList>, SecretLocation)> = lock(&self.users)
            .iter()
            .flat_map(|(billing, users)| {
                users()
                    .into_iter()
                    .filter_map(|(namespace, reference)| {
                        self.secret_for(&namespace, reference.as_ref())
                    })
                    .map(|location| (*billing, location))
                    .collect::<HashSet<_>>()
            })
            .collect();
        let mut billed_in: HashMap<AccountId, BTreeSet<BillingList>> = HashMap::new();
        let mut in_use: HashSet<AccountId> = {
            let resolved = lock(&self.resolved);
            locations
                .iter()
                .filter_map(|(billing, location)| {
                    let (_, account) = resolved.by_location.get(location)?;
                    let lists = billed_in.entry(account.id).or_default();
                    lists.extend(*billing);
                    Some(account.id)
                })
                .collect()
        };
        in_use.extend(lock(&self.held).keys().copied());
        *lock(&self.billed_in) = billed_in;
        let known: HashSet<AccountId> = lock(&self.by_id).keys().copied().collect();
        let retire = {
            let mut unused_before = lock(&self.unused_before);
            let (retire, unused) = to_retire(&known, &in_use, &unused_before);
            *unused_before = unused;
            retire
        };
        for id in &retire {
            if let Some(account) = lock(&self.by_id).remove(id) {
                account.retire();
            }
        }
        lock(&self.resolved)
            .replaced
            .retain(|_, id| !retire.contains(id));
        lock(&self.resolved)
            .by_location
            .retain(|_, (_, account)| !retire.contains(&account.id));
        let mut retired = std::mem::take(&mut *lock(&self.retired_since));
        retired.extend(retire);
        retired
    }

    /// Forgets what the Secret `namespace`/`name` resolved to: it changed or went away.
    pub fn forget_secret(&self, namespace: &str, name: &str) {
        let mut resolved = lock(&self.resolved);
        resolved.forgets += 1;
        let forgotten: Vec<(SecretLocation, AccountId)> = resolved
            .by_location
            .extract_if(|location, _| location.namespace == namespace && location.name == name)
            .map(|(location, (_, account))| (location, account.id))
            .collect();
        resolved.replaced.extend(forgotten);
    }

    /// The Secret an object in `namespace` with `reference` reads its key from.
    pub fn secret_for(
        &self,
        namespace: &str,
        reference: Option<&SecretKeyRef>,
    ) -> Option<SecretLocation> {
        match reference {
            Some(r) => Some(SecretLocation {
                namespace: namespace.to_string(),
                name: r.name.clone(),
                key: r.key.clone(),
            }),
            None => self.default_secret.clone(),
        }
    }

    /// Whether a Secret change in `namespace`/`name` can change the credentials of some object:
    /// used to wake objects when their Secret changes.
    pub fn is_default_secret(&self, namespace: &str, name: &str) -> bool {
        self.default_secret
            .as_ref()
            .is_some_and(|d| d.namespace == namespace && d.name == name)
    }

    /// Reads the key and returns its account. Errors with `CredentialsMissing` when the Secret
    /// or the key is absent or empty; the message names the Secret, never its content.
    pub async fn resolve(
        &self,
        namespace: &str,
        reference: Option<&SecretKeyRef>,
    ) -> Result<Arc<Account>, Error> {
        let Some(location) = self.secret_for(namespace, reference) else {
            return Err(Error::CredentialsMissing(
                "no credentials: set spec.credentialsSecretRef or configure the operator's default credentials Secret"
                    .into(),
            ));
        };
        let turn = {
            let mut resolved = lock(&self.resolved);
            if let Some(account) = resolved.reusable(&location) {
                return Ok(account);
            }
            resolved
                .reading
                .entry(location.clone())
                .or_default()
                .clone()
        };
        let read = {
            let _turn = turn.lock().await;
            // Read by the reader before this one, or to be read now.
            let reused = {
                let resolved = lock(&self.resolved);
                resolved.reusable(&location).ok_or(resolved.forgets)
            };
            match reused {
                Ok(account) => Ok(account),
                Err(forgets) => self.read_secret(&location, forgets).await,
            }
        };
        let mut resolved = lock(&self.resolved);
        // The map's and this reader's: no one else waits for a turn.
        if Arc::strong_count(&turn) == 2 {
            resolved.reading.remove(&location);
        }
        read
    }

    /// Reads the Secret at `location` and returns its account, kept for reuse unless a
    /// forget came after `forgets`.
    async fn read_secret(
        &self,
        location: &SecretLocation,
        forgets: u64,
    ) -> Result<Arc<Account>, Error> {
        let secrets: Api<Secret> = Api::namespaced(self.kube.clone(), &location.namespace);
        // A Secret a spec names is read only when labelled for it; the one the administrator
        // named with `--credentials-secret` needs no label.
        let is_default = self.default_secret.as_ref() == Some(location);
        let secret = match read_if(&secrets, &location.name, |meta| {
            is_default || labelled_as_credentials(meta)
        })
        .await?
        {
            Read::Admitted(secret) => secret,
            Read::Missing => {
                return Err(Error::CredentialsMissing(format!(
                    "Secret {}/{} not found",
                    location.namespace, location.name
                )));
            }
            Read::Refused => {
                return Err(Error::CredentialsMissing(format!(
                    "Secret {}/{} is not labelled {CREDENTIALS_LABEL}={CREDENTIALS_LABEL_VALUE}; the operator reads only Secrets labelled as cloud credentials",
                    location.namespace, location.name
                )));
            }
        };
        let key = read_key(&secret, &location.key).ok_or_else(|| {
            Error::CredentialsMissing(format!(
                "Secret {}/{} has no non-empty key {:?}",
                location.namespace, location.name, location.key
            ))
        })?;
        let account = self.account_for(key)?;
        let replaced = {
            let mut resolved = lock(&self.resolved);
            if resolved.forgets == forgets {
                resolved
                    .by_location
                    .insert(location.clone(), (Instant::now(), account.clone()));
            }
            resolved
                .replaced
                .remove(location)
                .filter(|old| *old != account.id)
                .filter(|old| !resolved.by_location.values().any(|(_, a)| a.id == *old))
        };
        if let Some(old) = replaced.filter(|old| !lock(&self.held).contains_key(old)) {
            self.retire(old);
        }
        Ok(account)
    }

    /// Retires account `id` now: its observers stop, and the next object resolving to its key
    /// gets a new account.
    fn retire(&self, id: AccountId) {
        lock(&self.unused_before).remove(&id);
        if let Some(account) = lock(&self.by_id).remove(&id) {
            account.retire();
            lock(&self.retired_since).push(id);
        }
    }

    /// The account for an API key, creating its client on first use.
    pub fn account_for(&self, key: ApiKey) -> Result<Arc<Account>, Error> {
        let id = AccountId::of(&key);
        let mut accounts = lock(&self.by_id);
        if let Some(account) = accounts.get(&id) {
            return Ok(account.clone());
        }
        let mut config = ClientConfig::new(self.settings.base_url.clone(), key);
        config.timeout = self.settings.timeout;
        config.rate_limit = self.settings.rate_limit;
        let mut client = CloudClient::new(config)?;
        if let Some(observer) = &self.settings.observer {
            client = client.with_observer(observer.clone());
        }
        let account = Account::new(id, client, self.settings.catalog_ttl);
        accounts.insert(id, account.clone());
        Ok(account)
    }

    /// The account the Secret at `location` last resolved to, without reading it again.
    pub fn resolved(&self, location: &SecretLocation) -> Option<Arc<Account>> {
        lock(&self.resolved)
            .by_location
            .get(location)
            .map(|(_, account)| account.clone())
    }

    /// Every account seen so far.
    pub fn all(&self) -> Vec<Arc<Account>> {
        lock(&self.by_id).values().cloned().collect()
    }
}

/// The accounts to retire (known, unused now and at the previous pass) and those unused now
/// for the first time, for the next pass.
fn to_retire(
    known: &HashSet<AccountId>,
    in_use: &HashSet<AccountId>,
    unused_before: &HashSet<AccountId>,
) -> (Vec<AccountId>, HashSet<AccountId>) {
    let (retire, unused): (Vec<AccountId>, Vec<AccountId>) = known
        .difference(in_use)
        .copied()
        .partition(|id| unused_before.contains(id));
    (retire, unused.into_iter().collect())
}

fn read_key(secret: &Secret, key: &str) -> Option<ApiKey> {
    let from_data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    let from_string = || {
        secret
            .string_data
            .as_ref()
            .and_then(|d| d.get(key))
            .cloned()
    };
    let value = from_data.or_else(from_string)?;
    let value = value.trim();
    (!value.is_empty()).then(|| ApiKey::new(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    #[test]
    fn an_account_is_retired_after_two_passes_in_a_row_without_users() {
        let id = |key: &str| AccountId::of(&ApiKey::new(key));
        let set = |keys: &[&str]| keys.iter().map(|k| id(k)).collect::<HashSet<_>>();
        // (known, in use, unused at the previous pass) -> (retired, unused for the next pass)
        type Keys = &'static [&'static str];
        let cases: [(Keys, Keys, Keys, Keys, Keys); 5] = [
            // Used: kept.
            (&["a"], &["a"], &[], &[], &[]),
            // Unused once: only noted.
            (&["a", "b"], &["a"], &[], &[], &["b"]),
            // Unused twice in a row: retired.
            (&["a", "b"], &["a"], &["b"], &["b"], &[]),
            // Used again between the two passes: the count starts over.
            (&["a", "b"], &["a", "b"], &["b"], &[], &[]),
            // Unused before, gone since (retired, or never resolved again): nothing to do.
            (&["a"], &["a"], &["c"], &[], &[]),
        ];
        for (known, in_use, before, retired, unused) in cases {
            let (got_retired, got_unused) = to_retire(&set(known), &set(in_use), &set(before));
            assert_eq!(
                got_retired.into_iter().collect::<HashSet<_>>(),
                set(retired),
                "{known:?} {in_use:?} {before:?}"
            );
            assert_eq!(got_unused, set(unused), "{known:?} {in_use:?} {before:?}");
        }
    }

    #[test]
    fn keys_are_read_trimmed_and_empty_ones_refused() {
        let secret = |value: &[u8]| Secret {
            data: Some(BTreeMap::from([(
                "apiKey".to_string(),
                ByteString(value.to_vec()),
            )])),
            ..Default::default()
        };
        assert_eq!(
            read_key(&secret(b"abc\n"), "apiKey").map(|k| k.expose_secret().to_string()),
            Some("abc".into())
        );
        assert!(read_key(&secret(b"  "), "apiKey").is_none());
        assert!(read_key(&secret(b"abc"), "other").is_none());
    }

    /// Two keys with the same 32-bit FNV-1a hash (0x3caa019a), the hash accounts were once
    /// keyed by: they are two accounts all the same.
    const COLLIDING_KEYS: [&str; 2] = ["team-key-637694", "team-key-1397450"];

    #[test]
    fn different_keys_are_different_accounts_and_labels_do_not_contain_the_key() {
        let [a, b] = COLLIDING_KEYS.map(|key| AccountId::of(&ApiKey::new(key)));
        assert_ne!(a, b);
        assert_eq!(a, AccountId::of(&ApiKey::new(COLLIDING_KEYS[0])));
        for (id, key) in [(a, COLLIDING_KEYS[0]), (b, COLLIDING_KEYS[1])] {
            let label = id.label();
            assert_eq!(label.len(), AccountId::LABEL_LEN);
            assert!(label.chars().all(|c| c.is_ascii_hexdigit()), "{label}");
            for shown in [label, format!("{id}"), format!("{id:?}")] {
                assert!(!shown.contains(key) && !shown.contains("team"), "{shown}");
            }
        }
        // SHA-256 of "team-key-637694", as a check of the digest itself.
        assert_eq!(a.label(), "223c685711c5");
    }

    /// Reconciles that want the price list while it is being read share that read: under
    /// the rate limit, a read can wait seconds, and each reconcile in the meantime would
    /// otherwise send one of its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_of_an_expired_price_list_share_one_read() {
        let simulator = gpucloud_simulator::Simulator::start(
            gpucloud_simulator::SimulatorConfig::default(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let key = ApiKey::new(simulator.api_key());
        let client = CloudClient::new(ClientConfig::new(simulator.base_url(), key.clone()));
        let account = Account::new(
            AccountId::of(&key),
            client.unwrap(),
            Duration::from_secs(60),
        );
        let reads = (0..20).map(|_| account.pricing());
        for read in futures::future::join_all(reads).await {
            read.unwrap();
        }
        assert_eq!(simulator.call_counts().get("GetPricing"), Some(&1));
    }

    #[test]
    fn a_billing_list_is_trusted_a_ttl_per_page_it_took() {
        let ttl = Duration::from_secs(60);
        // pages -> trusted for
        let cases = [(0, 60), (1, 60), (2, 120), (94, 5_640)];
        for (pages, seconds) in cases {
            assert_eq!(
                trusted_for(pages, ttl),
                Duration::from_secs(seconds),
                "{pages}"
            );
        }
        assert_eq!(trusted_for(u64::MAX, ttl), ttl.saturating_mul(u32::MAX));
    }

    #[tokio::test]
    async fn the_paged_volume_billing_is_read_again_after_a_ttl_per_page() {
        let simulator = gpucloud_simulator::Simulator::start(
            gpucloud_simulator::SimulatorConfig::default(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let key = ApiKey::new(simulator.api_key());
        let client = CloudClient::new(ClientConfig {
            rate_limit: None,
            ..ClientConfig::new(simulator.base_url(), key.clone())
        })
        .unwrap();
        // 150 volumes: two pages of 100.
        for i in 0..150 {
            client
                .create_volume(&gpucloud_cloud::model::CreateVolumeRequest::new(
                    format!("data-{i}"),
                    10,
                    "eu-west-1",
                ))
                .await
                .unwrap();
        }
        let ttl = Duration::from_secs(1);
        let account = Account::new(AccountId::of(&key), client, ttl);
        let lists = [BillingList::Instances, BillingList::Volumes];
        let calls = |operation: &str| simulator.call_counts().get(operation).copied();
        let billing = account.billing(&lists).await.unwrap();
        // Both lists were read by now: their ages are counted from here.
        let read = Instant::now();
        assert_eq!(billing.charges_of("data-149").len(), 1);
        assert_eq!(
            (calls("GetInstanceBilling"), calls("GetVolumeBilling")),
            (Some(1), Some(2))
        );
        // After one TTL the one-page list is read again, the two-page one is not.
        tokio::time::sleep(Duration::from_millis(1_300).saturating_sub(read.elapsed())).await;
        account.billing(&lists).await.unwrap();
        assert_eq!(
            (calls("GetInstanceBilling"), calls("GetVolumeBilling")),
            (Some(2), Some(2))
        );
        // After two, both are.
        tokio::time::sleep(Duration::from_millis(2_600).saturating_sub(read.elapsed())).await;
        account.billing(&lists).await.unwrap();
        assert_eq!(
            (calls("GetInstanceBilling"), calls("GetVolumeBilling")),
            (Some(3), Some(4))
        );
    }

    /// A charge of `cost` for `name`, billed since the start of November.
    fn billed(name: &str, cost: f64) -> Charge {
        Charge::read(name, "2026-11-01T00:00:00Z", None, cost).unwrap()
    }

    /// The costs of the charges `billing` holds for `name`, in order.
    fn costs(billing: &Billing, name: &str) -> Vec<f64> {
        let mut costs: Vec<f64> = billing
            .charges_of(name)
            .iter()
            .map(|c| c.total_cost)
            .collect();
        costs.sort_by(f64::total_cmp);
        costs
    }

    #[test]
    fn the_billing_finds_every_charge_of_a_name_in_every_list() {
        let mut cache = BillingCache::default();
        let at = Instant::now();
        let lists = [
            (
                BillingList::Instances,
                // A machine deleted and made again under its name is billed twice.
                vec![
                    billed("vm-a", 1.0),
                    billed("shared", 2.0),
                    billed("vm-a", 3.0),
                ],
            ),
            (BillingList::Snapshots, vec![]),
            (
                BillingList::Volumes,
                vec![
                    billed("shared", 4.0),
                    billed("vol-z", 5.0),
                    billed("vm-a-disk", 6.0),
                ],
            ),
        ];
        for (list, charges) in lists {
            cache.store(list, at, 1, charges, "USD".into());
        }
        let billing = cache.merged();
        assert_eq!(billing.currency, "USD");
        // name -> its charges' costs, and their total
        let cases: [(&str, &[f64], Option<f64>); 6] = [
            ("vm-a", &[1.0, 3.0], Some(4.0)),
            ("shared", &[2.0, 4.0], Some(6.0)),
            ("vol-z", &[5.0], Some(5.0)),
            ("vm-a-disk", &[6.0], Some(6.0)),
            // Names that sort between, before and after the billed ones.
            ("vm-", &[], None),
            ("zzz", &[], None),
        ];
        for (name, want, total) in cases {
            assert_eq!(costs(&billing, name), want, "{name}");
            assert_eq!(billing.total_of(name), total, "{name}");
        }
        assert!(costs(&billing, "").is_empty());
    }

    #[test]
    fn a_billing_list_read_again_replaces_its_charges_only() {
        let mut cache = BillingCache::default();
        let at = Instant::now();
        let instances = vec![billed("vm-x", 1.0), billed("vm-y", 2.0)];
        cache.store(BillingList::Instances, at, 1, instances, "USD".into());
        let volumes = vec![billed("vm-x", 5.0)];
        cache.store(BillingList::Volumes, at, 1, volumes, "USD".into());
        let before = cache.merged();
        // Merged once per read: asked again without one, the same billing.
        assert!(Arc::ptr_eq(&before, &cache.merged()));

        let instances = vec![billed("vm-y", 3.0), billed("vm-z", 4.0)];
        cache.store(BillingList::Instances, at, 1, instances, "EUR".into());
        let after = cache.merged();
        // name -> costs before the instance list was read again, and after
        let cases: [(&str, &[f64], &[f64]); 3] = [
            ("vm-x", &[1.0, 5.0], &[5.0]),
            ("vm-y", &[2.0], &[3.0]),
            ("vm-z", &[], &[4.0]),
        ];
        for (name, was, is) in cases {
            assert_eq!(costs(&before, name), was, "{name}");
            assert_eq!(costs(&after, name), is, "{name}");
        }
        assert_eq!(
            (before.currency.as_str(), after.currency.as_str()),
            ("USD", "EUR")
        );
        // Reads are kept with their age and pages, each list apart.
        assert!(cache.is_fresh(BillingList::Instances, Duration::from_secs(60)));
        assert!(!cache.is_fresh(BillingList::Snapshots, Duration::from_secs(60)));
    }

    #[tokio::test]
    async fn keys_that_collide_in_a_short_hash_get_clients_of_their_own() {
        let settings = CloudSettings {
            base_url: "http://127.0.0.1:9".into(),
            timeout: Duration::from_secs(1),
            rate_limit: None,
            catalog_ttl: Duration::from_secs(60),
            observer: None,
        };
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let accounts = Accounts::new(settings, client, None);
        let [a, b] = COLLIDING_KEYS.map(|key| accounts.account_for(ApiKey::new(key)).unwrap());
        assert!(!Arc::ptr_eq(&a, &b));
        assert_ne!(a.id, b.id);
        assert_eq!(accounts.all().len(), 2);
        let again = accounts
            .account_for(ApiKey::new(COLLIDING_KEYS[0]))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &again));
    }
}
