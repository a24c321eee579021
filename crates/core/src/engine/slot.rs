//! A receive slot and its rewriter: one stable outgoing stream (the slot's own
//! SSRC, chosen by str0m) whose source may change over time, and, for a
//! simulcast source, the layer it forwards.
//!
//! When the source or its layer changes, sequence numbers continue at
//! last+1, the RTP timestamp continues from the last one plus the wall time
//! elapsed, and a VP8 picture id continues at last+1, so the receiver sees
//! one continuous stream. Packets of the new source that are older than its
//! first forwarded packet are dropped (they would go backwards). A layer
//! switch happens only on a keyframe of the target layer; until it arrives
//! the current layer keeps flowing.
//! Must not: know about rooms or sockets, or choose layers (the allocation
//! sets `target`).

use std::time::Instant;

use str0m::format::CodecSpec;
use str0m::media::{MediaKind, Mid, Pt};
use str0m::rtp::{Vp8Descriptor, Vp8Patch};

use crate::ids::TrackKey;
use crate::svc::SvcPacket;

/// First sequence number of a fresh slot: small, so the SRTP rollover counter starts at 0.
const FIRST_SEQ: u64 = 1000;

/// What a subscriber said about how it shows a slot (docs/api.md, `view`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct View {
    /// Rendered size in CSS pixels; 0x0 means not shown (video paused).
    pub(super) width: u16,
    pub(super) height: u16,
    /// Highest quality rank it wants (0 lowest); `u8::MAX`: no cap.
    pub(super) max_rank: u8,
}

impl Default for View {
    fn default() -> Self {
        // Until told otherwise a slot is assumed to be shown large.
        View {
            width: 1280,
            height: 720,
            max_rank: u8::MAX,
        }
    }
}

/// What to do with one packet of the slot's source.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Forward it; `switched` when it starts a new layer (after another one).
    Forward { switched: bool },
    /// Not for this slot now (another layer, or paused).
    Skip,
    /// A packet of the target layer that cannot start it: the slot waits for
    /// a keyframe of that layer.
    WaitKeyframe(u8),
}

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) mid: Mid,
    pub(super) kind: MediaKind,
    pub(super) source: Option<TrackKey>,
    pub(super) pinned: bool,
    pub(super) view: View,
    /// Which of its source's layers it forwards and aims at.
    pub(super) layer: Layer,
    /// How its packets are written: payload type, numbering, egress.
    pub(super) out: Outgoing,
}

/// Which layer of its source a slot forwards, which one it aims at, and
/// when that last moved.
#[derive(Debug)]
pub(super) struct Layer {
    /// The source layer (stable id: its rid's position in the publisher's
    /// offer, 0 without simulcast) forwarded now; `None` until a keyframe of
    /// `target` starts one (video).
    pub(super) current: Option<u8>,
    /// The layer the allocation chose; `None`: video paused.
    pub(super) target: Option<u8>,
    /// The layer the slot's size asks for, capped by the highest the
    /// source sends (`None`: hidden, or not allocated yet).
    pub(super) wanted: Option<u8>,
    /// Layer switches (not counting the first layer of a source).
    pub(super) switches: u64,
    /// A new source since the last allocation (it needs a keyframe of
    /// whatever layer the allocation picks).
    pub(super) fresh: bool,
    /// When the allocation last changed the target, and last moved it down.
    pub(super) last_move: Option<Instant>,
    pub(super) last_down: Option<Instant>,
    /// An SVC source's picture being forwarded began with a keyframe (its
    /// upper layers are switch points: a climb happens inside it).
    pub(super) key_picture: bool,
}

impl Default for Layer {
    fn default() -> Self {
        Layer {
            current: None,
            target: Some(0),
            wanted: None,
            switches: 0,
            fresh: false,
            last_move: None,
            last_down: None,
            key_picture: false,
        }
    }
}

/// How a slot's packets are written: the payload type its leg uses for the
/// source's codec, the rewriting that keeps its numbering continuous, and
/// its side of the shard's own egress.
#[derive(Debug, Default)]
pub(super) struct Outgoing {
    /// Cached payload-type mapping: publisher codec -> this leg's pt.
    pub(super) pt_map: Option<(CodecSpec, Pt)>,
    pub(super) rewriter: Rewriter,
    pub(super) pictures: PictureIds,
    pub(super) temporal: Temporal,
    /// Its side of the shard's own egress: extension ids, resend history.
    pub(super) egress: super::egress::SlotEgress,
}

impl Slot {
    /// The layer of its source it forwards (or aims at, before the first
    /// switch): where a keyframe for it must come from.
    pub(super) fn source_layer(&self) -> Option<crate::ids::LayerKey> {
        Some(crate::ids::LayerKey {
            track: self.source?,
            layer: self.layer.current.or(self.layer.target)?,
        })
    }

    pub(super) fn new(mid: Mid, kind: MediaKind) -> Self {
        Slot {
            mid,
            kind,
            source: None,
            pinned: false,
            view: View::default(),
            layer: Layer::default(),
            out: Outgoing::default(),
        }
    }

    /// Points the slot at a new source (or none). Returns true if it changed.
    /// A video slot then waits for a keyframe of layer 0 until the
    /// allocation says otherwise.
    pub(super) fn set_source(&mut self, source: Option<TrackKey>) -> bool {
        if self.source == source {
            return false;
        }
        self.source = source;
        self.out.pt_map = None;
        self.layer.current = None;
        self.layer.target = Some(0);
        self.layer.fresh = source.is_some();
        self.layer.last_move = None;
        self.layer.last_down = None;
        self.out.rewriter.rebase();
        self.out.pictures.rebase();
        true
    }

    /// Whether a packet of the source's `layer` goes out on this slot. A
    /// keyframe of the target layer starts it (and ends the current one).
    pub(super) fn admit(&mut self, layer: u8, keyframe: bool) -> Admit {
        if self.kind == MediaKind::Audio {
            return Admit::Forward { switched: false };
        }
        let Some(target) = self.layer.target else {
            self.layer.current = None;
            return Admit::Skip;
        };
        if self.layer.current == Some(layer) {
            return Admit::Forward { switched: false };
        }
        if layer != target {
            return Admit::Skip;
        }
        if !keyframe {
            return Admit::WaitKeyframe(target);
        }
        let switched = self.layer.current.is_some();
        // A new layer starts whole (its keyframe is a base-layer frame);
        // the allocation reduces it again if it must.
        self.out.temporal = Temporal::default();
        if switched {
            self.layer.switches += 1;
            self.out.rewriter.rebase();
            self.out.pictures.rebase();
        }
        self.layer.current = Some(layer);
        Admit::Forward { switched }
    }
}

impl Slot {
    /// [`Slot::admit`] for a scalable source (VP9 or AV1 SVC: one encoding,
    /// its spatial layers inside it), where the slot's layer is the highest
    /// spatial layer it forwards, with every layer below it (K-SVC needs
    /// them at keyframes, full SVC at every picture; forwarding them always
    /// is what lets a move down happen at once).
    ///
    /// It starts on a keyframe. It moves down at the next picture's start
    /// (its lower layers never reference the upper ones), and up inside a
    /// keyframe picture, one layer at each of its layer frames a decoder can
    /// start that layer on ([`SvcPacket::switch_up`]). Only there: whether a
    /// picture's next layer starts a climb must be known when its lower
    /// layer ends, which carries the end-of-picture marker if not, and a
    /// picture must end once. The engine asks for a keyframe when a slot's
    /// target moves up. Packets of
    /// layers above it are skipped, and the caller leaves them out of the
    /// slot's numbering.
    pub(super) fn admit_svc(&mut self, svc: &SvcPacket, keyframe: bool) -> Admit {
        let Some(target) = self.layer.target else {
            self.layer.current = None;
            return Admit::Skip;
        };
        let Some(mut current) = self.layer.current else {
            if !keyframe {
                return Admit::WaitKeyframe(0);
            }
            self.out.temporal = Temporal::default();
            self.layer.current = Some(0);
            self.layer.key_picture = true;
            return Admit::Forward { switched: false };
        };
        let before = current;
        if svc.frame_start && svc.spatial == 0 {
            self.layer.key_picture = keyframe;
            current = current.min(target);
        }
        if self.layer.key_picture
            && svc.frame_start
            && svc.switch_up
            && svc.spatial == current.saturating_add(1)
            && svc.spatial <= target
        {
            current = svc.spatial;
        }
        let switched = current != before;
        if switched {
            self.layer.switches += 1;
            self.layer.current = Some(current);
        }
        if svc.spatial <= current {
            Admit::Forward { switched }
        } else {
            Admit::Skip
        }
    }

    /// Whether a packet that [`Slot::admit_svc`] forwarded ends what the
    /// slot shows of its picture: the last packet of the slot's highest
    /// spatial layer carries the RTP marker (end of picture), as the
    /// publisher's last packet of its highest layer did. Inside a keyframe
    /// picture that the slot climbs through, that is the layer it climbs
    /// to (or the publisher's top).
    pub(super) fn svc_marker(&self, svc: &SvcPacket, marker: bool) -> bool {
        let climbing = self.layer.key_picture
            && self
                .layer
                .target
                .is_some_and(|t| Some(t) > self.layer.current);
        marker || (svc.frame_end && Some(svc.spatial) == self.layer.current && !climbing)
    }
}

/// VP8 picture id and TL0PICIDX rewriting of one slot, so that they stay
/// continuous across source and layer changes and across the frames a
/// temporal down-switch leaves out (libwebrtc treats a jump as lost
/// frames). str0m applies the patch as it serializes the packet: no copy
/// of the payload.
#[derive(Debug, Default)]
pub(super) struct PictureIds {
    rebase_pending: bool,
    /// Unwrapped (extended) picture ids: out = src + offset - skipped before.
    offset: u64,
    tl0_offset: u8,
    last_src: Option<u64>,
    /// Newest source picture forwarded.
    last_fwd: Option<u64>,
    last_out: Option<u64>,
    last_tl0: Option<u8>,
    skips: Skips,
}

/// 15-bit picture ids (what libwebrtc and Firefox send). A 7-bit id whose
/// rewrite does not fit is left as it is (the patch fails to build).
const PID_MASK: u64 = 0x7fff;

impl PictureIds {
    pub(super) fn rebase(&mut self) {
        self.rebase_pending = true;
    }

    /// The extended form of a 15-bit picture id, near the last one seen.
    fn unwrap(&mut self, pid: u16) -> u64 {
        let pid = u64::from(pid) & PID_MASK;
        let ext = match self.last_src {
            None => (1 << 20) + pid,
            Some(last) => {
                let diff = pid.wrapping_sub(last & PID_MASK) & PID_MASK;
                if diff <= PID_MASK / 2 {
                    last + diff
                } else {
                    last.saturating_sub(PID_MASK + 1 - diff)
                }
            }
        };
        self.last_src = Some(self.last_src.map_or(ext, |l| l.max(ext)));
        ext
    }

    /// A frame left out (temporal down-switch): later ids close the gap.
    pub(super) fn skip(&mut self, d: &Vp8Descriptor) {
        if let Some(pid) = d.picture_id() {
            let ext = self.unwrap(pid);
            if !self.rebase_pending && self.last_fwd.is_some_and(|f| ext > f) {
                self.skips.add(ext);
            }
        }
    }

    /// The patch for a packet with descriptor `d`, if anything must change.
    pub(super) fn patch(&mut self, d: &Vp8Descriptor) -> Option<Vp8Patch> {
        let pid = d.picture_id()?;
        let ext = self.unwrap(pid);
        if std::mem::take(&mut self.rebase_pending) {
            self.skips = Skips::default();
            self.last_fwd = None;
            if let Some(last) = self.last_out {
                self.offset = (last + 1).wrapping_sub(ext);
            }
            if let (Some(last), Some(tl0)) = (self.last_tl0, d.tl0_pic_idx()) {
                self.tl0_offset = last.wrapping_add(1).wrapping_sub(tl0);
            }
        }
        let out = ext
            .wrapping_add(self.offset)
            .wrapping_sub(self.skips.before(ext));
        self.last_fwd = Some(self.last_fwd.map_or(ext, |l| l.max(ext)));
        self.last_out = Some(self.last_out.map_or(out, |l| l.max(out)));
        let out_tl0 = d.tl0_pic_idx().map(|t| t.wrapping_add(self.tl0_offset));
        if let Some(t) = out_tl0
            && self.last_tl0.is_none_or(|l| t.wrapping_sub(l) < 128)
        {
            self.last_tl0 = Some(t);
        }
        let out16 = (out & PID_MASK) as u16;
        if out16 == pid && self.tl0_offset == 0 {
            return None;
        }
        let mut b = d.patch().picture_id(out16);
        if let Some(t) = out_tl0 {
            b = b.tl0_pic_idx(t);
        }
        b.build().ok()
    }
}

/// What a temporal down-switch left out of a source's numbering (sequence
/// numbers or picture ids, extended, in increasing order), so that the
/// slot's own numbering has no holes: a number after `n` of them moves
/// down by `n`. Bounded: the oldest are folded into a count.
#[derive(Debug, Default)]
struct Skips {
    list: std::collections::VecDeque<u64>,
    /// Skips forgotten from the front of `list` (all older than it).
    folded: u64,
}

/// Skips remembered one by one (about 30 s of left-out frames at 60 fps).
const MAX_SKIPS: usize = 2048;

impl Skips {
    /// Records `n` as left out. Only a number past every one recorded is
    /// taken (one that arrives late would leave a hole either way).
    fn add(&mut self, n: u64) {
        if self.list.back().is_some_and(|&b| n <= b) {
            return;
        }
        if self.list.len() >= MAX_SKIPS {
            self.list.pop_front();
            self.folded += 1;
        }
        self.list.push_back(n);
    }

    /// How many left-out numbers come before `n`.
    fn before(&self, n: u64) -> u64 {
        if self.list.is_empty() && self.folded == 0 {
            return 0;
        }
        self.folded + self.list.partition_point(|&s| s < n) as u64
    }
}

/// Which VP8 temporal layers a slot forwards. A change takes effect at the
/// start of the next base-layer (TID 0) frame, which references nothing
/// the slot left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Temporal {
    /// Highest TID forwarded now.
    pub(super) max: u8,
    /// Highest TID wanted.
    pub(super) want: u8,
}

impl Default for Temporal {
    fn default() -> Self {
        Temporal {
            max: u8::MAX,
            want: u8::MAX,
        }
    }
}

impl Temporal {
    /// Whether a packet of temporal layer `tid` (starting a frame or not)
    /// goes out.
    pub(super) fn admit(&mut self, tid: u8, frame_start: bool) -> bool {
        if tid == 0 && frame_start {
            self.max = self.want;
        }
        tid <= self.max
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
    /// Source packets a temporal down-switch left out since the rebase,
    /// and the newest source packet forwarded.
    skips: Skips,
    max_src: Option<u64>,
}

impl Rewriter {
    /// The next packet starts a new source.
    pub(super) fn rebase(&mut self) {
        self.rebase_pending = true;
    }

    /// A source packet (extended seq) left out by a temporal down-switch:
    /// the packets after it close the gap.
    pub(super) fn skip(&mut self, seq: u64) {
        // One older than a packet already forwarded cannot be taken out of
        // the numbering any more: it stays a hole.
        if !self.rebase_pending && self.max_src.is_some_and(|m| seq > m) {
            self.skips.add(seq);
        }
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
            self.skips = Skips::default();
            self.max_src = None;
        }
        let out_seq = seq
            .wrapping_add(self.seq_offset)
            .wrapping_sub(self.skips.before(seq));
        if out_seq < self.floor || out_seq > self.floor + (1 << 40) {
            return None;
        }
        let out_ts = ts.wrapping_add(self.ts_offset);
        self.max_src = Some(self.max_src.map_or(seq, |m| m.max(seq)));
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

    fn video_slot() -> Slot {
        let mut s = Slot::new("1".into(), MediaKind::Video);
        s.set_source(Some(TrackKey {
            participant: crate::ids::ParticipantId(7),
            mid: "0".into(),
        }));
        s
    }

    /// Chromium's captured VP9 L3T3_KEY and AV1 L3T3 streams through a
    /// slot at each spatial layer: it forwards that layer and those below,
    /// ends each picture once at its own top layer, and reads the same
    /// layers from VP9's payload descriptor as from the dependency
    /// descriptor that came with it.
    #[test]
    fn captured_chromium_svc_streams_through_a_slot_at_each_layer() {
        use str0m::format::Codec;
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/svc/");
        for (file, codec) in [
            ("vp9-l3t3-key.crtp", Codec::Vp9),
            ("av1-l3t3.crtp", Codec::Av1),
        ] {
            let bytes = std::fs::read(format!("{dir}{file}")).unwrap();
            let records = svc_capture::fixture::read(&bytes);
            let mut reader = None;
            let packets: Vec<(u32, bool, SvcPacket)> = records
                .iter()
                .map(|r| {
                    let svc = crate::svc::read(codec, &r.payload, r.dd.as_deref(), &mut reader)
                        .unwrap()
                        .unwrap();
                    if codec == Codec::Vp9 {
                        let own = crate::svc::vp9::parse(&r.payload).unwrap().svc();
                        assert_eq!(
                            (own.spatial, own.temporal, own.frame_start, own.frame_end),
                            (svc.spatial, svc.temporal, svc.frame_start, svc.frame_end),
                            "{file} seq {}",
                            r.seq
                        );
                    }
                    (r.timestamp, r.marker, svc)
                })
                .collect();
            assert!(packets[0].2.keyframe, "{file} starts on its keyframe");
            assert_eq!(packets[0].2.spatial_layers, Some(3));
            for top in 0..3u8 {
                let mut slot = video_slot();
                slot.layer.target = Some(top);
                // Per picture: markers given, whether its last forwarded
                // packet had one, whether the slot climbed in it.
                let mut pictures: Vec<(u32, usize, bool, bool)> = Vec::new();
                for (i, (ts, marker, svc)) in packets.iter().enumerate() {
                    match slot.admit_svc(svc, i == 0) {
                        Admit::Forward { switched } => {
                            assert!(
                                svc.spatial <= top,
                                "{file}: layer {} above {top}",
                                svc.spatial
                            );
                            if pictures.last().is_none_or(|p| p.0 != *ts) {
                                pictures.push((*ts, 0, false, false));
                            }
                            let m = slot.svc_marker(svc, *marker);
                            let p = pictures.last_mut().unwrap();
                            p.1 += usize::from(m);
                            p.2 = m;
                            p.3 |= switched;
                        }
                        Admit::Skip => assert!(svc.spatial > slot.layer.current.unwrap()),
                        Admit::WaitKeyframe(_) => panic!("{file}: waits after its keyframe"),
                    }
                }
                // Chromium's AV1 keyframe had two layers (its encoder adds
                // the third later, at a switch point outside a keyframe
                // picture: a climb onto it waits for the next keyframe).
                let reached = if codec == Codec::Av1 { top.min(1) } else { top };
                assert_eq!(slot.layer.current, Some(reached), "{file}");
                // Every picture ends with one marker.
                for &(ts, markers, last, _) in &pictures {
                    assert!(
                        last && markers == 1,
                        "{file} at {top}: picture {ts}: {markers} markers"
                    );
                }
            }
        }
    }

    #[test]
    fn an_svc_slot_ends_its_pictures_at_its_own_top_layer() {
        let mut slot = video_slot();
        slot.layer.target = Some(1);
        let frame = |spatial: u8, end: bool| SvcPacket {
            spatial,
            frame_start: !end,
            frame_end: end,
            keyframe: spatial == 0 && !end,
            switch_up: true,
            ..SvcPacket::default()
        };
        assert_eq!(
            slot.admit_svc(&frame(0, false), true),
            Admit::Forward { switched: false }
        );
        assert!(
            !slot.svc_marker(&frame(0, true), false),
            "a keyframe picture climbs on"
        );
        assert_eq!(
            slot.admit_svc(&frame(1, false), false),
            Admit::Forward { switched: true }
        );
        assert!(
            slot.svc_marker(&frame(1, true), false),
            "the slot's top layer ends"
        );
        assert!(
            !slot.svc_marker(&frame(1, false), false),
            "not at its last packet"
        );
        assert_eq!(slot.admit_svc(&frame(2, false), false), Admit::Skip);
        // The next picture (no keyframe) ends at layer 1 too, not at 0.
        let mut next = frame(0, false);
        next.keyframe = false;
        next.switch_up = false;
        assert_eq!(
            slot.admit_svc(&next, false),
            Admit::Forward { switched: false }
        );
        assert!(!slot.svc_marker(&frame(0, true), false));
        slot.layer.target = Some(0);
        assert_eq!(
            slot.admit_svc(&next, false),
            Admit::Forward { switched: true }
        );
        assert!(
            slot.svc_marker(&frame(0, true), false),
            "down: layer 0 ends it now"
        );
        slot.layer.target = Some(1);
        // Paused: nothing, and it starts again on a keyframe.
        slot.layer.target = None;
        assert_eq!(slot.admit_svc(&frame(0, false), false), Admit::Skip);
        slot.layer.target = Some(0);
        assert_eq!(
            slot.admit_svc(&frame(0, true), false),
            Admit::WaitKeyframe(0)
        );
    }

    #[test]
    fn a_layer_starts_on_its_keyframe_and_the_old_one_flows_until_then() {
        let mut s = video_slot();
        // Waits for a keyframe of the target (layer 0); other layers skip.
        assert_eq!(s.admit(0, false), Admit::WaitKeyframe(0));
        assert_eq!(s.admit(2, true), Admit::Skip);
        assert_eq!(s.admit(0, true), Admit::Forward { switched: false });
        assert_eq!(s.admit(0, false), Admit::Forward { switched: false });
        // Up: layer 0 keeps flowing until layer 2 has a keyframe.
        s.layer.target = Some(2);
        assert_eq!(s.admit(2, false), Admit::WaitKeyframe(2));
        assert_eq!(s.admit(0, false), Admit::Forward { switched: false });
        assert_eq!(s.admit(2, true), Admit::Forward { switched: true });
        assert_eq!(s.admit(0, false), Admit::Skip);
        assert_eq!(s.layer.switches, 1);
        // Paused: nothing, at once.
        s.layer.target = None;
        assert_eq!(s.admit(2, true), Admit::Skip);
        assert_eq!(s.layer.current, None);
    }

    #[test]
    fn sequence_and_timestamps_continue_across_a_layer_switch() {
        let t0 = Instant::now();
        let mut s = video_slot();
        assert_eq!(s.admit(0, true), Admit::Forward { switched: false });
        let (a, ta) = s.out.rewriter.rewrite(100, 5_000, 90_000, t0).unwrap();
        s.layer.target = Some(1);
        assert_eq!(s.admit(1, true), Admit::Forward { switched: true });
        // Layer 1 has its own numbering; the slot continues its own.
        let t1 = t0 + Duration::from_millis(33);
        let (b, tb) = s.out.rewriter.rewrite(60_000, 777_777, 90_000, t1).unwrap();
        assert_eq!(b, a + 1);
        assert_eq!(tb, ta + 2_970);
    }

    /// A VP8 payload: descriptor with a 15-bit picture id, TL0PICIDX, TID.
    fn vp8(pid: u16, tl0: u8) -> Vec<u8> {
        vec![
            0x90,
            0xe0,
            0x80 | (pid >> 8) as u8,
            pid as u8,
            tl0,
            0,
            0x10,
            1,
            2,
        ]
    }

    fn patched(p: &mut PictureIds, payload: &[u8]) -> (u16, u8) {
        let d = Vp8Descriptor::parse(payload).unwrap();
        match p.patch(&d) {
            None => (d.picture_id().unwrap(), d.tl0_pic_idx().unwrap()),
            Some(_) => {
                // The patch applies what the bookkeeping says went out.
                ((p.last_out.unwrap() & PID_MASK) as u16, p.last_tl0.unwrap())
            }
        }
    }

    #[test]
    fn vp8_picture_ids_continue_across_a_switch() {
        let mut p = PictureIds::default();
        assert_eq!(patched(&mut p, &vp8(500, 10)), (500, 10));
        assert_eq!(patched(&mut p, &vp8(501, 11)), (501, 11));
        // Another layer (or source) with its own ids: continues at +1.
        p.rebase();
        assert_eq!(patched(&mut p, &vp8(20_000, 200)), (502, 12));
        assert_eq!(patched(&mut p, &vp8(20_001, 201)), (503, 13));
        // The 15-bit id wraps.
        p.rebase();
        p.last_out = Some((1 << 20) + 0x7fff);
        assert_eq!(patched(&mut p, &vp8(9, 0)).0, 0);
    }

    /// Frames of the L1T3 pattern (TID 0 2 1 2 0 2 1 2 ...), two packets
    /// each: a temporal down-switch to TID 0 leaves frames out of the
    /// slot's sequence numbers and picture ids without holes, from the next
    /// base-layer frame on, and back up the same way.
    #[test]
    fn a_temporal_down_switch_leaves_no_holes() {
        let t0 = Instant::now();
        let mut s = video_slot();
        assert_eq!(s.admit(0, true), Admit::Forward { switched: false });
        let tids = [0u8, 2, 1, 2, 0, 2, 1, 2, 0, 2, 1, 2];
        let mut out = Vec::new();
        let mut seq = 500u64;
        for (f, &tid) in tids.iter().enumerate() {
            if f == 1 {
                s.out.temporal.want = 0; // from the next TID 0 frame (f = 4)
            }
            if f == 9 {
                s.out.temporal.want = u8::MAX; // from f = 12 (none here)
            }
            let pid = 1000 + f as u16;
            for k in 0..2u8 {
                let payload = vp8(pid, 7);
                let d = Vp8Descriptor::parse(&payload).unwrap();
                if !s.out.temporal.admit(tid, k == 0) {
                    s.out.rewriter.skip(seq);
                    s.out.pictures.skip(&d);
                } else {
                    let (o, _) = s.out.rewriter.rewrite(seq, 0, 90_000, t0).unwrap();
                    let (p, _) = patched(&mut s.out.pictures, &payload);
                    out.push((f, o, p));
                }
                seq += 1;
            }
        }
        let frames: Vec<usize> = out.iter().map(|x| x.0).step_by(2).collect();
        assert_eq!(frames, [0, 1, 2, 3, 4, 8]);
        let seqs: Vec<u64> = out.iter().map(|x| x.1).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        let pids: Vec<u16> = out.iter().map(|x| x.2).step_by(2).collect();
        assert_eq!(pids, [1000, 1001, 1002, 1003, 1004, 1005]);
    }

    #[test]
    fn a_late_left_out_packet_stays_a_hole() {
        let t0 = Instant::now();
        let mut r = Rewriter::default();
        r.rewrite(10, 0, 90_000, t0).unwrap();
        r.rewrite(12, 0, 90_000, t0).unwrap();
        r.skip(11); // already numbered past it
        assert_eq!(r.rewrite(13, 0, 90_000, t0).unwrap().0, FIRST_SEQ + 3);
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
