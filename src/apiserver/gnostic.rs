//! A Swagger 2.0 document in gnostic's protobuf encoding (`openapi.v2.Document` of
//! `github.com/google/gnostic-models/openapiv2/OpenAPIv2.proto`): what `/openapi/v2` answers
//! to `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, kubectl's only
//! way of asking for it.
//!
//! kube-apiserver parses its JSON document with gnostic and marshals the result; this encodes
//! the JSON document field by field the same way. kubectl reads from it the definitions (their
//! types, properties, items, `additionalProperties`, `required`, `$ref` and the vendor
//! extensions, `x-kubernetes-group-version-kind` first) and the paths' operations (their
//! `consumes`, parameters and GVK extension). Vendor extensions and other free-form values
//! (`default`, `enum`, `example`) are gnostic's `Any`, whose `yaml` field holds the value as
//! YAML. Keys gnostic does not know are left out, as are the members it would refuse (the
//! document is built without them).

use serde_json::{Map, Value};

/// The protobuf encoding of the Swagger 2.0 `document`.
pub fn encode_document(document: &Value) -> Vec<u8> {
    let mut out = Message::default();
    out.string(1, document.get("swagger"));
    if let Some(info) = document.get("info").and_then(Value::as_object) {
        out.message(2, info_message(info));
    }
    out.string(3, document.get("host"));
    out.string(4, document.get("basePath"));
    out.strings(5, document.get("schemes"));
    out.strings(6, document.get("consumes"));
    out.strings(7, document.get("produces"));
    if let Some(paths) = document.get("paths").and_then(Value::as_object) {
        out.message(8, paths_message(paths));
    }
    if let Some(definitions) = document.get("definitions").and_then(Value::as_object) {
        let mut named = Message::default();
        for (name, schema) in definitions {
            named.named(1, name, schema_message(schema));
        }
        out.message(9, named.0);
    }
    out.extensions(16, document);
    out.0
}

/// Protobuf fields written in order: proto3 leaves scalars at their zero value out; an
/// embedded message is written whenever it is present, even empty (kubectl tells an object
/// with no properties from a map by whether `properties` is there).
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn key(&mut self, field: u64, wire_type: u64) {
        varint(&mut self.0, (field << 3) | wire_type);
    }

    fn bytes(&mut self, field: u64, bytes: &[u8]) {
        self.key(field, 2);
        varint(&mut self.0, bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn message(&mut self, field: u64, message: Vec<u8>) {
        self.bytes(field, &message);
    }

    fn text(&mut self, field: u64, text: &str) {
        if !text.is_empty() {
            self.bytes(field, text.as_bytes());
        }
    }

    fn string(&mut self, field: u64, value: Option<&Value>) {
        if let Some(text) = value.and_then(Value::as_str) {
            self.text(field, text);
        }
    }

    /// A repeated string: a JSON array of strings, or a lone string.
    fn strings(&mut self, field: u64, value: Option<&Value>) {
        match value {
            Some(Value::String(text)) => self.bytes(field, text.as_bytes()),
            Some(Value::Array(items)) => {
                for text in items.iter().filter_map(Value::as_str) {
                    self.bytes(field, text.as_bytes());
                }
            }
            _ => {}
        }
    }

    fn boolean(&mut self, field: u64, value: Option<&Value>) {
        if value.and_then(Value::as_bool) == Some(true) {
            self.key(field, 0);
            varint(&mut self.0, 1);
        }
    }

    fn int64(&mut self, field: u64, value: Option<&Value>) {
        let number = value.and_then(|value| {
            value
                .as_i64()
                .or_else(|| value.as_f64().map(|number| number as i64))
        });
        if let Some(number) = number.filter(|number| *number != 0) {
            self.key(field, 0);
            // Negative int64 values are ten-byte varints of their two's complement.
            varint(&mut self.0, number as u64);
        }
    }

    fn double(&mut self, field: u64, value: Option<&Value>) {
        if let Some(number) = value
            .and_then(Value::as_f64)
            .filter(|number| *number != 0.0)
        {
            self.key(field, 1);
            self.0.extend_from_slice(&number.to_le_bytes());
        }
    }

    /// One `Any` (its `yaml` field, 2).
    fn any(&mut self, field: u64, value: &Value) {
        self.message(field, any_message(value));
    }

    fn anys(&mut self, field: u64, value: Option<&Value>) {
        if let Some(Value::Array(items)) = value {
            for item in items {
                self.any(field, item);
            }
        }
    }

    /// A `Named*` entry: `name` (1) and its `value` (2).
    fn named(&mut self, field: u64, name: &str, value: Vec<u8>) {
        let mut entry = Message::default();
        entry.text(1, name);
        entry.message(2, value);
        self.message(field, entry.0);
    }

    /// The `x-` members of `object` as `NamedAny` entries.
    fn extensions(&mut self, field: u64, object: &Value) {
        let Some(map) = object.as_object() else {
            return;
        };
        for (name, value) in map.iter().filter(|(name, _)| name.starts_with("x-")) {
            self.named(field, name, any_message(value));
        }
    }
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// gnostic's `Any`: the value as YAML, as gnostic writes it.
fn any_message(value: &Value) -> Vec<u8> {
    // JSON is YAML too, should the YAML writer ever refuse a value.
    let yaml = crate::yaml::to_string(value).unwrap_or_else(|_| value.to_string());
    let mut any = Message::default();
    any.text(2, &yaml);
    any.0
}

fn info_message(info: &Map<String, Value>) -> Vec<u8> {
    let mut out = Message::default();
    out.string(1, info.get("title"));
    out.string(2, info.get("version"));
    out.string(3, info.get("description"));
    out.string(4, info.get("termsOfService"));
    out.extensions(7, &Value::Object(info.clone()));
    out.0
}

fn paths_message(paths: &Map<String, Value>) -> Vec<u8> {
    let mut out = Message::default();
    for (name, value) in paths {
        if name.starts_with("x-") {
            out.named(1, name, any_message(value));
        } else if name.starts_with('/') {
            out.named(2, name, path_item_message(value));
        }
    }
    out.0
}

fn path_item_message(item: &Value) -> Vec<u8> {
    let mut out = Message::default();
    out.string(1, item.get("$ref"));
    for (field, method) in [
        (2, "get"),
        (3, "put"),
        (4, "post"),
        (5, "delete"),
        (6, "options"),
        (7, "head"),
        (8, "patch"),
    ] {
        if let Some(operation) = item.get(method).filter(|operation| operation.is_object()) {
            out.message(field, operation_message(operation));
        }
    }
    parameters(&mut out, 9, item.get("parameters"));
    out.extensions(10, item);
    out.0
}

fn operation_message(operation: &Value) -> Vec<u8> {
    let mut out = Message::default();
    out.strings(1, operation.get("tags"));
    out.string(2, operation.get("summary"));
    out.string(3, operation.get("description"));
    if let Some(docs) = operation.get("externalDocs") {
        out.message(4, external_docs_message(docs));
    }
    out.string(5, operation.get("operationId"));
    out.strings(6, operation.get("produces"));
    out.strings(7, operation.get("consumes"));
    parameters(&mut out, 8, operation.get("parameters"));
    if let Some(responses) = operation.get("responses").and_then(Value::as_object) {
        let mut codes = Message::default();
        for (code, response) in responses {
            if code.starts_with("x-") {
                codes.named(2, code, any_message(response));
            } else {
                codes.named(1, code, response_value_message(response));
            }
        }
        out.message(9, codes.0);
    }
    out.strings(10, operation.get("schemes"));
    out.boolean(11, operation.get("deprecated"));
    out.extensions(13, operation);
    out.0
}

/// `ParametersItem`s: a parameter (1) or a JSON reference (2).
fn parameters(out: &mut Message, field: u64, parameters: Option<&Value>) {
    let Some(Value::Array(parameters)) = parameters else {
        return;
    };
    for parameter in parameters {
        let mut item = Message::default();
        if parameter.get("$ref").is_some() {
            item.message(2, json_reference_message(parameter));
        } else {
            item.message(1, parameter_message(parameter));
        }
        out.message(field, item.0);
    }
}

fn json_reference_message(reference: &Value) -> Vec<u8> {
    let mut out = Message::default();
    out.string(1, reference.get("$ref"));
    out.string(2, reference.get("description"));
    out.0
}

/// `Parameter`: a body parameter (1) or, by `in`, one of `NonBodyParameter`'s sub-schemas
/// (2: header 1, formData 2, query 3, path 4).
fn parameter_message(parameter: &Value) -> Vec<u8> {
    let mut out = Message::default();
    let location = parameter
        .get("in")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if location == "body" {
        let mut body = Message::default();
        body.string(1, parameter.get("description"));
        body.string(2, parameter.get("name"));
        body.string(3, parameter.get("in"));
        body.boolean(4, parameter.get("required"));
        if let Some(schema) = parameter.get("schema") {
            body.message(5, schema_message(schema));
        }
        body.extensions(6, parameter);
        out.message(1, body.0);
        return out.0;
    }
    let (choice, with_empty_value) = match location {
        "header" => (1, false),
        "formData" => (2, true),
        "path" => (4, false),
        _ => (3, true),
    };
    let mut non_body = Message::default();
    non_body.message(choice, sub_schema_message(parameter, with_empty_value));
    out.message(2, non_body.0);
    out.0
}

/// A non-body parameter's sub-schema. The query and form-data layouts have
/// `allowEmptyValue` as field 5, which shifts every later field by one against the header
/// and path layouts.
fn sub_schema_message(parameter: &Value, with_empty_value: bool) -> Vec<u8> {
    let mut out = Message::default();
    out.boolean(1, parameter.get("required"));
    out.string(2, parameter.get("in"));
    out.string(3, parameter.get("description"));
    out.string(4, parameter.get("name"));
    let shift = if with_empty_value {
        out.boolean(5, parameter.get("allowEmptyValue"));
        1
    } else {
        0
    };
    out.string(5 + shift, parameter.get("type"));
    out.string(6 + shift, parameter.get("format"));
    if let Some(items) = parameter.get("items") {
        out.message(7 + shift, primitives_items_message(items));
    }
    out.string(8 + shift, parameter.get("collectionFormat"));
    if let Some(default) = parameter.get("default") {
        out.any(9 + shift, default);
    }
    out.double(10 + shift, parameter.get("maximum"));
    out.boolean(11 + shift, parameter.get("exclusiveMaximum"));
    out.double(12 + shift, parameter.get("minimum"));
    out.boolean(13 + shift, parameter.get("exclusiveMinimum"));
    out.int64(14 + shift, parameter.get("maxLength"));
    out.int64(15 + shift, parameter.get("minLength"));
    out.string(16 + shift, parameter.get("pattern"));
    out.int64(17 + shift, parameter.get("maxItems"));
    out.int64(18 + shift, parameter.get("minItems"));
    out.boolean(19 + shift, parameter.get("uniqueItems"));
    out.anys(20 + shift, parameter.get("enum"));
    out.double(21 + shift, parameter.get("multipleOf"));
    out.extensions(22 + shift, parameter);
    out.0
}

fn primitives_items_message(items: &Value) -> Vec<u8> {
    let mut out = Message::default();
    out.string(1, items.get("type"));
    out.string(2, items.get("format"));
    if let Some(nested) = items.get("items") {
        out.message(3, primitives_items_message(nested));
    }
    out.string(4, items.get("collectionFormat"));
    if let Some(default) = items.get("default") {
        out.any(5, default);
    }
    out.double(6, items.get("maximum"));
    out.boolean(7, items.get("exclusiveMaximum"));
    out.double(8, items.get("minimum"));
    out.boolean(9, items.get("exclusiveMinimum"));
    out.int64(10, items.get("maxLength"));
    out.int64(11, items.get("minLength"));
    out.string(12, items.get("pattern"));
    out.int64(13, items.get("maxItems"));
    out.int64(14, items.get("minItems"));
    out.boolean(15, items.get("uniqueItems"));
    out.anys(16, items.get("enum"));
    out.double(17, items.get("multipleOf"));
    out.extensions(18, items);
    out.0
}

/// `ResponseValue`: a response (1) or a JSON reference (2).
fn response_value_message(response: &Value) -> Vec<u8> {
    let mut out = Message::default();
    if response.get("$ref").is_some() {
        out.message(2, json_reference_message(response));
        return out.0;
    }
    let mut body = Message::default();
    body.string(1, response.get("description"));
    if let Some(schema) = response.get("schema") {
        // `SchemaItem`: a schema (1), or a file schema (2) for `type: file`.
        let mut item = Message::default();
        if schema.get("type").and_then(Value::as_str) == Some("file") {
            item.message(2, file_schema_message(schema));
        } else {
            item.message(1, schema_message(schema));
        }
        body.message(2, item.0);
    }
    body.extensions(5, response);
    out.message(1, body.0);
    out.0
}

fn file_schema_message(schema: &Value) -> Vec<u8> {
    let mut out = Message::default();
    out.string(1, schema.get("format"));
    out.string(2, schema.get("title"));
    out.string(3, schema.get("description"));
    if let Some(default) = schema.get("default") {
        out.any(4, default);
    }
    out.strings(5, schema.get("required"));
    out.string(6, schema.get("type"));
    out.boolean(7, schema.get("readOnly"));
    if let Some(example) = schema.get("example") {
        out.any(9, example);
    }
    out.extensions(10, schema);
    out.0
}

fn external_docs_message(docs: &Value) -> Vec<u8> {
    let mut out = Message::default();
    out.string(1, docs.get("description"));
    out.string(2, docs.get("url"));
    out.extensions(3, docs);
    out.0
}

/// gnostic's `Schema`.
fn schema_message(schema: &Value) -> Vec<u8> {
    let mut out = Message::default();
    out.string(1, schema.get("$ref"));
    out.string(2, schema.get("format"));
    out.string(3, schema.get("title"));
    out.string(4, schema.get("description"));
    if let Some(default) = schema.get("default") {
        out.any(5, default);
    }
    out.double(6, schema.get("multipleOf"));
    out.double(7, schema.get("maximum"));
    out.boolean(8, schema.get("exclusiveMaximum"));
    out.double(9, schema.get("minimum"));
    out.boolean(10, schema.get("exclusiveMinimum"));
    out.int64(11, schema.get("maxLength"));
    out.int64(12, schema.get("minLength"));
    out.string(13, schema.get("pattern"));
    out.int64(14, schema.get("maxItems"));
    out.int64(15, schema.get("minItems"));
    out.boolean(16, schema.get("uniqueItems"));
    out.int64(17, schema.get("maxProperties"));
    out.int64(18, schema.get("minProperties"));
    out.strings(19, schema.get("required"));
    out.anys(20, schema.get("enum"));
    match schema.get("additionalProperties") {
        // `AdditionalPropertiesItem`: a schema (1) or a boolean (2; a oneof member, so
        // written even when false).
        Some(Value::Bool(allowed)) => {
            let mut item = Message::default();
            item.key(2, 0);
            varint(&mut item.0, u64::from(*allowed));
            out.message(21, item.0);
        }
        Some(additional @ Value::Object(_)) => {
            let mut item = Message::default();
            item.message(1, schema_message(additional));
            out.message(21, item.0);
        }
        _ => {}
    }
    if let Some(types) = schema.get("type") {
        // `TypeItem`: the type names.
        let mut item = Message::default();
        item.strings(1, Some(types));
        out.message(22, item.0);
    }
    match schema.get("items") {
        // `ItemsItem`: one schema, or a tuple's.
        Some(Value::Array(items)) => {
            let mut item = Message::default();
            for each in items {
                item.message(1, schema_message(each));
            }
            out.message(23, item.0);
        }
        Some(items @ Value::Object(_)) => {
            let mut item = Message::default();
            item.message(1, schema_message(items));
            out.message(23, item.0);
        }
        _ => {}
    }
    if let Some(Value::Array(all_of)) = schema.get("allOf") {
        for each in all_of {
            out.message(24, schema_message(each));
        }
    }
    if let Some(Value::Object(properties)) = schema.get("properties") {
        let mut named = Message::default();
        for (name, property) in properties {
            named.named(1, name, schema_message(property));
        }
        out.message(25, named.0);
    }
    out.string(26, schema.get("discriminator"));
    out.boolean(27, schema.get("readOnly"));
    if let Some(docs) = schema.get("externalDocs") {
        out.message(29, external_docs_message(docs));
    }
    if let Some(example) = schema.get("example") {
        out.any(30, example);
    }
    out.extensions(31, schema);
    out.0
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    /// One decoded protobuf field: its number and its varint, fixed64 or bytes value.
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) enum Field {
        Varint(u64, u64),
        Fixed64(u64, u64),
        Bytes(u64, Vec<u8>),
    }

    /// The fields of one message, in order (the test's own reading of the wire format).
    pub(crate) fn decode(mut bytes: &[u8]) -> Vec<Field> {
        fn read_varint(bytes: &mut &[u8]) -> u64 {
            let mut value = 0u64;
            let mut shift = 0;
            loop {
                let byte = bytes[0];
                *bytes = &bytes[1..];
                value |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return value;
                }
                shift += 7;
            }
        }
        let mut fields = Vec::new();
        while !bytes.is_empty() {
            let key = read_varint(&mut bytes);
            let field = key >> 3;
            match key & 7 {
                0 => fields.push(Field::Varint(field, read_varint(&mut bytes))),
                1 => {
                    let value = u64::from_le_bytes(bytes[..8].try_into().unwrap());
                    bytes = &bytes[8..];
                    fields.push(Field::Fixed64(field, value));
                }
                2 => {
                    let length = read_varint(&mut bytes) as usize;
                    fields.push(Field::Bytes(field, bytes[..length].to_vec()));
                    bytes = &bytes[length..];
                }
                other => panic!("unexpected wire type {other}"),
            }
        }
        fields
    }

    /// The bytes of every field numbered `number`.
    pub(crate) fn all(fields: &[Field], number: u64) -> Vec<Vec<u8>> {
        fields
            .iter()
            .filter_map(|field| match field {
                Field::Bytes(n, bytes) if *n == number => Some(bytes.clone()),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn text(fields: &[Field], number: u64) -> String {
        all(fields, number)
            .first()
            .map(|bytes| String::from_utf8(bytes.clone()).unwrap())
            .unwrap_or_default()
    }

    /// A `Named*` entry's name and value bytes.
    pub(crate) fn named(entry: &[u8]) -> (String, Vec<u8>) {
        let fields = decode(entry);
        (text(&fields, 1), all(&fields, 2)[0].clone())
    }

    #[test]
    fn a_document_encodes_as_gnostic_would() {
        let document = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "paths": {"/api/v1/namespaces/{namespace}/configmaps/{name}": {
                "parameters": [{"name": "name", "in": "path", "required": true, "type": "string"}],
                "patch": {
                    "consumes": ["application/merge-patch+json"],
                    "parameters": [
                        {"name": "body", "in": "body", "required": true,
                         "schema": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}},
                        {"name": "fieldValidation", "in": "query", "type": "string"},
                    ],
                    "responses": {"200": {"description": "OK", "schema": {"type": "object"}}},
                    "x-kubernetes-group-version-kind": {"group": "", "kind": "ConfigMap", "version": "v1"},
                },
            }},
            "definitions": {"io.k8s.api.core.v1.ConfigMap": {
                "type": "object",
                "required": ["data"],
                "properties": {
                    "data": {"type": "object", "additionalProperties": {"type": "string"}},
                    "list": {"type": "array", "items": {"type": "integer", "maximum": 3}},
                    "closed": {"type": "object", "additionalProperties": false},
                },
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}],
            }},
        });
        let fields = decode(&encode_document(&document));
        assert_eq!(text(&fields, 1), "2.0");
        let info = decode(&all(&fields, 2)[0]);
        assert_eq!(
            (text(&info, 1), text(&info, 2)),
            ("Kubernetes".into(), "v1.33.0".into())
        );

        let paths = decode(&all(&fields, 8)[0]);
        let (path, item) = named(&all(&paths, 2)[0]);
        assert_eq!(path, "/api/v1/namespaces/{namespace}/configmaps/{name}");
        let item = decode(&item);
        // The path-level parameter: ParametersItem.parameter.non_body.path sub-schema.
        let parameter = decode(&all(&item, 9)[0]);
        let non_body = decode(&all(&decode(&all(&parameter, 1)[0]), 2)[0]);
        let path_parameter = decode(&all(&non_body, 4)[0]);
        assert_eq!(path_parameter[0], Field::Varint(1, 1));
        assert_eq!(text(&path_parameter, 4), "name");
        assert_eq!(text(&path_parameter, 5), "string");
        let patch = decode(&all(&item, 8)[0]);
        assert_eq!(text(&patch, 7), "application/merge-patch+json");
        let parameters = all(&patch, 8);
        let body = decode(&all(&decode(&all(&decode(&parameters[0]), 1)[0]), 1)[0]);
        assert_eq!(text(&body, 3), "body");
        let body_schema = decode(&all(&body, 5)[0]);
        assert_eq!(
            text(&body_schema, 1),
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
        );
        let query = decode(&all(&decode(&all(&decode(&parameters[1]), 1)[0]), 2)[0]);
        let query = decode(&all(&query, 3)[0]);
        assert_eq!(text(&query, 4), "fieldValidation");
        assert_eq!(text(&query, 6), "string");
        let responses = decode(&all(&patch, 9)[0]);
        let (code, _) = named(&all(&responses, 1)[0]);
        assert_eq!(code, "200");
        let (name, extension) = named(&all(&patch, 13)[0]);
        assert_eq!(name, "x-kubernetes-group-version-kind");
        // Go's YAML writers quote an empty string with double quotes, as gnostic does.
        assert_eq!(
            text(&decode(&extension), 2),
            "group: \"\"\nkind: ConfigMap\nversion: v1\n"
        );

        let definitions = decode(&all(&fields, 9)[0]);
        let (name, schema) = named(&all(&definitions, 1)[0]);
        assert_eq!(name, "io.k8s.api.core.v1.ConfigMap");
        let schema = decode(&schema);
        assert_eq!(text(&schema, 19), "data");
        assert_eq!(text(&decode(&all(&schema, 22)[0]), 1), "object");
        let properties: Vec<(String, Vec<Field>)> = all(&decode(&all(&schema, 25)[0]), 1)
            .iter()
            .map(|entry| {
                let (name, value) = named(entry);
                (name, decode(&value))
            })
            .collect();
        let names: Vec<&str> = properties.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["closed", "data", "list"]);
        let closed = decode(&all(&properties[0].1, 21)[0]);
        assert_eq!(closed, [Field::Varint(2, 0)]);
        let data = decode(&all(&properties[1].1, 21)[0]);
        let value_schema = decode(&all(&data, 1)[0]);
        assert_eq!(text(&decode(&all(&value_schema, 22)[0]), 1), "string");
        let items = decode(&all(&properties[2].1, 23)[0]);
        let item = decode(&all(&items, 1)[0]);
        assert!(item.contains(&Field::Fixed64(7, 3.0f64.to_bits())));
        let (name, gvk) = named(&all(&schema, 31)[0]);
        assert_eq!(name, "x-kubernetes-group-version-kind");
        assert_eq!(
            text(&decode(&gvk), 2),
            "- group: \"\"\n  kind: ConfigMap\n  version: v1\n"
        );
    }
}
