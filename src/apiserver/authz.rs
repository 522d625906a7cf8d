//! Authorization, off unless configured: [`AuthorizationMode::AlwaysAllow`] (the default) lets
//! every authenticated user do everything; [`AuthorizationMode::Rbac`] authorizes every request
//! as kube-apiserver's `--authorization-mode=RBAC` does, with the decisions of
//! [`gpucloud_apiserver_semantics::rbac`] over the Roles, ClusterRoles and bindings in the
//! store:
//!
//! - members of `system:masters` may do everything (the privileged-group authorizer);
//! - everyone else needs a rule: request attributes come from the URL, denials are 403 with
//!   the apiserver's Status ([`forbidden`]);
//! - the bootstrap ClusterRoles and ClusterRoleBindings are created at start ([`seed`]), so
//!   discovery, health, version and the self-reviews are allowed to every authenticated user
//!   through `system:discovery`, `system:basic-user` and `system:public-info-viewer`;
//! - writes of Roles, ClusterRoles and their bindings are refused when they would grant more
//!   than the writer holds ([`check_escalation`]), unless the writer may `escalate` or `bind`;
//! - `SelfSubjectAccessReview` and `SelfSubjectRulesReview` answer from the same rules.
//!
//! ClusterRole aggregation ([`aggregate_cluster_roles`]) runs in both modes, after every
//! ClusterRole write, as the controller-manager's aggregation controller does.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use gpucloud_apiserver_semantics::rbac::{
    self, Binding, Decision, PolicyRule, RequestAttributes, RoleRef, RoleSource, UserInfo,
};

use crate::auth::{ANONYMOUS_USER, AuthenticatedUser};
use crate::handlers::Context;
use crate::registry::{ResourceInfo, ResourceKey};
use crate::server::{AppState, RequestRecord};
use crate::status::{ApiError, StatusDetails};
use crate::store::Store;

/// How requests are authorized (kube-apiserver's `--authorization-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthorizationMode {
    /// Every authenticated user may do everything; self access reviews always answer allowed.
    #[default]
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
    /// Roles, ClusterRoles and their bindings decide, as kube-apiserver's RBAC authorizer.
    #[value(name = "RBAC")]
    Rbac,
}

/// The field manager the aggregation controller applies aggregated rules as.
pub const AGGREGATION_CONTROLLER: &str = "clusterrole-aggregation-controller";

fn rbac_key(plural: &str) -> ResourceKey {
    ResourceKey {
        group: rbac::GROUP.to_string(),
        plural: plural.to_string(),
    }
}

fn objects(store: &Store, plural: &str, namespace: Option<&str>) -> Vec<Value> {
    store
        .list(&rbac_key(plural), namespace, None, None, &|_| true)
        .items
        .iter()
        .filter_map(|stored| stored.to_value().ok())
        .collect()
}

/// The store seen as the RBAC authorizer's listers.
struct StoreRoles<'a> {
    store: &'a Store,
}

impl StoreRoles<'_> {
    fn rules(&self, plural: &str, namespace: &str, name: &str) -> Option<Vec<PolicyRule>> {
        let stored = self.store.get(&rbac_key(plural), namespace, name)?;
        let role = stored.to_value().ok()?;
        Some(PolicyRule::rules_of(&role))
    }
}

impl RoleSource for StoreRoles<'_> {
    fn role(&self, namespace: &str, name: &str) -> Option<Vec<PolicyRule>> {
        if namespace.is_empty() {
            return None;
        }
        self.rules("roles", namespace, name)
    }

    fn cluster_role(&self, name: &str) -> Option<Vec<PolicyRule>> {
        self.rules("clusterroles", "", name)
    }

    fn role_bindings(&self, namespace: &str) -> Vec<Binding> {
        objects(self.store, "rolebindings", Some(namespace))
            .iter()
            .map(Binding::from_value)
            .collect()
    }

    fn cluster_role_bindings(&self) -> Vec<Binding> {
        objects(self.store, "clusterrolebindings", None)
            .iter()
            .map(Binding::from_value)
            .collect()
    }
}

/// The authorizer of a server in RBAC mode. The authorization layer puts it in the request
/// extensions, where the self access reviews find it; its absence means AlwaysAllow.
#[derive(Clone)]
pub struct Authorizer {
    state: AppState,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// `None` unless the server runs in RBAC mode.
    pub fn of(state: &AppState) -> Option<Authorizer> {
        (state.settings.authorization == AuthorizationMode::Rbac).then(|| Authorizer {
            state: state.clone(),
        })
    }

    /// The privileged-group authorizer, then RBAC.
    pub fn authorize(&self, user: &UserInfo, attributes: &RequestAttributes) -> Decision {
        if user.is_privileged() {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        rbac::authorize(&self.roles(), user, attributes)
    }

    fn roles(&self) -> StoreRoles<'_> {
        StoreRoles {
            store: &self.state.store,
        }
    }

    /// A `SelfSubjectAccessReview`'s status for `spec`.
    pub fn access_review(&self, user: &UserInfo, spec: &Value) -> Result<Value, ApiError> {
        let present = |key: &str| spec.get(key).filter(|value| !value.is_null());
        let text = |value: &Value, key: &str| value[key].as_str().unwrap_or_default().to_string();
        let attributes = match (
            present("resourceAttributes"),
            present("nonResourceAttributes"),
        ) {
            (Some(_), Some(non_resource)) => {
                return Err(invalid_review(
                    "spec.nonResourceAttributes",
                    &non_resource.to_string(),
                    "cannot be specified in combination with resourceAttributes",
                ));
            }
            (None, None) => {
                return Err(invalid_review(
                    "spec.resourceAttributes",
                    "null",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                ));
            }
            (Some(resource), None) => {
                let mut attributes = RequestAttributes::resource(
                    &text(resource, "verb"),
                    &text(resource, "group"),
                    &text(resource, "resource"),
                    &text(resource, "subresource"),
                    &text(resource, "namespace"),
                    &text(resource, "name"),
                );
                attributes.api_version = text(resource, "version");
                attributes
            }
            (None, Some(non_resource)) => RequestAttributes::non_resource(
                &text(non_resource, "verb"),
                &text(non_resource, "path"),
            ),
        };
        let decision = self.authorize(user, &attributes);
        let mut status = json!({"allowed": decision.allowed});
        if !decision.reason.is_empty() {
            status["reason"] = json!(decision.reason);
        }
        Ok(status)
    }

    /// A `SelfSubjectRulesReview`'s status: the RBAC rules that apply in `namespace`.
    pub fn rules_review(&self, user: &UserInfo, namespace: &str) -> Value {
        let (rules, errors) = rbac::rules_for(&self.roles(), user, namespace);
        let resource_rules: Vec<Value> = rules
            .iter()
            .filter(|rule| !rule.resources.is_empty())
            .map(|rule| {
                let mut value = json!({"verbs": rule.verbs});
                for (key, list) in [
                    ("apiGroups", &rule.api_groups),
                    ("resources", &rule.resources),
                    ("resourceNames", &rule.resource_names),
                ] {
                    if !list.is_empty() {
                        value[key] = json!(list);
                    }
                }
                value
            })
            .collect();
        let non_resource_rules: Vec<Value> = rules
            .iter()
            .filter(|rule| !rule.non_resource_urls.is_empty())
            .map(|rule| json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}))
            .collect();
        let mut status = json!({
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": false,
        });
        if !errors.is_empty() {
            status["evaluationError"] = json!(rbac::aggregate_errors(&errors));
        }
        status
    }
}

/// What the AlwaysAllow authorizer's `RulesFor` answers: everything.
pub fn always_allow_rules_review() -> Value {
    json!({
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        "incomplete": false,
    })
}

fn invalid_review(field: &str, value: &str, detail: &str) -> ApiError {
    ApiError::invalid_field(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "",
        field,
        "FieldValueInvalid",
        &format!("Invalid value: {}: {detail}", rbac::quote(value)),
    )
}

/// The caller as the authenticator described it; anonymous when the request carries none.
pub fn user_info(user: Option<&AuthenticatedUser>) -> UserInfo {
    match user {
        Some(user) => UserInfo {
            name: user.name.clone(),
            groups: user.groups.clone(),
        },
        None => UserInfo {
            name: ANONYMOUS_USER.to_string(),
            groups: vec![rbac::ALL_UNAUTHENTICATED.to_string()],
        },
    }
}

// === the authorization filter ===

/// The request's attributes, from its method, path and query as kube-apiserver derives them.
pub fn request_attributes(method: &str, uri: &axum::http::Uri) -> RequestAttributes {
    let path = percent_encoding::percent_decode_str(uri.path())
        .decode_utf8_lossy()
        .into_owned();
    let mut watch = None;
    let mut field_selector = None;
    for (key, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        // The first value counts, as Go's `url.Values.Get` and the list option decoding read it.
        match key.as_ref() {
            "watch" if watch.is_none() => watch = Some(value.into_owned()),
            "fieldSelector" if field_selector.is_none() => {
                field_selector = Some(value.into_owned())
            }
            _ => {}
        }
    }
    rbac::request_attributes(method, &path, watch.as_deref(), field_selector.as_deref())
}

/// The 403 of a denied request (`responsewriters.Forbidden`): `forbiddenMessage`, with the
/// authorizer's reason after a colon, wrapped by `apierrors.NewForbidden` for the request's
/// group and resource.
pub fn forbidden(user: &str, attributes: &RequestAttributes, reason: &str) -> ApiError {
    // Go's responsewriters keep the message from looking like HTML.
    let mut cause = rbac::forbidden_message(user, attributes)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    if !reason.is_empty() {
        cause = format!("{cause}: {reason}");
    }
    let (group, resource, name) = if attributes.resource_request {
        (
            attributes.api_group.as_str(),
            attributes.resource.as_str(),
            attributes.name.as_str(),
        )
    } else {
        ("", "", "")
    };
    forbidden_error(group, resource, name, &cause)
}

/// `apierrors.NewForbidden(groupResource, name, cause)`: details carry what is not empty.
pub fn forbidden_error(group: &str, resource: &str, name: &str, cause: &str) -> ApiError {
    let message = if group.is_empty() && resource.is_empty() {
        format!("forbidden: {cause}")
    } else {
        let qualified = crate::status::qualified(group, resource);
        if name.is_empty() {
            format!("{qualified} is forbidden: {cause}")
        } else {
            format!("{qualified} {} is forbidden: {cause}", rbac::quote(name))
        }
    };
    let present = |text: &str| (!text.is_empty()).then(|| text.to_string());
    ApiError {
        code: 403,
        reason: "Forbidden",
        message,
        details: Some(Box::new(StatusDetails {
            name: present(name),
            group: present(group),
            kind: present(resource),
            ..StatusDetails::default()
        })),
    }
}

/// The authorization filter: in RBAC mode a request goes on only when allowed (with the
/// [`Authorizer`] in its extensions); a denied resource request is logged and counted as a
/// 403 before it is answered.
pub async fn authorize_request(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(authorizer) = Authorizer::of(&state) else {
        return next.run(request).await;
    };
    let user = user_info(request.extensions().get::<AuthenticatedUser>());
    let attributes = request_attributes(request.method().as_str(), request.uri());
    let decision = authorizer.authorize(&user, &attributes);
    if !decision.allowed {
        if attributes.resource_request {
            let query = crate::handlers::Query::parse(request.uri().query());
            let record = RequestRecord {
                user: user.name.clone(),
                verb: attributes.verb.clone(),
                group: attributes.api_group.clone(),
                resource: attributes.resource.clone(),
                subresource: attributes.subresource.clone(),
                namespace: attributes.namespace.clone(),
                name: attributes.name.clone(),
                label_selector: query.get("labelSelector").unwrap_or_default().to_string(),
                metadata_only: crate::handlers::wants_metadata_only(request.headers()),
            };
            state.request_log.push(record.clone());
            state.request_counts.add(&record, 403);
        }
        tracing::debug!(user = %user.name, verb = %attributes.verb, resource = %attributes.combined_resource(), path = %attributes.path, "request forbidden");
        return forbidden(&user.name, &attributes, &decision.reason).into_response();
    }
    request.extensions_mut().insert(authorizer);
    next.run(request).await
}

// === escalation prevention ===

/// The policy-based storage of the RBAC kinds: a Role or ClusterRole may only hold rules its
/// writer holds (in the request's namespace), and a binding may only grant a role whose rules
/// its writer holds, unless the writer is in `system:masters` or may `escalate` the role or
/// `bind` the referenced one. Setting or changing a ClusterRole's `aggregationRule` needs
/// cluster-admin's rules. `object` is the written object, `old` the stored one on update; an
/// update that only changes owner references or finalizers is let through, as the garbage
/// collector's are. Nothing is checked in AlwaysAllow mode or for other kinds.
pub fn check_escalation(
    context: &Context<'_>,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(authorizer) = Authorizer::of(context.state) else {
        return Ok(());
    };
    let info = context.info();
    if info.group != rbac::GROUP {
        return Ok(());
    }
    let user = UserInfo {
        name: context.user.clone(),
        groups: context.groups.clone(),
    };
    if user.is_privileged() {
        return Ok(());
    }
    if old.is_some_and(|old| only_gc_fields_change(old, object)) {
        return Ok(());
    }
    let namespace = context.target.namespace.as_str();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let roles = authorizer.roles();
    let refuse = |cause: &str| forbidden_error(rbac::GROUP, &info.plural, name, cause);
    match info.plural.as_str() {
        "roles" | "clusterroles" => {
            let escalate = RequestAttributes::resource(
                "escalate",
                rbac::GROUP,
                &info.plural,
                "",
                namespace,
                context.name(),
            );
            if authorizer.authorize(&user, &escalate).allowed {
                return Ok(());
            }
            rbac::confirm_no_escalation(&roles, &user, namespace, &PolicyRule::rules_of(object))
                .map_err(|cause| refuse(&cause))?;
            let aggregating = info.plural == "clusterroles"
                && (rbac::has_aggregation_rule(object)
                    || old.is_some_and(rbac::has_aggregation_rule));
            if aggregating
                && rbac::confirm_no_escalation(&roles, &user, namespace, &rbac::full_authority())
                    .is_err()
            {
                return Err(refuse(
                    "must have cluster-admin privileges to use the aggregationRule",
                ));
            }
            Ok(())
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = Binding::from_value(object).role_ref;
            if binding_authorized(&authorizer, &user, &role_ref, namespace) {
                return Ok(());
            }
            let rules = rbac::role_ref_rules(&roles, &role_ref, namespace)
                .map_err(|error| role_ref_error(&role_ref, error))?;
            rbac::confirm_no_escalation(&roles, &user, namespace, &rules)
                .map_err(|cause| refuse(&cause))
        }
        _ => Ok(()),
    }
}

/// `BindingAuthorized`: whether the user may `bind` the referenced role, checked in the
/// binding's namespace (empty for a ClusterRoleBinding).
fn binding_authorized(
    authorizer: &Authorizer,
    user: &UserInfo,
    role_ref: &RoleRef,
    namespace: &str,
) -> bool {
    let resource = match role_ref.kind.as_str() {
        "ClusterRole" => "clusterroles",
        "Role" => "roles",
        _ => return false,
    };
    let bind = RequestAttributes::resource(
        "bind",
        &role_ref.api_group,
        resource,
        "",
        namespace,
        &role_ref.name,
    );
    authorizer.authorize(user, &bind).allowed
}

/// A binding whose role cannot be found: the lister's 404 (singular resource name), or an
/// internal error for a kind that is no role.
fn role_ref_error(role_ref: &RoleRef, error: String) -> ApiError {
    let kind = match role_ref.kind.as_str() {
        "Role" => "role",
        "ClusterRole" => "clusterrole",
        _ => return ApiError::internal(format!("Internal error occurred: {error}")),
    };
    let mut not_found = ApiError::new(404, "NotFound", error);
    not_found.details = Some(Box::new(StatusDetails {
        name: Some(role_ref.name.clone()),
        group: Some(rbac::GROUP.to_string()),
        kind: Some(kind.to_string()),
        ..StatusDetails::default()
    }));
    not_found
}

/// `IsOnlyMutatingGCFields`: whether `new` differs from `old` only in owner references and
/// finalizers (bookkeeping the server rewrites, resourceVersion and managedFields, aside).
fn only_gc_fields_change(old: &Value, new: &Value) -> bool {
    let strip = |object: &Value| {
        let mut object = object.clone();
        if let Some(metadata) = object["metadata"].as_object_mut() {
            for field in [
                "ownerReferences",
                "finalizers",
                "selfLink",
                "resourceVersion",
                "managedFields",
            ] {
                metadata.remove(field);
            }
        }
        object
    };
    strip(old) == strip(new)
}

// === bootstrap and aggregation ===

/// Creates the bootstrap ClusterRoles and ClusterRoleBindings (in RBAC mode, into an empty
/// store) and aggregates them.
pub fn seed(state: &AppState) {
    if state.settings.authorization != AuthorizationMode::Rbac {
        return;
    }
    let now = crate::handlers::write::now();
    for (plural, objects) in [
        ("clusterroles", rbac::bootstrap::cluster_roles()),
        (
            "clusterrolebindings",
            rbac::bootstrap::cluster_role_bindings(),
        ),
    ] {
        let Some(info) = state.registry.lookup(rbac::GROUP, "v1", plural) else {
            continue;
        };
        for mut object in objects {
            crate::handlers::write::fill_create_metadata(&mut object);
            crate::handlers::semantics::record_update(
                &info,
                None,
                &mut object,
                "kube-apiserver",
                &now,
            );
            // Seeding an empty store cannot collide.
            let _ = state.store.create(&info.storage_key(), object);
        }
    }
    aggregate_cluster_roles(state);
}

/// After a committed write or removal: a ClusterRole change re-aggregates.
pub fn after_write(state: &AppState, info: &ResourceInfo) {
    if info.group == rbac::GROUP && info.plural == "clusterroles" {
        aggregate_cluster_roles(state);
    }
}

/// The aggregation controller: every ClusterRole with an `aggregationRule` gets the union of
/// the rules of the ClusterRoles its selectors pick, applied (forced) as
/// [`AGGREGATION_CONTROLLER`], until nothing changes (`view` feeds `edit`, which feeds
/// `admin`).
pub fn aggregate_cluster_roles(state: &AppState) {
    let Some(info) = state.registry.lookup(rbac::GROUP, "v1", "clusterroles") else {
        return;
    };
    let key = info.storage_key();
    // Each pass settles one more level of aggregation; the bound keeps a selector cycle from
    // spinning.
    for _ in 0..8 {
        let stored = state.store.list(&key, None, None, None, &|_| true).items;
        let roles: Vec<(u64, Value)> = stored
            .iter()
            .filter_map(|object| Some((object.index.resource_version, object.to_value().ok()?)))
            .collect();
        let values: Vec<Value> = roles.iter().map(|(_, role)| role.clone()).collect();
        let mut changed = false;
        for (resource_version, role) in &roles {
            let Some(rules) = rbac::aggregate(role, &values) else {
                continue;
            };
            if rules == PolicyRule::rules_of(role) {
                continue;
            }
            let applied = json!({
                "apiVersion": format!("{}/v1", rbac::GROUP),
                "kind": "ClusterRole",
                "metadata": {"name": role["metadata"]["name"]},
                "rules": rules.iter().map(PolicyRule::to_value).collect::<Vec<_>>(),
            });
            let updated = match crate::handlers::semantics::apply(
                &info,
                Some(role),
                &applied,
                AGGREGATION_CONTROLLER,
                true,
                &crate::handlers::write::now(),
            ) {
                Ok(updated) => updated,
                Err(error) => {
                    tracing::warn!(%error, "ClusterRole aggregation could not apply");
                    continue;
                }
            };
            // A conflict means the role changed meanwhile: the next pass sees it.
            if state.store.update(&key, updated, *resource_version).is_ok() {
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}
