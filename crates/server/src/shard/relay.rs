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
//! Loss on the hop is repaired here, below the engine, for media and
//! control alike: the receiver sees a gap in a sender's sequence numbers
//! and at once asks for those datagrams ([`NACK`]); the sender keeps its
//! last [`KEEP`] sealed datagrams per peer and sends the asked ones again,
//! as they were (the receiver's replay window takes a sequence number it
//! never had). Why here and not from the subscriber's node's own history:
//! a packet lost on the hop never reached that history, and the gap is
//! seen a hop earlier than a subscriber's NACK would show it. What a
//! resend cannot repair (lost twice, or older than [`KEEP`]) is left to the
//! subscribers' own NACKs and keyframe requests; control state is re-sent
//! by the engine anyway (demand every second, keyframe requests while a
//! slot waits). A ping every second per peer measures each link's RTT.
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
use corelay_plane::{RelayLink, RelayNode};
use tokio::net::UdpSocket;

/// The largest relay datagram read (a media packet plus the wire header and
/// the envelope fit in far less).
const MAX_DATAGRAM: usize = 2048;
/// Sealed datagrams kept per peer for resends (about 100 ms of a busy
/// room's media across the hop; at most ~300 KiB per peer).
pub const KEEP: usize = 256;
/// The first byte of the relay's own frames (a peer message's first byte
/// is its wire type, below this).
const NACK: u8 = 0x80;
const PING: u8 = 0x81;
const PONG: u8 = 0x82;
/// Sequence numbers asked for at most, per gap (a longer gap is an outage:
/// what is that old is not worth resending).
const MAX_NACK: u64 = 64;
/// How often each peer is pinged.
const PING_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
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

/// Sends at once, non-blocking, past tokio's readiness (the loop waits on
/// the relay socket for reading only; a full send buffer is an error here,
/// counted by the caller, never a wait).
fn send_to(socket: &UdpSocket, bytes: &[u8], to: SocketAddr) -> std::io::Result<usize> {
    socket2::SockRef::from(socket).send_to(bytes, &to.into())
}

/// The name a shard's keys are derived for: `node#shard`.
fn shard_name(node_id: &str, shard: usize) -> String {
    format!("{node_id}#{shard}")
}

struct Peer {
    addr: SocketAddr,
    /// Its name ([`shard_name`]): the key of [`Relay::sealers`].
    name: String,
    /// The last [`KEEP`] sealed datagrams sent to it, by sequence number.
    sent: std::collections::VecDeque<(u64, Vec<u8>)>,
    /// The highest sequence number taken from it (this epoch of it).
    highest: Option<u64>,
    figures: RelayLink,
    pinged: Option<Instant>,
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
    /// What ping times count from (this shard's own clock).
    clock0: Instant,
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
            clock0: Instant::now(),
            counters: RelayCounters::default(),
        }
    }

    /// Takes the cluster's other nodes, whole: peers that are gone are
    /// forgotten (their datagrams are from an unknown sender from now on).
    pub fn set_nodes(&mut self, nodes: &[RelayNode]) {
        let mut old = std::mem::take(&mut self.peers);
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
                let addr = SocketAddr::new(node.relay_addr.ip(), port);
                let restarted = self.registered.get(&name).is_some_and(|e| *e != node.epoch);
                keep.insert(name.clone(), node.epoch);
                match old.remove(&id) {
                    // The same peer: its history and figures stay.
                    Some(mut p) if p.name == name && !restarted => {
                        p.addr = addr;
                        self.peers.insert(id, p);
                    }
                    _ => {
                        self.peers.insert(
                            id,
                            Peer {
                                addr,
                                name,
                                sent: std::collections::VecDeque::new(),
                                highest: None,
                                figures: RelayLink::default(),
                                pinged: None,
                            },
                        );
                    }
                }
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
        self.plain.clear();
        if wire::encode(msg, &mut self.plain).is_none() || !self.send_plain(socket, to, true) {
            self.counters.tx_dropped += 1;
        }
    }

    /// A relay frame of our own (not a peer message, in `plain`) to `to`;
    /// not kept for a resend.
    fn send_frame(&mut self, socket: &UdpSocket, to: ShardId) {
        self.send_plain(socket, to, false);
    }

    /// Seals what `plain` holds for peer `to` and sends it; `keep`: kept
    /// for a resend. False when `to` is no peer.
    fn send_plain(&mut self, socket: &UdpSocket, to: ShardId, keep: bool) -> bool {
        let Some(peer) = self.peers.get_mut(&to) else {
            return false;
        };
        let Some(sealer) = self.sealers.get_mut(&peer.name) else {
            return false;
        };
        let (sealed, counters) = (&mut self.sealed, &mut self.counters);
        let seq = sealer.next_seq();
        if sealer.seal(&self.plain, sealed).is_err() {
            counters.tx_dropped += 1;
            return true;
        }
        match send_to(socket, sealed, peer.addr) {
            Ok(_) => {
                counters.tx_packets += 1;
                counters.tx_bytes += sealed.len() as u64;
                peer.figures.tx_packets += 1;
            }
            Err(e) => {
                tracing::trace!(peer = %peer.name, "relay send: {e}");
                counters.tx_dropped += 1;
            }
        }
        if keep {
            // Kept even when the kernel refused it: the peer sees the gap
            // and asks. The oldest buffer is reused.
            let mut buf = if peer.sent.len() >= KEEP {
                peer.sent.pop_front().map(|(_, b)| b).unwrap_or_default()
            } else {
                Vec::new()
            };
            buf.clear();
            buf.extend_from_slice(sealed);
            peer.sent.push_back((seq, buf));
        }
        true
    }

    /// Pings the peers not pinged for [`PING_EVERY`] (their RTT); call
    /// now and then (each report).
    pub fn ping(&mut self, socket: &UdpSocket, now: Instant) {
        let epoch = self.clock0;
        let due: Vec<ShardId> = self
            .peers
            .iter()
            .filter(|(_, p)| {
                p.pinged
                    .is_none_or(|t| now.saturating_duration_since(t) >= PING_EVERY)
            })
            .map(|(id, _)| *id)
            .collect();
        let t = u64::try_from(now.saturating_duration_since(epoch).as_micros()).unwrap_or(u64::MAX);
        for id in due {
            if let Some(p) = self.peers.get_mut(&id) {
                p.pinged = Some(now);
            }
            self.plain.clear();
            self.plain.push(PING);
            self.plain.extend_from_slice(&t.to_be_bytes());
            self.send_frame(socket, id);
        }
    }

    /// Each link's figures, by peer.
    pub fn links(&self) -> Vec<RelayLink> {
        let mut v: Vec<RelayLink> = self
            .peers
            .iter()
            .map(|(id, p)| RelayLink {
                peer: *id,
                ..p.figures
            })
            .collect();
        v.sort_by_key(|l| l.peer);
        v
    }

    /// A relay frame from `from` (see [`NACK`]): answered or taken.
    fn frame(&mut self, socket: &UdpSocket, from: ShardId, frame: &[u8], now: Instant) {
        let epoch = self.clock0;
        let Some((&kind, body)) = frame.split_first() else {
            return;
        };
        match kind {
            NACK => {
                let Some(peer) = self.peers.get_mut(&from) else {
                    return;
                };
                let Some(first) = peer.sent.front().map(|(s, _)| *s) else {
                    return;
                };
                for chunk in body.chunks_exact(8).take(MAX_NACK as usize) {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(chunk);
                    let seq = u64::from_be_bytes(b);
                    let Some(i) = seq.checked_sub(first).and_then(|i| usize::try_from(i).ok())
                    else {
                        continue;
                    };
                    if let Some((s, bytes)) = peer.sent.get(i)
                        && *s == seq
                        && send_to(socket, bytes, peer.addr).is_ok()
                    {
                        peer.figures.resent += 1;
                    }
                }
            }
            PING => {
                self.plain.clear();
                self.plain.push(PONG);
                self.plain.extend_from_slice(body);
                self.send_frame(socket, from);
            }
            PONG => {
                if let (Some(p), Ok(t)) = (self.peers.get_mut(&from), <[u8; 8]>::try_from(body)) {
                    let sent = u64::from_be_bytes(t);
                    let now_us = u64::try_from(now.saturating_duration_since(epoch).as_micros())
                        .unwrap_or(u64::MAX);
                    p.figures.rtt_us = now_us.saturating_sub(sent);
                }
            }
            _ => self.counters.rx_bad += 1,
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
            let seq = opened.seq;
            // A gap: ask for what is missing, at once.
            let mut missing = None;
            if let Some(p) = self.peers.get_mut(&from) {
                p.figures.rx_packets += 1;
                match p.highest {
                    Some(h) if seq > h + 1 => {
                        let gap = seq - h - 1;
                        p.figures.lost += gap;
                        missing = Some((seq - gap.min(MAX_NACK), seq));
                        p.highest = Some(seq);
                    }
                    Some(h) if seq <= h => {}
                    _ => p.highest = Some(seq),
                }
            }
            let payload = opened.payload;
            if payload.first().is_some_and(|b| *b >= NACK) {
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += len as u64;
                let frame = payload.to_vec();
                self.frame(socket, from, &frame, now);
            } else {
                match wire::decode(payload, from, now, None) {
                    Ok(msg) => {
                        self.counters.rx_packets += 1;
                        self.counters.rx_bytes += len as u64;
                        deliver(msg);
                    }
                    Err(_) => self.counters.rx_bad += 1,
                }
            }
            if let Some((lo, hi)) = missing {
                self.plain.clear();
                self.plain.push(NACK);
                for s in lo..hi {
                    self.plain.extend_from_slice(&s.to_be_bytes());
                }
                self.send_frame(socket, from);
            }
        }
        n
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use corelay_core::ids::{LayerKey, ParticipantId, TrackKey};

    fn secret() -> Arc<ClusterSecret> {
        Arc::new(ClusterSecret::from_bytes(b"relay-test-secret-0123456789".to_vec()).unwrap())
    }

    fn node(slot: usize, id: &str, addr: SocketAddr) -> RelayNode {
        RelayNode {
            slot,
            node_id: id.to_owned(),
            epoch: 7,
            relay_addr: addr,
            shards: 1,
        }
    }

    fn keyframe(layer: u8) -> PeerMsg {
        PeerMsg::KeyframeRequest {
            key: LayerKey {
                track: TrackKey {
                    participant: ParticipantId(1),
                    mid: str0m::media::Mid::from("0"),
                },
                layer,
            },
        }
    }

    /// Reads what `relay` gets on `socket` until `want` messages arrived or
    /// a second passed; the layers of the keyframe requests, in order.
    async fn read(relay: &mut Relay, socket: &UdpSocket, want: usize) -> Vec<u8> {
        let mut got = Vec::new();
        let deadline = Instant::now() + std::time::Duration::from_secs(1);
        while got.len() < want && Instant::now() < deadline {
            let _ =
                tokio::time::timeout(std::time::Duration::from_millis(50), socket.readable()).await;
            relay.receive(socket, Instant::now(), |m| {
                if let PeerMsg::KeyframeRequest { key } = m {
                    got.push(key.layer);
                }
            });
        }
        got
    }

    #[test]
    fn a_datagram_lost_on_the_hop_is_asked_for_and_sent_again() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let sa = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let sb = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let mut a = Relay::new(secret(), "a", 0, 7);
            let mut b = Relay::new(secret(), "b", 0, 7);
            a.set_nodes(&[node(0, "b", sb.local_addr().unwrap())]);
            b.set_nodes(&[node(0, "a", sa.local_addr().unwrap())]);
            let to_b = ShardId::remote(0, 0).unwrap();
            a.send(&sa, to_b, &keyframe(1));
            // The second is sealed and kept, but goes nowhere: lost.
            let real = a.peers.get(&to_b).unwrap().addr;
            a.peers.get_mut(&to_b).unwrap().addr = "127.0.0.1:9".parse().unwrap();
            a.send(&sa, to_b, &keyframe(2));
            a.peers.get_mut(&to_b).unwrap().addr = real;
            a.send(&sa, to_b, &keyframe(3));
            // b sees 1 and 3, finds 2 missing and asks; a answers.
            let first = read(&mut b, &sb, 2).await;
            assert_eq!(first, [1, 3]);
            let mut nothing = read(&mut a, &sa, 1).await;
            assert!(nothing.is_empty());
            nothing = read(&mut b, &sb, 1).await;
            assert_eq!(nothing, [2], "the lost one, sent again");
            let (la, lb) = (a.links()[0], b.links()[0]);
            assert_eq!((lb.lost, la.resent), (1, 1));
            assert_eq!(b.counters.rx_replayed, 0);
            // A forged datagram (another secret) changes nothing.
            let mut stranger = Relay::new(
                Arc::new(ClusterSecret::from_bytes(b"another-secret-0123456789".to_vec()).unwrap()),
                "a",
                0,
                7,
            );
            stranger.set_nodes(&[node(0, "b", sb.local_addr().unwrap())]);
            let s3 = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let refused = |c: &RelayCounters| c.rx_bad + c.rx_replayed + c.rx_unknown;
            let before = refused(&b.counters);
            for _ in 0..5 {
                stranger.send(&s3, to_b, &keyframe(9));
            }
            assert!(read(&mut b, &sb, 1).await.is_empty());
            assert_eq!(refused(&b.counters), before + 5);
            // Pings measure the link.
            a.ping(&sa, Instant::now());
            read(&mut b, &sb, 1).await;
            read(&mut a, &sa, 1).await;
            assert!(a.links()[0].rtt_us > 0);
        });
    }
}
