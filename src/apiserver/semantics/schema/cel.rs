//! `x-kubernetes-validations`: CEL rules compiled with the schema and evaluated at the node that
//! declares them, after apiextensions `pkg/apiserver/schema/cel`.
//!
//! The Kubernetes CEL libraries (strings, lists, regex, url, ip/cidr, quantity, sets, math,
//! format) come from `kube-cel` on top of the `cel` interpreter.
//!
//! Cost: the interpreter has no cost accounting, so each evaluation is charged an estimate made
//! before it runs: the static estimate of `cost.rs` with the actual sizes of the strings, lists
//! and maps the rule reads. A rule whose estimate exceeds the apiserver's per-call limit
//! (1,000,000) is not run and reported; once the estimates of one object's rules pass the
//! apiserver's per-object budget (10,000,000) the remaining rules are not run, with the
//! apiserver's message.

use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::KubeCelExt;
use kube_cel::cel;
use serde_json::Value;

use super::Node;
use super::errors::{FieldError, FieldErrorKind};

/// `celconfig.PerCallLimit`.
pub(crate) const PER_CALL_LIMIT: u64 = 1_000_000;
/// `celconfig.RuntimeCELCostBudget`.
const RUNTIME_COST_BUDGET: u64 = 10_000_000;
/// Rules longer than this are rejected at compile time, bounding parse work.
const MAX_RULE_LENGTH: usize = 16 * 1024;
/// Deepest nesting a rule may have, both in the parser's rules (parentheses, literals, calls)
/// and in the expression tree (including chains such as `a + b + c`). The parser, the checks
/// here and the interpreter all recurse once per level, so this bounds the stack a rule needs;
/// the CEL specification asks for at least 12.
pub(crate) const MAX_NESTING: u16 = 32;

const REASONS: [&str; 4] = [
    "FieldValueInvalid",
    "FieldValueForbidden",
    "FieldValueRequired",
    "FieldValueDuplicate",
];

/// A compiled rule.
pub(crate) struct CompiledRule {
    rule: String,
    expression: cel::parser::Expression,
    message: Option<String>,
    message_expression: Option<cel::parser::Expression>,
    reason: FieldErrorKind,
    field_path: Option<String>,
    is_transition: bool,
    /// `optionalOldSelf: true`: the transition rule also runs on create, with `oldSelf` an
    /// optional (`optional.none()` when there is no old value).
    optional_old_self: bool,
}

impl CompiledRule {
    /// The parsed rule.
    pub(crate) fn expression(&self) -> &cel::parser::Expression {
        &self.expression
    }

    /// The parsed `messageExpression`, if the rule has one.
    pub(crate) fn message_expression(&self) -> Option<&cel::parser::Expression> {
        self.message_expression.as_ref()
    }

    /// `optionalOldSelf: true`.
    pub(crate) fn optional_old_self(&self) -> bool {
        self.optional_old_self
    }
}

impl std::fmt::Debug for CompiledRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledRule")
            .field("rule", &self.rule)
            .field("message", &self.message)
            .field("reason", &self.reason)
            .field("field_path", &self.field_path)
            .field("is_transition", &self.is_transition)
            .finish_non_exhaustive()
    }
}

pub(crate) fn parse(source: &str) -> Result<cel::parser::Expression, String> {
    if source.len() > MAX_RULE_LENGTH {
        return Err(format!("rule is longer than {MAX_RULE_LENGTH} characters"));
    }
    let mut expression = cel::parser::Parser::new()
        .enable_optional_syntax(true)
        .max_recursion_depth(MAX_NESTING)
        .parse(source)
        .map_err(|error| format!("ERROR: <input>: {error}"))?;
    if nesting(&expression) > u32::from(MAX_NESTING) {
        return Err(format!(
            "ERROR: <input>: expression nesting exceeds the limit of {MAX_NESTING}"
        ));
    }
    optional_select_as_index(&mut expression);
    let references = expression.references();
    let mut unknown: Vec<&str> = references
        .functions()
        .into_iter()
        .filter(|name| is_plain_name(name) && !known_function(name))
        .collect();
    unknown.sort_unstable();
    if let Some(name) = unknown.first() {
        return Err(format!(
            "ERROR: <input>: undeclared reference to '{name}' (in container '')"
        ));
    }
    Ok(expression)
}

/// Rewrites `x.?f` to the equivalent `x[?'f']`: the interpreter's optional select fails on a
/// missing field instead of yielding `optional.none()`, while its optional index does not.
fn optional_select_as_index(expression: &mut cel::parser::Expression) {
    use cel::common::ast::{EntryExpr, Expr, operators};
    match &mut expression.expr {
        Expr::Call(call) => {
            if call.func_name == operators::OPT_SELECT {
                call.func_name = operators::OPT_INDEX.to_string();
            }
            if let Some(target) = call.target.as_deref_mut() {
                optional_select_as_index(target);
            }
            call.args.iter_mut().for_each(optional_select_as_index);
        }
        Expr::Comprehension(comprehension) => {
            optional_select_as_index(&mut comprehension.iter_range);
            optional_select_as_index(&mut comprehension.accu_init);
            optional_select_as_index(&mut comprehension.loop_cond);
            optional_select_as_index(&mut comprehension.loop_step);
            optional_select_as_index(&mut comprehension.result);
        }
        Expr::List(list) => list.elements.iter_mut().for_each(optional_select_as_index),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(entry) = &mut entry.expr {
                    optional_select_as_index(&mut entry.key);
                    optional_select_as_index(&mut entry.value);
                }
            }
        }
        Expr::Struct(structure) => {
            for entry in &mut structure.entries {
                match &mut entry.expr {
                    EntryExpr::StructField(field) => optional_select_as_index(&mut field.value),
                    EntryExpr::MapEntry(entry) => {
                        optional_select_as_index(&mut entry.key);
                        optional_select_as_index(&mut entry.value);
                    }
                }
            }
        }
        Expr::Select(select) => optional_select_as_index(&mut select.operand),
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
    }
}

/// The metadata rules see at the root: only `name` and `generateName`.
static ROOT_METADATA: std::sync::LazyLock<Node> = std::sync::LazyLock::new(|| {
    let string = || Node {
        type_name: Some("string".to_string()),
        ..Node::default()
    };
    Node {
        type_name: Some("object".to_string()),
        properties: [
            ("name".to_string(), string()),
            ("generateName".to_string(), string()),
        ]
        .into_iter()
        .collect(),
        ..Node::default()
    }
});

/// Rejects selections of fields the schema does not declare (`self.sise`), as the apiserver's
/// type-checked compilation does, where the schema declares a fixed set of properties.
fn check_fields(
    expression: cel::parser::Expression,
    node: &Node,
    is_root: bool,
) -> Result<cel::parser::Expression, String> {
    let mut undefined = None;
    let root = is_root.then_some(node);
    find_undefined_field(&expression, node, root, &mut undefined);
    match undefined {
        Some(field) => Err(format!("ERROR: <input>: undefined field '{field}'")),
        None => Ok(expression),
    }
}

/// The schema node an expression denotes when it is `self`/`oldSelf` or a chain of field
/// selections on them; records the first undefined field on the way.
///
/// At the root, `apiVersion` and `kind` are always declared and `metadata` offers only `name`
/// and `generateName`, as the apiserver exposes them to rules.
fn find_undefined_field<'a>(
    expression: &cel::parser::Expression,
    node: &'a Node,
    root: Option<&'a Node>,
    undefined: &mut Option<String>,
) -> Option<&'a Node> {
    use cel::common::ast::{EntryExpr, Expr};
    match &expression.expr {
        Expr::Ident(name) if name == "self" || name == "oldSelf" => Some(node),
        Expr::Select(select) => {
            let parent = find_undefined_field(&select.operand, node, root, undefined)?;
            if root.is_some_and(|root| std::ptr::eq(root, parent)) {
                match select.field.as_str() {
                    "apiVersion" | "kind" => return None,
                    "metadata" => return Some(&ROOT_METADATA),
                    _ => {}
                }
            }
            let closed = parent.type_name.as_deref() == Some("object")
                && !parent.properties.is_empty()
                && parent.additional_properties.is_none()
                && !parent.preserve_unknown_fields;
            match parent.properties.get(&select.field) {
                Some(property) => Some(property),
                None => {
                    if closed && undefined.is_none() {
                        *undefined = Some(select.field.clone());
                    }
                    None
                }
            }
        }
        Expr::Call(call) => {
            if let Some(target) = call.target.as_deref() {
                find_undefined_field(target, node, root, undefined);
            }
            for argument in &call.args {
                find_undefined_field(argument, node, root, undefined);
            }
            None
        }
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                find_undefined_field(part, node, root, undefined);
            }
            None
        }
        Expr::List(list) => {
            for element in &list.elements {
                find_undefined_field(element, node, root, undefined);
            }
            None
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(entry) = &entry.expr {
                    find_undefined_field(&entry.key, node, root, undefined);
                    find_undefined_field(&entry.value, node, root, undefined);
                }
            }
            None
        }
        _ => None,
    }
}

/// The deepest nesting of comprehensions (macros such as `all`, `map`, `filter`) in a rule.
pub(crate) fn comprehension_depth(expression: &cel::parser::Expression) -> u32 {
    use cel::common::ast::Expr;
    match &expression.expr {
        Expr::Comprehension(c) => {
            let range = comprehension_depth(&c.iter_range);
            let body = [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .map(comprehension_depth)
                .max()
                .unwrap_or(0);
            range.max(body + 1)
        }
        _ => children(expression)
            .into_iter()
            .map(comprehension_depth)
            .max()
            .unwrap_or(0),
    }
}

/// Depth of the expression tree (a literal or identifier is 1).
fn nesting(expression: &cel::parser::Expression) -> u32 {
    1 + children(expression)
        .into_iter()
        .map(nesting)
        .max()
        .unwrap_or(0)
}

/// The direct subexpressions of an expression.
pub(crate) fn children(expression: &cel::parser::Expression) -> Vec<&cel::parser::Expression> {
    use cel::common::ast::{EntryExpr, Expr, IdedEntryExpr};
    fn entries(entries: &[IdedEntryExpr]) -> Vec<&cel::parser::Expression> {
        entries
            .iter()
            .flat_map(|entry| match &entry.expr {
                EntryExpr::MapEntry(e) => vec![&e.key, &e.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect()
    }
    match &expression.expr {
        Expr::Call(call) => call
            .target
            .as_deref()
            .into_iter()
            .chain(&call.args)
            .collect(),
        Expr::Comprehension(c) => {
            vec![
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ]
        }
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => entries(&map.entries),
        Expr::Struct(structure) => entries(&structure.entries),
        Expr::Select(select) => vec![&select.operand],
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => Vec::new(),
    }
}

fn is_plain_name(name: &str) -> bool {
    name.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        && !name.starts_with('_')
}

/// Functions and macros available to rules: standard CEL plus the Kubernetes libraries
/// (`lists.range` is left out: it is not a Kubernetes function and allocates unboundedly).
fn known_function(name: &str) -> bool {
    const STANDARD: [&str; 31] = [
        "has",
        "size",
        "matches",
        "all",
        "exists",
        "exists_one",
        "map",
        "filter",
        "contains",
        "startsWith",
        "endsWith",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "bool",
        "dyn",
        "type",
        "duration",
        "timestamp",
        "max",
        "min",
        "getFullYear",
        "getMonth",
        "getDayOfMonth",
        "getHours",
        "getMinutes",
        "getSeconds",
        "optional.of",
        "optional.none",
    ];
    const OPTIONAL: [&str; 5] = [
        "hasValue",
        "value",
        "or",
        "orValue",
        "optional.ofNonZeroValue",
    ];
    const KUBERNETES: [&str; 93] = [
        "add",
        "asApproximateFloat",
        "asInteger",
        "base64.decode",
        "base64.encode",
        "charAt",
        "cidr",
        "compareTo",
        "containsCIDR",
        "containsIP",
        "distinct",
        "family",
        "find",
        "findAll",
        "first",
        "flatten",
        "format",
        "format.byte",
        "format.date",
        "format.datetime",
        "format.dns1035Label",
        "format.dns1035LabelPrefix",
        "format.dns1123Label",
        "format.dns1123LabelPrefix",
        "format.dns1123Subdomain",
        "format.dns1123SubdomainPrefix",
        "format.labelValue",
        "format.named",
        "format.qualifiedName",
        "format.uri",
        "format.uuid",
        "getEscapedPath",
        "getHost",
        "getHostname",
        "getPort",
        "getQuery",
        "getScheme",
        "indexOf",
        "ip",
        "ip.isCanonical",
        "isCIDR",
        "isCIDRv4",
        "isCIDRv6",
        "isGlobalUnicast",
        "isGreaterThan",
        "isIP",
        "isIPv4",
        "isIPv6",
        "isInteger",
        "isLessThan",
        "isLinkLocalMulticast",
        "isLinkLocalUnicast",
        "isLoopback",
        "isQuantity",
        "isSorted",
        "isURL",
        "isUnspecified",
        "join",
        "last",
        "lastIndexOf",
        "lowerAscii",
        "masked",
        "math.abs",
        "math.bitAnd",
        "math.bitNot",
        "math.bitOr",
        "math.bitShiftLeft",
        "math.bitShiftRight",
        "math.bitXor",
        "math.ceil",
        "math.floor",
        "math.greatest",
        "math.isFinite",
        "math.isInf",
        "math.isNaN",
        "math.least",
        "math.round",
        "math.sign",
        "math.sqrt",
        "math.trunc",
        "prefixLength",
        "quantity",
        "replace",
        "reverse",
        "sets.contains",
        "sets.equivalent",
        "sets.intersects",
        "sign",
        "slice",
        "sort",
        "split",
        "strings.quote",
        "sub",
    ];
    const MORE_KUBERNETES: [&str; 6] =
        ["substring", "sum", "trim", "upperAscii", "url", "validate"];
    // `sets.contains(..)` parses as a member call named `contains` on `sets`, so a bare name
    // is also known when it is the last part of a namespaced function.
    let qualified_suffix = format!(".{name}");
    [
        STANDARD.as_slice(),
        OPTIONAL.as_slice(),
        KUBERNETES.as_slice(),
        MORE_KUBERNETES.as_slice(),
    ]
    .into_iter()
    .flatten()
    .any(|known| *known == name || known.ends_with(&qualified_suffix))
}

/// Compiles the rules of one node; errors name `x-kubernetes-validations[i].<field>`.
pub(crate) fn compile_rules(
    raw: &Value,
    node: &Node,
    is_root: bool,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> Vec<CompiledRule> {
    let Some(rules) = raw.as_array() else {
        errors.push(FieldError::invalid(path, raw.clone(), "must be an array"));
        return Vec::new();
    };
    let mut compiled = Vec::new();
    for (index, rule) in rules.iter().enumerate() {
        let rule_path = format!("{path}[{index}]");
        let Some(source) = rule.get("rule").and_then(Value::as_str) else {
            errors.push(FieldError::required(format!("{rule_path}.rule"), ""));
            continue;
        };
        let message = rule
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(message) = &message {
            if message.trim().is_empty() {
                errors.push(FieldError::required(
                    format!("{rule_path}.message"),
                    "message must be non-empty if specified",
                ));
            } else if message.contains('\n') {
                errors.push(FieldError::invalid(
                    format!("{rule_path}.message"),
                    Value::String(message.clone()),
                    "message must not contain line breaks",
                ));
            }
        }
        let reason = match rule.get("reason") {
            None => FieldErrorKind::Invalid,
            Some(Value::String(reason)) if REASONS.contains(&reason.as_str()) => {
                match reason.as_str() {
                    "FieldValueForbidden" => FieldErrorKind::Forbidden,
                    "FieldValueRequired" => FieldErrorKind::Required,
                    "FieldValueDuplicate" => FieldErrorKind::Duplicate,
                    _ => FieldErrorKind::Invalid,
                }
            }
            Some(other) => {
                let valid: Vec<String> = REASONS.iter().map(|r| r.to_string()).collect();
                errors.push(FieldError::not_supported(
                    format!("{rule_path}.reason"),
                    other.clone(),
                    &valid,
                ));
                continue;
            }
        };
        let field_path = match rule.get("fieldPath").and_then(Value::as_str) {
            Some(raw_path) => match normalize_field_path(raw_path, node) {
                Ok(normalized) => Some(normalized),
                Err(error) => {
                    errors.push(FieldError::invalid(
                        format!("{rule_path}.fieldPath"),
                        Value::String(raw_path.to_string()),
                        format!("fieldPath must be a valid path: {error}"),
                    ));
                    continue;
                }
            },
            None => None,
        };
        let message_expression = match rule.get("messageExpression").and_then(Value::as_str) {
            Some(source) => match parse(source).and_then(|e| check_fields(e, node, is_root)) {
                Ok(expression) => Some(expression),
                Err(error) => {
                    errors.push(FieldError::invalid(
                        format!("{rule_path}.messageExpression"),
                        Value::String(source.to_string()),
                        format!("messageExpression compilation failed: {error}"),
                    ));
                    None
                }
            },
            None => None,
        };
        match parse(source).and_then(|e| check_fields(e, node, is_root)) {
            Ok(expression) => {
                let is_transition = expression.references().has_variable("oldSelf");
                compiled.push(CompiledRule {
                    rule: source.to_string(),
                    expression,
                    message,
                    message_expression,
                    reason,
                    field_path,
                    is_transition,
                    optional_old_self: rule.get("optionalOldSelf") == Some(&Value::Bool(true)),
                });
            }
            Err(error) => errors.push(FieldError::invalid(
                format!("{rule_path}.rule"),
                Value::String(source.to_string()),
                format!("compilation failed: {error}"),
            )),
        }
    }
    compiled
}

/// Normalizes a rule's `fieldPath` against the schema of the rule's node, as the apiserver's
/// `ValidFieldPath` does: `.name` and `['name']` select properties (rendered `a.b`) or keys of
/// an additionalProperties map (rendered `a[key]`).
fn normalize_field_path(field_path: &str, node: &Node) -> Result<String, String> {
    let mut normalized = String::new();
    let mut current = node;
    let mut rest = field_path;
    while !rest.is_empty() {
        let name: String;
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[', ']']).unwrap_or(after.len());
            if end == 0 {
                return Err("unexpected end of JSON path".to_string());
            }
            name = after[..end].to_string();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(quoted) = after.strip_prefix('\'') else {
                let token: String = after.chars().take_while(|&c| c != ']').collect();
                return Err(format!("expected single quoted string but got {token}"));
            };
            let end = quoted
                .find("']")
                .ok_or_else(|| "unexpected end of JSON path".to_string())?;
            name = quoted[..end].replace("\\'", "'");
            rest = &quoted[end + 2..];
        } else {
            let token: String = rest.chars().take_while(|&c| c != '.' && c != '[').collect();
            return Err(format!("expected [ or . but got: {token}"));
        }
        if !current.properties.is_empty() {
            current = current
                .properties
                .get(&name)
                .ok_or_else(|| "does not refer to a valid field".to_string())?;
            if !normalized.is_empty() {
                normalized.push('.');
            }
            normalized.push_str(&name);
        } else if let Some(additional) = current.additional_properties.as_deref() {
            current = additional;
            normalized.push_str(&format!("[{name}]"));
        } else {
            return Err("does not refer to a valid field".to_string());
        }
    }
    Ok(normalized)
}

// === evaluation ===

struct Budget {
    remaining: u64,
    exhausted: bool,
}

/// Evaluates every rule in the schema against `object` (and `old` for transition rules).
pub(crate) fn validate_rules(
    root: &Node,
    object: &Value,
    old: Option<&Value>,
    errors: &mut Vec<FieldError>,
) {
    let mut context = cel::Context::default();
    context.register_all();
    let mut budget = Budget {
        remaining: RUNTIME_COST_BUDGET,
        exhausted: false,
    };
    walk(root, object, old, "", &mut |node, value, old, path| {
        if !node.rules.is_empty() {
            evaluate_rules(node, value, old, path, &context, &mut budget, errors);
        }
        !budget.exhausted
    });
}

/// Whether [`validate_rules`] would evaluate any rule: none does on an update that leaves
/// every value carrying rules as it was (and has no transition rule on a changed one), such as
/// most status writes; building the CEL context and its stack is then skipped.
pub(crate) fn any_rule_runs(root: &Node, object: &Value, old: Option<&Value>) -> bool {
    let mut runs = false;
    walk(root, object, old, "", &mut |node, value, old, _| {
        runs = runs || RuleRun::of(node, value, old).is_some();
        !runs
    });
    runs
}

/// Whether any node of the schema declares rules (building the CEL context is not free).
pub(crate) fn has_rules(node: &Node) -> bool {
    !node.rules.is_empty()
        || node.properties.values().any(has_rules)
        || node.additional_properties.as_deref().is_some_and(has_rules)
        || node.items.as_deref().is_some_and(has_rules)
}

/// Which of a node's rules run against a value, as far as it can be told without running them.
struct RuleRun {
    /// Ratcheting: the value is the same as the old object's; only transition rules run.
    unchanged: bool,
    /// A rule that runs reads `oldSelf`.
    needs_old: bool,
}

impl RuleRun {
    /// `None` when no rule of `node` runs.
    fn of(node: &Node, value: &Value, old: Option<&Value>) -> Option<RuleRun> {
        if node.rules.is_empty() {
            return None;
        }
        let unchanged = old.is_some_and(|old| crate::json::json_equal(old, value));
        let mut running = node
            .rules
            .iter()
            .filter(|rule| RuleRun::runs(rule, unchanged, old.is_some()))
            .peekable();
        running.peek()?;
        let needs_old =
            old.is_some() && running.any(|rule| rule.is_transition || rule.optional_old_self);
        Some(RuleRun {
            unchanged,
            needs_old,
        })
    }

    fn runs(rule: &CompiledRule, unchanged: bool, has_old: bool) -> bool {
        // A transition rule needs an old value (unless it takes an optional one); any other
        // rule is ratcheted away on an unchanged value.
        if rule.is_transition {
            has_old || rule.optional_old_self
        } else {
            !unchanged
        }
    }
}

/// What [`walk`] calls at each node: the node, its value, its old value and its path; false
/// stops the walk.
type Visit<'a> = dyn FnMut(&Node, &Value, Option<&Value>, &str) -> bool + 'a;

/// Visits every node of the schema that has a value in `value`, depth first, with the value,
/// its old value and its path, until `visit` returns false. Map-list items are paired with
/// their old items; other list items have none, as upstream (`makeMapList`).
fn walk(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    visit: &mut Visit<'_>,
) -> bool {
    let mut buffer = path.to_string();
    walk_at(node, value, old, &mut buffer, visit)
}

/// [`walk`] with the path built in one buffer, each child's part appended and cut off again.
fn walk_at(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    path: &mut String,
    visit: &mut Visit<'_>,
) -> bool {
    use std::fmt::Write as _;
    if value.is_null() {
        return true;
    }
    if !visit(node, value, old.filter(|o| !o.is_null()), path) {
        return false;
    }
    let parent_len = path.len();
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for key in keys {
                if let (Some(property), Some(child_value)) = (node.property(key), map.get(key)) {
                    let old_child = old.and_then(|old| old.get(key));
                    // Map entries are addressed as keys (`labels[a]`), properties as fields.
                    if node.properties.contains_key(key) {
                        if !path.is_empty() {
                            path.push('.');
                        }
                        path.push_str(key);
                    } else {
                        path.push('[');
                        path.push_str(key);
                        path.push(']');
                    }
                    let go_on = walk_at(property, child_value, old_child, path, visit);
                    path.truncate(parent_len);
                    if !go_on {
                        return false;
                    }
                }
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = node.items.as_deref() else {
                return true;
            };
            let correlation = super::validate::Correlation::new(node, old);
            let is_map_list = node.list_type.as_deref() == Some("map");
            for (index, item) in items.iter().enumerate() {
                let old_item = is_map_list
                    .then(|| correlation.old_for(node, item))
                    .flatten();
                // Writing to a String cannot fail.
                let _ = write!(path, "[{index}]");
                let go_on = walk_at(item_schema, item, old_item, path, visit);
                path.truncate(parent_len);
                if !go_on {
                    return false;
                }
            }
        }
        _ => {}
    }
    true
}

pub(crate) fn node_count(value: &Value) -> u64 {
    match value {
        Value::Array(items) => 1 + items.iter().map(node_count).sum::<u64>(),
        Value::Object(map) => 1 + map.values().map(node_count).sum::<u64>(),
        _ => 1,
    }
}

fn evaluate_rules(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    context: &cel::Context<'_>,
    budget: &mut Budget,
    errors: &mut Vec<FieldError>,
) {
    let Some(run) = RuleRun::of(node, value, old) else {
        return;
    };
    let type_label = Value::String(node.type_label().to_string());
    let self_value = visible_to_cel(node, value, path.is_empty());
    let old_value = old
        .filter(|_| run.needs_old)
        .map(|old| visible_to_cel(node, old, path.is_empty()));
    let declared = node.cel_declaration(path.is_empty());
    // The variables are converted into the interpreter's values once per node and binding of
    // `oldSelf` (plain, or optional for `optionalOldSelf` rules), not once per rule: a
    // conversion copies the whole value, and transition rules often share one node.
    let scope_with = |optional_old_self: bool| {
        let mut scope = context.new_inner_scope();
        scope.add_variable_from_value("self", self_value.clone());
        if optional_old_self {
            let optional = match &old_value {
                Some(old_value) => cel::objects::OptionalValue::of(old_value.clone()),
                None => cel::objects::OptionalValue::none(),
            };
            scope.add_variable_from_value("oldSelf", cel::Value::Opaque(Arc::new(optional)));
        } else if let Some(old_value) = &old_value {
            scope.add_variable_from_value("oldSelf", old_value.clone());
        }
        scope
    };
    let mut plain_scope = None;
    let mut optional_scope = None;
    for rule in &node.rules {
        if !RuleRun::runs(rule, run.unchanged, old.is_some()) {
            continue;
        }
        let estimate = declared.map_or(0, |declared| {
            super::cost::runtime_estimate(
                &rule.expression,
                declared,
                rule.optional_old_self,
                value,
                old.filter(|_| run.needs_old),
            )
        });
        if estimate > PER_CALL_LIMIT {
            errors.push(FieldError::invalid(
                path,
                type_label.clone(),
                format!(
                    "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                    rule_error_string(rule)
                ),
            ));
            budget.exhausted = true;
            return;
        }
        if estimate > budget.remaining {
            errors.push(FieldError::invalid(
                path,
                type_label.clone(),
                "validation failed due to running out of cost budget, no further validation rules will be run",
            ));
            budget.exhausted = true;
            return;
        }
        budget.remaining -= estimate;

        let cached = if rule.optional_old_self {
            &mut optional_scope
        } else {
            &mut plain_scope
        };
        let scope: &cel::Context<'_> =
            cached.get_or_insert_with(|| scope_with(rule.optional_old_self));
        // The interpreter is third-party code evaluating user input: a panic inside it becomes
        // this rule's error instead of taking the request down.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cel::Value::resolve(&rule.expression, scope)
        }));
        let Ok(outcome) = outcome else {
            errors.push(FieldError::invalid(
                path,
                type_label.clone(),
                format!(
                    "internal error evaluating rule: {}",
                    rule_error_string(rule)
                ),
            ));
            continue;
        };
        match outcome {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let field = match rule.field_path.as_deref() {
                    Some(suffix) if path.is_empty() => suffix.to_string(),
                    Some(suffix) => format!("{path}.{suffix}"),
                    None => path.to_string(),
                };
                let detail = failure_message(rule, scope);
                // The bad value is the schema type, as in `fieldErrorForReason(path, sts.Type, ..)`.
                errors.push(match rule.reason {
                    FieldErrorKind::Forbidden => FieldError::forbidden(field, detail),
                    FieldErrorKind::Required => FieldError::required(field, detail),
                    FieldErrorKind::Duplicate => FieldError::duplicate(field, type_label.clone()),
                    _ => FieldError::invalid(field, type_label.clone(), detail),
                });
            }
            Ok(other) => errors.push(FieldError::invalid(
                path,
                type_label.clone(),
                format!(
                    "rule did not evaluate to a bool (got {}) evaluating rule: {}",
                    other.type_of(),
                    rule_error_string(rule)
                ),
            )),
            Err(cel::ExecutionError::NoSuchOverload) => errors.push(FieldError::invalid(
                path,
                type_label.clone(),
                format!(
                    "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {}",
                    rule_error_string(rule)
                ),
            )),
            Err(error) => errors.push(FieldError::invalid(
                path,
                type_label.clone(),
                format!("{} evaluating rule: {}", execution_error(&error), rule_error_string(rule)),
            )),
        }
    }
}

/// cel-go's wording for the common runtime errors.
pub(crate) fn execution_error(error: &cel::ExecutionError) -> String {
    match error {
        cel::ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        cel::ExecutionError::IndexOutOfBounds(index) => {
            format!("index out of bounds: {}", cel_plain(index))
        }
        cel::ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        cel::ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        cel::ExecutionError::Overflow(..) => "integer overflow".to_string(),
        other => other.to_string(),
    }
}

fn cel_plain(value: &cel::Value) -> String {
    match value {
        cel::Value::Int(i) => i.to_string(),
        cel::Value::UInt(u) => u.to_string(),
        cel::Value::String(s) => s.to_string(),
        other => format!("{other:?}"),
    }
}

/// `ruleErrorString`: the trimmed message if there is one, else the trimmed rule.
fn rule_error_string(rule: &CompiledRule) -> String {
    match &rule.message {
        Some(message) if !message.trim().is_empty() => message.trim().to_string(),
        _ => rule.rule.trim().to_string(),
    }
}

/// The message of a failed rule: `messageExpression` when it yields a usable string, else
/// `message`, else `failed rule: <rule>`.
fn failure_message(rule: &CompiledRule, scope: &cel::Context<'_>) -> String {
    let evaluated = rule.message_expression.as_ref().and_then(|expression| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cel::Value::resolve(expression, scope)
        }))
        .ok()
    });
    if let Some(Ok(cel::Value::String(text))) = evaluated
        && !text.trim().is_empty()
        && !text.contains('\n')
    {
        return text.trim().to_string();
    }
    match &rule.message {
        Some(message) if !message.trim().is_empty() => message.trim().to_string(),
        _ => format!("failed rule: {}", rule.rule.trim()),
    }
}

/// A value as the rules of `node` see it: at the root, only `metadata.name` and
/// `metadata.generateName` of the metadata, as upstream.
fn visible_to_cel(node: &Node, value: &Value, at_root: bool) -> cel::Value {
    match value {
        Value::Object(map) if at_root => {
            let converted: HashMap<String, cel::Value> = map
                .iter()
                .map(|(key, child)| {
                    let child_node = node.property(key);
                    let converted = match child {
                        Value::Object(metadata) if key == "metadata" => {
                            let visible: serde_json::Map<String, Value> = metadata
                                .iter()
                                .filter(|(key, _)| *key == "name" || *key == "generateName")
                                .map(|(key, value)| (key.clone(), value.clone()))
                                .collect();
                            to_cel(child_node, &Value::Object(visible))
                        }
                        _ => to_cel(child_node, child),
                    };
                    (key.clone(), converted)
                })
                .collect();
            cel::Value::from(converted)
        }
        _ => to_cel(Some(node), value),
    }
}

/// Converts a JSON value to CEL following the schema: `number` fields are doubles even when
/// integral, `integer` fields ints; objects become maps keyed by property name.
pub(crate) fn to_cel(node: Option<&Node>, value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(number) => {
            let is_number_field = node.is_some_and(|n| n.type_name.as_deref() == Some("number"));
            match (number.as_i64(), is_number_field) {
                (Some(int), false) => cel::Value::Int(int),
                _ => match number.as_u64() {
                    Some(uint) if !is_number_field && number.as_i64().is_none() => {
                        cel::Value::UInt(uint)
                    }
                    _ => cel::Value::Float(number.as_f64().unwrap_or(f64::NAN)),
                },
            }
        }
        Value::String(text) => {
            let format = node.and_then(|n| n.format.as_deref());
            match format {
                Some("date-time" | "datetime") => chrono::DateTime::parse_from_rfc3339(text)
                    .map(cel::Value::Timestamp)
                    .unwrap_or_else(|_| cel::Value::String(Arc::new(text.clone()))),
                Some("duration") => parse_duration(text)
                    .map(cel::Value::Duration)
                    .unwrap_or_else(|| cel::Value::String(Arc::new(text.clone()))),
                _ => cel::Value::String(Arc::new(text.clone())),
            }
        }
        Value::Array(items) => {
            let item_schema = node.and_then(|n| n.items.as_deref());
            cel::Value::List(Arc::new(
                items.iter().map(|item| to_cel(item_schema, item)).collect(),
            ))
        }
        Value::Object(map) => {
            let converted: HashMap<String, cel::Value> = map
                .iter()
                .map(|(key, child)| {
                    (
                        key.clone(),
                        to_cel(node.and_then(|n| n.property(key)), child),
                    )
                })
                .collect();
            cel::Value::from(converted)
        }
    }
}

/// A Go duration (`1h30m`, `1.5s`, `-20ms`), plus the `d` and `w` units strfmt accepts.
fn parse_duration(text: &str) -> Option<chrono::Duration> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(chrono::Duration::zero());
    }
    if rest.is_empty() {
        return None;
    }
    let mut total_nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&end| end > 0)?;
        let amount: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "d" => 86_400e9,
            "w" => 604_800e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total_nanos += amount * nanos_per_unit;
    }
    if !total_nanos.is_finite() || total_nanos > i64::MAX as f64 {
        return None;
    }
    let duration = chrono::Duration::nanoseconds(total_nanos.round() as i64);
    Some(if negative { -duration } else { duration })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("1h30m"), Some(chrono::Duration::minutes(90)));
        assert_eq!(
            parse_duration("1.5s"),
            Some(chrono::Duration::milliseconds(1500))
        );
        assert_eq!(
            parse_duration("-20ms"),
            Some(chrono::Duration::milliseconds(-20))
        );
        assert_eq!(parse_duration("2d"), Some(chrono::Duration::hours(48)));
        assert_eq!(parse_duration("0"), Some(chrono::Duration::zero()));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("h"), None);
        assert_eq!(parse_duration("1y"), None);
    }

    #[test]
    fn field_paths_normalize_against_the_schema() {
        let mut errors = Vec::new();
        let node = super::super::compile_node(
            &serde_json::json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"x": {"type": "string"}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}
            }}),
            "",
            super::super::Level::Field,
            &mut errors,
        );
        let normalize = |path: &str| normalize_field_path(path, &node);
        assert_eq!(normalize(".spec.x").as_deref(), Ok("spec.x"));
        assert_eq!(normalize("['spec'].x").as_deref(), Ok("spec.x"));
        assert_eq!(normalize(".labels['a.b']").as_deref(), Ok("labels[a.b]"));
        assert_eq!(
            normalize(".nope"),
            Err("does not refer to a valid field".to_string())
        );
        assert_eq!(
            normalize(".spec[0]"),
            Err("expected single quoted string but got 0".to_string())
        );
        assert_eq!(
            normalize("spec"),
            Err("expected [ or . but got: spec".to_string())
        );
    }

    #[test]
    fn comprehension_depth_counts_nesting_not_occurrences() {
        let depth = |rule: &str| parse(rule).map(|e| comprehension_depth(&e)).unwrap_or(99);
        assert_eq!(depth("self > 1"), 0);
        assert_eq!(depth("self.all(x, x > 0) && self.exists(x, x > 1)"), 1);
        assert_eq!(depth("self.all(x, self.exists(y, y == x))"), 2);
        assert_eq!(depth("self.map(x, x * 2).filter(y, y > 2).size() > 0"), 1);
    }

    #[test]
    fn unknown_functions_do_not_compile() {
        assert!(parse("self.size > 1").is_ok());
        assert!(parse("self.all(x, x.startsWith('a'))").is_ok());
        let error = parse("self.frobnicate()").err().unwrap_or_default();
        assert!(
            error.contains("undeclared reference to 'frobnicate'"),
            "{error}"
        );
        assert!(parse("self.x ==").is_err());
    }

    #[test]
    fn undeclared_fields_do_not_compile() {
        let mut errors = Vec::new();
        let node = super::super::compile_node(
            &serde_json::json!({"type": "object", "properties": {
                "size": {"type": "integer"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}
            }}),
            "",
            super::super::Level::Field,
            &mut errors,
        );
        let check = |rule: &str| {
            parse(rule)
                .and_then(|e| check_fields(e, &node, false))
                .map(|_| ())
        };
        assert_eq!(check("self.size > 1 && has(self.labels.anything)"), Ok(()));
        assert_eq!(
            check("self.sise > 1"),
            Err("ERROR: <input>: undefined field 'sise'".to_string())
        );
        assert_eq!(
            check("has(self.nope)"),
            Err("ERROR: <input>: undefined field 'nope'".to_string())
        );
        assert_eq!(
            check("self.size == oldSelf.siz"),
            Err("ERROR: <input>: undefined field 'siz'".to_string())
        );
    }
}
