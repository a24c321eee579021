//! Issue 54.1, one UDP port for every shard (`--port-layout shared`): the
//! shards' sockets share the port (SO_REUSEPORT), the kernel spreads the
//! flows over them by hash, and a shard hands a datagram for another
//! shard's participant over to it. Real UDP, DTLS and SRTP on loopback.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::*;

const WAIT: Duration = Duration::from_secs(20);

/// Six rooms of two on two shards behind one port: every participant gets
/// its partner's video and audio, although the kernel sent about half the
/// flows to the other shard's socket (handed over, each counted once on
/// each side), and nothing listens on the port after it.
#[test]
fn two_shards_behind_one_port_and_every_pair_decodes() {
    if corelay_testkit::skip_in_work_stealing(
        "two_shards_behind_one_port_and_every_pair_decodes",
        "one socket",
    ) {
        return;
    }
    let server = start_server(2, &["--port-layout", "shared"]);
    // One UDP port: udp-port + 1 is free (bound here at once).
    let next = UdpSocket::bind(("127.0.0.1", server.udp_base + 1));
    assert!(next.is_ok(), "something listens on UDP udp-port + 1");
    let mut pairs = Vec::new();
    for r in 0..6 {
        let room = format!("r{r}");
        pairs.push((join(&server, &room, "a"), join(&server, &room, "b")));
    }
    let rooms = server.get_json("/api/v1/rooms");
    let on_shard = |s: u64| {
        rooms["rooms"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["shards"].as_array().unwrap().contains(&s.into()))
            .count()
    };
    assert!(
        on_shard(0) > 0 && on_shard(1) > 0,
        "rooms on one shard: {rooms}"
    );
    for (a, b) in &pairs {
        for (p, other) in [(a, "b"), (b, "a")] {
            let want = names(&[other]);
            let (ok, s) = p.wait_until(WAIT, |s| {
                video_sources(s, 30) == want && audio_sources(s, 30) == want
            });
            assert!(ok, "no media from {other}: {:#?}", s.slots);
            assert_clean(other, &s);
        }
    }
    // 24 flows (each client's one socket, both ways counted at the server
    // once): the chance that the kernel's hash sent none to the other
    // shard is 2^-12.
    let stats = server.wait_stats(Duration::from_secs(3), |s| {
        s["total"]["handed_over"].as_u64() > Some(0)
            && s["total"]["handed_over"] == s["total"]["handed_in"]
    });
    let t = &stats["total"];
    assert!(t["handed_over"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(t["handed_over"], t["handed_in"], "{t}");
    assert_eq!(t["dropped_unknown_source"], 0, "{t}");
}

/// The port-per-shard layout hands nothing over.
#[test]
fn a_port_per_shard_hands_nothing_over() {
    if corelay_testkit::skip_in_work_stealing("a_port_per_shard_hands_nothing_over", "one socket") {
        return;
    }
    let server = start_server(2, &["--port-layout", "per-shard"]);
    let mut pairs = Vec::new();
    for r in 0..2 {
        let room = format!("p{r}");
        pairs.push((join(&server, &room, "a"), join(&server, &room, "b")));
    }
    for (a, _b) in &pairs {
        let (ok, s) = a.wait_until(WAIT, |s| video_sources(s, 30) == names(&["b"]));
        assert!(ok, "{:#?}", s.slots);
    }
    let stats = server.get_json("/api/v1/stats");
    assert_eq!(stats["total"]["handed_over"], 0, "{stats}");
}
