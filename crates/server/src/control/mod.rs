//! The control thread: the room roster, placement of participants on shards,
//! admission control, and the shards' figures. It never touches a media
//! packet.
//!
//! Its layers, one module each:
//! - [`rooms`]: the directory of rooms and members, placement, admission
//!   limits, rosters and ETags ([`corelay_core::directory`], shared with the
//!   simulator: plain data and decisions, with its own error type, no HTTP,
//!   no channels, no `Rtc`), and the capabilities and ids the server draws
//!   for it ([`rooms::RandomIds`]).
//! - this module: the [`State`] (the directory, the shards' handles and
//!   latest reports) and the glue that accepts offers (building each
//!   participant's str0m `Rtc`), asks the directory, and tells the shards:
//!   the `Rtc` goes to the chosen shard as a value, and every shard of a room
//!   hears when its roster changes. A renegotiation is validated and
//!   rehearsed here ([`corelay_core::offer::check_renegotiation`]); its shard
//!   only applies the prepared offer. Failed shards get no new participants
//!   and turn `/healthz` to 503.
//! - [`diagnosis`]: the live verdict on each subscriber slot, judged once
//!   a second from the shards' reports (issue 52).
//! - [`cluster`]: this node in a cluster (`--cluster`): its heartbeat in the
//!   node directory on NATS, where a join it refuses (or any join while it
//!   drains) is redirected, the view `/api/v1/cluster` shows.
//! - [`http`]: the API's handlers (parse, call, map errors to statuses);
//!   [`views`]: the JSON documents it returns; [`auth`]: who may call what;
//!   [`serve`]: connections; [`metrics`]: the Prometheus rendering;
//!   [`budget`]: the cgroup CPU quota that shard load is judged against.
//!
//! The state sits behind one `Mutex` that only this thread's tasks (HTTP
//! handlers and the shard-event pump) take, never across an await and never
//! while building an `Rtc` or parsing SDP (every `Rtc` takes the server's
//! one DTLS certificate, made at startup, so a join generates none): those
//! run without the lock, on tokio's blocking pool, and a short critical
//! section then admits, checking the limits again. The lock is uncontended
//! by construction and the shards never see it.
#![allow(
    clippy::disallowed_types,
    reason = "the control thread's own state lock; shards never take it (see above)"
)]

pub mod assets;
pub mod auth;
pub mod budget;
pub mod cluster;
pub mod diagnosis;
pub mod http;
pub mod metrics;
pub mod rooms;
pub mod sdpfrag;
pub mod serve;
pub mod turn;
pub mod views;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelay_core::metrics::ParticipantStats;
use corelay_core::offer::{Accepted, MediaAt, accept_offer_on, check_renegotiation};
use corelay_core::room::RoomUpdate;
use corelay_core::{LeaveReason, OfferError, ParticipantId, RtcSettings, ShardEvent, ShardId};
use corelay_plane::{ShardCommand, ShardHandle, ShardReport, ToControl};
use tokio::sync::{mpsc, oneshot};

pub use self::http::ApiError;
use self::rooms::{Admission, Departure, Directory, NewMember, RandomIds};
pub use self::rooms::{Flavor, Limits, RoomError, valid_room_name};

/// How long a renegotiation may wait for its shard.
const SHARD_REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Times a join accepts its offer for a shard that placement then no longer
/// picks (the directory changed meanwhile) before it takes any shard that
/// can still take it; and the most offers one join accepts.
const PLACEMENT_TRIES: usize = 3;
const MAX_OFFER_ACCEPTS: usize = 8;

/// A shard as the control thread sees it: how to reach it, its last figures.
struct ShardLink {
    handle: ShardHandle,
    last: ShardReport,
}

pub struct State {
    /// Shared with join requests that accept offers outside the lock.
    settings: Arc<RtcSettings>,
    shards: Vec<ShardLink>,
    rooms: Directory,
    /// Latest per-participant transport figures from the shards.
    detail: HashMap<ParticipantId, ParticipantStats>,
    /// The live verdict per subscriber slot, judged from those.
    diagnoses: diagnosis::Diagnoses,
    /// The process's CPU quota, which shard load is judged against.
    budget: budget::CpuBudget,
    /// The admission limits (the directory applies them; the cluster
    /// announces what they would still take).
    limits: Limits,
    /// This node in a cluster; None without `--cluster`.
    cluster: Option<cluster::Node>,
    /// The recordings (issue 53); None until the server sets them up.
    recordings: Option<crate::recorder::Recordings>,
    /// Whether the shared UDP port's eBPF steering is on.
    port_steering: bool,
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

impl State {
    pub fn new(settings: RtcSettings, limits: Limits, shards: Vec<ShardHandle>) -> Self {
        let shard_count = shards.len();
        let mut rooms = Directory::new(limits.clone(), shards.len());
        // A lone node's own key for room ids (a cluster's comes from its
        // secret: set_cluster).
        let mut key = [0u8; 16];
        if getrandom::fill(&mut key).is_ok() {
            let (a, b) = key.split_at(8);
            let word = |x: &[u8]| x.iter().fold(0u64, |w, byte| (w << 8) | u64::from(*byte));
            rooms.set_room_key((word(a), word(b)));
        }
        State {
            settings: Arc::new(settings),
            rooms,
            limits,
            cluster: None,
            recordings: None,
            port_steering: false,
            shards: shards
                .into_iter()
                .map(|handle| ShardLink {
                    last: ShardReport {
                        shard: handle.index,
                        ..Default::default()
                    },
                    handle,
                })
                .collect(),
            detail: HashMap::new(),
            diagnoses: diagnosis::Diagnoses::new(shard_count),
            budget: budget::CpuBudget::default(),
        }
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Makes this node a cluster node (`--cluster`): its rooms are named
    /// as every node of the cluster names them.
    pub fn set_cluster(&mut self, node: cluster::Node) {
        self.rooms.set_room_key(node.room_key());
        self.cluster = Some(node);
    }

    pub fn set_recordings(&mut self, recordings: crate::recorder::Recordings) {
        self.recordings = Some(recordings);
    }

    /// Starts recording `room` on every shard.
    pub fn start_recording(
        &mut self,
        room: &str,
    ) -> Result<crate::recorder::Status, crate::recorder::RecError> {
        let room_id = self.rooms.room_id(room);
        let handles: Vec<ShardHandle> = self.shards.iter().map(|s| s.handle.clone()).collect();
        let recs = self.recordings.as_mut().ok_or_else(|| {
            crate::recorder::RecError::Unavailable("recording is not set up".into())
        })?;
        recs.start(room, room_id, &handles)
    }

    /// Stops recording `id` of `room`: the thread to join and its status.
    pub fn stop_recording(
        &mut self,
        room: &str,
        id: &str,
    ) -> Result<crate::recorder::Stopping, crate::recorder::RecError> {
        let room_id = self.rooms.room_id(room);
        let handles: Vec<ShardHandle> = self.shards.iter().map(|s| s.handle.clone()).collect();
        let recs = self
            .recordings
            .as_mut()
            .ok_or(crate::recorder::RecError::NotFound)?;
        recs.stop(room_id, id, &handles)
    }

    /// Stops every recording (shutdown): their threads, to join.
    pub fn stop_all_recordings(&mut self) -> Vec<crate::recorder::Stopping> {
        let handles: Vec<ShardHandle> = self.shards.iter().map(|s| s.handle.clone()).collect();
        self.recordings
            .as_mut()
            .map(|r| r.stop_all(&handles))
            .unwrap_or_default()
    }

    pub fn recordings(&self, room: &str) -> Vec<crate::recorder::Status> {
        self.recordings
            .as_ref()
            .map(|r| r.list(room))
            .unwrap_or_default()
    }

    pub fn cluster(&self) -> Option<&cluster::Node> {
        self.cluster.as_ref()
    }

    pub fn cluster_mut(&mut self) -> Option<&mut cluster::Node> {
        self.cluster.as_mut()
    }

    fn link(&self, shard: ShardId) -> Option<&ShardLink> {
        self.shards.get(shard.0)
    }

    /// The address a shard's participants send media to (their ICE candidate).
    /// Where a participant of `shard` sends its media.
    fn advertised(&self, shard: ShardId) -> Result<MediaAt, RoomError> {
        self.link(shard)
            .map(|s| MediaAt {
                shard,
                udp: s.handle.advertised,
                tcp: s.handle.advertised_tcp,
            })
            .ok_or(RoomError::NoShard)
    }

    /// Shards whose thread stopped, and why.
    pub fn failed_shards(&self) -> Vec<(ShardId, String)> {
        self.rooms.failed_shards()
    }

    /// Who owns a participant resource, for authorizing PATCH/DELETE:
    /// its id and identity (404 like every other lookup).
    pub fn owner(
        &self,
        room: &str,
        resource: &str,
        flavor: Flavor,
    ) -> Result<(ParticipantId, String), RoomError> {
        let m = self.rooms.find(room, resource, flavor)?;
        Ok((m.id, m.identity.clone()))
    }

    /// What a WHIP/WHEP PATCH needs of a session (404 like every other
    /// lookup): the client's ICE credentials in force, the current ETag, and
    /// the most m-lines an offer, so a fragment, may have.
    pub fn session_ice(
        &self,
        room: &str,
        resource: &str,
        flavor: Flavor,
    ) -> Result<(Option<sdpfrag::IceCredentials>, String, usize), RoomError> {
        let m = self.rooms.find(room, resource, flavor)?;
        Ok((
            sdpfrag::ice_of(m.offer()),
            m.etag(),
            self.settings.offer.max_mlines,
        ))
    }

    /// The preconditions of a PATCH (see [`Directory::check_patch`]).
    pub fn check_patch(
        &self,
        room: &str,
        resource: &str,
        if_match: Option<&str>,
    ) -> Result<(), RoomError> {
        self.rooms.check_patch(room, resource, if_match).map(|_| ())
    }

    /// DELETE of a participant resource.
    pub fn leave_in(
        &mut self,
        room: &str,
        resource: &str,
        flavor: Flavor,
    ) -> Result<(), RoomError> {
        let id = self.rooms.find(room, resource, flavor)?.id;
        self.leave(id, true)
    }

    /// Removes a participant (API DELETE, or its shard reported it gone).
    pub fn leave(&mut self, id: ParticipantId, tell_shard: bool) -> Result<(), RoomError> {
        let d = self.rooms.leave(id)?;
        if tell_shard && let Some(s) = self.link(d.shard) {
            let _ = s.handle.commands.send(ShardCommand::Remove {
                id,
                reason: LeaveReason::Removed,
            });
        }
        self.departed(d, "left");
        Ok(())
    }

    /// Tells the shards of a departure's room, and forgets its figures.
    fn departed(&mut self, d: Departure, reason: &'static str) {
        self.members_changed();
        self.detail.remove(&d.id);
        self.diagnoses.left(d.id, &d.room);
        let Departure {
            id,
            name,
            room,
            roster,
            ..
        } = d;
        match roster {
            None => tracing::info!(participant = %id, room, "left; room closed"),
            Some((mut roster, shards)) => {
                roster.departed = vec![corelay_core::room::Departed { id, name, reason }];
                self.broadcast(&roster, &shards);
                tracing::info!(participant = %id, room, "left");
            }
        }
    }

    /// Sends a roster to these shards.
    fn broadcast(&self, roster: &RoomUpdate, shards: &[ShardId]) {
        for s in shards {
            if let Some(st) = self.link(*s) {
                let _ = st.handle.commands.send(ShardCommand::Room(roster.clone()));
            }
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
                // Its participants' calls ended with it: they leave their
                // rooms (their shard is not told, it is gone).
                for d in self.rooms.shard_failed(shard, reason) {
                    self.departed(d, "shard_failed");
                }
            }
            ToControl::Report(mut r) => {
                let judged = r.participants_detail.take().map(|detail| {
                    let mut ids = Vec::with_capacity(detail.len());
                    for d in detail {
                        if self.rooms.contains(d.id) {
                            ids.push(d.id);
                            self.detail.insert(d.id, d);
                        }
                    }
                    ids
                });
                // Busy of what the shard may use: under a cgroup CPU quota
                // its share of the quota, not a whole core.
                let share = self
                    .budget
                    .per_shard(std::time::Instant::now(), self.shards.len());
                r.busy = (r.busy / share).min(1.0);
                self.rooms.set_busy(r.shard, r.busy);
                self.diagnoses.on_report(
                    Instant::now(),
                    &r,
                    judged.as_deref(),
                    &self.detail,
                    &self.rooms,
                );
                if let Some(s) = self.shards.get_mut(r.shard.0) {
                    s.last = *r;
                }
            }
            ToControl::Event(ShardEvent::Left { id, reason, detail }) => {
                let Ok(d) = self.rooms.leave(id) else {
                    // Already gone from the directory (a DELETE crossed it).
                    tracing::debug!(participant = %id, reason = reason.as_str(), "removed by its shard: {detail}");
                    return;
                };
                // A failure (ICE, consent, DTLS, an error, a panic) is a
                // WARN an operator should see; a client that closed its
                // connection itself (DTLS close_notify) left normally.
                let room = d.room.as_str();
                if reason == LeaveReason::Closed {
                    tracing::info!(participant = %id, room, reason = reason.as_str(), "removed by its shard: {detail}");
                } else {
                    tracing::warn!(participant = %id, room, reason = reason.as_str(), "removed by its shard: {detail}");
                }
                self.departed(d, reason.as_str());
            }
            ToControl::Event(ShardEvent::Connected { id }) => {
                tracing::debug!(participant = %id, "connected");
            }
            ToControl::Event(ShardEvent::TrackState { id, mid, state }) => {
                tracing::debug!(participant = %id, %mid, muted = state.muted, paused = state.paused, "track state");
                if let Some((roster, shards)) = self.rooms.track_state(id, mid, state) {
                    self.broadcast(&roster, &shards);
                    self.members_changed();
                }
            }
            ToControl::Event(ShardEvent::LinesChanged { id, tracks, slots }) => {
                if let Some((roster, shards)) = self.rooms.lines_changed(id, tracks, slots) {
                    self.broadcast(&roster, &shards);
                    self.members_changed();
                }
            }
        }
    }

    /// A participant's live diagnosis (`GET …/diagnosis`): its room and
    /// identity (who may read it) and its slots; None if it is not here.
    pub fn diagnosis(
        &self,
        id: ParticipantId,
    ) -> Option<(String, String, Vec<corelay_core::diagnosis::SlotOut>)> {
        let (room, m) = self.rooms.member(id)?;
        let slots = self.diagnoses.view(id).unwrap_or_default();
        Some((room.to_owned(), m.identity.clone(), slots))
    }

    /// Subscriber-seconds per verdict on each shard.
    pub fn verdict_seconds(&self) -> Vec<Vec<(&'static str, u64)>> {
        (0..self.shards.len())
            .map(|i| self.diagnoses.shard_seconds(i))
            .collect()
    }

    /// Whether the shared UDP port's eBPF steering is on (set at start).
    pub fn set_port_steering(&mut self, on: bool) {
        self.port_steering = on;
    }

    pub fn port_steering(&self) -> bool {
        self.port_steering
    }

    /// What a Prometheus scrape shows.
    pub fn metrics_snapshot(&self) -> metrics::MetricsSnapshot {
        let loads = self.rooms.shard_loads();
        metrics::MetricsSnapshot {
            shards: self
                .shards
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let mut r = s.last.clone();
                    r.participants_detail = None;
                    (r, loads.get(i).map_or(0, |l| l.participants))
                })
                .collect(),
            verdicts: self.verdict_seconds(),
            rooms: self.rooms.room_count(),
            admission_refusals: self.rooms.admission_refusals(),
            failed: self.failed_shards().into_iter().map(|(s, _)| s).collect(),
            cluster: self.cluster.as_ref().map(|node| {
                let (nodes, connected) = node.view();
                metrics::ClusterFigures {
                    nodes: nodes.len(),
                    connected,
                    draining: node.draining(),
                }
            }),
            links: self.relay_links(),
            port_steering: self.port_steering,
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
                    .send(ShardCommand::Shutdown { done: tx })
                    .ok()
                    .map(|_| rx)
            })
            .collect()
    }
}

/// Joins `room` with an SDP offer. `identity`: the access token's `sub`
/// (None without authentication: the id stands in); `publish_data`: its
/// grant to send application messages. With an identity, the
/// join replaces the room's member of the same identity and `flavor`, if
/// any ([`rooms`]: one seat per identity and flavor).
///
/// Admission and placement first (short lock), then the offer is accepted
/// for the chosen shard without the lock and off the control thread (on
/// tokio's blocking pool: parsing the SDP and building the `Rtc` are the
/// expensive part, and other requests go on meanwhile), then a short critical
/// section checks admission again and admits.
/// When placement changed meanwhile, the offer is accepted again for the
/// shard it picks now, so the outcome is the one a join holding the lock
/// throughout would have had.
pub async fn join(
    state: &Shared,
    room: &str,
    name: Option<&str>,
    identity: Option<&str>,
    sdp: &str,
    flavor: Flavor,
    publish_data: bool,
) -> Result<Joined, RoomError> {
    let (mut shard, mut advertised, mut codec, settings) = {
        let mut st = lock(state);
        let (shard, codec) = st.rooms.prepare_join_as(room, identity, flavor)?;
        (shard, st.advertised(shard)?, codec, st.settings.clone())
    };
    for attempt in 0..MAX_OFFER_ACCEPTS {
        let accepted = {
            let (settings, offer) = (settings.clone(), sdp.to_owned());
            tokio::task::spawn_blocking(move || {
                accept_offer_on(&settings, Instant::now(), &offer, advertised, codec)
            })
            .await
            .map_err(|_| {
                RoomError::Offer(OfferError::Bad("the offer could not be processed".into()))
            })?
            .inspect_err(|e| {
                tracing::info!(room, code = e.code(), "join refused: {e}");
            })?
        };
        let new = NewMember {
            name,
            identity,
            sdp,
            flavor,
            tracks: accepted.tracks.clone(),
            slots: accepted.slots.clone(),
            accepted_under: codec,
            codecs: accepted.codecs.clone(),
            room_codec: accepted.room_codec,
            joined: Instant::now(),
        };
        let mut st = lock(state);
        let insist = attempt >= PLACEMENT_TRIES;
        let a = match st.rooms.admit(room, shard, insist, new, &mut RandomIds)? {
            Admission::Admitted(a) => a,
            Admission::Elsewhere(s) => {
                (shard, advertised) = (s, st.advertised(s)?);
                continue;
            }
            Admission::CodecChanged(c) => {
                codec = c;
                continue;
            }
        };
        let answer = accepted.answer.clone();
        let accepted = Accepted {
            publish_data,
            ..accepted
        };
        let Some(handle) = st.link(shard).map(|s| s.handle.clone()) else {
            return Err(RoomError::NoShard);
        };
        // The member it replaced (same identity, same flavor) goes first:
        // its shard says `bye` with reason `replaced` and closes it. The
        // roster below already has the newcomer in its place.
        if let Some((old, old_shard)) = a.replaced {
            st.detail.remove(&old);
            st.diagnoses.left(old, room);
            if let Some(s) = st.link(old_shard) {
                let _ = s.handle.commands.send(ShardCommand::Remove {
                    id: old,
                    reason: LeaveReason::Replaced,
                });
            }
            tracing::info!(participant = %old, by = %a.id, room, "replaced by a new join of its identity");
        }
        let _ = handle.commands.send(ShardCommand::Add {
            id: a.id,
            room: a.room,
            name: a.name,
            accepted: Box::new(accepted),
            roster: a.roster.clone(),
        });
        st.broadcast(&a.roster, &a.notify);
        st.members_changed();
        drop(st);
        tracing::info!(participant = %a.id, room, shard = shard.0, ?flavor, "joined");
        return Ok(Joined {
            id: a.id,
            resource: a.resource,
            answer,
            etag: a.etag,
        });
    }
    // Every shard it was placed on stopped fitting before it was admitted:
    // shards are failing or filling faster than placement can follow.
    Err(RoomError::PlacementUnsettled)
}

/// Renegotiates (PATCH): validated and rehearsed here, applied whole by the
/// participant's shard, or refused with the participant left as it was.
/// Returns the answer and the new ETag.
///
/// The renegotiation is marked in flight under the lock (a concurrent one
/// gets 409), then rehearsed without it, then sent to the shard.
pub async fn renegotiate(
    state: &Shared,
    room: &str,
    resource: &str,
    if_match: Option<&str>,
    sdp: String,
) -> Result<(String, String), RoomError> {
    renegotiate_with(
        state,
        |rooms| rooms.begin_renegotiate(room, resource, if_match),
        |_| sdp,
    )
    .await
}

/// A WHIP/WHEP ICE restart by fragment (RFC 9725 §4.3.3): the offer in
/// force with the client's new credentials `ice` (nothing else changes)
/// goes the way of a renegotiation, so str0m restarts ICE and the answer
/// carries the server's new credentials. `if_match`: the ETag it builds on
/// (the caller resolves `*` to the current one). Returns the full SDP
/// answer and the new ETag.
pub async fn ice_restart(
    state: &Shared,
    room: &str,
    resource: &str,
    flavor: Flavor,
    if_match: &str,
    ice: &sdpfrag::IceCredentials,
) -> Result<(String, String), RoomError> {
    renegotiate_with(
        state,
        |rooms| rooms.begin_renegotiate_as(room, resource, flavor, Some(if_match)),
        |previous| sdpfrag::restart_offer(previous, ice),
    )
    .await
}

/// [`renegotiate`] whose renegotiation `begin` marks in flight, and whose
/// offer `offer` makes from the offer in force.
async fn renegotiate_with(
    state: &Shared,
    begin: impl FnOnce(&mut Directory) -> Result<rooms::Renegotiation, RoomError>,
    offer: impl FnOnce(&str) -> String,
) -> Result<(String, String), RoomError> {
    let (r, handle, settings) = {
        let mut st = lock(state);
        let r = begin(&mut st.rooms)?;
        let handle = st.link(r.shard).map(|s| s.handle.clone());
        (r, handle, st.settings.clone())
    };
    let sdp = offer(&r.previous);
    let pid = r.id;
    // If this request is dropped midway (the client went away), or refused
    // before it reaches the shard, the participant must not stay marked as
    // renegotiating.
    struct InFlight<'a>(&'a Shared, ParticipantId, bool);
    impl Drop for InFlight<'_> {
        fn drop(&mut self) {
            if !self.2 {
                lock(self.0).rooms.finish_renegotiate(self.1, None);
            }
        }
    }
    let mut in_flight = InFlight(state, pid, false);
    let handle = handle.ok_or(RoomError::ShardStopped)?;
    let offer = check_renegotiation(&settings, Instant::now(), &r.previous, &sdp, &r.codecs)?;
    let (tx, rx) = oneshot::channel();
    let sent = handle.commands.send(ShardCommand::Renegotiate {
        id: pid,
        offer: Box::new(offer),
        reply: tx,
    });
    let outcome = match sent {
        Err(_) => Err(RoomError::ShardStopped),
        Ok(()) => match tokio::time::timeout(SHARD_REPLY_TIMEOUT, rx).await {
            Ok(Ok(r)) => r.map_err(RoomError::from),
            _ => Err(RoomError::ShardSilent),
        },
    };
    let applied = outcome.as_ref().ok().map(|_| sdp);
    in_flight.2 = true;
    let etag = lock(state).rooms.finish_renegotiate(pid, applied);
    let answer = outcome?;
    let etag = etag.ok_or(RoomError::LeftMeanwhile)?;
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
