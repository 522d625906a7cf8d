//! Operations on the account: balance, pricing and price quotes.

use crate::model::{BalanceBody, PriceQuoteBody, PriceQuoteRequest, PricingBody};

calls! {
    fn get_balance() -> BalanceBody = fetch(GetBalance, []);
    fn get_pricing() -> PricingBody = fetch(GetPricing, []);
    fn quote_pricing(request: &PriceQuoteRequest) -> PriceQuoteBody = send(QuotePricing, [], request);
}
