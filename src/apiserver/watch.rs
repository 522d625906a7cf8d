//! watch: a chunked stream of `{"type": ..., "object": ...}` lines, replayed from the retained
//! window or started from the current state, with bookmarks, `timeoutSeconds`, label and field
//! selection, and a 410 `Expired` ERROR event when the requested resourceVersion is too old or
//! history is compacted while watching.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use crate::handlers::read::Selection;
use crate::handlers::{Context, bytes_at_version, check_acceptable};
use crate::registry::ResourceInfo;
use crate::status::ApiError;
use crate::store::{EventType, StoreError, StoreEvent, WatchEvent, WatchStart};

/// Longest watch the server keeps open when the client gives no `timeoutSeconds` (the real
/// server picks a random duration between 30 and 60 minutes).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// Chunks buffered towards a slow client before the producer waits.
const CHANNEL_CAPACITY: usize = 256;

pub fn watch(context: &Context<'_>) -> Result<Response, ApiError> {
    check_acceptable(&context.headers)?;
    let info = context.info().clone();
    let selection = Selection::from_query(context)?;
    let query = &context.query;
    let allow_bookmarks = query.flag("allowWatchBookmarks")?;
    let send_initial_events = query.flag("sendInitialEvents")?;
    let resource_version = query.get("resourceVersion").unwrap_or_default();
    let matching = query.get("resourceVersionMatch").unwrap_or_default();
    if send_initial_events && matching != "NotOlderThan" {
        return Err(ApiError::invalid_field(
            "meta.k8s.io",
            "ListOptions",
            "",
            "resourceVersionMatch",
            "FieldValueForbidden",
            "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if send_initial_events && !allow_bookmarks {
        return Err(ApiError::invalid_field(
            "meta.k8s.io",
            "ListOptions",
            "",
            "allowWatchBookmarks",
            "FieldValueRequired",
            "Required value: allowWatchBookmarks is required when sendInitialEvents is set",
        ));
    }
    if !send_initial_events && !matching.is_empty() {
        return Err(ApiError::bad_request(
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    let timeout = match query.get("timeoutSeconds") {
        None | Some("") => DEFAULT_WATCH_TIMEOUT,
        Some(text) => match text.parse::<u64>() {
            Ok(0) => DEFAULT_WATCH_TIMEOUT,
            Ok(seconds) => Duration::from_secs(seconds),
            Err(_) => {
                return Err(ApiError::bad_request(format!(
                    "invalid timeoutSeconds: {text:?}"
                )));
            }
        },
    };
    let start = if send_initial_events {
        WatchStart::InitialState
    } else {
        match resource_version {
            // Unset and "0" both start with the current state as synthetic ADDED events.
            "" | "0" => WatchStart::InitialState,
            text => WatchStart::After(text.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {text:?}"))
            })?),
        }
    };
    let accept = context
        .headers
        .get(axum::http::header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .unwrap_or_default();
    let rendering = if crate::handlers::wants_metadata_only(&context.headers) {
        Rendering::Metadata
    } else if crate::table::wants_table(accept) {
        let include_object = crate::table::IncludeObject::from_query(query.get("includeObject"))
            .map_err(|error| ApiError::bad_request(error.0))?;
        Rendering::Table(include_object)
    } else {
        Rendering::Object
    };
    let namespace = context.target.namespace.clone();
    let (sender, receiver) = mpsc::channel::<Bytes>(CHANNEL_CAPACITY);
    match context.state.store.watch(&info.storage_key(), start) {
        Ok(subscription) => {
            let filter = WatchFilter {
                info: info.clone(),
                rendering,
                namespace,
                selection,
            };
            tokio::spawn(run(
                sender,
                subscription,
                filter,
                WatchOptions {
                    allow_bookmarks,
                    send_initial_events,
                    timeout,
                    bookmark_interval: context.state.settings.bookmark_interval,
                },
                context.state.stopping.clone(),
                context.state.faults.clone(),
            ));
        }
        Err(StoreError::Expired { requested, oldest }) => {
            // The real server (serving watches from its watch cache) answers 200 and sends
            // the 410 as the stream's only event; kube-rs re-lists on it.
            let message = format!("too old resource version: {requested} ({oldest})");
            let line = error_line(&ApiError::gone(message));
            tokio::spawn(async move {
                let _ = sender.send(line).await;
            });
        }
        Err(error) => return Err(ApiError::internal(error.to_string())),
    }
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|chunk| (Ok::<_, Infallible>(chunk), receiver))
    });
    let mut response = (StatusCode::OK, Body::from_stream(stream)).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(response)
}

struct WatchFilter {
    info: ResourceInfo,
    rendering: Rendering,
    namespace: String,
    selection: Selection,
}

struct WatchOptions {
    allow_bookmarks: bool,
    send_initial_events: bool,
    timeout: Duration,
    bookmark_interval: Duration,
}

impl WatchFilter {
    /// The event type to send for a change, or `None` when the watcher does not see it.
    /// A modification moving an object into or out of a label selection is sent as ADDED or
    /// DELETED, as the real watch cache does.
    fn event_type(&self, event: &WatchEvent) -> Option<EventType> {
        if event.resource != self.info.storage_key() {
            return None;
        }
        if !self.namespace.is_empty() && event.namespace != self.namespace {
            return None;
        }
        if !self
            .selection
            .fields
            .matches_parts(&event.name, &event.namespace)
        {
            return None;
        }
        if !self.selection.matches_stored(&event.object) {
            return None;
        }
        let matches_now = self.selection.labels.matches(&event.labels);
        match (event.event_type, &event.previous_labels) {
            (EventType::Modified, Some(previous)) => {
                let matched_before = self.selection.labels.matches(previous);
                match (matched_before, matches_now) {
                    (true, true) => Some(EventType::Modified),
                    (false, true) => Some(EventType::Added),
                    (true, false) => Some(EventType::Deleted),
                    (false, false) => None,
                }
            }
            (event_type, _) => matches_now.then_some(event_type),
        }
    }
}

/// How event objects are rendered: as stored, or as a one-row `Table` for `kubectl get -w`.
#[derive(Clone, Copy)]
enum Rendering {
    Object,
    Metadata,
    Table(crate::table::IncludeObject),
}

fn event_line(
    info: &ResourceInfo,
    rendering: Rendering,
    event_type: EventType,
    object: &Bytes,
) -> Bytes {
    let object = bytes_at_version(info, object);
    let object = match rendering {
        Rendering::Object => object,
        Rendering::Metadata => crate::handlers::partial_object_metadata(&object),
        Rendering::Table(include_object) => match serde_json::from_slice(&object) {
            Ok(value) => {
                let table = crate::table::render_table(info, &[value], json!({}), include_object);
                Bytes::from(table.to_string())
            }
            Err(_) => object,
        },
    };
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(event_type.as_str().as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(&object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn error_line(error: &ApiError) -> Bytes {
    let line = json!({"type": "ERROR", "object": error.to_status()});
    Bytes::from(format!("{line}\n"))
}

fn bookmark_line(info: &ResourceInfo, resource_version: u64, initial_events_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": resource_version.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let line = json!({
        "type": "BOOKMARK",
        "object": {"kind": info.kind, "apiVersion": info.api_version(), "metadata": metadata},
    });
    Bytes::from(format!("{line}\n"))
}

async fn run(
    sender: mpsc::Sender<Bytes>,
    subscription: crate::store::WatchSubscription,
    filter: WatchFilter,
    options: WatchOptions,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    faults: Arc<crate::faults::ApiFaults>,
) {
    let deadline = tokio::time::Instant::now() + options.timeout;
    let mut cut = faults.watch_cut();
    let delay = faults.watch_delay();
    let cut_at = cut
        .lifetime
        .map(|lifetime| tokio::time::Instant::now() + lifetime);
    let mut receiver = subscription.receiver;
    // The highest resourceVersion covered. The subscription was taken at this version, so the
    // live receiver only holds later changes.
    let mut sent_through = subscription.start_resource_version;
    for event in &subscription.initial {
        if let Some(event_type) = filter.event_type(event)
            && sender
                .send(event_line(
                    &filter.info,
                    filter.rendering,
                    event_type,
                    &event.object,
                ))
                .await
                .is_err()
        {
            return;
        }
    }
    if options.send_initial_events
        && sender
            .send(bookmark_line(
                &filter.info,
                subscription.start_resource_version,
                true,
            ))
            .await
            .is_err()
    {
        return;
    }
    let mut bookmark_timer = tokio::time::interval(options.bookmark_interval);
    bookmark_timer.tick().await;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => return,
            () = sender.closed() => return,
            // Injected faults end the stream without an ERROR event, as a dropped
            // connection does.
            () = sleep_until_some(cut_at) => {
                faults.record_watch_cut();
                return;
            }
            _ = cut.disconnect.changed() => return,
            changed = stopping.changed() => {
                let stop = changed.is_err() || *stopping.borrow_and_update();
                if stop {
                    return;
                }
            }
            _ = bookmark_timer.tick(), if options.allow_bookmarks => {
                // Only what this watch has passed on: the store may be further ahead with
                // changes still queued for it, and a client resuming from a bookmark past
                // them (after a cut) would never see them.
                if sender.send(bookmark_line(&filter.info, sent_through, false)).await.is_err() {
                    return;
                }
            }
            received = receiver.recv() => match received {
                Ok(StoreEvent::Change(event)) => {
                    if event.resource_version <= sent_through {
                        continue;
                    }
                    sent_through = event.resource_version;
                    if !delay.is_zero() {
                        tokio::time::sleep_until(event.committed_at + delay).await;
                    }
                    if let Some(event_type) = filter.event_type(&event)
                        && sender.send(event_line(&filter.info, filter.rendering, event_type, &event.object)).await.is_err()
                    {
                        return;
                    }
                }
                Ok(StoreEvent::Compacted { resource_version }) => {
                    let message = format!(
                        "too old resource version: {sent_through} ({})",
                        resource_version + 1
                    );
                    let _ = sender.send(error_line(&ApiError::gone(message))).await;
                    return;
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // This watcher fell further behind than the fan-out buffer: like a real
                    // watch cache, end it with 410 so the client re-lists.
                    let message = format!("too old resource version: {sent_through} (watcher fell behind)");
                    let _ = sender.send(error_line(&ApiError::gone(message))).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
