//! Codec knowledge the SFU needs without decoding anything: is this RTP payload
//! the start of a keyframe, and which payload type on a subscriber's leg carries
//! the same codec as the publisher's.
//!
//! Pure functions over byte slices; every read is bounds-checked (network input).

use str0m::format::{Codec, CodecSpec};
use str0m::media::Pt;

/// True when `payload` (RTP payload, no header) begins a keyframe, i.e. a
/// subscriber that starts decoding here gets a picture.
pub fn is_keyframe_start(codec: Codec, payload: &[u8]) -> bool {
    match codec {
        Codec::H264 => h264_keyframe_start(payload),
        Codec::Vp8 => vp8_keyframe_start(payload),
        Codec::Vp9 => vp9_keyframe_start(payload),
        Codec::Av1 => av1_keyframe_start(payload),
        // Audio and codecs we do not gate on: every packet is a fine start.
        _ => true,
    }
}

/// H.264 (RFC 6184): an IDR slice or an SPS starts a decodable sequence, in a
/// single NAL unit packet, inside a STAP-A, or as the first fragment of a FU-A.
fn h264_keyframe_start(payload: &[u8]) -> bool {
    let Some(&first) = payload.first() else {
        return false;
    };
    match first & 0x1f {
        5 | 7 => true,
        24 => {
            // STAP-A: [hdr] then repeated [size u16][nal...].
            let mut rest = payload.get(1..).unwrap_or_default();
            while let (Some(&hi), Some(&lo), Some(&nal)) = (rest.first(), rest.get(1), rest.get(2))
            {
                let size = usize::from(u16::from_be_bytes([hi, lo]));
                {
                    if matches!(nal & 0x1f, 5 | 7) {
                        return true;
                    }
                }
                rest = rest.get(2 + size..).unwrap_or_default();
            }
            false
        }
        28 => payload
            .get(1)
            .is_some_and(|fu| fu & 0x80 != 0 && matches!(fu & 0x1f, 5 | 7)),
        _ => false,
    }
}

/// VP8 (RFC 7741): the first partition start (S=1, PID=0) whose payload header
/// has the P bit cleared.
fn vp8_keyframe_start(payload: &[u8]) -> bool {
    let Some(&b0) = payload.first() else {
        return false;
    };
    let start = b0 & 0x10 != 0;
    let pid = b0 & 0x07;
    if !start || pid != 0 {
        return false;
    }
    let mut off = 1;
    if b0 & 0x80 != 0 {
        // X: extension byte with I, L, T, K flags.
        let Some(&x) = payload.get(1) else {
            return false;
        };
        off = 2;
        if x & 0x80 != 0 {
            // I: PictureID, 7 or 15 bits.
            let Some(&pic) = payload.get(off) else {
                return false;
            };
            off += if pic & 0x80 != 0 { 2 } else { 1 };
        }
        if x & 0x40 != 0 {
            off += 1; // L: TL0PICIDX
        }
        if x & 0x30 != 0 {
            off += 1; // T or K
        }
    }
    payload.get(off).is_some_and(|h| h & 0x01 == 0)
}

/// VP9 (RFC 9628): the first packet (B) of a picture without inter-picture
/// prediction (P clear) at spatial layer 0 (SID 0, or no layer indices).
/// A descriptor that does not parse is no start.
fn vp9_keyframe_start(payload: &[u8]) -> bool {
    crate::svc::vp9::parse(payload).is_ok_and(|d| d.svc().keyframe)
}

/// AV1 (AV1 RTP specification 4.4): the aggregation header `Z Y W W N - - -`
/// of the first packet of a coded video sequence has N set, and Z clear (it
/// does not continue an OBU from the previous packet).
fn av1_keyframe_start(payload: &[u8]) -> bool {
    payload
        .first()
        .is_some_and(|&h| h & 0x80 == 0 && h & 0x08 != 0)
}

/// The frame width of a VP8 keyframe's first packet (RFC 6386 9.1: after
/// the payload descriptor, the 3-byte frame tag, the start code 9d 01 2a,
/// then 14 bits of width).
pub fn vp8_keyframe_width(payload: &[u8]) -> Option<u16> {
    if !vp8_keyframe_start(payload) {
        return None;
    }
    let b0 = *payload.first()?;
    let mut off = 1;
    if b0 & 0x80 != 0 {
        let x = *payload.get(1)?;
        off = 2;
        if x & 0x80 != 0 {
            off += if *payload.get(off)? & 0x80 != 0 { 2 } else { 1 };
        }
        if x & 0x40 != 0 {
            off += 1;
        }
        if x & 0x30 != 0 {
            off += 1;
        }
    }
    let h = payload.get(off..off + 10)?;
    if h.get(3..6)? != [0x9d, 0x01, 0x2a] {
        return None;
    }
    let w = u16::from_le_bytes([*h.get(6)?, *h.get(7)?]) & 0x3fff;
    (w > 0).then_some(w)
}

/// The VP8 temporal layer of a packet (its payload descriptor's TID), and
/// whether the packet starts a frame: `None` when the descriptor has no
/// TID (one temporal layer).
pub fn vp8_temporal(payload: &[u8]) -> Option<(u8, bool)> {
    let b0 = *payload.first()?;
    if b0 & 0x80 == 0 {
        return None;
    }
    let x = *payload.get(1)?;
    if x & 0x20 == 0 {
        return None; // no T: no TID
    }
    let mut off = 2;
    if x & 0x80 != 0 {
        let pic = *payload.get(off)?;
        off += if pic & 0x80 != 0 { 2 } else { 1 };
    }
    if x & 0x40 != 0 {
        off += 1;
    }
    let tk = *payload.get(off)?;
    let start = b0 & 0x10 != 0 && b0 & 0x07 == 0;
    Some((tk >> 6, start))
}

/// Whether a subscriber's payload format `cand` can carry what a publisher sends
/// as `src`: same codec and clock; for H.264 also the same packetization mode
/// and profile (constrained baseline and baseline count as one); for VP9 the
/// same profile.
pub fn compatible(src: &CodecSpec, cand: &CodecSpec) -> bool {
    if src.codec != cand.codec || src.clock_rate != cand.clock_rate {
        return false;
    }
    if src.codec == Codec::H264 {
        let pm = |s: &CodecSpec| s.format.packetization_mode.unwrap_or(0);
        let profile = |s: &CodecSpec| s.format.profile_level_id.map(|p| (p >> 16) & 0xff);
        return pm(src) == pm(cand) && profile(src) == profile(cand);
    }
    if src.codec == Codec::Vp9 {
        // Profile 2 is 10-bit: a profile 0 decoder cannot take it.
        return src.format.profile_id.unwrap_or(0) == cand.format.profile_id.unwrap_or(0);
    }
    true
}

/// Picks the payload type on a subscriber's leg for a publisher's codec: an exact
/// profile match first, then any payload type of the same codec.
pub fn map_pt<'a>(
    src: &CodecSpec,
    candidates: impl Iterator<Item = (Pt, &'a CodecSpec)> + Clone,
) -> Option<Pt> {
    candidates
        .clone()
        .find(|(_, c)| compatible(src, c))
        .or_else(|| candidates.into_iter().find(|(_, c)| c.codec == src.codec))
        .map(|(pt, _)| pt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h264_keyframes() {
        assert!(is_keyframe_start(Codec::H264, &[0x65, 1, 2]));
        assert!(is_keyframe_start(Codec::H264, &[0x67, 1, 2]));
        assert!(!is_keyframe_start(Codec::H264, &[0x41, 1, 2]));
        // FU-A start of IDR, FU-A continuation, FU-A start of non-IDR.
        assert!(is_keyframe_start(Codec::H264, &[0x7c, 0x85, 0]));
        assert!(!is_keyframe_start(Codec::H264, &[0x7c, 0x05, 0]));
        assert!(!is_keyframe_start(Codec::H264, &[0x7c, 0x81, 0]));
        // STAP-A with SPS inside; STAP-A with only a non-IDR slice.
        assert!(is_keyframe_start(Codec::H264, &[0x78, 0, 2, 0x67, 0x42]));
        assert!(!is_keyframe_start(Codec::H264, &[0x78, 0, 2, 0x41, 0x42]));
        // Truncated inputs never panic.
        assert!(!is_keyframe_start(Codec::H264, &[]));
        assert!(!is_keyframe_start(Codec::H264, &[0x7c]));
        assert!(!is_keyframe_start(Codec::H264, &[0x78, 0xff, 0xff]));
    }

    #[test]
    fn vp8_keyframes() {
        assert!(is_keyframe_start(Codec::Vp8, &[0x10, 0x00]));
        assert!(!is_keyframe_start(Codec::Vp8, &[0x10, 0x01]));
        assert!(!is_keyframe_start(Codec::Vp8, &[0x00, 0x00]));
        // X=1, I=1 with 15-bit picture id, then keyframe header.
        assert!(is_keyframe_start(
            Codec::Vp8,
            &[0x90, 0x80, 0x81, 0x02, 0x00]
        ));
        assert!(!is_keyframe_start(Codec::Vp8, &[0x90, 0x80, 0x81]));
        assert!(!is_keyframe_start(Codec::Vp8, &[]));
    }

    #[test]
    fn vp8_keyframe_widths() {
        // Descriptor (S, no X), frame tag (keyframe), start code, 640x360.
        let key = [
            0x10, 0x50, 0x2b, 0x01, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0x68, 0x01,
        ];
        assert_eq!(vp8_keyframe_width(&key), Some(640));
        let mut delta = key;
        delta[1] |= 0x01; // inter frame
        assert_eq!(vp8_keyframe_width(&delta), None);
        assert_eq!(vp8_keyframe_width(&key[..8]), None);
        let mut bad = key;
        bad[5] = 0;
        assert_eq!(vp8_keyframe_width(&bad), None);
    }

    #[test]
    fn vp8_temporal_layer_ids() {
        // X, I (15-bit), L, T: TID 2, frame start.
        assert_eq!(
            vp8_temporal(&[0x90, 0xe0, 0x81, 0x02, 7, 0x80, 0]),
            Some((2, true))
        );
        // Not a frame start (S clear).
        assert_eq!(
            vp8_temporal(&[0x80, 0xe0, 0x81, 0x02, 7, 0x40, 0]),
            Some((1, false))
        );
        // No T: one temporal layer.
        assert_eq!(vp8_temporal(&[0x90, 0xc0, 0x81, 0x02, 7, 0]), None);
        assert_eq!(vp8_temporal(&[0x10, 0]), None);
        assert_eq!(vp8_temporal(&[0x90, 0xe0, 0x81]), None);
    }

    #[test]
    fn vp9_keyframes() {
        // No L: B set, P clear.
        assert!(is_keyframe_start(Codec::Vp9, &[0x08, 0]));
        // 7-bit picture id, L with SID 0, TL0PICIDX.
        assert!(is_keyframe_start(Codec::Vp9, &[0xa8, 1, 0x00, 0, 0]));
        // SID 1 with D: an upper layer of a keyframe, not its start.
        assert!(!is_keyframe_start(Codec::Vp9, &[0xa8, 1, 0x03, 0, 0]));
        // P set; B clear.
        assert!(!is_keyframe_start(Codec::Vp9, &[0xe8, 1, 0x00, 0, 0]));
        assert!(!is_keyframe_start(Codec::Vp9, &[0xa0, 1, 0x00, 0, 0]));
        // Truncated or empty after the descriptor.
        assert!(!is_keyframe_start(Codec::Vp9, &[0xa8, 1, 0x00, 0]));
        assert!(!is_keyframe_start(Codec::Vp9, &[0x08]));
        assert!(!is_keyframe_start(Codec::Vp9, &[]));
    }

    #[test]
    fn av1_keyframes() {
        // N set, Z clear (W=1 or 0, Y either way).
        assert!(is_keyframe_start(Codec::Av1, &[0x18, 0]));
        assert!(is_keyframe_start(Codec::Av1, &[0x48, 0]));
        // Z set: continues an OBU, even with N.
        assert!(!is_keyframe_start(Codec::Av1, &[0x88, 0]));
        // N clear.
        assert!(!is_keyframe_start(Codec::Av1, &[0x10, 0]));
        assert!(!is_keyframe_start(Codec::Av1, &[]));
    }

    #[test]
    fn audio_is_never_gated() {
        assert!(is_keyframe_start(Codec::Opus, &[]));
    }
}
