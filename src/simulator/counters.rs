//! Call counters: requests per operation as they arrive and per status once answered, in all
//! and per account, read by tests and the admin API.

use std::collections::BTreeMap;

use serde::Serialize;

/// Answered requests per operation name, then per status code.
pub type StatusCounts = BTreeMap<String, BTreeMap<u16, u64>>;

/// Requests per operation and status code.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Counters {
    /// Requests per operation, counted as they arrive: before the request acts, so whoever
    /// sees its effect in the account also sees it counted.
    #[serde(default)]
    pub received: BTreeMap<String, u64>,
    /// Answered requests per operation and status code, counted once answered.
    pub operations: StatusCounts,
    /// Requests that matched no route (API or admin).
    pub unmatched: u64,
    /// What `operations` counts, per account index (0 is the account of `api_keys`, then
    /// `other_accounts` in order), for the requests whose API key named an account: a `401`
    /// belongs to no account and is only in `operations`. An account without calls is absent.
    #[serde(default)]
    pub by_account: BTreeMap<usize, StatusCounts>,
}

impl Counters {
    /// Requests per operation, every status and faults included, answered or not yet.
    pub fn totals(&self) -> BTreeMap<String, u64> {
        self.received.clone()
    }

    /// Answered requests of account `account` per operation and status code; empty for an
    /// account without calls.
    pub fn of_account(&self, account: usize) -> StatusCounts {
        self.by_account.get(&account).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_without_accounts_still_decode() {
        let older = r#"{"received": {"GetBalance": 1}, "operations": {"GetBalance": {"200": 1}}, "unmatched": 0}"#;
        let counters: Counters = serde_json::from_str(older).expect("older counters decode");
        assert!(counters.by_account.is_empty());
        assert!(counters.of_account(0).is_empty());
        let mut with_accounts = counters.clone();
        with_accounts
            .by_account
            .insert(1, counters.operations.clone());
        let encoded = serde_json::to_string(&with_accounts).expect("counters encode");
        assert!(
            encoded.contains(r#""by_account":{"1":{"GetBalance":{"200":1}}}"#),
            "{encoded}"
        );
        let decoded: Counters = serde_json::from_str(&encoded).expect("counters decode");
        assert_eq!(decoded.of_account(1)["GetBalance"][&200], 1);
    }
}
