//! cel-go's `checker/cost.go`: the cost of each expression node, with the sizes of the values it
//! reads, tracked through selections, indexes, comprehensions and the calls that build values.

use std::collections::HashMap;

use kube_cel::cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};
use kube_cel::cel::parser::Expression;
use serde_json::Value;

use super::decl::{Decl, DeclKind, actual_size};
use super::estimate::*;
use super::types::{Ty, literal_type, result_type};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Container {
    List,
    Map,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct EntrySize {
    pub(super) container: Container,
    pub(super) key: Estimate,
    pub(super) value: Estimate,
}

pub(super) fn union_entries(a: Option<EntrySize>, b: Option<EntrySize>) -> Option<EntrySize> {
    let (a, b) = (a?, b?);
    Some(EntrySize {
        container: a.container,
        key: a.key.union(b.key),
        value: a.value.union(b.value),
    })
}

pub(super) struct LocalVar<'d> {
    pub(super) path: Option<Vec<String>>,
    pub(super) size: Option<Estimate>,
    pub(super) entry: Option<EntrySize>,
    pub(super) ty: Ty<'d>,
}

/// An argument or target as a function's estimate sees it (cel-go's `AstNode`).
pub(super) struct Operand<'d, 'e> {
    pub(super) expr: &'e Expression,
    pub(super) path: Option<Vec<String>>,
    pub(super) ty: Ty<'d>,
    pub(super) size: Option<Estimate>,
}

pub(super) struct CallEstimate {
    pub(super) cost: Estimate,
    pub(super) result_size: Option<Estimate>,
}

pub(super) struct Coster<'d> {
    pub(super) root: &'d Decl,
    /// At evaluation: the values of `self` and `oldSelf`, whose actual sizes replace the
    /// declared bounds.
    pub(super) actual: Option<[Option<&'d Value>; 2]>,
    pub(super) root_ty: Ty<'d>,
    pub(super) optional_old_self: bool,
    pub(super) paths: HashMap<u64, Vec<String>>,
    pub(super) sizes: HashMap<u64, Estimate>,
    pub(super) entry_sizes: HashMap<u64, EntrySize>,
    pub(super) types: HashMap<u64, Ty<'d>>,
    pub(super) locals: HashMap<String, Vec<LocalVar<'d>>>,
    /// The paths of unbounded strings, lists and maps whose size the estimate looked up.
    pub(super) unbounded_reads: std::collections::BTreeSet<String>,
}

impl<'d> Coster<'d> {
    fn new(
        root: &'d Decl,
        actual: Option<[Option<&'d Value>; 2]>,
        optional_old_self: bool,
    ) -> Coster<'d> {
        Coster {
            root,
            actual,
            root_ty: Ty::of(root),
            optional_old_self,
            paths: HashMap::new(),
            sizes: HashMap::new(),
            entry_sizes: HashMap::new(),
            types: HashMap::new(),
            locals: HashMap::new(),
            unbounded_reads: std::collections::BTreeSet::new(),
        }
    }
}

/// The estimated cost (its maximum) of one rule or message expression evaluated at a node
/// declared as `root`.
pub(crate) fn estimate(expression: &Expression, root: &Decl, optional_old_self: bool) -> u64 {
    estimate_with_reads(expression, root, optional_old_self).0
}

/// The estimated cost of evaluating a rule on these values of `self` and `oldSelf`: the static
/// estimate with each string, list and map at its actual size instead of its declared bound.
/// It is an upper bound of what cel-go's runtime meters (which credits short-circuits), used
/// against the per-call limit and the per-object budget.
pub(crate) fn runtime_estimate(
    expression: &Expression,
    root: &Decl,
    optional_old_self: bool,
    self_value: &Value,
    old_value: Option<&Value>,
) -> u64 {
    let mut coster = Coster::new(root, Some([Some(self_value), old_value]), optional_old_self);
    coster.cost(expression).max
}

/// The estimate and the unbounded values it read (`self.from`, `self.labels[*]`).
pub(super) fn estimate_with_reads(
    expression: &Expression,
    root: &Decl,
    optional_old_self: bool,
) -> (u64, std::collections::BTreeSet<String>) {
    let mut coster = Coster::new(root, None, optional_old_self);
    let cost = coster.cost(expression).max;
    (cost, coster.unbounded_reads)
}

impl<'d> Coster<'d> {
    pub(super) fn ty(&self, e: &Expression) -> Ty<'d> {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Dyn)
    }

    pub(super) fn cost(&mut self, e: &Expression) -> Estimate {
        let (cost, ty) = match &e.expr {
            Expr::Literal(literal) => (Estimate::fixed(0), literal_type(literal)),
            Expr::Ident(name) => self.cost_ident(e, name),
            Expr::Select(select) => {
                self.cost_select(e, &select.operand, &select.field, select.test)
            }
            Expr::Call(call) => {
                self.cost_call(e, &call.func_name, call.target.as_deref(), &call.args)
            }
            Expr::List(list) => self.cost_list(e, &list.elements),
            Expr::Map(map) => self.cost_map(e, &map.entries),
            Expr::Struct(structure) => {
                let mut sum = Estimate::fixed(STRUCT_CREATE_BASE_COST);
                for entry in &structure.entries {
                    if let EntryExpr::StructField(field) = &entry.expr {
                        sum = sum.add(self.cost(&field.value));
                    }
                }
                (sum, Ty::Dyn)
            }
            Expr::Comprehension(comprehension) => self.cost_comprehension(e, comprehension),
            Expr::Unspecified => (Estimate::fixed(0), Ty::Dyn),
        };
        self.types.insert(e.id, ty);
        cost
    }

    pub(super) fn peek_local(&self, name: &str) -> Option<&LocalVar<'d>> {
        self.locals.get(name).and_then(|stack| stack.last())
    }

    pub(super) fn push_local(&mut self, name: &str, var: LocalVar<'d>) {
        self.locals.entry(name.to_string()).or_default().push(var);
    }

    pub(super) fn pop_local(&mut self, name: &str) {
        if let Some(stack) = self.locals.get_mut(name) {
            stack.pop();
        }
    }

    pub(super) fn path(&self, e: &Expression) -> Option<Vec<String>> {
        if let Expr::Ident(name) = &e.expr
            && let Some(var) = self.peek_local(name)
        {
            return var.path.clone();
        }
        self.paths.get(&e.id).cloned()
    }

    pub(super) fn cost_ident(&mut self, e: &Expression, name: &str) -> (Estimate, Ty<'d>) {
        let ty = match self.peek_local(name) {
            Some(var) => {
                let (path, ty) = (var.path.clone(), var.ty.clone());
                if let Some(path) = path {
                    self.paths.insert(e.id, path);
                } else {
                    self.paths.remove(&e.id);
                }
                ty
            }
            None => {
                self.paths.insert(e.id, vec![name.to_string()]);
                match name {
                    "self" => self.root_ty.clone(),
                    "oldSelf" if self.optional_old_self => {
                        Ty::Optional(Box::new(self.root_ty.clone()))
                    }
                    "oldSelf" => self.root_ty.clone(),
                    "int" | "uint" | "double" | "string" | "bool" | "bytes" | "list" | "map"
                    | "null_type" | "type" => Ty::Type,
                    _ => Ty::Dyn,
                }
            }
        };
        (Estimate::fixed(SELECT_AND_IDENT_COST), ty)
    }

    pub(super) fn cost_select(
        &mut self,
        e: &Expression,
        operand: &Expression,
        field: &str,
        test_only: bool,
    ) -> (Estimate, Ty<'d>) {
        if test_only {
            // has(): the presence test costs one, as the ident does.
            let cost = Estimate::fixed(1).add(self.cost(operand));
            return (cost, Ty::Bool);
        }
        let mut sum = self.cost(operand);
        let operand_ty = self.ty(operand);
        if operand_ty.selection_costs() {
            sum = sum.add(Estimate::fixed(SELECT_AND_IDENT_COST));
        }
        let mut path = self.path(operand).unwrap_or_default();
        path.push(field.to_string());
        self.paths.insert(e.id, path);
        let ty = match &operand_ty {
            Ty::Object(fields) => fields.get(field).map_or(Ty::Dyn, Ty::of),
            Ty::Map(_, value) => (**value).clone(),
            _ => Ty::Dyn,
        };
        (sum, ty)
    }

    pub(super) fn operand<'e>(&mut self, e: &'e Expression) -> Operand<'d, 'e> {
        let mut path = self.path(e);
        if path
            .as_ref()
            .and_then(|p| p.first())
            .is_some_and(|first| first == ACCUMULATOR)
        {
            path = None;
        }
        Operand {
            expr: e,
            path,
            ty: self.ty(e),
            size: self.compute_size(e),
        }
    }

    pub(super) fn cost_call(
        &mut self,
        e: &Expression,
        function: &str,
        target: Option<&Expression>,
        args: &[Expression],
    ) -> (Estimate, Ty<'d>) {
        if function == "dyn" && target.is_none() && args.len() == 1 {
            let cost = Estimate::fixed(1).add(self.cost(&args[0]));
            if let Some(size) = self.compute_size(&args[0]) {
                self.sizes.insert(e.id, size);
            }
            if let Some(entry) = self.compute_entry_size(&args[0]) {
                self.entry_sizes.insert(e.id, entry);
            }
            return (cost, Ty::Dyn);
        }
        let mut arg_costs = Vec::with_capacity(args.len());
        let mut operands = Vec::with_capacity(args.len());
        for arg in args {
            arg_costs.push(self.cost(arg));
            operands.push(self.operand(arg));
        }
        let mut sum = Estimate::fixed(0);
        let target_operand = match target {
            Some(target) => {
                sum = sum.add(self.cost(target));
                Some(self.operand(target))
            }
            None => None,
        };
        let arg_types: Vec<Ty<'d>> = operands.iter().map(|operand| operand.ty.clone()).collect();
        let ty = result_type(
            function,
            target_operand.as_ref().map(|target| &target.ty),
            &arg_types,
        );
        let estimate =
            self.function_cost(e, function, target_operand.as_ref(), &operands, &arg_costs);
        let mut result_size = estimate.result_size;
        if function == operators::INDEX && !operands.is_empty() {
            let container = &operands[0];
            let marker = match container.ty {
                Ty::Map(..) => "@values",
                _ => "@items",
            };
            result_size = self
                .compute_entry_size(container.expr)
                .map(|entry| entry.value);
            let mut path = container.path.clone().unwrap_or_default();
            path.push(marker.to_string());
            self.paths.insert(e.id, path);
        }
        // The call's type is needed before its own size is computed from it.
        self.types.insert(e.id, ty.clone());
        if result_size.is_none() {
            result_size = self.compute_size(e);
        }
        if let Some(size) = result_size {
            self.sizes.insert(e.id, size);
        }
        (sum.add(estimate.cost), ty)
    }

    pub(super) fn cost_list(
        &mut self,
        e: &Expression,
        elements: &[Expression],
    ) -> (Estimate, Ty<'d>) {
        let mut sum = Estimate::fixed(0);
        let mut item_size = Estimate {
            min: if elements.is_empty() { 0 } else { u64::MAX },
            max: 0,
        };
        let mut item_ty = Ty::Dyn;
        for element in elements {
            sum = sum.add(self.cost(element));
            item_size = item_size.union(self.size_or_unknown(element));
            if item_ty.is_dyn() {
                item_ty = self.ty(element);
            }
        }
        self.entry_sizes.insert(
            e.id,
            EntrySize {
                container: Container::List,
                key: Estimate::fixed(1),
                value: item_size,
            },
        );
        (
            sum.add(Estimate::fixed(LIST_CREATE_BASE_COST)),
            Ty::List(Box::new(item_ty)),
        )
    }

    pub(super) fn cost_map(
        &mut self,
        e: &Expression,
        entries: &[kube_cel::cel::common::ast::IdedEntryExpr],
    ) -> (Estimate, Ty<'d>) {
        let mut sum = Estimate::fixed(0);
        let start = Estimate {
            min: if entries.is_empty() { 0 } else { u64::MAX },
            max: 0,
        };
        let (mut key_size, mut value_size) = (start, start);
        let (mut key_ty, mut value_ty) = (Ty::Dyn, Ty::Dyn);
        for entry in entries {
            if let EntryExpr::MapEntry(entry) = &entry.expr {
                sum = sum.add(self.cost(&entry.key));
                sum = sum.add(self.cost(&entry.value));
                key_size = key_size.union(self.size_or_unknown(&entry.key));
                value_size = value_size.union(self.size_or_unknown(&entry.value));
                if key_ty.is_dyn() {
                    key_ty = self.ty(&entry.key);
                }
                if value_ty.is_dyn() {
                    value_ty = self.ty(&entry.value);
                }
            }
        }
        self.entry_sizes.insert(
            e.id,
            EntrySize {
                container: Container::Map,
                key: key_size,
                value: value_size,
            },
        );
        (
            sum.add(Estimate::fixed(MAP_CREATE_BASE_COST)),
            Ty::Map(Box::new(key_ty), Box::new(value_ty)),
        )
    }

    pub(super) fn cost_comprehension(
        &mut self,
        e: &Expression,
        c: &kube_cel::cel::common::ast::ComprehensionExpr,
    ) -> (Estimate, Ty<'d>) {
        if is_bind(c) {
            // cel.bind(): lazily initialized, so the empty range's cost is kept.
            let mut sum = self.cost(&c.iter_range);
            sum = sum.add(self.cost(&c.accu_init));
            let var = self.local_from(&c.accu_init);
            self.push_local(&c.accu_var, var);
            sum = sum.add(self.cost(&c.result));
            self.pop_local(&c.accu_var);
            if let Some(size) = self.compute_size(&c.result) {
                self.sizes.insert(e.id, size);
            }
            if let Some(entry) = self.compute_entry_size(&c.result) {
                self.entry_sizes.insert(e.id, entry);
            }
            return (sum, self.ty(&c.result));
        }
        let mut sum = self.cost(&c.iter_range);
        sum = sum.add(self.cost(&c.accu_init));
        let accu = self.local_from(&c.accu_init);
        self.push_local(&c.accu_var, accu);

        let range_ty = self.ty(&c.iter_range);
        let range_entry = self.compute_entry_size(&c.iter_range);
        let container = range_entry
            .map(|entry| entry.container)
            .unwrap_or(match range_ty {
                Ty::List(_) => Container::List,
                _ => Container::Map,
            });
        let range_path = self.path(&c.iter_range).unwrap_or_default();
        let with_marker = |marker: &str| {
            let mut path = range_path.clone();
            path.push(marker.to_string());
            Some(path)
        };
        match &c.iter_var2 {
            Some(value_var) => {
                let (key_marker, value_marker) = match container {
                    Container::List => ("@indices", "@items"),
                    Container::Map => ("@keys", "@values"),
                };
                let (key_ty, value_ty) = match &range_ty {
                    Ty::List(item) => (Ty::Int, (**item).clone()),
                    Ty::Map(key, value) => ((**key).clone(), (**value).clone()),
                    _ => (Ty::Dyn, Ty::Dyn),
                };
                let key = LocalVar {
                    path: with_marker(key_marker),
                    size: range_entry.map(|entry| entry.key),
                    entry: None,
                    ty: key_ty,
                };
                let value = LocalVar {
                    path: with_marker(value_marker),
                    size: range_entry.map(|entry| entry.value),
                    entry: None,
                    ty: value_ty,
                };
                self.push_local(&c.iter_var, key);
                self.push_local(value_var, value);
            }
            None => {
                let (marker, size) = match container {
                    Container::List => ("@items", range_entry.map(|entry| entry.value)),
                    Container::Map => ("@keys", range_entry.map(|entry| entry.key)),
                };
                let var = LocalVar {
                    path: with_marker(marker),
                    size,
                    entry: None,
                    ty: range_ty.element(),
                };
                self.push_local(&c.iter_var, var);
            }
        }

        let loop_cost = self.cost(&c.loop_cond);
        let step_cost = self.cost(&c.loop_step);
        self.pop_local(&c.iter_var);
        if let Some(value_var) = &c.iter_var2 {
            self.pop_local(value_var);
        }
        // The accumulator's type is what the step makes of it (a list of the mapped values).
        let step_ty = self.ty(&c.loop_step);
        if let Some(var) = self
            .locals
            .get_mut(&c.accu_var)
            .and_then(|stack| stack.last_mut())
            && !step_ty.is_dyn()
        {
            var.ty = step_ty.clone();
        }
        sum = sum.add(self.cost(&c.result));
        let result_ty = self.ty(&c.result);
        self.pop_local(&c.accu_var);

        let range_count = self.size_or_unknown(&c.iter_range);
        sum = sum.add(Estimate {
            min: range_count.min.saturating_mul(step_cost.add(loop_cost).min),
            max: range_count.max.saturating_mul(step_cost.add(loop_cost).max),
        });
        match &c.accu_init.expr {
            Expr::Literal(_) => {
                if let Some(size) = self.compute_size(&c.accu_init) {
                    self.sizes.insert(e.id, size);
                }
            }
            Expr::List(_) | Expr::Map(_) => {
                self.sizes.insert(e.id, range_count);
                if let Some(entry) = self.compute_entry_size(&c.loop_step) {
                    self.entry_sizes.insert(e.id, entry);
                }
            }
            _ => {}
        }
        (sum, result_ty)
    }

    pub(super) fn local_from(&mut self, e: &Expression) -> LocalVar<'d> {
        LocalVar {
            path: self.path(e),
            size: self.compute_size(e),
            entry: self.compute_entry_size(e),
            ty: self.ty(e),
        }
    }

    pub(super) fn size_or_unknown(&mut self, e: &Expression) -> Estimate {
        self.compute_size(e).unwrap_or(Estimate::UNKNOWN)
    }

    /// `computeSize`: recorded sizes, then literal sizes, then the schema's bound at the
    /// expression's path, then scalar types, then a local variable's size.
    pub(super) fn compute_size(&mut self, e: &Expression) -> Option<Estimate> {
        if let Some(size) = self.sizes.get(&e.id) {
            return Some(*size);
        }
        if let Some(size) = literal_size(e) {
            return Some(size);
        }
        if let Some(size) = self.path(e).and_then(|path| self.size_at(&path)) {
            self.sizes.insert(e.id, size);
            return Some(size);
        }
        if self.ty(e).is_scalar() {
            return Some(Estimate::fixed(1));
        }
        if let Expr::Ident(name) = &e.expr {
            return self.peek_local(name).and_then(|var| var.size);
        }
        None
    }

    pub(super) fn compute_entry_size(&self, e: &Expression) -> Option<EntrySize> {
        if let Some(entry) = self.entry_sizes.get(&e.id) {
            return Some(*entry);
        }
        if let Expr::Ident(name) = &e.expr {
            return self.peek_local(name).and_then(|var| var.entry);
        }
        None
    }

    /// The apiextensions size estimator: the declared bound of the node a path leads to. The
    /// path's first element (the variable) is skipped: every variable is taken as the root.
    pub(super) fn size_at(&mut self, path: &[String]) -> Option<Estimate> {
        if path.is_empty() {
            return None;
        }
        let mut current = self.root;
        for name in &path[1..] {
            current = match (name.as_str(), &current.kind) {
                ("@items" | "@values", DeclKind::List(item)) => item,
                ("@items" | "@values", DeclKind::Map(_, value)) => value,
                ("@keys", DeclKind::Map(key, _)) => key,
                (field, DeclKind::Object(fields)) => fields.get(field)?,
                _ => return None,
            };
        }
        if let Some(values) = self.actual {
            let largest = values
                .into_iter()
                .flatten()
                .map(|value| actual_size(self.root, value, &path[1..]))
                .max()
                .unwrap_or(0);
            return Some(Estimate {
                min: 0,
                max: largest,
            });
        }
        if current.unbounded {
            let shown =
                path[1..]
                    .iter()
                    .fold("self".to_string(), |shown, name| match name.as_str() {
                        "@items" | "@values" | "@keys" => format!("{shown}[*]"),
                        field => format!("{shown}.{field}"),
                    });
            self.unbounded_reads.insert(shown);
        }
        Some(Estimate {
            min: 0,
            max: u64::try_from(current.max_elements).unwrap_or(0),
        })
    }

    /// The Kubernetes library's size lookup: the computed size, else the schema's bound.
    pub(super) fn library_size(&mut self, operand: &Operand<'d, '_>) -> Estimate {
        operand
            .size
            .or_else(|| operand.path.as_deref().and_then(|path| self.size_at(path)))
            .unwrap_or(Estimate::UNKNOWN)
    }

    /// A string's traversal, as the library charges parsing and case changes.
    pub(super) fn traversal(&mut self, operand: &Operand<'d, '_>) -> Estimate {
        self.library_size(operand)
            .factor(STRING_TRAVERSAL_COST_FACTOR)
    }

    /// The size of a list's elements, for the library's list functions.
    pub(super) fn element_size(&mut self, list: &Operand<'d, '_>) -> Estimate {
        let path = list.path.as_ref().map(|path| {
            let mut path = path.clone();
            path.push("@items".to_string());
            path
        });
        path.as_deref()
            .and_then(|path| self.size_at(path))
            .unwrap_or(Estimate::UNKNOWN)
    }
}

/// String and byte comparisons and equality cost the shorter side's traversal.
pub(super) fn comparison_cost(left: Estimate, right: Estimate) -> Estimate {
    let smallest_max = left.max.min(right.max);
    Estimate {
        min: u64::from(smallest_max > 0),
        max: smallest_max,
    }
    .factor(STRING_TRAVERSAL_COST_FACTOR)
}

/// The size of `replace`'s result (the library's bounds for the longest and shortest result).
pub(super) fn replace_result_size(
    size: Estimate,
    to_replace: Estimate,
    replace_with: Estimate,
) -> Estimate {
    let mut count = Estimate::fixed(0);
    let mut retained = Estimate::fixed(0);
    if to_replace.min == 0 {
        count.max = size.max.saturating_add(1);
        retained.max = size.max;
    } else if replace_with.max <= to_replace.min {
        retained.max = size.max;
    } else {
        count.max = size.max.div_ceil(to_replace.min);
    }
    if to_replace.max == 0 {
        count.min = size.min.saturating_add(1);
        retained.min = size.min;
    } else if to_replace.max <= replace_with.min {
        retained.min = size.min;
    } else {
        count.min = size.min.div_ceil(to_replace.max);
    }
    count.multiply(replace_with).add(retained)
}

/// `cel.bind(v, init, result)`: an empty range, a constant false condition and its own
/// accumulator name.
pub(super) fn is_bind(c: &kube_cel::cel::common::ast::ComprehensionExpr) -> bool {
    matches!(&c.iter_range.expr, Expr::List(list) if list.elements.is_empty())
        && matches!(&c.loop_cond.expr, Expr::Literal(LiteralValue::Boolean(b)) if !**b)
        && c.accu_var != ACCUMULATOR
}

/// `computeExprSize`: the exact size of literals.
pub(super) fn literal_size(e: &Expression) -> Option<Estimate> {
    let size = match &e.expr {
        Expr::Literal(LiteralValue::String(value)) => value.inner().chars().count(),
        Expr::Literal(LiteralValue::Bytes(value)) => value.inner().len(),
        Expr::Literal(_) => 1,
        Expr::List(list) => list.elements.len(),
        Expr::Map(map) => map.entries.len(),
        _ => return None,
    };
    Some(Estimate::fixed(u64::try_from(size).unwrap_or(u64::MAX)))
}
