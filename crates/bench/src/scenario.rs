//! Scenario plans: who joins which room when, and who speaks when. Pure
//! functions of the options and a seed, so they are unit-tested.

use std::time::Duration;

/// One planned join.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinPlan {
    /// Unique participant tag (also the driver key).
    pub tag: u64,
    /// When to POST, from the start of the run.
    pub at: Duration,
    /// Room index.
    pub room: usize,
    /// Index within the room.
    pub member: usize,
    /// Participant name (`r<room>-p<member>`).
    pub name: String,
}

/// Who speaks when (speakers scenario).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpeakerPlan {
    /// Each member speaks for this long, in turn.
    pub interval: Duration,
    /// The next speaker starts this much before the current one stops.
    pub overlap: Duration,
}

impl SpeakerPlan {
    /// Is `member` of a room of `size` speaking at `t` (from the start of the run)?
    /// Member k speaks in [k·I − overlap, (k+1)·I) modulo the cycle size·I.
    pub fn speaking(&self, member: usize, size: usize, t: Duration) -> bool {
        let i = self.interval.as_secs_f64().max(0.001);
        let cycle = i * size.max(1) as f64;
        let t = t.as_secs_f64() % cycle;
        let start = member as f64 * i;
        let end = start + i;
        let ov = self.overlap.as_secs_f64().min(i);
        let in_turn = |t: f64| t >= start - ov && t < end;
        in_turn(t) || in_turn(t - cycle) || in_turn(t + cycle)
    }
}

/// A whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// "rooms", "speakers" or "cluster".
    pub scenario: &'static str,
    /// Joins, sorted by time.
    pub joins: Vec<JoinPlan>,
    /// Room sizes (members planned).
    pub room_sizes: Vec<usize>,
    /// Time of the last planned join.
    pub last_join: Duration,
    /// When everyone leaves.
    pub end: Duration,
    /// Speaking schedule, if any.
    pub speakers: Option<SpeakerPlan>,
    /// Only the first this many members of each room publish (a webinar:
    /// 1); None: every member does.
    pub publishers: Option<usize>,
}

impl Plan {
    /// Does member `member` of a room publish?
    pub fn publishes(&self, member: usize) -> bool {
        self.publishers.is_none_or(|k| member < k)
    }

    /// The same plan under another scenario name.
    pub fn named(mut self, scenario: &'static str) -> Plan {
        self.scenario = scenario;
        self
    }
}

/// The article's scenario: a room every `room_interval`, its `room_size`
/// joins spread uniformly over `join_spread`, `max_rooms` rooms, then hold
/// for `duration` after the last join.
pub fn rooms(
    room_size: usize,
    room_interval: Duration,
    join_spread: Duration,
    max_rooms: usize,
    duration: Duration,
    seed: u64,
) -> Plan {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut joins = Vec::new();
    let mut tag = 0;
    for r in 0..max_rooms {
        let t0 = room_interval * r as u32;
        for m in 0..room_size {
            let off = Duration::from_secs_f64(join_spread.as_secs_f64() * rng.f64());
            joins.push(JoinPlan {
                tag,
                at: t0 + off,
                room: r,
                member: m,
                name: format!("r{r}-p{m}"),
            });
            tag += 1;
        }
    }
    finish("rooms", joins, vec![room_size; max_rooms], duration, None)
}

/// A webinar: one room, its publisher (member 0, `r0-p0`) joins first,
/// then `viewers` who only receive, spread uniformly over `join_spread`
/// from 0.5 s on; hold for `duration` after the last join.
pub fn webinar(viewers: usize, join_spread: Duration, duration: Duration, seed: u64) -> Plan {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut joins = vec![JoinPlan {
        tag: 0,
        at: Duration::ZERO,
        room: 0,
        member: 0,
        name: "r0-p0".into(),
    }];
    for m in 1..=viewers {
        let off = 0.5 + join_spread.as_secs_f64() * rng.f64();
        joins.push(JoinPlan {
            tag: m as u64,
            at: Duration::from_secs_f64(off),
            room: 0,
            member: m,
            name: format!("r0-p{m}"),
        });
    }
    let mut p = finish("webinar", joins, vec![viewers + 1], duration, None);
    p.publishers = Some(1);
    p
}

/// The conference scenario of reference 004: `participants` in rooms of
/// `room_size`, joins spread over `join_spread`, one speaker at a time.
pub fn speakers(
    participants: usize,
    room_size: usize,
    join_spread: Duration,
    duration: Duration,
    sp: SpeakerPlan,
    seed: u64,
) -> Plan {
    let mut rng = fastrand::Rng::with_seed(seed);
    let size = room_size.max(1);
    let rooms = participants.div_ceil(size);
    let mut sizes = Vec::new();
    let mut joins = Vec::new();
    for r in 0..rooms {
        let n = size.min(participants - r * size);
        sizes.push(n);
        for m in 0..n {
            let tag = (r * size + m) as u64;
            joins.push(JoinPlan {
                tag,
                at: Duration::from_secs_f64(join_spread.as_secs_f64() * rng.f64()),
                room: r,
                member: m,
                name: format!("r{r}-p{m}"),
            });
        }
    }
    finish("speakers", joins, sizes, duration, Some(sp))
}

fn finish(
    scenario: &'static str,
    mut joins: Vec<JoinPlan>,
    room_sizes: Vec<usize>,
    duration: Duration,
    speakers: Option<SpeakerPlan>,
) -> Plan {
    joins.sort_by(|a, b| a.at.cmp(&b.at).then(a.tag.cmp(&b.tag)));
    let last_join = joins.last().map(|j| j.at).unwrap_or_default();
    Plan {
        scenario,
        joins,
        room_sizes,
        last_join,
        end: last_join + duration,
        speakers,
        publishers: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_plan() {
        let p = rooms(
            4,
            Duration::from_secs(1),
            Duration::from_secs(15),
            3,
            Duration::from_secs(10),
            1,
        );
        assert_eq!(p.joins.len(), 12);
        assert!(p.joins.windows(2).all(|w| w[0].at <= w[1].at));
        for j in &p.joins {
            let t0 = j.room as f64;
            assert!(j.at.as_secs_f64() >= t0 && j.at.as_secs_f64() < t0 + 15.0);
        }
        assert_eq!(p.end, p.last_join + Duration::from_secs(10));
        let mut tags: Vec<u64> = p.joins.iter().map(|j| j.tag).collect();
        tags.sort();
        tags.dedup();
        assert_eq!(tags.len(), 12);
    }

    #[test]
    fn webinar_plan() {
        let p = webinar(5, Duration::from_secs(4), Duration::from_secs(10), 3);
        assert_eq!(p.joins.len(), 6);
        assert_eq!(p.room_sizes, vec![6]);
        assert_eq!(p.joins[0].name, "r0-p0");
        assert_eq!(p.joins[0].at, Duration::ZERO);
        assert!(
            p.joins[1..]
                .iter()
                .all(|j| j.at >= Duration::from_millis(500))
        );
        assert!(p.publishes(0) && !p.publishes(1));
        assert!(rooms(2, Duration::ZERO, Duration::ZERO, 1, Duration::ZERO, 1).publishes(1));
    }

    #[test]
    fn speakers_plan_and_rotation() {
        let sp = SpeakerPlan {
            interval: Duration::from_secs(4),
            overlap: Duration::from_millis(600),
        };
        let p = speakers(
            25,
            10,
            Duration::from_secs(5),
            Duration::from_secs(60),
            sp,
            2,
        );
        assert_eq!(p.room_sizes, vec![10, 10, 5]);
        assert_eq!(p.joins.len(), 25);
        let at = |s: f64| Duration::from_secs_f64(s);
        // Member 0 speaks [0,4) and again from 39.4 s (cycle 40 s).
        assert!(sp.speaking(0, 10, at(0.0)));
        assert!(sp.speaking(0, 10, at(3.9)));
        assert!(!sp.speaking(0, 10, at(4.1)));
        assert!(sp.speaking(0, 10, at(39.5)));
        // Handover: member 1 starts at 3.4 s, so both speak in [3.4, 4).
        assert!(sp.speaking(1, 10, at(3.5)));
        assert!(!sp.speaking(1, 10, at(3.3)));
        // Exactly one or two speakers at any time.
        for k in 0..400 {
            let t = at(k as f64 * 0.1 + 0.05);
            let n = (0..10).filter(|&m| sp.speaking(m, 10, t)).count();
            assert!(n == 1 || n == 2, "t={t:?} n={n}");
        }
    }
}
