//! A cluster in virtual time ([`Cluster`]): two or three nodes, each a
//! [`Sim`] (its shards, its clients, its network to them, its control plane
//! with its own room [`Directory`](corelay_core::directory::Directory)),
//! on one clock, joined by a simulated relay and a simulated member
//! exchange, as the server joins them (docs/architecture.md, "Cluster";
//! crates/server/src/shard/relay.rs and control/cluster.rs).
//!
//! **The relay.** A peer message a shard addresses to another node's shard
//! ([`ShardId::remote`]`(slot, i)`: the slot is the sending node's name for
//! the other node) leaves its node at once, as its [`wire`] bytes, in one
//! datagram from the sending shard's relay address to the receiving
//! shard's, over the link of that ordered pair of nodes (a [`net`] link:
//! delay, jitter, loss, reordering, a bandwidth cap, a cut). On arrival the
//! bytes are decoded with the sender named as the receiving node names it
//! (its slot there) and handed to that shard's engine, as the server's
//! relay does. A datagram from a node the receiver has not heard of, or for
//! a node that vanished, is dropped and counted ([`RelayStats`]). The
//! envelope (AEAD, replay window) is `corelay_cluster`'s and is not
//! simulated: what crosses here is the wire form only.
//!
//! **The member exchange.** Every [`SNAPSHOT_EVERY`] of virtual time, and
//! at once when its members changed, each node publishes its own members
//! ([`Directory::local_members`](corelay_core::directory::Directory::local_members));
//! after [`Cluster::snapshot_delay`] every other node takes them
//! ([`Directory::set_remote_node`](corelay_core::directory::Directory::set_remote_node),
//! their shards made remote ids by the slot it gave that node, slots given
//! in the order nodes are first heard of) and sends the changed rosters to
//! its shards. A node not heard of for [`NODE_EXPIRY`] is gone: its
//! members leave every room (`set_remote_node(slot, [])`). The exchange
//! can go down (the engine that carries it, NATS on the server): nothing is
//! published or expired until it comes back ([`Cluster::set_exchange`]).
//!
//! **Time.** The nodes run in lock step: the cluster finds the earliest
//! event of any node, of the relay and of the exchange, runs every node to
//! it, then carries what they sent. A relay or exchange delay of zero
//! delivers at the same instant, after the sender's step.
//!
//! A node that [vanishes](Cluster::vanish) stops: its engines, its clients,
//! its snapshots; what it had in flight still arrives, what is sent to it is
//! lost.
//!
//! Must not: touch engine internals (only `corelay_core`'s public API),
//! decide what a message or a roster means (the engines and directories
//! do), draw random numbers of its own (the relay's come from its [`Net`],
//! seeded), read the wall clock, open sockets, spawn threads, or sleep.
//! Drive the nodes through the cluster ([`Cluster::run_for`]): a node run
//! on its own would leave the others behind.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::ops::{Index, IndexMut};
use std::time::{Duration, Instant};

use corelay_client::ParticipantConfig;
use corelay_core::room::MemberInfo;
use corelay_core::{PeerMsg, RtcSettings, ShardId, wire};

use crate::net::{self, LinkParams, Net};
use crate::sim::{C, Sim};

/// How often each node publishes its members (the server's heartbeat).
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(1);
/// A node not heard of this long is gone (the directory's expiry).
pub const NODE_EXPIRY: Duration = Duration::from_secs(3);
/// How long after a loss the receiver has seen the gap (the next datagram
/// of a busy link), before its request's round trip.
const RESEND_DETECT: Duration = Duration::from_millis(2);

/// Rooms and their members, as a node publishes them.
type Rooms = Vec<(String, Vec<MemberInfo>)>;

/// What the relay did with the peer messages the nodes sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Put on a relay link.
    pub sent: u64,
    /// Decoded at the receiving node and handed to its shard.
    pub delivered: u64,
    /// Addressed to a slot the sender does not know, or from a node the
    /// receiver has not heard of, or for a shard it does not have.
    pub unknown: u64,
    /// Arrived at (or addressed to) a node that vanished.
    pub to_vanished: u64,
    /// The wire form could not be made (a codec it does not name).
    pub unencodable: u64,
    /// The bytes did not decode.
    pub undecodable: u64,
    /// Keyframe requests and layer demand among `sent`.
    pub control_sent: u64,
    /// Media messages among `delivered`.
    pub media_delivered: u64,
    /// Keyframe requests and layer demand among `delivered`.
    pub control_delivered: u64,
    /// Datagrams the link lost or dropped that the relay sent again once
    /// (the server's relay: the receiver asks for a gap at once, the
    /// sender resends from what it kept; `crates/server/src/shard/relay.rs`).
    pub resent: u64,
}

/// A datagram the relay sends again: when, on which link, from and to.
struct Resend {
    at: Instant,
    link: SocketAddr,
    from: SocketAddr,
    to: SocketAddr,
    data: Vec<u8>,
}

/// Whether the message is control state (a keyframe request, layer
/// demand): what a relay must not lose silently.
fn is_control(msg: &PeerMsg) -> bool {
    matches!(
        msg,
        PeerMsg::KeyframeRequest { .. } | PeerMsg::LayerDemand { .. }
    )
}

/// One node: its simulation and what it knows of the others.
struct Node {
    sim: Sim,
    alive: bool,
    /// This node's slot for each node of the cluster, by node index
    /// (`None`: not heard of yet). Kept for the life of the node, as the
    /// server keeps them for the life of its process.
    slots: Vec<Option<usize>>,
    /// When it last took each other node's snapshot (`None`: never, or
    /// that node expired since).
    heard: Vec<Option<Instant>>,
    /// What it last published.
    published: Option<Rooms>,
}

/// A node's members on their way to another node.
struct Snapshot {
    at: Instant,
    from: usize,
    to: usize,
    rooms: Rooms,
}

/// Nodes, the relay between them and the member exchange (see the module's
/// top). `cluster[n]` is node `n`'s [`Sim`]: its clients, shards and
/// events.
pub struct Cluster {
    nodes: Vec<Node>,
    /// The relay: one link per ordered pair of nodes ([`Cluster::relay_link`]).
    relay: Net,
    snapshots: VecDeque<Snapshot>,
    /// How long a snapshot takes from one node to another.
    pub snapshot_delay: Duration,
    next_publish: Instant,
    /// Virtual start (every node's).
    pub start: Instant,
    /// Virtual now (every node's, between steps).
    pub now: Instant,
    /// What the relay did.
    pub stats: RelayStats,
    /// When a node dropped another's members, having not heard of it for
    /// [`NODE_EXPIRY`]: (when, the node, the node it dropped).
    pub expiries: Vec<(Instant, usize, usize)>,
    /// The engine that carries the exchange is down ([`Cluster::set_exchange`]).
    exchange_down: bool,
    buf: Vec<u8>,
    /// Datagrams lost on the hop, to be sent again ([`RelayStats::resent`]).
    resends: VecDeque<Resend>,
}

impl Index<usize> for Cluster {
    type Output = Sim;

    fn index(&self, node: usize) -> &Sim {
        &self.nodes[node].sim
    }
}

/// A node, to act on its clients (join through [`Cluster::join`], and
/// run through the cluster).
impl IndexMut<usize> for Cluster {
    fn index_mut(&mut self, node: usize) -> &mut Sim {
        &mut self.nodes[node].sim
    }
}

/// The address node `node`'s shard `shard` relays from and to (the
/// server's `--relay-addr` port + shard index).
fn relay_addr(node: usize, shard: usize) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::new(10, 200, node as u8, 1), 7000 + shard as u16))
}

/// (node, shard) of a relay address.
fn relay_parts(a: SocketAddr) -> (usize, usize) {
    let SocketAddr::V4(v4) = a else {
        return (usize::MAX, usize::MAX);
    };
    (
        usize::from(v4.ip().octets()[2]),
        usize::from(v4.port().wrapping_sub(7000)),
    )
}

/// The key of the relay link from node `from` to node `to` (its `up`
/// direction carries that way).
fn link_key(from: usize, to: usize) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::new(10, 201, from as u8, to as u8), 7000))
}

impl Cluster {
    /// A cluster of `shards.len()` nodes, node `n` with `shards[n]`
    /// shards, every one with `settings`; `seed` drives every network (the
    /// relay's too) and every client. Relay links: 2 ms one way, lossless.
    pub fn new(seed: u64, shards: &[usize], settings: RtcSettings) -> Cluster {
        // As in `Sim::new`: str0m draws its ids from this thread's
        // generator, seeded once for the whole cluster.
        fastrand::seed(seed);
        let start = Instant::now();
        let n = shards.len();
        assert!(
            (2..=8).contains(&n),
            "a cluster of {n} nodes: 2 to 8 are simulated"
        );
        // The room key every node names rooms with (from the cluster
        // secret on the server): the same everywhere, not the default.
        let room_key = (seed ^ 0x0c1a_55e5_0c1a_55e5, seed.rotate_left(17) | 1);
        let nodes = shards
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                let mut sim = Sim::node(
                    seed.wrapping_add(0x9e37_79b9 * i as u64),
                    k,
                    settings.clone(),
                    i as u8,
                    start,
                );
                sim.directory_mut().set_room_key(room_key);
                Node {
                    sim,
                    alive: true,
                    slots: vec![None; n],
                    heard: vec![None; n],
                    published: None,
                }
            })
            .collect();
        let mut relay = Net::new(seed ^ 0x00e1_a7e1_a700);
        let link = LinkParams {
            delay: Duration::from_millis(2),
            ..LinkParams::default()
        };
        for a in 0..n {
            for b in (0..n).filter(|&b| b != a) {
                relay.link_mut(link_key(a, b)).up.params = link.clone();
            }
        }
        Cluster {
            nodes,
            relay,
            snapshots: VecDeque::new(),
            snapshot_delay: Duration::from_millis(5),
            next_publish: start,
            start,
            now: start,
            stats: RelayStats::default(),
            expiries: Vec::new(),
            exchange_down: false,
            resends: VecDeque::new(),
            buf: Vec::with_capacity(2048),
        }
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never: a cluster has two nodes at least.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Joins `cfg` to `room` on shard `shard` of node `node` (that node's
    /// [`Sim::join`]); the other nodes hear of it through the exchange.
    pub fn join(&mut self, node: usize, room: &str, cfg: ParticipantConfig, shard: usize) -> C {
        let c = self.nodes[node].sim.join(room, cfg, shard);
        self.pump();
        c
    }

    /// The relay link from node `from` to node `to` (that direction only:
    /// its `up`; its `cut` cuts that direction).
    pub fn relay_link(&mut self, from: usize, to: usize) -> &mut net::Link {
        self.relay.link_mut(link_key(from, to))
    }

    /// Sets both directions between every pair of nodes to `params`.
    pub fn set_relay(&mut self, params: &LinkParams) {
        let n = self.nodes.len();
        for a in 0..n {
            for b in (0..n).filter(|&b| b != a) {
                self.relay_link(a, b).up.params = params.clone();
            }
        }
    }

    /// Cuts (or restores) the relay both ways between nodes `a` and `b`
    /// (the member exchange goes on: it is not the relay's).
    pub fn cut_relay(&mut self, a: usize, b: usize, cut: bool) {
        self.relay_link(a, b).cut = cut;
        self.relay_link(b, a).cut = cut;
    }

    /// What happened on the relay from node `from` to node `to`.
    pub fn relay_stats(&self, from: usize, to: usize) -> net::DirStats {
        self.relay
            .link(link_key(from, to))
            .map(|l| l.up.stats)
            .unwrap_or_default()
    }

    /// Node `node` vanishes (a SIGKILL, a lost machine): its engines and
    /// clients stop, it publishes nothing more, and what reaches it is
    /// lost. The others drop its members [`NODE_EXPIRY`] after they last
    /// heard of it.
    pub fn vanish(&mut self, node: usize) {
        self.nodes[node].alive = false;
    }

    /// The engine that carries the member exchange (NATS on the server)
    /// goes down (`up` false) or comes back. While it is down no node
    /// publishes and none expires another: each keeps the members it last
    /// heard of, and calls go on over the relay. When it comes back every
    /// node counts the others as heard of now and publishes at once, so
    /// that the directories reconcile (a member who joined or left
    /// meanwhile shows, or goes, everywhere).
    pub fn set_exchange(&mut self, up: bool) {
        if self.exchange_down && up {
            let now = self.now;
            for node in &mut self.nodes {
                for h in node.heard.iter_mut().flatten() {
                    *h = now;
                }
                node.sim.members_changed = true;
                node.published = None;
            }
        }
        self.exchange_down = !up;
        self.pump();
    }

    /// Whether node `node` still runs.
    pub fn alive(&self, node: usize) -> bool {
        self.nodes[node].alive
    }

    /// The slot node `at` gave node `other` (its members' shards there are
    /// `ShardId::remote(slot, i)`), once it has heard of it.
    pub fn slot_of(&self, at: usize, other: usize) -> Option<usize> {
        self.nodes[at].slots[other]
    }

    // ------------------------------------------------------------ running

    /// Advances virtual time by `d`, every node in lock step.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.run_until_time(end);
    }

    /// Advances virtual time to `end`, event by event across the nodes.
    pub fn run_until_time(&mut self, end: Instant) {
        loop {
            self.pump();
            let t = match self.next_event() {
                Some(t) if t <= end => t.max(self.now),
                _ => end.max(self.now),
            };
            self.now = t;
            for node in self.nodes.iter_mut().filter(|n| n.alive) {
                node.sim.run_until_time(t);
            }
            if t >= end {
                self.pump();
                if self.next_event().is_none_or(|n| n > end) {
                    return;
                }
            }
        }
    }

    /// Runs until `pred` holds (checked every 10 ms of virtual time) or
    /// `limit` passes; returns whether it held.
    pub fn run_until(&mut self, limit: Duration, mut pred: impl FnMut(&Cluster) -> bool) -> bool {
        let end = self.now + limit;
        while self.now < end {
            if pred(self) {
                return true;
            }
            let next = (self.now + Duration::from_millis(10)).min(end);
            self.run_until_time(next);
        }
        pred(self)
    }

    /// The earliest thing to happen: a node's event, a relay arrival, a
    /// snapshot's arrival or publication, an expiry.
    fn next_event(&self) -> Option<Instant> {
        let nodes = self
            .nodes
            .iter()
            .filter(|n| n.alive)
            .filter_map(|n| n.sim.next_event());
        // Only those ahead: one due now is the pump's to act on, and an
        // instant left behind must not hold the clock.
        let expiries = self
            .nodes
            .iter()
            .filter(|n| n.alive)
            .flat_map(|n| n.heard.iter().flatten().map(|t| *t + NODE_EXPIRY))
            .filter(|t| *t > self.now && !self.exchange_down);
        nodes
            .chain(expiries)
            .chain(self.resends.front().map(|r| r.at))
            .chain(self.relay.next_at())
            .chain(self.snapshots.front().map(|s| s.at))
            .chain(std::iter::once(self.next_publish))
            .min()
    }

    /// Carries everything that is due now, until nothing more is: what the
    /// nodes sent over the relay, their members when changed or due, the
    /// snapshots and datagrams that arrive, the expiries.
    fn pump(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            for n in 0..self.nodes.len() {
                let out = std::mem::take(&mut self.nodes[n].sim.relay_out);
                if self.nodes[n].alive {
                    for (shard, to, msg) in out {
                        self.send(n, shard, to, &msg);
                    }
                }
            }
            let due = self.now >= self.next_publish;
            if due {
                self.next_publish += SNAPSHOT_EVERY;
            }
            for n in 0..self.nodes.len() {
                if self.exchange_down {
                    // Published when it comes back (`set_exchange`).
                    break;
                }
                let changed = std::mem::take(&mut self.nodes[n].sim.members_changed);
                if self.nodes[n].alive && (due || changed) {
                    self.publish(n, due);
                }
            }
            while self.snapshots.front().is_some_and(|s| s.at <= self.now) {
                if let Some(s) = self.snapshots.pop_front() {
                    self.take_snapshot(s);
                    moved = true;
                }
            }
            while self.resends.front().is_some_and(|r| r.at <= self.now) {
                if let Some(r) = self.resends.pop_front() {
                    self.stats.resent += 1;
                    self.relay
                        .send(self.now, r.link, true, r.from, r.to, &r.data);
                    moved = true;
                }
            }
            while let Some(d) = self.relay.pop_due(self.now) {
                self.arrive(d.from, d.to, &d.data);
                moved = true;
            }
            moved |= self.expire();
            if !moved {
                return;
            }
        }
    }

    /// Node `n` publishes its members: always when `force` (the periodic
    /// heartbeat), else only when they differ from what it last published.
    fn publish(&mut self, n: usize, force: bool) {
        let rooms = self.nodes[n].sim.directory().local_members();
        if !force && self.nodes[n].published.as_ref() == Some(&rooms) {
            return;
        }
        let at = self.now + self.snapshot_delay;
        for to in (0..self.nodes.len()).filter(|&to| to != n) {
            self.snapshots.push_back(Snapshot {
                at,
                from: n,
                to,
                rooms: rooms.clone(),
            });
        }
        self.nodes[n].published = Some(rooms);
    }

    /// A snapshot arrives: the receiver gives the sender a slot if it has
    /// none, takes its members (their shards as remote ids) and sends the
    /// changed rosters to its shards.
    fn take_snapshot(&mut self, s: Snapshot) {
        let now = self.now;
        let node = &mut self.nodes[s.to];
        if !node.alive {
            return;
        }
        let slot = match node.slots[s.from] {
            Some(slot) => slot,
            None => {
                let next = node.slots.iter().flatten().count();
                node.slots[s.from] = Some(next);
                next
            }
        };
        node.heard[s.from] = Some(now);
        let rooms = s
            .rooms
            .into_iter()
            .map(|(room, members)| {
                let members = members
                    .into_iter()
                    .filter_map(|mut m| {
                        m.shard = ShardId::remote(slot, m.shard.0)?;
                        Some(m)
                    })
                    .collect();
                (room, members)
            })
            .collect();
        let updates = node
            .sim
            .directory_mut()
            .set_remote_node(slot, rooms, "left");
        apply(&mut node.sim, updates);
    }

    /// Every node that has not heard of another for [`NODE_EXPIRY`] drops
    /// that node's members. Returns whether any did.
    fn expire(&mut self) -> bool {
        let now = self.now;
        let mut any = false;
        if self.exchange_down {
            return false;
        }
        for m in 0..self.nodes.len() {
            if !self.nodes[m].alive {
                continue;
            }
            for n in 0..self.nodes.len() {
                let node = &mut self.nodes[m];
                let Some(heard) = node.heard[n] else { continue };
                if now < heard + NODE_EXPIRY {
                    continue;
                }
                node.heard[n] = None;
                let Some(slot) = node.slots[n] else { continue };
                let updates =
                    node.sim
                        .directory_mut()
                        .set_remote_node(slot, Vec::new(), "node_lost");
                apply(&mut node.sim, updates);
                self.expiries.push((now, m, n));
                any = true;
            }
        }
        any
    }

    /// Node `n`'s shard `shard` sends `msg` to another node's shard `to`:
    /// its wire form, in one datagram on the relay link to that node.
    fn send(&mut self, n: usize, shard: usize, to: ShardId, msg: &PeerMsg) {
        let Some((slot, index)) = to.remote_parts() else {
            self.stats.unknown += 1;
            return;
        };
        let Some(m) = self.nodes[n].slots.iter().position(|s| *s == Some(slot)) else {
            self.stats.unknown += 1;
            return;
        };
        self.buf.clear();
        if wire::encode(msg, &mut self.buf).is_none() {
            self.stats.unencodable += 1;
            return;
        }
        self.stats.sent += 1;
        if is_control(msg) {
            self.stats.control_sent += 1;
        }
        let (from, dest) = (relay_addr(n, shard), relay_addr(m, index));
        let link = link_key(n, m);
        let before = self.relay_stats(n, m);
        self.relay.send(self.now, link, true, from, dest, &self.buf);
        let after = self.relay_stats(n, m);
        // Lost or dropped (not cut: a cut link answers nothing): the
        // receiver sees the gap with the next datagram and asks, and the
        // sender sends it again, once: about a round trip later.
        if after.lost + after.queue_drops > before.lost + before.queue_drops {
            let rtt = self.relay.link(link).map_or(Duration::ZERO, |l| {
                l.up.params.delay * 2 + l.up.params.jitter
            });
            self.resends.push_back(Resend {
                at: self.now + rtt + RESEND_DETECT,
                link,
                from,
                to: dest,
                data: self.buf.clone(),
            });
        }
    }

    /// A relay datagram arrives: decoded with its sender named as the
    /// receiving node names it, handed to the receiving shard's engine.
    fn arrive(&mut self, from: SocketAddr, to: SocketAddr, data: &[u8]) {
        let now = self.now;
        let ((n, i), (m, j)) = (relay_parts(from), relay_parts(to));
        let Some(node) = self.nodes.get_mut(m) else {
            self.stats.unknown += 1;
            return;
        };
        if !node.alive {
            self.stats.to_vanished += 1;
            return;
        }
        let Some(sender) = node
            .slots
            .get(n)
            .copied()
            .flatten()
            .and_then(|slot| ShardId::remote(slot, i))
        else {
            self.stats.unknown += 1;
            return;
        };
        if j >= node.sim.shards.len() {
            self.stats.unknown += 1;
            return;
        }
        match wire::decode(data, sender, now, None) {
            Ok(msg) => {
                self.stats.delivered += 1;
                if is_control(&msg) {
                    self.stats.control_delivered += 1;
                } else if matches!(msg, PeerMsg::Media { .. }) {
                    self.stats.media_delivered += 1;
                }
                node.sim.shards[j].engine.handle_peer(now, msg);
                node.sim.settle();
            }
            Err(_) => self.stats.undecodable += 1,
        }
    }
}

/// Sends each changed roster to its shards on this node, then routes what
/// they say.
fn apply(sim: &mut Sim, updates: Vec<(corelay_core::room::RoomUpdate, Vec<ShardId>)>) {
    if updates.is_empty() {
        return;
    }
    let now = sim.now;
    for (update, shards) in updates {
        for s in shards {
            if let Some(sh) = sim.shards.get_mut(s.0) {
                sh.engine.apply_room(now, update.clone());
            }
        }
    }
    sim.settle();
}
