//! ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`): policies and bindings checked
//! and compiled once, then matched against each write and evaluated with CEL, after
//! `k8s.io/apiserver/pkg/admission/plugin/policy/validating` (dispatcher, validator),
//! `.../policy/generic` (`CollectParams`), the webhook rule matcher and
//! `pkg/apis/admissionregistration/validation`.
//!
//! A policy's `matchConstraints` (resource rules with `*`, subresources and resource names,
//! exclude rules, namespace and object label selectors, `matchPolicy`), `paramKind`,
//! `matchConditions`, `variables`, `validations` (`expression`, `message`,
//! `messageExpression`, `reason`) and `failurePolicy` are honoured, and a binding's
//! `paramRef`, `matchResources` and `validationActions` (`Deny`, `Warn`; `Audit` has no audit
//! log to write to). Expressions see `object`, `oldObject`, `request`, `namespaceObject`,
//! `variables` and `params`.
//!
//! Parameters are read at evaluation through a [`ParamSource`] (the server's store): a
//! `paramKind` no served resource has is the policy's configuration error; `paramRef.name`
//! names one object, `paramRef.selector` selects any number, each evaluated in turn; a
//! namespaced kind is read in `paramRef.namespace`, else in the request's namespace. A binding
//! without `paramRef` evaluates its policy once with null `params`, as the apiserver does.
//! Configuration errors (`failed to configure policy: ...`, `failed to configure binding:
//! ...`, among them `parameterNotFoundAction: Deny` finding nothing) deny under
//! `failurePolicy: Fail` and are ignored under `Ignore`.
//!
//! Not supported: the `authorizer` variable (using it is an evaluation error) and
//! `auditAnnotations` (checked, never evaluated). Expressions are parsed, not type-checked, as
//! the CRD rules of [`crate::schema`] are, so `params` is not typed after the param kind.

use std::collections::{BTreeMap, HashMap};

use kube_cel::KubeCelExt;
use kube_cel::cel;
use serde_json::{Value, json};

use crate::schema::FieldError;
use crate::schema::cel as rules;

/// `celconfig.MaxEvaluatedMessageExpressionSizeBytes`: longer messages fall back.
const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
const SCOPES: [&str; 3] = ["*", "Cluster", "Namespaced"];
const REASONS: [&str; 4] = [
    "Forbidden",
    "Invalid",
    "RequestEntityTooLarge",
    "Unauthorized",
];
const ACTIONS: [&str; 3] = ["Audit", "Deny", "Warn"];

// === requests ===

/// The operation of a request, as admission names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// One write as admission sees it (`admission.Attributes`).
#[derive(Clone, Debug)]
pub struct Request<'a> {
    pub operation: Operation,
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    /// The resource's plural.
    pub resource: &'a str,
    /// Empty for the main resource.
    pub subresource: &'a str,
    /// The other versions the same resource is served at (for `matchPolicy: Equivalent`).
    pub other_versions: &'a [String],
    /// Empty for cluster-scoped resources.
    pub namespace: &'a str,
    pub name: &'a str,
    /// The object as it would be stored; `None` on delete.
    pub object: Option<&'a Value>,
    /// The stored object; `None` on create.
    pub old_object: Option<&'a Value>,
    /// The request's Namespace: the namespace of a namespaced object, or the Namespace itself.
    pub namespace_object: Option<&'a Value>,
    pub username: &'a str,
    pub groups: &'a [String],
    pub dry_run: bool,
    /// The operation's options (`CreateOptions`, `UpdateOptions`, `DeleteOptions`).
    pub options: Option<&'a Value>,
}

impl Request<'_> {
    /// The `request` variable: an `admission.k8s.io/v1` `AdmissionRequest` as JSON (its
    /// `omitempty` fields left out when empty).
    fn to_value(&self, uid: &str) -> Value {
        let kind = json!({"group": self.group, "version": self.version, "kind": self.kind});
        let resource =
            json!({"group": self.group, "version": self.version, "resource": self.resource});
        let mut user = serde_json::Map::new();
        if !self.username.is_empty() {
            user.insert("username".into(), json!(self.username));
        }
        if !self.groups.is_empty() {
            user.insert("groups".into(), json!(self.groups));
        }
        let mut request = json!({
            "uid": uid,
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "operation": self.operation.as_str(),
            "userInfo": user,
            "dryRun": self.dry_run,
        });
        for (field, value) in [
            ("subResource", self.subresource),
            ("requestSubResource", self.subresource),
            ("name", self.name),
            ("namespace", self.namespace),
        ] {
            if !value.is_empty() {
                request[field] = json!(value);
            }
        }
        if let Some(options) = self.options {
            request["options"] = options.clone();
        }
        request
    }

    fn labels(object: Option<&Value>) -> Option<BTreeMap<String, String>> {
        let object = object?;
        Some(
            object["metadata"]["labels"]
                .as_object()
                .map(|labels| {
                    labels
                        .iter()
                        .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default(),
        )
    }
}

// === the outcome ===

/// The `reason` of a denial, which also decides its HTTP code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Forbidden,
    Invalid,
    Unauthorized,
    RequestEntityTooLarge,
}

impl Reason {
    fn parse(text: &str) -> Option<Reason> {
        match text {
            "Forbidden" => Some(Reason::Forbidden),
            "Invalid" => Some(Reason::Invalid),
            "Unauthorized" => Some(Reason::Unauthorized),
            "RequestEntityTooLarge" => Some(Reason::RequestEntityTooLarge),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Forbidden => "Forbidden",
            Reason::Invalid => "Invalid",
            Reason::Unauthorized => "Unauthorized",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
        }
    }

    /// `reasonToCode` of the validating policy plugin.
    pub fn code(self) -> u16 {
        match self {
            Reason::Forbidden => 403,
            Reason::Unauthorized => 401,
            Reason::RequestEntityTooLarge => 413,
            Reason::Invalid => 422,
        }
    }
}

/// The first denial of a request: which policy and binding, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub policy: String,
    /// `None` for an error in the policy's own configuration (its `paramKind`).
    pub binding: Option<String>,
    /// The validation's message (or the evaluation or configuration error).
    pub message: String,
    pub reason: Reason,
}

impl Denial {
    /// The cause the apiserver reports, also the end of the Status message
    /// (`<resource> "<name>" is forbidden: <this>`).
    pub fn cause(&self) -> String {
        match &self.binding {
            Some(binding) => format!(
                "ValidatingAdmissionPolicy '{}' with binding '{binding}' denied request: {}",
                self.policy, self.message
            ),
            None => format!(
                "ValidatingAdmissionPolicy '{}' denied request: {}",
                self.policy, self.message
            ),
        }
    }
}

/// What admission decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The first denial, if any.
    pub denial: Option<Denial>,
    /// `Warning` headers of bindings with the `Warn` action.
    pub warnings: Vec<String>,
}

// === match rules ===

#[derive(Clone, Debug, Default)]
struct Rule {
    operations: Vec<String>,
    api_groups: Vec<String>,
    api_versions: Vec<String>,
    resources: Vec<String>,
    scope: String,
    resource_names: Vec<String>,
}

fn any_or(list: &[String], value: &str) -> bool {
    list.iter().any(|item| item == "*" || item == value)
}

impl Rule {
    /// The webhook rule matcher (`rules.Matcher`), with the versions the request's resource
    /// is served at when `matchPolicy` is Equivalent.
    fn matches(&self, request: &Request<'_>, equivalent: bool) -> bool {
        let is_namespace = request.group.is_empty() && request.resource == "namespaces";
        let scope = match self.scope.as_str() {
            "Cluster" => is_namespace || request.namespace.is_empty(),
            "Namespaced" => !is_namespace && !request.namespace.is_empty(),
            _ => true,
        };
        let version = any_or(&self.api_versions, request.version)
            || (equivalent
                && request
                    .other_versions
                    .iter()
                    .any(|version| any_or(&self.api_versions, version)));
        let resource = self.resources.iter().any(|pattern| {
            let (resource, subresource) = pattern.split_once('/').unwrap_or((pattern, ""));
            (resource == "*" || resource == request.resource)
                && (subresource == "*" || subresource == request.subresource)
        });
        let name = self.resource_names.is_empty()
            || self.resource_names.iter().any(|name| name == request.name);
        scope
            && any_or(&self.operations, request.operation.as_str())
            && any_or(&self.api_groups, request.group)
            && version
            && resource
            && name
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A `metav1.LabelSelector`; empty matches everything.
#[derive(Clone, Debug, Default)]
struct LabelSelector {
    match_labels: BTreeMap<String, String>,
    expressions: Vec<(String, SelectorOperator, Vec<String>)>,
}

impl LabelSelector {
    fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.expressions.is_empty()
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
            && self
                .expressions
                .iter()
                .all(|(key, operator, values)| match operator {
                    SelectorOperator::In => labels.get(key).is_some_and(|v| values.contains(v)),
                    SelectorOperator::NotIn => !labels.get(key).is_some_and(|v| values.contains(v)),
                    SelectorOperator::Exists => labels.contains_key(key),
                    SelectorOperator::DoesNotExist => !labels.contains_key(key),
                })
    }
}

#[derive(Clone, Debug, Default)]
struct MatchResources {
    namespace_selector: LabelSelector,
    object_selector: LabelSelector,
    resource_rules: Vec<Rule>,
    exclude_resource_rules: Vec<Rule>,
    equivalent: bool,
}

impl MatchResources {
    /// `matching.Matcher.Matches`: namespace selector, object selector, exclusions, rules
    /// (no rules at all match every resource, as a binding's may).
    fn matches(&self, request: &Request<'_>) -> bool {
        let is_namespace = request.group.is_empty() && request.resource == "namespaces";
        // Cluster-scoped objects other than namespaces are never excluded by a namespace
        // selector.
        let namespace_matches = self.namespace_selector.is_empty()
            || (request.namespace.is_empty() && !is_namespace)
            || Request::labels(request.namespace_object)
                .is_some_and(|labels| self.namespace_selector.matches(&labels));
        let object_matches = self.object_selector.is_empty()
            || [request.object, request.old_object]
                .into_iter()
                .any(|object| {
                    Request::labels(object)
                        .is_some_and(|labels| self.object_selector.matches(&labels))
                });
        namespace_matches
            && object_matches
            && !self
                .exclude_resource_rules
                .iter()
                .any(|rule| rule.matches(request, self.equivalent))
            && (self.resource_rules.is_empty()
                || self
                    .resource_rules
                    .iter()
                    .any(|rule| rule.matches(request, self.equivalent)))
    }
}

// === parameters ===

/// A policy's `spec.paramKind`: the kind of the objects that parameterize it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamKind {
    /// Empty for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl ParamKind {
    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl std::fmt::Display for ParamKind {
    /// `schema.GroupVersionKind.String()`, which the apiserver's messages quote.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
    }
}

/// How the resource serving a param kind is scoped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamScope {
    Cluster,
    Namespaced,
}

/// Where evaluation reads parameters: the objects as stored when the request is admitted (the
/// apiserver reads them from its informers).
pub trait ParamSource {
    /// The scope of the served resource of `kind`, or `None` when no served resource has that
    /// group, version and kind (the apiserver's REST mapper finds none).
    fn scope(&self, kind: &ParamKind) -> Option<ParamScope>;

    /// The object `name` of `kind` in `namespace` (empty for a cluster-scoped kind), as read at
    /// `kind`'s version.
    fn get(&self, kind: &ParamKind, namespace: &str, name: &str) -> Option<Value>;

    /// The objects of `kind` in `namespace` (every one for a cluster-scoped kind) whose labels
    /// `select` accepts, as read at `kind`'s version.
    fn list(
        &self,
        kind: &ParamKind,
        namespace: &str,
        select: &dyn Fn(&BTreeMap<String, String>) -> bool,
    ) -> Vec<Value>;
}

/// A binding's `spec.paramRef`, checked.
#[derive(Debug)]
struct ParamRef {
    /// Empty when `selector` is set.
    name: String,
    namespace: String,
    selector: Option<LabelSelector>,
    /// `parameterNotFoundAction: Deny`.
    deny_when_none: bool,
}

/// Why a policy or binding cannot be evaluated, in the apiserver's words (the dispatcher
/// prefixes `failed to configure policy: ` or `failed to configure binding: `).
#[derive(Debug, thiserror::Error)]
enum ConfigurationError {
    #[error("failed to find resource referenced by paramKind: '{0}'")]
    UnknownParamKind(ParamKind),
    #[error(
        "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
    )]
    NamespacedParamWithoutNamespace,
    #[error("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")]
    NamespaceOfClusterScopedParam,
    #[error("no params found for policy binding with `Deny` parameterNotFoundAction")]
    NoParams,
}

/// `generic.CollectParams`: the params a binding's policy is evaluated with, each in turn
/// (`None` is a null `params`: the policy has no `paramKind` or the binding no `paramRef`).
/// An empty list evaluates nothing (`parameterNotFoundAction: Allow` found none).
fn collect_params(
    param_kind: Option<(&ParamKind, ParamScope)>,
    param_ref: Option<&ParamRef>,
    request_namespace: &str,
    source: &dyn ParamSource,
) -> Result<Vec<Option<Value>>, ConfigurationError> {
    let (Some((kind, scope)), Some(param_ref)) = (param_kind, param_ref) else {
        return Ok(vec![None]);
    };
    let namespace = match scope {
        ParamScope::Namespaced if !param_ref.namespace.is_empty() => param_ref.namespace.as_str(),
        ParamScope::Namespaced if !request_namespace.is_empty() => request_namespace,
        ParamScope::Namespaced => return Err(ConfigurationError::NamespacedParamWithoutNamespace),
        ParamScope::Cluster if !param_ref.namespace.is_empty() => {
            return Err(ConfigurationError::NamespaceOfClusterScopedParam);
        }
        ParamScope::Cluster => "",
    };
    let params = match &param_ref.selector {
        Some(selector) => source.list(kind, namespace, &|labels| selector.matches(labels)),
        None => source
            .get(kind, namespace, &param_ref.name)
            .into_iter()
            .collect(),
    };
    if params.is_empty() && param_ref.deny_when_none {
        return Err(ConfigurationError::NoParams);
    }
    Ok(params.into_iter().map(Some).collect())
}

// === compiled expressions ===

/// One CEL expression of a policy.
struct Expression {
    source: String,
    parsed: cel::parser::Expression,
    comprehensions: u32,
    /// The `variables.<name>` it reads.
    variables: Vec<String>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expression")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

fn compile_expression(source: &str) -> Result<Expression, String> {
    let parsed = rules::parse(source)?;
    let mut variables = Vec::new();
    collect_variables(&parsed, &mut variables);
    Ok(Expression {
        source: source.to_string(),
        comprehensions: rules::comprehension_depth(&parsed),
        parsed,
        variables,
    })
}

/// The names selected from `variables` anywhere in the expression.
fn collect_variables(expression: &cel::parser::Expression, found: &mut Vec<String>) {
    use cel::common::ast::Expr;
    if let Expr::Select(select) = &expression.expr
        && let Expr::Ident(name) = &select.operand.expr
        && name == "variables"
        && !found.contains(&select.field)
    {
        found.push(select.field.clone());
    }
    for child in rules::children(expression) {
        collect_variables(child, found);
    }
}

#[derive(Debug)]
struct Validation {
    expression: Expression,
    message: Option<String>,
    message_expression: Option<Expression>,
    reason: Option<Reason>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FailurePolicy {
    Fail,
    Ignore,
}

/// A ValidatingAdmissionPolicy, checked and compiled.
#[derive(Debug)]
pub struct Policy {
    name: String,
    failure_policy: FailurePolicy,
    param_kind: Option<ParamKind>,
    match_constraints: MatchResources,
    match_conditions: Vec<(String, Expression)>,
    variables: Vec<(String, Expression)>,
    validations: Vec<Validation>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Deny,
    Warn,
    Audit,
}

/// A ValidatingAdmissionPolicyBinding, checked.
#[derive(Debug)]
pub struct Binding {
    name: String,
    policy_name: String,
    param_ref: Option<ParamRef>,
    actions: Vec<Action>,
    match_resources: Option<MatchResources>,
}

impl Binding {
    /// The policy this binding binds.
    pub fn policy_name(&self) -> &str {
        &self.policy_name
    }
}

// === defaults and validation at create and update ===

/// The defaults the apiserver sets on a policy (`SetDefaults_ValidatingAdmissionPolicySpec`):
/// `failurePolicy: Fail`, and the match resources' defaults.
pub fn default_policy(policy: &mut Value) {
    let Some(spec) = policy.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("failurePolicy").or_insert_with(|| json!("Fail"));
    if let Some(constraints) = spec.get_mut("matchConstraints") {
        default_match_resources(constraints);
    }
}

/// The defaults the apiserver sets on a binding (its match resources').
pub fn default_binding(binding: &mut Value) {
    if let Some(resources) = binding
        .get_mut("spec")
        .and_then(|spec| spec.get_mut("matchResources"))
    {
        default_match_resources(resources);
    }
}

fn default_match_resources(resources: &mut Value) {
    let Some(map) = resources.as_object_mut() else {
        return;
    };
    map.entry("matchPolicy")
        .or_insert_with(|| json!("Equivalent"));
    map.entry("namespaceSelector").or_insert_with(|| json!({}));
    map.entry("objectSelector").or_insert_with(|| json!({}));
    for rules in ["resourceRules", "excludeResourceRules"] {
        if let Some(list) = map.get_mut(rules).and_then(Value::as_array_mut) {
            for rule in list.iter_mut().filter_map(Value::as_object_mut) {
                rule.entry("scope").or_insert_with(|| json!("*"));
            }
        }
    }
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

fn supported(list: &[&str]) -> Vec<String> {
    list.iter().map(|item| item.to_string()).collect()
}

/// `validateRuleWithOperations` and `validateNamedRuleWithOperations`.
fn check_rule(rule: &Value, path: &str, errors: &mut Vec<FieldError>) -> Rule {
    let operations = strings(&rule["operations"]);
    if operations.is_empty() {
        errors.push(FieldError::required(format!("{path}.operations"), ""));
    }
    if operations.len() > 1 && operations.iter().any(|o| o == "*") {
        errors.push(FieldError::invalid_strings(
            format!("{path}.operations"),
            &operations,
            "if '*' is present, must not specify other operations",
        ));
    }
    for (index, operation) in operations.iter().enumerate() {
        if !OPERATIONS.contains(&operation.as_str()) {
            errors.push(FieldError::not_supported(
                format!("{path}.operations[{index}]"),
                json!(operation),
                &supported(&OPERATIONS),
            ));
        }
    }
    let api_groups = strings(&rule["apiGroups"]);
    if api_groups.is_empty() {
        errors.push(FieldError::required(format!("{path}.apiGroups"), ""));
    }
    if api_groups.len() > 1 && api_groups.iter().any(|g| g == "*") {
        errors.push(FieldError::invalid_strings(
            format!("{path}.apiGroups"),
            &api_groups,
            "if '*' is present, must not specify other API groups",
        ));
    }
    let api_versions = strings(&rule["apiVersions"]);
    if api_versions.is_empty() {
        errors.push(FieldError::required(format!("{path}.apiVersions"), ""));
    }
    if api_versions.len() > 1 && api_versions.iter().any(|v| v == "*") {
        errors.push(FieldError::invalid_strings(
            format!("{path}.apiVersions"),
            &api_versions,
            "if '*' is present, must not specify other API versions",
        ));
    }
    for (index, version) in api_versions.iter().enumerate() {
        if version.is_empty() {
            errors.push(FieldError::required(
                format!("{path}.apiVersions[{index}]"),
                "",
            ));
        }
    }
    let resources = strings(&rule["resources"]);
    check_resources(&resources, &format!("{path}.resources"), errors);
    let scope = rule["scope"].as_str().unwrap_or("*").to_string();
    if !SCOPES.contains(&scope.as_str()) {
        errors.push(FieldError::not_supported(
            format!("{path}.scope"),
            json!(scope),
            &supported(&SCOPES),
        ));
    }
    let resource_names = strings(&rule["resourceNames"]);
    for (index, name) in resource_names.iter().enumerate() {
        if resource_names[..index].contains(name) {
            errors.push(FieldError::duplicate(
                format!("{path}.resourceNames[{index}]"),
                json!(name),
            ));
        }
    }
    Rule {
        operations,
        api_groups,
        api_versions,
        resources,
        scope,
        resource_names,
    }
}

/// `validateResources`: wildcards of resources and subresources.
fn check_resources(resources: &[String], path: &str, errors: &mut Vec<FieldError>) {
    if resources.is_empty() {
        errors.push(FieldError::required(path, ""));
    }
    let mut wildcard_subresources: Vec<&str> = Vec::new();
    let mut wildcard_resources: Vec<&str> = Vec::new();
    let mut has_single_wildcard = false;
    let mut has_resource_without_subresource = false;
    for (index, pattern) in resources.iter().enumerate() {
        if pattern.is_empty() {
            errors.push(FieldError::required(format!("{path}[{index}]"), ""));
            continue;
        }
        if pattern == "*" {
            has_single_wildcard = true;
        }
        let Some((resource, subresource)) = pattern.split_once('/') else {
            has_resource_without_subresource = pattern != "*";
            continue;
        };
        if wildcard_subresources.contains(&resource) {
            errors.push(FieldError::invalid(
                format!("{path}[{index}]"),
                json!(pattern),
                format!("if '{resource}/*' is present, must not specify {pattern}"),
            ));
        }
        if wildcard_resources.contains(&subresource) {
            errors.push(FieldError::invalid(
                format!("{path}[{index}]"),
                json!(pattern),
                format!("if '*/{subresource}' is present, must not specify {pattern}"),
            ));
        }
        if subresource == "*" {
            wildcard_subresources.push(resource);
        }
        if resource == "*" {
            wildcard_resources.push(subresource);
        }
    }
    if resources.len() > 1 && resources.iter().any(|r| r == "*/*") {
        errors.push(FieldError::invalid_strings(
            path,
            resources,
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if has_single_wildcard && has_resource_without_subresource {
        errors.push(FieldError::invalid_strings(
            path,
            resources,
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
}

/// `metav1validation.ValidateLabelSelector` (operators and values).
fn check_selector(selector: &Value, path: &str, errors: &mut Vec<FieldError>) -> LabelSelector {
    let mut parsed = LabelSelector::default();
    if let Some(labels) = selector["matchLabels"].as_object() {
        for (key, value) in labels {
            parsed
                .match_labels
                .insert(key.clone(), value.as_str().unwrap_or_default().to_string());
        }
    }
    for (index, requirement) in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{path}.matchExpressions[{index}]");
        let key = requirement["key"].as_str().unwrap_or_default().to_string();
        let values = strings(&requirement["values"]);
        let operator = match requirement["operator"].as_str().unwrap_or_default() {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            other => {
                errors.push(FieldError::invalid(
                    format!("{at}.operator"),
                    json!(other),
                    "not a valid selector operator",
                ));
                continue;
            }
        };
        match operator {
            SelectorOperator::In | SelectorOperator::NotIn if values.is_empty() => {
                errors.push(FieldError::required(
                    format!("{at}.values"),
                    "must be specified when `operator` is 'In' or 'NotIn'",
                ));
            }
            SelectorOperator::Exists | SelectorOperator::DoesNotExist if !values.is_empty() => {
                errors.push(FieldError::forbidden(
                    format!("{at}.values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ));
            }
            _ => {}
        }
        parsed.expressions.push((key, operator, values));
    }
    parsed
}

/// apimachinery's `IsDNS1123Subdomain`, in its words.
fn dns1123_subdomain_problems(value: &str) -> Vec<String> {
    let label_ok = |label: &str| {
        label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let mut problems = Vec::new();
    if value.len() > 253 {
        problems.push("must be no more than 253 characters".to_string());
    }
    if !value.split('.').all(label_ok) {
        problems.push("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string());
    }
    problems
}

/// apimachinery's `IsDNS1035Label`, in its words.
fn dns1035_label_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 63 {
        problems.push("must be no more than 63 characters".to_string());
    }
    let valid = value.starts_with(|c: char| c.is_ascii_lowercase())
        && value.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        problems.push("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".to_string());
    }
    problems
}

/// `path.ValidatePathSegmentName`: a name that can be a URL path segment.
fn path_segment_problems(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .into_iter()
        .filter(|illegal| name.contains(illegal))
        .map(|illegal| format!("may not contain '{illegal}'"))
        .collect()
}

/// `validateParamKind`: `apiVersion` (`group/version` or a core `version`) and `kind`.
fn check_param_kind(
    param_kind: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> Option<ParamKind> {
    let before = errors.len();
    let api_version = param_kind["apiVersion"].as_str().unwrap_or_default();
    let mut group_version = None;
    if api_version.is_empty() {
        errors.push(FieldError::required(format!("{path}.apiVersion"), ""));
    } else if api_version.matches('/').count() > 1 {
        errors.push(FieldError::invalid(
            format!("{path}.apiVersion"),
            json!(api_version),
            format!("unexpected GroupVersion string: {api_version}"),
        ));
    } else {
        // `parseGroupVersion`: "/" is the empty group version.
        let (group, version) = match api_version {
            "/" => ("", ""),
            _ => api_version.split_once('/').unwrap_or(("", api_version)),
        };
        if !group.is_empty() {
            let problems = dns1123_subdomain_problems(group);
            if !problems.is_empty() {
                errors.push(FieldError::invalid(
                    format!("{path}.apiVersion"),
                    json!(group),
                    problems.join(","),
                ));
            }
        }
        if version.is_empty() {
            errors.push(FieldError::invalid(
                format!("{path}.apiVersion"),
                json!(api_version),
                "version must be specified",
            ));
        } else {
            let problems = dns1035_label_problems(version);
            if !problems.is_empty() {
                errors.push(FieldError::invalid(
                    format!("{path}.apiVersion"),
                    json!(version),
                    problems.join(","),
                ));
            }
        }
        group_version = Some((group.to_string(), version.to_string()));
    }
    let kind = param_kind["kind"].as_str().unwrap_or_default();
    if kind.is_empty() {
        errors.push(FieldError::required(format!("{path}.kind"), ""));
    } else {
        let problems = dns1035_label_problems(&kind.to_lowercase());
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                format!("{path}.kind"),
                json!(kind),
                format!(
                    "may have mixed case, but should otherwise match: {}",
                    problems.join(",")
                ),
            ));
        }
    }
    let (group, version) = group_version?;
    (errors.len() == before).then(|| ParamKind {
        group,
        version,
        kind: kind.to_string(),
    })
}

/// `validateParamRef`: `name` or `selector` (exactly one) and `parameterNotFoundAction`.
fn check_param_ref(param_ref: &Value, path: &str, errors: &mut Vec<FieldError>) -> ParamRef {
    let name = param_ref["name"].as_str().unwrap_or_default();
    let has_selector = !param_ref["selector"].is_null();
    if !name.is_empty() {
        for problem in path_segment_problems(name) {
            errors.push(FieldError::invalid(
                format!("{path}.name"),
                json!(name),
                problem,
            ));
        }
        if has_selector {
            errors.push(FieldError::forbidden(
                format!("{path}.name"),
                "name and selector are mutually exclusive",
            ));
        }
    }
    let selector = has_selector.then(|| {
        let selector = check_selector(&param_ref["selector"], &format!("{path}.selector"), errors);
        if !name.is_empty() {
            errors.push(FieldError::forbidden(
                format!("{path}.selector"),
                "name and selector are mutually exclusive",
            ));
        }
        selector
    });
    if name.is_empty() && !has_selector {
        errors.push(FieldError::required(
            path,
            "one of name or selector must be specified",
        ));
    }
    let action = param_ref["parameterNotFoundAction"]
        .as_str()
        .unwrap_or_default();
    match action {
        "" => errors.push(FieldError::required(
            format!("{path}.parameterNotFoundAction"),
            "",
        )),
        "Deny" | "Allow" => {}
        other => errors.push(FieldError::not_supported(
            format!("{path}.parameterNotFoundAction"),
            json!(other),
            &supported(&["Deny", "Allow"]),
        )),
    }
    ParamRef {
        name: name.to_string(),
        namespace: param_ref["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        selector,
        deny_when_none: action == "Deny",
    }
}

/// `validateMatchResources` (after defaulting).
fn check_match_resources(
    resources: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> MatchResources {
    let equivalent = match resources["matchPolicy"].as_str() {
        Some("Equivalent") | None => true,
        Some("Exact") => false,
        Some(other) => {
            errors.push(FieldError::not_supported(
                format!("{path}.matchPolicy"),
                json!(other),
                &supported(&["Equivalent", "Exact"]),
            ));
            true
        }
    };
    let rules = |field: &str, errors: &mut Vec<FieldError>| -> Vec<Rule> {
        resources[field]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(index, rule)| check_rule(rule, &format!("{path}.{field}[{index}]"), errors))
            .collect()
    };
    let resource_rules = rules("resourceRules", errors);
    let exclude_resource_rules = rules("excludeResourceRules", errors);
    MatchResources {
        namespace_selector: check_selector(
            &resources["namespaceSelector"],
            &format!("{path}.namespaceSelector"),
            errors,
        ),
        object_selector: check_selector(
            &resources["objectSelector"],
            &format!("{path}.objectSelector"),
            errors,
        ),
        resource_rules,
        exclude_resource_rules,
        equivalent,
    }
}

fn compile_into(source: &str, path: &str, errors: &mut Vec<FieldError>) -> Option<Expression> {
    match compile_expression(source) {
        Ok(expression) => Some(expression),
        Err(error) => {
            errors.push(FieldError::invalid(
                path,
                json!(source),
                format!("compilation failed: {error}"),
            ));
            None
        }
    }
}

/// Whether `name` is a CEL identifier (`[_a-zA-Z][_a-zA-Z0-9]*`) and not a reserved word.
fn is_cel_identifier(name: &str) -> bool {
    let mut characters = name.chars();
    characters
        .next()
        .is_some_and(|first| first == '_' || first.is_ascii_alphabetic())
        && characters.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !crate::schema::cost::CEL_RESERVED_WORDS.contains(&name)
        && name != "__proto__"
}

impl Policy {
    /// Checks a (defaulted) policy as the apiserver's validation does and compiles its
    /// expressions; the errors name fields from the object's root (`spec.validations[0]...`).
    pub fn compile(policy: &Value) -> Result<Policy, Vec<FieldError>> {
        let mut errors = Vec::new();
        let spec = &policy["spec"];
        let failure_policy = match spec["failurePolicy"].as_str() {
            Some("Fail") => FailurePolicy::Fail,
            Some("Ignore") => FailurePolicy::Ignore,
            None => {
                errors.push(FieldError::required("spec.failurePolicy", ""));
                FailurePolicy::Fail
            }
            Some(other) => {
                errors.push(FieldError::not_supported(
                    "spec.failurePolicy",
                    json!(other),
                    &supported(&["Fail", "Ignore"]),
                ));
                FailurePolicy::Fail
            }
        };
        let param_kind = (!spec["paramKind"].is_null())
            .then(|| check_param_kind(&spec["paramKind"], "spec.paramKind", &mut errors))
            .flatten();
        let match_constraints = if spec["matchConstraints"].is_null() {
            errors.push(FieldError::required("spec.matchConstraints", ""));
            MatchResources::default()
        } else {
            let constraints = check_match_resources(
                &spec["matchConstraints"],
                "spec.matchConstraints",
                &mut errors,
            );
            if constraints.resource_rules.is_empty() {
                errors.push(FieldError::required(
                    "spec.matchConstraints.resourceRules",
                    "",
                ));
            }
            constraints
        };
        let mut match_conditions = Vec::new();
        for (index, condition) in spec["matchConditions"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let path = format!("spec.matchConditions[{index}]");
            let name = condition["name"].as_str().unwrap_or_default();
            if name.is_empty() {
                errors.push(FieldError::required(format!("{path}.name"), ""));
            } else if match_conditions.iter().any(|(n, _)| n == name) {
                errors.push(FieldError::duplicate(format!("{path}.name"), json!(name)));
            }
            let source = condition["expression"].as_str().unwrap_or_default();
            if source.trim().is_empty() {
                errors.push(FieldError::required(format!("{path}.expression"), ""));
            } else if let Some(expression) =
                compile_into(source.trim(), &format!("{path}.expression"), &mut errors)
            {
                match_conditions.push((name.to_string(), expression));
            }
        }
        let mut variables = Vec::new();
        for (index, variable) in spec["variables"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let path = format!("spec.variables[{index}]");
            let name = variable["name"].as_str().unwrap_or_default();
            if name.trim().is_empty() {
                errors.push(FieldError::required(
                    format!("{path}.name"),
                    "name is not specified",
                ));
            } else if !is_cel_identifier(name) {
                errors.push(FieldError::invalid(
                    format!("{path}.name"),
                    json!(name),
                    "name is not a valid CEL identifier",
                ));
            }
            let source = variable["expression"].as_str().unwrap_or_default();
            if source.trim().is_empty() {
                errors.push(FieldError::required(
                    format!("{path}.expression"),
                    "expression is not specified",
                ));
            } else if let Some(expression) =
                compile_into(source, &format!("{path}.expression"), &mut errors)
            {
                variables.push((name.to_string(), expression));
            }
        }
        let validations = Self::compile_validations(spec, &mut errors);
        if !spec["auditAnnotations"].is_null() && !spec["auditAnnotations"].is_array() {
            errors.push(FieldError::invalid(
                "spec.auditAnnotations",
                spec["auditAnnotations"].clone(),
                "must be a list",
            ));
        }
        if errors.is_empty() {
            Ok(Policy {
                name: policy["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                failure_policy,
                param_kind,
                match_constraints,
                match_conditions,
                variables,
                validations,
            })
        } else {
            Err(errors)
        }
    }

    fn compile_validations(spec: &Value, errors: &mut Vec<FieldError>) -> Vec<Validation> {
        let has_audit_annotations = spec["auditAnnotations"]
            .as_array()
            .is_some_and(|list| !list.is_empty());
        let listed = spec["validations"].as_array().cloned().unwrap_or_default();
        if listed.is_empty() && !has_audit_annotations {
            for field in ["spec.validations", "spec.auditAnnotations"] {
                errors.push(FieldError::required(
                    field,
                    "validations or auditAnnotations must contain at least one item",
                ));
            }
        }
        let mut validations = Vec::new();
        for (index, validation) in listed.iter().enumerate() {
            let path = format!("spec.validations[{index}]");
            let source = validation["expression"].as_str().unwrap_or_default();
            let expression = if source.trim().is_empty() {
                errors.push(FieldError::required(
                    format!("{path}.expression"),
                    "expression is not specified",
                ));
                None
            } else {
                compile_into(source, &format!("{path}.expression"), errors)
            };
            let message_expression = match validation["messageExpression"].as_str() {
                Some(text) if !text.is_empty() && text.trim().is_empty() => {
                    errors.push(FieldError::invalid(
                        format!("{path}.messageExpression"),
                        json!(text),
                        "must be non-empty if specified",
                    ));
                    None
                }
                Some(text) if !text.is_empty() => {
                    compile_into(text, &format!("{path}.messageExpression"), errors)
                }
                _ => None,
            };
            let message = validation["message"].as_str().map(str::to_string);
            if let Some(text) = &message {
                if !text.is_empty() && text.trim().is_empty() {
                    errors.push(FieldError::invalid(
                        format!("{path}.message"),
                        json!(text),
                        "message must be non-empty if specified",
                    ));
                } else if text.trim().contains(['\n', '\r']) {
                    errors.push(FieldError::invalid(
                        format!("{path}.message"),
                        json!(text),
                        "message must not contain line breaks",
                    ));
                }
            }
            let reason = match validation["reason"].as_str() {
                None => None,
                Some(text) => match Reason::parse(text) {
                    Some(reason) => Some(reason),
                    None => {
                        errors.push(FieldError::not_supported(
                            format!("{path}.reason"),
                            json!(text),
                            &supported(&REASONS),
                        ));
                        None
                    }
                },
            };
            if let Some(expression) = expression {
                validations.push(Validation {
                    expression,
                    message: message.filter(|text| !text.trim().is_empty()),
                    message_expression,
                    reason,
                });
            }
        }
        validations
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Binding {
    /// Checks a (defaulted) binding as the apiserver's validation does.
    pub fn compile(binding: &Value) -> Result<Binding, Vec<FieldError>> {
        let mut errors = Vec::new();
        let spec = &binding["spec"];
        let policy_name = spec["policyName"].as_str().unwrap_or_default().to_string();
        if policy_name.is_empty() {
            errors.push(FieldError::required("spec.policyName", ""));
        }
        let param_ref = (!spec["paramRef"].is_null())
            .then(|| check_param_ref(&spec["paramRef"], "spec.paramRef", &mut errors));
        // The apiserver's path has this spelling (`matchResouces`).
        let match_resources = (!spec["matchResources"].is_null()).then(|| {
            check_match_resources(&spec["matchResources"], "spec.matchResouces", &mut errors)
        });
        let listed = strings(&spec["validationActions"]);
        let mut actions = Vec::new();
        for (index, action) in listed.iter().enumerate() {
            let path = format!("spec.validationActions[{index}]");
            let parsed = match action.as_str() {
                "Deny" => Action::Deny,
                "Warn" => Action::Warn,
                "Audit" => Action::Audit,
                _ => {
                    errors.push(FieldError::not_supported(
                        &path,
                        json!(action),
                        &supported(&ACTIONS),
                    ));
                    continue;
                }
            };
            if actions.contains(&parsed) {
                errors.push(FieldError::duplicate(&path, json!(action)));
            }
            actions.push(parsed);
        }
        if actions.contains(&Action::Deny) && actions.contains(&Action::Warn) {
            errors.push(FieldError::invalid_strings(
                "spec.validationActions",
                &listed,
                "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ));
        }
        if listed.is_empty() {
            errors.push(FieldError::required(
                "spec.validationActions",
                "at least one validation action is required",
            ));
        }
        if errors.is_empty() {
            Ok(Binding {
                name: binding["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                policy_name,
                param_ref,
                actions,
                match_resources,
            })
        } else {
            Err(errors)
        }
    }
}

// === evaluation ===

/// One validation's decision (`PolicyDecision`).
enum Decision {
    Admit,
    /// A failed validation, or an evaluation error under `failurePolicy: Fail`.
    Deny {
        message: String,
        reason: Reason,
    },
}

/// The variables every expression of one evaluation sees.
#[derive(Clone)]
struct Activation {
    object: cel::Value,
    old_object: cel::Value,
    request: cel::Value,
    namespace_object: cel::Value,
    params: cel::Value,
    /// The nodes of the objects and params, for the cost estimate.
    size: u64,
}

fn cel_or_null(value: Option<&Value>) -> cel::Value {
    value.map_or(cel::Value::Null, |value| rules::to_cel(None, value))
}

/// `CreateNamespaceObject`: the fields of the Namespace expressions may read.
fn namespace_view(namespace: &Value) -> Value {
    let metadata = &namespace["metadata"];
    let mut view_metadata = serde_json::Map::new();
    for field in [
        "name",
        "generateName",
        "namespace",
        "labels",
        "annotations",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
    ] {
        if let Some(value) = metadata.get(field).filter(|value| !value.is_null()) {
            view_metadata.insert(field.to_string(), value.clone());
        }
    }
    json!({
        "metadata": view_metadata,
        "spec": namespace.get("spec").cloned().unwrap_or_else(|| json!({})),
        "status": namespace.get("status").cloned().unwrap_or_else(|| json!({})),
    })
}

impl Activation {
    fn scope<'a>(
        &self,
        base: &'a cel::Context<'a>,
        variables: &HashMap<String, cel::Value>,
    ) -> cel::Context<'a> {
        let mut scope = base.new_inner_scope();
        scope.add_variable_from_value("object", self.object.clone());
        scope.add_variable_from_value("oldObject", self.old_object.clone());
        scope.add_variable_from_value("request", self.request.clone());
        scope.add_variable_from_value("namespaceObject", self.namespace_object.clone());
        scope.add_variable_from_value("params", self.params.clone());
        scope.add_variable_from_value("variables", cel::Value::from(variables.clone()));
        scope
    }
}

/// Evaluates one expression, or the error the apiserver reports for it
/// (`expression '...' resulted in error: ...`).
fn run(
    expression: &Expression,
    activation: &Activation,
    base: &cel::Context<'_>,
    variables: &HashMap<String, cel::Value>,
    failed_variables: &HashMap<String, String>,
) -> Result<cel::Value, String> {
    let failed = |error: String| {
        format!(
            "expression '{}' resulted in error: {error}",
            expression.source
        )
    };
    if let Some(error) = expression
        .variables
        .iter()
        .find_map(|name| failed_variables.get(name))
    {
        return Err(failed(error.clone()));
    }
    let estimate = (0..expression.comprehensions.max(1))
        .fold(1u64, |cost, _| cost.saturating_mul(activation.size));
    if estimate > rules::PER_CALL_LIMIT {
        return Err(failed(
            "operation cancelled: actual cost limit exceeded".to_string(),
        ));
    }
    let scope = activation.scope(base, variables);
    // The interpreter is third-party code evaluating user input: a panic is this
    // expression's error, not the server's.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cel::Value::resolve(&expression.parsed, &scope)
    }));
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(cel::ExecutionError::NoSuchOverload)) => Err(failed("no such overload".into())),
        Ok(Err(error)) => Err(failed(rules::execution_error(&error))),
        Err(_) => Err(failed("internal error".into())),
    }
}

impl Policy {
    /// `validator.Validate` for one binding: match conditions, then each validation.
    fn validate(&self, activation: &Activation, base: &cel::Context<'_>) -> Vec<Decision> {
        let on_error = |message: String| match self.failure_policy {
            FailurePolicy::Fail => Decision::Deny {
                message,
                reason: Reason::Invalid,
            },
            FailurePolicy::Ignore => Decision::Admit,
        };
        // Variables are evaluated in order; one that fails fails what reads it.
        let mut variables = HashMap::new();
        let mut failed_variables = HashMap::new();
        for (name, expression) in &self.variables {
            match run(expression, activation, base, &variables, &failed_variables) {
                Ok(value) => {
                    variables.insert(name.clone(), value);
                }
                Err(error) => {
                    failed_variables.insert(name.clone(), error);
                }
            }
        }
        let mut condition_errors = Vec::new();
        for (_, expression) in &self.match_conditions {
            match run(expression, activation, base, &variables, &failed_variables) {
                Ok(cel::Value::Bool(false)) => return Vec::new(),
                Ok(_) => {}
                Err(error) => condition_errors.push(error),
            }
        }
        if !condition_errors.is_empty() {
            let message = match condition_errors.len() {
                1 => condition_errors.concat(),
                _ => format!("[{}]", condition_errors.join(", ")),
            };
            return vec![on_error(message)];
        }
        self.validations
            .iter()
            .map(|validation| {
                match run(
                    &validation.expression,
                    activation,
                    base,
                    &variables,
                    &failed_variables,
                ) {
                    Ok(cel::Value::Bool(true)) => Decision::Admit,
                    Ok(_) => Decision::Deny {
                        message: failure_message(
                            validation,
                            activation,
                            base,
                            &variables,
                            &failed_variables,
                        ),
                        reason: validation.reason.unwrap_or(Reason::Invalid),
                    },
                    Err(error) => on_error(error),
                }
            })
            .collect()
    }
}

/// The message of a failed validation: `messageExpression` when it yields a usable string,
/// else `message`, else `failed expression: <expression>`.
fn failure_message(
    validation: &Validation,
    activation: &Activation,
    base: &cel::Context<'_>,
    variables: &HashMap<String, cel::Value>,
    failed_variables: &HashMap<String, String>,
) -> String {
    let evaluated = validation
        .message_expression
        .as_ref()
        .and_then(|expression| {
            match run(expression, activation, base, variables, failed_variables) {
                Ok(cel::Value::String(text)) => Some(text.trim().to_string()),
                _ => None,
            }
        });
    if let Some(text) = evaluated
        && !text.is_empty()
        && text.len() <= MAX_MESSAGE_EXPRESSION_BYTES
        && !text.contains('\n')
    {
        return text;
    }
    match &validation.message {
        Some(message) => message.trim().to_string(),
        None => format!("failed expression: {}", validation.expression.source.trim()),
    }
}

/// Runs every policy whose constraints match `request`, with each of its bindings that
/// matches and each of the binding's params (read from `params`), as the apiserver's
/// dispatcher does: the first denial wins (a validation's, or a configuration error's under
/// `failurePolicy: Fail`); `Warn` bindings add warnings. `uid` is the request's `request.uid`.
pub fn evaluate(
    bound: &[(&Policy, Vec<&Binding>)],
    request: &Request<'_>,
    uid: &str,
    params: &dyn ParamSource,
) -> Verdict {
    let matching: Vec<&(&Policy, Vec<&Binding>)> = bound
        .iter()
        .filter(|(policy, _)| policy.match_constraints.matches(request))
        .collect();
    if matching.is_empty() {
        return Verdict::default();
    }
    crate::schema::on_cel_stack(|| evaluate_here(&matching, request, uid, params))
}

impl Verdict {
    fn deny(
        &mut self,
        policy: &Policy,
        binding: Option<&Binding>,
        message: String,
        reason: Reason,
    ) {
        if self.denial.is_none() {
            self.denial = Some(Denial {
                policy: policy.name.clone(),
                binding: binding.map(|binding| binding.name.clone()),
                message,
                reason,
            });
        }
    }

    /// The dispatcher's `addConfigError`: a denial under `failurePolicy: Fail`, whatever the
    /// binding's actions.
    fn configuration_error(
        &mut self,
        policy: &Policy,
        binding: Option<&Binding>,
        error: &ConfigurationError,
    ) {
        if policy.failure_policy == FailurePolicy::Ignore {
            return;
        }
        let message = match binding {
            Some(_) => format!("failed to configure binding: {error}"),
            None => format!("failed to configure policy: {error}"),
        };
        self.deny(policy, binding, message, Reason::Invalid);
    }
}

fn evaluate_here(
    matching: &[&(&Policy, Vec<&Binding>)],
    request: &Request<'_>,
    uid: &str,
    params: &dyn ParamSource,
) -> Verdict {
    let mut base = cel::Context::default();
    base.register_all();
    let namespace_object = request
        .namespace_object
        .filter(|_| !request.namespace.is_empty())
        .map(namespace_view);
    let activation = Activation {
        object: cel_or_null(request.object),
        old_object: cel_or_null(request.old_object),
        request: rules::to_cel(None, &request.to_value(uid)),
        namespace_object: cel_or_null(namespace_object.as_ref()),
        params: cel::Value::Null,
        size: [request.object, request.old_object]
            .into_iter()
            .flatten()
            .map(rules::node_count)
            .sum::<u64>()
            .max(1),
    };
    let mut verdict = Verdict::default();
    for (policy, bindings) in matching {
        let param_kind = match &policy.param_kind {
            None => None,
            Some(kind) => match params.scope(kind) {
                Some(scope) => Some((kind, scope)),
                None => {
                    verdict.configuration_error(
                        policy,
                        None,
                        &ConfigurationError::UnknownParamKind(kind.clone()),
                    );
                    continue;
                }
            },
        };
        for binding in bindings {
            if binding
                .match_resources
                .as_ref()
                .is_some_and(|resources| !resources.matches(request))
            {
                continue;
            }
            let collected = match collect_params(
                param_kind,
                binding.param_ref.as_ref(),
                request.namespace,
                params,
            ) {
                Ok(collected) => collected,
                Err(error) => {
                    verdict.configuration_error(policy, Some(binding), &error);
                    continue;
                }
            };
            for param in collected {
                let activation = match param {
                    None => activation.clone(),
                    Some(param) => Activation {
                        params: rules::to_cel(None, &param),
                        size: activation.size.saturating_add(rules::node_count(&param)),
                        ..activation.clone()
                    },
                };
                for decision in policy.validate(&activation, &base) {
                    let Decision::Deny { message, reason } = decision else {
                        continue;
                    };
                    for action in &binding.actions {
                        match action {
                            Action::Deny => {
                                verdict.deny(policy, Some(binding), message.clone(), reason);
                            }
                            Action::Warn => verdict.warnings.push(format!(
                                "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {message}",
                                policy.name, binding.name
                            )),
                            Action::Audit => {}
                        }
                    }
                }
            }
        }
    }
    verdict
}

#[cfg(test)]
mod tests;
