//! One recorded track: a small jitter buffer (reorders by sequence number,
//! gives up on a missing packet after [`HOLD`] or [`MAX_HELD`] packets),
//! depacketization (str0m's VP8 depacketizer; an Opus packet is its frame),
//! and the WebM file it writes, with timestamps from RTP time.
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
use str0m::unversioned::{Depacketizer, Vp8Depacketizer};
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
    /// Finalized or failed.
    Closed,
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
    depack: Vp8Depacketizer,
    scratch: Vec<u8>,
    mux: Mux,
    /// Extended RTP time of the last frame, and of the file's first.
    last_ts: Option<u64>,
    first_ts: Option<u64>,
    last_written_ns: u64,
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
        let ext = "webm";
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
        if !matches!(codec, Codec::Vp8 | Codec::Opus) {
            return Err(Box::new(FileStatus {
                file: String::new(),
                error: Some(format!("{codec} is not recorded (VP8 and Opus are)")),
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
            depack: Vp8Depacketizer::default(),
            scratch: Vec::new(),
            mux: Mux::Pending,
            last_ts: None,
            first_ts: None,
            last_written_ns: 0,
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
        if broken || (self.need_keyframe && !keyframe) {
            self.status.frames_skipped += 1;
            self.need_keyframe = true;
            self.want = true;
            return;
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let mut extra = CodecExtra::None;
        let ok = parts.iter().all(|p| {
            self.depack
                .depacketize(&p.payload, &mut out, &mut extra)
                .is_ok()
        });
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
                last.saturating_add_signed(i64::from(delta))
            }
        };
        if matches!(self.mux, Mux::Pending) {
            self.open(frame);
        }
        let Mux::Open { segment, track, .. } = &mut self.mux else {
            return;
        };
        self.last_ts = Some(ext);
        let first = *self.first_ts.get_or_insert(ext);
        let ticks = ext.saturating_sub(first);
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
        if let Mux::Open { state, .. } = &self.mux {
            let io = state.borrow().error.clone();
            self.status.error =
                Some(io.unwrap_or_else(|| "the WebM muxer refused a frame".to_string()));
        }
        self.refresh_bytes();
        // Dropped unfinalized: what was written stays, as far as it went.
        self.mux = Mux::Closed;
    }

    fn refresh_bytes(&mut self) {
        if let Mux::Open { state, .. } = &self.mux {
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

    #[test]
    fn vp8_size_reads_a_keyframe_header() {
        let f = [
            0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0xe0, 0x01, 0,
        ];
        assert_eq!(vp8_size(&f), Some((640, 480)));
        assert_eq!(vp8_size(&f[..5]), None);
        assert_eq!(vp8_size(&[0u8; 12]), None);
    }
}
