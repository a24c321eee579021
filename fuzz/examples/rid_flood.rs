//! Reproducer of a finding of the datagram target (docs/fuzzing.md): RTP
//! packets that fail SRTP authentication, sent from a connected
//! participant's address (any host that can spoof it), each with a new SSRC
//! and a new rid (RTP stream id header extension) on the participant's
//! video mid. str0m maps each to a new receive stream before it checks the
//! SRTP tag (`Session::map_dynamic`), and the streams cost the shard on
//! every later packet and timer until they expire: ~2 ms per packet after
//! 1 000 of them. Fixed by answering without the rid extensions
//! (`offer::build_rtc`); the cost per packet must stay flat.
//!
//!     cargo run --release --manifest-path fuzz/Cargo.toml --example rid_flood [rid|plain] [PER_ROUND] [ROUNDS]

use std::time::{Duration, Instant};

use corelay_fuzz::{Live, server_addr};

/// An RTP packet with one-byte header extensions: mid (id 4) and, when
/// given, rid (id 10), as in the harness client's offer; a made-up tag.
fn rtp(ssrc: u32, seq: u16, mid: &str, rid: Option<&str>) -> Vec<u8> {
    let mut ext = vec![0x40 | (mid.len() as u8 - 1)];
    ext.extend_from_slice(mid.as_bytes());
    if let Some(rid) = rid {
        ext.push(0xa0 | (rid.len() as u8 - 1));
        ext.extend_from_slice(rid.as_bytes());
    }
    while ext.len() % 4 != 0 {
        ext.push(0);
    }
    let mut p = vec![0x90, 127];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&1234u32.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[0xbe, 0xde]);
    p.extend_from_slice(&((ext.len() / 4) as u16).to_be_bytes());
    p.extend_from_slice(&ext);
    p.extend_from_slice(&[0x65, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
    p
}

fn rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .unwrap_or(0)
        / 1024
}

/// Wall time of one 2 ms step of the session (timers, RTCP, delivery).
fn step_cost(live: &mut Live) -> f64 {
    let t = Instant::now();
    for _ in 0..200 {
        live.advance(Duration::from_millis(2));
    }
    t.elapsed().as_secs_f64() * 1e6 / 200.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let with_rid = args.next().as_deref() != Some("plain");
    let per: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(250);
    let rounds: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let mut live = Live::connect();
    let mid = live.clients()[0].video_mid.to_string();
    let own = live.clients()[0].addr;
    let server = server_addr();
    println!(
        "idle: {:.0} µs per 2 ms step; sending {} packets per round {} rid",
        step_cost(&mut live),
        per,
        if with_rid { "with a new" } else { "without" }
    );
    for round in 0..rounds {
        let t = Instant::now();
        let mut engine_time = Duration::ZERO;
        for i in 0..per {
            let n = round * per + i;
            let rid = format!("r{n}");
            let d = rtp(
                0x1000_0000 + n,
                n as u16,
                &mid,
                with_rid.then_some(rid.as_str()),
            );
            let now = live.now();
            let e = Instant::now();
            live.engine_mut()
                .handle_datagram(now, None, own, server, &d);
            engine_time += e.elapsed();
            if i % 50 == 0 {
                live.advance(Duration::from_millis(2));
            }
        }
        let per_packet = t.elapsed().as_secs_f64() * 1e6 / f64::from(per);
        println!(
            "{:6} packets: {:8.1} µs per packet ({:8.1} in handle_datagram), {:6.0} µs per 2 ms step, rss {} MiB, session healthy: {}",
            (round + 1) * per,
            per_packet,
            engine_time.as_secs_f64() * 1e6 / f64::from(per),
            step_cost(&mut live),
            rss_mib(),
            live.healthy()
        );
    }
    for _ in 0..30_000 {
        live.advance(Duration::from_millis(2));
    }
    println!(
        "one virtual minute later: {:.0} µs per 2 ms step",
        step_cost(&mut live)
    );
}
