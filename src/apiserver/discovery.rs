//! API discovery: `/version`, the legacy documents (`/api`, `/api/v1`, `/apis`,
//! `/apis/{group}`, `/apis/{group}/{version}`) and aggregated discovery
//! (`apidiscovery.k8s.io/v2` and `v2beta1` `APIGroupDiscoveryList`) when the client asks for it
//! in `Accept`, as kubectl 1.30+ does.
//!
//! Shapes follow kube-apiserver's `staging/src/k8s.io/apiserver/pkg/endpoints/discovery/`
//! (`legacy.go`, `root.go`, `group.go`, `version.go`, `aggregated/handler.go`), and all
//! documents are built from the live [`Registry`], so a CRD shows up as soon as it is
//! established and disappears when it is deleted.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use serde_json::{Value, json};

use crate::registry::ResourceInfo;
use crate::server::AppState;
use crate::status::ApiError;
use crate::table::parse_accept;

/// The Kubernetes release this server's API surface corresponds to (k8s-openapi `v1_33`).
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "33");

/// The aggregated discovery media type versions this server can answer with, best first.
const AGGREGATED_VERSIONS: &[&str] = &["v2", "v2beta1"];

/// The discovery routes, merged into the server's router, with the self-review endpoints
/// whose resources discovery lists.
pub fn routes() -> Router<AppState> {
    Router::new()
        .merge(crate::auth::review_routes())
        .route("/healthz", read_only(get(health)))
        .route("/livez", read_only(get(health)))
        .route("/readyz", read_only(get(health)))
        .route("/version", read_only(get(version)))
        .route("/version/", read_only(get(version)))
        .route("/api", read_only(get(legacy_versions)))
        .route("/api/", read_only(get(legacy_versions)))
        .route("/api/{version}", read_only(get(legacy_resources)))
        .route("/apis", read_only(get(group_list)))
        .route("/apis/", read_only(get(group_list)))
        .route("/apis/{group}", read_only(get(group)))
        .route("/apis/{group}/{version}", read_only(get(group_resources)))
}

/// Answers anything but GET (and HEAD, which axum derives) on a discovery path with the
/// real server's 405 Status.
fn read_only(router: MethodRouter<AppState>) -> MethodRouter<AppState> {
    router.fallback(|| async {
        ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )
    })
}

// === handlers ===

/// Health endpoints answer `ok` as kube-apiserver's (`healthz.InstallHandler`); the server has
/// no dependencies that could be unhealthy while it answers at all.
async fn health() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        "ok",
    )
        .into_response()
}

async fn version() -> Response {
    let (major, minor) = KUBERNETES_VERSION;
    json_response(&version_info(major, minor))
}

/// `/version` as kube-apiserver serves it (`version.Info`).
fn version_info(major: &str, minor: &str) -> Value {
    json!({
        "major": major,
        "minor": minor,
        "gitVersion": format!("v{major}.{minor}.0"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

/// Go's name for the architecture, as `platform` uses it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

async fn legacy_versions(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let resources = served(&state);
    if let Some(version) = aggregated_version(&headers) {
        let core: Vec<ResourceInfo> = resources
            .into_iter()
            .filter(|info| info.group.is_empty())
            .collect();
        return aggregated_response(version, &core, true);
    }
    json_response(&json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": server_addresses(&headers),
    }))
}

async fn legacy_resources(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    // A path that does not decode (bad percent-encoding) names nothing served.
    let Path(version) = path.map_err(|_| not_found())?;
    let resources: Vec<ResourceInfo> = served(&state)
        .into_iter()
        .filter(|info| info.group.is_empty() && info.version == version)
        .collect();
    if resources.is_empty() {
        return Err(not_found());
    }
    // The legacy group's list carries no apiVersion (legacy.go writes it bare).
    Ok(json_response(&json!({
        "kind": "APIResourceList",
        "groupVersion": version,
        "resources": api_resources(&resources),
    })))
}

async fn group_list(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let resources = served(&state);
    let named: Vec<ResourceInfo> = resources
        .into_iter()
        .filter(|info| !info.group.is_empty())
        .collect();
    if let Some(version) = aggregated_version(&headers) {
        return aggregated_response(version, &named, false);
    }
    let groups: Vec<Value> = group_versions(&named)
        .into_iter()
        .map(|(group, versions)| api_group(&group, &versions))
        .collect();
    json_response(&json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups,
    }))
}

async fn group(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(group) = path.map_err(|_| not_found())?;
    let resources: Vec<ResourceInfo> = served(&state)
        .into_iter()
        .filter(|info| info.group == group)
        .collect();
    let versions = group_versions(&resources)
        .remove(&group)
        .filter(|versions| !versions.is_empty() && !group.is_empty())
        .ok_or_else(not_found)?;
    let mut document = api_group(&group, &versions);
    if let Some(object) = document.as_object_mut() {
        object.insert("kind".to_owned(), json!("APIGroup"));
        object.insert("apiVersion".to_owned(), json!("v1"));
    }
    Ok(json_response(&document))
}

async fn group_resources(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path((group, version)) = path.map_err(|_| not_found())?;
    let resources: Vec<ResourceInfo> = served(&state)
        .into_iter()
        .filter(|info| !info.group.is_empty() && info.group == group && info.version == version)
        .collect();
    if resources.is_empty() {
        return Err(not_found());
    }
    Ok(json_response(&json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{group}/{version}"),
        "resources": api_resources(&resources),
    })))
}

// === documents ===

/// The served resources of the registry, plus the create-only self-review resources.
fn served(state: &AppState) -> Vec<ResourceInfo> {
    let mut resources: Vec<ResourceInfo> = state
        .registry
        .resources()
        .into_iter()
        .filter(|info| info.served)
        .collect();
    resources.push(review_resource(
        "authentication.k8s.io",
        "SelfSubjectReview",
        "selfsubjectreviews",
    ));
    resources.push(review_resource(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
    ));
    resources.push(review_resource(
        "authorization.k8s.io",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
    ));
    resources
}

/// A create-only, cluster-scoped review resource (see [`crate::auth::review_routes`]).
fn review_resource(group: &str, kind: &str, plural: &str) -> ResourceInfo {
    ResourceInfo {
        group: group.to_owned(),
        version: "v1".to_owned(),
        kind: kind.to_owned(),
        list_kind: String::new(),
        plural: plural.to_owned(),
        singular: kind.to_ascii_lowercase(),
        short_names: Vec::new(),
        categories: Vec::new(),
        namespaced: false,
        verbs: vec!["create"],
        has_status: false,
        scale: None,
        printer_columns: Vec::new(),
        schema: None,
        storage_version: true,
        served: true,
    }
}

/// Groups with their versions, each group's versions by Kubernetes version priority.
fn group_versions(resources: &[ResourceInfo]) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for info in resources {
        let versions = groups.entry(info.group.clone()).or_default();
        if !versions.contains(&info.version) {
            versions.push(info.version.clone());
        }
    }
    for versions in groups.values_mut() {
        versions.sort_by(|left, right| compare_versions(left, right));
    }
    groups
}

/// One `APIGroup` entry (without kind/apiVersion), preferred version first.
fn api_group(group: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|version| json!({"groupVersion": format!("{group}/{version}"), "version": version}))
        .collect();
    let preferred = entries.first().cloned().unwrap_or(Value::Null);
    json!({
        "name": group,
        "versions": entries,
        "preferredVersion": preferred,
    })
}

/// `APIResource` entries of one group/version, each resource followed by its subresources.
fn api_resources(resources: &[ResourceInfo]) -> Vec<Value> {
    let mut sorted: Vec<&ResourceInfo> = resources.iter().collect();
    sorted.sort_by(|left, right| left.plural.cmp(&right.plural));
    let mut entries = Vec::new();
    for info in sorted {
        let mut entry = json!({
            "name": info.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": info.verbs,
        });
        if let Some(object) = entry.as_object_mut() {
            if !info.short_names.is_empty() {
                object.insert("shortNames".to_owned(), json!(info.short_names));
            }
            if !info.categories.is_empty() {
                object.insert("categories".to_owned(), json!(info.categories));
            }
        }
        entries.push(entry);
        if info.has_status {
            entries.push(json!({
                "name": format!("{}/status", info.plural),
                "singularName": "",
                "namespaced": info.namespaced,
                "kind": info.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if info.scale.is_some() {
            entries.push(json!({
                "name": format!("{}/scale", info.plural),
                "singularName": "",
                "namespaced": info.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    entries
}

/// An `APIGroupDiscoveryList` for `resources`; `legacy` answers `/api` (one unnamed group).
fn aggregated_response(version: &str, resources: &[ResourceInfo], legacy: bool) -> Response {
    let mut by_group: BTreeMap<String, Vec<&ResourceInfo>> = BTreeMap::new();
    for info in resources {
        by_group.entry(info.group.clone()).or_default().push(info);
    }
    let versions_of = group_versions(resources);
    let items: Vec<Value> = by_group
        .iter()
        .map(|(group, infos)| {
            let versions: Vec<Value> = versions_of
                .get(group)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|version| {
                    let mut in_version: Vec<&&ResourceInfo> = infos
                        .iter()
                        .filter(|info| &info.version == version)
                        .collect();
                    in_version.sort_by(|left, right| left.plural.cmp(&right.plural));
                    let entries: Vec<Value> = in_version
                        .into_iter()
                        .map(|info| aggregated_resource(info))
                        .collect();
                    json!({"version": version, "resources": entries, "freshness": "Current"})
                })
                .collect();
            let metadata = if legacy {
                json!({"creationTimestamp": null})
            } else {
                json!({"name": group, "creationTimestamp": null})
            };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    let document = json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    });
    let content_type =
        format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList");
    let mut response = json_response(&document);
    if let Ok(value) = HeaderValue::from_str(&content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    response
}

/// One `APIResourceDiscovery` entry.
fn aggregated_resource(info: &ResourceInfo) -> Value {
    let response_kind = json!({"group": info.group, "version": info.version, "kind": info.kind});
    let mut entry = json!({
        "resource": info.plural,
        "responseKind": response_kind,
        "scope": if info.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": info.singular,
        "verbs": info.verbs,
    });
    if let Some(object) = entry.as_object_mut() {
        if !info.short_names.is_empty() {
            object.insert("shortNames".to_owned(), json!(info.short_names));
        }
        if !info.categories.is_empty() {
            object.insert("categories".to_owned(), json!(info.categories));
        }
        let mut subresources = Vec::new();
        if info.has_status {
            subresources.push(json!({
                "subresource": "status",
                "responseKind": response_kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if info.scale.is_some() {
            subresources.push(json!({
                "subresource": "scale",
                "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                "verbs": ["get", "patch", "update"],
            }));
        }
        if !subresources.is_empty() {
            object.insert("subresources".to_owned(), Value::Array(subresources));
        }
    }
    entry
}

/// The aggregated discovery version the client accepts, if any (first acceptable wins).
fn aggregated_version(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    parse_accept(accept).into_iter().find_map(|media| {
        let is_discovery = media.essence == "application/json"
            && media.param("g") == Some("apidiscovery.k8s.io")
            && media.param("as") == Some("APIGroupDiscoveryList");
        if !is_discovery {
            return None;
        }
        let version = media.param("v")?;
        AGGREGATED_VERSIONS
            .iter()
            .copied()
            .find(|known| *known == version)
    })
}

/// `serverAddressByClientCIDRs` as the legacy document carries it: the address the client used.
fn server_addresses(headers: &HeaderMap) -> Value {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("127.0.0.1");
    json!([{"clientCIDR": "0.0.0.0/0", "serverAddress": host}])
}

/// What kube-apiserver answers for a discovery path it does not serve.
fn not_found() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

fn json_response(document: &Value) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        document.to_string(),
    )
        .into_response()
}

// === version priority ===

/// Orders Kubernetes API versions by priority, highest first, as `version.CompareKubeAwareVersionStrings`
/// does: GA before beta before alpha, higher numbers first, then anything else alphabetically.
pub fn compare_versions(left: &str, right: &str) -> Ordering {
    match (parse_kube_version(left), parse_kube_version(right)) {
        (Some(left), Some(right)) => right.cmp(&left),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => left.cmp(right),
    }
}

/// `(stability, major, minor)` where stability is 2 for GA, 1 for beta, 0 for alpha, so the
/// natural order of the tuple is the priority order (higher is preferred).
fn parse_kube_version(version: &str) -> Option<(u8, u64, u64)> {
    let rest = version.strip_prefix('v')?;
    let digits_end = rest
        .find(|character: char| !character.is_ascii_digit())
        .unwrap_or(rest.len());
    let major: u64 = rest.get(..digits_end)?.parse().ok()?;
    if major == 0 {
        return None;
    }
    let suffix = rest.get(digits_end..)?;
    if suffix.is_empty() {
        return Some((2, major, 0));
    }
    let (stability, number) = if let Some(number) = suffix.strip_prefix("beta") {
        (1, number)
    } else if let Some(number) = suffix.strip_prefix("alpha") {
        (0, number)
    } else {
        return None;
    };
    let minor: u64 = number.parse().ok()?;
    if minor == 0 {
        return None;
    }
    Some((stability, major, minor))
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    use crate::server::{ApiServerConfig, router};
    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};
    use tower::ServiceExt;

    const CRD: &str = r#"{
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gpuinstances.gpucloud.io"},
        "spec": {"group": "gpucloud.io", "scope": "Namespaced",
            "names": {"kind": "GpuInstance", "listKind": "GpuInstanceList", "plural": "gpuinstances",
                      "singular": "gpuinstance", "shortNames": ["gi"], "categories": ["gpucloud"]},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
            ]}
    }"#;

    pub(crate) async fn call(
        app: &axum::Router,
        method: Method,
        uri: &str,
        accept: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, HeaderMap, Value) {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(body.map_or_else(Body::empty, |text| Body::from(text.to_owned())))
            .unwrap();
        let response = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            app.clone().oneshot(request),
        )
        .await
        .unwrap()
        .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), 64 << 20)
            .await
            .unwrap();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, headers, value)
    }

    /// A server router (no TLS, no auth) with the GpuInstance CRD created.
    pub(crate) async fn app_with_crd() -> axum::Router {
        let state = AppState::new(&ApiServerConfig::default());
        // The background collector finishes CRD deletion (its cleanup finalizer), as in a
        // running server; the task ends with the test's runtime.
        tokio::spawn(crate::gc::run(state.clone()));
        let app = router(state);
        let (status, _, body) = call(
            &app,
            Method::POST,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            None,
            Some(CRD),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        app
    }

    fn names(resources: &Value) -> Vec<String> {
        resources
            .as_array()
            .unwrap()
            .iter()
            .map(|resource| resource["name"].as_str().unwrap().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn legacy_documents_list_the_core_group_and_its_resources() {
        // The shapes kube-apiserver serves (endpoints/discovery/legacy.go and version.go).
        let app = router(AppState::new(&ApiServerConfig::default()));
        let (status, _, versions) = call(&app, Method::GET, "/api", None, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(versions["kind"], "APIVersions");
        assert_eq!(versions["versions"], json!(["v1"]));

        let (status, _, list) = call(&app, Method::GET, "/api/v1", None, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list["kind"], "APIResourceList");
        assert_eq!(list["groupVersion"], "v1");
        let resources = names(&list["resources"]);
        for expected in [
            "configmaps",
            "events",
            "namespaces",
            "namespaces/status",
            "secrets",
            "serviceaccounts",
        ] {
            assert!(resources.contains(&expected.to_owned()), "{resources:?}");
        }
        let config_maps = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|resource| resource["name"] == "configmaps")
            .unwrap();
        assert_eq!(config_maps["kind"], "ConfigMap");
        assert_eq!(config_maps["namespaced"], true);
        assert_eq!(config_maps["shortNames"], json!(["cm"]));
        assert!(
            config_maps["verbs"]
                .as_array()
                .unwrap()
                .contains(&json!("watch"))
        );

        for path in ["/healthz", "/livez", "/readyz"] {
            let (status, headers, _) = call(&app, Method::GET, path, None, None).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert_eq!(headers[header::CONTENT_TYPE], "text/plain; charset=utf-8");
        }
        let (status, _, version) = call(&app, Method::GET, "/version", None, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(version["gitVersion"], "v1.33.0");
    }

    #[tokio::test]
    async fn crd_groups_appear_with_preferred_version_short_names_and_status() {
        let app = app_with_crd().await;
        let (_, _, groups) = call(&app, Method::GET, "/apis", None, None).await;
        assert_eq!(groups["kind"], "APIGroupList");
        let group = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|group| group["name"] == "gpucloud.io")
            .unwrap()
            .clone();
        // v1 outranks v1beta1, so it is listed first and preferred.
        assert_eq!(
            group["versions"],
            json!([{"groupVersion": "gpucloud.io/v1", "version": "v1"},
                   {"groupVersion": "gpucloud.io/v1beta1", "version": "v1beta1"}])
        );
        assert_eq!(group["preferredVersion"]["version"], "v1");

        let (status, _, single) = call(&app, Method::GET, "/apis/gpucloud.io", None, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(single["kind"], "APIGroup");
        assert_eq!(single["preferredVersion"], group["preferredVersion"]);

        let (_, _, list) = call(&app, Method::GET, "/apis/gpucloud.io/v1", None, None).await;
        assert_eq!(list["groupVersion"], "gpucloud.io/v1");
        assert_eq!(
            names(&list["resources"]),
            ["gpuinstances", "gpuinstances/status"]
        );
        assert_eq!(list["resources"][0]["shortNames"], json!(["gi"]));
        assert_eq!(list["resources"][0]["categories"], json!(["gpucloud"]));
        assert_eq!(
            list["resources"][1]["verbs"],
            json!(["get", "patch", "update"])
        );
        // v1beta1 declares no status subresource.
        let (_, _, beta) = call(&app, Method::GET, "/apis/gpucloud.io/v1beta1", None, None).await;
        assert_eq!(names(&beta["resources"]), ["gpuinstances"]);
    }

    #[tokio::test]
    async fn aggregated_discovery_answers_kubectls_accept_header() {
        let app = app_with_crd().await;
        let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        let (status, headers, document) =
            call(&app, Method::GET, "/apis", Some(accept), None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            headers[header::CONTENT_TYPE],
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
        assert_eq!(document["kind"], "APIGroupDiscoveryList");
        assert_eq!(document["apiVersion"], "apidiscovery.k8s.io/v2");
        let group = document["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["metadata"]["name"] == "gpucloud.io")
            .unwrap();
        assert_eq!(group["versions"][0]["version"], "v1");
        let resource = &group["versions"][0]["resources"][0];
        assert_eq!(resource["resource"], "gpuinstances");
        assert_eq!(resource["scope"], "Namespaced");
        assert_eq!(resource["singularResource"], "gpuinstance");
        assert_eq!(
            resource["responseKind"],
            json!({"group": "gpucloud.io", "version": "v1", "kind": "GpuInstance"})
        );
        assert_eq!(resource["subresources"][0]["subresource"], "status");

        let (_, headers, core) = call(&app, Method::GET, "/api", Some(accept), None).await;
        assert_eq!(
            headers[header::CONTENT_TYPE],
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert!(core["items"][0]["metadata"].get("name").is_none());
        let namespaces = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|resource| resource["resource"] == "namespaces")
            .unwrap();
        assert_eq!(namespaces["scope"], "Cluster");
    }

    #[tokio::test]
    async fn unknown_groups_are_not_found_and_writes_are_not_allowed() {
        let app = app_with_crd().await;
        // What kube-apiserver answers for discovery paths it does not serve
        // (NotFound Status from the apiserver's not-found handler).
        for path in [
            "/apis/nope.example.com",
            "/apis/nope.example.com/v1",
            "/apis/gpucloud.io/v9",
            "/api/v2",
        ] {
            let (status, _, body) = call(&app, Method::GET, path, None, None).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
            assert_eq!(body["kind"], "Status", "{path}");
            assert_eq!(body["reason"], "NotFound", "{path}");
        }
        // Discovery is read-only: the real server answers other verbs with 405 MethodNotAllowed.
        let (status, _, body) = call(&app, Method::POST, "/api", None, Some("{}")).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(body["reason"], "MethodNotAllowed");
    }

    #[tokio::test]
    async fn deleting_the_crd_removes_its_group() {
        let app = app_with_crd().await;
        let (status, _, body) = call(
            &app,
            Method::DELETE,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gpuinstances.gpucloud.io",
            None,
            None,
        )
        .await;
        assert!(status.is_success(), "{status} {body}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (_, _, groups) = call(&app, Method::GET, "/apis", None, None).await;
            let present = groups["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|group| group["name"] == "gpucloud.io");
            if !present {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "group still listed");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        // Once the CRD is gone its group/version is not served: 404, as kube-apiserver.
        let (status, _, _) = call(&app, Method::GET, "/apis/gpucloud.io/v1", None, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn kube_rs_discovery_finds_builtin_and_crd_resources() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let step = std::time::Duration::from_secs(10);
        let server = tokio::time::timeout(
            step,
            crate::server::ApiServer::start(ApiServerConfig::default()),
        )
        .await
        .unwrap()
        .unwrap();
        let client = tokio::time::timeout(step, server.kube_client())
            .await
            .unwrap()
            .unwrap();
        let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
        let crd: CustomResourceDefinition = serde_json::from_str(CRD).unwrap();
        tokio::time::timeout(step, crds.create(&kube::api::PostParams::default(), &crd))
            .await
            .unwrap()
            .unwrap();

        let discovery = tokio::time::timeout(step, kube::Discovery::new(client.clone()).run())
            .await
            .unwrap()
            .unwrap();
        let group = discovery
            .get("gpucloud.io")
            .expect("gpucloud.io discovered");
        assert_eq!(group.preferred_version_or_latest(), "v1");
        let (resource, capabilities) = group.recommended_kind("GpuInstance").unwrap();
        assert_eq!(resource.plural, "gpuinstances");
        assert_eq!(capabilities.scope, kube::discovery::Scope::Namespaced);
        assert!(
            capabilities
                .subresources
                .iter()
                .any(|(subresource, _)| subresource.plural == "status")
        );
        let core = discovery.get("").expect("core group discovered");
        let (config_maps, _) = core.recommended_kind("ConfigMap").unwrap();
        assert_eq!(config_maps.plural, "configmaps");
        server.shutdown().await;
    }

    #[test]
    fn versions_sort_by_kubernetes_priority() {
        let mut versions = vec![
            "v1alpha1",
            "v1",
            "foo10",
            "v11alpha2",
            "v2beta1",
            "v12alpha1",
            "v10",
            "v1beta1",
            "foo1",
            "v2",
            "v10beta3",
            "v3beta1",
            "v11beta2",
        ];
        versions.sort_by(|left, right| compare_versions(left, right));
        // The order documented for CRD version priority in the Kubernetes docs
        // ("Version priority" in custom-resource-definition-versioning).
        assert_eq!(
            versions,
            [
                "v10",
                "v2",
                "v1",
                "v11beta2",
                "v10beta3",
                "v3beta1",
                "v2beta1",
                "v1beta1",
                "v12alpha1",
                "v11alpha2",
                "v1alpha1",
                "foo1",
                "foo10"
            ]
        );
    }

    #[test]
    fn aggregated_discovery_is_chosen_only_when_accepted() {
        let mut headers = HeaderMap::new();
        assert_eq!(aggregated_version(&headers), None);
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
            ),
        );
        assert_eq!(aggregated_version(&headers), Some("v2"));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
            ),
        );
        assert_eq!(aggregated_version(&headers), Some("v2beta1"));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, */*"),
        );
        assert_eq!(aggregated_version(&headers), None);
    }
}
