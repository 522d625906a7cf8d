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

use std::collections::{BTreeMap, HashMap};

use kube_cel::cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};
use kube_cel::cel::parser::Expression;
use serde_json::Value;

use super::Node;
use super::errors::FieldError;

/// `StaticEstimatedCostLimit`: the most one rule may cost, times its cardinality.
pub(crate) const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// `StaticEstimatedCRDCostLimit`: the most all rules of one CRD may cost together.
pub(crate) const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
/// `celconfig.MaxRequestSizeBytes`: the size bound of values the schema leaves unbounded.
const MAX_REQUEST_SIZE_BYTES: i64 = 3 * 1024 * 1024;
const MAX_DURATION_SIZE_JSON: i64 = 32;
const MAX_DATETIME_SIZE_JSON: i64 = 32;
const MIN_DURATION_SIZE_JSON: i64 = 3;
const JSON_DATE_SIZE: i64 = 12;
const MIN_DATETIME_SIZE_JSON: i64 = 21;
const MIN_STRING_SIZE: i64 = 2;
const MIN_BOOL_SIZE: i64 = 4;
const MIN_NUMBER_SIZE: i64 = 1;
/// cel-go's cost factors (`common/cost.go`).
const STRING_TRAVERSAL_COST_FACTOR: f64 = 0.1;
const REGEX_STRING_LENGTH_COST_FACTOR: f64 = 0.25;
const LIST_CREATE_BASE_COST: u64 = 10;
const MAP_CREATE_BASE_COST: u64 = 30;
const STRUCT_CREATE_BASE_COST: u64 = 40;
const SELECT_AND_IDENT_COST: u64 = 1;
const ACCUMULATOR: &str = "@result";

// === Estimates ===

/// A range of sizes or costs, as cel-go's `SizeEstimate` and `CostEstimate`; arithmetic
/// saturates at `u64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Estimate {
    pub(crate) min: u64,
    pub(crate) max: u64,
}

impl Estimate {
    const UNKNOWN: Estimate = Estimate {
        min: 0,
        max: u64::MAX,
    };

    const fn fixed(value: u64) -> Estimate {
        Estimate {
            min: value,
            max: value,
        }
    }

    fn add(self, other: Estimate) -> Estimate {
        Estimate {
            min: self.min.saturating_add(other.min),
            max: self.max.saturating_add(other.max),
        }
    }

    fn multiply(self, other: Estimate) -> Estimate {
        Estimate {
            min: self.min.saturating_mul(other.min),
            max: self.max.saturating_mul(other.max),
        }
    }

    fn factor(self, per_unit: f64) -> Estimate {
        Estimate {
            min: multiply_by_factor(self.min, per_unit),
            max: multiply_by_factor(self.max, per_unit),
        }
    }

    fn union(self, other: Estimate) -> Estimate {
        Estimate {
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }
}

/// `multiplyByCostFactor`: the product rounded up, saturating.
fn multiply_by_factor(value: u64, per_unit: f64) -> u64 {
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

// === Declared types (apiserver/pkg/cel/types.go) ===

/// The CEL declaration of a schema node: its kind, the most elements (characters, items or
/// properties) a value may have, and the fewest bytes it serializes to.
#[derive(Debug)]
pub(crate) struct Decl {
    kind: DeclKind,
    max_elements: i64,
    min_serialized_size: i64,
    /// A string, list or map whose bound is the request-size fallback: the schema declares no
    /// `maxLength`, `maxItems`, `maxProperties` or enum for it.
    unbounded: bool,
}

#[derive(Debug)]
enum DeclKind {
    Bool,
    Int,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    /// `x-kubernetes-int-or-string`.
    Dyn,
    List(Box<Decl>),
    Map(Box<Decl>, Box<Decl>),
    Object(BTreeMap<String, Decl>),
}

impl Decl {
    fn simple(kind: DeclKind, min_serialized_size: i64) -> Decl {
        Decl {
            kind,
            max_elements: 0,
            min_serialized_size,
            unbounded: false,
        }
    }

    /// `SchemaDeclType`: `None` where the schema is not exposed to rules.
    pub(crate) fn of(node: &Node, resource_root: bool) -> Option<Decl> {
        if node.int_or_string {
            let mut dyn_decl = Decl::simple(DeclKind::Dyn, 1);
            dyn_decl.max_elements = match node.max_length {
                Some(max_length) => max_length.max(0).saturating_mul(4),
                None => MAX_REQUEST_SIZE_BYTES - 2,
            };
            dyn_decl.unbounded = node.max_length.is_none();
            return Some(dyn_decl);
        }
        match node.type_name.as_deref()? {
            "array" => {
                let items = node.items.as_deref()?;
                let item = Decl::of(items, items.embedded_resource)?;
                let max_items = match node.max_items {
                    Some(max_items) => max_items.max(0),
                    None => (MAX_REQUEST_SIZE_BYTES - 2) / (item.min_serialized_size + 1),
                };
                Some(Decl {
                    kind: DeclKind::List(Box::new(item)),
                    max_elements: max_items,
                    min_serialized_size: 2,
                    unbounded: node.max_items.is_none(),
                })
            }
            "object" => {
                if let Some(values) = node.additional_properties.as_deref() {
                    let value = Decl::of(values, values.embedded_resource)?;
                    let max_properties = match node.max_properties {
                        Some(max_properties) => max_properties.max(0),
                        None => (MAX_REQUEST_SIZE_BYTES - 2) / (value.min_serialized_size + 6),
                    };
                    let key = Decl::simple(DeclKind::String, MIN_STRING_SIZE);
                    return Some(Decl {
                        kind: DeclKind::Map(Box::new(key), Box::new(value)),
                        max_elements: max_properties,
                        min_serialized_size: 2,
                        unbounded: node.max_properties.is_none(),
                    });
                }
                let mut fields = BTreeMap::new();
                let mut min_serialized_size = 2;
                for (name, property) in &node.properties {
                    let Some(field) = Decl::of(property, property.embedded_resource) else {
                        continue;
                    };
                    if node.required.contains(name) && property.default.is_none() {
                        min_serialized_size += i64::try_from(name.len()).unwrap_or(i64::MAX / 4)
                            + field.min_serialized_size
                            + 4;
                    }
                    if let Some(escaped) = escape(name) {
                        fields.insert(escaped, field);
                    }
                }
                if resource_root {
                    with_type_and_object_meta(&mut fields, node);
                }
                Some(Decl {
                    kind: DeclKind::Object(fields),
                    max_elements: 0,
                    min_serialized_size,
                    unbounded: false,
                })
            }
            "string" => Some(string_decl(node)),
            "boolean" => Some(Decl::simple(DeclKind::Bool, MIN_BOOL_SIZE)),
            "number" => Some(Decl::simple(DeclKind::Double, MIN_NUMBER_SIZE)),
            "integer" => Some(Decl::simple(DeclKind::Int, MIN_NUMBER_SIZE)),
            _ => None,
        }
    }
}

fn string_decl(node: &Node) -> Decl {
    let per_request = |node: &Node| match node.format.as_deref() {
        Some("duration") => MAX_DURATION_SIZE_JSON,
        Some("date") => JSON_DATE_SIZE,
        Some("date-time") => MAX_DATETIME_SIZE_JSON,
        _ => MAX_REQUEST_SIZE_BYTES - 2,
    };
    let (kind, min_size) = match node.format.as_deref() {
        Some("byte") => (DeclKind::Bytes, MIN_STRING_SIZE),
        Some("duration") => (DeclKind::Duration, MIN_DURATION_SIZE_JSON),
        Some("date") => (DeclKind::Timestamp, JSON_DATE_SIZE),
        Some("date-time") => (DeclKind::Timestamp, MIN_DATETIME_SIZE_JSON),
        _ => (DeclKind::String, MIN_STRING_SIZE),
    };
    let max_elements = match kind {
        DeclKind::Bytes => node
            .max_length
            .map_or_else(|| per_request(node), |max_length| max_length.max(0)),
        DeclKind::Duration | DeclKind::Timestamp => per_request(node),
        _ => match (node.max_length, &node.enum_values) {
            (Some(max_length), _) => max_length.max(0).saturating_mul(4),
            (None, Some(values)) if !values.is_empty() => values
                .iter()
                .filter_map(Value::as_str)
                .map(|value| i64::try_from(value.len()).unwrap_or(i64::MAX))
                .max()
                .unwrap_or(0),
            (None, _) => per_request(node),
        },
    };
    let unbounded = matches!(kind, DeclKind::String | DeclKind::Bytes)
        && node.max_length.is_none()
        && node.enum_values.as_ref().is_none_or(Vec::is_empty);
    Decl {
        kind,
        max_elements,
        min_serialized_size: min_size,
        unbounded,
    }
}

/// `WithTypeAndObjectMeta`: at a resource's root, rules always see `apiVersion`, `kind` and
/// `metadata.name`/`generateName` (unbounded strings), whatever the schema declares there.
fn with_type_and_object_meta(fields: &mut BTreeMap<String, Decl>, node: &Node) {
    let is_string =
        |node: Option<&Node>| node.and_then(|n| n.type_name.as_deref()) == Some("string");
    let metadata = node.properties.get("metadata");
    let complete = is_string(node.properties.get("kind"))
        && is_string(node.properties.get("apiVersion"))
        && metadata.and_then(|m| m.type_name.as_deref()) == Some("object")
        && is_string(metadata.and_then(|m| m.properties.get("name")))
        && is_string(metadata.and_then(|m| m.properties.get("generateName")));
    if complete {
        return;
    }
    // Unbounded for the estimate, but not the schema's to bound: the apiserver validates them.
    let unbounded_string = || Decl {
        kind: DeclKind::String,
        max_elements: MAX_REQUEST_SIZE_BYTES - 2,
        min_serialized_size: MIN_STRING_SIZE,
        unbounded: false,
    };
    fields.insert("kind".to_string(), unbounded_string());
    fields.insert("apiVersion".to_string(), unbounded_string());
    let meta: BTreeMap<String, Decl> = [
        ("name".to_string(), unbounded_string()),
        ("generateName".to_string(), unbounded_string()),
    ]
    .into_iter()
    .collect();
    fields.insert(
        "metadata".to_string(),
        Decl {
            kind: DeclKind::Object(meta),
            max_elements: 0,
            min_serialized_size: 2,
            unbounded: false,
        },
    );
}

/// CEL's reserved words, which a property name is escaped from (`__name__`).
const RESERVED: [&str; 26] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
    "int",
    "uint",
    "double",
    "string",
    "bool",
];

/// `cel.Escape`: the name a property has in rules, or `None` when it cannot be named.
fn escape(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.contains("__")
    {
        return Some(name.to_string());
    }
    let mut escaped = String::new();
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            escaped.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => escaped.push_str("__dot__"),
            '-' => escaped.push_str("__dash__"),
            '/' => escaped.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => escaped.push(c),
            _ => return None,
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(escaped)
}

// === Types the estimate depends on ===

#[derive(Debug, Clone)]
enum Ty<'d> {
    Dyn,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Duration,
    Timestamp,
    Type,
    List(Box<Ty<'d>>),
    Map(Box<Ty<'d>>, Box<Ty<'d>>),
    Object(&'d BTreeMap<String, Decl>),
    Optional(Box<Ty<'d>>),
    /// A Kubernetes library value (quantity, IP, CIDR, URL, semver).
    Opaque,
}

impl<'d> Ty<'d> {
    fn of(decl: &'d Decl) -> Ty<'d> {
        match &decl.kind {
            DeclKind::Bool => Ty::Bool,
            DeclKind::Int => Ty::Int,
            DeclKind::Double => Ty::Double,
            DeclKind::String => Ty::String,
            DeclKind::Bytes => Ty::Bytes,
            DeclKind::Duration => Ty::Duration,
            DeclKind::Timestamp => Ty::Timestamp,
            DeclKind::Dyn => Ty::Dyn,
            DeclKind::List(item) => Ty::List(Box::new(Ty::of(item))),
            DeclKind::Map(key, value) => Ty::Map(Box::new(Ty::of(key)), Box::new(Ty::of(value))),
            DeclKind::Object(fields) => Ty::Object(fields),
        }
    }

    fn is_dyn(&self) -> bool {
        matches!(self, Ty::Dyn)
    }

    /// `isScalar`: a value of constant size.
    fn is_scalar(&self) -> bool {
        match self {
            Ty::Bool | Ty::Double | Ty::Duration | Ty::Int | Ty::Timestamp | Ty::Uint => true,
            Ty::Optional(inner) => inner.is_scalar(),
            _ => false,
        }
    }

    /// Map, struct or type parameter: a field selection on it costs one.
    fn selection_costs(&self) -> bool {
        matches!(self, Ty::Map(..) | Ty::Object(_))
    }

    fn element(&self) -> Ty<'d> {
        match self {
            Ty::List(item) => (**item).clone(),
            Ty::Map(key, _) => (**key).clone(),
            _ => Ty::Dyn,
        }
    }
}

// === The coster (cel-go checker/cost.go) ===

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    List,
    Map,
}

#[derive(Debug, Clone, Copy)]
struct EntrySize {
    container: Container,
    key: Estimate,
    value: Estimate,
}

fn union_entries(a: Option<EntrySize>, b: Option<EntrySize>) -> Option<EntrySize> {
    let (a, b) = (a?, b?);
    Some(EntrySize {
        container: a.container,
        key: a.key.union(b.key),
        value: a.value.union(b.value),
    })
}

struct LocalVar<'d> {
    path: Option<Vec<String>>,
    size: Option<Estimate>,
    entry: Option<EntrySize>,
    ty: Ty<'d>,
}

/// An argument or target as a function's estimate sees it (cel-go's `AstNode`).
struct Operand<'d, 'e> {
    expr: &'e Expression,
    path: Option<Vec<String>>,
    ty: Ty<'d>,
    size: Option<Estimate>,
}

struct CallEstimate {
    cost: Estimate,
    result_size: Option<Estimate>,
}

struct Coster<'d> {
    root: &'d Decl,
    /// At evaluation: the values of `self` and `oldSelf`, whose actual sizes replace the
    /// declared bounds.
    actual: Option<[Option<&'d Value>; 2]>,
    root_ty: Ty<'d>,
    optional_old_self: bool,
    paths: HashMap<u64, Vec<String>>,
    sizes: HashMap<u64, Estimate>,
    entry_sizes: HashMap<u64, EntrySize>,
    types: HashMap<u64, Ty<'d>>,
    locals: HashMap<String, Vec<LocalVar<'d>>>,
    /// The paths of unbounded strings, lists and maps whose size the estimate looked up.
    unbounded_reads: std::collections::BTreeSet<String>,
}

/// The estimated cost (its maximum) of one rule or message expression evaluated at a node
/// declared as `root`.
pub(crate) fn estimate(expression: &Expression, root: &Decl, optional_old_self: bool) -> u64 {
    coster(expression, root, optional_old_self).0
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
    let mut coster = Coster {
        root,
        actual: Some([Some(self_value), old_value]),
        root_ty: Ty::of(root),
        optional_old_self,
        paths: HashMap::new(),
        sizes: HashMap::new(),
        entry_sizes: HashMap::new(),
        types: HashMap::new(),
        locals: HashMap::new(),
        unbounded_reads: std::collections::BTreeSet::new(),
    };
    coster.cost(expression).max
}

/// The estimate and the unbounded values it read (`self.from`, `self.labels[*]`).
fn coster(
    expression: &Expression,
    root: &Decl,
    optional_old_self: bool,
) -> (u64, std::collections::BTreeSet<String>) {
    let mut coster = Coster {
        root,
        actual: None,
        root_ty: Ty::of(root),
        optional_old_self,
        paths: HashMap::new(),
        sizes: HashMap::new(),
        entry_sizes: HashMap::new(),
        types: HashMap::new(),
        locals: HashMap::new(),
        unbounded_reads: std::collections::BTreeSet::new(),
    };
    let cost = coster.cost(expression).max;
    (cost, coster.unbounded_reads)
}

impl<'d> Coster<'d> {
    fn ty(&self, e: &Expression) -> Ty<'d> {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Dyn)
    }

    fn cost(&mut self, e: &Expression) -> Estimate {
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

    fn peek_local(&self, name: &str) -> Option<&LocalVar<'d>> {
        self.locals.get(name).and_then(|stack| stack.last())
    }

    fn push_local(&mut self, name: &str, var: LocalVar<'d>) {
        self.locals.entry(name.to_string()).or_default().push(var);
    }

    fn pop_local(&mut self, name: &str) {
        if let Some(stack) = self.locals.get_mut(name) {
            stack.pop();
        }
    }

    fn path(&self, e: &Expression) -> Option<Vec<String>> {
        if let Expr::Ident(name) = &e.expr
            && let Some(var) = self.peek_local(name)
        {
            return var.path.clone();
        }
        self.paths.get(&e.id).cloned()
    }

    fn cost_ident(&mut self, e: &Expression, name: &str) -> (Estimate, Ty<'d>) {
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

    fn cost_select(
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

    fn operand<'e>(&mut self, e: &'e Expression) -> Operand<'d, 'e> {
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

    fn cost_call(
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
        let ty = result_type(function, target_operand.as_ref(), &operands);
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

    fn cost_list(&mut self, e: &Expression, elements: &[Expression]) -> (Estimate, Ty<'d>) {
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

    fn cost_map(
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

    fn cost_comprehension(
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

    fn local_from(&mut self, e: &Expression) -> LocalVar<'d> {
        LocalVar {
            path: self.path(e),
            size: self.compute_size(e),
            entry: self.compute_entry_size(e),
            ty: self.ty(e),
        }
    }

    fn size_or_unknown(&mut self, e: &Expression) -> Estimate {
        self.compute_size(e).unwrap_or(Estimate::UNKNOWN)
    }

    /// `computeSize`: recorded sizes, then literal sizes, then the schema's bound at the
    /// expression's path, then scalar types, then a local variable's size.
    fn compute_size(&mut self, e: &Expression) -> Option<Estimate> {
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

    fn compute_entry_size(&self, e: &Expression) -> Option<EntrySize> {
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
    fn size_at(&mut self, path: &[String]) -> Option<Estimate> {
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
    fn library_size(&mut self, operand: &Operand<'d, '_>) -> Estimate {
        operand
            .size
            .or_else(|| operand.path.as_deref().and_then(|path| self.size_at(path)))
            .unwrap_or(Estimate::UNKNOWN)
    }

    /// A string's traversal, as the library charges parsing and case changes.
    fn traversal(&mut self, operand: &Operand<'d, '_>) -> Estimate {
        self.library_size(operand)
            .factor(STRING_TRAVERSAL_COST_FACTOR)
    }

    /// The size of a list's elements, for the library's list functions.
    fn element_size(&mut self, list: &Operand<'d, '_>) -> Estimate {
        let path = list.path.as_ref().map(|path| {
            let mut path = path.clone();
            path.push("@items".to_string());
            path
        });
        path.as_deref()
            .and_then(|path| self.size_at(path))
            .unwrap_or(Estimate::UNKNOWN)
    }

    fn function_cost(
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

    fn add_cost(
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
    fn library_cost(
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

/// The size a value has where `path` leads (`@items`/`@values`/`@keys`: the largest over the
/// elements), as the estimate counts it: characters of a string, items of a list, entries of a
/// map; objects and scalars count 0, as their declared bound does.
fn actual_size(decl: &Decl, value: &Value, path: &[String]) -> u64 {
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let Some((first, rest)) = path.split_first() else {
        return match (&decl.kind, value) {
            (DeclKind::String | DeclKind::Bytes | DeclKind::Dyn, Value::String(text)) => {
                count(text.chars().count())
            }
            (DeclKind::List(_), Value::Array(items)) => count(items.len()),
            (DeclKind::Map(..), Value::Object(entries)) => count(entries.len()),
            _ => 0,
        };
    };
    match (first.as_str(), &decl.kind, value) {
        ("@items" | "@values", DeclKind::List(item), Value::Array(items)) => items
            .iter()
            .map(|element| actual_size(item, element, rest))
            .max()
            .unwrap_or(0),
        ("@items" | "@values", DeclKind::Map(_, entry), Value::Object(entries)) => entries
            .values()
            .map(|element| actual_size(entry, element, rest))
            .max()
            .unwrap_or(0),
        ("@keys", DeclKind::Map(..), Value::Object(entries)) if rest.is_empty() => entries
            .keys()
            .map(|key| count(key.chars().count()))
            .max()
            .unwrap_or(0),
        (field, DeclKind::Object(fields), Value::Object(entries)) => {
            match (fields.get(field), entries.get(field)) {
                (Some(field_decl), Some(field_value)) => actual_size(field_decl, field_value, rest),
                _ => 0,
            }
        }
        _ => 0,
    }
}

/// String and byte comparisons and equality cost the shorter side's traversal.
fn comparison_cost(left: Estimate, right: Estimate) -> Estimate {
    let smallest_max = left.max.min(right.max);
    Estimate {
        min: u64::from(smallest_max > 0),
        max: smallest_max,
    }
    .factor(STRING_TRAVERSAL_COST_FACTOR)
}

/// The size of `replace`'s result (the library's bounds for the longest and shortest result).
fn replace_result_size(size: Estimate, to_replace: Estimate, replace_with: Estimate) -> Estimate {
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
fn is_bind(c: &kube_cel::cel::common::ast::ComprehensionExpr) -> bool {
    matches!(&c.iter_range.expr, Expr::List(list) if list.elements.is_empty())
        && matches!(&c.loop_cond.expr, Expr::Literal(LiteralValue::Boolean(b)) if !**b)
        && c.accu_var != ACCUMULATOR
}

fn literal_type<'d>(literal: &LiteralValue) -> Ty<'d> {
    match literal {
        LiteralValue::Boolean(_) => Ty::Bool,
        LiteralValue::Bytes(_) => Ty::Bytes,
        LiteralValue::Double(_) => Ty::Double,
        LiteralValue::Int(_) => Ty::Int,
        LiteralValue::Null => Ty::Null,
        LiteralValue::String(_) => Ty::String,
        LiteralValue::UInt(_) => Ty::Uint,
    }
}

/// `computeExprSize`: the exact size of literals.
fn literal_size(e: &Expression) -> Option<Estimate> {
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

/// The result type of a call, as far as the estimate needs it.
fn result_type<'d>(
    function: &str,
    target: Option<&Operand<'d, '_>>,
    args: &[Operand<'d, '_>],
) -> Ty<'d> {
    let first = || args.first().map_or(Ty::Dyn, |arg| arg.ty.clone());
    let target_ty = || target.map_or(Ty::Dyn, |t| t.ty.clone());
    match function {
        operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::LOGICAL_NOT
        | operators::NOT_STRICTLY_FALSE
        | operators::EQUALS
        | operators::NOT_EQUALS
        | operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS
        | operators::IN
        | "matches"
        | "startsWith"
        | "endsWith"
        | "contains"
        | "isSorted"
        | "isIP"
        | "isCIDR"
        | "isURL"
        | "isQuantity"
        | "isSemver"
        | "hasValue"
        | "containsIP"
        | "containsCIDR"
        | "isCanonical"
        | "isUnspecified"
        | "isLoopback"
        | "isLinkLocalMulticast"
        | "isLinkLocalUnicast"
        | "isGreaterThan"
        | "isLessThan"
        | "isInteger"
        | "sets.contains"
        | "sets.equivalent"
        | "sets.intersects" => Ty::Bool,
        "size" | "indexOf" | "lastIndexOf" | "int" | "sign" | "compareTo" | "asInteger"
        | "prefixLength" | "family" | "getMilliseconds" | "getSeconds" | "getMinutes"
        | "getHours" | "getDayOfWeek" | "getDayOfMonth" | "getDayOfYear" | "getMonth"
        | "getFullYear" | "major" | "minor" | "patch" => Ty::Int,
        "uint" => Ty::Uint,
        "double" | "asApproximateFloat" => Ty::Double,
        "string" | "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring" | "charAt"
        | "format" | "join" | "find" | "reverse" | "strings.quote" | "getScheme" | "getHost"
        | "getHostname" | "getPort" | "getEscapedPath" | "getQuery" => Ty::String,
        "split" | "findAll" => Ty::List(Box::new(Ty::String)),
        "bytes" => Ty::Bytes,
        "duration" => Ty::Duration,
        "timestamp" => Ty::Timestamp,
        "type" => Ty::Type,
        "url" | "ip" | "cidr" | "quantity" | "semver" | "masked" | "add" | "sub" => Ty::Opaque,
        "sum" | "min" | "max" => target_ty().element(),
        "slice" | "sort" | "distinct" => target_ty(),
        "value" | "orValue" => match target_ty() {
            Ty::Optional(inner) => *inner,
            _ => Ty::Dyn,
        },
        "optional.of" | "optional.ofNonZeroValue" => Ty::Optional(Box::new(first())),
        operators::OPT_INDEX => match first() {
            Ty::List(item) => Ty::Optional(item),
            Ty::Map(_, value) => Ty::Optional(value),
            _ => Ty::Optional(Box::new(Ty::Dyn)),
        },
        operators::INDEX => match first() {
            Ty::List(item) => *item,
            Ty::Map(_, value) => *value,
            _ => Ty::Dyn,
        },
        operators::CONDITIONAL => match args.get(1).map(|arg| &arg.ty) {
            Some(ty) if !ty.is_dyn() => ty.clone(),
            _ => args.get(2).map_or(Ty::Dyn, |arg| arg.ty.clone()),
        },
        operators::ADD
        | operators::SUBSTRACT
        | operators::MULTIPLY
        | operators::DIVIDE
        | operators::MODULO => arithmetic_type(function, args),
        operators::NEGATE => first(),
        _ => Ty::Dyn,
    }
}

fn arithmetic_type<'d>(function: &str, args: &[Operand<'d, '_>]) -> Ty<'d> {
    let (Some(left), Some(right)) = (args.first(), args.get(1)) else {
        return Ty::Dyn;
    };
    match (&left.ty, &right.ty, function) {
        (Ty::Timestamp, Ty::Timestamp, operators::SUBSTRACT) => Ty::Duration,
        (Ty::Timestamp, _, _) | (_, Ty::Timestamp, _) => Ty::Timestamp,
        (Ty::List(a), Ty::List(b), _) => {
            if a.is_dyn() {
                Ty::List(b.clone())
            } else {
                Ty::List(a.clone())
            }
        }
        (Ty::Dyn, other, _) => other.clone(),
        (other, _, _) => other.clone(),
    }
}

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
                let (rule_cost, reads) = coster(rule.expression(), &decl, rule.optional_old_self());
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
        self.most_expensive.sort_by_key(|rule| std::cmp::Reverse(rule.cost));
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
