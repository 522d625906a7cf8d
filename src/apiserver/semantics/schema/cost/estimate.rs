//! The sizes and cost units of cel-go's estimate, and the ranges it adds and multiplies.

/// `celconfig.MaxRequestSizeBytes`: the size bound of values the schema leaves unbounded.
pub(super) const MAX_REQUEST_SIZE_BYTES: i64 = 3 * 1024 * 1024;
pub(super) const MAX_DURATION_SIZE_JSON: i64 = 32;
pub(super) const MAX_DATETIME_SIZE_JSON: i64 = 32;
pub(super) const MIN_DURATION_SIZE_JSON: i64 = 3;
pub(super) const JSON_DATE_SIZE: i64 = 12;
pub(super) const MIN_DATETIME_SIZE_JSON: i64 = 21;
pub(super) const MIN_STRING_SIZE: i64 = 2;
pub(super) const MIN_BOOL_SIZE: i64 = 4;
pub(super) const MIN_NUMBER_SIZE: i64 = 1;
/// cel-go's cost factors (`common/cost.go`).
pub(super) const STRING_TRAVERSAL_COST_FACTOR: f64 = 0.1;
pub(super) const REGEX_STRING_LENGTH_COST_FACTOR: f64 = 0.25;
pub(super) const LIST_CREATE_BASE_COST: u64 = 10;
pub(super) const MAP_CREATE_BASE_COST: u64 = 30;
pub(super) const STRUCT_CREATE_BASE_COST: u64 = 40;
pub(super) const SELECT_AND_IDENT_COST: u64 = 1;
pub(super) const ACCUMULATOR: &str = "@result";

// === Estimates ===

/// A range of sizes or costs, as cel-go's `SizeEstimate` and `CostEstimate`; arithmetic
/// saturates at `u64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Estimate {
    pub(crate) min: u64,
    pub(crate) max: u64,
}

impl Estimate {
    pub(super) const UNKNOWN: Estimate = Estimate {
        min: 0,
        max: u64::MAX,
    };

    pub(super) const fn fixed(value: u64) -> Estimate {
        Estimate {
            min: value,
            max: value,
        }
    }

    pub(super) fn add(self, other: Estimate) -> Estimate {
        Estimate {
            min: self.min.saturating_add(other.min),
            max: self.max.saturating_add(other.max),
        }
    }

    pub(super) fn multiply(self, other: Estimate) -> Estimate {
        Estimate {
            min: self.min.saturating_mul(other.min),
            max: self.max.saturating_mul(other.max),
        }
    }

    pub(super) fn factor(self, per_unit: f64) -> Estimate {
        Estimate {
            min: multiply_by_factor(self.min, per_unit),
            max: multiply_by_factor(self.max, per_unit),
        }
    }

    pub(super) fn union(self, other: Estimate) -> Estimate {
        Estimate {
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }
}

/// `multiplyByCostFactor`: the product rounded up, saturating.
pub(super) fn multiply_by_factor(value: u64, per_unit: f64) -> u64 {
    // u64 -> f64 is how cel-go computes it (float64(x)); precision loss above 2^53 is theirs too.
    #[allow(clippy::cast_precision_loss)]
    let product = (value as f64 * per_unit).ceil();
    if product >= 18_446_744_073_709_551_616.0 {
        u64::MAX
    } else {
        // In range and non-negative by the check above.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rounded = product as u64;
        rounded
    }
}
