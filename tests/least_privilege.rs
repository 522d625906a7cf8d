#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The chart's RBAC is exactly what the operator uses.
//!
//! For the cluster-wide mode (default values) and the namespaced mode (`watchNamespaces`), the
//! chart is rendered and installed into the embedded API server (CRDs, ServiceAccount, roles,
//! bindings, Deployment); the operator runs with the rendered Deployment's settings under the
//! rendered ServiceAccount's identity (`system:serviceaccount:gpucloud-system:gpucloud-operator`,
//! its own bearer token), through a full scenario in every watched namespace: the quickstart
//! and snapshot-and-restore examples plus a machine whose startup script is in a ConfigMap,
//! all Ready, a power-state change, an orphaned cloud resource reported by the sweeper, and
//! everything deleted. The API server's request log then gives every (verb, group, resource,
//! namespace, name) the operator asked for, and the test asserts:
//!
//! - every request is allowed by the rules bound to that ServiceAccount (RBAC semantics: a
//!   Role holds in its namespace, resourceNames restrict named requests only);
//! - every granted (group, resource, verb, resourceName) was used, in every namespace a Role
//!   grants it in: nothing more is granted;
//! - no wildcards, and Secrets cluster-wide only get/list/watch/create/update.
//!
//! The operator runs as a replica the way `run` starts it: the cluster-wide case with the
//! default values (one replica, leader election on), the namespaced case with two replicas;
//! both use the Lease rules, which are proven by use like every other rule.
//! `lease_rules_only_with_leader_election` pins the Lease rules of every value combination.

mod deploy;

use deploy::{Grant, RELEASE, RELEASE_NAMESPACE, Use, allows, grants, render, role_grants};
use futures::FutureExt;
use gpucloud_apiserver::{ApiServer, ApiServerConfig, ApiServerHandle};
use gpucloud_cloud::model::CreateSshKeyRequest;
use gpucloud_cloud::{ApiKey, ClientConfig, CloudClient};
use gpucloud_controller::flow::conditions::reason;
use gpucloud_controller::operator::cli::Args;
use gpucloud_simulator::{FaultPlan, Simulator, SimulatorConfig};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

const OPERATOR_USER: &str = "system:serviceaccount:gpucloud-system:gpucloud-operator";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_wide_rules_are_exactly_what_the_operator_uses() {
    let values = json!({});
    let used = run_scenario(&values, &["team-a"]).await;
    let objects = render(&values).objects();
    let granted = grants(&objects, RELEASE);
    // One ClusterRole; in the operator's namespace only the record of released resources and
    // the leader's Lease.
    assert!(
        granted.iter().all(|g| g.namespace.is_none()
            || g.namespace.as_deref() == Some(RELEASE_NAMESPACE)
                && ["configmaps", "leases"].contains(&g.resource.as_str())),
        "cluster-wide mode: one ClusterRole, the released-resources and Lease Roles: {granted:#?}"
    );
    // Secrets everywhere: reads (the metadata watch, credentials by name) and writes of the
    // connection and SSH-key Secrets the operator owns; never delete, patch or deletecollection.
    let secret_verbs: BTreeSet<&str> = granted
        .iter()
        .filter(|g| g.resource == "secrets")
        .map(|g| g.verb.as_str())
        .collect();
    assert!(
        secret_verbs.is_subset(&BTreeSet::from([
            "get", "list", "watch", "create", "update"
        ])),
        "{secret_verbs:?}"
    );
    assert_exact(&granted, &used);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_rules_are_exactly_what_the_operator_uses() {
    // Two replicas: leader election on, so the Lease rules are proven by use too.
    let values = json!({"watchNamespaces": ["team-a", "team-b"], "replicas": 2});
    let used = run_scenario(&values, &["team-a", "team-b"]).await;
    let objects = render(&values).objects();
    let granted = grants(&objects, RELEASE);
    // Cluster-wide only the start-up check of the CRDs, by name, the catalog's cluster-scoped
    // GpuOfferings, and the GpuPolicies with the namespaces' labels they select by.
    for grant in granted.iter().filter(|g| g.namespace.is_none()) {
        if grant.resource.starts_with("gpuofferings")
            || grant.resource.starts_with("gpupolicies")
            || grant.resource == "namespaces"
        {
            continue;
        }
        assert_eq!(
            (
                grant.group.as_str(),
                grant.resource.as_str(),
                grant.verb.as_str()
            ),
            ("apiextensions.k8s.io", "customresourcedefinitions", "get"),
            "{grant:?}"
        );
        assert_eq!(
            grant.names.len(),
            gpucloud_controller::kinds::registry::crds().len()
        );
    }
    assert!(
        used.iter().all(|u| !u.namespace.is_empty()
            || u.group == "apiextensions.k8s.io"
            || u.resource.starts_with("gpuofferings")
            || u.resource.starts_with("gpupolicies")
            || u.resource == "namespaces"),
        "a request across all namespaces in namespaced mode"
    );
    assert_exact(&granted, &used);
}

#[test]
fn lease_rules_only_with_leader_election() {
    let leases = |values: Value| -> Vec<Grant> {
        grants(&render(&values).objects(), RELEASE)
            .into_iter()
            .filter(|g| g.resource == "leases")
            .collect()
    };
    let off = json!({"leaderElection": {"enabled": false}});
    assert!(leases(off.clone()).is_empty(), "one replica, election off");
    assert!(
        leases(json!({"leaderElection": {"enabled": false}, "watchNamespaces": ["team-a"]}))
            .is_empty()
    );
    for values in [
        json!({}),
        json!({"replicas": 2, "leaderElection": {"enabled": false}}),
        json!({"replicas": 3, "watchNamespaces": ["team-a"]}),
    ] {
        let rendered = render(&values);
        assert_eq!(
            rendered.env_var("GPUCLOUD_LEADER_ELECT").as_deref(),
            Some("true")
        );
        let granted: BTreeSet<(String, String, Vec<String>)> = leases(values)
            .into_iter()
            .map(|g| {
                assert_eq!(g.namespace.as_deref(), Some(RELEASE_NAMESPACE));
                assert_eq!(g.group, "coordination.k8s.io");
                (g.resource, g.verb, g.names.into_iter().collect())
            })
            .collect();
        let by_name = vec!["gpucloud-operator".to_string()];
        assert_eq!(
            granted,
            BTreeSet::from([
                ("leases".into(), "create".into(), vec![]),
                ("leases".into(), "get".into(), by_name.clone()),
                ("leases".into(), "update".into(), by_name),
            ])
        );
    }
    assert_eq!(
        render(&off).env_var("GPUCLOUD_LEADER_ELECT").as_deref(),
        Some("false")
    );
}

/// Every request allowed, every grant used; prints the used rule set.
/// The roles the chart hands out to tenants. tenant-edit creates, changes, scales and deletes
/// every tenant kind and reads their status and the namespace's Budgets, but writes no status
/// subresource (whoever may write one could point an object at another team's resource) and
/// no Budget (the platform team's limit); tenant-view only reads. Aggregated to the built-in
/// edit/admin and view roles unless `tenantRoles.aggregate` is off, absent when
/// `tenantRoles.enabled` is.
#[test]
fn tenant_roles_write_no_status_and_no_budget() {
    let objects = render(&json!({})).objects();
    let edit_name = format!("{RELEASE}-tenant-edit");
    let view_name = format!("{RELEASE}-tenant-view");
    let edit = role_grants(&objects, "ClusterRole", &edit_name, Some("team-a"));
    let view = role_grants(&objects, "ClusterRole", &view_name, Some("team-a"));
    let may = |grants: &[Grant], verb: &str, resource: &str| {
        let used = Use {
            verb: verb.to_string(),
            group: gpucloud_api::GROUP.to_string(),
            resource: resource.to_string(),
            namespace: "team-a".to_string(),
            name: "x".to_string(),
        };
        grants.iter().any(|grant| allows(grant, &used))
    };
    let crds = gpucloud_controller::kinds::registry::crds();
    let guardrails: Vec<String> = gpucloud_controller::kinds::registry::guardrail_crds()
        .into_iter()
        .map(|crd| crd.spec.names.plural)
        .collect();
    let writes = ["create", "update", "patch", "delete", "deletecollection"];
    let reads = ["get", "list", "watch"];
    for crd in &crds {
        let plural = crd.spec.names.plural.as_str();
        let status = format!("{plural}/status");
        for verb in ["update", "patch", "create"] {
            assert!(
                !may(&edit, verb, &status),
                "tenant-edit may {verb} {status}"
            );
        }
        if crd.spec.scope == "Cluster" {
            // The catalog: read through the catalog-reader role, written by the operator only.
            for verb in writes.iter().chain(&reads) {
                assert!(
                    !may(&edit, verb, plural) && !may(&view, verb, plural),
                    "{verb} {plural}"
                );
            }
            continue;
        }
        for verb in reads {
            assert!(
                may(&edit, verb, plural),
                "tenant-edit may not {verb} {plural}"
            );
            assert!(
                may(&view, verb, plural),
                "tenant-view may not {verb} {plural}"
            );
        }
        assert!(
            may(&edit, "get", &status) && may(&view, "get", &status),
            "{status}"
        );
        let tenant_writes = !guardrails.iter().any(|g| g == plural);
        for verb in writes {
            assert_eq!(
                may(&edit, verb, plural),
                tenant_writes,
                "tenant-edit {verb} {plural}"
            );
        }
        let scaled = crd
            .spec
            .versions
            .iter()
            .any(|v| v.subresources.as_ref().is_some_and(|s| s.scale.is_some()));
        let scale = format!("{plural}/scale");
        assert_eq!(may(&edit, "update", &scale), scaled, "{scale}");
        assert_eq!(may(&view, "get", &scale), scaled, "{scale}");
    }
    assert!(
        guardrails.iter().any(|g| g == "budgets"),
        "Budgets are a guardrail"
    );
    assert!(
        view.iter().all(|g| reads.contains(&g.verb.as_str())),
        "tenant-view only reads: {view:#?}"
    );
    let labels = |objects: &[Value], name: &str| -> BTreeSet<String> {
        objects
            .iter()
            .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == name)
            .and_then(|role| role["metadata"]["labels"].as_object())
            .map(|labels| {
                labels
                    .iter()
                    .filter(|(_, value)| *value == "true")
                    .map(|(key, _)| key.clone())
                    .collect()
            })
            .unwrap_or_default()
    };
    let aggregate = |to: &str| format!("rbac.authorization.k8s.io/aggregate-to-{to}");
    assert!(
        labels(&objects, &edit_name)
            .is_superset(&BTreeSet::from([aggregate("edit"), aggregate("admin")]))
    );
    assert!(labels(&objects, &view_name).contains(&aggregate("view")));
    assert!(!labels(&objects, &view_name).contains(&aggregate("edit")));

    let unaggregated = render(&json!({"tenantRoles": {"aggregate": false}})).objects();
    for name in [&edit_name, &view_name] {
        assert!(
            !labels(&unaggregated, name)
                .iter()
                .any(|label| label.starts_with("rbac.authorization.k8s.io/aggregate-to-")),
            "{name}"
        );
    }
    let disabled = render(&json!({"tenantRoles": {"enabled": false}})).objects();
    assert!(
        !disabled
            .iter()
            .any(|o| o["metadata"]["name"] == edit_name.as_str()
                || o["metadata"]["name"] == view_name.as_str())
    );
}

fn assert_exact(granted: &[Grant], used: &BTreeSet<Use>) {
    let mut summary: BTreeSet<String> = BTreeSet::new();
    for u in used {
        let scope = if u.namespace.is_empty() {
            "cluster".to_string()
        } else {
            u.namespace.clone()
        };
        summary.insert(format!(
            "{:<22} {:<30} {:<8} {}",
            if u.group.is_empty() { "core" } else { &u.group },
            u.resource,
            u.verb,
            scope
        ));
    }
    eprintln!(
        "requests of {OPERATOR_USER}:\n{}",
        summary.into_iter().collect::<Vec<_>>().join("\n")
    );

    let denied: Vec<&Use> = used
        .iter()
        .filter(|u| !granted.iter().any(|g| allows(g, u)))
        .collect();
    assert!(
        denied.is_empty(),
        "requests the chart does not allow: {denied:#?}"
    );

    let mut unused = Vec::new();
    for grant in granted {
        // A grant limited to names is used only if each name is.
        let singles: Vec<Grant> = if grant.names.is_empty() {
            vec![grant.clone()]
        } else {
            grant
                .names
                .iter()
                .map(|n| Grant {
                    names: BTreeSet::from([n.clone()]),
                    ..grant.clone()
                })
                .collect()
        };
        for single in singles {
            let used_here = used.iter().any(|u| {
                allows(&single, u) && (single.names.is_empty() || single.names.contains(&u.name))
            });
            if !used_here {
                unused.push(single);
            }
        }
    }
    assert!(unused.is_empty(), "granted but never used: {unused:#?}");
}

/// Installs the rendered chart, runs the operator as its ServiceAccount through the scenario
/// in `namespaces`, and returns the distinct requests it made.
async fn run_scenario(values: &Value, namespaces: &[&str]) -> BTreeSet<Use> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rendered = render(values);
    assert_eq!(rendered.invalid, Vec::<String>::new());

    let apiserver = ApiServer::start(ApiServerConfig {
        users: vec![
            ("admin-token".into(), "admin".into()),
            ("operator-token".into(), OPERATOR_USER.into()),
        ],
        ..ApiServerConfig::default()
    })
    .await
    .unwrap();
    let simulator = Simulator::start(SimulatorConfig::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let admin = apiserver.kube_client().await.unwrap();

    // What `helm install --namespace gpucloud-system --create-namespace` does, plus the
    // credentials Secret the default values name, and the namespaces the scenario uses.
    let mut all_namespaces = vec![RELEASE_NAMESPACE];
    all_namespaces.extend_from_slice(namespaces);
    deploy::create_namespaces(&admin, &all_namespaces).await;
    deploy::apply_all(&admin, &rendered.crd_objects()).await;
    deploy::apply_all(&admin, &rendered.objects()).await;
    let secret_name = rendered
        .env_var("GPUCLOUD_CREDENTIALS_SECRET")
        .expect("the default values name a credentials Secret");
    deploy::apply_all(
        &admin,
        &[json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret_name, "namespace": RELEASE_NAMESPACE},
            "stringData": {"apiKey": simulator.api_key()}})],
    )
    .await;

    // An offering the cloud's catalog does not have: the operator deletes it.
    deploy::apply_all(
        &admin,
        &[
            json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuOffering",
            "metadata": {"name": "gone.nowhere"},
            "spec": {"gpuType": "GONE", "region": "nowhere"}}),
        ],
    )
    .await;
    // A GpuPolicy over every namespace, with a cap each billed create reserves against: the
    // operator reads the policies and the namespaces' labels, and writes the policy's status.
    deploy::apply_all(
        &admin,
        &[
            json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuPolicy",
            "metadata": {"name": "everyone"},
            "spec": {"namespaceSelector": {}, "namespaceLimits": {"machines": 100}}}),
        ],
    )
    .await;
    let operator = apiserver.kube_client_as(Some(OPERATOR_USER)).await.unwrap();
    let args = operator_args(&rendered, &simulator.base_url());
    gpucloud_controller::operator::cli::ensure_crds_installed(&operator)
        .await
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // A replica as `run` starts it: with leader election when the values turn it on.
    let task = tokio::spawn(gpucloud_controller::operator::replica::run_replica(
        operator,
        args.config().unwrap(),
        args.replica().unwrap(),
        stopped.map(|_| ()).boxed(),
    ));

    // An orphan for the sweeper to report: a resource with the operator's mark no object
    // claims.
    let cloud = CloudClient::new(ClientConfig::new(
        simulator.base_url(),
        ApiKey::new(simulator.api_key()),
    ))
    .unwrap();
    cloud
        .create_ssh_key(&CreateSshKeyRequest {
            name: "gco-gone-object-0123456789abcdef".into(),
            public_key: None,
        })
        .await
        .unwrap();

    // The cloud fails every create of the kinds no object refers to (Firewall) until each
    // namespace's object has reported it. That report meets the status its reconcile wrote
    // just before the call (the create's intent) and so reads the stored object by name to
    // report on it: a rule the chart must grant even though no object refers to the kind.
    simulator.set_faults(FaultPlan {
        error_rate_per_operation: REFUSED_CREATES
            .iter()
            .map(|(operation, _, _)| (operation.to_string(), 1.0))
            .collect(),
        ..FaultPlan::default()
    });
    let refused_creates = async {
        for namespace in namespaces {
            for (_, kind, name) in REFUSED_CREATES {
                let objects: Api<DynamicObject> = Api::namespaced_with(
                    admin.clone(),
                    namespace,
                    &resource("gpucloud.io/v1alpha1", kind),
                );
                eventually(
                    &format!("{namespace}/{name} reports the failed create"),
                    || async {
                        let object = objects.get(name).await.ok()?;
                        (ready_condition(&object)?["reason"] == reason::CLOUD_UNAVAILABLE)
                            .then_some(())
                    },
                )
                .await;
            }
        }
        simulator.set_faults(FaultPlan::default());
    };
    let scenarios: Vec<_> = namespaces.iter().map(|ns| scenario(&admin, ns)).collect();
    tokio::time::timeout(
        Duration::from_secs(150),
        futures::future::join(refused_creates, futures::future::join_all(scenarios)),
    )
    .await
    .expect("scenario within 150s");
    wait_for_sweep_event(&admin).await;
    // The catalog shown: the stale offering deleted, the cloud's created with their status.
    let offerings: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &resource("gpucloud.io/v1alpha1", "GpuOffering"),
    );
    eventually("the GpuOfferings kept from the catalog", || async {
        let listed = offerings.list(&ListParams::default()).await.ok()?.items;
        let gone = listed.iter().all(|o| o.name_any() != "gone.nowhere");
        let shown = listed
            .iter()
            .any(|o| o.data["status"]["available"].as_u64().is_some());
        (gone && shown).then_some(())
    })
    .await;

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("operator stops")
        .unwrap()
        .unwrap();
    assert_secret_reads(&apiserver, &secret_name);
    let used = used_by_operator(&apiserver);
    apiserver.shutdown().await;
    used
}

/// A Secret each scenario namespace holds that the operator must never read the data of.
const PLANTED_SECRET: &str = "deploy-key";

/// RBAC cannot narrow Secret reads by label, so the operator narrows its own, and the request
/// log shows it: its Secret lists and watches select credentials Secrets by label or the
/// default Secret by name, and the planted Secret was read for its metadata only.
fn assert_secret_reads(apiserver: &ApiServerHandle, default_secret: &str) {
    let requests = apiserver.requests();
    let secret_reads: Vec<_> = requests
        .iter()
        .filter(|r| r.user == OPERATOR_USER && r.resource == "secrets")
        .collect();
    assert!(
        secret_reads
            .iter()
            .any(|r| r.name == PLANTED_SECRET && r.metadata_only),
        "the planted Secret's metadata was read"
    );
    for read in &secret_reads {
        match read.verb.as_str() {
            "list" | "watch" => assert!(
                read.label_selector == "gpucloud.io/credentials=true"
                    || read.name == default_secret,
                "a Secret {} of all Secrets: {read:?}",
                read.verb
            ),
            "get" => assert!(
                read.name != PLANTED_SECRET || read.metadata_only,
                "the planted Secret's data was read: {read:?}"
            ),
            _ => {}
        }
    }
}

fn used_by_operator(apiserver: &ApiServerHandle) -> BTreeSet<Use> {
    apiserver
        .requests()
        .iter()
        .filter(|r| r.user == OPERATOR_USER)
        .map(Use::from_record)
        .collect()
}

/// The `run` settings of the rendered Deployment, with the cloud URL of the simulator, the
/// intervals shortened for a test, and the orphan sweeper reporting at once.
fn operator_args(rendered: &deploy::Rendered, cloud_url: &str) -> Args {
    deploy::run_args(
        rendered,
        &[
            ("cloud-url", cloud_url),
            ("resync-interval", "2s"),
            ("transition-interval", "200ms"),
            ("settle-window", "2s"),
            ("rate-limit", "1000"),
            ("rate-burst", "1000"),
            ("cloud-timeout", "5s"),
            ("orphan-sweep-interval", "1s"),
            ("orphan-grace-period", "0s"),
            // Listeners of this process's own endpoints, where the build has them.
            ("metrics-listen", "127.0.0.1:0"),
            ("health-listen", "127.0.0.1:0"),
        ],
    )
}

fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// Creates the cloud refuses at first, as (operation, kind, object of the scenario), for the
/// kinds no object refers to: their objects are read by name only to report the refusal.
const REFUSED_CREATES: &[(&str, &str, &str)] = &[("CreateFirewall", "Firewall", "research-edge")];

/// The objects of the scenario in `namespace`: the quickstart and snapshot-and-restore
/// examples, and a machine whose startup script comes from a ConfigMap.
fn scenario_objects(namespace: &str) -> Vec<Value> {
    let mut objects = Vec::new();
    for folder in ["examples/quickstart", "examples/snapshot-and-restore"] {
        let mut files: Vec<_> = std::fs::read_dir(deploy::repository_root().join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for file in files {
            objects.extend(deploy::yaml_documents(
                &std::fs::read_to_string(file).unwrap(),
            ));
        }
    }
    objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "startup"},
        "data": {"script": "#!/bin/sh\nnvidia-smi\n"}}));
    objects.push(
        json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
        "metadata": {"name": "scripted"},
        "spec": {"region": "us-east-1", "gpuType": "A100-80G", "gpuCount": 1,
                 "osImage": "ubuntu-22.04-cuda-12",
                 "startupScript": {"configMapRef": {"name": "startup", "key": "script"}}}}),
    );
    // A pool of two machines, scaled down to one below (its controller creates and deletes
    // GpuInstances).
    objects.push(
        json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstancePool",
        "metadata": {"name": "workers"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "workers"}},
                 "template": {"metadata": {"labels": {"app": "workers"}},
                              "spec": {"region": "us-east-1", "gpuType": "A100-80G", "gpuCount": 1,
                                       "osImage": "ubuntu-22.04-cuda-12"}}}}),
    );
    // A Budget every create reserves in, with room for all of them.
    objects.push(
        json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "Budget",
        "metadata": {"name": "team"},
        "spec": {"maxHourlyRate": 1000.0, "maxSpend": 100000.0, "period": {"type": "Monthly"}}}),
    );
    for object in &mut objects {
        object["metadata"]["namespace"] = json!(namespace);
    }
    objects
}

/// Everything applied and Ready, a power-state change followed, everything deleted and gone.
async fn scenario(admin: &kube::Client, namespace: &str) {
    let objects = scenario_objects(namespace);
    deploy::apply_all(admin, &objects).await;
    let managed: Vec<(ApiResource, String)> = objects
        .iter()
        .filter(|o| o["apiVersion"] == "gpucloud.io/v1alpha1")
        .map(|o| {
            (
                resource(
                    o["apiVersion"].as_str().unwrap(),
                    o["kind"].as_str().unwrap(),
                ),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (resource, name) in &managed {
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), namespace, resource);
        eventually(&format!("{namespace}/{name} Ready"), || async {
            let object = api.get(name).await.ok()?;
            ready(&object).then_some(())
        })
        .await;
    }

    let instances: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        namespace,
        &resource("gpucloud.io/v1alpha1", "GpuInstance"),
    );
    // Without a public IP the connection Secret's host changes: the operator updates it.
    instances
        .patch(
            "train-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"publicIp": false}})),
        )
        .await
        .unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(admin.clone(), namespace);
    eventually(
        &format!("{namespace}/train-1-ssh without a host"),
        || async {
            let secret = secrets.get("train-1-ssh").await.ok()?;
            let host = secret.data?.get("host")?.0.clone();
            host.is_empty().then_some(())
        },
    )
    .await;
    instances
        .patch(
            "train-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"powerState": "Stopped"}})),
        )
        .await
        .unwrap();
    eventually(&format!("{namespace}/train-1 STOPPED"), || async {
        let object = instances.get("train-1").await.ok()?;
        (object.data["status"]["vmStatus"] == "STOPPED" && ready(&object)).then_some(())
    })
    .await;

    let pools: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        namespace,
        &resource("gpucloud.io/v1alpha1", "GpuInstancePool"),
    );
    pools
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually(&format!("{namespace}/workers down to 1"), || async {
        let object = pools.get("workers").await.ok()?;
        (object.data["status"]["replicas"] == 1 && ready(&object)).then_some(())
    })
    .await;

    // A tenant names a Secret the operator was not meant to read (a Git deploy key) as cloud
    // credentials and as an SshKey's private-key Secret: both are refused on the Secret's
    // metadata, and its data is never fetched (checked in `assert_secret_reads`).
    deploy::apply_all(
        admin,
        &[
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": PLANTED_SECRET, "namespace": namespace},
                "stringData": {"apiKey": "not-for-the-operator", "ssh-privatekey": "not-for-the-operator"}}),
            json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "Volume",
                "metadata": {"name": "planted-credentials", "namespace": namespace},
                "spec": {"region": "us-east-1", "sizeGb": 10,
                         "credentialsSecretRef": {"name": PLANTED_SECRET}}}),
            json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "SshKey",
                "metadata": {"name": "planted-key", "namespace": namespace},
                "spec": {"privateKeySecret": PLANTED_SECRET}}),
        ],
    )
    .await;
    let mut managed = managed;
    for (kind, name, reason) in [
        ("Volume", "planted-credentials", reason::CREDENTIALS_MISSING),
        ("SshKey", "planted-key", reason::INVALID_SPEC),
    ] {
        let resource = resource("gpucloud.io/v1alpha1", kind);
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), namespace, &resource);
        eventually(&format!("{namespace}/{name} refused"), || async {
            let object = api.get(name).await.ok()?;
            (ready_condition(&object)?["reason"] == reason).then_some(())
        })
        .await;
        managed.push((resource, name.to_string()));
    }

    for (resource, name) in &managed {
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), namespace, resource);
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for (resource, name) in &managed {
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), namespace, resource);
        eventually(&format!("{namespace}/{name} gone"), || async {
            api.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
    }
}

/// The sweeper's Event about the orphan, in the operator's namespace.
async fn wait_for_sweep_event(admin: &kube::Client) {
    let events: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        RELEASE_NAMESPACE,
        &resource("events.k8s.io/v1", "Event"),
    );
    eventually("the orphan sweeper's Event", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| e.data["regarding"]["kind"] == "Lease" && e.name_any().contains("gpucloud"))
            .then_some(())
    })
    .await;
}

/// `Ready=True` for the object's current generation (kstatus).
fn ready(object: &DynamicObject) -> bool {
    object.data["status"]["observedGeneration"].as_i64() == object.metadata.generation
        && ready_condition(object).is_some_and(|c| c["status"] == "True")
}

/// The `Ready` condition.
fn ready_condition(object: &DynamicObject) -> Option<&Value> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while check().await.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within 120s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
