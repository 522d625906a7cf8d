use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

#[test]
fn merge_patch_follows_rfc_7386_appendix_a() {
    // The test cases of RFC 7386, Appendix A.
    let cases = [
        (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
        (
            json!({"a": "b"}),
            json!({"b": "c"}),
            json!({"a": "b", "b": "c"}),
        ),
        (json!({"a": "b"}), json!({"a": null}), json!({})),
        (
            json!({"a": "b", "b": "c"}),
            json!({"a": null}),
            json!({"b": "c"}),
        ),
        (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
        (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
        (
            json!({"a": {"b": "c"}}),
            json!({"a": {"b": "d", "c": null}}),
            json!({"a": {"b": "d"}}),
        ),
        (
            json!({"a": [{"b": "c"}]}),
            json!({"a": [1]}),
            json!({"a": [1]}),
        ),
        (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
        (json!({"a": "b"}), json!(["c"]), json!(["c"])),
        (json!({"a": "foo"}), Value::Null, Value::Null),
        (json!({"a": "foo"}), json!("bar"), json!("bar")),
        (
            json!({"e": null}),
            json!({"a": 1}),
            json!({"e": null, "a": 1}),
        ),
        (
            json!([1, 2]),
            json!({"a": "b", "c": null}),
            json!({"a": "b"}),
        ),
        (
            json!({}),
            json!({"a": {"bb": {"ccc": null}}}),
            json!({"a": {"bb": {}}}),
        ),
    ];
    for (original, patch, expected) in cases {
        let mut target = original.clone();
        merge_patch(&mut target, &patch);
        assert_eq!(target, expected, "{original} + {patch}");
    }
}

#[test]
fn json_patch_operations_apply() {
    let base = json!({"spec": {"size": 1, "tags": ["a", "b"], "x~y": 1, "a/b": 2}});
    let cases = [
        (
            json!([{"op": "add", "path": "/spec/zone", "value": "z"}]),
            json!({"spec": {"size": 1, "tags": ["a", "b"], "x~y": 1, "a/b": 2, "zone": "z"}}),
        ),
        (
            json!([{"op": "add", "path": "/spec/tags/1", "value": "c"}]),
            json!({"spec": {"size": 1, "tags": ["a", "c", "b"], "x~y": 1, "a/b": 2}}),
        ),
        (
            json!([{"op": "add", "path": "/spec/tags/-", "value": "c"}]),
            json!({"spec": {"size": 1, "tags": ["a", "b", "c"], "x~y": 1, "a/b": 2}}),
        ),
        (
            json!([{"op": "remove", "path": "/spec/tags/0"}]),
            json!({"spec": {"size": 1, "tags": ["b"], "x~y": 1, "a/b": 2}}),
        ),
        (
            json!([{"op": "remove", "path": "/spec/tags/-1"}]),
            json!({"spec": {"size": 1, "tags": ["a"], "x~y": 1, "a/b": 2}}),
        ),
        (
            json!([{"op": "replace", "path": "/spec/size", "value": 3}]),
            json!({"spec": {"size": 3, "tags": ["a", "b"], "x~y": 1, "a/b": 2}}),
        ),
        (
            json!([{"op": "move", "from": "/spec/size", "path": "/spec/count"}]),
            json!({"spec": {"count": 1, "tags": ["a", "b"], "x~y": 1, "a/b": 2}}),
        ),
        (
            json!([{"op": "copy", "from": "/spec/tags/0", "path": "/spec/first"}]),
            json!({"spec": {"size": 1, "tags": ["a", "b"], "x~y": 1, "a/b": 2, "first": "a"}}),
        ),
        (
            json!([{"op": "test", "path": "/spec/size", "value": 1.0}, {"op": "remove", "path": "/spec/x~0y"}, {"op": "remove", "path": "/spec/a~1b"}]),
            json!({"spec": {"size": 1, "tags": ["a", "b"]}}),
        ),
    ];
    for (patch, expected) in cases {
        let mut target = base.clone();
        json_patch(&mut target, &patch).unwrap();
        assert_eq!(target, expected, "{patch}");
    }
}

#[test]
fn json_patch_errors_use_evanphx_wording_and_leave_the_target_alone() {
    // Wording from github.com/evanphx/json-patch patch.go (errors.Wrapf adds ": <cause>").
    let base = json!({"spec": {"size": 1, "tags": ["a"]}});
    let cases = [
        (
            json!([{"op": "test", "path": "/spec/size", "value": 2}]),
            "testing value /spec/size failed: test failed",
        ),
        (
            json!([{"op": "add", "path": "/nope/x", "value": 1}]),
            "add operation does not apply: doc is missing path: \"/nope/x\": missing value",
        ),
        (
            json!([{"op": "remove", "path": "/spec/zone"}]),
            "error in remove for path: '/spec/zone': Unable to remove nonexistent key: zone: missing value",
        ),
        (
            json!([{"op": "replace", "path": "/spec/zone", "value": 1}]),
            "replace operation does not apply: doc is missing key: /spec/zone: missing value",
        ),
        (
            json!([{"op": "add", "path": "/spec/tags/5", "value": "x"}]),
            "error in add for path: '/spec/tags/5': Unable to access invalid index: 5: invalid index referenced",
        ),
        (
            json!([{"op": "move", "from": "/nope/a", "path": "/spec/a"}]),
            "move operation does not apply: doc is missing from path: /nope/a: missing value",
        ),
        (
            json!([{"op": "frobnicate", "path": "/spec"}]),
            "Unexpected kind: frobnicate",
        ),
        (
            json!([{"op": "replace", "path": "", "value": {}}]),
            "replace operation does not apply: doc is missing path: : missing value",
        ),
    ];
    for (patch, expected) in cases {
        // A successful first operation must be rolled back too.
        let mut operations = vec![json!({"op": "replace", "path": "/spec/size", "value": 9})];
        operations.extend(patch.as_array().unwrap().iter().cloned());
        let mut target = base.clone();
        let error = json_patch(&mut target, &Value::Array(operations)).unwrap_err();
        assert_eq!(error, PatchError::NotApplicable(expected.to_string()));
        assert_eq!(target, base);
    }
    let mut target = base.clone();
    assert!(matches!(
        json_patch(&mut target, &json!({"op": "add"})),
        Err(PatchError::Malformed(_))
    ));
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-d]", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn without_nulls(value: Value) -> Value {
    strip_nulls(&value)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn merge_patch_of_a_diff_reproduces_the_target(original in arbitrary_json(), modified in arbitrary_json()) {
        // Merge patches cannot express nulls inside objects, so the target has none.
        let modified = without_nulls(modified);
        let patch = create_merge_patch(&original, &modified);
        let mut target = original.clone();
        merge_patch(&mut target, &patch);
        prop_assert_eq!(target, modified);
    }

    #[test]
    fn json_patch_never_panics(document in arbitrary_json(), paths in prop::collection::vec("(/[a-d0-9~-]{0,2}){0,3}", 1..4),
                               ops in prop::collection::vec(prop::sample::select(vec!["add", "remove", "replace", "move", "copy", "test", "bad"]), 1..4),
                               value in arbitrary_json()) {
        let operations: Vec<Value> = ops.iter().zip(paths.iter().cycle()).map(|(op, path)| {
            json!({"op": op, "path": path, "from": paths[0], "value": value})
        }).collect();
        let mut target = document.clone();
        if json_patch(&mut target, &Value::Array(operations)).is_err() {
            prop_assert_eq!(target, document);
        }
    }
}

fn patch_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        (-3i64..3).prop_map(Value::from),
        prop::sample::select(vec!["a", "b", "replace", "delete", "merge", "x"])
            .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "spec",
                    "containers",
                    "name",
                    "env",
                    "metadata",
                    "finalizers",
                    "$patch",
                    "$retainKeys",
                    "$deleteFromPrimitiveList/finalizers",
                    "$setElementOrder/containers",
                    "data",
                ]),
                inner,
                0..4,
            )
            .prop_map(|map| Value::Object(
                map.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn strategic_merge_patch_never_panics(original in patch_json(), patch in patch_json()) {
        let keys = builtin_merge_keys("", "Pod");
        let mut target = original.clone();
        if strategic_merge_patch(&mut target, &patch, keys.as_ref()).is_err() {
            prop_assert_eq!(target, original);
        }
    }
}
