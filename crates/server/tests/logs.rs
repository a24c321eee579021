//! The server's log as an operator's tools get it (stderr into a pipe, as
//! under systemd or a container runtime): no ANSI colour escapes, one JSON
//! object per line with `--log-format json`, and a participant that never
//! connects leaves one WARN line naming it, its room and the reason.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Joins room `logs` with an offer that never connects, then waits for the
/// line that reports its eviction (the connect deadline is 1 s).
fn never_connects(server: &Server) -> String {
    let (st, _, body) = server.request(
        "POST",
        "/api/v1/rooms/logs/participants",
        &[("content-type", "application/sdp")],
        &unconnectable_offer(),
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
