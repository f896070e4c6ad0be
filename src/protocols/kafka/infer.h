/* SPDX-License-Identifier: GPL-2.0 */
/* ebtop-kernel-rule: id=9 name=KAFKA rule=is_kafka sockets=stream */

/*
 * A Kafka request: a 4-byte big-endian length of 8 bytes to 16 MiB, then the request header:
 * an API key Kafka defines (0–92, as kafka/wire.rs names them), a version under 64, a
 * correlation id ≥ 0 and a client id that is null (-1) or 1–255 bytes starting with a
 * printable byte. A connection's first read of exactly 4 bytes holding a length of 10 bytes to
 * 4 KiB is one too: brokers (and the Java clients) read a message's length apart from its
 * body, so a broker's first read of a connection is those 4 bytes of its first request. User space's rule (kafka/mod.rs) is the same at a connection's start; later, a body
 * read alone is taken too (is_kafka_body).
 */
/*
 * A request's header without its length, later in a connection (pos > 0): a broker reads a
 * request's 4-byte length apart from its body, so on a connection older than ebtop the
 * broker's first read ebtop sees may be a body. A known API key, a version under 64, a
 * correlation id >= 0 and a client id of 1-255 bytes whose bytes in the head are printable
 * (the Java clients and librdkafka always name themselves; a null client id is not taken
 * here: too little to tell). Kernel only: user space's rule judges a connection's first
 * bytes, where a request comes with its length.
 */
static __always_inline bool is_kafka_body(const __u8 *p, __u32 n)
{
	if (n < 11 || p[0] != 0 || p[1] > 92 || p[2] != 0 || p[3] >= 64 || p[4] >= 0x80)
		return false;
	if (p[8] != 0 || p[9] == 0)
		return false;
	__u32 end = 10 + (__u32)p[9];
#pragma unroll
	for (__u32 i = 10; i < 15; i++) {
		if (i >= n || i >= end)
			break;
		if (p[i] <= 0x20 || p[i] >= 0x7f)
			return false;
	}
	return true;
}

static __always_inline bool is_kafka(const __u8 *p, __u32 n, bool dgram, __u64 pos)
{
	if (pos != 0 && is_kafka_body(p, n))
		return true;
	if (n < 4 || p[0] != 0)
		return false;
	__u32 len = (__u32)p[1] << 16 | (__u32)p[2] << 8 | p[3];
	if (len < 8)
		return false;
	/* A length read alone: a connection's first request (ApiVersions, SaslHandshake or
	 * Metadata) is small, under 4 KiB; random 4-byte reads rarely are. */
	if (n == 4)
		return pos == 0 && len < 4096 && len >= 10;
	if (n < 14)
		return false;
	if (p[4] != 0 || p[5] > 92 || p[6] != 0 || p[7] >= 64 || p[8] >= 0x80)
		return false;
	if (p[12] == 0xff && p[13] == 0xff)
		return true;
	if (p[12] != 0 || p[13] == 0 || 10 + (__u32)p[13] > len)
		return false;
	return n == 14 || (p[14] > 0x20 && p[14] < 0x7f);
}
