//! The types the estimate depends on, inferred from the schema and the functions called: the
//! `cel` parser does not type-check, and the estimate charges `a < b` on strings by their length
//! but on integers by one.

use std::collections::BTreeMap;

use kube_cel::cel::common::ast::{LiteralValue, operators};

use super::decl::{Decl, DeclKind};

#[derive(Debug, Clone)]
pub(super) enum Ty<'d> {
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
    pub(super) fn of(decl: &'d Decl) -> Ty<'d> {
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

    pub(super) fn is_dyn(&self) -> bool {
        matches!(self, Ty::Dyn)
    }

    /// `isScalar`: a value of constant size.
    pub(super) fn is_scalar(&self) -> bool {
        match self {
            Ty::Bool | Ty::Double | Ty::Duration | Ty::Int | Ty::Timestamp | Ty::Uint => true,
            Ty::Optional(inner) => inner.is_scalar(),
            _ => false,
        }
    }

    /// Map, struct or type parameter: a field selection on it costs one.
    pub(super) fn selection_costs(&self) -> bool {
        matches!(self, Ty::Map(..) | Ty::Object(_))
    }

    pub(super) fn element(&self) -> Ty<'d> {
        match self {
            Ty::List(item) => (**item).clone(),
            Ty::Map(key, _) => (**key).clone(),
            _ => Ty::Dyn,
        }
    }
}

pub(super) fn literal_type<'d>(literal: &LiteralValue) -> Ty<'d> {
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

/// The result type of a call, as far as the estimate needs it.
pub(super) fn result_type<'d>(function: &str, target: Option<&Ty<'d>>, args: &[Ty<'d>]) -> Ty<'d> {
    let first = || args.first().cloned().unwrap_or(Ty::Dyn);
    let target_ty = || target.cloned().unwrap_or(Ty::Dyn);
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
        operators::CONDITIONAL => match args.get(1) {
            Some(ty) if !ty.is_dyn() => ty.clone(),
            _ => args.get(2).cloned().unwrap_or(Ty::Dyn),
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

pub(super) fn arithmetic_type<'d>(function: &str, args: &[Ty<'d>]) -> Ty<'d> {
    let (Some(left), Some(right)) = (args.first(), args.get(1)) else {
        return Ty::Dyn;
    };
    match (left, right, function) {
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
