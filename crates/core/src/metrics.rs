//! Per-shard counters: plain integers owned by one shard, copied out as a value
//! (docs/design.md rule 5). No atomics, no registry; the control thread sums copies.

use serde::Serialize;

use crate::ids::{ParticipantId, TrackKey};

/// Cumulative counters of one shard. Every field only grows.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Counters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// UDP messages the kernel took: fewer than the datagrams in them where
    /// GSO sent a run as one (equal to them with offload off or refused).
    pub tx_messages: u64,
    /// Publishers' RTP packets the shard authenticated and decrypted
    /// itself, past str0m's receive path (`engine::ingress`).
    pub received_direct: u64,
    /// RTP packets written to a subscriber leg.
    pub forwarded: u64,
    /// Of those, the ones the shard wrote and encrypted itself, past str0m
    /// (`engine::egress`).
    pub forwarded_direct: u64,
    /// NACKed packets of the shard's own egress handed back to str0m for a
    /// resend on the RTX stream.
    pub resent_direct: u64,
    /// Datagrams that are not STUN/DTLS/RTP/RTCP, or that str0m refused.
    pub dropped_malformed: u64,
    /// Datagrams from an address no participant owns and without a known ufrag.
    pub dropped_unknown_source: u64,
    /// Video held back in a slot until its new source sends a keyframe.
    pub dropped_waiting_keyframe: u64,
    /// Packets a slot refused because they were older than its current source's start.
    pub dropped_stale: u64,
    /// Publishers' packets of a track they muted (`{"type":"mute"}`): not
    /// forwarded.
    pub dropped_muted: u64,
    /// No payload type on the subscriber leg for the publisher's codec.
    pub dropped_no_codec: u64,
    /// Datagrams the kernel refused to take (send buffer full).
    pub dropped_send: u64,
    pub cross_shard_out: u64,
    pub cross_shard_in: u64,
    /// Cross-shard media dropped because the peer's queue was full.
    pub cross_shard_dropped: u64,
    /// Datagrams this shard's socket got for another shard's participant
    /// (one UDP port for all shards) and handed over to it...
    pub handed_over: u64,
    /// ...and those another shard handed over to this one.
    pub handed_in: u64,
    pub keyframe_requests_sent: u64,
    /// PLI/FIR received from subscribers.
    pub keyframe_requests_received: u64,
    /// NACKs received from subscribers (answered from str0m's send buffer).
    pub nacks_received: u64,
    /// NACKs sent to publishers for packets lost on their way in.
    pub nacks_sent: u64,
    pub participants_added: u64,
    pub participants_removed: u64,
    pub rtc_errors: u64,
    /// Panics caught at the participant boundary (the participant was evicted).
    pub participant_panics: u64,
    /// Participants removed because ICE+DTLS was not up within --connect-timeout.
    pub connect_timeouts: u64,
    /// Connected participants whose ICE went down (consent failed); each
    /// then has `--reconnect-grace` to come back.
    pub ice_downs: u64,
    /// Of those, the ones whose ICE came back up within the grace (their
    /// call went on as it was).
    pub reconnects: u64,
    /// New source addresses refused: the participant already uses the most allowed.
    pub dropped_addr_limit: u64,
    /// Data-channel requests over the participant's rate or size limit.
    pub dropped_requests: u64,
    /// Datagrams from a participant's address that str0m took without effect
    /// (SRTP authentication failure, replay, bad STUN integrity, a DTLS
    /// datagram that is not whole records), and SRTCP that failed
    /// authentication (str0m patch 27 counts it; the engine reads the count). Valid DTLS records and RTCP often
    /// give nothing at once (SCTP acknowledges every other data-channel
    /// packet), so they are not judged by their silence.
    pub dropped_by_stack: u64,
    /// RTP with a rid and an SSRC the participant never used, on an m-line
    /// without simulcast: kept from str0m (it would open a receive stream).
    pub dropped_unknown_stream: u64,
    /// Slots that moved to another simulcast layer of their source.
    pub layer_switches: u64,
    /// Slots whose video the allocation paused (the estimate did not fit
    /// even the lowest layer, or the subscriber hid the slot).
    pub layer_pauses: u64,
    /// Dynacast notices to publishers (layers paused or resumed).
    pub dynacast_notices: u64,
    /// VP8, VP9 and AV1 packets of temporal layers a slot left out (its
    /// down-switch).
    pub temporal_skipped: u64,
    /// VP9 and AV1 SVC packets of spatial layers above the one a slot
    /// shows, left out of its numbering.
    pub spatial_skipped: u64,
    /// Data channels a participant opened that str0m refused: over
    /// `offer::MAX_DATA_CHANNELS` at a time, or a label and protocol over
    /// `offer::MAX_CHANNEL_LABEL_BYTES` (str0m patch 26). Reset, never kept.
    pub refused_channels: u64,
    /// Relay datagrams to other nodes' shards (`--cluster`), and their bytes
    /// (sealed, as sent).
    pub relay_tx_packets: u64,
    pub relay_tx_bytes: u64,
    /// Relay datagrams from other nodes' shards, opened and read.
    pub relay_rx_packets: u64,
    pub relay_rx_bytes: u64,
    /// Relay datagrams from no registered shard of the cluster.
    pub relay_dropped_unknown: u64,
    /// Relay datagrams with a bad tag or that do not read as a message.
    pub relay_dropped_bad: u64,
    /// Relay datagrams replayed, or older than the replay window.
    pub relay_dropped_replayed: u64,
    /// Relay datagrams the kernel refused to take, or for no known peer.
    pub relay_dropped_send: u64,
    /// Publishers' packets handed to a recording's queue (issue 53).
    pub recording_queued: u64,
    /// Publishers' packets a recording's full queue refused: the recorder
    /// fell behind (slow or full disk); the shard forwarded them anyway.
    pub recording_dropped: u64,
}

impl Counters {
    /// Adds `o` into `self` (used by the control thread to sum shards).
    pub fn add(&mut self, o: &Counters) {
        macro_rules! sum {
            ($($f:ident),*) => { $( self.$f += o.$f; )* };
        }
        sum!(
            rx_packets,
            rx_bytes,
            tx_packets,
            tx_bytes,
            tx_messages,
            received_direct,
            forwarded,
            forwarded_direct,
            resent_direct,
            dropped_malformed,
            dropped_unknown_source,
            dropped_waiting_keyframe,
            dropped_stale,
            dropped_muted,
            dropped_no_codec,
            dropped_send,
            cross_shard_out,
            cross_shard_in,
            cross_shard_dropped,
            handed_over,
            handed_in,
            keyframe_requests_sent,
            keyframe_requests_received,
            nacks_received,
            nacks_sent,
            participants_added,
            participants_removed,
            rtc_errors,
            participant_panics,
            connect_timeouts,
            ice_downs,
            reconnects,
            dropped_addr_limit,
            dropped_requests,
            dropped_by_stack,
            dropped_unknown_stream,
            layer_switches,
            layer_pauses,
            dynacast_notices,
            temporal_skipped,
            spatial_skipped,
            refused_channels,
            relay_tx_packets,
            relay_tx_bytes,
            relay_rx_packets,
            relay_rx_bytes,
            relay_dropped_unknown,
            relay_dropped_bad,
            relay_dropped_replayed,
            relay_dropped_send,
            recording_queued,
            recording_dropped
        );
    }
}

/// Bucket upper edges (µs) for the latency histograms: fine below 100 µs, and
/// every edge of the socket-dwell article (10, 50, 100, 500, 1000, 5000,
/// 10000, 50000 µs). One more bucket (+Inf) follows the last edge.
pub const LATENCY_EDGES_US: [u64; 17] = [
    1, 2, 5, 10, 20, 30, 50, 75, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000,
];

/// A fixed-bucket latency histogram: plain integers, cumulative, `Copy`.
/// Recording is a short linear scan and three adds: cheap enough per packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LatencyHistogram {
    /// `counts[i]` holds samples `<= LATENCY_EDGES_US[i]` (and above the
    /// previous edge); the last entry holds everything above 50 ms.
    pub counts: [u64; LATENCY_EDGES_US.len() + 1],
    pub count: u64,
    pub sum_us: u64,
    pub max_us: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            counts: [0; LATENCY_EDGES_US.len() + 1],
            count: 0,
            sum_us: 0,
            max_us: 0,
        }
    }
}

impl LatencyHistogram {
    pub fn record_us(&mut self, us: u64) {
        self.record_us_n(us, 1);
    }

    /// `n` samples of `us` at once (a batch's figure for each of its items).
    pub fn record_us_n(&mut self, us: u64, n: u64) {
        let i = LATENCY_EDGES_US
            .iter()
            .position(|&e| us <= e)
            .unwrap_or(LATENCY_EDGES_US.len());
        if let Some(c) = self.counts.get_mut(i) {
            *c += n;
        }
        self.count += n;
        self.sum_us = self.sum_us.saturating_add(us.saturating_mul(n));
        self.max_us = self.max_us.max(us);
    }

    pub fn add(&mut self, o: &LatencyHistogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.count += o.count;
        self.sum_us += o.sum_us;
        self.max_us = self.max_us.max(o.max_us);
    }

    /// What was recorded since `earlier` (an older copy of this one); its
    /// `max_us` is the older maximum's, an upper bound.
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        let mut d = *self;
        for (a, b) in d.counts.iter_mut().zip(earlier.counts.iter()) {
            *a = a.saturating_sub(*b);
        }
        d.count = self.count.saturating_sub(earlier.count);
        d.sum_us = self.sum_us.saturating_sub(earlier.sum_us);
        d
    }

    pub fn mean_us(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_us as f64 / self.count as f64
        }
    }

    /// `(upper edge in seconds, samples in that bucket)` pairs, the last edge
    /// +Inf. Per bucket, not cumulative: the Prometheus encoder accumulates.
    pub fn buckets_seconds(&self) -> Vec<(f64, u64)> {
        LATENCY_EDGES_US
            .iter()
            .map(|&e| e as f64 / 1e6)
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.counts.iter().copied())
            .collect()
    }

    /// The smallest bucket edge (µs) below which at least `q` of the
    /// samples lie; in the open top bucket (over the last edge), the
    /// largest sample, the one bound known there.
    pub fn quantile_edge_us(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let want = (q * self.count as f64).ceil() as u64;
        let mut acc = 0;
        for (i, c) in self.counts.iter().enumerate() {
            acc += c;
            if acc >= want {
                return Some(LATENCY_EDGES_US.get(i).copied().unwrap_or(self.max_us));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets() {
        let mut h = LatencyHistogram::default();
        for us in [0, 1, 10, 11, 100, 4_000, 60_000] {
            h.record_us(us);
        }
        assert_eq!(h.count, 7);
        assert_eq!(h.counts[0], 2); // 0 and 1
        assert_eq!(h.counts[3], 1); // 10
        assert_eq!(h.counts[4], 1); // 11 -> <=20
        assert_eq!(h.counts[8], 1); // 100
        assert_eq!(h.counts[13], 1); // 4000 -> <=5000
        assert_eq!(h.counts[17], 1); // over 50 ms
        assert_eq!(h.max_us, 60_000);
        let b = h.buckets_seconds();
        assert_eq!(b.len(), LATENCY_EDGES_US.len() + 1);
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), 7);
        assert_eq!(b[3], (10e-6, 1));
        assert_eq!(b.last().unwrap(), &(f64::INFINITY, 1));
        assert_eq!(h.quantile_edge_us(0.5), Some(20));
        // In the open top bucket: the largest sample, not a bucket edge.
        assert_eq!(h.quantile_edge_us(1.0), Some(60_000));
        let mut t = LatencyHistogram::default();
        t.add(&h);
        t.add(&h);
        assert_eq!(t.count, 14);
    }
}

/// One participant's transport figures, from str0m's periodic statistics.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ParticipantStats {
    #[serde(skip)]
    pub id: ParticipantId,
    /// Fraction of the publisher's packets lost on the way to us.
    pub ingress_loss: Option<f32>,
    /// Current interarrival jitter of its media reaching us, in ms: RFC
    /// 3550's estimate (str0m's, as of its latest receiver report: each
    /// second for a video stream, every 5 s for audio; resends are not
    /// samples) of its worst received stream among those that received
    /// packets since their statistics before (a paused simulcast layer does
    /// not count); `None` while none did. Not a maximum: it falls again
    /// with the jitter.
    pub ingress_jitter_ms: Option<f64>,
    /// Fraction of our packets lost on the way to it over the last second
    /// (from its TWCC feedback; without that, its receiver reports').
    pub egress_loss: Option<f32>,
    pub rtt_ms: Option<f64>,
    pub nacks_received: u64,
    pub nacks_sent: u64,
    pub keyframe_requests_received: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Its downlink estimate, bps: str0m's send-side BWE from its TWCC
    /// feedback, else its REMB, else a loss-based one from its receiver
    /// reports (`estimate_source`).
    pub estimate_bps: Option<u64>,
    /// Where `estimate_bps` comes from: "twcc", "remb" or "loss".
    pub estimate_source: Option<&'static str>,
    /// The lowest of those over about the last 2 s, bps: what a move onto
    /// a higher simulcast layer counts on (a probe lifts `estimate_bps`
    /// for moments).
    pub climb_estimate_bps: Option<u64>,
    /// How long what we send it stays resendable (its NACKs can reach back
    /// this far), fitted to `rtt_ms`: 3000 until that is known.
    pub rtx_history_ms: u64,
    /// Each video slot's simulcast layer.
    pub layers: Vec<SlotLayer>,
    /// Each receive slot, what it shows and wants (for the verdict,
    /// `corelay_core::diagnosis`; not in the stats JSON).
    #[serde(skip)]
    pub slots: Vec<SlotStats>,
}

/// One receive slot: its source and, for video, the layer its size asks
/// for (capped by what the source sends) and the one the allocation aims at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotStats {
    pub mid: String,
    pub video: bool,
    /// The track it shows.
    pub source: Option<TrackKey>,
    /// Shown (a video slot sized 0x0 is hidden; audio always is).
    pub shown: bool,
    pub wanted: Option<u8>,
    pub target: Option<u8>,
}

/// The layer one video slot forwards (`layer`) and the one the allocation
/// chose (`target`; `None`: paused), as stable layer ids of its source (the
/// rid's position in the publisher's offer; 0 without simulcast).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct SlotLayer {
    pub mid: String,
    pub layer: Option<u8>,
    pub target: Option<u8>,
    pub switches: u64,
}
