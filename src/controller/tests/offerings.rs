#![allow(clippy::unwrap_used, clippy::expect_used)]
//! GpuOfferings: the default account's catalog as cluster-scoped objects, one per GPU type and
//! region, following the cloud's stock and prices, written only when something changed, and
//! not to be edited by anyone but the operator.

use crate::support;

use gpucloud_api::*;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use std::collections::BTreeMap;
use std::time::Duration;
use support::{Env, eventually};

/// The offerings as (name, available, price, resourceVersion).
async fn offerings(env: &Env) -> BTreeMap<String, (u32, Option<f64>, String)> {
    let api: Api<GpuOffering> = Api::all(env.client.clone());
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| {
            let status = o.status.clone()?;
            Some((
                kube::ResourceExt::name_any(&o),
                (
                    status.available,
                    status.price_per_gpu_hour,
                    o.metadata.resource_version.clone().unwrap_or_default(),
                ),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offerings_show_the_catalog_follow_stock_and_prices_and_are_written_only_when_changed() {
    let env = Env::start().await;
    // Four GPU types in three regions.
    let shown = eventually(30, "twelve offerings", || async {
        let shown = offerings(&env).await;
        (shown.len() == 12).then_some(shown)
    })
    .await;
    assert_eq!(shown["h100-80g.us-east-1"].0, 512);
    assert_eq!(shown["h100-80g.us-east-1"].1, Some(2.99));
    let api: Api<GpuOffering> = Api::all(env.client.clone());
    let h100 = api.get("h100-80g.us-east-1").await.unwrap();
    let status = h100.status.clone().unwrap();
    assert_eq!(
        (h100.spec.gpu_type.as_str(), h100.spec.region.as_str()),
        ("H100-80G", "us-east-1")
    );
    assert_eq!(status.gpu_model, "NVIDIA H100 80GB");
    assert_eq!(
        (
            status.gpu_memory_gb,
            status.vcpus_per_gpu,
            status.ram_gb_per_gpu
        ),
        (80, 16, 180)
    );
    assert_eq!(status.currency.as_deref(), Some("USD"));
    assert!(status.refreshed_at.is_some());

    // Nothing changed over several passes (resync 2 s): nothing written.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        offerings(&env).await,
        shown,
        "unchanged offerings were written"
    );

    // Stock and price changes show within a catalog TTL (5 s) and a pass, on those alone.
    env.simulator
        .set_gpu_stock("H100-80G", "us-east-1", 3)
        .unwrap();
    env.simulator.set_gpu_price("L40S", 0.5).unwrap();
    let changed = eventually(20, "stock and price shown", || async {
        let now = offerings(&env).await;
        // The offerings are written one by one: wait for every one the change concerns.
        let prices_shown = now
            .iter()
            .filter(|(name, _)| name.starts_with("l40s."))
            .all(|(_, (_, price, _))| *price == Some(0.5));
        (now["h100-80g.us-east-1"].0 == 3 && prices_shown).then_some(now)
    })
    .await;
    for (name, (available, price, version)) in &changed {
        let touched = name == "h100-80g.us-east-1" || name.starts_with("l40s.");
        assert_eq!(
            version != &shown[name].2,
            touched,
            "{name}: {available} {price:?}"
        );
    }

    // Nobody edits one.
    let edit = api
        .patch(
            "h100-80g.us-east-1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"region": "eu-west-1"}})),
        )
        .await
        .unwrap_err();
    assert!(edit.to_string().contains("cannot be edited"), "{edit}");
}
