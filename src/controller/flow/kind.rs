//! What a kind tells the shared reconcile flow about itself.

use crate::accounts::account::Account;
use crate::accounts::observer::CloudResource;
use crate::flow::conditions::Outcome;
use crate::flow::context::Context;
use crate::flow::error::Error;
use gpucloud_api::{CloudStatus, Managed};
use gpucloud_cloud::model::PricingBody;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::jiff::Timestamp;
use kube::core::object::HasStatus;
use kube::{CustomResourceExt, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

/// The cloud record type of a kind.
pub type Record<K> = <<K as ManagedKind>::Cloud as CloudResource>::Record;

/// What a watch or a read can follow: a namespaced kind decoded from the API server's JSON.
pub trait Watched:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + 'static
{
}

impl<T> Watched for T where
    T: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static
{
}

/// A namespaced kind whose every object owns one cloud resource.
///
/// The shared flow in `reconcile.rs` does everything that is the same for every kind
/// (credentials, pause, finalizer, deletion and management policies, adoption, idempotent
/// create, status and conditions, requeue); a kind supplies only what differs.
pub trait ManagedKind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Managed
    + CustomResourceExt
    + HasStatus<Status: PartialEq>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The kind's cloud resource: how it is listed, read and deleted.
    type Cloud: CloudResource;

    /// What to do when a resource the object recorded is gone from the cloud.
    const WHEN_GONE: WhenGone;

    /// Whether the cloud bills the kind's resources: its objects count against `Budget`s.
    const BILLED: bool = false;

    /// The cloud's billing list that holds the kind's resources, where there is one (the cloud
    /// has none for images).
    const BILLING_LIST: Option<crate::accounts::account::BillingList> = None;

    /// The status holding `common` plus the kind's own fields taken from `record` (kept from
    /// the current status when `record` is `None`).
    fn status_with(&self, common: CloudStatus, record: Option<&Record<Self>>) -> Self::Status;

    /// `status_with`'s status as of `now` (the operator's clock): a kind whose status shows
    /// something that depends on the time (a power schedule's next transition) sets it here.
    fn status_at(
        &self,
        common: CloudStatus,
        record: Option<&Record<Self>>,
        _now: Timestamp,
    ) -> Self::Status {
        self.status_with(common, record)
    }

    /// A copy of the object with `status_at`'s status.
    fn with_status(
        &self,
        common: CloudStatus,
        record: Option<&Record<Self>>,
        now: Timestamp,
    ) -> Self {
        let mut object = self.clone();
        *object.status_mut() = Some(self.status_at(common, record, now));
        object
    }

    /// The kinds this kind's objects refer to, with the field that does: the declaration the
    /// wake-ups (`run.rs`) and the reference table of docs/design.md derive from. Each entry
    /// is `(kind, field)`; [`ManagedKind::references`] gives an object's actual references.
    const REFERS_TO: &'static [(&'static str, &'static str)] = &[];

    /// Whether an object is looked at again when an object referring to it changes (a
    /// snapshot whose deletion waits for the machines restored from it and the images made
    /// from it).
    const FOLLOWS_REFERRERS: bool = false;

    /// The objects this one refers to, in its namespace, of the kinds in
    /// [`ManagedKind::REFERS_TO`]: a change of any of them looks at this object again.
    fn references(&self) -> Vec<Reference> {
        Vec::new()
    }

    /// What a create needs, gathered before the intent to create is recorded: referenced
    /// objects, validation, price limits. Nothing here creates anything billed, so a failure
    /// leaves no intent behind.
    type CreatePlan: Send + Sync;

    fn plan_create(
        &self,
        cx: &Context<Self>,
        account: &Account,
    ) -> impl Future<Output = Result<Self::CreatePlan, Error>> + Send;

    /// Records in the kind's own status fields what `plan` chose (where a machine goes), for
    /// the status write that records the create's intent: the choice is written before the
    /// create call, with the intent, in one version-checked write. Nothing by default.
    fn planned(&mut self, _plan: &Self::CreatePlan) {}

    /// Whether the first list that shows the resource `plan` creates tells all that
    /// [`ManagedKind::planned`] records: a first create's intent may then be written with the
    /// finalizer (as an annotation, which a patch of the main resource carries), rather than
    /// in a status write of its own. Yes by default, when `planned` records nothing.
    fn plan_shows_in_list(_plan: &Self::CreatePlan) -> bool {
        true
    }

    /// The cloud refused the create for want of stock (`409 INSUFFICIENT_STOCK`) at `at`:
    /// records the refusal in the kind's own status fields and says whether the create may be
    /// planned again at once (another placement is left to try). The intent is then cleared,
    /// since nothing was created. No by default: the refusal is reported like any other.
    fn refused_for_stock(&mut self, _at: Timestamp) -> bool {
        false
    }

    /// What the resource `plan` creates will cost per hour, in the account's currency, read
    /// from the price list (or the catalog) before the create: what a `Budget` reserves
    /// (`budget.rs`). `None` for a kind the cloud does not bill.
    fn planned_hourly_rate(
        _plan: &Self::CreatePlan,
        _account: &Account,
    ) -> impl Future<Output = Result<Option<f64>, Error>> + Send {
        async { Ok(None) }
    }

    /// Creates the cloud resource under `cloud_name` with one cloud call and returns it as the
    /// cloud answered.
    fn create(
        cx: &Context<Self>,
        account: &Account,
        plan: Self::CreatePlan,
        cloud_name: &str,
    ) -> impl Future<Output = Result<Record<Self>, Error>> + Send;

    /// What a plan reads besides the spec and the cloud's record (referenced objects' cloud
    /// ids, the catalog); `()` for a kind that needs nothing.
    type Resolved: Send + Sync;

    /// One step a plan asks for: a cloud call (or the write a settled resource implies, such
    /// as a connection Secret). `Infallible` for a kind that never changes its resource.
    type Action: Debug + Send + Sync;

    /// Reads what [`ManagedKind::plan`] needs. Changes nothing; an error waits or fails the
    /// reconcile before any call.
    fn resolve(
        &self,
        cx: &Context<Self>,
        account: &Account,
        record: &Record<Self>,
    ) -> impl Future<Output = Result<Self::Resolved, Error>> + Send;

    /// The next step toward the spec, and where the object stands once it is done; an error
    /// (a spec the cloud cannot match) is reported as the flow reports any. Pure: the kind's
    /// behaviour is tested from tables of (spec, record, resolved) without a cloud.
    fn plan(
        &self,
        record: &Record<Self>,
        resolved: Self::Resolved,
    ) -> Result<Plan<Self::Action>, Error>;

    /// Carries out one action. The shared flow calls it once per reconcile at most.
    fn execute(
        &self,
        cx: &Context<Self>,
        account: &Account,
        record: &Record<Self>,
        action: &Self::Action,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Records in the kind's own status fields what an executed action did (a reboot asked for
    /// by annotation), for the flow's status write. Nothing by default.
    fn executed(&mut self, _action: &Self::Action) {}

    /// A moment after `now` when the object must be looked at again whatever the cloud does
    /// (a power schedule's next start or stop): the reconcile's requeue is never later. Read
    /// from the object, so it holds across restarts: one timer per object, no polling.
    fn next_wake(&self, _now: Timestamp) -> Option<Timestamp> {
        None
    }

    /// What the object reports under `ObserveOnly`: the cloud's state, with nothing changed.
    fn observed(&self, record: &Record<Self>) -> Outcome;

    /// Deletes the resource. A resource already gone is success. `own` is the object whose
    /// deletion this is; `None` for a duplicate, or a resource made after its object's deletion
    /// had ended.
    fn delete(
        _cx: &Context<Self>,
        _own: Option<&Self>,
        account: &Account,
        record: &Record<Self>,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let deleted = Self::Cloud::delete(account.client.clone(), record.clone());
        async move { deleted.await.map_err(Error::from) }
    }

    /// Checked before the cloud resource is deleted: an error holds the deletion (and the
    /// finalizer) and is reported on the object until the check passes (a snapshot that an
    /// instance is still being restored from, or that images are made from). Nothing holds a
    /// deletion by default.
    fn hold_deletion(
        &self,
        _cx: &Context<Self>,
        _account: &Arc<Account>,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        async { Ok(()) }
    }

    /// Called once the cloud resource is gone, before the finalizer is released: what the
    /// object leaves behind on purpose is handed over (a final snapshot's object). An error
    /// holds the finalizer and is retried. Nothing by default.
    fn released(&self, _cx: &Context<Self>) -> impl Future<Output = Result<(), Error>> + Send {
        async { Ok(()) }
    }

    /// Whether a resource is in use by another (a volume attached to a machine, a firewall
    /// attached to machines): a duplicate in use is reported, never deleted.
    fn in_use(_record: &Record<Self>) -> bool {
        false
    }

    /// Whether the status shows every request the object makes outside its spec, through
    /// annotations (which do not move `metadata.generation`): a starting controller
    /// re-adopts an object without a reconcile only then (`readopt.rs`). Nothing is asked
    /// that way by default.
    fn annotations_observed(&self) -> bool {
        true
    }

    /// Whether the cloud reports the resource running (a machine a `Budget` may power off).
    fn is_running(&self) -> bool {
        false
    }

    /// What the object's cloud resource costs per hour, and in which currency, when the cloud
    /// says (`gpucloud_hourly_cost`).
    fn hourly_cost(&self) -> Option<(f64, String)> {
        None
    }

    /// Whether the cloud bills the resource by the account's price list rather than giving
    /// its rate on the record (volumes, snapshots and images, by size): before the status
    /// write of each converge (the resource found in the cloud), the flow reads the price list
    /// (`Account::pricing_for_status`: cached for the catalog TTL, so no per-object call) and
    /// hands it to [`ManagedKind::priced`].
    const PRICED: bool = false;

    /// Records in the kind's own status fields (`hourlyRate`, `currency`) what `record` costs
    /// per hour by `pricing`, for the flow's status write (`status_with` keeps them). Pure.
    /// A price the list does not give leaves them as they are: never a wrong or zero rate.
    /// Nothing by default.
    fn priced(&mut self, _record: &Record<Self>, _pricing: &PricingBody) {}

    /// Why the recorded resource is gone from the cloud, when the kind can tell better than
    /// "deleted outside the operator" (an image removed with its snapshot). `None` keeps the
    /// generic `ExternalDeleted` report.
    fn explain_gone(
        &self,
        _cx: &Context<Self>,
        _account: &Account,
    ) -> impl Future<Output = Option<Outcome>> + Send {
        async { None }
    }
}

/// The `resolve` and `execute` of a kind whose resource is never changed once created (its
/// plan only reports where the record stands): nothing to read, no action.
macro_rules! never_acts {
    () => {
        type Resolved = ();
        type Action = std::convert::Infallible;

        async fn resolve(
            &self,
            _cx: &$crate::flow::context::Context<Self>,
            _account: &$crate::accounts::account::Account,
            _record: &$crate::flow::kind::Record<Self>,
        ) -> Result<(), $crate::flow::error::Error> {
            Ok(())
        }

        async fn execute(
            &self,
            _cx: &$crate::flow::context::Context<Self>,
            _account: &$crate::accounts::account::Account,
            _record: &$crate::flow::kind::Record<Self>,
            action: &Self::Action,
        ) -> Result<(), $crate::flow::error::Error> {
            match *action {}
        }
    };
}
pub(crate) use never_acts;

/// One step toward the spec: at most one action, and where the object stands once it is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<A> {
    pub action: Option<A>,
    pub outcome: Outcome,
}

impl<A> Plan<A> {
    /// Carry out `action`; the object then stands at `outcome`.
    pub fn act(action: A, outcome: Outcome) -> Self {
        Plan {
            action: Some(action),
            outcome,
        }
    }

    /// Nothing to do: the object stands at `outcome`.
    pub fn stand(outcome: Outcome) -> Self {
        Plan {
            action: None,
            outcome,
        }
    }
}

/// An object another refers to by name, in its own namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// The object of `kind` named `name`.
    Named { kind: &'static str, name: String },
    /// Every object of `kind` (a label selector: an object matching or ceasing to match
    /// must be looked at).
    Every { kind: &'static str },
}

impl Reference {
    pub fn named(kind: &'static str, name: impl Into<String>) -> Self {
        Reference::Named {
            kind,
            name: name.into(),
        }
    }

    /// Whether this reference covers the object `name` of `kind`.
    pub fn covers(&self, kind: &str, name: &str) -> bool {
        match self {
            Reference::Named { kind: k, name: n } => *k == kind && n == name,
            Reference::Every { kind: k } => *k == kind,
        }
    }
}

/// What a kind does when the resource it recorded disappears from the cloud.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenGone {
    /// Create it again: the resource holds no data (an SSH key).
    Recreate,
    /// Report `ExternalDeleted` and leave it to a person: recreating would silently replace
    /// data or a machine (instances, volumes, snapshots).
    Report,
}

/// Convenience accessors shared by the flow.
pub trait ObjectKey {
    /// `namespace/name`, the key of per-object state.
    fn key(&self) -> String;
}

impl<K: Resource> ObjectKey for K {
    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.meta().namespace.as_deref().unwrap_or_default(),
            self.meta().name.as_deref().unwrap_or_default()
        )
    }
}
