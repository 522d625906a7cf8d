//! `Volume`: creates (or clones) the volume, grows it to `sizeGb`, and keeps its attachment in
//! step with `instanceRef`: attach, detach, or move (detach, then attach elsewhere), one cloud
//! call per step.

use crate::accounts::account::Account;
use crate::accounts::observer::CloudResource;
use crate::accounts::pricing;
use crate::accounts::records::{cloud_record, found, gone};
use crate::flow::adoption::Ownership;
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::dereference::{self, ReferencedInstance};
use crate::flow::error::Error;
use crate::flow::kind::{KindDeclarations, ManagedKind, Plan, Record, Reference, WhenGone};
use gpucloud_api::{CloudStatus, DeletionPolicy, Managed, ManagementPolicy, Volume, VolumeStatus};
use gpucloud_cloud::model::{
    CreateVolumeRequest, PricingBody, Tier as CloudTier, Volume as CloudVolume, VolumeListQuery,
    VolumeStatus as CloudState,
};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use kube::ResourceExt;

/// How a volume comes to exist: made empty, or cloned from another volume.
pub enum VolumePlan {
    Create(CreateVolumeRequest),
    /// A clone has its source's size and type; it is then grown to `size_gb` if that is more.
    Clone {
        source_id: String,
        size_gb: u64,
    },
}

/// Where `instanceRef` says the volume belongs.
#[derive(Debug)]
pub enum Target {
    /// No reference: the volume stays detached.
    Detached,
    /// The referenced machine's cloud id.
    Instance(String),
    /// The reference cannot be followed yet (the machine does not exist, has no id yet, or
    /// was deleted outside the operator).
    Waiting(Error),
    /// The machine's object is being deleted. Its deletion detaches the volume, which
    /// meanwhile stays as it is: detaching it here too would only double the call. (A machine
    /// left in place, `deletionPolicy: Orphan`, keeps it until its object is gone; the volume
    /// is then detached as from any machine it no longer names.)
    MachineDeleting(Error),
}

/// One change a volume's plan asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeAction {
    /// Grow to this many GB.
    Grow(u64),
    /// Detach from this machine.
    Detach(String),
    /// Attach to this machine.
    Attach(String),
}

impl KindDeclarations for Volume {
    type Cloud = Volumes;
    const UNLISTED_NOT_ADOPTED: Option<&'static str> =
        Some("an instance's boot volume goes with its machine and is never adopted on its own");
    const REFERS_TO: &'static [(&'static str, &'static str)] = &[
        ("GpuInstance", "spec.instanceRef"),
        ("Volume", "spec.source.volumeRef"),
    ];

    fn references(&self) -> Vec<Reference> {
        let spec = &self.spec;
        spec.instance_ref
            .iter()
            .map(|r| Reference::named("GpuInstance", &r.name))
            .chain(
                spec.source
                    .iter()
                    .map(|s| Reference::named("Volume", &s.volume_ref.name)),
            )
            .collect()
    }

    const WHEN_GONE: WhenGone = WhenGone::Report;
    const BILLED: bool = true;
    const BILLING_LIST: Option<crate::accounts::account::BillingList> =
        Some(crate::accounts::account::BillingList::Volumes);

    fn status_with(&self, common: CloudStatus, record: Option<&Record<Self>>) -> Self::Status {
        let previous = self.status.as_ref();
        match record {
            Some(r) => VolumeStatus {
                cloud: common,
                attached_instance_id: r.instance_id.clone(),
                size_gb: Some(i32::try_from(r.size).unwrap_or(i32::MAX)),
                volume_type: Some(r.volume_type.clone()),
                bootable: Some(r.bootable),
                // From the price list, by `priced`.
                hourly_rate: previous.and_then(|p| p.hourly_rate),
                currency: previous.and_then(|p| p.currency.clone()),
            },
            None => VolumeStatus {
                cloud: common,
                ..previous.cloned().unwrap_or_default()
            },
        }
    }

    const PRICED: bool = true;

    /// Its size times the price per GB-hour of its volume type.
    fn priced(&mut self, record: &CloudVolume, pricing: &PricingBody) {
        let price = pricing::storage_price(pricing, &record.volume_type);
        if let Some((rate, currency)) = pricing::shown(pricing, price, record.size) {
            let status = self.status.get_or_insert_with(VolumeStatus::default);
            status.hourly_rate = Some(rate);
            status.currency = Some(currency);
        }
    }

    /// The rate the price list gave for the volume, while it has one.
    fn hourly_cost(&self) -> Option<(f64, String)> {
        let status = self.status.as_ref()?;
        pricing::recorded_cost(&status.cloud, status.hourly_rate, status.currency.as_ref())
    }

    fn observed(&self, record: &CloudVolume) -> Outcome {
        match record.status {
            CloudState::Error => Outcome::stalled(
                reason::CLOUD_UNAVAILABLE,
                format!("{} is in error", record.id),
            ),
            _ => Outcome::ready(
                reason::AVAILABLE,
                format!("observing {} ({})", record.id, record.status),
            ),
        }
    }

    fn in_use(record: &CloudVolume) -> bool {
        record.instance_id.is_some()
    }
}

impl ManagedKind for Volume {
    type CreatePlan = VolumePlan;

    async fn plan_create(
        &self,
        cx: &Context<Self>,
        account: &Account,
    ) -> Result<VolumePlan, Error> {
        if let Some(source) = &self.spec.source {
            let namespace = self.namespace().unwrap_or_default();
            if source.volume_ref.name == self.name_any() {
                return Err(Error::InvalidSpec(
                    "spec.source.volumeRef names this Volume itself".into(),
                ));
            }
            let source_id = dereference::ready_id::<Volume>(
                cx.lookup(account),
                &namespace,
                &source.volume_ref.name,
                "Volume",
            )
            .await?;
            return Ok(VolumePlan::Clone {
                source_id,
                size_gb: u64::try_from(self.spec.size_gb).unwrap_or_default(),
            });
        }
        Ok(VolumePlan::Create(create_request(&self.spec)?))
    }

    /// The size and type of the request; a clone's are its source's (read by id), grown to
    /// the spec's size when that is more, as the volume soon will be.
    async fn planned_hourly_rate(
        plan: &VolumePlan,
        account: &Account,
    ) -> Result<Option<f64>, Error> {
        let (size, volume_type) = match plan {
            VolumePlan::Create(request) => (
                request.size,
                request.volume_type.clone().unwrap_or_default(),
            ),
            VolumePlan::Clone { source_id, size_gb } => {
                let source = account.client.get_volume(source_id).await?;
                (source.size.max(*size_gb), source.volume_type)
            }
        };
        let pricing = account.pricing().await?;
        let price = pricing::required(
            pricing::storage_price(&pricing, &volume_type),
            &format!("volume type {volume_type:?}"),
        )?;
        Ok(Some(pricing::per_hour(size, price)))
    }

    async fn create(
        _cx: &Context<Self>,
        account: &Account,
        plan: VolumePlan,
        cloud_name: &str,
    ) -> Result<CloudVolume, Error> {
        match plan {
            VolumePlan::Create(mut request) => {
                request.name = cloud_name.to_string();
                Ok(account.client.create_volume(&request).await?)
            }
            VolumePlan::Clone { source_id, .. } => {
                Ok(account.client.clone_volume(&source_id, cloud_name).await?)
            }
        }
    }

    type Resolved = Target;
    type Action = VolumeAction;

    async fn resolve(
        &self,
        cx: &Context<Self>,
        account: &Account,
        _record: &CloudVolume,
    ) -> Result<Target, Error> {
        target(self, cx, account).await
    }

    fn plan(&self, record: &CloudVolume, target: Target) -> Result<Plan<VolumeAction>, Error> {
        let id = record.id.as_str();
        match record.status {
            CloudState::Creating => {
                return Ok(Plan::stand(Outcome::progressing(
                    reason::PROVISIONING,
                    format!("{id} is creating"),
                )));
            }
            CloudState::Error => {
                return Ok(Plan::stand(Outcome::stalled(
                    reason::CLOUD_UNAVAILABLE,
                    format!("the cloud reports {id} in error"),
                )));
            }
            _ => {}
        }

        let wanted = u64::try_from(self.spec.size_gb).unwrap_or_default();
        if wanted > record.size {
            return Ok(Plan::act(
                VolumeAction::Grow(wanted),
                Outcome::progressing(
                    reason::UPDATING,
                    format!("growing {id} from {} GB to {wanted} GB", record.size),
                ),
            ));
        }
        if wanted < record.size {
            // Admission refuses a shrinking spec; this is a larger clone source or an adopted
            // volume, which cannot be made smaller either.
            return Ok(Plan::stand(Outcome::stalled(
                reason::INVALID_SPEC,
                format!(
                    "spec.sizeGb {wanted} is smaller than {id}'s {} GB; volumes cannot shrink",
                    record.size
                ),
            )));
        }

        if let Some(current) = &record.instance_id
            && !matches!(&target, Target::Instance(wanted) if wanted == current)
            && !matches!(target, Target::MachineDeleting(_))
        {
            return Ok(Plan::act(
                VolumeAction::Detach(current.clone()),
                Outcome::progressing(reason::UPDATING, format!("detaching {id} from {current}")),
            ));
        }
        Ok(match target {
            Target::Instance(instance) if record.instance_id.is_none() => Plan::act(
                VolumeAction::Attach(instance.clone()),
                Outcome::progressing(reason::UPDATING, format!("attaching {id} to {instance}")),
            ),
            Target::Instance(instance) => Plan::stand(Outcome::ready(
                reason::AVAILABLE,
                format!("{id} ({} GB) is attached to {instance}", record.size),
            )),
            Target::Detached => Plan::stand(Outcome::ready(
                reason::AVAILABLE,
                format!("{id} ({} GB) is available", record.size),
            )),
            Target::Waiting(error) | Target::MachineDeleting(error) => Plan::stand(error.outcome()),
        })
    }

    async fn execute(
        &self,
        _cx: &Context<Self>,
        account: &Account,
        record: &CloudVolume,
        action: &VolumeAction,
    ) -> Result<(), Error> {
        let client = &account.client;
        let volume = std::slice::from_ref(&record.id);
        match action {
            VolumeAction::Grow(size) => client.resize_volume(&record.id, *size).await.map(drop)?,
            VolumeAction::Detach(instance) => match client.detach_volumes(instance, volume).await {
                // The machine is gone: the cloud lets go of its volumes by itself.
                Err(e) if e.is_not_found() => {}
                other => other.map(drop)?,
            },
            VolumeAction::Attach(instance) => {
                client.attach_volumes(instance, volume).await.map(drop)?
            }
        }
        Ok(())
    }

    /// A volume that a list from before its machine's deletion still shows attached there is
    /// deleted without detaching it again; should the cloud answer that it is attached after
    /// all, it is detached, then deleted.
    async fn delete(
        _cx: &Context<Self>,
        _own: Option<&Self>,
        account: &Account,
        record: &CloudVolume,
    ) -> Result<(), Error> {
        let released = record
            .instance_id
            .as_deref()
            .is_some_and(|instance| account.volume_released(&record.id, instance));
        if released {
            match gone(account.client.delete_volume(&record.id).await) {
                Err(CloudError::Conflict { .. }) => {}
                deleted => return Ok(deleted?),
            }
        }
        Ok(Volumes::delete(account.client.clone(), record.clone()).await?)
    }

    /// A volume attached to a machine that is being deleted with it waits for that deletion,
    /// which lets go of the volume by itself (`GpuInstance::delete` leaves it attached): one
    /// call less than detaching it here, and one less again than the machine detaching it too.
    /// Nothing is held for a machine left in place, or another machine than the one the
    /// reference names; should the wait be forgotten, the volume is detached as before.
    async fn hold_deletion(
        &self,
        cx: &Context<Self>,
        account: &std::sync::Arc<Account>,
    ) -> Result<(), Error> {
        let (Some(reference), Some(status)) = (&self.spec.instance_ref, &self.status) else {
            return Ok(());
        };
        let (Some(volume), Some(machine)) = (
            status.cloud.external_id.as_deref(),
            status.attached_instance_id.as_deref(),
        ) else {
            return Ok(());
        };
        if account.volume_released(volume, machine) {
            return Ok(());
        }
        let namespace = self.namespace().unwrap_or_default();
        // Read live: `kubectl delete -f` deletes the machine and the volume a moment apart,
        // and the store's copy of the machine may not show its deletion yet. One GET per
        // deletion of an attached volume.
        let lookup = cx.lookup(account).live();
        match dereference::referenced_instance(lookup, &namespace, &reference.name).await {
            Ok(ReferencedInstance::BeingDeleted {
                deletes: Some(deleted),
                ..
            }) if deleted == machine => {
                account.note_volume_deleting(volume);
                Err(Error::InProgress {
                    reason: reason::DELETING,
                    message: format!(
                        "waiting for GpuInstance {}'s deletion to let go of {volume}",
                        reference.name
                    ),
                })
            }
            // Any other answer (a failed read included) leaves the volume to be detached.
            _ => Ok(()),
        }
    }
}

/// Of the data volumes attached to the machine `machine` in `account`, those whose Volume
/// objects are being deleted with it: in the machine's namespace, naming its object `name`
/// (`spec.instanceRef`), recorded as attached to it in the same account, and to be deleted
/// with their cloud volume (`deletionPolicy: Delete`, managed). Their data goes anyway, so the
/// machine's deletion need not detach them first (`GpuInstance::delete`). Read from the Volume
/// controllers' stores, so known as soon as the watch brings the volume's deletion, before its
/// own reconcile notes the same (`hold_deletion`); a volume the stores do not show so, another
/// namespace's above all, is detached as any other.
pub(crate) fn deleted_with_machine(
    ownership: &Ownership,
    account: &Account,
    namespace: &str,
    name: &str,
    machine: &str,
) -> Vec<String> {
    let account = account.id.label();
    ownership
        .referrers::<Volume>(namespace, "GpuInstance", name)
        .iter()
        .filter_map(|volume| goes_with_machine(volume, &account, namespace, name, machine))
        .map(str::to_string)
        .collect()
}

/// The cloud id of `volume` when its object is being deleted with the machine `machine` of
/// the object `name` in `namespace`, in the account labelled `account` (see
/// [`deleted_with_machine`]).
fn goes_with_machine<'a>(
    volume: &'a Volume,
    account: &str,
    namespace: &str,
    name: &str,
    machine: &str,
) -> Option<&'a str> {
    let managed = volume.managed();
    let status = volume.status.as_ref()?;
    let goes = volume.metadata.deletion_timestamp.is_some()
        && managed.deletion_policy == DeletionPolicy::Delete
        && managed.management_policy == ManagementPolicy::Manage
        && volume.namespace().as_deref() == Some(namespace)
        && volume
            .spec
            .instance_ref
            .as_ref()
            .is_some_and(|r| r.name == name)
        && status.attached_instance_id.as_deref() == Some(machine)
        && status.cloud.account.as_deref() == Some(account);
    goes.then_some(status.cloud.external_id.as_deref())?
}

async fn target(volume: &Volume, cx: &Context<Volume>, account: &Account) -> Result<Target, Error> {
    let this = volume;
    let Some(reference) = &this.spec.instance_ref else {
        return Ok(Target::Detached);
    };
    let namespace = this.namespace().unwrap_or_default();
    match dereference::referenced_instance(cx.lookup(account), &namespace, &reference.name).await {
        Ok(ReferencedInstance::Id(id)) => Ok(Target::Instance(id)),
        Ok(ReferencedInstance::BeingDeleted { waiting, .. }) => {
            Ok(Target::MachineDeleting(waiting))
        }
        Err(waiting @ Error::WaitingFor { .. }) => Ok(Target::Waiting(waiting)),
        Err(other) => Err(other),
    }
}

/// The create request a spec asks for (unnamed: `create` names it). Pure, so the mapping is
/// tested without a cloud.
pub fn create_request(spec: &gpucloud_api::VolumeSpec) -> Result<CreateVolumeRequest, Error> {
    let size = u64::try_from(spec.size_gb)
        .ok()
        .filter(|size| *size > 0)
        .ok_or_else(|| Error::InvalidSpec("spec.sizeGb must be positive".into()))?;
    Ok(CreateVolumeRequest {
        name: String::new(),
        size,
        region: spec.region.clone(),
        volume_type: Some(spec.volume_type.clone()),
        tier: Some(CloudTier::from_wire(spec.tier.cloud_value())),
        bootable: Some(spec.bootable),
    })
}

// === Cloud calls ===

cloud_record!(CloudVolume, id: id, name: name, state: status);

/// The cloud's data volumes; the boot volumes of instances belong to their instances.
pub struct Volumes;

impl CloudResource for Volumes {
    type Record = CloudVolume;
    const LABEL: &'static str = "volume";

    async fn list(client: CloudClient) -> Result<Vec<CloudVolume>, CloudError> {
        let query = VolumeListQuery {
            exclude_os_volumes: Some(true),
            ..VolumeListQuery::default()
        };
        Ok(client.list_volumes(&query).await?.volumes)
    }

    async fn get(client: CloudClient, id: String) -> Result<Option<CloudVolume>, CloudError> {
        found(client.get_volume(&id).await)
    }

    async fn delete(client: CloudClient, record: CloudVolume) -> Result<(), CloudError> {
        // The cloud deletes detached volumes only.
        if let Some(instance) = record.instance_id.as_deref().filter(|id| !id.is_empty()) {
            match client
                .detach_volumes(instance, std::slice::from_ref(&record.id))
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        gone(client.delete_volume(&record.id).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_api::Managed;

    #[test]
    fn a_volume_goes_with_its_machine_only_when_its_own_deletion_takes_its_data() {
        let going = || -> serde_json::Value {
            serde_json::json!({
                "apiVersion": "gpucloud.io/v1alpha1", "kind": "Volume",
                "metadata": {"name": "data", "namespace": "ml",
                             "deletionTimestamp": "2026-12-01T00:00:00Z",
                             "finalizers": ["gpucloud.io/cleanup"]},
                "spec": {"region": "us-east", "sizeGb": 10, "volumeType": "ssd",
                         "instanceRef": {"name": "worker"}},
                "status": {"externalId": "vol-1", "account": "acct-a",
                           "attachedInstanceId": "vm-1"},
            })
        };
        let changed = |pointer: &str, value: serde_json::Value| {
            let mut volume = going();
            *volume.pointer_mut(pointer).unwrap() = value;
            volume
        };
        let mut not_deleting = going();
        not_deleting["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("deletionTimestamp");
        let mut orphaned = going();
        orphaned["spec"]["deletionPolicy"] = "Orphan".into();
        let mut observed = going();
        observed["spec"]["managementPolicy"] = "ObserveOnly".into();
        let cases = [
            ("deleted with its machine", going(), Some("vol-1")),
            ("not being deleted", not_deleting, None),
            ("left in place", orphaned, None),
            ("only observed", observed, None),
            (
                "in another namespace",
                changed("/metadata/namespace", "other".into()),
                None,
            ),
            (
                "naming another machine",
                changed("/spec/instanceRef/name", "other".into()),
                None,
            ),
            (
                "attached elsewhere",
                changed("/status/attachedInstanceId", "vm-2".into()),
                None,
            ),
            (
                "in another account",
                changed("/status/account", "acct-b".into()),
                None,
            ),
        ];
        for (what, volume, expected) in cases {
            let volume: Volume = serde_json::from_value(volume).unwrap();
            assert_eq!(
                goes_with_machine(&volume, "acct-a", "ml", "worker", "vm-1"),
                expected,
                "{what}"
            );
        }
    }

    fn volume(size_gb: i32) -> Volume {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "Volume",
            "metadata": {"name": "data", "namespace": "ml"},
            "spec": {"region": "us-east", "sizeGb": size_gb, "volumeType": "ssd"},
        }))
        .unwrap()
    }

    fn record(size: u64, status: CloudState, attached_to: Option<&str>) -> CloudVolume {
        CloudVolume {
            id: "vol-1".into(),
            size,
            status,
            instance_id: attached_to.map(str::to_string),
            ..CloudVolume::default()
        }
    }

    fn planned(
        size_gb: i32,
        record: &CloudVolume,
        target: Target,
    ) -> (Option<VolumeAction>, &'static str) {
        let plan = volume(size_gb).plan(record, target).unwrap();
        (plan.action, plan.outcome.standing())
    }

    #[test]
    fn size_first_then_detach_before_attach() {
        use CloudState::{Attached, Available, Creating, Error};
        let on = |id: &str| Target::Instance(id.to_string());
        let table = [
            (
                100,
                record(100, Creating, None),
                Target::Detached,
                None,
                "progressing",
            ),
            (
                100,
                record(100, Error, None),
                Target::Detached,
                None,
                "stalled",
            ),
            // Grown before anything else; never shrunk.
            (
                200,
                record(100, Attached, Some("vm-1")),
                on("vm-2"),
                Some(VolumeAction::Grow(200)),
                "progressing",
            ),
            (
                50,
                record(100, Available, None),
                Target::Detached,
                None,
                "stalled",
            ),
            // Moved: detached from the old machine first, attached on the next step.
            (
                100,
                record(100, Attached, Some("vm-1")),
                on("vm-2"),
                Some(VolumeAction::Detach("vm-1".into())),
                "progressing",
            ),
            (
                100,
                record(100, Available, None),
                on("vm-2"),
                Some(VolumeAction::Attach("vm-2".into())),
                "progressing",
            ),
            (
                100,
                record(100, Attached, Some("vm-2")),
                on("vm-2"),
                None,
                "ready",
            ),
            // instanceRef removed: detached, then available.
            (
                100,
                record(100, Attached, Some("vm-1")),
                Target::Detached,
                Some(VolumeAction::Detach("vm-1".into())),
                "progressing",
            ),
            (
                100,
                record(100, Available, None),
                Target::Detached,
                None,
                "ready",
            ),
            // Its machine being deleted: that deletion detaches it; the volume waits.
            (
                100,
                record(100, Attached, Some("vm-1")),
                Target::MachineDeleting(waiting("it is being deleted")),
                None,
                "progressing",
            ),
            // Its machine deleted outside the operator: detached.
            (
                100,
                record(100, Attached, Some("vm-1")),
                Target::Waiting(waiting("its machine was deleted outside the operator")),
                Some(VolumeAction::Detach("vm-1".into())),
                "progressing",
            ),
        ];
        for (size, record, target, action, standing) in table {
            let case = format!("{size} GB wanted, {record:?}, {target:?}");
            assert_eq!(planned(size, &record, target), (action, standing), "{case}");
        }
    }

    /// The simulator's price list.
    fn price_list() -> PricingBody {
        serde_json::from_value(serde_json::json!({
            "currency": "USD",
            "storage": [
                {"volume_type": "NVMe", "price_per_gb_hour": 0.0002},
                {"volume_type": "SSD", "price_per_gb_hour": 0.0001},
            ],
            "snapshot_price_per_gb_hour": 0.00005,
            "image_price_per_gb_hour": 0.00005,
        }))
        .unwrap()
    }

    /// A recorded volume whose status shows `rate` (in USD), priced by `pricing` for `record`
    /// and written: what the status then shows, and what `hourly_cost` says.
    fn priced_status(
        rate: Option<f64>,
        record: &CloudVolume,
        pricing: Option<&PricingBody>,
    ) -> (VolumeStatus, Option<(f64, String)>) {
        let mut object = volume(100);
        object.status = Some(VolumeStatus {
            cloud: CloudStatus {
                external_id: Some("vol-1".into()),
                ..CloudStatus::default()
            },
            hourly_rate: rate,
            currency: rate.map(|_| "USD".to_string()),
            ..VolumeStatus::default()
        });
        if let Some(pricing) = pricing {
            object.priced(record, pricing);
        }
        let written = object.with_status(
            object.cloud_status(),
            Some(record),
            k8s_openapi::jiff::Timestamp::now(),
        );
        let cost = written.hourly_cost();
        (written.status.unwrap(), cost)
    }

    #[test]
    fn the_rate_is_the_size_times_the_price_of_the_volume_type() {
        let list = price_list();
        let sized = |size: u64, volume_type: &str| CloudVolume {
            volume_type: volume_type.into(),
            ..record(size, CloudState::Available, None)
        };
        for (before, record, pricing, after) in [
            (None, sized(100, "SSD"), Some(&list), Some(0.01)),
            (None, sized(100, "NVMe"), Some(&list), Some(0.02)),
            (None, sized(50, "nvme"), Some(&list), Some(0.01)),
            // Grown: the rate follows the size.
            (Some(0.02), sized(200, "NVMe"), Some(&list), Some(0.04)),
            // A type the list does not price, a record without a size, a price list that could
            // not be read: what the status showed stays.
            (Some(0.5), sized(100, "HDD"), Some(&list), Some(0.5)),
            (None, sized(100, "HDD"), Some(&list), None),
            (Some(0.5), sized(0, "SSD"), Some(&list), Some(0.5)),
            (Some(0.5), sized(100, "SSD"), None, Some(0.5)),
            (None, sized(100, "SSD"), None, None),
        ] {
            let case = format!("{before:?} {record:?} priced: {}", pricing.is_some());
            let (status, cost) = priced_status(before, &record, pricing);
            match after {
                Some(rate) => {
                    let shown = status.hourly_rate.expect(&case);
                    assert!((shown - rate).abs() < 1e-12, "{case}: {shown}");
                    assert_eq!(status.currency.as_deref(), Some("USD"), "{case}");
                    assert_eq!(cost, Some((shown, "USD".to_string())), "{case}");
                }
                None => {
                    assert_eq!(
                        (status.hourly_rate, status.currency),
                        (None, None),
                        "{case}"
                    );
                    assert_eq!(cost, None, "{case}");
                }
            }
        }
    }

    #[test]
    fn a_rate_is_kept_without_a_record_and_costs_nothing_without_a_cloud_id() {
        let mut object = volume(100);
        object.status = Some(VolumeStatus {
            hourly_rate: Some(0.02),
            currency: Some("USD".into()),
            ..VolumeStatus::default()
        });
        // Nothing recorded (an object whose create was refused, say): nothing is billed.
        assert_eq!(object.hourly_cost(), None);
        let kept = object.status_with(CloudStatus::default(), None);
        assert_eq!(kept.hourly_rate, Some(0.02));
        assert_eq!(kept.currency.as_deref(), Some("USD"));
    }

    fn waiting(detail: &str) -> Error {
        Error::WaitingFor {
            kind: "GpuInstance",
            name: "train".into(),
            detail: detail.into(),
        }
    }

    #[test]
    fn a_reference_that_cannot_be_followed_keeps_the_volume_where_it_is() {
        let waiting = Target::Waiting(waiting("it has no cloud id yet"));
        let plan = volume(100)
            .plan(&record(100, CloudState::Available, None), waiting)
            .unwrap();
        assert_eq!(plan.action, None);
        assert!(
            matches!(plan.outcome, Outcome::Progressing { .. }),
            "{:?}",
            plan.outcome
        );
    }
}
