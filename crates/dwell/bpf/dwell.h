/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Layout shared by the BPF program and user space (src/bpf.rs mirrors these
 * structs with #[repr(C)]; keep them in sync).
 */
#ifndef CORELAY_DWELL_H
#define CORELAY_DWELL_H

/* Histogram edges in microseconds: [0,10) [10,50) ... [50000,+Inf). */
#define DWELL_NBUCKETS 9

/* Slots of the per-socket FIFO. A slot is a run: one enqueue timestamp and
 * the number of datagrams that became readable at that instant. */
#define DWELL_RUNS 512

#define DWELL_MAX_SOCKETS 4096

/* Key of the single entry of the config array. */
struct dwell_cfg {
	__u32 enabled;
	__u32 port_lo;  /* local port range, inclusive */
	__u32 port_hi;
	__u32 tgid;     /* 0: any process */
};

/* Per-socket statistics, key: socket cookie (u64). All counters are
 * cumulative since the socket was first seen; user space takes differences. */
struct dwell_stats {
	__u64 buckets[DWELL_NBUCKETS];
	__u64 sum_ns;     /* sum of dwell of the datagrams counted in buckets */
	__u64 count;      /* datagrams counted in buckets */
	__u64 max_ns;
	__u64 unknown;    /* reads of datagrams queued before tracing began */
	__u64 unmatched;  /* reads that found the FIFO empty */
	__u64 trimmed;    /* FIFO entries discarded by resynchronisation */
	__u64 overflow;   /* datagrams folded into the newest run (FIFO full):
			   * their bucket is approximate, the sum exact */
	__u64 last_read_ns; /* bpf_ktime_get_ns() of the last read */
	__u64 oldest_ns;  /* enqueue time of the oldest timestamped datagram
			   * still queued at the last event, 0 if none */
	__u32 queued;     /* datagrams queued at the last event */
	__u32 tgid;       /* process that last read the socket, 0 if none yet */
	__u16 port;       /* local port */
	__u16 family;     /* AF_INET / AF_INET6 */
	char comm[16];    /* command name of that process */
	__u32 pad;
};

_Static_assert(sizeof(struct dwell_cfg) == 16, "dwell_cfg layout (src/bpf.rs)");
_Static_assert(sizeof(struct dwell_stats) == 176, "dwell_stats layout (src/bpf.rs)");

/* Global counters (per-CPU array, index = enum value). */
enum dwell_counter {
	DWELL_CNT_ENQUEUE_EVENTS = 0, /* sk_data_ready on traced sockets */
	DWELL_CNT_READS,              /* sock_recv_length on traced sockets */
	DWELL_CNT_PUSHED,             /* datagrams stamped into FIFOs */
	DWELL_CNT_FIFO_FAIL,          /* socket storage could not be allocated */
	DWELL_CNT_STATS_FULL,         /* stats map full, socket not recorded */
	DWELL_CNT_MAX,
};

#endif
