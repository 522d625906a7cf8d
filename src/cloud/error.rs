//! Errors of the cloud client, one variant per kind of failure the caller handles differently.

use std::time::Duration;

use crate::routes::Operation;

/// Longest excerpt of an undecodable body kept in [`Error::Decode`].
pub(crate) const EXCERPT_LIMIT: usize = 256;

/// A failed call. Every variant names the operation; variants for an HTTP answer carry the
/// server's `message` (and `code` where the caller branches on it). The API key never appears
/// in any variant: server-supplied text is scrubbed of it before it is stored.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 401: the API key is missing or wrong.
    #[error("{operation}: unauthorized (401 {code}): {message}")]
    Unauthorized {
        operation: Operation,
        code: String,
        message: String,
    },
    /// 403: e.g. a legacy-only operation on another tier (`TIER_NOT_SUPPORTED`).
    #[error("{operation}: forbidden (403 {code}): {message}")]
    Forbidden {
        operation: Operation,
        code: String,
        message: String,
    },
    /// 404: `NOT_FOUND` for a missing resource, `ROUTE_NOT_FOUND` for a path the service
    /// does not know.
    #[error("{operation}: not found (404 {code}): {message}")]
    NotFound {
        operation: Operation,
        code: String,
        message: String,
    },
    /// 409: `INVALID_STATE`, `DUPLICATE_NAME`, `INSUFFICIENT_STOCK` or `CONFLICT`.
    #[error("{operation}: conflict (409 {code}): {message}")]
    Conflict {
        operation: Operation,
        code: String,
        message: String,
    },
    /// 402: the account's credit does not cover the call.
    #[error("{operation}: insufficient credit (402): {message}")]
    InsufficientCredit {
        operation: Operation,
        message: String,
    },
    /// 429: too many requests; `retry_after` is the server's `Retry-After`, if it sent one.
    #[error("{operation}: rate limited (429, retry after {retry_after:?}): {message}")]
    RateLimited {
        operation: Operation,
        retry_after: Option<Duration>,
        message: String,
    },
    /// 400, 413 or 422: the request itself is wrong; the message names the problem.
    #[error("{operation}: bad request ({status} {code}): {message}")]
    BadRequest {
        operation: Operation,
        status: u16,
        code: String,
        message: String,
    },
    /// 5xx.
    #[error("{operation}: server error ({status}): {message}")]
    Server {
        operation: Operation,
        status: u16,
        message: String,
    },
    /// Any other non-success status (e.g. 405).
    #[error("{operation}: unexpected status {status} ({code}): {message}")]
    UnexpectedStatus {
        operation: Operation,
        status: u16,
        code: String,
        message: String,
    },
    /// No complete answer within the configured timeout. The server may have acted.
    #[error("{operation}: timed out after {after:?}")]
    Timeout {
        operation: Operation,
        after: Duration,
    },
    /// The request failed below HTTP. `connected` is false when the connection was never
    /// established, which proves the server did not act. `endpoint` is the base URL's origin
    /// (scheme, host, port: never a user or password) and `cause` the innermost error, what a
    /// person needs to fix a wrong URL, DNS name or firewall.
    #[error(
        "{operation}: {} {endpoint}: {cause}",
        if *connected { "the connection failed to" } else { "cannot connect to" }
    )]
    Transport {
        operation: Operation,
        connected: bool,
        endpoint: String,
        cause: String,
        #[source]
        source: reqwest::Error,
    },
    /// A success answer whose body does not decode (or is too large).
    #[error(
        "{operation}: undecodable response (status {status}): {reason}; body starts: {excerpt:?}"
    )]
    Decode {
        operation: Operation,
        status: u16,
        reason: String,
        /// At most [`EXCERPT_LIMIT`] bytes of the body.
        excerpt: String,
    },
    /// The call could not be built: wrong number of path arguments, an unencodable body.
    #[error("{operation}: invalid request: {reason}")]
    InvalidRequest {
        operation: Operation,
        reason: String,
    },
    /// The client configuration is unusable (base URL, API key characters, TLS setup).
    #[error("invalid client configuration: {reason}")]
    InvalidConfig { reason: String },
}

/// How a caller should treat a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// May succeed if repeated later unchanged: 429, 5xx, timeouts, transport failures.
    Transient,
    /// Will fail again until someone changes the request, the account or the configuration:
    /// 400/413/422, 401, 402, 403, invalid request or configuration.
    Terminal,
    /// The answer is about the resource's state and the caller decides: 404, 409, other
    /// statuses, undecodable answers.
    Semantic,
}

impl Error {
    /// The operation that failed, if the error belongs to one.
    pub fn operation(&self) -> Option<Operation> {
        match self {
            Error::Unauthorized { operation, .. }
            | Error::Forbidden { operation, .. }
            | Error::NotFound { operation, .. }
            | Error::Conflict { operation, .. }
            | Error::InsufficientCredit { operation, .. }
            | Error::RateLimited { operation, .. }
            | Error::BadRequest { operation, .. }
            | Error::Server { operation, .. }
            | Error::UnexpectedStatus { operation, .. }
            | Error::Timeout { operation, .. }
            | Error::Transport { operation, .. }
            | Error::Decode { operation, .. }
            | Error::InvalidRequest { operation, .. } => Some(*operation),
            Error::InvalidConfig { .. } => None,
        }
    }

    /// HTTP status of the answer, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Unauthorized { .. } => Some(401),
            Error::Forbidden { .. } => Some(403),
            Error::NotFound { .. } => Some(404),
            Error::Conflict { .. } => Some(409),
            Error::InsufficientCredit { .. } => Some(402),
            Error::RateLimited { .. } => Some(429),
            Error::BadRequest { status, .. }
            | Error::Server { status, .. }
            | Error::UnexpectedStatus { status, .. }
            | Error::Decode { status, .. } => Some(*status),
            Error::Timeout { .. }
            | Error::Transport { .. }
            | Error::InvalidRequest { .. }
            | Error::InvalidConfig { .. } => None,
        }
    }

    /// The server's machine-readable error code, when it sent one.
    pub fn code(&self) -> Option<&str> {
        let code = match self {
            Error::Unauthorized { code, .. }
            | Error::Forbidden { code, .. }
            | Error::NotFound { code, .. }
            | Error::Conflict { code, .. }
            | Error::BadRequest { code, .. }
            | Error::UnexpectedStatus { code, .. } => code.as_str(),
            Error::InsufficientCredit { .. } => crate::model::error_code::INSUFFICIENT_CREDIT,
            Error::RateLimited { .. } => crate::model::error_code::RATE_LIMITED,
            _ => return None,
        };
        (!code.is_empty()).then_some(code)
    }

    pub fn class(&self) -> ErrorClass {
        match self {
            Error::RateLimited { .. }
            | Error::Server { .. }
            | Error::Timeout { .. }
            | Error::Transport { .. } => ErrorClass::Transient,
            Error::Unauthorized { .. }
            | Error::Forbidden { .. }
            | Error::InsufficientCredit { .. }
            | Error::BadRequest { .. }
            | Error::InvalidRequest { .. }
            | Error::InvalidConfig { .. } => ErrorClass::Terminal,
            Error::NotFound { .. }
            | Error::Conflict { .. }
            | Error::UnexpectedStatus { .. }
            | Error::Decode { .. } => ErrorClass::Semantic,
        }
    }

    /// Whether repeating the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        self.class() == ErrorClass::Transient
    }

    /// Whether repeating the call cannot help until something outside the call changes.
    pub fn is_terminal(&self) -> bool {
        self.class() == ErrorClass::Terminal
    }

    /// Whether the request provably never reached the server, so even a call that is unsafe
    /// to repeat may be repeated.
    pub fn never_sent(&self) -> bool {
        matches!(
            self,
            Error::Transport {
                connected: false,
                ..
            }
        )
    }

    /// The server's `Retry-After`, for a 429 that carried one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Whether this is a 404 for a missing resource (not for an unknown route).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { code, .. }
            if code != crate::model::error_code::ROUTE_NOT_FOUND)
    }

    /// Whether this is a create refused for want of GPUs in stock (`409 INSUFFICIENT_STOCK`):
    /// nothing was created, and another GPU type or region may have some.
    pub fn is_out_of_stock(&self) -> bool {
        matches!(self, Error::Conflict { code, .. }
            if code == crate::model::error_code::INSUFFICIENT_STOCK)
    }

    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Unauthorized { .. } => "unauthorized",
            Error::Forbidden { .. } => "forbidden",
            Error::NotFound { .. } => "not_found",
            Error::Conflict { .. } => "conflict",
            Error::InsufficientCredit { .. } => "insufficient_credit",
            Error::RateLimited { .. } => "rate_limited",
            Error::BadRequest { .. } => "bad_request",
            Error::Server { .. } => "server_error",
            Error::UnexpectedStatus { .. } => "unexpected_status",
            Error::Timeout { .. } => "timeout",
            Error::Transport { .. } => "transport",
            Error::Decode { .. } => "decode",
            Error::InvalidRequest { .. } => "invalid_request",
            Error::InvalidConfig { .. } => "invalid_config",
        }
    }
}

/// The first [`EXCERPT_LIMIT`] bytes of `body` as text, cut at a character boundary.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(EXCERPT_LIMIT * 2)]);
    let mut end = text.len().min(EXCERPT_LIMIT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_is_capped_at_a_character_boundary() {
        let body = "é".repeat(EXCERPT_LIMIT);
        let cut = excerpt(body.as_bytes());
        assert!(cut.len() <= EXCERPT_LIMIT);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(excerpt(b"short"), "short");
        assert_eq!(excerpt(&[0xff, b'a']), "\u{fffd}a");
    }

    #[test]
    fn classes_split_transient_from_terminal() {
        let op = Operation::GetInstance;
        let rate_limited = Error::RateLimited {
            operation: op,
            retry_after: Some(Duration::from_secs(2)),
            message: String::new(),
        };
        assert!(rate_limited.is_retryable());
        assert_eq!(rate_limited.retry_after(), Some(Duration::from_secs(2)));
        let credit = Error::InsufficientCredit {
            operation: op,
            message: String::new(),
        };
        assert!(credit.is_terminal() && !credit.is_retryable());
        let missing_route = Error::NotFound {
            operation: op,
            code: "ROUTE_NOT_FOUND".into(),
            message: String::new(),
        };
        assert!(!missing_route.is_not_found());
        assert_eq!(missing_route.class(), ErrorClass::Semantic);
    }
}
