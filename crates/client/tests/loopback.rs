//! End-to-end test of the client (HTTP join, driver thread, real UDP
//! sockets, real clock) against a real `corelay_core::Engine` behind a UDP
//! socket, with a minimal HTTP front in this file standing in for the
//! server's control thread: two participants receive each other's media
//! (ICE, DTLS, SRTP, RTP mode both ways, abs-capture-time, payload
//! verification) and room events on the data channel. Owns only this
//! harness; engine behaviour in depth is corelay-sim's job, the full server
//! is crates/server's tests'.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use corelay_client::{JoinSpec, join};
use corelay_core::offer::accept_offer;
use corelay_core::room::{MemberInfo, RoomUpdate};
use corelay_core::{Engine, ParticipantId, RoomId, RtcSettings, ShardId};

/// What the HTTP front asks of the media thread.
enum Msg {
    /// An offer: the answer and the new id, or why not.
    Join {
        name: String,
        offer: String,
        reply: Sender<Result<(ParticipantId, String), String>>,
    },
    Leave(ParticipantId),
}

struct Server {
    http: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn start_server() -> Server {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let http = TcpListener::bind("127.0.0.1:0").unwrap();
    let http_addr = http.local_addr().unwrap();
    let (tx, rx) = channel::<Msg>();
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::spawn(move || http_loop(http, tx));
    let st = stop.clone();
    std::thread::spawn(move || media_loop(udp, rx, st));
    Server {
        http: http_addr,
        stop,
    }
}

fn respond(s: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &str) {
    let mut r = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    r.push_str(body);
    let _ = s.write_all(r.as_bytes());
}

fn http_loop(l: TcpListener, tx: Sender<Msg>) {
    for s in l.incoming() {
        let Ok(mut s) = s else { continue };
        let mut rd = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        rd.read_line(&mut line).unwrap();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            rd.read_line(&mut h).unwrap();
            if h.trim().is_empty() {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0u8; len];
        rd.read_exact(&mut body).unwrap();
        let body = String::from_utf8(body).unwrap();
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("");
        let path = parts.next().unwrap_or("");
        if method == "DELETE" {
            if let Some(Ok(id)) = path.rsplit('/').next().map(str::parse) {
                let _ = tx.send(Msg::Leave(id));
            }
            respond(&mut s, "204 No Content", &[], "");
            continue;
        }
        if path.contains("/rooms/full/") {
            respond(
                &mut s,
                "503 Service Unavailable",
                &[
                    ("Retry-After", "2".into()),
                    ("Content-Type", "application/json".into()),
                ],
                r#"{"code":"no_capacity","message":"full"}"#,
            );
            continue;
        }
        let name = path
            .split_once("name=")
            .map_or("guest", |(_, n)| n)
            .to_string();
        let (reply, answer) = channel();
        let _ = tx.send(Msg::Join {
            name,
            offer: body,
            reply,
        });
        match answer.recv().unwrap() {
            Ok((id, sdp)) => respond(
                &mut s,
                "201 Created",
                &[
                    ("Location", format!("/api/v1/rooms/r/participants/{id}")),
                    ("ETag", "\"1\"".into()),
                    ("Content-Type", "application/sdp".into()),
                ],
                &sdp,
            ),
            Err(e) => respond(
                &mut s,
                "400 Bad Request",
                &[],
                &format!(r#"{{"code":"bad_offer","message":{e:?}}}"#),
            ),
        }
    }
}

/// One shard, one room: the engine behind a blocking UDP socket with a
/// short read timeout, and the room's roster.
fn media_loop(udp: UdpSocket, rx: Receiver<Msg>, stop: Arc<AtomicBool>) {
    let local = udp.local_addr().unwrap();
    let settings = RtcSettings::default();
    let mut engine = Engine::new(ShardId(0), settings.clone());
    let room = RoomId(1);
    let mut members: Vec<MemberInfo> = Vec::new();
    let roster = |members: &[MemberInfo]| RoomUpdate {
        room,
        name: "r".into(),
        members: members.to_vec(),
        departed: Vec::new(),
    };
    let mut buf = vec![0u8; 2000];
    while !stop.load(Ordering::Relaxed) {
        while let Ok(msg) = rx.try_recv() {
            let now = Instant::now();
            match msg {
                Msg::Join { name, offer, reply } => {
                    match accept_offer(&settings, now, &offer, local, None) {
                        Ok(acc) => {
                            let id = ParticipantId(members.len() as u64 + 1);
                            members.push(MemberInfo {
                                id,
                                name: name.clone(),
                                shard: ShardId(0),
                                tracks: acc.tracks.clone(),
                                viewer: false,
                                states: Vec::new(),
                            });
                            let answer = acc.answer.clone();
                            engine.add_participant(now, id, room, name, acc, roster(&members));
                            let _ = reply.send(Ok((id, answer)));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e.to_string()));
                        }
                    }
                }
                Msg::Leave(id) => {
                    engine.remove_participant(now, id);
                    members.retain(|m| m.id != id);
                    engine.apply_room(now, roster(&members));
                }
            }
        }
        let wait = engine
            .poll_timeout()
            .map_or(Duration::from_millis(2), |t| {
                t.saturating_duration_since(Instant::now())
            })
            .clamp(Duration::from_micros(100), Duration::from_millis(2));
        udp.set_read_timeout(Some(wait)).unwrap();
        if let Ok((n, src)) = udp.recv_from(&mut buf) {
            engine.handle_datagram(Instant::now(), None, src, local, &buf[..n]);
        }
        let now = Instant::now();
        if engine.poll_timeout().is_some_and(|t| t <= now) {
            engine.handle_timeout(now);
        }
        engine.finish_batch();
        let out = engine.outputs();
        for t in out.transmits.drain(..) {
            let _ = udp.send_to(&t.contents, t.destination);
        }
        out.forwarded.clear();
        out.peers.clear();
        out.control.clear();
    }
}

#[test]
fn two_participants_through_a_real_engine() {
    let server = start_server();
    let url = format!("http://{}", server.http);
    let spec = |name: &str| {
        let mut spec = JoinSpec::new(&url, "r", name);
        spec.participant.video_slots = 1;
        spec.participant.audio_slots = 1;
        spec
    };
    let alice = join(spec("alice")).expect("join alice");
    let bob = join(spec("bob")).expect("join bob");
    assert_eq!(alice.id(), ParticipantId(1).to_string());
    assert_eq!(alice.etag(), "\"1\"");
    let ready = |s: &corelay_client::Snapshot| {
        s.connected
            && s.frames_of_kind("video") >= 30
            && s.frames_of_kind("audio") >= 30
            && !s.events_of_type("slots").is_empty()
    };
    let (ok, s) = alice.wait_until(Duration::from_secs(10), ready);
    assert!(ok, "alice got no media/events: {s:#?}");
    let (ok, b) = bob.wait_until(Duration::from_secs(10), ready);
    assert!(ok, "bob got no media/events: {b:#?}");
    assert_eq!(s.events[0]["type"], "welcome");
    assert_eq!(s.events[0]["participant"], alice.id());

    // A pin request on the data channel is answered with a slots event.
    let slots_before = alice.snapshot().events_of_type("slots").len();
    let video_mid = s
        .slots
        .iter()
        .find(|(_, st)| st.kind == "video")
        .map(|(m, _)| m.clone())
        .unwrap();
    alice.send_event(
        &serde_json::json!({"type": "pin", "participant": bob.id(), "mid": video_mid}).to_string(),
    );
    let (ok, s) = alice.wait_until(Duration::from_secs(5), |s| {
        s.events_of_type("slots").len() > slots_before
    });
    assert!(ok, "no slots event after the pin: {:?}", s.events);
    let last = s.events_of_type("slots").last().cloned().unwrap().clone();
    assert!(
        last["slots"]
            .as_array()
            .unwrap()
            .iter()
            .any(|sl| sl["mid"] == video_mid.as_str() && sl["participant"] == bob.id()),
        "{last}"
    );

    for (who, snap, other) in [("alice", &s, "bob"), ("bob", &b, "alice")] {
        for (mid, st) in &snap.slots {
            let mut l = st.latency_us.clone();
            l.sort();
            eprintln!(
                "{who} slot {mid} {}: packets {} frames {} keyframes {} latency p50 {}us max {}us",
                st.kind,
                st.packets,
                st.frames,
                st.keyframes,
                l[l.len() / 2],
                l[l.len() - 1]
            );
            assert_eq!(st.corrupt, 0, "{who} slot {mid}: {st:?}");
            assert_eq!(st.ts_backwards, 0);
            assert_eq!(st.sources, vec![other.to_string()]);
            assert!(st.frames_by_source[other] > 0);
            assert!(
                st.latency_us.iter().all(|&l| l < 1_000_000),
                "{:?}",
                st.latency_us
            );
            assert!(!st.latency_us.is_empty());
            if st.kind == "video" {
                assert_eq!(st.abs_capture_missing, 0);
                assert_eq!(st.abs_capture_mismatch, 0);
                assert!(st.keyframes >= 1);
            }
        }
        assert_eq!(snap.video_mids.len(), 1);
        assert_eq!(snap.audio_mids.len(), 1);
        assert!(!snap.ice_rtt_us.is_empty(), "{who}: no ICE RTT samples");
        assert!(snap.ice_rtt_us.iter().all(|&r| r < 1_000_000));
        assert!(snap.sent_video_frames > 0 && snap.sent_keyframes >= 1);
    }

    // Garbage from the participant's own socket must not hurt it.
    alice.send_raw(vec![0xde, 0xad, 0xbe, 0xef]);
    let before = alice.snapshot().frames_of_kind("video");
    let (ok, _) = alice.wait_until(Duration::from_secs(5), |s| {
        s.frames_of_kind("video") > before + 10
    });
    assert!(ok);
    // Bob leaves: Alice hears of it in a roster.
    bob.leave().expect("leave");
    let (ok, s) = alice.wait_until(Duration::from_secs(5), |s| {
        s.events_of_type("roster")
            .last()
            .is_some_and(|r| r["participants"].as_array().map(Vec::len) == Some(1))
    });
    assert!(ok, "no roster without bob: {:?}", s.events);
    alice.leave().expect("leave");
}

#[test]
fn http_errors_carry_status_and_body() {
    let server = start_server();
    let url = format!("http://{}", server.http);
    let e = match join(JoinSpec::new(&url, "full", "bob")) {
        Err(e) => e,
        Ok(_) => panic!("expected 503"),
    };
    assert_eq!(e.status, Some(503));
    assert_eq!(e.retry_after, Some(2));
    assert_eq!(e.code().as_deref(), Some("no_capacity"));
}

#[test]
fn a_limited_downlink_queues_and_drops_but_never_exceeds_its_rate() {
    // Bob receives alice's ~400 kbit/s video and audio through a 250 kbit/s
    // bottleneck in his driver: the queue fills, some datagrams wait, some
    // are dropped, what gets through verifies, and no more than the rate
    // (plus the bucket's burst) reaches his str0m.
    const RATE: u64 = 250_000;
    let server = start_server();
    let url = format!("http://{}", server.http);
    let mut a = JoinSpec::new(&url, "lim", "alice");
    a.participant.video_slots = 1;
    a.participant.audio_slots = 1;
    let mut b = JoinSpec::new(&url, "lim", "bob");
    b.participant.video_slots = 1;
    b.participant.audio_slots = 1;
    b.participant.downlink_limit_bps = Some(RATE);
    let alice = join(a).expect("join alice");
    let bob = join(b).expect("join bob");
    let (ok, s) = bob.wait_until(Duration::from_secs(15), |s| {
        s.connected
            && s.frames_of_kind("video") >= 20
            && s.downlink.is_some_and(|d| d.dropped > 0 && d.queued > 0)
    });
    assert!(ok, "bob: {s:#?}");
    let now_ns = corelay_client::clock::mono_ns();
    let d = s.downlink.unwrap();
    assert!(d.max_delay_us > 0 && d.dropped_bytes > 0, "{d:?}");
    // Alice is not limited.
    assert!(alice.snapshot().downlink.is_none());
    let mut bytes = 0u64;
    let mut first = u64::MAX;
    for st in s.slots.values() {
        assert_eq!(st.corrupt, 0, "{st:?}");
        bytes += st.bytes;
        first = first.min(st.first_packet_ns.unwrap_or(u64::MAX));
    }
    let secs = now_ns.saturating_sub(first) as f64 / 1e9;
    let bound = RATE as f64 / 8.0 * secs + corelay_client::shaper::BURST_BYTES as f64;
    assert!(
        (bytes as f64) <= bound,
        "{bytes} payload bytes in {secs:.2} s through {RATE} bit/s (bound {bound:.0})"
    );
    bob.leave().expect("leave");
    alice.leave().expect("leave");
}
