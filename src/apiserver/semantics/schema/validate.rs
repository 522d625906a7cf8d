//! OpenAPI value validation with kube-openapi's messages, converted to field errors the way
//! apiextensions' `kubeOpenAPIResultToFieldErrors` does, plus the list-type invariants of
//! `pkg/apiserver/schema/listtype`.

use serde_json::Value;

use super::errors::FieldError;
use super::{Node, formats};
use crate::gofmt;
use crate::json::json_equal;

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// The JSON type name kube-openapi infers for a decoded value.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn sorted_keys(map: &serde_json::Map<String, Value>) -> Vec<&String> {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    keys
}

/// Finds the old value a new list item corresponds to: map-list items by their keys, set items
/// by value; items of other lists do not correlate. Built once per list so that correlating
/// every item stays linear.
pub(crate) struct Correlation<'a> {
    by_identity: std::collections::HashMap<String, &'a Value>,
    mode: CorrelationMode,
}

#[derive(Clone, Copy, PartialEq)]
enum CorrelationMode {
    None,
    MapKeys,
    SetValues,
}

impl<'a> Correlation<'a> {
    pub(crate) fn new(node: &Node, old: Option<&'a Value>) -> Correlation<'a> {
        let mode = match node.list_type.as_deref() {
            Some("map") if !node.list_map_keys.is_empty() => CorrelationMode::MapKeys,
            Some("set") => CorrelationMode::SetValues,
            _ => CorrelationMode::None,
        };
        let mut by_identity = std::collections::HashMap::new();
        if mode != CorrelationMode::None
            && let Some(old_items) = old.and_then(Value::as_array)
        {
            for candidate in old_items {
                if let Some(identity) = identity(node, mode, candidate) {
                    by_identity.entry(identity).or_insert(candidate);
                }
            }
        }
        Correlation { by_identity, mode }
    }

    /// The old item for `item`, if any.
    pub(crate) fn old_for(&self, node: &Node, item: &Value) -> Option<&'a Value> {
        let identity = identity(node, self.mode, item)?;
        self.by_identity.get(&identity).copied()
    }
}

fn identity(node: &Node, mode: CorrelationMode, item: &Value) -> Option<String> {
    match mode {
        CorrelationMode::None => None,
        CorrelationMode::SetValues => Some(crate::json::canonical_text(item)),
        CorrelationMode::MapKeys => {
            let mut key = serde_json::Map::new();
            for name in &node.list_map_keys {
                key.insert(name.clone(), item.get(name)?.clone());
            }
            Some(crate::json::canonical_text(&Value::Object(key)))
        }
    }
}

/// Validates `value` against `node`, in kube-openapi's validator order: type, junctors,
/// string, format, number, array, enum, object.
///
/// `old` is the correlated old value on update: an unchanged value is not validated again
/// (validation ratcheting, on by default since Kubernetes 1.30), so objects stored under an
/// older schema stay updatable.
pub(crate) fn validate_value(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if old.is_some_and(|old| json_equal(old, value)) {
        return;
    }
    let allowed: Vec<&str> = if node.int_or_string {
        vec!["integer", "string"]
    } else {
        node.type_name.iter().map(String::as_str).collect()
    };
    if value.is_null() {
        if !allowed.is_empty() && !node.nullable {
            errors.push(FieldError::type_invalid(
                path,
                Value::String("null".into()),
                format!(
                    "{path} in body must be of type {}: \"null\"",
                    allowed.join(",")
                ),
            ));
        }
        return;
    }
    let actual = json_type(value);
    if !allowed.is_empty() {
        let float_is_integer = actual == "number"
            && value
                .as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15)
            && allowed.contains(&"integer");
        let integer_is_number = actual == "integer" && allowed.contains(&"number");
        if !(allowed.contains(&actual) || float_is_integer || integer_is_number) {
            errors.push(FieldError::type_invalid(
                path,
                Value::String(actual.into()),
                format!(
                    "{path} in body must be of type {}: {}",
                    allowed.join(","),
                    gofmt::quote(actual)
                ),
            ));
            return;
        }
    }

    validate_junctors(node, value, path, errors);

    if let Value::String(text) = value {
        validate_string(node, text, value, path, errors);
    }
    if let Value::Number(number) = value {
        validate_number(node, number, value, path, errors);
    }
    if let Value::Array(items) = value {
        if let Some(item_schema) = node.items.as_deref() {
            let correlation = Correlation::new(node, old);
            for (index, item) in items.iter().enumerate() {
                let old_item = correlation.old_for(node, item);
                validate_value(
                    item_schema,
                    item,
                    old_item,
                    &format!("{path}[{index}]"),
                    errors,
                );
            }
        }
        let size = items.len() as i64;
        if let Some(min) = node.min_items
            && size < min
        {
            errors.push(FieldError::invalid(
                path,
                Value::from(size),
                format!("{path} in body should have at least {min} items"),
            ));
        }
        if let Some(max) = node.max_items
            && size > max
        {
            errors.push(FieldError::too_many(path, size, max));
        }
    }
    if let Some(values) = &node.enum_values
        && !values.iter().any(|allowed| json_equal(allowed, value))
    {
        let names: Vec<String> = values
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        errors.push(FieldError::not_supported(path, value.clone(), &names));
    }
    if let Value::Object(map) = value {
        validate_object(node, map, old, path, errors);
    }
}

fn validate_string(
    node: &Node,
    text: &str,
    value: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let length = text.chars().count() as i64;
    if let Some(max) = node.max_length
        && length > max
    {
        errors.push(FieldError::too_long(path, value.clone(), max));
    }
    if let Some(min) = node.min_length
        && length < min
    {
        errors.push(FieldError::invalid(
            path,
            value.clone(),
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some((pattern, regex)) = &node.pattern
        && !regex.is_match(text)
    {
        errors.push(FieldError::invalid(
            path,
            value.clone(),
            format!("{path} in body should match '{pattern}'"),
        ));
    }
    if let Some(format) = node.format.as_deref()
        && formats::check(format, text) == Some(false)
    {
        errors.push(FieldError::type_invalid(
            path,
            value.clone(),
            format!(
                "{path} in body must be of type {format}: {}",
                gofmt::quote(text)
            ),
        ));
    }
}

fn validate_number(
    node: &Node,
    number: &serde_json::Number,
    value: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(data) = number.as_f64() else {
        return;
    };
    let is_integer = number.is_i64() || number.is_u64();
    // kube-openapi prints bounds as int64 for integer data and as float64 otherwise.
    let bound = |bound: f64| {
        if is_integer {
            (bound as i64).to_string()
        } else {
            gofmt::float(bound)
        }
    };
    if let Some(factor) = node.multiple_of {
        // go-openapi's MultipleOf: the quotient must be a JSON integer up to a relative 1e-9.
        let quotient = if factor < 1.0 {
            1.0 / factor * data
        } else {
            data / factor
        };
        if factor > 0.0 && !is_json_integer(quotient) {
            errors.push(FieldError::invalid(
                path,
                value.clone(),
                format!("{path} in body should be a multiple of {}", bound(factor)),
            ));
        }
    }
    if let Some(max) = node.maximum {
        let exceeded = if node.exclusive_maximum {
            data >= max
        } else {
            data > max
        };
        if exceeded {
            let relation = if node.exclusive_maximum {
                "less than"
            } else {
                "less than or equal to"
            };
            errors.push(FieldError::invalid(
                path,
                value.clone(),
                format!("{path} in body should be {relation} {}", bound(max)),
            ));
        }
    }
    if let Some(min) = node.minimum {
        let exceeded = if node.exclusive_minimum {
            data <= min
        } else {
            data < min
        };
        if exceeded {
            let relation = if node.exclusive_minimum {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errors.push(FieldError::invalid(
                path,
                value.clone(),
                format!("{path} in body should be {relation} {}", bound(min)),
            ));
        }
    }
}

/// `swag.IsFloat64AJSONInteger`: whether a float is an integer, allowing rounding error.
fn is_json_integer(value: f64) -> bool {
    const EPSILON: f64 = 1e-9;
    if !value.is_finite() || value.abs() > 9_007_199_254_740_992.0 {
        return false;
    }
    let truncated = value.trunc();
    if value == truncated {
        return true;
    }
    let difference = (value - truncated).abs();
    difference / (value.abs() + truncated.abs()) < EPSILON
}

fn validate_object(
    node: &Node,
    map: &serde_json::Map<String, Value>,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let count = map.len() as i64;
    if let Some(max) = node.max_properties
        && count > max
    {
        errors.push(FieldError::too_many(path, count, max));
    }
    if let Some(min) = node.min_properties
        && count < min
    {
        errors.push(FieldError::invalid(
            path,
            Value::from(count),
            format!("{path} in body should have at least {min} properties"),
        ));
    }
    for name in &node.required {
        if !map.contains_key(name) {
            errors.push(FieldError::required(child(path, name), ""));
        }
    }
    for key in sorted_keys(map) {
        if let (Some(property), Some(child_value)) = (node.property(key), map.get(key)) {
            let old_child = old.and_then(|old| old.get(key));
            validate_value(property, child_value, old_child, &child(path, key), errors);
        }
    }
}

/// allOf / anyOf / oneOf / not. kube-openapi reports these as composite errors, which the
/// apiserver turns into `field.Invalid` at the root path (`<nil>`).
fn validate_junctors(node: &Node, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let sub_errors = |schema: &Node| {
        let mut found = Vec::new();
        validate_value(schema, value, None, path, &mut found);
        found
    };
    if !node.all_of.is_empty() {
        let failures: Vec<Vec<FieldError>> = node
            .all_of
            .iter()
            .map(sub_errors)
            .filter(|found| !found.is_empty())
            .collect();
        if !failures.is_empty() {
            errors.push(FieldError::invalid(
                "<nil>",
                Value::String(String::new()),
                format!("{path} must validate all the schemas (allOf)"),
            ));
            errors.extend(failures.into_iter().flatten());
        }
    }
    if !node.any_of.is_empty() {
        let results: Vec<Vec<FieldError>> = node.any_of.iter().map(sub_errors).collect();
        if results.iter().all(|found| !found.is_empty()) {
            errors.push(FieldError::invalid(
                "<nil>",
                Value::String(String::new()),
                format!("{path} must validate at least one schema (anyOf)"),
            ));
            if let Some(first) = results.into_iter().next() {
                errors.extend(first);
            }
        }
    }
    if !node.one_of.is_empty() {
        let valid = node
            .one_of
            .iter()
            .filter(|schema| sub_errors(schema).is_empty())
            .count();
        if valid != 1 {
            let found = if valid == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {valid} valid alternatives")
            };
            errors.push(FieldError::invalid(
                "<nil>",
                Value::String(String::new()),
                format!("{path} must validate one and only one schema (oneOf). {found}"),
            ));
        }
    }
    if let Some(not) = node.not.as_deref()
        && sub_errors(not).is_empty()
    {
        errors.push(FieldError::invalid(
            "<nil>",
            Value::String(String::new()),
            format!("{path} must not validate the schema (not)"),
        ));
    }
}

/// `listtype.ValidateListSetsAndMaps`: items of a `set` are unique, items of a `map` are
/// objects with unique key tuples. As upstream, only the second occurrence of a repeated value
/// is reported, map entries are addressed as keys (`labels[a]`), and missing key fields count as
/// unspecified (not defaulted).
pub(crate) fn validate_list_types(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if old.is_some_and(|old| json_equal(old, value)) {
        return;
    }
    match value {
        Value::Object(map) => {
            for key in sorted_keys(map) {
                let (Some(property), Some(child_value)) = (node.property(key), map.get(key)) else {
                    continue;
                };
                let old_child = old.and_then(|old| old.get(key));
                let child_path = if node.properties.contains_key(key) {
                    child(path, key)
                } else {
                    format!("{path}[{key}]")
                };
                validate_list_types(property, child_value, old_child, &child_path, errors);
            }
        }
        Value::Array(items) => {
            match node.list_type.as_deref() {
                Some("set") => {
                    for index in second_occurrences(items) {
                        errors.push(FieldError::duplicate(
                            format!("{path}[{index}]"),
                            items[index].clone(),
                        ));
                    }
                }
                Some("map") => validate_list_map(node, items, path, errors),
                _ => {}
            }
            if let Some(item_schema) = node.items.as_deref() {
                let correlation = Correlation::new(node, old);
                for (index, item) in items.iter().enumerate() {
                    let old_item = correlation.old_for(node, item);
                    let item_path = format!("{path}[{index}]");
                    validate_list_types(item_schema, item, old_item, &item_path, errors);
                }
            }
        }
        _ => {}
    }
}

/// `validateListSet`: the indices where a value appears for the second time (linear time,
/// since lists can be long).
fn second_occurrences(values: &[Value]) -> Vec<usize> {
    let mut counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut second = Vec::new();
    for (index, value) in values.iter().enumerate() {
        let count = counts
            .entry(crate::json::canonical_text(value))
            .or_insert(0);
        *count += 1;
        if *count == 2 {
            second.push(index);
        }
    }
    second
}

fn validate_list_map(node: &Node, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
    if let Some((index, item)) = items
        .iter()
        .enumerate()
        .find(|(_, item)| !(item.is_object() || item.is_null()))
    {
        errors.push(FieldError::invalid(
            format!("{path}[{index}]"),
            item.clone(),
            "must be an object for an array of list-type map",
        ));
        return;
    }
    if items.len() <= 1 {
        return;
    }
    let keys: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut key = serde_json::Map::new();
            for name in &node.list_map_keys {
                if let Some(value) = item.get(name) {
                    key.insert(name.clone(), value.clone());
                }
            }
            Value::Object(key)
        })
        .collect();
    for index in second_occurrences(&keys) {
        errors.push(FieldError::duplicate(
            format!("{path}[{index}]"),
            keys[index].clone(),
        ));
    }
}
