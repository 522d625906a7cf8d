//! Operations on the account: balance, pricing and price quotes.

use super::CloudClient;
use crate::error::Error;
use crate::model::{BalanceBody, PriceQuoteBody, PriceQuoteRequest, PricingBody};
use crate::routes::Operation;

impl CloudClient {
    pub async fn get_balance(&self) -> Result<BalanceBody, Error> {
        self.fetch(Operation::GetBalance, &[]).await
    }

    pub async fn get_pricing(&self) -> Result<PricingBody, Error> {
        self.fetch(Operation::GetPricing, &[]).await
    }

    pub async fn quote_pricing(
        &self,
        request: &PriceQuoteRequest,
    ) -> Result<PriceQuoteBody, Error> {
        self.send(Operation::QuotePricing, &[], request).await
    }
}
