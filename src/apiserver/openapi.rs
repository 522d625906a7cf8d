//! OpenAPI publishing: `/openapi/v3` (the index), `/openapi/v3/api/v1` and
//! `/openapi/v3/apis/{group}/{version}` (one OpenAPI 3.0 document per group/version), and
//! `/openapi/v2` (Swagger 2.0, made from these in [`crate::openapi_v2`]).
//!
//! kubectl 1.32 reads these documents for three things, so each is built to satisfy it:
//! - `kubectl explain` looks up a component schema by its `x-kubernetes-group-version-kind`;
//! - `kubectl apply`/`create` look for a `fieldValidation` query parameter on the kind's PATCH
//!   operation, and when present leave validation to the server (`fieldValidation=Strict`)
//!   instead of downloading the v2 document;
//! - client-side `kubectl apply` computes a strategic merge patch only when the PATCH operation
//!   accepts `application/strategic-merge-patch+json` (built-in kinds), and a JSON merge patch
//!   otherwise (custom resources), as against a real server.
//!
//! Built-in kinds' schemas come from k8s-openapi's schemars implementations, with the
//! ObjectMeta list extensions (`x-kubernetes-patch-*`) the real documents carry added back.
//! Custom resources' schemas are the CRD version's `openAPIV3Schema` with `apiVersion`, `kind`
//! and `metadata` filled in, as apiextensions-apiserver's OpenAPI builder does.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use serde_json::{Map, Value, json};

use crate::discovery::KUBERNETES_VERSION;
use crate::registry::ResourceInfo;
use crate::server::AppState;
use crate::status::ApiError;
use crate::table::parse_accept;

pub(crate) const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
pub(crate) const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DESCRIPTION: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// The OpenAPI routes, merged into the server's router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/openapi/v2", read_only(get(crate::openapi_v2::handler)))
        .route("/openapi/v3", read_only(get(v3_index)))
        .route("/openapi/v3/", read_only(get(v3_index)))
        .route(
            "/openapi/v3/api/{version}",
            read_only(get(v3_core_document)),
        )
        .route(
            "/openapi/v3/apis/{group}/{version}",
            read_only(get(v3_group_document)),
        )
}

fn read_only(router: MethodRouter<AppState>) -> MethodRouter<AppState> {
    router.fallback(|| async {
        ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )
    })
}

// === handlers ===

async fn v3_index(State(state): State<AppState>) -> Response {
    let mut paths = Map::new();
    for (group, version) in group_versions(&state) {
        let key = group_version_path(&group, &version);
        let document = v3_document(&state, &group, &version);
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", document_hash(&document))}),
        );
    }
    json_response(&json!({"paths": paths}), None)
}

/// The `hash` query parameter (the last one wins; anything else is ignored).
fn hash_parameter(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(key, _)| key == "hash")
        .map(|(_, value)| value.into_owned())
        .last()
}

async fn v3_core_document(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path(version) = path.map_err(|_| not_found())?;
    let hash = hash_parameter(query.as_deref());
    serve_v3(&state, "", &version, hash.as_deref(), &headers)
}

async fn v3_group_document(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path((group, version)) = path.map_err(|_| not_found())?;
    if group.is_empty() {
        return Err(not_found());
    }
    let hash = hash_parameter(query.as_deref());
    serve_v3(&state, &group, &version, hash.as_deref(), &headers)
}

fn serve_v3(
    state: &AppState,
    group: &str,
    version: &str,
    hash: Option<&str>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    if !group_versions(state).contains(&(group.to_owned(), version.to_owned())) {
        return Err(not_found());
    }
    require_json(headers)?;
    let document = v3_document(state, group, version);
    // A request naming the current hash may be cached forever: the hash changes with the
    // document (for example when a CRD changes).
    let immutable = hash.is_some_and(|hash| hash == document_hash(&document));
    Ok(json_response(&document, Some(immutable)))
}

// === documents ===

/// The served group/versions, core first.
pub(crate) fn group_versions(state: &AppState) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = state
        .registry
        .resources()
        .into_iter()
        .filter(|info| info.served)
        .map(|info| (info.group, info.version))
        .collect();
    pairs.sort();
    pairs.dedup();
    pairs
}

fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The OpenAPI 3.0 document of one group/version.
pub fn v3_document(state: &AppState, group: &str, version: &str) -> Value {
    let mut resources: Vec<ResourceInfo> = state
        .registry
        .resources()
        .into_iter()
        .filter(|info| info.served && info.group == group && info.version == version)
        .collect();
    resources.sort_by(|left, right| left.plural.cmp(&right.plural));

    let builtin = builtin_schemas();
    let mut schemas: BTreeMap<String, Value> = BTreeMap::new();
    let mut paths = Map::new();
    for info in &resources {
        let name = schema_name(info);
        let list_name = format!("{name}List");
        match custom_schema(info) {
            Some(schema) => {
                schemas.insert(name.clone(), schema);
            }
            None => match builtin.get(&name) {
                Some(schema) => {
                    let mut schema = schema.clone();
                    set_gvk(&mut schema, info, &info.kind);
                    schemas.insert(name.clone(), schema);
                }
                // A kind with neither a CRD schema nor a built-in one still gets an entry,
                // so explain and the fieldValidation lookup find it.
                None => {
                    let mut schema = json!({
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                        "properties": envelope_properties(),
                    });
                    set_gvk(&mut schema, info, &info.kind);
                    schemas.insert(name.clone(), schema);
                }
            },
        }
        schemas.insert(list_name.clone(), list_schema(info, &name));
        add_paths(&mut paths, info, &name, &list_name);
    }
    // The shared meta types every document references.
    for shared in [OBJECT_META, LIST_META, STATUS, DELETE_OPTIONS, PATCH] {
        add_with_dependencies(&mut schemas, builtin, shared);
    }
    if resources.iter().any(|info| info.scale.is_some()) {
        add_with_dependencies(&mut schemas, builtin, SCALE);
    }
    let referenced: Vec<String> = schemas.keys().cloned().collect();
    for name in referenced {
        if let Some(schema) = schemas.get(&name).cloned() {
            for dependency in references(&schema) {
                add_with_dependencies(&mut schemas, builtin, &dependency);
            }
        }
    }
    let (major, minor) = KUBERNETES_VERSION;
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{major}.{minor}.0")},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// `io.k8s.api.core.v1.ConfigMap` for built-ins, the reversed group for custom resources
/// (`gpucloud.io` gives `io.gpucloud.v1.GpuInstance`), as the real server names them.
pub(crate) fn schema_name(info: &ResourceInfo) -> String {
    if !info.is_custom() {
        let package = match info.group.as_str() {
            "" => "io.k8s.api.core".to_owned(),
            "apiextensions.k8s.io" => {
                "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions".to_owned()
            }
            "rbac.authorization.k8s.io" => "io.k8s.api.rbac".to_owned(),
            group => format!(
                "io.k8s.api.{}",
                group.strip_suffix(".k8s.io").unwrap_or(group)
            ),
        };
        return format!("{package}.{}.{}", info.version, info.kind);
    }
    let reversed: Vec<&str> = info.group.split('.').rev().collect();
    format!("{}.{}.{}", reversed.join("."), info.version, info.kind)
}

fn gvk(info: &ResourceInfo, kind: &str) -> Value {
    json!([{"group": info.group, "kind": kind, "version": info.version}])
}

pub(crate) fn set_gvk(schema: &mut Value, info: &ResourceInfo, kind: &str) {
    if let Some(object) = schema.as_object_mut() {
        object.insert(
            "x-kubernetes-group-version-kind".to_owned(),
            gvk(info, kind),
        );
    }
}

pub(crate) fn envelope_properties() -> Map<String, Value> {
    let mut properties = Map::new();
    properties.insert(
        "apiVersion".to_owned(),
        json!({"type": "string", "description": API_VERSION_DESCRIPTION}),
    );
    properties.insert(
        "kind".to_owned(),
        json!({"type": "string", "description": KIND_DESCRIPTION}),
    );
    properties.insert(
        "metadata".to_owned(),
        json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}],
               "default": {}, "description": METADATA_DESCRIPTION}),
    );
    properties
}

/// A custom resource's published schema: the CRD's `openAPIV3Schema` with the object
/// envelope (`apiVersion`, `kind`, `metadata`) filled in and the GVK extension set.
fn custom_schema(info: &ResourceInfo) -> Option<Value> {
    let raw = info.schema.as_ref()?.raw();
    let mut schema = match raw {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let mut properties = match schema.remove("properties") {
        Some(Value::Object(properties)) => properties,
        _ => Map::new(),
    };
    for (key, value) in envelope_properties() {
        properties.insert(key, value);
    }
    schema.insert("properties".to_owned(), Value::Object(properties));
    schema
        .entry("type".to_owned())
        .or_insert_with(|| json!("object"));
    let mut schema = Value::Object(schema);
    set_gvk(&mut schema, info, &info.kind);
    Some(schema)
}

fn list_schema(info: &ResourceInfo, item_schema: &str) -> Value {
    let mut schema = json!({
        "type": "object",
        "description": format!("{} is a list of {}", info.list_kind, info.kind),
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION_DESCRIPTION},
            "items": {
                "type": "array",
                "description": format!("List of {}.", info.plural),
                "items": {"allOf": [{"$ref": format!("#/components/schemas/{item_schema}")}], "default": {}},
            },
            "kind": {"type": "string", "description": KIND_DESCRIPTION},
            "metadata": {"allOf": [{"$ref": format!("#/components/schemas/{LIST_META}")}],
                         "default": {}, "description": LIST_METADATA_DESCRIPTION},
        },
    });
    set_gvk(&mut schema, info, &info.list_kind);
    schema
}

// === paths ===

fn add_paths(paths: &mut Map<String, Value>, info: &ResourceInfo, name: &str, list_name: &str) {
    let prefix = if info.group.is_empty() {
        format!("/api/{}", info.version)
    } else {
        format!("/apis/{}/{}", info.group, info.version)
    };
    let scope = if info.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{prefix}/{}", info.plural)
    };
    let namespaced_word = if info.namespaced { "Namespaced" } else { "" };
    let id = |verb: &str, suffix: &str| {
        format!(
            "{verb}{}{}{namespaced_word}{}{suffix}",
            operation_group(&info.group),
            capitalize(&info.version),
            info.kind
        )
    };
    let mut path_parameters = Vec::new();
    if info.namespaced {
        path_parameters.push(path_parameter(
            "namespace",
            "object name and auth scope, such as for teams and projects",
        ));
    }

    let has = |verb: &str| info.verbs.contains(&verb);
    let mut collection = Map::new();
    if has("list") {
        collection.insert(
            "get".to_owned(),
            operation(
                info,
                "list",
                &id("list", ""),
                list_name,
                &list_parameters(),
                None,
            ),
        );
    }
    if has("create") {
        collection.insert(
            "post".to_owned(),
            operation(
                info,
                "post",
                &id("create", ""),
                name,
                &write_parameters(false),
                Some(object_body(name)),
            ),
        );
    }
    if has("deletecollection") {
        collection.insert(
            "delete".to_owned(),
            operation(
                info,
                "deletecollection",
                &id("deletecollection", ""),
                STATUS,
                &list_parameters(),
                Some(object_body(DELETE_OPTIONS)),
            ),
        );
    }
    collection.insert(
        "parameters".to_owned(),
        Value::Array(path_parameters.clone()),
    );
    paths.insert(scope.clone(), Value::Object(collection));

    let mut item_parameters = path_parameters.clone();
    item_parameters.push(path_parameter(
        "name",
        &format!("name of the {}", info.kind),
    ));
    let mut item = Map::new();
    if has("get") {
        item.insert(
            "get".to_owned(),
            operation(info, "get", &id("read", ""), name, &[], None),
        );
    }
    if has("update") {
        item.insert(
            "put".to_owned(),
            operation(
                info,
                "put",
                &id("replace", ""),
                name,
                &write_parameters(false),
                Some(object_body(name)),
            ),
        );
    }
    if has("patch") {
        item.insert(
            "patch".to_owned(),
            operation(
                info,
                "patch",
                &id("patch", ""),
                name,
                &write_parameters(true),
                Some(patch_body(info)),
            ),
        );
    }
    if has("delete") {
        item.insert(
            "delete".to_owned(),
            operation(
                info,
                "delete",
                &id("delete", ""),
                STATUS,
                &write_parameters(false),
                Some(object_body(DELETE_OPTIONS)),
            ),
        );
    }
    item.insert(
        "parameters".to_owned(),
        Value::Array(item_parameters.clone()),
    );
    paths.insert(format!("{scope}/{{name}}"), Value::Object(item));

    if info.has_status {
        let mut status = Map::new();
        status.insert(
            "get".to_owned(),
            operation(info, "get", &id("read", "Status"), name, &[], None),
        );
        status.insert(
            "put".to_owned(),
            operation(
                info,
                "put",
                &id("replace", "Status"),
                name,
                &write_parameters(false),
                Some(object_body(name)),
            ),
        );
        status.insert(
            "patch".to_owned(),
            operation(
                info,
                "patch",
                &id("patch", "Status"),
                name,
                &write_parameters(true),
                Some(patch_body(info)),
            ),
        );
        status.insert(
            "parameters".to_owned(),
            Value::Array(item_parameters.clone()),
        );
        paths.insert(format!("{scope}/{{name}}/status"), Value::Object(status));
    }

    if info.scale.is_some() {
        let mut scale = Map::new();
        scale.insert(
            "get".to_owned(),
            operation(info, "get", &id("read", "Scale"), SCALE, &[], None),
        );
        scale.insert(
            "put".to_owned(),
            operation(
                info,
                "put",
                &id("replace", "Scale"),
                SCALE,
                &write_parameters(false),
                Some(object_body(SCALE)),
            ),
        );
        scale.insert(
            "patch".to_owned(),
            operation(
                info,
                "patch",
                &id("patch", "Scale"),
                SCALE,
                &write_parameters(true),
                Some(patch_body(info)),
            ),
        );
        scale.insert("parameters".to_owned(), Value::Array(item_parameters));
        paths.insert(format!("{scope}/{{name}}/scale"), Value::Object(scale));
    }
}

fn operation(
    info: &ResourceInfo,
    action: &str,
    operation_id: &str,
    response_schema: &str,
    parameters: &[Value],
    request_body: Option<Value>,
) -> Value {
    let mut operation = json!({
        "operationId": operation_id,
        "description": format!("{action} {}", info.kind),
        "parameters": parameters,
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{response_schema}")}}}},
            "401": {"description": "Unauthorized"},
        },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": info.group, "kind": info.kind, "version": info.version},
    });
    if let (Some(body), Some(object)) = (request_body, operation.as_object_mut()) {
        object.insert("requestBody".to_owned(), body);
    }
    operation
}

fn object_body(schema: &str) -> Value {
    json!({"content": {"*/*": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}, "required": true})
}

/// The patch content types the server accepts for this kind: no strategic merge patch for
/// custom resources, as the real server.
fn patch_body(info: &ResourceInfo) -> Value {
    let schema = json!({"$ref": format!("#/components/schemas/{PATCH}")});
    let mut content = Map::new();
    content.insert(
        "application/apply-patch+yaml".to_owned(),
        json!({"schema": schema}),
    );
    content.insert(
        "application/json-patch+json".to_owned(),
        json!({"schema": schema}),
    );
    content.insert(
        "application/merge-patch+json".to_owned(),
        json!({"schema": schema}),
    );
    if !info.is_custom() {
        content.insert(
            "application/strategic-merge-patch+json".to_owned(),
            json!({"schema": schema}),
        );
    }
    json!({"content": content, "required": true})
}

fn path_parameter(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "description": description, "required": true,
           "schema": {"type": "string", "uniqueItems": true}})
}

fn query_parameter(name: &str, type_: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description,
           "schema": {"type": type_, "uniqueItems": true}})
}

fn list_parameters() -> Vec<Value> {
    vec![
        query_parameter(
            "labelSelector",
            "string",
            "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
        ),
        query_parameter(
            "fieldSelector",
            "string",
            "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
        ),
        query_parameter(
            "limit",
            "integer",
            "limit is a maximum number of responses to return for a list call.",
        ),
        query_parameter(
            "continue",
            "string",
            "The continue option should be set when retrieving more results from the server.",
        ),
        query_parameter(
            "resourceVersion",
            "string",
            "resourceVersion sets a constraint on what resource versions a request may be served from.",
        ),
        query_parameter(
            "resourceVersionMatch",
            "string",
            "resourceVersionMatch determines how resourceVersion is applied to list calls.",
        ),
        query_parameter(
            "watch",
            "boolean",
            "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.",
        ),
        query_parameter(
            "allowWatchBookmarks",
            "boolean",
            "allowWatchBookmarks requests watch events with type \"BOOKMARK\".",
        ),
        query_parameter(
            "timeoutSeconds",
            "integer",
            "Timeout for the list/watch call.",
        ),
    ]
}

fn write_parameters(patch: bool) -> Vec<Value> {
    let mut parameters = vec![
        query_parameter(
            "dryRun",
            "string",
            "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
        ),
        query_parameter(
            "fieldManager",
            "string",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        query_parameter(
            "fieldValidation",
            "string",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
        ),
    ];
    if patch {
        parameters.push(query_parameter(
            "force",
            "boolean",
            "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people.",
        ));
    }
    parameters
}

/// `core`, `apiextensions`, `coordination`, `gpucloudIo`: the operation-ID word for a group.
fn operation_group(group: &str) -> String {
    if group.is_empty() {
        return "Core".to_owned();
    }
    let trimmed = group.strip_suffix(".k8s.io").unwrap_or(group);
    trimmed
        .split(['.', '-'])
        .map(capitalize)
        .collect::<String>()
}

fn capitalize(word: &str) -> String {
    let mut characters = word.chars();
    match characters.next() {
        Some(first) => first.to_uppercase().chain(characters).collect(),
        None => String::new(),
    }
}

// === built-in schemas ===

/// Component schemas of the built-in kinds and everything they reference, generated once.
pub(crate) fn builtin_schemas() -> &'static BTreeMap<String, Value> {
    static SCHEMAS: OnceLock<BTreeMap<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(generate_builtin_schemas)
}

fn generate_builtin_schemas() -> BTreeMap<String, Value> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{
        ConfigMap, Event, Namespace, Secret, Service, ServiceAccount,
    };
    use k8s_openapi::api::events::v1::Event as EventsV1Event;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ListMeta, Patch, Status};

    let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
    generator.subschema_for::<Namespace>();
    generator.subschema_for::<Secret>();
    generator.subschema_for::<ConfigMap>();
    generator.subschema_for::<Event>();
    generator.subschema_for::<EventsV1Event>();
    generator.subschema_for::<ServiceAccount>();
    generator.subschema_for::<Lease>();
    // What an operator's installation consists of (its Helm chart and kustomize base).
    generator.subschema_for::<Service>();
    generator.subschema_for::<Deployment>();
    generator.subschema_for::<HorizontalPodAutoscaler>();
    generator.subschema_for::<k8s_openapi::api::autoscaling::v1::Scale>();
    generator.subschema_for::<PodDisruptionBudget>();
    generator.subschema_for::<NetworkPolicy>();
    generator.subschema_for::<ClusterRole>();
    generator.subschema_for::<ClusterRoleBinding>();
    generator.subschema_for::<Role>();
    generator.subschema_for::<RoleBinding>();
    generator.subschema_for::<ValidatingAdmissionPolicy>();
    generator.subschema_for::<ValidatingAdmissionPolicyBinding>();
    generator.subschema_for::<CustomResourceDefinition>();
    generator.subschema_for::<ListMeta>();
    generator.subschema_for::<Status>();
    generator.subschema_for::<DeleteOptions>();
    generator.subschema_for::<Patch>();
    let mut schemas: BTreeMap<String, Value> =
        generator.take_definitions(true).into_iter().collect();

    // The list extensions kubectl's strategic merge patch reads from ObjectMeta, as the real
    // documents declare them (types.go struct tags of ObjectMeta).
    if let Some(properties) = schemas
        .get_mut(OBJECT_META)
        .and_then(|schema| schema.get_mut("properties"))
        .and_then(Value::as_object_mut)
    {
        if let Some(Value::Object(finalizers)) = properties.get_mut("finalizers") {
            finalizers.insert("x-kubernetes-list-type".to_owned(), json!("set"));
            finalizers.insert("x-kubernetes-patch-strategy".to_owned(), json!("merge"));
        }
        if let Some(Value::Object(owners)) = properties.get_mut("ownerReferences") {
            owners.insert("x-kubernetes-list-map-keys".to_owned(), json!(["uid"]));
            owners.insert("x-kubernetes-list-type".to_owned(), json!("map"));
            owners.insert("x-kubernetes-patch-merge-key".to_owned(), json!("uid"));
            owners.insert("x-kubernetes-patch-strategy".to_owned(), json!("merge"));
        }
    }
    schemas
}

/// Adds `name` and the schemas it references, transitively, from `source`.
fn add_with_dependencies(
    schemas: &mut BTreeMap<String, Value>,
    source: &BTreeMap<String, Value>,
    name: &str,
) {
    let mut pending = vec![name.to_owned()];
    while let Some(next) = pending.pop() {
        if schemas.contains_key(&next) {
            // Already present (maybe as a custom schema); still follow its references once.
            if next != name {
                continue;
            }
        }
        let Some(schema) = schemas.get(&next).or_else(|| source.get(&next)).cloned() else {
            continue;
        };
        for dependency in references(&schema) {
            if !schemas.contains_key(&dependency) {
                pending.push(dependency);
            }
        }
        schemas.entry(next).or_insert(schema);
    }
}

/// The component names a schema references through `$ref`.
fn references(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![schema];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(reference)) = map.get("$ref")
                    && let Some(name) = reference.strip_prefix("#/components/schemas/")
                {
                    found.push(name.to_owned());
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items.iter()),
            _ => {}
        }
    }
    found
}

pub(crate) fn rewrite_refs(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if key == "$ref"
                    && let Value::String(reference) = child
                    && let Some(rest) = reference.strip_prefix(from)
                {
                    *reference = format!("{to}{rest}");
                } else {
                    rewrite_refs(child, from, to);
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| rewrite_refs(item, from, to)),
        _ => {}
    }
}

// === helpers ===

/// A stable content hash of a document, for `serverRelativeURL`'s `hash` parameter.
fn document_hash(document: &Value) -> String {
    // FNV-1a: stable across processes and builds, unlike the std hasher's contract.
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for byte in bytes {
                self.0 ^= u64::from(*byte);
                self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let mut hasher = Fnv(0xcbf2_9ce4_8422_2325);
    document.to_string().hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// 406 unless the client accepts JSON (or sent no Accept).
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    if accepts_json(headers) {
        Ok(())
    } else {
        Err(ApiError::not_acceptable(accept_header(headers)))
    }
}

fn accept_header(headers: &HeaderMap) -> &str {
    headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
}

/// No Accept, or one that JSON satisfies.
fn accepts_json(headers: &HeaderMap) -> bool {
    let accept = accept_header(headers);
    accept.trim().is_empty()
        || parse_accept(accept).iter().any(|media| {
            matches!(
                media.essence.as_str(),
                "application/json" | "application/*" | "*/*"
            )
        })
}

fn not_found() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

fn json_response(document: &Value, immutable: Option<bool>) -> Response {
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        document.to_string(),
    )
        .into_response();
    let cache_control = match immutable {
        Some(true) => "public, immutable",
        _ => "no-cache, private",
    };
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn builtin_schemas_include_the_kinds_and_object_meta_patch_extensions() {
        let schemas = builtin_schemas();
        for name in [
            "io.k8s.api.core.v1.ConfigMap",
            "io.k8s.api.core.v1.Secret",
            "io.k8s.api.core.v1.Namespace",
            "io.k8s.api.coordination.v1.Lease",
            "io.k8s.api.events.v1.Event",
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
            OBJECT_META,
            STATUS,
        ] {
            assert!(schemas.contains_key(name), "{name} missing");
        }
        let owners = &schemas[OBJECT_META]["properties"]["ownerReferences"];
        assert_eq!(owners["x-kubernetes-patch-merge-key"], "uid");
        // Every reference in the built-in set resolves inside it.
        for schema in schemas.values() {
            for reference in references(schema) {
                assert!(schemas.contains_key(&reference), "dangling {reference}");
            }
        }
    }

    use crate::discovery::tests::{app_with_crd, call};
    use axum::http::{Method, StatusCode};

    /// Every `$ref` of a document resolves to one of its own component schemas.
    fn assert_closed(document: &Value, prefix: &str, definitions: &Value) {
        let mut stack = vec![document];
        while let Some(value) = stack.pop() {
            match value {
                Value::Object(map) => {
                    if let Some(Value::String(reference)) = map.get("$ref") {
                        let name = reference
                            .strip_prefix(prefix)
                            .unwrap_or_else(|| panic!("foreign reference {reference}"));
                        assert!(definitions.get(name).is_some(), "dangling {reference}");
                    }
                    stack.extend(map.values());
                }
                Value::Array(items) => stack.extend(items.iter()),
                _ => {}
            }
        }
    }

    fn patch_operation<'a>(document: &'a Value, path: &str) -> &'a Value {
        &document["paths"][path]["patch"]
    }

    #[tokio::test]
    async fn the_v3_index_points_at_hashed_group_version_documents() {
        let app = app_with_crd().await;
        let (status, _, index) = call(&app, Method::GET, "/openapi/v3", None, None).await;
        assert_eq!(status, StatusCode::OK);
        for key in [
            "api/v1",
            "apis/apiextensions.k8s.io/v1",
            "apis/gpucloud.io/v1",
            "apis/gpucloud.io/v1beta1",
        ] {
            let url = index["paths"][key]["serverRelativeURL"].as_str().unwrap();
            assert!(
                url.starts_with(&format!("/openapi/v3/{key}?hash=")),
                "{url}"
            );
            let (status, headers, document) =
                call(&app, Method::GET, url, Some("application/json"), None).await;
            assert_eq!(status, StatusCode::OK, "{url}");
            assert_eq!(headers[header::CACHE_CONTROL], "public, immutable");
            assert_eq!(document["openapi"], "3.0.0");
            assert_closed(
                &document,
                "#/components/schemas/",
                &document["components"]["schemas"],
            );
        }
        // A stale or missing hash still gets the current document, but not as cacheable.
        let (status, headers, _) = call(
            &app,
            Method::GET,
            "/openapi/v3/apis/gpucloud.io/v1?hash=0",
            None,
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::CACHE_CONTROL], "no-cache, private");
        let (status, _, body) = call(
            &app,
            Method::GET,
            "/openapi/v3/apis/nope.example.com/v1",
            None,
            None,
        )
        .await;
        // kube-apiserver's OpenAPI v3 handler answers 404 for a group/version it does not
        // serve (kube-openapi handler3).
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["reason"], "NotFound");
    }

    #[tokio::test]
    async fn custom_resource_documents_carry_the_crd_schema_and_no_strategic_patch() {
        let app = app_with_crd().await;
        let (_, _, document) = call(
            &app,
            Method::GET,
            "/openapi/v3/apis/gpucloud.io/v1",
            None,
            None,
        )
        .await;
        let schema = &document["components"]["schemas"]["io.gpucloud.v1.GpuInstance"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"],
            json!([{"group": "gpucloud.io", "kind": "GpuInstance", "version": "v1"}])
        );
        assert_eq!(schema["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(
            schema["properties"]["metadata"]["allOf"][0]["$ref"],
            format!("#/components/schemas/{OBJECT_META}")
        );
        let list = &document["components"]["schemas"]["io.gpucloud.v1.GpuInstanceList"];
        assert_eq!(
            list["x-kubernetes-group-version-kind"][0]["kind"],
            "GpuInstanceList"
        );

        let item_path = "/apis/gpucloud.io/v1/namespaces/{namespace}/gpuinstances/{name}";
        let patch = patch_operation(&document, item_path);
        assert_eq!(patch["x-kubernetes-action"], "patch");
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "gpucloud.io", "kind": "GpuInstance", "version": "v1"})
        );
        // kubectl leaves validation to the server when this parameter is declared.
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|parameter| parameter["name"] == "fieldValidation"
                    && parameter["in"] == "query")
        );
        let content = patch["requestBody"]["content"].as_object().unwrap();
        assert!(content.contains_key("application/merge-patch+json"));
        assert!(content.contains_key("application/apply-patch+yaml"));
        assert!(!content.contains_key("application/strategic-merge-patch+json"));
        assert!(document["paths"][format!("{item_path}/status")]["patch"].is_object());
    }

    #[tokio::test]
    async fn builtin_documents_offer_strategic_merge_patch_and_full_schemas() {
        let app = app_with_crd().await;
        let (_, _, document) = call(&app, Method::GET, "/openapi/v3/api/v1", None, None).await;
        let config_map = &document["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(
            config_map["x-kubernetes-group-version-kind"],
            json!([{"group": "", "kind": "ConfigMap", "version": "v1"}])
        );
        assert!(config_map["properties"]["data"].is_object());
        let patch = patch_operation(
            &document,
            "/api/v1/namespaces/{namespace}/configmaps/{name}",
        );
        assert!(
            patch["requestBody"]["content"]
                .as_object()
                .unwrap()
                .contains_key("application/strategic-merge-patch+json")
        );
        // Cluster-scoped kinds have no namespace segment.
        assert!(document["paths"]["/api/v1/namespaces/{name}"]["get"].is_object());
    }

    #[test]
    fn operation_ids_follow_the_kubernetes_pattern() {
        assert_eq!(operation_group(""), "Core");
        assert_eq!(operation_group("coordination.k8s.io"), "Coordination");
        assert_eq!(operation_group("gpucloud.io"), "GpucloudIo");
    }

    #[test]
    fn document_hashes_are_stable_and_content_sensitive() {
        let first = document_hash(&json!({"a": 1}));
        assert_eq!(first, document_hash(&json!({"a": 1})));
        assert_ne!(first, document_hash(&json!({"a": 2})));
        assert_eq!(first.len(), 16);
    }
}
