//! The hostile (and churning) clients behind `scripts/abuse` and `scripts/soak`.
//!
//! ```text
//! attacker offer [--video-send 0|1] [--audio-send 0|1] [--video-recv N] [--audio-recv N] [--no-channel]
//!     print an SDP offer as this client makes it (str0m), for the script to mangle
//! attacker serve --url URL --room ROOM [--partners 2] [--token T ...]
//!     join a real participant ("abuser") and PARTNERS publishers into ROOM, wait
//!     until media flows, print one JSON line (ids, Locations, ETags, the offers and
//!     answers, ICE credentials, the server's media address), then read commands
//!     on stdin, one JSON line answered per command:
//!       status                    connection, frames received, data-channel events of each
//!       join NAME [TOKEN]         one more participant like the partners (a victim); its JSON
//!       drop NAME                 DELETE that participant and stop driving it
//!       garbage N [SECS [KIND]]   N garbage datagrams from the abuser's own 5-tuple
//!                                 (KIND: random|rtp|rtcp|stun|dtls|tiny; default all in turn)
//!       pins N [SECS]             N pin/pin/unpin requests on the abuser's data channel
//!       stun N [BATCH]            STUN binding requests with the abuser's valid
//!                                 credentials from N different source ports
//!       leave                     DELETE everyone and exit (also on end of input)
//! attacker churn --url URL --seconds S [--rate R] [--hold SECS] [--rooms K] [--token T]
//!     R times a second, in turn: a real join that connects and leaves with DELETE
//!     after HOLD, a real join that connects and then vanishes (stops sending; ICE
//!     consent must reap it), and a POST whose offer never does ICE (--connect-timeout
//!     must reap it). Prints one JSON summary line at the end.
//! ```
//!
//! Tokens (`--token`, repeatable) go out as `Authorization: Bearer`; in
//! `serve` the first is the abuser's and the next ones the partners' (the last
//! one is reused when there are fewer). Every loop here is bounded in count.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelay_client::signal::{encode_component, resolve};
use corelay_client::{
    Command, Driver, NoObserver, Participant, ParticipantConfig, Snapshot, VideoSource,
};
use serde_json::{Value, json};
use str0m::ice::{StunMessage, TransId};

// ------------------------------------------------------------------ arguments

struct Args {
    flags: BTreeMap<String, Vec<String>>,
}

impl Args {
    fn parse(raw: &[String], switches: &[&str]) -> Args {
        let mut flags: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut i = 0;
        while i < raw.len() {
            let k = raw[i].trim_start_matches("--").to_string();
            if switches.contains(&k.as_str()) {
                flags.entry(k).or_default().push("1".into());
                i += 1;
            } else if i + 1 < raw.len() {
                flags.entry(k).or_default().push(raw[i + 1].clone());
                i += 2;
            } else {
                die(&format!("flag --{k} needs a value"));
            }
        }
        Args { flags }
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.flags.get(k).and_then(|v| v.last()).map(String::as_str)
    }
    fn all(&self, k: &str) -> Vec<String> {
        self.flags.get(k).cloned().unwrap_or_default()
    }
    fn num(&self, k: &str, default: f64) -> f64 {
        self.get(k)
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| die(&format!("--{k} {v}: not a number")))
            })
            .unwrap_or(default)
    }
    fn has(&self, k: &str) -> bool {
        self.flags.contains_key(k)
    }
}

fn die(msg: &str) -> ! {
    eprintln!("attacker: {msg}");
    std::process::exit(2)
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let rest = if argv.is_empty() { &[][..] } else { &argv[1..] };
    match argv.first().map(String::as_str) {
        Some("offer") => offer(&Args::parse(rest, &["no-channel"])),
        Some("serve") => serve(&Args::parse(rest, &[])),
        Some("churn") => churn(&Args::parse(rest, &[])),
        _ => die("usage: attacker offer|serve|churn [flags] (see the file's header)"),
    }
}

// ------------------------------------------------------------------ helpers

fn sdp_attr(sdp: &str, name: &str) -> Option<String> {
    let prefix = format!("a={name}:");
    sdp.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

/// The first host candidate of an SDP answer: the server's media address.
fn answer_candidate(sdp: &str) -> Option<SocketAddr> {
    for l in sdp.lines() {
        let Some(rest) = l.trim().strip_prefix("a=candidate:") else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() >= 6
            && f[2].eq_ignore_ascii_case("udp")
            && let (Ok(ip), Ok(port)) = (f[4].parse::<IpAddr>(), f[5].parse::<u16>())
        {
            return Some(SocketAddr::new(ip, port));
        }
    }
    None
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(15)))
        .max_redirects(0)
        .build()
        .into()
}

fn lock(m: &Mutex<Snapshot>) -> Snapshot {
    m.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// One participant this tool created.
struct Peer {
    name: String,
    key: u64,
    location: String,
    etag: String,
    offer: String,
    answer: String,
    local: SocketAddr,
    token: Option<String>,
    shared: Option<Arc<Mutex<Snapshot>>>,
}

/// POST an offer (with a token) and, when `drive` is given, apply the answer
/// and hand the participant to that driver. Err carries "status body".
fn join(
    agent: &ureq::Agent,
    url: &str,
    room: &str,
    cfg: ParticipantConfig,
    token: Option<&str>,
    drive: Option<(&Driver, u64)>,
) -> Result<Peer, String> {
    let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
        .map_err(|e| format!("bind: {e}"))?;
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    let name = cfg.name.clone();
    let (mut participant, offer) = Participant::new(cfg, local, Instant::now())?;
    let target = format!(
        "{}/api/v1/rooms/{}/participants?name={}",
        url.trim_end_matches('/'),
        encode_component(room),
        encode_component(&name)
    );
    let mut req = agent
        .post(&target)
        .header("Content-Type", "application/sdp");
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req
        .send(offer.as_str())
        .map_err(|e| format!("POST {target}: {e}"))?;
    let status = resp.status().as_u16();
    let hdr = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let location = hdr("location").unwrap_or_default();
    let etag = hdr("etag").unwrap_or_default();
    let answer = resp
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .unwrap_or_default();
    if status != 201 {
        return Err(format!("{status} {answer}"));
    }
    let mut peer = Peer {
        name,
        key: 0,
        location,
        etag,
        offer,
        answer,
        local,
        token: token.map(str::to_string),
        shared: None,
    };
    if let Some((driver, key)) = drive {
        if let Err(e) = participant.accept_answer(&peer.answer) {
            delete(agent, url, &peer);
            return Err(format!("201 {e}"));
        }
        peer.key = key;
        peer.shared = Some(participant.shared());
        if !driver.send(Command::Add {
            id: key,
            participant: Box::new(participant),
            socket: Some(socket),
        }) {
            return Err("driver thread is gone".into());
        }
    }
    Ok(peer)
}

/// DELETE a peer's Location; the status (0: no answer).
fn delete(agent: &ureq::Agent, url: &str, p: &Peer) -> u16 {
    if p.location.is_empty() {
        return 0;
    }
    let mut req = agent.delete(&resolve(url, &p.location));
    if let Some(t) = &p.token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    req.call().map(|r| r.status().as_u16()).unwrap_or(0)
}

fn frames(s: &Snapshot) -> u64 {
    s.slots.values().map(|x| x.frames).sum()
}

fn count_events(s: &Snapshot, ty: &str) -> usize {
    s.events
        .iter()
        .filter(|e| e.get("type").and_then(Value::as_str) == Some(ty))
        .count()
}

/// The participant id the server announced on the data channel (`welcome`).
fn public_id(s: &Snapshot) -> Option<String> {
    s.events.iter().find_map(|e| {
        (e.get("type").and_then(Value::as_str) == Some("welcome"))
            .then(|| {
                e.get("participant")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .flatten()
    })
}

// ------------------------------------------------------------------ offer

fn offer(a: &Args) {
    let mut cfg = ParticipantConfig::new("offer");
    cfg.publish_video = a.num("video-send", 1.0) > 0.0;
    cfg.publish_audio = a.num("audio-send", 0.0) > 0.0;
    cfg.video_slots = a.num("video-recv", 1.0) as usize;
    cfg.audio_slots = a.num("audio-recv", 0.0) as usize;
    cfg.data_channel = !a.has("no-channel");
    let local = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9);
    match Participant::new(cfg, local, Instant::now()) {
        Ok((_, sdp)) => print!("{sdp}"),
        Err(e) => die(&e),
    }
}

// ------------------------------------------------------------------ serve

fn peer_json(p: &Peer) -> Value {
    let s = p.shared.as_ref().map(|m| lock(m)).unwrap_or_default();
    json!({
        "name": p.name,
        "location": p.location,
        "etag": p.etag,
        "public_id": public_id(&s),
        "local": p.local.to_string(),
        "server": answer_candidate(&p.answer).map(|a| a.to_string()),
        "ufrag": sdp_attr(&p.offer, "ice-ufrag"),
        "pwd": sdp_attr(&p.offer, "ice-pwd"),
        "server_ufrag": sdp_attr(&p.answer, "ice-ufrag"),
        "server_pwd": sdp_attr(&p.answer, "ice-pwd"),
        "slots": s.slots.keys().collect::<Vec<_>>(),
        "offer": p.offer,
        "answer": p.answer,
    })
}

fn status_json(p: &Peer) -> Value {
    let s = p.shared.as_ref().map(|m| lock(m)).unwrap_or_default();
    json!({
        "name": p.name,
        "connected": s.connected,
        "channel_open": s.channel_open,
        "frames": frames(&s),
        "packets": s.slots.values().map(|x| x.packets).sum::<u64>(),
        "corrupt": s.slots.values().map(|x| x.corrupt).sum::<u64>(),
        "events": s.events.len(),
        "slots_events": count_events(&s, "slots"),
        "failed": s.failed,
        "public_id": public_id(&s),
    })
}

fn out(v: Value) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{v}");
    let _ = o.flush();
}

fn serve(a: &Args) {
    let url = a.get("url").unwrap_or("http://127.0.0.1:7070").to_string();
    let room = a.get("room").unwrap_or("abuse").to_string();
    let partners = a.num("partners", 2.0).clamp(1.0, 8.0) as usize;
    let tokens = a.all("token");
    let token_for = |i: usize| tokens.get(i).or(tokens.last()).map(String::as_str);
    let agent = agent();
    let driver = Driver::spawn("attacker", Box::new(NoObserver), None)
        .unwrap_or_else(|e| die(&format!("driver: {e}")));
    let mut next_key = 1u64;
    let mut add = |peers: &mut Vec<Peer>, name: &str, token: Option<&str>| -> Result<(), String> {
        let mut cfg = ParticipantConfig::new(name.to_string());
        cfg.publish_audio = false;
        cfg.audio_slots = 0;
        cfg.video_slots = partners;
        cfg.video = VideoSource::default();
        next_key += 1;
        let p = join(&agent, &url, &room, cfg, token, Some((&driver, next_key)))?;
        peers.push(p);
        Ok(())
    };
    let mut peers: Vec<Peer> = Vec::new();
    for i in 0..=partners {
        let name = if i == 0 {
            "abuser".to_string()
        } else {
            format!("partner{i}")
        };
        if let Err(e) = add(&mut peers, &name, token_for(i)) {
            for p in &peers {
                delete(&agent, &url, p);
            }
            out(json!({"error": format!("join {name}: {e}")}));
            std::process::exit(1);
        }
    }
    let ok = wait_ready(&peers, Duration::from_secs(20));
    out(json!({
        "ready": ok,
        "room": room,
        "abuser": peer_json(&peers[0]),
        "partners": peers[1..].iter().map(peer_json).collect::<Vec<_>>(),
    }));

    let stdin = std::io::stdin();
    for line in stdin.lock().lines().take(10_000) {
        let Ok(line) = line else { break };
        let w: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize, d: f64| w.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(d);
        match w.first().copied() {
            Some("status") => {
                out(json!({"peers": peers.iter().map(status_json).collect::<Vec<_>>()}))
            }
            Some("join") => {
                let name = w.get(1).copied().unwrap_or("victim").to_string();
                let token = w.get(2).copied().or(tokens.last().map(String::as_str));
                match add(&mut peers, &name, token) {
                    Ok(()) => {
                        let p = peers.last().expect("just added");
                        let ready = wait_ready(std::slice::from_ref(p), Duration::from_secs(15));
                        out(json!({"ready": ready, "peer": peer_json(p)}));
                    }
                    Err(e) => out(json!({"error": format!("join {name}: {e}")})),
                }
            }
            Some("drop") => {
                let name = w.get(1).copied().unwrap_or("");
                match peers.iter().position(|p| p.name == name && p.key != 0) {
                    Some(i) if i > 0 => {
                        let p = peers.remove(i);
                        let st = delete(&agent, &url, &p);
                        driver.send(Command::Remove(p.key));
                        out(json!({"dropped": name, "status": st}));
                    }
                    _ => out(json!({"error": format!("no peer {name} (the abuser stays)")})),
                }
            }
            Some("garbage") => {
                let only = w
                    .get(3)
                    .and_then(|k| GARBAGE_KINDS.iter().position(|x| x == k));
                out(garbage(
                    &driver,
                    &peers[0],
                    n(1, 14_000.0) as usize,
                    n(2, 2.0),
                    only,
                ))
            }
            Some("pins") => out(pins(&driver, &peers, n(1, 20_000.0) as usize, n(2, 4.0))),
            Some("stun") => out(stun_sources(
                &peers[0],
                n(1, 3_000.0) as usize,
                n(2, 250.0) as usize,
            )),
            Some("leave") | Some("quit") => break,
            Some(other) => out(json!({"error": format!("unknown command {other}")})),
            None => {}
        }
    }
    let statuses: Vec<u16> = peers.iter().map(|p| delete(&agent, &url, p)).collect();
    out(json!({"left": statuses}));
}

/// Poll (bounded) until every peer is connected, its channel is open, it
/// receives frames and the server has announced its id.
fn wait_ready(peers: &[Peer], timeout: Duration) -> bool {
    let ready = |p: &Peer| {
        let s = lock(p.shared.as_ref().expect("driven"));
        s.connected && s.channel_open && frames(&s) > 10 && public_id(&s).is_some()
    };
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline && !peers.iter().all(ready) {
        std::thread::sleep(Duration::from_millis(50));
    }
    peers.iter().all(ready)
}

/// Datagrams that a careless server might route somewhere other than a drop
/// counter: random bytes, RTP and RTCP headers with garbage (SRTP cannot
/// authenticate them), STUN-shaped messages with bogus attributes, DTLS
/// records with nonsense, and tiny/empty ones.
fn garbage_datagram(rng: &mut fastrand::Rng, kind: usize) -> (usize, Vec<u8>) {
    let kind = kind % 6;
    let mut v: Vec<u8> = Vec::new();
    match kind {
        0 => v.extend((0..rng.usize(1..1200)).map(|_| rng.u8(..))),
        1 => {
            // RTP: V=2, a payload type outside 64..=95 (RTCP's range).
            v.push(0x80 | rng.u8(0..16));
            let pt = rng.u8(0..64);
            v.push(if rng.bool() { pt } else { pt + 96 } | if rng.bool() { 0x80 } else { 0 });
            v.extend((0..10).map(|_| rng.u8(..)));
            v.extend((0..rng.usize(0..1100)).map(|_| rng.u8(..)));
        }
        2 => {
            // RTCP: V=2, PT 200..=206, a plausible length, then garbage.
            let words = rng.u16(1..64);
            v.push(0x80 | rng.u8(0..32));
            v.push(rng.u8(200..207));
            v.extend(words.to_be_bytes());
            v.extend((0..usize::from(words) * 4).map(|_| rng.u8(..)));
        }
        3 => {
            // STUN: a binding request (or other method) with nonsense attributes.
            let body: Vec<u8> = (0..rng.usize(0..16) * 4).map(|_| rng.u8(..)).collect();
            v.extend([0x00, if rng.bool() { 0x01 } else { rng.u8(..) & 0x3f }]);
            v.extend((body.len() as u16).to_be_bytes());
            v.extend([0x21, 0x12, 0xA4, 0x42]);
            v.extend((0..12).map(|_| rng.u8(..)));
            v.extend(body);
        }
        4 => {
            // DTLS: content type 20..=25, version 1.2, a record of garbage.
            let len = rng.u16(0..600);
            v.push(rng.u8(20..26));
            v.extend([0xfe, 0xfd]);
            v.extend((0..8).map(|_| rng.u8(..)));
            v.extend(len.to_be_bytes());
            v.extend((0..len).map(|_| rng.u8(..)));
        }
        _ => v.extend((0..rng.usize(0..3)).map(|_| rng.u8(..))),
    }
    (kind, v)
}

/// The garbage kinds, in `garbage_datagram`'s order.
const GARBAGE_KINDS: [&str; 6] = ["random", "rtp", "rtcp", "stun", "dtls", "tiny"];

fn garbage(driver: &Driver, p: &Peer, n: usize, secs: f64, only: Option<usize>) -> Value {
    let n = n.min(1_000_000);
    let mut rng = fastrand::Rng::with_seed(7);
    let errors0 = driver.stats().tx_errors.load(Ordering::Relaxed);
    let sent0 = driver.stats().tx_datagrams.load(Ordering::Relaxed);
    let start = Instant::now();
    let ticks = ((secs.clamp(0.01, 60.0)) * 100.0).ceil() as usize;
    let per_tick = n.div_ceil(ticks.max(1));
    let mut kinds = [0usize; 6];
    let mut sent = 0;
    for t in 0..ticks {
        for _ in 0..per_tick {
            if sent == n {
                break;
            }
            let (k, d) = garbage_datagram(&mut rng, only.unwrap_or(sent));
            kinds[k] += 1;
            driver.send(Command::Raw(p.key, d));
            sent += 1;
        }
        let due = start + Duration::from_millis(10 * (t as u64 + 1));
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    json!({
        "sent": sent,
        "kinds": GARBAGE_KINDS
            .iter()
            .zip(kinds)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| ((*k).to_string(), json!(n)))
            .collect::<serde_json::Map<_, _>>(),
        "driver_tx": driver.stats().tx_datagrams.load(Ordering::Relaxed) - sent0,
        "driver_tx_errors": driver.stats().tx_errors.load(Ordering::Relaxed) - errors0,
        "secs": start.elapsed().as_secs_f64(),
    })
}

fn pins(driver: &Driver, peers: &[Peer], n: usize, secs: f64) -> Value {
    let n = n.min(1_000_000);
    let abuser = &peers[0];
    let s0 = lock(abuser.shared.as_ref().expect("driven"));
    let Some(mid) = s0.slots.keys().next().cloned() else {
        return json!({"error": "abuser has no slot"});
    };
    let targets: Vec<String> = peers[1..]
        .iter()
        .filter(|p| p.name.starts_with("partner"))
        .filter_map(|p| public_id(&lock(p.shared.as_ref().expect("driven"))))
        .collect();
    if targets.is_empty() {
        return json!({"error": "no partner announced its id"});
    }
    let before = count_events(&s0, "slots");
    let start = Instant::now();
    // The participant's outbox holds 10 000 messages: pace the flood so the
    // data channel, not our queue, is where it goes.
    let ticks = ((secs.clamp(0.01, 60.0)) * 100.0).ceil() as usize;
    let per_tick = n.div_ceil(ticks.max(1));
    let mut sent = 0;
    for t in 0..ticks {
        for _ in 0..per_tick {
            if sent == n {
                break;
            }
            let msg = if sent % 3 == 2 {
                format!(r#"{{"type":"unpin","mid":"{mid}"}}"#)
            } else {
                let who = &targets[(sent / 3 + sent % 3) % targets.len()];
                format!(r#"{{"type":"pin","participant":"{who}","mid":"{mid}"}}"#)
            };
            driver.send(Command::Event(abuser.key, msg));
            sent += 1;
        }
        let due = start + Duration::from_millis(10 * (t as u64 + 1));
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
    }
    let flood_secs = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    let s1 = lock(abuser.shared.as_ref().expect("driven"));
    json!({
        "sent": sent,
        "mid": mid,
        "targets": targets,
        "secs": flood_secs,
        "slots_events": count_events(&s1, "slots") - before,
        "connected": s1.connected,
        "channel_open": s1.channel_open,
    })
}

/// Binding requests with the abuser's valid ICE credentials, each from its
/// own source port, in batches of `batch` sockets open at once.
fn stun_sources(p: &Peer, n: usize, batch: usize) -> Value {
    let n = n.min(60_000);
    let batch = batch.clamp(1, 1000);
    let (Some(server), Some(ufrag), Some(s_ufrag), Some(s_pwd)) = (
        answer_candidate(&p.answer),
        sdp_attr(&p.offer, "ice-ufrag"),
        sdp_attr(&p.answer, "ice-ufrag"),
        sdp_attr(&p.answer, "ice-pwd"),
    ) else {
        return json!({"error": "no ICE credentials or candidate in the SDP"});
    };
    let provider = str0m::crypto::from_feature_flags();
    let hmac = provider.sha1_hmac_provider;
    let username = format!("{s_ufrag}:{ufrag}");
    let start = Instant::now();
    let (mut answered, mut errors, mut silent, mut bind_failed) = (0u64, 0u64, 0u64, 0u64);
    let mut done = 0;
    while done < n && start.elapsed() < Duration::from_secs(60) {
        let k = batch.min(n - done);
        let mut socks = Vec::with_capacity(k);
        for _ in 0..k {
            let Ok(s) = UdpSocket::bind("127.0.0.1:0") else {
                bind_failed += 1;
                continue;
            };
            let msg = StunMessage::binding_request(
                &username,
                TransId::new(),
                true,
                fastrand::u64(..),
                0x6e00_01ff,
                false,
            );
            let mut buf = [0u8; 512];
            let Ok(len) = msg.to_bytes(Some(s_pwd.as_bytes()), &mut buf, |key, parts| {
                hmac.sha1_hmac(key, parts)
            }) else {
                return json!({"error": "cannot encode a binding request"});
            };
            let _ = s.set_nonblocking(true);
            let _ = s.send_to(&buf[..len], server);
            socks.push((s, false));
        }
        // Collect answers for up to 400 ms.
        let until = Instant::now() + Duration::from_millis(400);
        let mut pending = socks.len();
        let mut buf = [0u8; 1500];
        while pending > 0 && Instant::now() < until {
            let mut progressed = false;
            for (s, seen) in socks.iter_mut().filter(|(_, seen)| !*seen) {
                if let Ok(len) = s.recv(&mut buf) {
                    *seen = true;
                    pending -= 1;
                    progressed = true;
                    match StunMessage::parse(&buf[..len]) {
                        Ok(m) if m.is_successful_binding_response() => answered += 1,
                        _ => errors += 1,
                    }
                }
            }
            if !progressed {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        silent += pending as u64;
        done += k;
    }
    json!({
        "sources": done,
        "answered": answered,
        "error_or_other": errors,
        "silent": silent,
        "bind_failed": bind_failed,
        "secs": start.elapsed().as_secs_f64(),
    })
}

// ------------------------------------------------------------------ churn

enum Due {
    /// DELETE and stop driving.
    Leave(Peer),
    /// Stop driving without telling the server.
    Vanish(Peer),
}

fn churn(a: &Args) {
    let url = a.get("url").unwrap_or("http://127.0.0.1:7070").to_string();
    let seconds = a.num("seconds", 60.0).clamp(1.0, 24.0 * 3600.0);
    let rate = a.num("rate", 3.0).clamp(0.1, 200.0);
    let hold = Duration::from_secs_f64(a.num("hold", 3.0).clamp(0.1, 600.0));
    let rooms = a.num("rooms", 4.0).clamp(1.0, 1000.0) as usize;
    let token = a.get("token").map(str::to_string);
    let agent = agent();
    let driver = Driver::spawn("churn", Box::new(NoObserver), None)
        .unwrap_or_else(|e| die(&format!("driver: {e}")));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut due: Vec<(Instant, Due)> = Vec::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut bump = |k: String| *counts.entry(k).or_default() += 1;
    let mut next = start;
    let mut i: u64 = 0;
    let max_actions = (seconds * rate).ceil() as u64 + 1;
    while i < max_actions {
        let now = Instant::now();
        // Leaves and vanishes that are due.
        let (ready, later): (Vec<_>, Vec<_>) = due.drain(..).partition(|(t, _)| *t <= now);
        due = later;
        for (_, d) in ready {
            match d {
                Due::Leave(p) => {
                    let st = delete(&agent, &url, &p);
                    driver.send(Command::Remove(p.key));
                    bump(format!("leave_{st}"));
                }
                Due::Vanish(p) => {
                    driver.send(Command::Remove(p.key));
                    bump("vanished".into());
                }
            }
        }
        if now >= end {
            break;
        }
        if now < next {
            let wait = (next - now).min(
                due.iter()
                    .map(|(t, _)| t.saturating_duration_since(now))
                    .min()
                    .unwrap_or(next - now),
            );
            std::thread::sleep(wait.max(Duration::from_millis(1)));
            continue;
        }
        next += period;
        let room = format!("soak-{}", i as usize % rooms);
        let kind = i % 3;
        i += 1;
        let mut cfg = ParticipantConfig::new(format!("c{i}"));
        cfg.publish_audio = false;
        cfg.audio_slots = 0;
        cfg.video_slots = 2;
        let drive = (kind != 2).then_some((&driver, i));
        match join(&agent, &url, &room, cfg, token.as_deref(), drive) {
            Ok(p) => match kind {
                0 => {
                    bump("join_leaver".into());
                    due.push((Instant::now() + hold, Due::Leave(p)));
                }
                1 => {
                    bump("join_vanisher".into());
                    due.push((Instant::now() + hold, Due::Vanish(p)));
                }
                // The offer's socket and str0m instance are dropped here:
                // nothing will ever answer the server's ICE.
                _ => bump("join_no_ice".into()),
            },
            Err(e) => {
                let status = e.split_whitespace().next().unwrap_or("?").to_string();
                bump(format!("join_failed_{status}"));
            }
        }
    }
    // Bounded teardown: everything still pending leaves or vanishes now.
    for (_, d) in due.drain(..) {
        match d {
            Due::Leave(p) => {
                let st = delete(&agent, &url, &p);
                driver.send(Command::Remove(p.key));
                bump(format!("leave_{st}"));
            }
            Due::Vanish(p) => {
                driver.send(Command::Remove(p.key));
                bump("vanished".into());
            }
        }
    }
    out(json!({"secs": start.elapsed().as_secs_f64(), "counts": counts}));
}
