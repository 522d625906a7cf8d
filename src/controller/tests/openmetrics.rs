#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A scraped `/metrics` body read as Prometheus reads it: prometheus-client's strict
//! OpenMetrics parser (Python, `tests/python/openmetrics.py`), then the families' types, and
//! every series the Grafana dashboard and the chart's PrometheusRule query, checked against
//! what is served and how it is used (`rate()` only over counters and histogram buckets).

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[path = "../../../tests/python/tools.rs"]
mod tools;

const DASHBOARD: &str =
    include_str!("../../../charts/gpucloud-operator/dashboards/gpucloud-operator.json");
const RULES: &str = include_str!("../../../charts/gpucloud-operator/templates/prometheusrule.yaml");

/// Prefixes of the families the operator serves: any name with one must be served.
const PREFIXES: [&str; 5] = [
    "gpucloud_",
    "controller_runtime_",
    "workqueue_",
    "rest_client_",
    "process_",
];

/// Functions whose argument must be a counter (or a histogram's bucket, count or sum).
const COUNTER_FUNCTIONS: [&str; 3] = ["rate", "irate", "increase"];

#[derive(Debug, Deserialize)]
struct Family {
    #[serde(rename = "type")]
    type_: String,
    labels: Vec<String>,
}

/// Parses `body` and checks it against the expected types, the dashboard and the rules.
pub fn check(body: &str) {
    let families = parse(body);
    families_have_their_types(&families);
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    queries_use_served_series_as_their_types_allow(&families, panels);
    the_spend_panel_groups_by_served_labels(&families, panels);
    no_family_carries_a_target_label(&families);
}

/// Each family the operator is known to serve is served, with its type.
fn families_have_their_types(families: &BTreeMap<String, Family>) {
    for (name, type_) in [
        ("gpucloud_reconciles", "counter"),
        ("gpucloud_reconcile_duration_seconds", "histogram"),
        ("gpucloud_objects", "gauge"),
        ("gpucloud_hourly_cost", "gauge"),
        ("gpucloud_budget_hourly_rate", "gauge"),
        ("gpucloud_budget_max_hourly_rate", "gauge"),
        ("gpucloud_budget_spent", "gauge"),
        ("gpucloud_budget_max_spend", "gauge"),
        ("gpucloud_queue_depth", "gauge"),
        ("gpucloud_account_balance", "gauge"),
        ("gpucloud_cloud_requests", "counter"),
        ("gpucloud_leader", "gauge"),
        ("gpucloud_build_info", "gauge"),
        ("rest_client_requests", "counter"),
        ("rest_client_request_duration_seconds", "histogram"),
        ("controller_runtime_reconcile", "counter"),
        ("controller_runtime_reconcile_errors", "counter"),
        ("controller_runtime_terminal_reconcile_errors", "counter"),
        ("controller_runtime_reconcile_time_seconds", "histogram"),
        ("controller_runtime_active_workers", "gauge"),
        ("controller_runtime_max_concurrent_reconciles", "gauge"),
        ("workqueue_depth", "gauge"),
        ("workqueue_retries", "counter"),
        ("workqueue_queue_duration_seconds", "histogram"),
        ("workqueue_work_duration_seconds", "histogram"),
        ("process_cpu_seconds", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        let served = families.get(name).map(|f| f.type_.as_str());
        assert_eq!(served, Some(type_), "{name} in {:?}", families.keys());
    }
}

/// Every expression of the dashboard's panels and the rules queries series that are served,
/// and `rate()` only over counters and histogram buckets.
fn queries_use_served_series_as_their_types_allow(
    families: &BTreeMap<String, Family>,
    panels: &[serde_json::Value],
) {
    let mut exprs: Vec<String> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    let panel_exprs = exprs.len();
    exprs.extend(rule_exprs(RULES));
    assert!(exprs.len() >= panel_exprs + 8, "{exprs:#?}");
    for expr in &exprs {
        let uses = metric_uses(expr);
        assert!(!uses.is_empty(), "no series in {expr}");
        for (sample, in_counter_function) in uses {
            if sample == "up" {
                continue; // Prometheus' own, per target.
            }
            let (family, counter_like) = resolve(families, &sample)
                .unwrap_or_else(|| panic!("{expr} queries {sample}, which is not served"));
            assert_eq!(
                in_counter_function,
                counter_like,
                "{expr}: {sample} ({}) is {} rate()/increase()",
                family.type_,
                if in_counter_function {
                    "inside"
                } else {
                    "not inside"
                }
            );
        }
    }
}

/// The spend panel groups by labels gpucloud_hourly_cost carries.
fn the_spend_panel_groups_by_served_labels(
    families: &BTreeMap<String, Family>,
    panels: &[serde_json::Value],
) {
    let spend = panels
        .iter()
        .find(|p| p["title"] == "Hourly spend by namespace")
        .expect("the spend panel");
    let expr = spend["targets"][0]["expr"].as_str().unwrap();
    let grouped = expr
        .split_once("by (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(labels, _)| labels)
        .expect("a grouping");
    let served = &families["gpucloud_hourly_cost"].labels;
    for label in grouped.split(',').map(str::trim) {
        assert!(
            served.iter().any(|l| l == label),
            "{label} not in {served:?}"
        );
    }
    assert!(grouped.contains("object_namespace"), "{expr}");
}

/// No family carries a label Prometheus gives the scrape target itself: it would be renamed
/// `exported_*` (or, with honorLabels, override the target's).
fn no_family_carries_a_target_label(families: &BTreeMap<String, Family>) {
    let target_labels = [
        "job",
        "instance",
        "namespace",
        "pod",
        "service",
        "container",
        "endpoint",
        "node",
    ];
    for (name, family) in families {
        for label in &family.labels {
            assert!(
                !target_labels.contains(&label.as_str()),
                "{name} carries the target label {label}"
            );
        }
    }
}

/// The families of `body` as the OpenMetrics parser reads them; a refused body fails the test.
fn parse(body: &str) -> BTreeMap<String, Family> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let file = std::env::temp_dir().join(format!(
        "gpucloud-metrics-{}-{:?}.txt",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&file, body).unwrap();
    let output = std::process::Command::new(tools::python(&root))
        .arg(root.join("tests/python/openmetrics.py"))
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        output.status.success(),
        "{}\n{body}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The family a queried series belongs to, and whether it is one `rate()` applies to.
fn resolve<'a>(families: &'a BTreeMap<String, Family>, sample: &str) -> Option<(&'a Family, bool)> {
    let suffixed = |suffix: &str, types: &[&str]| {
        let family = families.get(sample.strip_suffix(suffix)?)?;
        types.contains(&family.type_.as_str()).then_some(family)
    };
    if let Some(family) = suffixed("_total", &["counter"]) {
        return Some((family, true));
    }
    for suffix in ["_bucket", "_count", "_sum"] {
        if let Some(family) = suffixed(suffix, &["histogram"]) {
            return Some((family, true));
        }
    }
    let family = families.get(sample)?;
    ["gauge", "info", "unknown"]
        .contains(&family.type_.as_str())
        .then_some((family, false))
}

/// The `expr:` of each rule in the template, with its Helm actions left out (they only fill
/// in label values).
fn rule_exprs(template: &str) -> Vec<String> {
    template
        .lines()
        .filter_map(|line| line.trim().strip_prefix("expr:"))
        .map(|expr| {
            let mut plain = String::new();
            let mut rest = expr;
            while let Some((before, after)) = rest.split_once("{{") {
                plain.push_str(before);
                rest = after.split_once("}}").map_or("", |(_, tail)| tail);
            }
            plain.push_str(rest);
            plain.trim().to_string()
        })
        .collect()
}

/// Each series `expr` selects, and whether it is inside `rate()`, `irate()` or `increase()`.
/// Label matchers, strings and ranges are skipped; an identifier followed by `(` is a function
/// (or a `by (...)` grouping); any other one is a series when it is `up` or carries one of
/// the operator's prefixes.
fn metric_uses(expr: &str) -> Vec<(String, bool)> {
    let chars: Vec<char> = expr.chars().collect();
    let mut calls: Vec<String> = Vec::new();
    let mut uses = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '{' | '[' | '"' => i = skip_group(&chars, i),
            '(' => {
                calls.push(String::new());
                i += 1;
            }
            ')' => {
                calls.pop();
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                if chars.get(next) == Some(&'(') {
                    calls.push(word);
                    i = next + 1;
                } else if word == "up" || PREFIXES.iter().any(|p| word.starts_with(p)) {
                    let counted = calls
                        .iter()
                        .any(|c| COUNTER_FUNCTIONS.contains(&c.as_str()));
                    uses.push((word, counted));
                }
            }
            _ => i += 1,
        }
    }
    uses
}

/// The index after the group opened at `start` (`{...}`, `[...]` or a string).
fn skip_group(chars: &[char], start: usize) -> usize {
    let close = match chars[start] {
        '{' => '}',
        '[' => ']',
        _ => '"',
    };
    let mut i = start + 1;
    let mut in_string = chars[start] == '"';
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '"' if close == '"' => return i + 1,
            '"' => in_string = !in_string,
            c if c == close && !in_string => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

#[test]
fn series_and_their_functions_are_found() {
    assert_eq!(
        metric_uses(
            r#"histogram_quantile(0.95, sum by (kind, le) (rate(gpucloud_x_bucket{job=~"$job",a="}"}[5m])))"#
        ),
        vec![("gpucloud_x_bucket".to_string(), true)]
    );
    assert_eq!(
        metric_uses(r#"absent(up{job="j"} == 1) or sum(gpucloud_leader) == 0"#),
        vec![
            ("up".to_string(), false),
            ("gpucloud_leader".to_string(), false)
        ]
    );
    assert_eq!(
        rule_exprs("  expr: sum(a{ {{- $selector -}} }) > {{ .Values.x }}\n  for: 5m\n"),
        vec!["sum(a{  }) >".to_string()]
    );
}

/// The parser is strict: a counter sample without its `_total` suffix, or a body without the
/// closing `# EOF`, is refused, as Prometheus refuses it.
#[test]
fn the_parser_refuses_what_openmetrics_forbids() {
    for body in ["# TYPE a counter\na 1\n# EOF\n", "# TYPE a gauge\na 1\n"] {
        let refused = std::panic::catch_unwind(|| parse(body));
        assert!(refused.is_err(), "accepted:\n{body}");
    }
    assert_eq!(parse("# TYPE a gauge\na 1\n# EOF\n")["a"].type_, "gauge");
}
