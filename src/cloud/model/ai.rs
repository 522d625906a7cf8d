//! AI chat: models, chat calls and token usage.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// An AI model and its price (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AiModel {
    pub id: String,
    pub name: String,
    #[serde(rename = "price_per_1M_tokens")]
    pub price_per_million_tokens: f64,
    pub currency: String,
}

/// One chat parameter of the models listing (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AiParameter {
    pub description: String,
    /// `integer` or `float`.
    #[serde(rename = "type")]
    pub value_type: String,
    pub default: Option<f64>,
    /// Minimum, then maximum (inclusive).
    pub range: [f64; 2],
}

/// Body of `ListAiModels` (as shown).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AiModelsBody {
    pub models: Vec<AiModel>,
    pub currency: String,
    pub minimum_balance: f64,
    /// Parameter name (e.g. `max_tokens`) to its description and range.
    pub parameters: BTreeMap<String, AiParameter>,
    /// Observed `api_key`.
    pub authentication_type: String,
    pub authenticated_user: String,
}

/// One message of a chat.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

/// Body of `ChatWithAi`. Unset parameters take the defaults of the models listing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
}

/// Tokens a chat used.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// Body of a `ChatWithAi` response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ChatBody {
    pub model: String,
    pub reply: ChatMessage,
    pub usage: TokenUsage,
    pub cost: f64,
    pub currency: String,
}

/// AI usage of one model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AiModelUsage {
    pub model: String,
    pub requests: u64,
    pub total_tokens: u64,
    pub total_cost: f64,
}

/// Totals of AI usage.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AiUsageSummary {
    pub total_requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub total_cost: f64,
    pub currency: String,
    pub by_model: Vec<AiModelUsage>,
}

/// Body of `GetAiUsageSummary`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AiUsageSummaryBody {
    pub summary: AiUsageSummary,
}

/// One chat call as the usage history records it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AiUsageRecord {
    pub id: String,
    pub model: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub cost: f64,
    pub currency: String,
    pub created_at: String,
}

/// Body of `GetAiUsageHistory`, newest first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AiUsageHistoryBody {
    pub records: Vec<AiUsageRecord>,
    pub total_count: u64,
}
