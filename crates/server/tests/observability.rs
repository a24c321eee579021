//! Metrics: socket dwell (SO_TIMESTAMPNS) and forwarding latency move when a
//! shard is slow, and /metrics and /api/v1/stats expose them.

mod common;

use std::time::Duration;

use common::*;

/// Samples at or above `min_us` in a stats histogram.
fn at_least(h: &serde_json::Value, min_us: u64) -> u64 {
    h["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b[0].as_u64().is_none_or(|edge| edge > min_us))
        .map(|b| b[1].as_u64().unwrap())
        .sum()
}

fn run_call(server: &Server) -> serde_json::Value {
    let a = join(server, "obs", "a");
    let b = join(server, "obs", "b");
    let (ok, _) = a.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 60) == vec!["b".to_string()]
    });
    assert!(ok, "call did not flow");
    let (ok, _) = b.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 60) == vec!["a".to_string()]
    });
    assert!(ok, "call did not flow");
    // Let a report (every 250 ms) carry the figures.
    std::thread::sleep(Duration::from_millis(600));
    server.get_json("/api/v1/stats")
}

#[test]
fn a_stalled_shard_shows_in_dwell_and_forwarding_latency() {
    // In the work-stealing baseline every forwarded packet crossed a channel
    // between participant tasks: its latency is the cross-shard histogram.
    let forward = if corelay_testkit::work_stealing() {
        "forward_cross_shard_latency"
    } else {
        "forward_latency"
    };
    // Reference run: figures exist.
    let normal = start_server(1, &[]);
    let st = run_call(&normal);
    let shard = &st["shards"][0];
    let dwell_n = shard["socket_dwell"]["count"].as_u64().unwrap();
    let fwd_n = shard[forward]["count"].as_u64().unwrap();
    assert!(dwell_n > 100, "no dwell samples: {shard}");
    assert!(fwd_n > 100, "no forwarding samples: {shard}");

    // Slow run: the shard sleeps 8 ms every 20 datagrams. Datagrams that
    // arrive meanwhile wait in the socket queue, and the packet handled after
    // each stall leaves at least 8 ms after it arrived.
    let slow = start_server(1, &["--test-stall-every", "20", "--test-stall-ms", "8"]);
    let st = run_call(&slow);
    let shard = &st["shards"][0];
    let fwd = &shard[forward];
    let dwell = &shard["socket_dwell"];
    let stalls = shard["counters"]["rx_packets"].as_u64().unwrap() / 20;
    assert!(stalls > 10, "too little traffic to judge: {shard}");
    assert!(
        at_least(fwd, 5_000) * 2 >= stalls,
        "forwarding latency did not move past 5 ms ({} samples for {stalls} stalls): {fwd}",
        at_least(fwd, 5_000)
    );
    assert!(
        at_least(dwell, 1_000) > 0,
        "no datagram waited over 1 ms: {dwell}"
    );
    assert!(fwd["max_us"].as_u64().unwrap() >= 8_000, "{fwd}");
    println!(
        "normal: dwell mean {:.0} µs, forward mean {:.0} µs; stalled: dwell mean {:.0} µs, forward mean {:.0} µs",
        normal.get_json("/api/v1/stats")["shards"][0]["socket_dwell"]["mean_us"]
            .as_f64()
            .unwrap(),
        normal.get_json("/api/v1/stats")["shards"][0][forward]["mean_us"]
            .as_f64()
            .unwrap(),
        dwell["mean_us"].as_f64().unwrap(),
        fwd["mean_us"].as_f64().unwrap()
    );

    // /metrics exposes the same histograms, per shard, with the article's edges.
    let text = slow.scrape();
    for needle in [
        "corelay_socket_dwell_seconds_bucket{",
        "corelay_forward_latency_seconds_bucket{",
        "corelay_forward_cross_shard_latency_seconds_count{",
        "corelay_peer_hop_seconds_bucket{",
        "corelay_spatial_skipped_total{",
        "corelay_packets_dropped_total{",
        "corelay_shard_busy_ratio{",
        "corelay_loop_iteration_seconds_sum{",
        "le=\"0.00001\"",
        "le=\"0.05\"",
    ] {
        assert!(text.contains(needle), "/metrics lacks {needle}:\n{text}");
    }
    let metric = format!("corelay_{forward}_seconds");
    let over_5ms_line = text
        .lines()
        .find(|l| l.starts_with(&format!("{metric}_bucket{{")) && l.contains("le=\"0.005\""))
        .unwrap()
        .to_string();
    let count_line = text
        .lines()
        .find(|l| l.starts_with(&format!("{metric}_count{{")))
        .unwrap()
        .to_string();
    let val = |l: &str| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap();
    assert!(
        val(&count_line) > val(&over_5ms_line),
        "{over_5ms_line} / {count_line}"
    );

    // Per-participant figures appear in /api/v1/stats within a couple of seconds.
    let st = slow.wait_stats(Duration::from_secs(4), |s| {
        s["room_detail"][0]["participants"][0]["rtt_ms"].is_number()
    });
    let p = &st["room_detail"][0]["participants"][0];
    assert!(p["rtt_ms"].is_number(), "no per-participant RTT: {p}");
    assert!(p.get("ingress_jitter_ms").is_some(), "{p}");
    let history = p["rtx_history_ms"].as_u64().unwrap_or(0);
    assert!((1000..=3000).contains(&history), "{p}");
    assert!(p["shard_dwell_mean_us"].as_f64().unwrap() > 0.0);
}

/// A video frame's packets to one subscriber leave as one UDP GSO message
/// by default (`corelay_udp_messages_out` below `corelay_packets_out`), and
/// one by one with `--no-udp-offload`.
#[test]
fn gso_joins_a_frames_packets_and_no_udp_offload_sends_them_one_by_one() {
    let counts = |extra: &[&str]| {
        let server = start_server(1, extra);
        let st = run_call(&server);
        let t = &st["total"];
        let (datagrams, messages) = (
            t["tx_packets"].as_u64().unwrap(),
            t["tx_messages"].as_u64().unwrap(),
        );
        assert!(datagrams > 100, "too little traffic to judge: {t}");
        println!("{extra:?}: {messages} UDP messages for {datagrams} datagrams");
        (datagrams, messages)
    };
    let (datagrams, messages) = counts(&[]);
    assert!(
        messages < datagrams * 9 / 10,
        "GSO joined too little: {messages} messages for {datagrams} datagrams"
    );
    let (datagrams, messages) = counts(&["--no-udp-offload"]);
    assert_eq!(messages, datagrams, "no GSO with --no-udp-offload");
}
