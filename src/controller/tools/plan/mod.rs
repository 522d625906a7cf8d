//! `gpucloud-operator plan -f PATH`: what applying manifests would do, before they are
//! applied. The manifests (files, directories, standard input) are compared with the cluster
//! and priced with the cloud's catalog, read-only: per object create, change, delete or
//! unchanged, the placement a GpuInstance would get, and the hourly cost before and after,
//! with the totals.
//!
//! Each manifest is first judged as the API server would judge it ([`validation`]: the CRDs'
//! schemas and CEL rules, the admission policies), and a refused one is shown with the
//! server's message; `run` then fails. Each create is judged by the Budgets and GpuPolicies of
//! its namespace with the operator's own decisions ([`holds`]), and a held one costs nothing;
//! so is the start of a stopped machine set to run (`core::start`), held or at its running
//! rate.
//! Placement uses the cloud's stock with `--cloud-url`, else the GpuOfferings', whose
//! freshness is said (when the operator has stopped refreshing them, the create may be placed
//! elsewhere: [`core::stock_age`]).
//!
//! Reading is at the edges ([`crate::tools::manifests`], the cluster's gets and lists and the
//! cloud's reads here); the plan itself ([`core::plan`]) is pure and table-tested. Nothing is
//! written: the cluster is read with get and list only (no dry run), and the cloud, when
//! asked (`--cloud-url`), with its catalogs, its price list and its price quote.

pub mod core;
mod error;
pub mod holds;
pub(crate) mod kinds;
pub(crate) mod text;
pub mod validation;

#[cfg(test)]
mod tests;

use crate::accounts::catalog::Catalog;
use crate::flow::error::KubeMessage;
use crate::kinds::{budget, gpu_policy};
use crate::tools::manifests;
use core::{Checks, Live, Plan, PriceSource, Prices};
pub use error::{API_KEY_VARIABLE, Error};
use gpucloud_api::{Budget, GpuInstance, GpuOffering, GpuPolicy};
use gpucloud_cloud::model::PriceQuoteRequest;
use gpucloud_cloud::{ApiKey, ClientConfig, CloudClient};
use holds::Standing;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kinds::{Desired, KindInfo, Wanted};
use kube::api::{Api, DynamicObject, ListParams};
use std::collections::{BTreeMap, BTreeSet};

#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct Args {
    /// A manifest file, a directory of them (read recursively: *.yaml, *.yml, *.json), or `-`
    /// for standard input. Repeat for several.
    #[arg(long = "filename", short = 'f', required = true)]
    pub filename: Vec<String>,
    /// The namespace of objects that name none (default: the kubeconfig context's, else
    /// `default`).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Also plan the deletion of the objects of the operator's kinds, in the namespaces the
    /// manifests name, that the manifests do not hold (as `kubectl apply --prune`).
    #[arg(long)]
    pub prune: bool,
    /// With `--prune`: only objects matching this label selector are deleted.
    #[arg(long, short = 'l', requires = "prune")]
    pub selector: Option<String>,
    /// Read the catalog and prices from the cloud at this URL (the API key from the
    /// GPUCLOUD_API_KEY environment variable) instead of the cluster's GpuOfferings; the
    /// GpuInstances are then priced with the cloud's price quote.
    #[arg(long)]
    pub cloud_url: Option<String>,
    /// `text` (a table and the totals) or `json` (one document).
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// The operator's catalog TTL (its `--resync-interval`), by which the GpuOfferings' age is
    /// judged: placed with offerings the operator has stopped refreshing, a create may go
    /// elsewhere than planned, and the plan says so.
    #[arg(long, default_value = "60s", value_parser = crate::operator::cli::parse_duration)]
    pub catalog_ttl: std::time::Duration,
}

/// How the plan is printed.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Output {
    #[default]
    Text,
    Json,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            filename: Vec::new(),
            namespace: None,
            prune: false,
            selector: None,
            cloud_url: None,
            output: Output::Text,
            catalog_ttl: DEFAULT_CATALOG_TTL,
        }
    }
}

/// The operator's default catalog TTL (its `--resync-interval`'s default).
pub const DEFAULT_CATALOG_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// [`plan`] with the client the environment configures (kubeconfig or in-cluster), the API
/// key from [`API_KEY_VARIABLE`] and standard input; the plan as `args.output` prints it, or
/// [`Error::Refused`] (carrying that output) when the API server would refuse a manifest.
pub async fn run(args: &Args) -> Result<String, Error> {
    let client = kube::Client::try_default().await?;
    let api_key = std::env::var(API_KEY_VARIABLE)
        .ok()
        .filter(|k| !k.is_empty())
        .map(ApiKey::new);
    let plan = plan(&client, args, api_key, &mut std::io::stdin()).await?;
    finish(&plan, args.output)
}

/// The plan as `output` prints it, or [`Error::Refused`] carrying that output with the API
/// server's messages when it would refuse an object.
pub fn finish(plan: &Plan, output: Output) -> Result<String, Error> {
    let output = render(plan, output);
    let refusals = plan.refusals();
    if refusals.is_empty() {
        Ok(output)
    } else {
        Err(Error::Refused {
            output,
            messages: refusals.join("; "),
        })
    }
}

/// The plan as `output` prints it.
pub fn render(plan: &Plan, output: Output) -> String {
    match output {
        Output::Text => text::render(plan),
        Output::Json => {
            let mut json = serde_json::to_string_pretty(plan).unwrap_or_default();
            json.push('\n');
            json
        }
    }
}

/// Reads the manifests, judges them as the API server would, reads the live objects they
/// name (and with `--prune` the others), the catalog and prices, the Budgets and GpuPolicies
/// of their namespaces, and plans.
pub async fn plan(
    client: &kube::Client,
    args: &Args,
    api_key: Option<ApiKey>,
    stdin: &mut dyn std::io::Read,
) -> Result<Plan, Error> {
    let kinds = kinds::managed();
    let documents = manifests::read(&args.filename, stdin)?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let identified = kinds::identify(documents, &kinds, &namespace)?;
    let namespaces: BTreeSet<String> = identified
        .iter()
        .filter(|(_, manifest)| manifest.is_some())
        .map(|(d, _)| d.namespace.clone())
        .collect();
    let validator = validation::read(client, &kinds, &namespaces).await;
    let mut paired = Vec::new();
    for (object, manifest) in identified {
        paired.push(judged(client, &kinds, &validator, object, manifest).await?);
    }
    let pruned = if args.prune {
        prune(
            client,
            &kinds,
            &validator,
            &paired,
            args.selector.as_deref(),
        )
        .await?
    } else {
        Vec::new()
    };
    let mut cloud = None;
    let (mut prices, stock) = match &args.cloud_url {
        None => offerings(client, args.catalog_ttl).await?,
        Some(url) => {
            let key = api_key.ok_or(Error::ApiKeyMissing)?;
            let reader = CloudClient::new(ClientConfig::new(url.clone(), key))?;
            let prices = from_cloud(&reader).await?;
            cloud = Some(reader);
            (prices, "the cloud's, read now".to_string())
        }
    };
    let (mut standing, holds) = standing(client, &namespaces).await?;
    if let Some(cloud) = &cloud {
        // The quotes are for what the plan places: placed once without, then again.
        let mut scratch = standing.clone();
        let first = core::plan(
            paired.clone(),
            pruned.clone(),
            &kinds,
            &prices,
            &mut scratch,
        );
        for (gpu_type, gpu_count) in core::to_quote(&first) {
            let request = PriceQuoteRequest {
                gpu_type: gpu_type.clone(),
                gpu_count,
                hours: None,
            };
            let quote = cloud.quote_pricing(&request).await?;
            prices.quotes.insert((gpu_type, gpu_count), quote);
        }
    }
    let mut plan = core::plan(paired, pruned, &kinds, &prices, &mut standing);
    plan.checks = Checks {
        crds: validator.crds.clone(),
        admission: validator.admission.clone(),
        stock,
        holds,
    };
    Ok(plan)
}

/// One object of the input with its live object: judged as the API server would judge it
/// (a refused one is not decoded), then decoded.
async fn judged(
    client: &kube::Client,
    kinds: &[KindInfo],
    validator: &validation::Validator,
    object: Desired,
    manifest: Option<serde_json::Value>,
) -> Result<(Desired, Option<Live>), Error> {
    let (Some(manifest), Some(info)) = (manifest, kinds.iter().find(|k| k.kind == object.kind))
    else {
        return Ok((object, None));
    };
    let api =
        Api::<DynamicObject>::namespaced_with(client.clone(), &object.namespace, &info.resource);
    let found = api.get_opt(&object.name).await?;
    let found_value = found.as_ref().and_then(|f| serde_json::to_value(f).ok());
    let live = found.map(|found| live(info, found)).transpose()?;
    if let Some(message) = validator.refusal(info, &manifest, found_value.as_ref()) {
        let spec = match kinds::decode(object.clone(), Some(&manifest), kinds) {
            Ok(Desired {
                what: Wanted::Managed { spec },
                ..
            }) => Some(spec),
            _ => None,
        };
        let object = Desired {
            what: Wanted::Refused { message, spec },
            ..object
        };
        return Ok((object, live));
    }
    Ok((kinds::decode(object, Some(&manifest), kinds)?, live))
}

/// The Budgets and GpuPolicies governing each of `namespaces`, with the billed objects they
/// count, read from the API server as the operator reads them before a create; and what
/// could not be read (a tenant may not list the cluster's GpuPolicies), as the output says it.
async fn standing(
    client: &kube::Client,
    namespaces: &BTreeSet<String>,
) -> Result<(BTreeMap<String, Standing>, String), Error> {
    let mut unread = Vec::new();
    let policies = match Api::<GpuPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(listed) => listed.items,
        Err(error) => {
            unread.push(format!("the GpuPolicies ({})", KubeMessage(&error)));
            Vec::new()
        }
    };
    let mut out = BTreeMap::new();
    for namespace in namespaces {
        let mut standing = Standing {
            now: Some(Timestamp::now()),
            ..Standing::default()
        };
        if !policies.is_empty() {
            match Api::<Namespace>::all(client.clone())
                .get_metadata_opt(namespace)
                .await
            {
                Ok(found) => {
                    let labels = found
                        .and_then(|meta| meta.metadata.labels)
                        .unwrap_or_default();
                    // A selector that does not parse holds every create, as in the operator.
                    standing.policies = policies
                        .iter()
                        .filter(|p| gpu_policy::governs(p, &labels).unwrap_or(true))
                        .cloned()
                        .collect();
                }
                Err(error) => unread.push(format!(
                    "namespace {namespace}'s labels, which GpuPolicies select by ({})",
                    KubeMessage(&error)
                )),
            }
        }
        match Api::<Budget>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
        {
            Ok(listed) => {
                for budget_object in listed.items {
                    let counted = budget::billed_objects(client, namespace, &budget_object)
                        .await
                        .unwrap_or_default();
                    standing.budgets.push((budget_object, counted));
                }
            }
            Err(error) => unread.push(format!(
                "the Budgets of {namespace} ({})",
                KubeMessage(&error)
            )),
        }
        standing.objects = budget::billed_matching(client, namespace, ListParams::default())
            .await
            .map_err(Error::Counting)?;
        out.insert(namespace.clone(), standing);
    }
    let said = if unread.is_empty() {
        "the Budgets and GpuPolicies of the cluster, judged as the operator judges a create or a start".into()
    } else {
        format!(
            "not counted, as they could not be read: {}",
            unread.join("; ")
        )
    };
    Ok((out, said))
}

/// A live object as the plan reads it.
fn live(info: &KindInfo, object: DynamicObject) -> Result<Live, Error> {
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    let name = object.metadata.name.clone().unwrap_or_default();
    let value = serde_json::to_value(&object).unwrap_or_default();
    let spec = (info.spec_of)(&value).map_err(|(field, message)| Error::LiveDecode {
        kind: info.kind.clone(),
        namespace: namespace.clone(),
        name: name.clone(),
        field,
        message,
    })?;
    let instance = (info.kind == <GpuInstance as kube::Resource>::kind(&()))
        .then(|| serde_json::from_value::<GpuInstance>(value.clone()).ok())
        .flatten();
    let machine = instance.as_ref().and_then(|i| {
        let specs = i.status.as_ref()?.specs.as_ref()?;
        Some(core::LiveMachine {
            uid: kube::ResourceExt::uid(i).unwrap_or_default(),
            off: crate::flow::kind::KindDeclarations::is_off(i),
            gpu_type: specs.gpu_type.clone(),
            gpu_count: u32::try_from(specs.gpu_count).unwrap_or_default(),
        })
    });
    Ok(Live {
        kind: info.kind.clone(),
        namespace,
        name,
        spec,
        cost: (info.cost_of)(&value),
        placement: instance.and_then(|i| i.status?.placement?.chosen),
        refused: None,
        machine,
    })
}

/// The objects of the operator's kinds in the namespaces the manifests name, matching
/// `selector`, that the manifests do not hold; each with the API server's message refusing its
/// deletion (an admission policy's, such as deletion protection's), if it would.
async fn prune(
    client: &kube::Client,
    kinds: &[KindInfo],
    validator: &validation::Validator,
    paired: &[(Desired, Option<Live>)],
    selector: Option<&str>,
) -> Result<Vec<Live>, Error> {
    let managed = paired
        .iter()
        .filter(|(d, _)| matches!(d.what, Wanted::Managed { .. }));
    let namespaces: BTreeSet<&str> = managed.clone().map(|(d, _)| d.namespace.as_str()).collect();
    let named: BTreeSet<(&str, &str, &str)> = managed
        .map(|(d, _)| (d.kind.as_str(), d.namespace.as_str(), d.name.as_str()))
        .collect();
    let mut params = ListParams::default();
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    let mut out = Vec::new();
    for namespace in namespaces {
        for info in kinds {
            let api =
                Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &info.resource);
            for object in api.list(&params).await?.items {
                let name = object.metadata.name.clone().unwrap_or_default();
                if !named.contains(&(info.kind.as_str(), namespace, name.as_str())) {
                    let value = serde_json::to_value(&object).unwrap_or_default();
                    let mut pruned = live(info, object)?;
                    pruned.refused = validator.delete_refusal(info, &value);
                    out.push(pruned);
                }
            }
        }
    }
    Ok(out)
}

/// The catalog and GPU prices of the cluster's GpuOfferings, and how fresh their stock is
/// ([`core::stock_age`]).
async fn offerings(
    client: &kube::Client,
    catalog_ttl: std::time::Duration,
) -> Result<(Prices, String), Error> {
    let api: Api<GpuOffering> = Api::all(client.clone());
    let offerings = api.list(&ListParams::default()).await?.items;
    let now = Timestamp::now();
    let (catalog, pricing) = Catalog::from_offerings(&offerings, now);
    let (stale_stock, stock) = core::stock_age(&offerings, now, catalog_ttl);
    let prices = Prices {
        catalog,
        pricing,
        source: Some(PriceSource::Offerings),
        stale_stock,
        ..Prices::default()
    };
    Ok((prices, stock))
}

/// The catalog and the price list read from the cloud.
async fn from_cloud(cloud: &CloudClient) -> Result<Prices, Error> {
    Ok(Prices {
        catalog: Catalog::read(cloud)
            .await
            .map_err(|e| Error::Catalog(e.into()))?,
        pricing: cloud.get_pricing().await?,
        source: Some(PriceSource::PriceList),
        ..Prices::default()
    })
}
