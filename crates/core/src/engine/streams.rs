//! Receive-stream bounds: which RTP packets with an SSRC the participant has
//! not used yet may reach its `Rtc`.
//!
//! str0m maps an unseen SSRC that carries an RTP stream id (rid) to a new
//! receive stream before it checks the packet's SRTP tag, and on an m-line
//! that declared no rids it takes any rid: forged packets, each with a new
//! SSRC and rid, made one new stream each, and every stream costs on each
//! later packet and timer (fuzz/examples/rid_flood.rs). On an m-line that
//! declared simulcast rids str0m takes only those, and a new SSRC replaces
//! the stream of its rid instead of adding one. So a packet with a rid (or
//! repaired rid) and an unseen SSRC goes to str0m only when its mid is a
//! simulcast m-line; receive streams then stay bounded by the m-lines and
//! their rids (at most [`MAX_LAYERS`] each, checked on the offer).
//!
//! Reads the RTP header and its RFC 8285 extension block in place: no
//! allocation, no slice indexing. Must not: decide anything but this.

use str0m::Rtc;
use str0m::media::{Mid, Rids};
use str0m::rtp::Extension;

/// Most simulcast encodings (rids) one m-line may declare: the offer's
/// rule, which the engine relies on (defined in `offer`, which the engine
/// imports and which imports nothing of the engine).
pub use crate::offer::MAX_LAYERS;

/// What the guard needs to know of a participant's negotiation.
#[derive(Debug, Default, Clone)]
pub(super) struct StreamGuard {
    /// Negotiated extension ids: mid, rid, repaired rid (0: not negotiated).
    mid_id: u8,
    rid_id: u8,
    rrid_id: u8,
    /// M-lines that declared simulcast rids.
    simulcast: Vec<Mid>,
}

impl StreamGuard {
    /// Reads the negotiated extension ids and simulcast m-lines (after an
    /// offer or a renegotiation).
    pub(super) fn from_rtc(rtc: &Rtc, mids: impl Iterator<Item = Mid>) -> Self {
        let mut g = StreamGuard::default();
        for mid in mids {
            let Some(m) = rtc.media(mid) else {
                continue;
            };
            let map = m.remote_extmap();
            let id = |e| map.id_of(e).unwrap_or(0);
            if g.mid_id == 0 {
                g.mid_id = id(Extension::RtpMid);
            }
            if g.rid_id == 0 {
                g.rid_id = id(Extension::RtpStreamId);
            }
            if g.rrid_id == 0 {
                g.rrid_id = id(Extension::RepairedRtpStreamId);
            }
            if matches!(m.rids_rx(), Rids::Specific(r) if !r.is_empty()) {
                g.simulcast.push(mid);
            }
        }
        g
    }

    /// Whether an RTP packet whose SSRC the participant has not used yet
    /// must be kept from str0m: it names a rid on an m-line without
    /// simulcast (or on no known m-line).
    pub(super) fn refuses(&self, rtp: &[u8]) -> bool {
        if self.rid_id == 0 && self.rrid_id == 0 {
            return false;
        }
        let mut rid = false;
        let mut mid: Option<&[u8]> = None;
        for (id, value) in extensions(rtp) {
            if id == self.rid_id || id == self.rrid_id {
                rid = true;
            } else if id == self.mid_id {
                mid = Some(value);
            }
        }
        if !rid {
            return false;
        }
        !mid.is_some_and(|m| self.simulcast.iter().any(|s| s.as_bytes() == m))
    }
}

/// The RFC 8285 header extensions of an RTP packet, one- or two-byte form,
/// as (id, value). Stops at the first inconsistency.
fn extensions(rtp: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let block = (|| {
        let first = *rtp.first()?;
        if first & 0x10 == 0 {
            return None;
        }
        let csrcs = usize::from(first & 0x0f);
        let at = 12 + 4 * csrcs;
        let head: [u8; 4] = rtp.get(at..at + 4)?.try_into().ok()?;
        let [p0, p1, w0, w1] = head;
        let profile = u16::from_be_bytes([p0, p1]);
        let words = usize::from(u16::from_be_bytes([w0, w1]));
        let body = rtp.get(at + 4..at + 4 + 4 * words)?;
        let two_byte = match profile {
            0xbede => false,
            p if p & 0xfff0 == 0x1000 => true,
            _ => return None,
        };
        Some((body, two_byte))
    })();
    let (mut body, two_byte) = block.unwrap_or((&[], false));
    std::iter::from_fn(move || {
        loop {
            let (&b0, rest) = body.split_first()?;
            if b0 == 0 {
                // Padding between elements.
                body = rest;
                continue;
            }
            let (id, len, rest) = if two_byte {
                let (&len, rest) = rest.split_first()?;
                (b0, usize::from(len), rest)
            } else {
                let id = b0 >> 4;
                if id == 15 {
                    return None;
                }
                (id, usize::from(b0 & 0x0f) + 1, rest)
            };
            let value = rest.get(..len)?;
            body = rest.get(len..)?;
            return Some((id, value));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RTP with one-byte extensions mid (id 4) and, when given, rid (id 10).
    fn rtp(ssrc: u32, mid: &str, rid: Option<&str>) -> Vec<u8> {
        let mut ext = vec![0x40 | (mid.len() as u8 - 1)];
        ext.extend_from_slice(mid.as_bytes());
        if let Some(rid) = rid {
            ext.push(0xa0 | (rid.len() as u8 - 1));
            ext.extend_from_slice(rid.as_bytes());
        }
        while ext.len() % 4 != 0 {
            ext.push(0);
        }
        let mut p = vec![0x90, 96, 0, 1, 0, 0, 0, 1];
        p.extend_from_slice(&ssrc.to_be_bytes());
        p.extend_from_slice(&[0xbe, 0xde]);
        p.extend_from_slice(&((ext.len() / 4) as u16).to_be_bytes());
        p.extend_from_slice(&ext);
        p.extend_from_slice(&[1, 2, 3, 4]);
        p
    }

    fn guard() -> StreamGuard {
        StreamGuard {
            mid_id: 4,
            rid_id: 10,
            rrid_id: 11,
            simulcast: vec!["1".into()],
        }
    }

    #[test]
    fn a_rid_passes_only_on_a_simulcast_mline() {
        let g = guard();
        assert!(!g.refuses(&rtp(7, "1", Some("q"))));
        assert!(g.refuses(&rtp(7, "0", Some("q"))));
        assert!(g.refuses(&rtp(7, "9", Some("x"))));
        // No mid at all, but a rid: refused.
        let mut no_mid = rtp(7, "0", Some("q"));
        no_mid[16] = 0x70; // id 7: unknown
        assert!(g.refuses(&no_mid));
        // No rid: str0m maps it by mid and payload type (one stream per mid).
        assert!(!g.refuses(&rtp(7, "0", None)));
    }

    #[test]
    fn without_the_rid_extension_nothing_is_refused() {
        let g = StreamGuard::default();
        assert!(!g.refuses(&rtp(7, "0", Some("q"))));
    }

    #[test]
    fn truncated_and_two_byte_blocks() {
        let g = guard();
        let p = rtp(7, "0", Some("q"));
        for n in 0..p.len() {
            // Never panics; a cut block reads as fewer extensions.
            let _ = g.refuses(&p[..n]);
        }
        // Two-byte form: id 10 len 1 "q", id 4 len 1 "1".
        let mut two = vec![0x90, 96, 0, 1, 0, 0, 0, 1, 0, 0, 0, 7, 0x10, 0x00, 0, 2];
        two.extend_from_slice(&[10, 1, b'q', 4, 1, b'1', 0, 0]);
        assert!(!g.refuses(&two));
        two[21] = b'0';
        assert!(g.refuses(&two));
    }
}
