//! End to end over real UDP, DTLS and SRTP: str0m clients (full ICE,
//! controlling) join rooms through the HTTP API and receive each other.

mod common;

use std::time::Duration;

use common::*;

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn four_participants_receive_each_other() {
    let server = start_server(1, &[]);
    let all = ["alice", "bob", "carol", "dave"];
    let ps: Vec<_> = all.iter().map(|n| join(&server, "r1", n)).collect();
    for (i, p) in ps.iter().enumerate() {
        let others: Vec<&str> = all.iter().copied().filter(|n| *n != all[i]).collect();
        let want = names(&others);
        let (ok, s) = p.wait_until(WAIT, |s| {
            video_sources(s, 30) == want && audio_sources(s, 50) == want
        });
        assert!(
            ok,
            "{} did not receive video+audio from {want:?}: {:#?}",
            all[i], s.slots
        );
        assert_clean(all[i], &s);
        // The roster on the data channel names everyone.
        let roster = s
            .events
            .iter()
            .rev()
            .find(|e| e["type"] == "roster")
            .expect("roster event");
        assert_eq!(roster["participants"].as_array().unwrap().len(), 4);
        let slots = s
            .events
            .iter()
            .rev()
            .find(|e| e["type"] == "slots")
            .expect("slots event");
        let filled = slots["slots"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["kind"] == "video" && !x["participant"].is_null())
            .count();
        assert_eq!(filled, 3);
        // End-to-end latency samples exist and are sane.
        let lat: Vec<u64> = s
            .slots
            .values()
            .flat_map(|st| st.latency_us.iter().copied())
            .collect();
        assert!(!lat.is_empty());
        assert!(lat.iter().all(|&l| l < 1_000_000), "latency over 1 s");
    }
    let room = server.get_json("/api/v1/rooms/r1");
    assert_eq!(room["participants"].as_array().unwrap().len(), 4);
    let stats = server.get_json("/api/v1/stats");
    assert!(stats["total"]["forwarded"].as_u64().unwrap() > 0);
    // One shard: no hop. In the work-stealing baseline every forwarded
    // packet crosses from the publisher's task to each subscriber's.
    let hops = stats["total"]["cross_shard_out"].as_u64().unwrap();
    if corelay_testkit::work_stealing() {
        assert!(hops > 0, "{stats}");
    } else {
        assert_eq!(hops, 0, "{stats}");
    }
    for p in ps {
        p.leave().unwrap();
    }
    let st = server.stop();
    assert!(st.success(), "corelay exited with {st:?}");
}

#[test]
fn one_room_across_two_shards() {
    if corelay_testkit::skip_in_work_stealing("one_room_across_two_shards", "one logical shard") {
        return;
    }
    // Capacity 2 per shard forces the room of 4 onto both shards: one hop.
    let server = start_server(2, &["--max-participants-per-shard", "2"]);
    let all = ["s1", "s2", "s3", "s4"];
    let ps: Vec<_> = all.iter().map(|n| join(&server, "split", n)).collect();
    let room = server.get_json("/api/v1/rooms");
    let shards = room["rooms"][0]["shards"].as_array().unwrap().clone();
    assert_eq!(shards.len(), 2, "room should span both shards: {room}");
    for (i, p) in ps.iter().enumerate() {
        let others: Vec<&str> = all.iter().copied().filter(|n| *n != all[i]).collect();
        let want = names(&others);
        let (ok, s) = p.wait_until(WAIT, |s| {
            video_sources(s, 30) == want && audio_sources(s, 30) == want
        });
        assert!(
            ok,
            "{} did not receive from {want:?}: {:#?}",
            all[i], s.slots
        );
        assert_clean(all[i], &s);
    }
    let stats = server.wait_stats(Duration::from_secs(2), |s| {
        s["total"]["cross_shard_in"].as_u64() > Some(0)
    });
    assert!(stats["total"]["cross_shard_out"].as_u64().unwrap() > 0);
    assert!(stats["total"]["cross_shard_in"].as_u64().unwrap() > 0);
}

#[test]
fn two_rooms_on_two_shards_stay_apart() {
    if corelay_testkit::skip_in_work_stealing(
        "two_rooms_on_two_shards_stay_apart",
        "one logical shard",
    ) {
        return;
    }
    let server = start_server(2, &[]);
    let a: Vec<_> = ["a1", "a2"]
        .iter()
        .map(|n| join(&server, "ra", n))
        .collect();
    let b: Vec<_> = ["b1", "b2"]
        .iter()
        .map(|n| join(&server, "rb", n))
        .collect();
    let rooms = server.get_json("/api/v1/rooms");
    let shard_of = |room: &str| {
        rooms["rooms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["room"] == room)
            .unwrap()["shards"]
            .clone()
    };
    assert_eq!(shard_of("ra").as_array().unwrap().len(), 1);
    assert_ne!(
        shard_of("ra"),
        shard_of("rb"),
        "two rooms should be spread over two shards"
    );
    for (p, other) in a.iter().zip(["a2", "a1"]).chain(b.iter().zip(["b2", "b1"])) {
        let (ok, s) = p.wait_until(WAIT, |s| video_sources(s, 30) == vec![other.to_string()]);
        assert!(ok, "expected only {other}: {:#?}", s.slots);
        for st in s.slots.values() {
            assert!(
                st.sources.iter().all(|src| src == other),
                "cross-room media: {:?}",
                st.sources
            );
        }
    }
    let stats = server.get_json("/api/v1/stats");
    assert_eq!(
        stats["total"]["cross_shard_out"].as_u64().unwrap(),
        0,
        "{stats}"
    );
}

#[test]
fn a_freed_slot_is_refilled_continuously_with_a_keyframe() {
    let server = start_server(1, &[]);
    // A viewer with one video slot and no tracks of its own.
    let viewer = join_with(&server, "swap", "viewer", |s| {
        s.participant.publish_video = false;
        s.participant.publish_audio = false;
        s.participant.video_slots = 1;
        s.participant.audio_slots = 0;
    });
    let first = join(&server, "swap", "first");
    let (ok, _) = viewer.wait_until(WAIT, |s| video_sources(s, 30) == vec!["first".to_string()]);
    assert!(ok, "viewer never saw first");
    let second = join(&server, "swap", "second");
    // The slot keeps showing `first` while it is there. (Wait out the keyframe
    // requests of second's own join, so the one below is the switch's.)
    std::thread::sleep(Duration::from_millis(1000));
    let before = second.snapshot().keyframe_requests;
    first.leave().unwrap();
    let (ok, s) = viewer.wait_until(WAIT, |s| {
        s.slots.values().any(|st| {
            st.last_source.as_deref() == Some("second")
                && st.frames_by_source.get("second").copied().unwrap_or(0) >= 30
        })
    });
    assert!(ok, "slot was not refilled with second: {:#?}", s.slots);
    // The viewer was told who left, and why.
    let left: Vec<_> = s.events.iter().filter(|e| e["type"] == "left").collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        (&left[0]["name"], &left[0]["reason"]),
        (&"first".into(), &"left".into())
    );
    let st = s.slots.values().next().unwrap();
    assert_eq!(st.sources, vec!["first".to_string(), "second".to_string()]);
    assert_eq!(
        st.ssrcs.len(),
        1,
        "the slot must stay one stream (one SSRC): {:?}",
        st.ssrcs
    );
    assert_clean("viewer", &s);
    let (ok, s2) = second.wait_until(WAIT, |s| s.keyframe_requests > before);
    assert!(
        ok,
        "the new source got no keyframe request ({} before, {} after); server: {}",
        before,
        s2.keyframe_requests,
        server.get_json("/api/v1/stats")["total"]
    );
    // The slot event names the new source.
    let last = s
        .events
        .iter()
        .rev()
        .find(|e| e["type"] == "slots")
        .unwrap();
    assert_eq!(
        last["slots"][0]["participant"],
        serde_json::json!(second.id())
    );
}

#[test]
fn admission_refuses_the_third_participant_with_503() {
    let server = start_server(1, &["--max-participants-per-shard", "2"]);
    let _a = join(&server, "full", "a");
    let _b = join(&server, "full", "b");
    let err = match corelay_client::join(corelay_client::JoinSpec::new(server.base(), "full", "c"))
    {
        Ok(_) => panic!("third participant was admitted"),
        Err(e) => e,
    };
    assert_eq!(err.status, Some(503), "{err:?}");
    let body: serde_json::Value = serde_json::from_str(&err.body).unwrap();
    assert_eq!(body["code"], "no_capacity");
    assert!(body["message"].as_str().unwrap().contains("full"));
    assert!(err.retry_after.is_some(), "503 without Retry-After");
}

#[test]
fn a_vanished_participant_is_removed_and_its_slot_freed() {
    // Removed at ICE consent (about 14.6 s of silence) and the grace after.
    let server = start_server(1, &["--reconnect-grace", "2s"]);
    let a = join(&server, "gone", "a");
    let b = join(&server, "gone", "b");
    let (ok, _) = a.wait_until(WAIT, |s| video_sources(s, 10) == vec!["b".to_string()]);
    assert!(ok);
    b.vanish(); // no DELETE: the server must notice (ICE consent) on its own
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let room = server.get_json("/api/v1/rooms/gone");
        if room["participants"].as_array().map(|p| p.len()) == Some(1) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "vanished participant still listed: {room}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, s) = a.wait_until(Duration::from_secs(5), |s| {
        s.events
            .iter()
            .rev()
            .find(|e| e["type"] == "slots")
            .is_some_and(|e| {
                e["slots"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|x| x["participant"].is_null())
            })
    });
    assert!(ok, "slot not freed: {:?}", s.events.last());
}

/// A server bound to every address of a host that has several answers
/// from the one in its candidates, where the client sent: on loopback the
/// kernel would answer 127.0.0.2 from 127.0.0.1. The own media path takes
/// only what comes from the address it sends to (so does a browser's ICE),
/// so it carries the media only if the answers come from there. So for
/// `0.0.0.0` and for a dual-stack `::`, whose IPv4 peers come as v4-mapped
/// addresses.
#[test]
fn a_server_bound_to_every_address_answers_from_the_advertised_one() {
    for bind in ["0.0.0.0", "::"] {
        let server = start_server(1, &["--bind-ip", bind, "--public-ip", "127.0.0.2"]);
        let (alice, bob) = (
            join_own(&server, "wild", "alice"),
            join_own(&server, "wild", "bob"),
        );
        for (p, name, other) in [(&alice, "alice", "bob"), (&bob, "bob", "alice")] {
            let (ok, s) = p.wait_until(WAIT, |s| video_sources(s, 60) == names(&[other]));
            assert!(ok, "{bind}: {name} did not receive {other}: {:#?}", s.slots);
            let packets: u64 = s.slots.values().map(|st| st.packets).sum();
            assert!(
                s.own_path_packets * 10 > packets * 9,
                "{bind}: {name}: {} of {packets} packets from the address it sent to",
                s.own_path_packets
            );
        }
        for p in [alice, bob] {
            p.leave().unwrap();
        }
    }
}

/// Joins `name` to `room` with the load client's own media path on.
fn join_own(server: &Server, room: &str, name: &str) -> corelay_client::ParticipantHandle {
    join_with(server, room, name, |s| {
        s.participant.own_media_path = true;
    })
}

/// The load generator's own media path (corelay_client::fastpath): two
/// participants send and receive RTP past str0m's streams once connected,
/// beside one on str0m's path. Everyone receives everyone intact, the own
/// path carries the media it took over, and its transport-wide receipts
/// reach the server as TWCC feedback: each downlink estimate climbs from
/// its 300 kbit/s start past what two 400 kbit/s videos need, which takes
/// feedback on the server's probes and media all along.
#[test]
fn the_clients_own_media_path_is_received_intact_and_feeds_the_estimate() {
    let server = start_server(1, &[]);
    let alice = join_own(&server, "own", "alice");
    let bob = join_own(&server, "own", "bob");
    let carol = join(&server, "own", "carol");
    let all = ["alice", "bob", "carol"];
    for (i, p) in [&alice, &bob, &carol].into_iter().enumerate() {
        let others: Vec<&str> = all.iter().copied().filter(|n| *n != all[i]).collect();
        let want = names(&others);
        let (ok, s) = p.wait_until(WAIT, |s| {
            video_sources(s, 60) == want && audio_sources(s, 100) == want
        });
        assert!(ok, "{} did not receive {want:?}: {:#?}", all[i], s.slots);
        assert_clean(all[i], &s);
        let packets: u64 = s.slots.values().map(|st| st.packets).sum();
        if i < 2 {
            // All but each stream's first packets (str0m maps the SSRC).
            assert!(
                s.own_path_packets * 10 > packets * 9,
                "{}: {} of {packets} packets on the own path",
                all[i],
                s.own_path_packets
            );
            // The server's transport-wide feedback on what it sends is
            // recognised and not handed to str0m.
            assert!(s.feedback_ignored > 0, "{}: no feedback skipped", all[i]);
        } else {
            assert_eq!(s.own_path_packets, 0);
            assert_eq!(s.feedback_ignored, 0);
        }
        assert_eq!(s.bad_datagrams, 0, "{}", all[i]);
        assert_eq!(s.send_refused, 0, "{}", all[i]);
        assert!(!s.ice_rtt_us.is_empty(), "{}: no ICE RTT", all[i]);
    }
    let climbed = |p: &serde_json::Value| p["estimate_bps"].as_u64() > Some(700_000);
    let st = server.wait_stats(Duration::from_secs(15), |s| {
        s["room_detail"][0]["participants"]
            .as_array()
            .is_some_and(|ps| ps.iter().all(climbed))
    });
    for p in st["room_detail"][0]["participants"].as_array().unwrap() {
        assert!(climbed(p), "estimate did not climb: {p}");
        // What a climb counts on: the lowest of the last seconds, so never
        // above the estimate and, while it rose, below it.
        let sure = p["climb_estimate_bps"].as_u64();
        assert!(sure.is_some_and(|v| v > 0), "no climb estimate: {p}");
        assert!(sure <= p["estimate_bps"].as_u64(), "{p}");
    }
    for p in [alice, bob, carol] {
        p.leave().unwrap();
    }
}

/// The own media path NACKs what it lost: behind a 250 kbit/s downlink
/// (the client's emulated bottleneck drops what overflows its queue) a
/// subscriber on the own path misses packets of a 400 kbit/s video, sends
/// NACKs for them, the server counts them, and the resends arrive (on the
/// RTX stream, which str0m unwraps: packets beyond the own path's).
#[test]
fn the_clients_own_media_path_nacks_what_a_limited_downlink_lost() {
    let server = start_server(1, &[]);
    let alice = join_with(&server, "nack", "alice", |s| {
        s.participant.own_media_path = true;
        s.participant.downlink_limit_bps = Some(250_000);
        s.participant.publish_video = false;
        s.participant.publish_audio = false;
    });
    let _bob = join(&server, "nack", "bob");
    let (ok, s) = alice.wait_until(WAIT, |s| {
        let packets: u64 = s.slots.values().map(|st| st.packets).sum();
        s.nacks_sent >= 5 && packets > s.own_path_packets + 20
    });
    let packets: u64 = s.slots.values().map(|st| st.packets).sum();
    assert!(
        ok,
        "nacks {} packets {packets} own path {} downlink {:?}",
        s.nacks_sent, s.own_path_packets, s.downlink
    );
    // Resends arrive late, so out of order; never corrupt.
    for (mid, st) in &s.slots {
        assert_eq!(st.corrupt, 0, "slot {mid}: {st:?}");
    }
    let st = server.wait_stats(Duration::from_secs(5), |s| {
        s["total"]["nacks_received"].as_u64() > Some(0)
    });
    assert!(
        st["total"]["nacks_received"].as_u64() > Some(0),
        "{}",
        st["total"]
    );
}
