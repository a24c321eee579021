//! ICE round-trip time measured on the wire: the time from a STUN binding
//! request leaving our socket to its success response arriving, matched by
//! transaction id. Independent of str0m's own bookkeeping.

const MAGIC_COOKIE: [u8; 4] = [0x21, 0x12, 0xA4, 0x42];
const SLOTS: usize = 16;

/// Outstanding binding requests (a small ring; old ones fall out).
#[derive(Debug, Default, Clone)]
pub struct StunRtt {
    pending: [([u8; 12], u64); SLOTS],
    next: usize,
}

fn stun_type(b: &[u8]) -> Option<(u16, [u8; 12])> {
    if b.len() < 20 || b[0] & 0xC0 != 0 || b[4..8] != MAGIC_COOKIE {
        return None;
    }
    let ty = u16::from_be_bytes([b[0], b[1]]);
    let mut id = [0u8; 12];
    id.copy_from_slice(&b[8..20]);
    Some((ty, id))
}

impl StunRtt {
    /// An outgoing datagram; remembers binding requests.
    pub fn on_send(&mut self, b: &[u8], now_ns: u64) {
        if let Some((0x0001, id)) = stun_type(b) {
            // A retransmission reuses the id: keep the first send time? RFC
            // 8445 checks get new ids per attempt in str0m, so overwrite.
            if let Some(e) = self.pending.iter_mut().find(|e| e.0 == id && e.1 != 0) {
                e.1 = now_ns;
                return;
            }
            self.pending[self.next] = (id, now_ns);
            self.next = (self.next + 1) % SLOTS;
        }
    }

    /// An incoming datagram; returns the RTT in ns for a matching success response.
    pub fn on_recv(&mut self, b: &[u8], now_ns: u64) -> Option<u64> {
        let (ty, id) = stun_type(b)?;
        if ty != 0x0101 {
            return None;
        }
        let e = self.pending.iter_mut().find(|e| e.0 == id && e.1 != 0)?;
        let sent = e.1;
        e.1 = 0;
        Some(now_ns.saturating_sub(sent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ty: u16, id: u8) -> Vec<u8> {
        let mut v = vec![0u8; 20];
        v[..2].copy_from_slice(&ty.to_be_bytes());
        v[4..8].copy_from_slice(&MAGIC_COOKIE);
        v[8..20].fill(id);
        v
    }

    #[test]
    fn matches_by_transaction() {
        let mut s = StunRtt::default();
        s.on_send(&msg(0x0001, 1), 1_000);
        s.on_send(&msg(0x0001, 2), 2_000);
        assert_eq!(s.on_recv(&msg(0x0101, 2), 2_500), Some(500));
        assert_eq!(s.on_recv(&msg(0x0101, 2), 2_600), None);
        assert_eq!(s.on_recv(&msg(0x0111, 1), 2_600), None);
        assert_eq!(s.on_recv(&msg(0x0101, 1), 3_000), Some(2_000));
        assert_eq!(s.on_recv(&[0x80, 0, 0], 1), None);
        for i in 0..100u8 {
            s.on_send(&msg(0x0001, i), u64::from(i));
        }
        assert_eq!(s.on_recv(&msg(0x0101, 99), 100), Some(1));
        assert_eq!(s.on_recv(&msg(0x0101, 3), 100), None);
    }
}
