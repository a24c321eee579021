//! This node in a cluster (`--cluster`, issue 49): its announcement in the
//! node directory (`corelay_cluster::directory`, on NATS JetStream KV), the
//! redirect target of a join it refuses, draining, the member exchange that
//! makes a room span nodes, and the view `GET /api/v1/cluster` shows.
//!
//! **What it owns.** [`Node`], kept in the control thread's [`State`]: this
//! node's id, epoch and addresses, whether it drains, its [`Directory`]
//! once connected, the slot it gave each other node (whose shards are
//! `ShardId::remote(slot, i)` here) and the relay table last sent to the
//! shards. [`run`], the control thread's task that connects (retrying in
//! the background while NATS cannot be reached: the node serves calls
//! meanwhile) and announces this node every [`HEARTBEAT`], and at once when
//! it starts draining; `exchange_members`, which publishes this node's
//! members ([`members`]) and puts the others' into the room directory, and
//! takes a node's members out when the directory's view loses it (never
//! because NATS went quiet).
//!
//! **What it must not touch.** It runs on the control thread only and is
//! never on the packet path (docs/design.md): the shards learn of other
//! nodes only as rosters (members on remote shards) and a relay table
//! ([`ShardCommand::Relay`]). It decides where a refused join goes; whether
//! a join is refused is the room directory's admission control.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use corelay_cluster::directory::{self, Change, Directory, HEARTBEAT, NodeRecord};
use corelay_cluster::members::{self, Snapshot};
use corelay_cluster::relay::ClusterSecret;
use corelay_core::ShardId;
use corelay_core::room::{MemberInfo, TrackState};
use corelay_plane::{RelayNode, ShardCommand};
use futures_util::StreamExt;
use str0m::media::{MediaKind, Mid};
use tokio::sync::Notify;

use super::{Shared, State, lock};

/// How long a clean shutdown waits for NATS to take this node's leave.
pub const LEAVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the first connection waits between tries while NATS cannot be
/// reached; a WARN is written every [`WARN_EVERY`] tries.
const RETRY: Duration = Duration::from_secs(1);
const WARN_EVERY: u32 = 30;

/// This node as the cluster sees it.
pub struct Node {
    pub node_id: String,
    /// This process's start, Unix milliseconds: a restart under the same id
    /// is another epoch.
    pub epoch: u64,
    pub relay_addr: SocketAddr,
    /// The base URL redirects to this node use (no trailing `/`).
    pub http_addr: String,
    /// Its bytes never reach a log; here for the room key.
    secret: Arc<ClusterSecret>,
    directory: Option<Arc<Directory>>,
    /// The slot of each other node this process has heard of (its shards
    /// are `ShardId::remote(slot, i)`), for the life of the process.
    slots: HashMap<String, usize>,
    /// The other nodes as the shards' relays last heard of them.
    relay_nodes: Vec<RelayNode>,
    /// The (epoch, seq) of each other node's latest snapshot taken.
    heard: HashMap<String, (u64, u64)>,
    /// This node's snapshots, counted.
    seq: u64,
    /// Wakes the member exchange to publish at once (a join, a leave).
    members_wake: Arc<Notify>,
    draining: bool,
    /// Wakes [`run`] to announce at once (drain).
    wake: Arc<Notify>,
}

impl Node {
    pub fn new(
        settings: crate::config::ClusterSettings,
        http_addr: String,
        wake: Arc<Notify>,
    ) -> Self {
        Node {
            node_id: settings.node_id,
            epoch: settings.epoch,
            relay_addr: settings.relay_addr,
            http_addr,
            secret: settings.secret,
            directory: None,
            slots: HashMap::new(),
            relay_nodes: Vec::new(),
            heard: HashMap::new(),
            seq: 0,
            members_wake: Arc::new(Notify::new()),
            draining: false,
            wake,
        }
    }

    /// The key rooms are named with on every node of the cluster.
    pub fn room_key(&self) -> (u64, u64) {
        self.secret.room_key()
    }

    /// The slot of node `node_id`, given now if it has none.
    fn slot(&mut self, node_id: &str) -> Option<usize> {
        if let Some(s) = self.slots.get(node_id) {
            return Some(*s);
        }
        let next = self.slots.len();
        ShardId::remote(next, 0)?;
        self.slots.insert(node_id.to_owned(), next);
        Some(next)
    }

    pub fn draining(&self) -> bool {
        self.draining
    }

    /// Whether the directory is connected to NATS now.
    pub fn connected(&self) -> bool {
        self.directory.as_ref().is_some_and(|d| d.is_connected())
    }

    pub fn directory(&self) -> Option<Arc<Directory>> {
        self.directory.clone()
    }

    /// Takes this node out of placement: announced at once; from now on
    /// every new join is redirected. Calls in progress stay.
    pub fn start_draining(&mut self) {
        if !self.draining {
            self.draining = true;
            tracing::info!(node = %self.node_id, "draining: out of placement, new joins go to other nodes");
        }
        self.wake.notify_one();
    }

    /// Where to send a join of `room` that this node will not take: among
    /// the other nodes with room that are not draining, one that already
    /// holds members of `room` (least loaded first), else the least loaded.
    /// Its base URL.
    pub fn redirect_target(&self, room: &str) -> Option<String> {
        let nodes = self.directory.as_ref()?.nodes();
        pick_target(&nodes, &self.node_id, room).map(|n| n.http_addr.clone())
    }

    /// The HTTP base URLs of the other nodes that take joins (not
    /// draining), for a client that must find another node.
    pub fn other_http_addrs(&self) -> Vec<String> {
        let Some(d) = &self.directory else {
            return Vec::new();
        };
        let mut nodes: Vec<NodeRecord> = d.peers().into_iter().filter(|n| !n.draining).collect();
        nodes.sort_by(|a, b| a.load().total_cmp(&b.load()));
        nodes.into_iter().map(|n| n.http_addr).collect()
    }

    /// Nodes in the view with the time since each was last heard of, and
    /// whether NATS is connected.
    pub fn view(&self) -> (Vec<(NodeRecord, Duration)>, bool) {
        match &self.directory {
            Some(d) => (d.nodes_seen(), d.is_connected()),
            None => (Vec::new(), false),
        }
    }
}

impl State {
    /// This node's record for the directory: its participants, what its
    /// admission limits would still take, the rooms it holds members of.
    fn node_record(&self) -> Option<NodeRecord> {
        let node = self.cluster.as_ref()?;
        let limits = &self.limits;
        let capacity_left: usize = if node.draining {
            0
        } else {
            self.rooms
                .shard_loads()
                .iter()
                .filter(|s| s.failed.is_none() && s.busy < limits.max_shard_load)
                .map(|s| {
                    limits
                        .max_participants_per_shard
                        .saturating_sub(s.participants)
                })
                .fold(0usize, usize::saturating_add)
        };
        let capacity_left = if self.rooms.room_count() >= limits.max_rooms {
            // Only joins of open rooms would be taken: announce none, so
            // that no node sends a new room here.
            0
        } else {
            capacity_left
        };
        Some(NodeRecord {
            node_id: node.node_id.clone(),
            epoch: node.epoch,
            relay_addr: node.relay_addr,
            http_addr: node.http_addr.clone(),
            participants: u32::try_from(self.rooms.participant_count()).unwrap_or(u32::MAX),
            capacity_left: u32::try_from(capacity_left).unwrap_or(u32::MAX),
            draining: node.draining,
            rooms: self
                .rooms
                .rooms()
                .map(|(name, _)| name.to_owned())
                .collect(),
            shards: u32::try_from(self.shards.len()).unwrap_or(u32::MAX),
        })
    }

    /// A draining node's participants leave, with a `bye` saying
    /// `node_draining`, where another node can take their room: they join
    /// again and this node sends them there. Returns how many left.
    pub fn drain_members(&mut self) -> usize {
        let Some(node) = &self.cluster else {
            return 0;
        };
        let mut leaving = Vec::new();
        for (room, r) in self.rooms.rooms() {
            if node.redirect_target(room).is_none() {
                continue;
            }
            leaving.extend(r.members.iter().map(|m| (m.id, m.shard)));
        }
        let n = leaving.len();
        for (id, shard) in leaving {
            if let Ok(d) = self.rooms.leave(id) {
                if let Some(s) = self.shards.get(shard.0) {
                    let _ = s.handle.commands.send(ShardCommand::Remove {
                        id,
                        reason: corelay_core::LeaveReason::Draining,
                    });
                }
                self.departed(d, "node_draining");
            }
        }
        if n > 0 {
            tracing::info!(
                participants = n,
                "draining: participants sent to other nodes"
            );
        }
        n
    }

    /// This node's members changed: the others hear of it now, not at
    /// the next second.
    pub(super) fn members_changed(&self) {
        if let Some(node) = &self.cluster {
            node.members_wake.notify_one();
        }
    }

    /// The node id of slot `slot` and a member's shard on its node, for
    /// the API (the shard of a member here is [`ShardId::remote`]).
    pub(super) fn remote_shard_of(&self, slot: usize, shard: ShardId) -> (Option<String>, ShardId) {
        let node = self.cluster.as_ref().and_then(|n| {
            n.slots
                .iter()
                .find(|(_, s)| **s == slot)
                .map(|(id, _)| id.clone())
        });
        let index = shard.remote_parts().map_or(shard, |(_, i)| ShardId(i));
        (node, index)
    }

    /// Each relay link to another node, the shards' links summed: packets
    /// each way, losses found, resends, and the worst RTT of the last
    /// pings. By node id.
    pub fn relay_links(&self) -> Vec<LinkOut> {
        let mut by_node: std::collections::BTreeMap<String, LinkOut> =
            std::collections::BTreeMap::new();
        for s in &self.shards {
            for l in &s.last.relay_links {
                let Some((slot, _)) = l.peer.remote_parts() else {
                    continue;
                };
                let (Some(node), _) = self.remote_shard_of(slot, l.peer) else {
                    continue;
                };
                let e = by_node.entry(node.clone()).or_insert_with(|| LinkOut {
                    node_id: node,
                    ..LinkOut::default()
                });
                e.tx_packets += l.tx_packets;
                e.rx_packets += l.rx_packets;
                e.lost += l.lost;
                e.resent += l.resent;
                e.rtt_ms = e.rtt_ms.max(l.rtt_us as f64 / 1000.0);
            }
        }
        by_node.into_values().collect()
    }

    /// This node's members for the others ([`members`]).
    fn member_snapshot(&mut self) -> Option<Snapshot> {
        let rooms = self.rooms.local_members();
        let identities: HashMap<corelay_core::ParticipantId, String> = self
            .rooms
            .rooms()
            .flat_map(|(_, r)| r.members.iter())
            .map(|m| (m.id, m.identity.clone()))
            .collect();
        let node = self.cluster.as_mut()?;
        node.seq += 1;
        Some(Snapshot {
            node_id: node.node_id.clone(),
            epoch: node.epoch,
            seq: node.seq,
            rooms: rooms
                .into_iter()
                .map(|(room, ms)| members::RoomMembers {
                    room,
                    members: ms
                        .into_iter()
                        .map(|m| {
                            let identity = identities.get(&m.id).cloned().unwrap_or_default();
                            members::Member {
                                identity,
                                ..member_out(m)
                            }
                        })
                        .collect(),
                })
                .collect(),
        })
    }

    /// Another node's members: its rooms' rosters here change to them.
    /// Taken only from a node the directory shows, in the epoch it shows,
    /// and newer than the last one taken.
    fn on_snapshot(&mut self, snapshot: Snapshot) {
        let Some(node) = self.cluster.as_mut() else {
            return;
        };
        let known = node
            .directory
            .as_ref()
            .and_then(|d| d.node(&snapshot.node_id))
            .is_some_and(|r| r.epoch == snapshot.epoch);
        let newer = node
            .heard
            .get(&snapshot.node_id)
            .is_none_or(|&(epoch, seq)| (snapshot.epoch, snapshot.seq) > (epoch, seq));
        if !known || !newer {
            return;
        }
        node.heard
            .insert(snapshot.node_id.clone(), (snapshot.epoch, snapshot.seq));
        let Some(slot) = node.slot(&snapshot.node_id) else {
            return;
        };
        let identities = snapshot
            .rooms
            .iter()
            .flat_map(|r| r.members.iter())
            .filter(|m| !m.identity.is_empty())
            .take(MAX_REMOTE_MEMBERS)
            .map(|m| (corelay_core::ParticipantId(m.id), m.identity.clone()))
            .collect();
        self.rooms.set_remote_identities(slot, identities);
        let rooms = snapshot
            .rooms
            .into_iter()
            .map(|r| {
                let ms = r
                    .members
                    .into_iter()
                    .filter_map(|m| member_in(slot, m))
                    .collect();
                (r.room, ms)
            })
            .collect();
        let updates = self.rooms.set_remote_node(slot, rooms, "left");
        self.refresh_relay();
        for (roster, shards) in updates {
            self.broadcast(&roster, &shards);
        }
    }

    /// A change of the node directory's view.
    fn on_node_change(&mut self, change: Change) {
        if let Change::NodeLeft {
            node_id, reason, ..
        } = &change
            && let Some(node) = self.cluster.as_mut()
        {
            node.heard.remove(node_id);
            if let Some(slot) = node.slots.get(node_id).copied() {
                tracing::info!(node = %node_id, ?reason, "cluster: node gone, its members leave their rooms");
                let updates = self.rooms.set_remote_node(slot, Vec::new(), "node_lost");
                for (roster, shards) in updates {
                    self.broadcast(&roster, &shards);
                }
            }
        }
        self.refresh_relay();
    }

    /// Tells the shards' relays of the other nodes, when they changed.
    fn refresh_relay(&mut self) {
        let Some(node) = self.cluster.as_mut() else {
            return;
        };
        let Some(directory) = node.directory.clone() else {
            return;
        };
        let mut table = Vec::new();
        for peer in directory.peers() {
            let Some(slot) = node.slot(&peer.node_id) else {
                continue;
            };
            table.push(RelayNode {
                slot,
                node_id: peer.node_id,
                epoch: peer.epoch,
                relay_addr: peer.relay_addr,
                shards: peer.shards as usize,
            });
        }
        table.sort_by_key(|n| n.slot);
        if table == node.relay_nodes {
            return;
        }
        node.relay_nodes = table.clone();
        for s in &self.shards {
            let _ = s.handle.commands.send(ShardCommand::Relay(table.clone()));
        }
    }
}

/// The relay link to one other node, as `GET /api/v1/cluster` and the
/// metrics show it.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LinkOut {
    pub node_id: String,
    /// Relay datagrams sent to it and received from it.
    pub tx_packets: u64,
    pub rx_packets: u64,
    /// Its datagrams found missing here (gaps), and ours it asked for
    /// again and got.
    pub lost: u64,
    pub resent: u64,
    /// The worst round trip of the last pings over the shards' links.
    pub rtt_ms: f64,
}

/// A member of this node as a snapshot carries it.
fn member_out(m: MemberInfo) -> members::Member {
    members::Member {
        id: m.id.0,
        name: m.name.clone(),
        shard: u32::try_from(m.shard.0).unwrap_or(u32::MAX),
        tracks: m
            .tracks
            .iter()
            .map(|t| {
                let state = m.state(t.mid);
                members::Track {
                    mid: t.mid.to_string(),
                    kind: match t.kind {
                        MediaKind::Audio => "audio",
                        MediaKind::Video => "video",
                    }
                    .to_owned(),
                    muted: state.muted,
                    paused: state.paused,
                }
            })
            .collect(),
        viewer: m.viewer,
        identity: String::new(),
    }
}

/// A member of node `slot` as this node's rosters hold it.
fn member_in(slot: usize, m: members::Member) -> Option<MemberInfo> {
    let shard = ShardId::remote(slot, usize::try_from(m.shard).ok()?)?;
    let mut tracks = Vec::new();
    let mut states = Vec::new();
    for t in m.tracks.iter().take(MAX_REMOTE_TRACKS) {
        let kind = match t.kind.as_str() {
            "audio" => MediaKind::Audio,
            "video" => MediaKind::Video,
            _ => continue,
        };
        let mid = Mid::from(t.mid.as_str());
        tracks.push(corelay_core::offer::MediaLine { mid, kind });
        if t.muted || t.paused {
            states.push((
                mid,
                TrackState {
                    muted: t.muted,
                    paused: t.paused,
                },
            ));
        }
    }
    Some(MemberInfo {
        id: corelay_core::ParticipantId(m.id),
        name: m
            .name
            .chars()
            .filter(|c| !c.is_control())
            .take(64)
            .collect(),
        shard,
        tracks,
        viewer: m.viewer,
        states,
    })
}

/// See [`Node::redirect_target`]: never `me`, a draining node or one
/// without room.
fn pick_target<'a>(nodes: &'a [NodeRecord], me: &str, room: &str) -> Option<&'a NodeRecord> {
    let me = [me];
    let holding = nodes.iter().filter(|n| n.rooms.iter().any(|r| r == room));
    directory::least_loaded(holding, &me).or_else(|| directory::least_loaded(nodes, &me))
}

/// A NATS URL as logs may show it: without a `user:password@`.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://…@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// `Location` of a redirect: `base` (a node's `http_addr`) and this
/// request's path and query, with exactly one `/` between them.
pub fn location(base: &str, path_and_query: &str) -> String {
    let base = base.trim_end_matches('/');
    let path = path_and_query.trim_start_matches('/');
    format!("{base}/{path}")
}

/// The control thread's cluster task: connects to NATS (retrying in the
/// background, with a WARN, while it cannot: calls go on being served),
/// then announces this node every [`HEARTBEAT`] and whenever woken (a
/// drain). Runs until aborted; the caller then calls
/// [`Directory::leave`] (see [`leave`]).
pub async fn run(state: Shared, url: String, node_id: String, wake: Arc<Notify>) {
    let mut tries = 0u32;
    let directory = loop {
        match Directory::connect(&url, &node_id).await {
            Ok(d) => break Arc::new(d),
            Err(err) => {
                if tries.is_multiple_of(WARN_EVERY) {
                    tracing::warn!(
                        "cluster: {err}; serving as a lone node, retrying every {RETRY:?} in the background"
                    );
                }
                tries = tries.saturating_add(1);
                tokio::time::sleep(RETRY).await;
            }
        }
    };
    tracing::info!(node = %node_id, "cluster: connected to the directory at {}", redacted(&url));
    if let Some(node) = lock(&state).cluster.as_mut() {
        node.directory = Some(directory.clone());
    }
    tokio::spawn(exchange_members(
        state.clone(),
        directory.clone(),
        node_id.clone(),
    ));
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = wake.notified() => {}
        }
        let Some(record) = lock(&state).node_record() else {
            return;
        };
        if let Some(seen) = directory.node(&node_id)
            && seen.epoch != record.epoch
        {
            tracing::warn!(
                node = %node_id,
                "cluster: another process announces the same --node-id; give each node its own"
            );
        }
        match directory.announce(&record).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("cluster: announcing again");
            }
            Ok(()) => {}
            Err(err) if !failing => {
                failing = true;
                tracing::warn!("cluster: cannot announce this node: {err}; calls go on, retrying");
            }
            Err(_) => {}
        }
    }
}

/// The most tracks taken of one member of another node (an offer has at
/// most `--max-mlines` m-lines; this bounds what a snapshot makes us hold).
const MAX_REMOTE_TRACKS: usize = 64;
/// The most identities taken from one snapshot (a node's members).
const MAX_REMOTE_MEMBERS: usize = 1 << 20;

/// How often this node's members are published whole, changed or not.
const MEMBERS_EVERY: Duration = Duration::from_secs(1);

/// The control thread's member exchange: publishes this node's members
/// every [`MEMBERS_EVERY`] (and, through the same tick, within a second of
/// a change), takes the other nodes' snapshots, and follows the directory's
/// changes (a node gone: its members leave the rosters here). Runs until
/// the client closes.
async fn exchange_members(state: Shared, directory: Arc<Directory>, node_id: String) {
    let client = directory.client().clone();
    let mut snapshots = loop {
        match members::subscribe(&client, &node_id).await {
            Ok(s) => break Box::pin(s),
            Err(e) => {
                tracing::warn!(
                    "cluster: cannot subscribe to the other nodes' members: {e}; retrying"
                );
                tokio::time::sleep(RETRY).await;
            }
        }
    };
    let Some(wake) = lock(&state)
        .cluster
        .as_ref()
        .map(|n| n.members_wake.clone())
    else {
        return;
    };
    let mut tick = tokio::time::interval(MEMBERS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            change = directory.next_change() => lock(&state).on_node_change(change),
            snapshot = snapshots.next() => match snapshot {
                Some(s) => lock(&state).on_snapshot(s),
                None => return,
            },
            () = wake.notified() => {
                let snapshot = lock(&state).member_snapshot();
                if let Some(s) = snapshot
                    && let Err(e) = members::publish(&client, &s).await
                {
                    tracing::debug!("cluster: publishing this node's members: {e}");
                }
            }
            _ = tick.tick() => {
                let snapshot = lock(&state).member_snapshot();
                if let Some(s) = snapshot
                    && let Err(e) = members::publish(&client, &s).await
                {
                    tracing::debug!("cluster: publishing this node's members: {e}");
                }
            }
        }
    }
}

/// A clean shutdown's last word: this node's key deleted, so that the
/// others drop it at once rather than after the directory's TTL.
pub async fn leave(state: &Shared) {
    let directory = lock(state).cluster.as_ref().and_then(Node::directory);
    if let Some(directory) = directory {
        match tokio::time::timeout(LEAVE_TIMEOUT, directory.leave()).await {
            Ok(Ok(())) => tracing::info!("cluster: left the directory"),
            Ok(Err(err)) => tracing::warn!("cluster: leaving the directory failed: {err}"),
            Err(_) => tracing::warn!("cluster: leaving the directory timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{location, pick_target, redacted};
    use corelay_cluster::directory::NodeRecord;

    fn node(id: &str, participants: u32, capacity_left: u32, rooms: &[&str]) -> NodeRecord {
        NodeRecord {
            node_id: id.to_owned(),
            epoch: 1,
            relay_addr: "127.0.0.1:7100".parse().unwrap(),
            http_addr: format!("http://{id}:7070"),
            participants,
            capacity_left,
            draining: false,
            rooms: rooms.iter().map(|r| (*r).to_owned()).collect(),
            shards: 1,
        }
    }

    #[test]
    fn a_refused_join_goes_to_its_room_first_then_to_the_least_loaded() {
        let mut draining = node("d", 0, 100, &["r"]);
        draining.draining = true;
        let nodes = vec![
            node("me", 0, 100, &["r"]),
            node("busy", 80, 20, &["r"]),
            node("full", 10, 0, &["r"]),
            draining,
            node("idle", 0, 100, &[]),
        ];
        let pick = |room: &str| pick_target(&nodes, "me", room).map(|n| n.node_id.as_str());
        // The room's node with room, though another is emptier.
        assert_eq!(pick("r"), Some("busy"));
        // No node holds it: the least loaded, never this one.
        assert_eq!(pick("other"), Some("idle"));
        assert_eq!(pick_target(&nodes[..1], "me", "r"), None);
    }

    #[test]
    fn urls_lose_their_credentials_in_logs() {
        assert_eq!(redacted("nats://u:p@h:4222"), "nats://…@h:4222");
        assert_eq!(redacted("nats://h:4222"), "nats://h:4222");
    }

    #[test]
    fn location_keeps_path_and_query_with_one_slash() {
        assert_eq!(
            location(
                "http://10.0.0.2:7070",
                "/api/v1/rooms/r/participants?name=a"
            ),
            "http://10.0.0.2:7070/api/v1/rooms/r/participants?name=a"
        );
        assert_eq!(
            location("http://10.0.0.2:7070/", "/whip/r"),
            "http://10.0.0.2:7070/whip/r"
        );
        assert_eq!(
            location("https://b.example//", "/whep/r?x=1&y=%20"),
            "https://b.example/whep/r?x=1&y=%20"
        );
        assert_eq!(location("http://b", "whip/r"), "http://b/whip/r");
    }
}
