//! YAML as this server writes it (`Accept: application/yaml` responses, kubeconfigs, the
//! OpenAPI v2 document's extension values): serde-saphyr, kube's YAML crate, with a long
//! string kept on one line as Go's YAML writer keeps it, rather than folded (`>`).

/// `value` as one YAML document.
pub fn to_string<T: serde::Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    let options = serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX };
    serde_saphyr::to_string_with_options(value, options)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    #[test]
    fn long_and_multi_line_strings_read_back_unchanged() {
        let value = json!({
            "long": "x ".repeat(100),
            "lines": "first\nsecond\n",
            "quoted": "it's: a 'value' # not a comment",
            "number_like": "0123",
            "boolean_like": "yes",
        });
        let yaml = super::to_string(&value).unwrap();
        assert!(!yaml.contains(">"), "{yaml}");
        let back: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, value, "{yaml}");
    }
}
