//! Operations of the AI chat: models, chat calls and token usage.

use crate::model::{
    AiModelsBody, AiUsageHistoryBody, AiUsageSummary, AiUsageSummaryBody, ChatBody, ChatRequest,
};

calls! {
    fn list_ai_models() -> AiModelsBody = fetch(ListAiModels, []);
    /// One chat call, charged per token. Not repeated once the request may have been sent.
    fn chat(request: &ChatRequest) -> ChatBody = send(ChatWithAi, [], request);
    fn get_ai_usage_summary() -> AiUsageSummary
        = fetch(GetAiUsageSummary, []) .summary in AiUsageSummaryBody;
    fn get_ai_usage_history() -> AiUsageHistoryBody = fetch(GetAiUsageHistory, []);
}
