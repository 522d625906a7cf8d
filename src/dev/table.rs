//! The live table: every gpucloud.io object with its cloud state and conditions, printed again
//! whenever a row changes. Plain lines only, so it reads the same in a terminal and in a log.

use gpucloud_controller::flow::kind::ManagedKind;
use gpucloud_controller::kinds::registry::{KindFn, map_kinds};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use std::io::Write;
use std::time::{Duration, Instant};

/// Longest message shown; the full one is in `kubectl describe`.
const MESSAGE_WIDTH: usize = 90;

/// One object as the table shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub kind: String,
    /// `namespace/name`.
    pub name: String,
    pub state: String,
    /// The Ready condition's status, `-` before the first reconcile.
    pub ready: String,
    pub message: String,
    /// Ready, or Stalled waiting for a person: nothing more will happen by itself.
    pub settled: bool,
}

/// Every managed kind, in the order they are listed: what others use before what uses them
/// (the registry's deletion order reversed).
fn resources() -> Vec<ApiResource> {
    struct Erase;
    impl KindFn<ApiResource> for Erase {
        fn call<K: ManagedKind>(&self) -> ApiResource {
            ApiResource::erase::<K>(&())
        }
    }
    let mut resources = map_kinds(Erase);
    resources.reverse();
    resources
}

/// The rows of every object of every managed kind, across namespaces.
pub async fn rows(client: &kube::Client) -> Result<Vec<Row>, kube::Error> {
    let mut rows = Vec::new();
    for resource in resources() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let mut objects = api.list(&ListParams::default()).await?.items;
        objects.sort_by_key(|o| (o.namespace().unwrap_or_default(), o.name_any()));
        rows.extend(objects.iter().map(|o| row(&resource.kind, o)));
    }
    Ok(rows)
}

fn row(kind: &str, object: &DynamicObject) -> Row {
    let status = object.data.get("status");
    let text = |value: Option<&serde_json::Value>| {
        value
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let conditions: Vec<&serde_json::Value> = status
        .and_then(|s| s.get("conditions"))
        .and_then(|c| c.as_array())
        .map(|c| c.iter().collect())
        .unwrap_or_default();
    let condition = |kind: &str| {
        conditions
            .iter()
            .find(|c| c.get("type").and_then(|t| t.as_str()) == Some(kind))
            .copied()
    };
    let is_true = |kind: &str| text(condition(kind).and_then(|c| c.get("status"))) == "True";
    let ready = condition("Ready")
        .map(|c| text(c.get("status")))
        .unwrap_or_else(|| "-".into());
    // The most telling condition: what blocks it, else what is under way, else Ready's own.
    let explaining = ["Stalled", "Reconciling"]
        .into_iter()
        .find(|kind| is_true(kind))
        .and_then(condition)
        .or_else(|| condition("Ready"));
    let message = explaining
        .map(|c| {
            let reason = text(c.get("reason"));
            let message = text(c.get("message"));
            match (reason.is_empty(), message.is_empty()) {
                (false, false) => format!("{reason}: {message}"),
                (false, true) => reason,
                _ => message,
            }
        })
        .unwrap_or_default();
    let generation = object.metadata.generation;
    let observed = condition("Ready")
        .and_then(|c| c.get("observedGeneration"))
        .and_then(|g| g.as_i64());
    let current = generation.is_none() || observed.is_none() || observed == generation;
    let state = text(status.and_then(|s| s.get("state")));
    Row {
        kind: kind.to_string(),
        name: format!(
            "{}/{}",
            object.namespace().unwrap_or_default(),
            object.name_any()
        ),
        state: if state.is_empty() { "-".into() } else { state },
        ready,
        message: shorten(&message),
        settled: current && (is_true("Ready") || is_true("Stalled")),
    }
}

fn shorten(message: &str) -> String {
    let single_line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if single_line.chars().count() <= MESSAGE_WIDTH {
        return single_line;
    }
    let mut short: String = single_line.chars().take(MESSAGE_WIDTH - 3).collect();
    short.push_str("...");
    short
}

/// The table as text, one line per row under a header, columns aligned.
pub fn render(rows: &[Row]) -> String {
    if rows.is_empty() {
        return "  (no gpucloud.io objects)\n".into();
    }
    let header = ["KIND", "NAME", "STATE", "READY", "MESSAGE"];
    let cells: Vec<[&str; 5]> = rows
        .iter()
        .map(|r| {
            [
                r.kind.as_str(),
                r.name.as_str(),
                r.state.as_str(),
                r.ready.as_str(),
                r.message.as_str(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in std::iter::once(&header).chain(cells.iter()) {
        out.push_str("  ");
        for (column, cell) in line.iter().enumerate() {
            if column + 1 == line.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}   ", width = widths[column]));
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}

/// One line under the table saying whether everything has converged.
pub fn summary(rows: &[Row]) -> String {
    let ready = rows.iter().filter(|r| r.ready == "True").count();
    let settled = rows.iter().filter(|r| r.settled).count();
    let stalled = settled.saturating_sub(ready);
    if rows.is_empty() {
        "  waiting for objects (kubectl apply -f examples/quickstart)".into()
    } else if settled == rows.len() && stalled == 0 {
        format!("  all {} objects Ready", rows.len())
    } else if settled == rows.len() {
        format!(
            "  settled: {ready} Ready, {stalled} Stalled (see the MESSAGE column; fix the spec or the cause)"
        )
    } else {
        format!(
            "  converging: {ready} of {} Ready, {} still changing",
            rows.len(),
            rows.len() - settled
        )
    }
}

/// Lists every `interval` and prints the table whenever a row changed, until the task is
/// dropped. A failed list is reported once per failure streak, not in a loop.
pub async fn follow(client: kube::Client, interval: Duration) {
    let started = Instant::now();
    let mut shown: Option<Vec<Row>> = None;
    let mut failing = false;
    loop {
        match rows(&client).await {
            Ok(current) => {
                failing = false;
                if shown.as_ref() != Some(&current) {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "[+{}s]", started.elapsed().as_secs());
                    let _ = write!(out, "{}", render(&current));
                    let _ = writeln!(out, "{}", summary(&current));
                    let _ = out.flush();
                    shown = Some(current);
                }
            }
            Err(error) => {
                if !failing {
                    println!("  (cannot list objects: {error})");
                }
                failing = true;
            }
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn object(json: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn rows_read_state_ready_and_the_blocking_condition() {
        let stalled = object(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
            "metadata": {"name": "train-1", "namespace": "default", "generation": 1},
            "status": {"state": "CREATING", "conditions": [
                {"type": "Ready", "status": "False", "reason": "PriceAboveLimit", "message": "too dear", "observedGeneration": 1},
                {"type": "Stalled", "status": "True", "reason": "PriceAboveLimit", "message": "3.5 > 2.0", "observedGeneration": 1}
            ]}
        }));
        let row = row("GpuInstance", &stalled);
        assert_eq!(row.name, "default/train-1");
        assert_eq!(row.state, "CREATING");
        assert_eq!(row.ready, "False");
        assert_eq!(row.message, "PriceAboveLimit: 3.5 > 2.0");
        assert!(row.settled);

        let fresh = object(serde_json::json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "SshKey",
            "metadata": {"name": "k", "namespace": "default", "generation": 2},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "Available", "message": "", "observedGeneration": 1}
            ]}
        }));
        let row = super::row("SshKey", &fresh);
        assert_eq!(row.state, "-");
        assert_eq!(row.ready, "True");
        assert!(!row.settled, "Ready for an older generation is not settled");
    }

    #[test]
    fn the_table_aligns_columns_and_sums_up() {
        let rows = vec![
            Row {
                kind: "SshKey".into(),
                name: "default/dev-key".into(),
                state: "available".into(),
                ready: "True".into(),
                message: "Available".into(),
                settled: true,
            },
            Row {
                kind: "GpuInstance".into(),
                name: "default/train-1".into(),
                state: "CREATING".into(),
                ready: "False".into(),
                message: "Creating: waiting for the cloud".into(),
                settled: false,
            },
        ];
        let text = render(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let column = lines[0].find("STATE").unwrap();
        assert_eq!(lines[1].find("available").unwrap(), column);
        assert_eq!(lines[2].find("CREATING").unwrap(), column);
        assert_eq!(
            summary(&rows),
            "  converging: 1 of 2 Ready, 1 still changing"
        );
        assert_eq!(summary(&rows[..1]), "  all 1 objects Ready");
        assert!(shorten(&"x".repeat(200)).ends_with("..."));
    }
}
