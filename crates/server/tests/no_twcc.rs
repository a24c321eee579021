//! Issue 51 item 6 over real UDP, DTLS and SRTP: a subscriber that
//! negotiates no transport-wide congestion control (the load client with
//! `twcc` off, as werift, libdatachannel and aiortc by default) gets a
//! loss-based estimate from its receiver reports and climbs above the
//! lowest simulcast layer of a three-layer publisher.

mod common;

use std::time::Duration;

use common::*;
use corelay_client::VideoSource;

#[test]
fn a_subscriber_without_twcc_climbs_on_its_loss_based_estimate() {
    let server = start_server(1, &[]);
    let publisher = join_with(&server, "nt", "pub", |s| {
        let p = &mut s.participant;
        p.video_slots = 0;
        p.audio_slots = 0;
        p.speaking = false;
        p.simulcast = [150_000, 400_000, 1_500_000]
            .into_iter()
            .map(|bitrate_bps| VideoSource::Synthetic {
                bitrate_bps,
                fps: 30,
                keyframe_interval: 90,
            })
            .collect();
    });
    let viewer = join_with(&server, "nt", "viewer", |s| {
        let p = &mut s.participant;
        p.publish_video = false;
        p.publish_audio = false;
        p.video_slots = 1;
        p.audio_slots = 1;
        p.twcc = false;
    });
    let entry = |s: &serde_json::Value| {
        s["room_detail"][0]["participants"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "viewer").cloned())
            .unwrap_or_default()
    };
    let above_lowest = |p: &serde_json::Value| {
        p["layers"][0]["layer"].as_u64().is_some_and(|l| l > 0) && p["estimate_source"] == "loss"
    };
    // Up to the top layer if the loopback allows (it took 8 s here); above
    // the lowest is what must hold.
    let top = |p: &serde_json::Value| p["layers"][0]["layer"].as_u64() == Some(2);
    let st = server.wait_stats(Duration::from_secs(25), |s| top(&entry(s)));
    let p = entry(&st);
    eprintln!(
        "viewer: estimate {} from {}, layers {}, egress loss {}",
        p["estimate_bps"], p["estimate_source"], p["layers"], p["egress_loss"]
    );
    assert_eq!(p["estimate_source"], "loss", "{p}");
    assert!(above_lowest(&p), "stayed on the lowest layer: {p}");
    assert!(
        p["estimate_bps"].as_u64().is_some_and(|b| b > 400_000),
        "{p}"
    );
    // Its receiver reports give the loss figure TWCC would have.
    assert!(p["egress_loss"].as_f64().is_some(), "{p}");
    for c in [publisher, viewer] {
        c.leave().unwrap();
    }
}
