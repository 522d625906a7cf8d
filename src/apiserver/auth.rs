//! Bearer-token authentication as a tower layer.
//!
//! Each configured token maps to a user name and that user's configured groups; the layer puts
//! the caller's [`AuthenticatedUser`] (with `system:authenticated`, and for a
//! `system:serviceaccount:NS:NAME` user the service account groups) into the request extensions
//! so authorization, handlers and the request log can tell the operator from kubectl. Failures
//! answer with the real apiserver's 401 `Status`.
//!
//! As in kube-apiserver (`staging/src/k8s.io/apiserver/pkg/authentication/request/bearertoken`),
//! the scheme word is case-insensitive, an empty token is rejected, and the `Authorization`
//! header is removed once it has been checked so nothing downstream can log it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use gpucloud_apiserver_semantics::rbac;

/// The user name unauthenticated callers get on the public endpoints.
pub const ANONYMOUS_USER: &str = "system:anonymous";

/// Paths readable without a token. A real kube-apiserver with anonymous auth enabled lets
/// `system:anonymous` read exactly these through the `system:public-info-viewer` role.
const PUBLIC_PATHS: &[&str] = &["/version", "/healthz", "/livez", "/readyz"];

/// Errors of building an authenticator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("user {user:?} has an empty bearer token")]
    EmptyToken { user: String },
    #[error("a bearer token has an empty user name")]
    EmptyUser,
    #[error("users {first:?} and {second:?} share the same bearer token")]
    DuplicateToken { first: String, second: String },
    #[error("bearer tokens may contain only visible ASCII characters (user {user:?})")]
    TokenCharacters { user: String },
}

/// Who made a request; inserted into the request extensions by the auth layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthenticatedUser {
    pub name: String,
    pub groups: Vec<String>,
}

/// Maps bearer tokens to users and their groups. Cheap to clone. `Debug` lists user names
/// only.
#[derive(Clone)]
pub struct Authenticator {
    users_by_token: Arc<HashMap<String, TokenUser>>,
}

/// Whom a token authenticates.
#[derive(Clone, Debug)]
struct TokenUser {
    name: String,
    /// The configured groups; `system:authenticated` (and a service account's groups) are
    /// added when authenticating.
    groups: Vec<String>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut users: Vec<&str> = self
            .users_by_token
            .values()
            .map(|user| user.name.as_str())
            .collect();
        users.sort_unstable();
        f.debug_struct("Authenticator")
            .field("users", &users)
            .finish()
    }
}

/// Why a request was not authenticated. Carries no token text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    #[error("no bearer token")]
    Missing,
    #[error("malformed Authorization header")]
    Malformed,
    #[error("unknown bearer token")]
    Unknown,
}

// === impl Authenticator ===

impl Authenticator {
    /// Builds an authenticator from `(token, user)` pairs.
    pub fn new(users: impl IntoIterator<Item = (String, String)>) -> Result<Self, Error> {
        Self::with_groups(users, &HashMap::new())
    }

    /// Builds an authenticator from `(token, user)` pairs and the groups of each token's user
    /// (`groups` by token; tokens not in it have none but `system:authenticated`).
    pub fn with_groups(
        users: impl IntoIterator<Item = (String, String)>,
        groups: &HashMap<String, Vec<String>>,
    ) -> Result<Self, Error> {
        let mut users_by_token: HashMap<String, TokenUser> = HashMap::new();
        for (token, user) in users {
            if user.is_empty() {
                return Err(Error::EmptyUser);
            }
            if token.is_empty() {
                return Err(Error::EmptyToken { user });
            }
            // Header values must be visible ASCII, and a token with spaces could never be sent.
            if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
                return Err(Error::TokenCharacters { user });
            }
            if let Some(first) = users_by_token.get(&token) {
                return Err(Error::DuplicateToken {
                    first: first.name.clone(),
                    second: user,
                });
            }
            let user = TokenUser {
                name: user,
                groups: groups.get(&token).cloned().unwrap_or_default(),
            };
            users_by_token.insert(token, user);
        }
        Ok(Self {
            users_by_token: Arc::new(users_by_token),
        })
    }

    /// The user names this authenticator knows.
    pub fn users(&self) -> Vec<String> {
        let mut users: Vec<String> = self
            .users_by_token
            .values()
            .map(|user| user.name.clone())
            .collect();
        users.sort_unstable();
        users
    }

    /// Resolves an `Authorization` header value to a user.
    pub fn authenticate(
        &self,
        authorization: Option<&HeaderValue>,
    ) -> Result<AuthenticatedUser, AuthFailure> {
        let value = authorization.ok_or(AuthFailure::Missing)?;
        let value = value.to_str().map_err(|_| AuthFailure::Malformed)?;
        let mut parts = value.splitn(3, ' ');
        let scheme = parts.next().unwrap_or_default();
        let token = parts.next().ok_or(AuthFailure::Malformed)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(AuthFailure::Malformed);
        }
        if token.is_empty() {
            return Err(AuthFailure::Malformed);
        }
        // Compare against every token without stopping early, so response timing does not
        // reveal how much of a guessed token matched.
        let mut found: Option<&TokenUser> = None;
        for (known, user) in self.users_by_token.iter() {
            if constant_time_eq(known.as_bytes(), token.as_bytes()) {
                found = Some(user);
            }
        }
        let user = found.ok_or(AuthFailure::Unknown)?;
        // As kube-apiserver's authenticators: the token's groups, a service account's groups,
        // then `system:authenticated` (the group adder leaves it out when already present).
        let mut groups = user.groups.clone();
        for group in rbac::service_account_groups(&user.name) {
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
        if !groups.iter().any(|group| group == rbac::ALL_AUTHENTICATED) {
            groups.push(rbac::ALL_AUTHENTICATED.to_owned());
        }
        Ok(AuthenticatedUser {
            name: user.name.clone(),
            groups,
        })
    }
}

fn constant_time_eq(left: &[u8], right: &[u8]) -> bool {
    if left.len() != right.len() {
        return false;
    }
    left.iter()
        .zip(right)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// A fresh random bearer token (32 bytes from the ring CSPRNG, hex encoded).
pub fn generate_token() -> Result<String, rustls::Error> {
    let mut bytes = [0u8; 32];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| rustls::Error::FailedToGetRandomBytes)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// The body a real kube-apiserver sends with a 401
/// (`apierrors.NewUnauthorized("Unauthorized")` in `endpoints/filters/authentication.go`).
pub fn unauthorized_response() -> Response<Body> {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

// === self-reviews ===

/// The identity and permission self-checks kubectl uses (`kubectl auth whoami`,
/// `kubectl auth can-i [--list]`): `SelfSubjectReview` (authentication.k8s.io/v1),
/// `SelfSubjectAccessReview` and `SelfSubjectRulesReview` (authorization.k8s.io/v1).
///
/// Without an [`crate::authz::Authorizer`] in the request (AlwaysAllow mode) the access review
/// answers allowed and the rules review everything, and only JSON bodies are read (kubectl
/// sends protobuf, which nothing here needs then). Under RBAC the reviews decode JSON or
/// protobuf bodies and answer from the caller's rules.
pub fn review_routes<S>() -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    axum::Router::new()
        .route(
            SELF_SUBJECT_REVIEW_PATH,
            axum::routing::post(self_subject_review),
        )
        .route(
            SELF_SUBJECT_ACCESS_REVIEW_PATH,
            axum::routing::post(self_subject_access_review),
        )
        .route(
            SELF_SUBJECT_RULES_REVIEW_PATH,
            axum::routing::post(self_subject_rules_review),
        )
}

pub const SELF_SUBJECT_REVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
pub const SELF_SUBJECT_ACCESS_REVIEW_PATH: &str =
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
pub const SELF_SUBJECT_RULES_REVIEW_PATH: &str =
    "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";

fn created_json(body: serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::CREATED;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn caller(user: Option<axum::Extension<AuthenticatedUser>>) -> AuthenticatedUser {
    user.map(|axum::Extension(user)| user)
        .unwrap_or_else(|| AuthenticatedUser {
            name: ANONYMOUS_USER.to_owned(),
            groups: vec!["system:unauthenticated".to_owned()],
        })
}

/// A review request's JSON body, if it came as JSON. Protobuf bodies (what kubectl sends) are
/// not decoded: nothing in them changes the answer. Malformed JSON is a 400, as the real
/// server answers an undecodable body.
fn review_body(
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Result<Option<serde_json::Value>, crate::status::ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !is_json || body.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(body).map(Some).map_err(|error| {
        crate::status::ApiError::bad_request(format!("invalid JSON body: {error}"))
    })
}

async fn self_subject_review(
    user: Option<axum::Extension<AuthenticatedUser>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response<Body>, crate::status::ApiError> {
    review_body(&headers, &body)?;
    let user = caller(user);
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    Ok(created_json(serde_json::json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": now},
        "status": {"userInfo": {"username": user.name, "groups": user.groups}},
    })))
}

/// A review body under RBAC: JSON, or protobuf as kubectl sends it.
fn decoded_review(
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Result<serde_json::Value, crate::status::ApiError> {
    if crate::handlers::content_type(headers) == crate::protobuf::MEDIA_TYPE {
        return crate::protobuf::decode(body).map_err(|error| {
            crate::status::ApiError::bad_request(format!(
                "the body of the request could not be decoded: {error}"
            ))
        });
    }
    Ok(review_body(headers, body)?.unwrap_or_else(|| serde_json::json!({})))
}

async fn self_subject_access_review(
    user: Option<axum::Extension<AuthenticatedUser>>,
    authorizer: Option<axum::Extension<crate::authz::Authorizer>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response<Body>, crate::status::ApiError> {
    let (spec, status) = match authorizer {
        Some(axum::Extension(authorizer)) => {
            let review = decoded_review(&headers, &body)?;
            let spec = review
                .get("spec")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({}));
            let user = crate::authz::user_info(user.as_ref().map(|user| &user.0));
            let status = authorizer.access_review(&user, &spec)?;
            (spec, status)
        }
        None => {
            // Echo the spec when it came as JSON; a protobuf body is answered without it.
            let spec = review_body(&headers, &body)?
                .and_then(|review| review.get("spec").cloned())
                .unwrap_or_else(|| serde_json::json!({}));
            // Every authenticated user may do everything (AlwaysAllow).
            let status = serde_json::json!({
                "allowed": true,
                "reason": "the embedded API server does not enforce authorization",
            });
            (spec, status)
        }
    };
    Ok(created_json(serde_json::json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status,
    })))
}

/// `SelfSubjectRulesReview`: the caller's rules in `spec.namespace`. As upstream's, the answer
/// carries an empty spec.
async fn self_subject_rules_review(
    user: Option<axum::Extension<AuthenticatedUser>>,
    authorizer: Option<axum::Extension<crate::authz::Authorizer>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response<Body>, crate::status::ApiError> {
    let review = decoded_review(&headers, &body)?;
    let namespace = review["spec"]["namespace"].as_str().unwrap_or_default();
    if namespace.is_empty() {
        return Err(crate::status::ApiError::bad_request(
            "no namespace on request",
        ));
    }
    let status = match authorizer {
        Some(axum::Extension(authorizer)) => {
            let user = crate::authz::user_info(user.as_ref().map(|user| &user.0));
            authorizer.rules_review(&user, namespace)
        }
        None => crate::authz::always_allow_rules_review(),
    };
    Ok(created_json(serde_json::json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {},
        "status": status,
    })))
}

// === impl AuthLayer ===

/// The tower layer that authenticates every request (see the module docs).
#[derive(Clone, Debug)]
pub struct AuthLayer {
    authenticator: Authenticator,
}

/// Builds the authentication layer for the router.
pub fn layer(authenticator: Authenticator) -> AuthLayer {
    AuthLayer { authenticator }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            authenticator: self.authenticator.clone(),
        }
    }
}

/// The service produced by [`AuthLayer`].
#[derive(Clone, Debug)]
pub struct AuthService<S> {
    inner: S,
    authenticator: Authenticator,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<Request<B>> for AuthService<S>
where
    S: tower::Service<Request<B>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let result = self
            .authenticator
            .authenticate(request.headers().get(header::AUTHORIZATION));
        let user = match result {
            Ok(user) => user,
            Err(AuthFailure::Missing) if PUBLIC_PATHS.contains(&request.uri().path()) => {
                AuthenticatedUser {
                    name: ANONYMOUS_USER.to_owned(),
                    groups: vec!["system:unauthenticated".to_owned()],
                }
            }
            Err(failure) => {
                tracing::debug!(
                    %failure,
                    method = %request.method(),
                    path = request.uri().path(),
                    "request rejected as unauthorized"
                );
                return Box::pin(async { Ok(unauthorized_response()) });
            }
        };
        request.headers_mut().remove(header::AUTHORIZATION);
        request.extensions_mut().insert(user);
        // Use the clone that was driven to readiness, leaving a fresh clone in `self`.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move { inner.call(request).await })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use axum::Router;
    use axum::routing::get;
    use tower::ServiceExt;

    fn authenticator() -> Authenticator {
        Authenticator::new([
            ("admin-token".to_owned(), "admin".to_owned()),
            ("op-token".to_owned(), "gpucloud-operator".to_owned()),
        ])
        .unwrap()
    }

    fn router() -> Router {
        Router::new()
            .route(
                "/api",
                get(
                    |axum::Extension(user): axum::Extension<AuthenticatedUser>,
                     headers: axum::http::HeaderMap| async move {
                        // Echo the user and whether the credential reached the handler.
                        format!("{} {}", user.name, headers.contains_key(header::AUTHORIZATION))
                    },
                ),
            )
            .route(
                "/version",
                get(|axum::Extension(user): axum::Extension<AuthenticatedUser>| async move {
                    user.name
                }),
            )
            .layer(layer(authenticator()))
    }

    async fn call(path: &str, authorization: Option<&str>) -> (StatusCode, String) {
        let mut request = Request::builder().uri(path);
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        let response = router()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn known_tokens_map_to_their_users_and_the_header_is_removed() {
        assert_eq!(
            call("/api", Some("Bearer admin-token")).await,
            (StatusCode::OK, "admin false".to_owned())
        );
        // The scheme word is case-insensitive, as in kube-apiserver's bearertoken.go.
        assert_eq!(
            call("/api", Some("bearer op-token")).await,
            (StatusCode::OK, "gpucloud-operator false".to_owned())
        );
    }

    #[tokio::test]
    async fn missing_unknown_and_malformed_credentials_get_the_real_401_status() {
        for authorization in [
            None,
            Some("Bearer wrong"),
            Some("Bearer "),
            Some("Basic YWRtaW46YWRtaW4="),
            Some("admin-token"),
        ] {
            let (status, body) = call("/api", authorization).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{authorization:?}");
            // What a real kube-apiserver returns for a bad or missing token (NewUnauthorized
            // in staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go).
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(
                body,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "message": "Unauthorized",
                    "reason": "Unauthorized", "code": 401})
            );
        }
    }

    #[tokio::test]
    async fn public_paths_admit_anonymous_callers_but_not_bad_tokens() {
        // A real kube-apiserver serves /version to anonymous callers
        // (system:public-info-viewer) but answers 401 to an invalid token even there
        // (the authentication filter runs before authorization).
        assert_eq!(
            call("/version", None).await,
            (StatusCode::OK, ANONYMOUS_USER.to_owned())
        );
        assert_eq!(
            call("/version", Some("Bearer nope")).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call("/version", Some("Bearer admin-token")).await,
            (StatusCode::OK, "admin".to_owned())
        );
    }

    #[tokio::test]
    async fn self_reviews_report_the_caller_and_allow_everything() {
        let app: Router = review_routes().layer(layer(authenticator()));
        let request = Request::builder()
            .method("POST")
            .uri(SELF_SUBJECT_REVIEW_PATH)
            .header(header::AUTHORIZATION, "Bearer op-token")
            // kubectl sends these bodies as protobuf; they are not needed.
            .header(header::CONTENT_TYPE, "application/vnd.kubernetes.protobuf")
            .body(Body::from(&b"k8s\0\x0a"[..]))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        // SelfSubjectReview create answers 201 Created, as kube-apiserver does.
        assert_eq!(response.status(), StatusCode::CREATED);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let review: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(review["kind"], "SelfSubjectReview");
        assert_eq!(
            review["status"]["userInfo"]["username"],
            "gpucloud-operator"
        );

        let request = Request::builder()
            .method("POST")
            .uri(SELF_SUBJECT_ACCESS_REVIEW_PATH)
            .header(header::AUTHORIZATION, "Bearer admin-token")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                r#"{"spec":{"resourceAttributes":{"verb":"create","resource":"configmaps"}}}"#,
            ))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let review: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(review["status"]["allowed"], true);
        assert_eq!(review["spec"]["resourceAttributes"]["verb"], "create");

        // Malformed JSON is refused with a 400 BadRequest Status, as kube-apiserver answers a
        // body it cannot decode.
        let request = Request::builder()
            .method("POST")
            .uri(SELF_SUBJECT_ACCESS_REVIEW_PATH)
            .header(header::AUTHORIZATION, "Bearer admin-token")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from("{not json"))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let status: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(status["reason"], "BadRequest");

        // Without a token these are not public.
        let request = Request::builder()
            .method("POST")
            .uri(SELF_SUBJECT_REVIEW_PATH)
            .body(Body::empty())
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn tokens_carry_their_groups_and_service_accounts_theirs() {
        let groups = HashMap::from([("root-token".to_owned(), vec!["system:masters".to_owned()])]);
        let authenticator = Authenticator::with_groups(
            [
                ("root-token".to_owned(), "admin".to_owned()),
                (
                    "sa-token".to_owned(),
                    "system:serviceaccount:team-a:builder".to_owned(),
                ),
                ("plain-token".to_owned(), "alice".to_owned()),
            ],
            &groups,
        )
        .unwrap();
        let groups_of = |token: &str| {
            let header = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
            authenticator.authenticate(Some(&header)).unwrap().groups
        };
        assert_eq!(
            groups_of("root-token"),
            ["system:masters", "system:authenticated"]
        );
        // As the service account token authenticator names them.
        assert_eq!(
            groups_of("sa-token"),
            [
                "system:serviceaccounts",
                "system:serviceaccounts:team-a",
                "system:authenticated"
            ]
        );
        assert_eq!(groups_of("plain-token"), ["system:authenticated"]);
    }

    #[test]
    fn construction_rejects_bad_user_tables_without_echoing_tokens() {
        let duplicate = Authenticator::new([
            ("same-secret".to_owned(), "a".to_owned()),
            ("same-secret".to_owned(), "b".to_owned()),
        ])
        .unwrap_err();
        assert!(matches!(duplicate, Error::DuplicateToken { .. }));
        assert!(!duplicate.to_string().contains("same-secret"));
        assert!(matches!(
            Authenticator::new([(String::new(), "a".to_owned())]).unwrap_err(),
            Error::EmptyToken { .. }
        ));
        assert!(matches!(
            Authenticator::new([("t".to_owned(), String::new())]).unwrap_err(),
            Error::EmptyUser
        ));
        assert!(matches!(
            Authenticator::new([("has space".to_owned(), "a".to_owned())]).unwrap_err(),
            Error::TokenCharacters { .. }
        ));
    }

    #[test]
    fn debug_output_never_contains_tokens() {
        let debug = format!("{:?}", authenticator());
        assert!(debug.contains("gpucloud-operator"));
        assert!(!debug.contains("admin-token"));
        assert!(!debug.contains("op-token"));
    }

    #[test]
    fn generated_tokens_are_long_random_and_distinct() {
        let first = generate_token().unwrap();
        let second = generate_token().unwrap();
        assert_eq!(first.len(), 64);
        assert!(first.bytes().all(|byte| byte.is_ascii_hexdigit()));
        assert_ne!(first, second);
    }
}
