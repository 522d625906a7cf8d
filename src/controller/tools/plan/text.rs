//! The plan as a table, as `kubectl get` prints one, and the totals line.

use super::core::{Action, Plan, PlannedObject, PriceSource};
use gpucloud_api::money::rounded;

const HEADERS: [&str; 7] = [
    "KIND",
    "NAMESPACE/NAME",
    "ACTION",
    "PLACEMENT",
    "BEFORE/h",
    "AFTER/h",
    "NOTE",
];

/// The table, then the totals line.
pub fn render(plan: &Plan) -> String {
    let rows: Vec<[String; 7]> = plan.objects.iter().map(row).collect();
    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = HEADERS.map(str::to_string);
    for cells in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}   ", width = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let total = &plan.total;
    let currency = if total.currency.is_empty() {
        String::new()
    } else {
        format!(" {}", total.currency)
    };
    out.push_str(&format!(
        "\nTotal per hour: before {:.4}{currency}, after {:.4}{currency}, delta {:+.4}{currency}",
        rounded(total.before),
        rounded(total.after),
        rounded(total.delta)
    ));
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if total.unpriced > 0 {
        out.push_str(&format!(
            " ({} object{} without a known price left out)",
            total.unpriced,
            plural(total.unpriced)
        ));
    }
    let held_creates = plan
        .objects
        .iter()
        .filter(|o| o.held.is_some() && o.action == Action::Create)
        .count();
    if held_creates > 0 {
        out.push_str(&format!(
            " ({held_creates} held create{} counted at 0)",
            plural(held_creates)
        ));
    }
    let held_starts = total.held - held_creates;
    if held_starts > 0 {
        out.push_str(&format!(
            " ({held_starts} held start{} counted off)",
            plural(held_starts)
        ));
    }
    out.push('\n');
    let checks = &plan.checks;
    for (what, said) in [
        ("CRDs", &checks.crds),
        ("Admission policies", &checks.admission),
        ("Stock", &checks.stock),
        ("Holds", &checks.holds),
    ] {
        if !said.is_empty() {
            out.push_str(&format!("{what}: {said}\n"));
        }
    }
    if total.refused > 0 {
        out.push_str(&format!(
            "The API server would refuse {} object{}:\n",
            total.refused,
            plural(total.refused)
        ));
        for message in plan.refusals() {
            out.push_str(&format!("  {message}\n"));
        }
    }
    out
}

fn row(object: &PlannedObject) -> [String; 7] {
    let cost = |rate: Option<f64>| rate.map_or("-".to_string(), |r| format!("{:.4}", rounded(r)));
    let skipped = object.action == Action::Skipped;
    let mut notes = Vec::new();
    let changed: Vec<&str> = object
        .changes
        .iter()
        .map(|c| c.path.trim_start_matches("/spec/"))
        .collect();
    if !changed.is_empty() {
        notes.push(format!("spec: {}", changed.join(", ")));
    }
    if let Some(held) = &object.held {
        notes.push(held.to_string());
    }
    if object.refused.is_some() {
        notes.push("refused by the API server (below)".into());
    }
    if let Some(note) = &object.note {
        notes.push(note.clone());
    }
    match object.hourly_cost.source {
        Some(PriceSource::NotBilled) => notes.push("not billed".into()),
        Some(source) => notes.push(format!("priced by {source}")),
        None => {}
    }
    [
        object.kind.clone(),
        if object.namespace.is_empty() {
            object.name.clone()
        } else {
            format!("{}/{}", object.namespace, object.name)
        },
        if object.held.is_some() {
            format!("{} (held)", object.action)
        } else {
            object.action.to_string()
        },
        object
            .placement
            .as_ref()
            .map_or("-".to_string(), ToString::to_string),
        if skipped {
            "-".into()
        } else {
            cost(object.hourly_cost.before)
        },
        if skipped {
            "-".into()
        } else {
            cost(object.hourly_cost.after)
        },
        notes.join("; "),
    ]
}
