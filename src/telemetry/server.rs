//! The HTTP endpoints: `/metrics` on one address, `/healthz` and `/readyz` on another (or
//! all three on one address when both settings name the same one).

use crate::health::Health;
use crate::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
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

/// Binds the listeners (so a taken port is an error at start-up, not later), then serves
/// until `shutdown` resolves. Returns the bound addresses (port 0 picks a free one).
pub async fn serve(
    endpoints: Endpoints,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Endpoints, Error> {
    let shared = Shared { metrics, health };
    let metrics_routes = Router::new().route("/metrics", get(metrics_text));
    let health_routes = Router::new()
        .route("/healthz", get(live))
        .route("/readyz", get(ready));
    let shutdown = shutdown.shared();
    if endpoints.metrics == endpoints.health {
        let listener = bind("metrics and health", endpoints.metrics).await?;
        let address = local(&listener, endpoints.metrics);
        spawn(
            listener,
            metrics_routes.merge(health_routes).with_state(shared),
            shutdown,
        );
        return Ok(Endpoints {
            metrics: address,
            health: address,
        });
    }
    let metrics_listener = bind("metrics", endpoints.metrics).await?;
    let health_listener = bind("health", endpoints.health).await?;
    let bound = Endpoints {
        metrics: local(&metrics_listener, endpoints.metrics),
        health: local(&health_listener, endpoints.health),
    };
    spawn(
        metrics_listener,
        metrics_routes.with_state(shared.clone()),
        shutdown.clone(),
    );
    spawn(health_listener, health_routes.with_state(shared), shutdown);
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

async fn metrics_text(State(shared): State<Shared>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        shared.metrics.encode(),
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
