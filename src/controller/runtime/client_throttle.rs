//! Client-side flow control toward the Kubernetes API server.
//!
//! - A rate, as client-go's QPS and burst: every request of the controllers takes a token
//!   from one bucket first, so a burst of work (ten thousand objects applied at once) reaches a
//!   shared API server and its etcd at a steady pace instead of all at once. A watch takes one
//!   token when it starts, however long it runs.
//! - A bound on the requests in flight. The client speaks HTTP/1.1, one request per connection
//!   at a time, so every request beyond those in flight opens a connection of its own, with its
//!   TLS session and read buffer (up to about 400 KiB once a list came through it): unbounded,
//!   the operator held 648 connections to the API server at once while deleting 20,000
//!   objects. A request holds its place until its answer's body is read or dropped. Watches
//!   stream for minutes and hold none.
//!
//! Leader election's requests pass both, so a busy operator never loses its lease to its own
//! queue.

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use gpucloud_cloud::{RateLimit, RateLimiter};
use gpucloud_telemetry::Metrics;
use http_body::{Frame, SizeHint};
use kube::client::Body;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Requests of this API group (leader election's Lease) pass without a token or a place.
const UNTHROTTLED_GROUP: &str = "/apis/coordination.k8s.io/";

/// The default bound on the controllers' requests in flight (`--kube-api-max-in-flight`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

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
    let rate = Rate {
        limiter: RateLimiter::new(throttle.limit),
        host: Arc::from(throttle.host.as_str()),
        metrics,
    };
    FlowControlled {
        inner: client.clone(),
        rate: Some(rate),
        places: None,
    }
    .into_client()
}

/// `client`, with at most `limit` of its requests in flight at once (at least one); watches and
/// leader election's requests are not counted.
pub fn in_flight_bounded_client(client: &kube::Client, limit: usize) -> kube::Client {
    FlowControlled {
        inner: client.clone(),
        rate: None,
        places: Some(Arc::new(Semaphore::new(limit.max(1)))),
    }
    .into_client()
}

/// A client's requests passing a rate, a bound on those in flight, or both.
#[derive(Clone)]
struct FlowControlled {
    inner: kube::Client,
    rate: Option<Rate>,
    places: Option<Arc<Semaphore>>,
}

#[derive(Clone)]
struct Rate {
    limiter: RateLimiter,
    host: Arc<str>,
    metrics: Arc<Metrics>,
}

impl FlowControlled {
    fn into_client(self) -> kube::Client {
        let namespace = self.inner.default_namespace().to_owned();
        kube::Client::new(self, namespace)
    }
}

impl Rate {
    /// Waits for a token for a request, observed and, past `LOGGED_WAIT`, logged.
    async fn wait(&self, method: http::Method, uri: http::Uri) {
        let waited = self.limiter.acquire().await;
        let method = method.as_str();
        self.metrics
            .kube_request_throttled(method, &self.host, waited);
        if waited >= LOGGED_WAIT {
            tracing::info!(
                waited_s = waited.as_secs_f64(),
                %method,
                path = uri.path(),
                "waited for client-side throttling of Kubernetes API requests (--kube-api-qps)"
            );
        }
    }
}

/// Whether `request` is a watch: it streams for minutes, and holds no place.
fn is_watch(request: &http::Request<Body>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

impl tower_service::Service<http::Request<Body>> for FlowControlled {
    type Response = http::Response<Placed>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        async move {
            let leader_election = request.uri().path().starts_with(UNTHROTTLED_GROUP);
            if let Some(rate) = this.rate.as_ref().filter(|_| !leader_election) {
                rate.wait(request.method().clone(), request.uri().clone())
                    .await;
            }
            let place = match &this.places {
                // The semaphore is never closed, so the place always comes.
                Some(places) if !leader_election && !is_watch(&request) => {
                    places.clone().acquire_owned().await.ok()
                }
                _ => None,
            };
            let response = this.inner.send(request).await?;
            Ok(response.map(|body| Placed { body, place }))
        }
        .boxed()
    }
}

/// An answer's body, holding its request's place until it is read to the end or dropped.
pub struct Placed {
    body: Body,
    place: Option<OwnedSemaphorePermit>,
}

impl http_body::Body for Placed {
    type Data = Bytes;
    type Error = <Body as http_body::Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.place = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
