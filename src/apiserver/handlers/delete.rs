//! delete and deletecollection: preconditions, finalizers and `deletionTimestamp`, propagation
//! policies (the garbage collector finishes Foreground and Orphan), namespace termination.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::read::Selection;
use super::{Context, at_version, crd, dry_run_values, value_response};
use crate::admission::{Attributes, Operation, Requester};
use crate::builtin;
use crate::registry::ResourceInfo;
use crate::server::AppState;
use crate::status::ApiError;
use crate::store::StoreError;

pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The namespace finalizer the namespace controller removes once the namespace is empty.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

const MAX_DELETE_ATTEMPTS: usize = 32;

/// Namespaces the real server refuses to delete.
const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// `DeleteOptions` from the body and the query.
#[derive(Clone, Debug)]
pub struct DeleteOptions {
    pub propagation: Propagation,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
}

impl Default for DeleteOptions {
    fn default() -> Self {
        DeleteOptions {
            propagation: Propagation::Background,
            precondition_uid: None,
            precondition_resource_version: None,
            dry_run: false,
        }
    }
}

/// What a delete did.
#[derive(Debug)]
pub enum Deleted {
    /// The object is gone; this is its last state.
    Gone(Value),
    /// The object has a deletionTimestamp and waits for its finalizers.
    Pending(Value),
}

fn invalid_options(field: &str, detail: String) -> ApiError {
    ApiError::invalid_field(
        "meta.k8s.io",
        "DeleteOptions",
        "",
        field,
        "FieldValueNotSupported",
        &detail,
    )
}

pub fn parse_options(context: &Context<'_>, body: &Bytes) -> Result<DeleteOptions, ApiError> {
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        super::decode_object(context.info(), &context.headers, body)?
    };
    let mut options = DeleteOptions::default();
    let policy = context
        .query
        .get("propagationPolicy")
        .map(str::to_string)
        .or_else(|| body["propagationPolicy"].as_str().map(str::to_string));
    let orphan_dependents = match context.query.get("orphanDependents") {
        Some(_) => Some(context.query.flag("orphanDependents")?),
        None => body["orphanDependents"].as_bool(),
    };
    if policy.is_some() && orphan_dependents.is_some() {
        return Err(invalid_options(
            "propagationPolicy",
            "Invalid value: \"\": orphanDependents and deletionPropagation cannot be both set"
                .into(),
        ));
    }
    options.propagation = match (policy.as_deref(), orphan_dependents) {
        (Some("Background"), _) => Propagation::Background,
        (Some("Foreground"), _) => Propagation::Foreground,
        (Some("Orphan"), _) => Propagation::Orphan,
        (Some(other), _) => {
            return Err(invalid_options(
                "propagationPolicy",
                format!(
                    "Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            ));
        }
        (None, Some(true)) => Propagation::Orphan,
        (None, _) => Propagation::Background,
    };
    options.precondition_uid = body["preconditions"]["uid"].as_str().map(str::to_string);
    options.precondition_resource_version = body["preconditions"]["resourceVersion"]
        .as_str()
        .map(str::to_string);
    let body_dry_run = body["dryRun"].as_array().map(|values| {
        values
            .iter()
            .map(|value| value.as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    });
    options.dry_run = context.query.dry_run()? || dry_run_values(body_dry_run)?;
    Ok(options)
}

pub fn delete(context: &Context<'_>, body: &Bytes) -> Result<Response, ApiError> {
    let options = parse_options(context, body)?;
    let info = context.info().clone();
    let warn = |warning: String| context.warn(warning);
    let deleted = delete_object(
        context.state,
        &Requester::client(&context.user, &warn),
        &info,
        &context.target.namespace,
        context.name(),
        &options,
    )?;
    Ok(match deleted {
        Deleted::Pending(object) => value_response(StatusCode::OK, &at_version(&info, object)),
        Deleted::Gone(object) => value_response(
            StatusCode::OK,
            &deleted_body(&info, at_version(&info, object)),
        ),
    })
}

/// The body of an immediate delete: the object for kinds whose storage returns it
/// (`ReturnDeletedObject`), a Success Status otherwise.
fn deleted_body(info: &ResourceInfo, object: Value) -> Value {
    // Custom resources answer with a Status: their storage does not set ReturnDeletedObject
    // (apiextensions-apiserver registry/customresource/etcd.go).
    let returns_object =
        builtin::is_crd(info) || (info.group.is_empty() && info.plural == "serviceaccounts");
    if returns_object {
        return object;
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": object["metadata"]["name"],
            "group": info.group,
            "kind": info.plural,
            "uid": object["metadata"]["uid"],
        },
    })
}

/// Deletes one object, honouring preconditions, finalizers and the propagation policy.
pub fn delete_object(
    state: &AppState,
    requester: &Requester<'_>,
    info: &ResourceInfo,
    namespace: &str,
    name: &str,
    options: &DeleteOptions,
) -> Result<Deleted, ApiError> {
    let storage_key = info.storage_key();
    let not_found = || ApiError::not_found(&info.group, &info.plural, name);
    // Retried when a concurrent write lands between read and commit; bounded so constant
    // contention ends in a 409 rather than a spin.
    for _ in 0..MAX_DELETE_ATTEMPTS {
        let current = state
            .store
            .get(&storage_key, namespace, name)
            .ok_or_else(not_found)?;
        let old = current
            .to_value()
            .map_err(|error| ApiError::internal(error.to_string()))?;
        if let Some(uid) = &options.precondition_uid
            && *uid != current.index.uid
        {
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    current.index.uid
                ),
            ));
        }
        if let Some(resource_version) = &options.precondition_resource_version
            && *resource_version != current.index.resource_version.to_string()
        {
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {resource_version}, ResourceVersion in meta: {}",
                    current.index.resource_version
                ),
            ));
        }
        if builtin::is_namespace(info) && IMMORTAL_NAMESPACES.contains(&name) {
            // The NamespaceLifecycle admission plugin protects these.
            return Err(ApiError::forbidden(
                "",
                "namespaces",
                name,
                "this namespace may not be deleted",
            ));
        }
        // Validating admission sees every delete, also of an object already being deleted.
        crate::admission::validate(
            state,
            requester,
            &Attributes {
                info,
                subresource: "",
                operation: Operation::Delete,
                namespace,
                name,
                object: None,
                old_object: Some(&old),
                dry_run: options.dry_run,
            },
        )?;
        let mut finalizers = current.index.finalizers.clone();
        if builtin::is_namespace(info) {
            // Namespaces always go through termination: the namespace controller (here the
            // garbage collector) empties them and removes the `kubernetes` finalizer.
            if current.index.deleting {
                return Ok(Deleted::Pending(old));
            }
            let mut terminating = old.clone();
            mark_deleting(&mut terminating);
            builtin::set_namespace_phase(&mut terminating, "Terminating");
            if options.dry_run {
                return Ok(Deleted::Pending(terminating));
            }
            match state
                .store
                .update(&storage_key, terminating, current.index.resource_version)
            {
                Ok((_, value)) => return Ok(Deleted::Pending(value)),
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => return Err(not_found()),
                Err(error) => return Err(ApiError::internal(error.to_string())),
            }
        }
        if current.index.deleting {
            // Already being deleted: a repeated delete changes nothing.
            return Ok(Deleted::Pending(old));
        }
        match options.propagation {
            Propagation::Foreground => finalizers.push(FOREGROUND_FINALIZER.to_string()),
            Propagation::Orphan => finalizers.push(ORPHAN_FINALIZER.to_string()),
            Propagation::Background => {}
        }
        if finalizers.is_empty() {
            if options.dry_run {
                return Ok(Deleted::Gone(old));
            }
            match state.store.delete(
                &storage_key,
                namespace,
                name,
                Some(current.index.resource_version),
            ) {
                Ok((_, value)) => {
                    after_removed(state, info, &value);
                    return Ok(Deleted::Gone(value));
                }
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => return Err(not_found()),
                Err(error) => return Err(ApiError::internal(error.to_string())),
            }
        }
        let mut marked = old.clone();
        mark_deleting(&mut marked);
        marked["metadata"]["finalizers"] = json!(finalizers);
        if options.dry_run {
            return Ok(Deleted::Pending(marked));
        }
        match state
            .store
            .update(&storage_key, marked, current.index.resource_version)
        {
            Ok((_, value)) => {
                if builtin::is_crd(info) {
                    // Run the cleanup now rather than on the collector's next wake-up, so a
                    // CRD without held instances is gone when the request returns (its
                    // resources stop being served at once, also for routers run without
                    // the background task).
                    for _ in 0..4 {
                        if crate::gc::collect(state) == 0 {
                            break;
                        }
                    }
                }
                return Ok(Deleted::Pending(value));
            }
            Err(StoreError::Conflict) => continue,
            Err(StoreError::NotFound) => return Err(not_found()),
            Err(error) => return Err(ApiError::internal(error.to_string())),
        }
    }
    Err(ApiError::conflict(
        &info.group,
        &info.plural,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
    ))
}

/// Sets `deletionTimestamp` as the real store's `markAsDeleting` (which also bumps a set
/// generation).
fn mark_deleting(object: &mut Value) {
    let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
    if generation > 0 {
        object["metadata"]["generation"] = json!(generation + 1);
    }
    object["metadata"]["deletionTimestamp"] = json!(super::write::now());
    object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
}

/// After an object left the store: a CRD takes its resources and objects with it.
pub fn after_removed(state: &AppState, info: &ResourceInfo, object: &Value) {
    if builtin::is_crd(info) {
        crd::unregister(state, object);
    }
    crate::authz::after_write(state, info);
}

pub fn delete_collection(context: &Context<'_>, body: &Bytes) -> Result<Response, ApiError> {
    let options = parse_options(context, body)?;
    let selection = Selection::from_query(context)?;
    let info = context.info().clone();
    let namespace =
        (!context.target.namespace.is_empty()).then_some(context.target.namespace.as_str());
    let page = context
        .state
        .store
        .list(&info.storage_key(), namespace, None, None, &|index| {
            selection.matches(index)
        });
    let mut items = Vec::new();
    let warn = |warning: String| context.warn(warning);
    let requester = Requester::client(&context.user, &warn);
    for object in page
        .items
        .into_iter()
        .filter(|object| selection.matches_stored(&object.bytes))
    {
        // Each object is admitted as a DELETE of its own; the first refusal ends the request.
        match delete_object(
            context.state,
            &requester,
            &info,
            &object.index.namespace,
            &object.index.name,
            &options,
        ) {
            Ok(Deleted::Gone(value) | Deleted::Pending(value)) => {
                items.push(at_version(&info, value));
            }
            // Deleted concurrently: nothing left to do for it.
            Err(error) if error.code == 404 => {}
            Err(error) => return Err(error),
        }
    }
    let list = json!({
        "kind": info.list_kind,
        "apiVersion": info.api_version(),
        "metadata": {"resourceVersion": context.state.store.current_resource_version().to_string()},
        "items": items,
    });
    Ok(value_response(StatusCode::OK, &list))
}
