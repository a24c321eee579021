//! A [`PeerMsg`] as bytes: what one node's shard sends another node's shard
//! inside a relay datagram (the envelope around it, which authenticates and
//! encrypts it, is `corelay_cluster::relay`'s).
//!
//! A shard of another node is a peer like a shard of this one
//! ([`ShardId::remote`]); what crosses the mesh as a value crosses the
//! relay as these bytes. Media keeps everything a subscriber leg needs to
//! re-emit the packet (the same fields as the mesh's [`MediaCopy`]); the
//! VP8 descriptor is parsed again from the payload on arrival, as the
//! publisher's shard parsed it. What only means something on one node is
//! not sent: receive times are the arriving node's, and the sender of a
//! [`PeerMsg::LayerDemand`] is the shard the datagram came from, never what
//! the bytes claim.
//!
//! ```text
//! media:    1 | room u64 | publisher u64 | mid | kind u8 | codec spec | seq u64 | timestamp u32
//!           | flags u8 | layer u8 | layers u8 | tid u8 | [svc 3 bytes] | [dd len u8 | dd …]
//!           | extensions | payload …
//! keyframe: 2 | publisher u64 | mid | layer u8
//! demand:   3 | publisher u64 | mid | mask u32
//! message:  4 | room u64 | sender u64 | count u16 (0xffff: everyone) | ids u64 … | text …
//! ```
//!
//! Integers are big-endian; a mid is its length (u8) and its characters.
//! Decoding trusts nothing: a truncated, oversized or unknown message is an
//! error, never a panic (the envelope already proved the sender is a node
//! of the cluster; this is defence in depth against a node of another
//! version). Must not: know sockets, keys or nodes.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unreachable,
    clippy::todo
)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use str0m::format::{Codec, CodecSpec, FormatParams};
use str0m::media::{Frequency, MediaKind, Mid};
use str0m::rtp::{AbsCaptureTime, VideoOrientation, Vp8Descriptor};

use crate::engine::PeerMsg;
use crate::ids::{LayerKey, ParticipantId, RoomId, ShardId, TrackKey};
use crate::media::{E2eExt, MediaCopy};
use crate::svc::SvcPacket;
use crate::svc::dd::DdRaw;

const MEDIA: u8 = 1;
const KEYFRAME: u8 = 2;
const DEMAND: u8 = 3;
const MESSAGE: u8 = 4;

/// A message's recipients: this many at most (a room's members).
const MAX_RECIPIENTS: usize = 4096;
const EVERYONE: u16 = u16::MAX;

/// Why bytes are not a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// It ends before the message does.
    Truncated,
    /// An unknown message type, codec or field value.
    Unknown,
}

/// Appends `msg` as bytes to `out`. `None` for what never crosses a node
/// (a datagram handed between the shards of one node, a claim; a codec the
/// wire does not name).
pub fn encode(msg: &PeerMsg, out: &mut Vec<u8>) -> Option<()> {
    match msg {
        PeerMsg::Media { room, packet } => {
            out.push(MEDIA);
            out.extend_from_slice(&room.0.to_be_bytes());
            track(out, packet.track);
            out.push(match packet.kind {
                MediaKind::Audio => 0,
                MediaKind::Video => 1,
            });
            spec(out, &packet.spec)?;
            out.extend_from_slice(&packet.seq.to_be_bytes());
            out.extend_from_slice(&packet.timestamp.to_be_bytes());
            let mut flags = 0u8;
            if packet.marker {
                flags |= 1;
            }
            if packet.keyframe {
                flags |= 2;
            }
            if let Some((_, start)) = packet.temporal {
                flags |= 4;
                if start {
                    flags |= 8;
                }
            }
            if packet.vp8.is_some() {
                flags |= 16;
            }
            if packet.svc.is_some() {
                flags |= 32;
            }
            if packet.dd.is_some() {
                flags |= 64;
            }
            out.push(flags);
            out.push(packet.layer);
            out.push(packet.layers);
            out.push(packet.temporal.map_or(0, |(tid, _)| tid));
            if let Some(s) = &packet.svc {
                out.extend_from_slice(&svc_bytes(s));
            }
            if let Some(d) = &packet.dd {
                let d = d.as_bytes();
                out.push(u8::try_from(d.len()).ok()?);
                out.extend_from_slice(d);
            }
            ext(out, &packet.ext);
            out.extend_from_slice(&packet.payload);
        }
        PeerMsg::KeyframeRequest { key } => {
            out.push(KEYFRAME);
            track(out, key.track);
            out.push(key.layer);
        }
        PeerMsg::LayerDemand { track: t, mask, .. } => {
            out.push(DEMAND);
            track(out, *t);
            out.extend_from_slice(&mask.to_be_bytes());
        }
        PeerMsg::Message {
            room,
            from,
            to,
            text,
        } => {
            out.push(MESSAGE);
            out.extend_from_slice(&room.0.to_be_bytes());
            out.extend_from_slice(&from.0.to_be_bytes());
            match to {
                None => out.extend_from_slice(&EVERYONE.to_be_bytes()),
                Some(ids) => {
                    let n = u16::try_from(ids.len())
                        .ok()
                        .filter(|n| usize::from(*n) <= MAX_RECIPIENTS)?;
                    out.extend_from_slice(&n.to_be_bytes());
                    for id in ids.iter() {
                        out.extend_from_slice(&id.0.to_be_bytes());
                    }
                }
            }
            out.extend_from_slice(text.as_bytes());
        }
        // Between the shards of one node only (a shared port).
        PeerMsg::Datagram { .. } | PeerMsg::Claim { .. } => return None,
    }
    Some(())
}

/// The message `bytes` hold, as it arrives from shard `from` (another
/// node's) at `now`; `kernel_rx` is the relay datagram's kernel receive
/// time.
pub fn decode(
    bytes: &[u8],
    from: ShardId,
    now: Instant,
    kernel_rx: Option<Duration>,
) -> Result<PeerMsg, WireError> {
    let mut r = Reader(bytes);
    match r.u8()? {
        MEDIA => {
            let room = RoomId(r.u64()?);
            let track = r.track()?;
            let kind = match r.u8()? {
                0 => MediaKind::Audio,
                1 => MediaKind::Video,
                _ => return Err(WireError::Unknown),
            };
            let spec = r.spec()?;
            let seq = r.u64()?;
            let timestamp = r.u32()?;
            let flags = r.u8()?;
            let layer = r.u8()?;
            let layers = r.u8()?;
            let tid = r.u8()?;
            let svc = if flags & 32 != 0 {
                Some(svc_from(r.take()?))
            } else {
                None
            };
            let dd = if flags & 64 != 0 {
                let n = usize::from(r.u8()?);
                let bytes = r.0.get(..n).ok_or(WireError::Truncated)?;
                r.0 = r.0.get(n..).unwrap_or_default();
                Some(Arc::new(DdRaw::new(bytes).ok_or(WireError::Truncated)?))
            } else {
                None
            };
            let ext = r.ext()?;
            let payload: Box<[u8]> = r.0.into();
            let vp8 = if flags & 16 != 0 {
                Some(Vp8Descriptor::parse(&payload).map_err(|_| WireError::Unknown)?)
            } else {
                None
            };
            Ok(PeerMsg::Media {
                room,
                packet: MediaCopy {
                    track,
                    kind,
                    spec,
                    seq,
                    timestamp,
                    marker: flags & 1 != 0,
                    keyframe: flags & 2 != 0,
                    layer,
                    layers,
                    temporal: (flags & 4 != 0).then_some((tid, flags & 8 != 0)),
                    vp8,
                    svc,
                    dd,
                    ext,
                    payload,
                    received: now,
                    kernel_rx,
                },
            })
        }
        KEYFRAME => {
            let track = r.track()?;
            let layer = r.u8()?;
            r.end()?;
            Ok(PeerMsg::KeyframeRequest {
                key: LayerKey { track, layer },
            })
        }
        DEMAND => {
            let track = r.track()?;
            let mask = r.u32()?;
            r.end()?;
            Ok(PeerMsg::LayerDemand { track, from, mask })
        }
        MESSAGE => {
            let room = RoomId(r.u64()?);
            let sender = ParticipantId(r.u64()?);
            let n = r.u16()?;
            let to = if n == EVERYONE {
                None
            } else {
                let n = usize::from(n);
                if n > MAX_RECIPIENTS {
                    return Err(WireError::Unknown);
                }
                let mut ids = Vec::with_capacity(n.min(r.0.len() / 8));
                for _ in 0..n {
                    ids.push(ParticipantId(r.u64()?));
                }
                Some(Arc::from(ids))
            };
            let text = std::str::from_utf8(r.0).map_err(|_| WireError::Unknown)?;
            Ok(PeerMsg::Message {
                room,
                from: sender,
                to,
                text: Arc::from(text),
            })
        }
        _ => Err(WireError::Unknown),
    }
}

fn track(out: &mut Vec<u8>, t: TrackKey) {
    out.extend_from_slice(&t.participant.0.to_be_bytes());
    let mid: &str = &t.mid;
    let bytes = mid.as_bytes();
    let n = bytes.len().min(16);
    out.push(n as u8);
    out.extend_from_slice(bytes.get(..n).unwrap_or_default());
}

/// The codecs a room can have (and their side streams), numbered for the
/// wire.
const CODECS: [Codec; 9] = [
    Codec::Opus,
    Codec::PCMU,
    Codec::PCMA,
    Codec::G722,
    Codec::H264,
    Codec::Vp8,
    Codec::Vp9,
    Codec::Av1,
    Codec::H265,
];

fn spec(out: &mut Vec<u8>, s: &CodecSpec) -> Option<()> {
    let codec = CODECS.iter().position(|c| *c == s.codec)?;
    out.push(codec as u8);
    out.extend_from_slice(&s.clock_rate.get().to_be_bytes());
    out.push(s.channels.unwrap_or(0));
    let f = &s.format;
    // A bit per field present, then each present field in this order.
    let bools = [
        f.stereo,
        f.sprop_stereo,
        f.use_inband_fec,
        f.use_dtx,
        f.level_asymmetry_allowed,
    ];
    let bytes = [f.min_p_time, f.packetization_mode, f.profile, f.level_idx];
    let words = [f.profile_level_id, f.profile_id];
    let mut present = 0u16;
    let mut values = 0u8;
    for (i, b) in bools.iter().enumerate() {
        if let Some(v) = b {
            present |= 1 << i;
            values |= u8::from(*v) << i;
        }
    }
    for (i, b) in bytes.iter().enumerate() {
        if b.is_some() {
            present |= 1 << (5 + i);
        }
    }
    for (i, w) in words.iter().enumerate() {
        if w.is_some() {
            present |= 1 << (9 + i);
        }
    }
    out.extend_from_slice(&present.to_be_bytes());
    out.push(values);
    for b in bytes.into_iter().flatten() {
        out.push(b);
    }
    for w in words.into_iter().flatten() {
        out.extend_from_slice(&w.to_be_bytes());
    }
    Some(())
}

/// An [`SvcPacket`] in 3 bytes: spatial and temporal ids (a nibble each),
/// its flags, and the announced spatial layer count (0: none announced).
fn svc_bytes(s: &SvcPacket) -> [u8; 3] {
    let flags = u8::from(s.frame_start)
        | u8::from(s.frame_end) << 1
        | u8::from(s.keyframe) << 2
        | u8::from(s.switch_up) << 3;
    [
        (s.spatial & 0x0f) | (s.temporal & 0x0f) << 4,
        flags,
        s.spatial_layers.unwrap_or(0),
    ]
}

fn svc_from([ids, flags, n]: [u8; 3]) -> SvcPacket {
    SvcPacket {
        spatial: ids & 0x0f,
        temporal: ids >> 4,
        frame_start: flags & 1 != 0,
        frame_end: flags & 2 != 0,
        keyframe: flags & 4 != 0,
        switch_up: flags & 8 != 0,
        spatial_layers: (n > 0).then_some(n),
    }
}

fn ext(out: &mut Vec<u8>, e: &E2eExt) {
    let mut flags = 0u8;
    if e.audio_level.is_some() {
        flags |= 1;
    }
    if e.voice_activity == Some(true) {
        flags |= 2;
    }
    if e.voice_activity.is_some() {
        flags |= 4;
    }
    if e.abs_capture_time.is_some() {
        flags |= 8;
    }
    if e.abs_capture_time.is_some_and(|a| a.clock_offset.is_some()) {
        flags |= 16;
    }
    if e.video_orientation.is_some() {
        flags |= 32;
    }
    if e.video_content_type.is_some() {
        flags |= 64;
    }
    out.push(flags);
    if let Some(l) = e.audio_level {
        out.extend_from_slice(&l.to_be_bytes());
    }
    if let Some(a) = e.abs_capture_time {
        let nanos = a
            .capture_time
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        out.extend_from_slice(&nanos.to_be_bytes());
        if let Some(o) = a.clock_offset {
            out.extend_from_slice(&o.to_be_bytes());
        }
    }
    if let Some(o) = e.video_orientation {
        out.push(o as u8);
    }
    if let Some(t) = e.video_content_type {
        out.push(t);
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(WireError::Truncated)?;
        self.0 = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        self.take::<1>().map(|[b]| b)
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        self.take().map(u16::from_be_bytes)
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        self.take().map(u32::from_be_bytes)
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        self.take().map(u64::from_be_bytes)
    }
    fn end(&self) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError::Unknown)
        }
    }

    fn track(&mut self) -> Result<TrackKey, WireError> {
        let participant = ParticipantId(self.u64()?);
        let n = usize::from(self.u8()?);
        if n == 0 || n > 16 {
            return Err(WireError::Unknown);
        }
        let (mid, rest) = self.0.split_at_checked(n).ok_or(WireError::Truncated)?;
        self.0 = rest;
        let mid = std::str::from_utf8(mid).map_err(|_| WireError::Unknown)?;
        Ok(TrackKey {
            participant,
            mid: Mid::from(mid),
        })
    }

    fn spec(&mut self) -> Result<CodecSpec, WireError> {
        let codec = *CODECS
            .get(usize::from(self.u8()?))
            .ok_or(WireError::Unknown)?;
        let clock_rate = Frequency::new(self.u32()?).ok_or(WireError::Unknown)?;
        let channels = Some(self.u8()?).filter(|c| *c != 0);
        let present = self.u16()?;
        let values = self.u8()?;
        let bool_at = |i: u16| (present & (1 << i) != 0).then_some(values & (1 << i) != 0);
        let byte_at = |r: &mut Self, i: u16| -> Result<Option<u8>, WireError> {
            if present & (1 << i) != 0 {
                r.u8().map(Some)
            } else {
                Ok(None)
            }
        };
        let min_p_time = byte_at(self, 5)?;
        let packetization_mode = byte_at(self, 6)?;
        let profile = byte_at(self, 7)?;
        let level_idx = byte_at(self, 8)?;
        let profile_level_id = if present & (1 << 9) != 0 {
            Some(self.u32()?)
        } else {
            None
        };
        let profile_id = if present & (1 << 10) != 0 {
            Some(self.u32()?)
        } else {
            None
        };
        Ok(CodecSpec {
            codec,
            clock_rate,
            channels,
            format: FormatParams {
                min_p_time,
                stereo: bool_at(0),
                sprop_stereo: bool_at(1),
                use_inband_fec: bool_at(2),
                use_dtx: bool_at(3),
                level_asymmetry_allowed: bool_at(4),
                packetization_mode,
                profile_level_id,
                profile_id,
                profile,
                level_idx,
                ..FormatParams::default()
            },
        })
    }

    fn ext(&mut self) -> Result<E2eExt, WireError> {
        let flags = self.u8()?;
        let audio_level = if flags & 1 != 0 {
            Some(i8::from_be_bytes(self.take()?))
        } else {
            None
        };
        let voice_activity = (flags & 4 != 0).then_some(flags & 2 != 0);
        let abs_capture_time = if flags & 8 != 0 {
            let nanos = self.u64()?;
            let clock_offset = if flags & 16 != 0 {
                Some(i64::from_be_bytes(self.take()?))
            } else {
                None
            };
            Some(AbsCaptureTime {
                capture_time: SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos),
                clock_offset,
            })
        } else {
            None
        };
        let video_orientation = if flags & 32 != 0 {
            Some(match self.u8()? {
                0 => VideoOrientation::Deg0,
                1 => VideoOrientation::Deg270,
                2 => VideoOrientation::Deg180,
                3 => VideoOrientation::Deg90,
                _ => return Err(WireError::Unknown),
            })
        } else {
            None
        };
        let video_content_type = if flags & 64 != 0 {
            Some(self.u8()?)
        } else {
            None
        };
        Ok(E2eExt {
            audio_level,
            voice_activity,
            abs_capture_time,
            video_orientation,
            video_content_type,
        })
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable
)]
mod tests {
    use super::*;

    fn media(spec: CodecSpec, payload: &[u8]) -> PeerMsg {
        PeerMsg::Media {
            room: RoomId(0xdead_beef_0000_0001),
            packet: MediaCopy {
                track: TrackKey {
                    participant: ParticipantId(42),
                    mid: Mid::from("1"),
                },
                kind: MediaKind::Video,
                spec,
                seq: 70_000,
                timestamp: 90_000,
                marker: true,
                keyframe: true,
                layer: 2,
                layers: 3,
                temporal: Some((1, true)),
                vp8: Vp8Descriptor::parse(payload).ok(),
                svc: None,
                dd: None,
                ext: E2eExt {
                    audio_level: Some(-30),
                    voice_activity: Some(false),
                    abs_capture_time: Some(AbsCaptureTime {
                        capture_time: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
                        clock_offset: Some(-5),
                    }),
                    video_orientation: Some(VideoOrientation::Deg90),
                    video_content_type: Some(1),
                },
                payload: payload.into(),
                received: Instant::now(),
                kernel_rx: None,
            },
        }
    }

    fn vp8_spec() -> CodecSpec {
        CodecSpec {
            codec: Codec::Vp8,
            clock_rate: Frequency::NINETY_KHZ,
            channels: None,
            format: FormatParams::default(),
        }
    }

    fn h264_spec() -> CodecSpec {
        CodecSpec {
            codec: Codec::H264,
            clock_rate: Frequency::NINETY_KHZ,
            channels: None,
            format: FormatParams {
                level_asymmetry_allowed: Some(true),
                packetization_mode: Some(1),
                profile_level_id: Some(0x42e01f),
                ..FormatParams::default()
            },
        }
    }

    fn round_trip(msg: &PeerMsg) -> PeerMsg {
        let mut bytes = Vec::new();
        encode(msg, &mut bytes).unwrap();
        decode(&bytes, ShardId::remote(1, 2).unwrap(), Instant::now(), None).unwrap()
    }

    #[test]
    fn media_crosses_whole() {
        // A VP8 payload with a descriptor (picture id 0x1234, TL0PICIDX).
        let payload = [0x90, 0xe0, 0x92, 0x34, 0x55, 0xa7, 9, 9, 9];
        for spec in [vp8_spec(), h264_spec()] {
            let sent = media(spec, &payload);
            let PeerMsg::Media { room, packet: got } = round_trip(&sent) else {
                panic!("not media");
            };
            let PeerMsg::Media {
                room: r0,
                packet: p,
            } = &sent
            else {
                unreachable!()
            };
            assert_eq!(room, *r0);
            assert_eq!(got.track, p.track);
            assert_eq!(got.spec, p.spec);
            assert_eq!(
                (got.seq, got.timestamp, got.marker, got.keyframe),
                (p.seq, p.timestamp, p.marker, p.keyframe)
            );
            assert_eq!(
                (got.layer, got.layers, got.temporal),
                (2, 3, Some((1, true)))
            );
            assert_eq!(got.ext, p.ext);
            assert_eq!(&*got.payload, &payload[..]);
            assert_eq!(got.vp8.is_some(), p.vp8.is_some());
        }
    }

    #[test]
    fn svc_layers_and_the_dependency_descriptor_cross_whole() {
        let PeerMsg::Media { room, mut packet } = media(vp8_spec(), &[1, 2, 3]) else {
            unreachable!()
        };
        packet.vp8 = None;
        packet.svc = Some(SvcPacket {
            spatial: 2,
            temporal: 1,
            frame_start: true,
            frame_end: false,
            keyframe: false,
            switch_up: true,
            spatial_layers: Some(3),
        });
        packet.dd = Some(Arc::new(DdRaw::new(&[0x80, 0x01, 0x02, 0xff]).unwrap()));
        let sent = PeerMsg::Media { room, packet };
        let PeerMsg::Media { packet: got, .. } = round_trip(&sent) else {
            panic!("not media");
        };
        let PeerMsg::Media { packet: p, .. } = &sent else {
            unreachable!()
        };
        assert_eq!((got.svc, &got.dd), (p.svc, &p.dd));
        assert_eq!(&*got.payload, &[1, 2, 3]);
        // A descriptor longer than what follows is refused.
        let mut bytes = Vec::new();
        encode(&sent, &mut bytes).unwrap();
        let at = bytes
            .windows(4)
            .position(|w| w == [4, 0x80, 0x01, 0x02])
            .unwrap();
        bytes[at] = 250;
        bytes.truncate(at + 10);
        assert!(decode(&bytes, ShardId::remote(1, 2).unwrap(), Instant::now(), None).is_err());
    }

    #[test]
    fn control_crosses_and_the_sender_is_the_datagram_s() {
        let track = TrackKey {
            participant: ParticipantId(7),
            mid: Mid::from("a0"),
        };
        let PeerMsg::LayerDemand {
            track: t,
            from,
            mask,
        } = round_trip(&PeerMsg::LayerDemand {
            track,
            from: ShardId(0),
            mask: 0b101,
        })
        else {
            panic!("not a demand");
        };
        assert_eq!(
            (t, from, mask),
            (track, ShardId::remote(1, 2).unwrap(), 0b101)
        );
        let key = LayerKey { track, layer: 1 };
        assert!(matches!(
            round_trip(&PeerMsg::KeyframeRequest { key }),
            PeerMsg::KeyframeRequest { key: k } if k == key
        ));
        for to in [
            None,
            Some(Arc::from(vec![ParticipantId(1), ParticipantId(2)])),
        ] {
            let sent = PeerMsg::Message {
                room: RoomId(3),
                from: ParticipantId(9),
                to: to.clone(),
                text: Arc::from("{\"type\":\"message\"}"),
            };
            let PeerMsg::Message {
                room,
                from,
                to: got,
                text,
            } = round_trip(&sent)
            else {
                panic!("not a message");
            };
            assert_eq!(
                (room, from, &*text),
                (RoomId(3), ParticipantId(9), "{\"type\":\"message\"}")
            );
            assert_eq!(got.as_deref(), to.as_deref());
        }
    }

    #[test]
    fn hostile_bytes_are_errors_never_panics() {
        let payload = [0x90, 0xe0, 0x92, 0x34, 0x55, 0xa7, 9];
        let mut bytes = Vec::new();
        encode(&media(h264_spec(), &payload), &mut bytes).unwrap();
        let from = ShardId::remote(0, 0).unwrap();
        let now = Instant::now();
        // Every truncation of a media message up to its payload fails.
        let header = bytes.len() - payload.len();
        for n in 0..header {
            assert!(decode(&bytes[..n], from, now, None).is_err(), "{n} bytes");
        }
        // Random mutations never panic.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            let mut b = bytes.clone();
            for _ in 0..3 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let i = (seed as usize) % b.len();
                b[i] = (seed >> 32) as u8;
            }
            let _ = decode(&b, from, now, None);
        }
        assert_eq!(
            decode(&[9], from, now, None).unwrap_err(),
            WireError::Unknown
        );
        // A message naming more recipients than it carries.
        let mut m = vec![MESSAGE];
        m.extend_from_slice(&[0; 16]);
        m.extend_from_slice(&100u16.to_be_bytes());
        assert_eq!(
            decode(&m, from, now, None).unwrap_err(),
            WireError::Truncated
        );
        // A mid that is not text.
        let mut k = vec![KEYFRAME];
        k.extend_from_slice(&[0; 8]);
        k.extend_from_slice(&[2, 0xff, 0xfe, 0]);
        assert!(decode(&k, from, now, None).is_err());
    }
}
