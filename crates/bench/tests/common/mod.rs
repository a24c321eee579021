//! What the load client's end-to-end tests share: running the real
//! `corelay-bench` binary against a [`Server`] and reading its summary.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use corelay_testkit::Server;
use serde_json::Value;

/// Runs `corelay-bench` against `server` with `args` (its global options,
/// then the scenario's), writing to `out`, and returns its summary.json.
pub fn run_bench(server: &Server, out: &Path, args: &[&str]) -> Value {
    let pid = server.pid().to_string();
    let st = bench_command(server, out, &pid, args)
        .status()
        .expect("run corelay-bench");
    assert!(st.success(), "corelay-bench failed: {st}");
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json parses")
}

/// The `corelay-bench` command [`run_bench`] runs, to start it yourself.
pub fn bench_command(server: &Server, out: &Path, pid: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_corelay-bench"));
    c.args([
        "--url",
        &server.base(),
        "--out",
        out.to_str().unwrap(),
        "--server-pid",
        pid,
        "--quiet",
    ])
    .args(args);
    c
}

/// An empty output directory for the test `name` of this process.
pub fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("corelay-bench-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}
