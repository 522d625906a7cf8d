//! The create plan of a GpuInstance, table-tested from `fixtures/create_plans.json`: each case
//! is an object (spec, and status where the cloud's refusals matter), what the create's
//! dereference read (references resolved or waited for, the catalog's stock, the connection
//! Secret's owner) and the plan or the refusal expected.

use super::*;
use gpucloud_cloud::model::{GpuPrice, GpuSpec, Region};
use serde::Deserialize;
use std::collections::BTreeMap;

const FIXTURES: &str = include_str!("fixtures/create_plans.json");

#[derive(Deserialize)]
struct Case {
    case: String,
    spec: serde_json::Value,
    #[serde(default)]
    status: Option<serde_json::Value>,
    reads: Reads,
    expect: Expect,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reads {
    #[serde(default = "absent")]
    connection_secret: SecretOwner,
    boot: Option<Boot>,
    restore: Option<Restore>,
    waiting: Option<Waiting>,
    stock: Vec<(String, String, u32)>,
    #[serde(default)]
    gpu_counts: BTreeMap<String, Vec<u32>>,
}

fn absent() -> SecretOwner {
    SecretOwner::Absent
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Boot {
    image_id: String,
    #[serde(default)]
    ssh_key_ids: Vec<String>,
    startup_script: Option<String>,
    /// A script of this many bytes, for the cloud's limit.
    startup_script_bytes: Option<usize>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Restore {
    snapshot_id: String,
    recorded_region: Option<String>,
    snapshot: CloudSnapshot,
}

#[derive(Deserialize)]
struct Waiting {
    kind: String,
    name: String,
    detail: String,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
enum Expect {
    Create(Created),
    Restore(Restored),
    Error {
        reason: String,
        contains: Vec<String>,
    },
}

#[derive(Deserialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Created {
    region: String,
    gpu_type: String,
    gpu_count: u32,
    image_id: String,
    #[serde(default)]
    ssh_key_ids: Vec<String>,
    startup_script: Option<String>,
    alternative: i32,
    /// `<type> x<count> in <region>: <reason>` per placement passed over.
    #[serde(default)]
    skipped: Vec<String>,
}

#[derive(Deserialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Restored {
    snapshot_id: String,
    region: Option<String>,
    gpu_type: Option<String>,
    gpu_count: Option<i32>,
}

/// The catalog's stock was read at this moment; refusals in a fixture's status are later.
const CATALOG_READ_AT: &str = "2026-01-01T00:00:00Z";

fn instance(case: &Case) -> GpuInstance {
    let mut spec = case.spec.clone();
    let names_a_disk = ["osImage", "imageRef", "source"]
        .iter()
        .any(|field| spec.get(field).is_some());
    if !names_a_disk {
        spec["osImage"] = "ubuntu-22.04".into();
    }
    let mut object = serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
        "metadata": {"name": "train", "namespace": "ml", "uid": "uid-train"},
        "spec": spec,
    });
    if let Some(status) = &case.status {
        object["status"] = status.clone();
    }
    serde_json::from_value(object).unwrap_or_else(|e| panic!("{}: {e}", case.case))
}

fn catalog(reads: &Reads) -> Catalog {
    Catalog {
        read_at: CATALOG_READ_AT.parse().unwrap(),
        stock: reads
            .stock
            .iter()
            .map(|(gpu, region, free)| ((gpu.clone(), region.clone()), *free))
            .collect(),
        gpus: PRICES
            .iter()
            .map(|(gpu, _)| GpuSpec {
                gpu_type: (*gpu).to_string(),
                gpu_counts: reads.gpu_counts.get(*gpu).cloned().unwrap_or_default(),
                ..GpuSpec::default()
            })
            .collect(),
        regions: ["us-east-1", "eu-west-1", "us-west-2"]
            .iter()
            .map(|id| Region {
                id: (*id).to_string(),
                ..Region::default()
            })
            .collect(),
    }
}

const PRICES: [(&str, f64); 4] = [
    ("H100-80G", 2.99),
    ("A100-80G", 1.89),
    ("L40S", 1.10),
    ("RTX-A6000", 0.79),
];

fn pricing() -> PricingBody {
    PricingBody {
        currency: "USD".into(),
        gpus: PRICES
            .iter()
            .map(|(gpu, price)| GpuPrice {
                gpu_type: (*gpu).to_string(),
                price_per_gpu_hour: *price,
            })
            .collect(),
        ..PricingBody::default()
    }
}

fn create_reads(reads: Reads) -> CreateReads {
    let catalog = Arc::new(catalog(&reads));
    let source = match (reads.waiting, reads.boot, reads.restore) {
        (Some(waiting), _, _) => Err(Error::WaitingFor {
            kind: Box::leak(waiting.kind.into_boxed_str()),
            name: waiting.name,
            detail: waiting.detail,
        }),
        (None, Some(boot), None) => Ok(SourceReads::Boot {
            image_id: boot.image_id,
            ssh_key_ids: boot.ssh_key_ids,
            startup_script: boot
                .startup_script_bytes
                .map(|bytes| "#".repeat(bytes))
                .or(boot.startup_script),
        }),
        (None, None, Some(restore)) => Ok(SourceReads::Restore {
            snapshot_id: restore.snapshot_id,
            recorded_region: restore.recorded_region,
            snapshot: Box::new(restore.snapshot),
        }),
        _ => panic!("a fixture reads exactly one of waiting, boot and restore"),
    };
    CreateReads {
        connection_secret: reads.connection_secret,
        source,
        catalog,
        pricing: Arc::new(pricing()),
    }
}

fn skipped_of(placement: &gpucloud_api::PlacementStatus) -> Vec<String> {
    placement
        .skipped
        .iter()
        .map(|s| {
            format!(
                "{} x{} in {}: {}",
                s.gpu_type, s.gpu_count, s.region, s.reason
            )
        })
        .collect()
}

/// What the plan came to, in the fixtures' terms.
fn outcome(planned: Result<InstancePlan, Error>) -> Result<Expect, (String, String)> {
    match planned {
        Err(error) => Err((error.reason().to_string(), error.to_string())),
        Ok(InstancePlan::Create { request, placement }) => Ok(Expect::Create(Created {
            region: request.region,
            gpu_type: request.gpu_type,
            gpu_count: request.gpu_count,
            image_id: request.image_id,
            ssh_key_ids: request.ssh_key_ids,
            startup_script: request.startup_script,
            alternative: placement.chosen.as_ref().map_or(-1, |c| c.alternative),
            skipped: skipped_of(&placement),
        })),
        Ok(InstancePlan::Restore {
            snapshot_id,
            placement,
        }) => {
            let chosen = placement.as_ref().and_then(|p| p.chosen.as_ref());
            Ok(Expect::Restore(Restored {
                snapshot_id,
                region: chosen.map(|c| c.region.clone()),
                gpu_type: chosen.map(|c| c.gpu_type.clone()),
                gpu_count: chosen.map(|c| c.gpu_count),
            }))
        }
    }
}

#[test]
fn every_create_plan_fixture_plans_as_expected() {
    let cases: Vec<Case> = serde_json::from_str(FIXTURES).expect("fixtures/create_plans.json");
    assert!(cases.len() >= 15, "the table lost its cases");
    let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
    let mut failures = Vec::new();
    for case in cases {
        let object = instance(&case);
        let planned = check_spec(&object, now)
            .and_then(|checked| plan(&object, checked, create_reads(case.reads)));
        let got = outcome(planned);
        let matches = match (&case.expect, &got) {
            (Expect::Create(want), Ok(Expect::Create(got))) => want == got,
            (Expect::Restore(want), Ok(Expect::Restore(got))) => want == got,
            (Expect::Error { reason, contains }, Err((got_reason, message))) => {
                reason == got_reason && contains.iter().all(|part| message.contains(part))
            }
            _ => false,
        };
        if !matches {
            failures.push(format!(
                "{}\n  expected {:?}\n  got      {got:?}",
                case.case, case.expect
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
