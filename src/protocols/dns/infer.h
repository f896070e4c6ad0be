/* SPDX-License-Identifier: GPL-2.0 */
/* ebtop-kernel-rule: id=4 name=DNS rule=is_dns sockets=any */

/*
 * A DNS header (RFC 1035) at h, `avail` bytes of it captured: opcode QUERY, Z clear, exactly
 * one question; a query also has no answer or authority records, at most 2 additional ones
 * (EDNS OPT, TSIG), rcode 0 and none of AA, TC, RA; a response at most 1024 records. The
 * question's first label is at most 63 bytes (if captured). User space's rule
 * (protocols/dns.rs) is this plus the whole question.
 */
static __always_inline bool dns_header_ok(const __u8 *h, __u32 avail)
{
	if (avail < 12)
		return false;
	if ((h[2] & 0x78) || (h[3] & 0x40) || h[4] || h[5] != 1)
		return false;
	if (h[2] & 0x80) {
		__u32 records = ((__u32)h[6] << 8 | h[7]) + ((__u32)h[8] << 8 | h[9]) +
				((__u32)h[10] << 8 | h[11]);
		if (records > 1024)
			return false;
	} else if ((h[2] & 0x06) || (h[3] & 0x8f) || h[6] || h[7] || h[8] || h[9] || h[10] ||
		   h[11] > 2) {
		return false;
	}
	return avail < 13 || h[12] <= 63;
}

/*
 * DNS: a datagram is one message; on a stream each message follows its 2-byte length, which a
 * server may read apart (dnsmasq reads it a byte at a time): a header at stream position 2 is
 * taken as the first message.
 */
static __always_inline bool is_dns(const __u8 *p, __u32 n, bool dgram, __u64 pos)
{
	if (dgram || pos == 2)
		return dns_header_ok(p, n);
	if (n < 14 || ((__u32)p[0] << 8 | p[1]) < 17)
		return false;
	return dns_header_ok(p + 2, n - 2);
}
