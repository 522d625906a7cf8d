//! Reading manifests: files, directories (recursively, `*.yaml`, `*.yml` and `*.json` but
//! kustomize's own files, in name order) and standard input (`-`), each a stream of YAML
//! documents. [`files`] and [`documents`] are shared with the sandbox's `dev --apply`; `plan`
//! reads through [`read`], which also expands `kind: List` into its items.

use crate::tools::plan::Error;
use serde::Deserialize;
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
/// reads the file, each as JSON; empty ones (comments only) skipped. The first that does not
/// parse ends the list: the stream cannot be read past it.
pub fn documents(text: &str) -> Vec<(usize, Result<serde_json::Value, serde_yaml::Error>)> {
    let mut out = Vec::new();
    for (position, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        match serde_json::Value::deserialize(document) {
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
