//! The typed client: one async method per [`Operation`](crate::Operation), with retries, rate
//! limiting and an observer hook for telemetry.
//!
//! This file holds the client and its construction; `transport.rs` sends one call (HTTP, the
//! API key, retries, the rate limiter) and `responses.rs` turns answers into results and
//! errors. The operations live in one file per resource (`instances.rs`, `volumes.rs`, ...),
//! so a method is found where its resource is: most are one call and are declared as a row
//! of a `calls!` table, the others are written out in an `impl CloudClient` block.

/// Declares client methods that are one call each, written as the call they make:
/// `fn get_volume(volume_id: &str) -> Volume = fetch(GetVolume, [volume_id]) .volume in VolumeBody;`
/// sends `GetVolume` with `volume_id` in the path through `fetch` and returns the `volume`
/// field of the `VolumeBody` answer. The transport function is one of `transport.rs`; an
/// argument after the path list is the request body (`send`) or query (`fetch_query`), a
/// parameter or a request built from the parameters.
macro_rules! calls {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($param:ident: $param_ty:ty),*) -> $out:ty
            = $transport:ident($operation:ident, [$($path:ident),*] $(, $arg:expr)?)
            $(.$field:ident in $envelope:ty)?;
    )*) => {
        impl $crate::client::CloudClient {$(
            $(#[$doc])*
            pub async fn $name(&self, $($param: $param_ty),*) -> Result<$out, $crate::error::Error> {
                let answer $(: $envelope)? = self
                    .$transport($crate::routes::Operation::$operation, &[$($path),*] $(, $arg)?)
                    .await?;
                Ok(answer $(.$field)?)
            }
        )*}
    };
}

mod config;
mod observer;
mod responses;
mod transport;

mod account;
mod ai;
mod catalog;
mod firewalls;
mod images;
mod instances;
mod snapshots;
mod ssh_keys;
mod startup_scripts;
mod volumes;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderValue;

use crate::error::Error;
use crate::limiter::RateLimiter;

pub use config::{ApiKey, ClientConfig, RetryPolicy};
pub use observer::{CallObserver, CallOutcome, FanOut};
pub use responses::{MAX_LIST_RESPONSE_BYTES, MAX_RESPONSE_BYTES};
pub use transport::{API_KEY_HEADER, install_crypto_provider, may_retry};

/// Idle connections an account's client keeps for its next calls. A connection that carried a
/// list keeps a read buffer of up to about 400 KiB while idle; beyond these, a connection is
/// closed once its call ends. The rate limit keeps an account's calls in flight to a few.
const IDLE_CONNECTIONS: usize = 4;

/// Client of the Cloud GPU Compute Service. Cloning is cheap; clones share the connection
/// pool and the rate limiter.
#[derive(Clone)]
pub struct CloudClient {
    inner: Arc<Inner>,
    observer: Option<Arc<dyn CallObserver>>,
}

struct Inner {
    http: reqwest::Client,
    /// Without a trailing slash, so operation paths append directly.
    base_url: String,
    api_key: ApiKey,
    api_key_header: HeaderValue,
    timeout: Duration,
    retry: RetryPolicy,
    limiter: Option<RateLimiter>,
}

impl fmt::Debug for CloudClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloudClient")
            .field("base_url", &self.inner.base_url)
            .field("api_key", &self.inner.api_key)
            .field("timeout", &self.inner.timeout)
            .field("retry", &self.inner.retry)
            .finish_non_exhaustive()
    }
}

impl CloudClient {
    pub fn new(config: ClientConfig) -> Result<Self, Error> {
        let parsed = reqwest::Url::parse(&config.base_url).map_err(|err| Error::InvalidConfig {
            reason: format!("base URL {:?}: {err}", config.base_url),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "base URL {:?}: scheme must be http or https",
                    config.base_url
                ),
            });
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "base URL {:?}: must not carry a query or fragment",
                    config.base_url
                ),
            });
        }
        if config.api_key.expose_secret().is_empty() {
            return Err(Error::InvalidConfig {
                reason: "API key is empty".into(),
            });
        }
        let mut api_key_header =
            HeaderValue::from_str(config.api_key.expose_secret()).map_err(|_| {
                Error::InvalidConfig {
                    reason: "API key contains characters not allowed in an HTTP header".into(),
                }
            })?;
        api_key_header.set_sensitive(true);
        if config.timeout.is_zero() {
            return Err(Error::InvalidConfig {
                reason: "timeout must be positive".into(),
            });
        }
        install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(config.timeout)
            // A redirect would carry the X-API-Key header to wherever it points; the API
            // never redirects, so a 3xx is reported instead of followed.
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(IDLE_CONNECTIONS)
            .build()
            .map_err(|err| Error::InvalidConfig {
                reason: format!("HTTP client: {err}"),
            })?;
        Ok(CloudClient {
            inner: Arc::new(Inner {
                http,
                base_url: config.base_url.trim_end_matches('/').to_owned(),
                api_key: config.api_key,
                api_key_header,
                timeout: config.timeout,
                retry: RetryPolicy {
                    max_attempts: config.retry.max_attempts.max(1),
                    ..config.retry
                },
                limiter: config.rate_limit.map(RateLimiter::new),
            }),
            observer: None,
        })
    }

    /// The same client reporting every call to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::VolumeListQuery;

    /// Controllers spawn client calls on a multi-threaded runtime.
    #[test]
    fn client_and_its_futures_are_send_and_sync() {
        fn assert_send<T: Send>(_: &T) {}
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<CloudClient>();
        let client =
            CloudClient::new(ClientConfig::new("http://127.0.0.1:1", ApiKey::new("k"))).unwrap();
        assert_send(&client.get_balance());
        assert_send(&client.list_volumes(&VolumeListQuery::default()));
        assert_send(&client.restore_snapshot("s", "n"));
    }

    #[test]
    fn api_key_is_never_printed() {
        let key = ApiKey::new("very-secret-key");
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
        assert_eq!(format!("{key}"), "ApiKey(***)");
        let config = ClientConfig::new("http://127.0.0.1:1", key);
        assert!(!format!("{config:?}").contains("very-secret-key"));
        let client = CloudClient::new(config).unwrap();
        assert!(!format!("{client:?}").contains("very-secret-key"));
    }

    #[test]
    fn bad_configuration_is_refused_without_echoing_the_key() {
        let bad_key = ApiKey::new("line\nbreak-secret");
        let err = CloudClient::new(ClientConfig::new("http://127.0.0.1:1", bad_key)).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }));
        assert!(!err.to_string().contains("break-secret"));
        for url in ["not a url", "ftp://host/", "http://host/?q=1"] {
            let err = CloudClient::new(ClientConfig::new(url, ApiKey::new("k"))).unwrap_err();
            assert!(matches!(err, Error::InvalidConfig { .. }), "{url}");
        }
        let empty = CloudClient::new(ClientConfig::new("http://h/", ApiKey::new(""))).unwrap_err();
        assert!(matches!(empty, Error::InvalidConfig { .. }));
    }
}
