//! Type checking of built-in objects, as the real server's decoding into Go structs does it.
//!
//! The real apiserver decodes a built-in object's JSON into its Go type: a value of the wrong
//! JSON type is a 400 (`json: cannot unmarshal number into Go struct field ConfigMap.data of
//! type string`), and fields the type does not have are unknown fields, reported by strict
//! decoding (`unknown field "spec.foo"`) and dropped from what is stored. Here the object is
//! walked along the kind's OpenAPI schema (k8s-openapi's, the same the discovery documents
//! serve) for Go-worded type errors and unknown fields, then decoded into its k8s-openapi type,
//! which catches value formats (base64 bytes, timestamps).

use serde_json::{Map, Value};

use crate::builtin;
use crate::registry::ResourceInfo;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Go's `json.UnmarshalTypeError` wording.
    #[error(
        "json: cannot unmarshal {value} into Go struct field {go_struct}.{field} of type {go_type}"
    )]
    WrongType {
        value: String,
        go_struct: String,
        field: String,
        go_type: String,
    },
    /// A value of the right JSON type that the typed decoding refuses (bad base64, time).
    #[error("{0}")]
    Format(String),
}

/// What the check found besides type errors.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Checked {
    /// Unknown fields as strict decoding names them (`spec.foo`, `items[0].bar`).
    pub unknown_fields: Vec<String>,
    /// Where each unknown field is, for removing it.
    locations: Vec<Vec<Segment>>,
}

/// The component schema name of a built-in kind, or `None` when it is not type-checked here
/// (custom resources, which their CRD schema validates, and CustomResourceDefinitions, which
/// the CRD strategy validates).
fn schema_name(info: &ResourceInfo) -> Option<&'static str> {
    if info.is_custom() {
        return None;
    }
    let name = match (info.group.as_str(), info.kind.as_str()) {
        ("", "Namespace") => "io.k8s.api.core.v1.Namespace",
        ("", "Secret") => "io.k8s.api.core.v1.Secret",
        ("", "ConfigMap") => "io.k8s.api.core.v1.ConfigMap",
        ("", "ServiceAccount") => "io.k8s.api.core.v1.ServiceAccount",
        ("", "Event") => "io.k8s.api.core.v1.Event",
        ("events.k8s.io", "Event") => "io.k8s.api.events.v1.Event",
        ("coordination.k8s.io", "Lease") => "io.k8s.api.coordination.v1.Lease",
        ("", "Service") => "io.k8s.api.core.v1.Service",
        ("apps", "Deployment") => "io.k8s.api.apps.v1.Deployment",
        ("autoscaling", "HorizontalPodAutoscaler") => {
            "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler"
        }
        ("policy", "PodDisruptionBudget") => "io.k8s.api.policy.v1.PodDisruptionBudget",
        ("networking.k8s.io", "NetworkPolicy") => "io.k8s.api.networking.v1.NetworkPolicy",
        ("rbac.authorization.k8s.io", "ClusterRole") => "io.k8s.api.rbac.v1.ClusterRole",
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            "io.k8s.api.rbac.v1.ClusterRoleBinding"
        }
        ("rbac.authorization.k8s.io", "Role") => "io.k8s.api.rbac.v1.Role",
        ("rbac.authorization.k8s.io", "RoleBinding") => "io.k8s.api.rbac.v1.RoleBinding",
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicy"
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding"
        }
        _ => return None,
    };
    Some(name)
}

/// Checks `object` (at the request's version) against its kind's Go type.
pub fn check(info: &ResourceInfo, object: &Value) -> Result<Checked, Error> {
    let Some(root) = schema_name(info) else {
        return Ok(Checked::default());
    };
    let schemas = crate::openapi::builtin_schemas();
    let Some(schema) = schemas.get(root) else {
        return Ok(Checked::default());
    };
    let mut walker = Walker {
        schemas,
        type_error: None,
        unknown_fields: Vec::new(),
        locations: Vec::new(),
    };
    let mut go_path = Vec::new();
    let mut location = Vec::new();
    walker.walk(
        schema,
        object,
        short_name(root),
        &mut go_path,
        &mut location,
    );
    if let Some(error) = walker.type_error {
        return Err(error);
    }
    decode_typed(info, object)?;
    Ok(Checked {
        unknown_fields: walker.unknown_fields,
        locations: walker.locations,
    })
}

/// Removes the unknown fields `check` reported, as decoding into the Go type drops them.
pub fn drop_unknown_fields(object: &mut Value, checked: &Checked) {
    for location in &checked.locations {
        remove_at(object, location);
    }
}

fn remove_at(object: &mut Value, location: &[Segment]) {
    let Some((last, parents)) = location.split_last() else {
        return;
    };
    let mut current = object;
    for segment in parents {
        let next = match segment {
            Segment::Key(key) => current.get_mut(key.as_str()),
            Segment::Index(index) => current.get_mut(*index),
        };
        match next {
            Some(next) => current = next,
            None => return,
        }
    }
    if let (Segment::Key(key), Some(map)) = (last, current.as_object_mut()) {
        map.remove(key);
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// A location as strict decoding prints it: `a.b[0].c`.
fn render(location: &[Segment]) -> String {
    let mut text = String::new();
    for segment in location {
        match segment {
            Segment::Key(key) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            Segment::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
}

// === impl Walker ===

struct Walker<'a> {
    schemas: &'a std::collections::BTreeMap<String, Value>,
    type_error: Option<Error>,
    unknown_fields: Vec<String>,
    locations: Vec<Vec<Segment>>,
}

/// The last segment of a schema name (`ObjectMeta`).
fn short_name(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// Go's `reflect.Type.String()` of a named type: package name and type (`v1.ObjectMeta`).
fn go_named_type(name: &str) -> String {
    let mut parts = name.rsplit('.');
    let type_name = parts.next().unwrap_or(name);
    match parts.next() {
        Some(package) => format!("{package}.{type_name}"),
        None => type_name.to_string(),
    }
}

/// The `$ref` of a schema, directly or as k8s-openapi writes it (`allOf: [{$ref}]`).
fn reference(schema: &Value) -> Option<&str> {
    let direct = schema.get("$ref").and_then(Value::as_str);
    let wrapped = schema
        .get("allOf")
        .and_then(Value::as_array)
        .and_then(|all| all.first())
        .and_then(|first| first.get("$ref"))
        .and_then(Value::as_str);
    direct
        .or(wrapped)
        .and_then(|reference| reference.strip_prefix("#/components/schemas/"))
}

/// Go's name for the JSON value's type in an `UnmarshalTypeError`.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl<'a> Walker<'a> {
    fn resolve(&self, schema: &'a Value) -> (Option<&'a str>, &'a Value) {
        match reference(schema) {
            Some(name) => match self.schemas.get(name) {
                Some(resolved) => (Some(name), resolved),
                None => (Some(name), schema),
            },
            None => (None, schema),
        }
    }

    /// The Go type a schema stands for, as an `UnmarshalTypeError` prints it.
    fn go_type(&self, schema: &'a Value) -> String {
        let (name, resolved) = self.resolve(schema);
        if let Some(name) = name {
            return go_named_type(name);
        }
        let format = resolved.get("format").and_then(Value::as_str);
        match resolved.get("type").and_then(Value::as_str) {
            Some("string") if format == Some("byte") => "[]uint8".into(),
            Some("string") => "string".into(),
            Some("integer") => match format {
                Some("int32") => "int32".into(),
                Some("int64") => "int64".into(),
                _ => "int".into(),
            },
            Some("number") => "float64".into(),
            Some("boolean") => "bool".into(),
            Some("array") => match resolved.get("items") {
                Some(items) => format!("[]{}", self.go_type(items)),
                None => "[]interface {}".into(),
            },
            Some("object") => match resolved.get("additionalProperties") {
                Some(values) if values.is_object() => {
                    format!("map[string]{}", self.go_type(values))
                }
                _ => "map[string]interface {}".into(),
            },
            _ => "interface {}".into(),
        }
    }

    /// The JSON value's kind in the error when it does not fit `schema`, else `None`.
    fn mismatch(&self, schema: &'a Value, value: &Value) -> Option<String> {
        let (name, resolved) = self.resolve(schema);
        // Types with their own JSON decoding (Time, MicroTime, Quantity, IntOrString) are
        // left to the typed decoding, which reports their own errors.
        if name.is_some() && resolved.get("properties").is_none() {
            return None;
        }
        let fits = match resolved.get("type").and_then(Value::as_str) {
            Some("string") => value.is_string(),
            Some("boolean") => value.is_boolean(),
            Some("number") => value.is_number(),
            Some("integer") => {
                if let Value::Number(number) = value {
                    let fits_in = match resolved.get("format").and_then(Value::as_str) {
                        Some("int32") => number.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
                        _ => number.as_i64().is_some(),
                    };
                    if !fits_in {
                        return Some(format!("number {number}"));
                    }
                    true
                } else {
                    false
                }
            }
            Some("array") => value.is_array(),
            Some("object") => value.is_object(),
            _ => true,
        };
        (!fits).then(|| json_kind(value).to_string())
    }

    fn walk(
        &mut self,
        schema: &'a Value,
        value: &Value,
        go_struct: &str,
        go_path: &mut Vec<String>,
        location: &mut Vec<Segment>,
    ) {
        // Go leaves a field at its zero value for `null`.
        if value.is_null() || self.type_error.is_some() {
            return;
        }
        if let Some(kind) = self.mismatch(schema, value) {
            self.type_error = Some(Error::WrongType {
                value: kind,
                go_struct: go_struct.to_string(),
                field: go_path.join("."),
                go_type: self.go_type(schema),
            });
            return;
        }
        let (name, resolved) = self.resolve(schema);
        match value {
            Value::Object(map) => {
                if let Some(Value::Object(properties)) = resolved.get("properties") {
                    let inner_struct = name.map(short_name).unwrap_or(go_struct).to_string();
                    self.walk_struct(properties, map, &inner_struct, go_path, location);
                } else if let Some(values) = resolved
                    .get("additionalProperties")
                    .filter(|values| values.is_object())
                {
                    // Map keys are not part of Go's field path.
                    for (key, item) in map {
                        location.push(Segment::Key(key.clone()));
                        self.walk(values, item, go_struct, go_path, location);
                        location.pop();
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item_schema) = resolved.get("items") {
                    for (index, item) in items.iter().enumerate() {
                        location.push(Segment::Index(index));
                        self.walk(item_schema, item, go_struct, go_path, location);
                        location.pop();
                    }
                }
            }
            _ => {}
        }
    }

    fn walk_struct(
        &mut self,
        properties: &'a Map<String, Value>,
        map: &Map<String, Value>,
        go_struct: &str,
        go_path: &mut Vec<String>,
        location: &mut Vec<Segment>,
    ) {
        for (key, item) in map {
            location.push(Segment::Key(key.clone()));
            // Field names match case-sensitively (sigs.k8s.io/json), unlike encoding/json.
            match properties.get(key) {
                Some(property) => {
                    go_path.push(key.clone());
                    self.walk(property, item, go_struct, go_path, location);
                    go_path.pop();
                }
                None => {
                    self.unknown_fields.push(render(location));
                    self.locations.push(location.clone());
                }
            }
            location.pop();
        }
    }
}

// === typed decoding ===

/// Decodes into the k8s-openapi type. Missing required fields are not decoding errors for the
/// real server (Go fills zero values; validation reports them), so those are not reported
/// here; `null`s are dropped first for the same reason.
fn decode_typed(info: &ResourceInfo, object: &Value) -> Result<(), Error> {
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

    fn decode<T: serde::de::DeserializeOwned>(object: Value) -> Result<(), String> {
        serde_json::from_value::<T>(object)
            .map(drop)
            .map_err(|error| error.to_string())
    }

    let mut object = object.clone();
    drop_nulls(&mut object);
    let result = match (info.group.as_str(), info.kind.as_str()) {
        ("", "Namespace") => decode::<Namespace>(object),
        ("", "Secret") => decode::<Secret>(object),
        ("", "ConfigMap") => decode::<ConfigMap>(object),
        ("", "ServiceAccount") => decode::<ServiceAccount>(object),
        ("", "Event") => decode::<Event>(object),
        ("events.k8s.io", "Event") if builtin::is_events_v1(info) => {
            decode::<EventsV1Event>(object)
        }
        ("coordination.k8s.io", "Lease") => decode::<Lease>(object),
        ("", "Service") => decode::<Service>(object),
        ("apps", "Deployment") => decode::<Deployment>(object),
        ("autoscaling", "HorizontalPodAutoscaler") => decode::<HorizontalPodAutoscaler>(object),
        ("policy", "PodDisruptionBudget") => decode::<PodDisruptionBudget>(object),
        ("networking.k8s.io", "NetworkPolicy") => decode::<NetworkPolicy>(object),
        ("rbac.authorization.k8s.io", "ClusterRole") => decode::<ClusterRole>(object),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => decode::<ClusterRoleBinding>(object),
        ("rbac.authorization.k8s.io", "Role") => decode::<Role>(object),
        ("rbac.authorization.k8s.io", "RoleBinding") => decode::<RoleBinding>(object),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            decode::<ValidatingAdmissionPolicy>(object)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            decode::<ValidatingAdmissionPolicyBinding>(object)
        }
        _ => Ok(()),
    };
    match result {
        Err(message) if !message.starts_with("missing field") => Err(Error::Format(message)),
        _ => Ok(()),
    }
}

fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, item| !item.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(plural: &str) -> ResourceInfo {
        builtin::builtin_resources()
            .into_iter()
            .find(|info| info.plural == plural && info.group.is_empty())
            .unwrap()
    }

    fn lease_info() -> ResourceInfo {
        builtin::builtin_resources()
            .into_iter()
            .find(|info| info.plural == "leases")
            .unwrap()
    }

    #[test]
    fn config_map_data_must_hold_strings() {
        let error = check(
            &info("configmaps"),
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
                    "data": {"a": 1}}),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
        );
    }

    #[test]
    fn nested_struct_fields_name_the_innermost_struct_and_the_full_path() {
        let error = check(
            &info("configmaps"),
            &json!({"metadata": {"name": "a", "labels": "x"}}),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "json: cannot unmarshal string into Go struct field ObjectMeta.metadata.labels of type map[string]string"
        );
        let error = check(
            &info("configmaps"),
            &json!({"metadata": {"ownerReferences": [{"controller": "yes"}]}}),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "json: cannot unmarshal string into Go struct field OwnerReference.metadata.ownerReferences.controller of type bool"
        );
        let error = check(&info("configmaps"), &json!({"metadata": []})).unwrap_err();
        assert_eq!(
            error.to_string(),
            "json: cannot unmarshal array into Go struct field ConfigMap.metadata of type v1.ObjectMeta"
        );
    }

    #[test]
    fn integers_must_fit_their_go_type() {
        let error = check(
            &lease_info(),
            &json!({"spec": {"leaseDurationSeconds": 1.5}}),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "json: cannot unmarshal number 1.5 into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"
        );
        let error = check(
            &lease_info(),
            &json!({"spec": {"leaseDurationSeconds": 4_000_000_000u64}}),
        )
        .unwrap_err();
        assert!(error.to_string().contains("number 4000000000"), "{error}");
        assert!(
            check(
                &lease_info(),
                &json!({"spec": {"leaseDurationSeconds": 15, "holderIdentity": null}})
            )
            .is_ok()
        );
    }

    #[test]
    fn unknown_fields_are_reported_with_their_paths_and_dropped() {
        let mut object = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "colour": "red",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x",
                                              "uid": "u", "extra": null}]},
            "Data": {"a": "b"},
            "spec": {"x": 1},
            "a.b": true,
            "data": {"free.form-key": "v"},
        });
        let checked = check(&info("configmaps"), &object).unwrap();
        assert_eq!(
            checked.unknown_fields,
            vec![
                "Data",
                "a.b",
                "metadata.colour",
                "metadata.ownerReferences[0].extra",
                "spec"
            ]
        );
        drop_unknown_fields(&mut object, &checked);
        assert_eq!(
            object,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x",
                                                  "uid": "u"}]},
                "data": {"free.form-key": "v"},
            })
        );
    }

    #[test]
    fn value_formats_are_checked_by_the_typed_decoding() {
        let error = check(
            &info("secrets"),
            &json!({"metadata": {"name": "s"}, "data": {"k": "not base64!"}}),
        )
        .unwrap_err();
        assert!(matches!(error, Error::Format(_)), "{error:?}");
        let error = check(
            &info("configmaps"),
            &json!({"metadata": {"name": "a", "creationTimestamp": "yesterday"}}),
        )
        .unwrap_err();
        assert!(matches!(error, Error::Format(_)), "{error:?}");
        // Missing required fields are validation's business, not decoding's.
        assert!(
            check(
                &info("events"),
                &json!({"metadata": {"name": "e"}, "reason": "R"})
            )
            .is_ok()
        );
    }

    #[test]
    fn every_served_builtin_kind_has_a_schema() {
        for info in builtin::builtin_resources() {
            if let Some(name) = schema_name(&info) {
                assert!(
                    crate::openapi::builtin_schemas().contains_key(name),
                    "{name}"
                );
            }
        }
    }
}
