//! "Why is my call bad?": the verdict on one subscriber's slot, once a
//! second. Is what it shows good, or is the publisher's uplink, the
//! subscriber's downlink or the server to blame (issue 52)? One pure
//! function over figures the engine and the shards keep anyway (the
//! participants' statistics, the shards' reports, the roster's track
//! states), with the thresholds below; docs/operations.md ("Why is my call
//! bad?") gives each and why.
//!
//! Owns the rules and their thresholds; [`Board`] keeps what they gave
//! (history, totals), fed once a second by the server's control thread and
//! the simulator. Must not: measure anything itself or run per packet.

mod board;

use serde::Serialize;

pub use self::board::{Board, MIN_SAMPLES, ShardSecond, ShardTotals, SlotOut, WARN_AFTER};

use crate::room::TrackState;

/// What a slot's media suffers from, if anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Good,
    /// The publisher's packets reach the server lost or late.
    PublisherUplink,
    /// The subscriber's link does not carry what the slot wants, or loses it.
    SubscriberDownlink,
    /// The server reads or forwards late, or drops.
    Server,
    /// Nothing to show: an empty slot, a hidden one, a muted or paused track.
    Idle,
}

impl Verdict {
    pub const ALL: [Verdict; 5] = [
        Verdict::Good,
        Verdict::PublisherUplink,
        Verdict::SubscriberDownlink,
        Verdict::Server,
        Verdict::Idle,
    ];

    /// Its stable name (JSON, metrics, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Good => "good",
            Verdict::PublisherUplink => "publisher_uplink",
            Verdict::SubscriberDownlink => "subscriber_downlink",
            Verdict::Server => "server",
            Verdict::Idle => "idle",
        }
    }

    /// One letter per second in a slot's history string.
    pub fn letter(self) -> char {
        match self {
            Verdict::Good => 'g',
            Verdict::PublisherUplink => 'u',
            Verdict::SubscriberDownlink => 'd',
            Verdict::Server => 's',
            Verdict::Idle => 'i',
        }
    }

    /// Whether the user sees or hears something wrong.
    pub fn bad(self) -> bool {
        matches!(
            self,
            Verdict::PublisherUplink | Verdict::SubscriberDownlink | Verdict::Server
        )
    }
}

/// Loss on a link (publisher's uplink, subscriber's downlink) from which
/// media suffers visibly: past what NACK and resends hide on a short RTT.
pub const LOSS: f64 = 0.05;
/// Interarrival jitter of the publisher's media at the server, ms: past a
/// receiver's usual jitter buffer target.
pub const JITTER_MS: f64 = 30.0;
/// A subscriber's RTT has risen when it is this many times its lowest...
pub const RTT_RISE: f64 = 2.0;
/// ...and at least this much above it, ms (a 1 ms path doubling is nothing).
pub const RTT_RISE_MS: f64 = 100.0;
/// How long a new subscriber's estimate gets to climb before a layer held
/// below what its slots want counts against its downlink (a browser's
/// estimate reaches a megabit or two in about that).
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(5);
/// A shard this busy (share of wall time on its core) has no slack left.
pub const BUSY: f64 = 0.95;
/// Socket dwell p99 above this, µs: packets waited longer than this in
/// the shard's socket. The figures are the upper edges of the latency
/// histogram's buckets (`metrics::LATENCY_EDGES_US`), so a p99 of 5 000
/// means "at most 5 ms" and only the next edge (10 000) is over.
pub const DWELL_P99_US: f64 = 5_000.0;
/// Forwarding latency p99 (kernel receive to send) above this, µs.
pub const FORWARD_P99_US: f64 = 10_000.0;
/// The cross-shard hop's p99 above this, µs: media a peer shard handed
/// over waited longer than this (in the lane, then for this shard to drain
/// it). A healthy hop is one loop iteration of the receiving shard, tens of
/// µs; 10 ms, the forwarding bound, is the whole budget of a forward.
pub const PEER_HOP_P99_US: f64 = 10_000.0;

/// What the verdict on one slot reads, for the last second.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    pub video: bool,
    /// The state of the track the slot shows; `None`: the slot is empty.
    pub source: Option<TrackState>,
    /// The subscriber shows the slot (a video slot sized 0x0 is hidden).
    pub shown: bool,
    /// Video: the layer the slot's size asks for (capped by what the source
    /// sends), and the one the allocation aims at (`None`: paused).
    pub wanted: Option<u8>,
    pub target: Option<u8>,
    /// The subscriber has been in the call for [`SETTLE`]: before that its
    /// estimate is still climbing, and a layer below the wanted one is the
    /// start of every call, not its downlink's fault.
    pub settled: bool,
    /// The publisher's uplink, as the server receives it.
    pub ingress_loss: Option<f64>,
    pub ingress_jitter_ms: Option<f64>,
    /// The subscriber's downlink: its receiver reports, its RTT and the
    /// lowest RTT it had, its estimate.
    pub egress_loss: Option<f64>,
    pub rtt_ms: Option<f64>,
    pub rtt_floor_ms: Option<f64>,
    pub estimate_bps: Option<u64>,
    /// The worse of the publisher's and the subscriber's shards.
    pub busy: f64,
    pub dwell_p99_us: Option<f64>,
    pub forward_p99_us: Option<f64>,
    /// The cross-shard hop into the subscriber's shard (or the publisher's
    /// for a relayed track's fan-out), p99, µs.
    pub peer_hop_p99_us: Option<f64>,
    /// Packets the server dropped on its side in the second (send buffer
    /// full, a peer shard's queue full).
    pub server_drops: u64,
}

/// One figure that decided a verdict, against its threshold.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Evidence {
    pub figure: &'static str,
    pub value: f64,
    pub threshold: f64,
}

/// A verdict and the figures that decided it (at most three).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judgement {
    pub verdict: Verdict,
    pub evidence: Vec<Evidence>,
}

/// The verdict on one slot. In order: nothing to show is `idle`; then the
/// server (its own figures only: it is never blamed for the network's
/// loss), the publisher's uplink (it spoils the slot for every subscriber),
/// the subscriber's downlink; else `good`.
pub fn judge(f: &Figures) -> Judgement {
    let verdict = |verdict, evidence: Vec<Evidence>| Judgement {
        verdict,
        evidence: evidence.into_iter().take(3).collect(),
    };
    let ev = |figure, value, threshold| Evidence {
        figure,
        value,
        threshold,
    };
    let Some(state) = f.source else {
        return verdict(Verdict::Idle, vec![]);
    };
    if state.muted || state.paused || !f.shown {
        let why = if state.muted {
            "muted"
        } else if state.paused {
            "paused"
        } else {
            "hidden"
        };
        return verdict(Verdict::Idle, vec![ev(why, 1.0, 1.0)]);
    }

    let mut server = Vec::new();
    if f.busy >= BUSY {
        server.push(ev("shard_busy", f.busy, BUSY));
    }
    if let Some(v) = f.dwell_p99_us.filter(|v| *v > DWELL_P99_US) {
        server.push(ev("dwell_p99_us", v, DWELL_P99_US));
    }
    if let Some(v) = f.forward_p99_us.filter(|v| *v > FORWARD_P99_US) {
        server.push(ev("forward_p99_us", v, FORWARD_P99_US));
    }
    if let Some(v) = f.peer_hop_p99_us.filter(|v| *v > PEER_HOP_P99_US) {
        server.push(ev("peer_hop_p99_us", v, PEER_HOP_P99_US));
    }
    if f.server_drops > 0 {
        server.push(ev("server_drops", f.server_drops as f64, 0.0));
    }
    if !server.is_empty() {
        return verdict(Verdict::Server, server);
    }

    let mut uplink = Vec::new();
    if let Some(v) = f.ingress_loss.filter(|v| *v >= LOSS) {
        uplink.push(ev("ingress_loss", v, LOSS));
    }
    if let Some(v) = f.ingress_jitter_ms.filter(|v| *v >= JITTER_MS) {
        uplink.push(ev("ingress_jitter_ms", v, JITTER_MS));
    }
    if !uplink.is_empty() {
        return verdict(Verdict::PublisherUplink, uplink);
    }

    let mut downlink = Vec::new();
    if let Some(v) = f.egress_loss.filter(|v| *v >= LOSS) {
        downlink.push(ev("egress_loss", v, LOSS));
    }
    if let (Some(rtt), Some(floor)) = (f.rtt_ms, f.rtt_floor_ms) {
        let risen = floor * RTT_RISE;
        if rtt >= risen && rtt - floor >= RTT_RISE_MS {
            downlink.push(ev("rtt_ms", rtt, risen.max(floor + RTT_RISE_MS)));
        }
    }
    if f.video
        && f.settled
        && let Some(wanted) = f.wanted
    {
        // The allocation holds the slot below what its size asks for (or
        // pauses it): the subscriber's estimate does not carry more.
        let held = f.target.is_none_or(|t| t < wanted);
        if held {
            let target = f.target.map_or(-1.0, f64::from);
            downlink.push(ev("layer", target, f64::from(wanted)));
            if let Some(bps) = f.estimate_bps {
                downlink.push(ev("estimate_bps", bps as f64, 0.0));
            }
        }
    }
    if !downlink.is_empty() {
        return verdict(Verdict::SubscriberDownlink, downlink);
    }
    verdict(Verdict::Good, vec![])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clean call: a shown video slot at the layer it wants, on a quiet
    /// server and clean links.
    fn clean() -> Figures {
        Figures {
            video: true,
            source: Some(TrackState::default()),
            shown: true,
            wanted: Some(2),
            target: Some(2),
            settled: true,
            ingress_loss: Some(0.0),
            ingress_jitter_ms: Some(1.0),
            egress_loss: Some(0.0),
            rtt_ms: Some(20.0),
            rtt_floor_ms: Some(18.0),
            estimate_bps: Some(2_500_000),
            busy: 0.3,
            dwell_p99_us: Some(80.0),
            forward_p99_us: Some(300.0),
            peer_hop_p99_us: Some(50.0),
            server_drops: 0,
        }
    }

    fn verdict(f: &Figures) -> Verdict {
        judge(f).verdict
    }

    fn figures(j: &Judgement) -> Vec<&'static str> {
        j.evidence.iter().map(|e| e.figure).collect()
    }

    #[test]
    fn a_clean_call_is_good() {
        assert_eq!(
            judge(&clean()),
            Judgement {
                verdict: Verdict::Good,
                evidence: vec![]
            }
        );
        // Figures not known yet (a new call) do not blame anyone.
        let unknown = Figures {
            ingress_loss: None,
            ingress_jitter_ms: None,
            egress_loss: None,
            rtt_ms: None,
            rtt_floor_ms: None,
            estimate_bps: None,
            dwell_p99_us: None,
            forward_p99_us: None,
            peer_hop_p99_us: None,
            ..clean()
        };
        assert_eq!(verdict(&unknown), Verdict::Good);
    }

    #[test]
    fn nothing_to_show_is_idle_whatever_the_figures() {
        let bad = Figures {
            busy: 1.0,
            ingress_loss: Some(0.5),
            egress_loss: Some(0.5),
            ..clean()
        };
        let empty = Figures {
            source: None,
            ..bad.clone()
        };
        assert_eq!(judge(&empty).verdict, Verdict::Idle);
        for (state, why) in [
            (
                TrackState {
                    muted: true,
                    paused: false,
                },
                "muted",
            ),
            (
                TrackState {
                    muted: false,
                    paused: true,
                },
                "paused",
            ),
        ] {
            let j = judge(&Figures {
                source: Some(state),
                ..bad.clone()
            });
            assert_eq!((j.verdict, figures(&j)), (Verdict::Idle, vec![why]));
        }
        let hidden = judge(&Figures {
            shown: false,
            ..bad
        });
        assert_eq!(
            (hidden.verdict, figures(&hidden)),
            (Verdict::Idle, vec!["hidden"])
        );
    }

    #[test]
    fn the_server_is_blamed_on_its_own_figures_only_and_first() {
        for (f, figure) in [
            (
                Figures {
                    busy: BUSY,
                    ..clean()
                },
                "shard_busy",
            ),
            (
                Figures {
                    dwell_p99_us: Some(10_000.0),
                    ..clean()
                },
                "dwell_p99_us",
            ),
            (
                Figures {
                    forward_p99_us: Some(20_000.0),
                    ..clean()
                },
                "forward_p99_us",
            ),
            (
                Figures {
                    peer_hop_p99_us: Some(20_000.0),
                    ..clean()
                },
                "peer_hop_p99_us",
            ),
            (
                Figures {
                    server_drops: 1,
                    ..clean()
                },
                "server_drops",
            ),
        ] {
            let j = judge(&f);
            assert_eq!((j.verdict, figures(&j)), (Verdict::Server, vec![figure]));
        }
        // At every bound (a p99 in the bucket up to it): not the server.
        let under = Figures {
            busy: BUSY - 0.01,
            dwell_p99_us: Some(DWELL_P99_US),
            forward_p99_us: Some(FORWARD_P99_US),
            peer_hop_p99_us: Some(PEER_HOP_P99_US),
            ..clean()
        };
        assert_eq!(verdict(&under), Verdict::Good);
        // A stalled shard spoils the links' figures too: still the server,
        // with at most three figures.
        let stalled = Figures {
            busy: 1.0,
            dwell_p99_us: Some(80_000.0),
            forward_p99_us: Some(90_000.0),
            server_drops: 40,
            ingress_jitter_ms: Some(60.0),
            rtt_ms: Some(400.0),
            ..clean()
        };
        let j = judge(&stalled);
        assert_eq!(j.verdict, Verdict::Server);
        assert_eq!(
            figures(&j),
            vec!["shard_busy", "dwell_p99_us", "forward_p99_us"]
        );
        // Network loss never makes it the server's.
        let lossy = Figures {
            ingress_loss: Some(0.3),
            egress_loss: Some(0.3),
            ..clean()
        };
        assert_ne!(verdict(&lossy), Verdict::Server);
    }

    /// The cross-shard hop: a second in which the shard that subscribers
    /// are on held its peers' media 300 ms (a stall) is the server's, from
    /// that figure alone; a second of prompt hops, or too few to say, is not.
    #[test]
    fn a_late_cross_shard_hop_is_the_servers() {
        let start = ShardTotals::default();
        let with = |late: u64, prompt: u64| {
            let mut end = start;
            end.peer_hop.record_us_n(40, prompt);
            end.peer_hop.record_us_n(300_000, late);
            ShardSecond::between(0.2, &start, &end)
        };
        let judged = |second: ShardSecond| {
            judge(&Figures {
                peer_hop_p99_us: second.peer_hop_p99_us,
                ..clean()
            })
        };
        let stalled = with(30, 70);
        assert_eq!(stalled.peer_hop_p99_us, Some(300_000.0));
        let j = judged(stalled);
        assert_eq!(
            (j.verdict, j.evidence),
            (
                Verdict::Server,
                vec![Evidence {
                    figure: "peer_hop_p99_us",
                    value: 300_000.0,
                    threshold: PEER_HOP_P99_US
                }]
            )
        );
        // One late message in 200: under the p99, not the server.
        assert_eq!(judged(with(1, 199)).verdict, Verdict::Good);
        // Prompt hops: good.
        let prompt = with(0, 100);
        assert_eq!(prompt.peer_hop_p99_us, Some(50.0));
        assert_eq!(judged(prompt).verdict, Verdict::Good);
        // Fewer than MIN_SAMPLES messages in the second say nothing.
        assert_eq!(with(10, MIN_SAMPLES - 11).peer_hop_p99_us, None);
        // The other figures of a second are its differences too.
        let mut end = start;
        end.drops = 3;
        end.dwell.record_us_n(20_000, MIN_SAMPLES);
        let second = ShardSecond::between(0.5, &start, &end);
        assert_eq!(
            (second.drops, second.dwell_p99_us, second.forward_p99_us),
            (3, Some(20_000.0), None)
        );
    }

    #[test]
    fn a_lossy_or_jittery_uplink_is_the_publishers_before_the_subscribers() {
        let loss = judge(&Figures {
            ingress_loss: Some(LOSS),
            ..clean()
        });
        assert_eq!(
            (loss.verdict, figures(&loss)),
            (Verdict::PublisherUplink, vec!["ingress_loss"])
        );
        let jitter = Figures {
            ingress_jitter_ms: Some(JITTER_MS),
            ..clean()
        };
        assert_eq!(verdict(&jitter), Verdict::PublisherUplink);
        let both = Figures {
            ingress_loss: Some(0.2),
            egress_loss: Some(0.2),
            target: Some(0),
            ..clean()
        };
        assert_eq!(verdict(&both), Verdict::PublisherUplink);
        let under = Figures {
            ingress_loss: Some(LOSS - 0.001),
            ingress_jitter_ms: Some(JITTER_MS - 0.1),
            ..clean()
        };
        assert_eq!(verdict(&under), Verdict::Good);
    }

    #[test]
    fn a_held_layer_loss_or_a_risen_rtt_is_the_subscribers_downlink() {
        let held = judge(&Figures {
            target: Some(0),
            estimate_bps: Some(280_000),
            ..clean()
        });
        assert_eq!(held.verdict, Verdict::SubscriberDownlink);
        assert_eq!(
            held.evidence,
            vec![
                Evidence {
                    figure: "layer",
                    value: 0.0,
                    threshold: 2.0
                },
                Evidence {
                    figure: "estimate_bps",
                    value: 280_000.0,
                    threshold: 0.0
                },
            ]
        );
        let paused = Figures {
            target: None,
            ..clean()
        };
        assert_eq!(verdict(&paused), Verdict::SubscriberDownlink);
        // In a call's first seconds the estimate climbs: not yet a fault.
        let starting = Figures {
            target: Some(0),
            settled: false,
            ..clean()
        };
        assert_eq!(verdict(&starting), Verdict::Good);
        let starting_lossy = Figures {
            egress_loss: Some(0.2),
            ..starting
        };
        assert_eq!(verdict(&starting_lossy), Verdict::SubscriberDownlink);
        // Audio has no layers: only loss and RTT count.
        let audio = Figures {
            video: false,
            wanted: None,
            target: None,
            ..clean()
        };
        assert_eq!(verdict(&audio), Verdict::Good);
        let loss = Figures {
            egress_loss: Some(LOSS),
            ..audio.clone()
        };
        assert_eq!(verdict(&loss), Verdict::SubscriberDownlink);
        // RTT: twice the floor and 100 ms more, both.
        let rtt = |rtt, floor| {
            verdict(&Figures {
                rtt_ms: Some(rtt),
                rtt_floor_ms: Some(floor),
                ..audio.clone()
            })
        };
        assert_eq!(rtt(120.0, 20.0), Verdict::SubscriberDownlink);
        assert_eq!(rtt(119.0, 20.0), Verdict::Good, "less than 100 ms more");
        assert_eq!(rtt(300.0, 200.0), Verdict::Good, "less than twice");
        assert_eq!(rtt(400.0, 200.0), Verdict::SubscriberDownlink);
        // A slot at a layer above what it asks for is not held.
        let above = Figures {
            wanted: Some(1),
            target: Some(2),
            ..clean()
        };
        assert_eq!(verdict(&above), Verdict::Good);
    }

    #[test]
    fn names_and_letters_are_distinct() {
        let names: std::collections::HashSet<_> = Verdict::ALL.iter().map(|v| v.as_str()).collect();
        let letters: std::collections::HashSet<_> =
            Verdict::ALL.iter().map(|v| v.letter()).collect();
        assert_eq!((names.len(), letters.len()), (5, 5));
        assert_eq!(
            Verdict::ALL.iter().filter(|v| v.bad()).count(),
            3,
            "good and idle are not bad"
        );
        assert_eq!(
            serde_json::to_string(&Verdict::SubscriberDownlink).ok(),
            Some("\"subscriber_downlink\"".into())
        );
    }
}
