//! The scale subresource of custom resources (`<plural>/<name>/scale`), as
//! apiextensions-apiserver's `ScaleREST` serves it, so `kubectl scale`, a
//! HorizontalPodAutoscaler and KEDA size a custom resource without knowing its schema.
//!
//! The answer is an `autoscaling/v1` `Scale` read from the CRD version's `specReplicasPath`,
//! `statusReplicasPath` and `labelSelectorPath`. A write changes only the spec replicas path
//! and runs through the object's own update pipeline, so the resourceVersion precondition,
//! schema validation, generation and admission apply as to any update of the object; a Scale
//! carrying a resourceVersion is a precondition (409 on a stale one), one without it is not.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::write::{UpdateOptions, update_object};
use super::{Context, content_type, decode_object, semantics, value_response};
use crate::registry::ScalePaths;
use crate::status::ApiError;

/// Stands for "the object has no spec replicas" in the Scale a patch is applied to, as the
/// real server's smallest-int32 marker does: a patch that leaves it there is refused.
const MISSING_REPLICAS: i64 = i32::MIN as i64;

const MERGE_PATCH: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";

/// What a custom resource reads as through its scale subresource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleView {
    /// `None` when the object has nothing at the spec replicas path.
    pub spec_replicas: Option<i64>,
    pub status_replicas: i64,
    pub selector: String,
}

// === reading the paths ===

fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.strip_prefix('.').unwrap_or(path).split('.')
}

/// The value at a `.a.b` path; `None` when a level is missing.
fn nested<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    segments(path).try_fold(object, |value, segment| value.as_object()?.get(segment))
}

/// `unstructured.NestedInt64`: absent is `None`, anything but an integer is an error.
fn nested_int(object: &Value, path: &str) -> Result<Option<i64>, String> {
    match nested(object, path) {
        None => Ok(None),
        Some(value) => value.as_i64().map(Some).ok_or_else(|| {
            format!(
                "{path} accessor error: {value} is of the type {kind}, expected int64",
                kind = json_kind(value)
            )
        }),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// `unstructured.SetNestedField`: creates the missing levels.
fn set_nested(object: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let parts: Vec<&str> = segments(path).collect();
    let Some((last, parents)) = parts.split_last() else {
        return Err(format!("empty path {path:?}"));
    };
    let mut current = object;
    for part in parents {
        let map = current
            .as_object_mut()
            .ok_or_else(|| format!("value cannot be set because {part} is not a map"))?;
        current = map
            .entry((*part).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if current.is_null() {
            *current = Value::Object(Map::new());
        }
    }
    let map = current
        .as_object_mut()
        .ok_or_else(|| format!("value cannot be set because {last} is not a map"))?;
    map.insert((*last).to_string(), value);
    Ok(())
}

// === impl ScaleView ===

impl ScaleView {
    /// `scaleFromCustomResource`.
    pub fn of(paths: &ScalePaths, object: &Value) -> Result<ScaleView, String> {
        let spec_replicas = nested_int(object, &paths.spec_replicas)?;
        let status_replicas = nested_int(object, &paths.status_replicas)?.unwrap_or(0);
        let selector = match &paths.label_selector {
            None => String::new(),
            Some(path) => match nested(object, path) {
                None => String::new(),
                Some(Value::String(selector)) => selector.clone(),
                Some(other) => {
                    return Err(format!(
                        "{path} accessor error: {other} is of the type {}, expected string",
                        json_kind(other)
                    ));
                }
            },
        };
        Ok(ScaleView {
            spec_replicas,
            status_replicas,
            selector,
        })
    }

    /// The `autoscaling/v1` `Scale` of `object`, with Go's `omitempty` fields left out
    /// (`spec.replicas` when 0, `status.selector` when empty).
    pub fn to_scale(&self, object: &Value) -> Value {
        let metadata = &object["metadata"];
        let mut meta = Map::new();
        for field in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
        ] {
            if let Some(value) = metadata.get(field).filter(|v| v.as_str() != Some("")) {
                meta.insert(field.to_string(), value.clone());
            }
        }
        let mut spec = Map::new();
        if let Some(replicas) = self.spec_replicas.filter(|replicas| *replicas != 0) {
            spec.insert("replicas".into(), json!(replicas));
        }
        let mut status = Map::new();
        status.insert("replicas".into(), json!(self.status_replicas));
        if !self.selector.is_empty() {
            status.insert("selector".into(), json!(self.selector));
        }
        json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": meta,
            "spec": spec,
            "status": status,
        })
    }
}

// === handlers ===

fn paths<'a>(context: &'a Context<'_>) -> Result<&'a ScalePaths, ApiError> {
    context
        .info()
        .scale
        .as_ref()
        .ok_or_else(super::path_not_found)
}

fn scale_of(paths: &ScalePaths, object: &Value) -> Result<Value, ApiError> {
    let view = ScaleView::of(paths, object).map_err(ApiError::bad_request)?;
    Ok(view.to_scale(object))
}

pub fn get(context: &Context<'_>) -> Result<Response, ApiError> {
    let paths = paths(context)?;
    let stored = context.stored().ok_or_else(|| context.not_found())?;
    let object = stored
        .to_value()
        .map_err(|error| ApiError::internal(error.to_string()))?;
    let view = ScaleView::of(paths, &object).map_err(ApiError::internal)?;
    if view.spec_replicas.is_none() {
        return Err(ApiError::internal(format!(
            "Internal error occurred: the spec replicas field {:?} does not exist",
            paths.spec_replicas
        )));
    }
    Ok(value_response(StatusCode::OK, &view.to_scale(&object)))
}

/// PUT of a whole Scale.
pub fn update(context: &Context<'_>, body: &Bytes) -> Result<Response, ApiError> {
    let dry_run = context.query.dry_run()?;
    let scale = decode_object(context.info(), &context.headers, body)?;
    check_scale_body(context, &scale)?;
    let pinned = resource_version(&scale).is_some();
    write(context, pinned, dry_run, &|_old_scale| Ok(scale.clone()))
}

/// PATCH of the Scale: the patch applies to the Scale the object reads as, as on the real
/// server; a strategic merge patch is a merge patch here (a Scale has no lists).
pub fn patch(context: &Context<'_>, body: &Bytes) -> Result<Response, ApiError> {
    let dry_run = context.query.dry_run()?;
    let patch: Value = serde_json::from_slice(body)
        .map_err(|error| ApiError::bad_request(format!("error decoding patch: {error}")))?;
    match content_type(&context.headers).as_str() {
        MERGE_PATCH | STRATEGIC_MERGE_PATCH => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: a merge patch must be a JSON object",
                ));
            }
            let pinned = patch["metadata"]["resourceVersion"].is_string();
            write(context, pinned, dry_run, &|old_scale| {
                let mut scale = old_scale.clone();
                semantics::merge_patch(&mut scale, &patch)?;
                Ok(scale)
            })
        }
        JSON_PATCH => {
            let operations = patch.as_array().ok_or_else(|| {
                ApiError::bad_request("error decoding patch: a JSON patch must be an array")
            })?;
            let pinned = operations
                .iter()
                .any(|operation| operation["path"] == "/metadata/resourceVersion");
            write(context, pinned, dry_run, &|old_scale| {
                let mut scale = old_scale.clone();
                semantics::json_patch(&mut scale, &patch)?;
                Ok(scale)
            })
        }
        _ => Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json",
        )),
    }
}

fn resource_version(scale: &Value) -> Option<&str> {
    scale["metadata"]["resourceVersion"]
        .as_str()
        .filter(|rv| !rv.is_empty())
}

fn check_scale_body(context: &Context<'_>, scale: &Value) -> Result<(), ApiError> {
    if let Some(kind) = scale["kind"].as_str().filter(|kind| *kind != "Scale") {
        return Err(ApiError::bad_request(format!(
            "the body of the request is a {kind}, not an autoscaling/v1 Scale"
        )));
    }
    let name = scale["metadata"]["name"].as_str().unwrap_or_default();
    if name != context.name() {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            context.name()
        )));
    }
    Ok(())
}

/// `scaleUpdatedObjectInfo.UpdatedObject` then the object's update: `change` turns the Scale
/// the object reads as into the requested one, whose `spec.replicas` is written to the spec
/// replicas path.
fn write(
    context: &Context<'_>,
    pinned: bool,
    dry_run: bool,
    change: &dyn Fn(&Value) -> Result<Value, ApiError>,
) -> Result<Response, ApiError> {
    let paths = paths(context)?;
    let options = UpdateOptions {
        pinned,
        require_resource_version: false,
        dry_run,
        record_manager: true,
    };
    let updated = update_object(context, options, &|old: &Value| {
        let view = ScaleView::of(paths, old).map_err(ApiError::bad_request)?;
        let mut old_scale = view.to_scale(old);
        old_scale["spec"]["replicas"] = json!(view.spec_replicas.unwrap_or(MISSING_REPLICAS));
        let scale = change(&old_scale)?;
        let replicas = match &scale["spec"]["replicas"] {
            Value::Null => 0,
            value => value
                .as_i64()
                .filter(|replicas| i32::try_from(*replicas).is_ok())
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal {value} into Go struct field ScaleSpec.spec.replicas of type int32"
                    ))
                })?,
        };
        if replicas == MISSING_REPLICAS {
            return Err(ApiError::bad_request(format!(
                "the spec replicas field {:?} cannot be empty",
                paths.spec_replicas
            )));
        }
        let mut object = old.clone();
        set_nested(&mut object, &paths.spec_replicas, json!(replicas))
            .map_err(ApiError::internal)?;
        if let Some(version) = resource_version(&scale) {
            object["metadata"]["resourceVersion"] = json!(version);
        }
        Ok(object)
    })?;
    Ok(value_response(StatusCode::OK, &scale_of(paths, &updated)?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn paths(selector: Option<&str>) -> ScalePaths {
        ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: selector.map(str::to_string),
        }
    }

    #[test]
    fn a_scale_reads_the_three_paths_with_go_defaults() {
        let object = json!({
            "metadata": {"name": "workers", "namespace": "default", "uid": "u", "resourceVersion": "7"},
            "spec": {"replicas": 3},
            "status": {"replicas": 2, "selector": "pool=workers"},
        });
        let view = ScaleView::of(&paths(Some(".status.selector")), &object).unwrap();
        assert_eq!(
            view,
            ScaleView {
                spec_replicas: Some(3),
                status_replicas: 2,
                selector: "pool=workers".into()
            }
        );
        let scale = view.to_scale(&object);
        assert_eq!(scale["apiVersion"], "autoscaling/v1");
        assert_eq!(scale["metadata"]["resourceVersion"], "7");
        assert_eq!(scale["status"]["selector"], "pool=workers");

        // No status: 0 replicas and no selector; spec replicas 0 is omitted as by Go.
        let bare = json!({"metadata": {"name": "w"}, "spec": {"replicas": 0}});
        let view = ScaleView::of(&paths(Some(".status.selector")), &bare).unwrap();
        assert_eq!(view.spec_replicas, Some(0));
        let scale = view.to_scale(&bare);
        assert_eq!(scale["spec"], json!({}));
        assert_eq!(scale["status"], json!({"replicas": 0}));
    }

    #[test]
    fn a_value_of_the_wrong_type_is_an_error_naming_the_path() {
        let object = json!({"spec": {"replicas": "three"}});
        let error = ScaleView::of(&paths(None), &object).unwrap_err();
        assert!(error.contains(".spec.replicas"), "{error}");
        assert!(
            ScaleView::of(&paths(None), &json!({}))
                .unwrap()
                .spec_replicas
                .is_none()
        );
    }

    #[test]
    fn setting_a_path_creates_its_levels() {
        let mut object = json!({"spec": {}});
        set_nested(&mut object, ".spec.scaling.replicas", json!(4)).unwrap();
        assert_eq!(object["spec"]["scaling"]["replicas"], 4);
        let mut scalar = json!({"spec": 1});
        assert!(set_nested(&mut scalar, ".spec.replicas", json!(1)).is_err());
    }
}
