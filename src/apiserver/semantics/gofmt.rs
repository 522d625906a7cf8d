//! Renders values the way Go's `fmt` does, because the apiserver's messages are built with it.

use serde_json::Value;

/// Go's `%q` for a string.
pub(crate) fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%v` for a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits, in
/// exponent form when the exponent is below -4 or at least 6 (Go prints `1e+06`).
pub(crate) fn float(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits, e.g. "1.5e6" or "-2.5e-7".
    let scientific = format!("{value:e}");
    let Some((mantissa, exponent)) = scientific.split_once('e') else {
        return scientific;
    };
    let Ok(exponent) = exponent.parse::<i32>() else {
        return scientific;
    };
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    format!("{value}")
}

/// Go's `%v` for a JSON number decoded the way the apiserver decodes it: integers as int64,
/// everything else as float64.
pub(crate) fn number(number: &serde_json::Number) -> String {
    if let Some(int) = number.as_i64() {
        return int.to_string();
    }
    if let Some(uint) = number.as_u64() {
        return uint.to_string();
    }
    float(number.as_f64().unwrap_or(f64::NAN))
}

/// Go's `%v` for a decoded JSON value (`map[a:1 b:x]`, `[a b]`).
pub(crate) fn plain(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(plain).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", plain(&map[k])))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Go's `%#v` for a decoded JSON value, used for non-scalar bad values in field errors.
pub(crate) fn sharp(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => quote(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(sharp).collect();
            format!("[]interface {{}}{{{}}}", parts.join(", "))
        }
        Value::Object(map) => {
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", quote(k), sharp(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_print_like_go() {
        // Expected strings are what Go's fmt.Sprintf("%v", float64(x)) prints.
        for (input, expected) in [
            (1.0, "1"),
            (1.5, "1.5"),
            (100000.0, "100000"),
            (1000000.0, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
        ] {
            assert_eq!(float(input), expected, "{input}");
        }
    }

    #[test]
    fn values_print_like_go() {
        assert_eq!(quote("a\"b\n"), "\"a\\\"b\\n\"");
        assert_eq!(
            plain(&json!({"b": ["a", 1], "a": null})),
            "map[a:<nil> b:[a 1]]"
        );
        assert_eq!(
            sharp(&json!({"name": "a", "port": 80})),
            "map[string]interface {}{\"name\":\"a\", \"port\":80}"
        );
        assert_eq!(sharp(&json!(["a"])), "[]interface {}{\"a\"}");
    }
}
