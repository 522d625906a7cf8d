//! What the simulator sends back: a successful [`Reply`] merged into the response envelope,
//! and the JSON error body of an [`ApiError`].

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gpucloud_cloud::model::{self, ApiResponse, Tier};
use gpucloud_cloud::routes::Operation;
use serde::Serialize;

use crate::error::ApiError;

/// A successful answer before the envelope is added.
pub struct Reply {
    pub message: String,
    /// The operation's own fields, encoded once: a JSON object, merged into the envelope's.
    body: Vec<u8>,
    pub tier: Option<Tier>,
    pub timestamp: Option<String>,
    pub code: Option<&'static str>,
}

/// The envelope's own fields, for `Reply::into_response` to merge the body into.
#[derive(Serialize)]
struct NoBody {}

impl Reply {
    pub fn new(message: impl Into<String>, body: impl Serialize) -> Result<Reply, ApiError> {
        let body = serde_json::to_vec(&body).map_err(|err| ApiError::Internal {
            message: format!("response encoding failed: {err}"),
        })?;
        if body.first() != Some(&b'{') {
            return Err(ApiError::Internal {
                message: "response encoding failed: the body is not a JSON object".into(),
            });
        }
        Ok(Reply {
            message: message.into(),
            body,
            tier: None,
            timestamp: None,
            code: None,
        })
    }

    pub fn tier(mut self, tier: Tier) -> Self {
        self.tier = Some(tier);
        self
    }

    pub fn timestamp(mut self, timestamp: String) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The id of the resource a create made, read from its answer.
    pub(crate) fn created_id(&self, operation: Operation) -> Option<String> {
        let pointer = match operation {
            Operation::CreateInstance => "/instance/instance_id",
            Operation::RestoreSnapshot => "/data/instance_id",
            Operation::CreateVolume | Operation::CloneVolume => "/volume/id",
            Operation::CreateSnapshot => "/snapshot/snapshot_id",
            Operation::CreateImage => "/image/id",
            Operation::CreateFirewall => "/firewall/id",
            Operation::CreateSshKey => "/id",
            Operation::CreateStartupScript => "/script/id",
            _ => return None,
        };
        let body = serde_json::from_slice::<serde_json::Value>(&self.body).ok()?;
        body.pointer(pointer)?.as_str().map(str::to_string)
    }

    /// Keeps the items of the body's array `array` whose `id_field` `omit` refuses; returns
    /// how many were left out.
    pub(crate) fn retain_listed(
        &mut self,
        array: &str,
        id_field: &str,
        mut omit: impl FnMut(&str) -> bool,
    ) -> u64 {
        let Ok(mut body) = serde_json::from_slice::<serde_json::Value>(&self.body) else {
            return 0;
        };
        let Some(items) = body.get_mut(array).and_then(|a| a.as_array_mut()) else {
            return 0;
        };
        let before = items.len();
        items.retain(|item| {
            !item
                .get(id_field)
                .and_then(|id| id.as_str())
                .is_some_and(&mut omit)
        });
        let omitted = (before - items.len()) as u64;
        if omitted > 0
            && let Ok(bytes) = serde_json::to_vec(&body)
        {
            self.body = bytes;
        }
        omitted
    }

    pub(crate) fn into_response(self, request_id: String) -> Response {
        let mut envelope = ApiResponse::ok(self.message, request_id, NoBody {});
        envelope.tier = self.tier;
        envelope.timestamp = self.timestamp;
        envelope.code = self.code.map(str::to_string);
        let Ok(mut bytes) = serde_json::to_vec(&envelope) else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        // `{envelope}` and `{body}` become one object, the envelope's fields first, as
        // `ApiResponse`'s flattened body serializes.
        if self.body.len() > 2 && bytes.pop() == Some(b'}') {
            bytes.reserve(self.body.len());
            bytes.push(b',');
            bytes.extend_from_slice(&self.body[1..]);
        }
        json_bytes_response(StatusCode::OK, bytes)
    }
}

pub(crate) fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => json_bytes_response(status, bytes),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn json_bytes_response(status: StatusCode, bytes: Vec<u8>) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

pub fn error_response(error: &ApiError, request_id: String) -> Response {
    let body = model::ErrorBody {
        success: false,
        message: error.to_string(),
        code: error.code().to_string(),
        request_id,
    };
    let mut response = json_response(error.status(), &body);
    if let ApiError::RateLimited { retry_after_secs } = error
        && let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn reply_json(reply: Reply) -> serde_json::Value {
        let response = reply.into_response("req_0".into());
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_reply_is_the_envelope_and_the_body_in_one_object() {
        let body = serde_json::json!({"instances": [{"id": "vm-1"}], "total_count": 1});
        let reply = Reply::new("instances listed", &body)
            .unwrap()
            .tier(Tier::Advanced);
        let mut expected =
            serde_json::to_value(ApiResponse::ok("instances listed", "req_0", body.clone()))
                .unwrap();
        expected["tier"] = serde_json::to_value(Tier::Advanced).unwrap();
        assert_eq!(reply_json(reply).await, expected);

        let empty = Reply::new("done", serde_json::json!({})).unwrap();
        assert_eq!(
            reply_json(empty).await,
            serde_json::json!({"success": true, "message": "done", "request_id": "req_0"})
        );
        assert!(Reply::new("bad", [1, 2]).is_err());
    }
}
