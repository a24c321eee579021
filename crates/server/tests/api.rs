//! The HTTP API's error paths and the packet path's robustness.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::*;

const SDP: &[(&str, &str)] = &[("content-type", "application/sdp")];

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"))
}

#[test]
fn bad_offers_get_400_with_a_reason() {
    let server = start_server(1, &[]);
    let path = "/api/v1/rooms/r/participants";
    let (st, _, body) = server.request("POST", path, SDP, "");
    assert_eq!(st, 400);
    assert_eq!(json(&body)["code"], "bad_offer");
    assert!(json(&body)["message"].as_str().unwrap().contains("empty"));

    let (st, _, body) = server.request("POST", path, SDP, "hello world");
    assert_eq!(st, 400);
    assert_eq!(json(&body)["code"], "bad_offer");

    let (st, _, body) = server.request(
        "POST",
        path,
        SDP,
        "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n",
    );
    assert_eq!(st, 400, "{body}");
    assert_eq!(json(&body)["code"], "bad_offer");

    let (st, _, body) = server.request("POST", path, &[("content-type", "text/plain")], "v=0");
    assert_eq!(st, 415);
    assert_eq!(json(&body)["code"], "unsupported_media_type");

    let (st, _, body) = server.request("POST", "/api/v1/rooms/bad%20room/participants", SDP, "v=0");
    assert_eq!(st, 400);
    assert_eq!(json(&body)["code"], "bad_room_name");
}

#[test]
fn a_vp8_only_client_in_an_h264_room_gets_a_clear_error() {
    // Default codecs (VP8, H.264): an H.264-only publisher opens the room,
    // which takes H.264; a VP8-only client (Firefox without OpenH264 is one)
    // is refused with both codecs named, and a VP8 room next door takes it
    // (issue 10: a default server refused Firefox outright).
    let server = start_server(1, &[]);
    let _h264 = corelay_client::join(corelay_client::JoinSpec::new(server.base(), "codec", "h"))
        .expect("an H.264 publisher opens the room");
    let (st, _, body) = server.request("GET", "/api/v1/rooms/codec", &[], "");
    assert_eq!(st, 200);
    assert_eq!(json(&body)["video_codec"], "H264", "{body}");
    let vp8 = |room: &str| {
        let mut s = corelay_client::JoinSpec::new(server.base(), room, "v");
        s.participant.codec = corelay_client::VideoCodec::Vp8;
        corelay_client::join(s)
    };
    let err = match vp8("codec") {
        Ok(_) => panic!("VP8 offer accepted in an H.264 room"),
        Err(e) => e,
    };
    assert_eq!(err.status, Some(400), "{err:?}");
    let body = json(&err.body);
    assert_eq!(body["code"], "codec_mismatch");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("room's video codec is H264") && message.contains("VP8"),
        "{message}"
    );
    let _v = vp8("codec-vp8").expect("a VP8 client opens a VP8 room");
    let (_, _, body) = server.request("GET", "/api/v1/rooms/codec-vp8", &[], "");
    assert_eq!(json(&body)["video_codec"], "VP8", "{body}");
}

#[test]
fn unknown_resources_and_stale_etags() {
    let server = start_server(1, &[]);
    let (st, _, body) = server.request("GET", "/api/v1/rooms/nope", &[], "");
    assert_eq!(st, 404);
    assert_eq!(json(&body)["code"], "not_found");
    let (st, _, _) = server.request(
        "DELETE",
        "/api/v1/rooms/nope/participants/p000000000001",
        &[],
        "",
    );
    assert_eq!(st, 404);
    let (st, _, _) = server.request("GET", "/no/such/path", &[], "");
    assert_eq!(st, 404);

    let p = join(&server, "etag", "e");
    let loc = p.location().to_string();
    // Wrong ETag: 412. No If-Match: 428.
    let (st, _, body) = server.request(
        "PATCH",
        &loc,
        &[
            ("content-type", "application/sdp"),
            ("if-match", "\"stale\""),
        ],
        "v=0",
    );
    assert_eq!(st, 412, "{body}");
    assert_eq!(json(&body)["code"], "etag_mismatch");
    let (st, _, _) = server.request("PATCH", &loc, SDP, "v=0");
    assert_eq!(st, 428);
    // The right ETag with a broken offer: 400, and the participant is unharmed.
    let etag = p.etag().to_string();
    let (st, _, body) = server.request(
        "PATCH",
        &loc,
        &[("content-type", "application/sdp"), ("if-match", &etag)],
        "garbage",
    );
    assert_eq!(st, 400, "{body}");
    // DELETE, then it is gone.
    let (st, _, _) = server.request("DELETE", &loc, &[], "");
    assert_eq!(st, 204);
    let (st, _, _) = server.request("DELETE", &loc, &[], "");
    assert_eq!(st, 404);
}

#[test]
fn garbage_datagrams_are_dropped_and_counted_while_the_call_flows() {
    let server = start_server(1, &[]);
    let a = join(&server, "junk", "a");
    let b = join(&server, "junk", "b");
    let (ok, _) = a.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 30) == vec!["b".to_string()]
    });
    assert!(ok);
    let before_frames = a.snapshot().slots.values().map(|s| s.frames).sum::<u64>();
    // Every junk datagram lands in exactly one of these.
    let drops = |s: &serde_json::Value| {
        [
            "dropped_malformed",
            "dropped_unknown_source",
            "dropped_by_stack",
            "dropped_addr_limit",
        ]
        .iter()
        .map(|f| s["total"][f].as_u64().unwrap())
        .sum::<u64>()
    };
    let before = drops(&server.get_json("/api/v1/stats"));

    let shard = format!("127.0.0.1:{}", server.udp_base);
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut junk: Vec<Vec<u8>> = vec![
        vec![],                     // empty
        vec![0x00, 0x01, 0x00],     // truncated STUN
        vec![0x80, 0x60, 0x00],     // truncated RTP
        vec![0x81, 0xc9],           // truncated RTCP
        vec![22, 0xfe, 0xfd, 0, 0], // truncated DTLS record
        vec![0xff; 40],             // nothing we know
    ];
    for i in 0..50u8 {
        junk.push(
            (0..(i as usize * 7 % 300 + 1))
                .map(|_| fastrand::u8(..))
                .collect(),
        );
    }
    let mut sent = 0u64;
    for j in &junk {
        // From a stranger and from a real participant's own 5-tuple.
        stranger.send_to(j, &shard).unwrap();
        b.send_raw(j.clone());
        sent += 2;
    }
    // DTLS garbage from a known participant: a full-length bogus record.
    b.send_raw([vec![23, 0xfe, 0xfd], vec![0; 10], vec![0, 20], vec![7; 20]].concat());

    sent += 1;
    // RTCP-shaped junk from a participant's own address is counted since
    // str0m patch 27 (SRTCP that fails authentication; tests/hardening_sctp.rs
    // checks it exactly); this bound still leaves it out, as it did when
    // str0m dropped it without telling.
    let rtcp_shaped = junk
        .iter()
        .filter(|j| matches!(j.as_slice(), [128..=191, 192..=223, ..]) && j.len() >= 8)
        .count() as u64;
    // And a second one: a junk datagram that arrives while its participant
    // has output due anyway (str0m's pacer releases a forwarded packet on
    // the next input, which may be this one) produced a datagram, so the
    // engine cannot tell that str0m dropped it. That is rare (it failed this
    // test about one run in two, one datagram short of 113), so a few may
    // go uncounted; more than that is a counting bug.
    const DUE_OUTPUT_SLACK: u64 = 3;
    let least = (sent - rtcp_shaped).saturating_sub(DUE_OUTPUT_SLACK);
    let stats = server.wait_stats(Duration::from_secs(3), |s| drops(s) >= before + least);
    let counted = drops(&stats) - before;
    // All the others; and not one twice (the call's own traffic drops
    // nothing, but leave room for a stray duplicate of a real packet).
    assert!(
        (least..=sent + 5).contains(&counted),
        "{counted} drops counted for {sent} junk datagrams ({rtcp_shaped} RTCP-shaped): {stats}"
    );
    // The call keeps flowing, intact.
    let (ok, s) = a.wait_until(Duration::from_secs(10), |s| {
        s.slots.values().map(|x| x.frames).sum::<u64>() > before_frames + 30
    });
    assert!(ok, "media stopped after junk");
    assert_clean("a", &s);
    assert!(
        server.get_json("/api/v1/rooms/junk")["participants"]
            .as_array()
            .unwrap()
            .len()
            == 2
    );
}

#[test]
fn sigterm_closes_connections_and_exits_zero() {
    let server = start_server(2, &[]);
    let a = join(&server, "bye", "a");
    let _b = join(&server, "bye", "b");
    let (ok, _) = a.wait_until(Duration::from_secs(20), |s| s.connected);
    assert!(ok);
    let st = server.stop();
    assert!(st.success(), "exit status {st:?}");
}

#[test]
fn health_and_rooms_listing() {
    let server = start_server(2, &[]);
    let h = server.get_json("/healthz");
    assert_eq!(h["status"], "ok");
    // The work-stealing baseline is one logical shard (its workers are not shards).
    let shards = if corelay_testkit::work_stealing() {
        1
    } else {
        2
    };
    assert_eq!(h["shards"], shards);
    let _p = join(&server, "list", "x");
    let rooms = server.get_json("/api/v1/rooms");
    assert_eq!(rooms["rooms"][0]["room"], "list");
    assert_eq!(rooms["rooms"][0]["participants"], 1);
    let room = server.get_json("/api/v1/rooms/list");
    let p = &room["participants"][0];
    assert_eq!(p["name"], "x");
    assert_eq!(p["tracks"].as_array().unwrap().len(), 2);
    assert_eq!(p["slots"].as_array().unwrap().len(), 6);
    let (st, hs, _) = server.request("GET", "/", &[], "");
    assert_eq!(st, 200);
    assert!(
        hs.iter()
            .any(|(k, v)| k == "content-type" && v.starts_with("text/html"))
    );
}
