//! Issue 56.5: one token joins without limit. With `--auth-secret`, a room
//! holds one member per (identity, flavor): a new join with the same token
//! identity replaces the previous member, which gets `bye` with reason
//! `replaced` and whose resource is gone. So one token can never fill a room.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use corelay_client::signal::mint_claims;
use corelay_client::{JoinSpec, mint_token};
use serde_json::{Value, json};

const SECRET: &str = "identity-test-secret-0123456789abcdef";
const WAIT: Duration = Duration::from_secs(20);

fn user(room: &str, sub: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    mint_claims(
        SECRET.as_bytes(),
        &json!({"sub": sub, "room": room, "exp": exp}),
    )
    .unwrap()
}

fn offer(publish: bool, subscribe: bool) -> String {
    client_offer(publish, subscribe)
}

/// Any request with a token: (status, headers, body).
fn call(
    server: &Server,
    method: &str,
    path: &str,
    tok: &str,
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let auth = format!("Bearer {tok}");
    let mut h = vec![("authorization", auth.as_str())];
    if method == "POST" {
        h.push(("content-type", "application/sdp"));
    }
    server.request(method, path, &h, body)
}

/// POSTs an offer to `path` with `tok`: (status, Location, body).
fn post(server: &Server, path: &str, tok: &str, sdp: &str) -> (u16, String, String) {
    let (st, h, body) = call(server, "POST", path, tok, sdp);
    let loc = h
        .iter()
        .find(|(k, _)| k == "location")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    (st, loc, body)
}

/// The room's members (`GET /api/v1/rooms/{room}`, read with `tok`).
fn members(server: &Server, room: &str, tok: &str) -> Vec<Value> {
    let (st, _, body) = call(server, "GET", &format!("/api/v1/rooms/{room}"), tok, "");
    assert_eq!(st, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["participants"].as_array().cloned().unwrap_or_default()
}

fn of_identity<'a>(members: &'a [Value], identity: &str) -> Vec<&'a Value> {
    members
        .iter()
        .filter(|m| m["identity"] == identity)
        .collect()
}

/// A second join with one identity replaces the first: a connected first
/// gets `bye` `replaced`, its resource is gone (DELETE 404), the roster has
/// the identity once (the newcomer), and the others' roster swaps the one for
/// the other. The same holds for WHEP viewers, per flavor.
#[test]
fn a_second_join_of_an_identity_replaces_the_first() {
    let server = start_server(2, &["--auth-secret", SECRET]);
    let room = "swap";
    let alice_tok = user(room, "alice");
    let spec = |identity: &str| {
        let mut s = JoinSpec::new(server.base(), room, identity);
        s.participant.video_slots = 1;
        s.participant.audio_slots = 1;
        s.token =
            Some(mint_token(SECRET.as_bytes(), room, identity, Duration::from_secs(600)).unwrap());
        s
    };
    let bob = corelay_client::join(spec("bob")).expect("bob joins");
    let first = corelay_client::join(spec("alice")).expect("alice joins");
    let (ok, s) = first.wait_until(WAIT, |s| {
        s.connected && !s.events_of_type("welcome").is_empty()
    });
    assert!(ok, "alice did not connect: {:?}", s.events);

    // Alice again (a reconnection, or her token used twice).
    let second = corelay_client::join(spec("alice")).expect("alice joins again");
    assert_ne!(first.id(), second.id());
    let (ok, s) = first.wait_until(WAIT, |s| !s.events_of_type("bye").is_empty());
    assert!(ok, "the replaced participant got no bye: {:?}", s.events);
    let bye = s.events_of_type("bye");
    assert_eq!(bye[0]["reason"], "replaced", "{bye:?}");

    // Its resource is gone.
    let (st, _, body) = call(&server, "DELETE", first.location(), &alice_tok, "");
    assert_eq!(st, 404, "{body}");
    // One alice in the roster: the newcomer.
    let m = members(&server, room, &alice_tok);
    let alices = of_identity(&m, "alice");
    assert_eq!(alices.len(), 1, "{m:?}");
    assert_eq!(alices[0]["id"], second.id());
    assert_eq!(m.len(), 2, "{m:?}");
    // Bob's roster swapped the one for the other.
    let (ok, s) = bob.wait_until(WAIT, |s| {
        s.events_of_type("roster").last().is_some_and(|r| {
            let ids: Vec<&str> = r["participants"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p["id"].as_str())
                .collect();
            ids.contains(&second.id()) && !ids.contains(&first.id())
        })
    });
    assert!(ok, "bob's roster: {:?}", s.events_of_type("roster").last());
    // The newcomer is a full member: it connects.
    let (ok, _) = second.wait_until(WAIT, |s| s.connected);
    assert!(ok, "the replacement did not connect");

    // Pending (never connected) joins and WHEP viewers: the same rule, per
    // flavor (alice's WHEP viewer does not replace her call).
    let viewer = offer(false, true);
    let (st, w1, body) = post(&server, &format!("/whep/{room}"), &alice_tok, &viewer);
    assert_eq!(st, 201, "{body}");
    let (st, w2, body) = post(&server, &format!("/whep/{room}"), &alice_tok, &viewer);
    assert_eq!(st, 201, "{body}");
    assert_eq!(call(&server, "DELETE", &w1, &alice_tok, "").0, 404);
    let m = members(&server, room, &alice_tok);
    let alices = of_identity(&m, "alice");
    assert_eq!(alices.len(), 2, "one call, one viewer: {m:?}");
    assert!(alices.iter().any(|a| a["id"] == second.id()), "{m:?}");
    assert_eq!(call(&server, "DELETE", &w2, &alice_tok, "").0, 204);
}

/// 100 joins with one token never fill a room of 4: each replaces the last,
/// and another identity, and a WHEP viewer, still get in.
#[test]
fn one_token_cannot_fill_a_room() {
    let server = start_server(
        1,
        &["--auth-secret", SECRET, "--max-participants-per-room", "4"],
    );
    let room = "full";
    let path = format!("/api/v1/rooms/{room}/participants");
    let mallory = user(room, "mallory");
    let sdp = offer(true, true);
    let mut last = String::new();
    for i in 0..100 {
        let (st, loc, body) = post(&server, &path, &mallory, &sdp);
        assert_eq!(st, 201, "join {i}: {body}");
        last = loc;
    }
    let m = members(&server, room, &mallory);
    assert_eq!(of_identity(&m, "mallory").len(), 1, "{m:?}");
    assert_eq!(m.len(), 1, "{m:?}");

    let bob = user(room, "bob");
    let (st, _, body) = post(&server, &path, &bob, &sdp);
    assert_eq!(st, 201, "another identity: {body}");
    let carol = user(room, "carol");
    let (st, _, body) = post(
        &server,
        &format!("/whep/{room}"),
        &carol,
        &offer(false, true),
    );
    assert_eq!(st, 201, "a WHEP viewer: {body}");
    assert_eq!(members(&server, room, &mallory).len(), 3);
    // The last of mallory's joins is the one that holds the seat.
    assert_eq!(call(&server, "DELETE", &last, &mallory, "").0, 204);
}
