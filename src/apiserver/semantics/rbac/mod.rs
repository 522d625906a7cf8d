//! RBAC authorization (`rbac.authorization.k8s.io/v1`) as kube-apiserver evaluates it:
//!
//! - request attributes from the URL, as `k8s.io/apiserver/pkg/endpoints/request`'s
//!   `RequestInfoFactory` derives them ([`request_attributes`]);
//! - rule matching (`pkg/apis/rbac/v1/evaluation_helpers.go`: `*`, `resource/subresource`,
//!   `*/subresource`, resourceNames, nonResourceURLs with a trailing `*`) and the rule resolver
//!   (`pkg/registry/rbac/validation/rule.go`: ClusterRoleBindings, then the RoleBindings of the
//!   request's namespace; User, Group and ServiceAccount subjects) in [`authorize`] and
//!   [`rules_for`];
//! - escalation prevention (`component-helpers/auth/rbac/validation.Covers`,
//!   `ConfirmNoEscalation`, `CompactRules`) in [`confirm_no_escalation`];
//! - the denial message of `endpoints/handlers/responsewriters/errors.go` ([`forbidden_message`]);
//! - the ClusterRole aggregation controller's union of selected roles' rules ([`aggregate`]);
//! - the bootstrap ClusterRoles and ClusterRoleBindings ([`bootstrap`]).
//!
//! A pure library over `serde_json::Value` objects: the server supplies the stored roles and
//! bindings through [`RoleSource`].

pub mod bootstrap;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

/// The API group of the RBAC kinds.
pub const GROUP: &str = "rbac.authorization.k8s.io";
/// The group whose members may do everything (`user.SystemPrivilegedGroup`).
pub const SYSTEM_MASTERS: &str = "system:masters";
/// Every authenticated user is in this group.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// Every unauthenticated caller is in this group.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The prefix of service account user names: `system:serviceaccount:NAMESPACE:NAME`.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Who makes a request: a user name and the groups the authenticator put it in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    pub fn new(name: impl Into<String>, groups: &[&str]) -> Self {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|group| (*group).to_string()).collect(),
        }
    }

    /// Whether the user is in `system:masters`, which kube-apiserver allows everything ahead
    /// of RBAC (its privileged-group authorizer) and which may always grant anything.
    pub fn is_privileged(&self) -> bool {
        self.groups.iter().any(|group| group == SYSTEM_MASTERS)
    }
}

// === rules ===

/// One `PolicyRule`. Absent lists are empty, as Go's nil slices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn to_strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_string()).collect()
}

impl PolicyRule {
    /// A resource rule: `verbs` on `resources` of `api_groups`.
    pub fn resource(verbs: &[&str], api_groups: &[&str], resources: &[&str]) -> Self {
        PolicyRule {
            verbs: to_strings(verbs),
            api_groups: to_strings(api_groups),
            resources: to_strings(resources),
            ..PolicyRule::default()
        }
    }

    /// A non-resource rule: `verbs` on `urls`.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> Self {
        PolicyRule {
            verbs: to_strings(verbs),
            non_resource_urls: to_strings(urls),
            ..PolicyRule::default()
        }
    }

    /// The same rule limited to `names`.
    pub fn with_names(mut self, names: &[&str]) -> Self {
        self.resource_names = to_strings(names);
        self
    }

    pub fn from_value(rule: &Value) -> Self {
        PolicyRule {
            verbs: strings(&rule["verbs"]),
            api_groups: strings(&rule["apiGroups"]),
            resources: strings(&rule["resources"]),
            resource_names: strings(&rule["resourceNames"]),
            non_resource_urls: strings(&rule["nonResourceURLs"]),
        }
    }

    /// The `rules` of a Role or ClusterRole.
    pub fn rules_of(role: &Value) -> Vec<PolicyRule> {
        role["rules"]
            .as_array()
            .map(|rules| rules.iter().map(PolicyRule::from_value).collect())
            .unwrap_or_default()
    }

    /// The rule as the API serves it: `verbs` always, the other lists when not empty
    /// (`omitempty`).
    pub fn to_value(&self) -> Value {
        let mut rule = serde_json::Map::new();
        for (key, list) in [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !list.is_empty() {
                rule.insert(key.into(), json!(list));
            }
        }
        rule.insert("verbs".into(), json!(self.verbs));
        Value::Object(rule)
    }

    /// `rbacv1helpers.CompactString`, the form escalation errors list missing rules in:
    /// `{APIGroups:["apps"], Resources:["deployments"], Verbs:["create"]}`.
    pub fn compact_string(&self) -> String {
        let mut parts = Vec::new();
        for (label, list) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !list.is_empty() {
                parts.push(format!("{label}:{}", quote_list(list)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// Go's `%q` of a string, as the apiserver's messages quote names.
pub fn quote(text: &str) -> String {
    crate::gofmt::quote(text)
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
pub fn quote_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| quote(item)).collect();
    format!("[{}]", quoted.join(" "))
}

fn contains(list: &[String], item: &str) -> bool {
    list.iter().any(|entry| entry == item)
}

pub fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs
        .iter()
        .any(|rule_verb| rule_verb == "*" || rule_verb == verb)
}

pub fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    rule.api_groups
        .iter()
        .any(|rule_group| rule_group == "*" || rule_group == group)
}

/// `combined` is `resource` or `resource/subresource`. A rule's `*` matches every resource
/// and subresource; `*/scale` matches the scale subresource of every resource; `pods` does
/// not match `pods/status`.
pub fn resource_matches(rule: &PolicyRule, combined: &str, subresource: &str) -> bool {
    rule.resources.iter().any(|rule_resource| {
        rule_resource == "*"
            || rule_resource == combined
            || (!subresource.is_empty()
                && rule_resource.len() == subresource.len() + 2
                && rule_resource.starts_with("*/")
                && rule_resource.ends_with(subresource))
    })
}

/// An empty list matches every name (and requests without one); otherwise the name must be
/// listed, so a rule with resourceNames never matches a list, watch or create without a name.
pub fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    rule.resource_names.is_empty() || contains(&rule.resource_names, name)
}

pub fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    rule.non_resource_urls.iter().any(|rule_url| {
        rule_url == "*"
            || rule_url == path
            || (rule_url.ends_with('*') && path.starts_with(rule_url.trim_end_matches('*')))
    })
}

/// `RuleAllows`: whether one rule allows the request.
pub fn rule_allows(attributes: &RequestAttributes, rule: &PolicyRule) -> bool {
    if attributes.resource_request {
        let combined = attributes.combined_resource();
        return verb_matches(rule, &attributes.verb)
            && api_group_matches(rule, &attributes.api_group)
            && resource_matches(rule, &combined, &attributes.subresource)
            && resource_name_matches(rule, &attributes.name);
    }
    verb_matches(rule, &attributes.verb) && non_resource_url_matches(rule, &attributes.path)
}

// === request attributes ===

/// What a request asks to do, as kube-apiserver's `RequestInfo` and authorizer attributes
/// describe it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestAttributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection` for
    /// resource requests; the lower-cased HTTP method otherwise.
    pub verb: String,
    pub resource_request: bool,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The URL path (what non-resource rules match).
    pub path: String,
}

impl RequestAttributes {
    /// A resource request's attributes.
    pub fn resource(
        verb: &str,
        api_group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Self {
        RequestAttributes {
            verb: verb.to_string(),
            resource_request: true,
            api_group: api_group.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            ..RequestAttributes::default()
        }
    }

    /// A non-resource request's attributes.
    pub fn non_resource(verb: &str, path: &str) -> Self {
        RequestAttributes {
            verb: verb.to_string(),
            path: path.to_string(),
            ..RequestAttributes::default()
        }
    }

    /// `resource` or `resource/subresource`.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// Namespace subresources: `/api/v1/namespaces/NAME/status` names the namespace's status, not
/// a resource called `status` in the namespace.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// `RequestInfoFactory.NewRequestInfo` for `/api` (groupless) and `/apis` paths. `path` is
/// the decoded URL path; `watch` and `field_selector` are the decoded query parameters.
pub fn request_attributes(
    method: &str,
    path: &str,
    watch: Option<&str>,
    field_selector: Option<&str>,
) -> RequestAttributes {
    let mut info = RequestAttributes::non_resource(&method.to_ascii_lowercase(), path);
    let trimmed = path.trim_matches('/');
    let parts: Vec<&str> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    };
    if parts.len() < 3 {
        return info;
    }
    let mut current: &[&str] = match parts[0] {
        "api" => &parts[1..],
        "apis" => {
            if parts.len() < 4 {
                return info;
            }
            info.api_group = parts[1].to_string();
            &parts[2..]
        }
        _ => return info,
    };
    info.resource_request = true;
    info.api_version = current[0].to_string();
    current = &current[1..];
    if matches!(current[0], "proxy" | "watch") {
        if current.len() < 2 {
            // The real parser gives up here with the attributes found so far.
            return info;
        }
        info.verb = current[0].to_string();
        current = &current[1..];
    } else {
        info.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
    }
    if current[0] == "namespaces" && current.len() > 1 {
        info.namespace = current[1].to_string();
        if current.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&current[2]) {
            current = &current[2..];
        }
    }
    // resource/name/subresource; "proxy" takes no subresource.
    if current.len() >= 3 && info.verb != "proxy" {
        info.subresource = current[2].to_string();
    }
    if current.len() >= 2 {
        info.name = current[1].to_string();
    }
    info.resource = current[0].to_string();
    if info.name.is_empty() && info.verb == "get" {
        // Any `watch` value but false and 0 means watch, as Go's bool conversion of query
        // parameters reads it.
        let watching = watch.is_some_and(|value| {
            let value = value.to_ascii_lowercase();
            value != "false" && value != "0"
        });
        info.verb = if watching { "watch" } else { "list" }.to_string();
        if let Some(name) = field_selector.and_then(exact_name) {
            info.name = name;
        }
    }
    if info.name.is_empty() && info.verb == "delete" {
        info.verb = "deletecollection".to_string();
    }
    info
}

/// `fieldSelector.RequiresExactMatch("metadata.name")`: the name a selector pins, if any.
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        if term.contains("!=") {
            return None;
        }
        let (field, value) = term.split_once("==").or_else(|| term.split_once('='))?;
        let value = value.trim();
        (field.trim() == "metadata.name" && valid_path_segment(value)).then(|| value.to_string())
    })
}

/// `path.IsValidPathSegmentName`: a name that can stand in a URL path.
fn valid_path_segment(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%'])
}

// === subjects and bindings ===

/// A binding's `roleRef`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleRef {
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

/// One of a binding's `subjects`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

/// A RoleBinding (with its namespace) or ClusterRoleBinding (namespace empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    pub namespace: String,
    pub role_ref: RoleRef,
    pub subjects: Vec<Subject>,
}

impl Binding {
    pub fn from_value(binding: &Value) -> Self {
        let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
        Binding {
            name: text(&binding["metadata"]["name"]),
            namespace: text(&binding["metadata"]["namespace"]),
            role_ref: RoleRef {
                api_group: text(&binding["roleRef"]["apiGroup"]),
                kind: text(&binding["roleRef"]["kind"]),
                name: text(&binding["roleRef"]["name"]),
            },
            subjects: binding["subjects"]
                .as_array()
                .map(|subjects| {
                    subjects
                        .iter()
                        .map(|subject| Subject {
                            kind: text(&subject["kind"]),
                            name: text(&subject["name"]),
                            namespace: text(&subject["namespace"]),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// The first subject that is `user`, as `appliesTo` finds it. A ServiceAccount subject
    /// without a namespace means the binding's own namespace.
    pub fn subject_for(&self, user: &UserInfo) -> Option<&Subject> {
        self.subjects
            .iter()
            .find(|subject| applies_to_user(user, subject, &self.namespace))
    }

    /// `roleBindingDescriber` / `clusterRoleBindingDescriber`: how an allowing binding is
    /// named in the authorizer's reason.
    fn describe(&self, subject: &Subject) -> String {
        let subject_text = if subject.kind == "ServiceAccount" {
            let namespace = if subject.namespace.is_empty() {
                &self.namespace
            } else {
                &subject.namespace
            };
            format!(
                "{} {}",
                subject.kind,
                quote(&format!("{}/{namespace}", subject.name))
            )
        } else {
            format!("{} {}", subject.kind, quote(&subject.name))
        };
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding {} of {} {} to {subject_text}",
                quote(&self.name),
                self.role_ref.kind,
                quote(&self.role_ref.name)
            )
        } else {
            format!(
                "RoleBinding {} of {} {} to {subject_text}",
                quote(&format!("{}/{}", self.name, self.namespace)),
                self.role_ref.kind,
                quote(&self.role_ref.name)
            )
        }
    }
}

/// `appliesToUser`. Subjects' `apiGroup` is not looked at, as upstream does not.
pub fn applies_to_user(user: &UserInfo, subject: &Subject, namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => user.name == subject.name,
        "Group" => contains(&user.groups, &subject.name),
        "ServiceAccount" => {
            let service_account_namespace = if subject.namespace.is_empty() {
                namespace
            } else {
                &subject.namespace
            };
            !service_account_namespace.is_empty()
                && user.name
                    == format!(
                        "{SERVICE_ACCOUNT_PREFIX}{service_account_namespace}:{}",
                        subject.name
                    )
        }
        _ => false,
    }
}

/// The groups the service account authenticator gives `system:serviceaccount:NS:NAME`
/// (besides `system:authenticated`); none for other users.
pub fn service_account_groups(user: &str) -> Vec<String> {
    let Some((namespace, name)) = user
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|rest| rest.split_once(':'))
    else {
        return Vec::new();
    };
    if namespace.is_empty() || name.is_empty() {
        return Vec::new();
    }
    vec![
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{namespace}"),
    ]
}

// === the rule resolver ===

/// The stored RBAC objects, as the authorizer's listers see them.
pub trait RoleSource {
    /// A Role's rules, `None` when there is no such Role.
    fn role(&self, namespace: &str, name: &str) -> Option<Vec<PolicyRule>>;
    /// A ClusterRole's rules, `None` when there is no such ClusterRole.
    fn cluster_role(&self, name: &str) -> Option<Vec<PolicyRule>>;
    /// The RoleBindings of one namespace.
    fn role_bindings(&self, namespace: &str) -> Vec<Binding>;
    fn cluster_role_bindings(&self) -> Vec<Binding>;
}

/// `GetRoleReferenceRules`: the rules a binding grants, or why they cannot be found (the
/// listers' NotFound wording, with the singular resource name).
pub fn role_ref_rules(
    source: &dyn RoleSource,
    role_ref: &RoleRef,
    binding_namespace: &str,
) -> Result<Vec<PolicyRule>, String> {
    match role_ref.kind.as_str() {
        "Role" => source
            .role(binding_namespace, &role_ref.name)
            .ok_or_else(|| format!("role.{GROUP} {} not found", quote(&role_ref.name))),
        "ClusterRole" => source
            .cluster_role(&role_ref.name)
            .ok_or_else(|| format!("clusterrole.{GROUP} {} not found", quote(&role_ref.name))),
        other => Err(format!("unsupported role reference kind: {}", quote(other))),
    }
}

/// What [`visit_rules_for`] finds: a rule with the binding and subject that grant it, or why
/// a binding's role could not be found.
pub type Found<'a> = Result<(&'a Binding, &'a Subject, &'a PolicyRule), String>;

/// `VisitRulesFor`: every rule that applies to `user` in `namespace` (ClusterRoleBindings
/// first, then the namespace's RoleBindings), with the binding that grants it, and every
/// binding whose role could not be found. `visit` returns false to stop.
pub fn visit_rules_for(
    source: &dyn RoleSource,
    user: &UserInfo,
    namespace: &str,
    visit: &mut dyn FnMut(Found<'_>) -> bool,
) {
    let mut bindings = source.cluster_role_bindings();
    if !namespace.is_empty() {
        bindings.extend(source.role_bindings(namespace));
    }
    for binding in &bindings {
        let Some(subject) = binding.subject_for(user) else {
            continue;
        };
        match role_ref_rules(source, &binding.role_ref, &binding.namespace) {
            Ok(rules) => {
                for rule in &rules {
                    if !visit(Ok((binding, subject, rule))) {
                        return;
                    }
                }
            }
            Err(error) => {
                if !visit(Err(error)) {
                    return;
                }
            }
        }
    }
}

/// `RulesFor`: the rules that apply to `user` in `namespace`, and the resolution errors.
pub fn rules_for(
    source: &dyn RoleSource,
    user: &UserInfo,
    namespace: &str,
) -> (Vec<PolicyRule>, Vec<String>) {
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    visit_rules_for(source, user, namespace, &mut |found| {
        match found {
            Ok((_, _, rule)) => rules.push(rule.clone()),
            Err(error) => errors.push(error),
        }
        true
    });
    (rules, errors)
}

/// An authorizer's answer: allowed or no opinion, with its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// `RBAC: allowed by ...` when allowed; when not, the resolution errors (`RBAC: ...`) or
    /// empty.
    pub reason: String,
}

/// `utilerrors.NewAggregate(errors).Error()`: one message alone, several de-duplicated in
/// brackets.
pub fn aggregate_errors(errors: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for error in errors {
        if !seen.contains(&error.as_str()) {
            seen.push(error);
        }
    }
    match seen.as_slice() {
        [] => String::new(),
        [only] => (*only).to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// `RBACAuthorizer.Authorize`. Members of `system:masters` are not special here: the server
/// allows them ahead of RBAC, as kube-apiserver's privileged-group authorizer does.
pub fn authorize(
    source: &dyn RoleSource,
    user: &UserInfo,
    attributes: &RequestAttributes,
) -> Decision {
    let mut allowed_by = None;
    let mut errors = Vec::new();
    visit_rules_for(
        source,
        user,
        &attributes.namespace,
        &mut |found| match found {
            Ok((binding, subject, rule)) => {
                if rule_allows(attributes, rule) {
                    allowed_by = Some(binding.describe(subject));
                    return false;
                }
                true
            }
            Err(error) => {
                errors.push(error);
                true
            }
        },
    );
    match allowed_by {
        Some(source) => Decision {
            allowed: true,
            reason: format!("RBAC: allowed by {source}"),
        },
        None if errors.is_empty() => Decision {
            allowed: false,
            reason: String::new(),
        },
        None => Decision {
            allowed: false,
            reason: format!("RBAC: {}", aggregate_errors(&errors)),
        },
    }
}

/// `responsewriters.forbiddenMessage`: what a denied request is told, before the
/// `<resource> "<name>" is forbidden: ` prefix of the Status.
pub fn forbidden_message(user: &str, attributes: &RequestAttributes) -> String {
    if !attributes.resource_request {
        return format!(
            "User {} cannot {} path {}",
            quote(user),
            attributes.verb,
            quote(&attributes.path)
        );
    }
    let resource = attributes.combined_resource();
    if attributes.namespace.is_empty() {
        format!(
            "User {} cannot {} resource {} in API group {} at the cluster scope",
            quote(user),
            attributes.verb,
            quote(&resource),
            quote(&attributes.api_group)
        )
    } else {
        format!(
            "User {} cannot {} resource {} in API group {} in the namespace {}",
            quote(user),
            attributes.verb,
            quote(&resource),
            quote(&attributes.api_group),
            quote(&attributes.namespace)
        )
    }
}

// === escalation prevention ===

/// `BreakdownRule`: one rule per (group, resource, verb[, name]) and per (URL, verb).
pub fn breakdown_rule(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut subrules = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let single = PolicyRule {
                    api_groups: vec![group.clone()],
                    resources: vec![resource.clone()],
                    verbs: vec![verb.clone()],
                    ..PolicyRule::default()
                };
                if rule.resource_names.is_empty() {
                    subrules.push(single);
                } else {
                    for name in &rule.resource_names {
                        subrules.push(PolicyRule {
                            resource_names: vec![name.clone()],
                            ..single.clone()
                        });
                    }
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            subrules.push(PolicyRule {
                non_resource_urls: vec![url.clone()],
                verbs: vec![verb.clone()],
                ..PolicyRule::default()
            });
        }
    }
    subrules
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|item| contains(set, item))
}

fn resource_covers_all(owner: &[String], wanted: &[String]) -> bool {
    if contains(owner, "*") || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|path| {
        if contains(owner, path) {
            return true;
        }
        match path.split_once('/') {
            Some((_, subresource)) => contains(owner, &format!("*/{subresource}")),
            None => false,
        }
    })
}

fn non_resource_url_covers(owner: &str, path: &str) -> bool {
    owner == path || (owner.ends_with('*') && path.starts_with(owner.trim_end_matches('*')))
}

/// `ruleCovers`: whether `owner` grants everything the single-verb `subrule` does.
fn rule_covers(owner: &PolicyRule, subrule: &PolicyRule) -> bool {
    let verbs = contains(&owner.verbs, "*") || has_all(&owner.verbs, &subrule.verbs);
    let groups =
        contains(&owner.api_groups, "*") || has_all(&owner.api_groups, &subrule.api_groups);
    let resources = resource_covers_all(&owner.resources, &subrule.resources);
    let urls = subrule.non_resource_urls.iter().all(|path| {
        owner
            .non_resource_urls
            .iter()
            .any(|owner_url| non_resource_url_covers(owner_url, path))
    });
    let names = if subrule.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &subrule.resource_names)
    };
    verbs && groups && resources && names && urls
}

/// `Covers`: whether `owner` rules grant everything `servant` rules do, and the broken-down
/// rules they do not.
pub fn covers(owner: &[PolicyRule], servant: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let uncovered: Vec<PolicyRule> = servant
        .iter()
        .flat_map(breakdown_rule)
        .filter(|subrule| !owner.iter().any(|rule| rule_covers(rule, subrule)))
        .collect();
    (uncovered.is_empty(), uncovered)
}

/// `CompactRules`: single-group, single-resource rules without names or URLs that differ
/// only in verbs become one rule per (group, resource).
pub fn compact_rules(rules: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut compacted = Vec::new();
    let mut simple: BTreeMap<(String, String), PolicyRule> = BTreeMap::new();
    for rule in rules {
        let is_simple = rule.resource_names.is_empty()
            && rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if !is_simple {
            compacted.push(rule.clone());
            continue;
        }
        let key = (rule.api_groups[0].clone(), rule.resources[0].clone());
        simple
            .entry(key)
            .and_modify(|existing| existing.verbs.extend(rule.verbs.iter().cloned()))
            .or_insert_with(|| rule.clone());
    }
    compacted.extend(simple.into_values());
    compacted
}

/// `ConfirmNoEscalation`: `Err` with upstream's message when the requester's rules in
/// `namespace` do not cover `rules`.
pub fn confirm_no_escalation(
    source: &dyn RoleSource,
    user: &UserInfo,
    namespace: &str,
    rules: &[PolicyRule],
) -> Result<(), String> {
    let (owner_rules, errors) = rules_for(source, user, namespace);
    let (covered, missing) = covers(&owner_rules, rules);
    if covered {
        return Ok(());
    }
    // A sorted set, as `sets.NewString(...).List()` gives.
    let descriptions: BTreeSet<String> = compact_rules(&missing)
        .iter()
        .map(PolicyRule::compact_string)
        .collect();
    let mut message = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        quote(&user.name),
        quote_list(&user.groups),
        descriptions.into_iter().collect::<Vec<_>>().join("\n")
    );
    if !errors.is_empty() {
        // `%v` of a one-element []error holding the resolver's aggregate error.
        message.push_str(&format!(
            "; resolution errors: [{}]",
            aggregate_errors(&errors)
        ));
    }
    Err(message)
}

/// The rules `cluster-admin` holds: what setting an `aggregationRule` requires.
pub fn full_authority() -> Vec<PolicyRule> {
    vec![
        PolicyRule::resource(&["*"], &["*"], &["*"]),
        PolicyRule::urls(&["*"], &["*"]),
    ]
}

/// Whether a ClusterRole has an aggregation rule with at least one selector.
pub fn has_aggregation_rule(cluster_role: &Value) -> bool {
    cluster_role["aggregationRule"]["clusterRoleSelectors"]
        .as_array()
        .is_some_and(|selectors| !selectors.is_empty())
}

// === aggregation ===

/// Whether `labels` (an object's `metadata.labels`) satisfy a `metav1.LabelSelector`
/// (`matchLabels`, `matchExpressions` with In, NotIn, Exists, DoesNotExist). An empty selector
/// selects everything; an unknown operator selects nothing, as a selector that does not parse.
pub fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    if let Some(match_labels) = selector["matchLabels"].as_object()
        && !match_labels
            .iter()
            .all(|(key, value)| label(key).is_some() && label(key) == value.as_str())
    {
        return false;
    }
    let Some(expressions) = selector["matchExpressions"].as_array() else {
        return true;
    };
    expressions.iter().all(|expression| {
        let key = expression["key"].as_str().unwrap_or_default();
        let values = strings(&expression["values"]);
        match expression["operator"].as_str().unwrap_or_default() {
            "In" => label(key).is_some_and(|value| contains(&values, value)),
            "NotIn" => label(key).is_none_or(|value| !contains(&values, value)),
            "Exists" => label(key).is_some(),
            "DoesNotExist" => label(key).is_none(),
            _ => false,
        }
    })
}

/// The ClusterRole aggregation controller's `syncClusterRole`: for a ClusterRole with an
/// `aggregationRule`, the union of the rules of every other ClusterRole its selectors pick,
/// selector by selector, each selector's roles by name, without repeating an equal rule.
/// `None` for a role without an aggregation rule.
pub fn aggregate(cluster_role: &Value, cluster_roles: &[Value]) -> Option<Vec<PolicyRule>> {
    let selectors = cluster_role["aggregationRule"]["clusterRoleSelectors"].as_array()?;
    let own_name = cluster_role["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let mut by_name: Vec<&Value> = cluster_roles.iter().collect();
    by_name.sort_by_key(|role| role["metadata"]["name"].as_str().unwrap_or_default());
    let mut rules: Vec<PolicyRule> = Vec::new();
    for selector in selectors {
        for role in &by_name {
            if role["metadata"]["name"].as_str().unwrap_or_default() == own_name
                || !selector_matches(selector, &role["metadata"]["labels"])
            {
                continue;
            }
            for rule in PolicyRule::rules_of(role) {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
    }
    Some(rules)
}

#[cfg(test)]
mod tests;
