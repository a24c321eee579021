//! Loading the BPF program with aya and reading its maps.

use std::fmt;

use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use aya::programs::{BtfTracePoint, ProgramError};
use aya::{Btf, Ebpf, EbpfLoader};

use crate::cli::PortRange;
use crate::model::{Counters, NBUCKETS, Snapshot, SocketStats};

/// The compiled BPF object (built by build.rs from bpf/dwell.bpf.c).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dwell.bpf.o"));

/// Mirror of `struct dwell_cfg` in bpf/dwell.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RawCfg {
    enabled: u32,
    port_lo: u32,
    port_hi: u32,
    tgid: u32,
}

/// Mirror of `struct dwell_stats` in bpf/dwell.h.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct RawStats {
    buckets: [u64; NBUCKETS],
    sum_ns: u64,
    count: u64,
    max_ns: u64,
    unknown: u64,
    unmatched: u64,
    trimmed: u64,
    overflow: u64,
    last_read_ns: u64,
    oldest_ns: u64,
    queued: u32,
    tgid: u32,
    port: u16,
    family: u16,
    comm: [u8; 16],
    pad: u32,
}

const _: () = assert!(std::mem::size_of::<RawCfg>() == 16);
const _: () = assert!(std::mem::size_of::<RawStats>() == 176);

// SAFETY: plain C structs of integers with no padding holes the kernel could
// leave uninitialised in a way that matters (all-zero is valid).
unsafe impl aya::Pod for RawCfg {}
// SAFETY: as above.
unsafe impl aya::Pod for RawStats {}

const CNT_ENQUEUE_EVENTS: u32 = 0;
const CNT_READS: u32 = 1;
const CNT_PUSHED: u32 = 2;
const CNT_FIFO_FAIL: u32 = 3;
const CNT_STATS_FULL: u32 = 4;

/// Why the tracer could not start.
#[derive(Debug)]
pub struct LoadError {
    /// What failed, for people.
    pub message: String,
    /// The verifier log or other detail, if any.
    pub detail: Option<String>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LoadError {}

fn err(message: impl Into<String>) -> LoadError {
    LoadError {
        message: message.into(),
        detail: None,
    }
}

/// `e` and its sources, joined: aya's messages leave the errno in the source.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let c_s = c.to_string();
        if !s.contains(&c_s) {
            s.push_str(": ");
            s.push_str(&c_s);
        }
        cur = c.source();
    }
    s
}

fn privilege_hint() -> &'static str {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        ""
    } else {
        " (not running as root: run as root, or give the binary CAP_BPF and CAP_PERFMON, \
         e.g. `sudo setcap cap_bpf,cap_perfmon+ep corelay-dwell`)"
    }
}

fn program_error(what: &str, e: ProgramError) -> LoadError {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => LoadError {
            message: format!(
                "the kernel refused to load the {what} program: {}{}",
                chain(&io_error),
                privilege_hint()
            ),
            detail: Some(verifier_log.to_string()),
        },
        e => err(format!(
            "cannot load or attach the {what} program: {}{}",
            chain(&e),
            privilege_hint()
        )),
    }
}

/// Parameters of a tracing session.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Local ports to trace.
    pub ports: PortRange,
    /// Only reads by this process, if set.
    pub pid: Option<u32>,
}

/// A loaded and attached tracer. Dropping it detaches the programs.
pub struct Tracer {
    _ebpf: Ebpf,
    stats: HashMap<MapData, u64, RawStats>,
    counters: PerCpuArray<MapData, u64>,
}

impl Tracer {
    /// Loads the programs, writes the configuration and attaches both
    /// tracepoints. Every failure is returned with a readable reason.
    pub fn load(cfg: &Config) -> Result<Tracer, LoadError> {
        let btf = Btf::from_sys_fs().map_err(|e| {
            err(format!(
                "kernel BTF is not available (/sys/kernel/btf/vmlinux: {}); \
                 this tracer needs a kernel built with CONFIG_DEBUG_INFO_BTF=y",
                chain(&e)
            ))
        })?;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .load(OBJECT)
            .map_err(|e| {
                err(format!(
                    "cannot load the BPF object (maps or CO-RE relocation): {}{}",
                    chain(&e),
                    privilege_hint()
                ))
            })?;

        let mut cfg_map: Array<_, RawCfg> = Array::try_from(
            ebpf.map_mut("dwell_cfg")
                .ok_or_else(|| err("BPF object has no dwell_cfg map"))?,
        )
        .map_err(|e| err(format!("dwell_cfg map: {}", chain(&e))))?;
        let raw = RawCfg {
            enabled: 1,
            port_lo: u32::from(cfg.ports.lo),
            port_hi: u32::from(cfg.ports.hi),
            tgid: cfg.pid.unwrap_or(0),
        };
        cfg_map
            .set(0, raw, 0)
            .map_err(|e| err(format!("cannot write the configuration map: {}", chain(&e))))?;

        // Attach the read side first: a read without a matching enqueue is
        // counted as unknown, whereas enqueues without reads would pile up.
        for (prog, tp) in [
            ("dwell_dequeue", "sock_recv_length"),
            ("dwell_enqueue", "sk_data_ready"),
        ] {
            let p: &mut BtfTracePoint = ebpf
                .program_mut(prog)
                .ok_or_else(|| err(format!("BPF object has no program {prog}")))?
                .try_into()
                .map_err(|e| err(format!("program {prog}: {}", chain(&e))))?;
            p.load(tp, &btf).map_err(|e| match e {
                ProgramError::Btf(b) => err(format!(
                    "this kernel has no BTF tracepoint {tp} ({b}); it needs Linux 6.3 or newer"
                )),
                e => program_error(tp, e),
            })?;
            p.attach().map_err(|e| program_error(tp, e))?;
        }

        let stats = HashMap::try_from(
            ebpf.take_map("dwell_stats")
                .ok_or_else(|| err("BPF object has no dwell_stats map"))?,
        )
        .map_err(|e| err(format!("dwell_stats map: {}", chain(&e))))?;
        let counters = PerCpuArray::try_from(
            ebpf.take_map("dwell_counters")
                .ok_or_else(|| err("BPF object has no dwell_counters map"))?,
        )
        .map_err(|e| err(format!("dwell_counters map: {}", chain(&e))))?;
        Ok(Tracer {
            _ebpf: ebpf,
            stats,
            counters,
        })
    }

    fn counter(&self, idx: u32) -> u64 {
        self.counters
            .get(&idx, 0)
            .map(|v| v.iter().fold(0u64, |a, b| a.wrapping_add(*b)))
            .unwrap_or(0)
    }

    /// Reads every socket's statistics and the global counters. Entries
    /// that vanish while iterating are skipped.
    pub fn snapshot(&self) -> Snapshot {
        let mono_ns = crate::monotonic_ns();
        let mut snap = Snapshot {
            mono_ns,
            ..Snapshot::default()
        };
        for (cookie, raw) in self.stats.iter().flatten() {
            let comm_len = raw
                .comm
                .iter()
                .position(|&c| c == 0)
                .unwrap_or(raw.comm.len());
            snap.sockets.insert(
                cookie,
                SocketStats {
                    cookie,
                    port: raw.port,
                    family: raw.family,
                    pid: raw.tgid,
                    comm: String::from_utf8_lossy(&raw.comm[..comm_len]).into_owned(),
                    buckets: raw.buckets,
                    sum_ns: raw.sum_ns,
                    count: raw.count,
                    max_ns: raw.max_ns,
                    unknown: raw.unknown,
                    unmatched: raw.unmatched,
                    trimmed: raw.trimmed,
                    overflow: raw.overflow,
                    last_read_ns: raw.last_read_ns,
                    oldest_ns: raw.oldest_ns,
                    queued: raw.queued,
                },
            );
        }
        snap.counters = Counters {
            enqueue_events: self.counter(CNT_ENQUEUE_EVENTS),
            reads: self.counter(CNT_READS),
            pushed: self.counter(CNT_PUSHED),
            fifo_fail: self.counter(CNT_FIFO_FAIL),
            stats_full: self.counter(CNT_STATS_FULL),
        };
        snap
    }

    /// Forgets sockets with no event for `idle_ns` (closed sockets keep
    /// their entry otherwise, and the map is bounded).
    pub fn prune(&mut self, snap: &Snapshot, idle_ns: u64) -> usize {
        let mut removed = 0;
        for s in snap.sockets.values() {
            let last = s.last_read_ns.max(s.oldest_ns);
            if last != 0
                && snap.mono_ns.saturating_sub(last) > idle_ns
                && s.queued == 0
                && self.stats.remove(&s.cookie).is_ok()
            {
                removed += 1;
            }
        }
        removed
    }
}
