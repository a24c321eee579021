//! Issue 51 item 6 with the load generator: `corelay-bench --no-twcc`
//! (participants that negotiate no transport-wide congestion control, as
//! werift, libdatachannel and aiortc by default) against the real server.
//! The server's estimate of each downlink then comes from its receiver
//! reports: the unlimited subscriber still climbs to f, the one behind
//! 300 kbit/s never gets f. Nothing here asserts a speed. (Debug build,
//! 30 s: unlimited f 82 %, h 7 %, q 11 %; limited q 95 %, h 5 %, no
//! freezes.)

mod common;

use common::{out_dir, run_bench};
use corelay_testkit::{Server, corelay_bin};

#[test]
fn simulcast_subscribers_without_twcc_climb_on_their_receiver_reports() {
    let server = Server::start(corelay_bin(), 1, &[]);
    let dir = out_dir("no-twcc");
    let s = run_bench(
        &server,
        &dir,
        &[
            "--simulcast",
            "--no-twcc",
            "--downlink-limit",
            "300kbit",
            "--limited-share",
            "0.5",
            "rooms",
            "--max-rooms",
            "1",
            "--room-size",
            "2",
            "--join-spread",
            "1s",
            "--duration",
            "30s",
        ],
    );
    let sc = &s["simulcast"];
    eprintln!("{sc}");
    assert_eq!(s["participants"]["joined"], 2, "{}", s["participants"]);
    assert_eq!(s["received"]["corrupt"], 0, "{}", s["received"]);
    let (lim, unlim) = (&sc["limited"], &sc["unlimited"]);
    assert_eq!(lim["streams"], 1, "{sc}");
    assert_eq!(unlim["streams"], 1, "{sc}");
    // Before, without TWCC both stayed on q the whole run.
    assert!(
        unlim["layer_share"]["f"].as_f64().unwrap_or(0.0) > 0.4,
        "{sc}"
    );
    assert!(
        lim["layer_share"]["f"].as_f64().unwrap_or(0.0) < 0.05,
        "{sc}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
