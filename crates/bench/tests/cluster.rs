//! Runs tiny `cluster` scenarios of the real `corelay-bench` binary: it
//! starts its own nats-server and three corelay nodes on loopback ports,
//! spreads participants over them, and reports same-node and cross-node
//! pairs apart. This checks the report's shape and that media crossed
//! between nodes; nothing here asserts a speed.
//!
//! Without `nats-server` these tests fail, naming the package, unless
//! `SKIP_NATS=1` is set: then they print SKIPPED and pass (as the server's
//! cluster tests do). Each run is bounded by its plan (about 10 s) and the
//! cluster's own timeouts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use corelay_testkit::corelay_bin;
use corelay_testkit::nats::Nats;
use serde_json::Value;

/// One cluster at a time: three nodes and the load client on a 2-core machine.
static ONE: Mutex<()> = Mutex::new(());

/// `None`: skip (no nats-server and `SKIP_NATS=1`).
fn nats_or_skip(test: &str) -> Option<()> {
    // The same rule as the server's cluster tests; this one is dropped at
    // once (the bench starts its own).
    Nats::stopped(test).map(|_| ())
}

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "corelay-bench-cluster-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run_cluster(out: &Path, args: &[&str]) -> Value {
    let bin = corelay_bin();
    let st = Command::new(env!("CARGO_BIN_EXE_corelay-bench"))
        .args(["--out", out.to_str().unwrap(), "--quiet", "cluster"])
        .arg("--server-bin")
        .arg(&bin)
        .args(args)
        .status()
        .expect("run corelay-bench cluster");
    let nodes_log = |k: usize| {
        std::fs::read_to_string(out.join(format!("cluster/node-n{k}.log"))).unwrap_or_default()
    };
    assert!(
        st.success(),
        "corelay-bench cluster failed: {st}; node logs:\n{}\n{}\n{}",
        nodes_log(0),
        nodes_log(1),
        nodes_log(2)
    );
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json parses")
}

fn assert_percentiles(s: &Value, key: &str) -> u64 {
    let p = &s[key];
    for f in ["count", "p50", "p90", "p99", "p999", "p9999", "max"] {
        assert!(p[f].is_u64(), "{key}.{f} missing: {p}");
    }
    p["count"].as_u64().unwrap()
}

#[test]
fn rooms_span_three_nodes_and_cross_node_pairs_get_media() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    if nats_or_skip("bench-cluster-rooms").is_none() {
        return;
    }
    let dir = out_dir("rooms");
    // Rooms of 4 over 3 nodes, round robin by participant: every room has
    // members on three nodes, two of them on one.
    let s = run_cluster(
        &dir,
        &[
            "--max-rooms",
            "2",
            "--room-size",
            "4",
            "--room-interval",
            "500ms",
            "--join-spread",
            "1s",
            "--duration",
            "6s",
        ],
    );
    assert_eq!(s["scenario"], "cluster");
    assert_eq!(s["config"]["shape"], "rooms");
    assert_eq!(s["participants"]["joined"], 8, "{}", s["participants"]);
    assert_eq!(s["participants"]["failed"], 0);
    let c = &s["cluster"];
    assert_eq!(c["nodes"], 3);
    assert_eq!(
        c["participants_by_node"],
        serde_json::json!([3, 3, 2]),
        "{c}"
    );
    assert_eq!(c["participants_unplaced"], 0);
    // Same-node and cross-node latency, both measured.
    assert!(assert_percentiles(&s, "e2e_latency_same_node_us") > 0);
    assert!(assert_percentiles(&s, "e2e_latency_cross_node_us") > 0);
    // Every pair received media throughout the window, across nodes too.
    let pairs = &s["pairs"];
    assert_eq!(pairs["ok"], pairs["expected"], "{pairs}");
    assert_eq!(pairs["expected"], 24);
    let cross = &pairs["cross_node"];
    assert!(cross["expected"].as_u64() > Some(0), "{pairs}");
    assert_eq!(cross["ok"], cross["expected"], "{pairs}");
    assert_eq!(pairs["same_node"]["ok"], pairs["same_node"]["expected"]);
    assert_eq!(s["outages"], serde_json::json!([]));
    // What crossed, and what it cost.
    assert!(s["relay_tx_bytes"].as_u64() > Some(0), "{c}");
    assert!(c["relay"]["tx_packets"].as_u64() > Some(0), "{c}");
    assert!(c["relay"]["rx_packets"].as_u64() > Some(0), "{c}");
    assert!(s["server_us_per_relayed_packet"].is_number(), "{c}");
    assert!(s["server_us_per_forwarded_packet"].is_number(), "{s}");
    assert_eq!(s["config"]["server_pid"].as_array().map(Vec::len), Some(3));
    for k in 0..3 {
        assert!(dir.join(format!("cluster/node-n{k}.log")).is_file());
    }
    assert!(dir.join("report.txt").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_webinar_over_three_nodes_reaches_every_viewer() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    if nats_or_skip("bench-cluster-webinar").is_none() {
        return;
    }
    let dir = out_dir("webinar");
    let s = run_cluster(
        &dir,
        &[
            "--shape",
            "webinar",
            "--viewers",
            "5",
            "--join-spread",
            "1s",
            "--duration",
            "5s",
        ],
    );
    assert_eq!(s["config"]["shape"], "webinar");
    assert_eq!(s["participants"]["joined"], 6, "{}", s["participants"]);
    let pairs = &s["pairs"];
    // Viewer <- publisher only: the viewers publish nothing.
    assert_eq!(pairs["expected"], 5, "{pairs}");
    assert_eq!(pairs["ok"], 5, "{pairs}");
    assert!(pairs["cross_node"]["ok"].as_u64() > Some(0), "{pairs}");
    assert!(s["relay_tx_bytes"].as_u64() > Some(0), "{}", s["cluster"]);
    let _ = std::fs::remove_dir_all(&dir);
}
