//! Arbitrary bytes as one UDP datagram to a shard: a live engine whose
//! participant 0 is really connected (ICE, DTLS, SCTP) gets each input from
//! that participant's own address and from a stranger's, then the virtual
//! clock moves 2 ms and everything the engine sent is delivered. The engine
//! must never panic. The session is built once, and again only when an
//! input broke it (a participant left) or after 50 000 inputs.
#![no_main]

use corelay_fuzz::with_session;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    corelay_fuzz::panic_policy();
    with_session(|live| live.feed_datagram(data));
});
