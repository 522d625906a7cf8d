//! The API server driven by the installed kubectl binary, linked into one test binary.

mod kubectl_support;

mod kubectl_admission;
mod kubectl_conformance;
mod kubectl_imperative;
mod kubectl_rbac;
mod kubectl_scale;
