//! What the watches tell readiness (see `gpucloud_telemetry::health`): every watch the
//! operator opens is built by `ScopedApi::watch` (run.rs), which reports through the two
//! functions here.
//!
//! - [`signal`]: each item of kube-runtime's watcher, as a [`WatchSignal`] (an error starts
//!   or extends a failing streak; a complete list or a change ends it). Whether the first
//!   list has synced is told by the watch's reader, where the list is in place.
//! - [`reporting_client`]: a resumed watch says nothing until something changes, so after an
//!   outage a quiet watch would look failing for ever. Its client reports each watch request
//!   the API server accepts.

use crate::runtime::client_hooks::hooked_client;
use gpucloud_telemetry::{Health, WatchSignal};
use kube::runtime::watcher;
use std::sync::Arc;

/// What a watcher item tells readiness.
pub fn signal<K>(item: &Result<watcher::Event<K>, watcher::Error>) -> WatchSignal {
    match item {
        Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => WatchSignal::Listing,
        Ok(watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
            WatchSignal::Answered
        }
        Err(error) => WatchSignal::Failed {
            cause: cause(error),
        },
    }
}

/// A short cause without secrets: a status code and reason, or the kind of failure (never
/// the error's text, which may carry a URL or a server's message).
fn cause(error: &watcher::Error) -> String {
    let client = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(status) => {
            return format!("HTTP {} {} in the watch", status.code, status.reason);
        }
        watcher::Error::NoResourceVersion => return "no resourceVersion".into(),
    };
    match client {
        kube::Error::Api(status) => format!("HTTP {} {}", status.code, status.reason),
        kube::Error::HyperError(_) | kube::Error::Service(_) => "connection failed".into(),
        kube::Error::ReadEvents(_) => "reading the watch failed".into(),
        kube::Error::SerdeError(_) => "undecodable response".into(),
        kube::Error::Auth(_) => "authentication failed".into(),
        _ => "request failed".into(),
    }
}

/// `client`, reporting to `health` each watch request of `watch` the API server accepts.
pub fn reporting_client(client: &kube::Client, health: Arc<Health>, watch: String) -> kube::Client {
    let watch: Arc<str> = watch.into();
    hooked_client(
        client,
        Arc::new(move |request| {
            let is_watch = request
                .uri()
                .query()
                .is_some_and(|query| query.split('&').any(|pair| pair == "watch=true"));
            let (health, watch) = (health.clone(), watch.clone());
            Box::new(move |response| {
                if is_watch && response.is_ok_and(|r| r.status().is_success()) {
                    health.watch_signal(&watch, WatchSignal::Answered);
                }
            })
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watcher_items_map_to_signals_and_causes_hold_no_text() {
        let status = |code: u16, reason: &str| {
            let mut status = kube::core::Status::failure("secret-looking message", reason);
            status.code = code;
            Box::new(status)
        };
        let cases: Vec<(Result<watcher::Event<()>, watcher::Error>, WatchSignal)> = vec![
            (Ok(watcher::Event::Init), WatchSignal::Listing),
            (Ok(watcher::Event::InitApply(())), WatchSignal::Listing),
            (Ok(watcher::Event::InitDone), WatchSignal::Answered),
            (Ok(watcher::Event::Apply(())), WatchSignal::Answered),
            (Ok(watcher::Event::Delete(())), WatchSignal::Answered),
            (
                Err(watcher::Error::InitialListFailed(kube::Error::Api(status(
                    503,
                    "ServiceUnavailable",
                )))),
                WatchSignal::Failed {
                    cause: "HTTP 503 ServiceUnavailable".into(),
                },
            ),
            (
                Err(watcher::Error::WatchError(status(500, "InternalError"))),
                WatchSignal::Failed {
                    cause: "HTTP 500 InternalError in the watch".into(),
                },
            ),
            (
                Err(watcher::Error::WatchStartFailed(kube::Error::Service(
                    "tcp connect error: 10.0.0.1:443 refused".into(),
                ))),
                WatchSignal::Failed {
                    cause: "connection failed".into(),
                },
            ),
        ];
        for (item, expected) in cases {
            assert_eq!(signal(&item), expected, "{item:?}");
        }
    }
}
