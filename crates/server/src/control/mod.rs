//! The control thread: the room roster, placement of participants on shards,
//! admission control, and the shards' figures.
//!
//! It accepts SDP offers (building each participant's str0m `Rtc`), hands the
//! `Rtc` to the chosen shard as a value, and tells every shard of a room when
//! its roster changes. A renegotiation is validated and rehearsed here
//! ([`corelay_core::offer::check_renegotiation`]); its shard only applies the
//! prepared offer. It bounds what clients can make the server hold (rooms,
//! participants per room, offer size) and keeps track of shards that failed:
//! they get no new participants and turn `/healthz` to 503. It never touches
//! a media packet.
//!
//! The state sits behind one `Mutex` that only this thread's tasks (HTTP
//! handlers and the shard-event pump) take, never across an await: the lock
//! is uncontended by construction and the shards never see it.
#![allow(
    clippy::disallowed_types,
    reason = "the control thread's own state lock; shards never take it (see above)"
)]

pub mod assets;
pub mod auth;
pub mod http;
pub mod metrics;
pub mod serve;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelay_core::metrics::{Counters, LatencyHistogram, ParticipantStats};
use corelay_core::offer::{MediaLine, accept_offer, check_renegotiation};
use corelay_core::room::{MemberInfo, RoomUpdate};
use corelay_core::{OfferError, ParticipantId, RoomId, RtcSettings, ShardEvent, ShardId};
use serde::Serialize;
use str0m::change::SdpOffer;
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
        let status = match e {
            OfferError::UnknownParticipant(_) => 404,
            OfferError::TooLarge { .. } => 413,
            OfferError::RenegotiationFailed => 500,
            OfferError::Bad(_) | OfferError::TooManyLines { .. } | OfferError::CodecMismatch(_) => {
                400
            }
        };
        ApiError::new(status, e.code(), e.to_string())
    }
}

struct Member {
    id: ParticipantId,
    /// The secret part of its resource URL (a capability: 128 random bits).
    resource: String,
    /// The offer its session state derives from: the last one applied.
    offer: String,
    /// A renegotiation is on its way to the shard: another must wait (409).
    renegotiating: bool,
    /// Who it is: the access token's `sub`; without authentication its id.
    identity: String,
    name: String,
    shard: ShardId,
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
    /// Why the shard thread stopped, when it did: it takes no one new.
    failed: Option<String>,
    participants: usize,
    last: Report,
}

pub struct Limits {
    pub max_participants_per_shard: usize,
    pub max_shard_load: f64,
    pub max_participants_per_room: usize,
    pub max_rooms: usize,
}

pub struct State {
    settings: RtcSettings,
    limits: Limits,
    shards: Vec<ShardState>,
    rooms: BTreeMap<String, Room>,
    where_is: HashMap<ParticipantId, String>,
    next_room: u64,
    admission_refusals: u64,
    /// Latest per-participant transport figures from the shards.
    detail: HashMap<ParticipantId, ParticipantStats>,
}

pub type Shared = Arc<Mutex<State>>;

/// A successful join.
pub struct Joined {
    pub id: ParticipantId,
    /// The secret id in its resource URL.
    pub resource: String,
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
    pub identity: String,
    pub name: String,
    pub shard: ShardId,
    pub kind: Flavor,
    pub tracks: Vec<TrackOut>,
    pub slots: Vec<TrackOut>,
    pub joined_secs_ago: u64,
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

/// The one rule for room names (docs/api.md): 1-64 characters of A-Z, a-z,
/// 0-9, '-', '_' and '.', starting with a letter or digit (so never "." or
/// "..", which URL normalisation would turn into another path).
pub fn valid_room_name(room: &str) -> bool {
    room.len() <= 64
        && room
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && room
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// An unguessable resource id: 128 bits from the operating system's CSPRNG.
fn capability() -> Result<String, ApiError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|_| ApiError::new(500, "internal", "no randomness available"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
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
                    failed: None,
                    participants: 0,
                })
                .collect(),
            rooms: BTreeMap::new(),
            where_is: HashMap::new(),
            // Ids are not guessable from the outside: they start at a random point.
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
    fn place(&mut self, room: &str) -> Result<ShardId, ApiError> {
        let lim = &self.limits;
        let fits = |s: &ShardState| {
            s.failed.is_none()
                && s.participants < lim.max_participants_per_shard
                && s.last.busy < lim.max_shard_load
        };
        if let Some(r) = self.rooms.get(room) {
            // The shard hosting most of the room first.
            let mut counts: Vec<(ShardId, usize)> = Vec::new();
            for m in &r.members {
                match counts.iter_mut().find(|(s, _)| *s == m.shard) {
                    Some(c) => c.1 += 1,
                    None => counts.push((m.shard, 1)),
                }
            }
            counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            for (s, _) in counts {
                if self.shards.get(s.0).is_some_and(fits) {
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

    /// Accepts an offer and places the new participant. `identity`: the
    /// access token's `sub` (None without authentication: the id stands in).
    pub fn join(
        &mut self,
        room: &str,
        name: Option<&str>,
        identity: Option<&str>,
        sdp: &str,
        flavor: Flavor,
    ) -> Result<Joined, ApiError> {
        if !valid_room_name(room) {
            return Err(ApiError::new(
                400,
                "bad_room_name",
                "room names are 1-64 characters of A-Z, a-z, 0-9, '-', '_' and '.', starting with a letter or digit",
            ));
        }
        match self.rooms.get(room) {
            Some(r) if r.members.len() >= self.limits.max_participants_per_room => {
                return Err(ApiError::new(
                    409,
                    "room_full",
                    format!(
                        "room {room} has {} participants, the most allowed (--max-participants-per-room)",
                        r.members.len()
                    ),
                ));
            }
            None if self.rooms.len() >= self.limits.max_rooms => {
                self.admission_refusals += 1;
                return Err(ApiError {
                    retry_after: Some(RETRY_AFTER_SECS),
                    ..ApiError::new(
                        503,
                        "too_many_rooms",
                        format!(
                            "{} rooms are open, the most allowed (--max-rooms)",
                            self.rooms.len()
                        ),
                    )
                });
            }
            _ => {}
        }
        let shard = self.place(room)?;
        let Some(handle) = self.shards.get(shard.0).map(|s| s.handle.clone()) else {
            return Err(ApiError::new(500, "internal", "placement chose no shard"));
        };
        let accepted = accept_offer(&self.settings, Instant::now(), sdp, handle.advertised)?;
        let resource = capability()?;
        // Public ids (rosters, logs) are random too, so they tell nothing of
        // how many joined; they are not secrets (the resource is).
        let id = loop {
            let id = ParticipantId(fastrand::u64(1..1 << 53));
            if !self.where_is.contains_key(&id) {
                break id;
            }
        };
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
            resource: resource.clone(),
            offer: sdp.to_string(),
            renegotiating: false,
            identity: identity.map_or_else(|| id.to_string(), str::to_string),
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
        if let Some(s) = self.shards.get_mut(shard.0) {
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
        tracing::info!(participant = %id, room, shard = shard.0, ?flavor, "joined");
        Ok(Joined {
            id,
            resource,
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
        if let Some(s) = self.shards.get_mut(m.shard.0) {
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
        // The message does not echo the id: it is a secret.
        let not_found = || ApiError::not_found(format!("no such participant in room {room}"));
        let m = self
            .rooms
            .get(room)
            .and_then(|r| r.members.iter().find(|m| m.resource == id))
            .filter(|m| m.flavor == flavor)
            .ok_or_else(not_found)?;
        Ok((m.id, m))
    }

    /// Who owns a participant resource, for authorizing PATCH/DELETE:
    /// its id and identity (404 like every other lookup).
    pub fn owner(
        &self,
        room: &str,
        id: &str,
        flavor: Flavor,
    ) -> Result<(ParticipantId, String), ApiError> {
        let (pid, m) = self.find(room, id, flavor)?;
        Ok((pid, m.identity.clone()))
    }

    pub fn leave_in(&mut self, room: &str, id: &str, flavor: Flavor) -> Result<(), ApiError> {
        let (pid, _) = self.find(room, id, flavor)?;
        self.leave(pid, true)
    }

    /// The preconditions of a PATCH: the resource exists and `If-Match` is
    /// its current ETag (a weak `*` is refused: a renegotiation must say
    /// which state it builds on).
    fn check_patch(
        &self,
        room: &str,
        id: &str,
        if_match: Option<&str>,
    ) -> Result<(ParticipantId, &Member), ApiError> {
        let (pid, m) = self.find(room, id, Flavor::Participant)?;
        let current = etag(pid, m.version);
        match if_match.map(str::trim) {
            None | Some("*") => Err(ApiError::new(
                428,
                "precondition_required",
                "PATCH needs If-Match with the participant's current ETag (\"*\" is not accepted)",
            )),
            Some(v) if v != current => Err(ApiError::new(
                412,
                "etag_mismatch",
                format!("If-Match does not match the current ETag {current}"),
            )),
            Some(_) => Ok((pid, m)),
        }
    }

    /// Starts a renegotiation: checks the preconditions, validates and
    /// rehearses the offer against the participant's current one, and marks
    /// it in flight. Returns what its shard needs to apply it.
    fn begin_renegotiate(
        &mut self,
        room: &str,
        id: &str,
        if_match: Option<&str>,
        sdp: &str,
    ) -> Result<(ParticipantId, ShardHandle, SdpOffer), ApiError> {
        let (pid, m) = self.check_patch(room, id, if_match)?;
        if m.renegotiating {
            return Err(ApiError::new(
                409,
                "renegotiation_in_progress",
                "another renegotiation of this participant is in progress",
            ));
        }
        let handle = self
            .shards
            .get(m.shard.0)
            .filter(|s| s.failed.is_none())
            .map(|s| s.handle.clone())
            .ok_or_else(|| {
                ApiError::new(503, "shard_unavailable", "the participant's shard stopped")
            })?;
        let offer = check_renegotiation(&self.settings, Instant::now(), &m.offer, sdp)?;
        if let Some(m) = self.member_mut(pid) {
            m.renegotiating = true;
        }
        Ok((pid, handle, offer))
    }

    /// Records the end of a renegotiation: the offer now in force when it
    /// applied (`Some`), nothing new when it did not. Returns the ETag.
    fn finish_renegotiate(
        &mut self,
        pid: ParticipantId,
        applied: Option<String>,
    ) -> Option<String> {
        let m = self.member_mut(pid)?;
        m.renegotiating = false;
        if let Some(offer) = applied {
            m.offer = offer;
            m.version += 1;
        }
        Some(etag(pid, m.version))
    }

    fn member_mut(&mut self, pid: ParticipantId) -> Option<&mut Member> {
        let room = self.where_is.get(&pid)?;
        self.rooms
            .get_mut(room)?
            .members
            .iter_mut()
            .find(|m| m.id == pid)
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
    fn broadcast(&self, room: &str, roster: Option<RoomUpdate>, skip: &[ShardId]) {
        let (Some(roster), Some(r)) = (roster, self.rooms.get(room)) else {
            return;
        };
        let mut shards: Vec<ShardId> = r.members.iter().map(|m| m.shard).collect();
        shards.sort_unstable();
        shards.dedup();
        for s in shards.into_iter().filter(|s| !skip.contains(s)) {
            if let Some(st) = self.shards.get(s.0) {
                let _ = st.handle.commands.send(Command::Room(roster.clone()));
            }
        }
    }

    /// Shards whose thread stopped, and why.
    pub fn failed_shards(&self) -> Vec<(ShardId, String)> {
        self.shards
            .iter()
            .filter_map(|s| s.failed.clone().map(|why| (s.handle.index, why)))
            .collect()
    }

    /// A shard thread stopped: it takes no one new, and its participants
    /// (whose calls ended with it) leave their rooms.
    fn shard_failed(&mut self, shard: ShardId, reason: String) {
        let Some(s) = self.shards.get_mut(shard.0) else {
            return;
        };
        s.failed = Some(reason);
        let gone: Vec<ParticipantId> = self
            .rooms
            .values()
            .flat_map(|r| r.members.iter().filter(|m| m.shard == shard).map(|m| m.id))
            .collect();
        for id in gone {
            let _ = self.leave(id, false);
        }
    }

    /// Something a shard reported.
    pub fn on_shard(&mut self, msg: ToControl) {
        match msg {
            ToControl::Failed { shard, reason } => {
                tracing::error!(
                    shard = shard.0,
                    "shard failed: {reason}; it takes no new participants"
                );
                self.shard_failed(shard, reason);
            }
            ToControl::Report(mut r) => {
                if let Some(detail) = r.participants_detail.take() {
                    for d in detail {
                        if self.where_is.contains_key(&d.id) {
                            self.detail.insert(d.id, d);
                        }
                    }
                }
                if let Some(s) = self.shards.get_mut(r.shard.0) {
                    s.last = *r;
                }
            }
            ToControl::Event(ShardEvent::Left { id, reason }) => {
                tracing::info!(participant = %id, reason = reason.as_str(), "removed by its shard");
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
                let mut shards: Vec<ShardId> = r.members.iter().map(|m| m.shard).collect();
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
                    identity: m.identity.clone(),
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
                    let mut shards: Vec<ShardId> = r.members.iter().map(|m| m.shard).collect();
                    shards.sort_unstable();
                    shards.dedup();
                    RoomStatsOut {
                        room: name.clone(),
                        shards,
                        participants: r
                            .members
                            .iter()
                            .map(|m| {
                                let last = self.shards.get(m.shard.0).map(|s| &s.last);
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
            failed: self.failed_shards().into_iter().map(|(s, _)| s).collect(),
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

/// Renegotiates (PATCH): validated and rehearsed here, applied whole by the
/// participant's shard, or refused with the participant left as it was.
pub async fn renegotiate(
    state: &Shared,
    room: &str,
    id: &str,
    if_match: Option<&str>,
    sdp: String,
) -> Result<(String, String), ApiError> {
    let (pid, handle, offer) = lock(state).begin_renegotiate(room, id, if_match, &sdp)?;
    // If this request is dropped midway (the client went away), the
    // participant must not stay marked as renegotiating.
    struct InFlight<'a>(&'a Shared, ParticipantId, bool);
    impl Drop for InFlight<'_> {
        fn drop(&mut self) {
            if !self.2 {
                lock(self.0).finish_renegotiate(self.1, None);
            }
        }
    }
    let mut in_flight = InFlight(state, pid, false);
    let (tx, rx) = oneshot::channel();
    let sent = handle.commands.send(Command::Renegotiate {
        id: pid,
        offer: Box::new(offer),
        reply: tx,
    });
    let outcome = match sent {
        Err(_) => Err(ApiError::new(
            503,
            "shard_unavailable",
            "the participant's shard stopped",
        )),
        Ok(()) => match tokio::time::timeout(SHARD_REPLY_TIMEOUT, rx).await {
            Ok(Ok(r)) => r.map_err(ApiError::from),
            _ => Err(ApiError::new(
                503,
                "shard_unavailable",
                "the participant's shard did not answer",
            )),
        },
    };
    let applied = outcome.as_ref().ok().map(|_| sdp);
    in_flight.2 = true;
    let etag = lock(state).finish_renegotiate(pid, applied);
    let answer = outcome?;
    let etag = etag.ok_or_else(|| ApiError::not_found("the participant left meanwhile"))?;
    Ok((answer, etag))
}

/// The control state's lock. A poisoned lock means a handler panicked while
/// holding it; the state is still structurally valid, so keep serving.
pub fn lock(state: &Shared) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Applies shard reports and events until every shard is gone, or until a
/// shard fails when `exit_on_failure`: then it returns why.
pub async fn pump(
    state: Shared,
    mut rx: mpsc::UnboundedReceiver<ToControl>,
    exit_on_failure: bool,
) -> Option<String> {
    while let Some(msg) = rx.recv().await {
        let failure = match &msg {
            ToControl::Failed { shard, reason } => Some(format!("shard {shard} failed: {reason}")),
            _ => None,
        };
        lock(&state).on_shard(msg);
        if exit_on_failure && failure.is_some() {
            return failure;
        }
    }
    None
}
