//! The resource verbs: request parsing and dispatch, and what the verbs share (body decoding,
//! content negotiation, object metadata on write, the write pipeline).

pub mod crd;
pub mod delete;
pub mod patch;
pub mod read;
pub mod scale;
pub mod semantics;
pub mod write;

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::auth::AuthenticatedUser;
use crate::builtin;
use crate::registry::ResourceInfo;
use crate::server::{AppState, RequestRecord};
use crate::status::ApiError;
use gpucloud_apiserver_semantics::rbac::UserInfo;

/// The parsed request line: which resource, where, and which verb.
#[derive(Clone, Debug)]
pub struct Target {
    pub info: ResourceInfo,
    /// Empty for cluster-scoped resources and all-namespace collections.
    pub namespace: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// Query parameters of a request.
#[derive(Clone, Debug, Default)]
pub struct Query {
    values: HashMap<String, String>,
}

impl Query {
    pub fn parse(query: Option<&str>) -> Self {
        let values = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
        Query { values }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    pub fn flag(&self, key: &str) -> Result<bool, ApiError> {
        match self.get(key) {
            None | Some("") | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid boolean value {other:?} for query parameter {key:?}"
            ))),
        }
    }

    /// `dryRun=All` (the only value the real server accepts).
    pub fn dry_run(&self) -> Result<bool, ApiError> {
        dry_run_values(self.values.get("dryRun").map(|v| vec![v.clone()]))
    }
}

pub(crate) fn dry_run_values(values: Option<Vec<String>>) -> Result<bool, ApiError> {
    match values {
        None => Ok(false),
        Some(values) if values.is_empty() => Ok(false),
        Some(values) => {
            if values.iter().all(|value| value == "All") {
                Ok(true)
            } else {
                Err(ApiError::bad_request(format!(
                    "Invalid value: {values:?}: supported values: \"All\""
                )))
            }
        }
    }
}

/// Everything a verb handler needs about one request.
pub struct Context<'a> {
    pub state: &'a AppState,
    pub target: Target,
    pub query: Query,
    pub headers: HeaderMap,
    pub user: String,
    /// The user's groups, as the authenticator gave them.
    pub groups: Vec<String>,
    /// `Warning` headers for the response (e.g. unknown fields under `fieldValidation=Warn`).
    pub warnings: std::sync::Mutex<Vec<String>>,
}

impl Context<'_> {
    pub fn warn(&self, warning: String) {
        match self.warnings.lock() {
            Ok(mut warnings) => warnings.push(warning),
            Err(poisoned) => poisoned.into_inner().push(warning),
        }
    }

    fn take_warnings(&self) -> Vec<String> {
        match self.warnings.lock() {
            Ok(mut warnings) => std::mem::take(&mut *warnings),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        }
    }

    pub fn info(&self) -> &ResourceInfo {
        &self.target.info
    }

    pub fn name(&self) -> &str {
        self.target.name.as_deref().unwrap_or_default()
    }

    /// The object the request names, as stored now.
    pub fn stored(&self) -> Option<crate::store::StoredObject> {
        let key = self.info().storage_key();
        self.state
            .store
            .get(&key, &self.target.namespace, self.name())
    }

    pub fn not_found(&self) -> ApiError {
        ApiError::not_found(&self.info().group, &self.info().plural, self.name())
    }

    /// The manager name for managedFields: `fieldManager`, else derived from the user agent
    /// as the real server does (the part before the first `/`).
    pub fn field_manager(&self) -> String {
        if let Some(manager) = self.query.get("fieldManager").filter(|m| !m.is_empty()) {
            return manager.to_string();
        }
        self.headers
            .get(header::USER_AGENT)
            .and_then(|agent| agent.to_str().ok())
            .map(|agent| agent.split('/').next().unwrap_or(agent).to_string())
            .filter(|agent| !agent.is_empty())
            .unwrap_or_else(|| "unknown".to_string())
    }
}

/// Seeds the namespaces every cluster starts with.
pub fn seed_namespaces(state: &AppState) {
    let Some(info) = state.registry.lookup("", "v1", "namespaces") else {
        return;
    };
    for name in builtin::INITIAL_NAMESPACES {
        let mut object = builtin::initial_namespace(name);
        write::fill_create_metadata(&mut object);
        // Seeding an empty store cannot collide.
        let _ = state.store.create(&info.storage_key(), object);
    }
}

/// The fallback handler serving every resource path.
pub async fn dispatch(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let user = crate::authz::user_info(parts.extensions.get::<AuthenticatedUser>());
    let yaml = prefers_yaml(&parts.headers)
        && !Query::parse(parts.uri.query())
            .flag("watch")
            .unwrap_or(false);
    let handled = std::panic::AssertUnwindSafe(handle(
        &state,
        parts.method,
        parts.uri,
        parts.headers,
        body,
        user,
    ));
    // A defect must answer as an InternalError Status, not cut the connection.
    let response = match futures::FutureExt::catch_unwind(handled).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => error.into_response(),
        Err(_) => {
            tracing::error!("request handler panicked");
            ApiError::internal("an internal error occurred while handling the request")
                .into_response()
        }
    };
    if yaml {
        return into_yaml(response).await;
    }
    response
}

/// Whether the client accepts YAML but not JSON (`kubectl` never does; `curl` users may).
fn prefers_yaml(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()) else {
        return false;
    };
    let media: Vec<&str> = accept
        .split(',')
        .map(|part| part.split(';').next().unwrap_or_default().trim())
        .collect();
    media.contains(&"application/yaml")
        && !media
            .iter()
            .any(|m| matches!(*m, "application/json" | "*/*" | "application/*"))
}

/// Re-encodes a JSON response body as YAML.
async fn into_yaml(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return ApiError::internal("response body could not be read").into_response();
    };
    let yaml = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|value| crate::yaml::to_string(&value).ok());
    match yaml {
        Some(yaml) => {
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/yaml"),
            );
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(yaml))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

async fn handle(
    state: &AppState,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
    user: UserInfo,
) -> Result<Response, ApiError> {
    let query = Query::parse(uri.query());
    let target = parse_target(state, uri.path())?;
    let verb = verb_of(&method, &target, &query)?;
    let selected_name = || {
        query
            .get("fieldSelector")
            .filter(|_| matches!(verb, "list" | "watch"))
            .and_then(|selector| {
                let (field, value) = selector.split_once('=')?;
                let value = value.strip_prefix('=').unwrap_or(value);
                (field.trim() == "metadata.name" && !selector.contains(','))
                    .then(|| value.trim().to_string())
            })
    };
    let record = RequestRecord {
        user: user.name.clone(),
        verb: verb.to_string(),
        group: target.info.group.clone(),
        resource: target.info.plural.clone(),
        subresource: target.subresource.clone().unwrap_or_default(),
        namespace: target.namespace.clone(),
        name: target
            .name
            .clone()
            .or_else(selected_name)
            .unwrap_or_default(),
        label_selector: query.get("labelSelector").unwrap_or_default().to_string(),
        metadata_only: headers
            .get(axum::http::header::ACCEPT)
            .and_then(|accept| accept.to_str().ok())
            .is_some_and(|accept| accept.contains("as=PartialObjectMetadata")),
    };
    state.request_log.push(record.clone());
    let result = handle_verb(state, method, target, verb, query, headers, body, user).await;
    let code = match &result {
        Ok(response) => response.status().as_u16(),
        Err(error) => error.code,
    };
    state.request_counts.add(&record, code);
    result
}

#[allow(clippy::too_many_arguments)]
async fn handle_verb(
    state: &AppState,
    method: Method,
    target: Target,
    verb: &'static str,
    query: Query,
    headers: HeaderMap,
    body: Body,
    user: UserInfo,
) -> Result<Response, ApiError> {
    // The status and scale subresources serve get, update and patch only.
    let allowed = match target.subresource {
        Some(_) => matches!(verb, "get" | "update" | "patch"),
        None => target.info.verbs.contains(&verb),
    };
    if !allowed {
        return Err(method_not_allowed(&method));
    }
    if target.info.namespaced && target.namespace.is_empty() && verb == "create" {
        return Err(method_not_allowed(&method));
    }
    if target.subresource.as_deref() == Some("status")
        && matches!(verb, "update" | "patch")
        && state.faults.conflict_on_status_write()
    {
        return Err(ApiError::conflict(
            &target.info.group,
            &target.info.plural,
            target.name.as_deref().unwrap_or_default(),
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    let context = Context {
        state,
        target,
        query,
        headers,
        user: user.name,
        groups: user.groups,
        warnings: std::sync::Mutex::new(Vec::new()),
    };
    let result = run_verb(&context, verb, &method, body).await;
    let warnings = context.take_warnings();
    let mut response = result?;
    if verb == "create"
        && context.info().is_custom()
        && response.status() == StatusCode::CREATED
        && state.faults.timeout_after_create()
    {
        return Err(ApiError::timeout(
            "Timeout: request did not complete within requested timeout - context deadline exceeded",
        ));
    }
    for warning in warnings {
        // The real server's format: `299 - "<text>"`.
        let text = format!("299 - {}", serde_json::Value::String(warning));
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    Ok(response)
}

async fn run_verb(
    context: &Context<'_>,
    verb: &str,
    method: &Method,
    body: Body,
) -> Result<Response, ApiError> {
    if context.target.subresource.as_deref() == Some("scale") {
        return match verb {
            "get" => scale::get(context),
            "update" => {
                let body = read_body(context, body).await?;
                scale::update(context, &body)
            }
            "patch" => {
                let body = read_body(context, body).await?;
                scale::patch(context, &body)
            }
            _ => Err(method_not_allowed(method)),
        };
    }
    match verb {
        "get" => read::get(context),
        "list" => read::list(context),
        "watch" => crate::watch::watch(context),
        "create" => {
            let body = read_body(context, body).await?;
            write::create(context, &body)
        }
        "update" => {
            let body = read_body(context, body).await?;
            write::update(context, &body)
        }
        "patch" => {
            let body = read_body(context, body).await?;
            patch::patch(context, &body)
        }
        "delete" => {
            let body = read_body(context, body).await?;
            delete::delete(context, &body)
        }
        "deletecollection" => {
            let body = read_body(context, body).await?;
            delete::delete_collection(context, &body)
        }
        _ => Err(method_not_allowed(method)),
    }
}

fn method_not_allowed(method: &Method) -> ApiError {
    ApiError::method_not_allowed(format!(
        "the server does not allow this method on the requested resource ({method})"
    ))
}

/// The real server's answer for a path it does not serve.
pub fn path_not_found() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// Splits `/api/v1/...` or `/apis/{group}/{version}/...` into a target.
pub fn parse_target(state: &AppState, path: &str) -> Result<Target, ApiError> {
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(|segment| {
            percent_encoding::percent_decode_str(segment)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(path_not_found()),
    };
    let (namespace, resource, tail) = match rest {
        ["namespaces", namespace, resource, tail @ ..]
            if *resource != "status" && *resource != "finalize" =>
        {
            (Some(*namespace), *resource, tail)
        }
        [resource, tail @ ..] => (None, *resource, tail),
        [] => return Err(path_not_found()),
    };
    let info = state
        .registry
        .lookup(group, version, resource)
        .filter(|info| info.served)
        .ok_or_else(path_not_found)?;
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some(name.to_string()), None),
        [name, subresource] => (Some(name.to_string()), Some(subresource.to_string())),
        _ => return Err(path_not_found()),
    };
    if namespace.is_some() && !info.namespaced {
        return Err(path_not_found());
    }
    if info.namespaced && namespace.is_none() && name.is_some() {
        return Err(path_not_found());
    }
    if let Some(subresource) = &subresource
        && !(subresource == "status" && info.has_status)
        && !(subresource == "scale" && info.scale.is_some())
    {
        return Err(path_not_found());
    }
    if name.as_deref() == Some("") {
        return Err(path_not_found());
    }
    Ok(Target {
        info,
        namespace: namespace.unwrap_or_default().to_string(),
        name,
        subresource,
    })
}

fn verb_of(method: &Method, target: &Target, query: &Query) -> Result<&'static str, ApiError> {
    let item = target.name.is_some();
    let verb = match (method.as_str(), item) {
        ("GET", true) => "get",
        ("GET", false) => {
            if query.flag("watch")? {
                "watch"
            } else {
                "list"
            }
        }
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return Err(method_not_allowed(method)),
    };
    Ok(verb)
}

/// Reads the body, enforcing the size limit.
async fn read_body(context: &Context<'_>, body: Body) -> Result<Bytes, ApiError> {
    let limit = context.state.settings.max_body_bytes;
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::too_large(limit))
}

/// The request's media type without parameters, lower-cased.
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(|value| {
            value
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// Media types of object bodies for built-in kinds.
const BUILTIN_BODY_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    crate::protobuf::MEDIA_TYPE,
];

/// Media types of object bodies for custom resources: the real server has no protobuf
/// serializer for them.
const CUSTOM_BODY_TYPES: &[&str] = &["application/json", "application/yaml"];

/// Decodes a JSON, YAML or (for built-in kinds) protobuf object body.
pub fn decode_object(
    info: &ResourceInfo,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, ApiError> {
    let media_type = content_type(headers);
    let protobuf_allowed = !info.is_custom() && !builtin::is_crd(info);
    let value: Value = match media_type.as_str() {
        crate::protobuf::MEDIA_TYPE if protobuf_allowed => {
            crate::protobuf::decode(body).map_err(|error| {
                ApiError::bad_request(format!(
                    "the body of the request could not be decoded: {error}"
                ))
            })?
        }
        "" | "application/json" | "*/*" => serde_json::from_slice(body).map_err(|error| {
            ApiError::bad_request(format!(
                "couldn't get version/kind; json parse error: {error}"
            ))
        })?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => decode_yaml(body)?,
        other => {
            let accepted = if protobuf_allowed {
                BUILTIN_BODY_TYPES
            } else {
                CUSTOM_BODY_TYPES
            };
            return Err(ApiError::unsupported_media_type(other, accepted));
        }
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "couldn't get version/kind; json parse error: the body is not a JSON object",
        ));
    }
    Ok(value)
}

/// YAML to a JSON value, with a 400 for malformed input.
pub fn decode_yaml(body: &[u8]) -> Result<Value, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the request body is not valid UTF-8"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|error| ApiError::bad_request(format!("error converting YAML to JSON: {error}")))
}

/// Whether the client accepts JSON (everything this server produces).
pub fn check_acceptable(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()) else {
        return Ok(());
    };
    let acceptable = accept.split(',').any(|part| {
        let media = part.split(';').next().unwrap_or_default().trim();
        matches!(
            media,
            "" | "application/json" | "*/*" | "application/*" | "application/yaml"
        )
    });
    if acceptable {
        Ok(())
    } else {
        Err(ApiError::not_acceptable(accept))
    }
}

/// A JSON response.
pub fn json_response(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut response = (status, body.into()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON response of one value.
pub fn value_response(status: StatusCode, value: &Value) -> Response {
    json_response(status, value.to_string())
}

/// The object as served at the requested version: stored objects carry the storage version's
/// apiVersion; CRD versions share one schema shape (conversion strategy `None`), so only
/// `apiVersion` changes.
pub fn at_version(info: &ResourceInfo, mut object: Value) -> Value {
    if builtin::is_events_v1(info) {
        return builtin::event_to_events_v1(object);
    }
    if info.is_custom() {
        let api_version = info.api_version();
        if object["apiVersion"].as_str() != Some(api_version.as_str()) {
            object["apiVersion"] = Value::String(api_version);
        }
    }
    object
}

/// Stored bytes as served at the requested version.
pub fn bytes_at_version(info: &ResourceInfo, bytes: &Bytes) -> Bytes {
    let converted = builtin::is_events_v1(info) || (info.is_custom() && !info.storage_version);
    if !converted {
        return bytes.clone();
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(value) => Bytes::from(at_version(info, value).to_string()),
        Err(_) => bytes.clone(),
    }
}

/// Whether the client asked for `PartialObjectMetadata` (kube-rs `metadata_watcher`,
/// `Api::get_metadata`, `list_metadata`) before any plain representation.
pub fn wants_metadata_only(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .unwrap_or_default();
    for media in crate::table::parse_accept(accept) {
        if !matches!(
            media.essence.as_str(),
            "application/json" | "application/*" | "*/*"
        ) {
            continue;
        }
        return match media.param("as") {
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") => {
                media.param("g") == Some("meta.k8s.io")
                    && matches!(media.param("v"), Some("v1" | "v1beta1"))
            }
            _ => false,
        };
    }
    false
}

/// An object reduced to `PartialObjectMetadata`, as the real server converts it.
pub fn partial_object_metadata(bytes: &Bytes) -> Bytes {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(object) => Bytes::from(
            serde_json::json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": object["metadata"],
            })
            .to_string(),
        ),
        Err(_) => bytes.clone(),
    }
}
