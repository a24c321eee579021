//! Runs tiny `rooms` and `speakers` scenarios of the real `corelay-bench`
//! binary against a real `corelay` server started on free loopback ports,
//! and checks the report. Nothing here asserts a speed.
//!
//! The server binary: `$CORELAY_BIN`, else `corelay` next to this test's
//! target directory (`cargo build -p corelay` puts it there; a workspace
//! `cargo test` builds it anyway for the server's own tests).

#![allow(clippy::collapsible_if)]

use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn corelay_bin() -> PathBuf {
    if let Ok(p) = std::env::var("CORELAY_BIN") {
        return PathBuf::from(p);
    }
    let mut candidates = Vec::new();
    if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(t).join("debug/corelay"));
    }
    // target/debug/deps/<test> -> target/debug/corelay
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent().and_then(|d| d.parent()) {
            candidates.push(dir.join("corelay"));
        }
    }
    for c in &candidates {
        if c.is_file() {
            return c.clone();
        }
    }
    panic!(
        "corelay server binary not found (tried {candidates:?}); run `cargo build -p corelay` or set CORELAY_BIN"
    );
}

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server() -> Server {
    let http = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let udp = (0..200)
        .map(|_| fastrand::u16(20_000..60_000))
        .find(|p| UdpSocket::bind(("127.0.0.1", *p)).is_ok())
        .expect("free UDP port");
    let child = Command::new(corelay_bin())
        .args([
            "--http",
            &format!("127.0.0.1:{http}"),
            "--udp-port",
            &udp.to_string(),
        ])
        .args([
            "--public-ip",
            "127.0.0.1",
            "--bind-ip",
            "127.0.0.1",
            "--shards",
            "1",
            "--no-pin",
            "--log",
            "warn",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start corelay");
    let s = Server {
        child,
        url: format!("http://127.0.0.1:{http}"),
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while corelay_client::signal::get_json(&s.url, "/healthz").is_err() {
        assert!(Instant::now() < deadline, "corelay did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    s
}

fn run_bench(server: &Server, out: &std::path::Path, args: &[&str]) -> Value {
    let pid = server.child.id().to_string();
    let st = Command::new(env!("CARGO_BIN_EXE_corelay-bench"))
        .args([
            "--url",
            &server.url,
            "--out",
            out.to_str().unwrap(),
            "--server-pid",
            &pid,
            "--quiet",
        ])
        .args(args)
        .status()
        .expect("run corelay-bench");
    assert!(st.success(), "corelay-bench failed: {st}");
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json parses")
}

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("corelay-bench-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
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
    assert_eq!(s["pairs"]["applicable"], true);
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
    let server = start_server();

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
