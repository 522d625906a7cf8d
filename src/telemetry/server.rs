//! The HTTP endpoints: `/metrics` on one address, `/healthz` and `/readyz` on another (or
//! all three on one address when both settings name the same one).
//!
//! The probes are answered from a thread with a runtime of its own, so that they still answer
//! when the operator's runtime is stuck, and say so: liveness then fails on the heartbeat that
//! [`serve`] starts on the caller's runtime (see `health.rs`).

use crate::exposition::Format;
use crate::health::Health;
use crate::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::FutureExt as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {address} for {what}: {source}")]
    Bind {
        what: &'static str,
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the thread that answers the probes: {0}")]
    ProbeThread(#[source] std::io::Error),
}

/// Where the endpoints listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    pub metrics: SocketAddr,
    pub health: SocketAddr,
}

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// Binds the listeners (so a taken port is an error at start-up, not later), starts the
/// runtime heartbeat on the caller's runtime, then serves until `shutdown` resolves (or the
/// caller's runtime ends). Returns the bound addresses (port 0 picks a free one).
pub async fn serve(
    endpoints: Endpoints,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Endpoints, Error> {
    let shutdown = shutdown.shared();
    let beating = health.clone();
    let until = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = crate::health::heartbeat(beating) => {}
            () = until => {}
        }
    });
    let shared = Shared { metrics, health };
    let metrics_routes = Router::new().route("/metrics", get(metrics_text));
    let health_routes = Router::new()
        .route("/healthz", get(live))
        .route("/readyz", get(ready));
    if endpoints.metrics == endpoints.health {
        let listener = bind_std("metrics and health", endpoints.metrics)?;
        let address = listener.local_addr().unwrap_or(endpoints.metrics);
        spawn_isolated(
            listener,
            metrics_routes.merge(health_routes).with_state(shared),
            shutdown,
        )?;
        return Ok(Endpoints {
            metrics: address,
            health: address,
        });
    }
    let metrics_listener = bind("metrics", endpoints.metrics).await?;
    let health_listener = bind_std("health", endpoints.health)?;
    let bound = Endpoints {
        metrics: local(&metrics_listener, endpoints.metrics),
        health: health_listener.local_addr().unwrap_or(endpoints.health),
    };
    spawn(
        metrics_listener,
        metrics_routes.with_state(shared.clone()),
        shutdown.clone(),
    );
    spawn_isolated(health_listener, health_routes.with_state(shared), shutdown)?;
    Ok(bound)
}

async fn bind(what: &'static str, address: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(address)
        .await
        .map_err(|source| Error::Bind {
            what,
            address,
            source,
        })
}

/// A listener not tied to the caller's runtime, for [`spawn_isolated`].
fn bind_std(what: &'static str, address: SocketAddr) -> Result<std::net::TcpListener, Error> {
    let bound = std::net::TcpListener::bind(address)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener));
    bound.map_err(|source| Error::Bind {
        what,
        address,
        source,
    })
}

fn local(listener: &TcpListener, asked: SocketAddr) -> SocketAddr {
    listener.local_addr().unwrap_or(asked)
}

fn spawn(
    listener: TcpListener,
    routes: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, routes)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(%error, "telemetry endpoint stopped");
        }
    });
}

/// Serves `routes` on a thread with a single-threaded runtime of its own until `shutdown`
/// resolves or the caller's runtime ends (a task on it holds the thread's lease on life).
fn spawn_isolated(
    listener: std::net::TcpListener,
    routes: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::ProbeThread)?;
    let (alive, caller_gone) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _alive = alive;
        std::future::pending::<()>().await;
    });
    std::thread::Builder::new()
        .name("gpucloud-probes".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(error) => {
                        tracing::error!(%error, "probe endpoint not started");
                        return;
                    }
                };
                let stop = async move {
                    tokio::select! {
                        () = shutdown => {}
                        _ = caller_gone => {}
                    }
                };
                if let Err(error) = axum::serve(listener, routes)
                    .with_graceful_shutdown(stop)
                    .await
                {
                    tracing::error!(%error, "probe endpoint stopped");
                }
            });
        })
        .map(drop)
        .map_err(Error::ProbeThread)
}

/// The metrics in the format the scraper asks for (`exposition.rs`): OpenMetrics for
/// Prometheus, which asks for it and reads the counters' types from it, the 0.0.4 text format
/// for everything else. The content type says which: Prometheus picks its parser by it.
async fn metrics_text(State(shared): State<Shared>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    let format = Format::negotiate(accept);
    (
        [(header::CONTENT_TYPE, format.content_type())],
        shared.metrics.encode_as(format),
    )
}

async fn live(State(shared): State<Shared>) -> impl IntoResponse {
    probe(shared.health.live())
}

async fn ready(State(shared): State<Shared>) -> impl IntoResponse {
    probe(shared.health.ready())
}

fn probe(result: Result<String, String>) -> (StatusCode, String) {
    match result {
        Ok(text) => (StatusCode::OK, text + "\n"),
        Err(text) => (StatusCode::SERVICE_UNAVAILABLE, text + "\n"),
    }
}
