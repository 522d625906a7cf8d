//! The running operator: the `run` subcommand's flags (`cli`), one replica's leadership
//! (`replica`), and the wiring of every controller with its watches, observers and sweeps
//! (`run`).
//!
//! May use: everything below it ([`crate::kinds`], [`crate::flow`], [`crate::accounts`],
//! [`crate::runtime`]); nothing uses it but the binary.

pub mod cli;
pub mod replica;
pub mod run;
