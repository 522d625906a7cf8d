//! Decoding watched objects: without `metadata.managedFields`, and without letting one object
//! that does not decode stall the watch it came in.
//!
//! The API server sends every object with its field ownership records, often larger than the
//! rest of the object, and each entry's `fieldsV1` decodes into a JSON tree: most of the
//! cost of decoding a list. Nothing in the operator reads them, and an update sent without
//! them keeps the stored ones, so that one field is skipped unread.
//!
//! An object the API server holds but `K` cannot read (stored under an older or looser
//! schema, say) would fail the decoding of the whole list or watch event, and the watcher
//! would retry it forever: every object of the kind would wait on that one. [`Decoded<K>`]
//! takes each object's text and decodes `K` from it; an object that does not decode is read
//! again as a JSON tree, and its metadata and the reason are kept instead, and [`Guard`] keeps it from the
//! controller: a warning log line and a Warning Event `InvalidObject` on the object, once per
//! resourceVersion, while every other object goes on.

use crate::runtime::events::{self, EventPublisher, EventType};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::ObjectMeta;
use kube::runtime::watcher;
use serde::Deserialize;
use serde::de::value::{CowStrDeserializer, MapAccessDeserializer};
use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// The Event reason of an object that does not decode as its kind.
pub const INVALID_OBJECT: &str = "InvalidObject";

/// At most this many bytes of a decode error are kept: it is logged and sent in an Event
/// (whose note the API server caps at 1 KiB).
const ERROR_LIMIT: usize = 512;

/// A watched object: `K` decoded without `metadata.managedFields`, or, when the object does
/// not decode as `K`, what could be read of it.
#[derive(Debug, Clone)]
pub struct Decoded<K>(pub Result<K, Invalid>);

/// An object that does not decode as its kind.
#[derive(Debug, Clone)]
pub struct Invalid {
    /// Its metadata: the whole of it when `metadata_read`, else only the name, namespace, uid
    /// and resourceVersion that could be picked out (the watcher needs the resourceVersion to
    /// go on from it).
    pub metadata: ObjectMeta,
    /// Whether `metadata` decoded as object metadata: only then is it an object an Event can
    /// be about.
    pub metadata_read: bool,
    /// Why it does not decode, with where in the object (`spec.gpuCount: invalid type: ...`),
    /// at most `ERROR_LIMIT` bytes.
    pub error: String,
}

impl<K: DeserializeOwned> Decoded<K> {
    /// The object in `text` as `K` (without managedFields), or what could be read of it; an
    /// error when it is not an object with metadata at all.
    fn from_text(text: &str) -> Result<Self, serde_json::Error> {
        let mut input = serde_json::Deserializer::from_str(text);
        if let Ok(object) = input.deserialize_map(ObjectVisitor::<K>(PhantomData)) {
            return Ok(Decoded(Ok(object)));
        }
        // The rare path: read again as a tree, to find where it fails and its metadata.
        let mut input = serde_json::Deserializer::from_str(text);
        let value = input.deserialize_map(ObjectVisitor::<serde_json::Value>(PhantomData))?;
        Ok(Decoded::from_value(value))
    }

    /// `value` (without managedFields) as `K`, or what could be read of it.
    fn from_value(value: serde_json::Value) -> Self {
        match K::deserialize(&value) {
            Ok(object) => Decoded(Ok(object)),
            Err(error) => {
                let error = match serde_path_to_error::deserialize::<_, K>(&value) {
                    Err(located) => located.to_string(),
                    Ok(_) => error.to_string(),
                };
                Decoded(Err(Invalid::new(value.get("metadata"), error)))
            }
        }
    }
}

impl Invalid {
    fn new(metadata: Option<&serde_json::Value>, error: String) -> Invalid {
        let error = capped(error);
        let Some(metadata) = metadata else {
            return Invalid {
                metadata: ObjectMeta::default(),
                metadata_read: false,
                error,
            };
        };
        match ObjectMeta::deserialize(metadata) {
            Ok(metadata) => Invalid {
                metadata,
                metadata_read: true,
                error,
            },
            Err(_) => {
                let text = |field: &str| {
                    metadata
                        .get(field)
                        .and_then(|v| v.as_str())
                        .map(str::to_string)
                };
                Invalid {
                    metadata: ObjectMeta {
                        name: text("name"),
                        namespace: text("namespace"),
                        uid: text("uid"),
                        resource_version: text("resourceVersion"),
                        ..ObjectMeta::default()
                    },
                    metadata_read: false,
                    error,
                }
            }
        }
    }
}

/// `text` cut to at most `ERROR_LIMIT` bytes, on a character boundary.
fn capped(mut text: String) -> String {
    if text.len() > ERROR_LIMIT {
        let mut end = ERROR_LIMIT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

impl<K: Resource> Resource for Decoded<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn metadata_api() -> bool {
        K::metadata_api()
    }

    fn meta(&self) -> &ObjectMeta {
        match &self.0 {
            Ok(object) => object.meta(),
            Err(invalid) => &invalid.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(object) => object.meta_mut(),
            Err(invalid) => &mut invalid.metadata,
        }
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // The object's text is taken whole (a copy of its bytes, no tree) before `K` decodes
        // it: a decoding error part-way would leave the input at an unknown depth, from which
        // the rest of a list could not be read. The API server's answers are read by
        // serde_json, which hands out an object's text as it is.
        let text = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
        Decoded::from_text(text.get()).map_err(serde::de::Error::custom)
    }
}

/// Passes on a watch's events of the objects that decode; reports each object that does not,
/// once per resourceVersion, and keeps it from the controller.
pub struct Guard<K> {
    events: Arc<EventPublisher>,
    reported: Reported,
    kind: PhantomData<fn() -> K>,
}

/// The resourceVersion last reported, by namespace/name, of each object that does not decode;
/// an entry goes when its object decodes again or is deleted.
#[derive(Default)]
struct Reported(HashMap<String, String>);

impl Reported {
    /// Whether `invalid` has not been reported at its resourceVersion yet (a relist or a
    /// restarted watch sends it again unchanged).
    fn first(&mut self, invalid: &Invalid) -> bool {
        let version = invalid
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        self.0.insert(key(&invalid.metadata), version.clone()) != Some(version)
    }

    /// The object of `metadata` decodes again, or is gone.
    fn forget(&mut self, metadata: &ObjectMeta) {
        if !self.0.is_empty() {
            self.0.remove(&key(metadata));
        }
    }
}

impl<K: Resource<DynamicType = ()>> Guard<K> {
    pub fn new(events: Arc<EventPublisher>) -> Self {
        Guard {
            events,
            reported: Reported::default(),
            kind: PhantomData,
        }
    }

    /// The event of `K` this event carries, if its object decoded.
    pub fn pass(&mut self, event: watcher::Event<Decoded<K>>) -> Option<watcher::Event<K>> {
        match event {
            watcher::Event::Apply(object) => self.object(object).map(watcher::Event::Apply),
            watcher::Event::InitApply(object) => self.object(object).map(watcher::Event::InitApply),
            watcher::Event::Delete(object) => {
                self.reported.forget(object.meta());
                object.0.ok().map(watcher::Event::Delete)
            }
            watcher::Event::Init => Some(watcher::Event::Init),
            watcher::Event::InitDone => Some(watcher::Event::InitDone),
        }
    }

    fn object(&mut self, object: Decoded<K>) -> Option<K> {
        match object.0 {
            Ok(object) => {
                self.reported.forget(object.meta());
                Some(object)
            }
            Err(invalid) => {
                if self.reported.first(&invalid) {
                    self.report(invalid);
                }
                None
            }
        }
    }

    fn report(&self, invalid: Invalid) {
        let kind = K::kind(&()).to_string();
        let Invalid {
            metadata,
            metadata_read,
            error,
        } = invalid;
        let namespace = metadata.namespace.clone().unwrap_or_default();
        let name = metadata.name.clone().unwrap_or_default();
        tracing::warn!(
            kind = %kind,
            namespace = %namespace,
            name = %name,
            %error,
            "object does not decode as its kind; it is not reconciled until it changes"
        );
        if !metadata_read {
            // Without readable metadata there is no object to attach an Event to.
            return;
        }
        let regarding = ObjectReference {
            api_version: Some(K::api_version(&()).to_string()),
            kind: Some(kind.clone()),
            name: metadata.name,
            namespace: metadata.namespace,
            uid: metadata.uid,
            resource_version: metadata.resource_version,
            ..ObjectReference::default()
        };
        let note = format!(
            "this {kind} cannot be read as the operator's {kind} type and is not reconciled until it changes: {error}"
        );
        let event = events::event(EventType::Warning, INVALID_OBJECT, &note, "Decode");
        let events = self.events.clone();
        // Sent on its own task: the watch goes on meanwhile.
        tokio::spawn(async move {
            if let Err(error) = events.publish(&event, &regarding).await {
                tracing::debug!(%error, "event not published");
            }
        });
    }
}

/// What identifies an object across its versions in the `reported` map.
fn key(metadata: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        metadata.namespace.as_deref().unwrap_or_default(),
        metadata.name.as_deref().unwrap_or_default()
    )
}

/// The object's own map, handed to `K` with its `metadata` value wrapped.
struct ObjectVisitor<K>(PhantomData<K>);

impl<'de, K: Deserialize<'de>> Visitor<'de> for ObjectVisitor<K> {
    type Value = K;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<K, A::Error> {
        K::deserialize(MapAccessDeserializer::new(Entries {
            inner: map,
            in_metadata: false,
            at_metadata: false,
        }))
    }
}

/// The entries of a map, as its key names them. At the object's level, the `metadata` value
/// is decoded through [`MetadataSeed`]; within metadata, `managedFields` is skipped.
struct Entries<A> {
    inner: A,
    /// These are metadata's entries (else the object's).
    in_metadata: bool,
    /// The entry whose value comes next is the object's `metadata`.
    at_metadata: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Entries<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        loop {
            let Some(Key(key)) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            if self.in_metadata && key == "managedFields" {
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            self.at_metadata = !self.in_metadata && key == "metadata";
            return seed.deserialize(CowStrDeserializer::new(key)).map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.at_metadata) {
            self.inner.next_value_seed(MetadataSeed(seed))
        } else {
            self.inner.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A map key, borrowed from the input where it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(key)))
    }

    fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key.to_string())))
    }

    fn visit_string<E>(self, key: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key)))
    }
}

/// Decodes the `metadata` value as `S` does, from its entries but `managedFields`.
struct MetadataSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("object metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<S::Value, A::Error> {
        self.0.deserialize(MapAccessDeserializer::new(Entries {
            inner: map,
            in_metadata: true,
            at_metadata: false,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_api::GpuInstance;
    use kube::api::PartialObjectMeta;
    use kube::core::ObjectList;
    use serde_json::json;

    fn instance_json() -> serde_json::Value {
        json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": "GpuInstance",
            "metadata": {
                "name": "a",
                "namespace": "team",
                "resourceVersion": "7",
                "labels": {"managedFields": "a label, kept"},
                "managedFields": [{
                    "manager": "kubectl",
                    "operation": "Apply",
                    "apiVersion": "gpucloud.io/v1alpha1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:gpuType": {}}}
                }],
                "finalizers": ["gpucloud.io/finalizer"]
            },
            "spec": {
                "region": "us-east-1",
                "gpuType": "H100-80G",
                "gpuCount": 1,
                "osImage": "ubuntu-22.04-cuda-12",
                "sshKeyRefs": [{"name": "k"}]
            },
            "status": {"state": "running"}
        })
    }

    fn decoded<K: DeserializeOwned>(text: &str) -> K {
        let decoded: Decoded<K> = serde_json::from_str(text).unwrap();
        decoded.0.unwrap()
    }

    #[test]
    fn decodes_as_the_kind_does_without_managed_fields() {
        let text = instance_json().to_string();
        let lean: GpuInstance = decoded(&text);
        let mut full: GpuInstance = serde_json::from_str(&text).unwrap();
        assert_eq!(full.meta().managed_fields.as_ref().map(Vec::len), Some(1));
        assert_eq!(lean.meta().managed_fields, None);
        full.meta_mut().managed_fields = None;
        assert_eq!(
            serde_json::to_value(&lean).unwrap(),
            serde_json::to_value(&full).unwrap()
        );
        assert_eq!(
            lean.meta()
                .labels
                .as_ref()
                .and_then(|l| l.get("managedFields")),
            Some(&"a label, kept".to_string())
        );
    }

    #[test]
    fn lists_and_metadata_only_objects_decode_too() {
        let list = json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": "GpuInstanceList",
            "metadata": {"resourceVersion": "9"},
            "items": [instance_json(), instance_json()]
        });
        let decoded_list: ObjectList<Decoded<GpuInstance>> =
            serde_json::from_str(&list.to_string()).unwrap();
        assert_eq!(decoded_list.items.len(), 2);
        assert!(decoded_list.items.iter().all(|o| {
            o.0.as_ref()
                .is_ok_and(|o| o.meta().managed_fields.is_none())
        }));

        let partial: PartialObjectMeta<k8s_openapi::api::core::v1::Secret> =
            decoded(&instance_json().to_string());
        assert_eq!(partial.metadata.name.as_deref(), Some("a"));
        assert_eq!(partial.metadata.managed_fields, None);
    }

    #[test]
    fn one_object_that_does_not_decode_leaves_the_rest_of_its_list() {
        let mut bad = instance_json();
        bad["metadata"]["name"] = json!("bad");
        bad["metadata"]["uid"] = json!("uid-bad");
        bad["metadata"]["resourceVersion"] = json!("8");
        // A looser schema let these in: a count as text, and a field of the wrong shape.
        bad["spec"]["gpuCount"] = json!("two");
        bad["spec"]["sshKeyRefs"] = json!({"name": "k"});
        let mut unreadable = instance_json();
        unreadable["metadata"] = json!({"name": ["x"], "resourceVersion": "10"});
        let list = json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": "GpuInstanceList",
            "metadata": {"resourceVersion": "11"},
            "items": [instance_json(), bad, unreadable, instance_json()]
        });
        let list: ObjectList<Decoded<GpuInstance>> =
            serde_json::from_str(&list.to_string()).unwrap();
        assert_eq!(list.metadata.resource_version.as_deref(), Some("11"));
        assert_eq!(list.items.len(), 4);
        assert!(list.items[0].0.is_ok() && list.items[3].0.is_ok());

        let Err(invalid) = &list.items[1].0 else {
            panic!("a GpuInstance with a text gpuCount decoded");
        };
        assert!(invalid.metadata_read);
        assert_eq!(invalid.metadata.name.as_deref(), Some("bad"));
        assert_eq!(invalid.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(invalid.metadata.uid.as_deref(), Some("uid-bad"));
        assert_eq!(invalid.metadata.resource_version.as_deref(), Some("8"));
        assert_eq!(invalid.metadata.managed_fields, None);
        assert!(
            invalid.error.starts_with("spec.gpuCount: ") && invalid.error.contains("two"),
            "{}",
            invalid.error
        );
        // The watcher goes on from each object's resourceVersion.
        assert_eq!(list.items[1].meta().resource_version.as_deref(), Some("8"));

        let Err(invalid) = &list.items[2].0 else {
            panic!("an object with a list as its name decoded");
        };
        assert!(!invalid.metadata_read);
        assert_eq!(invalid.metadata.name, None);
        assert_eq!(invalid.metadata.resource_version.as_deref(), Some("10"));
    }

    #[test]
    fn an_invalid_object_is_reported_once_per_resource_version() {
        let invalid = |version: &str| Invalid {
            metadata: ObjectMeta {
                name: Some("bad".into()),
                namespace: Some("team".into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            metadata_read: true,
            error: "invalid type".into(),
        };
        let mut reported = Reported::default();
        assert!(reported.first(&invalid("1")));
        assert!(!reported.first(&invalid("1")), "the same version again");
        assert!(reported.first(&invalid("2")), "a new version");
        let meta = invalid("2").metadata;
        reported.forget(&meta);
        assert!(reported.first(&invalid("2")), "readable in between");
        assert_eq!(reported.0.len(), 1);
    }

    #[test]
    fn decode_errors_are_capped_on_a_character_boundary() {
        let long = "é".repeat(ERROR_LIMIT);
        let capped = capped(long);
        assert!(capped.len() <= ERROR_LIMIT + '…'.len_utf8());
        assert!(capped.ends_with('…'));
        assert_eq!(super::capped("short".into()), "short");
    }

    #[test]
    fn bad_input_is_an_error_or_an_invalid_object() {
        // Not an object, metadata that is not a map (the API server stores neither), broken
        // JSON: the list or event it is in is what is broken.
        for text in [
            r#"[]"#,
            r#"{"metadata": 5}"#,
            r#"{"metadata": {"managedFields": [}}"#,
        ] {
            assert!(
                serde_json::from_str::<Decoded<GpuInstance>>(text).is_err(),
                "{text}"
            );
            assert!(serde_json::from_str::<GpuInstance>(text).is_err(), "{text}");
        }
        // An object `K` cannot read.
        for text in [
            r#"{"metadata": {"name": 5}}"#,
            r#"{"metadata": {"name": "a"}, "spec": {"gpuType": 3}}"#,
        ] {
            let decoded: Decoded<GpuInstance> = serde_json::from_str(text).unwrap();
            assert!(decoded.0.is_err(), "{text}");
            assert!(serde_json::from_str::<GpuInstance>(text).is_err(), "{text}");
        }
    }
}
