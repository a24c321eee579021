//! corelay-dwell: UDP socket receive-queue dwell time, traced with eBPF.
//!
//! The BPF program (`bpf/dwell.bpf.c`, built by `build.rs` when the `bpf`
//! feature is on) keeps a FIFO of enqueue timestamps per socket and
//! per-socket histograms in kernel maps. This crate polls those maps and
//! renders a live table, JSON lines and Prometheus text. See docs/dwell.md.

pub mod cli;
pub mod model;
pub mod promserver;
pub mod render;

#[cfg(feature = "bpf")]
pub mod bpf;

/// Exit status when the binary was built without the `bpf` feature.
pub const EXIT_NO_BPF_SUPPORT: u8 = 2;
/// Exit status when the BPF program cannot be loaded or attached here
/// (not root, no BTF, kernel too old...).
pub const EXIT_BPF_UNAVAILABLE: u8 = 3;

/// CLOCK_MONOTONIC in nanoseconds, the clock of `bpf_ktime_get_ns()`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
