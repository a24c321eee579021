//! The VP9 RTP payload descriptor (RFC 9628 section 4.2, formerly
//! draft-ietf-payload-vp9), read on the packet path.
//!
//! Owns: reading one packet's descriptor into a [`Vp9Descriptor`] (the flags,
//! picture id, layer indices, TL0PICIDX, flexible-mode P_DIFFs and the
//! scalability structure) and mapping it to the common [`SvcPacket`].
//! [`parse`] is pure and allocation-free: everything lands in fixed-size
//! arrays, every read is bounds-checked, and a truncated or inconsistent
//! descriptor is an error ([`Vp9Error`]), never a guess and never a panic.
//!
//! Must not: keep state across packets (the spatial layer count and
//! resolutions a stream announced are the caller's to remember; so a SID
//! beyond the last announced N_S is not checked here), decode the VP9
//! bitstream after the descriptor, or decide what a subscriber gets (the
//! engine's slot does that).
//!
//! Layout, one byte a row (bit 0 is the most significant):
//!
//! ```text
//!       +-+-+-+-+-+-+-+-+
//!       |I|P|L|F|B|E|V|Z|
//!  I:   |M| PICTURE ID  |        M: one more byte, 15-bit picture id
//!  M:   | EXTENDED PID  |
//!  L:   | TID |U| SID |D|
//!       |   TL0PICIDX   |        non-flexible mode (F=0) only
//!  P,F: | P_DIFF      |N|        up to 3 times, N: another follows
//!  V:   | SS ...        |
//! ```
//!
//! and the scalability structure (SS):
//!
//! ```text
//!       | N_S |Y|G|-|-|-|
//!  Y:   | WIDTH  (16)   |        N_S + 1 times
//!       | HEIGHT (16)   |
//!  G:   |      N_G      |
//!       | T |U| R |-|-|         N_G times, each followed by
//!       |    P_DIFF     |        R (0..=3) P_DIFFs
//! ```

use super::SvcPacket;

/// At most this many reference P_DIFFs per picture (RFC 9628: flexible mode
/// carries up to 3; a picture group entry's R field is 2 bits).
pub const MAX_P_DIFFS: usize = 3;

/// At most this many spatial layers in a scalability structure (N_S is 3
/// bits).
pub const MAX_SPATIAL_LAYERS: usize = 8;

/// The largest picture group (N_G) accepted in a scalability structure.
/// N_G is 8 bits on the wire, but a non-flexible picture group is one
/// temporal period (libvpx and libwebrtc use at most 4 pictures; 16 would
/// already be unusual), so 64 leaves ample room while keeping
/// [`Vp9Descriptor`] a few hundred bytes on the stack. A larger N_G is
/// [`Vp9Error::GofTooLarge`].
pub const MAX_GOF: usize = 64;

/// Why a payload's descriptor could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vp9Error {
    /// The payload ends inside the descriptor (an empty payload included).
    Truncated,
    /// No VP9 data after the descriptor.
    EmptyPayload,
    /// Flexible mode with P_DIFFs but no picture id to apply them to.
    FlexibleWithoutPictureId,
    /// More than [`MAX_P_DIFFS`] P_DIFFs (the N bit of the third is set).
    TooManyRefs,
    /// A picture group larger than [`MAX_GOF`].
    GofTooLarge,
}

/// One picture of a scalability structure's picture group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vp9GofEntry {
    /// T: the picture's temporal layer id.
    pub temporal: u8,
    /// U: switching up point.
    pub switching_up: bool,
    /// R: how many of `p_diffs` are meaningful (0..=3).
    pub num_refs: u8,
    /// The reference P_DIFFs (8 bits each in the structure).
    pub p_diffs: [u8; MAX_P_DIFFS],
}

impl Vp9GofEntry {
    /// The meaningful P_DIFFs.
    pub fn p_diffs(&self) -> &[u8] {
        self.p_diffs
            .get(..usize::from(self.num_refs))
            .unwrap_or_default()
    }
}

/// The scalability structure (SS, present when V is set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vp9Scalability {
    /// N_S + 1: how many spatial layers the stream has (1..=8).
    pub spatial_layers: u8,
    /// Y: `width` and `height` are present for every spatial layer.
    pub resolutions_present: bool,
    /// Per spatial layer width, 0 where Y is clear or beyond
    /// `spatial_layers`.
    pub width: [u16; MAX_SPATIAL_LAYERS],
    /// Per spatial layer height, as `width`.
    pub height: [u16; MAX_SPATIAL_LAYERS],
    /// G: a picture group description is present.
    pub gof_present: bool,
    /// N_G: how many entries of `gof` are meaningful (0 when G is clear).
    pub gof_len: u8,
    /// The picture group (only the first `gof_len` entries are meaningful).
    pub gof: [Vp9GofEntry; MAX_GOF],
}

impl Vp9Scalability {
    const EMPTY: Vp9Scalability = Vp9Scalability {
        spatial_layers: 1,
        resolutions_present: false,
        width: [0; MAX_SPATIAL_LAYERS],
        height: [0; MAX_SPATIAL_LAYERS],
        gof_present: false,
        gof_len: 0,
        gof: [Vp9GofEntry {
            temporal: 0,
            switching_up: false,
            num_refs: 0,
            p_diffs: [0; MAX_P_DIFFS],
        }; MAX_GOF],
    };

    /// The picture group's meaningful entries.
    pub fn gof(&self) -> &[Vp9GofEntry] {
        self.gof
            .get(..usize::from(self.gof_len))
            .unwrap_or_default()
    }

    /// Width and height of a spatial layer, when announced (Y set, the layer
    /// within N_S, and neither zero).
    pub fn resolution(&self, spatial: u8) -> Option<(u16, u16)> {
        if !self.resolutions_present || spatial >= self.spatial_layers {
            return None;
        }
        let i = usize::from(spatial);
        let w = *self.width.get(i)?;
        let h = *self.height.get(i)?;
        (w > 0 && h > 0).then_some((w, h))
    }
}

/// One packet's VP9 payload descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vp9Descriptor {
    /// The picture id (I), 7 bits, or 15 when `extended_picture_id` (M).
    pub picture_id: Option<u16>,
    /// M: `picture_id` is 15 bits.
    pub extended_picture_id: bool,
    /// P: inter-picture predicted (references an earlier picture).
    pub inter_picture: bool,
    /// L: layer indices present.
    pub layer_indices: bool,
    /// F: flexible mode.
    pub flexible: bool,
    /// B: start of a layer frame.
    pub start: bool,
    /// E: end of a layer frame.
    pub end: bool,
    /// V: a scalability structure is present (`ss`).
    pub ss_present: bool,
    /// Z: not a reference for upper spatial layers.
    pub not_ref_for_upper: bool,
    /// TID, 0 when L is clear.
    pub temporal: u8,
    /// U: switching up point (temporal), false when L is clear.
    pub switching_up: bool,
    /// SID, 0 when L is clear.
    pub spatial: u8,
    /// D: inter-layer dependency, false when L is clear.
    pub inter_layer: bool,
    /// TL0PICIDX (non-flexible mode with L).
    pub tl0_pic_idx: Option<u8>,
    /// How many of `p_diffs` are meaningful (flexible mode with P; 0..=3).
    pub num_p_diffs: u8,
    /// The 7-bit P_DIFFs (reference picture id = picture id - P_DIFF).
    pub p_diffs: [u8; MAX_P_DIFFS],
    /// The scalability structure, when V is set.
    pub ss: Option<Vp9Scalability>,
    /// Bytes of descriptor before the VP9 payload; always less than the
    /// payload's length (a descriptor with no VP9 data after it is an
    /// error).
    pub header_len: usize,
}

impl Vp9Descriptor {
    /// The meaningful flexible-mode P_DIFFs.
    pub fn p_diffs(&self) -> &[u8] {
        self.p_diffs
            .get(..usize::from(self.num_p_diffs))
            .unwrap_or_default()
    }

    /// The common answer for the engine.
    ///
    /// `keyframe`: B set, P clear, spatial layer 0: the first packet of a
    /// picture with no inter-picture prediction at its base layer. Upper
    /// layers of that picture (P clear, usually D set) are `switch_up`, not
    /// `keyframe`. `switch_up`: P clear, the layer frame references no
    /// earlier picture, so a subscriber can start taking its spatial layer
    /// here.
    pub fn svc(&self) -> SvcPacket {
        SvcPacket {
            spatial: self.spatial,
            temporal: self.temporal,
            frame_start: self.start,
            frame_end: self.end,
            keyframe: self.start && !self.inter_picture && self.spatial == 0,
            switch_up: !self.inter_picture,
            spatial_layers: self.ss.as_ref().map(|ss| ss.spatial_layers),
        }
    }

    /// The width of a spatial layer, from this packet's scalability structure
    /// when it has one with resolutions.
    pub fn width_of(&self, spatial: u8) -> Option<u16> {
        self.ss.as_ref()?.resolution(spatial).map(|(w, _)| w)
    }
}

/// Bounds-checked cursor over the descriptor.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, Vp9Error> {
        let b = *self.buf.get(self.pos).ok_or(Vp9Error::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn u16(&mut self) -> Result<u16, Vp9Error> {
        Ok(u16::from_be_bytes([self.u8()?, self.u8()?]))
    }
}

/// Reads the descriptor at the start of a VP9 RTP payload (no RTP header).
///
/// Errors: the payload ends inside the descriptor or has no VP9 data after
/// it; flexible-mode P_DIFFs without a picture id (as libwebrtc); a fourth
/// P_DIFF; a picture group larger than [`MAX_GOF`].
pub fn parse(payload: &[u8]) -> Result<Vp9Descriptor, Vp9Error> {
    let mut r = Reader {
        buf: payload,
        pos: 0,
    };
    let b0 = r.u8()?;
    let mut d = Vp9Descriptor {
        picture_id: None,
        extended_picture_id: false,
        inter_picture: b0 & 0x40 != 0,
        layer_indices: b0 & 0x20 != 0,
        flexible: b0 & 0x10 != 0,
        start: b0 & 0x08 != 0,
        end: b0 & 0x04 != 0,
        ss_present: b0 & 0x02 != 0,
        not_ref_for_upper: b0 & 0x01 != 0,
        temporal: 0,
        switching_up: false,
        spatial: 0,
        inter_layer: false,
        tl0_pic_idx: None,
        num_p_diffs: 0,
        p_diffs: [0; MAX_P_DIFFS],
        ss: None,
        header_len: 0,
    };
    if b0 & 0x80 != 0 {
        let hi = r.u8()?;
        d.picture_id = Some(if hi & 0x80 != 0 {
            d.extended_picture_id = true;
            u16::from_be_bytes([hi & 0x7f, r.u8()?])
        } else {
            u16::from(hi)
        });
    }
    if d.layer_indices {
        let l = r.u8()?;
        d.temporal = l >> 5;
        d.switching_up = l & 0x10 != 0;
        d.spatial = (l >> 1) & 0x07;
        d.inter_layer = l & 0x01 != 0;
        if !d.flexible {
            d.tl0_pic_idx = Some(r.u8()?);
        }
    }
    if d.flexible && d.inter_picture {
        if d.picture_id.is_none() {
            return Err(Vp9Error::FlexibleWithoutPictureId);
        }
        loop {
            let slot = d
                .p_diffs
                .get_mut(usize::from(d.num_p_diffs))
                .ok_or(Vp9Error::TooManyRefs)?;
            let b = r.u8()?;
            *slot = b >> 1;
            d.num_p_diffs += 1;
            if b & 0x01 == 0 {
                break;
            }
        }
    }
    if d.ss_present {
        d.ss = Some(parse_ss(&mut r)?);
    }
    if r.pos >= payload.len() {
        return Err(Vp9Error::EmptyPayload);
    }
    d.header_len = r.pos;
    Ok(d)
}

fn parse_ss(r: &mut Reader<'_>) -> Result<Vp9Scalability, Vp9Error> {
    let b = r.u8()?;
    let mut ss = Vp9Scalability::EMPTY;
    ss.spatial_layers = (b >> 5) + 1;
    ss.resolutions_present = b & 0x10 != 0;
    ss.gof_present = b & 0x08 != 0;
    if ss.resolutions_present {
        for (w, h) in ss
            .width
            .iter_mut()
            .zip(ss.height.iter_mut())
            .take(usize::from(ss.spatial_layers))
        {
            *w = r.u16()?;
            *h = r.u16()?;
        }
    }
    if ss.gof_present {
        let n_g = r.u8()?;
        if usize::from(n_g) > MAX_GOF {
            return Err(Vp9Error::GofTooLarge);
        }
        ss.gof_len = n_g;
        for e in ss.gof.iter_mut().take(usize::from(n_g)) {
            let t = r.u8()?;
            e.temporal = t >> 5;
            e.switching_up = t & 0x10 != 0;
            e.num_refs = (t >> 2) & 0x03;
            for p in e.p_diffs.iter_mut().take(usize::from(e.num_refs)) {
                *p = r.u8()?;
            }
        }
    }
    Ok(ss)
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: u8 = 0x80;
    const P: u8 = 0x40;
    const L: u8 = 0x20;
    const F: u8 = 0x10;
    const B: u8 = 0x08;
    const E: u8 = 0x04;
    const V: u8 = 0x02;
    const Z: u8 = 0x01;

    /// The layer indices byte.
    fn l(tid: u8, u: bool, sid: u8, d: bool) -> u8 {
        (tid << 5) | (u8::from(u) << 4) | (sid << 1) | u8::from(d)
    }

    /// A keyframe's first packet of an L3T3 K-SVC stream: 15-bit picture id,
    /// layer indices, TL0PICIDX, SS with three resolutions and a 4-picture
    /// group, then one byte of VP9 data.
    fn long_keyframe() -> Vec<u8> {
        let mut p = vec![I | L | B | V, 0x80 | 0x12, 0x34, l(0, false, 0, false), 9];
        p.push((2 << 5) | 0x10 | 0x08); // N_S=2, Y, G
        for (w, h) in [(320u16, 180u16), (640, 360), (1280, 720)] {
            p.extend_from_slice(&w.to_be_bytes());
            p.extend_from_slice(&h.to_be_bytes());
        }
        p.push(4); // N_G
        p.extend_from_slice(&[0x04, 4]); // T0, R1, P_DIFF 4
        p.extend_from_slice(&[(2 << 5) | 0x10 | 0x04, 1]); // T2 U R1
        p.extend_from_slice(&[(1 << 5) | 0x10 | 0x04, 2]); // T1 U R1
        p.extend_from_slice(&[(2 << 5) | 0x10 | 0x08, 1, 3]); // T2 U R2
        p.push(0xaa); // VP9 data
        p
    }

    #[test]
    fn non_flexible_l3t3() {
        // Spatial 1, temporal 2, U, D, 7-bit picture id, TL0PICIDX 200.
        let p = [I | P | L | E | Z, 0x05, l(2, true, 1, true), 200, 0xff];
        let d = parse(&p).expect("valid");
        assert_eq!(d.picture_id, Some(5));
        assert!(!d.extended_picture_id);
        assert!(d.inter_picture && d.layer_indices && !d.flexible);
        assert!(!d.start && d.end && !d.ss_present && d.not_ref_for_upper);
        assert_eq!((d.temporal, d.spatial), (2, 1));
        assert!(d.switching_up && d.inter_layer);
        assert_eq!(d.tl0_pic_idx, Some(200));
        assert!(d.p_diffs().is_empty());
        assert_eq!(d.header_len, 4);
        let s = d.svc();
        assert_eq!(
            s,
            SvcPacket {
                spatial: 1,
                temporal: 2,
                frame_start: false,
                frame_end: true,
                keyframe: false,
                switch_up: false,
                spatial_layers: None,
            }
        );
    }

    #[test]
    fn picture_id_widths() {
        let d = parse(&[I | B, 0x7f, 0]).expect("7-bit");
        assert_eq!((d.picture_id, d.extended_picture_id), (Some(0x7f), false));
        assert_eq!(d.header_len, 2);
        let d = parse(&[I | B, 0xff, 0xff, 0]).expect("15-bit");
        assert_eq!((d.picture_id, d.extended_picture_id), (Some(0x7fff), true));
        assert_eq!(d.header_len, 3);
        let d = parse(&[B, 0]).expect("no picture id");
        assert_eq!(d.picture_id, None);
        assert_eq!(d.header_len, 1);
        assert_eq!(parse(&[I | B, 0x80]), Err(Vp9Error::Truncated));
    }

    #[test]
    fn flexible_p_diffs() {
        // Flexible, L (no TL0PICIDX), three P_DIFFs chained with N.
        let p = [
            I | P | L | F | B,
            0x81,
            0x00,
            l(1, false, 0, false),
            (1 << 1) | 1,
            (2 << 1) | 1,
            4 << 1,
            0x55,
        ];
        let d = parse(&p).expect("valid");
        assert_eq!(d.picture_id, Some(0x100));
        assert!(d.flexible);
        assert_eq!(d.tl0_pic_idx, None);
        assert_eq!(d.p_diffs(), &[1, 2, 4]);
        assert_eq!(d.header_len, 7);
        // One P_DIFF, N clear.
        let d = parse(&[I | P | F | B, 9, 127 << 1, 0]).expect("valid");
        assert_eq!(d.p_diffs(), &[127]);
        // P clear in flexible mode: no P_DIFFs.
        let d = parse(&[I | F | B, 9, 0x02]).expect("valid");
        assert!(d.p_diffs().is_empty());
        assert_eq!(d.header_len, 2);
    }

    #[test]
    fn four_p_diffs_are_refused() {
        let p = [I | P | F | B, 9, 3, 5, 7, 9 << 1, 0];
        assert_eq!(parse(&p), Err(Vp9Error::TooManyRefs));
        // Refused even when the fourth is missing.
        assert_eq!(parse(&p[..5]), Err(Vp9Error::TooManyRefs));
    }

    #[test]
    fn flexible_refs_need_a_picture_id() {
        assert_eq!(
            parse(&[P | F | B, 2, 0]),
            Err(Vp9Error::FlexibleWithoutPictureId)
        );
    }

    #[test]
    fn scalability_structure() {
        let p = long_keyframe();
        let d = parse(&p).expect("valid");
        assert_eq!(d.header_len, p.len() - 1);
        assert_eq!(d.picture_id, Some(0x1234));
        assert_eq!(d.tl0_pic_idx, Some(9));
        let ss = d.ss.expect("ss");
        assert_eq!(ss.spatial_layers, 3);
        assert_eq!(ss.resolution(2), Some((1280, 720)));
        assert_eq!(ss.resolution(3), None);
        assert_eq!(d.width_of(0), Some(320));
        assert_eq!(d.width_of(1), Some(640));
        assert_eq!(d.width_of(7), None);
        let gof = ss.gof();
        assert_eq!(gof.len(), 4);
        assert_eq!(
            gof.get(3),
            Some(&Vp9GofEntry {
                temporal: 2,
                switching_up: true,
                num_refs: 2,
                p_diffs: [1, 3, 0],
            })
        );
        assert_eq!(gof.first().map(Vp9GofEntry::p_diffs), Some(&[4u8][..]));
        let s = d.svc();
        assert!(s.keyframe && s.switch_up && s.frame_start && !s.frame_end);
        assert_eq!(s.spatial_layers, Some(3));
    }

    #[test]
    fn scalability_without_resolutions_or_group() {
        // N_S=1, neither Y nor G.
        let d = parse(&[B | V, 1 << 5, 0]).expect("valid");
        let ss = d.ss.expect("ss");
        assert_eq!(ss.spatial_layers, 2);
        assert!(!ss.resolutions_present && !ss.gof_present);
        assert!(ss.gof().is_empty());
        assert_eq!(d.width_of(0), None);
        assert_eq!(d.header_len, 2);
        // G with N_G = 0.
        let d = parse(&[B | V, 0x08, 0, 0]).expect("valid");
        assert!(d.ss.is_some_and(|ss| ss.gof_present && ss.gof().is_empty()));
    }

    #[test]
    fn gof_overflow_is_refused() {
        let mut p = vec![B | V, 0x08, 65];
        p.extend(std::iter::repeat_n(0u8, 100));
        assert_eq!(parse(&p), Err(Vp9Error::GofTooLarge));
        let mut p = vec![B | V, 0x08, 255];
        p.extend(std::iter::repeat_n(0u8, 300));
        assert_eq!(parse(&p), Err(Vp9Error::GofTooLarge));
        // Exactly MAX_GOF entries, no refs each.
        let mut p = vec![B | V, 0x08, 64];
        p.extend(std::iter::repeat_n(0u8, 65));
        let d = parse(&p).expect("valid");
        assert_eq!(d.ss.map(|ss| ss.gof().len()), Some(MAX_GOF));
    }

    #[test]
    fn k_svc_keyframe_and_delta_frames() {
        // Keyframe: spatial 0, P clear.
        let s0 = parse(&[I | L | B | E, 1, l(0, false, 0, false), 0, 0])
            .expect("valid")
            .svc();
        assert!(s0.keyframe && s0.switch_up);
        // Its spatial 1 layer frame: D set, P clear: a switch-up point, not
        // a keyframe.
        let s1 = parse(&[I | L | B | E, 1, l(0, false, 1, true), 0, 0])
            .expect("valid")
            .svc();
        assert!(!s1.keyframe && s1.switch_up);
        assert_eq!(s1.spatial, 1);
        // Not the first packet of the keyframe: not a keyframe start.
        let mid = parse(&[I | L | E, 1, l(0, false, 0, false), 0, 0])
            .expect("valid")
            .svc();
        assert!(!mid.keyframe && mid.switch_up);
        // Delta frames: P set at either layer.
        for sid in [0, 1] {
            let s = parse(&[I | P | L | B | E, 2, l(0, false, sid, false), 0, 0])
                .expect("valid")
                .svc();
            assert!(!s.keyframe && !s.switch_up);
        }
        // Without L: layer 0, B and P decide.
        assert!(parse(&[B, 0]).expect("valid").svc().keyframe);
        assert!(!parse(&[P | B, 0]).expect("valid").svc().keyframe);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let p = long_keyframe();
        for n in 0..p.len() {
            let r = parse(p.get(..n).expect("prefix"));
            assert!(
                matches!(r, Err(Vp9Error::Truncated | Vp9Error::EmptyPayload)),
                "prefix {n}: {r:?}"
            );
        }
        assert_eq!(parse(&[]), Err(Vp9Error::Truncated));
        assert_eq!(parse(&[B]), Err(Vp9Error::EmptyPayload));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // Every two-byte input, and a spread of longer ones built from a
        // simple generator: parse returns, and a success leaves payload.
        let check = |p: &[u8]| {
            if let Ok(d) = parse(p) {
                assert!(d.header_len < p.len());
                assert!(usize::from(d.num_p_diffs) <= MAX_P_DIFFS);
                let _ = d.svc();
                for s in 0..=8 {
                    let _ = d.width_of(s);
                }
            }
        };
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                check(&[a, b]);
            }
        }
        let mut x: u32 = 0x1234_5678;
        for _ in 0..20_000 {
            let mut buf = [0u8; 24];
            for byte in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *byte = x.to_le_bytes()[0];
            }
            let len = usize::from(buf[0]) % buf.len();
            check(&buf[..len]);
        }
    }
}
