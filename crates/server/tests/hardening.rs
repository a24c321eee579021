//! Hostile input against a live server (issue: safe to put on the internet):
//! offers str0m would assert on, renegotiations that must apply whole or not
//! at all, a panic inside one participant, a failed shard, joins that never
//! connect, bodies and headers that never end.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"))
}

fn header<'a>(hs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    hs.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `sdp` plus one recvonly video m-line whose payload type repeats the
/// first H.264 one without its `a=fmtp` (str0m: "Pt locked multiple times").
fn with_conflicting_pt(sdp: &str) -> String {
    let pt = sdp
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("a=rtpmap:")?;
            let (pt, codec) = rest.split_once(' ')?;
            codec.starts_with("H264/").then(|| pt.to_string())
        })
        .expect("an H264 payload type");
    // Copy the transport attributes of the first m-section.
    let first = sdp.split("\r\nm=").nth(1).unwrap();
    let transport: Vec<&str> = first
        .lines()
        .filter(|l| {
            l.starts_with("a=ice-")
                || l.starts_with("a=fingerprint")
                || l.starts_with("a=setup")
                || l.starts_with("c=")
        })
        .collect();
    let mut out = sdp
        .replace("a=group:BUNDLE ", "a=group:BUNDLE evil ")
        .trim_end()
        .to_string();
    out.push_str(&format!(
        "\r\nm=video 9 UDP/TLS/RTP/SAVPF {pt}\r\n{}\r\na=mid:evil\r\na=recvonly\r\na=rtcp-mux\r\na=rtpmap:{pt} H264/90000\r\n",
        transport.join("\r\n")
    ));
    out
}

fn sdp_headers(etag: &str) -> Vec<(&'static str, String)> {
    vec![
        ("content-type", "application/sdp".to_string()),
        ("if-match", etag.to_string()),
    ]
}

fn request(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let hs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    server.request(method, path, &hs, body)
}

#[test]
fn offers_str0m_would_assert_on_get_400_and_every_shard_keeps_running() {
    let server = start_server(2, &[]);
    let (a, b) = two_in_a_call(&server, "pt");

    // The same offer as a POST: refused before str0m sees it.
    let evil = with_conflicting_pt(&unconnectable_offer());
    let (st, _, body) = request(
        &server,
        "POST",
        "/api/v1/rooms/pt/participants",
        &sdp_headers("x")[..1],
        &evil,
    );
    assert_eq!(st, 400, "{body}");
    let err = json(&body);
    assert_eq!(err["code"], "bad_offer");
    assert!(
        err["message"].as_str().unwrap().contains("payload type"),
        "{body}"
    );

    // As a PATCH of b's own session (its offer plus the conflicting line).
    let (st, _, body) = request(
        &server,
        "PATCH",
        b.location(),
        &sdp_headers(b.etag()),
        &with_conflicting_pt(b.offer()),
    );
    assert_eq!(st, 400, "{body}");
    assert!(!body.contains("0x"), "no internal details: {body}");

    // Payload types past 127 index past str0m's table.
    let big_pt =
        unconnectable_offer().replacen("a=rtpmap:", "a=rtpmap:200 H264/90000\r\na=rtpmap:", 1);
    let (st, _, body) = request(
        &server,
        "POST",
        "/api/v1/rooms/pt/participants",
        &sdp_headers("x")[..1],
        &big_pt,
    );
    assert_eq!(st, 400, "{body}");

    let h = server.get_json("/healthz");
    assert_eq!(h["status"], "ok", "{h}");
    both_keep_flowing(&server, &a, &b);
    // Both shards still take participants and forward.
    let c = join(&server, "pt2", "c");
    let d = join(&server, "pt2", "d");
    let (ok, _) = c.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 20) == names(&["d"])
    });
    assert!(ok, "a new room does not flow");
    drop(d);
    assert_eq!(server.stats_total("participant_panics"), 0);
}

#[test]
fn a_refused_renegotiation_leaves_the_call_as_it_was() {
    let server = start_server(1, &[]);
    let (a, b) = two_in_a_call(&server, "reneg");
    let (ok, _) = b.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 20) == names(&["a"])
    });
    assert!(ok);

    // m-lines in another order: refused. The same with another ICE ufrag
    // too: str0m starts an ICE restart before it sees the order, so without
    // the rehearsal on the control thread this one broke the call 6 s later.
    let original = b.offer().to_string();
    let sections: Vec<&str> = original.split("\r\nm=").collect();
    let mut reordered = vec![sections[0].to_string()];
    let mut media: Vec<String> = sections[1..].iter().map(|s| s.to_string()).collect();
    media.swap(0, 1);
    reordered.extend(media);
    let reordered = reordered.join("\r\nm=");
    let ufrag = original
        .lines()
        .find_map(|l| l.strip_prefix("a=ice-ufrag:"))
        .unwrap()
        .to_string();
    let restart_and_reorder =
        reordered.replace(&format!("a=ice-ufrag:{ufrag}"), "a=ice-ufrag:zzzz");
    for bad in [reordered, restart_and_reorder] {
        let (st, _, body) = request(&server, "PATCH", b.location(), &sdp_headers(b.etag()), &bad);
        assert!(st == 400, "a broken renegotiation got {st}: {body}");
    }
    // `If-Match: *` is not a precondition.
    let (st, _, body) = request(&server, "PATCH", b.location(), &sdp_headers("*"), &original);
    assert_eq!(st, 428, "{body}");

    // b's call goes on past the point where a half-applied offer failed ICE (6 s).
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline {
        assert!(
            keeps_flowing(&a, 15, Duration::from_secs(3)),
            "a stopped receiving b after a refused PATCH"
        );
        assert!(
            keeps_flowing(&b, 15, Duration::from_secs(3)),
            "b stopped receiving after its refused PATCH"
        );
    }
    let room = server.get_json("/api/v1/rooms/reneg");
    assert_eq!(room["participants"].as_array().unwrap().len(), 2, "{room}");
    // The ETag did not move: the same one still renegotiates (a no-op offer).
    let (st, hs, body) = request(
        &server,
        "PATCH",
        b.location(),
        &sdp_headers(b.etag()),
        &original,
    );
    assert_eq!(st, 200, "{body}");
    assert_ne!(header(&hs, "etag"), Some(b.etag()));
}

#[test]
fn a_panic_in_one_participant_evicts_only_that_participant() {
    let server = start_server(1, &["--test-panic-participant", "boom"]);
    let (a, b) = two_in_a_call(&server, "fault");
    let _boom = join(&server, "fault", "boom");
    let stats = server.wait_stats(Duration::from_secs(15), |s| {
        s["total"]["participant_panics"].as_u64() == Some(1)
    });
    assert_eq!(stats["total"]["participant_panics"], 1, "{stats}");
    let room = server.wait_stats(Duration::from_secs(5), |_| {
        server.get_json("/api/v1/rooms/fault")["participants"]
            .as_array()
            .is_some_and(|p| p.len() == 2)
    });
    let _ = room;
    let members = server.get_json("/api/v1/rooms/fault");
    let names: Vec<&str> = members["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{members}");
    assert!(!names.contains(&"boom"), "{members}");
    both_keep_flowing(&server, &a, &b);
    assert!(server.scrape().contains("corelay_participant_panics_total"));
}

#[test]
fn a_failed_shard_turns_health_503_and_gets_no_new_joins() {
    if corelay_testkit::skip_in_work_stealing(
        "a_failed_shard_turns_health_503_and_gets_no_new_joins",
        "one logical shard: no other shard survives to take joins",
    ) {
        return;
    }
    let server = start_server(
        2,
        &[
            "--on-shard-failure",
            "continue",
            "--test-fail-shard-room",
            "doom",
        ],
    );
    let _victim = corelay_client::join(corelay_client::JoinSpec::new(server.base(), "doom", "v"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let (st, body) = loop {
        let (st, _, body) = server.request("GET", "/healthz", &[], "");
        if st != 200 || Instant::now() > deadline {
            break (st, body);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(st, 503, "{body}");
    let h = json(&body);
    assert_eq!(h["status"], "degraded");
    let failed = h["failed"][0].as_u64().unwrap();
    assert!(
        server
            .scrape()
            .contains(&format!("corelay_shard_up{{shard=\"{failed}\"}} 0")),
        "corelay_shard_up shows the failed shard"
    );
    // Placement skips it: every new participant lands on the other shard and flows.
    let x = join(&server, "alive", "x");
    let y = join(&server, "alive", "y");
    let (ok, _) = x.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 20) == names(&["y"])
    });
    assert!(ok, "the surviving shard does not forward");
    let room = server.get_json("/api/v1/rooms/alive");
    for m in room["participants"].as_array().unwrap() {
        assert_ne!(m["shard"].as_u64().unwrap(), failed, "{room}");
    }
    // The failed shard's participant left its room.
    let (st, _, _) = server.request("GET", "/api/v1/rooms/doom", &[], "");
    assert_eq!(st, 404);
    drop(y);
}

#[test]
fn a_failed_shard_stops_the_process_by_default() {
    let mut server = start_server(2, &["--test-fail-shard-room", "doom"]);
    let _ = corelay_client::join(corelay_client::JoinSpec::new(server.base(), "doom", "v"));
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = server.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "corelay kept running with a dead shard"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "exit status {status:?}");
}

#[test]
fn joins_that_never_connect_are_reaped_and_admission_recovers() {
    // The deadline must outlast 100 joins on a loaded 2-core machine (a
    // join costs a few ms of certificate work), or the first ones are
    // reaped before admission fills.
    let server = start_server(
        1,
        &[
            "--connect-timeout",
            "5s",
            "--max-participants-per-shard",
            "100",
        ],
    );
    let sdp = unconnectable_offer();
    let post = |room: &str| {
        request(
            &server,
            "POST",
            &format!("/api/v1/rooms/{room}/participants"),
            &sdp_headers("x")[..1],
            &sdp,
        )
    };
    // Twice: ICE-less joins fill admission (503), then are all reaped.
    let mut accepted = 0u64;
    for round in 0..2 {
        let started = Instant::now();
        let mut refused = false;
        for i in 0..150 {
            let (st, hs, body) = post(&format!("idle{}", i % 20));
            if st == 503 {
                assert!(header(&hs, "retry-after").is_some());
                refused = true;
                break;
            }
            assert_eq!(st, 201, "round {round} join {i}: {body}");
            accepted += 1;
        }
        assert!(
            refused,
            "round {round}: admission never filled ({:?} for the joins)",
            started.elapsed()
        );
        let stats = server.wait_stats(Duration::from_secs(15), |s| s["participants"] == 0);
        assert_eq!(
            stats["participants"], 0,
            "round {round}: not reaped: {stats}"
        );
    }
    assert!(accepted >= 200, "{accepted}");
    // Counters arrive with the shard's next report.
    let stats = server.wait_stats(Duration::from_secs(3), |s| {
        s["total"]["connect_timeouts"].as_u64() == Some(accepted)
    });
    assert_eq!(stats["total"]["connect_timeouts"], accepted, "{stats}");
    let (st, _, body) = post("idle-again");
    assert_eq!(st, 201, "admission did not recover: {body}");
    // A participant that does connect is not reaped.
    let a = join(&server, "live", "a");
    let _b = join(&server, "live", "b");
    std::thread::sleep(Duration::from_secs(3));
    assert!(keeps_flowing(&a, 30, Duration::from_secs(5)));
}

#[test]
fn http_limits_answer_json() {
    let server = start_server(1, &["--max-sdp-bytes", "65536"]);
    let path = "/api/v1/rooms/lim/participants";
    // A 10 MB body is refused on its Content-Length, before it is read...
    let mut tcp = TcpStream::connect(&server.http).unwrap();
    write!(
        tcp,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n",
        10 << 20
    )
    .unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = vec![0u8; 4096];
    let n = tcp.read(&mut head).unwrap();
    let text = String::from_utf8_lossy(&head[..n]).to_string();
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    assert_eq!(json(body)["code"], "payload_too_large", "{text}");
    // ...and one that is larger than it said (chunked) when it passes the limit.
    let big = "a".repeat(100 << 10);
    let (st, _, body) = request(&server, "POST", path, &sdp_headers("x")[..1], &big);
    assert_eq!(st, 413);
    assert_eq!(json(&body)["code"], "payload_too_large");
    // Content types are exact.
    let (st, _, body) = server.request(
        "POST",
        path,
        &[("content-type", "application/sdpXYZ")],
        &unconnectable_offer(),
    );
    assert_eq!(st, 415, "{body}");
    let (st, _, body) = server.request(
        "POST",
        path,
        &[("content-type", "application/sdp; charset=utf-8")],
        &unconnectable_offer(),
    );
    assert_eq!(st, 201, "{body}");
    // One rule for room names.
    for bad in [".hidden", "a%20b", "-x", &"r".repeat(65)] {
        let (st, _, body) = server.request(
            "POST",
            &format!("/api/v1/rooms/{bad}/participants"),
            &[("content-type", "application/sdp")],
            &unconnectable_offer(),
        );
        assert_eq!(st, 400, "{bad}: {body}");
        assert_eq!(json(&body)["code"], "bad_room_name", "{bad}");
    }
    // Too many m-lines: refused before parsing.
    let mut many = unconnectable_offer();
    for i in 0..70 {
        many.push_str(&format!(
            "m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:x{i}\r\na=recvonly\r\n"
        ));
    }
    let (st, _, body) = request(&server, "POST", path, &sdp_headers("x")[..1], &many);
    assert_eq!(st, 400, "{body}");
    assert_eq!(json(&body)["code"], "too_many_mlines");
    // Parse errors say what, not where in memory.
    let (st, _, body) = request(
        &server,
        "POST",
        path,
        &sdp_headers("x")[..1],
        "v=0\r\no=- x\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 H264/90000\r\n",
    );
    assert_eq!(st, 400);
    assert!(
        !body.contains("0x") && !body.contains("PointerOffset"),
        "{body}"
    );
    // The resource is a capability; the public id is separate.
    let (st, hs, body) = request(
        &server,
        "POST",
        path,
        &sdp_headers("x")[..1],
        &unconnectable_offer(),
    );
    assert_eq!(st, 201, "{body}");
    let loc = header(&hs, "location").unwrap().to_string();
    let secret = loc.rsplit('/').next().unwrap();
    assert_eq!(secret.len(), 32, "{loc}");
    assert!(secret.chars().all(|c| c.is_ascii_hexdigit()), "{loc}");
    let id = header(&hs, "participant-id").unwrap();
    assert!(!loc.contains(id), "{loc} {id}");
    // WHIP trickle on an unknown resource: 404.
    let (st, _, _) = server.request(
        "PATCH",
        "/whip/lim/0123456789abcdef0123456789abcdef",
        &[("content-type", "application/trickle-ice-sdpfrag")],
        "a=ice-ufrag:x\r\n",
    );
    assert_eq!(st, 404);
}

#[test]
fn slow_headers_are_cut_off_and_shutdown_has_a_deadline() {
    let server = start_server(
        1,
        &["--http-header-timeout", "1s", "--shutdown-timeout", "2s"],
    );
    // A client that never finishes its headers is disconnected.
    let mut slow = TcpStream::connect(&server.http).unwrap();
    slow.write_all(b"POST /api/v1/rooms/x/participants HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 256];
    let n = slow.read(&mut buf).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "slow header kept for {:?}",
        started.elapsed()
    );
    assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");

    // SIGTERM while a connection holds a partial request: exit within the deadline.
    let mut partial = TcpStream::connect(&server.http).unwrap();
    partial
        .write_all(b"POST /api/v1/rooms/x/participants HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nv=0")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let st = server.stop();
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "shutdown took {:?}",
        started.elapsed()
    );
    assert!(st.success(), "{st:?}");
}

#[test]
fn data_channel_requests_are_rate_limited() {
    let server = start_server(1, &["--max-requests-per-second", "10"]);
    let (a, b) = two_in_a_call(&server, "flood");
    let before = server.stats_total("dropped_requests");
    let slot = a.snapshot().slots.keys().next().unwrap().clone();
    for i in 0..500 {
        let req = if i % 2 == 0 {
            format!(
                r#"{{"type":"pin","participant":"{}","mid":"{slot}"}}"#,
                b.id()
            )
        } else {
            format!(r#"{{"type":"unpin","mid":"{slot}"}}"#)
        };
        a.send_event(&req);
    }
    let stats = server.wait_stats(Duration::from_secs(5), |s| {
        s["total"]["dropped_requests"].as_u64().unwrap() >= before + 400
    });
    let dropped = stats["total"]["dropped_requests"].as_u64().unwrap() - before;
    assert!(
        dropped >= 400,
        "only {dropped} of 500 requests over the limit dropped"
    );
    assert!(keeps_flowing(&a, 30, Duration::from_secs(10)));
}

/// ICE-TCP takes connections from anyone: frames that are not ICE from a
/// known client are dropped and counted like datagrams, a frame that never
/// completes or a connection that says nothing costs nothing but a socket,
/// and the calls on the shard go on.
#[test]
fn ice_tcp_garbage_is_dropped_and_counted_and_calls_go_on() {
    if corelay_testkit::skip_in_work_stealing(
        "ice_tcp_garbage_is_dropped_and_counted_and_calls_go_on",
        "no ICE-TCP in the work-stealing baseline",
    ) {
        return;
    }
    let server = start_server(1, &[]);
    let (a, b) = two_in_a_call(&server, "tcpjunk");
    let before =
        server.stats_total("dropped_malformed") + server.stats_total("dropped_unknown_source");
    let mut conns = Vec::new();
    for i in 0..20u8 {
        let mut s = TcpStream::connect(("127.0.0.1", server.udp_base)).expect("ICE-TCP listener");
        // A short frame of junk, an empty frame, a STUN-looking frame from a
        // stranger, then a frame announced at 64 KiB that never completes.
        s.write_all(&[0, 4, i, 2, 3, 4]).unwrap();
        s.write_all(&[0, 0]).unwrap();
        let mut stun = vec![0, 20, 0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42];
        stun.extend_from_slice(&[i; 12]);
        s.write_all(&stun).unwrap();
        s.write_all(&[0xff, 0xff, 1, 2, 3]).unwrap();
        conns.push(s);
    }
    let stats = server.wait_stats(Duration::from_secs(10), |s| {
        let t = &s["total"];
        t["dropped_malformed"].as_u64().unwrap_or(0)
            + t["dropped_unknown_source"].as_u64().unwrap_or(0)
            >= before + 40
    });
    let t = &stats["total"];
    assert!(
        t["dropped_malformed"].as_u64().unwrap_or(0)
            + t["dropped_unknown_source"].as_u64().unwrap_or(0)
            >= before + 40,
        "each junk and stranger frame is counted: {stats}"
    );
    both_keep_flowing(&server, &a, &b);
    drop(conns);
}
