//! In-memory simulator of the Cloud GPU Compute Service API.
