//! Reading the manifests a plan is made of: files, directories (recursively, `*.yaml`, `*.yml`
//! and `*.json`, in name order) and standard input (`-`), each a stream of YAML documents,
//! with `kind: List` expanded into its items.

use super::Error;
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
            documents.extend(parse("standard input", &text, false)?);
            continue;
        }
        for file in files(Path::new(path))? {
            let shown = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|error| Error::Read {
                path: shown.clone(),
                message: error.to_string(),
            })?;
            let json = file.extension().is_some_and(|e| e == "json");
            documents.extend(parse(&shown, &text, json)?);
        }
    }
    Ok(documents)
}

/// `path` itself when it is a file; the manifests under it, sorted, when it is a directory.
fn files(path: &Path) -> Result<Vec<PathBuf>, Error> {
    let metadata = std::fs::metadata(path).map_err(|error| Error::Read {
        path: path.display().to_string(),
        message: error.to_string(),
    })?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut found = Vec::new();
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|error| Error::Read {
            path: dir.display().to_string(),
            message: error.to_string(),
        })?;
        for entry in entries {
            let entry = entry.map_err(|error| Error::Read {
                path: dir.display().to_string(),
                message: error.to_string(),
            })?;
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The documents of one file's text: a JSON document, or a stream of YAML documents (empty
/// ones skipped), each `List` expanded.
pub fn parse(path: &str, text: &str, json: bool) -> Result<Vec<Document>, Error> {
    let values: Vec<(usize, serde_json::Value)> = if json {
        let value = serde_json::from_str(text).map_err(|error| Error::Parse {
            origin: format!("{path}, document 1"),
            message: error.to_string(),
        })?;
        vec![(1, value)]
    } else {
        let mut values = Vec::new();
        for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let value = serde_json::Value::deserialize(document).map_err(|error| Error::Parse {
                origin: format!("{path}, document {}", index + 1),
                message: error.to_string(),
            })?;
            values.push((index + 1, value));
        }
        values
    };
    let mut documents = Vec::new();
    for (index, value) in values {
        let origin = format!("{path}, document {index}");
        match value {
            serde_json::Value::Null => {}
            serde_json::Value::Object(_) if value["kind"] == "List" => {
                let items = value["items"].as_array().cloned().unwrap_or_default();
                for (i, item) in items.into_iter().enumerate() {
                    documents.push(Document {
                        origin: format!("{origin}, items[{i}]"),
                        value: item,
                    });
                }
            }
            serde_json::Value::Object(_) => documents.push(Document { origin, value }),
            _ => {
                return Err(Error::Parse {
                    origin,
                    message: "not an object (a manifest is a mapping with apiVersion and kind)"
                        .into(),
                });
            }
        }
    }
    Ok(documents)
}
