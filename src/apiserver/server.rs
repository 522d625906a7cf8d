//! Router assembly, `ApiServer::start` and the Rust handle tests and the CLI use.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::auth::{self, Authenticator};
use crate::authz::AuthorizationMode;
use crate::kubeconfig::{self, KubeconfigUser};
use crate::registry::Registry;
use crate::store::{Store, WatchHistory};
use crate::tls::{self, TlsMaterial};
use gpucloud_apiserver_semantics::rbac::SYSTEM_MASTERS;

/// The user name of the generated token when the config lists no users.
pub const DEFAULT_ADMIN_USER: &str = "admin";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS setup failed: {0}")]
    Tls(#[from] tls::Error),
    #[error("authentication setup failed: {0}")]
    Auth(#[from] auth::Error),
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kubeconfig::Error),
    #[error("cannot generate a bearer token: {0}")]
    Token(String),
    #[error("no user named {0:?} is configured")]
    UnknownUser(String),
    #[error("kube client from the generated kubeconfig: {0}")]
    Client(String),
}

/// How to run the server.
#[derive(Clone, Debug)]
pub struct ApiServerConfig {
    /// Port 0 picks a free one.
    pub listen: SocketAddr,
    /// `(token, user)` pairs; empty means one generated token for the user `admin`.
    pub users: Vec<(String, String)>,
    /// The past changes retained for watches resuming from a resourceVersion.
    pub watch_history: WatchHistory,
    /// Larger request bodies get 413 RequestEntityTooLarge.
    pub max_body_bytes: usize,
    /// Interval between BOOKMARK events on watches that asked for them.
    pub bookmark_interval: std::time::Duration,
    /// How requests are authorized: everything allowed (the default) or RBAC.
    pub authorization: AuthorizationMode,
    /// Groups of the user a token authenticates as, by token (besides `system:authenticated`,
    /// which every token's user is in). Tokens not listed carry no further groups.
    pub groups: HashMap<String, Vec<String>>,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        ApiServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            users: Vec::new(),
            watch_history: WatchHistory::default(),
            // The real apiserver's limit for a request body (3 MiB).
            max_body_bytes: 3 * 1024 * 1024,
            bookmark_interval: std::time::Duration::from_secs(10),
            authorization: AuthorizationMode::AlwaysAllow,
            groups: HashMap::new(),
        }
    }
}

impl ApiServerConfig {
    /// The same config with requests authorized as `mode` says.
    pub fn with_authorization(mut self, mode: AuthorizationMode) -> Self {
        self.authorization = mode;
        self
    }

    /// The same config with one more token, authenticating as `user` in `groups`
    /// (`system:masters` for an administrator under RBAC).
    pub fn with_user(
        mut self,
        token: impl Into<String>,
        user: impl Into<String>,
        groups: &[&str],
    ) -> Self {
        let token = token.into();
        self.users.push((token.clone(), user.into()));
        if !groups.is_empty() {
            self.groups.insert(
                token,
                groups.iter().map(|group| (*group).to_string()).collect(),
            );
        }
        self
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub registry: Registry,
    pub store: Arc<Store>,
    pub settings: Arc<Settings>,
    pub request_log: RequestLog,
    /// Every request counted by user, verb, resource and answer, never dropped.
    pub request_counts: RequestCounts,
    /// Faults injected on purpose by reliability tests (none unless a plan is set).
    pub faults: Arc<crate::faults::ApiFaults>,
    /// The admission policies and bindings, compiled.
    pub admission: Arc<crate::admission::Compiled>,
    /// Flips to true when the server stops, so open watches end and connections drain.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    stop: Arc<tokio::sync::watch::Sender<bool>>,
}

/// Request-handling limits taken from the config.
#[derive(Clone, Debug)]
pub struct Settings {
    pub max_body_bytes: usize,
    pub bookmark_interval: std::time::Duration,
    pub authorization: AuthorizationMode,
}

/// One handled request, as an RBAC rule would see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    pub user: String,
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    /// The object's name; for a list or watch with a `metadata.name=NAME` field selector, that
    /// name (kube-apiserver's RequestInfo does the same, so RBAC `resourceNames` apply).
    pub name: String,
    /// The `labelSelector` of a list or watch, as sent.
    pub label_selector: String,
    /// Whether only metadata was asked for (`Accept: ...;as=PartialObjectMetadata...`).
    pub metadata_only: bool,
}

/// How many request records are kept; older ones are dropped so a long-running sandbox does
/// not grow without bound.
pub const REQUEST_LOG_CAPACITY: usize = 100_000;

/// The request log shared by the handlers: the most recent [`REQUEST_LOG_CAPACITY`] requests.
#[derive(Clone, Debug, Default)]
pub struct RequestLog {
    records: Arc<Mutex<std::collections::VecDeque<RequestRecord>>>,
}

impl RequestLog {
    pub fn push(&self, record: RequestRecord) {
        let mut records = match self.records.lock() {
            Ok(records) => records,
            Err(poisoned) => poisoned.into_inner(),
        };
        if records.len() >= REQUEST_LOG_CAPACITY {
            records.pop_front();
        }
        records.push_back(record);
    }

    pub fn snapshot(&self) -> Vec<RequestRecord> {
        match self.records.lock() {
            Ok(records) => records.iter().cloned().collect(),
            Err(poisoned) => poisoned.into_inner().iter().cloned().collect(),
        }
    }
}

/// What one line of [`RequestCounts`] counts: requests of one user, verb and resource that got
/// one HTTP status, as an audit log would group them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct RequestCount {
    pub user: String,
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub code: u16,
    pub count: u64,
}

/// Requests counted by user, verb, resource and HTTP status since the server started. Unlike
/// the [`RequestLog`] it forgets nothing, and it stays small: one entry per combination.
/// Served at [`REQUEST_COUNTS_PATH`], so a process outside (the scale benchmark) can read what
/// its clients cost the API server.
#[derive(Clone, Debug, Default)]
pub struct RequestCounts {
    counts: Arc<Mutex<std::collections::BTreeMap<CountKey, u64>>>,
}

/// User, verb, group, resource, subresource and HTTP status.
type CountKey = (String, String, String, String, String, u16);

/// Where the server answers with its [`RequestCounts`] (JSON, a list of [`RequestCount`]).
pub const REQUEST_COUNTS_PATH: &str = "/debug/gpucloud/request-counts";

impl RequestCounts {
    /// Counts one answered request.
    pub fn add(&self, record: &RequestRecord, code: u16) {
        let mut counts = match self.counts.lock() {
            Ok(counts) => counts,
            Err(poisoned) => poisoned.into_inner(),
        };
        let key = (
            record.user.clone(),
            record.verb.clone(),
            record.group.clone(),
            record.resource.clone(),
            record.subresource.clone(),
            code,
        );
        *counts.entry(key).or_default() += 1;
    }

    pub fn snapshot(&self) -> Vec<RequestCount> {
        let counts = match self.counts.lock() {
            Ok(counts) => counts,
            Err(poisoned) => poisoned.into_inner(),
        };
        counts
            .iter()
            .map(
                |((user, verb, group, resource, subresource, code), count)| RequestCount {
                    user: user.clone(),
                    verb: verb.clone(),
                    group: group.clone(),
                    resource: resource.clone(),
                    subresource: subresource.clone(),
                    code: *code,
                    count: *count,
                },
            )
            .collect()
    }
}

/// `GET` [`REQUEST_COUNTS_PATH`].
async fn request_counts(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> axum::Json<Vec<RequestCount>> {
    axum::Json(state.request_counts.snapshot())
}

impl AppState {
    pub fn new(config: &ApiServerConfig) -> Self {
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let state = AppState {
            registry: Registry::with_builtins(),
            store: Arc::new(Store::new(config.watch_history)),
            settings: Arc::new(Settings {
                max_body_bytes: config.max_body_bytes,
                bookmark_interval: config.bookmark_interval,
                authorization: config.authorization,
            }),
            request_log: RequestLog::default(),
            request_counts: RequestCounts::default(),
            faults: Arc::new(crate::faults::ApiFaults::default()),
            admission: Arc::new(crate::admission::Compiled::default()),
            stopping,
            stop: Arc::new(stop),
        };
        crate::handlers::seed_namespaces(&state);
        crate::authz::seed(&state);
        state
    }

    /// Ends open watches (their clients see the stream close, as on a server restart).
    pub fn stop_watches(&self) {
        // Receivers live as long as the state: sending cannot fail while it exists.
        let _ = self.stop.send(true);
    }

    /// The same registry, store, request log and faults with a stop signal not yet given, for
    /// serving again after [`AppState::stop_watches`] (a stopped signal would end every new
    /// watch at once).
    fn with_new_stop_signal(&self) -> AppState {
        let (stop, stopping) = tokio::sync::watch::channel(false);
        AppState {
            stopping,
            stop: Arc::new(stop),
            ..self.clone()
        }
    }
}

/// The full router (resource routes, discovery, OpenAPI) without authentication.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(crate::discovery::routes())
        .merge(crate::openapi::routes())
        .route(REQUEST_COUNTS_PATH, axum::routing::get(request_counts))
        .fallback(crate::handlers::dispatch)
        // Authorization runs after authentication (the outer layer, see `Serving::start`)
        // and before every handler, so a denied request never reaches one.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::authz::authorize_request,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            refuse_during_outage,
        ))
        .with_state(state)
}

/// An injected outage ([`crate::faults::ApiFaults::set_outage`]) answers every request with
/// its status, as kube-apiserver does while it cannot serve.
async fn refuse_during_outage(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if let Some(code) = state.faults.outage() {
        let reason = match code {
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        return crate::status::ApiError::new(
            code,
            reason,
            "the server is currently unable to handle the request",
        )
        .into_response();
    }
    next.run(request).await
}

/// Starts the server.
pub struct ApiServer;

impl ApiServer {
    pub async fn start(config: ApiServerConfig) -> Result<ApiServerHandle, Error> {
        let mut groups = config.groups.clone();
        let users = if config.users.is_empty() {
            let token = auth::generate_token().map_err(|error| Error::Token(error.to_string()))?;
            if config.authorization == AuthorizationMode::Rbac {
                // Under RBAC the generated administrator has to be one.
                groups.insert(token.clone(), vec![SYSTEM_MASTERS.to_string()]);
            }
            vec![(token, DEFAULT_ADMIN_USER.to_string())]
        } else {
            config.users.clone()
        };
        let authenticator = Authenticator::with_groups(users.clone(), &groups)?;
        let listener = bind(config.listen).await?;
        let local_addr = listener.local_addr().map_err(|source| Error::Bind {
            address: config.listen,
            source,
        })?;
        // The certificate names every address clients will use: the bound one, loopback,
        // and `localhost` (a wildcard bind is reached through loopback).
        let mut hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        if !local_addr.ip().is_unspecified() && !hosts.contains(&local_addr.ip().to_string()) {
            hosts.push(local_addr.ip().to_string());
        }
        let tls_material = TlsMaterial::generate(&hosts)?;
        let state = AppState::new(&config);
        let serving = Serving::start(listener, &state, &authenticator, &tls_material)?;
        Ok(ApiServerHandle {
            local_addr,
            users: users
                .into_iter()
                .map(|(token, name)| KubeconfigUser { name, token })
                .collect(),
            authenticator,
            tls: tls_material,
            state,
            serving: Some(serving),
        })
    }
}

async fn bind(address: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(address)
        .await
        .map_err(|source| Error::Bind { address, source })
}

/// The tasks of a server that is accepting connections.
struct Serving {
    shutdown: Option<oneshot::Sender<()>>,
    server_task: JoinHandle<()>,
    gc_task: JoinHandle<()>,
}

impl Serving {
    fn start(
        listener: TcpListener,
        state: &AppState,
        authenticator: &Authenticator,
        tls_material: &TlsMaterial,
    ) -> Result<Serving, Error> {
        let server_config = tls_material.server_config()?;
        let app = router(state.clone()).layer(auth::layer(authenticator.clone()));
        let (shutdown, shutdown_receiver) = oneshot::channel::<()>();
        let server_task = tokio::spawn(async move {
            let shutdown = async {
                // A dropped sender also means shut down.
                let _ = shutdown_receiver.await;
            };
            if let Err(error) = tls::serve(listener, app, server_config, shutdown).await {
                tracing::error!(%error, "API server stopped");
            }
        });
        let gc_task = tokio::spawn(crate::gc::run(state.clone()));
        Ok(Serving {
            shutdown: Some(shutdown),
            server_task,
            gc_task,
        })
    }

    /// Ends open watches, closes every connection and releases the listening port.
    async fn stop(mut self, state: &AppState) {
        state.stop_watches();
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        self.gc_task.abort();
        if tokio::time::timeout(std::time::Duration::from_secs(5), &mut self.server_task)
            .await
            .is_err()
        {
            self.server_task.abort();
            let _ = (&mut self.server_task).await;
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.gc_task.abort();
        self.server_task.abort();
    }
}

/// A running server.
pub struct ApiServerHandle {
    local_addr: SocketAddr,
    users: Vec<KubeconfigUser>,
    tls: TlsMaterial,
    authenticator: Authenticator,
    state: AppState,
    /// `None` between [`ApiServerHandle::stop_serving`] and [`ApiServerHandle::resume_serving`].
    serving: Option<Serving>,
}

impl std::fmt::Debug for ApiServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerHandle")
            .field("url", &self.url())
            .field("users", &self.users)
            .finish_non_exhaustive()
    }
}

// === impl ApiServerHandle ===

impl ApiServerHandle {
    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        if self.local_addr.ip().is_unspecified() {
            // Bound to all interfaces: clients on this machine come in through loopback.
            return format!("https://127.0.0.1:{}", self.local_addr.port());
        }
        format!("https://{}", self.local_addr)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The CA certificate clients must trust, PEM-encoded.
    pub fn ca_pem(&self) -> &str {
        self.tls.ca_pem()
    }

    /// The user names with tokens, in configuration order.
    pub fn user_names(&self) -> Vec<String> {
        self.users.iter().map(|user| user.name.clone()).collect()
    }

    /// A kubeconfig whose current context is `user` (the first configured user when `None`).
    /// An unknown user gets the first user's context as current.
    pub fn kubeconfig_yaml(&self, user: Option<&str>) -> String {
        let current = user
            .filter(|name| self.users.iter().any(|known| known.name == *name))
            .or_else(|| self.users.first().map(|first| first.name.as_str()))
            .unwrap_or(DEFAULT_ADMIN_USER);
        kubeconfig::render(&self.url(), self.tls.ca_pem(), &self.users, current)
            .unwrap_or_else(|error| format!("# kubeconfig could not be rendered: {error}\n"))
    }

    fn kubeconfig_for(&self, user: Option<&str>) -> Result<String, Error> {
        if let Some(user) = user
            && !self.users.iter().any(|known| known.name == user)
        {
            return Err(Error::UnknownUser(user.to_string()));
        }
        let current = user
            .or_else(|| self.users.first().map(|first| first.name.as_str()))
            .unwrap_or(DEFAULT_ADMIN_USER);
        Ok(kubeconfig::render(
            &self.url(),
            self.tls.ca_pem(),
            &self.users,
            current,
        )?)
    }

    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        let yaml = self.kubeconfig_for(None)?;
        Ok(kubeconfig::write(path, &yaml)?)
    }

    /// A kube-rs client for the first configured user, built from the generated kubeconfig.
    pub async fn kube_client(&self) -> Result<kube::Client, Error> {
        self.kube_client_as(None).await
    }

    /// A kube-rs client for `user` (the first configured user when `None`).
    pub async fn kube_client_as(&self, user: Option<&str>) -> Result<kube::Client, Error> {
        let yaml = self.kubeconfig_for(user)?;
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml)
            .map_err(|error| Error::Client(error.to_string()))?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|error| Error::Client(error.to_string()))?;
        kube::Client::try_from(config).map_err(|error| Error::Client(error.to_string()))
    }

    /// The requests handled so far (the most recent 100,000), oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.state.request_log.snapshot()
    }

    /// Every request so far, counted by user, verb, resource and status.
    pub fn request_counts(&self) -> Vec<RequestCount> {
        self.state.request_counts.snapshot()
    }

    /// Drops retained watch history and ends open watches with 410 Expired.
    pub fn compact(&self) {
        self.state.store.compact();
    }

    /// Fault injection: seeded status-write conflicts and watch cuts, on-demand disconnects.
    pub fn faults(&self) -> &crate::faults::ApiFaults {
        &self.state.faults
    }

    /// The shared state (registry and store), for in-process inspection.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Stops serving as a restarting kube-apiserver does: open watches end, every connection
    /// closes and the port is released, so clients see refused connections until
    /// [`ApiServerHandle::resume_serving`]. The stored objects, registered kinds, users and
    /// certificates are kept, as etcd and the server's files outlive a restart.
    pub async fn stop_serving(&mut self) {
        if let Some(serving) = self.serving.take() {
            serving.stop(&self.state).await;
        }
    }

    /// Serves again on the same address with the same store, so resourceVersions clients hold
    /// stay valid and their watches resume from them. Does nothing while serving.
    pub async fn resume_serving(&mut self) -> Result<(), Error> {
        if self.serving.is_some() {
            return Ok(());
        }
        let listener = bind(self.local_addr).await?;
        self.state = self.state.with_new_stop_signal();
        self.serving = Some(Serving::start(
            listener,
            &self.state,
            &self.authenticator,
            &self.tls,
        )?);
        Ok(())
    }

    pub fn is_serving(&self) -> bool {
        self.serving.is_some()
    }

    pub async fn shutdown(mut self) {
        self.stop_serving().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: usize) -> RequestRecord {
        RequestRecord {
            user: "u".into(),
            verb: "get".into(),
            group: String::new(),
            resource: "configmaps".into(),
            subresource: String::new(),
            namespace: "default".into(),
            name: name.to_string(),
            label_selector: String::new(),
            metadata_only: false,
        }
    }

    #[test]
    fn request_log_keeps_the_most_recent_records() {
        let log = RequestLog::default();
        for name in 0..REQUEST_LOG_CAPACITY + 5 {
            log.push(record(name));
        }
        let records = log.snapshot();
        assert_eq!(records.len(), REQUEST_LOG_CAPACITY);
        assert_eq!(records[0], record(5));
        assert_eq!(
            records[REQUEST_LOG_CAPACITY - 1],
            record(REQUEST_LOG_CAPACITY + 4)
        );
    }
}
