//! The engine's deadlines: each participant's str0m timeout, each
//! participant's connect deadline and reconnect grace, and the room tick
//! (active speaker).
//!
//! One heap per kind with lazy deletion: an entry whose participant left, or
//! whose deadline moved, is skipped when it surfaces, so nothing is ever
//! scanned. Owns only instants and ids; must not call into a participant's
//! `Rtc` (the engine does that for each id this hands back).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::ids::ParticipantId;

/// How often rooms re-evaluate the active speaker.
pub(super) const ROOM_TICK: Duration = Duration::from_millis(250);

/// str0m's latest deadline for one participant, and the earliest entry the
/// heap holds for it (str0m moves its deadline often; the heap only gets a
/// new entry when the deadline moves earlier).
#[derive(Clone, Copy)]
struct RtcDeadline {
    timeout: Instant,
    scheduled: Option<Instant>,
}

#[derive(Default)]
pub(super) struct Timers {
    rtc_heap: BinaryHeap<Reverse<(Instant, ParticipantId)>>,
    rtc: super::IdMap<ParticipantId, RtcDeadline>,
    connect: BinaryHeap<Reverse<(Instant, ParticipantId)>>,
    grace: BinaryHeap<Reverse<(Instant, ParticipantId)>>,
    room_tick: Option<Instant>,
}

impl Timers {
    /// str0m's next deadline for `id` (from a drain).
    pub(super) fn set_rtc(&mut self, id: ParticipantId, t: Instant) {
        let e = self.rtc.entry(id).or_insert(RtcDeadline {
            timeout: t,
            scheduled: None,
        });
        e.timeout = t;
        if e.scheduled.is_none_or(|s| t < s) {
            e.scheduled = Some(t);
            self.rtc_heap.push(Reverse((t, id)));
        }
    }

    /// The next participant whose str0m timeout is due at `now`, if any.
    /// An entry superseded by a later deadline is rescheduled, not returned.
    pub(super) fn pop_rtc_due(&mut self, now: Instant) -> Option<ParticipantId> {
        while let Some(&Reverse((t, id))) = self.rtc_heap.peek() {
            if t > now {
                return None;
            }
            self.rtc_heap.pop();
            let Some(e) = self.rtc.get_mut(&id) else {
                continue; // it left
            };
            if e.scheduled != Some(t) {
                continue; // superseded by an earlier entry
            }
            e.scheduled = None;
            if e.timeout > now {
                // str0m moved its deadline later since we scheduled.
                e.scheduled = Some(e.timeout);
                self.rtc_heap.push(Reverse((e.timeout, id)));
                continue;
            }
            return Some(id);
        }
        None
    }

    /// `id` must be connected by `at`.
    pub(super) fn connect_by(&mut self, id: ParticipantId, at: Instant) {
        self.connect.push(Reverse((at, id)));
    }

    /// The next participant whose connect deadline passed (the engine
    /// checks whether it connected meanwhile).
    pub(super) fn pop_connect_due(&mut self, now: Instant) -> Option<ParticipantId> {
        match self.connect.peek() {
            Some(&Reverse((t, id))) if t <= now => {
                self.connect.pop();
                Some(id)
            }
            _ => None,
        }
    }

    /// `id`'s reconnect grace ends at `at` (the engine checks whether it is
    /// still down then, and since when).
    pub(super) fn grace_until(&mut self, id: ParticipantId, at: Instant) {
        self.grace.push(Reverse((at, id)));
    }

    /// The next participant whose reconnect grace ended.
    pub(super) fn pop_grace_due(&mut self, now: Instant) -> Option<ParticipantId> {
        match self.grace.peek() {
            Some(&Reverse((t, id))) if t <= now => {
                self.grace.pop();
                Some(id)
            }
            _ => None,
        }
    }

    /// Starts the room tick if it is not running.
    pub(super) fn start_room_tick(&mut self, now: Instant) {
        if self.room_tick.is_none() {
            self.room_tick = Some(now + ROOM_TICK);
        }
    }

    pub(super) fn stop_room_tick(&mut self) {
        self.room_tick = None;
    }

    /// Whether the room tick is due; if so, schedules the next one.
    pub(super) fn room_tick_due(&mut self, now: Instant) -> bool {
        if self.room_tick.is_some_and(|t| t <= now) {
            self.room_tick = Some(now + ROOM_TICK);
            true
        } else {
            false
        }
    }

    /// Forgets a participant that left (its heap entries are skipped).
    pub(super) fn forget(&mut self, id: ParticipantId) {
        self.rtc.remove(&id);
    }

    /// The earliest deadline of any kind.
    pub(super) fn next(&self) -> Option<Instant> {
        let rtc = self.rtc_heap.peek().map(|Reverse((t, _))| *t);
        let connect = self.connect.peek().map(|Reverse((t, _))| *t);
        let grace = self.grace.peek().map(|Reverse((t, _))| *t);
        [rtc, connect, grace, self.room_tick]
            .into_iter()
            .flatten()
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_deadline_is_rescheduled_and_a_departed_one_skipped() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (a, b) = (ParticipantId(1), ParticipantId(2));
        let mut timers = Timers::default();
        timers.set_rtc(a, t0 + ms(10));
        timers.set_rtc(b, t0 + ms(20));
        // a's deadline moves later: no new heap entry, but not due at 10 ms.
        timers.set_rtc(a, t0 + ms(30));
        assert_eq!(timers.next(), Some(t0 + ms(10)));
        assert_eq!(timers.pop_rtc_due(t0 + ms(15)), None);
        assert_eq!(timers.pop_rtc_due(t0 + ms(25)), Some(b));
        timers.forget(b);
        timers.set_rtc(b, t0 + ms(26));
        timers.forget(b);
        assert_eq!(timers.pop_rtc_due(t0 + ms(29)), None);
        assert_eq!(timers.pop_rtc_due(t0 + ms(30)), Some(a));
        assert_eq!(timers.pop_rtc_due(t0 + ms(30)), None);
    }

    #[test]
    fn room_tick_runs_until_stopped() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        timers.start_room_tick(t0);
        assert!(!timers.room_tick_due(t0));
        assert!(timers.room_tick_due(t0 + ROOM_TICK));
        assert_eq!(timers.next(), Some(t0 + 2 * ROOM_TICK));
        timers.stop_room_tick();
        assert_eq!(timers.next(), None);
    }
}
