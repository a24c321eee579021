//! corelay-bench against Janus (`--dialect janus`): starts Debian's Janus
//! with `scripts/janus` on a free loopback port and runs corelay-bench on
//! it. The `janus` binary must be installed (`scripts/test` installs the
//! package; this test installs nothing): without it each case fails, saying
//! how to install it, unless `SKIP_JANUS=1` is set, which makes each case
//! print `SKIPPED: SKIP_JANUS=1` and pass.
//!
//! - One room of two participants, each publishing video and audio to
//!   Janus on one PeerConnection and subscribing to the other on a second
//!   one, for a few seconds: media went through Janus both ways intact and
//!   was measured (each participant received the other's video and audio
//!   streams, every second of the measurement window carried packets,
//!   nothing corrupt, no outage, e2e latency and ICE RTT samples, and both
//!   sessions left cleanly).
//! - One room of three whose joins are staggered, so publishers come up
//!   after subscriptions exist and are added to them (Janus's `subscribe`
//!   and a renegotiation), checking that every pair receives.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn janus_installed() -> bool {
    Command::new("sh")
        .args(["-c", "command -v janus"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_tcp_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

/// Janus, stopped (SIGTERM, then SIGKILL) when dropped.
struct Janus {
    pid: i32,
}

impl Janus {
    fn start(port: u16, out: &Path) -> Janus {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let o = Command::new(root.join("scripts/janus"))
            .args(["--port", &port.to_string(), "--out"])
            .arg(out)
            .args(["--event-loops", "1"])
            .env("JANUS_NO_INSTALL", "1")
            .output()
            .expect("run scripts/janus");
        let text = String::from_utf8_lossy(&o.stdout);
        // Captured by the test harness: shown when the test fails.
        print!("{}", String::from_utf8_lossy(&o.stderr));
        let pid: i32 = text
            .trim()
            .lines()
            .last()
            .unwrap_or("")
            .parse()
            .unwrap_or(0);
        let j = Janus { pid };
        assert!(
            o.status.success() && pid > 0,
            "scripts/janus failed ({}): {text}{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        j
    }
}

impl Drop for Janus {
    fn drop(&mut self) {
        if self.pid <= 0 {
            return;
        }
        // SAFETY: signals to the process this test started.
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            // SAFETY: signal 0 only checks that the process exists.
            if unsafe { libc::kill(self.pid, 0) } != 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: as above.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }
}

/// The last few KiB of a log, for a failure's output.
fn print_tail(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut from = text.len().saturating_sub(8 << 10);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    println!("--- tail of {}:\n{}", path.display(), &text[from..]);
}

fn count(s: &Value, key: &str) -> u64 {
    s[key]["count"].as_u64().unwrap_or(0)
}

/// Whether the Janus tests run: false (after printing SKIPPED) with
/// `SKIP_JANUS` set to anything but the empty string, as `scripts/test`
/// reads it; a panic when janus is missing otherwise.
fn janus_wanted() -> bool {
    if std::env::var_os("SKIP_JANUS").is_some_and(|v| !v.is_empty()) {
        println!("SKIPPED: SKIP_JANUS=1");
        return false;
    }
    assert!(
        janus_installed(),
        "janus is not installed (no `janus` on PATH): install Debian's package \
         (`sudo apt-get install janus`; scripts/test and `scripts/janus --install` \
         do it), or set SKIP_JANUS=1 to skip the Janus tests"
    );
    true
}

/// What one corelay-bench run wrote.
struct Run {
    /// summary.json.
    summary: Value,
    /// streams.csv: one row per receive slot of each participant.
    streams: Vec<Row>,
    /// timeseries.csv: one row per second.
    seconds: Vec<Row>,
}

/// A CSV row by column name (the bench's CSVs hold no quoted commas).
type Row = std::collections::HashMap<String, String>;

fn read_csv(path: &Path) -> Vec<Row> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn num(row: &Row, col: &str) -> f64 {
    row.get(col)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number in column {col}: {row:?}"))
}

/// Runs corelay-bench `args` against a fresh Janus; what it wrote, or None
/// when `SKIP_JANUS` is set.
fn run_bench(case: &str, args: &[&str]) -> Option<Run> {
    if !janus_wanted() {
        return None;
    }
    let tmp =
        std::env::temp_dir().join(format!("corelay-bench-janus-{case}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let port = free_tcp_port();
    let janus = Janus::start(port, &tmp.join("janus"));
    let out = tmp.join("bench");
    // Its report and progress go to a file, printed below (the harness
    // shows them when the test fails).
    let log_path = tmp.join("bench.log");
    let log = std::fs::File::create(&log_path).expect("bench.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_corelay-bench"))
        .args(["--dialect", "janus", "--url"])
        .arg(format!("http://127.0.0.1:{port}/janus"))
        .arg("--out")
        .arg(&out)
        .args(["--server-pid", &janus.pid.to_string(), "--quiet"])
        .args(args)
        .stdout(log.try_clone().expect("bench.log"))
        .stderr(log)
        .spawn()
        .expect("run corelay-bench");
    // Bounded: the runs plan about 10 s; leave room for a slow machine.
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for corelay-bench") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            print_tail(&log_path);
            print_tail(&tmp.join("janus/janus.log"));
            panic!("corelay-bench did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(out.join("summary.json"));
    drop(janus);
    print_tail(&log_path);
    print_tail(&tmp.join("janus/janus.log"));
    assert!(
        status.success(),
        "corelay-bench failed: {status} (outputs in {})",
        tmp.display()
    );
    let summary: Value =
        serde_json::from_str(&text.expect("summary.json")).expect("summary.json parses");
    let run = Run {
        summary,
        streams: read_csv(&out.join("streams.csv")),
        seconds: read_csv(&out.join("timeseries.csv")),
    };
    let _ = std::fs::remove_dir_all(&tmp);
    Some(run)
}

#[test]
fn one_room_of_two_through_janus() {
    let args = [
        "rooms",
        "--max-rooms",
        "1",
        "--room-size",
        "2",
        "--join-spread",
        "1s",
        "--duration",
        "5s",
        "--audio",
    ];
    let Some(run) = run_bench("two", &args) else {
        return;
    };
    let s = &run.summary;
    assert_eq!(s["config"]["dialect"], "janus");
    let p = &s["participants"];
    assert_eq!(p["joined"], 2, "{p}");
    assert_eq!(p["failed"], 0, "{p}");
    assert_eq!(p["not_connected_at_end"], 0, "{p}");
    assert_eq!(p["leave_failures"], 0, "{p}");
    let rx = &s["received"];
    assert!(rx["packets"].as_u64().unwrap_or(0) > 100, "{rx}");
    assert!(rx["video_frames"].as_u64().unwrap_or(0) > 30, "{rx}");
    assert!(rx["audio_frames"].as_u64().unwrap_or(0) > 30, "{rx}");
    assert_eq!(rx["corrupt"], 0, "{rx}");
    let pairs = &s["pairs"];
    assert_eq!(pairs["expected"], 2, "{pairs}");
    assert_eq!(pairs["ok"], 2, "{pairs}");
    assert_eq!(pairs["outage_count"], 0, "{pairs}");
    assert!(count(s, "e2e_latency_us") > 0, "{}", s["e2e_latency_us"]);
    assert!(
        count(s, "audio_latency_us") > 0,
        "{}",
        s["audio_latency_us"]
    );
    assert!(count(s, "ice_rtt_us") > 0, "{}", s["ice_rtt_us"]);
    let max = s["e2e_latency_us"]["max"].as_u64().unwrap_or(u64::MAX);
    assert!(max < 1_000_000, "{}", s["e2e_latency_us"]);
    assert!(s["cpu"]["server_cores"].is_number(), "{}", s["cpu"]);

    // Both ways: each participant received the other's video and audio
    // through Janus (its subscription's slots), and nothing corrupt.
    for (me, other) in [("r0-p0", "r0-p1"), ("r0-p1", "r0-p0")] {
        for kind in ["video", "audio"] {
            let row = run
                .streams
                .iter()
                .find(|r| r["participant"] == me && r["kind"] == kind && r["sources"] == other)
                .unwrap_or_else(|| {
                    panic!("{me} has no {kind} slot from {other}: {:?}", run.streams)
                });
            assert!(num(row, "packets") > 10.0, "{row:?}");
            assert!(num(row, "frames") > 10.0, "{row:?}");
            assert_eq!(num(row, "corrupt"), 0.0, "{row:?}");
        }
    }
    // And throughout: every second of the measurement window carried
    // video and audio packets.
    let (from, to) = (
        s["window"]["from_s"].as_u64().expect("window.from_s"),
        s["window"]["to_s"].as_u64().expect("window.to_s"),
    );
    assert!(to > from, "{}", s["window"]);
    for sec in from..to {
        let row = run
            .seconds
            .iter()
            .find(|r| r["second"] == sec.to_string())
            .unwrap_or_else(|| panic!("timeseries.csv has no second {sec}: {:?}", run.seconds));
        assert!(num(row, "rx_video_pps") > 0.0, "second {sec}: {row:?}");
        assert!(num(row, "rx_audio_pps") > 0.0, "second {sec}: {row:?}");
    }
}

#[test]
fn a_later_publisher_is_added_to_existing_subscriptions() {
    // Joins spread over 6 s: with this seed the three publishers come up
    // well apart, so the first two subscribe to each other before the third
    // is up, and the third is added to both subscriptions.
    let args = [
        "--seed",
        "7",
        "rooms",
        "--max-rooms",
        "1",
        "--room-size",
        "3",
        "--join-spread",
        "6s",
        "--duration",
        "5s",
    ];
    let Some(run) = run_bench("later", &args) else {
        return;
    };
    let s = &run.summary;
    let p = &s["participants"];
    assert_eq!(p["joined"], 3, "{p}");
    assert_eq!(p["failed"], 0, "{p}");
    assert_eq!(p["not_connected_at_end"], 0, "{p}");
    assert_eq!(p["leave_failures"], 0, "{p}");
    assert!(p["subscription_updates"].as_u64().unwrap_or(0) >= 1, "{p}");
    let rx = &s["received"];
    assert_eq!(rx["corrupt"], 0, "{rx}");
    assert_eq!(s["pairs"]["expected"], 6, "{}", s["pairs"]);
    assert_eq!(s["pairs"]["ok"], 6, "{}", s["pairs"]);
    assert_eq!(s["pairs"]["outage_count"], 0, "{}", s["pairs"]);
    assert!(count(s, "e2e_latency_us") > 0, "{}", s["e2e_latency_us"]);
}
