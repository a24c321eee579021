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
use str0m::rtp::{AbsCaptureTime, ExtensionValues, VideoOrientation};

use crate::ids::TrackKey;

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

/// Everything a subscriber leg needs to re-emit a packet.
#[derive(Clone, Debug)]
pub struct MediaPacket {
    pub track: TrackKey,
    pub kind: MediaKind,
    pub spec: CodecSpec,
    /// Extended (64-bit) sequence number from the publisher's leg.
    pub seq: u64,
    pub timestamp: u32,
    pub marker: bool,
    pub keyframe: bool,
    pub ext: E2eExt,
    pub payload: Arc<[u8]>,
    /// When the datagram that carried it was received (str0m's receive time).
    pub received: Instant,
    /// The kernel's receive time of that datagram (CLOCK_REALTIME since the
    /// epoch, from SO_TIMESTAMPNS), for the forwarding-latency histograms.
    pub kernel_rx: Option<Duration>,
}

/// The cross-shard copy of a [`MediaPacket`]: owns its bytes, shares nothing.
#[derive(Debug)]
pub struct MediaCopy {
    pub track: TrackKey,
    pub kind: MediaKind,
    pub spec: CodecSpec,
    pub seq: u64,
    pub timestamp: u32,
    pub marker: bool,
    pub keyframe: bool,
    pub ext: E2eExt,
    pub payload: Box<[u8]>,
    pub received: Instant,
    pub kernel_rx: Option<Duration>,
}

impl MediaPacket {
    pub fn to_copy(&self) -> MediaCopy {
        MediaCopy {
            track: self.track,
            kind: self.kind,
            spec: self.spec,
            seq: self.seq,
            timestamp: self.timestamp,
            marker: self.marker,
            keyframe: self.keyframe,
            ext: self.ext,
            payload: Box::from(&self.payload[..]),
            received: self.received,
            kernel_rx: self.kernel_rx,
        }
    }
}

impl From<MediaCopy> for MediaPacket {
    fn from(c: MediaCopy) -> Self {
        MediaPacket {
            track: c.track,
            kind: c.kind,
            spec: c.spec,
            seq: c.seq,
            timestamp: c.timestamp,
            marker: c.marker,
            keyframe: c.keyframe,
            ext: c.ext,
            payload: Arc::from(c.payload),
            received: c.received,
            kernel_rx: c.kernel_rx,
        }
    }
}
