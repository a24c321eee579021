//! Runs tiny `rooms` and `speakers` scenarios of the real `corelay-bench`
//! binary against a real `corelay` server started on free loopback ports,
//! and checks the report. Nothing here asserts a speed.
//!
//! The server binary: [`corelay_bin`] (`$CORELAY_BIN`, else `corelay` in
//! this test's target directory, built there when missing).

use std::process::Command;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

mod common;

use common::{bench_command, out_dir, run_bench};
use corelay_testkit::{Server, corelay_bin};
use serde_json::Value;

/// The tests of this binary run in parallel on a 2-core CI machine. The
/// simulcast test judges a delay-based estimate, which reads the others'
/// CPU contention as congestion (its slot then holds on a lower layer for
/// seconds; failed in CI as `f 38%`): it runs alone, the others together.
static CPU: RwLock<()> = RwLock::new(());

fn shared_cpu() -> RwLockReadGuard<'static, ()> {
    CPU.read().unwrap_or_else(|e| e.into_inner())
}

fn cpu_alone() -> RwLockWriteGuard<'static, ()> {
    CPU.write().unwrap_or_else(|e| e.into_inner())
}

fn assert_percentiles(s: &Value, key: &str) {
    let p = &s[key];
    for f in [
        "count", "p50", "p90", "p99", "p999", "p9999", "max", "mean", "min",
    ] {
        assert!(p.get(f).is_some(), "{key}.{f} missing: {p}");
    }
    let count = p["count"].as_u64().unwrap();
    assert!(count > 0, "no {key} samples: {p}");
    let (p50, max) = (p["p50"].as_u64().unwrap(), p["max"].as_u64().unwrap());
    assert!(
        p["min"].as_u64().unwrap() > 0,
        "{key}: non-positive sample: {p}"
    );
    assert!(p50 > 0 && p50 <= max, "{key}: {p}");
    assert!(max < 1_000_000, "{key}: a sample of 1 s or more: {p}");
}

fn assert_common(s: &Value, dir: &std::path::Path, planned: u64) {
    assert_eq!(s["participants"]["planned"], planned);
    assert_eq!(
        s["participants"]["joined"], planned,
        "{}",
        s["participants"]
    );
    assert_eq!(s["participants"]["failed"], 0);
    assert_eq!(s["received"]["corrupt"], 0, "{}", s["received"]);
    assert!(
        s["received"]["frames_missing"].is_u64(),
        "{}",
        s["received"]
    );
    assert_eq!(s["pairs"]["applicable"], true);
    assert_eq!(s["outages"], serde_json::json!([]), "{}", s["pairs"]);
    assert_eq!(
        s["pairs"]["ok"], s["pairs"]["expected"],
        "missing pairs: {}",
        s["pairs"]["missing"]
    );
    assert_percentiles(s, "e2e_latency_us");
    assert_percentiles(s, "ice_rtt_us");
    assert_percentiles(s, "join_time_us");
    assert!(s["cpu"]["server_cores"].is_number(), "{}", s["cpu"]);
    assert!(s["cpu"]["client_cores"].is_number(), "{}", s["cpu"]);
    assert!(s["throughput"]["client_rx_pps"].as_f64().unwrap() > 0.0);
    for f in [
        "timeseries.csv",
        "streams.csv",
        "percentiles.csv",
        "report.txt",
        "e2e_latency_percentiles.svg",
        "ice_rtt_percentiles.svg",
        "latency_over_time.svg",
        "cpu_over_time.svg",
    ] {
        let p = dir.join(f);
        assert!(
            p.is_file() && std::fs::metadata(&p).unwrap().len() > 0,
            "{f} missing"
        );
    }
    let csv = std::fs::read_to_string(dir.join("timeseries.csv")).unwrap();
    assert!(csv.lines().next().unwrap().starts_with("second,active,"));
    assert!(csv.lines().count() > 3);
}

#[test]
fn tiny_rooms_and_speakers() {
    let _cpu = shared_cpu();
    let server = Server::start(corelay_bin(), 1, &[]);

    let dir = out_dir("rooms");
    let s = run_bench(
        &server,
        &dir,
        &[
            "rooms",
            "--max-rooms",
            "1",
            "--room-size",
            "4",
            "--join-spread",
            "1s",
            "--duration",
            "5s",
        ],
    );
    assert_eq!(s["scenario"], "rooms");
    assert_common(&s, &dir, 4);
    assert_eq!(s["pairs"]["expected"], 12);
    // Neither --simulcast nor --downlink-limit: no simulcast object.
    assert!(s["simulcast"].is_null(), "{}", s["simulcast"]);

    let dir = out_dir("speakers");
    let s = run_bench(
        &server,
        &dir,
        &[
            "speakers",
            "--participants",
            "6",
            "--room-size",
            "3",
            "--speaker-interval",
            "1s",
            "--overlap",
            "300ms",
            "--join-spread",
            "1s",
            "--duration",
            "5s",
        ],
    );
    assert_eq!(s["scenario"], "speakers");
    assert_common(&s, &dir, 6);
    assert_eq!(s["pairs"]["expected"], 12);
    assert_percentiles(&s, "audio_latency_us");
    assert!(s["received"]["audio_frames"].as_u64().unwrap() > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--downlink-limit` with a rate that fits the stream: half the
/// subscribers (every second by join order) receive through the client's
/// bottleneck, the summary reports them apart, and what they receive is
/// still checked and complete.
#[test]
fn a_downlink_limit_reports_limited_and_unlimited_subscribers_apart() {
    let _cpu = shared_cpu();
    let server = Server::start(corelay_bin(), 1, &[]);
    let dir = out_dir("downlink");
    let s = run_bench(
        &server,
        &dir,
        &[
            "--downlink-limit",
            "3mbit",
            "--limited-share",
            "0.5",
            "rooms",
            "--max-rooms",
            "2",
            "--room-size",
            "2",
            "--join-spread",
            "1s",
            "--duration",
            "5s",
        ],
    );
    assert_common(&s, &dir, 4);
    let sc = &s["simulcast"];
    assert_eq!(sc["enabled"], false, "{sc}");
    assert_eq!(sc["downlink_limit_bps"], 3_000_000, "{sc}");
    assert_eq!(sc["downlink"]["subscribers"], 2, "{sc}");
    assert!(sc["downlink"]["passed"].as_u64().unwrap() > 0, "{sc}");
    for g in ["limited", "unlimited"] {
        let x = &sc[g];
        assert_eq!(x["streams"], 2, "{g}: {sc}");
        assert!(x["fps"].as_f64().unwrap() > 0.0, "{g}: {sc}");
        assert!(x["video_kbps"].as_f64().unwrap() > 0.0, "{g}: {sc}");
        // One encoding per publisher: every frame is layer "none".
        assert_eq!(x["layer_share"]["none"], 1.0, "{g}: {sc}");
        assert_eq!(x["switches"], 0, "{g}: {sc}");
    }
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(report.contains("downlink limit 3000 kbit/s"), "{report}");
    let csv = std::fs::read_to_string(dir.join("streams.csv")).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",limited,frames_q,frames_h,frames_f,layer_switches,freezes")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Simulcast end to end (issue 11): every publisher sends q, h and f; half
/// the subscribers sit behind 300 kbit/s. The server must forward one layer
/// per slot, chosen from each subscriber's TWCC estimate: the limited ones
/// get the low layer (f, 1.5 Mbit/s, cannot fit), the others the high one,
/// and a layer switch is never loss or corruption.
#[test]
fn simulcast_rooms_with_limited_subscribers() {
    let _cpu = cpu_alone();
    let server = Server::start(corelay_bin(), 1, &[]);
    let dir = out_dir("simulcast");
    let s = run_bench(
        &server,
        &dir,
        &[
            "--simulcast",
            "--downlink-limit",
            "300kbit",
            "--limited-share",
            "0.5",
            "rooms",
            "--max-rooms",
            "1",
            "--room-size",
            "2",
            "--join-spread",
            "1s",
            // The unlimited subscriber reaches f after two climbs tried
            // for 2 s each (about 5 to 9 s in a debug build); over a 30 s
            // run that leaves f most of the window. At 20 s its share was
            // 0.59 to 0.83 alone and once 0.49 on a busy machine, against
            // the 0.5 it must pass.
            "--duration",
            "30s",
        ],
    );
    assert_common(&s, &dir, 2);
    let sc = &s["simulcast"];
    assert_eq!(sc["enabled"], true, "{sc}");
    let (lim, unlim) = (&sc["limited"], &sc["unlimited"]);
    assert_eq!(lim["streams"], 1, "{sc}");
    assert_eq!(unlim["streams"], 1, "{sc}");
    assert!(lim["layer_share"].get("none").is_none(), "{sc}");
    // f (1.5 Mbit/s) cannot fit through 300 kbit/s: at most a moment of it
    // while the estimate settles.
    assert!(lim["layer_share"]["f"].as_f64().unwrap() < 0.05, "{sc}");
    assert!(unlim["layer_share"]["f"].as_f64().unwrap() > 0.5, "{sc}");
    assert!(lim["video_kbps"].as_f64().unwrap() < 300.0, "{sc}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 12: with every shard of the server killed mid-run, the bench printed
/// `loss 0.00000` and `4/4 pairs`. Now the pairs silent for more than 2 s
/// inside the measurement window are outages: listed, not ok, and the run
/// exits 3.
#[test]
fn a_server_killed_mid_run_is_an_outage() {
    let _cpu = shared_cpu();
    let mut server = Server::start(corelay_bin(), 1, &[]);
    let dir = out_dir("outage");
    let pid = server.pid().to_string();
    let mut bench = bench_command(
        &server,
        &dir,
        &pid,
        &[
            "rooms",
            "--max-rooms",
            "1",
            "--room-size",
            "2",
            "--join-spread",
            "500ms",
            "--duration",
            "9s",
        ],
    )
    .spawn()
    .expect("run corelay-bench");
    // The window opens 2 s after the last join (~1 s): kill at ~5 s, so
    // frames flow for a while inside it and then stop for good.
    std::thread::sleep(std::time::Duration::from_secs(5));
    server.child.kill().expect("kill the server");
    let st = bench.wait().expect("corelay-bench ends");
    assert_eq!(st.code(), Some(3), "an outage exits 3: {st}");
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    let s: Value = serde_json::from_str(&text).expect("summary.json parses");
    let outages = s["outages"].as_array().expect("an outages list");
    assert_eq!(outages.len(), 2, "both pairs went silent: {}", s["pairs"]);
    for o in outages {
        let (from, to) = (o["from"].as_f64().unwrap(), o["to"].as_f64().unwrap());
        assert!(to - from > 2.0, "{o}");
        assert!((3.0..7.0).contains(&from), "silent from the kill on: {o}");
    }
    assert_eq!(s["pairs"]["ok"], 0, "{}", s["pairs"]);
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap_or_default();
    assert!(report.contains("OUTAGE"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `corelay-bench floor` runs and reports: every input packet decrypted and
/// sent on to each of the fan-out, every copy received and authenticated
/// with its subscriber's key by the client's floor, a positive cost per
/// forwarded and per received packet.
#[test]
fn the_floor_tool_runs_and_reports() {
    let _cpu = shared_cpu();
    let out = Command::new(env!("CARGO_BIN_EXE_corelay-bench"))
        .args(["--url", "http://127.0.0.1:9", "floor", "--fanout", "3"])
        .args(["--rate", "2000", "--seconds", "1"])
        .args(["--subscribers", "8", "--burst", "4"])
        .output()
        .expect("run corelay-bench floor");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["bad"], 0, "{v}");
    let us = v["floor_us_per_forwarded_packet"].as_f64().unwrap();
    assert!(us > 0.0 && us < 1000.0, "{v}");
    let (inp, fwd) = (
        v["input_pps"].as_f64().unwrap(),
        v["forwarded_pps"].as_f64().unwrap(),
    );
    assert!(inp > 1000.0, "the input arrived: {v}");
    assert!(
        (fwd - 3.0 * inp).abs() <= 0.05 * fwd,
        "three copies of each: {v}"
    );
    assert_eq!(v["subscribers"], 8, "{v}");
    let (sent, drained) = (
        v["load_sent"].as_f64().unwrap(),
        v["load_drained"].as_f64().unwrap(),
    );
    assert!(
        (drained - 3.0 * sent).abs() <= 0.1 * drained,
        "the copies reached the subscribers and were authenticated: {v}"
    );
    assert_eq!(v["client_floor_bad"], 0, "{v}");
    let client = v["client_floor_us_per_received_packet"].as_f64().unwrap();
    assert!(client > 0.0 && client < 1000.0, "{v}");
    assert!(v["mean_per_wake"].as_f64().unwrap() >= 1.0, "{v}");
}
