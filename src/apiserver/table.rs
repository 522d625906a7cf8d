//! Server-side printing: `meta.k8s.io/v1` `Table` responses for `kubectl get`.
//!
//! Custom resources get the `Name` column followed by the CRD version's
//! `additionalPrinterColumns`, or by `Age` when the CRD declares none (apiextensions-apiserver's
//! `tableconvertor` and `serveDefaultColumnsIfEmpty`). Built-in kinds get the columns kubectl
//! shows for them against a real cluster (`pkg/printers/internalversion/printers.go`).
//! Column values come from a small JSONPath evaluator covering what printer columns use:
//! fields, `['quoted']` keys, indexes, `[*]` and `[?(@.key=="value")]` filters.

use serde_json::{Map, Value, json};

use crate::registry::{PrinterColumn, ResourceInfo};

/// The descriptions the real server gives the default columns (ObjectMeta's field docs).
const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// What each row carries besides its cells (the `includeObject` query parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// No `object` in rows.
    None,
    /// A `PartialObjectMetadata` per row (the server's default).
    #[default]
    Metadata,
    /// The full object per row.
    Object,
}

/// An `includeObject` value the server does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("includeObject: unsupported value {0:?}: supported values are None, Metadata, Object")]
pub struct IncludeObjectError(pub String);

impl IncludeObject {
    /// Parses the `includeObject` query parameter; absent means `Metadata`.
    pub fn from_query(value: Option<&str>) -> Result<Self, IncludeObjectError> {
        match value {
            None | Some("") | Some("Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(IncludeObjectError(other.to_owned())),
        }
    }
}

// === Accept negotiation ===

/// One media range of an `Accept` header: `type/subtype` lowercased and its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaType {
    pub essence: String,
    pub params: Vec<(String, String)>,
}

impl MediaType {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// Splits an `Accept` header into its media ranges, in the client's order.
pub fn parse_accept(accept: &str) -> Vec<MediaType> {
    accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';');
            let essence = parts.next()?.trim().to_ascii_lowercase();
            if essence.is_empty() {
                return None;
            }
            let params = parts
                .filter_map(|param| {
                    let (key, value) = param.split_once('=')?;
                    Some((
                        key.trim().to_owned(),
                        value.trim().trim_matches('"').to_owned(),
                    ))
                })
                .collect();
            Some(MediaType { essence, params })
        })
        .collect()
}

/// Whether the client prefers a `Table` over the plain object or list: true when a
/// `meta.k8s.io` `Table` (v1 or v1beta1) comes before any media type answered with plain JSON.
pub fn wants_table(accept: &str) -> bool {
    for media in parse_accept(accept) {
        let json_like = matches!(
            media.essence.as_str(),
            "application/json" | "application/*" | "*/*"
        );
        if !json_like {
            continue;
        }
        match media.param("as") {
            Some("Table") => {
                if media.param("g") == Some("meta.k8s.io")
                    && matches!(media.param("v"), Some("v1" | "v1beta1"))
                {
                    return true;
                }
            }
            None => return false,
            // Other conversions (e.g. PartialObjectMetadata) are not Tables.
            Some(_) => {}
        }
    }
    false
}

// === rendering ===

/// Renders `objects` of `resource` as a `meta.k8s.io/v1` `Table`; `list_metadata` becomes
/// the table's `metadata` (resourceVersion, continue, remainingItemCount).
pub fn render_table(
    resource: &ResourceInfo,
    objects: &[Value],
    list_metadata: Value,
    include_object: IncludeObject,
) -> Value {
    render_table_at(
        resource,
        objects,
        list_metadata,
        include_object,
        jiff::Timestamp::now(),
    )
}

/// [`render_table`] with an explicit "now" for ages.
pub fn render_table_at(
    resource: &ResourceInfo,
    objects: &[Value],
    list_metadata: Value,
    include_object: IncludeObject,
    now: jiff::Timestamp,
) -> Value {
    let columns = columns_for(resource);
    let definitions: Vec<Value> = columns
        .iter()
        .map(|column| {
            json!({
                "name": column.name,
                "type": column.type_,
                "format": column.format.clone().unwrap_or_default(),
                "description": column.description.clone().unwrap_or_default(),
                "priority": column.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let cells: Vec<Value> = columns
                .iter()
                .map(|column| cell(column, object, now))
                .collect();
            let mut row = Map::new();
            row.insert("cells".to_owned(), Value::Array(cells));
            match include_object {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row.insert("object".to_owned(), partial_object_metadata(object));
                }
                IncludeObject::Object => {
                    row.insert("object".to_owned(), object.clone());
                }
            }
            Value::Object(row)
        })
        .collect();
    let metadata = match list_metadata {
        Value::Object(map) => Value::Object(map),
        _ => json!({}),
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

fn partial_object_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A column and how its cell is computed.
struct Column {
    name: String,
    type_: String,
    format: Option<String>,
    description: Option<String>,
    priority: i32,
    source: CellSource,
}

enum CellSource {
    /// A printer column's JSONPath, converted by the column type.
    JsonPath(String),
    /// A value the built-in printers compute.
    Computed(fn(&Value, jiff::Timestamp) -> Value),
}

/// The column set for a resource: Name first, then the printer columns (or Age).
fn columns_for(resource: &ResourceInfo) -> Vec<Column> {
    if !resource.printer_columns.is_empty() {
        let mut columns = vec![name_column(0)];
        columns.extend(resource.printer_columns.iter().map(printer_column));
        return columns;
    }
    if !resource.is_custom()
        && let Some(builtin) = builtin_columns(resource)
    {
        return builtin;
    }
    vec![name_column(0), age_column("Age")]
}

/// The object's name; first and priority 0 everywhere except in the event table.
fn name_column(priority: i32) -> Column {
    Column {
        name: "Name".to_owned(),
        type_: "string".to_owned(),
        format: Some("name".to_owned()),
        description: Some(NAME_DESCRIPTION.to_owned()),
        priority,
        source: CellSource::JsonPath(".metadata.name".to_owned()),
    }
}

fn printer_column(column: &PrinterColumn) -> Column {
    Column {
        name: column.name.clone(),
        type_: column.type_.clone(),
        format: column.format.clone(),
        description: column.description.clone(),
        priority: column.priority,
        source: CellSource::JsonPath(column.json_path.clone()),
    }
}

fn age_column(name: &str) -> Column {
    Column {
        name: name.to_owned(),
        type_: "date".to_owned(),
        format: None,
        description: Some(CREATION_TIMESTAMP_DESCRIPTION.to_owned()),
        priority: 0,
        source: CellSource::JsonPath(".metadata.creationTimestamp".to_owned()),
    }
}

fn computed(
    name: &str,
    type_: &str,
    description: &str,
    compute: fn(&Value, jiff::Timestamp) -> Value,
) -> Column {
    Column {
        name: name.to_owned(),
        type_: type_.to_owned(),
        format: None,
        description: Some(description.to_owned()),
        priority: 0,
        source: CellSource::Computed(compute),
    }
}

/// The columns of kube-apiserver's built-in printers for the kinds served here.
fn builtin_columns(resource: &ResourceInfo) -> Option<Vec<Column>> {
    let is_event =
        resource.kind == "Event" && matches!(resource.group.as_str(), "" | "events.k8s.io");
    let mut columns = match (resource.group.as_str(), resource.kind.as_str()) {
        ("", "ConfigMap") => vec![
            computed(
                "Data",
                "integer",
                "Data contains the configuration data.",
                |object, _| {
                    let count = map_len(object.get("data")) + map_len(object.get("binaryData"));
                    json!(count)
                },
            ),
            age_column("Age"),
        ],
        ("", "Secret") => vec![
            computed("Type", "string", "The type of the secret", |object, _| {
                json!(
                    object
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                )
            }),
            computed(
                "Data",
                "string",
                "The number of entries in the secret",
                |object, _| json!(map_len(object.get("data"))),
            ),
            age_column("Age"),
        ],
        ("", "Namespace") => vec![
            computed(
                "Status",
                "string",
                "The status of the namespace",
                |object, _| {
                    json!(
                        object
                            .pointer("/status/phase")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    )
                },
            ),
            age_column("Age"),
        ],
        ("", "ServiceAccount") => vec![
            computed(
                "Secrets",
                "string",
                "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
                |object, _| {
                    json!(
                        object
                            .get("secrets")
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len)
                    )
                },
            ),
            age_column("Age"),
        ],
        ("coordination.k8s.io", "Lease") => vec![
            computed(
                "Holder",
                "string",
                "The holder of the lease",
                |object, _| {
                    json!(
                        object
                            .pointer("/spec/holderIdentity")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    )
                },
            ),
            age_column("Age"),
        ],
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => vec![
            computed(
                "Validations",
                "integer",
                "Validations indicates the number of validation rules defined in this configuration",
                |object, _| {
                    json!(
                        object
                            .pointer("/spec/validations")
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len)
                    )
                },
            ),
            computed(
                "ParamKind",
                "string",
                "ParamKind specifies the kind of resources used to parameterize this policy",
                |object, _| {
                    let kind = object.pointer("/spec/paramKind").filter(|k| !k.is_null());
                    json!(kind.map_or_else(
                        || "<unset>".to_owned(),
                        |kind| format!(
                            "{}/{}",
                            kind["apiVersion"].as_str().unwrap_or_default(),
                            kind["kind"].as_str().unwrap_or_default()
                        )
                    ))
                },
            ),
            age_column("Age"),
        ],
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => vec![
            computed(
                "PolicyName",
                "string",
                "PolicyName indicates the policy definition which the policy binding binded to",
                |object, _| {
                    json!(
                        object
                            .pointer("/spec/policyName")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    )
                },
            ),
            computed(
                "ParamRef",
                "string",
                "ParamRef indicates the param resource which sets the configration param",
                |object, _| {
                    let name = object
                        .pointer("/spec/paramRef/name")
                        .and_then(Value::as_str)
                        .filter(|name| !name.is_empty());
                    let namespace = object
                        .pointer("/spec/paramRef/namespace")
                        .and_then(Value::as_str)
                        .filter(|namespace| !namespace.is_empty());
                    let selector = object
                        .pointer("/spec/paramRef/selector")
                        .filter(|selector| !selector.is_null());
                    json!(match (name, namespace, selector) {
                        (Some(name), Some(namespace), _) => format!("{namespace}/{name}"),
                        // Without a namespace the printer cannot tell the param's scope.
                        (Some(name), None, _) => format!("*/{name}"),
                        (None, _, Some(selector)) => label_selector_string(selector),
                        (None, _, None) => "<unset>".to_owned(),
                    })
                },
            ),
            age_column("Age"),
        ],
        ("apiextensions.k8s.io", "CustomResourceDefinition") => vec![Column {
            name: "Created At".to_owned(),
            type_: "date".to_owned(),
            format: None,
            description: Some(CREATION_TIMESTAMP_DESCRIPTION.to_owned()),
            priority: 0,
            // The generic printer shows the timestamp itself, not an age.
            source: CellSource::Computed(|object, _| {
                json!(
                    object
                        .pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                )
            }),
        }],
        ("", "Event") | ("events.k8s.io", "Event") => vec![
            computed(
                "Last Seen",
                "string",
                "Time when this Event was last seen",
                |object, now| {
                    let last = [
                        "/series/lastObservedTime",
                        "/lastTimestamp",
                        "/deprecatedLastTimestamp",
                        "/eventTime",
                        "/metadata/creationTimestamp",
                    ]
                    .iter()
                    .find_map(|pointer| {
                        object
                            .pointer(pointer)
                            .and_then(Value::as_str)
                            .filter(|text| !text.is_empty())
                    });
                    json!(last.map_or_else(|| "<unknown>".to_owned(), |text| age_of(text, now)))
                },
            ),
            computed(
                "Type",
                "string",
                "Type of this event (Normal, Warning), new types could be added in the future.",
                |object, _| {
                    json!(
                        object
                            .get("type")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    )
                },
            ),
            computed(
                "Reason",
                "string",
                "Reason why this Event was generated",
                |object, _| {
                    json!(
                        object
                            .get("reason")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    )
                },
            ),
            computed(
                "Object",
                "string",
                "The object this Event is about",
                |object, _| {
                    let involved = object
                        .get("involvedObject")
                        .or_else(|| object.get("regarding"));
                    let kind = involved
                        .and_then(|o| o.get("kind"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let name = involved
                        .and_then(|o| o.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    json!(format!("{}/{}", kind.to_ascii_lowercase(), name))
                },
            ),
            computed(
                "Message",
                "string",
                "A human-readable description of the status of this operation.",
                |object, _| {
                    let message = object.get("message").or_else(|| object.get("note"));
                    json!(message.and_then(Value::as_str).unwrap_or_default())
                },
            ),
            Column {
                priority: 1,
                ..computed(
                    "First Seen",
                    "string",
                    "The time at which the event was first recorded.",
                    |object, now| {
                        let first = ["/firstTimestamp", "/deprecatedFirstTimestamp", "/eventTime"]
                            .iter()
                            .find_map(|pointer| {
                                object
                                    .pointer(pointer)
                                    .and_then(Value::as_str)
                                    .filter(|text| !text.is_empty())
                            });
                        json!(
                            first.map_or_else(|| "<unknown>".to_owned(), |text| age_of(text, now))
                        )
                    },
                )
            },
            Column {
                priority: 1,
                ..computed(
                    "Count",
                    "string",
                    "The number of times this event has occurred.",
                    |object, _| {
                        let count = object
                            .pointer("/series/count")
                            .or_else(|| object.get("count"))
                            .or_else(|| object.get("deprecatedCount"))
                            .and_then(Value::as_i64)
                            .unwrap_or(1);
                        json!(count.to_string())
                    },
                )
            },
            // The event table ends with the name, shown only in wide output.
            name_column(1),
        ],
        _ => return None,
    };
    if !is_event {
        columns.insert(0, name_column(0));
    }
    Some(columns)
}

/// `metav1.LabelSelector.String()` (the generated protobuf form), which the binding printer
/// shows for a `paramRef.selector`: labels sorted by key, expressions in order.
fn label_selector_string(selector: &Value) -> String {
    let labels: std::collections::BTreeMap<&str, String> = selector["matchLabels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .map(|(key, value)| (key.as_str(), value.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let labels: String = labels
        .iter()
        .map(|(key, value)| format!("{key}: {value},"))
        .collect();
    let expressions: String = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|requirement| {
            let values: Vec<&str> = requirement["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                requirement["key"].as_str().unwrap_or_default(),
                requirement["operator"].as_str().unwrap_or_default(),
                values.join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
}

fn map_len(value: Option<&Value>) -> usize {
    value.and_then(Value::as_object).map_or(0, Map::len)
}

/// One cell: JSONPath results converted by column type as apiextensions' tableconvertor does
/// (`cellForJSONValue`); a missing value is `null`, which kubectl prints as `<none>`.
fn cell(column: &Column, object: &Value, now: jiff::Timestamp) -> Value {
    let path = match &column.source {
        CellSource::Computed(compute) => return compute(object, now),
        CellSource::JsonPath(path) => path,
    };
    let Ok(results) = evaluate_json_path(path, object) else {
        return Value::Null;
    };
    let Some(first) = results.first() else {
        return Value::Null;
    };
    match column.type_.as_str() {
        "string" => match first {
            Value::String(text) => json!(text),
            Value::Null => Value::Null,
            other => json!(other.to_string()),
        },
        "integer" => match first {
            Value::Number(number) => number
                .as_i64()
                // Go truncates float64 values to int64 here.
                .or_else(|| number.as_f64().map(|float| float as i64))
                .map_or(Value::Null, |integer| json!(integer)),
            _ => Value::Null,
        },
        "number" => match first {
            Value::Number(_) => first.clone(),
            _ => Value::Null,
        },
        "boolean" => match first {
            Value::Bool(_) => first.clone(),
            _ => Value::Null,
        },
        "date" => match first {
            Value::String(text) => json!(age_of(text, now)),
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

/// The age of an RFC 3339 timestamp as kubectl prints it, or `<unknown>` if unparsable.
fn age_of(timestamp: &str, now: jiff::Timestamp) -> String {
    match timestamp.parse::<jiff::Timestamp>() {
        Ok(then) => human_duration(now.as_second() - then.as_second()),
        Err(_) => "<unknown>".to_owned(),
    }
}

/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration` for a number of seconds.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let rest = seconds % 60;
        return if rest == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{rest}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let rest = minutes % 60;
        return if rest == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{rest}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let rest = hours % 24;
        return if rest == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{rest}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

// === JSONPath ===

/// A JSONPath expression the evaluator cannot handle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported JSONPath {path:?}: {reason}")]
pub struct JsonPathError {
    pub path: String,
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    Wildcard,
    Filter {
        key: Vec<String>,
        equal: bool,
        value: Value,
    },
}

/// Evaluates a printer-column JSONPath (`.a.b`, `.a['b.c']`, `.a[0]`, `.a[-1]`, `.a[*].b`,
/// `.a[?(@.type=="Ready")].status`, optionally wrapped in `{}`) against `object`.
pub fn evaluate_json_path(path: &str, object: &Value) -> Result<Vec<Value>, JsonPathError> {
    let steps = parse_json_path(path)?;
    let mut current: Vec<&Value> = vec![object];
    for step in &steps {
        let mut next = Vec::new();
        for value in current {
            match step {
                Step::Field(name) => {
                    if let Some(child) = value.get(name.as_str()) {
                        next.push(child);
                    }
                }
                Step::Index(index) => {
                    if let Some(items) = value.as_array() {
                        let position = if *index < 0 {
                            i64::try_from(items.len()).ok().map(|len| len + index)
                        } else {
                            Some(*index)
                        };
                        if let Some(item) = position
                            .and_then(|position| usize::try_from(position).ok())
                            .and_then(|position| items.get(position))
                        {
                            next.push(item);
                        }
                    }
                }
                Step::Wildcard => match value {
                    Value::Array(items) => next.extend(items.iter()),
                    Value::Object(map) => next.extend(map.values()),
                    _ => {}
                },
                Step::Filter {
                    key,
                    equal,
                    value: expected,
                } => {
                    if let Some(items) = value.as_array() {
                        for item in items {
                            let mut field = Some(item);
                            for part in key {
                                field = field.and_then(|inner| inner.get(part.as_str()));
                            }
                            // An element without the key matches neither `==` nor `!=`.
                            if let Some(found) = field
                                && (found == expected) == *equal
                            {
                                next.push(item);
                            }
                        }
                    }
                }
            }
        }
        current = next;
    }
    Ok(current.into_iter().cloned().collect())
}

fn parse_json_path(path: &str) -> Result<Vec<Step>, JsonPathError> {
    let error = |reason| JsonPathError {
        path: path.to_owned(),
        reason,
    };
    let mut text = path.trim();
    if let Some(inner) = text
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
    {
        text = inner.trim();
    }
    text = text.strip_prefix('$').unwrap_or(text);
    let characters: Vec<char> = text.chars().collect();
    let mut steps = Vec::new();
    let mut position = 0;
    while position < characters.len() {
        match characters[position] {
            '.' => {
                position += 1;
                let start = position;
                while position < characters.len()
                    && characters[position] != '.'
                    && characters[position] != '['
                {
                    position += 1;
                }
                let name: String = characters[start..position].iter().collect();
                if name == "*" {
                    steps.push(Step::Wildcard);
                } else if !name.is_empty() {
                    steps.push(Step::Field(name));
                } else if position < characters.len() && characters[position] == '.' {
                    return Err(error("recursive descent (..) is not supported"));
                }
            }
            '[' => {
                let close = find_bracket_end(&characters, position)
                    .ok_or_else(|| error("unbalanced brackets"))?;
                let inner: String = characters[position + 1..close].iter().collect();
                steps.push(
                    parse_bracket(inner.trim()).ok_or_else(|| error("unsupported subscript"))?,
                );
                position = close + 1;
            }
            _ => return Err(error("expected '.' or '['")),
        }
    }
    Ok(steps)
}

/// The index of the `]` closing the `[` at `open`, skipping quoted text.
fn find_bracket_end(characters: &[char], open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut depth = 0usize;
    for (index, character) in characters.iter().enumerate().skip(open) {
        match (quote, character) {
            (Some(q), c) if *c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(*character),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(index);
                }
            }
            (None, _) => {}
        }
    }
    None
}

fn parse_bracket(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::Wildcard);
    }
    if let Ok(index) = inner.parse::<i64>() {
        return Some(Step::Index(index));
    }
    if let Some(quoted) = strip_quotes(inner) {
        return Some(Step::Field(quoted.to_owned()));
    }
    let filter = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (left, equal, right) = if let Some((left, right)) = filter.split_once("==") {
        (left, true, right)
    } else {
        let (left, right) = filter.split_once("!=")?;
        (left, false, right)
    };
    let key: Vec<String> = left
        .trim()
        .strip_prefix("@.")?
        .split('.')
        .map(str::to_owned)
        .collect();
    let right = right.trim();
    let value = match strip_quotes(right) {
        Some(text) => json!(text),
        None => serde_json::from_str(right).ok()?,
    };
    Some(Step::Filter { key, equal, value })
}

fn strip_quotes(text: &str) -> Option<&str> {
    text.strip_prefix('\'')
        .and_then(|rest| rest.strip_suffix('\''))
        .or_else(|| {
            text.strip_prefix('"')
                .and_then(|rest| rest.strip_suffix('"'))
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn resource(printer_columns: Vec<PrinterColumn>, custom: bool) -> ResourceInfo {
        let mut info = crate::registry::Registry::with_builtins()
            .lookup("", "v1", "configmaps")
            .unwrap();
        if custom {
            info.group = "gpucloud.io".to_owned();
            info.kind = "GpuInstance".to_owned();
            info.plural = "gpuinstances".to_owned();
            info.schema = Some(std::sync::Arc::new(
                crate::handlers::semantics::compile(&json!({"type": "object"})).unwrap(),
            ));
        }
        info.printer_columns = printer_columns;
        info
    }

    fn column(name: &str, type_: &str, json_path: &str, priority: i32) -> PrinterColumn {
        PrinterColumn {
            name: name.to_owned(),
            type_: type_.to_owned(),
            format: None,
            description: Some(format!("{name} column")),
            priority,
            json_path: json_path.to_owned(),
        }
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T12:00:00Z".parse().unwrap()
    }

    fn instance() -> Value {
        json!({
            "apiVersion": "gpucloud.io/v1", "kind": "GpuInstance",
            "metadata": {"name": "trainer", "namespace": "default",
                         "creationTimestamp": "2026-01-01T11:55:00Z", "resourceVersion": "7"},
            "spec": {"gpuType": "H100", "count": 8, "spot": true, "price": 2.5},
            "status": {"conditions": [
                {"type": "Progressing", "status": "False"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T09:00:00Z"}
            ]}
        })
    }

    #[test]
    fn custom_resource_without_columns_gets_name_and_age() {
        // What a real kube-apiserver serves for a CRD without additionalPrinterColumns
        // (serveDefaultColumnsIfEmpty in apiextensions-apiserver's customresource_handler.go).
        let table = render_table_at(
            &resource(Vec::new(), true),
            &[instance()],
            json!({"resourceVersion": "9"}),
            IncludeObject::Metadata,
            now(),
        );
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(table["metadata"], json!({"resourceVersion": "9"}));
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|column| column["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Age"]);
        assert_eq!(table["columnDefinitions"][0]["format"], "name");
        assert_eq!(table["rows"][0]["cells"], json!(["trainer", "5m"]));
        assert_eq!(
            table["rows"][0]["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": instance()["metadata"]})
        );
    }

    #[test]
    fn printer_columns_convert_values_by_type() {
        let columns = vec![
            column("GPU", "string", ".spec.gpuType", 0),
            column("Count", "integer", ".spec.count", 0),
            column("Spot", "boolean", ".spec.spot", 1),
            column("Price", "number", ".spec.price", 1),
            column(
                "Ready",
                "string",
                r#".status.conditions[?(@.type=="Ready")].status"#,
                0,
            ),
            column(
                "Since",
                "date",
                ".status.conditions[?(@.type=='Ready')].lastTransitionTime",
                0,
            ),
            column("Missing", "string", ".spec.nothing", 0),
            column("Spec", "string", ".spec", 1),
        ];
        let table = render_table_at(
            &resource(columns, true),
            &[instance()],
            json!({}),
            IncludeObject::None,
            now(),
        );
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|column| column["name"].as_str().unwrap())
            .collect();
        // Declared columns replace the default Age column; Name always comes first.
        assert_eq!(
            names,
            [
                "Name", "GPU", "Count", "Spot", "Price", "Ready", "Since", "Missing", "Spec"
            ]
        );
        assert_eq!(table["columnDefinitions"][3]["priority"], 1);
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[0], "trainer");
        assert_eq!(cells[1], "H100");
        assert_eq!(cells[2], 8);
        assert_eq!(cells[3], true);
        assert_eq!(cells[4], 2.5);
        assert_eq!(cells[5], "True");
        assert_eq!(cells[6], "3h");
        assert_eq!(cells[7], Value::Null);
        assert_eq!(
            serde_json::from_str::<Value>(cells[8].as_str().unwrap()).unwrap(),
            instance()["spec"]
        );
        assert!(table["rows"][0].get("object").is_none());
    }

    #[test]
    fn builtin_config_maps_show_data_count_and_include_the_object_on_request() {
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "creationTimestamp": "2026-01-01T11:59:30Z"},
            "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
        let table = render_table_at(
            &resource(Vec::new(), false),
            std::slice::from_ref(&config_map),
            json!({}),
            IncludeObject::Object,
            now(),
        );
        assert_eq!(table["rows"][0]["cells"], json!(["settings", 3, "30s"]));
        assert_eq!(table["rows"][0]["object"], config_map);
    }

    #[test]
    fn events_put_last_seen_first_and_the_name_last_at_wide_priority() {
        let mut info = crate::registry::Registry::with_builtins()
            .lookup("", "v1", "events")
            .unwrap();
        info.printer_columns = Vec::new();
        let event = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "ev1", "creationTimestamp": "2026-01-01T11:00:00Z"},
            "involvedObject": {"kind": "GpuInstance", "name": "trainer"},
            "reason": "Provisioned", "message": "up", "type": "Normal", "count": 3,
            "firstTimestamp": "2026-01-01T11:00:00Z", "lastTimestamp": "2026-01-01T11:58:00Z"});
        let table = render_table_at(&info, &[event], json!({}), IncludeObject::None, now());
        let columns: Vec<(&str, i64)> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|column| {
                (
                    column["name"].as_str().unwrap(),
                    column["priority"].as_i64().unwrap(),
                )
            })
            .collect();
        // kube-apiserver's event printer (pkg/printers/internalversion/printers.go), minus
        // the Subobject and Source columns.
        assert_eq!(
            columns,
            [
                ("Last Seen", 0),
                ("Type", 0),
                ("Reason", 0),
                ("Object", 0),
                ("Message", 0),
                ("First Seen", 1),
                ("Count", 1),
                ("Name", 1)
            ]
        );
        assert_eq!(
            table["rows"][0]["cells"],
            json!([
                "2m",
                "Normal",
                "Provisioned",
                "gpuinstance/trainer",
                "up",
                "60m",
                "3",
                "ev1"
            ])
        );
    }

    #[test]
    fn table_negotiation_follows_the_clients_order() {
        // kubectl get's Accept header.
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(wants_table(
            "application/json;as=Table;g=meta.k8s.io;v=v1beta1"
        ));
        assert!(!wants_table("application/json"));
        assert!(!wants_table(""));
        assert!(!wants_table(
            "application/json, application/json;as=Table;v=v1;g=meta.k8s.io"
        ));
        assert!(!wants_table("application/json;as=Table;v=v2;g=meta.k8s.io"));
        assert!(!wants_table("application/yaml;as=Table;v=v1;g=meta.k8s.io"));
    }

    #[test]
    fn include_object_values_are_checked() {
        assert_eq!(
            IncludeObject::from_query(None).unwrap(),
            IncludeObject::Metadata
        );
        assert_eq!(
            IncludeObject::from_query(Some("None")).unwrap(),
            IncludeObject::None
        );
        assert_eq!(
            IncludeObject::from_query(Some("Object")).unwrap(),
            IncludeObject::Object
        );
        let error = IncludeObject::from_query(Some("Everything")).unwrap_err();
        assert!(error.to_string().contains("Everything"));
    }

    #[test]
    fn human_durations_match_kubectl() {
        // apimachinery/pkg/util/duration's HumanDuration table.
        for (seconds, expected) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (49 * 3600, "2d1h"),
            (8 * 86_400, "8d"),
            (2 * 365 * 86_400, "2y"),
            (2 * 365 * 86_400 + 86_400, "2y1d"),
            (9 * 365 * 86_400, "9y"),
        ] {
            assert_eq!(human_duration(seconds), expected, "{seconds}");
        }
    }

    #[test]
    fn json_path_supports_printer_column_forms() {
        let object =
            json!({"a": {"b.c": [1, 2, 3], "list": [{"k": "x", "v": 1}, {"k": "y", "v": 2}]}});
        assert_eq!(
            evaluate_json_path("{.a['b.c'][0]}", &object).unwrap(),
            [json!(1)]
        );
        assert_eq!(
            evaluate_json_path(".a['b.c'][-1]", &object).unwrap(),
            [json!(3)]
        );
        assert_eq!(
            evaluate_json_path(".a.list[*].k", &object).unwrap(),
            [json!("x"), json!("y")]
        );
        assert_eq!(
            evaluate_json_path(".a.list[?(@.k!=\"x\")].v", &object).unwrap(),
            [json!(2)]
        );
        assert!(
            evaluate_json_path(".a.nothing[0]", &object)
                .unwrap()
                .is_empty()
        );
        assert!(evaluate_json_path("..a", &object).is_err());
        assert!(evaluate_json_path(".a[", &object).is_err());
        assert!(evaluate_json_path("a", &object).is_err());
    }

    #[test]
    fn a_binding_prints_its_param_ref() {
        let bindings = crate::registry::Registry::with_builtins()
            .lookup(
                "admissionregistration.k8s.io",
                "v1",
                "validatingadmissionpolicybindings",
            )
            .unwrap();
        let param_ref = |param_ref: Value| {
            let binding = json!({"metadata": {"name": "b", "creationTimestamp": "2026-01-01T11:55:00Z"},
                                 "spec": {"policyName": "p", "paramRef": param_ref}});
            let table =
                render_table_at(&bindings, &[binding], json!({}), IncludeObject::None, now());
            table["rows"][0]["cells"][2].clone()
        };
        assert_eq!(param_ref(json!(null)), "<unset>");
        assert_eq!(
            param_ref(json!({"name": "limits", "namespace": "config"})),
            "config/limits"
        );
        assert_eq!(param_ref(json!({"name": "limits"})), "*/limits");
        assert_eq!(
            param_ref(json!({"selector": {}})),
            "&LabelSelector{MatchLabels:map[string]string{},MatchExpressions:[]LabelSelectorRequirement{},}"
        );
        assert_eq!(
            param_ref(json!({"selector": {
                "matchLabels": {"zone": "b", "tier": "gold"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}]}})),
            "&LabelSelector{MatchLabels:map[string]string{tier: gold,zone: b,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:env,Operator:In,Values:[prod dev],},},}"
        );
    }
}
