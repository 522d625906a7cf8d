//! Reading manifests: files, directories (recursively, `*.yaml`, `*.yml` and `*.json` but
//! kustomize's own files, in name order) and standard input (`-`), each a stream of YAML
//! documents. [`files`] and [`documents`] are shared with the sandbox's `dev --apply`; `plan`
//! reads through [`read`], which also expands `kind: List` into its items.

use crate::tools::plan::Error;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One object of the input, with where it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// `PATH, document N` (`N` from 1), and `, items[I]` for an item of a `List`.
    pub origin: String,
    pub value: serde_json::Value,
}

/// The documents of every path in order (`-` is standard input, read once from `stdin`).
pub fn read(paths: &[String], stdin: &mut dyn Read) -> Result<Vec<Document>, Error> {
    let mut documents = Vec::new();
    for path in paths {
        if path == "-" {
            let mut text = String::new();
            stdin
                .read_to_string(&mut text)
                .map_err(|error| Error::Read {
                    path: "standard input".into(),
                    message: error.to_string(),
                })?;
            documents.extend(parse("standard input", &text)?);
            continue;
        }
        let files = files(Path::new(path)).map_err(|(path, error)| Error::Read {
            path: path.display().to_string(),
            message: error.to_string(),
        })?;
        for file in files {
            let shown = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|error| Error::Read {
                path: shown.clone(),
                message: error.to_string(),
            })?;
            documents.extend(parse(&shown, &text)?);
        }
    }
    Ok(documents)
}

/// The manifest files of `path`: itself when it is a file; under a directory, recursively in
/// name order, its YAML and JSON files except kustomize's own configuration (rendered by
/// kustomize, not an object). An error names the path that could not be read.
pub fn files(path: &Path) -> Result<Vec<PathBuf>, (PathBuf, std::io::Error)> {
    let mut out = Vec::new();
    collect(path, &mut out)?;
    Ok(out)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), (PathBuf, std::io::Error)> {
    let unreadable = |error| (path.to_path_buf(), error);
    if !std::fs::metadata(path).map_err(unreadable)?.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(path).map_err(unreadable)? {
        entries.push(entry.map_err(unreadable)?.path());
    }
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect(&entry, out)?;
        } else if is_manifest(&entry) {
            out.push(entry);
        }
    }
    Ok(())
}

fn is_manifest(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    matches!(extension, "yaml" | "yml" | "json")
        && !matches!(
            name,
            "kustomization.yaml" | "kustomization.yml" | "Kustomization"
        )
}

/// The documents of a YAML stream (a JSON document is one), numbered from 1 as a person
/// reads the file, each as JSON; empty ones (comments only) skipped, and so is text before the
/// first `---` that holds no content. The first that does not parse ends the list. Each
/// document is read on its own (so its number is known) with its lines where they are in the
/// file (so an error's line is the file's).
pub fn documents(text: &str) -> Vec<(usize, Result<serde_json::Value, serde_saphyr::Error>)> {
    let mut out = Vec::new();
    for (position, (first_line, source)) in split_documents(text).into_iter().enumerate() {
        if !has_content(&source) {
            continue;
        }
        let placed = format!("{}{source}", "\n".repeat(first_line));
        // Without the source snippet: the error is reported on one line, after the file and
        // the document it names.
        let options = serde_saphyr::options! { with_snippet: false };
        match serde_saphyr::from_str_with_options::<serde_json::Value>(&placed, options) {
            Ok(serde_json::Value::Null) => {}
            Ok(value) => out.push((position + 1, Ok(value))),
            Err(error) => {
                out.push((position + 1, Err(error)));
                break;
            }
        }
    }
    out
}

/// The documents of a stream: each one's first line (from 0) and its text. A document starts
/// after a `---` line (the marker may carry the document's first node, `--- {a: 1}`) and ends
/// at the next one or at a `...` line; text before the first marker is a document of its own
/// when it has content.
fn split_documents(text: &str) -> Vec<(usize, String)> {
    let mut documents: Vec<(usize, String)> = Vec::new();
    let mut current: Option<(usize, String)> = Some((0, String::new()));
    let mut before_first_marker = true;
    for (number, line) in text.lines().enumerate() {
        let marker = line == "---" || line.starts_with("--- ") || line.starts_with("---\t");
        if marker {
            if let Some(document) = current.take()
                && (!before_first_marker || has_content(&document.1))
            {
                documents.push(document);
            }
            before_first_marker = false;
            // The rest of the marker's line, at its column, keeps the line count.
            current = Some((number, format!("   {}\n", &line[3..])));
        } else if line == "..." || line.starts_with("... ") {
            if let Some(document) = current.take()
                && (!before_first_marker || has_content(&document.1))
            {
                documents.push(document);
            }
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            // Content after `...` without a new `---`: a document of its own, as YAML reads it.
            current = Some((number, format!("{line}\n")));
        }
    }
    if let Some(document) = current
        && (!before_first_marker || has_content(&document.1))
    {
        documents.push(document);
    }
    documents
}

/// Whether a document's text holds anything but blank lines, comments and directives.
fn has_content(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        !line.is_empty() && !line.starts_with('#') && !line.starts_with('%')
    })
}

/// The objects of one file's text, each `List` expanded.
pub fn parse(path: &str, text: &str) -> Result<Vec<Document>, Error> {
    let mut out = Vec::new();
    for (index, value) in documents(text) {
        let origin = format!("{path}, document {index}");
        match value {
            Err(error) => {
                return Err(Error::Parse {
                    origin,
                    message: error.to_string(),
                });
            }
            Ok(value) if value["kind"] == "List" => {
                let items = value["items"].as_array().cloned().unwrap_or_default();
                for (i, item) in items.into_iter().enumerate() {
                    out.push(Document {
                        origin: format!("{origin}, items[{i}]"),
                        value: item,
                    });
                }
            }
            Ok(value @ serde_json::Value::Object(_)) => out.push(Document { origin, value }),
            Ok(_) => {
                return Err(Error::Parse {
                    origin,
                    message: "not an object (a manifest is a mapping with apiVersion and kind)"
                        .into(),
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn documents_are_numbered_as_written() {
        let text = "# a comment\n%YAML 1.2\n---\na: 1\n---\n# empty\n--- {b: 2}\n...\n---\n- c\n";
        let read: Vec<(usize, serde_json::Value)> = documents(text)
            .into_iter()
            .map(|(n, v)| (n, v.unwrap()))
            .collect();
        assert_eq!(
            read,
            [
                (1, json!({"a": 1})),
                (3, json!({"b": 2})),
                (4, json!(["c"]))
            ]
        );
        // Content before the first marker is the first document; JSON is YAML.
        let read = documents("a: 1\n---\nb: 2\n");
        assert_eq!(read.len(), 2);
        assert_eq!(read[1].0, 2);
        let json = documents(r#"{"apiVersion": "v1", "kind": "ConfigMap"}"#);
        assert_eq!(json[0].1.as_ref().unwrap()["kind"], "ConfigMap");
    }

    #[test]
    fn an_error_names_the_file_line_and_ends_the_list() {
        let read = documents("a: 1\n---\nb: 2\n---\nkind: [unclosed\n---\nc: 3\n");
        assert_eq!(read.len(), 3);
        let (number, error) = &read[2];
        assert_eq!(*number, 3);
        let error = error.as_ref().unwrap_err();
        let location = error.location().expect("a location");
        assert!(
            (5..=6).contains(&location.line()),
            "line {} of the file: {error}",
            location.line()
        );
        let message = error.to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(message.contains("line 5"), "{message}");
    }
}
