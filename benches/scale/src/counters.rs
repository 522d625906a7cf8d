//! The simulator's admin API: request counters by operation and status, and what the
//! account holds.

use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("simulator admin API {path}: {source}")]
    Request {
        path: String,
        source: reqwest::Error,
    },
    #[error("simulator admin API {path} answered {status}")]
    Status { path: String, status: u16 },
}

/// Requests by operation name, then by HTTP status; in all, and per account.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub operations: BTreeMap<String, BTreeMap<String, u64>>,
    /// The same per account index (0 is the first account); absent for an account without
    /// calls.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_account: BTreeMap<usize, BTreeMap<String, BTreeMap<String, u64>>>,
}

/// Operations that change nothing in the cloud.
pub fn is_read(operation: &str) -> bool {
    operation.starts_with("List") || operation.starts_with("Get")
}

/// Operations that return a collection (what an observer calls).
pub fn is_list(operation: &str) -> bool {
    operation.starts_with("List")
}

/// Calls made once per account and resync interval whatever the number of objects: the
/// balance behind `gpucloud_account_balance`, the three billing lists behind
/// `gpucloud_spend`, and the catalog (GPU specifications and stock) and price list behind the
/// GpuOfferings (the regions, the catalog's third read, are a list).
pub const PER_ACCOUNT: [&str; 7] = [
    "GetBalance",
    "GetInstanceBilling",
    "GetSnapshotBilling",
    "GetVolumeBilling",
    "GetGpuSpecs",
    "GetGpuStock",
    "GetPricing",
];

pub fn is_per_account(operation: &str) -> bool {
    PER_ACCOUNT.contains(&operation)
}

impl Counters {
    /// Calls made between `earlier` and `self`.
    pub fn since(&self, earlier: &Counters) -> Counters {
        let by_account = self
            .by_account
            .iter()
            .map(|(account, operations)| {
                let before = earlier.by_account.get(account);
                (*account, operations_since(operations, before))
            })
            .filter(|(_, operations)| !operations.is_empty())
            .collect();
        Counters {
            operations: operations_since(&self.operations, Some(&earlier.operations)),
            by_account,
        }
    }

    /// The calls of account `account` alone.
    pub fn of_account(&self, account: usize) -> Counters {
        Counters {
            operations: self.by_account.get(&account).cloned().unwrap_or_default(),
            by_account: BTreeMap::new(),
        }
    }

    /// Calls of one operation, any status.
    pub fn calls(&self, operation: &str) -> u64 {
        self.operations
            .get(operation)
            .map(|s| s.values().sum())
            .unwrap_or(0)
    }

    /// Successful (2xx) calls of one operation.
    pub fn succeeded(&self, operation: &str) -> u64 {
        self.operations
            .get(operation)
            .map(|s| {
                s.iter()
                    .filter(|(status, _)| status.starts_with('2'))
                    .map(|(_, n)| n)
                    .sum()
            })
            .unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.operations.values().flat_map(|s| s.values()).sum()
    }

    /// Calls answered with a status, over every operation.
    pub fn with_status(&self, status: &str) -> u64 {
        self.operations.values().filter_map(|s| s.get(status)).sum()
    }

    /// Calls answered with a server error (5xx), over every operation.
    pub fn server_errors(&self) -> u64 {
        self.operations
            .values()
            .flat_map(|s| s.iter())
            .filter(|(status, _)| status.starts_with('5'))
            .map(|(_, n)| n)
            .sum()
    }

    /// Calls that may change the cloud (anything but lists and gets), any status.
    pub fn writes(&self) -> u64 {
        self.operations
            .iter()
            .filter(|(operation, _)| !is_read(operation))
            .map(|(_, s)| s.values().sum::<u64>())
            .sum()
    }

    /// Calls per operation, any status.
    pub fn by_operation(&self) -> BTreeMap<String, u64> {
        self.operations
            .iter()
            .map(|(operation, s)| (operation.clone(), s.values().sum()))
            .collect()
    }
}

type OperationCounts = BTreeMap<String, BTreeMap<String, u64>>;

/// The counts of `later` above those of `earlier`, leaving out what did not grow.
fn operations_since(later: &OperationCounts, earlier: Option<&OperationCounts>) -> OperationCounts {
    let mut operations = BTreeMap::new();
    for (operation, statuses) in later {
        let mut delta = BTreeMap::new();
        for (status, count) in statuses {
            let before = earlier
                .and_then(|e| e.get(operation))
                .and_then(|s| s.get(status))
                .copied()
                .unwrap_or(0);
            if *count > before {
                delta.insert(status.clone(), count - before);
            }
        }
        if !delta.is_empty() {
            operations.insert(operation.clone(), delta);
        }
    }
    operations
}

/// What a simulated account holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Holdings {
    pub instances: usize,
    pub volumes: usize,
    pub ssh_keys: usize,
    pub snapshots: usize,
    pub firewalls: usize,
}

impl Holdings {
    pub fn is_empty(&self) -> bool {
        *self == Holdings::default()
    }
}

/// One call that changed an account: what the benchmark reads of the simulator's ledger.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct LedgerRecord {
    pub operation: String,
    /// The name it gave a new resource.
    pub name: Option<String>,
    /// When it acted, in milliseconds since the epoch on the simulator's clock (this
    /// machine's).
    pub at_ms: i64,
    /// Whose call it was.
    pub caller: LedgerCaller,
}

/// The account a ledger record's call was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct LedgerCaller {
    pub account: usize,
}

/// Writes per account per `step`, from `from_ms` (the simulator's clock) until `until_ms`:
/// where a phase left its accounts' rate limit unused.
pub fn writes_per_step(
    ledger: &[LedgerRecord],
    accounts: usize,
    from_ms: i64,
    until_ms: i64,
    step: std::time::Duration,
) -> Vec<Vec<u32>> {
    let mut by_account = per_step(ledger, from_ms, until_ms, step, |record| {
        (record.caller.account < accounts).then_some(record.caller.account)
    });
    let steps = step_count(from_ms, until_ms, step);
    (0..accounts)
        .map(|account| {
            by_account
                .remove(&account)
                .unwrap_or_else(|| vec![0; steps])
        })
        .collect()
}

/// Writes of every account per operation per `step`: which writes an account's busy or
/// quiet steps were.
pub fn operations_per_step(
    ledger: &[LedgerRecord],
    from_ms: i64,
    until_ms: i64,
    step: std::time::Duration,
) -> BTreeMap<String, Vec<u32>> {
    per_step(ledger, from_ms, until_ms, step, |record| {
        Some(record.operation.clone())
    })
}

fn step_count(from_ms: i64, until_ms: i64, step: std::time::Duration) -> usize {
    let step_ms = (step.as_millis() as i64).max(1);
    (((until_ms - from_ms).max(0) + step_ms - 1) / step_ms) as usize
}

/// The ledger's records from `from_ms` until `until_ms` counted per `step` under their `key`
/// (records without one are left out).
fn per_step<K: Ord>(
    ledger: &[LedgerRecord],
    from_ms: i64,
    until_ms: i64,
    step: std::time::Duration,
    key: impl Fn(&LedgerRecord) -> Option<K>,
) -> BTreeMap<K, Vec<u32>> {
    let step_ms = (step.as_millis() as i64).max(1);
    let steps = step_count(from_ms, until_ms, step);
    let mut counts: BTreeMap<K, Vec<u32>> = BTreeMap::new();
    for record in ledger {
        if record.at_ms < from_ms || record.at_ms >= until_ms {
            continue;
        }
        let Some(key) = key(record) else { continue };
        let bucket = ((record.at_ms - from_ms) / step_ms) as usize;
        let steps_of_key = counts.entry(key).or_insert_with(|| vec![0; steps]);
        if let Some(count) = steps_of_key.get_mut(bucket) {
            *count += 1;
        }
    }
    counts
}

/// A client of the simulator's admin API.
#[derive(Clone)]
pub struct Admin {
    http: reqwest::Client,
    base_url: String,
    token: String,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("base_url", &self.base_url)
            .field("token", &"<redacted>")
            .finish()
    }
}

impl Admin {
    pub fn new(base_url: &str, token: String) -> Admin {
        Admin {
            http: reqwest::Client::new(),
            base_url: base_url.trim_end_matches('/').to_string(),
            token,
        }
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        let request_error = |source| Error::Request {
            path: path.into(),
            source,
        };
        let response = self
            .http
            .get(format!("{}{path}", self.base_url))
            .bearer_auth(&self.token)
            .timeout(std::time::Duration::from_secs(60))
            .send()
            .await
            .map_err(request_error)?;
        if !response.status().is_success() {
            return Err(Error::Status {
                path: path.into(),
                status: response.status().as_u16(),
            });
        }
        response.json::<T>().await.map_err(request_error)
    }

    async fn put<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<T, Error> {
        let request_error = |source| Error::Request {
            path: path.into(),
            source,
        };
        let response = self
            .http
            .put(format!("{}{path}", self.base_url))
            .bearer_auth(&self.token)
            .json(body)
            .timeout(std::time::Duration::from_secs(60))
            .send()
            .await
            .map_err(request_error)?;
        if !response.status().is_success() {
            return Err(Error::Status {
                path: path.into(),
                status: response.status().as_u16(),
            });
        }
        response.json::<T>().await.map_err(request_error)
    }

    pub async fn counters(&self) -> Result<Counters, Error> {
        self.get("/_admin/counters").await
    }

    /// Every call that changed an account, in the order they acted (the simulator keeps
    /// them with `--keep-ledger`).
    pub async fn ledger(&self) -> Result<Vec<LedgerRecord>, Error> {
        self.get("/_admin/ledger").await
    }

    /// The fault plan in force, as the admin API writes it (`FaultPlan` of the simulator).
    pub async fn faults(&self) -> Result<serde_json::Value, Error> {
        self.get("/_admin/faults").await
    }

    /// Puts `plan` in force from now on; returns it as the simulator took it.
    pub async fn set_faults(&self, plan: &serde_json::Value) -> Result<serde_json::Value, Error> {
        self.put("/_admin/faults", plan).await
    }

    /// What the first account holds.
    pub async fn holdings(&self) -> Result<Holdings, Error> {
        self.holdings_of(0).await
    }

    /// What account `account` (0 is the first) holds.
    pub async fn holdings_of(&self, account: usize) -> Result<Holdings, Error> {
        self.get(&format!("/_admin/holdings?account={account}"))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_counted_per_account_and_step_within_the_phase() {
        let record = |account, at_ms| LedgerRecord {
            operation: "CreateInstance".into(),
            name: None,
            at_ms,
            caller: LedgerCaller { account },
        };
        let ledger = [
            record(0, 999),
            record(0, 1_000),
            record(1, 1_400),
            record(0, 1_999),
            record(0, 2_000),
            record(1, 3_499),
            record(1, 3_500),
            record(7, 1_500),
        ];
        let counts = writes_per_step(&ledger, 2, 1_000, 3_500, std::time::Duration::from_secs(1));
        assert_eq!(counts, vec![vec![2, 1, 0], vec![1, 0, 1]]);
        let quiet = writes_per_step(&ledger, 3, 1_000, 3_500, std::time::Duration::from_secs(1));
        assert_eq!(
            quiet[2],
            vec![0, 0, 0],
            "an account without writes has its steps"
        );
    }

    #[test]
    fn writes_are_counted_per_operation_and_step_over_every_account() {
        let record = |operation: &str, account, at_ms| LedgerRecord {
            operation: operation.into(),
            name: None,
            at_ms,
            caller: LedgerCaller { account },
        };
        let ledger = [
            record("CreateInstance", 0, 999),
            record("CreateInstance", 0, 1_000),
            record("CreateInstance", 1, 1_100),
            record("AttachVolumes", 1, 2_500),
            record("AttachVolumes", 0, 3_000),
        ];
        let counts = operations_per_step(&ledger, 1_000, 3_000, std::time::Duration::from_secs(1));
        assert_eq!(
            counts,
            BTreeMap::from([
                ("AttachVolumes".to_string(), vec![0, 1]),
                ("CreateInstance".to_string(), vec![2, 0]),
            ])
        );
    }

    fn counters(entries: &[(&str, &str, u64)]) -> Counters {
        let mut operations: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for (operation, status, count) in entries {
            operations
                .entry(operation.to_string())
                .or_default()
                .insert(status.to_string(), *count);
        }
        Counters {
            operations,
            by_account: BTreeMap::new(),
        }
    }

    #[test]
    fn differences_sum_and_classify() {
        let before = counters(&[("ListInstances", "200", 3), ("CreateInstance", "200", 5)]);
        let after = counters(&[
            ("ListInstances", "200", 7),
            ("CreateInstance", "200", 5),
            ("CreateInstance", "429", 2),
            ("GetInstance", "200", 1),
        ]);
        let delta = after.since(&before);
        assert_eq!(delta.calls("ListInstances"), 4);
        assert_eq!(delta.calls("CreateInstance"), 2);
        assert_eq!(delta.succeeded("CreateInstance"), 0);
        assert_eq!(delta.with_status("429"), 2);
        assert_eq!(delta.server_errors(), 0);
        let errors = counters(&[("ListInstances", "500", 3), ("GetBalance", "503", 1)]);
        assert_eq!(errors.server_errors(), 4);
        assert_eq!(delta.writes(), 2);
        assert_eq!(delta.total(), 7);
    }
}
