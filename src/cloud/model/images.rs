//! Custom images made from snapshots, and which snapshot each image came from.

use serde::{Deserialize, Serialize};

use super::string_enum::string_enum;

string_enum! {
    /// Status of a custom image.
    ImageStatus {
        Creating = "creating",
        Available = "available",
        Error = "error",
    }
}

/// A custom image made from a snapshot.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub snapshot_id: String,
    pub region: String,
    /// Size in GB.
    pub size: u64,
    pub status: ImageStatus,
    pub created_at: String,
}

/// Body of `CreateImage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CreateImageRequest {
    pub snapshot_id: String,
    pub name: String,
}

/// Body of a response carrying one image under `image`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ImageBody {
    pub image: Image,
}

/// Body of `ListImages`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ImageList {
    pub images: Vec<Image>,
    pub total_count: u64,
}

/// Which custom images were made from a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct SnapshotImageRelation {
    pub snapshot_id: String,
    pub snapshot_name: String,
    pub image_ids: Vec<String>,
}

/// Body of `GetSnapshotImageRelation`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct RelationBody {
    pub relation: SnapshotImageRelation,
}

/// Body of `ListSnapshotImageRelations`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct RelationList {
    pub relations: Vec<SnapshotImageRelation>,
    pub total_count: u64,
}
