//! One recorded track: a small jitter buffer (reorders by sequence number,
//! gives up on a missing packet after [`HOLD`] or [`MAX_HELD`] packets),
//! depacketization (str0m's VP8 and H.264 depacketizers; an Opus packet is
//! its frame), and the file it writes, with timestamps from RTP time: WebM
//! (libwebm) for VP8 and Opus, MP4 (the `mp4` crate) for H.264, which WebM
//! cannot hold.
//!
//! After a loss a video track drops frames until the next keyframe and asks
//! for one ([`TrackRec::wants_keyframe`]); every gap is recorded
//! ([`Gap`]) for the recording's sidecar JSON and `GET`. A write error (a
//! full disk) ends the file: the track keeps its figures and the error, and
//! takes no more frames.
//!
//! Runs on the recorder's thread, never on a shard.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use corelay_core::TrackKey;
use corelay_core::media::MediaCopy;
use serde::Serialize;
use str0m::format::{Codec, CodecExtra};
use str0m::media::MediaKind;
use str0m::unversioned::{Depacketizer, H264Depacketizer, Vp8Depacketizer};
use webm::mux::{AudioCodecId, Segment, SegmentBuilder, SegmentMode, VideoCodecId, Writer};

/// How long a packet after a hole waits for the hole to fill.
pub const HOLD: Duration = Duration::from_millis(150);
/// Packets held behind a hole at most.
const MAX_HELD: usize = 512;
/// Keyframe requests at most this often per track.
const KEYFRAME_EVERY: Duration = Duration::from_millis(500);

/// A stretch of a track that is not in its file.
#[derive(Clone, Debug, Serialize)]
pub struct Gap {
    /// Where in the file (milliseconds from its start).
    pub at_ms: u64,
    /// Packets missing.
    pub packets: u64,
    /// `recorder_behind`: the recorder's queue was full (a slow disk);
    /// `lost`: they never reached the server.
    pub reason: &'static str,
}

/// What `GET` and the sidecar say of one track's file.
#[derive(Clone, Debug, Serialize)]
pub struct FileStatus {
    pub file: String,
    pub participant: String,
    pub mid: String,
    pub kind: &'static str,
    pub codec: String,
    pub bytes: u64,
    pub duration_ms: u64,
    pub frames: u64,
    /// Frames not written: incomplete after a loss, or before a keyframe.
    pub frames_skipped: u64,
    pub gaps: Vec<Gap>,
    pub error: Option<String>,
}

/// A file writer that keeps its first I/O error (libwebm reports only
/// that a write failed) and counts what it wrote.
struct Sink {
    out: BufWriter<File>,
    /// Where the next byte goes.
    pos: u64,
    state: Rc<RefCell<SinkState>>,
}

#[derive(Default)]
struct SinkState {
    error: Option<String>,
    end: u64,
}

impl Sink {
    fn note<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r {
            let mut s = self.state.borrow_mut();
            if s.error.is_none() {
                s.error = Some(e.to_string());
            }
        }
        r
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.out.write(buf);
        if let Ok(n) = &r {
            self.pos += *n as u64;
            let mut s = self.state.borrow_mut();
            s.end = s.end.max(self.pos);
        }
        self.note(r)
    }
    fn flush(&mut self) -> io::Result<()> {
        let r = self.out.flush();
        self.note(r)
    }
}

impl Seek for Sink {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        // libwebm asks where it is often: answered without a flush.
        if pos == SeekFrom::Current(0) {
            return Ok(self.pos);
        }
        let r = self.out.seek(pos);
        if let Ok(p) = &r {
            self.pos = *p;
        }
        self.note(r)
    }
}

enum Mux {
    /// Waiting for the first frame (video: a keyframe, which gives the size).
    Pending,
    Open {
        segment: Box<Segment<Sink>>,
        track: u64,
        state: Rc<RefCell<SinkState>>,
    },
    /// H.264 in MP4: each sample's duration is known when the next frame
    /// comes, so one frame waits (90 kHz ticks from the first, AVC bytes,
    /// sync).
    Mp4 {
        writer: Box<mp4::Mp4Writer<Sink>>,
        waiting: Option<(u64, Vec<u8>, bool)>,
        state: Rc<RefCell<SinkState>>,
    },
    /// Finalized or failed.
    Closed,
}

/// A frame's depacketizer.
enum Depack {
    Vp8(Vp8Depacketizer),
    H264(H264Depacketizer),
    /// Opus: a packet is a frame.
    None,
}

impl Depack {
    fn new(codec: Codec) -> Self {
        match codec {
            Codec::Vp8 => Depack::Vp8(Vp8Depacketizer::default()),
            Codec::H264 => {
                // Length-prefixed NAL units: what MP4 samples hold.
                let mut d = H264Depacketizer::default();
                d.is_avc = true;
                Depack::H264(d)
            }
            _ => Depack::None,
        }
    }

    fn depacketize(&mut self, packet: &[u8], out: &mut Vec<u8>, extra: &mut CodecExtra) -> bool {
        match self {
            Depack::Vp8(d) => d.depacketize(packet, out, extra).is_ok(),
            Depack::H264(d) => d.depacketize(packet, out, extra).is_ok(),
            Depack::None => {
                out.extend_from_slice(packet);
                true
            }
        }
    }
}

struct Held {
    timestamp: u32,
    marker: bool,
    keyframe: bool,
    payload: Box<[u8]>,
    arrived: Instant,
}

pub struct TrackRec {
    pub key: TrackKey,
    pub shard: usize,
    kind: MediaKind,
    codec: Codec,
    clock: u64,
    path: PathBuf,
    held: BTreeMap<u64, Held>,
    next_seq: Option<u64>,
    /// The frame being gathered: its RTP timestamp and packets in order.
    frame: Vec<Held>,
    frame_broken: bool,
    need_keyframe: bool,
    last_request: Option<Instant>,
    want: bool,
    depack: Depack,
    scratch: Vec<u8>,
    mux: Mux,
    /// Extended RTP time of the last frame, and of the file's first.
    last_ts: Option<u64>,
    first_ts: Option<u64>,
    last_written_ns: u64,
    /// The last frame's duration in RTP ticks (the MP4's last sample's).
    last_frame_ticks: u64,
    behind: bool,
    pub status: FileStatus,
}

impl TrackRec {
    /// A track seen for the first time; `None` for a codec this recorder
    /// does not write (its reason in `Err`).
    pub fn new(
        media: &MediaCopy,
        shard: usize,
        dir: &std::path::Path,
    ) -> Result<Self, Box<FileStatus>> {
        let ext = if media.spec.codec == Codec::H264 {
            "mp4"
        } else {
            "webm"
        };
        let name = format!(
            "{}-{}-{}.{ext}",
            media.track.participant,
            media.track.mid,
            corelay_core::events::kind_str(media.kind)
        );
        let codec = media.spec.codec;
        let status = FileStatus {
            file: name.clone(),
            participant: media.track.participant.to_string(),
            mid: media.track.mid.to_string(),
            kind: corelay_core::events::kind_str(media.kind),
            codec: codec.to_string(),
            bytes: 0,
            duration_ms: 0,
            frames: 0,
            frames_skipped: 0,
            gaps: Vec::new(),
            error: None,
        };
        if !matches!(codec, Codec::Vp8 | Codec::H264 | Codec::Opus) {
            return Err(Box::new(FileStatus {
                file: String::new(),
                error: Some(format!("{codec} is not recorded (VP8, H.264 and Opus are)")),
                ..status
            }));
        }
        Ok(TrackRec {
            key: media.track,
            shard,
            kind: media.kind,
            codec,
            clock: u64::from(media.spec.clock_rate.get()).max(1),
            path: dir.join(name),
            held: BTreeMap::new(),
            next_seq: None,
            frame: Vec::new(),
            frame_broken: false,
            need_keyframe: media.kind == MediaKind::Video,
            last_request: None,
            want: false,
            depack: Depack::new(codec),
            scratch: Vec::new(),
            mux: Mux::Pending,
            last_ts: None,
            first_ts: None,
            last_written_ns: 0,
            last_frame_ticks: 3000,
            behind: false,
            status,
        })
    }

    /// Whether the track wants a keyframe now (once per request interval).
    pub fn wants_keyframe(&mut self, now: Instant) -> bool {
        if !self.want || self.last_request.is_some_and(|t| now < t + KEYFRAME_EVERY) {
            return false;
        }
        self.want = false;
        self.last_request = Some(now);
        true
    }

    /// The recorder's queue dropped packets before this one arrived (of
    /// some track of the shard): a hole now is the recorder's own.
    pub fn note_behind(&mut self) {
        self.behind = true;
    }

    pub fn push(&mut self, media: MediaCopy, now: Instant) {
        if matches!(self.mux, Mux::Closed) {
            return;
        }
        if self.next_seq.is_some_and(|n| media.seq < n) {
            return; // late or duplicate: its place has passed
        }
        if self.next_seq.is_none() {
            self.next_seq = Some(media.seq);
        }
        self.held.entry(media.seq).or_insert(Held {
            timestamp: media.timestamp,
            marker: media.marker,
            keyframe: media.keyframe,
            payload: media.payload,
            arrived: now,
        });
        self.release(now);
    }

    /// Releases packets in order; skips a hole that waited too long.
    pub fn release(&mut self, now: Instant) {
        loop {
            let Some(next) = self.next_seq else {
                return;
            };
            if let Some(p) = self.held.remove(&next) {
                self.next_seq = Some(next + 1);
                self.on_packet(p);
                continue;
            }
            let Some((&first, oldest)) = self.held.iter().next() else {
                return;
            };
            if self.held.len() < MAX_HELD && now < oldest.arrived + HOLD {
                return;
            }
            let lost = first.saturating_sub(next);
            self.gap(lost);
            self.next_seq = Some(first);
        }
    }

    fn gap(&mut self, packets: u64) {
        let reason = if std::mem::take(&mut self.behind) {
            "recorder_behind"
        } else {
            "lost"
        };
        self.status.gaps.push(Gap {
            at_ms: self.status.duration_ms,
            packets,
            reason,
        });
        if self.kind == MediaKind::Video {
            // The frame being gathered lost a part, and what follows
            // refers to what was lost: wait for a keyframe.
            self.frame_broken = true;
            self.need_keyframe = true;
            self.want = true;
            // A fragment it holds belongs to what was lost.
            self.depack = Depack::new(self.codec);
        }
    }

    fn on_packet(&mut self, p: Held) {
        if self.kind == MediaKind::Audio {
            let ts = p.timestamp;
            self.write(&p.payload, ts, true);
            return;
        }
        if self
            .frame
            .first()
            .is_some_and(|f| f.timestamp != p.timestamp)
        {
            // A new frame began without the last one's marker.
            self.finish_frame();
        }
        let marker = p.marker;
        self.frame.push(p);
        if marker {
            self.finish_frame();
        }
    }

    fn finish_frame(&mut self) {
        let parts = std::mem::take(&mut self.frame);
        let broken = std::mem::take(&mut self.frame_broken);
        let Some(first) = parts.first() else {
            return;
        };
        let (ts, keyframe) = (first.timestamp, first.keyframe);
        if broken || (self.need_keyframe && !keyframe && self.codec != Codec::H264) {
            self.status.frames_skipped += 1;
            self.need_keyframe = true;
            self.want = true;
            return;
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let mut extra = CodecExtra::None;
        let ok = parts
            .iter()
            .all(|p| self.depack.depacketize(&p.payload, &mut out, &mut extra));
        // H.264: an IDR anywhere in the frame makes it a keyframe (the first
        // packet may carry only SPS and PPS).
        let keyframe = keyframe || matches!(extra, CodecExtra::H264(e) if e.is_keyframe);
        if self.need_keyframe && !keyframe {
            self.status.frames_skipped += 1;
            self.want = true;
            self.scratch = out;
            return;
        }
        if ok && !out.is_empty() {
            self.need_keyframe = false;
            self.write(&out, ts, keyframe);
        } else {
            self.status.frames_skipped += 1;
            self.need_keyframe = true;
            self.want = true;
        }
        self.scratch = out;
    }

    /// Writes one frame at RTP time `ts`.
    fn write(&mut self, frame: &[u8], ts: u32, keyframe: bool) {
        let ext = match self.last_ts {
            None => u64::from(ts),
            Some(last) => {
                let delta = ts.wrapping_sub(last as u32) as i32;
                if delta > 0 {
                    self.last_frame_ticks = delta as u64;
                }
                last.saturating_add_signed(i64::from(delta))
            }
        };
        if matches!(self.mux, Mux::Pending) {
            self.open(frame);
        }
        self.last_ts = Some(ext);
        let first = *self.first_ts.get_or_insert(ext);
        let ticks = ext.saturating_sub(first);
        if let Mux::Mp4 { .. } = self.mux {
            self.write_mp4(frame, ticks, keyframe);
            return;
        }
        let Mux::Open { segment, track, .. } = &mut self.mux else {
            return;
        };
        let ns = (u128::from(ticks) * 1_000_000_000 / u128::from(self.clock)) as u64;
        let ns = ns.max(self.last_written_ns);
        if segment.add_frame(*track, frame, ns, keyframe).is_err() {
            self.fail();
            return;
        }
        self.last_written_ns = ns;
        self.status.frames += 1;
        self.status.duration_ms = ns / 1_000_000;
        self.refresh_bytes();
    }

    /// One H.264 frame into the MP4 file: the frame before it is written
    /// now that its duration is known.
    fn write_mp4(&mut self, frame: &[u8], ticks: u64, keyframe: bool) {
        let Mux::Mp4 {
            writer, waiting, ..
        } = &mut self.mux
        else {
            return;
        };
        let mut ok = true;
        if let Some((start, bytes, sync)) = waiting.take() {
            let duration = ticks.saturating_sub(start).clamp(1, 90_000) as u32;
            ok = write_sample(writer, start, duration, bytes, sync);
        }
        *waiting = Some((ticks, frame.to_vec(), keyframe));
        if !ok {
            self.fail();
            return;
        }
        self.status.frames += 1;
        self.status.duration_ms = ticks * 1000 / self.clock;
        self.refresh_bytes();
    }

    fn open(&mut self, frame: &[u8]) {
        match self.try_open(frame) {
            Ok(m) => self.mux = m,
            Err(e) => {
                self.status.error = Some(e);
                self.mux = Mux::Closed;
            }
        }
    }

    fn try_open(&self, frame: &[u8]) -> Result<Mux, String> {
        let file = File::create(&self.path)
            .map_err(|e| format!("cannot create {}: {e}", self.path.display()))?;
        let state = Rc::new(RefCell::new(SinkState::default()));
        let sink = Sink {
            out: BufWriter::with_capacity(64 * 1024, file),
            pos: 0,
            state: state.clone(),
        };
        if self.codec == Codec::H264 {
            return open_mp4(sink, state, frame);
        }
        let failed = |e: webm::mux::Error| {
            let io = state.borrow().error.clone();
            io.unwrap_or_else(|| format!("cannot start the WebM file: {e}"))
        };
        let builder = SegmentBuilder::new(Writer::new(sink))
            .and_then(|b| b.set_mode(SegmentMode::File))
            .and_then(|b| b.set_writing_app("corelay"))
            .map_err(failed)?;
        let (builder, track) = if self.codec == Codec::Vp8 {
            let (w, h) = vp8_size(frame).unwrap_or((640, 480));
            let (b, t) = builder
                .add_video_track(w, h, VideoCodecId::VP8, None)
                .map_err(failed)?;
            (b, webm::mux::Track::track_number(&t))
        } else {
            let (b, t) = builder
                .add_audio_track(48_000, 2, AudioCodecId::Opus, None)
                .map_err(failed)?;
            let b = b.set_codec_private(t, &opus_head()).map_err(failed)?;
            (b, webm::mux::Track::track_number(&t))
        };
        Ok(Mux::Open {
            segment: Box::new(builder.build()),
            track,
            state,
        })
    }

    /// A write failed: the file ends here, with the OS's reason.
    fn fail(&mut self) {
        if let Mux::Open { state, .. } | Mux::Mp4 { state, .. } = &self.mux {
            let io = state.borrow().error.clone();
            self.status.error = Some(io.unwrap_or_else(|| "the muxer refused a frame".to_string()));
        }
        self.refresh_bytes();
        // Dropped unfinalized: what was written stays, as far as it went.
        self.mux = Mux::Closed;
    }

    fn refresh_bytes(&mut self) {
        if let Mux::Open { state, .. } | Mux::Mp4 { state, .. } = &self.mux {
            self.status.bytes = state.borrow().end;
        }
    }

    pub fn failed(&self) -> bool {
        self.status.error.is_some()
    }

    /// Ends the file: what is held is written, the segment finalized (its
    /// duration and cues written).
    pub fn finish(&mut self) {
        // Every hole left is given up on.
        self.release(Instant::now() + HOLD + HOLD);
        self.finish_frame();
        match std::mem::replace(&mut self.mux, Mux::Closed) {
            Mux::Open { segment, state, .. } => {
                let done = segment.finalize(None).ok().map(|w| w.into_inner());
                let flushed = done.map(|mut sink| sink.flush().is_ok());
                let end = state.borrow().end;
                self.status.bytes = end;
                if flushed != Some(true) {
                    let io = state.borrow().error.clone();
                    self.status.error.get_or_insert_with(|| {
                        io.unwrap_or_else(|| "the WebM file could not be finalized".into())
                    });
                }
            }
            Mux::Mp4 {
                mut writer,
                waiting,
                state,
            } => {
                // The last frame lasts as long as the one before it did, at
                // most a second.
                let mut ok = true;
                if let Some((start, bytes, sync)) = waiting {
                    let last = self.last_frame_ticks.clamp(1, 90_000) as u32;
                    ok = write_sample(&mut writer, start, last, bytes, sync);
                }
                let ok = ok && writer.write_end().is_ok() && {
                    let mut sink = (*writer).into_writer();
                    sink.flush().is_ok()
                };
                self.status.bytes = state.borrow().end;
                if !ok {
                    let io = state.borrow().error.clone();
                    self.status.error.get_or_insert_with(|| {
                        io.unwrap_or_else(|| "the MP4 file could not be finalized".into())
                    });
                }
            }
            Mux::Pending => {
                if self.status.error.is_none() {
                    self.status.error = Some(if self.kind == MediaKind::Video {
                        "no keyframe arrived: nothing written".into()
                    } else {
                        "no frame arrived: nothing written".into()
                    });
                }
                self.status.file.clear();
            }
            Mux::Closed => {}
        }
    }
}

/// An MP4 file with one H.264 track (90 kHz), its parameter sets from the
/// first keyframe.
fn open_mp4(sink: Sink, state: Rc<RefCell<SinkState>>, frame: &[u8]) -> Result<Mux, String> {
    let failed = |e: mp4::Error| {
        let io = state.borrow().error.clone();
        io.unwrap_or_else(|| format!("cannot start the MP4 file: {e}"))
    };
    let (sps, pps) = (nal_of(frame, 7), nal_of(frame, 8));
    let (Some(sps), Some(pps)) = (sps, pps) else {
        return Err("the first H.264 keyframe has no SPS and PPS".into());
    };
    let config = mp4::Mp4Config {
        major_brand: "isom".parse().map_err(failed)?,
        minor_version: 512,
        compatible_brands: ["isom", "iso2", "avc1", "mp41"]
            .iter()
            .filter_map(|b| b.parse().ok())
            .collect(),
        timescale: 1000,
    };
    let mut writer = mp4::Mp4Writer::write_start(sink, &config).map_err(failed)?;
    writer
        .add_track(&mp4::TrackConfig {
            track_type: mp4::TrackType::Video,
            timescale: 90_000,
            language: "und".into(),
            media_conf: mp4::MediaConfig::AvcConfig(mp4::AvcConfig {
                // The decoder reads the size from the SPS; these are the
                // track header's.
                width: 640,
                height: 360,
                seq_param_set: sps.to_vec(),
                pic_param_set: pps.to_vec(),
            }),
        })
        .map_err(failed)?;
    Ok(Mux::Mp4 {
        writer: Box::new(writer),
        waiting: None,
        state,
    })
}

fn write_sample(
    writer: &mut mp4::Mp4Writer<Sink>,
    start: u64,
    duration: u32,
    bytes: Vec<u8>,
    sync: bool,
) -> bool {
    writer
        .write_sample(
            1,
            &mp4::Mp4Sample {
                start_time: start,
                duration,
                rendering_offset: 0,
                is_sync: sync,
                bytes: bytes.into(),
            },
        )
        .is_ok()
}

/// The first NAL unit of `kind` in an AVC (length-prefixed) frame.
fn nal_of(frame: &[u8], kind: u8) -> Option<&[u8]> {
    let mut rest = frame;
    while let Some(len) = rest.get(..4) {
        let n =
            u32::from_be_bytes([*len.first()?, *len.get(1)?, *len.get(2)?, *len.get(3)?]) as usize;
        let nal = rest.get(4..4 + n)?;
        if nal.first().is_some_and(|b| b & 0x1f == kind) {
            return Some(nal);
        }
        rest = rest.get(4 + n..)?;
    }
    None
}

/// A VP8 keyframe's size (RFC 6386 9.1: start code, then 14-bit width and
/// height, little endian).
fn vp8_size(frame: &[u8]) -> Option<(u32, u32)> {
    let head = frame.get(3..10)?;
    if head.get(..3)? != [0x9d, 0x01, 0x2a] {
        return None;
    }
    let w = u16::from_le_bytes([*head.get(3)?, *head.get(4)?]) & 0x3fff;
    let h = u16::from_le_bytes([*head.get(5)?, *head.get(6)?]) & 0x3fff;
    (w > 0 && h > 0).then_some((u32::from(w), u32::from(h)))
}

/// The Opus identification header (RFC 7845 5.1), WebM's Opus
/// CodecPrivate: two channels, 48 kHz, no pre-skip or gain.
fn opus_head() -> [u8; 19] {
    let mut h = [0u8; 19];
    h[..8].copy_from_slice(b"OpusHead");
    h[8] = 1; // version
    h[9] = 2; // channels
    h[12..16].copy_from_slice(&48_000u32.to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelay_core::ParticipantId;
    use corelay_core::media::{E2eExt, Media};
    use str0m::format::{CodecSpec, FormatParams};
    use str0m::media::Frequency;

    fn scratch() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "corelay-track-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A one-packet VP8 frame: descriptor (S bit), then the frame tag
    /// (bit 0 clear on a keyframe).
    fn vp8(seq: u64, frame: u32, keyframe: bool) -> MediaCopy {
        Media {
            track: TrackKey {
                participant: ParticipantId(7),
                mid: "0".into(),
            },
            kind: MediaKind::Video,
            spec: CodecSpec {
                codec: Codec::Vp8,
                clock_rate: Frequency::NINETY_KHZ,
                channels: None,
                format: FormatParams::default(),
            },
            seq,
            timestamp: frame * 3000,
            marker: true,
            keyframe,
            layer: 0,
            layers: 1,
            temporal: None,
            vp8: None,
            svc: None,
            dd: None,
            ext: E2eExt::default(),
            payload: vec![0x10, u8::from(!keyframe), 0, 0, 9, 9].into_boxed_slice(),
            received: Instant::now(),
            kernel_rx: None,
        }
    }

    #[test]
    fn reordered_packets_are_written_in_order_and_a_loss_waits_for_a_keyframe() {
        let dir = scratch();
        let t0 = Instant::now();
        let mut t = TrackRec::new(&vp8(10, 0, true), 0, &dir).unwrap();
        // Frames 0..4, with 2 and 1 swapped on the way: no gap.
        for (seq, frame, key) in [
            (10, 0, true),
            (12, 2, false),
            (11, 1, false),
            (13, 3, false),
        ] {
            t.push(vp8(seq, frame, key), t0);
        }
        assert_eq!(t.status.frames, 4);
        assert!(t.status.gaps.is_empty());
        // Packet 14 is lost: 15 waits for it, then the hole is given up on,
        // the frames up to the next keyframe are skipped and one is asked for.
        t.push(vp8(15, 5, false), t0);
        assert_eq!(t.status.frames, 4);
        t.release(t0 + HOLD + HOLD);
        assert_eq!(t.status.gaps.len(), 1);
        assert_eq!(
            t.status.gaps.first().map(|g| (g.packets, g.reason)),
            Some((1, "lost"))
        );
        assert!(t.wants_keyframe(t0 + HOLD + HOLD));
        t.push(vp8(16, 6, false), t0 + HOLD + HOLD);
        assert_eq!(t.status.frames, 4);
        t.push(vp8(17, 7, true), t0 + HOLD + HOLD);
        assert_eq!(t.status.frames, 5);
        assert_eq!(t.status.frames_skipped, 2);
        // A late packet of the hole changes nothing.
        t.push(vp8(14, 4, false), t0 + HOLD + HOLD);
        assert_eq!(t.status.frames, 5);
        t.finish();
        assert_eq!(t.status.error, None);
        assert_eq!(t.status.duration_ms, 7 * 3000 / 90);
        let size = std::fs::metadata(dir.join(&t.status.file)).unwrap().len();
        assert_eq!(t.status.bytes, size);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn vp8_size_reads_a_keyframe_header() {
        let f = [
            0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0xe0, 0x01, 0,
        ];
        assert_eq!(vp8_size(&f), Some((640, 480)));
        assert_eq!(vp8_size(&f[..5]), None);
        assert_eq!(vp8_size(&[0u8; 12]), None);
    }

    #[test]
    fn nal_of_finds_parameter_sets_in_an_avc_frame() {
        let f = [0, 0, 0, 2, 0x67, 1, 0, 0, 0, 1, 0x68, 0, 0, 0, 2, 0x65, 9];
        assert_eq!(nal_of(&f, 7), Some(&[0x67, 1][..]));
        assert_eq!(nal_of(&f, 8), Some(&[0x68][..]));
        assert_eq!(nal_of(&f, 5), Some(&[0x65, 9][..]));
        assert_eq!(nal_of(&f, 1), None);
        assert_eq!(nal_of(&f[..6], 8), None);
    }
}
