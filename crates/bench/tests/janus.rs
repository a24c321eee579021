//! corelay-bench against Janus (`--dialect janus`): starts Debian's Janus
//! with `scripts/janus` on a free loopback port when the `janus` binary is
//! installed (this test installs nothing: without it, each case prints
//! `SKIPPED: janus not installed` and passes) and runs corelay-bench on it:
//! one room of two participants for a few seconds, checking that media went
//! through Janus intact and was measured (frames received, nothing corrupt,
//! both pairs received, e2e latency and ICE RTT samples); and one room of
//! three whose joins are staggered, so publishers come up after
//! subscriptions exist and are added to them (Janus's `subscribe` and a
//! renegotiation), checking that every pair receives.

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
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/janus");
        let text = String::from_utf8_lossy(&o.stdout);
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
            "scripts/janus failed ({}): {text}",
            o.status
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

fn count(s: &Value, key: &str) -> u64 {
    s[key]["count"].as_u64().unwrap_or(0)
}

/// Runs corelay-bench `args` against a fresh Janus; its summary.json, or
/// None when janus is not installed.
fn run_bench(case: &str, args: &[&str]) -> Option<Value> {
    if !janus_installed() {
        println!("SKIPPED: janus not installed");
        return None;
    }
    let tmp =
        std::env::temp_dir().join(format!("corelay-bench-janus-{case}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let port = free_tcp_port();
    let janus = Janus::start(port, &tmp.join("janus"));
    let out = tmp.join("bench");
    let mut child = Command::new(env!("CARGO_BIN_EXE_corelay-bench"))
        .args(["--dialect", "janus", "--url"])
        .arg(format!("http://127.0.0.1:{port}/janus"))
        .arg("--out")
        .arg(&out)
        .args(["--server-pid", &janus.pid.to_string(), "--quiet"])
        .args(args)
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
            panic!("corelay-bench did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(out.join("summary.json"));
    drop(janus);
    assert!(status.success(), "corelay-bench failed: {status}");
    let s: Value = serde_json::from_str(&text.expect("summary.json")).expect("summary.json parses");
    let _ = std::fs::remove_dir_all(&tmp);
    Some(s)
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
    ];
    let Some(s) = run_bench("two", &args) else {
        return;
    };
    assert_eq!(s["config"]["dialect"], "janus");
    assert_eq!(s["participants"]["joined"], 2, "{}", s["participants"]);
    assert_eq!(s["participants"]["failed"], 0, "{}", s["participants"]);
    let rx = &s["received"];
    assert!(rx["video_frames"].as_u64().unwrap_or(0) > 30, "{rx}");
    assert_eq!(rx["corrupt"], 0, "{rx}");
    assert_eq!(s["pairs"]["expected"], 2, "{}", s["pairs"]);
    assert_eq!(s["pairs"]["ok"], 2, "{}", s["pairs"]);
    assert!(count(&s, "e2e_latency_us") > 0, "{}", s["e2e_latency_us"]);
    assert!(count(&s, "ice_rtt_us") > 0, "{}", s["ice_rtt_us"]);
    let max = s["e2e_latency_us"]["max"].as_u64().unwrap_or(u64::MAX);
    assert!(max < 1_000_000, "{}", s["e2e_latency_us"]);
    assert!(s["cpu"]["server_cores"].is_number(), "{}", s["cpu"]);
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
    let Some(s) = run_bench("later", &args) else {
        return;
    };
    let p = &s["participants"];
    assert_eq!(p["joined"], 3, "{p}");
    assert_eq!(p["failed"], 0, "{p}");
    assert!(p["subscription_updates"].as_u64().unwrap_or(0) >= 1, "{p}");
    let rx = &s["received"];
    assert_eq!(rx["corrupt"], 0, "{rx}");
    assert_eq!(s["pairs"]["expected"], 6, "{}", s["pairs"]);
    assert_eq!(s["pairs"]["ok"], 6, "{}", s["pairs"]);
    assert_eq!(s["pairs"]["outage_count"], 0, "{}", s["pairs"]);
    assert!(count(&s, "e2e_latency_us") > 0, "{}", s["e2e_latency_us"]);
}
