//! What a kind declares about its objects, read without a reconcile's context: its cloud
//! resource, what it refers to, how its status reads a record, what it costs. The context, the
//! indexes and the gauges are written against this; what a kind does in a reconcile is
//! `ManagedKind` (`kind.rs`), which builds on it.

use crate::accounts::observer::CloudResource;
use crate::flow::conditions::Outcome;
use gpucloud_api::{CloudStatus, Managed};
use gpucloud_cloud::model::PricingBody;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::jiff::Timestamp;
use kube::core::object::HasStatus;
use kube::{CustomResourceExt, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// The cloud record type of a kind.
pub type Record<K> = <<K as KindDeclarations>::Cloud as CloudResource>::Record;

/// A namespaced kind whose every object owns one cloud resource, as its declarations tell it.
pub trait KindDeclarations:
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
    /// is `(kind, field)`; [`KindDeclarations::references`] gives an object's actual references.
    const REFERS_TO: &'static [(&'static str, &'static str)] = &[];

    /// Whether an object is looked at again when an object referring to it changes (a
    /// snapshot whose deletion waits for the machines restored from it and the images made
    /// from it).
    const FOLLOWS_REFERRERS: bool = false;

    /// The objects this one refers to, in its namespace, of the kinds in
    /// [`KindDeclarations::REFERS_TO`]: a change of any of them looks at this object again.
    fn references(&self) -> Vec<Reference> {
        Vec::new()
    }

    /// A moment after `now` when the object must be looked at again whatever the cloud does
    /// (a power schedule's next start or stop): the reconcile's requeue is never later. Read
    /// from the object, so it holds across restarts: one timer per object, no polling.
    fn next_wake(&self, _now: Timestamp) -> Option<Timestamp> {
        None
    }

    /// Why a resource the kind's list leaves out is never adopted, for kinds whose list leaves
    /// out what may not be adopted on its own (a Volume's leaves out instances' boot volumes,
    /// which a read by id still finds): adopting an id then waits for the list to show it.
    /// `None`: an adopted id the list leaves out is read by id, as any other.
    const UNLISTED_NOT_ADOPTED: Option<&'static str> = None;

    /// What the object reports under `ObserveOnly`: the cloud's state, with nothing changed.
    fn observed(&self, record: &Record<Self>) -> Outcome;

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

    /// Whether the cloud reports the resource's machine off (stopped or hibernated): billed
    /// a share of its running rate, which its reported rate already is.
    fn is_off(&self) -> bool {
        false
    }

    /// How many GPUs the object's machine has (or will have, once a create is under way), as
    /// a `GpuPolicy` counts them: 0 for what is no machine.
    fn gpus(&self) -> i32 {
        0
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
    /// hands it to [`KindDeclarations::priced`].
    const PRICED: bool = false;

    /// Records in the kind's own status fields (`hourlyRate`, `currency`) what `record` costs
    /// per hour by `pricing`, for the flow's status write (`status_with` keeps them). Pure.
    /// A price the list does not give leaves them as they are: never a wrong or zero rate.
    /// Nothing by default.
    fn priced(&mut self, _record: &Record<Self>, _pricing: &PricingBody) {}
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
