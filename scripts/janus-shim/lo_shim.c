/*
 * LD_PRELOAD shim for benchmarking Janus on loopback (scripts/janus).
 *
 * Janus 1.1.2 enumerates interfaces with getifaddrs() when it gathers ICE
 * candidates and skips every interface flagged IFF_LOOPBACK before it even
 * looks at ice_enforce_list, so on 127.0.0.1 it offers no candidate at all
 * and ICE cannot start. This wrapper calls the real getifaddrs() and clears
 * IFF_LOOPBACK on "lo"; nothing else changes (the addresses are the real
 * ones, the kernel still routes them over loopback).
 *
 * Build: gcc -shared -fPIC -O2 -o lo_shim.so lo_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stddef.h>
#include <string.h>

typedef int (*getifaddrs_fn)(struct ifaddrs **);

int getifaddrs(struct ifaddrs **ifap)
{
	static getifaddrs_fn real;
	if (real == NULL)
		real = (getifaddrs_fn)dlsym(RTLD_NEXT, "getifaddrs");
	if (real == NULL)
		return -1;
	int rc = real(ifap);
	if (rc != 0 || ifap == NULL)
		return rc;
	for (struct ifaddrs *i = *ifap; i != NULL; i = i->ifa_next) {
		if (i->ifa_name != NULL && strcmp(i->ifa_name, "lo") == 0)
			i->ifa_flags &= ~(unsigned int)IFF_LOOPBACK;
	}
	return rc;
}
