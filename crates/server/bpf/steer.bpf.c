// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * corelay's shared-port steering (`--port-layout shared`): an
 * SK_REUSEPORT program attached to the reuseport group of the shards' UDP
 * sockets. It picks, for each datagram, the socket of the shard that owns
 * its flow, so that the engine's hand-over (crates/core/src/engine/
 * handoff.rs) is needed only for what this program cannot place.
 *
 *   1. A STUN binding request (type 0x0001, magic cookie 0x2112A442) goes
 *      to the shard named by the first two characters of its USERNAME
 *      ("server_ufrag:client_ufrag"), decoded as `ufrag_shard` in
 *      crates/core/src/offer.rs does (two ICE characters, base 64).
 *   2. Anything else from a source address and port in STEER_FLOWS (written
 *      by the owning shard when ICE authenticates the address, deleted when
 *      its participant leaves) goes to that shard.
 *   3. Anything else: no selection (SK_PASS), the kernel's hash picks, and
 *      the shard that gets it hands it over.
 *
 * STEER_SOCKS holds shard i's socket at index i. A shard index without a
 * socket there (or a socket of another group) makes bpf_sk_select_reuseport
 * fail, and the datagram goes by the hash as in 3.
 *
 * Compiled once by scripts/build-steer-bpf; the object beside this file is
 * what the server loads (no clang needed to build corelay).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define STEER_SHARDS 4096 /* UFRAG_SHARDS: what two ICE characters name */
#define STEER_FLOWS_MAX 262144
#define STUN_ATTRS_MAX 16 /* USERNAME comes first in practice */
#define UDP_HDR 8

/* Mirror of `FlowKey` in crates/server/src/shard/steer.rs: an IPv4 source
 * as its v4-mapped IPv6 address, the port in network order. */
struct flow_key {
	__u8 addr[16];
	__u16 port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, STEER_SHARDS);
	__type(key, __u32);
	__type(value, __u32);
} STEER_SOCKS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, STEER_FLOWS_MAX);
	__type(key, struct flow_key);
	__type(value, __u32);
} STEER_FLOWS SEC(".maps");

/* 0: steered by STUN ufrag, 1: steered by flow, 2: left to the hash,
 * 3: a selection the kernel refused (left to the hash). */
#define CNT_STUN 0
#define CNT_FLOW 1
#define CNT_PASS 2
#define CNT_FAIL 3
#define CNT_N 4

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_N);
	__type(key, __u32);
	__type(value, __u64);
} STEER_COUNTS SEC(".maps");

static __always_inline void count(__u32 what)
{
	__u64 *c = bpf_map_lookup_elem(&STEER_COUNTS, &what);
	if (c)
		*c += 1;
}

/* `ice_value` in crates/core/src/offer.rs; -1 for anything else. */
static __always_inline int ice_value(__u8 c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* The shard a STUN binding request names, or -1 (not one, no USERNAME, or
 * not two ICE characters first). */
static __always_inline int stun_shard(struct sk_reuseport_md *ctx)
{
	struct {
		__be16 type;
		__be16 len;
		__be32 cookie;
	} hdr;
	if (bpf_skb_load_bytes(ctx, UDP_HDR, &hdr, sizeof(hdr)) < 0)
		return -1;
	if (hdr.type != bpf_htons(0x0001) || hdr.cookie != bpf_htonl(0x2112A442))
		return -1;
	__u32 end = UDP_HDR + 20 + bpf_ntohs(hdr.len);
	__u32 off = UDP_HDR + 20;
	for (int i = 0; i < STUN_ATTRS_MAX; i++) {
		struct {
			__be16 type;
			__be16 len;
			__u8 value[2];
		} attr;
		if (off + 6 > end)
			return -1;
		if (bpf_skb_load_bytes(ctx, off, &attr, sizeof(attr)) < 0)
			return -1;
		__u16 alen = bpf_ntohs(attr.len);
		if (attr.type == bpf_htons(0x0006)) {
			if (alen < 2)
				return -1;
			int a = ice_value(attr.value[0]);
			int b = ice_value(attr.value[1]);
			if (a < 0 || b < 0)
				return -1;
			return a * 64 + b;
		}
		off += 4 + (((__u32)alen + 3) & ~3u);
	}
	return -1;
}

/* The datagram's source address and port, or -1. */
static __always_inline int flow_of(struct sk_reuseport_md *ctx, struct flow_key *key)
{
	__builtin_memset(key, 0, sizeof(*key));
	if (ctx->eth_protocol == bpf_htons(0x0800)) { /* ETH_P_IP */
		key->addr[10] = 0xff;
		key->addr[11] = 0xff;
		/* iphdr.saddr */
		if (bpf_skb_load_bytes_relative(ctx, 12, &key->addr[12], 4, BPF_HDR_START_NET) < 0)
			return -1;
	} else if (ctx->eth_protocol == bpf_htons(0x86DD)) { /* ETH_P_IPV6 */
		/* ipv6hdr.saddr */
		if (bpf_skb_load_bytes_relative(ctx, 8, &key->addr[0], 16, BPF_HDR_START_NET) < 0)
			return -1;
	} else {
		return -1;
	}
	/* udphdr.source: ctx's data starts at the UDP header. */
	if (bpf_skb_load_bytes(ctx, 0, &key->port, 2) < 0)
		return -1;
	return 0;
}

static __always_inline int select_shard(struct sk_reuseport_md *ctx, __u32 shard, __u32 how)
{
	if (bpf_sk_select_reuseport(ctx, &STEER_SOCKS, &shard, 0) == 0)
		count(how);
	else
		count(CNT_FAIL);
	return SK_PASS;
}

SEC("sk_reuseport")
int steer(struct sk_reuseport_md *ctx)
{
	if (ctx->ip_protocol != 17) /* IPPROTO_UDP */
		return SK_PASS;
	int shard = stun_shard(ctx);
	if (shard >= 0)
		return select_shard(ctx, (__u32)shard, CNT_STUN);
	struct flow_key key;
	if (flow_of(ctx, &key) == 0) {
		__u32 *owner = bpf_map_lookup_elem(&STEER_FLOWS, &key);
		if (owner)
			return select_shard(ctx, *owner, CNT_FLOW);
	}
	count(CNT_PASS);
	return SK_PASS;
}
