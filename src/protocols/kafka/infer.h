/* SPDX-License-Identifier: GPL-2.0 */
/* ebtop-kernel-rule: id=9 name=KAFKA rule=is_kafka sockets=stream */

/*
 * A Kafka request: a 4-byte big-endian length of 8 bytes to 16 MiB, then the request header:
 * an API key Kafka defines (0–92, as kafka/wire.rs names them), a version under 64, a
 * correlation id ≥ 0 and a client id that is null (-1) or 1–255 bytes starting with a
 * printable byte. A connection's first read of exactly 4 bytes holding a length of 10 bytes to
 * 4 KiB is one too: brokers (and the Java clients) read a message's length apart from its
 * body, so a broker's first read of a connection is those 4 bytes of its first request. User space's rule (kafka/mod.rs) is the same.
 */
static __always_inline bool is_kafka(const __u8 *p, __u32 n, bool dgram, __u64 pos)
{
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
