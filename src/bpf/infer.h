/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Protocol recognition from the first (up to 15) bytes of a connection's first payload: cheap,
 * and allowed to be wrong the safe way (user space confirms before any call is counted, and a
 * connection recognised as nothing is only counted, never copied). Each protocol's rule is in
 * its folder, src/protocols/<folder>/infer.h; build.rs gathers them in the registry's order
 * into the generated ebtop_protocols.h, which defines infer_protocol(). This file holds what
 * the rules share and the kernel's own rule for TLS records; infer.bpf.c runs this very code
 * on a labelled corpus in the tests (the confusion matrix).
 */
#ifndef EBTOP_INFER_H
#define EBTOP_INFER_H

static __always_inline bool starts_with(const __u8 *p, __u32 n, const char *lit, __u32 litlen)
{
	if (n < litlen)
		return false;
	for (__u32 i = 0; i < litlen && i < 8; i++)
		if (p[i] != (__u8)lit[i])
			return false;
	return true;
}

static __always_inline bool is_digit(__u8 c)
{
	return c >= '0' && c <= '9';
}

static __always_inline bool is_alpha(__u8 c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/*
 * A TLS record on a stream: a handshake record that holds a ClientHello or ServerHello
 * (content type 22, version 3.0–3.4, handshake type 1 or 2), or — for connections open before
 * ebtop started — an application-data record of TLS 1.2/1.3 (type 23, version 3.3, a length
 * no record may exceed: 2^14 plus 2048 of expansion).
 */
static __always_inline bool is_tls(const __u8 *p, __u32 n)
{
	if (n < 5 || p[1] != 3)
		return false;
	__u32 len = ((__u32)p[3] << 8) | p[4];
	if (p[0] == 22)
		return n >= 6 && p[2] <= 4 && len >= 4 && (p[5] == 1 || p[5] == 2);
	return p[0] == 23 && p[2] == 3 && len > 0 && len <= 16384 + 2048;
}

/* The rules of every protocol, in the registry's order, and infer_protocol(). */
#include "ebtop_protocol_rules.h"

#endif
