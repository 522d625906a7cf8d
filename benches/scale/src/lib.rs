//! Scale benchmark of the gpucloud operator.
//!
//! Runs the embedded API server, the cloud simulator and the operator as three processes of
//! the `gpucloud-operator` binary (so each one's memory and CPU time is its own), applies
//! thousands of `GpuInstance` objects, and measures convergence, settled traffic, the
//! latency of a new object's first reconcile, an operator restart and deletion against
//! lower bounds computed from what the simulator counted, and counts the operator's writes to
//! the API server per object. `--scenario pool` scales one `GpuInstancePool` 0 -> N -> 0
//! instead, against the same bounds; `--scenario tenants` spreads objects of every kind over
//! namespaces that share cloud accounts, each account judged against its own bound, restarts
//! the operator with every kind settled, and times new objects of quiet namespaces during one
//! namespace's burst.

pub mod api_counts;
pub mod args;
pub mod counters;
pub mod plot;
pub mod process;
pub mod report;
pub mod scenario;
pub mod tracker;
