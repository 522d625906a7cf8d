//! The static CEL cost estimate at CRD creation, held to kube-apiserver's figures: the
//! GpuInstance and GpuInstancePool schemas of release 0.1.0 (`fixtures/*-unbounded.yaml`), which
//! a real kube-apiserver refused with the factors below, and small CRDs with one rule each over
//! an unbounded string, list and map.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use gpucloud_apiserver_semantics::schema::{FieldError, Schema};
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    serde_saphyr::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("YAML")
}

fn cost_errors(schema: &Value) -> Vec<FieldError> {
    match Schema::compile(schema) {
        Ok(_) => Vec::new(),
        Err(error) => error.errors().to_vec(),
    }
}

/// The factor an error reports: `Some(f)` for "by factor of 12.1x", `Some(inf)` for "more than
/// 100x".
fn factor(message: &str) -> Option<f64> {
    let rest = message.split("exceeds budget by factor of ").nth(1)?;
    if rest.starts_with("more than 100x") {
        return Some(f64::INFINITY);
    }
    rest.split('x').next()?.parse().ok()
}

/// Asserts one error at `field` with a factor within 10% of `expected` (`INFINITY`: over 100x).
fn assert_factor(errors: &[FieldError], field: &str, expected: f64) {
    let found: Vec<&FieldError> = errors.iter().filter(|e| e.field == field).collect();
    let error = found
        .iter()
        .find(|e| factor(&e.detail).is_some())
        .unwrap_or_else(|| panic!("no cost error at {field}; errors: {errors:#?}"));
    let actual = factor(&error.detail).unwrap();
    if expected.is_infinite() {
        assert!(actual.is_infinite(), "{field}: {}", error.detail);
    } else {
        assert!(
            (actual - expected).abs() <= expected * 0.1,
            "{field}: factor {actual}, kube-apiserver {expected}: {}",
            error.detail
        );
    }
    assert!(
        error.detail.contains("(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"),
        "{}",
        error.detail
    );
}

const WINDOWS: &str =
    "properties[spec].properties[schedule].properties[windows].items.x-kubernetes-validations";

#[test]
fn the_unbounded_gpu_instance_schema_is_refused_with_kube_apiservers_factors() {
    let crd = fixture("gpuinstances-unbounded.yaml");
    let errors = cost_errors(&crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]);
    assert_factor(&errors, &format!("{WINDOWS}[0].rule"), 12.1);
    assert_factor(&errors, &format!("{WINDOWS}[1].rule"), 14.1);
    assert_factor(&errors, &format!("{WINDOWS}[2].rule"), 1.006646);
    let third = errors
        .iter()
        .find(|e| e.field == format!("{WINDOWS}[2].rule"))
        .unwrap();
    assert!(
        third.detail.contains("by factor of 1.006646x"),
        "{}",
        third.detail
    );
    assert_factor(&errors, "<nil>", 2.8);
    let total = errors.iter().find(|e| e.field == "<nil>").unwrap();
    assert!(
        total
            .detail
            .starts_with("x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of "),
        "{}",
        total.detail
    );
    assert_eq!(total.reason(), "FieldValueForbidden");
}

#[test]
fn the_unbounded_pool_schema_is_refused_with_kube_apiservers_factors() {
    let crd = fixture("gpuinstancepools-unbounded.yaml");
    let errors = cost_errors(&crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]);
    let template = "properties[spec].properties[template].properties[spec]";
    let windows = format!(
        "{template}.properties[schedule].properties[windows].items.x-kubernetes-validations"
    );
    assert_factor(&errors, &format!("{windows}[0].rule"), 12.1);
    assert_factor(&errors, &format!("{windows}[1].rule"), 14.1);
    assert_factor(&errors, &format!("{windows}[2].rule"), 1.006646);
    // The selector rule walks an unbounded label map and looks each key up in another.
    let selector_rule = errors
        .iter()
        .find(|e| {
            e.field
                .starts_with("properties[spec].x-kubernetes-validations[")
                && factor(&e.detail).is_some()
        })
        .unwrap_or_else(|| panic!("no cost error on the selector rule: {errors:#?}"));
    assert_eq!(factor(&selector_rule.detail), Some(f64::INFINITY));
    assert_factor(&errors, "<nil>", f64::INFINITY);
}

fn crd_schema(property: Value, rule: &str) -> Value {
    json!({
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "properties": {"field": property},
            "x-kubernetes-validations": [{"rule": rule}]
        }}
    })
}

const RULE_FIELD: &str = "properties[spec].x-kubernetes-validations[0].rule";

#[test]
fn a_rule_over_an_unbounded_string_list_or_map_is_refused_and_accepted_once_bounded() {
    let cases = [
        (
            "string",
            json!({"type": "string"}),
            json!({"type": "string", "maxLength": 64}),
            "self.field.split(',').all(name, name.matches('^[a-z]+$'))",
        ),
        (
            "list",
            json!({"type": "array", "items": {"type": "string", "maxLength": 63}}),
            json!({"type": "array", "maxItems": 16, "items": {"type": "string", "maxLength": 63}}),
            "self.field.all(a, self.field.exists_one(b, a == b))",
        ),
        (
            "map",
            json!({"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}}),
            json!({"type": "object", "maxProperties": 64, "additionalProperties": {"type": "string", "maxLength": 63}}),
            "self.field.all(k, self.field.exists(j, self.field[j] == self.field[k]))",
        ),
    ];
    for (what, unbounded, bounded, rule) in cases {
        let errors = cost_errors(&crd_schema(unbounded, rule));
        let error = errors
            .iter()
            .find(|e| e.field == RULE_FIELD)
            .unwrap_or_else(|| panic!("{what}: not refused: {errors:#?}"));
        assert!(
            error
                .detail
                .starts_with("estimated rule cost exceeds budget by factor of "),
            "{what}: {}",
            error.detail
        );
        assert!(
            factor(&error.detail).is_some_and(|f| f > 1.0),
            "{what}: {}",
            error.detail
        );
        let accepted = cost_errors(&crd_schema(bounded, rule));
        assert!(accepted.is_empty(), "{what}, bounded: {accepted:#?}");
    }
}

#[test]
fn a_rule_inside_a_bounded_list_costs_its_estimate_times_the_lists_bound() {
    // `self.to > self.from` over two strings of at most 2 characters: 1 + 4 for the selections;
    // a list of 10,000,000 such items would cost 50,000,000.
    let item = |max_items: u64| {
        json!({
            "type": "object",
            "properties": {"list": {
                "type": "array", "maxItems": max_items,
                "items": {
                    "type": "object",
                    "properties": {"from": {"type": "string", "maxLength": 2}, "to": {"type": "string", "maxLength": 2}},
                    "x-kubernetes-validations": [{"rule": "self.to > self.from"}]
                }
            }}
        })
    };
    // Each string may be 8 bytes (4 per character): the comparison costs ceil(0.8) = 1.
    assert!(cost_errors(&item(2_000_000)).is_empty());
    let errors = cost_errors(&item(2_000_001));
    let error = errors
        .iter()
        .find(|e| e.field == "properties[list].items.x-kubernetes-validations[0].rule")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert!(
        error.detail.contains("by factor of 1.000001x"),
        "{}",
        error.detail
    );
}

#[test]
fn many_cheap_rules_are_refused_by_their_total() {
    // Each rule alone is under the per-rule limit; eleven of them pass the CRD's.
    let rules: Vec<Value> = (0..11)
        .map(|i| json!({"rule": format!("self.s.matches('^[a-z]{{{i}}}$')")}))
        .collect();
    let schema = json!({
        "type": "object",
        "properties": {"items": {
            "type": "array", "maxItems": 1_000,
            "items": {
                "type": "object",
                "properties": {"s": {"type": "string", "maxLength": 8_000}},
                "x-kubernetes-validations": rules
            }
        }}
    });
    let errors = cost_errors(&schema);
    assert!(
        errors
            .iter()
            .all(|e| !e.detail.starts_with("estimated rule cost")),
        "{errors:#?}"
    );
    let total = errors
        .iter()
        .find(|e| e.field == "<nil>")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert!(
        factor(&total.detail).is_some_and(|f| f > 1.0),
        "{}",
        total.detail
    );
    let contributors = errors
        .iter()
        .filter(|e| e.detail == "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema")
        .count();
    assert_eq!(contributors, 4, "{errors:#?}");
}

#[test]
fn the_unbounded_schemas_name_the_fields_their_rules_read_without_a_bound() {
    let crd = fixture("gpuinstances-unbounded.yaml");
    let reads =
        Schema::unbounded_rule_reads(&crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
            .unwrap();
    let windows = format!("{WINDOWS}[0]: self.from");
    assert!(reads.contains(&windows), "{reads:#?}");
    let crd = fixture("gpuinstancepools-unbounded.yaml");
    let reads =
        Schema::unbounded_rule_reads(&crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
            .unwrap();
    assert!(
        reads.iter().any(
            |read| read.starts_with("properties[spec].x-kubernetes-validations[")
                && read.ends_with(": self.selector.matchLabels")
        ),
        "{reads:#?}"
    );
}
