//! What a participant is sent: its receive slots, its side of the shard's
//! own egress, its downlink ([`Downlink`]: the layer each slot aims at),
//! and how long what it is sent stays resendable.
//!
//! Must not: decide what goes in a slot ([`super::policy`] does, from the
//! room view), forward media ([`super::forward`]), or call into its `Rtc`
//! but to set its streams' send options (the caller passes it).

use std::time::Duration;

use str0m::Rtc;

use super::downlink::Downlink;
use super::slot::Slot;
use crate::offer::MediaLine;

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
/// ([`Subscriber::fit_rtx_history`] keeps its last fit when it lapses).
/// What this saves is memory: every payload a subscriber was sent stays
/// referenced until its history lets go of it (at 70 rooms of 4 on
/// loopback, 1 s instead of 3 s took the server from 323 to 197 MiB
/// resident, at no measurable CPU cost).
pub(super) fn rtx_history_for(rtt: Duration) -> Duration {
    rtt.saturating_mul(10)
        .saturating_add(Duration::from_millis(200))
        .clamp(RTX_HISTORY_MIN, RTX_HISTORY_MAX)
}

pub(super) struct Subscriber {
    pub(super) slots: Vec<Slot>,
    /// Its side of the shard's own egress ([`super::egress`]), from its
    /// first packet sent there.
    pub(super) egress: Option<Box<super::egress::Egress>>,
    pub(super) downlink: Downlink,
    /// How long its slots' sent packets stay resendable
    /// ([`rtx_history_for`], applied by [`Subscriber::fit_rtx_history`]).
    rtx_history: Duration,
}

impl Default for Subscriber {
    fn default() -> Self {
        Subscriber {
            slots: Vec::new(),
            egress: None,
            downlink: Downlink::default(),
            rtx_history: RTX_HISTORY_MAX,
        }
    }
}

impl Subscriber {
    /// Adds the slots of a (re)negotiation, ignoring mids already known;
    /// true if any was new.
    pub(super) fn add_slots(&mut self, slots: &[MediaLine]) -> bool {
        let before = self.slots.len();
        for s in slots {
            if !self.slots.iter().any(|x| x.mid == s.mid) {
                self.slots.push(Slot::new(s.mid, s.kind));
            }
        }
        before != self.slots.len()
    }

    /// After a negotiation: forwarded media goes out as it arrives. str0m's
    /// pacer (on with the BWE) would hold each keyframe back at 1.1x the
    /// estimate, hundreds of milliseconds on a fast link whose estimate has
    /// not climbed. The estimate still comes from TWCC feedback and chooses
    /// layers, which is what keeps a slow downlink from queueing; probes
    /// and padding are still paced. str0m also caps each stream's
    /// retransmissions at 15 % of what it sends (its RTX cache default):
    /// the per-subscriber NACK budget. Slots this negotiation added get the
    /// RTX history as fitted so far ([`Self::fit_rtx_history`]).
    pub(super) fn negotiated(&mut self, rtc: &mut Rtc) {
        let mut api = rtc.direct_api();
        for s in &mut self.slots {
            s.out.egress.renegotiated();
            if let Some(tx) = api.stream_tx_by_mid(s.mid, None) {
                tx.set_unpaced(true);
                tx.set_rtx_max_age(self.rtx_history);
            }
        }
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

    /// Fits how long its slots keep sent packets for resends to its latest
    /// round-trip time ([`rtx_history_for`]); a change under 100 ms is left.
    /// What is held stays (str0m evicts by the new age at the next send).
    /// An unknown RTT keeps the last fit: str0m's TWCC round trip lapses
    /// while its downlink is out, exactly when its NACKs will come.
    pub(super) fn fit_rtx_history(&mut self, rtc: &mut Rtc, rtt: Option<Duration>) {
        let Some(rtt) = rtt else {
            return;
        };
        let age = rtx_history_for(rtt);
        if age.abs_diff(self.rtx_history) < Duration::from_millis(100) {
            return;
        }
        self.rtx_history = age;
        let mut api = rtc.direct_api();
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
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

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
    fn an_unknown_rtt_leaves_3_s_at_first_and_the_last_fit_after() {
        let ms = Duration::from_millis;
        let mut rtc = Rtc::new(Instant::now());
        let mut s = Subscriber::default();
        s.fit_rtx_history(&mut rtc, None);
        assert_eq!(s.rtx_history(), RTX_HISTORY_MAX);
        s.fit_rtx_history(&mut rtc, Some(ms(150)));
        assert_eq!(s.rtx_history(), ms(1700));
        // Under 100 ms of change is left.
        s.fit_rtx_history(&mut rtc, Some(ms(155)));
        assert_eq!(s.rtx_history(), ms(1700));
        s.fit_rtx_history(&mut rtc, None);
        assert_eq!(s.rtx_history(), ms(1700));
        s.fit_rtx_history(&mut rtc, Some(ms(20)));
        assert_eq!(s.rtx_history(), RTX_HISTORY_MIN);
    }
}
