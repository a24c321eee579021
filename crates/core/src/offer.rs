//! Turning an SDP offer into a configured str0m `Rtc` and an answer.
//!
//! Runs on the control thread (it owns signaling); the resulting `Rtc` is then
//! handed to a shard as a value. Owns the codec policy: a room has one video
//! codec plus Opus, so the answer only ever contains those, and a client that
//! cannot send or receive them is refused with a clear error.
//! Must not: touch sockets or media packets.

use std::net::SocketAddr;
use std::time::Instant;

use str0m::change::SdpOffer;
use str0m::format::Codec;
use str0m::media::{Direction, MediaKind, Mid};
use str0m::rtp::{Extension, ExtensionMap};
use str0m::{Candidate, Output, Rtc};

/// Extension id we offer for abs-capture-time when the client did not pick one.
const ABS_CAPTURE_TIME_ID: u8 = 9;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VideoCodec {
    H264,
    Vp8,
}

impl VideoCodec {
    pub fn codec(self) -> Codec {
        match self {
            VideoCodec::H264 => Codec::H264,
            VideoCodec::Vp8 => Codec::Vp8,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            VideoCodec::H264 => "H264",
            VideoCodec::Vp8 => "VP8",
        }
    }
}

/// Server-wide settings applied to every participant's `Rtc`.
#[derive(Clone, Debug)]
pub struct RtcSettings {
    pub video_codec: VideoCodec,
}

/// Why an offer was refused; `code` is the stable error code of the HTTP API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferError {
    pub code: &'static str,
    pub message: String,
}

impl OfferError {
    fn bad(message: impl Into<String>) -> Self {
        OfferError {
            code: "bad_offer",
            message: message.into(),
        }
    }
}

impl std::fmt::Display for OfferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// A media line as the SFU sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaLine {
    pub mid: Mid,
    pub kind: MediaKind,
}

/// The outcome of a successful offer.
pub struct Accepted {
    pub rtc: Rtc,
    pub answer: String,
    /// Our ICE ufrag: how the shard recognises this participant's first STUN request.
    pub ufrag: String,
    /// m-lines the participant sends on (its published tracks).
    pub tracks: Vec<MediaLine>,
    /// m-lines the participant receives on (receive slots).
    pub slots: Vec<MediaLine>,
}

impl std::fmt::Debug for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accepted")
            .field("ufrag", &self.ufrag)
            .field("tracks", &self.tracks)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

/// Builds the `Rtc` for one participant: ICE-lite, RTP mode, only the room's codecs.
pub fn build_rtc(settings: &RtcSettings, now: Instant) -> Rtc {
    let mut cfg = Rtc::builder()
        // Per-participant loss/jitter/RTT for /api/v1/stats, once a second.
        .set_stats_interval(Some(std::time::Duration::from_secs(1)))
        .set_ice_lite(true)
        .set_rtp_mode(true)
        .clear_codecs()
        .enable_opus(true, false);
    cfg = match settings.video_codec {
        VideoCodec::H264 => cfg.enable_h264(true),
        VideoCodec::Vp8 => cfg.enable_vp8(true),
    };
    let mut exts = ExtensionMap::standard();
    exts.set(ABS_CAPTURE_TIME_ID, Extension::AbsoluteCaptureTime);
    cfg.set_extension_map(exts).build(now)
}

/// Accepts `sdp` for a participant whose media will arrive at `candidate`
/// (the shard's socket address as the client must see it).
pub fn accept_offer(
    settings: &RtcSettings,
    now: Instant,
    sdp: &str,
    candidate: SocketAddr,
) -> Result<Accepted, OfferError> {
    let mut rtc = build_rtc(settings, now);
    let answer = answer_offer(&mut rtc, settings, sdp, Some(candidate))?;
    let lines = initial_lines(&mut rtc, &answer)?;
    let ufrag = rtc.direct_api().local_ice_credentials().ufrag;
    Ok(Accepted {
        rtc,
        answer,
        ufrag,
        tracks: lines.tracks,
        slots: lines.slots,
    })
}

/// Media lines added by one negotiation.
#[derive(Default, Debug)]
pub struct NewLines {
    pub tracks: Vec<MediaLine>,
    pub slots: Vec<MediaLine>,
}

/// Parses and applies an offer on an existing `Rtc` (first offer or
/// renegotiation) and returns the SDP answer. The caller must drain the `Rtc`
/// afterwards, as str0m requires after every mutation.
pub fn answer_offer(
    rtc: &mut Rtc,
    settings: &RtcSettings,
    sdp: &str,
    candidate: Option<SocketAddr>,
) -> Result<String, OfferError> {
    let sdp = sdp.trim_start_matches('\u{feff}');
    if sdp.trim().is_empty() {
        return Err(OfferError::bad("the SDP offer is empty"));
    }
    if !sdp.trim_start().starts_with("v=") {
        return Err(OfferError::bad("the SDP offer must start with \"v=0\""));
    }
    if !sdp.contains("\nm=") {
        return Err(OfferError::bad("the SDP offer has no m-line"));
    }
    let offer = SdpOffer::from_sdp_string(sdp)
        .map_err(|e| OfferError::bad(format!("the SDP offer does not parse: {e}")))?;
    check_codecs(sdp, settings)?;
    if let Some(addr) = candidate {
        let c = Candidate::host(addr, "udp")
            .map_err(|e| OfferError::bad(format!("bad local candidate {addr}: {e}")))?;
        rtc.add_local_candidate(c);
    }
    let answer = rtc
        .sdp_api()
        .accept_offer(offer)
        .map_err(|e| OfferError::bad(format!("the SDP offer was refused: {e}")))?;
    Ok(candidates_everywhere(&answer.to_sdp_string()))
}

/// Repeats the answer's candidates, and `a=end-of-candidates`, in every
/// m-section. str0m writes them in the first section only, which is enough
/// under BUNDLE for browsers, but some stacks (aiortc) read a bundled
/// transport's candidates from another section and would find none.
fn candidates_everywhere(sdp: &str) -> String {
    let candidates: Vec<&str> = sdp
        .lines()
        .filter(|l| l.starts_with("a=candidate:"))
        .collect();
    let mut out = String::with_capacity(sdp.len() + 512);
    let mut section: Vec<&str> = Vec::new();
    let mut in_media = false;
    let flush = |out: &mut String, section: &mut Vec<&str>, media: bool| {
        let has_cand = section.iter().any(|l| l.starts_with("a=candidate:"));
        let has_end = section.contains(&"a=end-of-candidates");
        for l in section.drain(..) {
            out.push_str(l);
            out.push_str("\r\n");
        }
        if media {
            if !has_cand {
                for c in &candidates {
                    out.push_str(c);
                    out.push_str("\r\n");
                }
            }
            if !has_end {
                out.push_str("a=end-of-candidates\r\n");
            }
        }
    };
    for line in sdp.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        if line.starts_with("m=") {
            flush(&mut out, &mut section, in_media);
            in_media = true;
        }
        section.push(line);
    }
    flush(&mut out, &mut section, in_media);
    out
}

/// Drains a freshly negotiated `Rtc` (str0m's invariant after a mutation) and
/// reports its media lines, read from the answer's mids in m-line order.
fn initial_lines(rtc: &mut Rtc, answer: &str) -> Result<NewLines, OfferError> {
    for _ in 0..10_000 {
        match rtc.poll_output() {
            Ok(Output::Timeout(_)) => break,
            Ok(_) => {}
            Err(e) => return Err(OfferError::bad(format!("negotiation failed: {e}"))),
        }
    }
    let mut lines = NewLines::default();
    for mid in answer
        .lines()
        .filter_map(|l| l.trim_end().strip_prefix("a=mid:"))
    {
        let Some(media) = rtc.media(Mid::from(mid)) else {
            continue; // the data channel's m-line
        };
        let line = MediaLine {
            mid: media.mid(),
            kind: media.kind(),
        };
        match media.direction() {
            Direction::RecvOnly => lines.tracks.push(line),
            Direction::SendOnly => lines.slots.push(line),
            Direction::SendRecv => {
                lines.tracks.push(line);
                lines.slots.push(line);
            }
            Direction::Inactive => {}
        }
    }
    Ok(lines)
}

/// Every active audio m-line must offer Opus and every active video m-line the
/// room's video codec; otherwise the answer would silently disable the line.
fn check_codecs(sdp: &str, settings: &RtcSettings) -> Result<(), OfferError> {
    let video = settings.video_codec.name().to_ascii_lowercase();
    let mut section: Option<(String, bool, bool)> = None; // (kind, active, has codec)
    let mut fail: Option<String> = None;
    let mut finish = |s: Option<(String, bool, bool)>| {
        if let Some((kind, active, has)) = s
            && active
            && !has
            && fail.is_none()
        {
            let want = if kind == "audio" {
                "opus"
            } else {
                video.as_str()
            };
            fail = Some(format!(
                "an {kind} m-line offers no {} (this server forwards {} video and Opus audio)",
                want.to_ascii_uppercase(),
                settings.video_codec.name()
            ));
        }
    };
    for line in sdp.lines() {
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix("m=") {
            finish(section.take());
            let mut it = rest.split_whitespace();
            let kind = it.next().unwrap_or_default().to_string();
            let port = it.next().unwrap_or("0");
            if kind == "audio" || kind == "video" {
                section = Some((kind, port != "0", false));
            }
        } else if let Some((kind, _, has)) = section.as_mut() {
            if let Some(rest) = line.strip_prefix("a=rtpmap:") {
                let enc = rest
                    .split_whitespace()
                    .nth(1)
                    .and_then(|e| e.split('/').next())
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                let want = if kind == "audio" {
                    "opus"
                } else {
                    video.as_str()
                };
                if enc == want {
                    *has = true;
                }
            } else if line == "a=inactive"
                && let Some(s) = section.as_mut()
            {
                s.1 = false;
            }
        }
    }
    finish(section.take());
    match fail {
        Some(message) => Err(OfferError {
            code: "codec_mismatch",
            message,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use str0m::change::SdpApi;

    fn settings() -> RtcSettings {
        RtcSettings {
            video_codec: VideoCodec::H264,
        }
    }

    fn client_offer(video: VideoCodec) -> String {
        let mut b = Rtc::builder().clear_codecs().enable_opus(true, false);
        b = match video {
            VideoCodec::H264 => b.enable_h264(true),
            VideoCodec::Vp8 => b.enable_vp8(true),
        };
        let mut rtc = b.build(Instant::now());
        let addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        rtc.add_local_candidate(Candidate::host(addr, "udp").unwrap());
        let mut api: SdpApi = rtc.sdp_api();
        api.add_media(MediaKind::Video, Direction::SendOnly, None, None, None);
        api.add_media(MediaKind::Audio, Direction::SendOnly, None, None, None);
        api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
        api.add_channel("events".into());
        let (offer, _pending) = api.apply().unwrap();
        offer.to_sdp_string()
    }

    #[test]
    fn accepts_a_publisher_with_slots() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let acc = accept_offer(
            &settings(),
            Instant::now(),
            &client_offer(VideoCodec::H264),
            addr,
        )
        .unwrap();
        assert_eq!(acc.tracks.len(), 2);
        assert_eq!(acc.slots.len(), 1);
        assert!(acc.answer.contains("a=ice-lite"));
        assert!(acc.answer.contains("H264"));
        assert!(!acc.answer.contains("VP8"));
        assert!(acc.answer.contains("127.0.0.1 3478"));
        // Every m-section carries the candidate and end-of-candidates.
        let sections = acc.answer.split("\r\nm=").skip(1).collect::<Vec<_>>();
        assert_eq!(sections.len(), 4);
        for sec in sections {
            assert!(sec.contains("a=candidate:"), "{sec}");
            assert!(sec.contains("a=end-of-candidates"), "{sec}");
        }
        assert!(!acc.ufrag.is_empty());
    }

    #[test]
    fn refuses_empty_and_garbage() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let e = accept_offer(&settings(), Instant::now(), "  ", addr).unwrap_err();
        assert_eq!(e.code, "bad_offer");
        assert!(e.message.contains("empty"));
        let e = accept_offer(&settings(), Instant::now(), "hello", addr).unwrap_err();
        assert_eq!(e.code, "bad_offer");
        let e =
            accept_offer(&settings(), Instant::now(), "v=0\r\nm=video x\r\n", addr).unwrap_err();
        assert_eq!(e.code, "bad_offer");
    }

    #[test]
    fn refuses_the_wrong_video_codec() {
        let addr = "127.0.0.1:3478".parse().unwrap();
        let e = accept_offer(
            &settings(),
            Instant::now(),
            &client_offer(VideoCodec::Vp8),
            addr,
        )
        .unwrap_err();
        assert_eq!(e.code, "codec_mismatch");
        assert!(e.message.contains("H264"), "{}", e.message);
    }
}
