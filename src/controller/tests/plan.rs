//! `gpucloud-operator plan` against a running environment: a directory of manifests with a
//! GpuInstance as it runs, a second one whose first alternative is sold out, a Volume grown and
//! a ConfigMap, compared with the cluster and priced from the GpuOfferings, then from the
//! cloud with its quote; nothing written, to the API server or to the cloud.
#![allow(clippy::unwrap_used)]

use crate::support::{self, Env, NAMESPACE, eventually, ready};
use gpucloud_api::{GpuInstance, GpuOffering, Volume};
use gpucloud_cloud::ApiKey;
use gpucloud_controller::tools::plan::core::{Action, Plan, PriceSource};
use gpucloud_controller::tools::plan::{self, Args, Output};
use kube::Api;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_compares_places_and_prices_and_writes_nothing() {
    let mut env = Env::start().await;
    let app = json!({"app": "demo"});
    support::create(
        &env,
        &support::object::<GpuInstance>("running", instance_spec()),
    )
    .await;
    support::create(
        &env,
        &support::object::<Volume>("data", json!({"region": "us-east-1", "sizeGb": 100})),
    )
    .await;
    let mut scratch =
        support::object::<Volume>("scratch", json!({"region": "us-east-1", "sizeGb": 10}));
    scratch.metadata.labels = Some([("app".to_string(), "demo".to_string())].into());
    support::create(&env, &scratch).await;
    let running: GpuInstance = ready(&env, "running").await;
    let data: Volume = ready(&env, "data").await;
    let _: Volume = ready(&env, "scratch").await;
    let running_rate = running.status.as_ref().unwrap().hourly_rate.unwrap();
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
    assert_eq!(data.spec.size_gb, 100);

    // The H100s of us-east-1 sold out, as the offerings show.
    env.simulator
        .set_gpu_stock("H100-80G", "us-east-1", 0)
        .unwrap();
    let offerings: Api<GpuOffering> = Api::all(env.client.clone());
    eventually(30, "the offering sold out", || async {
        let offering = offerings.get("h100-80g.us-east-1").await.ok()?;
        (offering.status?.available == 0).then_some(())
    })
    .await;
    // From here on any write is the plan's.
    env.stop_operator().await;

    let dir = std::env::temp_dir().join(format!("gpucloud-plan-test-{}", std::process::id()));
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
    let volume = manifest("Volume", "data", grown, app.clone());
    let config = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n";
    std::fs::write(dir.join("more/data.yml"), format!("{volume}---\n{config}")).unwrap();

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
    let actions: Vec<(&str, Action)> = from_offerings
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
    let placed = row(&from_offerings, "placed");
    let chosen = placed.placement.as_ref().unwrap();
    assert_eq!(chosen.to_string(), "H100-80G x1 in eu-west-1");
    assert_eq!(chosen.alternative, 1);
    assert_eq!(placed.hourly_cost.after, Some(2.99));
    assert_eq!(placed.hourly_cost.source, Some(PriceSource::Offerings));
    let running = row(&from_offerings, "running");
    assert_eq!(
        running.placement.as_ref().unwrap().to_string(),
        "H100-80G x1 in us-east-1"
    );
    assert_eq!(running.hourly_cost.before, Some(running_rate));
    let data = row(&from_offerings, "data");
    let changed: Vec<&str> = data.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(changed, ["/spec/sizeGb"]);
    // The offerings show no storage price: not guessed.
    assert_eq!(
        (data.hourly_cost.before, data.hourly_cost.after),
        (Some(data_rate), None)
    );
    let total = &from_offerings.total;
    assert_eq!(total.unpriced, 1);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(
        close(total.before, running_rate + scratch_rate),
        "{total:?}"
    );
    assert!(close(total.after, running_rate + 2.99), "{total:?}");
    assert_eq!(total.currency, "USD");

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

    // From the cloud: its price list prices storage, its quote the GPUs.
    let args = Args {
        cloud_url: Some(env.simulator.base_url()),
        output: Output::Json,
        ..args
    };
    let key = ApiKey::new(env.simulator.api_key());
    let from_cloud = plan::plan(&env.client, &args, Some(key), &mut std::io::empty())
        .await
        .unwrap();
    let text = plan::render(&from_cloud, Output::Text);
    println!("{text}");
    assert!(!text.contains(env.simulator.api_key()));
    let placed = row(&from_cloud, "placed");
    assert_eq!(placed.hourly_cost.source, Some(PriceSource::Quote));
    assert_eq!(placed.hourly_cost.after, Some(2.99));
    let data = row(&from_cloud, "data");
    assert_eq!(data.hourly_cost.source, Some(PriceSource::PriceList));
    assert!(
        close(data.hourly_cost.after.unwrap(), data_rate * 2.0),
        "{data:?}"
    );
    assert_eq!(from_cloud.total.unpriced, 0);
    assert!(close(
        from_cloud.total.delta,
        2.99 + data_rate - scratch_rate
    ));
    let json: serde_json::Value =
        serde_json::from_str(&plan::render(&from_cloud, Output::Json)).unwrap();
    assert_eq!(json["objects"][2]["placement"]["region"], "eu-west-1");
    assert_eq!(json["objects"][2]["hourlyCost"]["source"], "quote");

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
