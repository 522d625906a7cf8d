//! Field errors as `k8s.io/apimachinery/pkg/util/validation/field` builds and prints them.

use serde_json::Value;

use crate::gofmt;

/// The kind of a field error; each maps to one `metav1.CauseType` reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    Invalid,
    Required,
    NotSupported,
    TooLong,
    TooMany,
    Forbidden,
    Duplicate,
    TypeInvalid,
}

impl FieldErrorKind {
    /// The machine-readable reason (`FieldValueInvalid`, ...).
    pub fn reason(self) -> &'static str {
        match self {
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::TooMany => "FieldValueTooMany",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The human-readable prefix (`ErrorType.String()` in Go).
    fn label(self) -> &'static str {
        match self {
            FieldErrorKind::Invalid | FieldErrorKind::TypeInvalid => "Invalid value",
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::TooMany => "Too many",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::Duplicate => "Duplicate value",
        }
    }
}

/// One field-level validation error.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The field path, e.g. `spec.size` or `spec.rules[2].cidr`.
    pub field: String,
    pub kind: FieldErrorKind,
    /// The offending value; `None` when the apiserver omits it from the message.
    pub bad_value: Option<Value>,
    /// The detail, in the real apiserver's wording.
    pub detail: String,
    /// The bad value is a Go `[]string` (printed `[]string{"a"}`), not decoded JSON.
    string_list: bool,
}

impl FieldError {
    pub fn new(
        field: impl Into<String>,
        kind: FieldErrorKind,
        bad_value: Option<Value>,
        detail: impl Into<String>,
    ) -> FieldError {
        let field = field.into();
        FieldError {
            // The apiserver prints the root (a nil field path) as "<nil>".
            field: if field.is_empty() {
                "<nil>".to_string()
            } else {
                field
            },
            kind,
            bad_value,
            detail: detail.into(),
            string_list: false,
        }
    }

    /// `field.Invalid(path, value, detail)` of a Go `[]string` value.
    pub fn invalid_strings(
        field: impl Into<String>,
        values: &[String],
        detail: impl Into<String>,
    ) -> Self {
        let list = values
            .iter()
            .map(|value| Value::String(value.clone()))
            .collect();
        FieldError {
            string_list: true,
            ..FieldError::new(
                field,
                FieldErrorKind::Invalid,
                Some(Value::Array(list)),
                detail,
            )
        }
    }

    /// `field.Invalid(path, value, detail)`.
    pub fn invalid(field: impl Into<String>, value: Value, detail: impl Into<String>) -> Self {
        FieldError::new(field, FieldErrorKind::Invalid, Some(value), detail)
    }

    /// `field.Required(path, detail)`.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError::new(field, FieldErrorKind::Required, None, detail)
    }

    /// `field.Forbidden(path, detail)`.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError::new(field, FieldErrorKind::Forbidden, None, detail)
    }

    /// `field.NotSupported(path, value, validValues)`.
    pub fn not_supported(field: impl Into<String>, value: Value, valid: &[String]) -> Self {
        let detail = if valid.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = valid.iter().map(|v| gofmt::quote(v)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        FieldError::new(field, FieldErrorKind::NotSupported, Some(value), detail)
    }

    /// `field.TooLong(path, value, maxLength)` as of Kubernetes 1.33.
    pub fn too_long(field: impl Into<String>, value: Value, max_length: i64) -> Self {
        let detail = if max_length >= 0 {
            let unit = if max_length == 1 { "byte" } else { "bytes" };
            format!("may not be more than {max_length} {unit}")
        } else {
            "value is too long".to_string()
        };
        FieldError::new(field, FieldErrorKind::TooLong, Some(value), detail)
    }

    /// `field.TooMany(path, actual, max)` as of Kubernetes 1.33.
    pub fn too_many(field: impl Into<String>, actual: i64, max: i64) -> Self {
        let detail = if max >= 0 {
            let unit = if max == 1 { "item" } else { "items" };
            format!("must have at most {max} {unit}")
        } else {
            "has too many items".to_string()
        };
        let value = (actual >= 0).then(|| Value::from(actual));
        FieldError::new(field, FieldErrorKind::TooMany, value, detail)
    }

    /// `field.Duplicate(path, value)`.
    pub fn duplicate(field: impl Into<String>, value: Value) -> Self {
        FieldError::new(field, FieldErrorKind::Duplicate, Some(value), "")
    }

    /// `field.TypeInvalid(path, value, detail)`.
    pub fn type_invalid(field: impl Into<String>, value: Value, detail: impl Into<String>) -> Self {
        FieldError::new(field, FieldErrorKind::TypeInvalid, Some(value), detail)
    }

    /// The reason string of this error's kind.
    pub fn reason(&self) -> &'static str {
        self.kind.reason()
    }

    /// The message without the field (`ErrorBody()` in Go).
    pub fn body(&self) -> String {
        let label = self.kind.label();
        let mut body = match (&self.kind, &self.bad_value) {
            (FieldErrorKind::Required | FieldErrorKind::Forbidden | FieldErrorKind::TooLong, _)
            | (_, None) => label.to_string(),
            (_, Some(Value::Array(items))) if self.string_list => {
                let quoted: Vec<String> = items.iter().map(render_bad_value).collect();
                format!("{label}: []string{{{}}}", quoted.join(", "))
            }
            (_, Some(value)) => format!("{label}: {}", render_bad_value(value)),
        };
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }

    /// As the apiserver writes one cause in a 422 message, e.g.
    /// `spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1`.
    pub fn to_message(&self) -> String {
        format!("{}: {}", self.field, self.body())
    }

    /// This error with `prefix` put in front of its field path (`prefix.field`).
    pub fn with_prefix(mut self, prefix: &str) -> FieldError {
        if prefix.is_empty() {
            return self;
        }
        self.field = if self.field.is_empty() || self.field == "<nil>" {
            prefix.to_string()
        } else if self.field.starts_with('[') {
            format!("{prefix}{}", self.field)
        } else {
            format!("{prefix}.{}", self.field)
        };
        self
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_message())
    }
}

fn render_bad_value(value: &Value) -> String {
    match value {
        // A Go nil bad value prints as the quoted string "null".
        Value::Null => gofmt::quote("null"),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => gofmt::number(n),
        Value::String(s) => gofmt::quote(s),
        other => gofmt::sharp(other),
    }
}

/// The 422 message for a list of errors on an object, as `apierrors.NewInvalid` writes it:
/// `GpuInstance.gpucloud.io "a" is invalid: [spec.x: ..., spec.y: ...]` (no brackets for one).
/// Identical messages are reported once, as `ToAggregate` does.
pub fn invalid_message(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> String {
    let qualified_kind = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let mut messages: Vec<String> = Vec::new();
    for error in errors {
        let message = error.to_message();
        if !messages.contains(&message) {
            messages.push(message);
        }
    }
    let aggregate = match messages.len() {
        0 => "<nil>".to_string(),
        1 => messages.remove(0),
        _ => format!("[{}]", messages.join(", ")),
    };
    format!(
        "{qualified_kind} {} is invalid: {aggregate}",
        gofmt::quote(name)
    )
}

/// What kubectl prints for a 422 of these errors (`cmdutil.StandardErrorMessage` reading the
/// Status' details): `The GpuInstance "a" is invalid: spec.x: ...`, the causes aggregated as
/// [`invalid_message`] does.
pub fn kubectl_invalid_message(kind: &str, name: &str, errors: &[FieldError]) -> String {
    let message = invalid_message(kind, "", name, errors);
    format!("The {message}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Expected strings follow k8s.io/apimachinery/pkg/util/validation/field/errors.go
    // (ErrorBody, NotSupported, TooLong, TooMany) and apierrors.NewInvalid.
    #[test]
    fn messages_match_the_field_package() {
        let cases = [
            (
                FieldError::invalid(
                    "spec.size",
                    json!(0),
                    "spec.size in body should be greater than or equal to 1",
                ),
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
            ),
            (
                FieldError::required("spec.region", ""),
                "spec.region: Required value",
            ),
            (
                FieldError::not_supported("spec.tier", json!("gold"), &["a".into(), "b".into()]),
                "spec.tier: Unsupported value: \"gold\": supported values: \"a\", \"b\"",
            ),
            (
                FieldError::too_long("spec.name", json!("abcdef"), 5),
                "spec.name: Too long: may not be more than 5 bytes",
            ),
            (
                FieldError::too_many("spec.items", 4, 3),
                "spec.items: Too many: 4: must have at most 3 items",
            ),
            (
                FieldError::too_many("spec.items", -1, 1),
                "spec.items: Too many: must have at most 1 item",
            ),
            (
                FieldError::forbidden("spec.x", "nope"),
                "spec.x: Forbidden: nope",
            ),
            (
                FieldError::duplicate("spec.tags[1]", json!("a")),
                "spec.tags[1]: Duplicate value: \"a\"",
            ),
            (
                FieldError::type_invalid(
                    "spec.x",
                    json!("null"),
                    "spec.x in body must be of type string: \"null\"",
                ),
                "spec.x: Invalid value: \"null\": spec.x in body must be of type string: \"null\"",
            ),
            (
                FieldError::invalid(
                    "<nil>",
                    Value::Null,
                    "some validation rules were not checked",
                ),
                "<nil>: Invalid value: \"null\": some validation rules were not checked",
            ),
            (
                FieldError::invalid("spec.f", json!(1.5), "x"),
                "spec.f: Invalid value: 1.5: x",
            ),
            (
                FieldError::invalid("spec.b", json!(true), "x"),
                "spec.b: Invalid value: true: x",
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(error.to_message(), expected);
        }
        assert_eq!(FieldError::required("a", "").reason(), "FieldValueRequired");
    }

    #[test]
    fn invalid_message_aggregates_like_apierrors() {
        let one = [FieldError::required("spec.region", "")];
        assert_eq!(
            invalid_message("GpuInstance", "gpucloud.io", "a", &one),
            "GpuInstance.gpucloud.io \"a\" is invalid: spec.region: Required value"
        );
        let two = [
            FieldError::required("spec.region", ""),
            FieldError::required("spec.region", ""),
            FieldError::forbidden("spec.x", "no"),
        ];
        assert_eq!(
            invalid_message("ConfigMap", "", "c", &two),
            "ConfigMap \"c\" is invalid: [spec.region: Required value, spec.x: Forbidden: no]"
        );
        assert_eq!(
            kubectl_invalid_message("GpuInstance", "a", &one),
            "The GpuInstance \"a\" is invalid: spec.region: Required value"
        );
    }
}
