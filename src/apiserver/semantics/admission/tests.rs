#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

/// The shape of the project's deletion-protection policy.
fn protection_policy() -> Value {
    json!({
        "metadata": {"name": "protect"},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["gpucloud.io"], "apiVersions": ["*"],
                "operations": ["DELETE"], "resources": ["*"]}]},
            "validations": [{
                "expression": "!(has(oldObject.metadata.annotations) && 'gpucloud.io/deletion-protection' in oldObject.metadata.annotations && oldObject.metadata.annotations['gpucloud.io/deletion-protection'] == 'true')",
                "messageExpression": "oldObject.kind + ' ' + request.namespace + '/' + request.name + ' is protected; kubectl annotate ' + oldObject.kind.lowerAscii() + ' ' + request.name + ' -n ' + request.namespace + ' gpucloud.io/deletion-protection-'",
                "message": "protected",
                "reason": "Forbidden",
            }],
        },
    })
}

fn binding(policy: &str, actions: &[&str]) -> Value {
    json!({"metadata": {"name": format!("{policy}-binding")},
           "spec": {"policyName": policy, "validationActions": actions}})
}

fn compiled(mut policy: Value) -> Policy {
    default_policy(&mut policy);
    Policy::compile(&policy).unwrap_or_else(|errors| panic!("{errors:?}"))
}

fn compiled_binding(mut value: Value) -> Binding {
    default_binding(&mut value);
    Binding::compile(&value).unwrap_or_else(|errors| panic!("{errors:?}"))
}

/// A GpuInstance; `null` annotations leave the field out, as stored objects do.
fn instance(annotations: Value) -> Value {
    let mut object = json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
           "metadata": {"name": "vm-1", "namespace": "team-a", "labels": {"tier": "gold"}},
           "spec": {"size": 1}});
    if !annotations.is_null() {
        object["metadata"]["annotations"] = annotations;
    }
    object
}

fn request<'a>(
    operation: Operation,
    object: Option<&'a Value>,
    old_object: Option<&'a Value>,
) -> Request<'a> {
    Request {
        operation,
        group: "gpucloud.io",
        version: "v1alpha1",
        kind: "GpuInstance",
        resource: "gpuinstances",
        subresource: "",
        other_versions: &[],
        namespace: "team-a",
        name: "vm-1",
        object,
        old_object,
        namespace_object: None,
        username: "admin",
        groups: &[],
        dry_run: false,
        options: None,
    }
}

/// A store of params: the served kinds and their objects.
#[derive(Default)]
struct Params {
    kinds: Vec<(ParamKind, ParamScope)>,
    objects: Vec<Value>,
}

impl Params {
    fn serving(mut self, api_version: &str, kind: &str, scope: ParamScope) -> Self {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.kinds.push((
            ParamKind {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
            },
            scope,
        ));
        self
    }

    fn with(mut self, object: Value) -> Self {
        self.objects.push(object);
        self
    }

    fn of<'a>(
        &'a self,
        kind: &'a ParamKind,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a Value> {
        self.objects.iter().filter(move |object| {
            object["apiVersion"] == kind.api_version()
                && object["kind"] == kind.kind
                && object["metadata"]["namespace"].as_str().unwrap_or_default() == namespace
        })
    }
}

impl ParamSource for Params {
    fn scope(&self, kind: &ParamKind) -> Option<ParamScope> {
        self.kinds
            .iter()
            .find(|(served, _)| served == kind)
            .map(|(_, scope)| *scope)
    }

    fn get(&self, kind: &ParamKind, namespace: &str, name: &str) -> Option<Value> {
        self.of(kind, namespace)
            .find(|object| object["metadata"]["name"] == name)
            .cloned()
    }

    fn list(
        &self,
        kind: &ParamKind,
        namespace: &str,
        select: &dyn Fn(&BTreeMap<String, String>) -> bool,
    ) -> Vec<Value> {
        self.of(kind, namespace)
            .filter(|object| select(&Request::labels(Some(object)).unwrap_or_default()))
            .cloned()
            .collect()
    }
}

fn decide(policy: &Policy, binding: &Binding, request: &Request<'_>) -> Verdict {
    decide_with(&Params::default(), policy, binding, request)
}

fn decide_with(
    params: &Params,
    policy: &Policy,
    binding: &Binding,
    request: &Request<'_>,
) -> Verdict {
    evaluate(&[(policy, vec![binding])], request, "uid-1", params)
}

#[test]
fn a_protected_object_may_not_be_deleted_and_the_message_names_it() {
    let policy = compiled(protection_policy());
    let binding = compiled_binding(binding("protect", &["Deny"]));
    let protected = instance(json!({"gpucloud.io/deletion-protection": "true"}));
    let verdict = decide(
        &policy,
        &binding,
        &request(Operation::Delete, None, Some(&protected)),
    );
    let denial = verdict.denial.unwrap();
    assert_eq!(denial.reason, Reason::Forbidden);
    assert_eq!(denial.reason.code(), 403);
    assert_eq!(
        denial.message,
        "GpuInstance team-a/vm-1 is protected; kubectl annotate gpuinstance vm-1 -n team-a gpucloud.io/deletion-protection-"
    );
    assert_eq!(
        denial.cause(),
        format!(
            "ValidatingAdmissionPolicy 'protect' with binding 'protect-binding' denied request: {}",
            denial.message
        )
    );

    for annotations in [
        json!(null),
        json!({}),
        json!({"gpucloud.io/deletion-protection": "false"}),
    ] {
        let object = instance(annotations.clone());
        let verdict = decide(
            &policy,
            &binding,
            &request(Operation::Delete, None, Some(&object)),
        );
        assert_eq!(verdict, Verdict::default(), "{annotations}");
    }
    // Other operations are not matched: a protected object can still be changed.
    let verdict = decide(
        &policy,
        &binding,
        &request(Operation::Update, Some(&protected), Some(&protected)),
    );
    assert_eq!(verdict, Verdict::default());
}

#[test]
fn resource_rules_follow_the_webhook_matcher() {
    let rule = |resources: Value, extra: Value| {
        let mut rule = json!({"apiGroups": ["gpucloud.io"], "apiVersions": ["v1alpha1"],
                              "operations": ["*"], "resources": resources});
        if let (Some(rule), Some(extra)) = (rule.as_object_mut(), extra.as_object()) {
            rule.extend(extra.clone());
        }
        compiled(json!({"metadata": {"name": "p"}, "spec": {
            "matchConstraints": {"resourceRules": [rule]},
            "validations": [{"expression": "false"}]}}))
    };
    let binding = compiled_binding(binding("p", &["Deny"]));
    let object = instance(json!({}));
    let main = request(Operation::Update, Some(&object), Some(&object));
    let status = Request {
        subresource: "status",
        ..main.clone()
    };
    let denied =
        |policy: &Policy, request: &Request<'_>| decide(policy, &binding, request).denial.is_some();

    let all = rule(json!(["*"]), json!({}));
    assert!(denied(&all, &main));
    assert!(!denied(&all, &status), "`*` leaves subresources out");
    let everything = rule(json!(["*/*"]), json!({}));
    assert!(denied(&everything, &status));
    let only_status = rule(json!(["gpuinstances/status"]), json!({}));
    assert!(denied(&only_status, &status) && !denied(&only_status, &main));
    let named = rule(json!(["gpuinstances"]), json!({"resourceNames": ["other"]}));
    assert!(!denied(&named, &main));
    let cluster = rule(json!(["*"]), json!({"scope": "Cluster"}));
    assert!(!denied(&cluster, &main));

    // Equivalent (the default) also matches the resource at its other served versions.
    let v1 = Request {
        version: "v1",
        other_versions: &["v1alpha1".to_string()],
        ..main.clone()
    };
    assert!(denied(&all, &v1));
    let exact = compiled(json!({"metadata": {"name": "p"}, "spec": {
        "matchConstraints": {"matchPolicy": "Exact", "resourceRules": [
            {"apiGroups": ["gpucloud.io"], "apiVersions": ["v1alpha1"],
             "operations": ["*"], "resources": ["*"]}]},
        "validations": [{"expression": "false"}]}}));
    assert!(!denied(&exact, &v1));

    let excluded = compiled(json!({"metadata": {"name": "p"}, "spec": {
        "matchConstraints": {
            "resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                               "operations": ["*"], "resources": ["*"]}],
            "excludeResourceRules": [{"apiGroups": ["gpucloud.io"], "apiVersions": ["*"],
                                      "operations": ["UPDATE"], "resources": ["gpuinstances"]}]},
        "validations": [{"expression": "false"}]}}));
    assert!(!denied(&excluded, &main));
    assert!(denied(
        &excluded,
        &request(Operation::Delete, None, Some(&object))
    ));
}

#[test]
fn label_selectors_pick_namespaces_and_objects() {
    let policy = compiled(json!({"metadata": {"name": "p"}, "spec": {
        "matchConstraints": {
            "resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                               "operations": ["*"], "resources": ["*"]}],
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
            "objectSelector": {"matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gold"]}]}},
        "validations": [{"expression": "false"}]}}));
    let binding = compiled_binding(binding("p", &["Deny"]));
    let gold = instance(json!({}));
    let mut bronze = gold.clone();
    bronze["metadata"]["labels"]["tier"] = json!("bronze");
    let prod = json!({"metadata": {"name": "team-a", "labels": {"env": "prod"}}});
    let dev = json!({"metadata": {"name": "team-a", "labels": {"env": "dev"}}});
    let with = |object: &'static str, namespace: &Value| -> bool {
        let object = if object == "gold" { &gold } else { &bronze };
        let request = Request {
            namespace_object: Some(namespace),
            ..request(Operation::Update, Some(object), Some(&bronze))
        };
        decide(&policy, &binding, &request).denial.is_some()
    };
    assert!(with("gold", &prod));
    assert!(!with("gold", &dev));
    // The object selector matches the new or the old object.
    assert!(!with("bronze", &prod));
    let request = Request {
        namespace_object: Some(&prod),
        ..request(Operation::Delete, None, Some(&gold))
    };
    assert!(decide(&policy, &binding, &request).denial.is_some());
}

#[test]
fn evaluation_errors_follow_the_failure_policy() {
    let policy = |failure_policy: &str| {
        compiled(json!({"metadata": {"name": "p"}, "spec": {
            "failurePolicy": failure_policy,
            "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                                                    "operations": ["*"], "resources": ["*"]}]},
            "validations": [{"expression": "object.spec.missing == 1", "reason": "Forbidden"}]}}))
    };
    let binding = compiled_binding(binding("p", &["Deny"]));
    let object = instance(json!({}));
    let create = request(Operation::Create, Some(&object), None);
    let denial = decide(&policy("Fail"), &binding, &create).denial.unwrap();
    assert_eq!(
        denial.message,
        "expression 'object.spec.missing == 1' resulted in error: no such key: missing"
    );
    // An error is not the validation's own failure: its reason does not apply.
    assert_eq!(denial.reason, Reason::Invalid);
    assert_eq!(
        decide(&policy("Ignore"), &binding, &create),
        Verdict::default()
    );
}

#[test]
fn messages_fall_back_from_expression_to_message_to_the_expression() {
    let policy = compiled(json!({"metadata": {"name": "p"}, "spec": {
    "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                                            "operations": ["*"], "resources": ["*"]}]},
    "validations": [
        {"expression": "object.spec.size > 5", "messageExpression": "object.spec.nope",
         "message": "size must be over 5"},
        {"expression": " object.spec.size > 6 "},
        {"expression": "object.spec.size > 7", "messageExpression": "'too small: ' + string(object.spec.size)"},
    ]}}));
    let binding = compiled_binding(binding("p", &["Warn"]));
    let object = instance(json!({}));
    let verdict = decide(
        &policy,
        &binding,
        &request(Operation::Create, Some(&object), None),
    );
    assert_eq!(verdict.denial, None, "Warn only warns");
    assert_eq!(
        verdict.warnings,
        [
            "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'p-binding': size must be over 5",
            "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'p-binding': failed expression: object.spec.size > 6",
            "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'p-binding': too small: 1",
        ]
    );
}

#[test]
fn variables_and_match_conditions_are_evaluated() {
    let policy = compiled(json!({"metadata": {"name": "p"}, "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                                                "operations": ["*"], "resources": ["*"]}]},
        "variables": [
            {"name": "size", "expression": "object.spec.size"},
            {"name": "double", "expression": "variables.size * 2"},
            {"name": "broken", "expression": "object.spec.nope"}],
        "matchConditions": [{"name": "not-admin", "expression": "request.userInfo.username != 'root'"}],
        "validations": [
            {"expression": "variables.double > 10", "message": "too small"},
            {"expression": "variables.broken == 1"}]}}));
    let binding = compiled_binding(binding("p", &["Warn"]));
    let object = instance(json!({}));
    let create = request(Operation::Create, Some(&object), None);
    let verdict = decide(&policy, &binding, &create);
    assert_eq!(verdict.warnings.len(), 2, "{verdict:?}");
    assert!(verdict.warnings[0].ends_with(": too small"));
    assert!(
        verdict.warnings[1].ends_with(
            ": expression 'variables.broken == 1' resulted in error: expression 'object.spec.nope' resulted in error: no such key: nope"
        ),
        "{:?}",
        verdict.warnings
    );
    let as_root = Request {
        username: "root",
        ..create.clone()
    };
    assert_eq!(decide(&policy, &binding, &as_root), Verdict::default());
}

#[test]
fn the_request_variable_is_an_admission_request() {
    let policy = compiled(json!({"metadata": {"name": "p"}, "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                                                "operations": ["*"], "resources": ["*"]}]},
        "validations": [{"expression": "false", "messageExpression":
            "request.operation + ' ' + request.kind.kind + ' ' + request.resource.resource + ' ' + request.userInfo.username + ' ' + (request.dryRun ? 'dry' : 'wet') + ' ' + (has(request.subResource) ? 'sub' : 'main') + ' ' + request.uid + ' ' + (oldObject == null ? 'new' : 'old') + ' ' + (params == null ? 'unset' : 'set') + ' ' + namespaceObject.metadata.name"}]}}));
    let binding = compiled_binding(binding("p", &["Deny"]));
    let object = instance(json!({}));
    let namespace = json!({"metadata": {"name": "team-a", "resourceVersion": "5"}});
    let create = Request {
        dry_run: true,
        namespace_object: Some(&namespace),
        ..request(Operation::Create, Some(&object), None)
    };
    assert_eq!(
        decide(&policy, &binding, &create).denial.unwrap().message,
        "CREATE GpuInstance gpuinstances admin dry main uid-1 new unset team-a"
    );
}

#[test]
fn policies_are_checked_as_the_apiserver_checks_them() {
    let messages = |mut policy: Value| -> Vec<String> {
        default_policy(&mut policy);
        Policy::compile(&policy)
            .err()
            .unwrap_or_default()
            .iter()
            .map(FieldError::to_message)
            .collect()
    };
    assert_eq!(
        messages(json!({"metadata": {"name": "p"}, "spec": {}})),
        [
            "spec.matchConstraints: Required value",
            "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
            "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
        ]
    );
    let errors = messages(json!({"metadata": {"name": "p"}, "spec": {
        "failurePolicy": "Sometimes",
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {"resourceRules": [{"apiGroups": ["*", "apps"], "apiVersions": ["v1"],
                                                "operations": ["REMOVE"], "resources": []}]},
        "validations": [{"expression": "object.", "reason": "Teapot", "message": "a\nb"}]}}));
    assert_eq!(
        errors,
        [
            "spec.failurePolicy: Unsupported value: \"Sometimes\": supported values: \"Fail\", \"Ignore\"",
            "spec.matchConstraints.resourceRules[0].operations[0]: Unsupported value: \"REMOVE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\"",
            "spec.matchConstraints.resourceRules[0].apiGroups: Invalid value: []string{\"*\", \"apps\"}: if '*' is present, must not specify other API groups",
            "spec.matchConstraints.resourceRules[0].resources: Required value",
            errors[4].as_str(),
            "spec.validations[0].message: Invalid value: \"a\\nb\": message must not contain line breaks",
            "spec.validations[0].reason: Unsupported value: \"Teapot\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\", \"Unauthorized\"",
        ]
    );
    assert!(
        errors[4].starts_with(
            "spec.validations[0].expression: Invalid value: \"object.\": compilation failed: ERROR: <input>"
        ),
        "{}",
        errors[4]
    );

    let binding_messages = |mut binding: Value| -> Vec<String> {
        default_binding(&mut binding);
        Binding::compile(&binding)
            .err()
            .unwrap_or_default()
            .iter()
            .map(FieldError::to_message)
            .collect()
    };
    assert_eq!(
        binding_messages(json!({"metadata": {"name": "b"}, "spec": {}})),
        [
            "spec.policyName: Required value",
            "spec.validationActions: Required value: at least one validation action is required",
        ]
    );
    assert_eq!(
        binding_messages(json!({"metadata": {"name": "b"}, "spec": {
            "policyName": "p", "validationActions": ["Deny", "Warn"],
            "paramRef": {"name": "x"}}})),
        [
            "spec.paramRef.parameterNotFoundAction: Required value",
            "spec.validationActions: Invalid value: []string{\"Deny\", \"Warn\"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ]
    );
}

#[test]
fn defaults_fill_what_the_apiserver_fills() {
    let mut policy = protection_policy();
    default_policy(&mut policy);
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    let constraints = &policy["spec"]["matchConstraints"];
    assert_eq!(constraints["matchPolicy"], "Equivalent");
    assert_eq!(constraints["namespaceSelector"], json!({}));
    assert_eq!(constraints["objectSelector"], json!({}));
    assert_eq!(constraints["resourceRules"][0]["scope"], "*");
}

// === parameters ===

const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn policy_errors(mut policy: Value) -> Vec<String> {
    default_policy(&mut policy);
    Policy::compile(&policy)
        .err()
        .unwrap_or_default()
        .iter()
        .map(FieldError::to_message)
        .collect()
}

fn binding_errors(mut binding: Value) -> Vec<String> {
    default_binding(&mut binding);
    Binding::compile(&binding)
        .err()
        .unwrap_or_default()
        .iter()
        .map(FieldError::to_message)
        .collect()
}

/// A policy on GpuInstance creates parameterized by `param_kind`.
fn param_policy(param_kind: Value, validation: Value) -> Value {
    json!({"metadata": {"name": "limit"}, "spec": {
        "paramKind": param_kind,
        "matchConstraints": {"resourceRules": [{
            "apiGroups": ["gpucloud.io"], "apiVersions": ["*"],
            "operations": ["CREATE"], "resources": ["gpuinstances"]}]},
        "validations": [validation]}})
}

fn param_binding(param_ref: Value, actions: &[&str]) -> Value {
    let mut binding = binding("limit", actions);
    if !param_ref.is_null() {
        binding["spec"]["paramRef"] = param_ref;
    }
    binding
}

/// A cluster-scoped `GpuLimit` (a custom resource) allowing `max_size` GPUs.
fn gpu_limit(name: &str, max_size: i64, labels: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "GpuLimit",
           "metadata": {"name": name, "labels": labels}, "spec": {"maxSize": max_size}})
}

/// A ConfigMap `name` in `namespace` allowing `max_size` GPUs.
fn limits_configmap(namespace: &str, name: &str, max_size: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": namespace}, "data": {"maxSize": max_size}})
}

fn gpu_limit_policy() -> Policy {
    compiled(param_policy(
        json!({"apiVersion": "example.com/v1", "kind": "GpuLimit"}),
        json!({"expression": "object.spec.size <= params.spec.maxSize",
               "messageExpression": "'size ' + string(object.spec.size) + ' is over the limit of ' + params.metadata.name",
               "reason": "Forbidden"}),
    ))
}

fn configmap_policy() -> Policy {
    compiled(param_policy(
        json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        json!({"expression": "object.spec.size <= int(params.data.maxSize)",
               "messageExpression": "'at most ' + params.data.maxSize + ' GPUs in ' + params.metadata.namespace"}),
    ))
}

fn cluster_limits() -> Params {
    Params::default().serving("example.com/v1", "GpuLimit", ParamScope::Cluster)
}

fn namespaced_configmaps() -> Params {
    Params::default().serving("v1", "ConfigMap", ParamScope::Namespaced)
}

#[test]
fn param_kinds_are_checked_as_the_apiserver_checks_them() {
    let errors =
        |param_kind: Value| policy_errors(param_policy(param_kind, json!({"expression": "true"})));
    assert_eq!(
        errors(json!({})),
        [
            "spec.paramKind.apiVersion: Required value",
            "spec.paramKind.kind: Required value",
        ]
    );
    assert_eq!(
        errors(json!({"apiVersion": "a/b/c", "kind": "Limit"})),
        [
            "spec.paramKind.apiVersion: Invalid value: \"a/b/c\": unexpected GroupVersion string: a/b/c"
        ]
    );
    assert_eq!(
        errors(json!({"apiVersion": "Example.com/V1", "kind": "Limit"})),
        [
            format!("spec.paramKind.apiVersion: Invalid value: \"Example.com\": {SUBDOMAIN}"),
            format!("spec.paramKind.apiVersion: Invalid value: \"V1\": {DNS1035}"),
        ]
    );
    assert_eq!(
        errors(json!({"apiVersion": "example.com/", "kind": "Limit"})),
        ["spec.paramKind.apiVersion: Invalid value: \"example.com/\": version must be specified"]
    );
    assert_eq!(
        errors(json!({"apiVersion": "v1", "kind": "Config_Map"})),
        [format!(
            "spec.paramKind.kind: Invalid value: \"Config_Map\": may have mixed case, but should otherwise match: {DNS1035}"
        )]
    );
    for valid in [
        json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        json!({"apiVersion": "example.com/v1", "kind": "GpuLimit"}),
    ] {
        assert_eq!(errors(valid.clone()), Vec::<String>::new(), "{valid}");
    }
}

#[test]
fn param_refs_are_checked_as_the_apiserver_checks_them() {
    let errors = |param_ref: Value| binding_errors(param_binding(param_ref, &["Deny"]));
    assert_eq!(
        errors(json!({})),
        [
            "spec.paramRef: Required value: one of name or selector must be specified",
            "spec.paramRef.parameterNotFoundAction: Required value",
        ]
    );
    assert_eq!(
        errors(json!({"name": "a/b%", "selector": {}, "parameterNotFoundAction": "Maybe"})),
        [
            "spec.paramRef.name: Invalid value: \"a/b%\": may not contain '/'",
            "spec.paramRef.name: Invalid value: \"a/b%\": may not contain '%'",
            "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
            "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
            "spec.paramRef.parameterNotFoundAction: Unsupported value: \"Maybe\": supported values: \"Deny\", \"Allow\"",
        ]
    );
    assert_eq!(
        errors(json!({"name": "..", "parameterNotFoundAction": "Deny"})),
        ["spec.paramRef.name: Invalid value: \"..\": may not be '..'"]
    );
    assert_eq!(
        errors(
            json!({"selector": {"matchExpressions": [{"key": "tier", "operator": "In"}]},
                      "parameterNotFoundAction": "Allow"})
        ),
        [
            "spec.paramRef.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
        ]
    );
    for valid in [
        json!({"name": "limits", "namespace": "config", "parameterNotFoundAction": "Deny"}),
        json!({"selector": {}, "parameterNotFoundAction": "Allow"}),
    ] {
        assert_eq!(errors(valid.clone()), Vec::<String>::new(), "{valid}");
    }
}

#[test]
fn a_selector_evaluates_the_policy_once_per_param() {
    let policy = gpu_limit_policy();
    let binding = compiled_binding(param_binding(
        json!({"selector": {}, "parameterNotFoundAction": "Deny"}),
        &["Deny"],
    ));
    let params = cluster_limits()
        .with(gpu_limit("limit-a", 8, json!({"tier": "gold"})))
        .with(gpu_limit("limit-b", 0, json!({"tier": "bronze"})));
    let object = instance(json!({}));
    let create = request(Operation::Create, Some(&object), None);

    // Only the second param refuses: the message names it.
    let denial = decide_with(&params, &policy, &binding, &create)
        .denial
        .unwrap();
    assert_eq!(denial.message, "size 1 is over the limit of limit-b");
    assert_eq!(denial.reason, Reason::Forbidden);
    assert_eq!(
        denial.cause(),
        "ValidatingAdmissionPolicy 'limit' with binding 'limit-binding' denied request: size 1 is over the limit of limit-b"
    );

    // A selector picks params by their labels.
    let gold = compiled_binding(param_binding(
        json!({"selector": {"matchLabels": {"tier": "gold"}}, "parameterNotFoundAction": "Deny"}),
        &["Deny"],
    ));
    assert_eq!(
        decide_with(&params, &policy, &gold, &create),
        Verdict::default()
    );

    // Each param's failure is a warning of its own.
    let strict = cluster_limits()
        .with(gpu_limit("limit-a", 0, json!({})))
        .with(gpu_limit("limit-b", 0, json!({})));
    let warn = compiled_binding(param_binding(
        json!({"selector": {}, "parameterNotFoundAction": "Deny"}),
        &["Warn"],
    ));
    assert_eq!(
        decide_with(&strict, &policy, &warn, &create).warnings,
        [
            "Validation failed for ValidatingAdmissionPolicy 'limit' with binding 'limit-binding': size 1 is over the limit of limit-a",
            "Validation failed for ValidatingAdmissionPolicy 'limit' with binding 'limit-binding': size 1 is over the limit of limit-b",
        ]
    );
}

#[test]
fn a_named_param_is_read_in_its_namespace_or_the_requests() {
    let policy = configmap_policy();
    let params = namespaced_configmaps()
        .with(limits_configmap("config", "limits", "0"))
        .with(limits_configmap("team-a", "limits", "8"));
    let object = instance(json!({}));
    let create = request(Operation::Create, Some(&object), None);

    let in_config = compiled_binding(param_binding(
        json!({"name": "limits", "namespace": "config", "parameterNotFoundAction": "Deny"}),
        &["Deny"],
    ));
    let denial = decide_with(&params, &policy, &in_config, &create)
        .denial
        .unwrap();
    assert_eq!(denial.message, "at most 0 GPUs in config");
    assert_eq!(
        (denial.reason, denial.reason.code()),
        (Reason::Invalid, 422)
    );

    // Without a namespace, the request's (team-a allows 8).
    let local = compiled_binding(param_binding(
        json!({"name": "limits", "parameterNotFoundAction": "Deny"}),
        &["Deny"],
    ));
    assert_eq!(
        decide_with(&params, &policy, &local, &create),
        Verdict::default()
    );

    // A change of the param counts at the next request.
    let changed = namespaced_configmaps().with(limits_configmap("team-a", "limits", "0"));
    assert_eq!(
        decide_with(&changed, &policy, &local, &create)
            .denial
            .unwrap()
            .message,
        "at most 0 GPUs in team-a"
    );

    // A cluster-scoped request has no namespace to read a namespaced param in.
    let cluster_scoped = Request {
        namespace: "",
        ..create.clone()
    };
    assert_eq!(
        decide_with(&params, &policy, &local, &cluster_scoped)
            .denial
            .unwrap()
            .cause(),
        "ValidatingAdmissionPolicy 'limit' with binding 'limit-binding' denied request: failed to configure binding: cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
    );
    // With paramRef.namespace it has one.
    assert!(
        decide_with(&params, &policy, &in_config, &cluster_scoped)
            .denial
            .is_some_and(|denial| denial.message == "at most 0 GPUs in config")
    );
}

#[test]
fn a_missing_param_denies_or_allows_as_the_binding_says() {
    let policy = configmap_policy();
    let empty = namespaced_configmaps();
    let object = instance(json!({}));
    let create = request(Operation::Create, Some(&object), None);
    let binding = |action: &str, param_ref: Value| {
        let mut param_ref = param_ref;
        param_ref["parameterNotFoundAction"] = json!(action);
        compiled_binding(param_binding(param_ref, &["Deny"]))
    };

    for param_ref in [
        json!({"name": "limits", "namespace": "config"}),
        json!({"selector": {}}),
    ] {
        let denial = decide_with(
            &empty,
            &policy,
            &binding("Deny", param_ref.clone()),
            &create,
        )
        .denial
        .unwrap();
        assert_eq!(
            denial.cause(),
            "ValidatingAdmissionPolicy 'limit' with binding 'limit-binding' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
            "{param_ref}"
        );
        assert_eq!(denial.reason, Reason::Invalid);
        // Allow evaluates nothing: the policy's validations do not run.
        assert_eq!(
            decide_with(
                &empty,
                &policy,
                &binding("Allow", param_ref.clone()),
                &create
            ),
            Verdict::default(),
            "{param_ref}"
        );
    }

    // Deny is a configuration error: `failurePolicy: Ignore` lets the request through.
    let mut ignoring = param_policy(
        json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        json!({"expression": "false"}),
    );
    ignoring["spec"]["failurePolicy"] = json!("Ignore");
    assert_eq!(
        decide_with(
            &empty,
            &compiled(ignoring),
            &binding("Deny", json!({"selector": {}})),
            &create
        ),
        Verdict::default()
    );
}

#[test]
fn misconfigured_params_follow_the_failure_policy() {
    let object = instance(json!({}));
    let create = request(Operation::Create, Some(&object), None);
    let by_selector = compiled_binding(param_binding(
        json!({"selector": {}, "parameterNotFoundAction": "Allow"}),
        &["Deny"],
    ));

    // A param kind no served resource has: the policy's error, named without a binding, even
    // for a binding that only warns.
    let denial = decide_with(
        &Params::default(),
        &gpu_limit_policy(),
        &by_selector,
        &create,
    )
    .denial
    .unwrap();
    assert_eq!(
        denial.cause(),
        "ValidatingAdmissionPolicy 'limit' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=GpuLimit'"
    );
    assert_eq!(denial.reason, Reason::Invalid);
    let warn_only = compiled_binding(param_binding(
        json!({"selector": {}, "parameterNotFoundAction": "Allow"}),
        &["Warn"],
    ));
    let verdict = decide_with(&Params::default(), &configmap_policy(), &warn_only, &create);
    assert_eq!(
        verdict.denial.unwrap().message,
        "failed to configure policy: failed to find resource referenced by paramKind: '/v1, Kind=ConfigMap'"
    );
    assert!(verdict.warnings.is_empty());
    let mut ignoring = param_policy(
        json!({"apiVersion": "example.com/v1", "kind": "GpuLimit"}),
        json!({"expression": "false"}),
    );
    ignoring["spec"]["failurePolicy"] = json!("Ignore");
    assert_eq!(
        decide_with(
            &Params::default(),
            &compiled(ignoring),
            &by_selector,
            &create
        ),
        Verdict::default()
    );

    // A namespace for a cluster-scoped param kind.
    let with_namespace = compiled_binding(param_binding(
        json!({"name": "limit-a", "namespace": "team-a", "parameterNotFoundAction": "Allow"}),
        &["Deny"],
    ));
    let params = cluster_limits().with(gpu_limit("limit-a", 0, json!({})));
    assert_eq!(
        decide_with(&params, &gpu_limit_policy(), &with_namespace, &create)
            .denial
            .unwrap()
            .message,
        "failed to configure binding: paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
    );
}

#[test]
fn without_param_ref_or_param_kind_params_is_null() {
    let object = instance(json!({}));
    let create = request(Operation::Create, Some(&object), None);
    let params = cluster_limits().with(gpu_limit("limit-a", 0, json!({})));
    // The policy has a paramKind, the binding no paramRef: evaluated once, with null params
    // (`CollectParams`), not a configuration error.
    let null_params = compiled(param_policy(
        json!({"apiVersion": "example.com/v1", "kind": "GpuLimit"}),
        json!({"expression": "params != null", "message": "params is null"}),
    ));
    let plain = compiled_binding(binding("limit", &["Deny"]));
    assert_eq!(
        decide_with(&params, &null_params, &plain, &create)
            .denial
            .unwrap()
            .message,
        "params is null"
    );
    // Reading a field of null params is an evaluation error.
    let denial = decide_with(&params, &gpu_limit_policy(), &plain, &create)
        .denial
        .unwrap();
    assert!(
        denial.message.starts_with(
            "expression 'object.spec.size <= params.spec.maxSize' resulted in error: "
        ),
        "{}",
        denial.message
    );
    // A paramRef of a policy without paramKind is ignored.
    let no_kind = compiled(json!({"metadata": {"name": "limit"}, "spec": {
        "matchConstraints": {"resourceRules": [{
            "apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]},
        "validations": [{"expression": "params != null", "message": "params is null"}]}}));
    let by_name = compiled_binding(param_binding(
        json!({"name": "limit-a", "parameterNotFoundAction": "Deny"}),
        &["Deny"],
    ));
    assert_eq!(
        decide_with(&params, &no_kind, &by_name, &create)
            .denial
            .unwrap()
            .message,
        "params is null"
    );
}
