//! "Why is my call bad?" live (issue 52): the verdict on each subscriber
//! slot, once a second, at `GET /api/v1/rooms/{room}/participants/{id}/diagnosis`,
//! counted per shard in `/api/v1/stats` and `/metrics`. A clean call reads
//! `good`; a muted camera `idle`; a stalled shard `server`; only the
//! participant itself or an admin may read it.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use corelay_client::ParticipantHandle;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

fn one_slot_each(server: &Server, room: &str, name: &str) -> ParticipantHandle {
    join_with(server, room, name, |s| {
        s.participant.video_slots = 1;
        s.participant.audio_slots = 1;
    })
}

/// A and B in `room`, each receiving the other's video and audio.
fn call(server: &Server, room: &str) -> (ParticipantHandle, ParticipantHandle) {
    let a = one_slot_each(server, room, "a");
    let b = one_slot_each(server, room, "b");
    for (p, from) in [(&a, "b"), (&b, "a")] {
        let (ok, s) = p.wait_until(WAIT, |s| {
            video_sources(s, 30) == names(&[from]) && audio_sources(s, 30) == names(&[from])
        });
        assert!(ok, "no media from {from}: {:#?}", s.slots);
    }
    (a, b)
}

fn diagnosis(server: &Server, room: &str, id: &str) -> Value {
    server.get_json(&format!("/api/v1/rooms/{room}/participants/{id}/diagnosis"))
}

/// The slot of `d` that shows `from`'s `kind`.
fn slot<'a>(d: &'a Value, from: &str, kind: &str) -> Option<&'a Value> {
    d["slots"]
        .as_array()?
        .iter()
        .find(|s| s["participant"] == from && s["kind"] == kind)
}

/// Polls `who`'s diagnosis until its slot showing `from`'s `kind` passes
/// `pred`; returns that slot (or panics with the last document).
fn wait_slot(
    server: &Server,
    room: &str,
    who: &str,
    from: &str,
    kind: &str,
    within: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let d = diagnosis(server, room, who);
        if let Some(s) = slot(&d, from, kind).filter(|s| pred(s)) {
            return s.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{kind} slot of {who} showing {from}: {d:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_clean_call_reads_good_and_a_muted_camera_idle() {
    let server = start_server(1, &[]);
    let (a, b) = call(&server, "dx");
    for kind in ["video", "audio"] {
        let s = wait_slot(&server, "dx", b.id(), a.id(), kind, WAIT, |s| {
            s["verdict"] == "good" && s["history"].as_str().is_some_and(|h| h.ends_with("gg"))
        });
        println!("b's {kind} slot of a: {s}");
        assert_eq!(s["evidence"], json!([]));
        assert!(s["seconds"]["good"].as_u64().unwrap() >= 2, "{s}");
    }
    // The history is a letter a second, at most 60.
    std::thread::sleep(Duration::from_millis(1500));
    let d = diagnosis(&server, "dx", a.id());
    let h = slot(&d, b.id(), "video").unwrap()["history"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        (3..=60).contains(&h.len()) && h.chars().all(|c| "gudsi".contains(c)),
        "{h}"
    );

    // Counted per shard, in the stats and in Prometheus.
    let st = server.get_json("/api/v1/stats");
    assert!(
        st["shards"][0]["verdict_seconds"]["good"].as_u64().unwrap() >= 4,
        "{st:#}"
    );
    let text = server.scrape();
    assert!(
        text.contains("corelay_subscriber_seconds_total{shard=\"0\",verdict=\"good\"}"),
        "{text}"
    );

    // A mutes its camera: B's slot of it is idle, because muted.
    let room = server.get_json("/api/v1/rooms/dx");
    let mid = room["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == a.id())
        .and_then(|p| p["tracks"].as_array())
        .and_then(|ts| ts.iter().find(|t| t["kind"] == "video"))
        .map(|t| t["mid"].as_str().unwrap().to_owned())
        .expect("a's video track");
    a.send_event(&json!({"type": "mute", "mid": mid, "muted": true}).to_string());
    let s = wait_slot(
        &server,
        "dx",
        b.id(),
        a.id(),
        "video",
        Duration::from_secs(5),
        |s| s["verdict"] == "idle",
    );
    assert_eq!(s["evidence"][0]["figure"], "muted", "{s}");
    // A participant the server does not know: 404.
    let (status, _, body) = server.request(
        "GET",
        "/api/v1/rooms/dx/participants/p123/diagnosis",
        &[],
        "",
    );
    assert_eq!(status, 404, "{body}");
}

/// The shard sleeps 20 ms every 20 datagrams (the test fault): forwarding
/// latency and socket dwell pass their bounds, and B's slots read `server`
/// with those figures as evidence.
#[test]
fn a_stalled_shard_reads_server() {
    let server = start_server(
        1,
        &[
            "--test-stall-every",
            "20",
            "--test-stall-ms",
            "20",
            "--log",
            "warn,corelay::control::diagnosis=info",
        ],
    );
    let (a, b) = call(&server, "dx");
    let s = wait_slot(&server, "dx", b.id(), a.id(), "video", WAIT, |s| {
        s["verdict"] == "server"
    });
    println!("b's video slot of a on a stalled shard: {s}");
    let figures: Vec<&str> = s["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["figure"].as_str())
        .collect();
    assert!(
        figures.contains(&"forward_p99_us") || figures.contains(&"dwell_p99_us"),
        "{s}"
    );
    let st = server.get_json("/api/v1/stats");
    assert!(
        st["shards"][0]["verdict_seconds"]["server"]
            .as_u64()
            .unwrap()
            >= 1
    );
    // Ten bad seconds in a row: one WARN, in words.
    let deadline = Instant::now() + Duration::from_secs(30);
    let warned = loop {
        let found = server
            .log()
            .into_iter()
            .find(|l| l.contains("WARN") && l.contains("bad for 10 s"));
        if let Some(l) = found {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "no WARN after 30 s: {:#}",
            diagnosis(&server, "dx", b.id())
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    println!("{warned}");
    assert!(warned.contains("the server"), "{warned}");
    // Leaving: one line with the seconds in each verdict per slot.
    let b_id = b.id().to_owned();
    b.leave().expect("b leaves");
    let deadline = Instant::now() + Duration::from_secs(5);
    let line = loop {
        if let Some(l) = server
            .log()
            .into_iter()
            .find(|l| l.contains("call diagnosis"))
        {
            break l;
        }
        assert!(Instant::now() < deadline, "no call diagnosis line");
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("{line}");
    assert!(line.contains(&b_id) && line.contains("server"), "{line}");
    assert!(line.contains("\"worst_minute\":{\"bad_s\":"), "{line}");
}

const SECRET: &str = "diagnosis-test-secret-0123456789";

fn token(claims: Value) -> String {
    let mut claims = claims;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    claims["exp"] = json!(now + 600);
    corelay_client::signal::mint_claims(SECRET.as_bytes(), &claims).unwrap()
}

#[test]
fn only_the_participant_or_an_admin_reads_its_diagnosis() {
    let server = start_server(1, &["--auth-secret", SECRET]);
    let join = |name: &str| {
        join_with(&server, "dx", name, |s| {
            s.participant.video_slots = 1;
            s.participant.audio_slots = 1;
            s.token = Some(
                corelay_client::mint_token(SECRET.as_bytes(), "dx", name, Duration::from_secs(600))
                    .unwrap(),
            );
        })
    };
    let alice = join("alice");
    let _bob = join("bob");
    let path = format!("/api/v1/rooms/dx/participants/{}/diagnosis", alice.id());
    let get = |path: &str, tok: Option<&str>| {
        let auth = tok.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("authorization", a.as_str())).collect();
        let (status, _, body) = server.request("GET", path, &headers, "");
        (status, body)
    };
    let (alice_t, bob_t) = (
        token(json!({"sub": "alice", "room": "dx"})),
        token(json!({"sub": "bob", "room": "dx"})),
    );
    let admin = token(json!({"sub": "ops", "admin": true}));
    assert_eq!(get(&path, None).0, 401);
    let (status, body) = get(&path, Some(&alice_t));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["participant"],
        alice.id()
    );
    assert_eq!(get(&path, Some(&bob_t)).0, 403);
    assert_eq!(get(&path, Some(&admin)).0, 200);
    // A stranger cannot tell who exists; an admin gets the 404.
    let unknown = "/api/v1/rooms/dx/participants/p999/diagnosis";
    assert_eq!(get(unknown, Some(&bob_t)).0, 403);
    assert_eq!(get(unknown, Some(&admin)).0, 404);
}
