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
pub use corelay_thread::monotonic_ns;
