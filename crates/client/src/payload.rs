//! Verifiable synthetic media payloads.
//!
//! Every RTP payload a virtual participant sends is
//!
//! ```text
//! codec header | "CRLY" | layer u8 | name_len u8 | name | frame u32 | index u16 | count u16 | capture_ns u64 | filler
//! ```
//!
//! (integers big endian). `layer` is the simulcast layer the packet was sent
//! on ([`LAYER_NONE`] without simulcast, else 1 + the rid's position, low
//! to high: see [`crate::simulcast`]), so a receiver knows which encoding
//! an SFU forwarded. The frame number counts capture instants of the
//! publisher's track, shared by its layers: a subscriber moved from one
//! layer to another sees the numbering continue. The codec header is what an SFU's keyframe
//! detection looks at (H.264 FU-A / single NAL unit, VP8 payload descriptor +
//! payload header, Opus TOC). The filler is a deterministic function of
//! (publisher name, frame, packet index), so a receiver can check every byte
//! without knowing anything but the payload itself: a forwarded packet that
//! was truncated, spliced or mixed up with another publisher's fails.
//!
//! Nothing here allocates on the verify path; [`write_payload`] appends to a
//! caller-owned buffer.

/// Magic that starts the stamp.
pub const MAGIC: [u8; 4] = *b"CRLY";
/// Longest publisher name carried in a payload (longer names are truncated).
pub const MAX_NAME: usize = 32;
/// Fixed part of the stamp: magic, layer, name length, frame, index, count, capture.
const STAMP_FIXED: usize = 4 + 1 + 1 + 4 + 2 + 2 + 8;
/// The `layer` of a track sent without simulcast.
pub const LAYER_NONE: u8 = 0;
/// Largest `layer` value (three simulcast layers).
pub const MAX_LAYER: u8 = 3;

/// Which payload format a packet uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadCodec {
    /// H.264 (RFC 6184): FU-A for multi-packet frames, single NAL unit otherwise.
    H264,
    /// VP8 (RFC 7741): 1-byte payload descriptor, VP8 payload header on the first packet.
    Vp8,
    /// VP9 (RFC 9628): a 3-byte payload descriptor (I, P, B, E; 15-bit
    /// picture id), one spatial and temporal layer.
    Vp9,
    /// AV1: the 1-byte aggregation header (Z, Y, W=1, N on a keyframe's
    /// first packet).
    Av1,
    /// Opus: one TOC byte.
    Opus,
}

impl From<corelay_core::VideoCodec> for PayloadCodec {
    fn from(c: corelay_core::VideoCodec) -> Self {
        match c {
            corelay_core::VideoCodec::H264 => PayloadCodec::H264,
            corelay_core::VideoCodec::Vp8 => PayloadCodec::Vp8,
            corelay_core::VideoCodec::Vp9 => PayloadCodec::Vp9,
            corelay_core::VideoCodec::Av1 => PayloadCodec::Av1,
        }
    }
}

/// The verifiable stamp of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp<'a> {
    /// Publisher name (at most [`MAX_NAME`] bytes).
    pub name: &'a str,
    /// Simulcast layer ([`LAYER_NONE`], or 1..=[`MAX_LAYER`]).
    pub layer: u8,
    /// Frame number (per publisher track, shared by its simulcast layers).
    pub frame: u32,
    /// Packet index within the frame.
    pub index: u16,
    /// Packets in the frame.
    pub count: u16,
    /// Capture time, CLOCK_MONOTONIC nanoseconds.
    pub capture_ns: u64,
}

/// A payload that passed verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified<'a> {
    /// The stamp.
    pub stamp: Stamp<'a>,
    /// Keyframe flag as far as the codec header tells (`None` when this
    /// packet's header cannot say, e.g. a VP8 continuation packet).
    pub keyframe: Option<bool>,
    /// VP9 SVC ([`crate::svc`]): the spatial layer (SID) of the payload
    /// descriptor's layer indices; `None` for every other payload.
    pub spatial: Option<u8>,
}

/// Why a payload failed verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyError {
    /// Too short for the codec header and stamp.
    Short,
    /// The codec header is not one we write.
    CodecHeader,
    /// The magic is missing.
    Magic,
    /// The name is not UTF-8 or too long.
    Name,
    /// The layer is above [`MAX_LAYER`].
    Layer,
    /// index >= count, or count == 0.
    Index,
    /// A filler byte differs.
    Filler,
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            VerifyError::Short => "payload too short",
            VerifyError::CodecHeader => "unexpected codec header",
            VerifyError::Magic => "missing CRLY magic",
            VerifyError::Name => "bad publisher name",
            VerifyError::Layer => "bad simulcast layer",
            VerifyError::Index => "bad packet index/count",
            VerifyError::Filler => "filler mismatch",
        };
        f.write_str(s)
    }
}

impl std::error::Error for VerifyError {}

/// FNV-1a 64 of a name: the filler seed.
pub fn name_hash(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Truncate a name to [`MAX_NAME`] bytes on a char boundary.
pub fn clamp_name(name: &str) -> &str {
    if name.len() <= MAX_NAME {
        return name;
    }
    let mut end = MAX_NAME;
    while end > 0 && !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// Length of the codec header `write_payload` puts in front of the stamp.
pub fn codec_header_len(codec: PayloadCodec, keyframe: bool, index: u16, count: u16) -> usize {
    match codec {
        PayloadCodec::H264 => {
            if count <= 1 {
                1
            } else {
                2
            }
        }
        PayloadCodec::Vp8 => {
            if index == 0 {
                // descriptor + 3-byte frame tag (+ 7 bytes start code and size on keyframes)
                if keyframe { 1 + 10 } else { 1 + 3 }
            } else {
                1
            }
        }
        PayloadCodec::Vp9 => 3,
        PayloadCodec::Av1 => 1,
        PayloadCodec::Opus => 1,
    }
}

/// Smallest payload that can carry a stamp for this name.
pub fn min_payload_len(
    codec: PayloadCodec,
    keyframe: bool,
    index: u16,
    count: u16,
    name: &str,
) -> usize {
    codec_header_len(codec, keyframe, index, count) + STAMP_FIXED + clamp_name(name).len()
}

fn write_codec_header(
    out: &mut Vec<u8>,
    codec: PayloadCodec,
    keyframe: bool,
    index: u16,
    count: u16,
) {
    match codec {
        PayloadCodec::H264 => {
            let nal_type: u8 = if keyframe { 5 } else { 1 };
            if count <= 1 {
                // Single NAL unit packet: F=0, NRI=3 for IDR, 2 otherwise.
                out.push(if keyframe {
                    0x60 | nal_type
                } else {
                    0x40 | nal_type
                });
            } else {
                // FU-A indicator: F=0, NRI=3, type 28.
                out.push(0x7C);
                let mut hdr = nal_type;
                if index == 0 {
                    hdr |= 0x80; // start
                }
                if index + 1 == count {
                    hdr |= 0x40; // end
                }
                out.push(hdr);
            }
        }
        PayloadCodec::Vp8 => {
            if index == 0 {
                out.push(0x10); // S=1, PID=0, no extensions
                // Frame tag: bit0 = !keyframe, version 0, show_frame=1, first
                // partition size (19 bits) left at a plausible small value.
                let first_part: u32 = 64;
                let tag: u32 = (if keyframe { 0 } else { 1 }) | (1 << 4) | (first_part << 5);
                out.push((tag & 0xff) as u8);
                out.push(((tag >> 8) & 0xff) as u8);
                out.push(((tag >> 16) & 0xff) as u8);
                if keyframe {
                    out.extend_from_slice(&[0x9d, 0x01, 0x2a]);
                    out.extend_from_slice(&640u16.to_le_bytes());
                    out.extend_from_slice(&360u16.to_le_bytes());
                }
            } else {
                out.push(0x00);
            }
        }
        PayloadCodec::Vp9 => {
            let mut b0 = 0x80; // I: a picture id follows
            if !keyframe {
                b0 |= 0x40; // P: inter-picture predicted
            }
            if index == 0 {
                b0 |= 0x08; // B: start of the frame
            }
            if index + 1 == count {
                b0 |= 0x04; // E: end of the frame
            }
            out.push(b0);
            // M=1, a 15-bit picture id (the stamp carries the real frame
            // number; any id a decoder would not trip on will do).
            out.extend_from_slice(&0x8000u16.to_be_bytes());
        }
        PayloadCodec::Av1 => {
            let mut h = 0x10; // W=1: one OBU element, no length field
            if index > 0 {
                h |= 0x80; // Z: continues the previous packet's OBU
            }
            if index + 1 < count {
                h |= 0x40; // Y: continues in the next packet
            }
            if keyframe && index == 0 {
                h |= 0x08; // N: a new coded video sequence starts
            }
            out.push(h);
        }
        PayloadCodec::Opus => {
            // TOC: config 11 (SILK WB 20 ms), mono, one frame.
            out.push(11 << 3);
        }
    }
}

#[inline]
const fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[inline]
fn filler_seed(stamp: &Stamp<'_>, name_hash: u64) -> u64 {
    // Everything in the stamp feeds the seed, so a flipped stamp bit shows
    // up as a filler mismatch (the layer through an odd multiplier: each of
    // its values moves the seed far from the others'; the same frame on two
    // layers has unrelated filler).
    let mut st = name_hash
        ^ (u64::from(stamp.frame) << 32)
        ^ (u64::from(stamp.index) << 16)
        ^ u64::from(stamp.count);
    splitmix(&mut st)
        ^ stamp.capture_ns
        ^ u64::from(stamp.layer).wrapping_mul(0xd6e8_feb8_6659_fd93)
}

/// Bytes of [`FILLER`]: a filler starts at one of its first
/// [`FILLER_STARTS`] bytes and runs on, wrapping around.
const FILLER_LEN: usize = 16 * 1024;
/// How many start offsets a filler can have.
const FILLER_STARTS: u64 = 8 * 1024;

/// A fixed pseudo-random table every filler is cut from: writing and
/// checking a filler is a copy and a comparison (`memcpy`, `memcmp`), not a
/// generator step per 8 bytes; at several gigabytes a second, a 1,200-byte
/// packet costs tens of nanoseconds instead of a few hundred.
static FILLER: [u8; FILLER_LEN] = filler_table();

const fn filler_table() -> [u8; FILLER_LEN] {
    let mut t = [0u8; FILLER_LEN];
    let mut st: u64 = 0x243f_6a88_85a3_08d3;
    let mut i = 0;
    while i < FILLER_LEN {
        let w = splitmix(&mut st).to_le_bytes();
        let mut k = 0;
        while k < 8 {
            t[i + k] = w[k];
            k += 1;
        }
        i += 8;
    }
    t
}

/// Where in [`FILLER`] the filler of `seed` starts.
fn filler_start(seed: u64) -> usize {
    // `seed` is a generator's output: its high bits are as good as any.
    ((seed >> 40) % FILLER_STARTS) as usize
}

/// A filler of `len` bytes: first the seed itself (8 bytes, so that a
/// changed stamp field shows with certainty), then [`FILLER`] from the
/// offset the seed picks, wrapping around (so that a piece of another
/// packet's filler, spliced in, shows: it started elsewhere).
fn write_filler(out: &mut Vec<u8>, seed: u64, len: usize) {
    let head = seed.to_le_bytes();
    let h = len.min(head.len());
    out.extend_from_slice(&head[..h]);
    let mut left = len - h;
    let mut at = filler_start(seed);
    while left > 0 {
        let piece = FILLER.get(at..).unwrap_or(&FILLER);
        let n = piece.len().min(left);
        out.extend_from_slice(&piece[..n]);
        left -= n;
        at = 0;
    }
}

fn check_filler(data: &[u8], seed: u64) -> bool {
    let head = seed.to_le_bytes();
    let (got, mut rest) = data.split_at(data.len().min(head.len()));
    if got != &head[..got.len()] {
        return false;
    }
    let mut at = filler_start(seed);
    while !rest.is_empty() {
        let piece = FILLER.get(at..).unwrap_or(&FILLER);
        let n = piece.len().min(rest.len());
        let (now, later) = rest.split_at(n);
        if now != &piece[..n] {
            return false;
        }
        rest = later;
        at = 0;
    }
    true
}

/// Append one payload of `total_len` bytes (or the minimum, whichever is
/// larger) to `out`. `name_hash` must be [`name_hash`] of the (clamped) name.
pub fn write_payload(
    out: &mut Vec<u8>,
    codec: PayloadCodec,
    keyframe: bool,
    stamp: &Stamp<'_>,
    name_hash_value: u64,
    total_len: usize,
) {
    let start = out.len();
    write_codec_header(out, codec, keyframe, stamp.index, stamp.count);
    write_stamp(out, start, stamp, name_hash_value, total_len);
}

/// Append one payload of `total_len` bytes (or the minimum) to `out` whose
/// codec header is `header` (a VP9 SVC descriptor from [`crate::svc`]).
pub fn write_payload_with_header(
    out: &mut Vec<u8>,
    header: &[u8],
    stamp: &Stamp<'_>,
    name_hash_value: u64,
    total_len: usize,
) {
    let start = out.len();
    out.extend_from_slice(header);
    write_stamp(out, start, stamp, name_hash_value, total_len);
}

/// The stamp and filler after a codec header written from `start`.
fn write_stamp(
    out: &mut Vec<u8>,
    start: usize,
    stamp: &Stamp<'_>,
    name_hash_value: u64,
    total_len: usize,
) {
    let name = clamp_name(stamp.name);
    out.extend_from_slice(&MAGIC);
    out.push(stamp.layer);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&stamp.frame.to_be_bytes());
    out.extend_from_slice(&stamp.index.to_be_bytes());
    out.extend_from_slice(&stamp.count.to_be_bytes());
    out.extend_from_slice(&stamp.capture_ns.to_be_bytes());
    let used = out.len() - start;
    let fill = total_len.saturating_sub(used);
    write_filler(out, filler_seed(stamp, name_hash_value), fill);
}

/// What the codec header says: its length, the keyframe flag if it tells,
/// and (VP9 SVC) the spatial layer.
type CodecHeader = (usize, Option<bool>, Option<u8>);

/// Parse the codec header.
fn parse_codec_header(codec: PayloadCodec, p: &[u8]) -> Result<CodecHeader, VerifyError> {
    // VP9 with layer indices and flexible mode: an SVC descriptor
    // ([`crate::svc`]), of a length that varies with the P_DIFF and the
    // scalability structure: read with the SFU's own parser.
    if codec == PayloadCodec::Vp9 && p.first().is_some_and(|b| b & 0xb0 == 0xb0) {
        let d = corelay_core::svc::vp9::parse(p).map_err(|_| VerifyError::CodecHeader)?;
        if !d.extended_picture_id {
            return Err(VerifyError::CodecHeader);
        }
        let key = d.start.then_some(!d.inter_picture && d.spatial == 0);
        return Ok((d.header_len, key, Some(d.spatial)));
    }
    let (len, key) = parse_plain_header(codec, p)?;
    Ok((len, key, None))
}

/// The headers [`write_codec_header`] writes.
fn parse_plain_header(codec: PayloadCodec, p: &[u8]) -> Result<(usize, Option<bool>), VerifyError> {
    let b0 = *p.first().ok_or(VerifyError::Short)?;
    match codec {
        PayloadCodec::H264 => {
            let t = b0 & 0x1f;
            if b0 & 0x80 != 0 {
                return Err(VerifyError::CodecHeader);
            }
            match t {
                28 => {
                    let h = *p.get(1).ok_or(VerifyError::Short)?;
                    let nt = h & 0x1f;
                    if nt != 1 && nt != 5 {
                        return Err(VerifyError::CodecHeader);
                    }
                    Ok((2, Some(nt == 5)))
                }
                1 => Ok((1, Some(false))),
                5 => Ok((1, Some(true))),
                _ => Err(VerifyError::CodecHeader),
            }
        }
        PayloadCodec::Vp8 => match b0 {
            0x10 => {
                let tag = *p.get(1).ok_or(VerifyError::Short)?;
                let key = tag & 1 == 0;
                let len = if key { 11 } else { 4 };
                if p.len() < len {
                    return Err(VerifyError::Short);
                }
                if key && p[4..7] != [0x9d, 0x01, 0x2a] {
                    return Err(VerifyError::CodecHeader);
                }
                Ok((len, Some(key)))
            }
            0x00 => Ok((1, None)),
            _ => Err(VerifyError::CodecHeader),
        },
        PayloadCodec::Vp9 => {
            if b0 & 0xb3 != 0x80 || p.len() < 3 {
                return Err(VerifyError::CodecHeader);
            }
            Ok((3, (b0 & 0x08 != 0).then_some(b0 & 0x40 == 0)))
        }
        PayloadCodec::Av1 => {
            if b0 & 0x37 != 0x10 {
                return Err(VerifyError::CodecHeader);
            }
            Ok((1, (b0 & 0x80 == 0).then_some(b0 & 0x08 != 0)))
        }
        PayloadCodec::Opus => Ok((1, None)),
    }
}

/// Verify a payload written by [`write_payload`]. Never panics on any input.
pub fn verify(codec: PayloadCodec, p: &[u8]) -> Result<Verified<'_>, VerifyError> {
    let (hl, keyframe, spatial) = parse_codec_header(codec, p)?;
    let rest = p.get(hl..).ok_or(VerifyError::Short)?;
    if rest.len() < STAMP_FIXED {
        return Err(VerifyError::Short);
    }
    if rest[..4] != MAGIC {
        return Err(VerifyError::Magic);
    }
    let layer = rest[4];
    if layer > MAX_LAYER {
        return Err(VerifyError::Layer);
    }
    let nl = rest[5] as usize;
    if nl > MAX_NAME {
        return Err(VerifyError::Name);
    }
    let need = STAMP_FIXED + nl;
    if rest.len() < need {
        return Err(VerifyError::Short);
    }
    let name = std::str::from_utf8(&rest[6..6 + nl]).map_err(|_| VerifyError::Name)?;
    let mut o = 6 + nl;
    let rd4 = |o: usize| [rest[o], rest[o + 1], rest[o + 2], rest[o + 3]];
    let frame = u32::from_be_bytes(rd4(o));
    o += 4;
    let index = u16::from_be_bytes([rest[o], rest[o + 1]]);
    o += 2;
    let count = u16::from_be_bytes([rest[o], rest[o + 1]]);
    o += 2;
    let mut c8 = [0u8; 8];
    c8.copy_from_slice(&rest[o..o + 8]);
    let capture_ns = u64::from_be_bytes(c8);
    o += 8;
    if count == 0 || index >= count {
        return Err(VerifyError::Index);
    }
    // Cross-check the codec header against the stamp where the format says
    // something about the packet's position in the frame.
    if codec == PayloadCodec::H264 && count > 1 {
        let h = p[1];
        let start = h & 0x80 != 0;
        let end = h & 0x40 != 0;
        if start != (index == 0) || end != (index + 1 == count) || p[0] & 0x1f != 28 {
            return Err(VerifyError::CodecHeader);
        }
    }
    if codec == PayloadCodec::Vp8 && (p[0] == 0x10) != (index == 0) {
        return Err(VerifyError::CodecHeader);
    }
    if spatial.is_some_and(|s| layer != s + 1) {
        return Err(VerifyError::Layer);
    }
    let stamp = Stamp {
        name,
        layer,
        frame,
        index,
        count,
        capture_ns,
    };
    if !check_filler(&rest[o..], filler_seed(&stamp, name_hash(name))) {
        return Err(VerifyError::Filler);
    }
    Ok(Verified {
        stamp,
        keyframe,
        spatial,
    })
}

/// Split a frame of `frame_bytes` into packets of at most `max_payload`
/// bytes; returns the packet count (at least 1) and the size of each packet
/// (the first packets get the remainder).
pub fn split_frame(frame_bytes: usize, max_payload: usize) -> (u16, usize, usize) {
    let max = max_payload.max(1);
    let n = frame_bytes.div_ceil(max).clamp(1, u16::MAX as usize);
    let base = frame_bytes / n;
    let rem = frame_bytes % n;
    (n as u16, base, rem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk(codec: PayloadCodec, key: bool, index: u16, count: u16, len: usize) -> Vec<u8> {
        let st = Stamp {
            name: "alice",
            layer: LAYER_NONE,
            frame: 77,
            index,
            count,
            capture_ns: 123_456_789,
        };
        let mut v = Vec::new();
        write_payload(&mut v, codec, key, &st, name_hash("alice"), len);
        v
    }

    #[test]
    fn h264_fu_a_roundtrip() {
        let first = mk(PayloadCodec::H264, true, 0, 3, 1100);
        assert_eq!(first.len(), 1100);
        assert_eq!(&first[..2], &[0x7C, 0x85]);
        let mid = mk(PayloadCodec::H264, true, 1, 3, 1100);
        assert_eq!(&mid[..2], &[0x7C, 0x05]);
        let last = mk(PayloadCodec::H264, true, 2, 3, 900);
        assert_eq!(&last[..2], &[0x7C, 0x45]);
        let d = mk(PayloadCodec::H264, false, 0, 2, 1000);
        assert_eq!(&d[..2], &[0x7C, 0x81]);
        let d = mk(PayloadCodec::H264, false, 1, 2, 1000);
        assert_eq!(&d[..2], &[0x7C, 0x41]);
        let v = verify(PayloadCodec::H264, &first).unwrap();
        assert_eq!(v.stamp.name, "alice");
        assert_eq!(v.stamp.frame, 77);
        assert_eq!(v.stamp.index, 0);
        assert_eq!(v.stamp.count, 3);
        assert_eq!(v.stamp.capture_ns, 123_456_789);
        assert_eq!(v.keyframe, Some(true));
        assert_eq!(verify(PayloadCodec::H264, &last).unwrap().stamp.index, 2);
    }

    #[test]
    fn h264_single_nal() {
        let p = mk(PayloadCodec::H264, false, 0, 1, 400);
        assert_eq!(p[0], 0x41);
        let v = verify(PayloadCodec::H264, &p).unwrap();
        assert_eq!(v.keyframe, Some(false));
        let p = mk(PayloadCodec::H264, true, 0, 1, 400);
        assert_eq!(p[0], 0x65);
        assert_eq!(verify(PayloadCodec::H264, &p).unwrap().keyframe, Some(true));
    }

    #[test]
    fn vp8_roundtrip() {
        let k = mk(PayloadCodec::Vp8, true, 0, 2, 1000);
        assert_eq!(k[0], 0x10);
        assert_eq!(k[1] & 1, 0);
        assert_eq!(verify(PayloadCodec::Vp8, &k).unwrap().keyframe, Some(true));
        let d = mk(PayloadCodec::Vp8, false, 0, 2, 1000);
        assert_eq!(d[1] & 1, 1);
        assert_eq!(verify(PayloadCodec::Vp8, &d).unwrap().keyframe, Some(false));
        let c = mk(PayloadCodec::Vp8, false, 1, 2, 1000);
        assert_eq!(c[0], 0x00);
        assert_eq!(verify(PayloadCodec::Vp8, &c).unwrap().keyframe, None);
    }

    #[test]
    fn opus_roundtrip_and_min_len() {
        let p = mk(PayloadCodec::Opus, false, 0, 1, 10);
        assert_eq!(
            p.len(),
            min_payload_len(PayloadCodec::Opus, false, 0, 1, "alice")
        );
        assert!(verify(PayloadCodec::Opus, &p).is_ok());
    }

    #[test]
    fn detects_corruption_everywhere() {
        let good = mk(PayloadCodec::H264, false, 1, 3, 1200);
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            assert!(
                verify(PayloadCodec::H264, &bad).is_err(),
                "flip at {i} not detected"
            );
        }
        for n in 0..good.len() {
            // Truncations are detected unless they only cut filler... which
            // they always do past the stamp; the filler check still passes for
            // a prefix, so only check truncations into the header/stamp.
            if n < 2 + STAMP_FIXED + 5 {
                assert!(verify(PayloadCodec::H264, &good[..n]).is_err());
            }
        }
    }

    #[test]
    fn detects_filler_spliced_from_another_packet() {
        // The tail of another packet of the same publisher and frame (or of
        // the same packet index in the next frame), spliced in after the
        // stamp, fails: that filler started elsewhere in the table.
        let a = mk(PayloadCodec::H264, false, 1, 3, 1200);
        for other in [
            mk(PayloadCodec::H264, false, 0, 3, 1200),
            mk(PayloadCodec::H264, false, 2, 3, 1200),
        ] {
            for cut in [40, 100, 600, 1199] {
                let mut bad = a.clone();
                bad[cut..].copy_from_slice(&other[cut..]);
                assert_eq!(
                    verify(PayloadCodec::H264, &bad),
                    Err(VerifyError::Filler),
                    "splice at {cut}"
                );
            }
        }
    }

    #[test]
    fn fillers_longer_than_the_table_wrap_and_verify() {
        for len in [FILLER_LEN - 100, FILLER_LEN + 5, 3 * FILLER_LEN + 7] {
            let good = mk(PayloadCodec::H264, false, 1, 3, len);
            assert_eq!(good.len(), len);
            assert!(verify(PayloadCodec::H264, &good).is_ok());
            let mut bad = good.clone();
            bad[len - 1] ^= 0x80;
            assert_eq!(verify(PayloadCodec::H264, &bad), Err(VerifyError::Filler));
        }
    }

    #[test]
    fn never_panics_on_garbage() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20_000 {
            let len = rng.usize(0..64);
            let mut v: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            if len > 7 && rng.bool() {
                v[2..6].copy_from_slice(&MAGIC);
                v[6] = rng.u8(0..=4);
            }
            for c in [
                PayloadCodec::H264,
                PayloadCodec::Vp8,
                PayloadCodec::Vp9,
                PayloadCodec::Av1,
                PayloadCodec::Opus,
            ] {
                let _ = verify(c, &v);
            }
        }
    }

    #[test]
    fn long_names_are_clamped() {
        let long = "x".repeat(50);
        let st = Stamp {
            name: &long,
            layer: 2,
            frame: 1,
            index: 0,
            count: 1,
            capture_ns: 5,
        };
        let mut v = Vec::new();
        write_payload(
            &mut v,
            PayloadCodec::Opus,
            false,
            &st,
            name_hash(clamp_name(&long)),
            80,
        );
        let got = verify(PayloadCodec::Opus, &v).unwrap();
        assert_eq!(got.stamp.name.len(), MAX_NAME);
        assert_eq!(got.stamp.layer, 2);
        assert_eq!(clamp_name("é".repeat(20).as_str()).len(), 32);
    }

    #[test]
    fn layer_is_carried_and_checked() {
        let at = |layer: u8| {
            let st = Stamp {
                name: "alice",
                layer,
                frame: 9,
                index: 1,
                count: 3,
                capture_ns: 42,
            };
            let mut v = Vec::new();
            write_payload(
                &mut v,
                PayloadCodec::H264,
                true,
                &st,
                name_hash("alice"),
                900,
            );
            v
        };
        for layer in 0..=MAX_LAYER {
            let p = at(layer);
            assert_eq!(p[6], layer); // FU-A (2) + magic (4)
            let v = verify(PayloadCodec::H264, &p).unwrap();
            assert_eq!((v.stamp.layer, v.stamp.frame, v.stamp.index), (layer, 9, 1));
        }
        // The same frame on another layer has other filler: a packet whose
        // layer byte was rewritten does not verify.
        for (a, b) in [(1u8, 2u8), (2, 3), (0, 1), (3, 1)] {
            let mut p = at(a);
            p[6] = b;
            assert_eq!(verify(PayloadCodec::H264, &p), Err(VerifyError::Filler));
        }
        let mut p = at(1);
        p[6] = MAX_LAYER + 1;
        assert_eq!(verify(PayloadCodec::H264, &p), Err(VerifyError::Layer));
        assert_ne!(at(1)[30..], at(2)[30..]);
    }

    #[test]
    fn split() {
        assert_eq!(split_frame(0, 1200), (1, 0, 0));
        assert_eq!(split_frame(1200, 1200), (1, 1200, 0));
        assert_eq!(split_frame(1201, 1200), (2, 600, 1));
    }
}
