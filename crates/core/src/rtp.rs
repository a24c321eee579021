//! RTP datagrams as the own media paths read them, past str0m: the shard's
//! own ingress ([`crate::engine`]) and the load client's own path
//! (corelay-client). One reading for both, so that a fix to either (the
//! padding rule, the SSRC's place) is a fix to both.
//!
//! Owns: the SSRC before decryption, and an SRTP packet authenticated,
//! decrypted and unpadded. Must not: keep state (the replay window and the
//! index are the caller's), or classify or count a packet.

use str0m::rtp::{RtpHeader, SrtpContext};

/// The SSRC of an RTP packet (it is not encrypted in SRTP).
pub fn ssrc(rtp: &[u8]) -> Option<u32> {
    let b: [u8; 4] = rtp.get(8..12)?.try_into().ok()?;
    Some(u32::from_be_bytes(b))
}

/// The payload of SRTP packet `data` (parsed as `header`, SRTP index
/// `index`), authenticated and decrypted with `rx`, its padding removed;
/// `None` when authentication fails or the padding length is invalid.
/// Empty for a padding-only packet.
pub fn open<'a>(
    rx: &'a mut SrtpContext,
    data: &[u8],
    header: &RtpHeader,
    index: u64,
) -> Option<&'a [u8]> {
    let plain = rx.unprotect_rtp(data, header, index)?;
    if header.has_padding {
        RtpHeader::unpad_payload(plain)
    } else {
        Some(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ssrc_is_bytes_8_to_12() {
        let mut rtp = [0u8; 12];
        rtp[8..12].copy_from_slice(&0xdead_beef_u32.to_be_bytes());
        assert_eq!(ssrc(&rtp), Some(0xdead_beef));
        assert_eq!(ssrc(&rtp[..11]), None);
    }
}
