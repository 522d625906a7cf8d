//! Fields, references and status shared by every managed kind.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Annotation that adopts an existing cloud resource by its id instead of creating one.
pub const EXTERNAL_ID_ANNOTATION: &str = "gpucloud.io/external-id";
/// Annotation that, set to `"true"`, stops reconciling the object.
pub const PAUSED_ANNOTATION: &str = "gpucloud.io/paused";
/// Annotation on a GpuInstance whose every new value triggers one reboot.
pub const RESTARTED_AT_ANNOTATION: &str = "gpucloud.io/restartedAt";
/// Annotation whose every new value asks for a reconcile now (any value; the time it is set,
/// by convention, as Crossplane's `crossplane.io/reconcile-requested-at`): an object waiting on
/// a long recheck or a retry's backoff, such as one stalled on the cloud's refusal, is
/// reconciled within seconds and a refused call tried again. The operator never writes it; any
/// change of an object's annotations wakes its reconcile (`operator::run::intent_hash`).
pub const RECONCILE_REQUESTED_ANNOTATION: &str = "gpucloud.io/reconcile-requested-at";
/// Annotation on a Snapshot that, set to `"true"`, lets its deletion go ahead although images
/// are made from it: the cloud deletes a snapshot's images with it.
pub const DELETE_DEPENDENTS_ANNOTATION: &str = "gpucloud.io/delete-dependents";
/// Finalizer that holds a managed object until its cloud resource is deleted (or orphaned).
pub const FINALIZER: &str = "gpucloud.io/cloud-resource";
/// Annotation the operator writes with its finalizer, in one version-checked patch, just
/// before an object's first create call: `{"startedAt": ..., "account": ...}`. It stands for
/// `status.cloud.pendingCreate` until the status records anything of the create (its cloud
/// name), and means nothing after that.
pub const CREATE_INTENT_ANNOTATION: &str = "gpucloud.io/create-intent";

/// Condition types, following the kstatus convention read by Argo CD and Flux.
pub mod condition_type {
    pub const READY: &str = "Ready";
    pub const RECONCILING: &str = "Reconciling";
    pub const STALLED: &str = "Stalled";
    /// Present (`True`) while the object carries `gpucloud.io/paused: "true"`.
    pub const PAUSED: &str = "Paused";
}

/// What happens to the cloud resource when the Kubernetes object is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the cloud resource, then release the object.
    #[default]
    Delete,
    /// Release the object and leave the cloud resource (and its billing) in place.
    Orphan,
    /// GpuInstance only: take a final snapshot of the machine (starting it first if it is
    /// stopped, since the cloud snapshots running machines only), wait until the snapshot is
    /// available, then delete the machine. See `spec.finalSnapshot`.
    Snapshot,
}

/// Whether the operator may change the cloud resource.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ManagementPolicy {
    /// Create, update and delete the cloud resource to match the spec.
    #[default]
    Manage,
    /// Never change the cloud; only report what it holds. Needs an existing resource,
    /// named by the `gpucloud.io/external-id` annotation.
    ObserveOnly,
}

/// Settings every managed kind carries at the top of its spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedFields {
    /// What happens to the cloud resource when this object is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// Whether the operator may change the cloud resource or only observe it.
    #[serde(default)]
    pub management_policy: ManagementPolicy,
    /// A Secret in this object's namespace holding the cloud API key, overriding the
    /// operator-wide default. Secrets of other namespaces can never be used, and the operator
    /// reads only a Secret labelled `gpucloud.io/credentials=true`. Immutable: set or left out
    /// at creation; rotate the key by updating the Secret itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretKeyRef>,
}

/// What a change of a spec field after creation does. Every top-level spec field of every kind
/// declares one (each kind's `ON_CHANGE`, plus [`MANAGED_ON_CHANGE`]); the `on change` column
/// of docs/crd-reference.md is generated from these, a test checks each `Immutable` field
/// against the CRD's CEL rules, and a controller test changes each `Applied` and `Rechecked`
/// field and reads the cloud's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnChange {
    /// Made so in the cloud; the object is `Ready` for the new generation only once it is.
    Applied(&'static str),
    /// Refused at admission by a CEL rule naming the field: delete and recreate the object.
    Immutable,
    /// A limit the cloud resource is checked against again; the resource itself is not
    /// changed.
    Rechecked(&'static str),
    /// Read by the operator alone, when it acts; no cloud call is made for the change.
    Operator(&'static str),
}

impl OnChange {
    /// The text of the reference's `on change` column.
    pub fn describe(self) -> String {
        match self {
            OnChange::Applied(how) => format!("applied: {how}"),
            OnChange::Immutable => "immutable".to_string(),
            OnChange::Rechecked(how) => format!("re-checked: {how}"),
            OnChange::Operator(how) => format!("operator only: {how}"),
        }
    }
}

/// How changes of the fields every kind shares ([`ManagedFields`]) are carried out.
pub const MANAGED_ON_CHANGE: &[(&str, OnChange)] = &[
    (
        "deletionPolicy",
        OnChange::Operator("read when the object is deleted (`Snapshot`: GpuInstance only)"),
    ),
    (
        "managementPolicy",
        OnChange::Operator("`ObserveOnly` stops changes to the cloud from the next reconcile on"),
    ),
    ("credentialsSecretRef", OnChange::Immutable),
];

/// The CEL transition rule keeping `spec.credentialsSecretRef` as it was at creation (set,
/// changed or removed later is refused). Every kind's spec carries it in its own
/// `#[x_kube(..)]`: rules on the flattened `ManagedFields` would not reach the CRD, since a
/// flattened schema's `x-kubernetes-validations` give way to the spec's own.
pub fn credentials_secret_ref_is_immutable() -> kube::core::Rule {
    kube::core::Rule::new(
        "has(self.credentialsSecretRef) == has(oldSelf.credentialsSecretRef) && (!has(self.credentialsSecretRef) || self.credentialsSecretRef == oldSelf.credentialsSecretRef)",
    )
    .message("credentialsSecretRef is immutable: delete and recreate the object to use another Secret (to rotate the key, update the Secret's content)")
    .field_path(".credentialsSecretRef")
}

/// The CEL rule keeping `spec.deletionPolicy: Snapshot` to the one kind that has a machine to
/// snapshot. Carried by every kind's spec but GpuInstance's, as the rule above.
pub fn deletion_policy_is_not_snapshot() -> kube::core::Rule {
    kube::core::Rule::new("!has(self.deletionPolicy) || self.deletionPolicy != 'Snapshot'")
        .message("deletionPolicy Snapshot is for GpuInstance only: use Delete or Orphan")
        .field_path(".deletionPolicy")
}

/// A key of a Secret in the referring object's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// Key within the Secret.
    #[serde(default = "default_api_key_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// The Secret key read when a reference names none.
pub const DEFAULT_API_KEY_KEY: &str = "apiKey";

fn default_api_key_key() -> String {
    DEFAULT_API_KEY_KEY.to_string()
}

/// A reference to another object of this API group in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct LocalRef {
    /// Name of the object, in the referring object's namespace.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// A key of a ConfigMap in the referring object's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ConfigMapKeyRef {
    /// Name of the ConfigMap.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// Key within the ConfigMap.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// Service tier of a cloud resource; some operations exist on the legacy tier only.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Tier {
    #[default]
    Advanced,
    Legacy,
}

impl Tier {
    /// The value the cloud API uses.
    pub fn cloud_value(self) -> &'static str {
        match self {
            Tier::Advanced => "advanced",
            Tier::Legacy => "legacy",
        }
    }
}

/// A create the operator has started and not yet seen finish. Written (version-checked)
/// before the cloud call, so that after a lost response or a restart the operator looks
/// for the resource by its cloud name instead of creating it again.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingCreate {
    /// The deterministic name the resource is created under in the cloud.
    pub cloud_name: String,
    /// When the create was first attempted.
    pub started_at: Time,
}

/// Status fields every managed kind reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudStatus {
    /// The cloud's id of the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    /// The name the resource carries in the cloud.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_name: Option<String>,
    /// The cloud's own state string, as last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// A create in flight; see `PendingCreate`. An object's first create is recorded in the
    /// `gpucloud.io/create-intent` annotation instead, until the first status write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_create: Option<PendingCreate>,
    /// The cloud account the resource (or the create in flight) was last seen in, named by
    /// its API key's digest as the metrics name it. Credentials that open another account,
    /// which does not hold the resource, are not followed: the object is Stalled
    /// (`AccountChanged`) until they are put back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// When the resource expires, from `spec.lifetime` (for a GpuInstance, or a GpuPolicy's
    /// `maxLifetime` when that ends the machine first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// The expiry the `ExpiresSoon` warning was given for (a changed expiry is warned of again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_warned: Option<Time>,
    /// `Snapshot` when a lifetime that ended with a final snapshot deleted the object: what
    /// `onExpiry` asked for then, so that an edit of the spec during the deletion cannot skip
    /// the snapshot. (Only the final snapshot depends on it: an expiry that just deletes
    /// writes nothing here, one write fewer before the resource is deleted.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_with: Option<crate::lifetime::OnExpiry>,
    /// `Ready`, `Reconciling` and `Stalled`, as kstatus defines them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// Conditions are a map-list keyed by `type`, so server-side apply merges them per type.
/// The most labels a selector's `matchLabels` or a template may hold.
pub const MAX_LABELS: u32 = 64;
/// The most requirements a selector's `matchExpressions` may hold.
pub const MAX_LABEL_REQUIREMENTS: u32 = 16;
/// The longest label value Kubernetes accepts.
pub const MAX_LABEL_VALUE_LENGTH: u32 = 63;

/// A label map as Kubernetes bounds its values, with at most [`MAX_LABELS`] entries: rules
/// that walk it are then costed by what it can hold.
pub(crate) fn labels_schema(_: &mut schemars::generate::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_LABELS,
        "additionalProperties": {"type": "string", "maxLength": MAX_LABEL_VALUE_LENGTH}
    })
}

/// The most annotations a template may hold.
pub const MAX_ANNOTATIONS: u32 = 64;
/// The most bytes Kubernetes accepts in an object's annotations together, so in one value.
pub const MAX_ANNOTATIONS_SIZE: u32 = 256 * 1024;

/// An annotation map with at most [`MAX_ANNOTATIONS`] entries, each value within the size
/// Kubernetes allows all of an object's annotations together.
pub(crate) fn annotations_schema(_: &mut schemars::generate::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_ANNOTATIONS,
        "additionalProperties": {"type": "string", "maxLength": MAX_ANNOTATIONS_SIZE}
    })
}

/// A `LabelSelector` with bounded `matchLabels` (see [`labels_schema`]) and `matchExpressions`.
pub(crate) fn label_selector_schema(
    generator: &mut schemars::generate::SchemaGenerator,
) -> schemars::Schema {
    let mut schema = generator.subschema_for::<LabelSelector>();
    let labels = labels_schema(generator);
    if let Some(properties) = schema
        .ensure_object()
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        if let Some(match_labels) = properties.get_mut("matchLabels") {
            let description = match_labels.get("description").cloned();
            *match_labels = labels.to_value();
            if let (Some(description), Some(object)) = (description, match_labels.as_object_mut()) {
                object.insert("description".into(), description);
            }
        }
        if let Some(expressions) = properties
            .get_mut("matchExpressions")
            .and_then(serde_json::Value::as_object_mut)
        {
            expressions.insert("maxItems".into(), MAX_LABEL_REQUIREMENTS.into());
        }
    }
    schema
}

pub(crate) fn conditions_schema(
    generator: &mut schemars::generate::SchemaGenerator,
) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    let object = schema.ensure_object();
    object.insert("x-kubernetes-list-type".into(), "map".into());
    object.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}

impl CloudStatus {
    /// The condition of the given type, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether `Ready` is `True` for the current generation.
    pub fn is_ready(&self, generation: Option<i64>) -> bool {
        self.condition(condition_type::READY).is_some_and(|c| {
            c.status == "True" && (generation.is_none() || self.observed_generation == generation)
        })
    }
}

/// A column of `kubectl get`, as a kind declares its own (see [`crate::crd`] for the shared
/// ones around them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    /// The OpenAPI type: `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: &'static str,
    pub json_path: &'static str,
    /// Shown only with `-o wide`.
    pub wide: bool,
}

impl Column {
    pub const fn new(name: &'static str, type_: &'static str, json_path: &'static str) -> Self {
        Column {
            name,
            type_,
            json_path,
            wide: false,
        }
    }

    /// The same column, shown only with `-o wide`.
    pub const fn wide(self) -> Self {
        Column { wide: true, ..self }
    }

    pub fn definition(&self) -> CustomResourceColumnDefinition {
        CustomResourceColumnDefinition {
            name: self.name.to_owned(),
            type_: self.type_.to_owned(),
            json_path: self.json_path.to_owned(),
            priority: self.wide.then_some(1),
            ..CustomResourceColumnDefinition::default()
        }
    }
}
