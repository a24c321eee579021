//! The harness does what the targets rely on, and the checked-in seeds
//! (fuzz/seeds) are still what they claim to be. Part of `cargo test
//! --workspace`.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use corelay_core::offer::{accept_offer, check_renegotiation};
use corelay_fuzz_harness::{BASE_OFFER, Live, OpenChannels, origin, server_addr, settings};

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut out: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_live_session_connects_and_survives_idle_time() {
    let mut live = Live::connect();
    for _ in 0..5_000 {
        live.advance(Duration::from_millis(10)); // 50 s: consent, RTCP, stats
    }
    assert!(live.healthy());
}

#[test]
fn the_recorded_stun_request_is_answered_in_a_new_session() {
    let (_, stun) = seeds("datagram")
        .into_iter()
        .find(|(n, _)| n == "stun-binding-request-1.bin")
        .unwrap();
    let mut live = Live::connect();
    live.engine_mut().finish_batch();
    live.engine_mut().outputs().transmits.clear();
    let own = live.clients()[0].addr;
    let now = live.now();
    live.engine_mut()
        .handle_datagram(now, None, own, server_addr(), &stun);
    // A STUN success response (0x0101): integrity held with this session's password.
    live.engine_mut().finish_batch();
    let out = &live.engine_mut().outputs().transmits;
    assert!(
        out.iter().any(|t| t.contents.starts_with(&[0x01, 0x01])),
        "no STUN response to the recorded request"
    );
}

#[test]
fn every_datagram_seed_leaves_the_session_usable() {
    let mut live = Live::connect();
    for (name, d) in seeds("datagram") {
        live.feed_datagram(&d);
        assert!(live.healthy(), "{name} broke the session");
    }
}

/// The `datachannel` target's channel-opening inputs (issue 56.2): many
/// channels with long labels are refused by the engine (counted, never
/// kept), short ones up to its limit of 4 are opened, and the session, its
/// "events" channel included, goes on.
#[test]
fn channels_opened_by_the_fuzz_input_are_bounded_and_the_session_goes_on() {
    let (_, seed) = seeds("datachannel")
        .into_iter()
        .find(|(n, _)| n == "open-many-long.bin")
        .unwrap();
    let open = OpenChannels::decode(&seed).unwrap();
    assert_eq!((open.count, open.label_len), (16, 60_000));
    let mut live = Live::connect();
    let refused = |l: &Live| l.engine().counters().refused_channels;
    live.open_channels(&open);
    // Every one of them: the label is over the limit.
    assert_eq!(refused(&live), 16);
    assert!(live.healthy());
    // Short labels: the "events" channel and 3 more fit, the rest is refused.
    live.open_channels(&OpenChannels {
        count: 5,
        label_len: 8,
        fill: b"",
    });
    assert_eq!(refused(&live), 18);
    // The events channel still carries requests and their answers.
    let (_, pin) = seeds("datachannel")
        .into_iter()
        .find(|(n, _)| n == "pin.json")
        .unwrap();
    let before = live.clients()[0].messages_received;
    live.send_on_channel(&pin);
    for _ in 0..10 {
        live.advance(Duration::from_millis(2));
    }
    assert!(live.clients()[0].messages_received > before);
    assert!(live.healthy());
}

#[test]
fn a_pin_on_the_channel_reaches_the_engine() {
    let (_, pin) = seeds("datachannel")
        .into_iter()
        .find(|(n, _)| n == "pin.json")
        .unwrap();
    let mut live = Live::connect();
    let before = live.clients()[0].messages_received;
    live.send_on_channel(&pin);
    for _ in 0..10 {
        live.advance(Duration::from_millis(2));
    }
    // The engine answers a pin with the slots event.
    assert!(live.clients()[0].messages_received > before);
    assert!(live.healthy());
}

#[test]
fn offer_seeds_are_accepted_or_refused_as_named() {
    for (name, sdp) in seeds("offer") {
        let sdp = String::from_utf8(sdp).unwrap();
        let r = accept_offer(&settings(), origin(), &sdp, server_addr(), None);
        if name.contains("vp8") {
            assert_eq!(r.unwrap_err().code(), "codec_mismatch", "{name}");
        } else {
            assert!(r.is_ok(), "{name}: {:?}", r.err());
        }
    }
}

#[test]
fn renegotiation_seeds_pass_the_shadow_negotiation() {
    for (name, sdp) in seeds("renegotiate") {
        let sdp = String::from_utf8(sdp).unwrap();
        let r = check_renegotiation(
            &settings(),
            origin(),
            BASE_OFFER,
            &sdp,
            &settings().video_codecs,
        );
        assert!(r.is_ok(), "{name}: {:?}", r.err());
    }
}

#[test]
fn tolerated_panics_inside_the_fault_boundary_are_noted() {
    // SAFETY: no other test reads or writes the environment.
    unsafe { std::env::set_var("CORELAY_FUZZ_ISOLATED", "tolerate") };
    corelay_fuzz_harness::panic_policy();
    let e = corelay_core::guard::isolate(|| -> u8 { panic!("inside") }).unwrap_err();
    assert_eq!(e.message, "inside");
    assert!(e.location.unwrap().contains("harness.rs"));
}

/// The mute seeds name participant 0's own video track: a mute stops its
/// packets at the engine (counted), an unmute lets them through again, and
/// an unknown mid is refused (counted) without harm.
#[test]
fn mute_seeds_reach_the_engine() {
    let seed = |name: &str| {
        seeds("datachannel")
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d)
            .unwrap_or_else(|| panic!("seed {name}"))
    };
    let mut live = Live::connect();
    let step = |live: &mut Live| {
        for _ in 0..10 {
            live.advance(Duration::from_millis(2));
        }
    };
    let mut seq = 1;
    let mut publish = |live: &mut Live| {
        for _ in 0..5 {
            live.publish(0, true, seq, vec![0x10, 0, 0, 1, 2, 3]);
            seq += 1;
        }
        step(live);
    };
    publish(&mut live);
    let muted = |live: &Live| live.engine().counters().dropped_muted;
    assert_eq!(muted(&live), 0);
    live.send_on_channel(&seed("mute.json"));
    step(&mut live);
    publish(&mut live);
    assert_eq!(
        muted(&live),
        5,
        "a muted track's packets stop at the engine"
    );
    live.send_on_channel(&seed("unmute.json"));
    step(&mut live);
    publish(&mut live);
    assert_eq!(muted(&live), 5);
    let refused = live.engine().counters().dropped_requests;
    live.send_on_channel(&seed("mute-unknown.json"));
    step(&mut live);
    assert_eq!(live.engine().counters().dropped_requests, refused + 1);
    assert!(live.healthy());
}
