#![allow(clippy::unwrap_used)]

use super::core::{Action, Live, Plan, PriceSource, Prices, plan, to_quote};
use super::holds::Standing;
use super::kinds::{self, Desired, Wanted};
use super::validation::Validator;
use super::{Error, Output, render};
use crate::accounts::catalog::Catalog;
use crate::kinds::budget::Billed;
use crate::tools::manifests;
use gpucloud_api::{Budget, GpuPolicy};
use gpucloud_api::{ChosenPlacement, GpuOffering, GpuOfferingSpec, GpuOfferingStatus};
use gpucloud_cloud::model::{PriceQuoteBody, PricingBody, StoragePrice};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use std::collections::BTreeMap;

fn offering(gpu_type: &str, region: &str, available: u32, price: f64) -> GpuOffering {
    let mut offering = GpuOffering::new(
        &GpuOffering::name_for(gpu_type, region),
        GpuOfferingSpec {
            gpu_type: gpu_type.into(),
            region: region.into(),
        },
    );
    offering.status = Some(GpuOfferingStatus {
        price_per_gpu_hour: Some(price),
        currency: Some("USD".into()),
        available,
        ..GpuOfferingStatus::default()
    });
    offering
}

/// Prices from offerings: H100 (2.99) and A100 (1.89) in us-east-1 and eu-west-1, the H100s
/// of us-east-1 sold out.
fn from_offerings() -> Prices {
    let offerings = [
        offering("H100-80G", "us-east-1", 0, 2.99),
        offering("H100-80G", "eu-west-1", 8, 2.99),
        offering("A100-80G", "us-east-1", 8, 1.89),
        offering("A100-80G", "eu-west-1", 8, 1.89),
    ];
    let (catalog, pricing) = Catalog::from_offerings(&offerings, Timestamp::UNIX_EPOCH);
    Prices {
        catalog,
        pricing,
        source: Some(PriceSource::Offerings),
        ..Prices::default()
    }
}

/// The same catalog with the cloud's price list: NVMe at 0.0002 per GB-hour.
fn from_price_list() -> Prices {
    let mut prices = from_offerings();
    prices.source = Some(PriceSource::PriceList);
    prices.pricing.storage = vec![StoragePrice {
        volume_type: "NVMe".into(),
        price_per_gb_hour: 0.0002,
    }];
    prices
}

fn object(kind: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn desired(values: Vec<serde_json::Value>) -> Vec<Desired> {
    let documents = values
        .into_iter()
        .enumerate()
        .map(|(i, value)| manifests::Document {
            origin: format!("test, document {}", i + 1),
            value,
        })
        .collect();
    kinds::read(documents, &kinds::managed(), "team-a").unwrap()
}

fn instance(name: &str) -> serde_json::Value {
    object(
        "GpuInstance",
        name,
        json!({
            "osImage": "ubuntu-22.04-cuda-12",
            "placement": {"alternatives": [
                {"gpuTypes": ["H100-80G"], "regions": ["us-east-1", "eu-west-1"]},
            ]},
        }),
    )
}

fn volume(name: &str, size_gb: i32) -> serde_json::Value {
    object(
        "Volume",
        name,
        json!({"region": "us-east-1", "sizeGb": size_gb}),
    )
}

/// The live object of `value`, as the cluster would hold it, costing `cost`.
fn live_of(value: &serde_json::Value, cost: Option<f64>, placed: Option<(&str, &str)>) -> Live {
    let read = desired(vec![value.clone()]).remove(0);
    let Wanted::Managed { spec } = read.what else {
        panic!("not managed")
    };
    Live {
        kind: read.kind,
        namespace: read.namespace,
        name: read.name,
        spec,
        cost: cost.map(|c| (c, "USD".to_string())),
        placement: placed.map(|(gpu_type, region)| ChosenPlacement {
            gpu_type: gpu_type.into(),
            gpu_count: 1,
            region: region.into(),
            alternative: 0,
            hourly_rate: cost,
            currency: Some("USD".into()),
        }),
        refused: None,
        machine: None,
    }
}

fn run(
    wanted: Vec<serde_json::Value>,
    live: Vec<Live>,
    pruned: Vec<Live>,
    prices: &Prices,
) -> Plan {
    let paired = desired(wanted)
        .into_iter()
        .map(|d| {
            let found = live
                .iter()
                .find(|l| l.kind == d.kind && l.name == d.name)
                .cloned();
            (d, found)
        })
        .collect();
    plan(
        paired,
        pruned,
        &kinds::managed(),
        prices,
        &mut BTreeMap::new(),
    )
}

fn actions(plan: &Plan) -> Vec<(String, Action)> {
    plan.objects
        .iter()
        .map(|o| (format!("{}/{}", o.kind, o.name), o.action))
        .collect()
}

#[test]
fn each_object_is_created_changed_unchanged_deleted_or_skipped() {
    let running = instance("running");
    let data = volume("data", 100);
    let plan = run(
        vec![
            running.clone(),
            instance("new"),
            volume("data", 200),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}),
        ],
        vec![
            live_of(&running, Some(2.99), Some(("H100-80G", "eu-west-1"))),
            live_of(&data, Some(0.02), None),
        ],
        vec![live_of(&volume("old", 50), Some(0.01), None)],
        &from_price_list(),
    );
    assert_eq!(
        actions(&plan),
        [
            ("GpuInstance/running".to_string(), Action::Unchanged),
            ("GpuInstance/new".to_string(), Action::Create),
            ("Volume/data".to_string(), Action::Change),
            ("ConfigMap/cm".to_string(), Action::Skipped),
            ("Volume/old".to_string(), Action::Delete),
        ]
    );
    let [running, new, data, skipped, old] = plan.objects.as_slice() else {
        panic!("{plan:?}")
    };
    // Unchanged: its placement and rate from the status.
    assert_eq!(running.placement.as_ref().unwrap().region, "eu-west-1");
    assert_eq!(
        (running.hourly_cost.before, running.hourly_cost.after),
        (Some(2.99), Some(2.99))
    );
    assert_eq!(running.hourly_cost.source, Some(PriceSource::Status));
    // Created: placed as the operator places it (the H100s of us-east-1 are sold out).
    assert_eq!(
        new.placement.as_ref().unwrap().to_string(),
        "H100-80G x1 in eu-west-1"
    );
    assert_eq!(
        (new.hourly_cost.before, new.hourly_cost.after),
        (Some(0.0), Some(2.99))
    );
    // Grown from 100 to 200 GB, priced by the price list.
    assert_eq!(data.changes.len(), 1);
    assert_eq!(data.changes[0].path, "/spec/sizeGb");
    assert!(!data.changes[0].immutable);
    assert_eq!(
        (data.hourly_cost.before, data.hourly_cost.after),
        (Some(0.02), Some(0.04))
    );
    assert_eq!(data.hourly_cost.source, Some(PriceSource::PriceList));
    assert_eq!(skipped.note.as_deref(), Some("not a gpucloud.io kind"));
    assert_eq!(
        (old.hourly_cost.before, old.hourly_cost.after),
        (Some(0.01), Some(0.0))
    );
    let total = &plan.total;
    assert_eq!((total.before, total.after), (3.02, 6.02));
    assert_eq!(total.delta, 3.0);
    assert_eq!(total.currency, "USD");
    assert_eq!(total.unpriced, 0);
}

#[test]
fn an_immutable_change_is_noted_as_refused_and_changes_no_cost() {
    let before = volume("data", 100);
    let mut after = volume("data", 100);
    after["spec"]["region"] = json!("eu-west-1");
    after["spec"]["tier"] = json!("Legacy");
    let plan = run(
        vec![after],
        vec![live_of(&before, Some(0.02), None)],
        vec![],
        &from_price_list(),
    );
    let data = &plan.objects[0];
    assert_eq!(data.action, Action::Change);
    let changes: Vec<(&str, bool)> = data
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.immutable))
        .collect();
    assert_eq!(changes, [("/spec/region", true), ("/spec/tier", true)]);
    assert_eq!(
        data.note.as_deref(),
        Some("refused: region, tier immutable (delete and recreate to change)")
    );
    assert_eq!(data.hourly_cost.after, Some(0.02));
}

#[test]
fn defaults_apply_before_comparing() {
    // The live spec as the API server would return it, every default written out.
    let written_out = volume("data", 100);
    let mut live = live_of(&written_out, Some(0.02), None);
    live.spec["volumeType"] = json!("NVMe");
    live.spec["bootable"] = json!(false);
    let plan = run(
        vec![volume("data", 100)],
        vec![live],
        vec![],
        &from_offerings(),
    );
    assert_eq!(plan.objects[0].action, Action::Unchanged);
}

#[test]
fn without_stock_or_within_the_limit_nothing_is_placed_and_the_reason_is_said() {
    let mut sold_out = instance("sold-out");
    sold_out["spec"]["placement"]["alternatives"][0]["regions"] = json!(["us-east-1"]);
    let mut cheap = instance("cheap");
    cheap["spec"]["maxHourlyRate"] = json!(1.0);
    let mut unknown = instance("unknown");
    unknown["spec"]["placement"]["alternatives"][0]["gpuTypes"] = json!(["Z9000"]);
    let plan = run(
        vec![sold_out, cheap, unknown],
        vec![],
        vec![],
        &from_offerings(),
    );
    let notes: Vec<&str> = plan
        .objects
        .iter()
        .map(|o| o.note.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(
        notes,
        [
            "NoCapacity: no placement has GPUs in stock: H100-80G x1 in us-east-1: out of stock (0 free)",
            "PriceAboveLimit: hourly rate 2.9900 exceeds maxHourlyRate 1.0000",
            "InvalidSpec: spec.placement.alternatives[0].gpuTypes: unknown GPU type \"Z9000\" (known: A100-80G, H100-80G)",
        ]
    );
    for object in &plan.objects {
        assert_eq!(object.action, Action::Create);
        assert!(object.placement.is_none());
        assert_eq!(object.hourly_cost.after, Some(0.0));
    }
}

#[test]
fn a_quote_prices_the_gpus_it_quotes_and_says_so() {
    let mut prices = from_offerings();
    let first = run(vec![instance("new")], vec![], vec![], &prices);
    assert_eq!(to_quote(&first), [("H100-80G".to_string(), 1)]);
    prices.quotes.insert(
        ("H100-80G".into(), 1),
        PriceQuoteBody {
            gpu_type: "H100-80G".into(),
            gpu_count: 1,
            hours: 1.0,
            hourly_rate: 2.5,
            total_cost: 2.5,
            currency: "USD".into(),
        },
    );
    let quoted = run(vec![instance("new")], vec![], vec![], &prices);
    let new = &quoted.objects[0];
    assert_eq!(new.hourly_cost.after, Some(2.5));
    assert_eq!(new.hourly_cost.source, Some(PriceSource::Quote));
    // The choice is still made with the price list's rate, as the operator makes it.
    assert_eq!(new.placement.as_ref().unwrap().hourly_rate, Some(2.99));
    assert_eq!(quoted.total.delta, 2.5);
}

#[test]
fn with_offerings_only_storage_has_no_price_and_is_left_out_of_the_totals() {
    let plan = run(
        vec![volume("data", 100), instance("new")],
        vec![],
        vec![],
        &from_offerings(),
    );
    let data = &plan.objects[0];
    assert_eq!(data.hourly_cost.after, None);
    assert_eq!(
        data.note.as_deref(),
        Some("no price for volume type \"NVMe\" (the GpuOfferings show GPU prices only)")
    );
    assert_eq!(plan.total.unpriced, 1);
    assert_eq!(plan.total.after, 2.99);
    let text = render(&plan, Output::Text);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("KIND "), "{text}");
    assert!(lines[1].contains(" -  "), "{text}");
    assert_eq!(
        lines.last().copied(),
        Some(
            "Total per hour: before 0.0000 USD, after 2.9900 USD, delta +2.9900 USD (1 object without a known price left out)"
        )
    );
}

#[test]
fn keys_and_firewalls_are_not_billed() {
    let key = object(
        "SshKey",
        "key",
        json!({"publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOv0iwfbQ4lCUy1g/oY3kqjqH8y4D1d0H1PfZ8n6yK0r x"}),
    );
    let plan = run(vec![key], vec![], vec![], &from_offerings());
    let key = &plan.objects[0];
    assert_eq!(key.action, Action::Create);
    assert_eq!(
        (key.hourly_cost.after, key.hourly_cost.source),
        (Some(0.0), Some(PriceSource::NotBilled))
    );
}

#[test]
fn the_json_document_has_the_documented_shape() {
    let plan = run(vec![instance("new")], vec![], vec![], &from_offerings());
    let json: serde_json::Value = serde_json::from_str(&render(&plan, Output::Json)).unwrap();
    assert_eq!(
        json,
        json!({
            "objects": [{
                "kind": "GpuInstance",
                "namespace": "team-a",
                "name": "new",
                "action": "create",
                "changes": [],
                "placement": {
                    "gpuType": "H100-80G", "gpuCount": 1, "region": "eu-west-1",
                    "alternative": 0, "hourlyRate": 2.99,
                },
                "hourlyCost": {"before": 0.0, "after": 2.99, "source": "offerings"},
                "note": null,
            }],
            "total": {
                "before": 0.0, "after": 2.99, "delta": 2.99, "currency": "USD", "unpriced": 0,
                "held": 0, "refused": 0,
            },
            "checks": {"crds": "", "admission": "", "stock": "", "holds": ""},
        })
    );
}

// === reading the manifests ===

fn origins(documents: &[manifests::Document]) -> Vec<String> {
    documents.iter().map(|d| d.origin.clone()).collect()
}

#[test]
fn directories_are_read_recursively_in_name_order_with_lists_and_stdin() {
    let dir = std::env::temp_dir().join(format!("gpucloud-plan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("b/nested")).unwrap();
    std::fs::write(dir.join("b/nested/z.yml"), "kind: A\n---\n---\nkind: B\n").unwrap();
    std::fs::write(dir.join("a.json"), r#"{"kind": "C"}"#).unwrap();
    std::fs::write(
        dir.join("c.yaml"),
        "kind: List\nitems:\n- kind: D\n- kind: E\n",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), "not: read").unwrap();
    std::fs::write(dir.join("kustomization.yaml"), "resources: [c.yaml]\n").unwrap();
    let mut stdin = "kind: F\n".as_bytes();
    let paths = [dir.display().to_string(), "-".to_string()];
    let documents = manifests::read(&paths, &mut stdin).unwrap();
    let d = dir.display();
    assert_eq!(
        origins(&documents),
        [
            format!("{d}/a.json, document 1"),
            format!("{d}/b/nested/z.yml, document 1"),
            format!("{d}/b/nested/z.yml, document 3"),
            format!("{d}/c.yaml, document 1, items[0]"),
            format!("{d}/c.yaml, document 1, items[1]"),
            "standard input, document 1".to_string(),
        ]
    );
    let kinds: Vec<&str> = documents
        .iter()
        .map(|d| d.value["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["C", "A", "B", "D", "E", "F"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_names_the_file_the_document_and_the_field() {
    let error = manifests::parse("m.yaml", "kind: A\n---\nkind: [unclosed\n").unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("m.yaml, document 2: does not parse: "),
        "{error}"
    );
    let error = manifests::parse("m.yaml", "- a\n").unwrap_err();
    assert!(matches!(error, Error::Parse { .. }), "{error}");
    let error = manifests::read(&["/nonexistent/plan".into()], &mut "".as_bytes()).unwrap_err();
    assert!(
        error.to_string().starts_with("/nonexistent/plan: "),
        "{error}"
    );

    let read = |value: serde_json::Value| {
        let documents = vec![manifests::Document {
            origin: "m.yaml, document 3".into(),
            value,
        }];
        kinds::read(documents, &kinds::managed(), "default").map(|_| ())
    };
    let error = read(object("GpuThing", "x", json!({}))).unwrap_err();
    assert!(
        error.to_string().starts_with(
            "m.yaml, document 3: kind: unknown gpucloud.io kind \"GpuThing\" (known: GpuInstance, "
        ),
        "{error}"
    );
    let error = read(
        volume("data", 100)
            .as_object()
            .map(|o| {
                let mut o = o.clone();
                o["spec"]["sizeGb"] = json!("big");
                serde_json::Value::Object(o)
            })
            .unwrap(),
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("m.yaml, document 3: spec.sizeGb: invalid type: string \"big\""),
        "{error}"
    );
    let mut nameless = volume("data", 100);
    nameless["metadata"] = json!({});
    assert_eq!(
        read(nameless).unwrap_err().to_string(),
        "m.yaml, document 3: metadata.name: missing"
    );
    let mut old = volume("data", 100);
    old["apiVersion"] = json!("gpucloud.io/v1");
    assert_eq!(
        read(old).unwrap_err().to_string(),
        "m.yaml, document 3: apiVersion: Volume is served as gpucloud.io/v1alpha1, not gpucloud.io/v1"
    );
}

#[test]
fn kinds_without_a_cloud_resource_of_their_own_are_listed_not_planned() {
    let budget = object("Budget", "b", json!({}));
    let read = desired(vec![budget]);
    assert_eq!(
        read[0].what,
        Wanted::Skipped("Budget is not planned: it owns no cloud resource of its own".into())
    );
    // The namespace of the manifest, else the default.
    let mut placed = volume("data", 1);
    placed["metadata"]["namespace"] = json!("team-b");
    let read = desired(vec![placed, volume("other", 1)]);
    assert_eq!(read[0].namespace, "team-b");
    assert_eq!(read[1].namespace, "team-a");
}

#[test]
fn offerings_read_back_as_the_catalog_and_gpu_prices() {
    let prices = from_offerings();
    assert_eq!(prices.catalog.gpu_type_names(), "A100-80G, H100-80G");
    assert_eq!(prices.catalog.region_names(), "eu-west-1, us-east-1");
    assert_eq!(prices.catalog.available("H100-80G", "eu-west-1"), 8);
    assert_eq!(prices.catalog.available("H100-80G", "us-east-1"), 0);
    assert_eq!(prices.pricing.currency, "USD");
    assert_eq!(
        crate::kinds::gpu_instance::placement::rate(&prices.pricing, "A100-80G", 2),
        Some(3.78)
    );
    assert_eq!(PricingBody::default().storage.len(), 0);
}

// === what the API server refuses ===

/// The validator of the operator's own CRDs, no admission policy.
fn validator() -> Validator {
    Validator::from_crds(&kinds::managed(), &crate::kinds::registry::crds())
}

fn refusal(value: &serde_json::Value, live: Option<&serde_json::Value>) -> Option<String> {
    let kinds = kinds::managed();
    let kind = value["kind"].as_str().unwrap();
    let info = kinds.iter().find(|k| k.kind == kind).unwrap();
    let mut value = value.clone();
    value["metadata"]["namespace"] = json!("team-a");
    validator().refusal(info, &value, live)
}

#[test]
fn the_api_servers_schema_and_rules_refuse_with_its_message() {
    let both = object(
        "GpuInstance",
        "both",
        json!({
            "region": "us-east-1",
            "osImage": "ubuntu-22.04-cuda-12",
            "placement": {"alternatives": [{"gpuTypes": ["H100-80G"], "regions": ["eu-west-1"]}]},
        }),
    );
    let message = refusal(&both, None).unwrap();
    assert!(
        message.starts_with("The GpuInstance \"both\" is invalid: ")
            && message.contains("set exactly one of spec.region and spec.placement"),
        "{message}"
    );
    let cases: [(serde_json::Value, Option<&str>); 4] = [
        (instance("fine"), None),
        (volume("fine", 10), None),
        (
            volume("zero", 0),
            Some("The Volume \"zero\" is invalid: spec.sizeGb: Invalid value: 0"),
        ),
        (
            object(
                "Volume",
                "typo",
                json!({"region": "us-east-1", "sizeGb": 10, "sizeGB": 20}),
            ),
            Some(
                "Volume in version \"v1alpha1\" cannot be handled as a Volume: strict decoding error: unknown field \"spec.sizeGB\"",
            ),
        ),
    ];
    for (value, refused) in cases {
        let got = refusal(&value, None);
        match refused {
            None => assert_eq!(got, None, "{value}"),
            Some(start) => assert!(
                got.as_deref().is_some_and(|m| m.starts_with(start)),
                "{value}: {got:?}"
            ),
        }
    }
}

#[test]
fn an_update_is_judged_against_the_live_object() {
    let live = object(
        "Volume",
        "data",
        json!({"region": "us-east-1", "sizeGb": 100}),
    );
    let mut live_value = live.clone();
    live_value["metadata"]["namespace"] = json!("team-a");
    // Growing is let through; another region is refused, as immutable.
    assert_eq!(refusal(&volume("data", 200), Some(&live_value)), None);
    let moved = object(
        "Volume",
        "data",
        json!({"region": "eu-west-1", "sizeGb": 100}),
    );
    let message = refusal(&moved, Some(&live_value)).unwrap();
    assert!(
        message.starts_with("The Volume \"data\" is invalid: spec.region"),
        "{message}"
    );
}

#[test]
fn a_refused_object_changes_nothing_and_is_counted() {
    let refused = Desired {
        what: Wanted::Refused {
            message: "The GpuInstance \"both\" is invalid: ...".into(),
            spec: None,
        },
        ..desired(vec![instance("both")]).remove(0)
    };
    let plan = plan(
        vec![(refused, None)],
        vec![],
        &kinds::managed(),
        &from_offerings(),
        &mut BTreeMap::new(),
    );
    let object = &plan.objects[0];
    assert_eq!(object.action, Action::Refused);
    assert_eq!(
        (object.hourly_cost.before, object.hourly_cost.after),
        (Some(0.0), Some(0.0))
    );
    assert_eq!((plan.total.refused, plan.total.after), (1, 0.0));
    assert_eq!(
        plan.refusals(),
        ["The GpuInstance \"both\" is invalid: ..."]
    );
    let text = render(&plan, Output::Text);
    assert!(
        text.contains("The API server would refuse 1 object:\n  The GpuInstance \"both\""),
        "{text}"
    );
}

// === Budgets and GpuPolicies ===

fn budget(name: &str, spec: serde_json::Value, status: serde_json::Value) -> Budget {
    serde_json::from_value(json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": "Budget",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": spec,
        "status": status,
    }))
    .unwrap()
}

fn gpu_policy(name: &str, spec: serde_json::Value) -> GpuPolicy {
    serde_json::from_value(json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": "GpuPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// A machine of the namespace, created, costing `rate`.
fn running(name: &str, rate: f64) -> Billed {
    Billed {
        kind: "GpuInstance".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        hourly_rate: Some(rate),
        currency: Some("USD".into()),
        create_started: true,
        created: true,
        cloud_name: None,
        external_id: Some(format!("i-{name}")),
        foreign_name: false,
        account: None,
        created_at: None,
        may_power_off: true,
        off: false,
        deleting: false,
        may_delete: true,
        gpus: 1,
    }
}

/// The plan of `wanted` creates in team-a, governed by `standing`.
fn held_plan(wanted: Vec<serde_json::Value>, standing: Standing) -> Plan {
    let paired = desired(wanted).into_iter().map(|d| (d, None)).collect();
    let mut standing = BTreeMap::from([("team-a".to_string(), standing)]);
    plan(
        paired,
        vec![],
        &kinds::managed(),
        &from_offerings(),
        &mut standing,
    )
}

fn holds(plan: &Plan) -> Vec<Option<(String, String, String)>> {
    plan.objects
        .iter()
        .map(|o| {
            o.held
                .as_ref()
                .map(|h| (h.by.clone(), h.name.clone(), h.reason.clone()))
        })
        .collect()
}

#[test]
fn a_create_a_budget_or_policy_refuses_is_held_and_costs_nothing() {
    let held = |by: &str, name: &str, reason: &str| {
        Some((by.to_string(), name.to_string(), reason.to_string()))
    };
    let rate_budget = |max: f64| budget("rate", json!({"maxHourlyRate": max}), json!({}));
    let with_budget = |b: Budget, objects: Vec<Billed>| Standing {
        budgets: vec![(b, objects)],
        ..Standing::default()
    };
    let spent = budget(
        "spend",
        json!({"maxHourlyRate": 100.0, "maxSpend": 20.0}),
        json!({"spent": 20.5}),
    );
    let cases = [
        // Room for one H100 (2.99) of two: the second is held by what the first reserves.
        (
            with_budget(rate_budget(5.0), vec![]),
            vec![None, held("Budget", "rate", "BudgetExceeded")],
        ),
        // The namespace's running machine leaves no room.
        (
            with_budget(rate_budget(5.0), vec![running("old", 2.5)]),
            vec![
                held("Budget", "rate", "BudgetExceeded"),
                held("Budget", "rate", "BudgetExceeded"),
            ],
        ),
        (
            with_budget(rate_budget(10.0), vec![running("old", 2.5)]),
            vec![None, None],
        ),
        // The period's spend is used up.
        (
            with_budget(spent, vec![]),
            vec![
                held("Budget", "spend", "BudgetExceeded"),
                held("Budget", "spend", "BudgetExceeded"),
            ],
        ),
        (
            with_budget(
                budget(
                    "euro",
                    json!({"maxHourlyRate": 100.0, "currency": "EUR"}),
                    json!({}),
                ),
                vec![],
            ),
            vec![
                held("Budget", "euro", "CurrencyMismatch"),
                held("Budget", "euro", "CurrencyMismatch"),
            ],
        ),
        // A policy forbidding the GPU type refuses; one capping machines at one holds the
        // second.
        (
            Standing {
                policies: vec![gpu_policy(
                    "a100-only",
                    json!({"namespaceSelector": {}, "allowedGpuTypes": ["A100-80G"]}),
                )],
                ..Standing::default()
            },
            vec![
                held("GpuPolicy", "a100-only", "PolicyViolation"),
                held("GpuPolicy", "a100-only", "PolicyViolation"),
            ],
        ),
        (
            Standing {
                policies: vec![gpu_policy(
                    "one-each",
                    json!({"namespaceSelector": {}, "namespaceLimits": {"machines": 1}}),
                )],
                ..Standing::default()
            },
            vec![None, held("GpuPolicy", "one-each", "PolicyLimit")],
        ),
    ];
    for (standing, expected) in cases {
        let plan = held_plan(vec![instance("first"), instance("second")], standing);
        assert_eq!(holds(&plan), expected, "{plan:#?}");
        let running = expected.iter().filter(|h| h.is_none()).count();
        assert!(
            (plan.total.after - 2.99 * running as f64).abs() < 1e-9,
            "{:?}",
            plan.total
        );
        assert_eq!(plan.total.held, 2 - running);
    }
}

#[test]
fn a_held_create_says_by_what_and_why() {
    let standing = Standing {
        budgets: vec![(
            budget("team", json!({"maxHourlyRate": 1.0}), json!({})),
            vec![],
        )],
        ..Standing::default()
    };
    let plan = held_plan(vec![instance("new")], standing);
    let text = render(&plan, Output::Text);
    assert!(
        text.contains("create (held)")
            && text.contains(
                "held (BudgetExceeded): Budget team: this create would add 2.9900 USD/h to the 0.0000 USD/h counted, over its maxHourlyRate of 1.0000 USD/h"
            ),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&render(&plan, Output::Json)).unwrap();
    assert_eq!(json["objects"][0]["held"]["by"], "Budget");
    assert_eq!(json["objects"][0]["held"]["name"], "team");
    assert_eq!(json["objects"][0]["hourlyCost"]["after"], 0.0);
}

/// A stopped H100 in eu-west-1, and its live object (costing 0.299 off).
fn stopped_h100() -> (serde_json::Value, Live) {
    let stopped = object(
        "GpuInstance",
        "train",
        json!({"osImage": "ubuntu-22.04-cuda-12", "region": "eu-west-1",
               "gpuType": "H100-80G", "powerState": "Stopped"}),
    );
    let live = Live {
        machine: Some(super::core::LiveMachine {
            uid: "uid-train".into(),
            off: true,
            gpu_type: "H100-80G".into(),
            gpu_count: 1,
        }),
        ..live_of(&stopped, Some(0.299), None)
    };
    (stopped, live)
}

type Hold3 = Option<(String, String, String)>;

/// (case, the spec applied, what governs team-a, the hold, the cost after).
fn start_cases() -> Vec<(
    &'static str,
    serde_json::Value,
    Standing,
    Hold3,
    Option<f64>,
)> {
    let held = |by: &str, name: &str, reason: &str| {
        Some((by.to_string(), name.to_string(), reason.to_string()))
    };
    let (stopped, _) = stopped_h100();
    let started = |extra: serde_json::Value| {
        let mut value = stopped.clone();
        value["spec"]["powerState"] = "Running".into();
        for (key, field) in extra.as_object().into_iter().flatten() {
            value["spec"][key] = field.clone();
        }
        value
    };
    let keeping_off = budget(
        "team",
        json!({"maxHourlyRate": 3.0, "onExceeded": "Stop"}),
        json!({"poweredOff": [{"name": "train", "uid": "uid-train", "hourlyRate": 2.99,
                               "since": "2026-12-07T00:00:00Z", "powerState": "Stopped"}]}),
    );
    let capped = gpu_policy(
        "cap",
        json!({"namespaceSelector": {},
               "namespaceLimits": {"hourlyRate": 4.0, "currency": "USD"}}),
    );
    let with_policy = |policy: GpuPolicy, objects: Vec<Billed>| Standing {
        policies: vec![policy],
        objects,
        ..Standing::default()
    };
    let window =
        json!({"timeZone": "UTC", "windows": [{"days": ["Mon"], "from": "09:00", "to": "17:00"}]});
    vec![
        (
            "starts",
            started(json!({})),
            Standing::default(),
            None,
            Some(2.99),
        ),
        (
            "within its own limit",
            started(json!({"maxHourlyRate": 3.0})),
            Standing::default(),
            None,
            Some(2.99),
        ),
        (
            "above its own limit",
            started(json!({"maxHourlyRate": 1.0})),
            Standing::default(),
            held("GpuInstance", "spec.maxHourlyRate", "PriceAboveLimit"),
            Some(0.299),
        ),
        (
            "kept off by a Budget",
            started(json!({})),
            Standing {
                budgets: vec![(keeping_off, vec![])],
                ..Standing::default()
            },
            held("Budget", "team", "BudgetExceeded"),
            Some(0.299),
        ),
        (
            "within the policy's rate cap",
            started(json!({})),
            with_policy(capped.clone(), vec![running("other", 1.0)]),
            None,
            Some(2.99),
        ),
        (
            "over the policy's rate cap",
            started(json!({})),
            with_policy(capped, vec![running("other", 1.5)]),
            held("GpuPolicy", "cap", "PolicyLimit"),
            Some(0.299),
        ),
        (
            "a schedule decides at its moments",
            started(json!({"schedule": window})),
            Standing::default(),
            None,
            Some(0.299),
        ),
    ]
}

/// A stopped machine whose new spec asks for it running: it starts at the price list's rate,
/// unless its `maxHourlyRate`, a Budget keeping it off or a GpuPolicy's rate cap holds the
/// start, as the operator's start would be held; a schedule leaves it to the operator.
#[test]
fn a_start_is_priced_at_the_running_rate_or_held_as_the_operator_holds_it() {
    let (_, live) = stopped_h100();
    for (case, wanted, standing, expected, after) in start_cases() {
        let paired = desired(vec![wanted])
            .into_iter()
            .map(|d| (d, Some(live.clone())))
            .collect();
        let mut standing = BTreeMap::from([("team-a".to_string(), standing)]);
        let plan = plan(
            paired,
            vec![],
            &kinds::managed(),
            &from_price_list(),
            &mut standing,
        );
        assert_eq!(holds(&plan), vec![expected.clone()], "{case}: {plan:#?}");
        assert_eq!(plan.objects[0].hourly_cost.after, after, "{case}");
        let text = render(&plan, Output::Text);
        if expected.is_some() {
            assert!(text.contains("1 held start counted off"), "{case}: {text}");
        }
    }
}

// === how fresh the stock is ===

#[test]
fn offerings_refreshed_longer_ago_than_the_catalog_ttl_may_place_elsewhere() {
    let at = |offering: GpuOffering, refreshed: Option<i64>| {
        let mut offering = offering;
        offering.status.as_mut().unwrap().refreshed_at = refreshed.map(|s| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::from_second(s).unwrap())
        });
        offering
    };
    let now = Timestamp::from_second(10_000).unwrap();
    let ttl = std::time::Duration::from_secs(60);
    let h100 = || offering("H100-80G", "us-east-1", 0, 2.99);
    let a100 = || offering("A100-80G", "us-east-1", 8, 1.89);
    // Each offering is refreshed at least every ten TTLs while the operator runs: one older
    // than that (and a TTL) says it does not.
    let cases = [
        (
            vec![at(h100(), Some(9_990)), at(a100(), Some(9_400))],
            false,
            "within the last 10m",
        ),
        (
            vec![at(h100(), Some(9_990)), at(a100(), Some(9_000))],
            true,
            "last refreshed 16m 40s ago",
        ),
        (
            vec![at(h100(), Some(9_990)), at(a100(), None)],
            true,
            "unknown age",
        ),
    ];
    for (offerings, stale, said) in cases {
        let (note, stock) = super::core::stock_age(&offerings, now, ttl);
        assert_eq!(note.is_some(), stale, "{note:?}");
        assert!(
            stock.contains(said) || note.as_deref().is_some_and(|n| n.contains(said)),
            "{stock} / {note:?}"
        );
    }
    // A placement chosen with stale stock says so.
    let mut prices = from_offerings();
    prices.stale_stock = Some("placement may differ: ...".into());
    let plan = run(vec![instance("new")], vec![], vec![], &prices);
    assert_eq!(
        plan.objects[0].note.as_deref(),
        Some("placement may differ: ...")
    );
}

#[test]
fn a_plan_with_a_refusal_fails_carrying_its_output() {
    let fine = run(vec![instance("new")], vec![], vec![], &from_offerings());
    assert_eq!(
        super::finish(&fine, Output::Text).unwrap(),
        render(&fine, Output::Text)
    );
    let refused = Desired {
        what: Wanted::Refused {
            message: "The GpuInstance \"both\" is invalid: ...".into(),
            spec: None,
        },
        ..desired(vec![instance("both")]).remove(0)
    };
    let plan = plan(
        vec![(refused, None)],
        vec![],
        &kinds::managed(),
        &from_offerings(),
        &mut BTreeMap::new(),
    );
    match super::finish(&plan, Output::Json) {
        Err(Error::Refused { output, messages }) => {
            assert_eq!(output, render(&plan, Output::Json));
            assert_eq!(messages, "The GpuInstance \"both\" is invalid: ...");
        }
        other => panic!("{other:?}"),
    }
}

/// The deletion-protection policy the chart ships, bound.
fn protecting() -> Validator {
    let manifest = gpucloud_api::deletion_protection::POLICY_MANIFEST;
    let (mut policies, mut bindings) = (Vec::new(), Vec::new());
    for value in serde_saphyr::from_multiple::<serde_json::Value>(manifest).unwrap() {
        match value["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => policies.push(value),
            Some("ValidatingAdmissionPolicyBinding") => bindings.push(value),
            _ => {}
        }
    }
    let (bound, _) = super::validation::bound(policies, bindings);
    assert!(!bound.is_empty());
    validator().admitting(bound)
}

#[test]
fn a_protected_object_pruned_is_refused_and_stays() {
    let kinds = kinds::managed();
    let info = kinds.iter().find(|k| k.kind == "Volume").unwrap();
    let mut value = volume("kept", 10);
    value["metadata"]["namespace"] = json!("team-a");
    assert_eq!(protecting().delete_refusal(info, &value), None);
    value["metadata"]["annotations"] = json!({"gpucloud.io/deletion-protection": "true"});
    let message = protecting().delete_refusal(info, &value).unwrap();
    assert!(
        message.starts_with("volumes.gpucloud.io \"kept\" is forbidden: ValidatingAdmissionPolicy")
            && message.contains("is protected from deletion"),
        "{message}"
    );
    let mut pruned = live_of(&volume("kept", 10), Some(0.002), None);
    pruned.refused = Some(message);
    let plan = run(vec![], vec![], vec![pruned], &from_offerings());
    let kept = &plan.objects[0];
    assert_eq!(kept.action, Action::Refused);
    assert_eq!(
        (kept.hourly_cost.before, kept.hourly_cost.after),
        (Some(0.002), Some(0.002))
    );
}

#[test]
fn a_refused_change_still_says_what_it_would_change() {
    let live = live_of(&volume("data", 100), Some(0.02), None);
    let moved = object(
        "Volume",
        "data",
        json!({"region": "eu-west-1", "sizeGb": 100}),
    );
    let Wanted::Managed { spec } = desired(vec![moved]).remove(0).what else {
        panic!("not managed")
    };
    let refused = Desired {
        what: Wanted::Refused {
            message: "The Volume \"data\" is invalid: spec.region: ...".into(),
            spec: Some(spec),
        },
        ..desired(vec![volume("data", 100)]).remove(0)
    };
    let plan = plan(
        vec![(refused, Some(live))],
        vec![],
        &kinds::managed(),
        &from_offerings(),
        &mut BTreeMap::new(),
    );
    let data = &plan.objects[0];
    assert_eq!(data.action, Action::Refused);
    let changed: Vec<(&str, bool)> = data
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.immutable))
        .collect();
    assert_eq!(changed, [("/spec/region", true)]);
    assert_eq!(
        (data.hourly_cost.before, data.hourly_cost.after),
        (Some(0.02), Some(0.02))
    );
}
