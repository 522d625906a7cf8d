//! `GpuInstancePool`: N identical GPU machines, sized through the scale subresource.
//!
//! A pool is no cloud resource: its controller creates and owns `GpuInstance` objects made
//! from its template, and each of those is a machine as any other (its own create protocol,
//! budgets, capacity). The scale subresource (`spec.replicas`, `status.replicas`,
//! `status.selector`) lets `kubectl scale`, a HorizontalPodAutoscaler and KEDA size it
//! without knowing its schema.

use crate::common::{Column, DeletionPolicy};
use crate::gpu_instance::GpuInstanceSpec;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Label on each machine of a pool: the pool's name.
pub const POOL_LABEL: &str = "gpucloud.io/pool";
/// Annotations a pool's template may not carry: each names one cloud resource for an object to
/// adopt or find, and every machine of the pool would claim the same one.
pub const ADOPTION_ANNOTATIONS: [&str; 2] = [
    crate::common::EXTERNAL_ID_ANNOTATION,
    crate::common::CREATE_INTENT_ANNOTATION,
];

/// Label on each machine of a pool: the hash of the template's fields a machine cannot change
/// (those it was made from), so a change of them tells the machines to replace.
pub const TEMPLATE_HASH_LABEL: &str = "gpucloud.io/pool-template-hash";
/// Annotation on each machine of a pool: the hash of the template's other fields (and the
/// pool's `deletionPolicy`) as last set on the machine, so that they are set again only when
/// the template changes, and a person's edit of one machine stands until then.
pub const IN_PLACE_HASH_ANNOTATION: &str = "gpucloud.io/pool-in-place-hash";
/// The longest pool name: its machines are named `<pool>-<5 characters>`, and a GpuInstance's
/// name is at most 63 characters.
pub const MAX_NAME_LENGTH: usize = 57;

/// A pool of identical GPU machines: `replicas` GpuInstances made from `template`, replaced
/// one by one when the template changes, sized by `kubectl scale`, an HPA or KEDA.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gpucloud.io",
    version = "v1alpha1",
    kind = "GpuInstancePool",
    namespaced,
    status = "GpuInstancePoolStatus",
    shortname = "gpupool",
    category = "gpucloud",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    validation = Rule::new("self.metadata.name.size() <= 57").message("metadata.name must be at most 57 characters for a GpuInstancePool: its machines are named <pool>-<5 characters>"),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.selector.matchLabels) || self.selector.matchLabels.all(k, has(self.template.metadata.labels) && k in self.template.metadata.labels && self.template.metadata.labels[k] == self.selector.matchLabels[k])").message("selector.matchLabels must be among template.metadata.labels: the pool's machines must match its selector").field_path(".selector"),
    validation = Rule::new("(has(self.selector.matchLabels) && size(self.selector.matchLabels) > 0) || (has(self.selector.matchExpressions) && size(self.selector.matchExpressions) > 0)").message("selector must not be empty: it would select every GpuInstance of the namespace").field_path(".selector"),
    validation = Rule::new("self.selector == oldSelf.selector").message("selector is immutable").field_path(".selector"),
    validation = Rule::new("!has(self.template.metadata.annotations) || !('gpucloud.io/external-id' in self.template.metadata.annotations || 'gpucloud.io/create-intent' in self.template.metadata.annotations)").message("template.metadata.annotations may not carry gpucloud.io/external-id or gpucloud.io/create-intent: a pool's machines are created, never adopted").field_path(".template.metadata.annotations"),
)]
pub struct GpuInstancePoolSpec {
    /// How many machines the pool keeps. The scale subresource's `spec.replicas`.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0, max = 10000))]
    pub replicas: i32,
    /// Which GpuInstances are the pool's: it must match the template's labels. Immutable.
    #[schemars(schema_with = "crate::common::label_selector_schema")]
    pub selector: LabelSelector,
    /// What each machine is made from.
    pub template: MachineTemplate,
    /// How machines made from an older template are replaced.
    #[serde(default)]
    pub strategy: PoolStrategy,
    /// The `deletionPolicy` of every machine, whatever the template says: what happens to
    /// each cloud machine when the pool or the machine is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

fn default_replicas() -> i32 {
    1
}

/// The machines' labels, annotations and spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplate {
    #[serde(default)]
    pub metadata: TemplateMetadata,
    /// A GpuInstance's spec. Its fields that are immutable on a GpuInstance may change here:
    /// the machines made from the old template are replaced.
    pub spec: GpuInstanceSpec,
}

/// The labels and annotations every machine of the pool carries.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::common::labels_schema")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::common::annotations_schema")]
    pub annotations: BTreeMap<String, String>,
}

/// How a template change reaches the machines.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.type == 'RollingReplace' || !has(self.rollingReplace)").message("rollingReplace applies to type RollingReplace only").field_path(".rollingReplace"),
)]
pub struct PoolStrategy {
    /// `RollingReplace` (the default): machines made from an older template are deleted
    /// and made again one by one, within `rollingReplace`'s limits (a GPU machine cannot
    /// change its type or image in place). `OnDelete`: new machines are made from the new
    /// template only when a person deletes an old one.
    #[serde(rename = "type", default)]
    pub type_: StrategyType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_replace: Option<RollingReplace>,
}

impl Default for PoolStrategy {
    fn default() -> Self {
        PoolStrategy {
            type_: StrategyType::RollingReplace,
            rolling_replace: None,
        }
    }
}

/// The kinds of [`PoolStrategy`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum StrategyType {
    #[default]
    RollingReplace,
    OnDelete,
}

/// The limits of a rolling replacement.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.maxUnavailable > 0 || self.maxSurge > 0").message("maxUnavailable and maxSurge cannot both be 0: no machine could be replaced"),
)]
pub struct RollingReplace {
    /// How many of `replicas` may be not Ready while machines are replaced (default 1).
    #[serde(default = "default_max_unavailable")]
    #[schemars(range(min = 0))]
    pub max_unavailable: i32,
    /// How many machines beyond `replicas` may exist while machines are replaced (default
    /// 0: a GPU machine is dear).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub max_surge: i32,
}

fn default_max_unavailable() -> i32 {
    1
}

impl Default for RollingReplace {
    fn default() -> Self {
        RollingReplace {
            max_unavailable: default_max_unavailable(),
            max_surge: 0,
        }
    }
}

/// What the pool's controller observed and intends.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuInstancePoolStatus {
    /// The pool's machines (not being deleted). The scale subresource's `status.replicas`.
    #[serde(default)]
    pub replicas: i32,
    /// Machines whose `Ready` condition is `True`.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Machines made from the current template.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Machines Ready (a machine is available as soon as it is Ready).
    #[serde(default)]
    pub available_replicas: i32,
    /// The `metadata.generation` these figures were counted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `spec.selector` as a string, for the scale subresource (an HPA reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The hash of the current template's fields a machine cannot change (the machines'
    /// `gpucloud.io/pool-template-hash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_hash: Option<String>,
    /// What the pool's machines cost per hour together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::money::option")]
    pub hourly_rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// Machines the controller decided to create, recorded (with the pool's
    /// resourceVersion as a precondition) before they are created and kept until they are
    /// seen: a restarted or stale controller creates these names, never others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub creating: Vec<String>,
    /// Machines the controller decided to delete, recorded the same way, kept until they
    /// are seen deleting or gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleting: Vec<String>,
    /// `Ready`, `Reconciling` and `Stalled` (kstatus).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,
}

impl GpuInstancePool {
    /// `kubectl get gpuinstancepool`: desired, ready, up to date, what it costs, age.
    pub const COLUMNS: &'static [Column] = &[
        Column::new("Desired", "integer", ".spec.replicas"),
        Column::new("Ready", "integer", ".status.readyReplicas"),
        Column::new("Up-to-date", "integer", ".status.updatedReplicas"),
        Column::new("Rate/h", "number", ".status.hourlyRate"),
        Column::new("Currency", "string", ".status.currency").wide(),
        crate::REASON_COLUMN,
        crate::AGE_COLUMN,
    ];

    /// The pool's CRD. The template embeds a GpuInstance's spec with its rules, less the
    /// transition rules (`oldSelf`) that keep a machine's type, image and region: a pool's
    /// template may change them, and its machines are then replaced.
    pub fn definition() -> CustomResourceDefinition {
        let mut crd = crate::crd_with_columns::<GpuInstancePool>(Self::COLUMNS);
        for version in &mut crd.spec.versions {
            let template_spec = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
                .and_then(|s| property(s, "spec"))
                .and_then(|s| property(s, "template"))
                .and_then(|s| property(s, "spec"));
            if let Some(schema) = template_spec {
                drop_transition_rules(schema);
            }
        }
        crd
    }
}

fn property<'a>(schema: &'a mut JSONSchemaProps, name: &str) -> Option<&'a mut JSONSchemaProps> {
    schema.properties.as_mut()?.get_mut(name)
}

/// Removes the CEL rules that compare with `oldSelf`, at every level of `schema`.
fn drop_transition_rules(schema: &mut JSONSchemaProps) {
    if let Some(rules) = schema.x_kubernetes_validations.as_mut() {
        rules.retain(|rule| !rule.rule.contains("oldSelf"));
        if rules.is_empty() {
            schema.x_kubernetes_validations = None;
        }
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        drop_transition_rules(child);
    }
    if let Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(items)) =
        schema.items.as_mut()
    {
        drop_transition_rules(items);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_crd_serves_the_scale_subresource_and_lets_the_template_change() {
        let crd = GpuInstancePool::definition();
        let version = &crd.spec.versions[0];
        let scale = version
            .subresources
            .as_ref()
            .and_then(|s| s.scale.as_ref())
            .expect("scale subresource");
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(scale.status_replicas_path, ".status.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.selector")
        );
        let yaml = serde_saphyr::to_string(&crd).unwrap();
        assert!(!yaml.contains("gpuType is immutable"), "{yaml}");
        // The machine's other rules still hold in the template.
        assert!(yaml.contains("exactly one of osImage, imageRef and source must be set"));
        // The pool's own transition rule stays.
        assert!(yaml.contains("selector is immutable"));
    }
}
