//! The directory against a real nats-server (Debian's 2.9, with JetStream),
//! started by each test on a free port with its own store directory.
//!
//! Without `nats-server` these tests fail, saying how to get it, unless
//! `SKIP_NATS=1` is set: then they print SKIPPED and pass. Every wait is
//! bounded.

use std::future::Future;
use std::time::{Duration, Instant};

use corelay_cluster::directory::{self, Change, Directory, LeftReason, NodeRecord};
use corelay_testkit::free_tcp_port;
use corelay_testkit::nats::Nats;
use futures_util::StreamExt;

fn record(node_id: &str, participants: u32) -> NodeRecord {
    NodeRecord {
        node_id: node_id.to_owned(),
        epoch: 1_700_000_000_000,
        relay_addr: "127.0.0.1:7000".parse().expect("an address"),
        http_addr: format!("http://{node_id}.test:8080"),
        participants,
        capacity_left: 100,
        draining: false,
        rooms: vec!["room-1".to_owned()],
        shards: 1,
    }
}

/// Connects, retrying while JetStream comes up (5 s at most).
async fn connect(nats: &Nats, node_id: &str) -> Directory {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match Directory::connect(&nats.url(), node_id).await {
            Ok(directory) => return directory,
            Err(err) if Instant::now() < deadline => {
                eprintln!("{node_id}: not yet: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("{node_id} cannot connect: {err}; nats log: {}", nats.log()),
        }
    }
}

/// Announces every second, `participants` counting up, until aborted.
fn heartbeat(directory: &std::sync::Arc<Directory>) -> tokio::task::JoinHandle<()> {
    let directory = std::sync::Arc::clone(directory);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(directory::HEARTBEAT);
        for participants in 0u32.. {
            tick.tick().await;
            let _ = directory
                .announce(&record(directory.node_id(), participants))
                .await;
        }
    })
}

/// Polls `done` every 20 ms until it holds; the time it took, or None after
/// `limit`.
async fn within(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if done() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first change `pick` accepts, within `limit`.
async fn next_matching<T>(
    directory: &Directory,
    limit: Duration,
    mut pick: impl FnMut(Change) -> Option<T>,
) -> Option<T> {
    bounded(limit, async {
        loop {
            if let Some(found) = pick(directory.next_change().await) {
                return found;
            }
        }
    })
    .await
}

async fn bounded<T>(limit: Duration, future: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(limit, future).await.ok()
}

fn ids(directory: &Directory) -> Vec<String> {
    directory.nodes().into_iter().map(|r| r.node_id).collect()
}

fn sees(directory: &Directory, node_id: &str) -> bool {
    directory.node(node_id).is_some()
}

#[tokio::test]
async fn two_directories_see_each_other_within_2s() {
    let Some(nats) = Nats::start("see") else {
        return;
    };
    let a = std::sync::Arc::new(connect(&nats, "node-a").await);
    let b = std::sync::Arc::new(connect(&nats, "node-b").await);
    let start = Instant::now();
    let beats = [heartbeat(&a), heartbeat(&b)];
    let took = within(Duration::from_secs(2), || {
        sees(&a, "node-b") && sees(&b, "node-a")
    })
    .await;
    let took = took
        .unwrap_or_else(|| panic!("not within 2 s: a sees {:?}, b sees {:?}", ids(&a), ids(&b)));
    eprintln!(
        "both views whole after {took:?} ({:?} since the first heartbeat)",
        start.elapsed()
    );
    assert_eq!(ids(&a), ["node-a", "node-b"]);
    assert_eq!(ids(&b), ["node-a", "node-b"]);
    assert_eq!(a.peers().len(), 1);
    let joined = next_matching(&a, Duration::from_secs(1), |change| match change {
        Change::NodeJoined(record) => Some(record),
        _ => None,
    })
    .await
    .expect("a NodeJoined on a");
    assert_eq!(joined.node_id, "node-b");
    assert_eq!(joined.http_addr, "http://node-b.test:8080");
    let pick = a.least_loaded(&["node-a"]).expect("a node with room");
    assert_eq!(pick.node_id, "node-b");
    for beat in beats {
        beat.abort();
    }
}

#[tokio::test]
async fn a_node_that_stops_heartbeating_leaves_within_4s() {
    let Some(nats) = Nats::start("silent") else {
        return;
    };
    let a = std::sync::Arc::new(connect(&nats, "node-a").await);
    let b = std::sync::Arc::new(connect(&nats, "node-b").await);
    let beat_a = heartbeat(&a);
    let beat_b = heartbeat(&b);
    within(Duration::from_secs(2), || {
        sees(&a, "node-b") && sees(&b, "node-a")
    })
    .await
    .expect("both views whole within 2 s");
    while a.try_next_change().is_some() {}
    beat_b.abort();
    let stopped = Instant::now();
    let left = next_matching(&a, Duration::from_secs(4), |change| match change {
        Change::NodeLeft {
            node_id, reason, ..
        } => Some((node_id, reason)),
        _ => None,
    })
    .await;
    let took = stopped.elapsed();
    let (node_id, reason) =
        left.unwrap_or_else(|| panic!("no NodeLeft within 4 s: a sees {:?}", ids(&a)));
    eprintln!("node-b left a's view {took:?} after its last heartbeat task stopped");
    assert_eq!(node_id, "node-b");
    assert_eq!(reason, LeftReason::Expired);
    assert!(took <= Duration::from_secs(4));
    assert!(!sees(&a, "node-b"));
    assert_eq!(a.least_loaded(&["node-a"]), None);
    // b itself still watches: it sees a, and (about when a does) its own
    // record expire.
    within(Duration::from_secs(1), || ids(&b) == ["node-a"])
        .await
        .unwrap_or_else(|| panic!("b sees {:?}", ids(&b)));
    beat_a.abort();
}

#[tokio::test]
async fn a_node_that_leaves_is_removed_at_once() {
    let Some(nats) = Nats::start("leave") else {
        return;
    };
    let a = std::sync::Arc::new(connect(&nats, "node-a").await);
    let b = connect(&nats, "node-b").await;
    b.announce(&record("node-b", 0)).await.expect("announce");
    within(Duration::from_secs(2), || sees(&a, "node-b"))
        .await
        .expect("a sees b within 2 s");
    let start = Instant::now();
    b.leave().await.expect("leave");
    let reason = next_matching(&a, Duration::from_secs(1), |change| match change {
        Change::NodeLeft { reason, .. } => Some(reason),
        _ => None,
    })
    .await
    .expect("a NodeLeft within 1 s");
    eprintln!("node-b's leave reached a in {:?}", start.elapsed());
    assert_eq!(reason, LeftReason::Deleted);
    assert!(!sees(&a, "node-b"));
}

#[tokio::test]
async fn nats_restart_reconciles_both_views() {
    let Some(mut nats) = Nats::start("restart") else {
        return;
    };
    let a = std::sync::Arc::new(connect(&nats, "node-a").await);
    let b = std::sync::Arc::new(connect(&nats, "node-b").await);
    let beats = [heartbeat(&a), heartbeat(&b)];
    within(Duration::from_secs(2), || {
        sees(&a, "node-b") && sees(&b, "node-a")
    })
    .await
    .expect("both views whole within 2 s");

    nats.stop();
    let lost = within(Duration::from_secs(5), || {
        !a.is_connected() && !b.is_connected()
    })
    .await
    .expect("both directories notice the lost link within 5 s");
    eprintln!("link loss noticed after {lost:?}");
    // Twice the TTL without NATS: the views are kept as they were.
    tokio::time::sleep(directory::TTL * 2).await;
    assert_eq!(ids(&a), ["node-a", "node-b"]);
    assert_eq!(ids(&b), ["node-a", "node-b"]);
    let mut changes = Vec::new();
    for directory in [&a, &b] {
        while let Some(change) = directory.try_next_change() {
            changes.push(change);
        }
    }
    assert!(
        !changes.iter().any(|c| matches!(c, Change::NodeLeft { .. })),
        "no one leaves while NATS is away: {changes:?}"
    );

    nats.restart();
    let back = Instant::now();
    // Each sees a fresh record of the other: a change after the reconnect.
    for (directory, other) in [(&a, "node-b"), (&b, "node-a")] {
        let mut reconnected = false;
        next_matching(directory, Duration::from_secs(8), |change| match change {
            Change::Reconnected => {
                reconnected = true;
                None
            }
            Change::NodeUpdated(record) if reconnected && record.node_id == other => Some(()),
            Change::NodeLeft { node_id, .. } => panic!("{node_id} left after the reconnect"),
            _ => None,
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "{} did not hear {other} within 8 s of NATS coming back; nats log: {}",
                directory.node_id(),
                nats.log()
            )
        });
        eprintln!(
            "{} heard {other} again {:?} after the restart",
            directory.node_id(),
            back.elapsed()
        );
    }
    assert!(a.is_connected() && b.is_connected());
    // Past another TTL: no one expired, no one is there twice.
    tokio::time::sleep(directory::TTL + Duration::from_millis(500)).await;
    assert_eq!(ids(&a), ["node-a", "node-b"]);
    assert_eq!(ids(&b), ["node-a", "node-b"]);
    for directory in [&a, &b] {
        while let Some(change) = directory.try_next_change() {
            assert!(
                !matches!(change, Change::NodeLeft { .. } | Change::NodeJoined(_)),
                "{}: {change:?} after the views were whole again",
                directory.node_id()
            );
        }
    }
    for beat in beats {
        beat.abort();
    }
}

#[tokio::test]
async fn a_nats_that_lost_its_store_is_rebuilt_and_a_node_gone_meanwhile_leaves() {
    let Some(mut nats) = Nats::start("wiped") else {
        return;
    };
    let a = std::sync::Arc::new(connect(&nats, "node-a").await);
    let b = std::sync::Arc::new(connect(&nats, "node-b").await);
    let c = std::sync::Arc::new(connect(&nats, "node-c").await);
    let beats = [heartbeat(&a), heartbeat(&b)];
    let beat_c = heartbeat(&c);
    within(Duration::from_secs(2), || {
        [&a, &b, &c]
            .iter()
            .all(|d| ids(d) == ["node-a", "node-b", "node-c"])
    })
    .await
    .expect("three whole views within 2 s");

    nats.stop();
    within(Duration::from_secs(5), || {
        !a.is_connected() && !b.is_connected()
    })
    .await
    .expect("both notice the lost link within 5 s");
    // c dies while NATS is away: no one can tell yet.
    beat_c.abort();
    drop(c);
    tokio::time::sleep(directory::TTL).await;
    assert_eq!(ids(&a), ["node-a", "node-b", "node-c"]);
    for directory in [&a, &b] {
        while directory.try_next_change().is_some() {}
    }

    nats.restart_empty();
    let back = Instant::now();
    // The bucket is made again, a and b announce again, and c, not heard
    // of since, leaves both views within a TTL of the reconnect.
    for directory in [&a, &b] {
        let left = next_matching(directory, Duration::from_secs(8), |change| match change {
            Change::NodeLeft {
                node_id, reason, ..
            } => Some((node_id, reason)),
            _ => None,
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "{}: node-c did not leave within 8 s of NATS coming back: {:?}",
                directory.node_id(),
                ids(directory)
            )
        });
        assert_eq!(left, ("node-c".to_owned(), LeftReason::Expired));
        eprintln!(
            "{}: node-c left {:?} after NATS came back empty",
            directory.node_id(),
            back.elapsed()
        );
    }
    within(Duration::from_secs(2), || {
        ids(&a) == ["node-a", "node-b"] && ids(&b) == ["node-a", "node-b"]
    })
    .await
    .unwrap_or_else(|| panic!("a sees {:?}, b sees {:?}", ids(&a), ids(&b)));
    // The new bucket has fresh revisions, and the views follow them: a's
    // record of b keeps changing with b's heartbeats.
    let before = a.node("node-b").expect("b").participants;
    within(Duration::from_secs(3), || {
        a.node("node-b").is_some_and(|r| r.participants > before)
    })
    .await
    .expect("b's heartbeats reach a through the new bucket");
    for beat in beats {
        beat.abort();
    }
}

/// What the directory's local expiry rests on: on nats-server 2.9 a key
/// that passes the bucket's max age vanishes without a watch event.
#[tokio::test]
async fn max_age_expiry_sends_no_watch_event_on_2_9() {
    let Some(nats) = Nats::start("expiry") else {
        return;
    };
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let version = client.server_info().version;
    let js = async_nats::jetstream::new(client);
    // The bucket as the directory makes it, with a max age of 1 s.
    let config = directory::Config {
        bucket: "expiry-probe".to_owned(),
        ttl: Duration::from_secs(1),
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let _maker = loop {
        match Directory::connect_with(&nats.url(), "maker", config.clone()).await {
            Ok(directory) => break directory,
            Err(err) => {
                assert!(Instant::now() < deadline, "no bucket within 5 s: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let kv = js.get_key_value("expiry-probe").await.expect("the bucket");
    let mut watch = kv.watch_all().await.expect("watch");
    kv.put("k", "v".into()).await.expect("put");
    let mut seen = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        match bounded(Duration::from_millis(200), watch.next()).await {
            Some(Some(Ok(entry))) => seen.push((start.elapsed(), entry.operation)),
            Some(other) => panic!("the watch ended: {other:?}"),
            None => {}
        }
    }
    let gone = kv.get("k").await.expect("get").is_none();
    eprintln!("nats-server {version}: watch saw {seen:?}; key gone after 4 s: {gone}");
    assert!(gone, "max age did not remove the key");
    if version.starts_with("2.9.") {
        assert_eq!(
            seen.len(),
            1,
            "nats-server {version} sent an event on expiry (the directory's local expiry \
             still holds; update directory.rs's docs): {seen:?}"
        );
    }
}

#[tokio::test]
async fn connect_fails_fast_without_nats() {
    let start = Instant::now();
    let url = format!("nats://127.0.0.1:{}", free_tcp_port());
    let err = Directory::connect(&url, "node-a")
        .await
        .expect_err("no server there");
    eprintln!("{err} after {:?}", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(5));
    let err = Directory::connect(&url, "bad id")
        .await
        .expect_err("a bad id");
    assert!(err.to_string().contains("bad id"), "{err}");
}
