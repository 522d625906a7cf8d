//! Scraping `/metrics` as Prometheus and as a plain client do, and reading the body with a
//! strict parser of the format the answer claims: prometheus-client's OpenMetrics parser
//! (`tests/python/openmetrics.py`) or the 0.0.4 text checks (`tests/python/prometheus_text.py`).
//! And the families `docs/operations.md` documents.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

#[path = "../python/tools.rs"]
mod tools;

/// What Prometheus 2.x sends.
pub const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
pub const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One family as a parser read it.
#[derive(Debug, Deserialize)]
pub struct Family {
    #[serde(rename = "type")]
    pub type_: String,
    pub samples: Vec<String>,
    pub labels: Vec<String>,
}

fn repository_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `GET /metrics` at `address` with `accept` as the Accept header (none: no header): the
/// answer's content type and body.
pub async fn scrape(address: SocketAddr, accept: Option<&str>) -> (String, String) {
    let mut request = reqwest::Client::new().get(format!("http://{address}/metrics"));
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    let response = request.send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    (content_type, response.text().await.unwrap())
}

/// The families of `body`, read by the strict parser of the format `content_type` names; a
/// body that parser refuses fails the test.
pub fn parse(content_type: &str, body: &str) -> BTreeMap<String, Family> {
    let script = match content_type {
        OPENMETRICS_TYPE => "tests/python/openmetrics.py",
        TEXT_TYPE => "tests/python/prometheus_text.py",
        other => panic!("content type {other}"),
    };
    let file = std::env::temp_dir().join(format!(
        "gpucloud-scrape-{}-{:?}.txt",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&file, body).unwrap();
    let output = std::process::Command::new(tools::python(repository_root()))
        .arg(repository_root().join(script))
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        output.status.success(),
        "{script}: {}\n{body}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Every family the tables of docs/operations.md's "Metrics" section name, as the parsers name
/// them (a counter without `_total`): the first table's with the `gpucloud_` prefix it leaves
/// out, the second's as written.
pub fn documented_families() -> Vec<String> {
    let docs = std::fs::read_to_string(repository_root().join("docs/operations.md")).unwrap();
    let section = docs
        .split("\n## Metrics\n")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .expect("a Metrics section");
    let mut families = Vec::new();
    let mut table = 0;
    let mut in_table = false;
    for line in section.lines() {
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if !in_table {
            in_table = true;
            table += 1;
            continue; // the header
        }
        let first = line.split('|').nth(1).unwrap_or_default();
        for name in first.split('`').skip(1).step_by(2) {
            let name = name.strip_suffix("_total").unwrap_or(name);
            families.push(if table == 1 {
                format!("gpucloud_{name}")
            } else {
                name.to_string()
            });
        }
    }
    assert!(families.len() > 40, "{families:?}");
    families
}
