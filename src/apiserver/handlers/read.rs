//! get and list.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};

use super::{
    Context, bytes_at_version, check_acceptable, json_response, partial_object_metadata,
    wants_metadata_only,
};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::ObjectIndex;

pub fn get(context: &Context<'_>) -> Result<Response, ApiError> {
    check_acceptable(&context.headers)?;
    let info = context.info();
    let stored = context.stored().ok_or_else(|| context.not_found())?;
    let bytes = bytes_at_version(info, &stored.bytes);
    if wants_metadata_only(&context.headers) {
        return Ok(json_response(
            StatusCode::OK,
            partial_object_metadata(&bytes),
        ));
    }
    if let Some(table) = table_for(context, std::slice::from_ref(&bytes), json!({}))? {
        return Ok(table);
    }
    Ok(json_response(StatusCode::OK, bytes))
}

/// Selection of a LIST or WATCH from its query parameters.
pub struct Selection {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selection {
    pub fn from_query(context: &Context<'_>) -> Result<Self, ApiError> {
        let labels = LabelSelector::parse(context.query.get("labelSelector").unwrap_or_default())
            .map_err(|error| ApiError::bad_request(error.to_string()))?;
        let fields = FieldSelector::parse_with(
            context.query.get("fieldSelector").unwrap_or_default(),
            crate::builtin::selectable_fields(context.info()),
        )
        .map_err(|error| ApiError::bad_request(error.to_string()))?;
        Ok(Selection { labels, fields })
    }

    pub fn matches(&self, index: &ObjectIndex) -> bool {
        self.labels.matches(&index.labels) && self.fields.matches(index)
    }

    /// The field requirements that read the stored object itself (Event fields); objects
    /// that cannot be parsed do not match.
    pub fn matches_stored(&self, bytes: &[u8]) -> bool {
        if !self.fields.needs_object() {
            return true;
        }
        serde_json::from_slice::<Value>(bytes)
            .map(|object| self.fields.matches_object(&object))
            .unwrap_or(false)
    }
}

/// The continue token: where the previous page ended and the resourceVersion of the first page.
#[derive(Debug, PartialEq, Eq)]
pub struct ContinueToken {
    pub resource_version: u64,
    pub after: (String, String),
}

impl ContinueToken {
    /// Encoded like the real server's token (base64 of `{"v","rv","start"}`).
    pub fn encode(&self) -> String {
        let token = json!({
            "v": "meta.k8s.io/v1",
            "rv": self.resource_version,
            "start": format!("{}/{}\u{0}", self.after.0, self.after.1),
        });
        base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
    }

    pub fn decode(text: &str) -> Result<Self, ApiError> {
        let invalid = || ApiError::bad_request(format!("continue key is not valid: {text:?}"));
        let bytes = base64::engine::general_purpose::URL_SAFE
            .decode(text)
            .or_else(|_| base64::engine::general_purpose::STANDARD.decode(text))
            .map_err(|_| invalid())?;
        let token: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
        if token["v"] != "meta.k8s.io/v1" {
            return Err(invalid());
        }
        let resource_version = token["rv"].as_u64().ok_or_else(invalid)?;
        let start = token["start"].as_str().ok_or_else(invalid)?;
        let start = start.strip_suffix('\u{0}').ok_or_else(invalid)?;
        let (namespace, name) = start.split_once('/').ok_or_else(invalid)?;
        Ok(ContinueToken {
            resource_version,
            after: (namespace.to_string(), name.to_string()),
        })
    }
}

/// How a LIST's resourceVersion parameters are to be served.
#[derive(Debug)]
enum ListFrom {
    /// Unset: the most recent state, paginated.
    MostRecent,
    /// `0`: any state; served in one page, as the real server does from its watch cache.
    Any,
    /// `NotOlderThan`: the current state, if it is at least this new.
    NotOlderThan(u64),
    /// `Exact`: only the current state can be served.
    Exact(u64),
}

fn list_from(context: &Context<'_>) -> Result<ListFrom, ApiError> {
    let resource_version = context.query.get("resourceVersion").unwrap_or_default();
    let matching = context
        .query
        .get("resourceVersionMatch")
        .unwrap_or_default();
    let invalid = |detail: &str| {
        ApiError::invalid_field(
            "meta.k8s.io",
            "ListOptions",
            "",
            "resourceVersionMatch",
            "FieldValueForbidden",
            detail,
        )
    };
    if resource_version.is_empty() {
        if !matching.is_empty() {
            return Err(invalid(
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        return Ok(ListFrom::MostRecent);
    }
    let parsed: u64 = resource_version.parse().map_err(|_| {
        ApiError::bad_request(format!("invalid resource version: {resource_version:?}"))
    })?;
    match matching {
        "" if parsed == 0 => Ok(ListFrom::Any),
        "" | "NotOlderThan" => {
            if parsed == 0 {
                Ok(ListFrom::Any)
            } else {
                Ok(ListFrom::NotOlderThan(parsed))
            }
        }
        "Exact" => {
            if parsed == 0 {
                Err(invalid(
                    "Forbidden: resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                ))
            } else {
                Ok(ListFrom::Exact(parsed))
            }
        }
        other => Err(ApiError::invalid_field(
            "meta.k8s.io",
            "ListOptions",
            "",
            "resourceVersionMatch",
            "FieldValueNotSupported",
            &format!(
                "Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
            ),
        )),
    }
}

pub fn list(context: &Context<'_>) -> Result<Response, ApiError> {
    check_acceptable(&context.headers)?;
    let info = context.info();
    let selection = Selection::from_query(context)?;
    let limit = match context.query.get("limit") {
        None | Some("") => None,
        Some(text) => match text.parse::<i64>() {
            Ok(limit) if limit > 0 => Some(limit as usize),
            Ok(_) => None,
            Err(_) => {
                return Err(ApiError::bad_request(format!("invalid limit: {text:?}")));
            }
        },
    };
    let continue_token = match context.query.get("continue") {
        None | Some("") => None,
        Some(text) => Some(ContinueToken::decode(text)?),
    };
    let from = list_from(context)?;
    if continue_token.is_some() && !matches!(from, ListFrom::MostRecent) {
        return Err(ApiError::invalid_field(
            "meta.k8s.io",
            "ListOptions",
            "",
            "resourceVersion",
            "FieldValueForbidden",
            "Forbidden: specifying resource version is not allowed when using continue",
        ));
    }
    let store = &context.state.store;
    let current = store.current_resource_version();
    let limit = match from {
        ListFrom::Any => None,
        ListFrom::NotOlderThan(requested) => {
            if requested > current {
                return Err(ApiError::timeout(format!(
                    "Too large resource version: {requested}, current: {current}"
                ))
                .with_retry_after(1));
            }
            limit
        }
        ListFrom::Exact(requested) => {
            if requested != current {
                return Err(ApiError::gone(format!(
                    "too old resource version: {requested} ({current})"
                )));
            }
            limit
        }
        ListFrom::MostRecent => limit,
    };
    let namespace =
        (!context.target.namespace.is_empty()).then_some(context.target.namespace.as_str());
    let page = store.list(
        &info.storage_key(),
        namespace,
        continue_token.as_ref().map(|token| &token.after),
        limit,
        &|index| selection.matches(index),
    );
    // A continued list reports the first page's resourceVersion, so a watch started from it
    // replays every change made while the pages were read.
    let resource_version = continue_token
        .as_ref()
        .map(|token| token.resource_version)
        .unwrap_or(page.resource_version);
    let mut metadata = json!({"resourceVersion": resource_version.to_string()});
    if let Some(after) = page.continue_after {
        metadata["continue"] = json!(
            ContinueToken {
                resource_version,
                after,
            }
            .encode()
        );
        if selection.labels.is_empty()
            && context
                .query
                .get("fieldSelector")
                .unwrap_or_default()
                .is_empty()
        {
            metadata["remainingItemCount"] = json!(page.remaining);
        }
    }
    let items: Vec<Bytes> = page
        .items
        .iter()
        .filter(|object| selection.matches_stored(&object.bytes))
        .map(|object| bytes_at_version(info, &object.bytes))
        .collect();
    if let Some(table) = table_for(context, &items, metadata.clone())? {
        return Ok(table);
    }
    let (list_kind, api_version, items) = if wants_metadata_only(&context.headers) {
        (
            "PartialObjectMetadataList".to_string(),
            "meta.k8s.io/v1".to_string(),
            items.iter().map(partial_object_metadata).collect(),
        )
    } else {
        (info.list_kind.clone(), info.api_version(), items)
    };
    let mut body = Vec::with_capacity(items.iter().map(Bytes::len).sum::<usize>() + 256);
    body.extend_from_slice(
        format!(
            "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
            json!(list_kind),
            json!(api_version),
            metadata
        )
        .as_bytes(),
    );
    for (position, item) in items.iter().enumerate() {
        if position > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item);
    }
    body.extend_from_slice(b"]}");
    Ok(json_response(StatusCode::OK, body))
}

/// A `meta.k8s.io/v1` Table when the client asked for one (kubectl get), else `None`.
pub fn table_for(
    context: &Context<'_>,
    items: &[Bytes],
    list_metadata: Value,
) -> Result<Option<Response>, ApiError> {
    let accept = context
        .headers
        .get(axum::http::header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .unwrap_or_default();
    if !crate::table::wants_table(accept) {
        return Ok(None);
    }
    let objects = items
        .iter()
        .map(|bytes| serde_json::from_slice::<Value>(bytes))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| ApiError::internal(format!("stored object is not JSON: {error}")))?;
    let include_object =
        crate::table::IncludeObject::from_query(context.query.get("includeObject"))
            .map_err(|error| ApiError::bad_request(error.0))?;
    let table = crate::table::render_table(context.info(), &objects, list_metadata, include_object);
    Ok(Some(super::value_response(StatusCode::OK, &table)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let token = ContinueToken {
            resource_version: 42,
            after: ("ns".into(), "name".into()),
        };
        assert_eq!(ContinueToken::decode(&token.encode()).unwrap(), token);
        assert!(ContinueToken::decode("not-a-token").is_err());
    }
}
