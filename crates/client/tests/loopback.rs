//! End-to-end test of the client against a tiny fake SFU in this file: an
//! ICE-lite str0m peer per participant that loops the participant's own
//! media back into its first receive slot of each kind and greets it on the
//! data channel. This checks ICE, DTLS, SRTP, RTP mode both ways,
//! abs-capture-time, payload verification and the data channel without the
//! real server.

#![allow(clippy::collapsible_if)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelay_client::{JoinSpec, join};
use str0m::change::SdpOffer;
use str0m::media::{Direction, MediaKind, Mid};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{Extension, ExtensionMap, RtpWrite};
use str0m::{Candidate, Event, Input, Output, Rtc};

struct Peer {
    rtc: Rtc,
    /// (published mid, slot mid)
    routes: Vec<(Mid, Mid)>,
    greeted: bool,
    seq: Vec<(Mid, u64)>,
}

struct Fake {
    http: SocketAddr,
    stop: Arc<Mutex<bool>>,
}

fn start_fake() -> Fake {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_addr = udp.local_addr().unwrap();
    let http = TcpListener::bind("127.0.0.1:0").unwrap();
    let http_addr = http.local_addr().unwrap();
    let (tx, rx) = channel::<Peer>();
    let stop = Arc::new(Mutex::new(false));
    std::thread::spawn(move || http_loop(http, udp_addr, tx));
    let st = stop.clone();
    std::thread::spawn(move || media_loop(udp, rx, st));
    Fake {
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

fn http_loop(l: TcpListener, udp_addr: SocketAddr, tx: Sender<Peer>) {
    let mut n = 0;
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
        let Ok(offer) = SdpOffer::from_sdp_string(&body) else {
            respond(
                &mut s,
                "400 Bad Request",
                &[],
                r#"{"code":"bad_offer","message":"x"}"#,
            );
            continue;
        };
        let mut exts = ExtensionMap::standard();
        exts.set(9, Extension::AbsoluteCaptureTime);
        let mut b = Rtc::builder().set_rtp_mode(true).set_ice_lite(true);
        *b.extension_map() = exts;
        let mut rtc = b.build(Instant::now());
        rtc.add_local_candidate(Candidate::host(udp_addr, "udp").unwrap());
        let answer = rtc.sdp_api().accept_offer(offer).unwrap();
        // Route: our recv m-line (client sendonly) -> first client recvonly of same kind.
        let sdp = answer.to_sdp_string();
        let mut routes = Vec::new();
        for kind in [MediaKind::Video, MediaKind::Audio] {
            let mut pubs = Vec::new();
            let mut slots = Vec::new();
            let mut cur: Option<(MediaKind, String)> = None;
            for l in sdp.lines() {
                if let Some(rest) = l.strip_prefix("m=") {
                    let k = if rest.starts_with("video") {
                        Some(MediaKind::Video)
                    } else if rest.starts_with("audio") {
                        Some(MediaKind::Audio)
                    } else {
                        None
                    };
                    cur = k.map(|k| (k, String::new()));
                } else if let Some(m) = l.strip_prefix("a=mid:") {
                    if let Some(c) = &mut cur {
                        c.1 = m.to_string();
                    }
                } else if l == "a=recvonly" {
                    if let Some((k, m)) = &cur {
                        if *k == kind {
                            pubs.push(m.clone());
                        }
                    }
                } else if l == "a=sendonly" {
                    if let Some((k, m)) = &cur {
                        if *k == kind {
                            slots.push(m.clone());
                        }
                    }
                }
            }
            if let (Some(p), Some(sl)) = (pubs.first(), slots.first()) {
                routes.push((Mid::from(p.as_str()), Mid::from(sl.as_str())));
            }
        }
        let _ = Direction::SendOnly;
        n += 1;
        tx.send(Peer {
            rtc,
            routes,
            greeted: false,
            seq: Vec::new(),
        })
        .unwrap();
        respond(
            &mut s,
            "201 Created",
            &[
                ("Location", format!("/api/v1/rooms/r/participants/p{n}")),
                ("ETag", "\"1\"".into()),
                ("Content-Type", "application/sdp".into()),
            ],
            &sdp,
        );
    }
}

fn media_loop(udp: UdpSocket, rx: Receiver<Peer>, stop: Arc<Mutex<bool>>) {
    udp.set_read_timeout(Some(Duration::from_millis(2)))
        .unwrap();
    let local = udp.local_addr().unwrap();
    let mut peers: Vec<Peer> = Vec::new();
    let mut buf = vec![0u8; 2000];
    while !*stop.lock().unwrap() {
        while let Ok(p) = rx.try_recv() {
            peers.push(p);
        }
        if let Ok((n, src)) = udp.recv_from(&mut buf) {
            if let Ok(r) = Receive::new(Protocol::Udp, src, local, &buf[..n]) {
                let input = Input::Receive(Instant::now(), r);
                if let Some(p) = peers.iter_mut().find(|p| p.rtc.accepts(&input)) {
                    let _ = p.rtc.handle_input(input);
                }
            }
        }
        let now = Instant::now();
        for p in &mut peers {
            let _ = p.rtc.handle_input(Input::Timeout(now));
            loop {
                match p.rtc.poll_output() {
                    Ok(Output::Timeout(_)) | Err(_) => break,
                    Ok(Output::Transmit(t)) => {
                        let _ = udp.send_to(&t.contents, t.destination);
                    }
                    Ok(Output::Event(e)) => match e {
                        Event::ChannelOpen(id, _) if !p.greeted => {
                            p.greeted = true;
                            let msg = br#"{"type":"welcome","participant":"p","room":"r"}"#;
                            let _ = p.rtc.channel(id).unwrap().write(false, msg);
                        }
                        Event::ChannelData(d) => {
                            let mut echo = b"{\"type\":\"echo\",\"data\":".to_vec();
                            echo.extend_from_slice(&d.data);
                            echo.push(b'}');
                            let _ = p.rtc.channel(d.id).unwrap().write(false, &echo);
                        }
                        Event::RtpPacket(pkt) => {
                            let mid = p
                                .rtc
                                .direct_api()
                                .stream_rx(&pkt.header.ssrc)
                                .map(|s| s.mid());
                            let Some(mid) = mid else { continue };
                            let Some(&(_, slot)) = p.routes.iter().find(|(m, _)| *m == mid) else {
                                continue;
                            };
                            let seq = match p.seq.iter_mut().find(|(m, _)| *m == slot) {
                                Some(e) => {
                                    e.1 += 1;
                                    e.1
                                }
                                None => {
                                    p.seq.push((slot, 100));
                                    100
                                }
                            };
                            let mut api = p.rtc.direct_api();
                            if let Some(tx) = api.stream_tx_by_mid(slot, None) {
                                tx.write_rtp(
                                    RtpWrite::new(
                                        pkt.header.payload_type,
                                        seq.into(),
                                        pkt.header.timestamp,
                                        now,
                                        pkt.payload.clone(),
                                    )
                                    .marker(pkt.header.marker)
                                    .ext_vals(pkt.header.ext_vals.clone())
                                    .nackable(true),
                                );
                            }
                        }
                        Event::KeyframeRequest(_) => {}
                        _ => {}
                    },
                }
            }
        }
    }
}

#[test]
fn loopback_media_and_events() {
    let fake = start_fake();
    let url = format!("http://{}", fake.http);
    let mut spec = JoinSpec::new(&url, "r", "alice");
    spec.video_slots = 1;
    spec.audio_slots = 1;
    let p = join(spec).expect("join");
    assert_eq!(p.id(), "p1");
    assert_eq!(p.etag(), "\"1\"");
    let (ok, s) = p.wait_until(Duration::from_secs(10), |s| {
        s.connected
            && s.frames_of_kind("video") >= 30
            && s.frames_of_kind("audio") >= 30
            && !s.events.is_empty()
    });
    assert!(ok, "no media/events: {s:#?}");
    p.send_event(r#"{"type":"pin","participant":"x","mid":"2"}"#);
    let (ok, s) = p.wait_until(Duration::from_secs(5), |s| {
        s.events_of_type("echo").len() == 1
    });
    assert!(ok, "no echo: {:?}", s.events);
    assert_eq!(s.events[0]["type"], "welcome");
    for (mid, st) in &s.slots {
        let mut l = st.latency_us.clone();
        l.sort();
        eprintln!(
            "slot {mid} {}: packets {} frames {} keyframes {} ssrcs {:?} latency p50 {}us max {}us",
            st.kind,
            st.packets,
            st.frames,
            st.keyframes,
            st.ssrcs,
            l[l.len() / 2],
            l[l.len() - 1]
        );
    }
    eprintln!(
        "ice rtt us: {:?}; sent {} packets",
        s.ice_rtt_us, s.sent_packets
    );
    assert_eq!(s.video_mids.len(), 1);
    assert_eq!(s.audio_mids.len(), 1);
    for (mid, st) in &s.slots {
        assert_eq!(st.corrupt, 0, "slot {mid}: {st:?}");
        assert_eq!(st.out_of_order, 0);
        assert_eq!(st.ts_backwards, 0);
        assert_eq!(st.sources, vec!["alice".to_string()]);
        assert!(st.frames_by_source["alice"] > 0);
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
    assert!(!s.ice_rtt_us.is_empty(), "no ICE RTT samples");
    assert!(s.ice_rtt_us.iter().all(|&r| r < 1_000_000));
    assert!(s.sent_video_frames > 0 && s.sent_keyframes >= 1);

    // Garbage from the participant's own socket must not hurt it.
    p.send_raw(vec![0xde, 0xad, 0xbe, 0xef]);
    let before = p.snapshot().frames_of_kind("video");
    let (ok, _) = p.wait_until(Duration::from_secs(5), |s| {
        s.frames_of_kind("video") > before + 10
    });
    assert!(ok);
    p.leave().expect("leave");
    *fake.stop.lock().unwrap() = true;
}

#[test]
fn http_errors_carry_status_and_body() {
    let fake = start_fake();
    let url = format!("http://{}", fake.http);
    let e = match join(JoinSpec::new(&url, "full", "bob")) {
        Err(e) => e,
        Ok(_) => panic!("expected 503"),
    };
    assert_eq!(e.status, Some(503));
    assert_eq!(e.retry_after, Some(2));
    assert_eq!(e.code().as_deref(), Some("no_capacity"));
    *fake.stop.lock().unwrap() = true;
}
