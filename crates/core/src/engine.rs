//! The engine of one shard: every participant the shard hosts, the rooms they
//! are in (as this shard sees them), the address/ufrag demux, and the timer heap.
//!
//! Driven like str0m itself: the shard calls `handle_*` with `now`, then takes
//! what accumulated in [`Outputs`] (datagrams to send, messages to peer shards
//! and to the control thread) and asks [`Engine::poll_timeout`] when to call
//! again. A packet goes from `handle_datagram` to the subscribers' encrypted
//! datagrams in one synchronous call: no queue, no await in between.
//!
//! Fault isolation: every call into a participant's str0m `Rtc` runs under
//! [`guard::isolate`] ([`guarded`]). A panic there (str0m's or ours) poisons
//! that participant only: nothing calls into its `Rtc` again, it is evicted
//! at the end of the step and counted in `participant_panics`. Limits that
//! bound what one participant can make the shard hold (source addresses,
//! data-channel requests, the connect deadline) are enforced here too.
//!
//! Must not: read a clock, touch a socket, block, or share state with another
//! shard (peer shards get values in `Outputs::peers`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use str0m::change::SdpOffer;
use str0m::channel::ChannelId;
use str0m::media::{KeyframeRequestKind, MediaKind};
use str0m::net::{DatagramRecv, Protocol, Receive, Transmit};
use str0m::rtp::{RtpPacket, RtpWrite, SeqNo};
use str0m::{Event, IceConnectionState, Input, Output};

use crate::codec::{is_keyframe_start, map_pt};
use crate::events::{ClientRequest, MemberJson, RoomEvent, SlotJson, TrackJson, kind_str};
use crate::guard;
use crate::ids::{ParticipantId, RoomId, ShardId, TrackKey};
use crate::media::{E2eExt, MediaCopy, MediaPacket};
use crate::metrics::Counters;
use crate::offer::{Accepted, MediaLine, OfferError, RtcSettings, apply_prepared};
use crate::participant::Participant;
use crate::room::{RoomUpdate, RoomView};

/// A publisher gets at most one keyframe request per track per this interval.
const KEYFRAME_REQUEST_INTERVAL: Duration = Duration::from_millis(300);
/// How often rooms re-evaluate the active speaker.
const ROOM_TICK: Duration = Duration::from_millis(250);
/// Upper bound of outputs drained from one `Rtc` in one go (defensive).
const MAX_DRAIN: usize = 100_000;
/// How many already-due timeouts one drain feeds back to str0m.
const MAX_REFEEDS: usize = 8;
/// Largest data-channel request the engine reads (room requests are tiny).
const MAX_REQUEST_BYTES: usize = 4096;

/// A message to a peer shard. A value: it owns everything it carries.
#[derive(Debug)]
pub enum PeerMsg {
    /// A media packet of `room`, for that shard's subscribers (the one hop).
    Media { room: RoomId, packet: MediaCopy },
    /// A subscriber here needs a keyframe from a publisher there.
    KeyframeRequest { track: TrackKey },
}

/// What a shard tells the control thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardEvent {
    /// The participant is gone from the shard (ICE/consent failure, DTLS close, error).
    Left {
        id: ParticipantId,
        reason: LeaveReason,
    },
    /// ICE and DTLS are up.
    Connected { id: ParticipantId },
    /// A renegotiation changed the tracks or slots.
    LinesChanged {
        id: ParticipantId,
        tracks: Vec<MediaLine>,
        slots: Vec<MediaLine>,
    },
}

/// Why a participant left its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaveReason {
    /// The API removed it (DELETE); the control thread already knows.
    Removed,
    /// The server is shutting down; the control thread already knows.
    Shutdown,
    /// ICE consent failed (the client went away or its network did).
    IceDisconnected,
    /// It did not connect within `--connect-timeout`.
    ConnectTimeout,
    /// Handling it panicked; it was isolated and evicted.
    Panic,
    /// str0m reported an error for its session.
    Error,
    /// Its session closed (DTLS close_notify, SCTP abort).
    Closed,
    /// A renegotiation that passed the rehearsal failed on the shard.
    RenegotiationFailed,
}

impl LeaveReason {
    /// The stable name used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaveReason::Removed => "left",
            LeaveReason::Shutdown => "shutdown",
            LeaveReason::IceDisconnected => "ice_disconnected",
            LeaveReason::ConnectTimeout => "connect_timeout",
            LeaveReason::Panic => "panic",
            LeaveReason::Error => "error",
            LeaveReason::Closed => "closed",
            LeaveReason::RenegotiationFailed => "renegotiation_failed",
        }
    }

    /// Whether the control thread asked for it (and needs no report).
    pub fn requested(self) -> bool {
        matches!(self, LeaveReason::Removed | LeaveReason::Shutdown)
    }
}

impl std::fmt::Display for LeaveReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything the engine produced since the shard last emptied it.
#[derive(Default)]
pub struct Outputs {
    pub transmits: Vec<Transmit>,
    /// Kernel receive time of each media packet that reached at least one
    /// subscriber in this step, and whether it came from a peer shard: the
    /// shard turns these into forwarding latency once the datagrams are sent.
    pub forwarded: Vec<(Duration, bool)>,
    pub peers: Vec<(ShardId, PeerMsg)>,
    pub control: Vec<ShardEvent>,
}

/// The engine's bookkeeping that drains write into, kept apart from the
/// participants so that one participant can be borrowed while it is filled.
#[derive(Default)]
struct Io {
    out: Outputs,
    events: VecDeque<(ParticipantId, Event)>,
    timers: BinaryHeap<Reverse<(Instant, ParticipantId)>>,
    counters: Counters,
    doomed: Vec<(ParticipantId, LeaveReason)>,
    /// Subscribers whose slot assignment changed and must be told.
    slots_dirty: Vec<ParticipantId>,
    /// Tracks whose publisher must be asked for a keyframe.
    keyframes_wanted: Vec<TrackKey>,
    /// The `now` of the current entry point: what drains feed str0m when it
    /// asks for a timeout that is already due.
    now: Option<Instant>,
}

pub struct Engine {
    shard: ShardId,
    settings: RtcSettings,
    participants: HashMap<ParticipantId, Participant>,
    by_addr: HashMap<SocketAddr, ParticipantId>,
    by_ufrag: HashMap<String, ParticipantId>,
    rooms: HashMap<RoomId, RoomView>,
    /// Rate limit for keyframe requests sent to peer shards.
    remote_kf: HashMap<TrackKey, Instant>,
    next_tick: Option<Instant>,
    /// Kernel receive time of the datagram being handled.
    rx_stamp: Option<Duration>,
    /// When each participant must be connected by (--connect-timeout).
    connect_deadlines: BinaryHeap<Reverse<(Instant, ParticipantId)>>,
    io: Io,
}

impl Engine {
    pub fn new(shard: ShardId, settings: RtcSettings) -> Self {
        Engine {
            shard,
            settings,
            participants: HashMap::new(),
            by_addr: HashMap::new(),
            by_ufrag: HashMap::new(),
            rooms: HashMap::new(),
            remote_kf: HashMap::new(),
            next_tick: None,
            rx_stamp: None,
            connect_deadlines: BinaryHeap::new(),
            io: Io::default(),
        }
    }

    pub fn shard(&self) -> ShardId {
        self.shard
    }

    pub fn counters(&self) -> &Counters {
        &self.io.counters
    }

    /// Counters the shard driver maintains (socket-level drops).
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.io.counters
    }

    /// Every local participant's latest transport figures.
    pub fn participant_stats(&self) -> Vec<crate::metrics::ParticipantStats> {
        self.participants
            .values()
            .map(|p| p.stats.clone())
            .collect()
    }

    pub fn participant_count(&self) -> usize {
        self.participants.len()
    }

    pub fn room_count(&self) -> usize {
        self.rooms.len()
    }

    /// Takes what accumulated since the last call.
    pub fn outputs(&mut self) -> &mut Outputs {
        &mut self.io.out
    }

    /// When the engine next needs `handle_timeout`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let timer = self.io.timers.peek().map(|Reverse((t, _))| *t);
        let connect = self.connect_deadlines.peek().map(|Reverse((t, _))| *t);
        [timer, self.next_tick, connect].into_iter().flatten().min()
    }

    // ---------------------------------------------------------------- control

    /// Adopts a participant whose offer the control thread accepted.
    pub fn add_participant(
        &mut self,
        now: Instant,
        id: ParticipantId,
        room: RoomId,
        name: String,
        accepted: Accepted,
        roster: RoomUpdate,
    ) {
        self.io.now = Some(now);
        let Accepted {
            rtc,
            ufrag,
            tracks,
            slots,
            ..
        } = accepted;
        let p = Participant::new(id, room, name, rtc, ufrag.clone(), &tracks, &slots);
        self.by_ufrag.insert(ufrag, id);
        self.connect_deadlines.push(Reverse((
            now + self.settings.participant.connect_timeout,
            id,
        )));
        self.participants.insert(id, p);
        self.io.counters.participants_added += 1;
        if self.next_tick.is_none() {
            self.next_tick = Some(now + ROOM_TICK);
        }
        self.drain(id);
        self.apply_room(now, roster);
        self.settle(now);
    }

    /// Removes a participant (DELETE from the API). Sends DTLS close_notify.
    pub fn remove_participant(&mut self, now: Instant, id: ParticipantId) -> bool {
        self.io.now = Some(now);
        let existed = self.participants.contains_key(&id);
        self.io.doomed.push((id, LeaveReason::Removed));
        self.settle(now);
        existed
    }

    /// A new roster for a room with members on this shard.
    pub fn apply_room(&mut self, now: Instant, update: RoomUpdate) {
        self.io.now = Some(now);
        let id = update.room;
        let shard = self.shard;
        let view = self
            .rooms
            .entry(id)
            .or_insert_with(|| RoomView::new(id, update.name.clone()));
        let changed = view.apply(update, shard);
        if view.local.is_empty() {
            self.rooms.remove(&id);
            return;
        }
        if changed {
            self.room_changed(id);
        }
        self.settle(now);
    }

    /// PATCH: applies a renegotiation (or ICE restart) that the control
    /// thread parsed and rehearsed ([`crate::offer::check_renegotiation`]).
    /// If str0m still refuses it or panics, the participant's session can no
    /// longer be trusted to match either offer: it is evicted.
    pub fn renegotiate(
        &mut self,
        now: Instant,
        id: ParticipantId,
        offer: SdpOffer,
    ) -> Result<String, OfferError> {
        self.io.now = Some(now);
        let Some(p) = self.participants.get_mut(&id) else {
            return Err(OfferError::UnknownParticipant(id));
        };
        let applied = guarded(&mut self.io, id, &mut p.poisoned, |_| {
            apply_prepared(&mut p.rtc, offer)
        });
        let answer = match applied {
            Some(Ok(answer)) => answer,
            failed => {
                if let Some(Err(e)) = &failed {
                    tracing::warn!(participant = %id, "a rehearsed renegotiation failed on the shard: {e}");
                    self.io.doomed.push((id, LeaveReason::RenegotiationFailed));
                }
                self.settle(now);
                return Err(OfferError::RenegotiationFailed);
            }
        };
        let ufrag = p.rtc.direct_api().local_ice_credentials().ufrag;
        if ufrag != p.ufrag {
            self.by_ufrag.remove(&p.ufrag);
            self.by_ufrag.insert(ufrag.clone(), id);
            p.ufrag = ufrag;
        }
        self.drain(id);
        self.settle(now);
        Ok(answer)
    }

    /// Closes every connection (shutdown): DTLS close_notify to each participant.
    pub fn close_all(&mut self, now: Instant) {
        self.io.now = Some(now);
        let ids: Vec<ParticipantId> = self.participants.keys().copied().collect();
        for id in ids {
            self.io.doomed.push((id, LeaveReason::Shutdown));
        }
        self.settle(now);
    }

    // ---------------------------------------------------------------- network

    /// One datagram from the shard's socket. `kernel_rx` is its kernel
    /// receive time (CLOCK_REALTIME since the epoch) when the socket reports it.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        kernel_rx: Option<Duration>,
        source: SocketAddr,
        destination: SocketAddr,
        data: &[u8],
    ) {
        self.rx_stamp = kernel_rx;
        self.io.now = Some(now);
        self.io.counters.rx_packets += 1;
        self.io.counters.rx_bytes += data.len() as u64;
        if !plausible(data) {
            self.io.counters.dropped_malformed += 1;
            return;
        }
        let Ok(contents) = DatagramRecv::try_from(data) else {
            self.io.counters.dropped_malformed += 1;
            return;
        };
        let known = self.by_addr.get(&source).copied();
        let Some(id) = known.or_else(|| self.stun_owner(data)) else {
            self.io.counters.dropped_unknown_source += 1;
            return;
        };
        let Some(p) = self.participants.get_mut(&id) else {
            self.io.counters.dropped_unknown_source += 1;
            return;
        };
        if p.poisoned {
            self.io.counters.dropped_unknown_source += 1;
            return;
        }
        if known.is_none() && p.addrs.len() >= self.settings.participant.max_addrs {
            self.io.counters.dropped_addr_limit += 1;
            return;
        }
        let input = Input::Receive(
            now,
            Receive {
                proto: Protocol::Udp,
                source,
                destination,
                contents,
            },
        );
        let fault = p.connected
            && self.settings.participant.fault_injection_name.as_deref() == Some(p.name.as_str());
        let events_before = self.io.events.len();
        let transmits_before = self.io.out.transmits.len();
        let handled = guarded(&mut self.io, id, &mut p.poisoned, |_| {
            if fault {
                #[allow(
                    clippy::panic,
                    reason = "test-only fault injection (--test-panic-participant)"
                )]
                {
                    panic!("injected fault (--test-panic-participant)");
                }
            }
            if known.is_none() && !p.rtc.accepts(&input) {
                return Err(false);
            }
            p.rtc.handle_input(input).map_err(|_| true)
        });
        match handled {
            Some(Ok(())) => {}
            Some(Err(false)) => {
                self.io.counters.dropped_unknown_source += 1;
                return;
            }
            Some(Err(true)) => {
                self.io.counters.dropped_malformed += 1;
                return;
            }
            None => {
                // Counted as a panic; the datagram is that participant's last.
                self.io.counters.dropped_malformed += 1;
                self.settle(now);
                return;
            }
        }
        if known.is_none() {
            self.by_addr.insert(source, id);
            p.addrs.push(source);
        }
        self.drain(id);
        // str0m drops some datagrams without a word (an SRTP packet that fails
        // authentication or replays, a STUN request with bad integrity, a DTLS
        // record it cannot use): one that produced neither an event nor a
        // datagram had no effect, and is counted as dropped by the stack.
        // RTCP is exempt (a valid report may produce nothing at once).
        if self.io.events.len() == events_before
            && self.io.out.transmits.len() == transmits_before
            && !is_rtcp(data)
        {
            self.io.counters.dropped_by_stack += 1;
        }
        self.settle(now);
    }

    /// The participant a STUN binding request from a new address is for.
    fn stun_owner(&self, data: &[u8]) -> Option<ParticipantId> {
        let msg = str0m::ice::StunMessage::parse(data).ok()?;
        if !msg.is_binding_request() {
            return None;
        }
        let (ours, _theirs) = msg.split_username()?;
        self.by_ufrag.get(ours).copied()
    }

    /// Timers due at `now`: str0m timeouts and the room tick.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.io.now = Some(now);
        while let Some(&Reverse((t, id))) = self.io.timers.peek() {
            if t > now {
                break;
            }
            self.io.timers.pop();
            let Some(p) = self.participants.get_mut(&id) else {
                continue;
            };
            if p.scheduled != Some(t) {
                continue; // superseded by an earlier entry
            }
            p.scheduled = None;
            match p.timeout {
                Some(deadline) if deadline > now => {
                    // str0m moved its deadline later since we scheduled.
                    p.scheduled = Some(deadline);
                    self.io.timers.push(Reverse((deadline, id)));
                }
                _ => {
                    let r = guarded(&mut self.io, id, &mut p.poisoned, |_| {
                        p.rtc.handle_input(Input::Timeout(now))
                    });
                    if let Some(Err(_)) = r {
                        self.io.counters.rtc_errors += 1;
                    }
                    self.drain(id);
                }
            }
        }
        while let Some(&Reverse((t, id))) = self.connect_deadlines.peek() {
            if t > now {
                break;
            }
            self.connect_deadlines.pop();
            if self.participants.get(&id).is_some_and(|p| !p.connected) {
                self.io.counters.connect_timeouts += 1;
                self.io.doomed.push((id, LeaveReason::ConnectTimeout));
            }
        }
        if self.next_tick.is_some_and(|t| t <= now) {
            self.next_tick = (!self.participants.is_empty()).then(|| now + ROOM_TICK);
            self.tick_rooms(now);
        }
        self.settle(now);
    }

    /// A message from a peer shard.
    pub fn handle_peer(&mut self, now: Instant, msg: PeerMsg) {
        self.io.now = Some(now);
        match msg {
            PeerMsg::Media { room, packet } => {
                self.io.counters.cross_shard_in += 1;
                let media = MediaPacket::from(packet);
                self.forward(now, room, &media, false);
            }
            PeerMsg::KeyframeRequest { track } => self.request_keyframe(now, track),
        }
        self.settle(now);
    }

    // ---------------------------------------------------------------- internals

    /// Drains one participant's `Rtc` to its next timeout (str0m's invariant).
    fn drain(&mut self, id: ParticipantId) {
        if let Some(p) = self.participants.get_mut(&id) {
            drain_rtc(
                &mut self.io,
                id,
                &mut p.rtc,
                &mut p.timeout,
                &mut p.scheduled,
                &mut p.poisoned,
            );
        }
    }

    /// Runs queued events to completion, then removals and slot notifications.
    fn settle(&mut self, now: Instant) {
        for _ in 0..MAX_DRAIN {
            if let Some((id, ev)) = self.io.events.pop_front() {
                self.on_event(now, id, ev);
                continue;
            }
            if let Some((id, reason)) = self.io.doomed.pop() {
                self.evict(now, id, reason);
                continue;
            }
            if let Some(track) = self.io.keyframes_wanted.pop() {
                self.request_keyframe(now, track);
                continue;
            }
            if let Some(id) = self.io.slots_dirty.pop() {
                if !self.io.slots_dirty.contains(&id) {
                    self.send_slots(id);
                }
                continue;
            }
            break;
        }
    }

    fn on_event(&mut self, now: Instant, id: ParticipantId, ev: Event) {
        match ev {
            Event::RtpPacket(pkt) => self.on_rtp(now, id, pkt),
            Event::KeyframeRequest(req) => {
                self.io.counters.keyframe_requests_received += 1;
                if let Some(p) = self.participants.get_mut(&id) {
                    p.stats.keyframe_requests_received += 1;
                }
                let source = self
                    .participants
                    .get(&id)
                    .and_then(|p| p.slots.iter().find(|s| s.mid == req.mid))
                    .and_then(|s| s.source);
                if let Some(track) = source {
                    self.request_keyframe(now, track);
                }
            }
            Event::Connected => {
                if let Some(p) = self.participants.get_mut(&id) {
                    p.connected = true;
                }
                self.io.out.control.push(ShardEvent::Connected { id });
            }
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                self.io.doomed.push((id, LeaveReason::IceDisconnected));
            }
            Event::ChannelOpen(cid, _label) => self.on_channel_open(id, cid),
            Event::ChannelData(d) => {
                let Some(p) = self.participants.get_mut(&id) else {
                    return;
                };
                if d.data.len() > MAX_REQUEST_BYTES
                    || !p.take_request(now, self.settings.participant.requests_per_second)
                {
                    self.io.counters.dropped_requests += 1;
                    return;
                }
                if !d.binary
                    && let Ok(req) = serde_json::from_slice::<ClientRequest>(&d.data)
                {
                    self.on_client_request(id, req);
                }
            }
            Event::PeerStats(st) => {
                if let Some(p) = self.participants.get_mut(&id) {
                    p.stats.ingress_loss = st.ingress_loss_fraction;
                    p.stats.egress_loss = st.egress_loss_fraction;
                    p.stats.rtt_ms = st.rtt.map(|d| d.as_secs_f64() * 1e3);
                    p.stats.bytes_in = st.peer_bytes_rx;
                    p.stats.bytes_out = st.peer_bytes_tx;
                }
            }
            Event::MediaIngressStats(st) => {
                if let Some(p) = self.participants.get_mut(&id) {
                    let clock = match p.tracks.iter().find(|t| t.mid == st.mid).map(|t| t.kind) {
                        Some(MediaKind::Audio) => 48.0,
                        _ => 90.0,
                    };
                    let jitter = f64::from(st.jitter) / clock;
                    p.stats.ingress_jitter_ms =
                        Some(p.stats.ingress_jitter_ms.map_or(jitter, |j| j.max(jitter)));
                    let d = p.nack_delta(st.mid, false, st.nacks);
                    p.stats.nacks_sent += d;
                    self.io.counters.nacks_sent += d;
                }
            }
            Event::MediaEgressStats(st) => {
                if let Some(p) = self.participants.get_mut(&id) {
                    let d = p.nack_delta(st.mid, true, st.nacks);
                    p.stats.nacks_received += d;
                    self.io.counters.nacks_received += d;
                }
            }
            Event::MediaAdded(m) => {
                if let Some(p) = self.participants.get_mut(&id) {
                    let line = [MediaLine {
                        mid: m.mid,
                        kind: m.kind,
                    }];
                    use str0m::media::Direction::*;
                    let (t, s): (&[MediaLine], &[MediaLine]) = match m.direction {
                        RecvOnly => (&line, &[]),
                        SendOnly => (&[], &line),
                        SendRecv => (&line, &line),
                        Inactive => (&[], &[]),
                    };
                    if !p.add_lines(t, s) {
                        return;
                    }
                    self.io.out.control.push(ShardEvent::LinesChanged {
                        id,
                        tracks: p.track_lines(),
                        slots: p.slot_lines(),
                    });
                    // New slots are announced (empty or filled) right away.
                    self.io.slots_dirty.push(id);
                    self.assign_slots(id);
                }
            }
            _ => {}
        }
    }

    /// A publisher's RTP packet: classify it once, then forward it.
    fn on_rtp(&mut self, now: Instant, id: ParticipantId, pkt: RtpPacket) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let Some(idx) = p.track_index(pkt.header.ssrc) else {
            self.io.counters.dropped_no_codec += 1;
            return;
        };
        let pt = pkt.header.payload_type;
        let cached = p
            .tracks
            .get(idx)
            .and_then(|t| t.codec)
            .filter(|(cpt, _)| *cpt == pt)
            .map(|(_, spec)| spec);
        let spec = match cached {
            Some(s) => s,
            None => {
                let Some(spec) = p
                    .rtc
                    .codec_config()
                    .find(|pp| pp.pt() == pt)
                    .map(|pp| pp.spec())
                else {
                    self.io.counters.dropped_no_codec += 1;
                    return;
                };
                if let Some(t) = p.tracks.get_mut(idx) {
                    t.codec = Some((pt, spec));
                }
                spec
            }
        };
        let Some(track) = p.tracks.get(idx) else {
            return;
        };
        let media = MediaPacket {
            track: TrackKey {
                participant: id,
                mid: track.mid,
            },
            kind: track.kind,
            spec,
            seq: *pkt.seq_no,
            timestamp: pkt.header.timestamp,
            marker: pkt.header.marker,
            keyframe: track.kind == MediaKind::Video && is_keyframe_start(spec.codec, &pkt.payload),
            ext: E2eExt::from_ext(&pkt.header.ext_vals),
            payload: pkt.payload,
            received: pkt.timestamp,
            kernel_rx: self.rx_stamp,
        };
        if media.keyframe
            && let Some(t) = p.tracks.get_mut(idx)
        {
            t.keyframe_pending = false;
        }
        let room = p.room;
        self.forward(now, room, &media, true);
    }

    /// Sends `media` to every local subscriber whose slot shows its track, and
    /// (when it originated here) one copy to each peer shard of the room.
    fn forward(&mut self, now: Instant, room_id: RoomId, media: &MediaPacket, origin: bool) {
        let Some(room) = self.rooms.get_mut(&room_id) else {
            return;
        };
        if media.kind == MediaKind::Audio {
            room.note_audio(
                media.track.participant,
                media.ext.audio_level,
                media.ext.voice_activity,
                now,
            );
        }
        if origin {
            for &shard in &room.peer_shards {
                self.io.counters.cross_shard_out += 1;
                self.io.out.peers.push((
                    shard,
                    PeerMsg::Media {
                        room: room_id,
                        packet: media.to_copy(),
                    },
                ));
            }
        }
        let mut want_keyframe = false;
        let mut reached = false;
        for &sub in &room.local {
            if sub == media.track.participant {
                continue;
            }
            let Some(p) = self.participants.get_mut(&sub) else {
                continue;
            };
            let Participant {
                slots,
                rtc,
                timeout,
                scheduled,
                poisoned,
                ..
            } = p;
            if *poisoned {
                continue;
            }
            for slot in slots.iter_mut().filter(|s| s.source == Some(media.track)) {
                if slot.need_keyframe {
                    if !media.keyframe {
                        self.io.counters.dropped_waiting_keyframe += 1;
                        want_keyframe = true;
                        continue;
                    }
                    slot.need_keyframe = false;
                }
                let out_pt = match slot.pt_map {
                    Some((spec, pt)) if spec == media.spec => Some(pt),
                    _ => {
                        let mapped = subscriber_pt(rtc, slot.mid, &media.spec);
                        slot.pt_map = mapped.map(|pt| (media.spec, pt));
                        mapped
                    }
                };
                let Some(out_pt) = out_pt else {
                    self.io.counters.dropped_no_codec += 1;
                    continue;
                };
                let clock = media.spec.clock_rate.get();
                let Some((seq, ts)) = slot
                    .rewriter
                    .rewrite(media.seq, media.timestamp, clock, now)
                else {
                    self.io.counters.dropped_stale += 1;
                    continue;
                };
                let written = guarded(&mut self.io, sub, poisoned, |_| {
                    let mut api = rtc.direct_api();
                    let Some(tx) = api.stream_tx_by_mid(slot.mid, None) else {
                        return false;
                    };
                    tx.write_rtp(
                        RtpWrite::new(
                            out_pt,
                            SeqNo::from(seq),
                            ts,
                            media.received,
                            media.payload.clone(),
                        )
                        .marker(media.marker)
                        .ext_vals(media.ext.to_ext())
                        .nackable(media.kind == MediaKind::Video),
                    );
                    true
                });
                if written != Some(true) {
                    continue;
                }
                self.io.counters.forwarded += 1;
                reached = true;
                // str0m: drain after every mutation, before the next one.
                drain_rtc(&mut self.io, sub, rtc, timeout, scheduled, poisoned);
            }
        }
        if let (true, Some(rx)) = (reached, media.kernel_rx) {
            self.io.out.forwarded.push((rx, !origin));
        }
        if want_keyframe {
            self.request_keyframe(now, media.track);
        }
    }

    /// Asks the publisher of `track` for a keyframe, rate-limited per track: a
    /// request inside the limit is remembered and sent when the limit allows
    /// (the room tick), unless a keyframe arrives first.
    fn request_keyframe(&mut self, now: Instant, track: TrackKey) {
        if let Some(p) = self.participants.get_mut(&track.participant) {
            let Some(t) = p.tracks.iter_mut().find(|t| t.mid == track.mid) else {
                return;
            };
            if t.kind != MediaKind::Video {
                return;
            }
            if t.last_keyframe_request
                .is_some_and(|l| now.saturating_duration_since(l) < KEYFRAME_REQUEST_INTERVAL)
            {
                t.keyframe_pending = true;
                return;
            }
            t.last_keyframe_request = Some(now);
            t.keyframe_pending = false;
            let requested = guarded(&mut self.io, track.participant, &mut p.poisoned, |_| {
                let mut api = p.rtc.direct_api();
                api.stream_rx_by_mid(track.mid, None)
                    .map(|rx| rx.request_keyframe(KeyframeRequestKind::Pli))
                    .is_some()
            });
            if requested == Some(true) {
                self.io.counters.keyframe_requests_sent += 1;
                tracing::debug!(publisher = %track.participant, mid = %track.mid, "keyframe requested");
            }
            self.drain(track.participant);
            return;
        }
        // Remote publisher: one message to its shard, rate-limited here too.
        let shard = self
            .rooms
            .values()
            .find_map(|r| r.member(track.participant))
            .map(|m| m.info.shard);
        let Some(shard) = shard else {
            return;
        };
        let last = self.remote_kf.get(&track);
        if last.is_some_and(|l| now.saturating_duration_since(*l) < KEYFRAME_REQUEST_INTERVAL) {
            return;
        }
        self.remote_kf.insert(track, now);
        self.io
            .out
            .peers
            .push((shard, PeerMsg::KeyframeRequest { track }));
    }

    /// Roster changed: tell every local member and refill their slots.
    fn room_changed(&mut self, room_id: RoomId) {
        let Some(room) = self.rooms.get(&room_id) else {
            return;
        };
        let local = room.local.clone();
        let roster = roster_event(room);
        for id in &local {
            self.send_event(*id, &roster);
        }
        for id in local {
            self.assign_slots(id);
        }
        let live: Vec<TrackKey> = self.remote_kf.keys().copied().collect();
        for t in live {
            if !self.rooms.values().any(|r| r.has_track(t)) {
                self.remote_kf.remove(&t);
            }
        }
    }

    /// Fills `id`'s slots from its room's ranking: pinned sources stay, the best
    /// ranked tracks are shown, a slot whose source left is refilled.
    fn assign_slots(&mut self, id: ParticipantId) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let Some(room) = self.rooms.get(&p.room) else {
            return;
        };
        let mut changed = false;
        let mut new_sources = Vec::new();
        for kind in [MediaKind::Video, MediaKind::Audio] {
            if !p.slots.iter().any(|s| s.kind == kind) {
                continue;
            }
            let ranked = room.ranked_tracks(id, kind);
            // Drop sources that left the room.
            for s in p.slots.iter_mut().filter(|s| s.kind == kind) {
                if s.source.is_some_and(|t| !room.has_track(t)) {
                    s.pinned = false;
                    changed |= s.set_source(None);
                }
            }
            let n = p.slots.iter().filter(|s| s.kind == kind).count();
            let pinned: Vec<TrackKey> = p
                .slots
                .iter()
                .filter(|s| s.kind == kind && s.pinned)
                .filter_map(|s| s.source)
                .collect();
            let desired: Vec<TrackKey> = pinned
                .iter()
                .copied()
                .chain(ranked.into_iter().filter(|t| !pinned.contains(t)))
                .take(n)
                .collect();
            // Free unpinned slots showing something no longer desired.
            for s in p.slots.iter_mut().filter(|s| s.kind == kind && !s.pinned) {
                if s.source.is_some_and(|t| !desired.contains(&t)) {
                    changed |= s.set_source(None);
                }
            }
            // Fill empty slots with desired tracks not yet shown, best first.
            for t in desired {
                if p.slots.iter().any(|s| s.source == Some(t)) {
                    continue;
                }
                if let Some(s) = p
                    .slots
                    .iter_mut()
                    .find(|s| s.kind == kind && s.source.is_none())
                {
                    s.set_source(Some(t));
                    changed = true;
                    new_sources.push(t);
                }
            }
        }
        if changed {
            self.io.slots_dirty.push(id);
        }
        // A new source in a slot needs a keyframe now, not at its next periodic one.
        for t in new_sources {
            self.pending_keyframes(t);
        }
    }

    /// Asks for a keyframe once the current step settles (never inside a drain).
    fn pending_keyframes(&mut self, track: TrackKey) {
        if !self.io.keyframes_wanted.contains(&track) {
            self.io.keyframes_wanted.push(track);
        }
    }

    fn on_channel_open(&mut self, id: ParticipantId, cid: ChannelId) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        p.channel = Some(cid);
        let room_id = p.room;
        let Some(room) = self.rooms.get(&room_id) else {
            return;
        };
        let welcome = RoomEvent::Welcome {
            participant: id.to_string(),
            room: room.name.clone(),
        };
        let roster = roster_event(room);
        let speaker = RoomEvent::Speaker {
            participant: room.speaker.map(|s| s.to_string()),
        };
        self.send_event(id, &welcome);
        self.send_event(id, &roster);
        self.send_slots(id);
        self.send_event(id, &speaker);
    }

    fn on_client_request(&mut self, id: ParticipantId, req: ClientRequest) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        match req {
            ClientRequest::Pin { participant, mid } => {
                let Ok(target) = participant.parse::<ParticipantId>() else {
                    return;
                };
                let Some(room) = self.rooms.get(&p.room) else {
                    return;
                };
                let Some(slot) = p.slots.iter_mut().find(|s| s.mid.to_string() == mid) else {
                    return;
                };
                let Some(line) = room
                    .member(target)
                    .and_then(|m| m.info.tracks.iter().find(|l| l.kind == slot.kind))
                else {
                    return;
                };
                let track = TrackKey {
                    participant: target,
                    mid: line.mid,
                };
                // The pinned track leaves any other slot it was in.
                for other in p.slots.iter_mut() {
                    if other.source == Some(track) && other.mid.to_string() != mid {
                        other.pinned = false;
                        other.set_source(None);
                    }
                }
                if let Some(slot) = p.slots.iter_mut().find(|s| s.mid.to_string() == mid) {
                    slot.pinned = true;
                    if slot.set_source(Some(track)) {
                        self.pending_keyframes(track);
                    }
                }
                self.io.slots_dirty.push(id);
                self.assign_slots(id);
            }
            ClientRequest::Unpin { mid } => {
                if let Some(slot) = p.slots.iter_mut().find(|s| s.mid.to_string() == mid) {
                    slot.pinned = false;
                }
                self.assign_slots(id);
            }
        }
    }

    fn send_slots(&mut self, id: ParticipantId) {
        let Some(p) = self.participants.get(&id) else {
            return;
        };
        let ev = RoomEvent::Slots {
            slots: p
                .slots
                .iter()
                .map(|s| SlotJson {
                    mid: s.mid.to_string(),
                    kind: kind_str(s.kind),
                    participant: s.source.map(|t| t.participant.to_string()),
                    track: s.source.map(|t| t.mid.to_string()),
                })
                .collect(),
        };
        self.send_event(id, &ev);
    }

    /// Sends a room event on the participant's data channel, if it is open.
    fn send_event(&mut self, id: ParticipantId, ev: &RoomEvent) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let Some(cid) = p.channel else {
            return;
        };
        let Ok(text) = serde_json::to_string(ev) else {
            return;
        };
        let written = guarded(&mut self.io, id, &mut p.poisoned, |_| {
            p.rtc
                .channel(cid)
                .is_none_or(|mut ch| ch.write(false, text.as_bytes()).is_ok())
        });
        if written == Some(false) {
            self.io.counters.rtc_errors += 1;
        }
        self.drain(id);
    }

    fn tick_rooms(&mut self, now: Instant) {
        let pending: Vec<TrackKey> = self
            .participants
            .values()
            .flat_map(|p| {
                p.tracks
                    .iter()
                    .filter(|t| t.keyframe_pending)
                    .map(|t| TrackKey {
                        participant: p.id,
                        mid: t.mid,
                    })
            })
            .collect();
        for track in pending {
            self.request_keyframe(now, track);
        }
        let changed: Vec<RoomId> = self
            .rooms
            .iter_mut()
            .filter_map(|(id, r)| r.update_speaker(now).then_some(*id))
            .collect();
        for room_id in changed {
            let Some(room) = self.rooms.get(&room_id) else {
                continue;
            };
            let ev = RoomEvent::Speaker {
                participant: room.speaker.map(|s| s.to_string()),
            };
            for id in room.local.clone() {
                self.send_event(id, &ev);
                self.assign_slots(id);
            }
        }
    }

    /// Removes a participant from this shard: closes its `Rtc` (DTLS
    /// close_notify goes out), forgets its addresses, frees slots showing it.
    fn evict(&mut self, now: Instant, id: ParticipantId, reason: LeaveReason) {
        let Some(mut p) = self.participants.remove(&id) else {
            return;
        };
        self.io.counters.participants_removed += 1;
        // A poisoned `Rtc` is only dropped: closing it would call into it.
        let closable = !p.poisoned
            && guarded(&mut self.io, id, &mut p.poisoned, |_| p.rtc.is_alive()) == Some(true);
        if closable {
            let _ = guarded(&mut self.io, id, &mut p.poisoned, |_| p.rtc.close());
            let (mut t, mut s) = (None, None);
            drain_rtc(
                &mut self.io,
                id,
                &mut p.rtc,
                &mut t,
                &mut s,
                &mut p.poisoned,
            );
        }
        // Events of a participant that is leaving are moot.
        self.io.events.retain(|(e, _)| *e != id);
        self.io.doomed.retain(|(d, _)| *d != id);
        for a in &p.addrs {
            self.by_addr.remove(a);
        }
        self.by_ufrag.remove(&p.ufrag);
        if !reason.requested() {
            self.io.out.control.push(ShardEvent::Left { id, reason });
        }
        // Forget it in the local room view right away; the control thread's
        // roster update will confirm.
        let room_id = p.room;
        if let Some(room) = self.rooms.get_mut(&room_id) {
            room.members.retain(|m| m.info.id != id);
            room.local.retain(|l| *l != id);
            if room.local.is_empty() {
                self.rooms.remove(&room_id);
            } else {
                self.room_changed(room_id);
            }
        }
        if self.participants.is_empty() {
            self.next_tick = None;
        }
        let _ = now;
    }
}

/// Drains one `Rtc` into the engine's outputs and event queue, and keeps its
/// timer entry current. A free function so that a participant's fields can be
/// borrowed apart (slots while its `Rtc` drains).
fn drain_rtc(
    io: &mut Io,
    id: ParticipantId,
    rtc: &mut str0m::Rtc,
    timeout: &mut Option<Instant>,
    scheduled: &mut Option<Instant>,
    poisoned: &mut bool,
) {
    let _ = guarded(io, id, poisoned, |io| {
        drain_rtc_unguarded(io, id, rtc, timeout, scheduled)
    });
}

/// Runs `f` on participant `id`'s state inside the fault boundary. A panic
/// poisons the participant (nothing calls into its `Rtc` again), dooms it,
/// counts it and logs it once at ERROR; `None` then, and for a participant
/// that is already poisoned.
fn guarded<R>(
    io: &mut Io,
    id: ParticipantId,
    poisoned: &mut bool,
    f: impl FnOnce(&mut Io) -> R,
) -> Option<R> {
    if *poisoned {
        return None;
    }
    match guard::isolate(|| f(io)) {
        Ok(r) => Some(r),
        Err(caught) => {
            *poisoned = true;
            io.counters.participant_panics += 1;
            io.doomed.push((id, LeaveReason::Panic));
            tracing::error!(participant = %id, "panic while handling this participant, evicting it: {caught}");
            None
        }
    }
}

fn drain_rtc_unguarded(
    io: &mut Io,
    id: ParticipantId,
    rtc: &mut str0m::Rtc,
    timeout: &mut Option<Instant>,
    scheduled: &mut Option<Instant>,
) {
    // str0m asks for a timeout that is already due when it has queued media
    // (its pacer releases packets on the next timeout): feed it right away so
    // that forwarded packets leave in this same synchronous pass.
    let mut refeeds = 0;
    for _ in 0..MAX_DRAIN {
        match rtc.poll_output() {
            Ok(Output::Timeout(t)) => {
                if let Some(now) = io.now.filter(|n| t <= *n && refeeds < MAX_REFEEDS) {
                    refeeds += 1;
                    if rtc.handle_input(Input::Timeout(now)).is_err() {
                        io.counters.rtc_errors += 1;
                    }
                    continue;
                }
                *timeout = Some(t);
                if scheduled.is_none_or(|s| t < s) {
                    *scheduled = Some(t);
                    io.timers.push(Reverse((t, id)));
                }
                break;
            }
            Ok(Output::Transmit(t)) => {
                io.counters.tx_packets += 1;
                io.counters.tx_bytes += t.contents.len() as u64;
                io.out.transmits.push(t);
            }
            Ok(Output::Event(e)) => io.events.push_back((id, e)),
            Err(_) => {
                io.counters.rtc_errors += 1;
                io.doomed.push((id, LeaveReason::Error));
                break;
            }
        }
    }
    if !rtc.is_alive() {
        io.doomed.push((id, LeaveReason::Closed));
    }
}

/// The payload type on a subscriber's slot that carries `spec`.
fn subscriber_pt(
    rtc: &str0m::Rtc,
    mid: str0m::media::Mid,
    spec: &str0m::format::CodecSpec,
) -> Option<str0m::media::Pt> {
    let cfg = rtc.codec_config();
    let media = rtc.media(mid)?;
    let cands: Vec<_> = media
        .remote_pts()
        .iter()
        .filter_map(|pt| cfg.find(|pp| pp.pt() == *pt).map(|pp| (*pt, pp.spec())))
        .collect();
    map_pt(spec, cands.iter().map(|(pt, s)| (*pt, s)))
}

fn roster_event(room: &RoomView) -> RoomEvent {
    RoomEvent::Roster {
        participants: room
            .members
            .iter()
            .map(|m| MemberJson {
                id: m.info.id.to_string(),
                name: m.info.name.clone(),
                tracks: m
                    .info
                    .tracks
                    .iter()
                    .map(|l| TrackJson {
                        mid: l.mid.to_string(),
                        kind: kind_str(l.kind),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// An RTCP packet (RFC 5761 demux: version 2, packet type 192-223).
fn is_rtcp(data: &[u8]) -> bool {
    matches!(data, [128..=191, 192..=223, ..])
}

/// Cheap sanity check before str0m sees a datagram: RTP/RTCP need a version-2
/// header of at least 12 (RTP) or 8 (RTCP) bytes, STUN its 20-byte header.
fn plausible(data: &[u8]) -> bool {
    match data.first() {
        None => false,
        Some(0..=3) => data.len() >= 20,
        Some(128..=191) => data.len() >= 8,
        Some(20..=63) => data.len() >= 13,
        Some(_) => true, // str0m's demux refuses the rest and we count it
    }
}
