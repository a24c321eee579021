//! CLOCK_MONOTONIC as plain nanoseconds.
//!
//! `abs-capture-time` carries an NTP timestamp. Publisher and subscriber run
//! on the same machine, so we put CLOCK_MONOTONIC into it (as `UNIX_EPOCH +
//! monotonic`), and the receiver subtracts its own CLOCK_MONOTONIC. That works
//! across processes, which `Instant` (opaque) does not.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

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
}
