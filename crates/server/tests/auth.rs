//! Authentication (`--auth-secret`: JWT HS256 bearer tokens), authorization
//! (rooms, publish/subscribe rights, owners and admins) and CORS
//! (`--cors-origin`), end to end against the real binary.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use corelay_client::signal::mint_claims;
use corelay_client::{JoinSpec, mint_token};
use serde_json::{Value, json};

const SECRET: &str = "integration-test-secret-0123456789";
const ORIGIN: &str = "https://app.example";
const WAIT: Duration = Duration::from_secs(20);

fn start() -> Server {
    start_server(1, &["--auth-secret", SECRET, "--cors-origin", ORIGIN])
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token with these claims (exp defaults to 10 minutes from now).
fn token(mut claims: Value) -> String {
    if claims.get("exp").is_none() {
        claims["exp"] = json!(now() + 600);
    }
    mint_claims(SECRET.as_bytes(), &claims).unwrap()
}

fn user(room: &str, sub: &str) -> String {
    token(json!({"sub": sub, "room": room}))
}

fn admin() -> String {
    token(json!({"sub": "ops", "admin": true}))
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn offer(publish: bool, subscribe: bool) -> String {
    client_offer(publish, subscribe)
}

/// POST an offer to `path` with an optional token: (status, headers, body).
fn post(
    server: &Server,
    path: &str,
    tok: Option<&str>,
    sdp: &str,
) -> (u16, Vec<(String, String)>, String) {
    let auth = tok.map(|t| format!("Bearer {t}"));
    let mut h = vec![("content-type", "application/sdp")];
    if let Some(a) = &auth {
        h.push(("authorization", a));
    }
    server.request("POST", path, &h, sdp)
}

/// Any request with an optional token.
fn call(
    server: &Server,
    method: &str,
    path: &str,
    tok: Option<&str>,
    extra: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let auth = tok.map(|t| format!("Bearer {t}"));
    let mut h: Vec<(&str, &str)> = extra.to_vec();
    if let Some(a) = &auth {
        h.push(("authorization", a));
    }
    server.request(method, path, &h, body)
}

/// Joins through the native API with a token; returns the Location.
fn joined(server: &Server, room: &str, tok: &str) -> String {
    let (st, h, body) = post(
        server,
        &format!("/api/v1/rooms/{room}/participants"),
        Some(tok),
        &offer(true, true),
    );
    assert_eq!(st, 201, "{body}");
    header(&h, "location").expect("Location").to_string()
}

fn assert_error(got: (u16, Vec<(String, String)>, String), status: u16, code: &str) -> Value {
    let (st, h, body) = got;
    assert_eq!(st, status, "{body}");
    let v = json_of(&body);
    assert_eq!(v["code"], code, "{body}");
    assert!(
        v["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    if status == 401 {
        assert!(
            header(&h, "www-authenticate").is_some_and(|v| v.starts_with("Bearer")),
            "401 without WWW-Authenticate: {h:?}"
        );
    }
    v
}

#[test]
fn no_or_bad_tokens_are_401_and_health_stays_open() {
    let server = start();
    let path = "/api/v1/rooms/r1/participants";
    let sdp = offer(true, true);
    assert_error(post(&server, path, None, &sdp), 401, "unauthorized");
    // Malformed, wrong scheme, forged, expired, not yet valid, no room.
    assert_error(
        post(&server, path, Some("not-a-jwt"), &sdp),
        401,
        "unauthorized",
    );
    let basic = call(
        &server,
        "POST",
        path,
        None,
        &[
            ("content-type", "application/sdp"),
            ("authorization", "Basic YWxpY2U6c2VjcmV0"),
        ],
        &sdp,
    );
    assert_error(basic, 401, "unauthorized");
    let forged = mint_claims(
        b"some-other-secret",
        &json!({"sub": "alice", "room": "r1", "exp": now() + 600}),
    )
    .unwrap();
    let v = assert_error(
        post(&server, path, Some(&forged), &sdp),
        401,
        "unauthorized",
    );
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("signature"), "{msg}");
    assert!(!msg.contains(&forged[..24]), "the message echoes the token");
    let expired = token(json!({"sub": "alice", "room": "r1", "exp": now() - 3600}));
    let v = assert_error(
        post(&server, path, Some(&expired), &sdp),
        401,
        "unauthorized",
    );
    assert!(v["message"].as_str().unwrap().contains("expired"), "{v}");
    let early = token(json!({"sub": "alice", "room": "r1", "nbf": now() + 3600}));
    assert_error(post(&server, path, Some(&early), &sdp), 401, "unauthorized");
    let roomless = token(json!({"sub": "alice"}));
    assert_error(
        post(&server, path, Some(&roomless), &sdp),
        401,
        "unauthorized",
    );
    let no_exp = mint_claims(SECRET.as_bytes(), &json!({"sub": "alice", "room": "r1"})).unwrap();
    assert_error(
        post(&server, path, Some(&no_exp), &sdp),
        401,
        "unauthorized",
    );
    // Auth comes before the body: no token and a bad body is still 401.
    assert_error(
        call(
            &server,
            "POST",
            path,
            None,
            &[("content-type", "text/plain")],
            "x",
        ),
        401,
        "unauthorized",
    );
    assert_error(
        post(&server, "/whip/r1", None, &offer(true, false)),
        401,
        "unauthorized",
    );
    assert_error(
        post(&server, "/whep/r1", None, &offer(false, true)),
        401,
        "unauthorized",
    );
    for p in ["/api/v1/rooms", "/api/v1/rooms/r1", "/api/v1/stats"] {
        assert_error(call(&server, "GET", p, None, &[], ""), 401, "unauthorized");
    }

    // Open: health, the demo pages and their assets, the metrics listener.
    for p in [
        "/healthz",
        "/",
        "/watch/r1",
        "/assets/app.js",
        "/assets/watch.js",
    ] {
        let (st, _, body) = call(&server, "GET", p, None, &[], "");
        assert_eq!(st, 200, "GET {p}: {body}");
    }
    assert!(server.scrape().contains("corelay_"));
    // Nobody got in.
    let (st, _, body) = call(&server, "GET", "/api/v1/stats", Some(&admin()), &[], "");
    assert_eq!(st, 200, "{body}");
    assert_eq!(json_of(&body)["participants"], 0);
}

#[test]
fn rooms_and_rights_are_enforced_with_403() {
    let server = start();
    let path = "/api/v1/rooms/r1/participants";
    // A token for another room.
    assert_error(
        post(
            &server,
            path,
            Some(&user("r2", "alice")),
            &offer(true, true),
        ),
        403,
        "forbidden",
    );
    // Subscribe-only: may not publish, may receive.
    let viewer = token(json!({"sub": "v", "room": "r1", "publish": false}));
    let v = assert_error(
        post(&server, path, Some(&viewer), &offer(true, true)),
        403,
        "forbidden",
    );
    assert!(v["message"].as_str().unwrap().contains("publish"), "{v}");
    assert_eq!(
        post(&server, path, Some(&viewer), &offer(false, true)).0,
        201
    );
    // Publish-only: may not have receive slots.
    let camera = token(json!({"sub": "c", "room": "r1", "subscribe": false}));
    assert_error(
        post(&server, path, Some(&camera), &offer(true, true)),
        403,
        "forbidden",
    );
    assert_eq!(
        post(&server, path, Some(&camera), &offer(true, false)).0,
        201
    );
    // WHIP needs publish, WHEP subscribe (and neither is a back door).
    assert_error(
        post(&server, "/whip/r1", Some(&viewer), &offer(true, false)),
        403,
        "forbidden",
    );
    assert_error(
        post(&server, "/whep/r1", Some(&camera), &offer(false, true)),
        403,
        "forbidden",
    );
    assert_error(
        post(&server, "/whep/r1", Some(&viewer), &offer(true, true)),
        403,
        "forbidden",
    );
    assert_eq!(
        post(&server, "/whep/r1", Some(&viewer), &offer(false, true)).0,
        201
    );
    assert_eq!(
        post(&server, "/whip/r1", Some(&camera), &offer(true, false)).0,
        201
    );
    // A full token: 201 with the token's identity and display name.
    let alice = token(json!({"sub": "alice-id", "room": "r1", "name": "Alice"}));
    let (st, h, body) = post(
        &server,
        &format!("{path}?name=ignored"),
        Some(&alice),
        &offer(true, true),
    );
    assert_eq!(st, 201, "{body}");
    assert_eq!(header(&h, "content-type"), Some("application/sdp"));
    // A room member's token may read its room.
    let (st, _, body) = call(&server, "GET", "/api/v1/rooms/r1", Some(&alice), &[], "");
    assert_eq!(st, 200, "{body}");
    let room = json_of(&body);
    let members = room["participants"].as_array().unwrap();
    assert_eq!(members.len(), 5, "{room}");
    let a = members
        .iter()
        .find(|m| m["identity"] == "alice-id")
        .expect("alice by identity");
    assert_eq!(a["name"], "Alice");
    // ... but not another room, the listing or the stats.
    assert_error(
        call(&server, "GET", "/api/v1/rooms/r2", Some(&alice), &[], ""),
        403,
        "forbidden",
    );
    for p in ["/api/v1/rooms", "/api/v1/stats"] {
        assert_error(
            call(&server, "GET", p, Some(&alice), &[], ""),
            403,
            "forbidden",
        );
    }
    // Admins may.
    for p in ["/api/v1/rooms", "/api/v1/stats", "/api/v1/rooms/r1"] {
        let (st, _, body) = call(&server, "GET", p, Some(&admin()), &[], "");
        assert_eq!(st, 200, "GET {p}: {body}");
    }
    let (_, _, body) = call(&server, "GET", "/api/v1/rooms", Some(&admin()), &[], "");
    assert_eq!(json_of(&body)["rooms"][0]["participants"], 5);
}

#[test]
fn only_the_owner_or_an_admin_may_change_a_participant() {
    let server = start();
    let alice = user("r1", "alice");
    let bob = user("r1", "bob");
    let alice_elsewhere = user("r2", "alice");
    let (st, h, body) = post(
        &server,
        "/api/v1/rooms/r1/participants",
        Some(&alice),
        &offer(true, true),
    );
    assert_eq!(st, 201, "{body}");
    let loc = header(&h, "location").unwrap().to_string();
    let etag = header(&h, "etag").unwrap().to_string();
    let sdp_ct = [
        ("content-type", "application/sdp"),
        ("if-match", etag.as_str()),
    ];

    assert_error(
        call(&server, "DELETE", &loc, None, &[], ""),
        401,
        "unauthorized",
    );
    assert_error(
        call(&server, "DELETE", &loc, Some(&bob), &[], ""),
        403,
        "forbidden",
    );
    assert_error(
        call(&server, "DELETE", &loc, Some(&alice_elsewhere), &[], ""),
        403,
        "forbidden",
    );
    assert_error(
        call(&server, "PATCH", &loc, None, &sdp_ct, &offer(true, true)),
        401,
        "unauthorized",
    );
    assert_error(
        call(
            &server,
            "PATCH",
            &loc,
            Some(&bob),
            &sdp_ct,
            &offer(true, true),
        ),
        403,
        "forbidden",
    );
    // The owner may not grant itself rights its token lacks.
    let alice_viewer = token(json!({"sub": "alice", "room": "r1", "publish": false}));
    assert_error(
        call(
            &server,
            "PATCH",
            &loc,
            Some(&alice_viewer),
            &sdp_ct,
            &offer(true, true),
        ),
        403,
        "forbidden",
    );
    // The owner's PATCH passes authorization (a fresh offer's ICE
    // credentials differ, so the renegotiation itself may be refused, but
    // not with 401/403).
    let (st, _, body) = call(
        &server,
        "PATCH",
        &loc,
        Some(&alice),
        &sdp_ct,
        &offer(true, true),
    );
    assert!(st != 401 && st != 403, "{st} {body}");
    let (st, _, body) = call(&server, "DELETE", &loc, Some(&alice), &[], "");
    assert_eq!(st, 204, "{body}");
    assert_error(
        call(&server, "DELETE", &loc, Some(&alice), &[], ""),
        404,
        "not_found",
    );

    // An admin may remove anyone.
    let loc = joined(&server, "r1", &bob);
    let (st, _, body) = call(&server, "DELETE", &loc, Some(&admin()), &[], "");
    assert_eq!(st, 204, "{body}");

    // WHIP/WHEP resources: the same rule for trickle PATCH and DELETE.
    let (st, h, body) = post(&server, "/whip/r1", Some(&alice), &offer(true, false));
    assert_eq!(st, 201, "{body}");
    let whip = header(&h, "location").unwrap().to_string();
    let frag = [("content-type", "application/trickle-ice-sdpfrag")];
    let ice = "a=candidate:1 1 udp 2130706431 127.0.0.1 9 typ host\r\n";
    assert_error(
        call(&server, "PATCH", &whip, Some(&bob), &frag, ice),
        403,
        "forbidden",
    );
    assert_error(
        call(&server, "PATCH", &whip, None, &frag, ice),
        401,
        "unauthorized",
    );
    assert_eq!(
        call(&server, "PATCH", &whip, Some(&alice), &frag, ice).0,
        204
    );
    assert_error(
        call(&server, "DELETE", &whip, Some(&bob), &[], ""),
        403,
        "forbidden",
    );
    assert_eq!(call(&server, "DELETE", &whip, Some(&alice), &[], "").0, 204);
    let (st, h, body) = post(&server, "/whep/r1", Some(&bob), &offer(false, true));
    assert_eq!(st, 201, "{body}");
    let whep = header(&h, "location").unwrap().to_string();
    assert_error(
        call(&server, "DELETE", &whep, Some(&alice), &[], ""),
        403,
        "forbidden",
    );
    assert_eq!(
        call(&server, "DELETE", &whep, Some(&admin()), &[], "").0,
        204
    );
}

#[test]
fn cors_echoes_listed_origins_only() {
    let server = start();
    let get = |origin: &str| call(&server, "GET", "/healthz", None, &[("origin", origin)], "");
    let (st, h, _) = get(ORIGIN);
    assert_eq!(st, 200);
    assert_eq!(header(&h, "access-control-allow-origin"), Some(ORIGIN));
    let expose = header(&h, "access-control-expose-headers").unwrap_or_default();
    for name in ["Location", "ETag", "Retry-After", "Link"] {
        assert!(expose.contains(name), "{expose}");
    }
    assert!(
        h.iter().any(|(k, v)| k == "vary" && v.contains("Origin")),
        "{h:?}"
    );
    let (st, h, _) = get("https://evil.example");
    assert_eq!(st, 200);
    assert_eq!(header(&h, "access-control-allow-origin"), None, "{h:?}");
    // Errors carry the header too, so pages can read them.
    let (st, h, _) = call(
        &server,
        "POST",
        "/api/v1/rooms/r1/participants",
        None,
        &[("origin", ORIGIN), ("content-type", "application/sdp")],
        "v=0",
    );
    assert_eq!(st, 401);
    assert_eq!(header(&h, "access-control-allow-origin"), Some(ORIGIN));

    // Preflights.
    let preflight = |origin: &str| {
        call(
            &server,
            "OPTIONS",
            "/api/v1/rooms/r1/participants",
            None,
            &[
                ("origin", origin),
                ("access-control-request-method", "POST"),
                (
                    "access-control-request-headers",
                    "authorization, content-type",
                ),
            ],
            "",
        )
    };
    let (st, h, _) = preflight(ORIGIN);
    assert_eq!(st, 204);
    assert_eq!(header(&h, "access-control-allow-origin"), Some(ORIGIN));
    let methods = header(&h, "access-control-allow-methods").unwrap_or_default();
    for m in ["GET", "POST", "PATCH", "DELETE", "OPTIONS"] {
        assert!(methods.contains(m), "{methods}");
    }
    let allowed = header(&h, "access-control-allow-headers").unwrap_or_default();
    for name in ["Content-Type", "If-Match", "Authorization"] {
        assert!(allowed.contains(name), "{allowed}");
    }
    let (_, h, _) = preflight("https://evil.example");
    for name in [
        "access-control-allow-origin",
        "access-control-allow-methods",
        "access-control-allow-headers",
    ] {
        assert_eq!(header(&h, name), None, "{h:?}");
    }

    // Without --cors-origin no origin gets CORS headers.
    let plain = start_server(1, &[]);
    let (_, h, _) = plain.request("GET", "/healthz", &[("origin", ORIGIN)], "");
    assert_eq!(header(&h, "access-control-allow-origin"), None, "{h:?}");
}

#[test]
fn media_flows_for_participants_with_tokens() {
    let server = start();
    let secret = SECRET.as_bytes();
    let ttl = Duration::from_secs(600);
    let spec = |name: &str| {
        let mut s = JoinSpec::new(server.base(), "call", name);
        s.participant.video_slots = 1;
        s.participant.audio_slots = 1;
        s.token = Some(mint_token(secret, "call", name, ttl).unwrap());
        s
    };
    // Without a token the client gets the server's 401.
    let mut anon = spec("anon");
    anon.token = None;
    let err = corelay_client::join(anon)
        .err()
        .expect("joined without a token");
    assert_eq!(err.status, Some(401), "{err}");
    assert_eq!(err.code().as_deref(), Some("unauthorized"));

    let alice = corelay_client::join(spec("alice")).expect("alice joins");
    let bob = corelay_client::join(spec("bob")).expect("bob joins");
    for (who, p, from) in [("alice", &alice, "bob"), ("bob", &bob, "alice")] {
        let want = names(&[from]);
        let (ok, s) = p.wait_until(WAIT, |s| {
            video_sources(s, 30) == want && audio_sources(s, 30) == want
        });
        assert!(ok, "{who} did not receive {from}: {:#?}", s.slots);
        assert_clean(who, &s);
    }
    // leave() DELETEs with the participant's own token.
    alice.leave().expect("alice leaves with her token");
    bob.leave().expect("bob leaves with his token");
    let (_, _, body) = call(&server, "GET", "/api/v1/stats", Some(&admin()), &[], "");
    assert_eq!(json_of(&body)["participants"], 0, "{body}");
}

/// The token's `publish_data` grant: without it, a message is refused with
/// an `error` event naming why and reaches nobody; with it (the default,
/// or `can_publish_data`), the other participant gets it, from the
/// sender's id.
#[test]
fn messages_need_the_publish_data_grant() {
    let server = start();
    let spec = |name: &str, grant: Option<bool>| {
        let mut s = JoinSpec::new(server.base(), "chat", name);
        s.participant.publish_video = false;
        s.participant.publish_audio = false;
        s.participant.video_slots = 0;
        let mut claims = json!({"sub": name, "room": "chat", "exp": now() + 600});
        if let Some(g) = grant {
            claims["can_publish_data"] = json!(g);
        }
        s.token = Some(token(claims));
        s
    };
    let muted = corelay_client::join(spec("muted", Some(false))).expect("muted joins");
    let talker = corelay_client::join(spec("talker", None)).expect("talker joins");
    let listener = corelay_client::join(spec("listener", Some(true))).expect("listener joins");
    for p in [&muted, &talker, &listener] {
        let (ok, s) = p.wait_until(WAIT, |s| !s.events_of_type("welcome").is_empty());
        assert!(ok, "no welcome: {:?}", s.events);
    }
    let msg = |text: &str| json!({"type": "message", "topic": "chat", "payload": text}).to_string();
    muted.send_event(&msg("from muted"));
    let (ok, s) = muted.wait_until(WAIT, |s| !s.events_of_type("error").is_empty());
    assert!(ok, "no error event: {:?}", s.events);
    assert_eq!(
        s.events_of_type("error")[0],
        &json!({"type": "error", "request": "message", "reason": "not_allowed"})
    );
    talker.send_event(&msg("from talker"));
    let (ok, s) = listener.wait_until(WAIT, |s| !s.events_of_type("message").is_empty());
    assert!(ok, "no message: {:?}", s.events);
    let got = s.events_of_type("message");
    assert_eq!(got.len(), 1, "only the granted one: {got:?}");
    assert_eq!(got[0]["payload"], "from talker");
    assert_eq!(got[0]["from"], talker.id());
}

#[test]
fn corelay_token_mints_what_the_server_accepts() {
    let dir = std::env::temp_dir().join(format!("corelay-auth-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("secret");
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    let server = start_server(1, &["--auth-secret-file", file.to_str().unwrap()]);
    let mint = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_corelay"))
            .args(["token", "--secret", SECRET, "--ttl", "15m"])
            .args(extra)
            .env_remove("CORELAY_AUTH_SECRET")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let path = "/api/v1/rooms/r1/participants";
    let alice = mint(&["--room", "r1", "--identity", "alice", "--name", "Alice"]);
    assert_eq!(alice.split('.').count(), 3, "{alice}");
    let (st, _, body) = post(&server, path, Some(&alice), &offer(true, true));
    assert_eq!(st, 201, "{body}");
    let viewer = mint(&["--room", "r1", "--identity", "v", "--no-publish"]);
    assert_error(
        post(&server, path, Some(&viewer), &offer(true, true)),
        403,
        "forbidden",
    );
    let admin = mint(&["--identity", "ops", "--admin"]);
    let (st, _, body) = call(&server, "GET", "/api/v1/rooms/r1", Some(&admin), &[], "");
    assert_eq!(st, 200, "{body}");
    assert_eq!(json_of(&body)["participants"][0]["name"], "Alice");
    // A bad --ttl is a usage error, not a token.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_corelay"))
        .args([
            "token",
            "--secret",
            "s",
            "--room",
            "r",
            "--identity",
            "i",
            "--ttl",
            "1w",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
