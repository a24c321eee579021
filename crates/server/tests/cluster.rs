//! Several corelay nodes on one NATS (`--cluster`, issue 49):
//! each sees the others in `GET /api/v1/cluster`, a join a full node
//! refuses is redirected (307) to one with room and works there, a drained
//! node redirects every new join, a killed node leaves the others' view
//! within the directory's TTL, a stopped one at once, and the view is for
//! admins; a room spans nodes (its members on two nodes decode each other,
//! a killed node's members leave it), and a draining node sends its
//! participants to another.
//!
//! Each test starts its own nats-server (Debian's 2.9, JetStream on, a free
//! port, a temporary store; killed when the test ends). Without
//! `nats-server` these tests fail, saying how to get it, unless
//! `SKIP_NATS=1` is set: then they print SKIPPED and pass. Every wait is
//! bounded.

mod common;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use corelay_client::{JoinSpec, Snapshot};
use corelay_testkit::free_tcp_port;
use corelay_testkit::nats::Nats;
use serde_json::{Value, json};

/// How long the nodes may take to see each other (a heartbeat is 1 s).
const SEE: Duration = Duration::from_secs(10);
const AUTH_SECRET: &str = "cluster-test-auth-secret-0123456789";

/// A cluster of this test's own: its nats-server ([`Nats`]) and the secret
/// file its nodes share.
struct Cluster {
    nats: Nats,
}

impl Cluster {
    /// `None`: the test is to be skipped (no nats-server, `SKIP_NATS=1`).
    fn start(test: &str) -> Option<Self> {
        let mut cluster = Self::stopped(test)?;
        cluster.nats.run();
        Some(cluster)
    }

    /// Its secret written, its nats-server not running yet.
    fn stopped(test: &str) -> Option<Self> {
        let nats = Nats::stopped(test)?;
        std::fs::write(
            nats.dir().join("secret"),
            "cluster-test-secret-0123456789\n",
        )
        .expect("write the cluster secret");
        Some(Cluster { nats })
    }

    fn url(&self) -> String {
        self.nats.url()
    }

    fn secret(&self) -> String {
        self.nats
            .dir()
            .join("secret")
            .to_str()
            .expect("a UTF-8 path")
            .to_owned()
    }

    /// A node of this cluster: 1 shard, `--node-id id`, plus `extra`.
    fn node(&self, id: &str, extra: &[&str]) -> Server {
        self.node_with(id, 1, extra)
    }

    /// A node of this cluster with `shards` shards (their relay ports
    /// follow the first).
    fn node_with(&self, id: &str, shards: usize, extra: &[&str]) -> Server {
        let relay = format!("127.0.0.1:{}", free_tcp_port());
        let (url, secret) = (self.url(), self.secret());
        let mut args = vec![
            "--cluster",
            url.as_str(),
            "--node-id",
            id,
            "--relay-addr",
            relay.as_str(),
            "--cluster-secret-file",
            secret.as_str(),
        ];
        args.extend_from_slice(extra);
        start_server(shards, &args)
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"))
}

/// POST of an offer nobody will connect to `path` on `server`.
fn post_offer(server: &Server, path: &str) -> (u16, Vec<(String, String)>, String) {
    server.request(
        "POST",
        path,
        &[("content-type", "application/sdp")],
        &client_offer(true, true),
    )
}

/// The node ids in `server`'s cluster view.
fn seen(server: &Server) -> Vec<String> {
    let view = server.get_json("/api/v1/cluster");
    let mut ids: Vec<String> = view["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["node_id"].as_str().expect("a node id").to_owned())
        .collect();
    ids.sort();
    ids
}

/// One node of `server`'s cluster view.
fn node_in(server: &Server, id: &str) -> Option<Value> {
    server.get_json("/api/v1/cluster")["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["node_id"] == id)
        .cloned()
}

/// Polls `done` every 50 ms for at most `limit`; the time it took, or None.
fn within(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if done() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until every one of `servers` sees exactly `ids`.
fn all_see(servers: &[&Server], ids: &[&str]) {
    let want: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
    for s in servers {
        let took = within(SEE, || seen(s) == want);
        assert!(
            took.is_some(),
            "{} does not see {want:?} within {SEE:?}: {}",
            s.base(),
            s.get_json("/api/v1/cluster")
        );
    }
}

#[test]
fn nodes_see_each_other_and_a_full_node_redirects_to_one_with_room() {
    let Some(nats) = Cluster::start("redirect") else {
        return;
    };
    let a = nats.node("a", &["--max-participants-per-shard", "1"]);
    let b = nats.node("b", &[]);
    all_see(&[&a, &b], &["a", "b"]);
    let view = a.get_json("/api/v1/cluster");
    assert_eq!(view["node_id"], "a");
    assert_eq!(view["connected"], true);
    assert_eq!(view["draining"], false);
    let b_seen = node_in(&a, "b").expect("b in a's view");
    assert_eq!(b_seen["http_addr"], b.base(), "{b_seen}");
    assert!(b_seen["last_seen_ms"].as_u64().expect("an age") < 3000);
    assert!(b_seen["relay_addr"].as_str().is_some());
    assert!(a.scrape().contains("corelay_cluster_nodes 2"));
    assert!(a.scrape().contains("corelay_cluster_connected 1"));

    // A's one seat taken, by a real participant.
    let first = join(&a, "r", "first");
    let (up, _) = first.wait_until(Duration::from_secs(20), |s| s.connected);
    assert!(up, "the first participant did not connect to a");

    // A second join to A: 307 to the same path and query on B, with the
    // refusal as the body.
    let path = "/api/v1/rooms/r/participants?name=second";
    let (st, hs, body) = post_offer(&a, path);
    assert_eq!(st, 307, "{body}");
    let location = header(&hs, "location").expect("a Location");
    assert_eq!(location, format!("{}{path}", b.base()));
    assert_eq!(json_of(&body)["code"], "no_capacity", "{body}");
    // WHIP and WHEP likewise.
    for path in ["/whip/r", "/whep/r?x=1"] {
        let (st, hs, body) = post_offer(&a, path);
        assert_eq!(st, 307, "{path}: {body}");
        assert_eq!(
            header(&hs, "location"),
            Some(format!("{}{path}", b.base()).as_str())
        );
    }

    // The client follows it: a join sent to A lands on B, for real, and
    // its resource is B's (its DELETE goes there).
    let second = corelay_client::join(JoinSpec::new(a.base(), "r", "second")).expect("a join on b");
    assert!(
        second.location().starts_with(&b.base()),
        "{}",
        second.location()
    );
    let (up, _) = second.wait_until(Duration::from_secs(20), |s| s.connected);
    assert!(up, "the redirected participant did not connect to b");
    // One room across both nodes: "second" on b, "first" on a.
    let room = b.get_json("/api/v1/rooms/r");
    assert_eq!(
        members_by_node(&room),
        [
            ("first".to_owned(), Some("a".to_owned())),
            ("second".to_owned(), None)
        ],
        "{room}"
    );
    // B announces it; A sees it.
    let took = within(SEE, || {
        node_in(&a, "b").is_some_and(|n| n["participants"] == 1 && n["rooms"] == json!(["r"]))
    });
    assert!(took.is_some(), "a does not see b's participant");

    // With B drained there is nowhere to send it: the refusal as today.
    let (st, _, body) = b.request("POST", "/api/v1/cluster/drain", &[], "");
    assert_eq!(st, 200, "{body}");
    let took = within(SEE, || {
        node_in(&a, "b").is_some_and(|n| n["draining"] == true)
    });
    assert!(took.is_some(), "a does not see b draining");
    let (st, hs, body) = post_offer(&a, "/api/v1/rooms/r/participants");
    assert_eq!(st, 503, "{body}");
    assert_eq!(json_of(&body)["code"], "no_capacity");
    assert!(header(&hs, "retry-after").is_some());
    drop(first);
    drop(second);
}

#[test]
fn a_drained_node_is_shown_draining_and_redirects_new_joins() {
    let Some(nats) = Cluster::start("drain") else {
        return;
    };
    let a = nats.node("a", &[]);
    let b = nats.node("b", &[]);
    all_see(&[&a, &b], &["a", "b"]);
    let (st, _, body) = b.request("POST", "/api/v1/cluster/drain", &[], "");
    assert_eq!(st, 200, "{body}");
    assert_eq!(
        json_of(&body),
        json!({"node_id": "b", "draining": true, "moved": 0})
    );
    assert_eq!(b.get_json("/api/v1/cluster")["draining"], true);
    assert!(b.scrape().contains("corelay_cluster_draining 1"));
    let took = within(SEE, || {
        node_in(&a, "b").is_some_and(|n| n["draining"] == true && n["capacity_left"] == 0)
    });
    assert!(
        took.is_some(),
        "a does not see b draining: {}",
        a.get_json("/api/v1/cluster")
    );
    // Every new join to B goes to A, though B has room.
    for path in ["/api/v1/rooms/r/participants", "/whip/r", "/whep/r"] {
        let (st, hs, body) = post_offer(&b, path);
        assert_eq!(st, 307, "{path}: {body}");
        assert_eq!(json_of(&body)["code"], "node_draining", "{body}");
        assert_eq!(
            header(&hs, "location"),
            Some(format!("{}{path}", a.base()).as_str())
        );
    }
    // A page's fetch cannot read a redirect to another origin: with
    // follow=0 the same answer is a 409 that says where.
    let (st, _, body) = post_offer(&b, "/api/v1/rooms/r/participants?name=p&follow=0");
    assert_eq!(st, 409, "{body}");
    let v = json_of(&body);
    assert_eq!(v["code"], "elsewhere", "{body}");
    assert_eq!(v["node"], a.base(), "{body}");
    assert_eq!(
        v["location"],
        format!("{}/api/v1/rooms/r/participants?name=p&follow=0", a.base())
    );
    // A draining A too: nowhere to go, 503 node_draining.
    let (st, _, _) = a.request("POST", "/api/v1/cluster/drain", &[], "");
    assert_eq!(st, 200);
    let took = within(SEE, || {
        node_in(&b, "a").is_some_and(|n| n["draining"] == true)
    });
    assert!(took.is_some(), "b does not see a draining");
    let (st, hs, body) = post_offer(&b, "/whip/r");
    assert_eq!(st, 503, "{body}");
    assert_eq!(json_of(&body)["code"], "node_draining");
    assert!(header(&hs, "retry-after").is_some());
}

#[test]
fn a_killed_node_leaves_the_view_within_4_s_and_a_stopped_one_at_once() {
    let Some(nats) = Cluster::start("lost") else {
        return;
    };
    let a = nats.node("a", &[]);
    let b = nats.node("b", &[]);
    let c = nats.node("c", &[]);
    all_see(&[&a, &b, &c], &["a", "b", "c"]);

    let mut b = b;
    b.child.kill().expect("SIGKILL b");
    let killed = Instant::now();
    let gone = within(Duration::from_secs(4), || seen(&a) == ["a", "c"]);
    eprintln!("b (SIGKILL) left a's view after {:?}", killed.elapsed());
    assert!(
        gone.is_some(),
        "a still sees b 4 s after SIGKILL: {}",
        a.get_json("/api/v1/cluster")
    );

    // SIGTERM: c leaves the directory as it stops (its key deleted), so A
    // drops it without waiting for the TTL.
    let stopped = Instant::now();
    let status = c.stop();
    assert!(status.success(), "c exited with {status}");
    let gone = within(Duration::from_secs(2), || seen(&a) == ["a"]);
    eprintln!(
        "c (SIGTERM) left a's view {:?} after its exit",
        stopped.elapsed()
    );
    assert!(
        gone.is_some(),
        "a still sees c 2 s after it stopped: {}",
        a.get_json("/api/v1/cluster")
    );
    assert!(a.scrape().contains("corelay_cluster_nodes 1"));
}

#[test]
fn nats_unreachable_at_start_is_retried_in_the_background() {
    let Some(mut nats) = Cluster::stopped("late") else {
        return;
    };
    // Nothing listens on the port yet: the node starts and serves anyway.
    let a = nats.node("a", &[]);
    assert_eq!(a.get_json("/healthz")["status"], "ok");
    let view = a.get_json("/api/v1/cluster");
    assert_eq!(view["connected"], false, "{view}");
    assert!(a.scrape().contains("corelay_cluster_connected 0"));
    let warned = within(SEE, || {
        a.log().iter().any(|l| l.contains("cannot connect to NATS"))
    });
    assert!(warned.is_some(), "no WARN about NATS: {:?}", a.log());
    nats.nats.run();
    let took = within(SEE, || seen(&a) == ["a"]);
    assert!(
        took.is_some(),
        "a did not join the directory once NATS came up"
    );
    assert_eq!(a.get_json("/api/v1/cluster")["connected"], true);
}

fn token(claims: Value) -> String {
    let mut claims = claims;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    claims["exp"] = json!(now + 600);
    corelay_client::signal::mint_claims(AUTH_SECRET.as_bytes(), &claims).expect("a token")
}

#[test]
fn the_cluster_view_and_drain_are_for_admins() {
    let Some(nats) = Cluster::start("auth") else {
        return;
    };
    let a = nats.node("a", &["--auth-secret", AUTH_SECRET]);
    let admin = format!("Bearer {}", token(json!({"sub": "ops", "admin": true})));
    let user = format!("Bearer {}", token(json!({"sub": "u", "room": "r"})));
    for (method, path) in [
        ("GET", "/api/v1/cluster"),
        ("POST", "/api/v1/cluster/drain"),
    ] {
        let (st, hs, body) = a.request(method, path, &[], "");
        assert_eq!(st, 401, "{method} {path}: {body}");
        assert!(header(&hs, "www-authenticate").is_some());
        let (st, _, body) = a.request(method, path, &[("authorization", user.as_str())], "");
        assert_eq!(st, 403, "{method} {path}: {body}");
    }
    let (st, _, body) = a.request(
        "GET",
        "/api/v1/cluster",
        &[("authorization", admin.as_str())],
        "",
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(json_of(&body)["node_id"], "a");
    // Nothing above drained it.
    assert_eq!(json_of(&body)["draining"], false);
    // The cluster secret is never logged.
    assert!(
        !a.log().iter().any(|l| l.contains("cluster-test-secret")),
        "the cluster secret is in the log"
    );
}

#[test]
fn a_lone_node_is_not_a_cluster() {
    // No --cluster: nothing connects anywhere, and the cluster endpoints
    // say so.
    let server = start_server(1, &[]);
    for (method, path) in [
        ("GET", "/api/v1/cluster"),
        ("POST", "/api/v1/cluster/drain"),
    ] {
        let (st, _, body) = server.request(method, path, &[], "");
        assert_eq!(st, 404, "{method} {path}: {body}");
        assert_eq!(json_of(&body)["code"], "not_a_cluster", "{body}");
    }
    assert!(!server.scrape().contains("corelay_cluster_"));
}

#[test]
fn bad_cluster_flags_stop_the_start() {
    let bin = env!("CARGO_BIN_EXE_corelay");
    let run = |args: &[&str]| {
        let out = Command::new(bin)
            .args(["--http", "127.0.0.1:0", "--metrics", "off", "--shards", "1"])
            .args(["--udp-port", &free_tcp_port().to_string(), "--no-pin"])
            .args(args)
            .output()
            .expect("run corelay");
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, err) = run(&["--cluster", "nats://127.0.0.1:1"]);
    assert!(!status.success());
    assert!(err.contains("--relay-addr"), "{err}");
    let (status, err) = run(&["--node-id", "a"]);
    assert!(!status.success());
    assert!(err.contains("--cluster"), "{err}");
}

/// A room view's members as (name, node: None for the node that shows it),
/// sorted.
fn members_by_node(room: &Value) -> Vec<(String, Option<String>)> {
    let mut members: Vec<(String, Option<String>)> = room["participants"]
        .as_array()
        .expect("participants")
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or("").to_owned(),
                m["node"].as_str().map(str::to_owned),
            )
        })
        .collect();
    members.sort();
    members
}

/// The names in the latest roster event `p` got.
fn roster_names(s: &Snapshot) -> Vec<String> {
    let mut names: Vec<String> = s
        .events
        .iter()
        .rev()
        .find(|e| e["type"] == "roster")
        .and_then(|e| e["participants"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[test]
fn a_room_spans_two_nodes_and_a_killed_node_leaves_it() {
    let Some(nats) = Cluster::start("span") else {
        return;
    };
    let a = nats.node("a", &[]);
    let b = nats.node("b", &[]);
    all_see(&[&a, &b], &["a", "b"]);

    // alice on a, bob and carol on b: one room.
    let alice = join(&a, "x", "alice");
    let bob = join(&b, "x", "bob");
    let carol = join(&b, "x", "carol");
    let wait = Duration::from_secs(20);
    for (who, p, want) in [
        ("alice", &alice, names(&["bob", "carol"])),
        ("bob", &bob, names(&["alice", "carol"])),
        ("carol", &carol, names(&["alice", "bob"])),
    ] {
        let (ok, s) = p.wait_until(wait, |s| {
            video_sources(s, 30) == want && audio_sources(s, 30) == want
        });
        assert!(
            ok,
            "{who} did not get video+audio from {want:?}: {:#?}",
            s.slots
        );
        assert_clean(who, &s);
        assert_eq!(
            roster_names(&s),
            ["alice", "bob", "carol"],
            "{who}'s roster"
        );
    }
    // A message from alice reaches bob and carol on the other node, in
    // order, with her identity.
    for i in 0..5 {
        alice.send_event(&format!(
            r#"{{"type":"message","to":null,"topic":"chat","payload":{{"n":{i}}}}}"#
        ));
    }
    for (who, p) in [("bob", &bob), ("carol", &carol)] {
        let (ok, s) = p.wait_until(Duration::from_secs(5), |s| {
            s.events.iter().filter(|e| e["type"] == "message").count() >= 5
        });
        assert!(ok, "{who} did not get alice's 5 messages");
        let got: Vec<(Value, Value)> = s
            .events
            .iter()
            .filter(|e| e["type"] == "message")
            .map(|e| (e["name"].clone(), e["payload"]["n"].clone()))
            .collect();
        let want: Vec<(Value, Value)> = (0..5).map(|i| (json!("alice"), json!(i))).collect();
        assert_eq!(got, want, "{who}'s messages");
    }
    // The room, as either node shows it, has all three, each with its node.
    let room = a.get_json("/api/v1/rooms/x");
    assert_eq!(
        members_by_node(&room),
        [
            ("alice".to_owned(), None),
            ("bob".to_owned(), Some("b".to_owned())),
            ("carol".to_owned(), Some("b".to_owned()))
        ],
        "{room}"
    );
    // alice's media crossed to b once, for two subscribers there.
    let sa = a.get_json("/api/v1/stats");
    let sb = b.get_json("/api/v1/stats");
    for (node, s) in [("a", &sa), ("b", &sb)] {
        for f in ["relay_tx_packets", "relay_rx_packets"] {
            assert!(s["total"][f].as_u64() > Some(0), "{node}: no {f}: {s}");
        }
        for f in [
            "relay_dropped_unknown",
            "relay_dropped_bad",
            "relay_dropped_replayed",
        ] {
            assert_eq!(s["total"][f].as_u64(), Some(0), "{node}: {f}: {s}");
        }
    }
    // a's view of its link to b: packets both ways and a round trip.
    let links = a.get_json("/api/v1/cluster")["links"].clone();
    let link = links
        .as_array()
        .and_then(|l| l.iter().find(|l| l["node_id"] == "b"))
        .cloned()
        .unwrap_or_else(|| panic!("no link to b: {links}"));
    assert!(link["tx_packets"].as_u64() > Some(0), "{link}");
    assert!(link["rx_packets"].as_u64() > Some(0), "{link}");
    let rtt = within(Duration::from_secs(3), || {
        a.get_json("/api/v1/cluster")["links"][0]["rtt_ms"].as_f64() > Some(0.0)
    });
    assert!(rtt.is_some(), "no RTT on a's link to b");
    assert!(
        a.scrape()
            .contains("corelay_relay_link_tx_packets_total{node=\"b\"}")
    );
    let (a_tx, b_rx) = (
        sa["total"]["relay_tx_packets"].as_u64().unwrap_or(0),
        sb["total"]["forwarded"].as_u64().unwrap_or(0),
    );
    eprintln!("a relayed {a_tx} datagrams; b forwarded {b_rx} packets");

    // A forged relay datagram (another secret) is counted and changes nothing.
    let relay_b = b_relay_addr(&a, "b");
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let mut forged = vec![1u8; 200];
    forged[0] = corelay_cluster::relay::VERSION;
    sock.send_to(&forged, relay_b).expect("send");
    let counted = within(Duration::from_secs(3), || {
        let s = b.get_json("/api/v1/stats");
        s["total"]["relay_dropped_unknown"].as_u64().unwrap_or(0)
            + s["total"]["relay_dropped_bad"].as_u64().unwrap_or(0)
            >= 1
    });
    assert!(counted.is_some(), "the forged datagram was not counted");

    // b is killed: within 4 s alice's roster is hers alone.
    let mut b = b;
    b.child.kill().expect("SIGKILL b");
    let killed = Instant::now();
    let (ok, s) = alice.wait_until(Duration::from_secs(4), |s| roster_names(s) == ["alice"]);
    eprintln!(
        "b's members left alice's roster {:?} after SIGKILL",
        killed.elapsed()
    );
    assert!(
        ok,
        "alice still sees b's members 4 s after SIGKILL: {:?}",
        roster_names(&s)
    );
    // Each of them left with a reason: their node is lost.
    let mut left: Vec<(String, String)> = s
        .events
        .iter()
        .filter(|e| e["type"] == "left")
        .map(|e| {
            (
                e["name"].as_str().unwrap_or("").to_owned(),
                e["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            ("bob".to_owned(), "node_lost".to_owned()),
            ("carol".to_owned(), "node_lost".to_owned())
        ]
    );
    drop(bob);
    drop(carol);
    alice.leave().expect("leave");
}

/// The relay address of shard 0 of node `id`, as `server`'s view shows it.
fn b_relay_addr(server: &Server, id: &str) -> std::net::SocketAddr {
    node_in(server, id).expect("node in view")["relay_addr"]
        .as_str()
        .expect("relay_addr")
        .parse()
        .expect("an address")
}

#[test]
fn a_draining_node_sends_its_participants_to_another_and_the_call_goes_on() {
    let Some(nats) = Cluster::start("move") else {
        return;
    };
    let a = nats.node("a", &[]);
    let b = nats.node("b", &[]);
    all_see(&[&a, &b], &["a", "b"]);
    let alice = join(&a, "y", "alice");
    let bob = join(&b, "y", "bob");
    let wait = Duration::from_secs(20);
    let (ok, s) = alice.wait_until(wait, |s| video_sources(s, 30) == names(&["bob"]));
    assert!(ok, "alice did not get bob: {:#?}", s.slots);

    // a drains: alice is told to go (node_draining), joins again through
    // a, is sent to b, and gets bob again there.
    let drained = Instant::now();
    let (st, _, body) = a.request("POST", "/api/v1/cluster/drain", &[], "");
    assert_eq!(st, 200, "{body}");
    assert_eq!(json_of(&body)["moved"], 1, "{body}");
    let (ok, s) = alice.wait_until(Duration::from_secs(3), |s| {
        s.events.iter().any(|e| e["type"] == "bye")
    });
    let bye = s.events.iter().find(|e| e["type"] == "bye").cloned();
    assert!(ok, "alice got no bye");
    assert_eq!(
        bye.map(|b| b["reason"].clone()),
        Some(json!("node_draining"))
    );
    drop(alice);
    let again = join(&a, "y", "alice");
    let (ok, s) = again.wait_until(wait, |s| video_sources(s, 10) == names(&["bob"]));
    eprintln!(
        "alice decodes bob again {:?} after the drain began",
        drained.elapsed()
    );
    assert!(ok, "alice, moved, did not get bob: {:#?}", s.slots);
    let room = b.get_json("/api/v1/rooms/y");
    let local: Vec<&str> = room["participants"]
        .as_array()
        .expect("participants")
        .iter()
        .filter(|m| m["node"].is_null())
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(local.len(), 2, "alice is not on b now: {room}");
    let (ok, s) = bob.wait_until(wait, |s| {
        roster_names(s) == ["alice", "bob"] && video_sources(s, 10) == names(&["alice"])
    });
    assert!(
        ok,
        "bob does not get the moved alice: {:?} {:#?}",
        roster_names(&s),
        s.slots
    );
}

/// Video frames from `from` on any of `s`'s slots.
fn frames_from(s: &Snapshot, from: &str) -> u64 {
    s.slots
        .values()
        .filter(|st| st.kind == "video")
        .map(|st| st.frames_by_source.get(from).copied().unwrap_or(0))
        .sum()
}

#[test]
fn calls_across_nodes_outlive_a_lost_nats_and_the_view_heals() {
    let Some(mut nats) = Cluster::start("nats-gone") else {
        return;
    };
    let a = nats.node("a", &[]);
    let b = nats.node("b", &[]);
    all_see(&[&a, &b], &["a", "b"]);
    let alice = join(&a, "z", "alice");
    let bob = join(&b, "z", "bob");
    let (ok, s) = alice.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 30) == names(&["bob"])
    });
    assert!(ok, "alice did not get bob: {:#?}", s.slots);

    // NATS gone for longer than the directory's TTL: nobody leaves, media
    // goes on.
    nats.nats.stop();
    let before = frames_from(&alice.snapshot(), "bob");
    std::thread::sleep(Duration::from_secs(5));
    let s = alice.snapshot();
    assert_eq!(
        roster_names(&s),
        ["alice", "bob"],
        "a member left with NATS"
    );
    let after = frames_from(&s, "bob");
    assert!(
        after > before + 60,
        "bob's video to alice stalled without NATS: {before} → {after} frames in 5 s"
    );
    let (ok, s) = bob.wait_until(Duration::from_secs(2), |s| frames_from(s, "alice") > 0);
    assert!(ok, "bob gets nothing of alice: {:#?}", s.slots);

    // NATS back: every node's view is whole again.
    nats.nats.run();
    all_see(&[&a, &b], &["a", "b"]);
    assert_eq!(roster_names(&alice.snapshot()), ["alice", "bob"]);
}

#[test]
fn one_seat_per_identity_holds_across_nodes_when_a_participant_moves() {
    let Some(nats) = Cluster::start("identity") else {
        return;
    };
    let a = nats.node("a", &["--auth-secret", AUTH_SECRET]);
    let b = nats.node("b", &["--auth-secret", AUTH_SECRET]);
    let admin = format!("Bearer {}", token(json!({"sub": "ops", "admin": true})));
    for s in [&a, &b] {
        let took = within(SEE, || {
            let (_, _, body) =
                s.request("GET", "/api/v1/cluster", &[("authorization", &admin)], "");
            serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["nodes"].as_array().map(Vec::len))
                == Some(2)
        });
        assert!(took.is_some(), "{} does not see both nodes", s.base());
    }
    let as_who = |server: &Server, sub: &str| {
        join_with(server, "w", sub, |spec| {
            spec.token = Some(token(json!({"sub": sub, "room": "w"})));
        })
    };
    let alice = as_who(&a, "alice");
    let bob = as_who(&b, "bob");
    let (ok, s) = bob.wait_until(Duration::from_secs(20), |s| {
        video_sources(s, 10) == names(&["alice"])
    });
    assert!(ok, "bob did not get alice: {:#?}", s.slots);
    // alice moves to b with the same token while a still lists her (as a
    // client does whose node it believes gone): b's room has one alice.
    let again = as_who(&b, "alice");
    let (ok, s) = bob.wait_until(Duration::from_secs(10), |s| {
        video_sources(s, 10).contains(&"alice".to_owned()) && roster_names(s) == ["alice", "bob"]
    });
    assert!(ok, "bob's roster after the move: {:?}", roster_names(&s));
    let (_, _, body) = b.request("GET", "/api/v1/rooms/w", &[("authorization", &admin)], "");
    let room = json_of(&body);
    assert_eq!(
        room["participants"].as_array().map(Vec::len),
        Some(2),
        "{room}"
    );
    drop(alice);
    drop(again);
}

#[test]
fn a_packet_crosses_to_a_node_once_and_fans_out_over_its_shards_there() {
    if corelay_testkit::skip_in_work_stealing("cluster fan-out", "one logical shard") {
        return;
    }
    let Some(nats) = Cluster::start("fanout") else {
        return;
    };
    let a = nats.node("a", &[]);
    // One participant per shard on b: the room spans both of its shards.
    let b = nats.node_with("b", 2, &["--max-participants-per-shard", "1"]);
    all_see(&[&a, &b], &["a", "b"]);
    let alice = join(&a, "f", "alice");
    let bob = join(&b, "f", "bob");
    let carol = join(&b, "f", "carol");
    for (who, p, want) in [
        ("bob", &bob, names(&["alice", "carol"])),
        ("carol", &carol, names(&["alice", "bob"])),
        ("alice", &alice, names(&["bob", "carol"])),
    ] {
        let (ok, s) = p.wait_until(Duration::from_secs(20), |s| {
            video_sources(s, 30) == want && audio_sources(s, 30) == want
        });
        assert!(ok, "{who} did not get {want:?}: {:#?}", s.slots);
    }
    // alice's packets reach b's lowest shard over the relay and its other
    // shard from there: b's second shard gets its alice media from its
    // first, not from a.
    let stats = b.get_json("/api/v1/stats");
    let shards = stats["shards"].as_array().expect("shards");
    let fanned = shards[0]["counters"]["cross_shard_out"]
        .as_u64()
        .unwrap_or(0);
    let relayed_in: Vec<u64> = shards
        .iter()
        .map(|s| s["counters"]["relay_rx_bytes"].as_u64().unwrap_or(0))
        .collect();
    eprintln!(
        "b: shard 0 sent {fanned} packets on to shard 1; relay bytes in per shard {relayed_in:?}"
    );
    assert!(fanned > 100, "b's shard 0 did not fan alice out: {stats}");
    // Shard 1 takes from the relay only what is sent to it (bob's and
    // alice's control, pings), not alice's media: far fewer bytes.
    assert!(
        relayed_in[1] * 5 < relayed_in[0],
        "b's shard 1 got media over the relay too: {relayed_in:?}"
    );
}
