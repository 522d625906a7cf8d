//! The managed kinds, listed once.
//!
//! Everything that is a list of kinds is derived from [`each_kind`]: the CRDs (`crds/`, the
//! chart's template of them and the kustomize base's copies), the controllers `run` starts, the orphan
//! sweeper's claims and cloud lists, the sandbox's table, and the RBAC rules of the chart
//! (`templates/_kinds.tpl`, generated; deploy/kustomize is rendered from the chart). A kind
//! is managed, swept and granted in RBAC exactly when it is listed here, so a kind the
//! sweeper does not know cannot exist: the sweeper would otherwise delete a live kind's
//! resources as orphans.

use crate::flow::kind::ManagedKind;
use gpucloud_api::{
    Budget, Firewall, GpuInstance, GpuInstancePool, GpuOffering, GpuPolicy, Image, KindReference,
    Managed, Snapshot, SshKey, Volume,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Something done once per managed kind.
pub trait KindVisitor {
    fn visit<K: ManagedKind>(&mut self);
}

/// Visits every managed kind, in deletion order: machines before what they use (firewalls,
/// images, snapshots, volumes, keys), so that what a machine holds is free by the time the
/// sweeper comes to it.
pub fn each_kind<V: KindVisitor>(visitor: &mut V) {
    visitor.visit::<GpuInstance>();
    visitor.visit::<Firewall>();
    visitor.visit::<Image>();
    visitor.visit::<Snapshot>();
    visitor.visit::<Volume>();
    visitor.visit::<SshKey>();
}

/// Collects one value per kind, in [`each_kind`]'s order.
pub fn map_kinds<T>(f: impl KindFn<T>) -> Vec<T> {
    struct Collect<F, T>(F, Vec<T>);
    impl<T, F: KindFn<T>> KindVisitor for Collect<F, T> {
        fn visit<K: ManagedKind>(&mut self) {
            let value = self.0.call::<K>();
            self.1.push(value);
        }
    }
    let mut collect = Collect(f, Vec::new());
    each_kind(&mut collect);
    collect.1
}

/// A function generic over the kind, for [`map_kinds`].
pub trait KindFn<T> {
    fn call<K: ManagedKind>(&self) -> T;
}

/// The kind's name (`GpuInstance`), for [`map_kinds`].
pub struct KindName;

impl KindFn<String> for KindName {
    fn call<K: ManagedKind>(&self) -> String {
        K::kind(&()).into_owned()
    }
}

/// Every kind as the CRDs and the field reference see it, ordered by kind name (the order of
/// `gpucloud-operator crds`).
pub fn kinds() -> Vec<KindReference> {
    struct Reference;
    impl KindFn<KindReference> for Reference {
        fn call<K: ManagedKind>(&self) -> KindReference {
            KindReference {
                crd: gpucloud_api::crd::<K>(),
                on_change: <K as Managed>::ON_CHANGE,
            }
        }
    }
    let mut kinds = map_kinds(Reference);
    kinds.sort_by(|a, b| a.crd.spec.names.kind.cmp(&b.crd.spec.names.kind));
    kinds
}

/// The CRDs of every kind, ordered by kind name.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds: Vec<CustomResourceDefinition> = kinds().into_iter().map(|k| k.crd).collect();
    crds.extend(policy_crds());
    crds.extend(catalog_crds());
    crds.sort_by(|a, b| a.spec.names.kind.cmp(&b.spec.names.kind));
    crds
}

/// The CRDs of the kinds that own no cloud resource but govern those that do (`Budget`,
/// `budget.rs`; `GpuInstancePool`, which makes GpuInstances, `gpu_instance_pool.rs`):
/// installed, granted and rendered with the managed kinds, never swept.
pub fn policy_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = guardrail_crds();
    crds.push(GpuInstancePool::definition());
    crds
}

/// Of the policy kinds, those that limit what a namespace may spend or run (`Budget`, and the
/// cluster-scoped `GpuPolicy`, `gpu_policy.rs`): set by the platform team, readable by the
/// namespace's users, never written by them (the chart's tenant edit role leaves them out).
pub fn guardrail_crds() -> Vec<CustomResourceDefinition> {
    vec![
        gpucloud_api::crd_with_columns::<Budget>(Budget::COLUMNS),
        gpucloud_api::crd_with_columns::<GpuPolicy>(GpuPolicy::COLUMNS),
    ]
}

/// The CRDs of the read-only, cluster-scoped kinds the operator keeps from the cloud's
/// catalogs (`GpuOffering`, `gpu_offering.rs`): written by the operator alone, readable by every
/// authenticated user (the chart's reader ClusterRole), never swept.
pub fn catalog_crds() -> Vec<CustomResourceDefinition> {
    vec![gpucloud_api::crd_with_columns::<GpuOffering>(
        GpuOffering::COLUMNS,
    )]
}

/// The CRDs as one multi-document YAML stream (what `gpucloud-operator crds` prints).
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}

/// A generated file's YAML: a long description stays on one line rather than folded (`>`), so
/// that a changed word changes one line of the CRDs; text with line breaks is a literal block.
pub fn to_yaml<T: serde::Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    let options = serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX };
    serde_saphyr::to_string_with_options(value, options)
}

/// `charts/gpucloud-operator/templates/_kinds.tpl`: the kinds' resources as the chart's RBAC
/// rules name them (objects; their status; their CRDs; what a tenant may write, scale and
/// only read), as YAML flow lists.
pub fn chart_kinds_template() -> String {
    let plural = |c: CustomResourceDefinition| c.spec.names.plural;
    let mut plurals: Vec<String> = crds().into_iter().map(plural).collect();
    plurals.sort();
    let cluster_scoped = |c: &CustomResourceDefinition| c.spec.scope == "Cluster";
    let mut policies: Vec<String> = policy_crds()
        .into_iter()
        .filter(|c| !cluster_scoped(c))
        .map(plural)
        .collect();
    policies.sort();
    let mut cluster_policies: Vec<String> = policy_crds()
        .into_iter()
        .filter(cluster_scoped)
        .map(plural)
        .collect();
    cluster_policies.sort();
    let cluster_policy_status = cluster_policies
        .iter()
        .map(|p| format!("{p}/status"))
        .collect();
    let mut catalogs: Vec<String> = catalog_crds().into_iter().map(plural).collect();
    catalogs.sort();
    let managed: Vec<String> = plurals
        .iter()
        .filter(|p| !policies.contains(p) && !cluster_policies.contains(p) && !catalogs.contains(p))
        .cloned()
        .collect();
    let list = |items: Vec<String>| format!("[{}]", items.join(", "));
    let status = plurals
        .iter()
        .filter(|p| !catalogs.contains(p) && !cluster_policies.contains(p))
        .map(|p| format!("{p}/status"))
        .collect();
    let catalog_status = catalogs.iter().map(|p| format!("{p}/status")).collect();
    // The tenant roles read the namespace's own guardrails; a cluster-scoped policy counts
    // every namespace it selects, which is no tenant's to read.
    let mut guardrails: Vec<String> = guardrail_crds()
        .into_iter()
        .filter(|c| !cluster_scoped(c))
        .map(plural)
        .collect();
    guardrails.sort();
    let tenant: Vec<String> = plurals
        .iter()
        .filter(|p| {
            !guardrails.contains(p) && !catalogs.contains(p) && !cluster_policies.contains(p)
        })
        .cloned()
        .collect();
    let mut scale: Vec<String> = crds()
        .into_iter()
        .filter(|crd| {
            crd.spec
                .versions
                .iter()
                .any(|v| v.subresources.as_ref().is_some_and(|s| s.scale.is_some()))
        })
        .map(|crd| format!("{}/scale", crd.spec.names.plural))
        .collect();
    scale.sort();
    let crd_names = plurals
        .iter()
        .map(|p| format!("{p}.{}", gpucloud_api::GROUP))
        .collect();
    format!(
        "{{{{/* Generated from the kind registry (src/controller/kinds/registry/mod.rs): the resources of every\n\
         managed kind, for the chart's RBAC rules (the operator's and the tenant roles). Regenerate with\n\
         UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry; do not edit. */}}}}\n\
         {{{{- define \"gpucloud-operator.kindResources\" -}}}}{}{{{{- end -}}}}\n\
         {{{{- define \"gpucloud-operator.policyResources\" -}}}}{}{{{{- end -}}}}\n\
         {{{{- define \"gpucloud-operator.kindStatusResources\" -}}}}{}{{{{- end -}}}}\n\
         {{{{- define \"gpucloud-operator.kindCrdNames\" -}}}}{}{{{{- end -}}}}\n\
         {{{{- define \"gpucloud-operator.clusterPolicyResources\" -}}}}{}{{{{- end -}}}}\n\
         {{{{- define \"gpucloud-operator.clusterPolicyStatusResources\" -}}}}{}{{{{- end -}}}}\n\
         {{{{- define \"gpucloud-operator.catalogResources\" -}}}}{}{{{{- end -}}}}\n\
         {{{{- define \"gpucloud-operator.catalogStatusResources\" -}}}}{}{{{{- end -}}}}\n\
         {{{{- define \"gpucloud-operator.tenantResources\" -}}}}{}{{{{- end -}}}}\n\
         {{{{- define \"gpucloud-operator.tenantScaleResources\" -}}}}{}{{{{- end -}}}}\n\
         {{{{- define \"gpucloud-operator.guardrailResources\" -}}}}{}{{{{- end -}}}}\n",
        list(managed),
        list(policies),
        list(status),
        list(crd_names),
        list(cluster_policies),
        list(cluster_policy_status),
        list(catalogs.clone()),
        list(catalog_status),
        list(tenant),
        list(scale),
        list(guardrails),
    )
}

/// `charts/gpucloud-operator/templates/crds.yaml`: the CRDs as chart templates (cert-manager's
/// convention), so that `helm upgrade` updates them, which Helm never does for a chart's
/// `crds/`. `crds.enabled` renders them; `crds.keep` annotates them
/// `helm.sh/resource-policy: keep`, so `helm uninstall` leaves them and with them every object;
/// without it they carry `gpucloud.io/allow-deletion: "true"`, so the deletion protection's CRD
/// policy lets the uninstall that was asked for delete them.
/// Takes the CRDs as an argument so tests can template changed ones the same way.
pub fn chart_crds_template(
    crds: &[CustomResourceDefinition],
) -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::from(
        "{{/* Generated from the kind registry (src/controller/kinds/registry/mod.rs): the CRDs of every\n\
         managed kind. Regenerate with\n\
         UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry; do not edit. */}}\n\
         {{- if .Values.crds.enabled }}\n",
    );
    for crd in crds {
        let yaml = escape_template(&to_yaml(crd)?);
        out.push_str("---\n");
        // The generated CRDs carry no annotations of their own, so this is the only key.
        out.push_str(&yaml.replacen(
            "\nmetadata:\n",
            "\nmetadata:\n  annotations:\n  {{- if .Values.crds.keep }}\n    \
             helm.sh/resource-policy: keep\n  {{- else }}\n    \
             gpucloud.io/allow-deletion: \"true\"\n  {{- end }}\n",
            1,
        ));
    }
    out.push_str("{{- end }}\n");
    Ok(out)
}

/// Text that Helm's template engine outputs unchanged: only `{{` starts an action, so each
/// one becomes an action printing it (a CEL rule or a description may hold one).
pub fn escape_template(text: &str) -> String {
    text.replace("{{", "{{ \"{{\" }}")
}

/// `deploy/kustomize/crds/kustomization.yaml`: the CRD files of every kind.
pub fn kustomize_crds() -> String {
    let mut out = String::from(
        "# Generated from the kind registry (src/controller/kinds/registry/mod.rs); regenerate with\n\
         # UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry; do not edit.\n\
         apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n",
    );
    for crd in crds() {
        if let Some(name) = crd.metadata.name {
            out.push_str(&format!("  - {name}.yaml\n"));
        }
    }
    out
}

/// The table of references in docs/design.md: for each kind, the kinds its objects refer to
/// and through which field (`KindDeclarations::REFERS_TO`), and whether its referrers wake it.
pub fn references_table() -> String {
    struct Rows;
    impl KindFn<Vec<String>> for Rows {
        fn call<K: ManagedKind>(&self) -> Vec<String> {
            let kind = K::kind(&());
            let mut rows: Vec<String> = K::REFERS_TO
                .iter()
                .map(|(target, field)| format!("| {kind} | {target} | {field} |"))
                .collect();
            if K::FOLLOWS_REFERRERS {
                rows.push(format!(
                    "| {kind} | whatever refers to it | (its referrers' fields) |"
                ));
            }
            rows
        }
    }
    let mut out = String::from("| kind | follows | through |\n|---|---|---|\n");
    for row in map_kinds(Rows).into_iter().flatten() {
        out.push_str(&row);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
