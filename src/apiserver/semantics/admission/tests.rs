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

fn decide(policy: &Policy, binding: &Binding, request: &Request<'_>) -> Verdict {
    evaluate(&[(policy, vec![binding])], request, "uid-1")
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
            "spec.paramKind: Forbidden: policy parameters are not supported by this API server (gpucloud-apiserver)",
            "spec.matchConstraints.resourceRules[0].operations[0]: Unsupported value: \"REMOVE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\"",
            "spec.matchConstraints.resourceRules[0].apiGroups: Invalid value: []string{\"*\", \"apps\"}: if '*' is present, must not specify other API groups",
            "spec.matchConstraints.resourceRules[0].resources: Required value",
            errors[5].as_str(),
            "spec.validations[0].message: Invalid value: \"a\\nb\": message must not contain line breaks",
            "spec.validations[0].reason: Unsupported value: \"Teapot\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\", \"Unauthorized\"",
        ]
    );
    assert!(
        errors[5].starts_with(
            "spec.validations[0].expression: Invalid value: \"object.\": compilation failed: ERROR: <input>"
        ),
        "{}",
        errors[5]
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
            "spec.paramRef: Forbidden: policy parameters are not supported by this API server (gpucloud-apiserver)",
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
