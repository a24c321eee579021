//! This node in a cluster (`--cluster`, issue 49): its announcement in the
//! node directory (`corelay_cluster::directory`, on NATS JetStream KV), the
//! redirect target of a join it refuses, draining, and the view
//! `GET /api/v1/cluster` shows.
//!
//! **What it owns.** [`Node`], kept in the control thread's [`State`]: this
//! node's id, epoch and addresses, whether it drains, and its
//! [`Directory`] once connected; [`run`], the control thread's task that
//! connects (retrying in the background while NATS cannot be reached: the
//! node serves calls meanwhile) and announces this node every
//! [`HEARTBEAT`], and at once when it starts draining.
//!
//! **What it must not touch.** It runs on the control thread only and is
//! never on the packet path (docs/design.md): no shard knows it exists. It
//! decides where a refused join goes; whether a join is refused is the
//! room directory's admission control. Media does not cross nodes yet: a
//! redirected join lands in the other node's room of that name, which is a
//! room of its own (docs/operations.md, "Running a cluster").

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use corelay_cluster::directory::{self, Directory, HEARTBEAT, NodeRecord};
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
    /// Held for the relay (media between nodes, not built yet); its bytes
    /// never reach a log.
    _secret: corelay_cluster::relay::ClusterSecret,
    directory: Option<Arc<Directory>>,
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
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Node {
            node_id: settings.node_id,
            epoch,
            relay_addr: settings.relay_addr,
            http_addr,
            _secret: settings.secret,
            directory: None,
            draining: false,
            wake,
        }
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
        })
    }
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
