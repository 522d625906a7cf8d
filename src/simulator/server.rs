//! The HTTP side: the router built from the route table, authentication, rate limiting,
//! fault injection, call counters, the admin API and the JSON error bodies.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method as HttpMethod, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use gpucloud_cloud::model::{self, ApiResponse, Tier};
use gpucloud_cloud::routes::{Method, Operation};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::{DropMode, FaultPlan, RateLimit, SimulatorConfig};
use crate::engine::{Engine, EngineSettings, SimTime};
use crate::error::ApiError;
use crate::handlers;

/// Shared state of one simulator.
pub struct AppState {
    pub config: SimulatorConfig,
    pub clock: Clock,
    /// The engine of the first account, that of `api_keys`.
    engine: Mutex<Engine>,
    /// One engine per entry of `other_accounts`, in order.
    other_engines: Vec<Mutex<Engine>>,
    faults: Mutex<FaultState>,
    fault_counts: Mutex<FaultCounts>,
    counters: Mutex<Counters>,
    limiter: Mutex<RateLimiter>,
    request_seq: AtomicU64,
    /// The `act_late` entries that have held their request.
    late_spent: Mutex<BTreeSet<String>>,
    ledger: Mutex<Vec<LedgerEntry>>,
}

/// Which accepted key made a call: its account (0 is that of `api_keys`, then
/// `other_accounts` in order) and its place in that account's list of keys.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
pub struct Caller {
    pub account: usize,
    pub key: usize,
}

/// One call that changed an account, as the cloud recorded it once it had acted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LedgerEntry {
    pub operation: String,
    pub caller: Caller,
    /// The ids the request named: its path parameters and every `*_id` or `*_ids` field of
    /// its body.
    pub named: Vec<String>,
    /// The name it gave a new resource (`name`, or `new_vm_name` of a restore).
    pub name: Option<String>,
    /// The id of the resource it created.
    pub created: Option<String>,
}

/// Locks a mutex, recovering the data if a holder panicked (state stays usable).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl AppState {
    pub fn new(config: SimulatorConfig) -> Self {
        let clock = Clock::new(config.time_scale);
        let engine = Engine::new(EngineSettings::from_config(&config), clock.now());
        let other_engines = (1..=config.other_accounts.len())
            .map(|account| {
                let settings = EngineSettings::for_account(&config, account);
                Mutex::new(Engine::new(settings, clock.now()))
            })
            .collect();
        let faults = FaultState::new(config.faults.clone(), config.seed);
        AppState {
            clock,
            engine: Mutex::new(engine),
            other_engines,
            faults: Mutex::new(faults),
            fault_counts: Mutex::new(FaultCounts::default()),
            counters: Mutex::new(Counters::default()),
            limiter: Mutex::new(RateLimiter::default()),
            request_seq: AtomicU64::new(0),
            late_spent: Mutex::new(BTreeSet::new()),
            ledger: Mutex::new(Vec::new()),
            config,
        }
    }

    /// Runs `f` on the first account's engine under the lock (a short, synchronous section).
    pub fn with_engine<T>(&self, f: impl FnOnce(&mut Engine, SimTime) -> T) -> T {
        let mut engine = lock(&self.engine);
        let now = self.clock.now();
        f(&mut engine, now)
    }

    /// Runs `f` on the engine of account `account`; `None` when there is no such account.
    pub fn with_account<T>(
        &self,
        account: usize,
        f: impl FnOnce(&mut Engine, SimTime) -> T,
    ) -> Option<T> {
        let engine = match account {
            0 => &self.engine,
            other => self.other_engines.get(other - 1)?,
        };
        let mut engine = lock(engine);
        let now = self.clock.now();
        Some(f(&mut engine, now))
    }

    /// The delay of the `act_late` entry whose prefix starts `name`, if one is in the plan and
    /// has not yet held a request; it is spent from here on.
    fn take_late_act(&self, name: &str) -> Option<Duration> {
        let faults = lock(&self.faults);
        let mut spent = lock(&self.late_spent);
        let (prefix, delay) =
            faults.plan.act_late.iter().find(|(prefix, _)| {
                name.starts_with(prefix.as_str()) && !spent.contains(*prefix)
            })?;
        spent.insert(prefix.clone());
        Some(Duration::from_millis(*delay))
    }

    /// How many accounts the simulator serves.
    pub fn accounts(&self) -> usize {
        1 + self.other_engines.len()
    }

    /// Every call that changed an account so far, in the order they acted (empty unless
    /// `keep_ledger` is set).
    pub fn ledger(&self) -> Vec<LedgerEntry> {
        lock(&self.ledger).clone()
    }

    pub fn set_faults(&self, plan: FaultPlan) {
        *lock(&self.faults) = FaultState::new(plan, self.config.seed);
    }

    pub fn faults(&self) -> FaultPlan {
        lock(&self.faults).plan.clone()
    }

    /// Faults injected since the start (or the last reset); setting a plan keeps counting.
    pub fn fault_counts(&self) -> FaultCounts {
        *lock(&self.fault_counts)
    }

    /// Back to the start: empty account, initial balance, configured faults, no counters.
    pub fn reset(&self) {
        for account in 0..self.accounts() {
            self.with_account(account, |engine, now| engine.reset(now));
        }
        self.set_faults(self.config.faults.clone());
        *lock(&self.counters) = Counters::default();
        *lock(&self.fault_counts) = FaultCounts::default();
        *lock(&self.limiter) = RateLimiter::default();
        lock(&self.late_spent).clear();
        lock(&self.ledger).clear();
    }

    pub fn counters(&self) -> Counters {
        lock(&self.counters).clone()
    }

    fn count_received(&self, operation: Operation) {
        *lock(&self.counters)
            .received
            .entry(operation.name().to_string())
            .or_default() += 1;
    }

    fn count(&self, operation: Option<Operation>, status: StatusCode) {
        let mut counters = lock(&self.counters);
        match operation {
            Some(op) => {
                *counters
                    .operations
                    .entry(op.name().to_string())
                    .or_default()
                    .entry(status.as_u16())
                    .or_default() += 1;
            }
            None => counters.unmatched += 1,
        }
    }

    pub(crate) fn next_request_id(&self) -> String {
        let seq = self.request_seq.fetch_add(1, Ordering::Relaxed) + 1;
        // The seed's low bits keep ids of different runs apart.
        format!("req_{:08x}{seq:016x}", self.config.seed as u32)
    }
}

// === Clock ===

/// The simulated clock: wall time at start plus real elapsed time times the scale, plus any
/// manual advance.
pub struct Clock {
    origin: Instant,
    origin_millis: SimTime,
    scale: f64,
    advanced_millis: AtomicI64,
}

impl Clock {
    fn new(scale: f64) -> Self {
        Clock {
            origin: Instant::now(),
            origin_millis: jiff::Timestamp::now().as_millisecond(),
            scale,
            advanced_millis: AtomicI64::new(0),
        }
    }

    pub fn now(&self) -> SimTime {
        let elapsed = self.origin.elapsed().as_secs_f64() * 1000.0 * self.scale;
        self.origin_millis
            .saturating_add(elapsed as i64)
            .saturating_add(self.advanced_millis.load(Ordering::Relaxed))
    }

    /// Moves simulated time forward (billing accrues, pending states complete).
    pub fn advance(&self, by: Duration) {
        let millis = i64::try_from(by.as_millis()).unwrap_or(i64::MAX / 4);
        self.advanced_millis.fetch_add(millis, Ordering::Relaxed);
    }
}

// === Counters ===

/// Requests per operation and status code.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Counters {
    /// Requests per operation, counted as they arrive: before the request acts, so whoever
    /// sees its effect in the account also sees it counted.
    #[serde(default)]
    pub received: BTreeMap<String, u64>,
    /// Answered requests per operation and status code, counted once answered.
    pub operations: BTreeMap<String, BTreeMap<u16, u64>>,
    /// Requests that matched no route (API or admin).
    pub unmatched: u64,
}

impl Counters {
    /// Requests per operation, every status and faults included, answered or not yet.
    pub fn totals(&self) -> BTreeMap<String, u64> {
        self.received.clone()
    }
}

// === Rate limiting ===

#[derive(Default)]
struct RateLimiter {
    buckets: HashMap<String, Bucket>,
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl RateLimiter {
    /// Takes a token for `key`, or says how many whole seconds until one is available.
    fn take(&mut self, key: &str, limit: RateLimit) -> Result<(), u64> {
        let now = Instant::now();
        let burst = f64::from(limit.burst.max(1));
        let bucket = self.buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: burst,
            refilled: now,
        });
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * limit.per_second).min(burst);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else if limit.per_second > 0.0 {
            let wait = (1.0 - bucket.tokens) / limit.per_second;
            Err((wait.ceil() as u64).max(1))
        } else {
            Err(60)
        }
    }
}

// === Faults ===

/// The fault plan in force and one seeded generator per operation.
struct FaultState {
    plan: FaultPlan,
    seed: u64,
    streams: HashMap<&'static str, StdRng>,
    omission_streams: HashMap<&'static str, StdRng>,
    throttle_remaining: u32,
}

/// What the fault plan decided for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FaultDecision {
    pub throttle_secs: Option<u64>,
    pub internal_error: bool,
    pub latency: Duration,
    /// Whether `latency` includes a spike.
    pub spiked: bool,
    /// Whether `latency` holds a create for an `act_late` entry.
    pub late: bool,
    pub drop: Option<DropMode>,
}

/// Faults injected, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FaultCounts {
    /// Requests answered with an injected `429`.
    pub throttled: u64,
    /// Requests answered with an injected `500` (not performed).
    pub internal_errors: u64,
    /// Requests delayed by a latency spike.
    pub latency_spikes: u64,
    /// Operations performed whose response was then lost.
    pub dropped_responses: u64,
    /// Existing resources left out of a list.
    pub omitted_from_lists: u64,
    /// Creates held back by an `act_late` entry.
    pub late_acts: u64,
    /// Of those, the ones carried out since (whatever the outcome).
    pub late_acts_done: u64,
}

impl FaultCounts {
    fn add(&mut self, decision: &FaultDecision) {
        if decision.throttle_secs.is_some() {
            self.throttled += 1;
        } else if decision.internal_error {
            self.internal_errors += 1;
        }
        if decision.spiked {
            self.latency_spikes += 1;
        }
        if decision.late {
            self.late_acts += 1;
        }
    }
}

/// FNV-1a: a stable hash, so an operation's stream is the same in every build.
fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl FaultState {
    fn new(plan: FaultPlan, seed: u64) -> Self {
        FaultState {
            plan,
            seed,
            streams: HashMap::new(),
            omission_streams: HashMap::new(),
            throttle_remaining: 0,
        }
    }

    /// Whether a list leaves out one more item: drawn from a stream of the operation's own,
    /// apart from the per-request draws, so the request faults of a seed stay the same.
    fn draw_omission(&mut self, operation: Operation) -> bool {
        let rate = self.plan.list_omission_rate;
        if rate <= 0.0 {
            return false;
        }
        let seed = self.seed ^ stable_hash(operation.name()) ^ stable_hash("list omission");
        let rng = self
            .omission_streams
            .entry(operation.name())
            .or_insert_with(|| StdRng::seed_from_u64(seed));
        rng.random::<f64>() < rate
    }

    /// Draws the same four numbers for every request of an operation, whatever the plan,
    /// so a seed always yields the same sequence per operation.
    fn decide(&mut self, operation: Operation) -> FaultDecision {
        let seed = self.seed ^ stable_hash(operation.name());
        let rng = self
            .streams
            .entry(operation.name())
            .or_insert_with(|| StdRng::seed_from_u64(seed));
        let draws: [f64; 4] = [rng.random(), rng.random(), rng.random(), rng.random()];
        let plan = &self.plan;
        let mut decision = FaultDecision {
            latency: plan.latency,
            ..FaultDecision::default()
        };
        if let Some(burst) = plan.throttle_burst {
            if self.throttle_remaining > 0 {
                self.throttle_remaining -= 1;
                decision.throttle_secs = Some(burst.retry_after_secs.max(1));
            } else if draws[0] < burst.probability {
                self.throttle_remaining = burst.length.saturating_sub(1);
                decision.throttle_secs = Some(burst.retry_after_secs.max(1));
            }
        }
        if let Some(extra) = plan.latency_ms_per_operation.get(operation.name()) {
            decision.latency += Duration::from_millis(*extra);
        }
        decision.internal_error = draws[1] < plan.error_rate_for(operation.name());
        if let Some(spike) = plan.latency_spike
            && draws[2] < spike.probability
        {
            decision.latency += spike.extra;
            decision.spiked = true;
        }
        if draws[3]
            < plan
                .act_then_drop
                .get(operation.name())
                .copied()
                .unwrap_or(0.0)
        {
            decision.drop = Some(plan.drop_mode);
        }
        decision
    }
}

// === Responses ===

/// A successful answer before the envelope is added.
pub struct Reply {
    pub message: String,
    /// The operation's own fields, encoded once: a JSON object, merged into the envelope's.
    body: Vec<u8>,
    pub tier: Option<Tier>,
    pub timestamp: Option<String>,
    pub code: Option<&'static str>,
}

/// The envelope's own fields, for `Reply::into_response` to merge the body into.
#[derive(Serialize)]
struct NoBody {}

impl Reply {
    pub fn new(message: impl Into<String>, body: impl Serialize) -> Result<Reply, ApiError> {
        let body = serde_json::to_vec(&body).map_err(|err| ApiError::Internal {
            message: format!("response encoding failed: {err}"),
        })?;
        if body.first() != Some(&b'{') {
            return Err(ApiError::Internal {
                message: "response encoding failed: the body is not a JSON object".into(),
            });
        }
        Ok(Reply {
            message: message.into(),
            body,
            tier: None,
            timestamp: None,
            code: None,
        })
    }

    pub fn tier(mut self, tier: Tier) -> Self {
        self.tier = Some(tier);
        self
    }

    pub fn timestamp(mut self, timestamp: String) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The id of the resource a create made, read from its answer.
    fn created_id(&self, operation: Operation) -> Option<String> {
        let pointer = match operation {
            Operation::CreateInstance => "/instance/instance_id",
            Operation::RestoreSnapshot => "/data/instance_id",
            Operation::CreateVolume | Operation::CloneVolume => "/volume/id",
            Operation::CreateSnapshot => "/snapshot/snapshot_id",
            Operation::CreateImage => "/image/id",
            Operation::CreateFirewall => "/firewall/id",
            Operation::CreateSshKey => "/id",
            Operation::CreateStartupScript => "/script/id",
            _ => return None,
        };
        let body = serde_json::from_slice::<serde_json::Value>(&self.body).ok()?;
        body.pointer(pointer)?.as_str().map(str::to_string)
    }

    /// Keeps the items of the body's array `array` whose `id_field` `omit` refuses; returns
    /// how many were left out.
    fn retain_listed(
        &mut self,
        array: &str,
        id_field: &str,
        mut omit: impl FnMut(&str) -> bool,
    ) -> u64 {
        let Ok(mut body) = serde_json::from_slice::<serde_json::Value>(&self.body) else {
            return 0;
        };
        let Some(items) = body.get_mut(array).and_then(|a| a.as_array_mut()) else {
            return 0;
        };
        let before = items.len();
        items.retain(|item| {
            !item
                .get(id_field)
                .and_then(|id| id.as_str())
                .is_some_and(&mut omit)
        });
        let omitted = (before - items.len()) as u64;
        if omitted > 0
            && let Ok(bytes) = serde_json::to_vec(&body)
        {
            self.body = bytes;
        }
        omitted
    }

    fn into_response(self, request_id: String) -> Response {
        let mut envelope = ApiResponse::ok(self.message, request_id, NoBody {});
        envelope.tier = self.tier;
        envelope.timestamp = self.timestamp;
        envelope.code = self.code.map(str::to_string);
        let Ok(mut bytes) = serde_json::to_vec(&envelope) else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        // `{envelope}` and `{body}` become one object, the envelope's fields first, as
        // `ApiResponse`'s flattened body serializes.
        if self.body.len() > 2 && bytes.pop() == Some(b'}') {
            bytes.reserve(self.body.len());
            bytes.push(b',');
            bytes.extend_from_slice(&self.body[1..]);
        }
        json_bytes_response(StatusCode::OK, bytes)
    }
}

fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => json_bytes_response(status, bytes),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn json_bytes_response(status: StatusCode, bytes: Vec<u8>) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

pub fn error_response(error: &ApiError, request_id: String) -> Response {
    let body = model::ErrorBody {
        success: false,
        message: error.to_string(),
        code: error.code().to_string(),
        request_id,
    };
    let mut response = json_response(error.status(), &body);
    if let ApiError::RateLimited { retry_after_secs } = error
        && let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

// === Request parsing ===

/// Decodes a JSON request body; errors name the offending field.
pub fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::validation("body: a JSON object is required"));
    }
    let deserializer = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let detail = match inner.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                format!("malformed JSON: {inner}")
            }
            _ => inner.to_string(),
        };
        if path == "." || path.is_empty() {
            ApiError::validation(format!("body: {detail}"))
        } else {
            ApiError::validation(format!("{path}: {detail}"))
        }
    })
}

/// Query parameters of one request, checked against the ones the operation accepts.
pub struct QueryParams {
    values: BTreeMap<String, String>,
}

impl QueryParams {
    pub fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<QueryParams, ApiError> {
        let pairs: Vec<(String, String)> = match raw {
            None | Some("") => Vec::new(),
            Some(raw) => serde_urlencoded::from_str(raw)
                .map_err(|_| ApiError::validation("query: malformed query string"))?,
        };
        let mut values = BTreeMap::new();
        for (name, value) in pairs {
            if !allowed.contains(&name.as_str()) {
                return Err(ApiError::validation(if allowed.is_empty() {
                    format!("{name}: this operation takes no query parameters")
                } else {
                    format!(
                        "{name}: unknown query parameter (accepted: {})",
                        allowed.join(", ")
                    )
                }));
            }
            if values.insert(name.clone(), value).is_some() {
                return Err(ApiError::validation(format!(
                    "{name}: given more than once"
                )));
            }
        }
        Ok(QueryParams { values })
    }

    pub fn text(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        self.text(name)
            .map(|value| match value.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(ApiError::validation(format!(
                    "{name}: {value:?} is not true or false"
                ))),
            })
            .transpose()
    }

    pub fn unsigned(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.text(name)
            .map(|value| {
                value.parse::<u64>().map_err(|_| {
                    ApiError::validation(format!(
                        "{name}: {value:?} is not a non-negative whole number"
                    ))
                })
            })
            .transpose()
    }

    pub fn number(&self, name: &str) -> Result<Option<f64>, ApiError> {
        self.text(name)
            .map(|value| match value.parse::<f64>() {
                Ok(number) if number.is_finite() && number >= 0.0 => Ok(number),
                _ => Err(ApiError::validation(format!(
                    "{name}: {value:?} is not a non-negative number"
                ))),
            })
            .transpose()
    }
}

// === Router ===

/// The API router (every operation of the route table), the admin API when a token is
/// configured, `/openapi.json`, and JSON fallbacks.
pub fn router(state: Arc<AppState>) -> Router {
    let mut by_path: BTreeMap<&'static str, MethodRouter<Arc<AppState>>> = BTreeMap::new();
    for &operation in Operation::ALL {
        let handler = move |State(state): State<Arc<AppState>>,
                            path: Result<Path<Vec<String>>, PathRejection>,
                            RawQuery(query): RawQuery,
                            headers: HeaderMap,
                            body: Result<Bytes, BytesRejection>| async move {
            serve_operation(state, operation, path, query, headers, body).await
        };
        let route = match operation.method() {
            Method::Get => get(handler),
            Method::Post => post(handler),
            Method::Put => put(handler),
            Method::Delete => delete(handler),
        };
        let entry = by_path.remove(operation.path());
        let merged = match entry {
            Some(existing) => existing.merge(route),
            None => route,
        };
        by_path.insert(operation.path(), merged);
    }
    let mut router = Router::new();
    for (path, route) in by_path {
        router = router.route(path, route.fallback(method_not_allowed));
    }
    router = router.route(
        "/openapi.json",
        get(serve_openapi).fallback(method_not_allowed),
    );
    if state.config.admin_token.is_some() {
        router = router.merge(crate::admin::router());
    }
    let limit = state.config.max_body_bytes;
    router
        .fallback(route_not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

async fn serve_openapi() -> Response {
    json_response(StatusCode::OK, &crate::openapi::document())
}

async fn route_not_found(
    State(state): State<Arc<AppState>>,
    method: HttpMethod,
    uri: Uri,
) -> Response {
    state.count(None, StatusCode::NOT_FOUND);
    error_response(
        &ApiError::RouteNotFound {
            method: method.to_string(),
            path: uri.path().to_string(),
        },
        state.next_request_id(),
    )
}

pub(crate) async fn method_not_allowed(
    State(state): State<Arc<AppState>>,
    method: HttpMethod,
    uri: Uri,
) -> Response {
    state.count(None, StatusCode::METHOD_NOT_ALLOWED);
    error_response(
        &ApiError::MethodNotAllowed {
            method: method.to_string(),
            path: uri.path().to_string(),
        },
        state.next_request_id(),
    )
}

/// The API key of the request and who it is, if it is one of the accepted keys.
fn authenticate<'a>(state: &'a AppState, headers: &HeaderMap) -> Option<(&'a str, Caller)> {
    let given = headers.get("x-api-key")?.to_str().ok()?;
    std::iter::once(&state.config.api_keys)
        .chain(&state.config.other_accounts)
        .enumerate()
        .flat_map(|(account, keys)| {
            keys.iter()
                .enumerate()
                .map(move |(key, value)| (value, Caller { account, key }))
        })
        .find(|(key, _)| constant_time_eq(key.as_bytes(), given.as_bytes()))
        .map(|(key, caller)| (key.as_str(), caller))
}

/// Compares secrets without stopping at the first differing byte.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn serve_operation(
    state: Arc<AppState>,
    operation: Operation,
    path: Result<Path<Vec<String>>, PathRejection>,
    query: Option<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let request_id = state.next_request_id();
    state.count_received(operation);
    // A request the server has received is carried out, and counted, even if the client stops
    // waiting (a timeout during the latency before acting): as with a real service, the client
    // cannot tell a request that never arrived from one that acted after it gave up.
    let task_request_id = request_id.clone();
    let answering = tokio::spawn(async move {
        let request_id = task_request_id;
        let (response, drop) =
            answer(&state, operation, path, query, &headers, body, &request_id).await;
        state.count(Some(operation), response.status());
        tracing::debug!(
            operation = operation.name(),
            status = response.status().as_u16(),
            request_id,
            dropped = drop.is_some(),
            "simulated request"
        );
        (response, drop)
    });
    let (response, drop) = match answering.await {
        Ok(answered) => answered,
        Err(failed) => (
            error_response(
                &ApiError::Internal {
                    message: format!("the request's task failed: {failed}"),
                },
                request_id,
            ),
            None,
        ),
    };
    match drop {
        None => response,
        Some(DropMode::Delay { delay }) => {
            tokio::time::sleep(delay).await;
            response
        }
        Some(DropMode::CloseConnection) => broken_response(),
    }
}

/// A response whose body fails after the head, so the connection is closed without a
/// complete answer.
fn broken_response() -> Response {
    let stream = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "response dropped by fault injection",
        ))
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn answer(
    state: &AppState,
    operation: Operation,
    path: Result<Path<Vec<String>>, PathRejection>,
    query: Option<String>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    request_id: &str,
) -> (Response, Option<DropMode>) {
    let fail = |error: ApiError| (error_response(&error, request_id.to_string()), None);
    let Some((api_key, caller)) = authenticate(state, headers) else {
        return fail(ApiError::InvalidApiKey);
    };
    if let Some(limit) = state.config.rate_limit
        && let Err(retry_after_secs) = lock(&state.limiter).take(api_key, limit)
    {
        return fail(ApiError::RateLimited { retry_after_secs });
    }
    let request_body = body.as_ref().ok().and_then(|bytes| {
        (operation.method() != Method::Get)
            .then(|| serde_json::from_slice::<serde_json::Value>(bytes).ok())
            .flatten()
    });
    let new_name = request_body.as_ref().and_then(new_resource_name);
    let mut decision = lock(&state.faults).decide(operation);
    if decision.throttle_secs.is_none()
        && !decision.internal_error
        && let Some(name) = &new_name
        && let Some(delay) = state.take_late_act(name)
    {
        decision.latency += delay;
        decision.late = true;
    }
    lock(&state.fault_counts).add(&decision);
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    if decision.late {
        lock(&state.fault_counts).late_acts_done += 1;
    }
    if let Some(retry_after_secs) = decision.throttle_secs {
        return fail(ApiError::RateLimited { retry_after_secs });
    }
    if decision.internal_error {
        return fail(ApiError::Internal {
            message: "injected fault: internal error".to_string(),
        });
    }
    let params = match path {
        Ok(Path(params)) => params,
        Err(rejection) => {
            return fail(ApiError::validation(format!(
                "path: {}",
                rejection.body_text()
            )));
        }
    };
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return fail(ApiError::PayloadTooLarge {
                limit: state.config.max_body_bytes,
            });
        }
        Err(rejection) => {
            return fail(ApiError::validation(format!(
                "body: {}",
                rejection.body_text()
            )));
        }
    };
    let request = handlers::Request {
        operation,
        params: params.clone(),
        query: query.as_deref(),
        body: &body,
        api_key,
        caller,
    };
    match handlers::execute(state, request) {
        Ok(mut reply) => {
            if state.config.keep_ledger && operation.method() != Method::Get {
                let entry = LedgerEntry {
                    operation: operation.name().to_string(),
                    caller,
                    named: named_ids(params, request_body.as_ref()),
                    name: new_name,
                    created: reply.created_id(operation),
                };
                lock(&state.ledger).push(entry);
            }
            omit_from_list(state, operation, &mut reply);
            if decision.drop.is_some() {
                lock(&state.fault_counts).dropped_responses += 1;
            }
            (reply.into_response(request_id.to_string()), decision.drop)
        }
        Err(error) => fail(error),
    }
}

/// The name a request gives the resource it creates: `name`, or `new_vm_name` of a restore.
fn new_resource_name(body: &serde_json::Value) -> Option<String> {
    ["name", "new_vm_name"]
        .iter()
        .find_map(|field| body.get(field)?.as_str())
        .map(str::to_string)
}

/// The ids a request names: its path parameters, and every `*_id` or `*_ids` field of its body.
fn named_ids(params: Vec<String>, body: Option<&serde_json::Value>) -> Vec<String> {
    let mut named = params;
    let fields = body
        .and_then(serde_json::Value::as_object)
        .into_iter()
        .flatten();
    for (field, value) in fields {
        if field.ends_with("_id") {
            named.extend(value.as_str().map(str::to_string));
        } else if field.ends_with("_ids") {
            let ids = value.as_array().into_iter().flatten();
            named.extend(ids.filter_map(|id| id.as_str().map(str::to_string)));
        }
    }
    named
}

/// The array and id field of each list of resources the operator observes.
fn listed_items(operation: Operation) -> Option<(&'static str, &'static str)> {
    Some(match operation {
        Operation::ListInstances => ("instances", "instance_id"),
        Operation::ListVolumes => ("volumes", "id"),
        Operation::ListSnapshots => ("snapshots", "snapshot_id"),
        Operation::ListImages => ("images", "id"),
        Operation::ListFirewalls => ("firewalls", "id"),
        Operation::ListSshKeys => ("ssh_keys", "id"),
        _ => return None,
    })
}

/// The list-omission faults: a list that leaves out resources that exist.
fn omit_from_list(state: &AppState, operation: Operation, reply: &mut Reply) {
    let Some((array, id_field)) = listed_items(operation) else {
        return;
    };
    let mut faults = lock(&state.faults);
    if faults.plan.omit_from_lists.is_empty() && faults.plan.list_omission_rate <= 0.0 {
        return;
    }
    let omitted = reply.retain_listed(array, id_field, |id| {
        faults.plan.omit_from_lists.contains(id) || faults.draw_omission(operation)
    });
    drop(faults);
    lock(&state.fault_counts).omitted_from_lists += omitted;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ThrottleBurst;

    async fn reply_json(reply: Reply) -> serde_json::Value {
        let response = reply.into_response("req_0".into());
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_reply_is_the_envelope_and_the_body_in_one_object() {
        let body = serde_json::json!({"instances": [{"id": "vm-1"}], "total_count": 1});
        let reply = Reply::new("instances listed", &body)
            .unwrap()
            .tier(Tier::Advanced);
        let mut expected =
            serde_json::to_value(ApiResponse::ok("instances listed", "req_0", body.clone()))
                .unwrap();
        expected["tier"] = serde_json::to_value(Tier::Advanced).unwrap();
        assert_eq!(reply_json(reply).await, expected);

        let empty = Reply::new("done", serde_json::json!({})).unwrap();
        assert_eq!(
            reply_json(empty).await,
            serde_json::json!({"success": true, "message": "done", "request_id": "req_0"})
        );
        assert!(Reply::new("bad", [1, 2]).is_err());
    }

    #[test]
    fn clock_runs_scaled_and_advances_on_demand() {
        let clock = Clock::new(3600.0);
        let start = clock.now();
        std::thread::sleep(Duration::from_millis(20));
        // 20 ms of real time at 3600x is at least 72 simulated seconds.
        assert!(clock.now() - start >= 72_000);
        let before = clock.now();
        clock.advance(Duration::from_secs(86_400));
        assert!(clock.now() - before >= 86_400_000);
    }

    #[test]
    fn latency_spikes_and_drops_follow_the_plan() {
        let plan = FaultPlan {
            latency: Duration::from_millis(5),
            latency_spike: Some(crate::config::LatencySpike {
                probability: 1.0,
                extra: Duration::from_millis(40),
            }),
            act_then_drop: BTreeMap::from([("CreateInstance".to_string(), 1.0)]),
            ..FaultPlan::default()
        };
        let mut state = FaultState::new(plan, 3);
        let create = state.decide(Operation::CreateInstance);
        assert_eq!(create.latency, Duration::from_millis(45));
        assert_eq!(create.drop, Some(DropMode::default()));
        assert!(!create.internal_error && create.throttle_secs.is_none());
        assert_eq!(state.decide(Operation::GetBalance).drop, None);
    }

    #[test]
    fn token_bucket_allows_the_burst_then_asks_to_wait() {
        let mut limiter = RateLimiter::default();
        let limit = RateLimit {
            per_second: 0.5,
            burst: 3,
        };
        for _ in 0..3 {
            assert!(limiter.take("k", limit).is_ok());
        }
        assert_eq!(limiter.take("k", limit), Err(2));
        // Buckets are per key.
        assert!(limiter.take("other", limit).is_ok());
    }

    #[test]
    fn fault_streams_repeat_for_the_same_seed_and_differ_by_operation() {
        let plan = FaultPlan {
            error_rate: 0.5,
            throttle_burst: Some(ThrottleBurst {
                probability: 0.1,
                length: 3,
                retry_after_secs: 1,
            }),
            ..FaultPlan::default()
        };
        let run = |seed: u64, op: Operation| {
            let mut state = FaultState::new(plan.clone(), seed);
            (0..64).map(|_| state.decide(op)).collect::<Vec<_>>()
        };
        assert_eq!(
            run(9, Operation::ListVolumes),
            run(9, Operation::ListVolumes)
        );
        assert_ne!(
            run(9, Operation::ListVolumes),
            run(10, Operation::ListVolumes)
        );
        assert_ne!(
            run(9, Operation::ListVolumes),
            run(9, Operation::GetBalance)
        );
        let errors = run(9, Operation::ListVolumes)
            .iter()
            .filter(|d| d.internal_error)
            .count();
        assert!((16..=48).contains(&errors), "{errors}");
    }

    #[test]
    fn query_params_are_checked_and_typed() {
        let query =
            QueryParams::parse(Some("bootable=true&size=10"), &["bootable", "size"]).unwrap();
        assert_eq!(query.bool("bootable").unwrap(), Some(true));
        assert_eq!(query.unsigned("size").unwrap(), Some(10));
        let unknown = QueryParams::parse(Some("colour=red"), &["bootable"])
            .err()
            .unwrap();
        assert!(unknown.to_string().starts_with("colour:"));
        let twice = QueryParams::parse(Some("a=1&a=2"), &["a"]).err().unwrap();
        assert!(twice.to_string().starts_with("a:"));
        let bad = QueryParams::parse(Some("bootable=yes"), &["bootable"]).unwrap();
        assert!(
            bad.bool("bootable")
                .unwrap_err()
                .to_string()
                .starts_with("bootable:")
        );
    }

    #[test]
    fn body_errors_name_the_field() {
        let err =
            parse_body::<model::RestoreSnapshotRequest>(&Bytes::from_static(b"{}")).unwrap_err();
        assert!(err.to_string().contains("new_vm_name"), "{err}");
        let err =
            parse_body::<model::ResizeVolumeRequest>(&Bytes::from_static(b"{\"size\":\"big\"}"))
                .unwrap_err();
        assert!(err.to_string().starts_with("size:"), "{err}");
        let err = parse_body::<model::ResizeVolumeRequest>(&Bytes::from_static(b"{\"size\":"))
            .unwrap_err();
        assert!(err.to_string().contains("malformed JSON"), "{err}");
        let err = parse_body::<model::ResizeVolumeRequest>(&Bytes::new()).unwrap_err();
        assert!(err.to_string().starts_with("body:"), "{err}");
    }
}
