//! Watching objects without decoding `metadata.managedFields`.
//!
//! The API server sends every object with its field ownership records, often larger than the
//! rest of the object, and each entry's `fieldsV1` decodes into a JSON tree: most of the
//! cost of decoding a list. Nothing in the operator reads them, and an update sent without
//! them keeps the stored ones. [`Lean<K>`] decodes exactly as `K` does, except that this one
//! field is skipped unread.

use kube::Resource;
use kube::runtime::watcher;
use serde::Deserialize;
use serde::de::value::{CowStrDeserializer, MapAccessDeserializer};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// `K`, decoded without `metadata.managedFields`.
#[derive(Debug, Clone)]
pub struct Lean<K>(pub K);

impl<K> Lean<K> {
    /// The watch event of `K` this event of `Lean<K>` carries.
    pub fn event(event: watcher::Event<Lean<K>>) -> watcher::Event<K> {
        match event {
            watcher::Event::Apply(Lean(object)) => watcher::Event::Apply(object),
            watcher::Event::Delete(Lean(object)) => watcher::Event::Delete(object),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitApply(Lean(object)) => watcher::Event::InitApply(object),
            watcher::Event::InitDone => watcher::Event::InitDone,
        }
    }
}

impl<K: Resource> Resource for Lean<K> {
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

    fn meta(&self) -> &kube::api::ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        self.0.meta_mut()
    }
}

impl<'de, K: Deserialize<'de>> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_map(ObjectVisitor(PhantomData))
            .map(Lean)
    }
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

    #[test]
    fn decodes_as_the_kind_does_without_managed_fields() {
        let text = instance_json().to_string();
        let lean: Lean<GpuInstance> = serde_json::from_str(&text).unwrap();
        let mut full: GpuInstance = serde_json::from_str(&text).unwrap();
        assert_eq!(full.meta().managed_fields.as_ref().map(Vec::len), Some(1));
        assert_eq!(lean.0.meta().managed_fields, None);
        full.meta_mut().managed_fields = None;
        assert_eq!(
            serde_json::to_value(&lean.0).unwrap(),
            serde_json::to_value(&full).unwrap()
        );
        assert_eq!(
            lean.0
                .meta()
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
        let decoded: ObjectList<Lean<GpuInstance>> =
            serde_json::from_str(&list.to_string()).unwrap();
        assert_eq!(decoded.items.len(), 2);
        assert!(
            decoded
                .items
                .iter()
                .all(|o| o.0.meta().managed_fields.is_none())
        );

        let partial: Lean<PartialObjectMeta<k8s_openapi::api::core::v1::Secret>> =
            serde_json::from_str(&instance_json().to_string()).unwrap();
        assert_eq!(partial.0.metadata.name.as_deref(), Some("a"));
        assert_eq!(partial.0.metadata.managed_fields, None);
    }

    #[test]
    fn bad_input_is_an_error_as_for_the_kind() {
        for text in [
            r#"{"metadata": 5}"#,
            r#"{"metadata": {"managedFields": [}}"#,
            r#"[]"#,
            r#"{"metadata": {"name": "a"}, "spec": {"gpuType": 3}}"#,
        ] {
            assert!(
                serde_json::from_str::<Lean<GpuInstance>>(text).is_err(),
                "{text}"
            );
            assert!(serde_json::from_str::<GpuInstance>(text).is_err(), "{text}");
        }
    }
}
