//! Arbitrary bytes as a renegotiation offer (PATCH): a participant joins
//! with a fixed str0m offer (fixtures/base-offer.sdp), then the input is its
//! next offer, handled as the server handles a PATCH: the control thread's
//! shadow negotiation (`offer::check_renegotiation` against the previous
//! offer), then, when that accepts it, the shard's `Engine::renegotiate`
//! with the prepared offer, and the participant's next timers. Fresh per
//! input, so that every input starts from the same participant.
#![no_main]

use std::time::Duration;

use corelay_core::offer::{accept_offer, check_renegotiation};
use corelay_core::room::MemberInfo;
use corelay_core::{Engine, ParticipantId, RoomId};
use corelay_fuzz::{BASE_OFFER, discard_outputs, origin, roster, server_addr, settings};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    corelay_fuzz::panic_policy();
    let Ok(sdp) = std::str::from_utf8(data) else {
        return;
    };
    let now = origin();
    let accepted = accept_offer(&settings(), now, BASE_OFFER, server_addr(), None)
        .expect("the base offer is accepted");
    let (id, room) = (ParticipantId(1), RoomId(1));
    let members = [MemberInfo {
        id,
        name: "fuzz".into(),
        shard: corelay_core::ShardId(0),
        tracks: accepted.tracks.clone(),
        viewer: false,
        states: Vec::new(),
    }];
    let codecs = accepted.codecs.clone();
    let mut engine = Engine::new(corelay_core::ShardId(0), settings());
    engine.add_participant(
        now,
        id,
        room,
        "fuzz".into(),
        accepted,
        roster(room, &members),
    );
    if let Ok(prepared) = check_renegotiation(&settings(), now, BASE_OFFER, sdp, &codecs) {
        let _ = engine.renegotiate(now, id, prepared);
    }
    engine.handle_timeout(now + Duration::from_secs(1));
    discard_outputs(&mut engine);
});
