//! Reach (issue 50): TURN servers handed out with coturn credentials
//! (`--turn-url`), and ICE restarts: by WHIP/WHEP PATCH of an
//! `application/trickle-ice-sdpfrag` (RFC 9725 §4.3, every status code) and
//! by the participant API's PATCH of a full offer, after which media still
//! flows, with real str0m clients over UDP.
#![allow(
    clippy::disallowed_types,
    reason = "test code: the client shares its snapshot with the test thread"
)]

mod common;

use std::net::UdpSocket;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use common::*;
use corelay_client::signal::mint_claims;
use corelay_client::{Command, Driver, NoObserver, Participant, ParticipantConfig, Snapshot};
use serde_json::{Value, json};

const FRAG: &str = "application/trickle-ice-sdpfrag";

/// A str0m client on a WHIP or WHEP endpoint, with what its join returned.
struct Raw {
    driver: Driver,
    shared: Arc<Mutex<Snapshot>>,
    location: String,
    etag: String,
    offer: String,
    answer: String,
    headers: Vec<(String, String)>,
}

fn join_raw(server: &Server, path: &str, cfg: ParticipantConfig) -> Raw {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let local = socket.local_addr().unwrap();
    let (mut p, offer) = Participant::new(cfg, local, Instant::now()).unwrap();
    let (status, headers, answer) =
        server.request("POST", path, &[("content-type", "application/sdp")], &offer);
    assert_eq!(status, 201, "{answer}");
    p.accept_answer(&answer).unwrap();
    let shared = p.shared();
    let driver = Driver::spawn("raw", Box::new(NoObserver), None).unwrap();
    assert!(driver.send(Command::Add {
        id: 1,
        participant: Box::new(p),
        socket: Some(socket),
    }));
    Raw {
        driver,
        shared,
        location: header(&headers, "location").unwrap(),
        etag: header(&headers, "etag").unwrap(),
        offer,
        answer,
        headers,
    }
}

impl Raw {
    fn snapshot(&self) -> Snapshot {
        let (tx, rx) = sync_channel(1);
        if self.driver.send(Command::Publish(1, tx)) {
            let _ = rx.recv_timeout(Duration::from_secs(1));
        }
        self.shared.lock().unwrap().clone()
    }

    fn frames(&self) -> u64 {
        self.snapshot().slots.values().map(|s| s.frames).sum()
    }

    /// Waits until `more` frames arrived; true if they did within `within`.
    fn keeps_flowing(&self, more: u64, within: Duration) -> bool {
        let start = self.frames();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.frames() >= start + more {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn restart_ice(&self) -> String {
        let (tx, rx) = sync_channel(1);
        assert!(self.driver.send(Command::RestartIce(1, tx)));
        rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap()
    }

    fn accept_answer(&self, sdp: &str) {
        let (tx, rx) = sync_channel(1);
        assert!(self.driver.send(Command::Answer(1, sdp.to_string(), tx)));
        rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    }
}

fn header(hs: &[(String, String)], name: &str) -> Option<String> {
    hs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn headers_named(hs: &[(String, String)], name: &str) -> Vec<String> {
    hs.iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .collect()
}

/// The first value of `a=<what>:` in an SDP.
fn attr(sdp: &str, what: &str) -> String {
    let prefix = format!("a={what}:");
    sdp.lines()
        .find_map(|l| l.trim_end_matches('\r').strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no a={what} in {sdp}"))
        .to_string()
}

fn publisher() -> ParticipantConfig {
    let mut c = ParticipantConfig::new("obs");
    c.video_slots = 0;
    c.audio_slots = 0;
    c.data_channel = false;
    c
}

fn viewer() -> ParticipantConfig {
    let mut c = ParticipantConfig::new("viewer");
    c.publish_video = false;
    c.publish_audio = false;
    c.video_slots = 1;
    c.audio_slots = 1;
    c.data_channel = false;
    c
}

/// The JSON error code of a response body.
fn code(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["code"].as_str().unwrap_or_default().to_string()
}

/// A client's new ICE credentials and candidates as a fragment (RFC 8840),
/// from its ICE-restart offer.
fn restart_fragment(offer: &str) -> String {
    let mut frag = format!(
        "a=ice-options:trickle ice2\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:{}\r\na=ice-ufrag:{}\r\na=ice-pwd:{}\r\n",
        attr(offer, "mid"),
        attr(offer, "ice-ufrag"),
        attr(offer, "ice-pwd")
    );
    for c in offer
        .lines()
        .filter(|l| l.starts_with("a=candidate:"))
        .take(4)
    {
        frag.push_str(c.trim_end_matches('\r'));
        frag.push_str("\r\n");
    }
    frag.push_str("a=end-of-candidates\r\n");
    frag
}

/// The server's full answer as the client knows it, with the ICE
/// credentials and candidates of the server's restart fragment: what a
/// WHIP client sets as the remote description after an ICE restart.
fn answer_after_restart(answer: &str, fragment: &str) -> String {
    let (ufrag, pwd) = (attr(fragment, "ice-ufrag"), attr(fragment, "ice-pwd"));
    let candidates: Vec<&str> = fragment
        .lines()
        .filter(|l| l.starts_with("a=candidate:"))
        .collect();
    let mut out = String::new();
    for line in answer.lines().map(|l| l.trim_end_matches('\r')) {
        if line.starts_with("a=candidate:") {
            continue;
        }
        if line.starts_with("a=ice-ufrag:") {
            out.push_str(&format!("a=ice-ufrag:{ufrag}\r\n"));
        } else if line.starts_with("a=ice-pwd:") {
            out.push_str(&format!("a=ice-pwd:{pwd}\r\n"));
        } else if line == "a=end-of-candidates" {
            for c in &candidates {
                out.push_str(c);
                out.push_str("\r\n");
            }
            out.push_str("a=end-of-candidates\r\n");
        } else {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out
}

#[test]
fn whip_patch_answers_every_status_of_rfc_9725_and_restarts_ice() {
    let server = start_server(1, &["--max-sdp-bytes", "20000"]);
    let whip = join_raw(&server, "/whip/live", publisher());
    let whep = join_raw(&server, "/whep/live", viewer());
    let (ok, s) = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = whep.snapshot();
            let ok = video_sources(&s, 30) == names(&["obs"]);
            if ok || Instant::now() > deadline {
                break (ok, s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert!(
        ok,
        "WHEP viewer got nothing from the WHIP publisher: {:#?}",
        s.slots
    );
    let patch = |hs: &[(&str, &str)], body: &str| server.request("PATCH", &whip.location, hs, body);
    let frag_only = [("content-type", FRAG)];

    // 404: no such session (and a WHIP session is not one of WHEP's).
    let missing = format!("/whip/live/{}", "0".repeat(32));
    let (st, _, body) = server.request("PATCH", &missing, &frag_only, "a=end-of-candidates\r\n");
    assert_eq!((st, code(&body).as_str()), (404, "not_found"), "{body}");
    let (st, _, _) = server.request(
        "PATCH",
        &whip.location.replace("/whip/", "/whep/"),
        &frag_only,
        "a=end-of-candidates\r\n",
    );
    assert_eq!(st, 404);
    // 415: not a fragment.
    let (st, _, body) = patch(&[("content-type", "application/sdp")], "v=0\r\n");
    assert_eq!((st, code(&body).as_str()), (415, "unsupported_media_type"));
    // 413: larger than an offer may be.
    let huge = "a=end-of-candidates\r\n".repeat(1000);
    let (st, _, _) = patch(&frag_only, &huge);
    assert_eq!(st, 413);
    // 400: malformed fragments, JSON errors that quote none of them.
    for bad in [
        "",
        "<html>",
        "a=candidate:garbage\r\n",
        "a=ice-ufrag:only-a-ufrag\r\n",
        "a=ice-ufrag:ab\r\na=ice-pwd:0123456789012345678901\r\n",
        "a=ice-ufrag:abcd\u{7}\r\na=ice-pwd:0123456789012345678901\r\n",
    ] {
        let (st, hs, body) = patch(&frag_only, bad);
        assert_eq!(st, 400, "{bad:?}: {body}");
        assert_eq!(code(&body), "bad_sdpfrag", "{body}");
        assert!(
            header(&hs, "content-type")
                .unwrap()
                .starts_with("application/json")
        );
        assert!(
            !body.contains("garbage") && !body.contains("<html>"),
            "{body}"
        );
    }
    let lines = "a=x-y\r\n".repeat(1100);
    let (st, _, body) = patch(&frag_only, &lines);
    assert_eq!((st, code(&body).as_str()), (400, "bad_sdpfrag"), "{body}");

    // 204: trickled candidates, without an ETag in the answer; with the
    // current credentials (RFC 8840 names the ICE generation) too.
    let cand = "a=candidate:1 1 udp 2130706431 127.0.0.1 9 typ host\r\na=end-of-candidates\r\n";
    for if_match in [None, Some("*"), Some(whip.etag.as_str())] {
        let mut hs = vec![("content-type", FRAG)];
        if let Some(m) = if_match {
            hs.push(("if-match", m));
        }
        let (st, hs, body) = patch(&hs, cand);
        assert_eq!(st, 204, "{if_match:?}: {body}");
        assert!(
            header(&hs, "etag").is_none(),
            "a trickle PATCH answered an ETag"
        );
        assert!(body.is_empty());
    }
    let current = format!(
        "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n{cand}",
        attr(&whip.offer, "ice-ufrag"),
        attr(&whip.offer, "ice-pwd")
    );
    let (st, hs, body) = patch(
        &[("content-type", FRAG), ("if-match", &whip.etag)],
        &current,
    );
    assert_eq!(st, 204, "{body}");
    assert!(header(&hs, "etag").is_none());
    // 412: candidates for another ETag.
    let (st, _, body) = patch(&[("content-type", FRAG), ("if-match", "\"p0.9\"")], cand);
    assert_eq!((st, code(&body).as_str()), (412, "etag_mismatch"), "{body}");

    // The restart: the client's new credentials.
    let offer = whip.restart_ice();
    let frag = restart_fragment(&offer);
    // 428: an ICE restart without If-Match.
    let (st, _, body) = patch(&frag_only, &frag);
    assert_eq!(
        (st, code(&body).as_str()),
        (428, "precondition_required"),
        "{body}"
    );
    // 412: an ICE restart for another ETag.
    let (st, _, body) = patch(&[("content-type", FRAG), ("if-match", "\"p0.9\"")], &frag);
    assert_eq!((st, code(&body).as_str()), (412, "etag_mismatch"), "{body}");
    // Refused restarts changed nothing: media flows.
    assert!(whep.keeps_flowing(20, Duration::from_secs(5)));

    // 200: the server's new credentials and candidates, a new ETag.
    let (st, hs, body) = patch(&[("content-type", FRAG), ("if-match", "*")], &frag);
    assert_eq!(st, 200, "{body}");
    assert_eq!(header(&hs, "content-type").as_deref(), Some(FRAG));
    let new_etag = header(&hs, "etag").expect("a restart's ETag");
    assert_ne!(new_etag, whip.etag);
    let (old_ufrag, old_pwd) = (
        attr(&whip.answer, "ice-ufrag"),
        attr(&whip.answer, "ice-pwd"),
    );
    let (ufrag, pwd) = (attr(&body, "ice-ufrag"), attr(&body, "ice-pwd"));
    assert_ne!(ufrag, old_ufrag, "{body}");
    assert_ne!(pwd, old_pwd, "{body}");
    assert_eq!((ufrag.len(), pwd.len()), (16, 24), "{body}");
    assert!(body.contains("a=ice-lite\r\n") && body.contains("a=end-of-candidates\r\n"));
    let candidates: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("a=candidate:"))
        .collect();
    assert!(candidates.iter().any(|c| c.contains(" udp ")), "{body}");
    for c in &candidates {
        assert!(
            !c.contains(&old_ufrag),
            "a candidate names the old ufrag: {c}"
        );
    }
    // The same fragment again is no longer a restart: the credentials are
    // in force. With the old ETag it is stale.
    let (st, _, _) = patch(&[("content-type", FRAG), ("if-match", &new_etag)], &frag);
    assert_eq!(st, 204);
    let (st, _, _) = patch(&[("content-type", FRAG), ("if-match", &whip.etag)], cand);
    assert_eq!(st, 412);

    // The client takes the new credentials; media goes on past the point
    // where an ICE session that did not restart on both sides fails
    // (str0m's ICE-lite agent drops a pair unchecked for 6-8 s, and the
    // client's checks with the new credentials would fail).
    whip.accept_answer(&answer_after_restart(&whip.answer, &body));
    let deadline = Instant::now() + Duration::from_secs(12);
    while Instant::now() < deadline {
        assert!(
            whep.keeps_flowing(15, Duration::from_secs(3)),
            "the viewer stopped receiving the publisher after its ICE restart"
        );
    }
    assert!(
        whip.snapshot().connected,
        "the publisher lost its connection"
    );
    assert!(whip.snapshot().failed.is_none());
    // A new path: a check from another address with the new credentials is
    // answered (the shard's demux knows the new ufrag, str0m the new
    // password); one with the old ones is not.
    let client_ufrag = attr(&offer, "ice-ufrag");
    let media = &whip.answer;
    let server_addr = media
        .lines()
        .find_map(|l| l.strip_prefix("a=candidate:"))
        .and_then(|c| {
            let f: Vec<&str> = c.split(' ').collect();
            format!("{}:{}", f[4], f[5])
                .parse::<std::net::SocketAddr>()
                .ok()
        })
        .unwrap();
    assert!(
        check_answered(server_addr, &ufrag, &client_ufrag, &pwd),
        "a check with the new credentials from a new address got no answer"
    );
    assert!(
        !check_answered(
            server_addr,
            &old_ufrag,
            &attr(whip.offer.as_str(), "ice-ufrag"),
            &old_pwd
        ),
        "a check with the old credentials was answered"
    );
    let room = server.get_json("/api/v1/rooms/live");
    assert_eq!(room["participants"].as_array().unwrap().len(), 2, "{room}");

    // A second restart, building on the new ETag.
    let offer = whip.restart_ice();
    let (st, hs, body2) = patch(
        &[("content-type", FRAG), ("if-match", &new_etag)],
        &restart_fragment(&offer),
    );
    assert_eq!(st, 200, "{body2}");
    assert_ne!(header(&hs, "etag").as_ref(), Some(&new_etag));
    assert_ne!(attr(&body2, "ice-ufrag"), ufrag);
    whip.accept_answer(&answer_after_restart(&whip.answer, &body2));
    assert!(whep.keeps_flowing(60, Duration::from_secs(10)));
    assert!(whip.snapshot().connected);
    drop(whip);
    drop(whep);
}

/// Sends a STUN binding request to `server` from a new socket, as the
/// client `theirs` to the server's `ours` signed with `pwd`: did a success
/// response that verifies with `pwd` come back within a second?
fn check_answered(server: std::net::SocketAddr, ours: &str, theirs: &str, pwd: &str) -> bool {
    use str0m::ice::{StunMessage, TransId};
    let hmac = |key: &[u8], parts: &[&[u8]]| -> [u8; 20] {
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, key);
        let mut ctx = aws_lc_rs::hmac::Context::with_key(&key);
        for p in parts {
            ctx.update(p);
        }
        let mut out = [0u8; 20];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    };
    let username = format!("{ours}:{theirs}");
    let req =
        StunMessage::binding_request(&username, TransId::new(), true, 7, 1_845_501_695, false);
    let mut buf = vec![0u8; 1500];
    let n = req.to_bytes(Some(pwd.as_bytes()), &mut buf, hmac).unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    for _ in 0..3 {
        socket.send_to(&buf[..n], server).unwrap();
        let mut rx = [0u8; 1500];
        if let Ok((len, _)) = socket.recv_from(&mut rx) {
            let Ok(msg) = StunMessage::parse(&rx[..len]) else {
                continue;
            };
            return msg.is_successful_binding_response() && msg.verify(pwd.as_bytes(), hmac);
        }
    }
    false
}

#[test]
fn a_participant_api_ice_restart_gets_new_server_credentials() {
    let server = start_server(1, &[]);
    let (a, b) = two_in_a_call(&server, "restart");
    let offer = b.restart_ice().unwrap();
    assert_ne!(attr(&offer, "ice-ufrag"), attr(b.offer(), "ice-ufrag"));
    let (st, hs, answer) = server.request(
        "PATCH",
        b.location(),
        &[("content-type", "application/sdp"), ("if-match", b.etag())],
        &offer,
    );
    assert_eq!(st, 200, "{answer}");
    assert_ne!(header(&hs, "etag").as_deref(), Some(b.etag()));
    let (ufrag, pwd) = (attr(&answer, "ice-ufrag"), attr(&answer, "ice-pwd"));
    assert_ne!(ufrag, attr(b.answer(), "ice-ufrag"));
    assert_ne!(pwd, attr(b.answer(), "ice-pwd"));
    assert_eq!((ufrag.len(), pwd.len()), (16, 24));
    b.accept_answer(&answer).unwrap();
    // Both directions keep flowing past an ICE timeout, with the same
    // slots and roster.
    let deadline = Instant::now() + Duration::from_secs(12);
    while Instant::now() < deadline {
        assert!(
            keeps_flowing(&a, 15, Duration::from_secs(3)),
            "a stopped receiving b after b's ICE restart"
        );
        assert!(
            keeps_flowing(&b, 15, Duration::from_secs(3)),
            "b stopped receiving after its ICE restart"
        );
    }
    assert!(b.snapshot().connected);
    assert_eq!(video_sources(&a.snapshot(), 20), names(&["b"]));
    let room = server.get_json("/api/v1/rooms/restart");
    assert_eq!(room["participants"].as_array().unwrap().len(), 2, "{room}");
}

#[test]
fn a_nat_rebinding_moves_the_media_path_without_an_ice_restart() {
    let server = start_server(1, &[]);
    let (a, b) = two_in_a_call(&server, "rebind");
    let (ok, _) = b.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 20) == names(&["a"])
    });
    assert!(ok);
    // b's NAT gives it a new source port: the server hears the same ICE
    // session from a new address, and moves both directions there at b's
    // next connectivity check (str0m sends one every few seconds).
    let before = b.local_addr();
    let moved = b.rebind().unwrap();
    assert_ne!(moved, before);
    let t0 = Instant::now();
    assert!(
        keeps_flowing(&a, 30, Duration::from_secs(10)),
        "a stopped receiving b after b's address changed"
    );
    assert!(
        keeps_flowing(&b, 30, Duration::from_secs(10)),
        "b stopped receiving after its address changed"
    );
    corelay_testkit::say(&format!(
        "media flows both ways {} ms after the rebinding",
        t0.elapsed().as_millis()
    ));
    // And keeps flowing past the old address's consent timeout: the old
    // address is no longer what the server sends to.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        assert!(keeps_flowing(&a, 15, Duration::from_secs(3)));
        assert!(keeps_flowing(&b, 15, Duration::from_secs(3)));
    }
    let room = server.get_json("/api/v1/rooms/rebind");
    assert_eq!(room["participants"].as_array().unwrap().len(), 2, "{room}");
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// coturn's password for `username` (computed here, not by the server).
fn coturn_password(secret: &str, username: &str) -> String {
    let key = aws_lc_rs::hmac::Key::new(
        aws_lc_rs::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        secret.as_bytes(),
    );
    let tag = aws_lc_rs::hmac::sign(&key, username.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
}

/// A username `EXPIRY:IDENTITY` that expires about `ttl` from now.
fn check_username(username: &str, identity: &str, ttl: u64) {
    let (expiry, who) = username.split_once(':').unwrap();
    assert_eq!(who, identity);
    let expiry: u64 = expiry.parse().unwrap();
    let want = now() + ttl;
    assert!(expiry.abs_diff(want) <= 5, "{expiry} against {want}");
}

fn secret_file(name: &str, secret: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("corelay-reach-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("turn-secret");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    path
}

#[test]
fn turn_servers_are_handed_out_with_coturn_credentials() {
    const SECRET: &str = "coturn-static-auth-secret";
    let path = secret_file("open", SECRET);
    let udp = "turn:127.0.0.1:3478?transport=udp";
    let tls = "turns:turn.example.net:443?transport=tcp";
    let server = start_server(
        1,
        &[
            "--turn-url",
            udp,
            "--turn-url",
            tls,
            "--turn-secret-file",
            path.to_str().unwrap(),
            "--turn-ttl",
            "10m",
            "--log",
            "debug",
        ],
    );

    // The API endpoint: what RTCPeerConnection takes.
    let (st, hs, body) = server.request("GET", "/api/v1/ice-servers?name=bob", &[], "");
    assert_eq!(st, 200, "{body}");
    assert_eq!(header(&hs, "cache-control").as_deref(), Some("no-store"));
    let v: Value = serde_json::from_str(&body).unwrap();
    let s = &v["iceServers"][0];
    assert_eq!(s["urls"], json!([udp, tls]));
    let username = s["username"].as_str().unwrap();
    check_username(username, "bob", 600);
    assert_eq!(s["credential"], coturn_password(SECRET, username));

    // WHIP and WHEP answers carry one Link per URL (RFC 9725 §4.6).
    let whip = join_raw(&server, "/whip/r", publisher());
    let links = headers_named(&whip.headers, "link");
    assert_eq!(links.len(), 2, "{links:?}");
    // Without a token or ?name=, the participant's id is the identity.
    let id = header(&whip.headers, "participant-id").unwrap();
    for (link, url) in links.iter().zip([udp, tls]) {
        let prefix = format!("<{url}>; rel=\"ice-server\"; username=\"");
        let rest = link
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{link}"));
        let (username, rest) = rest.split_once('"').unwrap();
        check_username(username, &id, 600);
        let credential = rest
            .strip_prefix("; credential=\"")
            .and_then(|r| r.strip_suffix("\"; credential-type=\"password\""))
            .unwrap_or_else(|| panic!("{link}"));
        assert_eq!(credential, coturn_password(SECRET, username));
    }
    // The participant API's join does not (it has the endpoint).
    let (st, hs, _) = server.request(
        "POST",
        "/api/v1/rooms/r/participants?name=p",
        &[("content-type", "application/sdp")],
        &client_offer(false, true),
    );
    assert_eq!(st, 201);
    assert!(headers_named(&hs, "link").is_empty());
    // OPTIONS of the endpoints, too.
    for path in ["/whip/r", "/whep/r?name=carol"] {
        let (st, hs, _) = server.request("OPTIONS", path, &[], "");
        assert_eq!(st, 204);
        let links = headers_named(&hs, "link");
        assert_eq!(links.len(), 2, "{path}: {links:?}");
        assert!(links[0].starts_with(&format!("<{udp}>; rel=\"ice-server\"")));
    }
    // The secret is never logged (the log is at debug).
    std::thread::sleep(Duration::from_millis(200));
    let log = server.log().join("\n");
    assert!(log.contains("TURN servers handed out"), "{log}");
    assert!(!log.contains(SECRET));
    drop(whip);
}

#[test]
fn without_turn_urls_nothing_is_handed_out() {
    let server = start_server(1, &[]);
    assert_eq!(
        server.get_json("/api/v1/ice-servers"),
        json!({"iceServers": []})
    );
    let whip = join_raw(&server, "/whip/r", publisher());
    assert!(headers_named(&whip.headers, "link").is_empty());
    let (st, hs, _) = server.request("OPTIONS", "/whip/r", &[], "");
    assert_eq!(st, 204);
    assert!(headers_named(&hs, "link").is_empty());
}

#[test]
fn ice_servers_are_authorized_like_a_join() {
    const AUTH: &str = "auth-secret-0123456789abcdef";
    const SECRET: &str = "turn-secret";
    let path = secret_file("auth", SECRET);
    let server = start_server(
        1,
        &[
            "--auth-secret",
            AUTH,
            "--turn-url",
            "turn:127.0.0.1:3478",
            "--turn-secret-file",
            path.to_str().unwrap(),
        ],
    );
    let token = |sub: &str, room: &str| {
        mint_claims(
            AUTH.as_bytes(),
            &json!({"sub": sub, "room": room, "exp": now() + 600}),
        )
        .unwrap()
    };
    let get = |path: &str, token: Option<&str>| {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let hs: Vec<(&str, &str)> = bearer
            .as_deref()
            .map(|b| vec![("authorization", b)])
            .unwrap_or_default();
        server.request("GET", path, &hs, "")
    };
    let (st, _, body) = get("/api/v1/ice-servers", None);
    assert_eq!((st, code(&body).as_str()), (401, "unauthorized"));
    let alice = token("alice", "r1");
    let (st, _, body) = get("/api/v1/ice-servers?room=r2", Some(&alice));
    assert_eq!((st, code(&body).as_str()), (403, "forbidden"));
    // The token's identity, whatever name is asked for.
    for path in [
        "/api/v1/ice-servers",
        "/api/v1/ice-servers?room=r1&name=mallory",
    ] {
        let (st, _, body) = get(path, Some(&alice));
        assert_eq!(st, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let username = v["iceServers"][0]["username"].as_str().unwrap();
        check_username(username, "alice", 3600);
        assert_eq!(
            v["iceServers"][0]["credential"],
            coturn_password(SECRET, username)
        );
    }
    // OPTIONS: a preflight without a token gets no credentials; a token
    // for the room does.
    let (st, hs, _) = server.request("OPTIONS", "/whip/r1", &[], "");
    assert_eq!(st, 204);
    assert!(headers_named(&hs, "link").is_empty());
    let bearer = format!("Bearer {alice}");
    let (_, hs, _) = server.request("OPTIONS", "/whip/r1", &[("authorization", &bearer)], "");
    assert_eq!(headers_named(&hs, "link").len(), 1);
    let (_, hs, _) = server.request("OPTIONS", "/whip/r2", &[("authorization", &bearer)], "");
    assert!(headers_named(&hs, "link").is_empty());
}

#[test]
fn bad_turn_flags_stop_the_server_at_start() {
    let secret = secret_file("flags", "s3cret-value");
    let secret = secret.to_str().unwrap();
    for (args, want) in [
        (vec!["--turn-url", "turn:h:3478"], "--turn-secret-file"),
        (vec!["--turn-secret-file", secret], "--turn-url"),
        (
            vec!["--turn-url", "http://h", "--turn-secret-file", secret],
            "--turn-url",
        ),
        (
            vec![
                "--turn-url",
                "turn:h:3478",
                "--turn-secret-file",
                "/nonexistent/x",
            ],
            "--turn-secret-file",
        ),
        (
            vec![
                "--turn-url",
                "turn:h",
                "--turn-secret-file",
                secret,
                "--turn-ttl",
                "0",
            ],
            "ttl",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_corelay"))
            .args(["--http", "127.0.0.1:0", "--shards", "1"])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("s3cret-value"), "{err}");
    }
}
