//! Operations of the AI chat: models, chat calls and token usage.

use super::CloudClient;
use crate::error::Error;
use crate::model::{
    AiModelsBody, AiUsageHistoryBody, AiUsageSummary, AiUsageSummaryBody, ChatBody, ChatRequest,
};
use crate::routes::Operation;

impl CloudClient {
    pub async fn list_ai_models(&self) -> Result<AiModelsBody, Error> {
        self.fetch(Operation::ListAiModels, &[]).await
    }

    /// One chat call, charged per token. Not repeated once the request may have been sent.
    pub async fn chat(&self, request: &ChatRequest) -> Result<ChatBody, Error> {
        self.send(Operation::ChatWithAi, &[], request).await
    }

    pub async fn get_ai_usage_summary(&self) -> Result<AiUsageSummary, Error> {
        let body: AiUsageSummaryBody = self.fetch(Operation::GetAiUsageSummary, &[]).await?;
        Ok(body.summary)
    }

    pub async fn get_ai_usage_history(&self) -> Result<AiUsageHistoryBody, Error> {
        self.fetch(Operation::GetAiUsageHistory, &[]).await
    }
}
