//! corelay-sim: a deterministic simulation that tests the engine in
//! milliseconds. N sans-I/O [`corelay_client::Participant`]s (real str0m
//! clients: full ICE, DTLS, SRTP, SCTP) talk to one
//! [`Engine`](corelay_core::Engine) per shard over a simulated network
//! ([`net`]), all in virtual time: a start `Instant` plus advancing;
//! nothing sleeps and nothing reads the wall clock except to take the start
//! instant.
//!
//! Modules: [`driver`] is the one loop that drives engines (the virtual
//! clock, engine and client timers, delivery both ways, routing between
//! shards over [`mesh`]), generic over the clients ([`Endpoint`]): the
//! fuzz harness (crates/fuzz-harness) runs its str0m clients with it too.
//! [`Sim`] (module `sim`, feature `clients`, on by default) is a [`Driver`]
//! of corelay-client participants plus a tiny control plane that does what
//! the server's control thread does for joins, leaves, renegotiations and
//! shard events. [`Cluster`] (module `cluster`, feature `clients`) is two
//! or more such nodes on one clock, joined by a simulated relay (the wire
//! form of peer messages over links of the network model) and a simulated
//! member exchange between their directories. Without the feature the
//! crate is the driver, the network and the lanes only, and does not
//! depend on corelay-client.
//! Must not: touch engine internals (only `corelay_core`'s public API),
//! open sockets, spawn threads, or sleep.

#[cfg(feature = "clients")]
mod cluster;
pub mod driver;
pub mod mesh;
pub mod net;
#[cfg(feature = "clients")]
mod sim;

#[cfg(feature = "clients")]
pub use cluster::{Cluster, NODE_EXPIRY, RelayStats, SNAPSHOT_EVERY};
#[cfg(feature = "clients")]
pub use corelay_client;
pub use corelay_core;
pub use driver::{Driver, Endpoint, MIN_STEP, OnEvent, Shard};
pub use mesh::SimMesh;
pub use net::{DirStats, LinkParams, Net};
#[cfg(feature = "clients")]
pub use sim::{C, ControlEvent, Recorder, RxPacket, START_NS, Sim, SimClient};
