//! Money as people read it: amounts written into status (and so shown by `kubectl get`) are
//! rounded to a millionth and never negative zero, so a sum of binary floats reads `0.299`,
//! not `0.29900000000000004`, and nothing reads `-0`. Only the written form changes: every
//! figure is computed at full precision.

use serde::Serializer;

/// `amount` rounded to a millionth, with negative zero read as zero.
pub fn rounded(amount: f64) -> f64 {
    let rounded = (amount * 1e6).round() / 1e6;
    if rounded == 0.0 { 0.0 } else { rounded }
}

/// Serializes an amount rounded ([`rounded`]).
pub fn serialize<S: Serializer>(amount: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(rounded(*amount))
}

/// Serializes an optional amount rounded ([`rounded`]).
pub fn option<S: Serializer>(amount: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
    match amount {
        Some(amount) => serializer.serialize_some(&rounded(*amount)),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_of_floats_read_as_their_decimals_and_zero_has_no_sign() {
        let cases = [
            (0.1 + 0.199, "0.299"),
            (0.79 * 3.0, "2.37"),
            (-0.0, "0.0"),
            (-0.000_000_1, "0.0"),
            (1530.88, "1530.88"),
            (2.99 * 0.1, "0.299"),
        ];
        for (amount, written) in cases {
            let json = serde_json::to_string(&rounded(amount)).unwrap();
            assert_eq!(json, written, "{amount:?}");
        }
        #[derive(serde::Serialize)]
        struct Status {
            #[serde(serialize_with = "option")]
            rate: Option<f64>,
            #[serde(serialize_with = "serialize")]
            spent: f64,
        }
        let status = Status {
            rate: Some(0.1 + 0.2),
            spent: -0.0,
        };
        assert_eq!(
            serde_json::to_string(&status).unwrap(),
            r#"{"rate":0.3,"spent":0.0}"#
        );
    }
}
