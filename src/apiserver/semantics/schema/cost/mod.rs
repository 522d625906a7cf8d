//! The static cost estimate of `x-kubernetes-validations` rules, made when a CRD is created or
//! updated, as kube-apiserver makes it: cel-go's `checker/cost.go` over the rule, with the sizes
//! of strings, lists and maps taken from the schema (`maxLength`, `maxItems`, `maxProperties`,
//! otherwise the largest a 3 MiB request could hold, after `apiserver/pkg/cel/common/schemas.go`)
//! and the Kubernetes libraries' call costs (`apiserver/pkg/cel/library/cost.go`). A rule costs
//! its estimate times the number of times it can run in one object (the product of the
//! `maxItems`/`maxProperties` above it); a rule over 10,000,000, or all rules of a CRD together
//! over 100,000,000, refuse the CRD with the apiserver's messages.
//!
//! The estimate needs the type of each subexpression (to tell `a < b` on strings, which costs the
//! strings' length, from `a < b` on integers). The `cel` parser does not type-check, so a small
//! checker here infers the types the estimate depends on, from the schema and the standard and
//! Kubernetes functions; what it cannot infer is `dyn`, costed as cel-go costs a call whose
//! overloads all match (the most expensive of them).

mod calls;
mod coster;
mod decl;
mod estimate;
mod types;

pub(crate) use coster::{estimate, runtime_estimate};
pub(crate) use decl::{Decl, RESERVED as CEL_RESERVED_WORDS};

use super::Node;
use super::errors::FieldError;
use estimate::MAX_REQUEST_SIZE_BYTES;

/// `StaticEstimatedCostLimit`: the most one rule may cost, times its cardinality.
pub(crate) const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// `StaticEstimatedCRDCostLimit`: the most all rules of one CRD may cost together.
pub(crate) const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;

// === The CRD-wide check (apiextensions validation.go) ===

/// One rule's cost as the total counts it.
struct RuleCost {
    path: String,
    cost: u64,
}

/// The cost errors of a compiled schema: each rule over [`STATIC_ESTIMATED_COST_LIMIT`] (its
/// estimate times its cardinality), and the total over [`STATIC_ESTIMATED_CRD_COST_LIMIT`].
/// Paths are relative to `openAPIV3Schema`, as the schema's other errors.
pub(crate) fn schema_cost_errors(root: &Node) -> Vec<FieldError> {
    let CostWalk {
        mut errors,
        total,
        most_expensive,
        ..
    } = CostWalk::over(root);
    if total > STATIC_ESTIMATED_CRD_COST_LIMIT {
        for expensive in most_expensive {
            errors.push(FieldError::forbidden(
                expensive.path,
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        errors.push(FieldError::forbidden(
            "",
            cost_error_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                total,
                STATIC_ESTIMATED_CRD_COST_LIMIT,
            ),
        ));
    }
    errors
}

/// The unbounded strings, lists and maps the rules read, each as
/// `<rule path>: self.<field>` (paths relative to `openAPIV3Schema`).
pub(crate) fn unbounded_rule_reads(root: &Node) -> Vec<String> {
    CostWalk::over(root).unbounded_reads
}

struct CostWalk {
    errors: Vec<FieldError>,
    total: u64,
    most_expensive: Vec<RuleCost>,
    unbounded_reads: Vec<String>,
}

impl CostWalk {
    fn over(root: &Node) -> CostWalk {
        let mut walk = CostWalk {
            errors: Vec::new(),
            total: 0,
            most_expensive: Vec::new(),
            unbounded_reads: Vec::new(),
        };
        walk.node(root, "", Some(1), true);
        walk
    }

    /// `cardinality`: how many times this node's value can occur in one object (`None`:
    /// unbounded, under a list or map without a bound).
    fn node(&mut self, node: &Node, path: &str, cardinality: Option<u64>, resource_root: bool) {
        if !node.rules.is_empty()
            && let Some(decl) = Decl::of(node, resource_root || node.embedded_resource)
        {
            let times = cardinality.unwrap_or_else(|| max_cardinality(decl.min_serialized_size));
            for (index, rule) in node.rules.iter().enumerate() {
                let rule_path = join(path, &format!("x-kubernetes-validations[{index}]"));
                let (rule_cost, reads) =
                    coster::estimate_with_reads(rule.expression(), &decl, rule.optional_old_self());
                self.unbounded_reads
                    .extend(reads.into_iter().map(|read| format!("{rule_path}: {read}")));
                let cost = if rule_cost == 0 {
                    0
                } else {
                    rule_cost.saturating_mul(times)
                };
                let field = format!("{rule_path}.rule");
                if cost > STATIC_ESTIMATED_COST_LIMIT {
                    self.errors.push(FieldError::forbidden(
                        field.clone(),
                        cost_error_message(
                            "estimated rule cost",
                            cost,
                            STATIC_ESTIMATED_COST_LIMIT,
                        ),
                    ));
                }
                self.observe(field, cost);
                if let Some(message) = rule.message_expression() {
                    let cost = estimate(message, &decl, rule.optional_old_self());
                    let field = format!("{rule_path}.messageExpression");
                    if cost > STATIC_ESTIMATED_COST_LIMIT {
                        self.errors.push(FieldError::forbidden(
                            field.clone(),
                            cost_error_message(
                                "estimated messageExpression cost",
                                cost,
                                STATIC_ESTIMATED_COST_LIMIT,
                            ),
                        ));
                    }
                    self.observe(field, cost);
                }
            }
        }
        // The factor this node multiplies its children's cardinality by.
        let factor = match node.type_name.as_deref() {
            Some("object") if node.additional_properties.is_some() => node
                .max_properties
                .map(|max| u64::try_from(max).unwrap_or(0)),
            Some("array") => node.max_items.map(|max| u64::try_from(max).unwrap_or(0)),
            _ => Some(1),
        };
        let child_cardinality = cardinality.zip(factor).map(|(a, b)| a.saturating_mul(b));
        for (name, property) in &node.properties {
            self.node(
                property,
                &join(path, &format!("properties[{name}]")),
                child_cardinality,
                false,
            );
        }
        if let Some(values) = node.additional_properties.as_deref() {
            self.node(
                values,
                &join(path, "additionalProperties"),
                child_cardinality,
                false,
            );
        }
        if let Some(items) = node.items.as_deref() {
            self.node(items, &join(path, "items"), child_cardinality, false);
        }
    }

    /// `TotalCost.ObserveExpressionCost`: adds to the total and keeps the four most expensive
    /// rules of at least 1% of the limit.
    fn observe(&mut self, path: String, cost: u64) {
        self.total = self.total.saturating_add(cost);
        if cost < STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
            return;
        }
        self.most_expensive.push(RuleCost { path, cost });
        self.most_expensive
            .sort_by_key(|rule| std::cmp::Reverse(rule.cost));
        self.most_expensive.truncate(4);
    }
}

fn join(path: &str, child: &str) -> String {
    if path.is_empty() {
        child.to_string()
    } else {
        format!("{path}.{child}")
    }
}

/// `maxCardinality`: how often data of this minimal size fits in one request, for rules under
/// an unbounded list or map.
fn max_cardinality(min_size: i64) -> u64 {
    u64::try_from(MAX_REQUEST_SIZE_BYTES / (min_size + 1)).unwrap_or(0)
}

/// `getCostErrorMessage`.
pub(crate) fn cost_error_message(name: &str, cost: u64, limit: u64) -> String {
    // The ratio of two u64 as the apiserver computes it (float64 division).
    #[allow(clippy::cast_precision_loss)]
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{name} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}
