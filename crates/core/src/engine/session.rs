//! A participant's connection: its str0m `Rtc`, whether a panic poisoned
//! it, whether ICE and DTLS came up, what its connection did (for the
//! report if it has to leave), its data channel and request budget, its
//! transport figures, and what of it waits for the end of the receive
//! batch ([`DrainState`], the datagrams of the own egress held for it).
//!
//! Must not: know what it publishes ([`super::publisher`]) or is sent
//! ([`super::subscriber`]), or decide when a batch ends ([`super::io`]
//! lists the participants [`Session::mark`] says became pending).

use std::time::Instant;

use str0m::Rtc;
use str0m::channel::ChannelId;
use str0m::media::{Mid, Rid};
use str0m::net::Transmit;

use crate::ids::ParticipantId;
use crate::metrics::ParticipantStats;

/// Whether a participant's `Rtc` must be drained before its next input,
/// and whether its clock was fed for that (str0m: drain after a mutation,
/// before the next input). The drain waits for the end of the receive
/// batch, so that a frame's packets cost one walk of the `Rtc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum DrainState {
    /// Nothing was put into its `Rtc` since its last drain.
    #[default]
    Clean,
    /// Media of its own was counted in its `Rtc` by the own ingress
    /// ([`super::ingress`]); its clock was not fed (the count takes the
    /// time as an argument, and a feed after another mutation would walk
    /// its timers before they are due).
    Counted,
    /// Forwarded media was written into its `Rtc`, its clock fed to the
    /// batch's instant first ([`super::io::Batch::at`]); a count of
    /// its own media may have come too.
    Fed,
}

/// What happened to a participant that its end-of-batch drain must see.
#[derive(Debug)]
pub(super) enum Mark {
    /// The own ingress counted a packet of its own in its `Rtc`.
    Counted,
    /// Forwarded media was written into its `Rtc` (after its clock was fed,
    /// unless [`DrainState::Fed`] said it was already).
    Written,
    /// A datagram of the own egress for it, held so that a frame leaves as
    /// one GSO run.
    Held(Transmit),
}

impl DrainState {
    /// The one transition: the state after `mark`.
    pub(super) fn after(self, mark: &Mark) -> DrainState {
        match (self, mark) {
            (_, Mark::Written) | (DrainState::Fed, _) => DrainState::Fed,
            (_, Mark::Counted) | (DrainState::Counted, Mark::Held(_)) => DrainState::Counted,
            (DrainState::Clean, Mark::Held(_)) => DrainState::Clean,
        }
    }
}

/// What str0m reported of a participant's connection, kept so that the
/// report of an eviction can tell an operator why (nothing arrived, ICE
/// never completed, DTLS failed and how). Set on the packet path: plain
/// stores, no allocation except for a str0m error.
#[derive(Debug, Default)]
pub(super) struct Trail {
    /// When a datagram from the client last reached its `Rtc`.
    pub(super) last_rx: Option<Instant>,
    /// ICE reached connected (or completed) at least once.
    pub(super) ice_connected: bool,
    /// The last error str0m returned for one of its datagrams (a DTLS
    /// record it refused, a fatal alert from the client).
    pub(super) last_error: Option<String>,
}

pub(super) struct Session {
    pub(super) rtc: Rtc,
    /// A panic happened inside this participant's handling: its `Rtc` may be
    /// inconsistent, so nothing calls into it again; it is being evicted.
    pub(super) poisoned: bool,
    /// ICE and DTLS came up (the connect deadline no longer applies).
    pub(super) connected: bool,
    /// Since when its ICE has been down, within `--reconnect-grace` (it is
    /// removed when the grace ends; ICE back up clears it).
    pub(super) down_since: Option<Instant>,
    /// What its connection did, so that an eviction can say why.
    pub(super) trail: Trail,
    pub(super) channel: Option<ChannelId>,
    /// Latest transport figures (str0m statistics events).
    pub(super) stats: ParticipantStats,
    /// It may send application messages (its token's `publish_data`).
    pub(super) publish_data: bool,
    drain: DrainState,
    /// Datagrams of the own egress for it ([`Mark::Held`]), in the order
    /// written.
    held: Vec<Transmit>,
    /// Data-channel requests it may still make now (token bucket), and when
    /// the bucket was last refilled.
    request_tokens: f64,
    requests_refilled: Option<Instant>,
    /// When it was last told that a request went over its budget (at most
    /// once a second: the telling must not cost what the budget saves).
    budget_told: Option<Instant>,
    /// Last cumulative NACK counts per (mid, egress?), to turn str0m's
    /// cumulative per-stream figures into shard counter deltas.
    nack_seen: Vec<(Mid, bool, u64)>,
    /// Each received stream's latest jitter, for
    /// [`ParticipantStats::ingress_jitter_ms`].
    jitter_seen: Vec<StreamJitter>,
    /// Its handling panics once connected ([`crate::faults`]).
    #[cfg(feature = "fault-injection")]
    injected_panic: bool,
}

/// A received stream's latest jitter ([`Session::ingress_jitter`]).
struct StreamJitter {
    mid: Mid,
    rid: Option<Rid>,
    /// Packets received, as of its latest statistics.
    packets: u64,
    /// It received packets between its latest statistics and those before.
    flowing: bool,
    /// Its interarrival jitter in ms, as of its latest statistics.
    ms: f64,
}

impl Session {
    pub(super) fn new(id: ParticipantId, rtc: Rtc) -> Self {
        Session {
            rtc,
            poisoned: false,
            connected: false,
            down_since: None,
            trail: Trail::default(),
            channel: None,
            stats: ParticipantStats {
                id,
                ..Default::default()
            },
            publish_data: true,
            drain: DrainState::Clean,
            held: Vec::new(),
            request_tokens: 0.0,
            requests_refilled: None,
            budget_told: None,
            nack_seen: Vec::new(),
            jitter_seen: Vec::new(),
            #[cfg(feature = "fault-injection")]
            injected_panic: false,
        }
    }

    /// Records what its end-of-batch drain must see; true when it was not
    /// waiting for one before (the caller lists it in
    /// [`super::io::Batch::pending`]).
    pub(super) fn mark(&mut self, mark: Mark) -> bool {
        let was = self.is_pending();
        self.drain = self.drain.after(&mark);
        if let Mark::Held(t) = mark {
            self.held.push(t);
        }
        !was
    }

    /// Whether its end-of-batch drain has anything to do.
    pub(super) fn is_pending(&self) -> bool {
        self.drain != DrainState::Clean || !self.held.is_empty()
    }

    /// Whether its clock is at the batch's instant already (forwarded
    /// media was written into it this batch).
    pub(super) fn fed(&self) -> bool {
        self.drain == DrainState::Fed
    }

    /// Whether its `Rtc` must be drained, and clean after: the caller
    /// drains it.
    pub(super) fn take_rtc_drain(&mut self) -> bool {
        std::mem::take(&mut self.drain) != DrainState::Clean
    }

    /// The own egress's datagrams held for it, in the order written.
    pub(super) fn take_held(&mut self) -> std::vec::Drain<'_, Transmit> {
        self.held.drain(..)
    }

    /// Whether its handling is to panic once connected (the tests' fault
    /// injection, [`crate::faults`]; always false in other builds).
    #[cfg(feature = "fault-injection")]
    pub(super) fn injected_panic(&self) -> bool {
        self.injected_panic
    }

    #[cfg(not(feature = "fault-injection"))]
    #[inline(always)]
    pub(super) fn injected_panic(&self) -> bool {
        false
    }

    #[cfg(feature = "fault-injection")]
    pub(super) fn inject_panic(&mut self, on: bool) {
        self.injected_panic = on;
    }

    #[cfg(not(feature = "fault-injection"))]
    #[inline(always)]
    pub(super) fn inject_panic(&mut self, _on: bool) {}

    /// Takes one data-channel request from its budget of `per_second`
    /// (bursts of twice that); false when the budget is spent.
    pub(super) fn take_request(&mut self, now: Instant, per_second: u32) -> bool {
        let rate = f64::from(per_second);
        let burst = 2.0 * rate;
        let elapsed = self.requests_refilled.map_or(f64::INFINITY, |t| {
            now.saturating_duration_since(t).as_secs_f64()
        });
        self.request_tokens = (self.request_tokens + elapsed * rate).min(burst);
        self.requests_refilled = Some(now);
        if self.request_tokens >= 1.0 {
            self.request_tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether to tell it now that a request went over its budget: once a
    /// second at most.
    pub(super) fn tell_over_budget(&mut self, now: Instant) -> bool {
        if self
            .budget_told
            .is_some_and(|t| now.saturating_duration_since(t) < std::time::Duration::from_secs(1))
        {
            return false;
        }
        self.budget_told = Some(now);
        true
    }

    /// Records str0m's statistics of the received stream (`mid`, `rid`):
    /// its cumulative packet count and its interarrival jitter in ms.
    /// Returns the publisher's current jitter: the largest latest figure
    /// of the streams that received packets since their statistics before
    /// (`None` where none did). A stream that stopped (a layer paused at
    /// the source, a muted track) keeps the figure of its last report
    /// until it flows again, stale: it does not count meanwhile.
    pub(super) fn ingress_jitter(
        &mut self,
        mid: Mid,
        rid: Option<Rid>,
        packets: u64,
        ms: f64,
    ) -> Option<f64> {
        match self
            .jitter_seen
            .iter_mut()
            .find(|s| s.mid == mid && s.rid == rid)
        {
            Some(s) => {
                s.flowing = packets > s.packets;
                s.packets = s.packets.max(packets);
                s.ms = ms;
            }
            None => self.jitter_seen.push(StreamJitter {
                mid,
                rid,
                packets,
                flowing: packets > 0,
                ms,
            }),
        }
        self.jitter_seen
            .iter()
            .filter(|s| s.flowing)
            .map(|s| s.ms)
            .reduce(f64::max)
    }

    /// Records a cumulative NACK figure for (mid, direction); returns the increase.
    pub(super) fn nack_delta(&mut self, mid: Mid, egress: bool, total: u64) -> u64 {
        match self
            .nack_seen
            .iter_mut()
            .find(|(m, e, _)| *m == mid && *e == egress)
        {
            Some((_, _, seen)) => {
                let d = total.saturating_sub(*seen);
                *seen = total.max(*seen);
                d
            }
            None => {
                self.nack_seen.push((mid, egress, total));
                total
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transmit() -> Transmit {
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], 9).into();
        Transmit {
            proto: str0m::net::Protocol::Udp,
            source: addr,
            destination: addr,
            contents: vec![0u8; 4].into(),
        }
    }

    #[test]
    fn a_write_feeds_the_clock_once_and_a_count_does_not() {
        use DrainState::*;
        for (from, mark, to) in [
            (Clean, Mark::Counted, Counted),
            (Clean, Mark::Written, Fed),
            (Clean, Mark::Held(transmit()), Clean),
            (Counted, Mark::Counted, Counted),
            (Counted, Mark::Written, Fed),
            (Counted, Mark::Held(transmit()), Counted),
            (Fed, Mark::Counted, Fed),
            (Fed, Mark::Written, Fed),
            (Fed, Mark::Held(transmit()), Fed),
        ] {
            assert_eq!(from.after(&mark), to, "{from:?} after {mark:?}");
        }
    }

    #[test]
    fn a_session_is_listed_once_per_batch_whatever_marks_it() {
        let mut s = Session::new(ParticipantId(1), Rtc::new(Instant::now()));
        assert!(!s.is_pending());
        assert!(s.mark(Mark::Held(transmit())), "first mark lists it");
        assert!(!s.mark(Mark::Counted));
        assert!(!s.fed(), "a count does not feed the clock");
        assert!(!s.mark(Mark::Written));
        assert!(s.fed());
        assert!(!s.mark(Mark::Held(transmit())));
        assert_eq!(s.take_held().count(), 2);
        assert!(s.take_rtc_drain());
        assert!(!s.take_rtc_drain(), "drained once");
        assert!(!s.is_pending());
        // The receive path drains the `Rtc` alone before an input: held
        // datagrams keep it pending.
        assert!(s.mark(Mark::Written));
        assert!(!s.mark(Mark::Held(transmit())));
        assert!(s.take_rtc_drain());
        assert!(s.is_pending());
        assert!(!s.mark(Mark::Counted), "still listed");
    }

    #[test]
    fn requests_refill_at_the_rate_up_to_twice_it() {
        let t0 = Instant::now();
        let mut s = Session::new(ParticipantId(1), Rtc::new(t0));
        let taken = (0..10).filter(|_| s.take_request(t0, 2)).count();
        assert_eq!(taken, 4, "a burst of twice the rate");
        assert!(!s.take_request(t0, 2));
        assert!(s.take_request(t0 + std::time::Duration::from_millis(500), 2));
        assert!(!s.take_request(t0 + std::time::Duration::from_millis(500), 2));
    }
}
