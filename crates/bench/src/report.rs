//! Turning an [`Outcome`] into summary.json, timeseries.csv, plots and the
//! stdout table.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use crate::metrics::{Interval, Percentiles, new_hist, rec};
use crate::run::{Outcome, Sample, failures_by_status};
use crate::svg::{Chart, Line, XAxis, percentile_points, render};
use crate::util::cpu_delta;

/// CPU over a window, in cores.
#[derive(Debug, Clone, Serialize, Default)]
pub struct CpuFigures {
    /// Server process, user + system.
    pub server_cores: Option<f64>,
    /// Server user.
    pub server_user_cores: Option<f64>,
    /// Server system.
    pub server_sys_cores: Option<f64>,
    /// Busiest server thread.
    pub server_max_thread_cores: Option<f64>,
    /// Its name.
    pub server_max_thread: Option<String>,
    /// Server's own busy fraction (max over shards, last sample in window).
    pub server_busy: Option<f64>,
    /// Client process, user + system.
    pub client_cores: Option<f64>,
    /// Client user.
    pub client_user_cores: Option<f64>,
    /// Client system.
    pub client_sys_cores: Option<f64>,
    /// Busiest client driver thread.
    pub client_max_driver_cores: Option<f64>,
}

fn r3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Sample closest to second `s` (at or after it when possible).
fn sample_at(samples: &[Sample], s: f64) -> Option<&Sample> {
    samples
        .iter()
        .find(|x| x.t >= s - 0.05)
        .or_else(|| samples.last())
}

/// CPU between seconds `from` and `to`.
pub fn cpu_between(samples: &[Sample], from: f64, to: f64) -> CpuFigures {
    let (Some(a), Some(b)) = (sample_at(samples, from), sample_at(samples, to)) else {
        return CpuFigures::default();
    };
    let dt = b.t - a.t;
    if dt <= 0.0 {
        return CpuFigures::default();
    }
    let mut c = CpuFigures::default();
    if let (Some(x), Some(y)) = (&a.server, &b.server) {
        let (t, u, s, m, name) = cpu_delta(x, y, dt);
        c.server_cores = Some(r3(t));
        c.server_user_cores = Some(r3(u));
        c.server_sys_cores = Some(r3(s));
        c.server_max_thread_cores = Some(r3(m));
        c.server_max_thread = Some(name);
    }
    c.server_busy = b.server_busy.map(r3);
    if let (Some(x), Some(y)) = (&a.client, &b.client) {
        let (t, u, s, _, _) = cpu_delta(x, y, dt);
        c.client_cores = Some(r3(t));
        c.client_user_cores = Some(r3(u));
        c.client_sys_cores = Some(r3(s));
    }
    let mut best = 0.0f64;
    for (i, &ns) in b.driver_cpu_ns.iter().enumerate() {
        let before = a.driver_cpu_ns.get(i).copied().unwrap_or(0);
        best = best.max(ns.saturating_sub(before) as f64 / 1e9 / dt);
    }
    c.client_max_driver_cores = Some(r3(best));
    c
}

/// One row of the time series.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// Second since start.
    pub second: u64,
    /// Connected participants.
    pub active: usize,
    /// Video packets received per second (= forwarded to us).
    pub rx_video_pps: u64,
    /// Audio packets received per second.
    pub rx_audio_pps: u64,
    /// Packets sent per second.
    pub tx_pps: u64,
    /// Video frames received.
    pub video_frames: u64,
    /// e2e P50, ms.
    pub e2e_p50_ms: f64,
    /// e2e P90, ms.
    pub e2e_p90_ms: f64,
    /// e2e P99, ms.
    pub e2e_p99_ms: f64,
    /// e2e max, ms.
    pub e2e_max_ms: f64,
    /// ICE RTT P50, ms.
    pub rtt_p50_ms: f64,
    /// ICE RTT P99, ms.
    pub rtt_p99_ms: f64,
    /// Server CPU, cores.
    pub server_cpu: Option<f64>,
    /// Client CPU, cores.
    pub client_cpu: Option<f64>,
    /// Server forwarded packets per second (its own counter).
    pub server_fwd_pps: Option<f64>,
    /// Send-schedule slips.
    pub slips: u64,
    /// Corrupt payloads.
    pub corrupt: u64,
}

/// The time series.
pub fn rows(o: &Outcome) -> Vec<Row> {
    let last = o.plan.end.as_secs();
    let empty = Interval::new(0);
    let mut out = Vec::new();
    for s in 0..last {
        let i = o.series.seconds.get(&s).unwrap_or(&empty);
        let a = sample_at(&o.samples, s as f64);
        let b = sample_at(&o.samples, (s + 1) as f64);
        let cpu = match (a, b) {
            (Some(a), Some(b)) if b.t > a.t => Some(cpu_between(&o.samples, a.t, b.t)),
            _ => None,
        };
        let fwd = match (a, b) {
            (Some(a), Some(b)) if b.t > a.t => match (a.server_forwarded, b.server_forwarded) {
                (Some(x), Some(y)) => Some(r3(y.saturating_sub(x) as f64 / (b.t - a.t))),
                _ => None,
            },
            _ => None,
        };
        let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| {
            if h.is_empty() {
                0.0
            } else {
                r3(h.value_at_quantile(q) as f64 / 1000.0)
            }
        };
        out.push(Row {
            second: s,
            active: b.map(|x| x.active).unwrap_or(0),
            rx_video_pps: i.rx_video_packets,
            rx_audio_pps: i.rx_audio_packets,
            tx_pps: i.tx_video_packets + i.tx_audio_packets,
            video_frames: i.video_frames,
            e2e_p50_ms: ms(&i.video_lat, 0.5),
            e2e_p90_ms: ms(&i.video_lat, 0.9),
            e2e_p99_ms: ms(&i.video_lat, 0.99),
            e2e_max_ms: if i.video_lat.is_empty() {
                0.0
            } else {
                r3(i.video_lat.max() as f64 / 1000.0)
            },
            rtt_p50_ms: ms(&i.ice_rtt, 0.5),
            rtt_p99_ms: ms(&i.ice_rtt, 0.99),
            server_cpu: cpu.as_ref().and_then(|c| c.server_cores),
            client_cpu: cpu.as_ref().and_then(|c| c.client_cores),
            server_fwd_pps: fwd,
            slips: i.slips,
            corrupt: i.corrupt,
        });
    }
    out
}

/// The window's seconds split by whether the load client sent a frame more
/// than 5 ms late in them (a send-schedule slip), with the largest e2e
/// latency of each group. A client that stalls sends the frames it owes in
/// one burst, which queues in the server: a tail that only the slipped
/// seconds have comes with the client's stalls; one that the on-time seconds
/// have too is the server's own.
pub fn tail_and_slips(rows: &[Row], from: u64, to: u64) -> Value {
    let (mut on_time, mut slipped) = ((0u64, 0.0f64), (0u64, 0.0f64));
    for r in rows.iter().filter(|r| (from..to).contains(&r.second)) {
        let group = if r.slips > 0 {
            &mut slipped
        } else {
            &mut on_time
        };
        group.0 += 1;
        group.1 = group.1.max(r.e2e_max_ms);
    }
    json!({
        "seconds_on_time": on_time.0,
        "seconds_with_slips": slipped.0,
        "e2e_max_ms_on_time": on_time.1,
        "e2e_max_ms_with_slips": slipped.1,
    })
}

/// A pair that received nothing for longer than this inside the measurement
/// window had an outage.
pub const OUTAGE: Duration = Duration::from_secs(2);
/// Outages listed in summary.json (all are counted).
const MAX_OUTAGES_LISTED: usize = 100;

/// The silences longer than [`OUTAGE`] within `[from, to)` (ns), given the
/// sorted, merged spans in which frames arrived.
pub fn outages_in(spans: &[(u64, u64)], from: u64, to: u64) -> Vec<(u64, u64)> {
    let limit = OUTAGE.as_nanos() as u64;
    let mut out = Vec::new();
    let mut cursor = from;
    for &(a, b) in spans {
        if b < cursor {
            continue;
        }
        if a >= to {
            break;
        }
        if a > cursor && a - cursor > limit {
            out.push((cursor, a));
        }
        cursor = cursor.max(b);
    }
    if to > cursor && to - cursor > limit {
        out.push((cursor, to));
    }
    out
}

/// Who received whom: for every room, every joined member should get frames
/// from every other joined member (when it has enough video slots), and
/// throughout the measurement window: a pair silent for more than
/// [`OUTAGE`] inside it is an outage, listed with its times (seconds since
/// start), and does not count as ok. Silences of a subscriber behind
/// `--downlink-limit` are counted in `limited_silences` instead (the
/// server pauses what its downlink cannot carry).
pub fn pairs(o: &Outcome, video_slots: usize) -> Value {
    let mut expected = 0u64;
    let mut ok = 0u64;
    let mut missing = Vec::new();
    let mut outages = Vec::new();
    let mut outage_count = 0u64;
    let mut paused = 0u64;
    let mut by_room: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (k, (j, _)) in o.joined.iter().enumerate() {
        by_room.entry(j.room).or_default().push(k);
    }
    // Every publisher of a room needs a slot at each other member.
    let applicable = o.plan.room_sizes.iter().all(|&n| {
        let others = o.plan.publishers.map_or(n.saturating_sub(1), |k| k.min(n));
        video_slots >= others
    });
    if !applicable {
        return json!({"applicable": false, "reason": "fewer video slots than other room members", "outages": []});
    }
    let (from_s, to_s) = o.window;
    let from = o.start_ns + from_s * 1_000_000_000;
    let to = o.start_ns + to_s * 1_000_000_000;
    let secs = |ns: u64| ((ns.saturating_sub(o.start_ns)) as f64 / 1e9 * 10.0).round() / 10.0;
    // A cluster run: (expected, ok) of pairs on one node, and across nodes.
    let mut by_node = [(0u64, 0u64); 2];
    for members in by_room.values() {
        for &a in members {
            for &b in members {
                let (ja, sa) = &o.joined[a];
                let (jb, _) = &o.joined[b];
                if a == b || !o.plan.publishes(jb.member) {
                    continue;
                }
                expected += 1;
                let pair = format!("{} <- {}", ja.name, jb.name);
                let none = sa.frames_from(&jb.name) == 0;
                if none && missing.len() < 50 {
                    missing.push(pair.clone());
                }
                let silences = outages_in(&sa.reception_spans(&jb.name), from, to);
                // A pair that received nothing has no silence inside the
                // window to report, and is not ok either.
                let pair_ok = silences.is_empty() && !none;
                if pair_ok {
                    ok += 1;
                }
                if let (Some(na), Some(nb)) = (ja.node, jb.node) {
                    let k = usize::from(na != nb);
                    by_node[k].0 += 1;
                    by_node[k].1 += u64::from(pair_ok);
                }
                if ja.limited {
                    // Behind --downlink-limit the server may pause a slot
                    // whose lowest layer does not fit: expected, counted
                    // apart, and not an outage of the server.
                    paused += silences.len() as u64;
                    continue;
                }
                for (x, y) in silences {
                    outage_count += 1;
                    if outages.len() < MAX_OUTAGES_LISTED {
                        outages.push(json!({"pair": pair, "from": secs(x), "to": secs(y)}));
                    }
                }
            }
        }
    }
    let mut v = json!({
        "applicable": true,
        "expected": expected,
        "ok": ok,
        "missing": missing,
        "outage_count": outage_count,
        "outages": outages,
        "limited_silences": paused,
    });
    if o.nodes > 1 {
        v["same_node"] = json!({"expected": by_node[0].0, "ok": by_node[0].1});
        v["cross_node"] = json!({"expected": by_node[1].0, "ok": by_node[1].1});
    }
    v
}

/// A cluster run's own figures (None with one node): latency of same-node
/// and cross-node pairs, what crossed between nodes, the CPU per relayed
/// packet, who was on which node.
fn cluster_summary(o: &Outcome, w: &Interval, cpu: &CpuFigures) -> Option<Value> {
    if o.nodes <= 1 {
        return None;
    }
    let (from, to) = o.window;
    let pct = |h: &Option<hdrhistogram::Histogram<u64>>| match h {
        Some(h) => Percentiles::of(h),
        None => Percentiles::of(&new_hist()),
    };
    let mut per_node = vec![0u64; o.nodes];
    let mut unplaced = 0u64;
    for (j, _) in &o.joined {
        match j.node.and_then(|n| per_node.get_mut(n)) {
            Some(c) => *c += 1,
            None => unplaced += 1,
        }
    }
    // Relay counters over the window, and over the whole run (from the
    // first sample, taken before anyone joined).
    let relay_at = |t: f64| sample_at(&o.samples, t).and_then(|s| Some((s.t, s.server_relay?)));
    let window = match (relay_at(from as f64), relay_at(to as f64)) {
        (Some((ta, a)), Some((tb, b))) if tb > ta => Some((tb - ta, a, b)),
        _ => None,
    };
    let first = o.samples.iter().find_map(|s| s.server_relay);
    let last = o.samples.iter().rev().find_map(|s| s.server_relay);
    let run_tx_bytes = match (first, last) {
        (Some(a), Some(b)) => Some(b.tx_bytes.saturating_sub(a.tx_bytes)),
        _ => None,
    };
    let relay = window.map(|(dt, a, b)| {
        let tx_p = b.tx_packets.saturating_sub(a.tx_packets);
        let tx_b = b.tx_bytes.saturating_sub(a.tx_bytes);
        json!({
            "seconds": r3(dt),
            "tx_packets": tx_p,
            "tx_bytes": tx_b,
            "rx_packets": b.rx_packets.saturating_sub(a.rx_packets),
            "rx_bytes": b.rx_bytes.saturating_sub(a.rx_bytes),
            "tx_pps": r3(tx_p as f64 / dt),
            "tx_mbps": r3(tx_b as f64 * 8.0 / dt / 1e6),
            "tx_bytes_run": run_tx_bytes,
        })
    });
    // All the nodes' CPU over the window, per packet that crossed to another
    // node (the relay's send side): an upper bound on what a relayed packet
    // costs, since the same CPU also forwarded every packet to its clients.
    let relay_pps = relay.as_ref().and_then(|r| r["tx_pps"].as_f64());
    let per_relayed = match (cpu.server_cores, relay_pps) {
        (Some(c), Some(p)) if p > 0.0 => Some(r3(c * 1e6 / p)),
        _ => None,
    };
    // And per packet the nodes sent at all: to their participants
    // (forwarded) and to each other (relayed).
    let fwd_pps = match (
        sample_at(&o.samples, from as f64),
        sample_at(&o.samples, to as f64),
    ) {
        (Some(a), Some(b)) if b.t > a.t => match (a.server_forwarded, b.server_forwarded) {
            (Some(x), Some(y)) => Some(y.saturating_sub(x) as f64 / (b.t - a.t)),
            _ => None,
        },
        _ => None,
    };
    let per_sent = match (cpu.server_cores, fwd_pps, relay_pps) {
        (Some(c), Some(f), Some(r)) if f + r > 0.0 => Some(r3(c * 1e6 / (f + r))),
        _ => None,
    };
    Some(json!({
        "nodes": o.nodes,
        "participants_by_node": per_node,
        "participants_unplaced": unplaced,
        "e2e_latency_same_node_us": pct(&w.video_lat_same),
        "e2e_latency_cross_node_us": pct(&w.video_lat_cross),
        "relay": relay,
        "relay_tx_bytes": relay.as_ref().map(|r| r["tx_bytes"].clone()),
        "server_us_per_relayed_packet": per_relayed,
        "server_us_per_sent_packet": per_sent,
    }))
}

/// Everything, as the summary.json value; `rows` is [`rows`]'s time
/// series of the same outcome (for the tail split).
pub fn summary(o: &Outcome, rows: &[Row], config: Value, video_slots: usize) -> Value {
    let (from, to) = o.window;
    let w = o.series.window(from, to);
    let all = o.series.window(0, u64::MAX);
    let secs = (to - from) as f64;
    let cpu = cpu_between(&o.samples, from as f64, to as f64);
    let mut jt = new_hist();
    for &v in &o.join_times_us {
        rec(&mut jt, v);
    }
    let mut sig = new_hist();
    for &v in &o.signaling_times_us {
        rec(&mut sig, v);
    }
    let mut con = new_hist();
    for &v in &o.connect_times_us {
        rec(&mut con, v);
    }
    let pairs_v = pairs(o, video_slots);
    let cluster = cluster_summary(o, &w, &cpu);
    let mut packets = 0u64;
    let mut missing = 0u64;
    let mut nacks = 0u64;
    let mut corrupt = 0u64;
    let mut ooo = 0u64;
    let mut ts_back = 0u64;
    let mut keyframe_requests = 0u64;
    let mut slips = 0u64;
    let mut own_path = 0u64;
    let mut feedback_ignored = 0u64;
    let mut frames_rx_video = 0u64;
    let mut frames_rx_audio = 0u64;
    let mut not_connected = 0u64;
    let mut frames_missing = 0u64;
    for (_, s) in &o.joined {
        nacks += s.nacks_sent;
        keyframe_requests += s.keyframe_requests;
        slips += s.send_slips;
        own_path += s.own_path_packets;
        feedback_ignored += s.feedback_ignored;
        if !s.connected {
            not_connected += 1;
        }
        for st in s.slots.values() {
            packets += st.packets;
            missing += st.seq_missing;
            frames_missing += st.frames_missing;
            corrupt += st.corrupt;
            ooo += st.out_of_order;
            ts_back += st.ts_backwards;
            if st.kind == "video" {
                frames_rx_video += st.frames;
            } else {
                frames_rx_audio += st.frames;
            }
        }
    }
    let rx_pps = if secs > 0.0 {
        (w.rx_video_packets + w.rx_audio_packets) as f64 / secs
    } else {
        0.0
    };
    let tx_pps = if secs > 0.0 {
        (w.tx_video_packets + w.tx_audio_packets) as f64 / secs
    } else {
        0.0
    };
    let server_fwd = match (
        sample_at(&o.samples, from as f64),
        sample_at(&o.samples, to as f64),
    ) {
        (Some(a), Some(b)) if b.t > a.t => match (a.server_forwarded, b.server_forwarded) {
            (Some(x), Some(y)) => Some(r3(y.saturating_sub(x) as f64 / (b.t - a.t))),
            _ => None,
        },
        _ => None,
    };
    let sent_frames_window = w.tx_video_packets.max(1);
    let mut warnings: Vec<String> = Vec::new();
    let threads = o
        .samples
        .last()
        .map(|s| s.driver_cpu_ns.len())
        .unwrap_or(1)
        .max(1);
    let mut client_bound = false;
    if let Some(c) = cpu.client_max_driver_cores {
        if c > 0.85 {
            client_bound = true;
            warnings.push(format!(
                "a client driver thread used {c:.2} cores: the CLIENT is (close to) the bottleneck, not the server"
            ));
        }
    }
    // Frames sent in the window, roughly (video packets / packets per frame).
    let frames_sent = (sent_frames_window as f64 / 1.5).max(1.0);
    let slipping = w.slips as f64 > 0.01 * frames_sent || w.max_slip_us > 50_000;
    let mut contended = false;
    if slipping {
        let busy = cpu.client_max_driver_cores.unwrap_or(0.0);
        if busy > 0.7 {
            client_bound = true;
            warnings.push(format!(
                "the client's send schedule slipped {} times in the window (worst {:.1} ms late) with a driver thread at {busy:.2} cores: the CLIENT is overloaded",
                w.slips,
                w.max_slip_us as f64 / 1000.0
            ));
        } else {
            contended = true;
            warnings.push(format!(
                "the client's send schedule slipped {} times in the window (worst {:.1} ms late) while its busiest thread used only {busy:.2} cores: the client was descheduled (machine contended by other processes?); tail latencies include that delay",
                w.slips,
                w.max_slip_us as f64 / 1000.0
            ));
        }
    }
    if o.late_joins > 0 {
        warnings.push(format!(
            "{} joins started more than 1 s late (HTTP joiners too slow)",
            o.late_joins
        ));
    }
    if o.client_tx_errors > 0 {
        warnings.push(format!(
            "{} datagrams could not be sent by the client",
            o.client_tx_errors
        ));
    }
    if cpu.server_cores.is_none() {
        warnings.push("no server CPU figures (pass --server-pid)".into());
    }
    if corrupt > 0 {
        warnings.push(format!("{corrupt} payloads failed verification"));
    }
    let _ = threads;
    // CPU per packet, server and client, over the window (µs).
    // Janus has no forwarded-packet counter: the packets the client
    // received are what it forwarded (loss aside).
    let janus = config.get("dialect").and_then(Value::as_str) == Some("janus");
    let fwd_basis = server_fwd.or_else(|| janus.then_some(rx_pps));
    let server_us = match (cpu.server_cores, fwd_basis) {
        (Some(c), Some(f)) if f > 0.0 => Some(r3(c * 1e6 / f)),
        _ => None,
    };
    let client_us = match cpu.client_cores {
        Some(c) if rx_pps > 0.0 => Some(r3(c * 1e6 / rx_pps)),
        _ => None,
    };
    let client_to_server = match (client_us, server_us) {
        (Some(c), Some(s)) if s > 0.0 => Some(r3(c / s)),
        _ => None,
    };
    let frames_all = frames_rx_video + frames_rx_audio;
    let frame_loss_ratio = if frames_all + frames_missing > 0 {
        frames_missing as f64 / (frames_all + frames_missing) as f64
    } else {
        0.0
    };
    let mut out = json!({
        "scenario": o.plan.scenario,
        "config": config,
        "media": o.media_desc,
        "elapsed_s": r3(o.elapsed.as_secs_f64()),
        "window": {"from_s": from, "to_s": to, "seconds": to - from},
        "participants": {
            "planned": o.plan.joins.len(),
            "joined": o.joined.len(),
            "failed": o.failures.len(),
            "failed_by_status": failures_by_status(&o.failures),
            "not_connected_at_end": not_connected,
            "leave_failures": o.leave_failures,
            "rooms": o.plan.room_sizes.len(),
            "subscription_updates": o.subscription_updates,
        },
        "e2e_latency_us": Percentiles::of(&w.video_lat),
        "e2e_latency_all_us": Percentiles::of(&all.video_lat),
        "audio_latency_us": Percentiles::of(&w.audio_lat),
        "ice_rtt_us": Percentiles::of(&w.ice_rtt),
        "ice_rtt_all_us": Percentiles::of(&all.ice_rtt),
        "join_time_us": Percentiles::of(&jt),
        "signaling_time_us": Percentiles::of(&sig),
        "connect_time_us": Percentiles::of(&con),
        "received": {
            "packets": packets,
            "video_frames": frames_rx_video,
            "audio_frames": frames_rx_audio,
            "corrupt": corrupt,
            "out_of_order": ooo,
            "ts_backwards": ts_back,
            "seq_missing": missing,
            "loss_ratio": if packets + missing > 0 { missing as f64 / (packets + missing) as f64 } else { 0.0 },
            "frames_missing": frames_missing,
            "frame_loss_ratio": frame_loss_ratio,
            "nacks_sent": nacks,
            "keyframe_requests_received": keyframe_requests,
            "own_path_packets": own_path,
            "feedback_ignored": feedback_ignored,
        },
        "outages": pairs_v["outages"].clone(),
        "pairs": pairs_v,
        "throughput": {
            "client_rx_pps": r3(rx_pps),
            "client_tx_pps": r3(tx_pps),
            "server_forwarded_pps": server_fwd,
            "client_rx_mbps": r3(if secs > 0.0 { w.rx_bytes as f64 * 8.0 / secs / 1e6 } else { 0.0 }),
        },
        "cpu": cpu,
        "server_us_per_forwarded_packet": server_us,
        "client_us_per_received_packet": client_us,
        "client_to_server_ratio": client_to_server,
        "send_slips": slips,
        "max_slip_us": w.max_slip_us,
        "tail_and_slips": tail_and_slips(rows, from, to),
        "load_average_1m": {
            "window_start": sample_at(&o.samples, from as f64).and_then(|s| s.loadavg),
            "window_end": sample_at(&o.samples, to as f64).and_then(|s| s.loadavg),
            "cpus": crate::util::online_cpus(),
        },
        "client_bound": client_bound,
        "client_delayed": contended,
        "warnings": warnings,
        "simulcast": simulcast_summary(o),
    });
    // Only a run over several nodes has these (one node's summary is as it was).
    if let Some(c) = cluster {
        out["e2e_latency_same_node_us"] = c["e2e_latency_same_node_us"].clone();
        out["e2e_latency_cross_node_us"] = c["e2e_latency_cross_node_us"].clone();
        out["server_us_per_relayed_packet"] = c["server_us_per_relayed_packet"].clone();
        out["relay_tx_bytes"] = c["relay_tx_bytes"].clone();
        out["cluster"] = c;
    }
    // Only a run with --turn or --network-change-at has it.
    if o.reach.reported() {
        out["reach"] = crate::reach::summary(o);
    }
    out
}

/// The `simulcast` object (null unless `--simulcast` or `--downlink-limit`):
/// per received video stream over the window, limited and unlimited
/// subscribers apart, plus the bottleneck's counters summed.
fn simulcast_summary(o: &Outcome) -> Value {
    if !o.layers.reported() {
        return Value::Null;
    }
    // The span between the counters' marks: the window's start (as the
    // runner marked it) to the final snapshots (the plan's end, which can
    // be a fraction of a second past the window's last whole second).
    let (from, to) = o.window;
    let (start_ns, end_ns) = o.marks_span_ns.unwrap_or((
        o.start_ns + from * 1_000_000_000,
        o.start_ns + to * 1_000_000_000,
    ));
    let secs = end_ns.saturating_sub(start_ns) as f64 / 1e9;
    let mut streams = Vec::new();
    let mut down = corelay_client::shaper::ShaperStats::default();
    let mut limited_subscribers = 0u64;
    for (j, s) in &o.joined {
        streams.extend(crate::simulcast::windows(
            j.limited,
            j.window_marks.as_ref(),
            s,
            end_ns,
        ));
        if let Some(d) = s.downlink {
            limited_subscribers += 1;
            down.passed += d.passed;
            down.queued += d.queued;
            down.dropped += d.dropped;
            down.dropped_bytes += d.dropped_bytes;
            down.max_delay_us = down.max_delay_us.max(d.max_delay_us);
        }
    }
    let mut v = crate::simulcast::summarize(&streams, secs);
    v["seconds"] = json!((secs * 1000.0).round() / 1000.0);
    v["enabled"] = json!(o.layers.simulcast);
    v["downlink_limit_bps"] = json!(o.layers.downlink_limit_bps);
    v["limited_share"] = json!(o.layers.limited_share);
    v["downlink"] = if o.layers.downlink_limit_bps.is_some() {
        json!({
            "subscribers": limited_subscribers,
            "passed": down.passed,
            "queued": down.queued,
            "dropped": down.dropped,
            "dropped_bytes": down.dropped_bytes,
            "max_delay_us": down.max_delay_us,
        })
    } else {
        Value::Null
    };
    v
}

fn fmt_p(p: &Value, scale: f64, unit: &str) -> String {
    let g = |k: &str| p.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0) / scale;
    format!(
        "{:>8} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}  {unit}",
        p.get("count").and_then(|v| v.as_u64()).unwrap_or(0),
        g("p50"),
        g("p90"),
        g("p99"),
        g("p999"),
        g("p9999"),
        g("max")
    )
}

/// The human table.
pub fn table(s: &Value) -> String {
    let mut t = String::new();
    let w = &s["window"];
    let _ = writeln!(
        t,
        "\n== corelay-bench {}: window {}s..{}s ({} s) ==",
        s["scenario"].as_str().unwrap_or("?"),
        w["from_s"],
        w["to_s"],
        w["seconds"]
    );
    let p = &s["participants"];
    let _ = writeln!(
        t,
        "participants: {} planned, {} joined, {} failed {}, rooms {}",
        p["planned"], p["joined"], p["failed"], p["failed_by_status"], p["rooms"]
    );
    let _ = writeln!(
        t,
        "{:<22} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "", "count", "P50", "P90", "P99", "P99.9", "P99.99", "max"
    );
    let _ = writeln!(
        t,
        "{:<22} {}",
        "e2e latency (video)",
        fmt_p(&s["e2e_latency_us"], 1000.0, "ms")
    );
    if s["cluster"].is_object() {
        for (label, key) in [
            ("  same node", "e2e_latency_same_node_us"),
            ("  cross node", "e2e_latency_cross_node_us"),
        ] {
            let _ = writeln!(t, "{:<22} {}", label, fmt_p(&s[key], 1000.0, "ms"));
        }
    }
    let _ = writeln!(
        t,
        "{:<22} {}",
        "e2e latency (audio)",
        fmt_p(&s["audio_latency_us"], 1000.0, "ms")
    );
    let _ = writeln!(
        t,
        "{:<22} {}",
        "ICE RTT",
        fmt_p(&s["ice_rtt_us"], 1000.0, "ms")
    );
    let _ = writeln!(
        t,
        "{:<22} {}",
        "signaling (POST->201)",
        fmt_p(&s["signaling_time_us"], 1000.0, "ms")
    );
    let _ = writeln!(
        t,
        "{:<22} {}",
        "connect (POST->DTLS)",
        fmt_p(&s["connect_time_us"], 1000.0, "ms")
    );
    let _ = writeln!(
        t,
        "{:<22} {}",
        "join (->first media)",
        fmt_p(&s["join_time_us"], 1000.0, "ms")
    );
    let c = &s["cpu"];
    let f = |v: &Value| {
        v.as_f64()
            .map(|x| format!("{x:.2}"))
            .unwrap_or_else(|| "n/a".into())
    };
    let _ = writeln!(
        t,
        "CPU (cores): server {} (user {}, sys {}, busiest thread {} {}), client {} (busiest driver {})",
        f(&c["server_cores"]),
        f(&c["server_user_cores"]),
        f(&c["server_sys_cores"]),
        f(&c["server_max_thread_cores"]),
        c["server_max_thread"].as_str().unwrap_or(""),
        f(&c["client_cores"]),
        f(&c["client_max_driver_cores"]),
    );
    let th = &s["throughput"];
    let _ = writeln!(
        t,
        "throughput: received {} pkt/s ({} Mbit/s), sent {} pkt/s, server forwarded {} pkt/s",
        th["client_rx_pps"], th["client_rx_mbps"], th["client_tx_pps"], th["server_forwarded_pps"]
    );
    let r = &s["received"];
    let _ = writeln!(
        t,
        "received: {} video frames, {} audio frames, corrupt {}, out-of-order {}, loss {:.5} ({} missing), frames lost {:.5} ({} sent, never complete), NACKs sent {}",
        r["video_frames"],
        r["audio_frames"],
        r["corrupt"],
        r["out_of_order"],
        r["loss_ratio"].as_f64().unwrap_or(0.0),
        r["seq_missing"],
        r["frame_loss_ratio"].as_f64().unwrap_or(0.0),
        r["frames_missing"],
        r["nacks_sent"]
    );
    if let (Some(sv), Some(cl)) = (
        s["server_us_per_forwarded_packet"].as_f64(),
        s["client_us_per_received_packet"].as_f64(),
    ) {
        let _ = writeln!(
            t,
            "cost: server {sv:.2} µs CPU per forwarded packet, client {cl:.2} µs per received packet (client/server {:.2}; {})",
            s["client_to_server_ratio"].as_f64().unwrap_or(0.0),
            match (r["own_path_packets"].as_u64(), r["packets"].as_u64()) {
                (Some(own), Some(all)) if own > 0 && all > 0 => format!(
                    "{:.1} % of packets on the client's own media path",
                    own as f64 * 100.0 / all as f64
                ),
                _ => "media through str0m".to_string(),
            }
        );
    }
    let pr = &s["pairs"];
    if pr["applicable"].as_bool() == Some(true) {
        let _ = writeln!(
            t,
            "pairs: {}/{} publisher->subscriber pairs received frames throughout the window",
            pr["ok"], pr["expected"]
        );
    }
    let cl = &s["cluster"];
    if cl.is_object() {
        let r = &cl["relay"];
        let _ = writeln!(
            t,
            "cluster: {} nodes, participants by node {}; pairs same node {}/{}, cross node {}/{}",
            cl["nodes"],
            cl["participants_by_node"],
            pr["same_node"]["ok"],
            pr["same_node"]["expected"],
            pr["cross_node"]["ok"],
            pr["cross_node"]["expected"],
        );
        let _ = writeln!(
            t,
            "relay: {} datagrams, {} bytes sent between nodes in the window ({} pkt/s, {} Mbit/s; {} bytes over the run); server {} µs CPU per relayed packet, {} µs per forwarded packet, {} µs per packet sent (forwarded + relayed)",
            r["tx_packets"],
            r["tx_bytes"],
            r["tx_pps"],
            r["tx_mbps"],
            r["tx_bytes_run"],
            f(&cl["server_us_per_relayed_packet"]),
            f(&s["server_us_per_forwarded_packet"]),
            f(&cl["server_us_per_sent_packet"]),
        );
    }
    let ts = &s["tail_and_slips"];
    if ts["seconds_with_slips"].as_u64().unwrap_or(0) > 0 {
        let _ = writeln!(
            t,
            "client stalls: {} of {} s had a send slip; largest e2e {:.2} ms in the others, {:.2} ms in those (a stalled client sends what it owes in one burst)",
            ts["seconds_with_slips"],
            ts["seconds_with_slips"].as_u64().unwrap_or(0)
                + ts["seconds_on_time"].as_u64().unwrap_or(0),
            ts["e2e_max_ms_on_time"].as_f64().unwrap_or(0.0),
            ts["e2e_max_ms_with_slips"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(list) = s["outages"].as_array().filter(|l| !l.is_empty()) {
        let _ = writeln!(
            t,
            "!!! OUTAGE: {} silence(s) over {} s inside the window; this run does not measure a working server !!!",
            pr["outage_count"],
            OUTAGE.as_secs()
        );
        for x in list.iter().take(10) {
            let _ = writeln!(
                t,
                "    {} silent from {} s to {} s",
                x["pair"].as_str().unwrap_or("?"),
                x["from"],
                x["to"]
            );
        }
    }
    if s["simulcast"].is_object() {
        t.push_str(&crate::simulcast::table(&s["simulcast"]));
    }
    if s["reach"].is_object() {
        t.push_str(&crate::reach::table(&s["reach"]));
    }
    if let Some(ws) = s["warnings"].as_array() {
        for w in ws {
            let _ = writeln!(t, "WARNING: {}", w.as_str().unwrap_or(""));
        }
    }
    if s["client_bound"].as_bool() == Some(true) {
        let _ = writeln!(
            t,
            "!!! CLIENT-BOUND RUN: these figures describe the load generator, not the server !!!"
        );
    }
    t
}

fn csv_opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x}")).unwrap_or_default()
}

/// Write every output into `dir`; returns the summary.
pub fn write_all(
    o: &Outcome,
    dir: &Path,
    config: Value,
    video_slots: usize,
) -> Result<Value, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let rs = rows(o);
    let s = summary(o, &rs, config, video_slots);
    let w = |name: &str, body: &str| -> Result<(), String> {
        std::fs::write(dir.join(name), body)
            .map_err(|e| format!("{}: {e}", dir.join(name).display()))
    };
    w(
        "summary.json",
        &serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?,
    )?;
    let mut csv = String::from(
        "second,active,rx_video_pps,rx_audio_pps,tx_pps,video_frames,e2e_p50_ms,e2e_p90_ms,e2e_p99_ms,e2e_max_ms,rtt_p50_ms,rtt_p99_ms,server_cpu,client_cpu,server_fwd_pps,slips,corrupt\n",
    );
    for r in &rs {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.second,
            r.active,
            r.rx_video_pps,
            r.rx_audio_pps,
            r.tx_pps,
            r.video_frames,
            r.e2e_p50_ms,
            r.e2e_p90_ms,
            r.e2e_p99_ms,
            r.e2e_max_ms,
            r.rtt_p50_ms,
            r.rtt_p99_ms,
            csv_opt(r.server_cpu),
            csv_opt(r.client_cpu),
            csv_opt(r.server_fwd_pps),
            r.slips,
            r.corrupt
        );
    }
    w("timeseries.csv", &csv)?;

    // Percentile spectra (CSV + SVG).
    let (from, to) = o.window;
    let win = o.series.window(from, to);
    let mut pcsv = String::from("percentile,e2e_ms,ice_rtt_ms,audio_e2e_ms\n");
    for q in [
        0.0, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 0.99999, 1.0,
    ] {
        let v = |h: &hdrhistogram::Histogram<u64>| {
            if h.is_empty() {
                String::new()
            } else {
                format!("{}", h.value_at_quantile(q) as f64 / 1000.0)
            }
        };
        let _ = writeln!(
            pcsv,
            "{},{},{},{}",
            q * 100.0,
            v(&win.video_lat),
            v(&win.ice_rtt),
            v(&win.audio_lat)
        );
    }
    w("percentiles.csv", &pcsv)?;
    // The window's histograms themselves, for `corelay-bench compare` to
    // merge repeats of a run exactly.
    crate::compare::write_hist(&dir.join(crate::compare::E2E_HIST), &win.video_lat)?;
    crate::compare::write_hist(&dir.join(crate::compare::RTT_HIST), &win.ice_rtt)?;
    let title_sfx = format!("{} ({}s window)", o.plan.scenario, to - from);
    w(
        "e2e_latency_percentiles.svg",
        &render(&Chart {
            title: format!("End-to-end latency by percentile, {title_sfx}"),
            x_label: "percentile".into(),
            y_label: "latency (ms)".into(),
            x_axis: XAxis::Percentile,
            lines: vec![
                Line {
                    name: "video e2e".into(),
                    points: percentile_points(&win.video_lat, 1000.0),
                },
                Line {
                    name: "audio e2e".into(),
                    points: percentile_points(&win.audio_lat, 1000.0),
                },
            ],
        }),
    )?;
    w(
        "ice_rtt_percentiles.svg",
        &render(&Chart {
            title: format!("ICE round-trip time by percentile, {title_sfx}"),
            x_label: "percentile".into(),
            y_label: "RTT (ms)".into(),
            x_axis: XAxis::Percentile,
            lines: vec![Line {
                name: "ICE RTT".into(),
                points: percentile_points(&win.ice_rtt, 1000.0),
            }],
        }),
    )?;
    let series = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<(f64, f64)> {
        rs.iter()
            .filter_map(|r| f(r).map(|v| (r.second as f64, v)))
            .collect()
    };
    let has = |r: &Row| r.video_frames > 0;
    w(
        "latency_over_time.svg",
        &render(&Chart {
            title: format!("End-to-end latency per second, {}", o.plan.scenario),
            x_label: "time (s)".into(),
            y_label: "latency (ms)".into(),
            x_axis: XAxis::Linear,
            lines: vec![
                Line {
                    name: "P50".into(),
                    points: series(&|r| has(r).then_some(r.e2e_p50_ms)),
                },
                Line {
                    name: "P99".into(),
                    points: series(&|r| has(r).then_some(r.e2e_p99_ms)),
                },
                Line {
                    name: "max".into(),
                    points: series(&|r| has(r).then_some(r.e2e_max_ms)),
                },
            ],
        }),
    )?;
    w(
        "cpu_over_time.svg",
        &render(&Chart {
            title: format!("CPU and load, {}", o.plan.scenario),
            x_label: "time (s)".into(),
            y_label: "cores / (participants/100)".into(),
            x_axis: XAxis::Linear,
            lines: vec![
                Line {
                    name: "server cores".into(),
                    points: series(&|r| r.server_cpu),
                },
                Line {
                    name: "client cores".into(),
                    points: series(&|r| r.client_cpu),
                },
                Line {
                    name: "participants/100".into(),
                    points: series(&|r| Some(r.active as f64 / 100.0)),
                },
            ],
        }),
    )?;
    // Per received stream (participant x slot).
    let mut st = String::from(
        "participant,room,slot,kind,sources,packets,frames,keyframes,corrupt,out_of_order,seq_missing,ts_backwards,ssrcs,limited,frames_q,frames_h,frames_f,layer_switches,freezes\n",
    );
    for (j, snap) in &o.joined {
        for (mid, sl) in &snap.slots {
            let _ = writeln!(
                st,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                j.name,
                j.room,
                mid,
                sl.kind,
                sl.sources.join(" "),
                sl.packets,
                sl.frames,
                sl.keyframes,
                sl.corrupt,
                sl.out_of_order,
                sl.seq_missing,
                sl.ts_backwards,
                sl.ssrcs.len(),
                u8::from(j.limited),
                sl.frames_by_layer[1],
                sl.frames_by_layer[2],
                sl.frames_by_layer[3],
                sl.layer_switches,
                sl.freezes,
            );
        }
    }
    w("streams.csv", &st)?;
    w("report.txt", &table(&s))?;
    Ok(s)
}

#[cfg(test)]
mod outage_tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn silences_over_two_seconds_inside_the_window_are_outages() {
        // Frames from 0 to 10 s and from 13.5 to 20 s: one 3.5 s silence.
        let spans = [(0, 10 * S), (13 * S + S / 2, 20 * S)];
        assert_eq!(
            outages_in(&spans, 2 * S, 20 * S),
            vec![(10 * S, 13 * S + S / 2)]
        );
        // The same silence outside the window is none of its business.
        assert!(outages_in(&spans, 14 * S, 20 * S).is_empty());
        // 1.9 s is not an outage.
        let spans = [(0, 10 * S), (11 * S + 9 * S / 10, 20 * S)];
        assert!(outages_in(&spans, 0, 20 * S).is_empty());
    }

    #[test]
    fn nothing_at_all_or_a_stop_before_the_end_is_an_outage() {
        assert_eq!(outages_in(&[], 2 * S, 20 * S), vec![(2 * S, 20 * S)]);
        // Every shard killed at 8 s: frames stop, the window goes on.
        assert_eq!(
            outages_in(&[(0, 8 * S)], 2 * S, 20 * S),
            vec![(8 * S, 20 * S)]
        );
        // Started late inside the window.
        assert_eq!(
            outages_in(&[(6 * S, 20 * S)], 2 * S, 20 * S),
            vec![(2 * S, 6 * S)]
        );
    }

    fn row(second: u64, e2e_max_ms: f64, slips: u64) -> Row {
        Row {
            second,
            e2e_max_ms,
            slips,
            ..Row::default()
        }
    }

    #[test]
    fn the_tail_is_split_by_the_seconds_the_client_slipped() {
        let rows = [
            row(0, 50.0, 9), // before the window: ignored
            row(1, 1.5, 0),
            row(2, 9.0, 3),
            row(3, 2.5, 0),
            row(4, 4.0, 1),
            row(5, 80.0, 0), // the window's end is exclusive
        ];
        let t = tail_and_slips(&rows, 1, 5);
        assert_eq!(t["seconds_on_time"], 2);
        assert_eq!(t["seconds_with_slips"], 2);
        assert_eq!(t["e2e_max_ms_on_time"], 2.5);
        assert_eq!(t["e2e_max_ms_with_slips"], 9.0);
        let t = tail_and_slips(&rows, 1, 2);
        assert_eq!(t["seconds_with_slips"], 0);
        assert_eq!(t["e2e_max_ms_with_slips"], 0.0);
    }
}
