//! `gpucloud-operator plan` against a running environment: a directory of manifests with a
//! GpuInstance as it runs, a second one whose first alternative is sold out, a Volume grown and
//! a ConfigMap, compared with the cluster and priced from the GpuOfferings, then from the
//! cloud with its quote; nothing written, to the API server or to the cloud. Then what `plan`
//! agrees with `kubectl apply` and the operator on: a manifest the API server refuses (its CEL
//! rules, the GpuPolicies' admission policy) is refused with the server's message; a create a
//! spent Budget holds is shown held; placed with GpuOfferings older than the operator's
//! catalog, the plan says the create may go elsewhere, and the cloud's stock names where.
#![allow(clippy::unwrap_used)]

use crate::support::{self, Env, NAMESPACE, eventually, ready};
use gpucloud_api::{Budget, GpuInstance, GpuOffering, GpuPolicy, Volume};
use gpucloud_cloud::ApiKey;
use gpucloud_controller::tools::plan::core::{Action, Plan, PriceSource};
use gpucloud_controller::tools::plan::{self, Args, Output};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;

fn instance_spec() -> serde_json::Value {
    json!({"region": "us-east-1", "gpuType": "H100-80G", "osImage": "ubuntu-22.04-cuda-12"})
}

/// H100 in us-east-1 (sold out by then), else in eu-west-1.
fn placed_spec() -> serde_json::Value {
    json!({
        "osImage": "ubuntu-22.04-cuda-12",
        "placement": {"alternatives": [
            {"gpuTypes": ["H100-80G"], "regions": ["us-east-1"]},
            {"gpuTypes": ["H100-80G"], "regions": ["eu-west-1"]},
        ]},
    })
}

fn manifest(kind: &str, name: &str, spec: serde_json::Value, labels: serde_json::Value) -> String {
    serde_saphyr::to_string(&json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": spec,
    }))
    .unwrap()
}

/// The API server's write requests and the cloud's calls so far.
fn writes_and_calls(env: &Env) -> (u64, BTreeMap<String, u64>) {
    let writes = env
        .apiserver
        .request_counts()
        .iter()
        .filter(|c| {
            matches!(
                c.verb.as_str(),
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
        })
        .map(|c| c.count)
        .sum();
    (writes, env.simulator.call_counts())
}

fn row<'a>(
    plan: &'a Plan,
    name: &str,
) -> &'a gpucloud_controller::tools::plan::core::PlannedObject {
    plan.objects
        .iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("{name} not in {plan:?}"))
}

/// What the cluster runs before the plan, and what it costs.
struct Running {
    instance_rate: f64,
    data_rate: f64,
    scratch_rate: f64,
}

/// A GpuInstance `running`, Volumes `data` (100 GB) and `scratch` (labelled app=demo), ready
/// with their rates; then the H100s of us-east-1 sold out, as the offerings show; then the
/// operator stopped, so that any write is the plan's.
async fn running_objects(env: &mut Env) -> Running {
    support::create(
        env,
        &support::object::<GpuInstance>("running", instance_spec()),
    )
    .await;
    support::create(
        env,
        &support::object::<Volume>("data", json!({"region": "us-east-1", "sizeGb": 100})),
    )
    .await;
    let mut scratch =
        support::object::<Volume>("scratch", json!({"region": "us-east-1", "sizeGb": 10}));
    scratch.metadata.labels = Some([("app".to_string(), "demo".to_string())].into());
    support::create(env, &scratch).await;
    let running: GpuInstance = ready(env, "running").await;
    let data: Volume = ready(env, "data").await;
    let _: Volume = ready(env, "scratch").await;
    assert_eq!(data.spec.size_gb, 100);
    // The volumes' rates show once the price list is read for their status.
    let (data_rate, scratch_rate) = eventually(30, "the volumes' rates", || async {
        let rate = |v: Volume| v.status.and_then(|s| s.hourly_rate);
        let api = env.api::<Volume>();
        Some((
            rate(api.get("data").await.ok()?)?,
            rate(api.get("scratch").await.ok()?)?,
        ))
    })
    .await;
    env.simulator
        .set_gpu_stock("H100-80G", "us-east-1", 0)
        .unwrap();
    let offerings: Api<GpuOffering> = Api::all(env.client.clone());
    eventually(30, "the offering sold out", || async {
        let offering = offerings.get("h100-80g.us-east-1").await.ok()?;
        (offering.status?.available == 0).then_some(())
    })
    .await;
    env.stop_operator().await;
    Running {
        instance_rate: running.status.as_ref().unwrap().hourly_rate.unwrap(),
        data_rate,
        scratch_rate,
    }
}

/// A directory of manifests: `running` as it is, `placed` (H100 in us-east-1, else
/// eu-west-1), `data` grown to 200 GB and a ConfigMap.
fn manifests_dir(name: &str) -> std::path::PathBuf {
    let app = json!({"app": "demo"});
    let dir = std::env::temp_dir().join(format!("gpucloud-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("more")).unwrap();
    std::fs::write(
        dir.join("running.yaml"),
        manifest("GpuInstance", "running", instance_spec(), json!({})),
    )
    .unwrap();
    std::fs::write(
        dir.join("more/placed.yaml"),
        manifest("GpuInstance", "placed", placed_spec(), app.clone()),
    )
    .unwrap();
    let grown = json!({"region": "us-east-1", "sizeGb": 200});
    let volume = manifest("Volume", "data", grown, app);
    let config = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n";
    std::fs::write(dir.join("more/data.yml"), format!("{volume}---\n{config}")).unwrap();
    dir
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// The plan from the GpuOfferings: each action, the placement past the sold-out region, the
/// running machine's rate, the grown volume unpriced (the offerings show no storage price).
fn check_from_offerings(plan: &Plan, running: &Running) {
    let actions: Vec<(&str, Action)> = plan
        .objects
        .iter()
        .map(|o| (o.name.as_str(), o.action))
        .collect();
    assert_eq!(
        actions,
        [
            ("data", Action::Change),
            ("settings", Action::Skipped),
            ("placed", Action::Create),
            ("running", Action::Unchanged),
            // Labelled app=demo, in the manifests' namespace, not in the manifests.
            ("scratch", Action::Delete),
        ]
    );
    let placed = row(plan, "placed");
    let chosen = placed.placement.as_ref().unwrap();
    assert_eq!(chosen.to_string(), "H100-80G x1 in eu-west-1");
    assert_eq!(chosen.alternative, 1);
    assert_eq!(placed.hourly_cost.after, Some(2.99));
    assert_eq!(placed.hourly_cost.source, Some(PriceSource::Offerings));
    let instance = row(plan, "running");
    assert_eq!(
        instance.placement.as_ref().unwrap().to_string(),
        "H100-80G x1 in us-east-1"
    );
    assert_eq!(instance.hourly_cost.before, Some(running.instance_rate));
    let data = row(plan, "data");
    let changed: Vec<&str> = data.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(changed, ["/spec/sizeGb"]);
    assert_eq!(
        (data.hourly_cost.before, data.hourly_cost.after),
        (Some(running.data_rate), None)
    );
    let total = &plan.total;
    assert_eq!(total.unpriced, 1);
    assert!(
        close(total.before, running.instance_rate + running.scratch_rate),
        "{total:?}"
    );
    assert!(
        close(total.after, running.instance_rate + 2.99),
        "{total:?}"
    );
    assert_eq!(total.currency, "USD");
}

/// The plan from the cloud: its price list prices storage, its quote the GPUs.
fn check_from_cloud(env: &Env, plan: &Plan, running: &Running) {
    let text = plan::render(plan, Output::Text);
    println!("{text}");
    assert!(!text.contains(env.simulator.api_key()));
    let placed = row(plan, "placed");
    assert_eq!(placed.hourly_cost.source, Some(PriceSource::Quote));
    assert_eq!(placed.hourly_cost.after, Some(2.99));
    let data = row(plan, "data");
    assert_eq!(data.hourly_cost.source, Some(PriceSource::PriceList));
    assert!(
        close(data.hourly_cost.after.unwrap(), running.data_rate * 2.0),
        "{data:?}"
    );
    assert_eq!(plan.total.unpriced, 0);
    assert!(close(
        plan.total.delta,
        2.99 + running.data_rate - running.scratch_rate
    ));
    let json: serde_json::Value = serde_json::from_str(&plan::render(plan, Output::Json)).unwrap();
    assert_eq!(json["objects"][2]["placement"]["region"], "eu-west-1");
    assert_eq!(json["objects"][2]["hourlyCost"]["source"], "quote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_compares_places_and_prices_and_writes_nothing() {
    let mut env = Env::start().await;
    let running = running_objects(&mut env).await;
    let dir = manifests_dir("plan-test");
    let before = writes_and_calls(&env);
    let args = Args {
        filename: vec![dir.display().to_string()],
        prune: true,
        selector: Some("app=demo".into()),
        ..Args::default()
    };
    let from_offerings = plan::plan(&env.client, &args, None, &mut std::io::empty())
        .await
        .unwrap();
    println!("{}", plan::render(&from_offerings, Output::Text));
    check_from_offerings(&from_offerings, &running);

    // Without --prune nothing is deleted; with another selector neither.
    for (prune, selector) in [(false, None), (true, Some("app=other".to_string()))] {
        let args = Args {
            prune,
            selector,
            ..args.clone()
        };
        let plan = plan::plan(&env.client, &args, None, &mut std::io::empty())
            .await
            .unwrap();
        assert!(plan.objects.iter().all(|o| o.action != Action::Delete));
    }

    let args = Args {
        cloud_url: Some(env.simulator.base_url()),
        output: Output::Json,
        ..args
    };
    let key = ApiKey::new(env.simulator.api_key());
    let from_cloud = plan::plan(&env.client, &args, Some(key), &mut std::io::empty())
        .await
        .unwrap();
    check_from_cloud(&env, &from_cloud, &running);

    // Nothing written, to the API server or the cloud: the cloud was read and asked a quote.
    let (writes, calls) = writes_and_calls(&env);
    assert_eq!(writes, before.0, "the plan wrote to the API server");
    let made: BTreeMap<&String, u64> = calls
        .iter()
        .map(|(op, n)| (op, n - before.1.get(op).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let made: Vec<&str> = made.keys().map(|op| op.as_str()).collect();
    assert_eq!(
        made,
        [
            "GetGpuSpecs",
            "GetGpuStock",
            "GetPricing",
            "ListRegions",
            "QuotePricing"
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes `documents` as one file of a fresh directory; the plan's `-f` for it.
fn write_manifests(name: &str, documents: &[String]) -> (std::path::PathBuf, Args) {
    let dir = std::env::temp_dir().join(format!("gpucloud-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("manifests.yaml"), documents.join("---\n")).unwrap();
    let args = Args {
        filename: vec![dir.display().to_string()],
        ..Args::default()
    };
    (dir, args)
}

/// The message the API server answers a dry-run create of `manifest` with, as kubectl prints
/// it (a 422's details as `The <kind> "<name>" is invalid: ...`, another error's message).
async fn server_refusal(env: &Env, manifest: &str) -> String {
    let object: GpuInstance = serde_saphyr::from_str(manifest).unwrap();
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match env.api::<GpuInstance>().create(&params, &object).await {
        Ok(_) => panic!("the API server admitted {manifest}"),
        Err(kube::Error::Api(status)) if status.code == 422 => {
            status
                .message
                .replacen("GpuInstance.gpucloud.io", "The GpuInstance", 1)
        }
        Err(kube::Error::Api(status)) => status.message,
        Err(error) => panic!("{error}"),
    }
}

/// The chart's admission policy for GpuPolicies, and a policy allowing us-east-1 only.
async fn install_gpu_policy_admission(env: &Env) {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let manifest = include_str!("../../../deploy/kustomize/gpu-policy-admission.yaml");
    for document in manifest.split("\n---\n").filter(|d| d.contains("kind:")) {
        let value: serde_json::Value = serde_saphyr::from_str(document).unwrap();
        match value["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => {
                let policy: ValidatingAdmissionPolicy = serde_json::from_value(value).unwrap();
                Api::all(env.client.clone())
                    .create(&PostParams::default(), &policy)
                    .await
                    .unwrap();
            }
            Some("ValidatingAdmissionPolicyBinding") => {
                let binding: ValidatingAdmissionPolicyBinding =
                    serde_json::from_value(value).unwrap();
                Api::all(env.client.clone())
                    .create(&PostParams::default(), &binding)
                    .await
                    .unwrap();
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let policy: GpuPolicy = serde_json::from_value(json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": "GpuPolicy",
        "metadata": {"name": "us-only"},
        "spec": {"namespaceSelector": {}, "allowedRegions": ["us-east-1"]},
    }))
    .unwrap();
    Api::<GpuPolicy>::all(env.client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
}

/// A GpuInstance with both `region` and `placement` (the CRD's CEL rules refuse it), one in a
/// region the GpuPolicy's admission policy refuses, and one both let through: the plan shows
/// the first two refused with the API server's own messages, writing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_the_api_server_refuses_is_refused_with_its_message() {
    let env = Env::without_operator(gpucloud_simulator::SimulatorConfig::default()).await;
    install_gpu_policy_admission(&env).await;
    let mut both = placed_spec();
    both["region"] = json!("us-east-1");
    let elsewhere =
        json!({"region": "eu-west-1", "gpuType": "H100-80G", "osImage": "ubuntu-22.04-cuda-12"});
    let documents = [
        manifest("GpuInstance", "both", both, json!({})),
        manifest("GpuInstance", "elsewhere", elsewhere, json!({})),
        manifest("GpuInstance", "fine", instance_spec(), json!({})),
    ];
    let expected = [
        server_refusal(&env, &documents[0]).await,
        server_refusal(&env, &documents[1]).await,
    ];
    assert!(
        expected[0].starts_with("The GpuInstance \"both\" is invalid: ")
            && expected[1].contains("GpuPolicy us-only: spec.region: region eu-west-1"),
        "{expected:?}"
    );
    let (dir, args) = write_manifests("plan-refused", &documents);
    let before = writes_and_calls(&env);
    let planned = plan::plan(&env.client, &args, None, &mut std::io::empty())
        .await
        .unwrap();
    let text = plan::render(&planned, Output::Text);
    println!("{text}");
    let json: serde_json::Value =
        serde_json::from_str(&plan::render(&planned, Output::Json)).unwrap();
    let objects = json["objects"].as_array().unwrap();
    let shown: Vec<(&str, &str)> = objects
        .iter()
        .map(|o| (o["name"].as_str().unwrap(), o["action"].as_str().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            ("both", "refused"),
            ("elsewhere", "refused"),
            ("fine", "create")
        ]
    );
    assert_eq!(objects[0]["refused"], expected[0].as_str());
    assert_eq!(objects[1]["refused"], expected[1].as_str());
    assert!(
        text.contains(&expected[0]) && text.contains(&expected[1]),
        "{text}"
    );
    assert_eq!(writes_and_calls(&env).0, before.0, "the plan wrote");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A Budget whose limit the running machine has spent: a create the plan shows held by it
/// (costing nothing), as the operator then holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_into_a_spent_budget_is_shown_held_by_it() {
    let env = Env::start().await;
    support::create(
        &env,
        &support::object::<GpuInstance>("running", instance_spec()),
    )
    .await;
    let _: GpuInstance = ready(&env, "running").await;
    let budget: Budget = serde_json::from_value(json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": "Budget",
        "metadata": {"name": "team", "namespace": NAMESPACE},
        "spec": {"maxHourlyRate": 3.0},
    }))
    .unwrap();
    Api::<Budget>::namespaced(env.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
    let documents = [manifest("GpuInstance", "more", instance_spec(), json!({}))];
    let (dir, args) = write_manifests("plan-held", &documents);
    let planned = plan::plan(&env.client, &args, None, &mut std::io::empty())
        .await
        .unwrap();
    let text = plan::render(&planned, Output::Text);
    println!("{text}");
    let json: serde_json::Value =
        serde_json::from_str(&plan::render(&planned, Output::Json)).unwrap();
    let more = &json["objects"][0];
    assert_eq!(more["action"], "create");
    assert_eq!(more["held"]["by"], "Budget", "{more}");
    assert_eq!(more["held"]["name"], "team");
    assert_eq!(more["held"]["reason"], "BudgetExceeded");
    assert!(
        more["held"]["message"]
            .as_str()
            .unwrap()
            .contains("over its maxHourlyRate of 3.0000 USD/h"),
        "{more}"
    );
    // Not "+2.99": nothing is billed while it is held.
    assert_eq!(more["hourlyCost"]["after"], 0.0);
    assert_eq!(json["total"]["delta"], 0.0);
    assert!(text.contains("create (held)"), "{text}");
    // The operator holds it as the plan said.
    support::create(
        &env,
        &support::object::<GpuInstance>("more", instance_spec()),
    )
    .await;
    let _: GpuInstance = support::condition(&env, "more", "Ready", "False", "BudgetExceeded").await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stopped machine set to run: priced at its running rate; with a `maxHourlyRate` below
/// that rate, shown held as the operator then holds it (`PriceAboveLimit`, still off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_is_priced_or_shown_held_as_the_operator_holds_it() {
    let env = Env::start().await;
    let mut stopped = instance_spec();
    stopped["powerState"] = "Stopped".into();
    support::create(&env, &support::object::<GpuInstance>("idle", stopped)).await;
    let _: GpuInstance = ready(&env, "idle").await;
    let mut started = instance_spec();
    started["powerState"] = "Running".into();
    let mut capped = started.clone();
    capped["maxHourlyRate"] = 1.0.into();
    let planned_for = |spec: serde_json::Value, name: &'static str| {
        let env = &env;
        async move {
            let documents = [manifest("GpuInstance", "idle", spec, json!({}))];
            let (dir, args) = write_manifests(name, &documents);
            let planned = plan::plan(&env.client, &args, None, &mut std::io::empty())
                .await
                .unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
            let json: serde_json::Value =
                serde_json::from_str(&plan::render(&planned, Output::Json)).unwrap();
            json["objects"][0].clone()
        }
    };
    let starts = planned_for(started, "plan-start").await;
    assert_eq!(starts["action"], "change", "{starts}");
    assert!(starts["held"].is_null(), "{starts}");
    assert_eq!(starts["hourlyCost"]["after"], 2.99, "{starts}");
    let held = planned_for(capped.clone(), "plan-start-held").await;
    assert_eq!(held["held"]["by"], "GpuInstance", "{held}");
    assert_eq!(held["held"]["reason"], "PriceAboveLimit", "{held}");
    assert_eq!(held["hourlyCost"]["after"], held["hourlyCost"]["before"]);
    // The operator holds it as the plan said.
    Api::<GpuInstance>::namespaced(env.client.clone(), NAMESPACE)
        .patch(
            "idle",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": capped})),
        )
        .await
        .unwrap();
    let _: GpuInstance =
        support::condition(&env, "idle", "Stalled", "True", "PriceAboveLimit").await;
    assert_eq!(env.calls("StartInstance"), 0);
}

/// H100s sold out in us-east-1 while the operator was down, the GpuOfferings last refreshed
/// half an hour before: placed with them, the plan says the create may go elsewhere; with the
/// cloud's stock it names eu-west-1, where the operator, started again, creates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_stale_offerings_the_plan_says_so_and_the_cloud_names_the_region() {
    let mut env = Env::start().await;
    let offerings: Api<GpuOffering> = Api::all(env.client.clone());
    eventually(30, "the offerings", || async {
        let offering = offerings.get("h100-80g.us-east-1").await.ok()?;
        (offering.status?.available > 0).then_some(())
    })
    .await;
    env.stop_operator().await;
    let half_an_hour_ago =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_mins(30);
    for offering in offerings.list(&Default::default()).await.unwrap() {
        offerings
            .patch_status(
                &offering.metadata.name.unwrap(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"refreshedAt": half_an_hour_ago.to_string()}})),
            )
            .await
            .unwrap();
    }
    env.simulator
        .set_gpu_stock("H100-80G", "us-east-1", 0)
        .unwrap();
    let documents = [manifest("GpuInstance", "placed", placed_spec(), json!({}))];
    let (dir, args) = write_manifests("plan-stale", &documents);
    let planned = plan::plan(&env.client, &args, None, &mut std::io::empty())
        .await
        .unwrap();
    let text = plan::render(&planned, Output::Text);
    println!("{text}");
    let placed = row(&planned, "placed");
    assert!(
        placed.note.as_deref().is_some_and(|n| n
            .starts_with("placement may differ: a GpuOffering was last refreshed 29m")
            || n.starts_with("placement may differ: a GpuOffering was last refreshed 30m")),
        "{placed:?}"
    );
    let args = Args {
        cloud_url: Some(env.simulator.base_url()),
        ..args
    };
    let key = ApiKey::new(env.simulator.api_key());
    let from_cloud = plan::plan(&env.client, &args, Some(key), &mut std::io::empty())
        .await
        .unwrap();
    let placed = row(&from_cloud, "placed");
    assert_eq!(
        placed.placement.as_ref().unwrap().to_string(),
        "H100-80G x1 in eu-west-1"
    );
    assert_eq!(placed.note, None);
    env.start_operator(support::test_config(&env.simulator));
    support::create(
        &env,
        &support::object::<GpuInstance>("placed", placed_spec()),
    )
    .await;
    let created: GpuInstance = ready(&env, "placed").await;
    let chosen = created.status.unwrap().placement.unwrap().chosen.unwrap();
    assert_eq!(chosen.region, "eu-west-1");
    std::fs::remove_dir_all(&dir).unwrap();
}
