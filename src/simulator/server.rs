//! The HTTP server: the router built from the route table, and the path of one API request
//! through authentication, the rate limit, fault injection, the handler, the ledger and the
//! reply. The pieces it strings together live in their own modules ([`crate::state`],
//! [`crate::auth`], [`crate::faults`], [`crate::reply`], [`crate::request`], ...).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{MethodRouter, delete, get, post, put};
use gpucloud_cloud::routes::{Method, Operation};

use crate::admin;
use crate::auth::authenticate;
use crate::config::DropMode;
use crate::error::ApiError;
use crate::fallbacks::{method_not_allowed, route_not_found};
use crate::handlers;
use crate::openapi;
use crate::reply::json_response;
use crate::request::body_bytes;
use crate::state::lock;

// The pieces the server strings together, also under `server` where callers name them.
pub use crate::auth::constant_time_eq;
pub use crate::clock::Clock;
pub use crate::counters::Counters;
pub use crate::faults::{FaultCounts, FaultDecision};
pub use crate::reply::{Reply, error_response};
pub use crate::request::{QueryParams, parse_body};
pub use crate::state::{AppState, Caller, LedgerEntry};

/// The API router (every operation of the route table), the admin API when a token is
/// configured, `/openapi.json`, and JSON fallbacks.
pub fn router(state: Arc<AppState>) -> Router {
    let mut by_path: BTreeMap<&'static str, MethodRouter<Arc<AppState>>> = BTreeMap::new();
    for &operation in Operation::ALL {
        let handler = move |State(state): State<Arc<AppState>>,
                            path: Result<Path<Vec<String>>, PathRejection>,
                            RawQuery(query): RawQuery,
                            headers: HeaderMap,
                            body: Result<Bytes, BytesRejection>| async move {
            serve_operation(state, operation, path, query, headers, body).await
        };
        let route = match operation.method() {
            Method::Get => get(handler),
            Method::Post => post(handler),
            Method::Put => put(handler),
            Method::Delete => delete(handler),
        };
        let entry = by_path.remove(operation.path());
        let merged = match entry {
            Some(existing) => existing.merge(route),
            None => route,
        };
        by_path.insert(operation.path(), merged);
    }
    let mut router = Router::new();
    for (path, route) in by_path {
        router = router.route(path, route.fallback(method_not_allowed));
    }
    router = router.route(
        "/openapi.json",
        get(serve_openapi).fallback(method_not_allowed),
    );
    if state.config.admin_token.is_some() {
        router = router.merge(admin::router());
    }
    let limit = state.config.max_body_bytes;
    router
        .fallback(route_not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

async fn serve_openapi() -> Response {
    json_response(StatusCode::OK, &openapi::document())
}

async fn serve_operation(
    state: Arc<AppState>,
    operation: Operation,
    path: Result<Path<Vec<String>>, PathRejection>,
    query: Option<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let request_id = state.next_request_id();
    state.count_received(operation);
    // A request the server has received is carried out, and counted, even if the client stops
    // waiting (a timeout during the latency before acting): as with a real service, the client
    // cannot tell a request that never arrived from one that acted after it gave up.
    let task_request_id = request_id.clone();
    let answering = tokio::spawn(async move {
        let request_id = task_request_id;
        let Answered {
            response,
            drop,
            caller,
        } = answer(&state, operation, path, query, &headers, body, &request_id).await;
        state.count(Some(operation), caller, response.status());
        tracing::debug!(
            operation = operation.name(),
            status = response.status().as_u16(),
            account = caller.map(|caller| caller.account),
            request_id,
            dropped = drop.is_some(),
            "simulated request"
        );
        (response, drop)
    });
    let (response, drop) = match answering.await {
        Ok(answered) => answered,
        Err(failed) => (
            error_response(
                &ApiError::Internal {
                    message: format!("the request's task failed: {failed}"),
                },
                request_id,
            ),
            None,
        ),
    };
    match drop {
        None => response,
        Some(DropMode::Delay { delay }) => {
            tokio::time::sleep(delay).await;
            response
        }
        Some(DropMode::CloseConnection) => broken_response(),
    }
}

/// A response whose body fails after the head, so the connection is closed without a
/// complete answer.
fn broken_response() -> Response {
    let stream = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "response dropped by fault injection",
        ))
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer to one API request, with what the server does after it.
struct Answered {
    response: Response,
    /// How the response is lost, when the fault plan drops it.
    drop: Option<DropMode>,
    /// Who made the request; `None` when its API key was missing or not accepted.
    caller: Option<Caller>,
}

async fn answer(
    state: &AppState,
    operation: Operation,
    path: Result<Path<Vec<String>>, PathRejection>,
    query: Option<String>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    request_id: &str,
) -> Answered {
    let Some((api_key, caller)) = authenticate(state, headers) else {
        return Answered {
            response: error_response(&ApiError::InvalidApiKey, request_id.to_string()),
            drop: None,
            caller: None,
        };
    };
    let fail = |error: ApiError| Answered {
        response: error_response(&error, request_id.to_string()),
        drop: None,
        caller: Some(caller),
    };
    if let Some(limit) = state.config.rate_limit
        && let Err(retry_after_secs) = lock(&state.limiter).take(api_key, limit)
    {
        return fail(ApiError::RateLimited { retry_after_secs });
    }
    let request_body = body.as_ref().ok().and_then(|bytes| {
        (operation.method() != Method::Get)
            .then(|| serde_json::from_slice::<serde_json::Value>(bytes).ok())
            .flatten()
    });
    let new_name = request_body.as_ref().and_then(new_resource_name);
    let mut decision = lock(&state.faults).decide(operation, caller.account);
    if decision.throttle_secs.is_none()
        && !decision.internal_error
        && let Some(name) = &new_name
        && let Some(delay) = state.take_late_act(name, caller.account)
    {
        decision.latency += delay;
        decision.late = true;
    }
    lock(&state.fault_counts).add(&decision);
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    if decision.late {
        lock(&state.fault_counts).late_acts_done += 1;
    }
    if let Some(retry_after_secs) = decision.throttle_secs {
        return fail(ApiError::RateLimited { retry_after_secs });
    }
    if decision.internal_error {
        return fail(ApiError::Internal {
            message: "injected fault: internal error".to_string(),
        });
    }
    let params = match path {
        Ok(Path(params)) => params,
        Err(rejection) => {
            return fail(ApiError::validation(format!(
                "path: {}",
                rejection.body_text()
            )));
        }
    };
    let body = match body_bytes(body, state.config.max_body_bytes) {
        Ok(body) => body,
        Err(error) => return fail(error),
    };
    let request = handlers::Request {
        operation,
        params: params.clone(),
        query: query.as_deref(),
        body: &body,
        api_key,
        caller,
    };
    match handlers::execute(state, request) {
        Ok(mut reply) => {
            if state.config.keep_ledger && operation.method() != Method::Get {
                let entry = LedgerEntry {
                    operation: operation.name().to_string(),
                    caller,
                    named: named_ids(params, request_body.as_ref()),
                    name: new_name,
                    created: reply.created_id(operation),
                    at_ms: state.clock.now(),
                };
                lock(&state.ledger).push(entry);
            }
            omit_from_list(state, operation, caller.account, &mut reply);
            if decision.drop.is_some() {
                lock(&state.fault_counts).dropped_responses += 1;
            }
            Answered {
                response: reply.into_response(request_id.to_string()),
                drop: decision.drop,
                caller: Some(caller),
            }
        }
        Err(error) => fail(error),
    }
}

/// The name a request gives the resource it creates: `name`, or `new_vm_name` of a restore.
fn new_resource_name(body: &serde_json::Value) -> Option<String> {
    ["name", "new_vm_name"]
        .iter()
        .find_map(|field| body.get(field)?.as_str())
        .map(str::to_string)
}

/// The ids a request names: its path parameters, and every `*_id` or `*_ids` field of its body.
fn named_ids(params: Vec<String>, body: Option<&serde_json::Value>) -> Vec<String> {
    let mut named = params;
    let fields = body
        .and_then(serde_json::Value::as_object)
        .into_iter()
        .flatten();
    for (field, value) in fields {
        if field.ends_with("_id") {
            named.extend(value.as_str().map(str::to_string));
        } else if field.ends_with("_ids") {
            let ids = value.as_array().into_iter().flatten();
            named.extend(ids.filter_map(|id| id.as_str().map(str::to_string)));
        }
    }
    named
}

/// The array and id field of each list of resources the operator observes.
fn listed_items(operation: Operation) -> Option<(&'static str, &'static str)> {
    Some(match operation {
        Operation::ListInstances => ("instances", "instance_id"),
        Operation::ListVolumes => ("volumes", "id"),
        Operation::ListSnapshots => ("snapshots", "snapshot_id"),
        Operation::ListImages => ("images", "id"),
        Operation::ListFirewalls => ("firewalls", "id"),
        Operation::ListSshKeys => ("ssh_keys", "id"),
        _ => return None,
    })
}

/// The list-omission faults: a list that leaves out resources that exist, for the accounts
/// the fault plan applies to.
fn omit_from_list(state: &AppState, operation: Operation, account: usize, reply: &mut Reply) {
    let Some((array, id_field)) = listed_items(operation) else {
        return;
    };
    let mut faults = lock(&state.faults);
    let plan = &faults.plan;
    if !plan.applies_to(account)
        || (plan.omit_from_lists.is_empty() && plan.list_omission_rate <= 0.0)
    {
        return;
    }
    let omitted = reply.retain_listed(array, id_field, |id| {
        faults.plan.omit_from_lists.contains(id) || faults.draw_omission(operation)
    });
    drop(faults);
    lock(&state.fault_counts).omitted_from_lists += omitted;
}
