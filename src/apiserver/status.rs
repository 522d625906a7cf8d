//! The `Status` error type: every failure the server returns is a `meta.k8s.io/v1` `Status`
//! object with the `reason`, `code` and `details` a real kube-apiserver would send.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One entry of `details.causes` in a `Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusCause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// A failed request as the API reports it: HTTP code, `reason`, message and details.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// Boxed so `Result<_, ApiError>` stays small on every handler path.
    pub details: Option<Box<StatusDetails>>,
}

/// The `details` of a `Status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusDetails {
    pub name: Option<String>,
    pub group: Option<String>,
    /// The resource plural for most errors (as the real server fills it), the kind for 422.
    pub kind: Option<String>,
    pub causes: Vec<StatusCause>,
    pub retry_after_seconds: Option<u32>,
}

// === impl ApiError ===

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn details_mut(&mut self) -> &mut StatusDetails {
        self.details.get_or_insert_with(Box::default)
    }

    fn with_details(mut self, group: &str, resource: &str, name: &str) -> Self {
        let details = self.details_mut();
        details.group = Some(group.to_string());
        details.kind = Some(resource.to_string());
        if !name.is_empty() {
            details.name = Some(name.to_string());
        }
        self
    }

    /// Sets `details.retryAfterSeconds`.
    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        self.details_mut().retry_after_seconds = Some(seconds);
        self
    }

    /// `configmaps "a" not found` / `gpuinstances.gpucloud.io "a" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// Optimistic-concurrency failure, worded as the real registry store does.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// A 409 with a caller-provided message (server-side apply conflicts).
    pub fn conflict_message(group: &str, resource: &str, name: &str, message: String) -> Self {
        ApiError::new(409, "Conflict", message).with_details(group, resource, name)
    }

    /// 422 `Invalid` with one cause per field; `kind` here is the object kind (`ConfigMap`).
    pub fn invalid(
        group: &str,
        kind: &str,
        name: &str,
        message: String,
        causes: Vec<StatusCause>,
    ) -> Self {
        let mut error = ApiError::new(422, "Invalid", message);
        let details = error.details_mut();
        details.group = Some(group.to_string());
        details.kind = Some(kind.to_string());
        details.name = Some(name.to_string());
        details.causes = causes;
        error
    }

    /// 422 for a single field, formatted as the apiserver does:
    /// `ConfigMap "a" is invalid: metadata.name: Required value: name or generateName is required`.
    pub fn invalid_field(
        group: &str,
        kind: &str,
        name: &str,
        field: &str,
        cause_reason: &str,
        detail: &str,
    ) -> Self {
        let subject = if group.is_empty() {
            format!("{kind} \"{name}\"")
        } else {
            format!("{kind}.{group} \"{name}\"")
        };
        let cause_message = detail.to_string();
        ApiError::invalid(
            group,
            kind,
            name,
            format!("{subject} is invalid: {field}: {detail}"),
            vec![StatusCause {
                reason: cause_reason.to_string(),
                message: cause_message,
                field: field.to_string(),
            }],
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// `apierrors.NewForbidden`: the name is left out of the message when empty.
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let resource_text = qualified(group, resource);
        let message = if name.is_empty() {
            format!("{resource_text} is forbidden: {why}")
        } else {
            format!("{resource_text} \"{name}\" is forbidden: {why}")
        };
        ApiError::new(403, "Forbidden", message).with_details(group, resource, name)
    }

    /// A ValidatingAdmissionPolicy's denial: `admission.NewForbidden`'s message and details,
    /// with the validation's reason and code and the policy's message (`cause`) as the one cause.
    pub fn admission_denied(
        group: &str,
        resource: &str,
        name: &str,
        cause: String,
        code: u16,
        reason: &'static str,
    ) -> Self {
        let mut error = ApiError::forbidden(group, resource, name, &cause);
        error.code = code;
        error.reason = reason;
        error.details_mut().causes.push(StatusCause {
            reason: String::new(),
            message: cause,
            field: String::new(),
        });
        error
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    /// 410 `Expired`, for a list or watch from a resourceVersion older than the retained window.
    pub fn gone(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    pub fn unauthorized() -> Self {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 415 listing the media types the resource really accepts (`accepted`), as the real
    /// server's `NewUnsupportedMediaTypeError`.
    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {} (got {content_type:?})",
                accepted.join(", ")
            ),
        )
    }

    pub fn not_acceptable(accept: &str) -> Self {
        ApiError::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml (got {accept:?})"
            ),
        )
    }

    pub fn too_large(limit: usize) -> Self {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(500, "InternalError", message)
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        ApiError::new(504, "Timeout", message)
    }

    /// The `Status` object body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        let mut details = serde_json::Map::new();
        if let Some(status_details) = &self.details {
            if let Some(name) = &status_details.name {
                details.insert("name".into(), json!(name));
            }
            if let Some(group) = &status_details.group {
                details.insert("group".into(), json!(group));
            }
            if let Some(kind) = &status_details.kind {
                details.insert("kind".into(), json!(kind));
            }
            if !status_details.causes.is_empty() {
                let causes: Vec<Value> = status_details
                    .causes
                    .iter()
                    .map(|cause| {
                        // Each field is `omitempty` in metav1.StatusCause.
                        let mut entry = serde_json::Map::new();
                        for (key, value) in [
                            ("reason", &cause.reason),
                            ("message", &cause.message),
                            ("field", &cause.field),
                        ] {
                            if !value.is_empty() {
                                entry.insert(key.into(), json!(value));
                            }
                        }
                        Value::Object(entry)
                    })
                    .collect();
                details.insert("causes".into(), Value::Array(causes));
            }
            if let Some(seconds) = status_details.retry_after_seconds {
                details.insert("retryAfterSeconds".into(), json!(seconds));
            }
        }
        // Details given stay, even empty: `NewForbidden` for a non-resource path sends `{}`.
        if self.details.is_some() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

/// `configmaps` for the core group, `gpuinstances.gpucloud.io` otherwise.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        let mut response = (code, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // As the real server's response writer: details.retryAfterSeconds becomes Retry-After.
        if let Some(seconds) = self
            .details
            .as_ref()
            .and_then(|details| details.retry_after_seconds)
        {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_the_real_wording() {
        // A real kube-apiserver answers `kubectl get cm nope` with this Status (k8s.io/apimachinery
        // pkg/api/errors NewNotFound).
        let status = ApiError::not_found("", "configmaps", "nope").to_status();
        assert_eq!(status["message"], "configmaps \"nope\" not found");
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["code"], 404);
        assert_eq!(status["details"]["kind"], "configmaps");
        assert_eq!(status["details"]["name"], "nope");
        let status = ApiError::not_found("gpucloud.io", "gpuinstances", "a").to_status();
        assert_eq!(
            status["message"],
            "gpuinstances.gpucloud.io \"a\" not found"
        );
        assert_eq!(status["details"]["group"], "gpucloud.io");
    }

    #[test]
    fn invalid_carries_causes() {
        let status = ApiError::invalid_field(
            "",
            "ConfigMap",
            "",
            "metadata.name",
            "FieldValueRequired",
            "Required value: name or generateName is required",
        )
        .to_status();
        assert_eq!(status["code"], 422);
        assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");
        assert_eq!(
            status["message"],
            "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required"
        );
    }
}
