//! Call counters: requests per operation as they arrive and per status once answered, read
//! by tests and the admin API.

use std::collections::BTreeMap;

use serde::Serialize;

/// Requests per operation and status code.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Counters {
    /// Requests per operation, counted as they arrive: before the request acts, so whoever
    /// sees its effect in the account also sees it counted.
    #[serde(default)]
    pub received: BTreeMap<String, u64>,
    /// Answered requests per operation and status code, counted once answered.
    pub operations: BTreeMap<String, BTreeMap<u16, u64>>,
    /// Requests that matched no route (API or admin).
    pub unmatched: u64,
}

impl Counters {
    /// Requests per operation, every status and faults included, answered or not yet.
    pub fn totals(&self) -> BTreeMap<String, u64> {
        self.received.clone()
    }
}
