//! What the API server would refuse of the manifests, found as it finds it, in process: the
//! schema and CEL rules of the kinds' CustomResourceDefinitions (the cluster's, read with get;
//! the operator's own when they cannot be read), unknown fields as kubectl's strict field
//! validation refuses them, and the cluster's ValidatingAdmissionPolicies with their bindings
//! and params (read with list), with the API server's own code
//! (`gpucloud_apiserver_semantics`). The messages are the server's, as kubectl prints them.
//!
//! Reading is [`read`]; judging ([`Validator::refusal`], [`Validator::delete_refusal`]) is pure.
//! Not checked: the metadata rules every kind shares (name syntax, label syntax), and the
//! `authorizer` variable of admission expressions, which the API server's code does not
//! support either.

use super::kinds::KindInfo;
use gpucloud_apiserver_semantics::admission::{
    self, Binding, Operation, ParamKind, ParamScope, ParamSource, Policy, Request,
};
use gpucloud_apiserver_semantics::schema::{Schema, kubectl_invalid_message};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The kinds' schemas and the cluster's admission policies, as the plan judges manifests.
#[derive(Default)]
pub struct Validator {
    /// By kind.
    schemas: BTreeMap<String, Schema>,
    /// The policies, each with its bindings (sorted by name, as the server runs them).
    policies: Vec<(Policy, Vec<Binding>)>,
    params: Params,
    /// The Namespaces the manifests name, by name.
    namespaces: BTreeMap<String, Value>,
    /// What was used, for the output.
    pub crds: String,
    pub admission: String,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator")
            .field("crds", &self.crds)
            .field("admission", &self.admission)
            .finish()
    }
}

/// The params of the policies, by param kind: its scope and every object of it.
#[derive(Default)]
struct Params(Vec<(ParamKind, ParamScope, Vec<Value>)>);

impl Params {
    fn of(&self, kind: &ParamKind) -> Option<&(ParamKind, ParamScope, Vec<Value>)> {
        self.0.iter().find(|(k, _, _)| k == kind)
    }
}

fn labels(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default()
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl ParamSource for Params {
    fn scope(&self, kind: &ParamKind) -> Option<ParamScope> {
        self.of(kind).map(|(_, scope, _)| *scope)
    }

    fn get(&self, kind: &ParamKind, namespace: &str, name: &str) -> Option<Value> {
        let (_, _, objects) = self.of(kind)?;
        objects
            .iter()
            .find(|o| {
                text(o, "/metadata/namespace") == namespace && text(o, "/metadata/name") == name
            })
            .cloned()
    }

    fn list(
        &self,
        kind: &ParamKind,
        namespace: &str,
        select: &dyn Fn(&BTreeMap<String, String>) -> bool,
    ) -> Vec<Value> {
        let Some((_, _, objects)) = self.of(kind) else {
            return Vec::new();
        };
        objects
            .iter()
            .filter(|o| namespace.is_empty() || text(o, "/metadata/namespace") == namespace)
            .filter(|o| select(&labels(o)))
            .cloned()
            .collect()
    }
}

impl Validator {
    /// A validator of the kinds' schemas alone (no admission policy), from `crds`.
    pub fn from_crds(kinds: &[KindInfo], crds: &[CustomResourceDefinition]) -> Validator {
        let mut validator = Validator::default();
        for info in kinds {
            if let Some(schema) = crds.iter().find_map(|crd| schema_of(info, crd)) {
                validator.schemas.insert(info.kind.clone(), schema);
            }
        }
        validator
    }

    /// The API server's message refusing the create (`live`: none) or update of `manifest`,
    /// an object of `info`'s kind, if it would refuse it.
    pub fn refusal(
        &self,
        info: &KindInfo,
        manifest: &Value,
        live: Option<&Value>,
    ) -> Option<String> {
        let name = text(manifest, "/metadata/name").to_string();
        let mut object = match live {
            None => manifest.clone(),
            Some(live) => applied(live, manifest),
        };
        if let Some(schema) = self.schemas.get(&info.kind) {
            let unknown = schema.prune(&mut object);
            if !unknown.is_empty() {
                let fields: Vec<String> = unknown
                    .iter()
                    .map(|path| format!("unknown field \"{path}\""))
                    .collect();
                return Some(format!(
                    "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                    fields.join(", "),
                    kind = info.kind,
                    version = info.resource.version,
                ));
            }
            schema.apply_defaults(&mut object);
            // The server defaults what it reads: the stored object as it compares.
            let old = live.map(|live| {
                let mut old = live.clone();
                schema.apply_defaults(&mut old);
                old
            });
            let errors = schema.validate(&object, old.as_ref());
            if !errors.is_empty() {
                return Some(kubectl_invalid_message(&info.kind, &name, &errors));
            }
        }
        let operation = if live.is_some() {
            Operation::Update
        } else {
            Operation::Create
        };
        self.admit(info, operation, &name, Some(&object), live)
    }

    /// The API server's message refusing the deletion of `live`, if admission refuses it.
    pub fn delete_refusal(&self, info: &KindInfo, live: &Value) -> Option<String> {
        let name = text(live, "/metadata/name").to_string();
        self.admit(info, Operation::Delete, &name, None, Some(live))
    }

    fn admit(
        &self,
        info: &KindInfo,
        operation: Operation,
        name: &str,
        object: Option<&Value>,
        old_object: Option<&Value>,
    ) -> Option<String> {
        if self.policies.is_empty() {
            return None;
        }
        let namespace = object
            .or(old_object)
            .map(|o| text(o, "/metadata/namespace"))
            .unwrap_or_default();
        let bound: Vec<(&Policy, Vec<&Binding>)> = self
            .policies
            .iter()
            .map(|(policy, bindings)| (policy, bindings.iter().collect()))
            .collect();
        let resource = &info.resource;
        let request = Request {
            operation,
            group: &resource.group,
            version: &resource.version,
            kind: &resource.kind,
            resource: &resource.plural,
            subresource: "",
            other_versions: &[],
            namespace,
            name,
            object,
            old_object,
            namespace_object: self.namespaces.get(namespace),
            username: "",
            groups: &[],
            dry_run: true,
            options: None,
        };
        let verdict = admission::evaluate(&bound, &request, "plan", &self.params);
        let denial = verdict.denial?;
        // `apierrors.NewForbidden`, as the server words an admission denial.
        Some(format!(
            "{}.{} \"{name}\" is forbidden: {}",
            resource.plural,
            resource.group,
            denial.cause()
        ))
    }
}

/// The object an update stores: the live object with the manifest's spec, labels and
/// annotations (`kubectl apply` merges the manifest's fields into what is stored).
fn applied(live: &Value, manifest: &Value) -> Value {
    let mut object = live.clone();
    if let Some(spec) = manifest.get("spec") {
        object["spec"] = spec.clone();
    }
    for field in ["labels", "annotations"] {
        if let Some(Value::Object(wanted)) = manifest.pointer(&format!("/metadata/{field}")) {
            let target = &mut object["metadata"][field];
            if !target.is_object() {
                *target = Value::Object(serde_json::Map::new());
            }
            if let Some(map) = target.as_object_mut() {
                map.extend(wanted.clone());
            }
        }
    }
    object
}

/// The compiled schema `crd` gives `info`'s kind at its version, if it is that kind's CRD.
fn schema_of(info: &KindInfo, crd: &CustomResourceDefinition) -> Option<Schema> {
    if crd.spec.names.kind != info.kind || crd.spec.group != info.resource.group {
        return None;
    }
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == info.resource.version)?;
    let schema = version.schema.as_ref()?.open_api_v3_schema.as_ref()?;
    Schema::compile(&serde_json::to_value(schema).ok()?).ok()
}

/// Reads what the API server validates the manifests' kinds with: the CRDs (the operator's own
/// where the cluster's cannot be read), the admission policies and bindings with their params,
/// and the Namespaces `namespaces`.
pub async fn read(
    client: &kube::Client,
    kinds: &[KindInfo],
    namespaces: &BTreeSet<String>,
) -> Validator {
    let (crds, source) = read_crds(client, kinds).await;
    let mut validator = Validator::from_crds(kinds, &crds);
    validator.crds = source;
    match read_policies(client).await {
        Ok((policies, params, said)) => {
            validator.policies = policies;
            validator.params = params;
            validator.admission = said;
        }
        Err(error) => {
            validator.admission = format!(
                "not evaluated: the ValidatingAdmissionPolicies could not be listed ({})",
                crate::flow::error::KubeMessage(&error)
            );
        }
    }
    let api: Api<Namespace> = Api::all(client.clone());
    for namespace in namespaces {
        if let Ok(Some(object)) = api.get_opt(namespace).await
            && let Ok(value) = serde_json::to_value(object)
        {
            validator.namespaces.insert(namespace.clone(), value);
        }
    }
    validator
}

/// The kinds' CRDs as the cluster has them, or the operator's own, and which were used.
async fn read_crds(
    client: &kube::Client,
    kinds: &[KindInfo],
) -> (Vec<CustomResourceDefinition>, String) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for info in kinds {
        let name = format!("{}.{}", info.resource.plural, info.resource.group);
        match api.get_opt(&name).await {
            Ok(Some(crd)) => found.push(crd),
            Ok(None) => missing.push(name),
            Err(error) => {
                let why = crate::flow::error::KubeMessage(&error).to_string();
                return (
                    crate::kinds::registry::crds(),
                    format!("the operator's own (the cluster's could not be read: {why})"),
                );
            }
        }
    }
    if missing.is_empty() {
        return (found, "the cluster's".into());
    }
    let own = crate::kinds::registry::crds();
    let said = format!(
        "the cluster's, and the operator's own for {} (not installed)",
        missing.join(", ")
    );
    let installed: BTreeSet<String> = found.iter().map(|c| c.spec.names.kind.clone()).collect();
    found.extend(
        own.into_iter()
            .filter(|c| !installed.contains(&c.spec.names.kind)),
    );
    (found, said)
}

/// The bound policies of `policies` and `bindings` (as the API server returns them: defaulted
/// here as it stores them, and compiled; one that does not compile is left out, as the server
/// skips it), with the param kinds they name.
pub fn bound(
    policies: Vec<Value>,
    bindings: Vec<Value>,
) -> (Vec<(Policy, Vec<Binding>)>, Vec<ParamKind>) {
    let bindings: Vec<Binding> = bindings
        .into_iter()
        .filter_map(|mut value| {
            admission::default_binding(&mut value);
            Binding::compile(&value).ok()
        })
        .collect();
    let mut compiled = Vec::new();
    let mut param_kinds = Vec::new();
    for mut value in policies {
        admission::default_policy(&mut value);
        let Ok(policy) = Policy::compile(&value) else {
            continue;
        };
        param_kinds.extend(param_kind(&value));
        compiled.push(policy);
    }
    (pair(compiled, bindings), param_kinds)
}

impl Validator {
    /// This validator with the admission policies of `bound` (params: none).
    pub fn admitting(mut self, bound: Vec<(Policy, Vec<Binding>)>) -> Validator {
        self.policies = bound;
        self
    }
}

type Policies = (Vec<(Policy, Vec<Binding>)>, Params, String);

fn as_values<T: serde::Serialize>(items: Vec<T>) -> Vec<Value> {
    items
        .into_iter()
        .filter_map(|item| serde_json::to_value(item).ok())
        .collect()
}

/// The cluster's bound ValidatingAdmissionPolicies, compiled, with the params they name.
async fn read_policies(client: &kube::Client) -> Result<Policies, kube::Error> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let bindings = as_values(bindings.list(&ListParams::default()).await?.items);
    let policies = as_values(policies.list(&ListParams::default()).await?.items);
    let (paired, param_kinds) = bound(policies, bindings);
    let said = if paired.is_empty() {
        "none bound in the cluster".to_string()
    } else {
        let names: Vec<&str> = paired.iter().map(|(p, _)| p.name()).collect();
        format!("the cluster's: {}", names.join(", "))
    };
    Ok((paired, read_params(client, param_kinds).await, said))
}

/// Each policy with the bindings naming it; policies no binding names are left out.
fn pair(policies: Vec<Policy>, bindings: Vec<Binding>) -> Vec<(Policy, Vec<Binding>)> {
    let mut bindings = bindings;
    let mut out: Vec<(Policy, Vec<Binding>)> = Vec::new();
    for policy in policies {
        let (bound, rest): (Vec<Binding>, Vec<Binding>) = bindings
            .into_iter()
            .partition(|b| b.policy_name() == policy.name());
        bindings = rest;
        if !bound.is_empty() {
            out.push((policy, bound));
        }
    }
    out.sort_by(|a, b| a.0.name().cmp(b.0.name()));
    out
}

/// A policy's `spec.paramKind`.
fn param_kind(policy: &Value) -> Option<ParamKind> {
    let api_version = policy.pointer("/spec/paramKind/apiVersion")?.as_str()?;
    let kind = policy.pointer("/spec/paramKind/kind")?.as_str()?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Some(ParamKind {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
    })
}

/// Every object of each param kind the cluster serves, with the kind's scope.
async fn read_params(client: &kube::Client, kinds: Vec<ParamKind>) -> Params {
    let mut params = Params::default();
    for kind in kinds {
        if params.of(&kind).is_some() {
            continue;
        }
        let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let Ok((resource, capabilities)) = kube::discovery::pinned_kind(client, &gvk).await else {
            continue;
        };
        let scope = match capabilities.scope {
            kube::discovery::Scope::Cluster => ParamScope::Cluster,
            kube::discovery::Scope::Namespaced => ParamScope::Namespaced,
        };
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let Ok(listed) = api.list(&ListParams::default()).await else {
            continue;
        };
        let objects = listed
            .items
            .into_iter()
            .filter_map(|mut object| {
                object.types = Some(kube::core::TypeMeta {
                    api_version: kind.api_version(),
                    kind: kind.kind.clone(),
                });
                serde_json::to_value(object).ok()
            })
            .collect();
        params.0.push((kind, scope, objects));
    }
    params
}
