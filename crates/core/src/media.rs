//! The SFU's view of one media packet between ingress and egress.
//!
//! Built once from str0m's `RtpPacket` on the publisher's shard; forwarded to
//! local subscribers by reference and to a peer shard as a copy (one hop).
//! Only the header extensions that mean something end to end are kept: the
//! transport ones (TWCC, abs-send-time, mid/rid) belong to each leg.

use std::sync::Arc;
use std::time::{Duration, Instant};

use str0m::format::CodecSpec;
use str0m::media::MediaKind;
use str0m::rtp::{AbsCaptureTime, ExtensionValues, VideoOrientation, Vp8Descriptor};

use crate::ids::TrackKey;
use crate::svc::SvcPacket;
use crate::svc::dd::DdRaw;

/// End-to-end header extension values, copied field by field (all `Copy`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct E2eExt {
    pub audio_level: Option<i8>,
    pub voice_activity: Option<bool>,
    pub abs_capture_time: Option<AbsCaptureTime>,
    pub video_orientation: Option<VideoOrientation>,
    pub video_content_type: Option<u8>,
}

impl E2eExt {
    pub fn from_ext(e: &ExtensionValues) -> Self {
        E2eExt {
            audio_level: e.audio_level,
            voice_activity: e.voice_activity,
            abs_capture_time: e.abs_capture_time,
            video_orientation: e.video_orientation,
            video_content_type: e.video_content_type,
        }
    }

    pub fn to_ext(self) -> ExtensionValues {
        ExtensionValues {
            audio_level: self.audio_level,
            voice_activity: self.voice_activity,
            abs_capture_time: self.abs_capture_time,
            video_orientation: self.video_orientation,
            video_content_type: self.video_content_type,
            ..Default::default()
        }
    }
}

/// Everything a subscriber leg needs to re-emit a packet. `P` is how the
/// payload is held: shared within a shard ([`MediaPacket`]), owned when it
/// crosses to a peer shard ([`MediaCopy`]).
#[derive(Clone, Debug)]
pub struct Media<P> {
    pub track: TrackKey,
    pub kind: MediaKind,
    pub spec: CodecSpec,
    /// Extended (64-bit) sequence number from the publisher's leg.
    pub seq: u64,
    pub timestamp: u32,
    pub marker: bool,
    pub keyframe: bool,
    /// The simulcast layer it belongs to: its rid's position in the
    /// publisher's offer (stable for the track's life), 0 without simulcast.
    pub layer: u8,
    /// How many layers its track has (1 without simulcast).
    pub layers: u8,
    /// The VP8 temporal layer (TID) and whether the packet starts a frame;
    /// `None` without temporal layers.
    pub temporal: Option<(u8, bool)>,
    /// The VP8 payload descriptor, parsed once on the publisher's shard (a
    /// slot patches picture ids from it without copying the payload).
    pub vp8: Option<Vp8Descriptor>,
    /// A scalable (VP9/AV1) packet's layers, read once on the publisher's
    /// shard from its payload descriptor or dependency descriptor.
    pub svc: Option<SvcPacket>,
    /// The dependency descriptor as the publisher sent it (str0m's parsed
    /// value, shared), passed to each subscriber unchanged.
    pub dd: Option<Arc<DdRaw>>,
    pub ext: E2eExt,
    pub payload: P,
    /// When the datagram that carried it was received (str0m's receive time).
    pub received: Instant,
    /// The kernel's receive time of that datagram (CLOCK_REALTIME since the
    /// epoch, from SO_TIMESTAMPNS), for the forwarding-latency histograms.
    pub kernel_rx: Option<Duration>,
}

/// A packet on its way through one shard: the payload is shared by every
/// subscriber leg that re-emits it (no copy per subscriber).
pub type MediaPacket = Media<Arc<[u8]>>;

/// The cross-shard copy: owns its bytes and shares nothing with the sender.
pub type MediaCopy = Media<Box<[u8]>>;

impl<P> Media<P> {
    fn with_payload<Q>(self, f: impl FnOnce(P) -> Q) -> Media<Q> {
        Media {
            track: self.track,
            kind: self.kind,
            spec: self.spec,
            seq: self.seq,
            timestamp: self.timestamp,
            marker: self.marker,
            keyframe: self.keyframe,
            layer: self.layer,
            layers: self.layers,
            temporal: self.temporal,
            vp8: self.vp8,
            svc: self.svc,
            dd: self.dd,
            ext: self.ext,
            payload: f(self.payload),
            received: self.received,
            kernel_rx: self.kernel_rx,
        }
    }
}

impl MediaPacket {
    /// The copy a peer shard gets (one allocation and copy of the payload).
    pub fn to_copy(&self) -> MediaCopy {
        let mut c = self.clone().with_payload(|p| Box::from(&p[..]));
        // The descriptor too: a copy shares nothing with the sender.
        c.dd = self.dd.as_deref().map(|d| Arc::new(d.clone()));
        c
    }
}

impl From<MediaCopy> for MediaPacket {
    fn from(c: MediaCopy) -> Self {
        c.with_payload(Arc::from)
    }
}
