//! Field sets as `sigs.k8s.io/structured-merge-diff` keeps them, and their `FieldsV1` encoding
//! (`f:<name>`, `k:<json>`, `v:<json>`, `i:<index>`, `.` for the node itself).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum PathElement {
    /// An object field.
    Field(String),
    /// An item of a map list, by its key fields, as canonical JSON (`{"name":"a"}`).
    Key(String),
    /// An item of a set list, by its value, as canonical JSON.
    Value(String),
    /// An item of a list by position (only read from encoded sets).
    Index(usize),
}

pub(crate) type Path = Vec<PathElement>;

/// A set of owned paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    pub(crate) paths: BTreeSet<Path>,
}

/// Why an encoded field set could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FieldSetError {
    #[error("fieldsV1 must be an object at {0}")]
    NotAnObject(String),
    #[error("unknown fieldsV1 key {0:?}")]
    UnknownKey(String),
    #[error("invalid fieldsV1 key {0:?}: {1}")]
    BadJson(String, String),
}

impl FieldSet {
    pub(crate) fn insert(&mut self, path: Path) {
        self.paths.insert(path);
    }

    pub(crate) fn contains(&self, path: &Path) -> bool {
        self.paths.contains(path)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Whether the set owns `path` or anything below it.
    pub(crate) fn owns_at_or_below(&self, path: &Path) -> bool {
        self.paths
            .range(path.clone()..)
            .next()
            .is_some_and(|owned| owned.starts_with(path))
    }

    pub(crate) fn union(&self, other: &FieldSet) -> FieldSet {
        FieldSet {
            paths: self.paths.union(&other.paths).cloned().collect(),
        }
    }

    pub(crate) fn difference(&self, other: &FieldSet) -> FieldSet {
        FieldSet {
            paths: self.paths.difference(&other.paths).cloned().collect(),
        }
    }

    pub(crate) fn intersection(&self, other: &FieldSet) -> FieldSet {
        FieldSet {
            paths: self.paths.intersection(&other.paths).cloned().collect(),
        }
    }

    /// Encodes the set as `fieldsV1`: a node per path element, `{}` for a member without
    /// children, and `"."` marking a member that also has children. The root is never marked.
    pub(crate) fn encode(&self) -> Value {
        let paths: Vec<&Path> = self.paths.iter().collect();
        Value::Object(encode_below(&paths, 0))
    }

    /// Decodes `fieldsV1`.
    pub(crate) fn decode(encoded: &Value) -> Result<FieldSet, FieldSetError> {
        let mut set = FieldSet::default();
        decode_into(encoded, &mut Vec::new(), &mut set)?;
        Ok(set)
    }
}

/// The encoded children of the node at `depth` that all `paths` (sorted, as a set keeps them)
/// share. Paths under one child are contiguous, and the child itself, when it is a member,
/// comes first.
fn encode_below(paths: &[&Path], depth: usize) -> Map<String, Value> {
    let mut node = Map::new();
    let mut start = 0;
    while start < paths.len() {
        let Some(element) = paths[start].get(depth) else {
            // The node itself (a member): its parent marks it.
            start += 1;
            continue;
        };
        let end = start
            + paths[start..]
                .iter()
                .take_while(|path| path.get(depth) == Some(element))
                .count();
        let group = &paths[start..end];
        let mut child = encode_below(group, depth + 1);
        if group[0].len() == depth + 1 && !child.is_empty() {
            child.insert(".".to_string(), Value::Object(Map::new()));
        }
        node.insert(encode_element(element), Value::Object(child));
        start = end;
    }
    node
}

fn decode_into(
    encoded: &Value,
    prefix: &mut Path,
    set: &mut FieldSet,
) -> Result<(), FieldSetError> {
    let Value::Object(map) = encoded else {
        return Err(FieldSetError::NotAnObject(render_path(prefix)));
    };
    for (key, child) in map {
        if key == "." {
            set.insert(prefix.clone());
            continue;
        }
        prefix.push(decode_element(key)?);
        match child {
            Value::Object(inner) if inner.is_empty() => set.insert(prefix.clone()),
            _ => decode_into(child, prefix, set)?,
        }
        prefix.pop();
    }
    Ok(())
}

fn encode_element(element: &PathElement) -> String {
    match element {
        PathElement::Field(name) => format!("f:{name}"),
        PathElement::Key(key) => format!("k:{key}"),
        PathElement::Value(value) => format!("v:{value}"),
        PathElement::Index(index) => format!("i:{index}"),
    }
}

fn decode_element(key: &str) -> Result<PathElement, FieldSetError> {
    let bad = |error: serde_json::Error| FieldSetError::BadJson(key.to_string(), error.to_string());
    if let Some(name) = key.strip_prefix("f:") {
        Ok(PathElement::Field(name.to_string()))
    } else if let Some(json) = key.strip_prefix("k:") {
        let parsed: Value = serde_json::from_str(json).map_err(bad)?;
        if !parsed.is_object() {
            return Err(FieldSetError::BadJson(
                key.to_string(),
                "key must be an object".into(),
            ));
        }
        Ok(PathElement::Key(canonical_json(&parsed)))
    } else if let Some(json) = key.strip_prefix("v:") {
        let parsed: Value = serde_json::from_str(json).map_err(bad)?;
        Ok(PathElement::Value(canonical_json(&parsed)))
    } else if let Some(index) = key.strip_prefix("i:") {
        index
            .parse()
            .map(PathElement::Index)
            .map_err(|_| FieldSetError::UnknownKey(key.to_string()))
    } else {
        Err(FieldSetError::UnknownKey(key.to_string()))
    }
}

/// JSON with object keys sorted, as structured-merge-diff writes keys and values.
pub(crate) fn canonical_json(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical_json(&map[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// A path as structured-merge-diff prints it: `.spec.rules[name="a"].cidr`, `.tags[="x"]`.
pub(crate) fn render_path(path: &Path) -> String {
    let mut out = String::new();
    for element in path {
        match element {
            PathElement::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            PathElement::Key(key) => {
                let parsed: Value = serde_json::from_str(key).unwrap_or(Value::Null);
                let parts: Vec<String> = parsed
                    .as_object()
                    .map(|map| {
                        let mut keys: Vec<&String> = map.keys().collect();
                        keys.sort();
                        keys.into_iter()
                            .map(|k| format!("{k}={}", canonical_json(&map[k])))
                            .collect()
                    })
                    .unwrap_or_default();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            PathElement::Value(value) => out.push_str(&format!("[={value}]")),
            PathElement::Index(index) => out.push_str(&format!("[{index}]")),
        }
    }
    out
}

/// The key of a map-list item: its key fields as a canonical JSON object.
pub(crate) fn item_key(item: &Value, keys: &[String]) -> Option<String> {
    let object = item.as_object()?;
    let mut key = Map::new();
    for name in keys {
        key.insert(name.clone(), object.get(name)?.clone());
    }
    Some(canonical_json(&Value::Object(key)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The encoding built path by path, then members marked by decoding each key back: the
    /// plain definition [`FieldSet::encode`] must agree with.
    fn reference_encode(set: &FieldSet) -> Value {
        fn mark(node: &mut Map<String, Value>, paths: &BTreeSet<Path>, prefix: &mut Path) {
            let keys: Vec<String> = node.keys().filter(|k| k.as_str() != ".").cloned().collect();
            for key in keys {
                let Ok(element) = decode_element(&key) else {
                    continue;
                };
                prefix.push(element);
                if let Some(Value::Object(child)) = node.get_mut(&key) {
                    if paths.contains(prefix) && !child.is_empty() {
                        child.insert(".".to_string(), Value::Object(Map::new()));
                    }
                    mark(child, paths, prefix);
                }
                prefix.pop();
            }
        }
        let mut root = Map::new();
        for path in &set.paths {
            let mut node = &mut root;
            for element in path {
                let entry = node
                    .entry(encode_element(element))
                    .or_insert_with(|| Value::Object(Map::new()));
                let Value::Object(next) = entry else {
                    break;
                };
                node = next;
            }
        }
        mark(&mut root, &set.paths, &mut Vec::new());
        Value::Object(root)
    }

    fn element() -> impl Strategy<Value = PathElement> {
        prop_oneof![
            prop::sample::select(vec!["a", "b", "spec", ""])
                .prop_map(|name| PathElement::Field(name.into())),
            prop::sample::select(vec![r#"{"name":"a"}"#, r#"{"name":"b","port":1}"#])
                .prop_map(|key| PathElement::Key(key.into())),
            prop::sample::select(vec![r#""x""#, "1", "1.5"])
                .prop_map(|value| PathElement::Value(value.into())),
            (0usize..3).prop_map(PathElement::Index),
        ]
    }

    proptest! {
        #[test]
        fn encoding_matches_the_path_by_path_definition(
            paths in prop::collection::btree_set(prop::collection::vec(element(), 0..4), 0..12)
        ) {
            let set = FieldSet { paths };
            prop_assert_eq!(set.encode(), reference_encode(&set));
        }
    }

    #[test]
    fn encoding_round_trips_with_member_dots() {
        let encoded = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:rules": {"k:{\"name\":\"ssh\",\"port\":22}": {".": {}, "f:cidr": {}, "f:name": {}}},
                "f:tags": {"v:\"gpu\"": {}}
            }
        });
        let set = FieldSet::decode(&encoded).unwrap();
        assert!(set.contains(&vec![
            PathElement::Field("metadata".into()),
            PathElement::Field("labels".into())
        ]));
        assert_eq!(set.encode(), encoded);
        let paths: Vec<String> = set.paths.iter().map(render_path).collect();
        assert!(paths.contains(&".spec.rules[name=\"ssh\",port=22].cidr".to_string()));
        assert!(paths.contains(&".spec.tags[=\"gpu\"]".to_string()));
    }

    #[test]
    fn bad_encodings_are_errors() {
        assert!(FieldSet::decode(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::decode(&json!({"k:[1]": {}})).is_err());
        assert!(FieldSet::decode(&json!({"f:a": 1})).is_err());
    }
}
