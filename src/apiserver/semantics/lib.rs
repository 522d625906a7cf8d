//! Kubernetes object semantics: structural schemas, defaulting, pruning, CEL rules and patch formats.
