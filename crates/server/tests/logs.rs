//! The server's log as an operator's tools get it (stderr into a pipe, as
//! under systemd or a container runtime): no ANSI colour escapes, one JSON
//! object per line with `--log-format json`, and a participant that never
//! connects leaves one WARN line naming it, its room and the reason.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use str0m::media::{Direction, MediaKind};
use str0m::{Candidate, Rtc};

/// A str0m client's offer whose ICE nobody will ever complete.
fn offer() -> String {
    let mut rtc = Rtc::builder()
        .clear_codecs()
        .enable_opus(true, false)
        .enable_h264(true)
        .build(Instant::now());
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    rtc.add_local_candidate(Candidate::host(addr, "udp").unwrap());
    let mut api = rtc.sdp_api();
    api.add_media(MediaKind::Video, Direction::SendOnly, None, None, None);
    api.add_channel("events".into());
    let (offer, _pending) = api.apply().unwrap();
    offer.to_sdp_string()
}

/// Joins room `logs` with an offer that never connects, then waits for the
/// line that reports its eviction (the connect deadline is 1 s).
fn never_connects(server: &Server) -> String {
    let (st, _, body) = server.request(
        "POST",
        "/api/v1/rooms/logs/participants",
        &[("content-type", "application/sdp")],
        &offer(),
    );
    assert_eq!(st, 201, "{body}");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(l) = server
            .log()
            .into_iter()
            .find(|l| l.contains("removed by its shard"))
        {
            return l;
        }
        assert!(
            Instant::now() < deadline,
            "no eviction logged:\n{}",
            server.log().join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_text_log_has_no_colour_escapes_and_a_warn_for_a_failed_connection() {
    let server = start_server(1, &["--connect-timeout", "1s"]);
    let line = never_connects(&server);
    let log = server.log();
    assert!(
        log.iter().all(|l| !l.contains("\x1b[")),
        "ANSI escapes in a log that is not a terminal:\n{}",
        log.join("\n")
    );
    assert!(line.contains(" WARN "), "{line}");
    for part in [
        "participant=",
        "room=\"logs\"",
        "reason=\"connect_timeout\"",
        "never connected within --connect-timeout (1 s)",
        "nothing ever arrived from the client",
    ] {
        assert!(line.contains(part), "{part:?} not in {line}");
    }
}

#[test]
fn json_log_lines_parse_as_json() {
    let server = start_server(1, &["--connect-timeout", "1s", "--log-format", "json"]);
    let line = never_connects(&server);
    let log = server.log();
    assert!(!log.is_empty());
    for l in &log {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string() && v["message"].is_string(), "{l}");
    }
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["level"], "WARN", "{line}");
    assert_eq!(v["room"], "logs", "{line}");
    assert_eq!(v["reason"], "connect_timeout", "{line}");
    assert!(v["participant"].is_string(), "{line}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("never connected within --connect-timeout")),
        "{line}"
    );
}
