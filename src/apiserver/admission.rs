//! Validating admission: the ValidatingAdmissionPolicies and bindings in the store, run on
//! every write after the object's own validation, as kube-apiserver's ValidatingAdmissionPolicy
//! plugin runs. Creates, updates, patches and applies (of the object or a subresource), deletes
//! and each object of a deletecollection are admitted, and so are the deletes of the garbage
//! collector and the namespace controller (under their own service account names), which is how
//! a policy can keep a namespace's content from going with it. The CRD cleanup deletes a
//! definition's objects in storage without admission, as apiextensions-apiserver does.
//!
//! Policies and bindings are checked and defaulted when written (see [`prepare`]) and compiled
//! once per resourceVersion; evaluation is [`gpucloud_apiserver_semantics::admission`]. A
//! policy's params (`paramKind`, a binding's `paramRef`) are read from the store when a request
//! is admitted, so a param created after its binding, or changed, counts from the next
//! request; the param kind is resolved among the served resources (built-in or from a CRD).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use gpucloud_apiserver_semantics::admission::{
    self as policy, Binding, ParamKind, ParamScope, ParamSource, Policy,
};
use gpucloud_apiserver_semantics::schema::FieldError;

use crate::registry::{ResourceInfo, ResourceKey};
use crate::server::AppState;
use crate::status::ApiError;
use crate::store::StoredObject;

pub use gpucloud_apiserver_semantics::admission::Operation;

/// The API group of the admission policy kinds.
pub const GROUP: &str = "admissionregistration.k8s.io";
const POLICIES: &str = "validatingadmissionpolicies";
const BINDINGS: &str = "validatingadmissionpolicybindings";

/// The identity the namespace controller deletes a terminating namespace's content as.
pub const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";
/// The identity the garbage collector deletes dependents as.
pub const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";

/// Whether `info` is ValidatingAdmissionPolicy.
pub fn is_policy(info: &ResourceInfo) -> bool {
    info.group == GROUP && info.plural == POLICIES
}

/// Whether `info` is ValidatingAdmissionPolicyBinding.
pub fn is_binding(info: &ResourceInfo) -> bool {
    info.group == GROUP && info.plural == BINDINGS
}

/// Defaults and checks a policy or binding being written, as the apiserver's strategies do;
/// the errors are the 422's causes. Other kinds are left alone.
pub fn prepare(info: &ResourceInfo, object: &mut Value) -> Vec<FieldError> {
    if is_policy(info) {
        policy::default_policy(object);
        Policy::compile(object).err().unwrap_or_default()
    } else if is_binding(info) {
        policy::default_binding(object);
        Binding::compile(object).err().unwrap_or_default()
    } else {
        Vec::new()
    }
}

/// Who makes a request, and where the `Warning` headers of `Warn` bindings go.
pub struct Requester<'a> {
    user: &'a str,
    warn: &'a dyn Fn(String),
    /// False for a delete made in storage, which admission never sees.
    admitted: bool,
}

fn discard(_: String) {}

impl<'a> Requester<'a> {
    /// A client's request; `warn` adds a `Warning` header to its response.
    pub fn client(user: &'a str, warn: &'a dyn Fn(String)) -> Requester<'a> {
        Requester {
            user,
            warn,
            admitted: true,
        }
    }

    /// A built-in controller ([`NAMESPACE_CONTROLLER`], [`GARBAGE_COLLECTOR`]), whose
    /// warnings nobody reads.
    pub fn controller(user: &'a str) -> Requester<'a> {
        Requester {
            user,
            warn: &discard,
            admitted: true,
        }
    }

    /// A delete in storage, as apiextensions-apiserver's CRD cleanup makes it: not admitted.
    pub fn storage() -> Requester<'static> {
        Requester {
            user: "",
            warn: &discard,
            admitted: false,
        }
    }
}

/// One write, as the handlers describe it to admission.
pub struct Attributes<'a> {
    pub info: &'a ResourceInfo,
    /// Empty for the main resource.
    pub subresource: &'a str,
    pub operation: Operation,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The object to be stored, in its stored form; `None` on delete.
    pub object: Option<&'a Value>,
    /// The stored object; `None` on create.
    pub old_object: Option<&'a Value>,
    pub dry_run: bool,
}

/// Compiled policies and bindings by uid, with the resourceVersion they were compiled at.
#[derive(Default)]
pub struct Compiled {
    policies: Mutex<HashMap<String, (u64, Arc<Policy>)>>,
    bindings: Mutex<HashMap<String, (u64, Arc<Binding>)>>,
}

/// The compiled form of each stored object, compiling what is new or changed and forgetting
/// what is gone. Objects that no longer compile (they all did when written) are skipped.
fn compiled<T>(
    cache: &Mutex<HashMap<String, (u64, Arc<T>)>>,
    stored: &[StoredObject],
    compile: fn(&Value) -> Result<T, Vec<FieldError>>,
) -> Vec<Arc<T>> {
    let mut cache = match cache.lock() {
        Ok(cache) => cache,
        Err(poisoned) => poisoned.into_inner(),
    };
    cache.retain(|uid, _| stored.iter().any(|object| object.index.uid == *uid));
    let mut result = Vec::new();
    for object in stored {
        let version = object.index.resource_version;
        if let Some((cached_version, compiled)) = cache.get(&object.index.uid)
            && *cached_version == version
        {
            result.push(compiled.clone());
            continue;
        }
        let Ok(value) = object.to_value() else {
            continue;
        };
        match compile(&value) {
            Ok(compiled) => {
                let compiled = Arc::new(compiled);
                cache.insert(object.index.uid.clone(), (version, compiled.clone()));
                result.push(compiled);
            }
            Err(errors) => {
                tracing::warn!(name = %object.index.name, ?errors, "stored admission object does not compile; skipped");
            }
        }
    }
    result
}

fn stored(state: &AppState, plural: &str) -> Vec<StoredObject> {
    let key = ResourceKey {
        group: GROUP.to_string(),
        plural: plural.to_string(),
    };
    state.store.list(&key, None, None, None, &|_| true).items
}

/// Params read from the store, as the apiserver's param informers hold them.
struct StoredParams<'a> {
    state: &'a AppState,
}

impl StoredParams<'_> {
    /// The served resource of the kind (the apiserver's REST mapping).
    fn resource(&self, kind: &ParamKind) -> Option<ResourceInfo> {
        self.state.registry.resources().into_iter().find(|info| {
            info.served
                && info.group == kind.group
                && info.version == kind.version
                && info.kind == kind.kind
        })
    }

    /// A stored object as a param: at the kind's version, with `apiVersion` and `kind` set
    /// (the dispatcher wraps typed params in their kind's TypeMeta).
    fn param(info: &ResourceInfo, kind: &ParamKind, stored: &StoredObject) -> Option<Value> {
        let mut object = crate::handlers::at_version(info, stored.to_value().ok()?);
        let map = object.as_object_mut()?;
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(kind.api_version()));
        map.entry("kind")
            .or_insert_with(|| Value::String(kind.kind.clone()));
        Some(object)
    }
}

impl ParamSource for StoredParams<'_> {
    fn scope(&self, kind: &ParamKind) -> Option<ParamScope> {
        self.resource(kind).map(|info| {
            if info.namespaced {
                ParamScope::Namespaced
            } else {
                ParamScope::Cluster
            }
        })
    }

    fn get(&self, kind: &ParamKind, namespace: &str, name: &str) -> Option<Value> {
        let info = self.resource(kind)?;
        let stored = self.state.store.get(&info.storage_key(), namespace, name)?;
        Self::param(&info, kind, &stored)
    }

    fn list(
        &self,
        kind: &ParamKind,
        namespace: &str,
        select: &dyn Fn(&BTreeMap<String, String>) -> bool,
    ) -> Vec<Value> {
        let Some(info) = self.resource(kind) else {
            return Vec::new();
        };
        let namespace = (!namespace.is_empty()).then_some(namespace);
        self.state
            .store
            .list(&info.storage_key(), namespace, None, None, &|index| {
                select(&index.labels)
            })
            .items
            .iter()
            .filter_map(|stored| Self::param(&info, kind, stored))
            .collect()
    }
}

/// The groups a user is in, as the authenticators put them.
fn groups(user: &str) -> Vec<String> {
    if user == crate::auth::ANONYMOUS_USER {
        return vec!["system:unauthenticated".into()];
    }
    let mut groups = Vec::new();
    if let Some(rest) = user.strip_prefix("system:serviceaccount:")
        && let Some((namespace, _)) = rest.split_once(':')
    {
        groups.push("system:serviceaccounts".to_string());
        groups.push(format!("system:serviceaccounts:{namespace}"));
    }
    groups.push("system:authenticated".to_string());
    groups
}

/// Runs the bound policies matching the write: `Ok` (after passing the warnings of `Warn`
/// bindings to the requester), or the denial as the apiserver reports it.
pub fn validate(
    state: &AppState,
    requester: &Requester<'_>,
    attributes: &Attributes<'_>,
) -> Result<(), ApiError> {
    if !requester.admitted {
        return Ok(());
    }
    let binding_objects = stored(state, BINDINGS);
    if binding_objects.is_empty() {
        return Ok(());
    }
    let bindings = compiled(
        &state.admission.bindings,
        &binding_objects,
        Binding::compile,
    );
    let policies = compiled(
        &state.admission.policies,
        &stored(state, POLICIES),
        Policy::compile,
    );
    let mut bound: Vec<(&Policy, Vec<&Binding>)> = policies
        .iter()
        .map(|policy| {
            let bindings = bindings
                .iter()
                .filter(|binding| binding.policy_name() == policy.name())
                .map(Arc::as_ref)
                .collect();
            (policy.as_ref(), bindings)
        })
        .filter(|(_, bindings): &(&Policy, Vec<&Binding>)| !bindings.is_empty())
        .collect();
    if bound.is_empty() {
        return Ok(());
    }
    bound.sort_by(|a, b| a.0.name().cmp(b.0.name()));

    let info = attributes.info;
    // Policies see the objects at the request's version, as its client does.
    let at_version = |object: &Value| crate::handlers::at_version(info, object.clone());
    let object = attributes.object.map(at_version);
    let old_object = attributes.old_object.map(at_version);
    let other_versions: Vec<String> = state
        .registry
        .resources()
        .into_iter()
        .filter(|other| other.group == info.group && other.plural == info.plural && other.served)
        .map(|other| other.version)
        .filter(|version| *version != info.version)
        .collect();
    let namespace_object = if crate::builtin::is_namespace(info) {
        object.clone().or_else(|| old_object.clone())
    } else if attributes.namespace.is_empty() {
        None
    } else {
        let namespaces = ResourceKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        state
            .store
            .get(&namespaces, "", attributes.namespace)
            .and_then(|stored| stored.to_value().ok())
    };
    let groups = groups(requester.user);
    let request = policy::Request {
        operation: attributes.operation,
        group: &info.group,
        version: &info.version,
        kind: &info.kind,
        resource: &info.plural,
        subresource: attributes.subresource,
        other_versions: &other_versions,
        namespace: attributes.namespace,
        name: attributes.name,
        object: object.as_ref(),
        old_object: old_object.as_ref(),
        namespace_object: namespace_object.as_ref(),
        username: requester.user,
        groups: &groups,
        dry_run: attributes.dry_run,
        options: None,
    };
    let verdict = policy::evaluate(
        &bound,
        &request,
        &crate::handlers::write::new_uid(),
        &StoredParams { state },
    );
    for warning in verdict.warnings {
        (requester.warn)(warning);
    }
    match verdict.denial {
        None => Ok(()),
        Some(denial) => Err(ApiError::admission_denied(
            &info.group,
            &info.plural,
            attributes.name,
            denial.cause(),
            denial.reason.code(),
            denial.reason.as_str(),
        )),
    }
}
