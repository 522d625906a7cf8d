//! patch: JSON merge patch, JSON patch, strategic merge patch (built-in kinds only, as the real
//! server) and server-side apply, each run through the update pipeline.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::write::{UpdateOptions, create_object, now, update_object};
use super::{Context, content_type, decode_yaml, semantics, value_response};
use crate::status::ApiError;

const MERGE_PATCH: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";
const APPLY_PATCH: &str = "application/apply-patch+yaml";

fn unsupported_patch(custom: bool) -> ApiError {
    let accepted = if custom {
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    } else {
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
    };
    ApiError::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: {accepted}"
        ),
    )
}

fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|error| ApiError::bad_request(format!("error decoding patch: {error}")))
}

pub fn patch(context: &Context<'_>, body: &Bytes) -> Result<Response, ApiError> {
    let dry_run = context.query.dry_run()?;
    let media_type = content_type(&context.headers);
    let custom = context.info().is_custom();
    let info = context.info().clone();
    let (patched, created) = match media_type.as_str() {
        MERGE_PATCH => {
            let patch = parse_json(body)?;
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: a merge patch must be a JSON object",
                ));
            }
            let pinned = patch["metadata"]["resourceVersion"].is_string();
            let result = update_object(context, options(pinned, dry_run), &|old: &Value| {
                let mut target = old.clone();
                semantics::merge_patch(&mut target, &patch)?;
                Ok(target)
            })?;
            (result, false)
        }
        JSON_PATCH => {
            let patch = parse_json(body)?;
            let operations = patch.as_array().ok_or_else(|| {
                ApiError::bad_request("error decoding patch: a JSON patch must be an array")
            })?;
            let pinned = operations
                .iter()
                .any(|operation| operation["path"] == "/metadata/resourceVersion");
            let result = update_object(context, options(pinned, dry_run), &|old: &Value| {
                let mut target = old.clone();
                semantics::json_patch(&mut target, &patch)?;
                Ok(target)
            })?;
            (result, false)
        }
        STRATEGIC_MERGE_PATCH if !custom => {
            let patch = parse_json(body)?;
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: a strategic merge patch must be a JSON object",
                ));
            }
            let pinned = patch["metadata"]["resourceVersion"].is_string();
            let result = update_object(context, options(pinned, dry_run), &|old: &Value| {
                let mut target = old.clone();
                semantics::strategic_merge_patch(&info, &mut target, &patch)?;
                Ok(target)
            })?;
            (result, false)
        }
        APPLY_PATCH => server_side_apply(context, body, dry_run)?,
        _ => return Err(unsupported_patch(custom)),
    };
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(value_response(status, &patched))
}

fn options(pinned: bool, dry_run: bool) -> UpdateOptions {
    UpdateOptions {
        pinned,
        require_resource_version: false,
        dry_run,
        record_manager: true,
    }
}

/// Server-side apply; creates the object when it does not exist. Returns (object, created).
fn server_side_apply(
    context: &Context<'_>,
    body: &Bytes,
    dry_run: bool,
) -> Result<(Value, bool), ApiError> {
    let info = context.info().clone();
    let manager = context
        .query
        .get("fieldManager")
        .unwrap_or_default()
        .to_string();
    if manager.is_empty() {
        return Err(ApiError::invalid_field(
            "meta.k8s.io",
            "PatchOptions",
            "",
            "fieldManager",
            "FieldValueRequired",
            "Required value: is required for apply patch",
        ));
    }
    let force = context.query.flag("force")?;
    let applied = decode_yaml(body)?;
    if !applied.is_object() {
        return Err(ApiError::bad_request(
            "error decoding patch: an apply configuration must be an object",
        ));
    }
    let applied_name = applied["metadata"]["name"].as_str().unwrap_or_default();
    if applied_name != context.name() {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({applied_name}) does not match the name on the URL ({})",
            context.name()
        )));
    }
    let pinned = applied["metadata"]["resourceVersion"].is_string();
    let exists = context.stored().is_some();
    if !exists {
        let object = semantics::apply(&info, None, &applied, &manager, force, &now())?;
        match create_object(context, object, dry_run, false) {
            Ok(created) => return Ok((created, true)),
            // Created concurrently: apply onto it instead.
            Err(error) if error.code == 409 && error.reason == "AlreadyExists" => {}
            Err(error) => return Err(error),
        }
    }
    let updated = update_object(
        context,
        UpdateOptions {
            pinned,
            require_resource_version: false,
            dry_run,
            record_manager: false,
        },
        &|old: &Value| semantics::apply(&info, Some(old), &applied, &manager, force, &now()),
    )?;
    Ok((updated, false))
}
