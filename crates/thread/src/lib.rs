//! The calling thread's CPU: pinning it to one core, the CPU time it has
//! used, and its place among its process's real-time threads; and the
//! kernel's clocks ([`clock`], [`monotonic_ns`]), read in one place. Shared
//! by corelay's shards, corelay-client's driver threads and the dwell
//! tracer, so all measure "busy" and "now" the same way.
//!
//! Owns those `libc` calls and their safety arguments; nothing else (no
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
    clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(Duration::ZERO)
}

/// A kernel clock's reading (`clock_gettime`): CLOCK_MONOTONIC, another
/// thread's CPU clock (`pthread_getcpuclockid`), …; `None` if the clock is
/// gone (a thread that ended) or unknown.
pub fn clock(id: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let r = unsafe { libc::clock_gettime(id, &mut ts) };
    if r != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    ))
}

/// CLOCK_MONOTONIC in nanoseconds (0 if unreadable): the clock of the
/// kernel's `bpf_ktime_get_ns()` and of the stamps corelay's clients put
/// in `abs-capture-time`.
pub fn monotonic_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Under a real-time policy (SCHED_RR or SCHED_FIFO, as `chrt -r 10`
/// starts a whole process), raises the calling thread one priority above
/// the one it inherited and returns the new one. Its process's other
/// threads keep the inherited priority, and at an equal one a thread that
/// is woken waits until the running one blocks (SCHED_RR's slice is
/// 100 ms): a data-plane thread must not wait behind its process's
/// bookkeeping on its core. `None`, and nothing changed, under any other
/// policy or where the kernel refuses.
pub fn rise_above_siblings() -> Option<i32> {
    // SAFETY: sched_getscheduler(0) reads the calling thread's policy.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy != libc::SCHED_RR && policy != libc::SCHED_FIFO {
        return None;
    }
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_getparam(0, ...) writes one sched_param we own.
    if unsafe { libc::sched_getparam(0, &mut param) } != 0 {
        return None;
    }
    // SAFETY: takes and returns plain integers.
    let max = unsafe { libc::sched_get_priority_max(policy) };
    param.sched_priority = (param.sched_priority + 1).min(max);
    // SAFETY: sched_setscheduler(0, ...) reads one sched_param we own and
    // changes the calling thread only (on Linux a thread is a task).
    let ok = unsafe { libc::sched_setscheduler(0, policy, &param) } == 0;
    ok.then_some(param.sched_priority)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy_and_priority() -> (i32, i32) {
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: as in `rise_above_siblings`.
        unsafe {
            libc::sched_getparam(0, &mut param);
            (libc::sched_getscheduler(0), param.sched_priority)
        }
    }

    #[test]
    fn a_thread_rises_above_its_siblings_only_under_a_real_time_policy() {
        std::thread::spawn(|| {
            // The default policy: nothing changes.
            assert_eq!(rise_above_siblings(), None);
            assert_eq!(policy_and_priority(), (libc::SCHED_OTHER, 0));
            let param = libc::sched_param { sched_priority: 10 };
            // SAFETY: as in `rise_above_siblings`.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &param) } != 0 {
                eprintln!("SKIPPED the real-time half: SCHED_RR refused (no CAP_SYS_NICE)");
                return;
            }
            assert_eq!(rise_above_siblings(), Some(11));
            assert_eq!(policy_and_priority(), (libc::SCHED_RR, 11));
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    }

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
