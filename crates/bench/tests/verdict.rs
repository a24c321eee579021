//! A short `verdict` scenario (issue 52) of the real `corelay-bench` binary
//! against a real `corelay` server on free loopback ports, stalled by
//! SIGSTOP/SIGCONT for a stretch in the middle: the summary has its
//! scores, each a share, each expected verdict was scheduled, and the
//! stall phase was scored as `server`. Nothing here asserts a score: this
//! machine is shared and a debug server on it is no measure (the figures
//! are docs/benchmarks.md's, from a release build).
//!
//! The server binary: `$CORELAY_BIN`, else `corelay` in this test's target
//! directory (corelay_testkit::corelay_bin).

mod common;

use common::{out_dir, run_bench};
use corelay_testkit::{Server, corelay_bin};

#[test]
fn a_short_verdict_run_scores_every_scheduled_verdict() {
    let server = Server::start(corelay_bin(), 2, &[]);
    let out = out_dir("verdict");
    let s = run_bench(
        &server,
        &out,
        &[
            "verdict",
            "--warmup",
            "8s",
            "--duration",
            "16s",
            "--settle",
            "2s",
            "--stall-share",
            "0.4",
        ],
    );
    assert_eq!(s["scenario"], "verdict");
    let v = &s["verdict"];
    for share in ["right_share", "false_server_share"] {
        let x = v[share].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&x), "{share} {x}: {v}");
    }
    // Six subscribers, 16 s scored less the settling: most of them answered.
    let scored = v["scored_s"].as_u64().unwrap();
    assert!(scored >= 40, "scored {scored} s: {v}");
    for name in ["good", "publisher_uplink", "subscriber_downlink", "server"] {
        let e = &v["by_verdict"][name];
        let (expected, right) = (e["expected_s"].as_u64(), e["right_s"].as_u64());
        assert!(
            expected.is_some_and(|x| x > 0) && right <= expected,
            "{name}: {e} in {v}"
        );
    }
    // The stall phase was run, and the server was stalled in it.
    assert!(v["stalls"].as_u64().unwrap() >= 4, "{v}");
    assert_eq!(s["subscribers"].as_array().map(Vec::len), Some(6));
    // The server is running after its stalls, and answers.
    assert_eq!(server.get_json("/healthz")["status"], "ok");
    let _ = std::fs::remove_dir_all(&out);
}
