//! The cloud's GPU catalog as an account last read it: stock per GPU type and region, the GPU
//! types' specifications and the regions. Placement (`placement.rs`) decides from it, and it is
//! read for the whole account at once (`Account::catalog`, cached for the catalog TTL), never
//! per object: however many machines wait for GPUs, the catalog costs three calls per resync
//! interval.

use gpucloud_api::GpuOffering;
use gpucloud_cloud::model::{GpuPrice, GpuSpec, PricingBody, Region};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// One read of the stock, specification and region catalogs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Catalog {
    /// When the stock was read (the wall clock): a refusal of the cloud after this moment is
    /// newer news than the stock.
    pub read_at: Timestamp,
    /// GPUs free now, by (GPU type, region).
    pub stock: BTreeMap<(String, String), u32>,
    /// The GPU types, in the cloud's order.
    pub gpus: Vec<GpuSpec>,
    /// The regions, in the cloud's order.
    pub regions: Vec<Region>,
}

impl Catalog {
    /// Reads the three catalogs: three calls.
    pub async fn read(client: &CloudClient) -> Result<Catalog, CloudError> {
        let read_at = Timestamp::now();
        let stock = client.get_gpu_stock().await?;
        let gpus = client.get_gpu_specs().await?.gpus;
        let regions = client.list_regions().await?.regions;
        Ok(Catalog {
            read_at,
            stock: stock
                .gpus
                .into_iter()
                .map(|s| ((s.gpu_type, s.region), s.available))
                .collect(),
            gpus,
            regions,
        })
    }

    /// The catalog and the GPU prices the cluster's `GpuOffering`s show (what `gpu_offering.rs`
    /// writes from a read of the catalogs, read back), as of `read_at`: for a reader with
    /// Kubernetes access only. GPU types and regions in the offerings' name order; the price
    /// list holds the GPU prices and their currency, no storage, snapshot or image price (the
    /// offerings do not show them). Pure.
    pub fn from_offerings(offerings: &[GpuOffering], read_at: Timestamp) -> (Catalog, PricingBody) {
        let mut sorted: Vec<&GpuOffering> = offerings.iter().collect();
        sorted.sort_by(|a, b| {
            (&a.spec.gpu_type, &a.spec.region).cmp(&(&b.spec.gpu_type, &b.spec.region))
        });
        let mut catalog = Catalog {
            read_at,
            ..Catalog::default()
        };
        let mut pricing = PricingBody::default();
        for offering in sorted {
            let (gpu_type, region) = (&offering.spec.gpu_type, &offering.spec.region);
            let status = offering.status.clone().unwrap_or_default();
            catalog
                .stock
                .insert((gpu_type.clone(), region.clone()), status.available);
            if catalog.gpu(gpu_type).is_none() {
                catalog.gpus.push(GpuSpec {
                    gpu_type: gpu_type.clone(),
                    name: status.gpu_model.clone(),
                    gpu_memory_gb: status.gpu_memory_gb,
                    ram_gb_per_gpu: status.ram_gb_per_gpu,
                    vcpus_per_gpu: status.vcpus_per_gpu,
                    storage_gb_per_gpu: status.disk_gb_per_gpu,
                    gpu_counts: status.gpu_counts.clone(),
                    price_per_gpu_hour: status.price_per_gpu_hour.unwrap_or_default(),
                    currency: status.currency.clone().unwrap_or_default(),
                });
            }
            if !catalog.has_region(region) {
                catalog.regions.push(Region {
                    id: region.clone(),
                    name: status.region_name.clone().unwrap_or_default(),
                    available: true,
                });
            }
            let priced = pricing.gpus.iter().any(|p| &p.gpu_type == gpu_type);
            if let (false, Some(price)) = (priced, status.price_per_gpu_hour) {
                pricing.gpus.push(GpuPrice {
                    gpu_type: gpu_type.clone(),
                    price_per_gpu_hour: price,
                });
            }
            if let (true, Some(currency)) = (pricing.currency.is_empty(), status.currency) {
                pricing.currency = currency;
            }
        }
        (catalog, pricing)
    }

    /// GPUs of `gpu_type` free in `region` (none when the catalog does not list the pair).
    pub fn available(&self, gpu_type: &str, region: &str) -> u32 {
        self.stock
            .get(&(gpu_type.to_string(), region.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// The specification of `gpu_type`.
    pub fn gpu(&self, gpu_type: &str) -> Option<&GpuSpec> {
        self.gpus.iter().find(|g| g.gpu_type == gpu_type)
    }

    /// Whether the cloud has a region `id`.
    pub fn has_region(&self, id: &str) -> bool {
        self.regions.iter().any(|r| r.id == id)
    }

    /// The GPU types, comma-separated: what an error naming an unknown one lists.
    pub fn gpu_type_names(&self) -> String {
        self.gpus
            .iter()
            .map(|g| g.gpu_type.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The regions, comma-separated.
    pub fn region_names(&self) -> String {
        self.regions
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether any of `wants` (GPU type, region, count) has that many GPUs free.
    pub fn satisfies_any(&self, wants: &[Want]) -> bool {
        wants
            .iter()
            .any(|w| self.available(&w.gpu_type, &w.region) >= w.gpu_count)
    }
}

/// GPUs an object waiting for stock could use: `gpu_count` of `gpu_type` in `region`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Want {
    pub gpu_type: String,
    pub region: String,
    pub gpu_count: u32,
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} x{} in {}",
            self.gpu_type, self.gpu_count, self.region
        )
    }
}
