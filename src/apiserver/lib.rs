//! Embedded Kubernetes API server for tests and the no-cluster sandbox.
