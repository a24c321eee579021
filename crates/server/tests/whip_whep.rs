//! WHIP publish and WHEP receive on the same participant machinery, and the
//! data channel's pin request.
#![allow(
    clippy::disallowed_types,
    reason = "test code: the client shares its snapshot with the test thread"
)]

mod common;

use std::net::UdpSocket;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use corelay_client::{Command, Driver, NoObserver, Participant, ParticipantConfig, Snapshot};

/// A str0m client that signals through `path` (a WHIP or WHEP endpoint).
struct Raw {
    driver: Driver,
    shared: Arc<Mutex<Snapshot>>,
    location: String,
}

fn join_raw(server: &Server, path: &str, cfg: ParticipantConfig) -> Raw {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let local = socket.local_addr().unwrap();
    let (mut p, offer) = Participant::new(cfg, local, Instant::now()).unwrap();
    let (status, headers, answer) =
        server.request("POST", path, &[("content-type", "application/sdp")], &offer);
    assert_eq!(status, 201, "{answer}");
    let header = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(header("content-type").as_deref(), Some("application/sdp"));
    let location = header("location").expect("Location");
    // The resource is a 128-bit capability (32 hex digits).
    let secret = location
        .strip_prefix(&format!("{path}/"))
        .expect("Location under the endpoint");
    assert!(
        secret.len() == 32 && secret.chars().all(|c| c.is_ascii_hexdigit()),
        "{location}"
    );
    assert!(header("participant-id").is_some_and(|id| id.starts_with('p')));
    assert!(header("etag").is_some());
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
        location,
    }
}

impl Raw {
    fn wait(&self, timeout: Duration, pred: impl Fn(&Snapshot) -> bool) -> (bool, Snapshot) {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.shared.lock().unwrap().clone();
            if pred(&s) || Instant::now() > deadline {
                return (pred(&s), s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn whip_publisher_reaches_a_whep_viewer() {
    let server = start_server(1, &[]);
    let mut publisher = ParticipantConfig::new("obs");
    publisher.video_slots = 0;
    publisher.audio_slots = 0;
    publisher.data_channel = false;
    let whip = join_raw(&server, "/whip/live", publisher);

    let mut viewer = ParticipantConfig::new("viewer");
    viewer.publish_video = false;
    viewer.publish_audio = false;
    viewer.video_slots = 1;
    viewer.audio_slots = 1;
    viewer.data_channel = false;
    let whep = join_raw(&server, "/whep/live", viewer);

    let (ok, s) = whep.wait(Duration::from_secs(20), |s| {
        video_sources(s, 30) == vec!["obs".to_string()]
            && audio_sources(s, 30) == vec!["obs".to_string()]
    });
    assert!(
        ok,
        "WHEP viewer got nothing from the WHIP publisher: {:#?}",
        s.slots
    );
    assert_clean("whep", &s);

    // Both show up in the room, as what they are.
    let room = server.get_json("/api/v1/rooms/live");
    let kinds: Vec<_> = room["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        vec![serde_json::json!("whip"), serde_json::json!("whep")]
    );

    // Trickle PATCH is accepted (ICE-lite needs no candidates); wrong type is not
    // (tests/reach.rs has the rest of RFC 9725 §4.3).
    let (st, _, _) = server.request(
        "PATCH",
        &whip.location,
        &[
            ("content-type", "application/trickle-ice-sdpfrag"),
            ("if-match", "*"),
        ],
        "a=candidate:1 1 udp 1 127.0.0.1 9 typ host\r\n",
    );
    assert_eq!(st, 204);
    let (st, _, _) = server.request(
        "PATCH",
        &whip.location,
        &[("content-type", "text/plain")],
        "x",
    );
    assert_eq!(st, 415);
    // A WHIP session is not reachable through the WHEP path, and vice versa.
    let wrong = whip.location.replace("/whip/", "/whep/");
    assert_eq!(server.request("DELETE", &wrong, &[], "").0, 404);

    assert_eq!(server.request("DELETE", &whip.location, &[], "").0, 204);
    assert_eq!(server.request("DELETE", &whep.location, &[], "").0, 204);
    assert!(
        server.get_json("/api/v1/rooms")["rooms"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    drop(whip.driver);
    drop(whep.driver);
}

#[test]
fn pin_keeps_a_chosen_participant_in_a_slot() {
    let server = start_server(1, &[]);
    let viewer = join_with(&server, "pins", "viewer", |s| {
        s.participant.publish_video = false;
        s.participant.publish_audio = false;
        s.participant.video_slots = 1;
        s.participant.audio_slots = 0;
    });
    let a = join_with(&server, "pins", "a", |s| s.participant.speaking = false);
    let b = join_with(&server, "pins", "b", |s| s.participant.speaking = false);
    let (ok, _) = viewer.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 20) == vec!["a".to_string()]
    });
    assert!(ok, "first joiner should fill the only slot");
    let slot_mid = viewer.snapshot().slots.keys().next().unwrap().clone();
    viewer.send_event(&format!(
        r#"{{"type":"pin","participant":"{}","mid":"{slot_mid}"}}"#,
        b.id()
    ));
    let (ok, s) = viewer.wait_until(Duration::from_secs(10), |s| {
        s.slots.values().any(|st| {
            st.last_source.as_deref() == Some("b")
                && st.frames_by_source.get("b").copied().unwrap_or(0) >= 20
        })
    });
    assert!(ok, "pin did not switch the slot to b: {:#?}", s.slots);
    // `a` starts speaking: an unpinned slot would follow the speaker; a pinned one stays.
    a.set_speaking(true);
    std::thread::sleep(Duration::from_millis(1500));
    let s = viewer.snapshot();
    let st = s.slots.values().next().unwrap();
    assert_eq!(
        st.last_source.as_deref(),
        Some("b"),
        "pinned slot moved: {st:?}"
    );
    assert_clean("viewer", &s);
    // Unpin: the slot goes back to the active speaker.
    viewer.send_event(&format!(r#"{{"type":"unpin","mid":"{slot_mid}"}}"#));
    let (ok, s) = viewer.wait_until(Duration::from_secs(10), |s| {
        s.slots
            .values()
            .any(|st| st.last_source.as_deref() == Some("a"))
    });
    assert!(
        ok,
        "after unpin the slot should show the speaker a: {:#?}",
        s.slots
    );
    let speaker = s
        .events
        .iter()
        .rev()
        .find(|e| e["type"] == "speaker")
        .unwrap();
    assert_eq!(speaker["participant"], serde_json::json!(a.id()));
}
