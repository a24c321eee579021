// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * corelay-dwell: UDP socket receive-queue dwell time, measured in the kernel.
 *
 * Dwell starts when a datagram becomes readable on a socket
 * (tp_btf/sk_data_ready, fired by __udp_enqueue_schedule_skb once per
 * datagram it queued) and ends when the application reads it
 * (tp_btf/sock_recv_length, fired by every recvmsg, also each datagram of a
 * recvmmsg). Each traced socket has a FIFO of enqueue timestamps in socket
 * local storage (freed by the kernel with the socket). The FIFO is
 * resynchronised against the real number of queued datagrams
 * (sk_receive_queue.qlen + udp_sock.reader_queue.qlen) on every event, so it
 * recovers from anything it did not see: drops, reads that bypass the
 * tracepoint, a backlog already there when tracing began. The FIFO holds
 * runs (timestamp, count); when all DWELL_RUNS are in use new datagrams are
 * folded into the newest run at their mean timestamp, which keeps the
 * dwell sum exact.
 *
 * Histograms, sum and count live in a hash map keyed by socket cookie; user
 * space polls it. Nothing is sent to user space per packet.
 */
#include <linux/bpf.h>
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "dwell.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define IPPROTO_UDP_ 17
#define IPPROTO_UDPLITE_ 136
#define SOCK_DGRAM_ 2
#define MSG_PEEK_ 0x2
#define MSG_ERRQUEUE_ 0x2000
#define RUN_MASK (DWELL_RUNS - 1)
/* Oldest runs a single trim may walk before giving up on exactness. 8 lost
 * the times of ~1 % of reads in a flood with kernel drops when the reader
 * was descheduled (CI: dwell.rs concurrent_flood_with_drops, 1 run in 7);
 * 32 lost none in 8 runs. Only a trim walks this far, never a plain read. */
#define TRIM_STEPS 32

struct run {
	__u64 ts; /* bpf_ktime_get_ns() when the datagrams became readable */
	__u32 n;  /* datagrams left in this run */
	__u32 pad;
};

struct fifo {
	struct bpf_spin_lock lock;
	__u32 head;    /* run index of the oldest run */
	__u32 tail;    /* run index one past the newest run */
	__u32 depth;   /* datagrams represented: unknown + sum of runs' n */
	__u32 unknown; /* oldest datagrams whose enqueue time is unknown */
	__u32 synced;  /* 0 while the storage is new (it starts zeroed) */
	struct run runs[DWELL_RUNS];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct fifo);
} dwell_fifo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DWELL_MAX_SOCKETS);
	__type(key, __u64);
	__type(value, struct dwell_stats);
} dwell_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dwell_cfg);
} dwell_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DWELL_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} dwell_counters SEC(".maps");

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&dwell_counters, &idx);

	if (c)
		*c += n;
}

static __always_inline struct dwell_cfg *config(void)
{
	__u32 zero = 0;
	struct dwell_cfg *cfg = bpf_map_lookup_elem(&dwell_cfg, &zero);

	if (!cfg || !cfg->enabled)
		return 0;
	return cfg;
}

/* A UDP (or UDP-Lite) datagram socket whose local port is in range. */
static __always_inline int traced_port(const struct sock *sk,
				       const struct dwell_cfg *cfg)
{
	__u16 proto = BPF_CORE_READ(sk, sk_protocol);
	__u16 type = BPF_CORE_READ(sk, sk_type);
	__u16 port;

	if (type != SOCK_DGRAM_)
		return -1;
	if (proto != IPPROTO_UDP_ && proto != IPPROTO_UDPLITE_)
		return -1;
	port = BPF_CORE_READ(sk, __sk_common.skc_num);
	if (port < cfg->port_lo || port > cfg->port_hi)
		return -1;
	return port;
}

/* Datagrams queued and not yet read, as the kernel counts them. */
static __always_inline __u32 queued(const struct sock *sk)
{
	const struct udp_sock *up = (const void *)sk;
	__u32 rq = BPF_CORE_READ(sk, sk_receive_queue.qlen);
	__u32 rd = BPF_CORE_READ(up, reader_queue.qlen);

	return rq + rd;
}

/* Drop the n oldest datagrams from the FIFO (caller holds the lock and
 * guarantees n <= depth). Returns how many timestamped ones were dropped. */
static __always_inline __u32 trim(struct fifo *q, __u32 n)
{
	__u32 dropped = 0;
	int i;

	if (n >= q->depth) {
		dropped = q->depth - q->unknown;
		q->head = q->tail;
		q->depth = 0;
		q->unknown = 0;
		return dropped;
	}
	if (n <= q->unknown) {
		q->unknown -= n;
		q->depth -= n;
		return 0;
	}
	n -= q->unknown;
	q->depth -= q->unknown;
	q->unknown = 0;
	for (i = 0; i < TRIM_STEPS; i++) {
		struct run *r;

		if (n == 0 || q->head == q->tail)
			break;
		r = &q->runs[q->head & RUN_MASK];
		if (r->n > n) {
			r->n -= n;
			q->depth -= n;
			dropped += n;
			n = 0;
			break;
		}
		n -= r->n;
		q->depth -= r->n;
		dropped += r->n;
		r->n = 0;
		q->head++;
	}
	if (n) {
		/* Too many runs to walk: keep the count, forget the times. */
		dropped += q->depth;
		q->depth -= n;
		q->unknown = q->depth;
		q->head = q->tail;
	}
	return dropped;
}

/* The stats entry of a socket, created on first use. reader: called from
 * the reading process, whose pid and command name are recorded. */
static __always_inline struct dwell_stats *stats_for(const struct sock *sk,
						     __u64 cookie, __u16 port,
						     int reader)
{
	struct dwell_stats *st = bpf_map_lookup_elem(&dwell_stats, &cookie);

	if (st)
		return st;
	{
		struct dwell_stats init = {};

		init.port = port;
		init.family = BPF_CORE_READ(sk, __sk_common.skc_family);
		if (reader) {
			init.tgid = bpf_get_current_pid_tgid() >> 32;
			bpf_get_current_comm(init.comm, sizeof(init.comm));
		}
		/* Fails with EEXIST when another CPU won the race; fine. */
		bpf_map_update_elem(&dwell_stats, &cookie, &init, BPF_NOEXIST);
	}
	st = bpf_map_lookup_elem(&dwell_stats, &cookie);
	if (!st)
		count(DWELL_CNT_STATS_FULL, 1);
	return st;
}

/* Enqueue time of the oldest timestamped datagram (caller holds the lock). */
static __always_inline __u64 oldest(struct fifo *q)
{
	if (q->unknown || q->head == q->tail)
		return 0;
	return q->runs[q->head & RUN_MASK].ts;
}

static __always_inline __u32 bucket(__u64 ns)
{
	if (ns < 10000)
		return 0;
	if (ns < 50000)
		return 1;
	if (ns < 100000)
		return 2;
	if (ns < 500000)
		return 3;
	if (ns < 1000000)
		return 4;
	if (ns < 5000000)
		return 5;
	if (ns < 10000000)
		return 6;
	if (ns < 50000000)
		return 7;
	return 8;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(dwell_enqueue, const struct sock *sk)
{
	struct dwell_cfg *cfg = config();
	struct dwell_stats *st;
	struct fifo *q;
	__u64 flags, now, old_ts;
	__u32 real, depth, pushed = 0, trimmed = 0, merged = 0;
	int port;

	if (!cfg)
		return 0;
	port = traced_port(sk, cfg);
	if (port < 0)
		return 0;
	/* With a pid filter the FIFO is created by that process's first read;
	 * the enqueue side cannot tell which process owns the socket. */
	flags = cfg->tgid ? 0 : BPF_SK_STORAGE_GET_F_CREATE;
	q = bpf_sk_storage_get(&dwell_fifo, (struct sock *)sk, 0, flags);
	if (!q) {
		if (flags)
			count(DWELL_CNT_FIFO_FAIL, 1);
		return 0;
	}
	real = queued(sk);
	now = bpf_ktime_get_ns();

	bpf_spin_lock(&q->lock);
	if (!q->synced) {
		/* First sight of this socket: the datagram that fired this event
		 * is new, anything older was queued before we looked. */
		q->synced = 1;
		if (real > 1 && real - 1 > q->depth) {
			q->unknown += real - 1 - q->depth;
			q->depth = real - 1;
		}
	}
	if (real > q->depth) {
		__u32 n = real - q->depth;
		struct run *r;

		if (q->tail - q->head >= DWELL_RUNS) {
			/* Ring full: fold the new datagrams into the newest run,
			 * whose timestamp becomes the members' mean. Each of them
			 * then reads the mean: the histogram is smeared a little
			 * but the sum, hence the mean dwell, stays exact. */
			r = &q->runs[(q->tail - 1) & RUN_MASK];
			if (now > r->ts)
				r->ts += (now - r->ts) * n / (r->n + n);
			r->n += n;
			merged = n;
		} else {
			r = &q->runs[q->tail & RUN_MASK];
			r->ts = now;
			r->n = n;
			q->tail++;
		}
		q->depth += n;
		pushed = n;
	} else if (real < q->depth) {
		trimmed = trim(q, q->depth - real);
	}
	depth = q->depth;
	old_ts = oldest(q);
	bpf_spin_unlock(&q->lock);

	count(DWELL_CNT_ENQUEUE_EVENTS, 1);
	if (pushed)
		count(DWELL_CNT_PUSHED, pushed);
	st = stats_for(sk, bpf_get_socket_cookie((struct sock *)sk), port, 0);
	if (!st)
		return 0;
	st->queued = depth;
	st->oldest_ns = old_ts;
	if (trimmed)
		__sync_fetch_and_add(&st->trimmed, trimmed);
	if (merged)
		__sync_fetch_and_add(&st->overflow, merged);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(dwell_dequeue, struct sock *sk, int ret, int flags)
{
	struct dwell_cfg *cfg;
	struct dwell_stats *st;
	struct fifo *q;
	__u64 now, ts = 0, old_ts;
	__u32 real, tgid, depth, trimmed = 0;
	int port, got = 0, unknown = 0;

	if (ret < 0 || (flags & (MSG_PEEK_ | MSG_ERRQUEUE_)))
		return 0;
	cfg = config();
	if (!cfg)
		return 0;
	port = traced_port(sk, cfg);
	if (port < 0)
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (cfg->tgid && cfg->tgid != tgid)
		return 0;
	q = bpf_sk_storage_get(&dwell_fifo, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!q) {
		count(DWELL_CNT_FIFO_FAIL, 1);
		return 0;
	}
	/* The datagram just read is already off the queue. */
	real = queued(sk);
	now = bpf_ktime_get_ns();

	bpf_spin_lock(&q->lock);
	if (!q->synced) {
		/* Never saw an enqueue: what was read and what is left were
		 * queued before tracing began. */
		q->synced = 1;
		if (real + 1 > q->depth) {
			q->unknown += real + 1 - q->depth;
			q->depth = real + 1;
		}
	}
	/* More entries than datagrams (the one read included): the oldest were
	 * consumed or dropped where we could not see it. */
	if (q->depth > real + 1)
		trimmed = trim(q, q->depth - (real + 1));
	if (q->unknown) {
		q->unknown--;
		q->depth--;
		unknown = 1;
	} else if (q->head != q->tail) {
		struct run *r = &q->runs[q->head & RUN_MASK];

		ts = r->ts;
		got = 1;
		q->depth--;
		if (r->n > 1) {
			r->n--;
		} else {
			r->n = 0;
			q->head++;
		}
	}
	depth = q->depth;
	old_ts = oldest(q);
	bpf_spin_unlock(&q->lock);

	count(DWELL_CNT_READS, 1);
	st = stats_for(sk, bpf_get_socket_cookie(sk), port, 1);
	if (!st)
		return 0;
	if (st->tgid != tgid) {
		st->tgid = tgid;
		bpf_get_current_comm(st->comm, sizeof(st->comm));
	}
	st->last_read_ns = now;
	st->queued = depth;
	st->oldest_ns = old_ts;
	if (trimmed)
		__sync_fetch_and_add(&st->trimmed, trimmed);
	if (got) {
		__u64 d = now > ts ? now - ts : 0;

		__sync_fetch_and_add(&st->buckets[bucket(d)], 1);
		__sync_fetch_and_add(&st->sum_ns, d);
		__sync_fetch_and_add(&st->count, 1);
		if (d > st->max_ns)
			st->max_ns = d;
	} else if (unknown) {
		__sync_fetch_and_add(&st->unknown, 1);
	} else {
		__sync_fetch_and_add(&st->unmatched, 1);
	}
	return 0;
}
