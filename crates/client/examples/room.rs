//! Join 4 participants to one room, print what each received after 5 s, leave.
//!
//! ```text
//! cargo run -p corelay -- --shards 1 &
//! cargo run -p corelay-client --example room -- http://127.0.0.1:7070 [room]
//! ```

use std::time::Duration;

use corelay_client::{JoinSpec, join};

fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:7070".into());
    let room = args.next().unwrap_or_else(|| "demo".into());
    let names = ["alice", "bob", "carol", "dave"];
    let mut handles = Vec::new();
    for n in names {
        match join(JoinSpec::new(&url, &room, n)) {
            Ok(h) => {
                println!(
                    "{n}: joined as {} ({}) from {}",
                    h.id(),
                    h.location(),
                    h.local_addr()
                );
                handles.push((n, h));
            }
            Err(e) => {
                eprintln!("{n}: join failed: {e}");
                std::process::exit(1);
            }
        }
    }
    std::thread::sleep(Duration::from_secs(5));
    for (n, h) in &handles {
        let s = h.snapshot();
        println!(
            "\n{n}: connected={} channel_open={} events={} keyframe_requests={} sent_frames={} ice_rtt_samples={}",
            s.connected,
            s.channel_open,
            s.events.len(),
            s.keyframe_requests,
            s.sent_video_frames,
            s.ice_rtt_us.len()
        );
        for (mid, st) in &s.slots {
            let mut l = st.latency_us.clone();
            l.sort_unstable();
            let p50 = l.get(l.len() / 2).copied().unwrap_or(0);
            let max = l.last().copied().unwrap_or(0);
            println!(
                "  slot {mid:>4} {:5}: {:4} pkts {:4} frames corrupt={} ooo={} gaps={} src={:?} lat p50={}us max={}us",
                st.kind,
                st.packets,
                st.frames,
                st.corrupt,
                st.out_of_order,
                st.seq_gaps,
                st.sources,
                p50,
                max
            );
        }
        for e in s.events.iter().take(3) {
            println!("  event {e}");
        }
    }
    for (n, h) in handles {
        if let Err(e) = h.leave() {
            eprintln!("{n}: leave failed: {e}");
        }
    }
}
