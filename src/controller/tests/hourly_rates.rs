#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What the kinds billed by size say they cost: a Volume (made, and cloned then grown), a
//! Snapshot and an Image show the rate of the cloud's price list (`GET /pricing`) for their
//! size, in its currency, and a create is planned (`ManagedKind::planned_hourly_rate`) at the
//! rate the status later shows.

use crate::support;

use gpucloud_api::*;
use gpucloud_cloud::ApiKey;
use gpucloud_controller::accounts::account::Accounts;
use gpucloud_controller::flow::kind::{KindDeclarations, ManagedKind};
use gpucloud_controller::kinds::volume::VolumePlan;
use gpucloud_controller::kinds::{snapshot, volume};
use support::*;

/// Waits until `name` is Ready and shows an hourly rate.
async fn priced<K>(env: &Env, name: &str, rate: impl Fn(&K) -> Option<f64>) -> (K, f64)
where
    K: TestKind,
{
    let object: K = ready(env, name).await;
    let api = env.api::<K>();
    let object = match rate(&object) {
        Some(_) => object,
        None => {
            eventually(30, &format!("{name} shows an hourly rate"), || {
                let api = api.clone();
                let rate = &rate;
                async move { api.get(name).await.ok().filter(|o| rate(o).is_some()) }
            })
            .await
        }
    };
    let shown = rate(&object).unwrap();
    (object, shown)
}

/// Equal to the twelve significant digits a status shows.
fn close(shown: f64, expected: f64) -> bool {
    (shown - expected).abs() <= 1e-11 * expected.abs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_snapshots_and_images_show_the_price_lists_rate_and_are_planned_at_it() {
    let env = Env::start().await;
    create_a_machine_two_volumes_a_snapshot_and_an_image(&env).await;

    let rate_of_volume = |v: &Volume| v.status.as_ref().and_then(|s| s.hourly_rate);
    let (scratch, scratch_rate) = priced(&env, "scratch", rate_of_volume).await;
    let (copy, copy_rate) = priced(&env, "copy", rate_of_volume).await;
    let (epoch, snapshot_rate) = priced(&env, "epoch-3", |s: &Snapshot| {
        s.status.as_ref().and_then(|s| s.hourly_rate)
    })
    .await;
    let (golden, image_rate) = priced(&env, "golden", |i: &Image| {
        i.status.as_ref().and_then(|s| s.hourly_rate)
    })
    .await;

    // The cloud's own price list and records.
    let cloud = cloud_client(&env);
    let pricing = cloud.get_pricing().await.unwrap();
    let ssd = pricing
        .storage
        .iter()
        .find(|p| p.volume_type == "SSD")
        .expect("the price list prices SSD")
        .price_per_gb_hour;
    let scratch_id = scratch.cloud_status().external_id.unwrap();
    let copy_id = copy.cloud_status().external_id.unwrap();
    let snapshot_id = epoch.cloud_status().external_id.unwrap();
    let image_id = golden.cloud_status().external_id.unwrap();
    let scratch_record = cloud.get_volume(&scratch_id).await.unwrap();
    let copy_record = cloud.get_volume(&copy_id).await.unwrap();
    let snapshot_record = cloud.get_snapshot(&snapshot_id).await.unwrap();
    let image_record = cloud.get_image(&image_id).await.unwrap();
    assert_eq!((scratch_record.size, copy_record.size), (50, 80));
    assert!(snapshot_record.size > 0, "{snapshot_record:?}");
    assert_eq!(image_record.size, snapshot_record.size);

    let currencies = [
        scratch.status.as_ref().unwrap().currency.clone(),
        copy.status.as_ref().unwrap().currency.clone(),
        epoch.status.as_ref().unwrap().currency.clone(),
        golden.status.as_ref().unwrap().currency.clone(),
    ];
    assert!(
        currencies
            .iter()
            .all(|c| c.as_ref() == Some(&pricing.currency)),
        "{currencies:?} against the price list's {}",
        pricing.currency
    );
    for (what, shown, expected) in [
        ("Volume scratch", scratch_rate, ssd * 50.0),
        ("Volume copy", copy_rate, ssd * 80.0),
        (
            "Snapshot epoch-3",
            snapshot_rate,
            pricing.snapshot_price_per_gb_hour * snapshot_record.size as f64,
        ),
        (
            "Image golden",
            image_rate,
            pricing.image_price_per_gb_hour * image_record.size as f64,
        ),
    ] {
        assert!(expected > 0.0, "{what}: the price list gives no price");
        assert!(
            close(shown, expected),
            "{what} shows {shown}, the price list says {expected}"
        );
    }
    // `gpucloud_hourly_cost` sums what the objects say.
    assert_eq!(
        scratch.hourly_cost(),
        Some((scratch_rate, pricing.currency.clone()))
    );
    assert_eq!(
        golden.hourly_cost(),
        Some((image_rate, pricing.currency.clone()))
    );

    settled_statuses_are_not_written_again(&env).await;

    // A create is planned at the rate the status then shows.
    creates_are_planned_at_the_shown_rates(
        &env,
        (&scratch, &epoch, &snapshot_id),
        [scratch_rate, copy_rate, snapshot_rate, image_rate],
    )
    .await;
}

/// A machine, an SSD volume and a clone of it grown to 80 GB, a snapshot of the machine and an
/// image of the snapshot.
async fn create_a_machine_two_volumes_a_snapshot_and_an_image(env: &Env) {
    create(
        env,
        &object::<GpuInstance>(
            "trainer",
            serde_json::json!({
                "region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
                "osImage": "ubuntu-22.04-cuda-12",
            }),
        ),
    )
    .await;
    create(
        env,
        &object::<Volume>(
            "scratch",
            serde_json::json!({"region": "us-east-1", "sizeGb": 50, "volumeType": "SSD"}),
        ),
    )
    .await;
    // A clone has its source's size and type, then is grown to the spec's size.
    create(
        env,
        &object::<Volume>(
            "copy",
            serde_json::json!({
                "region": "us-east-1", "sizeGb": 80, "volumeType": "SSD",
                "source": {"volumeRef": {"name": "scratch"}},
            }),
        ),
    )
    .await;
    create(
        env,
        &object::<Snapshot>(
            "epoch-3",
            serde_json::json!({"instanceRef": {"name": "trainer"}}),
        ),
    )
    .await;
    create(
        env,
        &object::<Image>(
            "golden",
            serde_json::json!({"snapshotRef": {"name": "epoch-3"}}),
        ),
    )
    .await;
}

/// Settled, a rate read back from the API server is the rate computed again: no status is
/// written again on the rechecks (one per resync interval, 2 s here).
async fn settled_statuses_are_not_written_again(env: &Env) {
    let status_writes = || {
        env.apiserver
            .requests()
            .iter()
            .filter(|r| {
                r.subresource == "status"
                    && matches!(r.verb.as_str(), "update" | "patch")
                    && ["volumes", "snapshots", "images"].contains(&r.resource.as_str())
            })
            .count()
    };
    let before = status_writes();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(
        status_writes(),
        before,
        "settled objects wrote their status again"
    );
}

/// Each kind's create, planned as its `plan_create` makes it and priced through an account of
/// the same cloud, is planned at the rate its status `shown` (scratch, copy, epoch-3, golden).
async fn creates_are_planned_at_the_shown_rates(
    env: &Env,
    (scratch, epoch, snapshot_id): (&Volume, &Snapshot, &str),
    [scratch_rate, copy_rate, snapshot_rate, image_rate]: [f64; 4],
) {
    let cloud = cloud_client(env);
    let scratch_id = scratch.cloud_status().external_id.unwrap();
    let snapshot_id = snapshot_id.to_string();
    let accounts = Accounts::new(test_config(&env.simulator).cloud, env.client.clone(), None);
    let account = accounts
        .account_for(ApiKey::new(env.simulator.api_key()))
        .unwrap();
    let made = VolumePlan::Create(volume::create_request(&scratch.spec).unwrap());
    let cloned = VolumePlan::Clone {
        source_id: scratch_id,
        size_gb: 80,
    };
    let trainer = ready_id::<GpuInstance>(env, "trainer").await;
    let machine = cloud.get_instance(&trainer).await.unwrap();
    let snapshotted = snapshot::snapshot_plan(epoch, trainer, &machine).unwrap();
    let planned = [
        (
            "Volume scratch",
            Volume::planned_hourly_rate(&made, &account).await.unwrap(),
            scratch_rate,
        ),
        (
            "Volume copy",
            Volume::planned_hourly_rate(&cloned, &account)
                .await
                .unwrap(),
            copy_rate,
        ),
        (
            "Snapshot epoch-3",
            Snapshot::planned_hourly_rate(&snapshotted, &account)
                .await
                .unwrap(),
            snapshot_rate,
        ),
        (
            "Image golden",
            Image::planned_hourly_rate(&snapshot_id, &account)
                .await
                .unwrap(),
            image_rate,
        ),
    ];
    for (what, planned, shown) in planned {
        assert_eq!(planned, Some(shown), "{what}: planned against shown");
    }
}
