//! Schema tests. Expected messages are copied from the formats in
//! k8s.io/kube-openapi/pkg/validation/errors/schema.go and
//! k8s.io/apimachinery/pkg/util/validation/field/errors.go, as apiextensions'
//! kubeOpenAPIResultToFieldErrors combines them.

use serde_json::{Value, json};

use super::*;

fn schema(spec_properties: Value) -> Schema {
    let raw = json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": spec_properties}
        }
    });
    match Schema::compile(&raw) {
        Ok(schema) => schema,
        Err(error) => panic!("schema did not compile: {error}\n{spec_properties}"),
    }
}

fn messages(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(FieldError::to_message).collect()
}

fn compile_messages(raw: Value) -> Vec<String> {
    match Schema::compile(&raw) {
        Ok(_) => Vec::new(),
        Err(error) => messages(error.errors()),
    }
}

#[test]
fn each_keyword_reports_the_apiserver_message() {
    // (property schema, value of spec.x, expected messages)
    let cases: Vec<(Value, Value, Vec<&str>)> = vec![
        (
            json!({"type": "integer"}),
            json!("a"),
            vec![
                "spec.x: Invalid value: \"string\": spec.x in body must be of type integer: \"string\"",
            ],
        ),
        (
            json!({"type": "integer"}),
            json!(1.5),
            vec![
                "spec.x: Invalid value: \"number\": spec.x in body must be of type integer: \"number\"",
            ],
        ),
        (json!({"type": "integer"}), json!(2.0), vec![]),
        (json!({"type": "number"}), json!(2), vec![]),
        (
            json!({"type": "string"}),
            Value::Null,
            vec![
                "spec.x: Invalid value: \"null\": spec.x in body must be of type string: \"null\"",
            ],
        ),
        (
            json!({"type": "string", "nullable": true}),
            Value::Null,
            vec![],
        ),
        (
            json!({"x-kubernetes-int-or-string": true}),
            json!(true),
            vec![
                "spec.x: Invalid value: \"boolean\": spec.x in body must be of type integer,string: \"boolean\"",
            ],
        ),
        (
            json!({"x-kubernetes-int-or-string": true}),
            json!("50%"),
            vec![],
        ),
        (
            json!({"type": "integer", "minimum": 1}),
            json!(0),
            vec!["spec.x: Invalid value: 0: spec.x in body should be greater than or equal to 1"],
        ),
        (
            json!({"type": "integer", "minimum": 1, "exclusiveMinimum": true}),
            json!(1),
            vec!["spec.x: Invalid value: 1: spec.x in body should be greater than 1"],
        ),
        (
            json!({"type": "integer", "maximum": 8}),
            json!(9),
            vec!["spec.x: Invalid value: 9: spec.x in body should be less than or equal to 8"],
        ),
        (
            json!({"type": "number", "maximum": 1.5, "exclusiveMaximum": true}),
            json!(1.5),
            vec!["spec.x: Invalid value: 1.5: spec.x in body should be less than 1.5"],
        ),
        (
            json!({"type": "integer", "multipleOf": 4}),
            json!(6),
            vec!["spec.x: Invalid value: 6: spec.x in body should be a multiple of 4"],
        ),
        (
            json!({"type": "string", "maxLength": 3}),
            json!("abcd"),
            vec!["spec.x: Too long: may not be more than 3 bytes"],
        ),
        (
            json!({"type": "string", "minLength": 2}),
            json!("a"),
            vec!["spec.x: Invalid value: \"a\": spec.x in body should be at least 2 chars long"],
        ),
        (
            json!({"type": "string", "pattern": "^[a-z]+$"}),
            json!("A1"),
            vec!["spec.x: Invalid value: \"A1\": spec.x in body should match '^[a-z]+$'"],
        ),
        (
            json!({"type": "string", "format": "date-time"}),
            json!("soon"),
            vec![
                "spec.x: Invalid value: \"soon\": spec.x in body must be of type date-time: \"soon\"",
            ],
        ),
        (
            json!({"type": "string", "enum": ["a", "b"]}),
            json!("c"),
            vec!["spec.x: Unsupported value: \"c\": supported values: \"a\", \"b\""],
        ),
        (
            json!({"type": "integer", "enum": [1, 2]}),
            json!(3),
            vec!["spec.x: Unsupported value: 3: supported values: \"1\", \"2\""],
        ),
        (
            json!({"type": "array", "items": {"type": "string"}, "minItems": 1}),
            json!([]),
            vec!["spec.x: Invalid value: 0: spec.x in body should have at least 1 items"],
        ),
        (
            json!({"type": "array", "items": {"type": "string"}, "maxItems": 1}),
            json!(["a", "b"]),
            vec!["spec.x: Too many: 2: must have at most 1 item"],
        ),
        (
            json!({"type": "array", "items": {"type": "integer"}}),
            json!([1, "b"]),
            vec![
                "spec.x[1]: Invalid value: \"string\": spec.x[1] in body must be of type integer: \"string\"",
            ],
        ),
        (
            json!({"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1}),
            json!({"a": "1", "b": "2"}),
            vec!["spec.x: Too many: 2: must have at most 1 item"],
        ),
        (
            json!({"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1}),
            json!({}),
            vec!["spec.x: Invalid value: 0: spec.x in body should have at least 1 properties"],
        ),
        (
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
            json!({"a": 1}),
            vec![
                "spec.x.a: Invalid value: \"integer\": spec.x.a in body must be of type string: \"integer\"",
            ],
        ),
        (
            json!({"type": "object", "required": ["region"], "properties": {"region": {"type": "string"}}}),
            json!({}),
            vec!["spec.x.region: Required value"],
        ),
        (
            json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}),
            json!(["a", "b", "a"]),
            vec!["spec.x[2]: Duplicate value: \"a\""],
        ),
        (
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}}}}),
            json!([{"name": "a"}, {"name": "a"}]),
            vec!["spec.x[1]: Duplicate value: map[string]interface {}{\"name\":\"a\"}"],
        ),
        (
            json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}),
            json!(["a", "a", "a", "b", "b"]),
            vec![
                "spec.x[1]: Duplicate value: \"a\"",
                "spec.x[4]: Duplicate value: \"b\"",
            ],
        ),
        (
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                   "items": {"type": "object", "properties": {"name": {"type": "string"}}}}),
            json!([{"name": "a"}, null, {}, {}]),
            // A null item has no key, like {} (upstream's unspecifiedKeyValue).
            vec![
                "spec.x[1]: Invalid value: \"null\": spec.x[1] in body must be of type object: \"null\"",
                "spec.x[2]: Duplicate value: map[string]interface {}{}",
            ],
        ),
        (
            json!({"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}]}),
            json!("b1"),
            vec![],
        ),
        (
            json!({"type": "string", "not": {"pattern": "^a"}}),
            json!("a1"),
            vec!["<nil>: Invalid value: \"\": spec.x must not validate the schema (not)"],
        ),
    ];
    for (property, value, expected) in cases {
        let compiled = schema(json!({"x": property}));
        let object = json!({"spec": {"x": value}});
        let errors = compiled.validate(&object, None);
        let mut found = messages(&errors);
        // The blocking-error notice is checked separately.
        found.retain(|m| !m.starts_with("<nil>: Invalid value: \"null\": some validation rules"));
        assert_eq!(found, expected, "schema {property} value {value}");
    }
}

#[test]
fn type_errors_block_rules() {
    let compiled = schema(json!({
        "x": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 1"}]}
    }));
    let errors = compiled.validate(&json!({"spec": {"x": "a"}}), None);
    assert_eq!(errors.len(), 2);
    assert_eq!(
        errors[1].to_message(),
        "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
    );
}

#[test]
fn non_structural_schemas_are_rejected_with_paths() {
    // Messages from apiextensions validation.go (validateStructuralInvariants, completeness).
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            json!({"type": "object", "properties": {"spec": {"properties": {}}}}),
            vec![
                "properties[spec].type: Required value: must not be empty for specified object fields",
            ],
        ),
        (
            json!({"properties": {}}),
            vec!["type: Required value: must not be empty at the root"],
        ),
        (
            json!({"type": "string"}),
            vec!["type: Invalid value: \"string\": must be object at the root"],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array"}}}),
            vec!["properties[a].items: Required value: must be specified"],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {}}}}),
            vec![
                "properties[a].items.type: Required value: must not be empty for specified array items",
            ],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}}}),
            vec![
                "properties[a].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            ],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "strin"}}}),
            vec![
                "properties[a].type: Unsupported value: \"strin\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
            ],
        ),
        (
            json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}}),
            vec![
                "properties[a].$ref: Forbidden: $ref is not supported",
                "properties[a].type: Required value: must not be empty for specified object fields",
            ],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}}}),
            vec![
                "properties[a].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
            ],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}}}}),
            vec![
                "properties[a].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map",
            ],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string", "x-kubernetes-validations": [{"rule": "self =="}]}}}),
            vec![],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "integer", "default": 0, "minimum": 1}}}),
            vec![
                "properties[a].default: Invalid value: 0:  in body should be greater than or equal to 1",
            ],
        ),
        (
            json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}),
            vec![
                "properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
            ],
        ),
    ];
    for (raw, expected) in cases {
        let found = compile_messages(raw.clone());
        if expected.is_empty() {
            // Rule compile failures: the wording after "compilation failed" comes from the parser.
            assert_eq!(found.len(), 1, "{raw}: {found:?}");
            assert!(
                found[0].starts_with("properties[a].x-kubernetes-validations[0].rule: Invalid value: \"self ==\": compilation failed: "),
                "{found:?}"
            );
        } else {
            assert_eq!(found, expected, "{raw}");
        }
    }
}

#[test]
fn preserve_unknown_fields_needs_no_type_but_embedded_resources_do() {
    // From apiextensions validateStructuralInvariants: an untyped node is allowed with
    // x-kubernetes-preserve-unknown-fields or x-kubernetes-int-or-string.
    let raw = json!({"type": "object", "properties": {"anything": {"x-kubernetes-preserve-unknown-fields": true}}});
    let compiled = Schema::compile(&raw).unwrap();
    let mut object = json!({"anything": {"deep": [1, {"x": true}]}});
    assert!(compiled.prune(&mut object).is_empty());
    assert!(compiled.validate(&object, None).is_empty());
    assert!(compiled.validate(&json!({"anything": 5}), None).is_empty());
    assert_eq!(
        compile_messages(
            json!({"type": "object", "properties": {"e": {"x-kubernetes-embedded-resource": true}}})
        ),
        vec![
            "properties[e].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            "properties[e].type: Required value: must be object if x-kubernetes-embedded-resource is true",
        ]
    );
}

#[test]
fn int_or_string_any_of_is_structural() {
    let raw = json!({"type": "object", "properties": {"port": {
        "x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer"}, {"type": "string"}]
    }}});
    assert!(Schema::compile(&raw).is_ok());
    let raw = json!({"type": "object", "properties": {"port": {
        "type": "string", "anyOf": [{"type": "integer"}]
    }}});
    assert_eq!(
        compile_messages(raw),
        vec!["properties[port].anyOf[0].type: Forbidden: must be empty to be structural"]
    );
}

#[test]
fn defaults_fill_missing_and_non_nullable_nulls() {
    let compiled = schema(json!({
        "size": {"type": "integer", "default": 1},
        "zone": {"type": "string", "nullable": true, "default": "a"},
        "disk": {"type": "object", "default": {}, "properties": {
            "gb": {"type": "integer", "default": 100}
        }},
        "ports": {"type": "array", "items": {"type": "object", "properties": {
            "protocol": {"type": "string", "default": "TCP"}
        }}}
    }));
    let mut object =
        json!({"spec": {"size": null, "zone": null, "ports": [{}, {"protocol": "UDP"}]}});
    compiled.apply_defaults(&mut object);
    assert_eq!(
        object,
        json!({"spec": {"size": 1, "zone": null, "disk": {"gb": 100},
                        "ports": [{"protocol": "TCP"}, {"protocol": "UDP"}]}})
    );
}

#[test]
fn prune_drops_unknown_fields_and_reports_paths() {
    let raw = json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
                "maybe": {"type": "string"}
            }}
        }
    });
    let compiled = Schema::compile(&raw).unwrap();
    let mut object = json!({
        "apiVersion": "gpucloud.io/v1", "kind": "GpuInstance",
        "metadata": {"name": "a", "labels": {"x": "y"}},
        "spec": {"size": 1, "bogus": true, "free": {"any": {"thing": 1}},
                 "items": [{"a": "x", "b": "y"}], "maybe": null},
        "extra": 1
    });
    let pruned = compiled.prune(&mut object);
    assert_eq!(pruned, vec!["extra", "spec.bogus", "spec.items[0].b"]);
    assert_eq!(
        object,
        json!({
            "apiVersion": "gpucloud.io/v1", "kind": "GpuInstance",
            "metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"size": 1, "free": {"any": {"thing": 1}}, "items": [{"a": "x"}]}
        })
    );
}

#[test]
fn list_types_are_reported_for_apply() {
    let compiled = schema(json!({
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "rules": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"},
                      "ports": {"type": "array", "items": {"type": "integer"}}}}},
        "plain": {"type": "array", "items": {"type": "string"}}
    }));
    assert_eq!(compiled.list_type(&["spec", "tags"]), Some(ListType::Set));
    assert_eq!(
        compiled.list_type(&["spec", "rules"]),
        Some(ListType::Map {
            keys: vec!["name".into()]
        })
    );
    assert_eq!(
        compiled.list_type(&["spec", "plain"]),
        Some(ListType::Atomic)
    );
    assert_eq!(
        compiled.list_type(&["spec", "rules", "ports"]),
        Some(ListType::Atomic)
    );
    assert_eq!(compiled.list_type(&["spec"]), None);
    assert_eq!(compiled.list_type(&["spec", "nope"]), None);
}

// === CEL rules ===
// Messages follow apiextensions pkg/apiserver/schema/cel/validation.go: a failed rule is
// field.Invalid(path, <schema type>, message or "failed rule: <rule>").

fn rule_messages(property: Value, value: Value, old: Option<Value>) -> Vec<String> {
    let compiled = schema(json!({"x": property}));
    let object = json!({"spec": {"x": value}});
    let old = old.map(|old| json!({"spec": {"x": old}}));
    messages(&compiled.validate(&object, old.as_ref()))
}

#[test]
fn rules_report_message_reason_and_field_path() {
    let cases: Vec<(Value, Value, Vec<&str>)> = vec![
        (
            json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 1"}]}),
            json!(1),
            vec!["spec.x: Invalid value: \"integer\": failed rule: self > 1"],
        ),
        (
            json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 1"}]}),
            json!(2),
            vec![],
        ),
        (
            json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 1", "message": "too small"}]}),
            json!(0),
            vec!["spec.x: Invalid value: \"integer\": too small"],
        ),
        (
            json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 1", "message": "m",
            "messageExpression": "'got ' + (self == 0 ? 'zero' : 'one')"}]}),
            json!(0),
            vec!["spec.x: Invalid value: \"integer\": got zero"],
        ),
        (
            json!({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 1", "message": "m",
            "messageExpression": "self"}]}),
            json!(0),
            vec!["spec.x: Invalid value: \"integer\": m"],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "x-kubernetes-validations": [
            {"rule": "has(self.a)", "reason": "FieldValueRequired", "message": "a is required", "fieldPath": ".a"}]}),
            json!({}),
            vec!["spec.x.a: Required value: a is required"],
        ),
        (
            json!({"type": "string", "x-kubernetes-validations": [{"rule": "self != 'root'", "reason": "FieldValueForbidden", "message": "no root"}]}),
            json!("root"),
            vec!["spec.x: Forbidden: no root"],
        ),
        (
            json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}},
                "x-kubernetes-validations": [{"rule": "self.m['k'] == 'v'"}]}),
            json!({"m": {}}),
            vec![
                "spec.x: Invalid value: \"object\": no such key: k evaluating rule: self.m['k'] == 'v'",
            ],
        ),
        (
            json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-validations": [
            {"rule": "self.all(s, s.startsWith('gpu-')) && self.exists_one(s, s == 'gpu-a')"}]}),
            json!(["gpu-a", "gpu-b"]),
            vec![],
        ),
        (
            json!({"type": "array", "maxItems": 64, "items": {"type": "integer"}, "x-kubernetes-validations": [
            {"rule": "self.filter(i, i > 2).size() == 1 && self.map(i, i * 2)[0] == 2 && self.isSorted() && self.sum() == 6"}]}),
            json!([1, 2, 3]),
            vec![],
        ),
        (
            json!({"type": "string", "x-kubernetes-validations": [
            {"rule": "self.lowerAscii().upperAscii() == 'AB-C' && self.split('-').size() == 2 && self.indexOf('-') == 2 && self.matches('^[a-zA-Z-]+$')"}]}),
            json!("ab-C"),
            vec![],
        ),
    ];
    for (property, value, expected) in cases {
        assert_eq!(
            rule_messages(property.clone(), value.clone(), None),
            expected,
            "{property} {value}"
        );
    }
}

#[test]
fn rules_inside_maps_name_entries_as_keys() {
    // The CEL validator walks additionalProperties with fldPath.Key(k).
    let property = json!({"type": "object", "additionalProperties": {"type": "integer",
        "x-kubernetes-validations": [{"rule": "self >= 0", "message": "must not be negative"}]}});
    assert_eq!(
        rule_messages(property, json!({"a": 1, "b": -1}), None),
        vec!["spec.x[b]: Invalid value: \"integer\": must not be negative"]
    );
}

#[test]
fn kubernetes_cel_libraries_are_available() {
    // One rule per library the apiserver offers (k8s.io/apiserver/pkg/cel/library).
    let rules = [
        "quantity(self.mem).isGreaterThan(quantity('512Mi')) && quantity(self.mem).asInteger() == 1073741824",
        "isQuantity(self.mem) && !isQuantity('lots')",
        "url(self.endpoint).getHost() == 'api.example.com' && url(self.endpoint).getScheme() == 'https'",
        "isURL(self.endpoint)",
        "sets.contains(self.tags, ['a']) && sets.intersects(self.tags, ['b', 'z'])",
        "self.tags.join(',') == 'a,b' && 'a,b'.split(',').size() == 2",
        "self.tags.isSorted() && self.tags.indexOf('b') == 1 && self.tags.lastIndexOf('a') == 0",
        "[1, 2, 3].sum() == 6 && [3, 1].min() == 1 && [3, 1].max() == 3",
        "'Hello'.lowerAscii() == 'hello' && 'x'.upperAscii() == 'X' && ' a '.trim() == 'a'",
        "'abc'.substring(1) == 'bc' && 'abc'.charAt(0) == 'a' && 'a-b'.replace('-', '_') == 'a_b'",
        "self.mem.matches('^[0-9]+Gi$') && self.mem.startsWith('1') && self.mem.endsWith('Gi') && self.mem.contains('G')",
        "ip('10.0.0.1').family() == 4 && ip.isCanonical('10.0.0.1') && isIP('fd00::1')",
        "cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && cidr('10.0.0.0/8').ip() == ip('10.0.0.0')",
        "self.tags.all(t, t.size() == 1) && self.tags.exists(t, t == 'a') && self.tags.exists_one(t, t == 'b')",
        "self.tags.map(t, t + t) == ['aa', 'bb'] && self.tags.filter(t, t != 'a') == ['b']",
        "has(self.mem) && !has(self.missing) && size(self.tags) == 2 && self.tags.size() == 2",
        "math.greatest(1, 5) == 5 && math.abs(-2) == 2",
        "int('5') == 5 && string(5) == '5' && double(1) == 1.0 && duration('1h') > duration('30m')",
    ];
    let properties = json!({
        "mem": {"type": "string", "maxLength": 16}, "endpoint": {"type": "string", "maxLength": 256},
        "missing": {"type": "string", "maxLength": 16},
        "tags": {"type": "array", "maxItems": 8, "items": {"type": "string", "maxLength": 8}}
    });
    for rule in rules {
        let property = json!({"type": "object", "properties": properties.clone(),
                              "x-kubernetes-validations": [{"rule": rule}]});
        let value =
            json!({"mem": "1Gi", "endpoint": "https://api.example.com/v1", "tags": ["a", "b"]});
        assert_eq!(
            rule_messages(property, value, None),
            Vec::<String>::new(),
            "{rule}"
        );
    }
}

#[test]
fn firewall_cidr_rules_evaluate() {
    let property = json!({"type": "string", "x-kubernetes-validations": [
        {"rule": "isCIDR(self)", "message": "must be a CIDR"},
        {"rule": "!isCIDR(self) || cidr(self).prefixLength() >= 8", "message": "prefix too short"},
        {"rule": "!isCIDR(self) || cidr(self).ip().family() == 4 || cidr(self).prefixLength() >= 32", "message": "v6 too wide"}
    ]});
    assert!(rule_messages(property.clone(), json!("10.0.0.0/16"), None).is_empty());
    assert_eq!(
        rule_messages(property.clone(), json!("10.0.0.0/4"), None),
        vec!["spec.x: Invalid value: \"string\": prefix too short"]
    );
    assert_eq!(
        rule_messages(property.clone(), json!("fd00::/16"), None),
        vec!["spec.x: Invalid value: \"string\": v6 too wide"]
    );
    assert_eq!(
        rule_messages(property, json!("nope"), None),
        vec!["spec.x: Invalid value: \"string\": must be a CIDR"]
    );
    let contains = json!({"type": "string", "x-kubernetes-validations": [
        {"rule": "cidr('10.0.0.0/8').containsIP(ip(self)) && ip(self).family() == 4"}]});
    assert!(rule_messages(contains.clone(), json!("10.1.2.3"), None).is_empty());
    assert_eq!(rule_messages(contains, json!("192.168.0.1"), None).len(), 1);
}

#[test]
fn transition_rules_run_only_with_an_old_value() {
    let immutable = json!({"type": "string", "x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": "is immutable"}]});
    assert!(rule_messages(immutable.clone(), json!("b"), None).is_empty());
    assert!(rule_messages(immutable.clone(), json!("a"), Some(json!("a"))).is_empty());
    assert_eq!(
        rule_messages(immutable, json!("b"), Some(json!("a"))),
        vec!["spec.x: Invalid value: \"string\": is immutable"]
    );
    // Items of map lists correlate by key; a new item has no old value.
    let list = json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
    "items": {"type": "object", "properties": {
        "name": {"type": "string"},
        "size": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "cannot shrink"}]}
    }}});
    let old = json!([{"name": "a", "size": 5}]);
    assert!(
        rule_messages(
            list.clone(),
            json!([{"name": "b", "size": 1}, {"name": "a", "size": 6}]),
            Some(old.clone())
        )
        .is_empty()
    );
    assert_eq!(
        rule_messages(
            list,
            json!([{"name": "b", "size": 1}, {"name": "a", "size": 4}]),
            Some(old)
        ),
        vec!["spec.x[1].size: Invalid value: \"integer\": cannot shrink"]
    );
}

#[test]
fn unchanged_invalid_values_ratchet_on_update() {
    // An object stored before the schema was tightened stays updatable while the invalid
    // values are left alone (CRD validation ratcheting).
    let compiled = schema(json!({
        "size": {"type": "integer", "maximum": 8},
        "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() < 4", "message": "short"}]},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string", "maxLength": 2}},
        "zone": {"type": "string"}
    }));
    let old = json!({"spec": {"size": 10, "name": "toolong", "tags": ["abc"], "zone": "a"}});
    let mut new = old.clone();
    new["spec"]["zone"] = json!("b");
    assert!(compiled.validate(&new, Some(&old)).is_empty());
    new["spec"]["tags"] = json!(["abc", "xyz"]);
    assert_eq!(
        messages(&compiled.validate(&new, Some(&old))),
        vec!["spec.tags[1]: Too long: may not be more than 2 bytes"]
    );
    new["spec"]["size"] = json!(11);
    new["spec"]["name"] = json!("stilltoolong");
    assert_eq!(
        messages(&compiled.validate(&new, Some(&old))),
        vec![
            "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 8",
            "spec.tags[1]: Too long: may not be more than 2 bytes",
            "spec.name: Invalid value: \"string\": short",
        ]
    );
    assert_eq!(compiled.validate(&old, None).len(), 3);
}

#[test]
fn optional_old_self_rules_also_run_on_create() {
    let property = json!({"type": "string", "x-kubernetes-validations": [{
        "rule": "oldSelf.hasValue() ? self == oldSelf.value() : self.startsWith('v1')",
        "message": "starts at v1 and never changes",
        "optionalOldSelf": true
    }]});
    assert!(rule_messages(property.clone(), json!("v1.2"), None).is_empty());
    assert_eq!(
        rule_messages(property.clone(), json!("v2"), None),
        vec!["spec.x: Invalid value: \"string\": starts at v1 and never changes"]
    );
    assert!(rule_messages(property.clone(), json!("v2"), Some(json!("v2"))).is_empty());
    assert_eq!(
        rule_messages(property, json!("v3"), Some(json!("v2"))).len(),
        1
    );
}

#[test]
fn optional_field_access_works() {
    let property = json!({"type": "object", "properties": {"a": {"type": "string"}}, "x-kubernetes-validations": [
        {"rule": "self.?a.orValue('none') != 'bad' && !self[?'b'].hasValue() && !self.?b.hasValue()"}]});
    assert_eq!(
        rule_messages(property.clone(), json!({}), None),
        Vec::<String>::new()
    );
    assert_eq!(rule_messages(property, json!({"a": "bad"}), None).len(), 1);
}

#[test]
fn date_time_and_duration_fields_are_cel_timestamps_and_durations() {
    let property = json!({"type": "object", "properties": {
        "start": {"type": "string", "format": "date-time"},
        "end": {"type": "string", "format": "date-time"},
        "timeout": {"type": "string", "format": "duration"}
    }, "x-kubernetes-validations": [
        {"rule": "self.end > self.start", "message": "end must be after start"},
        {"rule": "self.timeout <= duration('1h')", "message": "timeout at most 1h"}
    ]});
    assert!(rule_messages(
        property.clone(),
        json!({"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00+00:00", "timeout": "30m"}),
        None
    )
    .is_empty());
    assert_eq!(
        rule_messages(
            property,
            json!({"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z", "timeout": "2h"}),
            None
        ),
        vec![
            "spec.x: Invalid value: \"object\": end must be after start",
            "spec.x: Invalid value: \"object\": timeout at most 1h",
        ]
    );
}

#[test]
fn runaway_cost_is_refused_not_run() {
    // Within the static estimate at CRD creation (10,000,000 with 100 items), past the
    // 1,000,000 a single evaluation may cost.
    let property = json!({"type": "array", "maxItems": 100, "items": {"type": "integer"}, "x-kubernetes-validations": [
        {"rule": "self.all(a, self.all(b, self.all(c, a + b + c >= 0)))"}]});
    let big: Vec<i64> = (0..100).collect();
    assert_eq!(
        rule_messages(property.clone(), json!(big), None),
        vec![
            "spec.x: Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.all(a, self.all(b, self.all(c, a + b + c >= 0)))"
        ]
    );
    assert!(rule_messages(property, json!([1, 2, 3]), None).is_empty());
}

fn rule_schema(rule: &str) -> Value {
    json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": rule}],
    })
}

#[test]
fn rules_nested_past_the_limit_are_refused_at_compile_time() {
    let parenthesized = format!("{}self.a{} > 1", "(".repeat(500), ")".repeat(500));
    let long_chain = format!("self.a{} > 1", " + 1".repeat(3000));
    let nested_calls = format!("{}self.a{} > 1", "int(".repeat(40), ")".repeat(40));
    for rule in [parenthesized, long_chain, nested_calls] {
        let messages = compile_messages(rule_schema(&rule));
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(
            messages[0].contains("compilation failed")
                && (messages[0].contains("Recursion limit of 33 exceeded")
                    || messages[0].contains("expression nesting exceeds the limit of 32")),
            "{}",
            &messages[0][messages[0].len().saturating_sub(200)..]
        );
    }
}

/// Parsing and evaluating a rule near the nesting limit takes several MiB of stack in an
/// unoptimised build; a caller on a small stack (an async worker thread has 2 MiB) must still
/// get an answer, not a process-wide abort.
#[test]
fn rules_at_the_nesting_limit_compile_and_run_from_a_small_stack() {
    let thread = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let calls = format!("{}self.a{} > 1", "int(".repeat(28), ")".repeat(28));
            let chain = format!("self.a{} > 1", " + 1".repeat(28));
            let parentheses = format!("{}self.a{} > 1", "(".repeat(30), ")".repeat(30));
            let mut outcomes = Vec::new();
            for rule in [calls, chain, parentheses] {
                let schema = Schema::compile(&rule_schema(&rule));
                let schema = schema.unwrap_or_else(|e| panic!("{e}"));
                outcomes.push((
                    schema.validate(&json!({"a": 5}), None).len(),
                    schema.validate(&json!({"a": -100}), None).len(),
                ));
            }
            outcomes
        })
        .unwrap();
    assert_eq!(thread.join().unwrap(), vec![(0, 1); 3]);
}

#[test]
fn schema_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Schema>();
}

mod properties {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::super::*;

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..300).prop_map(Value::from),
            (-2.5f64..2.5).prop_map(Value::from),
            "[a-c0-9./:-]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec!["a", "b", "name", "spec"]),
                    inner,
                    0..4
                )
                .prop_map(|map| Value::Object(
                    map.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                )),
            ]
        })
    }

    /// Schemas mixing every keyword with arbitrary (often wrong) values.
    fn schema() -> impl Strategy<Value = Value> {
        let keyword = prop_oneof![
            prop::sample::select(vec![
                "object", "array", "string", "integer", "number", "boolean", "bogus"
            ])
            .prop_map(|t| ("type", json!(t))),
            value().prop_map(|v| ("default", v)),
            value().prop_map(|v| ("enum", v)),
            value().prop_map(|v| ("maximum", v)),
            value().prop_map(|v| ("minLength", v)),
            value().prop_map(|v| ("maxItems", v)),
            value().prop_map(|v| ("required", v)),
            prop::sample::select(vec!["^a", "(", "[", "a{2,}"]).prop_map(|p| ("pattern", json!(p))),
            prop::sample::select(vec!["date-time", "cidr", "duration", "uuid"])
                .prop_map(|f| ("format", json!(f))),
            prop::sample::select(vec!["set", "map", "atomic", "x"])
                .prop_map(|t| ("x-kubernetes-list-type", json!(t))),
            Just(("x-kubernetes-list-map-keys", json!(["name"]))),
            Just(("x-kubernetes-int-or-string", json!(true))),
            Just(("x-kubernetes-preserve-unknown-fields", json!(true))),
            Just(("nullable", json!(true))),
            prop::sample::select(vec![
                "self == oldSelf",
                "size(self) > 0",
                "self.all(x, x != '')",
                "self.a > 1",
                "self ==",
                "isCIDR(self)",
                "self.?a.orValue(1) == 1",
                "self[0] == 1",
                "1 / 0 == 1",
            ])
            .prop_map(|rule| (
                "x-kubernetes-validations",
                json!([{"rule": rule, "messageExpression": "string(self)"}])
            )),
        ];
        let node = prop::collection::vec(keyword, 0..5).prop_map(|pairs| {
            Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
        });
        node.prop_recursive(3, 16, 3, |inner| {
            (
                inner.clone(),
                prop::collection::btree_map(
                    prop::sample::select(vec!["a", "b", "name", "spec"]),
                    inner.clone(),
                    0..3,
                ),
                inner,
            )
                .prop_map(|(mut node, properties, items)| {
                    if let Value::Object(map) = &mut node {
                        map.insert(
                            "properties".into(),
                            Value::Object(
                                properties
                                    .into_iter()
                                    .map(|(k, v)| (k.to_string(), v))
                                    .collect(),
                            ),
                        );
                        map.insert("items".into(), items);
                    }
                    node
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn schemas_never_panic(raw in schema(), object in value(), old in value()) {
            let raw = match raw {
                Value::Object(mut map) => {
                    map.insert("type".into(), json!("object"));
                    Value::Object(map)
                }
                other => other,
            };
            if let Ok(schema) = Schema::compile(&raw) {
                let mut object = json!({"spec": object});
                let old = json!({"spec": old});
                schema.prune(&mut object);
                schema.apply_defaults(&mut object);
                let errors = schema.validate(&object, Some(&old));
                for error in errors {
                    prop_assert!(!error.to_message().is_empty());
                }
                let _ = schema.list_type(&["spec", "a"]);
            }
        }

        #[test]
        fn a_rich_schema_never_panics_on_arbitrary_objects(spec in value(), old in value()) {
            let raw = json!({"type": "object", "properties": {"spec": {
                "type": "object",
                "x-kubernetes-validations": [{"rule": "self.name == oldSelf.name", "message": "immutable"}],
                "properties": {
                    "name": {"type": "string", "maxLength": 3, "pattern": "^[a-c]*$", "default": "a",
                             "x-kubernetes-validations": [{"rule": "isCIDR(self) || self.size() < 3"}]},
                    "a": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {"name": {"type": "string"}, "b": {"x-kubernetes-int-or-string": true}},
                                    "x-kubernetes-validations": [{"rule": "self.?b.orValue(0) != 7", "messageExpression": "'b=' + (has(self.b) ? 'set' : 'unset')"}]}},
                    "b": {"type": "number", "minimum": 0, "multipleOf": 0.5, "nullable": true},
                    "spec": {"type": "object", "maxProperties": 4, "additionalProperties": {"type": "array", "maxItems": 8, "items": {"type": "integer"},
                             "x-kubernetes-validations": [{"rule": "self.all(x, self.exists(y, y >= x))"}]}}
                }
            }}});
            let schema = Schema::compile(&raw).unwrap();
            let mut object = json!({"spec": spec});
            schema.prune(&mut object);
            schema.apply_defaults(&mut object);
            for error in schema.validate(&object, Some(&json!({"spec": old}))) {
                prop_assert!(!error.to_message().is_empty());
            }
        }
    }
}

#[test]
fn long_lists_are_checked_in_linear_time() {
    // A request can carry tens of thousands of list items; uniqueness checks must not be
    // quadratic.
    let compiled = schema(json!({
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "rules": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"}}}}
    }));
    crate::growth::assert_grows_linearly("validating long lists", 12_500, |n| {
        let tags: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
        let rules: Vec<Value> = (0..n).map(|i| json!({"name": format!("r{i}")})).collect();
        let object = json!({"spec": {"tags": tags, "rules": rules}});
        assert!(compiled.validate(&object, None).is_empty());
        // On update every item is correlated with its old self.
        let mut updated = object.clone();
        updated["spec"]["rules"][7]["name"] = json!("renamed");
        assert!(compiled.validate(&updated, Some(&object)).is_empty());
    });
}

#[test]
fn rules_run_only_where_a_value_changed_or_a_transition_rule_reads_the_old_one() {
    let raw = json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer", "x-kubernetes-validations": [
                    {"rule": "self >= 1"}]},
                "zone": {"type": "string", "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "immutable"}]}
            }},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
        }
    });
    let compiled = Schema::compile(&raw).unwrap();
    let object = |size: i64, zone: Option<&str>, phase: &str| {
        let mut spec = json!({"size": size});
        if let Some(zone) = zone {
            spec["zone"] = json!(zone);
        }
        json!({"spec": spec, "status": {"phase": phase}})
    };
    // (object, old, a rule runs)
    let cases = [
        // A create runs the rules of the values it has.
        (object(1, None, "a"), None, true),
        // Only the status changed: the spec's rules are ratcheted away.
        (object(1, None, "b"), Some(object(1, None, "a")), false),
        // A changed value runs its rules.
        (object(2, None, "a"), Some(object(1, None, "a")), true),
        // A transition rule runs wherever the old value exists, changed or not.
        (
            object(1, Some("x"), "b"),
            Some(object(1, Some("x"), "a")),
            true,
        ),
    ];
    for (index, (new, old, runs)) in cases.iter().enumerate() {
        assert_eq!(
            cel::any_rule_runs(&compiled.root, new, old.as_ref()),
            *runs,
            "case {index}"
        );
    }
    // Whatever the check says, the results are those of running every rule.
    assert!(
        compiled
            .validate(&object(1, None, "b"), Some(&object(1, None, "a")))
            .is_empty()
    );
    assert_eq!(
        messages(&compiled.validate(&object(1, Some("y"), "b"), Some(&object(1, Some("x"), "a")))),
        vec!["spec.zone: Invalid value: \"string\": immutable"]
    );
    assert_eq!(
        messages(&compiled.validate(&object(0, None, "b"), Some(&object(1, None, "a")))),
        vec!["spec.size: Invalid value: \"integer\": failed rule: self >= 1"]
    );
}
