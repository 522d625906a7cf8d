//! Deletion protection: the annotation that protects any gpucloud.io object from deletion, and
//! the admission policy that enforces it. The policy is a ValidatingAdmissionPolicy with its
//! binding, installed by the Helm chart (`deletionProtection.enabled`) and the kustomize base;
//! it refuses the delete for every user, the namespace controller included, so a protected
//! object (and the cloud resource behind it) outlives `kubectl delete` and namespace deletion
//! until the annotation is removed.

/// The annotation; the value `"true"` makes every delete of the object fail at admission.
pub const ANNOTATION: &str = "gpucloud.io/deletion-protection";

/// The name of the ValidatingAdmissionPolicy and of its binding in [`POLICY_MANIFEST`] (the
/// chart names them after its release: `<fullname>-deletion-protection`).
pub const POLICY_NAME: &str = "gpucloud-operator-deletion-protection";

/// The annotation that lets one of the operator's CustomResourceDefinitions be deleted: the
/// value `"true"` lets the deletion through the CRD policy ([`CRD_POLICY_NAME`]). Deleting a
/// CRD deletes every object of its kind without admission, and the operator then deletes their
/// cloud resources, so it takes this second, deliberate step.
pub const CRD_ANNOTATION: &str = "gpucloud.io/allow-deletion";

/// The name of the policy (and binding) refusing the deletion of the operator's CRDs without
/// [`CRD_ANNOTATION`] (the chart's: `<fullname>-crd-protection`).
pub const CRD_POLICY_NAME: &str = "gpucloud-operator-crd-protection";

/// The policies and their bindings as YAML (four documents): the kustomize base's copy, which
/// `tests/deploy_chart.rs` keeps equal to the chart's default rendering. The dev sandbox
/// installs it; tests apply it.
pub const POLICY_MANIFEST: &str = include_str!("../../deploy/kustomize/deletion-protection.yaml");

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_manifest_is_the_two_policies_and_their_bindings() {
        let documents: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(POLICY_MANIFEST).unwrap();
        let kinds: Vec<&str> = documents
            .iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding"
            ]
        );
        for (pair, (name, group, resource, annotation)) in documents.chunks(2).zip([
            (POLICY_NAME, crate::GROUP, "*", ANNOTATION),
            (
                CRD_POLICY_NAME,
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                CRD_ANNOTATION,
            ),
        ]) {
            let (policy, binding) = (&pair[0], &pair[1]);
            assert_eq!(policy["metadata"]["name"], name);
            assert_eq!(binding["metadata"]["name"], name);
            assert_eq!(binding["spec"]["policyName"], name);
            assert_eq!(
                binding["spec"]["validationActions"],
                serde_json::json!(["Deny"])
            );
            assert_eq!(policy["spec"]["failurePolicy"], "Fail");
            let rule = &policy["spec"]["matchConstraints"]["resourceRules"][0];
            assert_eq!(rule["apiGroups"], serde_json::json!([group]));
            assert_eq!(rule["resources"], serde_json::json!([resource]));
            assert_eq!(rule["operations"], serde_json::json!(["DELETE"]));
            let validation = &policy["spec"]["validations"][0];
            assert!(
                validation["expression"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("'{annotation}'"))
            );
            assert_eq!(validation["reason"], "Forbidden");
        }
    }
}
