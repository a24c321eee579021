//! What a remote party can make the server write to its log, and what the
//! drop counters say about valid data-channel traffic (issue 56, items 1
//! and 6).
//!
//! - STUN "attribute bombs" (a 60 KB datagram of 15,000 empty
//!   ALTERNATE-SERVER, MAPPED-ADDRESS or UNKNOWN-ATTRIBUTES attributes, each
//!   of which str0m's STUN parser warns about before the server knows who
//!   sent it) write at most a few lines, by UDP and by ICE-TCP, and the
//!   call on the shard goes on.
//! - An operator who asks for those warnings (`--log warn,is=warn`) gets a
//!   burst of them, then one line saying how many were suppressed.
//! - Valid data-channel messages of 200 KB are not counted as dropped by
//!   the stack; garbage datagrams from the participant's address are
//!   counted once each.
#![allow(
    clippy::disallowed_types,
    reason = "a test's copy of the server's stderr, shared with the thread that reads it"
)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

/// The STUN attributes str0m's parser warns about, one line each.
const MAPPED_ADDRESS: u16 = 0x0001;
const UNKNOWN_ATTRIBUTES: u16 = 0x000A;
const ALTERNATE_SERVER: u16 = 0x8023;

/// Empty attributes in one bomb: 60 KB, as in the issue.
const ATTRS: usize = 14_995;

/// A STUN binding request of `n` empty attributes of type `attr`.
fn stun_bomb(attr: u16, n: usize) -> Vec<u8> {
    let len = u16::try_from(4 * n).expect("fits a STUN length");
    let mut p = Vec::with_capacity(20 + 4 * n);
    p.extend_from_slice(&1u16.to_be_bytes());
    p.extend_from_slice(&len.to_be_bytes());
    p.extend_from_slice(&0x2112_A442u32.to_be_bytes());
    p.extend((0..12).map(|_| fastrand::u8(..)));
    for _ in 0..n {
        p.extend_from_slice(&attr.to_be_bytes());
        p.extend_from_slice(&0u16.to_be_bytes());
    }
    p
}

/// The counters a datagram the shard drops on arrival is counted in (one
/// of them, once).
const INGRESS_DROPS: [&str; 5] = [
    "dropped_malformed",
    "dropped_unknown_source",
    "dropped_by_stack",
    "dropped_addr_limit",
    "dropped_unknown_stream",
];

/// The sum of [`INGRESS_DROPS`] in the stats' total.
fn drops(stats: &serde_json::Value) -> u64 {
    INGRESS_DROPS.iter().map(|f| total(stats, f)).sum()
}

fn total(stats: &serde_json::Value, field: &str) -> u64 {
    stats["total"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("total.{field} is not a number"))
}

/// Sends the bombs to `port` on 127.0.0.1: 10 of each attribute by UDP,
/// and 10 ALTERNATE-SERVER bombs as RFC 4571 frames on one ICE-TCP
/// connection. Returns how many it sent.
fn bombard(port: u16) -> u64 {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let mut sent = 0;
    for attr in [ALTERNATE_SERVER, MAPPED_ADDRESS, UNKNOWN_ATTRIBUTES] {
        for _ in 0..10 {
            sock.send_to(&stun_bomb(attr, ATTRS), ("127.0.0.1", port))
                .expect("send");
            sent += 1;
        }
    }
    if let Ok(mut tcp) = TcpStream::connect(("127.0.0.1", port)) {
        for _ in 0..10 {
            let bomb = stun_bomb(ALTERNATE_SERVER, ATTRS);
            let len = u16::try_from(bomb.len()).expect("fits a frame");
            let mut frame = len.to_be_bytes().to_vec();
            frame.extend_from_slice(&bomb);
            if tcp.write_all(&frame).is_ok() {
                sent += 1;
            }
        }
    }
    sent
}

/// Waits until `log` has not grown for half a second (the reader thread
/// may still be taking lines the server wrote), at most `limit`.
fn settled(log: impl Fn() -> Vec<String>, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut last = log();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = log();
        if now.len() == last.len() || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// STUN attribute bombs from a stranger, by UDP and ICE-TCP, while a call
/// runs on the shard: the server reads every one (each is counted as
/// dropped) and writes at most a few lines for all of them at the
/// testkit's level (`warn`; it wrote 15,000 per bomb, as at the default
/// `info`), and the call goes on.
#[test]
fn stun_attribute_bombs_write_at_most_a_few_lines_and_the_call_goes_on() {
    let server = start_server(1, &[]);
    let (a, b) = two_in_a_call(&server, "bombs");
    let stats = server.get_json("/api/v1/stats");
    let (drops_before, lines_before) = (drops(&stats), server.log().len());
    let sent = bombard(server.udp_base);
    let stats = server.wait_stats(Duration::from_secs(30), |s| drops(s) >= drops_before + sent);
    assert!(
        drops(&stats) >= drops_before + sent,
        "the shard did not read the {sent} bombs: {stats}"
    );
    let log = settled(|| server.log(), Duration::from_secs(20));
    // DEBUG and TRACE (`CORELAY_TEST_LOG=debug`) are not rate-limited.
    let new: Vec<&String> = log
        .get(lines_before..)
        .unwrap_or_default()
        .iter()
        .filter(|l| !l.contains(" DEBUG ") && !l.contains(" TRACE "))
        .collect();
    let bytes: usize = new.iter().map(|l| l.len() + 1).sum();
    eprintln!("{sent} bombs: {} log lines, {bytes} bytes", new.len());
    assert!(
        new.len() <= 20,
        "{sent} bombs wrote {} lines ({bytes} bytes), e.g.:\n{}",
        new.len(),
        new.iter()
            .take(20)
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    both_keep_flowing(&server, &a, &b);
}

/// The server started with the `--log` given here (the testkit's always
/// names its own), its stderr kept.
struct Logged {
    child: Child,
    http: String,
    udp: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    fn start(log: &str) -> Logged {
        let http = format!("127.0.0.1:{}", corelay_testkit::free_tcp_port());
        let metrics = format!("127.0.0.1:{}", corelay_testkit::free_tcp_port());
        let udp = corelay_testkit::free_udp_ports(1);
        let mut child = Command::new(env!("CARGO_BIN_EXE_corelay"))
            .args(["--http", &http, "--metrics", &metrics])
            .args(["--public-ip", "127.0.0.1", "--bind-ip", "127.0.0.1"])
            .args(["--udp-port", &udp.to_string(), "--shards", "1", "--no-pin"])
            .args(["--log", log])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start corelay");
        let lines = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                }
            });
        }
        let s = Logged {
            child,
            http,
            udp,
            log: lines,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !s.healthy() {
            assert!(
                Instant::now() < deadline,
                "corelay did not come up:\n{}",
                s.log().join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    fn healthy(&self) -> bool {
        let Ok(mut c) = TcpStream::connect(&self.http) else {
            return false;
        };
        let req = format!(
            "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.http
        );
        let mut out = String::new();
        c.write_all(req.as_bytes()).is_ok()
            && std::io::Read::read_to_string(&mut c, &mut out).is_ok()
            && out.starts_with("HTTP/1.1 200")
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The number after `suppressed=` in a report line.
fn suppressed(line: &str) -> u64 {
    line.split("suppressed=")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// An operator who names str0m's STUN parser (`is=warn`) gets its
/// warnings again, but at most a burst of them a second from each place
/// (10; under 1 % of them here), then a line per place saying how many it
/// suppressed: each of the 10 x 14,995 ALTERNATE-SERVER warnings is either
/// written or counted in such a line, and the server stays healthy.
#[test]
fn warnings_an_operator_asked_for_are_rate_limited_and_the_rest_counted() {
    let server = Logged::start("warn,is=warn");
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    for _ in 0..10 {
        sock.send_to(
            &stun_bomb(ALTERNATE_SERVER, ATTRS),
            ("127.0.0.1", server.udp),
        )
        .expect("send");
    }
    let total = 10 * ATTRS as u64;
    let account = |log: &[String]| {
        let written = log
            .iter()
            .filter(|l| l.contains("STUN got AlternateServer"))
            .count() as u64;
        let counted: u64 = log
            .iter()
            .filter(|l| l.contains("log lines suppressed") && l.contains("stun.rs"))
            .map(|l| suppressed(l))
            .sum();
        (written, counted)
    };
    // The reports come every 5 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (written, counted) = loop {
        let (w, c) = account(&server.log());
        if w + c >= total || Instant::now() > deadline {
            break (w, c);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = server.log();
    eprintln!(
        "{written} written, {counted} suppressed, {} lines in all",
        log.len()
    );
    // 10 a second: the 10 bombs take well under a second to read, but a
    // loaded machine may spread them over a few windows.
    assert!(
        written <= total / 100,
        "{written} warnings written ({} lines in all)",
        log.len()
    );
    assert_eq!(
        written + counted,
        total,
        "reports:\n{}",
        log.iter()
            .filter(|l| l.contains("log lines suppressed"))
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let reports = log
        .iter()
        .filter(|l| l.contains("log lines suppressed"))
        .count() as u64;
    // Besides the warnings and the reports, the start's few lines.
    assert!(
        log.len() as u64 <= written + reports + 10,
        "{} lines in all",
        log.len()
    );
    assert!(server.healthy());
}

/// Data-channel messages sent, of 60 KB each (the most str0m sends without
/// a max-message-size from the other side is 64 KB).
const MESSAGES: u64 = 30;

/// [`MESSAGES`] valid 60 KB data-channel messages (each over the request
/// size limit, so each counted once in `dropped_requests`) leave
/// `dropped_by_stack` as it was: about half of their ~1,500 datagrams give
/// str0m nothing to answer at once (SCTP acknowledges every other packet),
/// which is not a refusal. Garbage datagrams from the participant's own
/// address (DTLS by their first byte, but not DTLS records the server
/// could take) are counted once each, in `dropped_by_stack`, and the call
/// goes on.
#[test]
fn valid_data_channel_messages_are_not_counted_as_dropped() {
    let server = start_server(1, &[]);
    let (a, b) = two_in_a_call(&server, "bigdc");
    let stats = server.get_json("/api/v1/stats");
    let by_stack = total(&stats, "dropped_by_stack");
    let requests = total(&stats, "dropped_requests");
    let all = drops(&stats);
    let big = format!("\"{}\"", "x".repeat(60_000));
    for _ in 0..MESSAGES {
        a.send_event(&big);
    }
    let stats = server.wait_stats(Duration::from_secs(30), |s| {
        total(s, "dropped_requests") >= requests + MESSAGES
    });
    assert_eq!(
        total(&stats, "dropped_requests"),
        requests + MESSAGES,
        "the {MESSAGES} messages did not arrive: {stats}"
    );
    assert_eq!(
        total(&stats, "dropped_by_stack"),
        by_stack,
        "valid data-channel traffic counted as dropped by the stack: {stats}"
    );
    assert_eq!(drops(&stats), all, "{stats}");

    // Garbage on the participant's 5-tuple, each counted once, in one
    // counter: DTLS by its first byte but no DTLS version, and a whole
    // record of application data in epoch 0 (never sent: it is encrypted).
    let mut garbage = vec![23u8, 0, 0];
    garbage.extend((0..97).map(|_| fastrand::u8(..)));
    a.send_raw(garbage);
    a.send_raw([vec![23, 0xfe, 0xfd], vec![0; 10], vec![0, 20], vec![7; 20]].concat());
    let stats = server.wait_stats(Duration::from_secs(10), |s| {
        total(s, "dropped_by_stack") >= by_stack + 2
    });
    // Anything else they would be (wrongly) counted in shows by now.
    std::thread::sleep(Duration::from_millis(500));
    let after = server.get_json("/api/v1/stats");
    assert_eq!(total(&stats, "dropped_by_stack"), by_stack + 2, "{stats}");
    assert_eq!(drops(&after), all + 2, "{after}");
    both_keep_flowing(&server, &a, &b);
}
