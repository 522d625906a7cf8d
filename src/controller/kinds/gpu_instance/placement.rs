//! Where a GpuInstance's machine is created: the candidates its spec allows (each alternative
//! of `spec.placement`, or the one of `region` and `gpuType`), checked against the cloud's
//! catalog, and the choice among those with GPUs in stock by the placement's policy, within
//! `maxHourlyRate`.
//!
//! Pure: the catalog, the price list and the cloud's earlier refusals come in, a choice (or
//! why there is none) goes out, so every rule is table-tested here. The reconcile reads the
//! catalog once per account and resync interval (`Account::catalog`), never per object.

use crate::accounts::catalog::{Catalog, Want};
use crate::flow::error::Error;
use gpucloud_api::{
    ChosenPlacement, GpuInstanceSpec, PlacementPolicy, PlacementStatus, SkippedPlacement,
};
use gpucloud_cloud::model::PricingBody;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Why a candidate was passed over (`status.placement.skipped[].reason`).
pub mod skip {
    /// The catalog showed fewer GPUs free than the candidate needs.
    pub const OUT_OF_STOCK: &str = "OutOfStock";
    /// The cloud refused its create for want of stock, after the catalog was read.
    pub const REFUSED_BY_CLOUD: &str = "RefusedByCloud";
    /// Its hourly rate is above `spec.maxHourlyRate`.
    pub const ABOVE_MAX_HOURLY_RATE: &str = "AboveMaxHourlyRate";
    /// The price list has no price for its GPU type.
    pub const NOT_IN_PRICE_LIST: &str = "NotInPriceList";
    /// In stock, but `Cheapest` found a lower rate.
    pub const PRICIER: &str = "Pricier";
    /// Every reason above: the field's documentation names exactly these (a test holds it).
    #[cfg(test)]
    pub const ALL: &[&str] = &[
        OUT_OF_STOCK,
        REFUSED_BY_CLOUD,
        ABOVE_MAX_HOURLY_RATE,
        NOT_IN_PRICE_LIST,
        PRICIER,
    ];
}

/// One (GPU type, count, region) the spec allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Index of its alternative in `spec.placement.alternatives` (0 without a placement).
    pub alternative: usize,
    pub gpu_type: String,
    pub gpu_count: u32,
    pub region: String,
}

impl Candidate {
    fn same(&self, skipped: &SkippedPlacement) -> bool {
        self.gpu_type == skipped.gpu_type
            && self.region == skipped.region
            && i64::from(self.gpu_count) == i64::from(skipped.gpu_count)
    }

    fn want(&self) -> Want {
        Want {
            gpu_type: self.gpu_type.clone(),
            region: self.region.clone(),
            gpu_count: self.gpu_count,
        }
    }

    fn skipped(&self, reason: &str, at: Option<&SkippedPlacement>) -> SkippedPlacement {
        SkippedPlacement {
            gpu_type: self.gpu_type.clone(),
            gpu_count: i32::try_from(self.gpu_count).unwrap_or(i32::MAX),
            region: self.region.clone(),
            reason: reason.to_string(),
            at: at.and_then(|s| s.at.clone()),
        }
    }
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.want().fmt(f)
    }
}

/// The policy and the candidates of a spec, in the order the policy reads them: alternative by
/// alternative, each GPU type in order, then each region in order. A candidate written twice
/// counts once, at its first place.
pub fn candidates(spec: &GpuInstanceSpec) -> Result<(PlacementPolicy, Vec<Candidate>), Error> {
    let Some(placement) = &spec.placement else {
        let gpu_type = spec.gpu_type.clone().ok_or_else(|| {
            Error::InvalidSpec("spec.gpuType is required unless spec.placement is set".into())
        })?;
        let region = spec.region.clone().ok_or_else(|| {
            Error::InvalidSpec("spec.region is required unless spec.placement is set".into())
        })?;
        let gpu_count = u32::try_from(spec.gpu_count.unwrap_or(1))
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| Error::InvalidSpec("spec.gpuCount must be positive".into()))?;
        return Ok((
            PlacementPolicy::Ordered,
            vec![Candidate {
                alternative: 0,
                gpu_type,
                gpu_count,
                region,
            }],
        ));
    };
    if placement.alternatives.is_empty() {
        return Err(Error::InvalidSpec(
            "spec.placement.alternatives must list at least one alternative".into(),
        ));
    }
    let mut out: Vec<Candidate> = Vec::new();
    for (index, alternative) in placement.alternatives.iter().enumerate() {
        let gpu_count = u32::try_from(alternative.gpu_count)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                Error::InvalidSpec(format!(
                    "spec.placement.alternatives[{index}].gpuCount must be positive"
                ))
            })?;
        if alternative.gpu_types.is_empty() || alternative.regions.is_empty() {
            return Err(Error::InvalidSpec(format!(
                "spec.placement.alternatives[{index}] needs at least one of gpuTypes and of regions"
            )));
        }
        for gpu_type in &alternative.gpu_types {
            for region in &alternative.regions {
                let candidate = Candidate {
                    alternative: index,
                    gpu_type: gpu_type.clone(),
                    gpu_count,
                    region: region.clone(),
                };
                let seen = out.iter().any(|c| {
                    c.gpu_type == candidate.gpu_type
                        && c.region == candidate.region
                        && c.gpu_count == candidate.gpu_count
                });
                if !seen {
                    out.push(candidate);
                }
            }
        }
    }
    Ok((placement.policy, out))
}

/// Refuses a spec naming a GPU type or region the catalog does not have, or a GPU count it does
/// not offer for the type, naming the field and listing the known values: such a candidate
/// could never be created, whatever the stock.
pub fn check_known(
    spec: &GpuInstanceSpec,
    candidates: &[Candidate],
    catalog: &Catalog,
) -> Result<(), Error> {
    for candidate in candidates {
        let field = |name: &str| match &spec.placement {
            Some(_) => format!(
                "spec.placement.alternatives[{}].{name}",
                candidate.alternative
            ),
            None => format!("spec.{name}"),
        };
        let (type_field, region_field) = match &spec.placement {
            Some(_) => (field("gpuTypes"), field("regions")),
            None => (field("gpuType"), field("region")),
        };
        let Some(gpu) = catalog.gpu(&candidate.gpu_type) else {
            return Err(Error::InvalidSpec(format!(
                "{type_field}: unknown GPU type {:?} (known: {})",
                candidate.gpu_type,
                catalog.gpu_type_names()
            )));
        };
        // A catalog that lists no counts for the type (an older offering) leaves it to the cloud.
        if !gpu.gpu_counts.is_empty() && !gpu.gpu_counts.contains(&candidate.gpu_count) {
            let offered: Vec<String> = gpu.gpu_counts.iter().map(u32::to_string).collect();
            return Err(Error::InvalidSpec(format!(
                "{}: {} is offered with {} GPUs, not {}",
                field("gpuCount"),
                candidate.gpu_type,
                offered.join(", "),
                candidate.gpu_count
            )));
        }
        if !catalog.has_region(&candidate.region) {
            return Err(Error::InvalidSpec(format!(
                "{region_field}: unknown region {:?} (known: {})",
                candidate.region,
                catalog.region_names()
            )));
        }
    }
    Ok(())
}

/// The candidate chosen, as the status shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub candidate: Candidate,
    pub status: PlacementStatus,
}

/// What `gpu_count` GPUs of `gpu_type` cost per hour by the price list.
pub fn rate(pricing: &PricingBody, gpu_type: &str, gpu_count: u32) -> Option<f64> {
    pricing
        .gpus
        .iter()
        .find(|p| p.gpu_type == gpu_type)
        .map(|p| p.price_per_gpu_hour)
        .filter(|p| p.is_finite() && *p > 0.0)
        .map(|p| p * f64::from(gpu_count))
}

/// Chooses among `candidates` by `policy`: those with the GPUs free in `catalog` (and not
/// refused by the cloud since it was read, per `refused`) and a rate within `max_rate`.
/// `Ordered` takes the first, `Cheapest` the lowest rate (the first of equals). None left:
/// `NoCapacity`, naming every candidate and why it was passed over, with the GPUs that would
/// do, so the object is woken when the catalog shows them; or, when no stock could help
/// (every candidate priced above the limit or not priced), the price refusal.
pub fn choose(
    policy: PlacementPolicy,
    candidates: &[Candidate],
    max_rate: Option<f64>,
    catalog: &Catalog,
    pricing: &PricingBody,
    refused: &[SkippedPlacement],
) -> Result<Choice, Error> {
    let assessed = assess(candidates, max_rate, catalog, pricing, refused);
    let chosen = match policy {
        PlacementPolicy::Ordered => assessed.eligible.first().copied(),
        PlacementPolicy::Cheapest => assessed
            .eligible
            .iter()
            .copied()
            .reduce(|best, next| if next.1 < best.1 { next } else { best }),
    };
    let Some((index, rate)) = chosen else {
        return Err(none_chosen(candidates, max_rate, assessed));
    };
    Ok(chosen_status(
        policy, candidates, index, rate, pricing, assessed,
    ))
}

/// Every candidate sorted: eligible (in stock, priced within the limit) or passed over, and why.
struct Assessment {
    /// Index of the candidate, the entry of `status.placement.skipped`, and why in words.
    skipped: Vec<(usize, SkippedPlacement, String)>,
    /// Index and hourly rate of each eligible candidate, in the spec's order.
    eligible: Vec<(usize, f64)>,
    /// The GPUs that would do, of the candidates passed over for want of stock.
    wants: Vec<Want>,
    /// The lowest rate among those above `maxHourlyRate`.
    lowest_above: Option<f64>,
}

/// Sorts `candidates` into eligible and passed over (see [`choose`]).
fn assess(
    candidates: &[Candidate],
    max_rate: Option<f64>,
    catalog: &Catalog,
    pricing: &PricingBody,
    refused: &[SkippedPlacement],
) -> Assessment {
    let mut skipped: Vec<(usize, SkippedPlacement, String)> = Vec::new();
    let mut eligible: Vec<(usize, f64)> = Vec::new();
    let mut wants = Vec::new();
    let mut lowest_above: Option<f64> = None;
    for (index, candidate) in candidates.iter().enumerate() {
        let refusal = refused
            .iter()
            .find(|r| candidate.same(r) && r.reason == skip::REFUSED_BY_CLOUD)
            .filter(|r| r.at.as_ref().is_some_and(|at| newer_than(at, catalog)));
        let free = catalog.available(&candidate.gpu_type, &candidate.region);
        let rate = rate(pricing, &candidate.gpu_type, candidate.gpu_count);
        let (reason, why) = match (refusal, rate) {
            (_, None) => (
                skip::NOT_IN_PRICE_LIST,
                "the price list has no price for it".to_string(),
            ),
            (_, Some(rate)) if max_rate.is_some_and(|max| rate > max) => {
                lowest_above = Some(lowest_above.map_or(rate, |low: f64| low.min(rate)));
                (
                    skip::ABOVE_MAX_HOURLY_RATE,
                    format!(
                        "{rate:.4} {} per hour is above maxHourlyRate {:.4}",
                        pricing.currency,
                        max_rate.unwrap_or_default()
                    ),
                )
            }
            (Some(_), Some(_)) => {
                wants.push(candidate.want());
                (
                    skip::REFUSED_BY_CLOUD,
                    "the cloud refused it for want of stock".to_string(),
                )
            }
            (None, Some(_)) if free < candidate.gpu_count => {
                wants.push(candidate.want());
                (skip::OUT_OF_STOCK, format!("out of stock ({free} free)"))
            }
            (None, Some(rate)) => {
                eligible.push((index, rate));
                continue;
            }
        };
        skipped.push((index, candidate.skipped(reason, refusal), why));
    }
    Assessment {
        skipped,
        eligible,
        wants,
        lowest_above,
    }
}

/// Why no candidate was chosen: `NoCapacity` when stock could help, else the price refusal.
fn none_chosen(candidates: &[Candidate], max_rate: Option<f64>, assessed: Assessment) -> Error {
    let Assessment {
        skipped,
        wants,
        lowest_above,
        ..
    } = assessed;
    if wants.is_empty() {
        if let (Some(rate), Some(limit)) = (lowest_above, max_rate) {
            return Error::PriceAboveLimit { rate, limit };
        }
        return Error::InvalidSpec(format!(
            "the cloud's price list has no price for {}",
            candidates
                .iter()
                .map(|c| c.gpu_type.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let reasons = skipped
        .iter()
        .map(|(i, _, why)| format!("{}: {why}", candidates[*i]))
        .collect::<Vec<_>>()
        .join("; ");
    Error::NoCapacity {
        message: format!("no placement has GPUs in stock: {reasons}"),
        wants,
    }
}

/// The choice of the candidate at `index`, at `rate`, with the candidates `policy` passed over.
fn chosen_status(
    policy: PlacementPolicy,
    candidates: &[Candidate],
    index: usize,
    rate: f64,
    pricing: &PricingBody,
    assessed: Assessment,
) -> Choice {
    let Assessment {
        skipped, eligible, ..
    } = assessed;
    let candidate = candidates[index].clone();
    let passed_over = skipped.into_iter().filter_map(|(i, s, _)| match policy {
        // Ordered reads no further than the chosen one.
        PlacementPolicy::Ordered => (i < index).then_some(s),
        PlacementPolicy::Cheapest => Some(s),
    });
    let mut shown: Vec<SkippedPlacement> = passed_over.collect();
    if policy == PlacementPolicy::Cheapest {
        shown.extend(
            eligible
                .iter()
                .filter(|(i, _)| *i != index)
                .map(|(i, _)| candidates[*i].skipped(skip::PRICIER, None)),
        );
    }
    Choice {
        status: PlacementStatus {
            chosen: Some(ChosenPlacement {
                gpu_type: candidate.gpu_type.clone(),
                gpu_count: i32::try_from(candidate.gpu_count).unwrap_or(i32::MAX),
                region: candidate.region.clone(),
                alternative: i32::try_from(candidate.alternative).unwrap_or(i32::MAX),
                hourly_rate: Some(rate),
                currency: Some(pricing.currency.clone()).filter(|c| !c.is_empty()),
            }),
            skipped: shown,
        },
        candidate,
    }
}

/// Whether a refusal recorded at `at` may have come after the catalog was read. The status
/// keeps whole seconds, so a refusal is newer unless a second after its recorded time is still
/// before the read.
fn newer_than(at: &Time, catalog: &Catalog) -> bool {
    at.0.checked_add(std::time::Duration::from_secs(1))
        .map_or(true, |upper| upper > catalog.read_at)
}

/// The status after the cloud refused the chosen candidate's create for want of stock, at
/// `at`: the candidate joins the skipped ones as `RefusedByCloud`, and nothing is chosen. `None`
/// when nothing was chosen (a refusal of no placement of this module's).
pub fn refused(
    status: &PlacementStatus,
    at: k8s_openapi::jiff::Timestamp,
) -> Option<PlacementStatus> {
    let chosen = status.chosen.as_ref()?;
    let mut skipped: Vec<SkippedPlacement> = status
        .skipped
        .iter()
        .filter(|s| s.reason == skip::REFUSED_BY_CLOUD)
        .filter(|s| {
            !(s.gpu_type == chosen.gpu_type
                && s.region == chosen.region
                && s.gpu_count == chosen.gpu_count)
        })
        .cloned()
        .collect();
    skipped.push(SkippedPlacement {
        gpu_type: chosen.gpu_type.clone(),
        gpu_count: chosen.gpu_count,
        region: chosen.region.clone(),
        reason: skip::REFUSED_BY_CLOUD.to_string(),
        at: Some(Time(at)),
    });
    Some(PlacementStatus {
        chosen: None,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucloud_cloud::model::{GpuPrice, GpuSpec, Region};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    /// A catalog read at second 100 with `stock` free and every GPU type of the price list.
    fn catalog(stock: &[(&str, &str, u32)]) -> Catalog {
        Catalog {
            read_at: at(100),
            stock: stock
                .iter()
                .map(|(t, r, n)| ((t.to_string(), r.to_string()), *n))
                .collect(),
            gpus: ["H100-80G", "A100-80G", "L40S"]
                .iter()
                .map(|t| GpuSpec {
                    gpu_type: t.to_string(),
                    ..GpuSpec::default()
                })
                .collect(),
            regions: ["us-east-1", "eu-west-1"]
                .iter()
                .map(|r| Region {
                    id: r.to_string(),
                    ..Region::default()
                })
                .collect(),
        }
    }

    fn pricing() -> PricingBody {
        PricingBody {
            currency: "USD".into(),
            gpus: [("H100-80G", 2.99), ("A100-80G", 1.89), ("L40S", 1.10)]
                .iter()
                .map(|(t, p)| GpuPrice {
                    gpu_type: t.to_string(),
                    price_per_gpu_hour: *p,
                })
                .collect(),
            ..PricingBody::default()
        }
    }

    fn spec(placement: serde_json::Value) -> GpuInstanceSpec {
        serde_json::from_value(serde_json::json!({
            "osImage": "ubuntu-22.04-cuda-12",
            "placement": placement,
        }))
        .unwrap()
    }

    fn two_alternatives(policy: &str) -> GpuInstanceSpec {
        spec(serde_json::json!({
            "policy": policy,
            "alternatives": [
                {"gpuTypes": ["H100-80G"], "regions": ["us-east-1", "eu-west-1"]},
                {"gpuTypes": ["A100-80G", "L40S"], "gpuCount": 2, "regions": ["us-east-1"]},
            ],
        }))
    }

    fn chosen(choice: &Choice) -> (String, u32, String) {
        let c = &choice.candidate;
        (c.gpu_type.clone(), c.gpu_count, c.region.clone())
    }

    fn pick(
        spec: &GpuInstanceSpec,
        stock: &[(&str, &str, u32)],
        max_rate: Option<f64>,
        refused: &[SkippedPlacement],
    ) -> Result<Choice, Error> {
        let (policy, candidates) = candidates(spec).unwrap();
        choose(
            policy,
            &candidates,
            max_rate,
            &catalog(stock),
            &pricing(),
            refused,
        )
    }

    #[test]
    fn alternatives_expand_type_by_type_then_region_by_region_without_repeats() {
        let mut spec = two_alternatives("Ordered");
        if let Some(p) = spec.placement.as_mut() {
            p.alternatives.push(p.alternatives[0].clone());
        }
        let (policy, list) = candidates(&spec).unwrap();
        assert_eq!(policy, PlacementPolicy::Ordered);
        let shown: Vec<String> = list
            .iter()
            .map(|c| format!("{}:{c}", c.alternative))
            .collect();
        assert_eq!(
            shown,
            [
                "0:H100-80G x1 in us-east-1",
                "0:H100-80G x1 in eu-west-1",
                "1:A100-80G x2 in us-east-1",
                "1:L40S x2 in us-east-1",
            ]
        );
        // Without a placement, region and gpuType are the one candidate.
        let plain: GpuInstanceSpec = serde_json::from_value(serde_json::json!({
            "region": "eu-west-1", "gpuType": "L40S", "gpuCount": 4, "osImage": "x",
        }))
        .unwrap();
        let (_, list) = candidates(&plain).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].to_string(), "L40S x4 in eu-west-1");
    }

    #[test]
    fn ordered_takes_the_first_in_stock_and_shows_what_it_passed_over() {
        let spec = two_alternatives("Ordered");
        for (stock, expected, passed) in [
            (
                vec![("H100-80G", "us-east-1", 1), ("L40S", "us-east-1", 8)],
                ("H100-80G", 1, "us-east-1"),
                vec![],
            ),
            (
                vec![("H100-80G", "eu-west-1", 1), ("L40S", "us-east-1", 8)],
                ("H100-80G", 1, "eu-west-1"),
                vec![("H100-80G", "us-east-1", skip::OUT_OF_STOCK)],
            ),
            (
                // One A100 free is not two.
                vec![("A100-80G", "us-east-1", 1), ("L40S", "us-east-1", 2)],
                ("L40S", 2, "us-east-1"),
                vec![
                    ("H100-80G", "us-east-1", skip::OUT_OF_STOCK),
                    ("H100-80G", "eu-west-1", skip::OUT_OF_STOCK),
                    ("A100-80G", "us-east-1", skip::OUT_OF_STOCK),
                ],
            ),
        ] {
            let choice = pick(&spec, &stock, None, &[]).unwrap();
            assert_eq!(
                chosen(&choice),
                (expected.0.to_string(), expected.1, expected.2.to_string())
            );
            let skipped: Vec<(&str, &str, &str)> = choice
                .status
                .skipped
                .iter()
                .map(|s| (s.gpu_type.as_str(), s.region.as_str(), s.reason.as_str()))
                .collect();
            assert_eq!(skipped, passed, "{stock:?}");
            let shown = choice.status.chosen.unwrap();
            assert_eq!(shown.region, expected.2);
            assert_eq!(shown.currency.as_deref(), Some("USD"));
        }
    }

    #[test]
    fn cheapest_takes_the_lowest_rate_in_stock_within_the_limit() {
        let spec = two_alternatives("Cheapest");
        let all = [
            ("H100-80G", "us-east-1", 8),
            ("H100-80G", "eu-west-1", 8),
            ("A100-80G", "us-east-1", 8),
            ("L40S", "us-east-1", 8),
        ];
        // 2 x L40S (2.20) is the cheapest of all.
        let choice = pick(&spec, &all, None, &[]).unwrap();
        assert_eq!(chosen(&choice).0, "L40S");
        assert_eq!(
            choice.status.chosen.as_ref().unwrap().hourly_rate,
            Some(2.2)
        );
        assert_eq!(
            choice
                .status
                .skipped
                .iter()
                .filter(|s| s.reason == skip::PRICIER)
                .count(),
            3
        );
        // Without L40S in stock: 1 x H100 (2.99) is cheaper than 2 x A100 (3.78).
        let no_l40s = &all[..3];
        assert_eq!(
            chosen(&pick(&spec, no_l40s, None, &[]).unwrap()).0,
            "H100-80G"
        );
        // Equal rates: the earlier one.
        let choice = pick(&spec, &all[..2], None, &[]).unwrap();
        assert_eq!(chosen(&choice).2, "us-east-1");
        // Under a limit of 2.5, only L40S fits; without it in stock, nothing does, and stock
        // of L40S would help: NoCapacity.
        assert_eq!(
            chosen(&pick(&spec, &all, Some(2.5), &[]).unwrap()).0,
            "L40S"
        );
        let error = pick(&spec, no_l40s, Some(2.5), &[]).unwrap_err();
        assert_eq!(error.reason(), "NoCapacity", "{error}");
        // Under a limit of 1.0 nothing fits whatever the stock: the price refusal.
        let error = pick(&spec, &all, Some(1.0), &[]).unwrap_err();
        assert!(matches!(error, Error::PriceAboveLimit { .. }), "{error}");
    }

    #[test]
    fn nothing_in_stock_names_every_candidate_and_waits_for_the_ones_that_would_do() {
        let spec = two_alternatives("Ordered");
        let error = pick(&spec, &[("A100-80G", "us-east-1", 1)], Some(5.0), &[]).unwrap_err();
        assert_eq!(error.reason(), "NoCapacity");
        assert_eq!(
            error.to_string(),
            "no placement has GPUs in stock: H100-80G x1 in us-east-1: out of stock (0 free); \
             H100-80G x1 in eu-west-1: out of stock (0 free); \
             A100-80G x2 in us-east-1: out of stock (1 free); \
             L40S x2 in us-east-1: out of stock (0 free)"
        );
        let Error::NoCapacity { wants, .. } = &error else {
            panic!("{error:?}")
        };
        assert_eq!(wants.len(), 4);
        let stocked = catalog(&[("L40S", "us-east-1", 2)]);
        assert!(stocked.satisfies_any(wants));
        assert!(!catalog(&[("L40S", "us-east-1", 1)]).satisfies_any(wants));
    }

    #[test]
    fn a_refusal_since_the_catalog_was_read_skips_the_candidate_until_a_newer_read() {
        let spec = two_alternatives("Ordered");
        let stock = [("H100-80G", "us-east-1", 4), ("H100-80G", "eu-west-1", 4)];
        let first = pick(&spec, &stock, None, &[]).unwrap();
        assert_eq!(chosen(&first).2, "us-east-1");
        // Refused at 150, after the catalog's read at 100: the next one.
        let after = refused(&first.status, at(150)).unwrap();
        assert!(after.chosen.is_none());
        let next = pick(&spec, &stock, None, &after.skipped).unwrap();
        assert_eq!(chosen(&next).2, "eu-west-1");
        assert_eq!(next.status.skipped[0].reason, skip::REFUSED_BY_CLOUD);
        assert_eq!(next.status.skipped[0].at, Some(Time(at(150))));
        // Both refused: NoCapacity, waiting for either.
        let both = refused(
            &PlacementStatus {
                skipped: after.skipped.clone(),
                ..next.status.clone()
            },
            at(160),
        )
        .unwrap();
        assert_eq!(both.skipped.len(), 2);
        let error = pick(&spec, &stock, None, &both.skipped).unwrap_err();
        assert_eq!(error.reason(), "NoCapacity");
        // A refusal older than the catalog's read is old news: the stock decides.
        let old = refused(&first.status, at(50)).unwrap();
        assert_eq!(
            chosen(&pick(&spec, &stock, None, &old.skipped).unwrap()).2,
            "us-east-1"
        );
        // The status keeps whole seconds: a refusal in the second the catalog was read (at
        // 100.5, shown as 100) may be newer, and counts.
        let same_second = refused(&first.status, at(100)).unwrap();
        let mut read_late = catalog(&stock);
        read_late.read_at = Timestamp::from_millisecond(100_500).unwrap();
        let (policy, list) = candidates(&spec).unwrap();
        let next = choose(
            policy,
            &list,
            None,
            &read_late,
            &pricing(),
            &same_second.skipped,
        );
        assert_eq!(chosen(&next.unwrap()).2, "eu-west-1");
    }

    /// The reasons `status.placement.skipped[].reason` documents (in the CRD, so in `kubectl
    /// explain` and the field reference) are the ones the code writes, no more, no fewer.
    #[test]
    fn the_skip_reasons_documented_are_the_ones_written() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(gpucloud_api::GpuInstance::crd()).unwrap();
        let description = crd
            .pointer(
                "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/placement\
                 /properties/skipped/items/properties/reason/description",
            )
            .and_then(|d| d.as_str())
            .expect("status.placement.skipped[].reason is documented");
        let mut documented: Vec<&str> = description.split('`').skip(1).step_by(2).collect();
        // `Cheapest` is the policy the description names, not a reason.
        documented.retain(|word| *word != "Cheapest");
        documented.sort_unstable();
        let mut written = skip::ALL.to_vec();
        written.sort_unstable();
        assert_eq!(documented, written, "{description}");
    }

    #[test]
    fn a_gpu_count_the_catalog_does_not_offer_for_the_type_is_refused_naming_the_offered_ones() {
        let mut offered = catalog(&[]);
        for gpu in &mut offered.gpus {
            gpu.gpu_counts = vec![1, 2, 4];
        }
        let plain: GpuInstanceSpec = serde_json::from_value(serde_json::json!({
            "region": "us-east-1", "gpuType": "L40S", "gpuCount": 3, "osImage": "x",
        }))
        .unwrap();
        let (_, list) = candidates(&plain).unwrap();
        let error = check_known(&plain, &list, &offered).unwrap_err();
        assert_eq!(
            error.to_string(),
            "spec.gpuCount: L40S is offered with 1, 2, 4 GPUs, not 3"
        );
        assert_eq!(error.reason(), "InvalidSpec");
        // An alternative with a count not offered refuses the spec, as an unknown type does.
        let placed = spec(serde_json::json!({
            "alternatives": [
                {"gpuTypes": ["H100-80G"], "gpuCount": 2, "regions": ["us-east-1"]},
                {"gpuTypes": ["A100-80G"], "gpuCount": 8, "regions": ["us-east-1"]},
            ],
        }));
        let (_, list) = candidates(&placed).unwrap();
        let error = check_known(&placed, &list, &offered).unwrap_err();
        assert_eq!(
            error.to_string(),
            "spec.placement.alternatives[1].gpuCount: A100-80G is offered with 1, 2, 4 GPUs, not 8"
        );
        // Offered counts pass; a catalog without counts for the type leaves them to the cloud.
        let (_, list) = candidates(&two_alternatives("Ordered")).unwrap();
        check_known(&two_alternatives("Ordered"), &list, &offered).unwrap();
        let (_, list) = candidates(&plain).unwrap();
        check_known(&plain, &list, &catalog(&[])).unwrap();
    }

    #[test]
    fn unknown_types_and_regions_are_refused_naming_the_field_and_the_known_values() {
        let spec = spec(serde_json::json!({
            "alternatives": [
                {"gpuTypes": ["H100-80G"], "regions": ["us-east-1"]},
                {"gpuTypes": ["H100-80G"], "regions": ["mars-1"]},
            ],
        }));
        let (_, list) = candidates(&spec).unwrap();
        let error = check_known(&spec, &list, &catalog(&[])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "spec.placement.alternatives[1].regions: unknown region \"mars-1\" (known: us-east-1, eu-west-1)"
        );
        let plain: GpuInstanceSpec = serde_json::from_value(serde_json::json!({
            "region": "us-east-1", "gpuType": "Z9000", "osImage": "x",
        }))
        .unwrap();
        let (_, list) = candidates(&plain).unwrap();
        let error = check_known(&plain, &list, &catalog(&[])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "spec.gpuType: unknown GPU type \"Z9000\" (known: H100-80G, A100-80G, L40S)"
        );
        assert_eq!(error.reason(), "InvalidSpec");
    }
}
