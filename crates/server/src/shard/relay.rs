//! A shard's relay socket (`--cluster`): the mesh to other nodes' shards.
//!
//! Shard `i` of a node binds the node's `--relay-addr` port + `i`. A message
//! for another node's shard ([`ShardId::remote`]) leaves here as one
//! datagram: the [`wire`] form of the [`PeerMsg`], sealed with the key of
//! this shard → that shard (`corelay_cluster::relay`: AES-128-GCM, a key
//! per direction, shard pair and process epoch; a sequence number that is
//! never reused under a key, and a replay window on arrival). A datagram
//! that arrives is opened, read and handed to the engine as if a peer shard
//! of this node had sent it: the packet crosses nodes once, straight from
//! the publisher's shard to the subscriber's, then fans out there.
//!
//! Loss: media lost on the hop is repaired as a subscriber's loss is (its
//! NACK is answered from the own egress's history of what was forwarded to
//! it, on its own node); control state is re-sent (demand every second,
//! keyframe requests while a slot waits), never acknowledged.
//!
//! A datagram from a source that is not a registered shard of the cluster,
//! with a bad tag, replayed, too old, or that does not read as a message is
//! dropped and counted ([`RelayCounters`]), and changes nothing.
//!
//! Must not: decide what a message means (the engine does), block (a full
//! send buffer drops and counts), or reuse a sealer's sequence numbers: a
//! peer's sealer lives as long as the process, whatever its node does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use corelay_cluster::relay::{ClusterSecret, OpenError, Opener, Sealer, SenderTag};
use corelay_core::metrics::Counters;
use corelay_core::{PeerMsg, ShardId, wire};
use corelay_plane::RelayNode;
use tokio::net::UdpSocket;

/// The largest relay datagram read (a media packet plus the wire header and
/// the envelope fit in far less).
const MAX_DATAGRAM: usize = 2048;
/// Datagrams read per wake-up.
pub const MAX_READS_PER_WAKE: usize = 256;

/// What the relay counts, copied into each report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayCounters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// From no registered shard of the cluster (or of another epoch).
    pub rx_unknown: u64,
    /// A bad tag, a malformed envelope, or bytes that are not a message.
    pub rx_bad: u64,
    /// Replayed or older than the replay window.
    pub rx_replayed: u64,
    /// The kernel refused it (send buffer full), or no peer by that id.
    pub tx_dropped: u64,
}

impl RelayCounters {
    /// `c` with these in their fields.
    pub fn add_to(&self, mut c: Counters) -> Counters {
        c.relay_tx_packets += self.tx_packets;
        c.relay_tx_bytes += self.tx_bytes;
        c.relay_rx_packets += self.rx_packets;
        c.relay_rx_bytes += self.rx_bytes;
        c.relay_dropped_unknown += self.rx_unknown;
        c.relay_dropped_bad += self.rx_bad;
        c.relay_dropped_replayed += self.rx_replayed;
        c.relay_dropped_send += self.tx_dropped;
        c
    }
}

/// The name a shard's keys are derived for: `node#shard`.
fn shard_name(node_id: &str, shard: usize) -> String {
    format!("{node_id}#{shard}")
}

struct Peer {
    addr: SocketAddr,
    /// Its name ([`shard_name`]): the key of [`Relay::sealers`].
    name: String,
}

pub struct Relay {
    secret: Arc<ClusterSecret>,
    /// This shard's name ([`shard_name`]) and its node's epoch.
    me: String,
    epoch: u64,
    opener: Opener,
    /// Who a sender tag is: the peer id its messages come from.
    senders: HashMap<SenderTag, ShardId>,
    peers: HashMap<ShardId, Peer>,
    /// By peer name, for the life of the process (see the module's doc).
    sealers: HashMap<String, Sealer>,
    /// The registered senders, by name, with their epoch.
    registered: HashMap<String, u64>,
    plain: Vec<u8>,
    sealed: Vec<u8>,
    read: Vec<u8>,
    pub counters: RelayCounters,
}

impl Relay {
    pub fn new(secret: Arc<ClusterSecret>, node_id: &str, shard: usize, epoch: u64) -> Self {
        let me = shard_name(node_id, shard);
        let opener = Opener::new(&secret, &me);
        Relay {
            secret,
            me,
            epoch,
            opener,
            senders: HashMap::new(),
            peers: HashMap::new(),
            sealers: HashMap::new(),
            registered: HashMap::new(),
            plain: Vec::with_capacity(MAX_DATAGRAM),
            sealed: Vec::with_capacity(MAX_DATAGRAM),
            read: vec![0; MAX_DATAGRAM],
            counters: RelayCounters::default(),
        }
    }

    /// Takes the cluster's other nodes, whole: peers that are gone are
    /// forgotten (their datagrams are from an unknown sender from now on).
    pub fn set_nodes(&mut self, nodes: &[RelayNode]) {
        self.peers.clear();
        self.senders.clear();
        let mut keep: HashMap<String, u64> = HashMap::new();
        for node in nodes {
            for i in 0..node.shards {
                let Some(id) = ShardId::remote(node.slot, i) else {
                    continue;
                };
                let Some(port) = u16::try_from(i)
                    .ok()
                    .and_then(|i| node.relay_addr.port().checked_add(i))
                else {
                    continue;
                };
                let name = shard_name(&node.node_id, i);
                if !self.sealers.contains_key(&name) {
                    match Sealer::new(&self.secret, self.epoch, &self.me, &name) {
                        Ok(s) => {
                            self.sealers.insert(name.clone(), s);
                        }
                        Err(_) => continue,
                    }
                }
                match self.opener.add_sender(&name, node.epoch) {
                    Ok(tag) => {
                        self.senders.insert(tag, id);
                    }
                    Err(e) => {
                        tracing::warn!(peer = %name, "relay: cannot take this peer: {e}");
                        continue;
                    }
                }
                keep.insert(name.clone(), node.epoch);
                self.peers.insert(
                    id,
                    Peer {
                        addr: SocketAddr::new(node.relay_addr.ip(), port),
                        name,
                    },
                );
            }
        }
        for name in self.registered.keys() {
            if !keep.contains_key(name) {
                self.opener.remove_sender(name);
            }
        }
        self.registered = keep;
    }

    /// Sends `msg` to another node's shard `to`. Never waits: a full send
    /// buffer or an unknown peer drops it (counted).
    pub fn send(&mut self, socket: &UdpSocket, to: ShardId, msg: &PeerMsg) {
        let Some(peer) = self.peers.get(&to) else {
            self.counters.tx_dropped += 1;
            return;
        };
        let Some(sealer) = self.sealers.get_mut(&peer.name) else {
            self.counters.tx_dropped += 1;
            return;
        };
        self.plain.clear();
        if wire::encode(msg, &mut self.plain).is_none()
            || sealer.seal(&self.plain, &mut self.sealed).is_err()
        {
            self.counters.tx_dropped += 1;
            return;
        }
        match socket.try_send_to(&self.sealed, peer.addr) {
            Ok(_) => {
                self.counters.tx_packets += 1;
                self.counters.tx_bytes += self.sealed.len() as u64;
            }
            Err(e) => {
                tracing::trace!(peer = %peer.name, "relay send: {e}");
                self.counters.tx_dropped += 1;
            }
        }
    }

    /// Reads what waits on the socket (up to [`MAX_READS_PER_WAKE`]) and
    /// hands each genuine message to `deliver`. Returns how many datagrams
    /// it read.
    pub fn receive(
        &mut self,
        socket: &UdpSocket,
        now: Instant,
        mut deliver: impl FnMut(PeerMsg),
    ) -> usize {
        let mut n = 0;
        while n < MAX_READS_PER_WAKE {
            let len = match socket.try_recv_from(&mut self.read) {
                Ok((len, _from)) => len,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // ICMP errors (a peer's port closed) concern one peer.
                    tracing::trace!("relay recv: {e}");
                    n += 1;
                    continue;
                }
            };
            n += 1;
            let Some(datagram) = self.read.get_mut(..len) else {
                continue;
            };
            let opened = match self.opener.open(datagram) {
                Ok(o) => o,
                Err(OpenError::UnknownSender) => {
                    self.counters.rx_unknown += 1;
                    continue;
                }
                Err(OpenError::Replayed | OpenError::TooOld) => {
                    self.counters.rx_replayed += 1;
                    continue;
                }
                Err(_) => {
                    self.counters.rx_bad += 1;
                    continue;
                }
            };
            let Some(&from) = self.senders.get(&opened.sender) else {
                self.counters.rx_unknown += 1;
                continue;
            };
            match wire::decode(opened.payload, from, now, None) {
                Ok(msg) => {
                    self.counters.rx_packets += 1;
                    self.counters.rx_bytes += len as u64;
                    deliver(msg);
                }
                Err(_) => self.counters.rx_bad += 1,
            }
        }
        n
    }
}
