//! Output formats: the live table, one JSON object per interval, and the
//! Prometheus text exposition.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::model::{BUCKET_EDGES_US, NBUCKETS, Report, Snapshot, SocketStats, bucket_label};

fn opt_round(v: Option<f64>) -> Value {
    match v {
        Some(x) if x.is_finite() => json!((x * 1000.0).round() / 1000.0),
        _ => Value::Null,
    }
}

fn fmt_us(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(us) if us < 10_000.0 => format!("{us:.1}"),
        Some(us) => format!("{us:.0}"),
    }
}

fn pid_str(s: &SocketStats) -> String {
    if s.pid == 0 {
        "-".into()
    } else {
        s.pid.to_string()
    }
}

fn comm_str(s: &SocketStats) -> &str {
    if s.comm.is_empty() { "-" } else { &s.comm }
}

/// The live table of one interval: one line per socket active in it.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "corelay-dwell  interval {:.2}s  sockets {}  reads {}  enqueues {}",
        r.interval_s,
        r.sockets.len(),
        r.counters.reads,
        r.counters.enqueue_events
    );
    let _ = write!(
        out,
        "{:>6} {:>8} {:<15} {:>8} {:>9} {:>9} {:>6} {:>10}",
        "PORT", "PID", "COMM", "COUNT", "MEAN_us", "MAXALL_us", "QUEUED", "OLDEST_us"
    );
    for i in 0..NBUCKETS {
        let _ = write!(out, " {:>9}", bucket_label(i));
    }
    let _ = writeln!(out, " {:>7}", "UNKNOWN");
    for s in &r.sockets {
        let t = &s.total;
        let _ = write!(
            out,
            "{:>6} {:>8} {:<15} {:>8} {:>9} {:>9} {:>6} {:>10}",
            t.port,
            pid_str(t),
            comm_str(t),
            s.delta.count,
            fmt_us(s.delta.mean_us()),
            fmt_us((t.count > 0).then(|| t.max_ns as f64 / 1000.0)),
            t.queued,
            fmt_us(s.oldest_age_us)
        );
        for b in s.delta.buckets {
            let _ = write!(out, " {b:>9}");
        }
        let _ = writeln!(out, " {:>7}", s.delta.unknown + s.delta.unmatched);
    }
    if r.sockets.is_empty() {
        let _ = writeln!(out, "  (no traced socket was read in this interval)");
    }
    if r.counters.fifo_fail > 0 || r.counters.stats_full > 0 {
        let _ = writeln!(
            out,
            "  warning: {} socket storage failures, {} reads on sockets not recorded (stats map full)",
            r.counters.fifo_fail, r.counters.stats_full
        );
    }
    out
}

/// One JSON object (a single line) describing the interval.
pub fn json_line(r: &Report) -> String {
    let sockets: Vec<Value> = r
        .sockets
        .iter()
        .map(|s| {
            let t = &s.total;
            json!({
                "cookie": t.cookie,
                "port": t.port,
                "family": t.family_name(),
                "pid": (t.pid != 0).then_some(t.pid),
                "comm": (!t.comm.is_empty()).then(|| t.comm.clone()),
                "count": s.delta.count,
                "mean_us": opt_round(s.delta.mean_us()),
                "sum_us": opt_round(Some(s.delta.sum_ns as f64 / 1000.0)),
                "buckets": s.delta.buckets,
                "unknown": s.delta.unknown,
                "unmatched": s.delta.unmatched,
                "trimmed": s.delta.trimmed,
                "overflow": s.delta.overflow,
                "queued": t.queued,
                "oldest_queued_age_us": opt_round(s.oldest_age_us),
                "total": {
                    "count": t.count,
                    "mean_us": opt_round(t.mean_us()),
                    "sum_us": opt_round(Some(t.sum_ns as f64 / 1000.0)),
                    "max_us": opt_round((t.count > 0).then(|| t.max_ns as f64 / 1000.0)),
                    "buckets": t.buckets,
                    "unknown": t.unknown,
                    "unmatched": t.unmatched,
                    "trimmed": t.trimmed,
                    "overflow": t.overflow,
                },
            })
        })
        .collect();
    let counters = |c: &crate::model::Counters| {
        json!({
            "enqueue_events": c.enqueue_events,
            "reads": c.reads,
            "pushed": c.pushed,
            "fifo_fail": c.fifo_fail,
            "stats_full": c.stats_full,
        })
    };
    json!({
        "time": opt_round(Some(r.unix_time)),
        "interval_s": opt_round(Some(r.interval_s)),
        "bucket_edges_us": BUCKET_EDGES_US,
        "sockets": sockets,
        "events": counters(&r.counters),
        "events_total": counters(&r.counters_total),
    })
    .to_string()
}

/// Escapes a Prometheus label value.
fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c if c.is_control() => {}
            c => s.push(c),
        }
    }
    s
}

fn le(i: usize) -> String {
    if i < BUCKET_EDGES_US.len() {
        // Seconds, exactly: 10 µs = 0.00001.
        let us = BUCKET_EDGES_US[i];
        let s = format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
        s.trim_end_matches('0').to_string()
    } else {
        "+Inf".into()
    }
}

/// Prometheus text exposition (format 0.0.4) of the cumulative statistics.
pub fn prometheus(snap: &Snapshot) -> String {
    let mut out = String::new();
    let labels = |s: &SocketStats| {
        format!(
            "port=\"{}\",family=\"{}\",pid=\"{}\",comm=\"{}\",cookie=\"{}\"",
            s.port,
            s.family_name(),
            s.pid,
            label(&s.comm),
            s.cookie
        )
    };
    out.push_str(
        "# HELP corelay_dwell_seconds Time a UDP datagram waited in its socket receive queue \
         before the application read it (eBPF, sk_data_ready to sock_recv_length).\n\
         # TYPE corelay_dwell_seconds histogram\n",
    );
    for s in snap.sockets.values() {
        let l = labels(s);
        let mut cum = 0u64;
        for i in 0..NBUCKETS {
            cum += s.buckets[i];
            let _ = writeln!(
                out,
                "corelay_dwell_seconds_bucket{{{l},le=\"{}\"}} {cum}",
                le(i)
            );
        }
        let _ = writeln!(
            out,
            "corelay_dwell_seconds_sum{{{l}}} {}",
            s.sum_ns as f64 / 1e9
        );
        let _ = writeln!(out, "corelay_dwell_seconds_count{{{l}}} {}", s.count);
    }
    type Gauge = (
        &'static str,
        &'static str,
        &'static str,
        fn(&SocketStats, u64) -> f64,
    );
    let gauges: [Gauge; 6] = [
        (
            "corelay_dwell_max_seconds",
            "gauge",
            "Largest dwell time seen on the socket.",
            |s, _| s.max_ns as f64 / 1e9,
        ),
        (
            "corelay_dwell_queued_datagrams",
            "gauge",
            "Datagrams in the socket receive queue at the last traced event.",
            |s, _| f64::from(s.queued),
        ),
        (
            "corelay_dwell_oldest_queued_age_seconds",
            "gauge",
            "Age of the oldest datagram still queued (0 if none or unknown).",
            |s, now| {
                if s.queued > 0 && s.oldest_ns > 0 && now > s.oldest_ns {
                    (now - s.oldest_ns) as f64 / 1e9
                } else {
                    0.0
                }
            },
        ),
        (
            "corelay_dwell_unknown_total",
            "counter",
            "Reads of datagrams queued before tracing began or with no matching enqueue.",
            |s, _| (s.unknown + s.unmatched) as f64,
        ),
        (
            "corelay_dwell_resync_trimmed_total",
            "counter",
            "Enqueue timestamps discarded to resynchronise with the real queue length.",
            |s, _| s.trimmed as f64,
        ),
        (
            "corelay_dwell_overflow_total",
            "counter",
            "Datagrams whose enqueue time was folded into a mean because the per-socket FIFO was full.",
            |s, _| s.overflow as f64,
        ),
    ];
    for (name, kind, help, f) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in snap.sockets.values() {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(s), f(s, snap.mono_ns));
        }
    }
    let c = &snap.counters;
    let _ = writeln!(
        out,
        "# HELP corelay_dwell_events_total Events seen by the BPF program on traced sockets.\n\
         # TYPE corelay_dwell_events_total counter\n\
         corelay_dwell_events_total{{event=\"enqueue\"}} {}\n\
         corelay_dwell_events_total{{event=\"read\"}} {}\n\
         corelay_dwell_events_total{{event=\"stamped\"}} {}\n\
         corelay_dwell_events_total{{event=\"storage_failure\"}} {}\n\
         corelay_dwell_events_total{{event=\"stats_map_full\"}} {}",
        c.enqueue_events, c.reads, c.pushed, c.fifo_fail, c.stats_full
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Counters, Delta, SocketInterval};

    fn sample() -> (Report, Snapshot) {
        let mut s = SocketStats {
            cookie: 42,
            port: 3478,
            family: 2,
            pid: 1234,
            comm: "corelay \"x\"".into(),
            count: 4,
            sum_ns: 4_000_000,
            max_ns: 2_500_000,
            ..SocketStats::default()
        };
        s.buckets[4] = 3;
        s.buckets[5] = 1;
        let mut d = Delta {
            count: 2,
            sum_ns: 1_500_000,
            ..Delta::default()
        };
        d.buckets[4] = 1;
        d.buckets[5] = 1;
        let report = Report {
            unix_time: 1_700_000_000.5,
            interval_s: 1.0,
            sockets: vec![SocketInterval {
                total: s.clone(),
                delta: d,
                oldest_age_us: None,
            }],
            counters: Counters {
                reads: 2,
                ..Counters::default()
            },
            counters_total: Counters {
                reads: 4,
                ..Counters::default()
            },
        };
        let mut snap = Snapshot::default();
        snap.sockets.insert(42, s);
        (report, snap)
    }

    #[test]
    fn json_line_is_one_parsable_object() {
        let (r, _) = sample();
        let line = json_line(&r);
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        let s = &v["sockets"][0];
        assert_eq!(s["port"], 3478);
        assert_eq!(s["pid"], 1234);
        assert_eq!(s["count"], 2);
        assert_eq!(s["mean_us"], 750.0);
        assert_eq!(s["buckets"].as_array().unwrap().len(), 9);
        assert_eq!(s["total"]["count"], 4);
        assert_eq!(s["total"]["mean_us"], 1000.0);
        assert_eq!(s["total"]["max_us"], 2500.0);
        assert_eq!(v["bucket_edges_us"].as_array().unwrap().len(), 8);
        assert_eq!(v["events"]["reads"], 2);
    }

    #[test]
    fn table_has_a_line_per_socket() {
        let (r, _) = sample();
        let t = table(&r);
        assert!(t.contains("PORT"));
        assert!(t.contains("3478"));
        assert!(t.contains("750.0"));
        assert!(t.contains(">=50ms"));
    }

    #[test]
    fn prometheus_histogram_is_cumulative_with_exact_edges() {
        let (_, snap) = sample();
        let p = prometheus(&snap);
        assert!(p.contains("# TYPE corelay_dwell_seconds histogram"));
        assert!(p.contains("le=\"0.00001\"} 0"));
        assert!(p.contains("le=\"0.0005\"} 0"));
        assert!(p.contains("le=\"0.001\"} 3"));
        assert!(p.contains("le=\"0.005\"} 4"));
        assert!(p.contains("le=\"0.05\"} 4"));
        assert!(p.contains("le=\"+Inf\"} 4"));
        assert!(p.contains("comm=\"corelay \\\"x\\\"\""));
        assert!(p.contains("corelay_dwell_seconds_sum{port=\"3478\""));
        assert!(
            p.contains("corelay_dwell_seconds_count{port=\"3478\",family=\"ipv4\",pid=\"1234\"")
        );
        for line in p.lines().filter(|l| !l.starts_with('#')) {
            let (_, v) = line.rsplit_once(' ').unwrap();
            v.parse::<f64>().unwrap();
        }
    }

    #[test]
    fn le_values() {
        let les: Vec<String> = (0..NBUCKETS).map(le).collect();
        assert_eq!(
            les,
            [
                "0.00001", "0.00005", "0.0001", "0.0005", "0.001", "0.005", "0.01", "0.05", "+Inf"
            ]
        );
    }
}
