//! What one engine step accumulates, kept apart from the participants so that
//! one participant can be borrowed while it is filled: the outputs, str0m's
//! events waiting to be handled, the deadlines, the counters, and the work
//! left for the end of the step (evictions, slot notices, keyframe requests).
//!
//! Also the ways into a participant's `Rtc` that every other engine module
//! uses: [`guarded`] (the fault boundary), [`feed_time`] (a timeout input,
//! its error counted) and [`drain_rtc`] (str0m's drain-before-the-next-input
//! rule; forwarding defers its drains to the end of a batch, see
//! [`Io::pending`]), and [`describe`], which puts a str0m error in an
//! operator's words for the eviction report. Must not: decide anything about rooms, slots or
//! forwarding.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use str0m::{Event, Input, Output, RtcError};

use super::timers::Timers;
use super::{LeaveReason, Outputs};
use crate::guard;
use crate::ids::{LayerKey, ParticipantId};
use crate::metrics::Counters;

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
    /// Subscribers that forwarded media was written into and whose `Rtc`
    /// has not been drained since (each with `undrained` set, or datagrams
    /// of the own egress held), and publishers whose media the own ingress
    /// counted in their `Rtc` (`counted_in`): one drain per participant per
    /// receive batch, not one per packet, since a video frame's packets
    /// arrive together and go to the same subscribers.
    pub(super) pending: Vec<ParticipantId>,
    /// The instant every pending subscriber's clock was fed (all share it).
    pub(super) pending_at: Option<Instant>,
}

impl Io {
    /// Asks for a keyframe once the current step settles (never inside a drain).
    pub(super) fn want_keyframe(&mut self, track: LayerKey) {
        if !self.keyframes_wanted.contains(&track) {
            self.keyframes_wanted.push(track);
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
            io.doomed
                .push((id, LeaveReason::Panic, Some(caught.to_string())));
            tracing::error!(participant = %id, "panic while handling this participant, evicting it: {caught}");
            None
        }
    }
}

/// Drains one `Rtc` to its next timeout (str0m's invariant): datagrams into
/// the outputs, events into the queue (stamped with `kernel_rx`), the
/// deadline into the timers. A free function so that a participant's fields
/// can be borrowed apart (its slots while its `Rtc` drains).
pub(super) fn drain_rtc(
    io: &mut Io,
    now: Instant,
    kernel_rx: Option<Duration>,
    id: ParticipantId,
    rtc: &mut str0m::Rtc,
    poisoned: &mut bool,
) {
    let _ = guarded(io, id, poisoned, |io| {
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
                io.doomed.push((id, LeaveReason::Error, Some(describe(&e))));
                // str0m also marks the session closed after a DTLS failure:
                // the error, not "closed", is the reason to report.
                return;
            }
        }
    }
    if !rtc.is_alive() {
        io.doomed.push((id, LeaveReason::Closed, None));
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
