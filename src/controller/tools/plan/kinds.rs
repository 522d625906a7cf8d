//! What a plan knows of each kind, derived from the kind registry: how to read a spec as the
//! kind's Rust type reads it (defaults applied), which top-level spec fields are immutable
//! (the kind's `ON_CHANGE` and the shared `MANAGED_ON_CHANGE`, which a test holds to the CRDs'
//! CEL rules), whether the cloud bills it, and what a live object costs by its status.

use super::Error;
use crate::flow::kind::ManagedKind;
use crate::kinds::registry::{KindFn, map_kinds};
use crate::tools::manifests::Document;
use gpucloud_api::{GROUP, MANAGED_ON_CHANGE, OnChange};
use kube::core::ApiResource;
use std::collections::BTreeMap;

/// A managed kind as the plan reads it.
#[derive(Clone)]
pub struct KindInfo {
    pub kind: String,
    pub resource: ApiResource,
    /// Whether the cloud bills its resources (`KindDeclarations::BILLED`).
    pub billed: bool,
    /// The top-level spec fields a change of which the API server refuses.
    pub immutable: Vec<&'static str>,
    /// The object's spec as the kind's type reads it (defaults applied), as JSON; or where and
    /// why it does not decode.
    pub spec_of: fn(&serde_json::Value) -> Result<serde_json::Value, (String, String)>,
    /// What the object costs per hour by its status (`KindDeclarations::hourly_cost`).
    pub cost_of: fn(&serde_json::Value) -> Option<(f64, String)>,
}

impl std::fmt::Debug for KindInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindInfo")
            .field("kind", &self.kind)
            .finish()
    }
}

/// Every managed kind, in the registry's order.
pub fn managed() -> Vec<KindInfo> {
    struct Info;
    impl KindFn<KindInfo> for Info {
        fn call<K: ManagedKind>(&self) -> KindInfo {
            let immutable = K::ON_CHANGE
                .iter()
                .chain(MANAGED_ON_CHANGE)
                .filter(|(_, on_change)| matches!(on_change, OnChange::Immutable))
                .map(|(field, _)| *field)
                .collect();
            KindInfo {
                kind: K::kind(&()).into_owned(),
                resource: ApiResource::erase::<K>(&()),
                billed: K::BILLED,
                immutable,
                spec_of: spec_of::<K>,
                cost_of: |value| {
                    serde_json::from_value::<K>(value.clone())
                        .ok()?
                        .hourly_cost()
                },
            }
        }
    }
    map_kinds(Info)
}

/// The kinds of the group the operator does not manage one cloud resource per object of
/// (policies such as `Budget` and `GpuInstancePool`, the catalog's `GpuOffering`), from the
/// registry's CRDs.
pub fn unmanaged() -> Vec<String> {
    let managed: Vec<String> = managed().into_iter().map(|k| k.kind).collect();
    crate::kinds::registry::crds()
        .into_iter()
        .map(|crd| crd.spec.names.kind)
        .filter(|kind| !managed.contains(kind))
        .collect()
}

fn spec_of<K: ManagedKind>(
    value: &serde_json::Value,
) -> Result<serde_json::Value, (String, String)> {
    let typed: K = serde_path_to_error::deserialize(value)
        .map_err(|error| (error.path().to_string(), error.inner().to_string()))?;
    let json = serde_json::to_value(&typed).map_err(|error| (".".into(), error.to_string()))?;
    Ok(json.get("spec").cloned().unwrap_or_default())
}

/// One object of the input as the plan reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub origin: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub what: Wanted,
}

/// What the plan does with an object of the input.
#[derive(Debug, Clone, PartialEq)]
pub enum Wanted {
    /// An object of a managed kind, with its spec as the kind reads it.
    Managed { spec: serde_json::Value },
    /// Listed, not planned, for this reason.
    Skipped(String),
    /// The API server would refuse it, with `message`; `spec` as the kind reads it, when it
    /// decodes (to show what the refused change would have changed).
    Refused {
        message: String,
        spec: Option<serde_json::Value>,
    },
}

/// The documents as objects to plan ([`identify`], then [`decode`]).
#[cfg(test)]
pub fn read(
    documents: Vec<Document>,
    kinds: &[KindInfo],
    default_namespace: &str,
) -> Result<Vec<Desired>, Error> {
    identify(documents, kinds, default_namespace)?
        .into_iter()
        .map(|(desired, manifest)| decode(desired, manifest.as_ref(), kinds))
        .collect()
}

/// The documents as objects of the input, each of a managed kind with its manifest (in the
/// namespace it goes to) to validate and decode; each of another group or of a kind the
/// operator keeps no cloud resource for skipped with why. An unknown kind or version of the
/// group, or an object without a name, is an error naming the document and the field.
pub fn identify(
    documents: Vec<Document>,
    kinds: &[KindInfo],
    default_namespace: &str,
) -> Result<Vec<(Desired, Option<serde_json::Value>)>, Error> {
    let unmanaged = unmanaged();
    let mut out = Vec::new();
    for Document { origin, mut value } in documents {
        let text = |pointer: &str| value.pointer(pointer).and_then(|v| v.as_str());
        let api_version = text("/apiVersion").unwrap_or_default().to_string();
        let kind = text("/kind").unwrap_or_default().to_string();
        let name = text("/metadata/name").unwrap_or_default().to_string();
        let namespace = text("/metadata/namespace")
            .unwrap_or(default_namespace)
            .to_string();
        let labels = value
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        let field_error = |field: &str, message: String| Error::Decode {
            origin: origin.clone(),
            field: field.to_string(),
            message,
        };
        if api_version.is_empty() || kind.is_empty() {
            let missing = if api_version.is_empty() {
                "apiVersion"
            } else {
                "kind"
            };
            return Err(field_error(missing, "missing".into()));
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let mut desired = Desired {
            origin: origin.clone(),
            kind: kind.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
            labels,
            what: Wanted::Managed {
                spec: serde_json::Value::Null,
            },
        };
        if group != GROUP {
            desired.what = Wanted::Skipped(format!("not a {GROUP} kind"));
            out.push((desired, None));
            continue;
        }
        if unmanaged.contains(&kind) {
            desired.what = Wanted::Skipped(format!(
                "{kind} is not planned: it owns no cloud resource of its own"
            ));
            out.push((desired, None));
            continue;
        }
        let Some(info) = kinds.iter().find(|k| k.kind == kind) else {
            let mut known: Vec<&str> = kinds.iter().map(|k| k.kind.as_str()).collect();
            known.extend(unmanaged.iter().map(String::as_str));
            return Err(field_error(
                "kind",
                format!(
                    "unknown {GROUP} kind {kind:?} (known: {})",
                    known.join(", ")
                ),
            ));
        };
        if version != info.resource.version {
            return Err(field_error(
                "apiVersion",
                format!(
                    "{kind} is served as {}, not {api_version}",
                    info.resource.api_version
                ),
            ));
        }
        if name.is_empty() {
            return Err(field_error("metadata.name", "missing".into()));
        }
        // Decoded in the namespace it goes to, so that nothing but the spec tells apart.
        value["metadata"]["namespace"] = namespace.clone().into();
        out.push((desired, Some(value)));
    }
    Ok(out)
}

/// The object's spec as its kind reads it (a manifest of a managed kind, not refused); a spec
/// that does not decode is an error naming the document and the field.
pub fn decode(
    mut desired: Desired,
    manifest: Option<&serde_json::Value>,
    kinds: &[KindInfo],
) -> Result<Desired, Error> {
    let (Some(manifest), Wanted::Managed { .. }) = (manifest, &desired.what) else {
        return Ok(desired);
    };
    let Some(info) = kinds.iter().find(|k| k.kind == desired.kind) else {
        return Ok(desired);
    };
    let spec = (info.spec_of)(manifest).map_err(|(field, message)| Error::Decode {
        origin: desired.origin.clone(),
        field,
        message,
    })?;
    desired.what = Wanted::Managed { spec };
    Ok(desired)
}
