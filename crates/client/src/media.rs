//! What a virtual publisher sends: a frame schedule (synthetic, or replayed
//! from a recorded frame file) and an Opus-like audio schedule with DTX.
//!
//! Only sizes, timing and frame types come from here; the bytes themselves
//! are verifiable stamps (see [`crate::payload`]).

use std::sync::Arc;

/// Largest RTP payload we produce for video.
pub const MAX_VIDEO_PAYLOAD: usize = 1200;
/// Video clock rate.
pub const VIDEO_CLOCK: u32 = 90_000;
/// Audio clock rate (Opus).
pub const AUDIO_CLOCK: u32 = 48_000;
/// Ticks of one 20 ms Opus frame.
pub const AUDIO_FRAME_TICKS: u32 = 960;
/// Frames between DTX packets while silent (400 ms, what libopus does).
pub const DTX_INTERVAL_FRAMES: u32 = 20;

/// One recorded frame: RTP timestamp offset (90 kHz) from the start of the
/// recording, keyframe flag and its packet payload sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedFrame {
    /// 90 kHz ticks since the first frame of the recording.
    pub ts: u32,
    /// IDR frame.
    pub keyframe: bool,
    /// Payload size of each RTP packet of the frame (as packetized by the recorder).
    pub packets: Vec<u16>,
}

/// A packetized frame file (see `assets/media/README.md`).
///
/// Text format, one frame a line, `#` comments:
/// ```text
/// # corelay-frames v1 codec=h264 clock=90000
/// <ts90k> <K|D> <size>,<size>,...
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recording {
    /// Frames in presentation order.
    pub frames: Vec<RecordedFrame>,
    /// Length of one loop in 90 kHz ticks (last ts + one frame interval).
    pub loop_ticks: u32,
}

impl Recording {
    /// Parse a frame file. Errors name the offending line.
    pub fn parse(text: &str) -> Result<Recording, String> {
        let mut frames = Vec::new();
        for (no, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut it = line.split_whitespace();
            let bad = |what: &str| format!("frame file line {}: {what}: {line:?}", no + 1);
            let ts: u32 = it
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("bad timestamp"))?;
            let keyframe = match it.next() {
                Some("K") => true,
                Some("D") => false,
                _ => return Err(bad("expected K or D")),
            };
            let sizes = it.next().ok_or_else(|| bad("missing packet sizes"))?;
            let packets: Result<Vec<u16>, _> = sizes.split(',').map(|s| s.parse::<u16>()).collect();
            let packets = packets.map_err(|_| bad("bad packet size"))?;
            if packets.is_empty()
                || packets
                    .iter()
                    .any(|&p| p == 0 || p as usize > MAX_VIDEO_PAYLOAD)
            {
                return Err(bad("packet sizes must be 1..=1200"));
            }
            if let Some(prev) = frames.last().map(|f: &RecordedFrame| f.ts) {
                if ts <= prev {
                    return Err(bad("timestamps must increase"));
                }
            }
            frames.push(RecordedFrame {
                ts,
                keyframe,
                packets,
            });
        }
        if frames.is_empty() {
            return Err("frame file has no frames".into());
        }
        if !frames[0].keyframe {
            return Err("frame file must start with a keyframe".into());
        }
        let n = frames.len() as u32;
        let last = frames[frames.len() - 1].ts;
        let first = frames[0].ts;
        let avg = if n > 1 {
            (last - first) / (n - 1)
        } else {
            3000
        };
        let base = first;
        for f in &mut frames {
            f.ts -= base;
        }
        Ok(Recording {
            loop_ticks: last - first + avg.max(1),
            frames,
        })
    }

    /// Load a frame file from disk.
    pub fn load(path: &std::path::Path) -> Result<Recording, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Recording::parse(&text)
    }

    /// Average bitrate in bits per second.
    pub fn bitrate_bps(&self) -> f64 {
        let bytes: u64 = self
            .frames
            .iter()
            .flat_map(|f| f.packets.iter())
            .map(|&p| u64::from(p))
            .sum();
        bytes as f64 * 8.0 / (f64::from(self.loop_ticks) / f64::from(VIDEO_CLOCK))
    }
}

/// Where video frames come from.
#[derive(Debug, Clone)]
pub enum VideoSource {
    /// Constant frame rate, a keyframe every `keyframe_interval` frames,
    /// frame sizes around `bitrate_bps / fps`.
    Synthetic {
        /// Target bitrate.
        bitrate_bps: u32,
        /// Frames per second.
        fps: u32,
        /// Frames between periodic keyframes.
        keyframe_interval: u32,
    },
    /// Replay of a recorded frame file, looped.
    Recorded(Arc<Recording>),
}

impl Default for VideoSource {
    fn default() -> Self {
        VideoSource::Synthetic {
            bitrate_bps: 400_000,
            fps: 30,
            keyframe_interval: 90,
        }
    }
}

/// The next frame to send, as the schedule sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFrame {
    /// 90 kHz ticks since this publisher's first frame (monotonic, no wrap
    /// within any realistic run: u64).
    pub ticks: u64,
    /// Keyframe.
    pub keyframe: bool,
}

/// Iterates frames of a [`VideoSource`] forever.
#[derive(Debug, Clone)]
pub struct VideoSchedule {
    source: VideoSource,
    /// Index of the next frame (counts from the random start offset).
    n: u64,
    /// Ticks of frame `start` (so the first frame is at tick 0).
    origin: u64,
    rng: fastrand::Rng,
}

impl VideoSchedule {
    /// Start the schedule; `offset` picks where in the recording to begin.
    pub fn new(source: VideoSource, offset: u64, seed: u64) -> Self {
        let mut s = VideoSchedule {
            source,
            n: offset,
            origin: 0,
            rng: fastrand::Rng::with_seed(seed),
        };
        s.origin = s.ticks_of(offset);
        s
    }

    fn ticks_of(&self, n: u64) -> u64 {
        match &self.source {
            VideoSource::Synthetic { fps, .. } => n * u64::from(VIDEO_CLOCK / (*fps).max(1)),
            VideoSource::Recorded(r) => {
                let len = r.frames.len() as u64;
                let lp = n / len;
                let i = (n % len) as usize;
                lp * u64::from(r.loop_ticks) + u64::from(r.frames[i].ts)
            }
        }
    }

    /// Ticks (since the first frame) of the next frame.
    pub fn next_ticks(&self) -> u64 {
        self.ticks_of(self.n) - self.origin
    }

    /// Produce the next frame: its tick, keyframe flag, and packet sizes
    /// appended to `sizes` (cleared first). `force_key` turns it into a
    /// keyframe (answering a PLI/FIR, or the very first frame).
    pub fn next_frame(&mut self, force_key: bool, sizes: &mut Vec<usize>) -> PlannedFrame {
        sizes.clear();
        let ticks = self.next_ticks();
        let keyframe;
        match &self.source {
            VideoSource::Synthetic {
                bitrate_bps,
                fps,
                keyframe_interval,
            } => {
                let fps = (*fps).max(1) as usize;
                let ki = (*keyframe_interval).max(1) as usize;
                let avg = (*bitrate_bps as usize / 8) / fps;
                keyframe = force_key || self.n.is_multiple_of(ki as u64);
                // A keyframe is ~5x a delta frame; keep the average on target.
                let key = avg * 5;
                let delta = (avg * ki).saturating_sub(key) / (ki - 1).max(1);
                let base = if keyframe { key } else { delta.max(200) };
                let jitter = base / 10;
                let size = base - jitter + self.rng.usize(0..=2 * jitter);
                let (n, each, rem) = crate::payload::split_frame(size, MAX_VIDEO_PAYLOAD);
                for i in 0..n as usize {
                    sizes.push(each + usize::from(i < rem));
                }
            }
            VideoSource::Recorded(r) => {
                let i = (self.n % r.frames.len() as u64) as usize;
                let f = &r.frames[i];
                keyframe = force_key || f.keyframe;
                if force_key && !f.keyframe {
                    // Answer with a keyframe the size of the recording's first one.
                    sizes.extend(r.frames[0].packets.iter().map(|&p| p as usize));
                } else {
                    sizes.extend(f.packets.iter().map(|&p| p as usize));
                }
            }
        }
        self.n += 1;
        PlannedFrame { ticks, keyframe }
    }
}

/// One Opus packet to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedAudio {
    /// 48 kHz ticks since the first frame.
    pub ticks: u64,
    /// Payload size.
    pub size: usize,
    /// RFC 6464 level, -dBov (0 loudest, -127 silence).
    pub level: i8,
    /// Voice activity flag.
    pub voice: bool,
}

/// 20 ms Opus-like frames; while silent with DTX on, one packet per 400 ms.
#[derive(Debug, Clone)]
pub struct AudioSchedule {
    frame: u64,
    rng: fastrand::Rng,
}

impl AudioSchedule {
    /// New schedule.
    pub fn new(seed: u64) -> Self {
        AudioSchedule {
            frame: 0,
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// Ticks of the next 20 ms frame boundary.
    pub fn next_ticks(&self) -> u64 {
        self.frame * u64::from(AUDIO_FRAME_TICKS)
    }

    /// Advance one 20 ms frame; returns the packet to send, or `None` when
    /// DTX suppresses this frame.
    pub fn next_frame(&mut self, speaking: bool, dtx: bool) -> Option<PlannedAudio> {
        let ticks = self.next_ticks();
        let n = self.frame;
        self.frame += 1;
        if speaking {
            Some(PlannedAudio {
                ticks,
                size: 55 + self.rng.usize(0..=20),
                level: -(25 + self.rng.i8(0..=10)),
                voice: true,
            })
        } else if !dtx || n.is_multiple_of(u64::from(DTX_INTERVAL_FRAMES)) {
            Some(PlannedAudio {
                ticks,
                size: if dtx { 1 } else { 40 },
                level: -127,
                voice: false,
            })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_bitrate_is_on_target() {
        let mut s = VideoSchedule::new(VideoSource::default(), 0, 1);
        let mut sizes = Vec::new();
        let mut bytes = 0usize;
        let mut keys = 0;
        for i in 0..900 {
            let f = s.next_frame(false, &mut sizes);
            assert_eq!(f.ticks, i * 3000);
            keys += usize::from(f.keyframe);
            assert!(sizes.iter().all(|&p| p <= MAX_VIDEO_PAYLOAD && p > 0));
            bytes += sizes.iter().sum::<usize>();
        }
        assert_eq!(keys, 10);
        let kbps = bytes as f64 * 8.0 / 30.0 / 1000.0;
        assert!((360.0..440.0).contains(&kbps), "{kbps}");
    }

    #[test]
    fn recording_parse_and_loop() {
        let r = Recording::parse("# x\n1000 K 1200,800\n4000 D 500\n7000 D 600\n").unwrap();
        assert_eq!(r.frames[0].ts, 0);
        assert_eq!(r.loop_ticks, 9000);
        let r = Arc::new(r);
        let mut s = VideoSchedule::new(VideoSource::Recorded(r.clone()), 2, 1);
        let mut sizes = Vec::new();
        let f = s.next_frame(true, &mut sizes);
        assert_eq!((f.ticks, f.keyframe), (0, true));
        assert_eq!(sizes, vec![1200, 800]); // forced key uses the first keyframe's sizes
        let f = s.next_frame(false, &mut sizes);
        assert_eq!((f.ticks, f.keyframe), (3000, true));
        let f = s.next_frame(false, &mut sizes);
        assert_eq!((f.ticks, f.keyframe), (6000, false));
        assert_eq!(sizes, vec![500]);
        assert!(Recording::parse("0 D 100\n").is_err());
        assert!(Recording::parse("0 K 0\n").is_err());
        assert!(Recording::parse("0 K 100\n0 D 100\n").is_err());
        assert!(Recording::parse("").is_err());
    }

    #[test]
    fn dtx() {
        let mut a = AudioSchedule::new(3);
        let sent = (0..100)
            .filter(|_| a.next_frame(false, true).is_some())
            .count();
        assert_eq!(sent, 5);
        let mut a = AudioSchedule::new(3);
        let sent = (0..100)
            .filter(|_| a.next_frame(true, true).is_some())
            .count();
        assert_eq!(sent, 100);
    }
}
