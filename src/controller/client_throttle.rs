//! Client-side flow control toward the Kubernetes API server, as client-go's QPS and burst:
//! every request of the controllers takes a token from one bucket first, so a burst of work
//! (ten thousand objects applied at once) reaches a shared API server and its etcd at a steady
//! pace instead of all at once. A watch takes one token when it starts, however long it runs.
//! Leader election's requests pass without a token, so a busy operator never loses its lease
//! to its own queue.

use futures::FutureExt;
use futures::future::BoxFuture;
use gpucloud_cloud::{RateLimit, RateLimiter};
use gpucloud_telemetry::Metrics;
use kube::client::Body;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Requests of this API group (leader election's Lease) are not throttled.
const UNTHROTTLED_GROUP: &str = "/apis/coordination.k8s.io/";

/// A wait past this is logged, as client-go logs "Waited for ... due to client-side throttling".
const LOGGED_WAIT: Duration = Duration::from_secs(1);

/// The rate and burst of the controllers' requests, and the API server's host for the metric.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientThrottle {
    pub limit: RateLimit,
    pub host: String,
}

/// `client`, each of whose requests first waits for a token of `throttle`'s bucket; the wait is
/// observed in `rest_client_rate_limiter_duration_seconds`.
pub fn throttled_client(
    client: &kube::Client,
    throttle: &ClientThrottle,
    metrics: Arc<Metrics>,
) -> kube::Client {
    let service = Throttled {
        inner: client.clone(),
        limiter: RateLimiter::new(throttle.limit),
        host: Arc::from(throttle.host.as_str()),
        metrics,
    };
    kube::Client::new(service, client.default_namespace())
}

#[derive(Clone)]
struct Throttled {
    inner: kube::Client,
    limiter: RateLimiter,
    host: Arc<str>,
    metrics: Arc<Metrics>,
}

impl tower_service::Service<http::Request<Body>> for Throttled {
    type Response = http::Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        if request.uri().path().starts_with(UNTHROTTLED_GROUP) {
            return async move { this.inner.send(request).await }.boxed();
        }
        async move {
            let waited = this.limiter.acquire().await;
            let method = request.method().as_str();
            this.metrics
                .kube_request_throttled(method, &this.host, waited);
            if waited >= LOGGED_WAIT {
                tracing::info!(
                    waited_s = waited.as_secs_f64(),
                    %method,
                    path = request.uri().path(),
                    "waited for client-side throttling of Kubernetes API requests (--kube-api-qps)"
                );
            }
            this.inner.send(request).await
        }
        .boxed()
    }
}
