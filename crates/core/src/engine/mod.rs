//! The engine of one shard: every participant the shard hosts and the rooms
//! they are in (as this shard sees them).
//!
//! Driven like str0m itself: the shard calls `handle_*` with `now`, then
//! empties [`Outputs`] (datagrams to send, messages to peer shards and to the
//! control thread) and asks [`Engine::poll_timeout`] when to call again. A
//! packet goes from `handle_datagram` to the subscribers' encrypted datagrams
//! in one synchronous call: no queue, no await in between.
//!
//! This file holds the entry points and the step: every entry point does its
//! work, then [`Engine::settle`] runs what it queued (str0m events, evictions,
//! keyframe requests, slot notices) to completion. The parts, each in its own
//! file, split along the borrows they need:
//! - [`demux`]: which participant a datagram is for (addresses, ufrags);
//! - [`timers`]: str0m deadlines, connect deadlines, the room tick;
//! - [`forward`]: the per-packet path (classify, rewrite, write, hop);
//! - [`ingress`], [`egress`]: the shard's own media path past str0m's
//!   receive and send (copies of each participant's SRTP contexts, str0m
//!   told of every packet);
//! - [`keyframes`]: the keyframe request rate limit (a due-set);
//! - [`policy`]: what each slot shows (pure functions over a room view);
//! - [`layers`]: simulcast layer rates and the allocation of a subscriber's
//!   estimate (pure); [`downlink`]: a subscriber's downlink decided (pure:
//!   climbs, trials, holds, what the BWE is told), its estimate from
//!   receiver reports when it gives no other ([`lossbwe`], pure);
//!   [`simulcast`]: the engine acting on it (targets, keyframes, dynacast);
//! - [`streams`]: which unseen SSRCs may reach an `Rtc` (the rid bound);
//! - [`channel`]: the data channel's room events and requests;
//! - [`stats`]: transport figures;
//! - [`io`]: what a step accumulates, the fault boundary, the drain;
//! - [`participant`]: one participant as three owned parts, each with its
//!   own methods: [`session`] (the `Rtc`, poisoning, the end-of-batch
//!   drain), [`publisher`] (tracks, own ingress, rid guard) and
//!   [`subscriber`] (slots, own egress, downlink); [`slot`]: one slot's
//!   layer and rewriting.
//!
//! `now` is a parameter of every function that needs it, and a datagram's
//! kernel receive time travels with the str0m events it produced
//! ([`io::Queued`]): no hidden clock on the engine.
//!
//! Fault isolation: every call into a participant's str0m `Rtc` runs under
//! [`io::guarded`]. A panic there (str0m's or ours) poisons that participant
//! only: nothing calls into its `Rtc` again, it is evicted at the end of the
//! step and counted in `participant_panics`. Limits that bound what one
//! participant can make the shard hold (source addresses, data-channel
//! requests, the connect deadline) are enforced here too.
//!
//! Must not: read a clock, touch a socket, block, or share state with another
//! shard (peer shards get values in `Outputs::peers`).

mod channel;
mod demux;
mod downlink;
mod egress;
mod forward;
mod handoff;
mod ingress;
mod io;
mod keyframes;
mod layers;
mod lossbwe;
mod participant;
mod policy;
mod publisher;
mod rebind;
mod session;
mod simulcast;
mod slot;
mod stats;
mod streams;
mod subscriber;
mod tap;
mod timers;

pub use streams::MAX_LAYERS;
pub use tap::{RoomTap, TapChange, Tapped};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use str0m::change::SdpOffer;
use str0m::media::{KeyframeRequestKind, MediaAdded, MediaKind};
use str0m::net::{DatagramRecv, Protocol, Receive, Transmit};
use str0m::{Event, IceConnectionState, Input};

use self::demux::{Demux, Route};
use self::io::{Io, MAX_DRAIN, Queued, drain_rtc, feed_time, guarded};
use self::keyframes::Keyframes;
use self::participant::Participant;
use crate::events::RoomEvent;
use crate::ids::{LayerKey, ParticipantId, RoomId, ShardId, TrackKey};
use crate::media::{MediaCopy, MediaPacket};
use crate::metrics::{Counters, LatencyHistogram};
use crate::offer::{Accepted, MediaLine, OfferError, RtcSettings, apply_prepared};
use crate::room::{RoomUpdate, RoomView, TrackState};

/// Largest data-channel request the engine reads but for a message (room
/// requests are tiny); a message may be up to the participant limit
/// `max_message_bytes`.
const MAX_REQUEST_BYTES: usize = 4096;

/// A message to a peer shard. A value: it owns everything it carries.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "media is nearly every message; boxing it would add an allocation per hop"
)]
pub enum PeerMsg {
    /// A media packet of `room`, for that shard's subscribers (the one hop).
    Media { room: RoomId, packet: MediaCopy },
    /// A subscriber here needs a keyframe from a publisher there.
    KeyframeRequest { key: LayerKey },
    /// The layers of a track there that subscribers here take now (a bit
    /// per layer; 0: none), for dynacast. Sent when it changes.
    LayerDemand {
        track: TrackKey,
        from: ShardId,
        mask: u32,
    },
    /// An application message of `room` from a participant there, for the
    /// members here it names (`to`; `None`: every member here but the
    /// sender): the `message` event's JSON, written as it is.
    Message {
        room: RoomId,
        from: ParticipantId,
        to: Option<Arc<[ParticipantId]>>,
        text: Arc<str>,
    },
    /// A datagram that reached shard `from`'s socket (a port shared by the
    /// shards: [`handoff`]) for a participant here, as it came.
    Datagram {
        from: ShardId,
        kernel_rx: Option<Duration>,
        source: SocketAddr,
        destination: SocketAddr,
        data: Box<[u8]>,
    },
    /// `shard` authenticated `source` as one of its participants' addresses
    /// (from a datagram this shard handed over): send what comes from
    /// there to it.
    Claim { source: SocketAddr, shard: ShardId },
}

/// How a datagram reached the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Udp,
    Tcp,
    /// Handed over by this peer shard (a shared port).
    Shard(ShardId),
}

/// What [`Engine::admit`] lets through.
#[allow(
    clippy::large_enum_variant,
    reason = "returned by value on the packet path and matched at once; boxing would allocate per datagram"
)]
enum Admitted<'d> {
    /// For this participant here; whether from an address it is known at.
    Here(ParticipantId, bool, DatagramRecv<'d>),
    /// For a participant of that shard (a shared port).
    Elsewhere(ShardId),
}

/// What a shard tells the control thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardEvent {
    /// The participant is gone from the shard (ICE/consent failure, DTLS
    /// close or failure, error). Sent only when the control thread did not
    /// ask for it.
    Left {
        id: ParticipantId,
        reason: LeaveReason,
        /// Why, in an operator's words, with str0m's error text where it
        /// gave one (e.g. "DTLS certificate check failed: remote
        /// fingerprint no match").
        detail: String,
    },
    /// ICE and DTLS are up.
    Connected { id: ParticipantId },
    /// One of its published tracks was muted or unmuted, paused or
    /// resumed (the roster carries it to the room).
    TrackState {
        id: ParticipantId,
        mid: str0m::media::Mid,
        state: TrackState,
    },
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
    /// A new join of its identity took its seat (same room, same flavor);
    /// the control thread already knows.
    Replaced,
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
    /// Its node drains (`--cluster`): it is to join again, through any
    /// node, which sends it to another; the control thread already knows.
    Draining,
}

impl LeaveReason {
    /// The stable name used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaveReason::Removed => "left",
            LeaveReason::Shutdown => "shutdown",
            LeaveReason::Replaced => "replaced",
            LeaveReason::IceDisconnected => "ice_disconnected",
            LeaveReason::ConnectTimeout => "connect_timeout",
            LeaveReason::Panic => "panic",
            LeaveReason::Error => "error",
            LeaveReason::Closed => "closed",
            LeaveReason::RenegotiationFailed => "renegotiation_failed",
            LeaveReason::Draining => "node_draining",
        }
    }

    /// Whether the control thread asked for it (and needs no report).
    pub fn requested(self) -> bool {
        matches!(
            self,
            LeaveReason::Removed
                | LeaveReason::Shutdown
                | LeaveReason::Replaced
                | LeaveReason::Draining
        )
    }
}

impl std::fmt::Display for LeaveReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sent datagrams' buffers kept for the own egress to write into, at most
/// (with [`MAX_SPARE_CAPACITY`], 512 KiB an engine). The pool holds no more
/// than the largest batch sent so far: a work-stealing participant task's
/// engine, which sends one subscriber's datagrams, keeps a few dozen.
const MAX_SPARE_BUFFERS: usize = 256;
/// Larger buffers are freed rather than kept (a datagram is at most an MTU).
const MAX_SPARE_CAPACITY: usize = 2048;

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
    /// With a shared port ([`RtcSettings::shared_port`]): UDP addresses ICE
    /// proved to be a participant's here (true), and the addresses of a
    /// participant that left (false), for the shard's steering map (the
    /// kernel's choice of socket). Empty without a shared port. Pushed on
    /// a new address or a leave, never per packet.
    pub flows: Vec<(SocketAddr, bool)>,
    /// Buffers of datagrams already sent ([`Outputs::clear_transmits`]):
    /// the own egress encrypts into them, so a forwarded packet costs no
    /// allocation (str0m patch 17).
    spare: Vec<Vec<u8>>,
}

impl Outputs {
    /// Empties `transmits` once they are sent, keeping their buffers (up to
    /// [`MAX_SPARE_BUFFERS`]) for the own egress.
    pub fn clear_transmits(&mut self) {
        for t in self.transmits.drain(..) {
            if self.spare.len() >= MAX_SPARE_BUFFERS {
                break; // the rest are freed with the drain
            }
            let buf = Vec::from(t.contents);
            if buf.capacity() <= MAX_SPARE_CAPACITY {
                self.spare.push(buf);
            }
        }
    }

    /// A buffer to write a datagram into: the last one kept, or a new one.
    pub(super) fn spare_buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }
}

/// The engine's maps, keyed by ids it assigns (participants, rooms) or by
/// a participant's tracks and layers, of which an offer declares a bounded
/// few: hashed with rustc-hash's Fx, a few instructions per key, where the
/// standard SipHash took about 1.6 % of a shard's time in these lookups
/// (several per forwarded packet). SipHash's keyed hashing defends a map
/// whose keys an attacker can choose without bound; these have no such keys.
/// The demultiplexer's maps by source address and by STUN username (anyone
/// sends those) keep SipHash.
pub(crate) type IdMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;
/// The set kind of [`IdMap`].
pub(crate) type IdSet<K> = std::collections::HashSet<K, rustc_hash::FxBuildHasher>;

pub struct Engine {
    shard: ShardId,
    settings: RtcSettings,
    participants: IdMap<ParticipantId, Participant>,
    demux: Demux,
    /// With a shared port: where datagrams of other shards' flows go.
    handoff: handoff::Handoff,
    rooms: IdMap<RoomId, RoomView>,
    keyframes: Keyframes,
    /// Layer rates of the sources this shard forwards.
    sources: layers::Sources,
    /// Dynacast: what this shard last told each remote publisher's shard it
    /// needs, and what peer shards need of the publishers here.
    demand_sent: IdMap<TrackKey, u32>,
    demand_remote: IdMap<(TrackKey, ShardId), simulcast::Demand>,
    /// When demand was last sent again in full to other nodes' shards.
    demand_refreshed: Option<Instant>,
    io: Io,
    /// Reused by [`Engine::answer_nacks`].
    nack_scratch: Vec<str0m::rtp::SeqNo>,
    /// The publisher packets the own egress may still resend.
    recent: egress::Recent,
    /// The rooms recorded now ([`tap`]): empty but while one is.
    taps: tap::Taps,
}

impl Engine {
    pub fn new(shard: ShardId, settings: RtcSettings) -> Self {
        Engine {
            shard,
            settings,
            participants: IdMap::default(),
            demux: Demux::default(),
            handoff: handoff::Handoff::default(),
            rooms: IdMap::default(),
            keyframes: Keyframes::default(),
            sources: layers::Sources::default(),
            demand_sent: IdMap::default(),
            demand_remote: IdMap::default(),
            demand_refreshed: None,
            io: Io::default(),
            nack_scratch: Vec::new(),
            recent: egress::Recent::default(),
            taps: tap::Taps::default(),
        }
    }

    pub fn shard(&self) -> ShardId {
        self.shard
    }

    pub fn counters(&self) -> &Counters {
        &self.io.counters
    }

    /// Counters the shard driver maintains (socket-level drops).
    pub fn participant_count(&self) -> usize {
        self.participants.len()
    }

    pub fn room_count(&self) -> usize {
        self.rooms.len()
    }

    /// Ends a batch of input: the subscribers whose drain forwarding
    /// deferred (one drain per subscriber per batch, however many packets
    /// it got) are drained now, so [`Engine::outputs`] holds all the batch
    /// produced. A driver calls it once after each batch, before it reads
    /// the outputs; one that forgets only delays them, as
    /// [`Engine::poll_timeout`] then asks for a `handle_timeout` at once.
    pub fn finish_batch(&mut self) {
        self.drain_pending();
        self.io.peer_hop.end_batch();
    }

    /// The cross-shard hop's latency so far (cumulative): how long media
    /// from peer shards waited before this shard handled it, per message
    /// (`io::PeerHop`). The verdict's server evidence reads it per second.
    pub fn peer_hop(&self) -> LatencyHistogram {
        self.io.peer_hop.hist
    }

    /// What accumulated since the driver last emptied it (after
    /// [`Engine::finish_batch`]); the driver drains each vector, the engine
    /// only appends. Does no work.
    pub fn outputs(&mut self) -> &mut Outputs {
        &mut self.io.out
    }

    /// When the engine next needs `handle_timeout` (at once while a
    /// deferred drain waits and nobody asked for the outputs).
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.io.timers.next(),
            self.keyframes.next(),
            self.io.batch.at,
        ]
        .into_iter()
        .flatten()
        .min()
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
        self.drain_pending();
        let Accepted {
            rtc,
            ufrag,
            tracks,
            slots,
            publish_data: accepted_publish_data,
            ..
        } = accepted;
        let mut p = Participant::new(id, room, rtc, &tracks, &slots);
        p.session.publish_data = accepted_publish_data;
        // The engine keeps no display name: the tests' faults look at it once.
        p.session.inject_panic(self.settings.faults.panics(&name));
        p.negotiated(now);
        self.demux.add(id, ufrag);
        self.io
            .timers
            .connect_by(id, now + self.settings.participant.connect_timeout);
        self.participants.insert(id, p);
        self.io.counters.participants_added += 1;
        self.io.timers.start_room_tick(now);
        self.drain(now, None, id);
        self.apply_room(now, roster);
        self.settle(now);
    }

    /// Removes a participant (DELETE from the API). Sends DTLS close_notify.
    pub fn remove_participant(&mut self, now: Instant, id: ParticipantId) -> bool {
        self.remove_participant_for(now, id, LeaveReason::Removed)
    }

    /// Removes a participant the control thread took out of its room, for
    /// `reason` (the `bye` says it): `Removed` or `Replaced`.
    pub fn remove_participant_for(
        &mut self,
        now: Instant,
        id: ParticipantId,
        reason: LeaveReason,
    ) -> bool {
        self.drain_pending();
        let existed = self.participants.contains_key(&id);
        self.io.todo.doomed.push((id, reason, None));
        self.settle(now);
        existed
    }

    /// A new roster for a room with members on this shard.
    pub fn apply_room(&mut self, now: Instant, update: RoomUpdate) {
        self.drain_pending();
        let id = update.room;
        let shard = self.shard;
        let view = self
            .rooms
            .entry(id)
            .or_insert_with(|| RoomView::new(id, update.name.clone()));
        let before = view.track_states();
        // Who left, and why.
        let left: Vec<RoomEvent> = update
            .departed
            .iter()
            .map(|d| RoomEvent::Left {
                participant: d.id.to_string(),
                name: d.name.clone(),
                reason: d.reason,
            })
            .collect();
        let changed = view.apply(update, shard);
        if view.local.is_empty() {
            self.rooms.remove(&id);
            return;
        }
        if !left.is_empty() {
            for to in view.local.clone() {
                for ev in &left {
                    self.send_event(now, to, ev);
                }
            }
        }
        if changed {
            self.room_changed(now, id);
            self.send_track_changes(now, id, &before);
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
        self.drain_pending();
        let Some(p) = self.participants.get_mut(&id) else {
            return Err(OfferError::UnknownParticipant(id));
        };
        let applied = guarded(&mut self.io, id, &mut p.session.poisoned, |_| {
            apply_prepared(&mut p.session.rtc, offer)
        });
        let answer = match applied {
            Some(Ok(answer)) => answer,
            failed => {
                if let Some(Err(e)) = &failed {
                    tracing::debug!(participant = %id, "a rehearsed renegotiation failed on the shard: {e}");
                    self.io.todo.doomed.push((
                        id,
                        LeaveReason::RenegotiationFailed,
                        Some(e.to_string()),
                    ));
                }
                self.settle(now);
                return Err(OfferError::RenegotiationFailed);
            }
        };
        let ufrag = p.session.rtc.direct_api().local_ice_credentials().ufrag;
        p.negotiated(now);
        self.demux.set_ufrag(id, ufrag);
        self.drain(now, None, id);
        self.settle(now);
        Ok(answer)
    }

    /// Closes every connection (shutdown): DTLS close_notify to each participant.
    pub fn close_all(&mut self, now: Instant) {
        self.drain_pending();
        let ids: Vec<ParticipantId> = self.participants.keys().copied().collect();
        for id in ids {
            self.io.todo.doomed.push((id, LeaveReason::Shutdown, None));
        }
        self.settle(now);
    }

    // ---------------------------------------------------------------- network

    /// One datagram from the shard's socket. `kernel_rx` is its kernel
    /// receive time (CLOCK_REALTIME since the epoch) when the socket reports
    /// it; it travels with the media the datagram carries.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        kernel_rx: Option<Duration>,
        source: SocketAddr,
        destination: SocketAddr,
        data: &[u8],
    ) {
        self.io.counters.rx_packets += 1;
        self.io.counters.rx_bytes += data.len() as u64;
        let _ = self.receive(now, kernel_rx, Via::Udp, source, destination, data);
    }

    /// One RFC 4571 frame (the length prefix removed) from an ICE-TCP
    /// connection: `source` is the client's end of the connection, and the
    /// answers go back to it as [`Transmit`]s with `proto` TCP. Everything
    /// else is as for a datagram. Returns whether the frame was accepted: it
    /// reached a known participant and nothing refused it (what keeps an
    /// ICE-TCP connection open).
    pub fn handle_tcp_frame(
        &mut self,
        now: Instant,
        source: SocketAddr,
        destination: SocketAddr,
        data: &[u8],
    ) -> bool {
        self.io.counters.rx_packets += 1;
        self.io.counters.rx_bytes += data.len() as u64;
        self.receive(now, None, Via::Tcp, source, destination, data)
    }

    /// A datagram or ICE-TCP frame, in four stages: [`Self::admit`] (is it
    /// for a participant, may it reach its `Rtc`), the own ingress (media
    /// of an adopted stream goes past str0m), [`Self::hand_to_rtc`] (str0m's
    /// input) and [`Self::after_input`] (what str0m made of it). A datagram
    /// dropped on the way is counted once, by the stage that drops it;
    /// true when none did (or it was handed over to its shard: a shared
    /// port, see [`handoff`]).
    fn receive(
        &mut self,
        now: Instant,
        kernel_rx: Option<Duration>,
        via: Via,
        source: SocketAddr,
        destination: SocketAddr,
        data: &[u8],
    ) -> bool {
        self.end_batch_unless_at(now);
        let proto = match via {
            Via::Tcp => Protocol::Tcp,
            Via::Udp | Via::Shard(_) => Protocol::Udp,
        };
        let (id, known, contents) = match self.admit(via, source, data) {
            Ok(Admitted::Here(id, known, contents)) => (id, known, contents),
            Ok(Admitted::Elsewhere(to)) => {
                self.hand_over(to, kernel_rx, source, destination, data);
                return true;
            }
            Err(counter) => {
                *counter(&mut self.io.counters) += 1;
                return false;
            }
        };
        if known && let Some(taken) = self.own_ingress(now, kernel_rx, id, data) {
            self.settle(now);
            return taken;
        }
        let receive = Receive {
            proto,
            source,
            destination,
            contents,
        };
        match self.hand_to_rtc(now, id, known, receive, data) {
            Fed::Taken { srtcp_dropped } => {
                if proto == Protocol::Udp {
                    if !known && self.settings.shared_port.is_some() {
                        self.io.out.flows.push((source, true));
                    }
                    // A client's new address: the send path follows (rebind.rs).
                    if self.follow_nomination(id, source, data) {
                        self.refresh_watched(now, id);
                    }
                }
                // Handed over by the shard whose socket it reached: that
                // shard sends this address's datagrams here from now on
                // (told again at each STUN request, in case it forgot).
                if let Via::Shard(from) = via
                    && (!known || is_stun(data))
                {
                    self.io.out.peers.push((
                        from,
                        PeerMsg::Claim {
                            source,
                            shard: self.shard,
                        },
                    ));
                }
                self.after_input(now, kernel_rx, id, (source, known), data, srtcp_dropped)
            }
            Fed::Refused(counter) => {
                *counter(&mut self.io.counters) += 1;
                false
            }
            Fed::Panicked => {
                // Counted as a panic; the datagram is that participant's last.
                self.io.counters.dropped_malformed += 1;
                self.settle(now);
                false
            }
        }
    }

    /// Whether a datagram from `source` goes on: for which participant,
    /// whether from an address it is known at, and str0m's view of it; or
    /// the counter of the reason it does not.
    fn admit<'d>(
        &mut self,
        via: Via,
        source: SocketAddr,
        data: &'d [u8],
    ) -> Result<Admitted<'d>, DropCounter> {
        if !plausible(data) {
            return Err(|c| &mut c.dropped_malformed);
        }
        let Ok(contents) = DatagramRecv::try_from(data) else {
            return Err(|c| &mut c.dropped_malformed);
        };
        let (id, known) = match self.demux.route(source, data) {
            Route::Known(id) => (id, true),
            Route::New(id) => (id, false),
            Route::Elsewhere(to) if self.shares_port_with(to, via) => {
                self.handoff.handed(source, to);
                return Ok(Admitted::Elsewhere(to));
            }
            Route::Elsewhere(_) => return Err(|c| &mut c.dropped_unknown_source),
            Route::Unknown => {
                return match self.handoff.owner(source) {
                    Some(to) if self.shares_port_with(to, via) => Ok(Admitted::Elsewhere(to)),
                    _ => Err(|c| &mut c.dropped_unknown_source),
                };
            }
        };
        let Some(p) = self.participants.get(&id).filter(|p| !p.session.poisoned) else {
            return Err(|c| &mut c.dropped_unknown_source);
        };
        if !known && self.demux.addr_count(id) >= self.settings.participant.max_addrs {
            return Err(|c| &mut c.dropped_addr_limit);
        }
        if is_rtp(data)
            && crate::rtp::ssrc(data).is_some_and(|ssrc| !p.publisher.knows_ssrc(ssrc))
            && p.publisher.guard.refuses(data)
        {
            return Err(|c| &mut c.dropped_unknown_stream);
        }
        Ok(Admitted::Here(id, known, contents))
    }

    /// Whether a datagram that came `via` goes to shard `to`: another
    /// shard of this node sharing the port, and it came from the socket
    /// (a datagram handed over once is never handed on).
    fn shares_port_with(&self, to: ShardId, via: Via) -> bool {
        via == Via::Udp
            && to != self.shard
            && !to.is_remote()
            && self.settings.shared_port.is_some_and(|n| to.0 < n)
    }

    /// A datagram for a participant of shard `to` (its socket shares the
    /// port with this one's): one copy, over the media lane (a full lane
    /// drops it, as the network might).
    fn hand_over(
        &mut self,
        to: ShardId,
        kernel_rx: Option<Duration>,
        source: SocketAddr,
        destination: SocketAddr,
        data: &[u8],
    ) {
        self.io.counters.handed_over += 1;
        self.io.out.peers.push((
            to,
            PeerMsg::Datagram {
                from: self.shard,
                kernel_rx,
                source,
                destination,
                data: data.into(),
            },
        ));
    }

    /// The own ingress takes media of the streams it adopted, from an
    /// address str0m has verified ([`ingress`]): `None` when it is not one
    /// of them, else whether it was accepted (forwarded) or dropped (and
    /// counted).
    fn own_ingress(
        &mut self,
        now: Instant,
        kernel_rx: Option<Duration>,
        id: ParticipantId,
        data: &[u8],
    ) -> Option<bool> {
        if !is_rtp(data) {
            return None;
        }
        let ingress = self
            .participants
            .get_mut(&id)
            .and_then(|p| p.publisher.ingress.as_mut())?;
        match ingress.receive(data) {
            ingress::Taken::NotOurs => None,
            ingress::Taken::Dropped => {
                self.io.counters.dropped_by_stack += 1;
                Some(false)
            }
            ingress::Taken::Packet(pkt) => {
                self.on_own_rtp(now, kernel_rx, id, pkt, data.len());
                Some(true)
            }
        }
    }

    /// Hands a datagram to its participant's `Rtc` (drained first if the
    /// batch wrote into it): taken, refused (and the counter why), or the
    /// participant panicked.
    fn hand_to_rtc(
        &mut self,
        now: Instant,
        id: ParticipantId,
        known: bool,
        receive: Receive<'_>,
        data: &[u8],
    ) -> Fed {
        let Some(p) = self.participants.get_mut(&id) else {
            return Fed::Refused(|c| &mut c.dropped_unknown_source);
        };
        let input = Input::Receive(now, receive);
        let session = &mut p.session;
        if session.take_rtc_drain() {
            // Media forwarded to it, or received from it on the own
            // ingress, this batch: drained before its input.
            drain_rtc(&mut self.io, now, None, id, session);
        }
        let fault = session.connected && session.injected_panic();
        // str0m patch 27: its count of SRTCP that failed authentication,
        // read around the input, tells an RTCP datagram it dropped.
        let srtcp_failures =
            is_rtcp(data).then(|| session.rtc.direct_api().srtcp_unprotect_failures());
        let rtc = &mut session.rtc;
        let handled = guarded(&mut self.io, id, &mut session.poisoned, |_| {
            if fault {
                #[allow(
                    clippy::panic,
                    reason = "the tests' fault injection (crate::faults): false but in a fault-injection build"
                )]
                {
                    panic!("injected fault (--test-panic-participant)");
                }
            }
            if !known && !rtc.accepts(&input) {
                return Err(None);
            }
            rtc.handle_input(input).map_err(Some)
        });
        match handled {
            Some(Ok(())) => {
                session.trail.last_rx = Some(now);
                Fed::Taken {
                    srtcp_dropped: srtcp_failures
                        .is_some_and(|n| session.rtc.direct_api().srtcp_unprotect_failures() != n),
                }
            }
            Some(Err(None)) => Fed::Refused(|c| &mut c.dropped_unknown_source),
            Some(Err(Some(e))) => {
                // A DTLS record str0m refused (a fatal alert from the
                // client, a failed handshake message): the datagram is
                // dropped, and the error kept for the report should the
                // participant never connect.
                tracing::debug!(participant = %id, "str0m refused a datagram: {e}");
                session.trail.last_rx = Some(now);
                session.trail.last_error = Some(io::describe(&e));
                Fed::Refused(|c| &mut c.dropped_malformed)
            }
            None => Fed::Panicked,
        }
    }

    /// What str0m made of a datagram it took: a new address learnt, NACKs
    /// answered from the own egress, its outputs drained, and a datagram it
    /// dropped without a word counted (false then).
    fn after_input(
        &mut self,
        now: Instant,
        kernel_rx: Option<Duration>,
        id: ParticipantId,
        (source, known): (SocketAddr, bool),
        data: &[u8],
        srtcp_dropped: bool,
    ) -> bool {
        if !known {
            self.demux.learn(id, source);
            self.handoff.forget(source);
        }
        if is_rtcp(data) {
            self.answer_nacks(now, id);
        }
        let events_before = self.io.events.len();
        let transmits_before = self.io.out.transmits.len();
        self.drain(now, kernel_rx, id);
        let silent = self.io.events.len() == events_before
            && self.io.out.transmits.len() == transmits_before;
        let refused = srtcp_dropped || stack_refused(data, silent);
        if refused {
            // An SRTCP datagram that failed authentication (str0m patch 27),
            // counted here once, or one str0m dropped without a word
            // ([`stack_refused`]).
            self.io.counters.dropped_by_stack += 1;
        }
        self.settle(now);
        !refused
    }

    /// Timers due at `now`: str0m timeouts, connect deadlines, deferred
    /// keyframe requests and the room tick.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.drain_pending();
        while let Some(id) = self.io.timers.pop_rtc_due(now) {
            let Some(p) = self.participants.get_mut(&id) else {
                continue;
            };
            guarded(&mut self.io, id, &mut p.session.poisoned, |io| {
                feed_time(io, id, &mut p.session.rtc, now)
            });
            self.drain(now, None, id);
        }
        while let Some(id) = self.io.timers.pop_connect_due(now) {
            if self
                .participants
                .get(&id)
                .is_some_and(|p| !p.session.connected)
            {
                self.io.counters.connect_timeouts += 1;
                self.io
                    .todo
                    .doomed
                    .push((id, LeaveReason::ConnectTimeout, None));
            }
        }
        let grace = self.settings.participant.reconnect_grace;
        while let Some(id) = self.io.timers.pop_grace_due(now) {
            // Still down, and since a grace ago (an entry of an earlier
            // outage it came back from is stale).
            if self.participants.get(&id).is_some_and(|p| {
                p.session
                    .down_since
                    .is_some_and(|t| now.saturating_duration_since(t) >= grace)
            }) {
                self.io
                    .todo
                    .doomed
                    .push((id, LeaveReason::IceDisconnected, None));
            }
        }
        while let Some(key) = self.keyframes.pop_due(now) {
            self.request_keyframe(now, key);
        }
        if self.io.timers.room_tick_due(now) {
            self.tick_rooms(now);
            self.tick_layers(now);
        }
        self.settle(now);
    }

    /// `id`'s ICE went down (str0m: no valid pair left). Before it ever
    /// connected, or without a grace, it is removed now; a connected one
    /// keeps its place for `--reconnect-grace` (rosters, slots, tracks), so
    /// a client that comes back (ICE restart, a check from a new address)
    /// finds its call as it left it.
    fn on_ice_down(&mut self, now: Instant, id: ParticipantId) {
        let grace = self.settings.participant.reconnect_grace;
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        if grace.is_zero() || !p.session.connected {
            self.io
                .todo
                .doomed
                .push((id, LeaveReason::IceDisconnected, None));
            return;
        }
        if p.session.down_since.is_none() {
            p.session.down_since = Some(now);
            self.io.counters.ice_downs += 1;
            self.io.timers.grace_until(id, now + grace);
        }
    }

    /// `id`'s path came back or moved: what it missed meanwhile broke its
    /// decoders' references, so a keyframe for every video slot it watches
    /// now, rather than once each decoder notices and asks (about a second
    /// later in Chromium). Throttled per layer like any request.
    fn refresh_watched(&mut self, now: Instant, id: ParticipantId) {
        let Some(p) = self.participants.get(&id) else {
            return;
        };
        let keys: Vec<LayerKey> = p
            .subscriber
            .slots
            .iter()
            .filter(|s| s.kind == MediaKind::Video)
            .filter_map(|s| s.source_layer())
            .collect();
        for key in keys {
            self.request_keyframe(now, key);
        }
    }

    /// A message from a peer shard.
    pub fn handle_peer(&mut self, now: Instant, msg: PeerMsg) {
        match msg {
            PeerMsg::Media { room, packet } => {
                self.io.counters.cross_shard_in += 1;
                self.io.peer_hop.message(now, packet.received);
                let media = MediaPacket::from(packet);
                self.fan_out_relayed(room, &media);
                self.forward(now, room, &media, false);
            }
            PeerMsg::KeyframeRequest { key } => self.request_keyframe(now, key),
            PeerMsg::LayerDemand { track, from, mask } => {
                if mask == 0 {
                    self.demand_remote.remove(&(track, from));
                } else if self.participants.contains_key(&track.participant) {
                    self.demand_remote
                        .insert((track, from), simulcast::Demand { mask, at: now });
                }
            }
            PeerMsg::Message {
                room,
                from,
                to,
                text,
            } => {
                self.deliver_message(now, room, from, to.as_deref(), &text);
            }
            PeerMsg::Datagram {
                from,
                kernel_rx,
                source,
                destination,
                data,
            } => {
                self.io.counters.handed_in += 1;
                let _ = self.receive(now, kernel_rx, Via::Shard(from), source, destination, &data);
            }
            PeerMsg::Claim { source, shard } => self.handoff.claim(source, shard),
        }
        self.settle(now);
    }

    // ---------------------------------------------------------------- the step

    /// Drains one participant's `Rtc` to its next timeout (str0m's invariant).
    /// Hands str0m the packets of the own egress that `id` NACKed
    /// ([`egress::answer_nacks`]), and the time, so that its pacer releases
    /// them in the drain that follows.
    fn answer_nacks(&mut self, now: Instant, id: ParticipantId) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let Participant {
            session,
            subscriber,
            ..
        } = p;
        let rtc = &mut session.rtc;
        let scratch = &mut self.nack_scratch;
        let recent = &self.recent;
        let handed = guarded(&mut self.io, id, &mut session.poisoned, |_| {
            let history = subscriber.rtx_history();
            let slots = subscriber.slots.iter().map(|s| (s.mid, &s.out.egress));
            egress::answer_nacks(rtc, slots, recent, now, history, scratch)
        })
        .unwrap_or(0);
        if handed > 0 {
            self.io.counters.resent_direct += handed;
            feed_time(&mut self.io, id, rtc, now);
        }
    }

    fn drain(&mut self, now: Instant, kernel_rx: Option<Duration>, id: ParticipantId) {
        if let Some(p) = self.participants.get_mut(&id) {
            drain_rtc(&mut self.io, now, kernel_rx, id, &mut p.session);
        }
    }

    /// Drains every subscriber forwarding wrote into since its last drain
    /// (at the instant their clocks were fed), then settles what that
    /// produced. Bounded: settling can forward again only from events
    /// already queued, so a few rounds empty the list; what a last round
    /// leaves waits for the next call (`poll_timeout` says it is due).
    fn drain_pending(&mut self) {
        for _ in 0..4 {
            let Some(at) = self.io.batch.at.take() else {
                return;
            };
            let mut ids = std::mem::take(&mut self.io.batch.pending);
            for id in ids.drain(..) {
                let Some(p) = self.participants.get_mut(&id) else {
                    continue;
                };
                // The own egress's datagrams first, in the order written.
                for t in p.session.take_held() {
                    self.io.counters.tx_packets += 1;
                    self.io.counters.tx_bytes += t.contents.len() as u64;
                    self.io.out.transmits.push(t);
                }
                if p.session.take_rtc_drain() {
                    drain_rtc(&mut self.io, at, None, id, &mut p.session);
                }
            }
            // The list's allocation is kept for the next batch.
            if self.io.batch.pending.is_empty() {
                self.io.batch.pending = ids;
            }
            self.settle(at);
        }
    }

    /// Deferred drains share one instant (each pending subscriber's clock
    /// was fed with it): work at another instant ends the batch first.
    fn end_batch_unless_at(&mut self, now: Instant) {
        if self.io.batch.at.is_some_and(|t| t != now) {
            self.drain_pending();
        }
    }

    /// Runs queued events to completion, then removals, keyframe requests
    /// and slot notifications.
    fn settle(&mut self, now: Instant) {
        for _ in 0..MAX_DRAIN {
            if let Some(q) = self.io.events.pop_front() {
                self.on_event(now, q);
                continue;
            }
            if let Some((id, reason, detail)) = self.io.todo.doomed.pop() {
                self.evict(now, id, reason, detail);
                continue;
            }
            if let Some(key) = self.io.todo.keyframes_wanted.pop() {
                self.request_keyframe(now, key);
                continue;
            }
            if let Some(id) = self.io.todo.realloc.pop() {
                if !self.io.todo.realloc.contains(&id) {
                    self.allocate(now, id);
                }
                continue;
            }
            if let Some(id) = self.io.todo.slots_dirty.pop() {
                if !self.io.todo.slots_dirty.contains(&id) {
                    self.send_slots(now, id);
                }
                continue;
            }
            break;
        }
    }

    fn on_event(&mut self, now: Instant, q: Queued) {
        let Queued {
            id,
            event,
            kernel_rx,
        } = q;
        match event {
            Event::RtpPacket(pkt) => self.on_rtp(now, kernel_rx, id, pkt),
            Event::KeyframeRequest(req) => {
                self.io.counters.keyframe_requests_received += 1;
                let Some(p) = self.participants.get_mut(&id) else {
                    return;
                };
                p.session.stats.keyframe_requests_received += 1;
                let source = p
                    .subscriber
                    .slots
                    .iter()
                    .find(|s| s.mid == req.mid)
                    .and_then(|s| s.source_layer());
                if let Some(key) = source {
                    self.request_keyframe(now, key);
                }
            }
            Event::Connected => {
                if let Some(p) = self.participants.get_mut(&id) {
                    p.session.connected = true;
                }
                self.io.out.control.push(ShardEvent::Connected { id });
            }
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                self.on_ice_down(now, id);
            }
            Event::IceConnectionStateChange(
                IceConnectionState::Connected | IceConnectionState::Completed,
            ) => {
                if let Some(p) = self.participants.get_mut(&id) {
                    p.session.trail.ice_connected = true;
                    if p.session.down_since.take().is_some() {
                        self.io.counters.reconnects += 1;
                    }
                    // Up again mid-call (back from down, or an ICE
                    // restart's new path): its decoders lost references.
                    if p.session.connected {
                        self.refresh_watched(now, id);
                    }
                }
            }
            Event::ChannelOpen(cid, _label) => self.on_channel_open(now, id, cid),
            Event::EgressBitrateEstimate(str0m::bwe::BweKind::Twcc {
                estimate,
                can_probe,
            }) => {
                if let Some(p) = self.participants.get_mut(&id) {
                    // A climb counts on the lowest estimate of the last
                    // seconds (a fall holds it back that long).
                    let d = &mut p.subscriber.downlink;
                    d.note_twcc(now, estimate.as_u64(), can_probe);
                    self.io.todo.realloc.push(id);
                }
            }
            // Its REMB, the estimate when it gives no TWCC feedback.
            Event::EgressBitrateEstimate(str0m::bwe::BweKind::Remb { estimate, .. }) => {
                if let Some(p) = self.participants.get_mut(&id) {
                    p.subscriber.downlink.note_remb(now, estimate.as_u64());
                    self.io.todo.realloc.push(id);
                }
            }
            Event::ChannelData(d) => self.on_channel_data(now, id, d),
            // str0m patch 26: a channel over the limits, reset and not kept.
            Event::ChannelRefused(_) => self.io.counters.refused_channels += 1,
            Event::MediaAdded(m) => self.on_media_added(now, id, m),
            ev @ (Event::PeerStats(_)
            | Event::MediaIngressStats(_)
            | Event::MediaEgressStats(_)) => {
                if let Event::PeerStats(st) = &ev
                    && let Some(p) = self.participants.get_mut(&id)
                {
                    p.subscriber.fit_rtx_history(&mut p.session.rtc, st.rtt);
                }
                self.note_reports(id, &ev);
                self.on_stats(id, ev);
            }
            _ => {}
        }
    }

    /// A renegotiation added m-lines: new tracks and slots.
    fn on_media_added(&mut self, now: Instant, id: ParticipantId, m: MediaAdded) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
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
        // Simulcast rids, the stream guard and unpaced slots for the new lines.
        p.negotiated(now);
        self.io.out.control.push(ShardEvent::LinesChanged {
            id,
            tracks: p.publisher.track_lines(),
            slots: p.subscriber.slot_lines(),
        });
        // New slots are announced (empty or filled) right away.
        self.io.todo.slots_dirty.push(id);
        self.assign_slots(id);
    }

    /// Asks the publisher of a track layer for a keyframe, within the rate
    /// limit ([`keyframes`]): on its `Rtc` when it is local, else one
    /// message to its shard. A scalable source's layers are spatial layers
    /// of its one encoding: its keyframe is that encoding's.
    pub(super) fn request_keyframe(&mut self, now: Instant, key: LayerKey) {
        let key = match self.sources.get(&key.track) {
            Some(s) if s.svc => LayerKey { layer: 0, ..key },
            _ => key,
        };
        let track = key.track;
        if let Some(p) = self.participants.get_mut(&track.participant) {
            let Some(t) = p
                .publisher
                .tracks
                .iter()
                .find(|t| t.mid == track.mid && t.kind == MediaKind::Video)
            else {
                return;
            };
            let rid = t.rids.get(usize::from(key.layer)).copied();
            if (rid.is_none() && key.layer != 0) || !self.keyframes.request(now, key) {
                return;
            }
            let requested = guarded(
                &mut self.io,
                track.participant,
                &mut p.session.poisoned,
                |_| {
                    let mut api = p.session.rtc.direct_api();
                    api.stream_rx_by_mid(track.mid, rid)
                        .map(|rx| rx.request_keyframe(KeyframeRequestKind::Pli))
                        .is_some()
                },
            );
            if requested == Some(true) {
                self.io.counters.keyframe_requests_sent += 1;
                tracing::debug!(publisher = %track.participant, mid = %track.mid, layer = key.layer, "keyframe requested");
            }
            self.drain(now, None, track.participant);
            return;
        }
        let shard = self
            .rooms
            .values()
            .find_map(|r| r.member(track.participant))
            .map(|m| m.info.shard);
        let Some(shard) = shard else {
            return;
        };
        if self.keyframes.request(now, key) {
            self.io
                .out
                .peers
                .push((shard, PeerMsg::KeyframeRequest { key }));
        }
    }

    /// Fills `id`'s slots from its room's ranking ([`policy::assign`]).
    fn assign_slots(&mut self, id: ParticipantId) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let Some(room) = self.rooms.get(&p.room) else {
            return;
        };
        let a = policy::assign(&mut p.subscriber.slots, room, id);
        self.assigned(id, a);
    }

    /// Roster changed: tell every local member and refill their slots.
    fn room_changed(&mut self, now: Instant, room_id: RoomId) {
        self.send_roster(now, room_id);
        self.refill_room(room_id);
    }

    /// Refills the slots of every local member of a room.
    fn refill_room(&mut self, room_id: RoomId) {
        let local = self
            .rooms
            .get(&room_id)
            .map(|r| r.local.clone())
            .unwrap_or_default();
        for id in local {
            self.assign_slots(id);
        }
    }

    /// The room tick: published tracks silent for [`crate::room::PAUSED_AFTER`]
    /// are paused (reported to the control thread), active speakers (a
    /// change reorders slots), and the keyframe limiter forgets what is
    /// past its interval.
    fn tick_rooms(&mut self, now: Instant) {
        self.keyframes.prune(now);
        for (&id, p) in self.participants.iter_mut() {
            for t in &mut p.publisher.tracks {
                if t.flow.pause_if_silent(now) {
                    self.io.out.control.push(ShardEvent::TrackState {
                        id,
                        mid: t.mid,
                        state: t.flow.state(),
                    });
                }
            }
        }
        let changed: Vec<RoomId> = self
            .rooms
            .iter_mut()
            .filter_map(|(id, r)| r.update_speaker(now).then_some(*id))
            .collect();
        for room_id in changed {
            self.send_speaker(now, room_id);
            self.refill_room(room_id);
        }
    }

    /// Removes a participant from this shard: closes its `Rtc` (DTLS
    /// close_notify goes out), forgets its addresses and deadlines, frees
    /// slots showing it, and (unless the control thread asked for it)
    /// reports why: `detail` is what str0m (or the panic) said, if anything.
    fn evict(
        &mut self,
        now: Instant,
        id: ParticipantId,
        reason: LeaveReason,
        detail: Option<String>,
    ) {
        let Some(mut p) = self.participants.remove(&id) else {
            return;
        };
        self.io.counters.participants_removed += 1;
        // A poisoned `Rtc` is only dropped: closing it would call into it.
        let closable = !p.session.poisoned
            && guarded(&mut self.io, id, &mut p.session.poisoned, |_| {
                p.session.rtc.is_alive()
            }) == Some(true);
        if closable {
            // The last word on the data channel says why, then DTLS closes.
            if let Some(cid) = p.session.channel
                && let Ok(bye) = serde_json::to_string(&RoomEvent::Bye {
                    reason: reason.as_str(),
                })
            {
                let _ = guarded(&mut self.io, id, &mut p.session.poisoned, |_| {
                    p.session
                        .rtc
                        .channel(cid)
                        .map(|mut ch| ch.write(false, bye.as_bytes()))
                });
                drain_rtc(&mut self.io, now, None, id, &mut p.session);
            }
            let _ = guarded(&mut self.io, id, &mut p.session.poisoned, |_| {
                p.session.rtc.close()
            });
            drain_rtc(&mut self.io, now, None, id, &mut p.session);
        }
        // Events of a participant that is leaving are moot.
        self.io.events.retain(|q| q.id != id);
        self.io.todo.doomed.retain(|(d, ..)| *d != id);
        self.io.timers.forget(id);
        let addrs = self.demux.remove(id);
        if self.settings.shared_port.is_some() {
            self.io
                .out
                .flows
                .extend(addrs.into_iter().map(|a| (a, false)));
        }
        if !reason.requested() {
            let detail = leave_detail(
                reason,
                detail,
                &p,
                now,
                self.settings.participant.connect_timeout,
            );
            self.io
                .out
                .control
                .push(ShardEvent::Left { id, reason, detail });
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
                self.room_changed(now, room_id);
            }
        }
        if self.participants.is_empty() {
            self.io.timers.stop_room_tick();
        }
    }
}

/// Why a participant left, in words an operator can act on: the reason, what
/// its connection got to (nothing arrived, ICE never completed, DTLS did not
/// finish), how long the client has been silent, and str0m's own error text
/// (`detail`, or the last DTLS error one of its datagrams caused).
fn leave_detail(
    reason: LeaveReason,
    detail: Option<String>,
    p: &Participant,
    now: Instant,
    connect_timeout: Duration,
) -> String {
    let t = &p.session.trail;
    let silent = match t.last_rx {
        Some(at) => format!(
            "no response from the client for {:.1} s",
            now.saturating_duration_since(at).as_secs_f64()
        ),
        None => "nothing ever arrived from the client".to_string(),
    };
    let stage = if t.last_rx.is_none() {
        "nothing ever arrived from the client (UDP blocked, or a wrong address in the answer?)"
    } else if !t.ice_connected {
        "ICE checks did not complete"
    } else {
        "ICE connected but the DTLS handshake did not complete"
    };
    let dtls = t
        .last_error
        .as_deref()
        .map(|e| format!("; last error: {e}"))
        .unwrap_or_default();
    let said = detail.unwrap_or_else(|| "no detail".to_string());
    match reason {
        LeaveReason::IceDisconnected if p.session.connected => match p.session.down_since {
            Some(t) => format!(
                "ICE consent failed and the client did not come back within --reconnect-grace ({:.0} s): {silent}",
                now.saturating_duration_since(t).as_secs_f64()
            ),
            None => format!("ICE consent failed: {silent}"),
        },
        LeaveReason::IceDisconnected => {
            format!("ICE failed before the connection was up: {stage}; {silent}{dtls}")
        }
        LeaveReason::ConnectTimeout => format!(
            "never connected within --connect-timeout ({} s): {stage}{dtls}",
            connect_timeout.as_secs_f64()
        ),
        LeaveReason::Error => said,
        LeaveReason::Panic => format!("panic while handling it: {said}"),
        LeaveReason::Closed => match &t.last_error {
            Some(e) => format!("the session closed after an error: {e}"),
            None => "the client closed the connection (DTLS close_notify)".to_string(),
        },
        LeaveReason::RenegotiationFailed => format!("a renegotiation failed on the shard: {said}"),
        LeaveReason::Removed => "removed through the API".to_string(),
        LeaveReason::Shutdown => "the server is shutting down".to_string(),
        LeaveReason::Replaced => "replaced by a new join of its identity".to_string(),
        LeaveReason::Draining => "its node drains: sent to another node".to_string(),
    }
}

/// The counter a dropped datagram goes to.
type DropCounter = fn(&mut Counters) -> &mut u64;

/// What became of a datagram handed to an `Rtc` ([`Engine::hand_to_rtc`]).
enum Fed {
    /// str0m took it; `srtcp_dropped`: an SRTCP packet it dropped for
    /// failed authentication (str0m patch 27).
    Taken { srtcp_dropped: bool },
    /// Refused: the counter of why.
    Refused(DropCounter),
    /// The participant's handling panicked (it is poisoned and doomed).
    Panicked,
}

/// An RTP packet (version 2, not RTCP by RFC 5761's payload type range).
fn is_rtp(data: &[u8]) -> bool {
    matches!(data, [128..=191, b, ..] if !(192..=223).contains(b))
}

/// An RTCP packet (RFC 5761 demux: version 2, packet type 192-223).
fn is_rtcp(data: &[u8]) -> bool {
    matches!(data, [128..=191, 192..=223, ..])
}

/// A STUN message by its first byte (RFC 7983: 0-3; STUN's first two bits
/// are zero, so 0 or 1; RTP, RTCP and DTLS never start so).
fn is_stun(data: &[u8]) -> bool {
    matches!(data, [0..=1, ..])
}

/// Whether str0m dropped a datagram it took, `silent` when the drain after
/// it gave neither an event nor a datagram. DTLS by its first byte (RFC
/// 7983: 20-63) is judged by its form alone: one that is not whole DTLS
/// records is always dropped, and whole records may give nothing at once
/// (a fragment of a data-channel message: SCTP acknowledges every other
/// packet, or on a timer; a retransmitted handshake flight). Its silence
/// would say nothing anyway: the drain also carries what is not its own (a
/// data-channel event written this batch, a timer its clock reached). A
/// valid STUN request is answered and a valid SRTP packet gives an event at
/// once, so their silence is a refusal (one that fails authentication or
/// replays, a STUN request with bad integrity); a valid RTCP report may
/// give nothing at once.
fn stack_refused(data: &[u8], silent: bool) -> bool {
    match data.first() {
        Some(20..=63) => !dtls_records(data),
        _ => silent && !is_rtcp(data),
    }
}

/// Whether `data` is one or more whole DTLS records end to end (RFC 6347
/// 4.1: a 13-byte header of content type, version, epoch, sequence number
/// and length, then that many bytes), each of a type the server speaks
/// (change_cipher_spec, alert, handshake, application_data) in DTLS 1.0 or
/// 1.2, and application data never in epoch 0 (it is always encrypted).
fn dtls_records(mut data: &[u8]) -> bool {
    if data.is_empty() {
        return false;
    }
    while !data.is_empty() {
        let Some((header, rest)) = data.split_first_chunk::<13>() else {
            return false;
        };
        let [ty, major, minor, e0, e1, _, _, _, _, _, _, l0, l1] = *header;
        if !(20..=23).contains(&ty)
            || major != 0xFE
            || !matches!(minor, 0xFD | 0xFF)
            || (ty == 23 && e0 == 0 && e1 == 0)
        {
            return false;
        }
        let Some(after) = rest.get(usize::from(u16::from_be_bytes([l0, l1]))..) else {
            return false;
        };
        data = after;
    }
    true
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

#[cfg(test)]
mod tests {
    use super::*;
    use str0m::net::{Protocol, Transmit};

    fn sent(len: usize, capacity: usize) -> Transmit {
        let mut contents = Vec::with_capacity(capacity);
        contents.resize(len, 7);
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], 9).into();
        Transmit {
            proto: Protocol::Udp,
            source: addr,
            destination: addr,
            contents: contents.into(),
        }
    }

    #[test]
    fn sent_buffers_are_kept_for_the_egress_up_to_a_bound() {
        let mut out = Outputs::default();
        out.transmits.push(sent(500, 600));
        out.transmits.push(sent(100, MAX_SPARE_CAPACITY + 1));
        out.clear_transmits();
        assert!(out.transmits.is_empty());
        // The oversized one was freed; the other comes back as it was.
        let b = out.spare_buffer();
        assert_eq!((b.len(), b.capacity()), (500, 600));
        assert_eq!(out.spare_buffer().capacity(), 0, "then new ones");

        out.transmits
            .extend((0..MAX_SPARE_BUFFERS + 10).map(|_| sent(10, 10)));
        out.clear_transmits();
        assert!(out.transmits.is_empty());
        assert_eq!(out.spare.len(), MAX_SPARE_BUFFERS);
    }
}
