//! A room across nodes, in virtual time (issue 49, "How it is proven"):
//! two and three nodes, each with its own shards and its own directory,
//! joined by the simulated relay and member exchange of
//! [`corelay_sim::Cluster`]. What members on other nodes receive, what the
//! rosters, speaker and slots say, loss on the relay hop, a node that
//! vanishes, and control state that outlives a relay outage. Owns these
//! scenarios only; must not reach into engine internals beyond the public
//! counters a test names.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use corelay_sim::corelay_client::{Kind, ParticipantConfig, VideoSource};
use corelay_sim::corelay_core::RtcSettings;
use corelay_sim::{C, Cluster, LinkParams, NODE_EXPIRY, Sim};

mod common;
use common::*;

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn cluster(seed: u64, shards: &[usize]) -> Cluster {
    Cluster::new(seed, shards, RtcSettings::default())
}

/// Publishes video and talking audio, with `slots` slots of each kind.
fn talker(name: &str, slots: usize) -> ParticipantConfig {
    let mut c = ParticipantConfig::new(name);
    c.video_slots = slots;
    c.audio_slots = slots;
    c
}

/// The ids the client's last roster lists.
fn roster(s: &Sim, c: C) -> BTreeSet<String> {
    s.events(c, "roster")
        .last()
        .and_then(|r| r["participants"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_string))
        .collect()
}

/// The participant the client's last `speaker` event names.
fn speaker(s: &Sim, c: C) -> Option<String> {
    s.events(c, "speaker")
        .last()
        .and_then(|e| e["participant"].as_str().map(str::to_string))
}

/// The layer (stamp: 1 q, 2 h, 3 f) of each video frame the client
/// received after `since`, in order.
fn layers_since(s: &Sim, c: C, since: Instant) -> Vec<u8> {
    video_packets(s, c)
        .into_iter()
        .filter(|p| p.at >= since && p.index == 0)
        .map(|p| p.layer)
        .collect()
}

/// The longest `c` went without the first packet of a new video frame
/// between `since` and now.
fn largest_frame_gap(s: &Sim, c: C, since: Instant) -> Duration {
    let mut frames: Vec<Instant> = video_packets(s, c)
        .into_iter()
        .filter(|x| x.index == 0 && x.at >= since)
        .map(|x| x.at)
        .collect();
    frames.insert(0, since);
    frames.push(s.now);
    frames
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(Duration::MAX)
}

/// Everyone in `members` (node, client) receives every other one's audio
/// and video (complete frames, from the right publisher, nothing corrupt)
/// and lists every one of them in its roster.
fn assert_full_exchange(cl: &Cluster, members: &[(usize, C)]) {
    let ids: BTreeSet<String> = members.iter().map(|&(n, c)| cl[n].id(c)).collect();
    for &(n, me) in members {
        let s = &cl[n];
        let my_name = s.client(me).name.clone();
        let snap = s.snapshot(me);
        assert!(snap.connected && snap.channel_open, "{my_name}: {snap:?}");
        assert_eq!(snap.corrupt(), 0, "{my_name}");
        assert_eq!(roster(s, me), ids, "{my_name}'s roster");
        for &(m, other) in members.iter().filter(|&&(m, o)| (m, o) != (n, me)) {
            let name = cl[m].client(other).name.clone();
            let video = s.showing(me, Kind::Video, S);
            let audio = s.showing(me, Kind::Audio, S);
            assert!(
                video.contains(&name) && audio.contains(&name),
                "{my_name} (node {n}) gets video {video:?}, audio {audio:?}: not {name} (node {m})"
            );
            assert!(
                snap.frames_from(&name) > 100,
                "{my_name} decoded {} frames of {name}",
                snap.frames_from(&name)
            );
        }
    }
}

// ------------------------------------------------------------ a room across nodes

/// (c1) A room across two nodes: on node 0 one member on each of its two
/// shards, on node 1 two on one shard. Every pair receives the other's
/// audio and video, whole, and every roster lists all four, with the ids
/// their own nodes gave them. Each track crosses to node 1 once, whatever
/// the number of subscribers there.
#[test]
fn cluster_a_room_across_two_nodes() {
    let mut cl = cluster(101, &[2, 1]);
    let a = cl.join(0, "r", talker("a", 3), 0);
    let b = cl.join(0, "r", talker("b", 3), 1);
    let c = cl.join(1, "r", talker("c", 3), 0);
    let d = cl.join(1, "r", talker("d", 3), 0);
    cl.run_for(6 * S);
    let members = [(0, a), (0, b), (1, c), (1, d)];
    assert_full_exchange(&cl, &members);
    // Each node names the other by a slot of its own: the relay named the
    // senders as the receivers know them.
    assert_eq!(cl.slot_of(0, 1), Some(0));
    assert_eq!(cl.slot_of(1, 0), Some(0));
    assert_eq!(cl.stats.unknown + cl.stats.undecodable, 0, "{:?}", cl.stats);
    // One copy per node: what crossed to node 1 is about what a and b sent
    // (media, plus a little control), not twice that for c and d.
    let sent = cl[0].snapshot(a).sent_packets + cl[0].snapshot(b).sent_packets;
    let crossed = cl.relay_stats(0, 1).delivered;
    eprintln!("a and b sent {sent} packets; {crossed} datagrams crossed to node 1");
    assert!(
        crossed * 10 > sent * 9 && crossed * 10 < sent * 11,
        "{crossed} relayed for {sent} sent"
    );
    // Latency: two 5 ms client hops, plus the relay's 2 ms across nodes.
    let snap = cl[1].snapshot(c);
    for st in snap.slots.values() {
        let want = if st.sources == ["d"] { 10_000 } else { 12_000 };
        assert!(
            st.latency_us.iter().all(|&l| l.abs_diff(want) <= 100),
            "{} from {:?}: {:?}",
            st.kind,
            st.sources,
            st.latency_us
        );
    }
}

/// (c2) A room across three nodes, one member on each: everyone receives
/// both others, rosters list all three.
#[test]
fn cluster_a_room_across_three_nodes() {
    let mut cl = cluster(102, &[1, 1, 1]);
    let a = cl.join(0, "r", talker("a", 2), 0);
    let b = cl.join(1, "r", talker("b", 2), 0);
    let c = cl.join(2, "r", talker("c", 2), 0);
    cl.run_for(6 * S);
    assert_full_exchange(&cl, &[(0, a), (1, b), (2, c)]);
    // Slots are given in the order nodes are first heard of.
    for n in 0..3 {
        let slots: BTreeSet<usize> = (0..3)
            .filter(|&m| m != n)
            .filter_map(|m| cl.slot_of(n, m))
            .collect();
        assert_eq!(slots, BTreeSet::from([0, 1]), "node {n}");
    }
    assert_eq!(cl.stats.unknown + cl.stats.undecodable, 0, "{:?}", cl.stats);
}

/// (c3) The active speaker and the slots are the room's across three
/// nodes: silent publishers on each node, a viewer with one video slot on
/// nodes 0 and 2. Whoever talks, on whichever node, is the speaker for
/// every viewer and fills their slot; when they stop and another talks,
/// every viewer switches.
#[test]
fn cluster_speaker_and_slots_span_nodes() {
    let mut cl = cluster(103, &[1, 1, 1]);
    let p0 = cl.join(0, "r", publisher("p0"), 0);
    let p1 = cl.join(1, "r", publisher("p1"), 0);
    let p2 = cl.join(2, "r", publisher("p2"), 0);
    let v0 = cl.join(0, "r", viewer("v0", 1), 0);
    let v2 = cl.join(2, "r", viewer("v2", 1), 0);
    cl.run_for(2 * S);
    let viewers = [(0, v0), (2, v2)];
    for (talks, node, quiet) in [
        (p1, 1, None),
        (p2, 2, Some((p1, 1))),
        (p0, 0, Some((p2, 2))),
    ] {
        if let Some((q, n)) = quiet {
            cl[n].set_speaking(q, false);
        }
        cl[node].set_speaking(talks, true);
        let id = cl[node].id(talks);
        let name = cl[node].client(talks).name.clone();
        let all = cl.run_until(4 * S, |cl| {
            viewers
                .iter()
                .all(|&(n, v)| speaker(&cl[n], v).as_deref() == Some(id.as_str()))
        });
        assert!(
            all,
            "{name} (node {node}) did not become everyone's speaker"
        );
        cl.run_for(S);
        for &(n, v) in &viewers {
            let shown = [name.as_str()];
            assert_eq!(
                cl[n].showing(v, Kind::Video, 300 * MS),
                shown,
                "viewer on node {n}"
            );
            assert_eq!(cl[n].showing(v, Kind::Audio, 300 * MS), shown);
            let slot = video_slots(&cl[n], v).remove(0);
            assert_eq!(cl[n].slots(v)[&slot], Some(id.clone()));
        }
    }
}

// ------------------------------------------------------------ loss on the hop

/// (c4) 5% loss (and jitter) on the relay both ways: a subscriber on the
/// far node still decodes the publisher's video continuously, like one on
/// the publisher's own node: no freeze, no corrupt frame, nearly every
/// frame complete.
///
/// The relay repairs its own loss, as the server's does (the receiver
/// asks for a gap at once, the sender resends once from what it kept;
/// modelled in `Cluster::send`). Without that repair the far subscriber
/// NACKs a hole its node's egress history never had, and about 6% of its
/// frames never complete (23 of 360 with this seed).
#[test]
fn cluster_loss_on_the_relay_hop_is_repaired() {
    let mut cl = cluster(104, &[1, 1]);
    cl.set_relay(&LinkParams {
        delay: 2 * MS,
        jitter: 2 * MS,
        loss: 0.05,
        ..Default::default()
    });
    let p = cl.join(0, "r", publisher("p"), 0);
    let near = cl.join(0, "r", viewer("near", 1), 0);
    let far = cl.join(1, "r", viewer("far", 1), 0);
    cl.run_for(2 * S);
    let since = cl.now;
    cl.run_for(10 * S);
    let lost = cl.relay_stats(0, 1).lost + cl.relay_stats(1, 0).lost;
    assert!(lost > 50, "the relay lost {lost}");
    assert!(cl.stats.resent > 50, "the relay resent {}", cl.stats.resent);
    let sent = cl[0].snapshot(p).sent_video_frames;
    for (who, s, c) in [("near", &cl[0], near), ("far", &cl[1], far)] {
        let snap = s.snapshot(c);
        let st = snap.slots.values().find(|st| st.kind == "video").unwrap();
        let got = st.frames_by_source.get("p").copied().unwrap_or(0);
        let gap = largest_frame_gap(s, c, since);
        let e = s.shards[0].engine.counters();
        eprintln!(
            "{who}: {got} of {sent} frames, {} missing, {} freezes, largest gap {gap:?}, {} nacks; its shard took {} nacks, resent {}",
            st.frames_missing, st.freezes, snap.nacks_sent, e.nacks_received, e.resent_direct
        );
        assert_eq!(snap.corrupt(), 0, "{who}");
        assert_eq!(st.freezes, 0, "{who} froze");
        assert!(gap < 250 * MS, "{who} went {gap:?} without a new frame");
        assert!(
            got * 100 > sent * 97,
            "{who} decoded {got} of {sent} frames"
        );
    }
}

// ------------------------------------------------------------ a node vanishes

/// (c5) A node vanishes (its engines, clients and snapshots stop at once):
/// after the directory's expiry the other nodes drop its members: their
/// rosters no longer list it, and a slot that showed its publisher shows
/// another one. Before the expiry nothing has changed yet (what removes
/// them is the expiry, not a side effect); within 4 s it has.
#[test]
fn cluster_a_vanished_nodes_members_leave_within_seconds() {
    let mut cl = cluster(105, &[1, 1, 1]);
    let a = cl.join(0, "r", publisher("a"), 0);
    let b = cl.join(1, "r", publisher("b"), 0);
    let c = cl.join(2, "r", publisher("c"), 0);
    let v0 = cl.join(0, "r", viewer("v0", 1), 0);
    let v2 = cl.join(2, "r", viewer("v2", 1), 0);
    cl[1].set_speaking(b, true);
    cl.run_for(4 * S);
    let viewers = [(0, v0), (2, v2)];
    for &(n, v) in &viewers {
        assert_eq!(cl[n].showing(v, Kind::Video, 300 * MS), ["b"], "node {n}");
        assert_eq!(roster(&cl[n], v).len(), 5, "node {n}");
    }
    let b_id = cl[1].id(b);
    cl.vanish(1);
    let gone_at = cl.now;
    cl.run_for(NODE_EXPIRY - 1500 * MS);
    for &(n, v) in &viewers {
        assert!(
            roster(&cl[n], v).contains(&b_id),
            "node {n} dropped b early"
        );
    }
    let dropped = cl.run_until(4 * S, |cl| {
        viewers
            .iter()
            .all(|&(n, v)| !roster(&cl[n], v).contains(&b_id))
    });
    let took = cl.now - gone_at;
    eprintln!("b dropped from every roster {took:?} after its node vanished");
    assert!(dropped, "b still listed {took:?} after its node vanished");
    assert!(took <= 4 * S, "{took:?}");
    let rest: BTreeSet<String> = [(0, a), (2, c), (0, v0), (2, v2)]
        .iter()
        .map(|&(n, x)| cl[n].id(x))
        .collect();
    let mut expired: Vec<(usize, usize)> = cl.expiries.iter().map(|&(_, m, n)| (m, n)).collect();
    expired.sort_unstable();
    assert_eq!(expired, [(0, 1), (2, 1)]);
    // The slots refill with the publishers that are left.
    cl.run_for(S);
    for &(n, v) in &viewers {
        assert_eq!(roster(&cl[n], v), rest, "node {n}");
        let showing = cl[n].showing(v, Kind::Video, 500 * MS);
        assert!(
            showing == ["a"] || showing == ["c"],
            "node {n}'s viewer shows {showing:?}"
        );
        let slot = video_slots(&cl[n], v).remove(0);
        let shown = cl[n].slots(v)[&slot].clone();
        assert!(
            shown.is_some() && shown != Some(b_id.clone()),
            "slot shows {shown:?}"
        );
    }
}

// ------------------------------------------------------------ control state

/// [`simulcast_publisher`] whose only keyframes are its first and the
/// ones it is asked for: video that starts on a slot proves a keyframe
/// request reached it.
fn simulcast_keyframe_once(name: &str) -> ParticipantConfig {
    let mut c = simulcast_publisher(name);
    for l in &mut c.simulcast {
        if let VideoSource::Synthetic {
            keyframe_interval, ..
        } = l
        {
            *keyframe_interval = 100_000;
        }
    }
    c
}

/// (c6) Control state outlives a relay outage. A simulcast publisher on
/// node 0 (keyframes only when asked) and a viewer on node 1; the way back
/// (node 1 to node 0: layer demand, keyframe requests) is cut when the
/// viewer joins, so its shard's first demand is lost, and with it every
/// layer: a layer crosses to another node only when someone there
/// demands it. Once the relay passes again the demand arrives at its next
/// refresh (every second; a demand sent only when it changed would be lost
/// for good), media crosses, and the slot's keyframe request brings the
/// video up. Growing the view, the viewer then climbs to f, its demand
/// and keyframe requests crossing at every step. Then a longer outage:
/// the publisher's node lets the unrefreshed demand expire (3 s) and stops
/// sending across; when the relay passes again, the video comes back.
#[test]
fn cluster_layer_demand_and_keyframe_requests_survive_a_relay_outage() {
    let mut cl = cluster(106, &[1, 1]);
    let p = cl.join(0, "r", simulcast_keyframe_once("p"), 0);
    cl.run_for(S);
    cl.relay_link(1, 0).cut = true;
    let v = cl.join(1, "r", viewer("v", 1), 0);
    cl.run_for(3 * S);
    assert!(cl.relay_stats(1, 0).cut_drops > 0);
    assert!(cl[1].snapshot(v).connected);
    assert!(
        video_packets(&cl[1], v).is_empty(),
        "video crossed undemanded"
    );
    let k0 = cl[0].snapshot(p).keyframe_requests;
    cl.relay_link(1, 0).cut = false;
    let back = cl.now;
    let flows = cl.run_until(3 * S, |cl| !video_packets(&cl[1], v).is_empty());
    let took = cl.now - back;
    eprintln!("video reached v {took:?} after the relay passed again");
    assert!(flows, "no video after the relay passed again");
    assert!(took <= 1200 * MS, "{took:?}");
    assert!(video_packets(&cl[1], v)[0].keyframe);
    assert!(cl[0].snapshot(p).keyframe_requests > k0);
    cl.run_for(2 * S);
    assert!(largest_frame_gap(&cl[1], v, cl.now - S) < 200 * MS);

    // The climbs, one layer at a time, to f.
    let slot = video_slots(&cl[1], v).remove(0);
    set_view(&mut cl[1], v, &slot, 1280, 720);
    cl.run_for(12 * S);
    let active = active_layers(&cl[0], p).unwrap_or_default();
    assert!(
        active.as_array().is_some_and(|a| a.contains(&"f".into())),
        "p sends {active}"
    );
    let big = layers_since(&cl[1], v, cl.now - 2 * S);
    assert!(big.len() > 20 && big.iter().all(|&l| l == 3), "{big:?}");

    // Six seconds cut: p's node forgets the demand (3 s after its last
    // refresh), and nothing crosses any more.
    cl.relay_link(1, 0).cut = true;
    let cut = cl.now;
    cl.run_for(6 * S);
    let last = video_packets(&cl[1], v).last().map(|x| x.at - cut);
    eprintln!("video stopped {last:?} into the outage");
    assert!(
        last.is_some_and(|l| l > S && l < 4 * S),
        "video stopped {last:?} into the outage"
    );
    cl.relay_link(1, 0).cut = false;
    let back = cl.now;
    let again = cl.run_until(3 * S, |cl| {
        video_packets(&cl[1], v).last().is_some_and(|x| x.at > back)
    });
    let took = cl.now - back;
    eprintln!("video came back {took:?} after the second outage");
    assert!(again, "no video after the relay passed again");
    assert!(took <= 1200 * MS, "{took:?}");
    cl.run_for(3 * S);
    assert!(largest_frame_gap(&cl[1], v, cl.now - 2 * S) < 200 * MS);
    assert_eq!(cl[1].snapshot(v).corrupt(), 0);
}

/// (c7) Control state outlives a full, lossy relay: the way from node 1
/// to node 0 is capped at 300 kbit/s with a small queue, and a publisher
/// on node 1 whose video (about 400 kbit/s) a viewer on node 0 watches
/// keeps it overflowing (its media is dropped by the hundred); that way
/// also loses 20% of what it carries, so the layer demand and keyframe
/// requests of node 1's viewer are lost too (a tail-drop queue by bytes
/// seldom drops a small datagram: the loss makes sure some are). Its
/// simulcast publisher on node 0 still hears it: the demand is re-sent
/// every second, the requests while its slot waits. The viewer climbs to f.
#[test]
fn cluster_control_crosses_a_full_relay() {
    let mut cl = cluster(107, &[1, 1]);
    {
        let back = &mut cl.relay_link(1, 0).up.params;
        back.rate_bps = Some(300_000);
        back.burst_bytes = 3_000;
        back.queue_bytes = 6_000;
        back.loss = 0.2;
    }
    let p = cl.join(0, "r", simulcast_keyframe_once("p"), 0);
    let q = cl.join(1, "r", publisher("q"), 0);
    let v = cl.join(1, "r", viewer("v", 1), 0);
    let w = cl.join(0, "r", viewer("w", 1), 0);
    cl.run_for(S);
    // v (node 1) watches p (node 0), w (node 0) watches q (node 1).
    let slot = video_slots(&cl[1], v).remove(0);
    let pin = serde_json::json!({"type": "pin", "participant": cl[0].id(p), "mid": slot});
    cl[1].participant(v).send_event(&pin.to_string());
    let w_slot = video_slots(&cl[0], w).remove(0);
    let pin = serde_json::json!({"type": "pin", "participant": cl[1].id(q), "mid": w_slot});
    cl[0].participant(w).send_event(&pin.to_string());
    set_view(&mut cl[1], v, &slot, 1280, 720);
    cl.run_for(12 * S);
    let since = cl.now;
    cl.run_for(8 * S);
    let st = cl.relay_stats(1, 0);
    eprintln!("node 1 -> 0: {st:?}; {:?}", cl.stats);
    assert!(st.queue_drops > 100, "{st:?}");
    // Control was lost there too (the way 0 -> 1 loses nothing).
    let lost = cl.stats.control_sent - cl.stats.control_delivered;
    assert!(lost > 0, "{:?}", cl.stats);
    assert_eq!(cl[0].showing(w, Kind::Video, S), ["q"]);
    let active = active_layers(&cl[0], p).unwrap_or_default();
    assert!(
        active.as_array().is_some_and(|a| a.contains(&"f".into())),
        "p sends {active}"
    );
    // v is on f, but for an outage now and then: three refreshes of its
    // demand lost in a row (13.25, 14.25 and 15.25 s with this seed) let
    // it expire on p's node, and video stops crossing until a refresh
    // gets through again (about a second).
    let f = layers_since(&cl[1], v, since);
    let gap = largest_frame_gap(&cl[1], v, since);
    eprintln!(
        "v: {} frames on f of {} in 8 s; longest without a frame {gap:?}",
        f.iter().filter(|&&l| l == 3).count(),
        f.len()
    );
    assert!(
        f.iter().filter(|&&l| l == 3).count() > 8 * 30 * 3 / 4,
        "{f:?}"
    );
    assert!(gap < 2 * S, "{gap:?}");
    assert_eq!(cl[1].snapshot(v).corrupt(), 0);
}

/// (c8) A cluster's run repeats: the same seed, the same packets at the
/// same virtual instants on every node.
#[test]
fn cluster_same_seed_same_outcome() {
    let run = || {
        let mut cl = cluster(108, &[1, 2]);
        cl.set_relay(&LinkParams {
            delay: 3 * MS,
            jitter: 2 * MS,
            loss: 0.02,
            ..Default::default()
        });
        let a = cl.join(0, "r", talker("a", 2), 0);
        let b = cl.join(1, "r", talker("b", 2), 1);
        let c = cl.join(1, "r", talker("c", 2), 0);
        cl.run_for(3 * S);
        [(0, a), (1, b), (1, c)]
            .iter()
            .map(|&(n, x)| {
                cl[n]
                    .packets(x)
                    .iter()
                    .map(|p| {
                        (
                            p.at - cl.start,
                            p.slot.clone(),
                            p.seq,
                            p.ssrc,
                            p.source.clone(),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    let (one, two) = (run(), run());
    assert!(one.iter().all(|p| p.len() > 200));
    assert_eq!(one, two);
}

/// (c9) Dynacast across three nodes: a simulcast publisher on node 0, a
/// small viewer on node 1, a big one on node 2. Each node's demand reaches
/// the publisher's node named as that node names its sender, so each
/// layer crosses only to the node that takes it: q to node 1, f to node 2
/// (about ten times the datagrams); the publisher is asked for both, and
/// each viewer gets its own.
#[test]
fn cluster_each_layer_crosses_only_to_the_node_that_takes_it() {
    let mut cl = cluster(109, &[1, 1, 1]);
    let p = cl.join(0, "r", simulcast_publisher("p"), 0);
    let small = cl.join(1, "r", viewer("small", 1), 0);
    let big = cl.join(2, "r", viewer("big", 1), 0);
    cl.run_for(S);
    let slot = video_slots(&cl[1], small).remove(0);
    set_view(&mut cl[1], small, &slot, 320, 180);
    let slot = video_slots(&cl[2], big).remove(0);
    set_view(&mut cl[2], big, &slot, 1280, 720);
    cl.run_for(14 * S);
    let since = cl.now;
    let crossed = |cl: &Cluster| {
        let audio = cl[0].snapshot(p).sent_audio_packets;
        (
            cl.relay_stats(0, 1).delivered - audio,
            cl.relay_stats(0, 2).delivered - audio,
        )
    };
    let (to1, to2) = crossed(&cl);
    cl.run_for(4 * S);
    // Besides p's audio, which crosses to both (and a little control).
    let to1 = crossed(&cl).0 - to1;
    let to2 = crossed(&cl).1 - to2;
    eprintln!("in 4 s, {to1} video datagrams crossed to node 1 and {to2} to node 2");
    let q = layers_since(&cl[1], small, since);
    let f = layers_since(&cl[2], big, since);
    assert!(q.len() > 100 && q.iter().all(|&l| l == 1), "{q:?}");
    assert!(f.len() > 100 && f.iter().all(|&l| l == 3), "{f:?}");
    assert!(
        to1 > 50 && to1 * 4 < to2,
        "{to1} to node 1, {to2} to node 2"
    );
    let active = active_layers(&cl[0], p).unwrap_or_default();
    let active = active.as_array().cloned().unwrap_or_default();
    assert!(
        active.contains(&"q".into()) && active.contains(&"f".into()),
        "p sends {active:?}"
    );
}

/// (c10) The engine that carries the member exchange (NATS) is down for
/// 10 s: no node expires another, and the call across the nodes goes on
/// (the relay is not the engine's). A member who joins meanwhile is seen
/// on its own node only; when the engine comes back the directories
/// reconcile: everyone lists everyone, once, and the newcomer's media
/// crosses both ways.
#[test]
fn cluster_calls_go_on_without_the_exchange_and_reconcile_after() {
    let mut cl = cluster(110, &[1, 1]);
    let a = cl.join(0, "r", talker("a", 2), 0);
    let b = cl.join(1, "r", talker("b", 2), 0);
    cl.run_for(3 * S);
    cl.set_exchange(false);
    let c = cl.join(1, "r", talker("c", 2), 0);
    cl.run_for(10 * S);
    assert!(cl.expiries.is_empty(), "{:?}", cl.expiries);
    assert_eq!(cl[0].showing(a, Kind::Video, S), ["b"]);
    assert_eq!(cl[1].showing(b, Kind::Video, S), ["a", "c"]);
    let (ida, idb, idc) = (cl[0].id(a), cl[1].id(b), cl[1].id(c));
    assert_eq!(
        roster(&cl[0], a),
        BTreeSet::from([ida.clone(), idb.clone()])
    );
    assert_eq!(
        roster(&cl[1], c),
        BTreeSet::from([ida.clone(), idb.clone(), idc.clone()])
    );
    assert!(cl[1].showing(c, Kind::Video, S).contains(&"b".to_string()));
    cl.set_exchange(true);
    let back = cl.now;
    let all = BTreeSet::from([ida, idb, idc]);
    let seen = cl.run_until(2 * S, |cl| roster(&cl[0], a) == all);
    eprintln!(
        "reconciled {:?} after the exchange came back",
        cl.now - back
    );
    assert!(seen, "a's roster: {:?}", roster(&cl[0], a));
    cl.run_for(4 * S);
    assert_full_exchange(&cl, &[(0, a), (1, b), (1, c)]);
    for (n, x) in [(0, a), (1, b), (1, c)] {
        let last = cl[n].events(x, "roster").last().cloned().unwrap();
        assert_eq!(last["participants"].as_array().map(Vec::len), Some(3));
    }
    assert!(cl.expiries.is_empty(), "{:?}", cl.expiries);
}
