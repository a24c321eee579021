//! Per-shard counters: plain integers owned by one shard, copied out as a value
//! (DESIGN.md rule 5). No atomics, no registry; the control thread sums copies.

use serde::Serialize;

/// Cumulative counters of one shard. Every field only grows.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Counters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// RTP packets written to a subscriber leg.
    pub forwarded: u64,
    /// Datagrams that are not STUN/DTLS/RTP/RTCP, or that str0m refused.
    pub dropped_malformed: u64,
    /// Datagrams from an address no participant owns and without a known ufrag.
    pub dropped_unknown_source: u64,
    /// Video held back in a slot until its new source sends a keyframe.
    pub dropped_waiting_keyframe: u64,
    /// Packets a slot refused because they were older than its current source's start.
    pub dropped_stale: u64,
    /// No payload type on the subscriber leg for the publisher's codec.
    pub dropped_no_codec: u64,
    /// Datagrams the kernel refused to take (send buffer full).
    pub dropped_send: u64,
    pub cross_shard_out: u64,
    pub cross_shard_in: u64,
    /// Cross-shard media dropped because the peer's queue was full.
    pub cross_shard_dropped: u64,
    pub keyframe_requests_sent: u64,
    /// PLI/FIR received from subscribers.
    pub keyframe_requests_received: u64,
    pub participants_added: u64,
    pub participants_removed: u64,
    pub rtc_errors: u64,
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
            forwarded,
            dropped_malformed,
            dropped_unknown_source,
            dropped_waiting_keyframe,
            dropped_stale,
            dropped_no_codec,
            dropped_send,
            cross_shard_out,
            cross_shard_in,
            cross_shard_dropped,
            keyframe_requests_sent,
            keyframe_requests_received,
            participants_added,
            participants_removed,
            rtc_errors
        );
    }
}
