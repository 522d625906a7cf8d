//! `docs/cloud-api.md` lists exactly the route table, so the document cannot drift from the
//! code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpucloud_cloud::{Operation, Retry, Source};

const DOC: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/cloud-api.md"
));
/// The client's operation files, one per resource.
const CLIENT: &[&str] = &[
    include_str!("../client/account.rs"),
    include_str!("../client/ai.rs"),
    include_str!("../client/catalog.rs"),
    include_str!("../client/firewalls.rs"),
    include_str!("../client/images.rs"),
    include_str!("../client/instances.rs"),
    include_str!("../client/snapshots.rs"),
    include_str!("../client/ssh_keys.rs"),
    include_str!("../client/startup_scripts.rs"),
    include_str!("../client/volumes.rs"),
];

struct Row {
    operation: String,
    method: String,
    path: String,
    source: String,
    retry: String,
    client_method: String,
}

fn table_rows() -> Vec<Row> {
    let start = DOC
        .find("<!-- route-table:start -->")
        .expect("start marker");
    let end = DOC.find("<!-- route-table:end -->").expect("end marker");
    DOC[start..end]
        .lines()
        .filter(|line| line.starts_with('|'))
        .skip(2) // header and separator
        .map(|line| {
            let cells: Vec<String> = line
                .trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().trim_matches('`').to_owned())
                .collect();
            assert_eq!(cells.len(), 8, "row {line:?} must have 8 cells");
            Row {
                operation: cells[0].clone(),
                method: cells[1].clone(),
                path: cells[2].clone(),
                source: cells[3].clone(),
                retry: cells[4].clone(),
                client_method: cells[5].clone(),
            }
        })
        .collect()
}

fn expected_row(op: Operation) -> String {
    let source = match op.source() {
        Source::Shown => "shown",
        Source::Assumed => "assumed",
    };
    let retry = match op.retry() {
        Retry::Idempotent => "Idempotent",
        Retry::Unsafe => "Unsafe",
        Retry::BilledCreate => "BilledCreate",
    };
    format!(
        "{} {} {} {} {}",
        op.name(),
        op.method(),
        op.path(),
        source,
        retry
    )
}

#[test]
fn doc_table_lists_exactly_the_route_table() {
    let rows = table_rows();
    let documented: Vec<String> = rows
        .iter()
        .map(|row| {
            format!(
                "{} {} {} {} {}",
                row.operation, row.method, row.path, row.source, row.retry
            )
        })
        .collect();
    let expected: Vec<String> = Operation::ALL.iter().map(|op| expected_row(*op)).collect();
    assert_eq!(
        documented, expected,
        "docs/cloud-api.md's route table differs from Operation::ALL"
    );
}

#[test]
fn every_documented_client_method_exists() {
    let rows = table_rows();
    assert_eq!(rows.len(), Operation::ALL.len());
    let mut names: Vec<&str> = rows.iter().map(|row| row.client_method.as_str()).collect();
    for name in &names {
        // A method written out (`pub async fn name(`) or declared in a `calls!` table
        // (`fn name(`, which the macro makes public).
        let signature = format!("fn {name}(");
        assert!(
            CLIENT.iter().any(|file| file.contains(&signature)),
            "the client has no method {name}"
        );
    }
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        Operation::ALL.len(),
        "one method per operation"
    );
}
