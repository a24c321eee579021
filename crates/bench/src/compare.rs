//! `corelay-bench compare`: one table (and overlaid percentile plots) from
//! runs of the same scenario against several servers.
//!
//! Input: `LABEL=DIR` pairs, each DIR a finished run (`summary.json` and the
//! window's histograms `e2e_latency.hdr`, `ice_rtt.hdr`, which every run
//! writes). Runs with the same label are repeats of one server: their
//! histograms are merged (percentiles over every frame of every repeat, not
//! an average of percentiles) and their per-packet CPU averaged, with the
//! spread shown. The first label is the baseline every ratio is taken to.
//!
//! Output in `--out`: `comparison.md` (the table, also printed),
//! `comparison.json`, `e2e_latency_percentiles.svg` and
//! `ice_rtt_percentiles.svg` (one line per label, the article's figures).
//!
//! It only reads what runs wrote: it measures nothing itself.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use serde_json::{Value, json};

use crate::svg::{Chart, Line, XAxis, percentile_points, render};

/// File names of the serialized window histograms in a run folder.
pub const E2E_HIST: &str = "e2e_latency.hdr";
/// See [`E2E_HIST`].
pub const RTT_HIST: &str = "ice_rtt.hdr";

/// Serialize a histogram (HdrHistogram V2, the format other HdrHistogram
/// tools read) into `path`.
pub fn write_hist(path: &Path, h: &Histogram<u64>) -> Result<(), String> {
    let mut buf = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut buf)
        .map_err(|e| format!("{}: {e:?}", path.display()))?;
    std::fs::write(path, buf).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_hist(path: &Path) -> Result<Histogram<u64>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("{}: {e:?}", path.display()))
}

/// One server's runs, merged.
struct Group {
    label: String,
    dirs: Vec<PathBuf>,
    e2e: Histogram<u64>,
    rtt: Histogram<u64>,
    us_per_packet: Vec<f64>,
    server_cores: Vec<f64>,
    forwarded_pps: Vec<f64>,
    frame_loss: Vec<f64>,
    /// The host's floor, where a run measured it (scripts/bench does on tpc runs).
    floor_us: Vec<f64>,
    outages: u64,
    client_bound: u64,
    joined: Vec<f64>,
    /// Seconds of the windows with and without a load-client send slip, and
    /// the largest e2e latency in those without (report::tail_and_slips;
    /// `None` until a run has the figure).
    slipped_secs: u64,
    on_time_secs: u64,
    on_time_max_ms: Option<f64>,
}

fn new_hist() -> Result<Histogram<u64>, String> {
    // The runs' own bounds, so that a merge never fails on range.
    let mut h = crate::metrics::new_hist();
    h.auto(true);
    Ok(h)
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn pct(h: &Histogram<u64>, q: f64) -> Option<f64> {
    (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0)
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |x| format!("{x:.2}"))
}

fn ratio(v: Option<f64>, base: Option<f64>) -> String {
    match (v, base) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

fn spread(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match mean(v) {
        Some(m) if v.len() > 1 => format!("{m:.2} ({lo:.2}–{hi:.2})"),
        Some(m) => format!("{m:.2}"),
        None => "–".into(),
    }
}

fn load_group(label: &str, dirs: &[PathBuf]) -> Result<Group, String> {
    let mut g = Group {
        label: label.to_string(),
        dirs: dirs.to_vec(),
        e2e: new_hist()?,
        rtt: new_hist()?,
        us_per_packet: Vec::new(),
        server_cores: Vec::new(),
        forwarded_pps: Vec::new(),
        frame_loss: Vec::new(),
        floor_us: Vec::new(),
        outages: 0,
        client_bound: 0,
        joined: Vec::new(),
        slipped_secs: 0,
        on_time_secs: 0,
        on_time_max_ms: None,
    };
    for d in dirs {
        let text = std::fs::read_to_string(d.join("summary.json"))
            .map_err(|e| format!("{}: {e}", d.join("summary.json").display()))?;
        let s: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", d.display()))?;
        let f = |v: &Value| v.as_f64();
        if let Some(v) = f(&s["server_us_per_forwarded_packet"]) {
            g.us_per_packet.push(v);
        }
        if let Some(v) = f(&s["cpu"]["server_cores"]) {
            g.server_cores.push(v);
        }
        if let Some(v) = f(&s["throughput"]["server_forwarded_pps"])
            .or_else(|| f(&s["throughput"]["client_rx_pps"]))
        {
            g.forwarded_pps.push(v);
        }
        if let Some(v) = f(&s["received"]["frame_loss_ratio"]) {
            g.frame_loss.push(v);
        }
        if let Some(v) = f(&s["floor_us_per_forwarded_packet"]) {
            g.floor_us.push(v);
        }
        if let Some(v) = f(&s["participants"]["joined"]) {
            g.joined.push(v);
        }
        g.outages += s["outages"].as_array().map_or(0, |a| a.len() as u64);
        if s["client_bound"].as_bool() == Some(true) {
            g.client_bound += 1;
        }
        let ts = &s["tail_and_slips"];
        if let (Some(slipped), Some(on_time), Some(max)) = (
            ts["seconds_with_slips"].as_u64(),
            ts["seconds_on_time"].as_u64(),
            f(&ts["e2e_max_ms_on_time"]),
        ) {
            g.slipped_secs += slipped;
            g.on_time_secs += on_time;
            g.on_time_max_ms = Some(g.on_time_max_ms.map_or(max, |m| m.max(max)));
        }
        g.e2e
            .add(read_hist(&d.join(E2E_HIST))?)
            .map_err(|e| format!("{}: {e:?}", d.display()))?;
        g.rtt
            .add(read_hist(&d.join(RTT_HIST))?)
            .map_err(|e| format!("{}: {e:?}", d.display()))?;
    }
    Ok(g)
}

/// Parse `LABEL=DIR` arguments into groups, in first-seen label order.
fn groups(runs: &[String]) -> Result<Vec<(String, Vec<PathBuf>)>, String> {
    let mut out: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for r in runs {
        let (label, dir) = r
            .split_once('=')
            .filter(|(l, d)| !l.is_empty() && !d.is_empty())
            .ok_or_else(|| format!("{r:?}: expected LABEL=DIR"))?;
        match out.iter_mut().find(|(l, _)| l == label) {
            Some((_, v)) => v.push(PathBuf::from(dir)),
            None => out.push((label.to_string(), vec![PathBuf::from(dir)])),
        }
    }
    if out.is_empty() {
        return Err("no runs given (LABEL=DIR ...)".into());
    }
    Ok(out)
}

/// Build the comparison of `runs` into `out`; returns the table.
pub fn compare(runs: &[String], out: &Path, title: &str) -> Result<String, String> {
    let gs = groups(runs)?
        .iter()
        .map(|(l, d)| load_group(l, d))
        .collect::<Result<Vec<_>, _>>()?;
    let base = gs.first().ok_or("no runs")?;
    let b_us = mean(&base.us_per_packet);
    let b_p50 = pct(&base.e2e, 0.5);
    let b_p99 = pct(&base.e2e, 0.99);
    let b_p9999 = pct(&base.e2e, 0.9999);
    // The floor is the host's, whichever server's run measured it.
    let floor_all: Vec<f64> = gs.iter().flat_map(|g| g.floor_us.iter().copied()).collect();
    let floor = mean(&floor_all);
    let mut t = String::new();
    let _ = writeln!(t, "{title}\n");
    let _ = writeln!(
        t,
        "| server | runs | joined | fwd pkt/s | server cores | server µs/fwd pkt | ratio | × floor | e2e P50 ms | P99 | P99.9 | P99.99 | max | P99.99 ratio | ICE RTT P99 ms | frame loss | outages |"
    );
    let _ = writeln!(
        t,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let mut rows = Vec::new();
    for g in &gs {
        let us = mean(&g.us_per_packet);
        let p9999 = pct(&g.e2e, 0.9999);
        let _ = writeln!(
            t,
            "| {} | {}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            g.label,
            g.dirs.len(),
            if g.client_bound > 0 {
                format!(" ({} client-bound)", g.client_bound)
            } else {
                String::new()
            },
            mean(&g.joined).map_or("–".into(), |v| format!("{v:.0}")),
            mean(&g.forwarded_pps).map_or("–".into(), |v| format!("{v:.0}")),
            spread(&g.server_cores),
            spread(&g.us_per_packet),
            ratio(us, b_us),
            ratio(us, floor),
            ms(pct(&g.e2e, 0.5)),
            ms(pct(&g.e2e, 0.99)),
            ms(pct(&g.e2e, 0.999)),
            ms(p9999),
            ms(pct(&g.e2e, 1.0)),
            ratio(p9999, b_p9999),
            ms(pct(&g.rtt, 0.99)),
            mean(&g.frame_loss).map_or("–".into(), |v| format!("{v:.5}")),
            g.outages,
        );
        rows.push(json!({
            "label": g.label,
            // Relative to the comparison's folder where they are in it (as
            // scripts/compare puts them), so a copied result names its runs.
            "runs": g
                .dirs
                .iter()
                .map(|d| d.strip_prefix(out).unwrap_or(d).display().to_string())
                .collect::<Vec<_>>(),
            "client_bound_runs": g.client_bound,
            "server_us_per_forwarded_packet": us,
            "server_us_per_forwarded_packet_runs": g.us_per_packet,
            "server_cores": mean(&g.server_cores),
            "forwarded_pps": mean(&g.forwarded_pps),
            "e2e_ms": {
                "count": g.e2e.len(),
                "p50": pct(&g.e2e, 0.5), "p90": pct(&g.e2e, 0.9), "p99": pct(&g.e2e, 0.99),
                "p999": pct(&g.e2e, 0.999), "p9999": p9999, "max": pct(&g.e2e, 1.0),
            },
            "ice_rtt_ms": {
                "count": g.rtt.len(),
                "p50": pct(&g.rtt, 0.5), "p99": pct(&g.rtt, 0.99),
                "p9999": pct(&g.rtt, 0.9999), "max": pct(&g.rtt, 1.0),
            },
            "frame_loss_ratio": mean(&g.frame_loss),
            "seconds_with_slips": g.slipped_secs,
            "seconds_on_time": g.on_time_secs,
            "e2e_max_ms_on_time": g.on_time_max_ms,
            "floor_ratio": us.zip(floor).map(|(a, b)| a / b),
            "outages": g.outages,
            "ratio_to_baseline": {
                "server_us_per_forwarded_packet": us.zip(b_us).map(|(a, b)| a / b),
                "e2e_p50": pct(&g.e2e, 0.5).zip(b_p50).map(|(a, b)| a / b),
                "e2e_p99": pct(&g.e2e, 0.99).zip(b_p99).map(|(a, b)| a / b),
                "e2e_p9999": p9999.zip(b_p9999).map(|(a, b)| a / b),
            },
        }));
    }
    if let Some(fl) = floor {
        let _ = writeln!(
            t,
            "\nThe host's floor (corelay-bench floor: recvmmsg, SRTP decrypt, per copy SRTP encrypt + sendmmsg, no WebRTC logic): {fl:.2} µs per forwarded packet, mean of {} measurements in this run; `× floor` is each server's cost over it.",
            floor_all.len()
        );
    }
    let stalls: Vec<String> = gs
        .iter()
        .filter_map(|g| {
            let max = g.on_time_max_ms?;
            Some(format!(
                "{} {} of {} s, {max:.2} ms",
                g.label,
                g.slipped_secs,
                g.slipped_secs + g.on_time_secs
            ))
        })
        .collect();
    if !stalls.is_empty() {
        let _ = writeln!(
            t,
            "\nLoad-client stalls: the seconds of the windows in which it sent a frame more than 5 ms late (it then sends what it owes in one burst, which queues in the server), and the largest e2e latency in the other seconds: {}.",
            stalls.join("; ")
        );
    }
    let _ = writeln!(
        t,
        "\nRatios are to `{}`. Percentiles merge every repeat's histogram (HdrHistogram, over each run's measurement window); CPU per forwarded packet is the mean of the runs (spread in brackets).",
        base.label
    );
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let w = |name: &str, body: &str| {
        std::fs::write(out.join(name), body)
            .map_err(|e| format!("{}: {e}", out.join(name).display()))
    };
    w("comparison.md", &t)?;
    w(
        "comparison.json",
        &serde_json::to_string_pretty(&json!({
            "title": title,
            "baseline": base.label,
            "floor_us_per_forwarded_packet": floor,
            "servers": rows,
        }))
        .map_err(|e| e.to_string())?,
    )?;
    let chart = |what: &str, unit: &str, pick: fn(&Group) -> &Histogram<u64>| Chart {
        title: format!("{what} by percentile: {title}"),
        x_label: "percentile".into(),
        y_label: unit.into(),
        x_axis: XAxis::Percentile,
        lines: gs
            .iter()
            .map(|g| Line {
                name: g.label.clone(),
                points: percentile_points(pick(g), 1000.0),
            })
            .collect(),
    };
    w(
        "e2e_latency_percentiles.svg",
        &render(&chart("End-to-end latency", "latency (ms)", |g| &g.e2e)),
    )?;
    w(
        "ice_rtt_percentiles.svg",
        &render(&chart("ICE round-trip time", "RTT (ms)", |g| &g.rtt)),
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_dir(root: &Path, name: &str, us: f64, lat_ms: &[u64]) -> PathBuf {
        let d = root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let s = json!({
            "server_us_per_forwarded_packet": us,
            "floor_us_per_forwarded_packet": 5.0,
            "cpu": {"server_cores": 0.5},
            "throughput": {"server_forwarded_pps": 1000.0},
            "received": {"frame_loss_ratio": 0.0},
            "participants": {"joined": 8},
            "outages": [],
            "client_bound": false,
            // One second in ten with a client stall; the others' largest e2e
            // is the run's largest latency.
            "tail_and_slips": {
                "seconds_with_slips": 1,
                "seconds_on_time": 9,
                "e2e_max_ms_on_time": lat_ms.iter().max().copied().unwrap_or(0) as f64,
                "e2e_max_ms_with_slips": 50.0,
            },
        });
        std::fs::write(d.join("summary.json"), s.to_string()).unwrap();
        let mut h = new_hist().unwrap();
        for &v in lat_ms {
            h.record(v * 1000).unwrap();
        }
        write_hist(&d.join(E2E_HIST), &h).unwrap();
        write_hist(&d.join(RTT_HIST), &h).unwrap();
        d
    }

    #[test]
    fn repeats_merge_and_ratios_are_to_the_first_label() {
        let root = std::env::temp_dir().join(format!("corelay-compare-{}", std::process::id()));
        let a1 = run_dir(&root, "a1", 10.0, &[1, 1, 1, 1]);
        let b1 = run_dir(&root, "b1", 30.0, &[4, 4, 4, 4]);
        let a2 = run_dir(&root, "a2", 12.0, &[2, 2, 2, 2]);
        let runs = [
            format!("tpc={}", a1.display()),
            format!("ws={}", b1.display()),
            format!("tpc={}", a2.display()),
        ];
        let out = root.join("out");
        let t = compare(&runs, &out, "test").unwrap();
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("comparison.json")).unwrap())
                .unwrap();
        let s = &v["servers"];
        assert_eq!(s[0]["label"], "tpc");
        assert_eq!(s[0]["e2e_ms"]["count"], 8, "both tpc repeats merged");
        assert!((s[0]["server_us_per_forwarded_packet"].as_f64().unwrap() - 11.0).abs() < 1e-9);
        let r = s[1]["ratio_to_baseline"]["server_us_per_forwarded_packet"]
            .as_f64()
            .unwrap();
        assert!((r - 30.0 / 11.0).abs() < 1e-9, "{r}");
        assert!(t.contains("| ws | 1 |"), "{t}");
        let fr = s[0]["floor_ratio"].as_f64().unwrap();
        assert!((fr - 11.0 / 5.0).abs() < 1e-9, "{fr}");
        // Stalls add up over repeats; the on-time maximum is the largest.
        assert!(
            t.contains("tpc 2 of 20 s, 2.00 ms; ws 1 of 10 s, 4.00 ms."),
            "{t}"
        );
        assert_eq!(s[0]["seconds_with_slips"], 2);
        assert_eq!(s[0]["e2e_max_ms_on_time"], 2.0);
        let svg = std::fs::read_to_string(out.join("e2e_latency_percentiles.svg")).unwrap();
        assert!(svg.contains("tpc") && svg.contains("ws"));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn bad_arguments_are_errors_not_panics() {
        assert!(groups(&[]).is_err());
        assert!(groups(&["nolabel".into()]).is_err());
        assert!(groups(&["=dir".into()]).is_err());
        let missing = compare(&["x=/nonexistent/run".into()], Path::new("/tmp"), "t");
        assert!(missing.unwrap_err().contains("summary.json"));
    }
}
