//! The load client's reach options (issue 50, item 4), end to end over
//! real UDP on loopback with real DTLS/SRTP against a real `corelay`:
//! a network change mid-run (`--network-change-at`), after which every
//! moved participant must receive again; and participants relayed through
//! a real coturn (`--turn`), which must receive media and be heard by the
//! server from coturn's relayed address. Nothing here asserts a speed.
//!
//! coturn is Debian's `turnserver` (scripts/test installs it); without it
//! the TURN test fails, unless `SKIP_TURN=1` (then it prints SKIPPED);
//! `$TURNSERVER` names another binary.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{out_dir, run_bench};
use corelay_testkit::{Server, corelay_bin, say};

fn report(out: &Path) -> String {
    std::fs::read_to_string(out.join("report.txt")).expect("report.txt")
}

/// Two rooms of 3; half of the participants move 4 s in, and each must
/// receive media again at its new address (within the run), the summary
/// saying when.
#[test]
fn every_moved_participant_receives_again_after_a_network_change() {
    let server = Server::start(corelay_bin(), 1, &[]);
    let dir = out_dir("move");
    let s = run_bench(
        &server,
        &dir,
        &[
            "--synthetic",
            "--network-change-at",
            "4s",
            "--network-change-share",
            "0.5",
            "rooms",
            "--max-rooms",
            "2",
            "--room-size",
            "3",
            "--join-spread",
            "1s",
            "--duration",
            "5s",
        ],
    );
    assert_eq!(s["participants"]["joined"], 6, "{}", s["participants"]);
    let n = &s["reach"]["network_change"];
    assert_eq!(n["moved"], 3, "{n}");
    assert_eq!(n["recovered"], 3, "{n}");
    assert_eq!(n["not_recovered"], 0, "{n}");
    for f in ["p50", "p99", "max"] {
        let v = n["recovery_ms"][f].as_f64();
        assert!(v.is_some_and(|v| v > 0.0), "recovery_ms.{f}: {n}");
    }
    let per = n["per_participant"].as_array().unwrap();
    assert_eq!(per.len(), 3);
    for p in per {
        assert_eq!(p["moved"], true, "{p}");
        // The new address: another loopback IP.
        assert!(
            p["moved_to"].as_str().unwrap().starts_with("127.0.0.2:"),
            "{p}"
        );
        assert!(p["recovery_ms"].as_f64().is_some(), "{p}");
        // The check it sent from there at once was answered by the server
        // (without it the move waits for str0m's next scheduled check).
        assert!(p["check_answered_ms"].as_f64().is_some(), "{p}");
    }
    // Direct pairs only: no TURN server.
    assert_eq!(s["reach"]["relayed"]["participants"], 0);
    assert!(
        s["reach"]["direct"]["e2e_latency_us"]["count"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(s["received"]["corrupt"], 0);
    let r = report(&dir);
    assert!(r.contains("network change at 4"), "{r}");
    say(&format!("recovery after the move: {}", n["recovery_ms"]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// coturn on free loopback ports.
struct Coturn {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Coturn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// coturn's binary: `$TURNSERVER` when set (the only candidate then), else
/// where Debian puts it.
fn turnserver() -> Option<PathBuf> {
    match std::env::var_os("TURNSERVER") {
        Some(p) => Some(PathBuf::from(p)),
        None => Some(PathBuf::from("/usr/bin/turnserver")),
    }
    .filter(|p| p.is_file())
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A free run of `n` UDP ports (coturn's relay range; probe then release).
fn free_udp_range(n: u16) -> u16 {
    for _ in 0..200 {
        let base = fastrand_port();
        if (0..n).all(|i| UdpSocket::bind(("127.0.0.1", base + i)).is_ok()) {
            return base;
        }
    }
    panic!("no free UDP port range");
}

fn fastrand_port() -> u16 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    20_000 + u16::try_from((t ^ std::process::id()) % 30_000).unwrap()
}

fn start_coturn(bin: &Path, secret: &str, dir: &Path) -> Coturn {
    std::fs::create_dir_all(dir).unwrap();
    let port = free_udp_port();
    let relay = free_udp_range(40);
    let log = dir.join("coturn.log");
    let logf = std::fs::File::create(&log).unwrap();
    let child = Command::new(bin)
        .args([
            "-n",
            "--no-cli",
            "--no-tls",
            "--no-dtls",
            "--no-tcp-relay",
            "--listening-ip",
            "127.0.0.1",
            "--relay-ip",
            "127.0.0.1",
            "--listening-port",
            &port.to_string(),
            "--min-port",
            &relay.to_string(),
            "--max-port",
            &(relay + 39).to_string(),
            "--use-auth-secret",
            "--static-auth-secret",
            secret,
            "--realm",
            "corelay",
            "--allow-loopback-peers",
            // Allocations of 4 s, so that a run of a few seconds refreshes
            // them (the client refreshes half way through a short one).
            // (`=`: coturn takes this option's value only so.)
            "--max-allocate-lifetime=4",
            "--log-file",
            "stdout",
            "--simple-log",
        ])
        .stdin(Stdio::null())
        .stdout(logf.try_clone().unwrap())
        .stderr(logf)
        .spawn()
        .expect("start turnserver");
    let c = Coturn { child, port, log };
    // Up once it answers a binding request on its port.
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    probe
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut req = vec![0u8, 1, 0, 0, 0x21, 0x12, 0xA4, 0x42];
    req.extend_from_slice(&[7u8; 12]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 512];
    loop {
        let _ = probe.send_to(&req, ("127.0.0.1", c.port));
        if probe.recv_from(&mut buf).is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "coturn did not answer on port {}: {}",
            c.port,
            std::fs::read_to_string(&c.log).unwrap_or_default()
        );
    }
    c
}

/// Two rooms of 3 with half the participants relayed through coturn: every
/// relayed one joins, receives media, and the server's ICE agent answered
/// its checks as coming from coturn's relayed address; the summary has the
/// latency of relayed and of direct pairs.
#[test]
fn relayed_participants_reach_the_server_through_coturn() {
    let Some(bin) = turnserver() else {
        if std::env::var_os("SKIP_TURN").is_some() {
            say(
                "SKIPPED: relayed_participants_reach_the_server_through_coturn: no turnserver (SKIP_TURN=1)",
            );
            return;
        }
        panic!(
            "turnserver (Debian's coturn) is missing: install it (scripts/test does) or set SKIP_TURN=1"
        );
    };
    const SECRET: &str = "corelay-bench-turn-secret";
    let dir = out_dir("turn");
    let coturn = start_coturn(&bin, SECRET, &dir.join("coturn"));
    let secret_file = dir.join("coturn/secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let server = Server::start(corelay_bin(), 1, &[]);
    let turn = format!("turn:127.0.0.1:{}?transport=udp", coturn.port);
    let s = run_bench(
        &server,
        &dir.join("run"),
        &[
            "--synthetic",
            "--turn",
            &turn,
            "--turn-secret-file",
            secret_file.to_str().unwrap(),
            "--relayed-share",
            "0.5",
            "rooms",
            "--max-rooms",
            "2",
            "--room-size",
            "3",
            "--join-spread",
            "1s",
            "--duration",
            "5s",
        ],
    );
    let coturn_log = || std::fs::read_to_string(&coturn.log).unwrap_or_default();
    assert_eq!(
        s["participants"]["joined"],
        6,
        "{} {}\ncoturn: {}",
        s["participants"],
        s["failures"],
        coturn_log()
    );
    let r = &s["reach"]["relayed"];
    assert_eq!(r["participants"], 3, "{r}");
    assert_eq!(r["failed_joins"], 0, "{r}");
    assert_eq!(r["seen_from_relay"], 3, "{r}\ncoturn: {}", coturn_log());
    for p in r["per_participant"].as_array().unwrap() {
        let relayed = p["relayed_address"].as_str().unwrap();
        // coturn's relayed address: its relay IP, a port of its range.
        assert!(relayed.starts_with("127.0.0.1:"), "{p}");
        assert_eq!(p["server_saw"].as_str(), Some(relayed), "{p}");
        assert!(p["frames_received"].as_u64().unwrap() > 30, "{p}");
        assert!(p["turn_refreshes"].as_u64().unwrap() >= 1, "{p}");
        assert_eq!(p["turn_errors"], 0, "{p}");
    }
    for key in ["relayed", "direct"] {
        let l = &s["reach"][key]["e2e_latency_us"];
        assert!(l["count"].as_u64().unwrap() > 0, "{key}: {l}");
        assert!(l["p50"].as_u64().unwrap() > 0, "{key}: {l}");
    }
    assert_eq!(s["reach"]["direct"]["participants"], 3);
    assert_eq!(s["received"]["corrupt"], 0);
    assert_eq!(
        s["pairs"]["ok"], s["pairs"]["expected"],
        "missing pairs: {}",
        s["pairs"]["missing"]
    );
    let rep = report(&dir.join("run"));
    assert!(rep.contains("relayed  pairs"), "{rep}");
    say(&format!(
        "relayed e2e {} / direct e2e {}",
        s["reach"]["relayed"]["e2e_latency_us"], s["reach"]["direct"]["e2e_latency_us"]
    ));
    drop(coturn);
    let _ = std::fs::remove_dir_all(&dir);
}
