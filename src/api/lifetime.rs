//! Lifetimes: when a billed resource expires, and what then becomes of it.
//!
//! The expiry is derived from the object alone (its creation time plus `ttl`, or `expiresAt`),
//! never from the operator's memory, so it holds across restarts and follows every edit of
//! the field. [`Lifetime::stage`] says where an object stands at a given time; the controller
//! acts on that and sets a timer for the next stage.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How long before expiry a person is told, when `warnBefore` is left out.
pub const DEFAULT_WARN_BEFORE: SignedDuration = SignedDuration::from_hours(1);

/// The longest duration string a lifetime takes (`8760h`, `1h30m`, or a longer spelling of the
/// same): the bound kube-apiserver assumes for `format: duration` strings.
pub const MAX_DURATION_LENGTH: u32 = 32;

/// When a machine expires and what then happens to it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.ttl) != has(self.expiresAt)").message("set exactly one of ttl and expiresAt"),
    validation = Rule::new("!has(self.ttl) || (self.ttl.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && !self.ttl.matches('^([0.]+(ns|us|ms|s|m|h))+$'))").message("ttl must be a positive duration as kubectl writes them, such as 30m, 2h or 1h30m").field_path(".ttl"),
    validation = Rule::new("!has(self.warnBefore) || self.warnBefore.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')").message("warnBefore must be a duration as kubectl writes them, such as 30m or 1h").field_path(".warnBefore"),
)]
pub struct Lifetime {
    /// How long after the object's creation the machine expires, written as kubectl writes
    /// durations: `30m`, `2h`, `1h30m`. Set this or `expiresAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_DURATION_LENGTH))]
    pub ttl: Option<String>,
    /// When the machine expires (RFC 3339, e.g. `2026-12-01T18:00:00Z`). Set this or `ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// What happens at expiry: `Stop` (the default), `Hibernate` (Legacy tier), `Delete`
    /// (the object and its machine are deleted), or `Snapshot` (deleted after a final
    /// snapshot, as under `deletionPolicy: Snapshot`). After a `Stop` or `Hibernate` the
    /// machine stays so, whatever `powerState` says, until the lifetime is extended or removed.
    #[serde(default)]
    pub on_expiry: OnExpiry,
    /// How long before expiry a Warning Event (`ExpiresSoon`) and the Ready message say so;
    /// one hour when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_DURATION_LENGTH))]
    pub warn_before: Option<String>,
}

/// What becomes of a machine whose lifetime ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnExpiry {
    #[default]
    Stop,
    Hibernate,
    Delete,
    Snapshot,
}

impl OnExpiry {
    /// Whether expiry deletes the object (and, unless kept, its machine).
    pub fn deletes(self) -> bool {
        matches!(self, OnExpiry::Delete | OnExpiry::Snapshot)
    }
}

/// Where an object stands in its lifetime at some moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Before the warning time.
    Live {
        warn_at: Timestamp,
        expires_at: Timestamp,
    },
    /// Between the warning time and expiry.
    Expiring { expires_at: Timestamp },
    /// At or past expiry.
    Expired { expires_at: Timestamp },
}

impl Stage {
    pub fn expires_at(self) -> Timestamp {
        match self {
            Stage::Live { expires_at, .. }
            | Stage::Expiring { expires_at }
            | Stage::Expired { expires_at } => expires_at,
        }
    }

    /// The next moment the stage changes, if it still will.
    pub fn next_change(self) -> Option<Timestamp> {
        match self {
            Stage::Live { warn_at, .. } => Some(warn_at),
            Stage::Expiring { expires_at } => Some(expires_at),
            Stage::Expired { .. } => None,
        }
    }
}

impl Lifetime {
    /// When the machine expires: `expiresAt`, or `ttl` after `created`.
    pub fn expires_at(&self, created: Timestamp) -> Result<Timestamp, String> {
        match (&self.expires_at, &self.ttl) {
            (Some(at), _) => Ok(at.0),
            (None, Some(ttl)) => {
                let ttl = parse_duration(ttl).map_err(|e| format!("spec.lifetime.ttl: {e}"))?;
                created
                    .checked_add(ttl)
                    .map_err(|_| format!("spec.lifetime.ttl {ttl} is too long"))
            }
            (None, None) => Err("spec.lifetime: set ttl or expiresAt".into()),
        }
    }

    /// Where the machine stands at `now`, created at `created`.
    pub fn stage(&self, created: Timestamp, now: Timestamp) -> Result<Stage, String> {
        let expires_at = self.expires_at(created)?;
        let warn_before = match &self.warn_before {
            Some(text) => {
                parse_duration(text).map_err(|e| format!("spec.lifetime.warnBefore: {e}"))?
            }
            None => DEFAULT_WARN_BEFORE,
        };
        let warn_at = expires_at.checked_sub(warn_before).unwrap_or(expires_at);
        Ok(if now >= expires_at {
            Stage::Expired { expires_at }
        } else if now >= warn_at {
            Stage::Expiring { expires_at }
        } else {
            Stage::Live {
                warn_at,
                expires_at,
            }
        })
    }
}

/// The CEL rule (on a spec) refusing a lifetime that deletes the object under
/// `deletionPolicy: Orphan`: the object would go and the resource stay, billing.
pub fn deleting_expiry_is_not_orphan() -> kube::core::Rule {
    kube::core::Rule::new(
        "!has(self.lifetime) || !(self.lifetime.onExpiry in ['Delete', 'Snapshot']) || !has(self.deletionPolicy) || self.deletionPolicy != 'Orphan'",
    )
    .message("lifetime.onExpiry Delete or Snapshot with deletionPolicy Orphan would delete the object and leave the resource billing; use another deletionPolicy (or, for a GpuInstance, onExpiry Stop)")
    .field_path(".lifetime.onExpiry")
}

/// Where `object` stands in its lifetime at `now`; `None` when it has none. Its creation time
/// is the API server's (`now` until it has one).
pub fn stage_of<K: crate::Managed + kube::Resource>(
    object: &K,
    now: Timestamp,
) -> Result<Option<Stage>, String> {
    let Some(lifetime) = object.lifetime() else {
        return Ok(None);
    };
    let created = object
        .meta()
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    lifetime.stage(created, now).map(Some)
}

/// A non-negative duration as kubectl and Go write them: one or more numbers, each with a
/// unit (`ns`, `us`, `ms`, `s`, `m`, `h`), e.g. `90s`, `1h30m`, `1.5h`.
pub fn parse_duration(text: &str) -> Result<SignedDuration, String> {
    let invalid = || format!("{text:?} is not a duration such as 30m, 2h or 1h30m");
    let mut rest = text;
    let mut total = SignedDuration::ZERO;
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let (number, after) = rest.split_at(digits);
        let value: f64 = number.parse().map_err(|_| invalid())?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        let part = SignedDuration::try_from_secs_f64(value * seconds).map_err(|_| invalid())?;
        total = total.checked_add(part).ok_or_else(invalid)?;
        rest = next;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_writes_them() {
        for (text, seconds) in [
            ("30s", 30.0),
            ("2h", 7200.0),
            ("1h30m", 5400.0),
            ("1.5h", 5400.0),
            ("90m", 5400.0),
            ("500ms", 0.5),
            ("0s", 0.0),
        ] {
            assert_eq!(
                parse_duration(text).map(|d| d.as_secs_f64()),
                Ok(seconds),
                "{text}"
            );
        }
        for bad in ["", "2", "h", "-1h", "1d", "1h 30m", "1..5h", "P1D"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn stages_follow_the_clock() {
        let created = at("2026-11-27T09:00:00Z");
        let lifetime = Lifetime {
            ttl: Some("2h".into()),
            expires_at: None,
            on_expiry: OnExpiry::Stop,
            warn_before: Some("30m".into()),
        };
        let expires_at = at("2026-11-27T11:00:00Z");
        for (now, stage) in [
            (
                "2026-11-27T09:00:00Z",
                Stage::Live {
                    warn_at: at("2026-11-27T10:30:00Z"),
                    expires_at,
                },
            ),
            ("2026-11-27T10:30:00Z", Stage::Expiring { expires_at }),
            ("2026-11-27T10:59:59Z", Stage::Expiring { expires_at }),
            ("2026-11-27T11:00:00Z", Stage::Expired { expires_at }),
            ("2026-11-28T00:00:00Z", Stage::Expired { expires_at }),
        ] {
            assert_eq!(lifetime.stage(created, at(now)), Ok(stage), "{now}");
        }
        // expiresAt wins over the creation time; the default warning is an hour.
        let fixed = Lifetime {
            ttl: None,
            expires_at: Some(Time(at("2026-11-27T18:00:00Z"))),
            on_expiry: OnExpiry::Delete,
            warn_before: None,
        };
        assert_eq!(
            fixed.stage(created, at("2026-11-27T16:59:59Z")),
            Ok(Stage::Live {
                warn_at: at("2026-11-27T17:00:00Z"),
                expires_at: at("2026-11-27T18:00:00Z")
            })
        );
        assert_eq!(
            Stage::Expiring {
                expires_at: at("2026-11-27T18:00:00Z")
            }
            .next_change(),
            Some(at("2026-11-27T18:00:00Z"))
        );
        let broken = Lifetime {
            ttl: Some("forever".into()),
            ..fixed
        };
        let broken = Lifetime {
            expires_at: None,
            ..broken
        };
        assert!(
            broken
                .stage(created, created)
                .unwrap_err()
                .contains("spec.lifetime.ttl")
        );
    }
}
