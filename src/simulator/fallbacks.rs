//! The JSON answers to a path no route serves and to a method a route does not take, shared
//! by the API and the admin API.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{Method as HttpMethod, Uri};
use axum::response::Response;

use crate::error::ApiError;
use crate::reply::error_response;
use crate::state::AppState;

pub(crate) async fn route_not_found(
    State(state): State<Arc<AppState>>,
    method: HttpMethod,
    uri: Uri,
) -> Response {
    let (method, path) = (method.to_string(), uri.path().to_string());
    refuse(&state, ApiError::RouteNotFound { method, path })
}

pub(crate) async fn method_not_allowed(
    State(state): State<Arc<AppState>>,
    method: HttpMethod,
    uri: Uri,
) -> Response {
    let (method, path) = (method.to_string(), uri.path().to_string());
    refuse(&state, ApiError::MethodNotAllowed { method, path })
}

/// Counts the refusal (no operation) and answers it.
fn refuse(state: &AppState, error: ApiError) -> Response {
    state.count(None, None, error.status());
    error_response(&error, state.next_request_id())
}
