//! Arbitrary bytes as the SDP body of a join (POST .../participants, WHIP,
//! WHEP): what the control thread's `join` does with it
//! (crates/server/src/control/mod.rs), then, for an accepted offer, what the
//! shard does (`Engine::add_participant`) and its first timers.
#![no_main]

use std::time::Duration;

use corelay_core::offer::accept_offer;
use corelay_core::room::MemberInfo;
use corelay_core::{Engine, ParticipantId, RoomId};
use corelay_fuzz::{discard_outputs, origin, roster, server_addr, settings};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    corelay_fuzz::panic_policy();
    // The HTTP layer takes the body as a String: non-UTF-8 never gets here.
    let Ok(sdp) = std::str::from_utf8(data) else {
        return;
    };
    let now = origin();
    match accept_offer(&settings(), now, sdp, server_addr(), None) {
        Ok(accepted) => {
            let (id, room) = (ParticipantId(1), RoomId(1));
            let members = [MemberInfo {
                id,
                name: "fuzz".into(),
                shard: corelay_core::ShardId(0),
                tracks: accepted.tracks.clone(),
                viewer: false,
                states: Vec::new(),
            }];
            let mut engine = Engine::new(corelay_core::ShardId(0), settings());
            engine.add_participant(
                now,
                id,
                room,
                "fuzz".into(),
                accepted,
                roster(room, &members),
            );
            engine.handle_timeout(now + Duration::from_secs(1));
            discard_outputs(&mut engine);
        }
        Err(e) => assert!(!e.code().is_empty(), "an error without a code: {e:?}"),
    }
});
