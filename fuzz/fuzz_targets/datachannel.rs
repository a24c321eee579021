//! Arbitrary bytes as a data-channel message: parsed as the engine parses
//! every text message (`ClientRequest`), then sent for real by participant
//! 0's client on its "events" channel, so that the engine's SCTP, its parse
//! and its handling of pins and unpins (slot assignment, keyframe requests,
//! slot events back) all run. The session is built once, as in `datagram`.
//!
//! An input that starts with `OPEN_CHANNELS` (0x01) opens channels instead:
//! up to 16 at once, each with a label of up to 64 KiB (`OpenChannels`), so
//! that the engine's channel limits (str0m patch 26: at most 4 channels,
//! 1 KiB of label and protocol) refuse and reset them while the session
//! goes on. The session lives for many inputs, so channels pile up.
#![no_main]

use corelay_core::events::ClientRequest;
use corelay_fuzz::{OpenChannels, with_session};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    corelay_fuzz::panic_policy();
    if let Some(open) = OpenChannels::decode(data) {
        with_session(|live| live.open_channels(&open));
        return;
    }
    let _ = serde_json::from_slice::<ClientRequest>(data);
    with_session(|live| live.send_on_channel(data));
});
