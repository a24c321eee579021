//! corelay's cluster foundation (issue 49). The server's control thread
//! uses the directory and the member snapshots (`--cluster`: it announces
//! the node, redirects joins, builds rosters across nodes and shows the
//! view); its shards use the relay envelope for media between nodes:
//!
//! - [`relay`]: the envelope of node-to-node relay datagrams (AEAD under
//!   per-direction keys derived from the cluster secret, replay window).
//!   Meant for the packet path: it never allocates, blocks or panics there.
//! - [`directory`]: the node directory on a NATS JetStream KV bucket
//!   (heartbeats, a watched view with local expiry, a change feed,
//!   reconciliation after a lost NATS). The control thread's only: never
//!   on the packet path.
//! - [`members`]: each node's members, by room, published on a NATS
//!   subject as a whole every second and on change. The control thread's
//!   only.
pub mod directory;
pub mod members;
pub mod relay;
