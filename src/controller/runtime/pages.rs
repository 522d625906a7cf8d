//! Lists read a page at a time.
//!
//! A list of every object of a kind is one answer of the whole kind, which the API server
//! writes and the operator decodes whole: at 100,000 objects, with their field ownership
//! records, the largest allocation either makes. Read in pages, neither holds more than one
//! page of it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::Api;
use kube::api::ListParams;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// Objects per page.
pub const PAGE: u32 = 500;

/// Hands every object of `api` to `each`, a page at a time.
pub async fn for_each_page<K>(api: &Api<K>, mut each: impl FnMut(Vec<K>)) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        each(page.items);
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// Every object of `api`'s kind in its scope, as the API server has it now, each decoded as
/// `T`: a view of the few fields the caller reads. The rest of each object (its field
/// ownership records above all) is skipped, not built and dropped: a check that reads a whole
/// namespace for each object it acts on costs a fraction of what whole objects would.
pub async fn list_as<K, T>(client: &kube::Client, api: &Api<K>) -> Result<Vec<T>, kube::Error>
where
    K: kube::Resource,
    T: DeserializeOwned,
{
    #[derive(serde::Deserialize)]
    struct Page<T> {
        metadata: ListMeta,
        items: Vec<T>,
    }
    let request = kube::core::Request::new(api.resource_url());
    let mut params = ListParams::default().limit(PAGE);
    let mut all = Vec::new();
    loop {
        let list = request.list(&params).map_err(kube::Error::BuildRequest)?;
        let page: Page<T> = client.request(list).await?;
        all.extend(page.items);
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(all),
        }
    }
}
