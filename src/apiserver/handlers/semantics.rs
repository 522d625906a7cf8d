//! The one place the server calls the semantics library (schemas, patches, server-side apply),
//! so the handlers stay independent of its module layout.

use serde_json::Value;

use gpucloud_apiserver_semantics::apply::{ApplyError, conflict_message};
use gpucloud_apiserver_semantics::patch::PatchError;

use crate::registry::ResourceInfo;
use crate::status::ApiError;

pub use gpucloud_apiserver_semantics::schema::{FieldError, Schema, SchemaError, invalid_message};

pub fn prune(schema: &Schema, object: &mut Value) -> Vec<String> {
    schema.prune(object)
}

pub fn apply_defaults(schema: &Schema, object: &mut Value) {
    schema.apply_defaults(object);
}

pub fn validate(schema: &Schema, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    schema.validate(object, old)
}

pub fn compile(open_api_v3_schema: &Value) -> Result<Schema, SchemaError> {
    Schema::compile(open_api_v3_schema)
}

/// Records the manager's field ownership of a non-apply write in `managedFields`.
pub fn record_update(
    info: &ResourceInfo,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    now: &str,
) {
    gpucloud_apiserver_semantics::apply::record_update(
        old,
        new,
        manager,
        info.schema.as_deref(),
        now,
    );
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    gpucloud_apiserver_semantics::patch::merge_patch(target, patch);
    Ok(())
}

/// RFC 6902 JSON patch.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    gpucloud_apiserver_semantics::patch::json_patch(target, patch).map_err(patch_error)
}

/// A malformed patch is a 400; one that does not apply to the object a 422, as the real
/// server answers.
fn patch_error(error: PatchError) -> ApiError {
    match error {
        PatchError::Malformed(message) => ApiError::bad_request(message),
        PatchError::NotApplicable(message) => ApiError::new(422, "Invalid", message),
    }
}

/// Strategic merge patch of a built-in kind.
pub fn strategic_merge_patch(
    info: &ResourceInfo,
    target: &mut Value,
    patch: &Value,
) -> Result<(), ApiError> {
    let keys = gpucloud_apiserver_semantics::patch::builtin_merge_keys(&info.group, &info.kind);
    gpucloud_apiserver_semantics::patch::strategic_merge_patch(target, patch, keys.as_ref())
        .map_err(patch_error)
}

/// Server-side apply: the applied configuration merged onto `live` (`None`: create).
pub fn apply(
    info: &ResourceInfo,
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, ApiError> {
    gpucloud_apiserver_semantics::apply::apply(
        live,
        applied,
        manager,
        force,
        info.schema.as_deref(),
        now,
    )
    .map_err(|error| match error {
        ApplyError::Conflicts { conflicts } => ApiError::conflict_message(
            &info.group,
            &info.plural,
            applied["metadata"]["name"].as_str().unwrap_or_default(),
            conflict_message(&conflicts),
        ),
        ApplyError::Invalid(message) => ApiError::bad_request(message),
    })
}
