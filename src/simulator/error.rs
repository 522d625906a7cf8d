//! Errors: what the API answers ([`ApiError`]) and what starting the simulator can fail with
//! ([`Error`]).

use axum::http::StatusCode;

/// A refusal the API sends back as the JSON error body of the wire decisions.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    Validation { message: String },
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    #[error("no route for {method} {path}")]
    RouteNotFound { method: String, path: String },
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("{message}")]
    InvalidState { message: String },
    #[error("{message}")]
    DuplicateName { message: String },
    #[error("{message}")]
    Conflict { message: String },
    #[error("{message}")]
    InsufficientStock { message: String },
    #[error("{message}")]
    InsufficientCredit { message: String },
    #[error("{message}")]
    TierNotSupported { message: String },
    #[error("missing or invalid API key (send it in the X-API-Key header)")]
    InvalidApiKey,
    #[error("missing or invalid admin token (send it as Authorization: Bearer <token>)")]
    InvalidAdminToken,
    #[error("rate limit exceeded, retry after {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    #[error("request body exceeds the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("{message}")]
    Internal { message: String },
}

impl ApiError {
    pub fn validation(message: impl Into<String>) -> Self {
        ApiError::Validation {
            message: message.into(),
        }
    }

    pub fn not_found(kind: &'static str, id: &str) -> Self {
        ApiError::NotFound {
            kind,
            id: id.to_string(),
        }
    }

    pub fn invalid_state(message: impl Into<String>) -> Self {
        ApiError::InvalidState {
            message: message.into(),
        }
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError::Conflict {
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Validation { .. } => StatusCode::BAD_REQUEST,
            ApiError::NotFound { .. } | ApiError::RouteNotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::InvalidState { .. }
            | ApiError::DuplicateName { .. }
            | ApiError::Conflict { .. }
            | ApiError::InsufficientStock { .. } => StatusCode::CONFLICT,
            ApiError::InsufficientCredit { .. } => StatusCode::PAYMENT_REQUIRED,
            ApiError::TierNotSupported { .. } => StatusCode::FORBIDDEN,
            ApiError::InvalidApiKey | ApiError::InvalidAdminToken => StatusCode::UNAUTHORIZED,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The machine-readable `code` of the error body.
    pub fn code(&self) -> &'static str {
        use gpucloud_cloud::model::error_code;
        match self {
            ApiError::Validation { .. } => error_code::VALIDATION_ERROR,
            ApiError::NotFound { .. } => error_code::NOT_FOUND,
            ApiError::RouteNotFound { .. } => error_code::ROUTE_NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => error_code::METHOD_NOT_ALLOWED,
            ApiError::InvalidState { .. } => error_code::INVALID_STATE,
            ApiError::DuplicateName { .. } => error_code::DUPLICATE_NAME,
            ApiError::Conflict { .. } => error_code::CONFLICT,
            ApiError::InsufficientStock { .. } => error_code::INSUFFICIENT_STOCK,
            ApiError::InsufficientCredit { .. } => error_code::INSUFFICIENT_CREDIT,
            ApiError::TierNotSupported { .. } => error_code::TIER_NOT_SUPPORTED,
            ApiError::InvalidApiKey => error_code::INVALID_API_KEY,
            ApiError::InvalidAdminToken => "INVALID_ADMIN_TOKEN",
            ApiError::RateLimited { .. } => error_code::RATE_LIMITED,
            ApiError::PayloadTooLarge { .. } => error_code::PAYLOAD_TOO_LARGE,
            ApiError::Internal { .. } => error_code::INTERNAL_ERROR,
        }
    }
}

/// Failure to start or run the simulator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An environment variable read outside the flags holds a value that cannot be used.
    #[error("{variable}: {reason}")]
    Environment {
        variable: &'static str,
        reason: String,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Serve(std::io::Error),
}
