//! One participant on a shard: its str0m `Rtc`, the tracks it publishes, its
//! receive slots, its data channel, its request budget, its figures, how
//! long what it is sent stays resendable, and what its connection did (for
//! the report if it has to leave).
//!
//! Must not: decide what goes in a slot ([`super::policy`] does, from the
//! room view), know its addresses ([`super::demux`]) or its deadlines
//! ([`super::timers`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use str0m::Rtc;
use str0m::channel::ChannelId;
use str0m::format::CodecSpec;
use str0m::media::{MediaKind, Mid, Pt};
use str0m::rtp::Ssrc;

use super::slot::Slot;
use super::streams::StreamGuard;
use crate::ids::{ParticipantId, RoomId};
use crate::metrics::ParticipantStats;
use crate::offer::MediaLine;

#[derive(Debug)]
pub(super) struct PublishedTrack {
    pub(super) mid: Mid,
    pub(super) kind: MediaKind,
    /// Last payload type seen and its codec (publishers rarely switch).
    pub(super) codec: Option<(Pt, CodecSpec)>,
    /// Its simulcast rids in offer order (a layer's stable id is its
    /// position); empty without simulcast.
    pub(super) rids: Vec<str0m::media::Rid>,
    /// The rids the publisher was last told to send (dynacast), as a bit
    /// per layer; all of them until the first notice.
    pub(super) active: u32,
    /// When some subscriber last needed each layer (dynacast's hold).
    pub(super) last_needed: [Option<Instant>; super::streams::MAX_LAYERS],
    /// When dynacast last resumed a paused layer because the ones the
    /// publisher was told to send had all gone silent.
    pub(super) probed_at: Option<Instant>,
}

/// What a participant's connection did, kept so that the report of an
/// eviction can tell an operator why (nothing arrived, ICE never completed,
/// DTLS failed and how). Set on the packet path: plain stores, no allocation
/// except for a str0m error.
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

pub(super) struct Participant {
    pub(super) room: RoomId,
    /// Its handling panics once connected ([`crate::faults`]).
    #[cfg(feature = "fault-injection")]
    pub(super) injected_panic: bool,
    pub(super) rtc: Rtc,
    pub(super) tracks: Vec<PublishedTrack>,
    /// SSRC -> (index in `tracks`, layer), filled on first sight of each SSRC.
    ssrcs: Vec<(Ssrc, usize, u8)>,
    /// Which unseen SSRCs may reach the `Rtc` ([`StreamGuard`]).
    pub(super) guard: StreamGuard,
    /// Its downlink estimates (str0m's BWE from its TWCC feedback, bps) of
    /// the last [`SURE_WINDOW`] that no later one is below, oldest first:
    /// the front is their minimum (a climb's budget), the back the latest
    /// ([`Participant::estimate`]).
    lows: VecDeque<(Instant, u64)>,
    /// The minimum and desired rates its BWE was last given (it pads up to
    /// the first, probes toward the second).
    pub(super) bwe_set: Option<(u64, u64)>,
    /// Since when a climb of its slots is on trial ([`super::simulcast`]),
    /// the rate (bps) it pads up to meanwhile, and the climb budget then.
    pub(super) trial: Option<(Instant, u64, u64)>,
    /// No trial before this (one failed), and the wait after the next
    /// failure.
    pub(super) next_trial: Option<Instant>,
    pub(super) trial_backoff: Duration,
    /// The highest rate (bps) its slots and audio took lately without a
    /// lossy report, and when; a climb up to it is not tried first.
    pub(super) proven: Option<(u64, Instant)>,
    /// When it last showed congestion: a receiver report of more loss than
    /// a climb allows ([`super::simulcast`]).
    pub(super) congested_at: Option<Instant>,
    pub(super) slots: Vec<Slot>,
    pub(super) channel: Option<ChannelId>,
    /// A panic happened inside this participant's handling: its `Rtc` may be
    /// inconsistent, so nothing calls into it again; it is being evicted.
    pub(super) poisoned: bool,
    /// Forwarded media was written into its `Rtc` and not drained yet: it is
    /// in [`super::io::Io::pending`], its clock already at `pending_at`.
    pub(super) undrained: bool,
    /// Media of its own was counted in its `Rtc` by the own ingress
    /// ([`super::ingress`]) and not drained yet: it is in
    /// [`super::io::Io::pending`] (its clock was not fed).
    pub(super) counted_in: bool,
    /// Its side of the shard's own egress ([`super::egress`]), from its
    /// first packet sent there.
    pub(super) egress: Option<Box<super::egress::Egress>>,
    /// Its side of the shard's own ingress ([`super::ingress`]), from the
    /// first media packet str0m delivered.
    pub(super) ingress: Option<Box<super::ingress::Ingress>>,
    /// Datagrams of the own egress for it, held until the end of the
    /// receive batch (so a frame leaves as one GSO run); while any are, it
    /// is in [`super::io::Io::pending`].
    pub(super) held: Vec<str0m::net::Transmit>,
    /// ICE and DTLS came up (the connect deadline no longer applies).
    pub(super) connected: bool,
    /// What its connection did, so that an eviction can say why.
    pub(super) trail: Trail,
    /// Data-channel requests it may still make now (token bucket), and when
    /// the bucket was last refilled.
    request_tokens: f64,
    requests_refilled: Option<Instant>,
    /// Latest transport figures (str0m statistics events).
    pub(super) stats: ParticipantStats,
    /// Last cumulative NACK counts per (mid, egress?), to turn str0m's
    /// cumulative per-stream figures into shard counter deltas.
    nack_seen: Vec<(Mid, bool, u64)>,
    /// How long its slots' sent packets stay resendable
    /// ([`rtx_history_for`], applied by [`Participant::fit_rtx_history`]).
    pub(super) rtx_history: Duration,
}

/// str0m's RTX history (3 s), kept until a subscriber's first round-trip
/// time is known, and the most a long one gets.
pub(super) const RTX_HISTORY_MAX: Duration = Duration::from_secs(3);
/// The least history any subscriber gets.
pub(super) const RTX_HISTORY_MIN: Duration = Duration::from_secs(1);

/// How long a subscriber's sent packets stay resendable, from its round-trip
/// time. A receiver asks again for a packet still missing about once per
/// round trip, up to ten times (libwebrtc's NACK module), so the history
/// covers ten round trips and a margin for reordering and the receiver's
/// first wait; never less than [`RTX_HISTORY_MIN`], never more than str0m's
/// default [`RTX_HISTORY_MAX`], which also stands until a first RTT is known
/// ([`Participant::fit_rtx_history`] keeps its last fit when it lapses).
/// What this saves is memory: every payload a subscriber was sent stays
/// referenced until its history lets go of it (at 70 rooms of 4 on
/// loopback, 1 s instead of 3 s took the server from 323 to 197 MiB
/// resident, at no measurable CPU cost).
pub(super) fn rtx_history_for(rtt: Duration) -> Duration {
    rtt.saturating_mul(10)
        .saturating_add(Duration::from_millis(200))
        .clamp(RTX_HISTORY_MIN, RTX_HISTORY_MAX)
}

/// How long an estimate must have lasted for a climb to count on it
/// ([`Participant::sure_estimate`]).
pub(super) const SURE_WINDOW: Duration = Duration::from_secs(2);
/// Estimates kept for [`Participant::sure_estimate`] at most.
const LOWS_MAX: usize = 64;

impl Participant {
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

    pub(super) fn new(
        id: ParticipantId,
        room: RoomId,
        rtc: Rtc,
        tracks: &[MediaLine],
        slots: &[MediaLine],
    ) -> Self {
        let mut p = Participant {
            room,
            #[cfg(feature = "fault-injection")]
            injected_panic: false,
            rtc,
            tracks: Vec::new(),
            ssrcs: Vec::new(),
            guard: StreamGuard::default(),
            congested_at: None,
            lows: VecDeque::new(),
            bwe_set: None,
            trial: None,
            next_trial: None,
            trial_backoff: super::simulcast::TRIAL_BACKOFF_MIN,
            proven: None,
            slots: Vec::new(),
            channel: None,
            poisoned: false,
            undrained: false,
            counted_in: false,
            egress: None,
            ingress: None,
            held: Vec::new(),
            connected: false,
            trail: Trail::default(),
            request_tokens: 0.0,
            requests_refilled: None,
            stats: ParticipantStats {
                id,
                ..Default::default()
            },
            nack_seen: Vec::new(),
            rtx_history: RTX_HISTORY_MAX,
        };
        let _ = p.add_lines(tracks, slots);
        p
    }

    /// Re-reads what the negotiation decided about simulcast: each track's
    /// rids and the stream guard.
    pub(super) fn negotiated(&mut self, now: Instant) {
        for t in &mut self.tracks {
            if let Some(m) = self.rtc.media(t.mid)
                && let str0m::media::Rids::Specific(r) = m.rids_rx()
                && t.rids.is_empty()
            {
                t.rids = r.iter().take(super::streams::MAX_LAYERS).copied().collect();
                t.active = (1 << t.rids.len()) - 1;
                t.last_needed = [Some(now); super::streams::MAX_LAYERS];
            }
        }
        self.guard = StreamGuard::from_rtc(&self.rtc, self.tracks.iter().map(|t| t.mid));
        // A negotiation may change extension ids and payload types: the own
        // ingress starts over, each stream from str0m's next delivery of it
        // (str0m's duplicate check knows every packet the ingress counted).
        self.ingress = None;
        // Forwarded media goes out as it arrives: str0m's pacer (on with the
        // BWE) would hold each keyframe back at 1.1x the estimate, hundreds
        // of milliseconds on a fast link whose estimate has not climbed.
        // The estimate still comes from TWCC feedback and chooses layers,
        // which is what keeps a slow downlink from queueing; probes and
        // padding are still paced. str0m also caps each stream's
        // retransmissions at 15 % of what it sends (its RTX cache default):
        // the per-subscriber NACK budget. Slots this negotiation added get
        // the RTX history as fitted so far ([`Self::fit_rtx_history`]).
        let mut api = self.rtc.direct_api();
        for s in &mut self.slots {
            s.egress.renegotiated();
            if let Some(tx) = api.stream_tx_by_mid(s.mid, None) {
                tx.set_unpaced(true);
                tx.set_rtx_max_age(self.rtx_history);
            }
        }
    }

    /// Its latest downlink estimate, bps.
    pub(super) fn estimate(&self) -> Option<u64> {
        self.lows.back().map(|&(_, v)| v)
    }

    /// A new downlink estimate.
    pub(super) fn note_estimate(&mut self, now: Instant, bps: u64) {
        while self.lows.back().is_some_and(|&(_, v)| v >= bps) {
            self.lows.pop_back();
        }
        // Rising estimates (one entry each) come at most every few tens of
        // milliseconds; the bound only guards the memory.
        if self.lows.len() >= LOWS_MAX {
            self.lows.pop_front();
        }
        self.lows.push_back((now, bps));
        while self.lows.len() > 1
            && self
                .lows
                .front()
                .is_some_and(|&(t, _)| now.saturating_duration_since(t) > SURE_WINDOW)
        {
            self.lows.pop_front();
        }
    }

    /// The lowest estimate of the last [`SURE_WINDOW`] (the latest one if
    /// older): what a move onto a higher layer may count on. A probe that
    /// a token bucket's burst lets through lifts the estimate for a moment
    /// (behind 300 kbit/s, to 1.2 Mbit/s for 0.2 s); one that stays up for
    /// seconds is put to the test by a climb's trial
    /// ([`super::simulcast`]).
    pub(super) fn sure_estimate(&self, now: Instant) -> Option<u64> {
        self.lows
            .iter()
            .find(|&&(t, _)| now.saturating_duration_since(t) <= SURE_WINDOW)
            .or(self.lows.back())
            .map(|&(_, v)| v)
    }

    /// The lowest estimate of about the last [`SURE_WINDOW`], as of the
    /// latest estimate (for the figures; no clock).
    pub(super) fn climb_estimate(&self) -> Option<u64> {
        self.lows.front().map(|&(_, v)| v)
    }

    /// Fits how long its slots keep sent packets for resends to its latest
    /// round-trip time ([`rtx_history_for`]); a change under 100 ms is left.
    /// What is held stays (str0m evicts by the new age at the next send).
    /// An unknown RTT keeps the last fit: str0m's TWCC round trip lapses
    /// while its downlink is out, exactly when its NACKs will come.
    pub(super) fn fit_rtx_history(&mut self, rtt: Option<Duration>) {
        let Some(rtt) = rtt else {
            return;
        };
        let age = rtx_history_for(rtt);
        if age.abs_diff(self.rtx_history) < Duration::from_millis(100) {
            return;
        }
        self.rtx_history = age;
        let mut api = self.rtc.direct_api();
        for s in &self.slots {
            if let Some(tx) = api.stream_tx_by_mid(s.mid, None) {
                tx.set_rtx_max_age(age);
            }
        }
    }

    /// How long its slots keep sent packets for resends.
    pub(super) fn rtx_history(&self) -> Duration {
        self.rtx_history
    }

    /// Whether an SSRC was already seen on one of its tracks.
    pub(super) fn knows_ssrc(&self, ssrc: u32) -> bool {
        self.ssrcs.iter().any(|(s, ..)| **s == ssrc)
    }

    /// Adds m-lines from a (re)negotiation, ignoring mids already known.
    /// Returns true if anything was new.
    pub(super) fn add_lines(&mut self, tracks: &[MediaLine], slots: &[MediaLine]) -> bool {
        let before = (self.tracks.len(), self.slots.len());
        for t in tracks {
            if !self.tracks.iter().any(|x| x.mid == t.mid) {
                self.tracks.push(PublishedTrack {
                    mid: t.mid,
                    kind: t.kind,
                    codec: None,
                    rids: Vec::new(),
                    active: 1,
                    last_needed: [None; super::streams::MAX_LAYERS],
                    probed_at: None,
                });
            }
        }
        for s in slots {
            if !self.slots.iter().any(|x| x.mid == s.mid) {
                self.slots.push(Slot::new(s.mid, s.kind));
            }
        }
        before != (self.tracks.len(), self.slots.len())
    }

    pub(super) fn track_lines(&self) -> Vec<MediaLine> {
        self.tracks
            .iter()
            .map(|t| MediaLine {
                mid: t.mid,
                kind: t.kind,
            })
            .collect()
    }

    pub(super) fn slot_lines(&self) -> Vec<MediaLine> {
        self.slots
            .iter()
            .map(|s| MediaLine {
                mid: s.mid,
                kind: s.kind,
            })
            .collect()
    }

    /// Which published track an incoming SSRC belongs to, and its layer.
    pub(super) fn track_index(&mut self, ssrc: Ssrc) -> Option<(usize, u8)> {
        if let Some(&(_, i, layer)) = self.ssrcs.iter().find(|(s, ..)| *s == ssrc) {
            return Some((i, layer));
        }
        let (mid, rid) = self
            .rtc
            .direct_api()
            .stream_rx(&ssrc)
            .map(|s| (s.mid(), s.rid()))?;
        let i = self.tracks.iter().position(|t| t.mid == mid)?;
        let layer = match rid {
            Some(rid) => self
                .tracks
                .get(i)?
                .rids
                .iter()
                .position(|r| *r == rid)
                .and_then(|l| u8::try_from(l).ok())?,
            None => 0,
        };
        // A new SSRC of a track's layer replaces the old one (str0m does the
        // same), so this stays bounded by tracks and layers.
        self.ssrcs.retain(|&(_, t, l)| !(t == i && l == layer));
        self.ssrcs.push((ssrc, i, layer));
        Some((i, layer))
    }
}

impl Participant {
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

    #[test]
    fn the_rtx_history_is_ten_round_trips_and_a_margin_within_one_to_three_seconds() {
        let ms = Duration::from_millis;
        assert_eq!(rtx_history_for(ms(0)), RTX_HISTORY_MIN);
        assert_eq!(rtx_history_for(ms(50)), RTX_HISTORY_MIN);
        assert_eq!(rtx_history_for(ms(150)), ms(1700));
        assert_eq!(rtx_history_for(ms(250)), ms(2700));
        assert_eq!(rtx_history_for(ms(400)), RTX_HISTORY_MAX);
        assert_eq!(rtx_history_for(Duration::MAX), RTX_HISTORY_MAX);
    }

    #[test]
    fn a_climb_counts_on_the_lowest_estimate_of_the_last_two_seconds() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut p = Participant::new(ParticipantId(1), RoomId(1), Rtc::new(t0), &[], &[]);
        assert_eq!(p.sure_estimate(t0), None);
        p.note_estimate(t0, 300_000);
        // A probe lifts it for a moment: the climb still counts on 300k.
        p.note_estimate(t0 + ms(500), 1_200_000);
        p.note_estimate(t0 + ms(700), 400_000);
        assert_eq!(p.estimate(), Some(400_000));
        assert_eq!(p.sure_estimate(t0 + ms(1900)), Some(300_000));
        // 2 s on, the start has left the window: the lowest since is 400k.
        assert_eq!(p.sure_estimate(t0 + ms(2100)), Some(400_000));
        // A fall counts at once.
        p.note_estimate(t0 + ms(2200), 250_000);
        assert_eq!(p.sure_estimate(t0 + ms(2200)), Some(250_000));
        // Long after the last estimate: that one.
        assert_eq!(p.sure_estimate(t0 + ms(60_000)), Some(250_000));
        // Rising estimates keep one entry each, within the bound.
        for i in 0..1000u64 {
            p.note_estimate(t0 + ms(60_000 + i), 250_000 + i);
        }
        assert!(p.lows.len() <= LOWS_MAX);
        assert_eq!(
            p.sure_estimate(t0 + ms(61_000)),
            Some(250_000 + 1000 - LOWS_MAX as u64)
        );
    }

    #[test]
    fn an_unknown_rtt_leaves_3_s_at_first_and_the_last_fit_after() {
        let ms = Duration::from_millis;
        let mut p = Participant::new(
            ParticipantId(1),
            RoomId(1),
            Rtc::new(std::time::Instant::now()),
            &[],
            &[],
        );
        p.fit_rtx_history(None);
        assert_eq!(p.rtx_history(), RTX_HISTORY_MAX);
        p.fit_rtx_history(Some(ms(150)));
        assert_eq!(p.rtx_history(), ms(1700));
        // Under 100 ms of change is left.
        p.fit_rtx_history(Some(ms(155)));
        assert_eq!(p.rtx_history(), ms(1700));
        p.fit_rtx_history(None);
        assert_eq!(p.rtx_history(), ms(1700));
        p.fit_rtx_history(Some(ms(20)));
        assert_eq!(p.rtx_history(), RTX_HISTORY_MIN);
    }
}
