//! Structural schemas of custom resources: compilation (the CRD-creation checks), defaulting,
//! pruning and validation, following `k8s.io/apiextensions-apiserver/pkg/apiserver/schema` and
//! `k8s.io/kube-openapi/pkg/validation/validate`.

pub(crate) mod cel;
pub(crate) mod cost;
mod defaults;
mod errors;
mod formats;
mod validate;

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

pub use errors::{FieldError, FieldErrorKind, invalid_message, kubectl_invalid_message};

use cel::CompiledRule;

/// Why a schema was rejected.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The schema is not structural or uses what a CRD schema may not; the errors name the
    /// offending paths relative to `openAPIV3Schema` (prefix them with
    /// `spec.versions[i].schema.openAPIV3Schema` for the CRD's 422).
    #[error("{}", join_messages(.errors))]
    Invalid { errors: Vec<FieldError> },
}

impl SchemaError {
    /// The individual errors.
    pub fn errors(&self) -> &[FieldError] {
        match self {
            SchemaError::Invalid { errors } => errors,
        }
    }
}

fn join_messages(errors: &[FieldError]) -> String {
    let messages: Vec<String> = errors.iter().map(FieldError::to_message).collect();
    match messages.len() {
        1 => messages.concat(),
        _ => format!("[{}]", messages.join(", ")),
    }
}

/// How server-side apply merges a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    Atomic,
    Set,
    Map { keys: Vec<String> },
}

/// A CRD version's `openAPIV3Schema`, compiled once when the CRD is created or updated.
#[derive(Debug)]
pub struct Schema {
    raw: Value,
    root: Node,
}

/// One compiled schema node.
#[derive(Debug, Default)]
pub(crate) struct Node {
    pub(crate) type_name: Option<String>,
    pub(crate) int_or_string: bool,
    pub(crate) preserve_unknown_fields: bool,
    pub(crate) embedded_resource: bool,
    pub(crate) nullable: bool,
    pub(crate) format: Option<String>,
    pub(crate) default: Option<Value>,
    pub(crate) enum_values: Option<Vec<Value>>,
    pub(crate) maximum: Option<f64>,
    pub(crate) exclusive_maximum: bool,
    pub(crate) minimum: Option<f64>,
    pub(crate) exclusive_minimum: bool,
    pub(crate) multiple_of: Option<f64>,
    pub(crate) max_length: Option<i64>,
    pub(crate) min_length: Option<i64>,
    pub(crate) pattern: Option<(String, Regex)>,
    pub(crate) max_items: Option<i64>,
    pub(crate) min_items: Option<i64>,
    pub(crate) max_properties: Option<i64>,
    pub(crate) min_properties: Option<i64>,
    pub(crate) required: Vec<String>,
    pub(crate) properties: BTreeMap<String, Node>,
    pub(crate) additional_properties: Option<Box<Node>>,
    pub(crate) items: Option<Box<Node>>,
    pub(crate) list_type: Option<String>,
    pub(crate) list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type: atomic`: the object is owned and replaced as a whole.
    pub(crate) map_type_atomic: bool,
    pub(crate) all_of: Vec<Node>,
    pub(crate) any_of: Vec<Node>,
    pub(crate) one_of: Vec<Node>,
    pub(crate) not: Option<Box<Node>>,
    pub(crate) rules: Vec<CompiledRule>,
    /// The node's CEL declaration (types and declared bounds), made when a rule first runs.
    pub(crate) declaration: std::sync::OnceLock<Option<cost::Decl>>,
}

impl Node {
    /// The schema of a property of this object node, if it has one.
    pub(crate) fn property(&self, key: &str) -> Option<&Node> {
        self.properties
            .get(key)
            .or(self.additional_properties.as_deref())
    }

    /// The node's CEL declaration, as rules at it see `self`; `None` where the schema is not
    /// exposed to rules. `resource_root`: the root of the custom resource.
    pub(crate) fn cel_declaration(&self, resource_root: bool) -> Option<&cost::Decl> {
        self.declaration
            .get_or_init(|| cost::Decl::of(self, resource_root || self.embedded_resource))
            .as_ref()
    }

    /// The `type` as the CEL validator reports it as the bad value of a rule failure.
    pub(crate) fn type_label(&self) -> &str {
        self.type_name.as_deref().unwrap_or("")
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Root,
    Field,
    Item,
    /// Inside allOf/anyOf/oneOf/not, where types and structure are not required.
    Junctor,
    /// Inside the junctors of an `x-kubernetes-int-or-string` node, which may name the two types.
    IntOrStringJunctor,
}

const SUPPORTED_TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// Stack for parsing and evaluating CEL rules. ANTLR's prediction and the interpreter recurse
/// per nesting level with large frames: a rule at [`cel::MAX_NESTING`] needs up to 8 MiB in an
/// unoptimised build, far more than an async worker thread's 2 MiB. Only the pages a rule
/// touches are committed. A server that starts its threads with this much stack
/// (`gpucloud-operator apiserver` does) evaluates rules on them as they are.
pub const CEL_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Runs `work` with at least half of [`CEL_STACK_BYTES`] of stack left, so a deeply nested
/// rule is an error (or a result) instead of a stack overflow that aborts the whole server:
/// on the caller's stack when that much of it is left, else on a new stack of
/// [`CEL_STACK_BYTES`] on the same thread. Starting a thread per validation for it instead
/// took more than a tenth of the API server's CPU while 100,000 objects were created.
pub(crate) fn on_cel_stack<T>(work: impl FnOnce() -> T) -> T {
    stacker::maybe_grow(CEL_STACK_BYTES / 2, CEL_STACK_BYTES, work)
}

// === impl Schema ===

impl Schema {
    /// Compiles a schema, rejecting it as the real apiserver's CRD validation would when it is
    /// not structural or a validation rule does not compile.
    pub fn compile(open_api_v3_schema: &Value) -> Result<Schema, SchemaError> {
        on_cel_stack(|| Schema::compile_here(open_api_v3_schema, true))
    }

    /// The strings, lists and maps without a declared bound (`maxLength`, `maxItems`,
    /// `maxProperties`, an enum) that a schema's rules read, each as
    /// `<path of the rule>: self.<field>`, whether or not their cost is within the budget.
    /// kube-apiserver sizes them by its request limit when it estimates a rule's cost.
    pub fn unbounded_rule_reads(open_api_v3_schema: &Value) -> Result<Vec<String>, SchemaError> {
        on_cel_stack(|| {
            let schema = Schema::compile_here(open_api_v3_schema, false)?;
            Ok(cost::unbounded_rule_reads(&schema.root))
        })
    }

    fn compile_here(open_api_v3_schema: &Value, check_cost: bool) -> Result<Schema, SchemaError> {
        let mut errors = Vec::new();
        let root = compile_node(open_api_v3_schema, "", Level::Root, &mut errors);
        if errors.is_empty() {
            validate_defaults(&root, "", &mut errors);
        }
        // The apiserver sorts structural-schema errors by message.
        errors.sort_by_key(FieldError::to_message);
        // The rules' estimated cost is checked only on a schema without other errors.
        if check_cost && errors.is_empty() {
            errors = cost::schema_cost_errors(&root);
        }
        if errors.is_empty() {
            Ok(Schema {
                raw: open_api_v3_schema.clone(),
                root,
            })
        } else {
            Err(SchemaError::Invalid { errors })
        }
    }

    /// Applies `default`s, as the apiserver does on create, update and read.
    pub fn apply_defaults(&self, object: &mut Value) {
        defaults::apply_defaults(&self.root, object);
    }

    /// Drops fields the schema does not know (unless `x-kubernetes-preserve-unknown-fields`),
    /// returning the pruned paths. `apiVersion`, `kind`, `metadata` are kept. Like the
    /// apiserver's decoder it also drops `null`s of non-nullable fields that have no default.
    pub fn prune(&self, object: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        if defaults::needs_prune(&self.root, object, true) {
            defaults::prune(&self.root, object, "", true, &mut pruned);
        }
        defaults::prune_non_nullable_nulls(Some(&self.root), object);
        pruned
    }

    /// Validates an object (after defaulting and pruning) against the schema: the OpenAPI value
    /// validations, list-type invariants and the `x-kubernetes-validations` rules. `old` is the
    /// stored object on update; transition rules run only where the old value exists, and values
    /// unchanged from `old` are not validated again (ratcheting, as Kubernetes 1.33 does).
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errors = Vec::new();
        validate::validate_value(&self.root, object, old, "", &mut errors);
        validate::validate_list_types(&self.root, object, old, "", &mut errors);
        // The apiserver skips CEL rules when a value has the wrong type, because the rules were
        // type-checked against the schema.
        if errors
            .iter()
            .any(|error| error.kind == FieldErrorKind::TypeInvalid)
        {
            errors.push(FieldError::invalid(
                "<nil>",
                Value::Null,
                "some validation rules were not checked because the object was invalid; \
                 correct the existing errors to complete validation",
            ));
            return errors;
        }
        if cel::has_rules(&self.root) && cel::any_rule_runs(&self.root, object, old) {
            errors.extend(on_cel_stack(|| {
                let mut rule_errors = Vec::new();
                cel::validate_rules(&self.root, object, old, &mut rule_errors);
                rule_errors
            }));
        }
        errors
    }

    /// The list type of a path of field names (atomic / set / map with keys), for server-side
    /// apply. Lists without `x-kubernetes-list-type` are atomic, as for every CRD.
    pub fn list_type(&self, path: &[&str]) -> Option<ListType> {
        let node = self.node_at(path)?;
        if node.type_name.as_deref() != Some("array") {
            return None;
        }
        Some(match node.list_type.as_deref() {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map {
                keys: node.list_map_keys.clone(),
            },
            _ => ListType::Atomic,
        })
    }

    /// Whether the object at a path of field names is `x-kubernetes-map-type: atomic`.
    pub(crate) fn is_atomic_object(&self, path: &[&str]) -> bool {
        self.node_at(path).is_some_and(|node| node.map_type_atomic)
    }

    fn node_at(&self, path: &[&str]) -> Option<&Node> {
        let mut node = &self.root;
        for segment in path {
            if node.type_name.as_deref() == Some("array") {
                node = node.items.as_deref()?;
            }
            node = node.property(segment)?;
        }
        Some(node)
    }

    /// The schema as given.
    pub fn raw(&self) -> &Value {
        &self.raw
    }
}

// === compilation ===

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

pub(crate) fn compile_node(
    raw: &Value,
    path: &str,
    level: Level,
    errors: &mut Vec<FieldError>,
) -> Node {
    let mut node = Node::default();
    let Some(map) = raw.as_object() else {
        errors.push(FieldError::invalid(path, raw.clone(), "must be an object"));
        return node;
    };

    // Keywords a CRD schema may not use (apiextensions validation.go).
    let forbidden = [
        ("$ref", "$ref is not supported"),
        ("definitions", "definitions are not supported"),
        ("dependencies", "dependencies are not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("id", "id is not supported"),
        ("$schema", "$schema is not supported"),
    ];
    for (keyword, detail) in forbidden {
        if map.contains_key(keyword) {
            errors.push(FieldError::forbidden(child(path, keyword), detail));
        }
    }
    if map.get("uniqueItems") == Some(&Value::Bool(true)) {
        errors.push(FieldError::forbidden(
            child(path, "uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }

    node.int_or_string = flag(map, "x-kubernetes-int-or-string");
    node.embedded_resource = flag(map, "x-kubernetes-embedded-resource");
    node.nullable = flag(map, "nullable");
    match map.get("x-kubernetes-preserve-unknown-fields") {
        Some(Value::Bool(true)) => node.preserve_unknown_fields = true,
        Some(other) => errors.push(FieldError::invalid(
            child(path, "x-kubernetes-preserve-unknown-fields"),
            other.clone(),
            "must be true or undefined",
        )),
        None => {}
    }

    match map.get("type") {
        Some(Value::String(type_name)) if !type_name.is_empty() => {
            if !SUPPORTED_TYPES.contains(&type_name.as_str()) {
                let valid: Vec<String> = SUPPORTED_TYPES.iter().map(|t| t.to_string()).collect();
                errors.push(FieldError::not_supported(
                    child(path, "type"),
                    Value::String(type_name.clone()),
                    &valid,
                ));
            }
            node.type_name = Some(type_name.clone());
        }
        Some(Value::String(_)) | None => {}
        Some(other) => errors.push(FieldError::invalid(
            child(path, "type"),
            other.clone(),
            "must be a string",
        )),
    }

    check_structure(&node, map, path, level, errors);

    node.format = string_field(map, "format", path, errors);
    node.default = map.get("default").cloned();
    node.enum_values = match map.get("enum") {
        Some(Value::Array(values)) => Some(values.clone()),
        Some(other) => {
            errors.push(FieldError::invalid(
                child(path, "enum"),
                other.clone(),
                "must be an array",
            ));
            None
        }
        None => None,
    };
    node.maximum = number_field(map, "maximum", path, errors);
    node.minimum = number_field(map, "minimum", path, errors);
    node.multiple_of = number_field(map, "multipleOf", path, errors);
    if let Some(factor) = node.multiple_of
        && factor <= 0.0
    {
        errors.push(FieldError::invalid(
            child(path, "multipleOf"),
            map.get("multipleOf").cloned().unwrap_or(Value::Null),
            "must be greater than zero",
        ));
    }
    node.exclusive_maximum = flag(map, "exclusiveMaximum");
    node.exclusive_minimum = flag(map, "exclusiveMinimum");
    node.max_length = count_field(map, "maxLength", path, errors);
    node.min_length = count_field(map, "minLength", path, errors);
    node.max_items = count_field(map, "maxItems", path, errors);
    node.min_items = count_field(map, "minItems", path, errors);
    node.max_properties = count_field(map, "maxProperties", path, errors);
    node.min_properties = count_field(map, "minProperties", path, errors);
    if let Some(pattern) = string_field(map, "pattern", path, errors) {
        match Regex::new(&pattern) {
            Ok(regex) => node.pattern = Some((pattern, regex)),
            Err(error) => errors.push(FieldError::invalid(
                child(path, "pattern"),
                Value::String(pattern.clone()),
                format!("must be a valid regular expression, but isn't: {error}"),
            )),
        }
    }
    match map.get("required") {
        Some(Value::Array(names)) => {
            for (index, name) in names.iter().enumerate() {
                match name.as_str() {
                    Some(name) => node.required.push(name.to_string()),
                    None => errors.push(FieldError::invalid(
                        format!("{}[{index}]", child(path, "required")),
                        name.clone(),
                        "must be a string",
                    )),
                }
            }
        }
        Some(other) => errors.push(FieldError::invalid(
            child(path, "required"),
            other.clone(),
            "must be an array of strings",
        )),
        None => {}
    }

    if let Some(properties) = map.get("properties") {
        match properties.as_object() {
            Some(properties) => {
                let inner_level = if matches!(level, Level::Junctor | Level::IntOrStringJunctor) {
                    Level::Junctor
                } else {
                    Level::Field
                };
                for (name, property) in properties {
                    let property_path = child(path, &format!("properties[{name}]"));
                    let compiled = compile_node(property, &property_path, inner_level, errors);
                    node.properties.insert(name.clone(), compiled);
                }
            }
            None => errors.push(FieldError::invalid(
                child(path, "properties"),
                properties.clone(),
                "must be an object",
            )),
        }
    }
    match map.get("additionalProperties") {
        Some(Value::Bool(true)) | None => {}
        Some(Value::Bool(false)) => errors.push(FieldError::forbidden(
            child(path, "additionalProperties"),
            "additionalProperties cannot be set to false",
        )),
        Some(schema) => {
            let inner_path = child(path, "additionalProperties");
            let inner_level = if matches!(level, Level::Junctor | Level::IntOrStringJunctor) {
                Level::Junctor
            } else {
                Level::Field
            };
            node.additional_properties = Some(Box::new(compile_node(
                schema,
                &inner_path,
                inner_level,
                errors,
            )));
        }
    }
    if let Some(items) = map.get("items") {
        if items.is_array() {
            errors.push(FieldError::forbidden(
                child(path, "items"),
                "items must be a schema object and not an array",
            ));
        } else {
            let inner_level = if matches!(level, Level::Junctor | Level::IntOrStringJunctor) {
                Level::Junctor
            } else {
                Level::Item
            };
            node.items = Some(Box::new(compile_node(
                items,
                &child(path, "items"),
                inner_level,
                errors,
            )));
        }
    }

    for (keyword, target) in [("allOf", 0), ("anyOf", 1), ("oneOf", 2)] {
        if let Some(value) = map.get(keyword) {
            let Some(schemas) = value.as_array() else {
                errors.push(FieldError::invalid(
                    child(path, keyword),
                    value.clone(),
                    "must be an array",
                ));
                continue;
            };
            let junctor_level = if node.int_or_string {
                Level::IntOrStringJunctor
            } else {
                Level::Junctor
            };
            let compiled: Vec<Node> = schemas
                .iter()
                .enumerate()
                .map(|(index, schema)| {
                    let junctor_path = format!("{}[{index}]", child(path, keyword));
                    compile_node(schema, &junctor_path, junctor_level, errors)
                })
                .collect();
            match target {
                0 => node.all_of = compiled,
                1 => node.any_of = compiled,
                _ => node.one_of = compiled,
            }
        }
    }
    if let Some(not) = map.get("not") {
        node.not = Some(Box::new(compile_node(
            not,
            &child(path, "not"),
            Level::Junctor,
            errors,
        )));
    }

    compile_list_type(&mut node, map, path, errors);
    if let Some(map_type) = map.get("x-kubernetes-map-type") {
        let map_type_path = child(path, "x-kubernetes-map-type");
        match map_type.as_str() {
            Some("atomic") => node.map_type_atomic = true,
            Some("granular") => {}
            _ => errors.push(FieldError::not_supported(
                map_type_path.clone(),
                map_type.clone(),
                &["granular".into(), "atomic".into()],
            )),
        }
        if node.type_name.as_deref() != Some("object") {
            errors.push(FieldError::invalid(
                map_type_path,
                map_type.clone(),
                "must only be used if type is object",
            ));
        }
    }

    if let Some(rules) = map.get("x-kubernetes-validations") {
        let rules_path = child(path, "x-kubernetes-validations");
        node.rules = cel::compile_rules(rules, &node, level == Level::Root, &rules_path, errors);
    }
    node
}

/// The structural-schema invariants (apiextensions `validateStructuralInvariants` and
/// `validateStructuralCompleteness`).
fn check_structure(
    node: &Node,
    map: &serde_json::Map<String, Value>,
    path: &str,
    level: Level,
    errors: &mut Vec<FieldError>,
) {
    let type_path = child(path, "type");
    if matches!(level, Level::Junctor | Level::IntOrStringJunctor) {
        // validateNestedValueValidation: what a value validation under a junctor may not say.
        let non_empty = |key: &str| {
            map.get(key)
                .is_some_and(|v| !(v.is_null() || v.as_str() == Some("")))
        };
        let is_true = |key: &str| map.get(key) == Some(&Value::Bool(true));
        let int_or_string_type = level == Level::IntOrStringJunctor
            && matches!(node.type_name.as_deref(), Some("integer" | "string"));
        let rules: [(&str, bool, &str); 11] = [
            (
                "type",
                non_empty("type") && !int_or_string_type,
                "must be empty to be structural",
            ),
            (
                "additionalProperties",
                map.contains_key("additionalProperties"),
                "must be undefined to be structural",
            ),
            (
                "default",
                map.contains_key("default"),
                "must be undefined to be structural",
            ),
            (
                "title",
                non_empty("title"),
                "must be empty to be structural",
            ),
            (
                "description",
                non_empty("description"),
                "must be empty to be structural",
            ),
            (
                "nullable",
                is_true("nullable"),
                "must be false to be structural",
            ),
            (
                "x-kubernetes-preserve-unknown-fields",
                is_true("x-kubernetes-preserve-unknown-fields"),
                "must be false to be structural",
            ),
            (
                "x-kubernetes-embedded-resource",
                is_true("x-kubernetes-embedded-resource"),
                "must be false to be structural",
            ),
            (
                "x-kubernetes-int-or-string",
                is_true("x-kubernetes-int-or-string"),
                "must be false to be structural",
            ),
            (
                "x-kubernetes-list-map-keys",
                map.get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .is_some_and(|keys| !keys.is_empty()),
                "must be empty to be structural",
            ),
            (
                "x-kubernetes-list-type",
                map.contains_key("x-kubernetes-list-type"),
                "must be undefined to be structural",
            ),
        ];
        for (keyword, violated, detail) in rules {
            if violated {
                errors.push(FieldError::forbidden(child(path, keyword), detail));
            }
        }
        if map
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|properties| properties.contains_key("metadata"))
        {
            errors.push(FieldError::forbidden(
                child(path, "properties[metadata]"),
                "must not be specified in a nested context",
            ));
        }
        return;
    }
    if node.int_or_string && node.preserve_unknown_fields {
        errors.push(FieldError::invalid(
            child(path, "x-kubernetes-preserve-unknown-fields"),
            Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if node.int_or_string && node.embedded_resource {
        errors.push(FieldError::invalid(
            child(path, "x-kubernetes-embedded-resource"),
            Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if level == Level::Root && map.contains_key("additionalProperties") {
        errors.push(FieldError::forbidden(
            child(path, "additionalProperties"),
            "must not be used at the root",
        ));
    }
    if node.embedded_resource
        && !node.preserve_unknown_fields
        && map
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(|properties| properties.is_empty())
    {
        errors.push(FieldError::required(
            child(path, "properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
    if level == Level::Root || node.embedded_resource {
        let property_type = |name: &str| {
            map.get("properties")
                .and_then(|properties| properties.get(name))
                .map(|property| {
                    property
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                })
        };
        for (name, expected, detail) in [
            ("kind", "string", "must be string"),
            ("apiVersion", "string", "must be string"),
            ("metadata", "object", "must be object"),
        ] {
            if let Some(found) = property_type(name)
                && found != expected
            {
                errors.push(FieldError::invalid(
                    child(path, &format!("properties[{name}].type")),
                    Value::String(found),
                    detail,
                ));
            }
        }
    }
    if node.int_or_string && node.type_name.is_some() {
        errors.push(FieldError::invalid(
            type_path.clone(),
            Value::String(node.type_label().to_string()),
            "must be empty if x-kubernetes-int-or-string is true",
        ));
    }
    if node.embedded_resource && node.type_name.is_none() {
        errors.push(FieldError::required(
            type_path.clone(),
            "must be object if x-kubernetes-embedded-resource is true",
        ));
    } else if node.embedded_resource && node.type_name.as_deref() != Some("object") {
        errors.push(FieldError::invalid(
            type_path.clone(),
            Value::String(node.type_label().to_string()),
            "must be object if x-kubernetes-embedded-resource is true",
        ));
    }
    if node.embedded_resource && map.contains_key("additionalProperties") {
        errors.push(FieldError::forbidden(
            child(path, "additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if node.type_name.is_none()
        && !node.int_or_string
        && !node.embedded_resource
        && !node.preserve_unknown_fields
    {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            _ => "must not be empty for specified object fields",
        };
        errors.push(FieldError::required(type_path.clone(), detail));
    }
    if level == Level::Root
        && let Some(type_name) = node.type_name.as_deref()
        && type_name != "object"
    {
        errors.push(FieldError::invalid(
            type_path,
            Value::String(type_name.to_string()),
            "must be object at the root",
        ));
    }
    if node.type_name.as_deref() == Some("array") && !map.contains_key("items") {
        errors.push(FieldError::required(
            child(path, "items"),
            "must be specified",
        ));
    }
    if map.contains_key("properties") && map.contains_key("additionalProperties") {
        errors.push(FieldError::forbidden(
            child(path, "additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if level == Level::Root
        && let Some(metadata) = map
            .get("properties")
            .and_then(|properties| properties.get("metadata"))
            .and_then(Value::as_object)
    {
        let allowed = ["type", "properties"];
        let properties_ok = metadata
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(|props| props.keys().all(|k| k == "name" || k == "generateName"));
        if !properties_ok || metadata.keys().any(|k| !allowed.contains(&k.as_str())) {
            errors.push(FieldError::forbidden(
                "properties[metadata]",
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
}

fn compile_list_type(
    node: &mut Node,
    map: &serde_json::Map<String, Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let list_type_path = child(path, "x-kubernetes-list-type");
    if let Some(list_type) = map.get("x-kubernetes-list-type") {
        match list_type.as_str() {
            Some(kind @ ("atomic" | "set" | "map")) => node.list_type = Some(kind.to_string()),
            _ => errors.push(FieldError::not_supported(
                list_type_path.clone(),
                list_type.clone(),
                &["atomic".into(), "set".into(), "map".into()],
            )),
        }
        if node.type_name.as_deref() != Some("array") {
            errors.push(FieldError::invalid(
                list_type_path.clone(),
                list_type.clone(),
                "must only be used if type is array",
            ));
        }
    }
    if let Some(keys) = map.get("x-kubernetes-list-map-keys") {
        let keys_path = child(path, "x-kubernetes-list-map-keys");
        match keys.as_array() {
            Some(keys) => {
                for key in keys {
                    match key.as_str() {
                        Some(key) => node.list_map_keys.push(key.to_string()),
                        None => errors.push(FieldError::invalid(
                            keys_path.clone(),
                            key.clone(),
                            "must be a string",
                        )),
                    }
                }
            }
            None => errors.push(FieldError::invalid(
                keys_path.clone(),
                keys.clone(),
                "must be an array",
            )),
        }
        if node.list_type.as_deref() != Some("map") && !node.list_map_keys.is_empty() {
            errors.push(FieldError::invalid(
                list_type_path.clone(),
                map.get("x-kubernetes-list-type")
                    .cloned()
                    .unwrap_or(Value::Null),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            ));
        }
    }
    match node.list_type.as_deref() {
        Some("map") => {
            if node.list_map_keys.is_empty() {
                errors.push(FieldError::required(
                    child(path, "x-kubernetes-list-map-keys"),
                    "must not be empty if x-kubernetes-list-type is map",
                ));
            }
            if let Some(items) = node.items.as_deref() {
                if items.type_name.as_deref() != Some("object") {
                    errors.push(FieldError::invalid(
                        child(path, "items.type"),
                        Value::String(items.type_label().to_string()),
                        "must be object if parent array's x-kubernetes-list-type is map",
                    ));
                } else {
                    for key in &node.list_map_keys {
                        let scalar = items.properties.get(key).is_some_and(|p| {
                            matches!(
                                p.type_name.as_deref(),
                                Some("string" | "integer" | "number" | "boolean")
                            ) || p.int_or_string
                        });
                        if !scalar {
                            errors.push(FieldError::invalid(
                                child(path, "x-kubernetes-list-map-keys"),
                                Value::from(node.list_map_keys.clone()),
                                "entries must all be names of item properties of scalar type",
                            ));
                            break;
                        }
                    }
                }
            }
        }
        Some("set") => {
            if let Some(items) = node.items.as_deref()
                && (items.type_name.as_deref() == Some("array")
                    || items.type_name.as_deref() == Some("object") && !items.map_type_atomic)
            {
                errors.push(FieldError::invalid(
                    child(path, "items.type"),
                    Value::String(items.type_label().to_string()),
                    "must be a scalar type or an atomic object if parent array's x-kubernetes-list-type is set",
                ));
            }
        }
        _ => {}
    }
}

/// Defaults must themselves be valid values of their schema (CRD creation rejects them
/// otherwise).
fn validate_defaults(node: &Node, path: &str, errors: &mut Vec<FieldError>) {
    // The apiserver validates a default as a document of its own: the detail names the value
    // from an empty root (" in body ...") and the field is the default's path.
    if let Some(default) = &node.default {
        let mut default_errors = Vec::new();
        validate::validate_value(node, default, None, "", &mut default_errors);
        let default_path = child(path, "default");
        errors.extend(
            default_errors
                .into_iter()
                .map(|error| error.with_prefix(&default_path)),
        );
    }
    for (name, property) in &node.properties {
        validate_defaults(
            property,
            &child(path, &format!("properties[{name}]")),
            errors,
        );
    }
    if let Some(items) = &node.items {
        validate_defaults(items, &child(path, "items"), errors);
    }
    if let Some(additional) = &node.additional_properties {
        validate_defaults(additional, &child(path, "additionalProperties"), errors);
    }
}

fn flag(map: &serde_json::Map<String, Value>, key: &str) -> bool {
    map.get(key) == Some(&Value::Bool(true))
}

fn string_field(
    map: &serde_json::Map<String, Value>,
    key: &str,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> Option<String> {
    match map.get(key)? {
        Value::String(text) => Some(text.clone()),
        other => {
            errors.push(FieldError::invalid(
                child(path, key),
                other.clone(),
                "must be a string",
            ));
            None
        }
    }
}

fn number_field(
    map: &serde_json::Map<String, Value>,
    key: &str,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> Option<f64> {
    match map.get(key)? {
        Value::Number(number) => number.as_f64(),
        other => {
            errors.push(FieldError::invalid(
                child(path, key),
                other.clone(),
                "must be a number",
            ));
            None
        }
    }
}

fn count_field(
    map: &serde_json::Map<String, Value>,
    key: &str,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> Option<i64> {
    match map.get(key)? {
        Value::Number(number) if number.as_i64().is_some_and(|n| n >= 0) => number.as_i64(),
        other => {
            errors.push(FieldError::invalid(
                child(path, key),
                other.clone(),
                "must be a non-negative integer",
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests;
