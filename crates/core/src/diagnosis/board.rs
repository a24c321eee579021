//! The verdicts kept: each judged participant's slots with their latest
//! verdict and evidence, their last 60 verdicts, their seconds in each and
//! their worst minute, and the subscriber-seconds per verdict per shard.
//! The server's control thread and the simulator feed it once a second.
//! Must not: measure, log or judge itself ([`super::judge`] does).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{Evidence, Figures, Judgement, SETTLE, Verdict, judge};
use crate::directory::Directory;
use crate::ids::{ParticipantId, ShardId, TrackKey};
use crate::metrics::{LatencyHistogram, ParticipantStats};

/// Seconds of verdicts a slot keeps for the API.
const HISTORY: usize = 60;
/// A slot bad this many seconds in a row is worth a WARN...
pub const WARN_AFTER: u32 = 10;
/// ...at most this often per participant.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// A shard's own figures over its last second (the server reads them from
/// its reports, the simulator from its engines and its driver: both
/// through [`ShardSecond::between`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ShardSecond {
    pub busy: f64,
    pub dwell_p99_us: Option<f64>,
    pub forward_p99_us: Option<f64>,
    /// The cross-shard hop into this shard (`Engine::peer_hop`).
    pub peer_hop_p99_us: Option<f64>,
    pub drops: u64,
}

/// A shard's cumulative figures at one instant, as its reports carry them:
/// what [`ShardSecond::between`] takes the difference of.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ShardTotals {
    /// Socket dwell.
    pub dwell: LatencyHistogram,
    /// Forwarding latency, both hops (local and cross-shard).
    pub forward: LatencyHistogram,
    /// The cross-shard hop alone.
    pub peer_hop: LatencyHistogram,
    /// Packets the server dropped itself (send buffer full, a peer shard's
    /// lane full).
    pub drops: u64,
}

/// Fewer latency samples than this in a second say nothing of a p99.
pub const MIN_SAMPLES: u64 = 50;

impl ShardSecond {
    /// The second from `start` to `end` (cumulative totals) of a shard that
    /// was at most `busy` busy in it. A p99 is the upper edge of its
    /// histogram bucket; `None` with fewer than [`MIN_SAMPLES`] samples.
    pub fn between(busy: f64, start: &ShardTotals, end: &ShardTotals) -> ShardSecond {
        let p99 = |h: LatencyHistogram| {
            (h.count >= MIN_SAMPLES)
                .then(|| h.quantile_edge_us(0.99))
                .flatten()
                .map(|us| us as f64)
        };
        ShardSecond {
            busy,
            dwell_p99_us: p99(end.dwell.since(&start.dwell)),
            forward_p99_us: p99(end.forward.since(&start.forward)),
            peer_hop_p99_us: p99(end.peer_hop.since(&start.peer_hop)),
            drops: end.drops.saturating_sub(start.drops),
        }
    }

    /// Two shards' seconds as one hop sees them: the worse of each figure,
    /// the drops of both.
    fn both(self, other: ShardSecond) -> ShardSecond {
        let worse = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        ShardSecond {
            busy: self.busy.max(other.busy),
            dwell_p99_us: worse(self.dwell_p99_us, other.dwell_p99_us),
            forward_p99_us: worse(self.forward_p99_us, other.forward_p99_us),
            peer_hop_p99_us: worse(self.peer_hop_p99_us, other.peer_hop_p99_us),
            drops: self.drops + other.drops,
        }
    }
}

/// One slot of a subscriber, as judged.
struct Slot {
    mid: String,
    video: bool,
    /// The participant and track it showed at the last verdict.
    source: Option<TrackKey>,
    judgement: Judgement,
    history: VecDeque<Verdict>,
    seconds: [u64; Verdict::ALL.len()],
    /// Bad seconds in a row now.
    bad_run: u32,
    /// Seconds judged, and bad seconds in the current minute.
    judged: u64,
    minute_bad: u32,
    /// The worst whole minute so far: (its first second, bad seconds).
    worst: Option<(u64, u32)>,
}

impl Slot {
    fn new(mid: &str, video: bool) -> Slot {
        Slot {
            mid: mid.to_owned(),
            video,
            source: None,
            judgement: Judgement {
                verdict: Verdict::Idle,
                evidence: Vec::new(),
            },
            history: VecDeque::with_capacity(HISTORY),
            seconds: [0; Verdict::ALL.len()],
            bad_run: 0,
            judged: 0,
            minute_bad: 0,
            worst: None,
        }
    }

    fn record(&mut self, j: Judgement) {
        let v = j.verdict;
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(v);
        if let Some(s) = self.seconds.get_mut(index(v)) {
            *s += 1;
        }
        self.bad_run = if v.bad() { self.bad_run + 1 } else { 0 };
        self.minute_bad += u32::from(v.bad());
        self.judged += 1;
        if self.judged.is_multiple_of(60) {
            if self.minute_bad > 0 && self.worst.is_none_or(|(_, b)| self.minute_bad > b) {
                self.worst = Some((self.judged - 60, self.minute_bad));
            }
            self.minute_bad = 0;
        }
        self.judgement = j;
    }
}

impl Slot {
    /// The minute (from its first second, counted from the slot's first
    /// verdict) with the most bad seconds, the current one included.
    fn worst_minute(&self) -> Option<(u64, u32)> {
        let current =
            (self.minute_bad > 0).then(|| (self.judged - self.judged % 60, self.minute_bad));
        match (self.worst, current) {
            (Some(w), Some(c)) if c.1 > w.1 => Some(c),
            (Some(w), _) => Some(w),
            (None, c) => c,
        }
    }
}

fn index(v: Verdict) -> usize {
    Verdict::ALL.iter().position(|x| *x == v).unwrap_or(0)
}

/// A participant whose slots are judged.
struct Subject {
    /// The lowest RTT it had: what a rise is measured from.
    rtt_floor: Option<f64>,
    slots: Vec<Slot>,
    last_warn: Option<Instant>,
}

/// Every judged participant's slots: their verdicts, history and totals,
/// and the subscriber-seconds per verdict per shard.
#[derive(Default)]
pub struct Board {
    subjects: HashMap<ParticipantId, Subject>,
    /// Subscriber-seconds per verdict (in [`Verdict::ALL`]'s order), per
    /// shard: what the stats and Prometheus count.
    per_shard: Vec<[u64; Verdict::ALL.len()]>,
}

/// One slot in `GET …/diagnosis`.
#[derive(Serialize)]
pub struct SlotOut {
    pub mid: String,
    pub kind: &'static str,
    /// The participant it shows (null: empty).
    pub participant: Option<String>,
    pub verdict: Verdict,
    pub evidence: Vec<Evidence>,
    /// The last seconds' verdicts, oldest first, a letter each: g good,
    /// u publisher_uplink, d subscriber_downlink, s server, i idle.
    pub history: String,
    /// Seconds in each verdict since it joined.
    pub seconds: HashMap<&'static str, u64>,
}

impl Board {
    pub fn new(shards: usize) -> Board {
        Board {
            subjects: HashMap::new(),
            per_shard: vec![[0; Verdict::ALL.len()]; shards],
        }
    }

    /// Judges each slot of `st` (a participant on `shard`) for the second
    /// that ends at `now`: `detail` holds every participant's latest
    /// figures (the publishers' included), `rooms` the directory, `seconds`
    /// each shard's own figures for its last second. Returns a WARN's words
    /// when one of its slots has just been bad for 10 s (at most one a
    /// minute per participant).
    pub fn judge(
        &mut self,
        now: Instant,
        shard: ShardId,
        st: &ParticipantStats,
        detail: &HashMap<ParticipantId, ParticipantStats>,
        rooms: &Directory,
        seconds: &[ShardSecond],
    ) -> Option<String> {
        let (_, me) = rooms.member(st.id)?;
        let second = |s: ShardId| seconds.get(s.0).copied().unwrap_or_default();
        let here = second(shard);
        let settled = now.saturating_duration_since(me.joined) >= SETTLE;
        let rtt_floor = self
            .subjects
            .get(&st.id)
            .and_then(|s| s.rtt_floor)
            .into_iter()
            .chain(st.rtt_ms)
            .reduce(f64::min);
        let mut judgements = Vec::with_capacity(st.slots.len());
        for slot in &st.slots {
            let publisher = slot
                .source
                .and_then(|t| rooms.member(t.participant).map(|(_, m)| (m, t.mid)));
            let up = publisher.and_then(|(m, _)| detail.get(&m.id));
            // The publisher's shard too, when it is another.
            let server = publisher
                .map(|(m, _)| m.shard)
                .filter(|s| *s != shard)
                .map_or(here, |s| here.both(second(s)));
            let f = Figures {
                video: slot.video,
                source: publisher.map(|(m, mid)| m.state(mid)),
                shown: slot.shown,
                wanted: slot.wanted,
                target: slot.target,
                settled,
                ingress_loss: up.and_then(|u| u.ingress_loss).map(f64::from),
                ingress_jitter_ms: up.and_then(|u| u.ingress_jitter_ms),
                egress_loss: st.egress_loss.map(f64::from),
                rtt_ms: st.rtt_ms,
                rtt_floor_ms: rtt_floor,
                estimate_bps: st.estimate_bps,
                busy: server.busy,
                dwell_p99_us: server.dwell_p99_us,
                forward_p99_us: server.forward_p99_us,
                peer_hop_p99_us: server.peer_hop_p99_us,
                server_drops: server.drops,
            };
            judgements.push((slot, judge(&f), publisher.map(|(m, _)| m.name.clone())));
        }
        let subject = self.subjects.entry(st.id).or_insert_with(|| Subject {
            rtt_floor: None,
            slots: Vec::new(),
            last_warn: None,
        });
        subject.rtt_floor = rtt_floor;
        let mut counts = self.per_shard.get_mut(shard.0);
        let mut warn = None;
        for (slot, j, publisher_name) in judgements {
            let v = j.verdict;
            if let Some(c) = counts.as_deref_mut().and_then(|c| c.get_mut(index(v))) {
                *c += 1;
            }
            let i = match subject.slots.iter().position(|s| s.mid == slot.mid) {
                Some(i) => i,
                None => {
                    subject.slots.push(Slot::new(&slot.mid, slot.video));
                    subject.slots.len() - 1
                }
            };
            let Some(s) = subject.slots.get_mut(i) else {
                continue;
            };
            s.source = slot.source;
            s.record(j);
            if s.bad_run == WARN_AFTER && warn.is_none() {
                warn = Some(describe(&me.name, publisher_name.as_deref(), s));
            }
        }
        let words = warn?;
        if subject
            .last_warn
            .is_some_and(|at| now.saturating_duration_since(at) < WARN_EVERY)
        {
            return None;
        }
        subject.last_warn = Some(now);
        Some(words)
    }

    /// The participant left: its slots' totals and worst minutes (None if
    /// none was judged).
    pub fn left(&mut self, id: ParticipantId) -> Option<serde_json::Value> {
        let subject = self.subjects.remove(&id)?;
        let slots: Vec<serde_json::Value> = subject
            .slots
            .iter()
            .map(|s| {
                serde_json::json!({
                    "mid": s.mid,
                    "seconds": seconds(s),
                    "worst_minute": s.worst_minute().map(|(start, bad)| serde_json::json!({"from_s": start, "bad_s": bad})),
                })
            })
            .collect();
        (!slots.is_empty()).then(|| serde_json::json!({ "slots": slots }))
    }

    /// A participant's slots as judged last, with their history.
    pub fn view(&self, id: ParticipantId) -> Option<Vec<SlotOut>> {
        let subject = self.subjects.get(&id)?;
        Some(
            subject
                .slots
                .iter()
                .map(|s| SlotOut {
                    mid: s.mid.clone(),
                    kind: if s.video { "video" } else { "audio" },
                    participant: s.source.map(|t| t.participant.to_string()),
                    verdict: s.judgement.verdict,
                    evidence: s.judgement.evidence.clone(),
                    history: s.history.iter().map(|v| v.letter()).collect(),
                    seconds: seconds(s),
                })
                .collect(),
        )
    }

    /// Subscriber-seconds per verdict on `shard`: (name, seconds).
    pub fn shard_seconds(&self, shard: usize) -> Vec<(&'static str, u64)> {
        let counts = self.per_shard.get(shard).copied().unwrap_or_default();
        Verdict::ALL
            .iter()
            .zip(counts)
            .map(|(v, n)| (v.as_str(), n))
            .collect()
    }
}

fn seconds(s: &Slot) -> HashMap<&'static str, u64> {
    Verdict::ALL
        .iter()
        .zip(s.seconds)
        .map(|(v, n)| (v.as_str(), n))
        .collect()
}

/// A bad slot in words, for the WARN line.
fn describe(me: &str, publisher: Option<&str>, s: &Slot) -> String {
    let what = if s.video { "camera" } else { "microphone" };
    let from = publisher.map_or_else(|| "a track".to_owned(), |p| format!("{p}'s {what}"));
    let figures: Vec<String> = s
        .judgement
        .evidence
        .iter()
        .map(|e| {
            format!(
                "{} {} (bound {})",
                e.figure,
                short(e.value),
                short(e.threshold)
            )
        })
        .collect();
    let whose = match s.judgement.verdict {
        Verdict::PublisherUplink => format!("{}'s uplink", publisher.unwrap_or("the publisher")),
        Verdict::SubscriberDownlink => format!("{me}'s downlink"),
        Verdict::Server => "the server".to_owned(),
        Verdict::Good | Verdict::Idle => "nothing".to_owned(),
    };
    format!(
        "{me} gets {from} badly (slot {}): {whose}: {}",
        s.mid,
        figures.join(", ")
    )
}

fn short(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}
