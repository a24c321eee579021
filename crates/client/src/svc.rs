//! Synthetic VP9 SVC as the load client publishes it: one RTP stream whose
//! pictures carry `spatial` layer frames each (320x180, 640x360, 1280x720
//! for three), the way Chromium sends `L3T3_KEY` (see
//! `crates/core/tests/fixtures/svc/README.md`).
//!
//! Every packet starts with a flexible-mode VP9 payload descriptor (RFC
//! 9628): I=1 with a 15-bit picture id counting pictures, L=1 with the
//! layer indices (TID on an L1T3 pattern 0, 2, 1, 2; U on every TID > 0;
//! SID; D), F=1 with one P_DIFF on an inter-picture predicted layer frame,
//! B/E per layer frame, and on the first packet of a keyframe the
//! scalability structure (N_S, Y=1 with the resolutions, G=0). `P` is clear
//! on every layer of a keyframe picture; with K-SVC (`key_svc`) the upper
//! layers of a keyframe are D=1 and those of other pictures P=1, D=0; in
//! full SVC every upper layer is D=1. The RTP marker goes on the last packet
//! of the top spatial layer; all layer frames of a picture share the RTP
//! timestamp. Bytes split over the layers 1:3:9 (low to high).
//!
//! The payload stamp after the descriptor records the spatial layer as
//! `layer` = SID + 1 ([`crate::payload`] checks the two agree), so a
//! receiver can tell which layers an SFU forwarded.
//!
//! Owns: the mode ([`Svc`]), the per-publisher picture state
//! ([`SvcEncoder`]) and the packet plan of a picture. Must not: send
//! anything (the participant does), or know the SFU's layer choice.

use crate::media::MAX_VIDEO_PAYLOAD;

/// A scalability mode: spatial and temporal layer counts, K-SVC or full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Svc {
    /// Spatial layers, 1..=3.
    pub spatial: u8,
    /// Temporal layers, 1..=3.
    pub temporal: u8,
    /// K-SVC: inter-layer prediction on keyframes only (`_KEY`).
    pub key_svc: bool,
}

impl Svc {
    /// Chromium's default for VP9 SVC in WebRTC.
    pub const L3T3_KEY: Svc = Svc {
        spatial: 3,
        temporal: 3,
        key_svc: true,
    };

    /// Relative bytes of spatial layer `s` (1, 3, 9).
    fn weight(s: u8) -> usize {
        3usize.pow(u32::from(s))
    }

    /// Bytes of spatial layer `s` of a picture of `total` bytes.
    pub fn layer_bytes(&self, total: usize, s: u8) -> usize {
        let all: usize = (0..self.spatial).map(Self::weight).sum();
        (total * Self::weight(s) / all.max(1)).max(1)
    }

    /// Temporal layer of the picture `n` pictures after a keyframe (L1T3:
    /// 0, 2, 1, 2; L1T2: 0, 1).
    pub fn temporal_of(&self, n: u64) -> u8 {
        match self.temporal {
            0 | 1 => 0,
            2 => (n % 2) as u8,
            _ => [0, 2, 1, 2][(n % 4) as usize],
        }
    }

    /// Width and height of spatial layer `s`: the top one 1280x720, each
    /// below it half.
    pub fn resolution(&self, s: u8) -> (u16, u16) {
        let shift = self.spatial.saturating_sub(1).saturating_sub(s);
        (1280 >> shift, 720 >> shift)
    }
}

impl std::fmt::Display for Svc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "L{}T{}{}",
            self.spatial,
            self.temporal,
            if self.key_svc { "_KEY" } else { "" }
        )
    }
}

impl std::str::FromStr for Svc {
    type Err = String;

    /// `L<s>T<t>` or `L<s>T<t>_KEY`, s and t in 1..=3.
    fn from_str(s: &str) -> Result<Svc, String> {
        let bad = || format!("scalability mode {s:?}: want L<1-3>T<1-3>[_KEY], e.g. L3T3_KEY");
        let (mode, key_svc) = match s.strip_suffix("_KEY") {
            Some(m) => (m, true),
            None => (s, false),
        };
        let b = mode.as_bytes();
        if b.len() != 4 || b[0] != b'L' || b[2] != b'T' {
            return Err(bad());
        }
        let digit = |c: u8| (b'1'..=b'3').contains(&c).then(|| c - b'0');
        let (Some(spatial), Some(temporal)) = (digit(b[1]), digit(b[3])) else {
            return Err(bad());
        };
        Ok(Svc {
            spatial,
            temporal,
            key_svc,
        })
    }
}

/// One packet of a picture's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SvcPacketPlan {
    /// Spatial layer (SID).
    pub spatial: u8,
    /// Packet index within its layer frame, and the layer frame's packets.
    pub index: u16,
    pub count: u16,
    /// Payload bytes (descriptor and stamp included).
    pub size: usize,
    /// RTP marker: the last packet of the top spatial layer.
    pub marker: bool,
    header: [u8; MAX_HEADER],
    header_len: u8,
}

impl SvcPacketPlan {
    /// The VP9 payload descriptor of this packet.
    pub fn header(&self) -> &[u8] {
        &self.header[..usize::from(self.header_len)]
    }
}

/// Longest descriptor written: 5 bytes (flags, picture id, layer indices,
/// one P_DIFF) or 4 plus the scalability structure (1 + 4 per layer).
const MAX_HEADER: usize = 4 + 1 + 4 * 3;

/// The picture state of one SVC publisher.
#[derive(Debug, Clone)]
pub struct SvcEncoder {
    mode: Svc,
    picture_id: u16,
    /// Pictures since the last keyframe (the temporal pattern restarts
    /// there).
    since_key: u64,
    /// The plan of the last picture ([`SvcEncoder::plan`]).
    pub packets: Vec<SvcPacketPlan>,
}

impl SvcEncoder {
    pub fn new(mode: Svc, first_picture_id: u16) -> Self {
        SvcEncoder {
            mode,
            picture_id: first_picture_id & 0x7fff,
            since_key: 0,
            packets: Vec::with_capacity(32),
        }
    }

    pub fn mode(&self) -> Svc {
        self.mode
    }

    /// Plan the next picture, `keyframe` or not, of about the bytes in
    /// `sizes` (the schedule's packet sizes of the picture as one frame)
    /// into [`SvcEncoder::packets`].
    pub fn plan(&mut self, keyframe: bool, sizes: &[usize]) {
        self.packets.clear();
        if keyframe {
            self.since_key = 0;
        }
        let m = self.mode;
        let n = self.since_key;
        let tid = m.temporal_of(n);
        // The picture each layer frame references: L1T3 has T0 on the
        // previous T0 (4 back), T1 on T0 (2), T2 on the one before (1); never
        // before the keyframe.
        let natural: u64 = match (m.temporal, n % 4) {
            (3, 0) => 4,
            (3, 2) => 2,
            (2, 0) => 2,
            _ => 1,
        };
        let p_diff = natural.min(n).max(1) as u8;
        let total: usize = sizes.iter().sum();
        let pid = self.picture_id;
        for s in 0..m.spatial {
            let bytes = m.layer_bytes(total, s);
            let (count, each, rem) = crate::payload::split_frame(bytes, MAX_VIDEO_PAYLOAD);
            let inter = !keyframe;
            let inter_layer = s > 0 && (keyframe || !m.key_svc);
            for i in 0..count {
                let start = i == 0;
                let end = i + 1 == count;
                let mut h = [0u8; MAX_HEADER];
                let mut len = 0usize;
                let mut push = |b: u8| {
                    h[len] = b;
                    len += 1;
                };
                let ss = keyframe && s == 0 && start;
                push(
                    0x80 | 0x20
                        | 0x10
                        | if inter { 0x40 } else { 0 }
                        | if start { 0x08 } else { 0 }
                        | if end { 0x04 } else { 0 }
                        | if ss { 0x02 } else { 0 },
                );
                push(0x80 | (pid >> 8) as u8);
                push(pid as u8);
                push(tid << 5 | if tid > 0 { 0x10 } else { 0 } | s << 1 | u8::from(inter_layer));
                if inter {
                    push(p_diff << 1);
                }
                if ss {
                    push((m.spatial - 1) << 5 | 0x10);
                    for l in 0..m.spatial {
                        let (w, hh) = m.resolution(l);
                        let [w0, w1] = w.to_be_bytes();
                        let [h0, h1] = hh.to_be_bytes();
                        push(w0);
                        push(w1);
                        push(h0);
                        push(h1);
                    }
                }
                self.packets.push(SvcPacketPlan {
                    spatial: s,
                    index: i,
                    count,
                    size: each + usize::from(usize::from(i) < rem),
                    marker: end && s + 1 == m.spatial,
                    header: h,
                    header_len: len as u8,
                });
            }
        }
        self.picture_id = (self.picture_id + 1) & 0x7fff;
        self.since_key += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelay_core::svc::vp9;

    #[test]
    fn modes_parse_and_print() {
        assert_eq!("L3T3_KEY".parse::<Svc>(), Ok(Svc::L3T3_KEY));
        let m: Svc = "L2T1".parse().unwrap();
        assert_eq!((m.spatial, m.temporal, m.key_svc), (2, 1, false));
        assert_eq!(Svc::L3T3_KEY.to_string(), "L3T3_KEY");
        for bad in ["", "L4T3", "L3T0", "S3T3", "L3T3_key", "L3T3KEY"] {
            assert!(bad.parse::<Svc>().is_err(), "{bad}");
        }
    }

    /// The descriptors read back with the core crate's parser as the
    /// fixture describes Chromium's stream: SS on the keyframe's first
    /// packet, P clear on a keyframe, K-SVC's D, TIDs 0 2 1 2, the marker on
    /// the top layer's last packet, bytes about 1:3:9.
    #[test]
    fn descriptors_read_back_as_chromium_l3t3_key() {
        let mut e = SvcEncoder::new(Svc::L3T3_KEY, 0x7ffe);
        let sizes = vec![1200; 10];
        let mut tids = Vec::new();
        for pic in 0..6u16 {
            let key = pic == 0;
            e.plan(key, &sizes);
            let mut bytes = [0usize; 3];
            for (k, p) in e.packets.iter().enumerate() {
                let mut payload = p.header().to_vec();
                payload.push(0);
                let d = vp9::parse(&payload).unwrap();
                assert_eq!(d.header_len, p.header().len());
                assert_eq!(d.picture_id, Some((0x7ffe + pic) & 0x7fff));
                assert!(d.flexible && d.layer_indices && d.extended_picture_id);
                assert_eq!(d.spatial, p.spatial);
                assert_eq!(d.start, p.index == 0);
                assert_eq!(d.end, p.index + 1 == p.count);
                assert_eq!(d.inter_picture, !key);
                assert_eq!(d.inter_layer, p.spatial > 0 && key);
                let want: Vec<u8> = if key {
                    vec![]
                } else {
                    vec![[0, 1, 2, 1, 4, 1][usize::from(pic)]]
                };
                assert_eq!(d.p_diffs(), &want[..]);
                assert_eq!(d.num_p_diffs, u8::from(!key));
                assert_eq!(d.ss.is_some(), key && k == 0);
                if let Some(ss) = d.ss {
                    assert_eq!(ss.spatial_layers, 3);
                    assert_eq!(ss.resolution(0), Some((320, 180)));
                    assert_eq!(ss.resolution(2), Some((1280, 720)));
                    assert!(!ss.gof_present);
                }
                let svc = d.svc();
                assert_eq!(svc.keyframe, key && k == 0);
                assert_eq!(p.marker, k + 1 == e.packets.len());
                bytes[usize::from(p.spatial)] += p.size;
                if k == 0 {
                    tids.push(d.temporal);
                }
            }
            let total: usize = bytes.iter().sum();
            assert!(total <= 12_000 && total > 11_900, "{bytes:?}");
            assert!(
                bytes[1] > 2 * bytes[0] && bytes[2] > 2 * bytes[1],
                "{bytes:?}"
            );
        }
        assert_eq!(tids, [0, 2, 1, 2, 0, 2]);
    }

    /// Payloads with these descriptors verify: the stamp's layer is the
    /// SID + 1, the keyframe flag is the base layer's, and a stamp whose
    /// layer disagrees with the SID fails.
    #[test]
    fn payloads_verify_and_carry_the_spatial_layer() {
        use crate::payload::{self, PayloadCodec, Stamp, VerifyError};
        let mut e = SvcEncoder::new(Svc::L3T3_KEY, 5);
        let h = payload::name_hash("pub");
        for key in [true, false] {
            e.plan(key, &[1200; 4]);
            for p in &e.packets {
                let stamp = Stamp {
                    name: "pub",
                    layer: p.spatial + 1,
                    frame: 7,
                    index: p.index,
                    count: p.count,
                    capture_ns: 42,
                };
                let mut buf = Vec::new();
                payload::write_payload_with_header(&mut buf, p.header(), &stamp, h, p.size);
                assert!(buf.len() >= p.size);
                let v = payload::verify(PayloadCodec::Vp9, &buf).unwrap();
                assert_eq!(v.stamp, stamp);
                assert_eq!(v.spatial, Some(p.spatial));
                let want_key = (p.index == 0).then_some(key && p.spatial == 0);
                assert_eq!(v.keyframe, want_key);
                let wrong = Stamp {
                    layer: (p.spatial + 1) % 3 + 1,
                    ..stamp
                };
                buf.clear();
                payload::write_payload_with_header(&mut buf, p.header(), &wrong, h, p.size);
                assert_eq!(
                    payload::verify(PayloadCodec::Vp9, &buf).map(|_| ()),
                    Err(VerifyError::Layer)
                );
            }
        }
    }
}
