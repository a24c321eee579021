//! What a participant observed: the public snapshot types and the observer
//! hook the load generator uses to aggregate without locks.

use std::collections::BTreeMap;

/// Per receive slot (recvonly m-line) counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotStats {
    /// "video" or "audio".
    pub kind: String,
    /// RTP packets received.
    pub packets: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Complete frames (the last packet of a frame verified; every audio packet).
    pub frames: u64,
    /// Payloads that failed verification.
    pub corrupt: u64,
    /// RTP sequence number went backwards.
    pub out_of_order: u64,
    /// Forward jumps of the sequence number by more than one (occurrences).
    pub seq_gaps: u64,
    /// Packets skipped by those jumps (a loss estimate before retransmission).
    pub seq_missing: u64,
    /// Frames a publisher sent that never completed here: jumps of the
    /// publisher's own frame number between consecutive complete frames of
    /// one source on this slot (less the late ones that came after). Unlike
    /// `seq_missing` it sees what the server dropped before rewriting
    /// sequence numbers.
    pub frames_missing: u64,
    /// Source and frame number of the last complete frame.
    pub last_frame: Option<(String, u32)>,
    /// RTP timestamp went backwards (wrapping compare).
    pub ts_backwards: u64,
    /// Publisher names seen in payloads, in order of first appearance.
    pub sources: Vec<String>,
    /// Complete frames per publisher name.
    pub frames_by_source: BTreeMap<String, u64>,
    /// When frames from each publisher arrived: first, last, and the gaps
    /// longer than [`RECEPTION_GAP_NS`] (what an outage report needs).
    pub reception: BTreeMap<String, Reception>,
    /// Video packets whose abs-capture-time differs from the capture time in the payload.
    pub abs_capture_mismatch: u64,
    /// Video packets without abs-capture-time.
    pub abs_capture_missing: u64,
    /// End-to-end latency samples in µs, one per complete frame: receive time
    /// minus abs-capture-time for video, minus the payload's capture time for
    /// audio. Capped (see `ParticipantConfig::keep_latency_samples`).
    pub latency_us: Vec<u64>,
    /// Latency samples taken (also those past the cap).
    pub latency_count: u64,
    /// SSRCs seen on this slot, in order of first appearance.
    pub ssrcs: Vec<u32>,
    /// Last extended sequence number.
    pub last_seq: Option<u64>,
    /// Last RTP timestamp.
    pub last_ts: Option<u32>,
    /// Publisher name of the last verified packet.
    pub last_source: Option<String>,
    /// Keyframes received (first packet of a keyframe).
    pub keyframes: u64,
    /// CLOCK_MONOTONIC ns of the first packet on this slot.
    pub first_packet_ns: Option<u64>,
    /// Video: complete frames per simulcast layer of the payload stamp
    /// (index 0: sent without simulcast; 1, 2, 3: rids q, h, f). VP9 SVC
    /// ([`crate::svc`]): complete pictures by the highest spatial layer
    /// received (1, 2, 3: spatial layer 0, 1, 2), so `last_layer` is the
    /// spatial layer shown now and `layer_switches` counts its changes.
    pub frames_by_layer: [u64; 4],
    /// Video: consecutive complete frames of one publisher on different
    /// layers (the SFU moved this slot to another encoding).
    pub layer_switches: u64,
    /// Video: layer of the last complete frame.
    pub last_layer: Option<u8>,
    /// Video: gaps longer than [`FREEZE_NS`] between consecutive complete
    /// frames on this slot (any publisher).
    pub freezes: u64,
    /// Video: total length of those gaps, ns.
    pub frozen_ns: u64,
    /// Video: CLOCK_MONOTONIC ns of the last complete frame.
    pub last_frame_ns: Option<u64>,
}

/// A video slot that shows no new frame for longer than this is frozen.
pub const FREEZE_NS: u64 = 500_000_000;

/// Gaps between complete frames from one publisher longer than this are
/// recorded in [`Reception::gaps`].
pub const RECEPTION_GAP_NS: u64 = 1_000_000_000;
/// At most this many gaps are kept per publisher and slot; more are counted.
pub const MAX_RECEPTION_GAPS: usize = 64;

/// When complete frames from one publisher arrived on one slot, in
/// CLOCK_MONOTONIC ns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reception {
    pub first_ns: u64,
    pub last_ns: u64,
    /// `(last frame before, first frame after)` for every silence longer
    /// than [`RECEPTION_GAP_NS`], oldest first, at most [`MAX_RECEPTION_GAPS`].
    pub gaps: Vec<(u64, u64)>,
    /// Gaps past [`MAX_RECEPTION_GAPS`].
    pub gaps_dropped: u64,
}

impl Reception {
    /// The first frame, at `at_ns`.
    pub fn new_at(at_ns: u64) -> Self {
        Reception {
            first_ns: at_ns,
            last_ns: at_ns,
            gaps: Vec::new(),
            gaps_dropped: 0,
        }
    }

    /// A complete frame arrived at `at_ns`.
    pub fn frame(&mut self, at_ns: u64) {
        if at_ns <= self.last_ns {
            return;
        }
        if at_ns - self.last_ns > RECEPTION_GAP_NS {
            if self.gaps.len() < MAX_RECEPTION_GAPS {
                self.gaps.push((self.last_ns, at_ns));
            } else {
                self.gaps_dropped += 1;
            }
        }
        self.last_ns = at_ns;
    }

    /// The spans in which frames arrived: `[first, last]` without the gaps.
    pub fn spans(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(self.gaps.len() + 1);
        let mut from = self.first_ns;
        for &(a, b) in &self.gaps {
            out.push((from, a));
            from = b;
        }
        out.push((from, self.last_ns));
        out
    }
}

impl SlotStats {
    /// The last packet of frame `frame` from publisher `source` arrived at
    /// `rx_ns`: frame-number loss and the reception record.
    pub fn frame_complete(&mut self, source: &str, frame: u32, rx_ns: u64) {
        match &mut self.last_frame {
            Some((last_source, last)) if last_source == source => {
                if frame > *last {
                    self.frames_missing += u64::from(frame - *last - 1);
                    *last = frame;
                } else if frame < *last {
                    // Late (a retransmission): it was counted missing.
                    self.frames_missing = self.frames_missing.saturating_sub(1);
                }
            }
            // A new source on this slot: its numbering starts here.
            _ => self.last_frame = Some((source.to_string(), frame)),
        }
        if let Some(r) = self.reception.get_mut(source) {
            r.frame(rx_ns);
        } else {
            self.reception
                .insert(source.to_string(), Reception::new_at(rx_ns));
        }
    }

    /// A complete video frame from `source` on simulcast `layer` arrived at
    /// `rx_ns`: layer counts, switches and freezes. Call before
    /// [`frame_complete`](Self::frame_complete) (it compares with the
    /// previous frame's source). A layer switch is not a loss: the frame
    /// numbers, sequence numbers and timestamps of a slot run on across it.
    pub fn video_frame(&mut self, source: &str, layer: u8, rx_ns: u64) {
        if let Some(n) = self.frames_by_layer.get_mut(usize::from(layer)) {
            *n += 1;
        }
        let same_source = self
            .last_frame
            .as_ref()
            .is_some_and(|(s, _)| s.as_str() == source);
        if same_source && self.last_layer.is_some_and(|l| l != layer) {
            self.layer_switches += 1;
        }
        self.last_layer = Some(layer);
        match self.last_frame_ns {
            Some(last) if rx_ns > last => {
                if rx_ns - last > FREEZE_NS {
                    self.freezes += 1;
                    self.frozen_ns += rx_ns - last;
                }
                self.last_frame_ns = Some(rx_ns);
            }
            Some(_) => {}
            None => self.last_frame_ns = Some(rx_ns),
        }
    }

    /// Largest latency sample, if any.
    pub fn max_latency_us(&self) -> Option<u64> {
        self.latency_us.iter().copied().max()
    }
}

/// How a participant reaches the server (issue 50): through a TURN relay,
/// and whether it moved to a new local address mid-call.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReachStats {
    /// coturn's relayed address (None: direct).
    pub relayed: Option<std::net::SocketAddr>,
    /// Relayed: what the server's latest binding success response said our
    /// address was (its XOR-MAPPED-ADDRESS): the relayed address when the
    /// server hears us through coturn.
    pub server_saw: Option<std::net::SocketAddr>,
    /// Relayed: allocation refreshes answered, and TURN errors.
    pub turn_refreshes: u64,
    /// Error answers to refreshes (a stale nonce is one, then retried).
    pub turn_errors: u64,
    /// CLOCK_MONOTONIC ns when it moved to a new local address.
    pub moved_at_ns: Option<u64>,
    /// The address it moved to.
    pub moved_to: Option<std::net::SocketAddr>,
    /// CLOCK_MONOTONIC ns (receive time) of the first media packet after
    /// the move.
    pub recovered_at_ns: Option<u64>,
    /// CLOCK_MONOTONIC ns (receive time) of the server's success response
    /// to the nominating check sent from the new address at the move (the
    /// server's ICE agent took it).
    pub check_answered_ns: Option<u64>,
}

/// Everything a participant observed so far (a copy).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// ICE + DTLS connected (str0m `Event::Connected`) and not disconnected since.
    pub connected: bool,
    /// The data channel is open.
    pub channel_open: bool,
    /// Receive slots by mid.
    pub slots: BTreeMap<String, SlotStats>,
    /// Every data-channel message, parsed as JSON (a non-JSON message is kept
    /// as a JSON string), in order of arrival.
    pub events: Vec<serde_json::Value>,
    /// PLI/FIR received for our published tracks.
    pub keyframe_requests: u64,
    /// Mids of our published video tracks.
    pub video_mids: Vec<String>,
    /// Mids of our published audio tracks.
    pub audio_mids: Vec<String>,
    /// ICE round-trip times (STUN binding request → success response), µs. Capped.
    pub ice_rtt_us: Vec<u64>,
    /// Video frames sent.
    pub sent_video_frames: u64,
    /// Video keyframes sent.
    pub sent_keyframes: u64,
    /// RTP packets sent (video + audio).
    pub sent_packets: u64,
    /// Audio packets sent.
    pub sent_audio_packets: u64,
    /// Times the send schedule ran more than 5 ms late (the client is overloaded).
    pub send_slips: u64,
    /// Media packets received on the own media path ([`crate::fastpath`]);
    /// the rest of `packets` came through str0m.
    pub own_path_packets: u64,
    /// The server's transport-wide feedback packets the own media path
    /// dropped unread (the client runs no send-side estimator; see
    /// [`crate::fastpath`]).
    pub feedback_ignored: u64,
    /// Media packets the own media path could not queue (more than a
    /// poll's worth waiting; see [`crate::fastpath`]): not sent, not counted as sent.
    pub send_refused: u64,
    /// NACKs this participant sent (str0m ingress stats, summed over mids).
    pub nacks_sent: u64,
    /// RTP packets for an SSRC we could not map to a slot.
    pub unknown_packets: u64,
    /// Datagrams str0m refused (`handle_input` error) or that did not parse,
    /// and RTP the own media path could not parse or authenticate.
    pub bad_datagrams: u64,
    /// Set when the str0m instance died; the reason.
    pub failed: Option<String>,
    /// Video frames sent per layer stamp value (0: no simulcast; 1, 2, 3:
    /// rids q, h, f).
    pub sent_frames_by_layer: [u64; 4],
    /// Video keyframes sent per layer stamp value.
    pub sent_keyframes_by_layer: [u64; 4],
    /// Simulcast layers being sent now, a bit mask over
    /// [`crate::simulcast::RIDS`] (0 without simulcast).
    pub layers_active: u8,
    /// `layers` messages for our video track received.
    pub layer_messages: u64,
    /// The emulated downlink bottleneck's counters (None: not limited).
    pub downlink: Option<crate::shaper::ShaperStats>,
    /// Its path to the server: through a TURN relay, moved to a new
    /// address ([`ReachStats`]).
    pub reach: ReachStats,
}

/// Makes `dst` equal to `src` where `src` only ever appended to what `dst`
/// holds (the usual case between two publications): copies just the tail.
fn extend_from<T: Clone + PartialEq>(dst: &mut Vec<T>, src: &[T]) {
    let n = dst.len();
    if n <= src.len() && (n == 0 || dst[n - 1] == src[n - 1]) {
        dst.extend_from_slice(&src[n..]);
    } else {
        dst.clear();
        dst.extend_from_slice(src);
    }
}

impl SlotStats {
    /// Copy `src` into `self`, appending to the append-only sample list.
    /// In the steady state (same sources, same publishers) nothing is
    /// allocated: strings, lists and map values are copied into the
    /// buffers `self` already has. A driver does this for every slot of
    /// every participant each publish interval.
    fn update_from(&mut self, src: &SlotStats) {
        extend_from(&mut self.latency_us, &src.latency_us);
        self.kind.clone_from(&src.kind);
        self.sources.clone_from(&src.sources);
        sync_map(&mut self.frames_by_source, &src.frames_by_source);
        sync_map(&mut self.reception, &src.reception);
        self.ssrcs.clone_from(&src.ssrcs);
        self.last_source.clone_from(&src.last_source);
        self.last_frame.clone_from(&src.last_frame);
        // The rest is plain numbers; the struct update copies them (and
        // fails to compile if a field that is not `Copy` is added without
        // being named here).
        *self = SlotStats {
            kind: std::mem::take(&mut self.kind),
            sources: std::mem::take(&mut self.sources),
            frames_by_source: std::mem::take(&mut self.frames_by_source),
            reception: std::mem::take(&mut self.reception),
            ssrcs: std::mem::take(&mut self.ssrcs),
            last_source: self.last_source.take(),
            last_frame: self.last_frame.take(),
            latency_us: std::mem::take(&mut self.latency_us),
            ..*src
        };
    }
}

/// Make `dst` equal to `src`, value by value when both have the same keys
/// (no allocation unless a value needs one), by a fresh copy otherwise.
fn sync_map<V: Clone>(dst: &mut BTreeMap<String, V>, src: &BTreeMap<String, V>) {
    if dst.len() == src.len() && dst.keys().eq(src.keys()) {
        for (d, s) in dst.values_mut().zip(src.values()) {
            d.clone_from(s);
        }
    } else {
        dst.clone_from(src);
    }
}

impl Snapshot {
    /// One identity's view when it publishes and subscribes on separate
    /// PeerConnections (the Janus dialect): `self` is the publisher's
    /// snapshot, `sub` the subscription's. Receive slots, received-side
    /// counters and ICE RTTs come from both (the publisher has no slots);
    /// connected only while both are; sent-side figures are the
    /// publisher's.
    pub fn with_subscription(&self, sub: &Snapshot) -> Snapshot {
        let mut s = self.clone();
        for (k, v) in &sub.slots {
            let key = if s.slots.contains_key(k) {
                format!("sub-{k}")
            } else {
                k.clone()
            };
            s.slots.insert(key, v.clone());
        }
        s.connected = self.connected && sub.connected;
        s.events.extend(sub.events.iter().cloned());
        s.ice_rtt_us.extend_from_slice(&sub.ice_rtt_us);
        s.nacks_sent += sub.nacks_sent;
        s.unknown_packets += sub.unknown_packets;
        s.bad_datagrams += sub.bad_datagrams;
        if s.failed.is_none() {
            s.failed = sub.failed.as_ref().map(|f| format!("subscription: {f}"));
        }
        if s.downlink.is_none() {
            s.downlink = sub.downlink;
        }
        s
    }

    /// Make `self` equal to `src` cheaply when `self` is an earlier copy of
    /// it: the append-only lists (events, ICE RTTs, latency samples) only
    /// get their new tails copied. What a driver uses to publish.
    pub fn update_from(&mut self, src: &Snapshot) {
        // Exhaustive: a new field must be handled here.
        let Snapshot {
            connected,
            channel_open,
            slots,
            events,
            keyframe_requests,
            video_mids,
            audio_mids,
            ice_rtt_us,
            sent_video_frames,
            sent_keyframes,
            sent_packets,
            sent_audio_packets,
            send_slips,
            send_refused,
            own_path_packets,
            feedback_ignored,
            nacks_sent,
            unknown_packets,
            bad_datagrams,
            failed,
            sent_frames_by_layer,
            sent_keyframes_by_layer,
            layers_active,
            layer_messages,
            downlink,
            reach,
        } = src;
        extend_from(&mut self.events, events);
        extend_from(&mut self.ice_rtt_us, ice_rtt_us);
        self.slots.retain(|k, _| slots.contains_key(k));
        for (k, v) in slots {
            match self.slots.get_mut(k) {
                Some(d) => d.update_from(v),
                None => {
                    self.slots.insert(k.clone(), v.clone());
                }
            }
        }
        self.connected = *connected;
        self.channel_open = *channel_open;
        self.keyframe_requests = *keyframe_requests;
        self.video_mids.clone_from(video_mids);
        self.audio_mids.clone_from(audio_mids);
        self.sent_video_frames = *sent_video_frames;
        self.sent_keyframes = *sent_keyframes;
        self.sent_packets = *sent_packets;
        self.sent_audio_packets = *sent_audio_packets;
        self.send_slips = *send_slips;
        self.send_refused = *send_refused;
        self.own_path_packets = *own_path_packets;
        self.feedback_ignored = *feedback_ignored;
        self.nacks_sent = *nacks_sent;
        self.unknown_packets = *unknown_packets;
        self.bad_datagrams = *bad_datagrams;
        self.failed.clone_from(failed);
        self.sent_frames_by_layer = *sent_frames_by_layer;
        self.sent_keyframes_by_layer = *sent_keyframes_by_layer;
        self.layers_active = *layers_active;
        self.layer_messages = *layer_messages;
        self.downlink = *downlink;
        self.reach = *reach;
    }

    /// The spans of time in which frames from publisher `name` arrived, over
    /// all slots, merged and sorted (CLOCK_MONOTONIC ns). A publisher can
    /// move between slots; a gap on one slot covered by another is no gap.
    pub fn reception_spans(&self, name: &str) -> Vec<(u64, u64)> {
        let mut spans: Vec<(u64, u64)> = self
            .slots
            .values()
            .filter_map(|s| s.reception.get(name))
            .flat_map(Reception::spans)
            .collect();
        spans.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
        for (a, b) in spans {
            match merged.last_mut() {
                // Touching or overlapping, or apart by less than a gap: one span.
                Some(last) if a <= last.1.saturating_add(RECEPTION_GAP_NS) => {
                    last.1 = last.1.max(b);
                }
                _ => merged.push((a, b)),
            }
        }
        merged
    }

    /// Complete frames received from publisher `name` over all slots.
    pub fn frames_from(&self, name: &str) -> u64 {
        self.slots
            .values()
            .filter_map(|s| s.frames_by_source.get(name))
            .sum()
    }

    /// Complete frames received over all slots of `kind` ("video"/"audio").
    pub fn frames_of_kind(&self, kind: &str) -> u64 {
        self.slots
            .values()
            .filter(|s| s.kind == kind)
            .map(|s| s.frames)
            .sum()
    }

    /// Total corrupt payloads over all slots.
    pub fn corrupt(&self) -> u64 {
        self.slots.values().map(|s| s.corrupt).sum()
    }

    /// All data-channel events of a given `type`.
    pub fn events_of_type(&self, ty: &str) -> Vec<&serde_json::Value> {
        self.events
            .iter()
            .filter(|e| e.get("type").and_then(|t| t.as_str()) == Some(ty))
            .collect()
    }
}

/// Media kind of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Video.
    Video,
    /// Audio.
    Audio,
}

/// One received RTP packet as [`Observer::received`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received<'a> {
    /// The receive slot's mid.
    pub slot: &'a str,
    /// Video or audio slot.
    pub kind: Kind,
    /// Extended RTP sequence number.
    pub seq: u64,
    /// RTP timestamp.
    pub timestamp: u32,
    /// RTP SSRC.
    pub ssrc: u32,
    /// Publisher name from the payload stamp (`None`: the payload failed verification).
    pub source: Option<&'a str>,
    /// First packet of a keyframe.
    pub keyframe: bool,
    /// Frame number and packet index within the frame, from the stamp.
    pub frame: u32,
    /// Packet index within its frame.
    pub index: u16,
    /// Simulcast layer from the stamp (0: none or unverified).
    pub layer: u8,
}

/// Hooks for aggregating measurements across many participants on one
/// thread (the load generator). All methods default to doing nothing.
pub trait Observer: Send {
    /// A complete frame arrived; `latency_us` is receive − capture.
    fn frame(&mut self, _kind: Kind, _latency_us: u64) {}
    /// The same frame again, with who received it (participant `tag`) and
    /// whose it was (the publisher's name): for a load client that splits
    /// latency by pair (same node or across nodes of a cluster).
    fn frame_from(&mut self, _tag: u64, _source: &str, _kind: Kind, _latency_us: u64) {}
    /// An RTP packet arrived (`ok` = payload verified).
    fn packet(&mut self, _kind: Kind, _bytes: usize, _ok: bool) {}
    /// A STUN binding round trip completed.
    fn ice_rtt(&mut self, _rtt_us: u64) {}
    /// The send schedule ran late by `late_us`.
    fn send_slip(&mut self, _late_us: u64) {}
    /// RTP packets sent.
    fn sent(&mut self, _kind: Kind, _packets: u64) {}
    /// First media packet for participant `tag` arrived (join completed).
    fn first_media(&mut self, _tag: u64, _mono_ns: u64) {}
    /// ICE + DTLS came up for participant `tag`.
    fn connected(&mut self, _tag: u64, _mono_ns: u64) {}
    /// Every RTP packet that mapped to a receive slot, in arrival order
    /// (a simulation records these; the load generator does not).
    fn received(&mut self, _r: &Received<'_>) {}
    /// Called once per driver loop iteration.
    fn tick(&mut self, _now: std::time::Instant) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_from_equals_a_clone() {
        let mut src = Snapshot::default();
        let mut dst = Snapshot::default();
        for i in 0..50u64 {
            src.events.push(serde_json::json!({ "type": "x", "i": i }));
            src.ice_rtt_us.push(i);
            let slot = src.slots.entry(format!("{}", i % 3)).or_default();
            slot.packets += 1;
            slot.latency_us.push(i);
            slot.sources.push(format!("s{i}"));
            slot.last_seq = Some(i);
            // Map values change in place; a key is added now and then.
            *slot
                .frames_by_source
                .entry(format!("p{}", i % 2))
                .or_default() += 1;
            if i % 11 == 0 {
                slot.frames_by_source.insert(format!("q{i}"), i);
            }
            slot.reception
                .entry(format!("p{}", i % 2))
                .or_insert_with(|| Reception::new_at(i))
                .frame(i * RECEPTION_GAP_NS);
            slot.last_frame = Some((format!("p{}", i % 2), i as u32));
            src.sent_packets = i;
            src.failed = (i == 40).then(|| "x".to_string());
            if i % 7 == 0 {
                dst.update_from(&src);
                assert_eq!(dst, src);
            }
        }
        dst.update_from(&src);
        assert_eq!(dst, src);
        // A map with fewer keys than the copy's: replaced, not merged.
        for slot in src.slots.values_mut() {
            slot.frames_by_source.retain(|k, _| k.starts_with('p'));
        }
        dst.update_from(&src);
        assert_eq!(dst, src);
        // Not a prefix any more (a fresh participant's snapshot): replaced.
        let fresh = Snapshot::default();
        dst.update_from(&fresh);
        assert_eq!(dst, fresh);
    }
}

#[cfg(test)]
mod reception_tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn layer_switches_are_counted_not_lost() {
        let mut st = SlotStats::default();
        // 30 fps from "a": 10 frames on h, 10 on f (switch at a keyframe,
        // numbering runs on), 10 on q.
        for f in 0..30u32 {
            let layer = [2, 3, 1][f as usize / 10];
            let at = u64::from(f) * 33 * MS;
            st.video_frame("a", layer, at);
            st.frame_complete("a", f, at);
        }
        assert_eq!(st.frames_by_layer, [0, 10, 10, 10]);
        assert_eq!(st.layer_switches, 2);
        assert_eq!(st.frames_missing, 0);
        assert_eq!((st.freezes, st.frozen_ns), (0, 0));
        // Another publisher takes the slot on another layer: not a switch.
        st.video_frame("b", 3, 30 * 33 * MS);
        st.frame_complete("b", 7, 30 * 33 * MS);
        assert_eq!(st.layer_switches, 2);
        // 600 ms without a frame: one freeze; 500 ms exactly: none.
        st.video_frame("b", 3, 30 * 33 * MS + 600 * MS);
        st.video_frame("b", 3, 30 * 33 * MS + 1100 * MS);
        assert_eq!((st.freezes, st.frozen_ns), (1, 600 * MS));
        assert_eq!(st.last_frame_ns, Some(30 * 33 * MS + 1100 * MS));
    }

    #[test]
    fn frames_a_publisher_sent_that_never_came_are_missing() {
        let mut st = SlotStats::default();
        for f in [10, 11, 14, 13, 15] {
            st.frame_complete("a", f, u64::from(f) * 33_000_000);
        }
        // 12 never came; 13 came late.
        assert_eq!(st.frames_missing, 1);
        // Another source takes the slot: its numbers are its own.
        st.frame_complete("b", 500, 16 * 33_000_000);
        st.frame_complete("b", 501, 17 * 33_000_000);
        assert_eq!(st.frames_missing, 1);
        // The first source back: a new run, not a jump of 485 frames.
        st.frame_complete("a", 40, 18 * 33_000_000);
        assert_eq!(st.frames_missing, 1);
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn gaps_are_recorded_and_slots_merge() {
        let mut r = Reception::new_at(S);
        for t in [S + S / 30, 2 * S, 5 * S, 5 * S + S / 2] {
            r.frame(t);
        }
        assert_eq!(r.gaps, vec![(2 * S, 5 * S)]);
        assert_eq!(r.spans(), vec![(S, 2 * S), (5 * S, 5 * S + S / 2)]);
        // The publisher moved to another slot during the gap: no gap overall.
        let mut a = SlotStats::default();
        a.reception.insert("p".into(), r);
        let mut b = SlotStats::default();
        let mut r2 = Reception::new_at(2 * S + S / 2);
        for half in 6..=9 {
            r2.frame(half * S / 2);
        }
        b.reception.insert("p".into(), r2);
        let mut snap = Snapshot::default();
        snap.slots.insert("1".into(), a);
        snap.slots.insert("2".into(), b);
        assert_eq!(snap.reception_spans("p"), vec![(S, 5 * S + S / 2)]);
        assert!(snap.reception_spans("q").is_empty());
    }
}
