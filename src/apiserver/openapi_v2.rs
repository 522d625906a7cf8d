//! `/openapi/v2`: the Swagger 2.0 document of everything served, in JSON or in gnostic's
//! protobuf encoding ([`crate::gnostic`]), as kube-apiserver's kube-openapi handler serves it.
//!
//! kubectl asks for it in protobuf only (client-go's `OpenAPISchema`), and reads it to validate
//! client-side what its OpenAPI v3 lookup does not cover: the items of a `kind: List`, and kinds
//! no served group knows (which it then reports as "no matches for kind"). `kubectl explain
//! --output=plaintext-openapiv2` and client-side `kubectl apply`'s choice of patch type for
//! custom resources read it too.
//!
//! The document is the v3 documents' schemas and paths in Swagger 2.0 form, shaped as the real
//! one is shaped, because kubectl's parser of the protobuf form (kube-openapi's
//! `proto.NewOpenAPIData`) refuses the whole document over one definition it cannot read:
//! - a reference is a plain `$ref` (v3's `allOf: [{$ref}]` wrapper is gone), and there are no
//!   `default`s (`handler.PruneDefaults`), nor the keywords Swagger 2.0 lacks (`nullable`,
//!   `oneOf`, `anyOf`, `not`);
//! - custom resources' schemas are apiextensions-apiserver's v2 form of the CRD schema
//!   (`ToStructuralOpenAPIV2`: nullable and preserve-unknown-fields nodes lose their type,
//!   properties and items, junctors go, nullable properties are no longer required; a kind
//!   whose root preserves unknown fields is a bare object), with the object envelope and the
//!   envelope of embedded resources (`addEmbeddedProperties`) added.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::discovery::KUBERNETES_VERSION;
use crate::openapi::{self, OBJECT_META};
use crate::registry::ResourceInfo;
use crate::server::AppState;
use crate::table::parse_accept;

/// The protobuf media types: kubectl asks for the first; the answer names the second, as
/// kube-openapi's does (Go's media type parser refuses the `@`).
const PROTOBUF: [&str; 2] = [
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
];

const EMBEDDED_API_VERSION_DESCRIPTION: &str = "apiVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const EMBEDDED_KIND_DESCRIPTION: &str = "kind is a string value representing the type of this object. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// The encodings `/openapi/v2` answers in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Json,
    Protobuf,
}

/// kube-openapi's negotiation: the `Accept` ranges by preference (quality, then specificity),
/// and the first that JSON or the protobuf type satisfies decides (JSON for wildcards); none
/// is a 406. No `Accept` is `*/*`.
fn negotiate(headers: &HeaderMap) -> Option<Encoding> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .filter(|accept| !accept.trim().is_empty())
        .unwrap_or("*/*");
    let mut ranges: Vec<(f64, u8, String)> = parse_accept(accept)
        .into_iter()
        .map(|media| {
            let quality = media
                .param("q")
                .and_then(|q| q.parse::<f64>().ok())
                .unwrap_or(1.0);
            let specificity = match media.essence.split_once('/') {
                Some(("*", _)) => 0,
                Some((_, "*")) => 1,
                _ => 2,
            };
            (quality, specificity, media.essence)
        })
        .collect();
    // Stable: equally preferred ranges keep the client's order.
    ranges.sort_by(|left, right| {
        right
            .0
            .total_cmp(&left.0)
            .then_with(|| right.1.cmp(&left.1))
    });
    ranges
        .into_iter()
        .find_map(|(_, _, essence)| match essence.as_str() {
            "*/*" | "application/*" | "application/json" => Some(Encoding::Json),
            essence if PROTOBUF.contains(&essence) => Some(Encoding::Protobuf),
            _ => None,
        })
}

pub(crate) async fn handler(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(encoding) = negotiate(&headers) else {
        // kube-openapi answers a bare 406, no Status body.
        return (
            StatusCode::NOT_ACCEPTABLE,
            [(header::VARY, HeaderValue::from_static("Accept"))],
        )
            .into_response();
    };
    let document = document(&state);
    let (content_type, body) = match encoding {
        Encoding::Json => ("application/json", document.to_string().into_bytes()),
        Encoding::Protobuf => (PROTOBUF[1], crate::gnostic::encode_document(&document)),
    };
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache, private"),
            ),
            (header::VARY, HeaderValue::from_static("Accept")),
        ],
        body,
    )
        .into_response()
}

/// The Swagger 2.0 document of every served group/version.
pub(crate) fn document(state: &AppState) -> Value {
    let resources = state.registry.resources();
    let mut definitions = Map::new();
    let mut paths = Map::new();
    for (group, version) in openapi::group_versions(state) {
        let v3 = openapi::v3_document(state, &group, &version);
        if let Some(schemas) = v3.pointer("/components/schemas").and_then(Value::as_object) {
            for (name, schema) in schemas {
                let custom = resources.iter().find(|info| {
                    info.served
                        && info.is_custom()
                        && info.group == group
                        && info.version == version
                        && openapi::schema_name(info) == *name
                });
                let mut schema = match custom {
                    Some(info) => custom_definition(info),
                    None => schema.clone(),
                };
                to_v2_schema(&mut schema);
                definitions.insert(name.clone(), schema);
            }
        }
        if let Some(group_paths) = v3.get("paths").and_then(Value::as_object) {
            for (path, item) in group_paths {
                paths.insert(path.clone(), v3_path_to_v2(item));
            }
        }
    }
    let (major, minor) = KUBERNETES_VERSION;
    let mut document = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": format!("v{major}.{minor}.0")},
        "paths": paths,
        "definitions": definitions,
    });
    openapi::rewrite_refs(&mut document, "#/components/schemas/", "#/definitions/");
    document
}

// === schemas ===

/// A v3 component schema in Swagger 2.0 form: plain references, no defaults, none of the
/// keywords Swagger 2.0 lacks.
fn to_v2_schema(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    let single_reference = match map.get("allOf") {
        Some(Value::Array(all_of)) if all_of.len() == 1 => all_of[0].get("$ref").cloned(),
        _ => None,
    };
    if let Some(reference) = single_reference {
        map.remove("allOf");
        map.insert("$ref".to_owned(), reference);
    }
    for keyword in ["default", "nullable", "oneOf", "anyOf", "not"] {
        map.remove(keyword);
    }
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(to_v2_schema);
    }
    match map.get_mut("items") {
        Some(Value::Array(items)) => items.iter_mut().for_each(to_v2_schema),
        Some(items) => to_v2_schema(items),
        None => {}
    }
    if let Some(additional @ Value::Object(_)) = map.get_mut("additionalProperties") {
        to_v2_schema(additional);
    }
    if let Some(Value::Array(all_of)) = map.get_mut("allOf") {
        all_of.iter_mut().for_each(to_v2_schema);
    }
}

fn is_true(map: &Map<String, Value>, key: &str) -> bool {
    map.get(key) == Some(&Value::Bool(true))
}

/// A custom resource kind's definition, as apiextensions-apiserver's OpenAPI builder makes
/// the v2 one (`buildKubeNative` with `V2: true`).
fn custom_definition(info: &ResourceInfo) -> Value {
    let mut schema = info
        .schema
        .as_ref()
        .map(|schema| schema.raw().clone())
        .unwrap_or_else(|| json!({}));
    let preserves = schema
        .as_object()
        .is_some_and(|map| is_true(map, "x-kubernetes-preserve-unknown-fields"));
    let mut definition = if preserves {
        // Any property would make kubectl refuse every field not listed.
        json!({"type": "object"})
    } else {
        structural_v2(&mut schema);
        if let Some(map) = schema.as_object_mut() {
            let properties = map
                .entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(properties) = properties.as_object_mut() {
                properties.extend(openapi::envelope_properties());
            }
            map.entry("type").or_insert_with(|| json!("object"));
        }
        add_embedded_properties(&mut schema);
        schema
    };
    openapi::set_gvk(&mut definition, info, &info.kind);
    definition
}

/// apiextensions-apiserver's `ToStructuralOpenAPIV2`, on the JSON schema: each node, parent
/// before children, loses what kubectl's v2 validation cannot cope with.
fn structural_v2(node: &mut Value) {
    let Some(map) = node.as_object_mut() else {
        return;
    };
    for junctor in ["allOf", "oneOf", "anyOf", "not"] {
        map.remove(junctor);
    }
    // What a structural schema does not keep.
    for dropped in ["example", "externalDocs"] {
        map.remove(dropped);
    }
    let preserves = is_true(map, "x-kubernetes-preserve-unknown-fields");
    if is_true(map, "nullable") {
        map.remove("type");
        map.remove("items");
        map.remove("properties");
    }
    map.remove("nullable");
    if preserves {
        map.remove("items");
        map.remove("properties");
    }
    let type_is = |map: &Map<String, Value>, name: &str| {
        map.get("type").and_then(Value::as_str) == Some(name)
    };
    if !map.contains_key("items") && type_is(map, "array") {
        map.remove("type");
    }
    if preserves && type_is(map, "object") {
        map.remove("type");
    }
    // A nullable property is no longer required (null would fail kubectl's check).
    let nullable_properties: Vec<String> = map
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .filter(|(_, property)| {
                    property
                        .as_object()
                        .is_some_and(|property| is_true(property, "nullable"))
                })
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default();
    let nullable_values = map
        .get("additionalProperties")
        .and_then(Value::as_object)
        .is_some_and(|additional| is_true(additional, "nullable"));
    if nullable_values {
        map.remove("required");
    } else if !nullable_properties.is_empty()
        && let Some(Value::Array(required)) = map.get_mut("required")
    {
        required.retain(|name| {
            !name
                .as_str()
                .is_some_and(|name| nullable_properties.iter().any(|n| n == name))
        });
        if required.is_empty() {
            map.remove("required");
        }
    }
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(structural_v2);
    }
    if let Some(items) = map.get_mut("items") {
        structural_v2(items);
    }
    if let Some(additional @ Value::Object(_)) = map.get_mut("additionalProperties") {
        structural_v2(additional);
    }
}

/// apiextensions-apiserver's `addEmbeddedProperties` for v2: an embedded resource gets the
/// object envelope (`apiVersion` and `kind` required), unless it preserves unknown fields.
fn add_embedded_properties(node: &mut Value) {
    let Some(map) = node.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(add_embedded_properties);
    }
    if let Some(items @ Value::Object(_)) = map.get_mut("items") {
        add_embedded_properties(items);
    }
    if let Some(additional @ Value::Object(_)) = map.get_mut("additionalProperties") {
        add_embedded_properties(additional);
    }
    if is_true(map, "x-kubernetes-preserve-unknown-fields")
        || !is_true(map, "x-kubernetes-embedded-resource")
    {
        return;
    }
    let properties = map
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(properties) = properties.as_object_mut() {
        properties.insert(
            "apiVersion".to_owned(),
            json!({"type": "string", "description": EMBEDDED_API_VERSION_DESCRIPTION}),
        );
        properties.insert(
            "kind".to_owned(),
            json!({"type": "string", "description": EMBEDDED_KIND_DESCRIPTION}),
        );
        properties.insert(
            "metadata".to_owned(),
            json!({"$ref": format!("#/components/schemas/{OBJECT_META}"),
                   "description": openapi::METADATA_DESCRIPTION}),
        );
    }
    let required = map.entry("required").or_insert_with(|| json!([]));
    if let Some(required) = required.as_array_mut() {
        for field in ["kind", "apiVersion"] {
            if !required.iter().any(|name| name == field) {
                required.push(json!(field));
            }
        }
    }
}

// === paths ===

/// A Swagger 2.0 path item from an OpenAPI 3.0 one: body parameters instead of request
/// bodies, `consumes` from the content types.
fn v3_path_to_v2(item: &Value) -> Value {
    let mut converted = Map::new();
    let Some(map) = item.as_object() else {
        return Value::Object(converted);
    };
    for (key, operation) in map {
        if key == "parameters" {
            converted.insert(key.clone(), v3_parameters_to_v2(operation));
            continue;
        }
        let mut operation = operation.clone();
        if let Some(object) = operation.as_object_mut() {
            if let Some(parameters) = object.get("parameters") {
                let parameters = v3_parameters_to_v2(parameters);
                object.insert("parameters".to_owned(), parameters);
            }
            if let Some(body) = object.remove("requestBody") {
                let consumes: Vec<String> = body
                    .get("content")
                    .and_then(Value::as_object)
                    .map(|content| content.keys().cloned().collect())
                    .unwrap_or_default();
                let schema = body
                    .get("content")
                    .and_then(Value::as_object)
                    .and_then(|content| content.values().next())
                    .and_then(|media| media.get("schema"))
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                if let Some(Value::Array(parameters)) = object.get_mut("parameters") {
                    parameters.insert(
                        0,
                        json!({"name": "body", "in": "body", "required": true, "schema": schema}),
                    );
                }
                object.insert("consumes".to_owned(), json!(consumes));
            }
            if let Some(Value::Object(responses)) = object.get_mut("responses") {
                for response in responses.values_mut() {
                    if let Some(schema) = response
                        .pointer("/content/application~1json/schema")
                        .cloned()
                        && let Some(response) = response.as_object_mut()
                    {
                        response.remove("content");
                        response.insert("schema".to_owned(), schema);
                    }
                }
            }
            object.insert("produces".to_owned(), json!(["application/json"]));
        }
        converted.insert(key.clone(), operation);
    }
    Value::Object(converted)
}

fn v3_parameters_to_v2(parameters: &Value) -> Value {
    let Some(parameters) = parameters.as_array() else {
        return json!([]);
    };
    Value::Array(
        parameters
            .iter()
            .map(|parameter| {
                let mut parameter = parameter.clone();
                if let Some(object) = parameter.as_object_mut()
                    && let Some(Value::Object(schema)) = object.remove("schema")
                {
                    for (key, value) in schema {
                        object.insert(key, value);
                    }
                }
                parameter
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::discovery::tests::{app_with_crd, call};
    use crate::gnostic::tests::{all, decode, named, text};
    use axum::body::Body;
    use axum::http::{Method, Request};
    use tower::ServiceExt;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn negotiation_follows_kube_openapi() {
        assert_eq!(negotiate(&HeaderMap::new()), Some(Encoding::Json));
        assert_eq!(negotiate(&accept(PROTOBUF[0])), Some(Encoding::Protobuf));
        assert_eq!(negotiate(&accept(PROTOBUF[1])), Some(Encoding::Protobuf));
        // The first acceptable range in the client's order wins, wildcards after exact types.
        assert_eq!(
            negotiate(&accept(&format!("{}, application/json", PROTOBUF[0]))),
            Some(Encoding::Protobuf)
        );
        assert_eq!(
            negotiate(&accept(&format!("*/*, {}", PROTOBUF[0]))),
            Some(Encoding::Protobuf)
        );
        assert_eq!(
            negotiate(&accept(&format!("{};q=0.5, application/json", PROTOBUF[0]))),
            Some(Encoding::Json)
        );
        assert_eq!(negotiate(&accept("application/xml")), None);
    }

    /// What kube-openapi's `proto.NewOpenAPIData` (kubectl's reader of the document) refuses
    /// in a schema: a reference to no definition, more than one type, an array without
    /// exactly one item schema, an unknown primitive type.
    fn assert_kubectl_can_read(schema: &Value, definitions: &Map<String, Value>, at: &str) {
        let Some(map) = schema.as_object() else {
            panic!("{at}: not a schema");
        };
        if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
            let name = reference.strip_prefix("#/definitions/").unwrap();
            assert!(definitions.contains_key(name), "{at}: unknown model {name}");
            return;
        }
        for keyword in ["default", "nullable", "oneOf", "anyOf", "not"] {
            assert!(!map.contains_key(keyword), "{at}: {keyword}");
        }
        let types: Vec<&str> = match map.get("type") {
            Some(Value::String(name)) => vec![name.as_str()],
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        assert!(types.len() <= 1, "{at}: several types");
        match types.first().copied() {
            Some("array") => {
                let items = map.get("items").filter(|items| items.is_object());
                let items = items.unwrap_or_else(|| panic!("{at}: array without one item"));
                assert_kubectl_can_read(items, definitions, &format!("{at}[]"));
            }
            Some("object") | None => {
                if let Some(Value::Object(properties)) = map.get("properties") {
                    for (name, property) in properties {
                        assert_kubectl_can_read(property, definitions, &format!("{at}.{name}"));
                    }
                } else if let Some(additional @ Value::Object(_)) = map.get("additionalProperties")
                {
                    assert_kubectl_can_read(additional, definitions, &format!("{at}{{}}"));
                }
            }
            Some(primitive) => assert!(
                ["string", "number", "integer", "boolean"].contains(&primitive),
                "{at}: unknown primitive type {primitive}"
            ),
        }
    }

    #[tokio::test]
    async fn the_document_is_one_kubectl_can_read_in_both_encodings() {
        let app = app_with_crd().await;
        let (status, headers, document) = call(
            &app,
            Method::GET,
            "/openapi/v2",
            Some("application/json"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::VARY], "Accept");
        assert_eq!(document["swagger"], "2.0");
        let definitions = document["definitions"].as_object().unwrap();
        for (name, schema) in definitions {
            assert_kubectl_can_read(schema, definitions, name);
        }
        // A reference v3 wraps in `allOf` is a plain one, with its description.
        let config_map = &definitions["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(
            config_map["properties"]["metadata"]["$ref"],
            format!("#/definitions/{OBJECT_META}")
        );
        // This CRD's root preserves unknown fields: a bare object.
        assert_eq!(
            definitions["io.gpucloud.v1.GpuInstance"],
            json!({"type": "object", "x-kubernetes-group-version-kind":
                   [{"group": "gpucloud.io", "kind": "GpuInstance", "version": "v1"}]})
        );
        let patch = &document["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert!(
            patch["consumes"]
                .as_array()
                .unwrap()
                .contains(&json!("application/strategic-merge-patch+json"))
        );
        assert_eq!(patch["parameters"][0]["in"], "body");

        // The same document in protobuf.
        let response = app
            .clone()
            .oneshot(
                Request::builder()
                    .uri("/openapi/v2")
                    .header(header::ACCEPT, PROTOBUF[0])
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROTOBUF[1]);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let fields = decode(&bytes);
        assert_eq!(text(&fields, 1), "2.0");
        let encoded: Vec<String> = all(&decode(&all(&fields, 9)[0]), 1)
            .iter()
            .map(|entry| named(entry).0)
            .collect();
        let expected: Vec<String> = definitions.keys().cloned().collect();
        assert_eq!(encoded, expected);

        // Nothing acceptable: kube-openapi's bare 406.
        let (status, headers, body) = call(
            &app,
            Method::GET,
            "/openapi/v2",
            Some("application/xml"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_ACCEPTABLE);
        assert_eq!(headers[header::VARY], "Accept");
        assert_eq!(body, Value::Null);
    }

    #[test]
    fn crd_schemas_take_apiextensions_v2_form() {
        let mut schema = json!({
            "type": "object",
            "required": ["spec", "note"],
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size", "zone"],
                    "properties": {
                        "size": {"type": "integer", "default": 1},
                        "zone": {"type": "string", "nullable": true},
                        "tags": {"type": "array", "nullable": true, "items": {"type": "string"}},
                        "port": {"x-kubernetes-int-or-string": true,
                                 "anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                  "properties": {"a": {"type": "string"}}},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                     "properties": {"spec": {"type": "object"}}},
                    },
                },
                "note": {"type": "string", "nullable": true},
            },
        });
        structural_v2(&mut schema);
        add_embedded_properties(&mut schema);
        assert_eq!(schema["required"], json!(["spec"]));
        let spec = &schema["properties"]["spec"];
        assert_eq!(spec["required"], json!(["size"]));
        assert_eq!(
            spec["properties"]["size"]["default"], 1,
            "pruned later, with refs"
        );
        assert_eq!(
            spec["properties"]["tags"],
            json!({}),
            "nullable: untyped, no items"
        );
        assert_eq!(
            spec["properties"]["port"],
            json!({"x-kubernetes-int-or-string": true})
        );
        assert_eq!(
            spec["properties"]["extra"],
            json!({"x-kubernetes-preserve-unknown-fields": true})
        );
        let template = &spec["properties"]["template"];
        assert_eq!(template["required"], json!(["kind", "apiVersion"]));
        let properties: Vec<&String> = template["properties"].as_object().unwrap().keys().collect();
        assert_eq!(properties, ["apiVersion", "kind", "metadata", "spec"]);
    }
}
