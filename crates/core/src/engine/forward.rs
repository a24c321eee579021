//! Forwarding: a publisher's RTP packet is classified once (track, layer,
//! codec, keyframe, VP8 descriptor), then written into every local
//! subscriber slot that shows its track and layer, with the slot's own
//! sequence numbers, timestamps and picture ids, and (when it was received
//! here) copied once to each peer shard of the room.
//!
//! Owns the per-packet path. Must not: change slot assignments or choose
//! layers (it only asks for a keyframe when a slot waits for one, and
//! switches a slot to its target layer on that layer's keyframe), or
//! allocate per subscriber beyond what str0m's `write_rtp` takes. A packet
//! goes out on the shard's own egress ([`super::egress`]) where str0m lets
//! it, through `write_rtp` otherwise (a slot's first packets, probes). A
//! subscriber written to is drained (and its own datagrams flushed) once at
//! the end of the batch ([`Engine::drain_pending`]), not after each packet.

use std::sync::Arc;
use std::time::{Duration, Instant};

use str0m::format::Codec;
use str0m::media::MediaKind;
use str0m::media::Pt;
use str0m::rtp::{ExtensionValues, RtpPacket, SeqNo, Ssrc, Vp8Descriptor};

use super::egress;
use super::ingress::{Ingress, Received};
use super::io::{feed_time, guarded};
use super::participant::Participant;
use super::session::Mark;
use super::slot::Admit;
use super::subscriber::Subscriber;
use super::{Engine, PeerMsg, ShardEvent};
use crate::codec::{is_keyframe_start, map_pt, vp8_keyframe_width, vp8_temporal};
use crate::ids::{LayerKey, ParticipantId, RoomId, TrackKey};
use crate::media::{E2eExt, MediaPacket};
use crate::svc::dd::DdRaw;
use crate::svc::{self, vp9};

/// A publisher's RTP packet, from str0m or the own ingress.
struct Rtp<'a> {
    ssrc: Ssrc,
    pt: Pt,
    /// Extended sequence number.
    seq: u64,
    timestamp: u32,
    marker: bool,
    ext: &'a ExtensionValues,
    payload: Arc<[u8]>,
    received: Instant,
}

impl Engine {
    /// A publisher's RTP packet as str0m delivered it: adopted by the own
    /// ingress ([`super::ingress`]) when it is primary media, classified,
    /// forwarded.
    pub(super) fn on_rtp(
        &mut self,
        now: Instant,
        kernel_rx: Option<Duration>,
        id: ParticipantId,
        pkt: Box<RtpPacket>,
    ) {
        let pkt = *pkt;
        let rtp = Rtp {
            ssrc: pkt.header.ssrc,
            pt: pkt.header.payload_type,
            seq: *pkt.seq_no,
            timestamp: pkt.header.timestamp,
            marker: pkt.header.marker,
            ext: &pkt.header.ext_vals,
            payload: pkt.payload,
            received: pkt.timestamp,
        };
        self.on_media_rtp(now, kernel_rx, id, rtp, true);
    }

    /// A publisher's RTP packet of the own ingress, counted in its `Rtc`
    /// (`wire_len`: the datagram's size): classified and forwarded; the
    /// `Rtc` is drained at the end of the batch.
    pub(super) fn on_own_rtp(
        &mut self,
        now: Instant,
        kernel_rx: Option<Duration>,
        id: ParticipantId,
        pkt: Received,
        wire_len: usize,
    ) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        p.session.trail.last_rx = Some(now);
        let session = &mut p.session;
        let rtc = &mut session.rtc;
        // Its clock is not fed: the count takes the time as an argument,
        // and a feed after another mutation (a send of the own egress to
        // it) would walk its timers before they are due.
        let counted = guarded(&mut self.io, id, &mut session.poisoned, |_| {
            rtc.direct_api().rtp_received(
                now,
                pkt.ssrc,
                SeqNo::from(pkt.seq),
                pkt.timestamp,
                pkt.clock,
                pkt.payload.len(),
                wire_len,
                pkt.ext.transport_cc,
            )
        });
        if counted.is_none() {
            return;
        }
        // str0m: drained after a mutation, before its next input: at the
        // end of the batch, as a subscriber written to is.
        self.io.batch.mark(id, session, Mark::Counted, now);
        if counted != Some(true) {
            // str0m no longer has the stream: nothing to forward it as.
            self.io.counters.dropped_no_codec += 1;
            return;
        }
        self.io.counters.received_direct += 1;
        let rtp = Rtp {
            ssrc: pkt.ssrc,
            pt: pkt.pt,
            seq: pkt.seq,
            timestamp: pkt.timestamp,
            marker: pkt.marker,
            ext: &pkt.ext,
            payload: pkt.payload,
            received: now,
        };
        self.on_media_rtp(now, kernel_rx, id, rtp, false);
    }

    /// A publisher's RTP packet: classify it once, then forward it. `adopt`:
    /// str0m delivered it, and the own ingress takes its stream over.
    fn on_media_rtp(
        &mut self,
        now: Instant,
        kernel_rx: Option<Duration>,
        id: ParticipantId,
        pkt: Rtp<'_>,
        adopt: bool,
    ) {
        let Some(p) = self.participants.get_mut(&id) else {
            return;
        };
        let Some((idx, layer)) = p.publisher.track_index(&mut p.session.rtc, pkt.ssrc) else {
            self.io.counters.dropped_no_codec += 1;
            return;
        };
        let pt = pkt.pt;
        let cached = p
            .publisher
            .tracks
            .get(idx)
            .and_then(|t| t.codec)
            .filter(|(cpt, _)| *cpt == pt)
            .map(|(_, spec)| spec);
        let spec = match cached {
            Some(s) => s,
            None => {
                let Some(spec) = p
                    .session
                    .rtc
                    .codec_config()
                    .find(|pp| pp.pt() == pt)
                    .map(|pp| pp.spec())
                else {
                    self.io.counters.dropped_no_codec += 1;
                    return;
                };
                if let Some(t) = p.publisher.tracks.get_mut(idx) {
                    t.codec = Some((pt, spec));
                }
                spec
            }
        };
        if adopt
            && matches!(
                spec.codec,
                Codec::Opus | Codec::Vp8 | Codec::Vp9 | Codec::H264 | Codec::Av1
            )
        {
            if p.publisher.ingress.is_none() {
                p.publisher.ingress = Ingress::new(&mut p.session.rtc);
            }
            if let Some(ingress) = &mut p.publisher.ingress {
                ingress.adopt(pkt.ssrc, pt, spec.clock_rate.get(), pkt.seq);
            }
        }
        let Some(track) = p.publisher.tracks.get_mut(idx) else {
            return;
        };
        if track.flow.arrived(now) {
            self.io.out.control.push(ShardEvent::TrackState {
                id,
                mid: track.mid,
                state: track.flow.state(),
            });
        }
        if track.flow.muted() {
            self.io.counters.dropped_muted += 1;
            return;
        }
        let video = track.kind == MediaKind::Video;
        let vp8 = (video && spec.codec == Codec::Vp8)
            .then(|| Vp8Descriptor::parse(&pkt.payload).ok())
            .flatten();
        // A dependency descriptor (AV1; VP9 when Chromium adds it) is read
        // with its layer's structure and preferred over VP9's payload
        // descriptor. One that does not read is dropped, never guessed at:
        // its layer's next keyframe brings the structure again.
        let dd = if video && matches!(spec.codec, Codec::Av1 | Codec::Vp9) {
            pkt.ext.user_values.get_arc::<DdRaw>()
        } else {
            None
        };
        let reader = track.dd.get_mut(usize::from(layer));
        let svc = match (video, reader) {
            (true, Some(reader)) => {
                match svc::read(
                    spec.codec,
                    &pkt.payload,
                    dd.as_deref().map(DdRaw::as_bytes),
                    reader,
                ) {
                    Ok(s) => s,
                    Err(_) => {
                        let key = LayerKey {
                            track: TrackKey {
                                participant: id,
                                mid: track.mid,
                            },
                            layer,
                        };
                        self.io.counters.dropped_malformed += 1;
                        self.request_keyframe(now, key);
                        return;
                    }
                }
            }
            _ => None,
        };
        let keyframe = match &svc {
            Some(s) => s.keyframe,
            None => video && is_keyframe_start(spec.codec, &pkt.payload),
        };
        let temporal = match &svc {
            Some(s) => Some((s.temporal, s.frame_start && s.spatial == 0)),
            None => vp8.and_then(|_| vp8_temporal(&pkt.payload)),
        };
        let media = MediaPacket {
            track: TrackKey {
                participant: id,
                mid: track.mid,
            },
            kind: track.kind,
            spec,
            seq: pkt.seq,
            timestamp: pkt.timestamp,
            marker: pkt.marker,
            keyframe,
            layer,
            layers: track.rids.len().clamp(1, super::MAX_LAYERS) as u8,
            temporal,
            vp8,
            svc,
            dd,
            ext: E2eExt::from_ext(pkt.ext),
            payload: pkt.payload,
            received: pkt.received,
            kernel_rx,
        };
        let room = p.room;
        if self.taps.any() {
            self.tap(now, room, &media);
        }
        self.forward(now, room, &media, true);
    }

    /// Sends `media` to every local subscriber whose slot shows its track, and
    /// (when it originated here) one copy to each peer shard of the room.
    /// A packet of another node's publisher that crossed the relay to this
    /// shard: when this is the node's lowest shard hosting the room (where
    /// the publisher's node sends its one copy), a copy to each other shard
    /// of this node hosting it. The packet crossed nodes once; the hop here
    /// is the fan-out on the subscribers' node.
    pub(super) fn fan_out_relayed(&mut self, room_id: RoomId, media: &MediaPacket) {
        let Some(room) = self.rooms.get(&room_id) else {
            return;
        };
        let from_other_node = room
            .member(media.track.participant)
            .is_some_and(|m| m.info.shard.is_remote());
        let local_peers = room.peer_shards.iter().filter(|s| !s.is_remote());
        if !from_other_node || local_peers.clone().any(|s| *s < self.shard) {
            return;
        }
        for &shard in local_peers {
            self.io.counters.cross_shard_out += 1;
            self.io.out.peers.push((
                shard,
                PeerMsg::Media {
                    room: room_id,
                    packet: media.to_copy(),
                },
            ));
        }
    }

    pub(super) fn forward(
        &mut self,
        now: Instant,
        room_id: RoomId,
        media: &MediaPacket,
        origin: bool,
    ) {
        let layer = LayerKey {
            track: media.track,
            layer: media.layer,
        };
        if media.keyframe {
            // A request waiting for the rate limit is moot.
            self.keyframes.arrived(layer);
        }
        // A scalable source's spatial layers, chosen per slot inside its one
        // encoding (a simulcast of scalable encodings switches encodings).
        let scalable = media.svc.as_ref().filter(|_| media.layers == 1);
        if media.kind == MediaKind::Video {
            let (layer, count) = match scalable {
                Some(s) => (
                    s.spatial,
                    s.spatial_layers.unwrap_or(s.spatial.saturating_add(1)),
                ),
                None => (media.layer, media.layers),
            };
            self.sources.note(
                media.track,
                layer,
                count,
                scalable.is_some(),
                media.payload.len(),
                now,
            );
            if media.keyframe
                && media.vp8.is_some()
                && let Some(w) = vp8_keyframe_width(&media.payload)
            {
                self.sources.note_width(media.track, media.layer, w);
            }
            // A VP9 keyframe's scalability structure names each spatial
            // layer's width (read again here: a few packets a keyframe).
            if let Some(n) = scalable.and_then(|s| s.spatial_layers)
                && media.spec.codec == Codec::Vp9
                && let Ok(d) = vp9::parse(&media.payload)
            {
                for l in 0..n {
                    if let Some(w) = d.width_of(l) {
                        self.sources.note_width(media.track, l, w);
                    }
                }
            }
        }
        self.end_batch_unless_at(now);
        let Some(room) = self.rooms.get_mut(&room_id) else {
            return;
        };
        if media.kind == MediaKind::Audio {
            room.note_audio(
                media.track.participant,
                media.ext.audio_level,
                media.ext.voice_activity,
                now,
            );
        }
        if origin {
            let mut last_node = None;
            for &shard in &room.peer_shards {
                if let Some((node, _)) = shard.remote_parts() {
                    // One copy per other node, to its lowest shard hosting
                    // the room, which fans it out there
                    // ([`Engine::fan_out_relayed`]); and a layer crosses
                    // only if someone on that node takes it (its shards'
                    // demand, refreshed every second).
                    if last_node == Some(node) {
                        continue;
                    }
                    last_node = Some(node);
                    if media.layers > 1 {
                        let wanted = room
                            .peer_shards
                            .iter()
                            .filter(|s| s.remote_parts().is_some_and(|(n, _)| n == node))
                            .filter_map(|s| self.demand_remote.get(&(media.track, *s)))
                            .fold(0, |m, d| m | d.mask);
                        if wanted & (1 << media.layer) == 0 {
                            continue;
                        }
                    }
                }
                self.io.counters.cross_shard_out += 1;
                self.io.out.peers.push((
                    shard,
                    PeerMsg::Media {
                        room: room_id,
                        packet: media.to_copy(),
                    },
                ));
            }
        }
        let mut want_keyframe: Option<u8> = None;
        let mut reached = false;
        // Its number in the own egress's history, once kept there.
        let mut kept = None;
        for &sub in &room.local {
            if sub == media.track.participant {
                continue;
            }
            let Some(p) = self.participants.get_mut(&sub) else {
                continue;
            };
            let Participant {
                session,
                subscriber,
                ..
            } = p;
            // Not before its DTLS handshake is done: str0m would queue the
            // packets, without a bound, until it is, then send them as one
            // stale burst. A slot starts at the first keyframe after it.
            if session.poisoned || !session.connected {
                continue;
            }
            let rtx_history = subscriber.rtx_history();
            let Subscriber { slots, egress, .. } = subscriber;
            for slot in slots.iter_mut().filter(|s| s.source == Some(media.track)) {
                let admit = match scalable {
                    Some(svc) => slot.admit_svc(svc, media.keyframe),
                    None => slot.admit(media.layer, media.keyframe),
                };
                match admit {
                    Admit::Forward { switched } => {
                        if switched {
                            self.io.counters.layer_switches += 1;
                        }
                    }
                    Admit::Skip => {
                        // A spatial layer above the slot's: out of its
                        // numbering (one stream, so no holes).
                        if scalable.is_some() {
                            slot.out.rewriter.skip(media.seq);
                            self.io.counters.spatial_skipped += 1;
                        }
                        continue;
                    }
                    Admit::WaitKeyframe(l) => {
                        self.io.counters.dropped_waiting_keyframe += 1;
                        want_keyframe = Some(l);
                        continue;
                    }
                }
                // A VP8 temporal down-switch: frames above the slot's layer
                // are left out of its numbering (no holes, no NACKs).
                if let Some((tid, start)) = media.temporal
                    && !slot.out.temporal.admit(tid, start)
                {
                    slot.out.rewriter.skip(media.seq);
                    if let Some(d) = &media.vp8 {
                        slot.out.pictures.skip(d);
                    }
                    self.io.counters.temporal_skipped += 1;
                    continue;
                }
                let out_pt = match slot.out.pt_map {
                    Some((spec, pt)) if spec == media.spec => Some(pt),
                    _ => {
                        let mapped = subscriber_pt(&session.rtc, slot.mid, &media.spec);
                        slot.out.pt_map = mapped.map(|pt| (media.spec, pt));
                        mapped
                    }
                };
                let Some(out_pt) = out_pt else {
                    self.io.counters.dropped_no_codec += 1;
                    continue;
                };
                let clock = media.spec.clock_rate.get();
                let Some((seq, ts)) =
                    slot.out
                        .rewriter
                        .rewrite(media.seq, media.timestamp, clock, now)
                else {
                    self.io.counters.dropped_stale += 1;
                    continue;
                };
                let patch = media.vp8.as_ref().and_then(|d| slot.out.pictures.patch(d));
                let marker = match scalable {
                    Some(svc) => slot.svc_marker(svc, media.marker),
                    None => media.marker,
                };
                let nackable = media.kind == MediaKind::Video;
                // The shard's own egress, where str0m lets it
                // ([`super::egress`]); str0m's send path otherwise.
                let direct = guarded(&mut self.io, sub, &mut session.poisoned, |io| {
                    egress::send(
                        egress,
                        &mut slot.out.egress,
                        &mut session.rtc,
                        now,
                        egress::Out {
                            mid: slot.mid,
                            pt: out_pt,
                            seq,
                            time: ts,
                            changes: egress::Changes { patch, marker },
                            media,
                            nackable,
                            kept: &mut kept,
                        },
                        &mut self.recent,
                        rtx_history,
                        || io.out.spare_buffer(),
                    )
                });
                match direct {
                    Some(Some(t)) => {
                        self.io.batch.mark(sub, session, Mark::Held(t), now);
                        self.io.counters.forwarded += 1;
                        self.io.counters.forwarded_direct += 1;
                        reached = true;
                        continue;
                    }
                    Some(None) => {}
                    None => continue,
                }
                let fed = session.fed();
                let rtc = &mut session.rtc;
                let written = guarded(&mut self.io, sub, &mut session.poisoned, |io| {
                    // The subscriber's clock to now first: str0m stamps the
                    // send (TWCC send time, pacer debt, RTX cache) with its
                    // own clock, which only inputs move, and the delay-based
                    // estimate reads a stale stamp as queueing. Before its
                    // deadline this moves the clock only (str0m patch 4).
                    // A subscriber written to earlier in this batch is at
                    // `now` already.
                    if !fed {
                        feed_time(io, sub, rtc, now);
                    }
                    let mut api = rtc.direct_api();
                    let Some(tx) = api.stream_tx_by_mid(slot.mid, None) else {
                        return false;
                    };
                    let w = egress::rtp_write(
                        out_pt,
                        SeqNo::from(seq),
                        ts,
                        egress::Body::from(media).marker(marker),
                        patch,
                    );
                    tx.write_rtp(w.nackable(nackable));
                    true
                });
                if written != Some(true) {
                    continue;
                }
                self.io.counters.forwarded += 1;
                reached = true;
                // str0m: drain after a mutation, before the next input. The
                // drain waits for the end of the batch (`drain_pending`), so
                // a frame's packets cost one walk of the subscriber's `Rtc`.
                self.io.batch.mark(sub, session, Mark::Written, now);
            }
        }
        if let (true, Some(rx)) = (reached, media.kernel_rx) {
            self.io.out.forwarded.push((rx, !origin));
        }
        if let Some(l) = want_keyframe {
            self.request_keyframe(
                now,
                LayerKey {
                    track: media.track,
                    layer: l,
                },
            );
        }
    }
}

/// The payload type on a subscriber's slot that carries `spec`.
fn subscriber_pt(
    rtc: &str0m::Rtc,
    mid: str0m::media::Mid,
    spec: &str0m::format::CodecSpec,
) -> Option<str0m::media::Pt> {
    let cfg = rtc.codec_config();
    let media = rtc.media(mid)?;
    let cands: Vec<_> = media
        .remote_pts()
        .iter()
        .filter_map(|pt| cfg.find(|pp| pp.pt() == *pt).map(|pp| (*pt, pp.spec())))
        .collect();
    map_pt(spec, cands.iter().map(|(pt, s)| (*pt, s)))
}

#[cfg(test)]
mod tests {
    //! Forwarding through [`Engine::forward`] with bare `Rtc`s: a subscriber
    //! marked connected, its slot's payload type mapped, so that a packet
    //! goes through admission and the slot's rewriting; with no ICE pair
    //! and no send stream nothing leaves, and the rewriter's next number
    //! shows what forwarding took into the slot's numbering.
    use std::time::{Duration, Instant};

    use str0m::media::{MediaKind, Pt};

    use super::super::PeerMsg;
    use super::super::io::fixture::{
        HERE, ROOM, add, engine, line, participant, room, track, video, vp8,
    };
    use crate::ids::{LayerKey, ShardId, TrackKey};
    use crate::media::MediaPacket;

    const SUB: u64 = 1;
    const PUB: u64 = 2;
    const THERE: ShardId = ShardId(1);
    const CLOCK: u32 = 90_000;

    /// Subscriber 1 here with one video slot showing publisher 2's track
    /// "v" (on shard 1), or `source`.
    fn setup(t0: Instant, source: TrackKey) -> super::Engine {
        let mut e = engine();
        add(&mut e, t0, SUB, &[], &[line("s0", MediaKind::Video)]);
        room(
            &mut e,
            &[
                (SUB, HERE, false, vec![]),
                (PUB, THERE, false, vec![line("v", MediaKind::Video)]),
                (3, THERE, false, vec![line("w", MediaKind::Video)]),
            ],
        );
        let p = participant(&mut e, SUB);
        p.session.connected = true;
        show(&mut p.subscriber.slots[0], source);
        e
    }

    fn show(slot: &mut super::super::slot::Slot, source: TrackKey) {
        slot.set_source(Some(source));
        slot.out.pt_map = Some((vp8(), Pt::from(96)));
    }

    fn slot(e: &mut super::Engine) -> &mut super::super::slot::Slot {
        &mut participant(e, SUB).subscriber.slots[0]
    }

    /// The slot's next outgoing sequence number for the next packet of its
    /// source (`seq`): what forwarding consumed so far.
    fn next_out(e: &mut super::Engine, seq: u64, ts: u32, now: Instant) -> (u64, u32) {
        slot(e)
            .out
            .rewriter
            .rewrite(seq, ts, CLOCK, now)
            .expect("a packet after the forwarded ones is in order")
    }

    fn keyframe_requests(e: &super::Engine) -> Vec<(ShardId, LayerKey)> {
        e.io.out
            .peers
            .iter()
            .filter_map(|(s, m)| match m {
                PeerMsg::KeyframeRequest { key } => Some((*s, *key)),
                _ => None,
            })
            .collect()
    }

    fn forward(e: &mut super::Engine, now: Instant, m: &MediaPacket, origin: bool) {
        e.forward(now, ROOM, m, origin);
    }

    #[test]
    fn a_slot_waits_for_a_keyframe_asks_the_publishers_shard_then_numbers_on() {
        let t0 = Instant::now();
        let v = track(PUB, "v");
        let mut e = setup(t0, v);

        forward(&mut e, t0, &video(v, 100, 9_000, false, t0), false);
        assert_eq!(e.io.counters.dropped_waiting_keyframe, 1);
        assert_eq!(slot(&mut e).layer.current, None);
        assert_eq!(
            keyframe_requests(&e),
            vec![(THERE, LayerKey { track: v, layer: 0 })],
            "the remote publisher's shard is asked for a keyframe"
        );
        // From a peer shard: no copy goes back out.
        assert!(
            e.io.out
                .peers
                .iter()
                .all(|(_, m)| !matches!(m, PeerMsg::Media { .. }))
        );

        let t1 = t0 + Duration::from_millis(33);
        forward(&mut e, t1, &video(v, 101, 12_000, true, t1), false);
        forward(&mut e, t1, &video(v, 102, 12_000, false, t1), false);
        assert_eq!(slot(&mut e).layer.current, Some(0));
        assert_eq!(e.io.counters.dropped_waiting_keyframe, 1);
        assert_eq!(
            e.io.counters.layer_switches, 0,
            "a first layer is no switch"
        );
        // The keyframe took the slot's first number, the packet after it the
        // next; the waiting packet took none.
        // The first packet keeps the source's timestamp (offset 0).
        assert_eq!(next_out(&mut e, 103, 15_000, t1), (1002, 15_000));
    }

    #[test]
    fn a_packet_older_than_the_slots_first_is_dropped_as_stale() {
        let t0 = Instant::now();
        let v = track(PUB, "v");
        let mut e = setup(t0, v);
        forward(&mut e, t0, &video(v, 500, 9_000, true, t0), false);
        forward(&mut e, t0, &video(v, 499, 9_000, false, t0), false);
        assert_eq!(e.io.counters.dropped_stale, 1);
        assert_eq!(next_out(&mut e, 501, 9_000, t0).0, 1001);
    }

    #[test]
    fn a_source_switch_continues_the_numbering_and_the_clock() {
        let t0 = Instant::now();
        let (a, b) = (track(PUB, "v"), track(3, "w"));
        let mut e = setup(t0, a);
        for (i, seq) in (500..503).enumerate() {
            let at = t0 + Duration::from_millis(33 * i as u64);
            forward(
                &mut e,
                at,
                &video(a, seq, 9_000 + 3_000 * i as u32, i == 0, at),
                false,
            );
        }
        // A's last: out seq 1002, its timestamp as sent (the first packet
        // keeps the source's: offset 0), 66 ms after the first.
        show(slot(&mut e), b);
        let t1 = t0 + Duration::from_millis(166);
        // A's late packet no longer reaches the slot; B's delta waits.
        forward(&mut e, t1, &video(a, 503, 18_000, false, t1), false);
        forward(&mut e, t1, &video(b, 7_000, 1_000_000, false, t1), false);
        assert_eq!(e.io.counters.dropped_waiting_keyframe, 1);
        forward(&mut e, t1, &video(b, 7_001, 1_000_000, true, t1), false);
        // B continues at A's last + 1, its timestamp at A's last plus the
        // 100 ms since (9,000 ticks at 90 kHz).
        let (seq, ts) = next_out(&mut e, 7_002, 1_003_000, t1);
        assert_eq!(seq, 1004);
        assert_eq!(ts, 15_000 + 9_000 + 3_000);
    }

    #[test]
    fn a_layer_switch_waits_for_the_targets_keyframe_and_is_counted() {
        let t0 = Instant::now();
        let v = track(PUB, "v");
        let mut e = setup(t0, v);
        let at = |seq: u64, layer: u8, keyframe: bool| {
            let mut m = video(v, seq, 9_000, keyframe, t0);
            m.layer = layer;
            m.layers = 2;
            m
        };
        forward(&mut e, t0, &at(10, 0, true), false);
        assert_eq!(slot(&mut e).layer.current, Some(0));
        slot(&mut e).layer.target = Some(1);
        e.io.out.peers.clear();
        // The current layer keeps flowing until the target's keyframe.
        forward(&mut e, t0, &at(20, 1, false), false);
        forward(&mut e, t0, &at(11, 0, false), false);
        assert_eq!(slot(&mut e).layer.current, Some(0));
        assert_eq!(e.io.counters.dropped_waiting_keyframe, 1);
        assert_eq!(
            keyframe_requests(&e),
            vec![(THERE, LayerKey { track: v, layer: 1 })]
        );
        forward(&mut e, t0, &at(21, 1, true), false);
        assert_eq!(slot(&mut e).layer.current, Some(1));
        assert_eq!(slot(&mut e).layer.switches, 1);
        assert_eq!(e.io.counters.layer_switches, 1);
        // The old layer is left out now.
        forward(&mut e, t0, &at(12, 0, false), false);
        // Layer 0: 1000, 1001; layer 1's keyframe: 1002; next: 1003.
        assert_eq!(next_out(&mut e, 22, 9_000, t0).0, 1003);
    }

    #[test]
    fn frames_a_temporal_down_switch_leaves_out_leave_no_hole() {
        let t0 = Instant::now();
        let v = track(PUB, "v");
        let mut e = setup(t0, v);
        let tl = |seq: u64, tid: u8, keyframe: bool| {
            let mut m = video(v, seq, 9_000, keyframe, t0);
            m.temporal = Some((tid, true));
            m
        };
        forward(&mut e, t0, &tl(100, 0, true), false);
        slot(&mut e).out.temporal.want = 0;
        forward(&mut e, t0, &tl(101, 1, false), false); // still forwarded: not at a base frame yet
        forward(&mut e, t0, &tl(102, 0, false), false); // the switch takes effect
        forward(&mut e, t0, &tl(103, 1, false), false); // left out
        forward(&mut e, t0, &tl(104, 0, false), false);
        assert_eq!(e.io.counters.temporal_skipped, 1);
        // 100..102 -> 1000..1002, 104 -> 1003: the next is 1004, no hole.
        assert_eq!(next_out(&mut e, 105, 9_000, t0).0, 1004);
    }

    #[test]
    fn an_svc_slot_climbs_at_switch_points_drops_at_once_and_numbers_on() {
        use crate::svc::SvcPacket;
        let t0 = Instant::now();
        let v = track(PUB, "v");
        let mut e = setup(t0, v);
        // One packet per layer frame, three spatial layers per picture.
        let layer = |seq: u64, spatial: u8, key: bool, switch_up: bool| {
            let mut m = video(v, seq, 9_000, key && spatial == 0, t0);
            m.marker = spatial == 2;
            m.svc = Some(SvcPacket {
                spatial,
                temporal: 0,
                frame_start: true,
                frame_end: true,
                keyframe: key && spatial == 0,
                switch_up: key || switch_up,
                spatial_layers: key.then_some(3),
            });
            m.temporal = Some((0, spatial == 0));
            m
        };
        slot(&mut e).layer.target = Some(2);
        // A keyframe picture: the slot starts and climbs to 2 inside it.
        for (i, s) in [0u8, 1, 2].into_iter().enumerate() {
            forward(&mut e, t0, &layer(100 + i as u64, s, true, false), false);
        }
        assert_eq!(slot(&mut e).layer.current, Some(2));
        assert_eq!(e.io.counters.layer_switches, 2);
        // Down to 0: at the next picture's start; its upper layers are left
        // out of the numbering.
        slot(&mut e).layer.target = Some(0);
        for (i, s) in [0u8, 1, 2].into_iter().enumerate() {
            forward(&mut e, t0, &layer(103 + i as u64, s, false, false), false);
        }
        assert_eq!(slot(&mut e).layer.current, Some(0));
        assert_eq!(e.io.counters.spatial_skipped, 2);
        // Up again: not on a frame that references its own layer's past,
        // nor on a switch point outside a keyframe picture...
        slot(&mut e).layer.target = Some(1);
        for (i, s) in [0u8, 1, 2].into_iter().enumerate() {
            forward(&mut e, t0, &layer(106 + i as u64, s, false, i == 1), false);
        }
        assert_eq!(slot(&mut e).layer.current, Some(0));
        // ...but in a keyframe picture.
        for (i, s) in [0u8, 1, 2].into_iter().enumerate() {
            forward(&mut e, t0, &layer(109 + i as u64, s, true, false), false);
        }
        assert_eq!(slot(&mut e).layer.current, Some(1));
        assert_eq!(e.io.counters.spatial_skipped, 2 + 2 + 1);
        assert_eq!(e.io.counters.dropped_waiting_keyframe, 0);
        // Forwarded: 100..=103, 106, 109, 110 -> 1000..=1006; next 1007.
        assert_eq!(next_out(&mut e, 112, 9_000, t0).0, 1007);
    }

    #[test]
    fn a_simulcast_of_scalable_encodings_switches_encodings_not_spatial_layers() {
        use crate::svc::SvcPacket;
        let t0 = Instant::now();
        let v = track(PUB, "v");
        let mut e = setup(t0, v);
        // VP9 simulcast: two encodings (rids), one spatial layer each, with
        // temporal layers; the slot takes encoding 1 once its keyframe comes.
        let at = |seq: u64, layer: u8, keyframe: bool, tid: u8| {
            let mut m = video(v, seq, 9_000, keyframe, t0);
            m.layer = layer;
            m.layers = 2;
            m.svc = Some(SvcPacket {
                temporal: tid,
                frame_start: true,
                frame_end: true,
                keyframe,
                switch_up: keyframe,
                ..SvcPacket::default()
            });
            m.temporal = Some((tid, true));
            m
        };
        forward(&mut e, t0, &at(10, 0, true, 0), false);
        assert_eq!(slot(&mut e).layer.current, Some(0));
        slot(&mut e).layer.target = Some(1);
        forward(&mut e, t0, &at(20, 1, false, 0), false);
        assert_eq!(
            slot(&mut e).layer.current,
            Some(0),
            "waits for encoding 1's keyframe"
        );
        forward(&mut e, t0, &at(21, 1, true, 0), false);
        assert_eq!(slot(&mut e).layer.current, Some(1));
        assert_eq!(
            e.io.counters.spatial_skipped, 0,
            "no spatial thinning of an encoding"
        );
        // Its temporal layers are read from the descriptor.
        slot(&mut e).out.temporal.want = 0;
        forward(&mut e, t0, &at(22, 1, false, 0), false);
        forward(&mut e, t0, &at(23, 1, false, 2), false);
        assert_eq!(e.io.counters.temporal_skipped, 1);
    }

    #[test]
    fn a_packet_received_here_is_copied_once_to_each_peer_shard() {
        let t0 = Instant::now();
        let mut e = engine();
        // The publisher here, subscribers on shards 1 and 2 (a viewer).
        add(&mut e, t0, PUB, &[line("v", MediaKind::Video)], &[]);
        room(
            &mut e,
            &[
                (PUB, HERE, false, vec![line("v", MediaKind::Video)]),
                (4, ShardId(1), false, vec![]),
                (5, ShardId(2), true, vec![]),
                (6, ShardId(1), false, vec![]),
            ],
        );
        let m = video(track(PUB, "v"), 7, 9_000, true, t0);
        forward(&mut e, t0, &m, true);
        let mut copies: Vec<ShardId> =
            e.io.out
                .peers
                .iter()
                .map(|(s, msg)| match msg {
                    PeerMsg::Media { room, packet } => {
                        assert_eq!(*room, ROOM);
                        assert_eq!((packet.seq, packet.timestamp), (7, 9_000));
                        assert_eq!(&packet.payload[..], &m.payload[..]);
                        *s
                    }
                    other => panic!("only media goes out: {other:?}"),
                })
                .collect();
        copies.sort();
        assert_eq!(copies, vec![ShardId(1), ShardId(2)]);
        assert_eq!(e.io.counters.cross_shard_out, 2);

        // A copy from a peer shard is forwarded here only.
        e.io.out.peers.clear();
        forward(&mut e, t0, &m, false);
        assert!(e.io.out.peers.is_empty());
        assert_eq!(e.io.counters.cross_shard_out, 2);
    }

    #[test]
    fn a_subscriber_before_its_handshake_gets_nothing() {
        let t0 = Instant::now();
        let v = track(PUB, "v");
        let mut e = setup(t0, v);
        participant(&mut e, SUB).session.connected = false;
        forward(&mut e, t0, &video(v, 100, 9_000, true, t0), false);
        forward(&mut e, t0, &video(v, 101, 9_000, false, t0), false);
        assert_eq!(slot(&mut e).layer.current, None, "not admitted");
        assert_eq!(e.io.counters.dropped_waiting_keyframe, 0);
        assert!(keyframe_requests(&e).is_empty());
        // Nothing was numbered: its first packet will be the slot's first.
        assert_eq!(next_out(&mut e, 102, 9_000, t0).0, 1000);
    }
}
