//! create and update, and the write pipeline every mutation shares (type and object metadata,
//! status subresource split, generation, finalizer rules, schema pruning/defaulting/validation,
//! namespace lifecycle, optimistic concurrency).

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::{Context, at_version, crd, decode_object, value_response};
use crate::admission::{Attributes, Operation, Requester};
use crate::builtin;
use crate::registry::ResourceInfo;
use crate::status::{ApiError, StatusCause};
use crate::store::StoreError;

/// How many times a write without a caller-pinned resourceVersion is retried on a race.
const MAX_UPDATE_ATTEMPTS: usize = 32;

// === server-set metadata ===

/// The current time as Kubernetes writes timestamps (RFC 3339, whole seconds, UTC).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A random RFC 4122 version-4 UID.
pub fn new_uid() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Sets the fields the server owns on create (uid, creationTimestamp).
pub fn fill_create_metadata(object: &mut Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("uid".into(), json!(new_uid()));
        metadata.insert("creationTimestamp".into(), json!(now()));
        metadata.remove("resourceVersion");
        metadata.remove("deletionTimestamp");
        metadata.remove("deletionGracePeriodSeconds");
    }
}

/// The 5 random characters `generateName` appends, from the real server's alphabet.
fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The generateName prefix as the real name generator uses it: cut to 58 characters so the
/// generated name fits in 63.
fn generate_prefix(generate_name: &str) -> &str {
    const MAX_PREFIX: usize = 63 - 5;
    match generate_name.char_indices().nth(MAX_PREFIX) {
        Some((position, _)) => &generate_name[..position],
        None => generate_name,
    }
}

// === create and update handlers ===

pub fn create(context: &Context<'_>, body: &Bytes) -> Result<Response, ApiError> {
    let dry_run = context.query.dry_run()?;
    let object = decode_object(context.info(), &context.headers, body)?;
    let created = create_object(context, object, dry_run, true)?;
    Ok(value_response(StatusCode::CREATED, &created))
}

pub fn update(context: &Context<'_>, body: &Bytes) -> Result<Response, ApiError> {
    let dry_run = context.query.dry_run()?;
    let object = decode_object(context.info(), &context.headers, body)?;
    let body_name = object["metadata"]["name"].as_str().unwrap_or_default();
    if body_name != context.name() {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            context.name()
        )));
    }
    check_namespace(context, &object)?;
    let pinned = object["metadata"]["resourceVersion"]
        .as_str()
        .is_some_and(|rv| !rv.is_empty());
    // A uid in the body is a precondition of the update (the real server's
    // `DefaultUpdatedObjectInfo`): checked against the stored object before anything else, and
    // failing when there is none, so an update racing a delete is a 409, not a 404.
    let precondition_uid = object["metadata"]["uid"]
        .as_str()
        .filter(|uid| !uid.is_empty());
    let updated = update_object(
        context,
        UpdateOptions {
            pinned,
            require_resource_version: context.info().is_custom(),
            dry_run,
            record_manager: true,
        },
        &|old| {
            let stored_uid = old["metadata"]["uid"].as_str().unwrap_or_default();
            match precondition_uid {
                Some(uid) if uid != stored_uid => {
                    Err(uid_precondition_failed(context, uid, stored_uid))
                }
                _ => Ok(object.clone()),
            }
        },
    )
    .map_err(|error| match precondition_uid {
        Some(uid) if error.code == 404 => uid_precondition_failed(context, uid, ""),
        _ => error,
    })?;
    Ok(value_response(StatusCode::OK, &updated))
}

/// The real server's answer to a failed uid precondition: etcd's `StorageError` for an invalid
/// object (code 4) turned into a 409, naming the storage key.
fn uid_precondition_failed(context: &Context<'_>, uid: &str, stored_uid: &str) -> ApiError {
    let info = context.info();
    let key = info.etcd_key(&context.target.namespace, context.name());
    ApiError::conflict(
        &info.group,
        &info.plural,
        context.name(),
        &format!(
            "StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, \
             AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: {stored_uid}"
        ),
    )
}

/// The object's namespace must be empty or the request's.
fn check_namespace(context: &Context<'_>, object: &Value) -> Result<(), ApiError> {
    let body_namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    if !body_namespace.is_empty() && body_namespace != context.target.namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

/// `apiVersion` and `kind` must name the resource of the URL.
pub fn check_type_meta(info: &ResourceInfo, object: &mut Value) -> Result<(), ApiError> {
    let api_version = object["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    if kind.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Object 'Kind' is missing in '{}'",
            truncate(&object.to_string(), 200)
        )));
    }
    if api_version.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Object 'apiVersion' is missing in '{}'",
            truncate(&object.to_string(), 200)
        )));
    }
    if api_version != info.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            info.api_version()
        )));
    }
    if kind != info.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            info.kind
        )));
    }
    if !object["metadata"].is_object() {
        if object["metadata"].is_null() {
            object["metadata"] = json!({});
        } else {
            return Err(ApiError::bad_request(
                "metadata: expected an object".to_string(),
            ));
        }
    }
    Ok(())
}

fn truncate(text: &str, limit: usize) -> &str {
    match text.char_indices().nth(limit) {
        Some((position, _)) => &text[..position],
        None => text,
    }
}

// === the create pipeline ===

/// Creates an object through the whole pipeline; returns it as served at the request version.
pub fn create_object(
    context: &Context<'_>,
    mut object: Value,
    dry_run: bool,
    record_manager: bool,
) -> Result<Value, ApiError> {
    let info = context.info().clone();
    check_type_meta(&info, &mut object)?;
    check_builtin_types(context, &info, &mut object)?;
    check_namespace(context, &object)?;
    if info.namespaced {
        object["metadata"]["namespace"] = json!(context.target.namespace);
    } else if let Some(metadata) = object["metadata"].as_object_mut() {
        metadata.remove("namespace");
    }
    let generate_name = object["metadata"]["generateName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if name.is_empty() && generate_name.is_empty() {
        return Err(ApiError::invalid_field(
            &info.group,
            &info.kind,
            "",
            "metadata.name",
            "FieldValueRequired",
            "Required value: name or generateName is required",
        ));
    }
    // A given name wins over generateName, as on the real server.
    let generated = name.is_empty();
    if generated {
        name = format!("{}{}", generate_prefix(&generate_name), name_suffix());
        object["metadata"]["name"] = json!(name);
    }
    crate::authz::check_escalation(context, &object, None)?;
    fill_create_metadata(&mut object);
    if builtin::tracks_generation(&info) {
        object["metadata"]["generation"] = json!(1);
    }
    if info.has_status && info.is_custom() {
        // Create cannot set status when the status subresource is enabled.
        if let Some(map) = object.as_object_mut() {
            map.remove("status");
        }
    }
    builtin::prepare_builtin_create(&info, &mut object);
    prepare_common(context, &info, &mut object, None)?;
    check_namespace_lifecycle(context, &info, &name)?;
    if info.is_custom() && crd::terminating(context.state, &info) {
        return Err(ApiError::method_not_allowed(
            "create not allowed while custom resource definition is terminating",
        ));
    }
    if record_manager {
        super::semantics::record_update(&info, None, &mut object, &context.field_manager(), &now());
    }
    admit(
        context,
        Operation::Create,
        &name,
        Some(&object),
        None,
        dry_run,
    )?;
    if dry_run {
        return Ok(at_version(&info, object));
    }
    let storage_key = info.storage_key();
    let mut attempts = 0;
    loop {
        match context.state.store.create(&storage_key, object.clone()) {
            Ok((_, stored)) => {
                crd::after_write(context.state, &info, &stored);
                crate::authz::after_write(context.state, &info);
                return Ok(at_version(&info, stored));
            }
            // Generated names are retried on a collision (the real server's RetryGenerateName).
            Err(StoreError::AlreadyExists) if generated && attempts < 8 => {
                attempts += 1;
                object["metadata"]["name"] = json!(format!(
                    "{}{}",
                    generate_prefix(&generate_name),
                    name_suffix()
                ));
            }
            Err(StoreError::AlreadyExists) => {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                return Err(ApiError::already_exists(&info.group, &info.plural, name));
            }
            Err(error) => return Err(ApiError::internal(error.to_string())),
        }
    }
}

/// Validating admission of a create or update by the request's user; `Warn` bindings' warnings
/// go to the response.
fn admit(
    context: &Context<'_>,
    operation: Operation,
    name: &str,
    object: Option<&Value>,
    old_object: Option<&Value>,
    dry_run: bool,
) -> Result<(), ApiError> {
    let warn = |warning: String| context.warn(warning);
    crate::admission::validate(
        context.state,
        &Requester::client(&context.user, &warn),
        &Attributes {
            info: context.info(),
            subresource: context.target.subresource.as_deref().unwrap_or_default(),
            operation,
            namespace: &context.target.namespace,
            name,
            object,
            old_object,
            dry_run,
        },
    )
}

/// NamespaceLifecycle admission: the namespace must exist and not be terminating.
fn check_namespace_lifecycle(
    context: &Context<'_>,
    info: &ResourceInfo,
    name: &str,
) -> Result<(), ApiError> {
    if !info.namespaced {
        return Ok(());
    }
    let namespace = &context.target.namespace;
    let namespaces = crate::registry::ResourceKey {
        group: String::new(),
        plural: "namespaces".into(),
    };
    match context.state.store.get(&namespaces, "", namespace) {
        None => Err(ApiError::not_found("", "namespaces", namespace)),
        Some(stored) if stored.index.deleting => Err(ApiError::forbidden(
            &info.group,
            &info.plural,
            name,
            &format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ),
        )),
        Some(_) => Ok(()),
    }
}

// === validation shared by create and update ===

/// Unknown fields as the real server's field validation treats them: `Strict` refuses the
/// request, `Warn` (the default when the client does not say; kubectl says `Strict`) answers
/// with a `Warning` header per field, `Ignore` drops them silently.
fn report_unknown_fields(
    context: &Context<'_>,
    info: &ResourceInfo,
    unknown_fields: &[String],
) -> Result<(), ApiError> {
    if unknown_fields.is_empty() {
        return Ok(());
    }
    match context.query.get("fieldValidation").unwrap_or("Warn") {
        "Strict" => {
            let fields: Vec<String> = unknown_fields
                .iter()
                .map(|path| format!("unknown field \"{path}\""))
                .collect();
            Err(cannot_be_handled(
                info,
                &format!("strict decoding error: {}", fields.join(", ")),
            ))
        }
        "Warn" => {
            for path in unknown_fields {
                context.warn(format!("unknown field \"{path}\""));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The real server's 400 for a body that does not decode into the kind's type
/// (`transformDecodeError` in the apiserver's handlers).
fn cannot_be_handled(info: &ResourceInfo, detail: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: {detail}",
        kind = info.kind,
        version = info.version,
    ))
}

/// Built-in objects decode into their Go types on the real server: a value of the wrong type
/// is a 400, and unknown fields are reported (see [`report_unknown_fields`]) and not stored.
fn check_builtin_types(
    context: &Context<'_>,
    info: &ResourceInfo,
    object: &mut Value,
) -> Result<(), ApiError> {
    let checked = crate::builtin_types::check(info, object)
        .map_err(|error| cannot_be_handled(info, &error.to_string()))?;
    report_unknown_fields(context, info, &checked.unknown_fields)?;
    crate::builtin_types::drop_unknown_fields(object, &checked);
    Ok(())
}

/// Validation and defaulting shared by create and update: metadata, built-in and CRD rules,
/// and for custom resources pruning, defaulting and schema validation.
fn prepare_common(
    context: &Context<'_>,
    info: &ResourceInfo,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut errors = validate_metadata(info, object);
    if builtin::is_crd(info) {
        errors.extend(crd::prepare(context.state, object, old));
    }
    errors.extend(crate::admission::prepare(info, object));
    if let Some(schema) = &info.schema {
        let pruned = super::semantics::prune(schema, object);
        if !pruned.is_empty() {
            // `Warn` is the server's default when the client does not say (kubectl says Strict).
            report_unknown_fields(context, info, &pruned)?;
        }
        super::semantics::apply_defaults(schema, object);
        errors.extend(super::semantics::validate(schema, object, old));
    }
    if errors.is_empty() {
        if info.is_custom()
            && !info.storage_version
            && let Some(storage) = context.state.registry.storage_entry(&info.storage_key())
        {
            // Objects are stored at the storage version; reads convert back.
            object["apiVersion"] = json!(storage.api_version());
        }
        if builtin::is_events_v1(info) {
            *object = builtin::event_to_core(std::mem::take(object));
        }
        return Ok(());
    }
    let message = super::semantics::invalid_message(&info.kind, &info.group, &name, &errors);
    let causes = errors
        .iter()
        .map(|error| StatusCause {
            reason: error.reason().to_string(),
            message: error.body(),
            field: error.field.clone(),
        })
        .collect();
    Err(ApiError::invalid(
        &info.group,
        &info.kind,
        &name,
        message,
        causes,
    ))
}

/// apimachinery's `TotalAnnotationSizeLimitB`: 256 KiB of annotation keys and values.
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// ObjectMeta validation the real server applies to every kind.
fn validate_metadata(info: &ResourceInfo, object: &Value) -> Vec<super::semantics::FieldError> {
    use super::semantics::FieldError;
    let mut errors = Vec::new();
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    let label_only = crate::builtin::is_namespace(info);
    if let Some(detail) = name_problem(name, label_only) {
        errors.push(FieldError::invalid("metadata.name", json!(name), detail));
    }
    if let Some(labels) = metadata.get("labels").filter(|labels| !labels.is_null()) {
        match labels.as_object() {
            Some(labels) => {
                for (key, value) in labels {
                    // apimachinery's `ValidateLabelName`: one error per problem of the key.
                    for detail in qualified_name_problems(key) {
                        errors.push(FieldError::invalid("metadata.labels", json!(key), detail));
                    }
                    if !value
                        .as_str()
                        .is_some_and(crate::selectors::is_valid_label_value)
                    {
                        errors.push(FieldError::invalid(
                            "metadata.labels",
                            value.clone(),
                            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                        ));
                    }
                }
            }
            None => errors.push(FieldError::invalid(
                "metadata.labels",
                labels.clone(),
                "must be a map of string to string",
            )),
        }
    }
    if let Some(annotations) = metadata.get("annotations").filter(|a| !a.is_null())
        && !annotations
            .as_object()
            .is_some_and(|map| map.values().all(Value::is_string))
    {
        errors.push(FieldError::invalid(
            "metadata.annotations",
            annotations.clone(),
            "must be a map of string to string",
        ));
    }
    // apimachinery's `ValidateAnnotations`: each key is a qualified name once lowercased (the
    // error shows the key as written), ...
    for key in metadata["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(key, _)| key)
    {
        for detail in qualified_name_problems(&key.to_lowercase()) {
            errors.push(FieldError::invalid(
                "metadata.annotations",
                json!(key),
                detail,
            ));
        }
    }
    // ... and keys and values together are at most 256 KiB (`ValidateAnnotationsSize`).
    let annotation_bytes: usize = metadata["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(key, value)| key.len() + value.as_str().map_or(0, str::len))
        .sum();
    if annotation_bytes > TOTAL_ANNOTATION_SIZE_LIMIT {
        errors.push(FieldError::too_long(
            "metadata.annotations",
            json!(""),
            TOTAL_ANNOTATION_SIZE_LIMIT as i64,
        ));
    }
    if let Some(owners) = metadata.get("ownerReferences").filter(|o| !o.is_null()) {
        match owners.as_array() {
            Some(owners) => {
                for (position, owner) in owners.iter().enumerate() {
                    for field in ["apiVersion", "kind", "name", "uid"] {
                        if owner[field].as_str().is_none_or(str::is_empty) {
                            errors.push(FieldError::required(
                                format!("metadata.ownerReferences[{position}].{field}"),
                                "",
                            ));
                        }
                    }
                }
                let controllers = owners
                    .iter()
                    .filter(|owner| owner["controller"].as_bool() == Some(true))
                    .count();
                if controllers > 1 {
                    errors.push(FieldError::invalid(
                        "metadata.ownerReferences",
                        owners.iter().cloned().collect(),
                        "Only one reference can have Controller set to true",
                    ));
                }
            }
            None => errors.push(FieldError::invalid(
                "metadata.ownerReferences",
                owners.clone(),
                "must be a list of owner references",
            )),
        }
    }
    if let Some(finalizers) = metadata.get("finalizers").filter(|f| !f.is_null())
        && !finalizers
            .as_array()
            .is_some_and(|list| list.iter().all(Value::is_string))
    {
        errors.push(FieldError::invalid(
            "metadata.finalizers",
            finalizers.clone(),
            "must be a list of strings",
        ));
    }
    errors
}

/// The problems apimachinery's `IsQualifiedName` finds in `value` (a label or annotation key:
/// an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63 characters), in
/// its words and order; empty when it is valid.
fn qualified_name_problems(value: &str) -> Vec<String> {
    const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let mut problems = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_owned());
            } else {
                problems.extend(
                    dns1123_subdomain_problems(prefix)
                        .into_iter()
                        .map(|problem| format!("prefix part {problem}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {NAME_RULE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        problems.push("name part must be no more than 63 characters".to_owned());
    }
    let inner_ok = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    let name_ok = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(inner_ok);
    if !name_ok {
        problems.push(format!("name part {NAME_RULE}"));
    }
    problems
}

/// The problems apimachinery's `IsDNS1123Subdomain` finds in `value`, in its words.
fn dns1123_subdomain_problems(value: &str) -> Vec<String> {
    let label_ok = |label: &str| {
        label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let mut problems = Vec::new();
    if value.len() > 253 {
        problems.push("must be no more than 253 characters".to_owned());
    }
    if !value.split('.').all(label_ok) {
        problems.push("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned());
    }
    problems
}

/// Why `name` is not a valid object name (DNS-1123 subdomain, or label for namespaces).
fn name_problem(name: &str, label_only: bool) -> Option<String> {
    let part_ok = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if label_only {
        if name.len() > 63 {
            return Some("must be no more than 63 characters".into());
        }
        if !part_ok(name) {
            return Some("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into());
        }
        return None;
    }
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    if !name.split('.').all(part_ok) {
        return Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
    }
    None
}

// === the update pipeline ===

/// How an update is checked and committed.
#[derive(Clone, Copy, Debug)]
pub struct UpdateOptions {
    /// The caller named the resourceVersion it read: a race is a 409, not a retry.
    pub pinned: bool,
    /// Updates without a resourceVersion are refused (custom resources, as the real server).
    pub require_resource_version: bool,
    pub dry_run: bool,
    /// Record the write in managedFields as an "Update" by the request's manager (apply
    /// records its own ownership).
    pub record_manager: bool,
}

/// Read-modify-write of one object: `mutate` turns the current object into the caller's
/// intended one; the pipeline then applies the server's rules and commits it.
pub fn update_object(
    context: &Context<'_>,
    options: UpdateOptions,
    mutate: &dyn Fn(&Value) -> Result<Value, ApiError>,
) -> Result<Value, ApiError> {
    let info = context.info().clone();
    let storage_key = info.storage_key();
    let store = &context.state.store;
    for _ in 0..MAX_UPDATE_ATTEMPTS {
        let current = store
            .get(&storage_key, &context.target.namespace, context.name())
            .ok_or_else(|| context.not_found())?;
        let old = current
            .to_value()
            .map_err(|error| ApiError::internal(error.to_string()))?;
        let intended = mutate(&served(&info, &old))?;
        crate::authz::check_escalation(context, &intended, Some(&old))?;
        let new = prepare_update(
            context,
            &info,
            &old,
            intended,
            current.index.resource_version,
            options,
        )?;
        // Admission runs on no-op updates too, as on the real server.
        admit(
            context,
            Operation::Update,
            context.name(),
            Some(&new),
            Some(&old),
            options.dry_run,
        )?;
        if unchanged(&old, &new) {
            return Ok(at_version(&info, old));
        }
        if options.dry_run {
            return Ok(at_version(&info, new));
        }
        match store.update(&storage_key, new, current.index.resource_version) {
            Ok((stored, value)) => {
                if stored.index.deleting && stored.index.finalizers.is_empty() {
                    // The last finalizer is gone: the object goes now, as the real store's
                    // `shouldDeleteDuringUpdate`.
                    match store.delete(
                        &storage_key,
                        &context.target.namespace,
                        context.name(),
                        Some(stored.index.resource_version),
                    ) {
                        Ok((_, deleted)) => {
                            super::delete::after_removed(context.state, &info, &deleted)
                        }
                        Err(StoreError::NotFound | StoreError::Conflict) => {}
                        Err(error) => return Err(ApiError::internal(error.to_string())),
                    }
                } else {
                    crd::after_write(context.state, &info, &value);
                    crate::authz::after_write(context.state, &info);
                }
                return Ok(at_version(&info, value));
            }
            Err(StoreError::Conflict) if !options.pinned => continue,
            Err(StoreError::Conflict) => return Err(conflict(context)),
            Err(StoreError::NotFound) => return Err(context.not_found()),
            Err(error) => return Err(ApiError::internal(error.to_string())),
        }
    }
    Err(conflict(context))
}

/// The stored object as served at the request's version, copied only when that differs.
fn served<'a>(info: &ResourceInfo, stored: &'a Value) -> std::borrow::Cow<'a, Value> {
    let converted = builtin::is_events_v1(info)
        || (info.is_custom() && stored["apiVersion"].as_str() != Some(info.api_version().as_str()));
    if converted {
        std::borrow::Cow::Owned(at_version(info, stored.clone()))
    } else {
        std::borrow::Cow::Borrowed(stored)
    }
}

fn conflict(context: &Context<'_>) -> ApiError {
    let info = context.info();
    ApiError::conflict(
        &info.group,
        &info.plural,
        context.name(),
        "the object has been modified; please apply your changes to the latest version and try again",
    )
}

/// Whether an update changes nothing but bookkeeping (then the real server writes nothing and
/// the resourceVersion stays): the objects are equal but for `metadata.resourceVersion` and
/// `metadata.managedFields`. Compared in place: objects are large and updates many.
fn unchanged(old: &Value, new: &Value) -> bool {
    let (Some(old_map), Some(new_map)) = (old.as_object(), new.as_object()) else {
        return old == new;
    };
    let bookkeeping = |key: &str| key == "resourceVersion" || key == "managedFields";
    let metadata_equal = match (old_map.get("metadata"), new_map.get("metadata")) {
        (Some(Value::Object(old_meta)), Some(Value::Object(new_meta))) => {
            equal_except(old_meta, new_meta, bookkeeping)
        }
        (old_meta, new_meta) => old_meta == new_meta,
    };
    metadata_equal && equal_except(old_map, new_map, |key| key == "metadata")
}

/// Whether two objects have the same members, leaving out the keys `skip` names.
fn equal_except(
    old: &serde_json::Map<String, Value>,
    new: &serde_json::Map<String, Value>,
    skip: impl Fn(&str) -> bool,
) -> bool {
    let kept = |map: &serde_json::Map<String, Value>| map.keys().filter(|key| !skip(key)).count();
    kept(old) == kept(new)
        && old
            .iter()
            .filter(|(key, _)| !skip(key))
            .all(|(key, value)| new.get(key) == Some(value))
}

/// The server's rules for an update of `old` to `new`.
fn prepare_update(
    context: &Context<'_>,
    info: &ResourceInfo,
    old: &Value,
    mut new: Value,
    current_resource_version: u64,
    options: UpdateOptions,
) -> Result<Value, ApiError> {
    let require_resource_version = options.require_resource_version;
    check_type_meta(info, &mut new)?;
    check_builtin_types(context, info, &mut new)?;
    let name = context.name().to_string();
    let new_name = new["metadata"]["name"].as_str().unwrap_or_default();
    if new_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({new_name}) does not match the name on the URL ({name})"
        )));
    }
    check_namespace(context, &new)?;
    if info.namespaced {
        new["metadata"]["namespace"] = json!(context.target.namespace);
    }
    let given = new["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if given.is_empty() {
        if require_resource_version {
            return Err(ApiError::invalid_field(
                &info.group,
                &info.kind,
                &name,
                "metadata.resourceVersion",
                "FieldValueInvalid",
                "Invalid value: 0x0: must be specified for an update",
            ));
        }
    } else if given.parse::<u64>().ok() != Some(current_resource_version) {
        return Err(conflict(context));
    }
    let old_uid = old["metadata"]["uid"].as_str().unwrap_or_default();
    if let Some(new_uid) = new["metadata"]["uid"].as_str()
        && !new_uid.is_empty()
        && new_uid != old_uid
    {
        return Err(ApiError::invalid_field(
            &info.group,
            &info.kind,
            &name,
            "metadata.uid",
            "FieldValueInvalid",
            &format!("Invalid value: {new_uid:?}: field is immutable"),
        ));
    }
    // Fields only the server sets keep their stored values.
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old["metadata"].get(field) {
            Some(value) => new["metadata"][field] = value.clone(),
            None => {
                if let Some(metadata) = new["metadata"].as_object_mut() {
                    metadata.remove(field);
                }
            }
        }
    }
    new["metadata"]["resourceVersion"] = json!(current_resource_version.to_string());

    let deleting = old["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|timestamp| !timestamp.is_null());
    if deleting {
        let old_finalizers = string_list(&old["metadata"]["finalizers"]);
        let added: Vec<String> = string_list(&new["metadata"]["finalizers"])
            .into_iter()
            .filter(|finalizer| !old_finalizers.contains(finalizer))
            .collect();
        if !added.is_empty() {
            let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
            return Err(ApiError::invalid_field(
                &info.group,
                &info.kind,
                &name,
                "metadata.finalizers",
                "FieldValueForbidden",
                &format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    quoted.join(", ")
                ),
            ));
        }
    }

    let status_update = context.target.subresource.as_deref() == Some("status");
    if status_update {
        // The status endpoint changes only status (and managedFields), as the real
        // statusStrategy.PrepareForUpdate: everything else is copied from the stored object.
        let status = new.get("status").cloned();
        let managed_fields = new["metadata"].get("managedFields").cloned();
        let mut merged = old.clone();
        merged["metadata"]["resourceVersion"] = json!(current_resource_version.to_string());
        if let Some(map) = merged.as_object_mut() {
            match status {
                Some(status) => {
                    map.insert("status".into(), status);
                }
                None => {
                    map.remove("status");
                }
            }
        }
        if let Some(managed_fields) = managed_fields {
            merged["metadata"]["managedFields"] = managed_fields;
        }
        new = merged;
    } else if info.has_status {
        // The main endpoint ignores status changes when the status subresource is enabled.
        if let Some(map) = new.as_object_mut() {
            match old.get("status") {
                Some(status) => {
                    map.insert("status".into(), status.clone());
                }
                None => {
                    map.remove("status");
                }
            }
        }
    }
    if builtin::tracks_generation(info) && spec_changed(old, &new) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(0);
        new["metadata"]["generation"] = json!(generation + 1);
    }
    builtin::prepare_builtin_write(info, &mut new);
    prepare_common(context, info, &mut new, Some(old))?;
    if options.record_manager {
        super::semantics::record_update(
            info,
            Some(old),
            &mut new,
            &context.field_manager(),
            &now(),
        );
    }
    Ok(new)
}

/// Whether anything outside metadata and status differs (what bumps `metadata.generation`).
pub fn spec_changed(old: &Value, new: &Value) -> bool {
    match (old.as_object(), new.as_object()) {
        (Some(old), Some(new)) => {
            !equal_except(old, new, |key| key == "metadata" || key == "status")
        }
        _ => old != new,
    }
}

pub fn string_list(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_version_4() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert_ne!(uid, new_uid());
    }

    #[test]
    fn generated_names_fit_in_63_characters() {
        let long = "x".repeat(80);
        let name = format!("{}{}", generate_prefix(&long), name_suffix());
        assert_eq!(name.len(), 63);
        assert_eq!(generate_prefix("short-"), "short-");
    }

    #[test]
    fn names_are_dns_subdomains() {
        assert!(name_problem("a.b-c", false).is_none());
        assert!(name_problem("A", false).is_some());
        assert!(name_problem("a.b", true).is_some());
        assert!(name_problem("", false).is_some());
        assert!(name_problem("-a", false).is_some());
    }

    #[test]
    fn generation_ignores_metadata_and_status() {
        let old = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}, "status": {"s": 1}});
        let relabelled =
            json!({"metadata": {"labels": {"a": "2"}}, "spec": {"x": 1}, "status": {"s": 2}});
        let respecced = json!({"metadata": {}, "spec": {"x": 2}});
        assert!(!spec_changed(&old, &relabelled));
        assert!(spec_changed(&old, &respecced));
        assert!(spec_changed(&json!([1]), &json!({})));
    }

    #[test]
    fn bookkeeping_alone_is_no_change() {
        let old = json!({"metadata": {"name": "a", "resourceVersion": "1", "managedFields": [1]}, "spec": {"x": 1}});
        let bookkeeping =
            json!({"metadata": {"name": "a", "resourceVersion": "2"}, "spec": {"x": 1}});
        assert!(unchanged(&old, &bookkeeping));
        let labelled = json!({"metadata": {"name": "a", "labels": {}}, "spec": {"x": 1}});
        assert!(!unchanged(&old, &labelled));
        let respecced = json!({"metadata": {"name": "a"}, "spec": {"x": 1.0}});
        assert!(!unchanged(&old, &respecced));
        let extra = json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {}});
        assert!(!unchanged(&old, &extra));
        assert!(!unchanged(
            &old,
            &json!({"metadata": "a", "spec": {"x": 1}})
        ));
        assert!(unchanged(&json!({"spec": 1}), &json!({"spec": 1})));
        assert!(!unchanged(
            &json!({"spec": 1}),
            &json!({"metadata": {}, "spec": 1})
        ));
    }
}
