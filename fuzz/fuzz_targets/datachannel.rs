//! Arbitrary bytes as a data-channel message: parsed as the engine parses
//! every text message (`ClientRequest`), then sent for real by participant
//! 0's client on its "events" channel, so that the engine's SCTP, its parse
//! and its handling of pins and unpins (slot assignment, keyframe requests,
//! slot events back) all run. The session is built once, as in `datagram`.
#![no_main]

use corelay_core::events::ClientRequest;
use corelay_fuzz::with_session;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    corelay_fuzz::panic_policy();
    let _ = serde_json::from_slice::<ClientRequest>(data);
    with_session(|live| live.send_on_channel(data));
});
