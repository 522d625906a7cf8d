#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Deletion protection with the policy the chart and the kustomize base ship: a GpuInstance
//! annotated `gpucloud.io/deletion-protection: "true"` survives `delete` and the deletion of
//! its namespace, and so does its machine, because the operator never sees a
//! deletionTimestamp; once the annotation goes, the delete proceeds and the machine goes.

use crate::support;

use gpucloud_api::deletion_protection::{ANNOTATION, POLICY_NAME};
use gpucloud_api::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use std::time::Duration;
use support::{Env, NAMESPACE, eventually};

fn protected_instance(name: &str) -> GpuInstance {
    let mut instance: GpuInstance = support::object(
        name,
        serde_json::json!({
            "region": "us-east-1",
            "gpuType": "H100-80G",
            "gpuCount": 1,
            "osImage": "ubuntu-22.04-cuda-12",
        }),
    );
    instance.metadata.annotations = Some([(ANNOTATION.to_string(), "true".to_string())].into());
    instance
}

/// The machines in the simulator's account.
fn machines(env: &Env) -> Vec<String> {
    env.simulator
        .state()
        .instances
        .into_iter()
        .map(|instance| instance.instance_id)
        .collect()
}

/// Nothing the operator could act on: the object is there without a deletionTimestamp, and its
/// machine is still in the account.
async fn still_protected(env: &Env, name: &str, machine: &str) {
    let object = env.api::<GpuInstance>().get(name).await.unwrap();
    assert!(
        object.metadata.deletion_timestamp.is_none(),
        "{name} is being deleted"
    );
    assert_eq!(machines(env), [machine], "the machine stays");
    assert_eq!(env.calls("DeleteInstance"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_instance_and_its_machine_outlive_delete_until_the_annotation_goes() {
    let env = Env::start().await;
    support::install_deletion_protection(&env).await;
    env.api::<GpuInstance>()
        .create(&PostParams::default(), &protected_instance("vm-1"))
        .await
        .unwrap();
    let ready: GpuInstance = support::ready(&env, "vm-1").await;
    let machine = ready.status.unwrap().cloud.external_id.unwrap();
    assert_eq!(machines(&env), std::slice::from_ref(&machine));

    // `kubectl delete` of the object is refused at admission.
    let refused = match env
        .api::<GpuInstance>()
        .delete("vm-1", &DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(status)) => status,
        other => panic!("the delete of a protected instance was not refused: {other:?}"),
    };
    assert_eq!((refused.code, refused.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        refused.message,
        format!(
            "gpuinstances.gpucloud.io \"vm-1\" is forbidden: ValidatingAdmissionPolicy \
             '{POLICY_NAME}' with binding '{POLICY_NAME}' denied request: GpuInstance \
             {NAMESPACE}/vm-1 is protected from deletion by the annotation \
             gpucloud.io/deletion-protection=true; remove the annotation (kubectl annotate \
             gpuinstance vm-1 -n {NAMESPACE} gpucloud.io/deletion-protection-) to delete it"
        )
    );

    // Deleting the namespace does not take it either: the namespace stays Terminating.
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    namespaces
        .delete(NAMESPACE, &DeleteParams::default())
        .await
        .unwrap();
    let namespace = eventually(30, "the namespace reports the refused delete", || {
        let namespaces = namespaces.clone();
        async move {
            let namespace = namespaces.get(NAMESPACE).await.ok()?;
            let failed = namespace
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "NamespaceDeletionContentFailure" && c.status == "True");
            failed.then_some(namespace)
        }
    })
    .await;
    assert_eq!(
        namespace.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    // A few of the operator's observation rounds (2 s resync) change nothing.
    tokio::time::sleep(Duration::from_secs(5)).await;
    still_protected(&env, "vm-1", &machine).await;

    // Removing the annotation lets the namespace controller's delete through: the operator
    // deletes the machine, releases the object, and the namespace goes.
    env.api::<GpuInstance>()
        .patch(
            "vm-1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {ANNOTATION: null}}})),
        )
        .await
        .unwrap();
    eventually(60, "the machine deleted", || async {
        machines(&env).is_empty().then_some(())
    })
    .await;
    eventually(60, "the namespace gone", || {
        let namespaces = namespaces.clone();
        async move {
            namespaces
                .get_opt(NAMESPACE)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    assert_eq!(env.calls("DeleteInstance"), 1);
}

/// Deleting the GpuInstance CRD would delete every GpuInstance without admission, and the
/// operator would then delete their machines: the CRD policy refuses it until the CRD carries
/// `gpucloud.io/allow-deletion: "true"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crd_outlives_delete_until_annotated_and_its_machines_with_it() {
    use gpucloud_api::deletion_protection::{CRD_ANNOTATION, CRD_POLICY_NAME};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let env = Env::start().await;
    support::install_deletion_protection(&env).await;
    env.api::<GpuInstance>()
        .create(
            &PostParams::default(),
            &support::object::<GpuInstance>(
                "vm-2",
                serde_json::json!({
                    "region": "us-east-1",
                    "gpuType": "H100-80G",
                    "osImage": "ubuntu-22.04-cuda-12",
                }),
            ),
        )
        .await
        .unwrap();
    let ready: GpuInstance = support::ready(&env, "vm-2").await;
    let machine = ready.status.unwrap().cloud.external_id.unwrap();

    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let name = "gpuinstances.gpucloud.io";
    let refused = match crds.delete(name, &DeleteParams::default()).await {
        Err(kube::Error::Api(status)) => status,
        other => panic!(
            "the delete of the CRD was not refused: {:?}",
            other.map(|_| ())
        ),
    };
    assert_eq!((refused.code, refused.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        refused.message,
        format!(
            "customresourcedefinitions.apiextensions.k8s.io \"{name}\" is forbidden: \
             ValidatingAdmissionPolicy '{CRD_POLICY_NAME}' with binding '{CRD_POLICY_NAME}' \
             denied request: deleting the CustomResourceDefinition {name} deletes every object \
             of its kind, and the operator then deletes their cloud resources; to go ahead, \
             annotate it first (kubectl annotate crd {name} {CRD_ANNOTATION}=true)"
        )
    );
    let crd = crds.get(name).await.unwrap();
    assert!(
        crd.metadata.deletion_timestamp.is_none(),
        "the CRD is being deleted"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    still_protected(&env, "vm-2", &machine).await;

    // The second, deliberate step lets it through.
    crds.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {CRD_ANNOTATION: "true"}}})),
    )
    .await
    .unwrap();
    crds.delete(name, &DeleteParams::default()).await.unwrap();
}
