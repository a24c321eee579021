//! The calling thread's CPU: pinning it to one core, and the CPU time it
//! has used. Shared by corelay's shards and corelay-client's driver
//! threads, so both measure "busy" the same way.
//!
//! Owns the two `libc` calls and their safety arguments; nothing else (no
//! logging, no policy: callers decide what a failed pin means).

use std::time::Duration;

/// Pins the calling thread to `cpu` (best effort). False when `cpu` is out
/// of the range a `cpu_set_t` holds or the kernel refused (not allowed in
/// this cgroup or cpuset, offline).
pub fn pin_to_cpu(cpu: usize) -> bool {
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return false;
    }
    // SAFETY: cpu_set_t is a plain bitmask (all zeroes is an empty set);
    // CPU_SET writes bit `cpu`, within the set (checked above);
    // sched_setaffinity(0, ...) reads the set and pins the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID); zero if
/// the clock is unavailable. Busy fraction is this over wall time: time
/// spent preempted by other processes is not work.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_moves_with_work() {
        let before = thread_cpu();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(20) {
            x = x.wrapping_mul(31).wrapping_add(1);
        }
        std::hint::black_box(x);
        assert!(thread_cpu() > before);
    }

    #[test]
    fn out_of_range_cpus_are_refused() {
        assert!(!pin_to_cpu(usize::MAX));
        assert!(!pin_to_cpu(8 * std::mem::size_of::<libc::cpu_set_t>()));
    }
}
