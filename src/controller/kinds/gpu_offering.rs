//! `GpuOffering` objects: the default account's GPU catalog (specifications, regions, stock,
//! prices) as cluster-scoped objects, one per GPU type and region, so that `kubectl get
//! gpuofferings` shows what can be rented where and at what price.
//!
//! Once per resync interval the keeper reads the catalog and the price list (shared with
//! placement through the account's caches: a handful of calls in all, however many offerings
//! or machines), lists the offerings (one API call), and writes only what changed: a new
//! offering is created, a changed one has its status replaced (version-checked), one the
//! catalog no longer lists is deleted. An unchanged offering is written again only after
//! [`HEARTBEAT`] resync intervals, so its `refreshedAt` shows the catalog is still read.
//! Only the leader runs it (it starts with the controllers).

use crate::accounts::account::Accounts;
use crate::accounts::catalog::Catalog;
use crate::flow::error::Error;
use gpucloud_api::{GpuOffering, GpuOfferingSpec, GpuOfferingStatus};
use gpucloud_cloud::model::PricingBody;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Resync intervals after which an unchanged offering is written again.
pub const HEARTBEAT: u32 = 10;

/// The offerings the catalog shows, by object name: every GPU type in every region, with
/// what is free there (none when the stock catalog does not list the pair). Pure.
pub fn desired(
    catalog: &Catalog,
    pricing: &PricingBody,
) -> BTreeMap<String, (GpuOfferingSpec, GpuOfferingStatus)> {
    let mut out = BTreeMap::new();
    for gpu in &catalog.gpus {
        let price = pricing
            .gpus
            .iter()
            .find(|p| p.gpu_type == gpu.gpu_type)
            .map(|p| p.price_per_gpu_hour)
            .or(Some(gpu.price_per_gpu_hour))
            .filter(|p| p.is_finite() && *p > 0.0);
        let currency = [pricing.currency.as_str(), gpu.currency.as_str()]
            .into_iter()
            .find(|c| !c.is_empty())
            .map(str::to_string);
        for region in &catalog.regions {
            let spec = GpuOfferingSpec {
                gpu_type: gpu.gpu_type.clone(),
                region: region.id.clone(),
            };
            let status = GpuOfferingStatus {
                gpu_model: gpu.name.clone(),
                gpu_memory_gb: gpu.gpu_memory_gb,
                vcpus_per_gpu: gpu.vcpus_per_gpu,
                ram_gb_per_gpu: gpu.ram_gb_per_gpu,
                disk_gb_per_gpu: gpu.storage_gb_per_gpu,
                gpu_counts: gpu.gpu_counts.clone(),
                price_per_gpu_hour: price,
                currency: currency.clone(),
                available: catalog.available(&gpu.gpu_type, &region.id),
                region_name: Some(region.name.clone()).filter(|n| !n.is_empty()),
                refreshed_at: None,
            };
            out.insert(
                GpuOffering::name_for(&gpu.gpu_type, &region.id),
                (spec, status),
            );
        }
    }
    out
}

/// Whether an offering showing `current` is to be written with `wanted` at `now`: something
/// but the time differs, or the time shown is older than `heartbeat`. Pure.
pub fn needs_write(
    current: Option<&GpuOfferingStatus>,
    wanted: &GpuOfferingStatus,
    now: Timestamp,
    heartbeat: Duration,
) -> bool {
    let Some(current) = current else {
        return true;
    };
    let same = GpuOfferingStatus {
        refreshed_at: None,
        ..current.clone()
    } == *wanted;
    let fresh = current.refreshed_at.as_ref().is_some_and(|at| {
        Duration::try_from(now.duration_since(at.0)).is_ok_and(|age| age < heartbeat)
    });
    !(same && fresh)
}

/// Keeps the offerings until the process ends: one pass per `every`.
pub async fn keep(client: kube::Client, accounts: Arc<Accounts>, every: Duration) {
    let api: Api<GpuOffering> = Api::all(client);
    loop {
        match pass(&api, &accounts, every).await {
            Ok(()) => {}
            // No default credentials: no catalog to show.
            Err(error @ Error::CredentialsMissing(_)) => {
                tracing::debug!(%error, "the GpuOfferings were not refreshed");
            }
            Err(error) => tracing::warn!(%error, "the GpuOfferings were not refreshed"),
        }
        tokio::time::sleep(every).await;
    }
}

/// One pass: read, compare, write what changed.
async fn pass(api: &Api<GpuOffering>, accounts: &Accounts, every: Duration) -> Result<(), Error> {
    // The default account: an empty namespace, as no object names a Secret of its own.
    let account = accounts.resolve("", None).await?;
    // Shared with placement: at most one read per catalog TTL, whoever asks.
    let catalog = account.catalog().await?;
    let pricing = account.pricing().await?;
    let wanted = desired(&catalog, &pricing);
    let existing: BTreeMap<String, GpuOffering> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|o| (o.name_any(), o))
        .collect();
    let now = Timestamp::now();
    let heartbeat = every * HEARTBEAT;
    for (name, (spec, status)) in &wanted {
        let current = existing.get(name);
        if !needs_write(
            current.and_then(|o| o.status.as_ref()),
            status,
            now,
            heartbeat,
        ) {
            continue;
        }
        let mut object = match current {
            Some(object) => object.clone(),
            None => {
                api.create(
                    &PostParams::default(),
                    &GpuOffering::new(name, spec.clone()),
                )
                .await?
            }
        };
        object.status = Some(GpuOfferingStatus {
            refreshed_at: Some(Time(now)),
            ..status.clone()
        });
        api.replace_status(name, &PostParams::default(), &object)
            .await?;
    }
    for name in existing.keys().filter(|name| !wanted.contains_key(*name)) {
        api.delete(name, &Default::default()).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_cloud::model::{GpuPrice, GpuSpec, Region};

    fn catalog() -> Catalog {
        Catalog {
            read_at: Timestamp::UNIX_EPOCH,
            stock: BTreeMap::from([(("H100-80G".to_string(), "us-east-1".to_string()), 7)]),
            gpus: vec![GpuSpec {
                gpu_type: "H100-80G".into(),
                name: "NVIDIA H100 80GB".into(),
                gpu_memory_gb: 80,
                ram_gb_per_gpu: 180,
                vcpus_per_gpu: 16,
                storage_gb_per_gpu: 750,
                gpu_counts: vec![1, 2, 4, 8],
                price_per_gpu_hour: 2.99,
                currency: "USD".into(),
            }],
            regions: ["us-east-1", "eu-west-1"]
                .iter()
                .map(|r| Region {
                    id: r.to_string(),
                    name: format!("{r} name"),
                    available: true,
                })
                .collect(),
        }
    }

    fn pricing(price: f64) -> PricingBody {
        PricingBody {
            currency: "USD".into(),
            gpus: vec![GpuPrice {
                gpu_type: "H100-80G".into(),
                price_per_gpu_hour: price,
            }],
            ..PricingBody::default()
        }
    }

    #[test]
    fn one_offering_per_gpu_type_and_region_priced_by_the_price_list() {
        let offerings = desired(&catalog(), &pricing(3.5));
        let names: Vec<&String> = offerings.keys().collect();
        assert_eq!(names, ["h100-80g.eu-west-1", "h100-80g.us-east-1"]);
        let (spec, status) = &offerings["h100-80g.us-east-1"];
        assert_eq!(
            (spec.gpu_type.as_str(), spec.region.as_str()),
            ("H100-80G", "us-east-1")
        );
        assert_eq!(status.available, 7);
        assert_eq!(status.price_per_gpu_hour, Some(3.5));
        assert_eq!(status.currency.as_deref(), Some("USD"));
        assert_eq!(status.vcpus_per_gpu, 16);
        assert_eq!(status.region_name.as_deref(), Some("us-east-1 name"));
        // Not in the stock catalog: none free.
        assert_eq!(offerings["h100-80g.eu-west-1"].1.available, 0);
        // A price list without the type: the specification's price.
        let from_spec = desired(&catalog(), &PricingBody::default());
        assert_eq!(
            from_spec["h100-80g.us-east-1"].1.price_per_gpu_hour,
            Some(2.99)
        );
    }

    #[test]
    fn an_offering_is_written_when_it_changed_or_its_time_is_old() {
        let (_, wanted) = desired(&catalog(), &pricing(3.5))
            .remove("h100-80g.us-east-1")
            .unwrap();
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let shown = GpuOfferingStatus {
            refreshed_at: Some(Time(at(1000))),
            ..wanted.clone()
        };
        let hour = Duration::from_secs(3600);
        assert!(needs_write(None, &wanted, at(1000), hour));
        assert!(!needs_write(Some(&shown), &wanted, at(1010), hour));
        assert!(needs_write(Some(&shown), &wanted, at(1000 + 3600), hour));
        let fewer = GpuOfferingStatus {
            available: 6,
            ..wanted.clone()
        };
        assert!(needs_write(Some(&shown), &fewer, at(1010), hour));
    }

    #[test]
    fn names_are_dns_subdomains() {
        assert_eq!(
            GpuOffering::name_for("H100-80G", "us-east-1"),
            "h100-80g.us-east-1"
        );
        assert_eq!(
            GpuOffering::name_for("RTX A6000", "EU_West"),
            "rtx-a6000.eu-west"
        );
        assert_eq!(GpuOffering::name_for("--", "a"), "x.a");
    }
}
