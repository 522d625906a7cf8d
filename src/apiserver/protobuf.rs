//! Decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) into
//! the JSON objects the JSON path produces.
//!
//! The envelope is the 4-byte magic `k8s\0` followed by a `runtime.Unknown` message whose
//! `typeMeta` names the kind and whose `raw` bytes hold the object's own message. Objects are
//! decoded by static field tables mirroring `generated.proto` of k8s.io/api and apimachinery for
//! the built-in kinds this server serves; fields outside the tables are skipped, as protobuf
//! decoders skip unknown fields.
//!
//! Go's generated code writes every non-pointer field, including empty strings and zeros,
//! while its JSON encoding omits them (`omitempty`): zero values of such fields are left out
//! here too, and kept for pointer fields (`immutable: false` stays). A zero `Time` is left out
//! (Go encodes it as `null`).

use base64::Engine;
use serde_json::{Map, Value};

/// The prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The wording of apimachinery's protobuf serializer.
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    MissingMagic,
    #[error("proto: {message}: unexpected end of input")]
    Truncated { message: &'static str },
    #[error("proto: {message}: integer overflow")]
    VarintOverflow { message: &'static str },
    #[error("proto: {message}: illegal tag {tag} (wire type {wire_type})")]
    IllegalTag {
        message: &'static str,
        tag: u64,
        wire_type: u8,
    },
    #[error("proto: wrong wireType = {wire_type} for field {field} of {message}")]
    WrongWireType {
        message: &'static str,
        field: &'static str,
        wire_type: u8,
    },
    #[error("proto: {message}.{field}: invalid UTF-8 in a string")]
    InvalidUtf8 {
        message: &'static str,
        field: &'static str,
    },
    #[error("proto: {message}.{field}: timestamp {seconds}s {nanos}ns is out of range")]
    InvalidTime {
        message: &'static str,
        field: &'static str,
        seconds: i64,
        nanos: i64,
    },
    #[error("proto: {message}.{field}: fieldsV1 is not JSON: {detail}")]
    InvalidFieldsV1 {
        message: &'static str,
        field: &'static str,
        detail: String,
    },
    #[error("unsupported protobuf content encoding {0:?}")]
    ContentEncoding(String),
    #[error("Object 'Kind' is missing in the protobuf body")]
    MissingKind,
    #[error("no kind \"{kind}\" is registered for version \"{api_version}\" in scheme")]
    UnknownKind { api_version: String, kind: String },
}

// === field tables ===

#[derive(Clone, Copy, Debug)]
enum FieldType {
    String,
    /// Bytes, base64 in JSON.
    Bytes,
    Bool,
    Int32,
    Int64,
    Message(&'static Message),
    /// metav1.Time: RFC 3339 with whole seconds.
    Time,
    /// metav1.MicroTime: RFC 3339 with microseconds.
    MicroTime,
    /// metav1.FieldsV1: its `raw` bytes are the JSON document itself.
    FieldsV1,
    StringMap,
    BytesMap,
}

#[derive(Debug)]
struct Field {
    number: u64,
    name: &'static str,
    field_type: FieldType,
    repeated: bool,
    /// Pointer fields in Go: written only when set, so a zero value is meaningful.
    keep_zero: bool,
}

#[derive(Debug)]
pub struct Message {
    name: &'static str,
    fields: &'static [Field],
}

const fn field(number: u64, name: &'static str, field_type: FieldType) -> Field {
    Field {
        number,
        name,
        field_type,
        repeated: false,
        keep_zero: false,
    }
}

const fn repeated(number: u64, name: &'static str, field_type: FieldType) -> Field {
    Field {
        number,
        name,
        field_type,
        repeated: true,
        keep_zero: false,
    }
}

const fn pointer(number: u64, name: &'static str, field_type: FieldType) -> Field {
    Field {
        number,
        name,
        field_type,
        repeated: false,
        keep_zero: true,
    }
}

use FieldType::{
    Bool, Bytes, BytesMap, FieldsV1, Int32, Int64, MicroTime, String as Str, StringMap, Time,
};

static TYPE_META: Message = Message {
    name: "TypeMeta",
    fields: &[field(1, "apiVersion", Str), field(2, "kind", Str)],
};

static UNKNOWN: Message = Message {
    name: "Unknown",
    fields: &[
        field(1, "typeMeta", FieldType::Message(&TYPE_META)),
        field(2, "raw", Bytes),
        field(3, "contentEncoding", Str),
        field(4, "contentType", Str),
    ],
};

static OWNER_REFERENCE: Message = Message {
    name: "OwnerReference",
    fields: &[
        field(5, "apiVersion", Str),
        field(1, "kind", Str),
        field(3, "name", Str),
        field(4, "uid", Str),
        pointer(6, "controller", Bool),
        pointer(7, "blockOwnerDeletion", Bool),
    ],
};

static MANAGED_FIELDS_ENTRY: Message = Message {
    name: "ManagedFieldsEntry",
    fields: &[
        field(1, "manager", Str),
        field(2, "operation", Str),
        field(3, "apiVersion", Str),
        field(4, "time", Time),
        field(6, "fieldsType", Str),
        field(7, "fieldsV1", FieldsV1),
        field(8, "subresource", Str),
    ],
};

static OBJECT_META: Message = Message {
    name: "ObjectMeta",
    fields: &[
        field(1, "name", Str),
        field(2, "generateName", Str),
        field(3, "namespace", Str),
        field(4, "selfLink", Str),
        field(5, "uid", Str),
        field(6, "resourceVersion", Str),
        field(7, "generation", Int64),
        field(8, "creationTimestamp", Time),
        field(9, "deletionTimestamp", Time),
        pointer(10, "deletionGracePeriodSeconds", Int64),
        field(11, "labels", StringMap),
        field(12, "annotations", StringMap),
        repeated(13, "ownerReferences", FieldType::Message(&OWNER_REFERENCE)),
        repeated(14, "finalizers", Str),
        repeated(
            17,
            "managedFields",
            FieldType::Message(&MANAGED_FIELDS_ENTRY),
        ),
    ],
};

const METADATA: Field = field(1, "metadata", FieldType::Message(&OBJECT_META));

static NAMESPACE_CONDITION: Message = Message {
    name: "NamespaceCondition",
    fields: &[
        field(1, "type", Str),
        field(2, "status", Str),
        field(4, "lastTransitionTime", Time),
        field(5, "reason", Str),
        field(6, "message", Str),
    ],
};

static NAMESPACE_SPEC: Message = Message {
    name: "NamespaceSpec",
    fields: &[repeated(1, "finalizers", Str)],
};

static NAMESPACE_STATUS: Message = Message {
    name: "NamespaceStatus",
    fields: &[
        field(1, "phase", Str),
        repeated(2, "conditions", FieldType::Message(&NAMESPACE_CONDITION)),
    ],
};

static NAMESPACE: Message = Message {
    name: "Namespace",
    fields: &[
        METADATA,
        field(2, "spec", FieldType::Message(&NAMESPACE_SPEC)),
        field(3, "status", FieldType::Message(&NAMESPACE_STATUS)),
    ],
};

static CONFIG_MAP: Message = Message {
    name: "ConfigMap",
    fields: &[
        METADATA,
        field(2, "data", StringMap),
        field(3, "binaryData", BytesMap),
        pointer(4, "immutable", Bool),
    ],
};

static SECRET: Message = Message {
    name: "Secret",
    fields: &[
        METADATA,
        field(2, "data", BytesMap),
        field(3, "type", Str),
        field(4, "stringData", StringMap),
        pointer(5, "immutable", Bool),
    ],
};

static OBJECT_REFERENCE: Message = Message {
    name: "ObjectReference",
    fields: &[
        field(1, "kind", Str),
        field(2, "namespace", Str),
        field(3, "name", Str),
        field(4, "uid", Str),
        field(5, "apiVersion", Str),
        field(6, "resourceVersion", Str),
        field(7, "fieldPath", Str),
    ],
};

static LOCAL_OBJECT_REFERENCE: Message = Message {
    name: "LocalObjectReference",
    fields: &[field(1, "name", Str)],
};

static SERVICE_ACCOUNT: Message = Message {
    name: "ServiceAccount",
    fields: &[
        METADATA,
        repeated(2, "secrets", FieldType::Message(&OBJECT_REFERENCE)),
        repeated(
            3,
            "imagePullSecrets",
            FieldType::Message(&LOCAL_OBJECT_REFERENCE),
        ),
        pointer(4, "automountServiceAccountToken", Bool),
    ],
};

static EVENT_SOURCE: Message = Message {
    name: "EventSource",
    fields: &[field(1, "component", Str), field(2, "host", Str)],
};

static CORE_EVENT_SERIES: Message = Message {
    name: "EventSeries",
    fields: &[
        field(1, "count", Int32),
        field(2, "lastObservedTime", MicroTime),
    ],
};

static CORE_EVENT: Message = Message {
    name: "Event",
    fields: &[
        METADATA,
        field(2, "involvedObject", FieldType::Message(&OBJECT_REFERENCE)),
        field(3, "reason", Str),
        field(4, "message", Str),
        field(5, "source", FieldType::Message(&EVENT_SOURCE)),
        field(6, "firstTimestamp", Time),
        field(7, "lastTimestamp", Time),
        field(8, "count", Int32),
        field(9, "type", Str),
        field(10, "eventTime", MicroTime),
        field(11, "series", FieldType::Message(&CORE_EVENT_SERIES)),
        field(12, "action", Str),
        field(13, "related", FieldType::Message(&OBJECT_REFERENCE)),
        field(14, "reportingComponent", Str),
        field(15, "reportingInstance", Str),
    ],
};

static EVENTS_V1_EVENT: Message = Message {
    name: "Event",
    fields: &[
        METADATA,
        field(2, "eventTime", MicroTime),
        field(3, "series", FieldType::Message(&CORE_EVENT_SERIES)),
        field(4, "reportingController", Str),
        field(5, "reportingInstance", Str),
        field(6, "action", Str),
        field(7, "reason", Str),
        field(8, "regarding", FieldType::Message(&OBJECT_REFERENCE)),
        field(9, "related", FieldType::Message(&OBJECT_REFERENCE)),
        field(10, "note", Str),
        field(11, "type", Str),
        field(12, "deprecatedSource", FieldType::Message(&EVENT_SOURCE)),
        field(13, "deprecatedFirstTimestamp", Time),
        field(14, "deprecatedLastTimestamp", Time),
        field(15, "deprecatedCount", Int32),
    ],
};

static LEASE_SPEC: Message = Message {
    name: "LeaseSpec",
    fields: &[
        pointer(1, "holderIdentity", Str),
        pointer(2, "leaseDurationSeconds", Int32),
        pointer(3, "acquireTime", MicroTime),
        pointer(4, "renewTime", MicroTime),
        pointer(5, "leaseTransitions", Int32),
        pointer(6, "strategy", Str),
        pointer(7, "preferredHolder", Str),
    ],
};

static LEASE: Message = Message {
    name: "Lease",
    fields: &[METADATA, field(2, "spec", FieldType::Message(&LEASE_SPEC))],
};

static PRECONDITIONS: Message = Message {
    name: "Preconditions",
    fields: &[pointer(1, "uid", Str), pointer(2, "resourceVersion", Str)],
};

static DELETE_OPTIONS: Message = Message {
    name: "DeleteOptions",
    fields: &[
        pointer(1, "gracePeriodSeconds", Int64),
        field(2, "preconditions", FieldType::Message(&PRECONDITIONS)),
        pointer(3, "orphanDependents", Bool),
        pointer(4, "propagationPolicy", Str),
        repeated(5, "dryRun", Str),
        pointer(6, "ignoreStoreReadErrorWithClusterBreakingPotential", Bool),
    ],
};

static LABEL_SELECTOR_REQUIREMENT: Message = Message {
    name: "LabelSelectorRequirement",
    fields: &[
        field(1, "key", Str),
        field(2, "operator", Str),
        repeated(3, "values", Str),
    ],
};

static LABEL_SELECTOR: Message = Message {
    name: "LabelSelector",
    fields: &[
        field(1, "matchLabels", StringMap),
        repeated(
            2,
            "matchExpressions",
            FieldType::Message(&LABEL_SELECTOR_REQUIREMENT),
        ),
    ],
};

static POLICY_RULE: Message = Message {
    name: "PolicyRule",
    fields: &[
        repeated(1, "verbs", Str),
        repeated(2, "apiGroups", Str),
        repeated(3, "resources", Str),
        repeated(4, "resourceNames", Str),
        repeated(5, "nonResourceURLs", Str),
    ],
};

static AGGREGATION_RULE: Message = Message {
    name: "AggregationRule",
    fields: &[repeated(
        1,
        "clusterRoleSelectors",
        FieldType::Message(&LABEL_SELECTOR),
    )],
};

static SUBJECT: Message = Message {
    name: "Subject",
    fields: &[
        field(1, "kind", Str),
        field(2, "apiGroup", Str),
        field(3, "name", Str),
        field(4, "namespace", Str),
    ],
};

static ROLE_REF: Message = Message {
    name: "RoleRef",
    fields: &[
        field(1, "apiGroup", Str),
        field(2, "kind", Str),
        field(3, "name", Str),
    ],
};

/// Role and ClusterRole (a Role has no field 3).
static ROLE: Message = Message {
    name: "ClusterRole",
    fields: &[
        METADATA,
        repeated(2, "rules", FieldType::Message(&POLICY_RULE)),
        field(3, "aggregationRule", FieldType::Message(&AGGREGATION_RULE)),
    ],
};

/// RoleBinding and ClusterRoleBinding.
static ROLE_BINDING: Message = Message {
    name: "RoleBinding",
    fields: &[
        METADATA,
        repeated(2, "subjects", FieldType::Message(&SUBJECT)),
        field(3, "roleRef", FieldType::Message(&ROLE_REF)),
    ],
};

static RESOURCE_ATTRIBUTES: Message = Message {
    name: "ResourceAttributes",
    fields: &[
        field(1, "namespace", Str),
        field(2, "verb", Str),
        field(3, "group", Str),
        field(4, "version", Str),
        field(5, "resource", Str),
        field(6, "subresource", Str),
        field(7, "name", Str),
    ],
};

static NON_RESOURCE_ATTRIBUTES: Message = Message {
    name: "NonResourceAttributes",
    fields: &[field(1, "path", Str), field(2, "verb", Str)],
};

static SELF_SUBJECT_ACCESS_REVIEW_SPEC: Message = Message {
    name: "SelfSubjectAccessReviewSpec",
    fields: &[
        field(
            1,
            "resourceAttributes",
            FieldType::Message(&RESOURCE_ATTRIBUTES),
        ),
        field(
            2,
            "nonResourceAttributes",
            FieldType::Message(&NON_RESOURCE_ATTRIBUTES),
        ),
    ],
};

static SELF_SUBJECT_ACCESS_REVIEW: Message = Message {
    name: "SelfSubjectAccessReview",
    fields: &[
        METADATA,
        field(
            2,
            "spec",
            FieldType::Message(&SELF_SUBJECT_ACCESS_REVIEW_SPEC),
        ),
    ],
};

static SELF_SUBJECT_RULES_REVIEW_SPEC: Message = Message {
    name: "SelfSubjectRulesReviewSpec",
    fields: &[field(1, "namespace", Str)],
};

static SELF_SUBJECT_RULES_REVIEW: Message = Message {
    name: "SelfSubjectRulesReview",
    fields: &[
        METADATA,
        field(
            2,
            "spec",
            FieldType::Message(&SELF_SUBJECT_RULES_REVIEW_SPEC),
        ),
    ],
};

/// The message of a kind by its `apiVersion` and `kind`.
fn message_of(api_version: &str, kind: &str) -> Option<&'static Message> {
    let message = match (api_version, kind) {
        ("v1", "Namespace") => &NAMESPACE,
        ("v1", "ConfigMap") => &CONFIG_MAP,
        ("v1", "Secret") => &SECRET,
        ("v1", "ServiceAccount") => &SERVICE_ACCOUNT,
        ("v1", "Event") => &CORE_EVENT,
        ("events.k8s.io/v1", "Event") => &EVENTS_V1_EVENT,
        ("coordination.k8s.io/v1", "Lease") => &LEASE,
        ("rbac.authorization.k8s.io/v1", "Role" | "ClusterRole") => &ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => &ROLE_BINDING,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => &SELF_SUBJECT_ACCESS_REVIEW,
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => &SELF_SUBJECT_RULES_REVIEW,
        // client-go encodes DeleteOptions under the group version of the request or meta's.
        (_, "DeleteOptions") => &DELETE_OPTIONS,
        _ => return None,
    };
    Some(message)
}

// === decoding ===

/// Decodes a protobuf request body (magic, `runtime.Unknown`, object) into its JSON object,
/// with `apiVersion` and `kind` from the envelope's type meta.
pub fn decode(body: &[u8]) -> Result<Value, Error> {
    let Some(envelope) = body.strip_prefix(MAGIC.as_slice()) else {
        return Err(Error::MissingMagic);
    };
    let mut unknown = Map::new();
    decode_message(&UNKNOWN, envelope, &mut unknown)?;
    let api_version = unknown
        .get("typeMeta")
        .and_then(|meta| meta.get("apiVersion"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = unknown
        .get("typeMeta")
        .and_then(|meta| meta.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if let Some(encoding) = unknown.get("contentEncoding").and_then(Value::as_str)
        && !encoding.is_empty()
    {
        return Err(Error::ContentEncoding(encoding.to_string()));
    }
    if kind.is_empty() {
        return Err(Error::MissingKind);
    }
    let message = message_of(&api_version, &kind).ok_or_else(|| Error::UnknownKind {
        api_version: api_version.clone(),
        kind: kind.clone(),
    })?;
    // `raw` was re-encoded as base64 by the generic decoder; decode the original bytes again.
    let raw = raw_bytes(envelope)?;
    let mut object = Map::new();
    object.insert("kind".into(), Value::String(kind));
    object.insert("apiVersion".into(), Value::String(api_version));
    decode_message(message, &raw, &mut object)?;
    if message.name != "DeleteOptions" && !object.contains_key("metadata") {
        object.insert("metadata".into(), Value::Object(Map::new()));
    }
    Ok(Value::Object(object))
}

/// The last `raw` field (2) of a `runtime.Unknown`.
fn raw_bytes(envelope: &[u8]) -> Result<Vec<u8>, Error> {
    let mut reader = Reader::new(envelope, UNKNOWN.name);
    let mut raw = Vec::new();
    while !reader.is_empty() {
        let (number, wire_type) = reader.tag()?;
        if number == 2 && wire_type == WIRE_LEN {
            raw = reader.bytes()?.to_vec();
        } else {
            reader.skip(wire_type)?;
        }
    }
    Ok(raw)
}

const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_FIXED32: u8 = 5;

struct Reader<'a> {
    data: &'a [u8],
    message: &'static str,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8], message: &'static str) -> Self {
        Reader { data, message }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn varint(&mut self) -> Result<u64, Error> {
        let mut value: u64 = 0;
        for index in 0..10 {
            let Some((&byte, rest)) = self.data.split_first() else {
                return Err(Error::Truncated {
                    message: self.message,
                });
            };
            self.data = rest;
            if index == 9 && byte > 1 {
                return Err(Error::VarintOverflow {
                    message: self.message,
                });
            }
            value |= u64::from(byte & 0x7f) << (7 * index);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::VarintOverflow {
            message: self.message,
        })
    }

    fn tag(&mut self) -> Result<(u64, u8), Error> {
        let tag = self.varint()?;
        let wire_type = (tag & 0x7) as u8;
        let number = tag >> 3;
        if number == 0 || !matches!(wire_type, 0 | 1 | 2 | 5) {
            return Err(Error::IllegalTag {
                message: self.message,
                tag: number,
                wire_type,
            });
        }
        Ok((number, wire_type))
    }

    fn take(&mut self, length: usize) -> Result<&'a [u8], Error> {
        if self.data.len() < length {
            return Err(Error::Truncated {
                message: self.message,
            });
        }
        let (taken, rest) = self.data.split_at(length);
        self.data = rest;
        Ok(taken)
    }

    fn bytes(&mut self) -> Result<&'a [u8], Error> {
        let length = self.varint()?;
        let length = usize::try_from(length).map_err(|_| Error::Truncated {
            message: self.message,
        })?;
        self.take(length)
    }

    fn skip(&mut self, wire_type: u8) -> Result<(), Error> {
        match wire_type {
            WIRE_VARINT => self.varint().map(drop),
            WIRE_FIXED64 => self.take(8).map(drop),
            WIRE_LEN => self.bytes().map(drop),
            WIRE_FIXED32 => self.take(4).map(drop),
            _ => Err(Error::IllegalTag {
                message: self.message,
                tag: 0,
                wire_type,
            }),
        }
    }
}

fn expected_wire_type(field_type: FieldType) -> u8 {
    match field_type {
        Bool | Int32 | Int64 => WIRE_VARINT,
        _ => WIRE_LEN,
    }
}

/// Decodes `data` as `message` into `object`, merging into what is already there (protobuf
/// merges repeated occurrences of a message field).
fn decode_message(
    message: &'static Message,
    data: &[u8],
    object: &mut Map<String, Value>,
) -> Result<(), Error> {
    let mut reader = Reader::new(data, message.name);
    while !reader.is_empty() {
        let (number, wire_type) = reader.tag()?;
        let Some(field) = message.fields.iter().find(|field| field.number == number) else {
            reader.skip(wire_type)?;
            continue;
        };
        // Packed repeated scalars do not occur in these messages (no repeated numbers).
        if wire_type != expected_wire_type(field.field_type) {
            return Err(Error::WrongWireType {
                message: message.name,
                field: field.name,
                wire_type,
            });
        }
        decode_field(message, field, &mut reader, object)?;
    }
    Ok(())
}

fn decode_field(
    message: &'static Message,
    field: &Field,
    reader: &mut Reader<'_>,
    object: &mut Map<String, Value>,
) -> Result<(), Error> {
    let value = match field.field_type {
        Bool => Some(Value::Bool(reader.varint()? != 0)),
        // int32 is sign-extended to 64 bits on the wire; truncation restores it.
        Int32 => Some(Value::from(reader.varint()? as i64 as i32)),
        Int64 => Some(Value::from(reader.varint()? as i64)),
        Str => Some(Value::String(utf8(message, field, reader.bytes()?)?)),
        Bytes => Some(Value::String(
            base64::engine::general_purpose::STANDARD.encode(reader.bytes()?),
        )),
        Time | MicroTime => time(message, field, reader.bytes()?)?,
        FieldsV1 => Some(fields_v1(message, field, reader.bytes()?)?),
        StringMap | BytesMap => {
            let (key, value) = map_entry(message, field, reader.bytes()?)?;
            let map = object
                .entry(field.name)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = map {
                map.insert(key, value);
            }
            return Ok(());
        }
        FieldType::Message(inner) => {
            let bytes = reader.bytes()?;
            if field.repeated {
                let mut element = Map::new();
                decode_message(inner, bytes, &mut element)?;
                Some(Value::Object(element))
            } else {
                let entry = object
                    .entry(field.name)
                    .or_insert_with(|| Value::Object(Map::new()));
                if !entry.is_object() {
                    *entry = Value::Object(Map::new());
                }
                if let Value::Object(entry) = entry {
                    decode_message(inner, bytes, entry)?;
                }
                return Ok(());
            }
        }
    };
    if field.repeated {
        let list = object
            .entry(field.name)
            .or_insert_with(|| Value::Array(Vec::new()));
        if let (Value::Array(list), Some(value)) = (list, value) {
            list.push(value);
        }
        return Ok(());
    }
    match value {
        Some(value) if field.keep_zero || !is_zero(&value) => {
            object.insert(field.name.to_string(), value);
        }
        _ => {
            object.remove(field.name);
        }
    }
    Ok(())
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(flag) => !flag,
        Value::Number(number) => number.as_i64() == Some(0),
        Value::String(text) => text.is_empty(),
        _ => false,
    }
}

fn utf8(message: &'static Message, field: &Field, bytes: &[u8]) -> Result<String, Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::InvalidUtf8 {
        message: message.name,
        field: field.name,
    })
}

/// A `map<string, string|bytes>` entry: key (1) and value (2).
fn map_entry(
    message: &'static Message,
    field: &Field,
    bytes: &[u8],
) -> Result<(String, Value), Error> {
    let mut reader = Reader::new(bytes, message.name);
    let mut key = String::new();
    let mut value = Vec::new();
    while !reader.is_empty() {
        let (number, wire_type) = reader.tag()?;
        match (number, wire_type) {
            (1, WIRE_LEN) => key = utf8(message, field, reader.bytes()?)?,
            (2, WIRE_LEN) => value = reader.bytes()?.to_vec(),
            (1 | 2, _) => {
                return Err(Error::WrongWireType {
                    message: message.name,
                    field: field.name,
                    wire_type,
                });
            }
            _ => reader.skip(wire_type)?,
        }
    }
    let value = match field.field_type {
        BytesMap => Value::String(base64::engine::general_purpose::STANDARD.encode(&value)),
        _ => Value::String(utf8(message, field, &value)?),
    };
    Ok((key, value))
}

/// `Time`/`MicroTime` (seconds, nanos) as Kubernetes writes them in JSON; `None` for the zero
/// time.
fn time(message: &'static Message, field: &Field, bytes: &[u8]) -> Result<Option<Value>, Error> {
    let mut reader = Reader::new(bytes, message.name);
    let mut seconds: i64 = 0;
    let mut nanos: i64 = 0;
    while !reader.is_empty() {
        let (number, wire_type) = reader.tag()?;
        match (number, wire_type) {
            (1, WIRE_VARINT) => seconds = reader.varint()? as i64,
            (2, WIRE_VARINT) => nanos = i64::from(reader.varint()? as i64 as i32),
            (1 | 2, _) => {
                return Err(Error::WrongWireType {
                    message: message.name,
                    field: field.name,
                    wire_type,
                });
            }
            _ => reader.skip(wire_type)?,
        }
    }
    if seconds == 0 && nanos == 0 {
        return Ok(None);
    }
    let invalid = || Error::InvalidTime {
        message: message.name,
        field: field.name,
        seconds,
        nanos,
    };
    let nanos_i32 = i32::try_from(nanos).map_err(|_| invalid())?;
    let timestamp = jiff::Timestamp::new(seconds, nanos_i32).map_err(|_| invalid())?;
    let text = match field.field_type {
        MicroTime => timestamp.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        _ => timestamp.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    };
    Ok(Some(Value::String(text)))
}

/// `FieldsV1` holds the managed-fields set as JSON bytes in `raw` (1).
fn fields_v1(message: &'static Message, field: &Field, bytes: &[u8]) -> Result<Value, Error> {
    let mut reader = Reader::new(bytes, message.name);
    let mut raw: &[u8] = b"{}";
    while !reader.is_empty() {
        let (number, wire_type) = reader.tag()?;
        if number == 1 && wire_type == WIRE_LEN {
            raw = reader.bytes()?;
        } else {
            reader.skip(wire_type)?;
        }
    }
    serde_json::from_slice(raw).map_err(|error| Error::InvalidFieldsV1 {
        message: message.name,
        field: field.name,
        detail: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // A minimal protobuf writer for building test inputs.
    fn varint(mut value: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn len_field(number: u64, bytes: &[u8], out: &mut Vec<u8>) {
        varint((number << 3) | 2, out);
        varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }

    fn varint_field(number: u64, value: u64, out: &mut Vec<u8>) {
        varint(number << 3, out);
        varint(value, out);
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut type_meta = Vec::new();
        len_field(1, api_version.as_bytes(), &mut type_meta);
        len_field(2, kind.as_bytes(), &mut type_meta);
        let mut unknown = Vec::new();
        len_field(1, &type_meta, &mut unknown);
        len_field(2, raw, &mut unknown);
        len_field(3, b"", &mut unknown);
        len_field(4, b"", &mut unknown);
        let mut body = MAGIC.to_vec();
        body.extend(unknown);
        body
    }

    fn map_entry_bytes(key: &str, value: &[u8]) -> Vec<u8> {
        let mut entry = Vec::new();
        len_field(1, key.as_bytes(), &mut entry);
        len_field(2, value, &mut entry);
        entry
    }

    fn metadata(name: &str, namespace: &str) -> Vec<u8> {
        let mut meta = Vec::new();
        len_field(1, name.as_bytes(), &mut meta);
        len_field(2, b"", &mut meta);
        len_field(3, namespace.as_bytes(), &mut meta);
        varint_field(7, 0, &mut meta);
        len_field(8, b"", &mut meta);
        len_field(11, &map_entry_bytes("app", b"web"), &mut meta);
        meta
    }

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text
            .bytes()
            .filter(u8::is_ascii_hexdigit)
            .map(|digit| match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                _ => digit - b'A' + 10,
            })
            .collect();
        digits
            .chunks(2)
            .map(|pair| pair[0] << 4 | pair[1])
            .collect()
    }

    // Bodies captured from the installed kubectl (`-v=9` prints them; its user agent reports
    // v1.33.1) for its imperative generators.
    const KUBECTL_CREATE_NAMESPACE: &str = "
        6b 38 73 00 0a 0f 0a 02  76 31 12 09 4e 61 6d 65
        73 70 61 63 65 12 1e 0a  16 0a 06 74 65 61 6d 2d
        61 12 00 1a 00 22 00 2a  00 32 00 38 00 42 00 12
        00 1a 02 0a 00 1a 00 22  00";
    const KUBECTL_CREATE_CONFIGMAP: &str = "
        6b 38 73 00 0a 0f 0a 02  76 31 12 09 43 6f 6e 66
        69 67 4d 61 70 12 37 0a  18 0a 08 73 65 74 74 69
        6e 67 73 12 00 1a 00 22  00 2a 00 32 00 38 00 42
        00 12 0c 0a 04 6d 6f 64  65 12 04 66 61 73 74 12
        0d 0a 08 72 65 70 6c 69  63 61 73 12 01 33 1a 00
        22 00";
    const KUBECTL_CREATE_SECRET: &str = "
        6b 38 73 00 0a 0c 0a 02  76 31 12 06 53 65 63 72
        65 74 12 2e 0a 1b 0a 0b  63 72 65 64 65 6e 74 69
        61 6c 73 12 00 1a 00 22  00 2a 00 32 00 38 00 42
        00 12 0d 0a 04 75 73 65  72 12 05 61 64 6d 69 6e
        1a 00 1a 00 22 00";
    const KUBECTL_CREATE_SERVICEACCOUNT: &str = "
        6b 38 73 00 0a 14 0a 02  76 31 12 0e 53 65 72 76
        69 63 65 41 63 63 6f 75  6e 74 12 19 0a 17 0a 07
        62 75 69 6c 64 65 72 12  00 1a 00 22 00 2a 00 32
        00 38 00 42 00 1a 00 22  00";

    #[test]
    fn captured_kubectl_bodies_decode_like_kubectls_json() {
        assert_eq!(
            decode(&hex(KUBECTL_CREATE_NAMESPACE)).unwrap(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"},
                   "spec": {}, "status": {}})
        );
        assert_eq!(
            decode(&hex(KUBECTL_CREATE_CONFIGMAP)).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                   "data": {"mode": "fast", "replicas": "3"}})
        );
        // An empty `type` is left out, so the server's default (Opaque) applies.
        assert_eq!(
            decode(&hex(KUBECTL_CREATE_SECRET)).unwrap(),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "credentials"},
                   "data": {"user": "YWRtaW4="}})
        );
        assert_eq!(
            decode(&hex(KUBECTL_CREATE_SERVICEACCOUNT)).unwrap(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "builder"}})
        );
    }

    #[test]
    fn captured_bodies_cut_or_corrupted_fail_cleanly() {
        for capture in [
            KUBECTL_CREATE_NAMESPACE,
            KUBECTL_CREATE_CONFIGMAP,
            KUBECTL_CREATE_SECRET,
            KUBECTL_CREATE_SERVICEACCOUNT,
        ] {
            let body = hex(capture);
            // A cut between the envelope's fields leaves a valid (shorter) message, but a cut
            // inside the type meta or the raw object is detected as truncation.
            let type_meta_end = 6 + usize::from(body[5]);
            let raw_end = type_meta_end + 2 + usize::from(body[type_meta_end + 1]);
            for end in (5..type_meta_end).chain(type_meta_end + 1..raw_end) {
                assert!(decode(&body[..end]).is_err(), "{end}");
            }
            for index in 4..body.len() {
                for flip in [0x80u8, 0xff] {
                    let mut corrupted = body.clone();
                    corrupted[index] ^= flip;
                    // Either a clean error or some object; never a panic.
                    let _ = decode(&corrupted);
                }
            }
        }
    }

    #[test]
    fn config_map_decodes_like_its_json() {
        let mut raw = Vec::new();
        len_field(1, &metadata("settings", "default"), &mut raw);
        len_field(2, &map_entry_bytes("mode", b"fast"), &mut raw);
        len_field(2, &map_entry_bytes("empty", b""), &mut raw);
        len_field(3, &map_entry_bytes("blob", &[0, 1, 2]), &mut raw);
        varint_field(4, 0, &mut raw);
        let object = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            object,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "default",
                             "labels": {"app": "web"}},
                "data": {"mode": "fast", "empty": ""},
                "binaryData": {"blob": "AAEC"},
                "immutable": false,
            })
        );
    }

    #[test]
    fn rbac_kinds_and_access_reviews_decode_like_their_json() {
        let fields = |pairs: &[(u64, &[u8])]| {
            let mut out = Vec::new();
            for (number, bytes) in pairs {
                len_field(*number, bytes, &mut out);
            }
            out
        };
        // What `kubectl create rolebinding alice-edit --clusterrole=edit --user=alice` sends.
        let subject = fields(&[
            (1, b"User"),
            (2, b"rbac.authorization.k8s.io"),
            (3, b"alice"),
            (4, b""),
        ]);
        let role_ref = fields(&[
            (1, b"rbac.authorization.k8s.io"),
            (2, b"ClusterRole"),
            (3, b"edit"),
        ]);
        let raw = fields(&[
            (1, &metadata("alice-edit", "team-a")),
            (2, &subject),
            (3, &role_ref),
        ]);
        let binding = decode(&envelope(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            &raw,
        ))
        .unwrap();
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}])
        );
        assert_eq!(
            binding["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"})
        );
        let rule = fields(&[(1, b"get"), (1, b"list"), (2, b""), (3, b"configmaps")]);
        let selector = fields(&[(1, &map_entry_bytes("tier", b"gold"))]);
        let aggregation = fields(&[(1, &selector)]);
        let raw = fields(&[(1, &metadata("reader", "")), (2, &rule), (3, &aggregation)]);
        let role = decode(&envelope(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            &raw,
        ))
        .unwrap();
        assert_eq!(
            role["rules"],
            json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"]}])
        );
        assert_eq!(
            role["aggregationRule"],
            json!({"clusterRoleSelectors": [{"matchLabels": {"tier": "gold"}}]})
        );
        // `kubectl auth can-i patch gpuinstances --subresource=status -n team-a`.
        let attributes = fields(&[
            (1, b"team-a"),
            (2, b"patch"),
            (3, b"gpucloud.io"),
            (4, b""),
            (5, b"gpuinstances"),
            (6, b"status"),
            (7, b""),
        ]);
        let raw = fields(&[(1, b""), (2, &fields(&[(1, &attributes)]))]);
        let review = decode(&envelope(
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            &raw,
        ))
        .unwrap();
        assert_eq!(
            review["spec"],
            json!({"resourceAttributes": {"namespace": "team-a", "verb": "patch",
                "group": "gpucloud.io", "resource": "gpuinstances", "subresource": "status"}})
        );
        let raw = fields(&[(2, &fields(&[(1, b"team-a")]))]);
        let review = decode(&envelope(
            "authorization.k8s.io/v1",
            "SelfSubjectRulesReview",
            &raw,
        ))
        .unwrap();
        assert_eq!(review["spec"], json!({"namespace": "team-a"}));
    }

    #[test]
    fn secret_data_is_base64_and_times_are_rfc3339() {
        let mut time = Vec::new();
        varint_field(1, 1_700_000_000, &mut time);
        let mut meta = metadata("token", "ns");
        len_field(8, &time, &mut meta);
        let mut raw = Vec::new();
        len_field(1, &meta, &mut raw);
        len_field(2, &map_entry_bytes("key", b"v"), &mut raw);
        len_field(3, b"Opaque", &mut raw);
        let object = decode(&envelope("v1", "Secret", &raw)).unwrap();
        assert_eq!(object["data"], json!({"key": "dg=="}));
        assert_eq!(object["type"], "Opaque");
        assert_eq!(
            object["metadata"]["creationTimestamp"],
            "2023-11-14T22:13:20Z"
        );
    }

    #[test]
    fn lease_micro_times_and_negative_int32() {
        let mut renew = Vec::new();
        varint_field(1, 1_700_000_000, &mut renew);
        varint_field(2, 123_456_000, &mut renew);
        let mut spec = Vec::new();
        len_field(1, b"holder", &mut spec);
        // -1 as int32 is a 10-byte varint.
        varint_field(2, (-1i64) as u64, &mut spec);
        len_field(4, &renew, &mut spec);
        varint_field(5, 0, &mut spec);
        let mut raw = Vec::new();
        len_field(1, &metadata("lock", "kube-system"), &mut raw);
        len_field(2, &spec, &mut raw);
        let object = decode(&envelope("coordination.k8s.io/v1", "Lease", &raw)).unwrap();
        assert_eq!(
            object["spec"],
            json!({"holderIdentity": "holder", "leaseDurationSeconds": -1,
                   "renewTime": "2023-11-14T22:13:20.123456Z", "leaseTransitions": 0})
        );
    }

    #[test]
    fn events_v1_fields_keep_their_names() {
        let mut regarding = Vec::new();
        len_field(1, b"GpuInstance", &mut regarding);
        len_field(3, b"train", &mut regarding);
        let mut raw = Vec::new();
        len_field(1, &metadata("train.1", "default"), &mut raw);
        len_field(4, b"gpucloud-operator", &mut raw);
        len_field(7, b"Created", &mut raw);
        len_field(8, &regarding, &mut raw);
        len_field(10, b"instance created", &mut raw);
        len_field(11, b"Normal", &mut raw);
        let object = decode(&envelope("events.k8s.io/v1", "Event", &raw)).unwrap();
        assert_eq!(
            object["regarding"],
            json!({"kind": "GpuInstance", "name": "train"})
        );
        assert_eq!(object["note"], "instance created");
        assert_eq!(object["reportingController"], "gpucloud-operator");
    }

    #[test]
    fn unknown_fields_are_skipped() {
        let mut raw = Vec::new();
        len_field(1, &metadata("a", ""), &mut raw);
        varint_field(99, 5, &mut raw);
        len_field(98, b"whatever", &mut raw);
        varint((97 << 3) | 5, &mut raw);
        raw.extend([1, 2, 3, 4]);
        let object = decode(&envelope("v1", "Namespace", &raw)).unwrap();
        assert_eq!(object["metadata"]["name"], "a");
    }

    #[test]
    fn malformed_input_is_an_error_never_a_panic() {
        assert_eq!(decode(b"{\"kind\":1}"), Err(Error::MissingMagic));
        assert_eq!(decode(b"k8s"), Err(Error::MissingMagic));
        assert_eq!(decode(b"k8s\0"), Err(Error::MissingKind));
        assert!(matches!(
            decode(&envelope("v1", "Pod", &[])),
            Err(Error::UnknownKind { .. })
        ));
        assert!(matches!(
            decode(&envelope("example.com/v1", "Widget", &[])),
            Err(Error::UnknownKind { .. })
        ));
        // A length running past the end.
        let mut raw = Vec::new();
        len_field(1, &metadata("a", ""), &mut raw);
        raw.extend([0x12, 0x7f, b'x']);
        assert!(matches!(
            decode(&envelope("v1", "ConfigMap", &raw)),
            Err(Error::Truncated { .. })
        ));
        // A string field sent as a varint.
        let mut raw = Vec::new();
        varint_field(3, 1, &mut raw);
        assert!(matches!(
            decode(&envelope("v1", "Secret", &raw)),
            Err(Error::WrongWireType { .. })
        ));
        // Invalid UTF-8 in a name.
        let mut meta = Vec::new();
        len_field(1, &[0xff, 0xfe], &mut meta);
        let mut raw = Vec::new();
        len_field(1, &meta, &mut raw);
        assert!(matches!(
            decode(&envelope("v1", "Namespace", &raw)),
            Err(Error::InvalidUtf8 { .. })
        ));
        // An unterminated varint and a group wire type.
        assert!(decode(&envelope("v1", "Namespace", &[0x08, 0xff])).is_err());
        assert!(decode(&envelope("v1", "Namespace", &[0x0b])).is_err());
        assert!(decode(&envelope("v1", "Namespace", &[0x08; 11])).is_err());
        // An out-of-range time.
        let mut time = Vec::new();
        varint_field(1, i64::MAX as u64, &mut time);
        let mut meta = Vec::new();
        len_field(8, &time, &mut meta);
        let mut raw = Vec::new();
        len_field(1, &meta, &mut raw);
        assert!(matches!(
            decode(&envelope("v1", "Namespace", &raw)),
            Err(Error::InvalidTime { .. })
        ));
    }

    #[test]
    fn every_prefix_of_a_valid_body_decodes_or_fails_cleanly() {
        let mut raw = Vec::new();
        len_field(1, &metadata("settings", "default"), &mut raw);
        len_field(2, &map_entry_bytes("mode", b"fast"), &mut raw);
        let body = envelope("v1", "ConfigMap", &raw);
        for end in 0..body.len() {
            let _ = decode(&body[..end]);
        }
        for index in 4..body.len() {
            let mut corrupted = body.clone();
            corrupted[index] ^= 0xff;
            let _ = decode(&corrupted);
        }
    }
}
