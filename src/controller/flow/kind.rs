//! What a kind tells the shared reconcile flow about itself.

use crate::accounts::account::Account;
use crate::accounts::observer::CloudResource;
use crate::flow::conditions::Outcome;
use crate::flow::context::Context;
pub use crate::flow::declarations::{KindDeclarations, Record, Reference, WhenGone};
use crate::flow::error::Error;
use gpucloud_api::lifetime::Stage;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

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

/// A namespaced kind whose every object owns one cloud resource: what the shared flow asks
/// the kind to do, with the context of its reconcile (plan and make the create, resolve, plan
/// and execute a step, delete and release). What the kind declares about its objects, read
/// without a context, is [`KindDeclarations`].
///
/// The shared flow in `flow/reconcile/` does everything that is the same for every kind
/// (credentials, pause, finalizer, deletion and management policies, adoption, idempotent
/// create, status and conditions, requeue); a kind supplies only what differs.
pub trait ManagedKind: KindDeclarations {
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

    /// What a `GpuPolicy` judges of the machine `plan` makes (`gpu_policy.rs`): the GPU
    /// types, regions and counts the object names or the plan chose, its tier and lifetime.
    /// `None` for a kind that makes no machine (its rate still counts toward a policy's
    /// per-namespace rate cap).
    fn policy_subject(
        &self,
        _plan: &Self::CreatePlan,
    ) -> Option<gpucloud_api::gpu_policy::Subject> {
        None
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

    /// Whether a `Budget` may refuse this object's create (`budget.rs`): yes, but for a create
    /// that lets something dearer go (the final snapshot a machine's deletion waits for),
    /// which a Budget counts and never refuses.
    fn budget_may_refuse(
        &self,
        _client: &kube::Client,
    ) -> impl Future<Output = Result<bool, Error>> + Send {
        async { Ok(true) }
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
    /// A lifetime in force that the object does not state, found by what the plan read beside
    /// it (a GpuPolicy's `maxLifetime`, when it ends the machine before its own lifetime):
    /// the flow shows it in `status.expiresAt`, warns of it as of the object's own, and looks
    /// again at its next stage, which no timer of the object's would ([`KindDeclarations::next_wake`]).
    pub imposed_lifetime: Option<ImposedLifetime>,
}

/// A lifetime set for the object from outside it: where it stands, and what sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImposedLifetime {
    pub stage: Stage,
    /// Who sets it, as messages name it (`GpuPolicy research`).
    pub by: String,
}

impl<A> Plan<A> {
    /// Carry out `action`; the object then stands at `outcome`.
    pub fn act(action: A, outcome: Outcome) -> Self {
        Plan {
            action: Some(action),
            outcome,
            imposed_lifetime: None,
        }
    }

    /// Nothing to do: the object stands at `outcome`.
    pub fn stand(outcome: Outcome) -> Self {
        Plan {
            action: None,
            outcome,
            imposed_lifetime: None,
        }
    }
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
