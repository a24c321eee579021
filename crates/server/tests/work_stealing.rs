//! The work-stealing baseline (`--runtime work-stealing`), whatever
//! `$CORELAY_TEST_RUNTIME` says: two participants in a room receive each
//! other through participant tasks and channels, and the server reports one
//! shard whose every forwarded packet crossed a channel between tasks.

mod common;

use std::time::Duration;

use common::*;

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn two_participants_exchange_media_on_the_work_stealing_runtime() {
    let server = start_server(2, &["--runtime", "work-stealing"]);
    let health = server.get_json("/healthz");
    assert_eq!(health["shards"], 1, "one logical shard: {health}");
    let a = join(&server, "ws", "alice");
    let b = join(&server, "ws", "bob");
    for (me, p, other) in [("alice", &a, "bob"), ("bob", &b, "alice")] {
        let want = vec![other.to_string()];
        let (ok, s) = p.wait_until(WAIT, |s| {
            video_sources(s, 30) == want && audio_sources(s, 50) == want
        });
        assert!(
            ok,
            "{me} did not receive video+audio from {other}: {:#?}",
            s.slots
        );
        assert_clean(me, &s);
    }
    let rooms = server.get_json("/api/v1/rooms");
    assert_eq!(rooms["rooms"][0]["participants"], 2, "{rooms}");
    // Media went publisher task → subscriber task: counted as hops.
    let stats = server.wait_stats(Duration::from_secs(2), |s| {
        s["total"]["cross_shard_in"].as_u64() > Some(0)
    });
    assert_eq!(stats["shards"].as_array().map(Vec::len), Some(1), "{stats}");
    assert!(stats["total"]["forwarded"].as_u64().unwrap() > 0, "{stats}");
    assert!(
        stats["total"]["cross_shard_out"].as_u64().unwrap() > 0,
        "{stats}"
    );
    assert!(
        stats["total"]["cross_shard_in"].as_u64().unwrap() > 0,
        "{stats}"
    );
    a.leave().unwrap();
    b.leave().unwrap();
    let st = server.stop();
    assert!(st.success(), "corelay exited with {st:?}");
}
