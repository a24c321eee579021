//! corelay's cluster foundation (issue 49). The server uses the directory
//! (`--cluster`: its control thread announces the node, redirects joins and
//! shows the view); the relay is not used yet (media does not cross nodes):
//!
//! - [`relay`]: the envelope of node-to-node relay datagrams (AEAD under
//!   per-direction keys derived from the cluster secret, replay window).
//!   Meant for the packet path: it never allocates, blocks or panics there.
//! - [`directory`]: the node directory on a NATS JetStream KV bucket
//!   (heartbeats, a watched view with local expiry, a change feed,
//!   reconciliation after a lost NATS). The control thread's only: never
//!   on the packet path.
pub mod directory;
pub mod relay;
