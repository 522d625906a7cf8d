//! Lists read a page at a time.
//!
//! A list of every object of a kind is one answer of the whole kind, which the API server
//! writes and the operator decodes whole: at 100,000 objects, with their field ownership
//! records, the largest allocation either makes. Read in pages, neither holds more than one
//! page of it.

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
