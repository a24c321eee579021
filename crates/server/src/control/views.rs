//! The JSON bodies of the read-only API (`/api/v1/rooms`, `/api/v1/rooms/{room}`,
//! `/api/v1/stats`, `/api/v1/cluster`; docs/api.md), built from the control state as values.
//!
//! Owns the shape of those documents (field names and units are API).
//! Must not: decide anything, change the state, or know HTTP (the handlers
//! in [`super::http`] wrap these in responses).

use corelay_core::ShardId;
use corelay_core::metrics::{Counters, LatencyHistogram, ParticipantStats};
use corelay_core::offer::MediaLine;
use serde::Serialize;

use super::State;
use super::rooms::Flavor;

#[derive(Serialize)]
pub struct TrackOut {
    pub mid: String,
    pub kind: &'static str,
    /// A published track's state (absent for receive slots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub muted: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

#[derive(Serialize)]
pub struct MemberOut {
    pub id: String,
    /// Its token's `sub` (its id without authentication); not shown for a
    /// member of another node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    pub name: String,
    /// Its shard on its node.
    pub shard: ShardId,
    /// The node it is on, when that is another node of the cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub kind: Flavor,
    pub tracks: Vec<TrackOut>,
    /// Its receive slots (a member of another node: not shown).
    pub slots: Vec<TrackOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joined_secs_ago: Option<u64>,
}

#[derive(Serialize)]
pub struct RoomSummary {
    pub room: String,
    pub participants: usize,
    pub shards: Vec<ShardId>,
}

/// A latency histogram as the stats API shows it.
#[derive(Serialize)]
pub struct HistOut {
    pub count: u64,
    pub mean_us: f64,
    pub max_us: u64,
    /// Upper bucket edge (µs) under which half / 99% of the samples lie;
    /// past the last edge (50 ms), the largest sample.
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    /// `[upper edge µs (null = +Inf), samples in this bucket]`.
    pub buckets: Vec<(Option<u64>, u64)>,
}

impl From<&LatencyHistogram> for HistOut {
    fn from(h: &LatencyHistogram) -> Self {
        use corelay_core::metrics::LATENCY_EDGES_US;
        HistOut {
            count: h.count,
            mean_us: h.mean_us(),
            max_us: h.max_us,
            p50_us: h.quantile_edge_us(0.5),
            p99_us: h.quantile_edge_us(0.99),
            buckets: h
                .counts
                .iter()
                .enumerate()
                .map(|(i, c)| (LATENCY_EDGES_US.get(i).copied(), *c))
                .collect(),
        }
    }
}

#[derive(Serialize)]
pub struct ShardOut {
    pub shard: ShardId,
    pub udp: String,
    pub participants: usize,
    pub rooms: usize,
    pub busy: f64,
    pub loop_iterations: u64,
    pub counters: Counters,
    pub socket_dwell: HistOut,
    pub forward_latency: HistOut,
    pub forward_cross_shard_latency: HistOut,
    pub loop_iteration: HistOut,
    /// Subscriber-seconds in each verdict (docs/api.md, diagnosis).
    pub verdict_seconds: std::collections::BTreeMap<&'static str, u64>,
}

#[derive(Serialize)]
pub struct ParticipantOut {
    pub id: String,
    pub name: String,
    pub shard: ShardId,
    #[serde(flatten)]
    pub stats: Option<ParticipantStats>,
    /// Its shard's socket dwell and forwarding latency (mean, µs).
    pub shard_dwell_mean_us: f64,
    pub shard_forward_mean_us: f64,
}

#[derive(Serialize)]
pub struct RoomStatsOut {
    pub room: String,
    pub shards: Vec<ShardId>,
    pub participants: Vec<ParticipantOut>,
}

#[derive(Serialize)]
pub struct StatsOut {
    pub shards: Vec<ShardOut>,
    pub total: Counters,
    pub rooms: usize,
    pub participants: usize,
    pub admission_refusals: u64,
    /// Whether the shared UDP port's eBPF steering is on.
    pub port_steering: bool,
    pub room_detail: Vec<RoomStatsOut>,
}

fn lines_out(lines: &[MediaLine]) -> Vec<TrackOut> {
    lines
        .iter()
        .map(|l| TrackOut {
            mid: l.mid.to_string(),
            kind: corelay_core::events::kind_str(l.kind),
            muted: None,
            paused: None,
        })
        .collect()
}

/// A member's published tracks, with their state.
fn tracks_out(m: &super::rooms::Member) -> Vec<TrackOut> {
    m.tracks
        .iter()
        .map(|l| {
            let state = m.state(l.mid);
            TrackOut {
                mid: l.mid.to_string(),
                kind: corelay_core::events::kind_str(l.kind),
                muted: Some(state.muted),
                paused: Some(state.paused),
            }
        })
        .collect()
}

/// `GET /api/v1/rooms`: every room, its size and shards.
pub fn rooms(state: &State) -> Vec<RoomSummary> {
    state
        .rooms
        .rooms()
        .map(|(name, r)| RoomSummary {
            room: name.to_string(),
            participants: r.members.len(),
            shards: r.shards(),
        })
        .collect()
}

/// `GET /api/v1/rooms/{room}`: its video codec (None until its first video
/// publisher) and its members (None: no such room).
pub fn room(state: &State, room: &str) -> Option<(Option<&'static str>, Vec<MemberOut>)> {
    let local = state.rooms.room(room);
    let mut members: Vec<MemberOut> = local
        .into_iter()
        .flat_map(|r| r.members.iter())
        .map(|m| MemberOut {
            id: m.id.to_string(),
            identity: Some(m.identity.clone()),
            name: m.name.clone(),
            shard: m.shard,
            node: None,
            kind: m.flavor,
            tracks: tracks_out(m),
            slots: lines_out(&m.slots),
            joined_secs_ago: Some(m.joined.elapsed().as_secs()),
        })
        .collect();
    // Its members on other nodes of the cluster.
    for (slot, m) in state.rooms.remote_members(room) {
        let (node, shard) = state.remote_shard_of(slot, m.shard);
        members.push(MemberOut {
            id: m.id.to_string(),
            identity: None,
            name: m.name.clone(),
            shard,
            node,
            kind: if m.viewer {
                Flavor::Whep
            } else {
                Flavor::Participant
            },
            tracks: m
                .tracks
                .iter()
                .map(|l| {
                    let st = m.state(l.mid);
                    TrackOut {
                        mid: l.mid.to_string(),
                        kind: corelay_core::events::kind_str(l.kind),
                        muted: Some(st.muted),
                        paused: Some(st.paused),
                    }
                })
                .collect(),
            slots: Vec::new(),
            joined_secs_ago: None,
        });
    }
    if local.is_none() && members.is_empty() {
        return None;
    }
    Some((local.and_then(|r| r.codec).map(|c| c.name()), members))
}

/// `GET /api/v1/stats`: every shard's figures, their sum, and per room the
/// participants' transport figures.
pub fn stats(state: &State) -> StatsOut {
    let mut total = Counters::default();
    for s in &state.shards {
        total.add(&s.last.counters);
    }
    let loads = state.rooms.shard_loads();
    let verdicts = state.verdict_seconds();
    StatsOut {
        shards: state
            .shards
            .iter()
            .enumerate()
            .map(|(i, s)| ShardOut {
                shard: s.handle.index,
                udp: s.handle.advertised.to_string(),
                participants: loads.get(i).map_or(0, |l| l.participants),
                rooms: s.last.rooms,
                busy: s.last.busy,
                loop_iterations: s.last.loop_iterations,
                counters: s.last.counters,
                socket_dwell: (&s.last.dwell).into(),
                forward_latency: (&s.last.forward_local).into(),
                forward_cross_shard_latency: (&s.last.forward_cross).into(),
                loop_iteration: (&s.last.iteration).into(),
                verdict_seconds: verdicts
                    .get(i)
                    .map(|v| v.iter().copied().collect())
                    .unwrap_or_default(),
            })
            .collect(),
        total,
        rooms: state.rooms.room_count(),
        participants: state.rooms.participant_count(),
        admission_refusals: state.rooms.admission_refusals(),
        port_steering: state.port_steering(),
        room_detail: state
            .rooms
            .rooms()
            .map(|(name, r)| RoomStatsOut {
                room: name.to_string(),
                shards: r.shards(),
                participants: r
                    .members
                    .iter()
                    .map(|m| {
                        let last = state.link(m.shard).map(|s| &s.last);
                        ParticipantOut {
                            id: m.id.to_string(),
                            name: m.name.clone(),
                            shard: m.shard,
                            stats: state.detail.get(&m.id).cloned(),
                            shard_dwell_mean_us: last.map_or(0.0, |l| l.dwell.mean_us()),
                            shard_forward_mean_us: last.map_or(0.0, |l| l.forward_local.mean_us()),
                        }
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// One node of `/api/v1/cluster`.
#[derive(Serialize)]
pub struct NodeOut {
    pub node_id: String,
    pub epoch: u64,
    pub http_addr: String,
    pub relay_addr: std::net::SocketAddr,
    pub participants: u32,
    pub capacity_left: u32,
    /// Participants over participants plus capacity left, 0 to 1.
    pub load: f64,
    pub draining: bool,
    pub rooms: Vec<String>,
    /// Milliseconds since this node last heard of it.
    pub last_seen_ms: u64,
    /// Its shards (shard `i`'s relay socket: `relay_addr`'s port + `i`).
    pub shards: u32,
}

/// `/api/v1/cluster`: this node and its view of the cluster. None without
/// `--cluster`.
#[derive(Serialize)]
pub struct ClusterOut {
    pub node_id: String,
    /// Whether the directory's link to NATS is up now.
    pub connected: bool,
    pub draining: bool,
    /// Every node in the view, this one included once its own announcement
    /// came back, by node id.
    pub nodes: Vec<NodeOut>,
    /// The relay link to each other node this one exchanged media with.
    pub links: Vec<super::cluster::LinkOut>,
}

pub fn cluster(st: &State) -> Option<ClusterOut> {
    let node = st.cluster()?;
    let (nodes, connected) = node.view();
    Some(ClusterOut {
        node_id: node.node_id.clone(),
        connected,
        draining: node.draining(),
        nodes: nodes
            .into_iter()
            .map(|(r, age)| NodeOut {
                load: r.load(),
                node_id: r.node_id,
                epoch: r.epoch,
                http_addr: r.http_addr,
                relay_addr: r.relay_addr,
                participants: r.participants,
                capacity_left: r.capacity_left,
                draining: r.draining,
                rooms: r.rooms,
                last_seen_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
                shards: r.shards,
            })
            .collect(),
        links: st.relay_links(),
    })
}
