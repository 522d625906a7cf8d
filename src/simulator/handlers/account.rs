//! Balance, pricing and price quotes.

use gpucloud_cloud::model;

use super::Call;
use crate::catalog;
use crate::error::ApiError;
use crate::reply::Reply;

pub(super) fn get_balance(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.engine(|e, now| {
        // A machine that reached SHUTOFF or HIBERNATED since the last call bills less from then.
        e.settle(now);
        Reply::new(
            "balance retrieved",
            model::BalanceBody {
                balance: e.balance(now),
                currency: catalog::CURRENCY.to_string(),
            },
        )
    })
}

pub(super) fn get_pricing(call: &Call<'_>) -> Result<Reply, ApiError> {
    let pricing = call.engine(|e, _| Ok(e.pricing()))?;
    Reply::new("pricing retrieved", pricing)
}

pub(super) fn quote_pricing(call: &Call<'_>) -> Result<Reply, ApiError> {
    let body: model::PriceQuoteRequest = call.body()?;
    let quote = call.engine(|e, _| e.quote(&body))?;
    Reply::new("price quoted", quote)
}
