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
//! attacker channels --url URL --room ROOM [--name N] [--other N2] [--token T ...]
//!         [--count 200] [--label-bytes 60000] [--server-pid PID]
//!     join as a bare str0m client (UDP), wait for its "events" channel and welcome,
//!     then open COUNT data channels with LABEL-BYTES labels on its association;
//!     drive until each is answered (opened or reset), read the server's VmRSS
//!     before and after (with --server-pid), then join N2 (the second token) and
//!     wait for a roster naming it on the events channel. One JSON line.
//! attacker bigmsg --url URL --room ROOM [--name N] [--token T] [--count 10] [--bytes 200000]
//!     join as a bare str0m client (UDP; its SCTP send buffer raised to 1 MiB:
//!     str0m's default of 128 KiB takes no message over it), wait for its "events"
//!     channel, send COUNT valid messages of BYTES bytes (a JSON string) on it,
//!     drive until they have left (60 s at most), leave. One JSON line.
//! attacker icetcp --url URL --room ROOM [--name N] [--token T] [--from IP] [--hold SECS]
//!     join over ICE-TCP only (a TCP host candidate from IP, default 127.0.0.1, to
//!     the passive TCP candidate of the answer), wait until connected (20 s at
//!     most), stay HOLD (3) seconds, leave. One JSON line.
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
use std::io::{BufRead, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelay_client::signal::{encode_component, resolve};
use corelay_client::{
    Command, Driver, NoObserver, Participant, ParticipantConfig, Snapshot, VideoSource,
};
use serde_json::{Value, json};
use str0m::change::SdpAnswer;
use str0m::channel::{ChannelConfig, ChannelId};
use str0m::ice::{StunMessage, TransId};
use str0m::media::{Direction, MediaKind};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc};

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
        Some("channels") => channels(&Args::parse(rest, &[])),
        Some("icetcp") => icetcp(&Args::parse(rest, &[])),
        Some("bigmsg") => big_messages(&Args::parse(rest, &[])),
        _ => die(
            "usage: attacker offer|serve|churn|channels|bigmsg|icetcp [flags] (see the file's header)",
        ),
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

// ------------------------------------------------------------------ bare str0m clients

/// How a bare client reaches the server: a UDP socket, or one ICE-TCP
/// connection (RFC 4571 frames: a 16-bit length before each packet).
enum Wire {
    Udp(UdpSocket),
    Tcp {
        stream: TcpStream,
        remote: SocketAddr,
        inbox: Vec<u8>,
    },
}

/// A participant that is a bare str0m `Rtc`, driven by this thread: it can
/// do what corelay-client never would (open many channels with long labels,
/// join over ICE-TCP).
struct Raw {
    rtc: Rtc,
    wire: Wire,
    local: SocketAddr,
    location: String,
    token: Option<String>,
    connected: bool,
    /// Why it stopped (the server closed, ICE gave up, an error).
    lost: Option<String>,
    /// Channels the server confirmed, with their labels.
    opened: Vec<(ChannelId, String)>,
    /// Channels that closed (the server reset them).
    closed: usize,
    /// Text received on any channel (each message cut to 4 KiB).
    data: Vec<String>,
}

/// The first host candidate of `proto` ("udp" or "tcp") in an SDP answer.
fn answer_candidate_of(sdp: &str, proto: &str) -> Option<SocketAddr> {
    sdp.lines().find_map(|l| {
        let f: Vec<&str> = l
            .trim()
            .strip_prefix("a=candidate:")?
            .split_whitespace()
            .collect();
        if f.len() < 6 || !f[2].eq_ignore_ascii_case(proto) {
            return None;
        }
        Some(SocketAddr::new(f[4].parse().ok()?, f[5].parse().ok()?))
    })
}

/// POSTs `offer` to ROOM as NAME; (Location, answer) or "status body".
fn post_sdp(
    agent: &ureq::Agent,
    url: &str,
    room: &str,
    name: &str,
    token: Option<&str>,
    offer: &str,
) -> Result<(String, String), String> {
    let target = format!(
        "{}/api/v1/rooms/{}/participants?name={}",
        url.trim_end_matches('/'),
        encode_component(room),
        encode_component(name)
    );
    let mut req = agent
        .post(&target)
        .header("Content-Type", "application/sdp");
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req.send(offer).map_err(|e| format!("POST {target}: {e}"))?;
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = resp
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .unwrap_or_default();
    if status != 201 {
        return Err(format!("{status} {body}"));
    }
    Ok((location, body))
}

impl Raw {
    /// Joins ROOM with one sendonly audio m-line, one recvonly video m-line
    /// and the "events" channel; over ICE-TCP from `tcp_from` when given.
    fn join(
        agent: &ureq::Agent,
        url: &str,
        room: &str,
        name: &str,
        token: Option<&str>,
        tcp_from: Option<IpAddr>,
    ) -> Result<Raw, String> {
        use socket2::{Domain, Socket, Type};
        let (udp, tcp, local) = match tcp_from {
            None => {
                let u = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
                let local = u.local_addr().map_err(|e| e.to_string())?;
                (Some(u), None, local)
            }
            Some(ip) => {
                // Bound before the offer, so that its candidate is the
                // address the connection will come from.
                let s = Socket::new(Domain::IPV4, Type::STREAM, None)
                    .map_err(|e| format!("socket: {e}"))?;
                s.bind(&SocketAddr::new(ip, 0).into())
                    .map_err(|e| format!("bind {ip}: {e}"))?;
                let local = s
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_socket())
                    .ok_or("no local address")?;
                (None, Some(s), local)
            }
        };
        let mut rtc = Rtc::builder()
            .clear_codecs()
            .enable_opus(true, false)
            .enable_h264(true)
            // Room for messages up to the server's max-message-size (256 KiB).
            .set_sctp_max_buffered_amount(1 << 20)
            .build(Instant::now());
        let proto = if tcp.is_some() { "tcp" } else { "udp" };
        let cand = Candidate::host(local, proto).map_err(|e| format!("candidate: {e}"))?;
        rtc.add_local_candidate(cand);
        let mut api = rtc.sdp_api();
        api.add_media(MediaKind::Audio, Direction::SendOnly, None, None, None);
        api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
        api.add_channel("events".into());
        let (offer, pending) = api.apply().ok_or("no offer")?;
        let (location, body) = post_sdp(agent, url, room, name, token, &offer.to_sdp_string())?;
        let answer = SdpAnswer::from_sdp_string(&body).map_err(|e| format!("answer: {e}"))?;
        rtc.sdp_api()
            .accept_answer(pending, answer)
            .map_err(|e| format!("answer: {e}"))?;
        let wire = match (udp, tcp) {
            (Some(u), _) => Wire::Udp(u),
            (None, Some(s)) => {
                let remote = answer_candidate_of(&body, "tcp").ok_or("no TCP candidate")?;
                s.connect_timeout(&remote.into(), Duration::from_secs(5))
                    .map_err(|e| format!("connect {remote}: {e}"))?;
                Wire::Tcp {
                    stream: s.into(),
                    remote,
                    inbox: Vec::new(),
                }
            }
            (None, None) => return Err("no socket".into()),
        };
        Ok(Raw {
            rtc,
            wire,
            local,
            location,
            token: token.map(str::to_string),
            connected: false,
            lost: None,
            opened: Vec::new(),
            closed: 0,
            data: Vec::new(),
        })
    }

    fn on_event(&mut self, e: Event) {
        match e {
            Event::Connected => self.connected = true,
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                self.lost = Some("ICE disconnected".into())
            }
            Event::ChannelOpen(id, label) => self.opened.push((id, label)),
            Event::ChannelClose(_) => self.closed += 1,
            Event::ChannelData(d) if self.data.len() < 10_000 => {
                let n = d.data.len().min(4096);
                self.data
                    .push(String::from_utf8_lossy(&d.data[..n]).into_owned());
            }
            _ => {}
        }
    }

    /// Sends what str0m has to send; the time it wants to be woken at.
    fn transmit(&mut self) -> Instant {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => return t,
                Ok(Output::Transmit(t)) => match &mut self.wire {
                    Wire::Udp(u) => {
                        let _ = u.send_to(&t.contents, t.destination);
                    }
                    Wire::Tcp { stream, .. } => {
                        let Ok(len) = u16::try_from(t.contents.len()) else {
                            continue;
                        };
                        if t.proto != Protocol::Tcp {
                            continue;
                        }
                        let mut frame = len.to_be_bytes().to_vec();
                        frame.extend_from_slice(&t.contents);
                        if let Err(e) = stream.write_all(&frame) {
                            self.lost = Some(format!("write: {e}"));
                            return Instant::now();
                        }
                    }
                },
                Ok(Output::Event(e)) => self.on_event(e),
                Err(e) => {
                    self.lost = Some(format!("str0m: {e}"));
                    return Instant::now();
                }
            }
        }
    }

    /// Drives the client until `done`, a loss, or `within`; whether `done`
    /// came true.
    fn run_until(&mut self, within: Duration, mut done: impl FnMut(&Raw) -> bool) -> bool {
        let end = Instant::now() + within;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if done(self) {
                return true;
            }
            if Instant::now() > end || self.lost.is_some() {
                return false;
            }
            let wake = self.transmit();
            if self.lost.is_some() {
                return false;
            }
            let wait = wake
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), Duration::from_millis(20));
            let now = Instant::now();
            let local = self.local;
            let mut inputs: Vec<(Protocol, SocketAddr, Vec<u8>)> = Vec::new();
            match &mut self.wire {
                Wire::Udp(u) => {
                    let _ = u.set_read_timeout(Some(wait));
                    if let Ok((n, source)) = u.recv_from(&mut buf) {
                        inputs.push((Protocol::Udp, source, buf[..n].to_vec()));
                    }
                }
                Wire::Tcp {
                    stream,
                    remote,
                    inbox,
                } => {
                    let _ = stream.set_read_timeout(Some(wait));
                    match stream.read(&mut buf) {
                        Ok(0) => self.lost = Some("the server closed the connection".into()),
                        Ok(n) => inbox.extend_from_slice(&buf[..n]),
                        Err(e)
                            if matches!(
                                e.kind(),
                                ErrorKind::WouldBlock
                                    | ErrorKind::TimedOut
                                    | ErrorKind::Interrupted
                            ) => {}
                        Err(e) => self.lost = Some(format!("read: {e}")),
                    }
                    while inbox.len() >= 2 {
                        let len = usize::from(u16::from_be_bytes([inbox[0], inbox[1]]));
                        if inbox.len() < 2 + len {
                            break;
                        }
                        inputs.push((Protocol::Tcp, *remote, inbox[2..2 + len].to_vec()));
                        inbox.drain(..2 + len);
                    }
                }
            }
            for (proto, source, bytes) in inputs {
                if let Ok(r) = Receive::new(proto, source, local, &bytes)
                    && let Err(e) = self.rtc.handle_input(Input::Receive(now, r))
                {
                    self.lost = Some(format!("str0m: {e}"));
                }
            }
            if let Err(e) = self.rtc.handle_input(Input::Timeout(Instant::now())) {
                self.lost = Some(format!("str0m: {e}"));
            }
        }
    }

    /// DELETE its Location; the status (0: no answer).
    fn leave(&self, agent: &ureq::Agent, url: &str) -> u16 {
        if self.location.is_empty() {
            return 0;
        }
        let mut req = agent.delete(&resolve(url, &self.location));
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        req.call().map(|r| r.status().as_u16()).unwrap_or(0)
    }
}

/// The resident set of process `pid` in KiB (`VmRSS` of /proc/PID/status).
fn vm_rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn channels(a: &Args) {
    let url = a.get("url").unwrap_or("http://127.0.0.1:7070").to_string();
    let room = a.get("room").unwrap_or("abuse-channels").to_string();
    let name = a.get("name").unwrap_or("channels").to_string();
    let other = a.get("other").unwrap_or("other").to_string();
    let tokens = a.all("token");
    let count = a.num("count", 200.0).clamp(1.0, 2000.0) as usize;
    let label_bytes = a.num("label-bytes", 60_000.0).clamp(1.0, 65_535.0) as usize;
    let pid = a.get("server-pid").and_then(|p| p.parse::<u32>().ok());
    let agent = agent();
    let mut c = match Raw::join(
        &agent,
        &url,
        &room,
        &name,
        tokens.first().map(String::as_str),
        None,
    ) {
        Ok(c) => c,
        Err(e) => {
            out(json!({"error": format!("join {name}: {e}")}));
            std::process::exit(1);
        }
    };
    let welcomed = c.run_until(Duration::from_secs(20), |c| {
        c.opened.iter().any(|(_, l)| l == "events") && c.data.iter().any(|d| d.contains("welcome"))
    });
    if !welcomed {
        c.leave(&agent, &url);
        out(json!({"error": "the events channel did not open", "lost": c.lost}));
        std::process::exit(1);
    }
    // A settled baseline: a few seconds of the idle call.
    c.run_until(Duration::from_secs(2), |_| false);
    let rss_before = pid.and_then(vm_rss_kib);
    let start = Instant::now();
    let label = "x".repeat(label_bytes);
    for _ in 0..count {
        c.rtc.direct_api().create_data_channel(ChannelConfig {
            label: label.clone(),
            ..Default::default()
        });
    }
    // Every channel answered, one way or the other: reset (closed) or opened.
    let answered = c.run_until(Duration::from_secs(90), |c| {
        c.closed + c.opened.len() > count
    });
    let answered_secs = start.elapsed().as_secs_f64();
    c.run_until(Duration::from_secs(2), |_| false);
    let rss_after = pid.and_then(vm_rss_kib);
    // The participant's own channel still works: a second member's arrival
    // reaches it as a roster event.
    let seen = c.data.len();
    let other_token = tokens.get(1).or(tokens.last()).map(String::as_str);
    let mut cfg = ParticipantConfig::new(other.clone());
    cfg.publish_audio = false;
    cfg.audio_slots = 0;
    let driver = Driver::spawn("channels", Box::new(NoObserver), None)
        .unwrap_or_else(|e| die(&format!("driver: {e}")));
    let joined = join(&agent, &url, &room, cfg, other_token, Some((&driver, 1)));
    let roster = joined.is_ok()
        && c.run_until(Duration::from_secs(20), |c| {
            c.data[seen..]
                .iter()
                .any(|d| d.contains("roster") && d.contains(&other))
        });
    if let Ok(p) = &joined {
        delete(&agent, &url, p);
        driver.send(Command::Remove(p.key));
    }
    let left = c.leave(&agent, &url);
    out(json!({
        "count": count,
        "label_bytes": label_bytes,
        "answered": answered,
        "answered_secs": answered_secs,
        "closed": c.closed,
        "opened": c.opened.iter().map(|(_, l)| if l.len() > 32 { "<long label>" } else { l.as_str() }).collect::<Vec<_>>(),
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "roster_after": roster,
        "other_join": joined.as_ref().map(|_| "201".to_string()).unwrap_or_else(|e| e.clone()),
        "lost": c.lost,
        "left": left,
    }));
}

fn big_messages(a: &Args) {
    let url = a.get("url").unwrap_or("http://127.0.0.1:7070").to_string();
    let room = a.get("room").unwrap_or("abuse-bigmsg").to_string();
    let name = a.get("name").unwrap_or("bigmsg").to_string();
    let count = a.num("count", 10.0).clamp(1.0, 100.0) as usize;
    let bytes = a.num("bytes", 200_000.0).clamp(2.0, 250_000.0) as usize;
    let agent = agent();
    let mut c = match Raw::join(&agent, &url, &room, &name, a.get("token"), None) {
        Ok(c) => c,
        Err(e) => {
            out(json!({"error": format!("join {name}: {e}")}));
            std::process::exit(1);
        }
    };
    let welcomed = c.run_until(Duration::from_secs(20), |c| {
        c.opened.iter().any(|(_, l)| l == "events") && c.data.iter().any(|d| d.contains("welcome"))
    });
    let Some(id) = c
        .opened
        .iter()
        .find(|(_, l)| l == "events")
        .map(|(id, _)| *id)
        .filter(|_| welcomed)
    else {
        c.leave(&agent, &url);
        out(json!({"error": "the events channel did not open", "lost": c.lost}));
        std::process::exit(1);
    };
    let msg = format!("\"{}\"", "x".repeat(bytes - 2));
    let start = Instant::now();
    let (mut sent, mut error) = (0usize, None::<String>);
    while sent < count && error.is_none() && start.elapsed() < Duration::from_secs(60) {
        match c
            .rtc
            .channel(id)
            .map(|mut ch| ch.write(false, msg.as_bytes()))
        {
            Some(Ok(true)) => sent += 1,
            Some(Ok(false)) => {}
            Some(Err(e)) => error = Some(format!("write: {e}")),
            None => error = Some("the channel is gone".into()),
        }
        if c.lost.is_some() {
            break;
        }
        c.run_until(Duration::from_millis(20), |_| false);
    }
    // Until they have left the send buffer (the server acknowledged them).
    let mut drained = false;
    while c.lost.is_none() && start.elapsed() < Duration::from_secs(60) {
        if c.rtc.channel(id).map(|mut ch| ch.buffered_amount()) == Some(0) {
            drained = true;
            break;
        }
        c.run_until(Duration::from_millis(50), |_| false);
    }
    let secs = start.elapsed().as_secs_f64();
    // A moment for the server's counters, then leave.
    c.run_until(Duration::from_secs(1), |_| false);
    let left = c.leave(&agent, &url);
    out(json!({
        "sent": sent,
        "bytes": bytes,
        "secs": secs,
        "drained": drained,
        "error": error,
        "lost": c.lost,
        "left": left,
    }));
}

fn icetcp(a: &Args) {
    let url = a.get("url").unwrap_or("http://127.0.0.1:7070").to_string();
    let room = a.get("room").unwrap_or("abuse-icetcp").to_string();
    let name = a.get("name").unwrap_or("icetcp").to_string();
    let token = a.get("token");
    let from: IpAddr = a
        .get("from")
        .unwrap_or("127.0.0.1")
        .parse()
        .unwrap_or_else(|_| die("--from: not an IP address"));
    let hold = Duration::from_secs_f64(a.num("hold", 3.0).clamp(0.0, 60.0));
    let agent = agent();
    let start = Instant::now();
    let mut c = match Raw::join(&agent, &url, &room, &name, token, Some(from)) {
        Ok(c) => c,
        Err(e) => {
            out(json!({"error": format!("join {name} over ICE-TCP: {e}")}));
            std::process::exit(1);
        }
    };
    let connected = c.run_until(Duration::from_secs(20), |c| c.connected);
    let connect_secs = start.elapsed().as_secs_f64();
    if connected {
        c.run_until(hold, |_| false);
    }
    let server = match &c.wire {
        Wire::Tcp { remote, .. } => remote.to_string(),
        Wire::Udp(_) => String::new(),
    };
    let left = c.leave(&agent, &url);
    out(json!({
        "connected": connected,
        "connect_secs": connect_secs,
        "held_secs": hold.as_secs_f64(),
        "lost": c.lost,
        "local": c.local.to_string(),
        "server": server,
        "left": left,
    }));
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
