//! The platform guardrails the chart installs, on the embedded API server with no operator
//! running: the ValidatingAdmissionPolicy whose parameters are the GpuPolicies refuses, at
//! admission, each limit one object breaks, with the operator's own message; the default
//! GpuPolicy the values make; and, under RBAC, what a tenant bound to the built-in `edit` role
//! may and may not do about status, Budgets, GpuPolicies and lifetimes.
//!
//! A module of `tests/deploy_chart.rs` (not of `deploy`, which other test binaries share).

use crate::deploy::{self, RELEASE, RELEASE_NAMESPACE, render};
use gpucloud_api::gpu_policy::Subject;
use gpucloud_api::{GpuPolicy, Tier};
use gpucloud_apiserver::{ApiServer, ApiServerConfig, ApiServerHandle, AuthorizationMode};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::core::Status;
use serde_json::{Value, json};

/// The chart's ValidatingAdmissionPolicy and its binding (same name).
fn admission_policy() -> String {
    format!("{RELEASE}-gpu-policy")
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(gpucloud_api::GROUP, "v1alpha1", kind),
        plural,
    )
}

fn instances(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &resource("GpuInstance", "gpuinstances"),
    )
}

fn pools(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &resource("GpuInstancePool", "gpuinstancepools"),
    )
}

fn policies(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &resource("GpuPolicy", "gpupolicies"))
}

/// `base` with `change` merged in as a JSON merge patch does (null removes a field).
fn merged(mut base: Value, change: &Value) -> Value {
    if let (Some(target), Some(fields)) = (base.as_object_mut(), change.as_object()) {
        for (key, value) in fields {
            if value.is_null() {
                target.remove(key);
            } else if value.is_object() && target.get(key).is_some_and(Value::is_object) {
                let inner = target.remove(key).unwrap_or_default();
                target.insert(key.clone(), merged(inner, value));
            } else {
                target.insert(key.clone(), value.clone());
            }
        }
    }
    base
}

/// A machine within the research policy's limits, with `change` merged into its spec.
fn machine_spec(change: Value) -> Value {
    merged(
        json!({"region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
               "osImage": "ubuntu-22.04-cuda-12"}),
        &change,
    )
}

fn instance(name: &str, change: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
        "metadata": {"name": name},
        "spec": machine_spec(change),
    }))
    .unwrap()
}

fn pool(name: &str, replicas: i64, change: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstancePool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas,
                 "selector": {"matchLabels": {"pool": name}},
                 "template": {"metadata": {"labels": {"pool": name}},
                              "spec": machine_spec(change)}},
    }))
    .unwrap()
}

fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": labels}})
}

fn gpu_policy(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuPolicy",
           "metadata": {"name": name}, "spec": spec})
}

/// The chart rendered with `values`, installed as `helm install` would (CRDs first), with
/// `namespaces` (name, labels) beside the release namespace.
async fn install(client: &kube::Client, values: &Value, namespaces: &[(&str, Value)]) {
    let rendered = render(values);
    assert_eq!(rendered.invalid, Vec::<String>::new());
    let mut objects = vec![namespace(RELEASE_NAMESPACE, json!({}))];
    objects.extend(
        namespaces
            .iter()
            .map(|(name, labels)| namespace(name, labels.clone())),
    );
    deploy::apply_all(client, &objects).await;
    deploy::apply_all(client, &rendered.crd_objects()).await;
    deploy::apply_all(client, &rendered.objects()).await;
}

/// The Status of a refused request.
fn status_of<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Asserts a refusal by the chart's admission policy with exactly `message` (what the
/// validation says), as kube-apiserver reports it for `plural`/`name`.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(
    result: Result<T, kube::Error>,
    plural: &str,
    name: &str,
    message: &str,
) {
    let status = status_of(result);
    let policy = admission_policy();
    assert_eq!(
        (status.code, status.reason.as_str()),
        (403, "Forbidden"),
        "{status:?}"
    );
    assert_eq!(
        status.message,
        format!(
            "{plural}.gpucloud.io \"{name}\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: {message}"
        )
    );
}

/// What the operator says of `subject` under `policy` (`GpuPolicy::judge`): the admission
/// policy's message must be the same.
fn operator_says(policy: &GpuPolicy, subject: Subject) -> String {
    policy
        .judge(&subject)
        .expect("the operator refuses it too")
        .to_string()
}

/// A machine as the operator judges it (the GpuInstance's own fields, as `policy_subject`
/// names them).
fn subject(gpu_type: &str, region: &str, gpu_count: i32) -> Subject {
    Subject {
        gpu_types: vec![("spec.gpuType".into(), gpu_type.into())],
        regions: vec![("spec.region".into(), region.into())],
        gpu_counts: vec![("spec.gpuCount".into(), gpu_count)],
        tier: Tier::Advanced,
        gpus: gpu_count,
        expires_after: None,
    }
}

/// One requirement of a label selector's matchExpressions.
fn requirement(key: &str, operator: &str, values: &[&str]) -> Value {
    let mut requirement = json!({"key": key, "operator": operator});
    if !values.is_empty() {
        requirement["values"] = json!(values);
    }
    requirement
}

fn research_policy() -> Value {
    json!({
        "namespaceSelector": {
            "matchLabels": {"team": "research"},
            "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]},
        "allowedGpuTypes": ["L40S", "A100-80G"],
        "allowedRegions": ["us-east-1", "us-west-2"],
        "allowedTiers": ["Advanced"],
        "maxGpusPerMachine": 2,
        "maxLifetime": "72h",
        "maxPoolReplicas": 4,
        "namespaceLimits": {"machines": 3, "gpus": 5},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_gpu_policy_limit_is_refused_at_admission_with_the_operators_message() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.kube_client().await.unwrap();
    install(
        &client,
        &json!({}),
        &[
            ("research", json!({"team": "research", "env": "dev"})),
            ("research-prod", json!({"team": "research", "env": "prod"})),
            ("sandbox", json!({})),
        ],
    )
    .await;
    let research = instances(&client, "research");
    let post = PostParams::default();

    // No GpuPolicy at all: everything is admitted (parameterNotFoundAction: Allow).
    research
        .create(
            &post,
            &instance("before", json!({"gpuType": "H100-80G", "gpuCount": 8})),
        )
        .await
        .unwrap();

    let spec = research_policy();
    deploy::apply_all(&client, &[gpu_policy("research", spec.clone())]).await;
    let policy = GpuPolicy::new("research", serde_json::from_value(spec).unwrap());
    let alternative = |gpu_types: Value, regions: Value, gpu_count: i64| json!({"gpuTypes": gpu_types, "regions": regions, "gpuCount": gpu_count});
    let placed = |alternatives: Value| {
        json!({"region": null, "gpuType": null, "gpuCount": null,
               "placement": {"alternatives": alternatives}})
    };
    let ten_days = Timestamp::now() + SignedDuration::from_hours(240);

    // (name, change to the spec, what the operator says of the same machine)
    let refused: Vec<(&str, Value, String)> = vec![
        (
            "gpu-type",
            json!({"gpuType": "H100-80G"}),
            operator_says(&policy, subject("H100-80G", "us-east-1", 1)),
        ),
        (
            "region",
            json!({"region": "eu-west-1"}),
            operator_says(&policy, subject("L40S", "eu-west-1", 1)),
        ),
        (
            "tier",
            json!({"tier": "Legacy"}),
            operator_says(
                &policy,
                Subject {
                    tier: Tier::Legacy,
                    ..subject("L40S", "us-east-1", 1)
                },
            ),
        ),
        (
            "gpus-per-machine",
            json!({"gpuCount": 4}),
            operator_says(&policy, subject("L40S", "us-east-1", 4)),
        ),
        (
            "lifetime",
            json!({"lifetime": {"ttl": "96h"}}),
            operator_says(
                &policy,
                Subject {
                    expires_after: Some(Ok(SignedDuration::from_hours(96))),
                    ..subject("L40S", "us-east-1", 1)
                },
            ),
        ),
        (
            "placed-gpu-type",
            placed(json!([
                alternative(json!(["L40S"]), json!(["us-east-1"]), 1),
                alternative(json!(["A100-80G", "H100-80G"]), json!(["us-west-2"]), 2),
            ])),
            operator_says(
                &policy,
                Subject {
                    gpu_types: vec![
                        (
                            "spec.placement.alternatives[0].gpuTypes[0]".into(),
                            "L40S".into(),
                        ),
                        (
                            "spec.placement.alternatives[1].gpuTypes[0]".into(),
                            "A100-80G".into(),
                        ),
                        (
                            "spec.placement.alternatives[1].gpuTypes[1]".into(),
                            "H100-80G".into(),
                        ),
                    ],
                    ..subject("L40S", "us-east-1", 1)
                },
            ),
        ),
        (
            "placed-region",
            placed(json!([alternative(
                json!(["L40S"]),
                json!(["us-east-1", "eu-west-1"]),
                1
            )])),
            operator_says(
                &policy,
                Subject {
                    regions: vec![
                        (
                            "spec.placement.alternatives[0].regions[0]".into(),
                            "us-east-1".into(),
                        ),
                        (
                            "spec.placement.alternatives[0].regions[1]".into(),
                            "eu-west-1".into(),
                        ),
                    ],
                    ..subject("L40S", "us-east-1", 1)
                },
            ),
        ),
        (
            "placed-gpus-per-machine",
            placed(json!([
                alternative(json!(["L40S"]), json!(["us-east-1"]), 1),
                alternative(json!(["L40S"]), json!(["us-east-1"]), 8),
            ])),
            operator_says(
                &policy,
                Subject {
                    gpu_counts: vec![
                        ("spec.placement.alternatives[0].gpuCount".into(), 1),
                        ("spec.placement.alternatives[1].gpuCount".into(), 8),
                    ],
                    ..subject("L40S", "us-east-1", 1)
                },
            ),
        ),
    ];
    for (name, change, message) in &refused {
        assert!(
            message.starts_with("GpuPolicy research: spec."),
            "{message}"
        );
        let result = research
            .create(&post, &instance(name, change.clone()))
            .await;
        assert_refused(result, "gpuinstances", name, message);
    }
    // An expiresAt is judged from the object's creation.
    let late = research
        .create(
            &post,
            &instance(
                "late",
                json!({"lifetime": {"expiresAt": format!("{ten_days:.0}")}}),
            ),
        )
        .await;
    let message = status_of(late).message;
    let said = message.split("denied request: ").nth(1).unwrap_or_default();
    assert!(
        said.starts_with("GpuPolicy research: spec.lifetime: a lifetime of 2")
            && said.ends_with("s is longer than maxLifetime 72h"),
        "{message}"
    );

    // Within the limits: admitted. Its lifetime can be shortened and its power state changed,
    // but not removed or extended past maxLifetime.
    research
        .create(
            &post,
            &instance("fits", json!({"gpuCount": 2, "lifetime": {"ttl": "48h"}})),
        )
        .await
        .unwrap();
    let patch = |change: Value| Patch::Merge(json!({"spec": change}));
    let params = PatchParams::default();
    assert_refused(
        research
            .patch("fits", &params, &patch(json!({"lifetime": null})))
            .await,
        "gpuinstances",
        "fits",
        "GpuPolicy research: spec.lifetime: the lifetime cannot be removed while maxLifetime 72h applies",
    );
    assert_refused(
        research
            .patch(
                "fits",
                &params,
                &patch(json!({"lifetime": {"ttl": "100h"}})),
            )
            .await,
        "gpuinstances",
        "fits",
        &operator_says(
            &policy,
            Subject {
                expires_after: Some(Ok(SignedDuration::from_hours(100))),
                ..subject("L40S", "us-east-1", 2)
            },
        ),
    );
    for change in [
        json!({"lifetime": {"ttl": "24h"}}),
        json!({"powerState": "Stopped"}),
    ] {
        research
            .patch("fits", &params, &patch(change.clone()))
            .await
            .unwrap_or_else(|e| panic!("{change}: {e}"));
    }
    // A machine admitted before the policy that breaks it can still be changed (its GPUs are
    // immutable, so not judged again) and stopped.
    research
        .patch("before", &params, &patch(json!({"powerState": "Stopped"})))
        .await
        .unwrap();

    // Pools: replicas, the template as a machine, the per-namespace caps a pool alone passes.
    let research_pools = pools(&client, "research");
    let refused_pools: Vec<(&str, i64, Value, &str)> = vec![
        (
            "too-many",
            5,
            json!({}),
            "GpuPolicy research: spec.replicas: 5 replicas is more than maxPoolReplicas 4",
        ),
        (
            "h100",
            1,
            json!({"gpuType": "H100-80G"}),
            "GpuPolicy research: spec.template.spec.gpuType: GPU type H100-80G is not among allowedGpuTypes [\"L40S\", \"A100-80G\"]",
        ),
        (
            "short-lived",
            1,
            json!({"lifetime": {"ttl": "80h"}}),
            "GpuPolicy research: spec.template.spec.lifetime: a lifetime of 80h0m0s is longer than maxLifetime 72h",
        ),
        (
            "over-machines",
            4,
            json!({}),
            "GpuPolicy research: spec.namespaceLimits.machines: a pool of 4 replicas alone passes the cap of 3 machines a namespace may hold",
        ),
        (
            "over-gpus",
            3,
            json!({"gpuCount": 2}),
            "GpuPolicy research: spec.namespaceLimits.gpus: a pool of 3 replicas holds at least 6 GPUs, more than the cap of 5 a namespace may hold",
        ),
        (
            "placed-over-gpus",
            3,
            placed(json!([
                alternative(json!(["L40S"]), json!(["us-east-1"]), 2),
                alternative(json!(["A100-80G"]), json!(["us-east-1"]), 2),
            ])),
            "GpuPolicy research: spec.namespaceLimits.gpus: a pool of 3 replicas holds at least 6 GPUs, more than the cap of 5 a namespace may hold",
        ),
    ];
    for (name, replicas, change, message) in refused_pools {
        let result = research_pools
            .create(&post, &pool(name, replicas, change))
            .await;
        assert_refused(result, "gpuinstancepools", name, message);
    }
    research_pools
        .create(&post, &pool("workers", 2, json!({"gpuCount": 2})))
        .await
        .unwrap();
    // The scale subresource, as `kubectl scale` and an autoscaler write it.
    assert_refused(
        research_pools
            .patch_scale(
                "workers",
                &params,
                &Patch::Merge(json!({"spec": {"replicas": 5}})),
            )
            .await,
        "gpuinstancepools",
        "workers",
        "GpuPolicy research: spec.replicas: 5 replicas is more than maxPoolReplicas 4",
    );
    assert_refused(
        research_pools
            .patch("workers", &params, &patch(json!({"replicas": 5})))
            .await,
        "gpuinstancepools",
        "workers",
        "GpuPolicy research: spec.replicas: 5 replicas is more than maxPoolReplicas 4",
    );
    assert_refused(
        research_pools
            .patch(
                "workers",
                &params,
                &patch(json!({"template": {"spec": {"gpuCount": 3}}})),
            )
            .await,
        "gpuinstancepools",
        "workers",
        "GpuPolicy research: spec.template.spec.gpuCount: 3 GPUs is more than maxGpusPerMachine 2",
    );
    let scaled = research_pools
        .patch_scale(
            "workers",
            &params,
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(1));

    // Namespaces the policy does not select: no labels, or env=prod (NotIn).
    for namespace in ["sandbox", "research-prod"] {
        let unlimited = json!({"gpuType": "H100-80G", "gpuCount": 8, "region": "eu-west-1",
            "tier": "Legacy", "lifetime": {"ttl": "1000h"}});
        instances(&client, namespace)
            .create(&post, &instance("anything", unlimited.clone()))
            .await
            .unwrap_or_else(|e| panic!("{namespace}: {e}"));
        pools(&client, namespace)
            .create(&post, &pool("big", 50, unlimited))
            .await
            .unwrap_or_else(|e| panic!("{namespace}: {e}"));
    }
    server.shutdown().await;
}

/// The policy's namespaceSelector is read as a label selector reads the namespace's labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_policy_governs_the_namespaces_its_selector_selects() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.kube_client().await.unwrap();
    install(
        &client,
        &json!({}),
        &[
            ("dev", json!({"team": "vision", "env": "dev"})),
            (
                "prod",
                json!({"team": "vision", "env": "prod", "gpu": "yes"}),
            ),
            ("bare", json!({})),
        ],
    )
    .await;
    // (selector, the namespaces it selects)
    let table: Vec<(Value, &[&str])> = vec![
        (json!({}), &["dev", "prod", "bare"][..]),
        (
            json!({"matchLabels": {"team": "vision"}}),
            &["dev", "prod"][..],
        ),
        (
            json!({"matchLabels": {"team": "vision", "env": "prod"}}),
            &["prod"][..],
        ),
        (
            json!({"matchExpressions": [requirement("env", "In", &["dev", "test"])]}),
            &["dev"][..],
        ),
        (
            json!({"matchExpressions": [requirement("env", "NotIn", &["prod"])]}),
            &["dev", "bare"][..],
        ),
        (
            json!({"matchExpressions": [requirement("gpu", "Exists", &[])]}),
            &["prod"][..],
        ),
        (
            json!({"matchExpressions": [requirement("gpu", "DoesNotExist", &[])]}),
            &["dev", "bare"][..],
        ),
        (
            json!({"matchLabels": {"team": "vision"},
                   "matchExpressions": [requirement("gpu", "DoesNotExist", &[])]}),
            &["dev"][..],
        ),
        (json!({"matchLabels": {"team": "research"}}), &[][..]),
    ];
    let post = PostParams::default();
    for (selector, selected) in table {
        // No GPU type is allowed: a create is refused exactly where the policy governs.
        deploy::apply_all(
            &client,
            &[gpu_policy(
                "selector",
                json!({"namespaceSelector": selector, "allowedGpuTypes": []}),
            )],
        )
        .await;
        for namespace in ["dev", "prod", "bare"] {
            let api = instances(&client, namespace);
            let result = api.create(&post, &instance("probe", json!({}))).await;
            if selected.contains(&namespace) {
                assert_refused(
                    result,
                    "gpuinstances",
                    "probe",
                    "GpuPolicy selector: spec.gpuType: GPU type L40S is not among allowedGpuTypes []",
                );
            } else {
                result.unwrap_or_else(|e| panic!("{selector} in {namespace}: {e}"));
                api.delete("probe", &DeleteParams::default()).await.unwrap();
            }
        }
        policies(&client)
            .delete("selector", &DeleteParams::default())
            .await
            .unwrap();
    }
    server.shutdown().await;
}

/// `gpuPolicy.default` makes the GpuPolicy `<release>-default`, enforced like any other;
/// `gpuPolicy.admission.enabled: false` leaves the admission policy out (the operator still
/// enforces every GpuPolicy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_policy_is_one_setting_away() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let default_name = format!("{RELEASE}-default");
    let off = render(&json!({}));
    assert!(off.find("GpuPolicy", &default_name).is_none());
    assert!(
        off.find("ValidatingAdmissionPolicy", &admission_policy())
            .is_some()
    );
    let on = json!({"gpuPolicy": {"default": {"enabled": true,
        "allowedRegions": ["us-east-1"], "maxLifetime": "24h", "maxPoolReplicas": 0}}});
    let rendered = render(&on);
    let default = rendered.find("GpuPolicy", &default_name).unwrap();
    assert_eq!(
        default["spec"],
        json!({"namespaceSelector": {}, "allowedRegions": ["us-east-1"], "maxLifetime": "24h",
               "maxPoolReplicas": 0,
               "namespaceLimits": {"hourlyRateWithoutBudget": 50, "currency": "USD"}})
    );
    let without_admission = render(&json!({"gpuPolicy": {"admission": {"enabled": false}}}));
    assert!(
        without_admission
            .find("ValidatingAdmissionPolicy", &admission_policy())
            .is_none()
            && without_admission
                .find("ValidatingAdmissionPolicyBinding", &admission_policy())
                .is_none()
    );

    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.kube_client().await.unwrap();
    install(&client, &on, &[("team-a", json!({}))]).await;
    let stored = policies(&client).get(&default_name).await.unwrap();
    assert_eq!(stored.data["spec"]["maxLifetime"], "24h");
    let post = PostParams::default();
    assert_refused(
        instances(&client, "team-a")
            .create(&post, &instance("far", json!({"region": "eu-west-1"})))
            .await,
        "gpuinstances",
        "far",
        &format!(
            "GpuPolicy {default_name}: spec.region: region eu-west-1 is not among allowedRegions [\"us-east-1\"]"
        ),
    );
    assert_refused(
        pools(&client, "team-a")
            .create(&post, &pool("one", 1, json!({})))
            .await,
        "gpuinstancepools",
        "one",
        &format!(
            "GpuPolicy {default_name}: spec.replicas: 1 replicas is more than maxPoolReplicas 0"
        ),
    );
    instances(&client, "team-a")
        .create(
            &post,
            &instance("near", json!({"lifetime": {"ttl": "12h"}})),
        )
        .await
        .unwrap();
    server.shutdown().await;
}

const ADMIN_TOKEN: &str = "guardrails-admin-token";
const ALICE_TOKEN: &str = "guardrails-alice-token";

/// Kube-apiserver's RBAC refusal of `user`.
#[track_caller]
fn assert_forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>, message: &str) {
    let status = status_of(result);
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (403, "Forbidden", message)
    );
}

/// Under RBAC, a tenant bound to the built-in `edit` role in her namespace (which the chart's
/// tenant-edit role is aggregated into) creates machines within the policy, but writes no
/// status, no Budget and no GpuPolicy, and cannot remove or stretch a lifetime past the
/// policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_edit_cannot_lift_the_guardrails() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = ApiServerConfig::default()
        .with_authorization(AuthorizationMode::Rbac)
        .with_user(ADMIN_TOKEN, "admin", &["system:masters"])
        .with_user(ALICE_TOKEN, "alice", &[]);
    let server: ApiServerHandle = ApiServer::start(config).await.unwrap();
    let admin = server.kube_client_as(Some("admin")).await.unwrap();
    install(
        &admin,
        &json!({}),
        &[("team-a", json!({"team": "research"}))],
    )
    .await;
    deploy::apply_all(
        &admin,
        &[
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "alice-edit", "namespace": "team-a"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": "alice"}]}),
            gpu_policy(
                "research",
                json!({"namespaceSelector": {"matchLabels": {"team": "research"}},
                       "maxLifetime": "72h"}),
            ),
            json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "Budget",
                "metadata": {"name": "team", "namespace": "team-a"},
                "spec": {"maxHourlyRate": 20.0}}),
        ],
    )
    .await;
    let alice = server.kube_client_as(Some("alice")).await.unwrap();
    let post = PostParams::default();
    let params = PatchParams::default();

    let machines = instances(&alice, "team-a");
    machines
        .create(
            &post,
            &instance("mine", json!({"lifetime": {"ttl": "48h"}})),
        )
        .await
        .unwrap();
    assert_forbidden(
        machines
            .patch_status(
                "mine",
                &params,
                &Patch::Merge(json!({"status": {"instanceId": "someone-elses"}})),
            )
            .await,
        r#"gpuinstances.gpucloud.io "mine" is forbidden: User "alice" cannot patch resource "gpuinstances/status" in API group "gpucloud.io" in the namespace "team-a""#,
    );

    let budgets: Api<DynamicObject> =
        Api::namespaced_with(alice.clone(), "team-a", &resource("Budget", "budgets"));
    budgets.get("team").await.unwrap();
    let budget: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "Budget",
            "metadata": {"name": "mine"},
            "spec": {"maxHourlyRate": 1000.0}}),
    )
    .unwrap();
    assert_forbidden(
        budgets.create(&post, &budget).await,
        r#"budgets.gpucloud.io is forbidden: User "alice" cannot create resource "budgets" in API group "gpucloud.io" in the namespace "team-a""#,
    );
    assert_forbidden(
        budgets
            .patch(
                "team",
                &params,
                &Patch::Merge(json!({"spec": {"maxHourlyRate": 1000.0}})),
            )
            .await,
        r#"budgets.gpucloud.io "team" is forbidden: User "alice" cannot patch resource "budgets" in API group "gpucloud.io" in the namespace "team-a""#,
    );

    let alice_policies = policies(&alice);
    let lenient: DynamicObject =
        serde_json::from_value(gpu_policy("lenient", json!({"namespaceSelector": {}}))).unwrap();
    assert_forbidden(
        alice_policies.create(&post, &lenient).await,
        r#"gpupolicies.gpucloud.io is forbidden: User "alice" cannot create resource "gpupolicies" in API group "gpucloud.io" at the cluster scope"#,
    );
    assert_forbidden(
        alice_policies
            .patch(
                "research",
                &params,
                &Patch::Merge(json!({"spec": {"maxLifetime": "10000h"}})),
            )
            .await,
        r#"gpupolicies.gpucloud.io "research" is forbidden: User "alice" cannot patch resource "gpupolicies" in API group "gpucloud.io" at the cluster scope"#,
    );
    assert_forbidden(
        alice_policies
            .delete("research", &DeleteParams::default())
            .await,
        r#"gpupolicies.gpucloud.io "research" is forbidden: User "alice" cannot delete resource "gpupolicies" in API group "gpucloud.io" at the cluster scope"#,
    );

    // Her own machine's lifetime: shortened, yes; removed or stretched past the policy, no.
    let patch = |change: Value| Patch::Merge(json!({"spec": change}));
    assert_refused(
        machines
            .patch("mine", &params, &patch(json!({"lifetime": null})))
            .await,
        "gpuinstances",
        "mine",
        "GpuPolicy research: spec.lifetime: the lifetime cannot be removed while maxLifetime 72h applies",
    );
    assert_refused(
        machines
            .patch(
                "mine",
                &params,
                &patch(json!({"lifetime": {"ttl": "720h"}})),
            )
            .await,
        "gpuinstances",
        "mine",
        "GpuPolicy research: spec.lifetime: a lifetime of 720h0m0s is longer than maxLifetime 72h",
    );
    machines
        .patch("mine", &params, &patch(json!({"lifetime": {"ttl": "12h"}})))
        .await
        .unwrap();
    server.shutdown().await;
}
