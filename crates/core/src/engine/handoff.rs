//! One UDP port for every shard (`RtcSettings::shared_port`): where a
//! datagram that reached this shard's socket goes when its participant
//! lives on another shard.
//!
//! The shards' sockets share the port with `SO_REUSEPORT`, and the kernel
//! picks one by the 4-tuple's hash, which knows nothing of who owns the
//! flow. A STUN binding request names its shard in the server ufrag
//! ([`crate::offer::ufrag_shard`]): handed over to that shard, which tells
//! this one (`PeerMsg::Claim`) once it has authenticated the address, so
//! that the flow's DTLS, SRTP and SRTCP follow without a STUN header to
//! read. Between the hand-over and the claim (microseconds; a client's
//! DTLS comes a round trip later), the address is *pending*.
//!
//! Both maps are bounded and keyed by addresses anyone can send from
//! (SipHash). Claimed entries come only from authenticated addresses of
//! participants; pending ones from any STUN request that names another
//! shard, so they are few (the oldest go first) and a flood of them cannot
//! push out a claimed flow. A stale claim (its participant gone, its
//! address someone else's later) heals at the next STUN request from it,
//! which goes by its ufrag again.
//!
//! Owns the two maps. Must not: read a participant's state or call into an
//! `Rtc` (the engine hands over and applies claims).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use crate::ids::ShardId;

/// Claimed addresses kept; past it the map starts over (flows come back at
/// their next STUN request, a few seconds).
const CLAIMED_MAX: usize = 1 << 16;
/// Addresses handed over and not yet claimed.
const PENDING_MAX: usize = 1024;

#[derive(Default)]
pub(super) struct Handoff {
    claimed: HashMap<SocketAddr, ShardId>,
    pending: HashMap<SocketAddr, ShardId>,
    order: VecDeque<SocketAddr>,
}

impl Handoff {
    /// The shard datagrams from `source` go to, if another's.
    pub(super) fn owner(&self, source: SocketAddr) -> Option<ShardId> {
        if self.claimed.is_empty() && self.pending.is_empty() {
            return None;
        }
        self.claimed
            .get(&source)
            .or_else(|| self.pending.get(&source))
            .copied()
    }

    /// A STUN request from `source` was handed over to `shard`.
    pub(super) fn handed(&mut self, source: SocketAddr, shard: ShardId) {
        if self.claimed.get(&source) == Some(&shard) {
            return;
        }
        if self.pending.insert(source, shard).is_none() {
            self.order.push_back(source);
            while self.order.len() > PENDING_MAX {
                if let Some(old) = self.order.pop_front() {
                    self.pending.remove(&old);
                }
            }
        }
    }

    /// `shard` authenticated `source` as one of its participants' addresses.
    pub(super) fn claim(&mut self, source: SocketAddr, shard: ShardId) {
        if self.pending.remove(&source).is_some() {
            self.order.retain(|a| *a != source);
        }
        if self.claimed.len() >= CLAIMED_MAX && !self.claimed.contains_key(&source) {
            self.claimed.clear();
        }
        self.claimed.insert(source, shard);
    }

    /// `source` proved to be a participant's here: nothing to hand over.
    pub(super) fn forget(&mut self, source: SocketAddr) {
        if self.claimed.is_empty() && self.pending.is_empty() {
            return;
        }
        self.claimed.remove(&source);
        if self.pending.remove(&source).is_some() {
            self.order.retain(|a| *a != source);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u32) -> SocketAddr {
        SocketAddr::from((std::net::Ipv4Addr::from(0x0a00_0000 + i), 5000))
    }

    #[test]
    fn pending_until_claimed_and_a_flood_of_pending_keeps_the_claimed() {
        let mut h = Handoff::default();
        let (one, two) = (ShardId(1), ShardId(2));
        assert_eq!(h.owner(addr(0)), None);
        h.handed(addr(0), one);
        assert_eq!(h.owner(addr(0)), Some(one));
        h.claim(addr(0), one);
        assert!(h.pending.is_empty() && h.order.is_empty());
        // Anyone's STUN requests naming other shards: the pending map stays
        // bounded and the claimed flow keeps its shard.
        for i in 1..=(PENDING_MAX as u32 * 3) {
            h.handed(addr(i), two);
        }
        assert_eq!(h.pending.len(), PENDING_MAX);
        assert_eq!(h.order.len(), PENDING_MAX);
        assert_eq!(h.owner(addr(0)), Some(one));
        assert_eq!(h.owner(addr(1)), None, "the oldest pending went first");
        // A new claim on the same address (it moved to another shard's
        // participant) replaces the old one; an address of this shard's
        // own is handed over no more.
        h.claim(addr(0), two);
        assert_eq!(h.owner(addr(0)), Some(two));
        h.forget(addr(0));
        assert_eq!(h.owner(addr(0)), None);
    }
}
