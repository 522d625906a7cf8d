//! The set of resources the server serves: the built-in kinds plus one entry per served version of
//! every established CustomResourceDefinition. Discovery, OpenAPI and the verb handlers all read it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

pub use crate::handlers::semantics::Schema;

/// One served resource at one group/version.
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub namespaced: bool,
    pub verbs: Vec<&'static str>,
    pub has_status: bool,
    /// The CRD version's `subresources.scale`; `None` for built-in kinds.
    pub scale: Option<ScalePaths>,
    pub printer_columns: Vec<PrinterColumn>,
    /// The compiled `openAPIV3Schema` of a CRD version; `None` for built-in kinds.
    pub schema: Option<Arc<Schema>>,
    pub storage_version: bool,
    pub served: bool,
}

/// The JSON paths of a CRD version's scale subresource (`.spec.replicas` style).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: Option<String>,
    pub description: Option<String>,
    pub priority: i32,
    pub json_path: String,
}

/// The verbs a fully served resource supports, as discovery lists them.
pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

// === impl ResourceInfo ===

impl ResourceInfo {
    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether this is a custom resource (served from a CRD).
    pub fn is_custom(&self) -> bool {
        self.schema.is_some()
    }

    /// The storage key of the resource, shared by all its versions (and by both views of
    /// Events, which the real server also stores once).
    pub fn storage_key(&self) -> ResourceKey {
        if crate::builtin::is_events_v1(self) {
            return ResourceKey {
                group: String::new(),
                plural: "events".into(),
            };
        }
        ResourceKey {
            group: self.group.clone(),
            plural: self.plural.clone(),
        }
    }
}

impl ResourceInfo {
    /// The key kube-apiserver's etcd store gives an object of this resource, as its storage
    /// errors quote it: `/registry/` and the resource's prefix (custom resources and the
    /// apiextensions group keep their group, built-in groups do not, Services live under
    /// `services/specs`: kube-apiserver's `SpecialDefaultResourcePrefixes`), then the
    /// namespace when there is one, then the name.
    pub fn etcd_key(&self, namespace: &str, name: &str) -> String {
        let storage = self.storage_key();
        let prefix = if self.is_custom() || storage.group == "apiextensions.k8s.io" {
            format!("{}/{}", storage.group, storage.plural)
        } else if storage.group.is_empty() && storage.plural == "services" {
            "services/specs".to_owned()
        } else {
            storage.plural
        };
        if namespace.is_empty() {
            format!("/registry/{prefix}/{name}")
        } else {
            format!("/registry/{prefix}/{namespace}/{name}")
        }
    }
}

/// Identifies one resource in storage, independent of version.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceKey {
    pub group: String,
    pub plural: String,
}

/// (group, version, plural) to the served resource.
type ResourceTable = BTreeMap<(String, String, String), ResourceInfo>;

/// The served resources. Cheap to clone; clones share the same table, updated when CRDs change.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    table: Arc<RwLock<ResourceTable>>,
}

// === impl Registry ===

impl Registry {
    /// A registry holding the built-in kinds.
    pub fn with_builtins() -> Self {
        let registry = Registry::default();
        for info in crate::builtin::builtin_resources() {
            registry.insert(info);
        }
        registry
    }

    /// Every served resource, ordered by group, version and plural.
    pub fn resources(&self) -> Vec<ResourceInfo> {
        match self.table.read() {
            Ok(table) => table.values().cloned().collect(),
            Err(poisoned) => poisoned.into_inner().values().cloned().collect(),
        }
    }

    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<ResourceInfo> {
        let key = (group.to_string(), version.to_string(), plural.to_string());
        match self.table.read() {
            Ok(table) => table.get(&key).cloned(),
            Err(poisoned) => poisoned.into_inner().get(&key).cloned(),
        }
    }

    /// The storage version entry of a resource (used for garbage collection and CRD cleanup,
    /// which work across versions).
    pub fn storage_entry(&self, key: &ResourceKey) -> Option<ResourceInfo> {
        let resources = self.resources();
        let mut fallback = None;
        for info in resources {
            if info.group == key.group && info.plural == key.plural {
                if info.storage_version {
                    return Some(info);
                }
                fallback.get_or_insert(info);
            }
        }
        fallback
    }

    pub fn insert(&self, info: ResourceInfo) {
        let key = (
            info.group.clone(),
            info.version.clone(),
            info.plural.clone(),
        );
        match self.table.write() {
            Ok(mut table) => {
                table.insert(key, info);
            }
            Err(poisoned) => {
                poisoned.into_inner().insert(key, info);
            }
        }
    }

    /// Replaces every version of `group`/`plural` with `infos` in one step, so concurrent
    /// requests never see the resource missing while a CRD is updated.
    pub fn replace_resource(&self, group: &str, plural: &str, infos: Vec<ResourceInfo>) {
        let replace = |table: &mut ResourceTable| {
            table.retain(|(g, _, p), _| !(g == group && p == plural));
            for info in infos {
                let key = (
                    info.group.clone(),
                    info.version.clone(),
                    info.plural.clone(),
                );
                table.insert(key, info);
            }
        };
        match self.table.write() {
            Ok(mut table) => replace(&mut table),
            Err(poisoned) => replace(&mut poisoned.into_inner()),
        }
    }

    /// Removes every version of `group`/`plural`.
    pub fn remove_resource(&self, group: &str, plural: &str) {
        let retain = |table: &mut ResourceTable| {
            table.retain(|(g, _, p), _| !(g == group && p == plural));
        };
        match self.table.write() {
            Ok(mut table) => retain(&mut table),
            Err(poisoned) => retain(&mut poisoned.into_inner()),
        }
    }

    /// Groups with their versions, in the order discovery lists them.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for info in self.resources() {
            let versions = groups.entry(info.group.clone()).or_default();
            if !versions.contains(&info.version) {
                versions.push(info.version.clone());
            }
        }
        groups.into_iter().collect()
    }
}
