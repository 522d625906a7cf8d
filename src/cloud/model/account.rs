//! Pricing, price quotes and the account balance.

use serde::{Deserialize, Serialize};

/// Price of one GPU type.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct GpuPrice {
    pub gpu_type: String,
    pub price_per_gpu_hour: f64,
}

/// Price of one volume type.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct StoragePrice {
    pub volume_type: String,
    pub price_per_gb_hour: f64,
}

/// Body of `GetPricing`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct PricingBody {
    pub currency: String,
    pub gpus: Vec<GpuPrice>,
    pub storage: Vec<StoragePrice>,
    pub snapshot_price_per_gb_hour: f64,
    pub image_price_per_gb_hour: f64,
}

/// Body of `QuotePricing`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct PriceQuoteRequest {
    pub gpu_type: String,
    pub gpu_count: u32,
    /// Hours to price; defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hours: Option<f64>,
}

/// Body of a `QuotePricing` response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct PriceQuoteBody {
    pub gpu_type: String,
    pub gpu_count: u32,
    pub hours: f64,
    pub hourly_rate: f64,
    pub total_cost: f64,
    pub currency: String,
}

/// Body of `GetBalance`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct BalanceBody {
    pub balance: f64,
    pub currency: String,
}
