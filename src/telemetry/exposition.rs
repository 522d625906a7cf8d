//! The two text formats `/metrics` answers in, chosen from the request's `Accept` header as
//! the Prometheus client libraries choose: OpenMetrics 1.0 when the scraper lists
//! `application/openmetrics-text` (Prometheus does, preferring it), the Prometheus text
//! format 0.0.4 otherwise (curl, older scrapers, anything that asks for `text/plain`).
//!
//! `prometheus-client` encodes OpenMetrics only; the 0.0.4 body is derived from it. The two
//! differ in the descriptor lines, not in the samples: a counter's `# TYPE` and `# HELP` name
//! the family with its `_total` suffix in 0.0.4 (the sample's name; without it a 0.0.4
//! parser reads the samples as untyped), `# UNIT` and `# EOF` do not exist there, and neither
//! do exemplars or `_created` samples.

/// A format `/metrics` answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text, ending in `# EOF`.
    OpenMetrics,
    /// The Prometheus text exposition format 0.0.4.
    PrometheusText,
}

impl Format {
    /// The format to answer a request carrying `accept` (its `Accept` header, if any) in:
    /// OpenMetrics when the header accepts `application/openmetrics-text` at least as much as
    /// the plain text format, 0.0.4 otherwise.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::PrometheusText;
        };
        let (mut openmetrics, mut text) = (0.0_f64, 0.0_f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let quality = parts
                .filter_map(|p| p.split_once('='))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
                .map_or(Some(1.0), |(_, q)| q.trim().parse::<f64>().ok())
                .filter(|q| (0.0..=1.0).contains(q))
                .unwrap_or(0.0);
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(quality),
                "text/plain" | "text/*" | "*/*" => text = text.max(quality),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::PrometheusText
        }
    }

    /// The `Content-Type` of a body in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The Prometheus text format 0.0.4 of an OpenMetrics text body (as `prometheus-client`
/// encodes it: each family's `# HELP`, then its `# TYPE`, then its samples).
pub fn prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // The family being copied: its OpenMetrics name and type.
    let mut family: (&str, &str) = ("", "");
    // A family's HELP comes before its TYPE, which decides the name both carry in 0.0.4.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.rsplit_once(' ').unwrap_or((rest, "unknown"));
            family = (name, kind);
            let (suffix, kind) = match kind {
                "counter" => ("_total", "counter"),
                "info" => ("_info", "gauge"),
                "gauge" | "histogram" | "summary" => ("", kind),
                "stateset" | "gaugehistogram" => ("", "gauge"),
                _ => ("", "untyped"),
            };
            if let Some((help_name, text)) = help.take().filter(|(n, _)| *n == name) {
                out.push_str(&format!("# HELP {help_name}{suffix} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name}{suffix} {kind}\n"));
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            // `# UNIT`, `# EOF`: OpenMetrics only.
            continue;
        }
        // An exemplar follows ` # {` on the sample's line.
        let sample = line.split_once(" # {").map_or(line, |(sample, _)| sample);
        let name_end = sample.find(['{', ' ']).unwrap_or(sample.len());
        let (name, kind) = family;
        if matches!(kind, "counter" | "histogram" | "summary")
            && sample[..name_end].strip_prefix(name) == Some("_created")
        {
            continue;
        }
        out.push_str(sample);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_when_asked_for() {
        for (accept, expected) in [
            (None, Format::PrometheusText),
            (Some("*/*"), Format::PrometheusText),
            (Some("text/plain;version=0.0.4"), Format::PrometheusText),
            (Some("application/json"), Format::PrometheusText),
            (
                Some("application/openmetrics-text; version=1.0.0"),
                Format::OpenMetrics,
            ),
            // Prometheus 2.x.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                Format::OpenMetrics,
            ),
            // Prometheus 3, protobuf first (not served).
            (
                Some(
                    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4,application/openmetrics-text;version=0.0.1;q=0.3,text/plain;version=1.0.0;q=0.2,text/plain;version=0.0.4;q=0.1,*/*;q=0.05",
                ),
                Format::OpenMetrics,
            ),
            (
                Some("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"),
                Format::PrometheusText,
            ),
            (
                Some("application/openmetrics-text;q=0"),
                Format::PrometheusText,
            ),
            (
                Some("application/openmetrics-text;q=nonsense"),
                Format::PrometheusText,
            ),
        ] {
            assert_eq!(Format::negotiate(accept), expected, "{accept:?}");
        }
    }

    #[test]
    fn counters_are_named_with_their_suffix_and_openmetrics_lines_dropped() {
        let openmetrics = "# HELP requests Requests.\n# TYPE requests counter\n\
            requests_total{code=\"200\"} 3\nrequests_created{code=\"200\"} 1.7e9\n\
            # HELP size_bytes Size.\n# TYPE size_bytes gauge\n# UNIT size_bytes bytes\n\
            size_bytes 12\n\
            # HELP latency_seconds Latency.\n# TYPE latency_seconds histogram\n\
            latency_seconds_bucket{le=\"+Inf\"} 1 # {trace_id=\"a\"} 0.5\n\
            latency_seconds_sum 0.5\nlatency_seconds_count 1\n\
            # HELP build Build.\n# TYPE build info\nbuild_info{version=\"1\"} 1\n# EOF\n";
        assert_eq!(
            prometheus_text(openmetrics),
            "# HELP requests_total Requests.\n# TYPE requests_total counter\n\
             requests_total{code=\"200\"} 3\n\
             # HELP size_bytes Size.\n# TYPE size_bytes gauge\nsize_bytes 12\n\
             # HELP latency_seconds Latency.\n# TYPE latency_seconds histogram\n\
             latency_seconds_bucket{le=\"+Inf\"} 1\n\
             latency_seconds_sum 0.5\nlatency_seconds_count 1\n\
             # HELP build_info Build.\n# TYPE build_info gauge\nbuild_info{version=\"1\"} 1\n"
        );
    }
}
