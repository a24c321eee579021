//! Reach (issue 50, item 4): a share of the participants joins through a
//! TURN server (`--turn`, `--turn-secret-file`, `--relayed-share`), and a
//! share moves to a new local address mid-run (`--network-change-at`,
//! `--network-change-share`). summary.json's `reach` object then has the
//! e2e latency of relayed pairs against direct pairs, and per moved
//! participant the time from its move until it received media again.
//!
//! Who is relayed and who moves is fixed by the plan's tags (evenly
//! spread, like `--limited-share`). A relayed participant does not move:
//! its allocation belongs to the address it was made from.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use corelay_client::driver::{Command, Driver};
use corelay_client::turn::TurnServer;
use serde_json::{Value, json};

use crate::metrics::{Percentiles, new_hist};
use crate::run::{Joined, Outcome};

/// The reach options of a run (all off by default).
#[derive(Debug, Clone, Default)]
pub struct ReachOpts {
    /// The TURN server (UDP) and coturn's static auth secret.
    pub turn: Option<(SocketAddr, Vec<u8>)>,
    /// Share of participants joining through it.
    pub relayed_share: f64,
    /// When into the run the network change happens.
    pub change_at: Option<Duration>,
    /// Share of participants that move then.
    pub change_share: f64,
}

impl ReachOpts {
    /// Whether summary.json gets a `reach` object.
    pub fn reported(&self) -> bool {
        self.turn.is_some() || self.change_at.is_some()
    }

    /// Participant `tag` joins through the TURN server.
    pub fn relayed(&self, tag: u64) -> bool {
        self.turn.is_some() && crate::simulcast::is_limited(tag, self.relayed_share)
    }

    /// Participant `tag` moves at `change_at` (never a relayed one). The
    /// selection is shifted by one from the relayed one's, so that equal
    /// shares pick different participants.
    pub fn moves(&self, tag: u64) -> bool {
        self.change_at.is_some()
            && !self.relayed(tag)
            && crate::simulcast::is_limited(tag.saturating_add(1), self.change_share)
    }

    /// Participant `tag` needs a socket of its own (not the driver's
    /// shared one): a relay is allocated from it, or it moves to another.
    pub fn own_socket(&self, tag: u64) -> bool {
        self.relayed(tag) || self.moves(tag)
    }

    /// The TURN server and credentials for `identity` (coturn's REST
    /// scheme, valid for a day).
    pub fn turn_for(&self, identity: &str) -> Option<Result<TurnServer, String>> {
        let (addr, secret) = self.turn.as_ref()?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let ttl = Duration::from_secs(86_400);
        Some(
            corelay_client::turn::rest_credentials(secret, identity, now, ttl).map(
                |(username, password)| TurnServer {
                    addr: *addr,
                    username,
                    password,
                },
            ),
        )
    }
}

/// `--turn`: `turn:HOST:PORT` (UDP; `?transport=udp` accepted) or
/// `HOST:PORT`, resolved to an address.
pub fn parse_turn_url(url: &str) -> Result<SocketAddr, String> {
    let rest = url.strip_prefix("turn:").unwrap_or(url);
    let (hostport, query) = rest.split_once('?').unwrap_or((rest, ""));
    if !query.is_empty() && query != "transport=udp" {
        return Err(format!(
            "--turn {url}: only UDP (transport=udp) is supported"
        ));
    }
    let hostport = if hostport
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        hostport.to_string()
    } else {
        format!("{hostport}:3478")
    };
    use std::net::ToSocketAddrs;
    hostport
        .to_socket_addrs()
        .map_err(|e| format!("--turn {url}: {e}"))?
        .find(SocketAddr::is_ipv4)
        .ok_or_else(|| format!("--turn {url}: no IPv4 address"))
}

/// The address a moved participant gets: another loopback address
/// (127.0.0.2 for 127.0.0.1) where the old one is loopback, else the same
/// IP; always a new port.
pub fn new_ip(old: IpAddr) -> IpAddr {
    match old {
        IpAddr::V4(v4) if v4.is_loopback() => {
            let [a, b, c, d] = v4.octets();
            IpAddr::V4(Ipv4Addr::new(a, b, c, if d == 254 { 2 } else { d + 1 }))
        }
        other => other,
    }
}

/// Move every participant the options pick to a new socket at
/// [`new_ip`]: each driver rebinds it and sends a nominating check from
/// there at once. Returns how many moved, and the failures.
pub fn move_participants<'a>(
    opts: &ReachOpts,
    joined: impl Iterator<Item = &'a Joined>,
    drivers: &[Arc<Driver>],
    bind_ip: IpAddr,
) -> (usize, Vec<String>) {
    let to = new_ip(bind_ip);
    let mut waits = Vec::new();
    let mut errors = Vec::new();
    for j in joined.filter(|j| opts.moves(j.tag)) {
        let sock = match std::net::UdpSocket::bind(SocketAddr::new(to, 0)) {
            Ok(s) => s,
            Err(e) => {
                errors.push(format!("{}: bind {to}: {e}", j.name));
                continue;
            }
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        match drivers.get(j.driver) {
            Some(d) if d.send(Command::Rebind(j.tag, sock, tx)) => waits.push((j.name.clone(), rx)),
            _ => errors.push(format!("{}: its driver is gone", j.name)),
        }
    }
    let mut moved = 0;
    for (name, rx) in waits {
        match rx.recv_timeout(Duration::from_secs(2)) {
            Ok(true) => moved += 1,
            _ => errors.push(format!("{name}: could not be moved")),
        }
    }
    (moved, errors)
}

/// Relayed or direct, for splitting video latency by pair: a pair is
/// relayed when its publisher or its subscriber goes through the TURN
/// server. Publishers are known by name (the one in their payloads).
pub struct ReachMap {
    relayed_by_name: HashMap<String, bool>,
    opts: ReachOpts,
}

impl ReachMap {
    /// For these (tag, name) pairs of the plan.
    pub fn new<'a>(opts: &ReachOpts, members: impl IntoIterator<Item = (u64, &'a str)>) -> Self {
        ReachMap {
            relayed_by_name: members
                .into_iter()
                .map(|(t, n)| (n.to_string(), opts.relayed(t)))
                .collect(),
            opts: opts.clone(),
        }
    }

    /// Whether the pair (subscriber `tag`, publisher named `source`) is relayed.
    pub fn pair_relayed(&self, tag: u64, source: &str) -> bool {
        self.opts.relayed(tag) || self.relayed_by_name.get(source).copied().unwrap_or(false)
    }
}

fn pct(p: &Percentiles) -> Value {
    json!({"count": p.count, "p50": p.p50, "p90": p.p90, "p99": p.p99, "max": p.max})
}

/// The `reach` object of summary.json (null when the run had no reach options).
pub fn summary(o: &Outcome) -> Value {
    let opts = &o.reach;
    if !opts.reported() {
        return Value::Null;
    }
    let (from, to) = o.window;
    let w = o.series.window(from, to);
    let hist = |h: &Option<hdrhistogram::Histogram<u64>>| match h {
        Some(h) => Percentiles::of(h),
        None => Percentiles::of(&new_hist()),
    };
    let mut relayed = Vec::new();
    let mut direct = 0usize;
    for (j, s) in &o.joined {
        if !opts.relayed(j.tag) {
            direct += 1;
            continue;
        }
        let frames: u64 = s.slots.values().map(|x| x.frames).sum();
        relayed.push(json!({
            "name": j.name,
            "relayed_address": s.reach.relayed.map(|a| a.to_string()),
            "server_saw": s.reach.server_saw.map(|a| a.to_string()),
            "seen_from_relay": s.reach.relayed.is_some() && s.reach.relayed == s.reach.server_saw,
            "frames_received": frames,
            "turn_refreshes": s.reach.turn_refreshes,
            "turn_errors": s.reach.turn_errors,
        }));
    }
    let relayed_failed = o
        .failures
        .iter()
        .filter(|(tag, _, _)| opts.relayed(*tag))
        .count();
    let mut per = Vec::new();
    let mut rec = new_hist();
    let mut not_recovered = 0usize;
    for (j, s) in &o.joined {
        if !opts.moves(j.tag) {
            continue;
        }
        let r = &s.reach;
        let ms = match (r.moved_at_ns, r.recovered_at_ns) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e6),
            _ => None,
        };
        match ms {
            Some(ms) => crate::metrics::rec(&mut rec, (ms * 1000.0) as u64),
            None => not_recovered += 1,
        }
        per.push(json!({
            "name": j.name,
            "moved": r.moved_at_ns.is_some(),
            "moved_to": r.moved_to.map(|a| a.to_string()),
            "recovery_ms": ms,
            // The server answered the check sent from the new address at once.
            "check_answered_ms": match (r.moved_at_ns, r.check_answered_ns) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e6),
                _ => None,
            },
        }));
    }
    let moved = per.iter().filter(|p| p["moved"] == true).count();
    let r = Percentiles::of(&rec);
    let ms = |us: u64| us as f64 / 1000.0;
    let network_change = opts.change_at.map(|at| {
        json!({
            "at_s": at.as_secs_f64(),
            "share": opts.change_share,
            "moved": moved,
            "recovered": moved.saturating_sub(not_recovered),
            "not_recovered": not_recovered,
            "recovery_ms": if r.count > 0 {
                json!({"p50": ms(r.p50), "p99": ms(r.p99), "max": ms(r.max)})
            } else {
                Value::Null
            },
            "per_participant": per,
        })
    });
    json!({
        "relayed": {
            "turn": opts.turn.as_ref().map(|(a, _)| a.to_string()),
            "share": opts.relayed_share,
            "participants": relayed.len(),
            "failed_joins": relayed_failed,
            "seen_from_relay": relayed.iter().filter(|p| p["seen_from_relay"] == true).count(),
            "e2e_latency_us": pct(&hist(&w.video_lat_relayed)),
            "per_participant": relayed,
        },
        "direct": {
            "participants": direct,
            "e2e_latency_us": pct(&hist(&w.video_lat_direct)),
        },
        "network_change": network_change.unwrap_or(Value::Null),
    })
}

/// report.txt lines for the `reach` object.
pub fn table(s: &Value) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let ms = |v: &Value| {
        v.as_f64()
            .map_or("-".to_string(), |x| format!("{:.2} ms", x / 1000.0))
    };
    let _ = writeln!(t, "\nreach");
    for key in ["relayed", "direct"] {
        let l = &s[key]["e2e_latency_us"];
        let _ = writeln!(
            t,
            "  {key:<8} pairs: {} participants, e2e video P50 {} P99 {} max {} ({} frames)",
            s[key]["participants"],
            ms(&l["p50"]),
            ms(&l["p99"]),
            ms(&l["max"]),
            l["count"]
        );
    }
    if s["relayed"]["turn"].is_string() {
        let _ = writeln!(
            t,
            "  relayed through {}: {} seen by the server from the relayed address, {} joins failed",
            s["relayed"]["turn"].as_str().unwrap_or("?"),
            s["relayed"]["seen_from_relay"],
            s["relayed"]["failed_joins"]
        );
    }
    let n = &s["network_change"];
    if n.is_object() {
        let r = &n["recovery_ms"];
        let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1} ms"));
        let _ = writeln!(
            t,
            "  network change at {} s: {} moved, {} recovered; receiving again after P50 {} P99 {} max {}",
            n["at_s"],
            n["moved"],
            n["recovered"],
            f(&r["p50"]),
            f(&r["p99"]),
            f(&r["max"])
        );
        if let Some(per) = n["per_participant"].as_array() {
            for p in per.iter().filter(|p| p["recovery_ms"].is_null()) {
                let _ = writeln!(t, "    {} did not receive again", p["name"]);
            }
        }
    }
    t
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shares_pick_disjoint_evenly_spread_participants() {
        let o = ReachOpts {
            turn: Some(("127.0.0.1:3478".parse().unwrap(), b"s".to_vec())),
            relayed_share: 0.5,
            change_at: Some(Duration::from_secs(5)),
            change_share: 0.5,
        };
        let relayed: Vec<u64> = (0..8).filter(|&t| o.relayed(t)).collect();
        let moved: Vec<u64> = (0..8).filter(|&t| o.moves(t)).collect();
        assert_eq!(relayed.len(), 4);
        assert_eq!(moved.len(), 4);
        assert!(relayed.iter().all(|t| !moved.contains(t)));
        assert!(ReachOpts::default().own_socket(3).eq(&false));
        assert!(!ReachOpts::default().reported());
    }

    #[test]
    fn turn_urls_and_new_addresses() {
        assert_eq!(
            parse_turn_url("turn:127.0.0.1:3479?transport=udp").unwrap(),
            "127.0.0.1:3479".parse().unwrap()
        );
        assert_eq!(
            parse_turn_url("127.0.0.1").unwrap(),
            "127.0.0.1:3478".parse().unwrap()
        );
        assert!(parse_turn_url("turn:127.0.0.1:3478?transport=tcp").is_err());
        assert_eq!(
            new_ip("127.0.0.1".parse().unwrap()),
            "127.0.0.2".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            new_ip("10.0.0.1".parse().unwrap()),
            "10.0.0.1".parse::<IpAddr>().unwrap()
        );
    }
}
