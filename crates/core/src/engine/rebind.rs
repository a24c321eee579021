//! A client whose address changed within its ICE session (a NAT rebinding,
//! a phone handing the same session to another network path): the send
//! path moves at its first nominating connectivity check from the new
//! address.
//!
//! str0m's ICE-lite agent sends on the highest-priority nominated pair. A
//! peer-reflexive pair from the client's new address ranks below the host
//! pair it replaces, so the media kept going to the old address until that
//! pair timed out (about 14 s without a check on it), while the client's
//! media already arrived from the new one. A binding request that nominates
//! (USE-CANDIDATE) from an address other than the send address, and that
//! carries a valid MESSAGE-INTEGRITY under the participant's ICE password,
//! retires the remote candidates at the old address, so str0m's nomination
//! moves to the new pair at once.
//!
//! Owns that rule. Must not: act on a request it could not authenticate
//! (anyone who learns the ufrag could send one); an authenticated one can
//! already redirect egress by nominating (see the `is` crate's agent), so
//! this grants a sender nothing more. UDP only: a TCP client's new address
//! is a new connection.

use std::net::SocketAddr;

use str0m::ice::StunMessage;
use str0m::net::Protocol;
use str0m::{Candidate, CandidateKind};

use super::Engine;
use crate::ids::ParticipantId;

impl Engine {
    /// After str0m took `data` from `source` for `id`: when it is an
    /// authenticated nominating binding request from another address than
    /// the one str0m sends to, retire that old address's remote candidates.
    /// Whether the send path moved.
    pub(super) fn follow_nomination(
        &mut self,
        id: ParticipantId,
        source: SocketAddr,
        data: &[u8],
    ) -> bool {
        if !super::is_stun(data) {
            return false;
        }
        let Ok(msg) = StunMessage::parse(data) else {
            return false;
        };
        if !msg.is_binding_request() || !msg.use_candidate() {
            return false;
        }
        let Some(p) = self.participants.get_mut(&id) else {
            return false;
        };
        let mut api = p.session.rtc.direct_api();
        let Some((Protocol::Udp, _, old)) = api.send_addr() else {
            return false;
        };
        if old == source {
            return false;
        }
        let Some(crypto) = str0m::crypto::CryptoProvider::get_default() else {
            return false;
        };
        let pass = api.local_ice_credentials().pass;
        let hmac = |key: &[u8], parts: &[&[u8]]| crypto.sha1_hmac_provider.sha1_hmac(key, parts);
        if !msg.verify(pass.as_bytes(), hmac) {
            return false;
        }
        let host = Candidate::host(old, "udp").ok();
        let prflx = Candidate::from_parts(
            String::new(),
            1,
            Protocol::Udp,
            0,
            old,
            CandidateKind::PeerReflexive,
            None,
            None,
            None,
        );
        let mut retired = false;
        for c in host.iter().chain(std::iter::once(&prflx)) {
            retired |= api.invalidate_candidate(c);
        }
        if retired {
            tracing::debug!(participant = %id, "the client nominated a new address: the send path follows it");
        }
        retired
    }
}
