//! A receive slot and its rewriter: one stable outgoing stream (the slot's own
//! SSRC, chosen by str0m) whose source may change over time.
//!
//! When the source changes, sequence numbers continue at last+1 and the RTP
//! timestamp continues from the last one plus the wall time elapsed, so the
//! receiver sees one continuous stream. Packets of the new source that are older
//! than its first forwarded packet are dropped (they would go backwards).
//! Must not: know about rooms or sockets.

use std::time::Instant;

use str0m::format::CodecSpec;
use str0m::media::{MediaKind, Mid, Pt};

use crate::ids::TrackKey;

/// First sequence number of a fresh slot: small, so the SRTP rollover counter starts at 0.
const FIRST_SEQ: u64 = 1000;

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) mid: Mid,
    pub(super) kind: MediaKind,
    pub(super) source: Option<TrackKey>,
    pub(super) pinned: bool,
    /// Video after a source change: hold packets until a keyframe starts.
    pub(super) need_keyframe: bool,
    /// Cached payload-type mapping: publisher codec -> this leg's pt.
    pub(super) pt_map: Option<(CodecSpec, Pt)>,
    pub(super) rewriter: Rewriter,
}

impl Slot {
    pub(super) fn new(mid: Mid, kind: MediaKind) -> Self {
        Slot {
            mid,
            kind,
            source: None,
            pinned: false,
            need_keyframe: false,
            pt_map: None,
            rewriter: Rewriter::default(),
        }
    }

    /// Points the slot at a new source (or none). Returns true if it changed.
    pub(super) fn set_source(&mut self, source: Option<TrackKey>) -> bool {
        if self.source == source {
            return false;
        }
        self.source = source;
        self.pt_map = None;
        self.need_keyframe = self.kind == MediaKind::Video && source.is_some();
        self.rewriter.rebase();
        true
    }
}

/// Sequence/timestamp rewriting state of one slot.
#[derive(Debug, Default)]
pub(super) struct Rewriter {
    rebase_pending: bool,
    seq_offset: u64,
    ts_offset: u32,
    /// First outgoing sequence number of the current source.
    floor: u64,
    last_seq: Option<u64>,
    last_ts: u32,
    last_at: Option<Instant>,
}

impl Rewriter {
    /// The next packet starts a new source.
    pub(super) fn rebase(&mut self) {
        self.rebase_pending = true;
    }

    /// Rewrites (extended seq, timestamp) of a source packet to the slot's
    /// numbering, or `None` when the packet must be dropped (older than the
    /// current source's first packet in this slot).
    pub(super) fn rewrite(
        &mut self,
        seq: u64,
        ts: u32,
        clock_rate: u32,
        now: Instant,
    ) -> Option<(u64, u32)> {
        if self.rebase_pending || self.last_seq.is_none() {
            self.rebase_pending = false;
            let out_seq = self.last_seq.map_or(FIRST_SEQ, |s| s + 1);
            let out_ts = match self.last_at {
                Some(at) => {
                    let ticks = now.saturating_duration_since(at).as_micros() as u64
                        * u64::from(clock_rate)
                        / 1_000_000;
                    self.last_ts.wrapping_add((ticks as u32).max(1))
                }
                None => ts,
            };
            self.seq_offset = out_seq.wrapping_sub(seq);
            self.ts_offset = out_ts.wrapping_sub(ts);
            self.floor = out_seq;
        }
        let out_seq = seq.wrapping_add(self.seq_offset);
        if out_seq < self.floor || out_seq > self.floor + (1 << 40) {
            return None;
        }
        let out_ts = ts.wrapping_add(self.ts_offset);
        if self.last_seq.is_none_or(|l| out_seq > l) {
            self.last_seq = Some(out_seq);
            self.last_ts = out_ts;
            self.last_at = Some(now);
        }
        Some((out_seq, out_ts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn continuous_across_a_source_change() {
        let t0 = Instant::now();
        let mut r = Rewriter::default();
        assert_eq!(
            r.rewrite(500, 90_000, 90_000, t0),
            Some((FIRST_SEQ, 90_000))
        );
        assert_eq!(
            r.rewrite(501, 93_000, 90_000, t0),
            Some((FIRST_SEQ + 1, 93_000))
        );
        // Reordered packet keeps its relative position.
        assert_eq!(
            r.rewrite(503, 99_000, 90_000, t0),
            Some((FIRST_SEQ + 3, 99_000))
        );
        assert_eq!(
            r.rewrite(502, 96_000, 90_000, t0),
            Some((FIRST_SEQ + 2, 96_000))
        );
        // New source with unrelated numbering, 100 ms later.
        r.rebase();
        let t1 = t0 + Duration::from_millis(100);
        let (s, ts) = r.rewrite(40_000, 7, 90_000, t1).unwrap();
        assert_eq!(s, FIRST_SEQ + 4);
        assert_eq!(ts, 99_000 + 9_000);
        // An older packet of the new source would go backwards: dropped.
        assert_eq!(r.rewrite(39_999, 4, 90_000, t1), None);
        assert_eq!(
            r.rewrite(40_001, 3_007, 90_000, t1),
            Some((FIRST_SEQ + 5, 111_000))
        );
    }

    #[test]
    fn timestamps_wrap() {
        let t0 = Instant::now();
        let mut r = Rewriter::default();
        r.rewrite(1, u32::MAX - 10, 90_000, t0).unwrap();
        let (_, ts) = r.rewrite(2, 20, 90_000, t0).unwrap();
        assert_eq!(ts, 20);
    }
}
