//! The cost of calls: the Kubernetes libraries' estimates (`apiserver/pkg/cel/library/cost.go`),
//! then cel-go's own for the standard functions, else one plus the arguments.

use kube_cel::cel::common::ast::{Expr, LiteralValue, operators};
use kube_cel::cel::parser::Expression;

use super::coster::{
    CallEstimate, Coster, Operand, comparison_cost, replace_result_size, union_entries,
};
use super::estimate::*;
use super::types::Ty;

impl<'d> Coster<'d> {
    pub(super) fn function_cost(
        &mut self,
        e: &Expression,
        function: &str,
        target: Option<&Operand<'d, '_>>,
        args: &[Operand<'d, '_>],
        arg_costs: &[Estimate],
    ) -> CallEstimate {
        let arg_sum = arg_costs
            .iter()
            .fold(Estimate::fixed(0), |sum, cost| sum.add(*cost));
        if let Some(estimate) = self.library_cost(function, target, args) {
            return CallEstimate {
                cost: estimate.cost.add(arg_sum),
                result_size: estimate.result_size,
            };
        }
        let size = |operand: &Operand<'d, '_>| operand.size.unwrap_or(Estimate::UNKNOWN);
        let string_like = |ty: &Ty<'d>| matches!(ty, Ty::String | Ty::Bytes | Ty::Dyn);
        let fixed = |cost: u64| CallEstimate {
            cost: Estimate::fixed(cost).add(arg_sum),
            result_size: None,
        };
        match function {
            "format" if target.is_some() && args.len() == 1 => {
                let target_size = target.map_or(Estimate::UNKNOWN, size);
                let result = target_size.add(size(&args[0]));
                CallEstimate {
                    cost: target_size
                        .factor(STRING_TRAVERSAL_COST_FACTOR)
                        .add(arg_sum),
                    result_size: Some(result),
                }
            }
            "bytes" if target.is_none() && args.len() == 1 && matches!(args[0].ty, Ty::String) => {
                let sz = size(&args[0]);
                CallEstimate {
                    cost: sz.factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum),
                    result_size: Some(Estimate {
                        min: sz.min,
                        max: sz.max.saturating_mul(4),
                    }),
                }
            }
            "string" if target.is_none() && args.len() == 1 && matches!(args[0].ty, Ty::Bytes) => {
                let sz = size(&args[0]);
                CallEstimate {
                    cost: sz.factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum),
                    result_size: Some(Estimate {
                        min: sz.min / 4,
                        max: sz.max,
                    }),
                }
            }
            "strings.quote" if args.len() == 1 => {
                let sz = size(&args[0]);
                CallEstimate {
                    cost: sz.factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum),
                    result_size: Some(Estimate {
                        min: sz.min.saturating_add(2),
                        max: sz.max.saturating_mul(2).saturating_add(2),
                    }),
                }
            }
            "startsWith" | "endsWith" if target.is_some() && args.len() == 1 => CallEstimate {
                cost: size(&args[0])
                    .factor(STRING_TRAVERSAL_COST_FACTOR)
                    .add(arg_sum),
                result_size: None,
            },
            operators::IN if args.len() == 2 => {
                // in_list is linear in the list; in_map is a lookup.
                let in_list = size(&args[1]).add(arg_sum);
                let in_map = Estimate::fixed(1).add(arg_sum);
                let cost = match args[1].ty {
                    Ty::List(_) => in_list,
                    Ty::Dyn => in_list.union(in_map),
                    _ => in_map,
                };
                CallEstimate {
                    cost,
                    result_size: None,
                }
            }
            "matches" if target.is_some() && args.len() == 1 => {
                let target_size = target.map_or(Estimate::UNKNOWN, size);
                let string_cost = target_size
                    .add(Estimate::fixed(1))
                    .factor(STRING_TRAVERSAL_COST_FACTOR);
                let regex_cost = size(&args[0]).factor(REGEX_STRING_LENGTH_COST_FACTOR);
                CallEstimate {
                    cost: string_cost.multiply(regex_cost).add(arg_sum),
                    result_size: None,
                }
            }
            "contains" if target.is_some_and(|t| string_like(&t.ty)) && args.len() == 1 => {
                let target_size = target.map_or(Estimate::UNKNOWN, size);
                let string_cost = target_size.factor(STRING_TRAVERSAL_COST_FACTOR);
                let substring_cost = size(&args[0]).factor(STRING_TRAVERSAL_COST_FACTOR);
                CallEstimate {
                    cost: string_cost.multiply(substring_cost).add(arg_sum),
                    result_size: None,
                }
            }
            operators::LOGICAL_AND | operators::LOGICAL_OR if arg_costs.len() == 2 => {
                // Short-circuits: the least is the left side alone.
                CallEstimate {
                    cost: Estimate {
                        min: arg_costs[0].min,
                        max: arg_costs[0].add(arg_costs[1]).max,
                    },
                    result_size: None,
                }
            }
            operators::CONDITIONAL if args.len() == 3 => {
                let result_size = size(&args[1]).union(size(&args[2]));
                let entry = union_entries(
                    self.compute_entry_size(args[1].expr),
                    self.compute_entry_size(args[2].expr),
                );
                if let Some(entry) = entry {
                    self.entry_sizes.insert(e.id, entry);
                }
                CallEstimate {
                    cost: arg_costs[0].add(arg_costs[1].union(arg_costs[2])),
                    result_size: Some(result_size),
                }
            }
            operators::ADD if args.len() == 2 => self.add_cost(e, args, arg_sum),
            operators::LESS
            | operators::GREATER
            | operators::LESS_EQUALS
            | operators::GREATER_EQUALS
                if args.len() == 2 =>
            {
                let strings = string_like(&args[0].ty) && string_like(&args[1].ty);
                let by_length = comparison_cost(size(&args[0]), size(&args[1])).add(arg_sum);
                let cost = match (&args[0].ty, &args[1].ty) {
                    (Ty::Dyn, Ty::Dyn) => by_length.union(Estimate::fixed(1).add(arg_sum)),
                    _ if strings => by_length,
                    _ => Estimate::fixed(1).add(arg_sum),
                };
                CallEstimate {
                    cost,
                    result_size: None,
                }
            }
            operators::EQUALS | operators::NOT_EQUALS if args.len() == 2 => CallEstimate {
                cost: comparison_cost(size(&args[0]), size(&args[1])).add(arg_sum),
                result_size: None,
            },
            _ => fixed(1),
        }
    }

    pub(super) fn add_cost(
        &mut self,
        e: &Expression,
        args: &[Operand<'d, '_>],
        arg_sum: Estimate,
    ) -> CallEstimate {
        let size = |operand: &Operand<'d, '_>| operand.size.unwrap_or(Estimate::UNKNOWN);
        let (left, right) = (&args[0].ty, &args[1].ty);
        let is = |pred: fn(&Ty<'d>) -> bool| pred(left) || pred(right);
        let list = is(|ty| matches!(ty, Ty::List(_)));
        let text = is(|ty| matches!(ty, Ty::String | Ty::Bytes));
        let both_dyn = left.is_dyn() && right.is_dyn();
        if !(list || text || both_dyn) {
            return CallEstimate {
                cost: Estimate::fixed(1).add(arg_sum),
                result_size: None,
            };
        }
        let result_size = size(&args[0]).add(size(&args[1]));
        let entry = union_entries(
            self.compute_entry_size(args[0].expr),
            self.compute_entry_size(args[1].expr),
        );
        if let Some(entry) = entry {
            self.entry_sizes.insert(e.id, entry);
        }
        let list_cost = Estimate::fixed(1).add(arg_sum);
        let text_cost = result_size
            .factor(STRING_TRAVERSAL_COST_FACTOR)
            .add(arg_sum);
        let cost = if list {
            list_cost
        } else if text {
            text_cost
        } else {
            list_cost.union(text_cost)
        };
        CallEstimate {
            cost,
            result_size: Some(result_size),
        }
    }

    /// The Kubernetes libraries' estimates (`library.CostEstimator.EstimateCallCost`), by
    /// function name; `None` where cel-go's own estimate applies.
    pub(super) fn library_cost(
        &mut self,
        function: &str,
        target: Option<&Operand<'d, '_>>,
        args: &[Operand<'d, '_>],
    ) -> Option<CallEstimate> {
        let cost = |cost: Estimate| {
            Some(CallEstimate {
                cost,
                result_size: None,
            })
        };
        match function {
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" => {
                let target = target?;
                if let Ty::List(item) = &target.ty {
                    let mut element_cost = Estimate::fixed(1);
                    if matches!(**item, Ty::String | Ty::Bytes) {
                        element_cost = element_cost.add(
                            self.element_size(target)
                                .factor(STRING_TRAVERSAL_COST_FACTOR),
                        );
                    }
                    let size = self.library_size(target);
                    cost(Estimate {
                        min: size.min.saturating_mul(element_cost.min),
                        max: size.max.saturating_mul(element_cost.max),
                    })
                } else {
                    cost(self.traversal(target))
                }
            }
            "url" if args.len() == 1 => cost(self.traversal(&args[0])),
            "lowerAscii" | "upperAscii" | "substring" | "trim" => {
                let target = target?;
                let size = self.library_size(target);
                Some(CallEstimate {
                    cost: size.factor(STRING_TRAVERSAL_COST_FACTOR),
                    result_size: Some(size),
                })
            }
            "replace" if args.len() >= 2 => {
                let target = target?;
                let size = self.library_size(target);
                let result = replace_result_size(
                    size,
                    self.library_size(&args[0]),
                    self.library_size(&args[1]),
                );
                Some(CallEstimate {
                    cost: size.factor(2.0 * STRING_TRAVERSAL_COST_FACTOR),
                    result_size: Some(result),
                })
            }
            "split" => {
                let target = target?;
                let size = self.library_size(target);
                let mut max = size.max;
                if let Some(Expr::Literal(literal)) = args.get(1).map(|arg| &arg.expr.expr) {
                    max = match literal {
                        LiteralValue::Int(value) => u64::try_from(**value).unwrap_or(0),
                        LiteralValue::UInt(value) => **value,
                        _ => max,
                    };
                }
                Some(CallEstimate {
                    cost: size.factor(2.0 * STRING_TRAVERSAL_COST_FACTOR),
                    result_size: Some(Estimate { min: 0, max }),
                })
            }
            "join" => {
                let target = target?;
                let list_size = self.library_size(target);
                let mut size = Estimate::fixed(0);
                if matches!(target.ty, Ty::List(_)) {
                    size = list_size.multiply(self.element_size(target));
                }
                if let Some(separator) = args.first() {
                    let separators = Estimate {
                        min: list_size.min.saturating_sub(1),
                        max: list_size.max.saturating_sub(1),
                    };
                    size = size.add(self.library_size(separator).multiply(separators));
                }
                Some(CallEstimate {
                    cost: size.factor(STRING_TRAVERSAL_COST_FACTOR),
                    result_size: Some(size),
                })
            }
            "find" | "findAll" if !args.is_empty() => {
                let target = target?;
                let size = self.library_size(target);
                let string_cost = size
                    .add(Estimate::fixed(1))
                    .factor(STRING_TRAVERSAL_COST_FACTOR);
                let regex_cost = self
                    .library_size(&args[0])
                    .factor(REGEX_STRING_LENGTH_COST_FACTOR);
                Some(CallEstimate {
                    cost: string_cost.multiply(regex_cost),
                    result_size: Some(Estimate {
                        min: 0,
                        max: size.max,
                    }),
                })
            }
            // Member forms only: the global `isCIDR(s)`/`cidr(s)` are costed by cel-go.
            "cidr" | "isIP" | "isCIDR" | "quantity" | "isQuantity" if !args.is_empty() => {
                target?;
                cost(self.traversal(&args[0]))
            }
            "ip" => {
                let _ = target?;
                match args.first() {
                    Some(arg) if !matches!(arg.ty, Ty::Opaque) => cost(self.traversal(arg)),
                    _ => cost(Estimate::fixed(1)),
                }
            }
            "ip.isCanonical" if !args.is_empty() => {
                target?;
                cost(
                    self.library_size(&args[0])
                        .factor(2.0 * STRING_TRAVERSAL_COST_FACTOR),
                )
            }
            "masked"
            | "prefixLength"
            | "family"
            | "isUnspecified"
            | "isLoopback"
            | "isLinkLocalMulticast"
            | "isLinkLocalUnicast"
            | "sign"
            | "asInteger"
            | "isInteger"
            | "asApproximateFloat"
            | "isGreaterThan"
            | "isLessThan"
            | "compareTo"
            | "add"
            | "sub"
            | "serviceAccount"
            | "path"
            | "group"
            | "resource"
            | "subresource"
            | "namespace"
            | "name"
            | "allowed"
            | "reason"
            | "error"
            | "errored" => cost(Estimate::fixed(1)),
            "check" => cost(Estimate::fixed(350_000)),
            // IPs and CIDRs compare at a fixed cost (their size is unknown to cel-go).
            operators::EQUALS | operators::NOT_EQUALS
                if args.iter().any(|arg| matches!(arg.ty, Ty::Opaque)) =>
            {
                cost(Estimate::fixed(1))
            }
            "containsIP" | "containsCIDR" if !args.is_empty() => {
                target?;
                let ip_bytes = Estimate { min: 4, max: 16 };
                let mut total = ip_bytes.add(ip_bytes).factor(STRING_TRAVERSAL_COST_FACTOR);
                if function == "containsCIDR" {
                    total = total
                        .add(ip_bytes.factor(STRING_TRAVERSAL_COST_FACTOR))
                        .add(Estimate::fixed(1));
                }
                if matches!(args[0].ty, Ty::String) {
                    total = total.add(self.traversal(&args[0]));
                }
                cost(total)
            }
            _ => None,
        }
    }
}
