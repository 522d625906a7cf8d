//! The fixed catalogs of the simulated cloud: regions, GPU types, OS images, volume types,
//! firewall protocols, AI models and the prices of billed resources.

/// Currency of every price and of the balance.
pub const CURRENCY: &str = "USD";

/// Regions, each with a display name.
pub const REGIONS: &[(&str, &str)] = &[
    ("us-east-1", "US East (Virginia)"),
    ("eu-west-1", "EU West (Ireland)"),
    ("ap-southeast-1", "Asia Pacific (Singapore)"),
];

/// A GPU type and what one GPU of it brings to an instance.
#[derive(Debug, Clone, Copy)]
pub struct GpuType {
    pub id: &'static str,
    pub name: &'static str,
    pub memory_gb: u32,
    pub price_per_gpu_hour: f64,
    pub ram_gb_per_gpu: u32,
    pub vcpus_per_gpu: u32,
    pub storage_gb_per_gpu: u32,
    /// Largest `gpu_count` of one instance.
    pub max_count: u32,
}

impl GpuType {
    /// The GPU counts an instance of this type is offered with (the specs catalog's
    /// `gpu_counts`): powers of two up to `max_count`. GPU count is an enumeration of the
    /// interface, so a create or quote with another count is refused.
    pub fn gpu_counts(&self) -> Vec<u32> {
        [1, 2, 4, 8]
            .into_iter()
            .filter(|n| *n <= self.max_count)
            .collect()
    }

    /// `Err` naming the offered counts unless `count` is one of them.
    pub fn check_count(&self, count: u32) -> Result<(), String> {
        let offered = self.gpu_counts();
        if offered.contains(&count) {
            return Ok(());
        }
        let offered: Vec<String> = offered.iter().map(u32::to_string).collect();
        Err(format!(
            "gpu_count: {} is offered with {} GPUs, not {count}",
            self.id,
            offered.join(", ")
        ))
    }
}

pub const GPU_TYPES: &[GpuType] = &[
    GpuType {
        id: "A100-80G",
        name: "NVIDIA A100 80GB",
        memory_gb: 80,
        price_per_gpu_hour: 1.89,
        ram_gb_per_gpu: 120,
        vcpus_per_gpu: 12,
        storage_gb_per_gpu: 500,
        max_count: 8,
    },
    GpuType {
        id: "H100-80G",
        name: "NVIDIA H100 80GB",
        memory_gb: 80,
        price_per_gpu_hour: 2.99,
        ram_gb_per_gpu: 180,
        vcpus_per_gpu: 16,
        storage_gb_per_gpu: 750,
        max_count: 8,
    },
    GpuType {
        id: "L40S",
        name: "NVIDIA L40S 48GB",
        memory_gb: 48,
        price_per_gpu_hour: 1.10,
        ram_gb_per_gpu: 64,
        vcpus_per_gpu: 8,
        storage_gb_per_gpu: 300,
        max_count: 8,
    },
    GpuType {
        id: "RTX-A6000",
        name: "NVIDIA RTX A6000 48GB",
        memory_gb: 48,
        price_per_gpu_hour: 0.79,
        ram_gb_per_gpu: 48,
        vcpus_per_gpu: 6,
        storage_gb_per_gpu: 200,
        max_count: 4,
    },
];

/// OS images instances boot from: id, display name.
pub const OS_IMAGES: &[(&str, &str)] = &[
    ("ubuntu-22.04-cuda-12", "Ubuntu 22.04 with CUDA 12"),
    ("ubuntu-24.04-cuda-12", "Ubuntu 24.04 with CUDA 12"),
    ("debian-12-cuda-12", "Debian 12 with CUDA 12"),
];

/// Volume types: id, price per GB-hour, description.
pub const VOLUME_TYPES: &[(&str, f64, &str)] = &[
    ("NVMe", 0.000_2, "NVMe block storage"),
    ("SSD", 0.000_1, "SSD block storage"),
];

/// Snapshots are billed per GB-hour of their size.
pub const SNAPSHOT_PRICE_PER_GB_HOUR: f64 = 0.000_05;
/// Custom images are billed per GB-hour of their size.
pub const IMAGE_PRICE_PER_GB_HOUR: f64 = 0.000_05;

/// Firewall rule protocols.
pub const PROTOCOLS: &[&str] = &["tcp", "udp", "icmp", "any"];

/// Tiers a resource can carry.
pub const TIERS: &[&str] = &["legacy", "advanced"];

/// AI models: id, display name, price per million tokens.
pub const AI_MODELS: &[(&str, &str, f64)] = &[
    ("llama-3.1-8b-instruct", "Llama 3.1 8B Instruct", 0.20),
    ("llama-3.1-70b-instruct", "Llama 3.1 70B Instruct", 0.90),
    ("mistral-7b-instruct", "Mistral 7B Instruct", 0.15),
];

/// Balance below which AI chat is refused.
pub const AI_MINIMUM_BALANCE: f64 = 1.0;

/// An AI chat parameter: name, description, type, default, inclusive range.
#[derive(Debug, Clone, Copy)]
pub struct AiParameter {
    pub name: &'static str,
    pub description: &'static str,
    pub kind: AiParameterKind,
    pub default: Option<f64>,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AiParameterKind {
    Integer,
    Float,
}

impl AiParameterKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AiParameterKind::Integer => "integer",
            AiParameterKind::Float => "float",
        }
    }
}

/// The parameter table exactly as the interface document gives it.
pub const AI_PARAMETERS: &[AiParameter] = &[
    AiParameter {
        name: "max_tokens",
        description: "Maximum number of tokens to generate",
        kind: AiParameterKind::Integer,
        default: None,
        min: 1.0,
        max: 32768.0,
    },
    AiParameter {
        name: "temperature",
        description: "Sampling temperature",
        kind: AiParameterKind::Float,
        default: Some(1.0),
        min: 0.0,
        max: 2.0,
    },
    AiParameter {
        name: "top_p",
        description: "Nucleus sampling probability mass",
        kind: AiParameterKind::Float,
        default: None,
        min: 0.0,
        max: 1.0,
    },
    AiParameter {
        name: "top_k",
        description: "Number of highest-probability tokens considered (-1 for all)",
        kind: AiParameterKind::Integer,
        default: Some(-1.0),
        min: -1.0,
        max: 200.0,
    },
    AiParameter {
        name: "presence_penalty",
        description: "Penalty for tokens already present in the text",
        kind: AiParameterKind::Float,
        default: Some(0.0),
        min: -2.0,
        max: 2.0,
    },
    AiParameter {
        name: "repetition_penalty",
        description: "Penalty for repeated tokens",
        kind: AiParameterKind::Float,
        default: Some(1.0),
        min: -2.0,
        max: 2.0,
    },
];

pub fn gpu_type(id: &str) -> Option<&'static GpuType> {
    GPU_TYPES.iter().find(|gpu| gpu.id == id)
}

pub fn is_region(id: &str) -> bool {
    REGIONS.iter().any(|(region, _)| *region == id)
}

pub fn is_os_image(id: &str) -> bool {
    OS_IMAGES.iter().any(|(image, _)| *image == id)
}

pub fn volume_type_price(id: &str) -> Option<f64> {
    VOLUME_TYPES
        .iter()
        .find(|(name, _, _)| *name == id)
        .map(|(_, price, _)| *price)
}

pub fn ai_model(id: &str) -> Option<(&'static str, &'static str, f64)> {
    AI_MODELS.iter().copied().find(|(model, _, _)| *model == id)
}
