//! The control thread: the room roster, placement of participants on shards,
//! admission control, and the shards' figures.
//!
//! It accepts SDP offers (building each participant's str0m `Rtc`), hands the
//! `Rtc` to the chosen shard as a value, and tells every shard of a room when
//! its roster changes. It never touches a media packet.
//!
//! The state sits behind one `Mutex` that only this thread's tasks (HTTP
//! handlers and the shard-event pump) take, never across an await: the lock
//! is uncontended by construction and the shards never see it.
#![allow(
    clippy::disallowed_types,
    reason = "the control thread's own state lock; shards never take it (see above)"
)]

pub mod assets;
pub mod http;
pub mod metrics;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelay_core::metrics::{Counters, LatencyHistogram, ParticipantStats};
use corelay_core::offer::{MediaLine, accept_offer};
use corelay_core::room::{MemberInfo, RoomUpdate};
use corelay_core::{OfferError, ParticipantId, RoomId, RtcSettings, ShardEvent};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::shard::{Command, Report, ShardHandle, ToControl};

/// Seconds a refused client is asked to wait before retrying.
const RETRY_AFTER_SECS: u32 = 5;
/// How long a renegotiation may wait for its shard.
const SHARD_REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// How a participant joined: the API it must be addressed through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    Participant,
    Whip,
    Whep,
}

/// An API error: HTTP status, stable code, human message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(404, "not_found", what)
    }
}

impl From<OfferError> for ApiError {
    fn from(e: OfferError) -> Self {
        let status = if e.code == "not_found" { 404 } else { 400 };
        ApiError::new(status, e.code, e.message)
    }
}

struct Member {
    id: ParticipantId,
    name: String,
    shard: usize,
    flavor: Flavor,
    tracks: Vec<MediaLine>,
    slots: Vec<MediaLine>,
    version: u64,
    joined: Instant,
}

struct Room {
    id: RoomId,
    members: Vec<Member>,
}

struct ShardState {
    handle: ShardHandle,
    participants: usize,
    last: Report,
}

pub struct Limits {
    pub max_participants_per_shard: usize,
    pub max_shard_load: f64,
}

pub struct State {
    settings: RtcSettings,
    limits: Limits,
    shards: Vec<ShardState>,
    rooms: BTreeMap<String, Room>,
    where_is: HashMap<ParticipantId, String>,
    next_participant: u64,
    next_room: u64,
    admission_refusals: u64,
    /// Latest per-participant transport figures from the shards.
    detail: HashMap<ParticipantId, ParticipantStats>,
}

pub type Shared = Arc<Mutex<State>>;

/// A successful join.
pub struct Joined {
    pub id: ParticipantId,
    pub answer: String,
    pub etag: String,
}

#[derive(Serialize)]
pub struct TrackOut {
    pub mid: String,
    pub kind: &'static str,
}

#[derive(Serialize)]
pub struct MemberOut {
    pub id: String,
    pub name: String,
    pub shard: usize,
    pub kind: Flavor,
    pub tracks: Vec<TrackOut>,
    pub slots: Vec<TrackOut>,
    pub joined_secs_ago: u64,
}

#[derive(Serialize)]
pub struct RoomSummary {
    pub room: String,
    pub participants: usize,
    pub shards: Vec<usize>,
}

/// A latency histogram as the stats API shows it.
#[derive(Serialize)]
pub struct HistOut {
    pub count: u64,
    pub mean_us: f64,
    pub max_us: u64,
    /// Upper bucket edge (µs) under which half / 99% of the samples lie.
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
    pub shard: usize,
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
}

#[derive(Serialize)]
pub struct ParticipantOut {
    pub id: String,
    pub name: String,
    pub shard: usize,
    #[serde(flatten)]
    pub stats: Option<ParticipantStats>,
    /// Its shard's socket dwell and forwarding latency (mean, µs).
    pub shard_dwell_mean_us: f64,
    pub shard_forward_mean_us: f64,
}

#[derive(Serialize)]
pub struct RoomStatsOut {
    pub room: String,
    pub shards: Vec<usize>,
    pub participants: Vec<ParticipantOut>,
}

#[derive(Serialize)]
pub struct StatsOut {
    pub shards: Vec<ShardOut>,
    pub total: Counters,
    pub rooms: usize,
    pub participants: usize,
    pub admission_refusals: u64,
    pub room_detail: Vec<RoomStatsOut>,
}

fn lines_out(lines: &[MediaLine]) -> Vec<TrackOut> {
    lines
        .iter()
        .map(|l| TrackOut {
            mid: l.mid.to_string(),
            kind: corelay_core::events::kind_str(l.kind),
        })
        .collect()
}

fn valid_room_name(room: &str) -> bool {
    !room.is_empty()
        && room.len() <= 64
        && room
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl State {
    pub fn new(settings: RtcSettings, limits: Limits, shards: Vec<ShardHandle>) -> Self {
        State {
            settings,
            limits,
            shards: shards
                .into_iter()
                .map(|handle| ShardState {
                    last: Report {
                        shard: handle.index,
                        ..Default::default()
                    },
                    handle,
                    participants: 0,
                })
                .collect(),
            rooms: BTreeMap::new(),
            where_is: HashMap::new(),
            // Ids are not guessable from the outside: they start at a random point.
            next_participant: fastrand::u64(1 << 32..1 << 44),
            next_room: 1,
            admission_refusals: 0,
            detail: HashMap::new(),
        }
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Admission control and placement: the room's own shard while it has
    /// room (zero hops), else the least loaded shard that can take one more.
    fn place(&mut self, room: &str) -> Result<usize, ApiError> {
        let lim = &self.limits;
        let fits = |s: &ShardState| {
            s.participants < lim.max_participants_per_shard && s.last.busy < lim.max_shard_load
        };
        if let Some(r) = self.rooms.get(room) {
            // The shard hosting most of the room first.
            let mut counts: Vec<(usize, usize)> = Vec::new();
            for m in &r.members {
                match counts.iter_mut().find(|(s, _)| *s == m.shard) {
                    Some(c) => c.1 += 1,
                    None => counts.push((m.shard, 1)),
                }
            }
            counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            for (s, _) in counts {
                if self.shards.get(s).is_some_and(fits) {
                    return Ok(s);
                }
            }
        }
        let best = self
            .shards
            .iter()
            .filter(|s| fits(s))
            .min_by(|a, b| {
                a.participants
                    .cmp(&b.participants)
                    .then(a.last.busy.total_cmp(&b.last.busy))
            })
            .map(|s| s.handle.index);
        best.ok_or_else(|| {
            self.admission_refusals += 1;
            let full = self
                .shards
                .iter()
                .all(|s| s.participants >= lim.max_participants_per_shard);
            let message = if full {
                format!(
                    "all {} shards are full ({} participants each, --max-participants-per-shard)",
                    self.shards.len(),
                    lim.max_participants_per_shard
                )
            } else {
                format!(
                    "every shard with room is busier than {:.0}% (--max-shard-load)",
                    lim.max_shard_load * 100.0
                )
            };
            ApiError {
                retry_after: Some(RETRY_AFTER_SECS),
                ..ApiError::new(503, "no_capacity", message)
            }
        })
    }

    /// Accepts an offer and places the new participant.
    pub fn join(
        &mut self,
        room: &str,
        name: Option<&str>,
        sdp: &str,
        flavor: Flavor,
    ) -> Result<Joined, ApiError> {
        if !valid_room_name(room) {
            return Err(ApiError::new(
                400,
                "bad_request",
                "room names are 1-64 characters of A-Z, a-z, 0-9, '-', '_' and '.'",
            ));
        }
        let shard = self.place(room)?;
        let Some(handle) = self.shards.get(shard).map(|s| s.handle.clone()) else {
            return Err(ApiError::new(500, "internal", "placement chose no shard"));
        };
        let accepted = accept_offer(&self.settings, Instant::now(), sdp, handle.advertised)?;
        let id = ParticipantId(self.next_participant);
        self.next_participant += 1;
        let name = name
            .map(|n| {
                n.chars()
                    .filter(|c| !c.is_control())
                    .take(64)
                    .collect::<String>()
            })
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("guest-{:04x}", id.0 & 0xffff));
        let next_room = &mut self.next_room;
        let r = self.rooms.entry(room.to_string()).or_insert_with(|| {
            *next_room += 1;
            Room {
                id: RoomId(*next_room),
                members: Vec::new(),
            }
        });
        r.members.push(Member {
            id,
            name: name.clone(),
            shard,
            flavor,
            tracks: accepted.tracks.clone(),
            slots: accepted.slots.clone(),
            version: 1,
            joined: Instant::now(),
        });
        let room_id = r.id;
        let answer = accepted.answer.clone();
        self.where_is.insert(id, room.to_string());
        if let Some(s) = self.shards.get_mut(shard) {
            s.participants += 1;
        }
        let roster = self.roster(room);
        if let Some(roster) = roster.clone() {
            let _ = handle.commands.send(Command::Add {
                id,
                room: room_id,
                name,
                accepted: Box::new(accepted),
                roster,
            });
        }
        self.broadcast(room, roster, &[shard]);
        tracing::info!(participant = %id, room, shard, ?flavor, "joined");
        Ok(Joined {
            id,
            answer,
            etag: etag(id, 1),
        })
    }

    /// Removes a participant (API DELETE, or its shard reported it gone).
    pub fn leave(&mut self, id: ParticipantId, tell_shard: bool) -> Result<(), ApiError> {
        let room = self
            .where_is
            .remove(&id)
            .ok_or_else(|| ApiError::not_found(format!("no participant {id}")))?;
        let Some(r) = self.rooms.get_mut(&room) else {
            return Ok(());
        };
        let Some(pos) = r.members.iter().position(|m| m.id == id) else {
            return Ok(());
        };
        let m = r.members.remove(pos);
        self.detail.remove(&id);
        if let Some(s) = self.shards.get_mut(m.shard) {
            s.participants = s.participants.saturating_sub(1);
            if tell_shard {
                let _ = s.handle.commands.send(Command::Remove { id });
            }
        }
        if r.members.is_empty() {
            self.rooms.remove(&room);
            tracing::info!(participant = %id, room, "left; room closed");
            return Ok(());
        }
        let roster = self.roster(&room);
        // The leaver's shard needs the new roster too if it hosts others.
        self.broadcast(&room, roster, &[]);
        tracing::info!(participant = %id, room, "left");
        Ok(())
    }

    /// Looks up a participant for the API: it must be in `room` and of `flavor`.
    fn find(
        &self,
        room: &str,
        id: &str,
        flavor: Flavor,
    ) -> Result<(ParticipantId, &Member), ApiError> {
        let not_found = || ApiError::not_found(format!("no participant {id} in room {room}"));
        let pid: ParticipantId = id.parse().map_err(|_| not_found())?;
        let m = self
            .rooms
            .get(room)
            .and_then(|r| r.members.iter().find(|m| m.id == pid))
            .filter(|m| m.flavor == flavor)
            .ok_or_else(not_found)?;
        Ok((pid, m))
    }

    pub fn leave_in(&mut self, room: &str, id: &str, flavor: Flavor) -> Result<(), ApiError> {
        let (pid, _) = self.find(room, id, flavor)?;
        self.leave(pid, true)
    }

    /// Starts a renegotiation: checks the ETag and returns what to send the shard.
    pub fn begin_renegotiate(
        &self,
        room: &str,
        id: &str,
        if_match: Option<&str>,
    ) -> Result<(ParticipantId, ShardHandle), ApiError> {
        let (pid, m) = self.find(room, id, Flavor::Participant)?;
        let current = etag(pid, m.version);
        match if_match {
            None => Err(ApiError::new(
                428,
                "precondition_required",
                "PATCH needs If-Match with the participant's current ETag",
            )),
            Some(v) if v.trim() != current && v.trim() != "*" => Err(ApiError::new(
                412,
                "etag_mismatch",
                format!("If-Match {v} does not match the current ETag {current}"),
            )),
            Some(_) => self
                .shards
                .get(m.shard)
                .map(|s| (pid, s.handle.clone()))
                .ok_or_else(|| ApiError::new(500, "internal", "participant on unknown shard")),
        }
    }

    /// Records a finished renegotiation; returns the new ETag.
    pub fn finish_renegotiate(&mut self, pid: ParticipantId) -> Option<String> {
        let room = self.where_is.get(&pid)?;
        let m = self
            .rooms
            .get_mut(room)?
            .members
            .iter_mut()
            .find(|m| m.id == pid)?;
        m.version += 1;
        Some(etag(pid, m.version))
    }

    /// The roster of `room` as the shards get it.
    fn roster(&self, room: &str) -> Option<RoomUpdate> {
        let r = self.rooms.get(room)?;
        Some(RoomUpdate {
            room: r.id,
            name: room.to_string(),
            members: r
                .members
                .iter()
                .map(|m| MemberInfo {
                    id: m.id,
                    name: m.name.clone(),
                    shard: m.shard,
                    tracks: m.tracks.clone(),
                })
                .collect(),
        })
    }

    /// Sends the roster to every shard hosting a member, except those in `skip`.
    fn broadcast(&self, room: &str, roster: Option<RoomUpdate>, skip: &[usize]) {
        let (Some(roster), Some(r)) = (roster, self.rooms.get(room)) else {
            return;
        };
        let mut shards: Vec<usize> = r.members.iter().map(|m| m.shard).collect();
        shards.sort_unstable();
        shards.dedup();
        for s in shards.into_iter().filter(|s| !skip.contains(s)) {
            if let Some(st) = self.shards.get(s) {
                let _ = st.handle.commands.send(Command::Room(roster.clone()));
            }
        }
    }

    /// Something a shard reported.
    pub fn on_shard(&mut self, msg: ToControl) {
        match msg {
            ToControl::Report(mut r) => {
                if let Some(detail) = r.participants_detail.take() {
                    for d in detail {
                        if self.where_is.contains_key(&d.id) {
                            self.detail.insert(d.id, d);
                        }
                    }
                }
                if let Some(s) = self.shards.get_mut(r.shard) {
                    s.last = *r;
                }
            }
            ToControl::Event(ShardEvent::Left { id, reason }) => {
                tracing::info!(participant = %id, reason, "removed by its shard");
                let _ = self.leave(id, false);
            }
            ToControl::Event(ShardEvent::Connected { id }) => {
                tracing::debug!(participant = %id, "connected");
            }
            ToControl::Event(ShardEvent::LinesChanged { id, tracks, slots }) => {
                let Some(room) = self.where_is.get(&id).cloned() else {
                    return;
                };
                if let Some(m) = self
                    .rooms
                    .get_mut(&room)
                    .and_then(|r| r.members.iter_mut().find(|m| m.id == id))
                {
                    m.tracks = tracks;
                    m.slots = slots;
                }
                let roster = self.roster(&room);
                self.broadcast(&room, roster, &[]);
            }
        }
    }

    pub fn rooms_json(&self) -> Vec<RoomSummary> {
        self.rooms
            .iter()
            .map(|(name, r)| {
                let mut shards: Vec<usize> = r.members.iter().map(|m| m.shard).collect();
                shards.sort_unstable();
                shards.dedup();
                RoomSummary {
                    room: name.clone(),
                    participants: r.members.len(),
                    shards,
                }
            })
            .collect()
    }

    pub fn room_json(&self, room: &str) -> Option<Vec<MemberOut>> {
        let r = self.rooms.get(room)?;
        Some(
            r.members
                .iter()
                .map(|m| MemberOut {
                    id: m.id.to_string(),
                    name: m.name.clone(),
                    shard: m.shard,
                    kind: m.flavor,
                    tracks: lines_out(&m.tracks),
                    slots: lines_out(&m.slots),
                    joined_secs_ago: m.joined.elapsed().as_secs(),
                })
                .collect(),
        )
    }

    pub fn stats_json(&self) -> StatsOut {
        let mut total = Counters::default();
        for s in &self.shards {
            total.add(&s.last.counters);
        }
        StatsOut {
            shards: self
                .shards
                .iter()
                .map(|s| ShardOut {
                    shard: s.handle.index,
                    udp: s.handle.advertised.to_string(),
                    participants: s.participants,
                    rooms: s.last.rooms,
                    busy: s.last.busy,
                    loop_iterations: s.last.loop_iterations,
                    counters: s.last.counters,
                    socket_dwell: (&s.last.dwell).into(),
                    forward_latency: (&s.last.forward_local).into(),
                    forward_cross_shard_latency: (&s.last.forward_cross).into(),
                    loop_iteration: (&s.last.iteration).into(),
                })
                .collect(),
            total,
            rooms: self.rooms.len(),
            participants: self.where_is.len(),
            admission_refusals: self.admission_refusals,
            room_detail: self
                .rooms
                .iter()
                .map(|(name, r)| {
                    let mut shards: Vec<usize> = r.members.iter().map(|m| m.shard).collect();
                    shards.sort_unstable();
                    shards.dedup();
                    RoomStatsOut {
                        room: name.clone(),
                        shards,
                        participants: r
                            .members
                            .iter()
                            .map(|m| {
                                let last = self.shards.get(m.shard).map(|s| &s.last);
                                ParticipantOut {
                                    id: m.id.to_string(),
                                    name: m.name.clone(),
                                    shard: m.shard,
                                    stats: self.detail.get(&m.id).cloned(),
                                    shard_dwell_mean_us: last.map_or(0.0, |l| l.dwell.mean_us()),
                                    shard_forward_mean_us: last
                                        .map_or(0.0, |l| l.forward_local.mean_us()),
                                }
                            })
                            .collect(),
                    }
                })
                .collect(),
        }
    }

    /// What a Prometheus scrape shows.
    pub fn metrics_snapshot(&self) -> metrics::Snapshot {
        metrics::Snapshot {
            shards: self
                .shards
                .iter()
                .map(|s| {
                    let mut r = s.last.clone();
                    r.participants_detail = None;
                    (r, s.participants)
                })
                .collect(),
            rooms: self.rooms.len(),
            admission_refusals: self.admission_refusals,
        }
    }

    /// Asks every shard to close its connections; resolves when all did.
    pub fn shutdown(&self) -> Vec<oneshot::Receiver<()>> {
        self.shards
            .iter()
            .filter_map(|s| {
                let (tx, rx) = oneshot::channel();
                s.handle
                    .commands
                    .send(Command::Shutdown { done: tx })
                    .ok()
                    .map(|_| rx)
            })
            .collect()
    }
}

fn etag(id: ParticipantId, version: u64) -> String {
    format!("\"{id}.{version}\"")
}

/// Renegotiates on the participant's shard (PATCH).
pub async fn renegotiate(
    state: &Shared,
    room: &str,
    id: &str,
    if_match: Option<&str>,
    sdp: String,
) -> Result<(String, String), ApiError> {
    let (pid, handle) = lock(state).begin_renegotiate(room, id, if_match)?;
    let (tx, rx) = oneshot::channel();
    handle
        .commands
        .send(Command::Renegotiate {
            id: pid,
            sdp,
            reply: tx,
        })
        .map_err(|_| ApiError::new(503, "shard_unavailable", "the participant's shard stopped"))?;
    let answer = match tokio::time::timeout(SHARD_REPLY_TIMEOUT, rx).await {
        Ok(Ok(r)) => r?,
        _ => {
            return Err(ApiError::new(
                503,
                "shard_unavailable",
                "the participant's shard did not answer",
            ));
        }
    };
    let etag = lock(state)
        .finish_renegotiate(pid)
        .ok_or_else(|| ApiError::not_found(format!("participant {id} left meanwhile")))?;
    Ok((answer, etag))
}

/// The control state's lock. A poisoned lock means a handler panicked while
/// holding it; the state is still structurally valid, so keep serving.
pub fn lock(state: &Shared) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Applies shard reports and events until every shard is gone.
pub async fn pump(state: Shared, mut rx: mpsc::UnboundedReceiver<ToControl>) {
    while let Some(msg) = rx.recv().await {
        lock(&state).on_shard(msg);
    }
}
