//! The admin API under `/_admin/`: read an account's whole state and the call counters, set
//! faults, the balance, GPU stock and prices, advance the clock, reset. Mounted only when an
//! admin token is configured; every call needs `Authorization: Bearer <token>` (the API key
//! never works).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::auth::authorize_admin;
use crate::config::FaultPlan;
use crate::engine::{Engine, SimTime};
use crate::error::ApiError;
use crate::fallbacks::method_not_allowed;
use crate::reply::error_response;
use crate::request::{QueryParams, body_bytes, parse_body};
use crate::state::AppState;

pub const PREFIX: &str = "/_admin";

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/_admin/state", get(state).fallback(method_not_allowed))
        .route(
            "/_admin/holdings",
            get(holdings).fallback(method_not_allowed),
        )
        .route(
            "/_admin/counters",
            get(counters).fallback(method_not_allowed),
        )
        .route("/_admin/ledger", get(ledger).fallback(method_not_allowed))
        .route(
            "/_admin/faults",
            get(get_faults).put(put_faults).fallback(method_not_allowed),
        )
        .route(
            "/_admin/balance",
            put(put_balance).fallback(method_not_allowed),
        )
        .route(
            "/_admin/clock/advance",
            post(advance_clock).fallback(method_not_allowed),
        )
        .route("/_admin/stock", put(put_stock).fallback(method_not_allowed))
        .route(
            "/_admin/prices",
            put(put_price).fallback(method_not_allowed),
        )
        .route("/_admin/reset", post(reset).fallback(method_not_allowed))
}

/// Body of `PUT /_admin/stock`: how many GPUs of a type are free in a region from now on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetStock {
    pub gpu_type: String,
    pub region: String,
    pub available: u32,
}

/// Body of `PUT /_admin/prices`: the price per GPU-hour of a type from now on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetPrice {
    pub gpu_type: String,
    pub price_per_gpu_hour: f64,
}

/// Body of `PUT /_admin/balance`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetBalance {
    pub balance: f64,
}

/// Body of `POST /_admin/clock/advance`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AdvanceClock {
    pub seconds: f64,
}

/// Checks the admin token, then answers with what `act` returns.
fn respond(
    app: &AppState,
    headers: &HeaderMap,
    act: impl FnOnce() -> Result<serde_json::Value, ApiError>,
) -> Response {
    match authorize_admin(app, headers).and_then(|()| act()) {
        Ok(value) => (StatusCode::OK, axum::Json(value)).into_response(),
        Err(error) => error_response(&error, app.next_request_id()),
    }
}

/// The JSON body of an admin call.
fn decode<T: DeserializeOwned>(
    app: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    parse_body(&body_bytes(body, app.config.max_body_bytes)?)
}

fn encode(value: impl Serialize) -> Result<serde_json::Value, ApiError> {
    serde_json::to_value(value).map_err(|err| ApiError::Internal {
        message: format!("response encoding failed: {err}"),
    })
}

/// One account's snapshot: that of `?account=N` (0 is the account of `api_keys`, then
/// `other_accounts` in order), the first account's without the query.
async fn state(
    State(app): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    respond(&app, &headers, || {
        read_account(&app, query.as_deref(), |engine, now| {
            engine.snapshot_account(now)
        })
    })
}

/// How many resources of each kind an account holds, chosen as for `state`: what a caller
/// waiting for an account to empty polls, without the whole snapshot written each time.
async fn holdings(
    State(app): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    respond(&app, &headers, || {
        read_account(&app, query.as_deref(), |engine, now| engine.holdings(now))
    })
}

/// What `read` finds in the account the query names, settled to now.
fn read_account<T: Serialize>(
    app: &AppState,
    query: Option<&str>,
    read: impl FnOnce(&mut Engine, SimTime) -> T,
) -> Result<serde_json::Value, ApiError> {
    let account = account_of_query(query)?;
    let found = app
        .with_account(account, |engine, now| {
            engine.settle(now);
            read(engine, now)
        })
        .ok_or_else(|| ApiError::not_found("account", &account.to_string()))?;
    encode(found)
}

/// The account a query's `account` parameter names; the first account (0) without one.
fn account_of_query(query: Option<&str>) -> Result<usize, ApiError> {
    let query = QueryParams::parse(query, &["account"])?;
    let Some(account) = query.unsigned("account")? else {
        return Ok(0);
    };
    // An index past `usize` names no account, as one past the last does.
    usize::try_from(account).map_err(|_| ApiError::not_found("account", &account.to_string()))
}

async fn counters(State(app): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    respond(&app, &headers, || encode(app.counters()))
}

/// Every call that changed an account, in the order they acted (empty unless the ledger is
/// kept).
async fn ledger(State(app): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    respond(&app, &headers, || encode(app.ledger()))
}

async fn get_faults(State(app): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    respond(&app, &headers, || encode(app.faults()))
}

async fn put_faults(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(&app, &headers, || {
        let plan: FaultPlan = decode(&app, body)?;
        plan.validate().map_err(ApiError::validation)?;
        plan.validate_accounts(app.accounts())
            .map_err(ApiError::validation)?;
        app.set_faults(plan.clone());
        encode(plan)
    })
}

async fn put_balance(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(&app, &headers, || {
        let request: SetBalance = decode(&app, body)?;
        if !request.balance.is_finite() {
            return Err(ApiError::validation("balance: must be a finite number"));
        }
        app.with_engine(|engine, now| engine.set_balance(request.balance, now));
        encode(request)
    })
}

async fn advance_clock(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(&app, &headers, || {
        let request: AdvanceClock = decode(&app, body)?;
        if !(request.seconds.is_finite() && request.seconds >= 0.0 && request.seconds <= 3.2e9) {
            return Err(ApiError::validation(
                "seconds: must be a non-negative number (at most about a century)",
            ));
        }
        app.clock.advance(Duration::from_secs_f64(request.seconds));
        encode(request)
    })
}

async fn put_stock(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(&app, &headers, || {
        let request: SetStock = decode(&app, body)?;
        app.set_gpu_stock(&request.gpu_type, &request.region, request.available)?;
        encode(app.with_engine(|engine, now| engine.gpu_stock(now)))
    })
}

async fn put_price(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(&app, &headers, || {
        let request: SetPrice = decode(&app, body)?;
        app.set_gpu_price(&request.gpu_type, request.price_per_gpu_hour)?;
        encode(app.with_engine(|engine, _| engine.pricing()))
    })
}

async fn reset(State(app): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    respond(&app, &headers, || {
        app.reset();
        Ok(serde_json::json!({"reset": true}))
    })
}
