//! `GpuOffering`: one GPU type in one region as the cloud's catalogs show it (specification,
//! price, stock), kept by the operator from the default account so that `kubectl get
//! gpuofferings` is the price-and-stock table a person choosing a machine wants.
//!
//! Read-only for everyone but the operator: the spec names the offering and never changes
//! (CEL), the rest is status, and the chart grants users read access only.

use crate::common::Column;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A GPU type offered in a region, with its price and how many GPUs are free.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gpucloud.io",
    version = "v1alpha1",
    kind = "GpuOffering",
    status = "GpuOfferingStatus",
    shortname = "gpuoffer",
    category = "gpucloud-catalog"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self == oldSelf").message("a GpuOffering is kept by the operator from the cloud's catalog: it cannot be edited"),
)]
pub struct GpuOfferingSpec {
    /// GPU type as the cloud names it, e.g. `H100-80G`.
    #[schemars(length(max = 64))]
    pub gpu_type: String,
    /// Region code, e.g. `us-east-1`.
    #[schemars(length(max = 64))]
    pub region: String,
}

/// The offering as the cloud's catalogs last showed it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuOfferingStatus {
    /// The GPU's model name, e.g. `NVIDIA H100 80GB`.
    #[serde(default)]
    pub gpu_model: String,
    /// Memory of one GPU in GB.
    #[serde(default)]
    pub gpu_memory_gb: u32,
    /// Virtual CPUs a machine gets per GPU.
    #[serde(default)]
    pub vcpus_per_gpu: u32,
    /// Memory a machine gets per GPU, in GB.
    #[serde(default)]
    pub ram_gb_per_gpu: u32,
    /// Boot disk a machine gets per GPU, in GB.
    #[serde(default)]
    pub disk_gb_per_gpu: u32,
    /// GPU counts a machine may have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_counts: Vec<u32>,
    /// Price of one GPU per hour, in `currency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub price_per_gpu_hour: Option<f64>,
    /// Currency of the price, e.g. `USD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// GPUs of the type free in the region.
    #[serde(default)]
    pub available: u32,
    /// The region's name, e.g. `US East (Virginia)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region_name: Option<String>,
    /// When the catalogs last showed these values (written only when something changed, and
    /// at least every ten resync intervals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refreshed_at: Option<Time>,
}

impl GpuOffering {
    /// The `kubectl get` columns.
    pub const COLUMNS: &[Column] = &[
        Column::new("GPU", "string", ".spec.gpuType"),
        Column::new("Region", "string", ".spec.region"),
        Column::new("VRAM(GB)", "integer", ".status.gpuMemoryGb"),
        Column::new("vCPUs/GPU", "integer", ".status.vcpusPerGpu"),
        Column::new("RAM/GPU(GB)", "integer", ".status.ramGbPerGpu"),
        Column::new("Price/GPU/h", "number", ".status.pricePerGpuHour"),
        Column::new("Currency", "string", ".status.currency"),
        Column::new("Available", "integer", ".status.available"),
        Column::new("Refreshed", "date", ".status.refreshedAt"),
        Column::new("Model", "string", ".status.gpuModel").wide(),
        Column::new("Disk/GPU(GB)", "integer", ".status.diskGbPerGpu").wide(),
        Column::new("Counts", "string", ".status.gpuCounts").wide(),
    ];

    /// The object's name for `gpu_type` in `region`: both lowercased, anything outside
    /// `[a-z0-9-]` a `-`, joined by a dot (`h100-80g.us-east-1`).
    pub fn name_for(gpu_type: &str, region: &str) -> String {
        let clean = |text: &str| -> String {
            let mapped: String = text
                .to_ascii_lowercase()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            let short: String = mapped.chars().take(120).collect();
            match short.trim_matches('-') {
                "" => "x".to_string(),
                trimmed => trimmed.to_string(),
            }
        };
        format!("{}.{}", clean(gpu_type), clean(region))
    }
}
