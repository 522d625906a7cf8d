//! Read-only catalogs: GPU stock and specs, regions, OS images.

use serde::{Deserialize, Serialize};

/// Stock of one GPU type in one region.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct GpuStock {
    pub gpu_type: String,
    pub region: String,
    /// GPUs that can be rented now.
    pub available: u32,
}

/// Body of `GetGpuStock`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct GpuStockList {
    pub gpus: Vec<GpuStock>,
    pub total_count: u64,
}

/// Specification and price of one GPU type; an instance's specs are these per-GPU values
/// times its GPU count.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct GpuSpec {
    pub gpu_type: String,
    pub name: String,
    pub gpu_memory_gb: u32,
    pub ram_gb_per_gpu: u32,
    pub vcpus_per_gpu: u32,
    pub storage_gb_per_gpu: u32,
    /// GPU counts an instance may have, e.g. `[1, 2, 4, 8]`.
    pub gpu_counts: Vec<u32>,
    pub price_per_gpu_hour: f64,
    pub currency: String,
}

/// Body of `GetGpuSpecs`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct GpuSpecList {
    pub gpus: Vec<GpuSpec>,
    pub total_count: u64,
}

/// A region.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Region {
    /// E.g. `us-east-1`.
    pub id: String,
    pub name: String,
    pub available: bool,
}

/// Body of `ListRegions`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct RegionList {
    pub regions: Vec<Region>,
    pub total_count: u64,
}

/// An OS image of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct OsImage {
    /// E.g. `ubuntu-22.04-cuda-12`.
    pub id: String,
    pub name: String,
    pub os: String,
    pub version: String,
    pub description: String,
}

/// Body of `ListOsImages`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct OsImageList {
    pub os_images: Vec<OsImage>,
    pub total_count: u64,
}
