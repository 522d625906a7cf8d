//! Turning an answer into a result: decoding a success, refusing a success that says it
//! failed, and mapping every other status (and transport failures) to its [`Error`], with
//! the API key scrubbed from any text the server sent.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::CloudClient;
use crate::error::{Error, excerpt};
use crate::model::{ApiResponse, ErrorBody};
use crate::routes::Operation;

/// Largest response body the client reads for one resource or action; a longer one is a
/// [`Error::Decode`].
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Largest response body of a list. The cloud's lists are not paged: an account's instance
/// list takes about 550 bytes per machine, so 16 MiB ended at about 30,000 machines, past
/// which the account could no longer be observed at all. 256 MiB is about 480,000.
pub const MAX_LIST_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// The body bound of `operation`'s answers.
pub fn max_response_bytes(operation: Operation) -> usize {
    if operation.name().starts_with("List") {
        MAX_LIST_RESPONSE_BYTES
    } else {
        MAX_RESPONSE_BYTES
    }
}

impl CloudClient {
    /// The result of a complete answer: the decoded response for a success status, the
    /// matching error otherwise.
    pub(super) fn decode<T: DeserializeOwned>(
        &self,
        operation: Operation,
        status: u16,
        retry_after: Option<Duration>,
        bytes: &[u8],
    ) -> Result<(u16, ApiResponse<T>), Error> {
        if !(200..300).contains(&status) {
            return Err(self.status_error(operation, status, retry_after, bytes));
        }
        // An empty success answer (e.g. 204) carries nothing beyond "it worked".
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            br#"{"success": true}"#
        } else {
            bytes
        };
        let response = ApiResponse::<T>::from_json(bytes).map_err(|err| Error::Decode {
            operation,
            status,
            reason: self.scrub(&err.to_string()),
            excerpt: self.scrub(&excerpt(bytes)),
        })?;
        // A success status whose body says `"success": false` did not succeed; a body
        // without the flag is taken at its status.
        if !response.success
            && serde_json::from_slice::<SuccessFlag>(bytes)
                .is_ok_and(|flag| flag.success == Some(false))
        {
            let body = serde_json::from_slice::<ErrorBody>(bytes).unwrap_or_default();
            return Err(Error::UnexpectedStatus {
                operation,
                status,
                code: self.scrub(&body.code),
                message: format!("success is false: {}", self.scrub(&body.message)),
            });
        }
        Ok((status, response))
    }

    pub(super) fn transport_error(&self, operation: Operation, err: reqwest::Error) -> Error {
        if err.is_timeout() && !err.is_connect() {
            Error::Timeout {
                operation,
                after: self.inner.timeout,
            }
        } else {
            Error::Transport {
                operation,
                connected: !err.is_connect(),
                endpoint: err.url().map_or_else(
                    || "the cloud".into(),
                    |url| url.origin().ascii_serialization(),
                ),
                cause: innermost_cause(&err),
                source: err.without_url(),
            }
        }
    }

    /// Maps a non-success answer to its error, keeping the server's message and code.
    fn status_error(
        &self,
        operation: Operation,
        status: u16,
        retry_after: Option<Duration>,
        bytes: &[u8],
    ) -> Error {
        let parsed = serde_json::from_slice::<ErrorBody>(bytes).ok();
        let code = self.scrub(parsed.as_ref().map_or("", |body| body.code.as_str()));
        let message = match parsed {
            Some(body) if !body.message.is_empty() => self.scrub(&body.message),
            _ if !bytes.is_empty() => self.scrub(&excerpt(bytes)),
            _ => reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|status| status.canonical_reason())
                .unwrap_or("no message")
                .to_owned(),
        };
        match status {
            401 => Error::Unauthorized {
                operation,
                code,
                message,
            },
            402 => Error::InsufficientCredit { operation, message },
            403 => Error::Forbidden {
                operation,
                code,
                message,
            },
            404 => Error::NotFound {
                operation,
                code,
                message,
            },
            409 => Error::Conflict {
                operation,
                code,
                message,
            },
            429 => Error::RateLimited {
                operation,
                retry_after,
                message,
            },
            400 | 413 | 422 => Error::BadRequest {
                operation,
                status,
                code,
                message,
            },
            500..=599 => Error::Server {
                operation,
                status,
                message,
            },
            _ => Error::UnexpectedStatus {
                operation,
                status,
                code,
                message,
            },
        }
    }

    /// Server-supplied text with every occurrence of the API key masked, so an answer that
    /// echoes the key cannot leak it into errors or logs.
    fn scrub(&self, text: &str) -> String {
        let key = self.inner.api_key.expose_secret();
        if key.is_empty() {
            text.to_owned()
        } else {
            text.replace(key, "***")
        }
    }
}

/// Just the envelope's `success` flag, telling an explicit `false` from a missing flag.
#[derive(serde::Deserialize)]
struct SuccessFlag {
    #[serde(default)]
    success: Option<bool>,
}

/// A body longer than the client reads.
pub(super) fn oversized(operation: Operation, status: u16, bytes: &[u8]) -> Error {
    Error::Decode {
        operation,
        status,
        reason: format!(
            "response body exceeds {} bytes",
            max_response_bytes(operation)
        ),
        excerpt: excerpt(bytes),
    }
}

/// The last error of `err`'s source chain (e.g. "Connection refused (os error 111)", "failed
/// to lookup address information: ..."): reqwest's own text says only "error sending request".
fn innermost_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = err;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    innermost.to_string()
}
