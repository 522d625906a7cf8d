//! Sending one operation: the URL from the route table, the API key header, the client-side
//! rate limiter, the bounded HTTP exchange and the retry loop. Every operation method goes
//! through the small helpers at the top, so the machinery exists once.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::responses::{max_response_bytes, oversized};
use super::{CallOutcome, CloudClient};
use crate::error::Error;
use crate::model::ApiResponse;
use crate::routes::{Method, Operation, Retry};

/// Header that carries the API key.
pub const API_KEY_HEADER: &str = "X-API-Key";

/// Makes sure rustls has a process-wide crypto provider (ring), which reqwest needs to build a client
/// (it panics otherwise). Keeps one that is already installed.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race against another installer is fine: a provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Whether a failed attempt may be repeated, given what repeating the operation does.
pub fn may_retry(retry: Retry, error: &Error) -> bool {
    match retry {
        Retry::Idempotent => error.is_retryable(),
        // Repeating could act twice unless the first request never reached the server.
        Retry::Unsafe => error.never_sent(),
        // The caller looks for the resource by name before creating again.
        Retry::BilledCreate => false,
    }
}

impl CloudClient {
    /// A call without a request body or query; returns the response body.
    pub(super) async fn fetch<T: DeserializeOwned>(
        &self,
        operation: Operation,
        args: &[&str],
    ) -> Result<T, Error> {
        Ok(self.fetch_response(operation, args).await?.body)
    }

    /// A call whose query parameters are the set fields of `query`; returns the response body.
    pub(super) async fn fetch_query<T: DeserializeOwned, Q: Serialize>(
        &self,
        operation: Operation,
        args: &[&str],
        query: &Q,
    ) -> Result<T, Error> {
        let pairs = query_pairs(operation, query)?;
        let response: ApiResponse<T> = self.execute(operation, args, Some(pairs), None).await?;
        Ok(response.body)
    }

    /// A call with a JSON request body; returns the response body.
    pub(super) async fn send<T: DeserializeOwned, B: Serialize>(
        &self,
        operation: Operation,
        args: &[&str],
        request: &B,
    ) -> Result<T, Error> {
        Ok(self.send_response(operation, args, request).await?.body)
    }

    /// A call without a request body or query; returns the whole response, envelope included.
    pub(super) async fn fetch_response<T: DeserializeOwned>(
        &self,
        operation: Operation,
        args: &[&str],
    ) -> Result<ApiResponse<T>, Error> {
        self.execute(operation, args, None, None).await
    }

    /// A call with a JSON request body; returns the whole response, envelope included.
    pub(super) async fn send_response<T: DeserializeOwned, B: Serialize>(
        &self,
        operation: Operation,
        args: &[&str],
        request: &B,
    ) -> Result<ApiResponse<T>, Error> {
        let encoded = encode(operation, request)?;
        self.execute(operation, args, None, Some(encoded)).await
    }

    /// Runs one operation: waits for a rate-limit token, sends, and repeats the attempt while
    /// the operation's retry class and the error allow it.
    async fn execute<T: DeserializeOwned>(
        &self,
        operation: Operation,
        args: &[&str],
        query: Option<Vec<(String, String)>>,
        body: Option<Vec<u8>>,
    ) -> Result<ApiResponse<T>, Error> {
        let url = self.url(operation, args, query.as_deref())?;
        let policy = &self.inner.retry;
        let mut attempt: u32 = 1;
        loop {
            if let Some(limiter) = &self.inner.limiter {
                let waited = limiter.acquire().await;
                if !waited.is_zero()
                    && let Some(observer) = &self.observer
                {
                    observer.on_rate_limit_wait(operation, waited);
                }
            }
            let started = Instant::now();
            let result = self.attempt::<T>(operation, &url, body.as_deref()).await;
            let elapsed = started.elapsed();
            let outcome = match &result {
                Ok((status, _)) => CallOutcome {
                    status: Some(*status),
                    error: None,
                },
                Err(error) => CallOutcome {
                    status: error.status(),
                    error: Some(error.metric_label()),
                },
            };
            tracing::debug!(
                operation = operation.name(),
                attempt,
                status = outcome.status,
                error = outcome.error,
                elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                "cloud call"
            );
            if let Some(observer) = &self.observer {
                observer.on_call(operation, &outcome, elapsed);
            }
            let error = match result {
                Ok((_, response)) => return Ok(response),
                Err(error) => error,
            };
            if attempt >= policy.max_attempts || !may_retry(operation.retry(), &error) {
                return Err(error);
            }
            let server_wait = error.retry_after().unwrap_or(Duration::ZERO);
            if server_wait > policy.max_retry_after {
                return Err(error);
            }
            let jitter = policy.backoff.delay(attempt - 1, &mut rand::rng());
            let delay = jitter.max(server_wait);
            tracing::debug!(
                operation = operation.name(),
                next_attempt = attempt + 1,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "retrying cloud call"
            );
            if let Some(observer) = &self.observer {
                observer.on_retry(operation, attempt + 1, &error, delay);
            }
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    fn url(
        &self,
        operation: Operation,
        args: &[&str],
        query: Option<&[(String, String)]>,
    ) -> Result<reqwest::Url, Error> {
        // An empty id would address a different route (`/instances//` is not an instance).
        if let Some(name) = operation
            .params()
            .zip(args)
            .find_map(|(name, value)| value.is_empty().then_some(name))
        {
            return Err(Error::InvalidRequest {
                operation,
                reason: format!("path argument {name} is empty"),
            });
        }
        let path = operation
            .render(args)
            .ok_or_else(|| Error::InvalidRequest {
                operation,
                reason: format!(
                    "expected {} path argument(s), got {}",
                    operation.params().count(),
                    args.len()
                ),
            })?;
        let mut url =
            reqwest::Url::parse(&format!("{}{path}", self.inner.base_url)).map_err(|err| {
                Error::InvalidRequest {
                    operation,
                    reason: format!("URL: {err}"),
                }
            })?;
        if let Some(pairs) = query.filter(|pairs| !pairs.is_empty()) {
            url.query_pairs_mut().extend_pairs(pairs);
        }
        Ok(url)
    }

    /// One HTTP exchange, bounded by the configured timeout. Returns the status with the
    /// decoded answer.
    async fn attempt<T: DeserializeOwned>(
        &self,
        operation: Operation,
        url: &reqwest::Url,
        body: Option<&[u8]>,
    ) -> Result<(u16, ApiResponse<T>), Error> {
        let method = match operation.method() {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Delete => reqwest::Method::DELETE,
        };
        let mut request = self
            .inner
            .http
            .request(method, url.clone())
            .header(API_KEY_HEADER, self.inner.api_key_header.clone())
            .header(ACCEPT, "application/json");
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_vec());
        }
        let limit = max_response_bytes(operation);
        let exchange = async {
            let mut response = request
                .send()
                .await
                .map_err(|err| self.transport_error(operation, err))?;
            let status = response.status().as_u16();
            let retry_after = parse_retry_after(response.headers());
            if response
                .content_length()
                .is_some_and(|len| len > limit as u64)
            {
                return Err(oversized(operation, status, &[]));
            }
            // Sized once from the announced length (checked above), not grown by doubling.
            let announced = response.content_length().unwrap_or(0) as usize;
            let mut bytes = Vec::with_capacity(announced);
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|err| self.transport_error(operation, err))?
            {
                if bytes.len() + chunk.len() > limit {
                    return Err(oversized(operation, status, &bytes));
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok((status, retry_after, bytes))
        };
        let (status, retry_after, bytes) =
            match tokio::time::timeout(self.inner.timeout, exchange).await {
                Ok(result) => result?,
                Err(_) => {
                    return Err(Error::Timeout {
                        operation,
                        after: self.inner.timeout,
                    });
                }
            };
        self.decode(operation, status, retry_after, &bytes)
    }
}

fn encode<B: Serialize>(operation: Operation, request: &B) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(request).map_err(|err| Error::InvalidRequest {
        operation,
        reason: format!("request body: {err}"),
    })
}

/// The query parameters of a query struct: each field that is set, as text.
fn query_pairs<Q: Serialize>(
    operation: Operation,
    query: &Q,
) -> Result<Vec<(String, String)>, Error> {
    let invalid = |reason: String| Error::InvalidRequest { operation, reason };
    let value = serde_json::to_value(query).map_err(|err| invalid(format!("query: {err}")))?;
    let serde_json::Value::Object(fields) = value else {
        return Err(invalid("query is not a set of named fields".into()));
    };
    let mut pairs = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        let text = match value {
            serde_json::Value::Null => continue,
            serde_json::Value::String(text) => text,
            serde_json::Value::Bool(flag) => flag.to_string(),
            serde_json::Value::Number(number) => number.to_string(),
            other => {
                return Err(invalid(format!(
                    "query parameter {name}: {other} is not a scalar"
                )));
            }
        };
        pairs.push((name, text));
    }
    Ok(pairs)
}

/// `Retry-After` as delta-seconds (integer or decimal) or an HTTP date.
fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let at = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(text)
        .ok()?;
    let until = at.duration_since(jiff::Timestamp::now());
    Some(Duration::try_from(until).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;
    use crate::model::{Tier, VolumeBillingQuery, VolumeListQuery};

    fn headers_with_retry_after(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn retry_after_accepts_seconds_and_http_dates() {
        assert_eq!(
            parse_retry_after(&headers_with_retry_after("3")),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            parse_retry_after(&headers_with_retry_after("0.5")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after(&headers_with_retry_after("Sun, 06 Nov 1994 08:49:37 GMT")),
            Some(Duration::ZERO)
        );
        let future = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let http_date = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&future)
            .unwrap();
        let parsed = parse_retry_after(&headers_with_retry_after(&http_date)).unwrap();
        assert!(parsed > Duration::from_secs(100) && parsed <= Duration::from_secs(120));
        assert_eq!(parse_retry_after(&headers_with_retry_after("-1")), None);
        assert_eq!(parse_retry_after(&headers_with_retry_after("soon")), None);
        assert_eq!(parse_retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn query_pairs_skip_unset_filters() {
        let query = VolumeListQuery {
            bootable: Some(true),
            region: Some("us-east-1".into()),
            tier: Some(Tier::Legacy),
            exclude_os_volumes: None,
        };
        let mut pairs = query_pairs(Operation::ListVolumes, &query).unwrap();
        pairs.sort();
        assert_eq!(
            pairs,
            vec![
                ("bootable".to_owned(), "true".to_owned()),
                ("region".to_owned(), "us-east-1".to_owned()),
                ("tier".to_owned(), "legacy".to_owned()),
            ]
        );
        let billing = VolumeBillingQuery {
            min_cost: Some(1.5),
            page: Some(2),
            ..VolumeBillingQuery::default()
        };
        let mut pairs = query_pairs(Operation::GetVolumeBilling, &billing).unwrap();
        pairs.sort();
        assert_eq!(
            pairs,
            vec![
                ("min_cost".to_owned(), "1.5".to_owned()),
                ("page".to_owned(), "2".to_owned()),
            ]
        );
    }

    #[test]
    fn retry_decisions_follow_the_operation_class() {
        let op = Operation::GetInstance;
        let server = Error::Server {
            operation: op,
            status: 503,
            message: String::new(),
        };
        let timeout = Error::Timeout {
            operation: op,
            after: Duration::from_secs(1),
        };
        let conflict = Error::Conflict {
            operation: op,
            code: "INVALID_STATE".into(),
            message: String::new(),
        };
        assert!(may_retry(Retry::Idempotent, &server));
        assert!(may_retry(Retry::Idempotent, &timeout));
        assert!(!may_retry(Retry::Idempotent, &conflict));
        assert!(!may_retry(Retry::Unsafe, &server));
        assert!(!may_retry(Retry::Unsafe, &timeout));
        assert!(!may_retry(Retry::BilledCreate, &server));
        assert!(!may_retry(Retry::BilledCreate, &timeout));
    }
}
