//! One controller per kind, each with its own parts (a GpuInstance's placement and final
//! snapshot, a pool's replicas, a Budget's reservations), and the registry that lists the
//! managed kinds once.
//!
//! May use: [`crate::flow`], [`crate::accounts`] and [`crate::runtime`]. A kind may read
//! another kind's public items (a Firewall reads the machines it attaches to); the flow
//! never reads a kind.

pub(crate) mod budget;
pub(crate) mod firewall;
pub mod gpu_instance;
pub mod gpu_instance_pool;
pub(crate) mod gpu_offering;
pub mod gpu_policy;
pub(crate) mod image;
pub mod registry;
pub mod snapshot;
pub(crate) mod ssh_key;
pub mod volume;
