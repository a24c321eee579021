//! The `verdict` scenario (issue 52): does the server blame the right link?
//!
//! Three rooms of one publisher (video only, synthetic 400 kbit/s) and two
//! receive-only subscribers each, whose faults are known:
//!
//! | room | fault | expected for its subscribers |
//! | --- | --- | --- |
//! | `clean` | none | `good`, `good` |
//! | `uplink` | the publisher's uplink loses `--uplink-loss` of its datagrams (a UDP relay in this process between it and the server) | `publisher_uplink`, `publisher_uplink` |
//! | `downlink` | the first subscriber receives through the client's token bucket at `--downlink-limit-bps` (`corelay_client::shaper`) | `subscriber_downlink`, `good` |
//!
//! and, with `--server-pid`, a middle stretch of the run (the `stall`
//! phase, `--stall-share` of the scored time) in which the server process
//! is stopped `--stall-ms` of every second (SIGSTOP, then SIGCONT), as a
//! release build is stalled where no test fault hook is built in: every
//! subscriber's expected verdict is then `server`.
//!
//! Every second, each subscriber's video slot's verdict is read from
//! `GET …/participants/{id}/diagnosis` and scored against the schedule:
//! not in the warm-up (`--warmup`: joins, ICE, the estimate's climb: the
//! rules themselves wait 5 s before a held layer counts), nor within
//! `--settle` after a phase changes (a verdict judges the second before it
//! was read, and a link's figures take a second or two to follow a change:
//! receiver reports every second, loss and RTT over their windows). The
//! summary's `verdict` object: `right_share` (scored subscriber-seconds
//! whose verdict was the expected one), `false_server_share` (of the scored
//! subscriber-seconds whose expected verdict was not `server`, the share
//! that read `server`), `by_verdict` (per expected verdict, its seconds and
//! those read right), `confusion` (expected → read → seconds), and
//! `false_server` (each such `server` read, when and with what evidence).
//!
//! Owns: the cast, the uplink relay, the stall schedule, the polling and
//! the score. Must not: judge anything itself (the server's verdict is what
//! is measured).

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use corelay_client::signal;
use corelay_client::{Command, Driver, NoObserver, Participant, ParticipantConfig, VideoSource};
use serde_json::{Value, json};

use crate::run::Common;

/// What the scenario runs (the `verdict` subcommand's flags).
#[derive(Debug, Clone)]
pub struct Spec {
    /// Scored time after the warm-up.
    pub duration: Duration,
    pub warmup: Duration,
    pub settle: Duration,
    /// Share of the uplink room publisher's datagrams the relay drops.
    pub uplink_loss: f64,
    /// The limited subscriber's downlink.
    pub downlink_limit_bps: u64,
    /// How long the server is stopped in each second of the stall phase.
    pub stall: Duration,
    /// The stall phase's share of the scored time (0: none).
    pub stall_share: f64,
}

/// Each subscriber's link, and what the server should say of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Clean,
    BehindLossyPublisher,
    Limited,
}

impl Role {
    fn expected(self) -> &'static str {
        match self {
            Role::Clean => "good",
            Role::BehindLossyPublisher => "publisher_uplink",
            Role::Limited => "subscriber_downlink",
        }
    }
}

struct Member {
    name: String,
    room: String,
    id: String,
    location: String,
    token: Option<String>,
    role: Option<Role>,
}

/// One read of a subscriber's verdict: seconds since the warm-up started,
/// and the verdict (None: no answer, or no video slot judged yet).
type Reading = (f64, Option<String>);

/// When the stall phase runs, in seconds since the start (warm-up
/// included); empty without one.
fn stall_window(spec: &Spec, stalls: bool) -> Option<(f64, f64)> {
    if !stalls || spec.stall_share <= 0.0 {
        return None;
    }
    let w = spec.warmup.as_secs_f64();
    let d = spec.duration.as_secs_f64();
    let len = d * spec.stall_share.min(1.0);
    let start = w + (d - len) / 2.0;
    Some((start, start + len))
}

/// What `role` should read at `t`, and whether that second is scored.
fn expected_at(spec: &Spec, stall: Option<(f64, f64)>, role: Role, t: f64) -> (&'static str, bool) {
    let settle = spec.settle.as_secs_f64();
    let warm = spec.warmup.as_secs_f64();
    let mut scored = t >= warm && t < warm + spec.duration.as_secs_f64();
    let mut expected = role.expected();
    if let Some((a, b)) = stall {
        if t >= a && t < b {
            expected = "server";
        }
        for change in [a, b] {
            if t >= change && t < change + settle {
                scored = false;
            }
        }
    }
    (expected, scored)
}

/// The scores over every reading (see the module's top).
fn score(spec: &Spec, stall: Option<(f64, f64)>, readings: &[(Role, Vec<Reading>)]) -> Value {
    let mut by: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut confusion: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
    let (mut scored, mut right, mut not_server, mut false_server, mut unanswered) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for (role, rs) in readings {
        for (t, got) in rs {
            let (expected, counts) = expected_at(spec, stall, *role, *t);
            if !counts {
                continue;
            }
            let Some(got) = got else {
                unanswered += 1;
                continue;
            };
            scored += 1;
            let e = by.entry(expected).or_default();
            e.0 += 1;
            if got == expected {
                right += 1;
                e.1 += 1;
            }
            if expected != "server" {
                not_server += 1;
                false_server += u64::from(got == "server");
            }
            *confusion
                .entry(expected)
                .or_default()
                .entry(got.clone())
                .or_default() += 1;
        }
    }
    let share = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    json!({
        "right_share": share(right, scored),
        "false_server_share": share(false_server, not_server),
        "by_verdict": by.iter().map(|(k, (e, r))| (k.to_string(), json!({"expected_s": e, "right_s": r}))).collect::<serde_json::Map<_, _>>(),
        "confusion": confusion,
        "scored_s": scored,
        "unanswered_s": unanswered,
        "warmup_s": spec.warmup.as_secs_f64(),
        "settle_s": spec.settle.as_secs_f64(),
        "stall_phase_s": stall.map(|(a, b)| json!([a, b])),
    })
}

/// A token for `identity` in `room`, or an admin token (`room` None).
fn token(common: &Common, room: Option<&str>, identity: &str) -> Option<String> {
    let secret = common.auth_secret.as_deref()?;
    let ttl = Duration::from_secs(3600);
    match room {
        Some(room) => signal::mint_token(secret, room, identity, ttl).ok(),
        None => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            signal::mint_claims(
                secret,
                &json!({"sub": identity, "admin": true, "iat": now, "exp": now + ttl.as_secs()}),
            )
            .ok()
        }
    }
}

/// The answer with every UDP candidate pointing at `to` instead (the
/// relay), and no other candidate (the client must not reach the server
/// around it); and the server's address it named.
fn through(answer: &str, to: SocketAddr) -> Option<(String, SocketAddr)> {
    let mut server = None;
    let mut out = String::with_capacity(answer.len());
    for line in answer.split("\r\n").filter(|l| !l.is_empty()) {
        if let Some(c) = line.strip_prefix("a=candidate:") {
            let f: Vec<&str> = c.split(' ').collect();
            let (Some(proto), Some(ip), Some(port)) = (f.get(2), f.get(4), f.get(5)) else {
                continue;
            };
            if !proto.eq_ignore_ascii_case("udp") {
                continue;
            }
            if server.is_none() {
                server = format!("{ip}:{port}").parse().ok();
            }
            let mut g: Vec<String> = f.iter().map(|s| s.to_string()).collect();
            if let Some(x) = g.get_mut(4) {
                *x = to.ip().to_string();
            }
            if let Some(x) = g.get_mut(5) {
                *x = to.port().to_string();
            }
            out.push_str(&format!("a=candidate:{}\r\n", g.join(" ")));
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    Some((out, server?))
}

/// A lossy uplink: a UDP relay between one client and the server that
/// drops `loss` of what the client sends (every datagram but STUN, which
/// the client's ICE needs to stay up and which the publisher's media
/// figures never count) and carries the server's datagrams back whole.
fn relay(
    sock: UdpSocket,
    server: SocketAddr,
    loss: f64,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut client: Option<SocketAddr> = None;
        let mut buf = vec![0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                continue;
            };
            let data = buf.get(..n).unwrap_or_default();
            if from == server {
                if let Some(c) = client {
                    let _ = sock.send_to(data, c);
                }
                continue;
            }
            client = Some(from);
            // STUN: the first byte's two top bits are 0 (RFC 7983).
            let stun = data.first().is_some_and(|b| *b < 4);
            if stun || rng.f64() >= loss {
                let _ = sock.send_to(data, server);
            }
        }
    })
}

/// Stops and continues `pids` on the stall phase's schedule until `stop`.
fn staller(
    pids: Vec<u32>,
    start: Instant,
    window: (f64, f64),
    stall: Duration,
    stop: Arc<AtomicBool>,
) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let signal = |sig| {
            for pid in &pids {
                // SAFETY: kill(2) on a process id the user named; no memory
                // is shared with it.
                unsafe { libc::kill(*pid as libc::pid_t, sig) };
            }
        };
        let mut stalls = 0;
        loop {
            let t = start.elapsed().as_secs_f64();
            if stop.load(Ordering::Relaxed) || t >= window.1 {
                break;
            }
            if t < window.0 {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let second = Instant::now();
            signal(libc::SIGSTOP);
            std::thread::sleep(stall);
            signal(libc::SIGCONT);
            stalls += 1;
            std::thread::sleep(Duration::from_secs(1).saturating_sub(second.elapsed()));
        }
        signal(libc::SIGCONT);
        stalls
    })
}

/// Runs the scenario; writes `summary.json` (and prints the scores).
pub fn run(common: &Common, spec: &Spec) -> Result<Value, String> {
    let url = common.url.clone();
    let run_id = format!("{:x}", fastrand::u32(..));
    let driver = Arc::new(
        Driver::spawn("verdict", Box::new(NoObserver), None)
            .map_err(|e| format!("driver thread: {e}"))?,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut relays = Vec::new();
    let mut members: Vec<Member> = Vec::new();
    let mut key = 0u64;
    let video = VideoSource::Synthetic {
        bitrate_bps: 400_000,
        fps: 30,
        keyframe_interval: 90,
    };
    for (room_kind, roles) in [
        ("clean", [Role::Clean, Role::Clean]),
        (
            "uplink",
            [Role::BehindLossyPublisher, Role::BehindLossyPublisher],
        ),
        ("downlink", [Role::Limited, Role::Clean]),
    ] {
        let room = format!("verdict-{room_kind}-{run_id}");
        let mut cast = vec![(format!("{room_kind}-pub"), None)];
        cast.extend(
            roles
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("{room_kind}-sub{i}"), Some(*r))),
        );
        for (name, role) in cast {
            let mut cfg = ParticipantConfig::new(name.clone());
            cfg.codec = common.codec;
            cfg.publish_audio = false;
            cfg.audio_slots = 0;
            cfg.data_channel = true;
            cfg.own_media_path = common.own_media_path;
            cfg.twcc = common.twcc;
            cfg.seed = common.seed.wrapping_add(key);
            if role.is_some() {
                cfg.publish_video = false;
                cfg.video_slots = 1;
                if role == Some(Role::Limited) {
                    cfg.downlink_limit_bps = Some(spec.downlink_limit_bps);
                }
            } else {
                cfg.video_slots = 0;
                cfg.video = video.clone();
            }
            let tok = token(common, Some(&room), &name);
            let lossy = role.is_none() && room_kind == "uplink";
            let sock = UdpSocket::bind(SocketAddr::new(common.bind_ip, 0))
                .map_err(|e| format!("bind: {e}"))?;
            let local = sock.local_addr().map_err(|e| e.to_string())?;
            let (mut p, offer) = Participant::new(cfg, local, Instant::now())?;
            let joined = signal::post_offer_auth(&url, &room, &name, &offer, tok.as_deref())
                .map_err(|e| format!("{name} cannot join: {e}"))?;
            let answer = if lossy {
                let rs = UdpSocket::bind(SocketAddr::new(common.bind_ip, 0))
                    .map_err(|e| format!("bind: {e}"))?;
                let at = rs.local_addr().map_err(|e| e.to_string())?;
                let (answer, server) = through(&joined.answer, at)
                    .ok_or_else(|| format!("no UDP candidate in {name}'s answer"))?;
                relays.push(relay(
                    rs,
                    server,
                    spec.uplink_loss,
                    common.seed,
                    stop.clone(),
                ));
                answer
            } else {
                joined.answer.clone()
            };
            p.accept_answer(&answer)?;
            key += 1;
            if !driver.send(Command::Add {
                id: key,
                participant: Box::new(p),
                socket: Some(sock),
            }) {
                return Err("the driver thread is gone".into());
            }
            members.push(Member {
                name,
                room: room.clone(),
                id: joined.id,
                location: joined.location,
                token: tok,
                role,
            });
        }
    }
    let start = Instant::now();
    let window = stall_window(spec, !common.server_pids.is_empty());
    let staller = window.map(|w| {
        staller(
            common.server_pids.clone(),
            start,
            w,
            spec.stall,
            stop.clone(),
        )
    });
    let admin = token(common, None, &format!("bench-{run_id}"));
    let subscribers: Vec<&Member> = members.iter().filter(|m| m.role.is_some()).collect();
    let mut readings: Vec<(Role, Vec<Reading>)> = subscribers
        .iter()
        .map(|m| (m.role.unwrap_or(Role::Clean), Vec::new()))
        .collect();
    let end = spec.warmup + spec.duration;
    // Each scored `server` read where the schedule has none, with its
    // evidence: what the server measured of itself then.
    let mut false_server: Vec<Value> = Vec::new();
    let mut tick = 1u32;
    while start.elapsed() < end {
        let at = Duration::from_secs(u64::from(tick));
        std::thread::sleep(at.saturating_sub(start.elapsed()));
        tick += 1;
        for (m, (_, rs)) in subscribers.iter().zip(readings.iter_mut()) {
            let path = format!(
                "/api/v1/rooms/{}/participants/{}/diagnosis",
                signal::encode_component(&m.room),
                m.id
            );
            let t = start.elapsed().as_secs_f64();
            let slot = signal::get_json_auth(&url, &path, admin.as_deref().or(m.token.as_deref()))
                .ok()
                .and_then(|d| {
                    d["slots"]
                        .as_array()?
                        .iter()
                        .find(|s| s["kind"] == "video" && !s["participant"].is_null())
                        .cloned()
                });
            let got = slot
                .as_ref()
                .and_then(|s| s["verdict"].as_str().map(str::to_owned));
            let role = m.role.unwrap_or(Role::Clean);
            let (expected, scored) = expected_at(spec, window, role, t);
            if scored && got.as_deref() == Some("server") && expected != "server" {
                let evidence = slot.map(|s| s["evidence"].clone()).unwrap_or_default();
                false_server.push(json!({"t_s": t, "subscriber": m.name, "evidence": evidence}));
            }
            rs.push((t, got));
        }
        if common.progress {
            let last: Vec<String> = readings
                .iter()
                .map(|(_, r)| {
                    r.last()
                        .and_then(|(_, v)| v.as_deref())
                        .map_or("-".into(), |v| v.chars().take(4).collect())
                })
                .collect();
            eprintln!(
                "t={:>4.0}s {}",
                start.elapsed().as_secs_f64(),
                last.join(" ")
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let stalls = staller.and_then(|h| h.join().ok()).unwrap_or(0);
    for m in &members {
        let _ = signal::delete_auth(&url, &m.location, m.token.as_deref());
    }
    for r in relays {
        let _ = r.join();
    }
    let mut verdict = score(spec, window, &readings);
    verdict["stalls"] = json!(stalls);
    verdict["false_server"] = json!(false_server);
    let per_subscriber: Vec<Value> = subscribers
        .iter()
        .zip(&readings)
        .map(|(m, (role, rs))| {
            let letters: String = rs
                .iter()
                .map(|(_, v)| match v.as_deref() {
                    Some("good") => 'g',
                    Some("publisher_uplink") => 'u',
                    Some("subscriber_downlink") => 'd',
                    Some("server") => 's',
                    Some("idle") => 'i',
                    _ => '-',
                })
                .collect();
            json!({"name": m.name, "expected": role.expected(), "read": letters})
        })
        .collect();
    let summary = json!({
        "scenario": "verdict",
        "config": {
            "duration_s": spec.duration.as_secs_f64(),
            "warmup_s": spec.warmup.as_secs_f64(),
            "settle_s": spec.settle.as_secs_f64(),
            "uplink_loss": spec.uplink_loss,
            "downlink_limit_bps": spec.downlink_limit_bps,
            "stall_ms": spec.stall.as_millis() as u64,
            "stall_share": spec.stall_share,
            "server_pids": common.server_pids,
        },
        "verdict": verdict,
        "subscribers": per_subscriber,
    });
    std::fs::create_dir_all(&common.out).map_err(|e| format!("{}: {e}", common.out.display()))?;
    let text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
    std::fs::write(common.out.join("summary.json"), text + "\n")
        .map_err(|e| format!("summary.json: {e}"))?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec {
            duration: Duration::from_secs(50),
            warmup: Duration::from_secs(10),
            settle: Duration::from_secs(4),
            uplink_loss: 0.1,
            downlink_limit_bps: 250_000,
            stall: Duration::from_millis(300),
            stall_share: 0.2,
        }
    }

    #[test]
    fn the_schedule_scores_outside_the_warmup_and_the_settling() {
        let s = spec();
        let w = stall_window(&s, true);
        assert_eq!(w, Some((30.0, 40.0)));
        assert_eq!(stall_window(&s, false), None);
        let at = |t| expected_at(&s, w, Role::Limited, t);
        assert_eq!(at(5.0), ("subscriber_downlink", false), "warm-up");
        assert_eq!(at(12.0), ("subscriber_downlink", true));
        assert_eq!(at(31.0), ("server", false), "settling into the stall");
        assert_eq!(at(35.0), ("server", true));
        assert_eq!(at(41.0), ("subscriber_downlink", false), "settling out");
        assert_eq!(at(45.0), ("subscriber_downlink", true));
        assert!(!at(60.0).1, "after the run");
    }

    #[test]
    fn scores_count_right_and_false_server_seconds() {
        let s = spec();
        let w = stall_window(&s, true);
        let r = |t: f64, v: &str| (t, Some(v.to_owned()));
        let readings = vec![
            (
                Role::Clean,
                vec![
                    r(12.0, "good"),
                    r(13.0, "server"),
                    r(35.0, "server"),
                    (14.0, None),
                ],
            ),
            (
                Role::Limited,
                vec![
                    r(12.0, "subscriber_downlink"),
                    r(13.0, "good"),
                    r(5.0, "good"),
                ],
            ),
        ];
        let v = score(&s, w, &readings);
        assert_eq!(v["scored_s"], 5);
        assert_eq!(v["unanswered_s"], 1);
        assert_eq!(v["right_share"], 3.0 / 5.0);
        assert_eq!(v["false_server_share"], 1.0 / 4.0);
        assert_eq!(v["by_verdict"]["good"]["expected_s"], 2);
        assert_eq!(v["by_verdict"]["server"]["right_s"], 1);
        assert_eq!(v["confusion"]["subscriber_downlink"]["good"], 1);
    }

    #[test]
    fn the_answer_goes_through_the_relay() {
        let answer = "v=0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 3478 typ host\r\n\
                      a=candidate:2 1 tcp 1 127.0.0.1 3478 typ host tcptype passive\r\na=end\r\n";
        let to: SocketAddr = "127.0.0.1:9999".parse().unwrap();
        let (out, server) = through(answer, to).unwrap();
        assert_eq!(server.to_string(), "127.0.0.1:3478");
        assert_eq!(
            out,
            "v=0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 9999 typ host\r\na=end\r\n"
        );
    }
}
