//! Keyframe request policy: at most one request per track layer per
//! [`KEYFRAME_REQUEST_INTERVAL`]; a request inside the interval is remembered
//! and becomes due when the interval ends, unless a keyframe arrives first.
//!
//! A due-set (a heap of instants), so nothing scans tracks. Owns only track
//! keys and instants; must not send anything (the engine turns a decision
//! into a PLI on the publisher's `Rtc` or a message to its shard).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::ids::LayerKey;

/// A publisher gets at most one keyframe request per track per this interval.
pub(super) const KEYFRAME_REQUEST_INTERVAL: Duration = Duration::from_millis(300);

/// A deferred request, ordered by when it becomes due (only).
struct Due(Instant, LayerKey);

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

#[derive(Default)]
pub(super) struct Keyframes {
    /// When each track was last asked (only the last interval matters).
    last: super::IdMap<LayerKey, Instant>,
    /// Requests waiting for the interval to end.
    pending: super::IdSet<LayerKey>,
    due: BinaryHeap<Reverse<Due>>,
}

impl Keyframes {
    /// A request for `track` at `now`: true to send it now; false when it
    /// waits for the interval (it comes back from [`Keyframes::pop_due`]).
    pub(super) fn request(&mut self, now: Instant, track: LayerKey) -> bool {
        if let Some(&last) = self.last.get(&track)
            && now.saturating_duration_since(last) < KEYFRAME_REQUEST_INTERVAL
        {
            if self.pending.insert(track) {
                self.due
                    .push(Reverse(Due(last + KEYFRAME_REQUEST_INTERVAL, track)));
            }
            return false;
        }
        self.last.insert(track, now);
        self.pending.remove(&track);
        true
    }

    /// A keyframe of `track` arrived: a waiting request is moot.
    pub(super) fn arrived(&mut self, track: LayerKey) {
        self.pending.remove(&track);
    }

    /// The next waiting request whose interval ended by `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<LayerKey> {
        while let Some(Reverse(Due(t, track))) = self.due.peek() {
            let (t, track) = (*t, *track);
            if t > now {
                return None;
            }
            self.due.pop();
            if self.pending.remove(&track) {
                return Some(track);
            }
        }
        None
    }

    /// Forgets requests older than the interval: the map holds only what
    /// the last interval asked for.
    pub(super) fn prune(&mut self, now: Instant) {
        self.last
            .retain(|_, t| now.saturating_duration_since(*t) < KEYFRAME_REQUEST_INTERVAL);
    }

    pub(super) fn next(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse(Due(t, _))| *t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ParticipantId, TrackKey};

    fn track(n: u64) -> LayerKey {
        LayerKey {
            track: TrackKey {
                participant: ParticipantId(n),
                mid: "0".into(),
            },
            layer: 0,
        }
    }

    #[test]
    fn one_request_per_interval_and_the_rest_deferred_once() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut k = Keyframes::default();
        assert!(k.request(t0, track(1)));
        assert!(k.request(t0, track(2)), "tracks are independent");
        // Ten more inside the interval: one deferred request.
        for i in 0..10 {
            assert!(!k.request(t0 + ms(i * 10), track(1)));
        }
        assert_eq!(k.next(), Some(t0 + KEYFRAME_REQUEST_INTERVAL));
        assert_eq!(k.pop_due(t0 + ms(299)), None);
        assert_eq!(k.pop_due(t0 + ms(300)), Some(track(1)));
        assert_eq!(k.pop_due(t0 + ms(300)), None);
        assert!(k.request(t0 + ms(300), track(1)));
    }

    #[test]
    fn a_keyframe_cancels_the_deferred_request() {
        let t0 = Instant::now();
        let mut k = Keyframes::default();
        assert!(k.request(t0, track(1)));
        assert!(!k.request(t0, track(1)));
        k.arrived(track(1));
        assert_eq!(k.pop_due(t0 + KEYFRAME_REQUEST_INTERVAL), None);
        k.prune(t0 + KEYFRAME_REQUEST_INTERVAL);
        assert!(k.last.is_empty());
    }
}
