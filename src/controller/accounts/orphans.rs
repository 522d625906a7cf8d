//! The orphan sweeper: finds cloud resources the operator created that no object claims.
//!
//! A resource becomes an orphan when the operator created it and then lost track of it: a
//! crash between the create call and recording the id while the object was also deleted with
//! its finalizer removed by hand, a pending-create mark lost with a restored backup, an
//! object deleted while its finalizer was bypassed. Every `interval`, for every account the
//! operator uses, the sweeper lists every kind's resources, keeps those whose name carries the
//! operator's mark (`naming::carries_mark`), and drops those that any object claims:
//!
//! - by `status.externalId` or the `gpucloud.io/external-id` annotation (the cloud id);
//! - by `status.cloudName`, `status.pendingCreate.cloudName`, or the name the object's
//!   namespace, name and uid give (`naming::cloud_name`), which covers an object whose pending
//!   mark was lost between create and record.
//!
//! - by the record of resources left in the cloud on purpose: an object deleted with
//!   `deletionPolicy: Orphan` (or `ObserveOnly`) writes its id and cloud name into the ConfigMap
//!   [`RELEASED_CONFIGMAP`] in the operator's namespace before its finalizer goes, because the
//!   name of such a resource still carries the mark. Entries are pruned once the resource is
//!   gone from the cloud.
//!
//! What is left and older than `grace_period` (the cloud's creation time, or when the sweeper
//! first saw it if the cloud gives none) is reported: a warning log line per resource and one
//! Kubernetes Event per sweep regarding the summary object (the Lease named after the
//! operator, in its namespace). With `delete` set, those resources are deleted too (a volume
//! is detached and a firewall detached from every machine first, since the cloud refuses to
//! delete them while attached). Resources without the mark are never touched.
//!
//! The cloud is listed before the objects, so a resource whose object was created during the
//! sweep is still claimed; what is then left unclaimed is listed again, and only what that
//! later list still shows is an orphan (a resource whose object finished its deletion during
//! the sweep is gone by then). A sweep that cannot list every kind's objects reports and
//! deletes nothing.

use crate::accounts::account::{Account, AccountId, Accounts};
use crate::accounts::observer::{CloudRecord, CloudResource};
use crate::accounts::released;
use crate::flow::kind::ManagedKind;
use crate::flow::naming;
use crate::kinds::registry::{KindFn, map_kinds};
use crate::lock;
use crate::runtime::decode::Decoded;
use crate::runtime::events::{EventPublisher, EventType};
use futures::future::BoxFuture;
use gpucloud_api::CloudStatus;
use gpucloud_api::EXTERNAL_ID_ANNOTATION;
use gpucloud_cloud::CloudClient;
use gpucloud_cloud::Error as CloudError;
use gpucloud_telemetry::Metrics;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Event reason of a sweep that found orphans.
pub const REASON_FOUND: &str = "OrphansFound";
/// Event reason of a sweep that deleted orphans.
pub const REASON_DELETED: &str = "OrphansDeleted";
/// Event reason of a sweep that found duplicates (reported here, deleted by their object's
/// reconcile after its grace period).
pub const REASON_DUPLICATES: &str = "DuplicatesFound";
/// Event reason of a sweep whose deletes failed (retried on the next sweep).
pub const REASON_DELETE_FAILED: &str = "OrphanDeleteFailed";

pub use crate::accounts::released::RELEASED_CONFIGMAP;

/// Longest list of resources an Event names; the rest are counted.
const EVENT_LIST_LIMIT: usize = 20;

/// Settings of the sweeper (`--orphan-sweep-interval`, `--orphan-grace-period`,
/// `--delete-orphans`).
#[derive(Debug, Clone)]
pub struct OrphanSweepSettings {
    /// Time between sweeps; zero disables the sweeper.
    pub interval: Duration,
    /// How old an unclaimed resource must be before it counts as an orphan.
    pub grace_period: Duration,
    /// Delete orphans, not only report them.
    pub delete: bool,
    /// Namespace of the summary object the Events regard (the operator's namespace).
    pub summary_namespace: String,
    /// Name of the summary object: the operator's Lease.
    pub summary_name: String,
}

impl OrphanSweepSettings {
    /// No sweeps.
    pub fn disabled() -> Self {
        OrphanSweepSettings {
            interval: Duration::ZERO,
            grace_period: Duration::from_secs(15 * 60),
            delete: false,
            summary_namespace: "gpucloud-system".into(),
            summary_name: "gpucloud-operator".into(),
        }
    }

    pub fn is_enabled(&self) -> bool {
        !self.interval.is_zero()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The objects of a kind could not be listed: without every claim, nothing is reported.
    #[error("listing {kind} objects: {}", crate::flow::error::KubeMessage(.source))]
    ListObjects {
        kind: String,
        #[source]
        source: kube::Error,
    },
    /// An object does not decode as its kind: what it claims is unknown, so nothing is
    /// reported.
    #[error("{kind} {namespace}/{name} cannot be read ({reason}): its claims are unknown")]
    UnreadableObject {
        kind: String,
        namespace: String,
        name: String,
        reason: String,
    },
    /// A kind's resources could not be listed in an account.
    #[error("listing {kind} resources of account {account}: {source}")]
    ListCloud {
        kind: &'static str,
        account: AccountId,
        #[source]
        source: CloudError,
    },
}

/// One managed kind as the sweeper sees it, derived from the kind registry: every kind the
/// operator manages is listed in the cloud and claimed by its objects, so no kind's live
/// resources can look like orphans.
struct SweptKind {
    /// The objects' kind (`GpuInstance`).
    kind: String,
    /// The cloud resource's label (`instance`).
    resource: &'static str,
    list: fn(CloudClient) -> BoxFuture<'static, Result<Vec<Candidate>, CloudError>>,
    claims: fn(kube::Client, Vec<String>) -> BoxFuture<'static, Result<Claims, Error>>,
}

struct Swept;

impl KindFn<SweptKind> for Swept {
    fn call<K: ManagedKind>(&self) -> SweptKind {
        SweptKind {
            kind: K::kind(&()).into_owned(),
            resource: <K::Cloud as CloudResource>::LABEL,
            list: |client| Box::pin(candidates::<K::Cloud>(client)),
            claims: |client, namespaces| Box::pin(claims_of::<K>(client, namespaces)),
        }
    }
}

/// The kinds swept, in deletion order (the registry's): machines before what they use, so a
/// volume held by an orphaned machine is free by the time it comes up (or on the next sweep).
fn swept() -> Vec<SweptKind> {
    map_kinds(Swept)
}

/// The kinds the sweeper lists and claims, with their resources' labels.
pub fn swept_kinds() -> Vec<(String, &'static str)> {
    swept().into_iter().map(|k| (k.kind, k.resource)).collect()
}

fn is_going(state: &str) -> bool {
    state.eq_ignore_ascii_case("deleting") || state.eq_ignore_ascii_case("deleted")
}

/// Deletes one listed resource (`CloudResource::delete`, which releases what the cloud
/// would refuse the delete for).
type DeleteFn =
    Arc<dyn Fn(CloudClient) -> BoxFuture<'static, Result<(), CloudError>> + Send + Sync>;

/// A marked resource as listed.
#[derive(Clone)]
struct Candidate {
    kind: &'static str,
    id: String,
    name: String,
    created_at: Option<Timestamp>,
    delete: DeleteFn,
}

/// Deletes each orphan of `report` with its account's client, recording which went and which
/// the cloud refused (retried on the next sweep).
async fn delete_orphans(
    listed: &[(Arc<Account>, Vec<Candidate>)],
    deletes: &HashMap<String, DeleteFn>,
    report: &mut SweepReport,
) {
    for orphan in &report.orphans {
        let Some((account, _)) = listed.iter().find(|(a, _)| a.id == orphan.account) else {
            continue;
        };
        let Some(delete) = deletes.get(&orphan.id) else {
            continue;
        };
        match delete(account.client.clone()).await {
            Ok(()) => {
                tracing::info!(kind = %orphan.kind, id = %orphan.id, "orphan deleted");
                report.deleted.push(orphan.clone());
            }
            Err(error) => {
                tracing::warn!(kind = %orphan.kind, id = %orphan.id, %error, "orphan delete failed");
                report
                    .delete_failed
                    .push((orphan.clone(), error.to_string()));
            }
        }
    }
}

/// The marked resources of one kind in an account.
async fn candidates<C: CloudResource>(client: CloudClient) -> Result<Vec<Candidate>, CloudError> {
    Ok(C::list(client)
        .await?
        .into_iter()
        // A resource already being deleted is on its way out, not an orphan.
        .filter(|r| naming::carries_mark(r.name()) && !is_going(&r.state()))
        .map(|r| Candidate {
            kind: C::LABEL,
            id: r.id().to_string(),
            name: r.name().to_string(),
            created_at: r.created_at(),
            delete: Arc::new(move |client| Box::pin(C::delete(client, r.clone()))),
        })
        .collect())
}

/// The marked resources of `kind` in `account`; a failed list is logged and recorded in
/// `report`, and gives none.
async fn list_kind(
    kind: &SweptKind,
    account: &Account,
    report: &mut SweepReport,
) -> Option<Vec<Candidate>> {
    match (kind.list)(account.client.clone()).await {
        Ok(candidates) => Some(candidates),
        Err(source) => {
            let error = Error::ListCloud {
                kind: kind.resource,
                account: account.id,
                source,
            };
            tracing::warn!(%error, "orphan sweep: list failed");
            report.list_errors.push(error.to_string());
            None
        }
    }
}

/// A cloud resource with the operator's mark that no object claims, past the grace period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The account (shown as its label, never the key).
    pub account: AccountId,
    /// The resource's label (`instance`, `ssh-key`).
    pub kind: &'static str,
    pub id: String,
    pub name: String,
    /// Since the cloud's creation time, or since the sweeper first saw it.
    pub age: Duration,
}

impl Orphan {
    /// The listed `candidate` of `account`, `age` old.
    fn of(account: AccountId, candidate: &Candidate, age: Duration) -> Self {
        Orphan {
            account,
            kind: candidate.kind,
            id: candidate.id.clone(),
            name: candidate.name.clone(),
            age,
        }
    }
}

impl fmt::Display for Orphan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} ({}, {}s old)",
            self.kind,
            self.id,
            self.name,
            self.age.as_secs()
        )
    }
}

/// What one sweep found and did.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// Accounts swept.
    pub accounts: Vec<AccountId>,
    /// Every orphan found, deleted or not.
    pub orphans: Vec<Orphan>,
    /// Orphans deleted by this sweep (only with `delete`).
    pub deleted: Vec<Orphan>,
    /// Duplicates: resources claimed only by a cloud name whose object recorded another
    /// resource under that name (a create carried out after the client gave up). Not orphans:
    /// their object's reconcile reports and removes them.
    pub duplicates: Vec<Orphan>,
    /// Orphans whose delete failed, with the cloud's answer; retried on the next sweep.
    pub delete_failed: Vec<(Orphan, String)>,
    /// Accounts or kinds that could not be listed; their resources were not considered.
    pub list_errors: Vec<String>,
}

/// What objects claim: cloud ids and cloud names, and what was released on purpose (as
/// keys of [`RELEASED_CONFIGMAP`]).
#[derive(Debug, Default)]
struct Claims {
    ids: HashSet<String>,
    names: HashSet<String>,
    /// Keys of the released record, with when each was written.
    released: HashMap<String, Option<Timestamp>>,
}

impl Claims {
    fn claims(&self, candidate: &Candidate) -> bool {
        self.ids.contains(&candidate.id)
            || self.names.contains(&candidate.name)
            || self.released.contains_key(&released::id_key(&candidate.id))
            || self
                .released
                .contains_key(&released::name_key(&candidate.name))
    }

    fn merge(&mut self, other: Claims) {
        self.ids.extend(other.ids);
        self.names.extend(other.names);
        self.released.extend(other.released);
    }

    fn add<K: ManagedKind>(&mut self, object: &K) {
        let status = object.cloud_status();
        self.ids.extend(status.external_id);
        self.names.extend(status.cloud_name);
        self.names
            .extend(status.pending_create.map(|p| p.cloud_name));
        if let Some(id) = object.annotations().get(EXTERNAL_ID_ANNOTATION) {
            self.ids.insert(id.clone());
        }
        let namespace = object.namespace().unwrap_or_default();
        self.names.insert(naming::cloud_name(
            &namespace,
            &object.name_any(),
            object.uid().as_deref().unwrap_or_default(),
        ));
    }
}

/// Records that `object`'s cloud resource is left in the cloud on purpose, so the sweeper never
/// counts it as an orphan: the id `status` records (checked by the caller) and every name the
/// object may carry.
pub async fn record_released<K: ManagedKind>(
    client: &kube::Client,
    operator_namespace: &str,
    object: &K,
    status: &CloudStatus,
) -> Result<(), kube::Error> {
    let namespace = object.namespace().unwrap_or_default();
    let mut keys: Vec<String> = Vec::new();
    // What the status records, checked by the caller: an `external-id` annotation names
    // what the object asked for, not what it owns, and is not recorded.
    keys.extend(status.external_id.as_deref().map(released::id_key));
    keys.extend(status.cloud_name.as_deref().map(released::name_key));
    keys.extend(
        status
            .pending_create
            .as_ref()
            .map(|p| released::name_key(&p.cloud_name)),
    );
    keys.push(released::name_key(&naming::cloud_name(
        &namespace,
        &object.name_any(),
        object.uid().as_deref().unwrap_or_default(),
    )));
    let value = released::value(&K::kind(&()), &namespace, &object.name_any());
    released::write(client, operator_namespace, keys, &value).await
}

/// Sweeps the accounts of an operator.
pub struct OrphanSweeper {
    client: kube::Client,
    accounts: Arc<Accounts>,
    /// Namespaces whose objects claim resources; empty means the whole cluster.
    namespaces: Vec<String>,
    settings: OrphanSweepSettings,
    events: Arc<EventPublisher>,
    /// When each unclaimed resource without a creation time was first seen, by
    /// account and `kind/id`; forgotten once it is claimed or gone.
    first_seen: Mutex<HashMap<(AccountId, String), Timestamp>>,
}

impl OrphanSweeper {
    pub fn new(
        client: kube::Client,
        accounts: Arc<Accounts>,
        namespaces: Vec<String>,
        settings: OrphanSweepSettings,
        events: Arc<EventPublisher>,
    ) -> Self {
        OrphanSweeper {
            client,
            accounts,
            namespaces,
            settings,
            events,
            first_seen: Mutex::new(HashMap::new()),
        }
    }

    /// Sweeps every `interval` until `shutdown` resolves, publishing each sweep's orphans by
    /// resource kind in `metrics` (`gpucloud_orphaned_resources`). Nothing when disabled.
    pub async fn run(self, metrics: Arc<Metrics>, shutdown: BoxFuture<'static, ()>) {
        if !self.settings.is_enabled() {
            return;
        }
        tracing::info!(
            interval_s = self.settings.interval.as_secs_f64(),
            grace_s = self.settings.grace_period.as_secs_f64(),
            delete = self.settings.delete,
            "orphan sweeper started"
        );
        let sweeps = async {
            loop {
                tokio::time::sleep(self.settings.interval).await;
                match self.sweep().await {
                    Ok(report) => metrics.set_orphans(swept().iter().map(|kind| {
                        let found = report
                            .orphans
                            .iter()
                            .filter(|o| o.kind == kind.resource)
                            .count();
                        (kind.resource, i64::try_from(found).unwrap_or(i64::MAX))
                    })),
                    Err(error) => tracing::warn!(%error, "orphan sweep skipped"),
                }
            }
        };
        tokio::select! {
            _ = shutdown => {}
            _ = sweeps => {}
        }
    }

    /// One sweep over every account: list, match against claims, report, and delete when set.
    pub async fn sweep(&self) -> Result<SweepReport, Error> {
        let mut report = SweepReport::default();
        let listed = self.list_accounts(&mut report).await;
        // Objects after the cloud: an object created since the lists is still counted.
        let claims = self.claims().await?;
        let (seen_keys, deletes) = self.match_claims(&listed, &claims, &mut report);
        self.confirm(&listed, &mut report).await;
        lock(&self.first_seen)
            // After a failed list, resources not listed may still exist: keep their times.
            .retain(|key, _| seen_keys.contains(key) || !report.list_errors.is_empty());
        if report.list_errors.is_empty() {
            self.prune_released(&claims, &listed).await;
        }
        self.log_findings(&report);
        if self.settings.delete {
            delete_orphans(&listed, &deletes, &mut report).await;
        }
        self.publish(&report).await;
        Ok(report)
    }

    /// The marked resources of every account to sweep, by account. A kind that could not be
    /// listed is left for the next sweep (its error in `report`); the others are still swept.
    async fn list_accounts(&self, report: &mut SweepReport) -> Vec<(Arc<Account>, Vec<Candidate>)> {
        let mut listed = Vec::new();
        for account in self.accounts_to_sweep().await {
            report.accounts.push(account.id);
            let mut found = Vec::new();
            for kind in swept() {
                if let Some(candidates) = list_kind(&kind, &account, report).await {
                    found.extend(candidates);
                }
            }
            listed.push((account, found));
        }
        listed
    }

    /// Sorts the listed resources against the claims: those claimed only by a cloud name that
    /// another resource's id already claims are duplicates; those unclaimed and older than the
    /// grace period are orphans (suspects, until `confirm`). Returns the keys of the unclaimed
    /// ones seen (whose first-seen times are kept) and how to delete each orphan, by id.
    fn match_claims(
        &self,
        listed: &[(Arc<Account>, Vec<Candidate>)],
        claims: &Claims,
        report: &mut SweepReport,
    ) -> (HashSet<(AccountId, String)>, HashMap<String, DeleteFn>) {
        let now = Timestamp::now();
        let mut seen_keys = HashSet::new();
        let mut deletes: HashMap<String, DeleteFn> = HashMap::new();
        for (account, candidates) in listed {
            // Names under which some resource is claimed by its id.
            let recorded_names: HashSet<&str> = candidates
                .iter()
                .filter(|c| claims.ids.contains(&c.id))
                .map(|c| c.name.as_str())
                .collect();
            for candidate in candidates {
                if claims.claims(candidate) {
                    if !claims.ids.contains(&candidate.id)
                        && recorded_names.contains(candidate.name.as_str())
                    {
                        let age = candidate.created_at.map_or(Duration::ZERO, |created| {
                            Duration::try_from(now.duration_since(created))
                                .unwrap_or(Duration::ZERO)
                        });
                        report
                            .duplicates
                            .push(Orphan::of(account.id, candidate, age));
                    }
                    continue;
                }
                let key = (account.id, format!("{}/{}", candidate.kind, candidate.id));
                let since = match candidate.created_at {
                    Some(created) => created,
                    None => *lock(&self.first_seen).entry(key.clone()).or_insert(now),
                };
                seen_keys.insert(key);
                let age = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
                if age < self.settings.grace_period {
                    continue;
                }
                deletes.insert(candidate.id.clone(), candidate.delete.clone());
                report.orphans.push(Orphan::of(account.id, candidate, age));
            }
        }
        (seen_keys, deletes)
    }

    /// A warning log line per orphan and per duplicate.
    fn log_findings(&self, report: &SweepReport) {
        for orphan in &report.orphans {
            tracing::warn!(
                account = %orphan.account,
                kind = %orphan.kind,
                id = %orphan.id,
                name = %orphan.name,
                age_s = orphan.age.as_secs(),
                delete = self.settings.delete,
                "orphaned cloud resource: carries the operator's mark and no object claims it"
            );
        }
        for duplicate in &report.duplicates {
            tracing::warn!(
                account = %duplicate.account,
                kind = %duplicate.kind,
                id = %duplicate.id,
                name = %duplicate.name,
                "duplicate cloud resource: carries an object's cloud name while the object manages another"
            );
        }
    }

    /// Keeps of `report.orphans` those that a list sent after the claims were read still
    /// shows, not on their way out. The first lists come before the objects are read, so that
    /// an object made meanwhile still claims its resource; but an object whose deletion ended
    /// meanwhile (at 100,000 objects the lists take minutes) claims nothing any more while the
    /// earlier list still shows its resource: one list is no proof of an orphan. Only the
    /// kinds with a suspect are listed again; one that cannot be confirms none of its own.
    async fn confirm(&self, listed: &[(Arc<Account>, Vec<Candidate>)], report: &mut SweepReport) {
        let mut still_listed: HashSet<(AccountId, &'static str, String)> = HashSet::new();
        for (account, _) in listed {
            for kind in swept() {
                let suspected = report
                    .orphans
                    .iter()
                    .any(|o| o.account == account.id && o.kind == kind.resource);
                if !suspected {
                    continue;
                }
                if let Some(candidates) = list_kind(&kind, account, report).await {
                    still_listed.extend(candidates.into_iter().map(|c| (account.id, c.kind, c.id)));
                }
            }
        }
        report
            .orphans
            .retain(|o| still_listed.contains(&(o.account, o.kind, o.id.clone())));
    }

    /// The accounts in use, plus the default account when one is configured (so resources
    /// leaked before a restart are found even when no object has resolved it yet).
    async fn accounts_to_sweep(&self) -> Vec<Arc<Account>> {
        let mut accounts = self.accounts.all();
        match self
            .accounts
            .resolve(&self.settings.summary_namespace, None)
            .await
        {
            Ok(default) => {
                if !accounts.iter().any(|a| a.id == default.id) {
                    accounts.push(default);
                }
            }
            Err(error) => {
                tracing::debug!(%error, "orphan sweep: no default account");
            }
        }
        accounts.sort_by_key(|a| a.id);
        accounts
    }

    async fn claims(&self) -> Result<Claims, Error> {
        let mut claims = Claims::default();
        for kind in swept() {
            claims.merge((kind.claims)(self.client.clone(), self.namespaces.clone()).await?);
        }
        let api: Api<ConfigMap> =
            Api::namespaced(self.client.clone(), &self.settings.summary_namespace);
        let released =
            api.get_opt(RELEASED_CONFIGMAP)
                .await
                .map_err(|source| Error::ListObjects {
                    kind: "ConfigMap".into(),
                    source,
                })?;
        for (key, value) in released.and_then(|m| m.data).unwrap_or_default() {
            claims.released.insert(key, released::written_at(&value));
        }
        Ok(claims)
    }

    /// Drops entries of the released record whose resource no longer exists in any account
    /// (only after a sweep that listed everything, and only entries older than the grace
    /// period, so a resource still on its way into the lists keeps its entry).
    async fn prune_released(&self, claims: &Claims, listed: &[(Arc<Account>, Vec<Candidate>)]) {
        let mut live: HashSet<String> = HashSet::new();
        for (_, candidates) in listed {
            for candidate in candidates {
                live.insert(released::id_key(&candidate.id));
                live.insert(released::name_key(&candidate.name));
            }
        }
        let now = Timestamp::now();
        let stale: BTreeMap<String, serde_json::Value> = claims
            .released
            .iter()
            .filter(|(key, at)| {
                !live.contains(*key)
                    && at.is_some_and(|at| {
                        Duration::try_from(now.duration_since(at)).unwrap_or(Duration::ZERO)
                            >= self.settings.grace_period
                    })
            })
            .map(|(key, _)| (key.clone(), serde_json::Value::Null))
            .collect();
        if stale.is_empty() {
            return;
        }
        let api: Api<ConfigMap> =
            Api::namespaced(self.client.clone(), &self.settings.summary_namespace);
        let patch = serde_json::json!({ "data": stale });
        if let Err(error) = api
            .patch(
                RELEASED_CONFIGMAP,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::debug!(%error, "orphan sweep: released record not pruned");
        }
    }

    /// One Event per sweep with findings, regarding the summary object.
    async fn publish(&self, report: &SweepReport) {
        let regarding = ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            namespace: Some(self.settings.summary_namespace.clone()),
            name: Some(self.settings.summary_name.clone()),
            ..ObjectReference::default()
        };
        let mut events = Vec::new();
        if !report.orphans.is_empty() {
            let action = if self.settings.delete {
                "deleting them"
            } else {
                "report only; start with --delete-orphans to delete them"
            };
            events.push((
                EventType::Warning,
                REASON_FOUND,
                format!(
                    "{} orphaned cloud resources ({action}): {}",
                    report.orphans.len(),
                    list(report.orphans.iter())
                ),
            ));
        }
        if !report.deleted.is_empty() {
            events.push((
                EventType::Normal,
                REASON_DELETED,
                format!(
                    "deleted {} orphaned cloud resources: {}",
                    report.deleted.len(),
                    list(report.deleted.iter())
                ),
            ));
        }
        if !report.duplicates.is_empty() {
            events.push((
                EventType::Warning,
                REASON_DUPLICATES,
                format!(
                    "{} duplicate cloud resources (each object's reconcile removes its own after the grace period): {}",
                    report.duplicates.len(),
                    list(report.duplicates.iter())
                ),
            ));
        }
        if !report.delete_failed.is_empty() {
            events.push((
                EventType::Warning,
                REASON_DELETE_FAILED,
                format!(
                    "{} orphan deletes failed (retried next sweep): {}",
                    report.delete_failed.len(),
                    list(report.delete_failed.iter().map(|(o, _)| o))
                ),
            ));
        }
        for (type_, reason, note) in events {
            let event = crate::runtime::events::event(type_, reason, &note, "SweepOrphans");
            if let Err(error) = self.events.publish(&event, &regarding).await {
                tracing::debug!(%error, "orphan event not published");
            }
        }
    }
}

/// What the objects of kind `K` in `namespaces` (empty: the whole cluster) claim. Read a page
/// at a time and without their field ownership records (`decode.rs`), as the controllers read
/// them; an object that does not decode as `K` may claim anything, so none is read then.
async fn claims_of<K: ManagedKind>(
    client: kube::Client,
    namespaces: Vec<String>,
) -> Result<Claims, Error> {
    let apis: Vec<Api<Decoded<K>>> = if namespaces.is_empty() {
        vec![Api::all(client)]
    } else {
        namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    };
    let mut claims = Claims::default();
    for api in apis {
        let mut unreadable = None;
        crate::runtime::pages::for_each_page(&api, |page| {
            for object in page {
                match object.0 {
                    Ok(object) => claims.add(&object),
                    Err(invalid) => {
                        unreadable.get_or_insert(invalid);
                    }
                }
            }
        })
        .await
        .map_err(|source| Error::ListObjects {
            kind: K::kind(&()).into_owned(),
            source,
        })?;
        if let Some(invalid) = unreadable {
            return Err(Error::UnreadableObject {
                kind: K::kind(&()).into_owned(),
                namespace: invalid.metadata.namespace.unwrap_or_default(),
                name: invalid.metadata.name.unwrap_or_default(),
                reason: invalid.error,
            });
        }
    }
    Ok(claims)
}

fn list<'a>(orphans: impl Iterator<Item = &'a Orphan>) -> String {
    let orphans: Vec<&Orphan> = orphans.collect();
    let mut text = orphans
        .iter()
        .take(EVENT_LIST_LIMIT)
        .map(|o| o.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if orphans.len() > EVENT_LIST_LIMIT {
        text.push_str(&format!(" and {} more", orphans.len() - EVENT_LIST_LIMIT));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: &str, name: &str) -> Candidate {
        Candidate {
            kind: "instance",
            id: id.into(),
            name: name.into(),
            created_at: None,
            delete: Arc::new(|_| Box::pin(async { Ok(()) })),
        }
    }

    #[test]
    fn claims_match_by_id_or_name() {
        let mut claims = Claims::default();
        claims.ids.insert("vm-1".into());
        claims.names.insert("gco-a-0123456789abcdef".into());
        assert!(claims.claims(&candidate("vm-1", "gco-other-0123456789abcdef")));
        assert!(claims.claims(&candidate("vm-9", "gco-a-0123456789abcdef")));
        assert!(!claims.claims(&candidate("vm-9", "gco-b-0123456789abcdef")));
    }
}
