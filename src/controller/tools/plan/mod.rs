//! `gpucloud-operator plan -f PATH`: what applying manifests would do, before they are
//! applied. The manifests (files, directories, standard input) are compared with the cluster
//! and priced with the cloud's catalog, read-only: per object create, change, delete or
//! unchanged, the placement a GpuInstance would get, and the hourly cost before and after,
//! with the totals.
//!
//! Reading is at the edges ([`crate::tools::manifests`], the cluster's gets and lists and the cloud's
//! reads here); the plan itself ([`core::plan`]) is pure and table-tested. Nothing is
//! written: the cluster is read with get and list only (no dry run), and the cloud, when
//! asked (`--cloud-url`), with its catalogs, its price list and its price quote.

pub mod core;
mod error;
pub(crate) mod kinds;
pub(crate) mod text;

#[cfg(test)]
mod tests;

use crate::accounts::catalog::Catalog;
use crate::tools::manifests;
use core::{Live, Plan, PriceSource, Prices};
pub use error::{API_KEY_VARIABLE, Error};
use gpucloud_api::{GpuInstance, GpuOffering};
use gpucloud_cloud::model::PriceQuoteRequest;
use gpucloud_cloud::{ApiKey, ClientConfig, CloudClient};
use k8s_openapi::jiff::Timestamp;
use kinds::{Desired, KindInfo, Wanted};
use kube::api::{Api, DynamicObject, ListParams};
use std::collections::BTreeSet;

#[derive(clap::Args, Debug, Clone, Default)]
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
}

/// How the plan is printed.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Output {
    #[default]
    Text,
    Json,
}

/// [`plan`] with the client the environment configures (kubeconfig or in-cluster), the API
/// key from [`API_KEY_VARIABLE`] and standard input; the plan as `args.output` prints it.
pub async fn run(args: &Args) -> Result<String, Error> {
    let client = kube::Client::try_default().await?;
    let api_key = std::env::var(API_KEY_VARIABLE)
        .ok()
        .filter(|k| !k.is_empty())
        .map(ApiKey::new);
    let plan = plan(&client, args, api_key, &mut std::io::stdin()).await?;
    Ok(render(&plan, args.output))
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

/// Reads the manifests, the live objects they name (and with `--prune` the others), the
/// catalog and prices, and plans.
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
    let desired = kinds::read(documents, &kinds, &namespace)?;
    let mut paired = Vec::new();
    for object in desired {
        let live = match (&object.what, kinds.iter().find(|k| k.kind == object.kind)) {
            (Wanted::Managed { .. }, Some(info)) => {
                let api = Api::<DynamicObject>::namespaced_with(
                    client.clone(),
                    &object.namespace,
                    &info.resource,
                );
                match api.get_opt(&object.name).await? {
                    Some(found) => Some(live(info, found)?),
                    None => None,
                }
            }
            _ => None,
        };
        paired.push((object, live));
    }
    let pruned = if args.prune {
        prune(client, &kinds, &paired, args.selector.as_deref()).await?
    } else {
        Vec::new()
    };
    let prices = match &args.cloud_url {
        None => offerings(client).await?,
        Some(url) => {
            let key = api_key.ok_or(Error::ApiKeyMissing)?;
            let cloud = CloudClient::new(ClientConfig::new(url.clone(), key))?;
            let mut prices = from_cloud(&cloud).await?;
            // The quotes are for what the plan places: placed once without, then again.
            let first = core::plan(paired.clone(), pruned.clone(), &kinds, &prices);
            for (gpu_type, gpu_count) in core::to_quote(&first) {
                let request = PriceQuoteRequest {
                    gpu_type: gpu_type.clone(),
                    gpu_count,
                    hours: None,
                };
                let quote = cloud.quote_pricing(&request).await?;
                prices.quotes.insert((gpu_type, gpu_count), quote);
            }
            prices
        }
    };
    Ok(core::plan(paired, pruned, &kinds, &prices))
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
    let placement = if info.kind == <GpuInstance as kube::Resource>::kind(&()) {
        serde_json::from_value::<GpuInstance>(value.clone())
            .ok()
            .and_then(|i| i.status?.placement?.chosen)
    } else {
        None
    };
    Ok(Live {
        kind: info.kind.clone(),
        namespace,
        name,
        spec,
        cost: (info.cost_of)(&value),
        placement,
    })
}

/// The objects of the operator's kinds in the namespaces the manifests name, matching
/// `selector`, that the manifests do not hold.
async fn prune(
    client: &kube::Client,
    kinds: &[KindInfo],
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
                    out.push(live(info, object)?);
                }
            }
        }
    }
    Ok(out)
}

/// The catalog and GPU prices of the cluster's GpuOfferings.
async fn offerings(client: &kube::Client) -> Result<Prices, Error> {
    let api: Api<GpuOffering> = Api::all(client.clone());
    let offerings = api.list(&ListParams::default()).await?.items;
    let (catalog, pricing) = Catalog::from_offerings(&offerings, Timestamp::now());
    Ok(Prices {
        catalog,
        pricing,
        source: Some(PriceSource::Offerings),
        ..Prices::default()
    })
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
