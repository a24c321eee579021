/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Minimal, hand-written subset of the kernel types the dwell tracer reads.
 *
 * Every struct carries preserve_access_index, so clang emits CO-RE
 * relocations for each field access and the loader (aya) rewrites the
 * offsets against the running kernel's BTF (/sys/kernel/btf/vmlinux).
 * Only the field names and sizes have to match the kernel, not the layout;
 * anonymous unions in the kernel (sock_common) are resolved by name.
 */
#ifndef CORELAY_DWELL_VMLINUX_MIN_H
#define CORELAY_DWELL_VMLINUX_MIN_H

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct sk_buff_head {
	__u32 qlen;
};

struct sock_common {
	__be32 skc_rcv_saddr;
	__u16 skc_num;
	unsigned short skc_family;
};

struct sock {
	struct sock_common __sk_common;
	struct sk_buff_head sk_receive_queue;
	__u16 sk_protocol;
	__u16 sk_type;
};

/* struct udp_sock starts with struct inet_sock, which starts with struct
 * sock; UDP keeps a second queue that recvmsg() drains first and refills by
 * splicing the whole sk_receive_queue into it. */
struct udp_sock {
	struct sk_buff_head reader_queue;
};

#pragma clang attribute pop

#endif
