//! Reading a request: the JSON body and the query parameters, with errors that name the
//! offending field.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Decodes a JSON request body; errors name the offending field.
pub fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::validation("body: a JSON object is required"));
    }
    let deserializer = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let detail = match inner.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                format!("malformed JSON: {inner}")
            }
            _ => inner.to_string(),
        };
        if path == "." || path.is_empty() {
            ApiError::validation(format!("body: {detail}"))
        } else {
            ApiError::validation(format!("{path}: {detail}"))
        }
    })
}

/// The request body as received, or the error for one too large or unreadable.
pub(crate) fn body_bytes(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit }
        } else {
            ApiError::validation(format!("body: {}", rejection.body_text()))
        }
    })
}

/// Query parameters of one request, checked against the ones the operation accepts.
pub struct QueryParams {
    values: BTreeMap<String, String>,
}

impl QueryParams {
    pub fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<QueryParams, ApiError> {
        let pairs: Vec<(String, String)> = match raw {
            None | Some("") => Vec::new(),
            Some(raw) => serde_urlencoded::from_str(raw)
                .map_err(|_| ApiError::validation("query: malformed query string"))?,
        };
        let mut values = BTreeMap::new();
        for (name, value) in pairs {
            if !allowed.contains(&name.as_str()) {
                return Err(ApiError::validation(if allowed.is_empty() {
                    format!("{name}: this operation takes no query parameters")
                } else {
                    format!(
                        "{name}: unknown query parameter (accepted: {})",
                        allowed.join(", ")
                    )
                }));
            }
            if values.insert(name.clone(), value).is_some() {
                return Err(ApiError::validation(format!(
                    "{name}: given more than once"
                )));
            }
        }
        Ok(QueryParams { values })
    }

    pub fn text(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        self.text(name)
            .map(|value| match value.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(ApiError::validation(format!(
                    "{name}: {value:?} is not true or false"
                ))),
            })
            .transpose()
    }

    pub fn unsigned(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.text(name)
            .map(|value| {
                value.parse::<u64>().map_err(|_| {
                    ApiError::validation(format!(
                        "{name}: {value:?} is not a non-negative whole number"
                    ))
                })
            })
            .transpose()
    }

    pub fn number(&self, name: &str) -> Result<Option<f64>, ApiError> {
        self.text(name)
            .map(|value| match value.parse::<f64>() {
                Ok(number) if number.is_finite() && number >= 0.0 => Ok(number),
                _ => Err(ApiError::validation(format!(
                    "{name}: {value:?} is not a non-negative number"
                ))),
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use gpucloud_cloud::model;

    use super::*;

    #[test]
    fn query_params_are_checked_and_typed() {
        let query =
            QueryParams::parse(Some("bootable=true&size=10"), &["bootable", "size"]).unwrap();
        assert_eq!(query.bool("bootable").unwrap(), Some(true));
        assert_eq!(query.unsigned("size").unwrap(), Some(10));
        let unknown = QueryParams::parse(Some("colour=red"), &["bootable"])
            .err()
            .unwrap();
        assert!(unknown.to_string().starts_with("colour:"));
        let twice = QueryParams::parse(Some("a=1&a=2"), &["a"]).err().unwrap();
        assert!(twice.to_string().starts_with("a:"));
        let bad = QueryParams::parse(Some("bootable=yes"), &["bootable"]).unwrap();
        assert!(
            bad.bool("bootable")
                .unwrap_err()
                .to_string()
                .starts_with("bootable:")
        );
    }

    #[test]
    fn body_errors_name_the_field() {
        let err =
            parse_body::<model::RestoreSnapshotRequest>(&Bytes::from_static(b"{}")).unwrap_err();
        assert!(err.to_string().contains("new_vm_name"), "{err}");
        let err =
            parse_body::<model::ResizeVolumeRequest>(&Bytes::from_static(b"{\"size\":\"big\"}"))
                .unwrap_err();
        assert!(err.to_string().starts_with("size:"), "{err}");
        let err = parse_body::<model::ResizeVolumeRequest>(&Bytes::from_static(b"{\"size\":"))
            .unwrap_err();
        assert!(err.to_string().contains("malformed JSON"), "{err}");
        let err = parse_body::<model::ResizeVolumeRequest>(&Bytes::new()).unwrap_err();
        assert!(err.to_string().starts_with("body:"), "{err}");
    }
}
