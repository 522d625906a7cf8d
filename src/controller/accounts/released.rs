//! The record of cloud resources left in the cloud on purpose, and by whom.
//!
//! An object deleted with `deletionPolicy: Orphan` (or `ObserveOnly`), a final snapshot kept
//! without its object, and everything `gpucloud-operator release` lets go are written into the
//! ConfigMap [`RELEASED_CONFIGMAP`] in the operator's namespace (which tenants cannot write):
//! one key per id and per cloud name, each valued with the kind, namespace and name of the
//! object that let it go, and when. Two readers use it: the orphan sweeper, so it never takes
//! such a resource for a leak, and the ownership checks, so a released resource stays its
//! namespace's: no other namespace adopts it, boots from it or names it.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// ConfigMap (in the operator's namespace) recording resources left in the cloud on purpose.
pub const RELEASED_CONFIGMAP: &str = "gpucloud-operator-released";

/// Key of a released cloud id (ConfigMap keys allow `[-._a-zA-Z0-9]`; anything else becomes
/// `_`).
pub fn id_key(id: &str) -> String {
    format!("id.{}", configmap_key(id))
}

/// Key of a released cloud name.
pub fn name_key(name: &str) -> String {
    format!("name.{}", configmap_key(name))
}

fn configmap_key(raw: &str) -> String {
    raw.chars()
        .take(240)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The value of an entry: `<kind> <namespace>/<name> <time>`.
pub fn value(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind} {namespace}/{name} {}", Timestamp::now())
}

/// When an entry was written: its value ends with the time.
pub fn written_at(value: &str) -> Option<Timestamp> {
    value.rsplit(' ').next()?.parse().ok()
}

/// The object that let a resource go, as its entry names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Releaser {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl Releaser {
    fn parse(value: &str) -> Option<Releaser> {
        let mut words = value.split(' ');
        let kind = words.next()?;
        let (namespace, name) = words.next()?.split_once('/')?;
        Some(Releaser {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

/// Adds `keys`, each valued `value`, to the record (made if it does not exist yet).
pub async fn write(
    client: &kube::Client,
    operator_namespace: &str,
    keys: Vec<String>,
    value: &str,
) -> Result<(), kube::Error> {
    let data: BTreeMap<String, String> = keys.into_iter().map(|k| (k, value.to_string())).collect();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), operator_namespace);
    let patch = serde_json::json!({ "data": data });
    let merge = || async {
        api.patch(
            RELEASED_CONFIGMAP,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(drop)
    };
    match merge().await {
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        other => return other,
    }
    let map = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(RELEASED_CONFIGMAP.into()),
            namespace: Some(operator_namespace.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &map).await {
        Ok(_) => Ok(()),
        // Created meanwhile by another cleanup: merge into it.
        Err(kube::Error::Api(status)) if status.code == 409 => merge().await,
        Err(error) => Err(error),
    }
}

/// How long a read of the record answers the checks made on every reconcile (ids read from
/// other objects' statuses). Adoptions and ids a spec names are checked against a fresh read.
pub const SHARED_READ_FOR: Duration = Duration::from_secs(30);

/// The record as the ownership checks read it: from the API server, a read shared for
/// [`SHARED_READ_FOR`] by the checks that run on every reconcile.
pub struct ReleasedRecord {
    source: Option<(kube::Client, String)>,
    last: Mutex<Option<(Instant, BTreeMap<String, String>)>>,
}

impl ReleasedRecord {
    /// The record in `operator_namespace`.
    pub fn new(client: kube::Client, operator_namespace: String) -> Self {
        ReleasedRecord {
            source: Some((client, operator_namespace)),
            last: Mutex::new(None),
        }
    }

    /// No record (tests of the checks without an API server): nothing is released.
    pub fn none() -> Self {
        ReleasedRecord {
            source: None,
            last: Mutex::new(None),
        }
    }

    /// The object that let the resource `id` go, if the record names one: read fresh, or
    /// from a read no older than `max_age`.
    pub async fn releaser(
        &self,
        id: &str,
        max_age: Duration,
    ) -> Result<Option<Releaser>, kube::Error> {
        let Some((client, namespace)) = &self.source else {
            return Ok(None);
        };
        let key = id_key(id);
        if let Some((at, entries)) = &*crate::lock(&self.last)
            && at.elapsed() < max_age
        {
            return Ok(entries.get(&key).and_then(|v| Releaser::parse(v)));
        }
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let entries = api
            .get_opt(RELEASED_CONFIGMAP)
            .await?
            .and_then(|map| map.data)
            .unwrap_or_default();
        let found = entries.get(&key).and_then(|v| Releaser::parse(v));
        *crate::lock(&self.last) = Some((Instant::now(), entries));
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_names_who_let_the_resource_go() {
        let entry = value("Snapshot", "team-a", "train-final");
        assert_eq!(
            Releaser::parse(&entry),
            Some(Releaser {
                kind: "Snapshot".into(),
                namespace: "team-a".into(),
                name: "train-final".into(),
            })
        );
        assert!(written_at(&entry).is_some());
        assert_eq!(Releaser::parse("garbage"), None);
        assert_eq!(id_key("vm 1/x"), "id.vm_1_x");
    }
}
