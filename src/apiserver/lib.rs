//! Embedded Kubernetes API server for tests and the no-cluster sandbox.
//!
//! It speaks the Kubernetes REST protocol for the built-in kinds an operator and kubectl use
//! plus any CustomResourceDefinition created in it: discovery, CRUD, list and watch with
//! resourceVersion semantics, patches and server-side apply, finalizers, garbage collection,
//! the status subresource, validation against structural schemas, over HTTPS with bearer tokens.

pub mod auth;
pub mod builtin;
pub mod cli;
pub mod discovery;
pub mod gc;
pub mod handlers;
pub mod kubeconfig;
pub mod openapi;
pub mod registry;
pub mod selectors;
pub mod server;
pub mod status;
pub mod store;
pub mod table;
pub mod tls;
pub mod watch;

pub use registry::{PrinterColumn, Registry, ResourceInfo};
pub use server::{
    ApiServer, ApiServerConfig, ApiServerHandle, AppState, Error, RequestRecord, Settings,
};
pub use status::ApiError;
