//! `Snapshot`: snapshots a machine once it is `ACTIVE`, follows `creating` to `available`, and
//! holds its deletion while a GpuInstance is still to be restored from it or images are made
//! from it.

use crate::accounts::account::Account;
use crate::accounts::observer::CloudResource;
use crate::accounts::pricing;
use crate::accounts::records::{cloud_record, found, gone};
use crate::flow::conditions::{Outcome, reason};
use crate::flow::context::Context;
use crate::flow::dereference;
use crate::flow::error::Error;
use crate::flow::kind::{
    KindDeclarations, ManagedKind, Plan, Record, Reference, WhenGone, never_acts,
};
use crate::runtime::pages;
use gpucloud_api::{
    CloudStatus, DELETE_DEPENDENTS_ANNOTATION, GpuInstance, Image, Managed, Snapshot,
    SnapshotStatus,
};
use gpucloud_cloud::model::{
    CreateSnapshotRequest, Instance, InstanceStatus, PricingBody, Snapshot as CloudSnapshot,
    SnapshotStatus as CloudState,
};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::sync::Arc;

/// What a snapshot create needs: the machine and the request.
pub struct SnapshotPlan {
    instance_id: String,
    request: CreateSnapshotRequest,
    /// The machine's storage in GB, as its cloud record says: the snapshot's size.
    size_gb: u64,
}

impl KindDeclarations for Snapshot {
    type Cloud = Snapshots;
    const REFERS_TO: &'static [(&'static str, &'static str)] =
        &[("GpuInstance", "spec.instanceRef")];

    // Machines restored from a snapshot and images made from it hold its deletion.
    const FOLLOWS_REFERRERS: bool = true;

    fn references(&self) -> Vec<Reference> {
        self.spec
            .instance_ref
            .iter()
            .map(|r| Reference::named("GpuInstance", &r.name))
            .collect()
    }

    const WHEN_GONE: WhenGone = WhenGone::Report;
    const BILLED: bool = true;
    const BILLING_LIST: Option<crate::accounts::account::BillingList> =
        Some(crate::accounts::account::BillingList::Snapshots);

    fn status_with(&self, common: CloudStatus, record: Option<&Record<Self>>) -> Self::Status {
        let previous = self.status.as_ref();
        match record {
            Some(r) => SnapshotStatus {
                cloud: common,
                size: Some(i64::try_from(r.size).unwrap_or(i64::MAX)),
                region: Some(r.region.clone()),
                source_instance_id: Some(r.instance_id.clone()),
                // From the price list, by `priced`.
                hourly_rate: previous.and_then(|p| p.hourly_rate),
                currency: previous.and_then(|p| p.currency.clone()),
            },
            None => SnapshotStatus {
                cloud: common,
                ..previous.cloned().unwrap_or_default()
            },
        }
    }

    const PRICED: bool = true;

    /// Its size times the snapshot price per GB-hour.
    fn priced(&mut self, record: &CloudSnapshot, pricing: &PricingBody) {
        let price = pricing::snapshot_price(pricing);
        if let Some((rate, currency)) = pricing::shown(pricing, price, record.size) {
            let status = self.status.get_or_insert_with(SnapshotStatus::default);
            status.hourly_rate = Some(rate);
            status.currency = Some(currency);
        }
    }

    /// The rate the price list gave for the snapshot, while it has one.
    fn hourly_cost(&self) -> Option<(f64, String)> {
        let status = self.status.as_ref()?;
        pricing::recorded_cost(&status.cloud, status.hourly_rate, status.currency.as_ref())
    }

    fn observed(&self, record: &CloudSnapshot) -> Outcome {
        match record.status {
            CloudState::Error => Outcome::stalled(
                reason::CLOUD_UNAVAILABLE,
                format!("the cloud reports {} in error", record.snapshot_id),
            ),
            _ => Outcome::ready(
                reason::AVAILABLE,
                format!(
                    "{} ({} GB of {}) is {}",
                    record.snapshot_id, record.size, record.instance_id, record.status
                ),
            ),
        }
    }
}

impl ManagedKind for Snapshot {
    type CreatePlan = SnapshotPlan;

    /// The final snapshot a machine's deletion waits for is never refused.
    async fn budget_may_refuse(&self, client: &kube::Client) -> Result<bool, Error> {
        Ok(!crate::kinds::gpu_instance::final_snapshot::waited_for(client, self).await?)
    }

    async fn plan_create(
        &self,
        cx: &Context<Self>,
        account: &Account,
    ) -> Result<SnapshotPlan, Error> {
        let namespace = self.namespace().unwrap_or_default();
        let instance_id = match (&self.spec.instance_ref, &self.spec.instance_id) {
            (Some(reference), None) => {
                dereference::instance_id(cx.lookup(account), &namespace, &reference.name).await?
            }
            (None, Some(id)) => {
                // Checked before the first cloud call: another team's machine is not this
                // namespace's to copy.
                cx.ownership
                    .check_reference::<GpuInstance>(
                        &cx.client,
                        cx.settings.allow_adoption,
                        &namespace,
                        &format!("spec.instanceId {id}"),
                        id,
                        Some(&account.client),
                    )
                    .await?;
                id.clone()
            }
            _ => {
                return Err(Error::InvalidSpec(
                    "set exactly one of spec.instanceRef and spec.instanceId".into(),
                ));
            }
        };
        // The cloud snapshots ACTIVE machines only (`snapshot_plan`): wait for it rather
        // than fail.
        let instance = match account.client.get_instance(&instance_id).await {
            Ok(instance) => instance,
            Err(e) if e.is_not_found() && self.spec.instance_ref.is_some() => {
                return Err(Error::InProgress {
                    reason: reason::WAITING_FOR_INSTANCE,
                    message: format!("instance {instance_id} is not in the cloud yet"),
                });
            }
            Err(e) if e.is_not_found() => {
                return Err(Error::InvalidSpec(format!(
                    "spec.instanceId {instance_id} names no instance in the cloud"
                )));
            }
            Err(e) => return Err(e.into()),
        };
        snapshot_plan(self, instance_id, &instance)
    }

    /// The machine's storage times the snapshot price per GB-hour.
    async fn planned_hourly_rate(
        plan: &SnapshotPlan,
        account: &Account,
    ) -> Result<Option<f64>, Error> {
        let pricing = account.pricing().await?;
        let price = pricing::required(pricing::snapshot_price(&pricing), "snapshot price")?;
        Ok(Some(pricing::per_hour(plan.size_gb, price)))
    }

    async fn create(
        _cx: &Context<Self>,
        account: &Account,
        plan: SnapshotPlan,
        cloud_name: &str,
    ) -> Result<CloudSnapshot, Error> {
        let mut request = plan.request;
        request.name = cloud_name.to_string();
        Ok(account
            .client
            .create_snapshot(&plan.instance_id, &request)
            .await?)
    }

    never_acts!();

    /// Nothing to change in the cloud: the record is reported as it stands.
    fn plan(&self, record: &CloudSnapshot, _resolved: ()) -> Result<Plan<Self::Action>, Error> {
        Ok(Plan::stand(match record.status {
            CloudState::Creating => Outcome::progressing(
                reason::PROVISIONING,
                format!("{} is creating", record.snapshot_id),
            ),
            _ => self.observed(record),
        }))
    }

    async fn delete(
        _cx: &Context<Self>,
        _own: Option<&Self>,
        account: &Account,
        record: &CloudSnapshot,
    ) -> Result<(), Error> {
        if record.status == CloudState::Creating {
            // The cloud refuses to delete a snapshot still being made.
            return Err(Error::InProgress {
                reason: reason::DELETING,
                message: format!(
                    "waiting for {} to finish creating before deleting it",
                    record.snapshot_id
                ),
            });
        }
        Ok(Snapshots::delete(account.client.clone(), record.clone()).await?)
    }

    /// A GpuInstance that is to be restored from this snapshot and is not yet made holds the
    /// deletion: deleting now would leave it unable ever to be created. Images made from the
    /// snapshot hold it too, since the cloud deletes them with it: the Image objects naming it
    /// (while they exist, being deleted or not) and any image the cloud relates to it (one an
    /// `Orphan` Image left, or one made outside the operator), unless the Snapshot carries
    /// `gpucloud.io/delete-dependents: "true"`.
    async fn hold_deletion(&self, cx: &Context<Self>, account: &Arc<Account>) -> Result<(), Error> {
        let namespace = self.namespace().unwrap_or_default();
        let name = self.name_any();
        let instances: Api<GpuInstance> = Api::namespaced(cx.client.clone(), &namespace);
        let waiting: Vec<String> = pages::list_as::<_, Named>(&cx.client, &instances)
            .await?
            .into_iter()
            .filter(|i| {
                !i.metadata.deleting()
                    && i.spec.source.as_ref().map(|s| s.snapshot_ref.name.as_str())
                        == Some(name.as_str())
                    && i.status.external_id.is_none()
            })
            .map(|i| i.metadata.name)
            .collect();
        if !waiting.is_empty() {
            return Err(Error::InProgress {
                reason: reason::DELETING,
                message: format!(
                    "waiting for GpuInstance {} to be restored from this snapshot before deleting it",
                    waiting.join(", ")
                ),
            });
        }
        if self
            .annotations()
            .get(DELETE_DEPENDENTS_ANNOTATION)
            .is_some_and(|v| v == "true")
        {
            return Ok(());
        }
        let images: Api<Image> = Api::namespaced(cx.client.clone(), &namespace);
        let image_objects: Vec<(String, Option<String>)> =
            pages::list_as::<_, Named>(&cx.client, &images)
                .await?
                .into_iter()
                .filter(|i| {
                    i.spec.snapshot_ref.as_ref().map(|r| r.name.as_str()) == Some(name.as_str())
                })
                .map(|i| (i.metadata.name, i.status.external_id))
                .collect();
        let cloud_images = match &self.cloud_status().external_id {
            Some(id) => match account.client.get_snapshot_image_relation(id).await {
                Ok(relation) => relation.image_ids,
                Err(e) if e.is_not_found() => Vec::new(),
                Err(e) => return Err(e.into()),
            },
            None => Vec::new(),
        };
        match dependents(&image_objects, &cloud_images) {
            None => Ok(()),
            Some(message) => Err(Error::InProgress {
                reason: reason::DEPENDENTS_EXIST,
                message,
            }),
        }
    }
}

/// What a snapshot's deletion reads of the GpuInstances and Images of its namespace: which
/// snapshot each names (a machine's `spec.source.snapshotRef`, an image's
/// `spec.snapshotRef`) and the cloud id it recorded. Read live, not from a cache: an object
/// made just before the deletion was asked for must hold it.
#[derive(Deserialize)]
struct Named {
    metadata: NamedMeta,
    #[serde(default)]
    spec: NamingSpec,
    #[serde(default)]
    status: RecordedId,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NamedMeta {
    name: String,
    #[serde(default)]
    deletion_timestamp: Option<IgnoredAny>,
}

impl NamedMeta {
    fn deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NamingSpec {
    /// A GpuInstance's.
    #[serde(default)]
    source: Option<gpucloud_api::gpu_instance::InstanceSource>,
    /// An Image's.
    #[serde(default)]
    snapshot_ref: Option<gpucloud_api::LocalRef>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RecordedId {
    #[serde(default)]
    external_id: Option<String>,
}

/// The create plan of `snapshot` of the machine `instance_id`, from the machine's cloud record.
/// Pure: `plan_create` reads the references and the record. The cloud snapshots `ACTIVE`
/// machines only: another state waits rather than fails.
pub fn snapshot_plan(
    snapshot: &Snapshot,
    instance_id: String,
    instance: &Instance,
) -> Result<SnapshotPlan, Error> {
    if instance.status != InstanceStatus::Active {
        return Err(Error::InProgress {
            reason: reason::WAITING_FOR_INSTANCE,
            message: format!(
                "instance {instance_id} is {}; the cloud snapshots ACTIVE instances only",
                instance.status
            ),
        });
    }
    Ok(SnapshotPlan {
        instance_id,
        request: CreateSnapshotRequest {
            // `create` names it.
            name: String::new(),
            description: snapshot.spec.description.clone(),
            labels: snapshot.spec.labels.iter().map(|l| l.0.clone()).collect(),
        },
        // The cloud snapshots the machine's storage.
        size_gb: u64::from(instance.specs.storage_gb),
    })
}

/// What holds a snapshot's deletion for its images, if anything: the Image objects naming it
/// (name and recorded image id), and the ids of the images the cloud relates to it. Cloud
/// images an Image object records are named by that object.
fn dependents(
    image_objects: &[(String, Option<String>)],
    cloud_images: &[String],
) -> Option<String> {
    let names: Vec<&str> = image_objects
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    let unnamed: Vec<&str> = cloud_images
        .iter()
        .filter(|id| {
            !image_objects
                .iter()
                .any(|(_, recorded)| recorded.as_ref() == Some(*id))
        })
        .map(String::as_str)
        .collect();
    let what = match (names.is_empty(), unnamed.is_empty()) {
        (true, true) => return None,
        (false, true) => format!("Image {}", names.join(", ")),
        (true, false) => format!("cloud image {} (no Image object)", unnamed.join(", ")),
        (false, false) => format!(
            "Image {} and cloud image {} (no Image object)",
            names.join(", "),
            unnamed.join(", ")
        ),
    };
    Some(format!(
        "{what} made from this snapshot would be deleted with it by the cloud: delete them \
         first, or annotate the Snapshot {DELETE_DEPENDENTS_ANNOTATION}=true to delete them \
         with it"
    ))
}

// === Cloud calls ===

cloud_record!(CloudSnapshot, id: snapshot_id, name: name, state: status);

/// The cloud's snapshots.
pub struct Snapshots;

impl CloudResource for Snapshots {
    type Record = CloudSnapshot;
    const LABEL: &'static str = "snapshot";

    async fn list(client: CloudClient) -> Result<Vec<CloudSnapshot>, CloudError> {
        Ok(client.list_snapshots().await?.snapshots)
    }

    async fn get(client: CloudClient, id: String) -> Result<Option<CloudSnapshot>, CloudError> {
        found(client.get_snapshot(&id).await)
    }

    async fn delete(client: CloudClient, record: CloudSnapshot) -> Result<(), CloudError> {
        // Deleting a deleted snapshot succeeds; an unknown one is gone as well.
        gone(client.delete_snapshot(&record.snapshot_id).await)
    }
}

#[cfg(test)]
mod tests {
    use super::{dependents, snapshot_plan};
    use crate::flow::kind::KindDeclarations;
    use gpucloud_api::{CloudStatus, Managed, Snapshot, SnapshotStatus};
    use gpucloud_cloud::model::{
        Instance, InstanceSpecs, InstanceStatus, PricingBody, Snapshot as CloudSnapshot,
    };

    fn snapshot(rate: Option<f64>) -> Snapshot {
        let mut object: Snapshot = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "epoch-3", "namespace": "ml"},
            "spec": {"instanceRef": {"name": "trainer"}},
        }))
        .unwrap();
        object.status = Some(SnapshotStatus {
            cloud: CloudStatus {
                external_id: Some("snap-1".into()),
                ..CloudStatus::default()
            },
            hourly_rate: rate,
            currency: rate.map(|_| "USD".to_string()),
            ..SnapshotStatus::default()
        });
        object
    }

    fn price_list(snapshot_price: f64) -> PricingBody {
        PricingBody {
            currency: "USD".into(),
            snapshot_price_per_gb_hour: snapshot_price,
            image_price_per_gb_hour: 0.00007,
            ..PricingBody::default()
        }
    }

    #[test]
    fn the_rate_is_the_size_times_the_snapshot_price() {
        for (before, size, snapshot_price, after) in [
            (None, 750, 0.00005, Some(0.0375)),
            (None, 200, 0.0001, Some(0.02)),
            (Some(0.01), 200, 0.0001, Some(0.02)),
            // No snapshot price in the list, or no size on the record: the rate stays.
            (Some(0.5), 200, 0.0, Some(0.5)),
            (None, 200, 0.0, None),
            (Some(0.5), 0, 0.0001, Some(0.5)),
        ] {
            let case = format!("{before:?} {size} GB at {snapshot_price}");
            let record = CloudSnapshot {
                snapshot_id: "snap-1".into(),
                size,
                ..CloudSnapshot::default()
            };
            let mut object = snapshot(before);
            object.priced(&record, &price_list(snapshot_price));
            let written = object.with_status(
                object.cloud_status(),
                Some(&record),
                k8s_openapi::jiff::Timestamp::now(),
            );
            let status = written.status.as_ref().unwrap();
            match after {
                Some(rate) => {
                    let shown = status.hourly_rate.expect(&case);
                    assert!((shown - rate).abs() < 1e-12, "{case}: {shown}");
                    assert_eq!(
                        written.hourly_cost(),
                        Some((shown, "USD".to_string())),
                        "{case}"
                    );
                }
                None => assert_eq!(written.hourly_cost(), None, "{case}"),
            }
        }
    }

    #[test]
    fn a_snapshot_is_planned_at_its_machines_storage_once_the_machine_is_active() {
        let machine = |status: InstanceStatus| Instance {
            instance_id: "vm-1".into(),
            status,
            specs: InstanceSpecs {
                storage_gb: 750,
                ..InstanceSpecs::default()
            },
            ..Instance::default()
        };
        let plan = snapshot_plan(
            &snapshot(None),
            "vm-1".into(),
            &machine(InstanceStatus::Active),
        )
        .unwrap();
        assert_eq!((plan.instance_id.as_str(), plan.size_gb), ("vm-1", 750));
        let waiting = snapshot_plan(
            &snapshot(None),
            "vm-1".into(),
            &machine(InstanceStatus::Shutoff),
        );
        assert!(
            matches!(waiting, Err(crate::Error::InProgress { .. })),
            "{:?}",
            waiting.err()
        );
    }

    fn objects(list: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        list.iter()
            .map(|(name, id)| (name.to_string(), id.map(str::to_string)))
            .collect()
    }

    /// Image objects (name, recorded id), cloud image ids, and how the message starts.
    type Case<'a> = (
        &'a [(&'a str, Option<&'a str>)],
        &'a [&'a str],
        Option<&'a str>,
    );

    #[test]
    fn images_hold_a_snapshot_deletion_and_are_named() {
        let cases: &[Case] = &[
            (&[], &[], None),
            (
                &[("base", Some("img-1"))],
                &["img-1"],
                Some("Image base made"),
            ),
            // Not made yet, or the cloud's relation not caught up: the object still holds.
            (&[("base", None)], &[], Some("Image base made")),
            (&[("base", Some("img-1"))], &[], Some("Image base made")),
            // Left by an Orphan Image, or made outside the operator.
            (
                &[],
                &["img-9"],
                Some("cloud image img-9 (no Image object) made"),
            ),
            (
                &[("a", Some("img-1")), ("b", None)],
                &["img-1", "img-9"],
                Some("Image a, b and cloud image img-9 (no Image object) made"),
            ),
        ];
        for (image_objects, cloud, expected) in cases {
            let cloud: Vec<String> = cloud.iter().map(|s| s.to_string()).collect();
            let message = dependents(&objects(image_objects), &cloud);
            match expected {
                None => assert_eq!(message, None, "{image_objects:?} {cloud:?}"),
                Some(start) => {
                    let message = message.expect("held");
                    assert!(message.starts_with(start), "{message}");
                    assert!(
                        message.contains("gpucloud.io/delete-dependents=true"),
                        "{message}"
                    );
                }
            }
        }
    }
}
