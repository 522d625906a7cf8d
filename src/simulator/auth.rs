//! Who may call: an accepted API key for the API (which names the caller's account), the
//! admin token for the admin API. Secrets are compared in constant time.

use axum::http::{HeaderMap, header};

use crate::error::ApiError;
use crate::state::{AppState, Caller};

/// The API key of the request and who it is, if it is one of the accepted keys.
pub(crate) fn authenticate<'a>(
    state: &'a AppState,
    headers: &HeaderMap,
) -> Option<(&'a str, Caller)> {
    let given = headers.get("x-api-key")?.to_str().ok()?;
    std::iter::once(&state.config.api_keys)
        .chain(&state.config.other_accounts)
        .enumerate()
        .flat_map(|(account, keys)| {
            keys.iter()
                .enumerate()
                .map(move |(key, value)| (value, Caller { account, key }))
        })
        .find(|(key, _)| constant_time_eq(key.as_bytes(), given.as_bytes()))
        .map(|(key, caller)| (key.as_str(), caller))
}

/// Whether the request carries the admin token as `Authorization: Bearer <token>`; the API
/// key never works here.
pub(crate) fn authorize_admin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let expected = state
        .config
        .admin_token
        .as_deref()
        .ok_or(ApiError::InvalidAdminToken)?;
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .ok_or(ApiError::InvalidAdminToken)?;
    if constant_time_eq(expected.as_bytes(), given.trim().as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::InvalidAdminToken)
    }
}

/// Compares secrets without stopping at the first differing byte.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
