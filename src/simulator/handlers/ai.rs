//! AI chat: models, chat calls and token usage.

use gpucloud_cloud::model;

use super::Call;
use crate::engine::Engine;
use crate::error::ApiError;
use crate::faults::stable_hash;
use crate::reply::Reply;

pub(super) fn list_ai_models(call: &Call<'_>) -> Result<Reply, ApiError> {
    Reply::new(
        "AI models retrieved",
        Engine::ai_models(&authenticated_user(call.request.api_key)),
    )
}

pub(super) fn chat_with_ai(call: &Call<'_>) -> Result<Reply, ApiError> {
    let body: model::ChatRequest = call.body()?;
    call.engine(|e, now| Reply::new("chat completed", e.chat(&body, now)?))
}

pub(super) fn get_ai_usage_summary(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.engine(|e, _| {
        Reply::new(
            "AI usage summary retrieved",
            model::AiUsageSummaryBody {
                summary: e.ai_usage_summary(),
            },
        )
    })
}

pub(super) fn get_ai_usage_history(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.engine(|e, _| {
        let records = e.ai_usage_history();
        Reply::new(
            "AI usage history retrieved",
            model::AiUsageHistoryBody {
                total_count: records.len() as u64,
                records,
            },
        )
    })
}

/// A stable, non-secret name for the account of an API key: a short hash, never the key.
fn authenticated_user(api_key: &str) -> String {
    format!("sim-user-{:08x}", stable_hash(api_key) as u32)
}
