//! What one engine step accumulates, kept apart from the participants so that
//! one participant can be borrowed while it is filled: the outputs, str0m's
//! events waiting to be handled, the deadlines, the counters, and the work
//! left for the end of the step (evictions, slot notices, keyframe requests).
//!
//! Also the ways into a participant's `Rtc` that every other engine module
//! uses: [`guarded`] (the fault boundary), [`feed_time`] (a timeout input,
//! its error counted) and [`drain_rtc`] (str0m's drain-before-the-next-input
//! rule; forwarding defers its drains to the end of a batch, see
//! [`Batch`]), and [`describe`], which puts a str0m error in an
//! operator's words for the eviction report. Must not: decide anything about rooms, slots or
//! forwarding.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use str0m::{Event, Input, Output, RtcError};

use super::session::{Mark, Session};
use super::timers::Timers;
use super::{LeaveReason, Outputs};
use crate::guard;
use crate::ids::{LayerKey, ParticipantId};
use crate::metrics::{Counters, LatencyHistogram};

/// Upper bound of outputs drained from one `Rtc` in one go (defensive).
pub(super) const MAX_DRAIN: usize = 100_000;
/// How many already-due timeouts one drain feeds back to str0m.
const MAX_REFEEDS: usize = 8;
/// When str0m still asks for `now` after the refeeds, it is asked again
/// this much later.
const STILL_DUE_RETRY: Duration = Duration::from_millis(1);

/// A str0m event waiting to be handled, with what it needs to know of the
/// input that caused it.
pub(super) struct Queued {
    pub(super) id: ParticipantId,
    pub(super) event: Event,
    /// Kernel receive time of the datagram that produced it, if any.
    pub(super) kernel_rx: Option<Duration>,
}

#[derive(Default)]
pub(super) struct Io {
    pub(super) out: Outputs,
    pub(super) events: VecDeque<Queued>,
    pub(super) timers: Timers,
    pub(super) counters: Counters,
    /// Work left for the end of the step.
    pub(super) todo: Todo,
    /// The participants whose drain waits for the end of the receive batch.
    pub(super) batch: Batch,
    /// How long peer-shard media waited between its receipt on its
    /// publisher's shard and its handling here ([`PeerHop`]).
    pub(super) peer_hop: PeerHop,
}

/// The cross-shard hop's latency: how long the media handed over by peer
/// shards waited (queued in the lane, then for this shard to drain it),
/// from its `received` instant on the publisher's shard to the `now` of the
/// step that handles it here. Costs no clock read: both instants exist
/// already. Per message, a subtraction and a comparison; per batch (a
/// mesh drain, ended by [`super::Engine::finish_batch`]), one histogram
/// record of the batch's oldest message, weighted by the messages in the
/// batch, so a stall that held many messages weighs as many (a p99 over
/// packets, not over batches), the young ones of a batch counted at its
/// oldest's age. Must not: read a clock.
#[derive(Clone, Debug, Default)]
pub(super) struct PeerHop {
    batch_oldest: Duration,
    batch_len: u64,
    /// Cumulative, as every latency histogram a shard reports.
    pub(super) hist: LatencyHistogram,
}

impl PeerHop {
    /// A peer's media message received on its own shard at `received`,
    /// handled here at `now`.
    pub(super) fn message(&mut self, now: Instant, received: Instant) {
        self.batch_oldest = self
            .batch_oldest
            .max(now.saturating_duration_since(received));
        self.batch_len += 1;
    }

    /// The batch ends: its figure goes into the histogram.
    pub(super) fn end_batch(&mut self) {
        if self.batch_len > 0 {
            let us = u64::try_from(self.batch_oldest.as_micros()).unwrap_or(u64::MAX);
            self.hist.record_us_n(us, self.batch_len);
            self.batch_oldest = Duration::ZERO;
            self.batch_len = 0;
        }
    }
}

/// Work a step leaves for its end ([`super::Engine`]'s `settle`).
#[derive(Default)]
pub(super) struct Todo {
    /// Participants to evict at the end of the step, why, and what str0m
    /// or the panic said (for the report).
    pub(super) doomed: Vec<(ParticipantId, LeaveReason, Option<String>)>,
    /// Subscribers whose slot assignment changed and must be told.
    pub(super) slots_dirty: Vec<ParticipantId>,
    /// Track layers whose publisher must be asked for a keyframe.
    pub(super) keyframes_wanted: Vec<LayerKey>,
    /// Subscribers whose layers must be allocated again at the end of the
    /// step (their slots or estimate changed).
    pub(super) realloc: Vec<ParticipantId>,
}

/// Participants whose `Rtc` forwarded media was written into, or whose
/// own media the own ingress counted in it, or for whom datagrams of the
/// own egress are held, since their last drain
/// ([`super::session::Session::mark`]): one drain per participant per
/// receive batch, not one per packet, since a video frame's packets arrive
/// together and go to the same subscribers.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) pending: Vec<ParticipantId>,
    /// The instant every pending subscriber's clock was fed (all share it).
    pub(super) at: Option<Instant>,
}

impl Batch {
    /// Marks `id`'s session for the end-of-batch drain, at `now`.
    pub(super) fn mark(
        &mut self,
        id: ParticipantId,
        session: &mut Session,
        mark: Mark,
        now: Instant,
    ) {
        if session.mark(mark) {
            self.pending.push(id);
        }
        self.at = Some(now);
    }
}

impl Io {
    /// Asks for a keyframe once the current step settles (never inside a drain).
    pub(super) fn want_keyframe(&mut self, track: LayerKey) {
        if !self.todo.keyframes_wanted.contains(&track) {
            self.todo.keyframes_wanted.push(track);
        }
    }
}

/// Runs `f` on participant `id`'s state inside the fault boundary. A panic
/// poisons the participant (nothing calls into its `Rtc` again), dooms it,
/// counts it and logs it once at ERROR; `None` then, and for a participant
/// that is already poisoned.
pub(super) fn guarded<R>(
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
            io.todo
                .doomed
                .push((id, LeaveReason::Panic, Some(caught.to_string())));
            tracing::error!(participant = %id, "panic while handling this participant, evicting it: {caught}");
            None
        }
    }
}

/// Drains one `Rtc` to its next timeout (str0m's invariant): datagrams into
/// the outputs, events into the queue (stamped with `kernel_rx`), the
/// deadline into the timers. A free function so that a participant's parts
/// can be borrowed apart (its slots while its `Rtc` drains).
pub(super) fn drain_rtc(
    io: &mut Io,
    now: Instant,
    kernel_rx: Option<Duration>,
    id: ParticipantId,
    session: &mut Session,
) {
    let rtc = &mut session.rtc;
    let _ = guarded(io, id, &mut session.poisoned, |io| {
        drain_unguarded(io, now, kernel_rx, id, rtc)
    });
}

fn drain_unguarded(
    io: &mut Io,
    now: Instant,
    kernel_rx: Option<Duration>,
    id: ParticipantId,
    rtc: &mut str0m::Rtc,
) {
    // str0m asks for a timeout that is already due when it has work that
    // only a timeout walk releases (paced media, padding, a due timer): feed
    // it right away so that it leaves in this same synchronous pass. An
    // unpaced forwarded packet needs none (vendor/str0m/PATCHES.md, 1).
    let mut refeeds = 0;
    for _ in 0..MAX_DRAIN {
        match rtc.poll_output() {
            Ok(Output::Timeout(t)) => {
                if t <= now && refeeds < MAX_REFEEDS {
                    refeeds += 1;
                    feed_time(io, id, rtc, now);
                    continue;
                }
                // Still due after the refeeds: some of str0m's timers (its
                // pacer's gate) only move on when the clock does, and feeding
                // the same instant again would spin the shard. Come back a
                // moment later.
                io.timers
                    .set_rtc(id, if t <= now { now + STILL_DUE_RETRY } else { t });
                break;
            }
            Ok(Output::Transmit(t)) => {
                io.counters.tx_packets += 1;
                io.counters.tx_bytes += t.contents.len() as u64;
                io.out.transmits.push(t);
            }
            Ok(Output::Event(event)) => io.events.push_back(Queued {
                id,
                event,
                kernel_rx,
            }),
            Err(e) => {
                tracing::debug!(participant = %id, "str0m failed, evicting the participant: {e}");
                io.counters.rtc_errors += 1;
                io.todo
                    .doomed
                    .push((id, LeaveReason::Error, Some(describe(&e))));
                // str0m also marks the session closed after a DTLS failure:
                // the error, not "closed", is the reason to report.
                return;
            }
        }
    }
    if !rtc.is_alive() {
        io.todo.doomed.push((id, LeaveReason::Closed, None));
    }
}

/// Hands str0m the time (`Input::Timeout`); an error is counted and
/// logged, and the drain that follows finds the `Rtc` dead if it is.
pub(super) fn feed_time(io: &mut Io, id: ParticipantId, rtc: &mut str0m::Rtc, now: Instant) {
    if let Err(e) = rtc.handle_input(Input::Timeout(now)) {
        tracing::debug!(participant = %id, "str0m timeout: {e}");
        io.counters.rtc_errors += 1;
    }
}

/// A str0m error in an operator's words: which layer failed, then str0m's
/// own text.
pub(super) fn describe(e: &RtcError) -> String {
    match e {
        RtcError::Dtls(e) => {
            let text = e.to_string();
            let text = text.strip_prefix("DTLS error: ").unwrap_or(&text);
            format!("DTLS/SRTP error: {text}")
        }
        // From `poll_output`, a remote-SDP error is the DTLS certificate
        // check against the offer's a=fingerprint.
        RtcError::RemoteSdp(m) => format!("DTLS certificate check failed: {m}"),
        RtcError::Ice(e) => format!("ICE error: {e}"),
        RtcError::Sctp(e) => format!("data channel (SCTP) error: {e}"),
        e => format!("WebRTC error: {e}"),
    }
}

/// What the engine's unit tests build on: an engine, participants with a
/// bare `Rtc` (no negotiation, no ICE: nothing ever connects, so nothing
/// goes out), rooms as values, media packets. Shared by the test modules
/// of the files that act through the whole [`super::Engine`].
#[cfg(test)]
pub(super) mod fixture {
    use std::sync::Arc;
    use std::time::Instant;

    use str0m::Rtc;
    use str0m::format::{Codec, CodecSpec, FormatParams};
    use str0m::media::{Frequency, MediaKind};

    use super::super::Engine;
    use super::super::participant::Participant;
    use crate::ids::{ParticipantId, RoomId, ShardId, TrackKey};
    use crate::media::{E2eExt, MediaPacket};
    use crate::offer::{MediaLine, RtcSettings};
    use crate::room::{MemberInfo, RoomUpdate, RoomView};

    pub(in crate::engine) const ROOM: RoomId = RoomId(1);
    pub(in crate::engine) const HERE: ShardId = ShardId(0);

    pub(in crate::engine) fn engine() -> Engine {
        Engine::new(HERE, RtcSettings::default())
    }

    pub(in crate::engine) fn line(mid: &str, kind: MediaKind) -> MediaLine {
        MediaLine {
            mid: mid.into(),
            kind,
        }
    }

    /// A participant of [`ROOM`] on this shard, with a bare `Rtc`.
    pub(in crate::engine) fn add(
        e: &mut Engine,
        now: Instant,
        id: u64,
        tracks: &[MediaLine],
        slots: &[MediaLine],
    ) {
        let rtc = Rtc::builder().set_rtp_mode(true).build(now);
        let p = Participant::new(ParticipantId(id), ROOM, rtc, tracks, slots);
        e.participants.insert(ParticipantId(id), p);
    }

    pub(in crate::engine) fn participant(e: &mut Engine, id: u64) -> &mut Participant {
        e.participants
            .get_mut(&ParticipantId(id))
            .expect("a participant of the fixture")
    }

    /// [`ROOM`] as this shard sees it: `(id, shard, viewer, tracks)`.
    pub(in crate::engine) fn room(
        e: &mut Engine,
        members: &[(u64, ShardId, bool, Vec<MediaLine>)],
    ) {
        let mut view = RoomView::new(ROOM, "room".into());
        view.apply(
            RoomUpdate {
                room: ROOM,
                name: "room".into(),
                members: members
                    .iter()
                    .map(|(id, shard, viewer, tracks)| MemberInfo {
                        id: ParticipantId(*id),
                        name: format!("m{id}"),
                        shard: *shard,
                        tracks: tracks.clone(),
                        viewer: *viewer,
                        states: Vec::new(),
                    })
                    .collect(),
                departed: Vec::new(),
            },
            HERE,
        );
        e.rooms.insert(ROOM, view);
    }

    pub(in crate::engine) fn track(id: u64, mid: &str) -> TrackKey {
        TrackKey {
            participant: ParticipantId(id),
            mid: mid.into(),
        }
    }

    pub(in crate::engine) fn vp8() -> CodecSpec {
        CodecSpec {
            codec: Codec::Vp8,
            clock_rate: Frequency::NINETY_KHZ,
            channels: None,
            format: FormatParams::default(),
        }
    }

    /// A video packet of `track` (VP8 without a descriptor the tests read:
    /// no temporal layer unless set).
    pub(in crate::engine) fn video(
        track: TrackKey,
        seq: u64,
        timestamp: u32,
        keyframe: bool,
        received: Instant,
    ) -> MediaPacket {
        MediaPacket {
            track,
            kind: MediaKind::Video,
            spec: vp8(),
            seq,
            timestamp,
            marker: true,
            keyframe,
            layer: 0,
            layers: 1,
            temporal: None,
            vp8: None,
            svc: None,
            dd: None,
            ext: E2eExt::default(),
            payload: Arc::from(vec![0x10u8, 0, 0, 0, 1, 2, 3]),
            received,
            kernel_rx: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_peer_hop_counts_each_message_at_its_batchs_oldest_age() {
        let t0 = Instant::now();
        let mut hop = super::PeerHop::default();
        hop.end_batch();
        assert_eq!(hop.hist.count, 0, "an empty batch records nothing");
        // A batch of three, the oldest received 30 ms before it is handled.
        let now = t0 + Duration::from_millis(30);
        for received in [t0, t0 + Duration::from_millis(20), now] {
            hop.message(now, received);
        }
        hop.end_batch();
        assert_eq!((hop.hist.count, hop.hist.max_us), (3, 30_000));
        assert_eq!(hop.hist.quantile_edge_us(0.01), Some(50_000));
        // The next batch starts afresh: prompt.
        hop.message(now, now);
        hop.end_batch();
        assert_eq!(hop.hist.count, 4);
        assert_eq!(hop.hist.quantile_edge_us(0.25), Some(1));
    }

    use super::*;

    const ID: ParticipantId = ParticipantId(5);

    fn rtc(now: Instant) -> str0m::Rtc {
        str0m::Rtc::builder().set_rtp_mode(true).build(now)
    }

    #[test]
    fn guarded_runs_the_closure_and_returns_its_value() {
        let mut io = Io::default();
        let mut poisoned = false;
        assert_eq!(guarded(&mut io, ID, &mut poisoned, |_| 42), Some(42));
        assert!(!poisoned);
        assert!(io.todo.doomed.is_empty());
        assert_eq!(io.counters.participant_panics, 0);
    }

    #[test]
    fn a_panic_poisons_dooms_and_counts_that_participant_once() {
        let mut io = Io::default();
        let mut poisoned = false;
        let r: Option<()> = guarded(&mut io, ID, &mut poisoned, |_| panic!("boom in str0m"));
        assert_eq!(r, None);
        assert!(poisoned);
        assert_eq!(io.counters.participant_panics, 1);
        assert_eq!(io.todo.doomed.len(), 1);
        let (id, reason, detail) = &io.todo.doomed[0];
        assert_eq!((*id, *reason), (ID, LeaveReason::Panic));
        assert!(
            detail
                .as_deref()
                .is_some_and(|d| d.contains("boom in str0m")),
            "the report carries the panic's message: {detail:?}"
        );

        // Poisoned: nothing calls into it again, nothing is counted again.
        let mut ran = false;
        assert_eq!(guarded(&mut io, ID, &mut poisoned, |_| ran = true), None);
        assert!(!ran);
        assert_eq!(io.counters.participant_panics, 1);
        assert_eq!(io.todo.doomed.len(), 1);
    }

    #[test]
    fn a_keyframe_is_wanted_once_per_step() {
        let mut io = Io::default();
        let key = |layer| LayerKey {
            track: crate::ids::TrackKey {
                participant: ID,
                mid: "0".into(),
            },
            layer,
        };
        io.want_keyframe(key(0));
        io.want_keyframe(key(1));
        io.want_keyframe(key(0));
        assert_eq!(io.todo.keyframes_wanted, vec![key(0), key(1)]);
    }

    #[test]
    fn a_drain_leaves_the_rtc_a_future_deadline_and_dooms_nobody_alive() {
        let now = Instant::now();
        let mut io = Io::default();
        let mut session = Session::new(ID, rtc(now));
        drain_rtc(&mut io, now, None, ID, &mut session);
        assert!(io.todo.doomed.is_empty(), "{:?}", io.todo.doomed);
        assert!(!session.poisoned);
        // str0m's deadline is now the engine's: due work was fed back at
        // once, so what is left is later than now.
        let next = io.timers.next().expect("a deadline for the participant");
        assert!(next > now, "deadline {next:?} is not after now {now:?}");
        assert_eq!(io.timers.pop_rtc_due(next), Some(ID));
    }

    #[test]
    fn a_closed_rtc_is_doomed_as_closed_at_its_drain() {
        let now = Instant::now();
        let mut io = Io::default();
        let mut session = Session::new(ID, rtc(now));
        session.rtc.disconnect();
        drain_rtc(&mut io, now, None, ID, &mut session);
        assert_eq!(io.todo.doomed.len(), 1, "{:?}", io.todo.doomed);
        assert_eq!(io.todo.doomed[0].0, ID);
        assert_eq!(io.todo.doomed[0].1, LeaveReason::Closed);
    }

    #[test]
    fn a_poisoned_participant_is_not_drained() {
        let now = Instant::now();
        let mut io = Io::default();
        let mut session = Session::new(ID, rtc(now));
        session.poisoned = true;
        session.rtc.disconnect();
        drain_rtc(&mut io, now, None, ID, &mut session);
        assert!(
            io.todo.doomed.is_empty(),
            "its `Rtc` is never touched again"
        );
        assert_eq!(io.timers.next(), None);
    }

    #[test]
    fn errors_are_described_by_the_layer_that_failed() {
        assert_eq!(
            describe(&RtcError::RemoteSdp("remote fingerprint no match".into())),
            "DTLS certificate check failed: remote fingerprint no match"
        );
        let other = describe(&RtcError::NoSenderSource);
        assert!(other.starts_with("WebRTC error: "), "{other}");
    }
}
