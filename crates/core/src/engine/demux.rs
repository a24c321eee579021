//! Which participant a datagram is for: by its source address once ICE has
//! proved the address, else by the ufrag of a STUN binding request.
//!
//! Owns the address and ufrag maps and each participant's entries in them,
//! so that adding, re-keying (ICE restart) and removing stay in step in one
//! place. Must not: call into a participant's `Rtc` or decide whether a new
//! address is accepted (the engine asks str0m and applies the address limit).

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::ids::ParticipantId;

/// Where a datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// From an address already proved to be this participant's.
    Known(ParticipantId),
    /// A STUN binding request naming this participant's ufrag, from an
    /// address not yet known.
    New(ParticipantId),
    /// A STUN binding request whose server ufrag no participant here has,
    /// and which names another shard ([`crate::offer::ufrag_shard`]).
    Elsewhere(crate::ids::ShardId),
    Unknown,
}

struct Entry {
    ufrag: String,
    addrs: Vec<SocketAddr>,
}

#[derive(Default)]
pub(super) struct Demux {
    by_addr: HashMap<SocketAddr, ParticipantId>,
    by_ufrag: HashMap<String, ParticipantId>,
    entries: super::IdMap<ParticipantId, Entry>,
}

impl Demux {
    /// A participant whose local ICE ufrag is `ufrag`.
    pub(super) fn add(&mut self, id: ParticipantId, ufrag: String) {
        self.by_ufrag.insert(ufrag.clone(), id);
        self.entries.insert(
            id,
            Entry {
                ufrag,
                addrs: Vec::new(),
            },
        );
    }

    pub(super) fn route(&self, source: SocketAddr, data: &[u8]) -> Route {
        if let Some(id) = self.by_addr.get(&source) {
            return Route::Known(*id);
        }
        self.stun_owner(data)
    }

    /// Whom a STUN binding request from a new address is for: a participant
    /// here, or (its ufrag not one of ours) the shard its ufrag names.
    fn stun_owner(&self, data: &[u8]) -> Route {
        let Ok(msg) = str0m::ice::StunMessage::parse(data) else {
            return Route::Unknown;
        };
        if !msg.is_binding_request() {
            return Route::Unknown;
        }
        let Some((ours, _theirs)) = msg.split_username() else {
            return Route::Unknown;
        };
        match self.by_ufrag.get(ours) {
            Some(id) => Route::New(*id),
            None => crate::offer::ufrag_shard(ours).map_or(Route::Unknown, Route::Elsewhere),
        }
    }

    /// How many addresses `id` has proved.
    pub(super) fn addr_count(&self, id: ParticipantId) -> usize {
        self.entries.get(&id).map_or(0, |e| e.addrs.len())
    }

    /// `addr` proved to be `id`'s (str0m accepted a datagram from it).
    pub(super) fn learn(&mut self, id: ParticipantId, addr: SocketAddr) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.addrs.push(addr);
            self.by_addr.insert(addr, id);
        }
    }

    /// An ICE restart gave `id` a new local ufrag.
    pub(super) fn set_ufrag(&mut self, id: ParticipantId, ufrag: String) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        if e.ufrag != ufrag {
            self.by_ufrag.remove(&e.ufrag);
            self.by_ufrag.insert(ufrag.clone(), id);
            e.ufrag = ufrag;
        }
    }

    /// Forgets `id`; returns the addresses it had proved.
    pub(super) fn remove(&mut self, id: ParticipantId) -> Vec<SocketAddr> {
        let Some(e) = self.entries.remove(&id) else {
            return Vec::new();
        };
        for a in &e.addrs {
            self.by_addr.remove(a);
        }
        self.by_ufrag.remove(&e.ufrag);
        e.addrs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_ufrags_follow_their_participant() {
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let (p, q) = (ParticipantId(1), ParticipantId(2));
        let mut d = Demux::default();
        d.add(p, "u1".into());
        d.add(q, "u2".into());
        assert_eq!(d.route(a, b"not stun"), Route::Unknown);
        d.learn(p, a);
        assert_eq!(d.route(a, b""), Route::Known(p));
        assert_eq!(d.addr_count(p), 1);
        d.set_ufrag(p, "u3".into());
        assert_eq!(d.by_ufrag.get("u3"), Some(&p));
        assert!(!d.by_ufrag.contains_key("u1"));
        d.remove(p);
        assert_eq!(d.route(a, b""), Route::Unknown);
        assert!(!d.by_ufrag.contains_key("u3"));
        assert_eq!(d.by_ufrag.get("u2"), Some(&q));
    }
}
