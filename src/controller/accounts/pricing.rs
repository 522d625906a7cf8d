//! What a resource the cloud bills by its size costs per hour: its size in GB times a price
//! per GB-hour from the account's price list (`GET /pricing`, cached by `Account::pricing`).
//! Volumes, Snapshots and Images are billed this way; a GpuInstance's record says its rate.
//!
//! The same functions give the rate a status shows ([`crate::flow::kind::KindDeclarations::priced`]) and
//! the rate a create is planned at ([`crate::flow::kind::ManagedKind::planned_hourly_rate`]), so the
//! two agree.

use crate::flow::error::Error;
use gpucloud_api::CloudStatus;
use gpucloud_cloud::model::PricingBody;

/// The price per GB-hour of volume type `volume_type`, as the price list's `storage` names it
/// (compared without regard to case: the record says `NVMe` where a spec may say `nvme`).
pub fn storage_price(pricing: &PricingBody, volume_type: &str) -> Option<f64> {
    let listed = |exact: bool| {
        pricing.storage.iter().find(|p| {
            if exact {
                p.volume_type == volume_type
            } else {
                p.volume_type.eq_ignore_ascii_case(volume_type)
            }
        })
    };
    known(listed(true).or_else(|| listed(false))?.price_per_gb_hour)
}

/// The price per GB-hour of a snapshot.
pub fn snapshot_price(pricing: &PricingBody) -> Option<f64> {
    known(pricing.snapshot_price_per_gb_hour)
}

/// The price per GB-hour of a custom image.
pub fn image_price(pricing: &PricingBody) -> Option<f64> {
    known(pricing.image_price_per_gb_hour)
}

/// A price the list gives: positive. The list decodes a missing price as zero, and a zero
/// rate would be a wrong one.
fn known(price: f64) -> Option<f64> {
    (price.is_finite() && price > 0.0).then_some(price)
}

/// What `size_gb` GB cost per hour at `price` per GB-hour, to 12 significant digits: the
/// product's last binary digits are noise (300 GB at 0.00005 is 0.015000000000000001), and a
/// number of 17 digits does not survive the status's round trip through the API server
/// (serde_json reads it back one unit in the last place off), so the status would be written
/// again on every reconcile. Twelve digits are far below a cent and read back exactly.
pub fn per_hour(size_gb: u64, price: f64) -> f64 {
    let exact = price * size_gb as f64;
    format!("{exact:.11e}").parse().unwrap_or(exact)
}

/// The rate and currency a status shows for `size_gb` GB at `price`: `None`, so that the
/// status keeps what it shows, when the price list lacks the price or its currency, or the
/// record its size.
pub fn shown(pricing: &PricingBody, price: Option<f64>, size_gb: u64) -> Option<(f64, String)> {
    let price = price?;
    (size_gb > 0 && !pricing.currency.is_empty())
        .then(|| (per_hour(size_gb, price), pricing.currency.clone()))
}

/// The price a create is planned at, or why it cannot be: a price list without it cannot
/// tell what the create would cost. `what` names the price ("volume type \"SSD\"").
pub fn required(price: Option<f64>, what: &str) -> Result<f64, Error> {
    price.ok_or_else(|| Error::InvalidSpec(format!("the cloud's price list has no {what}")))
}

/// `hourly_cost` of a kind priced here: the rate its status shows while the object records a
/// cloud resource.
pub fn recorded_cost(
    cloud: &CloudStatus,
    hourly_rate: Option<f64>,
    currency: Option<&String>,
) -> Option<(f64, String)> {
    cloud.external_id.as_ref()?;
    Some((hourly_rate?, currency?.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_cloud::model::StoragePrice;

    fn pricing(currency: &str, storage: &[(&str, f64)], snapshot: f64, image: f64) -> PricingBody {
        PricingBody {
            currency: currency.into(),
            gpus: Vec::new(),
            storage: storage
                .iter()
                .map(|(volume_type, price)| StoragePrice {
                    volume_type: volume_type.to_string(),
                    price_per_gb_hour: *price,
                })
                .collect(),
            snapshot_price_per_gb_hour: snapshot,
            image_price_per_gb_hour: image,
        }
    }

    #[test]
    fn a_volume_is_priced_by_its_type_as_the_list_names_it() {
        let list = pricing(
            "USD",
            &[("NVMe", 0.0002), ("SSD", 0.0001), ("nvme", 0.5)],
            0.0,
            0.0,
        );
        let free = pricing("USD", &[("HDD", 0.0)], 0.0, 0.0);
        for (list, volume_type, price) in [
            (&list, "NVMe", Some(0.0002)),
            (&list, "SSD", Some(0.0001)),
            // The exact name first; another case only when no name matches exactly.
            (&list, "nvme", Some(0.5)),
            (&list, "ssd", Some(0.0001)),
            (&list, "HDD", None),
            (&list, "", None),
            // A zero price is a missing one.
            (&free, "HDD", None),
        ] {
            assert_eq!(storage_price(list, volume_type), price, "{volume_type}");
        }
    }

    #[test]
    fn snapshots_and_images_have_one_price_each() {
        let list = pricing("USD", &[], 0.00005, 0.00007);
        assert_eq!(snapshot_price(&list), Some(0.00005));
        assert_eq!(image_price(&list), Some(0.00007));
        let missing = pricing("USD", &[], 0.0, f64::NAN);
        assert_eq!(snapshot_price(&missing), None);
        assert_eq!(image_price(&missing), None);
        let negative = pricing("USD", &[], -1.0, -0.1);
        assert_eq!(snapshot_price(&negative), None);
        assert_eq!(image_price(&negative), None);
    }

    #[test]
    fn a_rate_is_the_size_times_the_price_and_is_shown_only_when_known() {
        let list = pricing("EUR", &[], 0.0, 0.0);
        let nameless = pricing("", &[], 0.0, 0.0);
        for (size_gb, price, expected) in [
            (100, 0.0002, 0.02),
            (1, 0.0001, 0.0001),
            (750, 0.00005, 0.0375),
            (300, 0.00005, 0.015),
            (65_536, 0.0002, 13.1072),
        ] {
            let rate = per_hour(size_gb, price);
            assert_eq!(rate, expected, "{size_gb} GB at {price}");
            assert_eq!(
                shown(&list, Some(price), size_gb),
                Some((rate, "EUR".to_string()))
            );
        }
        for (list, price, size_gb) in [
            // No price, no size (a record decoded without one), no currency.
            (&list, None, 100),
            (&list, Some(0.0002), 0),
            (&nameless, Some(0.0002), 100),
        ] {
            assert_eq!(shown(list, price, size_gb), None, "{price:?} {size_gb}");
        }
    }

    #[test]
    fn a_rate_reads_back_from_json_as_it_was_written() {
        for size_gb in [1, 3, 7, 50, 80, 300, 333, 750, 1_000, 4_096, 65_536] {
            for price in [0.00005, 0.0001, 0.0002, 0.000_123_456_789, 0.79, 2.99] {
                let rate = per_hour(size_gb, price);
                let written = serde_json::to_string(&rate).unwrap();
                let read: f64 = serde_json::from_str(&written).unwrap();
                assert_eq!(read, rate, "{size_gb} GB at {price}: {written}");
                let off = (rate - price * size_gb as f64).abs();
                assert!(off <= rate * 1e-11, "{size_gb} GB at {price}: {rate}");
            }
        }
    }

    #[test]
    fn a_plan_without_a_price_says_which_one_is_missing() {
        assert_eq!(required(Some(0.1), "x").unwrap(), 0.1);
        let error = required(None, "volume type \"HDD\"").unwrap_err();
        assert_eq!(
            error.to_string(),
            "the cloud's price list has no volume type \"HDD\""
        );
    }

    #[test]
    fn the_recorded_cost_needs_a_cloud_id_a_rate_and_a_currency() {
        let recorded = CloudStatus {
            external_id: Some("vol-1".into()),
            ..CloudStatus::default()
        };
        let usd = Some("USD".to_string());
        assert_eq!(
            recorded_cost(&recorded, Some(0.02), usd.as_ref()),
            Some((0.02, "USD".to_string()))
        );
        assert_eq!(recorded_cost(&recorded, None, usd.as_ref()), None);
        assert_eq!(recorded_cost(&recorded, Some(0.02), None), None);
        assert_eq!(
            recorded_cost(&CloudStatus::default(), Some(0.02), usd.as_ref()),
            None
        );
    }
}
