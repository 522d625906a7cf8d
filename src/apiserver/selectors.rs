//! Label and field selectors as `kubectl -l` / `--field-selector` send them.

use crate::store::{Labels, ObjectIndex};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    #[error("unable to parse requirement: {0}")]
    Label(String),
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
    #[error("invalid field selector: {0}")]
    Field(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

// === impl LabelSelector ===

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(LabelSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements
            .iter()
            .all(|requirement| match requirement {
                Requirement::Equals(key, value) => labels.get(key) == Some(value),
                Requirement::NotEquals(key, value) => labels.get(key) != Some(value),
                Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
                Requirement::NotIn(key, values) => {
                    !labels.get(key).is_some_and(|v| values.contains(v))
                }
                Requirement::Exists(key) => labels.contains_key(key),
                Requirement::DoesNotExist(key) => !labels.contains_key(key),
                Requirement::GreaterThan(key, bound) => labels
                    .get(key)
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *bound),
                Requirement::LessThan(key, bound) => labels
                    .get(key)
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *bound),
            })
    }
}

/// Splits on commas that are not inside `( )`.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (position, character) in text.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..position]);
                start = position + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_requirement(part: &str) -> Result<Requirement, SelectorError> {
    let error = || SelectorError::Label(part.to_string());
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(valid_key(key.trim(), part)?));
    }
    for (operator, set_op) in [(" notin ", true), (" in ", false)] {
        if let Some(position) = part.find(operator) {
            let key = valid_key(part[..position].trim(), part)?;
            let rest = part[position + operator.len()..].trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|rest| rest.strip_suffix(')'))
                .ok_or_else(error)?;
            let values: Vec<String> = inner
                .split(',')
                .map(|value| value.trim().to_string())
                .collect();
            for value in &values {
                valid_value(value, part)?;
            }
            return Ok(if set_op {
                Requirement::NotIn(key, values)
            } else {
                Requirement::In(key, values)
            });
        }
    }
    for (operator, kind) in [("!=", 0), ("==", 1), ("=", 1), (">", 2), ("<", 3)] {
        if let Some(position) = part.find(operator) {
            let key = valid_key(part[..position].trim(), part)?;
            let value = part[position + operator.len()..].trim().to_string();
            return match kind {
                0 => Ok(Requirement::NotEquals(key, valid_value(&value, part)?)),
                1 => Ok(Requirement::Equals(key, valid_value(&value, part)?)),
                2 => Ok(Requirement::GreaterThan(
                    key,
                    value.parse().map_err(|_| error())?,
                )),
                _ => Ok(Requirement::LessThan(
                    key,
                    value.parse().map_err(|_| error())?,
                )),
            };
        }
    }
    Ok(Requirement::Exists(valid_key(part.trim(), part)?))
}

/// Whether `value` is a valid label value.
pub fn is_valid_label_value(value: &str) -> bool {
    valid_value(value, value).is_ok()
}

fn valid_key(key: &str, part: &str) -> Result<String, SelectorError> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|prefix| {
        !prefix.is_empty()
            && prefix.len() <= 253
            && prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c))
    });
    if name_ok && prefix_ok {
        Ok(key.to_string())
    } else {
        Err(SelectorError::Label(format!(
            "{part}: invalid label key {key:?}"
        )))
    }
}

fn valid_value(value: &str, part: &str) -> Result<String, SelectorError> {
    let ok = value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
    if ok {
        Ok(value.to_string())
    } else {
        Err(SelectorError::Label(format!(
            "{part}: invalid label value {value:?}"
        )))
    }
}

/// A field selector: `metadata.name` and `metadata.namespace` for every kind (what the real
/// server supports everywhere), plus the extra fields a kind declares selectable (Events).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<(FieldName, bool, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum FieldName {
    Name,
    Namespace,
    /// A path in the stored object (dot-separated), compared as a string.
    Object(String),
}

// === impl FieldSelector ===

impl FieldSelector {
    /// Parses a selector allowing only `metadata.name` and `metadata.namespace`.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        Self::parse_with(text, &[])
    }

    /// Parses a selector; `extra` maps each additional selectable field to the path it reads
    /// in the stored object.
    pub fn parse_with(text: &str, extra: &[(&str, &str)]) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, equal, value) = if let Some((field, value)) = part.split_once("!=") {
                (field, false, value)
            } else if let Some((field, value)) = part.split_once("==") {
                (field, true, value)
            } else if let Some((field, value)) = part.split_once('=') {
                (field, true, value)
            } else {
                return Err(SelectorError::Field(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            let field = match field.trim() {
                "metadata.name" => FieldName::Name,
                "metadata.namespace" => FieldName::Namespace,
                other => match extra.iter().find(|(name, _)| *name == other) {
                    Some((_, path)) => FieldName::Object((*path).to_string()),
                    None => {
                        return Err(SelectorError::UnsupportedField(format!(
                            "\"{other}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                        )));
                    }
                },
            };
            requirements.push((field, equal, value.trim().to_string()));
        }
        Ok(FieldSelector { requirements })
    }

    pub fn matches(&self, index: &ObjectIndex) -> bool {
        self.matches_parts(&index.name, &index.namespace)
    }

    /// The name and namespace requirements (object-field requirements are checked by
    /// [`FieldSelector::matches_object`]).
    pub fn matches_parts(&self, name: &str, namespace: &str) -> bool {
        self.requirements.iter().all(|(field, equal, value)| {
            let actual = match field {
                FieldName::Name => name,
                FieldName::Namespace => namespace,
                FieldName::Object(_) => return true,
            };
            (actual == value) == *equal
        })
    }

    /// Whether some requirement reads the object itself.
    pub fn needs_object(&self) -> bool {
        self.requirements
            .iter()
            .any(|(field, _, _)| matches!(field, FieldName::Object(_)))
    }

    /// The object-field requirements, against the stored object. A missing field reads as "".
    pub fn matches_object(&self, object: &serde_json::Value) -> bool {
        self.requirements.iter().all(|(field, equal, value)| {
            let FieldName::Object(path) = field else {
                return true;
            };
            let found = path
                .split('.')
                .try_fold(object, |current, key| current.get(key));
            let actual = match found {
                Some(serde_json::Value::String(text)) => text.clone(),
                Some(serde_json::Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }

    /// The name an `metadata.name=x` selector pins (kube-rs uses this for single-object watches).
    pub fn pinned_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|(field, equal, _)| *field == FieldName::Name && *equal)
            .map(|(_, _, value)| value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_label_operator() {
        let app_web = labels(&[("app", "web"), ("tier", "front")]);
        let app_db = labels(&[("app", "db")]);
        let cases = [
            ("app=web", true, false),
            ("app==web", true, false),
            ("app!=web", false, true),
            ("app in (web, cache)", true, false),
            ("app notin (web,cache)", false, true),
            ("tier", true, false),
            ("!tier", false, true),
            ("app,tier=front", true, false),
            ("", true, true),
        ];
        for (selector, web, db) in cases {
            let parsed = LabelSelector::parse(selector).unwrap();
            assert_eq!(parsed.matches(&app_web), web, "{selector} on web");
            assert_eq!(parsed.matches(&app_db), db, "{selector} on db");
        }
    }

    #[test]
    fn malformed_selectors_are_errors() {
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
        assert!(LabelSelector::parse("app=(x").is_err());
        assert!(FieldSelector::parse("spec.x=1").is_err());
        assert!(FieldSelector::parse("metadata.name").is_err());
    }

    #[test]
    fn field_selector_on_name_and_namespace() {
        let selector =
            FieldSelector::parse("metadata.name=a,metadata.namespace!=kube-system").unwrap();
        assert!(selector.matches_parts("a", "default"));
        assert!(!selector.matches_parts("a", "kube-system"));
        assert!(!selector.matches_parts("b", "default"));
        assert_eq!(selector.pinned_name(), Some("a"));
    }

    #[test]
    fn extra_fields_read_the_object() {
        let extra = [
            ("involvedObject.name", "involvedObject.name"),
            ("type", "type"),
        ];
        let selector =
            FieldSelector::parse_with("involvedObject.name=x,type!=Warning", &extra).unwrap();
        assert!(selector.needs_object());
        let event = serde_json::json!({"involvedObject": {"name": "x"}, "type": "Normal"});
        assert!(selector.matches_object(&event));
        let warning = serde_json::json!({"involvedObject": {"name": "x"}, "type": "Warning"});
        assert!(!selector.matches_object(&warning));
        assert!(FieldSelector::parse("involvedObject.name=x").is_err());
    }
}
