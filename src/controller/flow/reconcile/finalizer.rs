//! The operator's finalizer on an object, added with a version precondition (and with a first
//! create's intent, in one write).

use crate::flow::context::Context;
use crate::flow::create::AnnotatedIntent;
use crate::flow::error::Error;
use crate::flow::kind::ManagedKind;
use gpucloud_api::{CREATE_INTENT_ANNOTATION, FINALIZER};
use kube::api::PatchParams;
use kube::{Api, Resource, ResourceExt};

pub(super) fn has_finalizer<K: Resource>(object: &K) -> bool {
    object.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds the finalizer, with the object's resourceVersion as a precondition, and with it the
/// first create's intent when there is one: one write of the main resource.
pub(super) async fn add_finalizer<K: ManagedKind>(
    api: &Api<K>,
    cx: &Context<K>,
    object: &K,
    intent: Option<&AnnotatedIntent>,
) -> Result<K, Error> {
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    let mut metadata = serde_json::Map::new();
    metadata.insert(
        "resourceVersion".into(),
        serde_json::json!(object.resource_version()),
    );
    metadata.insert("finalizers".into(), serde_json::json!(finalizers));
    if let Some(intent) = intent {
        metadata.insert(
            "annotations".into(),
            serde_json::json!({ CREATE_INTENT_ANNOTATION: intent.value() }),
        );
    }
    let patch = serde_json::json!({ "metadata": metadata });
    let patched = api
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    cx.own_writes.note(object, &patched);
    Ok(patched)
}
