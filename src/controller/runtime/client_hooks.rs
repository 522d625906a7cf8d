//! A `kube::Client` that tells a hook about each of its requests: when one is sent, and when
//! its answer's headers (or its failure) are in. Readiness (`watch_health.rs`) and the
//! client metrics (`client_metrics.rs`) wrap their clients with it.

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::client::Body;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Told how a request ended: its response (headers in, body not read yet) or the error.
pub type Finish = Box<dyn FnOnce(Result<&http::Response<Body>, &kube::Error>) + Send>;

/// Called as each request is sent; its [`Finish`] is called when the request ends.
pub type Start = Arc<dyn Fn(&http::Request<Body>) -> Finish + Send + Sync>;

/// `client`, calling `start` for each request it makes.
pub fn hooked_client(client: &kube::Client, start: Start) -> kube::Client {
    let service = Hooked {
        inner: client.clone(),
        start,
    };
    kube::Client::new(service, client.default_namespace())
}

#[derive(Clone)]
struct Hooked {
    inner: kube::Client,
    start: Start,
}

// === impl Hooked ===

impl tower_service::Service<http::Request<Body>> for Hooked {
    type Response = http::Response<Body>;
    // The inner client's own error: `Client::send` passes it on unchanged.
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let finish = (self.start)(&request);
        let client = self.inner.clone();
        async move {
            let response = client.send(request).await;
            finish(response.as_ref());
            response
        }
        .boxed()
    }
}
