//! CLOCK_MONOTONIC as plain nanoseconds.
//!
//! `abs-capture-time` carries an NTP timestamp. Publisher and subscriber run
//! on the same machine, so we put CLOCK_MONOTONIC into it (as `UNIX_EPOCH +
//! monotonic`), and the receiver subtracts its own CLOCK_MONOTONIC. That works
//! across processes, which `Instant` (opaque) does not.
//!
//! The sans-I/O [`crate::participant::Participant`] never reads a clock: it
//! turns the `now: Instant` its driver passes into nanoseconds through a
//! [`Clock`] mapping given at construction. A real driver uses
//! [`Clock::monotonic`] (CLOCK_MONOTONIC, so stamps compare across
//! processes); a simulation uses [`Clock::fixed`] on its virtual start.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Maps `Instant`s to nanoseconds on some clock: `anchor` is `anchor_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    /// A reference instant.
    pub anchor: Instant,
    /// What `anchor` is in nanoseconds on the target clock.
    pub anchor_ns: u64,
}

impl Clock {
    /// CLOCK_MONOTONIC, sampled once per process (every participant of a
    /// process shares one mapping). On Linux `Instant` is CLOCK_MONOTONIC,
    /// so the mapping is off by only the few ns between the two reads.
    pub fn monotonic() -> Clock {
        static MONO: OnceLock<Clock> = OnceLock::new();
        *MONO.get_or_init(|| {
            let anchor = Instant::now();
            Clock {
                anchor,
                anchor_ns: mono_ns(),
            }
        })
    }

    /// A mapping that says `anchor` is `anchor_ns` (virtual time).
    pub fn fixed(anchor: Instant, anchor_ns: u64) -> Clock {
        Clock { anchor, anchor_ns }
    }

    /// `t` in nanoseconds on this clock (saturating at 0).
    pub fn ns(&self, t: Instant) -> u64 {
        if t >= self.anchor {
            let d = (t - self.anchor).as_nanos().min(u128::from(u64::MAX)) as u64;
            self.anchor_ns.saturating_add(d)
        } else {
            let d = (self.anchor - t).as_nanos().min(u128::from(u64::MAX)) as u64;
            self.anchor_ns.saturating_sub(d)
        }
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds.
pub use corelay_thread::monotonic_ns as mono_ns;

/// Monotonic nanoseconds as the `SystemTime` we put in `abs-capture-time`.
pub fn mono_to_system(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

/// The inverse of [`mono_to_system`].
pub fn system_to_mono(t: SystemTime) -> Option<u64> {
    t.duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_roundtrip() {
        let a = mono_ns();
        let b = mono_ns();
        assert!(a > 0 && b >= a);
        assert_eq!(system_to_mono(mono_to_system(a)), Some(a));
    }

    #[test]
    fn mapping() {
        let t0 = Instant::now();
        let c = Clock::fixed(t0, 1_000);
        assert_eq!(c.ns(t0), 1_000);
        assert_eq!(c.ns(t0 + Duration::from_micros(3)), 4_000);
        let later = Clock::fixed(t0 + Duration::from_secs(1), 10);
        assert_eq!(later.ns(t0), 0);
        // The monotonic mapping agrees with CLOCK_MONOTONIC to within a millisecond.
        let m = Clock::monotonic();
        assert!(m.ns(Instant::now()).abs_diff(mono_ns()) < 1_000_000);
    }
}
