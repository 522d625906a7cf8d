//! String formats a CRD schema may declare (`k8s.io/kube-openapi/pkg/validation/strfmt`).
//! Formats not listed here are accepted without checking, as the apiserver does for unknown ones.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use regex::Regex;

/// Whether `value` is valid for `format`; `None` when the format is not checked.
pub(crate) fn check(format: &str, value: &str) -> Option<bool> {
    Some(match format {
        "uuid" => matches(&UUID, value),
        "uuid3" => matches(&UUID3, value),
        "uuid4" => matches(&UUID4, value),
        "uuid5" => matches(&UUID5, value),
        "ipv4" => is_ipv4(value),
        "ipv6" => value.contains(':') && value.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(value),
        "mac" => matches(&MAC, value),
        "hostname" => is_hostname(value),
        "byte" => is_base64(value),
        "date" => is_date(value),
        "date-time" | "datetime" => is_date_time(value),
        "duration" => is_duration(value),
        "hexcolor" => matches(&HEX_COLOR, value),
        "email" => matches(&EMAIL, value),
        _ => return None,
    })
}

fn matches(regex: &LazyLock<Option<Regex>>, value: &str) -> bool {
    regex.as_ref().is_some_and(|regex| regex.is_match(value))
}

static UUID: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$").ok()
});
static UUID3: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$").ok()
});
static UUID4: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
        .ok()
});
static UUID5: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
        .ok()
});
static MAC: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$").ok());
static HEX_COLOR: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$").ok());
static EMAIL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^[^@\s]+@[^@\s]+\.[^@\s]+$").ok());

fn is_ipv4(value: &str) -> bool {
    // Go's net.ParseIP rejects leading zeros, as does Rust's parser.
    value.parse::<Ipv4Addr>().is_ok()
}

fn is_cidr(value: &str) -> bool {
    let Some((address, prefix)) = value.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    if prefix.to_string().len() != value.len() - address.len() - 1 {
        return false;
    }
    if address.contains(':') {
        address.parse::<Ipv6Addr>().is_ok() && prefix <= 128
    } else {
        is_ipv4(address) && prefix <= 32
    }
}

fn is_hostname(value: &str) -> bool {
    if value.is_empty() || value.len() > 255 {
        return false;
    }
    value.trim_end_matches('.').split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

fn is_base64(value: &str) -> bool {
    let bytes = value.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return false;
    }
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    if padding > 2 {
        return false;
    }
    bytes[..bytes.len() - padding]
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

fn is_date(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let [year, month, day] = parts.as_slice() else {
        return false;
    };
    if year.len() != 4 || month.len() != 2 || day.len() != 2 {
        return false;
    }
    let (Ok(year), Ok(month), Ok(day)) = (
        year.parse::<u32>(),
        month.parse::<u32>(),
        day.parse::<u32>(),
    ) else {
        return false;
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days_in_month).contains(&day)
}

/// RFC 3339 date-time, as strfmt's `ParseDateTime` accepts it.
fn is_date_time(value: &str) -> bool {
    static DATE_TIME: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(r"^(\d{4}-\d{2}-\d{2})[Tt ]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)?$").ok()
    });
    let Some(captures) = DATE_TIME.as_ref().and_then(|regex| regex.captures(value)) else {
        return false;
    };
    captures.get(1).is_some_and(|date| is_date(date.as_str()))
}

/// strfmt's duration: Go durations (`1h30m`) and the long forms strfmt adds (`3 days`).
fn is_duration(value: &str) -> bool {
    static DURATION: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d|w))+$|^\d+\s*(ns|us|ms|s|m|h|d|w|[a-z]+s?)$").ok()
    });
    value == "0" || matches(&DURATION, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_accept_and_reject() {
        let cases = [
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", true),
            ("uuid", "not-a-uuid", false),
            ("ipv4", "10.0.0.1", true),
            ("ipv4", "10.0.0.256", false),
            ("ipv6", "fd00::1", true),
            ("ipv6", "10.0.0.1", false),
            ("cidr", "10.0.0.0/8", true),
            ("cidr", "fd00::/64", true),
            ("cidr", "10.0.0.0/33", false),
            ("cidr", "10.0.0.0", false),
            ("mac", "00:1a:2b:3c:4d:5e", true),
            ("mac", "00:1a:2b", false),
            ("hostname", "gpu-1.example.com", true),
            ("hostname", "-bad.example", false),
            ("byte", "aGVsbG8=", true),
            ("byte", "aGVsbG8", false),
            ("date", "2024-02-29", true),
            ("date", "2023-02-29", false),
            ("date-time", "2024-01-02T03:04:05Z", true),
            ("date-time", "2024-01-02T03:04:05.123+01:00", true),
            ("date-time", "yesterday", false),
            ("duration", "1h30m", true),
            ("duration", "forever", false),
            ("hexcolor", "#ffaa00", true),
            ("email", "ops@example.com", true),
            ("email", "ops", false),
        ];
        for (format, value, valid) in cases {
            assert_eq!(check(format, value), Some(valid), "{format} {value}");
        }
        assert_eq!(check("made-up", "x"), None);
    }
}
