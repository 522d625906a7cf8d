//! Tier, the response envelope, error bodies and codes: what every operation shares.

use serde::{Deserialize, Serialize};

use super::string_enum::string_enum;

string_enum! {
    /// Resource tier. Some operations apply to `legacy` only.
    Tier {
        Legacy = "legacy",
        Advanced = "advanced",
    }
}

/// A response: the envelope fields every response carries plus the operation's own body,
/// flattened into the same JSON object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ApiResponse<T> {
    #[serde(default)]
    pub success: bool,
    #[serde(default)]
    pub message: String,
    /// `req_` followed by 24 hex characters.
    #[serde(default)]
    pub request_id: String,
    /// Tier of the record the response is about, where it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// ISO 8601 UTC; present on restore responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Result code, e.g. `SSH_KEY_IMPORTED` on SSH-key create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(flatten)]
    pub body: T,
}

impl<T> ApiResponse<T> {
    /// A successful response with the given message, request id and body.
    pub fn ok(message: impl Into<String>, request_id: impl Into<String>, body: T) -> Self {
        ApiResponse {
            success: true,
            message: message.into(),
            request_id: request_id.into(),
            tier: None,
            timestamp: None,
            code: None,
            body,
        }
    }

    pub fn with_tier(mut self, tier: Tier) -> Self {
        self.tier = Some(tier);
        self
    }

    pub fn with_timestamp(mut self, timestamp: impl Into<String>) -> Self {
        self.timestamp = Some(timestamp.into());
        self
    }

    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }
}

impl<T: serde::de::DeserializeOwned> ApiResponse<T> {
    /// Decodes a response as its `Deserialize` does, without the copy of the whole document
    /// that `flatten` builds first: the envelope and the body are each read from the bytes,
    /// each skipping the other's fields. Through `flatten`, a list of ten thousand instances
    /// is held two or three times over while it is decoded.
    pub fn from_json(bytes: &[u8]) -> serde_json::Result<Self> {
        let Envelope {
            success,
            message,
            request_id,
            tier,
            timestamp,
            code,
        } = serde_json::from_slice(bytes)?;
        let body = serde_json::from_slice(bytes)?;
        Ok(ApiResponse {
            success,
            message,
            request_id,
            tier,
            timestamp,
            code,
            body,
        })
    }
}

/// `ApiResponse`'s own fields, for `from_json` (a test checks both decode alike).
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    success: bool,
    #[serde(default)]
    message: String,
    #[serde(default)]
    request_id: String,
    #[serde(default)]
    tier: Option<Tier>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    code: Option<String>,
}

/// Body of every error response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ErrorBody {
    pub success: bool,
    pub message: String,
    /// Machine-readable code, one of [`error_code`].
    pub code: String,
    pub request_id: String,
}

/// Machine-readable error codes of [`ErrorBody::code`].
pub mod error_code {
    pub const INVALID_API_KEY: &str = "INVALID_API_KEY";
    pub const TIER_NOT_SUPPORTED: &str = "TIER_NOT_SUPPORTED";
    pub const NOT_FOUND: &str = "NOT_FOUND";
    pub const ROUTE_NOT_FOUND: &str = "ROUTE_NOT_FOUND";
    pub const METHOD_NOT_ALLOWED: &str = "METHOD_NOT_ALLOWED";
    pub const INVALID_STATE: &str = "INVALID_STATE";
    pub const DUPLICATE_NAME: &str = "DUPLICATE_NAME";
    pub const CONFLICT: &str = "CONFLICT";
    /// 409: not enough GPUs of the type in stock in the region (assumed, docs/cloud-api.md).
    pub const INSUFFICIENT_STOCK: &str = "INSUFFICIENT_STOCK";
    pub const INSUFFICIENT_CREDIT: &str = "INSUFFICIENT_CREDIT";
    pub const RATE_LIMITED: &str = "RATE_LIMITED";
    pub const VALIDATION_ERROR: &str = "VALIDATION_ERROR";
    pub const PAYLOAD_TOO_LARGE: &str = "PAYLOAD_TOO_LARGE";
    pub const INTERNAL_ERROR: &str = "INTERNAL_ERROR";

    /// Every code above.
    pub const ALL: &[&str] = &[
        INVALID_API_KEY,
        TIER_NOT_SUPPORTED,
        NOT_FOUND,
        ROUTE_NOT_FOUND,
        METHOD_NOT_ALLOWED,
        INVALID_STATE,
        DUPLICATE_NAME,
        CONFLICT,
        INSUFFICIENT_STOCK,
        INSUFFICIENT_CREDIT,
        RATE_LIMITED,
        VALIDATION_ERROR,
        PAYLOAD_TOO_LARGE,
        INTERNAL_ERROR,
    ];
}

/// Success codes of [`ApiResponse::code`].
pub mod success_code {
    pub const SSH_KEY_IMPORTED: &str = "SSH_KEY_IMPORTED";
    pub const SSH_KEY_GENERATED: &str = "SSH_KEY_GENERATED";
}

/// Body of a response that carries nothing beyond the envelope.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Empty {}

/// Body of a delete of a resource identified by `id` (volume, image, firewall, SSH key,
/// startup script).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct DeletedBody {
    pub id: String,
}
