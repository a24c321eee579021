//! Shared by the tracing tests: runs the `corelay-dwell` binary, waits until
//! its programs are attached, collects its `--json` lines, and turns "BPF
//! cannot load here" into `SKIPPED: reason` (or a failure with
//! CORELAY_DWELL_REQUIRE_BPF=1).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_corelay-dwell")
}

/// Writes past libtest's output capture, so a skip is always visible.
pub fn say(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// Prints `SKIPPED: reason`, or panics when CORELAY_DWELL_REQUIRE_BPF=1.
pub fn skip(reason: &str) {
    if std::env::var_os("CORELAY_DWELL_REQUIRE_BPF").is_some_and(|v| v == "1") {
        panic!("BPF tracing required (CORELAY_DWELL_REQUIRE_BPF=1) but unavailable: {reason}");
    }
    say(&format!("SKIPPED: {reason}"));
}

enum Line {
    Out(String),
    Err(String),
}

/// A running tracer. Killed when dropped.
pub struct Tracer {
    child: Child,
    lines: Receiver<Line>,
    pub stderr: Vec<String>,
    pub json: Vec<Value>,
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the tracer and waits until both programs are attached.
/// `Err(reason)` when BPF cannot load here.
pub fn start(args: &[&str]) -> Result<Tracer, String> {
    let mut child = Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn corelay-dwell");
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("stdout");
    let tx2 = tx.clone();
    thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx2.send(Line::Out(l));
        }
    });
    let err = child.stderr.take().expect("stderr");
    thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(Line::Err(l));
        }
    });
    let mut t = Tracer {
        child,
        lines: rx,
        stderr: Vec::new(),
        json: Vec::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match t.lines.recv_timeout(Duration::from_millis(100)) {
            Ok(Line::Err(l)) => {
                let ready = l.contains("tracing UDP ports");
                t.stderr.push(l);
                if ready {
                    return Ok(t);
                }
            }
            Ok(Line::Out(l)) => t.push_out(l),
            Err(_) => {}
        }
        if let Ok(Some(status)) = t.child.try_wait() {
            // Drain what it said before dying.
            thread::sleep(Duration::from_millis(100));
            while let Ok(l) = t.lines.try_recv() {
                if let Line::Err(l) = l {
                    t.stderr.push(l);
                }
            }
            let said = t.stderr.join("\n");
            if status.code() == Some(corelay_dwell::EXIT_BPF_UNAVAILABLE.into()) {
                return Err(said);
            }
            panic!("corelay-dwell exited with {status} before attaching:\n{said}");
        }
        assert!(
            Instant::now() < deadline,
            "corelay-dwell did not attach within 60 s:\n{}",
            t.stderr.join("\n")
        );
    }
}

impl Tracer {
    /// The process id of the tracer.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn push_out(&mut self, l: String) {
        let v: Value = serde_json::from_str(&l)
            .unwrap_or_else(|e| panic!("tracer printed a line that is not JSON ({e}): {l}"));
        self.json.push(v);
    }

    /// SIGINT, then wait for the final interval and the exit.
    pub fn stop(&mut self) {
        // SAFETY: kill() on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(Line::Out(l)) => self.push_out(l),
                Ok(Line::Err(l)) => self.stderr.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            assert!(Instant::now() < deadline, "tracer did not stop on SIGINT");
        }
        let status = self.child.wait().expect("wait");
        assert!(
            status.success(),
            "tracer exit {status}: {}",
            self.stderr.join("\n")
        );
    }

    /// The last interval's entry of the socket bound to `port`.
    pub fn last_for(&self, port: u16) -> Option<&Value> {
        self.json.iter().rev().find_map(|v| {
            v["sockets"]
                .as_array()?
                .iter()
                .find(|s| s["port"].as_u64() == Some(u64::from(port)))
        })
    }

    /// The tracer's own counters since it started (`events_total` of its
    /// last line): reads its program saw, FIFO and stats-map failures.
    pub fn events_total(&self) -> Option<&Value> {
        self.json.last().map(|v| &v["events_total"])
    }

    /// Sum over intervals of the per-interval counts of `port`.
    pub fn interval_count_sum(&self, port: u16) -> u64 {
        self.json
            .iter()
            .filter_map(|v| {
                v["sockets"]
                    .as_array()?
                    .iter()
                    .find(|s| s["port"].as_u64() == Some(u64::from(port)))
                    .and_then(|s| s["count"].as_u64())
            })
            .sum()
    }
}
