//! The JSON answers to a path no route serves and to a method a route does not take, shared
//! by the API and the admin API.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{Method as HttpMethod, StatusCode, Uri};
use axum::response::Response;

use crate::error::ApiError;
use crate::reply::error_response;
use crate::state::AppState;

pub(crate) async fn route_not_found(
    State(state): State<Arc<AppState>>,
    method: HttpMethod,
    uri: Uri,
) -> Response {
    state.count(None, StatusCode::NOT_FOUND);
    error_response(
        &ApiError::RouteNotFound {
            method: method.to_string(),
            path: uri.path().to_string(),
        },
        state.next_request_id(),
    )
}

pub(crate) async fn method_not_allowed(
    State(state): State<Arc<AppState>>,
    method: HttpMethod,
    uri: Uri,
) -> Response {
    state.count(None, StatusCode::METHOD_NOT_ALLOWED);
    error_response(
        &ApiError::MethodNotAllowed {
            method: method.to_string(),
            path: uri.path().to_string(),
        },
        state.next_request_id(),
    )
}
