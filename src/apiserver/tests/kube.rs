//! The API server driven by kube-rs, one module per topic, linked into a single test binary
//! (each binary carries the whole server and client; one keeps disk use and link time down).

mod kube_support;

mod kube_admission;
mod kube_apply;
mod kube_builtins;
mod kube_controller;
mod kube_crd;
mod kube_crud;
mod kube_errors;
mod kube_lifecycle;
mod kube_project_crds;
mod kube_rbac;
mod kube_requests;
mod kube_restart;
mod kube_scale;
mod kube_watch;
