//! The command-line tools besides `run`: `plan` (what applying manifests would do),
//! `release` (letting go of every object for good) and the manifests they read.
//!
//! May use: [`crate::kinds`] (the registry, GpuInstance's placement), [`crate::flow`],
//! [`crate::accounts`] and [`crate::runtime`]; the operator's wiring never uses them.

pub mod manifests;
pub mod plan;
pub mod release;
