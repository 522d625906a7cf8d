//! What the operator costs the API server: the embedded API server's request counts (by user,
//! verb, resource and HTTP status), read over HTTP as any client reads them, and the operator's
//! writes among them.

use std::collections::BTreeMap;

/// The API server user the benchmark's operator runs as; the benchmark itself is `admin`.
pub const OPERATOR_USER: &str = "gpucloud-operator";
/// Where the embedded API server serves its request counts.
const COUNTS_PATH: &str = "/debug/gpucloud/request-counts";

/// Verbs that change something.
pub fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// One line of the API server's counts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestCount {
    pub user: String,
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub code: u16,
    pub count: u64,
}

/// The API server's request counts at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiCounts {
    /// (user, verb, resource with its subresource, status) to count.
    counts: BTreeMap<(String, String, String, u16), u64>,
}

impl ApiCounts {
    pub fn from_lines(lines: &[RequestCount]) -> ApiCounts {
        let mut counts = BTreeMap::new();
        for line in lines {
            let resource = if line.subresource.is_empty() {
                line.resource.clone()
            } else {
                format!("{}/{}", line.resource, line.subresource)
            };
            *counts
                .entry((line.user.clone(), line.verb.clone(), resource, line.code))
                .or_default() += line.count;
        }
        ApiCounts { counts }
    }

    /// Reads the counts from the API server `client` talks to.
    pub async fn read(client: &kube::Client) -> Result<ApiCounts, kube::Error> {
        let request = http::Request::get(COUNTS_PATH)
            .body(Vec::new())
            .map_err(kube::Error::HttpError)?;
        let lines: Vec<RequestCount> = client.request(request).await?;
        Ok(ApiCounts::from_lines(&lines))
    }

    /// Requests made between `earlier` and `self`.
    pub fn since(&self, earlier: &ApiCounts) -> ApiCounts {
        let counts = self
            .counts
            .iter()
            .filter_map(|(key, count)| {
                let delta = count.saturating_sub(earlier.counts.get(key).copied().unwrap_or(0));
                (delta > 0).then(|| (key.clone(), delta))
            })
            .collect();
        ApiCounts { counts }
    }

    /// `user`'s writes, any status, by `verb resource` (`update gpuinstances/status`).
    pub fn writes_of(&self, user: &str) -> BTreeMap<String, u64> {
        let mut writes = BTreeMap::new();
        for ((who, verb, resource, _), count) in &self.counts {
            if who == user && is_write(verb) {
                *writes.entry(format!("{verb} {resource}")).or_default() += count;
            }
        }
        writes
    }

    /// All of `user`'s requests, reads and watches included.
    pub fn requests_of(&self, user: &str) -> u64 {
        self.counts
            .iter()
            .filter(|((who, ..), _)| who == user)
            .map(|(_, count)| count)
            .sum()
    }

    /// `user`'s writes answered 409 Conflict (a stale resourceVersion, or a create of a name
    /// taken), by `verb resource`.
    pub fn conflicts_of(&self, user: &str) -> BTreeMap<String, u64> {
        let mut conflicts = BTreeMap::new();
        for ((who, verb, resource, code), count) in &self.counts {
            if who == user && is_write(verb) && *code == 409 {
                *conflicts.entry(format!("{verb} {resource}")).or_default() += count;
            }
        }
        conflicts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(
        user: &str,
        verb: &str,
        resource: &str,
        subresource: &str,
        code: u16,
        count: u64,
    ) -> RequestCount {
        RequestCount {
            user: user.into(),
            verb: verb.into(),
            group: String::new(),
            resource: resource.into(),
            subresource: subresource.into(),
            code,
            count,
        }
    }

    #[test]
    fn writes_are_the_users_changes_since_the_earlier_counts() {
        let before = ApiCounts::from_lines(&[line(OPERATOR_USER, "create", "events", "", 201, 4)]);
        let after = ApiCounts::from_lines(&[
            line(OPERATOR_USER, "create", "events", "", 201, 10),
            line(OPERATOR_USER, "update", "gpuinstances", "status", 200, 3),
            line(OPERATOR_USER, "update", "gpuinstances", "status", 409, 1),
            line(OPERATOR_USER, "list", "gpuinstances", "", 200, 7),
            line("admin", "create", "gpuinstances", "", 201, 5),
        ]);
        let delta = after.since(&before);
        assert_eq!(
            delta.writes_of(OPERATOR_USER),
            BTreeMap::from([
                ("create events".to_string(), 6),
                ("update gpuinstances/status".to_string(), 4),
            ])
        );
        assert_eq!(
            delta.conflicts_of(OPERATOR_USER),
            BTreeMap::from([("update gpuinstances/status".to_string(), 1)])
        );
        assert_eq!(delta.writes_of("admin").values().sum::<u64>(), 5);
    }
}
