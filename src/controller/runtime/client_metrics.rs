//! Every request of the operator's Kubernetes client, counted and timed under client-go's
//! names (`rest_client_requests_total{code,method,host}`,
//! `rest_client_request_duration_seconds{verb,host}`): the client the operator builds is
//! wrapped once ([`counted_client`]), so each request, whoever makes it, goes through here.
//!
//! A request is timed to the response's headers, not to the end of its body: a watch's body
//! lasts as long as the watch. Labels are the method, the status code and the API server's
//! host only (no path, no object name), so the number of series stays small.

use crate::runtime::client_hooks::hooked_client;
use gpucloud_telemetry::Metrics;
use std::sync::Arc;
use std::time::Instant;

/// `client`, reporting each request to `metrics`. `host` is the API server's `host:port`
/// (the client's requests carry only a path; the base URL is added inside the client).
pub fn counted_client(client: &kube::Client, metrics: Arc<Metrics>, host: &str) -> kube::Client {
    let host: Arc<str> = host.into();
    hooked_client(
        client,
        Arc::new(move |request| {
            let method = request.method().as_str().to_string();
            let (metrics, host, started) = (metrics.clone(), host.clone(), Instant::now());
            Box::new(move |response| {
                let code = response.ok().map(|r| r.status().as_u16());
                metrics.kube_request(&method, &host, code, started.elapsed());
            })
        }),
    )
}

/// The `host` label of a cluster URL: its authority (`10.96.0.1:443`), without any user info.
pub fn host_label(url: &http::Uri) -> String {
    url.authority()
        .map(|authority| {
            let text = authority.as_str();
            text.rsplit_once('@')
                .map_or(text, |(_, host)| host)
                .to_string()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_label_is_the_authority_without_credentials() {
        let url: http::Uri = "https://10.96.0.1:443/prefix".parse().expect("a URL");
        assert_eq!(host_label(&url), "10.96.0.1:443");
        let url: http::Uri = "https://admin:s3cret@api.example:6443"
            .parse()
            .expect("a URL");
        assert_eq!(host_label(&url), "api.example:6443");
    }
}
