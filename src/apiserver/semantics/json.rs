//! Helpers on decoded JSON shared by the modules.

use serde_json::Value;

/// Equality of decoded JSON as Go compares decoded values, where 1 and 1.0 are the same number.
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|other| json_equal(v, other)))
        }
        _ => a == b,
    }
}

/// A canonical text for a value, equal for values `json_equal` considers equal: object keys
/// sorted, integral numbers written as integers. Used to compare many values in linear time.
pub(crate) fn canonical_text(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Number(number) => match (number.as_i64(), number.as_f64()) {
            (Some(int), _) => out.push_str(&int.to_string()),
            (None, Some(float)) if float.fract() == 0.0 && float.abs() < 9.2e18 => {
                out.push_str(&(float as i64).to_string());
            }
            _ => out.push_str(&number.to_string()),
        },
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_text_agrees_with_json_equal() {
        let pairs = [
            (json!(1), json!(1.0), true),
            (
                json!({"b": 1, "a": [2.0]}),
                json!({"a": [2], "b": 1.0}),
                true,
            ),
            (json!("1"), json!(1), false),
            (json!(1.5), json!(1.5), true),
            (json!([1, 2]), json!([2, 1]), false),
        ];
        for (a, b, equal) in pairs {
            assert_eq!(json_equal(&a, &b), equal, "{a} {b}");
            assert_eq!(canonical_text(&a) == canonical_text(&b), equal, "{a} {b}");
        }
    }
}

/// Whether [`strip_nulls`] also cleans the objects inside arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InArrays {
    /// Array items are values and keep their `null`s (a merge patch replaces arrays whole).
    Kept,
    /// `null`s are dropped at every depth (an applied configuration, where `null` means "not
    /// set" wherever it stands).
    Stripped,
}

/// `value` without the `null` members of its objects.
pub(crate) fn strip_nulls(value: &Value, in_arrays: InArrays) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v, in_arrays)))
                .collect(),
        ),
        Value::Array(items) if in_arrays == InArrays::Stripped => Value::Array(
            items
                .iter()
                .map(|item| strip_nulls(item, in_arrays))
                .collect(),
        ),
        other => other.clone(),
    }
}
